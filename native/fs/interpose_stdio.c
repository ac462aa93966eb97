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
** freopen: a stream of ours gets a new descriptor (of ours or not), provided the new mode
** reads and writes no more than the stream was made for (EINVAL otherwise, the stream left as
** it was: glibc fixes a cookie stream's direction when it makes it); stdin, stdout and stderr
** reopened onto a path of ours become new streams of ours (the variable is replaced; the
** standard descriptor is dup2'ed onto the file); any other glibc stream cannot be reopened
** onto a path of ours (EOPNOTSUPP, the stream left as it was).
*/
#include "interpose.h"

#include <stdlib.h>
#include <string.h>

#define CAIRN_MAX_STREAMS 1024

struct cairn_stream {
    int used;   /* slot taken (atomic) */
    int fd;     /* the descriptor the cookie functions use */
    int acc;    /* O_RDONLY, O_WRONLY or O_RDWR: what the stream was made for */
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

static int cookie_close(void *c)
{
    struct cairn_stream *st = c;
    int rc = cairn_close(st->fd);
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

/* freopen of stdin, stdout or stderr onto a path of ours. */
static FILE *freopen_std(cairn_store *s, struct cairn_path *p, const char *mode, FILE **var,
                         int stdfd)
{
    FILE *fp = fopen_ours(s, p, mode);
    if (!fp)
        return NULL;
    struct cairn_stream *st = stream_of(fp);
    fflush(*var);
    if (dup2(st->fd, stdfd) < 0) {
        int e = errno;
        fclose(fp);
        errno = e;
        return NULL;
    }
    cairn_close(st->fd);
    st->fd = stdfd;
    *var = fp;
    return fp;
}

static FILE *freopen_call(const char *path, const char *mode, FILE *fp)
{
    struct cairn_stream *st = stream_of(fp);
    if (st)
        return freopen_ours(st, path, mode, fp);
    struct cairn_path p;
    cairn_store *s;
    int r = cairn_route(AT_FDCWD, path, &p, &s);
    if (r <= 0)
        return r == 0 ? CAIRN_REAL(freopen, p.pass, mode, fp) : NULL;
    if (fp == stdout)
        return freopen_std(s, &p, mode, &stdout, 1);
    if (fp == stderr)
        return freopen_std(s, &p, mode, &stderr, 2);
    if (fp == stdin)
        return freopen_std(s, &p, mode, &stdin, 0);
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
