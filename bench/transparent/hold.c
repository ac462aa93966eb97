/*
** hold.c: the process cairn-bench-transparent checkpoints to time the image write, and
** restores to time the restart.
**
**     hold MIB
**
** It fills MIB MiB of heap with non-zero pseudo-random 64-bit words, prints "ready SUM" (a
** checksum of them) and then waits in read(2) on its standard input, so a checkpoint finds
** it idle and every one of its pages present. The bench never writes to the original's
** input: it takes its checkpoints, and closing the input ends it.
**
** A restored copy returns into the same read(2) (the checkpoint signal interrupted it and
** SA_RESTART restarts it), now on the restorer's standard input, where the bench has put one
** byte. The process id tells the two lives apart: a restored copy prints "restored NS" with
** CLOCK_MONOTONIC at that moment, checks every word against the checksum, prints "verify OK"
** or "verify BAD", and exits.
*/
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static uint64_t checksum(const uint64_t *w, size_t n)
{
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++)
        s = (s ^ w[i]) * 0x100000001b3ull + i;
    return s;
}

int main(int argc, char **argv)
{
    if (argc != 2 || atol(argv[1]) <= 0) {
        fprintf(stderr, "usage: hold MIB\n");
        return 2;
    }
    size_t n = (size_t)atol(argv[1]) << 17; /* 64-bit words in MIB MiB */
    uint64_t *w = malloc(n * sizeof *w);
    if (!w) {
        fprintf(stderr, "hold: cannot allocate %s MiB\n", argv[1]);
        return 1;
    }
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w[i] = x | 1; /* never zero */
    }
    const uint64_t sum = checksum(w, n);
    /* getpid(2) itself, not a value a library could have cached in the first life. */
    const long pid = syscall(SYS_getpid);
    printf("ready %llu\n", (unsigned long long)sum);
    fflush(stdout);
    for (;;) {
        char c;
        ssize_t r = read(0, &c, 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return 0; /* the bench closed the original's input */
        if (syscall(SYS_getpid) == pid)
            continue;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        printf("restored %lld\n", (long long)ts.tv_sec * 1000000000 + ts.tv_nsec);
        fflush(stdout);
        printf("verify %s\n", checksum(w, n) == sum ? "OK" : "BAD");
        fflush(stdout);
        return 0;
    }
}
