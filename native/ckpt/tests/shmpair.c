/* A producer and a consumer sharing a POSIX shared-memory ring, with an event loop, for
 * checkpoint tests:
 *
 *     shmpair DIR RECORDS
 *
 * The process creates a POSIX shared-memory object (shm_open, 0600, named after its pid),
 * maps it, closes the descriptor and forks the consumer. The producer writes RECORDS records
 * of 4000 bytes into a ring of 64 slots in the object, each with its number and a checksum of
 * bytes that depend on the number, and after each one writes a byte into a pipe to the
 * consumer, pausing 0.2 ms between records. The consumer runs an epoll loop over the pipe, a
 * 2 ms interval timerfd and an eventfd of its own: on the pipe it drains the ring, checking
 * every record's number and bytes, writes "step N" to DIR/out.consumer for each, and adds 1 to
 * the eventfd; on the eventfd it counts what it reads; on the timer it counts ticks. When it
 * has every record it waits until the pipe has carried exactly RECORDS bytes and the eventfd
 * has given back every batch, opens the object again by its name and checks the counts there,
 * removes the name and writes "consumer: done OK". The producer collects the consumer by its pid and
 * writes "producer: done OK" to DIR/out.producer. A record lost, doubled, reordered or
 * damaged, a count that is off, a timer or an eventfd that stops shows as BAD and exits 1. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "records.h"

#define SLOTS 64

struct ring {
    _Atomic uint64_t head; /* records written */
    _Atomic uint64_t tail; /* records read */
    struct slot slot[SLOTS];
};

static struct ring *map_ring(const char *name, int flags)
{
    int fd = shm_open(name, flags, 0600);
    if (fd < 0)
        return NULL;
    if ((flags & O_CREAT) && ftruncate(fd, sizeof(struct ring)) != 0)
        return NULL;
    void *p = mmap(NULL, sizeof(struct ring), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return p == MAP_FAILED ? NULL : p;
}

static int consumer(const char *name, struct ring *r, int pipe_in, uint64_t records)
{
    FILE *f = out("consumer");
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    int efd = eventfd(0, EFD_NONBLOCK);
    struct itimerspec it = {{0, 2000000}, {0, 2000000}};
    int ep = epoll_create1(0);
    if (tfd < 0 || efd < 0 || timerfd_settime(tfd, 0, &it, NULL) != 0 || ep < 0)
        bad(f, "setup", 0, 0);
    int fds[3] = {pipe_in, tfd, efd};
    for (uint32_t k = 0; k < 3; k++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = k};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, fds[k], &ev) != 0)
            bad(f, "epoll_ctl", k, 0);
    }
    uint64_t notes = 0, batches = 0, events = 0, ticks = 0;
    while (atomic_load(&r->tail) < records || notes < records || events < batches) {
        struct epoll_event got[3];
        int n = epoll_wait(ep, got, 3, 2000);
        if (n == 0)
            bad(f, "the event loop heard nothing for 2 s (records, notes)", atomic_load(&r->tail), notes);
        for (int i = 0; i < n; i++) {
            uint64_t v;
            if (got[i].data.u32 == 1) {
                if (read(tfd, &v, 8) == 8)
                    ticks += v;
                continue;
            }
            if (got[i].data.u32 == 2) {
                if (read(efd, &v, 8) == 8)
                    events += v;
                if (events > batches)
                    bad(f, "the eventfd gave back more than was added (added, read)", batches, events);
                continue;
            }
            char buf[4096];
            ssize_t got_bytes = read(pipe_in, buf, sizeof buf);
            if (got_bytes <= 0)
                bad(f, "the pipe from the producer ended (records, notes)", atomic_load(&r->tail), notes);
            notes += (uint64_t)got_bytes;
            uint64_t one = 1;
            if (write(efd, &one, 8) != 8)
                bad(f, "eventfd write", batches, 0);
            batches++;
            uint64_t tail = atomic_load(&r->tail);
            while (tail < atomic_load(&r->head)) {
                if (!check(&r->slot[tail % SLOTS], tail + 1))
                    bad(f, "record (expected, found)", tail + 1, r->slot[tail % SLOTS].seq);
                tail++;
                atomic_store(&r->tail, tail);
                fprintf(f, "step %llu\n", (unsigned long long)tail);
            }
            if (notes > tail)
                bad(f, "the pipe carried more notes than records were written (notes, records)", notes, tail);
        }
    }
    if (notes != records || events != batches)
        bad(f, "counts at the end (notes, eventfd)", notes, events);
    if (ticks == 0)
        bad(f, "the timer never fired", 0, 0);
    struct ring *again = map_ring(name, O_RDWR);
    if (!again)
        bad(f, "the shared-memory object is gone by its name", 0, 0);
    if (atomic_load(&again->head) != records || atomic_load(&again->tail) != records)
        bad(f, "the object reopened by name holds other counts", atomic_load(&again->head), atomic_load(&again->tail));
    shm_unlink(name);
    fprintf(f, "consumer: done OK\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    snprintf(dir, sizeof dir, "%s", argv[1]);
    uint64_t records = strtoull(argv[2], NULL, 10);
    char name[64];
    snprintf(name, sizeof name, "/cairn-shmpair-%d", (int)getpid());
    shm_unlink(name);
    struct ring *r = map_ring(name, O_RDWR | O_CREAT | O_EXCL);
    int p[2];
    if (!r || pipe(p) != 0)
        return 3;
    pid_t c = fork();
    if (c < 0)
        return 3;
    if (c == 0) {
        close(p[1]);
        return consumer(name, r, p[0], records);
    }
    close(p[0]);
    FILE *f = out("producer");
    struct timespec pause = {0, 200000};
    for (uint64_t seq = 1; seq <= records; seq++) {
        while (seq - atomic_load(&r->tail) > SLOTS)
            nanosleep(&pause, NULL);
        fill(&r->slot[(seq - 1) % SLOTS], seq);
        atomic_store(&r->head, seq);
        if (write(p[1], "r", 1) != 1)
            bad(f, "pipe write", seq, 0);
        nanosleep(&pause, NULL);
    }
    int st;
    if (waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        bad(f, "the consumer's end (status)", (uint64_t)st, 0);
    fprintf(f, "producer: done OK\n");
    return 0;
}
