/*
 * ini.c: the INI reader functions FTI's library exports (iniparser_load, _getstring,
 * _getint, _getdouble, _freedict), which FTI's own test programs call to read back their
 * configuration file (the [restart] Failure this library rewrites, the node size, ...), and
 * FTI_GetConfig, which gives the file's values in FTI's structures.
 * Written for Cairn from those functions' documented behaviour: keys are "section:key",
 * compared without regard to case; values are the text after '=' without quotes or a
 * trailing comment. The dictionary is this file's own type; callers only hold its pointer.
 */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#pragma GCC visibility push(default)
#include "fti.h"
#pragma GCC visibility pop
#include "text.h"

struct entry {
    char *key; /* "section:key", lower case */
    char *value;
};

typedef struct cairn_ini {
    struct entry *v;
    size_t n;
} dictionary;

#pragma GCC visibility push(default)
dictionary *iniparser_load(const char *path);
const char *iniparser_getstring(const dictionary *d, const char *key, const char *def);
int iniparser_getint(const dictionary *d, const char *key, int notfound);
double iniparser_getdouble(const dictionary *d, const char *key, double notfound);
void iniparser_freedict(dictionary *d);
#pragma GCC visibility pop

static void lower(char *s)
{
    for (; *s; s++)
        *s = (char)tolower((unsigned char)*s);
}

static int add(dictionary *d, const char *section, const char *key, const char *value)
{
    size_t len = strlen(section) + strlen(key) + 2;
    char *k = malloc(len), *v = strdup(value);
    struct entry *grown = realloc(d->v, (d->n + 1) * sizeof *grown);
    if (!k || !v || !grown) {
        free(k), free(v);
        if (grown)
            d->v = grown;
        return -1;
    }
    snprintf(k, len, "%s:%s", section, key);
    lower(k);
    d->v = grown;
    d->v[d->n].key = k;
    d->v[d->n++].value = v;
    return 0;
}

dictionary *iniparser_load(const char *path)
{
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f)
        return NULL;
    dictionary *d = calloc(1, sizeof *d);
    char line[4096], section[256] = "";
    while (d && fgets(line, sizeof line, f)) {
        char *s = compat_trim(line);
        if (*s == '\0' || *s == ';' || *s == '#')
            continue;
        if (*s == '[') {
            char *close = strchr(s, ']');
            if (close) {
                *close = '\0';
                snprintf(section, sizeof section, "%s", compat_trim(s + 1));
            }
            continue;
        }
        char *eq = strchr(s, '=');
        if (!eq)
            continue;
        *eq = '\0';
        char *v = compat_trim(eq + 1);
        if (*v == '"' || *v == '\'') {
            char *end = strchr(v + 1, *v);
            if (end)
                *end = '\0';
            v++;
        } else {
            v[strcspn(v, ";#")] = '\0';
            v = compat_trim(v);
        }
        if (add(d, section, compat_trim(s), v) != 0) {
            iniparser_freedict(d);
            d = NULL;
        }
    }
    fclose(f);
    return d;
}

const char *iniparser_getstring(const dictionary *d, const char *key, const char *def)
{
    if (!d || !key)
        return def;
    /* The last line of a key wins, as a file read top to bottom. */
    for (size_t i = d->n; i-- > 0;)
        if (strcasecmp(d->v[i].key, key) == 0)
            return d->v[i].value;
    return def;
}

int iniparser_getint(const dictionary *d, const char *key, int notfound)
{
    const char *s = iniparser_getstring(d, key, NULL);
    if (!s || !*s)
        return notfound;
    return (int)strtol(s, NULL, 0);
}

double iniparser_getdouble(const dictionary *d, const char *key, double notfound)
{
    const char *s = iniparser_getstring(d, key, NULL);
    return s && *s ? strtod(s, NULL) : notfound;
}

void iniparser_freedict(dictionary *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->n; i++)
        free(d->v[i].key), free(d->v[i].value);
    free(d->v);
    free(d);
}

/* A string setting into an FTI_BUFS buffer. */
static void text_of(const dictionary *d, const char *key, char *out)
{
    snprintf(out, FTI_BUFS, "%s", iniparser_getstring(d, key, ""));
}

FTIT_allConfiguration FTI_GetConfig(const char *configFile, MPI_Comm globalComm)
{
    FTIT_allConfiguration a;
    memset(&a, 0, sizeof a);
    a.configuration.ioMode = -1;
    dictionary *d = iniparser_load(configFile);
    if (!d) {
        fprintf(stderr, "FTI_GetConfig: cannot read the configuration file %s\n",
                configFile ? configFile : "(NULL)");
        return a;
    }
    FTIT_configuration *c = &a.configuration;
    snprintf(c->cfgFile, FTI_BUFS, "%s", configFile);
    c->ioMode = iniparser_getint(d, "basic:ckpt_io", 1) + 1000;
    int dcp = iniparser_getint(d, "basic:enable_dcp", 0) != 0;
    c->dcpPosix = dcp && c->ioMode == FTI_IO_POSIX;
    c->dcpFtiff = dcp && c->ioMode == FTI_IO_FTIFF;
    c->dcpMode = iniparser_getint(d, "basic:dcp_mode", -1) + 1;
    c->dcpBlockSize = iniparser_getint(d, "basic:dcp_block_size", -1);
    c->stagingEnabled = iniparser_getint(d, "basic:enable_staging", 0) != 0;
    c->keepL4Ckpt = iniparser_getint(d, "basic:keep_l4_ckpt", 0) != 0;
    c->keepHeadsAlive = iniparser_getint(d, "basic:keep_heads_alive", 0) != 0;
    c->saveLastCkpt = iniparser_getint(d, "basic:keep_last_ckpt", 0);
    c->verbosity = iniparser_getint(d, "basic:verbosity", -1);
    c->blockSize = iniparser_getint(d, "advanced:block_size", -1) * 1024;
    c->transferSize = iniparser_getint(d, "advanced:transfer_size", -1) * 1024 * 1024;
    c->ckptTag = iniparser_getint(d, "advanced:ckpt_tag", 711);
    c->stageTag = iniparser_getint(d, "advanced:stage_tag", 406);
    c->finalTag = iniparser_getint(d, "advanced:final_tag", 3107);
    c->generalTag = iniparser_getint(d, "advanced:general_tag", 2612);
    c->test = iniparser_getint(d, "advanced:local_test", -1);
    c->l3WordSize = FTI_WORD;
    c->h5SingleFileEnable = iniparser_getint(d, "basic:h5_single_file_enable", 0) != 0;
    c->h5SingleFileKeep = iniparser_getint(d, "basic:h5_single_file_keep", 0) != 0;
    c->h5SingleFileIsInline = iniparser_getint(d, "basic:h5_single_file_inline", 1) != 0;
    text_of(d, "basic:h5_single_file_dir", c->h5SingleFileDir);
    text_of(d, "basic:h5_single_file_prefix", c->h5SingleFilePrefix);
    text_of(d, "basic:stage_dir", c->stageDir);
    text_of(d, "basic:ckpt_dir", c->localDir);
    text_of(d, "basic:glbl_dir", c->glbalDir);
    text_of(d, "basic:meta_dir", c->metadDir);

    text_of(d, "restart:exec_id", a.execution.id);
    a.execution.reco = iniparser_getint(d, "restart:failure", 0);
    a.execution.syncIterMax = iniparser_getint(d, "basic:max_sync_intv", -1);

    FTIT_topology *t = &a.topology;
    MPI_Comm_size(globalComm, &t->nbProc);
    MPI_Comm_rank(globalComm, &t->myRank);
    t->splitRank = t->myRank;
    t->splitSize = t->nbProc;
    t->nodeSize = iniparser_getint(d, "basic:node_size", -1);
    t->nbHeads = iniparser_getint(d, "basic:head", 0);
    t->nbApprocs = t->nodeSize - t->nbHeads;
    t->groupSize = iniparser_getint(d, "basic:group_size", -1);
    if (t->nodeSize > 0) {
        t->nbNodes = t->nbProc / t->nodeSize;
        t->nodeID = t->myRank / t->nodeSize;
        t->nodeRank = t->myRank % t->nodeSize;
    }

    static const char *const interval[5] = {NULL, "basic:ckpt_l1", "basic:ckpt_l2",
                                            "basic:ckpt_l3", "basic:ckpt_l4"};
    static const char *const inline_of[5] = {NULL, NULL, "basic:inline_l2", "basic:inline_l3",
                                             "basic:inline_l4"};
    for (int l = 1; l <= 4; l++) {
        FTIT_checkpoint *k = &a.checkpoint[l];
        snprintf(k->dir, FTI_BUFS, "%s", l == 4 ? c->glbalDir : c->localDir);
        k->ckptIntv = iniparser_getint(d, interval[l], -1);
        k->isInline = inline_of[l] ? iniparser_getint(d, inline_of[l], 1) : 1;
    }
    a.checkpoint[4].ckptDcpIntv = iniparser_getint(d, "basic:dcp_l4", 0);

    a.injection.rank = iniparser_getint(d, "injection:rank", 0);
    a.injection.index = iniparser_getint(d, "injection:index", 0);
    a.injection.position = iniparser_getint(d, "injection:position", 0);
    a.injection.number = iniparser_getint(d, "injection:number", 0);
    a.injection.frequency = iniparser_getint(d, "injection:frequency", 0);
    iniparser_freedict(d);
    return a;
}
