/* Holds one thing a checkpoint of the process cannot capture, named by the first argument,
 * then counts STEPS steps of 5 ms into DIR/out.<CAIRN_PROC>, and exits 0: a refused
 * checkpoint must leave it running.
 *
 *   holder pipe|socket|shared|anon|eventfd|child|fifo|dirs STEPS DIR
 *
 *   pipe     a pipe to a forked child that reads it
 *   socket   a TCP socket listening on 127.0.0.1
 *   shared   a file mapped shared and writable (DIR/shared.dat, 4 KiB): each step adds 1
 *            to byte STEP mod 4096, so a file not put back to its bytes at the checkpoint
 *            ends with some bytes at 2
 *   anon     the same in MAP_SHARED|MAP_ANONYMOUS memory; the end prints the bytes' sum
 *   eventfd  an eventfd
 *   child    a forked child that sleeps until the end
 *   fifo     DIR/fifo (made by the caller, who holds its reading end) opened for writing,
 *            one byte a step; SIGPIPE is ignored, and a failed write is printed once and
 *            the program goes on without the FIFO
 *   dirs     a directory (DIR, opened O_DIRECTORY), /dev/null and /dev/urandom, used every
 *            step: each step appends a line to DIR/dirlog through openat() on the
 *            directory's descriptor, writes to /dev/null and reads /dev/urandom
 *
 * A checkpoint is refused for pipe, socket, eventfd and child, and for fifo unless
 * CAIRN_CKPT_EXTERNAL=close; shared, anon and dirs come back. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: holder pipe|socket|shared|anon|eventfd|child|fifo|dirs STEPS DIR\n");
        return 2;
    }
    const char *what = argv[1];
    long steps = atol(argv[2]);
    char path[4096];
    const char *proc = getenv("CAIRN_PROC");
    snprintf(path, sizeof path, "%s/out.%s", argv[3], proc ? proc : "0");
    if (!freopen(path, "w", stdout))
        return 2;
    int wfd = -1;
    pid_t child = -1;
    unsigned char *map = NULL;
    int dirfd = -1, nullfd = -1, randfd = -1;
    if (strcmp(what, "pipe") == 0) {
        int p[2];
        if (pipe(p) != 0)
            return 3;
        child = fork();
        if (child == 0) {
            close(p[1]);
            char c;
            while (read(p[0], &c, 1) > 0) {
            }
            _exit(0);
        }
        close(p[0]);
        wfd = p[1];
    } else if (strcmp(what, "socket") == 0) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) != 0 || listen(s, 4) != 0)
            return 3;
    } else if (strcmp(what, "shared") == 0) {
        snprintf(path, sizeof path, "%s/shared.dat", argv[3]);
        int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || ftruncate(fd, 4096) != 0)
            return 3;
        map = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED)
            return 3;
        close(fd);
    } else if (strcmp(what, "anon") == 0) {
        map = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (map == MAP_FAILED)
            return 3;
    } else if (strcmp(what, "fifo") == 0) {
        signal(SIGPIPE, SIG_IGN);
        snprintf(path, sizeof path, "%s/fifo", argv[3]);
        wfd = open(path, O_WRONLY);
        if (wfd < 0)
            return 3;
    } else if (strcmp(what, "dirs") == 0) {
        dirfd = open(argv[3], O_RDONLY | O_DIRECTORY);
        nullfd = open("/dev/null", O_WRONLY);
        randfd = open("/dev/urandom", O_RDONLY);
        if (dirfd < 0 || nullfd < 0 || randfd < 0)
            return 3;
    } else if (strcmp(what, "eventfd") == 0) {
        if (eventfd(0, 0) < 0)
            return 3;
    } else if (strcmp(what, "child") == 0) {
        child = fork();
        if (child == 0) {
            pause();
            _exit(0);
        }
    } else {
        fprintf(stderr, "holder: unknown %s\n", what);
        return 2;
    }
    for (long i = 1; i <= steps; i++) {
        printf("step %ld\n", i);
        fflush(stdout);
        if (wfd >= 0 && write(wfd, "x", 1) != 1) {
            if (child > 0)
                return 4;
            printf("holder: the FIFO is closed: %s\n", strerror(errno));
            close(wfd);
            wfd = -1;
        }
        if (map)
            map[i % 4096] += 1;
        if (dirfd >= 0) {
            char line[32], r[8];
            int fd = openat(dirfd, "dirlog", O_WRONLY | O_APPEND | O_CREAT, 0600);
            int len = snprintf(line, sizeof line, "%ld\n", i);
            if (fd < 0 || write(fd, line, (size_t)len) != len || close(fd) != 0 ||
                write(nullfd, line, (size_t)len) != len || read(randfd, r, sizeof r) != (ssize_t)sizeof r)
                return 4;
        }
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    if (wfd >= 0)
        close(wfd);
    if (child > 0) {
        if (strcmp(what, "child") == 0)
            kill(child, SIGTERM);
        waitpid(child, NULL, 0);
    }
    if (map) {
        long sum = 0;
        for (int k = 0; k < 4096; k++)
            sum += map[k];
        printf("holder: sum %ld\n", sum);
    }
    printf("holder: done\n");
    return 0;
}
