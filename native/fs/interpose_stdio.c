/*
** interpose_stdio.c: stdio streams on files of Cairn's in-memory store.
**
** A stream of ours is a real glibc FILE made by fopencookie, whose read, write, seek and close
** functions call this library's descriptor functions; fprintf, fwrite, fread, fseek, ftell,
** fflush and fclose then work through glibc as for any stream. glibc's own streams cannot
** be used: they call the kernel through glibc-internal functions that no preload library
** sees.
**
** A cookie stream reads, writes or both as its mode says ("r", "w" or "r+" to fopencookie);
** O_APPEND on the descriptor does the appending.
**
** A fixed array of cookies (streams[]) maps each stream of ours to its descriptor, for
** fileno; while no stream of ours is open, fileno costs one atomic load more than glibc's.
**
** The standard streams. glibc's stdin, stdout and stderr reach the kernel through calls no
** preload library sees, so while descriptor 0, 1 or 2 is ours (a shell's "> /cairn/log", a
** dup2 onto 1, a descriptor inherited across exec) the variable stdin, stdout or stderr is a
** stream of ours over that descriptor instead, made when the descriptor becomes ours
** (cairn_std_after, called by the descriptor table) and replaced by glibc's again, after a
** flush (cairn_std_before), when it stops being ours. This is what makes printf in a program
** whose output a shell redirected into the store, and echo in bash (a builtin that writes
** through stdout), work. stderr stays unbuffered. Output a program buffered in glibc's stream
** before the descriptor became ours stays there and goes to that descriptor once it is not
** ours any more; a program that kept its own copy of the pointer (FILE *out = stdout, C++'s
** std::cout made before) keeps glibc's stream, and writing through it fails with EBADF.
**
** freopen: a stream of ours gets a new descriptor (of ours or not), provided the new mode
** reads and writes no more than the stream was made for (EINVAL otherwise, the stream left as
** it was: glibc fixes a cookie stream's direction when it makes it); stdin, stdout and stderr
** (glibc's, or ours) reopened onto a path of ours, or ours reopened anywhere, have the file
** opened and moved onto their descriptor, and the variable follows; any other glibc stream
** cannot be reopened onto a path of ours (EOPNOTSUPP, the stream left as it was).
*/
#include "interpose.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define CAIRN_MAX_STREAMS 1024

struct cairn_stream {
    int used;   /* slot taken (atomic) */
    int fd;     /* the descriptor the cookie functions use; -1 once it is not the stream's */
    int acc;    /* O_RDONLY, O_WRONLY or O_RDWR: what the stream was made for */
    int std;    /* 1 + the standard descriptor it is the stream of, or 0 */
    FILE *fp;   /* the stream (atomic; NULL until fopencookie returned) */
};

static struct cairn_stream streams[CAIRN_MAX_STREAMS];
static int streams_high; /* slots below this have been used (atomic) */

static ssize_t cookie_read(void *c, char *buf, size_t len)
{
    return cairn_read(((struct cairn_stream *)c)->fd, buf, len);
}

static ssize_t cookie_write(void *c, const char *buf, size_t len)
{
    return cairn_write(((struct cairn_stream *)c)->fd, buf, len);
}

static int cookie_seek(void *c, off64_t *pos, int whence)
{
    off_t r = cairn_lseek(((struct cairn_stream *)c)->fd, *pos, whence);
    if (r < 0)
        return -1;
    *pos = r;
    return 0;
}

static void std_closed(struct cairn_stream *st);

static int cookie_close(void *c)
{
    struct cairn_stream *st = c;
    if (st->std)
        std_closed(st);
    int rc = st->fd >= 0 ? cairn_close(st->fd) : 0;
    __atomic_store_n(&st->fp, NULL, __ATOMIC_RELEASE);
    __atomic_store_n(&st->used, 0, __ATOMIC_RELEASE);
    return rc;
}

static const cookie_io_functions_t cookie_io = {
    .read = cookie_read,
    .write = cookie_write,
    .seek = cookie_seek,
    .close = cookie_close,
};

/* A stream of ours over fd for access acc (O_RDONLY, O_WRONLY, O_RDWR), which owns fd from
 * now; NULL (errno set, fd left open) if none. */
static FILE *stream_wrap(int fd, int acc)
{
    for (int i = 0; i < CAIRN_MAX_STREAMS; i++) {
        struct cairn_stream *st = &streams[i];
        int expect = 0;
        if (!__atomic_compare_exchange_n(&st->used, &expect, 1, 0, __ATOMIC_ACQUIRE,
                                         __ATOMIC_RELAXED))
            continue;
        int high = __atomic_load_n(&streams_high, __ATOMIC_RELAXED);
        while (high <= i && !__atomic_compare_exchange_n(&streams_high, &high, i + 1, 0,
                                                         __ATOMIC_RELEASE, __ATOMIC_RELAXED))
            ;
        st->fd = fd;
        st->acc = acc;
        st->std = 0;
        FILE *fp = fopencookie(st, acc == O_RDONLY ? "r" : acc == O_WRONLY ? "w" : "r+",
                               cookie_io);
        if (!fp) {
            __atomic_store_n(&st->used, 0, __ATOMIC_RELEASE);
            return NULL;
        }
        __atomic_store_n(&st->fp, fp, __ATOMIC_RELEASE);
        return fp;
    }
    errno = EMFILE;
    return NULL;
}

static struct cairn_stream *stream_of(FILE *fp)
{
    int high = __atomic_load_n(&streams_high, __ATOMIC_ACQUIRE);
    for (int i = 0; fp && i < high; i++)
        if (__atomic_load_n(&streams[i].fp, __ATOMIC_ACQUIRE) == fp)
            return &streams[i];
    return NULL;
}

/* open(2) flags for an fopen mode: r, w, a, optionally '+', with b, x (O_EXCL) and e
 * (O_CLOEXEC) anywhere after the first letter; glibc's ",ccs=" and unknown letters are
 * ignored, as glibc does. -1 for a mode that is none of these. */
static int mode_flags(const char *mode)
{
    int flags;
    switch (mode ? mode[0] : 0) {
    case 'r': flags = O_RDONLY; break;
    case 'w': flags = O_WRONLY | O_CREAT | O_TRUNC; break;
    case 'a': flags = O_WRONLY | O_CREAT | O_APPEND; break;
    default: return -1;
    }
    for (const char *m = mode + 1; *m && *m != ','; m++) {
        if (*m == '+')
            flags = (flags & ~O_ACCMODE) | O_RDWR;
        else if (*m == 'x')
            flags |= O_EXCL;
        else if (*m == 'e')
            flags |= O_CLOEXEC;
    }
    return flags;
}

/* Opens path (ours, classified as p) with an fopen mode as a stream of ours. */
static FILE *fopen_ours(cairn_store *s, struct cairn_path *p, const char *mode)
{
    int flags = mode_flags(mode);
    int fd = flags < 0 ? -EINVAL : cairn_open_ours(s, p, flags, 0666);
    if (fd < 0) {
        errno = -fd;
        return NULL;
    }
    FILE *fp = stream_wrap(fd, flags & O_ACCMODE);
    if (!fp) {
        int e = errno;
        cairn_close(fd);
        errno = e;
        return NULL;
    }
    errno = p->saved_errno;
    return fp;
}

CAIRN_EXPORT FILE *fopen(const char *path, const char *mode)
{
    struct cairn_path p;
    cairn_store *s;
    int r = cairn_route(AT_FDCWD, path, &p, &s);
    if (r <= 0)
        return r == 0 ? CAIRN_REAL(fopen, p.pass, mode) : NULL;
    return fopen_ours(s, &p, mode);
}
CAIRN_EXPORT FILE *fopen64(const char *path, const char *mode) __attribute__((alias("fopen")));

/* fdopen on ours: the mode must fit the descriptor's access mode; "a" sets O_APPEND, as
 * glibc does. */
CAIRN_EXPORT FILE *fdopen(int fd, const char *mode)
{
    if (!cairn_fd_maybe(fd))
        return CAIRN_REAL(fdopen, fd, mode);
    int flags = mode_flags(mode);
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return NULL;
    int acc = fl & O_ACCMODE, want = flags & O_ACCMODE;
    if (flags < 0 || (fl & O_PATH) || (acc != O_RDWR && want != acc)) {
        errno = EINVAL;
        return NULL;
    }
    if ((flags & O_APPEND) && cairn_fd_set_append(fd) < 0) {
        errno = EBADF;
        return NULL;
    }
    return stream_wrap(fd, want);
}

/* freopen of a stream of ours: flush it, open the new file (path NULL: the same descriptor
 * with O_APPEND per the mode), and let the stream use the new descriptor from its start. */
static FILE *freopen_ours(struct cairn_stream *st, const char *path, const char *mode,
                          FILE *fp)
{
    int flags = mode_flags(mode), acc = flags & O_ACCMODE;
    if (flags < 0 || (st->acc != O_RDWR && acc != st->acc)) {
        errno = EINVAL;
        return NULL;
    }
    fflush(fp);
    int fd = st->fd;
    if (path) {
        fd = cairn_openat(AT_FDCWD, path, flags, 0666);
        if (fd < 0)
            return NULL;
        cairn_close(st->fd);
        st->fd = fd;
    } else if (flags & O_APPEND) {
        cairn_fd_set_append(fd);
    }
    rewind(fp);
    return fp;
}

/* ---------------------------------------------------------------------------------------- */
/* The standard streams                                                                     */
/* ---------------------------------------------------------------------------------------- */

static pthread_mutex_t std_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    FILE *ours;            /* atomic: our stream over descriptor k, or NULL */
    FILE *saved;           /* what the variable held before it */
    const void *desc;      /* the description it was made for (compared, never followed) */
} stds[3];

static FILE **std_var(int k)
{
    return k == 0 ? &stdin : k == 1 ? &stdout : &stderr;
}

void cairn_std_atfork_child(void)
{
    pthread_mutex_init(&std_lock, NULL);
}

void cairn_std_before(int fd)
{
    FILE *fp = fd >= 0 && fd <= 2 ? __atomic_load_n(&stds[fd].ours, __ATOMIC_ACQUIRE) : NULL;
    if (fp)
        fflush(fp);
}

/* Puts glibc's stream back; under std_lock. The stream of ours is returned for the caller to
 * free once the lock is released: it no longer owns the descriptor. */
static FILE *std_detach(int k)
{
    FILE *fp = stds[k].ours;
    FILE **var = std_var(k);
    if (*var == fp)
        *var = stds[k].saved;
    struct cairn_stream *st = stream_of(fp);
    if (st)
        st->fd = -1;
    __atomic_store_n(&stds[k].ours, NULL, __ATOMIC_RELEASE);
    return fp;
}

void cairn_std_after(int fd)
{
    if (fd < 0 || fd > 2)
        return;
    /* A regular file's description gets a stream; a directory or O_PATH one does not. */
    struct cairn_ofd *d = cairn_fd_get(fd);
    const void *desc = NULL;
    int acc = 0;
    if (d && d->kind == CAIRN_OFD_FILE && !(d->flags & O_PATH)) {
        desc = d;
        acc = d->flags & O_ACCMODE;
    }
    if (d)
        cairn_ofd_put(d);
    if (!desc && !__atomic_load_n(&stds[fd].ours, __ATOMIC_ACQUIRE))
        return;
    FILE *gone = NULL;
    pthread_mutex_lock(&std_lock);
    if (stds[fd].ours && stds[fd].desc != desc)
        gone = std_detach(fd);
    if (desc && !stds[fd].ours) {
        FILE *fp = stream_wrap(fd, acc);
        if (fp) {
            stream_of(fp)->std = fd + 1;
            if (fd == 2)
                setvbuf(fp, NULL, _IONBF, 0);
            FILE **var = std_var(fd);
            stds[fd].saved = *var;
            stds[fd].desc = desc;
            *var = fp;
            __atomic_store_n(&stds[fd].ours, fp, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&std_lock);
    if (gone)
        fclose(gone);
}

/* fclose of a standard stream of ours: the program closes the descriptor with it, and the
 * variable is left as glibc leaves it after fclose(stdout). */
static void std_closed(struct cairn_stream *st)
{
    int k = st->std - 1;
    pthread_mutex_lock(&std_lock);
    if (stds[k].ours == st->fp)
        __atomic_store_n(&stds[k].ours, NULL, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&std_lock);
    st->std = 0;
}

/* freopen of the standard stream k onto path: the file (of ours or not) is opened and moved
 * onto descriptor k, and the variable follows (cairn_std_after). */
static FILE *freopen_std(const char *path, const char *mode, int k)
{
    FILE **var = std_var(k);
    int flags = mode_flags(mode);
    if (flags < 0) {
        errno = EINVAL;
        return NULL;
    }
    int saved = errno;
    int fd = cairn_openat(AT_FDCWD, path, flags & ~O_CLOEXEC, 0666);
    if (fd < 0)
        return NULL;
    fflush(*var);
    if (fd != k) {
        int rc = dup2(fd, k);
        int e = errno;
        cairn_close(fd);
        if (rc < 0) {
            errno = e;
            return NULL;
        }
    }
    errno = saved;
    return *var;
}

static FILE *freopen_call(const char *path, const char *mode, FILE *fp)
{
    struct cairn_stream *st = stream_of(fp);
    if (st && st->std && path)
        return freopen_std(path, mode, st->std - 1);
    if (st)
        return freopen_ours(st, path, mode, fp);
    struct cairn_path p;
    cairn_store *s;
    int r = cairn_route(AT_FDCWD, path, &p, &s);
    if (r <= 0)
        return r == 0 ? CAIRN_REAL(freopen, p.pass, mode, fp) : NULL;
    for (int k = 0; k <= 2; k++)
        if (fp == *std_var(k))
            return freopen_std(path, mode, k);
    errno = EOPNOTSUPP;
    return NULL;
}

CAIRN_EXPORT FILE *freopen(const char *path, const char *mode, FILE *fp)
{
    return freopen_call(path, mode, fp);
}
CAIRN_EXPORT FILE *freopen64(const char *path, const char *mode, FILE *fp)
    __attribute__((alias("freopen")));

CAIRN_EXPORT int fileno(FILE *fp)
{
    struct cairn_stream *st = stream_of(fp);
    return st ? st->fd : CAIRN_REAL(fileno, fp);
}

CAIRN_EXPORT int fileno_unlocked(FILE *fp)
{
    struct cairn_stream *st = stream_of(fp);
    return st ? st->fd : CAIRN_REAL(fileno_unlocked, fp);
}
