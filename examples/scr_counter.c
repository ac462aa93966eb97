/*
 * scr_counter.c -- a program written against SCR's API (scr.h), built unchanged against
 * Cairn's libscr.
 *
 * Each rank owns an array of doubles that it advances by one step at a time. Every
 * SCR_Need_checkpoint it writes the array and the step to a file of its own, routed through
 * SCR; on start it asks SCR for a restart and reads its file back. A run that is killed and
 * started again continues from its newest checkpoint and prints the same final sum as an
 * uninterrupted run.
 *
 * Build and run (README "Moving from SCR, FTI or VeloC"):
 *   mpicc -o scr_counter examples/scr_counter.c -I build/include -L build/lib -lscr \
 *         -Wl,-rpath,$PWD/build/lib
 *   SCR_PREFIX=$PWD/scr-run SCR_COPY_TYPE=XOR mpirun -n 4 ./scr_counter [steps] [every]
 * Output lines start with "scr_counter:". Exit codes: 0 success, 1 an SCR call failed.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "scr.h"

#define N 4096

static int rank;

static void check(int rc, const char *what)
{
    if (rc != SCR_SUCCESS) {
        fprintf(stderr, "scr_counter: rank %d: %s failed\n", rank, what);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

/* Write (step, field) to this rank's checkpoint file; returns 1 when every byte was written. */
static int save(const char *path, long step, const double *field)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    int ok = fwrite(&step, sizeof step, 1, f) == 1 && fwrite(field, sizeof *field, N, f) == N;
    return fclose(f) == 0 && ok;
}

/* Read (step, field) back; returns 1 when the file held a whole checkpoint. */
static int load(const char *path, long *step, double *field)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    int ok = fread(step, sizeof *step, 1, f) == 1 && fread(field, sizeof *field, N, f) == N;
    fclose(f);
    return ok;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    long steps = argc > 1 ? atol(argv[1]) : 100, every = argc > 2 ? atol(argv[2]) : 10;
    if (steps < 0 || every < 1) {
        if (rank == 0)
            fprintf(stderr, "usage: scr_counter [steps >= 0] [every >= 1]\n");
        MPI_Finalize();
        return 2;
    }
    check(SCR_Init(), "SCR_Init");

    static double field[N];
    for (int i = 0; i < N; i++)
        field[i] = rank + i * 1e-3;
    long step = 0;
    char file[64], path[SCR_MAX_FILENAME], name[SCR_MAX_FILENAME];
    snprintf(file, sizeof file, "rank%d.dat", rank);

    int have = 0;
    check(SCR_Have_restart(&have, name), "SCR_Have_restart");
    if (have) {
        check(SCR_Start_restart(name), "SCR_Start_restart");
        check(SCR_Route_file(file, path), "SCR_Route_file");
        int ok = load(path, &step, field);
        check(SCR_Complete_restart(ok), "SCR_Complete_restart");
        if (rank == 0)
            printf("scr_counter: restarted from %s at step %ld\n", name, step);
    }

    while (step < steps) {
        for (int i = 0; i < N; i++)
            field[i] = field[i] * 0.9999 + (double)(i % 13) * 1e-3;
        step++;
        if (step % every != 0)
            continue;
        int need = 0;
        check(SCR_Need_checkpoint(&need), "SCR_Need_checkpoint");
        if (!need)
            continue;
        char label[32];
        snprintf(label, sizeof label, "step.%ld", step);
        check(SCR_Start_output(label, SCR_FLAG_CHECKPOINT), "SCR_Start_output");
        check(SCR_Route_file(file, path), "SCR_Route_file");
        check(SCR_Complete_output(save(path, step, field)), "SCR_Complete_output");
        if (rank == 0)
            printf("scr_counter: step %ld checkpoint %s\n", step, label);
    }

    double local = 0.0, sum = 0.0;
    for (int i = 0; i < N; i++)
        local += field[i];
    MPI_Reduce(&local, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("scr_counter: steps %ld sum %.6f\n", step, sum);
    check(SCR_Finalize(), "SCR_Finalize");
    MPI_Finalize();
    return 0;
}
