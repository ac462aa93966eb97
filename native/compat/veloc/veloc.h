/*
 * veloc.h: VeloC's public C API (Very Low Overhead Checkpointing, Argonne), implemented by
 * Cairn. Applications written against VeloC compile unchanged against this header and link
 * with -lveloc; their checkpoints then go through Cairn (its node-local and global tiers,
 * erasure coding, checksums, flushes and restart selection). docs/migrate-veloc.md says what
 * maps to what and where the behaviour differs.
 *
 * Every function returns VELOC_SUCCESS or VELOC_FAILURE (VELOC_Restart_test returns a version
 * or VELOC_FAILURE); a failure prints one line naming the cause on standard error. The library
 * never aborts, exits or calls MPI_Abort. Functions marked "collective" must be called by
 * every process of the communicator given to VELOC_Init, in the same order; the others are
 * local. Call the library from one thread at a time.
 *
 * The header is divided into: initialising and finalising; memory registration; files;
 * checkpoints; restarts. It declares the functions of VeloC 1.6 and of its later releases
 * (named region groups, selective checkpoints, VELOC_Cleanup, VELOC_Recover_size).
 */
#ifndef VELOC_H
#define VELOC_H

#include <stddef.h>

#include <mpi.h>

/* Return codes, limits and modes: veloc/defs.h, shared with the C++ API (veloc.hpp). */
#include "veloc/defs.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Initialising and finalising ------------------------------------------------------- */

/*
 * Start VeloC over the processes of comm, which checkpoint and restart as a group. Collective
 * over comm; call it after MPI_Init.
 *   comm     [IN] an intra-communicator (typically MPI_COMM_WORLD)
 *   cfg_file [IN] the VeloC configuration file (`key = value` lines: scratch, persistent,
 *                 mode, ec_interval, persistent_interval, max_versions, ...). A setting Cairn
 *                 has no equivalent for is reported once on standard error by rank 0; a
 *                 missing file or a bad value is a failure on every process.
 */
int VELOC_Init(MPI_Comm comm, const char *cfg_file);

/*
 * Start VeloC in this process alone: it checkpoints and restarts independently of any other
 * process (VELOC_Restart_test returns the newest version of this process). Local.
 *   id       [IN] an identifier unique among the processes sharing the storage
 *   cfg_file [IN] the VeloC configuration file, as for VELOC_Init
 */
int VELOC_Init_single(unsigned int id, const char *cfg_file);

/*
 * Shut VeloC down. Collective. No VeloC function may be called afterwards (until a new
 * VELOC_Init); call it before MPI_Finalize.
 *   drain [IN] non-zero: wait for the flushes of checkpoints to persistent storage that are
 *              pending; 0: do not wait for more than the flushes already copying
 */
int VELOC_Finalize(int drain);

/* ---- Memory registration --------------------------------------------------------------- */

/*
 * Register count elements of base_size bytes at ptr as region id, saved by every checkpoint
 * that calls VELOC_Checkpoint_mem and restored by VELOC_Recover_mem. Registering an id again
 * replaces its region; count 0 removes it. Local.
 *   id        [IN] the application's identifier of the region, >= 0, unique in this process
 *   ptr       [IN] the start of the region; it must stay valid until it is unregistered
 *   count     [IN] the number of elements
 *   base_size [IN] the size of one element in bytes
 */
int VELOC_Mem_protect(int id, void *ptr, size_t count, size_t base_size);

/*
 * VELOC_Mem_protect into the region group name: a checkpoint whose name has a group of its
 * own saves that group's regions, any other checkpoint the regions registered with
 * VELOC_Mem_protect (the default group). Local.
 */
int VELOC_Region_protect(int id, void *ptr, size_t count, size_t base_size, const char *name);

/* Unregister region id (of the default group). Local. */
int VELOC_Mem_unprotect(int id);

/* Unregister region id of the group name. Local. */
int VELOC_Region_unprotect(int id, const char *name);

/* Unregister every region of the default group. Local. */
int VELOC_Mem_clear(void);

/* Unregister every region of the group name. Local. */
int VELOC_Region_clear(const char *name);

/* ---- Files ----------------------------------------------------------------------------- */

/*
 * Between VELOC_Checkpoint_begin and VELOC_Checkpoint_end: where this process must write the
 * checkpoint file it calls original. Between VELOC_Restart_begin and VELOC_Restart_end: where
 * it finds that file again, restored. Local.
 *   original [IN]  the application's name for the file (the same name at checkpoint and
 *                  restart)
 *   routed   [OUT] a buffer of at least VELOC_MAX_NAME characters for the path to open
 */
int VELOC_Route_file(const char *original, char *routed);

/* ---- Checkpoints ----------------------------------------------------------------------- */

/*
 * Begin checkpoint version of name. Collective.
 *   name    [IN] the label of the checkpoint (letters, digits, '.', '_' and '-')
 *   version [IN] >= 0, increasing from one checkpoint of name to the next
 */
int VELOC_Checkpoint_begin(const char *name, int version);

/* Save the registered memory regions in the checkpoint begun. Local. */
int VELOC_Checkpoint_mem(void);

/*
 * Save some of the registered memory regions in the checkpoint begun; an empty selection is
 * a failure. Local.
 *   mode     [IN] VELOC_CKPT_ALL (ids is ignored), VELOC_CKPT_SOME (the regions in ids) or
 *                 VELOC_CKPT_REST (every region not in ids)
 *   ids      [IN] region ids
 *   id_count [IN] the number of ids
 */
int VELOC_Checkpoint_selective(int mode, int *ids, int id_count);

/*
 * End the checkpoint begun. Collective. The checkpoint is kept only if every process says
 * success; VELOC_FAILURE otherwise.
 *   success [IN] non-zero if this process wrote its part (its routed files) without error
 */
int VELOC_Checkpoint_end(int success);

/*
 * Wait for the background work of the last checkpoint (its flush to persistent storage) and
 * return whether it succeeded. Collective. Returns at once in synchronous mode.
 */
int VELOC_Checkpoint_wait(void);

/*
 * VELOC_SUCCESS if this process has no flush to persistent storage under way (so the last
 * checkpoint is as safe as it will be), VELOC_FAILURE while one is. Local; never blocks.
 */
int VELOC_Checkpoint_finished(void);

/*
 * Remove the checkpoints of name from node-local storage (scratch). Collective. Waits for
 * the flushes under way first, and keeps a version that is not on persistent storage: Cairn
 * never removes the only copy of a checkpoint.
 */
int VELOC_Cleanup(const char *name);

/*
 * Wait for the previous checkpoint, then checkpoint the registered memory regions as version
 * of name: VELOC_Checkpoint_wait, _begin, _mem and _end(1). Collective.
 */
int VELOC_Checkpoint(const char *name, int version);

/* ---- Restarts -------------------------------------------------------------------------- */

/*
 * The newest version of name no newer than needed_version (or the newest of all when
 * needed_version is 0) that every process can restart from, or VELOC_FAILURE if there is
 * none. Collective.
 */
int VELOC_Restart_test(const char *name, int needed_version);

/*
 * Begin the restart from version of name: its files become readable through VELOC_Route_file
 * and the regions registered now are restored. Collective.
 */
int VELOC_Restart_begin(const char *name, int version);

/*
 * Recover the registered memory regions from the checkpoint being restarted from. Local.
 *   mode   [IN] VELOC_RECOVER_ALL, VELOC_RECOVER_SOME or VELOC_RECOVER_REST
 *   ids    [IN] the region ids the mode refers to (ignored for VELOC_RECOVER_ALL)
 *   length [IN] the number of ids
 */
int VELOC_Recover_selective(int mode, int *ids, int length);

/*
 * The stored size in bytes of region id in the checkpoint being restarted from, or
 * VELOC_FAILURE if it holds no region id. A region registered only now (after
 * VELOC_Restart_begin), of at least that size, is filled by VELOC_Recover_mem. Local.
 */
int VELOC_Recover_size(int id);

/* VELOC_Recover_selective(VELOC_RECOVER_ALL, NULL, 0). Local. */
int VELOC_Recover_mem(void);

/*
 * End the restart. Collective. If any process says its restore failed, every process passes
 * over that version and VELOC_FAILURE is returned.
 *   success [IN] non-zero if this process restored its state (read its files) without error
 */
int VELOC_Restart_end(int success);

/* VELOC_Restart_begin, VELOC_Recover_mem and VELOC_Restart_end(1). Collective. */
int VELOC_Restart(const char *name, int version);

#ifdef __cplusplus
}
#endif

#endif /* VELOC_H */
