/* Holds one thing a checkpoint of the process cannot capture, named by the first argument,
 * then counts STEPS steps of 5 ms into DIR/out.<CAIRN_PROC>, and exits 0: a refused
 * checkpoint must leave it running.
 *
 *   holder pipe|socket|sockets|listen|shared|anon|inotify|child|static|fifo|epoll|selfpipe|selfsock|pairchild|anonchild|eventchild|dgramchild|seqchild|udpchild|unixdgchild|passfile|msgq|dirs STEPS DIR
 *
 *   pipe     a pipe to a forked child that reads it
 *   socket   a UDP socket connected to 127.0.0.1:9 (a peer outside the job)
 *   sockets  60 of them (a refusal too long for one line of the protocol unless cut)
 *   listen   a TCP socket listening on 127.0.0.1, its port written to DIR/port; each step
 *            accepts a waiting connection, if any, and writes "hello" to it
 *   shared   a file mapped shared and writable (DIR/shared.dat, 4 KiB): each step adds 1
 *            to byte STEP mod 4096, so a file not put back to its bytes at the checkpoint
 *            ends with some bytes at 2
 *   anon     the same in MAP_SHARED|MAP_ANONYMOUS memory; the end prints the bytes' sum
 *   inotify  an inotify instance with watches 2 (DIR/ib) and 3 (DIR/ic, added by a path
 *            relative to DIR, the working directory); watch 1 (DIR/ia) was removed: each step
 *            creates a file in ib (and every tenth in ic) and waits (up to 2 s) for its event
 *            from the right watch; an event that never comes is counted, and a second one
 *            exits 13 (the one a checkpoint between the file and its event may take)
 *   child    a child that runs sleep with its environment cleared (so without the checkpoint
 *            library) until the end
 *   static   a child that runs DIR/static-sleep (statically linked, made by the caller), which
 *            cannot load the checkpoint library
 *   fifo     DIR/fifo (made by the caller, who holds its reading end) opened for writing,
 *            one byte a step; SIGPIPE is ignored, and a failed write is printed once and
 *            the program goes on without the FIFO
 *   epoll    an event loop: each step waits in epoll_wait for a 5 ms interval timerfd and
 *            writes 1 to an eventfd, which a second epoll watches, itself watched by the first
 *            (nested, as UCX does, the outer with the lower number); every 10 steps the
 *            eventfd must read 10 (exit 5 if the timer stops, 6 if epoll stops reporting the
 *            eventfd, 7 if its count is wrong)
 *   selfpipe a pipe with both ends in the process, always holding the previous step's number:
 *            each step writes its number and reads the one before (exit 8 if it is not
 *            there or wrong)
 *   selfsock the same through a Unix stream socket pair inside the process, in both directions
 *   pairchild a socket pair to a forked child that answers each number with the next one:
 *            each step sends its number and reads the answer to the previous step's, so
 *            there is always a number in flight one way or the other (exit 9 if an answer
 *            is wrong)
 *   anonchild MAP_SHARED|MAP_ANONYMOUS memory shared with a forked child, which copies word 0
 *            into word 1 over and over: each step writes its number into word 0 and waits
 *            (up to 2 s) for the child's copy (exit 10 if it never comes: the memory is no
 *            longer shared)
 *   eventchild an eventfd shared with a forked child, which reads it and adds what it read
 *            to a word of MAP_SHARED|MAP_ANONYMOUS memory: each step adds 1 to the eventfd
 *            and waits (up to 2 s) for the child's total to reach the step (exit 11 if it
 *            does not: the eventfd is no longer shared)
 *   dgramchild a Unix datagram socket pair to a forked child, which sends every message back:
 *            each step sends three messages of 100, 1000 and 5000 bytes whose bytes depend on
 *            the step, then takes the previous step's three back, checking their lengths,
 *            order and bytes (exit 12 if one is wrong), so that messages are in flight at
 *            almost any moment
 *   seqchild the same over a Unix seqpacket socket pair
 *   udpchild the same over UDP on 127.0.0.1: the parent's socket is bound and not connected
 *            (it sends to the address the child's first datagram came from), the child's is
 *            connected to the parent's
 *   unixdgchild the same over Unix datagram sockets, each bound to an abstract name the
 *            kernel chose and neither connected (the child sends to the parent's name)
 *   passfile two children: the first opens DIR/passed.dat and passes it to the second over a
 *            Unix socket (SCM_RIGHTS); the parent never holds it. Each step the first writes
 *            "P<step>" through it, then the second "C<step>", one offset for both; at the end
 *            the parent reads the file back (exit 14 if the lines are not P1 C1 P2 C2 ...:
 *            the descriptor was no longer shared)
 *   msgq     a System V message queue holding one message (not saved: refused)
 *   dirs     a directory (DIR, opened O_DIRECTORY), /dev/null and /dev/urandom, used every
 *            step: each step appends a line to DIR/dirlog through openat() on the
 *            directory's descriptor, writes to /dev/null and reads /dev/urandom
 *
 * A checkpoint is refused for pipe, socket, sockets, child and msgq, and for fifo unless
 * CAIRN_CKPT_EXTERNAL=close; shared, anon, dirs, inotify, eventchild, dgramchild, seqchild, udpchild,
 * unixdgchild and passfile come back. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/msg.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Creates DIR/<sub>/f<step> (anew) and waits (up to 2 s) for the inotify event of watch wd naming
 * it; returns 0 if it never comes. */
static int inotified(int in, int wd, const char *sub, long step)
{
    char name[64], path[128];
    snprintf(name, sizeof name, "f%ld", step);
    snprintf(path, sizeof path, "%s/%s", sub, name);
    unlink(path); /* made before a restart by the lost execution: made again */
    int fd = open(path, O_CREAT | O_WRONLY, 0600);
    if (fd < 0)
        return 0;
    close(fd);
    for (int tries = 0; tries < 400; tries++) {
        static char buf[8192] __attribute__((aligned(8)));
        ssize_t n = read(in, buf, sizeof buf);
        for (ssize_t at = 0; at < n;) {
            struct inotify_event *ev = (struct inotify_event *)(buf + at);
            if (ev->wd == wd && ev->len && strcmp(ev->name, name) == 0)
                return 1;
            at += (ssize_t)(sizeof *ev + ev->len);
        }
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* passfile: sends descriptor f over Unix socket s; takes one from s (-1 if none). */
static int pass_fd(int s, int f)
{
    char c = 'f';
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct iovec io = {&c, 1};
    struct msghdr mh = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = &ctl, .msg_controllen = sizeof ctl};
    struct cmsghdr *h = CMSG_FIRSTHDR(&mh);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(h), &f, sizeof f);
    return sendmsg(s, &mh, 0) == 1 ? 0 : -1;
}

static int take_fd(int s)
{
    char c;
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct iovec io = {&c, 1};
    struct msghdr mh = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = &ctl, .msg_controllen = sizeof ctl};
    int f = -1;
    if (recvmsg(s, &mh, 0) == 1 && CMSG_FIRSTHDR(&mh))
        memcpy(&f, CMSG_DATA(CMSG_FIRSTHDR(&mh)), sizeof f);
    return f;
}

/* passfile: for each step number read from ctl, writes "<tag><step>" through f and answers
 * with the step; returns when ctl ends. */
static int write_steps(int ctl, char tag, int f)
{
    for (long step;;) {
        ssize_t n = read(ctl, &step, sizeof step);
        if (n < 0 && errno == EINTR)
            continue;
        if (n != (ssize_t)sizeof step)
            return 0;
        dprintf(f, "%c%ld\n", tag, step);
        while (write(ctl, &step, sizeof step) != (ssize_t)sizeof step)
            if (errno != EINTR)
                return 4;
    }
}

/* What the parent adds to the eventfd of eventchild to end the child. */
#define EVENT_END 1000000000ull

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: holder pipe|socket|sockets|listen|shared|anon|inotify|child|static|fifo|epoll|selfpipe|selfsock|pairchild|anonchild|eventchild|dgramchild|seqchild|udpchild|unixdgchild|passfile|msgq|dirs STEPS DIR\n");
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
    int dirfd = -1, nullfd = -1, randfd = -1, epfd = -1, efd = -1, tfd = -1, lfd = -1;
    int self[2] = {-1, -1}, pair[2] = {-1, -1}, peer = -1, shared_event = -1;
    volatile long *evtotal = NULL;
    int in = -1, wb = -1, wc = -1, lost_events = 0;
    int messages = -1, pass_a = -1, pass_b = -1;
    struct sockaddr_storage udp_to; /* udpchild, unixdgchild: where the child's socket is */
    socklen_t udp_len = 0;
    volatile long *both = NULL;
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
    } else if (strcmp(what, "socket") == 0 || strcmp(what, "sockets") == 0) {
        for (int k = 0; k < (what[6] ? 60 : 1); k++) {
            int s = socket(AF_INET, SOCK_DGRAM, 0);
            struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(9),
                                    .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
            if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) != 0)
                return 3;
        }
    } else if (strcmp(what, "listen") == 0) {
        lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t al = sizeof a;
        int on = 1; /* as servers do, so that its own closed connections do not hold the port */
        if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(lfd, 4) != 0 ||
            getsockname(lfd, (struct sockaddr *)&a, &al) != 0)
            return 3;
        char tmp[4096];
        snprintf(path, sizeof path, "%s/port", argv[3]);
        snprintf(tmp, sizeof tmp, "%s/port.tmp", argv[3]);
        FILE *pf = fopen(tmp, "w");
        if (!pf || fprintf(pf, "%u\n", ntohs(a.sin_port)) < 0 || fclose(pf) != 0 || rename(tmp, path) != 0)
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
    } else if (strcmp(what, "epoll") == 0) {
        /* The outer epoll first, so it has a lower number than the inner one it watches. */
        epfd = epoll_create1(EPOLL_CLOEXEC);
        efd = eventfd(0, EFD_NONBLOCK);
        tfd = timerfd_create(CLOCK_MONOTONIC, 0);
        int inner = epoll_create1(EPOLL_CLOEXEC);
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 1};
        struct itimerspec its = {{0, 5000000}, {0, 5000000}};
        if (efd < 0 || tfd < 0 || epfd < 0 || inner < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, tfd, &ev) != 0)
            return 3;
        ev.data.u64 = 2;
        if (epoll_ctl(inner, EPOLL_CTL_ADD, efd, &ev) != 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, inner, &ev) != 0 ||
            timerfd_settime(tfd, 0, &its, NULL) != 0)
            return 3;
    } else if (strcmp(what, "selfpipe") == 0) {
        if (pipe(self) != 0 || fcntl(self[0], F_SETFL, O_NONBLOCK) != 0)
            return 3;
    } else if (strcmp(what, "selfsock") == 0) {
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, pair) != 0)
            return 3;
    } else if (strcmp(what, "pairchild") == 0) {
        int sp[2];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp) != 0)
            return 3;
        child = fork();
        if (child == 0) {
            close(sp[0]);
            long x;
            while (read(sp[1], &x, sizeof x) == (ssize_t)sizeof x) {
                x++;
                if (write(sp[1], &x, sizeof x) != (ssize_t)sizeof x)
                    _exit(4);
            }
            _exit(0);
        }
        close(sp[1]);
        peer = sp[0];
    } else if (strcmp(what, "anonchild") == 0) {
        both = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (both == MAP_FAILED)
            return 3;
        child = fork();
        if (child == 0) {
            while (both[2] == 0) {
                both[1] = both[0];
                struct timespec ts = {0, 200000};
                nanosleep(&ts, NULL);
            }
            _exit(0);
        }
    } else if (strcmp(what, "dgramchild") == 0 || strcmp(what, "seqchild") == 0) {
        int sp[2];
        if (socketpair(AF_UNIX, what[0] == 'd' ? SOCK_DGRAM : SOCK_SEQPACKET, 0, sp) != 0)
            return 3;
        child = fork();
        if (child == 0) {
            static char m[8192];
            close(sp[0]);
            for (;;) {
                ssize_t n = recv(sp[1], m, sizeof m, 0);
                if (n < 0 && errno == EINTR)
                    continue;
                if (n <= 0 || (n == 3 && memcmp(m, "end", 3) == 0))
                    _exit(0);
                while (send(sp[1], m, (size_t)n, 0) != n)
                    if (errno != EINTR)
                        _exit(4);
            }
        }
        close(sp[1]);
        messages = sp[0];
    } else if (strcmp(what, "udpchild") == 0 || strcmp(what, "unixdgchild") == 0) {
        /* unixdgchild: both sockets are Unix datagram ones with abstract names the kernel
         * chooses (binding an address of the family alone), neither connected. */
        int dom = what[1] == 'n' ? AF_UNIX : AF_INET;
        struct sockaddr_storage a;
        memset(&a, 0, sizeof a);
        socklen_t al = dom == AF_UNIX ? (socklen_t)sizeof(sa_family_t) : (socklen_t)sizeof(struct sockaddr_in);
        a.ss_family = (sa_family_t)dom;
        if (dom == AF_INET)
            ((struct sockaddr_in *)&a)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        int srv = socket(dom, SOCK_DGRAM, 0);
        if (srv < 0 || bind(srv, (struct sockaddr *)&a, al) != 0)
            return 3;
        al = sizeof a;
        if (getsockname(srv, (struct sockaddr *)&a, &al) != 0)
            return 3;
        child = fork();
        if (child == 0) {
            static char m[8192];
            struct sockaddr_storage own = {.ss_family = (sa_family_t)dom};
            int c = socket(dom, SOCK_DGRAM, 0);
            if (c < 0 || (dom == AF_UNIX ? bind(c, (struct sockaddr *)&own, sizeof(sa_family_t)) != 0 ||
                                               sendto(c, "hello", 5, 0, (struct sockaddr *)&a, al) != 5
                                         : connect(c, (struct sockaddr *)&a, al) != 0 || send(c, "hello", 5, 0) != 5))
                _exit(3);
            for (;;) {
                ssize_t n = recv(c, m, sizeof m, 0);
                if (n < 0 && errno == EINTR)
                    continue;
                if (n <= 0 || (n == 3 && memcmp(m, "end", 3) == 0))
                    _exit(0);
                while (sendto(c, m, (size_t)n, 0, dom == AF_UNIX ? (struct sockaddr *)&a : NULL,
                              dom == AF_UNIX ? al : 0) != n)
                    if (errno != EINTR)
                        _exit(4);
            }
        }
        char hello[8];
        udp_len = sizeof udp_to;
        if (recvfrom(srv, hello, sizeof hello, 0, (struct sockaddr *)&udp_to, &udp_len) != 5)
            return 3;
        messages = srv;
    } else if (strcmp(what, "passfile") == 0) {
        /* Two children: A opens the file and passes it to B; the parent never has it. */
        int pa[2], pb[2], ab[2];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, pa) != 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, pb) != 0 ||
            socketpair(AF_UNIX, SOCK_STREAM, 0, ab) != 0)
            return 3;
        if (fork() == 0) {
            close(pa[0]), close(pb[0]), close(pb[1]), close(ab[1]);
            char path[4200];
            snprintf(path, sizeof path, "%s/passed.dat", argv[3]);
            int f = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
            if (f < 0 || pass_fd(ab[0], f) != 0)
                _exit(3);
            close(ab[0]);
            _exit(write_steps(pa[1], 'P', f));
        }
        child = fork();
        if (child == 0) {
            close(pa[0]), close(pa[1]), close(pb[0]), close(ab[0]);
            int f = take_fd(ab[1]);
            close(ab[1]);
            _exit(f < 0 ? 3 : write_steps(pb[1], 'C', f));
        }
        close(pa[1]), close(pb[1]), close(ab[0]), close(ab[1]);
        pass_a = pa[0];
        pass_b = pb[0];
    } else if (strcmp(what, "msgq") == 0) {
        int q = msgget(IPC_PRIVATE, IPC_CREAT | 0600);
        struct {
            long type;
            char text[8];
        } m = {1, "held"};
        if (q < 0 || msgsnd(q, &m, sizeof m.text, 0) != 0)
            return 3;
    } else if (strcmp(what, "eventchild") == 0) {
        int ev = eventfd(0, 0);
        evtotal = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (ev < 0 || evtotal == MAP_FAILED)
            return 3;
        child = fork();
        if (child == 0) {
            uint64_t v;
            for (;;) {
                ssize_t n = read(ev, &v, sizeof v);
                if (n < 0 && errno == EINTR)
                    continue;
                if (n != (ssize_t)sizeof v || v >= EVENT_END)
                    break;
                *evtotal += (long)v;
            }
            _exit(0);
        }
        shared_event = ev;
    } else if (strcmp(what, "dirs") == 0) {
        dirfd = open(argv[3], O_RDONLY | O_DIRECTORY);
        nullfd = open("/dev/null", O_WRONLY);
        randfd = open("/dev/urandom", O_RDONLY);
        if (dirfd < 0 || nullfd < 0 || randfd < 0)
            return 3;
    } else if (strcmp(what, "inotify") == 0) {
        /* Watches with a gap in their numbers (1 removed) and one added by a relative path. */
        if (chdir(argv[3]) != 0 || mkdir("ia", 0700) != 0 || mkdir("ib", 0700) != 0 || mkdir("ic", 0700) != 0)
            return 3;
        in = inotify_init1(IN_NONBLOCK);
        int wa = inotify_add_watch(in, "ia", IN_CREATE);
        wb = inotify_add_watch(in, "ib", IN_CREATE);
        if (in < 0 || wa < 0 || wb < 0 || inotify_rm_watch(in, wa) != 0)
            return 3;
        wc = inotify_add_watch(in, "ic", IN_CREATE);
        if (wc < 0)
            return 3;
    } else if (strcmp(what, "static") == 0) {
        char prog[4096];
        snprintf(prog, sizeof prog, "%s/static-sleep", argv[3]);
        child = fork();
        if (child == 0) {
            execl(prog, "static-sleep", (char *)NULL);
            _exit(3);
        }
    } else if (strcmp(what, "child") == 0) {
        child = fork();
        if (child == 0) {
            char *none[] = {NULL};
            execle("/bin/sleep", "sleep", "600", (char *)NULL, none);
            _exit(3);
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
        for (int k = 0; pair[0] >= 0 && k < 2; k++) {
            long prev = -1;
            if (write(pair[k], &i, sizeof i) != (ssize_t)sizeof i)
                return 4;
            if (i > 1 && (read(pair[1 - k], &prev, sizeof prev) != (ssize_t)sizeof prev || prev != i - 1)) {
                printf("holder: socket %d held %ld, not %ld, at step %ld\n", 1 - k, prev, i - 1, i);
                return 8;
            }
        }
        if (self[0] >= 0) {
            long prev = -1;
            if (write(self[1], &i, sizeof i) != (ssize_t)sizeof i)
                return 4;
            if (i > 1 && (read(self[0], &prev, sizeof prev) != (ssize_t)sizeof prev || prev != i - 1)) {
                printf("holder: the pipe held %ld, not %ld, at step %ld\n", prev, i - 1, i);
                return 8;
            }
        }
        if (both) {
            both[0] = i;
            int waited = 0;
            while (both[1] != i && waited++ < 10000) {
                struct timespec ts = {0, 200000};
                nanosleep(&ts, NULL);
            }
            if (both[1] != i) {
                printf("holder: the child's copy is %ld, not %ld, at step %ld\n", both[1], i, i);
                return 10;
            }
        }
        if (evtotal) {
            uint64_t one = 1;
            if (write(shared_event, &one, sizeof one) != (ssize_t)sizeof one)
                return 4;
            int waited = 0;
            while (*evtotal != i && waited++ < 10000) {
                struct timespec ts = {0, 200000};
                nanosleep(&ts, NULL);
            }
            if (*evtotal != i) {
                printf("holder: the child read %ld from the eventfd, not %ld, at step %ld\n", *evtotal, i, i);
                return 11;
            }
        }
        if (messages >= 0) {
            static const size_t lens[3] = {100, 1000, 5000};
            static char m[8192], want[8192];
            for (int k = 0; k < 3; k++) {
                memset(m, (int)((i * 3 + k) & 0xff), lens[k]);
                memcpy(m, &i, sizeof i);
                while (sendto(messages, m, lens[k], 0, udp_len ? (struct sockaddr *)&udp_to : NULL, udp_len) !=
                       (ssize_t)lens[k])
                    if (errno != EINTR)
                        return 4;
            }
            for (int k = 0; i > 1 && k < 3; k++) {
                long prev = i - 1;
                ssize_t n;
                while ((n = recv(messages, m, sizeof m, 0)) < 0 && errno == EINTR)
                    ;
                memset(want, (int)((prev * 3 + k) & 0xff), lens[k]);
                memcpy(want, &prev, sizeof prev);
                if (n != (ssize_t)lens[k] || memcmp(m, want, lens[k]) != 0) {
                    printf("holder: message %d of step %ld came back as %zd bytes, not %zu as sent\n", k, prev, n,
                           lens[k]);
                    return 12;
                }
            }
        }
        if (in >= 0) {
            int lost = !inotified(in, wb, "ib", i) + (i % 10 == 0 && !inotified(in, wc, "ic", i));
            if (lost && ++lost_events > 1) {
                printf("holder: no inotify event for step %ld\n", i);
                return 13;
            }
        }
        for (int k = 0; pass_a >= 0 && k < 2; k++) {
            long answer = 0;
            int to = k ? pass_b : pass_a;
            if (write(to, &i, sizeof i) != (ssize_t)sizeof i)
                return 4;
            ssize_t n;
            while ((n = read(to, &answer, sizeof answer)) < 0 && errno == EINTR)
                ;
            if (n != (ssize_t)sizeof answer || answer != i)
                return 4;
        }
        if (peer >= 0) {
            long answer = 0;
            if (write(peer, &i, sizeof i) != (ssize_t)sizeof i)
                return 4;
            if (i > 1 && (read(peer, &answer, sizeof answer) != (ssize_t)sizeof answer || answer != i)) {
                printf("holder: the child answered %ld, not %ld, at step %ld\n", answer, i, i);
                return 9;
            }
        }
        if (lfd >= 0) {
            int c = accept(lfd, NULL, NULL);
            if (c >= 0) {
                if (write(c, "hello\n", 6) != 6)
                    return 4;
                close(c);
            } else if (errno != EAGAIN && errno != EINTR) {
                printf("holder: accept: %s\n", strerror(errno));
                return 4;
            }
        }
        if (dirfd >= 0) {
            char line[32], r[8];
            int fd = openat(dirfd, "dirlog", O_WRONLY | O_APPEND | O_CREAT, 0600);
            int len = snprintf(line, sizeof line, "%ld\n", i);
            if (fd < 0 || write(fd, line, (size_t)len) != len || close(fd) != 0 ||
                write(nullfd, line, (size_t)len) != len || read(randfd, r, sizeof r) != (ssize_t)sizeof r)
                return 4;
        }
        if (epfd >= 0) {
            uint64_t one = 1, c = 0;
            if (write(efd, &one, sizeof one) != (ssize_t)sizeof one)
                return 4;
            int timer = 0, event = 0, idle = 0;
            while (!timer) {
                struct epoll_event evs[4];
                int n = epoll_wait(epfd, evs, 4, 100);
                if (n < 0 && errno != EINTR)
                    return 4;
                if (n == 0 && ++idle == 20) {
                    printf("holder: the timer stopped at step %ld\n", i);
                    return 5;
                }
                for (int k = 0; k < n; k++) {
                    if (evs[k].data.u64 == 1 && read(tfd, &c, sizeof c) == (ssize_t)sizeof c)
                        timer = 1;
                    if (evs[k].data.u64 == 2)
                        event = 1;
                }
            }
            if (!event) {
                printf("holder: epoll no longer reports the eventfd at step %ld\n", i);
                return 6;
            }
            if (i % 10 == 0 && (read(efd, &c, sizeof c) != (ssize_t)sizeof c || c != 10)) {
                printf("holder: the eventfd holds %llu at step %ld\n", (unsigned long long)c, i);
                return 7;
            }
        } else {
            struct timespec ts = {0, 5000000};
            nanosleep(&ts, NULL);
        }
    }
    if (wfd >= 0)
        close(wfd);
    if (peer >= 0)
        close(peer);
    if (pass_a >= 0) {
        /* One offset for both writers: the lines alternate, none written over. */
        close(pass_a);
        close(pass_b);
        while (wait(NULL) > 0 || errno == EINTR)
            ;
        char path[4200], line[64], want[64];
        snprintf(path, sizeof path, "%s/passed.dat", argv[3]);
        FILE *f = fopen(path, "r");
        long k = 0;
        while (f && fgets(line, sizeof line, f)) {
            snprintf(want, sizeof want, "%c%ld\n", k % 2 ? 'C' : 'P', k / 2 + 1);
            if (strcmp(line, want) != 0) {
                printf("holder: line %ld of the passed file is %s", k + 1, line);
                return 14;
            }
            k++;
        }
        if (k != 2 * steps) {
            printf("holder: the passed file has %ld lines, not %ld\n", k, 2 * steps);
            return 14;
        }
    }
    if (messages >= 0 && sendto(messages, "end", 3, 0, udp_len ? (struct sockaddr *)&udp_to : NULL, udp_len) != 3)
        return 4;
    if (both)
        both[2] = 1;
    if (shared_event >= 0) {
        uint64_t end = EVENT_END;
        if (write(shared_event, &end, sizeof end) != (ssize_t)sizeof end)
            return 11;
    }
    if (child > 0) {
        if (strcmp(what, "child") == 0 || strcmp(what, "static") == 0)
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
