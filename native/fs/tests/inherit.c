/*
** inherit.c: a program that changes its working directory and starts other programs, run
** under libcairn-fs.so by crates/cairn-shm/tests/preload.rs. Besides POSIX, it checks what
** Cairn documents: a working directory under the prefix is kept by the library (relative
** names, getcwd and the programs it starts follow it), descriptors of ours reach programs
** started with exec, posix_spawn and system, each then with an offset of its own, and a
** program in the store cannot be executed (EACCES).
**
**   inherit cwd DIR         mkdir DIR, chdir into it, relative names with open, fopen, openat,
**                           mkdir, stat, rename, opendir; getcwd and friends; chdir and fchdir
**                           around it and out of it; prints "cwd ok"
**   inherit exec DIR SELF   opens DIR/out and DIR/log, chdirs into DIR, then starts SELF as a
**                           child with fork + execl, posix_spawn and system, runs popen both
**                           ways, checks what they wrote, that a failed exec changes nothing,
**                           that a program in the store is EACCES, and that a vfork child's
**                           close leaves the parent's descriptor alone; prints "exec ok"
**   inherit child FD APP HIDDEN DIR OFF
**                           (started by "exec") writes "child\n" to FD at offset OFF and
**                           "c\n" to APP (O_APPEND), checks HIDDEN (close-on-exec) is gone and
**                           the working directory is DIR
**
** Exit status 0 when all is well; otherwise a line on stderr says what failed.
*/
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

extern char **environ;

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

static pid_t wait_ok(pid_t pid)
{
    int status = -1;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return pid;
}

static int exec_check(const char *dir, const char *self)
{
    char out[4096], log[4096], fds[3][16], offs[16];
    snprintf(out, sizeof out, "%s/out", dir);
    snprintf(log, sizeof log, "%s/log", dir);
    CHECK(mkdir(dir, 0755) == 0);
    int fd = open(out, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    int app = open(log, O_CREAT | O_WRONLY | O_APPEND, 0644);
    int hidden = fcntl(fd, F_DUPFD_CLOEXEC, 50);
    CHECK(fd >= 0 && app >= 0 && hidden >= 50);
    CHECK(write(fd, "parent\n", 7) == 7 && write(app, "p\n", 2) == 2);
    CHECK(chdir(dir) == 0);
    snprintf(fds[0], sizeof fds[0], "%d", fd);
    snprintf(fds[1], sizeof fds[1], "%d", app);
    snprintf(fds[2], sizeof fds[2], "%d", hidden);

    /* fork + execl: the child writes at the offset it inherited. */
    pid_t pid = fork();
    if (pid == 0) {
        execl(self, self, "child", fds[0], fds[1], fds[2], dir, "7", (char *)NULL);
        _exit(127);
    }
    wait_ok(pid);
    CHECK(same_file(out, "parent\nchild\n"));
    CHECK(same_file(log, "p\nc\n"));
    /* Its offset was its own from the exec on: ours has not moved. */
    CHECK(lseek(fd, 0, SEEK_CUR) == 7);

    /* posix_spawn passes them the same way. */
    CHECK(lseek(fd, 0, SEEK_END) == 13);
    snprintf(offs, sizeof offs, "%d", 13);
    char *argv[] = {(char *)self, "child", fds[0], fds[1], fds[2], (char *)dir, offs, NULL};
    CHECK(posix_spawn(&pid, self, NULL, NULL, argv, environ) == 0);
    wait_ok(pid);
    CHECK(same_file(out, "parent\nchild\nchild\n"));
    CHECK(same_file(log, "p\nc\nc\n"));

    /* system: the shell gets the descriptor and the working directory. */
    char cmd[256];
    CHECK(lseek(fd, 0, SEEK_END) == 19);
    snprintf(cmd, sizeof cmd, "echo sys >&%d && pwd > from_system", fd);
    CHECK(system(cmd) == 0);
    CHECK(same_file(out, "parent\nchild\nchild\nsys\n"));
    char want[4096];
    snprintf(want, sizeof want, "%s\n", dir);
    CHECK(same_file("from_system", want));

    /* popen, both ways: the shell starts in the working directory. */
    FILE *pp = popen("pwd", "r");
    char line[4096];
    CHECK(pp && fgets(line, sizeof line, pp) && strcmp(line, want) == 0);
    CHECK(pp && pclose(pp) == 0);
    pp = popen("cat > from_popen", "w");
    CHECK(pp && fputs("via popen\n", pp) >= 0 && pclose(pp) == 0);
    CHECK(same_file("from_popen", "via popen\n"));

    /* A failed exec changes nothing. */
    char **env = environ;
    CHECK(execl("/nonexistent/program", "x", (char *)NULL) == -1 && errno == ENOENT);
    CHECK(execlp("no-such-program-anywhere", "x", (char *)NULL) == -1 && errno == ENOENT);
    CHECK(environ == env && getenv("CAIRN_FS_INHERIT") == NULL);
    CHECK(cwd_is(dir));
    CHECK(lseek(fd, 0, SEEK_END) == 23 && write(fd, "after\n", 6) == 6);
    CHECK(same_file(out, "parent\nchild\nchild\nsys\nafter\n"));
    /* Programs in the store cannot be executed. */
    CHECK(chmod("out", 0755) == 0);
    CHECK(execl(out, "x", (char *)NULL) == -1 && errno == EACCES);
    CHECK(execl("./out", "x", (char *)NULL) == -1 && errno == EACCES);
    CHECK(posix_spawn(&pid, "out", NULL, NULL, argv, environ) == EACCES);

    /* A vfork child's close is its own. */
    pid = vfork();
    if (pid == 0) {
        close(fd);
        _exit(0);
    }
    wait_ok(pid);
    CHECK(write(fd, "v\n", 2) == 2);
    CHECK(close(fd) == 0 && close(app) == 0 && close(hidden) == 0);
    if (failures)
        return 1;
    printf("exec ok\n");
    return 0;
}

static int child(int fd, int app, int hidden, const char *dir, off_t off)
{
    struct stat st;
    CHECK(getenv("CAIRN_FS_INHERIT") == NULL);
    CHECK(cwd_is(dir));
    CHECK(lseek(fd, 0, SEEK_CUR) == off);
    CHECK(fstat(fd, &st) == 0 && st.st_size == off);
    CHECK((fcntl(fd, F_GETFL) & O_ACCMODE) == O_WRONLY);
    CHECK(fcntl(app, F_GETFL) & O_APPEND);
    CHECK(write(fd, "child\n", 6) == 6 && write(app, "c\n", 2) == 2);
    CHECK(fcntl(hidden, F_GETFD) == -1 && errno == EBADF);
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "cwd") == 0)
        return cwd_check(argv[2]);
    if (argc == 4 && strcmp(argv[1], "exec") == 0)
        return exec_check(argv[2], argv[3]);
    if (argc == 7 && strcmp(argv[1], "child") == 0)
        return child(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), argv[5], atol(argv[6]));
    fprintf(stderr, "usage: inherit cwd DIR | inherit exec DIR SELF\n");
    return 2;
}
