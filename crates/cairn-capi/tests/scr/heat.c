/*
 * heat.c: a heat-distribution program written against SCR's API (scr.h), in the style of
 * SCR's documented examples, used by tests/scr.rs to check Cairn's libscr.
 *
 * A rod of `n` cells per rank is heated at its left end (held at 1.0; the right end is held at
 * 0.0) and relaxed with an explicit stencil; each rank owns a contiguous piece and swaps one
 * halo cell with each neighbour per step. Every K steps the program asks SCR_Need_checkpoint
 * and, when told to, writes a checkpoint dataset "ckpt.<step>": each rank routes
 * "<dir>/ckpt.<step>/rank_<r>.ckpt" and writes its piece there with fopen/fwrite (a header
 * with the step and a checksum, then the cells). On start it restarts through SCR when it can:
 * SCR_Have_restart, SCR_Start_restart, SCR_Route_file, fread, SCR_Complete_restart, looping
 * to older checkpoints while a restart fails. With --output-every it also writes output
 * datasets "output.<step>" (SCR_FLAG_OUTPUT), which SCR leaves at
 * "<dir>/output.<step>/field_<r>.dat". The last line is a checksum of the whole rod.
 *
 *   mpirun -n 4 ./heat [--n 4096] [--steps 600] [--every 100] [--output-every 0]
 *          [--dir .] [--sleep-ms 0] [--hold PATH] [--invalid-rank -1] [--config KEY=VALUE]...
 *
 * --hold PATH: after the first checkpoint of the run, wait until PATH exists, then go on (a
 * test's way to keep the job running while it looks at it).
 * --invalid-rank R makes rank R report its first restart invalid (SCR_Complete_restart(0)).
 * --config passes a string to SCR_Config before SCR_Init (repeatable). Output lines start with
 * "heat: ". Exit codes: 0 done, 2 bad arguments, 4 a check of SCR's behaviour failed
 * ("heat: FAILED ..."), 5 an SCR call failed.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#include "scr.h"

static int rank, ranks;
static long long n = 4096, steps = 600, every = 100, output_every = 0, sleep_ms = 0;
static const char *hold;
static int invalid_rank = -1;
static const char *dir = ".";

/* The rod piece: cells 1..n are this rank's, 0 and n+1 the neighbours' (halos). */
static double *u, *next;

static void leave(int code)
{
    MPI_Finalize();
    exit(code);
}

/* An SCR call that must succeed on every rank failed: every rank sees the same outcome of
 * the collective calls, so every rank leaves here together. */
static void check(int rc, const char *call)
{
    if (rc == SCR_SUCCESS)
        return;
    fprintf(stderr, "heat: rank %d: %s failed\n", rank, call);
    leave(5);
}

/* A behaviour SCR documents did not hold. */
static void failed(const char *what)
{
    printf("heat: FAILED rank %d: %s\n", rank, what);
    fflush(stdout);
    leave(4);
}

/* A 64-bit hash of `count` cells, bit for bit: any difference in any cell changes it. */
static uint64_t cells_hash(const double *x, size_t count)
{
    uint64_t h = 0x243f6a8885a308d3ULL;
    for (size_t i = 0; i < count; i++) {
        uint64_t w;
        memcpy(&w, &x[i], sizeof w);
        h = (h ^ w) * 0x9e3779b97f4a7c15ULL;
        h ^= h >> 29;
    }
    return h;
}

struct header {
    char magic[8];
    int64_t step, cells;
    uint64_t sum;
};

/* A line from rank 0. */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    if (rank != 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

/* The contents of this rank's checkpoint file: a header, then the cells with the halos. */
static int write_checkpoint(FILE *fs, long long step)
{
    struct header h = { "HEATCKP", step, n + 2, cells_hash(u, (size_t)(n + 2)) };
    return fwrite(&h, sizeof h, 1, fs) == 1 &&
           fwrite(u, sizeof *u, (size_t)(n + 2), fs) == (size_t)(n + 2);
}

/* The contents of this rank's output file: a text line, then the cells. */
static int write_output(FILE *fs, long long step)
{
    return fprintf(fs, "heat output step %lld rank %d cells %lld\n", step, rank, n) > 0 &&
           fwrite(&u[1], sizeof *u, (size_t)n, fs) == (size_t)n;
}

/* Write dataset ckpt.<step> (SCR_FLAG_CHECKPOINT: "<dir>/ckpt.<step>/rank_<r>.ckpt") or
 * output.<step> (SCR_FLAG_OUTPUT: "<dir>/output.<step>/field_<r>.dat"), one file per rank. */
static void write_dataset(int flags, long long step)
{
    const int ckpt = flags == SCR_FLAG_CHECKPOINT;
    char name[64], file[SCR_MAX_FILENAME], path[SCR_MAX_FILENAME];
    snprintf(name, sizeof name, "%s.%lld", ckpt ? "ckpt" : "output", step);
    check(SCR_Start_output(name, flags), "SCR_Start_output");
    if (snprintf(file, sizeof file, "%s/%s/%s_%d.%s", dir, name, ckpt ? "rank" : "field", rank,
                 ckpt ? "ckpt" : "dat") >= (int)sizeof file)
        failed("a path is longer than SCR_MAX_FILENAME");
    int valid = SCR_Route_file(file, path) == SCR_SUCCESS;
    FILE *fs = valid ? fopen(path, "wb") : NULL;
    if (fs) {
        valid = ckpt ? write_checkpoint(fs, step) : write_output(fs, step);
        valid = fclose(fs) == 0 && valid;
    } else {
        valid = 0;
    }
    check(SCR_Complete_output(valid), "SCR_Complete_output");
    say("heat: %s %s complete (step %lld)\n", ckpt ? "checkpoint" : "output", name, step);
}

/* Read this rank's file of checkpoint `name` into u. Returns whether it is sound. */
static int read_checkpoint(const char *name, long long *step)
{
    char file[SCR_MAX_FILENAME], path[SCR_MAX_FILENAME];
    if (snprintf(file, sizeof file, "%s/%s/rank_%d.ckpt", dir, name, rank) >= (int)sizeof file)
        failed("a path is longer than SCR_MAX_FILENAME");
    if (SCR_Route_file(file, path) != SCR_SUCCESS)
        return 0;
    struct header h;
    FILE *fs = fopen(path, "rb");
    if (!fs)
        return 0;
    int ok = fread(&h, sizeof h, 1, fs) == 1 && memcmp(h.magic, "HEATCKP", 8) == 0 &&
             h.cells == n + 2 && fread(u, sizeof *u, (size_t)(n + 2), fs) == (size_t)(n + 2) &&
             fgetc(fs) == EOF && cells_hash(u, (size_t)(n + 2)) == h.sum;
    fclose(fs);
    /* The dataset name says which step the checkpoint holds. */
    long long named = -1;
    ok = ok && sscanf(name, "ckpt.%lld", &named) == 1 && named == h.step;
    *step = h.step;
    return ok;
}

/* Restart from the newest checkpoint SCR offers, falling back while a restart fails. Returns
 * the step restored, or 0 for a fresh start. */
static long long restart(void)
{
    int first_try = 1;
    for (;;) {
        int have = 0;
        char name[SCR_MAX_FILENAME] = "", started[SCR_MAX_FILENAME] = "";
        check(SCR_Have_restart(&have, name), "SCR_Have_restart");
        if (!have)
            return 0;
        say("heat: have restart %s\n", name);
        check(SCR_Start_restart(started), "SCR_Start_restart");
        if (strcmp(name, started) != 0)
            failed("SCR_Start_restart names another checkpoint than SCR_Have_restart");

        long long step = 0;
        int valid = read_checkpoint(name, &step);
        /* A file the checkpoint does not hold is not routed. */
        char file[SCR_MAX_FILENAME], path[SCR_MAX_FILENAME];
        if (snprintf(file, sizeof file, "%s/%s/no_such_file", dir, name) >= (int)sizeof file)
            failed("a path is longer than SCR_MAX_FILENAME");
        if (SCR_Route_file(file, path) == SCR_SUCCESS)
            failed("SCR_Route_file routed a file the checkpoint does not hold");
        if (rank == invalid_rank && first_try)
            valid = 0;
        first_try = 0;
        if (SCR_Complete_restart(valid) == SCR_SUCCESS) {
            say("heat: restarted from %s (step %lld)\n", name, step);
            return step;
        }
        say("heat: restart from %s failed on some rank; trying an older checkpoint\n", name);
    }
}

static long long option(const char *opt, const char *text, long long min)
{
    char *end;
    long long v = strtoll(text, &end, 10);
    if (*text == '\0' || *end != '\0' || v < min) {
        if (rank == 0)
            fprintf(stderr, "heat: %s needs an integer >= %lld, got '%s'\n", opt, min, text);
        leave(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i], *val = i + 1 < argc ? argv[++i] : "";
        if (strcmp(opt, "--n") == 0)                 n = option(opt, val, 2);
        else if (strcmp(opt, "--steps") == 0)        steps = option(opt, val, 0);
        else if (strcmp(opt, "--every") == 0)        every = option(opt, val, 0);
        else if (strcmp(opt, "--output-every") == 0) output_every = option(opt, val, 0);
        else if (strcmp(opt, "--sleep-ms") == 0)     sleep_ms = option(opt, val, 0);
        else if (strcmp(opt, "--invalid-rank") == 0) invalid_rank = (int)option(opt, val, -1);
        else if (strcmp(opt, "--dir") == 0)          dir = val;
        else if (strcmp(opt, "--hold") == 0)         hold = val;
        else if (strcmp(opt, "--config") == 0) {
            const char *set = SCR_Config(val);
            if (!set)
                failed("SCR_Config refused a setting");
            free((void *)set);
        } else {
            if (rank == 0)
                fprintf(stderr, "heat: unknown option %s\n", opt);
            leave(2);
        }
    }

    check(SCR_Init(), "SCR_Init");
    /* Outside output and restart, SCR_Route_file gives the name back as it is. */
    char routed[SCR_MAX_FILENAME];
    if (SCR_Route_file("some/dir/file.dat", routed) != SCR_SUCCESS ||
        strcmp(routed, "some/dir/file.dat") != 0)
        failed("SCR_Route_file outside output and restart changed the name");

    u = calloc((size_t)n + 2, sizeof *u);
    next = calloc((size_t)n + 2, sizeof *next);
    if (!u || !next)
        failed("out of memory");
    if (rank == 0)
        u[1] = 1.0; /* the hot end */

    long long step = restart();
    if (step == 0)
        say("heat: no checkpoint, starting fresh\n");
    const long long restored = step;
    const int left = rank > 0 ? rank - 1 : MPI_PROC_NULL;
    const int right = rank < ranks - 1 ? rank + 1 : MPI_PROC_NULL;
    /* The rod's two ends are fixed: the first cell of rank 0 and the last of the last rank. */
    const long long lo = rank == 0 ? 2 : 1, hi = rank == ranks - 1 ? n - 1 : n;
    const struct timespec nap = { sleep_ms / 1000, (sleep_ms % 1000) * 1000000L };
    memcpy(next, u, ((size_t)n + 2) * sizeof *u);

    while (step < steps) {
        MPI_Sendrecv(&u[1], 1, MPI_DOUBLE, left, 0, &u[n + 1], 1, MPI_DOUBLE, right, 0,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Sendrecv(&u[n], 1, MPI_DOUBLE, right, 1, &u[0], 1, MPI_DOUBLE, left, 1,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (long long i = lo; i <= hi; i++)
            next[i] = u[i] + 0.25 * (u[i - 1] - 2.0 * u[i] + u[i + 1]);
        memcpy(&u[1], &next[1], (size_t)n * sizeof *u);
        step++;

        /* A restarted run never writes the checkpoint it restarted from again. */
        if (every > 0 && step % every == 0 && step != restored) {
            int need = 0;
            check(SCR_Need_checkpoint(&need), "SCR_Need_checkpoint");
            if (need)
                write_dataset(SCR_FLAG_CHECKPOINT, step);
            const struct timespec tick = {0, 10000000L};
            while (hold && access(hold, F_OK) != 0)
                nanosleep(&tick, NULL);
            hold = NULL;
        }
        if (output_every > 0 && step % output_every == 0 && step != restored)
            write_dataset(SCR_FLAG_OUTPUT, step);
        int stop = 0;
        check(SCR_Should_exit(&stop), "SCR_Should_exit");
        if (stop) {
            say("heat: SCR_Should_exit says stop (step %lld)\n", step);
            break;
        }
        if (sleep_ms > 0)
            nanosleep(&nap, NULL);
    }

    /* The checksum of the whole rod, in rank order. */
    double *all = rank == 0 ? malloc((size_t)(n * ranks) * sizeof *all) : NULL;
    if (rank == 0 && !all)
        failed("out of memory");
    MPI_Gather(&u[1], (int)n, MPI_DOUBLE, all, (int)n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("heat: final checksum %016" PRIx64 " (step %lld)\n",
               cells_hash(all, (size_t)(n * ranks)), step);
        fflush(stdout);
    }
    free(all);
    check(SCR_Finalize(), "SCR_Finalize");
    free(u);
    free(next);
    MPI_Finalize();
    return 0;
}
