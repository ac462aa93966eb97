/*
 * config.c: FTI's configuration file, turned into Cairn settings.
 *
 * FTI reads its settings from an INI file named in FTI_Init: sections ([basic], [restart],
 * [injection], [advanced]) of "key = value" lines, with ';' or '#' starting a comment, and keys
 * compared without regard to case. Each setting either becomes a Cairn key (set with
 * cairn_config_set before cairn_init, unless its CAIRN_* variable is set, so Cairn's variables
 * still win), or a setting of this library (the FTI_Snapshot intervals, Keep_last_ckpt), or,
 * when Cairn has no equivalent, a note that rank 0 prints once. Nothing is ignored silently.
 *
 * The file has three parts: the table of FTI's keys and their handlers; the INI reader
 * (fti_config_read), which runs each line through the table and then derives the settings
 * that depend on several keys (the redundancy scheme from Ckpt_L2 / Ckpt_L3 / Group_size,
 * incremental checkpoints from Enable_dcp / Dcp_block_size); and fti_config_apply, which
 * hands the result to Cairn. docs/migrate-fti.md lists every key and what it becomes.
 */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "text.h"
#include <strings.h>

#include "compat.h"

/* ---- Building the result ----------------------------------------------------------------- */

static char *vformat(const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    int len = vsnprintf(NULL, 0, fmt, again);
    va_end(again);
    char *s = len < 0 ? NULL : malloc((size_t)len + 1);
    if (s)
        vsnprintf(s, (size_t)len + 1, fmt, ap);
    return s;
}

/* Append one line to cfg->notes. Returns 0, or -1 when out of memory. */
static int note(struct fti_config *cfg, const char *fmt, ...)
{
    char **grown = realloc(cfg->notes, (cfg->nnotes + 1) * sizeof *grown);
    if (!grown)
        return -1;
    cfg->notes = grown;
    va_list ap;
    va_start(ap, fmt);
    char *line = vformat(fmt, ap);
    va_end(ap);
    if (!line)
        return -1;
    cfg->notes[cfg->nnotes++] = line;
    return 0;
}

/* Append a Cairn key to set, replacing an earlier value of the same key. */
static int assign(struct fti_config *cfg, const char *key, const char *value, const char *origin)
{
    struct fti_assign a = {strdup(key), strdup(value), strdup(origin)};
    if (!a.key || !a.value || !a.origin) {
        free(a.key), free(a.value), free(a.origin);
        return -1;
    }
    for (size_t i = 0; i < cfg->nsets; i++) {
        if (strcmp(cfg->sets[i].key, key) == 0) {
            free(cfg->sets[i].key), free(cfg->sets[i].value), free(cfg->sets[i].origin);
            cfg->sets[i] = a;
            return 0;
        }
    }
    struct fti_assign *grown = realloc(cfg->sets, (cfg->nsets + 1) * sizeof *grown);
    if (!grown) {
        free(a.key), free(a.value), free(a.origin);
        return -1;
    }
    cfg->sets = grown;
    cfg->sets[cfg->nsets++] = a;
    return 0;
}

/* ---- The keys ---------------------------------------------------------------------------- */

/* State of one reading: the result, plus what several keys decide together. */
struct reading {
    struct fti_config *cfg;
    char origin[4200]; /* "[section] Key = value" of the line being handled */
    char *err;
    size_t errlen;
    char level_origin[5][160]; /* Ckpt_L2 / Ckpt_L3 lines, for the scheme's origin */
    long group;                /* Group_size, 0: not given */
    int dcp;                   /* Enable_dcp */
    long dcp_block;            /* Dcp_block_size, 0: not given */
};

struct key;
typedef int (*key_fn)(struct reading *r, const struct key *k, const char *value);

/* One FTI key: its section and name as FTI documents them, its handler, and the handler's
 * arguments (a Cairn key or a reason; the accepted range; the value that needs no note). */
struct key {
    const char *section, *name;
    key_fn fn;
    const char *arg;
    long lo, hi, plain;
};

static int bad_value(struct reading *r, const char *what)
{
    snprintf(r->err, r->errlen, "%s: %s: expected %s", r->cfg->path, r->origin, what);
    return -1;
}

static int oom(struct reading *r)
{
    snprintf(r->err, r->errlen, "%s: out of memory", r->cfg->path);
    return -1;
}

/* A whole number in [k->lo, k->hi], into *out. */
static int whole(struct reading *r, const struct key *k, const char *value, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(value, &end, 10);
    if (*value == '\0' || *end != '\0' || errno || v < k->lo || v > k->hi) {
        char what[96];
        if (k->hi == LONG_MAX)
            snprintf(what, sizeof what, "a whole number >= %ld", k->lo);
        else
            snprintf(what, sizeof what, "a whole number from %ld to %ld", k->lo, k->hi);
        return bad_value(r, what);
    }
    *out = v;
    return 0;
}

/* No Cairn equivalent: a note giving the reason (k->arg). */
static int k_note(struct reading *r, const struct key *k, const char *value)
{
    /* The execution id is still named in FTI's information lines. */
    if (strcmp(k->name, "Exec_ID") == 0)
        snprintf(r->cfg->exec_id, sizeof r->cfg->exec_id, "%s", value);
    if (note(r->cfg, "%s: %s has no Cairn equivalent (%s); ignored", r->cfg->path, r->origin,
             k->arg) != 0)
        return oom(r);
    return 0;
}

/* A number whose value k->plain is what Cairn does anyway; any other value gets a note. */
static int k_plain(struct reading *r, const struct key *k, const char *value)
{
    long v;
    if (whole(r, k, value, &v) != 0)
        return -1;
    return v == k->plain ? 0 : k_note(r, k, value);
}

/* A directory: the Cairn key k->arg. */
static int k_dir(struct reading *r, const struct key *k, const char *value)
{
    if (*value == '\0')
        return bad_value(r, "a directory");
    return assign(r->cfg, k->arg, value, r->origin) == 0 ? 0 : oom(r);
}

/* Ckpt_L1 .. Ckpt_L4: minutes between FTI_Snapshot checkpoints of that level (0: never).
 * Fractions of a minute are accepted too (FTI takes whole minutes). */
static int k_interval(struct reading *r, const struct key *k, const char *value)
{
    int level = k->name[6] - '0';
    char *end;
    errno = 0;
    double minutes = strtod(value, &end);
    if (*value == '\0' || *end != '\0' || errno || !(minutes >= 0 && minutes < 1e9))
        return bad_value(r, "minutes >= 0");
    r->cfg->interval[level] = minutes * 60;
    snprintf(r->level_origin[level], sizeof r->level_origin[level], "[basic] %s = %s", k->name,
             value);
    return 0;
}

static int k_keep_last(struct reading *r, const struct key *k, const char *value)
{
    long v;
    if (whole(r, k, value, &v) != 0)
        return -1;
    r->cfg->keep_last = (int)v;
    /* A last checkpoint that is kept must survive on the global tier; one FTI deletes need
     * not be flushed at all. */
    return assign(r->cfg, "checkpoint.finalize", v ? "true" : "false", r->origin) == 0
               ? 0
               : oom(r);
}

static int k_keep_l4(struct reading *r, const struct key *k, const char *value)
{
    long v;
    if (whole(r, k, value, &v) != 0)
        return -1;
    r->cfg->keep_l4 = (int)v;
    return assign(r->cfg, "cache.keep_global", v ? "0" : "1", r->origin) == 0 ? 0 : oom(r);
}

static int k_verbosity(struct reading *r, const struct key *k, const char *value)
{
    static const char *const levels[] = {"debug", "info", "warn", "error"};
    long v;
    if (whole(r, k, value, &v) != 0)
        return -1;
    r->cfg->verbosity = (int)v;
    return assign(r->cfg, "log.level", levels[v > 4 ? 3 : v - 1], r->origin) == 0 ? 0 : oom(r);
}

/* A number this library keeps: k->arg names the field. */
static int k_number(struct reading *r, const struct key *k, const char *value)
{
    long v;
    if (whole(r, k, value, &v) != 0)
        return -1;
    if (strcmp(k->arg, "group") == 0)
        r->group = v;
    else if (strcmp(k->arg, "dcp") == 0)
        r->dcp = (int)v;
    else if (strcmp(k->arg, "dcp_block") == 0)
        r->dcp_block = v > 0 ? v : 0; /* -1 (FTI's test template), 0: the default */
    else if (strcmp(k->arg, "failure") == 0)
        r->cfg->failure = (int)v;
    else if (strcmp(k->arg, "max_sync") == 0)
        r->cfg->max_sync = v == 0 ? 512 : (int)v; /* 0: FTI's default */
    else if (strcmp(k->arg, "node_size") == 0)
        r->cfg->node_size = (int)v;
    else
        r->cfg->local_test = (int)v;
    return 0;
}

/* Transfer_size: megabytes the L4 transfer moves at once, Cairn's flush buffer. */
static int k_transfer(struct reading *r, const struct key *k, const char *value)
{
    long v;
    if (whole(r, k, value, &v) != 0)
        return -1;
    char mib[32];
    snprintf(mib, sizeof mib, "%ldM", v);
    return assign(r->cfg, "flush.buffer", mib, r->origin) == 0 ? 0 : oom(r);
}

#define NO_HEADS "Cairn runs no head processes: its flushes run on a background thread of " \
                 "every rank, encoding is done inline, and FTI_COMM_WORLD holds every rank"
#define OWN_COMM "Cairn sends its messages on its own duplicate of the communicator"
#define NO_INJECT "FTI's fault injection is not provided"
#define NO_LUSTRE "Cairn does not set Lustre striping; set it on Glbl_dir with lfs setstripe"
#define NO_HDF5 "Cairn writes its own checkpoint files; FTI's HDF5 output is not provided"

static const struct key keys[] = {
    {"basic", "Head", k_plain, NO_HEADS, 0, 1, 0},
    {"basic", "Node_size", k_number, "node_size", 1, INT_MAX, 0},
    {"basic", "Ckpt_dir", k_dir, "tiers.local", 0, 0, 0},
    {"basic", "Glbl_dir", k_dir, "tiers.global", 0, 0, 0},
    {"basic", "Meta_dir", k_note, "Cairn keeps each checkpoint's metadata beside its data on "
                                  "every tier", 0, 0, 0},
    {"basic", "Ckpt_L1", k_interval, NULL, 0, 0, 0},
    {"basic", "Ckpt_L2", k_interval, NULL, 0, 0, 0},
    {"basic", "Ckpt_L3", k_interval, NULL, 0, 0, 0},
    {"basic", "Ckpt_L4", k_interval, NULL, 0, 0, 0},
    {"basic", "Inline_L2", k_plain, NO_HEADS, 0, 1, 1},
    {"basic", "Inline_L3", k_plain, NO_HEADS, 0, 1, 1},
    {"basic", "Inline_L4", k_plain, NO_HEADS "; level 4 waits until the checkpoint is on the "
                                    "global tier", 0, 1, 1},
    {"basic", "Keep_last_ckpt", k_keep_last, NULL, 0, 1, 0},
    {"basic", "Keep_L4_ckpt", k_keep_l4, NULL, 0, 1, 0},
    {"basic", "Group_size", k_number, "group", 1, INT_MAX, 0},
    {"basic", "Verbosity", k_verbosity, NULL, 1, INT_MAX, 0},
    {"basic", "Max_sync_intv", k_number, "max_sync", 0, INT_MAX, 0},
    {"basic", "Ckpt_io", k_plain, "Cairn writes its own per-rank checkpoint files, as FTI's "
                                  "POSIX mode (1) does; MPI-IO, FTI-FF, SIONlib and HDF5 are not "
                                  "provided", 1, 5, 1},
    {"basic", "Enable_staging", k_plain, "the staging API is not provided", 0, 1, 0},
    {"basic", "Enable_dcp", k_number, "dcp", 0, 1, 0},
    {"basic", "Dcp_mode", k_note, "Cairn finds changed blocks with xxh3-128 hashes", 0, 0, 0},
    {"basic", "Dcp_block_size", k_number, "dcp_block", -1, INT_MAX, 0},
    {"basic", "Dcp_L4", k_plain, "Cairn's incremental checkpoints (Enable_dcp) apply to every "
                                 "level; there is no separate differential level-4 schedule",
     0, INT_MAX, 0},
    {"basic", "H5_single_file_dir", k_note, NO_HDF5, 0, 0, 0},
    {"basic", "H5_single_file_prefix", k_note, NO_HDF5, 0, 0, 0},
    {"basic", "H5_single_file_keep", k_plain, NO_HDF5, 0, 1, 0},
    {"basic", "H5_single_file_enable", k_plain, NO_HDF5, 0, 1, 0},
    {"basic", "H5_single_file_inline", k_plain, NO_HDF5, 0, 1, 1},
    {"basic", "Dcp_stack_size", k_note, "Cairn keeps one chain of incremental checkpoints, "
                                        "[reduction] full_every long", 0, 0, 0},
    {"restart", "Failure", k_number, "failure", 0, 3, 0},
    {"restart", "Exec_ID", k_note, "Cairn names FTI's checkpoints \"" FTI_CKPT_NAME "\" on its "
                                   "tiers, not by execution id", 0, 0, 0},
    {"injection", "Rank", k_note, NO_INJECT, 0, 0, 0},
    {"injection", "Number", k_note, NO_INJECT, 0, 0, 0},
    {"injection", "Position", k_note, NO_INJECT, 0, 0, 0},
    {"injection", "Frequency", k_note, NO_INJECT, 0, 0, 0},
    {"advanced", "Block_size", k_note, "Cairn sizes its partner and encoding messages itself",
     0, 0, 0},
    {"advanced", "Transfer_size", k_transfer, NULL, 1, INT_MAX / 2, 0},
    {"advanced", "Mpi_tag", k_note, OWN_COMM, 0, 0, 0},
    {"advanced", "General_tag", k_note, OWN_COMM, 0, 0, 0},
    {"advanced", "Ckpt_tag", k_note, OWN_COMM, 0, 0, 0},
    {"advanced", "Stage_tag", k_note, OWN_COMM, 0, 0, 0},
    {"advanced", "Final_tag", k_note, OWN_COMM, 0, 0, 0},
    {"advanced", "Local_test", k_number, "local_test", 0, 1, 0},
    {"advanced", "Fast_forward", k_note, NO_INJECT, 0, 0, 0},
    {"advanced", "Lustre_striping_unit", k_note, NO_LUSTRE, 0, 0, 0},
    {"advanced", "Lustre_striping_factor", k_note, NO_LUSTRE, 0, 0, 0},
    {"advanced", "Lustre_striping_offset", k_note, NO_LUSTRE, 0, 0, 0},
};

/* Settings that depend on several keys, once the whole file is read. */
static int derive(struct reading *r)
{
    struct fti_config *cfg = r->cfg;
    char origin[400], num[32];
    /* Levels 2 and 3 ask for redundancy across nodes; Cairn has one scheme per run, so the
     * strongest level the file schedules decides it, and levels 1 to 3 all get it. */
    if (cfg->interval[3] > 0) {
        cfg->scheme = "rs";
        snprintf(origin, sizeof origin, "%s (level 3: Reed-Solomon)", r->level_origin[3]);
    } else if (cfg->interval[2] > 0) {
        cfg->scheme = "partner";
        snprintf(origin, sizeof origin, "%s (level 2: partner copies)", r->level_origin[2]);
    } else {
        /* FTI_Checkpoint(id, 2) may ask for partner copies at any time; levels 1 and 4 are
         * stored without them (FTI_Checkpoint chooses per checkpoint). */
        cfg->scheme = "partner";
        cfg->scheme_default = 1;
        snprintf(origin, sizeof origin, "[basic] Ckpt_L2 and Ckpt_L3 are 0 or not given "
                                        "(partner copies for FTI_Checkpoint level 2)");
    }
    if (assign(cfg, "redundancy.scheme", cfg->scheme, origin) != 0 ||
        assign(cfg, "redundancy.every", "1", "levels 1 to 3 all get the scheme") != 0)
        return oom(r);
    if (r->group > 0 && strcmp(cfg->scheme, "rs") == 0) {
        /* FTI's level 3 survives the loss of half the nodes of a group. */
        snprintf(origin, sizeof origin, "[basic] Group_size = %ld", r->group);
        snprintf(num, sizeof num, "%ld", r->group);
        if (assign(cfg, "redundancy.set_size", num, origin) != 0)
            return oom(r);
        snprintf(num, sizeof num, "%ld", r->group / 2 > 1 ? r->group / 2 : 1);
        if (assign(cfg, "redundancy.parity", num, origin) != 0)
            return oom(r);
    }
    if (r->dcp) {
        if (assign(cfg, "reduction.incremental", "true", "[basic] Enable_dcp = 1") != 0)
            return oom(r);
        if (r->dcp_block > 0) {
            snprintf(origin, sizeof origin, "[basic] Dcp_block_size = %ld", r->dcp_block);
            snprintf(num, sizeof num, "%ld", r->dcp_block);
            if (assign(cfg, "reduction.block", num, origin) != 0)
                return oom(r);
        }
    }
    return 0;
}

/* ---- Reading the file -------------------------------------------------------------------- */


/* The value of a "key = value" line: quotes removed, or a trailing comment. */
static char *value_of(char *v, int *ok)
{
    v = compat_trim(v);
    *ok = 1;
    if (*v == '"' || *v == '\'') {
        char *close = strchr(v + 1, *v);
        if (!close) {
            *ok = 0;
            return v;
        }
        *close = '\0';
        return v + 1;
    }
    v[strcspn(v, ";#")] = '\0';
    return compat_trim(v);
}

static void init(struct fti_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->max_sync = 512;
    cfg->verbosity = 3;
    cfg->scheme = "single";
}

static int finish(struct reading *r)
{
    /* FTI keeps one level-4 checkpoint and deletes the checkpoints of a run that finishes,
     * unless told otherwise (Keep_L4_ckpt, Keep_last_ckpt): the defaults, overridden by the
     * lines read before. */
    int have_keep_l4 = 0, have_finalize = 0;
    for (size_t i = 0; i < r->cfg->nsets; i++) {
        have_keep_l4 |= strcmp(r->cfg->sets[i].key, "cache.keep_global") == 0;
        have_finalize |= strcmp(r->cfg->sets[i].key, "checkpoint.finalize") == 0;
    }
    if ((!have_keep_l4 &&
         assign(r->cfg, "cache.keep_global", "1", "Keep_L4_ckpt = 0 (FTI's default)") != 0) ||
        (!have_finalize &&
         assign(r->cfg, "checkpoint.finalize", "false", "Keep_last_ckpt = 0 (FTI's default)") != 0))
        return oom(r);
    return derive(r);
}

void fti_config_default(struct fti_config *cfg)
{
    char err[128];
    struct reading r = {.cfg = cfg, .err = err, .errlen = sizeof err};
    init(cfg);
    cfg->path = strdup("(no configuration file)");
    /* Out of memory here leaves fewer settings; FTI_Init's own allocations fail next. */
    (void)finish(&r);
}

/* One "key = value" line of section `section`. */
static int handle(struct reading *r, const char *section, const char *name, const char *value)
{
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const struct key *k = &keys[i];
        if (strcasecmp(k->section, section) == 0 && strcasecmp(k->name, name) == 0) {
            snprintf(r->origin, sizeof r->origin, "[%s] %s = %s", k->section, k->name, value);
            return k->fn(r, k, value);
        }
    }
    if (note(r->cfg, "%s: [%s] %s = %s is not an FTI setting Cairn knows; ignored",
             r->cfg->path, section, name, value) != 0)
        return oom(r);
    return 0;
}

int fti_config_read(const char *path, struct fti_config *cfg, char *err, size_t errlen)
{
    struct reading r = {.cfg = cfg, .err = err, .errlen = errlen};
    init(cfg);
    cfg->path = strdup(path);
    if (!cfg->path)
        return oom(&r);
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "cannot open the FTI configuration file %s: %s", path,
                 strerror(errno));
        return -1;
    }
    char line[4096], section[128] = "";
    int lineno = 0, rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n' && !feof(f)) {
            snprintf(err, errlen, "%s:%d: line longer than %zu characters", path, lineno,
                     sizeof line - 2);
            rc = -1;
            break;
        }
        char *s = compat_trim(line);
        if (*s == '\0' || *s == ';' || *s == '#')
            continue;
        if (*s == '[') {
            char *close = strchr(s, ']');
            char *rest = close ? compat_trim(close + 1) : NULL;
            if (!close || (*rest != '\0' && *rest != ';' && *rest != '#')) {
                snprintf(err, errlen, "%s:%d: syntax error: expected [section]", path, lineno);
                rc = -1;
                break;
            }
            *close = '\0';
            snprintf(section, sizeof section, "%s", compat_trim(s + 1));
            continue;
        }
        char *eq = strchr(s, '=');
        int ok = eq != NULL;
        char *value = "";
        if (eq) {
            *eq = '\0';
            value = value_of(eq + 1, &ok);
        }
        char *name = compat_trim(s);
        if (!ok || *name == '\0') {
            snprintf(err, errlen, "%s:%d: syntax error: expected [section] or key = value",
                     path, lineno);
            rc = -1;
            break;
        }
        rc = handle(&r, section, name, value);
    }
    if (rc == 0 && ferror(f)) {
        snprintf(err, errlen, "cannot read the FTI configuration file %s: %s", path,
                 strerror(errno));
        rc = -1;
    }
    fclose(f);
    return rc == 0 ? finish(&r) : rc;
}

/* ---- Handing it to Cairn ----------------------------------------------------------------- */

/* The CAIRN_* variable of a dotted key: "tiers.local" -> "CAIRN_TIERS_LOCAL". */
static const char *variable_of(const char *key, char *buf, size_t len)
{
    snprintf(buf, len, "CAIRN_%s", key);
    for (char *p = buf; *p; p++)
        *p = *p == '.' ? '_' : (char)toupper((unsigned char)*p);
    return buf;
}

const char *fti_config_scheme(const struct fti_config *cfg, const char **why)
{
    const char *env = getenv("CAIRN_REDUNDANCY_SCHEME");
    if (env && *env) {
        *why = "CAIRN_REDUNDANCY_SCHEME";
        return env;
    }
    *why = "";
    for (size_t i = 0; i < cfg->nsets; i++)
        if (strcmp(cfg->sets[i].key, "redundancy.scheme") == 0)
            *why = cfg->sets[i].origin;
    return cfg->scheme;
}

/* Node_size and Local_test: simulated nodes, or a check of the real ones. */
static int placement(struct fti_config *cfg, MPI_Comm comm, char *err, size_t errlen)
{
    MPI_Comm host;
    int here = 0;
    if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host) != MPI_SUCCESS ||
        MPI_Comm_size(host, &here) != MPI_SUCCESS) {
        snprintf(err, errlen, "cannot find the ranks sharing this host (MPI_Comm_split_type)");
        return -1;
    }
    MPI_Comm_free(&host);
    if (cfg->node_size == 0) {
        if (cfg->local_test && note(cfg, "%s: [advanced] Local_test = 1 without [basic] "
                                         "Node_size simulates no nodes; ignored", cfg->path) != 0)
            return -1;
        return 0;
    }
    if (cfg->local_test) {
        if (here % cfg->node_size != 0) {
            snprintf(err, errlen, "%s: [advanced] Local_test = 1 simulates nodes of [basic] "
                                  "Node_size = %d ranks, but %d ranks run on this host",
                     cfg->path, cfg->node_size, here);
            return -1;
        }
        char nodes[32], origin[128];
        snprintf(nodes, sizeof nodes, "%d", here / cfg->node_size);
        snprintf(origin, sizeof origin, "[advanced] Local_test = 1 with [basic] Node_size = %d",
                 cfg->node_size);
        return assign(cfg, "topology.sim_nodes", nodes, origin);
    }
    /* Cairn finds the nodes itself; a different Node_size is worth a word. */
    const char *sim = getenv("CAIRN_TOPOLOGY_SIM_NODES");
    int nodes = sim ? atoi(sim) : 0;
    int per = nodes > 0 ? here / nodes : here;
    if (per != cfg->node_size &&
        note(cfg, "%s: [basic] Node_size = %d, but Cairn places %d ranks per node (ranks "
                  "sharing a host%s); Cairn uses its own placement", cfg->path,
             cfg->node_size, per, nodes > 0 ? ", split by CAIRN_TOPOLOGY_SIM_NODES" : "") != 0)
        return -1;
    return 0;
}

int fti_config_apply(struct fti_config *cfg, MPI_Comm comm, int rank, char *err, size_t errlen)
{
    err[0] = '\0';
    if (placement(cfg, comm, err, errlen) != 0) {
        if (!err[0])
            snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (rank == 0) {
        for (size_t i = 0; i < cfg->nnotes; i++)
            fprintf(stderr, "fti: %s\n", cfg->notes[i]);
        fflush(stderr);
    }
    for (size_t i = 0; i < cfg->nsets; i++) {
        const struct fti_assign *a = &cfg->sets[i];
        char var[128];
        if (getenv(variable_of(a->key, var, sizeof var)))
            continue; /* Cairn's variable wins */
        if (cairn_config_set(a->key, a->value) != CAIRN_OK) {
            snprintf(err, errlen, "%s: %s, as Cairn's %s = %s: %s", cfg->path, a->origin, a->key,
                     a->value, cairn_last_error());
            return -1;
        }
    }
    return 0;
}

void fti_config_free(struct fti_config *cfg)
{
    for (size_t i = 0; i < cfg->nsets; i++)
        free(cfg->sets[i].key), free(cfg->sets[i].value), free(cfg->sets[i].origin);
    for (size_t i = 0; i < cfg->nnotes; i++)
        free(cfg->notes[i]);
    free(cfg->sets);
    free(cfg->notes);
    free(cfg->path);
    memset(cfg, 0, sizeof *cfg);
}

/* ---- Rewriting [restart] Failure --------------------------------------------------------- */

/* Whether line `s` (a copy may be changed) is the section header of `want`. */
static int is_section(const char *line, const char *want)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", line);
    char *s = compat_trim(buf);
    if (*s != '[')
        return 0;
    char *close = strchr(s, ']');
    if (!close)
        return 0;
    *close = '\0';
    return strcasecmp(compat_trim(s + 1), want) == 0;
}

/* Whether `line` is "<key> = ..." for `key`; sets *eq to its '='. */
static int is_key(const char *line, const char *key, const char **eq)
{
    const char *e = strchr(line, '=');
    if (!e)
        return 0;
    char buf[256];
    size_t n = (size_t)(e - line);
    if (n >= sizeof buf)
        return 0;
    memcpy(buf, line, n);
    buf[n] = '\0';
    *eq = e;
    return strcasecmp(compat_trim(buf), key) == 0;
}

int fti_config_set_failure(const char *path, int value, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "cannot open %s to update [restart] failure: %s", path,
                 strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size > (1 << 20)) {
        snprintf(err, errlen, "%s is not a regular file of at most 1 MiB; [restart] failure "
                              "not updated", path);
        fclose(f);
        return -1;
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, sb.st_mode & 07777);
    FILE *out = fd < 0 ? NULL : fdopen(fd, "w");
    if (!out) {
        snprintf(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
        if (fd >= 0)
            close(fd);
        fclose(f);
        return -1;
    }
    char line[4096];
    int in_restart = 0, done = 0, saw_restart = 0;
    while (fgets(line, sizeof line, f)) {
        const char *eq;
        if (is_section(line, "restart")) {
            in_restart = saw_restart = 1;
        } else if (line[strspn(line, " \t")] == '[') {
            /* Leaving [restart] without the key: add it at the end of that section. */
            if (in_restart && !done) {
                fprintf(out, "failure = %d\n", value);
                done = 1;
            }
            in_restart = 0;
        } else if (in_restart && !done && is_key(line, "failure", &eq)) {
            fprintf(out, "%.*s= %d\n", (int)(eq - line), line, value);
            done = 1;
            continue;
        }
        fputs(line, out);
    }
    if (!done) {
        if (!saw_restart)
            fputs("\n[restart]\n", out);
        fprintf(out, "failure = %d\n", value);
    }
    int bad = ferror(f) || fflush(out) != 0 || fsync(fileno(out)) != 0;
    fclose(f);
    bad |= fclose(out) != 0;
    if (bad || rename(tmp, path) != 0) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}
