/* A large array (argv[1] MiB, default 1024) filled with a pattern, then verified again and
 * again while a counter runs; the final line says whether every byte still matched. */
#include <stdint.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 1024;
    int rounds = argc > 2 ? atoi(argv[2]) : 20;
    size_t n = mib << 17; /* uint64_t words */
    uint64_t *a = malloc(n * sizeof *a);
    if (!a)
        return 2;
    for (size_t i = 0; i < n; i++)
        a[i] = i * 0x9e3779b97f4a7c15ull;
    printf("bigarray: filled %zu MiB\n", mib);
    fflush(stdout);
    int bad = 0;
    for (int r = 0; r < rounds && !bad; r++) {
        for (size_t i = 0; i < n; i++)
            if (a[i] != i * 0x9e3779b97f4a7c15ull) {
                bad = 1;
                printf("bigarray: word %zu differs\n", i);
                break;
            }
        /* Where the kernel says the array is and which policy governs it: a restored
         * process has its pages bound to the node they were on (MPOL_PREFERRED, 1). */
        void *page = (char *)a + ((n * sizeof *a / 2) & ~4095ul);
        int node = -1, mode = -1;
        unsigned long mask[16] = {0};
        syscall(SYS_move_pages, 0, 1ul, &page, NULL, &node, 0);
        syscall(SYS_get_mempolicy, &mode, mask, 1024ul, page, 2ul /* MPOL_F_ADDR */);
        printf("round %d node %d policy %d mask %lx\n", r, node, mode, mask[0]);
        fflush(stdout);
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    printf("bigarray: done %s\n", bad ? "BAD" : "OK");
    return bad;
}
