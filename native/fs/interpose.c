/*
** interpose.c: the core of libcairn-fs.so, the LD_PRELOAD library that puts Cairn's in-memory
** chunk store (store.h) under a path prefix, so that unmodified programs write checkpoint
** files at memory speed.
**
** A call is ours when its path is absolute and begins with the prefix followed by '/' or the
** end of the string (one string compare for every other path), or when it takes a descriptor
** this library handed out. Everything else goes to libc untouched. A relative path is ours
** against a directory descriptor of ours, or against the working directory (AT_FDCWD) while
** that is a virtual one under the prefix (interpose_cwd.c); otherwise it passes through, at
** the cost of one atomic load. A path that climbs out of the prefix ("/cairn/../etc", or
** "../.." from a virtual working directory) is not ours; it passes through resolved by name.
** Paths are normalised with cairn_store_normalize.
**
** This file is divided into:
**   - the table of real functions and its fault hook;
**   - configuration from the environment and the attachment of the store;
**   - paths: which calls are ours, and their normalised names in the store;
**   - the descriptor table (fd -> shared open file description);
**   - opening, reading, writing and every other call that takes a descriptor;
**   - stat and statfs results.
** Calls on names and directory streams are in interpose_dir.c; stdio is in
** interpose_stdio.c; the working directory in interpose_cwd.c; exec and its relatives in
** interpose_exec.c.
**
** Configuration (read once, on the first call that looks at a path):
**   CAIRN_TIERS_MEM_PREFIX      mount point, default /cairn
**   CAIRN_TIERS_MEM_SIZE        memory pool, default 256M (sizes: a number with an optional
**                               K, M, G or T suffix, powers of 1024)
**   CAIRN_TIERS_MEM_CHUNK       chunk size, default 1M, a multiple of 4096
**   CAIRN_TIERS_MEM_MAX_FILES   file records, default 4096
**   CAIRN_TIERS_MEM_SPILL_DIR   directory of the spill file; default none (no spill)
**   CAIRN_TIERS_MEM_SPILL_SIZE  spill bytes, default 1G (only with a spill directory)
**   CAIRN_TIERS_MEM_STORE       node (default: one store per node) or process
**   CAIRN_JOB, else SLURM_JOB_ID, else "local"; CAIRN_NODE; CAIRN_TOPOLOGY_SIM_NODES with the
**   launcher's local rank and size, to name the store (see cfg_node).
** A bad value is reported in one line on stderr and turns the prefix off: every call passes
** through, as if nothing were configured. The library never exits or aborts.
**
** The store is attached on the first call under the prefix, creating it if needed; the
** constructor only resolves the real functions (and registers the fork handlers). If the
** attach fails (say /dev/shm is too
** small), that call and every later one under the prefix fail with the attach's errno, and
** one line says why.
**
** Fault injection: CAIRN_FS_FAULT=<call>:<n>:<errno> makes the n-th call (counting from 1) of
** the real function <call> (a name of CAIRN_REAL_CALLS in interpose.h, e.g. write, pwrite,
** open) fail with <errno>, given as a number or a name such as EIO. The calls the store makes
** through libc (posix_fallocate and ftruncate sizing its segment, mmap) pass through the same
** table, so posix_fallocate:1:ENOSPC plays a /dev/shm too small; its own reads and writes use
** raw system calls and cannot be failed this way.
**
** Descriptors. Each open file of ours owns a real kernel descriptor as a placeholder, so
** numbers never collide with the kernel's, dup2 onto 0 or 1 works and select's limits hold.
** The placeholder is /dev/null opened O_PATH (O_CLOEXEC if the caller asked): anything that
** reaches it without going through this library -- glibc's own stdio on a descriptor dup'ed
** onto 1, a program exec'ed with the descriptor inherited -- fails with EBADF instead of
** silently reading nothing from or writing into /dev/null. A table indexed by descriptor maps
** each placeholder to a shared, reference-counted open file description (offset, flags, store
** handle); dup, dup2, dup3 and fcntl(F_DUPFD*) share it as the kernel would.
**
** A descriptor closed behind this library's back (a raw syscall, a libc-internal close) leaves
** a stale entry; it is dropped when the kernel hands the number out again through any open,
** dup or fcntl(F_DUPFD) of ours or passed through.
**
** Opening. O_CREAT, O_EXCL, O_TRUNC, O_APPEND and the access modes behave as on Linux; O_SYNC
** and O_DSYNC sync the spill file after each write; O_DIRECTORY (or a trailing '/') on a file
** is ENOTDIR; a directory opens read-only (for fdopendir, fstat, openat relative to it; read
** is EISDIR); O_PATH gives a descriptor for fstat and *at calls only; O_TMPFILE is
** EOPNOTSUPP (glibc's tmpfile and mkostemp callers fall back); O_NONBLOCK, O_DIRECT, O_NOATIME
** and O_NOFOLLOW are kept for F_GETFL and otherwise ignored.
**
** Threads, fork and exec. Descriptions carry a mutex that orders offset updates; table slots
** change under one mutex and are read without it on the fast path (a descriptor that is not
** ours costs one atomic load). After fork the child has a copy of the table, so parent and
** child no longer share offsets; the store itself is shared. vfork is fork, so that a vfork
** child cannot change its parent's table. Across exec (and posix_spawn, system, popen) the
** inheritable descriptors of ours and the virtual working directory are passed to the new
** program in its environment, where the constructor takes them over (interpose_exec.c); from
** then on each program has its own offsets. While descriptor 0, 1 or 2 is ours, stdin,
** stdout or stderr is a stream of ours over it (interpose_stdio.c), so printf reaches the
** store.
**
** Not intercepted (and why): symbolic links, hard links and special files (the store has
** none: making one under the prefix fails with EPERM, a hard link across the prefix with
** EXDEV); extended attributes (answered as by a file system without them); memory mapping
** (mmap of our descriptor fails with ENODEV: chunks are not contiguous); copy_file_range,
** sendfile and splice with a descriptor of ours fail with EXDEV or EINVAL so that cp and cat
** fall back to read and write; file locks (flock, fcntl) are accepted and do nothing; chmod,
** chown and utimes are accepted and not recorded (a file's mode is set when it is created,
** from the mode and the process's umask, which the umask wrapper follows); an open file that
** is unlinked can no longer be read (ESTALE); O_APPEND is atomic within a process, not across
** processes. Statically linked programs and libc-internal calls (nftw, glibc's own stdio on
** its own FILEs) cannot be seen by any LD_PRELOAD library.
*/
#include "interpose.h"

#include <dlfcn.h>
#include <limits.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/sysmacros.h>

/* ---------------------------------------------------------------------------------------- */
/* The table of real functions and its fault hook                                          */
/* ---------------------------------------------------------------------------------------- */

#define CAIRN_REAL_NAME(name, ret, params, fail) #name,
static const char *const real_names[CAIRN_SYS_COUNT] = {CAIRN_REAL_CALLS(CAIRN_REAL_NAME)};
#undef CAIRN_REAL_NAME

void *cairn_real_fn[CAIRN_SYS_COUNT];
int cairn_fault_index = -1;
static long fault_at;
static int fault_errno;
static long fault_calls;
static pthread_once_t real_once = PTHREAD_ONCE_INIT;
/* Set while this thread is inside dlsym: a call dlsym makes into us cannot be resolved. */
static __thread int resolving __attribute__((tls_model("initial-exec")));

static const struct {
    const char *name;
    int value;
} errno_names[] = {
    {"EIO", EIO},       {"ENOSPC", ENOSPC}, {"EINTR", EINTR},   {"EAGAIN", EAGAIN},
    {"ENOMEM", ENOMEM}, {"EBADF", EBADF},   {"EACCES", EACCES}, {"EMFILE", EMFILE},
    {"ENFILE", ENFILE}, {"EDQUOT", EDQUOT}, {"EPERM", EPERM},   {"ENOENT", ENOENT},
};

static int parse_errno(const char *s)
{
    for (size_t i = 0; i < sizeof errno_names / sizeof errno_names[0]; i++)
        if (strcmp(s, errno_names[i].name) == 0)
            return errno_names[i].value;
    char *end;
    long v = strtol(s, &end, 10);
    return (*s && !*end && v > 0 && v < 4096) ? (int)v : -1;
}

/* CAIRN_FS_FAULT=<call>:<n>:<errno>. */
static void fault_parse(void)
{
    const char *v = getenv("CAIRN_FS_FAULT");
    if (!v || !*v)
        return;
    char call[64], err[32];
    long n;
    int index = -1;
    if (sscanf(v, "%63[^:]:%ld:%31s", call, &n, err) == 3 && n > 0)
        for (int i = 0; i < CAIRN_SYS_COUNT; i++)
            if (strcmp(call, real_names[i]) == 0)
                index = i;
    int e = index >= 0 ? parse_errno(err) : -1;
    if (e < 0) {
        cairn_log("CAIRN_FS_FAULT=%s is not <call>:<n>:<errno> with a call this library "
                  "wraps; no fault is injected", v);
        return;
    }
    fault_at = n;
    fault_errno = e;
    cairn_fault_index = index;
}

static void real_init(void)
{
    int saved = errno;
    resolving = 1;
    for (int i = 0; i < CAIRN_SYS_COUNT; i++)
        __atomic_store_n(&cairn_real_fn[i], dlsym(RTLD_NEXT, real_names[i]), __ATOMIC_RELEASE);
    resolving = 0;
    fault_parse();
    errno = saved;
}

void *cairn_real_slow(int index)
{
    void *p = __atomic_load_n(&cairn_real_fn[index], __ATOMIC_ACQUIRE);
    if (p == NULL) {
        if (resolving) {
            errno = ENOSYS;
            return NULL;
        }
        pthread_once(&real_once, real_init);
        p = __atomic_load_n(&cairn_real_fn[index], __ATOMIC_ACQUIRE);
        if (p == NULL) {
            errno = ENOSYS; /* this libc lacks it (closefrom before glibc 2.34, ...) */
            return NULL;
        }
    }
    if (index == cairn_fault_index &&
        __atomic_add_fetch(&fault_calls, 1, __ATOMIC_RELAXED) == fault_at) {
        errno = fault_errno;
        return NULL;
    }
    return p;
}

void cairn_log(const char *fmt, ...)
{
    char line[1024];
    int saved = errno;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n > sizeof line - 2)
        n = sizeof line - 2;
    line[n++] = '\n';
    static const char tag[] = "cairn-fs: ";
    struct iovec v[2] = {{(void *)tag, sizeof tag - 1}, {line, (size_t)n}};
    (void)CAIRN_REAL(writev, 2, v, 2);
    errno = saved;
}

/* ---------------------------------------------------------------------------------------- */
/* Configuration                                                                            */
/* ---------------------------------------------------------------------------------------- */

/* The next component of a path at or after r (skipping '/'), its length in *len (0 at the
 * end); the caller goes on from the returned pointer + *len. */
static const char *component(const char *r, size_t *len)
{
    while (*r == '/')
        r++;
    const char *e = r;
    while (*e && *e != '/')
        e++;
    *len = (size_t)(e - r);
    return r;
}

/* Resolves "." and ".." in the absolute path in by name, into out; a trailing '/' stays. */
static void lexical(const char *in, char *out, size_t len)
{
    size_t n = 0, k;
    for (const char *r = component(in, &k); k > 0; r = component(r + k, &k)) {
        if (k == 2 && r[0] == '.' && r[1] == '.') {
            while (n > 0 && out[n - 1] != '/')
                n--;
            n = n > 0 ? n - 1 : 0;
        } else if (k > 0 && !(k == 1 && r[0] == '.') && n + k + 3 <= len) {
            out[n++] = '/';
            memcpy(out + n, r, k);
            n += k;
        }
    }
    size_t in_len = strlen(in);
    if (n == 0 || (in_len > 1 && in[in_len - 1] == '/'))
        out[n++] = '/';
    out[n] = 0;
}

static struct cairn_cfg cfg;
static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;

/* Reports a bad value and returns 0 (the prefix is off). */
static int cfg_bad(const char *var, const char *value, const char *what)
{
    cairn_log("%s=%s %s; the in-memory file system is off for this process and its paths "
              "go to the real file system",
              var, value, what);
    return 0;
}

/* A number with an optional K, M, G or T suffix (powers of 1024). */
static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -1;
    int shift = 0;
    switch (*end) {
    case 'K': case 'k': shift = 10; end++; break;
    case 'M': case 'm': shift = 20; end++; break;
    case 'G': case 'g': shift = 30; end++; break;
    case 'T': case 't': shift = 40; end++; break;
    default: break;
    }
    if (*end || v > (UINT64_MAX >> shift))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

static int parse_long(const char *s, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno)
        return -1;
    *out = v;
    return 0;
}

/* The size in var (dflt when unset), at least min bytes. 0 after reporting a bad value. */
static int cfg_size(const char *var, const char *dflt, uint64_t min, const char *too_small,
                    uint64_t *out)
{
    const char *v = getenv(var);
    if (!v)
        v = dflt;
    if (parse_size(v, out) < 0)
        return cfg_bad(var, v, "is not a size (a number, optionally followed by K, M or G)");
    if (*out < min)
        return cfg_bad(var, v, too_small);
    return 1;
}

/* The launcher's local rank and local size, if it exports them. */
static int local_rank(long *rank, long *size)
{
    static const char *const pairs[][2] = {
        {"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
        {"MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
        {"SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        const char *r = getenv(pairs[i][0]), *n = getenv(pairs[i][1]);
        if (!r || !n)
            continue;
        /* SLURM_NTASKS_PER_NODE may read "4(x2)": its leading number is what we want. */
        char *end;
        long nv = strtol(n, &end, 10);
        if (parse_long(r, rank) == 0 && end != n && *rank >= 0 && nv > *rank) {
            *size = nv;
            return 1;
        }
    }
    return 0;
}

/*
** The node part of the store name. A node store: CAIRN_NODE, else the simulated node of this
** rank (local rank * CAIRN_TOPOLOGY_SIM_NODES / local size), else 0. A process store: -(local
** rank + 1) when the launcher says the local rank, so that a restarted rank finds the store of
** its predecessor again, else -(pid). Returns 0 after reporting a bad value.
*/
static int cfg_node(int per_process, long *node)
{
    long rank = 0, size = 1, k;
    int known = local_rank(&rank, &size);
    if (per_process) {
        *node = known ? -(rank + 1) : -(long)getpid();
        return 1;
    }
    const char *v = getenv("CAIRN_NODE");
    if (v) {
        if (parse_long(v, node) < 0 || *node < 0)
            return cfg_bad("CAIRN_NODE", v, "is not a node number");
        return 1;
    }
    *node = 0;
    v = getenv("CAIRN_TOPOLOGY_SIM_NODES");
    if (v) {
        if (parse_long(v, &k) < 0 || k < 0)
            return cfg_bad("CAIRN_TOPOLOGY_SIM_NODES", v, "is not a number of nodes");
        if (k > 0 && known)
            *node = rank * k / size;
    }
    return 1;
}

static int cfg_parse(struct cairn_cfg *c)
{
    const char *v = getenv("CAIRN_TIERS_MEM_PREFIX");
    if (!v)
        v = "/cairn";
    if (v[0] != '/' || strlen(v) >= sizeof c->prefix)
        return cfg_bad("CAIRN_TIERS_MEM_PREFIX", v, "is not an absolute path");
    /* Spelled the way paths under it are compared: "/a//b/./c/" is "/a/b/c". */
    lexical(v, c->prefix, sizeof c->prefix);
    size_t n = strlen(c->prefix);
    if (n > 1 && c->prefix[n - 1] == '/')
        c->prefix[--n] = 0;
    if (n == 1)
        return cfg_bad("CAIRN_TIERS_MEM_PREFIX", v, "is the root of the file system");
    c->plen = n;

    static const char not_pages[] = "is not a positive multiple of 4096";
    if (!cfg_size("CAIRN_TIERS_MEM_CHUNK", "1M", 4096, not_pages, &c->chunk))
        return 0;
    if (c->chunk % 4096)
        return cfg_bad("CAIRN_TIERS_MEM_CHUNK", getenv("CAIRN_TIERS_MEM_CHUNK"), not_pages);
    if (!cfg_size("CAIRN_TIERS_MEM_SIZE", "256M", c->chunk,
                  "is smaller than one chunk (CAIRN_TIERS_MEM_CHUNK)", &c->size) ||
        !cfg_size("CAIRN_TIERS_MEM_SPILL_SIZE", "1G", 0, "", &c->spill_size))
        return 0;
    long files = 4096;
    v = getenv("CAIRN_TIERS_MEM_MAX_FILES");
    if (v && (parse_long(v, &files) < 0 || files < 1 || files > (1L << 24)))
        return cfg_bad("CAIRN_TIERS_MEM_MAX_FILES", v, "is not a number of files (1 to 2^24)");
    c->max_files = (uint32_t)files;
    v = getenv("CAIRN_TIERS_MEM_STORE");
    if (v && strcmp(v, "node") != 0 && strcmp(v, "process") != 0)
        return cfg_bad("CAIRN_TIERS_MEM_STORE", v, "is neither node nor process");
    c->per_process = v && strcmp(v, "process") == 0;

    const char *job = getenv("CAIRN_JOB");
    if (!job || !*job)
        job = getenv("SLURM_JOB_ID");
    if (!job || !*job)
        job = "local";
    long node;
    if (!cfg_node(c->per_process, &node))
        return 0;
    if (cairn_store_name(c->name, sizeof c->name, (unsigned)getuid(), job, node) < 0)
        return cfg_bad("CAIRN_JOB", job, "makes a store name that is too long");

    c->spill[0] = 0;
    v = getenv("CAIRN_TIERS_MEM_SPILL_DIR");
    if (v && *v) {
        if (v[0] != '/')
            return cfg_bad("CAIRN_TIERS_MEM_SPILL_DIR", v, "is not an absolute path");
        if (strncmp(v, c->prefix, c->plen) == 0 && (v[c->plen] == '/' || v[c->plen] == 0))
            return cfg_bad("CAIRN_TIERS_MEM_SPILL_DIR", v, "lies under the prefix");
        /* <dir>/cairn-<uid>-<job>-n<node>.spill: the shm name without its '/'. */
        int len = snprintf(c->spill, sizeof c->spill, "%s/%s.spill", v, c->name + 1);
        if (len < 0 || (size_t)len >= sizeof c->spill)
            return cfg_bad("CAIRN_TIERS_MEM_SPILL_DIR", v, "is too long");
    }
    return 1;
}

static void cfg_load(void)
{
    int saved = errno;
    cfg.enabled = cfg_parse(&cfg);
    errno = saved;
}

const struct cairn_cfg *cairn_cfg(void)
{
    pthread_once(&cfg_once, cfg_load);
    return &cfg;
}

/* ---------------------------------------------------------------------------------------- */
/* The store                                                                                */
/* ---------------------------------------------------------------------------------------- */

static pthread_mutex_t attach_lock = PTHREAD_MUTEX_INITIALIZER;
static cairn_store *store;
static int attach_error;  /* negative errno once an attach failed */

/* The process umask without changing it (umask() would race with other threads): the
 * "Umask:" line of /proc/self/status, or 022 when it cannot be read. */
static mode_t read_umask(void)
{
    char buf[4096];
    mode_t m = 022;
    int fd = CAIRN_REAL(open, "/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return m;
    ssize_t n = CAIRN_REAL(read, fd, buf, sizeof buf - 1);
    CAIRN_REAL(close, fd);
    if (n > 0) {
        buf[n] = 0;
        const char *u = strstr(buf, "\nUmask:");
        if (u)
            m = (mode_t)strtoul(u + 7, NULL, 8) & 0777;
    }
    return m;
}

int cairn_store_get(cairn_store **out)
{
    cairn_store *s = __atomic_load_n(&store, __ATOMIC_ACQUIRE);
    if (s) {
        *out = s;
        return 0;
    }
    const struct cairn_cfg *c = cairn_cfg();
    int saved = errno;
    pthread_mutex_lock(&attach_lock);
    if (!store && !attach_error) {
        struct cairn_store_config sc = {
            .name = c->name,
            .size = c->size,
            .chunk = c->chunk,
            .max_files = c->max_files,
            .spill_path = c->spill,
            .spill_size = c->spill[0] ? c->spill_size : 0,
            .per_process = c->per_process,
            .create = 1,
            .populate = 1,
        };
        char err[512] = "";
        int rc = cairn_store_open(&sc, &s, err, sizeof err);
        if (rc < 0) {
            attach_error = rc;
            cairn_log("cannot attach the in-memory store %s for %s: %s", c->name, c->prefix,
                      err[0] ? err : strerror(-rc));
        } else {
            __atomic_store_n(&store, s, __ATOMIC_RELEASE);
        }
    }
    int rc = store ? 0 : attach_error;
    *out = store;
    pthread_mutex_unlock(&attach_lock);
    errno = saved;
    return rc;
}

cairn_store *cairn_store_attached(void)
{
    return __atomic_load_n(&store, __ATOMIC_ACQUIRE);
}

/*
** The umask. Every change a program makes goes through umask(), so the wrapper records it and
** a create reads it with one atomic load; only the value the process started with has to be
** read from /proc, once, on the first create that needs it. umask_lock orders the wrapper's
** real call and record against that first read, so neither overwrites a newer value.
*/
static pthread_mutex_t umask_lock = PTHREAD_MUTEX_INITIALIZER;
static int umask_value = -1; /* atomic; -1 until known */

mode_t cairn_umask(void)
{
    int m = __atomic_load_n(&umask_value, __ATOMIC_ACQUIRE);
    if (CAIRN_UNLIKELY(m < 0)) {
        pthread_mutex_lock(&umask_lock);
        m = umask_value;
        if (m < 0) {
            m = (int)read_umask();
            __atomic_store_n(&umask_value, m, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&umask_lock);
    }
    return (mode_t)m;
}

CAIRN_EXPORT mode_t umask(mode_t mask)
{
    pthread_mutex_lock(&umask_lock);
    mode_t old = CAIRN_REAL(umask, mask);
    __atomic_store_n(&umask_value, (int)(mask & 0777), __ATOMIC_RELEASE);
    pthread_mutex_unlock(&umask_lock);
    return old;
}

/* ---------------------------------------------------------------------------------------- */
/* Paths                                                                                    */
/* ---------------------------------------------------------------------------------------- */

/* Whether the part of a path after the mount point climbs above it with "..". Such a path is
 * not ours (the kernel resolves it, through a mount point that does not exist). */
static int escapes(const char *r)
{
    long depth = 0;
    size_t n;
    for (r = component(r, &n); n > 0; r = component(r + n, &n)) {
        if (n == 2 && r[0] == '.' && r[1] == '.') {
            if (--depth < 0)
                return 1;
        } else if (!(n == 1 && r[0] == '.')) {
            depth++;
        }
    }
    return 0;
}

int cairn_join(const char *dir, const char *name, char *out, size_t len)
{
    int n = snprintf(out, len, "%s%s%s", dir, dir[0] ? "/" : "", name);
    return (n < 0 || (size_t)n >= len) ? -ENAMETOOLONG : 0;
}

static inline int fd_maybe(int fd);

int cairn_route(int dirfd, const char *path, struct cairn_path *p, cairn_store **s)
{
    const struct cairn_cfg *c = cairn_cfg();
    path = CAIRN_LAUNDER(path);
    p->pass = path;
    if (!c->enabled || path == NULL)
        return 0;
    char joined[CAIRN_STORE_PATH_MAX + PATH_MAX + 2];
    const char *rest;
    if (path[0] == '/') {
        if (strncmp(path, c->prefix, c->plen) != 0 ||
            (path[c->plen] != '/' && path[c->plen] != 0))
            return 0;
        rest = path + c->plen;
        if (escapes(rest)) {
            lexical(path, p->pass_buf, sizeof p->pass_buf);
            p->pass = p->pass_buf;
            return 0;
        }
        p->saved_errno = errno;
    } else {
        char base[CAIRN_STORE_PATH_MAX];
        int kind = CAIRN_OFD_DIR;
        int saved = errno;
        if (dirfd == AT_FDCWD) {
            if (!cairn_cwd_active() || !cairn_cwd_get(base))
                return 0;
        } else {
            struct cairn_ofd *d = fd_maybe(dirfd) ? cairn_fd_get(dirfd) : NULL;
            if (!d)
                return 0;
            kind = d->kind;
            memcpy(base, d->path, sizeof base);
            cairn_ofd_put(d);
        }
        p->saved_errno = saved;
        int n = snprintf(joined, sizeof joined, "%s/%s/%s", c->prefix, base, path);
        if (kind != CAIRN_OFD_DIR || !path[0]) {
            errno = kind != CAIRN_OFD_DIR ? ENOTDIR : ENOENT;
            return -1;
        }
        if (n < 0 || (size_t)n >= sizeof joined) {
            errno = ENAMETOOLONG;
            return -1;
        }
        rest = joined + c->plen;
        if (escapes(rest)) {
            lexical(joined, p->pass_buf, sizeof p->pass_buf);
            p->pass = p->pass_buf;
            return 0;
        }
    }
    size_t len = strlen(path);
    p->slash = len > 0 && path[len - 1] == '/';
    int rc = cairn_store_normalize(rest, p->rel, sizeof p->rel);
    if (rc >= 0)
        rc = cairn_store_get(s);
    if (rc < 0) {
        errno = -rc;
        return -1;
    }
    return 1;
}

/* ---------------------------------------------------------------------------------------- */
/* The descriptor table                                                                     */
/* ---------------------------------------------------------------------------------------- */

/* The flags a description keeps (F_GETFL). */
#define OFD_KEPT_FLAGS                                                                           \
    (O_ACCMODE | O_APPEND | O_PATH | O_SYNC | O_DSYNC | O_NONBLOCK | O_DIRECT | O_NOATIME |     \
     O_LARGEFILE)

/* Slots are read without the lock on the fast path; a grown table replaces the old one, which
 * is kept (never freed) because a reader may still be looking at it. */
struct fdtab {
    int size;
    struct fdtab *older;
    struct cairn_ofd *slot[];
};

static struct fdtab *fdtab;
static pthread_mutex_t tab_lock = PTHREAD_MUTEX_INITIALIZER;

/* Whether fd may be ours: one atomic load for any descriptor that is not. */
static inline int fd_maybe(int fd)
{
    struct fdtab *t = __atomic_load_n(&fdtab, __ATOMIC_ACQUIRE);
    return t && fd >= 0 && fd < t->size &&
           __atomic_load_n(&t->slot[fd], __ATOMIC_RELAXED) != NULL;
}

int cairn_fd_maybe(int fd)
{
    return fd_maybe(fd);
}

struct cairn_ofd *cairn_fd_get(int fd)
{
    if (!fd_maybe(fd))
        return NULL;
    pthread_mutex_lock(&tab_lock);
    struct cairn_ofd *d = fd < fdtab->size ? fdtab->slot[fd] : NULL;
    if (d)
        __atomic_add_fetch(&d->refs, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&tab_lock);
    return d;
}

void cairn_ofd_put(struct cairn_ofd *d)
{
    if (__atomic_sub_fetch(&d->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        pthread_mutex_destroy(&d->lock);
        free(d);
    }
}

/* Makes room for fd; under tab_lock. */
static int tab_reserve(int fd)
{
    struct fdtab *t = fdtab;
    if (t && fd < t->size)
        return 0;
    long size = t ? 2L * t->size : 0;
    if (!t) {
        struct rlimit rl;
        size = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (long)rl.rlim_cur : 1024;
        if (size < 1024 || rl.rlim_cur == RLIM_INFINITY)
            size = 1024;
        if (size > 65536)
            size = 65536;
    }
    while (size <= fd)
        size *= 2;
    struct fdtab *n = calloc(1, sizeof *n + (size_t)size * sizeof n->slot[0]);
    if (!n)
        return -ENOMEM;
    n->size = (int)size;
    n->older = t;
    if (t)
        memcpy(n->slot, t->slot, (size_t)t->size * sizeof t->slot[0]);
    __atomic_store_n(&fdtab, n, __ATOMIC_RELEASE);
    return 0;
}

/* Puts d at fd with a new reference; a description left there (by a close we did not see) is
 * released. */
static int fd_install(int fd, struct cairn_ofd *d)
{
    pthread_mutex_lock(&tab_lock);
    int rc = tab_reserve(fd);
    struct cairn_ofd *old = NULL;
    if (rc == 0) {
        old = fdtab->slot[fd];
        __atomic_add_fetch(&d->refs, 1, __ATOMIC_RELAXED);
        __atomic_store_n(&fdtab->slot[fd], d, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&tab_lock);
    if (old)
        cairn_ofd_put(old);
    if (rc == 0)
        cairn_std_after(fd);
    return rc;
}

int cairn_fd_next(int fd)
{
    struct fdtab *t = __atomic_load_n(&fdtab, __ATOMIC_ACQUIRE);
    for (; t && fd >= 0 && fd < t->size; fd++)
        if (__atomic_load_n(&t->slot[fd], __ATOMIC_RELAXED) != NULL)
            return fd;
    return -1;
}

int cairn_fd_adopt(int fd, const struct cairn_ofd *t)
{
    struct cairn_ofd *d = calloc(1, sizeof *d);
    if (!d)
        return -ENOMEM;
    pthread_mutex_init(&d->lock, NULL);
    d->kind = t->kind;
    d->flags = t->flags & OFD_KEPT_FLAGS;
    d->off = t->off;
    d->fh = t->fh;
    memcpy(d->path, t->path, sizeof d->path);
    int rc = fd_install(fd, d); /* the table's reference is the only one */
    if (rc < 0) {
        pthread_mutex_destroy(&d->lock);
        free(d);
    }
    return rc;
}

/* Empties the slots first .. last, releasing their descriptions. */
static void fd_forget_range(unsigned first, unsigned last)
{
    if (!__atomic_load_n(&fdtab, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&tab_lock);
    for (unsigned fd = first; fd <= last && fd < (unsigned)fdtab->size; fd++) {
        struct cairn_ofd *d = fdtab->slot[fd];
        if (d) {
            __atomic_store_n(&fdtab->slot[fd], NULL, __ATOMIC_RELEASE);
            cairn_ofd_put(d);
        }
    }
    pthread_mutex_unlock(&tab_lock);
    for (unsigned fd = first; fd <= last && fd <= 2; fd++)
        cairn_std_after((int)fd);
}

/* A descriptor the kernel just handed out cannot be ours: forget any stale entry for it (one
 * left by a close this library did not see). Returns fd. */
static int fd_fresh(int fd)
{
    if (fd >= 0 && fd_maybe(fd))
        fd_forget_range((unsigned)fd, (unsigned)fd);
    return fd;
}

/* fork: hold the table lock across it, so the child's copy is consistent; in the child, the
 * descriptions' mutexes may be held by threads that no longer exist there. */
static void atfork_prepare(void) { pthread_mutex_lock(&tab_lock); }
static void atfork_parent(void) { pthread_mutex_unlock(&tab_lock); }
static void atfork_child(void)
{
    if (fdtab)
        for (int fd = 0; fd < fdtab->size; fd++)
            if (fdtab->slot[fd])
                pthread_mutex_init(&fdtab->slot[fd]->lock, NULL);
    pthread_mutex_unlock(&tab_lock);
    pthread_mutex_init(&umask_lock, NULL);
    cairn_dir_atfork_child();
    cairn_std_atfork_child();
    cairn_exec_atfork_child();
}

__attribute__((constructor)) static void interpose_init(void)
{
    pthread_once(&real_once, real_init);
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
    /* The working directory's lock is taken across fork too, so the child's copy is whole. */
    pthread_atfork(cairn_cwd_atfork_prepare, cairn_cwd_atfork_parent, cairn_cwd_atfork_child);
    cairn_inherit();
}

/* ---------------------------------------------------------------------------------------- */
/* Opening                                                                                  */
/* ---------------------------------------------------------------------------------------- */

#define OFD_SETFL_FLAGS (O_APPEND | O_NONBLOCK | O_DIRECT | O_NOATIME | O_ASYNC)
#define NEEDS_MODE(flags) (((flags) & O_CREAT) || ((flags) & __O_TMPFILE) == __O_TMPFILE)

/* What (p, flags) names: fills d's kind, handle and path. 0 or a negative errno. */
static int open_lookup(cairn_store *s, const struct cairn_path *p, int flags, mode_t mode,
                       struct cairn_ofd *d)
{
    int acc = flags & O_ACCMODE;
    struct cairn_store_stat st;
    memcpy(d->path, p->rel, sizeof d->path);
    if ((flags & (O_DIRECTORY | O_PATH)) || p->slash) {
        /* Only a directory will do (or, with O_PATH, anything that exists). */
        int rc = cairn_store_stat(s, p->rel, &st);
        if (rc == -ENOENT && (flags & O_CREAT))
            return -EISDIR;
        if (rc < 0)
            return rc;
        if (st.type == CAIRN_FILE_DIR) {
            d->kind = CAIRN_OFD_DIR;
            return (acc != O_RDONLY && !(flags & O_PATH)) ? -EISDIR : 0;
        }
        if (!(flags & O_PATH) || (flags & O_DIRECTORY) || p->slash)
            return -ENOTDIR;
    }
    int sf = ((flags & O_CREAT) ? CAIRN_O_CREAT : 0) | ((flags & O_EXCL) ? CAIRN_O_EXCL : 0) |
             ((flags & O_TRUNC) && acc != O_RDONLY && !(flags & O_PATH) ? CAIRN_O_TRUNC : 0);
    int rc = cairn_store_open_file(s, p->rel, sf, (uint32_t)(mode & ~cairn_umask() & 07777),
                                   &d->fh);
    if (rc == -EISDIR && acc == O_RDONLY && !(flags & O_CREAT)) {
        d->kind = CAIRN_OFD_DIR;
        return 0;
    }
    d->kind = CAIRN_OFD_FILE;
    return rc < 0 ? rc : 0;
}

int cairn_open_ours(cairn_store *s, const struct cairn_path *p, int flags, mode_t mode)
{
    /* With O_PATH, Linux ignores every flag but these (no creation, no truncation). */
    if (flags & O_PATH)
        flags &= O_PATH | O_CLOEXEC | O_DIRECTORY | O_NOFOLLOW;
    if ((flags & __O_TMPFILE) == __O_TMPFILE)
        return -EOPNOTSUPP;
    if ((flags & O_ACCMODE) == O_ACCMODE || ((flags & O_CREAT) && (flags & O_DIRECTORY)))
        return -EINVAL;
    struct cairn_ofd *d = calloc(1, sizeof *d);
    if (!d)
        return -ENOMEM;
    /* The placeholder first, so that EMFILE leaves the store untouched. */
    int fd = CAIRN_REAL(open, "/dev/null", O_PATH | (flags & O_CLOEXEC));
    int rc = fd < 0 ? -errno : open_lookup(s, p, flags, mode, d);
    if (rc == 0) {
        pthread_mutex_init(&d->lock, NULL);
        d->flags = flags & OFD_KEPT_FLAGS;
        rc = fd_install(fd, d);
    }
    if (rc < 0) {
        if (fd >= 0)
            CAIRN_REAL(close, fd);
        free(d);
        return rc;
    }
    return fd;
}

/* open (at = 0) or openat (at = 1), so that a call passes through to the function the
 * caller made. */
static int open_call(int at, int dirfd, const char *path, int flags, mode_t mode)
{
    struct cairn_path p;
    cairn_store *s;
    int r = cairn_route(dirfd, path, &p, &s);
    if (r == 0)
        return fd_fresh(at ? CAIRN_REAL(openat, dirfd, p.pass, flags, mode)
                           : CAIRN_REAL(open, p.pass, flags, mode));
    if (r < 0)
        return -1;
    return (int)cairn_result(cairn_open_ours(s, &p, flags, mode), p.saved_errno);
}

int cairn_openat(int dirfd, const char *path, int flags, mode_t mode)
{
    return open_call(1, dirfd, path, flags, mode);
}

/* The mode argument of a variadic open, present when the flags need one. */
#define VA_MODE(flags, last)                                                                     \
    ({                                                                                           \
        mode_t m_ = 0;                                                                           \
        if (NEEDS_MODE(flags)) {                                                                 \
            va_list ap_;                                                                         \
            va_start(ap_, last);                                                                 \
            m_ = (mode_t)va_arg(ap_, int);                                                       \
            va_end(ap_);                                                                         \
        }                                                                                        \
        m_;                                                                                      \
    })

CAIRN_EXPORT int open(const char *path, int flags, ...)
{
    return open_call(0, AT_FDCWD, path, flags, VA_MODE(flags, flags));
}
CAIRN_EXPORT int open64(const char *path, int flags, ...)
{
    return open_call(0, AT_FDCWD, path, flags, VA_MODE(flags, flags));
}
CAIRN_EXPORT int openat(int dirfd, const char *path, int flags, ...)
{
    return cairn_openat(dirfd, path, flags, VA_MODE(flags, flags));
}
CAIRN_EXPORT int openat64(int dirfd, const char *path, int flags, ...)
{
    return cairn_openat(dirfd, path, flags, VA_MODE(flags, flags));
}
CAIRN_EXPORT int creat(const char *path, mode_t mode)
{
    return open_call(0, AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode);
}
CAIRN_EXPORT int creat64(const char *path, mode_t mode) __attribute__((alias("creat")));

/* _FORTIFY_SOURCE's open: a mode-needing open without a mode is left to glibc to reject. */
CAIRN_EXPORT int __open_2(const char *path, int flags)
{
    if (NEEDS_MODE(flags))
        return CAIRN_REAL(__open_2, path, flags);
    return open_call(0, AT_FDCWD, path, flags, 0);
}
CAIRN_EXPORT int __open64_2(const char *path, int flags) __attribute__((alias("__open_2")));
CAIRN_EXPORT int __openat_2(int dirfd, const char *path, int flags)
{
    if (NEEDS_MODE(flags))
        return CAIRN_REAL(__openat_2, dirfd, path, flags);
    return cairn_openat(dirfd, path, flags, 0);
}
CAIRN_EXPORT int __openat64_2(int dirfd, const char *path, int flags)
    __attribute__((alias("__openat_2")));

int cairn_close(int fd)
{
    struct cairn_ofd *d = NULL;
    if (fd_maybe(fd)) {
        cairn_std_before(fd);
        pthread_mutex_lock(&tab_lock);
        d = fdtab->slot[fd];
        __atomic_store_n(&fdtab->slot[fd], NULL, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&tab_lock);
    }
    int rc = CAIRN_REAL(close, fd);
    if (d) {
        cairn_ofd_put(d);
        cairn_std_after(fd);
    }
    return rc;
}

CAIRN_EXPORT int close(int fd)
{
    return cairn_close(fd);
}

CAIRN_EXPORT int close_range(unsigned first, unsigned last, int flags)
{
    if (first <= last && !(flags & ~(CLOSE_RANGE_UNSHARE | CLOSE_RANGE_CLOEXEC)) &&
        !(flags & CLOSE_RANGE_CLOEXEC)) {
        for (unsigned fd = first; fd <= last && fd <= 2; fd++)
            cairn_std_before((int)fd);
        fd_forget_range(first, last);
    }
    return CAIRN_REAL(close_range, first, last, flags);
}

CAIRN_EXPORT void closefrom(int lowfd)
{
    if (lowfd >= 0) {
        for (int fd = lowfd; fd <= 2; fd++)
            cairn_std_before(fd);
        fd_forget_range((unsigned)lowfd, UINT_MAX);
    }
    CAIRN_REAL(closefrom, lowfd);
}

/* ---------------------------------------------------------------------------------------- */
/* Reading and writing                                                                      */
/* ---------------------------------------------------------------------------------------- */

/* A file's size, or a negative errno. */
static int64_t ofd_size(struct cairn_ofd *d)
{
    struct cairn_store_stat st;
    if (d->kind == CAIRN_OFD_DIR)
        return 0;
    int rc = cairn_store_fstat(cairn_store_attached(), d->fh, &st);
    return rc < 0 ? rc : (int64_t)st.size;
}

#define AT_OFFSET ((int64_t)-1) /* pos for "at the description's offset, advancing it" */

/* Reads or writes the iovecs at pos (or at the offset): the bytes moved or a negative errno. */
static ssize_t ofd_io(struct cairn_ofd *d, int wr, const struct iovec *iov, int cnt,
                      int64_t pos)
{
    int acc = d->flags & O_ACCMODE;
    if (d->flags & O_PATH)
        return -EBADF;
    if (d->kind == CAIRN_OFD_DIR)
        return wr ? -EBADF : -EISDIR;
    if (wr ? acc == O_RDONLY : acc == O_WRONLY)
        return -EBADF;
    if (cnt < 0 || cnt > IOV_MAX)
        return -EINVAL;
    size_t total = 0;
    for (int i = 0; i < cnt; i++) {
        if (iov[i].iov_len > (size_t)SSIZE_MAX - total)
            return -EINVAL;
        total += iov[i].iov_len;
    }
    cairn_store *s = cairn_store_attached();
    /* Linux appends even for pwrite on an O_APPEND descriptor (leaving the offset alone). */
    int append = wr && (d->flags & O_APPEND);
    int advance = pos == AT_OFFSET;
    if (advance || append)
        pthread_mutex_lock(&d->lock);
    ssize_t rc = 0;
    uint64_t at = advance ? d->off : (uint64_t)pos;
    if (append) {
        int64_t size = ofd_size(d);
        rc = size < 0 ? size : 0;
        at = (uint64_t)size;
    }
    size_t done = 0;
    for (int i = 0; rc >= 0 && i < cnt; i++) {
        if (iov[i].iov_len == 0)
            continue;
        rc = wr ? cairn_store_pwrite(s, d->fh, iov[i].iov_base, iov[i].iov_len, at + done)
                : cairn_store_pread(s, d->fh, iov[i].iov_base, iov[i].iov_len, at + done);
        if (rc > 0)
            done += (size_t)rc;
        if (rc < (ssize_t)iov[i].iov_len)
            break;
    }
    if (advance)
        d->off = at + done;
    if (advance || append)
        pthread_mutex_unlock(&d->lock);
    if (done > 0 && wr && (d->flags & (O_SYNC | O_DSYNC)))
        (void)cairn_store_sync(s);
    return (done > 0 || rc >= 0) ? (ssize_t)done : rc;
}

/* Runs ofd_io for a call on descriptor d and finishes it (errno, reference). */
static ssize_t io_call(struct cairn_ofd *d, int wr, const struct iovec *iov, int cnt,
                       int64_t pos)
{
    int saved = errno;
    ssize_t rc = ofd_io(d, wr, iov, cnt, pos);
    cairn_ofd_put(d);
    return (ssize_t)cairn_result(rc, saved);
}

/* pos for positional calls: negative offsets are EINVAL. */
static ssize_t io_at(struct cairn_ofd *d, int wr, const struct iovec *iov, int cnt, off_t off)
{
    if (off < 0) {
        cairn_ofd_put(d);
        errno = EINVAL;
        return -1;
    }
    return io_call(d, wr, iov, cnt, off);
}

/* preadv2/pwritev2: offset -1 means the current offset. */
static ssize_t io_v2(struct cairn_ofd *d, int wr, const struct iovec *iov, int cnt, off_t off)
{
    return off == -1 ? io_call(d, wr, iov, cnt, AT_OFFSET) : io_at(d, wr, iov, cnt, off);
}

ssize_t cairn_read(int fd, void *buf, size_t len)
{
    struct cairn_ofd *d = cairn_fd_get(fd);
    struct iovec v = {buf, len};
    return d ? io_call(d, 0, &v, 1, AT_OFFSET) : CAIRN_REAL(read, fd, buf, len);
}

ssize_t cairn_write(int fd, const void *buf, size_t len)
{
    struct cairn_ofd *d = cairn_fd_get(fd);
    struct iovec v = {(void *)buf, len};
    return d ? io_call(d, 1, &v, 1, AT_OFFSET) : CAIRN_REAL(write, fd, buf, len);
}

CAIRN_EXPORT ssize_t read(int fd, void *buf, size_t len)
{
    return cairn_read(fd, buf, len);
}

CAIRN_EXPORT ssize_t write(int fd, const void *buf, size_t len)
{
    return cairn_write(fd, buf, len);
}

/* _FORTIFY_SOURCE's read: an overflowing call is left to glibc to reject. */
CAIRN_EXPORT ssize_t __read_chk(int fd, void *buf, size_t len, size_t buflen)
{
    if (len > buflen || !fd_maybe(fd))
        return CAIRN_REAL(__read_chk, fd, buf, len, buflen);
    return cairn_read(fd, buf, len);
}

CAIRN_EXPORT ssize_t pread(int fd, void *buf, size_t len, off_t off)
{
    struct cairn_ofd *d = cairn_fd_get(fd);
    struct iovec v = {buf, len};
    return d ? io_at(d, 0, &v, 1, off) : CAIRN_REAL(pread, fd, buf, len, off);
}
CAIRN_EXPORT ssize_t pread64(int fd, void *buf, size_t len, off_t off)
    __attribute__((alias("pread")));

CAIRN_EXPORT ssize_t __pread_chk(int fd, void *buf, size_t len, off_t off, size_t buflen)
{
    if (len > buflen || !fd_maybe(fd))
        return CAIRN_REAL(__pread_chk, fd, buf, len, off, buflen);
    return pread(fd, buf, len, off);
}
CAIRN_EXPORT ssize_t __pread64_chk(int fd, void *buf, size_t len, off_t off, size_t buflen)
    __attribute__((alias("__pread_chk")));

CAIRN_EXPORT ssize_t pwrite(int fd, const void *buf, size_t len, off_t off)
{
    struct cairn_ofd *d = cairn_fd_get(fd);
    struct iovec v = {(void *)buf, len};
    return d ? io_at(d, 1, &v, 1, off) : CAIRN_REAL(pwrite, fd, buf, len, off);
}
CAIRN_EXPORT ssize_t pwrite64(int fd, const void *buf, size_t len, off_t off)
    __attribute__((alias("pwrite")));

CAIRN_EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
    struct cairn_ofd *d = cairn_fd_get(fd);
    return d ? io_call(d, 0, iov, cnt, AT_OFFSET) : CAIRN_REAL(readv, fd, iov, cnt);
}

CAIRN_EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
    struct cairn_ofd *d = cairn_fd_get(fd);
    return d ? io_call(d, 1, iov, cnt, AT_OFFSET) : CAIRN_REAL(writev, fd, iov, cnt);
}

CAIRN_EXPORT ssize_t preadv(int fd, const struct iovec *iov, int cnt, off_t off)
{
    struct cairn_ofd *d = cairn_fd_get(fd);
    return d ? io_at(d, 0, iov, cnt, off) : CAIRN_REAL(preadv, fd, iov, cnt, off);
}
CAIRN_EXPORT ssize_t preadv64(int fd, const struct iovec *iov, int cnt, off_t off)
    __attribute__((alias("preadv")));

CAIRN_EXPORT ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
    struct cairn_ofd *d = cairn_fd_get(fd);
    return d ? io_at(d, 1, iov, cnt, off) : CAIRN_REAL(pwritev, fd, iov, cnt, off);
}
CAIRN_EXPORT ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off_t off)
    __attribute__((alias("pwritev")));

/* preadv2/pwritev2: offset -1 means the current offset; the RWF_* hints are ignored. */
CAIRN_EXPORT ssize_t preadv2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
    struct cairn_ofd *d = cairn_fd_get(fd);
    return d ? io_v2(d, 0, iov, cnt, off) : CAIRN_REAL(preadv2, fd, iov, cnt, off, flags);
}
CAIRN_EXPORT ssize_t preadv64v2(int fd, const struct iovec *iov, int cnt, off_t off,
                                int flags) __attribute__((alias("preadv2")));

CAIRN_EXPORT ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
    struct cairn_ofd *d = cairn_fd_get(fd);
    return d ? io_v2(d, 1, iov, cnt, off) : CAIRN_REAL(pwritev2, fd, iov, cnt, off, flags);
}
CAIRN_EXPORT ssize_t pwritev64v2(int fd, const struct iovec *iov, int cnt, off_t off,
                                 int flags) __attribute__((alias("pwritev2")));

/* ---------------------------------------------------------------------------------------- */
/* Other calls on descriptors                                                               */
/* ---------------------------------------------------------------------------------------- */

/* SEEK_DATA and SEEK_HOLE as for a file without holes (cp uses them). */
static int64_t ofd_seek(struct cairn_ofd *d, off_t off, int whence)
{
    if (d->flags & O_PATH)
        return -EBADF;
    if (whence < SEEK_SET || whence > SEEK_HOLE)
        return -EINVAL;
    pthread_mutex_lock(&d->lock);
    int64_t size = whence >= SEEK_END ? ofd_size(d) : 0, to;
    if (size < 0)
        to = size;
    else if (whence == SEEK_SET)
        to = off;
    else if (whence == SEEK_CUR)
        to = (int64_t)d->off + off;
    else if (whence == SEEK_END)
        to = size + off;
    else if (off < 0 || off >= size)
        to = -ENXIO;
    else
        to = whence == SEEK_DATA ? off : size;
    if (to < 0 && size >= 0 && whence <= SEEK_END)
        to = -EINVAL;
    if (to >= 0)
        d->off = (uint64_t)to;
    pthread_mutex_unlock(&d->lock);
    return to;
}

off_t cairn_lseek(int fd, off_t off, int whence)
{
    struct cairn_ofd *d = cairn_fd_get(fd);
    if (!d)
        return CAIRN_REAL(lseek, fd, off, whence);
    int saved = errno;
    int64_t rc = ofd_seek(d, off, whence);
    cairn_ofd_put(d);
    return (off_t)cairn_result(rc, saved);
}

CAIRN_EXPORT off_t lseek(int fd, off_t off, int whence)
{
    return cairn_lseek(fd, off, whence);
}
CAIRN_EXPORT off_t lseek64(int fd, off_t off, int whence) __attribute__((alias("lseek")));

/* Runs op on the description of fd, a descriptor of ours (the caller checked). */
static int with_ofd(int fd, int (*op)(struct cairn_ofd *, void *), void *arg)
{
    struct cairn_ofd *d = cairn_fd_get(fd);
    if (!d) {
        errno = EBADF; /* closed since the caller looked */
        return -1;
    }
    int saved = errno;
    int rc = op(d, arg);
    cairn_ofd_put(d);
    return (int)cairn_result(rc, saved);
}

static int op_sync(struct cairn_ofd *d, void *arg)
{
    (void)d, (void)arg;
    return cairn_store_sync(cairn_store_attached());
}

CAIRN_EXPORT int fsync(int fd)
{
    return fd_maybe(fd) ? with_ofd(fd, op_sync, NULL) : CAIRN_REAL(fsync, fd);
}

CAIRN_EXPORT int fdatasync(int fd)
{
    return fd_maybe(fd) ? with_ofd(fd, op_sync, NULL) : CAIRN_REAL(fdatasync, fd);
}

static int op_truncate(struct cairn_ofd *d, void *arg)
{
    off_t len = *(off_t *)arg;
    if (len < 0 || d->kind != CAIRN_OFD_FILE || (d->flags & O_ACCMODE) == O_RDONLY)
        return (d->flags & O_PATH) ? -EBADF : -EINVAL;
    return cairn_store_ftruncate(cairn_store_attached(), d->fh, (uint64_t)len);
}

CAIRN_EXPORT int ftruncate(int fd, off_t len)
{
    return fd_maybe(fd) ? with_ofd(fd, op_truncate, &len) : CAIRN_REAL(ftruncate, fd, len);
}
CAIRN_EXPORT int ftruncate64(int fd, off_t len) __attribute__((alias("ftruncate")));

/* fallocate mode 0 (and posix_fallocate) extend the file with zeros; KEEP_SIZE has nothing to
 * reserve; punching holes and the other modes are not supported. */
struct alloc_args {
    int mode;
    off_t off, len;
};

static int op_allocate(struct cairn_ofd *d, void *arg)
{
    const struct alloc_args *a = arg;
    if (a->off < 0 || a->len <= 0)
        return -EINVAL;
    if ((d->flags & O_PATH) || (d->flags & O_ACCMODE) == O_RDONLY)
        return -EBADF;
    if (d->kind != CAIRN_OFD_FILE)
        return -EISDIR;
    if (a->mode & ~FALLOC_FL_KEEP_SIZE)
        return -EOPNOTSUPP;
    if (a->mode & FALLOC_FL_KEEP_SIZE)
        return 0;
    pthread_mutex_lock(&d->lock);
    int64_t size = ofd_size(d);
    int rc = size < 0 ? (int)size : 0;
    if (rc == 0 && (uint64_t)a->off + (uint64_t)a->len > (uint64_t)size)
        rc = cairn_store_ftruncate(cairn_store_attached(), d->fh,
                                   (uint64_t)a->off + (uint64_t)a->len);
    pthread_mutex_unlock(&d->lock);
    return rc;
}

CAIRN_EXPORT int fallocate(int fd, int mode, off_t off, off_t len)
{
    struct alloc_args a = {mode, off, len};
    return fd_maybe(fd) ? with_ofd(fd, op_allocate, &a) : CAIRN_REAL(fallocate, fd, mode, off, len);
}
CAIRN_EXPORT int fallocate64(int fd, int mode, off_t off, off_t len)
    __attribute__((alias("fallocate")));

/* posix_fallocate returns the error instead of setting errno. */
CAIRN_EXPORT int posix_fallocate(int fd, off_t off, off_t len)
{
    if (!fd_maybe(fd))
        return CAIRN_REAL(posix_fallocate, fd, off, len);
    int saved = errno;
    struct alloc_args a = {0, off, len};
    int rc = with_ofd(fd, op_allocate, &a) < 0 ? errno : 0;
    errno = saved;
    return rc;
}
CAIRN_EXPORT int posix_fallocate64(int fd, off_t off, off_t len)
    __attribute__((alias("posix_fallocate")));

CAIRN_EXPORT int posix_fadvise(int fd, off_t off, off_t len, int advice)
{
    return fd_maybe(fd) ? 0 : CAIRN_REAL(posix_fadvise, fd, off, len, advice);
}
CAIRN_EXPORT int posix_fadvise64(int fd, off_t off, off_t len, int advice)
    __attribute__((alias("posix_fadvise")));

/* Locks, modes, owners and times of our files are accepted and not kept. */
CAIRN_EXPORT int flock(int fd, int op)
{
    return fd_maybe(fd) ? 0 : CAIRN_REAL(flock, fd, op);
}

CAIRN_EXPORT int fchmod(int fd, mode_t mode)
{
    return fd_maybe(fd) ? 0 : CAIRN_REAL(fchmod, fd, mode);
}

CAIRN_EXPORT int fchown(int fd, uid_t uid, gid_t gid)
{
    return fd_maybe(fd) ? 0 : CAIRN_REAL(fchown, fd, uid, gid);
}

CAIRN_EXPORT int futimens(int fd, const struct timespec times[2])
{
    return fd_maybe(fd) ? 0 : CAIRN_REAL(futimens, fd, times);
}

CAIRN_EXPORT int isatty(int fd)
{
    if (!fd_maybe(fd))
        return CAIRN_REAL(isatty, fd);
    errno = ENOTTY;
    return 0;
}

/* Our files cannot be mapped: the store's chunks are not contiguous. */
CAIRN_EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    if (!(flags & MAP_ANONYMOUS) && fd_maybe(fd)) {
        errno = ENODEV;
        return MAP_FAILED;
    }
    return CAIRN_REAL(mmap, addr, len, prot, flags, fd, off);
}
CAIRN_EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
    __attribute__((alias("mmap")));

/* Kernel-side copies cannot reach the store: fail the way cp and cat expect, so that they
 * fall back to read and write. */
CAIRN_EXPORT ssize_t copy_file_range(int in, off64_t *in_off, int out, off64_t *out_off,
                                     size_t len, unsigned flags)
{
    if (fd_maybe(in) || fd_maybe(out)) {
        errno = EXDEV;
        return -1;
    }
    return CAIRN_REAL(copy_file_range, in, in_off, out, out_off, len, flags);
}

CAIRN_EXPORT ssize_t sendfile(int out, int in, off_t *off, size_t count)
{
    if (fd_maybe(in) || fd_maybe(out)) {
        errno = EINVAL;
        return -1;
    }
    return CAIRN_REAL(sendfile, out, in, off, count);
}
CAIRN_EXPORT ssize_t sendfile64(int out, int in, off_t *off, size_t count)
    __attribute__((alias("sendfile")));

CAIRN_EXPORT ssize_t splice(int in, off64_t *in_off, int out, off64_t *out_off, size_t len,
                            unsigned flags)
{
    if (fd_maybe(in) || fd_maybe(out)) {
        errno = EINVAL;
        return -1;
    }
    return CAIRN_REAL(splice, in, in_off, out, out_off, len, flags);
}

/* No ioctl applies to our files (ENOTTY); cloning from one of them into a real file is EXDEV,
 * as between two file systems (cp tries FICLONE first). */
CAIRN_EXPORT int ioctl(int fd, unsigned long req, ...)
{
    va_list ap;
    va_start(ap, req);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    if (fd_maybe(fd)) {
        errno = ENOTTY;
        return -1;
    }
    if ((req == FICLONE && fd_maybe((int)(intptr_t)arg)) ||
        (req == FICLONERANGE && arg && fd_maybe((int)((struct file_clone_range *)arg)->src_fd))) {
        errno = EXDEV;
        return -1;
    }
    return CAIRN_REAL(ioctl, fd, req, arg);
}

/* dup and friends: the real call duplicates the placeholder, the table shares the
 * description. The caller keeps (and releases) its own reference on d. */
static int dup_install(int newfd, struct cairn_ofd *d)
{
    if (newfd >= 0 && fd_install(newfd, d) < 0) {
        CAIRN_REAL(close, newfd);
        errno = ENOMEM;
        return -1;
    }
    return newfd;
}

CAIRN_EXPORT int dup(int fd)
{
    struct cairn_ofd *d = cairn_fd_get(fd);
    if (!d)
        return fd_fresh(CAIRN_REAL(dup, fd));
    int rc = dup_install(CAIRN_REAL(dup, fd), d);
    cairn_ofd_put(d);
    return rc;
}

/* dup2 and dup3: newfd, if it was ours, is closed by the kernel; its entry goes with it. */
static int dup_onto(int oldfd, int newfd, int flags, int three)
{
    struct cairn_ofd *d = cairn_fd_get(oldfd);
    if (oldfd != newfd)
        cairn_std_before(newfd);
    int rc = three ? CAIRN_REAL(dup3, oldfd, newfd, flags) : CAIRN_REAL(dup2, oldfd, newfd);
    if (rc >= 0 && oldfd != newfd)
        rc = d ? dup_install(rc, d) : fd_fresh(rc);
    if (d)
        cairn_ofd_put(d);
    return rc;
}

CAIRN_EXPORT int dup2(int oldfd, int newfd)
{
    return dup_onto(oldfd, newfd, 0, 0);
}

CAIRN_EXPORT int dup3(int oldfd, int newfd, int flags)
{
    return dup_onto(oldfd, newfd, flags, 1);
}

int cairn_fd_set_append(int fd)
{
    struct cairn_ofd *d = cairn_fd_get(fd);
    if (!d)
        return -EBADF;
    pthread_mutex_lock(&d->lock);
    d->flags |= O_APPEND;
    pthread_mutex_unlock(&d->lock);
    cairn_ofd_put(d);
    return 0;
}

/* fcntl on ours: duplication and the close-on-exec flag go to the placeholder; status flags
 * live in the description; record locks are accepted and do nothing. */
static int fcntl_ours(struct cairn_ofd *d, int fd, int cmd, void *arg)
{
    struct flock *fl = arg;
    switch (cmd) {
    case F_DUPFD:
    case F_DUPFD_CLOEXEC:
        return dup_install(CAIRN_REAL(fcntl, fd, cmd, arg), d);
    case F_GETFL:
        return d->flags;
    case F_SETFL:
        pthread_mutex_lock(&d->lock);
        d->flags = (d->flags & ~OFD_SETFL_FLAGS) | ((int)(intptr_t)arg & OFD_SETFL_FLAGS);
        pthread_mutex_unlock(&d->lock);
        return 0;
    case F_GETLK:
    case F_OFD_GETLK:
        if (!fl) {
            errno = EFAULT;
            return -1;
        }
        fl->l_type = F_UNLCK;
        return 0;
    case F_SETLK:
    case F_SETLKW:
    case F_OFD_SETLK:
    case F_OFD_SETLKW:
        return 0;
    default:
        return CAIRN_REAL(fcntl, fd, cmd, arg);
    }
}

CAIRN_EXPORT int fcntl(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    struct cairn_ofd *d = cairn_fd_get(fd);
    if (!d) {
        int rc = CAIRN_REAL(fcntl, fd, cmd, arg);
        return (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) ? fd_fresh(rc) : rc;
    }
    int rc = fcntl_ours(d, fd, cmd, arg);
    cairn_ofd_put(d);
    return rc;
}
CAIRN_EXPORT int fcntl64(int fd, int cmd, ...) __attribute__((alias("fcntl")));

/* ---------------------------------------------------------------------------------------- */
/* stat and statfs                                                                          */
/* ---------------------------------------------------------------------------------------- */

/* A device number no real file system has, so (st_dev, st_ino) never matches a real file. */
#define CAIRN_FS_DEV_MAJOR 0xca1u
#define CAIRN_FS_DEV_MINOR 0x1fu
#define CAIRN_FS_MAGIC 0xca1f5u

static uint64_t chunk_size(void)
{
    cairn_store *s = cairn_store_attached();
    return s ? cairn_store_header(s)->chunk_size : 4096;
}

void cairn_fill_stat(struct stat *st, const struct cairn_store_stat *cs)
{
    int dir = cs->type == CAIRN_FILE_DIR;
    uint64_t chunk = chunk_size();
    memset(st, 0, sizeof *st);
    st->st_dev = makedev(CAIRN_FS_DEV_MAJOR, CAIRN_FS_DEV_MINOR);
    st->st_ino = cs->ino;
    st->st_mode = (dir ? S_IFDIR : S_IFREG) | (cs->mode & 07777);
    st->st_nlink = dir ? 2 : 1;
    st->st_uid = geteuid();
    st->st_gid = getegid();
    st->st_size = (off_t)cs->size;
    st->st_blksize = (blksize_t)chunk;
    st->st_blocks = (blkcnt_t)(cs->nchunks * chunk / 512);
    st->st_mtim.tv_sec = cs->mtime_ns / 1000000000;
    st->st_mtim.tv_nsec = cs->mtime_ns % 1000000000;
    st->st_ctim.tv_sec = cs->ctime_ns / 1000000000;
    st->st_ctim.tv_nsec = cs->ctime_ns % 1000000000;
    st->st_atim = st->st_mtim;
}

void cairn_fill_statx(struct statx *stx, const struct cairn_store_stat *cs)
{
    struct stat st;
    cairn_fill_stat(&st, cs);
    memset(stx, 0, sizeof *stx);
    stx->stx_mask = STATX_BASIC_STATS;
    stx->stx_blksize = (uint32_t)st.st_blksize;
    stx->stx_nlink = (uint32_t)st.st_nlink;
    stx->stx_uid = st.st_uid;
    stx->stx_gid = st.st_gid;
    stx->stx_mode = (uint16_t)st.st_mode;
    stx->stx_ino = st.st_ino;
    stx->stx_size = (uint64_t)st.st_size;
    stx->stx_blocks = (uint64_t)st.st_blocks;
    stx->stx_atime.tv_sec = st.st_atim.tv_sec;
    stx->stx_atime.tv_nsec = (uint32_t)st.st_atim.tv_nsec;
    stx->stx_mtime.tv_sec = st.st_mtim.tv_sec;
    stx->stx_mtime.tv_nsec = (uint32_t)st.st_mtim.tv_nsec;
    stx->stx_ctime.tv_sec = st.st_ctim.tv_sec;
    stx->stx_ctime.tv_nsec = (uint32_t)st.st_ctim.tv_nsec;
    stx->stx_dev_major = CAIRN_FS_DEV_MAJOR;
    stx->stx_dev_minor = CAIRN_FS_DEV_MINOR;
}

int cairn_fill_statvfs(cairn_store *s, struct statvfs *sv)
{
    struct cairn_store_usage u;
    int rc = cairn_store_usage(s, &u);
    if (rc < 0)
        return rc;
    memset(sv, 0, sizeof *sv);
    sv->f_bsize = sv->f_frsize = u.chunk_size;
    sv->f_blocks = u.mem_chunks + u.spill_chunks;
    sv->f_bfree = sv->f_bavail = u.mem_free + u.spill_free;
    sv->f_files = u.max_files;
    sv->f_ffree = sv->f_favail = u.max_files - u.files_used;
    sv->f_fsid = CAIRN_FS_MAGIC;
    sv->f_flag = ST_NOSUID | ST_NODEV;
    sv->f_namemax = CAIRN_STORE_PATH_MAX - 1;
    return 0;
}

int cairn_fill_statfs(cairn_store *s, struct statfs *sf)
{
    struct statvfs sv;
    int rc = cairn_fill_statvfs(s, &sv);
    if (rc < 0)
        return rc;
    memset(sf, 0, sizeof *sf);
    sf->f_type = CAIRN_FS_MAGIC;
    sf->f_bsize = sf->f_frsize = (long)sv.f_bsize;
    sf->f_blocks = sv.f_blocks;
    sf->f_bfree = sf->f_bavail = sv.f_bfree;
    sf->f_files = sv.f_files;
    sf->f_ffree = sv.f_ffree;
    sf->f_fsid.__val[0] = (int)CAIRN_FS_MAGIC;
    sf->f_namelen = (long)sv.f_namemax;
    sf->f_flags = (long)sv.f_flag;
    return 0;
}

/* The store's view of a descriptor: 0 (cs filled), a negative errno, or 1 when fd is not
 * ours. */
int cairn_fd_stat(int fd, struct cairn_store_stat *cs)
{
    struct cairn_ofd *d = cairn_fd_get(fd);
    if (!d)
        return 1;
    cairn_store *s = cairn_store_attached();
    int rc = d->kind == CAIRN_OFD_DIR ? cairn_store_stat(s, d->path, cs)
                                      : cairn_store_fstat(s, d->fh, cs);
    cairn_ofd_put(d);
    return rc;
}

CAIRN_EXPORT int fstat(int fd, struct stat *st)
{
    struct cairn_store_stat cs;
    int saved = errno;
    int rc = cairn_fd_stat(fd, &cs);
    if (rc == 1)
        return CAIRN_REAL(fstat, fd, st);
    if (rc == 0)
        cairn_fill_stat(st, &cs);
    return (int)cairn_result(rc, saved);
}
CAIRN_EXPORT int fstat64(int fd, struct stat64 *st) __attribute__((alias("fstat")));

/* glibc before 2.33 compiled stat calls into these; x86-64 knows versions 0 and 1, aarch64
 * version 0, all with the kernel's struct stat. */
CAIRN_EXPORT int __fxstat(int ver, int fd, struct stat *st)
{
    if (ver != 0 && ver != 1) {
        errno = EINVAL;
        return -1;
    }
    return fstat(fd, st);
}
CAIRN_EXPORT int __fxstat64(int ver, int fd, struct stat64 *st)
    __attribute__((alias("__fxstat")));

static int statvfs_fd(int fd, struct statvfs *sv)
{
    struct cairn_ofd *d = cairn_fd_get(fd);
    if (!d)
        return 1;
    cairn_ofd_put(d);
    return cairn_fill_statvfs(cairn_store_attached(), sv);
}

CAIRN_EXPORT int fstatvfs(int fd, struct statvfs *sv)
{
    int saved = errno;
    int rc = statvfs_fd(fd, sv);
    return rc == 1 ? CAIRN_REAL(fstatvfs, fd, sv) : (int)cairn_result(rc, saved);
}
CAIRN_EXPORT int fstatvfs64(int fd, struct statvfs64 *sv) __attribute__((alias("fstatvfs")));

CAIRN_EXPORT int fstatfs(int fd, struct statfs *sf)
{
    if (!fd_maybe(fd))
        return CAIRN_REAL(fstatfs, fd, sf);
    int saved = errno;
    return (int)cairn_result(cairn_fill_statfs(cairn_store_attached(), sf), saved);
}
CAIRN_EXPORT int fstatfs64(int fd, struct statfs64 *sf) __attribute__((alias("fstatfs")));
