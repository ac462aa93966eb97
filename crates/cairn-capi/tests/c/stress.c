/*
 * stress.c -- checkpoint/restart workload for Cairn's fault-injection tests.
 *
 * Every rank protects R regions of different types and sizes, writes a long series of
 * checkpoints, and on start restores the newest one and checks it bit for bit. A test harness
 * kills ranks, deletes or corrupts stored data, starts the program again and reads its output.
 *
 * The content of every region is a pure function of (version, rank, region, index), so any
 * restored state can be checked without keeping a copy:
 *   region 0   int64, 1 element: the version itself;
 *   region 1   doubles, M MiB (--mib, may be 0): values in [0, 1) drawn from splitmix64;
 *              with --changing P, only P of every 100 stretches of 4096 elements change
 *              from version to version (the others keep the values of "version 0"), so
 *              incremental checkpoints have unchanged blocks to skip;
 *   region 2   bytes, 12345 + rank elements (an odd size, different on every rank);
 *   region 3+  cycling through the other dtypes, odd element counts that depend on the rank.
 *
 * The file is divided into: the region table and fill function; error reporting; restore and
 * verify; the checkpoint loop in main.
 *
 * Usage: stress [--name NAME] [--versions V] [--mib M] [--regions R] [--config PATH]
 *               [--changing P] [--verify-only] [--solo] [--until-exit MS] [--then-hang]
 *   Under mpirun every rank takes part; with --solo the program makes no MPI call at all
 *   (cairn_init_solo) and runs as a plain process. Checkpoints are versions restored+1 .. V,
 *   starting at 1 when nothing is stored. --verify-only restores, verifies and exits.
 *   After each checkpoint the program asks cairn_test about the versions it wrote that it has
 *   not yet seen durable (the newest four) and reports those that are.
 *   --until-exit MS: each step "computes" for MS milliseconds and asks cairn_should_exit; a
 *   step checkpoints when cairn_need_checkpoint says so, and when cairn_should_exit says
 *   stop, the program takes a last checkpoint and finalizes (which makes it durable).
 *   --then-hang: the last checkpoint (V) is followed by no Cairn call at all, not even
 *   cairn_test: the program prints "hanging" and waits to be killed, as a job that dies right
 *   after a checkpoint call returned.
 *
 * Output (stdout, flushed after every line):
 *   stress: rank <r> restored v<v> ok
 *   stress: rank <r> restored v<v> MISMATCH region <i> index <j>
 *   stress: rank <r> checkpoint v<v> done
 *   stress: rank <r> durable v<v>
 *   stress: rank <r> exiting after v<v>         (--until-exit, when cairn_should_exit said so)
 *   stress: none                              (--verify-only, nothing stored; rank 0 only)
 *   stress: rank <r> hanging after v<v>       (--then-hang)
 * On a Cairn error, stderr gets "stress: rank <r> <call> failed (<code>): <last error>".
 *
 * Exit codes: 0 success, 2 bad arguments or out of memory, 4 verification mismatch (all ranks
 * agree on it under MPI), 5 a Cairn call failed (immediate exit(5), no MPI_Finalize).
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <time.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn_mpi.h"

/* ---- Regions and their contents ------------------------------------------------------------ */

struct region {
    cairn_dtype dtype;
    size_t count;     /* elements */
    size_t elem_size; /* bytes per element */
    void *data;
};

static size_t dtype_size(cairn_dtype t)
{
    switch (t) {
    case CAIRN_BYTE: case CAIRN_INT8:                   return 1;
    case CAIRN_INT16:                                   return 2;
    case CAIRN_INT32: case CAIRN_UINT32: case CAIRN_FLOAT: return 4;
    case CAIRN_INT64: case CAIRN_UINT64: case CAIRN_DOUBLE: return 8;
    }
    return 0;
}

/* Dtypes for regions 3, 4, ...: everything not already used by regions 0-2 first. */
static const cairn_dtype extra_dtypes[] = {
    CAIRN_INT32, CAIRN_FLOAT, CAIRN_INT16, CAIRN_UINT64, CAIRN_INT8, CAIRN_UINT32,
    CAIRN_INT64, CAIRN_DOUBLE, CAIRN_BYTE,
};

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* Percent of region 1's stretches that change with every version (--changing). */
static long long changing = 100;

/* Seed shared by all elements of one region of one version on one rank. */
static uint64_t region_seed(int64_t version, int rank, int region)
{
    uint64_t h = splitmix64((uint64_t)version);
    h = splitmix64(h ^ ((uint64_t)(uint32_t)rank << 20));
    return splitmix64(h ^ (uint64_t)region);
}

/* Write element `index` of a region into `out` (elem_size bytes). Region 0 holds the version;
 * floating-point elements are finite values in [0, 1) so every bit pattern is an ordinary
 * number; integer elements take the low bytes of the hash. */
static void fill_elem(const struct region *g, int region, uint64_t seed, int64_t version,
                      size_t index, void *out)
{
    if (region == 0) {
        memcpy(out, &version, sizeof version);
        return;
    }
    uint64_t h = splitmix64(seed + index);
    if (g->dtype == CAIRN_DOUBLE) {
        double d = (double)(h >> 11) * 0x1.0p-53;
        memcpy(out, &d, sizeof d);
    } else if (g->dtype == CAIRN_FLOAT) {
        float f = (float)(h >> 40) * 0x1.0p-24f;
        memcpy(out, &f, sizeof f);
    } else {
        memcpy(out, &h, g->elem_size); /* little-endian low bytes; the same on any host */
    }
}

/* The seed of element `index`: the version's, or for a stretch of region 1 that --changing
 * keeps fixed, version 0's. */
static uint64_t elem_seed(int region, size_t index, uint64_t seed, uint64_t fixed)
{
    return (region == 1 && (long long)((index / 4096) % 100) >= changing) ? fixed : seed;
}

static void fill_region(struct region *g, int region, int64_t version, int rank)
{
    uint64_t seed = region_seed(version, rank, region), fixed = region_seed(0, rank, region);
    unsigned char *p = g->data;
    for (size_t i = 0; i < g->count; i++)
        fill_elem(g, region, elem_seed(region, i, seed, fixed), version, i, p + i * g->elem_size);
}

/* Index of the first element that differs from the fill for `version`, or -1 if none does. */
static long long first_mismatch(const struct region *g, int region, int64_t version, int rank)
{
    uint64_t seed = region_seed(version, rank, region), fixed = region_seed(0, rank, region);
    const unsigned char *p = g->data;
    unsigned char want[8];
    for (size_t i = 0; i < g->count; i++) {
        fill_elem(g, region, elem_seed(region, i, seed, fixed), version, i, want);
        if (memcmp(p + i * g->elem_size, want, g->elem_size) != 0)
            return (long long)i;
    }
    return -1;
}

/* ---- Errors --------------------------------------------------------------------------------- */

static int rank;

static void check(int rc, const char *call)
{
    if (rc == CAIRN_OK)
        return;
    fprintf(stderr, "stress: rank %d %s failed (%d): %s\n", rank, call, rc, cairn_last_error());
    fflush(stderr);
    fflush(stdout);
    exit(5);
}

static void usage(const char *msg)
{
    fprintf(stderr, "stress: %s\nusage: stress [--name NAME] [--versions V] [--mib M] "
                    "[--regions R] [--config PATH] [--changing P] [--verify-only] [--solo] "
                    "[--until-exit MS]\n", msg);
    exit(2);
}

static long long parse_count(const char *opt, const char *text, long long min)
{
    char *end;
    long long v = strtoll(text, &end, 10);
    if (*text == '\0' || *end != '\0' || v < min) {
        fprintf(stderr, "stress: %s needs an integer >= %lld, got '%s'\n", opt, min, text);
        exit(2);
    }
    return v;
}

/* ---- Restore and verify --------------------------------------------------------------------- */

/* Restore the newest checkpoint into the regions and check it. Returns the restored version, or
 * -1 when nothing is stored; exits with 4 (on every rank) if any rank finds a mismatch. */
static int64_t restore_and_verify(const char *name, struct region *regs, int nregs, int solo)
{
    int64_t newest = -1;
    check(cairn_restart_test(name, &newest), "cairn_restart_test");
    if (newest < 0)
        return -1;
    check(cairn_restart(name, newest), "cairn_restart");

    /* cairn_restart may fall back to an older version if `newest` turns out to be damaged, and
     * it does not say which one it used; region 0 does. A value outside [0, newest] is itself
     * a mismatch. */
    int64_t got;
    memcpy(&got, regs[0].data, sizeof got);
    int bad_region = -1;
    long long bad_index = -1;
    if (got < 0 || got > newest) {
        bad_region = 0;
        bad_index = 0;
        got = newest;
    }
    for (int i = 1; i < nregs && bad_region < 0; i++) {
        long long j = first_mismatch(&regs[i], i, got, rank);
        if (j >= 0) {
            bad_region = i;
            bad_index = j;
        }
    }
    /* All ranks must have restored the same version. */
    if (!solo) {
        int64_t lo, hi;
        MPI_Allreduce(&got, &lo, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(&got, &hi, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
        if (bad_region < 0 && lo != hi) {
            bad_region = 0;
            bad_index = 0;
        }
    }

    if (bad_region < 0)
        printf("stress: rank %d restored v%" PRId64 " ok\n", rank, got);
    else
        printf("stress: rank %d restored v%" PRId64 " MISMATCH region %d index %lld\n", rank, got,
               bad_region, bad_index);
    fflush(stdout);

    /* Agree on the outcome so that either every rank continues or every rank exits 4. */
    int any_bad = bad_region >= 0;
    if (!solo) {
        int mine = any_bad;
        MPI_Allreduce(&mine, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    }
    if (any_bad) {
        /* Best effort: the mismatch is what the caller must see, so finalize errors are only
         * reported, and the exit code stays 4. */
        int rc = cairn_finalize();
        if (rc != CAIRN_OK)
            fprintf(stderr, "stress: rank %d cairn_finalize failed (%d): %s\n", rank, rc,
                    cairn_last_error());
        if (!solo)
            MPI_Finalize();
        exit(4);
    }
    return got;
}

/* ---- Checkpoints and their durability ------------------------------------------------------ */

/* Versions below this one were seen durable (or are too old to ask about). */
static int64_t durable_floor = 1;

static void take_checkpoint(const char *name, struct region *regs, int nregs, int64_t v,
                            int ask)
{
    for (int i = 0; i < nregs; i++)
        fill_region(&regs[i], i, v, rank);
    check(cairn_checkpoint(name, v), "cairn_checkpoint");
    printf("stress: rank %d checkpoint v%" PRId64 " done\n", rank, v);
    if (!ask) {
        fflush(stdout);
        return;
    }
    /* cairn_test is collective: every rank asks about the same versions. */
    if (durable_floor < v - 3)
        durable_floor = v - 3;
    for (int64_t w = v; w >= durable_floor; w--) {
        int state = CAIRN_STATE_NONE;
        check(cairn_test(name, w, &state), "cairn_test");
        if (state == CAIRN_STATE_DURABLE) {
            printf("stress: rank %d durable v%" PRId64 "\n", rank, w);
            durable_floor = w + 1;
            break;
        }
    }
    fflush(stdout);
}

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* ---- Main ----------------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    const char *name = "stress", *config = NULL;
    long long versions = 1000, mib = 4, nregs = 3;
    int verify_only = 0, solo = 0, then_hang = 0;
    long long until_exit = -1;

    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i];
        if (strcmp(opt, "--verify-only") == 0) { verify_only = 1; continue; }
        if (strcmp(opt, "--solo") == 0)        { solo = 1; continue; }
        if (strcmp(opt, "--then-hang") == 0)   { then_hang = 1; continue; }
        if (i + 1 >= argc)
            usage("missing value or unknown option");
        const char *val = argv[++i];
        if (strcmp(opt, "--name") == 0)          name = val;
        else if (strcmp(opt, "--config") == 0)   config = val;
        else if (strcmp(opt, "--versions") == 0) versions = parse_count(opt, val, 0);
        else if (strcmp(opt, "--mib") == 0)      mib = parse_count(opt, val, 0);
        else if (strcmp(opt, "--regions") == 0)  nregs = parse_count(opt, val, 1);
        else if (strcmp(opt, "--until-exit") == 0) until_exit = parse_count(opt, val, 0);
        else if (strcmp(opt, "--changing") == 0) changing = parse_count(opt, val, 0);
        else                                     usage("unknown option");
    }
    if (nregs > 1000)
        usage("--regions must be at most 1000");

    if (solo) {
        rank = 0;
        check(cairn_init_solo(config), "cairn_init_solo");
    } else {
        MPI_Init(&argc, &argv);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        check(cairn_init(MPI_COMM_WORLD, config), "cairn_init");
    }

    struct region *regs = calloc((size_t)nregs, sizeof *regs);
    if (!regs)
        usage("out of memory");
    for (int i = 0; i < nregs; i++) {
        struct region *g = &regs[i];
        if (i == 0) {
            g->dtype = CAIRN_INT64;
            g->count = 1;
        } else if (i == 1) {
            g->dtype = CAIRN_DOUBLE;
            g->count = (size_t)mib * 1024 * 1024 / sizeof(double);
        } else if (i == 2) {
            g->dtype = CAIRN_BYTE;
            g->count = 12345 + (size_t)rank;
        } else {
            size_t k = (size_t)(i - 3);
            g->dtype = extra_dtypes[k % (sizeof extra_dtypes / sizeof extra_dtypes[0])];
            g->count = 1001 + 37 * k + 3 * (size_t)rank;
        }
        g->elem_size = dtype_size(g->dtype);
        /* At least one element's worth, so that a zero-length region still has a valid pointer. */
        g->data = malloc(g->count ? g->count * g->elem_size : g->elem_size);
        if (!g->data) {
            fprintf(stderr, "stress: rank %d out of memory for region %d\n", rank, i);
            exit(2);
        }
        memset(g->data, 0, g->count ? g->count * g->elem_size : g->elem_size);
        check(cairn_protect(i, g->data, g->count, g->dtype), "cairn_protect");
    }

    int64_t restored = restore_and_verify(name, regs, (int)nregs, solo);
    if (verify_only) {
        if (restored < 0 && rank == 0) {
            printf("stress: none\n");
            fflush(stdout);
        }
    } else if (until_exit >= 0) {
        int64_t v = restored < 0 ? 1 : restored + 1;
        for (;; v++) {
            sleep_ms((long)until_exit);
            int stop = 0, due = 0;
            check(cairn_should_exit(&stop), "cairn_should_exit");
            if (stop) {
                take_checkpoint(name, regs, (int)nregs, v, 1);
                printf("stress: rank %d exiting after v%" PRId64 "\n", rank, v);
                fflush(stdout);
                break;
            }
            check(cairn_need_checkpoint(&due), "cairn_need_checkpoint");
            if (due)
                take_checkpoint(name, regs, (int)nregs, v, 1);
        }
    } else {
        for (int64_t v = restored < 0 ? 1 : restored + 1; v <= versions; v++)
            take_checkpoint(name, regs, (int)nregs, v, !(then_hang && v == versions));
        if (then_hang) {
            printf("stress: rank %d hanging after v%lld\n", rank, versions);
            fflush(stdout);
            for (;;)
                sleep_ms(1000);
        }
    }

    check(cairn_finalize(), "cairn_finalize");
    if (!solo)
        MPI_Finalize();
    for (int i = 0; i < nregs; i++)
        free(regs[i].data);
    free(regs);
    return 0;
}
