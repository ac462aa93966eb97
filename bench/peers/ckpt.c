/*
 * ckpt.c -- one checkpoint/restart workload, compiled once per checkpoint system.
 *
 *   -DBACKEND_PLAIN  each rank fwrite()s its buffer to a file and renames it; restart freads it
 *   -DBACKEND_SCR    SCR_Start_output / SCR_Route_file / fwrite / SCR_Complete_output, and
 *                    SCR_Have_restart / SCR_Start_restart / fread / SCR_Complete_restart
 *   -DBACKEND_VELOC  VELOC_Mem_protect + VELOC_Checkpoint, VELOC_Restart_test + VELOC_Restart
 *   -DBACKEND_FTI    FTI_Protect + FTI_Checkpoint(id, level), FTI_Status + FTI_Recover
 *   -DBACKEND_CAIRN  Cairn's native API: cairn_protect + cairn_checkpoint, cairn_resume
 *   -DBACKEND_CAIRNFILE  Cairn's native file API, the work SCR's calls ask for:
 *                    cairn_start_output / cairn_route_file / fwrite / cairn_complete_output,
 *                    and cairn_have_restart / cairn_start_restart / fread / cairn_complete_restart
 *
 * The SCR, VeloC and FTI variants build unchanged against the peer's own library or against
 * Cairn's compatibility library of the same name (libscr / libveloc / libfti): only the -I
 * and -L paths differ (bench/peers/run.sh does both).
 *
 *   ckpt checkpoint [options]   take K checkpoints of every rank's buffer
 *   ckpt restart [options]      restore the newest one (it must be version K) and verify it
 *
 * Options: --mib M (MiB per rank, default 256), --k K (checkpoints, default 5), --dir DIR
 * (where PLAIN writes and SCR routes its files; default "."), --config FILE (VeloC and FTI
 * configuration file), --level L (FTI checkpoint level, default 1).
 *
 * Each rank holds a header (magic, rank, version, size) and a buffer of M MiB of
 * pseudo-random 64-bit words (splitmix64 of rank and index: no zero blocks, not
 * compressible). Before checkpoint v, one word in every 4 KiB page is changed (a different
 * word for each v), so every checkpoint holds different data. Each checkpoint is timed as:
 * barrier, clock, the call(s), clock; the time is the slowest rank's. A restart is timed the
 * same way from before the library's initialisation (where SCR and FTI do their restart
 * work) until the data is back in the buffer; the PLAIN restart is the fread alone. The
 * restored buffer is then compared word by word with the expected contents of version K:
 * any difference (or a restore of another version) prints the first bad word and exits 1.
 *
 * Rank 0 prints machine-readable lines on stdout:
 *   RESULT checkpoint <v> <seconds>
 *   RESULT restart <version> <seconds> init=<seconds> restore=<seconds>
 *   VERIFY ok <ranks> <bytes per rank>
 * Exit codes: 0 success, 1 a call failed or the data did not verify, 2 usage.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(BACKEND_SCR)
#include <scr.h>
#define BACKEND "scr"
#elif defined(BACKEND_VELOC)
#include <veloc.h>
#define BACKEND "veloc"
#elif defined(BACKEND_FTI)
#include <fti.h>
#define BACKEND "fti"
#elif defined(BACKEND_CAIRN)
#include <cairn_mpi.h>
#define BACKEND "cairn"
#elif defined(BACKEND_CAIRNFILE)
#include <cairn_mpi.h>
#define BACKEND "cairn-file"
#elif defined(BACKEND_PLAIN)
#define BACKEND "plain"
#else
#error "define one of BACKEND_PLAIN, BACKEND_SCR, BACKEND_VELOC, BACKEND_FTI, BACKEND_CAIRN, BACKEND_CAIRNFILE"
#endif

#define MAGIC 0x43414952504545ULL /* "CAIRPEE" */
#define PAGE_WORDS 512            /* 4 KiB of uint64_t */
#define CKPT_NAME "bench"

struct header {
    uint64_t magic;
    int64_t version;
    int32_t rank;
    int32_t nranks;
    uint64_t nwords;
};

static int rank, nranks;
static struct header hdr;
static uint64_t *buf;
static uint64_t nwords;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ckpt[" BACKEND "] rank %d: ", rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

static inline uint64_t mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

static inline uint64_t base_word(uint64_t j) { return mix(((uint64_t)rank << 40) ^ j) | 1; }
/* the word of each page that checkpoint v changes, and what it is xor-ed with */
static inline uint64_t changed_slot(int64_t v) { return ((uint64_t)v * 97) % PAGE_WORDS; }
static inline uint64_t delta(int64_t v, uint64_t j) { return mix(((uint64_t)v << 48) ^ j ^ 0x5555); }

static void fill(void)
{
    for (uint64_t j = 0; j < nwords; j++)
        buf[j] = base_word(j);
}

static void advance(int64_t v)
{
    for (uint64_t j = changed_slot(v); j < nwords; j += PAGE_WORDS)
        buf[j] ^= delta(v, j);
    hdr.version = v;
}

static void verify(int64_t v)
{
    if (hdr.magic != MAGIC || hdr.rank != rank || hdr.nranks != nranks || hdr.nwords != nwords ||
        hdr.version != v)
        die("restored header is wrong: magic %#" PRIx64 " rank %d/%d words %" PRIu64
            " version %" PRId64 " (expected rank %d/%d words %" PRIu64 " version %" PRId64 ")",
            hdr.magic, hdr.rank, hdr.nranks, hdr.nwords, hdr.version, rank, nranks, nwords, v);
    for (uint64_t j = 0; j < nwords; j++) {
        uint64_t e = base_word(j);
        uint64_t slot = j % PAGE_WORDS;
        for (int64_t c = 1; c <= v; c++)
            if (slot == changed_slot(c))
                e ^= delta(c, j);
        if (buf[j] != e)
            die("restored data differs at word %" PRIu64 " (byte %" PRIu64 "): %#" PRIx64
                " != expected %#" PRIx64, j, j * 8, buf[j], e);
    }
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double slowest(double t)
{
    double m;
    MPI_Allreduce(&t, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return m;
}

#if defined(BACKEND_PLAIN) || defined(BACKEND_SCR) || defined(BACKEND_CAIRNFILE)
/* header and buffer into one file with stdio; 1 on success */
static int write_file(const char *path)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    int ok = fwrite(&hdr, sizeof hdr, 1, f) == 1 && fwrite(buf, 8, nwords, f) == nwords;
    return (fclose(f) == 0) && ok;
}

static int read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    int ok = fread(&hdr, sizeof hdr, 1, f) == 1 && fread(buf, 8, nwords, f) == nwords;
    fclose(f);
    return ok;
}
#endif

static const char *dir = ".", *config = NULL;
static int level = 1;

#if defined(BACKEND_SCR) || defined(BACKEND_CAIRNFILE)
/* the file of dataset `name` this rank writes; dies if the path does not fit */
static void dataset_file(char *file, size_t len, const char *name)
{
#if defined(BACKEND_SCR)
    const char *p = getenv("SCR_PREFIX");
#else
    const char *p = NULL;
#endif
    if (snprintf(file, len, "%s/%s/rank_%d.dat", p ? p : dir, name, rank) >= (int)len)
        die("path too long");
}
#endif

/* ------------------------------------------------------------------ initialisation */

static void lib_init(void)
{
#if defined(BACKEND_SCR)
    if (SCR_Init() != SCR_SUCCESS)
        die("SCR_Init failed");
#elif defined(BACKEND_VELOC)
    if (VELOC_Init(MPI_COMM_WORLD, config) != VELOC_SUCCESS)
        die("VELOC_Init(%s) failed", config);
    if (VELOC_Mem_protect(0, &hdr, 1, sizeof hdr) != VELOC_SUCCESS ||
        VELOC_Mem_protect(1, buf, nwords, sizeof *buf) != VELOC_SUCCESS)
        die("VELOC_Mem_protect failed");
#elif defined(BACKEND_FTI)
    if (FTI_Init(config, MPI_COMM_WORLD) != FTI_SCES)
        die("FTI_Init(%s) failed", config);
    if (FTI_Protect(0, &hdr, sizeof hdr, FTI_CHAR) != FTI_SCES ||
        FTI_Protect(1, buf, (int64_t)nwords, FTI_ULNG) != FTI_SCES)
        die("FTI_Protect failed");
#elif defined(BACKEND_CAIRN) || defined(BACKEND_CAIRNFILE)
    int rc = cairn_init(MPI_COMM_WORLD, NULL);
    if (rc != CAIRN_OK)
        die("cairn_init: %s", cairn_last_error());
#endif
#if defined(BACKEND_CAIRN)
    if (cairn_protect(0, &hdr, sizeof hdr, CAIRN_BYTE) != CAIRN_OK ||
        cairn_protect(1, buf, nwords, CAIRN_UINT64) != CAIRN_OK)
        die("cairn_protect: %s", cairn_last_error());
#endif
}

static void lib_finalize(int after_checkpoints)
{
    (void)after_checkpoints;
#if defined(BACKEND_SCR)
    if (SCR_Finalize() != SCR_SUCCESS)
        die("SCR_Finalize failed");
#elif defined(BACKEND_VELOC)
    if (VELOC_Finalize(1) != VELOC_SUCCESS)
        die("VELOC_Finalize failed");
#elif defined(BACKEND_FTI)
    /* After the checkpoints the job ends as a failed one would: FTI_Finalize deletes the
     * run's checkpoints (or, with Keep_last_ckpt, moves the last one to level 4), and the
     * restart must find them in the node-local levels. */
    if (!after_checkpoints && FTI_Finalize() != FTI_SCES)
        die("FTI_Finalize failed");
#elif defined(BACKEND_CAIRN) || defined(BACKEND_CAIRNFILE)
    if (cairn_finalize() != CAIRN_OK)
        die("cairn_finalize: %s", cairn_last_error());
#endif
}

#if !defined(BACKEND_PLAIN)
/* a restart's initialisation (part of what it pays: SCR and FTI restore there); its time */
static double timed_init(void)
{
    double t0 = now();
    lib_init();
    return now() - t0;
}
#endif

/* ------------------------------------------------------------------ one checkpoint */

static void take_checkpoint(int64_t v)
{
    (void)v;
#if defined(BACKEND_PLAIN)
    char tmp[4096], path[4096];
    snprintf(tmp, sizeof tmp, "%s/plain.%d.tmp", dir, rank);
    snprintf(path, sizeof path, "%s/plain.%d", dir, rank);
    if (!write_file(tmp))
        die("writing %s: %s", tmp, strerror(errno));
    if (rename(tmp, path) != 0)
        die("rename %s: %s", tmp, strerror(errno));
#elif defined(BACKEND_SCR)
    char name[64], file[SCR_MAX_FILENAME], path[SCR_MAX_FILENAME];
    snprintf(name, sizeof name, "ckpt.%" PRId64, v);
    if (SCR_Start_output(name, SCR_FLAG_CHECKPOINT) != SCR_SUCCESS)
        die("SCR_Start_output(%s) failed", name);
    dataset_file(file, sizeof file, name);
    if (SCR_Route_file(file, path) != SCR_SUCCESS)
        die("SCR_Route_file(%s) failed", file);
    int ok = write_file(path);
    if (!ok)
        fprintf(stderr, "ckpt[scr] rank %d: writing %s: %s\n", rank, path, strerror(errno));
    if (SCR_Complete_output(ok) != SCR_SUCCESS)
        die("SCR_Complete_output(%d) failed", ok);
#elif defined(BACKEND_VELOC)
    if (VELOC_Checkpoint(CKPT_NAME, (int)v) != VELOC_SUCCESS)
        die("VELOC_Checkpoint(%" PRId64 ") failed", v);
#elif defined(BACKEND_FTI)
    int rc = FTI_Checkpoint((int)v, level);
    if (rc != FTI_DONE && rc != FTI_SCES)
        die("FTI_Checkpoint(%" PRId64 ", %d) returned %d", v, level, rc);
#elif defined(BACKEND_CAIRN)
    if (cairn_checkpoint(CKPT_NAME, v) != CAIRN_OK)
        die("cairn_checkpoint(%" PRId64 "): %s", v, cairn_last_error());
#elif defined(BACKEND_CAIRNFILE)
    char name[64], file[4096], path[4096];
    snprintf(name, sizeof name, "ckpt.%" PRId64, v);
    if (cairn_start_output(CKPT_NAME, v, CAIRN_FLAG_CHECKPOINT, name) != CAIRN_OK)
        die("cairn_start_output(%" PRId64 "): %s", v, cairn_last_error());
    dataset_file(file, sizeof file, name);
    if (cairn_route_file(file, path, sizeof path) != CAIRN_OK)
        die("cairn_route_file(%s): %s", file, cairn_last_error());
    int ok = write_file(path), kept = 0;
    if (!ok)
        fprintf(stderr, "ckpt[cairn-file] rank %d: writing %s: %s\n", rank, path, strerror(errno));
    if (cairn_complete_output(ok, &kept) != CAIRN_OK || !kept)
        die("cairn_complete_output(%d): %s", ok, cairn_last_error());
#endif
}

/* ------------------------------------------------------------------ restart */

/* Restore the newest checkpoint into hdr/buf; returns the version the library says it
 * restored (PLAIN and SCR: read from the data). *t_init gets the time spent initialising. */
static int64_t restore(double *t_init)
{
    *t_init = 0;
#if defined(BACKEND_PLAIN)
    char path[4096];
    snprintf(path, sizeof path, "%s/plain.%d", dir, rank);
    if (!read_file(path))
        die("reading %s: %s", path, strerror(errno));
    return hdr.version;
#elif defined(BACKEND_SCR)
    *t_init = timed_init();
    int have = 0;
    char name[SCR_MAX_FILENAME], file[SCR_MAX_FILENAME], path[SCR_MAX_FILENAME];
    if (SCR_Have_restart(&have, name) != SCR_SUCCESS)
        die("SCR_Have_restart failed");
    if (!have)
        die("SCR_Have_restart: no checkpoint to restart from");
    if (SCR_Start_restart(name) != SCR_SUCCESS)
        die("SCR_Start_restart(%s) failed", name);
    dataset_file(file, sizeof file, name);
    int ok = SCR_Route_file(file, path) == SCR_SUCCESS && read_file(path);
    if (!ok)
        fprintf(stderr, "ckpt[scr] rank %d: cannot read %s (routed from %s)\n", rank, path, file);
    if (SCR_Complete_restart(ok) != SCR_SUCCESS)
        die("SCR_Complete_restart(%d) failed", ok);
    int64_t v = -1;
    if (sscanf(name, "ckpt.%" SCNd64, &v) != 1)
        die("unexpected dataset name %s", name);
    return v;
#elif defined(BACKEND_VELOC)
    *t_init = timed_init();
    int v = VELOC_Restart_test(CKPT_NAME, 0);
    if (v < 0)
        die("VELOC_Restart_test: no checkpoint (%d)", v);
    if (VELOC_Restart(CKPT_NAME, v) != VELOC_SUCCESS)
        die("VELOC_Restart(%d) failed", v);
    return v;
#elif defined(BACKEND_FTI)
    *t_init = timed_init();
    if (FTI_Status() == 0)
        die("FTI_Status() is 0: no checkpoint to recover");
    if (FTI_Recover() != FTI_SCES)
        die("FTI_Recover failed");
    return hdr.version;
#elif defined(BACKEND_CAIRN)
    *t_init = timed_init();
    int64_t v = -1;
    if (cairn_resume(CKPT_NAME, &v) != CAIRN_OK)
        die("cairn_resume: %s", cairn_last_error());
    if (v < 0)
        die("cairn_resume: no checkpoint");
    return v;
#elif defined(BACKEND_CAIRNFILE)
    *t_init = timed_init();
    int64_t v = -1;
    char name[64], file[4096], path[4096];
    if (cairn_have_restart(CKPT_NAME, &v) != CAIRN_OK)
        die("cairn_have_restart: %s", cairn_last_error());
    if (v < 0)
        die("cairn_have_restart: no checkpoint to restart from");
    if (cairn_start_restart(CKPT_NAME, 0, &v) != CAIRN_OK || v < 0)
        die("cairn_start_restart: %s", cairn_last_error());
    snprintf(name, sizeof name, "ckpt.%" PRId64, v);
    dataset_file(file, sizeof file, name);
    int ok = cairn_route_file(file, path, sizeof path) == CAIRN_OK && read_file(path);
    if (!ok)
        fprintf(stderr, "ckpt[cairn-file] rank %d: cannot read %s (routed from %s)\n", rank, path,
                file);
    int all = 0;
    if (cairn_complete_restart(ok, &all) != CAIRN_OK || !all)
        die("cairn_complete_restart(%d): %s", ok, cairn_last_error());
    return v;
#endif
}

static void usage(void)
{
    if (rank == 0)
        fprintf(stderr, "usage: ckpt checkpoint|restart [--mib M] [--k K] [--dir DIR] "
                        "[--config FILE] [--level L]\n");
    MPI_Finalize();
    exit(2);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (argc < 2)
        usage();
    int restart = 0;
    if (strcmp(argv[1], "restart") == 0)
        restart = 1;
    else if (strcmp(argv[1], "checkpoint") != 0)
        usage();
    long mib = 256, k = 5;
    for (int i = 2; i < argc; i++) {
        if (i + 1 >= argc)
            usage();
        if (!strcmp(argv[i], "--mib"))
            mib = atol(argv[++i]);
        else if (!strcmp(argv[i], "--k"))
            k = atol(argv[++i]);
        else if (!strcmp(argv[i], "--dir"))
            dir = argv[++i];
        else if (!strcmp(argv[i], "--config"))
            config = argv[++i];
        else if (!strcmp(argv[i], "--level"))
            level = atoi(argv[++i]);
        else
            usage();
    }
    if (mib < 1 || k < 1 || level < 1 || level > 4)
        usage();
#if defined(BACKEND_VELOC) || defined(BACKEND_FTI)
    if (!config)
        die("--config FILE is required");
#endif

    nwords = (uint64_t)mib * 1024 * 1024 / 8;
    if (posix_memalign((void **)&buf, 4096, nwords * 8) != 0)
        die("cannot allocate %ld MiB", mib);
    hdr = (struct header){.magic = MAGIC, .version = 0, .rank = rank, .nranks = nranks,
                          .nwords = nwords};

    if (!restart) {
        fill();
        lib_init();
        for (int64_t v = 1; v <= k; v++) {
            advance(v);
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = now();
            take_checkpoint(v);
            double t = slowest(now() - t0);
            if (rank == 0) {
                printf("RESULT checkpoint %" PRId64 " %.6f\n", v, t);
                fflush(stdout);
            }
        }
#if defined(BACKEND_VELOC)
        if (VELOC_Checkpoint_wait() != VELOC_SUCCESS)
            die("VELOC_Checkpoint_wait failed");
#endif
        lib_finalize(1);
    } else {
        /* the buffer's pages exist before the clock starts, as in the checkpoint run */
        memset(buf, 0, nwords * 8);
        memset(&hdr, 0, sizeof hdr);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = now(), t_init;
        int64_t v = restore(&t_init);
        double t1 = now();
        double t = slowest(t1 - t0), ti = slowest(t_init);
        double tr = slowest(t1 - t0 - t_init);
        if (rank == 0) {
            printf("RESULT restart %" PRId64 " %.6f init=%.6f restore=%.6f\n", v, t, ti, tr);
            fflush(stdout);
        }
        if (v != k)
            die("restored version %" PRId64 ", expected the newest, %ld", v, k);
        verify(k);
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) {
            printf("VERIFY ok %d %" PRIu64 "\n", nranks, nwords * 8);
            fflush(stdout);
        }
#if !defined(BACKEND_PLAIN)
        lib_finalize(0);
#endif
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
