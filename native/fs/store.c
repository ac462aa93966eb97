/*
** store.c: Cairn's shared-memory chunk store (layout and rules in store.h).
**
** The file is divided into:
**   - naming, paths and small helpers (raw syscalls for the spill file, so that the store
**     never goes through the LD_PRELOAD wrappers it is linked beside);
**   - creating and attaching (the segment, pre-faulting, NUMA placement, the spill file);
**   - the lock and the repair run when a process died holding it;
**   - chunk allocation and chains;
**   - file operations (open, pwrite, pread, truncate, stat);
**   - name operations (unlink, rename, mkdir, rmdir, readdir);
**   - the zero-copy chunk list, usage and the layout table for the test.
**
** Creation is a small state machine:
**
**     (absent) --shm_open O_EXCL--> (sized, magic 0) --init, magic stored last--> (ready)
**
** cairn_store_open() creates when the segment is absent; a process that finds it sized but
** without magic waits for the creator, and when the creator is dead it removes the
** half-made segment and creates it again. Only a ready store is ever used.
**
** No function here exits, aborts or prints: errors are negative errno values, and
** cairn_store_open() explains its failures in the caller's buffer.
*/
#define _GNU_SOURCE
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#define MADV_POPULATE_WRITE 23
#endif

struct cairn_store {
    struct cairn_store_header *h;
    size_t map_len;
    int spill_fd;              /* -1: no spill file (or it is missing) */
    struct cairn_store_file *files;
    uint32_t *link;
    uint32_t *free_ids;
    uint8_t *data;
    /* A cursor into one chain, so sequential access does not walk from the start: valid
     * while the file's record, generation and the store's chunk_frees are unchanged. Read
     * and written under the store lock only. */
    uint32_t cur_index, cur_gen, cur_k, cur_id;
    uint64_t cur_frees;
    /* One bit per pool chunk: this process's page tables for it are filled. */
    uint8_t *mapped;
};

/* ---- small helpers ---------------------------------------------------------------- */

static void say(char *err, size_t len, const char *fmt, ...)
{
    if (err == NULL || len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint64_t hash_path(const char *p)
{
    /* FNV-1a: paths are short, and this only narrows the string compare. */
    uint64_t x = 0xcbf29ce484222325ull;
    for (; *p; p++)
        x = (x ^ (uint8_t)*p) * 0x100000001b3ull;
    return x;
}

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static int pid_alive(int32_t pid)
{
    if (pid <= 0)
        return 0;
    return kill(pid, 0) == 0 || errno != ESRCH;
}

/* Raw syscalls for the spill file: the store is linked into the LD_PRELOAD library, whose
 * wrappers of open/pread/pwrite must not see the store's own I/O. */
static int sys_open(const char *path, int flags, mode_t mode)
{
    return (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode);
}
static ssize_t sys_pread(int fd, void *buf, size_t len, off_t off)
{
    return syscall(SYS_pread64, fd, buf, len, off);
}
static ssize_t sys_pwrite(int fd, const void *buf, size_t len, off_t off)
{
    return syscall(SYS_pwrite64, fd, buf, len, off);
}
static int sys_close(int fd) { return (int)syscall(SYS_close, fd); }

/* Full positioned I/O on the spill file; returns 0 or -errno. */
static int spill_io(int fd, void *buf, size_t len, uint64_t off, int write)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = write ? sys_pwrite(fd, p, len, (off_t)off) : sys_pread(fd, p, len, (off_t)off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            return -EIO;
        p += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return 0;
}

int cairn_store_name(char *buf, size_t len, unsigned uid, const char *job, long node)
{
    char clean[96];
    size_t i = 0;
    if (job == NULL || *job == 0)
        job = "local";
    for (; job[i] && i + 1 < sizeof clean; i++) {
        char c = job[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '-';
        clean[i] = ok ? c : '_';
    }
    clean[i] = 0;
    int n = node >= 0 ? snprintf(buf, len, "/cairn-%u-%s-n%ld", uid, clean, node)
                      : snprintf(buf, len, "/cairn-%u-%s-p%ld", uid, clean, -node);
    if (n < 0 || (size_t)n >= len)
        return -ENAMETOOLONG;
    return n;
}

int cairn_store_normalize(const char *in, char *out, size_t len)
{
    size_t o = 0;
    const char *p = in;
    if (len == 0)
        return -ENAMETOOLONG;
    while (*p) {
        while (*p == '/')
            p++;
        if (*p == 0)
            break;
        const char *e = p;
        while (*e && *e != '/')
            e++;
        size_t n = (size_t)(e - p);
        if (n == 1 && p[0] == '.') {
            /* nothing */
        } else if (n == 2 && p[0] == '.' && p[1] == '.') {
            if (o == 0)
                return -EXDEV; /* leaves the mount point */
            while (o > 0 && out[o - 1] != '/')
                o--;
            if (o > 0)
                o--; /* the '/' before the dropped component */
        } else {
            if (o + (o > 0) + n + 1 > len || o + (o > 0) + n + 1 > CAIRN_STORE_PATH_MAX)
                return -ENAMETOOLONG;
            if (o > 0)
                out[o++] = '/';
            memcpy(out + o, p, n);
            o += n;
        }
        p = e;
    }
    out[o] = 0;
    return (int)o;
}

/* ---- creating and attaching --------------------------------------------------------- */

/* The NUMA nodes the kernel reports online (count of "N" or "N-M" items' nodes), at most
 * CAIRN_STORE_MAX_NUMA, at least 1. */
static uint32_t numa_count(void)
{
    int fd = sys_open("/sys/devices/system/node/online", O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return 1;
    char buf[256];
    ssize_t n = sys_pread(fd, buf, sizeof buf - 1, 0);
    sys_close(fd);
    if (n <= 0)
        return 1;
    buf[n] = 0;
    uint32_t count = 0;
    char *p = buf;
    while (*p && *p != '\n') {
        long a = strtol(p, &p, 10), b = a;
        if (*p == '-')
            b = strtol(p + 1, &p, 10);
        if (b >= a)
            count += (uint32_t)(b - a + 1);
        if (*p == ',')
            p++;
        else
            break;
    }
    if (count == 0)
        count = 1;
    return count > CAIRN_STORE_MAX_NUMA ? CAIRN_STORE_MAX_NUMA : count;
}

/* Bind the pool chunks of each NUMA node to that node before the pages are allocated
 * (MPOL_BIND = 2). Only done with more than one node; best effort: a failure leaves the
 * kernel's default placement. */
static void numa_place(struct cairn_store_header *h, uint8_t *data)
{
    if (h->numa_nodes < 2)
        return;
    for (uint32_t i = 0; i < h->numa_nodes; i++) {
        unsigned long mask = 1ul << i;
        void *at = data + (uint64_t)h->numa_first[i] * h->chunk_size;
        uint64_t len = (uint64_t)h->numa_count[i] * h->chunk_size;
        if (len > 0)
            syscall(SYS_mbind, at, len, 2, &mask, sizeof(mask) * 8, 0);
    }
}

static int map_segment(int fd, size_t len, void **out)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return -errno;
    *out = p;
    return 0;
}

static void set_pointers(cairn_store *s)
{
    uint8_t *b = (uint8_t *)s->h;
    if (s->mapped == NULL)
        s->mapped = calloc(s->h->mem_chunks / 8 + 1, 1);
    s->files = (struct cairn_store_file *)(b + s->h->files_offset);
    s->link = (uint32_t *)(b + s->h->link_offset);
    s->free_ids = (uint32_t *)(b + s->h->free_offset);
    s->data = b + s->h->data_offset;
    s->cur_index = UINT32_MAX;
}

static uint64_t random_id(void)
{
    uint64_t x = 0;
    if (syscall(SYS_getrandom, &x, sizeof x, 0) != (long)sizeof x)
        x = (uint64_t)now_ns() ^ ((uint64_t)getpid() << 32);
    return x | 1;
}

/* Create and size the spill file, with the store's id in its first page. */
static int create_spill(const char *path, uint64_t id, uint64_t bytes, char *err, size_t errlen)
{
    int fd = sys_open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 && errno == EEXIST) {
        /* Left by a store that no longer exists (the segment was created just now). */
        unlink(path);
        fd = sys_open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    }
    if (fd < 0) {
        int e = errno;
        say(err, errlen, "cannot create the spill file %s: %s", path, strerror(e));
        return -e;
    }
    int r = posix_fallocate(fd, 0, (off_t)(CAIRN_SPILL_HEADER + bytes));
    if (r != 0) {
        say(err, errlen, "cannot reserve %llu MiB for the spill file %s: %s",
            (unsigned long long)(bytes >> 20), path, strerror(r));
        sys_close(fd);
        unlink(path);
        return -r;
    }
    uint8_t page[CAIRN_SPILL_HEADER];
    memset(page, 0, sizeof page);
    memcpy(page, "CAIRNSPL", 8);
    memcpy(page + 8, &id, 8);
    r = spill_io(fd, page, sizeof page, 0, 1);
    if (r < 0) {
        say(err, errlen, "cannot write the spill file %s: %s", path, strerror(-r));
        sys_close(fd);
        unlink(path);
        return r;
    }
    return fd;
}

/* Open the spill file of an existing store and check it belongs to it. Returns the fd, or
 * -1 when it is missing or is another store's (spill chunks then read as I/O errors). */
static int open_spill(const char *path, uint64_t id)
{
    if (path == NULL || *path == 0)
        return -1;
    int fd = sys_open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0);
    if (fd < 0)
        return -1;
    struct stat st;
    uint8_t head[16];
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != getuid() ||
        (st.st_mode & 077) != 0 || spill_io(fd, head, 16, 0, 0) != 0 ||
        memcmp(head, "CAIRNSPL", 8) != 0 || memcmp(head + 8, &id, 8) != 0) {
        sys_close(fd);
        return -1;
    }
    return fd;
}

static int init_mutex(pthread_mutex_t *m)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    int r = pthread_mutex_init(m, &a);
    pthread_mutexattr_destroy(&a);
    return -r;
}

/* Lay out and initialise a new segment on fd (already created, empty). */
static int create_segment(int fd, const struct cairn_store_config *cfg, cairn_store *s,
                          char *err, size_t errlen)
{
    uint64_t chunk = cfg->chunk;
    uint64_t mem = cfg->size / chunk;
    uint64_t spill = (cfg->spill_path && *cfg->spill_path) ? cfg->spill_size / chunk : 0;
    uint64_t total = mem + spill;
    if (total >= CAIRN_CHUNK_NONE) {
        say(err, errlen, "the store would have %llu chunks; at most %u fit the format",
            (unsigned long long)total, CAIRN_CHUNK_NONE - 1);
        return -EINVAL;
    }
    uint64_t files_off = align_up(sizeof(struct cairn_store_header), 64);
    uint64_t link_off = align_up(files_off + (uint64_t)cfg->max_files * sizeof(struct cairn_store_file), 64);
    uint64_t free_off = align_up(link_off + total * 4, 64);
    uint64_t data_off = align_up(free_off + total * 4, 2u << 20);
    uint64_t seg = data_off + mem * chunk;

    if (ftruncate(fd, (off_t)seg) != 0) {
        int e = errno;
        say(err, errlen, "cannot size the store %s to %llu MiB: %s", cfg->name,
            (unsigned long long)(seg >> 20), strerror(e));
        return -e;
    }
    void *base = NULL;
    int r = map_segment(fd, seg, &base);
    if (r < 0) {
        say(err, errlen, "cannot map the store %s: %s", cfg->name, strerror(-r));
        return r;
    }
    struct cairn_store_header *h = base;
    memset(h, 0, sizeof *h);
    h->version = CAIRN_STORE_VERSION;
    h->header_size = sizeof *h;
    h->segment_size = seg;
    h->chunk_size = chunk;
    h->mem_chunks = (uint32_t)mem;
    h->spill_chunks = (uint32_t)spill;
    h->max_files = cfg->max_files;
    h->files_offset = files_off;
    h->link_offset = link_off;
    h->free_offset = free_off;
    h->data_offset = data_off;
    h->spill_id = random_id();
    h->creator_pid = getpid();
    h->flags = cfg->per_process ? CAIRN_STORE_F_PER_PROCESS : 0;
    h->numa_nodes = cfg->per_process ? 1 : numa_count();
    if (h->numa_nodes > mem)
        h->numa_nodes = mem > 0 ? (uint32_t)mem : 1;
    for (uint32_t i = 0; i < h->numa_nodes; i++) {
        h->numa_first[i] = (uint32_t)(mem * i / h->numa_nodes);
        h->numa_count[i] = (uint32_t)(mem * (i + 1) / h->numa_nodes) - h->numa_first[i];
    }
    s->h = h;
    s->map_len = seg;
    set_pointers(s);
    numa_place(h, s->data);

    /* Allocating every page now is the pre-faulting: writes later never take a first-touch
     * fault in the kernel, which is what makes tmpfs slow. posix_fallocate also turns a
     * /dev/shm too small for the store into an error here instead of a SIGBUS later. */
    r = posix_fallocate(fd, 0, (off_t)seg);
    if (r != 0) {
        say(err, errlen, "cannot reserve %llu MiB of shared memory for the store %s: %s (is /dev/shm large enough? lower [tiers.mem] size)",
            (unsigned long long)(seg >> 20), cfg->name, strerror(r));
        return -r;
    }
    /* posix_fallocate reserves the pages but leaves them to be cleared on first touch:
     * clear them all now, once for the store's lifetime, so no writer ever takes that cost.
     * (Other processes still fill their own page tables, chunk by chunk: populate_chunk.) */
    if (madvise(base, seg, MADV_POPULATE_WRITE) != 0) {
        for (uint64_t at = 0; at < seg; at += 4096)
            __atomic_store_n((uint8_t *)base + at, 0, __ATOMIC_RELAXED);
    }
    (void)cfg->populate;
    for (uint32_t i = 0; i < cfg->max_files; i++)
        s->files[i].first_chunk = s->files[i].last_chunk = CAIRN_CHUNK_NONE;
    for (uint64_t i = 0; i < total; i++) {
        s->link[i] = CAIRN_CHUNK_NONE;
        s->free_ids[i] = (uint32_t)i;
    }
    /* Stacks pop from the top: put low ids on top so files start at the front. */
    for (uint32_t n = 0; n < h->numa_nodes; n++) {
        uint32_t f = h->numa_first[n], c = h->numa_count[n];
        for (uint32_t i = 0; i < c; i++)
            s->free_ids[f + i] = f + c - 1 - i;
        h->numa_top[n] = c;
    }
    for (uint64_t i = 0; i < spill; i++)
        s->free_ids[mem + i] = (uint32_t)(total - 1 - i);
    h->spill_top = (uint32_t)spill;
    r = init_mutex(&h->lock);
    if (r < 0) {
        say(err, errlen, "cannot initialise the store's lock: %s", strerror(-r));
        return r;
    }
    s->spill_fd = -1;
    if (spill > 0) {
        int sfd = create_spill(cfg->spill_path, h->spill_id, spill * chunk, err, errlen);
        if (sfd < 0)
            return sfd;
        s->spill_fd = sfd;
    }
    __atomic_store_n(&h->magic, CAIRN_STORE_MAGIC, __ATOMIC_RELEASE);
    return 0;
}

static int check_owner(int fd, const char *name, char *err, size_t errlen)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -errno;
    if (st.st_uid != getuid() || (st.st_mode & 077) != 0) {
        say(err, errlen, "the store %s belongs to uid %u with mode %o; Cairn uses only stores private to the user",
            name, (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777));
        return -EACCES;
    }
    return (int)(st.st_size > 0);
}

/* Attach to a segment another process created. Returns 0, -EAGAIN when it is not ready
 * yet, or another error. *dead is set when it is half-made by a process that died. */
static int attach_segment(int fd, const struct cairn_store_config *cfg, cairn_store *s,
                          int *dead, char *err, size_t errlen)
{
    struct stat st;
    *dead = 0;
    if (fstat(fd, &st) != 0)
        return -errno;
    if ((size_t)st.st_size < sizeof(struct cairn_store_header))
        return -EAGAIN;
    void *base = NULL;
    int r = map_segment(fd, (size_t)st.st_size, &base);
    if (r < 0)
        return r;
    struct cairn_store_header *h = base;
    if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != CAIRN_STORE_MAGIC) {
        *dead = h->creator_pid != 0 && !pid_alive(h->creator_pid);
        munmap(base, (size_t)st.st_size);
        return -EAGAIN;
    }
    if (h->version != CAIRN_STORE_VERSION || h->header_size != sizeof *h ||
        h->segment_size != (uint64_t)st.st_size) {
        say(err, errlen, "the store %s has layout version %u (header %u bytes, %llu bytes); this build reads version %u: remove it with cairn fs wipe",
            cfg->name, h->version, h->header_size, (unsigned long long)h->segment_size,
            CAIRN_STORE_VERSION);
        munmap(base, (size_t)st.st_size);
        return -EPROTO;
    }
    uint64_t total = (uint64_t)h->mem_chunks + h->spill_chunks;
    if (h->files_offset + (uint64_t)h->max_files * sizeof(struct cairn_store_file) > h->link_offset ||
        h->link_offset + total * 4 > h->free_offset || h->free_offset + total * 4 > h->data_offset ||
        h->data_offset + (uint64_t)h->mem_chunks * h->chunk_size > h->segment_size ||
        h->numa_nodes == 0 || h->numa_nodes > CAIRN_STORE_MAX_NUMA) {
        say(err, errlen, "the store %s has an inconsistent header: remove it with cairn fs wipe", cfg->name);
        munmap(base, (size_t)st.st_size);
        return -EPROTO;
    }
    if (cfg->populate) {
        /* Fill this process's page tables for the metadata now; pool chunks are populated
         * one by one as this process first touches them (populate_chunk). */
        madvise(base, h->data_offset, MADV_POPULATE_WRITE);
    }
    s->h = h;
    s->map_len = (size_t)st.st_size;
    set_pointers(s);
    s->spill_fd = h->spill_chunks > 0 ? open_spill(cfg->spill_path, h->spill_id) : -1;
    return 0;
}

int cairn_store_open(const struct cairn_store_config *cfg, cairn_store **out, char *err,
                     size_t errlen)
{
    *out = NULL;
    if (cfg == NULL || cfg->name == NULL || cfg->name[0] != '/' || strchr(cfg->name + 1, '/')) {
        say(err, errlen, "invalid store name %s", cfg && cfg->name ? cfg->name : "(null)");
        return -EINVAL;
    }
    if (cfg->create) {
        if (cfg->chunk < 4096 || cfg->chunk % 4096 != 0 || cfg->chunk > (1ull << 30)) {
            say(err, errlen, "[tiers.mem] chunk = %llu: must be a multiple of 4096 from 4K to 1G",
                (unsigned long long)cfg->chunk);
            return -EINVAL;
        }
        if (cfg->size < cfg->chunk) {
            say(err, errlen, "[tiers.mem] size = %llu is smaller than one chunk (%llu)",
                (unsigned long long)cfg->size, (unsigned long long)cfg->chunk);
            return -EINVAL;
        }
        if (cfg->max_files == 0 || cfg->max_files > (1u << 24)) {
            say(err, errlen, "[tiers.mem] max_files = %u: must be from 1 to 16777216", cfg->max_files);
            return -EINVAL;
        }
    }
    cairn_store *s = calloc(1, sizeof *s);
    if (s == NULL)
        return -ENOMEM;
    s->spill_fd = -1;
    int r = -EAGAIN;
    /* Waits for a concurrent creator: 100 ms steps, up to a minute (a creator reserving
     * gigabytes may take seconds). */
    for (int attempt = 0; attempt < 600; attempt++) {
        int fd = cfg->create ? shm_open(cfg->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600) : -1;
        if (fd >= 0) {
            fchmod(fd, 0600);
            r = create_segment(fd, cfg, s, err, errlen);
            close(fd);
            if (r < 0) {
                if (s->h)
                    munmap(s->h, s->map_len);
                if (s->spill_fd >= 0)
                    sys_close(s->spill_fd);
                shm_unlink(cfg->name);
                free(s);
                return r;
            }
            *out = s;
            return 0;
        }
        if (cfg->create && errno != EEXIST) {
            int e = errno;
            say(err, errlen, "cannot create the store %s: %s", cfg->name, strerror(e));
            free(s);
            return -e;
        }
        fd = shm_open(cfg->name, O_RDWR | O_CLOEXEC, 0);
        if (fd < 0) {
            int e = errno;
            if (e == ENOENT && cfg->create)
                continue; /* removed between the two calls: try creating again */
            say(err, errlen, e == ENOENT ? "no store %s (nothing was written to it on this node)"
                                         : "cannot open the store %s: %s",
                cfg->name, strerror(e));
            free(s);
            return -e;
        }
        int own = check_owner(fd, cfg->name, err, errlen);
        if (own < 0) {
            close(fd);
            free(s);
            return own;
        }
        int dead = 0;
        r = own ? attach_segment(fd, cfg, s, &dead, err, errlen) : -EAGAIN;
        close(fd);
        if (r == 0) {
            *out = s;
            return 0;
        }
        if (r != -EAGAIN) {
            free(s);
            return r;
        }
        if (dead || (attempt > 50 && own == 0) || attempt > 300) {
            /* Half-made by a process that died (or stuck half-made for 30 s): remove it
             * and start again. */
            shm_unlink(cfg->name);
            continue;
        }
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    say(err, errlen, "the store %s is still being created by another process after a minute", cfg->name);
    free(s);
    return r;
}

void cairn_store_close(cairn_store *s)
{
    if (s == NULL)
        return;
    if (s->h)
        munmap(s->h, s->map_len);
    if (s->spill_fd >= 0)
        sys_close(s->spill_fd);
    free(s->mapped);
    free(s);
}

int cairn_store_wipe(const char *name, const char *spill_path)
{
    int r = 0;
    if (shm_unlink(name) != 0 && errno != ENOENT)
        r = -errno;
    if (spill_path && *spill_path && unlink(spill_path) != 0 && errno != ENOENT && r == 0)
        r = -errno;
    return r;
}

void *cairn_store_base(cairn_store *s) { return s->h; }
const struct cairn_store_header *cairn_store_header(cairn_store *s) { return s->h; }

/* ---- the lock and the repair ---------------------------------------------------------- */

static uint32_t total_chunks(const cairn_store *s)
{
    return s->h->mem_chunks + s->h->spill_chunks;
}

/* Rebuild what a process that died inside a critical section may have left half-changed:
 * chains are walked and cut where they stop making sense, every chunk on no chain goes back
 * on its free stack, and busy slots of dead processes are cleared. */
static void repair(cairn_store *s)
{
    struct cairn_store_header *h = s->h;
    uint32_t total = total_chunks(s);
    uint8_t *used = calloc(total ? total : 1, 1);
    uint64_t files_used = 0;
    for (uint32_t i = 0; i < h->max_files; i++) {
        struct cairn_store_file *f = &s->files[i];
        for (int b = 0; b < CAIRN_STORE_BUSY_SLOTS; b++)
            if (f->busy[b] != 0 && !pid_alive(f->busy[b]))
                f->busy[b] = 0;
        if (f->state == CAIRN_FILE_FREE)
            continue;
        if (f->state != CAIRN_FILE_REG && f->state != CAIRN_FILE_DIR) {
            f->state = CAIRN_FILE_FREE;
            f->gen++;
            continue;
        }
        files_used++;
        f->path[CAIRN_STORE_PATH_MAX - 1] = 0;
        f->path_hash = hash_path(f->path);
        uint32_t n = 0, prev = CAIRN_CHUNK_NONE, id = f->first_chunk;
        while (id != CAIRN_CHUNK_NONE && n < f->nchunks && id < total && (used == NULL || !used[id])) {
            if (used)
                used[id] = 1;
            prev = id;
            id = s->link[id];
            n++;
        }
        if (prev != CAIRN_CHUNK_NONE)
            s->link[prev] = CAIRN_CHUNK_NONE;
        else
            f->first_chunk = CAIRN_CHUNK_NONE;
        f->last_chunk = prev;
        f->nchunks = n;
        if (f->size > (uint64_t)n * h->chunk_size)
            f->size = (uint64_t)n * h->chunk_size;
    }
    h->files_used = files_used;
    if (used != NULL) {
        for (uint32_t nd = 0; nd < h->numa_nodes; nd++) {
            uint32_t top = 0, f0 = h->numa_first[nd];
            for (uint32_t k = 0; k < h->numa_count[nd]; k++) {
                uint32_t id = f0 + h->numa_count[nd] - 1 - k;
                if (!used[id])
                    s->free_ids[f0 + top++] = id;
            }
            h->numa_top[nd] = top;
        }
        uint32_t top = 0;
        for (uint32_t k = 0; k < h->spill_chunks; k++) {
            uint32_t id = total - 1 - k;
            if (!used[id])
                s->free_ids[h->mem_chunks + top++] = id;
        }
        h->spill_top = top;
        free(used);
    }
    h->chunk_frees++;
    h->generation++;
    h->repairs++;
}

static int lock(cairn_store *s)
{
    int r = pthread_mutex_lock(&s->h->lock);
    if (r == EOWNERDEAD) {
        repair(s);
        pthread_mutex_consistent(&s->h->lock);
        return 0;
    }
    return -r;
}

static void unlock(cairn_store *s) { pthread_mutex_unlock(&s->h->lock); }

static void pause_briefly(void)
{
    struct timespec ts = {0, 50 * 1000};
    nanosleep(&ts, NULL);
}

/* ---- chunks and chains ---------------------------------------------------------------- */

static uint32_t current_numa(const cairn_store *s)
{
    if (s->h->numa_nodes < 2)
        return 0;
    unsigned cpu = 0, node = 0;
    if (syscall(SYS_getcpu, &cpu, &node, NULL) != 0)
        return 0;
    return node < s->h->numa_nodes ? node : 0;
}

/* Pop a free chunk: the caller's NUMA node first, then the other nodes, then the spill
 * file. CAIRN_CHUNK_NONE when all are full. */
static uint32_t alloc_chunk(cairn_store *s)
{
    struct cairn_store_header *h = s->h;
    uint32_t home = current_numa(s);
    for (uint32_t k = 0; k < h->numa_nodes; k++) {
        uint32_t n = (home + k) % h->numa_nodes;
        if (h->numa_top[n] > 0) {
            h->numa_top[n]--;
            return s->free_ids[h->numa_first[n] + h->numa_top[n]];
        }
    }
    if (h->spill_top > 0 && s->spill_fd >= 0) {
        h->spill_top--;
        return s->free_ids[h->mem_chunks + h->spill_top];
    }
    return CAIRN_CHUNK_NONE;
}

static void free_chunk(cairn_store *s, uint32_t id)
{
    struct cairn_store_header *h = s->h;
    s->link[id] = CAIRN_CHUNK_NONE;
    if (id >= h->mem_chunks) {
        s->free_ids[h->mem_chunks + h->spill_top++] = id;
        return;
    }
    for (uint32_t n = 0; n < h->numa_nodes; n++) {
        if (id >= h->numa_first[n] && id < h->numa_first[n] + h->numa_count[n]) {
            s->free_ids[h->numa_first[n] + h->numa_top[n]++] = id;
            return;
        }
    }
}

/* Free the chunks of f from chain position keep onwards. */
static void cut_chain(cairn_store *s, struct cairn_store_file *f, uint32_t keep)
{
    if (keep >= f->nchunks)
        return;
    uint32_t prev = CAIRN_CHUNK_NONE, id = f->first_chunk;
    for (uint32_t k = 0; k < keep; k++) {
        prev = id;
        id = s->link[id];
    }
    while (id != CAIRN_CHUNK_NONE) {
        uint32_t next = s->link[id];
        free_chunk(s, id);
        id = next;
    }
    if (prev == CAIRN_CHUNK_NONE) {
        f->first_chunk = CAIRN_CHUNK_NONE;
    } else {
        s->link[prev] = CAIRN_CHUNK_NONE;
    }
    f->last_chunk = prev;
    f->nchunks = keep;
    s->h->chunk_frees++;
}

/* Append chunks until f has want of them; returns how many it has then. */
static uint32_t grow_chain(cairn_store *s, struct cairn_store_file *f, uint64_t want)
{
    while (f->nchunks < want) {
        uint32_t id = alloc_chunk(s);
        if (id == CAIRN_CHUNK_NONE)
            break;
        s->link[id] = CAIRN_CHUNK_NONE;
        if (f->last_chunk == CAIRN_CHUNK_NONE)
            f->first_chunk = id;
        else
            s->link[f->last_chunk] = id;
        f->last_chunk = id;
        f->nchunks++;
    }
    return f->nchunks;
}

/* The id of chunk k of file index i (k < nchunks), using and updating the cursor. */
static uint32_t chain_at(cairn_store *s, uint32_t i, uint32_t k)
{
    struct cairn_store_file *f = &s->files[i];
    uint32_t at = 0, id = f->first_chunk;
    if (s->cur_index == i && s->cur_gen == f->gen && s->cur_frees == s->h->chunk_frees &&
        s->cur_k <= k) {
        at = s->cur_k;
        id = s->cur_id;
    }
    if (k == f->nchunks - 1) {
        at = k;
        id = f->last_chunk;
    }
    while (at < k) {
        id = s->link[id];
        at++;
    }
    s->cur_index = i;
    s->cur_gen = f->gen;
    s->cur_frees = s->h->chunk_frees;
    s->cur_k = k;
    s->cur_id = id;
    return id;
}

/* ---- file records ------------------------------------------------------------------- */

static struct cairn_store_file *find(cairn_store *s, const char *path, uint32_t *index)
{
    uint64_t hv = hash_path(path);
    for (uint32_t i = 0; i < s->h->max_files; i++) {
        struct cairn_store_file *f = &s->files[i];
        if (f->state != CAIRN_FILE_FREE && f->path_hash == hv && strcmp(f->path, path) == 0) {
            if (index)
                *index = i;
            return f;
        }
    }
    return NULL;
}

/* Whether p is dir or lies under it ("" is the root, above everything). */
static int under(const char *p, const char *dir, size_t dlen)
{
    if (dlen == 0)
        return 1;
    return strncmp(p, dir, dlen) == 0 && (p[dlen] == '/' || p[dlen] == 0);
}

/* Whether some record lies strictly under dir (which makes dir an implied directory). */
static int has_children(cairn_store *s, const char *dir)
{
    size_t n = strlen(dir);
    for (uint32_t i = 0; i < s->h->max_files; i++) {
        struct cairn_store_file *f = &s->files[i];
        if (f->state != CAIRN_FILE_FREE && under(f->path, dir, n) && f->path[n] != 0 &&
            (n == 0 || f->path[n] == '/'))
            return 1;
    }
    return 0;
}

/* 0 when every ancestor of path is a directory or absent, -ENOTDIR when one is a file. */
static int parents_ok(cairn_store *s, const char *path)
{
    for (uint32_t i = 0; i < s->h->max_files; i++) {
        struct cairn_store_file *f = &s->files[i];
        if (f->state != CAIRN_FILE_REG)
            continue;
        size_t n = strlen(f->path);
        if (strncmp(path, f->path, n) == 0 && path[n] == '/')
            return -ENOTDIR;
    }
    return 0;
}

static struct cairn_store_file *new_record(cairn_store *s, const char *path, uint32_t state,
                                           uint32_t mode, uint32_t *index)
{
    for (uint32_t i = 0; i < s->h->max_files; i++) {
        struct cairn_store_file *f = &s->files[i];
        if (f->state != CAIRN_FILE_FREE)
            continue;
        f->mode = mode & 07777;
        f->size = 0;
        f->first_chunk = f->last_chunk = CAIRN_CHUNK_NONE;
        f->nchunks = 0;
        f->gen++;
        f->mtime_ns = f->ctime_ns = now_ns();
        f->writes_started = f->writes_done = 0;
        memset(f->busy, 0, sizeof f->busy);
        strcpy(f->path, path);
        f->path_hash = hash_path(path);
        __atomic_store_n(&f->state, state, __ATOMIC_RELEASE);
        s->h->files_used++;
        s->h->generation++;
        *index = i;
        return f;
    }
    return NULL;
}

static void release_record(cairn_store *s, struct cairn_store_file *f)
{
    cut_chain(s, f, 0);
    f->size = 0;
    f->state = CAIRN_FILE_FREE;
    f->gen++;
    f->path[0] = 0;
    f->path_hash = 0;
    s->h->files_used--;
    s->h->generation++;
}

/* The record a handle names, or NULL when it was removed or reused. */
static struct cairn_store_file *by_handle(cairn_store *s, struct cairn_store_fh fh)
{
    if (fh.index >= s->h->max_files)
        return NULL;
    struct cairn_store_file *f = &s->files[fh.index];
    if (f->state != CAIRN_FILE_REG || f->gen != fh.gen)
        return NULL;
    return f;
}

/* Take a busy slot of f for this process: -EAGAIN when all are held by live processes. */
static int take_busy(struct cairn_store_file *f)
{
    int32_t me = getpid();
    for (int pass = 0; pass < 2; pass++) {
        for (int b = 0; b < CAIRN_STORE_BUSY_SLOTS; b++) {
            if (f->busy[b] == 0 || (pass == 1 && !pid_alive(f->busy[b]))) {
                f->busy[b] = me;
                return b;
            }
        }
    }
    return -EAGAIN;
}

/* Whether a live process (this one included: another thread) is copying into or out of f. */
static int is_busy(struct cairn_store_file *f)
{
    for (int b = 0; b < CAIRN_STORE_BUSY_SLOTS; b++) {
        if (f->busy[b] != 0) {
            if (pid_alive(f->busy[b]))
                return 1;
            f->busy[b] = 0;
        }
    }
    return 0;
}

/* Lock the store, waiting until the file at path (if any) has no copy running, so its
 * chunks may be freed. Returns with the lock held (0) or an error without it. */
static int lock_idle(cairn_store *s, const char *path)
{
    for (;;) {
        int r = lock(s);
        if (r < 0)
            return r;
        struct cairn_store_file *f = path ? find(s, path, NULL) : NULL;
        if (f == NULL || !is_busy(f))
            return 0;
        unlock(s);
        pause_briefly();
    }
}

int cairn_store_open_file(cairn_store *s, const char *path, int flags, uint32_t mode,
                          struct cairn_store_fh *fh)
{
    if (path[0] == 0)
        return -EISDIR;
    if (strlen(path) >= CAIRN_STORE_PATH_MAX)
        return -ENAMETOOLONG;
    int r = (flags & CAIRN_O_TRUNC) ? lock_idle(s, path) : lock(s);
    if (r < 0)
        return r;
    uint32_t i;
    struct cairn_store_file *f = find(s, path, &i);
    if (f != NULL) {
        if (f->state == CAIRN_FILE_DIR) {
            r = -EISDIR;
        } else if ((flags & CAIRN_O_CREAT) && (flags & CAIRN_O_EXCL)) {
            r = -EEXIST;
        } else if (flags & CAIRN_O_TRUNC) {
            cut_chain(s, f, 0);
            f->size = 0;
            f->writes_started++;
            f->writes_done++;
            f->mtime_ns = f->ctime_ns = now_ns();
            s->h->generation++;
        }
    } else if (has_children(s, path)) {
        r = -EISDIR;
    } else if (!(flags & CAIRN_O_CREAT)) {
        r = -ENOENT;
    } else if ((r = parents_ok(s, path)) == 0) {
        f = new_record(s, path, CAIRN_FILE_REG, mode, &i);
        if (f == NULL)
            r = -ENFILE;
    }
    if (r == 0) {
        fh->index = i;
        fh->gen = f->gen;
    }
    unlock(s);
    return r;
}

/* Copies of at least this many bytes into the pool bypass the caches (non-temporal stores):
 * checkpoint data is written once and read much later, if at all, so caching it only
 * evicts the application's working set, and on this kind of machine two writers streaming
 * reach memory bandwidth where cached copies stall at the write-allocate reads. glibc's
 * memcpy switches to such stores only for copies of hundreds of MiB, never for one chunk. */
#define STREAM_MIN (64u << 10)

#if defined(__SSE2__)
#include <emmintrin.h>
/* memcpy with non-temporal stores: an ordinary copy up to a 16-byte aligned destination,
 * then 64 bytes per step, then the tail. The caller issues the fence. */
static void stream_copy(uint8_t *dst, const uint8_t *src, size_t n)
{
    size_t head = (16 - ((uintptr_t)dst & 15)) & 15;
    if (head > n)
        head = n;
    memcpy(dst, src, head);
    dst += head;
    src += head;
    n -= head;
    for (; n >= 64; n -= 64, dst += 64, src += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)src);
        __m128i b = _mm_loadu_si128((const __m128i *)(src + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(src + 32));
        __m128i d = _mm_loadu_si128((const __m128i *)(src + 48));
        _mm_stream_si128((__m128i *)dst, a);
        _mm_stream_si128((__m128i *)(dst + 16), b);
        _mm_stream_si128((__m128i *)(dst + 32), c);
        _mm_stream_si128((__m128i *)(dst + 48), d);
    }
    memcpy(dst, src, n);
}
static void stream_fence(void) { _mm_sfence(); }
#else
static void stream_copy(uint8_t *dst, const uint8_t *src, size_t n) { memcpy(dst, src, n); }
static void stream_fence(void) {}
#endif

/* Fill this process's page tables for pool chunk id before its first copy here: the pages
 * exist (allocated when the store was created), but every process maps them afresh, and one
 * minor fault per 4 KiB page costs about as much as copying the page. One madvise per chunk
 * does it in bulk, and only for the chunks the process touches, so attaching stays cheap for
 * short-lived tools (a cat or an ls under the interposer). Best effort: without
 * MADV_POPULATE_* (Linux < 5.14) the pages fault in one by one as before. */
static void populate_chunk(cairn_store *s, uint32_t id, uint8_t *at, int write)
{
    if (s->mapped == NULL)
        return;
    uint8_t bit = (uint8_t)(1u << (id & 7));
    if (__atomic_load_n(&s->mapped[id >> 3], __ATOMIC_RELAXED) & bit)
        return;
    madvise(at, s->h->chunk_size, write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
    /* Shared memory is mapped writable on a read fault too: one population serves both. */
    __atomic_fetch_or(&s->mapped[id >> 3], bit, __ATOMIC_RELAXED);
}

/* Copy between buf and the file's bytes [off, off+len), which its chain covers, holding a
 * busy slot: ids are read under the lock in batches, bytes copied without it. buf NULL
 * with write means zeros. */
static int copy_chunks(cairn_store *s, uint32_t index, void *buf, uint64_t len, uint64_t off,
                       int write, int *streamed)
{
    uint64_t cs = s->h->chunk_size;
    uint8_t *p = buf;
    while (len > 0) {
        enum { BATCH = 64 };
        uint32_t ids[BATCH];
        uint32_t k0 = (uint32_t)(off / cs), nb = 0;
        uint64_t span = (off % cs) + len;
        uint32_t want = (uint32_t)((span + cs - 1) / cs);
        if (want > BATCH)
            want = BATCH;
        int r = lock(s);
        if (r < 0)
            return r;
        for (; nb < want; nb++)
            ids[nb] = chain_at(s, index, k0 + nb);
        unlock(s);
        for (uint32_t b = 0; b < nb && len > 0; b++) {
            uint64_t within = off % cs;
            uint64_t n = cs - within < len ? cs - within : len;
            uint32_t id = ids[b];
            if (id < s->h->mem_chunks) {
                populate_chunk(s, id, s->data + (uint64_t)id * cs, write);
                uint8_t *at = s->data + (uint64_t)id * cs + within;
                if (!write)
                    memcpy(p, at, n);
                else if (p && n >= STREAM_MIN)
                    stream_copy(at, p, n), *streamed = 1;
                else if (p)
                    memcpy(at, p, n);
                else
                    memset(at, 0, n);
            } else {
                if (s->spill_fd < 0)
                    return -EIO;
                uint64_t at = CAIRN_SPILL_HEADER + (uint64_t)(id - s->h->mem_chunks) * cs + within;
                if (write && p == NULL) {
                    static const uint8_t zeros[65536];
                    uint64_t left = n, o = at;
                    while (left > 0) {
                        size_t m = left < sizeof zeros ? (size_t)left : sizeof zeros;
                        r = spill_io(s->spill_fd, (void *)zeros, m, o, 1);
                        if (r < 0)
                            return r;
                        left -= m;
                        o += m;
                    }
                } else {
                    r = spill_io(s->spill_fd, p, (size_t)n, at, write);
                    if (r < 0)
                        return r;
                }
            }
            if (p)
                p += n;
            off += n;
            len -= n;
        }
    }
    return 0;
}

static int copy_range(cairn_store *s, uint32_t index, void *buf, uint64_t len, uint64_t off,
                      int write)
{
    int streamed = 0;
    int r = copy_chunks(s, index, buf, len, off, write, &streamed);
    /* Non-temporal stores are weakly ordered: make them visible before the caller publishes
     * the new size under the lock. */
    if (streamed)
        stream_fence();
    return r;
}

/* Lock the store and find the file a handle names. Returns it with the lock held, or NULL
 * without the lock and the error in *err (-ESTALE when it was removed or reused). */
static struct cairn_store_file *lock_handle(cairn_store *s, struct cairn_store_fh fh, int *err)
{
    *err = lock(s);
    if (*err < 0)
        return NULL;
    struct cairn_store_file *f = by_handle(s, fh);
    if (f == NULL) {
        unlock(s);
        *err = -ESTALE;
    }
    return f;
}

/* Lock, check the handle and take a busy slot of its file (waiting while all are taken).
 * Returns the slot with the lock held, or an error without it. */
static int begin_copy(cairn_store *s, struct cairn_store_fh fh, struct cairn_store_file **out)
{
    for (;;) {
        int r;
        struct cairn_store_file *f = lock_handle(s, fh, &r);
        if (f == NULL)
            return r;
        int b = take_busy(f);
        if (b >= 0) {
            *out = f;
            return b;
        }
        unlock(s);
        pause_briefly();
    }
}

static void end_copy(cairn_store *s, struct cairn_store_file *f, int slot)
{
    if (lock(s) == 0) {
        f->busy[slot] = 0;
        unlock(s);
    }
}

/* Write len bytes (buf NULL: zeros) at off; see cairn_store_pwrite. */
static ssize_t write_at(cairn_store *s, struct cairn_store_fh fh, const void *buf, size_t len,
                        uint64_t off)
{
    if (len == 0)
        return 0;
    if (off + len < off)
        return -EFBIG;
    struct cairn_store_file *f;
    int slot = begin_copy(s, fh, &f);
    if (slot < 0)
        return slot;
    uint64_t cs = s->h->chunk_size;
    uint64_t end = off + len;
    uint64_t have = (uint64_t)grow_chain(s, f, (end + cs - 1) / cs) * cs;
    uint64_t old = f->size;
    f->writes_started++;
    unlock(s);
    int r = 0;
    if (have <= off) {
        r = -ENOSPC;
    } else {
        if (end > have)
            end = have;
        /* Bytes between the old end and off read as zeros, like a hole. */
        if (off > old)
            r = copy_range(s, fh.index, NULL, off - old, old, 1);
        if (r == 0)
            r = copy_range(s, fh.index, (void *)buf, end - off, off, 1);
    }
    if (lock(s) == 0) {
        if (r == 0 && end > f->size)
            f->size = end;
        if (r == 0)
            f->mtime_ns = now_ns();
        f->writes_done++;
        f->busy[slot] = 0;
        s->h->generation++;
        unlock(s);
    }
    return r < 0 ? r : (ssize_t)(end - off);
}

ssize_t cairn_store_pwrite(cairn_store *s, struct cairn_store_fh fh, const void *buf,
                           size_t len, uint64_t off)
{
    if (buf == NULL && len > 0)
        return -EFAULT;
    return write_at(s, fh, buf, len, off);
}

ssize_t cairn_store_pread(cairn_store *s, struct cairn_store_fh fh, void *buf, size_t len,
                          uint64_t off)
{
    struct cairn_store_file *f;
    int slot = begin_copy(s, fh, &f);
    if (slot < 0)
        return slot;
    uint64_t size = f->size;
    unlock(s);
    uint64_t n = off >= size ? 0 : (size - off < len ? size - off : len);
    int r = n ? copy_range(s, fh.index, buf, n, off, 0) : 0;
    end_copy(s, f, slot);
    return r < 0 ? r : (ssize_t)n;
}

int cairn_store_ftruncate(cairn_store *s, struct cairn_store_fh fh, uint64_t size)
{
    for (;;) {
        int r;
        struct cairn_store_file *f = lock_handle(s, fh, &r);
        if (f == NULL)
            return r;
        if (size > f->size) {
            unlock(s);
            ssize_t w = write_at(s, fh, NULL, size - f->size, f->size);
            if (w < 0)
                return (int)w;
            if ((uint64_t)w < size - f->size)
                continue; /* partly; the next round reports ENOSPC or finishes */
            return 0;
        }
        if (is_busy(f)) {
            unlock(s);
            pause_briefly();
            continue;
        }
        uint64_t cs = s->h->chunk_size;
        cut_chain(s, f, (uint32_t)((size + cs - 1) / cs));
        f->size = size;
        f->writes_started++;
        f->writes_done++;
        f->mtime_ns = f->ctime_ns = now_ns();
        s->h->generation++;
        unlock(s);
        return 0;
    }
}

static void fill_stat(cairn_store *s, struct cairn_store_file *f, uint32_t index,
                      struct cairn_store_stat *st)
{
    /* A writer that died in the middle of a write never ends it. Every write holds a busy
     * slot while it runs, so with no live slot holder none is in flight: settle the count
     * (the bytes below the size are all the file will get). */
    if (f->writes_done != f->writes_started && !is_busy(f))
        f->writes_done = f->writes_started;
    st->type = f->state;
    st->mode = f->mode;
    st->size = f->state == CAIRN_FILE_REG ? f->size : 0;
    st->nchunks = f->nchunks;
    st->mtime_ns = f->mtime_ns;
    st->ctime_ns = f->ctime_ns;
    st->ino = (uint64_t)index + 2; /* 1 is the root */
    st->writes_started = f->writes_started;
    st->writes_done = f->writes_done;
    (void)s;
}

int cairn_store_fstat(cairn_store *s, struct cairn_store_fh fh, struct cairn_store_stat *st)
{
    int r;
    struct cairn_store_file *f = lock_handle(s, fh, &r);
    if (f == NULL)
        return r;
    fill_stat(s, f, fh.index, st);
    unlock(s);
    return 0;
}

int cairn_store_sync(cairn_store *s)
{
    if (s->spill_fd >= 0 && syscall(SYS_fdatasync, s->spill_fd) != 0)
        return -errno;
    return 0;
}

/* ---- names ------------------------------------------------------------------------- */

int cairn_store_stat(cairn_store *s, const char *path, struct cairn_store_stat *st)
{
    int r = lock(s);
    if (r < 0)
        return r;
    uint32_t i;
    struct cairn_store_file *f = find(s, path, &i);
    if (f != NULL) {
        fill_stat(s, f, i, st);
    } else if (path[0] == 0 || has_children(s, path)) {
        memset(st, 0, sizeof *st);
        st->type = CAIRN_FILE_DIR;
        st->mode = 0700;
        st->ino = path[0] == 0 ? 1 : (hash_path(path) | (1ull << 63));
        st->mtime_ns = st->ctime_ns = now_ns();
    } else {
        r = parents_ok(s, path) < 0 ? -ENOTDIR : -ENOENT;
    }
    unlock(s);
    return r;
}

int cairn_store_unlink(cairn_store *s, const char *path)
{
    int r = lock_idle(s, path);
    if (r < 0)
        return r;
    struct cairn_store_file *f = find(s, path, NULL);
    if (f == NULL)
        r = (path[0] == 0 || has_children(s, path)) ? -EISDIR : -ENOENT;
    else if (f->state == CAIRN_FILE_DIR)
        r = -EISDIR;
    else
        release_record(s, f);
    unlock(s);
    return r;
}

int cairn_store_mkdir(cairn_store *s, const char *path, uint32_t mode)
{
    if (path[0] == 0)
        return -EEXIST;
    if (strlen(path) >= CAIRN_STORE_PATH_MAX)
        return -ENAMETOOLONG;
    int r = lock(s);
    if (r < 0)
        return r;
    uint32_t i;
    if (find(s, path, NULL) || has_children(s, path))
        r = -EEXIST;
    else if ((r = parents_ok(s, path)) == 0 && new_record(s, path, CAIRN_FILE_DIR, mode, &i) == NULL)
        r = -ENFILE;
    unlock(s);
    return r;
}

int cairn_store_rmdir(cairn_store *s, const char *path)
{
    if (path[0] == 0)
        return -EBUSY;
    int r = lock(s);
    if (r < 0)
        return r;
    struct cairn_store_file *f = find(s, path, NULL);
    if (has_children(s, path))
        r = -ENOTEMPTY;
    else if (f == NULL)
        r = -ENOENT;
    else if (f->state != CAIRN_FILE_DIR)
        r = -ENOTDIR;
    else
        release_record(s, f);
    unlock(s);
    return r;
}

int cairn_store_rename(cairn_store *s, const char *from, const char *to)
{
    size_t fl = strlen(from), tl = strlen(to);
    if (fl == 0 || tl == 0)
        return -EBUSY;
    if (tl >= CAIRN_STORE_PATH_MAX)
        return -ENAMETOOLONG;
    if (strcmp(from, to) == 0)
        return 0;
    for (;;) {
        int r = lock_idle(s, to);
        if (r < 0)
            return r;
        struct cairn_store_file *src = find(s, from, NULL);
        struct cairn_store_file *dst = find(s, to, NULL);
        int src_dir = src ? src->state == CAIRN_FILE_DIR : has_children(s, from);
        int dst_dir = dst ? dst->state == CAIRN_FILE_DIR : has_children(s, to);
        if (src == NULL && !src_dir) {
            r = -ENOENT;
        } else if (!src_dir) {
            if (dst_dir)
                r = -EISDIR;
            else if ((r = parents_ok(s, to)) == 0) {
                if (dst)
                    release_record(s, dst);
                strcpy(src->path, to);
                src->path_hash = hash_path(to);
                src->ctime_ns = now_ns();
                s->h->generation++;
            }
        } else if (under(to, from, fl)) {
            r = -EINVAL; /* into itself */
        } else if (dst != NULL && !dst_dir) {
            r = -ENOTDIR;
        } else if (has_children(s, to)) {
            r = -ENOTEMPTY;
        } else if ((r = parents_ok(s, to)) == 0) {
            /* Check every new path fits before changing any. */
            for (uint32_t i = 0; i < s->h->max_files && r == 0; i++) {
                struct cairn_store_file *f = &s->files[i];
                if (f->state != CAIRN_FILE_FREE && under(f->path, from, fl) &&
                    strlen(f->path) - fl + tl >= CAIRN_STORE_PATH_MAX)
                    r = -ENAMETOOLONG;
            }
            if (r == 0 && dst != NULL)
                release_record(s, dst);
            for (uint32_t i = 0; i < s->h->max_files && r == 0; i++) {
                struct cairn_store_file *f = &s->files[i];
                if (f->state == CAIRN_FILE_FREE || !under(f->path, from, fl))
                    continue;
                char tmp[CAIRN_STORE_PATH_MAX];
                snprintf(tmp, sizeof tmp, "%s%s", to, f->path + fl);
                strcpy(f->path, tmp);
                f->path_hash = hash_path(tmp);
            }
            s->h->generation++;
        }
        unlock(s);
        return r;
    }
}

/* The child of dir that path lies under (its first component after dir), or NULL. */
static const char *child_of(const char *path, const char *dir, size_t dlen, size_t *clen)
{
    if (!under(path, dir, dlen))
        return NULL;
    const char *c = path + dlen + (dlen > 0);
    if (dlen > 0 && path[dlen] == 0)
        return NULL; /* dir itself */
    if (*c == 0)
        return NULL;
    const char *e = strchr(c, '/');
    *clen = e ? (size_t)(e - c) : strlen(c);
    return c;
}

int cairn_store_readdir(cairn_store *s, const char *dir, uint64_t *cookie, char *name,
                        size_t len, uint32_t *type)
{
    int r = lock(s);
    if (r < 0)
        return r;
    size_t dl = strlen(dir);
    r = 0;
    for (uint64_t i = *cookie; i < s->h->max_files; i++) {
        struct cairn_store_file *f = &s->files[i];
        size_t cl;
        const char *c = f->state == CAIRN_FILE_FREE ? NULL : child_of(f->path, dir, dl, &cl);
        if (c == NULL)
            continue;
        /* Report each child once: skip it when an earlier record already gave it. */
        int seen = 0;
        for (uint64_t j = 0; j < i && !seen; j++) {
            struct cairn_store_file *g = &s->files[j];
            size_t gl;
            const char *gc = g->state == CAIRN_FILE_FREE ? NULL : child_of(g->path, dir, dl, &gl);
            seen = gc && gl == cl && memcmp(gc, c, cl) == 0;
        }
        if (seen)
            continue;
        if (cl + 1 > len) {
            r = -ENAMETOOLONG;
            break;
        }
        memcpy(name, c, cl);
        name[cl] = 0;
        *type = c[cl] == '/' ? CAIRN_FILE_DIR : f->state;
        *cookie = i + 1;
        r = 1;
        break;
    }
    if (r == 0)
        *cookie = s->h->max_files;
    unlock(s);
    return r;
}

/* ---- zero-copy drain, usage, layout --------------------------------------------------- */

ssize_t cairn_store_chunks(cairn_store *s, struct cairn_store_fh fh,
                           struct cairn_chunk_meta *out, size_t max)
{
    int r;
    struct cairn_store_file *f = lock_handle(s, fh, &r);
    if (f == NULL)
        return r;
    uint64_t cs = s->h->chunk_size;
    uint64_t n = (f->size + cs - 1) / cs;
    uint32_t id = f->first_chunk;
    for (uint64_t k = 0; k < n && k < max; k++) {
        struct cairn_chunk_meta *m = &out[k];
        m->file_offset = k * cs;
        m->length = f->size - k * cs < cs ? f->size - k * cs : cs;
        m->id = id;
        m->in_spill = id >= s->h->mem_chunks;
        m->offset = m->in_spill ? CAIRN_SPILL_HEADER + (uint64_t)(id - s->h->mem_chunks) * cs
                                : s->h->data_offset + (uint64_t)id * cs;
        id = s->link[id];
    }
    unlock(s);
    return (ssize_t)n;
}

ssize_t cairn_store_read_spill(cairn_store *s, uint64_t offset, void *buf, size_t len)
{
    if (s->spill_fd < 0)
        return -EIO;
    int r = spill_io(s->spill_fd, buf, len, offset, 0);
    return r < 0 ? r : (ssize_t)len;
}

int cairn_store_usage(cairn_store *s, struct cairn_store_usage *u)
{
    int r = lock(s);
    if (r < 0)
        return r;
    struct cairn_store_header *h = s->h;
    memset(u, 0, sizeof *u);
    u->chunk_size = h->chunk_size;
    u->mem_chunks = h->mem_chunks;
    for (uint32_t n = 0; n < h->numa_nodes; n++)
        u->mem_free += h->numa_top[n];
    u->spill_chunks = h->spill_chunks;
    u->spill_free = s->spill_fd >= 0 ? h->spill_top : 0;
    u->max_files = h->max_files;
    u->files_used = h->files_used;
    u->numa_nodes = h->numa_nodes;
    u->repairs = h->repairs;
    u->per_process = (h->flags & CAIRN_STORE_F_PER_PROCESS) != 0;
    u->version = h->version;
    unlock(s);
    return 0;
}

#define SZ(t) (uint64_t) sizeof(struct t)
#define OFF(t, f) (uint64_t) offsetof(struct t, f)

size_t cairn_store_layout(uint64_t *out, size_t max)
{
    /* The order is part of the test in crates/cairn-shm: append, never reorder. */
    const uint64_t v[] = {
        SZ(cairn_store_header),
        OFF(cairn_store_header, magic), OFF(cairn_store_header, version),
        OFF(cairn_store_header, header_size), OFF(cairn_store_header, segment_size),
        OFF(cairn_store_header, chunk_size), OFF(cairn_store_header, mem_chunks),
        OFF(cairn_store_header, spill_chunks), OFF(cairn_store_header, max_files),
        OFF(cairn_store_header, numa_nodes), OFF(cairn_store_header, files_offset),
        OFF(cairn_store_header, link_offset), OFF(cairn_store_header, free_offset),
        OFF(cairn_store_header, data_offset), OFF(cairn_store_header, spill_id),
        OFF(cairn_store_header, creator_pid), OFF(cairn_store_header, flags),
        OFF(cairn_store_header, files_used), OFF(cairn_store_header, numa_first),
        OFF(cairn_store_header, numa_count), OFF(cairn_store_header, numa_top),
        OFF(cairn_store_header, spill_top), OFF(cairn_store_header, repairs),
        OFF(cairn_store_header, generation), OFF(cairn_store_header, chunk_frees),
        OFF(cairn_store_header, lock), OFF(cairn_store_header, reserved),
        SZ(cairn_store_file),
        OFF(cairn_store_file, state), OFF(cairn_store_file, mode), OFF(cairn_store_file, size),
        OFF(cairn_store_file, first_chunk), OFF(cairn_store_file, last_chunk),
        OFF(cairn_store_file, nchunks), OFF(cairn_store_file, gen),
        OFF(cairn_store_file, mtime_ns), OFF(cairn_store_file, ctime_ns),
        OFF(cairn_store_file, path_hash), OFF(cairn_store_file, busy),
        OFF(cairn_store_file, path),
        SZ(cairn_chunk_meta),
        OFF(cairn_chunk_meta, file_offset), OFF(cairn_chunk_meta, length),
        OFF(cairn_chunk_meta, id), OFF(cairn_chunk_meta, in_spill), OFF(cairn_chunk_meta, offset),
        SZ(cairn_store_stat), SZ(cairn_store_fh), SZ(cairn_store_usage),
        SZ(cairn_store_config),
        CAIRN_STORE_MAGIC, CAIRN_STORE_VERSION, CAIRN_STORE_PATH_MAX, CAIRN_STORE_MAX_NUMA,
        CAIRN_STORE_BUSY_SLOTS, CAIRN_SPILL_HEADER,
        OFF(cairn_store_file, writes_started), OFF(cairn_store_file, writes_done),
        OFF(cairn_store_stat, writes_started), OFF(cairn_store_stat, writes_done),
    };
    size_t n = sizeof v / sizeof v[0];
    for (size_t i = 0; i < n && i < max; i++)
        out[i] = v[i];
    return n;
}
