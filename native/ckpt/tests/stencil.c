/* An unmodified MPI program for transparent checkpointing (no Cairn call): a Jacobi heat
 * stencil on a grid split into bands of rows, one band per rank, the halo rows exchanged with
 * both neighbours every step (non-blocking sends and receives). Rank 0 writes the step it
 * reached to <dir>/out.stencil (a line "step N" every 50 steps) and, at the end, "done N sum
 * S": S sums every rank's weighted sum of its band, added up in rank order, so that the same
 * grid and steps give the same bits whatever happened to the job in between.
 *
 *   stencil ROWS COLS STEPS DIR    (ROWS rows of COLS doubles per rank) */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 5) {
        if (rank == 0)
            fprintf(stderr, "usage: stencil ROWS COLS STEPS DIR\n");
        MPI_Finalize();
        return 2;
    }
    int rows = atoi(argv[1]), cols = atoi(argv[2]);
    long steps = atol(argv[3]);
    const char *dir = argv[4];
    size_t n = (size_t)(rows + 2) * (size_t)cols;
    double *u = malloc(n * sizeof *u), *v = malloc(n * sizeof *v);
    if (!u || !v)
        MPI_Abort(MPI_COMM_WORLD, 3);
    for (int i = 0; i < rows + 2; i++)
        for (int j = 0; j < cols; j++) {
            long g = (long)rank * rows + i - 1; /* the global row */
            u[(size_t)i * cols + j] = sin(0.01 * (double)g) * cos(0.02 * (double)j) + (g < 0 ? 1.0 : 0.0);
        }
    memcpy(v, u, n * sizeof *u);
    int up = rank > 0 ? rank - 1 : MPI_PROC_NULL, down = rank < size - 1 ? rank + 1 : MPI_PROC_NULL;
    FILE *out = NULL;
    if (rank == 0) {
        char path[4096];
        snprintf(path, sizeof path, "%s/out.stencil", dir);
        out = fopen(path, "a");
        if (!out)
            MPI_Abort(MPI_COMM_WORLD, 4);
        setvbuf(out, NULL, _IOLBF, 0);
    }
    for (long s = 1; s <= steps; s++) {
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
        double *t = u;
        u = v;
        v = t;
        if (out && s % 50 == 0)
            fprintf(out, "step %ld\n", s);
    }
    double mine = 0;
    for (int i = 1; i <= rows; i++)
        for (int j = 0; j < cols; j++)
            mine += u[(size_t)i * cols + j] * (double)((long)(rank * rows + i) * cols + j + 1);
    double *all = rank == 0 ? malloc((size_t)size * sizeof *all) : NULL;
    MPI_Gather(&mine, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (out) {
        double sum = 0;
        for (int r = 0; r < size; r++)
            sum += all[r];
        fprintf(out, "done %ld sum %.17g\n", steps, sum);
        fclose(out);
    }
    free(all);
    free(u);
    free(v);
    MPI_Finalize();
    return 0;
}
