/*
 * heat2d.c -- a 2D heat-diffusion example that checkpoints and restarts with Cairn.
 *
 * The program solves the heat equation on an N x N grid with a Jacobi 5-point stencil. The grid
 * is split into contiguous blocks of rows, one block per rank (the rank count must divide N);
 * each rank keeps one halo row above and below its block and exchanges them with its neighbours
 * (MPI_Sendrecv) at the start of every step. The outer edge of the grid is fixed: the top edge is
 * held at 1.0 and the other three at 0.0, so heat flows down from the top.
 *
 * Cairn usage: the step counter (id 0) and the local field with its halo rows (id 1) are
 * protected; cairn_resume() restores the newest checkpoint, if any, before the loop; and every K
 * steps cairn_checkpoint(name, step) captures the state "step steps completed". A run that is
 * killed and started again therefore continues from its last checkpoint and ends with exactly the
 * same final checksum as an uninterrupted run (and as a run on any other rank count, since the
 * arithmetic per cell does not depend on the decomposition).
 *
 * Build (from the workspace root, after `cargo build --release`):
 *   mpicc -O2 -Wall -o heat2d examples/heat2d.c -I crates/cairn-capi/include \
 *         -L target/release -lcairn -Wl,-rpath,$PWD/target/release
 * Run:
 *   mpirun -n 4 ./heat2d --n 512 --steps 1000 --every 100 [--name heat2d] [--config cairn.toml]
 *          [--sleep-ms 0]
 * Output lines start with "heat2d:"; the last one is a 64-bit FNV-1a checksum of the whole
 * field. Exit codes: 0 success, 2 bad arguments, 3 a Cairn call failed.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cairn_mpi.h"

static int rank, nranks;

/* Abort the job with exit code 3 if a Cairn call failed, saying which call and why. */
static void check(int rc, const char *call)
{
    if (rc == CAIRN_OK)
        return;
    fprintf(stderr, "heat2d: %s failed: %s: %s\n", call, cairn_strerror(rc), cairn_last_error());
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
}

/* Print the usage (after `msg`, if any) once and leave. Every rank sees the same arguments, so
 * every rank takes this path together and no MPI_Abort is needed. */
static void usage_exit(const char *msg, int code)
{
    if (rank == 0) {
        FILE *out = code == 0 ? stdout : stderr;
        if (msg)
            fprintf(out, "heat2d: %s\n", msg);
        fprintf(out, "usage: heat2d [--n N] [--steps S] [--every K] [--name NAME] "
                     "[--config PATH] [--sleep-ms M]\n");
    }
    MPI_Finalize();
    exit(code);
}

static long long parse_count(const char *opt, const char *text, long long min)
{
    char *end;
    long long v = strtoll(text, &end, 10);
    if (*text == '\0' || *end != '\0' || v < min) {
        static char msg[128];
        snprintf(msg, sizeof msg, "%s needs an integer >= %lld, got '%s'", opt, min, text);
        usage_exit(msg, 2);
    }
    return v;
}

/* 64-bit FNV-1a, continued from a previous hash value `h`. */
static uint64_t fnv1a(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}
#define FNV_OFFSET 0xcbf29ce484222325ULL

int main(int argc, char **argv)
{
    long long n = 512, steps = 1000, every = 100, sleep_ms = 0;
    const char *name = "heat2d", *config = NULL;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);

    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i];
        if (strcmp(opt, "--help") == 0)
            usage_exit(NULL, 0);
        if (i + 1 >= argc)
            usage_exit("missing value or unknown option", 2);
        const char *val = argv[++i];
        if (strcmp(opt, "--n") == 0)             n = parse_count(opt, val, 3);
        else if (strcmp(opt, "--steps") == 0)    steps = parse_count(opt, val, 0);
        else if (strcmp(opt, "--every") == 0)    every = parse_count(opt, val, 0);
        else if (strcmp(opt, "--sleep-ms") == 0) sleep_ms = parse_count(opt, val, 0);
        else if (strcmp(opt, "--name") == 0)     name = val;
        else if (strcmp(opt, "--config") == 0)   config = val;
        else                                     usage_exit("unknown option", 2);
    }
    if (n % nranks != 0) {
        char msg[128];
        snprintf(msg, sizeof msg, "the rank count (%d) must divide N (%lld)", nranks, n);
        usage_exit(msg, 2);
    }

    /* Local block: `rows` owned rows plus a halo row above (index 0) and below (rows + 1). */
    const size_t cols = (size_t)n, rows = (size_t)(n / nranks);
    const size_t cells = (rows + 2) * cols;
    double *u = calloc(cells, sizeof *u), *next = calloc(cells, sizeof *next);
    if (!u || !next) {
        fprintf(stderr, "heat2d: out of memory for %zu cells\n", cells);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    if (rank == 0)
        for (size_t j = 0; j < cols; j++)
            u[1 * cols + j] = 1.0; /* global row 0: the hot top edge */

    /* The protected state is exactly (step, u): `next` is scratch rebuilt every step. */
    int64_t step = 0;
    check(cairn_init(MPI_COMM_WORLD, config), "cairn_init");
    check(cairn_protect(0, &step, 1, CAIRN_INT64), "cairn_protect");
    check(cairn_protect(1, u, cells, CAIRN_DOUBLE), "cairn_protect");

    int64_t restored = -1;
    check(cairn_resume(name, &restored), "cairn_resume");
    if (rank == 0) {
        if (restored >= 0)
            printf("heat2d: restarted from checkpoint v%" PRId64 " (step %" PRId64 ")\n",
                   restored, step);
        else
            printf("heat2d: no checkpoint, starting fresh\n");
        fflush(stdout);
    }
    if (restored >= 0 && step != restored) /* every checkpoint is written with version == step */
        fprintf(stderr, "heat2d: warning: restored step %" PRId64 " differs from version %" PRId64
                        "\n", step, restored);
    /* The stencil never writes the fixed edges of `next`, so they must be copied from the
     * (possibly restored) field once; each step then copies `next` back into `u`. */
    memcpy(next, u, cells * sizeof *u);

    const int up = rank > 0 ? rank - 1 : MPI_PROC_NULL;
    const int down = rank < nranks - 1 ? rank + 1 : MPI_PROC_NULL;
    /* Rows that the stencil updates: all owned rows except the global top and bottom edges. */
    const size_t lo = rank == 0 ? 2 : 1, hi = rank == nranks - 1 ? rows - 1 : rows;
    const struct timespec nap = { sleep_ms / 1000, (sleep_ms % 1000) * 1000000L };
    long long checkpoints = 0;
    double ckpt_seconds = 0.0;

    while (step < steps) {
        /* Send the first owned row up and receive the lower halo from below, then the reverse. */
        MPI_Sendrecv(&u[1 * cols], (int)cols, MPI_DOUBLE, up, 0,
                     &u[(rows + 1) * cols], (int)cols, MPI_DOUBLE, down, 0,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Sendrecv(&u[rows * cols], (int)cols, MPI_DOUBLE, down, 1,
                     &u[0], (int)cols, MPI_DOUBLE, up, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);

        for (size_t i = lo; i <= hi; i++)
            for (size_t j = 1; j + 1 < cols; j++)
                next[i * cols + j] = 0.25 * (u[(i - 1) * cols + j] + u[(i + 1) * cols + j] +
                                             u[i * cols + j - 1] + u[i * cols + j + 1]);
        /* Copy back rather than swap pointers, so the protected region stays the live field. */
        memcpy(&u[cols], &next[cols], rows * cols * sizeof *u);
        step++;

        /* Here (step, u) means "step steps completed". Because the checkpoint follows the
         * increment, a resumed run never checkpoints its restored version again; the explicit
         * test keeps that true if the loop is ever rearranged. */
        if (every > 0 && step % every == 0 && step != restored) {
            double t0 = MPI_Wtime();
            check(cairn_checkpoint(name, step), "cairn_checkpoint");
            double dt = MPI_Wtime() - t0;
            ckpt_seconds += dt;
            checkpoints++;
            if (rank == 0) {
                printf("heat2d: step %" PRId64 " checkpoint v%" PRId64 " %.3f ms\n",
                       step, step, dt * 1e3);
                fflush(stdout);
            }
        }
        if (sleep_ms > 0)
            nanosleep(&nap, NULL);
    }

    /* Checksum: one FNV-1a pass over the owned rows of the whole grid in row order. The running
     * hash travels down the ranks, so the result is the same for any rank count. */
    uint64_t sum = FNV_OFFSET;
    if (rank > 0)
        MPI_Recv(&sum, 1, MPI_UINT64_T, rank - 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    sum = fnv1a(sum, &u[cols], rows * cols * sizeof *u);
    if (rank < nranks - 1)
        MPI_Send(&sum, 1, MPI_UINT64_T, rank + 1, 2, MPI_COMM_WORLD);
    if (nranks > 1 && rank == nranks - 1)
        MPI_Send(&sum, 1, MPI_UINT64_T, 0, 3, MPI_COMM_WORLD);
    if (nranks > 1 && rank == 0)
        MPI_Recv(&sum, 1, MPI_UINT64_T, nranks - 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);

    double max_seconds = 0.0; /* the slowest rank's total is the job's checkpoint time */
    MPI_Reduce(&ckpt_seconds, &max_seconds, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("heat2d: steps %lld checkpoints %lld checkpoint-time %.3f ms\n",
               steps, checkpoints, max_seconds * 1e3);
        printf("heat2d: final checksum %016" PRIx64 "\n", sum);
        fflush(stdout);
    }

    check(cairn_finalize(), "cairn_finalize");
    free(u);
    free(next);
    MPI_Finalize();
    return 0;
}
