/* A single-threaded counter: prints its step every few milliseconds and checks its own
 * state (a running sum kept in two places) every step, so a restored process that lost or
 * garbled memory says so. Exits 0 after --steps steps. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t sum_static;

int main(int argc, char **argv)
{
    long steps = argc > 1 ? atol(argv[1]) : 1000;
    long sleep_us = argc > 2 ? atol(argv[2]) : 2000;
    if (argc > 3) {
        /* Output to <dir>/out.<process index in the job>: a file, so that a restored
         * process goes on writing it where it was at the checkpoint. */
        char path[4096];
        const char *proc = getenv("CAIRN_PROC");
        snprintf(path, sizeof path, "%s/out.%s", argv[3], proc ? proc : "0");
        if (!freopen(path, "w", stdout))
            return 2;
    }
    uint64_t *heap = malloc(1 << 20);
    memset(heap, 0, 1 << 20);
    uint64_t sum_stack = 0;
    for (long i = 1; i <= steps; i++) {
        sum_stack += (uint64_t)i;
        sum_static += (uint64_t)i;
        heap[i % (1 << 17)] += (uint64_t)i;
        if (sum_stack != sum_static || sum_stack != (uint64_t)i * (uint64_t)(i + 1) / 2) {
            printf("counter: BAD state at step %ld\n", i);
            return 1;
        }
        printf("step %ld\n", i);
        fflush(stdout);
        struct timespec ts = {0, sleep_us * 1000};
        nanosleep(&ts, NULL);
    }
    uint64_t h = 0;
    for (long k = 0; k < (1 << 17); k++)
        h += heap[k];
    printf("counter: done, sum %llu heap %llu %s\n", (unsigned long long)sum_static,
           (unsigned long long)h, h == sum_static ? "OK" : "BAD");
    return h == sum_static ? 0 : 1;
}
