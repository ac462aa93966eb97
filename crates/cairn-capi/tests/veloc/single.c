/*
 * single.c -- a process that checkpoints on its own with VELOC_Init_single: no MPI_Init, no
 * group; its versions are its own, so processes with different ids sharing the same storage
 * restart each from its own newest version. Built against Cairn's veloc.h, linked with
 * -lveloc only.
 *
 * The state is a step counter and an array that is a running function of the steps taken;
 * every --every steps the process checkpoints with VELOC_Checkpoint. On start it restarts
 * from VELOC_Restart_test's version and checks the restored array against a recomputation.
 *
 * Usage: single CONFIG ID [--steps N] [--every K]
 * Output (stdout):
 *   single: id <id> restored v<v>
 *   single: id <id> fresh
 *   single: id <id> finished step <n> sum <value>
 * Exit codes: 0 success, 2 bad arguments, 5 a VeloC call failed or restored wrong data.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <veloc.h>

#define N 4096

static unsigned id;
static int step;
static double x[N];

static void advance(double *v, int s)
{
    for (int k = 0; k < N; k++)
        v[k] = v[k] * 0.5 + (double)(k % 13) + (double)s * (double)(id + 1);
}

static void failed(const char *what)
{
    fprintf(stderr, "single: id %u: %s\n", id, what);
    exit(5);
}

int main(int argc, char **argv)
{
    int steps = 10, every = 2;
    if (argc < 3)
        goto usage;
    id = (unsigned)atoi(argv[2]);
    for (int i = 3; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--steps") == 0)
            steps = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--every") == 0)
            every = atoi(argv[i + 1]);
        else
            goto usage;
    }
    if (every < 1 || argc % 2 == 0)
        goto usage;

    if (VELOC_Init_single(id, argv[1]) != VELOC_SUCCESS)
        return 5;
    if (VELOC_Mem_protect(0, &step, 1, sizeof step) != VELOC_SUCCESS ||
        VELOC_Mem_protect(1, x, N, sizeof x[0]) != VELOC_SUCCESS)
        failed("VELOC_Mem_protect failed");
    int v = VELOC_Restart_test("single", 0);
    if (v >= 0) {
        if (VELOC_Restart("single", v) != VELOC_SUCCESS)
            failed("VELOC_Restart failed");
        static double want[N];
        for (int s = 0; s < v; s++)
            advance(want, s);
        if (step != v || memcmp(want, x, sizeof x) != 0)
            failed("the restored data is not the checkpoint's");
        printf("single: id %u restored v%d\n", id, v);
    } else {
        printf("single: id %u fresh\n", id);
    }
    for (; step < steps; step++) {
        if (step % every == 0 && VELOC_Checkpoint("single", step) != VELOC_SUCCESS)
            failed("VELOC_Checkpoint failed");
        advance(x, step);
    }
    if (VELOC_Checkpoint("single", step) != VELOC_SUCCESS)
        failed("VELOC_Checkpoint failed");
    double sum = 0;
    for (int k = 0; k < N; k++)
        sum += x[k];
    printf("single: id %u finished step %d sum %.17g\n", id, step, sum);
    if (VELOC_Finalize(1) != VELOC_SUCCESS)
        failed("VELOC_Finalize failed");
    return 0;

usage:
    fprintf(stderr, "usage: single CONFIG ID [--steps N] [--every K]\n");
    return 2;
}
