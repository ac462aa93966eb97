/*
** interpose.h: what the three parts of Cairn's LD_PRELOAD interposer share. Internal: nothing
** here is exported from libcairn-fs.so (the build hides every symbol not marked CAIRN_EXPORT).
**
**   interpose.c        the table of real functions (and its fault hook), configuration, the
**                      store attachment, path classification, the descriptor table and every
**                      call that takes a file descriptor or opens one
**   interpose_dir.c    calls on names (stat, access, unlink, rename, mkdir, ...) and
**                      directory streams (opendir, readdir, ...)
**   interpose_stdio.c  stdio streams (fopen, fdopen, freopen, fileno) over fopencookie, and
**                      the standard streams while descriptor 0, 1 or 2 is ours
**   interpose_cwd.c    the virtual working directory (chdir, fchdir, getcwd, ...)
**   interpose_exec.c   the exec family, posix_spawn and vfork: descriptors of ours and the
**                      working directory passed to the new program
**
** The file comment of interpose.c describes the whole library.
*/
#ifndef CAIRN_INTERPOSE_H
#define CAIRN_INTERPOSE_H

/* A fortified build would turn open, read and friends into inline wrappers that clash with
 * the definitions of this library. */
#undef _FORTIFY_SOURCE
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>
#include <utime.h>

#include "store.h"

#define CAIRN_EXPORT __attribute__((visibility("default")))
#define CAIRN_UNLIKELY(x) __builtin_expect(!!(x), 0)
/* glibc declares most path parameters nonnull, which lets the compiler drop our NULL checks;
 * a NULL path must still pass through (the kernel answers EFAULT), not crash here. */
#define CAIRN_LAUNDER(p)                                                                         \
    ({                                                                                           \
        __typeof__(p) p_ = (p);                                                                  \
        __asm__("" : "+r"(p_));                                                                  \
        p_;                                                                                      \
    })

/* The *64 names (open64, stat64, lseek64, ...) are the plain functions under another name: on
 * the 64-bit Linux targets Cairn supports they have the same types, as they do inside glibc. */
_Static_assert(sizeof(off_t) == 8, "64-bit off_t");
_Static_assert(sizeof(struct stat) == sizeof(struct stat64), "stat and stat64 agree");
_Static_assert(sizeof(struct dirent) == sizeof(struct dirent64), "dirent and dirent64 agree");

/* Fortified entry points that glibc only declares under _FORTIFY_SOURCE. */
int __open_2(const char *path, int flags);
int __openat_2(int dirfd, const char *path, int flags);
ssize_t __read_chk(int fd, void *buf, size_t nbytes, size_t buflen);
ssize_t __pread_chk(int fd, void *buf, size_t nbytes, off_t off, size_t buflen);
char *__getcwd_chk(char *buf, size_t size, size_t buflen);

/*
** The real functions, resolved once with dlsym(RTLD_NEXT) into one table. Every wrapper and
** every call this library makes to libc goes through CAIRN_REAL(name)(args), which is where
** CAIRN_FS_FAULT injects failures. X(name, return type, parameter types, value on failure).
*/
#define CAIRN_REAL_CALLS(X)                                                                      \
    X(open, int, (const char *, int, ...), -1)                                                   \
    X(openat, int, (int, const char *, int, ...), -1)                                            \
    X(__open_2, int, (const char *, int), -1)                                                    \
    X(__openat_2, int, (int, const char *, int), -1)                                             \
    X(close, int, (int), -1)                                                                     \
    X(close_range, int, (unsigned, unsigned, int), -1)                                           \
    X(closefrom, void, (int), )                                                                  \
    X(read, ssize_t, (int, void *, size_t), -1)                                                  \
    X(__read_chk, ssize_t, (int, void *, size_t, size_t), -1)                                    \
    X(pread, ssize_t, (int, void *, size_t, off_t), -1)                                          \
    X(__pread_chk, ssize_t, (int, void *, size_t, off_t, size_t), -1)                            \
    X(readv, ssize_t, (int, const struct iovec *, int), -1)                                      \
    X(preadv, ssize_t, (int, const struct iovec *, int, off_t), -1)                              \
    X(preadv2, ssize_t, (int, const struct iovec *, int, off_t, int), -1)                        \
    X(write, ssize_t, (int, const void *, size_t), -1)                                           \
    X(pwrite, ssize_t, (int, const void *, size_t, off_t), -1)                                   \
    X(writev, ssize_t, (int, const struct iovec *, int), -1)                                     \
    X(pwritev, ssize_t, (int, const struct iovec *, int, off_t), -1)                             \
    X(pwritev2, ssize_t, (int, const struct iovec *, int, off_t, int), -1)                       \
    X(lseek, off_t, (int, off_t, int), -1)                                                       \
    X(fsync, int, (int), -1)                                                                     \
    X(fdatasync, int, (int), -1)                                                                 \
    X(ftruncate, int, (int, off_t), -1)                                                          \
    X(truncate, int, (const char *, off_t), -1)                                                  \
    X(fstat, int, (int, struct stat *), -1)                                                      \
    X(stat, int, (const char *, struct stat *), -1)                                              \
    X(lstat, int, (const char *, struct stat *), -1)                                             \
    X(fstatat, int, (int, const char *, struct stat *, int), -1)                                 \
    X(statx, int, (int, const char *, int, unsigned, struct statx *), -1)                        \
    X(statfs, int, (const char *, struct statfs *), -1)                                          \
    X(fstatfs, int, (int, struct statfs *), -1)                                                  \
    X(statvfs, int, (const char *, struct statvfs *), -1)                                        \
    X(fstatvfs, int, (int, struct statvfs *), -1)                                                \
    X(access, int, (const char *, int), -1)                                                      \
    X(faccessat, int, (int, const char *, int, int), -1)                                         \
    X(euidaccess, int, (const char *, int), -1)                                                  \
    X(unlink, int, (const char *), -1)                                                           \
    X(unlinkat, int, (int, const char *, int), -1)                                               \
    X(remove, int, (const char *), -1)                                                           \
    X(rename, int, (const char *, const char *), -1)                                             \
    X(renameat, int, (int, const char *, int, const char *), -1)                                 \
    X(renameat2, int, (int, const char *, int, const char *, unsigned), -1)                      \
    X(mkdir, int, (const char *, mode_t), -1)                                                    \
    X(mkdirat, int, (int, const char *, mode_t), -1)                                             \
    X(rmdir, int, (const char *), -1)                                                            \
    X(chmod, int, (const char *, mode_t), -1)                                                    \
    X(fchmod, int, (int, mode_t), -1)                                                            \
    X(fchmodat, int, (int, const char *, mode_t, int), -1)                                       \
    X(chown, int, (const char *, uid_t, gid_t), -1)                                              \
    X(lchown, int, (const char *, uid_t, gid_t), -1)                                             \
    X(fchown, int, (int, uid_t, gid_t), -1)                                                      \
    X(fchownat, int, (int, const char *, uid_t, gid_t, int), -1)                                 \
    X(utimensat, int, (int, const char *, const struct timespec *, int), -1)                     \
    X(futimens, int, (int, const struct timespec *), -1)                                         \
    X(utime, int, (const char *, const struct utimbuf *), -1)                                    \
    X(utimes, int, (const char *, const struct timeval *), -1)                                   \
    X(getxattr, ssize_t, (const char *, const char *, void *, size_t), -1)                       \
    X(lgetxattr, ssize_t, (const char *, const char *, void *, size_t), -1)                      \
    X(fgetxattr, ssize_t, (int, const char *, void *, size_t), -1)                               \
    X(setxattr, int, (const char *, const char *, const void *, size_t, int), -1)                \
    X(lsetxattr, int, (const char *, const char *, const void *, size_t, int), -1)               \
    X(fsetxattr, int, (int, const char *, const void *, size_t, int), -1)                        \
    X(listxattr, ssize_t, (const char *, char *, size_t), -1)                                    \
    X(llistxattr, ssize_t, (const char *, char *, size_t), -1)                                   \
    X(flistxattr, ssize_t, (int, char *, size_t), -1)                                            \
    X(removexattr, int, (const char *, const char *), -1)                                        \
    X(lremovexattr, int, (const char *, const char *), -1)                                       \
    X(fremovexattr, int, (int, const char *), -1)                                                \
    X(readlink, ssize_t, (const char *, char *, size_t), -1)                                     \
    X(readlinkat, ssize_t, (int, const char *, char *, size_t), -1)                              \
    X(realpath, char *, (const char *, char *), NULL)                                            \
    X(canonicalize_file_name, char *, (const char *), NULL)                                      \
    X(dup, int, (int), -1)                                                                       \
    X(dup2, int, (int, int), -1)                                                                 \
    X(dup3, int, (int, int, int), -1)                                                            \
    X(fcntl, int, (int, int, ...), -1)                                                           \
    X(ioctl, int, (int, unsigned long, ...), -1)                                                 \
    X(isatty, int, (int), 0)                                                                     \
    X(flock, int, (int, int), -1)                                                                \
    X(copy_file_range, ssize_t, (int, off64_t *, int, off64_t *, size_t, unsigned), -1)          \
    X(sendfile, ssize_t, (int, int, off_t *, size_t), -1)                                        \
    X(splice, ssize_t, (int, off64_t *, int, off64_t *, size_t, unsigned), -1)                   \
    X(fallocate, int, (int, int, off_t, off_t), -1)                                              \
    X(posix_fallocate, int, (int, off_t, off_t), errno)                                          \
    X(posix_fadvise, int, (int, off_t, off_t, int), errno)                                       \
    X(mmap, void *, (void *, size_t, int, int, int, off_t), MAP_FAILED)                          \
    X(fopen, FILE *, (const char *, const char *), NULL)                                         \
    X(freopen, FILE *, (const char *, const char *, FILE *), NULL)                               \
    X(fdopen, FILE *, (int, const char *), NULL)                                                 \
    X(fileno, int, (FILE *), -1)                                                                 \
    X(fileno_unlocked, int, (FILE *), -1)                                                        \
    X(opendir, DIR *, (const char *), NULL)                                                      \
    X(fdopendir, DIR *, (int), NULL)                                                             \
    X(readdir, struct dirent *, (DIR *), NULL)                                                   \
    X(readdir_r, int, (DIR *, struct dirent *, struct dirent **), errno)                         \
    X(closedir, int, (DIR *), -1)                                                                \
    X(rewinddir, void, (DIR *), )                                                                \
    X(dirfd, int, (DIR *), -1)                                                                   \
    X(telldir, long, (DIR *), -1)                                                                \
    X(seekdir, void, (DIR *, long), )                                                            \
    X(scandir, int,                                                                              \
      (const char *, struct dirent ***, int (*)(const struct dirent *),                          \
       int (*)(const struct dirent **, const struct dirent **)),                                 \
      -1)                                                                                        \
    X(umask, mode_t, (mode_t), 0)                                                                \
    X(symlink, int, (const char *, const char *), -1)                                            \
    X(symlinkat, int, (const char *, int, const char *), -1)                                     \
    X(link, int, (const char *, const char *), -1)                                               \
    X(linkat, int, (int, const char *, int, const char *, int), -1)                              \
    X(mknod, int, (const char *, mode_t, dev_t), -1)                                             \
    X(mknodat, int, (int, const char *, mode_t, dev_t), -1)                                      \
    X(mkfifo, int, (const char *, mode_t), -1)                                                   \
    X(mkfifoat, int, (int, const char *, mode_t), -1)                                            \
    X(chdir, int, (const char *), -1)                                                            \
    X(fchdir, int, (int), -1)                                                                    \
    X(getcwd, char *, (char *, size_t), NULL)                                                    \
    X(__getcwd_chk, char *, (char *, size_t, size_t), NULL)                                      \
    X(getwd, char *, (char *), NULL)                                                             \
    X(get_current_dir_name, char *, (void), NULL)                                                \
    X(fork, pid_t, (void), -1)                                                                   \
    X(execve, int, (const char *, char *const *, char *const *), -1)                             \
    X(execveat, int, (int, const char *, char *const *, char *const *, int), -1)                 \
    X(execvpe, int, (const char *, char *const *, char *const *), -1)                            \
    X(fexecve, int, (int, char *const *, char *const *), -1)                                     \
    X(posix_spawn, int,                                                                          \
      (pid_t *, const char *, const posix_spawn_file_actions_t *, const posix_spawnattr_t *,     \
       char *const *, char *const *),                                                            \
      errno)                                                                                     \
    X(posix_spawnp, int,                                                                         \
      (pid_t *, const char *, const posix_spawn_file_actions_t *, const posix_spawnattr_t *,     \
       char *const *, char *const *),                                                            \
      errno)                                                                                     \
    X(system, int, (const char *), -1)                                                           \
    X(popen, FILE *, (const char *, const char *), NULL)                                         \
    X(pclose, int, (FILE *), -1)

#define CAIRN_REAL_ENUM(name, ret, params, fail) CAIRN_SYS_##name,
enum { CAIRN_REAL_CALLS(CAIRN_REAL_ENUM) CAIRN_SYS_COUNT };
#undef CAIRN_REAL_ENUM

/* Resolved pointers, indexed by CAIRN_SYS_*; NULL until resolved. */
extern void *cairn_real_fn[CAIRN_SYS_COUNT];
/* The index CAIRN_FS_FAULT names, or -1. */
extern int cairn_fault_index;
/* Resolves (on first use) and applies the fault hook; NULL, with errno set, when the call must
 * fail (the injected fault, or a function this libc lacks). */
void *cairn_real_slow(int index);

#define CAIRN_REAL_ACCESSOR(name, ret, params, fail)                                             \
    typedef ret(*cairn_##name##_fn) params;                                                      \
    static inline cairn_##name##_fn cairn_real_##name(void)                                      \
    {                                                                                            \
        void *p = __atomic_load_n(&cairn_real_fn[CAIRN_SYS_##name], __ATOMIC_ACQUIRE);           \
        if (CAIRN_UNLIKELY(p == NULL || cairn_fault_index == CAIRN_SYS_##name))                  \
            p = cairn_real_slow(CAIRN_SYS_##name);                                               \
        return (cairn_##name##_fn)p;                                                             \
    }                                                                                            \
    static inline ret cairn_fail_##name(void) { return fail; }
CAIRN_REAL_CALLS(CAIRN_REAL_ACCESSOR)
#undef CAIRN_REAL_ACCESSOR

/* Calls the real function, or returns its failure value (errno set) when the fault hook says
 * so or the function is missing. */
#define CAIRN_REAL(name, ...)                                                                    \
    ({                                                                                           \
        cairn_##name##_fn real_ = cairn_real_##name();                                           \
        real_ ? real_(__VA_ARGS__) : cairn_fail_##name();                                        \
    })

/* Configuration, read once from the environment (see interpose.c). */
struct cairn_cfg {
    int enabled;          /* 0: a bad value was found; every call passes through */
    size_t plen;          /* strlen(prefix) */
    char prefix[1024];    /* mount point, absolute, no trailing '/' */
    char name[128];       /* shm name of the store */
    char spill[1200];     /* spill file, "" for none */
    uint64_t size, chunk, spill_size;
    uint32_t max_files;
    int per_process;
};
const struct cairn_cfg *cairn_cfg(void);

/* The attached store, attaching on first use. 0, or a negative errno (the attach failed; the
 * reason was printed once). */
int cairn_store_get(cairn_store **out);
/* The store once attached (descriptors of ours exist only then). */
cairn_store *cairn_store_attached(void);

/* One line to stderr, "cairn-fs: ...\n", through the real write. */
void cairn_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A path the store owns: relative to the mount point and normalised. */
struct cairn_path {
    char rel[CAIRN_STORE_PATH_MAX];
    int slash;            /* the caller's path ended in '/' (so must name a directory) */
    int saved_errno;      /* errno on entry, restored on success */
    const char *pass;     /* the path to pass through with (see cairn_route) */
    char pass_buf[PATH_MAX];
};

/*
** Classifies (dirfd, path). Returns 0 when the call is not ours: pass it through with
** p->pass, which is path itself except for a path that climbs out of the mount point with
** "..": that one is resolved by name ("/cairn/.." is "/"), since the kernel cannot walk
** through a mount point that does not exist. Returns 1 when the call is ours and the store is
** attached (*s and p filled), -1 when it is ours but fails before reaching the store (errno
** set: ENAMETOOLONG, the attach error, ENOTDIR for a dirfd of ours that is a file, ...). A
** relative path is ours against a directory descriptor of ours, or against AT_FDCWD while the
** working directory is a virtual one (interpose_cwd.c).
*/
int cairn_route(int dirfd, const char *path, struct cairn_path *p, cairn_store **s);
/* Joins dir (relative, normalised) and name into out; -ENAMETOOLONG or 0. */
int cairn_join(const char *dir, const char *name, char *out, size_t len);

/* Finishes a call of ours: rc < 0 is a negative errno (set it, return -1); otherwise errno is
 * put back as it was on entry and rc is returned. */
static inline long cairn_result(long rc, int saved_errno)
{
    if (rc < 0) {
        errno = (int)-rc;
        return -1;
    }
    errno = saved_errno;
    return rc;
}

/* An open file description of ours, shared by dup'ed descriptors. */
#define CAIRN_OFD_FILE 1
#define CAIRN_OFD_DIR 2
struct cairn_ofd {
    pthread_mutex_t lock;       /* serialises offset updates: read, write, lseek */
    int refs;                   /* descriptors and calls in flight holding it (atomic) */
    int kind;                   /* CAIRN_OFD_FILE / CAIRN_OFD_DIR */
    int flags;                  /* O_ACCMODE bits, O_APPEND, O_PATH, O_SYNC, O_DSYNC, ... */
    uint64_t off;               /* the file offset (under lock) */
    struct cairn_store_fh fh;   /* files */
    char path[CAIRN_STORE_PATH_MAX]; /* relative, normalised */
};

/* Takes a reference on the description of fd, or returns NULL when fd is not ours. */
struct cairn_ofd *cairn_fd_get(int fd);
void cairn_ofd_put(struct cairn_ofd *d);
/* Whether fd may be ours, without taking a reference (one atomic load when it is not). */
int cairn_fd_maybe(int fd);
/* The store's view of a descriptor: 0 (cs filled), a negative errno, or 1 when fd is not
 * ours. */
int cairn_fd_stat(int fd, struct cairn_store_stat *cs);

/* Opens p in the store as open(2) would with flags and mode: a new descriptor of ours, or a
 * negative errno. */
int cairn_open_ours(cairn_store *s, const struct cairn_path *p, int flags, mode_t mode);
/* The process umask: read from /proc once, then followed through the umask wrapper. */
mode_t cairn_umask(void);
/* In a child after fork: directory streams' locks may be held by threads that are gone. */
void cairn_dir_atfork_child(void);

/* Opens (dirfd, path) the way openat does, ours or not; the stdio and directory code open
 * through it so that nothing they open escapes the descriptor table. */
int cairn_openat(int dirfd, const char *path, int flags, mode_t mode);
/* read, write, lseek and close for any descriptor, ours or not (stdio cookies use them). */
ssize_t cairn_read(int fd, void *buf, size_t len);
ssize_t cairn_write(int fd, const void *buf, size_t len);
off_t cairn_lseek(int fd, off_t off, int whence);
int cairn_close(int fd);
/* Sets O_APPEND on a descriptor of ours (fdopen with "a"); 0 or -errno. */
int cairn_fd_set_append(int fd);
/* The first descriptor at or after fd that may be ours, or -1: for walking the table. */
int cairn_fd_next(int fd);
/* Gives fd, a placeholder the kernel already holds, a new description copied from t (kind,
 * flags, off, fh, path); 0 or a negative errno. */
int cairn_fd_adopt(int fd, const struct cairn_ofd *t);

/* The standard streams (interpose_stdio.c). While descriptor 0, 1 or 2 is ours, stdin,
 * stdout or stderr is a stream of ours over it, so that a program's printf reaches the store
 * (glibc's own streams write through calls no preload library sees). cairn_std_before(fd)
 * flushes that stream before descriptor fd changes; cairn_std_after(fd) makes the variable
 * follow whether fd is ours now. Both ignore descriptors above 2. */
void cairn_std_before(int fd);
void cairn_std_after(int fd);
void cairn_std_atfork_child(void);

/* The virtual working directory (interpose_cwd.c): set while the process's working directory
 * is under the prefix. cairn_cwd_get copies it (relative, normalised, "" for the mount point)
 * into out and returns 1, or returns 0 when the working directory is a real one. */
extern int cairn_cwd_on;
int cairn_cwd_get(char out[CAIRN_STORE_PATH_MAX]);
/* Makes rel (normalised) the working directory; 0 or a negative errno. */
int cairn_cwd_enter(const char *rel);
void cairn_cwd_atfork_prepare(void);
void cairn_cwd_atfork_parent(void);
void cairn_cwd_atfork_child(void);
static inline int cairn_cwd_active(void)
{
    return __atomic_load_n(&cairn_cwd_on, __ATOMIC_ACQUIRE);
}

/* Descriptors of ours and the working directory across exec (interpose_exec.c): the
 * constructor calls cairn_inherit() to take over what the program that exec'ed this one
 * passed in the environment. */
void cairn_inherit(void);
void cairn_exec_atfork_child(void);

/* struct stat / statx for a file of the store. */
void cairn_fill_stat(struct stat *st, const struct cairn_store_stat *cs);
void cairn_fill_statx(struct statx *stx, const struct cairn_store_stat *cs);
/* statfs / statvfs of the store. */
int cairn_fill_statfs(cairn_store *s, struct statfs *sf);
int cairn_fill_statvfs(cairn_store *s, struct statvfs *sv);

#endif
