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
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>
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
/* Cairn's name for the table of FTI_setIDFromString's names, stored when it changes. */
#define FTI_NAMES_NAME "fti.names"
/* Marks the end-of-run record. */
#define END_MAGIC INT64_C(0x4654492d656e6421) /* "FTI-end!" */

/* A protected variable. */
struct var {
    int id;
    void *ptr;
    int64_t count;
    fti_id_t type;
    size_t bytes;
};

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
    int64_t last;            /* the checkpoint taken or recovered last in this run; -1: none */
    int promoted[5];         /* a level 2/3 checkpoint was made durable instead (noted once) */
    int config_file;         /* FTI_Init was given a file (whose [restart] Failure is kept) */
    int loading_names;       /* FTI_Init is reading the names (before st.up) */
    struct var *vars;        /* the protected variables */
    size_t nvars;
    int loaded;              /* FTI_RecoverVarInit read the checkpoint (cairn_load) */
    char **names;            /* FTI_setIDFromString: names[id] */
    size_t nnames;
    int names_dirty;         /* names changed since they were last stored */
    int icp;                 /* 0: none, 1: FTI_InitICP active, 2: inactive */
    int icp_level, icp_id;
    struct var *icp_vars;    /* copies made by FTI_AddVarICP */
    size_t nicp;
    unsigned char *staged;   /* FTI_SendFile: FTI_SI_* of each request */
    int nstaged;
    size_t *type_size;       /* FTI_InitType handles USER_TYPES.. */
    size_t ntypes;
    double t0;               /* FTI_Snapshot: start of its clock */
    long calls, next_sync;   /* calls so far, and the call of the next agreement on the time */
    long gap, sync_call;     /* calls between agreements, and the call of the last one */
    double sync_time;        /* the time agreed on then */
    long long ticks[5];      /* intervals of each level passed when last checked */
} st;

static struct var *find_var(int id);
static int protect_vars(void);
static void unprotect_vars(void);

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

/* One of FTI's information lines, as FTI prints them at Verbosity 2 and below: rank 0, on
 * standard output. Programs and test scripts written for FTI read them. */
static void info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void info(const char *fmt, ...)
{
    if (st.cfg.verbosity > 2 || st.rank != 0)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    printf("[ FTI  Information ] : %s \n", msg);
    fflush(stdout);
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

/* ---- The configuration file's [restart] Failure ----------------------------------------- */

/* Rank 0 sets [restart] Failure to `value` in the configuration file, as FTI does (1 once a
 * checkpoint exists, 2 when the last one is kept at the end, 0 otherwise), so that FTI's own
 * scripts, which read it back, see what they expect. A failure to write is only reported. */
static void set_failure(int value)
{
    if (st.rank != 0 || !st.config_file || st.cfg.failure == value)
        return;
    char err[4608];
    if (fti_config_set_failure(st.cfg.path, value, err, sizeof err) != 0)
        fail("%s (the next run finds its checkpoints on Cairn's tiers all the same)", err);
    else
        st.cfg.failure = value;
}

/* ---- Names of variables ------------------------------------------------------------------- */

/* The names as one buffer: each name and its NUL, in id order. */
static char *names_blob(size_t *len)
{
    size_t n = 0;
    for (size_t i = 0; i < st.nnames; i++)
        n += strlen(st.names[i]) + 1;
    char *b = malloc(n ? n : 1);
    if (!b)
        return NULL;
    size_t at = 0;
    for (size_t i = 0; i < st.nnames; i++) {
        size_t l = strlen(st.names[i]) + 1;
        memcpy(b + at, st.names[i], l);
        at += l;
    }
    *len = n;
    return b;
}

/* Collective: checkpoint `name` v`version` holding `count` elements of `dtype` at buf alone
 * (region 0), and make it durable; the variables are protected again afterwards. */
static int store_alone(const char *name, int64_t version, void *buf, size_t count,
                       cairn_dtype dtype)
{
    unprotect_vars();
    int rc = cairn_protect(0, buf, count, dtype);
    if (rc == CAIRN_OK)
        rc = cairn_checkpoint(name, version);
    if (rc == CAIRN_OK)
        rc = cairn_wait(name, version);
    cairn_unprotect(0);
    int back = protect_vars();
    return rc != CAIRN_OK ? rc : back;
}

/* Collective: store the names with checkpoint `version`, if they changed. */
static int store_names(int64_t version)
{
    int dirty = st.names_dirty, any = 0;
    MPI_Allreduce(&dirty, &any, 1, MPI_INT, MPI_MAX, st.comm);
    if (!any)
        return FTI_SCES;
    size_t len = 0;
    char *blob = names_blob(&len);
    int rc = blob ? store_alone(FTI_NAMES_NAME, version, blob, len, CAIRN_BYTE) : CAIRN_ERR_IO;
    free(blob);
    if (rc != CAIRN_OK)
        return cairn_failed(rc, "FTI_Checkpoint: storing the names of FTI_setIDFromString");
    st.names_dirty = 0;
    return FTI_SCES;
}

/* Collective, at FTI_Init before anything is protected: the names stored with the checkpoint
 * a restart will recover. */
static int load_names(int64_t upto)
{
    int64_t v = -1;
    int rc = cairn_restart_test_upto(FTI_NAMES_NAME, upto, &v);
    if (rc != CAIRN_OK || v < 0)
        return rc == CAIRN_OK ? FTI_SCES : cairn_failed(rc, "FTI_Init: looking for names");
    uint64_t len = 0;
    rc = cairn_stored_size(FTI_NAMES_NAME, v, 0, &len);
    char *blob = rc == CAIRN_OK && len < (64u << 20) ? malloc(len + 1) : NULL;
    int ok = blob != NULL;
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, st.comm);
    if (!all) {
        free(blob);
        return fail("FTI_Init: the names of FTI_setIDFromString could not be read");
    }
    rc = cairn_protect(0, blob, len, CAIRN_BYTE);
    if (rc == CAIRN_OK)
        rc = cairn_restart(FTI_NAMES_NAME, v);
    cairn_unprotect(0);
    if (rc != CAIRN_OK) {
        free(blob);
        return cairn_failed(rc, "FTI_Init: reading the names of FTI_setIDFromString");
    }
    blob[len] = '\0';
    for (size_t at = 0; at < len; at += strlen(blob + at) + 1)
        if (FTI_setIDFromString(blob + at) < 0) {
            free(blob);
            return FTI_NSCS;
        }
    free(blob);
    st.names_dirty = 0;
    return FTI_SCES;
}

int FTI_setIDFromString(const char *name)
{
    if (!st.up && !st.loading_names)
        return fail("FTI_setIDFromString: call FTI_Init first");
    if (!name)
        return fail("FTI_setIDFromString: the name is NULL");
    int id = FTI_getIDFromString(name);
    if (id >= 0)
        return id;
    char **grown = realloc(st.names, (st.nnames + 1) * sizeof *grown);
    char *copy = strdup(name);
    if (!grown || !copy) {
        free(copy);
        if (grown)
            st.names = grown;
        return fail("FTI_setIDFromString: out of memory");
    }
    st.names = grown;
    st.names[st.nnames] = copy;
    st.names_dirty = 1;
    return (int)st.nnames++;
}

int FTI_getIDFromString(const char *name)
{
    for (size_t i = 0; name && i < st.nnames; i++)
        if (strcmp(st.names[i], name) == 0)
            return (int)i;
    return -1;
}

/* ---- FTI_Init and FTI_Status ------------------------------------------------------------- */

static void release(void)
{
    fti_config_free(&st.cfg);
    free(st.vars);
    for (size_t i = 0; i < st.nnames; i++)
        free(st.names[i]);
    free(st.names);
    for (size_t i = 0; i < st.nicp; i++)
        free(st.icp_vars[i].ptr);
    free(st.icp_vars);
    free(st.staged);
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
    /* Initialised already: FTI starts over with the new file, keeping what is stored (the
     * variables are protected again, as after FTI_Finalize, which is not called). */
    if (st.up) {
        int rc = cairn_finalize();
        release();
        if (rc != CAIRN_OK && rc != CAIRN_ERR_PEER)
            return cairn_failed(rc, "FTI_Init: ending the earlier initialisation");
    }
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
    st.config_file = configFile != NULL;
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
    /* Partner copies for level 2 need two failure domains; a job on one (and without a
     * level-2 or -3 schedule) goes on without them, and level 2 becomes durable instead. */
    if (rc == CAIRN_ERR_CONFIG && st.cfg.scheme_default && strcmp(why, "") != 0 &&
        strstr(cairn_last_error(), "failure domain") != NULL &&
        strcmp(why, "CAIRN_REDUNDANCY_SCHEME") != 0 &&
        cairn_config_set("redundancy.scheme", "single") == CAIRN_OK) {
        scheme = "single";
        why = "one failure domain: no partner copies";
        rc = cairn_init(globalComm, NULL);
    }
    if (rc != CAIRN_OK) {
        cairn_failed(rc, "FTI_Init: starting Cairn with the settings of %s (redundancy scheme "
                         "%s from %s)", st.cfg.path, scheme, why);
        release();
        return FTI_NSCS;
    }
    st.redundant = strcmp(scheme, "single") != 0;
    st.scheme_why = why;
    st.loading_names = 1;
    st.last = -1;
    int found = find_checkpoints();
    if (found == FTI_SCES && st.restart_version >= 0)
        found = load_names(st.restart_version);
    st.loading_names = 0;
    if (found != FTI_SCES) {
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
    if (st.status != 0)
        info("This is a restart. The execution ID is: %s", st.cfg.exec_id);
    /* FTI: the file said a restart was expected ([restart] Failure 1 or 2) and there is
     * nothing to recover. FTI stays initialised (the run may start afresh). */
    if ((st.cfg.failure == 1 || st.cfg.failure == 2) && st.status == 0) {
        if (st.rank == 0)
            fail("FTI_Init: %s says a restart is expected ([restart] failure = %d) but no "
                 "checkpoint can be recovered (see `cairn list`)", st.cfg.path, st.cfg.failure);
        return FTI_NREC;
    }
    if (st.cfg.failure == 3)
        set_failure(0);
    return FTI_SCES;
}

int FTI_Status(void)
{
    return st.up ? st.status : 0;
}

/* ---- FTI_Protect ------------------------------------------------------------------------- */

static struct var *find_var(int id)
{
    for (size_t i = 0; i < st.nvars; i++)
        if (st.vars[i].id == id)
            return &st.vars[i];
    return NULL;
}

/* Give Cairn's region table the variables again (after a checkpoint of something else). */
static int protect_vars(void)
{
    int rc = CAIRN_OK;
    for (size_t i = 0; i < st.nvars && rc == CAIRN_OK; i++) {
        struct var *v = &st.vars[i];
        int bytes = v->type >= USER_TYPES || basic[v->type].dtype == CAIRN_BYTE;
        size_t elem = bytes ? 1 : basic[v->type].size;
        rc = cairn_protect(v->id, v->ptr, (uintptr_t)(v->bytes / elem),
                           bytes ? CAIRN_BYTE : basic[v->type].dtype);
    }
    return rc;
}

static void unprotect_vars(void)
{
    for (size_t i = 0; i < st.nvars; i++)
        cairn_unprotect(st.vars[i].id);
}

/* The bytes of the protected variables, in MiB (for FTI's information lines). */
static double protected_mib(void)
{
    double bytes = 0;
    for (size_t i = 0; i < st.nvars; i++)
        bytes += (double)st.vars[i].bytes;
    return bytes / (1024.0 * 1024.0);
}

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
    struct var v = {id, ptr, count, type, (size_t)count * size};
    struct var *old = find_var(id);
    if (old) {
        *old = v;
        return FTI_SCES;
    }
    struct var *grown = realloc(st.vars, (st.nvars + 1) * sizeof *grown);
    if (!grown) {
        cairn_unprotect(id);
        return fail("FTI_Protect(id %d): out of memory", id);
    }
    st.vars = grown;
    st.vars[st.nvars++] = v;
    info("Variable ID %d to protect (Stored in CPU). Current ckpt. size per rank is %.2fMB.", id,
         protected_mib());
    return FTI_SCES;
}

/* ---- FTI_Checkpoint and FTI_Recover ------------------------------------------------------ */

/* Collective: write the next version at `level` (1..4); `id` is the application's number for
 * it, named in FTI's information line. */
static int checkpoint(int id, int level)
{
    double t0 = MPI_Wtime();
    int64_t v = st.version + 1;
    /* Levels 2 and 3 get the redundancy scheme, and level 1 too when the file schedules
     * level 2 or 3 (never less protection than the file asks of the run); without such a
     * schedule level 1 is node-local only, as in FTI, and costs no partner copies. Level 4
     * goes to the global tier. */
    int redundant = level == 2 || level == 3 || (level == 1 && !st.cfg.scheme_default);
    int rc = cairn_checkpoint_redundant(FTI_CKPT_NAME, v, redundant);
    if (rc != CAIRN_OK)
        return cairn_failed(rc, "FTI_Checkpoint: level %d checkpoint (version %" PRId64 ")",
                            level, v);
    st.version = v;
    st.last = v;
    if (store_names(v) != FTI_SCES)
        return FTI_NSCS;
    set_failure(1);
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
    info("Ckpt. ID %d (L%d) (%.2f MB/proc) taken in %.2f sec.", id, level, protected_mib(),
         MPI_Wtime() - t0);
    return FTI_DONE;
}

int FTI_Checkpoint(int id, int level)
{
    /* `id` is the application's own numbering; Cairn's versions are counted here. */
    if (!st.up)
        return fail("FTI_Checkpoint: call FTI_Init first");
    /* As FTI: the differential levels below 4 are their plain level, and FTI_L4_DCP and
     * FTI_L4_H5_SINGLE are level 4 (Cairn's incremental checkpoints follow [reduction]). */
    if (level > FTI_L4 && level < FTI_L4_DCP)
        level -= 4;
    else if (level == FTI_L4_DCP || level == FTI_L4_H5_SINGLE)
        level = FTI_L4;
    if (level < 1 || level > 4)
        return fail("FTI_Checkpoint(id %d): level %d is not one of FTI_L1 ... FTI_L4_H5_SINGLE",
                    id, level);
    return checkpoint(id, level);
}

/* What FTI_Recover and FTI_RecoverVarInit read, as in FTI: the newest of the checkpoint found
 * at FTI_Init and the last one taken (or recovered) in this run; -1: none. */
static int64_t to_recover(void)
{
    return st.last > st.restart_version ? st.last : st.restart_version;
}

int FTI_Recover(void)
{
    if (!st.up)
        return fail("FTI_Recover: call FTI_Init first");
    int64_t v = to_recover();
    if (v < 0) {
        fail("FTI_Recover: there is no checkpoint to recover (none was found at FTI_Init or "
             "taken since)");
        return FTI_NREC;
    }
    int rc = cairn_restart(FTI_CKPT_NAME, v);
    if (rc != CAIRN_OK)
        return cairn_failed(rc, "FTI_Recover: restoring version %" PRId64, v);
    st.status = 0;
    st.restart_version = -1;
    st.last = v;
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
    /* FTI numbers its snapshots from 1: the next version plus one. */
    return level == 0 ? FTI_SCES : checkpoint((int)(st.version + 2), level);
}

/* ---- Variables one by one ---------------------------------------------------------------- */

int64_t FTI_GetStoredSize(int id)
{
    if (!st.up) {
        fail("FTI_GetStoredSize(id %d): call FTI_Init first", id);
        return 0;
    }
    int64_t version = to_recover();
    if (version < 0)
        return 0;
    uint64_t n = 0;
    int rc = cairn_stored_size(FTI_CKPT_NAME, version, id, &n);
    if (rc != CAIRN_OK) {
        fail("FTI_GetStoredSize(id %d): %s", id, cairn_last_error());
        return 0;
    }
    return n > INT64_MAX ? 0 : (int64_t)n;
}

void *FTI_Realloc(int id, void *ptr)
{
    if (!st.up) {
        fail("FTI_Realloc(id %d): call FTI_Init first", id);
        return ptr;
    }
    if (to_recover() < 0)
        return ptr;
    struct var *v = find_var(id);
    if (!v) {
        fail("FTI_Realloc(id %d): variable %d is not protected", id, id);
        return ptr;
    }
    int64_t n = FTI_GetStoredSize(id);
    if (n <= 0) {
        fail("FTI_Realloc(id %d): the checkpoint to recover holds no data for it", id);
        return ptr;
    }
    size_t elem = v->count > 0 ? v->bytes / (size_t)v->count : 1;
    if (elem == 0 || (uint64_t)n % elem != 0) {
        fail("FTI_Realloc(id %d): %" PRId64 " stored bytes are no whole number of its "
             "%zu-byte elements", id, n, elem);
        return ptr;
    }
    /* As realloc, but the variable stays protected at its old place until the new one is. */
    void *grown = malloc((size_t)n);
    if (!grown) {
        fail("FTI_Realloc(id %d): out of memory for %" PRId64 " bytes", id, n);
        return NULL;
    }
    size_t keep = v->bytes < (size_t)n ? v->bytes : (size_t)n;
    if (keep)
        memcpy(grown, ptr, keep);
    if (FTI_Protect(id, grown, n / (int64_t)elem, v->type) != FTI_SCES) {
        free(grown);
        return NULL;
    }
    free(ptr);
    return grown;
}

int FTI_RecoverVarInit(void)
{
    if (!st.up)
        return fail("FTI_RecoverVarInit: call FTI_Init first");
    int64_t v = to_recover();
    if (v < 0) {
        fail("FTI_RecoverVarInit: there is no checkpoint to recover (none was found at "
             "FTI_Init or taken since)");
        return FTI_NREC;
    }
    int rc = cairn_load(FTI_CKPT_NAME, v);
    if (rc != CAIRN_OK)
        return cairn_failed(rc, "FTI_RecoverVarInit: reading version %" PRId64, v);
    int64_t got = v;
    if (cairn_restart_version(&got) == CAIRN_OK && got >= 0)
        v = got;
    st.last = v;
    st.loaded = 1;
    return FTI_SCES;
}

int FTI_RecoverVar(int id)
{
    if (!st.up)
        return fail("FTI_RecoverVar(id %d): call FTI_Init first", id);
    if (!st.loaded)
        return fail("FTI_RecoverVar(id %d): call FTI_RecoverVarInit first", id);
    struct var *v = find_var(id);
    if (!v)
        return fail("FTI_RecoverVar(id %d): variable %d is not protected", id, id);
    int rc = cairn_loaded_copy(id, v->ptr, v->bytes);
    if (rc != CAIRN_OK)
        return fail("FTI_RecoverVar(id %d): %s", id, cairn_last_error());
    return FTI_SCES;
}

int FTI_RecoverVarFinalize(void)
{
    if (!st.up)
        return fail("FTI_RecoverVarFinalize: call FTI_Init first");
    if (!st.loaded)
        return fail("FTI_RecoverVarFinalize: call FTI_RecoverVarInit first");
    cairn_unload();
    st.loaded = 0;
    st.status = 0;
    st.restart_version = -1;
    restart_clock();
    return FTI_SCES;
}

/* ---- Incremental checkpoints ------------------------------------------------------------- */

static void icp_release(void)
{
    for (size_t i = 0; i < st.nicp; i++)
        free(st.icp_vars[i].ptr);
    st.nicp = 0;
}

int FTI_InitICP(int id, int level, bool activate)
{
    if (!st.up)
        return fail("FTI_InitICP: call FTI_Init first");
    if (st.icp == 1)
        return fail("FTI_InitICP: a checkpoint is begun already (call FTI_FinalizeICP)");
    if (!activate) {
        st.icp = 2;
        return FTI_SCES;
    }
    if (level == FTI_L4_DCP)
        level = 4;
    if (level < 1 || level > 4)
        return fail("FTI_InitICP(id %d): level %d is not one of 1, 2, 3, 4", id, level);
    icp_release();
    st.icp = 1;
    st.icp_level = level;
    st.icp_id = id;
    return FTI_SCES;
}

int FTI_AddVarICP(int varID)
{
    if (!st.up)
        return fail("FTI_AddVarICP: call FTI_Init first");
    if (st.icp == 2)
        return FTI_SCES;
    if (st.icp != 1)
        return fail("FTI_AddVarICP(%d): call FTI_InitICP first", varID);
    struct var *v = find_var(varID);
    if (!v)
        return fail("FTI_AddVarICP(%d): variable %d is not protected", varID, varID);
    for (size_t i = 0; i < st.nicp; i++)
        if (st.icp_vars[i].id == varID)
            return fail("FTI_AddVarICP(%d): variable %d is added already", varID, varID);
    struct var *grown = realloc(st.icp_vars, (st.nicp + 1) * sizeof *grown);
    void *copy = malloc(v->bytes ? v->bytes : 1);
    if (!grown || !copy) {
        free(copy);
        if (grown)
            st.icp_vars = grown;
        return fail("FTI_AddVarICP(%d): out of memory", varID);
    }
    memcpy(copy, v->ptr, v->bytes);
    st.icp_vars = grown;
    st.icp_vars[st.nicp] = *v;
    st.icp_vars[st.nicp++].ptr = copy;
    return FTI_SCES;
}

int FTI_FinalizeICP(void)
{
    if (!st.up)
        return fail("FTI_FinalizeICP: call FTI_Init first");
    if (st.icp == 2) {
        st.icp = 0;
        return FTI_SCES;
    }
    if (st.icp != 1)
        return fail("FTI_FinalizeICP: call FTI_InitICP first");
    st.icp = 0;
    int complete = st.nicp == st.nvars, all = 0;
    MPI_Allreduce(&complete, &all, 1, MPI_INT, MPI_MIN, st.comm);
    if (!all) {
        int who = first_failing(st.comm, st.rank, st.size, !complete);
        if (who == st.rank)
            fail("FTI_FinalizeICP: %zu of %zu protected variables were added; the checkpoint "
                 "is not taken", st.nicp, st.nvars);
        icp_release();
        return FTI_NSCS;
    }
    /* The copies made as the variables were added are what the checkpoint stores. */
    struct var *live = st.vars;
    st.vars = st.icp_vars;
    unprotect_vars();
    int rc = protect_vars();
    int res = rc == CAIRN_OK ? checkpoint(st.icp_id, st.icp_level)
                             : cairn_failed(rc, "FTI_FinalizeICP");
    unprotect_vars();
    st.vars = live;
    rc = protect_vars();
    icp_release();
    if (rc != CAIRN_OK)
        return fail("FTI_FinalizeICP: protecting the variables again: %s", cairn_last_error());
    return res == FTI_DONE ? FTI_SCES : res;
}

/* ---- Composite types and groups ---------------------------------------------------------- */

fti_id_t FTI_InitCompositeType(const char *name, size_t size, FTIT_H5Group *h5g)
{
    (void)h5g;
    if (!name)
        return fail("FTI_InitCompositeType: the name is NULL");
    if (size == 0 || size > INT_MAX)
        return fail("FTI_InitCompositeType(%s): size %zu is not from 1 to %d", name, size,
                    INT_MAX);
    return (FTI_InitType)((int)size);
}

/* The size of a type handle, or 0 if it is none. */
static size_t type_size(fti_id_t t)
{
    if (t >= 0 && t < USER_TYPES)
        return basic[t].size;
    if (t >= USER_TYPES && (size_t)(t - USER_TYPES) < st.ntypes)
        return st.type_size[t - USER_TYPES];
    return 0;
}

int FTI_AddScalarField(fti_id_t id, const char *name, fti_id_t fid, int64_t offset)
{
    size_t whole = type_size(id), part = type_size(fid);
    if (id < USER_TYPES || whole == 0 || part == 0)
        return fail("FTI_AddScalarField(%s): type %d or field type %d is not known",
                    name ? name : "(null)", id, fid);
    if (offset < 0 || (uint64_t)offset + part > whole)
        return fail("FTI_AddScalarField(%s): a %zu-byte field at offset %" PRId64
                    " does not fit the %zu-byte type", name ? name : "(null)", part, offset,
                    whole);
    return FTI_SCES;
}

int FTI_AddVectorField(fti_id_t id, const char *name, fti_id_t tid, int64_t offset, int ndims,
                       int64_t *dim_sizes)
{
    size_t whole = type_size(id), part = type_size(tid);
    if (id < USER_TYPES || whole == 0 || part == 0)
        return fail("FTI_AddVectorField(%s): type %d or field type %d is not known",
                    name ? name : "(null)", id, tid);
    if (ndims <= 0 || !dim_sizes)
        return fail("FTI_AddVectorField(%s): %d dimensions", name ? name : "(null)", ndims);
    uint64_t n = part;
    for (int i = 0; i < ndims; i++) {
        if (dim_sizes[i] <= 0 || n > whole / (uint64_t)dim_sizes[i])
            return fail("FTI_AddVectorField(%s): the field does not fit the %zu-byte type",
                        name ? name : "(null)", whole);
        n *= (uint64_t)dim_sizes[i];
    }
    if (offset < 0 || (uint64_t)offset + n > whole)
        return fail("FTI_AddVectorField(%s): a %" PRIu64 "-byte field at offset %" PRId64
                    " does not fit the %zu-byte type", name ? name : "(null)", n, offset,
                    whole);
    return FTI_SCES;
}

int FTI_InitGroup(FTIT_H5Group *h5group, const char *name, FTIT_H5Group *parent)
{
    static int next = 1;
    if (!h5group || !name)
        return fail("FTI_InitGroup: the group or its name is NULL");
    memset(h5group, 0, sizeof *h5group);
    h5group->id = next++;
    snprintf(h5group->name, sizeof h5group->name, "%s", name);
    h5group->parentId = parent ? parent->id : 0;
    if (parent)
        parent->childrenNo++;
    return FTI_SCES;
}

int FTI_RenameGroup(FTIT_H5Group *h5group, const char *name)
{
    if (!h5group || !name)
        return fail("FTI_RenameGroup: the group or its name is NULL");
    snprintf(h5group->name, sizeof h5group->name, "%s", name);
    return FTI_SCES;
}

/* ---- Staging ------------------------------------------------------------------------------ */

/* This rank's staging directory: <node-local tier>/fti-stage/rank<r>, mode 0700. */
static int stage_dir(char *out, size_t len)
{
    const char *local = getenv("CAIRN_TIERS_LOCAL");
    for (size_t i = 0; !local && i < st.cfg.nsets; i++)
        if (strcmp(st.cfg.sets[i].key, "tiers.local") == 0)
            local = st.cfg.sets[i].value;
    if (!local)
        local = ".";
    char top[4096];
    snprintf(top, sizeof top, "%s/fti-stage", local);
    if (snprintf(out, len, "%s/rank%d", top, st.rank) >= (int)len)
        return fail("FTI_GetStageDir: the directory name does not fit %zu bytes", len);
    struct stat sb;
    for (const char *d = top; d; d = d == top ? out : NULL) {
        if (mkdir(d, 0700) != 0 && errno != EEXIST)
            return fail("FTI_GetStageDir: cannot create %s: %s", d, strerror(errno));
        if (lstat(d, &sb) != 0 || !S_ISDIR(sb.st_mode) || sb.st_uid != geteuid() ||
            (sb.st_mode & 077) != 0)
            return fail("FTI_GetStageDir: %s is not a directory private to this user", d);
    }
    return FTI_SCES;
}

int FTI_GetStageDir(char *stageDir, int maxLen)
{
    if (!st.up)
        return fail("FTI_GetStageDir: call FTI_Init first");
    if (!stageDir || maxLen <= 0)
        return fail("FTI_GetStageDir: no buffer");
    return stage_dir(stageDir, (size_t)maxLen);
}

/* Copy `from` to `to` through a temporary beside it, synced, then renamed. */
static int copy_file(const char *from, const char *to)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", to, (long)getpid());
    int in = open(from, O_RDONLY | O_NOFOLLOW);
    int out = in < 0 ? -1 : open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
    int ok = out >= 0;
    char buf[1 << 16];
    ssize_t n;
    while (ok && (n = read(in, buf, sizeof buf)) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        for (ssize_t at = 0; ok && n > 0 && at < n;) {
            ssize_t w = write(out, buf + at, (size_t)(n - at));
            if (w < 0 && errno == EINTR)
                continue;
            ok = w > 0;
            at += w > 0 ? w : 0;
        }
        ok = ok && n > 0;
    }
    ok = ok && fsync(out) == 0;
    if (out >= 0)
        ok = close(out) == 0 && ok;
    if (in >= 0)
        close(in);
    ok = ok && rename(tmp, to) == 0;
    if (!ok) {
        int e = errno;
        unlink(tmp);
        errno = e;
    }
    return ok ? 0 : -1;
}

int FTI_SendFile(const char *lpath, const char *rpath)
{
    if (!st.up)
        return fail("FTI_SendFile: call FTI_Init first");
    if (!lpath || !rpath)
        return fail("FTI_SendFile: a path is NULL");
    unsigned char *grown = realloc(st.staged, (size_t)st.nstaged + 1);
    if (!grown)
        return fail("FTI_SendFile: out of memory");
    st.staged = grown;
    int id = st.nstaged++;
    if (copy_file(lpath, rpath) != 0) {
        st.staged[id] = FTI_SI_FAIL;
        fail("FTI_SendFile: copying %s to %s: %s", lpath, rpath, strerror(errno));
    } else {
        st.staged[id] = FTI_SI_SCES;
        unlink(lpath);
    }
    return id;
}

int FTI_GetStageStatus(int ID)
{
    if (!st.up || ID < 0 || ID >= st.nstaged)
        return FTI_SI_NINI;
    return st.staged[ID];
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
    unprotect_vars();
    st.nvars = 0;
    int64_t record[3] = {END_MAGIC, st.version, st.cfg.keep_last};
    int rc = store_alone(FTI_END_NAME, st.version, record, 3, CAIRN_INT64);
    if (rc != CAIRN_OK)
        return cairn_failed(rc, "FTI_Finalize: recording the end of the run (the next run may "
                                "recover this run's last checkpoint)");
    /* The records of earlier runs, then (as FTI does) this run's checkpoints unless
     * Keep_last_ckpt asks for the last one to stay or Keep_L4_ckpt for every level-4 one. */
    rc = delete_upto(FTI_END_NAME, st.version - 1);
    if (rc == CAIRN_OK && !st.cfg.keep_last && !st.cfg.keep_l4) {
        rc = delete_upto(FTI_CKPT_NAME, INT64_MAX);
        if (rc == CAIRN_OK)
            rc = delete_upto(FTI_NAMES_NAME, INT64_MAX);
    }
    if (rc != CAIRN_OK)
        return cairn_failed(rc, "FTI_Finalize: deleting the run's checkpoints");
    /* As FTI: 2 when the last checkpoint is kept for the next run; with only Keep_L4_ckpt
     * the file is left as it is. */
    if (st.cfg.keep_last)
        set_failure(2);
    else if (!st.cfg.keep_l4)
        set_failure(0);
    return FTI_SCES;
}

int FTI_Finalize(void)
{
    if (!st.up)
        return fail("FTI_Finalize: call FTI_Init first");
    int result = FTI_SCES;
    if (st.version >= 0)
        result = record_end();
    else
        set_failure(0);
    int rc = cairn_finalize();
    if (rc != CAIRN_OK)
        result = cairn_failed(rc, "FTI_Finalize");
    release();
    return result;
}
