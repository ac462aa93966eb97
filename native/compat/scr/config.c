/*
 * config.c: SCR's settings, turned into Cairn's before cairn_init.
 *
 * SCR reads a parameter from, first found wins: the environment, the user configuration file
 * (SCR_CONF_FILE, else <prefix>/.scrconf), and SCR_Config calls. (SCR's system configuration
 * file is a property of an SCR installation, and there is none here.) A parameter is
 * "KEY=VALUE"; a descriptor is a line of several, led by CKPT=<n>, STORE=<path> or
 * GROUPS=<host>. Values in the file may name environment variables ($VAR, ${VAR}).
 *
 * The file is divided into: the layers (SCR_Config's, kept across calls, and the file's, read
 * at SCR_Init); the parameter table, saying for every documented SCR parameter whether it
 * becomes a Cairn key, is used by libscr itself, or has no equivalent (and which of its values
 * change nothing); and scr_settings_apply, which resolves each parameter, sets the Cairn keys
 * with cairn_config_set and reports, on rank 0 and once, every setting that has no effect.
 *
 * A Cairn key set here beats Cairn's configuration file but not a CAIRN_* variable of the same
 * key: a variable set for Cairn itself is the more deliberate choice, and the report says so.
 */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compat.h"

/* ---- Layers --------------------------------------------------------------------------------- */

struct kv {
    char *k, *v;
};

/* One line: a parameter (one pair) or a descriptor (its leading pair, then its keys). */
struct rec {
    struct kv *kv;
    size_t n;
};

struct layer {
    struct rec *r;
    size_t n;
    const char *origin; /* for messages: "SCR_Config" or the file's path */
};

static struct layer api = { NULL, 0, "SCR_Config" };

static int known(const char *k);

static int is_descriptor(const char *key)
{
    return strcmp(key, "CKPT") == 0 || strcmp(key, "STORE") == 0 || strcmp(key, "GROUPS") == 0;
}

static void rec_free(struct rec *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free(r->kv[i].k);
        free(r->kv[i].v);
    }
    free(r->kv);
    r->kv = NULL;
    r->n = 0;
}

static void layer_free(struct layer *l)
{
    for (size_t i = 0; i < l->n; i++)
        rec_free(&l->r[i]);
    free(l->r);
    l->r = NULL;
    l->n = 0;
}

void scr_config_clear(void)
{
    layer_free(&api);
}

static const char *rec_get(const struct rec *r, const char *k)
{
    for (size_t i = 0; i < r->n; i++)
        if (strcmp(r->kv[i].k, k) == 0)
            return r->kv[i].v;
    return NULL;
}

/* Set k=v in r (an empty v removes k; the leading pair is never removed). Returns 0 or -1. */
static int rec_set(struct rec *r, const char *k, const char *v)
{
    for (size_t i = 0; i < r->n; i++) {
        if (strcmp(r->kv[i].k, k) != 0)
            continue;
        if (*v == '\0' && i > 0) {
            free(r->kv[i].k);
            free(r->kv[i].v);
            memmove(&r->kv[i], &r->kv[i + 1], (r->n - i - 1) * sizeof *r->kv);
            r->n--;
            return 0;
        }
        char *copy = strdup(v);
        if (!copy)
            return -1;
        free(r->kv[i].v);
        r->kv[i].v = copy;
        return 0;
    }
    if (*v == '\0' && r->n > 0)
        return 0;
    struct kv *grown = realloc(r->kv, (r->n + 1) * sizeof *grown);
    if (!grown)
        return -1;
    r->kv = grown;
    grown[r->n].k = strdup(k);
    grown[r->n].v = strdup(v);
    if (!grown[r->n].k || !grown[r->n].v) {
        free(grown[r->n].k);
        free(grown[r->n].v);
        return -1;
    }
    r->n++;
    return 0;
}

/* The record of parameter `k`, or of descriptor k=v (v non-NULL). */
static struct rec *layer_find(const struct layer *l, const char *k, const char *v)
{
    for (size_t i = 0; i < l->n; i++) {
        const struct kv *lead = &l->r[i].kv[0];
        if (strcmp(lead->k, k) == 0 && (!v || strcmp(lead->v, v) == 0))
            return &l->r[i];
    }
    return NULL;
}

static struct rec *layer_new(struct layer *l)
{
    struct rec *grown = realloc(l->r, (l->n + 1) * sizeof *grown);
    if (!grown)
        return NULL;
    l->r = grown;
    grown[l->n] = (struct rec){ NULL, 0 };
    return &grown[l->n++];
}

/* Split `s` into KEY[=VALUE] tokens at white space. A token without '=' gets v == NULL.
 * Returns the count, or -1 (malformed: an empty key, or out of memory). */
static long tokenize(const char *s, struct kv **out)
{
    *out = NULL;
    long n = 0;
    while (*s) {
        while (isspace((unsigned char)*s))
            s++;
        if (!*s)
            break;
        const char *end = s;
        while (*end && !isspace((unsigned char)*end))
            end++;
        const char *eq = memchr(s, '=', (size_t)(end - s));
        struct kv *grown = realloc(*out, (size_t)(n + 1) * sizeof *grown);
        if (!grown || eq == s)
            goto bad;
        *out = grown;
        size_t klen = (size_t)((eq ? eq : end) - s);
        grown[n].k = strndup(s, klen);
        grown[n].v = eq ? strndup(eq + 1, (size_t)(end - eq - 1)) : NULL;
        n++;
        if (!grown[n - 1].k || (eq && !grown[n - 1].v))
            goto bad;
        s = end;
    }
    return n;
bad:
    for (long i = 0; i < n; i++) {
        free((*out)[i].k);
        free((*out)[i].v);
    }
    free(*out);
    *out = NULL;
    return -1;
}

static void kv_free(struct kv *t, long n)
{
    for (long i = 0; i < n; i++) {
        free(t[i].k);
        free(t[i].v);
    }
    free(t);
}

/* Store the pairs of one line (every pair has a value) in layer l. Returns 0 or -1. */
static int layer_put(struct layer *l, const struct kv *t, long n)
{
    if (is_descriptor(t[0].k)) {
        struct rec *r = layer_find(l, t[0].k, t[0].v);
        if (!r && (!(r = layer_new(l)) || rec_set(r, t[0].k, t[0].v) != 0))
            return -1;
        for (long i = 1; i < n; i++)
            if (rec_set(r, t[i].k, t[i].v) != 0)
                return -1;
        return 0;
    }
    for (long i = 0; i < n; i++) {
        struct rec *r = layer_find(l, t[i].k, NULL);
        if (*t[i].v == '\0') { /* KEY= removes */
            if (r) {
                rec_free(r);
                *r = l->r[--l->n];
            }
            continue;
        }
        if (!r && !(r = layer_new(l)))
            return -1;
        if (rec_set(r, t[i].k, t[i].v) != 0)
            return -1;
    }
    return 0;
}

const char *scr_config(const char *config, int initialized)
{
    if (!config) {
        scr_say("SCR_Config", "the configuration string is NULL");
        return NULL;
    }
    if (initialized) {
        scr_say("SCR_Config", "\"%s\": settings must be made before SCR_Init", config);
        return NULL;
    }
    struct kv *t;
    long n = tokenize(config, &t);
    if (n <= 0) {
        scr_say("SCR_Config", "\"%s\" is not KEY=VALUE, KEY, or a descriptor", config);
        return NULL;
    }
    const char *result = NULL;
    int query = t[n - 1].v == NULL, bad = 0;
    for (long i = 0; i + 1 < n; i++)
        bad |= t[i].v == NULL;
    if (bad || (query && n > 1 && !is_descriptor(t[0].k))) {
        scr_say("SCR_Config", "\"%s\" is not KEY=VALUE, KEY, or a descriptor", config);
    } else if (query && n == 1) {
        /* The value SCR_Init would use among those known now (the file is read there). */
        struct rec *r = layer_find(&api, t[0].k, NULL);
        result = known(t[0].k) ? getenv(t[0].k) : NULL;
        if (!result)
            result = r && r->n == 1 ? r->kv[0].v : NULL;
        result = result ? strdup(result) : NULL;
    } else if (query) {
        struct rec *r = layer_find(&api, t[0].k, t[0].v);
        result = r ? rec_get(r, t[n - 1].k) : NULL;
        result = result ? strdup(result) : NULL;
    } else if (layer_put(&api, t, n) != 0) {
        scr_say("SCR_Config", "out of memory");
    } else {
        result = strdup(t[n - 1].v);
    }
    kv_free(t, n);
    return result;
}

SCR_API const char *SCR_Configf(const char *format, ...)
{
    if (!format) {
        scr_say("SCR_Configf", "the format is NULL");
        return NULL;
    }
    va_list ap;
    va_start(ap, format);
    char *s = NULL;
    int len = vsnprintf(NULL, 0, format, ap);
    va_end(ap);
    if (len >= 0 && (s = malloc((size_t)len + 1))) {
        va_start(ap, format);
        vsnprintf(s, (size_t)len + 1, format, ap);
        va_end(ap);
    }
    if (!s) {
        scr_say("SCR_Configf", "cannot format \"%s\"", format);
        return NULL;
    }
    const char *r = SCR_Config(s);
    free(s);
    return r;
}

/* ---- The configuration file ----------------------------------------------------------------- */

/* `v` with $VAR and ${VAR} replaced by the variables' values (unset: empty). */
static char *interpolate(const char *v)
{
    size_t cap = strlen(v) + 1, n = 0;
    char *out = malloc(cap);
    while (out && *v) {
        const char *add = v, *next = v + 1;
        size_t len = 1;
        char name[256];
        if (*v == '$') {
            int brace = v[1] == '{';
            const char *s = v + 1 + brace, *e = s;
            while (isalnum((unsigned char)*e) || *e == '_')
                e++;
            if (e > s && (size_t)(e - s) < sizeof name && (!brace || *e == '}')) {
                memcpy(name, s, (size_t)(e - s));
                name[e - s] = '\0';
                add = getenv(name);
                add = add ? add : "";
                len = strlen(add);
                next = e + brace;
            }
        }
        if (n + len + 1 > cap) {
            char *grown = realloc(out, cap = 2 * (n + len + 1));
            if (!grown) {
                free(out);
                return NULL;
            }
            out = grown;
        }
        memcpy(out + n, add, len);
        n += len;
        v = next;
    }
    if (out)
        out[n] = '\0';
    return out;
}

/* Parse the file's text into l. Lines that cannot be parsed are reported (by `loud`). */
static void parse_file(struct layer *l, char *text, int loud)
{
    int lineno = 0;
    for (char *line = text; line; ) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        lineno++;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        struct kv *t;
        long n = tokenize(line, &t);
        int bad = n < 0;
        for (long i = 0; i < n && !bad; i++) {
            char *v = t[i].v ? interpolate(t[i].v) : NULL;
            bad = !v;
            free(t[i].v);
            t[i].v = v;
        }
        if (n > 0 && !bad)
            bad = layer_put(l, t, n) != 0;
        if (bad && loud)
            scr_say("config", "%s:%d: not KEY=VALUE or a descriptor; the line is skipped",
                    l->origin, lineno);
        if (n > 0)
            kv_free(t, n);
        line = nl ? nl + 1 : NULL;
    }
}

/* Read the configuration file into l (rank 0 reads, every rank parses). A missing file is no
 * error unless `named` (SCR_CONF_FILE). */
static void read_file(struct layer *l, const char *path, int named, MPI_Comm comm, int rank)
{
    int status;
    char *text = scr_read_shared(path, 16 << 20, comm, rank, &status);
    if (text)
        parse_file(l, text, rank == 0);
    else if (status > 0 && named && rank == 0)
        scr_say("config", "SCR_CONF_FILE names %s, which does not exist", path);
    free(text);
}

/* ---- Parameters ------------------------------------------------------------------------------ */

/* Documented SCR parameters without a Cairn equivalent, and the value (if any) that asks for
 * what Cairn does anyway, so that setting it changes nothing and is not reported. */
static const struct {
    const char *name, *same;
} unsupported[] = {
    { "SCR_CNTL_BASE", NULL },       { "SCR_CACHE_PURGE", "0" },
    { "SCR_PREFIX_PURGE", "0" },     { "SCR_DISTRIBUTE", "1" },
    { "SCR_FETCH_BYPASS", "0" },     { "SCR_FETCH_WIDTH", NULL },
    { "SCR_FLUSH_POSTSTAGE", "0" },  { "SCR_FLUSH_WIDTH", NULL },
    { "SCR_FLUSH_ON_RESTART", "0" }, { "SCR_GLOBAL_RESTART", "0" },
    { "SCR_RUNS", NULL },            { "SCR_MIN_NODES", NULL },
    { "SCR_EXCLUDE_NODES", NULL },   { "SCR_LOG_ENABLE", "0" },
    { "SCR_LOG_TXT_ENABLE", NULL },  { "SCR_LOG_SYSLOG_ENABLE", NULL },
    { "SCR_LOG_SYSLOG_PREFIX", NULL }, { "SCR_LOG_SYSLOG_FACILITY", NULL },
    { "SCR_LOG_SYSLOG_LEVEL", NULL }, { "SCR_LOG_DB_ENABLE", "0" },
    { "SCR_LOG_DB_DEBUG", NULL },    { "SCR_LOG_DB_HOST", NULL },
    { "SCR_LOG_DB_NAME", NULL },     { "SCR_LOG_DB_USER", NULL },
    { "SCR_LOG_DB_PASS", NULL },     { "SCR_MPI_BUF_SIZE", NULL },
    { "SCR_FILE_BUF_SIZE", NULL },   { "SCR_WATCHDOG_TIMEOUT", NULL },
    { "SCR_WATCHDOG_TIMEOUT_PFS", NULL }, { "SCR_CHECKPOINT_OVERHEAD", "0" },
    { "SCR_HOP_DISTANCE", NULL },    { "SCR_HALT_EXIT", "0" },
    { "SCR_HALT_ENABLED", "0" },     { "SCR_ENABLE", "1" },
    { "SCR_CRC_ON_FLUSH", "1" },     { "SCR_CRC_ON_COPY", "1" },
    { "SCR_CRC_ON_DELETE", "1" },    { "SCR_GROUP", "NODE" },
};

/* Parameters libscr reads or maps: those with a Cairn key take their value as it is; the
 * others are handled one by one in apply_param. */
static const struct {
    const char *name, *key;
} supported[] = {
    { "SCR_PREFIX", NULL },
    { "SCR_CONF_FILE", NULL },
    { "SCR_CACHE_BASE", NULL },
    { "SCR_CACHE_BYPASS", NULL },
    { "SCR_CACHE_SIZE", NULL },
    { "SCR_PREFIX_SIZE", "cache.keep_global" },
    { "SCR_COPY_TYPE", NULL },
    { "SCR_SET_SIZE", "redundancy.set_size" },
    { "SCR_SET_FAILURES", "redundancy.parity" },
    { "SCR_FLUSH", "flush.every" },
    { "SCR_FLUSH_ASYNC", NULL },
    { "SCR_FLUSH_TYPE", NULL },
    { "SCR_CHECKPOINT_INTERVAL", "checkpoint.every" },
    { "SCR_CHECKPOINT_SECONDS", "checkpoint.seconds" },
    { "SCR_HALT_SECONDS", "exit.margin" },
    { "SCR_DEBUG", NULL },
    { "SCR_CURRENT", NULL },
    { "SCR_FETCH", NULL },
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* What scr_settings_apply works with. */
struct ctx {
    struct scr_settings *out;
    int rank;
    const char *user;
    char error[2 * SCR_PATH_MAX]; /* the first failure, printed by the lowest failing rank */
    char copy_type[32];
    int cache_set; /* SCR_CACHE_BASE was given */
};

/* The job id SCR names its cache directory after: SCR_JOB_ID, else the resource manager's,
 * else "defjobid", as SCR does without one. */
static const char *job_id(void)
{
    static const char *const vars[] = {"SCR_JOB_ID", "SLURM_JOBID", "SLURM_JOB_ID",
                                       "LSB_JOBID",  "PBS_JOBID",   "COBALT_JOBID",
                                       "FLUX_JOB_ID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v && !strchr(v, '/') && strcmp(v, ".") != 0 && strcmp(v, "..") != 0)
            return v;
    }
    return "defjobid";
}

/* The node-local directory under cache base `base`: <base>/<user>/scr.<jobid>, where SCR
 * keeps its cache, so that the scripts that clean SCR's cache (rm -rf
 * <base>/$USER/scr.*) clean Cairn's too. */
static void cache_dir(const struct ctx *c, const char *base, char *out, size_t len)
{
    snprintf(out, len, "%s/%s/scr.%s", base, c->user, job_id());
}

/* Create <base>/<user> (mode 0700) if it is missing, as SCR creates its cache directory;
 * Cairn creates the scr.<jobid> below it and checks the whole path is the user's. */
static void make_user_dir(struct ctx *c, const char *base)
{
    char dir[SCR_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/%s", base, c->user);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST && !c->error[0])
        snprintf(c->error, sizeof c->error, "cannot create the cache directory %s: %s", dir,
                 strerror(errno));
}

/* Report one setting on rank 0 (the line is the same on every rank). */
static void note(struct ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(struct ctx *c, const char *fmt, ...)
{
    if (c->rank != 0)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    scr_say("config", "%s", msg);
}

/* Set Cairn key `key` (dotted) to `value` for SCR setting `what` ("SCR_FLUSH=10 (origin)"),
 * unless the matching CAIRN_* variable is set. Records the first failure in c->error. */
static void set_cairn(struct ctx *c, const char *key, const char *value, const char *what)
{
    char var[128];
    size_t n = (size_t)snprintf(var, sizeof var, "CAIRN_%s", key);
    for (size_t i = 6; i < n && i < sizeof var; i++)
        var[i] = var[i] == '.' ? '_' : (char)toupper((unsigned char)var[i]);
    const char *env = getenv(var);
    if (env) {
        note(c, "%s does not set Cairn's %s: %s=%s is set and wins", what, key, var, env);
        return;
    }
    if (cairn_config_set(key, value) != CAIRN_OK && !c->error[0])
        snprintf(c->error, sizeof c->error, "%s: %s", what, cairn_last_error());
}

/* Map one SCR parameter; `what` names it with its value and origin for messages. */
static void apply_param(struct ctx *c, const char *k, const char *v, const char *what)
{
    char buf[SCR_PATH_MAX + 64];
    for (size_t i = 0; i < COUNT(supported); i++) {
        if (supported[i].key && strcmp(k, supported[i].name) == 0) {
            set_cairn(c, supported[i].key, v, what);
            return;
        }
    }
    if (strcmp(k, "SCR_PREFIX") == 0 || strcmp(k, "SCR_CONF_FILE") == 0) {
        /* Resolved before the others (see scr_settings_apply). */
    } else if (strcmp(k, "SCR_CACHE_BASE") == 0) {
        cache_dir(c, v, buf, sizeof buf);
        set_cairn(c, "tiers.local", buf, what);
        make_user_dir(c, v);
        c->cache_set = 1;
    } else if (strcmp(k, "SCR_CACHE_BYPASS") == 0) {
        c->out->bypass = strcmp(v, "0") != 0;
        if (c->out->bypass) {
            set_cairn(c, "tiers.local", "none", what);
            c->cache_set = 1;
        }
    } else if (strcmp(k, "SCR_CACHE_SIZE") == 0) {
        if (strcmp(v, "0") == 0)
            note(c, "%s has no effect: Cairn keeps at least one checkpoint on node-local "
                    "storage", what);
        else
            set_cairn(c, "cache.keep", v, what);
    } else if (strcmp(k, "SCR_COPY_TYPE") == 0) {
        snprintf(c->copy_type, sizeof c->copy_type, "%s", v);
        for (char *p = c->copy_type; *p; p++)
            *p = (char)tolower((unsigned char)*p);
        if (strcmp(c->copy_type, "file") != 0)
            set_cairn(c, "redundancy.scheme", c->copy_type, what);
    } else if (strcmp(k, "SCR_FLUSH_ASYNC") == 0) {
        set_cairn(c, "flush.mode", strcmp(v, "0") == 0 ? "sync" : "async", what);
    } else if (strcmp(k, "SCR_FLUSH_TYPE") == 0) {
        if (strcasecmp(v, "SYNC") == 0 || strcasecmp(v, "PTHREAD") == 0)
            set_cairn(c, "flush.mode", strcasecmp(v, "SYNC") == 0 ? "sync" : "async", what);
        else
            note(c, "%s has no effect: Cairn flushes with SYNC or PTHREAD (a thread per rank)",
                 what);
    } else if (strcmp(k, "SCR_DEBUG") == 0) {
        long level = strtol(v, NULL, 10);
        c->out->debug = level > 0 ? (int)(level > 9 ? 9 : level) : 0;
        if (level > 0)
            set_cairn(c, "log.level", level == 1 ? "info" : "debug", what);
    } else if (strcmp(k, "SCR_CURRENT") == 0) {
        snprintf(c->out->current, sizeof c->out->current, "%s", v);
    } else if (strcmp(k, "SCR_FETCH") == 0) {
        /* As SCR: 0 stops fetching from the parallel file system; a checkpoint still in the
         * cache restarts all the same. */
        c->out->fetch = strcmp(v, "0") != 0;
        set_cairn(c, "tiers.fetch", c->out->fetch ? "true" : "false", what);
    } else {
        for (size_t i = 0; i < COUNT(unsupported); i++) {
            if (strcmp(k, unsupported[i].name) != 0)
                continue;
            if (!unsupported[i].same || strcasecmp(v, unsupported[i].same) != 0)
                note(c, "%s has no effect: Cairn has no equivalent (docs/migrate-scr.md)", what);
            return;
        }
        note(c, "%s has no effect: it is not an SCR parameter", what);
    }
}

static int known(const char *k)
{
    for (size_t i = 0; i < COUNT(supported); i++)
        if (strcmp(k, supported[i].name) == 0)
            return 1;
    for (size_t i = 0; i < COUNT(unsupported); i++)
        if (strcmp(k, unsupported[i].name) == 0)
            return 1;
    return 0;
}

/* The value of parameter k, first found: environment (known parameters only), file, API. */
static const char *lookup(const char *k, const struct layer *file, const char **origin)
{
    const char *v = known(k) ? getenv(k) : NULL;
    if (v) {
        *origin = "environment";
        return v;
    }
    const struct layer *ls[2] = { file, &api };
    for (int i = 0; i < 2; i++) {
        const struct rec *r = layer_find(ls[i], k, NULL);
        if (r && r->n == 1 && !is_descriptor(k)) {
            *origin = ls[i]->origin;
            return r->kv[0].v;
        }
    }
    return NULL;
}

static void resolve_one(struct ctx *c, const char *k, const struct layer *file)
{
    const char *origin, *v = lookup(k, file, &origin);
    if (!v)
        return;
    char what[SCR_PATH_MAX + 128];
    snprintf(what, sizeof what, "%s=%s (%s)", k, v, origin);
    apply_param(c, k, v, what);
}

/* A descriptor as text, for messages: "CKPT=1 INTERVAL=10 TYPE=XOR (origin)". */
static void describe(const struct rec *r, const char *origin, char *buf, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < r->n && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s=%s", i ? " " : "", r->kv[i].k,
                              r->kv[i].v);
    if (n < len)
        snprintf(buf + n, len - n, " (%s)", origin);
}

/*
 * SCR_COPY_TYPE=FILE: the CKPT descriptors become Cairn's two-level schedule. Cairn protects
 * every k-th checkpoint with one scheme and stores the others single, so the descriptor with
 * INTERVAL=1 and one other descriptor map exactly (base SINGLE, the other one's TYPE every
 * INTERVAL); a base with a scheme of its own protects every checkpoint. Any other descriptor,
 * and keys other than CKPT, INTERVAL, TYPE, SET_SIZE, SET_FAILURES and GROUP=NODE, are reported.
 */
static void apply_descriptors(struct ctx *c, const struct layer *file)
{
    const struct layer *ls[2] = { file, &api };
    const struct rec *chosen = NULL;
    const char *chosen_origin = NULL;
    long chosen_interval = 0;
    int file_mode = strcmp(c->copy_type, "file") == 0;
    char desc[1024];
    for (int li = 0; li < 2; li++) {
        for (size_t i = 0; i < ls[li]->n; i++) {
            const struct rec *r = &ls[li]->r[i];
            if (!is_descriptor(r->kv[0].k))
                continue;
            describe(r, ls[li]->origin, desc, sizeof desc);
            if (strcmp(r->kv[0].k, "CKPT") != 0 || !file_mode) {
                note(c, "%s has no effect: %s", desc,
                     strcmp(r->kv[0].k, "CKPT") != 0
                         ? "Cairn's node-local storage is SCR_CACHE_BASE and its failure "
                           "groups are nodes"
                         : "checkpoint descriptors are used only with SCR_COPY_TYPE=FILE");
                continue;
            }
            /* The file's descriptor beats SCR_Config's of the same number. */
            if (li == 1 && layer_find(file, "CKPT", r->kv[0].v))
                continue;
            const char *interval = rec_get(r, "INTERVAL"), *type = rec_get(r, "TYPE");
            long iv = interval ? strtol(interval, NULL, 10) : 1;
            for (size_t j = 1; j < r->n; j++) {
                const char *k = r->kv[j].k, *v = r->kv[j].v;
                if (strcmp(k, "INTERVAL") && strcmp(k, "TYPE") && strcmp(k, "SET_SIZE") &&
                    strcmp(k, "SET_FAILURES") && (strcmp(k, "GROUP") || strcmp(v, "NODE")))
                    note(c, "%s: %s=%s has no effect: Cairn has no equivalent", desc, k, v);
            }
            int single = !type || strcasecmp(type, "SINGLE") == 0;
            if (iv < 1 || single)
                continue;
            /* The base's own scheme wins; otherwise the most frequent protected level. */
            if (chosen && (chosen_interval == 1 || (iv != 1 && iv >= chosen_interval))) {
                note(c, "%s has no effect: Cairn protects checkpoints with one scheme, and "
                        "CKPT=%s is used", desc, chosen->kv[0].v);
                continue;
            }
            if (chosen) {
                describe(chosen, chosen_origin, desc, sizeof desc);
                note(c, "%s has no effect: Cairn protects checkpoints with one scheme, and "
                        "CKPT=%s is used", desc, r->kv[0].v);
            }
            chosen = r;
            chosen_origin = ls[li]->origin;
            chosen_interval = iv;
        }
    }
    if (!file_mode)
        return;
    if (!chosen) {
        set_cairn(c, "redundancy.scheme", "single", "SCR_COPY_TYPE=FILE (every CKPT SINGLE)");
        return;
    }
    describe(chosen, chosen_origin, desc, sizeof desc);
    char type[32], every[32];
    snprintf(type, sizeof type, "%s", rec_get(chosen, "TYPE"));
    for (char *p = type; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    snprintf(every, sizeof every, "%ld", chosen_interval);
    set_cairn(c, "redundancy.scheme", type, desc);
    set_cairn(c, "redundancy.every", every, desc);
    if (rec_get(chosen, "SET_SIZE"))
        set_cairn(c, "redundancy.set_size", rec_get(chosen, "SET_SIZE"), desc);
    if (rec_get(chosen, "SET_FAILURES"))
        set_cairn(c, "redundancy.parity", rec_get(chosen, "SET_FAILURES"), desc);
}

int scr_settings_apply(MPI_Comm comm, int rank, struct scr_settings *out)
{
    struct ctx c = { .out = out, .rank = rank };
    c.user = cairn_user_name();
    out->fetch = 1;
    out->bypass = 0;
    out->debug = 0;
    out->current[0] = '\0';

    /* The prefix first: the default configuration file lives there. The file may set it
     * too, but only when SCR_CONF_FILE names the file. */
    struct layer file = { NULL, 0, NULL };
    const char *origin, *prefix = lookup("SCR_PREFIX", &file, &origin);
    char first[SCR_PATH_MAX], conf[SCR_PATH_MAX + 16];
    if (scr_abspath(prefix ? prefix : ".", first, sizeof first) != 0)
        snprintf(c.error, sizeof c.error, "the prefix directory %s is too long or the "
                                          "current directory unknown", prefix ? prefix : ".");
    const char *named = getenv("SCR_CONF_FILE");
    snprintf(conf, sizeof conf, "%s", named ? named : first);
    if (!named)
        strncat(conf, "/.scrconf", sizeof conf - strlen(conf) - 1);
    file.origin = conf;
    read_file(&file, conf, named != NULL, comm, rank);

    prefix = lookup("SCR_PREFIX", &file, &origin);
    if (scr_abspath(prefix ? prefix : ".", out->prefix, sizeof out->prefix) != 0 && !c.error[0])
        snprintf(c.error, sizeof c.error, "the prefix directory %s is too long",
                 prefix ? prefix : ".");
    /* SCR writes into the prefix directory; like SCR, create it (rank 0, before the
     * agreement below, so it exists when Cairn looks for its global tier there). */
    char scrdir[SCR_PATH_MAX + 16];
    snprintf(scrdir, sizeof scrdir, "%s/.scr", out->prefix);
    if (rank == 0 && !c.error[0] &&
        (scr_mkdirs(out->prefix, 0777) != 0 || scr_mkdirs(scrdir, 0777) != 0))
        snprintf(c.error, sizeof c.error, "cannot create the prefix directory %s: %s",
                 scrdir, strerror(errno));
    if (!c.error[0]) {
        /* Cairn's global tier lives in the prefix's .scr directory, beside SCR's own
         * metadata, so that what removes a prefix's SCR state (SCR's test scripts remove
         * .scr) removes its checkpoints too. */
        char global[SCR_PATH_MAX + 64], what[SCR_PATH_MAX + 64];
        snprintf(global, sizeof global, "%s/.scr/cairn", out->prefix);
        snprintf(what, sizeof what, "SCR_PREFIX=%s (%s)", prefix ? prefix : ".",
                 prefix ? origin : "SCR's default, the current directory");
        set_cairn(&c, "tiers.global", global, what);
    }

    /* Known parameters in table order (SCR_CACHE_BYPASS after SCR_CACHE_BASE, so bypass
     * wins), then everything else the file and SCR_Config hold. */
    for (size_t i = 0; i < COUNT(supported); i++)
        resolve_one(&c, supported[i].name, &file);
    for (size_t i = 0; i < COUNT(unsupported); i++)
        resolve_one(&c, unsupported[i].name, &file);
    const struct layer *ls[2] = { &file, &api };
    for (int li = 0; li < 2; li++)
        for (size_t i = 0; i < ls[li]->n; i++) {
            const char *k = ls[li]->r[i].kv[0].k;
            /* Each unknown name once: from the first layer that has it. */
            if (!is_descriptor(k) && !known(k) && !(li == 1 && layer_find(&file, k, NULL)))
                resolve_one(&c, k, &file);
        }
    if (!c.cache_set && !getenv("CAIRN_TIERS_LOCAL")) {
        /* SCR's default cache base. */
        char dir[SCR_PATH_MAX];
        cache_dir(&c, "/dev/shm", dir, sizeof dir);
        make_user_dir(&c, "/dev/shm");
        if (cairn_config_set("tiers.local", dir) != CAIRN_OK && !c.error[0])
            snprintf(c.error, sizeof c.error, "the cache directory %s: %s", dir,
                     cairn_last_error());
    }
    apply_descriptors(&c, &file);
    layer_free(&file);

    /* The lowest failing rank says why; every rank returns the same. */
    int mine = c.error[0] ? rank : INT_MAX, first_bad;
    MPI_Allreduce(&mine, &first_bad, 1, MPI_INT, MPI_MIN, comm);
    if (first_bad == INT_MAX)
        return 0;
    if (first_bad == rank)
        scr_say("SCR_Init", "%s", c.error);
    return -1;
}
