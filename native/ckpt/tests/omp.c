/* An OpenMP reduction repeated many times; each repetition's result is checked, and the
 * final line says whether all were right. Threads: OMP_NUM_THREADS. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 200;
    long n = 2000000;
    int bad = 0;
    printf("omp: %d threads\n", omp_get_max_threads());
    fflush(stdout);
    for (int r = 0; r < reps; r++) {
        double s = 0;
#pragma omp parallel for reduction(+ : s)
        for (long i = 1; i <= n; i++)
            s += (double)(i % 1000);
        double want = (double)(n / 1000) * 499500.0;
        if (s != want) {
            printf("omp: rep %d got %f want %f\n", r, s, want);
            bad = 1;
        }
        printf("rep %d\n", r);
        fflush(stdout);
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    printf("omp: done %s\n", bad ? "BAD" : "OK");
    return bad;
}
