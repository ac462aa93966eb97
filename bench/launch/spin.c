/*
** spin.c: the process cairn-bench-launch checkpoints and restarts under `cairn launch` and
** under DMTCP (parts a and b).
**
**     spin MIB PERMILLE HBFILE
**
** It fills MIB MiB of heap with non-zero pseudo-random 64-bit words (nothing for a codec or a
** zero-page check to take out), appends "ready NS PID" to HBFILE and then loops for ever:
**
** - each pass writes one word in each of 64 pages of the hot region, the first PERMILLE
**   thousandths of the heap, round-robin, so every hot page changes within about a
**   millisecond and the rest (the cold region) never does: between two checkpoints a
**   thousandth-exact share of the pages has changed;
** - at least once a millisecond it appends "hb NS PASSES" to HBFILE (opened, written with
**   one write(2) and closed each time, so the file is not open at a checkpoint but for an
**   instant). NS is CLOCK_MONOTONIC. After a restart the first pass writes one at once: the
**   time since the last one is the whole time the process was away;
** - when HBFILE.verify exists, it checks every word of the cold region against the checksum
**   taken after the fill and appends "verify OK NS" or "verify BAD NS", once per life of
**   the program (the bench creates that file after a restart).
**
** The bench ends it with SIGKILL.
*/
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PAGE_WORDS 512 /* 4 KiB pages of 64-bit words */
#define PAGES_PER_PASS 64

static const char *hbfile;
static char verify_path[4096];

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* One line appended to HBFILE with a single write(2); O_APPEND keeps lines whole. */
static void say(const char *line)
{
    int fd = open(hbfile, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return;
    size_t n = strlen(line);
    ssize_t w = write(fd, line, n);
    (void)w;
    close(fd);
}

static uint64_t checksum(const uint64_t *w, size_t n)
{
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++)
        s = (s ^ w[i]) * 0x100000001b3ull + i;
    return s;
}

int main(int argc, char **argv)
{
    if (argc != 4 || atol(argv[1]) <= 0 || atol(argv[2]) < 0 || atol(argv[2]) > 1000) {
        fprintf(stderr, "usage: spin MIB PERMILLE HBFILE\n");
        return 2;
    }
    hbfile = argv[3];
    snprintf(verify_path, sizeof verify_path, "%s.verify", hbfile);
    size_t pages = (size_t)atol(argv[1]) << 8;
    size_t hot = pages * (size_t)atol(argv[2]) / 1000;
    size_t n = pages * PAGE_WORDS;
    uint64_t *w = malloc(n * sizeof *w);
    if (!w) {
        fprintf(stderr, "spin: cannot allocate %s MiB\n", argv[1]);
        return 1;
    }
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w[i] = x | 1; /* never zero */
    }
    const uint64_t *cold = w + hot * PAGE_WORDS;
    const size_t cold_n = n - hot * PAGE_WORDS;
    const uint64_t sum = checksum(cold, cold_n);
    char line[128];
    snprintf(line, sizeof line, "ready %lld %ld\n", (long long)mono_ns(), (long)getpid());
    say(line);

    uint64_t passes = 0;
    size_t next = 0;
    int verified = 0;
    int64_t last = 0;
    for (;;) {
        if (hot > 0) {
            for (int k = 0; k < PAGES_PER_PASS; k++) {
                uint64_t *p = w + next * PAGE_WORDS + (passes % PAGE_WORDS);
                *p = (*p ^ (passes * 0x9e3779b97f4a7c15ull)) | 1;
                if (++next == hot)
                    next = 0;
            }
        }
        passes++;
        int64_t now = mono_ns();
        if (now - last < 1000000)
            continue;
        last = now;
        snprintf(line, sizeof line, "hb %lld %llu\n", (long long)now,
                 (unsigned long long)passes);
        say(line);
        if (!verified && access(verify_path, F_OK) == 0) {
            verified = 1;
            int ok = checksum(cold, cold_n) == sum;
            snprintf(line, sizeof line, "verify %s %lld\n", ok ? "OK" : "BAD",
                     (long long)mono_ns());
            say(line);
        }
    }
}
