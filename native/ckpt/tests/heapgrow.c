/* A program whose heap keeps growing, for checkpoint tests:
 *
 *     heapgrow DIR STEPS
 *
 * Every step it allocates a block of 1 to 16 KiB with malloc (from glibc's main heap, which
 * grows by moving the program break) and fills it with bytes that depend on the step; every
 * third step it frees an older block. Every 100 steps it checks every block still held, and
 * every 10 steps that /proc/self/cmdline is its own command line. A restored process whose
 * program break is not where its heap ends has malloc abort the first time it grows the heap
 * and then frees a block from before the restart. Writes "step i" every step and "heap: done
 * N OK" at the end to DIR/out.heap, or a line with BAD and exit 1. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct block {
    uint8_t *p;
    size_t len;
    long step;
};

static uint8_t byte_of(long step, size_t i) { return (uint8_t)(step * 29 + i * 7 + (i >> 9)); }

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    char path[4200];
    snprintf(path, sizeof path, "%s/out.heap", argv[1]);
    FILE *o = fopen(path, "w");
    if (!o)
        return 3;
    setvbuf(o, NULL, _IOLBF, 0);
    long steps = atol(argv[2]);
    char want[8192];
    size_t want_len = 0;
    for (int a = 0; a < argc; a++) {
        size_t l = strlen(argv[a]) + 1;
        if (want_len + l > sizeof want)
            return 2;
        memcpy(want + want_len, argv[a], l);
        want_len += l;
    }
    struct block *b = calloc((size_t)steps + 1, sizeof *b);
    if (!b)
        return 3;
    for (long i = 1; i <= steps; i++) {
        size_t len = 1024 + (size_t)(i * 7919 % 15361);
        b[i] = (struct block){malloc(len), len, i};
        if (!b[i].p) {
            fprintf(o, "heap: BAD malloc of %zu bytes at step %ld\n", len, i);
            return 1;
        }
        for (size_t k = 0; k < len; k++)
            b[i].p[k] = byte_of(i, k);
        if (i % 3 == 0) {
            long j = 1 + (long)(((uint64_t)i * 2654435761u >> 7) % (uint64_t)i);
            free(b[j].p);
            b[j].p = NULL;
        }
        if (i % 100 == 0)
            for (long j = 1; j <= i; j++)
                for (size_t k = 0; b[j].p && k < b[j].len; k++)
                    if (b[j].p[k] != byte_of(b[j].step, k)) {
                        fprintf(o, "heap: BAD byte %zu of the block of step %ld at step %ld\n", k, j, i);
                        return 1;
                    }
        if (i % 10 == 0) {
            char got[8192];
            int fd = open("/proc/self/cmdline", O_RDONLY);
            ssize_t n = fd >= 0 ? read(fd, got, sizeof got) : -1;
            if (fd >= 0)
                close(fd);
            if (n != (ssize_t)want_len || memcmp(got, want, want_len) != 0) {
                fprintf(o, "heap: BAD /proc/self/cmdline has %zd bytes, not its %zu at step %ld\n", n, want_len, i);
                return 1;
            }
        }
        fprintf(o, "step %ld\n", i);
        struct timespec ms = {0, 2 * 1000 * 1000};
        nanosleep(&ms, NULL);
    }
    fprintf(o, "heap: done %ld OK\n", steps);
    return 0;
}
