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
 * The header is divided into: return codes and limits; initialising and finalising; memory
 * registration; files; checkpoints; restarts.
 */
#ifndef VELOC_H
#define VELOC_H

#include <stddef.h>

#include <mpi.h>

/* ---- Return codes and limits ----------------------------------------------------------- */

#define VELOC_SUCCESS (0)
#define VELOC_FAILURE (-1)

/* Size of the buffer VELOC_Route_file writes the routed path into (a path always fits). */
#define VELOC_MAX_NAME 4096

/* Modes of VELOC_Recover_selective. */
#define VELOC_RECOVER_ALL 0  /* every region of the checkpoint (ids is ignored) */
#define VELOC_RECOVER_SOME 1 /* the regions named in ids */
#define VELOC_RECOVER_REST 2 /* every region except those named in ids */

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

/* Unregister region id. Local. */
int VELOC_Mem_unprotect(int id);

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
