/* What the producer/consumer test programs share: their output files and records.
 *
 * Each program writes its lines to DIR/out.<name> (line-buffered, so a restart that cuts the
 * file back to its size at the checkpoint keeps whole lines). A record carries its number and
 * DATA bytes that depend only on it, with their checksum: a record lost, doubled, reordered
 * or damaged is seen by the reader. */
#ifndef CAIRN_TEST_RECORDS_H
#define CAIRN_TEST_RECORDS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DATA 4000

struct slot {
    uint64_t seq;
    uint64_t sum;
    unsigned char data[DATA];
};

/* DIR, where the out.<name> files go. */
static char dir[4096];

static inline FILE *out(const char *name)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/out.%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        exit(3);
    setvbuf(f, NULL, _IOLBF, 0);
    return f;
}

static inline void bad(FILE *f, const char *what, uint64_t a, uint64_t b)
{
    fprintf(f, "BAD: %s (%llu, %llu)\n", what, (unsigned long long)a, (unsigned long long)b);
    exit(1);
}

static inline void fill(struct slot *s, uint64_t seq)
{
    uint64_t sum = 0, x = seq * 0x9e3779b97f4a7c15ull + 1;
    for (int i = 0; i < DATA; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        s->data[i] = (unsigned char)x;
        sum = sum * 31 + s->data[i];
    }
    s->sum = sum;
    s->seq = seq;
}

static inline int check(const struct slot *s, uint64_t seq)
{
    struct slot want;
    fill(&want, seq);
    return s->seq == seq && s->sum == want.sum && memcmp(s->data, want.data, DATA) == 0;
}

#endif
