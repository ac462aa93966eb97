/*
 * util.c: small helpers the files of libscr share: messages, a file rank 0 reads for every
 * rank, and path normalisation.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
