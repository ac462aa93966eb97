/*
** interpose_exec.c: descriptors of ours and the virtual working directory across exec, for
** Cairn's interposer.
**
** exec replaces the program and with it this library's tables: what survives is the kernel's
** side, the placeholders (O_PATH /dev/null, see interpose.c) of every descriptor without
** FD_CLOEXEC. So every way of starting a program that a preload library can see -- execve,
** execv, execvp, execvpe, execl, execle, execlp, execveat, fexecve, posix_spawn, posix_spawnp
** -- is wrapped: before the real call, the descriptions of the inheritable descriptors of ours
** and the virtual working directory are written into one variable, CAIRN_FS_INHERIT, of the
** environment given to the new program. That environment is a new array (on the caller's
** stack, or in a private mapping when large): the caller's is never changed, and when the exec
** fails nothing of the caller has changed. The new program's constructor (cairn_inherit)
** reads the variable, removes it from its environment, attaches the store and gives each
** placeholder its description again. From then on the two programs have descriptions of
** their own: offsets are no longer shared (O_APPEND still appends at the end).
**
** The variable is one line of space-separated fields, strings percent-encoded (bytes outside
** [A-Za-z0-9._/,+-] as %XX):
**
**     1 x<pid> <store> <prefix> <cwd> <entry> <entry> ...
**
** "1" is the format; x<pid> says the variable is for the program that process <pid> execs
** (the pid exec keeps), s<pid> for a child it spawns (getppid()); <store> and <prefix> must
** be the new program's own (another store or prefix: nothing is taken over, and one line
** says so); <cwd> is "/" followed by the store path of the working directory, or "-". Each
** entry is <fd>:<f|d>:<flags>:<offset>:<record>:<generation>:/<store path>, for a file or a
** directory. The constructor trusts nothing in it: a variable meant for another process is
** dropped; a descriptor is taken over only if it is still an O_PATH /dev/null placeholder;
** store paths are normalised and only ever used as names in the store, never as real paths;
** a file's record and generation name it only if they still match (stale otherwise: ESTALE,
** as the exec'ing program would have seen). At most CAIRN_INHERIT_MAX bytes are passed (the
** kernel refuses longer variables); descriptors beyond stay placeholders, and one line says
** so.
**
** vfork is fork under this library: a vfork child shares the parent's memory, so its dup2
** and close (a shell's redirections, CPython's close_range) would change the parent's
** descriptor table. posix_spawn (glibc's own) never runs this library's code in the child.
**
** system() and popen() are done here (through posix_spawn) when there is anything to pass,
** since glibc's start the shell through internal calls. Not covered: posix_spawn's file actions (open,
** chdir, dup2) act in the child where this library does not run, so they cannot name paths of
** ours, and a descriptor of ours they dup2 stays a placeholder there; a program in the store
** cannot be executed (EACCES: the kernel maps programs from files it knows).
*/
#include "interpose.h"

#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>

#define CAIRN_INHERIT_VAR "CAIRN_FS_INHERIT"
/* The kernel's limit on one environment string is 32 pages (MAX_ARG_STRLEN). */
#define CAIRN_INHERIT_MAX (120u << 10)

extern char **environ;

/* ---------------------------------------------------------------------------------------- */
/* Writing the variable                                                                     */
/* ---------------------------------------------------------------------------------------- */

/* A bounded buffer: what does not fit is counted in n, not written. */
struct out {
    char *p;
    size_t cap, n;
};

static void put(struct out *o, const char *s, size_t k)
{
    if (o->n + k < o->cap)
        memcpy(o->p + o->n, s, k);
    o->n += k;
}

static void put_str(struct out *o, const char *s)
{
    put(o, s, strlen(s));
}

static void put_num(struct out *o, unsigned long long v)
{
    char b[24];
    int k = snprintf(b, sizeof b, "%llu", v);
    put(o, b, (size_t)k);
}

static int plain(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == '/' || c == ',' || c == '+' || c == '-';
}

static void put_enc(struct out *o, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        char b[3] = {'%', hex[*c >> 4], hex[*c & 15]};
        put(o, plain(*c) ? (const char *)c : b, plain(*c) ? 1 : 3);
    }
}

/* One entry for descriptor fd, if it is ours and inherited; 0 when it is not. */
static int put_entry(struct out *o, int fd)
{
    struct cairn_ofd *d = cairn_fd_get(fd);
    if (!d)
        return 0;
    int fl = CAIRN_REAL(fcntl, fd, F_GETFD);
    if (fl < 0 || (fl & FD_CLOEXEC)) {
        cairn_ofd_put(d);
        return 0;
    }
    pthread_mutex_lock(&d->lock);
    uint64_t off = d->off;
    int flags = d->flags;
    pthread_mutex_unlock(&d->lock);
    put(o, " ", 1);
    put_num(o, (unsigned)fd);
    put_str(o, d->kind == CAIRN_OFD_DIR ? ":d:" : ":f:");
    put_num(o, (unsigned)flags);
    put(o, ":", 1);
    put_num(o, off);
    put(o, ":", 1);
    put_num(o, d->fh.index);
    put(o, ":", 1);
    put_num(o, d->fh.gen);
    put(o, ":/", 2);
    put_enc(o, d->path);
    cairn_ofd_put(d);
    return 1;
}

/*
** Writes "CAIRN_FS_INHERIT=..." into buf (cap bytes, NUL-ended) for a program exec'ed in place
** (how 'x') or spawned as a child ('s'). Returns 0 when there is nothing to pass, else the
** number of descriptors of ours left out because they did not fit in cap (0 when all did).
*/
static int export_state(char *buf, size_t cap, char how, int *any)
{
    char cwd[CAIRN_STORE_PATH_MAX];
    int cwd_on = cairn_cwd_active() && cairn_cwd_get(cwd);
    int first = cairn_store_attached() ? cairn_fd_next(0) : -1;
    *any = 0;
    if (!cwd_on && first < 0)
        return 0; /* the common case, without even reading the configuration */
    const struct cairn_cfg *c = cairn_cfg();
    struct out o = {buf, cap, 0};
    put_str(&o, CAIRN_INHERIT_VAR "=1 ");
    put(&o, &how, 1);
    put_num(&o, (unsigned)getpid());
    put(&o, " ", 1);
    put_enc(&o, c->name);
    put(&o, " ", 1);
    put_enc(&o, c->prefix);
    put(&o, " ", 1);
    if (cwd_on) {
        put(&o, "/", 1);
        put_enc(&o, cwd);
    } else {
        put(&o, "-", 1);
    }
    int left = 0, entries = 0;
    for (int fd = first; fd >= 0; fd = cairn_fd_next(fd + 1)) {
        size_t before = o.n;
        if (!put_entry(&o, fd))
            continue;
        if (o.n >= o.cap) {
            o.n = before; /* whole entries only */
            left++;
        } else {
            entries++;
        }
    }
    if (o.n >= o.cap) /* the header alone did not fit */
        return -1;
    o.p[o.n] = 0;
    *any = cwd_on || entries > 0;
    return left;
}

/* ---------------------------------------------------------------------------------------- */
/* The new program's environment                                                           */
/* ---------------------------------------------------------------------------------------- */

static int is_ours_var(const char *e)
{
    return strncmp(e, CAIRN_INHERIT_VAR "=", sizeof CAIRN_INHERIT_VAR) == 0;
}

/*
** Calls run(ctx, env) with env = envp minus any CAIRN_FS_INHERIT, plus ours when there is
** something to pass. Everything is on this frame's stack, or in a private mapping that is
** unmapped after the call, so that nothing is left allocated when run fails (and nothing
** needs malloc). Returns what run returns, or -1 with errno set when env cannot be made.
*/
static int with_env(char *const envp[], char how, int (*run)(void *, char *const *), void *ctx)
{
    size_t n = 0;
    int stale = 0; /* envp holds a CAIRN_FS_INHERIT already */
    while (envp && envp[n])
        stale |= is_ours_var(envp[n++]);
    char small[4096];
    char *var = small, *map = NULL;
    size_t maplen = 0;
    int any;
    int left = export_state(small, sizeof small, how, &any);
    if (!any && left == 0 && !stale)
        return run(ctx, envp);
    size_t ptrs = (n + 2) * sizeof(char *);
    int big = left != 0 || ptrs > (64u << 10);
    if (big) {
        maplen = ptrs + (left ? CAIRN_INHERIT_MAX : 0);
        map = CAIRN_REAL(mmap, NULL, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                         -1, 0);
        if (map == MAP_FAILED)
            return -1;
        if (left) {
            var = map + ptrs;
            left = export_state(var, CAIRN_INHERIT_MAX, how, &any);
            if (left > 0)
                cairn_log("%d descriptors of ours are not passed to the new program (more than "
                          "%u bytes); there they fail with EBADF", left, CAIRN_INHERIT_MAX);
        }
    }
    char *stack_env[big ? 1 : n + 2];
    char **env = big ? (char **)(void *)map : stack_env;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!is_ours_var(envp[i]))
            env[k++] = envp[i];
    if (any && left >= 0)
        env[k++] = var;
    env[k] = NULL;
    int rc = run(ctx, env);
    if (map) {
        int e = errno;
        munmap(map, maplen);
        errno = e;
    }
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* The exec family                                                                          */
/* ---------------------------------------------------------------------------------------- */

/*
** The name to execute, classified as cairn_route does: 0 (p->pass is what to hand the kernel:
** a relative name under a virtual working directory that leaves the prefix comes resolved),
** or -1 with errno: a program in the store cannot be executed (EACCES, as on a file system
** mounted noexec; ENOENT when there is no such file).
*/
static int exec_name(int dirfd, const char *path, struct cairn_path *p)
{
    cairn_store *s;
    int r = cairn_route(dirfd, path, p, &s);
    if (r <= 0)
        return r;
    struct cairn_store_stat cs;
    int rc = cairn_store_stat(s, p->rel, &cs);
    errno = rc < 0 ? -rc : EACCES;
    return -1;
}

enum exec_kind { EXEC_VE, EXEC_VEAT, EXEC_VPE, EXEC_FD, SPAWN, SPAWNP };

struct exec_args {
    enum exec_kind kind;
    int dirfd, flags;
    const char *path;
    char *const *argv;
    pid_t *pid;
    const posix_spawn_file_actions_t *actions;
    const posix_spawnattr_t *attr;
};

static int run_exec(void *ctx, char *const env[])
{
    const struct exec_args *a = ctx;
    switch (a->kind) {
    case EXEC_VE: return CAIRN_REAL(execve, a->path, a->argv, env);
    case EXEC_VEAT: return CAIRN_REAL(execveat, a->dirfd, a->path, a->argv, env, a->flags);
    case EXEC_VPE: return CAIRN_REAL(execvpe, a->path, a->argv, env);
    case EXEC_FD: return CAIRN_REAL(fexecve, a->dirfd, a->argv, env);
    case SPAWN:
        return CAIRN_REAL(posix_spawn, a->pid, a->path, a->actions, a->attr, a->argv, env);
    default:
        return CAIRN_REAL(posix_spawnp, a->pid, a->path, a->actions, a->attr, a->argv, env);
    }
}

static int exec_ve(const char *path, char *const argv[], char *const envp[])
{
    struct cairn_path p;
    if (exec_name(AT_FDCWD, path, &p) < 0)
        return -1;
    struct exec_args a = {.kind = EXEC_VE, .path = p.pass, .argv = argv};
    return with_env(envp, 'x', run_exec, &a);
}

/* execvpe: a name with a '/' is a path; any other is looked up in $PATH by glibc. */
static int exec_vpe(const char *file, char *const argv[], char *const envp[])
{
    struct cairn_path p;
    p.pass = file;
    if (file && strchr(file, '/') && exec_name(AT_FDCWD, file, &p) < 0)
        return -1;
    struct exec_args a = {.kind = EXEC_VPE, .path = p.pass, .argv = argv};
    return with_env(envp, 'x', run_exec, &a);
}

CAIRN_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
    return exec_ve(path, argv, envp);
}

CAIRN_EXPORT int execv(const char *path, char *const argv[])
{
    return exec_ve(path, argv, environ);
}

CAIRN_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
    return exec_vpe(file, argv, envp);
}

CAIRN_EXPORT int execvp(const char *file, char *const argv[])
{
    return exec_vpe(file, argv, environ);
}

CAIRN_EXPORT int execveat(int dirfd, const char *path, char *const argv[], char *const envp[],
                          int flags)
{
    struct cairn_path p;
    path = CAIRN_LAUNDER(path);
    p.pass = path;
    if ((flags & AT_EMPTY_PATH) && path && !path[0]) {
        if (cairn_fd_maybe(dirfd)) {
            errno = EACCES;
            return -1;
        }
    } else if (exec_name(dirfd, path, &p) < 0) {
        return -1;
    }
    struct exec_args a = {.kind = EXEC_VEAT, .dirfd = dirfd, .path = p.pass, .argv = argv,
                          .flags = flags};
    return with_env(envp, 'x', run_exec, &a);
}

CAIRN_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
    if (cairn_fd_maybe(fd)) {
        errno = EACCES;
        return -1;
    }
    struct exec_args a = {.kind = EXEC_FD, .dirfd = fd, .argv = argv};
    return with_env(envp, 'x', run_exec, &a);
}

/* The arguments of execl, execle and execlp as an argv array on the caller's stack: count
 * them, then copy them; with_envp, execle's environment (after the NULL) into envp. */
#define VA_ARGV(arg, argv, with_envp, envp)                                                      \
    size_t argc_ = 1;                                                                            \
    va_list ap_;                                                                                 \
    va_start(ap_, arg);                                                                          \
    while (va_arg(ap_, char *) != NULL)                                                          \
        argc_++;                                                                                 \
    va_end(ap_);                                                                                 \
    char *argv[argc_ + 1];                                                                       \
    argv[0] = (char *)(arg);                                                                     \
    va_start(ap_, arg);                                                                          \
    for (size_t i_ = 1; i_ <= argc_; i_++)                                                       \
        argv[i_] = va_arg(ap_, char *);                                                          \
    char *const *envp = (with_envp) ? va_arg(ap_, char *const *) : environ;                      \
    va_end(ap_)

CAIRN_EXPORT int execl(const char *path, const char *arg, ...)
{
    VA_ARGV(arg, argv, 0, envp);
    return exec_ve(path, argv, envp);
}

CAIRN_EXPORT int execle(const char *path, const char *arg, ...)
{
    VA_ARGV(arg, argv, 1, envp);
    return exec_ve(path, argv, envp);
}

CAIRN_EXPORT int execlp(const char *file, const char *arg, ...)
{
    VA_ARGV(arg, argv, 0, envp);
    return exec_vpe(file, argv, envp);
}

/* posix_spawn and posix_spawnp return the error instead of setting errno. */
static int spawn(enum exec_kind kind, pid_t *pid, const char *path,
                 const posix_spawn_file_actions_t *actions, const posix_spawnattr_t *attr,
                 char *const argv[], char *const envp[])
{
    int saved = errno;
    struct cairn_path p;
    p.pass = path;
    if ((kind == SPAWN || (path && strchr(path, '/'))) && exec_name(AT_FDCWD, path, &p) < 0) {
        int e = errno;
        errno = saved;
        return e;
    }
    struct exec_args a = {.kind = kind, .path = p.pass, .argv = argv, .pid = pid,
                          .actions = actions, .attr = attr};
    int rc = with_env(envp, 's', run_exec, &a);
    if (rc < 0)
        rc = errno;
    errno = saved;
    return rc;
}

CAIRN_EXPORT int posix_spawn(pid_t *pid, const char *path,
                             const posix_spawn_file_actions_t *actions,
                             const posix_spawnattr_t *attr, char *const argv[],
                             char *const envp[])
{
    return spawn(SPAWN, pid, path, actions, attr, argv, envp);
}

CAIRN_EXPORT int posix_spawnp(pid_t *pid, const char *file,
                              const posix_spawn_file_actions_t *actions,
                              const posix_spawnattr_t *attr, char *const argv[],
                              char *const envp[])
{
    return spawn(SPAWNP, pid, file, actions, attr, argv, envp);
}

/* Whether a new program would be given anything: a virtual working directory, or
 * descriptors of ours (maybe all close-on-exec; export_state decides). */
static int anything_to_pass(void)
{
    return cairn_cwd_active() || (cairn_store_attached() && cairn_fd_next(0) >= 0);
}

/*
** system: glibc's starts the shell with internal calls this library does not see, so with
** anything to pass it is done here, through posix_spawn, the way glibc does it: SIGINT and
** SIGQUIT ignored and SIGCHLD blocked in the caller while the command runs (the first of
** several concurrent calls saves the dispositions, the last restores them), and put back to
** default (unless ignored) in the shell; 127 as the exit status when the shell cannot be run.
*/
static pthread_mutex_t system_lock = PTHREAD_MUTEX_INITIALIZER;
static int system_running;
static struct sigaction system_intr, system_quit;

CAIRN_EXPORT int system(const char *cmd)
{
    if (!cmd || !anything_to_pass())
        return CAIRN_REAL(system, cmd);
    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    pthread_mutex_lock(&system_lock);
    if (system_running++ == 0) {
        sigaction(SIGINT, &ign, &system_intr);
        sigaction(SIGQUIT, &ign, &system_quit);
    }
    sigset_t def, chld, omask;
    sigemptyset(&def);
    if (system_intr.sa_handler != SIG_IGN)
        sigaddset(&def, SIGINT);
    if (system_quit.sa_handler != SIG_IGN)
        sigaddset(&def, SIGQUIT);
    pthread_mutex_unlock(&system_lock);
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, &omask);

    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setsigmask(&attr, &omask);
    posix_spawnattr_setsigdefault(&attr, &def);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
    char *argv[] = {"sh", "-c", "--", (char *)cmd, NULL};
    pid_t pid;
    int status = 0;
    int rc = spawn(SPAWN, &pid, "/bin/sh", NULL, &attr, argv, environ);
    posix_spawnattr_destroy(&attr);
    if (rc == 0) {
        while (waitpid(pid, &status, 0) < 0)
            if (errno != EINTR) {
                status = -1;
                break;
            }
    } else {
        status = 127 << 8;
    }
    int e = errno;
    pthread_mutex_lock(&system_lock);
    if (--system_running == 0) {
        sigaction(SIGINT, &system_intr, NULL);
        sigaction(SIGQUIT, &system_quit, NULL);
    }
    pthread_mutex_unlock(&system_lock);
    sigprocmask(SIG_SETMASK, &omask, NULL);
    errno = e;
    return status;
}

/*
** popen and pclose: glibc's popen starts the shell with internal calls too, so with anything
** to pass it is done here: a pipe, the shell spawned with its end on descriptor 0 or 1 (the
** streams of earlier popen calls of ours closed in it, as POSIX asks), and the other end as a
** stream; pclose of such a stream closes it and waits for the shell. Streams glibc's popen
** made are left to glibc's pclose.
*/
#define CAIRN_MAX_POPEN 64

static pthread_mutex_t popen_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    FILE *fp;
    int fd;
    pid_t pid;
} popens[CAIRN_MAX_POPEN];

CAIRN_EXPORT FILE *popen(const char *cmd, const char *mode)
{
    if (!anything_to_pass())
        return CAIRN_REAL(popen, cmd, mode);
    int rd = mode && mode[0] == 'r', cloexec = mode && strchr(mode, 'e') != NULL;
    if (!mode || (!rd && mode[0] != 'w') || (mode[1] && mode[1] != 'e')) {
        errno = EINVAL;
        return NULL;
    }
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0)
        return NULL;
    int mine = rd ? fds[0] : fds[1], theirs = rd ? fds[1] : fds[0];
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, theirs, rd ? 1 : 0);
    pthread_mutex_lock(&popen_lock);
    int slot = -1;
    for (int i = 0; i < CAIRN_MAX_POPEN; i++) {
        if (popens[i].fp)
            posix_spawn_file_actions_addclose(&fa, popens[i].fd);
        else if (slot < 0)
            slot = i;
    }
    FILE *fp = NULL;
    pid_t pid = -1;
    char *argv[] = {"sh", "-c", "--", (char *)cmd, NULL};
    int err = slot < 0 ? EMFILE : spawn(SPAWN, &pid, "/bin/sh", &fa, NULL, argv, environ);
    if (err == 0 && (fp = CAIRN_REAL(fdopen, mine, rd ? "r" : "w")) == NULL)
        err = errno;
    if (fp) {
        if (!cloexec)
            CAIRN_REAL(fcntl, mine, F_SETFD, 0);
        popens[slot].fp = fp;
        popens[slot].fd = mine;
        popens[slot].pid = pid;
    }
    pthread_mutex_unlock(&popen_lock);
    posix_spawn_file_actions_destroy(&fa);
    CAIRN_REAL(close, theirs);
    if (!fp) {
        CAIRN_REAL(close, mine); /* the shell, if it runs, sees the end of its pipe */
        while (pid > 0 && waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        errno = err;
    }
    return fp;
}

CAIRN_EXPORT int pclose(FILE *fp)
{
    pid_t pid = -1;
    pthread_mutex_lock(&popen_lock);
    for (int i = 0; fp && i < CAIRN_MAX_POPEN; i++)
        if (popens[i].fp == fp) {
            pid = popens[i].pid;
            popens[i].fp = NULL;
        }
    pthread_mutex_unlock(&popen_lock);
    if (pid < 0)
        return CAIRN_REAL(pclose, fp);
    fclose(fp);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    return status;
}

void cairn_exec_atfork_child(void)
{
    pthread_mutex_init(&system_lock, NULL);
    pthread_mutex_init(&popen_lock, NULL);
}

/* A vfork child would share (and change) this library's tables with its parent. */
CAIRN_EXPORT pid_t vfork(void)
{
    return CAIRN_REAL(fork);
}

/* ---------------------------------------------------------------------------------------- */
/* Reading the variable in the new program                                                  */
/* ---------------------------------------------------------------------------------------- */

/* The next space-separated field of *cur, decoded into out (len bytes); 0 when there is none
 * or it is malformed or too long. */
static int field(const char **cur, char *out, size_t len)
{
    const char *c = *cur;
    while (*c == ' ')
        c++;
    size_t n = 0;
    for (; *c && *c != ' '; c++) {
        int ch = (unsigned char)*c;
        if (ch == '%') {
            char hex[3] = {c[1], c[1] ? c[2] : 0, 0};
            char *end;
            ch = (int)strtol(hex, &end, 16);
            if (*end || !hex[0] || !hex[1] || ch == 0)
                return 0;
            c += 2;
        }
        if (n + 1 >= len)
            return 0;
        out[n++] = (char)ch;
    }
    out[n] = 0;
    *cur = c;
    return n > 0;
}

/* An unsigned number ending at sep (or the end of the string); advances *s past it. */
static int number(char **s, char sep, unsigned long long *v)
{
    char *end;
    if (**s < '0' || **s > '9')
        return 0;
    errno = 0;
    *v = strtoull(*s, &end, 10);
    if (errno || *end != sep)
        return 0;
    *s = sep ? end + 1 : end;
    return 1;
}

/* Whether fd is still what this library hands out as a placeholder. */
static int placeholder(int fd)
{
    struct stat st;
    int fl = CAIRN_REAL(fcntl, fd, F_GETFL);
    return fl >= 0 && (fl & O_PATH) && CAIRN_REAL(fstat, fd, &st) == 0 && S_ISCHR(st.st_mode) &&
           st.st_rdev == makedev(1, 3);
}

/* One entry, "fd:kind:flags:off:index:gen:/path": takes the descriptor over. 0 on success,
 * -1 for a malformed entry, a negative errno when the store cannot be attached. */
static int take_over(char *e)
{
    unsigned long long fd, flags, off, index, gen;
    char *s = e;
    if (!number(&s, ':', &fd) || fd > INT_MAX || (s[0] != 'f' && s[0] != 'd') || s[1] != ':')
        return -1;
    int kind = s[0] == 'd' ? CAIRN_OFD_DIR : CAIRN_OFD_FILE;
    s += 2;
    if (!number(&s, ':', &flags) || !number(&s, ':', &off) || !number(&s, ':', &index) ||
        !number(&s, ':', &gen) || *s != '/' || flags > INT_MAX || off > INT64_MAX ||
        index > UINT32_MAX || gen > UINT32_MAX)
        return -1;
    struct cairn_ofd t;
    memset(&t, 0, sizeof t);
    if (cairn_store_normalize(s + 1, t.path, sizeof t.path) < 0 || !placeholder((int)fd))
        return -1;
    cairn_store *st;
    int rc = cairn_store_get(&st);
    if (rc < 0)
        return rc;
    t.kind = kind;
    t.flags = (int)flags;
    t.off = off;
    t.fh.index = (uint32_t)index;
    t.fh.gen = (uint32_t)gen;
    return cairn_fd_adopt((int)fd, &t) < 0 ? -1 : 0;
}

void cairn_inherit(void)
{
    const char *v = getenv(CAIRN_INHERIT_VAR);
    if (!v)
        return;
    int saved = errno;
    const struct cairn_cfg *c = cairn_cfg();
    char ver[4], who[32], name[sizeof c->name], prefix[sizeof c->prefix], cwd[PATH_MAX];
    const char *cur = v;
    unsigned long long pid = 0;
    char *end = NULL;
    if (field(&cur, ver, sizeof ver) && strcmp(ver, "1") == 0 && field(&cur, who, sizeof who) &&
        (who[0] == 'x' || who[0] == 's'))
        pid = strtoull(who + 1, &end, 10);
    /* Meant for this process: the one that exec'ed itself into it, or its spawning parent. */
    int mine = end && !*end && pid == (unsigned long long)(who[0] == 'x' ? getpid() : getppid());
    if (mine && c->enabled && field(&cur, name, sizeof name) &&
        field(&cur, prefix, sizeof prefix) && field(&cur, cwd, sizeof cwd)) {
        if (strcmp(name, c->name) != 0 || strcmp(prefix, c->prefix) != 0) {
            cairn_log("descriptors and working directory under %s (store %s) are not taken "
                      "over: this program uses %s (store %s)", prefix, name, c->prefix, c->name);
        } else {
            char rel[CAIRN_STORE_PATH_MAX];
            if (cwd[0] == '/' && cairn_store_normalize(cwd + 1, rel, sizeof rel) >= 0)
                cairn_cwd_enter(rel);
            char e[16 + 5 * 21 + 3 * CAIRN_STORE_PATH_MAX];
            while (field(&cur, e, sizeof e))
                if (take_over(e) < -1)
                    break; /* no store: the attach said why, once */
        }
    }
    unsetenv(CAIRN_INHERIT_VAR);
    errno = saved;
}
