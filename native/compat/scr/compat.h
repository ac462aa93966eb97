/*
 * compat.h: what the files of libscr share (not installed).
 *
 * config.c holds SCR's settings (SCR_Config, the user configuration file, the environment)
 * and turns them into Cairn settings before cairn_init; index.c keeps the dataset index, the
 * small file in <prefix>/.scr/ that maps SCR's dataset names to Cairn versions across runs;
 * scr.c implements the API of scr.h with both. Everything here has hidden visibility
 * (build.sh compiles with -fvisibility=hidden); only scr.h's functions are exported (SCR_API).
 */
#ifndef SCR_COMPAT_H
#define SCR_COMPAT_H

#include <stddef.h>
#include <stdint.h>

#include "cairn_mpi.h"
#include "scr.h"

#define SCR_API __attribute__((visibility("default")))

/* Cairn's checkpoint name for every SCR dataset of a job; the dataset id is the version. */
#define SCR_CKPT_NAME "scr"

/* Paths: the prefix directory and the files under it. */
#define SCR_PATH_MAX 4096

/* ---- util.c ------------------------------------------------------------------------------- */

/* Print one line "SCR: <what>: <message>" on stderr. */
void scr_say(const char *what, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Rank 0 reads the file at `path` (at most `max` bytes) and every rank receives its bytes.
 * Returns them NUL-terminated (free them), or NULL with *status 1 when there is no such file
 * and -1 when it could not be read (said on stderr). Collective over comm. */
char *scr_read_shared(const char *path, size_t max, MPI_Comm comm, int rank, int *status);

/* `name` as an absolute path without "." and ".." components or repeated slashes (relative
 * names are taken from the current directory, as SCR does). Returns 0, or -1 if it does not
 * fit in `len` bytes. */
int scr_abspath(const char *name, char *out, size_t len);

/* mkdir -p of an absolute path; directories made get `mode`. Returns 0 or -1 (errno set). */
int scr_mkdirs(const char *path, unsigned mode);

/* The directory part of an absolute path into `out` (SCR_PATH_MAX bytes). */
void scr_parent(const char *path, char *out);

/* Copy the file `from` to `to` (mode 0600) through a temporary file beside `to` and a rename,
 * so that `to` is never seen half written. Returns 0 or -1 (errno set). */
int scr_copy_file(const char *from, const char *to);

/* 1 if the files at `a` and `b` both exist and hold the same bytes, else 0. */
int scr_same_file(const char *a, const char *b);

/* Every rank's NUL-terminated strings (`mine`, `len` bytes of them), concatenated in rank
 * order into a new buffer (free it) of *total bytes; with `starts`, a new array (free it) of
 * size + 1 offsets: where each rank's strings begin, then *total. `mine` NULL says this rank
 * could not make its strings. NULL when that or running out of memory happened on any rank
 * (every rank then returns NULL). Collective over comm. */
char *scr_allgather_strings(MPI_Comm comm, const char *mine, size_t len, size_t *total,
                            size_t **starts);

/* ---- config.c ---------------------------------------------------------------------------- */

/* What SCR_Init takes from SCR's settings, besides the Cairn keys. */
struct scr_settings {
    char prefix[SCR_PATH_MAX]; /* absolute; SCR_PREFIX or the current directory */
    int fetch;                 /* SCR_FETCH: SCR_Have_restart loads checkpoints */
    int debug;                 /* SCR_DEBUG: libscr's own messages at level 1 and above */
    char current[SCR_MAX_FILENAME]; /* SCR_CURRENT: the dataset to restart from ("": newest) */
    int bypass; /* SCR_CACHE_BYPASS=1: files are written and read at their own paths */
};

/* SCR_Config's work (see scr.h); `initialized` refuses changes after SCR_Init. */
const char *scr_config(const char *config, int initialized);

/*
 * Resolve every setting (environment over the user configuration file over SCR_Config), set
 * the Cairn keys with cairn_config_set, and fill *out. Rank 0 reads the configuration file
 * and passes it on over comm, and prints one line for each setting without an equivalent.
 * Collective over comm. Returns 0, or -1 after printing why (on every rank).
 */
int scr_settings_apply(MPI_Comm comm, int rank, struct scr_settings *out);

/* Release what SCR_Config stored. */
void scr_config_clear(void);

/* ---- index.c ------------------------------------------------------------------------------ */

enum scr_state { SCR_DS_OK, SCR_DS_INVALID, SCR_DS_DROPPED };

struct scr_entry {
    int64_t id;           /* the dataset id: Cairn's version of SCR_CKPT_NAME */
    int flags;            /* SCR_FLAG_CHECKPOINT | SCR_FLAG_OUTPUT still stored */
    enum scr_state state; /* invalid: a restart found it bad; dropped: SCR_Drop */
    char *name;
};

/* Every rank holds the same copy; rank 0 alone reads and writes the file. */
struct scr_index {
    char dir[SCR_PATH_MAX]; /* <prefix>/.scr */
    int64_t next;           /* the next dataset id: above every id ever given */
    struct scr_entry *e;
    size_t n;
};

/* Load the index of `prefix` (rank 0 reads, the others receive it). A missing index is an
 * empty one; a damaged one is reported and replaced. Collective over comm. */
void scr_index_load(struct scr_index *ix, const char *prefix, MPI_Comm comm, int rank);

/* Write the index atomically (rank 0 only; a failure is reported, never fatal: the datasets
 * themselves are stored by Cairn). Local. */
void scr_index_save(const struct scr_index *ix, int rank);

/* The entry of a live (not dropped) dataset named `name`, or NULL. */
struct scr_entry *scr_index_find(struct scr_index *ix, const char *name);

/* Record a stored dataset. Returns 0, or -1 when out of memory. */
int scr_index_add(struct scr_index *ix, int64_t id, int flags, const char *name);

/* Remove an entry (by pointer into ix->e). */
void scr_index_remove(struct scr_index *ix, struct scr_entry *e);

/* Free the entries. */
void scr_index_clear(struct scr_index *ix);

/* Where the output files of dataset `id` are listed: <dir>/cairn-output.<id>. */
void scr_index_files_path(const struct scr_index *ix, int64_t id, char *buf, size_t len);

#endif /* SCR_COMPAT_H */
