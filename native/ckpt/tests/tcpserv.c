/* A forking TCP server and its clients, for checkpoint tests:
 *
 *     tcpserv DIR CLIENTS ROUNDS
 *
 * The process listens on 127.0.0.1 (on a port the kernel picks), forks
 * CLIENTS clients, and then serves: for each connection it accepts it forks a handler, which
 * keeps the listening socket as forking servers often do. Each client sends ROUNDS requests
 * over its connection, each one write of a header (round, length) and 1 to 96 KiB of bytes
 * that depend on the client and the round (3 MiB every 200th round, which the handler lets
 * wait 300 ms before reading: the client's bytes then fill its send queue beyond what the
 * handler's receive buffer holds), pausing 1 ms between rounds; the handler sends each request
 * back with every byte turned (^0x5a) and the client checks it. Both directions therefore have
 * bytes in flight at most moments. Client i writes "step r" to DIR/out.client<i> every round and ends
 * with "client i: done OK"; the server collects every handler and client by the pid fork gave
 * it and writes "server: done N OK" to DIR/out.server. Bytes lost, doubled or reordered in a
 * connection show as BAD and exit 1.
 *
 *     tcpserv DIR CLIENTS ROUNDS HOST PORT
 *
 * The same over connections between two processes of a job on two hosts: process 0 of the
 * job (CAIRN_PROC) listens on every address at PORT and serves; process 1 forks the CLIENTS
 * clients, which connect to HOST:PORT (trying again for 20 s while the server starts), and
 * collects them, writing "clients: done N OK" to DIR/out.clients. Each client first sends
 * the address process 1 had when it started (the one its connections to HOST came from),
 * and the server's handler checks it against the address accept() reports, as an MPI
 * library checks a peer against the address it published.
 *
 *     tcpserv DIR CLIENTS ROUNDS HOST PORT LATE
 *
 * As above with one more client, number CLIENTS, that resolves HOST when the process starts
 * and connects only once the file LATE exists: after a restart on other hosts, to the
 * address the server's host had. */
#include <netdb.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "records.h"

#define MAX_LEN (3 << 20)
#define BIG_EVERY 200

static int full(int fd, void *buf, size_t len, int send_it)
{
    for (size_t done = 0; done < len;) {
        ssize_t n = send_it ? write(fd, (char *)buf + done, len - done) : read(fd, (char *)buf + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        done += (size_t)n;
    }
    return 0;
}

static uint8_t byte_of(int client, uint32_t round, uint32_t i)
{
    return (uint8_t)((client * 131u + round * 7u + i * 13u) ^ (i >> 8));
}

/* me: the address to announce first (NULL: none); late: the file to wait for (NULL: none). */
static int client(int id, const struct sockaddr_in *a, long rounds, const struct in_addr *me, const char *late)
{
    char name[32];
    snprintf(name, sizeof name, "client%d", id);
    FILE *o = out(name);
    while (late && access(late, F_OK) != 0) {
        struct timespec wait = {0, 10 * 1000 * 1000};
        nanosleep(&wait, NULL);
    }
    int fd = -1;
    for (int tries = 0; fd < 0 && tries < 200; tries++) {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (const struct sockaddr *)a, sizeof *a) == 0)
            break;
        close(fd);
        fd = -1;
        struct timespec wait = {0, 100 * 1000 * 1000};
        nanosleep(&wait, NULL);
    }
    if (fd < 0) {
        fprintf(o, "client %d: BAD connect: %s\n", id, strerror(errno));
        return 1;
    }
    if (me && full(fd, (void *)me, sizeof *me, 1)) {
        fprintf(o, "client %d: BAD announce: %s\n", id, strerror(errno));
        return 1;
    }
    int on = 1;
    if (id % 2)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
    static uint8_t msg[8 + MAX_LEN], rep[MAX_LEN];
    uint8_t *req = msg + 8;
    for (uint32_t r = 1; r <= rounds; r++) {
        uint32_t len = r % BIG_EVERY ? 1 + (r * 7919u + (uint32_t)id * 104729u) % (96 * 1024) : MAX_LEN;
        uint32_t hdr[2] = {r, len}, back[2];
        memcpy(msg, hdr, sizeof hdr);
        for (uint32_t i = 0; i < hdr[1]; i++)
            req[i] = byte_of(id, r, i);
        if (full(fd, msg, 8 + hdr[1], 1) || full(fd, back, sizeof back, 0) ||
            back[0] != hdr[0] || back[1] != hdr[1] || full(fd, rep, hdr[1], 0)) {
            fprintf(o, "client %d: BAD round %u: %s\n", id, r, strerror(errno));
            return 1;
        }
        for (uint32_t i = 0; i < hdr[1]; i++)
            if (rep[i] != (req[i] ^ 0x5a)) {
                fprintf(o, "client %d: BAD byte %u of round %u\n", id, i, r);
                return 1;
            }
        fprintf(o, "step %u\n", r);
        struct timespec ms = {0, 1000 * 1000};
        nanosleep(&ms, NULL);
    }
    fprintf(o, "client %d: done OK\n", id);
    return 0;
}

/* from: the client's address as accept() reported it, to check against the one it
 * announces (NULL: it announces none). */
static int handler(int fd, const struct sockaddr_in *from)
{
    static uint8_t msg[8 + MAX_LEN];
    uint8_t *buf = msg + 8;
    uint32_t hdr[2];
    struct in_addr said;
    if (from && (full(fd, &said, sizeof said, 0) || said.s_addr != from->sin_addr.s_addr)) {
        char a[INET_ADDRSTRLEN] = "?", b[INET_ADDRSTRLEN] = "?";
        inet_ntop(AF_INET, &said, a, sizeof a);
        inet_ntop(AF_INET, &from->sin_addr, b, sizeof b);
        fprintf(stderr, "tcpserv: BAD a client announced %s and came from %s\n", a, b);
        return 4;
    }
    for (;;) {
        ssize_t n = read(fd, hdr, sizeof hdr);
        if (n == 0)
            return 0;
        if (n != (ssize_t)sizeof hdr && (n <= 0 || full(fd, (char *)hdr + n, sizeof hdr - (size_t)n, 0)))
            return 1;
        if (hdr[1] == MAX_LEN) {
            /* A big request: let it fill both the client's send buffer and this end's receive
             * buffer before reading it. */
            struct timespec pause = {0, 300 * 1000 * 1000};
            nanosleep(&pause, NULL);
        }
        if (hdr[1] > MAX_LEN || full(fd, buf, hdr[1], 0))
            return 1;
        for (uint32_t i = 0; i < hdr[1]; i++)
            buf[i] ^= 0x5a;
        memcpy(msg, hdr, sizeof hdr);
        if (full(fd, msg, 8 + hdr[1], 1))
            return 1;
    }
}

/* Waits for each of the n children in kids; 1 if one did not exit with 0 (said in o). */
static int collect(FILE *o, const char *who, const pid_t *kids, int n)
{
    int bad = 0;
    for (int i = 0; i < n; i++) {
        int st;
        pid_t w;
        while ((w = waitpid(kids[i], &st, 0)) < 0 && errno == EINTR)
            ;
        if (w != kids[i] || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(o, "%s: BAD child %d: %s, status %d\n", who, (int)kids[i], w < 0 ? strerror(errno) : "ended",
                    st);
            bad = 1;
        }
    }
    return bad;
}

/* Process 1 of a job on two hosts: the clients, connecting to host:port. */
static int remote_clients(int clients, long rounds, const char *host, const char *port, const char *late)
{
    FILE *o = out("clients");
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(host, port, &hints, &ai) != 0) {
        fprintf(o, "clients: BAD host %s\n", host);
        return 1;
    }
    struct sockaddr_in a, me;
    memcpy(&a, ai->ai_addr, sizeof a);
    freeaddrinfo(ai);
    /* This host's address towards the server: a UDP socket connected to it says (no packet
     * is sent). */
    int u = socket(AF_INET, SOCK_DGRAM, 0);
    socklen_t ml = sizeof me;
    if (u < 0 || connect(u, (struct sockaddr *)&a, sizeof a) != 0 || getsockname(u, (struct sockaddr *)&me, &ml) != 0) {
        fprintf(o, "clients: BAD no address towards %s: %s\n", host, strerror(errno));
        return 1;
    }
    close(u);
    pid_t kids[33];
    int n = 0;
    for (int i = 0; i < clients + (late != NULL) && i < 33; i++) {
        pid_t c = fork();
        if (c == 0)
            _exit(client(i, &a, rounds, &me.sin_addr, i == clients ? late : NULL));
        kids[n++] = c;
    }
    if (collect(o, "clients", kids, n))
        return 1;
    fprintf(o, "clients: done %d OK\n", n);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 4)
        return 2;
    snprintf(dir, sizeof dir, "%s", argv[1]);
    int clients = atoi(argv[2]);
    long rounds = atol(argv[3]);
    const char *proc = getenv("CAIRN_PROC");
    int across = argc >= 6;
    const char *late = argc >= 7 ? argv[6] : NULL;
    if (across && proc && strcmp(proc, "0") != 0)
        return remote_clients(clients, rounds, argv[4], argv[5], late);
    int l = socket(AF_INET, SOCK_STREAM, 0), on = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(across ? (uint16_t)atoi(argv[5]) : 0)};
    inet_pton(AF_INET, across ? "0.0.0.0" : "127.0.0.1", &a.sin_addr);
    socklen_t al = sizeof a;
    if (bind(l, (struct sockaddr *)&a, sizeof a) != 0 || listen(l, 16) != 0 ||
        getsockname(l, (struct sockaddr *)&a, &al) != 0)
        return 3;
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    FILE *o = out("server");
    pid_t kids[64];
    int nkids = 0;
    for (int i = 0; i < clients && i < 32 && !across; i++) {
        pid_t c = fork();
        if (c == 0) {
            close(l);
            _exit(client(i, &a, rounds, NULL, NULL));
        }
        kids[nkids++] = c;
    }
    for (int i = 0; i < clients + (late != NULL) && i < 33; i++) {
        struct sockaddr_in from;
        socklen_t fl = sizeof from;
        int fd = accept(l, (struct sockaddr *)&from, &fl);
        if (fd < 0 && errno == EINTR) {
            i--;
            continue;
        }
        if (fd < 0) {
            fprintf(o, "server: BAD accept: %s\n", strerror(errno));
            return 1;
        }
        pid_t h = fork();
        if (h == 0)
            _exit(handler(fd, across ? &from : NULL)); /* keeps the listener, as forking servers often do */
        close(fd);
        kids[nkids++] = h;
    }
    if (collect(o, "server", kids, nkids))
        return 1;
    fprintf(o, "server: done %d OK\n", nkids);
    return 0;
}
