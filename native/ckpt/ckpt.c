/*
** ckpt.c: libcairn-ckpt.so, the checkpoint library Cairn injects into unmodified programs
** (LD_PRELOAD, by `cairn launch`).
**
** The file is divided into:
**   - state and small helpers (raw system calls only where other threads may be stopped);
**   - the constructor: the restore hole, the checkpoint signal, the manager thread;
**   - the signal handler, where every application thread stops and, after a restart, starts
**     again;
**   - capture: /proc/self/maps and pagemap read into scratch memory inside the hole, the
**     image written from the process's own memory;
**   - resume after a restart: signal actions, files, cwd, umask, limits, then per thread
**     rseq, robust list, CPU mask, name and timer slack;
**   - the manager thread and its side of the coordinator protocol (docs/coordinator.md),
**     including a slot's RUN: the command an rsh agent asked for, run in the slot's place.
**
** A checkpoint, as the manager drives it:
**
**     RUNNING --SUSPEND--> STOPPING --all threads in the handler--> SUSPENDED
**     SUSPENDED --WRITE--> WRITING --image renamed into place--> WRITTEN
**     WRITTEN --RESUME--> RUNNING (threads return from the handler)
**
** In SUSPENDED every application thread sits in cairn_handler() with its registers in the
** signal frame on its own stack and its resume point in its struct cairn_img_jump, so the
** memory written in WRITING is a consistent picture of the process. The manager saves its
** own resume point just before writing; a restored process starts from those points
** (cairn_ctx_save returns 1), so after a restart the same code goes on from WRITING with
** `restarted` set, restores what the kernel lost, and releases the threads.
**
** Without a coordinator (CAIRN_COORD_ADDR unset) the library runs standalone when
** CAIRN_CKPT_DIR is set: the checkpoint signal sent from outside the process checkpoints it
** into <dir>/v<N>/proc0.img (used by the library's own tests).
**
** Nothing here exits, aborts or kills the process: a failed checkpoint is reported and the
** program goes on.
*/
#define _GNU_SOURCE
#include "image.h"
#include "proto.h"

#include <arpa/inet.h>
#include <asm/prctl.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <netdb.h>
#include <netinet/in.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/inet_diag.h>
#include <linux/sock_diag.h>
#include <linux/sockios.h>
#include <linux/unix_diag.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>
#include <cpuid.h>
/* The hashes of images (the run and header checksums of image.h, and the engine's block
 * hashes, struct cairn_img_hashes): Debian's libxxhash-dev, inlined, so nothing is linked.
 * hash_avx2.c is the same code built for AVX2, used where the CPU has it (image_hashes_pick). */
#define XXH_INLINE_ALL
#include <xxhash.h>
#include "hashes.h"

#define EXPORT __attribute__((visibility("default")))

/* ---- state ------------------------------------------------------------------------ */

#define MAX_THREADS 1024
#define MAX_FDS 1024
#define MAX_WATCHES 4096
#define MAX_INFLIGHT (4u << 20)

/* Bytes in flight in pipes inside the process at the checkpoint (part of the image). */
static char inflight[MAX_INFLIGHT];
static size_t inflight_used;

/* Unix stream sockets seen by the census, paired up once all descriptors are known; and,
 * in a tree, connected TCP sockets. */
static struct sock_end {
    int fd;
    int type; /* SOCK_STREAM, SOCK_DGRAM or SOCK_SEQPACKET (Unix) */
    uint64_t ino, peer;
    char target[64];
} sock_ends[MAX_FDS], tcp_ends[MAX_FDS];
static int nsock_ends, ntcp_ends;

/* Pipes and Unix stream sockets of a process in its tree's namespace: made again once per
 * tree by the restorer (image.h), whichever processes of the tree hold them. */
static struct cairn_img_xfd xfds[MAX_FDS];
static int nxfds;

/* Pipe descriptors seen by the census, paired up once all descriptors are known. */
static struct pipe_end {
    int fd;
    int write;
    uint64_t ino;
    char target[64];
} pipe_ends[MAX_FDS];
static int npipe_ends;
#define SCRATCH_OFF (32ull << 20) /* manager scratch: the second half of the hole */
#define SCRATCH_LEN (32ull << 20)

/* Everything a stopped thread leaves for the image and for its own resume. */
struct thread_rec {
    int32_t tid;
    uint32_t main;
    uint64_t fs_base;
    struct cairn_img_jump jump;
    /* Kernel state a recreated thread does not have; restored by the thread itself. */
    uint64_t robust_head, robust_len;
    uint64_t rseq_addr;
    uint32_t rseq_len;
    int32_t nice;
    uint64_t timer_slack;
    cpu_set_t affinity;
    int has_affinity;
    char name[16];
};

/* What a descriptor comes back as. */
enum fd_kind {
    FD_REOPEN,      /* the file, directory or device at `path`, reopened */
    FD_CLOSED_PIPE, /* a pipe or FIFO whose other end is closed */
    FD_CLOSED_SOCK, /* a socket whose peer is closed (type in `sock_type`) */
    FD_EVENTFD,     /* an eventfd: its count in `value`, EFD_SEMAPHORE in `sock_type` */
    FD_TIMERFD,     /* a timerfd: its clock in `sock_type`, time left and interval in `timer` */
    FD_SIGNALFD,    /* a signalfd: its mask in `value` (bit s-1 for signal s) */
    FD_EPOLL,       /* an epoll: `value` watches from S.watches[first_watch] */
    FD_PIPE,        /* an end of a pipe whose both ends this process holds: inode in `value`,
                     * 1 in `sock_type` for the write end; the pipe's first record has the
                     * `timer[0]` bytes from inflight[timer[1]] that were in it */
    FD_SOCKPAIR,    /* an end of a Unix stream socket pair whose both ends this process
                     * holds: own and peer inode in `value` and `timer[2]`, type in
                     * `sock_type`; the `timer[0]` bytes from inflight[timer[1]] were
                     * waiting to be read at this end */
    FD_LISTEN,      /* a listening socket: bound again to `addr` (family, type and protocol in
                     * `sock_type`, `value` and `timer[0]`; SO_REUSEPORT, IPV6_V6ONLY in
                     * `timer[1]`, `timer[2]`) */
    FD_FIFO,        /* a named FIFO without a writer or bytes waiting, opened again at `path` */
    FD_UNNAMED,     /* an empty file whose name is gone: a new empty file without a name */
    FD_INOTIFY,     /* an inotify instance: `value` watches from S.watches[first_watch], each
                     * its wd in `fd`, its mask in `events` and its entry of `inotify_paths`
                     * in `data` */
};

/* One descriptor an epoll instance watches, as /proc/self/fdinfo shows it. */
struct epoll_watch {
    int32_t fd;
    uint32_t events;
    uint64_t data;
};

struct fd_rec {
    int fd;
    int kind;    /* enum fd_kind */
    int sock_type;
    uint64_t value;
    int64_t timer[4]; /* time left (s, ns) and interval (s, ns) */
    int first_watch;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    int flags;   /* F_GETFL */
    int cloexec; /* FD_CLOEXEC */
    int64_t offset;
    int64_t size;
    char path[CAIRN_IMG_PATH_MAX];
};

static struct {
    int enabled;
    int sig;                      /* the checkpoint signal */
    int tid_offset;               /* of glibc's tid field from the thread pointer */
    pthread_t manager;
    int32_t manager_tid;
    int32_t main_tid_at_start;
    /* Checkpoint in progress. */
    atomic_int stopping;          /* set while the manager stops the threads */
    atomic_int slots;             /* thread records handed out in the handler */
    atomic_int arrived;           /* threads fully recorded (resume point saved) */
    atomic_uint release;          /* bumped to let stopped threads go */
    atomic_int resumed;           /* threads done with their own restore after a restart */
    int nthreads;
    struct thread_rec threads[MAX_THREADS];
    struct cairn_img_jump manager_jump;
    uint64_t manager_fs;
    /* Saved at checkpoint, restored after a restart. */
    struct { uint64_t handler, flags, restorer, mask; } actions[65];
    int nfds;
    struct fd_rec fds[MAX_FDS];
    int nwatches;
    struct epoll_watch watches[MAX_WATCHES];
    char cwd[4096];
    mode_t umask;
    struct rlimit limits[RLIM_NLIMITS];
    /* Coordinator. */
    char coord[128], token[80], job[128];
    int proc, node;
    int sock;
    uint64_t sock_ino;            /* the inode of `sock`, to tell it from a program's descriptor */
    int wake[2];                  /* the handler asks the manager for a checkpoint */
    char standalone_dir[400];
    uint64_t checkpoints;
    int affinity;                 /* restore CPU masks */
    int verbose;                  /* CAIRN_CKPT_VERBOSE: report timings on stderr */
    int64_t stop_ns, write_ns;    /* of the last checkpoint */
    int execed;                   /* this program replaced the job's process by exec */
    int close_external;           /* CAIRN_CKPT_EXTERNAL=close: pipes and sockets come back closed */
    char why[1024];               /* what the last checkpoint could not capture */
    int nslevels;                 /* pid namespace levels /proc shows (2 or more: inside one) */
    int member;                   /* a process the job's process started (not the launched one) */
    int max_fd;                   /* the highest descriptor number seen by the last census */
    int host_pid;                 /* the pid as /proc (and cairn status, and kill from outside) see it */
    int slot;                     /* started as a slot (CAIRN_CKPT_SLOT=1): RUN replaces it by a command */
} S = { .sock = -1, .wake = { -1, -1 }, .affinity = 1 };

/* Written by the restorer (image.h). */
static struct cairn_img_control CONTROL = { .magic = CAIRN_CONTROL_MAGIC };

extern const ptrdiff_t __rseq_offset __attribute__((weak));
extern const unsigned int __rseq_size __attribute__((weak));

/* Save the callee-saved registers, stack and return address into *j and return 0; when a
 * thread is later started at *j (by the restorer), this returns 1 instead. */
int cairn_ctx_save(struct cairn_img_jump *j) __attribute__((returns_twice));
__asm__(".text\n"
        ".globl cairn_ctx_save\n"
        ".hidden cairn_ctx_save\n"
        ".type cairn_ctx_save,@function\n"
        "cairn_ctx_save:\n"
        "  movq %rbx, 0(%rdi)\n"
        "  movq %rbp, 8(%rdi)\n"
        "  movq %r12, 16(%rdi)\n"
        "  movq %r13, 24(%rdi)\n"
        "  movq %r14, 32(%rdi)\n"
        "  movq %r15, 40(%rdi)\n"
        "  leaq 8(%rsp), %rax\n"
        "  movq %rax, 48(%rdi)\n"
        "  movq (%rsp), %rax\n"
        "  movq %rax, 56(%rdi)\n"
        "  xorl %eax, %eax\n"
        "  ret\n"
        ".size cairn_ctx_save, .-cairn_ctx_save\n");

static pid_t gettid_raw(void) { return (pid_t)syscall(SYS_gettid); }

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint64_t fs_base(void)
{
    uint64_t v = 0;
    syscall(SYS_arch_prctl, ARCH_GET_FS, &v);
    return v;
}

static void futex_wait(atomic_uint *a, unsigned v)
{
    syscall(SYS_futex, a, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
}

static void futex_wake(void *a) { syscall(SYS_futex, a, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0); }

/* Messages go to stderr with one write, never through stdio (its lock may be held). */
static void say(const char *fmt, ...)
{
    char buf[512];
    int n = snprintf(buf, sizeof buf, "cairn-ckpt[%d]: ", (int)getpid());
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof buf - 2)
        n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    (void)!syscall(SYS_write, 2, buf, (size_t)n);
}

static int write_full(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = syscall(SYS_write, fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* ---- the constructor ----------------------------------------------------------------- */

static void handler(int sig, siginfo_t *si, void *uc);
static void *manager_main(void *arg);
static void find_host_pid(void);
static void start_manager(void);
static void after_fork_child(void);

static void copy_env(char *dst, size_t len, const char *name)
{
    const char *v = getenv(name);
    snprintf(dst, len, "%s", v ? v : "");
}

/* Find glibc's tid field from the thread pointer: 720 on x86_64 glibc 2.11 and later; any
 * other layout is searched for once, at start, where the tid is known. */
static int find_tid_offset(void)
{
    uint64_t tp = fs_base();
    pid_t t = gettid_raw();
    if (*(pid_t *)(tp + 720) == t)
        return 720;
    for (int o = 0; o < 2048; o += 4)
        if (*(pid_t *)(tp + (uint64_t)o) == t)
            return o;
    return -1;
}

/* The job process's pid in the environment, and whether it is the launched process of its
 * tree ('r') or one that process started ('m'): fixed-width, so that it can be written over
 * in place after a restart or a fork (no allocation while other threads may hold malloc's
 * lock), where shells that build their children's environment from their own copy of the
 * strings (dash) see the change too. */
#define PID_ENV "CAIRN_CKPT_PID"
#define PID_WIDTH 11

/* This process was started by a job process (it is not the job's): remove the settings
 * that would make it register as that process, and the library, from what it and its own
 * children see. CAIRN_JOB, CAIRN_PROC and CAIRN_NODE stay, for the program to read. */
static void leave_job_environment(void)
{
    static const char *const ours[] = {"CAIRN_COORD_ADDR", "CAIRN_COORD_TOKEN", "CAIRN_CKPT_DIR",
                                       "CAIRN_CKPT_AFFINITY", "CAIRN_CKPT_SIGNAL", PID_ENV};
    for (size_t i = 0; i < sizeof ours / sizeof ours[0]; i++)
        unsetenv(ours[i]);
    const char *pre = getenv("LD_PRELOAD");
    if (pre && strstr(pre, "libcairn-ckpt.so")) {
        char kept[4096] = "";
        char list[4096];
        snprintf(list, sizeof list, "%s", pre);
        for (char *save = NULL, *tok = strtok_r(list, ": ", &save); tok; tok = strtok_r(NULL, ": ", &save)) {
            if (strstr(tok, "libcairn-ckpt.so"))
                continue;
            size_t k = strlen(kept);
            snprintf(kept + k, sizeof kept - k, "%s%s", k ? ":" : "", tok);
        }
        if (kept[0])
            setenv("LD_PRELOAD", kept, 1);
        else
            unsetenv("LD_PRELOAD");
    }
}

/* After a restart the process has a new pid: write it over the old one in the environment
 * it inherited, so that a later exec in place still joins the job. */
static void pid_env_value(char out[PID_WIDTH + 1])
{
    snprintf(out, PID_WIDTH + 1, "%0*d%c", PID_WIDTH - 1, (int)getpid(), S.member ? 'm' : 'r');
}

static void update_pid_env(void)
{
    char *v = getenv(PID_ENV);
    if (!v || strlen(v) != PID_WIDTH)
        return;
    char pid[PID_WIDTH + 1];
    pid_env_value(pid);
    memcpy(v, pid, PID_WIDTH);
}

/* After a restart the coordinator has a new address and token: they go into the environment
 * too, or a program the process execs (a child's exec, or its own in place) would knock at
 * the old coordinator's door and never join, and a checkpoint would find it outside the job.
 * Written over the old value when it fits (no lock taken: a thread may have been stopped
 * inside setenv at the checkpoint), else set. */
static void refresh_env(const char *name, const char *value)
{
    char *v = getenv(name);
    if (v && strlen(v) >= strlen(value)) {
        memmove(v, value, strlen(value) + 1);
        return;
    }
    setenv(name, value, 1);
}

static void set_pid_env(void)
{
    char pid[PID_WIDTH + 1];
    pid_env_value(pid);
    setenv(PID_ENV, pid, 1);
}

/* The manager thread, with every signal blocked while it is made (it keeps them blocked). */
static void start_manager(void)
{
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 1 << 20);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    if (pthread_create(&S.manager, &a, manager_main, NULL) != 0) {
        say("cannot start the manager thread; checkpointing is off");
        S.enabled = 0;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&a);
}

static void reset_line_reader(void);

/* The coordinator socket the manager is connecting, not yet S.sock: a fork copies it, and the
 * child must close it (its census would take it for a connection to outside). The lock keeps
 * fork from happening between its creation and its record. */
static pthread_mutex_t conn_lock = PTHREAD_MUTEX_INITIALIZER;
static int connecting = -1;

static void before_fork(void) { pthread_mutex_lock(&conn_lock); }
static void after_fork_parent(void) { pthread_mutex_unlock(&conn_lock); }

/* A child made by fork joins the job as a process of its tree, from its first instruction:
 * its own manager thread (the parent's is not in it), its own connection and wake pipe. */
static void after_fork_child(void)
{
    pthread_mutex_unlock(&conn_lock);
    if (connecting >= 0)
        close(connecting);
    connecting = -1;
    if (S.sock >= 0)
        close(S.sock);
    S.sock = -1;
    reset_line_reader();
    for (int k = 0; k < 2; k++)
        if (S.wake[k] >= 0)
            close(S.wake[k]);
    if (pipe2(S.wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        S.wake[0] = S.wake[1] = -1;
        say("pipe: %s; this process is not under checkpoint control", strerror(errno));
        S.enabled = 0;
        return;
    }
    atomic_store(&S.stopping, 0);
    atomic_store(&S.slots, 0);
    atomic_store(&S.arrived, 0);
    atomic_store(&S.resumed, 0);
    S.manager_tid = 0;
    S.member = 1;
    S.execed = 0;
    S.slot = 0; /* a slot's child is not the slot */
    update_pid_env();
    find_host_pid();
    S.main_tid_at_start = gettid_raw();
    start_manager();
}

__attribute__((constructor(101))) static void cairn_ckpt_init(void)
{
    if (CONTROL.restarted)
        return; /* restored memory: the constructor ran in the first life */
    copy_env(S.coord, sizeof S.coord, "CAIRN_COORD_ADDR");
    copy_env(S.token, sizeof S.token, "CAIRN_COORD_TOKEN");
    copy_env(S.job, sizeof S.job, "CAIRN_JOB");
    copy_env(S.standalone_dir, sizeof S.standalone_dir, "CAIRN_CKPT_DIR");
    const char *p = getenv("CAIRN_PROC");
    S.proc = p ? atoi(p) : 0;
    p = getenv("CAIRN_NODE");
    S.node = p ? atoi(p) : 0;
    p = getenv("CAIRN_CKPT_AFFINITY");
    S.affinity = !(p && strcmp(p, "off") == 0);
    p = getenv("CAIRN_CKPT_VERBOSE");
    S.verbose = p && *p && strcmp(p, "0") != 0;
    p = getenv("CAIRN_CKPT_SLOT");
    S.slot = p && strcmp(p, "1") == 0;
    p = getenv("CAIRN_CKPT_EXTERNAL");
    S.close_external = p && strcmp(p, "close") == 0;
    if (p && *p && strcmp(p, "close") != 0 && strcmp(p, "fail") != 0)
        say("CAIRN_CKPT_EXTERNAL=%s: expected fail or close; checkpoints of pipes and sockets fail", p);
    S.sig = SIGRTMIN + 4;
    p = getenv("CAIRN_CKPT_SIGNAL");
    if (p && atoi(p) > 0 && atoi(p) < 65)
        S.sig = atoi(p);
    if (S.coord[0] == 0 && S.standalone_dir[0] == 0)
        return; /* not under cairn launch: stay out of the way */
    /* CAIRN_CKPT_PID names the job's process: the library stays in the environment, so a
     * program the process execs in its place (through any number of shell or interpreter
     * wrappers) loads it again and joins the job as the same process; a process it starts
     * finds another pid there and stays out of the job. */
    const char *owner = getenv(PID_ENV);
    find_host_pid();
    S.member = owner && strlen(owner) == PID_WIDTH && owner[PID_WIDTH - 1] == 'm';
    if (owner && atol(owner) != (long)getpid()) {
        /* Started by a process of the job: inside the tree's pid namespace it joins the job
         * as a process of that tree; without one its pid could not come back at a restart,
         * and it stays out (its parent's checkpoints are refused while it runs). */
        if (!S.coord[0] || S.nslevels < 2) {
            leave_job_environment();
            return;
        }
        S.member = 1;
        owner = NULL;
    }
    S.execed = owner != NULL;
    if (!owner)
        set_pid_env();
    /* Keep the restorer's place free: nothing of this process may ever be mapped there. */
    void *hole = mmap((void *)CAIRN_IMG_HOLE_START, CAIRN_IMG_HOLE_LEN, PROT_NONE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (hole != (void *)CAIRN_IMG_HOLE_START) {
        say("cannot reserve the restore area at %#llx (%s); checkpointing is off",
            (unsigned long long)CAIRN_IMG_HOLE_START, strerror(errno));
        return;
    }
    S.tid_offset = find_tid_offset();
    if (S.tid_offset < 0) {
        say("cannot find glibc's thread id field; checkpointing is off");
        return;
    }
    S.main_tid_at_start = gettid_raw();
    if (pipe2(S.wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        say("pipe: %s; checkpointing is off", strerror(errno));
        return;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigfillset(&sa.sa_mask);
    if (sigaction(S.sig, &sa, NULL) != 0) {
        say("sigaction: %s; checkpointing is off", strerror(errno));
        return;
    }
    S.enabled = 1;
    if (S.coord[0] && S.nslevels >= 2)
        pthread_atfork(before_fork, after_fork_parent, after_fork_child);
    start_manager();
}

/* ---- the signal handler ------------------------------------------------------------- */

static void restore_thread(struct thread_rec *t);

static void handler(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)uc;
    int saved_errno = errno;
    if (!atomic_load(&S.stopping) || gettid_raw() == S.manager_tid) {
        /* Not a stop: a request from outside (kill -SIG pid) asks for a checkpoint. */
        if (si->si_code == SI_USER && S.wake[1] >= 0) {
            char c = 'c';
            (void)!write(S.wake[1], &c, 1);
        }
        errno = saved_errno;
        return;
    }
    int i = atomic_fetch_add(&S.slots, 1);
    if (i >= MAX_THREADS) {
        /* More threads than records: the manager sees the count and fails the checkpoint. */
        unsigned gen = atomic_load(&S.release);
        atomic_fetch_add(&S.arrived, 1);
        futex_wake(&S.arrived);
        while (atomic_load(&S.release) == gen)
            futex_wait(&S.release, gen);
        errno = saved_errno;
        return;
    }
    struct thread_rec *t = &S.threads[i];
    t->tid = gettid_raw();
    t->main = t->tid == (pid_t)getpid();
    t->fs_base = fs_base();
    syscall(SYS_get_robust_list, 0, &t->robust_head, &t->robust_len);
    t->rseq_addr = &__rseq_offset ? t->fs_base + (uint64_t)__rseq_offset : 0;
    t->rseq_len = &__rseq_size ? (__rseq_size < 32 ? 32 : __rseq_size) : 0;
    t->nice = getpriority(PRIO_PROCESS, (id_t)t->tid);
    t->timer_slack = (uint64_t)prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    t->has_affinity = sched_getaffinity(0, sizeof t->affinity, &t->affinity) == 0;
    prctl(PR_GET_NAME, t->name, 0, 0, 0);
    unsigned gen = atomic_load(&S.release);
    int restarted = cairn_ctx_save(&t->jump);
    if (restarted) {
        /* A new thread of a restored process, started here by the restorer. */
        restore_thread(t);
        atomic_fetch_add(&S.resumed, 1);
        futex_wake(&S.resumed);
        /* gen is the value from before the stop: the manager bumps it once it has restored
         * the process, whenever that happens relative to this. */
        while (atomic_load(&S.release) == gen)
            futex_wait(&S.release, gen);
        errno = saved_errno;
        return; /* rt_sigreturn: registers, FPU state, mask and altstack from the frame */
    }
    /* Counted only now, with its resume point saved: the manager writes the image once
     * every thread is counted, and a thread counted earlier could be written half-recorded. */
    atomic_fetch_add(&S.arrived, 1);
    futex_wake(&S.arrived);
    while (atomic_load(&S.release) == gen)
        futex_wait(&S.release, gen);
    errno = saved_errno;
}

/* ---- stopping and releasing the threads ------------------------------------------- */

/* Call each(n, arg) for every numeric entry n of a /proc directory (tasks, descriptors),
 * with raw system calls only. Returns the directory's fd number while it runs through
 * *dirfd (so callers can skip it), 0, or -errno. */
static int each_number(const char *dir, void (*each)(int, void *), void *arg, int *dirfd)
{
    int fd = (int)syscall(SYS_openat, AT_FDCWD, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (dirfd)
        *dirfd = fd;
    char buf[4096];
    for (;;) {
        long got = syscall(SYS_getdents64, fd, buf, sizeof buf);
        if (got <= 0)
            break;
        for (long off = 0; off < got;) {
            struct { uint64_t ino; int64_t off; unsigned short reclen; unsigned char type; char name[]; } *d = (void *)(buf + off);
            off += d->reclen;
            if (d->name[0] >= '0' && d->name[0] <= '9')
                each(atoi(d->name), arg);
        }
    }
    syscall(SYS_close, fd);
    return 0;
}

struct task_list {
    int32_t *out;
    int max, n;
};

static int own_tid(int listed);

static void add_task(int listed, void *arg)
{
    struct task_list *l = arg;
    int tid = own_tid(listed);
    if (tid > 0 && tid != S.manager_tid && l->n < l->max)
        l->out[l->n++] = tid;
}

/* Thread ids of the process but the manager, from /proc/self/task. */
static int list_tasks(int32_t *out, int max)
{
    struct task_list l = {out, max, 0};
    int r = each_number("/proc/self/task", add_task, &l, NULL);
    return r < 0 ? r : l.n;
}

/* Stop every other thread in the handler. Returns 0, or -1 (threads are then released). */
static int stop_threads(void)
{
    static int32_t tids[MAX_THREADS + 1], sent[MAX_THREADS + 1];
    int nsent = 0;
    atomic_store(&S.slots, 0);
    atomic_store(&S.arrived, 0);
    atomic_store(&S.stopping, 1);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* Threads may start while others stop: signal until the task list stops growing. */
    for (;;) {
        int n = list_tasks(tids, MAX_THREADS + 1);
        if (n < 0 || n > MAX_THREADS) {
            say("cannot list threads (%d)", n);
            return -1;
        }
        int added = 0;
        for (int i = 0; i < n; i++) {
            int known = 0;
            for (int k = 0; k < nsent && !known; k++)
                known = sent[k] == tids[i];
            if (known)
                continue;
            if (syscall(SYS_tgkill, getpid(), tids[i], S.sig) == 0) {
                sent[nsent++] = tids[i];
                added = 1;
            }
        }
        /* Wait for the ones signalled. */
        for (;;) {
            int a = atomic_load(&S.arrived);
            if (a >= nsent)
                break;
            struct timespec ts = {0, 2 * 1000 * 1000};
            syscall(SYS_futex, &S.arrived, FUTEX_WAIT_PRIVATE, a, &ts, NULL, 0);
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            if (now.tv_sec - t0.tv_sec > 30) {
                say("%d of %d threads did not stop in 30 s", nsent - a, nsent);
                return -1;
            }
        }
        if (!added)
            break;
    }
    S.nthreads = atomic_load(&S.arrived);
    return S.nthreads > MAX_THREADS ? -1 : 0;
}

static void release_threads(void)
{
    atomic_store(&S.stopping, 0);
    atomic_fetch_add(&S.release, 1);
    futex_wake(&S.release);
}

/* ---- capture ------------------------------------------------------------------------- */

static uint8_t *scratch;   /* SCRATCH_LEN bytes inside the hole */

static int map_scratch(void)
{
    if (scratch)
        return 0;
    void *p = mmap((void *)(CAIRN_IMG_HOLE_START + SCRATCH_OFF), SCRATCH_LEN, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (p == MAP_FAILED)
        return -errno;
    scratch = p;
    return 0;
}

static int read_file(const char *path, char *buf, size_t len)
{
    int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t n = 0;
    for (;;) {
        ssize_t r = syscall(SYS_read, fd, buf + n, len - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
        if (n >= len - 1)
            break;
    }
    syscall(SYS_close, fd);
    buf[n] = 0;
    return n >= len - 1 ? -E2BIG : (int)n;
}

/* The numbers on the "NSpid:" line of a /proc status file: a task's id in each pid
 * namespace from /proc's down to its own. Returns how many (0 when unreadable). */
static int nspids(const char *status_path, long out[8])
{
    char text[2048];
    if (read_file(status_path, text, sizeof text) < 0)
        return 0;
    const char *p = strstr(text, "\nNSpid:");
    if (!p)
        return 0;
    p += 7;
    int n = 0;
    while (n < 8) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p)
            break;
        out[n++] = v;
        p = end;
        if (*p == '\n')
            break;
    }
    return n;
}

/* Whether /proc is a tree's own: cairn-restore --init mounts one in the tree's namespace, and
 * is its pid 1. */
static int tree_proc(void)
{
    char exe[CAIRN_IMG_PATH_MAX], cmd[1024];
    ssize_t n = readlink("/proc/1/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return 0;
    exe[n] = 0;
    const char *base = strrchr(exe, '/');
    base = base ? base + 1 : exe;
    if (strncmp(base, "cairn-restore", 13) != 0)
        return 0;
    /* Its first arguments are enough (a restart's init names every image after them). */
    int fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/1/cmdline", O_RDONLY | O_CLOEXEC);
    int k = fd < 0 ? -1 : (int)syscall(SYS_read, fd, cmd, sizeof cmd);
    if (fd >= 0)
        syscall(SYS_close, fd);
    for (int at = 0; at < k; at += (int)strnlen(cmd + at, (size_t)(k - at)) + 1)
        if (k - at >= 7 && memcmp(cmd + at, "--init", 7) == 0)
            return 1;
    return 0;
}

/* Where the process stands: its pid as this host's /proc shows it, and whether it runs in a
 * pid namespace below the host's (cairn launch makes one per process tree). In a tree with a
 * /proc of its own (the usual case) the host pid is not to be seen from inside: it stays 0
 * until the sub-coordinator's WELCOME says it. */
static void find_host_pid(void)
{
    long ids[8];
    S.nslevels = nspids("/proc/self/status", ids);
    S.host_pid = S.nslevels > 0 ? (int)ids[0] : (int)getpid();
    if (S.nslevels == 1 && tree_proc()) {
        S.nslevels = 2;
        S.host_pid = 0;
    }
}

/* A thread id as /proc/self/task lists it, in the process's own namespace. */
static int own_tid(int listed)
{
    if (S.nslevels < 2)
        return listed;
    char path[64];
    long ids[8];
    snprintf(path, sizeof path, "/proc/self/task/%d/status", listed);
    int n = nspids(path, ids);
    return n > 0 ? (int)ids[n - 1] : -1;
}

static int in_hole(uint64_t a) { return a >= CAIRN_IMG_HOLE_START && a < CAIRN_IMG_HOLE_START + CAIRN_IMG_HOLE_LEN; }

static int in_tree(void);

/* Shared memory without a name a restart could map again: shared anonymous memory, a deleted
 * file (POSIX semaphores and shared memory after unlink), a memfd. Not System V segments,
 * whose id a restart could not give back. */
static int shared_object(const char *path)
{
    size_t n = strlen(path);
    return strcmp(path, "/dev/zero (deleted)") == 0 ||
           (n > 10 && strcmp(path + n - 10, " (deleted)") == 0 && strncmp(path, "/SYSV", 5) != 0);
}

/* Parse /proc/self/maps into regions (in scratch). Returns how many. */
static int read_maps(struct cairn_img_region *out, int max, char *text, size_t textlen)
{
    int n = read_file("/proc/self/maps", text, textlen);
    if (n < 0)
        return n;
    int count = 0;
    for (char *line = text; *line;) {
        char *eol = strchr(line, '\n');
        if (eol)
            *eol = 0;
        unsigned long long start, end, off, ino;
        unsigned maj, min;
        char perms[8];
        int pos = 0;
        if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu %n", &start, &end, perms, &off, &maj, &min, &ino, &pos) >= 7) {
            const char *path = line + pos;
            while (*path == ' ')
                path++;
            if (!in_hole(start) && strcmp(path, "[vsyscall]") != 0 && count < max) {
                struct cairn_img_region *r = &out[count++];
                memset(r, 0, sizeof *r);
                r->start = start;
                r->end = end;
                r->prot = (perms[0] == 'r' ? PROT_READ : 0) | (perms[1] == 'w' ? PROT_WRITE : 0) |
                          (perms[2] == 'x' ? PROT_EXEC : 0);
                r->flags = perms[3] == 's' ? CAIRN_REG_SHARED : 0;
                r->node = -1;
                r->file_offset = off;
                r->dev = ((uint64_t)maj << 32) | min;
                r->ino = ino;
                snprintf(r->path, sizeof r->path, "%s", path);
                if (strcmp(path, "[vdso]") == 0)
                    r->flags |= CAIRN_REG_SPECIAL, r->special = CAIRN_SPECIAL_VDSO;
                else if (strcmp(path, "[vvar]") == 0)
                    r->flags |= CAIRN_REG_SPECIAL, r->special = CAIRN_SPECIAL_VVAR;
                else if (strcmp(path, "[vvar_vclock]") == 0)
                    r->flags |= CAIRN_REG_SPECIAL, r->special = CAIRN_SPECIAL_VVAR_VCLOCK;
                else if (strcmp(path, "[stack]") == 0)
                    r->flags |= CAIRN_REG_STACK;
                else if (strcmp(path, "[heap]") == 0)
                    r->flags |= CAIRN_REG_HEAP;
                else if ((r->flags & CAIRN_REG_SHARED) && in_tree() && strncmp(path, "/SYSV", 5) == 0)
                    r->flags |= CAIRN_REG_SYSV; /* saved by the tree's root, attached again */
                else if ((r->flags & CAIRN_REG_SHARED) && in_tree() && shared_object(path))
                    r->flags |= CAIRN_REG_OBJECT; /* made once for the tree at restart */
                else if (r->flags & CAIRN_REG_SHARED && strcmp(path, "/dev/zero (deleted)") == 0)
                    ; /* MAP_SHARED|MAP_ANONYMOUS: memory, saved as such */
                else if (ino != 0 && path[0] == '/')
                    r->flags |= CAIRN_REG_FILE;
            }
        }
        if (!eol)
            break;
        line = eol + 1;
    }
    return count;
}

/* Decide which pages of each region go into the image, filling bitmaps in scratch.
 * Private anonymous memory: present or swapped pages. Private file mappings: pages that
 * are no longer the file's (written, so copied). Shared anonymous: present pages. Shared
 * writable file mappings: every page inside the file. Shared read-only ones live in their
 * file. */
static int plan_pages(struct cairn_img_region *regs, int n, uint8_t *bitmaps, size_t cap,
                      uint64_t *bitmap_bytes)
{
    int pm = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (pm < 0)
        return -errno;
    size_t used = 0;
    static uint64_t ent[4096];
    for (int i = 0; i < n; i++) {
        struct cairn_img_region *r = &regs[i];
        if ((r->flags & (CAIRN_REG_SPECIAL | CAIRN_REG_SYSV)) || r->prot == PROT_NONE)
            continue;
        int file = (r->flags & CAIRN_REG_FILE) != 0, shared = (r->flags & CAIRN_REG_SHARED) != 0;
        /* A file mapped shared and writable: the process may change the file after the
         * checkpoint, so its bytes under the mapping are saved, every page inside the file,
         * and written back through the mapping at restart. Read-only ones live in their
         * file (the restart checks that it did not change). */
        uint64_t in_file = 0;
        if (file && shared) {
            struct stat st;
            if (!(r->prot & PROT_WRITE) || stat(r->path, &st) != 0 || (uint64_t)st.st_size <= r->file_offset)
                continue;
            in_file = ((uint64_t)st.st_size - r->file_offset + CAIRN_IMG_PAGE - 1) / CAIRN_IMG_PAGE;
        }
        uint64_t pages = (r->end - r->start) / CAIRN_IMG_PAGE;
        size_t bytes = (size_t)((pages + 7) / 8);
        int object = (r->flags & CAIRN_REG_OBJECT) != 0;
        if (used + bytes > cap) {
            syscall(SYS_close, pm);
            return -ENOMEM;
        }
        uint8_t *bm = bitmaps + used;
        memset(bm, 0, bytes);
        uint64_t saved = 0;
        /* Where the saved pages are (move_pages with no target only reports), so the
         * restorer can put them back on that NUMA node before filling them. */
        static uint64_t per_node[64];
        memset(per_node, 0, sizeof per_node);
        for (uint64_t p = 0; p < pages;) {
            uint64_t k = pages - p < 4096 ? pages - p : 4096;
            ssize_t got = syscall(SYS_pread64, pm, ent, k * 8, (r->start / CAIRN_IMG_PAGE + p) * 8);
            if (got != (ssize_t)(k * 8)) {
                syscall(SYS_close, pm);
                return -EIO;
            }
            static void *addrs[4096];
            static int status[4096];
            unsigned long na = 0;
            /* An object's pages are those it holds, whether or not this process touched
             * them (another process of the tree may have written them). */
            static unsigned char resident[4096];
            if (object && syscall(SYS_mincore, r->start + p * CAIRN_IMG_PAGE, k * CAIRN_IMG_PAGE, resident) != 0)
                memset(resident, 1, sizeof resident);
            for (uint64_t j = 0; j < k; j++) {
                uint64_t e = ent[j];
                int present = (e >> 63) & 1, swapped = (e >> 62) & 1, filepage = (e >> 61) & 1;
                int take = object         ? (resident[j] & 1) || present || swapped
                           : file && shared ? p + j < in_file
                           : file         ? (present && !filepage)
                                          : (present || swapped);
                if (take) {
                    bm[(p + j) / 8] |= (uint8_t)(1u << ((p + j) % 8));
                    saved++;
                    if (present)
                        addrs[na++] = (void *)(r->start + (p + j) * CAIRN_IMG_PAGE);
                }
            }
            if (na && !(file && shared) && syscall(SYS_move_pages, 0, na, addrs, NULL, status, 0) == 0)
                for (unsigned long j = 0; j < na; j++)
                    if (status[j] >= 0 && status[j] < 64)
                        per_node[status[j]]++;
            p += k;
        }
        int best = -1;
        for (int nd = 0; nd < 64; nd++)
            if (per_node[nd] && (best < 0 || per_node[nd] > per_node[best]))
                best = nd;
        if (best >= 0) {
            /* A region spread over several nodes goes back to the one holding most of it. */
            r->flags |= CAIRN_REG_NUMA;
            r->node = best;
        }
        if (saved) {
            r->flags |= CAIRN_REG_SAVED;
            r->saved_pages = saved;
            r->bitmap_off = used; /* relative for now */
            used += bytes;
        }
    }
    syscall(SYS_close, pm);
    *bitmap_bytes = used;
    return 0;
}

static void identity(struct cairn_img_header *h)
{
    struct utsname u;
    if (uname(&u) == 0) {
        snprintf(h->kernel_release, sizeof h->kernel_release, "%s", u.release);
        snprintf(h->kernel_version, sizeof h->kernel_version, "%s", u.version);
    }
    unsigned a, b, c, d;
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        h->cpuid1_ecx = c;
        h->cpuid1_edx = d;
    }
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        h->cpuid7_ebx = b;
        h->cpuid7_ecx = c;
        h->cpuid7_edx = d;
    }
    if (h->cpuid1_ecx & (1u << 27)) { /* OSXSAVE */
        uint32_t lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        h->xcr0 = ((uint64_t)hi << 32) | lo;
    }
}

/* The kernel's record of this process's memory: the program break (where glibc's malloc
 * grows its main heap) and where the text, data, arguments and environment are. Without
 * them a restored process has the restorer's break, below its heap: malloc would grow the
 * heap there and then take the chunks of the restored heap for foreign ones (and abort). */
#define STAT_FIELDS 52 /* /proc/self/stat's fields 1 to 51 (env_end) */

/* The numeric fields of /proc/self/stat, by their number (from 3, the state, on: f[7] is
 * tty_nr, f[26] startcode, f[45] start_data ... f[51] env_end). 0 if the file is shorter. */
static int self_stat(unsigned long long f[STAT_FIELDS])
{
    char st[2048];
    if (read_file("/proc/self/stat", st, sizeof st) <= 0)
        return 0;
    const char *p = strrchr(st, ')'); /* the name, which may hold anything, ends here */
    int n = 3;
    for (p = p ? p + 2 : NULL; p && *p && n < STAT_FIELDS; n++) {
        f[n] = strtoull(p, NULL, 10);
        p = strchr(p, ' ');
        p = p ? p + 1 : NULL;
    }
    return n == STAT_FIELDS;
}

static void memory_layout(struct cairn_img_header *h)
{
    unsigned long long f[STAT_FIELDS] = {0};
    if (!self_stat(f))
        return;
    h->mm_code[0] = f[26];
    h->mm_code[1] = f[27];
    h->mm_data[0] = f[45];
    h->mm_data[1] = f[46];
    h->brk_start = f[47];
    h->mm_args[0] = f[48];
    h->mm_args[1] = f[49];
    h->mm_env[0] = f[50];
    h->mm_env[1] = f[51];
    h->brk_end = (uint64_t)syscall(SYS_brk, 0);
}

/* ---- what a checkpoint cannot capture ------------------------------------------------- */

/* Character devices without state of their own: reopened by name after a restart. */
static int reopenable_device(const char *path)
{
    static const char *const ok[] = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (strcmp(path, ok[i]) == 0)
            return 1;
    return 0;
}

/* Add one finding to S.why ("; " between them; cut short with "..." when full). */
static void unrestorable(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void unrestorable(const char *fmt, ...)
{
    /* Entries fill at most `cap` bytes; the 3 left over take the "..." of a cut list. */
    size_t cap = sizeof S.why - 3, n = strlen(S.why);
    if (n + 1 >= cap)
        return; /* already cut */
    if (n > 0)
        n += (size_t)snprintf(S.why + n, cap - n, "; ");
    int w = -1;
    if (n + 1 < cap) {
        va_list ap;
        va_start(ap, fmt);
        w = vsnprintf(S.why + n, cap - n, fmt, ap);
        va_end(ap);
    }
    if (w < 0 || (size_t)w >= cap - n)
        strcpy(S.why + strlen(S.why), "...");
}

/* Whether n more bytes in flight fit in inflight[]; if not, the census says so. */
static int inflight_room(size_t n)
{
    if (n <= MAX_INFLIGHT - inflight_used)
        return 1;
    unrestorable("more than %u bytes are in flight in pipes and sockets inside the process", MAX_INFLIGHT);
    return 0;
}

/* An int socket option at SOL_SOCKET (SO_DOMAIN, SO_TYPE, ...), 0 if it cannot be read. */
static int sock_opt(int fd, int opt)
{
    int v = 0;
    socklen_t sl = sizeof v;
    if (getsockopt(fd, SOL_SOCKET, opt, &v, &sl) != 0)
        return 0;
    return v;
}

/* "ip:port" (IPv4) or "[ip]:port" (IPv6) of socket address sa, "" for another family. */
static void addr_text(const uint8_t *sa, char *out, size_t len)
{
    char host[INET6_ADDRSTRLEN] = "";
    const struct sockaddr *a = (const void *)sa;
    out[0] = 0;
    if (a->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const void *)sa;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
        snprintf(out, len, "%s:%u", host, ntohs(in->sin_port));
    } else if (a->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const void *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
        snprintf(out, len, "[%s]:%u", host, ntohs(in6->sin6_port));
    }
}

/* ---- the job's host addresses after a restart on other hosts ------------------------ */

/* A restart on other hosts gives each host of the job another address, while the program
 * still holds the old ones: an MPI library keeps a table of its peers' addresses, learnt at
 * start-up, and connects to a peer the first time it sends to it. So the process keeps
 * seeing the addresses it had. An address it connects, binds or sends to that was a host's
 * address is translated to that host's address now; one the kernel reports (accept,
 * getpeername, getsockname, recvfrom, recvmsg) that is a host's address now is reported as
 * the address the program knew. The pairs come from the root (CAIRN_CKPT_MOVED, through the
 * restorer into CONTROL.moved), one per host whose address changed: the address its name
 * resolved to, which its sub-coordinator listens on. A second restart elsewhere composes
 * with the first. The library's own sockets (its coordinator, the connections it makes
 * again) go through the raw_* calls and see the kernel's addresses. */
struct move {
    int family;
    uint8_t was[16]; /* the address the program knows */
    uint8_t now[16]; /* the host's address now */
    int taken;       /* a pair of this restart's composed with an earlier move */
};
static struct move *moves; /* in the image: a restart adds to it */
static int nmoves;
static size_t moves_bytes; /* its mapping's length */
static struct move *hop; /* while resuming: this restart's pairs, from the kernel's addresses at the checkpoint */
static int nhop;
static size_t hop_bytes;

static size_t ip_len(int family) { return family == AF_INET ? 4 : 16; }

/* The IP address inside socket address a of length len, or NULL (another family, too short). */
static uint8_t *ip_in(const struct sockaddr *a, socklen_t len)
{
    if (a && a->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in))
        return (uint8_t *)&((struct sockaddr_in *)a)->sin_addr;
    if (a && a->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6))
        return (uint8_t *)&((struct sockaddr_in6 *)a)->sin6_addr;
    return NULL;
}

/* The move in list (n long) whose address `was` (which=0) or `now` (which=1) is ip. */
static const struct move *find_move(const struct move *list, int n, int family, const uint8_t *ip, int which)
{
    for (int i = 0; i < n; i++)
        if (list[i].family == family && memcmp(which ? list[i].now : list[i].was, ip, ip_len(family)) == 0)
            return &list[i];
    return NULL;
}

/* a, or a copy of it in buf with its host address as it is now. */
static const struct sockaddr *moved_now(const struct move *list, int n, const struct sockaddr *a, socklen_t len,
                                        struct sockaddr_storage *buf)
{
    const uint8_t *ip = n ? ip_in(a, len) : NULL;
    const struct move *m = ip ? find_move(list, n, a->sa_family, ip, 0) : NULL;
    if (!m)
        return a;
    size_t l = len < sizeof *buf ? len : sizeof *buf;
    memcpy(buf, a, l);
    memcpy(ip_in((struct sockaddr *)buf, (socklen_t)l), m->now, ip_len(m->family));
    return (const struct sockaddr *)buf;
}

/* An address the kernel filled in (a buffer of cap bytes, *len now), as the program knew it. */
static void moved_was(struct sockaddr *a, socklen_t cap, const socklen_t *len)
{
    if (!nmoves || !a || !len)
        return;
    uint8_t *ip = ip_in(a, cap < *len ? cap : *len);
    const struct move *m = ip ? find_move(moves, nmoves, a->sa_family, ip, 1) : NULL;
    if (m)
        memcpy(ip, m->was, ip_len(m->family));
}

/* This restart's pairs (CONTROL.moved, "OLD=NEW;...") into hop, and moves composed with them:
 * what the program knew as the old address of a host is now its new address. */
static void take_moves(void)
{
    nhop = 0;
    const char *t = CONTROL.moved;
    if (!*t)
        return;
    int pairs = 1;
    for (const char *c = t; *c; c++)
        pairs += *c == ';';
    size_t bytes = (size_t)(nmoves + pairs) * sizeof(struct move);
    struct move *all = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    hop_bytes = (size_t)pairs * sizeof *hop;
    hop = mmap(NULL, hop_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (all == MAP_FAILED || hop == MAP_FAILED) {
        say("restart: no memory for the %d addresses of the job's hosts; the old addresses stay", pairs);
        if (all != MAP_FAILED)
            munmap(all, bytes);
        if (hop != MAP_FAILED)
            munmap(hop, hop_bytes);
        hop = NULL;
        return;
    }
    while (*t) {
        char pair[2 * INET6_ADDRSTRLEN + 2], *eq;
        size_t l = strcspn(t, ";");
        snprintf(pair, sizeof pair, "%.*s", (int)(l < sizeof pair - 1 ? l : sizeof pair - 1), t);
        t += l + (t[l] == ';');
        struct move m = {0};
        if (!(eq = strchr(pair, '=')))
            continue;
        *eq = 0;
        m.family = strchr(pair, ':') ? AF_INET6 : AF_INET;
        if (inet_pton(m.family, pair, m.was) != 1 || inet_pton(m.family, eq + 1, m.now) != 1) {
            say("restart: CAIRN_CKPT_MOVED has a pair that is not two addresses: %s=%s", pair, eq + 1);
            continue;
        }
        hop[nhop++] = m;
    }
    int n = 0;
    for (int i = 0; i < nmoves; i++) {
        all[n] = moves[i];
        const struct move *h = find_move(hop, nhop, all[n].family, all[n].now, 0);
        if (h) {
            memcpy(all[n].now, h->now, sizeof h->now);
            hop[h - hop].taken = 1;
        }
        n++;
    }
    for (int k = 0; k < nhop; k++)
        if (!hop[k].taken && !find_move(all, n, hop[k].family, hop[k].was, 0))
            all[n++] = hop[k];
    CONTROL.moved[0] = 0;
    int kept = 0;
    for (int i = 0; i < n; i++)
        if (memcmp(all[i].was, all[i].now, sizeof all[i].now) != 0)
            all[kept++] = all[i];
    if (moves)
        munmap(moves, moves_bytes);
    moves = all;
    moves_bytes = bytes;
    nmoves = kept;
    if (S.verbose)
        say("restart: %d host address(es) moved; the program sees %d translated", nhop, nmoves);
}

/* Once resumed: this restart's pairs are no longer needed. */
static void drop_hop(void)
{
    if (hop)
        munmap(hop, hop_bytes);
    hop = NULL;
    nhop = 0;
}

#define REAL(name, type)                                                                           \
    static type real;                                                                              \
    if (!real)                                                                                     \
        real = (type)dlsym(RTLD_NEXT, name)

typedef int (*sockaddr_fn)(int, const struct sockaddr *, socklen_t);
typedef int (*getname_fn)(int, struct sockaddr *, socklen_t *);
typedef int (*accept4_fn)(int, struct sockaddr *, socklen_t *, int);
typedef ssize_t (*sendto_fn)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
typedef ssize_t (*sendmsg_fn)(int, const struct msghdr *, int);
typedef ssize_t (*recvfrom_fn)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
typedef ssize_t (*recvmsg_fn)(int, struct msghdr *, int);

static int raw_connect(int fd, const struct sockaddr *a, socklen_t len)
{
    REAL("connect", sockaddr_fn);
    return real(fd, a, len);
}

static int raw_bind(int fd, const struct sockaddr *a, socklen_t len)
{
    REAL("bind", sockaddr_fn);
    return real(fd, a, len);
}

static int raw_getsockname(int fd, struct sockaddr *a, socklen_t *len)
{
    REAL("getsockname", getname_fn);
    return real(fd, a, len);
}

static int raw_getpeername(int fd, struct sockaddr *a, socklen_t *len)
{
    REAL("getpeername", getname_fn);
    return real(fd, a, len);
}

static int raw_accept4(int fd, struct sockaddr *a, socklen_t *len, int flags)
{
    REAL("accept4", accept4_fn);
    return real(fd, a, len, flags);
}

EXPORT int connect(int fd, const struct sockaddr *a, socklen_t len)
{
    struct sockaddr_storage b;
    return raw_connect(fd, moved_now(moves, nmoves, a, len, &b), len);
}

EXPORT int bind(int fd, const struct sockaddr *a, socklen_t len)
{
    struct sockaddr_storage b;
    return raw_bind(fd, moved_now(moves, nmoves, a, len, &b), len);
}

EXPORT ssize_t sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *a, socklen_t len)
{
    REAL("sendto", sendto_fn);
    struct sockaddr_storage b;
    return real(fd, buf, n, flags, moved_now(moves, nmoves, a, len, &b), len);
}

EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
    REAL("sendmsg", sendmsg_fn);
    struct sockaddr_storage b;
    if (!nmoves || !msg || !msg->msg_name)
        return real(fd, msg, flags);
    struct msghdr m = *msg;
    m.msg_name = (void *)moved_now(moves, nmoves, msg->msg_name, msg->msg_namelen, &b);
    return real(fd, &m, flags);
}

EXPORT int accept4(int fd, struct sockaddr *a, socklen_t *len, int flags)
{
    socklen_t cap = len ? *len : 0;
    int r = raw_accept4(fd, a, len, flags);
    if (r >= 0)
        moved_was(a, cap, len);
    return r;
}

EXPORT int accept(int fd, struct sockaddr *a, socklen_t *len) { return accept4(fd, a, len, 0); }

/* r, the result of a call that filled in address a (cap bytes of room) on success. */
static int as_known(int r, struct sockaddr *a, socklen_t cap, const socklen_t *len)
{
    if (r == 0)
        moved_was(a, cap, len);
    return r;
}

EXPORT int getsockname(int fd, struct sockaddr *a, socklen_t *len)
{
    socklen_t cap = len ? *len : 0;
    return as_known(raw_getsockname(fd, a, len), a, cap, len);
}

EXPORT int getpeername(int fd, struct sockaddr *a, socklen_t *len)
{
    socklen_t cap = len ? *len : 0;
    return as_known(raw_getpeername(fd, a, len), a, cap, len);
}

EXPORT ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *a, socklen_t *len)
{
    REAL("recvfrom", recvfrom_fn);
    socklen_t cap = len ? *len : 0;
    ssize_t r = real(fd, buf, n, flags, a, len);
    if (r >= 0)
        moved_was(a, cap, len);
    return r;
}

EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
    REAL("recvmsg", recvmsg_fn);
    socklen_t cap = msg ? msg->msg_namelen : 0;
    ssize_t r = real(fd, msg, flags);
    if (r >= 0 && msg && msg->msg_name)
        moved_was(msg->msg_name, cap, &msg->msg_namelen);
    return r;
}
#undef REAL

/* A socket's family and type, and its peer's address where it has one. */
static void describe_socket(int fd, char *out, size_t len)
{
    int dom = sock_opt(fd, SO_DOMAIN), type = sock_opt(fd, SO_TYPE);
    const char *d = dom == AF_UNIX ? "Unix" : dom == AF_INET ? "IPv4" : dom == AF_INET6 ? "IPv6" : dom == AF_NETLINK ? "netlink" : "other";
    const char *t = type == SOCK_STREAM ? "stream" : type == SOCK_DGRAM ? "datagram" : type == SOCK_SEQPACKET ? "seqpacket" : "raw";
    struct sockaddr_storage a;
    socklen_t al = sizeof a;
    char peer[INET6_ADDRSTRLEN + 16] = "", at[INET6_ADDRSTRLEN + 8];
    if (raw_getpeername(fd, (struct sockaddr *)&a, &al) == 0) {
        addr_text((const uint8_t *)&a, at, sizeof at);
        snprintf(peer, sizeof peer, at[0] ? ", peer %s" : ", connected", at);
    } else if (sock_opt(fd, SO_ACCEPTCONN)) {
        snprintf(peer, sizeof peer, ", listening");
    }
    snprintf(out, len, "%s %s%s", d, t, peer);
}

/* The next record of S.fds, cleared, for descriptor fd of `kind` (`target` is what
 * /proc/self/fd shows for it), with its status and close-on-exec flags; counted only once
 * the caller does S.nfds++. NULL when the table is full (the census reports the count). */
static struct fd_rec *new_record(int fd, int kind, const char *target)
{
    if (S.nfds >= MAX_FDS)
        return NULL;
    struct fd_rec *f = &S.fds[S.nfds];
    memset(f, 0, sizeof *f);
    f->fd = fd;
    f->kind = kind;
    f->flags = fcntl(fd, F_GETFL);
    f->cloexec = (fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0;
    snprintf(f->path, sizeof f->path, "%s", target);
    return f;
}

/* Under CAIRN_CKPT_EXTERNAL=close: record pipe or socket fd to come back with its other end
 * closed, and say so now, on the process's standard error. */
static void come_back_closed(int fd, int sock, const char *target)
{
    struct fd_rec *f = new_record(fd, sock ? FD_CLOSED_SOCK : FD_CLOSED_PIPE, target);
    if (!f)
        return;
    char what[128] = "pipe or FIFO";
    if (sock) {
        socklen_t sl = sizeof f->sock_type;
        getsockopt(fd, SOL_SOCKET, SO_TYPE, &f->sock_type, &sl);
        describe_socket(fd, what, sizeof what);
    }
    S.nfds++;
    say("checkpoint: fd %d (%s, %s) will come back closed after a restart (CAIRN_CKPT_EXTERNAL=close); "
        "data in flight in it is not saved", fd, what, target);
}

/* The number after `key` (and its colon) in fdinfo text, read in `base`. */
static int fdinfo_number(const char *text, const char *key, int base, uint64_t *out)
{
    const char *p = strstr(text, key);
    if (!p)
        return 0;
    p += strlen(key);
    while (*p == ':' || *p == ' ' || *p == '\t')
        p++;
    *out = strtoull(p, NULL, base);
    return 1;
}

/* ---- inotify watches ---------------------------------------------------------------- */

/* A TCP listener gets SO_REUSEADDR once it listens. A restart binds the listener to its port
 * again while the killed process's connections may still wait in TIME_WAIT on it, some of
 * them closed long before the checkpoint; the kernel lets a new listener share the port with
 * them only if they had the option, which an accepted connection takes from its listener.
 * Set after listen(), it lets nobody else bind the port (a listening socket keeps every
 * other socket off it), and a port search by bind() (Open MPI's TCP transport tries ports
 * upwards) sees what it saw without the library. The program reads the option back as 1. */
EXPORT int listen(int fd, int backlog)
{
    int r = (int)syscall(SYS_listen, fd, backlog);
    if (r == 0) {
        int saved = errno, on = 1, type = 0, family = 0;
        socklen_t l = sizeof type;
        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l) == 0 && type == SOCK_STREAM &&
            (l = sizeof family, getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &family, &l)) == 0 &&
            (family == AF_INET || family == AF_INET6))
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
        errno = saved;
    }
    return r;
}

/* The path of every watch the process added (inotify_add_watch, wrapped below), made
 * absolute when it was added: the kernel keeps only the watched inode, which a restart could
 * not find again. */
#define MAX_INOTIFY 256
static struct inotify_path {
    int fd, wd;
    uint64_t ino, dev;
    char path[CAIRN_IMG_PATH_MAX];
} inotify_paths[MAX_INOTIFY];
static int ninotify;
static atomic_flag inotify_lock = ATOMIC_FLAG_INIT;

static int inotify_entry(int fd, int wd)
{
    for (int i = 0; i < ninotify; i++)
        if (inotify_paths[i].fd == fd && inotify_paths[i].wd == wd)
            return i;
    return -1;
}

EXPORT int inotify_add_watch(int fd, const char *path, uint32_t mask)
{
    int wd = (int)syscall(SYS_inotify_add_watch, fd, path, mask);
    struct stat st;
    if (wd < 0 || stat(path, &st) != 0)
        return wd;
    int saved = errno;
    while (atomic_flag_test_and_set(&inotify_lock))
        ;
    int i = inotify_entry(fd, wd);
    if (i < 0 && ninotify < MAX_INOTIFY)
        i = ninotify++;
    if (i >= 0) {
        struct inotify_path *e = &inotify_paths[i];
        e->fd = fd;
        e->wd = wd;
        e->ino = (uint64_t)st.st_ino;
        e->dev = (uint64_t)st.st_dev;
        /* A path that does not fit is left empty: a checkpoint then names the watch. */
        char cwd[CAIRN_IMG_PATH_MAX];
        size_t lc = path[0] == '/' || !getcwd(cwd, sizeof cwd) ? 0 : strlen(cwd), lp = strlen(path);
        e->path[0] = 0;
        if (lc + 1 + lp < sizeof e->path) {
            if (lc) {
                memcpy(e->path, cwd, lc);
                e->path[lc++] = '/';
            }
            memcpy(e->path + lc, path, lp + 1);
        }
    }
    atomic_flag_clear(&inotify_lock);
    errno = saved;
    return wd;
}

EXPORT int inotify_rm_watch(int fd, int wd)
{
    int r = (int)syscall(SYS_inotify_rm_watch, fd, wd);
    if (r == 0) {
        while (atomic_flag_test_and_set(&inotify_lock))
            ;
        int i = inotify_entry(fd, wd);
        if (i >= 0)
            inotify_paths[i] = inotify_paths[--ninotify];
        atomic_flag_clear(&inotify_lock);
    }
    return r;
}

/* An inotify instance from its fdinfo: each watch (wd, inode, mask) matched with the path it
 * was added by, which must still name the watched inode. Events waiting to be read cannot be
 * kept (nothing reads them without taking them): the checkpoint says how many bytes. */
static int save_inotify(int fd, struct fd_rec *f, const char *info)
{
    f->kind = FD_INOTIFY;
    f->first_watch = S.nwatches;
    for (const char *p = strstr(info, "inotify wd:"); p; p = strstr(p + 11, "inotify wd:")) {
        unsigned wd, mask;
        unsigned long ino, sdev;
        if (sscanf(p, "inotify wd:%x ino:%lx sdev:%lx mask:%x", &wd, &ino, &sdev, &mask) != 4)
            return 0;
        int i = inotify_entry(fd, (int)wd);
        struct stat st;
        if (i < 0) {
            unrestorable("fd %d is an inotify instance whose watch %u was not added through inotify_add_watch",
                         fd, wd);
            return 1;
        }
        const struct inotify_path *e = &inotify_paths[i];
        if (!e->path[0]) {
            unrestorable("watch %u of inotify fd %d: its path is longer than %d bytes", wd, fd, CAIRN_IMG_PATH_MAX - 1);
            return 1;
        }
        if (stat(e->path, &st) != 0 || (uint64_t)st.st_ino != ino || major(st.st_dev) != (sdev >> 20) ||
            minor(st.st_dev) != (sdev & 0xfffff)) {
            unrestorable("watch %u of inotify fd %d: %s no longer names the file it watches", wd, fd, e->path);
            return 1;
        }
        if (S.nwatches >= MAX_WATCHES) {
            unrestorable("epoll and inotify instances watch more than %d descriptors or files", MAX_WATCHES);
            return 1;
        }
        S.watches[S.nwatches++] = (struct epoll_watch){(int32_t)wd, mask, (uint64_t)i};
        f->value++;
    }
    int queued = 0;
    if (ioctl(fd, FIONREAD, &queued) == 0 && queued > 0)
        say("checkpoint: %d bytes of events waiting at inotify fd %d are not kept: a restart from this "
            "checkpoint does not see them",
            queued, fd);
    S.nfds++;
    return 1;
}

/* Inotify instance f made again: its watches added in the order of their wds, each given its
 * wd again (the kernel counts wds up from 1; a gap is filled by a watch added and removed at
 * once on a file no watch has). */
static int inotify_again(const struct fd_rec *f)
{
    int fd = inotify_init1(f->flags & O_NONBLOCK ? IN_NONBLOCK : 0);
    if (fd < 0)
        return fd;
    static const char *spare[] = {"/", "/proc", "/dev", "/tmp", "/etc"};
    const char *filler = NULL;
    for (size_t k = 0; !filler && k < sizeof spare / sizeof spare[0]; k++) {
        struct stat st;
        int used = stat(spare[k], &st) != 0;
        for (uint64_t j = 0; !used && j < f->value; j++)
            used = inotify_paths[S.watches[f->first_watch + (int)j].data].ino == (uint64_t)st.st_ino;
        if (!used)
            filler = spare[k];
    }
    int next = 1;
    for (int32_t want = 1; want > 0;) {
        /* The smallest wd still to add. */
        const struct epoll_watch *w = NULL;
        for (uint64_t j = 0; j < f->value; j++) {
            const struct epoll_watch *c = &S.watches[f->first_watch + (int)j];
            if (c->fd >= want && (!w || c->fd < w->fd))
                w = c;
        }
        if (!w)
            break;
        while (filler && next < w->fd) {
            int gap = (int)syscall(SYS_inotify_add_watch, fd, filler, IN_ATTRIB);
            if (gap < 0)
                break;
            syscall(SYS_inotify_rm_watch, fd, gap);
            next = gap + 1;
        }
        const struct inotify_path *e = &inotify_paths[w->data];
        int wd = (int)syscall(SYS_inotify_add_watch, fd, e->path, w->events);
        if (wd != w->fd)
            say("inotify fd %d: the watch of %s comes back as %d, not %d%s%s", f->fd, e->path, wd, w->fd,
                wd < 0 ? ": " : "", wd < 0 ? strerror(errno) : "");
        next = wd + 1;
        want = w->fd + 1;
    }
    return fd;
}

/* Record an eventfd, timerfd, signalfd or epoll descriptor from its fdinfo, to make again
 * after a restart. Returns 0 for another kind (or fdinfo that does not read as expected). */
static int save_anon(int fd, const char *target)
{
    struct fd_rec *f = new_record(fd, FD_REOPEN, target);
    if (!f)
        return 1;
    char path[64], info[16384];
    snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
    if (read_file(path, info, sizeof info) < 0)
        return 0;
    uint64_t v = 0;
    if (strcmp(target, "anon_inode:[eventfd]") == 0 && fdinfo_number(info, "eventfd-count", 16, &f->value)) {
        f->kind = FD_EVENTFD;
        f->sock_type = fdinfo_number(info, "eventfd-semaphore", 10, &v) && v;
    } else if (strcmp(target, "anon_inode:[timerfd]") == 0 && fdinfo_number(info, "clockid", 10, &v)) {
        f->kind = FD_TIMERFD;
        f->sock_type = (int)v;
        const char *a = strstr(info, "it_value:"), *b = strstr(info, "it_interval:");
        long long t[4];
        if (!a || !b || sscanf(a, "it_value: (%lld, %lld)", &t[0], &t[1]) != 2 ||
            sscanf(b, "it_interval: (%lld, %lld)", &t[2], &t[3]) != 2)
            return 0;
        for (int k = 0; k < 4; k++)
            f->timer[k] = t[k];
        /* Expirations not read yet come back as one, due at once. */
        if (fdinfo_number(info, "ticks", 10, &v) && v > 0)
            f->timer[0] = 0, f->timer[1] = 1;
    } else if (strcmp(target, "anon_inode:[signalfd]") == 0 && fdinfo_number(info, "sigmask", 16, &f->value)) {
        f->kind = FD_SIGNALFD;
    } else if (strcmp(target, "anon_inode:inotify") == 0) {
        return save_inotify(fd, f, info);
    } else if (strcmp(target, "anon_inode:[eventpoll]") == 0) {
        f->kind = FD_EPOLL;
        f->first_watch = S.nwatches;
        for (const char *p = strstr(info, "tfd:"); p; p = strstr(p + 4, "tfd:")) {
            int tfd;
            unsigned events;
            unsigned long long data;
            if (sscanf(p, "tfd: %d events: %x data: %llx", &tfd, &events, &data) != 3)
                return 0;
            if (S.nwatches >= MAX_WATCHES) {
                unrestorable("epoll instances watch more than %d descriptors", MAX_WATCHES);
                return 1;
            }
            S.watches[S.nwatches++] = (struct epoll_watch){tfd, events, data};
            f->value++;
        }
    } else {
        return 0;
    }
    S.nfds++;
    return 1;
}

/* Sends one NETLINK_SOCK_DIAG request (`req`, whose header the caller fills but for its
 * length, type and flags) and reads the answer into buf. Returns its length, or -1. */
static ssize_t sock_diag(void *req, size_t len, char *buf, size_t cap)
{
    struct nlmsghdr *h = req;
    h->nlmsg_len = (uint32_t)len;
    h->nlmsg_type = SOCK_DIAG_BY_FAMILY;
    h->nlmsg_flags = NLM_F_REQUEST;
    int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (nl < 0)
        return -1;
    struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
    ssize_t n = -1;
    if (sendto(nl, req, len, 0, (struct sockaddr *)&sa, sizeof sa) == (ssize_t)len)
        n = recv(nl, buf, cap, 0);
    close(nl);
    return n;
}

/* The inode of the peer of Unix socket `ino` (sock_diag), or 0. */
static uint64_t unix_peer(uint64_t ino)
{
    struct {
        struct nlmsghdr nlh;
        struct unix_diag_req r;
    } req;
    memset(&req, 0, sizeof req);
    req.r.sdiag_family = AF_UNIX;
    req.r.udiag_states = ~0u;
    req.r.udiag_ino = (uint32_t)ino;
    req.r.udiag_show = UDIAG_SHOW_PEER;
    req.r.udiag_cookie[0] = req.r.udiag_cookie[1] = ~0u;
    static char buf[8192];
    uint64_t peer = 0;
    ssize_t n = sock_diag(&req, sizeof req, buf, sizeof buf);
    for (struct nlmsghdr *h = (void *)buf; n > 0 && NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
        if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY)
            break;
        struct unix_diag_msg *m = NLMSG_DATA(h);
        if (m->udiag_ino != (uint32_t)ino)
            continue;
        int len = (int)(h->nlmsg_len - NLMSG_LENGTH(sizeof *m));
        for (struct rtattr *a = (void *)(m + 1); RTA_OK(a, len); a = RTA_NEXT(a, len))
            if (a->rta_type == UNIX_DIAG_PEER)
                peer = *(uint32_t *)RTA_DATA(a);
        break;
    }
    return peer;
}

/* Note a connected Unix stream socket (in a tree, also a connected datagram or seqpacket one)
 * for census_sockets. Returns 0 for another socket. */
static int unix_stream_end(int fd, const char *target)
{
    int dom = sock_opt(fd, SO_DOMAIN), type = sock_opt(fd, SO_TYPE);
    int messages = in_tree() && (type == SOCK_DGRAM || type == SOCK_SEQPACKET);
    if (dom != AF_UNIX || (type != SOCK_STREAM && !messages) || strncmp(target, "socket:[", 8) != 0 ||
        nsock_ends >= MAX_FDS)
        return 0;
    uint64_t ino = strtoull(target + 8, NULL, 10), peer = unix_peer(ino);
    if (messages && !peer)
        return 0; /* not connected: refused as another socket */
    struct sock_end *e = &sock_ends[nsock_ends++];
    e->fd = fd;
    e->type = type;
    e->ino = ino;
    e->peer = peer;
    snprintf(e->target, sizeof e->target, "%s", target);
    return 1;
}

/* Record a listening Unix, IPv4 or IPv6 socket, to bind and listen again at restart.
 * Returns 0 for any other socket. */
static int save_listener(int fd, const char *target)
{
    int on = 0;
    if (!sock_opt(fd, SO_ACCEPTCONN))
        return 0;
    int dom = sock_opt(fd, SO_DOMAIN);
    if (dom != AF_UNIX && dom != AF_INET && dom != AF_INET6)
        return 0;
    struct fd_rec *f = new_record(fd, FD_LISTEN, target);
    if (!f)
        return 1;
    f->addrlen = sizeof f->addr;
    if (raw_getsockname(fd, (struct sockaddr *)&f->addr, &f->addrlen) != 0)
        return 0;
    if (dom == AF_UNIX && f->addrlen <= offsetof(struct sockaddr_un, sun_path))
        return 0; /* listening without a name: nothing could connect to it again */
    f->sock_type = sock_opt(fd, SO_TYPE);
    f->value = (uint64_t)dom;
    f->timer[0] = sock_opt(fd, SO_PROTOCOL);
    socklen_t sl = sizeof on;
    if (getsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, &sl) == 0)
        f->timer[1] = on;
    sl = sizeof on;
    if (dom == AF_INET6 && getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, &sl) == 0)
        f->timer[2] = on;
    S.nfds++;
    return 1;
}

/* The next record of xfds, cleared, for descriptor fd: kind, inode, peer, status and
 * close-on-exec flags; counted only once the caller does nxfds++. NULL when the table is full
 * (the census reports the count). */
static struct cairn_img_xfd *new_xfd(int fd, uint32_t kind, uint64_t ino, uint64_t peer)
{
    if (nxfds >= MAX_FDS)
        return NULL;
    struct cairn_img_xfd *x = &xfds[nxfds];
    memset(x, 0, sizeof *x);
    x->fd = fd;
    x->kind = kind;
    x->ino = ino;
    x->peer = peer;
    x->flags = (uint32_t)fcntl(fd, F_GETFL);
    x->cloexec = (fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0;
    return x;
}

/* Every descriptor of the processes of the tree with a smaller pid than this one (in the
 * tree's namespace), with the inode it leads to: listed once per census (those processes are
 * the ones in the same pid namespace; the tree's own /proc shows them by that pid, the host's
 * by their host pid), in memory mapped for the census alone, so that finding the holders of
 * one descriptor reads no directory again. */
struct peer_fd {
    pid_t pid; /* in the tree's namespace */
    int fd;
    uint64_t dev, ino;
};
static struct peer_fd *peer_fds;
static size_t npeer_fds, peer_fds_len; /* entries, and bytes mapped */

static void peer_fds_of(long host, pid_t pid)
{
    char dir[64], link[96];
    snprintf(dir, sizeof dir, "/proc/%ld/fd", host);
    DIR *d = opendir(dir);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        struct stat st;
        int fd = atoi(e->d_name);
        snprintf(link, sizeof link, "%s/%d", dir, fd);
        if (stat(link, &st) != 0)
            continue;
        if ((npeer_fds + 1) * sizeof *peer_fds > peer_fds_len) {
            void *m = mremap(peer_fds, peer_fds_len, 2 * peer_fds_len, MREMAP_MAYMOVE);
            if (m == MAP_FAILED) {
                unrestorable("the descriptors of the tree's processes cannot be listed: %s", strerror(errno));
                break;
            }
            peer_fds = m;
            peer_fds_len *= 2;
        }
        peer_fds[npeer_fds++] = (struct peer_fd){pid, fd, (uint64_t)st.st_dev, (uint64_t)st.st_ino};
    }
    closedir(d);
}

static void find_tree_peers(void)
{
    npeer_fds = 0;
    peer_fds_len = 1u << 16;
    void *m = mmap(NULL, peer_fds_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    peer_fds = m == MAP_FAILED ? NULL : m;
    char own[64], link[64], ns[64];
    ssize_t n = readlink("/proc/self/ns/pid", own, sizeof own - 1);
    DIR *d = peer_fds && n > 0 ? opendir("/proc") : NULL;
    if (!d)
        return;
    pid_t me = getpid();
    for (struct dirent *e; (e = readdir(d));) {
        long host = e->d_name[0] >= '1' && e->d_name[0] <= '9' ? atol(e->d_name) : 0;
        if (host <= 0)
            continue;
        snprintf(link, sizeof link, "/proc/%ld/ns/pid", host);
        ssize_t k = readlink(link, ns, sizeof ns - 1);
        if (k != n || memcmp(ns, own, (size_t)n) != 0)
            continue;
        long ids[8];
        snprintf(link, sizeof link, "/proc/%ld/status", host);
        int levels = nspids(link, ids);
        pid_t pid = levels > 0 ? (pid_t)ids[levels - 1] : 0;
        if (pid > 1 && pid < me)
            peer_fds_of(host, pid);
    }
    closedir(d);
}

/* The census is over: the list goes. */
static void forget_tree_peers(void)
{
    if (peer_fds)
        munmap(peer_fds, peer_fds_len);
    peer_fds = NULL;
    npeer_fds = 0;
}

/* The descriptor of another process of the tree that this process's fd shares its open file
 * description with (kcmp), as (its pid << 32) | (its fd + 1), choosing the process with the
 * smallest pid, so that every holder names the same one; 0 if none. Sharing comes from
 * inheritance (a shell and the commands it runs write one log at one offset) or from a
 * descriptor passed over a Unix socket. */
static uint64_t shared_in_tree(int fd, const struct stat *st)
{
    uint64_t found = 0;
    pid_t best = 0;
    for (size_t i = 0; i < npeer_fds; i++) {
        const struct peer_fd *p = &peer_fds[i];
        if ((best && p->pid >= best) || p->ino != (uint64_t)st->st_ino || p->dev != (uint64_t)st->st_dev)
            continue;
        if (syscall(SYS_kcmp, getpid(), p->pid, 0 /* KCMP_FILE */, fd, p->fd) == 0) {
            found = ((uint64_t)p->pid << 32) | (uint64_t)(p->fd + 1);
            best = p->pid;
        }
    }
    return found;
}

/* Whether another process of the tree with a smaller pid holds fd's open file description:
 * then that one records what is in flight at it. */
static int held_before(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 && shared_in_tree(fd, &st) != 0;
}

/* In a tree, a regular file is made again by the tree's restorer (image.h), once per open
 * file description, so that processes sharing one (a shell and its commands writing one log)
 * share one offset again. Returns 0 when it could not be recorded (the caller reopens it). */
static int tree_file(int fd, const struct stat *st, const char *target)
{
    size_t len = strlen(target) + 1;
    struct cairn_img_xfd *x = new_xfd(fd, CAIRN_XFD_FILE, (uint64_t)st->st_ino, shared_in_tree(fd, st));
    if (!x || len > MAX_INFLIGHT - inflight_used)
        return 0;
    nxfds++;
    x->offset = lseek(fd, 0, SEEK_CUR);
    x->size = st->st_size;
    x->data_off = inflight_used;
    x->data_len = len;
    memcpy(inflight + inflight_used, target, len);
    inflight_used += len;
    return 1;
}

/* In a tree, an eventfd is made again by the tree's restorer with its count, once per open
 * file description (`peer`: the parent's descriptor it shares), so that processes signalling
 * each other through it still do. Returns 0 when it could not be recorded. */
static int tree_event(int fd, uint64_t peer)
{
    char path[64], info[4096];
    uint64_t count = 0, sem = 0;
    snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
    if (read_file(path, info, sizeof info) < 0 || !fdinfo_number(info, "eventfd-count", 16, &count))
        return 0;
    fdinfo_number(info, "eventfd-semaphore", 10, &sem);
    struct cairn_img_xfd *x = new_xfd(fd, CAIRN_XFD_EVENT, 0, peer);
    if (!x)
        return 0;
    nxfds++;
    x->offset = (int64_t)count;
    x->size = sem != 0;
    return 1;
}

/* Children that ended and wait to be collected (in a tree: made again at restart). */
static int32_t zombies[CAIRN_IMG_ZOMBIES][2];
static uint32_t nzombies;

/* The status a zombie child `pid` (as /proc shows it) ended with, as waitpid reports it. */
static int zombie_status(long pid, int32_t *status)
{
    char path[64], st[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    if (read_file(path, st, sizeof st) <= 0)
        return 0;
    const char *p = strrchr(st, ')');
    /* exit_code is field 52; fields from 3 on follow the name's closing parenthesis. */
    for (int field = 2; p && field < 52; field++)
        p = strchr(p + 1, ' ');
    if (!p)
        return 0;
    *status = (int32_t)strtol(p + 1, NULL, 10);
    return 1;
}

/* Note a pipe end for census_pipes. */
static void note_pipe_end(int fd, const char *target)
{
    if (npipe_ends >= MAX_FDS)
        return;
    struct pipe_end *e = &pipe_ends[npipe_ends++];
    e->fd = fd;
    e->write = (fcntl(fd, F_GETFL) & O_ACCMODE) != O_RDONLY;
    e->ino = strtoull(target + 6, NULL, 10);
    snprintf(e->target, sizeof e->target, "%s", target);
}

/* Whether fd is a named FIFO that leads nowhere: open for reading only, nothing waiting in it
 * and no writer anywhere (Open MPI's launcher keeps such a FIFO for debuggers). tee() into a
 * scratch pipe looks without taking anything: 0 is end-of-file (no writer, nothing waiting).
 * Such a FIFO is opened again by its name at restart; one with a writer or bytes waiting may
 * lead outside the job and is treated as a pipe. */
static int lone_fifo(int fd, const char *target)
{
    int p[2];
    if ((fcntl(fd, F_GETFL) & O_ACCMODE) != O_RDONLY || pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0)
        return 0;
    ssize_t n = tee(fd, p[1], 1, SPLICE_F_NONBLOCK);
    close(p[0]);
    close(p[1]);
    if (n != 0)
        return 0;
    if (!new_record(fd, FD_FIFO, target))
        return 0;
    S.nfds++;
    return 1;
}

/* One descriptor: anything but the standard streams (which a restart takes from the
 * restarting command), the library's own, files, directories and stateless devices. */
/* In a tree's namespace, under a coordinator: pipes and sockets between the tree's processes
 * can come back. */
static int in_tree(void) { return S.coord[0] && S.nslevels >= 2; }

static int tree_listener(int fd, const char *target);
static int tcp_end(int fd, const char *target);
static int tree_udp(int fd, const char *target);
static int tree_tty(int fd, const struct stat *st, const char *target);

/* The regions of the checkpoint being taken, for census_fd. */
static const struct cairn_img_region *census_regs;
static int census_nregs;

/* In a tree: a descriptor of a file without a name that this process maps shared (UCX's
 * POSIX transport removes its segment's file as soon as it has made it and keeps the
 * descriptor, through which its peers open it in /proc/<pid>/fd) comes back as a descriptor of
 * the shared memory object the tree's init makes at restart for those mappings
 * (CAIRN_XFD_SHM). Returns 0 for another file. */
static int shm_file_fd(int fd, const struct stat *st, const char *target)
{
    uint64_t dev = ((uint64_t)major(st->st_dev) << 32) | minor(st->st_dev);
    int mapped = 0;
    for (int i = 0; i < census_nregs && !mapped; i++)
        mapped = (census_regs[i].flags & CAIRN_REG_OBJECT) && census_regs[i].dev == dev &&
                 census_regs[i].ino == (uint64_t)st->st_ino;
    if (!mapped)
        return 0;
    struct cairn_img_xfd *x = new_xfd(fd, CAIRN_XFD_SHM, st->st_ino, dev);
    if (!x) {
        unrestorable("fd %d (%s) cannot be recorded (more than %d shared descriptors)", fd, target, MAX_FDS);
        return 1;
    }
    x->size = st->st_size;
    x->offset = lseek(fd, 0, SEEK_CUR);
    nxfds++;
    return 1;
}

static void census_fd(int fd, void *dirfd)
{
    if (fd > S.max_fd)
        S.max_fd = fd;
    if (fd == *(int *)dirfd || fd == S.sock || fd == S.wake[0] || fd == S.wake[1])
        return;
    struct stat st;
    if (fstat(fd, &st) != 0)
        return;
    char link[64], target[CAIRN_IMG_PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    target[n > 0 ? n : 0] = 0;
    int named = target[0] == '/' && !strstr(target, " (deleted)");
    if (S_ISREG(st.st_mode) && named && in_tree() && tree_file(fd, &st, target))
        return;
    if (((S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) && named) ||
        (S_ISCHR(st.st_mode) && reopenable_device(target))) {
        struct fd_rec *f = new_record(fd, FD_REOPEN, target);
        if (f) {
            f->offset = lseek(fd, 0, SEEK_CUR);
            f->size = st.st_size;
            S.nfds++;
        }
        return;
    }
    /* A restart takes the standard streams from the command that restarts, unless they are
     * pipes or Unix stream sockets, which may lead to other processes of the tree (a
     * pipeline): the tree's restorer decides. */
    if (fd <= 2) {
        if (in_tree() && S_ISFIFO(st.st_mode) && strncmp(target, "pipe:[", 6) == 0)
            note_pipe_end(fd, target);
        else if (in_tree() && S_ISCHR(st.st_mode))
            tree_tty(fd, &st, target);
        else if (in_tree() && S_ISSOCK(st.st_mode))
            unix_stream_end(fd, target);
        return;
    }
    if (strncmp(target, "anon_inode:", 11) == 0) {
        /* In a tree an eventfd, how processes signal each other, is made again by the tree's
         * restorer, once per open file description. Each process makes its other event
         * descriptors again for itself: an epoll, timer or signal descriptor it shares with
         * another process comes back as a copy of its own, which is said. */
        uint64_t twin = in_tree() ? shared_in_tree(fd, &st) : 0;
        int with = (int)(twin & 0xffffffffu) - 1, other = (int)(twin >> 32);
        if (in_tree() && strcmp(target, "anon_inode:[eventfd]") == 0) {
            if (!tree_event(fd, twin))
                unrestorable("fd %d (%s) cannot be recorded (too many shared descriptors?)", fd, target);
        } else if (!save_anon(fd, target))
            unrestorable("fd %d is %s", fd, target);
        else if (twin)
            say("checkpoint: fd %d (%s), shared with fd %d of process %d, comes back as a copy of its own after a "
                "restart",
                fd, target, with, other);
    } else if (S_ISREG(st.st_mode) && st.st_size == 0) {
        /* An empty file whose name is gone (Open MPI's shared-memory probe leaves one open in
         * every rank): there is nothing in it to save, so a new empty file without a name
         * stands for it. One shared with another process comes back as a file of each. */
        uint64_t twin = in_tree() ? shared_in_tree(fd, &st) : 0;
        struct fd_rec *f = new_record(fd, FD_UNNAMED, target);
        if (!f)
            unrestorable("fd %d (%s) cannot be recorded (more than %d files are open)", fd, target, MAX_FDS);
        else
            S.nfds++;
        if (f && twin)
            say("checkpoint: fd %d (%s, empty), shared with fd %d of process %d, comes back as a file of its own "
                "after a restart",
                fd, target, (int)(twin & 0xffffffffu) - 1, (int)(twin >> 32));
    } else if (S_ISREG(st.st_mode) && in_tree() && shm_file_fd(fd, &st, target)) {
        /* the tree's shared memory object for its mapping */
    } else if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) {
        unrestorable("fd %d is a file that no longer has a name (%s, %lld bytes; only an empty "
                     "one, or one the process maps shared, comes back)",
                     fd, target, (long long)st.st_size);
    } else if (S_ISCHR(st.st_mode) && in_tree() && tree_tty(fd, &st, target)) {
        /* made again once for the tree */
    } else if (S_ISCHR(st.st_mode)) {
        unrestorable("fd %d is the device %s", fd, target);
    } else if (S_ISFIFO(st.st_mode) && strncmp(target, "pipe:[", 6) == 0 && npipe_ends < MAX_FDS) {
        note_pipe_end(fd, target);
    } else if (S_ISFIFO(st.st_mode) && named && lone_fifo(fd, target)) {
        /* opened again by its name */
    } else if (S_ISSOCK(st.st_mode) && in_tree() && tree_listener(fd, target)) {
        /* made again once for the tree */
    } else if (S_ISSOCK(st.st_mode) && in_tree() && tcp_end(fd, target)) {
        /* paired up in census_tcp */
    } else if (S_ISSOCK(st.st_mode) && in_tree() && tree_udp(fd, target)) {
        /* made again once for the tree */
    } else if (S_ISSOCK(st.st_mode) && fd > 2 && save_listener(fd, target)) {
        /* bound again at restart */
    } else if (S_ISSOCK(st.st_mode) && unix_stream_end(fd, target)) {
        /* paired up in census_sockets */
    } else if ((S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)) && S.close_external) {
        come_back_closed(fd, S_ISSOCK(st.st_mode), target);
    } else if (S_ISFIFO(st.st_mode)) {
        unrestorable("fd %d is a pipe or FIFO (%s)", fd, target);
    } else if (S_ISSOCK(st.st_mode)) {
        char what[128];
        describe_socket(fd, what, sizeof what);
        unrestorable("fd %d is a socket (%s; %s)", fd, what, target);
    } else {
        unrestorable("fd %d is not a file (%s)", fd, target);
    }
}

/* One thread's children: under a coordinator, in the tree's pid namespace, they are
 * processes of the job (checked by the sub-coordinator); otherwise none may exist. One that
 * ended and waits to be reaped cannot come back yet. */
static void census_children(int tid, void *arg)
{
    (void)arg;
    char path[64], list[1024];
    snprintf(path, sizeof path, "/proc/self/task/%d/children", tid);
    if (read_file(path, list, sizeof list) < 0)
        return;
    for (char *p = list; *p;) {
        char *end;
        long child = strtol(p, &end, 10);
        if (end == p)
            break;
        p = end;
        char stat_path[64], st[512], comm[64] = "?", state = '?';
        snprintf(stat_path, sizeof stat_path, "/proc/%ld/stat", child);
        if (read_file(stat_path, st, sizeof st) > 0) {
            char *open = strchr(st, '('), *close = strrchr(st, ')');
            if (open && close && close > open) {
                snprintf(comm, sizeof comm, "%.*s", (int)(close - open - 1), open + 1);
                state = close[1] == ' ' ? close[2] : '?';
            }
        }
        if (state == 'Z' && in_tree() && nzombies < CAIRN_IMG_ZOMBIES && zombie_status(child, &zombies[nzombies][1])) {
            long ids[8];
            snprintf(stat_path, sizeof stat_path, "/proc/%ld/status", child);
            int levels = nspids(stat_path, ids);
            if (levels > 0) {
                zombies[nzombies][0] = (int32_t)ids[levels - 1];
                nzombies++;
                continue;
            }
        }
        if (state == 'Z')
            unrestorable("child process %ld (%s) has ended and its exit status was not collected yet", child, comm);
        else if (S.nslevels < 2 || !S.coord[0])
            unrestorable("child process %ld (%s) is not under checkpoint control (the job runs without a pid "
                         "namespace, so its pid could not come back)", child, comm);
        /* else: a process of the tree; its sub-coordinator checks that it joined the job */
    }
}

/* Copy what is in the pipe whose read end is `rfd` into inflight[] without taking it: tee()
 * duplicates the pipe's contents into a scratch pipe of the same size, which is read.
 * Returns the bytes, or -1 (the census says why). */
static ssize_t copy_pipe(int rfd, const char *target)
{
    int scratch[2];
    if (pipe2(scratch, O_CLOEXEC | O_NONBLOCK) != 0) {
        unrestorable("cannot copy the bytes in %s: %s", target, strerror(errno));
        return -1;
    }
    int size = fcntl(rfd, F_GETPIPE_SZ);
    if (size > 0)
        fcntl(scratch[1], F_SETPIPE_SZ, size);
    ssize_t in = tee(rfd, scratch[1], (size_t)INT32_MAX, SPLICE_F_NONBLOCK);
    if (in < 0 && errno == EAGAIN)
        in = 0; /* an empty pipe */
    size_t start = inflight_used;
    ssize_t r = 0;
    while (in > 0 && inflight_used < MAX_INFLIGHT &&
           (r = read(scratch[0], inflight + inflight_used, MAX_INFLIGHT - inflight_used)) > 0)
        inflight_used += (size_t)r;
    close(scratch[0]);
    close(scratch[1]);
    if (in < 0 || (size_t)in != inflight_used - start) {
        unrestorable("cannot copy the bytes in %s: %s", target,
                     in < 0 ? strerror(errno) : "more than 4 MiB in flight inside the process");
        return -1;
    }
    return in;
}

/* Pipes: one whose both ends the process holds comes back with the bytes in flight in it;
 * one with an end elsewhere leaves the job (refused, or closed under CAIRN_CKPT_EXTERNAL). */
/* A pipe end or Unix stream socket as an xfd record (image.h), its bytes in flight copied
 * by `copy` (into inflight[], without taking them) when `copy` is given. */
/* The standard stream (0 to 2) of this process or of the tree's init (which has the launch's
 * own) whose open file description fd > 2 shares, or -1: a shell keeps a copy of its output at
 * a higher number while a command's output is redirected. */
static int stdio_twin(int fd)
{
    for (int k = 0; k < 3 && fd > 2; k++)
        if (syscall(SYS_kcmp, getpid(), getpid(), 0 /* KCMP_FILE */, fd, k) == 0 ||
            (in_tree() && syscall(SYS_kcmp, getpid(), 1, 0 /* KCMP_FILE */, fd, k) == 0))
            return k;
    return -1;
}

static struct cairn_img_xfd *add_xfd(int fd, uint32_t kind, uint64_t ino, uint64_t peer, const char *target,
                                     ssize_t (*copy)(int, const char *))
{
    struct cairn_img_xfd *x = new_xfd(fd, kind, ino, peer);
    if (!x)
        return NULL;
    int size = kind == CAIRN_XFD_STREAM ? 0 : fcntl(fd, F_GETPIPE_SZ);
    x->pipe_size = size > 0 ? (uint32_t)size : 0;
    x->how = (S.close_external ? CAIRN_XFD_CLOSE_UNMATCHED : 0) | (fd <= 2 ? CAIRN_XFD_STDIO : 0);
    /* A copy of a standard stream: with its other end outside the tree, it comes back as a
     * copy of the restart's stream, as the stream itself does. */
    int twin = stdio_twin(fd);
    if (twin >= 0) {
        x->how |= CAIRN_XFD_STDIO;
        x->offset = twin;
    }
    if (copy) {
        size_t at = inflight_used;
        ssize_t got = copy(fd, target);
        if (got < 0)
            return NULL; /* the census says why */
        x->data_off = at;
        x->data_len = (uint64_t)got;
    }
    nxfds++;
    return x;
}

static ssize_t copy_pipe(int rfd, const char *target);
static ssize_t peek_socket(int fd, const char *target);
static ssize_t peek_messages(int fd, const char *target);

/* In a tree: every pipe end, recorded to be made again once for the tree; the bytes in a
 * pipe are copied by the first of its read ends here (every process holding one saves the
 * same bytes, and the restorer uses one copy). */
static void tree_pipes(void)
{
    for (int i = 0; i < npipe_ends; i++) {
        struct pipe_end *e = &pipe_ends[i];
        int first_reader = !e->write;
        for (int j = 0; j < i && first_reader; j++)
            first_reader = !(pipe_ends[j].ino == e->ino && !pipe_ends[j].write);
        struct cairn_img_xfd *x = add_xfd(e->fd, e->write ? CAIRN_XFD_PIPE_WRITE : CAIRN_XFD_PIPE_READ, e->ino, 0,
                                          e->target, first_reader ? copy_pipe : NULL);
        /* A pipe whose other end nobody holds any more (a child that wrote a shell's command
         * substitution and ended) is a pipe with that end closed, wherever its process ran:
         * it comes back so, with the bytes that wait in it. poll() says it: POLLHUP at a
         * read end without writers, POLLERR at a write end without readers. */
        struct pollfd pf = {e->fd, e->write ? POLLOUT : POLLIN, 0};
        if (x && poll(&pf, 1, 0) >= 0 && (pf.revents & (e->write ? POLLERR : POLLHUP)))
            x->how |= CAIRN_XFD_ENDED;
    }
}

/* In a tree: every connected Unix stream socket, with the bytes waiting at it. */
static void tree_sockets(void)
{
    for (int i = 0; i < nsock_ends; i++) {
        struct sock_end *e = &sock_ends[i];
        int first = 1;
        for (int j = 0; j < i && first; j++)
            first = sock_ends[j].ino != e->ino;
        /* Messages are peeked with the socket's one peek offset: of the processes holding
         * it, only the one with the smallest pid reads them (and keeps them for all). */
        if (first && e->type != SOCK_STREAM)
            first = !held_before(e->fd);
        if (!e->peer) {
            char what[128];
            describe_socket(e->fd, what, sizeof what);
            unrestorable("fd %d is a socket (%s; %s) whose peer could not be found", e->fd, what, e->target);
            continue;
        }
        struct cairn_img_xfd *x = add_xfd(e->fd, CAIRN_XFD_STREAM, e->ino, e->peer, e->target,
                                          !first ? NULL : e->type == SOCK_STREAM ? peek_socket : peek_messages);
        if (x)
            x->size = e->type;
    }
}

static void census_pipes(void)
{
    if (in_tree()) {
        tree_pipes();
        return;
    }
    inflight_used = 0;
    for (int i = 0; i < npipe_ends; i++) {
        struct pipe_end *e = &pipe_ends[i];
        int rfd = -1, wfd = -1, first = 1;
        for (int j = 0; j < npipe_ends; j++) {
            if (pipe_ends[j].ino != e->ino)
                continue;
            if (j < i)
                first = 0;
            if (pipe_ends[j].write && wfd < 0)
                wfd = pipe_ends[j].fd;
            if (!pipe_ends[j].write && rfd < 0)
                rfd = pipe_ends[j].fd;
        }
        if (rfd < 0 || wfd < 0) {
            if (S.close_external)
                come_back_closed(e->fd, 0, e->target);
            else
                unrestorable("fd %d is a pipe or FIFO (%s) whose other end is outside the process", e->fd,
                             e->target);
            continue;
        }
        struct fd_rec *f = new_record(e->fd, FD_PIPE, e->target);
        if (!f)
            return;
        f->value = e->ino;
        f->sock_type = e->write;
        if (first) {
            /* The pipe's first record carries its bytes in flight. */
            size_t at = inflight_used;
            ssize_t got = copy_pipe(rfd, e->target);
            if (got < 0)
                return;
            f->timer[0] = got;
            f->timer[1] = (int64_t)at;
        }
        S.nfds++;
    }
}

/* The bytes waiting to be read at Unix stream socket fd, copied into inflight[] without
 * taking them (MSG_PEEK). Returns their count, or -1 (the census says why). */
static int passed_control(struct msghdr *mh, const char *target);

static ssize_t peek_socket(int fd, const char *target)
{
    int queued = 0;
    if (ioctl(fd, FIONREAD, &queued) != 0 || queued < 0)
        queued = 0;
    if (queued == 0)
        return 0;
    if (!inflight_room((size_t)queued))
        return -1;
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(64 * sizeof(int))];
    } ctl;
    struct iovec io = {inflight + inflight_used, (size_t)queued};
    struct msghdr mh = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = &ctl, .msg_controllen = sizeof ctl};
    ssize_t got = recvmsg(fd, &mh, MSG_PEEK | MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (passed_control(&mh, target))
        return -1;
    if (got < 0)
        got = 0;
    inflight_used += (size_t)got;
    return got;
}

/* Whether a peeked message carried descriptors or credentials, which a restart could not
 * send again: then the checkpoint is refused, naming the socket. */
static int passed_control(struct msghdr *mh, const char *target)
{
    int passed = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            int *fds = (int *)CMSG_DATA(c);
            for (size_t k = 0; k < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); k++)
                close(fds[k]); /* peeking installed copies */
        }
        passed = 1;
    }
    if (passed || (mh->msg_flags & MSG_CTRUNC)) {
        unrestorable("%s has descriptors or credentials in flight", target);
        return 1;
    }
    return 0;
}

static int keep_inflight(const void *p, size_t n);

/* The messages waiting at socket fd, peeked one after the other (SO_PEEK_OFF) so that the
 * process keeps them: at a Unix datagram or seqpacket socket each as its length (uint32_t)
 * and its bytes; at a UDP socket (`udp`) each as a struct cairn_img_datagram, with its
 * sender, and its bytes. Returns their bytes in inflight[], or -1 (the census says why). */
static ssize_t peek_each(int fd, const char *target, int udp)
{
    static uint8_t msg[256 << 10]; /* above the default socket buffer: a larger one is refused */
    size_t start = inflight_used;
    int off = 0, none = -1;
    if (setsockopt(fd, SOL_SOCKET, SO_PEEK_OFF, &off, sizeof off) != 0) {
        unrestorable("%s: its messages in flight cannot be read without taking them: %s", target, strerror(errno));
        return -1;
    }
    ssize_t total = 0;
    for (;;) {
        union {
            struct cmsghdr h;
            char b[CMSG_SPACE(64 * sizeof(int))];
        } ctl;
        struct sockaddr_storage from;
        struct iovec io = {msg, sizeof msg};
        struct msghdr mh = {.msg_name = &from,
                            .msg_namelen = sizeof from,
                            .msg_iov = &io,
                            .msg_iovlen = 1,
                            .msg_control = &ctl,
                            .msg_controllen = sizeof ctl};
        ssize_t got = recvmsg(fd, &mh, MSG_PEEK | MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (got < 0)
            break;
        if (!udp && passed_control(&mh, target)) {
            total = -1;
            break;
        }
        struct cairn_img_datagram d;
        memset(&d, 0, sizeof d);
        if (got == 0 || (mh.msg_flags & MSG_TRUNC)) {
            unrestorable("%s has an empty or oversized message in flight", target);
            total = -1;
            break;
        }
        if (udp && mh.msg_namelen > sizeof d.from) {
            unrestorable("%s has a datagram in flight whose sender's address is longer than %zu bytes (a Unix "
                         "socket bound to a path?)",
                         target, sizeof d.from);
            total = -1;
            break;
        }
        d.len = (uint32_t)got;
        d.from_len = mh.msg_namelen;
        memcpy(d.from, &from, udp ? mh.msg_namelen : 0);
        size_t head = udp ? sizeof d : sizeof d.len;
        if (keep_inflight(&d, head) != 0 || keep_inflight(msg, (size_t)got) != 0) {
            total = -1;
            break;
        }
        total += (ssize_t)head + got;
    }
    setsockopt(fd, SOL_SOCKET, SO_PEEK_OFF, &none, sizeof none);
    if (total < 0)
        inflight_used = start;
    return total;
}

static ssize_t peek_messages(int fd, const char *target) { return peek_each(fd, target, 0); }

/* Unix stream sockets: a pair whose both ends the process holds (an event loop's self-pipe)
 * comes back with the bytes waiting at each end; one whose peer is elsewhere leaves the job
 * (refused, or closed under CAIRN_CKPT_EXTERNAL). */
static void census_sockets(void)
{
    if (in_tree()) {
        tree_sockets();
        return;
    }
    for (int i = 0; i < nsock_ends; i++) {
        struct sock_end *e = &sock_ends[i];
        int inside = 0, first = 1;
        for (int j = 0; j < nsock_ends; j++) {
            if (e->peer && sock_ends[j].ino == e->peer)
                inside = 1;
            if (j < i && sock_ends[j].ino == e->ino)
                first = 0;
        }
        if (!inside) {
            if (S.close_external) {
                come_back_closed(e->fd, 1, e->target);
            } else {
                char what[128];
                describe_socket(e->fd, what, sizeof what);
                unrestorable("fd %d is a socket (%s; %s) whose peer is outside the process", e->fd, what,
                             e->target);
            }
            continue;
        }
        struct fd_rec *f = new_record(e->fd, FD_SOCKPAIR, e->target);
        if (!f)
            return;
        f->sock_type = SOCK_STREAM;
        f->value = e->ino;
        f->timer[2] = (int64_t)e->peer;
        if (first) {
            size_t at = inflight_used;
            ssize_t got = peek_socket(e->fd, e->target);
            if (got < 0)
                return;
            f->timer[0] = got;
            f->timer[1] = (int64_t)at;
        }
        S.nfds++;
    }
}

/* ---- sockets of a tree: listeners and TCP connections ------------------------------------ */

/* What a restart needs to make socket fd again (image.h), or -1 if it has no address. */
static int sock_record(int fd, struct cairn_img_sock *r)
{
    memset(r, 0, sizeof *r);
    r->family = (uint32_t)sock_opt(fd, SO_DOMAIN);
    r->type = (uint32_t)sock_opt(fd, SO_TYPE);
    r->protocol = (uint32_t)sock_opt(fd, SO_PROTOCOL);
    socklen_t al = sizeof r->local;
    if (raw_getsockname(fd, (struct sockaddr *)r->local, &al) != 0 || al > sizeof r->local)
        return -1;
    r->local_len = al;
    al = sizeof r->peer;
    if (raw_getpeername(fd, (struct sockaddr *)r->peer, &al) == 0 && al <= sizeof r->peer)
        r->peer_len = al;
    static const struct {
        int level, name;
        uint32_t bit;
    } opts[] = {
        {SOL_SOCKET, SO_REUSEADDR, CAIRN_SOCK_REUSEADDR},
        {SOL_SOCKET, SO_REUSEPORT, CAIRN_SOCK_REUSEPORT},
        {SOL_SOCKET, SO_KEEPALIVE, CAIRN_SOCK_KEEPALIVE},
        {IPPROTO_TCP, TCP_NODELAY, CAIRN_SOCK_NODELAY},
        {IPPROTO_IPV6, IPV6_V6ONLY, CAIRN_SOCK_V6ONLY},
    };
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        if (opts[i].level == IPPROTO_TCP && r->family == AF_UNIX)
            continue;
        if (opts[i].level == IPPROTO_IPV6 && r->family != AF_INET6)
            continue;
        int on = 0;
        socklen_t sl = sizeof on;
        if (getsockopt(fd, opts[i].level, opts[i].name, &on, &sl) == 0 && on)
            r->opts |= opts[i].bit;
    }
    return 0;
}

/* Appends n bytes to inflight[]; 0, or -1 when they do not fit (the census says why). */
static int keep_inflight(const void *p, size_t n)
{
    if (!inflight_room(n))
        return -1;
    memcpy(inflight + inflight_used, p, n);
    inflight_used += n;
    return 0;
}

/* In a tree: a listening socket (Unix with a name, IPv4 or IPv6) is made once for the tree,
 * bound and listening, shared by the processes that shared it. Returns 0 for another
 * socket. */
static int tree_listener(int fd, const char *target)
{
    struct cairn_img_sock r;
    if (!sock_opt(fd, SO_ACCEPTCONN) || strncmp(target, "socket:[", 8) != 0 || sock_record(fd, &r) != 0)
        return 0;
    if (r.family != AF_UNIX && r.family != AF_INET && r.family != AF_INET6)
        return 0;
    if (r.family == AF_UNIX && r.local_len <= offsetof(struct sockaddr_un, sun_path))
        return 0; /* listening without a name: nothing could connect to it again */
    struct cairn_img_xfd *x = new_xfd(fd, CAIRN_XFD_LISTEN, strtoull(target + 8, NULL, 10), 0);
    if (!x)
        return 1;
    x->data_off = inflight_used;
    if (keep_inflight(&r, sizeof r) != 0)
        return 1;
    x->data_len = sizeof r;
    nxfds++;
    return 1;
}

static uint64_t diag_inode(uint32_t family, int proto, const uint8_t *src, const uint8_t *dst, int listeners);

/* The inode of the socket of this machine that receives what UDP socket r sends (the one a
 * datagram from r's local address to its peer address reaches), or 0 if none does. */
static uint64_t udp_peer(const struct cairn_img_sock *r) { return diag_inode(r->family, IPPROTO_UDP, r->local, r->peer, 1); }


/* In a tree: a UDP socket (IPv4 or IPv6) is made once for the tree, bound to its address and
 * connected to its peer if it was, with the datagrams waiting at it and their senders. One
 * connected to an address no socket of this machine receives at leads outside the job: 0 is
 * returned, and it is refused (or comes back closed) as another socket, naming that address;
 * the root checks that a receiver found is in the tree. An unconnected Unix datagram socket
 * (UCX's shared-memory transports wake their peers through one, bound to an abstract name
 * the kernel chose) comes back the same way, with its name; one bound to a path in the file
 * system is refused, naming it. A connected one is a pair (unix_stream_end). Returns 0 for
 * another socket. */
static int tree_udp(int fd, const char *target)
{
    struct cairn_img_sock r;
    int dom = sock_opt(fd, SO_DOMAIN);
    if ((dom != AF_INET && dom != AF_INET6 && dom != AF_UNIX) || sock_opt(fd, SO_TYPE) != SOCK_DGRAM ||
        strncmp(target, "socket:[", 8) != 0 || sock_record(fd, &r) != 0)
        return 0;
    if (dom == AF_UNIX) {
        if (r.peer_len > offsetof(struct sockaddr_un, sun_path) || unix_peer(strtoull(target + 8, NULL, 10)))
            return 0;
        const char *name = (const char *)r.local + offsetof(struct sockaddr_un, sun_path);
        if (r.local_len > offsetof(struct sockaddr_un, sun_path) && name[0] != 0) {
            unrestorable("fd %d is a Unix datagram socket bound to the path %.*s (%s); only unnamed ones and ones "
                         "with an abstract name come back",
                         fd, (int)strnlen(name, r.local_len - offsetof(struct sockaddr_un, sun_path)), name, target);
            return 1;
        }
        r.peer_len = 0;
    }
    uint64_t peer = r.peer_len ? udp_peer(&r) : 0;
    if (r.peer_len && !peer)
        return 0;
    struct cairn_img_xfd *x = new_xfd(fd, CAIRN_XFD_UDP, strtoull(target + 8, NULL, 10), peer);
    if (!x)
        return 1;
    x->size = r.peer_len != 0;
    x->how = S.close_external ? CAIRN_XFD_CLOSE_UNMATCHED : 0;
    x->data_off = inflight_used;
    size_t at = inflight_used;
    if (keep_inflight(&r, sizeof r) != 0)
        return 1;
    ssize_t got = held_before(fd) ? 0 : peek_each(fd, target, 1);
    if (got < 0)
        return 1;
    uint64_t len = (uint64_t)got;
    memcpy(inflight + at + offsetof(struct cairn_img_sock, recv_len), &len, sizeof len);
    x->data_len = inflight_used - at;
    nxfds++;
    return 1;
}

/* In a tree: note a connected TCP socket for census_tcp. Returns 0 for another socket. */
static int tcp_end(int fd, const char *target)
{
    int dom = sock_opt(fd, SO_DOMAIN), type = sock_opt(fd, SO_TYPE);
    struct sockaddr_storage a;
    socklen_t al = sizeof a;
    if ((dom != AF_INET && dom != AF_INET6) || type != SOCK_STREAM || strncmp(target, "socket:[", 8) != 0 ||
        raw_getpeername(fd, (struct sockaddr *)&a, &al) != 0 || ntcp_ends >= MAX_FDS)
        return 0;
    struct sock_end *e = &tcp_ends[ntcp_ends++];
    e->fd = fd;
    e->ino = strtoull(target + 8, NULL, 10);
    snprintf(e->target, sizeof e->target, "%s", target);
    return 1;
}

/* The inode of the socket of this machine (in this network namespace) that the kernel's
 * lookup for protocol `proto` finds for a packet from address `src` to address `dst` (struct
 * sockaddr_in or sockaddr_in6 of `family`), or 0 if none. The lookup falls back to a socket
 * listening at `dst`'s port (on any address): with `listeners` 0 such a socket is not one
 * (a connection whose other end is on another host finds a listener here that happens to
 * have its peer's port). */
static uint64_t diag_inode(uint32_t family, int proto, const uint8_t *src, const uint8_t *dst, int listeners)
{
    struct {
        struct nlmsghdr nlh;
        struct inet_diag_req_v2 q;
    } req;
    memset(&req, 0, sizeof req);
    req.q.sdiag_family = (uint8_t)family;
    req.q.sdiag_protocol = (uint8_t)proto;
    req.q.idiag_states = ~0u;
    req.q.id.idiag_cookie[0] = req.q.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
    if (family == AF_INET) {
        const struct sockaddr_in *s = (const void *)src, *d = (const void *)dst;
        req.q.id.idiag_sport = s->sin_port;
        req.q.id.idiag_dport = d->sin_port;
        memcpy(req.q.id.idiag_src, &s->sin_addr, 4);
        memcpy(req.q.id.idiag_dst, &d->sin_addr, 4);
    } else {
        const struct sockaddr_in6 *s = (const void *)src, *d = (const void *)dst;
        req.q.id.idiag_sport = s->sin6_port;
        req.q.id.idiag_dport = d->sin6_port;
        memcpy(req.q.id.idiag_src, &s->sin6_addr, 16);
        memcpy(req.q.id.idiag_dst, &d->sin6_addr, 16);
    }
    static char buf[8192];
    ssize_t n = sock_diag(&req, sizeof req, buf, sizeof buf);
    struct nlmsghdr *h = (void *)buf;
    if (n <= 0 || !NLMSG_OK(h, (size_t)n) || h->nlmsg_type != SOCK_DIAG_BY_FAMILY)
        return 0;
    const struct inet_diag_msg *m = NLMSG_DATA(h);
    return listeners || m->idiag_state != TCP_LISTEN ? m->idiag_inode : 0;
}

/* The inode of the other end of TCP connection r (the socket whose local address is r's peer
 * and whose peer is r's local address, in this network namespace), or 0 if no socket of this
 * machine is that end. */
static uint64_t tcp_peer(const struct cairn_img_sock *r) { return diag_inode(r->family, IPPROTO_TCP, r->peer, r->local, 0); }

/* Whether TCP connection r leads to the job's coordinator (CAIRN_COORD_ADDR, numeric): a
 * connection of Cairn's own, not the program's. */
static int to_coordinator(const struct cairn_img_sock *r)
{
    char peer[INET6_ADDRSTRLEN + 8];
    addr_text(r->peer, peer, sizeof peer);
    return S.coord[0] && peer[0] && strcmp(peer, S.coord) == 0;
}

/* The bytes TCP socket fd was given to send that its peer has not received, once every byte
 * sent is acknowledged (settle_tcp waited for that): those not sent yet, held back by a full
 * receive buffer at the peer. -1 while bytes sent are still unacknowledged, -2 for a socket
 * without a send queue (a listener). */
static int tcp_unsent(int fd)
{
    int outq = 0, unsent = 0;
    if (ioctl(fd, SIOCOUTQ, &outq) != 0 || ioctl(fd, SIOCOUTQNSD, &unsent) != 0)
        return -2;
    return outq == unsent ? unsent : -1;
}

/* Copies the first n bytes of TCP socket fd's send queue into inflight[] without taking them
 * (repair mode, which needs CAP_NET_ADMIN). 0, or -1 (the census says why). */
static int peek_send_queue(int fd, size_t n, const char *what)
{
    if (!inflight_room(n))
        return -1;
    int reuse = 0, on = 1, q = TCP_SEND_QUEUE;
    socklen_t sl = sizeof reuse;
    getsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &reuse, &sl);
    if (setsockopt(fd, IPPROTO_TCP, TCP_REPAIR, &on, sizeof on) != 0) {
        unrestorable("fd %d (%s) has %zu bytes sent that its peer has not received yet (its receive buffer is "
                     "full); reading them back needs CAP_NET_ADMIN (%s)",
                     fd, what, n, strerror(errno));
        return -1;
    }
    ssize_t got = -1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_REPAIR_QUEUE, &q, sizeof q) == 0)
        got = recv(fd, inflight + inflight_used, n, MSG_PEEK | MSG_DONTWAIT);
    int err = errno;
    q = TCP_NO_QUEUE;
    setsockopt(fd, IPPROTO_TCP, TCP_REPAIR_QUEUE, &q, sizeof q);
    int off = 0; /* TCP_REPAIR_OFF: the kernel probes the peer's window, and sending goes on */
    setsockopt(fd, IPPROTO_TCP, TCP_REPAIR, &off, sizeof off);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &reuse, sizeof reuse); /* leaving repair mode clears it */
    if (got != (ssize_t)n) {
        unrestorable("cannot copy the %zu bytes fd %d (%s) sent that its peer has not received yet: %s", n, fd, what,
                     got < 0 ? strerror(err) : "short read");
        return -1;
    }
    inflight_used += n;
    return 0;
}

/* ---- pseudo-terminals of a tree --------------------------------------------------------- */

#define PTS_MAJOR_FIRST 136 /* Unix98 pty slaves: majors 136 to 143 */
#define PTS_MAJOR_LAST 143

/* The index of the pseudo-terminal whose slave is device `dev`, or -1. */
static int pts_index(dev_t dev)
{
    unsigned maj = major(dev);
    return maj >= PTS_MAJOR_FIRST && maj <= PTS_MAJOR_LAST ? (int)((maj - PTS_MAJOR_FIRST) * 256 + minor(dev)) : -1;
}

/* The index of the pseudo-terminal that is this process's controlling terminal, or -1. */
static int ctty_index(void)
{
    unsigned long long f[STAT_FIELDS] = {0};
    long tty = self_stat(f) ? (long)f[7] : 0;
    if (tty == 0)
        return -1;
    dev_t dev = makedev(((unsigned long)tty >> 8) & 0xfff, ((unsigned long)tty & 0xff) | (((unsigned long)tty >> 12) & 0xfff00));
    return pts_index(dev);
}

#define TTY_AUX_MAJOR 5 /* /dev/tty is 5:0 */

/* In a tree: a pseudo-terminal's master or slave, recorded with its settings to be made
 * again once for the tree (a new pair, with another index). /dev/tty is the slave of the
 * process's controlling terminal and comes back as that slave. The bytes the slave's side wrote
 * that the master has not read are taken and written back at once through the slave with
 * output processing off, so they wait again as they were; input typed at the master that the
 * slave's side has not read cannot be put back, and is refused. Returns 0 for another
 * device. */
static int tree_tty(int fd, const struct stat *st, const char *target)
{
    unsigned n = 0;
    int master = ioctl(fd, TIOCGPTN, &n) == 0, index = master ? (int)n : pts_index(st->st_rdev);
    if (!master && index < 0 && st->st_rdev == makedev(TTY_AUX_MAJOR, 0))
        index = ctty_index(); /* /dev/tty: the slave of the controlling terminal, under another name */
    if (index < 0)
        return 0;
    struct cairn_img_tty t;
    memset(&t, 0, sizeof t);
    ioctl(fd, TCGETS, t.termios);
    ioctl(fd, TIOCGWINSZ, t.winsize);
    int waiting = 0;
    if (ioctl(fd, FIONREAD, &waiting) != 0)
        waiting = 0;
    if (!master && waiting > 0) {
        unrestorable("fd %d is a terminal (%s) with %d bytes of input its program has not read yet", fd, target,
                     waiting);
        return 1;
    }
    struct cairn_img_xfd *x = new_xfd(fd, master ? CAIRN_XFD_PTM : CAIRN_XFD_PTS, (uint64_t)index + 1, 0);
    if (!x)
        return 1;
    x->how = (S.close_external ? CAIRN_XFD_CLOSE_UNMATCHED : 0) | (fd <= 2 ? CAIRN_XFD_STDIO : 0);
    x->data_off = inflight_used;
    if (keep_inflight(&t, sizeof t) != 0)
        return 1;
    if (master && waiting > 0) {
        int slave = ioctl(fd, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
        uint8_t raw[64], cooked[64];
        if (slave < 0 || !inflight_room((size_t)waiting) || ioctl(slave, TCGETS, cooked) != 0) {
            unrestorable("cannot copy the %d bytes waiting at the terminal master fd %d (%s)", waiting, fd, target);
            if (slave >= 0)
                close(slave);
            return 1;
        }
        int fl = fcntl(fd, F_GETFL);
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
        ssize_t got = read(fd, inflight + inflight_used, (size_t)waiting);
        fcntl(fd, F_SETFL, fl);
        memcpy(raw, cooked, sizeof raw);
        raw[CAIRN_TTY_OFLAG] &= (uint8_t)~CAIRN_TTY_OPOST;
        ioctl(slave, TCSETS, raw);
        if (got > 0 && write(slave, inflight + inflight_used, (size_t)got) != got)
            say("checkpoint: the terminal master fd %d lost bytes it had waiting", fd);
        ioctl(slave, TCSETS, cooked);
        close(slave);
        if (got > 0) {
            inflight_used += (size_t)got;
            uint64_t len = (uint64_t)got;
            memcpy(inflight + x->data_off + offsetof(struct cairn_img_tty, pending_len), &len, sizeof len);
        }
    }
    x->data_len = inflight_used - x->data_off;
    nxfds++;
    return 1;
}

/* The process's controlling terminal, if it is a pseudo-terminal (index + 1), and its
 * foreground process group, for the image header. */
static void controlling_tty(int32_t *ctty, int32_t *pgrp)
{
    *ctty = *pgrp = 0;
    int index = in_tree() ? ctty_index() : -1;
    if (index < 0)
        return;
    *ctty = index + 1;
    int fd = open("/dev/tty", O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    pid_t fg = -1;
    if (fd >= 0 && ioctl(fd, TIOCGPGRP, &fg) == 0)
        *pgrp = fg;
    if (fd >= 0)
        close(fd);
}

/* Before a process of a tree says it is stopped: each TCP socket's bytes sent are
 * acknowledged, so they are in the peer's receive queue when the peer takes stock of it after
 * every process stopped; what is left is not sent (the peer's buffer is full) and stays so.
 * Without this, a segment held back for a delayed acknowledgement (Nagle) could reach the
 * peer after it took stock and before this process did. */
static void settle_tcp(int fd, void *arg)
{
    int64_t deadline = *(int64_t *)arg; /* one for all the process's sockets */
    int proto = 0;
    socklen_t sl = sizeof proto;
    if (fd == S.sock || getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &sl) != 0 || proto != IPPROTO_TCP)
        return;
    while (mono_ns() < deadline) {
        if (tcp_unsent(fd) != -1)
            return;
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
}

/* The socket inodes the processes of this tree hold, listed once per checkpoint (at the first
 * connection whose other end is a socket of this machine) and sorted. The tree's /proc is
 * its own (cairn-restore --init mounts one in the tree's namespaces), so its processes are
 * all of /proc's; without a namespace of its own a tree sees the whole machine's, and every
 * socket of the machine counts as the tree's (as before trees were told apart). */
#define TREE_SOCKS_MAX 65536
static struct {
    uint64_t *ino; /* mapped for the census, TREE_SOCKS_MAX entries */
    int n, pid;
    int listed, overflow;
} tsocks;

static void fd_sock(int fd, void *p)
{
    (void)p;
    char link[64], target[64];
    snprintf(link, sizeof link, "/proc/%d/fd/%d", tsocks.pid, fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    unsigned long long ino;
    if (n <= 0)
        return;
    target[n] = 0;
    if (sscanf(target, "socket:[%llu]", &ino) != 1)
        return;
    if (tsocks.n == TREE_SOCKS_MAX)
        tsocks.overflow = 1;
    else
        tsocks.ino[tsocks.n++] = ino;
}

static void pid_socks(int pid, void *p)
{
    char dir[32];
    snprintf(dir, sizeof dir, "/proc/%d/fd", pid);
    tsocks.pid = pid;
    each_number(dir, fd_sock, p, NULL);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Sorts `v` in place (heapsort). Not qsort: glibc's allocates a buffer for arrays over 1 KiB
 * with malloc, which the checkpoint must not call (another thread of the program may have
 * stopped inside it, and the heap is being saved). */
static void sort_u64(uint64_t *v, size_t n)
{
    for (size_t end = n, start = n / 2;;) {
        size_t root;
        if (start > 0) {
            root = --start;
        } else {
            if (end <= 1)
                return;
            uint64_t t = v[--end];
            v[end] = v[0];
            v[0] = t;
            root = 0;
        }
        for (size_t child; (child = 2 * root + 1) < end; root = child) {
            if (child + 1 < end && v[child + 1] > v[child])
                child++;
            if (v[root] >= v[child])
                break;
            uint64_t t = v[root];
            v[root] = v[child];
            v[child] = t;
        }
    }
}

/* Whether a process of this tree holds socket inode `ino`. When the list could not be made
 * (no memory, more sockets than it holds), every socket counts as the tree's. */
static int tree_holds_socket(uint64_t ino)
{
    if (!tsocks.listed) {
        tsocks.listed = 1;
        tsocks.n = 0;
        tsocks.overflow = 0;
        void *m = mmap(NULL, TREE_SOCKS_MAX * sizeof(uint64_t), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        tsocks.ino = m == MAP_FAILED ? NULL : m;
        if (tsocks.ino) {
            each_number("/proc", pid_socks, NULL, NULL);
            sort_u64(tsocks.ino, (size_t)tsocks.n);
        }
    }
    if (!tsocks.ino || tsocks.overflow)
        return 1;
    return bsearch(&ino, tsocks.ino, (size_t)tsocks.n, sizeof ino, cmp_u64) != NULL;
}

/* The list made for this census is let go. */
static void tree_socks_done(void)
{
    if (tsocks.ino)
        munmap(tsocks.ino, TREE_SOCKS_MAX * sizeof(uint64_t));
    tsocks.ino = NULL;
    tsocks.listed = 0;
}

/* In a tree: every connected TCP socket whose other end is a socket of this tree is
 * recorded with its addresses and options, the bytes waiting to be read at it and the bytes
 * it sent that its peer had not received (the sub-coordinator checks the other end is in the
 * tree); the restart connects the two ends again. One whose other end is not in the tree (on
 * another host, or in another tree of this one) is recorded the same way as a connection to
 * be met again through the coordinators (CAIRN_XFD_REMOTE); the root checks its other end is
 * in the job. A connection whose other end is not in the job leaves it (refused, or closed
 * under CAIRN_CKPT_EXTERNAL). */
static void census_tcp(void)
{
    for (int i = 0; i < ntcp_ends; i++) {
        struct sock_end *e = &tcp_ends[i];
        char what[160];
        describe_socket(e->fd, what, sizeof what);
        struct cairn_img_sock r;
        uint8_t info[8] = {0};
        socklen_t il = sizeof info;
        if (sock_record(e->fd, &r) != 0 || r.peer_len == 0 ||
            getsockopt(e->fd, IPPROTO_TCP, TCP_INFO, info, &il) != 0) {
            unrestorable("fd %d is a socket (%s; %s) whose addresses could not be read", e->fd, what, e->target);
            continue;
        }
        int established = info[0] == TCP_ESTABLISHED;
        if (established && to_coordinator(&r)) {
            /* Cairn's own (cairn rsh asking its sub-coordinator): it comes back closed, and
             * the program that made it asks again. */
            struct fd_rec *f = new_record(e->fd, FD_CLOSED_SOCK, e->target);
            if (f) {
                f->sock_type = SOCK_STREAM;
                S.nfds++;
            }
            continue;
        }
        e->peer = established ? tcp_peer(&r) : 0;
        /* A socket of this machine held by another tree: as one on another host. */
        if (e->peer && !tree_holds_socket(e->peer))
            e->peer = 0;
        /* No socket of this tree is its other end: one on another host or in another tree of
         * this one, which the root looks for among the job's processes (CAIRN_XFD_REMOTE). */
        int remote = established && !e->peer;
        if (!e->peer && !remote) {
            if (S.close_external)
                come_back_closed(e->fd, 1, e->target);
            else
                unrestorable("fd %d is a socket (%s; %s) that is half closed or closing (TCP state %u); "
                             "only established connections come back",
                             e->fd, what, e->target, info[0]);
            continue;
        }
        int first = 1;
        for (int j = 0; j < i && first; j++)
            first = tcp_ends[j].ino != e->ino;
        struct cairn_img_xfd *x = new_xfd(e->fd, remote ? CAIRN_XFD_REMOTE : CAIRN_XFD_TCP, e->ino, e->peer);
        if (!x)
            return;
        x->how = S.close_external ? CAIRN_XFD_CLOSE_UNMATCHED : 0;
        x->data_off = inflight_used;
        size_t at = inflight_used;
        if (keep_inflight(&r, sizeof r) != 0)
            return;
        if (first) {
            int queued = 0;
            if (ioctl(e->fd, FIONREAD, &queued) != 0 || queued < 0)
                queued = 0;
            if (!inflight_room((size_t)queued))
                return;
            ssize_t got = queued ? recv(e->fd, inflight + inflight_used, (size_t)queued, MSG_PEEK | MSG_DONTWAIT) : 0;
            if (got != queued) {
                unrestorable("cannot copy the %d bytes waiting at fd %d (%s)", queued, e->fd, what);
                return;
            }
            inflight_used += (size_t)got;
            int unsent = tcp_unsent(e->fd);
            if (unsent < 0) {
                unrestorable("fd %d (%s) has bytes on the way that its peer has not acknowledged; try again",
                             e->fd, what);
                return;
            }
            if (unsent > 0 && peek_send_queue(e->fd, (size_t)unsent, what) != 0)
                return;
            uint64_t lens[2] = {(uint64_t)got, (uint64_t)unsent};
            memcpy(inflight + at + offsetof(struct cairn_img_sock, recv_len), lens, sizeof lens);
        }
        x->data_len = inflight_used - at;
        nxfds++;
    }
}

/* ---- System V IPC of the tree ------------------------------------------------------- */

/* The tree's root saves every System V segment and semaphore set of the tree's IPC namespace
 * (its own, made with the pid namespace), attached or not, while every process of the tree is
 * suspended: a restart makes each again with its id, key, owner, mode and contents. Message
 * queues are not saved: a checkpoint of a tree holding one fails, naming it. */
static struct cairn_img_ipc ipcs[CAIRN_IPC_MAX];
static int nipcs;
static const uint8_t *ipc_maps[CAIRN_IPC_MAX]; /* each segment attached read-only for the write */
#define IPC_VALUES 65536
static uint16_t ipc_values[IPC_VALUES];
static size_t nipc_values;
static int ipc_doomed[CAIRN_IPC_MAX];
static int nipc_doomed;

/* Each line of a /proc/sysvipc table after its heading: key and id. */
static int sysvipc_ids(const char *table, int *keys, int *ids, int max)
{
    static char text[1 << 16];
    char path[64];
    snprintf(path, sizeof path, "/proc/sysvipc/%s", table);
    if (read_file(path, text, sizeof text) < 0)
        return 0;
    int n = 0;
    char *line = strchr(text, '\n');
    while (line && *++line && n < max) {
        if (sscanf(line, "%d %d", &keys[n], &ids[n]) == 2)
            n++;
        line = strchr(line, '\n');
    }
    return n;
}

static void ipc_release(void)
{
    for (int i = 0; i < nipcs; i++)
        if (ipc_maps[i]) {
            shmdt(ipc_maps[i]);
            ipc_maps[i] = NULL;
        }
    nipcs = 0;
    nipc_values = 0;
}

static struct cairn_img_ipc ipc_record(uint32_t kind, int id, const struct ipc_perm *perm, uint64_t size)
{
    return (struct cairn_img_ipc){
        .kind = kind,
        .id = id,
        .key = (int32_t)perm->__key,
        .mode = perm->mode,
        .uid = perm->uid,
        .gid = perm->gid,
        .size = size,
    };
}

static void census_ipc(void)
{
    static int keys[CAIRN_IPC_MAX + 1], ids[CAIRN_IPC_MAX + 1];
    ipc_release();
    int n = sysvipc_ids("msg", keys, ids, CAIRN_IPC_MAX);
    for (int i = 0; i < n; i++)
        unrestorable("System V message queue %d (key %#x) is not saved: use a pipe, a socket or POSIX shared "
                     "memory",
                     ids[i], (unsigned)keys[i]);
    n = sysvipc_ids("shm", keys, ids, CAIRN_IPC_MAX + 1);
    for (int i = 0; i < n; i++) {
        struct shmid_ds ds;
        if (nipcs >= CAIRN_IPC_MAX) {
            unrestorable("more than %d System V segments and semaphore sets", CAIRN_IPC_MAX);
            break;
        }
        const void *at = shmctl(ids[i], IPC_STAT, &ds) == 0 ? shmat(ids[i], NULL, SHM_RDONLY) : (void *)-1;
        if (at == (void *)-1) {
            unrestorable("System V shared memory segment %d (key %#x) cannot be read: %s", ids[i],
                         (unsigned)keys[i], strerror(errno));
            continue;
        }
        ipc_maps[nipcs] = at;
        ipcs[nipcs++] = ipc_record(CAIRN_IPC_SHM, ids[i], &ds.shm_perm, (uint64_t)ds.shm_segsz);
    }
    n = sysvipc_ids("sem", keys, ids, CAIRN_IPC_MAX + 1);
    for (int i = 0; i < n; i++) {
        struct semid_ds ds;
        union {
            struct semid_ds *buf;
            unsigned short *array;
        } arg = {.buf = &ds};
        if (nipcs >= CAIRN_IPC_MAX) {
            unrestorable("more than %d System V segments and semaphore sets", CAIRN_IPC_MAX);
            break;
        }
        errno = 0;
        int stat_ok = semctl(ids[i], 0, IPC_STAT, arg) == 0 && nipc_values + ds.sem_nsems <= IPC_VALUES;
        arg.array = &ipc_values[nipc_values];
        if (!stat_ok || (ds.sem_nsems > 0 && semctl(ids[i], 0, GETALL, arg) != 0)) {
            unrestorable("System V semaphore set %d (key %#x) cannot be read: %s", ids[i], (unsigned)keys[i],
                         errno ? strerror(errno) : "too many semaphores");
            continue;
        }
        ipcs[nipcs] = ipc_record(CAIRN_IPC_SEM, ids[i], &ds.sem_perm, ds.sem_nsems);
        ipcs[nipcs++].data_off = nipc_values * sizeof(uint16_t);
        nipc_values += ds.sem_nsems;
    }
}

/* The page bitmaps of the saved segments, at `bm` (their offsets counted from `bm_base`),
 * pages that are not all zero saved. Returns the bitmaps' bytes, or -ENOMEM past `cap`. */
static int64_t plan_ipc_pages(uint8_t *bm, size_t cap, uint64_t bm_base)
{
    static const uint8_t zero[CAIRN_IMG_PAGE];
    size_t used = 0;
    for (int i = 0; i < nipcs; i++) {
        struct cairn_img_ipc *c = &ipcs[i];
        if (c->kind != CAIRN_IPC_SHM)
            continue;
        uint64_t pages = (c->size + CAIRN_IMG_PAGE - 1) / CAIRN_IMG_PAGE, bytes = (pages + 7) / 8;
        if (used + bytes > cap)
            return -ENOMEM;
        uint8_t *b = bm + used;
        memset(b, 0, bytes);
        c->bitmap_off = bm_base + used;
        c->saved_pages = 0;
        for (uint64_t p = 0; p < pages; p++) {
            uint64_t len = c->size - p * CAIRN_IMG_PAGE < CAIRN_IMG_PAGE ? c->size - p * CAIRN_IMG_PAGE : CAIRN_IMG_PAGE;
            if (memcmp(ipc_maps[i] + p * CAIRN_IMG_PAGE, zero, len) != 0) {
                b[p / 8] |= (uint8_t)(1u << (p % 8));
                c->saved_pages++;
            }
        }
        used += bytes;
    }
    return (int64_t)used;
}

/* Take stock of the process for its image: every descriptor it can bring back goes into
 * S.fds, and everything it cannot into S.why (empty when there is nothing), so that the
 * checkpoint fails with that list rather than store an image that could not be restored.
 * Shared mappings a restart cannot map again (deleted files, System V memory, a file whose
 * name now leads elsewhere) count, as do children and descriptors. */
static void census(const struct cairn_img_region *regs, int n)
{
    int dirfd = -1;
    S.nfds = 0;
    S.nwatches = 0;
    S.max_fd = -1;
    npipe_ends = 0;
    nsock_ends = 0;
    ntcp_ends = 0;
    nxfds = 0;
    inflight_used = 0;
    nzombies = 0;
    if (in_tree())
        find_tree_peers();
    census_regs = regs;
    census_nregs = n;
    each_number("/proc/self/fd", census_fd, &dirfd, &dirfd);
    census_pipes();
    census_sockets();
    census_tcp();
    tree_socks_done();
    if (S.nfds >= MAX_FDS)
        unrestorable("more than %d files are open", MAX_FDS);
    each_number("/proc/self/task", census_children, NULL, NULL);
    forget_tree_peers();
    if (in_tree() && !S.member)
        census_ipc();
    for (int i = 0; i < n; i++) {
        const struct cairn_img_region *r = &regs[i];
        if (r->flags & CAIRN_REG_SYSV) {
            struct shmid_ds ds;
            uint64_t whole = 0;
            if (shmctl((int)r->ino, IPC_STAT, &ds) == 0)
                whole = ((uint64_t)ds.shm_segsz + CAIRN_IMG_PAGE - 1) / CAIRN_IMG_PAGE * CAIRN_IMG_PAGE;
            if (r->file_offset != 0 || r->end - r->start != whole)
                unrestorable("System V shared memory segment %llu is attached in part at %#llx-%#llx (a "
                             "restart attaches segments whole)",
                             (unsigned long long)r->ino, (unsigned long long)r->start, (unsigned long long)r->end);
            continue;
        }
        if (!(r->flags & CAIRN_REG_SHARED) || (r->flags & (CAIRN_REG_SPECIAL | CAIRN_REG_OBJECT)))
            continue;
        struct stat st;
        if (!(r->flags & CAIRN_REG_FILE)) {
            if (strcmp(r->path, "/dev/zero (deleted)") != 0)
                unrestorable("shared memory at %#llx-%#llx (%s) is not saved", (unsigned long long)r->start,
                             (unsigned long long)r->end, r->path[0] ? r->path : "anonymous");
        } else if (strstr(r->path, " (deleted)") || strncmp(r->path, "/SYSV", 5) == 0) {
            unrestorable("shared memory at %#llx-%#llx (%s) has no name to map again", (unsigned long long)r->start,
                         (unsigned long long)r->end, r->path);
        } else if (stat(r->path, &st) != 0 || (uint64_t)st.st_ino != r->ino) {
            unrestorable("%s, mapped shared at %#llx-%#llx, is no longer the file of that name", r->path,
                         (unsigned long long)r->start, (unsigned long long)r->end);
        }
    }
}



static void save_process_state(void)
{
    for (int s = 1; s < 65; s++) {
        if (s == SIGKILL || s == SIGSTOP)
            continue;
        uint64_t act[4] = {0, 0, 0, 0};
        if (syscall(SYS_rt_sigaction, s, NULL, act, 8) == 0) {
            S.actions[s].handler = act[0];
            S.actions[s].flags = act[1];
            S.actions[s].restorer = act[2];
            S.actions[s].mask = act[3];
        }
    }
    if (!getcwd(S.cwd, sizeof S.cwd))
        S.cwd[0] = 0;
    S.umask = umask(0);
    umask(S.umask);
    for (int r = 0; r < RLIM_NLIMITS; r++)
        getrlimit(r, &S.limits[r]);
}

static int64_t store_image(const char *path, struct cairn_img_region *regs, int n, uint8_t *bitmaps,
                           size_t bitmap_cap);

/* ---- the hashes: baseline or AVX2 ----------------------------------------------------- */

/* hash_avx2.c: the same XXH3 functions built for AVX2. */
uint64_t cairn_avx2_hash64(const void *p, size_t len);
XXH128_hash_t cairn_avx2_hash128(const void *p, size_t len);
void cairn_avx2_update128(XXH3_state_t *st, const void *p, size_t len);

/* base_hash64, base_hash128, base_update128: the baseline build. */
CAIRN_IMAGE_HASHES(base_, static)

/* The hashes every image is written with: each page run's checksum (hash64) and the
 * engine's block hashes (hash128, update128). Both builds give the same bits; AVX2 halves
 * what hashing adds to a checkpoint (bench/README.md). */
static struct {
    uint64_t (*hash64)(const void *, size_t);
    XXH128_hash_t (*hash128)(const void *, size_t);
    void (*update128)(XXH3_state_t *, const void *, size_t);
} HX = {base_hash64, base_hash128, base_update128};

/* Use the AVX2 build when the CPU has AVX2 and the kernel saves the YMM registers (XCR0 bits
 * 1 and 2); once per process, before its first image. */
static void image_hashes_pick(void)
{
    static int picked;
    if (picked)
        return;
    picked = 1;
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE) || !(c & bit_AVX))
        return;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(b & bit_AVX2))
        return;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 6) != 6)
        return;
    HX.hash64 = cairn_avx2_hash64;
    HX.hash128 = cairn_avx2_hash128;
    HX.update128 = cairn_avx2_update128;
}

/* ---- block hashes of the image being written ---------------------------------------- */

/* The block size the coordinator's WRITE named (block=), 0 for none: then no hashes. */
static uint32_t hash_block;

/* The hashes of the image being written, block by block as its bytes go out (see struct
 * cairn_img_hashes). Each piece is copied into a buffer, hashed there and written from
 * there, so the hash is of exactly the bytes written: the memory being saved is not still
 * (this thread's own stack and the library's variables change as it writes them, and a
 * mapping shared with a process outside the job may change at any time). The buffer stays
 * in cache between the three, so the bytes come from memory once, as in a plain write. */
#define HASH_PIECE (256u << 10)
static struct {
    uint32_t block;        /* 0: not hashing this image */
    uint64_t in_block;     /* bytes of the current block fed so far */
    XXH3_state_t st;
    uint8_t *bounce;       /* HASH_PIECE bytes, then the `cap` hashes: mapped for this */
    XXH128_hash_t *out;    /* image after its regions were listed, so not part of it */
    uint64_t n, cap;
    size_t map_len;
} BH;

static void hashes_begin(uint64_t file_size)
{
    BH.block = 0;
    if (!hash_block || !file_size)
        return;
    uint64_t cap = (file_size + hash_block - 1) / hash_block;
    size_t len = HASH_PIECE +
                 ((size_t)cap * sizeof(XXH128_hash_t) + CAIRN_IMG_PAGE - 1) / CAIRN_IMG_PAGE * CAIRN_IMG_PAGE;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return; /* the engine hashes this image itself */
    BH.bounce = p;
    BH.out = (XXH128_hash_t *)(BH.bounce + HASH_PIECE);
    BH.cap = cap;
    BH.map_len = len;
    BH.n = 0;
    BH.in_block = 0;
    BH.block = hash_block;
    XXH3_128bits_reset(&BH.st);
}

static void hashes_feed(const uint8_t *p, size_t len)
{
    while (len > 0 && BH.block) {
        size_t take = BH.block - BH.in_block < len ? (size_t)(BH.block - BH.in_block) : len;
        if (BH.n == BH.cap) {
            BH.block = 0; /* more bytes than planned: no hashes for this image */
            return;
        }
        if (BH.in_block == 0 && take == BH.block) {
            BH.out[BH.n++] = HX.hash128(p, take);
        }
        else {
            HX.update128(&BH.st, p, take);
            BH.in_block += take;
            if (BH.in_block == BH.block) {
                BH.out[BH.n++] = XXH3_128bits_digest(&BH.st);
                XXH3_128bits_reset(&BH.st);
                BH.in_block = 0;
            }
        }
        p += take;
        len -= take;
    }
}

/* The image's bytes [0, file_size) went out: write "<path>.hashes" (through a .tmp,
 * fsynced) before the image takes its name. Any failure leaves no file: the engine then
 * hashes the image itself. */
static void hashes_end(const char *path, uint64_t file_size)
{
    if (BH.block && BH.in_block > 0 && BH.n < BH.cap) {
        BH.out[BH.n++] = XXH3_128bits_digest(&BH.st);
        BH.in_block = 0;
    }
    if (BH.block && BH.n == BH.cap) {
        char name[CAIRN_IMG_PATH_MAX + 16], tmp[CAIRN_IMG_PATH_MAX + 24];
        snprintf(name, sizeof name, "%s.hashes", path);
        snprintf(tmp, sizeof tmp, "%s.tmp", name);
        struct cairn_img_hashes h;
        memset(&h, 0, sizeof h);
        memcpy(h.magic, CAIRN_HASHES_MAGIC, 8);
        h.block = BH.block;
        h.file_size = file_size;
        h.count = BH.n;
        /* XXH128_hash_t is { low64, high64 }: on x86-64 already the little-endian layout. */
        int fd = (int)syscall(SYS_openat, AT_FDCWD, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd >= 0) {
            int ok = write_full(fd, &h, sizeof h) == 0 &&
                     write_full(fd, BH.out, (size_t)BH.n * sizeof(XXH128_hash_t)) == 0 &&
                     syscall(SYS_fsync, fd) == 0;
            syscall(SYS_close, fd);
            if (!ok || syscall(SYS_renameat, AT_FDCWD, tmp, AT_FDCWD, name) != 0)
                syscall(SYS_unlinkat, AT_FDCWD, tmp, 0);
        }
    }
    if (BH.map_len)
        munmap(BH.bounce, BH.map_len);
    BH.block = 0;
    BH.map_len = 0;
}

/* The image was not written: no hashes. */
static void hashes_drop(void)
{
    BH.block = 0;
    hashes_end(NULL, 0);
}

/* Write len bytes that do not change meanwhile (a copy): hashed where they are. */
static int put_image_stable(int fd, const void *buf, size_t len)
{
    if (BH.block)
        hashes_feed(buf, len);
    return write_full(fd, buf, len);
}

/* The page runs in a region's bitmap (image.h): consecutive saved pages, cut at every
 * multiple of CAIRN_IMG_RUN_GROUP. */
static uint64_t count_runs(const uint8_t *bm, uint64_t pages)
{
    uint64_t runs = 0;
    for (uint64_t p = 0; p < pages;) {
        if (bm[p / 8] & (1u << (p % 8))) {
            runs++;
            p = cairn_img_run_end(bm, p, pages);
        } else {
            p++;
        }
    }
    return runs;
}

/* The longest page run: a group (image.h). */
#define RUN_PIECE (CAIRN_IMG_RUN_GROUP * CAIRN_IMG_PAGE)

/* Where the page runs being written go: the image's descriptor, the bounce buffer, the run
 * checksums (nsums of them, nrun filled) and the image's length so far. */
struct run_out {
    int fd;
    uint8_t *bounce;
    uint64_t *sums;
    uint64_t nsums, nrun, at;
};

/* Write the saved pages of the `pages` pages at `base` that bitmap `bm` marks, a page run at
 * a time. Each run is copied into the bounce buffer, summed there and written from there: the
 * sum is of exactly the bytes written, though the memory being saved is not still (this
 * thread's stack and the library's variables change as it writes them, and a mapping shared
 * with a process outside the job may change at any time). */
static int put_runs(struct run_out *o, const uint8_t *base, const uint8_t *bm, uint64_t pages)
{
    for (uint64_t p = 0; p < pages;) {
        if (!(bm[p / 8] & (1u << (p % 8)))) {
            p++;
            continue;
        }
        uint64_t q = cairn_img_run_end(bm, p, pages);
        if (o->nrun >= o->nsums)
            return -EIO;
        size_t c = (size_t)(q - p) * CAIRN_IMG_PAGE; /* at most RUN_PIECE: a group */
        memcpy(o->bounce, base + p * CAIRN_IMG_PAGE, c);
        o->sums[o->nrun++] = HX.hash64(o->bounce, c);
        int r = put_image_stable(o->fd, o->bounce, c);
        if (r < 0)
            return r;
        o->at += c;
        p = q;
    }
    return 0;
}

/* Write len bytes of the image at fd, hashing them on the way when hashes are wanted: a
 * piece at a time, copied, hashed and written (see BH). */
static int put_image(int fd, const void *buf, size_t len)
{
    if (BH.block) {
        const uint8_t *p = buf;
        while (len > 0) {
            size_t k = len < HASH_PIECE ? len : HASH_PIECE;
            memcpy(BH.bounce, p, k);
            hashes_feed(BH.bounce, k);
            int r = write_full(fd, BH.bounce, k);
            if (r < 0)
                return r;
            p += k;
            len -= k;
        }
        return 0;
    }
    return write_full(fd, buf, len);
}

/* Write the image of this (stopped) process to path, through path.tmp, fsynced. Returns
 * the bytes written or a negative errno. On restart, this returns 0 with CONTROL.restarted
 * set, from the point where the manager saved its context. */
static int64_t write_image(const char *path, uint64_t ckpt)
{
    int r = map_scratch();
    if (r < 0)
        return r;
    /* Scratch layout: regions, maps text, bitmaps. */
    const int max_regions = 8192;
    struct cairn_img_region *regs = (void *)scratch;
    size_t regs_bytes = (size_t)max_regions * sizeof *regs;
    char *text = (char *)scratch + regs_bytes;
    size_t text_len = 4u << 20;
    uint8_t *bitmaps = (uint8_t *)text + text_len;
    size_t bitmap_cap = SCRATCH_LEN - regs_bytes - text_len;

    save_process_state();
    S.manager_fs = fs_base();
    S.checkpoints = ckpt;
    if (cairn_ctx_save(&S.manager_jump)) {
        /* Restarted (see resume_process()): the segments the root had attached to save
         * them were attached in the process that took the checkpoint, not in this one.
         * Those removed while attached are removed again once the tree is back. */
        nipc_doomed = 0;
        for (int i = 0; i < nipcs; i++)
            if (ipcs[i].kind == CAIRN_IPC_SHM && (ipcs[i].mode & SHM_DEST))
                ipc_doomed[nipc_doomed++] = ipcs[i].id;
        nipcs = 0;
        nipc_values = 0;
        return 0;
    }

    int n = read_maps(regs, max_regions, text, text_len);
    if (n < 0)
        return n;
    S.why[0] = 0;
    if (n == max_regions)
        unrestorable("more than %d memory mappings", max_regions - 1);
    census(regs, n);
    int64_t written = S.why[0] ? -ENOTRECOVERABLE : store_image(path, regs, n, bitmaps, bitmap_cap);
    ipc_release();
    return written;
}

/* The rest of write_image: the image of the process whose regions are `regs`, its census
 * taken, written to path. */
static int64_t store_image(const char *path, struct cairn_img_region *regs, int n, uint8_t *bitmaps,
                           size_t bitmap_cap)
{
    image_hashes_pick();
    uint64_t bitmap_bytes = 0;
    int r = plan_pages(regs, n, bitmaps, bitmap_cap, &bitmap_bytes);
    if (r < 0)
        return r;

    static struct cairn_img_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, CAIRN_IMG_MAGIC, 8);
    h.version = CAIRN_IMG_VERSION;
    h.header_size = sizeof h;
    h.nregions = (uint32_t)n;
    h.nthreads = (uint32_t)S.nthreads + 1; /* and the manager */
    h.regions_off = CAIRN_IMG_PAGE;
    h.threads_off = h.regions_off + (uint64_t)n * sizeof(struct cairn_img_region);
    h.nxfds = (uint32_t)nxfds;
    h.max_fd = S.max_fd;
    h.xfds_off = h.threads_off + (uint64_t)h.nthreads * sizeof(struct cairn_img_thread);
    h.xdata_len = nxfds ? inflight_used : 0;
    h.nipc = (uint32_t)nipcs;
    h.ipc_off = h.xfds_off + (uint64_t)nxfds * sizeof(struct cairn_img_xfd) + h.xdata_len;
    uint64_t values_off = h.ipc_off + (uint64_t)nipcs * sizeof(struct cairn_img_ipc);
    uint64_t bm_off = values_off + nipc_values * sizeof(uint16_t);
    int64_t ipc_bm = plan_ipc_pages(bitmaps + bitmap_bytes, bitmap_cap - bitmap_bytes, bm_off + bitmap_bytes);
    if (ipc_bm < 0)
        return (int)ipc_bm;
    for (int i = 0; i < nipcs; i++)
        if (ipcs[i].kind == CAIRN_IPC_SEM)
            ipcs[i].data_off += values_off;
    /* Region bitmaps relative to the start of the bitmaps (plan_pages), the segments' after. */
    const uint64_t first_data =
        (bm_off + bitmap_bytes + (uint64_t)ipc_bm + CAIRN_IMG_PAGE - 1) / CAIRN_IMG_PAGE * CAIRN_IMG_PAGE;
    uint64_t data = first_data;
    for (int i = 0; i < n; i++) {
        struct cairn_img_region *g = &regs[i];
        if (!(g->flags & CAIRN_REG_SAVED))
            continue;
        g->bitmap_off += bm_off;
        g->data_off = data;
        data += g->saved_pages * CAIRN_IMG_PAGE;
    }
    for (int i = 0; i < nipcs; i++)
        if (ipcs[i].kind == CAIRN_IPC_SHM) {
            ipcs[i].data_off = data;
            data += ipcs[i].saved_pages * CAIRN_IMG_PAGE;
        }
    /* One checksum per page run, after the pages. */
    uint64_t nsums = 0;
    for (int i = 0; i < n; i++) {
        struct cairn_img_region *g = &regs[i];
        if (!(g->flags & CAIRN_REG_SAVED))
            continue;
        g->sums_off = data + nsums * sizeof(uint64_t);
        nsums += count_runs(bitmaps + (g->bitmap_off - bm_off), (g->end - g->start) / CAIRN_IMG_PAGE);
    }
    for (int i = 0; i < nipcs; i++)
        if (ipcs[i].kind == CAIRN_IPC_SHM) {
            ipcs[i].sums_off = data + nsums * sizeof(uint64_t);
            nsums += count_runs(bitmaps + (ipcs[i].bitmap_off - bm_off),
                                (ipcs[i].size + CAIRN_IMG_PAGE - 1) / CAIRN_IMG_PAGE);
        }
    size_t sums_len = ((size_t)nsums * sizeof(uint64_t) + CAIRN_IMG_PAGE - 1) / CAIRN_IMG_PAGE * CAIRN_IMG_PAGE;
    uint8_t *bounce = mmap(NULL, RUN_PIECE + sums_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (bounce == MAP_FAILED)
        return -ENOMEM;
    uint64_t *sums = (uint64_t *)(bounce + RUN_PIECE);
    /* Every file a region maps, saved or not, is checked against these at restart. */
    for (int i = 0; i < n; i++) {
        struct cairn_img_region *g = &regs[i];
        struct stat st;
        if ((g->flags & CAIRN_REG_FILE) && stat(g->path, &st) == 0) {
            g->file_size = (uint64_t)st.st_size;
            g->file_mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        }
    }
    h.data_start = first_data;
    h.sums_off = data;
    h.nsums = nsums;
    h.file_size = data + nsums * sizeof(uint64_t);
    identity(&h);
    memory_layout(&h);
    h.pid = getpid();
    h.ppid = getppid();
    h.pgid = getpgrp();
    h.sid = getsid(0);
    h.ids = S.nslevels >= 2 ? CAIRN_IDS_NAMESPACE : 0;
    h.nzombies = nzombies;
    controlling_tty(&h.ctty, &h.tty_pgrp);
    memcpy(h.zombies, zombies, sizeof zombies);
    h.hole_start = CAIRN_IMG_HOLE_START;
    h.hole_len = CAIRN_IMG_HOLE_LEN;
    h.control_addr = (uint64_t)(uintptr_t)&CONTROL;
    h.checkpoint = S.checkpoints;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    h.time_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;

    static struct cairn_img_thread th[MAX_THREADS + 1];
    for (int i = 0; i < S.nthreads; i++) {
        struct thread_rec *t = &S.threads[i];
        th[i] = (struct cairn_img_thread){
            .tid = t->tid,
            .flags = t->main ? CAIRN_THR_MAIN : 0,
            .fs_base = t->fs_base,
            .tid_addr = t->fs_base + (uint64_t)S.tid_offset,
            .jump_addr = (uint64_t)(uintptr_t)&t->jump,
        };
    }
    th[S.nthreads] = (struct cairn_img_thread){
        .tid = S.manager_tid,
        .fs_base = S.manager_fs,
        .tid_addr = S.manager_fs + (uint64_t)S.tid_offset,
        .jump_addr = (uint64_t)(uintptr_t)&S.manager_jump,
    };

    char tmp[CAIRN_IMG_PATH_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = (int)syscall(SYS_openat, AT_FDCWD, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        r = -errno;
        munmap(bounce, RUN_PIECE + sums_len);
        return r;
    }
    static uint8_t zero[CAIRN_IMG_PAGE];
    uint64_t at = 0;
#define PUT(p, len)                                                                                \
    do {                                                                                           \
        r = put_image(fd, (p), (len));                                                             \
        if (r < 0)                                                                                 \
            goto fail;                                                                             \
        at += (len);                                                                               \
    } while (0)
#define PAD_TO(off)                                                                                \
    while (at < (off)) {                                                                           \
        uint64_t k = (off) - at < sizeof zero ? (off) - at : sizeof zero;                          \
        PUT(zero, k);                                                                              \
    }
    /* The header and tables twice: first summed (meta_sum zero), then written with the sum. */
#define EMIT(p, len)                                                                               \
    do {                                                                                           \
        if (pass == 0) {                                                                           \
            (void)XXH3_64bits_update(&ms, (p), (len));                                             \
            at += (len);                                                                           \
        } else {                                                                                   \
            PUT((p), (len));                                                                       \
        }                                                                                          \
    } while (0)
    h.meta_sum = 0;
    static XXH3_state_t ms;
    (void)XXH3_64bits_reset(&ms);
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            h.meta_sum = XXH3_64bits_digest(&ms);
            hashes_begin(h.file_size);
        }
        at = 0;
        EMIT(&h, sizeof h);
        while (at < h.regions_off) {
            uint64_t k = h.regions_off - at < sizeof zero ? h.regions_off - at : sizeof zero;
            EMIT(zero, k);
        }
        EMIT(regs, (size_t)n * sizeof *regs);
        EMIT(th, (size_t)h.nthreads * sizeof th[0]);
        EMIT(xfds, (size_t)nxfds * sizeof xfds[0]);
        EMIT(inflight, (size_t)h.xdata_len);
        EMIT(ipcs, (size_t)nipcs * sizeof ipcs[0]);
        EMIT(ipc_values, nipc_values * sizeof ipc_values[0]);
        EMIT(bitmaps, bitmap_bytes + (uint64_t)ipc_bm);
        while (at < first_data) {
            uint64_t k = first_data - at < sizeof zero ? first_data - at : sizeof zero;
            EMIT(zero, k);
        }
    }
#undef EMIT
    struct run_out out = {.fd = fd, .bounce = bounce, .sums = sums, .nsums = nsums};
    uint64_t nrun;
    for (int i = 0; i < n; i++) {
        struct cairn_img_region *g = &regs[i];
        if (!(g->flags & CAIRN_REG_SAVED))
            continue;
        int unreadable = !(g->prot & PROT_READ);
        if (unreadable)
            mprotect((void *)g->start, g->end - g->start, g->prot | PROT_READ);
        out.at = at;
        r = put_runs(&out, (const uint8_t *)g->start, bitmaps + (g->bitmap_off - bm_off),
                     (g->end - g->start) / CAIRN_IMG_PAGE);
        at = out.at;
        if (r < 0)
            goto fail;
        if (unreadable)
            mprotect((void *)g->start, g->end - g->start, g->prot);
    }
    for (int i = 0; i < nipcs; i++) {
        const struct cairn_img_ipc *c = &ipcs[i];
        if (c->kind != CAIRN_IPC_SHM)
            continue;
        out.at = at;
        r = put_runs(&out, ipc_maps[i], bitmaps + (c->bitmap_off - bm_off),
                     (c->size + CAIRN_IMG_PAGE - 1) / CAIRN_IMG_PAGE);
        at = out.at;
        if (r < 0)
            goto fail;
    }
    nrun = out.nrun;
    if (nrun != nsums) {
        r = -EIO;
        goto fail;
    }
    PUT(sums, (size_t)nsums * sizeof(uint64_t));
#undef PUT
#undef PAD_TO
    if (at != h.file_size) {
        r = -EIO;
        goto fail;
    }
    if (syscall(SYS_fsync, fd) != 0) {
        r = -errno;
        goto fail;
    }
    syscall(SYS_close, fd);
    munmap(bounce, RUN_PIECE + sums_len);
    hashes_end(path, h.file_size);
    if (syscall(SYS_renameat, AT_FDCWD, tmp, AT_FDCWD, path) != 0) {
        r = -errno;
        syscall(SYS_unlinkat, AT_FDCWD, tmp, 0);
        return r;
    }
    return (int64_t)at;
fail:
    munmap(bounce, RUN_PIECE + sums_len);
    hashes_drop();
    syscall(SYS_close, fd);
    syscall(SYS_unlinkat, AT_FDCWD, tmp, 0);
    return r;
}

/* ---- resume after a restart -------------------------------------------------------- */

/* Parse "0-3,8,10-11" into a list of CPUs; returns how many. */
static int parse_cpus(const char *s, int *out, int max)
{
    int n = 0;
    while (*s && n < max) {
        char *e;
        long a = strtol(s, &e, 10), b = a;
        if (e == s)
            break;
        if (*e == '-')
            b = strtol(e + 1, &e, 10);
        for (long c = a; c <= b && n < max; c++)
            out[n++] = (int)c;
        s = *e == ',' ? e + 1 : e;
        if (*s && *s != ',' && (*s < '0' || *s > '9'))
            break;
    }
    return n;
}

/* Each restored thread, first thing: put back its CPU mask (mapped onto --cpus: the k-th
 * CPU of the saved mask's order becomes the k-th CPU of the list), so everything it does
 * next happens where it ran before; then the kernel state a new thread lacks. */
static void restore_thread(struct thread_rec *t)
{
    if (CONTROL.affinity && t->has_affinity) {
        cpu_set_t want;
        CPU_ZERO(&want);
        if (CONTROL.cpus[0]) {
            int list[1024];
            int m = parse_cpus(CONTROL.cpus, list, 1024);
            for (int c = 0; c < CPU_SETSIZE && m > 0; c++)
                if (CPU_ISSET(c, &t->affinity))
                    CPU_SET(list[c % m], &want);
        } else {
            want = t->affinity;
        }
        if (sched_setaffinity(0, sizeof want, &want) != 0)
            say("thread %d: cannot restore its CPU mask: %s", t->tid, strerror(errno));
    }
    if (t->robust_head)
        syscall(SYS_set_robust_list, t->robust_head, t->robust_len);
    if (t->rseq_addr && t->rseq_len) {
        /* The kernel forgot the registration; clear the critical-section pointer first. */
        *(uint64_t *)(t->rseq_addr + 8) = 0;
        if (syscall(SYS_rseq, t->rseq_addr, t->rseq_len, 0, 0x53053053) != 0)
            say("thread %d: cannot register rseq again: %s", t->tid, strerror(errno));
    }
    prctl(PR_SET_TIMERSLACK, t->timer_slack, 0, 0, 0);
    prctl(PR_SET_NAME, t->name, 0, 0, 0);
    setpriority(PRIO_PROCESS, 0, t->nice);
}

/* Move descriptor fd to f->fd, with f's close-on-exec flag. */
static void place(int fd, const struct fd_rec *f)
{
    if (fd != f->fd) {
        dup3(fd, f->fd, f->cloexec ? O_CLOEXEC : 0);
        close(fd);
    } else {
        fcntl(fd, F_SETFD, f->cloexec ? FD_CLOEXEC : 0);
    }
}

/* A named FIFO opened again by its name for reading (lone_fifo records no other kind), which
 * O_NONBLOCK keeps from waiting for a writer; then its own flags. */
static void fifo_again(const struct fd_rec *f)
{
    int fd = open(f->path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) {
        say("cannot open the FIFO %s as fd %d again: %s", f->path, f->fd, strerror(errno));
        return;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode))
        say("%s, opened again as fd %d, is no longer a FIFO", f->path, f->fd);
    fcntl(fd, F_SETFL, f->flags);
    place(fd, f);
}

/* An empty file whose name was gone: a new one without a name, with the flags it had. */
static void unnamed_again(const struct fd_rec *f)
{
    int fd = memfd_create("cairn-unnamed", 0);
    if (fd < 0) {
        say("cannot make the empty file without a name at fd %d again: %s", f->fd, strerror(errno));
        return;
    }
    fcntl(fd, F_SETFL, f->flags & (O_APPEND | O_NONBLOCK));
    place(fd, f);
}

/* An eventfd, timerfd, signalfd, inotify or epoll instance made again as it was at the checkpoint
 * (an epoll after every descriptor it watches). */
static void anon_again(const struct fd_rec *f)
{
    int nb = f->flags & O_NONBLOCK;
    int fd = -1;
    if (f->kind == FD_EVENTFD) {
        fd = eventfd(0, (nb ? EFD_NONBLOCK : 0) | (f->sock_type ? EFD_SEMAPHORE : 0));
        if (fd >= 0 && f->value && write(fd, &f->value, sizeof f->value) != (ssize_t)sizeof f->value)
            say("cannot set eventfd %d back to %llu: %s", f->fd, (unsigned long long)f->value, strerror(errno));
    } else if (f->kind == FD_TIMERFD) {
        fd = timerfd_create(f->sock_type, nb ? TFD_NONBLOCK : 0);
        struct itimerspec its = {{f->timer[2], f->timer[3]}, {f->timer[0], f->timer[1]}};
        if (fd >= 0 && (its.it_value.tv_sec || its.it_value.tv_nsec) && timerfd_settime(fd, 0, &its, NULL) != 0)
            say("cannot arm timerfd %d again: %s", f->fd, strerror(errno));
    } else if (f->kind == FD_SIGNALFD) {
        sigset_t mask;
        sigemptyset(&mask);
        for (int sig = 1; sig <= 64; sig++)
            if (f->value & (1ull << (sig - 1)))
                sigaddset(&mask, sig);
        fd = signalfd(-1, &mask, nb ? SFD_NONBLOCK : 0);
    } else if (f->kind == FD_INOTIFY) {
        fd = inotify_again(f);
    } else if (f->kind == FD_EPOLL) {
        fd = epoll_create1(0);
        for (uint64_t k = 0; fd >= 0 && k < f->value; k++) {
            const struct epoll_watch *w = &S.watches[f->first_watch + (int)k];
            struct epoll_event ev = {.events = w->events, .data.u64 = w->data};
            if (epoll_ctl(fd, EPOLL_CTL_ADD, w->fd, &ev) != 0)
                say("epoll fd %d cannot watch fd %d again: %s", f->fd, w->fd, strerror(errno));
        }
    }
    if (fd < 0) {
        say("cannot make fd %d (%s) again: %s", f->fd, f->path, strerror(errno));
        return;
    }
    place(fd, f);
}

/* Whether every epoll instance that epoll record i watches is made again (made[] by record). */
static int watched_epolls_made(int i, const uint8_t *made)
{
    const struct fd_rec *f = &S.fds[i];
    for (uint64_t k = 0; k < f->value; k++) {
        int32_t w = S.watches[f->first_watch + (int)k].fd;
        for (int j = 0; j < S.nfds; j++)
            if (j != i && S.fds[j].kind == FD_EPOLL && S.fds[j].fd == w && !made[j])
                return 0;
    }
    return 1;
}

/* The epoll instances made again, each after the epoll instances it watches: a program may
 * nest them (UCX registers epoll descriptors in another epoll), and an epoll can only watch
 * a descriptor that exists. The kernel refuses loops, so every pass makes at least one. */
static void epolls_again(void)
{
    static uint8_t made[MAX_FDS];
    int left = 0;
    for (int i = 0; i < S.nfds; i++) {
        made[i] = S.fds[i].kind != FD_EPOLL;
        left += !made[i];
    }
    while (left > 0) {
        int progress = 0;
        for (int i = 0; i < S.nfds; i++)
            if (!made[i] && watched_epolls_made(i, made)) {
                anon_again(&S.fds[i]);
                made[i] = 1;
                left--;
                progress = 1;
            }
        if (!progress) {
            /* Cannot happen (no loops): make the rest, which says what fails. */
            for (int i = 0; i < S.nfds; i++)
                if (!made[i])
                    anon_again(&S.fds[i]);
            break;
        }
    }
}

/* A listening socket bound to its address again. A Unix socket's name left behind by the
 * killed process is removed first (only if it is a socket). Connections waiting to be
 * accepted at the checkpoint are gone; the backlog is SOMAXCONN. When the address is taken
 * (by another process, or by connections of the killed one in TIME_WAIT on a socket without
 * SO_REUSEADDR), the socket is put in place unbound and the restart says so. */
static void listen_again(const struct fd_rec *f)
{
    int dom = (int)f->value, fd = socket(dom, f->sock_type, (int)f->timer[0]);
    if (fd < 0) {
        say("cannot make the listening socket fd %d (%s) again: %s", f->fd, f->path, strerror(errno));
        return;
    }
    int on = 1;
    if (dom != AF_UNIX)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (f->timer[1])
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof on);
    if (dom == AF_INET6) {
        int v6only = (int)f->timer[2];
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only);
    }
    const struct sockaddr_un *un = (const void *)&f->addr;
    struct stat st;
    if (dom == AF_UNIX && un->sun_path[0] && stat(un->sun_path, &st) == 0 && S_ISSOCK(st.st_mode))
        unlink(un->sun_path);
    /* Its address as the kernel gave it at the checkpoint: a host address that moved is the
     * host's new one (this restart's pairs). */
    struct sockaddr_storage b;
    if (raw_bind(fd, moved_now(hop, nhop, (const struct sockaddr *)&f->addr, f->addrlen, &b), f->addrlen) != 0 ||
        listen(fd, SOMAXCONN) != 0) {
        /* The descriptor stays a socket, not listening: accept() fails with EINVAL. */
        say("cannot listen again as fd %d (%s): %s; it comes back not listening", f->fd, f->path,
            strerror(errno));
    }
    place(fd, f);
    fcntl(f->fd, F_SETFL, f->flags & O_NONBLOCK);
}

/* New descriptor fd moved above every number the process had at the checkpoint, so that
 * placing one new descriptor at its number cannot close another still to be placed;
 * close-on-exec, its old number closed. -1 if it cannot be (or fd is -1). */
static int above_recorded(int fd)
{
    if (fd < 0)
        return -1;
    int moved = fcntl(fd, F_DUPFD_CLOEXEC, S.max_fd + 1 > 3 ? S.max_fd + 1 : 3);
    close(fd);
    return moved;
}

/* Put the two new descriptors `ends` at x->fd and y->fd, with their records' flags. They are
 * moved above every recorded number first, so that placing one cannot close the other. */
static int place_pair(int ends[2], const struct fd_rec *x, const struct fd_rec *y)
{
    for (int k = 0; k < 2; k++)
        ends[k] = above_recorded(ends[k]);
    if (ends[0] < 0 || ends[1] < 0)
        return -1;
    place(ends[0], x);
    place(ends[1], y);
    fcntl(x->fd, F_SETFL, x->flags & O_NONBLOCK);
    fcntl(y->fd, F_SETFL, y->flags & O_NONBLOCK);
    return 0;
}

/* The first record of pipe f->value in S.fds with write end `write`, or NULL. */
static const struct fd_rec *first_end(uint64_t ino, int write)
{
    for (int i = 0; i < S.nfds; i++)
        if (S.fds[i].kind == FD_PIPE && S.fds[i].value == ino && S.fds[i].sock_type == write)
            return &S.fds[i];
    return NULL;
}

/* A pipe inside the process: its first record makes it, with both ends at the first
 * descriptors recorded for them, and writes back its bytes in flight; other records of the
 * pipe are duplicates of those. */
static void pipe_again(const struct fd_rec *f)
{
    const struct fd_rec *r = first_end(f->value, 0), *w = first_end(f->value, 1);
    if (!r || !w)
        return;
    if (f != r && f != w) {
        const struct fd_rec *same = f->sock_type ? w : r;
        if (dup3(same->fd, f->fd, f->cloexec ? O_CLOEXEC : 0) < 0)
            say("cannot make fd %d (%s) again: %s", f->fd, f->path, strerror(errno));
        return;
    }
    if (f != (r < w ? r : w))
        return; /* made with the other end */
    int ends[2];
    if (pipe(ends) != 0 || place_pair(ends, r, w) != 0) {
        say("cannot make the pipe %s again: %s", f->path, strerror(errno));
        return;
    }
    const struct fd_rec *data = r < w ? r : w;
    if (data->timer[0] > 65536) /* more than a pipe holds by default: make room */
        fcntl(w->fd, F_SETPIPE_SZ, (int)data->timer[0]);
    int fl = fcntl(w->fd, F_GETFL);
    fcntl(w->fd, F_SETFL, fl | O_NONBLOCK); /* never wait here: a short write is said */
    for (int64_t done = 0; done < data->timer[0];) {
        ssize_t n = write(w->fd, inflight + data->timer[1] + done, (size_t)(data->timer[0] - done));
        if (n <= 0) {
            say("cannot put %lld bytes back into the pipe %s: %s", (long long)(data->timer[0] - done), f->path,
                strerror(errno));
            break;
        }
        done += n;
    }
    fcntl(w->fd, F_SETFL, fl);
}

/* The first record of Unix socket `ino` in S.fds, or NULL. */
static const struct fd_rec *first_sock(uint64_t ino)
{
    for (int i = 0; i < S.nfds; i++)
        if (S.fds[i].kind == FD_SOCKPAIR && S.fds[i].value == ino)
            return &S.fds[i];
    return NULL;
}

/* A socket pair inside the process: the first record of either end makes it, both ends at
 * the first descriptors recorded for them, and sends each end's waiting bytes from the
 * other; other records of an end are duplicates. */
static void sockpair_again(const struct fd_rec *f)
{
    const struct fd_rec *a = first_sock(f->value), *b = first_sock((uint64_t)f->timer[2]);
    if (!a || !b)
        return;
    if (f != a) {
        if (dup3(a->fd, f->fd, f->cloexec ? O_CLOEXEC : 0) < 0)
            say("cannot make fd %d (%s) again: %s", f->fd, f->path, strerror(errno));
        return;
    }
    if (b < a)
        return; /* made with its peer */
    int ends[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, ends) != 0 || place_pair(ends, a, b) != 0) {
        say("cannot make the socket pair %s again: %s", f->path, strerror(errno));
        return;
    }
    const struct fd_rec *to[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        const struct fd_rec *at = to[k], *from = to[1 - k];
        int room = (int)at->timer[0];
        if (room > 100000) /* more than the default holds: make room (the kernel doubles it) */
            setsockopt(from->fd, SOL_SOCKET, SO_SNDBUF, &room, sizeof room);
        for (int64_t done = 0; done < at->timer[0];) {
            ssize_t n = send(from->fd, inflight + at->timer[1] + done, (size_t)(at->timer[0] - done),
                             MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n <= 0) {
                say("cannot put %lld bytes back into %s: %s", (long long)(at->timer[0] - done), at->path,
                    strerror(errno));
                break;
            }
            done += n;
        }
    }
}

/* A pipe or socket at f->fd whose other end is closed: reads see end-of-file, writes fail
 * with EPIPE (SIGPIPE unless the program ignores it). */
static void closed_end(const struct fd_rec *f)
{
    int ends[2], keep;
    if (f->kind == FD_CLOSED_SOCK) {
        if (socketpair(AF_UNIX, f->sock_type ? f->sock_type : SOCK_STREAM, 0, ends) != 0) {
            say("cannot make fd %d (%s) again, closed: %s", f->fd, f->path, strerror(errno));
            return;
        }
        keep = 0;
    } else {
        if (pipe(ends) != 0) {
            say("cannot make fd %d (%s) again, closed: %s", f->fd, f->path, strerror(errno));
            return;
        }
        keep = (f->flags & O_ACCMODE) == O_RDONLY ? 0 : 1;
    }
    close(ends[1 - keep]);
    place(ends[keep], f);
    fcntl(f->fd, F_SETFL, f->flags & O_NONBLOCK);
}

/* ---- TCP connections to other hosts, connected again after a restart -------------------- */

/* A TCP connection whose other end is a process of the job on another host
 * (CAIRN_XFD_REMOTE) is made again once both processes run again, through the coordinators:
 * the end whose address sorts first listens on a port of its host and says so (LISTEN); the
 * other asks where (SEEK), connects, and names the connection. Then each end sends the other
 * the bytes that had been waiting at it, which the other sends back into the new
 * connection, followed by those it had sent that had not arrived: each end's stream goes on
 * where it stopped. The connection's key is its two addresses at the checkpoint, lower
 * first. A connection whose other end was not in the job (CAIRN_CKPT_EXTERNAL=close) comes
 * back closed (NONE). */
static void encode(const char *s, char *out, size_t len);
static void field(const char *line, const char *key, char *out, size_t len);

/* Whether a protocol line starts with `verb` (proto.h): the verb, then a space or the end. */
static int is_verb(const char *line, const char *verb)
{
    size_t n = strlen(verb);
    return strncmp(line, verb, n) == 0 && (line[n] == ' ' || line[n] == 0);
}

#define MEET_LIMIT_NS (120 * 1000000000ll)
#define MEET_MAGIC "CAIRNRM1"
#define MEET_KEY_MAX (2 * (INET6_ADDRSTRLEN + 8) + 2)

enum { R_WAIT, R_CONNECTING, R_GREET, R_BYTES, R_WRITE, R_DONE, R_CLOSED };

static struct remote_end {
    const struct cairn_img_xfd *x; /* the first record of its socket in this process */
    struct cairn_img_sock r;
    const uint8_t *recv, *unsent;  /* the bytes that waited at it; those it had sent */
    char key[MEET_KEY_MAX];
    int listens;
    int lfd, fd, state;
    /* What it sends first (its greeting), and what it reads: the other end's greeting, then
     * the bytes that had waited there, which it sends back after its own unsent bytes. */
    uint8_t out[8 + 4 + MEET_KEY_MAX + 8];
    size_t out_len, out_done;
    uint64_t recv_done;            /* of its own waiting bytes, sent to the other end */
    uint8_t in[8 + 4 + MEET_KEY_MAX + 8];
    size_t in_len, in_got;
    uint8_t *theirs;               /* the other end's waiting bytes (mapped) */
    uint64_t theirs_len, theirs_got, back_done, unsent_done;
} *rends;
static int nrends;

/* The socket address written as addr_text writes it, or -1. */
static int parse_addr(const char *text, struct sockaddr_storage *sa, socklen_t *len)
{
    char host[INET6_ADDRSTRLEN + 2];
    const char *colon = strrchr(text, ':');
    if (!colon || (size_t)(colon - text) >= sizeof host)
        return -1;
    memcpy(host, text, (size_t)(colon - text));
    host[colon - text] = 0;
    int port = atoi(colon + 1);
    memset(sa, 0, sizeof *sa);
    if (host[0] == '[' && host[strlen(host) - 1] == ']') {
        host[strlen(host) - 1] = 0;
        struct sockaddr_in6 *in6 = (void *)sa;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        *len = sizeof *in6;
        return inet_pton(AF_INET6, host + 1, &in6->sin6_addr) == 1 ? 0 : -1;
    }
    struct sockaddr_in *in = (void *)sa;
    in->sin_family = AF_INET;
    in->sin_port = htons((uint16_t)port);
    *len = sizeof *in;
    return inet_pton(AF_INET, host, &in->sin_addr) == 1 ? 0 : -1;
}

/* A new socket of the end's family, above every descriptor number the process had (so that
 * placing one end cannot close another's), non-blocking, with room for `need` bytes each way
 * (set before it connects or listens: the window is agreed then). */
static int remote_socket(const struct remote_end *e, uint64_t need)
{
    int high = above_recorded(socket((int)e->r.family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (high < 0)
        return -1;
    int size = need > (1u << 29) ? 1 << 30 : (int)(2 * need + (256 << 10));
    for (int rcv = 0; rcv < 2; rcv++)
        if (setsockopt(high, SOL_SOCKET, rcv ? SO_RCVBUFFORCE : SO_SNDBUFFORCE, &size, sizeof size) != 0)
            setsockopt(high, SOL_SOCKET, rcv ? SO_RCVBUF : SO_SNDBUF, &size, sizeof size);
    return high;
}

/* The bytes end e moves, for its buffers: its own waiting and unsent bytes, twice over. */
static uint64_t remote_need(const struct remote_end *e) { return 2 * (e->r.recv_len + e->r.send_len); }

/* Puts the connection of end e at every descriptor number its socket had, with the flags and
 * options each had, and closes the working copy. */
static void remote_place(struct remote_end *e)
{
    int one = 1;
    if (e->r.opts & CAIRN_SOCK_NODELAY)
        setsockopt(e->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (e->r.opts & CAIRN_SOCK_KEEPALIVE)
        setsockopt(e->fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    for (int i = 0; i < nxfds; i++) {
        const struct cairn_img_xfd *x = &xfds[i];
        if (x->kind != CAIRN_XFD_REMOTE || x->ino != e->x->ino)
            continue;
        if (dup3(e->fd, x->fd, x->cloexec ? O_CLOEXEC : 0) < 0)
            say("cannot put the connection to %s at fd %d: %s", e->key, x->fd, strerror(errno));
        fcntl(x->fd, F_SETFL, x->flags & O_NONBLOCK);
    }
    close(e->fd);
    e->fd = -1;
}

/* End e comes back closed: reads see end-of-file, writes fail with EPIPE. */
static void remote_closed(struct remote_end *e)
{
    int ends[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0)
        return;
    close(ends[1]);
    e->fd = above_recorded(ends[0]);
    if (e->fd >= 0)
        remote_place(e);
    if (e->lfd >= 0)
        close(e->lfd);
    e->lfd = -1;
    e->state = R_CLOSED;
}

/* Starts the exchange on e's new connection: the greeting goes out; the other end's is read. */
static void remote_greet(struct remote_end *e)
{
    size_t k = strlen(e->key), o = 0;
    memcpy(e->out, MEET_MAGIC, 8);
    o = 8;
    if (!e->listens) {
        /* The connecting end names the connection. */
        uint32_t kl = (uint32_t)k;
        memcpy(e->out + o, &kl, 4);
        memcpy(e->out + o + 4, e->key, k);
        o += 4 + k;
    }
    memcpy(e->out + o, &e->r.recv_len, 8);
    e->out_len = o + 8;
    e->out_done = 0;
    e->recv_done = e->back_done = e->unsent_done = 0;
    /* The listening end reads magic, key length, key and count; the other magic and count. */
    e->in_len = e->listens ? 8 + 4 : 8 + 8;
    e->in_got = 0;
    e->state = R_GREET;
}

/* Sends what e has to send next, as far as the socket takes it: its greeting, its own
 * waiting bytes (for the other end to send back), then, once the other end's waiting bytes
 * are all in, those back, then its unsent bytes. -1 when the connection failed. */
static int remote_send(struct remote_end *e)
{
    for (;;) {
        const uint8_t *p;
        uint64_t left, *done = NULL;
        if (e->out_done < e->out_len) {
            p = e->out + e->out_done, left = e->out_len - e->out_done;
        } else if (e->recv_done < e->r.recv_len) {
            p = e->recv + e->recv_done, left = e->r.recv_len - e->recv_done, done = &e->recv_done;
        } else if (e->state == R_WRITE && e->back_done < e->theirs_len) {
            p = e->theirs + e->back_done, left = e->theirs_len - e->back_done, done = &e->back_done;
        } else if (e->state == R_WRITE && e->unsent_done < e->r.send_len) {
            p = e->unsent + e->unsent_done, left = e->r.send_len - e->unsent_done, done = &e->unsent_done;
        } else {
            return 0;
        }
        ssize_t n = send(e->fd, p, left, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : -1;
        if (!done)
            e->out_done += (size_t)n;
        else
            *done += (uint64_t)n;
    }
}

/* Reads what e expects next: the other end's greeting, then its waiting bytes. Reads
 * nothing beyond them: what follows is the program's. -1 when the connection failed or the
 * greeting is wrong. */
static int remote_recv(struct remote_end *e)
{
    for (;;) {
        uint8_t *p;
        uint64_t want;
        if (e->state == R_GREET)
            p = e->in + e->in_got, want = e->in_len - e->in_got;
        else if (e->state == R_BYTES)
            p = e->theirs + e->theirs_got, want = e->theirs_len - e->theirs_got;
        else
            return 0;
        ssize_t n = want ? recv(e->fd, p, want, MSG_DONTWAIT) : 0;
        if (want && n == 0)
            return -1;
        if (n < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : -1;
        if (e->state == R_BYTES) {
            e->theirs_got += (uint64_t)n;
            if (e->theirs_got == e->theirs_len)
                e->state = R_WRITE;
            continue;
        }
        e->in_got += (size_t)n;
        if (e->in_got < e->in_len)
            continue;
        if (memcmp(e->in, MEET_MAGIC, 8) != 0)
            return -1;
        if (e->listens && e->in_len == 8 + 4) {
            uint32_t kl;
            memcpy(&kl, e->in + 8, 4);
            if (kl != strlen(e->key))
                return -1;
            e->in_len += kl + 8;
            continue;
        }
        if (e->listens && memcmp(e->in + 12, e->key, strlen(e->key)) != 0)
            return -1;
        memcpy(&e->theirs_len, e->in + e->in_len - 8, 8);
        if (e->theirs_len > (1ull << 31))
            return -1;
        if (e->theirs_len) {
            e->theirs = mmap(NULL, e->theirs_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (e->theirs == MAP_FAILED) {
                e->theirs = NULL;
                return -1;
            }
        }
        e->theirs_got = 0;
        e->state = e->theirs_len ? R_BYTES : R_WRITE;
    }
}

/* The connection of end e failed: a listening end waits for the next try, a connecting end
 * gives up (its restart says so). */
static void remote_drop(struct remote_end *e, const char *why)
{
    say("restart: the connection to %s: %s", e->key, why);
    if (e->fd >= 0)
        close(e->fd);
    e->fd = -1;
    if (e->theirs)
        munmap(e->theirs, e->theirs_len);
    e->theirs = NULL;
    e->state = e->listens ? R_WAIT : R_DONE;
}

/* One line from the coordinator's MEET answer: where to connect (PEER), or that the
 * connection comes back closed (NONE). */
static void remote_answer(const char *line)
{
    char key[MEET_KEY_MAX], addr[INET6_ADDRSTRLEN + 16];
    field(line, "key", key, sizeof key);
    for (int i = 0; i < nrends; i++) {
        struct remote_end *e = &rends[i];
        if (strcmp(e->key, key) != 0 || e->state != R_WAIT)
            continue;
        if (is_verb(line, CAIRN_V_NO_PEER)) {
            say("restart: the connection to %s comes back closed: its other end is not in the job", e->key);
            remote_closed(e);
        } else if (is_verb(line, CAIRN_V_PEER) && !e->listens) {
            struct sockaddr_storage sa;
            socklen_t sl;
            field(line, "addr", addr, sizeof addr);
            e->fd = parse_addr(addr, &sa, &sl) == 0 ? remote_socket(e, remote_need(e)) : -1;
            if (e->fd < 0 || (raw_connect(e->fd, (struct sockaddr *)&sa, sl) != 0 && errno != EINPROGRESS)) {
                remote_drop(e, strerror(errno));
                continue;
            }
            e->state = R_CONNECTING;
        }
    }
}

/* Every connection of this process to another host's process, made again (see above). */
static void remote_again(void)
{
    nrends = 0;
    for (int i = 0; i < nxfds; i++)
        nrends += xfds[i].kind == CAIRN_XFD_REMOTE;
    if (!nrends)
        return;
    size_t bytes = (size_t)nrends * sizeof *rends;
    rends = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (rends == MAP_FAILED) {
        say("restart: no memory to connect %d connections to other hosts again", nrends);
        return;
    }
    nrends = 0;
    for (int i = 0; i < nxfds; i++) {
        const struct cairn_img_xfd *x = &xfds[i];
        int first = x->kind == CAIRN_XFD_REMOTE;
        for (int j = 0; j < nrends && first; j++)
            first = rends[j].x->ino != x->ino;
        if (!first)
            continue;
        struct remote_end *e = &rends[nrends++];
        e->x = x;
        memcpy(&e->r, inflight + x->data_off, sizeof e->r);
        e->recv = (const uint8_t *)inflight + x->data_off + sizeof e->r;
        e->unsent = e->recv + e->r.recv_len;
        char lo[INET6_ADDRSTRLEN + 8], hi[INET6_ADDRSTRLEN + 8];
        addr_text(e->r.local, lo, sizeof lo);
        addr_text(e->r.peer, hi, sizeof hi);
        e->listens = strcmp(lo, hi) < 0;
        snprintf(e->key, sizeof e->key, "%s,%s", e->listens ? lo : hi, e->listens ? hi : lo);
        e->lfd = e->fd = -1;
    }
    /* The coordinator: the node's sub-coordinator this process belongs to now. */
    struct sockaddr_storage ca;
    socklen_t cl;
    int c = -1;
    if (parse_addr(CONTROL.coord_addr, &ca, &cl) == 0 && (c = socket(ca.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0)) >= 0 &&
        raw_connect(c, (struct sockaddr *)&ca, cl) != 0) {
        close(c);
        c = -1;
    }
    char job[384];
    encode(S.job, job, sizeof job);
    FILE *out = c >= 0 ? fdopen(dup(c), "w") : NULL;
    if (!out) {
        say("restart: cannot reach the coordinator at %s to connect %d connections to other hosts again; "
            "they come back unconnected", CONTROL.coord_addr, nrends);
        if (c >= 0)
            close(c);
        munmap(rends, bytes);
        return;
    }
    fprintf(out, CAIRN_V_MEET " token=%s job=%s proc=%d\n", CONTROL.token, job, CONTROL.proc);
    for (int i = 0; i < nrends; i++) {
        struct remote_end *e = &rends[i];
        char key[3 * MEET_KEY_MAX];
        encode(e->key, key, sizeof key);
        int close_unmatched = (e->x->how & CAIRN_XFD_CLOSE_UNMATCHED) != 0;
        if (!e->listens) {
            fprintf(out, CAIRN_V_SEEK " key=%s close=%d\n", key, close_unmatched);
            continue;
        }
        struct sockaddr_storage any = {.ss_family = (sa_family_t)e->r.family};
        e->lfd = remote_socket(e, remote_need(e));
        if (e->lfd < 0 ||
            raw_bind(e->lfd, (struct sockaddr *)&any, e->r.family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                                          : sizeof(struct sockaddr_in)) != 0 ||
            listen(e->lfd, 4) != 0) {
            say("restart: cannot listen for the connection to %s again: %s", e->key, strerror(errno));
            e->state = R_DONE;
            continue;
        }
        struct sockaddr_storage at;
        socklen_t al = sizeof at;
        raw_getsockname(e->lfd, (struct sockaddr *)&at, &al);
        unsigned port = ntohs(at.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&at)->sin6_port
                                                       : ((struct sockaddr_in *)&at)->sin_port);
        fprintf(out, CAIRN_V_LISTEN " key=%s port=%u close=%d\n", key, port, close_unmatched);
    }
    fclose(out);
    char lines[4096];
    size_t have = 0;
    int64_t deadline = mono_ns() + MEET_LIMIT_NS;
    int made = 0;
    struct pollfd *p = mmap(NULL, (size_t)(nrends + 1) * sizeof *p, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        say("restart: no memory to connect %d connections to other hosts again", nrends);
        close(c);
        munmap(rends, bytes);
        return;
    }
    for (;;) {
        int busy = 0;
        for (int i = 0; i < nrends; i++) {
            struct remote_end *e = &rends[i];
            int more = e->out_done < e->out_len || e->recv_done < e->r.recv_len ||
                       (e->state == R_WRITE && (e->back_done < e->theirs_len || e->unsent_done < e->r.send_len));
            if (e->state == R_WRITE && !more) {
                remote_place(e);
                made++;
                if (e->theirs)
                    munmap(e->theirs, e->theirs_len);
                e->theirs = NULL;
                if (e->lfd >= 0)
                    close(e->lfd);
                e->lfd = -1;
                e->state = R_DONE;
            }
            busy |= e->state < R_DONE;
            p[i].fd = e->state == R_WAIT ? e->lfd : e->state < R_DONE ? e->fd : -1;
            p[i].events = e->state == R_WAIT ? POLLIN
                          : e->state == R_CONNECTING ? POLLOUT
                                                     : POLLIN | (more ? POLLOUT : 0);
            p[i].revents = 0;
        }
        if (!busy || mono_ns() > deadline)
            break;
        p[nrends] = (struct pollfd){c, POLLIN, 0};
        if (poll(p, (nfds_t)nrends + 1, 1000) < 0 && errno != EINTR)
            break;
        if (p[nrends].revents) {
            ssize_t n = read(c, lines + have, sizeof lines - 1 - have);
            if (n <= 0) {
                close(c);
                c = -1;
            } else {
                have += (size_t)n;
                lines[have] = 0;
                char *nl;
                while ((nl = memchr(lines, '\n', have))) {
                    *nl = 0;
                    remote_answer(lines);
                    have -= (size_t)(nl + 1 - lines);
                    memmove(lines, nl + 1, have);
                }
            }
        }
        for (int i = 0; i < nrends; i++) {
            struct remote_end *e = &rends[i];
            if (!p[i].revents)
                continue;
            if (e->state == R_WAIT) {
                e->fd = above_recorded(raw_accept4(e->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC));
                if (e->fd >= 0)
                    remote_greet(e);
                continue;
            }
            if (e->state == R_CONNECTING) {
                int err = 0;
                socklen_t el = sizeof err;
                getsockopt(e->fd, SOL_SOCKET, SO_ERROR, &err, &el);
                if (err) {
                    remote_drop(e, strerror(err));
                    continue;
                }
                remote_greet(e);
            }
            if (remote_recv(e) != 0 || remote_send(e) != 0)
                remote_drop(e, "it failed while its bytes in flight were exchanged");
        }
    }
    for (int i = 0; i < nrends; i++) {
        struct remote_end *e = &rends[i];
        if (e->state < R_DONE)
            say("restart: the connection to %s could not be made again within %lld s; fd %d comes back "
                "unconnected", e->key, MEET_LIMIT_NS / 1000000000ll, e->x->fd);
        if (e->fd >= 0)
            close(e->fd);
        if (e->lfd >= 0)
            close(e->lfd);
        if (e->theirs)
            munmap(e->theirs, e->theirs_len);
    }
    if (c >= 0)
        close(c);
    if (S.verbose)
        say("restart: %d of %d connections to other hosts or trees made again in %.3f s", made, nrends,
            (mono_ns() - (deadline - MEET_LIMIT_NS)) / 1e9);
    munmap(p, (size_t)(nrends + 1) * sizeof *p);
    munmap(rends, bytes);
    rends = NULL;
    nrends = 0;
}

/* The processes of a tree restored together wait for each other here, once their own
 * descriptors are back, before any of them runs the program again (image.h). */
static void tree_barrier(void)
{
    if (CONTROL.tree <= 1)
        return;
    atomic_int *count = (atomic_int *)(uintptr_t)(CAIRN_IMG_HOLE_START + CAIRN_IMG_BARRIER_OFF);
    if (atomic_fetch_add(count, 1) + 1 >= CONTROL.tree) {
        syscall(SYS_futex, count, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
        return;
    }
    for (int waited = 0;;) {
        int v = atomic_load(count);
        if (v >= CONTROL.tree)
            return;
        struct timespec ts = {1, 0};
        if (syscall(SYS_futex, count, FUTEX_WAIT, v, &ts, NULL, 0) != 0 && errno == ETIMEDOUT &&
            ++waited >= 60) {
            say("restart: %d of the tree's %d processes did not come back within 60 s; going on", v,
                CONTROL.tree);
            return;
        }
    }
}

static void resume_process(void)
{
    take_moves();
    update_pid_env();
    find_host_pid();
    for (int s = 1; s < 65; s++) {
        if (s == SIGKILL || s == SIGSTOP)
            continue;
        uint64_t act[4] = {S.actions[s].handler, S.actions[s].flags, S.actions[s].restorer, S.actions[s].mask};
        syscall(SYS_rt_sigaction, s, act, NULL, 8);
    }
    for (int i = 0; i < S.nfds; i++) {
        struct fd_rec *f = &S.fds[i];
        if (f->kind == FD_CLOSED_PIPE || f->kind == FD_CLOSED_SOCK) {
            closed_end(f);
            continue;
        }
        if (f->kind == FD_LISTEN) {
            listen_again(f);
            continue;
        }
        if (f->kind == FD_PIPE) {
            pipe_again(f);
            continue;
        }
        if (f->kind == FD_SOCKPAIR) {
            sockpair_again(f);
            continue;
        }
        if (f->kind == FD_FIFO) {
            fifo_again(f);
            continue;
        }
        if (f->kind == FD_UNNAMED) {
            unnamed_again(f);
            continue;
        }
        if (f->kind != FD_REOPEN) {
            if (f->kind != FD_EPOLL)
                anon_again(f);
            continue;
        }
        int fd = open(f->path, f->flags & ~(O_CREAT | O_TRUNC | O_EXCL), 0);
        if (fd < 0) {
            say("cannot reopen %s as fd %d: %s", f->path, f->fd, strerror(errno));
            continue;
        }
        place(fd, f);
        /* What the process wrote after the checkpoint it will write again: a file it had
         * open for writing goes back to its size at the checkpoint (an appended log gets
         * no duplicate lines). */
        struct stat st;
        if ((f->flags & O_ACCMODE) != O_RDONLY && fstat(f->fd, &st) == 0 && st.st_size > f->size &&
            ftruncate(f->fd, f->size) != 0)
            say("cannot cut %s back to its %lld bytes at the checkpoint: %s", f->path,
                (long long)f->size, strerror(errno));
        if (!(f->flags & O_APPEND) && f->offset > 0)
            lseek(f->fd, f->offset, SEEK_SET);
    }
    /* Before the epoll sets: each watches the descriptions its descriptors lead to. */
    remote_again();
    drop_hop();
    epolls_again();
    tree_barrier();
    /* Every process of the tree has attached its segments again: those removed while
     * attached are removed again (the root's list). */
    for (int i = 0; i < nipc_doomed; i++)
        if (shmctl(ipc_doomed[i], IPC_RMID, NULL) != 0)
            say("cannot remove System V segment %d again: %s", ipc_doomed[i], strerror(errno));
    nipc_doomed = 0;
    if (S.cwd[0] && chdir(S.cwd) != 0)
        say("cannot return to %s: %s", S.cwd, strerror(errno));
    umask(S.umask);
    for (int r = 0; r < RLIM_NLIMITS; r++)
        setrlimit(r, &S.limits[r]);
    /* The manager is a thread too. */
    struct thread_rec me = {.tid = S.manager_tid};
    me.has_affinity = 0;
    if (&__rseq_offset) {
        me.rseq_addr = fs_base() + (uint64_t)__rseq_offset;
        me.rseq_len = __rseq_size < 32 ? 32 : __rseq_size;
    }
    restore_thread(&me);
    S.manager_tid = gettid_raw();
    /* Wait for every other thread to finish its own restore. */
    for (;;) {
        int v = atomic_load(&S.resumed);
        if (v >= S.nthreads)
            break;
        syscall(SYS_futex, &S.resumed, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
    }
    atomic_store(&S.resumed, 0);
    /* Every thread has left the restorer's code: give the hole back to the reservation it
     * was (the restorer's image and stacks in it are not needed any more). */
    scratch = NULL;
    munmap((void *)CAIRN_IMG_HOLE_START, CAIRN_IMG_HOLE_LEN);
    if (mmap((void *)CAIRN_IMG_HOLE_START, CAIRN_IMG_HOLE_LEN, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0) == MAP_FAILED)
        say("cannot reserve the restore area again: %s", strerror(errno));
    /* Pipes do not survive a restart: the handler's wake pipe is made again. */
    if (pipe2(S.wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        S.wake[0] = S.wake[1] = -1;
        say("pipe: %s; checkpoint requests by signal are off", strerror(errno));
    }
    snprintf(S.coord, sizeof S.coord, "%s", CONTROL.coord_addr);
    snprintf(S.token, sizeof S.token, "%s", CONTROL.token);
    if (S.coord[0]) {
        refresh_env("CAIRN_COORD_ADDR", S.coord);
        refresh_env("CAIRN_COORD_TOKEN", S.token);
    }
    S.proc = CONTROL.proc;
    S.affinity = CONTROL.affinity;
    if (S.verbose)
        say("restored: %.6f s from the restorer's start to running threads",
            (mono_ns() - CONTROL.restore_start_ns) / 1e9);
}

/* ---- the coordinator protocol (manager side) ----------------------------------------- */

/* Whether S.sock is still the library's connection. A program may close every descriptor it
 * does not know (Open MPI's launcher does in each child before exec), and the number may then
 * name a file of the program's, which the library must neither read, write nor close. */
static int sock_still_ours(void)
{
    struct stat st;
    return S.sock >= 0 && fstat(S.sock, &st) == 0 && S_ISSOCK(st.st_mode) && (uint64_t)st.st_ino == S.sock_ino;
}

static int send_line(const char *fmt, ...)
{
    if (!sock_still_ours())
        return -1;
    char buf[4096]; /* the protocol's longest line (MAX_LINE in proto.rs) */
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
    va_end(ap);
    if (n < 0 || n >= (int)sizeof buf - 1)
        return -1;
    buf[n++] = '\n';
    return write_full(S.sock, buf, (size_t)n);
}

/* Percent-encode s for a protocol value. */
static void encode(const char *s, char *out, size_t len)
{
    size_t o = 0;
    for (; *s && o + 4 < len; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("._/:,-", c))
            out[o++] = (char)c;
        else
            o += (size_t)snprintf(out + o, len - o, "%%%02X", c);
    }
    out[o] = 0;
}

static void decode(const char *s, char *out, size_t len)
{
    size_t o = 0;
    for (; *s && o + 1 < len; s++) {
        if (*s == '%' && s[1] && s[2]) {
            char hex[3] = {s[1], s[2], 0};
            out[o++] = (char)strtol(hex, NULL, 16);
            s += 2;
        } else {
            out[o++] = *s;
        }
    }
    out[o] = 0;
}

/* The value of key in a protocol line, decoded; "" when absent. */
static void field(const char *line, const char *key, char *out, size_t len)
{
    size_t kl = strlen(key);
    out[0] = 0;
    for (const char *p = strchr(line, ' '); p; p = strchr(p + 1, ' ')) {
        if (strncmp(p + 1, key, kl) == 0 && p[1 + kl] == '=') {
            char raw[4096];
            const char *v = p + 2 + kl;
            size_t n = strcspn(v, " \n");
            if (n >= sizeof raw)
                n = sizeof raw - 1;
            memcpy(raw, v, n);
            raw[n] = 0;
            decode(raw, out, len);
            return;
        }
    }
}

static int connect_coord(int restarted)
{
    char host[128];
    snprintf(host, sizeof host, "%s", S.coord);
    char *colon = strrchr(host, ':');
    if (!colon)
        return -1;
    *colon = 0;
    const char *port = colon + 1;
    /* Staggered back-off: first retry after (proc mod 64) ms, doubling up to 1 s, 30 s in all. */
    long delay_ms = 1 + S.proc % 64, waited = 0;
    /* Thousands of processes start together: spread even the first attempt. */
    struct timespec first = {0, (long)(S.proc % 64) * 1000000};
    nanosleep(&first, NULL);
    for (;;) {
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
        if (getaddrinfo(host, port, &hints, &ai) == 0) {
            for (struct addrinfo *a = ai; a; a = a->ai_next) {
                pthread_mutex_lock(&conn_lock);
                int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
                connecting = fd;
                pthread_mutex_unlock(&conn_lock);
                if (fd < 0)
                    continue;
                if (raw_connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
                    int one = 1;
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    freeaddrinfo(ai);
                    pthread_mutex_lock(&conn_lock);
                    S.sock = fd;
                    struct stat sst;
                    S.sock_ino = fstat(fd, &sst) == 0 ? (uint64_t)sst.st_ino : 0;
                    connecting = -1;
                    pthread_mutex_unlock(&conn_lock);
                    char host_name[256] = "", job[256], hn[256];
                    gethostname(host_name, sizeof host_name - 1);
                    encode(S.job, job, sizeof job);
                    encode(host_name, hn, sizeof hn);
                    struct stat ns;
                    unsigned long long pidns = stat("/proc/self/ns/pid", &ns) == 0 ? (unsigned long long)ns.st_ino : 0;
                    return send_line(CAIRN_V_HELLO " token=%s job=%s proc=%d pid=%d host=%s node=%d restarted=%d exec=%d "
                                     "member=%d nspid=%d ppid=%d ids=%d pidns=%llu",
                                     S.token, job, S.proc, S.host_pid, hn, S.node, restarted,
                                     S.execed && !restarted, S.member, (int)getpid(), (int)getppid(),
                                     S.nslevels >= 2, pidns);
                }
                pthread_mutex_lock(&conn_lock);
                connecting = -1;
                close(fd);
                pthread_mutex_unlock(&conn_lock);
            }
            freeaddrinfo(ai);
        }
        if (waited > 30000)
            return -1;
        struct timespec ts = {delay_ms / 1000, (delay_ms % 1000) * 1000000};
        nanosleep(&ts, NULL);
        waited += delay_ms;
        delay_ms = delay_ms * 2 > 1000 ? 1000 : delay_ms * 2;
    }
}

/* Read one line from the coordinator into buf (blocking, with the wake pipe watched).
 * Returns 1 for a line, 2 when the wake pipe fired, 0 on EOF, -1 on error. */
static char line_in[8192];
static size_t line_have;

/* A forked child's reader starts empty (what its parent had read is the parent's). */
static void reset_line_reader(void) { line_have = 0; }

static int read_line(char *buf, size_t len)
{
    for (;;) {
        char *nl = memchr(line_in, '\n', line_have);
        if (nl) {
            size_t n = (size_t)(nl - line_in);
            if (n >= len)
                n = len - 1;
            memcpy(buf, line_in, n);
            buf[n] = 0;
            line_have -= (size_t)(nl + 1 - line_in);
            memmove(line_in, nl + 1, line_have);
            return 1;
        }
        /* p[1] is the wake pipe; p[0] the coordinator (ignored by poll when there is none). */
        struct pollfd p[2] = {{S.sock, POLLIN, 0}, {S.wake[0], POLLIN, 0}};
        int r = poll(p, 2, -1);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (p[1].revents & (POLLNVAL | POLLERR | POLLHUP)) {
            S.wake[0] = -1; /* gone: poll ignores it from now on */
            if (S.sock < 0)
                return -1;
            continue;
        }
        if (p[1].revents & POLLIN) {
            char c[64];
            while (read(S.wake[0], c, sizeof c) > 0) {
            }
            return 2;
        }
        if (p[0].revents) {
            if ((p[0].revents & POLLNVAL) || !sock_still_ours())
                return -3; /* the program closed it */
            if (line_have == sizeof line_in)
                return -1;
            ssize_t n = read(S.sock, line_in + line_have, sizeof line_in - line_have);
            if (n <= 0)
                return n == 0 ? 0 : -1;
            line_have += (size_t)n;
        }
    }
}

/* One whole checkpoint of this process: stop, write to path, resume. Returns the bytes
 * written, 0 when this is the restored process coming back, or a negative errno. */
static int64_t checkpoint_once(uint64_t v, const char *path, int ask_coord)
{
    int64_t t0 = mono_ns();
    if (stop_threads() != 0) {
        release_threads();
        return -EAGAIN;
    }
    if (in_tree()) {
        int64_t deadline = mono_ns() + 500 * 1000000ll;
        each_number("/proc/self/fd", settle_tcp, &deadline, NULL);
    }
    if (ask_coord) {
        char line[256];
        send_line(CAIRN_V_SUSPENDED " ckpt=%llu", (unsigned long long)v);
        for (;;) {
            int r = read_line(line, sizeof line);
            if (r <= 0) {
                release_threads();
                return -ECONNRESET;
            }
            if (r == 1 && is_verb(line, CAIRN_V_WRITE))
                break;
            if (r == 1 && is_verb(line, CAIRN_V_RESUME)) {
                release_threads();
                send_line(CAIRN_V_RESUMED " ckpt=%llu", (unsigned long long)v);
                return -ECANCELED;
            }
        }
        field(line, "path", (char *)path, CAIRN_IMG_PATH_MAX);
        char block[16];
        field(line, "block", block, sizeof block);
        unsigned long b = strtoul(block, NULL, 10);
        hash_block = b >= 4096 && b <= (64ul << 20) ? (uint32_t)b : 0;
    }
    int64_t t1 = mono_ns();
    int64_t w = write_image(path, v);
    if (CONTROL.restarted && w == 0) {
        resume_process();
        return 0;
    }
    S.stop_ns = t1 - t0;
    S.write_ns = mono_ns() - t1;
    return w;
}

/* Why checkpoint_once returned err < 0, naming this process. */
static void failure(char *out, size_t len, int64_t err)
{
    char who[160];
    if (S.member)
        snprintf(who, sizeof who, "proc %d's process %d (pid %d, %s)", S.proc, (int)getpid(), S.host_pid,
                 program_invocation_short_name);
    else
        snprintf(who, sizeof who, "proc %d (pid %d, %s)", S.proc, S.host_pid, program_invocation_short_name);
    if (err == -ENOTRECOVERABLE && S.why[0])
        snprintf(out, len, "%s holds what a restart could not bring back: %s", who, S.why);
    else
        snprintf(out, len, "%s: %s", who,
                 strerror((int)-err));
}

static void run_standalone(void)
{
    char line[8];
    for (;;) {
        int r = read_line(line, sizeof line);
        if (r < 0 && S.wake[0] < 0)
            return; /* nothing can ask for a checkpoint any more */
        if (r != 2)
            continue;
        uint64_t v = ++S.checkpoints;
        char dir[CAIRN_IMG_PATH_MAX - 16], path[CAIRN_IMG_PATH_MAX];
        snprintf(dir, sizeof dir, "%s/v%llu", S.standalone_dir, (unsigned long long)v);
        mkdir(S.standalone_dir, 0700);
        mkdir(dir, 0700);
        snprintf(path, sizeof path, "%s/proc0.img", dir);
        int64_t w = checkpoint_once(v, path, 0);
        if (CONTROL.restarted && w == 0) {
            CONTROL.restarted = 0;
            release_threads();
            continue;
        }
        release_threads();
        if (w < 0) {
            char why[1280];
            failure(why, sizeof why, w);
            say("checkpoint %llu failed: %s", (unsigned long long)v, why);
        }
        else if (S.verbose)
            say("checkpoint %llu: %lld bytes in %s, stop %.6f s, write %.6f s", (unsigned long long)v,
                (long long)w, path, S.stop_ns / 1e9, S.write_ns / 1e9);
        else
            say("checkpoint %llu: %lld bytes in %s", (unsigned long long)v, (long long)w, path);
    }
}

/* RUN cmd=<command>: a slot of a job launched with `cairn launch --rsh` replaces itself by
 * `/bin/sh -c <command>` (what an rsh agent, `cairn rsh`, asked to run on this host). The
 * shell loads this library again and joins the job as the same process (exec=1), so the
 * command is checkpointed and restarted here. Only a process started as a slot does this,
 * and CAIRN_CKPT_SLOT leaves the environment first: neither the command nor what it starts
 * is a slot. execve from this thread is fine (the kernel ends the others); the manager's
 * signal mask, everything blocked, would pass to the command, so it gets an empty one.
 * Should the exec fail, the slot stays a slot and says why. */
static void run_in_slot(const char *line)
{
    static char cmd[4096];
    if (!S.slot) {
        say("the coordinator sent RUN, but this process is not a slot; ignored");
        return;
    }
    field(line, "cmd", cmd, sizeof cmd);
    char *argv[] = {"sh", "-c", cmd, NULL};
    sigset_t none, old;
    sigemptyset(&none);
    unsetenv("CAIRN_CKPT_SLOT");
    pthread_sigmask(SIG_SETMASK, &none, &old);
    execve("/bin/sh", argv, environ);
    int err = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    setenv("CAIRN_CKPT_SLOT", "1", 1);
    say("the slot cannot run its command: exec /bin/sh: %s", strerror(err));
}

static void run_coordinated(int restarted)
{
    char line[4096];
    if (connect_coord(restarted) != 0) {
        say("cannot reach the coordinator at %s; checkpoints of this process will fail", S.coord);
        return;
    }
    for (;;) {
        int r = read_line(line, sizeof line);
        if (r == 2) {
            send_line(CAIRN_V_CHECKPOINT);
            continue;
        }
        if (r == -3) {
            /* Normal between fork and exec in a launcher that closes what it does not know; the
             * exec'd program connects again. Otherwise the coordinator sees the connection go
             * and a checkpoint fails, naming this process. */
            if (S.verbose)
                say("the program closed fd %d, the connection to the coordinator: checkpoints of this process "
                    "fail until it execs",
                    S.sock);
            S.sock = -1;
            return;
        }
        if (r <= 0) {
            say("lost the coordinator; checkpointing stops, the program goes on");
            close(S.sock);
            S.sock = -1;
            return;
        }
        if (is_verb(line, CAIRN_V_WELCOME)) {
            char pid[24] = "";
            field(line, "pid", pid, sizeof pid);
            if (atoi(pid) > 0)
                S.host_pid = atoi(pid);
            continue;
        }
        if (is_verb(line, CAIRN_V_DENIED)) {
            say("the coordinator refused this process: %s", line);
            return;
        }
        if (is_verb(line, CAIRN_V_RUN)) {
            run_in_slot(line);
            continue;
        }
        if (is_verb(line, CAIRN_V_SUSPEND)) {
            char vs[32];
            field(line, "ckpt", vs, sizeof vs);
            uint64_t v = strtoull(vs, NULL, 10);
            static char path[CAIRN_IMG_PATH_MAX];
            int64_t w = checkpoint_once(v, path, 1);
            if (CONTROL.restarted && w == 0) {
                /* This is the restored process: its old connection is gone. */
                CONTROL.restarted = 0;
                S.sock = -1;
                reset_line_reader();
                release_threads();
                run_coordinated(1);
                return;
            }
            if (w == -ECANCELED)
                continue;
            if (w < 0) {
                /* Encoded to fit the protocol's longest line with the rest of it. */
                char why[1280], enc[3900];
                failure(why, sizeof why, w);
                encode(why, enc, sizeof enc);
                send_line(CAIRN_V_FAILED " ckpt=%llu why=%s", (unsigned long long)v, enc);
            } else {
                send_line(CAIRN_V_WRITTEN " ckpt=%llu bytes=%lld", (unsigned long long)v, (long long)w);
            }
            /* Threads stay stopped until the job agrees. */
            for (;;) {
                r = read_line(line, sizeof line);
                if (r <= 0 || (r == 1 && is_verb(line, CAIRN_V_RESUME)))
                    break;
            }
            char ok[8] = "1";
            if (r == 1)
                field(line, "ok", ok, sizeof ok);
            if (strcmp(ok, "1") != 0 && path[0])
                unlink(path);
            release_threads();
            if (r <= 0) {
                say("lost the coordinator during a checkpoint; the program goes on");
                return;
            }
            send_line(CAIRN_V_RESUMED " ckpt=%llu", (unsigned long long)v);
        }
    }
}

static void *manager_main(void *arg)
{
    (void)arg;
    S.manager_tid = gettid_raw();
    prctl(PR_SET_NAME, "cairn-ckpt", 0, 0, 0);
    /* The manager never takes the checkpoint signal: it runs the checkpoint. */
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, NULL);
    if (S.coord[0])
        run_coordinated(0);
    else
        run_standalone();
    return NULL;
}

/* ---- keeping the checkpoint signal deliverable ------------------------------------- */

/* Programs that block every signal, or install their own handler for ours, must still
 * checkpoint: the wrappers take our signal out of masks and keep our handler. */
typedef int (*sigprocmask_fn)(int, const sigset_t *, sigset_t *);
typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);

static sigset_t without_ours(const sigset_t *set)
{
    sigset_t s = *set;
    if (S.enabled)
        sigdelset(&s, S.sig);
    return s;
}

EXPORT int sigprocmask(int how, const sigset_t *set, sigset_t *old)
{
    static sigprocmask_fn real;
    if (!real)
        real = (sigprocmask_fn)dlsym(RTLD_NEXT, "sigprocmask");
    if (set && (how == SIG_BLOCK || how == SIG_SETMASK) && gettid_raw() != S.manager_tid) {
        sigset_t s = without_ours(set);
        return real(how, &s, old);
    }
    return real(how, set, old);
}

EXPORT int pthread_sigmask(int how, const sigset_t *set, sigset_t *old)
{
    static int (*real)(int, const sigset_t *, sigset_t *);
    if (!real)
        real = (int (*)(int, const sigset_t *, sigset_t *))dlsym(RTLD_NEXT, "pthread_sigmask");
    if (set && (how == SIG_BLOCK || how == SIG_SETMASK) && gettid_raw() != S.manager_tid) {
        sigset_t s = without_ours(set);
        return real(how, &s, old);
    }
    return real(how, set, old);
}

EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    static sigaction_fn real;
    if (!real)
        real = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
    if (S.enabled && sig == S.sig && act) {
        /* Ours: pretend the change was made, report the default as the old one. */
        if (old)
            memset(old, 0, sizeof *old);
        return 0;
    }
    return real(sig, act, old);
}

EXPORT sighandler_t signal(int sig, sighandler_t h)
{
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = h;
    sa.sa_flags = SA_RESTART;
    if (sigaction(sig, &sa, &old) != 0)
        return SIG_ERR;
    return old.sa_handler;
}

/* ---- waits the checkpoint interrupts are waited again ----------------------------------- */

/* The checkpoint signal's handler interrupts a thread blocked in poll, select or epoll_wait,
 * which then fail with EINTR whatever SA_RESTART says. A program that blocks all its own
 * signals (and reads them from a signalfd, as `script` does) never expects EINTR from them,
 * and would fail. So these calls are wrapped: when one fails with EINTR and a checkpoint
 * stopped the process meanwhile (S.release moved), it waits again for what is left of its
 * timeout. Another signal arriving in the same moment is then not reported by EINTR; its
 * handler has run. */

/* Milliseconds left of a timeout of `ms` (negative: none) started at `t0`. */
static int ms_left(int ms, int64_t t0)
{
    if (ms < 0)
        return ms;
    int64_t left = (int64_t)ms - (mono_ns() - t0) / 1000000;
    return left > 0 ? (int)left : 0;
}

/* What is left of timeout `ts` (NULL: none) started at t0, in `out`; returns ts or out. */
static const struct timespec *ts_left(const struct timespec *ts, int64_t t0, struct timespec *out)
{
    if (!ts)
        return NULL;
    int64_t left = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec - (mono_ns() - t0);
    if (left < 0)
        left = 0;
    out->tv_sec = left / 1000000000;
    out->tv_nsec = left % 1000000000;
    return out;
}

static int stopped_since(unsigned gen, int r) { return r < 0 && errno == EINTR && atomic_load(&S.release) != gen; }

EXPORT int poll(struct pollfd *fds, nfds_t n, int ms)
{
    static int (*real)(struct pollfd *, nfds_t, int);
    if (!real)
        real = (int (*)(struct pollfd *, nfds_t, int))dlsym(RTLD_NEXT, "poll");
    int64_t t0 = mono_ns();
    for (;;) {
        unsigned gen = atomic_load(&S.release);
        int r = real(fds, n, ms_left(ms, t0));
        if (!stopped_since(gen, r))
            return r;
    }
}

EXPORT int __poll_chk(struct pollfd *fds, nfds_t n, int ms, size_t fdslen)
{
    (void)fdslen; /* glibc's check is its own business; the call is poll's */
    return poll(fds, n, ms);
}

EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask)
{
    static int (*real)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *);
    if (!real)
        real = (int (*)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *))dlsym(RTLD_NEXT, "ppoll");
    sigset_t m;
    if (mask)
        m = without_ours(mask);
    int64_t t0 = mono_ns();
    for (;;) {
        unsigned gen = atomic_load(&S.release);
        struct timespec left;
        int r = real(fds, n, ts_left(ts, t0, &left), mask ? &m : NULL);
        if (!stopped_since(gen, r))
            return r;
    }
}

EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask, size_t fdslen)
{
    (void)fdslen;
    return ppoll(fds, n, ts, mask);
}

EXPORT int select(int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv)
{
    static int (*real)(int, fd_set *, fd_set *, fd_set *, struct timeval *);
    if (!real)
        real = (int (*)(int, fd_set *, fd_set *, fd_set *, struct timeval *))dlsym(RTLD_NEXT, "select");
    fd_set sr, sw, se;
    if (r)
        sr = *r;
    if (w)
        sw = *w;
    if (e)
        se = *e;
    for (;;) {
        unsigned gen = atomic_load(&S.release);
        int got = real(n, r, w, e, tv); /* Linux leaves in tv what is left */
        if (!stopped_since(gen, got))
            return got;
        if (r)
            *r = sr;
        if (w)
            *w = sw;
        if (e)
            *e = se;
    }
}

EXPORT int epoll_wait(int epfd, struct epoll_event *ev, int max, int ms)
{
    static int (*real)(int, struct epoll_event *, int, int);
    if (!real)
        real = (int (*)(int, struct epoll_event *, int, int))dlsym(RTLD_NEXT, "epoll_wait");
    int64_t t0 = mono_ns();
    for (;;) {
        unsigned gen = atomic_load(&S.release);
        int r = real(epfd, ev, max, ms_left(ms, t0));
        if (!stopped_since(gen, r))
            return r;
    }
}

EXPORT int epoll_pwait(int epfd, struct epoll_event *ev, int max, int ms, const sigset_t *mask)
{
    static int (*real)(int, struct epoll_event *, int, int, const sigset_t *);
    if (!real)
        real = (int (*)(int, struct epoll_event *, int, int, const sigset_t *))dlsym(RTLD_NEXT, "epoll_pwait");
    sigset_t m;
    if (mask)
        m = without_ours(mask);
    int64_t t0 = mono_ns();
    for (;;) {
        unsigned gen = atomic_load(&S.release);
        int r = real(epfd, ev, max, ms_left(ms, t0), mask ? &m : NULL);
        if (!stopped_since(gen, r))
            return r;
    }
}
