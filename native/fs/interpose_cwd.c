/*
** interpose_cwd.c: the virtual working directory of Cairn's interposer.
**
** The kernel cannot hold a working directory inside the store: the store is not a file system
** it knows, and the prefix does not exist on the real one -- or, where a real directory does
** carry the prefix's name, a kernel working directory there would send every relative name
** this library does not see into that real directory instead of the store. So a chdir (or
** fchdir) to a directory of ours keeps that directory here, as its normalised name in the
** store (one per process, as the kernel's is), and moves the kernel's working directory to
** "/". A relative name that still reaches the kernel (a call this library does not wrap, a
** statically linked program) then means a name under "/", the same fixed place in every
** process, rather than one under whatever directory the process happened to leave.
**
** cairn_route (interpose.c) joins a relative name given with AT_FDCWD to the virtual
** directory, so every wrapper that takes a path follows it. A chdir or fchdir anywhere
** outside the prefix clears it. getcwd, getwd, get_current_dir_name and __getcwd_chk answer
** the prefix followed by the virtual directory. fork copies it (its lock is held across
** fork, so the copy is whole); exec and posix_spawn pass it to the new program
** (interpose_exec.c).
*/
#include "interpose.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

int cairn_cwd_on; /* atomic: whether cwd below is the working directory */
static pthread_mutex_t cwd_lock = PTHREAD_MUTEX_INITIALIZER;
static char cwd[CAIRN_STORE_PATH_MAX];

int cairn_cwd_get(char out[CAIRN_STORE_PATH_MAX])
{
    pthread_mutex_lock(&cwd_lock);
    int on = cairn_cwd_on;
    if (on)
        memcpy(out, cwd, sizeof cwd);
    pthread_mutex_unlock(&cwd_lock);
    return on;
}

/* Makes rel the working directory, or (rel NULL) forgets it. */
static void cwd_set(const char *rel)
{
    pthread_mutex_lock(&cwd_lock);
    if (rel)
        snprintf(cwd, sizeof cwd, "%s", rel);
    __atomic_store_n(&cairn_cwd_on, rel != NULL, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&cwd_lock);
}

int cairn_cwd_enter(const char *rel)
{
    if (CAIRN_REAL(chdir, "/") < 0)
        return -errno;
    cwd_set(rel);
    return 0;
}

void cairn_cwd_atfork_prepare(void) { pthread_mutex_lock(&cwd_lock); }
void cairn_cwd_atfork_parent(void) { pthread_mutex_unlock(&cwd_lock); }
void cairn_cwd_atfork_child(void) { pthread_mutex_unlock(&cwd_lock); }

/* A directory of ours the caller may enter: it exists, is a directory and (unless the caller
 * is root) has its owner's search bit. */
static int enterable(cairn_store *s, const char *rel)
{
    struct cairn_store_stat cs;
    int rc = cairn_store_stat(s, rel, &cs);
    if (rc < 0)
        return rc;
    if (cs.type != CAIRN_FILE_DIR)
        return -ENOTDIR;
    return (geteuid() != 0 && !(cs.mode & 0100)) ? -EACCES : 0;
}

CAIRN_EXPORT int chdir(const char *path)
{
    struct cairn_path p;
    cairn_store *s;
    int r = cairn_route(AT_FDCWD, path, &p, &s);
    if (r < 0)
        return -1;
    if (r == 0) {
        int rc = CAIRN_REAL(chdir, p.pass);
        if (rc == 0)
            cwd_set(NULL);
        return rc;
    }
    int rc = enterable(s, p.rel);
    if (rc == 0)
        rc = cairn_cwd_enter(p.rel);
    return (int)cairn_result(rc, p.saved_errno);
}

CAIRN_EXPORT int fchdir(int fd)
{
    struct cairn_ofd *d = cairn_fd_get(fd);
    if (!d) {
        int rc = CAIRN_REAL(fchdir, fd);
        if (rc == 0)
            cwd_set(NULL);
        return rc;
    }
    int saved = errno;
    char rel[CAIRN_STORE_PATH_MAX];
    int kind = d->kind;
    memcpy(rel, d->path, sizeof rel);
    cairn_ofd_put(d);
    int rc = kind == CAIRN_OFD_DIR ? cairn_cwd_enter(rel) : -ENOTDIR;
    return (int)cairn_result(rc, saved);
}

/* The working directory's name as programs see it into name (PATH_MAX bytes), if it is ours. */
static int cwd_name(char name[PATH_MAX])
{
    char rel[CAIRN_STORE_PATH_MAX];
    if (!cairn_cwd_active() || !cairn_cwd_get(rel))
        return 0;
    /* The prefix is shorter than 1024 bytes and rel than 256: it fits. */
    snprintf(name, PATH_MAX, "%s%s%s", cairn_cfg()->prefix, rel[0] ? "/" : "", rel);
    return 1;
}

/* getcwd's contract for name: buf NULL allocates (size bytes, or as many as needed when size
 * is 0); ERANGE when size is too small; EINVAL for a buffer of size 0. */
static char *cwd_copy(const char *name, char *buf, size_t size)
{
    size_t need = strlen(name) + 1;
    if (buf && size == 0) {
        errno = EINVAL;
        return NULL;
    }
    if (size && size < need) {
        errno = ERANGE;
        return NULL;
    }
    if (!buf && !(buf = malloc(size ? size : need)))
        return NULL;
    memcpy(buf, name, need);
    return buf;
}

CAIRN_EXPORT char *getcwd(char *buf, size_t size)
{
    char name[PATH_MAX];
    return cwd_name(name) ? cwd_copy(name, buf, size) : CAIRN_REAL(getcwd, buf, size);
}

/* _FORTIFY_SOURCE's getcwd: an overflowing call is left to glibc to reject. */
CAIRN_EXPORT char *__getcwd_chk(char *buf, size_t size, size_t buflen)
{
    char name[PATH_MAX];
    if (size > buflen || !cwd_name(name))
        return CAIRN_REAL(__getcwd_chk, buf, size, buflen);
    return cwd_copy(name, buf, size);
}

CAIRN_EXPORT char *getwd(char *buf)
{
    char name[PATH_MAX];
    if (!cwd_name(name))
        return CAIRN_REAL(getwd, buf);
    return cwd_copy(name, buf, PATH_MAX);
}

/* glibc's prefers $PWD when it names the working directory; ours is never a kernel one, so
 * the name is the answer. */
CAIRN_EXPORT char *get_current_dir_name(void)
{
    char name[PATH_MAX];
    return cwd_name(name) ? strdup(name) : CAIRN_REAL(get_current_dir_name);
}
