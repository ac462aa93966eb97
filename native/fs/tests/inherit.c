/*
** inherit.c: a program that changes its working directory and starts other programs, run
** under libcairn-fs.so by crates/cairn-shm/tests/preload.rs. Besides POSIX, it checks what
** Cairn documents: a working directory under the prefix is kept by the library, and relative
** names and getcwd follow it.
**
**   inherit cwd DIR         mkdir DIR, chdir into it, relative names with open, fopen, openat,
**                           mkdir, stat, rename, opendir; getcwd and friends; chdir and fchdir
**                           around it and out of it; prints "cwd ok"
**
** Exit status 0 when all is well; otherwise a line on stderr says what failed.
*/
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

/* The whole of path, NUL-ended, into buf; its length or -1. */
static ssize_t slurp(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, len - 1);
    close(fd);
    if (n >= 0)
        buf[n] = 0;
    return n;
}

static int same_file(const char *path, const char *want)
{
    char buf[4096];
    return slurp(path, buf, sizeof buf) >= 0 && strcmp(buf, want) == 0;
}

static int cwd_is(const char *want)
{
    char buf[4096];
    return getcwd(buf, sizeof buf) && strcmp(buf, want) == 0;
}

static int cwd_check(const char *dir)
{
    char p[4096], sub[4096];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    CHECK(mkdir(dir, 0755) == 0);
    CHECK(chdir(dir) == 0);
    CHECK(cwd_is(dir));

    /* getcwd's contract: ERANGE when short, allocation when asked. */
    char small[3];
    CHECK(getcwd(small, sizeof small) == NULL && errno == ERANGE);
    char *dyn = getcwd(NULL, 0);
    CHECK(dyn && strcmp(dyn, dir) == 0);
    free(dyn);
    dyn = get_current_dir_name();
    CHECK(dyn && strcmp(dyn, dir) == 0);
    free(dyn);

    /* Relative names with every kind of call. */
    int fd = open("by_open", O_CREAT | O_WRONLY | O_TRUNC, 0644);
    CHECK(fd >= 0 && write(fd, "open\n", 5) == 5 && close(fd) == 0);
    FILE *f = fopen("by_fopen", "w");
    CHECK(f && fprintf(f, "fopen\n") == 6 && fclose(f) == 0);
    CHECK(mkdir("sub", 0755) == 0);
    fd = openat(AT_FDCWD, "sub/../sub/by_openat", O_CREAT | O_WRONLY, 0600);
    CHECK(fd >= 0 && write(fd, "openat\n", 7) == 7 && close(fd) == 0);
    struct stat st;
    CHECK(stat("by_open", &st) == 0 && st.st_size == 5 && S_ISREG(st.st_mode));
    CHECK(fstatat(AT_FDCWD, "", &st, AT_EMPTY_PATH) == 0 && S_ISDIR(st.st_mode));
    CHECK(access("sub/by_openat", R_OK) == 0);
    CHECK(rename("by_fopen", "sub/moved") == 0);
    int entries = 0;
    DIR *d = opendir(".");
    CHECK(d != NULL);
    for (struct dirent *e; d && (e = readdir(d)) != NULL;)
        entries += strcmp(e->d_name, "by_open") == 0 || strcmp(e->d_name, "sub") == 0;
    CHECK(d && closedir(d) == 0);
    CHECK(entries == 2);
    char *real = realpath("sub/../by_open", NULL);
    snprintf(p, sizeof p, "%s/by_open", dir);
    CHECK(real && strcmp(real, p) == 0);
    free(real);

    /* What was written is there by absolute name. */
    CHECK(same_file(p, "open\n"));
    snprintf(p, sizeof p, "%s/sub/moved", dir);
    CHECK(same_file(p, "fopen\n"));
    snprintf(p, sizeof p, "%s/sub/by_openat", dir);
    CHECK(same_file(p, "openat\n"));

    /* chdir relative and with "..", fchdir through a directory descriptor of ours. */
    CHECK(chdir("sub") == 0 && cwd_is(sub));
    CHECK(same_file("moved", "fopen\n"));
    CHECK(chdir("..") == 0 && cwd_is(dir));
    int dfd = open("sub", O_RDONLY | O_DIRECTORY);
    CHECK(dfd >= 0 && fchdir(dfd) == 0 && cwd_is(sub));
    CHECK(close(dfd) == 0);
    CHECK(chdir("nothing") == -1 && errno == ENOENT);
    CHECK(chdir("moved") == -1 && errno == ENOTDIR);
    CHECK(cwd_is(sub));
    /* Links cannot be made in the store (nor, by accident, in "/"). */
    CHECK(symlink("moved", "link") == -1 && errno == EPERM);
    CHECK(access("/link", F_OK) == -1);

    /* A name that climbs out of the prefix is a real one. */
    char up[4096] = "";
    for (const char *c = sub; *c; c++)
        if (*c == '/')
            strcat(up, "../");
    strcat(up, "etc/passwd");
    CHECK(stat(up, &st) == 0 && S_ISREG(st.st_mode));

    /* Leaving the prefix: the kernel's working directory again. */
    CHECK(chdir("/") == 0 && cwd_is("/"));
    CHECK(open("by_open", O_RDONLY) == -1 && errno == ENOENT);
    if (failures)
        return 1;
    printf("cwd ok\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "cwd") == 0)
        return cwd_check(argv[2]);
    fprintf(stderr, "usage: inherit cwd DIR\n");
    return 2;
}
