/*
 * config.c: VeloC's configuration file, read and turned into Cairn settings.
 *
 * A VeloC configuration is INI-like: one `key = value` a line, blank lines and lines starting
 * with '#' or ';' ignored. The settings with a Cairn equivalent become cairn_config_set calls
 * before cairn_init, unless the matching CAIRN_* environment variable is set (the user's
 * explicit Cairn setting wins):
 *
 *   scratch              [tiers] local
 *   persistent           [tiers] global
 *   mode                 [flush] mode (sync / async)
 *   persistent_interval  0: [flush] every = 1; N > 0: [flush] seconds = N; < 0: no flush
 *   ec_interval          >= 0: [redundancy] scheme = "rs", parity = 1; < 0: "single"
 *   max_versions         [cache] keep_global, and [cache] keep unless scratch_versions is set
 *   scratch_versions     [cache] keep (0: keep all)
 *   failure_domain       [topology] domain_env, through the variable VELOC_FAILURE_DOMAIN
 *
 * and always [checkpoint] finalize = false: VELOC_Finalize drains the flushes under way, it
 * does not start one. Every other setting is collected as a note for rank 0 to print once.
 *
 * The file is divided into: small helpers; reading; applying; releasing.
 */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text.h"
#include <strings.h>

#include "cairn.h"
#include "veloc_impl.h"

/* Cairn's [cache] keep for "keep every version" (VeloC's 0). */
#define KEEP_ALL "1000000000"

/* ---- Helpers --------------------------------------------------------------------------- */


/* A whole decimal number in a long, or 0 on anything else. */
static int parse_long(const char *s, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0')
        return 0;
    *out = v;
    return 1;
}

static int parse_bool(const char *s, int *out)
{
    static const char *yes[] = {"true", "1", "yes", "on"}, *no[] = {"false", "0", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0)
            return *out = 1, 1;
        if (strcasecmp(s, no[i]) == 0)
            return *out = 0, 1;
    }
    return 0;
}

static int add_note(struct veloc_cfg *cfg, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    char **notes = realloc(cfg->notes, (cfg->nnotes + 1) * sizeof *notes);
    if (notes == NULL)
        return -1;
    cfg->notes = notes;
    if ((notes[cfg->nnotes] = strdup(line)) == NULL)
        return -1;
    cfg->nnotes++;
    return 0;
}

/* Replace *slot with a copy of value. */
static int set_text(char **slot, const char *value)
{
    char *copy = strdup(value);
    if (copy == NULL)
        return -1;
    free(*slot);
    *slot = copy;
    return 0;
}

/* ---- Reading --------------------------------------------------------------------------- */

/* Settings VeloC documents that Cairn does not take, and why. */
static const struct {
    const char *key;
    const char *why;
} unsupported[] = {
    {"axl_type", "Cairn's own background flush copies checkpoints to persistent storage "
                 "([flush] bandwidth and priority tune it); AXL is not used"},
    {"watchdog_interval", "Cairn runs no watchdog: a failed process ends the job, and the "
                          "relaunched job restarts from the newest checkpoint"},
    {"meta", "Cairn keeps every block's checksum inside the checkpoint itself"},
    {"max_parallelism", "each process flushes its own checkpoint on one background thread; "
                        "[flush] bandwidth limits how fast"},
    {"threaded", "Cairn's flush always runs on a thread of each process, with no backend "
                 "process to start"},
    {"aggregated", "Cairn stores one object per process on persistent storage, never one "
                   "file for all"},
    {"log_prefix", "Cairn logs to standard error; CAIRN_LOG sets the level"},
    {"daos_pool", "Cairn has no DAOS back end; persistent storage is a directory"},
    {"daos_cont", "Cairn has no DAOS back end; persistent storage is a directory"},
};

/* One `key = value` line. Returns 0, 1 for a bad value (message in err), -1 out of memory. */
static int setting(struct veloc_cfg *cfg, const char *key, const char *value, int line,
                   char *err, size_t len)
{
    const char *f = cfg->path;
    long n;
    int b;
    if (strcmp(key, "scratch") == 0 || strcmp(key, "persistent") == 0 ||
        strcmp(key, "failure_domain") == 0) {
        if (*value == '\0') {
            snprintf(err, len, "%s:%d: %s is empty", f, line, key);
            return 1;
        }
        char **slot = key[0] == 's' ? &cfg->scratch
                      : key[0] == 'p' ? &cfg->persistent
                                      : &cfg->failure_domain;
        return set_text(slot, value);
    }
    if (strcmp(key, "mode") == 0) {
        if (strcasecmp(value, "sync") == 0 || strcasecmp(value, "async") == 0) {
            cfg->mode = strcasecmp(value, "async") == 0;
            return 0;
        }
        snprintf(err, len, "%s:%d: mode = %s (expected sync or async)", f, line, value);
        return 1;
    }
    if (strcmp(key, "ec_interval") == 0 || strcmp(key, "persistent_interval") == 0) {
        if (!parse_long(value, &n) || n == VELOC_UNSET) {
            snprintf(err, len, "%s:%d: %s = %s (expected a whole number of seconds, -1: off)",
                     f, line, key, value);
            return 1;
        }
        if (key[0] == 'e') {
            cfg->ec_interval = n;
            if (n > 0)
                return add_note(cfg,
                                "%s:%d: ec_interval = %ld: Cairn erasure-codes every "
                                "checkpoint (it schedules redundancy by count, [redundancy] "
                                "every, not by time)",
                                f, line, n);
        } else {
            cfg->persistent_interval = n;
        }
        return 0;
    }
    if (strcmp(key, "max_versions") == 0 || strcmp(key, "scratch_versions") == 0) {
        if (!parse_long(value, &n) || n < 0 || n > INT_MAX) {
            snprintf(err, len, "%s:%d: %s = %s (expected a whole number >= 0, 0: keep all)", f,
                     line, key, value);
            return 1;
        }
        *(key[0] == 'm' ? &cfg->max_versions : &cfg->scratch_versions) = n;
        return 0;
    }
    if (strcmp(key, "chksum") == 0) {
        if (!parse_bool(value, &b)) {
            snprintf(err, len, "%s:%d: chksum = %s (expected true or false)", f, line, value);
            return 1;
        }
        if (!b)
            return add_note(cfg,
                            "%s:%d: chksum = %s: Cairn always checksums checkpoints; "
                            "ignored",
                            f, line, value);
        return 0;
    }
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++)
        if (strcmp(key, unsupported[i].key) == 0)
            return add_note(cfg, "%s:%d: %s = %s: not supported (%s); ignored", f, line, key,
                            value, unsupported[i].why);
    return add_note(cfg, "%s:%d: %s = %s: not a VeloC setting Cairn knows; ignored", f, line,
                    key, value);
}

int veloc_cfg_read(const char *cfg_file, struct veloc_cfg *cfg, char *err, size_t len)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->mode = -1;
    cfg->ec_interval = cfg->persistent_interval = VELOC_UNSET;
    cfg->max_versions = cfg->scratch_versions = VELOC_UNSET;
    if (cfg_file == NULL || *cfg_file == '\0') {
        snprintf(err, len, "no configuration file given (cfg_file is %s)",
                 cfg_file == NULL ? "NULL" : "empty");
        return -1;
    }
    if ((cfg->path = strdup(cfg_file)) == NULL) {
        snprintf(err, len, "out of memory");
        return -1;
    }
    FILE *in = fopen(cfg_file, "r");
    if (in == NULL) {
        snprintf(err, len, "cannot read the configuration file %s: %s", cfg_file,
                 strerror(errno));
        return -1;
    }
    char *buf = NULL;
    size_t cap = 0;
    int line = 0, rc = 0;
    while (rc == 0 && getline(&buf, &cap, in) != -1) {
        line++;
        char *s = compat_trim(buf);
        if (*s == '\0' || *s == '#' || *s == ';')
            continue;
        char *eq = strchr(s, '=');
        if (*s == '[') {
            rc = add_note(cfg, "%s:%d: %s: VeloC's configuration has no sections; ignored",
                          cfg_file, line, s);
        } else if (eq == NULL || eq == s) {
            snprintf(err, len, "%s:%d: \"%s\" is not a `key = value` line", cfg_file, line, s);
            rc = 1;
        } else {
            *eq = '\0';
            rc = setting(cfg, compat_trim(s), compat_trim(eq + 1), line, err, len);
        }
    }
    if (rc == 0 && ferror(in)) {
        snprintf(err, len, "cannot read the configuration file %s", cfg_file);
        rc = 1;
    }
    free(buf);
    fclose(in);
    if (rc < 0)
        snprintf(err, len, "out of memory reading %s", cfg_file);
    return rc == 0 ? 0 : -1;
}

/* ---- Applying -------------------------------------------------------------------------- */

/* cairn_config_set(key, value) unless the environment variable env is set. */
static int put(const char *env, const char *key, const char *value, char *err, size_t len)
{
    if (getenv(env) != NULL)
        return 0;
    if (cairn_config_set(key, value) != CAIRN_OK) {
        snprintf(err, len, "%s: %s", key, cairn_last_error());
        return -1;
    }
    return 0;
}

static int put_long(const char *env, const char *key, long value, char *err, size_t len)
{
    char v[32];
    snprintf(v, sizeof v, "%ld", value);
    return put(env, key, v, err, len);
}

int veloc_cfg_apply(struct veloc_cfg *cfg, struct veloc_plan *plan, char *err, size_t len)
{
    memset(plan, 0, sizeof *plan);
    if (cfg->scratch == NULL && getenv("CAIRN_TIERS_LOCAL") == NULL) {
        snprintf(err, len, "%s: scratch is not set (the node-local checkpoint directory is "
                 "mandatory)", cfg->path);
        return -1;
    }
    if (cfg->persistent == NULL && getenv("CAIRN_TIERS_GLOBAL") == NULL) {
        snprintf(err, len, "%s: persistent is not set (the shared checkpoint directory is "
                 "mandatory)", cfg->path);
        return -1;
    }
    if (cfg->scratch != NULL && put("CAIRN_TIERS_LOCAL", "tiers.local", cfg->scratch, err, len))
        return -1;
    if (cfg->persistent != NULL &&
        put("CAIRN_TIERS_GLOBAL", "tiers.global", cfg->persistent, err, len))
        return -1;
    if (cfg->mode >= 0 &&
        put("CAIRN_FLUSH_MODE", "flush.mode", cfg->mode ? "async" : "sync", err, len))
        return -1;

    /* VeloC flushes every checkpoint unless persistent_interval says otherwise. */
    if (getenv("CAIRN_FLUSH_EVERY") == NULL && getenv("CAIRN_FLUSH_SECONDS") == NULL) {
        long pi = cfg->persistent_interval == VELOC_UNSET ? 0 : cfg->persistent_interval;
        if (put_long("CAIRN_FLUSH_EVERY", "flush.every", pi == 0, err, len) ||
            put_long("CAIRN_FLUSH_SECONDS", "flush.seconds", pi > 0 ? pi : 0, err, len))
            return -1;
        plan->flush_each = pi == 0;
    } else {
        const char *every = getenv("CAIRN_FLUSH_EVERY"), *secs = getenv("CAIRN_FLUSH_SECONDS");
        plan->flush_each = every != NULL && strcmp(every, "1") == 0 &&
                           (secs == NULL || strcmp(secs, "0") == 0);
    }

    /* VeloC erasure-codes every checkpoint unless ec_interval is negative. Parity 1 rebuilds
     * one lost node per set and fits any job of two or more nodes. */
    if (getenv("CAIRN_REDUNDANCY_SCHEME") == NULL) {
        int ec = cfg->ec_interval == VELOC_UNSET || cfg->ec_interval >= 0;
        if (put("CAIRN_REDUNDANCY_SCHEME", "redundancy.scheme", ec ? "rs" : "single", err, len))
            return -1;
        if (ec && put("CAIRN_REDUNDANCY_PARITY", "redundancy.parity", "1", err, len))
            return -1;
        plan->ec_from_file = ec && getenv("CAIRN_REDUNDANCY_PARITY") == NULL &&
                             getenv("CAIRN_REDUNDANCY_SET_SIZE") == NULL;
        plan->ec_asked = ec && cfg->ec_interval != VELOC_UNSET;
    }

    /* 0 keeps every version, on either tier, as in VeloC. */
    long keep = cfg->scratch_versions != VELOC_UNSET ? cfg->scratch_versions
                : cfg->max_versions != VELOC_UNSET   ? cfg->max_versions
                                                     : 0;
    if (keep == 0 ? put("CAIRN_CACHE_KEEP", "cache.keep", KEEP_ALL, err, len)
                  : put_long("CAIRN_CACHE_KEEP", "cache.keep", keep, err, len))
        return -1;
    if (cfg->max_versions != VELOC_UNSET &&
        put_long("CAIRN_CACHE_KEEP_GLOBAL", "cache.keep_global", cfg->max_versions, err, len))
        return -1;

    if (cfg->failure_domain != NULL && getenv("CAIRN_TOPOLOGY_DOMAIN_ENV") == NULL) {
        if (setenv("VELOC_FAILURE_DOMAIN", cfg->failure_domain, 1) != 0 ||
            put("CAIRN_TOPOLOGY_DOMAIN_ENV", "topology.domain_env", "VELOC_FAILURE_DOMAIN", err,
                len))
            return -1;
    }
    return put("CAIRN_CHECKPOINT_FINALIZE", "checkpoint.finalize", "false", err, len);
}

/* ---- Releasing ------------------------------------------------------------------------- */

void veloc_cfg_free(struct veloc_cfg *cfg)
{
    for (size_t i = 0; i < cfg->nnotes; i++)
        free(cfg->notes[i]);
    free(cfg->notes);
    free(cfg->path);
    free(cfg->scratch);
    free(cfg->persistent);
    free(cfg->failure_domain);
    memset(cfg, 0, sizeof *cfg);
}
