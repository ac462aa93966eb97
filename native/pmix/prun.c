/* cairn-prun: start an MPI program's ranks the way a PMIx batch system starts them
 * (`srun --mpi=pmix`), from processes that are part of the job.
 *
 *   cairn-prun [-n N] [--host H1[:C1],H2[:C2],...] [--bind ADDR] [--rsh CMD] [-x NAME[=VALUE]]...
 *              [--] PROGRAM [ARGS...]
 *
 * Under `srun --mpi=pmix` each rank's PMIx server is Slurm's step daemon (slurmstepd): it
 * is not a process of the job, so a checkpoint cannot save it and a restart cannot give the
 * ranks back the server they were connected to, with its namespace, its key-value store and
 * its collectives. cairn-prun is that server, run as the job's processes: on each host it
 * hosts a PMIx server (libpmix's server interface, the one Slurm's and Open MPI's launchers
 * use), registers the job's namespace, forks the host's ranks as its children with the PMIx
 * environment, and waits for them. `cairn launch -- cairn-prun -n N ./app` checkpoints the
 * servers and the ranks as the job's process trees, as it does `mpirun` and its ranks; see
 * docs/transparent.md ("Ranks started by a PMIx launcher").
 *
 * Hosts. Without --host every rank runs on this host. With --host, host i runs Ci ranks
 * (1 when not given), in blocks: the first C1 ranks on H1, and so on. This process serves
 * the first host (the hub); for every other host it runs `CMD HOST cairn-prun --daemon ...`
 * (CMD: --rsh, else $CAIRN_RSH, which `cairn launch --rsh` sets to `cairn rsh`, else ssh).
 * Each daemon connects back to the hub at --bind ADDR (a port the kernel picks) over TCP,
 * proving the job's token ($CAIRN_COORD_TOKEN, which every process of a Cairn job has); the
 * hub gathers the fences' data from every host and hands the whole back to each. The ranks
 * on the other hosts get the daemon's environment (there, the job's), with the hub's
 * OMPI_MCA_* variables and those -x names, as mpirun does.
 *
 * Exit status: that of the lowest rank that did not exit 0 (128 + the signal for one that
 * was killed), else 0; 2 for bad arguments, 1 when the job cannot start (the reason on
 * standard error); a rank that calls MPI_Abort (PMIx_Abort) ends the job with the status it
 * gave. SIGINT, SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 are passed on to every rank. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pmix.h>
#include <pmix_server.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_RANKS 4096
#define MAX_HOSTS 256
/* How long the hub waits for every daemon to connect. */
#define CONNECT_SECONDS 60

extern char **environ;

/* ---- The job ----------------------------------------------------------------------------- */

static int nranks;                      /* in the whole job */
static int nhosts = 1;
static char *hosts[MAX_HOSTS];          /* names as --host gave them */
static int host_first[MAX_HOSTS], host_count[MAX_HOSTS];
static int me;                          /* this process's host: 0 is the hub */
static pid_t pids[MAX_RANKS];           /* of this host's ranks, by rank; 0 once reaped */
static char nspace[PMIX_MAX_NSLEN + 1];
static char tmpdir[PATH_MAX];
static atomic_int aborted = -1;         /* the status an MPI_Abort asked for, or -1 */

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (nhosts > 1)
        fprintf(stderr, "cairn-prun (host %s): ", hosts[me]);
    else
        fputs("cairn-prun: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static void kill_ranks(int sig)
{
    for (int r = host_first[me]; r < host_first[me] + host_count[me]; r++)
        if (pids[r] > 0)
            kill(pids[r], sig);
}

/* ---- Messages between the hub and its daemons ------------------------------------------- */

enum {
    M_HELLO = 1,   /* daemon -> hub: the job's token; `node` is the daemon's host */
    M_FENCE,       /* daemon -> hub: the host's part of a fence */
    M_FENCE_DONE,  /* hub -> daemon: every host's parts, in host order */
    M_ABORT,       /* daemon -> hub: a rank called MPI_Abort with status `arg` */
    M_SIGNAL,      /* hub -> daemon: pass signal `arg` to the host's ranks */
    M_EXIT,        /* daemon -> hub: the host's ranks ended; `arg` the status, `node` the
                      lowest rank that did not exit 0 (or nranks) */
};

struct msg {
    uint32_t type;
    int32_t arg;
    uint32_t node;
    uint32_t pad;
    uint64_t len;  /* bytes of payload after the header */
};

/* The hub's link to each daemon, and a daemon's to the hub (links[0]). */
static struct link {
    int fd;                 /* -1: not connected (yet, or any more) */
    pthread_mutex_t send;   /* one message at a time */
    int exited;             /* the hub got M_EXIT from it */
} links[MAX_HOSTS];

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static int first_bad = MAX_RANKS, bad_status; /* over the whole job (hub) or this host */
static int lost;                              /* a daemon or the hub went away */
static char token[128];

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static int read_all(int fd, void *p, size_t n)
{
    char *c = p;
    while (n) {
        ssize_t r = read(fd, c, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

static int send_msg(int host, uint32_t type, int32_t arg, uint32_t node, const void *data,
                    size_t len)
{
    struct link *l = &links[host];
    struct msg m = {.type = type, .arg = arg, .node = node, .len = len};
    pthread_mutex_lock(&l->send);
    int rc = l->fd < 0 ? -1 : write_all(l->fd, &m, sizeof m);
    if (rc == 0 && len)
        rc = write_all(l->fd, data, len);
    pthread_mutex_unlock(&l->send);
    return rc;
}

/* ---- Fences ------------------------------------------------------------------------------ */

/* A fence of this host waiting for the job's data: the server's callback. */
struct pending {
    pmix_modex_cbfunc_t cbfunc;
    void *cbdata;
    struct pending *next;
};
static struct pending *waiting, **waiting_end = &waiting;

/* The hub's parts of fences, by host, in the order they came. */
struct part {
    char *data;
    size_t len;
    struct part *next;
};
static struct part *parts[MAX_HOSTS];

static void release_data(void *p)
{
    free(p);
}

/* The oldest waiting fence of this host is done with `data` (taken). Under `lock`. */
static void finish_fence(pmix_status_t status, char *data, size_t len)
{
    struct pending *p = waiting;
    if (!p) {
        free(data);
        return;
    }
    waiting = p->next;
    if (!waiting)
        waiting_end = &waiting;
    p->cbfunc(status, data, len, p->cbdata, release_data, data);
    free(p);
}

/* Hub: a host's part arrived; when every host has given one, the fence is whole. Under
 * `lock`. */
static void add_part(int host, char *data, size_t len)
{
    struct part *n = calloc(1, sizeof *n), **end = &parts[host];
    if (!n) {
        free(data);
        return;
    }
    n->data = data;
    n->len = len;
    while (*end)
        end = &(*end)->next;
    *end = n;
    for (int h = 0; h < nhosts; h++)
        if (!parts[h])
            return;
    size_t total = 0;
    for (int h = 0; h < nhosts; h++)
        total += parts[h]->len;
    char *all = malloc(total ? total : 1), *at = all;
    for (int h = 0; h < nhosts; h++) {
        struct part *p = parts[h];
        if (all && p->len)
            memcpy(at, p->data, p->len);
        at += p->len;
        parts[h] = p->next;
        free(p->data);
        free(p);
    }
    pmix_status_t st = all ? PMIX_SUCCESS : PMIX_ERR_NOMEM;
    for (int h = 1; h < nhosts; h++)
        if (send_msg(h, M_FENCE_DONE, st, 0, all, all ? total : 0) != 0)
            say("could not send a fence's data to host %s", hosts[h]);
    finish_fence(st, all, all ? total : 0);
}

/* ---- The server's calls into its host ---------------------------------------------------- */

static pmix_status_t client_connected(const pmix_proc_t *proc, void *obj,
                                      pmix_op_cbfunc_t cbfunc, void *cbdata)
{
    (void)proc, (void)obj, (void)cbfunc, (void)cbdata;
    return PMIX_OPERATION_SUCCEEDED;
}

static pmix_status_t client_finalized(const pmix_proc_t *proc, void *obj,
                                      pmix_op_cbfunc_t cbfunc, void *cbdata)
{
    (void)proc, (void)obj, (void)cbfunc, (void)cbdata;
    return PMIX_OPERATION_SUCCEEDED;
}

/* Every host's ranks end, and cairn-prun exits with the status. */
static void abort_everywhere(int status)
{
    int expected = -1;
    atomic_compare_exchange_strong(&aborted, &expected, status & 0xff);
    kill_ranks(SIGKILL);
    if (me != 0)
        send_msg(0, M_ABORT, status, (uint32_t)me, NULL, 0);
    else
        for (int h = 1; h < nhosts; h++)
            send_msg(h, M_SIGNAL, SIGKILL, 0, NULL, 0);
}

static pmix_status_t abort_job(const pmix_proc_t *proc, void *obj, int status, const char msg[],
                               pmix_proc_t procs[], size_t nprocs, pmix_op_cbfunc_t cbfunc,
                               void *cbdata)
{
    (void)obj, (void)procs, (void)nprocs, (void)cbfunc, (void)cbdata;
    say("rank %u aborted the job with status %d%s%s", proc->rank, status, msg ? ": " : "",
        msg ? msg : "");
    abort_everywhere(status);
    return PMIX_OPERATION_SUCCEEDED;
}

/* A fence of the whole job (the only kind MPI asks for): this host's data goes to the hub,
 * and the server gets every host's back. */
static pmix_status_t fence(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[],
                           size_t ninfo, char *data, size_t ndata, pmix_modex_cbfunc_t cbfunc,
                           void *cbdata)
{
    (void)info, (void)ninfo;
    if (nprocs != 1 || procs[0].rank != PMIX_RANK_WILDCARD) {
        say("a fence of some ranks only is not supported (only of the whole job)");
        return PMIX_ERR_NOT_SUPPORTED;
    }
    struct pending *p = calloc(1, sizeof *p);
    char *copy = malloc(ndata ? ndata : 1);
    if (!p || !copy) {
        free(p);
        free(copy);
        return PMIX_ERR_NOMEM;
    }
    if (ndata)
        memcpy(copy, data, ndata);
    p->cbfunc = cbfunc;
    p->cbdata = cbdata;
    pthread_mutex_lock(&lock);
    *waiting_end = p;
    waiting_end = &p->next;
    if (me == 0) {
        add_part(0, copy, ndata);
    } else {
        if (send_msg(0, M_FENCE, 0, (uint32_t)me, copy, ndata) != 0)
            say("could not send a fence's data to the hub");
        free(copy);
    }
    pthread_mutex_unlock(&lock);
    return PMIX_SUCCESS;
}

/* Every rank's data came with the fences: a key the server does not hold does not exist. */
static pmix_status_t direct_modex(const pmix_proc_t *proc, const pmix_info_t info[],
                                  size_t ninfo, pmix_modex_cbfunc_t cbfunc, void *cbdata)
{
    (void)proc, (void)info, (void)ninfo, (void)cbfunc, (void)cbdata;
    return PMIX_ERR_NOT_FOUND;
}

static pmix_server_module_t host_module = {
    .client_connected = client_connected,
    .client_finalized = client_finalized,
    .abort = abort_job,
    .fence_nb = fence,
    .direct_modex = direct_modex,
};

/* ---- The network thread ------------------------------------------------------------------ */

static int listener = -1;

/* A daemon's first message: its host and the job's token, compared in constant time. */
static void hello(int fd)
{
    struct msg m;
    char got[sizeof token];
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 10000) != 1 || read_all(fd, &m, sizeof m) != 0 || m.type != M_HELLO ||
        m.len != strlen(token) || m.node == 0 || m.node >= (uint32_t)nhosts ||
        read_all(fd, got, m.len) != 0) {
        say("refused a connection that did not begin as a daemon of this job does");
        close(fd);
        return;
    }
    unsigned diff = 0;
    for (size_t i = 0; i < m.len; i++)
        diff |= (unsigned char)(got[i] ^ token[i]);
    if (diff) {
        say("refused a connection with a wrong token");
        close(fd);
        return;
    }
    pthread_mutex_lock(&lock);
    if (links[m.node].fd >= 0) {
        pthread_mutex_unlock(&lock);
        say("refused a second connection for host %s", hosts[m.node]);
        close(fd);
        return;
    }
    links[m.node].fd = fd;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
}

/* One message from host `h`'s link (the hub's link on a daemon). Returns -1 when the link
 * is gone. */
static int receive(int h)
{
    struct msg m;
    if (read_all(links[h].fd, &m, sizeof m) != 0)
        return -1;
    char *data = NULL;
    if (m.len) {
        if (m.len > (1ull << 34) || !(data = malloc(m.len)))
            return -1;
        if (read_all(links[h].fd, data, m.len) != 0) {
            free(data);
            return -1;
        }
    }
    pthread_mutex_lock(&lock);
    switch (m.type) {
    case M_FENCE:
        add_part(h, data, m.len);
        data = NULL;
        break;
    case M_FENCE_DONE:
        finish_fence(m.arg, data, m.len);
        data = NULL;
        break;
    case M_ABORT:
        pthread_mutex_unlock(&lock);
        abort_everywhere(m.arg);
        pthread_mutex_lock(&lock);
        break;
    case M_SIGNAL:
        kill_ranks(m.arg);
        break;
    case M_EXIT:
        links[h].exited = 1;
        if ((int)m.node < first_bad) {
            first_bad = (int)m.node;
            bad_status = m.arg;
        }
        pthread_cond_broadcast(&changed);
        break;
    default:
        break;
    }
    pthread_mutex_unlock(&lock);
    free(data);
    return 0;
}

static void *network(void *unused)
{
    (void)unused;
    /* Seconds spent waiting for daemons, counted by poll's timeouts rather than read from a
     * clock: a hub restarted from a checkpoint taken while it waited goes on counting from
     * where it was, not from a clock of another run. */
    int waited = 0;
    for (;;) {
        struct pollfd p[MAX_HOSTS + 1];
        int who[MAX_HOSTS + 1], n = 0, waiting_for = 0;
        pthread_mutex_lock(&lock);
        if (me == 0 && listener >= 0) {
            p[n] = (struct pollfd){.fd = listener, .events = POLLIN};
            who[n++] = -1;
        }
        for (int h = 0; h < nhosts; h++) {
            if (h == me)
                continue;
            if (links[h].fd >= 0) {
                p[n] = (struct pollfd){.fd = links[h].fd, .events = POLLIN};
                who[n++] = h;
            } else if (me == 0 && !links[h].exited) {
                waiting_for++;
            }
        }
        pthread_mutex_unlock(&lock);
        if (me == 0 && waiting_for && waited > CONNECT_SECONDS && !lost) {
            say("%d host(s) did not connect within %d s; ending the job", waiting_for,
                CONNECT_SECONDS);
            pthread_mutex_lock(&lock);
            lost = 1;
            pthread_cond_broadcast(&changed);
            pthread_mutex_unlock(&lock);
            abort_everywhere(1);
        }
        int ready = poll(p, (nfds_t)n, 1000);
        if (ready < 0)
            continue; /* EINTR: a checkpoint came and went */
        if (ready == 0 && waiting_for)
            waited++;
        for (int i = 0; i < n; i++) {
            if (!p[i].revents)
                continue;
            if (who[i] == -1) {
                int fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
                if (fd >= 0)
                    hello(fd);
            } else if (receive(who[i]) != 0) {
                int h = who[i];
                pthread_mutex_lock(&lock);
                close(links[h].fd);
                links[h].fd = -1;
                int unexpected = !links[h].exited;
                if (unexpected)
                    lost = 1;
                pthread_cond_broadcast(&changed);
                pthread_mutex_unlock(&lock);
                if (unexpected && atomic_load(&aborted) < 0) {
                    say(me == 0 ? "host %s went away before its ranks ended; ending the job"
                                : "the hub (host %s) went away; ending this host's ranks",
                        hosts[h]);
                    if (me == 0)
                        abort_everywhere(1);
                    else
                        kill_ranks(SIGKILL);
                }
            }
        }
    }
    return NULL; /* not reached: the thread ends with the process */
}

/* ---- Registration ------------------------------------------------------------------------ */

struct done {
    atomic_int flag;
    pmix_status_t status;
};

static void op_done(pmix_status_t status, void *cbdata)
{
    struct done *d = cbdata;
    d->status = status;
    atomic_store(&d->flag, 1);
}

static pmix_status_t wait_done(pmix_status_t rc, struct done *d)
{
    if (rc == PMIX_OPERATION_SUCCEEDED)
        return PMIX_SUCCESS;
    if (rc != PMIX_SUCCESS)
        return rc;
    while (!atomic_load(&d->flag))
        usleep(200);
    return d->status;
}

/* `first`..`first+count-1` as "a,b,c" into a new string. */
static char *rank_list(int first, int count)
{
    size_t n = (size_t)count * 6 + 1;
    char *s = malloc(n);
    if (!s)
        return NULL;
    s[0] = 0;
    for (int i = 0, off = 0; i < count; i++)
        off += snprintf(s + off, n - (size_t)off, i ? ",%d" : "%d", first + i);
    return s;
}

/* The job's description, as Slurm's PMIx plugin gives it: sizes, the hosts and which ranks
 * each runs, this host's ranks, and each rank's place. */
static pmix_status_t register_job(void)
{
    size_t nlen = 1, plen = 1;
    for (int h = 0; h < nhosts; h++) {
        nlen += strlen(hosts[h]) + 1;
        plen += (size_t)host_count[h] * 6 + 1;
    }
    char *names = calloc(1, nlen), *ppn = calloc(1, plen);
    char *peers = rank_list(host_first[me], host_count[me]);
    if (!names || !ppn || !peers)
        return PMIX_ERR_NOMEM;
    for (int h = 0; h < nhosts; h++) {
        char *list = rank_list(host_first[h], host_count[h]);
        if (!list)
            return PMIX_ERR_NOMEM;
        if (h) {
            strcat(names, ",");
            strcat(ppn, ";");
        }
        strcat(names, hosts[h]);
        strcat(ppn, list);
        free(list);
    }
    char *node_map = NULL, *proc_map = NULL;
    pmix_status_t rc = PMIx_generate_regex(names, &node_map);
    if (rc == PMIX_SUCCESS)
        rc = PMIx_generate_ppn(ppn, &proc_map);
    if (rc != PMIX_SUCCESS)
        return rc;
    size_t ninfo = 12 + (size_t)nranks, k = 0;
    pmix_info_t *info;
    PMIX_INFO_CREATE(info, ninfo);
    uint32_t size = (uint32_t)nranks, local = (uint32_t)host_count[me];
    uint32_t nodes = (uint32_t)nhosts, zero = 0;
    pmix_rank_t leader = (pmix_rank_t)host_first[me];
    PMIX_INFO_LOAD(&info[k++], PMIX_UNIV_SIZE, &size, PMIX_UINT32);
    PMIX_INFO_LOAD(&info[k++], PMIX_JOB_SIZE, &size, PMIX_UINT32);
    PMIX_INFO_LOAD(&info[k++], PMIX_MAX_PROCS, &size, PMIX_UINT32);
    PMIX_INFO_LOAD(&info[k++], PMIX_LOCAL_SIZE, &local, PMIX_UINT32);
    PMIX_INFO_LOAD(&info[k++], PMIX_NODE_SIZE, &local, PMIX_UINT32);
    PMIX_INFO_LOAD(&info[k++], PMIX_LOCAL_PEERS, peers, PMIX_STRING);
    PMIX_INFO_LOAD(&info[k++], PMIX_NODE_MAP, node_map, PMIX_REGEX);
    PMIX_INFO_LOAD(&info[k++], PMIX_PROC_MAP, proc_map, PMIX_REGEX);
    PMIX_INFO_LOAD(&info[k++], PMIX_NUM_NODES, &nodes, PMIX_UINT32);
    PMIX_INFO_LOAD(&info[k++], PMIX_JOBID, nspace, PMIX_STRING);
    PMIX_INFO_LOAD(&info[k++], PMIX_LOCALLDR, &leader, PMIX_PROC_RANK);
    PMIX_INFO_LOAD(&info[k++], PMIX_APPNUM, &zero, PMIX_UINT32);
    for (int h = 0; h < nhosts; h++) {
        for (int i = 0; i < host_count[h]; i++) {
            pmix_data_array_t *arr;
            PMIX_DATA_ARRAY_CREATE(arr, 6, PMIX_INFO);
            pmix_info_t *p = arr->array;
            pmix_rank_t r = (pmix_rank_t)(host_first[h] + i);
            uint16_t lr = (uint16_t)i;
            uint32_t nid = (uint32_t)h;
            PMIX_INFO_LOAD(&p[0], PMIX_RANK, &r, PMIX_PROC_RANK);
            PMIX_INFO_LOAD(&p[1], PMIX_LOCAL_RANK, &lr, PMIX_UINT16);
            PMIX_INFO_LOAD(&p[2], PMIX_NODE_RANK, &lr, PMIX_UINT16);
            PMIX_INFO_LOAD(&p[3], PMIX_NODEID, &nid, PMIX_UINT32);
            PMIX_INFO_LOAD(&p[4], PMIX_HOSTNAME, hosts[h], PMIX_STRING);
            PMIX_INFO_LOAD(&p[5], PMIX_APPNUM, &zero, PMIX_UINT32);
            PMIX_INFO_LOAD(&info[k++], PMIX_PROC_DATA, arr, PMIX_DATA_ARRAY);
            PMIX_DATA_ARRAY_FREE(arr);
        }
    }
    struct done d = {0};
    rc = wait_done(PMIx_server_register_nspace(nspace, host_count[me], info, k, op_done, &d),
                   &d);
    PMIX_INFO_FREE(info, ninfo);
    free(names);
    free(ppn);
    free(peers);
    free(node_map);
    free(proc_map);
    return rc;
}

/* Fork rank `rank` with the PMIx environment the server made for it. */
static int start_rank(int rank, char **argv)
{
    pmix_proc_t proc;
    PMIX_PROC_LOAD(&proc, nspace, (pmix_rank_t)rank);
    struct done d = {0};
    pmix_status_t rc = wait_done(
        PMIx_server_register_client(&proc, geteuid(), getegid(), NULL, op_done, &d), &d);
    if (rc != PMIX_SUCCESS) {
        say("registering rank %d failed: %s", rank, PMIx_Error_string(rc));
        return -1;
    }
    char **env = NULL;
    for (char **e = environ; *e; e++)
        if (pmix_argv_append_nosize(&env, *e) != PMIX_SUCCESS)
            return -1;
    rc = PMIx_server_setup_fork(&proc, &env);
    if (rc != PMIX_SUCCESS) {
        say("setting up rank %d's environment failed: %s", rank, PMIx_Error_string(rc));
        return -1;
    }
    /* Open MPI 4 takes a process for one launched by PMIx only when it has a launcher
     * daemon's address or a batch system's variables; without either it runs as a
     * singleton of its own. It only records the address (no daemon is contacted when the
     * job's PMIx server answers everything), so cairn-prun gives a placeholder. */
    if (!getenv("OMPI_MCA_orte_local_daemon_uri"))
        pmix_setenv("OMPI_MCA_orte_local_daemon_uri", "0.0;tcp://127.0.0.1:0", true, &env);
    pid_t pid = fork();
    if (pid < 0) {
        say("fork for rank %d: %s", rank, strerror(errno));
        pmix_argv_free(env);
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execvpe(argv[0], argv, env);
        fprintf(stderr, "cairn-prun: %s: %s\n", argv[0], strerror(errno));
        _exit(errno == ENOENT ? 127 : 126);
    }
    pids[rank] = pid;
    pmix_argv_free(env);
    return 0;
}

/* ---- Daemons on the other hosts ---------------------------------------------------------- */

/* `s` single-quoted for a shell, appended to `out` (of `cap` bytes). */
static int quote(char *out, size_t cap, const char *s)
{
    size_t n = strlen(out);
    if (n + 3 >= cap)
        return -1;
    out[n++] = '\'';
    for (; *s; s++) {
        const char *piece = *s == '\'' ? "'\\''" : NULL;
        size_t l = piece ? 4 : 1;
        if (n + l + 3 >= cap)
            return -1;
        if (piece)
            memcpy(out + n, piece, l);
        else
            out[n] = *s;
        n += l;
    }
    out[n++] = '\'';
    out[n++] = ' ';
    out[n] = 0;
    return 0;
}

static pid_t rsh_pids[MAX_HOSTS];

/* What -x names: variables the ranks on the other hosts get as the hub has them (NAME), or
 * with a value (NAME=VALUE). Open MPI's own (OMPI_MCA_*) go without asking, as mpirun
 * sends them. */
#define MAX_FORWARD 64
static const char *forward[MAX_FORWARD];
static int nforward;

/* `--env NAME=VALUE` for variable `var` ("NAME=VALUE"), appended to `cmd`. */
static int forward_one(char *cmd, size_t cap, const char *var)
{
    return quote(cmd, cap, "--env") == 0 && quote(cmd, cap, var) == 0 ? 0 : -1;
}

static int forward_env(char *cmd, size_t cap)
{
    for (char **e = environ; *e; e++)
        if (!strncmp(*e, "OMPI_MCA_", 9) && forward_one(cmd, cap, *e) != 0)
            return -1;
    /* A -x NAME=VALUE is in this environment too (put there when it was read). */
    for (int i = 0; i < nforward; i++) {
        char name[256];
        size_t l = strcspn(forward[i], "=");
        if (l >= sizeof name || !strncmp(forward[i], "OMPI_MCA_", 9))
            continue;
        memcpy(name, forward[i], l);
        name[l] = 0;
        const char *v = getenv(name);
        if (!v)
            continue;
        char var[8192];
        if (snprintf(var, sizeof var, "%s=%s", name, v) >= (int)sizeof var ||
            forward_one(cmd, cap, var) != 0)
            return -1;
    }
    return 0;
}

/* Runs `RSH HOST 'cairn-prun' --daemon ADDR:PORT K ... -- PROGRAM ARGS` for host `h`. */
static int start_daemon(int h, const char *rsh, const char *contact, const char *spec,
                        char **argv)
{
    static char cmd[65536];
    char self[PATH_MAX], number[32];
    ssize_t l = readlink("/proc/self/exe", self, sizeof self - 1);
    if (l <= 0)
        return -1;
    self[l] = 0;
    cmd[0] = 0;
    snprintf(number, sizeof number, "%d", h);
    const char *fixed[] = {self, "--daemon", contact, number, "--host", spec};
    int fits = 1;
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        fits = fits && quote(cmd, sizeof cmd, fixed[i]) == 0;
    fits = fits && forward_env(cmd, sizeof cmd) == 0 && quote(cmd, sizeof cmd, "--") == 0;
    for (char **a = argv; fits && *a; a++)
        fits = quote(cmd, sizeof cmd, *a) == 0;
    if (!fits) {
        say("the command for host %s is longer than %zu bytes", hosts[h], sizeof cmd);
        return -1;
    }
    char *words[64];
    int n = 0;
    char *copy = strdup(rsh), *save = NULL;
    for (char *w = strtok_r(copy, " \t", &save); w && n < 60; w = strtok_r(NULL, " \t", &save))
        words[n++] = w;
    if (n == 0) {
        say("the rsh agent is empty");
        return -1;
    }
    words[n++] = hosts[h];
    words[n++] = cmd;
    words[n] = NULL;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execvp(words[0], words);
        fprintf(stderr, "cairn-prun: %s: %s\n", words[0], strerror(errno));
        _exit(127);
    }
    rsh_pids[h] = pid;
    free(copy);
    return 0;
}

/* The hub's listener at ADDR (IPv4 or IPv6), a port the kernel picks; its address as
 * "ADDR:PORT" (IPv6 in brackets) into `contact`. */
static int listen_at(const char *addr, char *contact, size_t cap)
{
    struct sockaddr_storage ss = {0};
    socklen_t sl;
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, addr, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        sl = sizeof *v4;
    } else if (inet_pton(AF_INET6, addr, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        sl = sizeof *v6;
    } else {
        say("--bind %s: not an IPv4 or IPv6 address", addr);
        return -1;
    }
    listener = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listener < 0 || bind(listener, (struct sockaddr *)&ss, sl) != 0 ||
        listen(listener, MAX_HOSTS) != 0 || getsockname(listener, (struct sockaddr *)&ss, &sl)) {
        say("cannot listen at %s: %s", addr, strerror(errno));
        return -1;
    }
    int port = ntohs(ss.ss_family == AF_INET ? v4->sin_port : v6->sin6_port);
    snprintf(contact, cap, ss.ss_family == AF_INET ? "%s:%d" : "[%s]:%d", addr, port);
    return 0;
}

/* A daemon's link to the hub at CONTACT ("ADDR:PORT" or "[ADDR]:PORT"). */
static int connect_hub(const char *contact)
{
    char addr[128];
    const char *colon = strrchr(contact, ':');
    if (!colon || (size_t)(colon - contact) >= sizeof addr)
        return -1;
    memcpy(addr, contact, (size_t)(colon - contact));
    addr[colon - contact] = 0;
    char *a = addr;
    if (a[0] == '[') {
        a++;
        a[strlen(a) - 1] = 0;
    }
    struct sockaddr_storage ss = {0};
    socklen_t sl;
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    int port = atoi(colon + 1);
    if (inet_pton(AF_INET, a, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        sl = sizeof *v4;
    } else if (inet_pton(AF_INET6, a, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        sl = sizeof *v6;
    } else {
        return -1;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&ss, sl) != 0) {
        say("cannot reach the hub at %s: %s", contact, strerror(errno));
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static int remove_one(const char *path, const struct stat *st, int kind, struct FTW *at)
{
    (void)st, (void)kind, (void)at;
    return remove(path);
}

/* ---- Arguments --------------------------------------------------------------------------- */

static int usage(int status)
{
    fputs("usage: cairn-prun [-n N] [--host H1[:C1],H2[:C2],...] [--bind ADDR] [--rsh CMD]\n"
          "                  [-x NAME[=VALUE]]... [--] PROGRAM [ARGS...]\n"
          "  Starts N ranks of PROGRAM with a PMIx server on each host, as `srun --mpi=pmix`\n"
          "  does, as processes of the job, so that `cairn launch` checkpoints servers and\n"
          "  ranks. With --host, Ci ranks on host Hi (1 if not given), the first host being\n"
          "  this one; the others are started with CMD (default $CAIRN_RSH, else ssh) and\n"
          "  connect back to ADDR, an address of this host they can reach; their ranks get\n"
          "  this environment's OMPI_MCA_* variables and those -x names.\n",
          stderr);
    return status;
}

/* "a:2,b:2" into hosts[]; 0, or -1 (said). */
static int parse_hosts(char *spec)
{
    nhosts = 0;
    int first = 0;
    for (char *save = NULL, *e = strtok_r(spec, ",", &save); e; e = strtok_r(NULL, ",", &save)) {
        if (nhosts == MAX_HOSTS) {
            say("--host: more than %d hosts", MAX_HOSTS);
            return -1;
        }
        char *colon = strchr(e, ':');
        long c = 1;
        if (colon) {
            char *end;
            *colon = 0;
            c = strtol(colon + 1, &end, 10);
            if (*end || c < 1 || c > MAX_RANKS) {
                say("--host: %s:%s: expected a number of ranks from 1 to %d", e, colon + 1,
                    MAX_RANKS);
                return -1;
            }
        }
        if (!*e) {
            say("--host: an empty host name");
            return -1;
        }
        hosts[nhosts] = e;
        host_first[nhosts] = first;
        host_count[nhosts] = (int)c;
        first += (int)c;
        if (first > MAX_RANKS) {
            say("--host: more than %d ranks", MAX_RANKS);
            return -1;
        }
        nhosts++;
    }
    if (nhosts == 0) {
        say("--host: no host");
        return -1;
    }
    return first;
}

int main(int argc, char **argv)
{
    long n = 0;
    char *host_spec = NULL, *bind_addr = NULL, *rsh = NULL, *contact = NULL;
    int i = 1;
    static char spec_copy[65536];
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--")) {
            i++;
            break;
        }
        if (!strcmp(o, "-h") || !strcmp(o, "--help"))
            return usage(0);
        if (i + 1 >= argc) {
            say("%s needs a value", o);
            return usage(2);
        }
        if (!strcmp(o, "-n") || !strcmp(o, "-np")) {
            char *end;
            n = strtol(argv[++i], &end, 10);
            if (*end || n < 1 || n > MAX_RANKS) {
                say("-n %s: expected a number of ranks from 1 to %d", argv[i], MAX_RANKS);
                return 2;
            }
        } else if (!strcmp(o, "--host")) {
            host_spec = argv[++i];
        } else if (!strcmp(o, "--bind")) {
            bind_addr = argv[++i];
        } else if (!strcmp(o, "--rsh")) {
            rsh = argv[++i];
        } else if (!strcmp(o, "-x")) {
            if (nforward == MAX_FORWARD) {
                say("-x: more than %d variables", MAX_FORWARD);
                return 2;
            }
            forward[nforward++] = argv[++i];
            if (strchr(argv[i], '=') && putenv(argv[i]) != 0)
                return 1;
        } else if (!strcmp(o, "--env")) {
            /* From the hub, for a daemon: a variable for this host's ranks. */
            if (putenv(argv[++i]) != 0)
                return 1;
        } else if (!strcmp(o, "--daemon") && i + 2 < argc) {
            contact = argv[++i];
            me = atoi(argv[++i]);
        } else {
            say("unknown option %s", o);
            return usage(2);
        }
    }
    if (i >= argc)
        return usage(2);
    char **program = argv + i;

    static char here[256] = "localhost";
    gethostname(here, sizeof here - 1);
    if (host_spec) {
        if (strlen(host_spec) >= sizeof spec_copy) {
            say("--host is too long");
            return 2;
        }
        strcpy(spec_copy, host_spec);
        int total = parse_hosts(spec_copy);
        if (total < 0)
            return 2;
        if (n && n != total) {
            say("-n %ld but --host %s places %d ranks", n, host_spec, total);
            return 2;
        }
        nranks = total;
    } else {
        nranks = n ? (int)n : 1;
        hosts[0] = here;
        host_count[0] = nranks;
    }
    if (me < 0 || me >= nhosts || (contact && me == 0)) {
        say("--daemon: host %d is not one of the %d hosts", me, nhosts);
        return 2;
    }
    for (int h = 0; h < nhosts; h++)
        links[h] = (struct link){.fd = -1, .send = PTHREAD_MUTEX_INITIALIZER};
    if (nhosts > 1) {
        const char *t = getenv("CAIRN_COORD_TOKEN");
        if (!t || !*t || strlen(t) >= sizeof token) {
            say("ranks on more than one host need the job's token in CAIRN_COORD_TOKEN (run "
                "under cairn launch)");
            return 2;
        }
        strcpy(token, t);
        if (me == 0 && !bind_addr) {
            say("--host names %d hosts: --bind ADDR must say at which address of this host "
                "the others reach it",
                nhosts);
            return 2;
        }
    }
    if (!rsh)
        rsh = getenv("CAIRN_RSH");
    if (!rsh || !*rsh)
        rsh = "ssh";

    /* Signals for the job go to the ranks; cairn-prun waits for them. Blocked before any
     * thread starts, so that every thread leaves them to sigwait. */
    const int passed[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};
    sigset_t set;
    sigemptyset(&set);
    for (size_t s = 0; s < sizeof passed / sizeof passed[0]; s++)
        sigaddset(&set, passed[s]);
    sigaddset(&set, SIGCHLD);
    sigprocmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    char hub_contact[256] = "";
    if (nhosts > 1) {
        if (me == 0 && listen_at(bind_addr, hub_contact, sizeof hub_contact) != 0)
            return 1;
        if (me != 0) {
            links[0].fd = connect_hub(contact);
            if (links[0].fd < 0 ||
                send_msg(0, M_HELLO, 0, (uint32_t)me, token, strlen(token)) != 0)
                return 1;
        }
        pthread_t t;
        if (pthread_create(&t, NULL, network, NULL) != 0)
            return 1;
        pthread_detach(t);
    }

    /* The server's rendezvous files and key-value store: private to the user, removed when
     * the job ends (a job that was killed leaves it for its restart). */
    const char *base = getenv("TMPDIR");
    if (!base || !*base)
        base = "/tmp";
    if (snprintf(tmpdir, sizeof tmpdir, "%s/cairn-prun.XXXXXX", base) >= (int)sizeof tmpdir ||
        !mkdtemp(tmpdir)) {
        say("cannot make a private directory under %s: %s", base, strerror(errno));
        return 1;
    }
    /* One namespace for the whole job, named after the hub: its pid, or with more than one
     * host the address the daemons reach it at. */
    if (nhosts == 1)
        snprintf(nspace, sizeof nspace, "cairn-prun.%d", (int)getpid());
    else
        snprintf(nspace, sizeof nspace, "cairn-prun.%s", me == 0 ? hub_contact : contact);
    pmix_info_t sinfo[2];
    PMIX_INFO_LOAD(&sinfo[0], PMIX_SERVER_TMPDIR, tmpdir, PMIX_STRING);
    PMIX_INFO_LOAD(&sinfo[1], PMIX_SYSTEM_TMPDIR, tmpdir, PMIX_STRING);
    pmix_status_t rc = PMIx_server_init(&host_module, sinfo, 2);
    if (rc != PMIX_SUCCESS) {
        say("the PMIx server did not start: %s", PMIx_Error_string(rc));
        rmdir(tmpdir);
        return 1;
    }
    rc = register_job();
    if (rc != PMIX_SUCCESS) {
        say("registering the job with the PMIx server failed: %s", PMIx_Error_string(rc));
        PMIx_server_finalize();
        return 1;
    }

    int failed = 0;
    if (me == 0)
        for (int h = 1; h < nhosts && !failed; h++)
            if (start_daemon(h, rsh, hub_contact, host_spec, program) != 0) {
                say("cannot start the daemon of host %s with `%s`", hosts[h], rsh);
                failed = 1;
            }
    int live = 0;
    for (int r = host_first[me]; r < host_first[me] + host_count[me] && !failed; r++) {
        if (start_rank(r, program) != 0)
            failed = 1;
        else
            live++;
    }
    if (failed) {
        abort_everywhere(1);
        pthread_mutex_lock(&lock);
        first_bad = -1;
        bad_status = 1;
        pthread_mutex_unlock(&lock);
    }
    while (live > 0) {
        int sig;
        if (sigwait(&set, &sig) != 0)
            continue;
        if (sig != SIGCHLD) {
            kill_ranks(sig);
            if (me == 0)
                for (int h = 1; h < nhosts; h++)
                    send_msg(h, M_SIGNAL, sig, 0, NULL, 0);
            continue;
        }
        int ws;
        pid_t pid;
        while ((pid = waitpid(-1, &ws, WNOHANG)) > 0) {
            int code = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
            for (int h = 1; h < nhosts; h++)
                if (rsh_pids[h] == pid) {
                    rsh_pids[h] = 0;
                    if (code != 0 && !links[h].exited && atomic_load(&aborted) < 0) {
                        say("starting the daemon of host %s with `%s` failed (status %d)",
                            hosts[h], rsh, code);
                        pthread_mutex_lock(&lock);
                        lost = 1;
                        pthread_mutex_unlock(&lock);
                        abort_everywhere(1);
                    }
                }
            for (int r = host_first[me]; r < host_first[me] + host_count[me]; r++) {
                if (pids[r] != pid)
                    continue;
                pids[r] = 0;
                live--;
                pthread_mutex_lock(&lock);
                if (code != 0 && r < first_bad) {
                    first_bad = r;
                    bad_status = code;
                }
                pthread_mutex_unlock(&lock);
            }
        }
    }
    if (me != 0) {
        /* This host's end, to the hub, which counts the job ended when every host's has come. */
        pthread_mutex_lock(&lock);
        int fb = first_bad, st = bad_status;
        pthread_mutex_unlock(&lock);
        send_msg(0, M_EXIT, st, (uint32_t)(fb < 0 ? 0 : fb), NULL, 0);
    } else if (nhosts > 1) {
        /* Every daemon's end, unless one was lost. */
        pthread_mutex_lock(&lock);
        for (;;) {
            int all = 1;
            for (int h = 1; h < nhosts; h++)
                if (!links[h].exited)
                    all = 0;
            if (all || lost)
                break;
            pthread_cond_wait(&changed, &lock);
        }
        pthread_mutex_unlock(&lock);
    }
    PMIx_server_finalize();
    /* What the server left in its directory: its rendezvous files and the store. Removed
     * here, not by a shell: a child would be one more process of the job to join it. */
    if (nftw(tmpdir, remove_one, 16, FTW_DEPTH | FTW_PHYS) != 0)
        say("could not remove %s: %s", tmpdir, strerror(errno));
    int a = atomic_load(&aborted);
    if (a >= 0)
        return a;
    if (lost && me == 0)
        return first_bad < MAX_RANKS ? bad_status : 1;
    return first_bad < MAX_RANKS ? bad_status : 0;
}
