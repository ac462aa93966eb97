/*
 * heatdis.c -- heat distribution with FTI, written the way FTI's own examples are.
 *
 * The grid (N x N) is cut into bands of rows, one per rank; each rank keeps one ghost row above
 * and below its band. Every iteration exchanges the ghost rows with the neighbours and does a
 * Jacobi sweep; the top edge of the grid is held at 100 and the other edges at 0. The
 * iteration counter and both grids are protected with FTI_Protect, and the program only talks
 * to FTI (it never includes a Cairn header).
 *
 * Two ways of checkpointing, as in FTI's examples:
 *   default      FTI_Status() says whether to FTI_Recover; FTI_Checkpoint(id, level) after every
 *                K-th iteration (--level 0 cycles through the levels 1, 2, 3, 4);
 *   --snapshot   FTI_Snapshot() at the top of every iteration: it recovers on a restart and
 *                checkpoints at the intervals of the configuration file (Ckpt_L1..Ckpt_L4).
 * A run killed and relaunched with the same arguments ends with the same checksum as an
 * uninterrupted one.
 *
 * Usage: heatdis CONFIG [--n N] [--iters I] [--every K] [--level L] [--snapshot]
 *                       [--sleep-ms M]
 * Rank 0 prints:
 *   heatdis: status S                            FTI_Status() after FTI_Init
 *   heatdis: recovered at iteration I
 *   heatdis: iteration I checkpoint level L      FTI_Checkpoint returned FTI_DONE
 *   heatdis: iteration I snapshot                FTI_Snapshot returned FTI_DONE
 *   heatdis: final checksum HEX                  64-bit FNV-1a of the whole grid
 * Exit codes: 0 success, 2 bad arguments, 5 an FTI call failed (FTI says why on stderr).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <fti.h>

#define HOT 100.0

static int rank, nbProcs;

/* Leave with exit code 5 if an FTI call failed. Every rank fails together (FTI's collective
 * calls agree on their outcome), so every rank leaves here. */
static void check(int rc, const char *call)
{
    if (rc != FTI_NSCS)
        return;
    fprintf(stderr, "heatdis: rank %d: %s failed\n", rank, call);
    MPI_Finalize();
    exit(5);
}

static void usage(const char *msg)
{
    if (rank == 0)
        fprintf(stderr, "heatdis: %s\nusage: heatdis CONFIG [--n N] [--iters I] [--every K] "
                        "[--level L] [--snapshot] [--sleep-ms M]\n", msg);
    MPI_Finalize();
    exit(2);
}

static long number(const char *text, long min)
{
    char *end;
    long v = strtol(text, &end, 10);
    if (*text == '\0' || *end != '\0' || v < min)
        usage("bad number");
    return v;
}

/* One iteration: exchange the ghost rows, then a Jacobi sweep of the band into g, copied back
 * into h. Rows 0 and nbLines - 1 are ghosts; the global edges stay fixed. */
static void doWork(double *h, double *g, int nbLines, int M)
{
    MPI_Request req[4];
    int n = 0;
    if (rank > 0) {
        MPI_Isend(&h[M], M, MPI_DOUBLE, rank - 1, 0, FTI_COMM_WORLD, &req[n++]);
        MPI_Irecv(&h[0], M, MPI_DOUBLE, rank - 1, 0, FTI_COMM_WORLD, &req[n++]);
    }
    if (rank < nbProcs - 1) {
        MPI_Isend(&h[(nbLines - 2) * M], M, MPI_DOUBLE, rank + 1, 0, FTI_COMM_WORLD, &req[n++]);
        MPI_Irecv(&h[(nbLines - 1) * M], M, MPI_DOUBLE, rank + 1, 0, FTI_COMM_WORLD, &req[n++]);
    }
    MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
    for (int i = 1; i < nbLines - 1; i++)
        for (int j = 1; j < M - 1; j++)
            g[i * M + j] = 0.25 * (h[(i - 1) * M + j] + h[(i + 1) * M + j] + h[i * M + j - 1] +
                                   h[i * M + j + 1]);
    for (int i = 1; i < nbLines - 1; i++)
        memcpy(&h[i * M + 1], &g[i * M + 1], (size_t)(M - 2) * sizeof *h);
}

/* 64-bit FNV-1a of the whole grid (every band, in rank order), on rank 0. */
static uint64_t checksum(const double *h, int nbLines, int M)
{
    size_t band = (size_t)(nbLines - 2) * (size_t)M;
    double *all = rank == 0 ? malloc(band * (size_t)nbProcs * sizeof *all) : NULL;
    MPI_Gather(&h[M], (int)band, MPI_DOUBLE, all, (int)band, MPI_DOUBLE, 0, FTI_COMM_WORLD);
    uint64_t x = 0xcbf29ce484222325ULL;
    if (rank == 0) {
        const unsigned char *p = (const unsigned char *)all;
        for (size_t k = 0; k < band * (size_t)nbProcs * sizeof *all; k++)
            x = (x ^ p[k]) * 0x100000001b3ULL;
        free(all);
    }
    return x;
}

int main(int argc, char **argv)
{
    long n = 128, iters = 400, every = 50, level = 1, sleep_ms = 0;
    int snapshot = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc < 2 || argv[1][0] == '-')
        usage("the first argument is FTI's configuration file");
    for (int a = 2; a < argc; a++) {
        if (strcmp(argv[a], "--snapshot") == 0) {
            snapshot = 1;
            continue;
        }
        if (a + 1 >= argc)
            usage("missing value or unknown option");
        const char *opt = argv[a], *val = argv[++a];
        if (strcmp(opt, "--n") == 0)
            n = number(val, 3);
        else if (strcmp(opt, "--iters") == 0)
            iters = number(val, 0);
        else if (strcmp(opt, "--every") == 0)
            every = number(val, 0);
        else if (strcmp(opt, "--level") == 0)
            level = number(val, 0);
        else if (strcmp(opt, "--sleep-ms") == 0)
            sleep_ms = number(val, 0);
        else
            usage("unknown option");
    }

    check(FTI_Init(argv[1], MPI_COMM_WORLD), "FTI_Init");
    MPI_Comm_size(FTI_COMM_WORLD, &nbProcs);
    MPI_Comm_rank(FTI_COMM_WORLD, &rank);
    if (n % nbProcs != 0)
        usage("the number of ranks must divide N");

    int M = (int)n, nbLines = (int)(n / nbProcs) + 2;
    double *h = calloc((size_t)M * nbLines, sizeof *h);
    double *g = calloc((size_t)M * nbLines, sizeof *g);
    if (!h || !g)
        usage("out of memory");
    if (rank == 0)
        for (int j = 0; j < M; j++)
            h[j] = g[j] = HOT; /* the ghost row above rank 0 is the hot edge */

    int i = 0;
    check(FTI_Protect(0, &i, 1, FTI_INTG), "FTI_Protect");
    check(FTI_Protect(1, h, (int32_t)M * nbLines, FTI_DBLE), "FTI_Protect");
    check(FTI_Protect(2, g, (int32_t)M * nbLines, FTI_DBLE), "FTI_Protect");

    int status = FTI_Status();
    if (rank == 0)
        printf("heatdis: status %d\n", status);
    struct timespec pause = {sleep_ms / 1000, (sleep_ms % 1000) * 1000000L};

    if (snapshot) {
        for (i = 0; i < iters; i++) {
            int rc = FTI_Snapshot();
            check(rc, "FTI_Snapshot");
            if (rank == 0 && status != 0) {
                printf("heatdis: recovered at iteration %d\n", i);
                status = 0;
            }
            if (rank == 0 && rc == FTI_DONE)
                printf("heatdis: iteration %d snapshot\n", i);
            fflush(stdout);
            doWork(h, g, nbLines, M);
            if (sleep_ms)
                nanosleep(&pause, NULL);
        }
    } else {
        if (status != 0) {
            check(FTI_Recover(), "FTI_Recover");
            if (rank == 0)
                printf("heatdis: recovered at iteration %d\n", i);
        }
        while (i < iters) {
            doWork(h, g, nbLines, M);
            i++;
            if (every > 0 && i % every == 0 && i < iters) {
                int l = level > 0 ? (int)level : (int)(i / every - 1) % 4 + 1;
                int rc = FTI_Checkpoint((int)(i / every), l);
                check(rc, "FTI_Checkpoint");
                if (rank == 0 && rc == FTI_DONE)
                    printf("heatdis: iteration %d checkpoint level %d\n", i, l);
            }
            fflush(stdout);
            if (sleep_ms)
                nanosleep(&pause, NULL);
        }
    }

    uint64_t sum = checksum(h, nbLines, M);
    if (rank == 0)
        printf("heatdis: final checksum %016llx\n", (unsigned long long)sum);
    fflush(stdout);
    check(FTI_Finalize(), "FTI_Finalize");
    free(h);
    free(g);
    MPI_Finalize();
    return 0;
}
