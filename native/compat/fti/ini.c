/*
 * ini.c: the INI reader functions FTI's library exports (iniparser_load, _getstring,
 * _getint, _getdouble, _freedict), which FTI's own test programs call to read back their
 * configuration file (the [restart] Failure this library rewrites, the node size, ...).
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
