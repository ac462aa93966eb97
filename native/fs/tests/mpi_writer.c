/*
** mpi_writer.c: ranks of an MPI job writing into one shared store at once, run under
** libcairn-fs.so with mpirun by crates/cairn-shm/tests/preload.rs.
**
**   mpi_writer DIR   each rank writes DIR/rank.<r> (a few MiB, its own pattern, in uneven
**                    pieces) while the others write theirs, then after a barrier reads every
**                    other rank's file and checks it byte by byte; rank 0 prints
**                    "mpi ok <ranks>" when every rank agrees
*/
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static unsigned char pattern(size_t i, int rank)
{
    return (unsigned char)((i * 13u + (i >> 10) * 7u + (unsigned)rank * 101u) & 0xff);
}

static size_t file_size(int rank)
{
    return (3u << 20) + (size_t)rank * 77777u;
}

static int write_mine(const char *dir, int rank)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/rank.%d", dir, rank);
    size_t size = file_size(rank), piece = 50000 + (size_t)rank * 1000;
    unsigned char *buf = malloc(piece);
    int fd = open(p, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    int ok = fd >= 0;
    for (size_t off = 0; ok && off < size; off += piece) {
        size_t n = off + piece > size ? size - off : piece;
        for (size_t i = 0; i < n; i++)
            buf[i] = pattern(off + i, rank);
        ok = write(fd, buf, n) == (ssize_t)n;
    }
    ok = ok && fsync(fd) == 0 && close(fd) == 0;
    if (!ok)
        fprintf(stderr, "rank %d: writing %s: %s\n", rank, p, strerror(errno));
    free(buf);
    return ok;
}

static int check_theirs(const char *dir, int rank, int other)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/rank.%d", dir, other);
    size_t size = file_size(other);
    unsigned char *buf = malloc(size + 1);
    struct stat st;
    int fd = open(p, O_RDONLY);
    int ok = fd >= 0 && fstat(fd, &st) == 0 && (size_t)st.st_size == size;
    size_t got = 0;
    ssize_t n = 1;
    while (ok && n > 0 && got <= size) {
        n = read(fd, buf + got, size + 1 - got);
        got += n > 0 ? (size_t)n : 0;
    }
    ok = ok && n == 0 && got == size;
    for (size_t i = 0; ok && i < size; i++)
        ok = buf[i] == pattern(i, other);
    if (fd >= 0)
        close(fd);
    if (!ok)
        fprintf(stderr, "rank %d: %s is not what rank %d wrote\n", rank, p, other);
    free(buf);
    return ok;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 2) {
        if (rank == 0)
            fprintf(stderr, "usage: mpi_writer DIR\n");
        MPI_Finalize();
        return 2;
    }
    int ok = write_mine(argv[1], rank);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int other = 0; other < size; other++)
        if (other != rank)
            ok &= check_theirs(argv[1], rank, other);
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    if (rank == 0 && all)
        printf("mpi ok %d\n", size);
    MPI_Finalize();
    return all ? 0 : 1;
}
