/*
 * compat.h: what the files of libfti share (not installed).
 *
 * config.c reads FTI's configuration file into a struct fti_config and turns it into Cairn
 * settings; fti.c implements the API of fti.h with it. Everything here has hidden visibility
 * (build.sh compiles with -fvisibility=hidden); only fti.h's declarations are exported.
 */
#ifndef FTI_COMPAT_H
#define FTI_COMPAT_H

#include <stddef.h>

#include "cairn_mpi.h"

/* Cairn's name for the checkpoints of FTI_Checkpoint and the end-of-run record. */
#define FTI_CKPT_NAME "fti"
#define FTI_END_NAME "fti.end"

/* One Cairn key to set before cairn_init, and the FTI setting it comes from. */
struct fti_assign {
    char *key;    /* dotted Cairn key, e.g. "tiers.local" */
    char *value;
    char *origin; /* e.g. "[basic] Ckpt_dir = ./local" (or how it was derived) */
};

/* What FTI_Init takes from the configuration file. */
struct fti_config {
    char *path;                /* the file, for messages */
    double interval[5];        /* FTI_Snapshot interval of levels 1..4 in seconds, 0: off */
    int keep_last;             /* Keep_last_ckpt */
    int keep_l4;               /* Keep_L4_ckpt: every level-4 checkpoint stays */
    int max_sync;              /* Max_sync_intv: most FTI_Snapshot calls between agreements */
    int node_size, local_test; /* Node_size (0: unset), Local_test */
    int failure;               /* [restart] Failure: 0 none, 1 or 2 a restart is expected */
    int verbosity;             /* Verbosity: FTI's information lines at 2 and below (default 3) */
    char exec_id[256];         /* [restart] Exec_ID, for the information lines */
    const char *scheme;        /* Cairn's redundancy scheme for levels 2 and 3 */
    int scheme_default;        /* ... chosen without Ckpt_L2 / Ckpt_L3: may fall back */
    struct fti_assign *sets;   /* Cairn keys to set, in order */
    size_t nsets;
    char **notes;              /* settings without a Cairn equivalent, one line each */
    size_t nnotes;
};

/*
 * Read FTI's configuration file `path` into `cfg` (which it initialises). Local.
 * Returns 0, or -1 with the reason in `err` (a missing or unreadable file, a syntax error, a
 * value of the wrong kind); `cfg` must be released with fti_config_free either way.
 */
int fti_config_read(const char *path, struct fti_config *cfg, char *err, size_t errlen);

/* The defaults FTI_Init uses without a configuration file. */
void fti_config_default(struct fti_config *cfg);

/*
 * Pass `cfg` to Cairn with cairn_config_set (a key whose CAIRN_* variable is set is left to
 * the variable) and have rank 0 print each note once. Collective over comm (it finds the ranks
 * sharing a host for Local_test). Returns 0, or -1 with the reason in `err`.
 */
int fti_config_apply(struct fti_config *cfg, MPI_Comm comm, int rank, char *err, size_t errlen);

/* The redundancy scheme Cairn will use: CAIRN_REDUNDANCY_SCHEME if set, else cfg->scheme;
 * `*why` says which setting chose it. */
const char *fti_config_scheme(const struct fti_config *cfg, const char **why);

void fti_config_free(struct fti_config *cfg);

/*
 * Set [restart] Failure to `value` in the file at `path`, as FTI does (its value tells the
 * next run whether to expect a restart): only that line changes, or one is added to the
 * [restart] section (created if missing). The file is replaced by rename, keeping its mode.
 * Returns 0, or -1 with a message in err.
 */
int fti_config_set_failure(const char *path, int value, char *err, size_t errlen);

#endif /* FTI_COMPAT_H */
