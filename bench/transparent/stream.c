/*
** stream.c: two pinned threads streaming over memory, for cairn-bench-transparent's
** comparison of iteration times before a checkpoint and after a restart.
**
**     stream MIB AFTER
**
** Thread i pins itself to the i-th CPU of the process's mask, then allocates and fills its
** own array of MIB MiB (first touch after pinning, so the pages are on its CPU's NUMA node),
** and updates it in place, a[k] = a[k] * 0.5 + 1.0, one whole pass per iteration: memory
** bound, one read and one write stream. After each iteration it prints
**
**     it THREAD K START_NS END_NS CPU_NS CPU NIVCSW LIFE0 LIFE1
**
** with CLOCK_MONOTONIC at the start and end of the pass, the CPU time the thread got during
** it (CLOCK_THREAD_CPUTIME_ID), sched_getcpu() at its end, the thread's involuntary context
** switches during it, and at the start and at the end of the pass whether the process is
** the original (0) or a restored copy (1: the process id has changed). An iteration with
** LIFE0 != LIFE1 spans the checkpoint and the restart; its CPU_NS and NIVCSW are -1.
**
** The original runs until it is killed. In a restored copy each thread first prints
** "mask THREAD LIST" (the CPU mask it came back with), runs AFTER whole iterations, and
** ends; the main thread then prints "stream: done".
*/
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static size_t words;
static long after;
static long pid0;
static pthread_mutex_t out = PTHREAD_MUTEX_INITIALIZER;

static long long mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static long long thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (long long)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int restored(void)
{
    return syscall(SYS_getpid) != pid0;
}

static long nivcsw(void)
{
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    return ru.ru_nivcsw;
}

/* One line on stdout, whole, at once (pipes are fully buffered by stdio otherwise). */
__attribute__((format(printf, 1, 2))) static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&out);
    vprintf(fmt, ap);
    fflush(stdout);
    pthread_mutex_unlock(&out);
    va_end(ap);
}

static void *work(void *p)
{
    int id = (int)(intptr_t)p;
    cpu_set_t allowed, one;
    sched_getaffinity(0, sizeof allowed, &allowed);
    int k = id % CPU_COUNT(&allowed), cpu = -1;
    for (int c = 0; c < CPU_SETSIZE && cpu < 0; c++)
        if (CPU_ISSET(c, &allowed) && k-- == 0)
            cpu = c;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0) {
        say("stream: thread %d cannot pin itself to CPU %d\n", id, cpu);
        exit(1);
    }
    double *a = malloc(words * sizeof *a);
    if (!a) {
        say("stream: cannot allocate\n");
        exit(1);
    }
    for (size_t i = 0; i < words; i++)
        a[i] = (double)(i % 1000);
    int shown = 0;
    long done_after = 0;
    for (long it = 0;; it++) {
        int life0 = restored();
        long cs0 = nivcsw();
        long long c0 = thread_cpu_ns();
        long long t0 = mono_ns();
        for (size_t i = 0; i < words; i++)
            a[i] = a[i] * 0.5 + 1.0;
        long long t1 = mono_ns();
        int life1 = restored();
        /* A restored thread is a new thread: its counters start again from zero. */
        long cs = life0 == life1 ? nivcsw() - cs0 : -1;
        long long cpu_ns = life0 == life1 ? thread_cpu_ns() - c0 : -1;
        if (life1 && !shown) {
            cpu_set_t m;
            char list[256];
            size_t o = 0;
            sched_getaffinity(0, sizeof m, &m);
            list[0] = 0;
            for (int c = 0; c < CPU_SETSIZE && o + 8 < sizeof list; c++)
                if (CPU_ISSET(c, &m))
                    o += (size_t)snprintf(list + o, sizeof list - o, o ? ",%d" : "%d", c);
            say("mask %d %s\n", id, list);
            shown = 1;
        }
        say("it %d %ld %lld %lld %lld %d %ld %d %d\n", id, it, t0, t1, cpu_ns, sched_getcpu(), cs, life0,
            life1);
        if (life0 && life1 && ++done_after >= after)
            break;
    }
    free(a);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3 || atol(argv[1]) <= 0 || atol(argv[2]) <= 0) {
        fprintf(stderr, "usage: stream MIB AFTER\n");
        return 2;
    }
    words = (size_t)atol(argv[1]) << 17;
    after = atol(argv[2]);
    pid0 = syscall(SYS_getpid);
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        if (pthread_create(&t[i], NULL, work, (void *)(intptr_t)i) != 0) {
            fprintf(stderr, "stream: cannot start a thread\n");
            return 1;
        }
    say("stream: started\n");
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    say("stream: done\n");
    return 0;
}
