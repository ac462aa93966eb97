/*
 * veloc.c: VeloC's C API (veloc.h) over libcairn.
 *
 * Every VeloC checkpoint is one Cairn checkpoint written through the file API: begin is
 * cairn_start_output(CAIRN_FLAG_CHECKPOINT | CAIRN_FLAG_REGIONS), routed files are
 * cairn_route_file, end is cairn_complete_output, which stores the routed files and the
 * protected memory regions together. A restart is cairn_start_restart(CAIRN_FLAG_REGIONS),
 * which restores both, and cairn_complete_restart. One format for every checkpoint means any
 * restart can read any checkpoint, whether it holds memory, files or both.
 *
 * Memory regions are registered with Cairn as they are with VeloC, as bytes (CAIRN_BYTE,
 * count * base_size). This file keeps its own table of them too, because Cairn stores the
 * regions it protects when the checkpoint ends, while VeloC stores those registered when
 * VELOC_Checkpoint_mem is called (none if it is not): VELOC_Checkpoint_end makes Cairn's
 * table the one of VELOC_Checkpoint_mem for the time of cairn_complete_output.
 *
 *            VELOC_Checkpoint_begin                   VELOC_Checkpoint_end
 *   IDLE ----------------------------> CHECKPOINT ---------------------------> IDLE
 *     |                               _mem: the regions to store are those registered now
 *     |                               Route_file: where to write a file
 *     |
 *     |      VELOC_Restart_begin                      VELOC_Restart_end
 *     +----------------------------->  RESTART  ---------------------------> IDLE
 *                                     the files and the regions registered at begin are
 *                                     restored; Route_file: where to read a file;
 *                                     Recover_mem / _selective check the selection
 *
 * Every transition is collective and made by every process alike, so the phase is the same
 * on every process; a call that does not fit the phase fails on every process without
 * reaching Cairn.
 *
 * The file is divided into: state and errors; the region table; initialising and
 * finalising; memory registration; files; checkpoints; restarts.
 */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn_mpi.h"
#include "veloc_impl.h"

/* The API is the library's only exported symbols (build.sh hides everything else). */
#pragma GCC visibility push(default)
#include "veloc.h"
#pragma GCC visibility pop

/* ---- State and errors ------------------------------------------------------------------ */

/* Longest checkpoint name Cairn takes, plus the suffix VELOC_Init_single adds. */
#define NAME_LEN 160

struct region {
    int id;
    void *ptr;
    size_t bytes;
};

struct table {
    struct region *v;
    size_t n, cap;
};

enum phase { IDLE, CHECKPOINT, RESTART };

static struct {
    int up;              /* 0: not initialised; 1: VELOC_Init; 2: VELOC_Init_single */
    int rank;            /* rank in the communicator, or the VELOC_Init_single id */
    struct veloc_plan plan;
    enum phase phase;
    char name[NAME_LEN]; /* the checkpoint of the phase (Cairn's name) */
    int version;
    struct table regions;      /* registered; Cairn protects the same, outside _end */
    struct table saved;        /* the regions at VELOC_Checkpoint_mem */
    int mem_saved;             /* VELOC_Checkpoint_mem was called in this checkpoint */
    unsigned long changes;     /* registrations so far */
    unsigned long saved_at;    /* ... when VELOC_Checkpoint_mem was called */
    struct table restored;     /* the regions restored at VELOC_Restart_begin */
    char last[NAME_LEN];       /* the last checkpoint kept ("" if none), for _wait */
    int last_version;
} V;

/* Print why fn failed, as VeloC does, and return VELOC_FAILURE. */
static int fail(const char *fn, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (V.up == 2)
        fprintf(stderr, "veloc: process %d: %s: %s\n", V.rank, fn, msg);
    else
        fprintf(stderr, "veloc: rank %d: %s: %s\n", V.rank, fn, msg);
    return VELOC_FAILURE;
}

/* fail() with Cairn's message for code rc. */
static int cairn_fail(const char *fn, int rc)
{
    return fail(fn, "%s (%s)", cairn_last_error(), cairn_strerror(rc));
}

static int not_up(const char *fn)
{
    return fail(fn, "VeloC is not initialised: call VELOC_Init or VELOC_Init_single first");
}

/* The Cairn checkpoint name of VeloC's name: with VELOC_Init_single each process has its own
 * checkpoints, so its id is part of the name. */
static int cairn_name(const char *fn, const char *name, char *out)
{
    if (name == NULL)
        return fail(fn, "name is NULL");
    int n = V.up == 2 ? snprintf(out, NAME_LEN, "%s.p%d", name, V.rank)
                      : snprintf(out, NAME_LEN, "%s", name);
    if (n < 0 || n >= NAME_LEN)
        return fail(fn, "checkpoint name \"%s\" is too long (at most 128 characters)", name);
    return VELOC_SUCCESS;
}

/* VELOC_SUCCESS if VeloC is up and in phase `want`; else say why not. */
static int in_phase(const char *fn, enum phase want)
{
    if (!V.up)
        return not_up(fn);
    if (V.phase == want)
        return VELOC_SUCCESS;
    if (want == CHECKPOINT)
        return fail(fn, "no checkpoint is begun (call VELOC_Checkpoint_begin first)");
    if (want == RESTART)
        return fail(fn, "no restart is begun (call VELOC_Restart_begin first)");
    return fail(fn, "%s v%d is not ended yet", V.name, V.version);
}

/* The checks of a begin: no phase under way, a name for Cairn, a version >= 0. */
static int begin(const char *fn, const char *name, int version, char *cname)
{
    if (in_phase(fn, IDLE) != VELOC_SUCCESS || cairn_name(fn, name, cname) != VELOC_SUCCESS)
        return VELOC_FAILURE;
    if (version < 0)
        return fail(fn, "version %d is negative", version);
    return VELOC_SUCCESS;
}

/* ---- The region table ------------------------------------------------------------------ */

static struct region *find(const struct table *t, int id)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->v[i].id == id)
            return &t->v[i];
    return NULL;
}

static int put(struct table *t, struct region r)
{
    struct region *old = find(t, r.id);
    if (old != NULL) {
        *old = r;
        return 0;
    }
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 16;
        struct region *v = realloc(t->v, cap * sizeof *v);
        if (v == NULL)
            return -1;
        t->v = v;
        t->cap = cap;
    }
    t->v[t->n++] = r;
    return 0;
}

static void drop(struct table *t, int id)
{
    struct region *r = find(t, id);
    if (r != NULL)
        *r = t->v[--t->n];
}

static int copy(struct table *to, const struct table *from)
{
    to->n = 0;
    for (size_t i = 0; i < from->n; i++)
        if (put(to, from->v[i]) != 0)
            return -1;
    return 0;
}

static void release(struct table *t)
{
    free(t->v);
    memset(t, 0, sizeof *t);
}

/* Make Cairn protect the regions of `to` instead of those of `from`. Returns CAIRN_OK or the
 * first error. */
static int protect_instead(const struct table *from, const struct table *to)
{
    for (size_t i = 0; i < from->n; i++)
        if (find(to, from->v[i].id) == NULL)
            (void)cairn_unprotect(from->v[i].id);
    for (size_t i = 0; i < to->n; i++) {
        int rc = cairn_protect(to->v[i].id, to->v[i].ptr, to->v[i].bytes, CAIRN_BYTE);
        if (rc != CAIRN_OK)
            return rc;
    }
    return CAIRN_OK;
}

/* ---- Initialising and finalising ------------------------------------------------------- */

/* After the configuration is applied: start Cairn with init(). If the erasure coding of the
 * file cannot protect this job (one failure domain, or a different number of ranks per
 * node), start it again without; say so if the file asked for it. */
static int start(const char *fn, int (*init)(void *), void *arg)
{
    int rc = init(arg);
    if (rc == CAIRN_ERR_CONFIG && V.plan.ec_from_file &&
        strstr(cairn_last_error(), "failure domain") != NULL) {
        char why[1024];
        snprintf(why, sizeof why, "%s", cairn_last_error());
        if (cairn_config_set("redundancy.scheme", "single") != CAIRN_OK)
            return cairn_fail(fn, CAIRN_ERR_CONFIG);
        if (V.plan.ec_asked && V.rank == 0)
            fprintf(stderr, "veloc: ec_interval: erasure coding is off for this job: %s\n", why);
        rc = init(arg);
    }
    return rc == CAIRN_OK ? VELOC_SUCCESS : cairn_fail(fn, rc);
}

static int init_mpi(void *comm)
{
    return cairn_init(*(MPI_Comm *)comm, NULL);
}

static int init_solo(void *unused)
{
    (void)unused;
    return cairn_init_solo(NULL);
}

/* Print the notes of a configuration (from one process only). */
static void notes(const struct veloc_cfg *cfg)
{
    for (size_t i = 0; i < cfg->nnotes; i++)
        fprintf(stderr, "veloc: %s\n", cfg->notes[i]);
}

int VELOC_Init(MPI_Comm comm, const char *cfg_file)
{
    const char *fn = "VELOC_Init";
    if (V.up)
        return fail(fn, "VeloC is already initialised (call VELOC_Finalize first)");
    int running = 0, finished = 0;
    MPI_Initialized(&running);
    MPI_Finalized(&finished);
    if (!running || finished)
        return fail(fn, "MPI is not running: call VELOC_Init after MPI_Init and before "
                        "MPI_Finalize");
    if (comm == MPI_COMM_NULL)
        return fail(fn, "comm is MPI_COMM_NULL");
    int size = 1;
    MPI_Comm_rank(comm, &V.rank);
    MPI_Comm_size(comm, &size);

    struct veloc_cfg cfg;
    char err[1024] = "";
    int bad = veloc_cfg_read(cfg_file, &cfg, err, sizeof err) != 0 ||
              veloc_cfg_apply(&cfg, &V.plan, err, sizeof err) != 0;
    /* Every rank must take the same way out of here; the file is usually the same for all. */
    int nbad = 0;
    MPI_Allreduce(&bad, &nbad, 1, MPI_INT, MPI_SUM, comm);
    int rc = VELOC_SUCCESS;
    if (nbad > 0) {
        if (bad && (nbad < size || V.rank == 0))
            rc = fail(fn, "%s", err);
        else if (!bad)
            rc = fail(fn, "the configuration could not be read on %d other rank(s)", nbad);
        rc = VELOC_FAILURE;
    } else {
        if (V.rank == 0)
            notes(&cfg);
        rc = start(fn, init_mpi, &comm);
    }
    veloc_cfg_free(&cfg);
    V.up = rc == VELOC_SUCCESS;
    return rc;
}

int VELOC_Init_single(unsigned int id, const char *cfg_file)
{
    const char *fn = "VELOC_Init_single";
    if (V.up)
        return fail(fn, "VeloC is already initialised (call VELOC_Finalize first)");
    if (id > INT_MAX)
        return fail(fn, "id %u is too large (at most %d)", id, INT_MAX);
    V.rank = (int)id;
    V.up = 2; /* for the messages; reset on failure */
    struct veloc_cfg cfg;
    char err[1024] = "";
    int rc = VELOC_SUCCESS;
    if (veloc_cfg_read(cfg_file, &cfg, err, sizeof err) != 0 ||
        veloc_cfg_apply(&cfg, &V.plan, err, sizeof err) != 0) {
        rc = fail(fn, "%s", err);
    } else {
        notes(&cfg);
        /* A process alone is one failure domain: nothing to erasure-code across. */
        if (V.plan.ec_from_file) {
            if (cairn_config_set("redundancy.scheme", "single") != CAIRN_OK)
                rc = cairn_fail(fn, CAIRN_ERR_CONFIG);
            else if (V.plan.ec_asked)
                fprintf(stderr, "veloc: ec_interval: a process started with VELOC_Init_single "
                                "has no erasure coding; its checkpoints are stored without "
                                "it\n");
        }
        if (rc == VELOC_SUCCESS)
            rc = start(fn, init_solo, NULL);
    }
    veloc_cfg_free(&cfg);
    V.up = rc == VELOC_SUCCESS ? 2 : 0;
    return rc;
}

int VELOC_Finalize(int drain)
{
    const char *fn = "VELOC_Finalize";
    if (!V.up)
        return not_up(fn);
    /* A phase left open ends here: an unfinished checkpoint is not kept, and an unfinished
     * restart does not count against its version. */
    if (V.phase == CHECKPOINT) {
        (void)cairn_complete_output(0, NULL);
    } else if (V.phase == RESTART) {
        (void)cairn_complete_restart(1, NULL);
    }
    /* Cairn never leaves a flush half-done, so both values of drain wait for the flushes
     * already copying; [checkpoint] finalize = false keeps it from starting one. */
    (void)drain;
    int rc = cairn_finalize();
    int ret = rc == CAIRN_OK ? VELOC_SUCCESS : cairn_fail(fn, rc);
    release(&V.regions);
    release(&V.saved);
    release(&V.restored);
    memset(&V, 0, sizeof V);
    return ret;
}

/* ---- Memory registration --------------------------------------------------------------- */

int VELOC_Mem_protect(int id, void *ptr, size_t count, size_t base_size)
{
    const char *fn = "VELOC_Mem_protect";
    if (!V.up)
        return not_up(fn);
    if (id < 0)
        return fail(fn, "region id %d is negative (Cairn keeps negative ids for checkpoint "
                        "files; use ids >= 0)", id);
    if (count == 0) {
        /* VeloC: a count of 0 unregisters the region. */
        if (find(&V.regions, id) != NULL) {
            (void)cairn_unprotect(id);
            drop(&V.regions, id);
            V.changes++;
        }
        return VELOC_SUCCESS;
    }
    if (base_size == 0 || count > SIZE_MAX / base_size)
        return fail(fn, "region %d: %zu elements of %zu bytes is not a size", id, count,
                    base_size);
    if (ptr == NULL)
        return fail(fn, "region %d: ptr is NULL", id);
    struct region r = {id, ptr, count * base_size};
    int rc = cairn_protect(id, ptr, r.bytes, CAIRN_BYTE);
    if (rc != CAIRN_OK)
        return cairn_fail(fn, rc);
    if (put(&V.regions, r) != 0) {
        (void)cairn_unprotect(id);
        return fail(fn, "out of memory");
    }
    V.changes++;
    return VELOC_SUCCESS;
}

int VELOC_Mem_unprotect(int id)
{
    const char *fn = "VELOC_Mem_unprotect";
    if (!V.up)
        return not_up(fn);
    if (find(&V.regions, id) == NULL)
        return fail(fn, "region %d is not registered", id);
    (void)cairn_unprotect(id);
    drop(&V.regions, id);
    V.changes++;
    return VELOC_SUCCESS;
}

/* ---- Files ----------------------------------------------------------------------------- */

int VELOC_Route_file(const char *original, char *routed)
{
    const char *fn = "VELOC_Route_file";
    if (!V.up)
        return not_up(fn);
    if (V.phase == IDLE)
        return fail(fn, "files are routed only between VELOC_Checkpoint_begin and _end or "
                        "VELOC_Restart_begin and _end");
    if (original == NULL || routed == NULL)
        return fail(fn, "%s is NULL", original == NULL ? "original" : "routed");
    int rc = cairn_route_file(original, routed, VELOC_MAX_NAME);
    return rc == CAIRN_OK ? VELOC_SUCCESS : cairn_fail(fn, rc);
}

/* ---- Checkpoints ----------------------------------------------------------------------- */

int VELOC_Checkpoint_begin(const char *name, int version)
{
    const char *fn = "VELOC_Checkpoint_begin";
    char cname[NAME_LEN];
    if (begin(fn, name, version, cname) != VELOC_SUCCESS)
        return VELOC_FAILURE;
    int rc = cairn_start_output(cname, version, CAIRN_FLAG_CHECKPOINT | CAIRN_FLAG_REGIONS, NULL);
    if (rc != CAIRN_OK)
        return cairn_fail(fn, rc);
    V.phase = CHECKPOINT;
    memcpy(V.name, cname, NAME_LEN);
    V.version = version;
    V.mem_saved = 0;
    return VELOC_SUCCESS;
}

int VELOC_Checkpoint_mem(void)
{
    const char *fn = "VELOC_Checkpoint_mem";
    if (in_phase(fn, CHECKPOINT) != VELOC_SUCCESS)
        return VELOC_FAILURE;
    if (copy(&V.saved, &V.regions) != 0)
        return fail(fn, "out of memory");
    V.mem_saved = 1;
    V.saved_at = V.changes;
    return VELOC_SUCCESS;
}

int VELOC_Checkpoint_end(int success)
{
    const char *fn = "VELOC_Checkpoint_end";
    if (in_phase(fn, CHECKPOINT) != VELOC_SUCCESS)
        return VELOC_FAILURE;
    /* Cairn stores what it protects when the output completes: the regions of
     * VELOC_Checkpoint_mem, or none without it. */
    static const struct table none;
    const struct table *store = V.mem_saved ? &V.saved : &none;
    int swap = V.mem_saved ? V.saved_at != V.changes : V.regions.n > 0;
    int local = swap ? protect_instead(&V.regions, store) : CAIRN_OK;
    char why[1024] = "";
    if (local != CAIRN_OK)
        snprintf(why, sizeof why, "%s", cairn_last_error());
    int kept = 0;
    int rc = cairn_complete_output(success && local == CAIRN_OK, &kept);
    char err[1024] = "";
    if (rc != CAIRN_OK)
        snprintf(err, sizeof err, "%s (%s)", cairn_last_error(), cairn_strerror(rc));
    int back = swap ? protect_instead(store, &V.regions) : CAIRN_OK;
    V.phase = IDLE;
    if (rc != CAIRN_OK)
        return fail(fn, "%s", err);
    if (local != CAIRN_OK)
        return fail(fn, "%s v%d: %s", V.name, V.version, why);
    if (back != CAIRN_OK)
        return cairn_fail(fn, back);
    if (!kept)
        return fail(fn, "%s v%d was not kept: %s", V.name, V.version,
                    success ? "another process reported a failure"
                            : "this process reported a failure");
    memcpy(V.last, V.name, NAME_LEN);
    V.last_version = V.version;
    return VELOC_SUCCESS;
}

int VELOC_Checkpoint_wait(void)
{
    const char *fn = "VELOC_Checkpoint_wait";
    if (in_phase(fn, IDLE) != VELOC_SUCCESS)
        return VELOC_FAILURE;
    if (V.last[0] == '\0')
        return VELOC_SUCCESS;
    /* When every checkpoint is flushed, the last one's flush is under way (or done): wait
     * for it. Otherwise wait for the flushes the schedule started, if any: cairn_wait would
     * start a flush the schedule did not ask for. */
    int rc = V.plan.flush_each ? cairn_wait(V.last, V.last_version) : cairn_wait_flushes();
    return rc == CAIRN_OK ? VELOC_SUCCESS : cairn_fail(fn, rc);
}

int VELOC_Checkpoint(const char *name, int version)
{
    int waited = VELOC_Checkpoint_wait();
    if (VELOC_Checkpoint_begin(name, version) != VELOC_SUCCESS)
        return VELOC_FAILURE;
    int mem = VELOC_Checkpoint_mem();
    int end = VELOC_Checkpoint_end(mem == VELOC_SUCCESS);
    return waited == VELOC_SUCCESS && mem == VELOC_SUCCESS && end == VELOC_SUCCESS
               ? VELOC_SUCCESS
               : VELOC_FAILURE;
}

/* ---- Restarts -------------------------------------------------------------------------- */

int VELOC_Restart_test(const char *name, int needed_version)
{
    const char *fn = "VELOC_Restart_test";
    if (!V.up)
        return not_up(fn);
    char cname[NAME_LEN];
    if (cairn_name(fn, name, cname) != VELOC_SUCCESS)
        return VELOC_FAILURE;
    if (needed_version < 0)
        return fail(fn, "needed_version %d is negative (0: the newest version)",
                    needed_version);
    int64_t v = -1;
    int rc = needed_version == 0 ? cairn_restart_test(cname, &v)
                                 : cairn_restart_test_upto(cname, needed_version, &v);
    if (rc != CAIRN_OK)
        return cairn_fail(fn, rc);
    /* No version is an answer, not an error: nothing is printed. */
    return v < 0 || v > INT_MAX ? VELOC_FAILURE : (int)v;
}

int VELOC_Restart_begin(const char *name, int version)
{
    const char *fn = "VELOC_Restart_begin";
    char cname[NAME_LEN];
    if (begin(fn, name, version, cname) != VELOC_SUCCESS)
        return VELOC_FAILURE;
    if (copy(&V.restored, &V.regions) != 0)
        return fail(fn, "out of memory");
    /* The newest version no newer than the one asked for (the application found it with
     * VELOC_Restart_test); a damaged one falls back to an older one. */
    int64_t got = -1;
    int rc = cairn_start_restart_upto(cname, version, CAIRN_FLAG_REGIONS, &got);
    if (rc != CAIRN_OK)
        return cairn_fail(fn, rc);
    if (got < 0)
        return fail(fn, "no checkpoint of %s to restart from", cname);
    if (got != version && (V.rank == 0 || V.up == 2))
        fprintf(stderr, "veloc: %s v%d could not be restored; restarted from v%lld instead\n",
                cname, version, (long long)got);
    V.phase = RESTART;
    memcpy(V.name, cname, NAME_LEN);
    V.version = (int)got;
    return VELOC_SUCCESS;
}

static int listed(const int *ids, int length, int id)
{
    for (int i = 0; i < length; i++)
        if (ids[i] == id)
            return 1;
    return 0;
}

int VELOC_Recover_selective(int mode, int *ids, int length)
{
    const char *fn = "VELOC_Recover_selective";
    if (in_phase(fn, RESTART) != VELOC_SUCCESS)
        return VELOC_FAILURE;
    if (mode == VELOC_RECOVER_ALL)
        return VELOC_SUCCESS;
    if (mode != VELOC_RECOVER_SOME && mode != VELOC_RECOVER_REST)
        return fail(fn, "unknown mode %d (VELOC_RECOVER_ALL, _SOME or _REST)", mode);
    if (length < 0 || (length > 0 && ids == NULL))
        return fail(fn, "%d ids at %p", length, (void *)ids);
    /* Cairn restored every region registered at VELOC_Restart_begin already: a selection is
     * right only if it selects exactly those. */
    for (size_t i = 0; i < V.restored.n; i++) {
        int id = V.restored.v[i].id;
        if (listed(ids, length, id) != (mode == VELOC_RECOVER_SOME))
            return fail(fn, "region %d was restored at VELOC_Restart_begin with every region "
                            "registered then; Cairn cannot leave one out (see "
                            "docs/migrate-veloc.md)", id);
    }
    for (int i = 0; mode == VELOC_RECOVER_SOME && i < length; i++)
        if (find(&V.restored, ids[i]) == NULL)
            return fail(fn, "region %d was not registered at VELOC_Restart_begin", ids[i]);
    return VELOC_SUCCESS;
}

int VELOC_Recover_mem(void)
{
    return VELOC_Recover_selective(VELOC_RECOVER_ALL, NULL, 0);
}

int VELOC_Restart_end(int success)
{
    const char *fn = "VELOC_Restart_end";
    if (in_phase(fn, RESTART) != VELOC_SUCCESS)
        return VELOC_FAILURE;
    int all = 0;
    int rc = cairn_complete_restart(success != 0, &all);
    V.phase = IDLE;
    V.restored.n = 0;
    if (rc != CAIRN_OK)
        return cairn_fail(fn, rc);
    if (!all)
        return fail(fn, "%s v%d: %s could not restore its state; the version is passed over",
                    V.name, V.version, success ? "another process" : "this process");
    return VELOC_SUCCESS;
}

int VELOC_Restart(const char *name, int version)
{
    if (VELOC_Restart_begin(name, version) != VELOC_SUCCESS)
        return VELOC_FAILURE;
    int mem = VELOC_Recover_mem();
    int end = VELOC_Restart_end(mem == VELOC_SUCCESS);
    return mem == VELOC_SUCCESS && end == VELOC_SUCCESS ? VELOC_SUCCESS : VELOC_FAILURE;
}
