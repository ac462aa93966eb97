/*
** interpose_dir.c: the calls of Cairn's interposer that take names rather than descriptors,
** and directory streams.
**
** Calls on names (stat and its many spellings, access, unlink, rename, mkdir, rmdir, truncate,
** chmod and friends, statfs, realpath) classify their path with cairn_route and either pass
** through or act on the store. Directories are an illusion over full paths, as in CRUISE:
** the store lists a directory's entries from the paths of its files (cairn_store_readdir), and
** a directory exists when it was made with mkdir or when a file lies below it.
**
** Directory streams of ours live in a fixed array (dirs[] below), so telling a DIR* of ours
** from one of glibc's is a pointer comparison; each holds a descriptor of ours on the
** directory (what dirfd returns), the store's listing cookie and the entry readdir returns.
** A stream lists ".", ".." and then the store's entries.
*/
#include "interpose.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>

/* ---------------------------------------------------------------------------------------- */
/* stat                                                                                     */
/* ---------------------------------------------------------------------------------------- */

/* The store's stat of p; a path written with a trailing '/' must be a directory. */
static int stat_path(cairn_store *s, const struct cairn_path *p, struct cairn_store_stat *cs)
{
    int rc = cairn_store_stat(s, p->rel, cs);
    if (rc == 0 && p->slash && cs->type != CAIRN_FILE_DIR)
        rc = -ENOTDIR;
    return rc;
}

/* Finishes stat, lstat, fstatat and __xstat for a path that cairn_route classified (r). */
static int stat_finish(int r, cairn_store *s, struct cairn_path *p, struct stat *st)
{
    if (r < 0)
        return -1;
    struct cairn_store_stat cs;
    int rc = stat_path(s, p, &cs);
    if (rc == 0)
        cairn_fill_stat(st, &cs);
    return (int)cairn_result(rc, p->saved_errno);
}

CAIRN_EXPORT int stat(const char *path, struct stat *st)
{
    struct cairn_path p;
    cairn_store *s;
    int r = cairn_route(AT_FDCWD, path, &p, &s);
    return r == 0 ? CAIRN_REAL(stat, p.pass, st) : stat_finish(r, s, &p, st);
}
CAIRN_EXPORT int stat64(const char *path, struct stat64 *st) __attribute__((alias("stat")));

/* There are no symbolic links in the store: lstat is stat. */
CAIRN_EXPORT int lstat(const char *path, struct stat *st)
{
    struct cairn_path p;
    cairn_store *s;
    int r = cairn_route(AT_FDCWD, path, &p, &s);
    return r == 0 ? CAIRN_REAL(lstat, p.pass, st) : stat_finish(r, s, &p, st);
}
CAIRN_EXPORT int lstat64(const char *path, struct stat64 *st) __attribute__((alias("lstat")));

/* AT_EMPTY_PATH with "" asks about dirfd itself. */
static int empty_path(const char *path, int flags)
{
    return (flags & AT_EMPTY_PATH) && path && path[0] == 0;
}

/* AT_EMPTY_PATH with AT_FDCWD asks about the working directory: ".", if it is ours. */
static const char *empty_cwd(int dirfd, const char *path, int flags)
{
    return dirfd == AT_FDCWD && empty_path(path, flags) && cairn_cwd_active() ? "." : path;
}

CAIRN_EXPORT int fstatat(int dirfd, const char *path, struct stat *st, int flags)
{
    if (empty_path(path, flags) && cairn_fd_maybe(dirfd))
        return fstat(dirfd, st);
    path = empty_cwd(dirfd, path, flags);
    struct cairn_path p;
    cairn_store *s;
    int r = cairn_route(dirfd, path, &p, &s);
    return r == 0 ? CAIRN_REAL(fstatat, dirfd, p.pass, st, flags) : stat_finish(r, s, &p, st);
}
CAIRN_EXPORT int fstatat64(int dirfd, const char *path, struct stat64 *st, int flags)
    __attribute__((alias("fstatat")));

CAIRN_EXPORT int statx(int dirfd, const char *path, int flags, unsigned mask, struct statx *stx)
{
    struct cairn_store_stat cs;
    struct cairn_path p;
    cairn_store *s;
    int r, rc;
    if (empty_path(path, flags) && cairn_fd_maybe(dirfd)) {
        p.saved_errno = errno;
        rc = cairn_fd_stat(dirfd, &cs);
        if (rc == 1)
            rc = -EBADF; /* closed since cairn_fd_maybe looked */
    } else {
        path = empty_cwd(dirfd, path, flags);
        r = cairn_route(dirfd, path, &p, &s);
        if (r == 0)
            return CAIRN_REAL(statx, dirfd, p.pass, flags, mask, stx);
        if (r < 0)
            return -1;
        rc = stat_path(s, &p, &cs);
    }
    if (rc == 0)
        cairn_fill_statx(stx, &cs);
    return (int)cairn_result(rc, p.saved_errno);
}

/* glibc before 2.33 compiled stat calls into these; x86-64 knows versions 0 and 1, aarch64
 * version 0, all with the kernel's struct stat. */
static int stat_version(int ver)
{
    if (ver == 0 || ver == 1)
        return 0;
    errno = EINVAL;
    return -1;
}

CAIRN_EXPORT int __xstat(int ver, const char *path, struct stat *st)
{
    return stat_version(ver) < 0 ? -1 : stat(path, st);
}
CAIRN_EXPORT int __xstat64(int ver, const char *path, struct stat64 *st)
    __attribute__((alias("__xstat")));

CAIRN_EXPORT int __lxstat(int ver, const char *path, struct stat *st)
{
    return stat_version(ver) < 0 ? -1 : lstat(path, st);
}
CAIRN_EXPORT int __lxstat64(int ver, const char *path, struct stat64 *st)
    __attribute__((alias("__lxstat")));

CAIRN_EXPORT int __fxstatat(int ver, int dirfd, const char *path, struct stat *st, int flags)
{
    return stat_version(ver) < 0 ? -1 : fstatat(dirfd, path, st, flags);
}
CAIRN_EXPORT int __fxstatat64(int ver, int dirfd, const char *path, struct stat64 *st,
                              int flags) __attribute__((alias("__fxstatat")));

/* statvfs (vfs = 1) or statfs (vfs = 0) of a path: of ours, the store's usage. */
static int fs_stat_path(const char *path, int vfs, void *buf)
{
    struct cairn_path p;
    cairn_store *s;
    int r = cairn_route(AT_FDCWD, path, &p, &s);
    if (r == 0)
        return vfs ? CAIRN_REAL(statvfs, p.pass, buf) : CAIRN_REAL(statfs, p.pass, buf);
    if (r < 0)
        return -1;
    struct cairn_store_stat cs;
    int rc = stat_path(s, &p, &cs);
    if (rc == 0)
        rc = vfs ? cairn_fill_statvfs(s, buf) : cairn_fill_statfs(s, buf);
    return (int)cairn_result(rc, p.saved_errno);
}

CAIRN_EXPORT int statvfs(const char *path, struct statvfs *sv)
{
    return fs_stat_path(path, 1, sv);
}
CAIRN_EXPORT int statvfs64(const char *path, struct statvfs64 *sv)
    __attribute__((alias("statvfs")));

CAIRN_EXPORT int statfs(const char *path, struct statfs *sf)
{
    return fs_stat_path(path, 0, sf);
}
CAIRN_EXPORT int statfs64(const char *path, struct statfs64 *sf) __attribute__((alias("statfs")));

/* ---------------------------------------------------------------------------------------- */
/* access, and calls accepted without effect                                                */
/* ---------------------------------------------------------------------------------------- */

/* Permission from the owner bits (we own every file of the store); root may read and write
 * anything, and execute what has an x bit. */
static int access_finish(int r, cairn_store *s, struct cairn_path *p, int amode)
{
    if (r < 0)
        return -1;
    struct cairn_store_stat cs;
    int rc = stat_path(s, p, &cs);
    if (rc == 0 && amode != F_OK) {
        unsigned bits = (cs.mode >> 6) & 7;
        if (geteuid() == 0)
            bits = 6 | ((cs.mode & 0111) || cs.type == CAIRN_FILE_DIR ? 1 : 0);
        if (((amode & R_OK) && !(bits & 4)) || ((amode & W_OK) && !(bits & 2)) ||
            ((amode & X_OK) && !(bits & 1)))
            rc = -EACCES;
    }
    return (int)cairn_result(rc, p->saved_errno);
}

CAIRN_EXPORT int access(const char *path, int amode)
{
    struct cairn_path p;
    cairn_store *s;
    int r = cairn_route(AT_FDCWD, path, &p, &s);
    return r == 0 ? CAIRN_REAL(access, p.pass, amode) : access_finish(r, s, &p, amode);
}

CAIRN_EXPORT int faccessat(int dirfd, const char *path, int amode, int flags)
{
    struct cairn_path p;
    cairn_store *s;
    int r = cairn_route(dirfd, path, &p, &s);
    return r == 0 ? CAIRN_REAL(faccessat, dirfd, p.pass, amode, flags)
                  : access_finish(r, s, &p, amode);
}

CAIRN_EXPORT int euidaccess(const char *path, int amode)
{
    struct cairn_path p;
    cairn_store *s;
    int r = cairn_route(AT_FDCWD, path, &p, &s);
    return r == 0 ? CAIRN_REAL(euidaccess, p.pass, amode) : access_finish(r, s, &p, amode);
}
CAIRN_EXPORT int eaccess(const char *path, int amode) __attribute__((alias("euidaccess")));

/* chmod, chown and utimes on a file of ours succeed when it exists and change nothing. */
static int exists_finish(int r, cairn_store *s, struct cairn_path *p)
{
    if (r < 0)
        return -1;
    struct cairn_store_stat cs;
    return (int)cairn_result(stat_path(s, p, &cs), p->saved_errno);
}

/* The pass-through of the accepted calls, by kind. */
enum accepted { ACC_CHMOD, ACC_FCHMODAT, ACC_CHOWN, ACC_LCHOWN, ACC_FCHOWNAT, ACC_UTIMENSAT,
                ACC_UTIME, ACC_UTIMES };

struct accepted_args {
    mode_t mode;
    uid_t uid;
    gid_t gid;
    int flags;
    const void *times;
};

static int accepted(enum accepted kind, int dirfd, const char *path,
                    const struct accepted_args *a)
{
    struct cairn_path p;
    cairn_store *s;
    int r = cairn_route(dirfd, path, &p, &s);
    if (r != 0)
        return exists_finish(r, s, &p);
    switch (kind) {
    case ACC_CHMOD: return CAIRN_REAL(chmod, p.pass, a->mode);
    case ACC_FCHMODAT: return CAIRN_REAL(fchmodat, dirfd, p.pass, a->mode, a->flags);
    case ACC_CHOWN: return CAIRN_REAL(chown, p.pass, a->uid, a->gid);
    case ACC_LCHOWN: return CAIRN_REAL(lchown, p.pass, a->uid, a->gid);
    case ACC_FCHOWNAT: return CAIRN_REAL(fchownat, dirfd, p.pass, a->uid, a->gid, a->flags);
    case ACC_UTIMENSAT: return CAIRN_REAL(utimensat, dirfd, p.pass, a->times, a->flags);
    case ACC_UTIME: return CAIRN_REAL(utime, p.pass, a->times);
    default: return CAIRN_REAL(utimes, p.pass, a->times);
    }
}

CAIRN_EXPORT int chmod(const char *path, mode_t mode)
{
    return accepted(ACC_CHMOD, AT_FDCWD, path, &(struct accepted_args){.mode = mode});
}

CAIRN_EXPORT int fchmodat(int dirfd, const char *path, mode_t mode, int flags)
{
    return accepted(ACC_FCHMODAT, dirfd, path,
                    &(struct accepted_args){.mode = mode, .flags = flags});
}

CAIRN_EXPORT int chown(const char *path, uid_t uid, gid_t gid)
{
    return accepted(ACC_CHOWN, AT_FDCWD, path, &(struct accepted_args){.uid = uid, .gid = gid});
}

CAIRN_EXPORT int lchown(const char *path, uid_t uid, gid_t gid)
{
    return accepted(ACC_LCHOWN, AT_FDCWD, path, &(struct accepted_args){.uid = uid, .gid = gid});
}

CAIRN_EXPORT int fchownat(int dirfd, const char *path, uid_t uid, gid_t gid, int flags)
{
    return accepted(ACC_FCHOWNAT, dirfd, path,
                    &(struct accepted_args){.uid = uid, .gid = gid, .flags = flags});
}

/* utimensat with a NULL path is futimens on dirfd (Linux). */
CAIRN_EXPORT int utimensat(int dirfd, const char *path, const struct timespec times[2],
                           int flags)
{
    if (CAIRN_LAUNDER(path) == NULL && cairn_fd_maybe(dirfd))
        return 0;
    return accepted(ACC_UTIMENSAT, dirfd, path,
                    &(struct accepted_args){.times = times, .flags = flags});
}

CAIRN_EXPORT int utime(const char *path, const struct utimbuf *times)
{
    return accepted(ACC_UTIME, AT_FDCWD, path, &(struct accepted_args){.times = times});
}

CAIRN_EXPORT int utimes(const char *path, const struct timeval times[2])
{
    return accepted(ACC_UTIMES, AT_FDCWD, path, &(struct accepted_args){.times = times});
}

/* ---------------------------------------------------------------------------------------- */
/* Changing names                                                                           */
/* ---------------------------------------------------------------------------------------- */

/* Finishes a call whose store operation op takes the path alone. */
static int name_finish(int r, cairn_store *s, struct cairn_path *p,
                       int (*op)(cairn_store *, const char *))
{
    if (r < 0)
        return -1;
    return (int)cairn_result(op(s, p->rel), p->saved_errno);
}

CAIRN_EXPORT int unlink(const char *path)
{
    struct cairn_path p;
    cairn_store *s;
    int r = cairn_route(AT_FDCWD, path, &p, &s);
    return r == 0 ? CAIRN_REAL(unlink, p.pass) : name_finish(r, s, &p, cairn_store_unlink);
}

CAIRN_EXPORT int rmdir(const char *path)
{
    struct cairn_path p;
    cairn_store *s;
    int r = cairn_route(AT_FDCWD, path, &p, &s);
    return r == 0 ? CAIRN_REAL(rmdir, p.pass) : name_finish(r, s, &p, cairn_store_rmdir);
}

CAIRN_EXPORT int unlinkat(int dirfd, const char *path, int flags)
{
    struct cairn_path p;
    cairn_store *s;
    int r = cairn_route(dirfd, path, &p, &s);
    if (r == 0)
        return CAIRN_REAL(unlinkat, dirfd, p.pass, flags);
    if (flags & ~AT_REMOVEDIR) {
        errno = EINVAL;
        return -1;
    }
    return name_finish(r, s, &p, (flags & AT_REMOVEDIR) ? cairn_store_rmdir : cairn_store_unlink);
}

/* remove: a file is unlinked, a directory removed. */
static int store_remove(cairn_store *s, const char *rel)
{
    int rc = cairn_store_unlink(s, rel);
    return rc == -EISDIR ? cairn_store_rmdir(s, rel) : rc;
}

CAIRN_EXPORT int remove(const char *path)
{
    struct cairn_path p;
    cairn_store *s;
    int r = cairn_route(AT_FDCWD, path, &p, &s);
    return r == 0 ? CAIRN_REAL(remove, p.pass) : name_finish(r, s, &p, store_remove);
}

CAIRN_EXPORT int truncate(const char *path, off_t len)
{
    struct cairn_path p;
    cairn_store *s;
    int r = cairn_route(AT_FDCWD, path, &p, &s);
    if (r <= 0)
        return r == 0 ? CAIRN_REAL(truncate, p.pass, len) : -1;
    struct cairn_store_fh fh;
    int rc = len < 0 ? -EINVAL : p.slash ? -ENOTDIR : cairn_store_open_file(s, p.rel, 0, 0, &fh);
    if (rc >= 0)
        rc = cairn_store_ftruncate(s, fh, (uint64_t)len);
    return (int)cairn_result(rc, p.saved_errno);
}
CAIRN_EXPORT int truncate64(const char *path, off_t len) __attribute__((alias("truncate")));

/* mode for mkdir: the store keeps the permission bits, after the umask. */
static int mkdir_finish(int r, cairn_store *s, struct cairn_path *p, mode_t mode)
{
    if (r < 0)
        return -1;
    int rc = cairn_store_mkdir(s, p->rel, (uint32_t)(mode & ~cairn_umask() & 07777));
    return (int)cairn_result(rc, p->saved_errno);
}

CAIRN_EXPORT int mkdir(const char *path, mode_t mode)
{
    struct cairn_path p;
    cairn_store *s;
    int r = cairn_route(AT_FDCWD, path, &p, &s);
    return r == 0 ? CAIRN_REAL(mkdir, p.pass, mode) : mkdir_finish(r, s, &p, mode);
}

CAIRN_EXPORT int mkdirat(int dirfd, const char *path, mode_t mode)
{
    struct cairn_path p;
    cairn_store *s;
    int r = cairn_route(dirfd, path, &p, &s);
    return r == 0 ? CAIRN_REAL(mkdirat, dirfd, p.pass, mode) : mkdir_finish(r, s, &p, mode);
}

/*
** rename, renameat, renameat2, link and linkat: calls on two names. Both ours: the store
** renames; a hard link is EPERM (the store has none). One ours and one not: EXDEV, as between
** two file systems (mv then copies). renameat2 supports flags 0 only (EINVAL otherwise;
** gnulib's renameatu, as used by mv, falls back on it).
*/
enum pair { PAIR_RENAME, PAIR_RENAMEAT, PAIR_RENAMEAT2, PAIR_LINK, PAIR_LINKAT };

static int pair_call(enum pair which, int olddirfd, const char *oldpath, int newdirfd,
                     const char *newpath, unsigned flags)
{
    struct cairn_path from, to;
    cairn_store *s;
    int r1 = cairn_route(olddirfd, oldpath, &from, &s);
    int r2 = r1 < 0 ? 0 : cairn_route(newdirfd, newpath, &to, &s);
    if (r1 == 0 && r2 == 0) {
        switch (which) {
        case PAIR_RENAME: return CAIRN_REAL(rename, from.pass, to.pass);
        case PAIR_RENAMEAT: return CAIRN_REAL(renameat, olddirfd, from.pass, newdirfd, to.pass);
        case PAIR_RENAMEAT2:
            return CAIRN_REAL(renameat2, olddirfd, from.pass, newdirfd, to.pass, flags);
        case PAIR_LINK: return CAIRN_REAL(link, from.pass, to.pass);
        default: return CAIRN_REAL(linkat, olddirfd, from.pass, newdirfd, to.pass, (int)flags);
        }
    }
    if (r1 < 0 || r2 < 0)
        return -1;
    int saved = r1 ? from.saved_errno : to.saved_errno;
    int link = which >= PAIR_LINK;
    int rc = !link && flags ? -EINVAL
             : r1 != r2     ? -EXDEV
             : link         ? -EPERM
                            : cairn_store_rename(s, from.rel, to.rel);
    return (int)cairn_result(rc, saved);
}

CAIRN_EXPORT int rename(const char *oldpath, const char *newpath)
{
    return pair_call(PAIR_RENAME, AT_FDCWD, oldpath, AT_FDCWD, newpath, 0);
}

CAIRN_EXPORT int renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath)
{
    return pair_call(PAIR_RENAMEAT, olddirfd, oldpath, newdirfd, newpath, 0);
}

CAIRN_EXPORT int renameat2(int olddirfd, const char *oldpath, int newdirfd,
                           const char *newpath, unsigned flags)
{
    return pair_call(PAIR_RENAMEAT2, olddirfd, oldpath, newdirfd, newpath, flags);
}

CAIRN_EXPORT int link(const char *oldpath, const char *newpath)
{
    return pair_call(PAIR_LINK, AT_FDCWD, oldpath, AT_FDCWD, newpath, 0);
}

CAIRN_EXPORT int linkat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath,
                        int flags)
{
    return pair_call(PAIR_LINKAT, olddirfd, oldpath, newdirfd, newpath, (unsigned)flags);
}

/*
** Symbolic links and special files: the store has none. Making one under the prefix fails
** with EPERM (a file system that does not support them); hard links are with rename below.
** mknod of a regular file creates it, as open with O_CREAT|O_EXCL would.
** Without these wrappers a relative name under a virtual working directory would reach the
** kernel and make the link in "/".
*/
static int no_links(int r, struct cairn_path *p)
{
    return r < 0 ? -1 : (int)cairn_result(-EPERM, p->saved_errno);
}

CAIRN_EXPORT int symlink(const char *target, const char *linkpath)
{
    struct cairn_path p;
    cairn_store *s;
    int r = cairn_route(AT_FDCWD, linkpath, &p, &s);
    return r == 0 ? CAIRN_REAL(symlink, target, p.pass) : no_links(r, &p);
}

CAIRN_EXPORT int symlinkat(const char *target, int dirfd, const char *linkpath)
{
    struct cairn_path p;
    cairn_store *s;
    int r = cairn_route(dirfd, linkpath, &p, &s);
    return r == 0 ? CAIRN_REAL(symlinkat, target, dirfd, p.pass) : no_links(r, &p);
}

static int mknod_finish(int r, cairn_store *s, struct cairn_path *p, mode_t mode)
{
    if (r < 0)
        return -1;
    int rc = -EPERM;
    if ((mode & S_IFMT) == S_IFREG || (mode & S_IFMT) == 0) {
        struct cairn_store_fh fh;
        rc = p->slash ? -ENOTDIR
                      : cairn_store_open_file(s, p->rel, CAIRN_O_CREAT | CAIRN_O_EXCL,
                                              (uint32_t)(mode & ~cairn_umask() & 07777), &fh);
    }
    return (int)cairn_result(rc < 0 ? rc : 0, p->saved_errno);
}

CAIRN_EXPORT int mknod(const char *path, mode_t mode, dev_t dev)
{
    struct cairn_path p;
    cairn_store *s;
    int r = cairn_route(AT_FDCWD, path, &p, &s);
    return r == 0 ? CAIRN_REAL(mknod, p.pass, mode, dev) : mknod_finish(r, s, &p, mode);
}

CAIRN_EXPORT int mknodat(int dirfd, const char *path, mode_t mode, dev_t dev)
{
    struct cairn_path p;
    cairn_store *s;
    int r = cairn_route(dirfd, path, &p, &s);
    return r == 0 ? CAIRN_REAL(mknodat, dirfd, p.pass, mode, dev) : mknod_finish(r, s, &p, mode);
}

CAIRN_EXPORT int mkfifo(const char *path, mode_t mode)
{
    struct cairn_path p;
    cairn_store *s;
    int r = cairn_route(AT_FDCWD, path, &p, &s);
    return r == 0 ? CAIRN_REAL(mkfifo, p.pass, mode) : no_links(r, &p);
}

CAIRN_EXPORT int mkfifoat(int dirfd, const char *path, mode_t mode)
{
    struct cairn_path p;
    cairn_store *s;
    int r = cairn_route(dirfd, path, &p, &s);
    return r == 0 ? CAIRN_REAL(mkfifoat, dirfd, p.pass, mode) : no_links(r, &p);
}

/* The store has no symbolic links: readlink of anything of ours that exists is EINVAL. */
static ssize_t readlink_finish(int r, cairn_store *s, struct cairn_path *p)
{
    if (r < 0)
        return -1;
    struct cairn_store_stat cs;
    int rc = stat_path(s, p, &cs);
    return cairn_result(rc < 0 ? rc : -EINVAL, p->saved_errno);
}

CAIRN_EXPORT ssize_t readlink(const char *path, char *buf, size_t len)
{
    struct cairn_path p;
    cairn_store *s;
    int r = cairn_route(AT_FDCWD, path, &p, &s);
    return r == 0 ? CAIRN_REAL(readlink, p.pass, buf, len) : readlink_finish(r, s, &p);
}

CAIRN_EXPORT ssize_t readlinkat(int dirfd, const char *path, char *buf, size_t len)
{
    struct cairn_path p;
    cairn_store *s;
    int r = cairn_route(dirfd, path, &p, &s);
    return r == 0 ? CAIRN_REAL(readlinkat, dirfd, p.pass, buf, len) : readlink_finish(r, s, &p);
}

/* realpath of a path of ours: the prefix and the normalised name, if it exists. */
static char *realpath_ours(int r, cairn_store *s, struct cairn_path *p, char *resolved)
{
    struct cairn_store_stat cs;
    if (r < 0)
        return NULL;
    int rc = stat_path(s, p, &cs);
    const struct cairn_cfg *c = cairn_cfg();
    char buf[PATH_MAX];
    if (rc == 0 && (size_t)snprintf(buf, sizeof buf, "%s%s%s", c->prefix, p->rel[0] ? "/" : "",
                                    p->rel) >= sizeof buf)
        rc = -ENAMETOOLONG;
    if (rc == 0 && !resolved && !(resolved = strdup(buf)))
        rc = -ENOMEM;
    else if (rc == 0)
        memcpy(resolved, buf, strlen(buf) + 1);
    return cairn_result(rc, p->saved_errno) < 0 ? NULL : resolved;
}

CAIRN_EXPORT char *realpath(const char *path, char *resolved)
{
    struct cairn_path p;
    cairn_store *s;
    int r = cairn_route(AT_FDCWD, path, &p, &s);
    return r == 0 ? CAIRN_REAL(realpath, p.pass, resolved) : realpath_ours(r, s, &p, resolved);
}

CAIRN_EXPORT char *canonicalize_file_name(const char *path)
{
    struct cairn_path p;
    cairn_store *s;
    int r = cairn_route(AT_FDCWD, path, &p, &s);
    return r == 0 ? CAIRN_REAL(canonicalize_file_name, p.pass) : realpath_ours(r, s, &p, NULL);
}

/*
** Extended attributes: files of ours have none and take none. Reading or removing one fails
** with ENODATA, listing them gives an empty list, setting one fails with ENOTSUP (what ls, cp
** and libacl expect of a file system without them).
*/
static ssize_t xattr_finish(int r, cairn_store *s, struct cairn_path *p, int answer)
{
    if (r < 0)
        return -1;
    struct cairn_store_stat cs;
    int rc = stat_path(s, p, &cs);
    return cairn_result(rc < 0 ? rc : answer, p->saved_errno);
}

static long xattr_fd(int answer)
{
    return cairn_result(answer, errno);
}

#define XATTR_PATH(ret, name, answer, params, args)                                              \
    CAIRN_EXPORT ret name(const char *path, CAIRN_UNPAREN params)                               \
    {                                                                                            \
        struct cairn_path p;                                                                     \
        cairn_store *s;                                                                          \
        int r = cairn_route(AT_FDCWD, path, &p, &s);                                             \
        return r == 0 ? CAIRN_REAL(name, p.pass, CAIRN_UNPAREN args)                             \
                      : (ret)xattr_finish(r, s, &p, answer);                                     \
    }
#define XATTR_FD(ret, name, answer, params, args)                                                \
    CAIRN_EXPORT ret name(int fd, CAIRN_UNPAREN params)                                         \
    {                                                                                            \
        return cairn_fd_maybe(fd) ? (ret)xattr_fd(answer)                                        \
                                  : CAIRN_REAL(name, fd, CAIRN_UNPAREN args);                    \
    }
#define CAIRN_UNPAREN(...) __VA_ARGS__

#define XATTR_GET_PARAMS (const char *name, void *value, size_t size)
#define XATTR_SET_PARAMS (const char *name, const void *value, size_t size, int flags)
#define XATTR_LIST_PARAMS (char *list, size_t size)
#define XATTR_REMOVE_PARAMS (const char *name)
XATTR_PATH(ssize_t, getxattr, -ENODATA, XATTR_GET_PARAMS, (name, value, size))
XATTR_PATH(ssize_t, lgetxattr, -ENODATA, XATTR_GET_PARAMS, (name, value, size))
XATTR_FD(ssize_t, fgetxattr, -ENODATA, XATTR_GET_PARAMS, (name, value, size))
XATTR_PATH(int, setxattr, -ENOTSUP, XATTR_SET_PARAMS, (name, value, size, flags))
XATTR_PATH(int, lsetxattr, -ENOTSUP, XATTR_SET_PARAMS, (name, value, size, flags))
XATTR_FD(int, fsetxattr, -ENOTSUP, XATTR_SET_PARAMS, (name, value, size, flags))
XATTR_PATH(ssize_t, listxattr, 0, XATTR_LIST_PARAMS, (list, size))
XATTR_PATH(ssize_t, llistxattr, 0, XATTR_LIST_PARAMS, (list, size))
XATTR_FD(ssize_t, flistxattr, 0, XATTR_LIST_PARAMS, (list, size))
XATTR_PATH(int, removexattr, -ENODATA, XATTR_REMOVE_PARAMS, (name))
XATTR_PATH(int, lremovexattr, -ENODATA, XATTR_REMOVE_PARAMS, (name))
XATTR_FD(int, fremovexattr, -ENODATA, XATTR_REMOVE_PARAMS, (name))

/* ---------------------------------------------------------------------------------------- */
/* Directory streams                                                                        */
/* ---------------------------------------------------------------------------------------- */

#define CAIRN_MAX_DIRS 1024

struct cairn_dir {
    int used;                   /* slot taken (atomic) */
    int fd;                     /* descriptor of ours on the directory */
    pthread_mutex_t lock;
    long pos;                   /* entries returned since the start (telldir) */
    uint64_t cookie;            /* the store's listing cookie */
    char path[CAIRN_STORE_PATH_MAX];
    struct dirent64 ent;
};

static struct cairn_dir dirs[CAIRN_MAX_DIRS];

static struct cairn_dir *dir_of(DIR *dp)
{
    struct cairn_dir *d = (struct cairn_dir *)(void *)dp;
    if (d < dirs || d >= dirs + CAIRN_MAX_DIRS || !__atomic_load_n(&d->used, __ATOMIC_ACQUIRE))
        return NULL;
    return d;
}

void cairn_dir_atfork_child(void)
{
    for (int i = 0; i < CAIRN_MAX_DIRS; i++)
        if (dirs[i].used)
            pthread_mutex_init(&dirs[i].lock, NULL);
}

/* A stream over fd, a descriptor of ours on a directory (the stream owns it from now). NULL
 * and errno set (fd left open) on failure. */
static DIR *dir_open(int fd)
{
    struct cairn_ofd *o = cairn_fd_get(fd);
    if (!o) {
        errno = EBADF;
        return NULL;
    }
    int isdir = o->kind == CAIRN_OFD_DIR && !(o->flags & O_PATH);
    char path[CAIRN_STORE_PATH_MAX];
    memcpy(path, o->path, sizeof path);
    cairn_ofd_put(o);
    if (!isdir) {
        errno = ENOTDIR;
        return NULL;
    }
    for (int i = 0; i < CAIRN_MAX_DIRS; i++) {
        int expect = 0;
        if (__atomic_compare_exchange_n(&dirs[i].used, &expect, 1, 0, __ATOMIC_ACQUIRE,
                                        __ATOMIC_RELAXED)) {
            struct cairn_dir *d = &dirs[i];
            d->fd = fd;
            d->pos = 0;
            d->cookie = 0;
            memcpy(d->path, path, sizeof d->path);
            pthread_mutex_init(&d->lock, NULL);
            return (DIR *)(void *)d;
        }
    }
    errno = EMFILE;
    return NULL;
}

CAIRN_EXPORT DIR *opendir(const char *path)
{
    struct cairn_path p;
    cairn_store *s;
    int r = cairn_route(AT_FDCWD, path, &p, &s);
    if (r <= 0)
        return r == 0 ? CAIRN_REAL(opendir, p.pass) : NULL;
    int fd = cairn_open_ours(s, &p, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    if (fd < 0) {
        errno = -fd;
        return NULL;
    }
    DIR *dp = dir_open(fd);
    if (!dp) {
        int e = errno;
        cairn_close(fd);
        errno = e;
        return NULL;
    }
    errno = p.saved_errno;
    return dp;
}

CAIRN_EXPORT DIR *fdopendir(int fd)
{
    return cairn_fd_maybe(fd) ? dir_open(fd) : CAIRN_REAL(fdopendir, fd);
}

/* The next entry into d->ent: 1, 0 at the end, or a negative errno. Under d->lock. */
static int dir_next(struct cairn_dir *d)
{
    cairn_store *s = cairn_store_attached();
    struct cairn_store_stat cs;
    char name[CAIRN_STORE_PATH_MAX], child[CAIRN_STORE_PATH_MAX];
    uint32_t type = CAIRN_FILE_DIR;
    int rc;
    if (d->pos < 2) {
        strcpy(name, d->pos == 0 ? "." : "..");
        /* ".." of a directory inside: its parent; of the root: the root (as for "/"). */
        strcpy(child, d->path);
        char *slash = strrchr(child, '/');
        if (d->pos == 1)
            *(slash ? slash : child) = 0;
    } else {
        rc = cairn_store_readdir(s, d->path, &d->cookie, name, sizeof name, &type);
        if (rc <= 0)
            return rc;
        if (cairn_join(d->path, name, child, sizeof child) < 0)
            child[0] = 0;
    }
    d->pos++;
    memset(&d->ent, 0, sizeof d->ent);
    d->ent.d_ino = (child[0] || d->pos <= 2) && cairn_store_stat(s, child, &cs) == 0 ? cs.ino : 1;
    d->ent.d_off = d->pos;
    d->ent.d_reclen = sizeof d->ent;
    d->ent.d_type = type == CAIRN_FILE_DIR ? DT_DIR : DT_REG;
    snprintf(d->ent.d_name, sizeof d->ent.d_name, "%s", name);
    return 1;
}

/* readdir of ours: NULL at the end (errno untouched) or on error (errno set). */
static struct dirent64 *dir_read(struct cairn_dir *d)
{
    int saved = errno;
    pthread_mutex_lock(&d->lock);
    int rc = dir_next(d);
    pthread_mutex_unlock(&d->lock);
    if (rc < 0)
        errno = -rc;
    else
        errno = saved;
    return rc == 1 ? &d->ent : NULL;
}

CAIRN_EXPORT struct dirent *readdir(DIR *dp)
{
    struct cairn_dir *d = dir_of(dp);
    return d ? (struct dirent *)(void *)dir_read(d) : CAIRN_REAL(readdir, dp);
}
CAIRN_EXPORT struct dirent64 *readdir64(DIR *dp) __attribute__((alias("readdir")));

CAIRN_EXPORT int readdir_r(DIR *dp, struct dirent *entry, struct dirent **result)
{
    struct cairn_dir *d = dir_of(dp);
    if (!d)
        return CAIRN_REAL(readdir_r, dp, entry, result);
    int saved = errno;
    pthread_mutex_lock(&d->lock);
    int rc = dir_next(d);
    if (rc == 1)
        memcpy(entry, &d->ent, sizeof *entry);
    pthread_mutex_unlock(&d->lock);
    *result = rc == 1 ? entry : NULL;
    errno = saved;
    return rc < 0 ? -rc : 0;
}
CAIRN_EXPORT int readdir64_r(DIR *dp, struct dirent64 *entry, struct dirent64 **result)
    __attribute__((alias("readdir_r")));

CAIRN_EXPORT int closedir(DIR *dp)
{
    struct cairn_dir *d = dir_of(dp);
    if (!d)
        return CAIRN_REAL(closedir, dp);
    int rc = cairn_close(d->fd);
    pthread_mutex_destroy(&d->lock);
    __atomic_store_n(&d->used, 0, __ATOMIC_RELEASE);
    return rc;
}

CAIRN_EXPORT void rewinddir(DIR *dp)
{
    struct cairn_dir *d = dir_of(dp);
    if (!d) {
        CAIRN_REAL(rewinddir, dp);
        return;
    }
    pthread_mutex_lock(&d->lock);
    d->pos = 0;
    d->cookie = 0;
    pthread_mutex_unlock(&d->lock);
}

CAIRN_EXPORT int dirfd(DIR *dp)
{
    struct cairn_dir *d = dir_of(dp);
    return d ? d->fd : CAIRN_REAL(dirfd, dp);
}

CAIRN_EXPORT long telldir(DIR *dp)
{
    struct cairn_dir *d = dir_of(dp);
    return d ? __atomic_load_n(&d->pos, __ATOMIC_RELAXED) : CAIRN_REAL(telldir, dp);
}

/* seekdir of ours: list again from the start and skip pos entries. */
CAIRN_EXPORT void seekdir(DIR *dp, long pos)
{
    struct cairn_dir *d = dir_of(dp);
    if (!d) {
        CAIRN_REAL(seekdir, dp, pos);
        return;
    }
    int saved = errno;
    pthread_mutex_lock(&d->lock);
    d->pos = 0;
    d->cookie = 0;
    while (d->pos < pos && dir_next(d) == 1)
        ;
    pthread_mutex_unlock(&d->lock);
    errno = saved;
}

/* scandir of ours: glibc's own would read the directory through internal calls. */
static int scan_ours(DIR *dp, struct dirent ***list, int (*filter)(const struct dirent *),
                     int (*compar)(const struct dirent **, const struct dirent **))
{
    struct dirent **v = NULL, *e;
    size_t n = 0, cap = 0;
    int err = 0;
    errno = 0;
    while ((e = readdir(dp)) != NULL) {
        if (filter && !filter(e))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            struct dirent **nv = realloc(v, cap * sizeof *v);
            if (!nv) {
                err = ENOMEM;
                break;
            }
            v = nv;
        }
        if (!(v[n] = malloc(sizeof *e))) {
            err = ENOMEM;
            break;
        }
        memcpy(v[n++], e, sizeof *e);
    }
    if (!err)
        err = errno;
    if (err) {
        while (n > 0)
            free(v[--n]);
        free(v);
        errno = err;
        return -1;
    }
    if (compar)
        qsort(v, n, sizeof *v, (int (*)(const void *, const void *))compar);
    *list = v;
    return (int)n;
}

CAIRN_EXPORT int scandir(const char *path, struct dirent ***list,
                         int (*filter)(const struct dirent *),
                         int (*compar)(const struct dirent **, const struct dirent **))
{
    struct cairn_path p;
    cairn_store *s;
    int r = cairn_route(AT_FDCWD, path, &p, &s);
    if (r <= 0)
        return r == 0 ? CAIRN_REAL(scandir, p.pass, list, filter, compar) : -1;
    DIR *dp = opendir(path);
    if (!dp)
        return -1;
    int n = scan_ours(dp, list, filter, compar);
    int e = errno;
    closedir(dp);
    errno = n < 0 ? e : p.saved_errno;
    return n;
}
CAIRN_EXPORT int scandir64(const char *path, struct dirent64 ***list,
                           int (*filter)(const struct dirent64 *),
                           int (*compar)(const struct dirent64 **, const struct dirent64 **))
    __attribute__((alias("scandir")));
