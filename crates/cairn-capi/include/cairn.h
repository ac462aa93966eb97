/*
 * cairn.h: the C interface of Cairn, a multi-level checkpoint/restart library.
 *
 * Protect memory regions, checkpoint them collectively, and on start restore the newest
 * checkpoint every rank can restore. Every function returns CAIRN_OK (0) or a negative
 * CAIRN_ERR_* code; cairn_strerror() names the code and cairn_last_error() gives this
 * thread's message for the last failure. The library never aborts, exits or calls
 * MPI_Abort on the application's behalf. Functions marked "collective" must be called by
 * every rank of the communicator given to cairn_init, in the same order.
 */

#ifndef CAIRN_H
#define CAIRN_H

/* Generated from crates/cairn-capi/src/lib.rs by cbindgen; do not edit. The MPI entry points cairn_init and cairn_init_f are declared in cairn_mpi.h. */

#include <stddef.h>
#include <stdint.h>

/**
 * Success.
 */
#define CAIRN_OK 0

/**
 * A configuration file, variable or override is unknown or has a bad value.
 */
#define CAIRN_ERR_CONFIG -1

/**
 * An argument is invalid (name, version, pointer, dtype, region id).
 */
#define CAIRN_ERR_INVALID -2

/**
 * The call does not fit the library's state (not initialised, initialised twice, ...).
 */
#define CAIRN_ERR_STATE -3

/**
 * Storage failed (full disk, missing or unwritable directory).
 */
#define CAIRN_ERR_IO -4

/**
 * Stored data is damaged and nothing older could be restored.
 */
#define CAIRN_ERR_CORRUPT -5

/**
 * A checkpoint does not fit the protected regions or the job (sizes, types, rank count).
 */
#define CAIRN_ERR_MISMATCH -6

/**
 * No such checkpoint.
 */
#define CAIRN_ERR_NOT_FOUND -7

/**
 * A collective operation failed.
 */
#define CAIRN_ERR_COMM -8

/**
 * The call failed on another rank (its own message says why).
 */
#define CAIRN_ERR_PEER -9

/**
 * An internal error was caught; please report it with the message.
 */
#define CAIRN_ERR_PANIC -10

/**
 * Another job writes this checkpoint name into the same tiers (the message names it).
 */
#define CAIRN_ERR_IN_USE -11

/**
 * `cairn_start_output` flag: the dataset is a checkpoint that a restart may use.
 */
#define CAIRN_FLAG_CHECKPOINT 1

/**
 * `cairn_start_output` flag: the dataset is output: its files are copied to the paths the
 * application routed and kept there.
 */
#define CAIRN_FLAG_OUTPUT 2

/**
 * `cairn_start_output` / `cairn_start_restart` flag: the protected regions are stored with
 * the files (and restored with them).
 */
#define CAIRN_FLAG_REGIONS 4

/**
 * `cairn_start_restart` flag, with `CAIRN_FLAG_REGIONS`: a stored region that is not
 * protected when the restart begins is held in memory for `cairn_loaded_size` and
 * `cairn_loaded_copy` (until `cairn_complete_restart`) instead of failing the restart.
 */
#define CAIRN_FLAG_HOLD 8

/**
 * Element type of a protected region: one of the `CAIRN_BYTE` ... `CAIRN_UINT64` values.
 */
typedef int cairn_dtype;

/**
 * Lifecycle state of a checkpoint, from [`cairn_test`].
 */
typedef int cairn_state;

/**
 * No tier holds the checkpoint (or not on every rank).
 */
#define CAIRN_STATE_NONE 0

/**
 * Every rank's part is stored with checksums on the node-local tier.
 */
#define CAIRN_STATE_CAPTURED 1

/**
 * Captured, and protected by the redundancy scheme (`[redundancy] scheme`).
 */
#define CAIRN_STATE_PROTECTED 2

/**
 * Stored on the global tier.
 */
#define CAIRN_STATE_DURABLE 3

#define CAIRN_BYTE 0

#define CAIRN_INT32 1

#define CAIRN_INT64 2

#define CAIRN_FLOAT 3

#define CAIRN_DOUBLE 4

#define CAIRN_INT8 5

#define CAIRN_INT16 6

#define CAIRN_UINT32 7

#define CAIRN_UINT64 8

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

/**
 * Start Cairn in a single process, without MPI.
 *
 * `config_path` [IN]: a TOML configuration file, or NULL to use `$CAIRN_CONFIG` or defaults.
 *
 * # Safety
 * `config_path` must be NULL or a NUL-terminated string.
 */
int cairn_init_solo(const char *config_path);

/**
 * Override one configuration key before `cairn_init`, e.g. `("cache.keep", "3")`. Overrides
 * beat the file and `CAIRN_*` variables. The key is checked at once.
 *
 * # Safety
 * `key` and `value` must be NUL-terminated strings.
 */
int cairn_config_set(const char *key, const char *value);

/**
 * Finish: make the newest checkpoint of each name durable (unless `[checkpoint] finalize =
 * false`), wait for background work and release everything. Collective. Protected regions
 * are forgotten; configuration overrides are kept for a later `cairn_init`. A failed final
 * flush is reported after everything is released.
 */
int cairn_finalize(void);

/**
 * Protect `count` elements of type `dtype` at `ptr` under `id`. Protecting an id again
 * replaces its region. A region may be empty (`count` 0, `ptr` may then be NULL).
 *
 * # Safety
 * `ptr` must point to `count` elements of `dtype` that stay valid and unmoved until the
 * region is unprotected or Cairn is finalised.
 */
int cairn_protect(int id, void *ptr, uintptr_t count, cairn_dtype dtype);

/**
 * Stop protecting region `id`.
 */
int cairn_unprotect(int id);

/**
 * Write checkpoint `version` of `name` from all protected regions. Collective; returns once
 * the checkpoint is captured on every rank. Versions of a name must increase within a run.
 *
 * # Safety
 * `name` must be a NUL-terminated string.
 */
int cairn_checkpoint(const char *name, int64_t version);

/**
 * `cairn_checkpoint` with the redundancy scheme (`redundant` 1) or without it (0), whatever
 * `[redundancy] every` schedules: for libraries whose levels choose per checkpoint (FTI's
 * level 1 versus 2 and 3). Every rank must pass the same. Collective.
 *
 * # Safety
 * `name` must be a NUL-terminated string.
 */
int cairn_checkpoint_redundant(const char *name, int64_t version, int redundant);

/**
 * Set `*version` to the newest version of `name` every rank can restore, or -1. Collective.
 *
 * # Safety
 * `name` must be a NUL-terminated string and `version` a valid pointer.
 */
int cairn_restart_test(const char *name, int64_t *version);

/**
 * Set `*version` to the newest version of `name` no newer than `upto` that every rank can
 * restore, or -1. Collective.
 *
 * # Safety
 * `name` must be a NUL-terminated string and `version` a valid pointer.
 */
int cairn_restart_test_upto(const char *name, int64_t upto, int64_t *version);

/**
 * Delete version `version` of checkpoint `name` from every tier. A version that a newer
 * incremental checkpoint is based on is refused (`CAIRN_ERR_INVALID`); a version that does
 * not exist is no error. Collective.
 *
 * # Safety
 * `name` must be a NUL-terminated string.
 */
int cairn_delete(const char *name, int64_t version);

/**
 * Fill the protected regions from checkpoint `version` of `name`. Collective. If it is
 * damaged on any rank, the newest older checkpoint every rank can restore is used instead
 * (a message names the damage); `cairn_restart_version` tells which version was restored.
 *
 * # Safety
 * `name` must be a NUL-terminated string.
 */
int cairn_restart(const char *name, int64_t version);

/**
 * Remove from the node-local tier every version of `name` that is durable on the global
 * tier, after waiting for the flushes under way; a version stored nowhere else is kept.
 * `*removed` (may be NULL) is set to the number of versions removed. Collective.
 *
 * # Safety
 * `name` must be a NUL-terminated string; `removed` NULL or a valid pointer.
 */
int cairn_evict(const char *name, int *removed);

/**
 * Set `*busy` to 1 while this rank still copies a checkpoint to the global tier, else 0.
 * Local: never blocks, never waits for another rank.
 *
 * # Safety
 * `busy` must be a valid pointer.
 */
int cairn_flushing(int *busy);

/**
 * Set `*version` to the version restored by the last restart in this run, or -1.
 *
 * # Safety
 * `version` must be a valid pointer.
 */
int cairn_restart_version(int64_t *version);

/**
 * Set `*flag` to 1 if the configured policy (`[checkpoint] every` / `seconds`) says a
 * checkpoint is due, or if the run must stop (a SIGTERM / SIGUSR1 / SIGUSR2 with `[exit]
 * signals`, the default; the time limit as near as `cairn_should_exit` counts it; or what
 * `cairn_should_exit` already said) and no checkpoint was taken since; else 0. So a program
 * that only calls this (or `cairn_checkpoint_if_due`) still takes a last checkpoint. Each
 * call counts as one step, and the first one takes SIGTERM. Collective when a time policy
 * is set or a stop can come (`[exit] signals`, the default, or a known time limit): all
 * ranks get the same answer.
 *
 * # Safety
 * `flag` must be a valid pointer.
 */
int cairn_need_checkpoint(int *flag);

/**
 * One-line restart: if a checkpoint of `name` exists, restore the newest one every rank can
 * restore and set `*version` to it; otherwise set `*version` to -1 and leave the regions
 * alone. Collective. `version` may be NULL.
 *
 * # Safety
 * `name` must be a NUL-terminated string; `version` NULL or a valid pointer.
 */
int cairn_resume(const char *name, int64_t *version);

/**
 * One-line checkpoint: checkpoint `version` of `name` if `cairn_need_checkpoint` says one is
 * due (which includes a last checkpoint once the run must stop). Collective.
 *
 * # Safety
 * `name` must be a NUL-terminated string.
 */
int cairn_checkpoint_if_due(const char *name, int64_t version);

/**
 * Set `*state` to the lifecycle state of checkpoint `version` of `name` (one of the
 * `CAIRN_STATE_*` values), after publishing the background flushes that have finished on
 * every rank. Collective; never waits for a flush.
 *
 * # Safety
 * `name` must be a NUL-terminated string; `state` a valid pointer.
 */
int cairn_test(const char *name, int64_t version, int *state);

/**
 * Wait until checkpoint `version` of `name` is durable on the global tier, starting its flush
 * if none is under way. Collective. Fails (on every rank) if a rank's copy failed; the
 * checkpoint then stays restart-eligible on the node-local tier.
 *
 * # Safety
 * `name` must be a NUL-terminated string.
 */
int cairn_wait(const char *name, int64_t version);

/**
 * Wait until every flush under way has ended, and publish the checkpoints that became
 * durable. Never starts a flush (unlike `cairn_wait`); a flush that failed leaves its
 * checkpoint on the node-local tier, and `cairn_test` / `cairn_wait` report it. Collective.
 */
int cairn_wait_flushes(void);

/**
 * Set `*flag` to 1 when the run should stop now: the job's time limit is near enough that
 * only a last checkpoint and its flush fit (`[exit] time_limit`, or the end of the Slurm
 * job, less `[exit] margin`), the halt file exists, or SIGTERM / SIGUSR1 / SIGUSR2 arrived
 * (with `[exit] signals`, the default; the first call takes SIGTERM); else 0. Collective:
 * every rank gets the same answer, and once 1 it stays 1.
 *
 * # Safety
 * `flag` must be a valid pointer.
 */
int cairn_should_exit(int *flag);

/**
 * A short description of an error code. The string is static.
 */
const char *cairn_strerror(int code);

/**
 * This thread's message for the last failed call ("" if none). The pointer stays valid until
 * the next failing Cairn call on this thread.
 */
const char *cairn_last_error(void);

/**
 * The user name in Cairn's default paths (`/dev/shm/cairn-<user>`): the login name of the
 * effective user id in the user database, else `uid<N>`; never `$USER`. The string is
 * static.
 */
const char *cairn_user_name(void);

/**
 * Begin dataset `version` of `name`: files routed until `cairn_complete_output` belong to
 * it. `flags`: `CAIRN_FLAG_CHECKPOINT` and/or `CAIRN_FLAG_OUTPUT`, plus `CAIRN_FLAG_REGIONS`
 * to store the protected regions with the files. `label` (may be NULL) is the application's
 * own name for the dataset, given back by `cairn_restart_label`. Collective.
 *
 * # Safety
 * `name` must be a NUL-terminated string; `label` NULL or a NUL-terminated string.
 */
int cairn_start_output(const char *name, int64_t version, int flags, const char *label);

/**
 * Put into `path` (a buffer of `len` bytes) where this rank must write `file` during an
 * output, or read it during a restart; outside both, `file` itself. An output's files are
 * staged privately under the node-local tier; a restart's are restored there. Fails with
 * `CAIRN_ERR_NOT_FOUND` during a restart for a file the checkpoint does not hold, and with
 * `CAIRN_ERR_INVALID` if `path` is too small (the message says how large it must be; 4096
 * bytes is always enough for a name that fits PATH_MAX). Local: no other rank takes part.
 *
 * # Safety
 * `file` must be a NUL-terminated string; `path` valid for `len` bytes of writes.
 */
int cairn_route_file(const char *file, char *path, uintptr_t len);

/**
 * End the output begun by `cairn_start_output`. `valid` is this rank's verdict on its files;
 * a routed file that was never written counts as invalid. When every rank's files are valid
 * the dataset is stored (checkpoint) and/or copied to its paths (output) and `*kept` is set
 * to 1; otherwise nothing is kept and `*kept` is 0. `kept` may be NULL. Collective.
 *
 * # Safety
 * `kept` must be NULL or a valid pointer.
 */
int cairn_complete_output(int valid, int *kept);

/**
 * Set `*version` to the newest version of checkpoint `name` that every rank can restore
 * and no rank has found invalid in this run (`cairn_complete_restart`), or -1. Collective.
 *
 * # Safety
 * `name` must be a NUL-terminated string; `version` a valid pointer.
 */
int cairn_have_restart(const char *name, int64_t *version);

/**
 * Restore the checkpoint of `name` that `cairn_have_restart` offers: its files (found with
 * `cairn_route_file` until `cairn_complete_restart`), and with `CAIRN_FLAG_REGIONS` in
 * `flags` the protected regions too. A damaged version falls back to an older one. Sets
 * `*version` to the version restored, or -1 when there is none (then nothing changes).
 * `version` may be NULL. Collective.
 *
 * # Safety
 * `name` must be a NUL-terminated string; `version` NULL or a valid pointer.
 */
int cairn_start_restart(const char *name, int flags, int64_t *version);

/**
 * `cairn_start_restart` from the newest version no newer than `upto` (and not passed over).
 * Collective.
 *
 * # Safety
 * As `cairn_start_restart`.
 */
int cairn_start_restart_upto(const char *name, int64_t upto, int flags, int64_t *version);

/**
 * Put into `label` (a buffer of `len` bytes) the dataset name given to `cairn_start_output`
 * for the checkpoint being restarted from ("" if none was given, or no restart is under
 * way). Local.
 *
 * # Safety
 * `label` must be valid for `len` bytes of writes.
 */
int cairn_restart_label(char *label, uintptr_t len);

/**
 * Set `*count` to the number of files of the restart under way (0 when none is). Local.
 *
 * # Safety
 * `count` must be a valid pointer.
 */
int cairn_restart_file_count(int *count);

/**
 * Put into `name` (a buffer of `len` bytes) the name, as it was routed, of file `index`
 * (0 to `cairn_restart_file_count` - 1, in name order) of the restart under way. Local.
 *
 * # Safety
 * `name` must be valid for `len` bytes of writes.
 */
int cairn_restart_file_name(int index, char *name, uintptr_t len);

/**
 * End the restart begun by `cairn_start_restart`. `valid` is this rank's verdict on the
 * files it read; if any rank says 0, every rank passes over that version, and the next
 * `cairn_have_restart` / `cairn_start_restart` offers the newest one older than it.
 * `*all_valid` (may be NULL) tells whether every rank said 1. Collective.
 *
 * # Safety
 * `all_valid` must be NULL or a valid pointer.
 */
int cairn_complete_restart(int valid, int *all_valid);

/**
 * Never restart from `version` of `name` in this run (its data stays stored). Local, but
 * to keep every rank's choice the same, call it on every rank.
 *
 * # Safety
 * `name` must be a NUL-terminated string.
 */
int cairn_drop(const char *name, int64_t version);

/**
 * Read checkpoint `version` of `name` (on damage, the newest older one every rank can
 * restore; `cairn_restart_version` tells which) into memory Cairn holds, restoring no
 * protected region: its regions need not be protected. It is a restart in every other way
 * (newer versions are passed over). Replaces what was loaded before. Collective.
 *
 * # Safety
 * `name` must be a NUL-terminated string.
 */
int cairn_load(const char *name, int64_t version);

/**
 * Set `*bytes` to the stored size of region `id` in the checkpoint last loaded
 * (`CAIRN_ERR_NOT_FOUND` if it holds no such region). Local.
 *
 * # Safety
 * `bytes` must be a valid pointer.
 */
int cairn_loaded_size(int id, uint64_t *bytes);

/**
 * Copy region `id` of the checkpoint last loaded into `ptr`, a buffer of `len` bytes, at
 * least the stored size (`cairn_loaded_size`); bytes past it are left alone. A region a
 * restart restored in place already is an error. Local.
 *
 * # Safety
 * `ptr` must be valid for `len` bytes of writes.
 */
int cairn_loaded_copy(int id, void *ptr, uint64_t len);

/**
 * Set `*bytes` to the stored size of region `id` in this rank's part of checkpoint
 * `version` of `name`, read from the part's index without restoring anything
 * (`CAIRN_ERR_NOT_FOUND` when the part or the region is not there). Local.
 *
 * # Safety
 * `name` must be a NUL-terminated string and `bytes` a valid pointer.
 */
int cairn_stored_size(const char *name, int64_t version, int id, uint64_t *bytes);

/**
 * Release what was loaded. Local.
 */
int cairn_unload(void);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* CAIRN_H */
