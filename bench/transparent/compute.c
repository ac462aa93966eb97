/*
** compute.c: a fixed amount of arithmetic on a small array, for cairn-bench-transparent's
** overhead measurement (run plain and with libcairn-ckpt.so preloaded, never checkpointed).
**
**     compute PASSES
**
** Two arrays of 2048 doubles (32 KiB, in the L1 and L2 caches) are updated PASSES times by a
** recurrence that stays bounded, so no pass can be skipped and no value turns denormal. It
** prints "loop SECONDS CPU_SECONDS SUM": CLOCK_MONOTONIC and the thread's CPU time
** (CLOCK_THREAD_CPUTIME_ID) around the passes, and a sum of the result that the compiler has
** to compute. On a shared machine the two differ by the time other work held the CPU.
*/
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define N 2048

static double a[N], b[N];

static double now(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc != 2 || atol(argv[1]) <= 0) {
        fprintf(stderr, "usage: compute PASSES\n");
        return 2;
    }
    long passes = atol(argv[1]);
    for (int i = 0; i < N; i++) {
        a[i] = 1.0 + i * 1e-3;
        b[i] = 2.0 - i * 1e-4;
    }
    double t0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_THREAD_CPUTIME_ID);
    for (long p = 0; p < passes; p++)
        for (int i = 0; i < N; i++) {
            a[i] = a[i] * 0.999 + b[i] * 1e-3;
            b[i] = b[i] * 0.998 + a[i] * 2e-3;
        }
    double t1 = now(CLOCK_MONOTONIC), c1 = now(CLOCK_THREAD_CPUTIME_ID);
    double s = 0;
    for (int i = 0; i < N; i++)
        s += a[i] + b[i];
    printf("loop %.9f %.9f %.6f\n", t1 - t0, c1 - c0, s);
    return 0;
}
