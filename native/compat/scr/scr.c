/*
 * scr.c: the functions of scr.h over libcairn.
 *
 * Every SCR dataset of a job is a version of one Cairn checkpoint name (SCR_CKPT_NAME): the
 * dataset id that SCR assigns is the version, and the application's dataset name is the
 * label Cairn stores with it (cairn_start_output), so a restart gets the name back with the
 * data (cairn_restart_label). The index (index.c) keeps what must be known by name or across
 * runs without loading data. The file is divided into: the library's state and its helpers,
 * SCR_Init / SCR_Finalize and the simple queries, the output calls, the restart calls, and
 * the dataset management calls.
 *
 * The state machine. Each transition is collective, and the ranks agree on its arguments and
 * outcome before it happens, so every rank is always in the same state:
 *
 *                 SCR_Init                     SCR_Start_output
 *   UNINIT -----------------> IDLE  <----------------------------------> OUTPUT
 *                            |  ^  ^           SCR_Complete_output
 *     SCR_Have_restart       |  |  |
 *     (a checkpoint found)   v  |  |  SCR_Complete_restart (all valid: done; otherwise
 *                          LOADED  |  Cairn passes over that version, and the next
 *                            |  |  |  SCR_Have_restart loads the next older one)
 *     SCR_Start_restart      |  |  |
 *                            v  |  |
 *                          RESTART-+
 *                               |
 *     SCR_Start_output, SCR_Current, SCR_Drop, SCR_Delete, SCR_Finalize in LOADED: the
 *     loaded checkpoint is put back (cairn_complete_restart(1)), as if never loaded.
 *
 *   IDLE     no files are routed: SCR_Route_file returns the name unchanged.
 *   OUTPUT   SCR_Route_file registers a file and gives its path in the node-local staging
 *            directory (cairn_start_output is under way).
 *   LOADED   the newest checkpoint every rank can restore is restored into a private
 *            directory (cairn_start_restart) and its name is known; files are not routed yet.
 *   RESTART  SCR_Route_file gives the restored file's path, or fails for a file the
 *            checkpoint does not hold.
 *
 * Why SCR_Have_restart restores the checkpoint rather than only looking it up: it must name
 * the dataset, and the name is stored with the data, so that it is right whichever version
 * Cairn's restart ends up with (a damaged one falls back to an older one inside
 * cairn_start_restart). SCR 3 itself fetches the checkpoint in SCR_Have_restart. An
 * application that asks and then does not restart costs one restore into node-local storage.
 */
#define _POSIX_C_SOURCE 200809L
#define _XOPEN_SOURCE 700 /* realpath */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compat.h"

enum phase { UNINIT, IDLE, LOADED, RESTART, OUTPUT, DONE };

static struct {
    enum phase phase;
    MPI_Comm comm; /* a duplicate of MPI_COMM_WORLD for libscr's own messages */
    int rank;
    struct scr_settings set;
    struct scr_index ix;
    int current_done; /* SCR_CURRENT was acted on */
    int loaded_once;  /* a checkpoint was loaded in this run (SCR_Current no longer picks) */
    /* OUTPUT: the dataset being written, and (for output) the files routed into it. */
    int64_t out_id;
    int out_flags;
    char out_name[SCR_MAX_FILENAME];
    char **routed;
    size_t nrouted;
    /* LOADED, RESTART: the checkpoint loaded. */
    int64_t loaded_id;
    char loaded_name[SCR_MAX_FILENAME];
    /* LOADED, RESTART with SCR_CACHE_BYPASS: the files of the checkpoint, every rank's (the
     * paths NUL-separated), back at their own paths. */
    char *bypass_files;
    size_t bypass_len;
} S;

static int inside_prefix(const char *path, size_t plen);

/* ---- Helpers ------------------------------------------------------------------------------- */

/* Whether SCR is initialised; otherwise says so for `fn`. */
static int ready(const char *fn)
{
    if (S.phase == UNINIT || S.phase == DONE) {
        scr_say(fn, S.phase == UNINIT ? "SCR_Init has not been called"
                                      : "SCR_Finalize has been called");
        return 0;
    }
    return 1;
}


/* 64-bit FNV-1a of a string, continued from h. */
static uint64_t hash(uint64_t h, const char *s)
{
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ULL;
    }
    return h;
}
#define HASH0 0xcbf29ce484222325ULL

/*
 * Agree before a collective step: every rank must have passed the same arguments (`sum`, a
 * hash of them) and none may have found an error (`err`, NULL if none). Returns 1 on every
 * rank when both hold; otherwise 0 on every rank, after one line from the lowest rank that
 * found an error (or from rank 0 when the arguments differ). Collective.
 */
static int agree(const char *fn, const char *err, uint64_t sum)
{
    uint64_t v[3] = { sum, ~sum, err ? (uint64_t)S.rank : UINT64_MAX };
    MPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_UINT64_T, MPI_MIN, S.comm);
    if (v[0] != ~v[1]) {
        if (S.rank == 0)
            scr_say(fn, "the ranks passed different arguments; every rank must pass the same");
        return 0;
    }
    if (v[2] != UINT64_MAX) {
        if (v[2] == (uint64_t)S.rank)
            scr_say(fn, "%s", err);
        return 0;
    }
    return 1;
}

/*
 * A collective Cairn call failed, which it does on every rank alike (a rank whose own step
 * succeeded gets CAIRN_ERR_PEER). The lowest rank with a failure of its own says why, so a
 * failure shared by every rank (a bad setting, a missing directory) is one line. Collective.
 */
static int cairn_failed(const char *fn, int rc)
{
    char msg[1536];
    snprintf(msg, sizeof msg, "%s (%s)", cairn_last_error(), cairn_strerror(rc));
    agree(fn, rc == CAIRN_ERR_PEER ? NULL : msg, HASH0);
    return SCR_FAILURE;
}

/* cairn_failed for the internal steps, which return -1. */
static int step_failed(const char *fn, int rc)
{
    cairn_failed(fn, rc);
    return -1;
}

/* Put a loaded but unused checkpoint back (LOADED -> IDLE). Collective. */
static void forget_bypass_files(void)
{
    free(S.bypass_files);
    S.bypass_files = NULL;
    S.bypass_len = 0;
}

static int unload(const char *fn)
{
    if (S.phase != LOADED)
        return SCR_SUCCESS;
    S.phase = IDLE;
    forget_bypass_files();
    int rc = cairn_complete_restart(1, NULL);
    return rc == CAIRN_OK ? SCR_SUCCESS : cairn_failed(fn, rc);
}

/* Why a call made outside output and restart cannot be made now, or NULL. */
static const char *busy(void)
{
    switch (S.phase) {
    case OUTPUT:
        return "an output is under way (call SCR_Complete_output first)";
    case RESTART:
        return "a restart is under way (call SCR_Complete_restart first)";
    default:
        return NULL;
    }
}

static void forget_routed(void)
{
    for (size_t i = 0; i < S.nrouted; i++)
        free(S.routed[i]);
    free(S.routed);
    S.routed = NULL;
    S.nrouted = 0;
}

static struct scr_entry *entry_of(int64_t id)
{
    for (size_t i = 0; i < S.ix.n; i++)
        if (S.ix.e[i].id == id)
            return &S.ix.e[i];
    return NULL;
}

/* ---- Init, finalize, queries ---------------------------------------------------------------- */

SCR_API const char *SCR_Config(const char *config)
{
    return scr_config(config, S.phase != UNINIT);
}

SCR_API int SCR_Init(void)
{
    if (S.phase != UNINIT) {
        scr_say("SCR_Init", S.phase == DONE ? "SCR_Finalize has been called; SCR_Init may be "
                                              "called only once"
                                            : "SCR is already initialised");
        return SCR_FAILURE;
    }
    int up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    if (!up || down) {
        scr_say("SCR_Init", "MPI is not running: call SCR_Init after MPI_Init and before "
                            "MPI_Finalize");
        return SCR_FAILURE;
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &S.comm);
    MPI_Comm_rank(S.comm, &S.rank);
    int rc;
    if (scr_settings_apply(S.comm, S.rank, &S.set) != 0) {
        MPI_Comm_free(&S.comm);
        return SCR_FAILURE;
    }
    if ((rc = cairn_init(MPI_COMM_WORLD, NULL)) != CAIRN_OK) {
        cairn_failed("SCR_Init", rc);
        MPI_Comm_free(&S.comm);
        return SCR_FAILURE;
    }
    scr_index_load(&S.ix, S.set.prefix, S.comm, S.rank);
    /* Ids must also stay above every checkpoint Cairn holds, should the index have been lost.
     * Looking also rebuilds what lost nodes held, as SCR_Init does. */
    int64_t newest = -1;
    rc = cairn_have_restart(SCR_CKPT_NAME, &newest);
    if (rc == CAIRN_ERR_IN_USE || rc == CAIRN_ERR_PEER) {
        /* Another job writes this prefix (the job lock): SCR_Init fails, naming it. */
        cairn_failed("SCR_Init", rc);
        cairn_finalize();
        MPI_Comm_free(&S.comm);
        return SCR_FAILURE;
    }
    if (rc == CAIRN_OK && newest >= S.ix.next)
        S.ix.next = newest + 1;
    S.phase = IDLE;
    return SCR_SUCCESS;
}

SCR_API int SCR_Finalize(void)
{
    if (!ready("SCR_Finalize"))
        return SCR_FAILURE;
    int ok = unload("SCR_Finalize") == SCR_SUCCESS;
    if (S.phase == OUTPUT) {
        if (S.rank == 0)
            scr_say("SCR_Finalize", "dataset %s was not completed (SCR_Complete_output); it is "
                                    "discarded", S.out_name);
        ok &= cairn_complete_output(0, NULL) == CAIRN_OK;
    } else if (S.phase == RESTART) {
        ok &= cairn_complete_restart(1, NULL) == CAIRN_OK;
    }
    forget_bypass_files();
    int rc = cairn_finalize();
    if (rc != CAIRN_OK && rc != CAIRN_ERR_PEER)
        scr_say("SCR_Finalize", "%s (%s)", cairn_last_error(), cairn_strerror(rc));
    ok &= rc == CAIRN_OK;
    forget_routed();
    scr_index_clear(&S.ix);
    scr_config_clear();
    MPI_Comm_free(&S.comm);
    S.phase = DONE;
    return ok ? SCR_SUCCESS : SCR_FAILURE;
}

SCR_API char *SCR_Get_version(void)
{
    static char version[] = SCR_VERSION " (Cairn)";
    return version;
}

/* SCR_Need_checkpoint and SCR_Should_exit: a Cairn flag query. */
static int flag_query(const char *fn, int (*query)(int *), int *flag)
{
    if (!ready(fn) || !agree(fn, flag ? NULL : "flag is NULL", HASH0))
        return SCR_FAILURE;
    int rc = query(flag);
    return rc == CAIRN_OK ? SCR_SUCCESS : cairn_failed(fn, rc);
}

SCR_API int SCR_Need_checkpoint(int *flag)
{
    return flag_query("SCR_Need_checkpoint", cairn_need_checkpoint, flag);
}

SCR_API int SCR_Should_exit(int *flag)
{
    return flag_query("SCR_Should_exit", cairn_should_exit, flag);
}

/* Note a file routed into the output under way (once). */
static int remember_routed(const char *fn, const char *path)
{
    for (size_t i = 0; i < S.nrouted; i++)
        if (strcmp(S.routed[i], path) == 0)
            return SCR_SUCCESS;
    char **grown = realloc(S.routed, (S.nrouted + 1) * sizeof *grown);
    if (!grown || !(grown[S.nrouted] = strdup(path))) {
        if (grown)
            S.routed = grown;
        scr_say(fn, "out of memory");
        return SCR_FAILURE;
    }
    S.routed = grown;
    S.nrouted++;
    return SCR_SUCCESS;
}

/* The files every rank routed into the output under way, NUL-separated in rank order (free
 * it), as scr_allgather_strings gives them: *total bytes, and with `starts` where each rank's
 * begin. NULL (on every rank) when memory ran out. Collective. */
static char *gather_routed(size_t *total, size_t **starts)
{
    size_t n = 0;
    for (size_t i = 0; i < S.nrouted; i++)
        n += strlen(S.routed[i]) + 1;
    char *mine = malloc(n + 1);
    size_t at = 0;
    for (size_t i = 0; mine && i < S.nrouted; i++) {
        size_t l = strlen(S.routed[i]) + 1;
        memcpy(mine + at, S.routed[i], l);
        at += l;
    }
    char *all = scr_allgather_strings(S.comm, mine, n, total, starts);
    free(mine);
    return all;
}

/* Whether the NUL-separated strings [from, to) of `all` hold `s`. */
static int holds(const char *all, size_t from, size_t to, const char *s)
{
    for (size_t at = from; at < to; at += strlen(all + at) + 1)
        if (strcmp(all + at, s) == 0)
            return 1;
    return 0;
}

/* The directory of `path` exists (made with mode 0700 if it did not) and lies inside the
 * prefix. Returns NULL or why not. */
static const char *bypass_dir(const char *path)
{
    size_t plen = strlen(S.set.prefix);
    if (strncmp(path, S.set.prefix, plen) != 0 || path[plen] != '/')
        return "it is not under SCR_PREFIX (with SCR_CACHE_BYPASS=1 every file of a dataset "
               "is written at its own path, which must lie under the prefix)";
    char dir[SCR_PATH_MAX];
    scr_parent(path, dir);
    if (scr_mkdirs(dir, 0700) != 0)
        return strerror(errno);
    if (!inside_prefix(path, plen))
        return "its directory resolves outside SCR_PREFIX";
    return NULL;
}

/*
 * SCR_CACHE_BYPASS=1, as in SCR: a dataset's files are written and read at their own paths
 * under the prefix, so that several ranks can share one file. During an output the path is
 * given back (its directory made); each distinct file is stored into Cairn at
 * SCR_Complete_output (bypass_store). During a restart a file of the checkpoint is found at
 * its own path, where the restart put the stored bytes back (bypass_restore).
 */
static int bypass_route(const char *fn, const char *name, const char *path, char *file)
{
    if (strlen(path) >= SCR_MAX_FILENAME) {
        scr_say(fn, "%.64s... is longer than SCR_MAX_FILENAME", path);
        return SCR_FAILURE;
    }
    if (S.phase == OUTPUT) {
        const char *why = bypass_dir(path);
        if (why) {
            scr_say(fn, "cannot write %s: %s", path, why);
            return SCR_FAILURE;
        }
        strcpy(file, path);
        return remember_routed(fn, path);
    }
    const char *found = NULL;
    if (holds(S.bypass_files, 0, S.bypass_len, path)) {
        found = path;
    } else if (!strchr(name, '/')) {
        /* SCR 1.x: a bare name finds the one file of that name. */
        for (size_t at = 0; at < S.bypass_len; at += strlen(S.bypass_files + at) + 1) {
            const char *f = S.bypass_files + at, *base = strrchr(f, '/');
            if (base && strcmp(base + 1, name) == 0) {
                if (found) {
                    found = NULL;
                    break;
                }
                found = f;
            }
        }
    }
    if (!found) {
        if (S.set.debug)
            scr_say(fn, "%s is not a file of checkpoint %s", path, S.loaded_name);
        return SCR_FAILURE;
    }
    snprintf(file, SCR_MAX_FILENAME, "%s", found);
    return SCR_SUCCESS;
}

/* SCR_Complete_output with SCR_CACHE_BYPASS: each distinct file routed by any rank (`all`,
 * `starts`: gather_routed's) is stored into Cairn's checkpoint once, from its own path, by the
 * lowest rank that routed it (a shared file is one part, not one per writer). Returns this
 * rank's verdict on its files. Local. */
static int bypass_store(const char *fn, int valid, const char *all, const size_t *starts)
{
    for (size_t i = 0; i < S.nrouted; i++) {
        const char *path = S.routed[i];
        if (access(path, F_OK) != 0) {
            if (valid)
                scr_say(fn, "%s was routed but not written; dataset %s is invalid", path,
                        S.out_name);
            valid = 0;
            continue;
        }
        int owner = 1;
        for (int r = 0; owner && r < S.rank; r++)
            owner = !holds(all, starts[r], starts[r + 1], path);
        if (!owner || !(S.out_flags & SCR_FLAG_CHECKPOINT) || !valid)
            continue;
        char staged[SCR_PATH_MAX];
        int rc = cairn_route_file(path, staged, sizeof staged);
        if (rc != CAIRN_OK) {
            scr_say(fn, "%s: %s (%s)", path, cairn_last_error(), cairn_strerror(rc));
            valid = 0;
        } else if (scr_copy_file(path, staged) != 0) {
            scr_say(fn, "cannot store %s: %s", path, strerror(errno));
            valid = 0;
        }
    }
    return valid;
}

/* After a restart with SCR_CACHE_BYPASS: each file this rank restored is put back at its own
 * path (a path under the prefix only: the names are stored data) unless it already holds the
 * same bytes, and every rank learns the checkpoint's files. Returns 0, or -1 after the lowest
 * failing rank said why. Collective. */
static int bypass_restore(const char *fn)
{
    int n = 0;
    char err[SCR_PATH_MAX + 256] = "";
    if (cairn_restart_file_count(&n) != CAIRN_OK)
        snprintf(err, sizeof err, "%s", cairn_last_error());
    size_t len = 0, cap = 0;
    char *mine = NULL;
    for (int i = 0; i < n && !err[0]; i++) {
        char name[SCR_PATH_MAX], restored[SCR_PATH_MAX];
        const char *why = NULL;
        if (cairn_restart_file_name(i, name, sizeof name) != CAIRN_OK ||
            cairn_route_file(name, restored, sizeof restored) != CAIRN_OK)
            why = cairn_last_error();
        else if (name[0] != '/' || strstr(name, "/../") || strstr(name, "/./"))
            why = "the stored name is not a normalised absolute path";
        else if ((why = bypass_dir(name)) == NULL && !scr_same_file(restored, name) &&
                 scr_copy_file(restored, name) != 0)
            why = strerror(errno);
        if (why) {
            snprintf(err, sizeof err, "checkpoint %s: cannot put %.2048s back at its path: %s",
                     S.loaded_name, name, why);
            break;
        }
        size_t l = strlen(name) + 1;
        if (len + l > cap) {
            char *grown = realloc(mine, cap = 2 * (len + l));
            if (!grown) {
                snprintf(err, sizeof err, "out of memory");
                break;
            }
            mine = grown;
        }
        memcpy(mine + len, name, l);
        len += l;
    }
    if (!agree(fn, err[0] ? err : NULL, HASH0)) {
        free(mine);
        return -1;
    }
    forget_bypass_files();
    S.bypass_files = scr_allgather_strings(S.comm, mine ? mine : "", len, &S.bypass_len, NULL);
    free(mine);
    if (!S.bypass_files) {
        if (S.rank == 0)
            scr_say(fn, "out of memory gathering the files of checkpoint %s", S.loaded_name);
        return -1;
    }
    return 0;
}

/* Without SCR_CACHE_BYPASS, after a dataset was found invalid: name the files several ranks
 * routed, the likely reason (each rank writes its own copy in its own cache). Collective. */
static void explain_shared(const char *fn)
{
    size_t total = 0, *starts = NULL;
    char *all = gather_routed(&total, &starts);
    if (all && S.rank == 0) {
        int size;
        MPI_Comm_size(S.comm, &size);
        for (int r = 1; r < size; r++)
            for (size_t at = starts[r]; at < starts[r + 1]; at += strlen(all + at) + 1)
                if (holds(all, 0, starts[r], all + at)) {
                    scr_say(fn, "%s was routed by more than one rank: a file shared by ranks "
                                "needs SCR_CACHE_BYPASS=1 (files at their own paths under "
                                "SCR_PREFIX); cached, each rank has its own copy", all + at);
                    r = size;
                    break;
                }
    }
    free(all);
    free(starts);
}

SCR_API int SCR_Route_file(const char *name, char *file)
{
    const char *fn = "SCR_Route_file";
    if (!ready(fn))
        return SCR_FAILURE;
    if (!name || !file || !*name) {
        scr_say(fn, "the name is NULL or empty, or the buffer is NULL");
        return SCR_FAILURE;
    }
    if (S.phase != OUTPUT && S.phase != RESTART) {
        /* Outside output and restart SCR returns the name as it is. */
        size_t len = strlen(name);
        if (len >= SCR_MAX_FILENAME) {
            scr_say(fn, "%.64s... is longer than SCR_MAX_FILENAME", name);
            return SCR_FAILURE;
        }
        memmove(file, name, len + 1);
        return SCR_SUCCESS;
    }
    /* Files are known by their absolute paths, so a relative name routed from the same
     * directory finds its file, as in SCR. */
    char path[SCR_PATH_MAX];
    if (scr_abspath(name, path, sizeof path) != 0) {
        scr_say(fn, "%.64s...: the path is too long (or the current directory unknown)", name);
        return SCR_FAILURE;
    }
    if (S.set.bypass)
        return bypass_route(fn, name, path, file);
    int rc = cairn_route_file(path, file, SCR_MAX_FILENAME);
    /* SCR 1.x looked a file up at restart by its bare name, wherever it was written. */
    if (rc == CAIRN_ERR_NOT_FOUND && S.phase == RESTART && !strchr(name, '/'))
        rc = cairn_route_file(name, file, SCR_MAX_FILENAME);
    if (rc == CAIRN_ERR_NOT_FOUND) {
        /* Applications probe for optional files this way: quiet unless debugging. */
        if (S.set.debug)
            scr_say(fn, "%s is not a file of checkpoint %s", path, S.loaded_name);
        return SCR_FAILURE;
    }
    if (rc != CAIRN_OK) {
        scr_say(fn, "%s (%s)", cairn_last_error(), cairn_strerror(rc));
        return SCR_FAILURE;
    }
    return S.phase == OUTPUT ? remember_routed(fn, path) : SCR_SUCCESS;
}

/* ---- Output --------------------------------------------------------------------------------- */

SCR_API int SCR_Start_output(const char *name, int flags)
{
    const char *fn = "SCR_Start_output";
    if (!ready(fn) || unload(fn) != SCR_SUCCESS)
        return SCR_FAILURE;
    char generated[64];
    if (!name) {
        snprintf(generated, sizeof generated, "dataset.%" PRId64, S.ix.next);
        name = generated;
    }
    const char *err = busy();
    if (!err && (flags & ~(SCR_FLAG_CHECKPOINT | SCR_FLAG_OUTPUT)))
        err = "flags holds bits other than SCR_FLAG_CHECKPOINT and SCR_FLAG_OUTPUT";
    else if (!err && !flags)
        err = "flags must hold SCR_FLAG_CHECKPOINT, SCR_FLAG_OUTPUT or both";
    else if (!err && (!*name || strlen(name) >= SCR_MAX_FILENAME || strchr(name, '\n')))
        err = "the name is empty, contains a newline, or is not shorter than SCR_MAX_FILENAME";
    uint64_t sum = hash(HASH0 ^ (uint64_t)flags, name);
    if (!agree(fn, err, sum))
        return SCR_FAILURE;
    int cflags = ((flags & SCR_FLAG_CHECKPOINT) ? CAIRN_FLAG_CHECKPOINT : 0) |
                 ((flags & SCR_FLAG_OUTPUT) ? CAIRN_FLAG_OUTPUT : 0);
    /* Bypassed, the files are at their own paths already: Cairn stores a checkpoint's, and
     * has nothing to copy out for an output (which routes nothing through it). */
    if (S.set.bypass)
        cflags = (flags & SCR_FLAG_CHECKPOINT) ? CAIRN_FLAG_CHECKPOINT : CAIRN_FLAG_OUTPUT;
    int rc = cairn_start_output(SCR_CKPT_NAME, S.ix.next, cflags, name);
    if (rc != CAIRN_OK)
        return cairn_failed(fn, rc);
    S.out_id = S.ix.next++;
    S.out_flags = flags;
    snprintf(S.out_name, sizeof S.out_name, "%s", name);
    forget_routed();
    S.phase = OUTPUT;
    return SCR_SUCCESS;
}

SCR_API int SCR_Start_checkpoint(void)
{
    return SCR_Start_output(NULL, SCR_FLAG_CHECKPOINT);
}

/* Rank 0 writes the output files every rank routed into dataset `id` (`all`, `total` bytes:
 * gather_routed's, NULL when memory ran out) to the list SCR_Delete reads (NUL-separated
 * paths), through a temporary file. Local. */
static void save_output_list(int64_t id, const char *all, size_t total)
{
    if (S.rank != 0)
        return;
    char path[SCR_PATH_MAX + 64], tmp[SCR_PATH_MAX + 96];
    scr_index_files_path(&S.ix, id, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = all ? fopen(tmp, "wb") : NULL;
    int ok = f && fwrite(all, 1, total, f) == total;
    ok = f && fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        scr_say("SCR_Complete_output", "cannot write %s: %s; SCR_Delete of %s will not remove "
                                       "its output files", path,
                all ? strerror(errno) : "out of memory", S.out_name);
        unlink(tmp);
    }
}

SCR_API int SCR_Complete_output(int valid)
{
    const char *fn = "SCR_Complete_output";
    if (!ready(fn) ||
        !agree(fn, S.phase == OUTPUT ? NULL : "no output was started (SCR_Start_output)", HASH0))
        return SCR_FAILURE;
    int kept = 0;
    /* What every rank routed: bypassed, to store each file once, and for an output's list. */
    size_t total = 0, *starts = NULL;
    char *all = NULL;
    if (S.set.bypass) {
        all = gather_routed(&total, &starts);
        if (!all && S.rank == 0)
            scr_say(fn, "out of memory gathering the routed files");
        valid = all && bypass_store(fn, valid, all, starts);
    }
    int rc = cairn_complete_output(valid ? 1 : 0, &kept);
    S.phase = IDLE;
    if (rc != CAIRN_OK) {
        free(all);
        free(starts);
        forget_routed();
        return cairn_failed(fn, rc);
    }
    if (kept) {
        /* Bypassed, a checkpoint's files are at their paths as an output's are: listed for
         * SCR_Delete, and left there when the checkpoint goes. */
        int flags = S.out_flags | (S.set.bypass ? SCR_FLAG_OUTPUT : 0);
        if (scr_index_add(&S.ix, S.out_id, flags, S.out_name) != 0 && S.rank == 0)
            scr_say(fn, "out of memory for the index; %s is stored but not indexed", S.out_name);
        if (flags & SCR_FLAG_OUTPUT) {
            if (!S.set.bypass)
                all = gather_routed(&total, NULL);
            save_output_list(S.out_id, all, total);
        }
        scr_index_save(&S.ix, S.rank);
    } else {
        if (S.rank == 0)
            scr_say(fn, "dataset %s is invalid on at least one rank; it is not kept",
                    S.out_name);
        if (!S.set.bypass)
            explain_shared(fn);
    }
    free(all);
    free(starts);
    forget_routed();
    return kept ? SCR_SUCCESS : SCR_FAILURE;
}

SCR_API int SCR_Complete_checkpoint(int valid)
{
    return SCR_Complete_output(valid);
}

/* ---- Restart -------------------------------------------------------------------------------- */

/*
 * SCR_CURRENT: pass over every checkpoint newer than the named one, so that the restart
 * offers it. Returns 0, or -1 after rank 0 said why. Collective.
 */
static int pick_current(const char *fn)
{
    struct scr_entry *e = scr_index_find(&S.ix, S.set.current);
    if (!e || !(e->flags & SCR_FLAG_CHECKPOINT)) {
        if (S.rank == 0)
            scr_say(fn, "SCR_CURRENT=%s names no checkpoint of this prefix (%s)",
                    S.set.current, S.set.prefix);
        return -1;
    }
    int64_t want = e->id, v = -1;
    int rc;
    while ((rc = cairn_have_restart(SCR_CKPT_NAME, &v)) == CAIRN_OK && v > want)
        cairn_drop(SCR_CKPT_NAME, v);
    if (rc != CAIRN_OK)
        return step_failed(fn, rc);
    if (v != want) {
        if (S.rank == 0)
            scr_say(fn, "SCR_CURRENT=%s: that checkpoint cannot be restored by every rank",
                    S.set.current);
        return -1;
    }
    return 0;
}

/*
 * Load the newest checkpoint to restart from (IDLE -> LOADED). Versions the index marks
 * invalid or dropped are passed over first, and again should Cairn's own fallback past a
 * damaged version land on one. Returns 1 when loaded, 0 when there is none, -1 on failure
 * (said). Collective.
 */
static int load(const char *fn)
{
    if (S.set.current[0] && !S.current_done) {
        S.current_done = 1;
        if (pick_current(fn) != 0)
            return -1;
    }
    for (;;) {
        int64_t v = -1;
        struct scr_entry *e;
        int rc;
        while ((rc = cairn_have_restart(SCR_CKPT_NAME, &v)) == CAIRN_OK && v >= 0 &&
               (e = entry_of(v)) && e->state != SCR_DS_OK)
            cairn_drop(SCR_CKPT_NAME, v);
        if (rc != CAIRN_OK)
            return step_failed(fn, rc);
        if (v < 0)
            return 0;
        if ((rc = cairn_start_restart(SCR_CKPT_NAME, 0, &v)) != CAIRN_OK)
            return step_failed(fn, rc);
        if (v < 0)
            return 0;
        if ((e = entry_of(v)) && e->state != SCR_DS_OK) {
            if ((rc = cairn_complete_restart(0, NULL)) != CAIRN_OK)
                return step_failed(fn, rc);
            continue;
        }
        if ((rc = cairn_restart_label(S.loaded_name, sizeof S.loaded_name)) != CAIRN_OK)
            snprintf(S.loaded_name, sizeof S.loaded_name, "dataset.%" PRId64, v);
        if (S.set.bypass && bypass_restore(fn) != 0) {
            cairn_complete_restart(1, NULL);
            return -1;
        }
        S.loaded_id = v;
        S.phase = LOADED;
        S.loaded_once = 1;
        /* Cairn's restart removed every version newer than v from its tiers: those datasets
         * are no checkpoints any more (their output files stay where they are). */
        int changed = 0;
        for (size_t i = S.ix.n; i-- > 0;) {
            struct scr_entry *x = &S.ix.e[i];
            if (x->id <= v || !(x->flags & SCR_FLAG_CHECKPOINT))
                continue;
            x->flags &= ~SCR_FLAG_CHECKPOINT;
            if (!x->flags)
                scr_index_remove(&S.ix, x);
            changed = 1;
        }
        if (changed)
            scr_index_save(&S.ix, S.rank);
        return 1;
    }
}

/* Copy the loaded checkpoint's name to an application buffer (SCR_MAX_FILENAME bytes). */
static void give_name(char *name)
{
    if (name)
        snprintf(name, SCR_MAX_FILENAME, "%s", S.loaded_name);
}

SCR_API int SCR_Have_restart(int *flag, char *name)
{
    const char *fn = "SCR_Have_restart";
    if (flag)
        *flag = 0;
    if (!ready(fn) || !agree(fn, flag ? busy() : "flag is NULL", HASH0))
        return SCR_FAILURE;
    int got = S.phase == LOADED ? 1 : load(fn);
    if (got < 0)
        return SCR_FAILURE;
    *flag = got;
    if (got)
        give_name(name);
    else if (name)
        name[0] = '\0';
    return SCR_SUCCESS;
}

SCR_API int SCR_Start_restart(char *name)
{
    const char *fn = "SCR_Start_restart";
    if (!ready(fn) || !agree(fn, busy(), HASH0))
        return SCR_FAILURE;
    int got = S.phase == LOADED ? 1 : load(fn);
    if (got <= 0) {
        if (got == 0 && S.rank == 0)
            scr_say(fn, "there is no checkpoint to restart from (SCR_Have_restart reports 0)");
        return SCR_FAILURE;
    }
    S.phase = RESTART;
    give_name(name);
    return SCR_SUCCESS;
}

SCR_API int SCR_Complete_restart(int valid)
{
    const char *fn = "SCR_Complete_restart";
    if (!ready(fn) ||
        !agree(fn, S.phase == RESTART ? NULL : "no restart was started (SCR_Start_restart)",
               HASH0))
        return SCR_FAILURE;
    int all = 0;
    int rc = cairn_complete_restart(valid ? 1 : 0, &all);
    S.phase = IDLE;
    forget_bypass_files();
    if (rc != CAIRN_OK)
        return cairn_failed(fn, rc);
    if (all)
        return SCR_SUCCESS;
    /* Cairn passes over it for the rest of this run; the index, for later runs. */
    struct scr_entry *e = entry_of(S.loaded_id);
    if (e) {
        e->state = SCR_DS_INVALID;
        scr_index_save(&S.ix, S.rank);
    }
    if (S.rank == 0)
        scr_say(fn, "checkpoint %s was found invalid on at least one rank; it is never "
                    "restarted from again, and SCR_Have_restart offers the next older one",
                S.loaded_name);
    return SCR_FAILURE;
}

/* ---- Datasets ------------------------------------------------------------------------------- */

/* The start of SCR_Current, SCR_Drop and SCR_Delete: ready, the loaded checkpoint put back,
 * the same name on every rank. Returns its index entry (NULL after a message). Collective. */
static struct scr_entry *named(const char *fn, const char *name)
{
    if (!ready(fn) || unload(fn) != SCR_SUCCESS)
        return NULL;
    const char *err = name ? busy() : "the name is NULL";
    if (!agree(fn, err, name ? hash(HASH0, name) : HASH0))
        return NULL;
    struct scr_entry *e = scr_index_find(&S.ix, name);
    if (!e && S.rank == 0)
        scr_say(fn, "no dataset is named %s (in %s)", name, S.ix.dir);
    return e;
}

/* A dataset dropped or deleted is no longer the one to restart from. */
static void forget_current(const char *name)
{
    if (!S.current_done && strcmp(S.set.current, name) == 0)
        S.set.current[0] = '\0';
}

SCR_API int SCR_Current(const char *name)
{
    /* Before the run's first restart, as SCR: the restart loads this checkpoint (the newer
     * ones are passed over), as SCR_CURRENT does. Afterwards dataset ids only grow, so
     * datasets written from here on are ordered after it already; what is left is to check
     * that the application names a dataset SCR knows. */
    struct scr_entry *e = named("SCR_Current", name);
    if (!e)
        return SCR_FAILURE;
    if (!S.loaded_once) {
        snprintf(S.set.current, sizeof S.set.current, "%s", name);
        S.current_done = 0;
    }
    return SCR_SUCCESS;
}

SCR_API int SCR_Drop(const char *name)
{
    struct scr_entry *e = named("SCR_Drop", name);
    if (!e)
        return SCR_FAILURE;
    forget_current(name);
    e->state = SCR_DS_DROPPED;
    scr_index_save(&S.ix, S.rank);
    return SCR_SUCCESS;
}

/* Whether `path`, read from a stored list, names a file inside the prefix: the list is data
 * on disk, and only what lies under the prefix, with no ".." step and a parent directory that
 * resolves (symbolic links followed) inside the prefix too, may be removed. */
static int inside_prefix(const char *path, size_t plen)
{
    if (strncmp(path, S.set.prefix, plen) != 0 || path[plen] != '/' || strstr(path, "/../") ||
        (strlen(path) >= 3 && strcmp(path + strlen(path) - 3, "/..") == 0))
        return 0;
    char parent[SCR_PATH_MAX];
    snprintf(parent, sizeof parent, "%s", path);
    char *slash = strrchr(parent, '/');
    if (!slash)
        return 0;
    *slash = '\0';
    char *real_parent = realpath(parent, NULL), *real_prefix = realpath(S.set.prefix, NULL);
    int ok = 0;
    if (real_parent && real_prefix) {
        size_t rl = strlen(real_prefix);
        ok = strncmp(real_parent, real_prefix, rl) == 0 &&
             (real_parent[rl] == '/' || real_parent[rl] == '\0');
    }
    free(real_parent);
    free(real_prefix);
    return ok;
}

/* Rank 0: remove the output files of dataset `id` and the directories they leave empty below
 * the prefix. Returns 0, or -1 (said). */
static int remove_outputs(int64_t id)
{
    char list[SCR_PATH_MAX + 64];
    scr_index_files_path(&S.ix, id, list, sizeof list);
    FILE *f = fopen(list, "rb");
    if (!f) {
        scr_say("SCR_Delete", "cannot read the list of output files %s: %s", list,
                strerror(errno));
        return -1;
    }
    int ok = 1;
    size_t plen = strlen(S.set.prefix);
    char path[SCR_PATH_MAX];
    int ch;
    size_t n = 0;
    int too_long = 0;
    while ((ch = fgetc(f)) != EOF) {
        if (ch != '\0') {
            if (n + 1 < sizeof path)
                path[n++] = (char)ch;
            else
                too_long = 1;
            continue;
        }
        path[n] = '\0';
        n = 0;
        if (too_long || !inside_prefix(path, plen)) {
            scr_say("SCR_Delete", "%s lists %s, which is not a file under %s: not removed", list,
                    path, S.set.prefix);
            too_long = 0;
            ok = 0;
            continue;
        }
        if (unlink(path) != 0 && errno != ENOENT) {
            scr_say("SCR_Delete", "cannot remove %s: %s", path, strerror(errno));
            ok = 0;
            continue;
        }
        for (char *slash = strrchr(path, '/'); slash && (size_t)(slash - path) > plen;
             slash = strrchr(path, '/')) {
            *slash = '\0';
            if (strncmp(path, S.set.prefix, plen) != 0 || path[plen] != '/' || rmdir(path) != 0)
                break;
        }
    }
    fclose(f);
    if (ok)
        unlink(list);
    return ok ? 0 : -1;
}

SCR_API int SCR_Delete(const char *name)
{
    const char *fn = "SCR_Delete";
    struct scr_entry *e = named(fn, name);
    if (!e)
        return SCR_FAILURE;
    forget_current(name);
    int64_t id = e->id;
    int flags = e->flags;
    if (flags & SCR_FLAG_CHECKPOINT) {
        int rc = cairn_delete(SCR_CKPT_NAME, id);
        if (rc != CAIRN_OK)
            return cairn_failed(fn, rc);
    }
    int ok = 1;
    if ((flags & SCR_FLAG_OUTPUT) && S.rank == 0)
        ok = remove_outputs(id) == 0;
    MPI_Bcast(&ok, 1, MPI_INT, 0, S.comm);
    scr_index_remove(&S.ix, entry_of(id));
    scr_index_save(&S.ix, S.rank);
    return ok ? SCR_SUCCESS : SCR_FAILURE;
}
