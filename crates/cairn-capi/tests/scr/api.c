/*
 * api.c: the parts of SCR's API an application can observe besides checkpoint and restart,
 * checked against Cairn's libscr by tests/scr.rs: SCR_Config and SCR_Configf (set, query,
 * remove, descriptors, refused after SCR_Init), SCR_Get_version, refused arguments and calls
 * out of order, and the dataset calls SCR_Current, SCR_Drop and SCR_Delete.
 *
 *   mpirun -n 4 ./api --dir PREFIX first     write a.1, a.2 and out.3 (checkpoint and output);
 *                                            delete out.3, drop a.2; restart from a.1
 *   mpirun -n 4 ./api --dir PREFIX second    a.1 is still offered; delete it; nothing left
 *
 * Each check that holds prints nothing; one that does not prints "api: FAILED <what>" and the
 * program exits 4 (5 when an SCR call that must succeed fails). The last line is "api: ok".
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>

#include <mpi.h>

#include "scr.h"

static int rank;
static const char *dir = ".";

static void leave(int code)
{
    MPI_Finalize();
    exit(code);
}

static void expect(int ok, const char *what)
{
    if (ok)
        return;
    printf("api: FAILED rank %d: %s\n", rank, what);
    fflush(stdout);
    leave(4);
}

static void must(int rc, const char *call)
{
    if (rc != SCR_SUCCESS) {
        fprintf(stderr, "api: rank %d: %s failed\n", rank, call);
        leave(5);
    }
}

/* SCR_Config's answer is `want` (NULL: no answer); the string is freed. */
static void config_is(const char *config, const char *want)
{
    const char *got = SCR_Config(config);
    char what[256];
    snprintf(what, sizeof what, "SCR_Config(\"%s\") gave \"%s\", expected \"%s\"", config,
             got ? got : "(null)", want ? want : "(null)");
    expect(want ? got && strcmp(got, want) == 0 : got == NULL, what);
    free((void *)got);
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* A dataset with one file per rank holding `text`. */
static void dataset(const char *name, int flags, const char *text)
{
    char file[SCR_MAX_FILENAME], path[SCR_MAX_FILENAME];
    must(SCR_Start_output(name, flags), "SCR_Start_output");
    if (snprintf(file, sizeof file, "%s/%s/part_%d.txt", dir, name, rank) >= (int)sizeof file)
        expect(0, "the path fits");
    must(SCR_Route_file(file, path), "SCR_Route_file");
    FILE *f = fopen(path, "w");
    int valid = f && fprintf(f, "%s %d\n", text, rank) > 0;
    valid = f && fclose(f) == 0 && valid;
    must(SCR_Complete_output(valid), "SCR_Complete_output");
}

/* Restart from the checkpoint SCR offers, which must be `want`, and check its file. */
static void restart_from(const char *want)
{
    int have = 0;
    char name[SCR_MAX_FILENAME], file[SCR_MAX_FILENAME], path[SCR_MAX_FILENAME], line[64];
    must(SCR_Have_restart(&have, name), "SCR_Have_restart");
    expect(have && strcmp(name, want) == 0, "SCR_Have_restart offers the expected checkpoint");
    must(SCR_Start_restart(NULL), "SCR_Start_restart");
    if (snprintf(file, sizeof file, "%s/%s/part_%d.txt", dir, name, rank) >= (int)sizeof file)
        expect(0, "the path fits");
    must(SCR_Route_file(file, path), "SCR_Route_file");
    FILE *f = fopen(path, "r");
    char expected[64];
    snprintf(expected, sizeof expected, "data of %s %d\n", want, rank);
    int ok = f && fgets(line, sizeof line, f) && strcmp(line, expected) == 0;
    if (f)
        fclose(f);
    expect(ok, "the restored file holds what was written");
    must(SCR_Complete_restart(ok), "SCR_Complete_restart");
}

/* The list of an output dataset's files is data on disk: a path in it outside the prefix
 * (written there by someone else) is never removed. */
static void tampered_list(void)
{
    dataset("out.4", SCR_FLAG_OUTPUT, "data of out.4");
    char victim[SCR_MAX_FILENAME], scrdir[SCR_MAX_FILENAME];
    snprintf(victim, sizeof victim, "%s/../victim-of-out.4", dir);
    if (rank == 0) {
        FILE *v = fopen(victim, "w");
        expect(v && fputs("keep me\n", v) >= 0 && fclose(v) == 0, "the victim file is written");
        snprintf(scrdir, sizeof scrdir, "%s/.scr", dir);
        DIR *d = opendir(scrdir);
        expect(d != NULL, "the .scr directory exists");
        int lists = 0;
        for (struct dirent *e; (e = readdir(d));) {
            if (strncmp(e->d_name, "cairn-output.", 13) != 0)
                continue;
            char list[2 * SCR_MAX_FILENAME];
            snprintf(list, sizeof list, "%s/%s", scrdir, e->d_name);
            FILE *f = fopen(list, "ab");
            expect(f && fwrite(victim, 1, strlen(victim) + 1, f) == strlen(victim) + 1 &&
                       fclose(f) == 0,
                   "the list is appended to");
            lists++;
        }
        closedir(d);
        expect(lists == 1, "out.4 has one list of output files");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    expect(SCR_Delete("out.4") != SCR_SUCCESS, "SCR_Delete reports the path it refused");
    if (rank == 0) {
        expect(exists(victim), "a listed path outside the prefix is not removed");
        remove(victim);
    }
    char path[SCR_MAX_FILENAME];
    snprintf(path, sizeof path, "%s/out.4/part_%d.txt", dir, rank);
    expect(!exists(path), "the dataset's own files are removed");
}

static void first(void)
{
    /* Refused arguments fail on every rank alike and leave SCR usable. */
    expect(SCR_Start_output("bad", SCR_FLAG_NONE) != SCR_SUCCESS, "flags NONE is refused");
    expect(SCR_Start_output("bad", 4) != SCR_SUCCESS, "an unknown flag is refused");
    expect(SCR_Complete_output(1) != SCR_SUCCESS, "SCR_Complete_output without a start fails");
    expect(SCR_Complete_restart(1) != SCR_SUCCESS, "SCR_Complete_restart without a start fails");

    dataset("a.1", SCR_FLAG_CHECKPOINT, "data of a.1");
    dataset("a.2", SCR_FLAG_CHECKPOINT, "data of a.2");
    dataset("out.3", SCR_FLAG_CHECKPOINT | SCR_FLAG_OUTPUT, "data of out.3");

    char path[SCR_MAX_FILENAME];
    snprintf(path, sizeof path, "%s/out.3/part_%d.txt", dir, rank);
    expect(exists(path), "an output dataset's file is at its path under the prefix");
    MPI_Barrier(MPI_COMM_WORLD);

    expect(SCR_Drop("no.such") != SCR_SUCCESS, "SCR_Drop of an unknown name fails");
    expect(SCR_Delete("no.such") != SCR_SUCCESS, "SCR_Delete of an unknown name fails");
    must(SCR_Current("a.2"), "SCR_Current");
    must(SCR_Delete("out.3"), "SCR_Delete");
    snprintf(path, sizeof path, "%s/out.3", dir);
    expect(!exists(path), "SCR_Delete removes the output files and their directory");
    must(SCR_Drop("a.2"), "SCR_Drop");
    expect(SCR_Current("a.2") != SCR_SUCCESS, "a dropped dataset is unknown to SCR_Current");
    tampered_list();
    restart_from("a.1");
}

static void second(void)
{
    restart_from("a.1");
    must(SCR_Delete("a.1"), "SCR_Delete");
    int have = 1;
    must(SCR_Have_restart(&have, NULL), "SCR_Have_restart");
    expect(!have, "nothing is offered once every checkpoint is deleted or dropped");
    expect(SCR_Start_restart(NULL) != SCR_SUCCESS, "SCR_Start_restart without a checkpoint");
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const char *mode = argc == 4 && strcmp(argv[1], "--dir") == 0 ? argv[3] : "";
    if (strcmp(mode, "first") != 0 && strcmp(mode, "second") != 0) {
        if (rank == 0)
            fprintf(stderr, "usage: api --dir PREFIX first|second\n");
        leave(2);
    }
    dir = argv[2];

    config_is("SCR_CACHE_SIZE=2", "2");
    config_is("SCR_CACHE_SIZE", "2");
    config_is("SCR_CACHE_SIZE=", "");
    config_is("SCR_CACHE_SIZE", NULL);
    config_is("CKPT=0 INTERVAL=1 TYPE=SINGLE", "SINGLE");
    config_is("CKPT=0 TYPE", "SINGLE");
    config_is("=oops", NULL);
    const char *f = SCR_Configf("SCR_CACHE_SIZE=%d", 3);
    expect(f && strcmp(f, "3") == 0, "SCR_Configf formats its setting");
    free((void *)f);
    expect(strstr(SCR_Get_version(), "Cairn") != NULL, "SCR_Get_version names Cairn");

    expect(SCR_Route_file("x", (char[SCR_MAX_FILENAME]){ 0 }) != SCR_SUCCESS,
           "SCR_Route_file before SCR_Init fails");
    must(SCR_Init(), "SCR_Init");
    config_is("SCR_FLUSH=1", NULL); /* too late: refused */
    if (strcmp(mode, "first") == 0)
        first();
    else
        second();
    must(SCR_Finalize(), "SCR_Finalize");
    expect(SCR_Init() != SCR_SUCCESS, "SCR_Init after SCR_Finalize fails");
    if (rank == 0)
        printf("api: ok\n");
    MPI_Finalize();
    return 0;
}
