/*
 * util.c: small helpers the files of libscr share: messages, a file rank 0 reads for every
 * rank, strings every rank gathers, paths, directories and file copies.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compat.h"

void scr_say(const char *what, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* One write per line, so lines of different ranks do not interleave. */
    fprintf(stderr, "SCR: %s: %s\n", what, msg);
    fflush(stderr);
}

/* Rank 0: the file's bytes with a NUL after them, or NULL (*status 1: no such file, -1: cannot
 * be read or too large, reported). */
static char *slurp(const char *path, size_t max, long long *len, int *status)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        *status = errno == ENOENT ? 1 : -1;
        if (*status < 0)
            scr_say("file", "cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t cap = 0, n = 0, got = 1;
    while (got > 0) {
        if (n + 4097 > cap) {
            char *grown = cap < max ? realloc(buf, cap = cap ? 2 * cap : 8192) : NULL;
            if (!grown)
                break;
            buf = grown;
        }
        got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
    }
    fclose(f);
    if (!buf || got > 0) {
        scr_say("file", "%s is larger than %zu bytes (or memory ran out); ignoring it", path,
                max);
        free(buf);
        *status = -1;
        return NULL;
    }
    buf[n] = '\0';
    *len = (long long)n;
    return buf;
}

char *scr_read_shared(const char *path, size_t max, MPI_Comm comm, int rank, int *status)
{
    long long len = -1;
    char *text = NULL;
    *status = 0;
    if (rank == 0 && !(text = slurp(path, max, &len, status)))
        len = *status > 0 ? -2 : -1; /* as the other ranks learn it */
    MPI_Bcast(&len, 1, MPI_LONG_LONG, 0, comm);
    if (len < 0) {
        *status = len == -2 ? 1 : -1;
        return NULL;
    }
    if (rank != 0)
        text = malloc((size_t)len + 1);
    /* Every rank must take the same path through the broadcasts: if one has no memory for
     * the text, no rank uses it (and that rank says why). */
    int ok = text != NULL, all;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm);
    if (!all) {
        if (!ok)
            scr_say("file", "out of memory for %s", path);
        free(text);
        *status = -1;
        return NULL;
    }
    MPI_Bcast(text, (int)len, MPI_CHAR, 0, comm);
    text[len] = '\0';
    return text;
}

int scr_abspath(const char *name, char *out, size_t len)
{
    char buf[2 * SCR_PATH_MAX];
    if (name[0] == '/') {
        if (snprintf(buf, sizeof buf, "%s", name) >= (int)sizeof buf)
            return -1;
    } else {
        if (!getcwd(buf, SCR_PATH_MAX))
            return -1;
        size_t n = strlen(buf);
        if (snprintf(buf + n, sizeof buf - n, "/%s", name) >= (int)(sizeof buf - n))
            return -1;
    }
    /* Rebuild component by component: "" and "." vanish, ".." removes the one before. */
    size_t n = 0;
    for (char *save = NULL, *c = strtok_r(buf, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        if (strcmp(c, ".") == 0)
            continue;
        if (strcmp(c, "..") == 0) {
            while (n > 0 && out[--n] != '/')
                ;
            continue;
        }
        size_t cl = strlen(c);
        if (n + 1 + cl + 1 > len)
            return -1;
        out[n++] = '/';
        memcpy(out + n, c, cl);
        n += cl;
    }
    if (n == 0) {
        if (len < 2)
            return -1;
        out[n++] = '/';
    }
    out[n] = '\0';
    return 0;
}

int scr_mkdirs(const char *path, unsigned mode)
{
    char p[SCR_PATH_MAX];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *slash = strchr(p + 1, '/');; slash = strchr(slash + 1, '/')) {
        if (slash)
            *slash = '\0';
        if (mkdir(p, (mode_t)mode) != 0 && errno != EEXIST)
            return -1;
        if (!slash)
            return 0;
        *slash = '/';
    }
}

void scr_parent(const char *path, char *out)
{
    snprintf(out, SCR_PATH_MAX, "%s", path);
    char *slash = strrchr(out, '/');
    if (slash == out)
        out[1] = '\0';
    else if (slash)
        *slash = '\0';
}

int scr_copy_file(const char *from, const char *to)
{
    char tmp[SCR_PATH_MAX + 32];
    if (snprintf(tmp, sizeof tmp, "%s.cairn-tmp.%ld", to, (long)getpid()) >= (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return -1;
    int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (out < 0) {
        int e = errno;
        close(in);
        errno = e;
        return -1;
    }
    static char buf[1 << 20];
    ssize_t got;
    int ok = 1;
    while (ok && (got = read(in, buf, sizeof buf)) != 0) {
        if (got < 0) {
            ok = errno == EINTR;
            continue;
        }
        for (ssize_t at = 0; ok && at < got;) {
            ssize_t put = write(out, buf + at, (size_t)(got - at));
            if (put < 0)
                ok = errno == EINTR;
            else
                at += put;
        }
    }
    int e = errno;
    close(in);
    ok = close(out) == 0 && ok;
    if (!ok || rename(tmp, to) != 0) {
        e = ok ? errno : e;
        unlink(tmp);
        errno = e;
        return -1;
    }
    return 0;
}

int scr_same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    if (stat(a, &sa) != 0 || stat(b, &sb) != 0 || sa.st_size != sb.st_size)
        return 0;
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    static char ba[1 << 16], bb[1 << 16];
    while (same) {
        size_t na = fread(ba, 1, sizeof ba, fa), nb = fread(bb, 1, sizeof bb, fb);
        same = na == nb && memcmp(ba, bb, na) == 0;
        if (na < sizeof ba)
            break;
    }
    same = same && !ferror(fa) && !ferror(fb);
    if (fa)
        fclose(fa);
    if (fb)
        fclose(fb);
    return same;
}

char *scr_allgather_strings(MPI_Comm comm, const char *mine, size_t len, size_t *total,
                            size_t **starts)
{
    int size;
    MPI_Comm_size(comm, &size);
    int count = mine && len <= INT_MAX ? (int)len : -1;
    int *counts = malloc((size_t)size * sizeof *counts);
    int *displs = malloc((size_t)size * sizeof *displs);
    size_t *at = starts ? malloc(((size_t)size + 1) * sizeof *at) : NULL;
    int ok = counts && displs && (!starts || at) && count >= 0;
    int all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm);
    char *out = NULL;
    if (all_ok) {
        MPI_Allgather(&count, 1, MPI_INT, counts, 1, MPI_INT, comm);
        long long sum = 0;
        for (int r = 0; r < size; r++) {
            displs[r] = (int)sum;
            if (at)
                at[r] = (size_t)sum;
            sum += counts[r];
        }
        out = sum < INT_MAX ? malloc((size_t)sum + 1) : NULL;
        ok = out != NULL;
        MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm);
        if (all_ok) {
            MPI_Allgatherv(mine, count, MPI_CHAR, out, counts, displs, MPI_CHAR, comm);
            out[sum] = '\0';
            *total = (size_t)sum;
            if (at)
                at[size] = (size_t)sum;
        } else {
            free(out);
            out = NULL;
        }
    }
    free(counts);
    free(displs);
    if (out && starts)
        *starts = at;
    else
        free(at);
    return out;
}
