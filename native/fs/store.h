/*
** store.h: the layout of Cairn's shared-memory chunk store and the functions over it.
**
** A store is one POSIX shared-memory segment per user, job and (simulated) node, or per
** process, plus an optional spill file on a node-local disk. It holds files: a fixed table of
** file records (paths relative to the mount point, sizes, chains of chunks) and a pool of
** fixed-size chunks. The segment survives the death of every process using it; only
** cairn_store_wipe() (or a reboot) removes it.
**
** The segment, from offset 0, every part aligned to 64 bytes and the chunk pool to 2 MiB:
**
**     struct cairn_store_header            magic, sizes, offsets, the lock, free-stack tops
**     struct cairn_store_file [max_files]  the file table
**     uint32_t link [total_chunks]         next chunk of the same file, or CAIRN_CHUNK_NONE
**     uint32_t free [total_chunks]         free-chunk stacks: one per NUMA node, then spill
**     chunk pool [mem_chunks * chunk_size]
**
** Chunk ids 0 .. mem_chunks-1 are chunks of the pool; ids mem_chunks .. total_chunks-1 are
** chunks of the spill file, at byte CAIRN_SPILL_HEADER + (id - mem_chunks) * chunk_size. A
** file's chunks form a chain through link[], from first_chunk; chunk k of the chain holds
** bytes k*chunk_size .. (k+1)*chunk_size-1 of the file. Everything refers to everything else
** by offsets and ids, never by pointers, so every process may map the segment anywhere.
**
** Concurrency. All metadata (file table, links, free stacks) is changed under one robust,
** process-shared mutex in the header. Data is copied outside it. A process that copies into
** or out of a file's chunks first takes one of the file's busy slots (its pid); freeing a
** file's chunks (unlink, truncate, replacing rename) waits until no live process holds a busy
** slot of the file, so a chunk is never handed to another file while a copy into it runs.
** A process that dies holding the mutex leaves it EOWNERDEAD: the next process to lock runs
** the repair (free stacks rebuilt from the chains, busy slots of dead processes cleared,
** inconsistent chains cut) before going on. A file's size only grows after its bytes are
** copied, so a writer killed mid-write leaves every byte below the size as written.
**
** This header is the one definition of the layout; crates/cairn-shm mirrors the structs and
** a test compares every offset and size with the C side (cairn_store_layout()).
*/
#ifndef CAIRN_STORE_H
#define CAIRN_STORE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CAIRN_STORE_MAGIC 0x3145524f544e5243ull /* "CRNTORE1" little-endian */
#define CAIRN_STORE_VERSION 1u
/* Longest path of a file relative to the mount point, with its NUL. */
#define CAIRN_STORE_PATH_MAX 256
/* NUMA nodes the pool is split across at most; a machine with more uses the first ones. */
#define CAIRN_STORE_MAX_NUMA 8
/* Processes that may copy into or out of one file at the same moment. */
#define CAIRN_STORE_BUSY_SLOTS 8
#define CAIRN_CHUNK_NONE 0xffffffffu
/* The spill file starts with one page holding its id; its chunks follow. */
#define CAIRN_SPILL_HEADER 4096u

/* File record states. */
#define CAIRN_FILE_FREE 0u
#define CAIRN_FILE_REG 1u
#define CAIRN_FILE_DIR 2u

struct cairn_store_header {
    uint64_t magic;          /* CAIRN_STORE_MAGIC once the creator finished */
    uint32_t version;        /* CAIRN_STORE_VERSION */
    uint32_t header_size;    /* sizeof(struct cairn_store_header), checked on attach */
    uint64_t segment_size;   /* bytes of the whole segment */
    uint64_t chunk_size;     /* bytes per chunk, a multiple of 4096 */
    uint32_t mem_chunks;     /* chunks in the pool */
    uint32_t spill_chunks;   /* chunks in the spill file (0: no spill) */
    uint32_t max_files;      /* records in the file table */
    uint32_t numa_nodes;     /* NUMA nodes the pool is split across (>= 1) */
    uint64_t files_offset;   /* byte offset of the file table */
    uint64_t link_offset;    /* byte offset of link[] */
    uint64_t free_offset;    /* byte offset of free[] */
    uint64_t data_offset;    /* byte offset of chunk 0 */
    uint64_t spill_id;       /* random; also at the start of the spill file */
    int32_t creator_pid;
    uint32_t flags;          /* CAIRN_STORE_F_* */
    uint64_t files_used;     /* records not FREE (kept for df) */
    /* The free stack of NUMA node i is free[numa_first[i] .. numa_first[i]+numa_count[i]),
     * holding numa_top[i] ids; the spill stack is free[mem_chunks .. total), spill_top ids.
     * Pool chunks numa_first[i] .. numa_first[i]+numa_count[i]-1 live on node i. */
    uint32_t numa_first[CAIRN_STORE_MAX_NUMA];
    uint32_t numa_count[CAIRN_STORE_MAX_NUMA];
    uint32_t numa_top[CAIRN_STORE_MAX_NUMA];
    uint32_t spill_top;
    uint32_t repairs;        /* times a repair ran after a process died holding the lock */
    uint64_t generation;     /* bumped by every metadata change (listing caches) */
    uint64_t chunk_frees;    /* bumped whenever chunks are freed (invalidates chain cursors) */
    pthread_mutex_t lock;    /* robust, process-shared */
    uint8_t reserved[56];
};

struct cairn_store_file {
    uint32_t state;          /* CAIRN_FILE_FREE / REG / DIR */
    uint32_t mode;           /* permission bits */
    uint64_t size;           /* bytes; chunks cover at least this */
    uint32_t first_chunk;    /* CAIRN_CHUNK_NONE when it has none */
    uint32_t last_chunk;
    uint32_t nchunks;
    uint32_t gen;            /* bumped whenever the record is freed or reused */
    int64_t mtime_ns;        /* CLOCK_REALTIME */
    int64_t ctime_ns;
    uint64_t path_hash;      /* of path[], to compare quickly */
    int32_t busy[CAIRN_STORE_BUSY_SLOTS]; /* pids copying into or out of it, 0: free */
    uint64_t writes_started; /* writes and truncations begun on it */
    uint64_t writes_done;    /* ... and ended: equal when none is in flight */
    char path[CAIRN_STORE_PATH_MAX];      /* relative to the mount point, "a/b/c", NUL-ended */
};

#define CAIRN_STORE_F_PER_PROCESS 1u

/* How to open (and, if missing, create) a store. Strings are not kept. */
struct cairn_store_config {
    const char *name;        /* shm name, "/cairn-..."; see cairn_store_name() */
    uint64_t size;           /* pool bytes (rounded down to whole chunks) */
    uint64_t chunk;          /* chunk bytes (a multiple of 4096) */
    uint32_t max_files;      /* file records */
    const char *spill_path;  /* spill file, or NULL / "" for none */
    uint64_t spill_size;     /* spill bytes (rounded down to whole chunks) */
    int per_process;         /* recorded in the header flags */
    int create;              /* 0: attach only (ENOENT if missing) */
    int populate;            /* fill the page tables of the metadata at attach (pool chunks
                              * are filled per chunk on first use by the process) */
};

/* A file as stat reports it. */
struct cairn_store_stat {
    uint32_t type;           /* CAIRN_FILE_REG / DIR (an implied directory is DIR) */
    uint32_t mode;
    uint64_t size;
    uint64_t nchunks;
    int64_t mtime_ns;
    int64_t ctime_ns;
    uint64_t ino;            /* stable while the file exists: its record index + 2 */
    /* Writes (and truncations) begun and ended: a reader that sees them equal before and
     * unchanged after copying the file copied bytes no write touched meanwhile. */
    uint64_t writes_started;
    uint64_t writes_done;
};

/* A handle on one file: the record index and its generation, so a handle outlives neither
 * an unlink nor a reuse of the record (ESTALE). */
struct cairn_store_fh {
    uint32_t index;
    uint32_t gen;
};

/* Where one chunk of a file is, for the zero-copy drain (CRUISE's get_chunk_meta_list). */
struct cairn_chunk_meta {
    uint64_t file_offset;    /* first file byte in the chunk */
    uint64_t length;         /* file bytes in the chunk (the last one may be short) */
    uint32_t id;             /* chunk id */
    uint32_t in_spill;       /* 1: in the spill file */
    uint64_t offset;         /* pool chunks: byte offset in the segment; spill: in the file */
};

/* Usage, for df. */
struct cairn_store_usage {
    uint64_t chunk_size;
    uint64_t mem_chunks, mem_free;
    uint64_t spill_chunks, spill_free;
    uint64_t max_files, files_used;
    uint32_t numa_nodes;
    uint32_t repairs;
    uint32_t per_process;
    uint32_t version;
};

typedef struct cairn_store cairn_store;

/* Every function returns 0 (or a count) on success and a negative errno on failure, and never
 * exits or aborts. cairn_store_open fills err (if given) with a sentence naming what is wrong. */

/* [OUT] buf: the shm name for uid, job and node ("/cairn-<uid>-<job>-n<node>"), or for a
 * process when node < 0 ("/cairn-<uid>-<job>-p<-node>"). Characters of job outside
 * [A-Za-z0-9._-] become '_'. Returns the length, or -ENAMETOOLONG. */
int cairn_store_name(char *buf, size_t len, unsigned uid, const char *job, long node);

/* Attach to the store named in cfg, creating it (pool pages allocated, so pre-faulted) when it
 * does not exist and cfg->create is set. A store that exists keeps its own sizes. */
int cairn_store_open(const struct cairn_store_config *cfg, cairn_store **out,
                     char *err, size_t errlen);
void cairn_store_close(cairn_store *s);
/* Remove the store's segment and spill file. Stores attached elsewhere stay mapped there. */
int cairn_store_wipe(const char *name, const char *spill_path);

/* The mapped segment, for zero-copy readers. */
void *cairn_store_base(cairn_store *s);
const struct cairn_store_header *cairn_store_header(cairn_store *s);

/* Paths are relative to the mount point, normalised ("a/b", no leading or trailing '/', no
 * "." or ".." components, "" is the root); cairn_store_normalize() makes one from the part of
 * a path after the mount point. */
int cairn_store_normalize(const char *in, char *out, size_t len);

#define CAIRN_O_CREAT 1
#define CAIRN_O_EXCL 2
#define CAIRN_O_TRUNC 4

/* Look up (and with CAIRN_O_CREAT create) the regular file at path. ENOENT, EEXIST (EXCL),
 * EISDIR, ENOTDIR (a parent is a file), ENFILE (file table full), ENAMETOOLONG. */
int cairn_store_open_file(cairn_store *s, const char *path, int flags, uint32_t mode,
                          struct cairn_store_fh *fh);
/* Write len bytes at off, allocating chunks (zero-filling any gap). Returns the bytes written:
 * fewer than len when chunks ran out part way, -ENOSPC when none could be written. */
ssize_t cairn_store_pwrite(cairn_store *s, struct cairn_store_fh fh, const void *buf,
                           size_t len, uint64_t off);
/* Read up to len bytes at off; 0 at or past the end. */
ssize_t cairn_store_pread(cairn_store *s, struct cairn_store_fh fh, void *buf, size_t len,
                          uint64_t off);
int cairn_store_ftruncate(cairn_store *s, struct cairn_store_fh fh, uint64_t size);
int cairn_store_fstat(cairn_store *s, struct cairn_store_fh fh, struct cairn_store_stat *st);
/* Make spill-file data durable (fdatasync of the spill file); the pool needs nothing. */
int cairn_store_sync(cairn_store *s);

/* stat by path: files, explicit directories, implied directories (a prefix of a file's path)
 * and the root. */
int cairn_store_stat(cairn_store *s, const char *path, struct cairn_store_stat *st);
int cairn_store_unlink(cairn_store *s, const char *path);
/* Rename a file (replacing a file at to) or a directory (every path under it). */
int cairn_store_rename(cairn_store *s, const char *from, const char *to);
int cairn_store_mkdir(cairn_store *s, const char *path, uint32_t mode);
int cairn_store_rmdir(cairn_store *s, const char *path);

/* Directory listing: call with *cookie = 0, then again with the cookie it returns, until it
 * returns 0 (end). Each call returns 1 and fills name (one component) and type. */
int cairn_store_readdir(cairn_store *s, const char *dir, uint64_t *cookie, char *name,
                        size_t len, uint32_t *type);

/* Fill up to max entries of out with where the file's chunks are; returns how many the file
 * has (call again with a larger array if that is more than max). */
ssize_t cairn_store_chunks(cairn_store *s, struct cairn_store_fh fh,
                           struct cairn_chunk_meta *out, size_t max);
/* Read-only access to a chunk's bytes: pool chunks are addressed in place; spill chunks are
 * read with cairn_store_read_spill. */
ssize_t cairn_store_read_spill(cairn_store *s, uint64_t offset, void *buf, size_t len);

int cairn_store_usage(cairn_store *s, struct cairn_store_usage *u);

/* For the layout test: fills out with sizeof and offsetof values (see store.c for the order)
 * and returns how many there are. */
size_t cairn_store_layout(uint64_t *out, size_t max);

#ifdef __cplusplus
}
#endif
#endif
