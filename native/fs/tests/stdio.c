/*
** stdio.c: a program that writes and reads files through stdio only, run under
** libcairn-fs.so by crates/cairn-shm/tests/preload.rs.
**
**   stdio DIR    fopen/fprintf/fwrite/fread/fgets/fseek/ftell/fclose in every mode, fdopen,
**                fileno, freopen of a stream and of stdout; prints "stdio ok"
**
** Exit status 0 when all is well; otherwise a line on stderr says what failed.
*/
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

#define BLOB 200003

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: stdio DIR\n");
        return 2;
    }
    char p[4096], q[4096], out[4096], line[256];
    snprintf(p, sizeof p, "%s/text", argv[1]);
    snprintf(q, sizeof q, "%s/viafd", argv[1]);
    snprintf(out, sizeof out, "%s/stdout.txt", argv[1]);
    static unsigned char blob[BLOB], back[BLOB];
    for (size_t i = 0; i < BLOB; i++)
        blob[i] = (unsigned char)(i * 7 + (i >> 11));

    /* "w": text then a binary block larger than the stream buffer. */
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    for (int i = 0; i < 100; i++)
        CHECK(fprintf(f, "line %d of %s\n", i, "text") > 0);
    long text_end = ftell(f);
    CHECK(text_end > 0);
    CHECK(fwrite(blob, 1, BLOB, f) == BLOB);
    struct stat st;
    CHECK(fflush(f) == 0 && fstat(fileno(f), &st) == 0 && st.st_size == text_end + BLOB);
    CHECK(fileno_unlocked(f) == fileno(f) && fileno(f) > 2);
    CHECK(fclose(f) == 0);

    /* "r": the same back, with fgets, fscanf, fseek and fread. */
    f = fopen(p, "rb");
    CHECK(f != NULL);
    CHECK(fgets(line, sizeof line, f) && strcmp(line, "line 0 of text\n") == 0);
    int n = -1;
    CHECK(fscanf(f, "line %d of text\n", &n) == 1 && n == 1);
    CHECK(fseek(f, text_end, SEEK_SET) == 0 && ftell(f) == text_end);
    CHECK(fread(back, 1, BLOB, f) == BLOB && memcmp(blob, back, BLOB) == 0);
    CHECK(fread(back, 1, 1, f) == 0 && feof(f));
    CHECK(fseek(f, -5, SEEK_END) == 0 && fread(back, 1, 10, f) == 5);
    CHECK(memcmp(back, blob + BLOB - 5, 5) == 0);
    CHECK(fputc('x', f) == EOF && ferror(f)); /* a read-only stream */
    CHECK(fclose(f) == 0);

    /* "a" appends, "r+" overwrites in place, "x" refuses an existing file. */
    f = fopen(p, "a");
    CHECK(f && fputs("appended\n", f) >= 0 && fclose(f) == 0);
    f = fopen(p, "r+");
    CHECK(f && fseek(f, 5, SEEK_SET) == 0 && fputs("ZERO", f) >= 0 && fclose(f) == 0);
    f = fopen(p, "r");
    CHECK(f && fgets(line, sizeof line, f) && strcmp(line, "line ZERO text\n") == 0);
    CHECK(f && fseek(f, -9, SEEK_END) == 0 && fgets(line, sizeof line, f));
    CHECK(strcmp(line, "appended\n") == 0);
    CHECK(f && fclose(f) == 0);
    CHECK(fopen(p, "wx") == NULL && errno == EEXIST);
    CHECK(fopen(q, "r") == NULL && errno == ENOENT);
    f = fopen(p, "a+");
    CHECK(f && fgets(line, sizeof line, f) && strcmp(line, "line ZERO text\n") == 0);
    CHECK(f && fclose(f) == 0);

    /* fdopen on a descriptor from open(2); the stream owns it. */
    int fd = open(q, O_CREAT | O_RDWR | O_TRUNC, 0644);
    CHECK(fd >= 0);
    f = fdopen(fd, "w+");
    CHECK(f && fileno(f) == fd);
    CHECK(fprintf(f, "%s %d\n", "via", fd) > 0 && fflush(f) == 0);
    rewind(f);
    CHECK(fgets(line, sizeof line, f) && strncmp(line, "via ", 4) == 0);
    CHECK(fclose(f) == 0);
    CHECK(close(fd) == -1 && errno == EBADF);
    CHECK(fdopen(open(q, O_RDONLY), "w") == NULL && errno == EINVAL);

    /* freopen of a stream of ours onto another file of ours. */
    f = fopen(q, "r");
    CHECK(f && freopen(p, "r", f) == f);
    CHECK(f && fgets(line, sizeof line, f) && strcmp(line, "line ZERO text\n") == 0);
    CHECK(f && fclose(f) == 0);

    /* freopen of stdout onto a file of ours: printf lands there. */
    fflush(stdout);
    int saved = dup(1);
    CHECK(freopen(out, "w", stdout) != NULL);
    printf("to the store %d\n", 42);
    CHECK(fclose(stdout) == 0);
    CHECK(dup2(saved, 1) == 1);
    stdout = fdopen(1, "w");
    f = fopen(out, "r");
    CHECK(f && fgets(line, sizeof line, f) && strcmp(line, "to the store 42\n") == 0);
    CHECK(f && fclose(f) == 0);

    if (failures)
        return 1;
    printf("stdio ok\n");
    return 0;
}
