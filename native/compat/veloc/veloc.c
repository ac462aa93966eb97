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
 * Memory regions live in this file's table, each in a group: the default one
 * (VELOC_Mem_protect) or a named one (VELOC_Region_protect). A checkpoint saves the regions
 * of the group named as it is, or the default group if that one is empty, as VeloC does.
 * Cairn stores the regions it protects when the checkpoint ends, while VeloC stores those
 * selected when VELOC_Checkpoint_mem / _selective is called (none if it is not): so Cairn's
 * region table is set to that selection (as bytes, CAIRN_BYTE) just before
 * cairn_complete_output, and to the group being restored just before a restart. `cairn`
 * mirrors Cairn's table, so that only what differs is protected or unprotected again.
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
    char group[NAME_LEN]; /* VeloC's checkpoint name, or "" for the default group */
};

struct table {
    struct region *v;
    size_t n, cap;
};

enum phase { IDLE, CHECKPOINT, RESTART };

static struct {
    int up;              /* 0: not initialised; 1: VELOC_Init; 2: VELOC_Init_single */
    int rank;            /* rank in the communicator, or the VELOC_Init_single id */
    MPI_Comm comm;       /* VELOC_Init: a duplicate of its communicator, for agreements */
    struct veloc_plan plan;
    enum phase phase;
    char name[NAME_LEN]; /* the checkpoint of the phase (Cairn's name) */
    char group[NAME_LEN]; /* ... and VeloC's, which names its region group */
    int version;
    struct table regions;      /* registered, in every group */
    struct table cairn;        /* what Cairn's region table holds */
    struct table saved;        /* the regions at VELOC_Checkpoint_mem / _selective */
    int mem_saved;             /* VELOC_Checkpoint_mem was called in this checkpoint */
    struct table restored;     /* the regions restored in place at VELOC_Restart_begin */
    int single_noted;          /* the note of VELOC_Route_file's one-file rule was printed */
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

static struct region *find_in(const struct table *t, int id, const char *group)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->v[i].id == id && (group == NULL || strcmp(t->v[i].group, group) == 0))
            return &t->v[i];
    return NULL;
}

/* Region id of a table that holds one group (a selection, or Cairn's table). */
static struct region *find(const struct table *t, int id)
{
    return find_in(t, id, NULL);
}

static int put(struct table *t, struct region r)
{
    struct region *old = find_in(t, r.id, r.group);
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

static void drop(struct table *t, int id, const char *group)
{
    struct region *r = find_in(t, id, group);
    if (r != NULL)
        *r = t->v[--t->n];
}

/* The regions a checkpoint or restart of VeloC name `group` uses: its group's, or the
 * default group's if it has none. Returns 0, or -1 out of memory. */
static int selection(const char *group, struct table *out)
{
    out->n = 0;
    int named = 0;
    for (size_t i = 0; i < V.regions.n; i++)
        named |= strcmp(V.regions.v[i].group, group) == 0;
    const char *g = named ? group : "";
    for (size_t i = 0; i < V.regions.n; i++)
        if (strcmp(V.regions.v[i].group, g) == 0 && put(out, V.regions.v[i]) != 0)
            return -1;
    return 0;
}

static void release(struct table *t)
{
    free(t->v);
    memset(t, 0, sizeof *t);
}

/* Make Cairn's region table hold exactly the regions of `want`, touching only those that
 * differ. Returns CAIRN_OK or the first error (Cairn's table is then what V.cairn says). */
static int protect_as(const struct table *want)
{
    for (size_t i = 0; i < V.cairn.n;) {
        struct region *w = find(want, V.cairn.v[i].id);
        if (w == NULL || w->ptr != V.cairn.v[i].ptr || w->bytes != V.cairn.v[i].bytes) {
            (void)cairn_unprotect(V.cairn.v[i].id);
            V.cairn.v[i] = V.cairn.v[--V.cairn.n];
        } else {
            i++;
        }
    }
    for (size_t i = 0; i < want->n; i++) {
        if (find(&V.cairn, want->v[i].id) != NULL)
            continue;
        int rc = cairn_protect(want->v[i].id, want->v[i].ptr, want->v[i].bytes, CAIRN_BYTE);
        if (rc != CAIRN_OK)
            return rc;
        if (put(&V.cairn, want->v[i]) != 0) {
            (void)cairn_unprotect(want->v[i].id);
            return CAIRN_ERR_IO;
        }
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
    if (V.up && MPI_Comm_dup(comm, &V.comm) != MPI_SUCCESS) {
        (void)cairn_finalize();
        V.up = 0;
        rc = fail(fn, "MPI_Comm_dup failed");
    }
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
    if (V.up == 1)
        MPI_Comm_free(&V.comm);
    release(&V.regions);
    release(&V.cairn);
    release(&V.saved);
    release(&V.restored);
    memset(&V, 0, sizeof V);
    return ret;
}

/* ---- Memory registration --------------------------------------------------------------- */

/* Register a region in group `group` ("" for the default one). */
static int protect_in(const char *fn, int id, void *ptr, size_t count, size_t base_size,
                      const char *group)
{
    if (!V.up)
        return not_up(fn);
    if (group == NULL)
        return fail(fn, "name is NULL");
    if (strlen(group) >= NAME_LEN)
        return fail(fn, "region group name \"%.40s...\" is too long", group);
    if (id < 0)
        return fail(fn, "region id %d is negative (Cairn keeps negative ids for checkpoint "
                        "files; use ids >= 0)", id);
    if (count == 0) {
        /* VeloC: a count of 0 unregisters the region. */
        drop(&V.regions, id, group);
        return VELOC_SUCCESS;
    }
    if (base_size == 0 || count > SIZE_MAX / base_size)
        return fail(fn, "region %d: %zu elements of %zu bytes is not a size", id, count,
                    base_size);
    if (ptr == NULL)
        return fail(fn, "region %d: ptr is NULL", id);
    struct region r = {id, ptr, count * base_size, ""};
    memcpy(r.group, group, strlen(group) + 1);
    if (put(&V.regions, r) != 0)
        return fail(fn, "out of memory");
    return VELOC_SUCCESS;
}

int VELOC_Mem_protect(int id, void *ptr, size_t count, size_t base_size)
{
    return protect_in("VELOC_Mem_protect", id, ptr, count, base_size, "");
}

int VELOC_Region_protect(int id, void *ptr, size_t count, size_t base_size, const char *name)
{
    return protect_in("VELOC_Region_protect", id, ptr, count, base_size, name);
}

static int unprotect_in(const char *fn, int id, const char *group)
{
    if (!V.up)
        return not_up(fn);
    if (group == NULL)
        return fail(fn, "name is NULL");
    if (find_in(&V.regions, id, group) == NULL)
        return group[0] ? fail(fn, "region %d is not registered in group %s", id, group)
                        : fail(fn, "region %d is not registered", id);
    drop(&V.regions, id, group);
    return VELOC_SUCCESS;
}

int VELOC_Mem_unprotect(int id)
{
    return unprotect_in("VELOC_Mem_unprotect", id, "");
}

int VELOC_Region_unprotect(int id, const char *name)
{
    return unprotect_in("VELOC_Region_unprotect", id, name);
}

static int clear_in(const char *fn, const char *group)
{
    if (!V.up)
        return not_up(fn);
    if (group == NULL)
        return fail(fn, "name is NULL");
    for (size_t i = 0; i < V.regions.n;)
        if (strcmp(V.regions.v[i].group, group) == 0)
            V.regions.v[i] = V.regions.v[--V.regions.n];
        else
            i++;
    return VELOC_SUCCESS;
}

int VELOC_Mem_clear(void)
{
    return clear_in("VELOC_Mem_clear", "");
}

int VELOC_Region_clear(const char *name)
{
    return clear_in("VELOC_Region_clear", name);
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
    if (rc == CAIRN_ERR_NOT_FOUND && V.phase == RESTART) {
        /* VeloC keeps one file per checkpoint and process, whatever it was called: a name the
         * checkpoint does not know is that file, if there is exactly one. */
        int n = 0;
        char only[VELOC_MAX_NAME];
        if (cairn_restart_file_count(&n) == CAIRN_OK && n == 1 &&
            cairn_restart_file_name(0, only, sizeof only) == CAIRN_OK &&
            cairn_route_file(only, routed, VELOC_MAX_NAME) == CAIRN_OK) {
            if (!V.single_noted++)
                fprintf(stderr, "veloc: %s v%d has no file \"%s\"; its one file \"%s\" is "
                                "routed instead (one file per checkpoint and process, as in "
                                "VeloC)\n", V.name, V.version, original, only);
            return VELOC_SUCCESS;
        }
        rc = CAIRN_ERR_NOT_FOUND;
    }
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
    snprintf(V.group, sizeof V.group, "%s", name);
    V.version = version;
    V.mem_saved = 0;
    return VELOC_SUCCESS;
}

static int listed(const int *ids, int length, int id)
{
    for (int i = 0; i < length; i++)
        if (ids[i] == id)
            return 1;
    return 0;
}

int VELOC_Checkpoint_selective(int mode, int *ids, int id_count)
{
    const char *fn = "VELOC_Checkpoint_selective";
    if (in_phase(fn, CHECKPOINT) != VELOC_SUCCESS)
        return VELOC_FAILURE;
    if (mode != VELOC_CKPT_ALL && mode != VELOC_CKPT_SOME && mode != VELOC_CKPT_REST)
        return fail(fn, "unknown mode %d (VELOC_CKPT_ALL, _SOME or _REST)", mode);
    if (mode != VELOC_CKPT_ALL && (id_count < 0 || (id_count > 0 && ids == NULL)))
        return fail(fn, "%d ids at %p", id_count, (void *)ids);
    if (selection(V.group, &V.saved) != 0)
        return fail(fn, "out of memory");
    for (size_t i = 0; mode != VELOC_CKPT_ALL && i < V.saved.n;)
        if (listed(ids, id_count, V.saved.v[i].id) != (mode == VELOC_CKPT_SOME))
            V.saved.v[i] = V.saved.v[--V.saved.n];
        else
            i++;
    if (V.saved.n == 0)
        return fail(fn, "%s v%d: no registered region is selected (register regions with "
                        "VELOC_Mem_protect or VELOC_Region_protect)", V.group, V.version);
    V.mem_saved = 1;
    return VELOC_SUCCESS;
}

int VELOC_Checkpoint_mem(void)
{
    return VELOC_Checkpoint_selective(VELOC_CKPT_ALL, NULL, 0);
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
    int local = protect_as(store);
    char why[1024] = "";
    if (local != CAIRN_OK)
        snprintf(why, sizeof why, "%s", cairn_last_error());
    int kept = 0;
    int rc = cairn_complete_output(success && local == CAIRN_OK, &kept);
    char err[1024] = "";
    if (rc != CAIRN_OK)
        snprintf(err, sizeof err, "%s (%s)", cairn_last_error(), cairn_strerror(rc));
    V.phase = IDLE;
    if (rc != CAIRN_OK)
        return fail(fn, "%s", err);
    if (local != CAIRN_OK)
        return fail(fn, "%s v%d: %s", V.name, V.version, why);
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

int VELOC_Checkpoint_finished(void)
{
    const char *fn = "VELOC_Checkpoint_finished";
    if (in_phase(fn, IDLE) != VELOC_SUCCESS)
        return VELOC_FAILURE;
    int busy = 0;
    int rc = cairn_flushing(&busy);
    if (rc != CAIRN_OK)
        return cairn_fail(fn, rc);
    return busy ? VELOC_FAILURE : VELOC_SUCCESS;
}

int VELOC_Cleanup(const char *name)
{
    const char *fn = "VELOC_Cleanup";
    char cname[NAME_LEN];
    if (in_phase(fn, IDLE) != VELOC_SUCCESS || cairn_name(fn, name, cname) != VELOC_SUCCESS)
        return VELOC_FAILURE;
    int rc = cairn_evict(cname, NULL);
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
    if (selection(name, &V.restored) != 0)
        return fail(fn, "out of memory");
    int rc = protect_as(&V.restored);
    if (rc != CAIRN_OK)
        return cairn_fail(fn, rc);
    /* The newest version no newer than the one asked for (the application found it with
     * VELOC_Restart_test); a damaged one falls back to an older one. The regions registered
     * now are restored in place when they are exactly the checkpoint's (the usual case, with
     * no copy); stored regions that are not registered are held for VELOC_Recover_size and a
     * later registration. */
    int64_t got = -1;
    const int flags = CAIRN_FLAG_REGIONS | CAIRN_FLAG_HOLD;
    rc = cairn_start_restart_upto(cname, version, flags, &got);
    /* A registered region the checkpoint does not hold, or holds at another size: VeloC
     * restores what is stored into what is registered. Every region is then held, and
     * VELOC_Recover_mem copies. Every process takes the same way (Cairn fails everywhere
     * alike, with MISMATCH where the cause is and PEER elsewhere). */
    int again = rc == CAIRN_ERR_MISMATCH || rc == CAIRN_ERR_PEER, any = again;
    if (V.up == 1)
        MPI_Allreduce(&again, &any, 1, MPI_INT, MPI_MIN, V.comm);
    if (any) {
        static const struct table none;
        V.restored.n = 0;
        rc = protect_as(&none);
        if (rc == CAIRN_OK)
            rc = cairn_start_restart_upto(cname, version, flags, &got);
    }
    if (rc != CAIRN_OK)
        return cairn_fail(fn, rc);
    if (got < 0)
        return fail(fn, "no checkpoint of %s to restart from", cname);
    if (got != version && (V.rank == 0 || V.up == 2))
        fprintf(stderr, "veloc: %s v%d could not be restored; restarted from v%lld instead\n",
                cname, version, (long long)got);
    V.phase = RESTART;
    memcpy(V.name, cname, NAME_LEN);
    snprintf(V.group, sizeof V.group, "%s", name);
    V.version = (int)got;
    return VELOC_SUCCESS;
}

int VELOC_Recover_size(int id)
{
    const char *fn = "VELOC_Recover_size";
    if (in_phase(fn, RESTART) != VELOC_SUCCESS)
        return VELOC_FAILURE;
    uint64_t n = 0;
    int rc = cairn_loaded_size(id, &n);
    if (rc == CAIRN_ERR_NOT_FOUND)
        return VELOC_FAILURE; /* an answer, not an error: nothing is printed */
    if (rc != CAIRN_OK)
        return cairn_fail(fn, rc);
    if (n > INT_MAX)
        return fail(fn, "region %d is %llu bytes, more than an int can say", id,
                    (unsigned long long)n);
    return (int)n;
}

/* Fill the selected regions of the group that were registered after VELOC_Restart_begin
 * from the regions Cairn held for them; a region the checkpoint does not hold is left as it
 * is, as in VeloC. */
static int recover_late(const char *fn, int mode, const int *ids, int length)
{
    struct table now = {0};
    if (selection(V.group, &now) != 0)
        return fail(fn, "out of memory");
    int ret = VELOC_SUCCESS;
    for (size_t i = 0; i < now.n && ret == VELOC_SUCCESS; i++) {
        const struct region *r = &now.v[i];
        if (find(&V.restored, r->id) != NULL ||
            (mode != VELOC_RECOVER_ALL && listed(ids, length, r->id) != (mode == VELOC_RECOVER_SOME)))
            continue;
        uint64_t n = 0;
        int rc = cairn_loaded_size(r->id, &n);
        if (rc == CAIRN_ERR_NOT_FOUND)
            continue;
        if (rc == CAIRN_OK && n > r->bytes)
            ret = fail(fn, "region %d is %zu bytes, too small for the %llu stored", r->id,
                       r->bytes, (unsigned long long)n);
        else if (rc != CAIRN_OK || (rc = cairn_loaded_copy(r->id, r->ptr, r->bytes)) != CAIRN_OK)
            ret = cairn_fail(fn, rc);
    }
    release(&now);
    return ret;
}

int VELOC_Recover_selective(int mode, int *ids, int length)
{
    const char *fn = "VELOC_Recover_selective";
    if (in_phase(fn, RESTART) != VELOC_SUCCESS)
        return VELOC_FAILURE;
    if (mode == VELOC_RECOVER_ALL)
        return recover_late(fn, mode, ids, length);
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
    return recover_late(fn, mode, ids, length);
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
