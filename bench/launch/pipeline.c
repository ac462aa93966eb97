/*
** pipeline.c: three processes streaming over two pipes, producer | filter | consumer, the
** job cairn-bench-launch checkpoints in part c.
**
**     pipeline MIB RATE HBFILE
**
** The process started is the producer. It makes two pipes and forks the filter and the
** consumer; each of the three then fills MIB MiB of its own heap with non-zero pseudo-random
** words (after the fork, so no page is shared), appends "ready ROLE NS" to HBFILE (ROLE is
** producer, filter or consumer) and streams:
**
** - the producer writes records of 4096 bytes (at most PIPE_BUF, so each write is whole):
**   a sequence number, then 511 words generated from it (splitmix64), at RATE MB/s (10^6
**   bytes), paced by CLOCK_MONOTONIC in steps of 1 ms. When it falls behind by more than
**   100 ms (a checkpoint or a restart stopped it) it paces from now rather than catching
**   up. RATE 0: it writes nothing and the pipeline is idle;
** - the filter reads each record and writes it on with every payload word replaced by
**   f(word) = rotl(word, 17) ^ 0x5bd1e9955bd1e995;
** - the consumer reads each record and checks its sequence number (the previous one + 1)
**   and every word (f of what the producer generates for that number). It appends
**   "hb NS RECORDS" to HBFILE (CLOCK_MONOTONIC, records checked so far) at the first record
**   that arrives 10 ms or more after the last line, so also at the first record after a
**   restart; and "hb NS 0" when it starts. On a wrong record it appends
**   "BAD seq S expected E" or "BAD word K of record S" and exits 1.
**
** Each process also writes one word in one page of its heap per record, so its memory
** changes as it streams. The filter and the consumer end when their input ends (the
** producer was killed); the bench ends the producer with SIGKILL.
*/
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define REC 4096
#define WORDS (REC / 8)
#define PAGE_WORDS 512

static const char *hbfile;

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void say(const char *line)
{
    int fd = open(hbfile, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return;
    ssize_t w = write(fd, line, strlen(line));
    (void)w;
    close(fd);
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t filt(uint64_t w)
{
    return ((w << 17) | (w >> 47)) ^ 0x5bd1e9955bd1e995ull;
}

static void gen(uint64_t *r, uint64_t seq)
{
    uint64_t s = seq * 0xd1b54a32d192ed03ull + 1;
    r[0] = seq;
    for (int k = 1; k < WORDS; k++)
        r[k] = splitmix(&s);
}

/* MIB MiB of non-zero pseudo-random words, different in each process; then "ready ROLE NS". */
static uint64_t *fill(size_t mib, uint64_t seed, const char *role)
{
    size_t n = mib << 17;
    uint64_t *m = malloc(n * sizeof *m);
    if (!m) {
        fprintf(stderr, "pipeline: cannot allocate %zu MiB\n", mib);
        exit(1);
    }
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++)
        m[i] = splitmix(&s) | 1;
    char line[96];
    snprintf(line, sizeof line, "ready %s %lld\n", role, (long long)mono_ns());
    say(line);
    return m;
}

/* Change one word of one page of the heap, the next page each time. */
static void touch(uint64_t *m, size_t pages, uint64_t k)
{
    m[(k % pages) * PAGE_WORDS + (k / pages) % PAGE_WORDS] ^= k << 1;
}

static int read_full(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t r = write(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static void nap_ns(int64_t ns)
{
    struct timespec ts = {ns / 1000000000, ns % 1000000000};
    nanosleep(&ts, NULL); /* EINTR (a checkpoint, a restart): the caller paces again */
}

static int producer(int out, size_t mib, double rate)
{
    uint64_t *m = fill(mib, 1, "producer");
    size_t pages = mib << 8;
    uint64_t rec[WORDS];
    uint64_t seq = 0;
    if (rate <= 0) {
        for (;;)
            nap_ns(100000000);
    }
    const double per_rec_ns = REC / rate * 1e3; /* rate in MB/s = bytes per microsecond */
    int64_t base = mono_ns();
    uint64_t base_seq = 0;
    for (;;) {
        int64_t now = mono_ns();
        int64_t due = base + (int64_t)((double)(seq - base_seq) * per_rec_ns);
        if (now - due > 100000000) { /* stopped for a while: pace from now */
            base = now;
            base_seq = seq;
        } else if (due > now + 1000000) {
            nap_ns(due - now);
            continue;
        }
        gen(rec, seq);
        if (write_full(out, rec, REC) != 0)
            return 0;
        touch(m, pages, seq);
        seq++;
    }
}

static int filter(int in, int out, size_t mib)
{
    uint64_t *m = fill(mib, 2, "filter");
    size_t pages = mib << 8;
    uint64_t rec[WORDS];
    for (uint64_t k = 0;; k++) {
        if (read_full(in, rec, REC) != 0)
            return 0;
        for (int i = 1; i < WORDS; i++)
            rec[i] = filt(rec[i]);
        if (write_full(out, rec, REC) != 0)
            return 0;
        touch(m, pages, k);
    }
}

static int consumer(int in, size_t mib)
{
    uint64_t *m = fill(mib, 3, "consumer");
    size_t pages = mib << 8;
    uint64_t rec[WORDS], want[WORDS];
    char line[160];
    uint64_t expect = 0;
    int64_t last = mono_ns();
    snprintf(line, sizeof line, "hb %lld %llu\n", (long long)last, 0ull);
    say(line);
    for (;;) {
        if (read_full(in, rec, REC) != 0)
            return 0;
        int64_t now = mono_ns();
        if (rec[0] != expect) {
            snprintf(line, sizeof line, "BAD seq %llu expected %llu\n",
                     (unsigned long long)rec[0], (unsigned long long)expect);
            say(line);
            return 1;
        }
        gen(want, expect);
        for (int i = 1; i < WORDS; i++) {
            if (rec[i] != filt(want[i])) {
                snprintf(line, sizeof line, "BAD word %d of record %llu\n", i,
                         (unsigned long long)expect);
                say(line);
                return 1;
            }
        }
        touch(m, pages, expect);
        expect++;
        if (now - last >= 10000000) {
            last = now;
            snprintf(line, sizeof line, "hb %lld %llu\n", (long long)now,
                     (unsigned long long)expect);
            say(line);
        }
    }
}

int main(int argc, char **argv)
{
    if (argc != 4 || atol(argv[1]) <= 0 || atof(argv[2]) < 0) {
        fprintf(stderr, "usage: pipeline MIB RATE HBFILE\n");
        return 2;
    }
    size_t mib = (size_t)atol(argv[1]);
    double rate = atof(argv[2]);
    hbfile = argv[3];
    int a[2], b[2];
    if (pipe(a) != 0 || pipe(b) != 0) {
        perror("pipeline: pipe");
        return 1;
    }
    pid_t f = fork();
    if (f < 0) {
        perror("pipeline: fork");
        return 1;
    }
    if (f == 0) {
        close(a[1]);
        close(b[0]);
        return filter(a[0], b[1], mib);
    }
    pid_t c = fork();
    if (c < 0) {
        perror("pipeline: fork");
        return 1;
    }
    if (c == 0) {
        close(a[0]);
        close(a[1]);
        close(b[1]);
        return consumer(b[0], mib);
    }
    close(a[0]);
    close(b[0]);
    close(b[1]);
    signal(SIGPIPE, SIG_IGN);
    return producer(a[1], mib, rate);
}
