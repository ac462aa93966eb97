/*
 * scr.h: the public C API of SCR 3.x (LLNL's Scalable Checkpoint/Restart library) implemented
 * over Cairn.
 *
 * Applications written against SCR compile against this header unchanged and link with -lscr
 * (libscr.so, which needs libcairn.so). Written from SCR's user guide and API reference; what
 * maps to what and what differs is in docs/migrate-scr.md. In short:
 *
 *   SCR_Init            reads SCR's settings (environment, the user configuration file,
 *                       SCR_Config), sets the Cairn keys that have an SCR equivalent, reports
 *                       every other setting once on stderr and starts Cairn on MPI_COMM_WORLD.
 *   SCR_Start_output    begins a dataset (a checkpoint, output, or both); SCR_Route_file says
 *   SCR_Route_file      where each file is written (node-local storage); SCR_Complete_output
 *   SCR_Complete_output stores it as a Cairn checkpoint (tiers, redundancy, flush) and/or copies
 *                       its files to their paths under the prefix directory.
 *   SCR_Have_restart    loads the newest checkpoint and names it; SCR_Start_restart,
 *   SCR_Start_restart   SCR_Route_file and SCR_Complete_restart read it, and an invalid rank
 *   SCR_Complete_restart makes every rank fall back to the next older one.
 *
 * Every function returns SCR_SUCCESS or SCR_FAILURE and prints why on stderr (lines starting
 * with "SCR: "). The library never aborts, exits or calls MPI_Abort. Functions are collective
 * over MPI_COMM_WORLD unless marked "local".
 */
#ifndef SCR_H
#define SCR_H

#ifdef __cplusplus
extern "C" {
#endif

/* The SCR API version this header implements. */
#define SCR_VERSION "3.0"

/* Return codes. */
#define SCR_SUCCESS 0
#define SCR_FAILURE 1

/* Size of the buffers SCR_Route_file, SCR_Have_restart and SCR_Start_restart fill in, and the
 * bound on dataset names (a name must be shorter). */
#define SCR_MAX_FILENAME 1024

/* SCR_Start_output flags, combined with |: a checkpoint may be restarted from; output is
 * copied to its paths under the prefix directory. */
#define SCR_FLAG_NONE 0
#define SCR_FLAG_CHECKPOINT (1 << 0)
#define SCR_FLAG_OUTPUT (1 << 1)

/* ---- General ------------------------------------------------------------------------------ */

/*
 * Set or query a setting before SCR_Init. Local.
 *   config [IN] "KEY=VALUE" sets (a descriptor takes several: "CKPT=1 INTERVAL=10 TYPE=XOR"),
 *               "KEY=" removes a value set here, "KEY" (or "CKPT=1 TYPE") queries.
 * Returns a string the caller may free(): the value set, or the value queried (NULL if unset);
 * NULL on failure (after SCR_Init, or a malformed string).
 */
const char *SCR_Config(const char *config);

/* SCR_Config with the string formatted as printf does. Local. */
const char *SCR_Configf(const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* Start the library over MPI_COMM_WORLD, after MPI_Init. Collective. */
int SCR_Init(void);

/* Finish: the newest checkpoint is made durable on the parallel file system (unless
 * configured otherwise). Collective; call before MPI_Finalize. */
int SCR_Finalize(void);

/* The version of the library, e.g. "3.0 (Cairn)". Local; the string must not be freed. */
char *SCR_Get_version(void);

/* Set *flag [OUT] to 1 when the run should stop (time limit near, halt file, signal), the same
 * on every rank. Collective. */
int SCR_Should_exit(int *flag);

/*
 * Where this process must access a file. Local.
 *   name [IN]  the file's path on the parallel file system, absolute or relative to the
 *              current directory
 *   file [OUT] a buffer of SCR_MAX_FILENAME bytes: between SCR_Start_output and
 *              SCR_Complete_output the path to write (its directory exists); between
 *              SCR_Start_restart and SCR_Complete_restart the path to read (fails for a file the
 *              checkpoint does not hold); otherwise name itself.
 */
int SCR_Route_file(const char *name, char *file);

/* ---- Checkpoint and output --------------------------------------------------------------- */

/* Set *flag [OUT] to 1 when a checkpoint is due (SCR_CHECKPOINT_INTERVAL / _SECONDS; always 1
 * without either), the same on every rank. Collective. */
int SCR_Need_checkpoint(int *flag);

/*
 * Begin a dataset. Collective; every rank gives the same name and flags.
 *   name  [IN] the dataset's name (shorter than SCR_MAX_FILENAME), or NULL for a generated one
 *   flags [IN] SCR_FLAG_CHECKPOINT and/or SCR_FLAG_OUTPUT
 */
int SCR_Start_output(const char *name, int flags);

/* End the dataset: valid [IN] is this rank's verdict on its files. Returns SCR_SUCCESS on every
 * rank when every rank said 1 and the dataset was stored, SCR_FAILURE otherwise. Collective. */
int SCR_Complete_output(int valid);

/* The checkpoint-only pair of older SCR versions: SCR_Start_output(NULL, SCR_FLAG_CHECKPOINT)
 * and SCR_Complete_output(valid). Collective. */
int SCR_Start_checkpoint(void);
int SCR_Complete_checkpoint(int valid);

/* ---- Restart ------------------------------------------------------------------------------ */

/*
 * Whether a checkpoint is available; loads it. Collective.
 *   flag [OUT] 1 if there is one, else 0 (the same on every rank)
 *   name [OUT] NULL, or a buffer of SCR_MAX_FILENAME bytes for its dataset name
 */
int SCR_Have_restart(int *flag, char *name);

/* Begin reading the checkpoint SCR_Have_restart named; name [OUT] as there (may be NULL).
 * Collective. */
int SCR_Start_restart(char *name);

/* End the restart: valid [IN] is this rank's verdict on what it read. Returns SCR_SUCCESS on
 * every rank when every rank said 1; otherwise SCR_FAILURE, and SCR_Have_restart then offers
 * the next older checkpoint. Collective. */
int SCR_Complete_restart(int valid);

/* ---- Datasets ----------------------------------------------------------------------------- */

/* Tell SCR which checkpoint the application restarted from without the restart calls;
 * name [IN] is its dataset name. Collective. */
int SCR_Current(const char *name);

/* Forget dataset name [IN]: it is never restarted from again; its files stay. Collective. */
int SCR_Drop(const char *name);

/* Delete dataset name [IN]: its checkpoint from every tier and its output files under the
 * prefix directory. Collective. */
int SCR_Delete(const char *name);

#ifdef __cplusplus
}
#endif

#endif /* SCR_H */
