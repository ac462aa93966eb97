/*
 * veloc_impl.h: what the two halves of libveloc share. config.c reads a VeloC configuration
 * file into a struct veloc_cfg and turns it into Cairn settings (cairn_config_set); veloc.c
 * implements the API over libcairn and prints what config.c collected.
 */
#ifndef VELOC_IMPL_H
#define VELOC_IMPL_H

#include <stddef.h>

/* A setting that is not given. */
#define VELOC_UNSET (-2147483647L - 1)

/* A VeloC configuration file, as read. */
struct veloc_cfg {
    char *path;           /* the file, for messages */
    char *scratch;        /* node-local directory, or NULL */
    char *persistent;     /* shared directory, or NULL */
    char *failure_domain; /* or NULL */
    int mode;             /* 0 sync, 1 async, or -1 */
    long ec_interval;     /* seconds, negative: off; or VELOC_UNSET */
    long persistent_interval;
    long max_versions;
    long scratch_versions;
    char **notes; /* one line each: settings Cairn does not support, and why */
    size_t nnotes;
};

/* What veloc_cfg_apply decided, for VELOC_Init and VELOC_Checkpoint_wait. */
struct veloc_plan {
    /* The erasure coding was set from the file (no CAIRN_REDUNDANCY_* variable): a job on a
     * single failure domain may go on without it. */
    int ec_from_file;
    /* ... and the file asked for it (ec_interval >= 0), rather than leaving the default. */
    int ec_asked;
    /* Every checkpoint is flushed to persistent storage, so VELOC_Checkpoint_wait waits for the
     * last one's flush. */
    int flush_each;
};

/*
 * Read cfg_file into *cfg. Returns 0, or -1 with a message in err (len bytes) naming the file
 * and, for a bad line, its number. *cfg must be released with veloc_cfg_free either way.
 */
int veloc_cfg_read(const char *cfg_file, struct veloc_cfg *cfg, char *err, size_t len);

/*
 * Give Cairn the settings of *cfg (cairn_config_set, before cairn_init), except those a CAIRN_*
 * environment variable already sets. Returns 0, or -1 with a message in err. Settings that
 * are applied only in part are added to cfg->notes.
 */
int veloc_cfg_apply(struct veloc_cfg *cfg, struct veloc_plan *plan, char *err, size_t len);

void veloc_cfg_free(struct veloc_cfg *cfg);

#endif /* VELOC_IMPL_H */
