/*
 * shared.c: a file every rank writes a slice of (a shared file) and a file of each rank's own,
 * checkpointed through Cairn's libscr and read back at restart; checked by tests/scr.rs.
 *
 *   mpirun -n 4 ./shared --dir PREFIX [--steps N]
 *
 * Without a checkpoint it writes checkpoints step.1 .. step.N (default 3); with one it
 * restarts from it, checks every byte of both files, and prints "shared: restarted from
 * <name>". Each checkpoint is <PREFIX>/step.<s>/all.dat, where rank r writes SLICE bytes at
 * offset r * SLICE (rank 0 creates the file first), and <PREFIX>/step.<s>/rank<r>.dat. The
 * byte at offset i of a file of step s is (i * 7 + s + 31 * writer) & 0xff.
 *
 * It prints "shared: checkpoint step.<s> complete" (rank 0) for each kept checkpoint and
 * "shared: checkpoint step.<s> not kept" for one SCR refused; a wrong byte prints
 * "shared: FAILED ..." and exits 4; an SCR call that must succeed and fails exits 5.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>

#include "scr.h"

#define SLICE 65536

static int rank, size;
static char buf[SLICE];

static void leave(int code)
{
    MPI_Finalize();
    exit(code);
}

static void fill(int step, int writer)
{
    for (int i = 0; i < SLICE; i++)
        buf[i] = (char)(((long)(writer * SLICE + i) * 7 + step + 31 * writer) & 0xff);
}

/* The slice `writer` wrote into a file of `step`, starting at `off`, is in buf. */
static int check(int step, int writer, long off)
{
    for (int i = 0; i < SLICE; i++)
        if (buf[i] != (char)(((off + i) * 7 + step + 31 * writer) & 0xff))
            return 0;
    return 1;
}

static int write_at(const char *path, int flags, long off)
{
    int fd = open(path, flags, 0600);
    if (fd < 0) {
        fprintf(stderr, "shared: rank %d: open %s: %s\n", rank, path, strerror(errno));
        return 0;
    }
    int ok = pwrite(fd, buf, SLICE, off) == SLICE;
    return close(fd) == 0 && ok;
}

static int read_at(const char *path, long off)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        fprintf(stderr, "shared: rank %d: open %s: %s\n", rank, path, strerror(errno));
        return 0;
    }
    int ok = pread(fd, buf, SLICE, off) == SLICE;
    close(fd);
    return ok;
}

static void paths(const char *dir, int step, char *all, char *own)
{
    snprintf(all, SCR_MAX_FILENAME, "%s/step.%d/all.dat", dir, step);
    snprintf(own, SCR_MAX_FILENAME, "%s/step.%d/rank%d.dat", dir, step, rank);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *dir = ".";
    int steps = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--dir") == 0)
            dir = argv[i + 1];
        else if (strcmp(argv[i], "--steps") == 0)
            steps = atoi(argv[i + 1]);
    }
    if (SCR_Init() != SCR_SUCCESS)
        leave(5);

    int have = 0;
    char name[SCR_MAX_FILENAME], all[SCR_MAX_FILENAME], own[SCR_MAX_FILENAME];
    char path[SCR_MAX_FILENAME];
    if (SCR_Have_restart(&have, name) != SCR_SUCCESS)
        leave(5);
    if (have) {
        int step = 0;
        if (SCR_Start_restart(name) != SCR_SUCCESS || sscanf(name, "step.%d", &step) != 1)
            leave(5);
        paths(dir, step, all, own);
        int ok = SCR_Route_file(all, path) == SCR_SUCCESS && read_at(path, (long)rank * SLICE) &&
                 check(step, rank, (long)rank * SLICE);
        /* The next rank's slice too: a shared file holds every writer's bytes. */
        int next = (rank + 1) % size;
        ok = ok && read_at(path, (long)next * SLICE) && check(step, next, (long)next * SLICE);
        ok = ok && SCR_Route_file(own, path) == SCR_SUCCESS && read_at(path, 0) &&
             check(step, rank, 0);
        if (!ok)
            printf("shared: FAILED rank %d: the files of %s hold other bytes\n", rank, name);
        fflush(stdout);
        if (SCR_Complete_restart(ok) != SCR_SUCCESS || !ok)
            leave(4);
        if (rank == 0)
            printf("shared: restarted from %s\n", name);
    } else {
        for (int step = 1; step <= steps; step++) {
            snprintf(name, sizeof name, "step.%d", step);
            if (SCR_Start_output(name, SCR_FLAG_CHECKPOINT) != SCR_SUCCESS)
                leave(5);
            paths(dir, step, all, own);
            int ok = SCR_Route_file(all, path) == SCR_SUCCESS;
            if (ok && rank == 0) {
                int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
                ok = fd >= 0 && ftruncate(fd, (off_t)size * SLICE) == 0;
                if (fd >= 0)
                    close(fd);
            }
            MPI_Barrier(MPI_COMM_WORLD);
            fill(step, rank);
            ok = ok && write_at(path, O_WRONLY, (long)rank * SLICE);
            ok = ok && SCR_Route_file(own, path) == SCR_SUCCESS;
            /* rank<r>.dat's slice starts at 0: its bytes are those of offset 0. */
            for (int i = 0; i < SLICE; i++)
                buf[i] = (char)(((long)i * 7 + step + 31 * rank) & 0xff);
            ok = ok && write_at(path, O_WRONLY | O_CREAT | O_TRUNC, 0);
            int kept = SCR_Complete_output(ok) == SCR_SUCCESS;
            if (rank == 0)
                printf("shared: checkpoint %s %s\n", name, kept ? "complete" : "not kept");
            fflush(stdout);
        }
    }
    if (SCR_Finalize() != SCR_SUCCESS)
        leave(5);
    MPI_Finalize();
    return 0;
}
