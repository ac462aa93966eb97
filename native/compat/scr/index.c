/*
 * index.c: the dataset index of libscr, <prefix>/.scr/cairn.index.
 *
 * SCR names datasets with the application's strings and numbers them itself; Cairn stores
 * every SCR checkpoint as a version of one checkpoint name (SCR_CKPT_NAME) with the dataset id
 * as the version and the dataset name as its label. The label travels with the checkpoint,
 * so restarts need no index. The index serves what outlives a run and needs a name without
 * loading data: the next dataset id (ids are never reused), which datasets SCR_Drop dropped or
 * a restart found invalid (never restarted from again), and the name -> id map behind
 * SCR_Current, SCR_Drop, SCR_Delete and SCR_CURRENT. Its format, one record per line:
 *
 *     cairn-scr-index 1
 *     next <id>
 *     <id> <flags> ok|invalid|dropped <name to the end of the line>
 *
 * Rank 0 alone reads and writes it: it reads it at SCR_Init and sends the bytes to the other
 * ranks, so every rank holds the same copy and makes the same decisions; it rewrites it
 * (a temporary file, fsync, rename) after every change. Writing it is best effort: a failure
 * is reported and the run goes on, because the datasets themselves are safe in Cairn.
 *
 * The output files of an output dataset are listed beside it in cairn-output.<id> (paths
 * separated by NUL bytes), for SCR_Delete.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compat.h"

#define INDEX_FILE "cairn.index"
#define INDEX_MAGIC "cairn-scr-index 1"
/* An index larger than this is taken for damage rather than read and sent. */
#define INDEX_MAX (64 << 20)

static const char *state_word[] = { "ok", "invalid", "dropped" };

void scr_index_clear(struct scr_index *ix)
{
    for (size_t i = 0; i < ix->n; i++)
        free(ix->e[i].name);
    free(ix->e);
    ix->e = NULL;
    ix->n = 0;
}

int scr_index_add(struct scr_index *ix, int64_t id, int flags, const char *name)
{
    char *copy = strdup(name);
    struct scr_entry *grown = copy ? realloc(ix->e, (ix->n + 1) * sizeof *grown) : NULL;
    if (!grown) {
        free(copy);
        return -1;
    }
    ix->e = grown;
    ix->e[ix->n++] = (struct scr_entry){ id, flags, SCR_DS_OK, copy };
    if (id >= ix->next)
        ix->next = id + 1;
    return 0;
}

void scr_index_remove(struct scr_index *ix, struct scr_entry *e)
{
    size_t i = (size_t)(e - ix->e);
    free(e->name);
    memmove(&ix->e[i], &ix->e[i + 1], (ix->n - i - 1) * sizeof *e);
    ix->n--;
}

struct scr_entry *scr_index_find(struct scr_index *ix, const char *name)
{
    /* The newest first: a name the application reused names its latest dataset. */
    for (size_t i = ix->n; i-- > 0;)
        if (ix->e[i].state != SCR_DS_DROPPED && strcmp(ix->e[i].name, name) == 0)
            return &ix->e[i];
    return NULL;
}

void scr_index_files_path(const struct scr_index *ix, int64_t id, char *buf, size_t len)
{
    snprintf(buf, len, "%s/cairn-output.%" PRId64, ix->dir, id);
}

/* Parse one record line (NUL-terminated, without its newline). Returns 0 or -1. */
static int parse_record(struct scr_index *ix, char *line)
{
    char *end;
    errno = 0;
    long long id = strtoll(line, &end, 10);
    if (errno || end == line || *end != ' ' || id < 0)
        return -1;
    char *p = end + 1;
    long flags = strtol(p, &end, 10);
    if (end == p || *end != ' ' || flags < 0 || flags > (SCR_FLAG_CHECKPOINT | SCR_FLAG_OUTPUT))
        return -1;
    p = end + 1;
    int state = -1;
    for (int s = 0; s < 3; s++) {
        size_t w = strlen(state_word[s]);
        if (strncmp(p, state_word[s], w) == 0 && p[w] == ' ') {
            state = s;
            p += w + 1;
            break;
        }
    }
    if (state < 0 || *p == '\0' || scr_index_add(ix, id, (int)flags, p) != 0)
        return -1;
    ix->e[ix->n - 1].state = (enum scr_state)state;
    return 0;
}

/* Parse the whole file (`text` is modified). Returns 0, or the 1-based line that is wrong. */
static int parse(struct scr_index *ix, char *text)
{
    int lineno = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        lineno++;
        if (lineno == 1) {
            if (strcmp(line, INDEX_MAGIC) != 0)
                return 1;
        } else if (strncmp(line, "next ", 5) == 0) {
            char *end;
            long long next = strtoll(line + 5, &end, 10);
            if (*end != '\0' || next < 1)
                return lineno;
            if (next > ix->next)
                ix->next = next;
        } else if (parse_record(ix, line) != 0) {
            return lineno;
        }
    }
    return 0;
}

void scr_index_load(struct scr_index *ix, const char *prefix, MPI_Comm comm, int rank)
{
    snprintf(ix->dir, sizeof ix->dir, "%s/.scr", prefix);
    ix->next = 1;
    ix->e = NULL;
    ix->n = 0;
    char path[SCR_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/" INDEX_FILE, ix->dir);
    if (rank == 0 && mkdir(ix->dir, 0777) != 0 && errno != EEXIST)
        scr_say("index", "cannot create %s: %s", ix->dir, strerror(errno));
    int status;
    char *text = scr_read_shared(path, INDEX_MAX, comm, rank, &status);
    if (!text) {
        if (status < 0 && rank == 0)
            scr_say("index", "dataset names from earlier runs are unknown (%s)", path);
        return;
    }
    int bad = parse(ix, text);
    free(text);
    if (bad) {
        if (rank == 0)
            scr_say("index", "%s is damaged at line %d; dataset names from earlier runs are "
                             "unknown, and a new index is written at the next dataset",
                    path, bad);
        scr_index_clear(ix);
    }
}

void scr_index_save(const struct scr_index *ix, int rank)
{
    if (rank != 0)
        return;
    char path[SCR_PATH_MAX + 32], tmp[SCR_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/" INDEX_FILE, ix->dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    int ok = f != NULL;
    if (ok) {
        fprintf(f, INDEX_MAGIC "\nnext %" PRId64 "\n", ix->next);
        for (size_t i = 0; i < ix->n; i++)
            fprintf(f, "%" PRId64 " %d %s %s\n", ix->e[i].id, ix->e[i].flags,
                    state_word[ix->e[i].state], ix->e[i].name);
        ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
        ok = fclose(f) == 0 && ok;
    }
    if (ok && rename(tmp, path) == 0) {
        int d = open(ix->dir, O_RDONLY | O_DIRECTORY);
        if (d >= 0) {
            fsync(d);
            close(d);
        }
        return;
    }
    scr_say("index", "cannot write %s: %s; the datasets are stored, but SCR_Drop, SCR_Delete "
                     "and SCR_Current may not find them by name in a later run",
            path, strerror(errno));
    unlink(tmp);
}
