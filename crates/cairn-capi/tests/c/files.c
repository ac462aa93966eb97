/*
 * files.c -- an application that writes its own checkpoint files through Cairn's file API.
 *
 * Every rank holds a state of doubles that is a pure function of (rank, step), so a restored
 * file can be checked without a copy. Every --every steps it starts an output, routes two
 * files (its own binary state file and a small text file), writes them with stdio, and
 * completes the output. On start it restarts from the newest checkpoint, reads the files at
 * their routed paths, checks them, and completes the restart; a rank that finds its files
 * wrong (or --invalid-rank R, which makes rank R reject the first checkpoint it is offered)
 * makes every rank fall back to the next older checkpoint.
 *
 * The file is divided into: the state; error reporting; restart; main with the step loop.
 *
 * Usage: files [--steps N] [--every K] [--sleep-ms MS] [--invalid-rank R] [--config PATH]
 *
 * Output (stdout, flushed after every line):
 *   files: rank <r> restored v<v> ok
 *   files: rank <r> rejected v<v>
 *   files: rank <r> fresh
 *   files: rank <r> checkpoint v<v> done
 *   files: rank <r> finished v<v> sum <hex>
 * Exit codes: 0 success, 2 bad arguments, 5 a Cairn call failed (no MPI_Finalize).
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cairn_mpi.h"

/* ---- The state ------------------------------------------------------------------------------ */

static int rank;
static size_t len;
static double *state;

static void fill(double *s, int64_t step)
{
    for (size_t i = 0; i < len; i++)
        s[i] = (double)(i * 7 + 1) / (double)(rank + 3) + (double)step * 0.5;
}

static uint64_t digest(const double *s)
{
    uint64_t h = 1469598103934665603ull;
    const unsigned char *b = (const unsigned char *)s;
    for (size_t i = 0; i < len * sizeof *s; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* ---- Errors ---------------------------------------------------------------------------------- */

static void check(int rc, const char *call)
{
    if (rc != CAIRN_OK) {
        fprintf(stderr, "files: rank %d %s failed (%d): %s\n", rank, call, rc, cairn_last_error());
        exit(5);
    }
}

/* ---- Restart --------------------------------------------------------------------------------- */

/* Read the files of checkpoint v; 1 if they hold what step v must. */
static int read_files(int64_t v)
{
    char name[64], path[4096];
    snprintf(name, sizeof name, "out/state.%d.bin", rank);
    check(cairn_route_file(name, path, sizeof path), "cairn_route_file");
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    double *want = malloc(len * sizeof *want);
    size_t got = fread(state, sizeof *state, len, f);
    int extra = fgetc(f) != EOF;
    fclose(f);
    fill(want, v);
    int ok = got == len && !extra && memcmp(state, want, len * sizeof *want) == 0;
    free(want);
    check(cairn_route_file("step.txt", path, sizeof path), "cairn_route_file");
    f = fopen(path, "r");
    long long step = -1;
    if (!f || fscanf(f, "%lld", &step) != 1)
        ok = 0;
    if (f)
        fclose(f);
    return ok && step == v;
}

/* Restart from the newest checkpoint whose files every rank accepts; its step, or 0 (the
 * initial state) if there is none. */
static int64_t restart(int invalid_rank)
{
    int rejected_once = 0;
    for (;;) {
        int64_t v;
        check(cairn_start_restart("files", 0, &v), "cairn_start_restart");
        if (v < 0) {
            printf("files: rank %d fresh\n", rank);
            return 0;
        }
        int ok = read_files(v);
        if (rank == invalid_rank && !rejected_once) {
            ok = 0;
            rejected_once = 1;
        }
        int all;
        check(cairn_complete_restart(ok, &all), "cairn_complete_restart");
        if (all) {
            printf("files: rank %d restored v%" PRId64 " ok\n", rank, v);
            return v;
        }
        printf("files: rank %d rejected v%" PRId64 "\n", rank, v);
    }
}

/* ---- main ------------------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    int64_t steps = 40, every = 5;
    long sleep_ms = 0;
    int invalid_rank = -1;
    const char *config = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "files: %s needs a value\n", a);
            return 2;
        }
        if (strcmp(a, "--steps") == 0)
            steps = atoll(v);
        else if (strcmp(a, "--every") == 0)
            every = atoll(v);
        else if (strcmp(a, "--sleep-ms") == 0)
            sleep_ms = atol(v);
        else if (strcmp(a, "--invalid-rank") == 0)
            invalid_rank = atoi(v);
        else if (strcmp(a, "--config") == 0)
            config = v;
        else {
            fprintf(stderr, "files: unknown argument %s\n", a);
            return 2;
        }
        i++;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    check(cairn_init(MPI_COMM_WORLD, config), "cairn_init");
    len = 20000 + (size_t)rank * 1031;
    state = malloc(len * sizeof *state);

    int64_t from = restart(invalid_rank);
    for (int64_t step = from + 1; step <= steps; step++) {
        fill(state, step);
        if (sleep_ms > 0) {
            struct timespec ts = {sleep_ms / 1000, (sleep_ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        }
        if (step % every != 0)
            continue;
        char label[32], name[64], path[4096];
        snprintf(label, sizeof label, "ckpt.%" PRId64, step);
        check(cairn_start_output("files", step, CAIRN_FLAG_CHECKPOINT, label), "cairn_start_output");
        snprintf(name, sizeof name, "out/state.%d.bin", rank);
        check(cairn_route_file(name, path, sizeof path), "cairn_route_file");
        FILE *f = fopen(path, "wb");
        int ok = f && fwrite(state, sizeof *state, len, f) == len;
        if (f)
            ok = fclose(f) == 0 && ok;
        check(cairn_route_file("step.txt", path, sizeof path), "cairn_route_file");
        f = fopen(path, "w");
        ok = ok && f && fprintf(f, "%" PRId64 "\n", step) > 0;
        if (f)
            ok = fclose(f) == 0 && ok;
        int kept;
        check(cairn_complete_output(ok, &kept), "cairn_complete_output");
        if (kept)
            printf("files: rank %d checkpoint v%" PRId64 " done\n", rank, step);
    }
    fill(state, steps);
    printf("files: rank %d finished v%" PRId64 " sum %016" PRIx64 "\n", rank, steps, digest(state));
    check(cairn_finalize(), "cairn_finalize");
    free(state);
    MPI_Finalize();
    return 0;
}
