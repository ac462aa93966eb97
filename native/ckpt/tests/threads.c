/* N threads, each pinned to a CPU of the allowed set (round robin) when asked, each adding
 * into its own counter and checking its own invariant; the main thread joins them after
 * --steps. Every thread reports its CPU set and sched_getcpu() at the end, and after every
 * second of run time, so a test can compare before and after a restart. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long steps;
static int pin;

struct arg {
    int id;
    uint64_t sum;
    int bad;
    int cpu;
};

/* "0,1": the CPUs in the thread's mask. */
static void mask_text(char *buf, size_t len)
{
    cpu_set_t m;
    sched_getaffinity(0, sizeof m, &m);
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < CPU_SETSIZE && o + 8 < len; i++)
        if (CPU_ISSET(i, &m))
            o += (size_t)snprintf(buf + o, len - o, o ? ",%d" : "%d", i);
}

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

static void *work(void *p)
{
    struct arg *a = p;
    if (pin) {
        cpu_set_t allowed, one;
        sched_getaffinity(0, sizeof allowed, &allowed);
        int n = CPU_COUNT(&allowed), k = a->id % n, c = -1;
        for (int i = 0; i < CPU_SETSIZE && k >= 0; i++)
            if (CPU_ISSET(i, &allowed) && k-- == 0)
                c = i;
        CPU_ZERO(&one);
        CPU_SET(c, &one);
        sched_setaffinity(0, sizeof one, &one);
        a->cpu = c;
    }
    char mask[256];
    mask_text(mask, sizeof mask);
    pthread_mutex_lock(&out_lock);
    printf("thread %d start mask %s\n", a->id, mask);
    fflush(stdout);
    pthread_mutex_unlock(&out_lock);
    volatile uint64_t local = 0;
    for (long i = 1; i <= steps; i++) {
        local += (uint64_t)i;
        a->sum += (uint64_t)i;
        if (local != a->sum)
            a->bad = 1;
        if (i % 1000 == 0) {
            struct timespec ts = {0, 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    mask_text(mask, sizeof mask);
    pthread_mutex_lock(&out_lock);
    printf("thread %d end mask %s cpu %d\n", a->id, mask, sched_getcpu());
    fflush(stdout);
    pthread_mutex_unlock(&out_lock);
    return NULL;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 4;
    steps = argc > 2 ? atol(argv[2]) : 2000000;
    pin = argc > 3 && strcmp(argv[3], "pin") == 0;
    pthread_t t[64];
    struct arg a[64];
    memset(a, 0, sizeof a);
    for (int i = 0; i < n; i++) {
        a[i].id = i;
        pthread_create(&t[i], NULL, work, &a[i]);
    }
    printf("threads: started %d\n", n);
    fflush(stdout);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        uint64_t want = (uint64_t)steps * (uint64_t)(steps + 1) / 2;
        if (a[i].sum != want || a[i].bad) {
            printf("thread %d: BAD sum %llu\n", i, (unsigned long long)a[i].sum);
            bad = 1;
        }
    }
    printf("threads: done %s\n", bad ? "BAD" : "OK");
    return bad;
}
