/*
 * heatdis_mixed.c -- one checkpoint holding both memory and a file, with VeloC's API: between
 * VELOC_Checkpoint_begin and VELOC_Checkpoint_end every rank saves its protected memory
 * (VELOC_Checkpoint_mem) and writes a file at the path VELOC_Route_file gives it; a restart
 * gets both back between VELOC_Restart_begin and VELOC_Restart_end and checks that they
 * belong together. Built against Cairn's veloc.h, linked with -lveloc only.
 *
 * Each rank evolves two arrays: `a`, protected memory, and `b`, kept only in the rank's
 * checkpoint file. The file starts with the rank, the step and a digest of `a` at that step,
 * so a restored file that does not match the restored memory is caught. On start the program
 * asks VELOC_Restart_test for the newest version (or the newest no newer than --upto), and if
 * a rank rejects what it restored, every rank passes over that version and asks for the next
 * older one, as VeloC's documentation describes.
 *
 * The file is divided into: the state; the checkpoint file; restart; main with the step loop.
 *
 * Usage: heatdis_mixed CONFIG [--steps N] [--every K] [--sleep-ms MS] [--upto V]
 *                             [--invalid-rank R] [--probe V,V,...] [--recover MODE]
 *   --invalid-rank R  rank R rejects the first version it restores
 *   --probe           print VELOC_Restart_test for each V and stop
 *   --recover MODE    all (VELOC_Recover_mem), some (both ids), some-part (id 1 only),
 *                     rest (no id), rest-part (all but id 0)
 * Output (stdout, flushed after every line):
 *   mixed: rank <r> checkpoint v<v> done
 *   mixed: rank <r> restored v<v> memory and file ok
 *   mixed: rank <r> rejected v<v>
 *   mixed: rank <r> recover <mode> ok|failed
 *   mixed: rank <r> fresh
 *   mixed: restart_test <V> = <v>
 *   mixed: rank <r> finished step <n> digest <hex>
 * Exit codes: 0 success, 2 bad arguments, 5 a VeloC call failed.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <veloc.h>

/* ---- The state ------------------------------------------------------------------------- */

#define NA 50000
#define NB 30000
#define MAGIC 0x6d69786564763031ull /* "mixedv01" */

static int rank;
static int step;
static double a[NA], b[NB];

static void fresh(void)
{
    step = 0;
    for (int k = 0; k < NA; k++)
        a[k] = (double)(k + 1) * (double)(rank + 1) * 0.001;
    for (int k = 0; k < NB; k++)
        b[k] = (double)k;
}

static void advance(void)
{
    for (int k = 0; k < NA; k++)
        a[k] = a[k] * 0.75 + 0.25 * (double)(k % 7) + (double)step * 0.001;
    for (int k = 0; k < NB; k++)
        b[k] = b[k] * 0.5 + a[k];
    step++;
}

static uint64_t fnv(uint64_t d, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        d = (d ^ c[i]) * 1099511628211ull;
    return d;
}

#define FNV0 1469598103934665603ull

static void failed(const char *what)
{
    fprintf(stderr, "mixed: rank %d: %s failed\n", rank, what);
    exit(5);
}

/* ---- The checkpoint file --------------------------------------------------------------- */

struct header {
    uint64_t magic, rank, step, digest_a;
};

static void file_name(char *out, size_t len)
{
    snprintf(out, len, "heatdis-mixed-rank%d.dat", rank);
}

static int write_file(const char *path)
{
    struct header h = {MAGIC, (uint64_t)rank, (uint64_t)step, fnv(FNV0, a, sizeof a)};
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return 0;
    int ok = fwrite(&h, sizeof h, 1, f) == 1 && fwrite(b, sizeof b, 1, f) == 1;
    return fclose(f) == 0 && ok;
}

/* Read b back; valid only if the file belongs to this rank and to the restored memory. */
static int read_file(const char *path)
{
    struct header h;
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return 0;
    int ok = fread(&h, sizeof h, 1, f) == 1 && fread(b, sizeof b, 1, f) == 1 && fgetc(f) == EOF;
    fclose(f);
    return ok && h.magic == MAGIC && h.rank == (uint64_t)rank && h.step == (uint64_t)step &&
           h.digest_a == fnv(FNV0, a, sizeof a);
}

static void checkpoint(void)
{
    char name[256], path[VELOC_MAX_NAME];
    if (VELOC_Checkpoint_wait() != VELOC_SUCCESS)
        failed("VELOC_Checkpoint_wait");
    if (VELOC_Checkpoint_begin("mixed", step) != VELOC_SUCCESS)
        failed("VELOC_Checkpoint_begin");
    if (VELOC_Checkpoint_mem() != VELOC_SUCCESS)
        failed("VELOC_Checkpoint_mem");
    file_name(name, sizeof name);
    if (VELOC_Route_file(name, path) != VELOC_SUCCESS)
        failed("VELOC_Route_file");
    int valid = write_file(path);
    if (VELOC_Checkpoint_end(valid) != VELOC_SUCCESS)
        failed("VELOC_Checkpoint_end");
    printf("mixed: rank %d checkpoint v%d done\n", rank, step);
    fflush(stdout);
}

/* ---- Restart --------------------------------------------------------------------------- */

/* The Recover call of --recover; 1 if it succeeded. */
static int recover(const char *mode)
{
    int both[] = {0, 1}, a_only[] = {1}, step_only[] = {0};
    int rc;
    if (strcmp(mode, "all") == 0)
        rc = VELOC_Recover_mem();
    else if (strcmp(mode, "some") == 0)
        rc = VELOC_Recover_selective(VELOC_RECOVER_SOME, both, 2);
    else if (strcmp(mode, "some-part") == 0)
        rc = VELOC_Recover_selective(VELOC_RECOVER_SOME, a_only, 1);
    else if (strcmp(mode, "rest") == 0)
        rc = VELOC_Recover_selective(VELOC_RECOVER_REST, NULL, 0);
    else
        rc = VELOC_Recover_selective(VELOC_RECOVER_REST, step_only, 1);
    if (strcmp(mode, "all") != 0) {
        printf("mixed: rank %d recover %s %s\n", rank, mode, rc == VELOC_SUCCESS ? "ok" : "failed");
        fflush(stdout);
    }
    return rc == VELOC_SUCCESS;
}

/* Restart from the newest version no newer than upto (0: the newest), passing over versions
 * a rank rejects. Returns whether a version was restored. */
static int restart(int upto, int invalid_rank, const char *mode)
{
    int rejected = 0;
    for (;;) {
        int v = VELOC_Restart_test("mixed", upto);
        if (v < 0)
            return 0;
        if (VELOC_Restart_begin("mixed", v) != VELOC_SUCCESS)
            failed("VELOC_Restart_begin");
        int valid = recover(mode) || strncmp(mode, "some-part", 9) == 0 ||
                    strncmp(mode, "rest-part", 9) == 0;
        char name[256], path[VELOC_MAX_NAME];
        file_name(name, sizeof name);
        if (VELOC_Route_file(name, path) != VELOC_SUCCESS)
            failed("VELOC_Route_file");
        valid = valid && step == v && read_file(path);
        if (rank == invalid_rank && !rejected)
            valid = 0;
        if (VELOC_Restart_end(valid) == VELOC_SUCCESS) {
            printf("mixed: rank %d restored v%d memory and file ok\n", rank, v);
            fflush(stdout);
            return 1;
        }
        printf("mixed: rank %d rejected v%d\n", rank, v);
        fflush(stdout);
        rejected = 1;
        /* VeloC's way to the next older version: at most v - 1 (0 would mean the newest). */
        if (v <= 1)
            return 0;
        upto = v - 1;
    }
}

/* ---- Main ------------------------------------------------------------------------------ */

static void usage(void)
{
    fprintf(stderr, "usage: heatdis_mixed CONFIG [--steps N] [--every K] [--sleep-ms MS] "
                    "[--upto V] [--invalid-rank R] [--probe V,...] [--recover MODE]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    int steps = 40, every = 5, sleep_ms = 0, upto = 0, invalid_rank = -1;
    const char *probe = NULL, *mode = "all";
    if (argc < 2)
        usage();
    const char *config = argv[1];
    for (int i = 2; i < argc; i += 2) {
        if (i + 1 >= argc)
            usage();
        const char *o = argv[i], *v = argv[i + 1];
        if (strcmp(o, "--steps") == 0)
            steps = atoi(v);
        else if (strcmp(o, "--every") == 0)
            every = atoi(v);
        else if (strcmp(o, "--sleep-ms") == 0)
            sleep_ms = atoi(v);
        else if (strcmp(o, "--upto") == 0)
            upto = atoi(v);
        else if (strcmp(o, "--invalid-rank") == 0)
            invalid_rank = atoi(v);
        else if (strcmp(o, "--probe") == 0)
            probe = v;
        else if (strcmp(o, "--recover") == 0)
            mode = v;
        else
            usage();
    }
    if (steps < 0 || every < 1)
        usage();

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (VELOC_Init(MPI_COMM_WORLD, config) != VELOC_SUCCESS) {
        MPI_Finalize();
        return 5;
    }
    fresh();
    if (VELOC_Mem_protect(0, &step, 1, sizeof step) != VELOC_SUCCESS ||
        VELOC_Mem_protect(1, a, NA, sizeof a[0]) != VELOC_SUCCESS)
        failed("VELOC_Mem_protect");

    if (probe != NULL) {
        for (const char *p = probe; *p != '\0';) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p || (*end != ',' && *end != '\0'))
                usage();
            int got = VELOC_Restart_test("mixed", (int)v);
            if (rank == 0)
                printf("mixed: restart_test %ld = %d\n", v, got);
            p = *end == ',' ? end + 1 : end;
        }
        fflush(stdout);
    } else {
        if (!restart(upto, invalid_rank, mode)) {
            fresh();
            printf("mixed: rank %d fresh\n", rank);
            fflush(stdout);
        }
        struct timespec pause = {sleep_ms / 1000, (long)(sleep_ms % 1000) * 1000000L};
        while (step < steps) {
            if (step % every == 0)
                checkpoint();
            advance();
            if (sleep_ms > 0)
                nanosleep(&pause, NULL);
        }
        checkpoint();
        uint64_t d = fnv(fnv(FNV0, a, sizeof a), b, sizeof b);
        printf("mixed: rank %d finished step %d digest %016" PRIx64 "\n", rank, step, d);
        fflush(stdout);
    }
    if (VELOC_Finalize(1) != VELOC_SUCCESS)
        failed("VELOC_Finalize");
    MPI_Finalize();
    return 0;
}
