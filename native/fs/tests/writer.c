/*
** writer.c: a program that uses the POSIX file calls on its own, run under libcairn-fs.so by
** crates/cairn-shm/tests/preload.rs. It knows nothing of Cairn: the checks are what POSIX
** asks of any file system, plus three things Cairn's store documents: files have no holes
** (SEEK_HOLE is the end), they cannot be mapped (ENODEV), and renaming one out of the store is
** EXDEV.
**
**   writer check DIR        open/write/pwrite/lseek/ftruncate/fstat/readv/dup/fcntl/O_APPEND,
**                           and the errors they must give; prints "writer ok"
**   writer threads DIR      4 threads each write and read back a file of their own, at once
**   writer hold SRC DIR N   copies SRC into DIR/ckpt.0 .. N-1 (fsync each), prints "ready",
**                           then rewrites DIR/partial forever (to be killed with SIGKILL)
**   writer fill FILE CHUNK  writes CHUNK-byte blocks until write fails; prints the byte count
**                           and the errno's name ("filled 123 ENOSPC")
**
** Exit status 0 when all is well; otherwise a line on stderr says what failed.
*/
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "check.h"

/* Byte i of test file k. */
static unsigned char pattern(size_t i, unsigned k)
{
    return (unsigned char)((i * 131u + (i >> 9) + k * 17u) & 0xff);
}

static void fill(unsigned char *buf, size_t len, size_t start, unsigned k)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = pattern(start + i, k);
}

static int matches(const unsigned char *buf, size_t len, size_t start, unsigned k)
{
    for (size_t i = 0; i < len; i++)
        if (buf[i] != pattern(start + i, k))
            return 0;
    return 1;
}

static void path_in(char *out, size_t len, const char *dir, const char *name)
{
    snprintf(out, len, "%s/%s", dir, name);
}

/* Writes size bytes of pattern k in uneven pieces, then reads them back with readv. */
static void check_write_read(const char *dir)
{
    char p[4096];
    path_in(p, sizeof p, dir, "plain");
    size_t size = 300007;
    unsigned char *buf = malloc(size), *back = malloc(size);
    fill(buf, size, 0, 1);
    int fd = open(p, O_CREAT | O_TRUNC | O_RDWR, 0644);
    CHECK(fd >= 0);
    for (size_t off = 0, step = 1; off < size; off += step, step = step * 3 + 7) {
        size_t n = off + step > size ? size - off : step;
        CHECK(write(fd, buf + off, n) == (ssize_t)n);
    }
    struct stat st;
    CHECK(fstat(fd, &st) == 0 && st.st_size == (off_t)size && S_ISREG(st.st_mode));
    CHECK(st.st_blksize > 0 && st.st_nlink == 1);
    CHECK(lseek(fd, 0, SEEK_CUR) == (off_t)size);
    CHECK(lseek(fd, 0, SEEK_SET) == 0);
    struct iovec v[3] = {{back, 1000}, {back + 1000, 99999}, {back + 100999, size - 100999}};
    CHECK(readv(fd, v, 3) == (ssize_t)size);
    CHECK(memcmp(buf, back, size) == 0);
    CHECK(read(fd, back, 10) == 0);
    CHECK(pread(fd, back, 100, 5000) == 100 && matches(back, 100, 5000, 1));
    CHECK(pread(fd, back, 100, size - 40) == 40);
    CHECK(pread(fd, back, 10, -1) == -1 && errno == EINVAL);

    /* A gap reads as zeros; pwrite leaves the offset alone. */
    off_t before = lseek(fd, 0, SEEK_CUR);
    CHECK(pwrite(fd, "tail", 4, size + 10000) == 4);
    CHECK(lseek(fd, 0, SEEK_CUR) == before);
    CHECK(pread(fd, back, 10000, size) == 10000);
    int zeros = 1;
    for (size_t i = 0; i < 10000; i++)
        zeros &= back[i] == 0;
    CHECK(zeros);
    CHECK(pread(fd, back, 4, size + 10000) == 4 && memcmp(back, "tail", 4) == 0);

    /* Seeking: SEEK_END, SEEK_DATA and SEEK_HOLE as for a file without holes. */
    off_t end = (off_t)size + 10004;
    CHECK(lseek(fd, -4, SEEK_END) == end - 4);
    CHECK(lseek(fd, 100, SEEK_DATA) == 100);
    CHECK(lseek(fd, 100, SEEK_HOLE) == end);
    CHECK(lseek(fd, end, SEEK_DATA) == -1 && errno == ENXIO);
    CHECK(lseek(fd, -1, SEEK_SET) == -1 && errno == EINVAL);

    /* ftruncate shrinks and grows with zeros. */
    CHECK(ftruncate(fd, 1234) == 0);
    CHECK(fstat(fd, &st) == 0 && st.st_size == 1234);
    CHECK(ftruncate(fd, 5000) == 0);
    CHECK(pread(fd, back, 5000, 0) == 5000 && matches(back, 1234, 0, 1));
    zeros = 1;
    for (size_t i = 1234; i < 5000; i++)
        zeros &= back[i] == 0;
    CHECK(zeros);
    CHECK(fsync(fd) == 0 && fdatasync(fd) == 0);
    CHECK(close(fd) == 0);
    CHECK(stat(p, &st) == 0 && st.st_size == 5000);
    free(buf);
    free(back);
}

/* dup shares the offset; O_APPEND appends whatever the offset; F_GETFL/F_SETFL. */
static void check_descriptors(const char *dir)
{
    char p[4096];
    path_in(p, sizeof p, dir, "shared");
    int a = open(p, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    CHECK(a >= 0);
    int b = dup(a);
    CHECK(b >= 0 && b != a);
    CHECK(write(a, "0123456789", 10) == 10);
    CHECK(lseek(b, 0, SEEK_CUR) == 10);
    CHECK(write(b, "abc", 3) == 3);
    CHECK(close(a) == 0);
    CHECK(write(b, "def", 3) == 3);
    int c = fcntl(b, F_DUPFD_CLOEXEC, 100);
    CHECK(c >= 100 && (fcntl(c, F_GETFD) & FD_CLOEXEC));
    CHECK(lseek(c, 0, SEEK_CUR) == 16);
    CHECK(close(b) == 0 && close(c) == 0);

    int app = open(p, O_WRONLY | O_APPEND);
    CHECK(app >= 0 && (fcntl(app, F_GETFL) & O_APPEND));
    CHECK(write(app, "XY", 2) == 2);
    CHECK(lseek(app, 0, SEEK_CUR) == 18);
    CHECK(lseek(app, 0, SEEK_SET) == 0 && write(app, "Z", 1) == 1);
    CHECK(fcntl(app, F_SETFL, 0) == 0 && !(fcntl(app, F_GETFL) & O_APPEND));
    CHECK(lseek(app, 0, SEEK_SET) == 0 && write(app, "!", 1) == 1);
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    CHECK(fcntl(app, F_SETLK, &fl) == 0);
    CHECK(close(app) == 0);

    char back[32] = {0};
    int r = open(p, O_RDONLY);
    CHECK(r >= 0 && read(r, back, sizeof back) == 19);
    CHECK(memcmp(back, "!123456789abcdefXYZ", 19) == 0);

    /* dup2 onto a descriptor of ours closes it; dup2 of ours onto a real one shadows it. */
    int real = open("/dev/null", O_RDONLY);
    CHECK(dup2(r, real) == real);
    CHECK(lseek(real, 3, SEEK_SET) == 3 && read(r, back, 2) == 2 && memcmp(back, "34", 2) == 0);
    CHECK(close(r) == 0 && close(real) == 0);
    CHECK(isatty(real) == 0);
}

/* Errors a file system must give. */
static void check_errors(const char *dir)
{
    char p[4096], q[4096], sub[4096];
    path_in(p, sizeof p, dir, "plain");
    path_in(q, sizeof q, dir, "missing");
    path_in(sub, sizeof sub, dir, "sub");
    struct stat st;
    char c;
    CHECK(open(p, O_CREAT | O_EXCL | O_WRONLY, 0600) == -1 && errno == EEXIST);
    CHECK(open(q, O_RDONLY) == -1 && errno == ENOENT);
    CHECK(stat(q, &st) == -1 && errno == ENOENT);
    CHECK(access(p, R_OK | W_OK) == 0 && access(q, F_OK) == -1 && errno == ENOENT);
    int w = open(p, O_WRONLY);
    CHECK(w >= 0 && read(w, &c, 1) == -1 && errno == EBADF);
    CHECK(mmap(NULL, 4096, PROT_READ, MAP_SHARED, w, 0) == MAP_FAILED && errno == ENODEV);
    CHECK(close(w) == 0);
    CHECK(close(w) == -1 && errno == EBADF);
    int r = open(p, O_RDONLY);
    CHECK(r >= 0 && write(r, "x", 1) == -1 && errno == EBADF);
    CHECK(ftruncate(r, 0) == -1 && errno == EINVAL);
    CHECK(close(r) == 0);

    CHECK(mkdir(sub, 0755) == 0);
    CHECK(mkdir(sub, 0755) == -1 && errno == EEXIST);
    CHECK(stat(sub, &st) == 0 && S_ISDIR(st.st_mode));
    CHECK(open(sub, O_WRONLY) == -1 && errno == EISDIR);
    int d = open(sub, O_RDONLY | O_DIRECTORY);
    CHECK(d >= 0 && read(d, &c, 1) == -1 && errno == EISDIR);
    CHECK(open(p, O_RDONLY | O_DIRECTORY) == -1 && errno == ENOTDIR);
    /* openat relative to a directory of ours. */
    int f = openat(d, "inner", O_CREAT | O_WRONLY, 0600);
    CHECK(f >= 0 && write(f, "in", 2) == 2 && close(f) == 0);
    CHECK(fstatat(d, "inner", &st, 0) == 0 && st.st_size == 2);
    CHECK(rmdir(sub) == -1 && errno == ENOTEMPTY);
    CHECK(unlinkat(d, "inner", 0) == 0);
    CHECK(close(d) == 0);
    CHECK(rmdir(sub) == 0 && stat(sub, &st) == -1 && errno == ENOENT);

    CHECK(rename(p, q) == 0 && stat(p, &st) == -1 && stat(q, &st) == 0);
    CHECK(rename(q, "/tmp/cairn-writer-never") == -1 && errno == EXDEV);
    CHECK(unlink(q) == 0 && unlink(q) == -1 && errno == ENOENT);
}

static int check(const char *dir)
{
    check_write_read(dir);
    check_descriptors(dir);
    check_errors(dir);
    if (failures)
        return 1;
    printf("writer ok\n");
    return 0;
}

struct job {
    const char *dir;
    unsigned k;
    int ok;
};

static void *thread_main(void *arg)
{
    struct job *j = arg;
    char p[4096], name[32];
    snprintf(name, sizeof name, "thread.%u", j->k);
    path_in(p, sizeof p, j->dir, name);
    size_t size = (2u << 20) + j->k * 4099, piece = 65536 + 13 * j->k;
    unsigned char *buf = malloc(piece), *back = malloc(piece);
    int fd = open(p, O_CREAT | O_TRUNC | O_RDWR, 0644);
    j->ok = fd >= 0;
    for (size_t off = 0; j->ok && off < size; off += piece) {
        size_t n = off + piece > size ? size - off : piece;
        fill(buf, n, off, j->k);
        j->ok = write(fd, buf, n) == (ssize_t)n;
    }
    for (size_t off = 0; j->ok && off < size; off += piece) {
        size_t n = off + piece > size ? size - off : piece;
        j->ok = pread(fd, back, n, (off_t)off) == (ssize_t)n && matches(back, n, off, j->k);
    }
    j->ok = j->ok && close(fd) == 0;
    free(buf);
    free(back);
    return NULL;
}

static int threads(const char *dir)
{
    pthread_t t[4];
    struct job j[4];
    for (unsigned k = 0; k < 4; k++) {
        j[k] = (struct job){dir, k, 0};
        pthread_create(&t[k], NULL, thread_main, &j[k]);
    }
    for (int k = 0; k < 4; k++) {
        pthread_join(t[k], NULL);
        if (!j[k].ok) {
            fprintf(stderr, "writer: thread %d failed\n", k);
            failures++;
        }
    }
    if (failures)
        return 1;
    printf("threads ok\n");
    return 0;
}

/* Copies src into dst with read and write; 0 or -1. */
static int copy(const char *src, const char *dst)
{
    char buf[65536 + 100];
    int in = open(src, O_RDONLY), out = open(dst, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    ssize_t n = 0;
    while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof buf)) > 0)
        if (write(out, buf, (size_t)n) != n)
            n = -1;
    int ok = in >= 0 && out >= 0 && n == 0 && fsync(out) == 0;
    close(in);
    return (close(out) == 0 && ok) ? 0 : -1;
}

static int hold(const char *src, const char *dir, int n)
{
    char p[4096], name[32];
    for (int k = 0; k < n; k++) {
        snprintf(name, sizeof name, "ckpt.%d", k);
        path_in(p, sizeof p, dir, name);
        if (copy(src, p) < 0) {
            fprintf(stderr, "writer: copying %s to %s: %s\n", src, p, strerror(errno));
            return 1;
        }
    }
    printf("ready\n");
    fflush(stdout);
    path_in(p, sizeof p, dir, "partial");
    for (;;)
        copy(src, p);
}

static int fill_until_full(const char *path, size_t chunk)
{
    unsigned char *buf = malloc(chunk);
    fill(buf, chunk, 0, 3);
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    if (fd < 0) {
        perror("writer: open");
        return 1;
    }
    long long total = 0;
    ssize_t n;
    while ((n = write(fd, buf, chunk)) > 0)
        total += n;
    int e = errno;
    close(fd);
    printf("filled %lld %s\n", total, n == 0 ? "none" : e == ENOSPC ? "ENOSPC" : strerror(e));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "check") == 0)
        return check(argv[2]);
    if (argc == 3 && strcmp(argv[1], "threads") == 0)
        return threads(argv[2]);
    if (argc == 5 && strcmp(argv[1], "hold") == 0)
        return hold(argv[2], argv[3], atoi(argv[4]));
    if (argc == 4 && strcmp(argv[1], "fill") == 0)
        return fill_until_full(argv[2], (size_t)atol(argv[3]));
    fprintf(stderr, "usage: writer check DIR | threads DIR | hold SRC DIR N | fill FILE CHUNK\n");
    return 2;
}
