/* A process tree for checkpoint tests: a parent and the child it starts count together, each
 * in its own file (<dir>/out.parent, <dir>/out.child), a step every few milliseconds. Every
 * step each checks its own pid (and the child its parent's) against the one it had at the
 * start, and its memory (a running sum kept in two places); at the end the parent waits for
 * the child by the pid fork returned and checks its exit status (7).
 *
 *     tree fork STEPS DIR    the child is a fork of the parent
 *     tree exec STEPS DIR    the child is this program again, run by fork and exec
 *     tree zombie STEPS DIR  the child ends at once with status 7 and is collected only at
 *                            the end (DIR/out.child is not written)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int count(const char *role, long steps, const char *dir, pid_t parent)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/out.%s", dir, role);
    FILE *out = fopen(path, "w");
    if (!out)
        return 2;
    pid_t me = getpid();
    uint64_t sum_stack = 0;
    static uint64_t sum_static;
    for (long i = 1; i <= steps; i++) {
        sum_stack += (uint64_t)i;
        sum_static += (uint64_t)i;
        if (getpid() != me || (parent && getppid() != parent)) {
            fprintf(out, "%s: BAD ids at step %ld: pid %d (was %d), parent %d (was %d)\n", role, i, (int)getpid(),
                    (int)me, (int)getppid(), (int)parent);
            fclose(out);
            return 1;
        }
        if (sum_stack != sum_static || sum_stack != (uint64_t)i * (uint64_t)(i + 1) / 2) {
            fprintf(out, "%s: BAD state at step %ld\n", role, i);
            fclose(out);
            return 1;
        }
        fprintf(out, "step %ld\n", i);
        fflush(out);
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    fprintf(out, "%s: done OK\n", role);
    fclose(out);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 4)
        return 2;
    long steps = atol(argv[2]);
    if (strcmp(argv[1], "child") == 0)
        return count("child", steps, argv[3], (pid_t)atol(argv[4])) == 0 ? 7 : 1;
    pid_t parent = getpid();
    pid_t child = fork();
    if (child < 0)
        return 2;
    if (child == 0) {
        if (strcmp(argv[1], "zombie") == 0)
            _exit(7);
        if (strcmp(argv[1], "exec") == 0) {
            char ppid[16];
            snprintf(ppid, sizeof ppid, "%d", (int)parent);
            execl("/proc/self/exe", argv[0], "child", argv[2], argv[3], ppid, (char *)NULL);
            _exit(3);
        }
        _exit(count("child", steps, argv[3], parent) == 0 ? 7 : 1);
    }
    int r = count("parent", steps, argv[3], 0);
    int st = 0;
    pid_t got = waitpid(child, &st, 0);
    char path[4096];
    snprintf(path, sizeof path, "%s/out.parent", argv[3]);
    FILE *out = fopen(path, "a");
    if (got != child || !WIFEXITED(st) || WEXITSTATUS(st) != 7) {
        fprintf(out, "tree: BAD child: waitpid gave %d status %#x for child %d\n", (int)got, st, (int)child);
        r = 1;
    } else {
        fprintf(out, "tree: child %d collected, status 7\n", (int)child);
    }
    fclose(out);
    return r;
}
