/* A program run on a pseudo-terminal (under `script`), for checkpoint tests:
 *
 *     ttyprog DIR STEPS
 *
 * Every 2 ms it checks that its standard output is a terminal, that it has a controlling
 * terminal (/dev/tty opens), that its process group is the terminal's foreground group, that
 * the terminal still has the settings it gave it at the start (no echo, 77 columns), that the
 * /dev/tty it opened at the start and holds still is that terminal, and then
 * writes "line i" to the terminal and "step i" to DIR/out.tty. It ends with "tty: done N OK"
 * in DIR/out.tty, or a line with BAD and exit 1. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    char path[4200];
    snprintf(path, sizeof path, "%s/out.tty", argv[1]);
    FILE *o = fopen(path, "w");
    if (!o)
        return 3;
    setvbuf(o, NULL, _IOLBF, 0);
    long steps = atol(argv[2]);
    struct termios t;
    struct winsize w = {.ws_row = 33, .ws_col = 77};
    if (tcgetattr(1, &t) != 0) {
        fprintf(o, "tty: BAD not a terminal\n");
        return 1;
    }
    t.c_lflag &= ~(tcflag_t)ECHO;
    tcsetattr(1, TCSANOW, &t);
    ioctl(1, TIOCSWINSZ, &w);
    int held = open("/dev/tty", O_RDWR | O_NOCTTY);
    for (long i = 1; i <= steps; i++) {
        int tty = open("/dev/tty", O_RDWR | O_NOCTTY);
        struct winsize now;
        if (!isatty(1) || tty < 0 || tcgetpgrp(1) != getpgrp() || tcgetattr(1, &t) != 0 || (t.c_lflag & ECHO) ||
            ioctl(1, TIOCGWINSZ, &now) != 0 || now.ws_col != 77 || !isatty(held) || tcgetpgrp(held) != getpgrp() ||
            ioctl(held, TIOCGWINSZ, &now) != 0 || now.ws_col != 77) {
            fprintf(o, "tty: BAD at step %ld: isatty %d, /dev/tty %d, held %d, foreground %d, group %d, columns %d\n",
                    i, isatty(1), tty, isatty(held), (int)tcgetpgrp(1), (int)getpgrp(), (int)now.ws_col);
            return 1;
        }
        close(tty);
        printf("line %ld\n", i);
        fflush(stdout);
        fprintf(o, "step %ld\n", i);
        struct timespec ms = {0, 2 * 1000 * 1000};
        nanosleep(&ms, NULL);
    }
    fprintf(o, "tty: done %ld OK\n", steps);
    return 0;
}
