/*
** stencil_app.c: the MPI program cairn-bench-mpi checkpoints and restarts, in two builds.
**
**     mpirun -np N stencil_app ROWS COLS DIR
**
** The computation is native/ckpt/tests/stencil.c's: a Jacobi heat stencil on a grid split
** into bands of ROWS rows of COLS doubles, one band per rank, the halo rows exchanged with
** both neighbours every step (non-blocking sends and receives), two grids (the old and the
** new) per rank. It runs until it is killed. Rank 0 appends lines to DIR/out.stencil, each
** with one write(2) on a file opened and closed for it (so the file is not open at a
** checkpoint but for an instant), NS being CLOCK_MONOTONIC:
**
**   ready NS               the grids are filled (or restored) and the loop starts
**   step N NS              after every step
**
** Built plainly it makes no Cairn call: the transparent kind runs it under `cairn launch`.
** Built with -DCAIRN_APP (and -lcairn) it is the application-level kind, the floor the
** transparent checkpoint is measured against: cairn_init with $CAIRN_CONFIG, its step and
** both grids protected (the grids never move; which one is current follows from the step's
** parity), and
**
** - at the start, cairn_restart_test: when a checkpoint exists, cairn_restart fills the grids
**   and the step instead of computing the initial grid, between two barriers, and rank 0
**   writes "resume VERSION SECONDS"; otherwise "fresh";
** - after every step, rank 0 looks for DIR/ckpt.K (K = 1, 2, ... the checkpoints of this
**   life) and broadcasts what it found; when it is there, cairn_checkpoint(name, step) runs
**   between two barriers and rank 0 writes "ckpt K STEP SECONDS".
**
** A failed Cairn call is printed with its message and ends the job (MPI_Abort, exit code 3).
*/
#define _GNU_SOURCE
#include <fcntl.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef CAIRN_APP
#include <cairn_mpi.h>
#endif

static int rank;
static char out_path[4096];

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Rank 0: one line appended to DIR/out.stencil with a single write(2). */
static void say(const char *line)
{
    if (rank != 0)
        return;
    int fd = open(out_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return;
    ssize_t w = write(fd, line, strlen(line));
    (void)w;
    close(fd);
}

#ifdef CAIRN_APP
static void check(int rc, const char *call)
{
    if (rc == CAIRN_OK)
        return;
    fprintf(stderr, "stencil_app: rank %d: %s failed: %s: %s\n", rank, call, cairn_strerror(rc),
            cairn_last_error());
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
}
#endif

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 4) {
        if (rank == 0)
            fprintf(stderr, "usage: stencil_app ROWS COLS DIR\n");
        MPI_Finalize();
        return 2;
    }
    int rows = atoi(argv[1]), cols = atoi(argv[2]);
    const char *dir = argv[3];
    snprintf(out_path, sizeof out_path, "%s/out.stencil", dir);
    size_t n = (size_t)(rows + 2) * (size_t)cols;
    /* grid[s % 2] holds the grid after s steps. */
    double *grid[2] = {malloc(n * sizeof(double)), malloc(n * sizeof(double))};
    if (!grid[0] || !grid[1])
        MPI_Abort(MPI_COMM_WORLD, 3);
    int64_t step = 0;
    int restored = 0;
    char line[256];
#ifdef CAIRN_APP
    check(cairn_init(MPI_COMM_WORLD, NULL), "cairn_init");
    check(cairn_protect(0, &step, 1, CAIRN_INT64), "cairn_protect(step)");
    check(cairn_protect(1, grid[0], n, CAIRN_DOUBLE), "cairn_protect(grid 0)");
    check(cairn_protect(2, grid[1], n, CAIRN_DOUBLE), "cairn_protect(grid 1)");
    const char *name = "stencil";
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    int64_t version = -1;
    check(cairn_restart_test(name, &version), "cairn_restart_test");
    if (version >= 0) {
        check(cairn_restart(name, version), "cairn_restart");
        restored = 1;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (restored) {
        snprintf(line, sizeof line, "resume %lld %.6f\n", (long long)version, MPI_Wtime() - t0);
        say(line);
    } else {
        say("fresh\n");
    }
    int next_ckpt = 1;
#endif
    if (!restored) {
        double *u = grid[0];
        for (int i = 0; i < rows + 2; i++)
            for (int j = 0; j < cols; j++) {
                long g = (long)rank * rows + i - 1; /* the global row */
                u[(size_t)i * cols + j] =
                    sin(0.01 * (double)g) * cos(0.02 * (double)j) + (g < 0 ? 1.0 : 0.0);
            }
        memcpy(grid[1], u, n * sizeof *u);
    }
    int up = rank > 0 ? rank - 1 : MPI_PROC_NULL, down = rank < size - 1 ? rank + 1 : MPI_PROC_NULL;
    snprintf(line, sizeof line, "ready %lld\n", (long long)mono_ns());
    say(line);
    for (;;) {
        double *u = grid[step % 2], *v = grid[(step + 1) % 2];
        MPI_Request rq[4];
        MPI_Irecv(u, cols, MPI_DOUBLE, up, 1, MPI_COMM_WORLD, &rq[0]);
        MPI_Irecv(u + (size_t)(rows + 1) * cols, cols, MPI_DOUBLE, down, 0, MPI_COMM_WORLD, &rq[1]);
        MPI_Isend(u + cols, cols, MPI_DOUBLE, up, 0, MPI_COMM_WORLD, &rq[2]);
        MPI_Isend(u + (size_t)rows * cols, cols, MPI_DOUBLE, down, 1, MPI_COMM_WORLD, &rq[3]);
        MPI_Waitall(4, rq, MPI_STATUSES_IGNORE);
        for (int i = 1; i <= rows; i++)
            for (int j = 1; j < cols - 1; j++) {
                size_t k = (size_t)i * cols + j;
                v[k] = 0.25 * (u[k - cols] + u[k + cols] + u[k - 1] + u[k + 1]);
            }
        step++;
        snprintf(line, sizeof line, "step %lld %lld\n", (long long)step, (long long)mono_ns());
        say(line);
#ifdef CAIRN_APP
        int asked = 0;
        if (rank == 0) {
            char req[4096];
            snprintf(req, sizeof req, "%s/ckpt.%d", dir, next_ckpt);
            asked = access(req, F_OK) == 0;
        }
        MPI_Bcast(&asked, 1, MPI_INT, 0, MPI_COMM_WORLD);
        if (asked) {
            MPI_Barrier(MPI_COMM_WORLD);
            double c0 = MPI_Wtime();
            check(cairn_checkpoint(name, step), "cairn_checkpoint");
            MPI_Barrier(MPI_COMM_WORLD);
            snprintf(line, sizeof line, "ckpt %d %lld %.6f\n", next_ckpt, (long long)step,
                     MPI_Wtime() - c0);
            say(line);
            next_ckpt++;
        }
#endif
    }
}
