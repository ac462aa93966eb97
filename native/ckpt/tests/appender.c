/* Appends numbered lines to a file (argv[1]) with O_APPEND, and keeps a second file open
 * for reading at a position; checks both at the end: the log holds lines 1..N in order
 * (a restarted process goes on appending after what it had written). */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    const char *log = argv[1];
    int n = argc > 2 ? atoi(argv[2]) : 400;
    int block = argc > 3 && strcmp(argv[3], "block") == 0;
    if (block) {
        /* A program that blocks every signal, and installs its own handler for all. */
        sigset_t all;
        sigfillset(&all);
        sigprocmask(SIG_BLOCK, &all, NULL);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_IGN;
        for (int s = 1; s < 65; s++)
            if (s != SIGKILL && s != SIGSTOP)
                sigaction(s, &sa, NULL);
    }
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd < 0)
        return 2;
    printf("appender: started\n");
    fflush(stdout);
    for (int i = 1; i <= n; i++) {
        char line[32];
        int len = snprintf(line, sizeof line, "line %d\n", i);
        if (write(fd, line, (size_t)len) != len)
            return 3;
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    close(fd);
    FILE *f = fopen(log, "r");
    char buf[64];
    int want = 1, bad = 0;
    while (fgets(buf, sizeof buf, f)) {
        if (atoi(buf + 5) != want) {
            bad = 1;
            break;
        }
        want++;
    }
    fclose(f);
    bad |= want != n + 1;
    printf("appender: done %s (%d lines)\n", bad ? "BAD" : "OK", want - 1);
    return bad;
}
