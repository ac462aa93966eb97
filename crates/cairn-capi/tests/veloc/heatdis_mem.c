/*
 * heatdis_mem.c -- heat distribution with VeloC's memory-based API, written the way VeloC's
 * own example is: initialise VeloC after MPI_Init, protect the iteration counter and the two
 * grids, ask VELOC_Restart_test for a checkpoint and VELOC_Restart it, checkpoint every K
 * iterations with VELOC_Checkpoint, finalise before MPI_Finalize. It is built against
 * Cairn's veloc.h and linked with -lveloc only.
 *
 * Each rank owns --rows rows of --cols columns (plus a halo row above and below); the top row
 * of the whole plate is held at 100 degrees, the other edges at 0, and every iteration
 * replaces each inner cell with the mean of its four neighbours. The arithmetic of a cell
 * does not depend on where a run was interrupted, so a restarted run ends with the bits of an
 * uninterrupted one. A protected digest of the grid, taken at every checkpoint, lets a
 * restarted run check the data it got back.
 *
 * The file is divided into: the grid; the checks; main with the iteration loop.
 *
 * Usage: heatdis_mem CONFIG [--rows R] [--cols C] [--iters N] [--every K] [--sleep-ms MS]
 * Output (rank 0, stdout, flushed after every line):
 *   heatdis: no checkpoint, starting fresh
 *   heatdis: restarted from v<v> (iteration <i>)
 *   heatdis: checkpoint v<v> done
 *   heatdis: final checksum <hex>
 * Exit codes: 0 success, 2 bad arguments, 5 a VeloC call failed or restored wrong data.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <veloc.h>

/* ---- The grid -------------------------------------------------------------------------- */

static int rank, nranks, rows = 64, cols = 256;

/* Cell (r, c) of a grid with a halo row above and below. */
#define AT(grid, r, c) ((grid)[(size_t)(r) * (size_t)cols + (size_t)(c)])

static void initial(double *h)
{
    memset(h, 0, sizeof(double) * (size_t)(rows + 2) * (size_t)cols);
    if (rank == 0)
        for (int c = 1; c < cols - 1; c++)
            AT(h, 1, c) = 100.0;
}

static void exchange(double *h)
{
    int up = rank > 0 ? rank - 1 : MPI_PROC_NULL;
    int down = rank < nranks - 1 ? rank + 1 : MPI_PROC_NULL;
    MPI_Sendrecv(&AT(h, 1, 0), cols, MPI_DOUBLE, up, 0, &AT(h, rows + 1, 0), cols, MPI_DOUBLE,
                 down, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Sendrecv(&AT(h, rows, 0), cols, MPI_DOUBLE, down, 1, &AT(h, 0, 0), cols, MPI_DOUBLE, up,
                 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

/* One iteration: g from h, then back into h. The plate's edges stay as they are. */
static void iterate(double *h, double *g)
{
    exchange(h);
    for (int r = 1; r <= rows; r++) {
        int global = rank * rows + r - 1;
        int edge = global == 0 || global == nranks * rows - 1;
        for (int c = 0; c < cols; c++)
            AT(g, r, c) = edge || c == 0 || c == cols - 1
                              ? AT(h, r, c)
                              : 0.25 * (AT(h, r - 1, c) + AT(h, r + 1, c) + AT(h, r, c - 1) +
                                        AT(h, r, c + 1));
    }
    memcpy(&AT(h, 1, 0), &AT(g, 1, 0), sizeof(double) * (size_t)rows * (size_t)cols);
}

/* FNV-1a over this rank's own rows. */
static uint64_t digest(const double *h)
{
    uint64_t d = 1469598103934665603ull;
    const unsigned char *b = (const unsigned char *)&AT(h, 1, 0);
    for (size_t i = 0; i < sizeof(double) * (size_t)rows * (size_t)cols; i++)
        d = (d ^ b[i]) * 1099511628211ull;
    return d;
}

/* ---- The checks ------------------------------------------------------------------------ */

static void failed(const char *what)
{
    fprintf(stderr, "heatdis: rank %d: %s\n", rank, what);
    exit(5);
}

static void usage(void)
{
    fprintf(stderr, "usage: heatdis_mem CONFIG [--rows R] [--cols C] [--iters N] [--every K] "
                    "[--sleep-ms MS]\n");
    exit(2);
}

/* ---- Main ------------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    int n = 400, every = 50, sleep_ms = 0;
    if (argc < 2)
        usage();
    const char *config = argv[1];
    for (int a = 2; a < argc; a++) {
        if (a + 1 >= argc)
            usage();
        int v = atoi(argv[a + 1]);
        if (strcmp(argv[a], "--rows") == 0)
            rows = v;
        else if (strcmp(argv[a], "--cols") == 0)
            cols = v;
        else if (strcmp(argv[a], "--iters") == 0)
            n = v;
        else if (strcmp(argv[a], "--every") == 0)
            every = v;
        else if (strcmp(argv[a], "--sleep-ms") == 0)
            sleep_ms = v;
        else
            usage();
        a++;
    }
    if (rows < 1 || cols < 3 || n < 0 || every < 1)
        usage();

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (VELOC_Init(MPI_COMM_WORLD, config) != VELOC_SUCCESS) {
        /* Every rank fails alike, so the job can end cleanly. */
        if (rank == 0)
            printf("heatdis: VELOC_Init failed\n");
        MPI_Finalize();
        return 5;
    }

    size_t cells = (size_t)(rows + 2) * (size_t)cols;
    double *h = malloc(sizeof(double) * cells), *g = malloc(sizeof(double) * cells);
    if (h == NULL || g == NULL)
        failed("out of memory");
    initial(h);
    memcpy(g, h, sizeof(double) * cells);
    int i = 0;
    uint64_t check = 0;
    if (VELOC_Mem_protect(0, &i, 1, sizeof(int)) != VELOC_SUCCESS ||
        VELOC_Mem_protect(1, h, cells, sizeof(double)) != VELOC_SUCCESS ||
        VELOC_Mem_protect(2, g, cells, sizeof(double)) != VELOC_SUCCESS ||
        VELOC_Mem_protect(3, &check, 1, sizeof check) != VELOC_SUCCESS)
        failed("VELOC_Mem_protect failed");

    int v = VELOC_Restart_test("heatdis", 0);
    if (v >= 0) {
        if (VELOC_Restart("heatdis", v) != VELOC_SUCCESS)
            failed("VELOC_Restart failed");
        if (i != v || digest(h) != check)
            failed("the restored data is not the checkpoint's");
        if (rank == 0)
            printf("heatdis: restarted from v%d (iteration %d)\n", v, i);
    } else if (rank == 0) {
        printf("heatdis: no checkpoint, starting fresh\n");
    }
    fflush(stdout);

    struct timespec pause = {sleep_ms / 1000, (long)(sleep_ms % 1000) * 1000000L};
    while (i < n) {
        if (i % every == 0) {
            check = digest(h);
            if (VELOC_Checkpoint("heatdis", i) != VELOC_SUCCESS)
                failed("VELOC_Checkpoint failed");
            if (rank == 0) {
                printf("heatdis: checkpoint v%d done\n", i);
                fflush(stdout);
            }
        }
        iterate(h, g);
        if (sleep_ms > 0)
            nanosleep(&pause, NULL);
        i++;
    }

    uint64_t mine = digest(h), all[1024];
    if (nranks > 1024)
        failed("too many ranks");
    MPI_Gather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        uint64_t sum = 1469598103934665603ull;
        for (int r = 0; r < nranks; r++)
            sum = (sum ^ all[r]) * 1099511628211ull;
        printf("heatdis: final checksum %016" PRIx64 "\n", sum);
    }
    if (VELOC_Finalize(1) != VELOC_SUCCESS)
        failed("VELOC_Finalize failed");
    free(h);
    free(g);
    MPI_Finalize();
    return 0;
}
