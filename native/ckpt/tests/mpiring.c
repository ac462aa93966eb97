/* An unmodified MPI program for transparent checkpointing (no Cairn call): every rank keeps
 * two non-blocking messages in flight around a ring at all times, takes part in an
 * allreduce on MPI_COMM_WORLD and in a broadcast on a communicator split from it by parity,
 * and checks every message and every reduction against what it must be. Rank 0 writes the
 * step it reached to <dir>/out.ring (a line "step N" every 50 steps, and "done N sum S" at the
 * end), and each rank ends with "rank R ok" or "rank R BAD ..." in <dir>/end.<R>.
 *
 *   mpiring STEPS DIR [WORDS]   (WORDS doubles per message, 4096 by default)
 *
 * A message from rank s at step k holds s * 1e6 + k + i at index i, so a message lost,
 * duplicated or reordered across a checkpoint is seen at once. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void fill(double *m, int n, int from, long step)
{
    for (int i = 0; i < n; i++)
        m[i] = from * 1e6 + (double)step + i;
}

static int bad(FILE *end, int rank, const char *what, long step)
{
    fprintf(end, "rank %d BAD %s at step %ld\n", rank, what, step);
    fclose(end);
    return 3;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 3) {
        if (rank == 0)
            fprintf(stderr, "usage: mpiring STEPS DIR [WORDS]\n");
        MPI_Finalize();
        return 2;
    }
    long steps = atol(argv[1]);
    int words = argc > 3 ? atoi(argv[3]) : 4096;
    char path[4096];
    snprintf(path, sizeof path, "%s/end.%d", argv[2], rank);
    FILE *end = fopen(path, "w");
    FILE *out = NULL;
    if (rank == 0) {
        snprintf(path, sizeof path, "%s/out.ring", argv[2]);
        out = fopen(path, "a");
    }
    if (!end || (rank == 0 && !out)) {
        perror(path);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    int hrank, hsize;
    MPI_Comm_rank(half, &hrank);
    MPI_Comm_size(half, &hsize);

    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    double *send[2], *recv[2];
    for (int b = 0; b < 2; b++) {
        send[b] = malloc(sizeof(double) * (size_t)words);
        recv[b] = malloc(sizeof(double) * (size_t)words);
    }
    MPI_Request sq[2], rq[2];
    /* Two steps always in flight: step k's message travels while step k+1's is posted. */
    for (long k = 0; k < 2; k++) {
        MPI_Irecv(recv[k], words, MPI_DOUBLE, left, (int)k, MPI_COMM_WORLD, &rq[k]);
        fill(send[k], words, rank, k);
        MPI_Isend(send[k], words, MPI_DOUBLE, right, (int)k, MPI_COMM_WORLD, &sq[k]);
    }
    double sum = 0;
    for (long k = 0; k < steps; k++) {
        int b = (int)(k % 2);
        MPI_Wait(&rq[b], MPI_STATUS_IGNORE);
        MPI_Wait(&sq[b], MPI_STATUS_IGNORE);
        for (int i = 0; i < words; i++)
            if (recv[b][i] != left * 1e6 + (double)k + i)
                return bad(end, rank, "ring message", k);
        sum += recv[b][words - 1];
        long next = k + 2;
        if (next < steps + 2) {
            MPI_Irecv(recv[b], words, MPI_DOUBLE, left, (int)(next % 32768), MPI_COMM_WORLD, &rq[b]);
            fill(send[b], words, rank, next);
            MPI_Isend(send[b], words, MPI_DOUBLE, right, (int)(next % 32768), MPI_COMM_WORLD, &sq[b]);
        }
        long mine = rank + k, total = 0;
        MPI_Allreduce(&mine, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        if (total != (long)size * (size - 1) / 2 + (long)size * k)
            return bad(end, rank, "allreduce", k);
        long root_says = hrank == 0 ? k * 7 + rank : -1;
        MPI_Bcast(&root_says, 1, MPI_LONG, 0, half);
        if (root_says != k * 7 + rank % 2)
            return bad(end, rank, "broadcast on the split communicator", k);
        if (rank == 0 && k % 50 == 0) {
            fprintf(out, "step %ld\n", k);
            fflush(out);
        }
        usleep(1000);
    }
    /* The two messages posted beyond the last step. */
    for (int b = 0; b < 2; b++) {
        MPI_Wait(&rq[b], MPI_STATUS_IGNORE);
        MPI_Wait(&sq[b], MPI_STATUS_IGNORE);
    }
    if (rank == 0) {
        fprintf(out, "done %ld sum %.0f\n", steps, sum);
        fclose(out);
    }
    fprintf(end, "rank %d ok\n", rank);
    fclose(end);
    MPI_Comm_free(&half);
    MPI_Finalize();
    return 0;
}
