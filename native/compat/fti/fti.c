/*
 * fti.c: FTI's API (fti.h) over Cairn's C API (cairn_mpi.h).
 *
 * One run of the library is the time between FTI_Init and FTI_Finalize:
 *
 *            FTI_Init                     FTI_Recover (or the first FTI_Snapshot)
 *   DOWN ------------------> UP, status 1|2 -----------------------------------> UP, status 0
 *    ^   (status 0: nothing                 |                                        |
 *    |    to recover)                       |                                        |
 *    +-------------------- FTI_Finalize ----+----------------------------------------+
 *
 * FTI_Init reads the configuration (config.c), starts Cairn, and fixes FTI_Status: whether a
 * checkpoint of FTI_CKPT_NAME can be restored by every rank and was not left by a run that
 * ended with FTI_Finalize. FTI deletes a finished run's checkpoints (unless Keep_last_ckpt),
 * so that the next run starts afresh, and so does FTI_Finalize here (cairn_delete, newest
 * first). It also stores a small record, the checkpoint FTI_END_NAME holding the newest
 * version and Keep_last_ckpt, so that a later FTI_Init that finds the record at least as new
 * as the newest checkpoint knows the run finished even where a deletion failed, and versions
 * stay above every one a previous run used. In every state the protected regions belong to Cairn's region table; FTI's
 * checkpoint ids are the application's business, and Cairn's versions are counted here,
 * always above every version found on the tiers, so a new run never competes with an old one.
 *
 * The file is divided into: state and error reporting; data types; FTI_Init and FTI_Status;
 * FTI_Protect; FTI_Checkpoint and FTI_Recover; FTI_Snapshot; FTI_Finalize.
 *
 * Errors: collective calls fail on every rank together (Cairn agrees on every outcome, and
 * this file agrees on its own local checks before any collective step), and one rank prints
 * the message: the lowest rank whose own step failed. No function aborts, exits or calls
 * MPI_Abort.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The declarations of fti.h are the library's exported symbols. */
#pragma GCC visibility push(default)
#include "fti.h"
#pragma GCC visibility pop

#include "compat.h"

MPI_Comm FTI_COMM_WORLD = MPI_COMM_WORLD;

/* ---- State and errors -------------------------------------------------------------------- */

/* The first user type handle; below it are FTI's basic types. */
#define USER_TYPES (FTI_LDBE + 1)
/* Marks the end-of-run record. */
#define END_MAGIC INT64_C(0x4654492d656e6421) /* "FTI-end!" */

static struct {
    int up;                  /* between FTI_Init and FTI_Finalize */
    int own_world;           /* FTI_COMM_WORLD is a duplicate made here */
    MPI_Comm comm;           /* this library's own duplicate, for its agreements */
    int rank, size;
    struct fti_config cfg;
    int redundant;           /* Cairn's scheme protects against lost nodes */
    const char *scheme_why;  /* the setting that chose the scheme */
    int status;              /* FTI_Status() */
    int64_t restart_version; /* what FTI_Recover restores; -1: nothing */
    int64_t version;         /* newest version of FTI_CKPT_NAME known; -1: none */
    int promoted[5];         /* a level 2/3 checkpoint was made durable instead (noted once) */
    int *ids;                /* ids of the protected regions */
    size_t nids;
    size_t *type_size;       /* FTI_InitType handles USER_TYPES.. */
    size_t ntypes;
    double t0;               /* FTI_Snapshot: start of its clock */
    long calls, next_sync;   /* calls so far, and the call of the next agreement on the time */
    long gap, sync_call;     /* calls between agreements, and the call of the last one */
    double sync_time;        /* the time agreed on then */
    long long ticks[5];      /* intervals of each level passed when last checked */
} st;

/* A failure: say why on stderr ("fti: rank <r>: ...", the rank in MPI_COMM_WORLD while MPI
 * runs) and return FTI_NSCS. The line is written at once, so the lines of ranks sharing a
 * terminal do not interleave. */
static int fail(const char *fmt, ...)
{
    char line[5120];
    int inited = 0, finalized = 0, rank = -1;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (inited && !finalized)
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int head = rank < 0 ? snprintf(line, sizeof line, "fti: ")
                        : snprintf(line, sizeof line, "fti: rank %d: ", rank);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line + head, sizeof line - (size_t)head - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)head + (n < 0 ? 0 : (size_t)n);
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    line[len] = '\n';
    line[len + 1] = '\0';
    fputs(line, stderr);
    fflush(stderr);
    return FTI_NSCS;
}

/* Collective over comm: the lowest rank whose `failed` is set, or -1 if none is. */
static int first_failing(MPI_Comm comm, int rank, int size, int failed)
{
    int mine = failed ? rank : size, lowest = size;
    MPI_Allreduce(&mine, &lowest, 1, MPI_INT, MPI_MIN, comm);
    return lowest < size ? lowest : -1;
}

/* A Cairn call `rc` of a collective step failed (on every rank): the lowest rank that has its
 * own message, rather than "failed on another rank", prints it. Collective. */
static int cairn_failed(int rc, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    int who = first_failing(st.comm, st.rank, st.size, rc != CAIRN_ERR_PEER);
    if (who == st.rank || (who < 0 && st.rank == 0))
        fail("%s: %s: %s", what, cairn_strerror(rc), cairn_last_error());
    return FTI_NSCS;
}

/* ---- Data types -------------------------------------------------------------------------- */

/* Cairn's element type for a C integer type of `size` bytes, signed or not; bytes when Cairn
 * has none of that width and signedness. */
#define INT_DTYPE(size, is_signed)                                                        \
    ((size) == 2 ? CAIRN_INT16                                                            \
     : (size) == 4 ? ((is_signed) ? CAIRN_INT32 : CAIRN_UINT32)                           \
     : (size) == 8 ? ((is_signed) ? CAIRN_INT64 : CAIRN_UINT64) : CAIRN_BYTE)

static const struct {
    cairn_dtype dtype;
    size_t size;
} basic[USER_TYPES] = {
    [FTI_CHAR] = {CAIRN_BYTE, sizeof(char)},
    [FTI_SHRT] = {INT_DTYPE(sizeof(short), 1), sizeof(short)},
    [FTI_INTG] = {INT_DTYPE(sizeof(int), 1), sizeof(int)},
    [FTI_LONG] = {INT_DTYPE(sizeof(long), 1), sizeof(long)},
    [FTI_UCHR] = {CAIRN_BYTE, sizeof(unsigned char)},
    /* Cairn has no unsigned 16-bit type; the signed one stores the same bits. */
    [FTI_USHT] = {INT_DTYPE(sizeof(unsigned short), 1), sizeof(unsigned short)},
    [FTI_UINT] = {INT_DTYPE(sizeof(unsigned int), 0), sizeof(unsigned int)},
    [FTI_ULNG] = {INT_DTYPE(sizeof(unsigned long), 0), sizeof(unsigned long)},
    [FTI_SFLT] = {sizeof(float) == 4 ? CAIRN_FLOAT : CAIRN_BYTE, sizeof(float)},
    [FTI_DBLE] = {sizeof(double) == 8 ? CAIRN_DOUBLE : CAIRN_BYTE, sizeof(double)},
    [FTI_LDBE] = {CAIRN_BYTE, sizeof(long double)},
};

fti_id_t(FTI_InitType)(int size)
{
    if (!st.up)
        return fail("FTI_InitType: call FTI_Init first");
    if (size <= 0)
        return fail("FTI_InitType: a type needs a size of at least 1 byte, not %d", size);
    if (st.ntypes >= (size_t)(INT32_MAX - USER_TYPES))
        return fail("FTI_InitType: too many types");
    size_t *grown = realloc(st.type_size, (st.ntypes + 1) * sizeof *grown);
    if (!grown)
        return fail("FTI_InitType: out of memory");
    st.type_size = grown;
    st.type_size[st.ntypes] = (size_t)size;
    return (fti_id_t)(USER_TYPES + st.ntypes++);
}

int cairn_fti_init_type_ptr(fti_id_t *type, int size)
{
    if (!type)
        return fail("FTI_InitType: the type pointer is NULL");
    fti_id_t t = (FTI_InitType)(size);
    if (t == FTI_NSCS)
        return FTI_NSCS;
    *type = t;
    return FTI_SCES;
}

/* Start FTI_Snapshot's clock: after FTI_Init and after a recovery. */
static void restart_clock(void)
{
    st.t0 = MPI_Wtime();
    st.calls = st.sync_call = 0;
    st.next_sync = st.gap = 1;
    st.sync_time = 0;
    memset(st.ticks, 0, sizeof st.ticks);
}

/* ---- FTI_Init and FTI_Status ------------------------------------------------------------- */

static void release(void)
{
    fti_config_free(&st.cfg);
    free(st.ids);
    free(st.type_size);
    if (st.comm != MPI_COMM_NULL)
        MPI_Comm_free(&st.comm);
    int own_world = st.own_world;
    MPI_Comm world = FTI_COMM_WORLD;
    memset(&st, 0, sizeof st);
    st.comm = MPI_COMM_NULL;
    st.own_world = own_world;
    FTI_COMM_WORLD = world;
}

/* Collective: what the tiers hold. Sets the newest version, the status and what FTI_Recover
 * restores. */
static int find_checkpoints(void)
{
    int64_t newest = -1, ended = -1;
    int rc = cairn_restart_test(FTI_CKPT_NAME, &newest);
    if (rc != CAIRN_OK)
        return cairn_failed(rc, "FTI_Init: looking for checkpoints");
    rc = cairn_restart_test(FTI_END_NAME, &ended);
    if (rc != CAIRN_OK)
        return cairn_failed(rc, "FTI_Init: looking for the end of the previous run");
    int64_t record[3] = {0, -1, 0}; /* magic, newest version then, Keep_last_ckpt */
    if (ended >= 0) {
        rc = cairn_protect(0, record, 3, CAIRN_INT64);
        if (rc == CAIRN_OK) {
            rc = cairn_restart(FTI_END_NAME, ended);
            if (rc != CAIRN_OK) {
                /* Without the record, a checkpoint found is taken for an unfinished run's. */
                cairn_failed(rc, "FTI_Init: reading the end of the previous run (ignored)");
                record[0] = 0;
            }
        }
        cairn_unprotect(0);
    }
    int finished = record[0] == END_MAGIC && record[1] >= newest;
    st.version = newest > record[1] ? newest : record[1];
    if (newest < 0 || (finished && !record[2])) {
        st.status = 0;
        st.restart_version = -1;
    } else {
        st.status = finished ? 2 : 1;
        st.restart_version = newest;
    }
    return FTI_SCES;
}

int FTI_Init(const char *configFile, MPI_Comm globalComm)
{
    if (st.up)
        return fail("FTI_Init: FTI is already initialised (call FTI_Finalize first)");
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (!inited || finalized)
        return fail("FTI_Init: MPI is not running: call FTI_Init after MPI_Init and before "
                    "MPI_Finalize");
    if (globalComm == MPI_COMM_NULL)
        return fail("FTI_Init: the communicator is MPI_COMM_NULL");
    st.comm = MPI_COMM_NULL;
    if (MPI_Comm_dup(globalComm, &st.comm) != MPI_SUCCESS)
        return fail("FTI_Init: MPI_Comm_dup failed");
    MPI_Comm_rank(st.comm, &st.rank);
    MPI_Comm_size(st.comm, &st.size);

    /* The file is read by every rank; the lowest rank that cannot read it says why. */
    char err[4608] = "";
    int bad = 0;
    if (configFile)
        bad = fti_config_read(configFile, &st.cfg, err, sizeof err) != 0;
    else
        fti_config_default(&st.cfg);
    int who = first_failing(st.comm, st.rank, st.size, bad);
    if (who < 0) {
        bad = fti_config_apply(&st.cfg, st.comm, st.rank, err, sizeof err) != 0;
        who = first_failing(st.comm, st.rank, st.size, bad);
    }
    if (who >= 0) {
        if (who == st.rank)
            fail("FTI_Init: %s", err);
        release();
        return FTI_NSCS;
    }

    const char *why;
    const char *scheme = fti_config_scheme(&st.cfg, &why);
    int rc = cairn_init(globalComm, NULL);
    if (rc != CAIRN_OK) {
        cairn_failed(rc, "FTI_Init: starting Cairn with the settings of %s (redundancy scheme "
                         "%s from %s)", st.cfg.path, scheme, why);
        release();
        return FTI_NSCS;
    }
    st.redundant = strcmp(scheme, "single") != 0;
    st.scheme_why = why;
    if (find_checkpoints() != FTI_SCES) {
        cairn_finalize();
        release();
        return FTI_NSCS;
    }

    if (st.own_world && FTI_COMM_WORLD != MPI_COMM_NULL)
        MPI_Comm_free(&FTI_COMM_WORLD);
    st.own_world = MPI_Comm_dup(globalComm, &FTI_COMM_WORLD) == MPI_SUCCESS;
    if (!st.own_world)
        FTI_COMM_WORLD = globalComm;
    st.up = 1;
    restart_clock();
    return FTI_SCES;
}

int FTI_Status(void)
{
    return st.up ? st.status : 0;
}

/* ---- FTI_Protect ------------------------------------------------------------------------- */

int FTI_Protect(int id, void *ptr, int64_t count, fti_id_t type)
{
    if (!st.up)
        return fail("FTI_Protect(id %d): call FTI_Init first", id);
    if (count < 0)
        return fail("FTI_Protect(id %d): the count %" PRId64 " is negative", id, count);
    cairn_dtype dtype = CAIRN_BYTE;
    size_t size;
    if (type >= 0 && type < USER_TYPES) {
        dtype = basic[type].dtype;
        size = basic[type].size;
    } else if (type >= USER_TYPES && (size_t)(type - USER_TYPES) < st.ntypes) {
        size = st.type_size[type - USER_TYPES];
    } else {
        return fail("FTI_Protect(id %d): unknown type %d (use FTI_CHAR ... FTI_LDBE or a "
                    "type from FTI_InitType)", id, type);
    }
    /* Bytes are counted in bytes, typed elements in elements. */
    uint64_t n = (uint64_t)count;
    if (dtype == CAIRN_BYTE) {
        if (n > UINTPTR_MAX / size)
            return fail("FTI_Protect(id %d): %" PRId64 " elements of %zu bytes is too large",
                        id, count, size);
        n *= size;
    }
    if (n > UINTPTR_MAX)
        return fail("FTI_Protect(id %d): %" PRId64 " elements is too large", id, count);
    int rc = cairn_protect(id, ptr, (uintptr_t)n, dtype);
    if (rc != CAIRN_OK)
        return fail("FTI_Protect(id %d): %s", id, cairn_last_error());
    for (size_t i = 0; i < st.nids; i++)
        if (st.ids[i] == id)
            return FTI_SCES;
    int *grown = realloc(st.ids, (st.nids + 1) * sizeof *grown);
    if (!grown) {
        cairn_unprotect(id);
        return fail("FTI_Protect(id %d): out of memory", id);
    }
    st.ids = grown;
    st.ids[st.nids++] = id;
    return FTI_SCES;
}

/* ---- FTI_Checkpoint and FTI_Recover ------------------------------------------------------ */

/* Collective: write the next version at `level` (1..4). */
static int checkpoint(int level)
{
    int64_t v = st.version + 1;
    int rc = cairn_checkpoint(FTI_CKPT_NAME, v);
    if (rc != CAIRN_OK)
        return cairn_failed(rc, "FTI_Checkpoint: level %d checkpoint (version %" PRId64 ")",
                            level, v);
    st.version = v;
    int durable = level == 4;
    if (level > 1 && level < 4 && !st.redundant) {
        /* Never less protection than asked for: without a scheme, the global tier. */
        durable = 1;
        if (!st.promoted[level] && st.rank == 0)
            fail("level %d checkpoints are made durable on the global tier, as level 4: "
                 "Cairn's redundancy scheme is single (%s)", level, st.scheme_why);
        st.promoted[level] = 1;
    }
    if (durable) {
        rc = cairn_wait(FTI_CKPT_NAME, v);
        if (rc != CAIRN_OK)
            return cairn_failed(rc, "FTI_Checkpoint: level %d checkpoint (version %" PRId64
                                ") is stored on the node-local tier but could not be made "
                                "durable", level, v);
    }
    return FTI_DONE;
}

int FTI_Checkpoint(int id, int level)
{
    (void)id; /* the application's own numbering; Cairn's versions are counted here */
    if (!st.up)
        return fail("FTI_Checkpoint: call FTI_Init first");
    if (level < 1 || level > 4)
        return fail("FTI_Checkpoint(id %d): level %d is not one of 1, 2, 3, 4", id, level);
    return checkpoint(level);
}

int FTI_Recover(void)
{
    if (!st.up)
        return fail("FTI_Recover: call FTI_Init first");
    if (st.restart_version < 0)
        return fail("FTI_Recover: there is no checkpoint to recover (FTI_Status() is 0)");
    int rc = cairn_restart(FTI_CKPT_NAME, st.restart_version);
    if (rc != CAIRN_OK)
        return cairn_failed(rc, "FTI_Recover: restoring version %" PRId64,
                            st.restart_version);
    st.status = 0;
    st.restart_version = -1;
    restart_clock();
    return FTI_SCES;
}

/* ---- FTI_Snapshot ------------------------------------------------------------------------ */

/* Collective: the highest level whose interval has passed since it was last due, or 0. The
 * ranks agree on the time (the latest clock) every so often: about ten times per shortest
 * interval, at most every Max_sync_intv calls; every input of that choice is agreed, so all
 * ranks check at the same calls. */
static int level_due(void)
{
    if (st.cfg.interval[1] <= 0 && st.cfg.interval[2] <= 0 && st.cfg.interval[3] <= 0 &&
        st.cfg.interval[4] <= 0)
        return 0;
    st.calls++;
    if (st.calls < st.next_sync)
        return 0;
    double mine = MPI_Wtime() - st.t0, now = mine;
    MPI_Allreduce(&mine, &now, 1, MPI_DOUBLE, MPI_MAX, st.comm);
    int level = 0;
    double shortest = 0;
    for (int l = 1; l <= 4; l++) {
        double iv = st.cfg.interval[l];
        if (iv <= 0)
            continue;
        if (shortest == 0 || iv < shortest)
            shortest = iv;
        long long passed = (long long)(now / iv);
        if (passed > st.ticks[l]) {
            st.ticks[l] = passed;
            level = l;
        }
    }
    /* The next agreement: the gap at most doubles, so that one quick call (the first, right
     * after FTI_Init) cannot set it too wide. */
    double per_call = (now - st.sync_time) / (double)(st.calls - st.sync_call);
    double gap = 2.0 * (double)st.gap;
    if (per_call > 0 && shortest / 10 / per_call < gap)
        gap = shortest / 10 / per_call;
    if (gap > st.cfg.max_sync)
        gap = st.cfg.max_sync;
    st.gap = gap < 1 ? 1 : (long)gap;
    st.sync_time = now;
    st.sync_call = st.calls;
    st.next_sync = st.calls + st.gap;
    return level;
}

int FTI_Snapshot(void)
{
    if (!st.up)
        return fail("FTI_Snapshot: call FTI_Init first");
    if (st.status != 0)
        return FTI_Recover();
    int level = level_due();
    return level == 0 ? FTI_SCES : checkpoint(level);
}

/* ---- FTI_Finalize ------------------------------------------------------------------------ */

/* Collective: delete every restorable version of `name` no newer than `upto`, newest first
 * (so no incremental checkpoint outlives its base). */
static int delete_upto(const char *name, int64_t upto)
{
    for (;;) {
        int64_t v = -1;
        int rc = cairn_restart_test_upto(name, upto, &v);
        if (rc == CAIRN_OK && v >= 0)
            rc = cairn_delete(name, v);
        if (rc != CAIRN_OK)
            return rc;
        if (v < 0)
            return CAIRN_OK;
        upto = v - 1;
    }
}

/* Collective: store the end-of-run record and make it durable. */
static int record_end(void)
{
    for (size_t i = 0; i < st.nids; i++)
        cairn_unprotect(st.ids[i]);
    st.nids = 0;
    int64_t record[3] = {END_MAGIC, st.version, st.cfg.keep_last};
    int rc = cairn_protect(0, record, 3, CAIRN_INT64);
    if (rc == CAIRN_OK)
        rc = cairn_checkpoint(FTI_END_NAME, st.version);
    if (rc == CAIRN_OK)
        rc = cairn_wait(FTI_END_NAME, st.version);
    cairn_unprotect(0);
    if (rc != CAIRN_OK)
        return cairn_failed(rc, "FTI_Finalize: recording the end of the run (the next run may "
                                "recover this run's last checkpoint)");
    /* The records of earlier runs, then (as FTI does) this run's checkpoints unless
     * Keep_last_ckpt asks for the last one to stay or Keep_L4_ckpt for every level-4 one. */
    rc = delete_upto(FTI_END_NAME, st.version - 1);
    if (rc == CAIRN_OK && !st.cfg.keep_last && !st.cfg.keep_l4)
        rc = delete_upto(FTI_CKPT_NAME, INT64_MAX);
    if (rc != CAIRN_OK)
        return cairn_failed(rc, "FTI_Finalize: deleting the run's checkpoints");
    return FTI_SCES;
}

int FTI_Finalize(void)
{
    if (!st.up)
        return fail("FTI_Finalize: call FTI_Init first");
    int result = st.version >= 0 ? record_end() : FTI_SCES;
    int rc = cairn_finalize();
    if (rc != CAIRN_OK)
        result = cairn_failed(rc, "FTI_Finalize");
    release();
    return result;
}
