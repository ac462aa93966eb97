/*
 * simhost.c -- LD_PRELOAD shim that gives a process the host name in $CAIRN_PEERS_SIMHOST.
 *
 * SCR forms its failure groups (partner, XOR, RS sets) from gethostname(), so on one machine
 * every rank is on the same "node" and no redundancy across nodes can be built. run.sh starts
 * SCR's ranks through simnode.sh, which sets CAIRN_PEERS_SIMHOST=simnode<k> (k = rank / ranks
 * per simulated node), a cache and control directory per simulated node, and preloads this
 * shim, so that SCR sees 2 nodes as it would on 2 machines. Without the variable, the real
 * host name is returned.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

int gethostname(char *name, size_t len)
{
    const char *h = getenv("CAIRN_PEERS_SIMHOST");
    struct utsname u;
    if (!h || !*h) {
        if (uname(&u) != 0)
            return -1;
        h = u.nodename;
    }
    size_t n = strlen(h);
    if (n + 1 > len) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(name, h, n + 1);
    return 0;
}
