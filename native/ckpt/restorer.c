/*
** restorer.c: cairn-restore, which turns itself into a checkpointed process again.
**
**     cairn-restore IMAGE [--coord HOST:PORT] [--token HEX] [--proc N]
**                         [--cpus LIST] [--affinity on|off]
**
** The token may come from CAIRN_COORD_TOKEN in the environment instead (ps shows arguments).
**
** It is freestanding: no libc, raw system calls only, linked (static, not PIE) at
** CAIRN_IMG_HOLE_START, the area every checkpointed process keeps free, so nothing it
** restores can land on it. A test checks the binary has no undefined symbols.
**
** The file is divided into: system calls and small helpers; checks of the image (kernel
** build, CPU features, every offset and length against the file); taking the address space
** apart (everything of the restorer's own but its code, data and the vdso/vvar); moving
** vdso/vvar/vvar_vclock to their saved addresses; mapping every region at its address
** (MAP_FIXED_NOREPLACE, so a collision is an error, never an overwrite) and filling the
** saved pages; and starting the threads at their saved contexts.
**
** Paths in the image are opened read-only, only to map files by reference, and only after
** their inode, size and modification time match what the image recorded.
**
** Exit codes (only before the first region is mapped; after that a failure can only be
** reported and the process killed): 2 usage, 3 the image does not fit this machine (kernel,
** CPU, files), 4 a damaged image, 5 an I/O error.
*/
#include "image.h"

#include <stddef.h>
#include <stdint.h>

typedef long i64;
typedef unsigned long u64;

/* ---- system calls ---------------------------------------------------------------- */

#define SYS_read 0
#define SYS_write 1
#define SYS_open 2
#define SYS_close 3
#define SYS_fstat 5
#define SYS_mmap 9
#define SYS_mprotect 10
#define SYS_munmap 11
#define SYS_rt_sigprocmask 14
#define SYS_pread64 17
#define SYS_mremap 25
#define SYS_ftruncate 77
#define SYS_madvise 28
#define SYS_getpid 39
#define SYS_clone 56
#define SYS_exit 60
#define SYS_kill 62
#define SYS_uname 63
#define SYS_arch_prctl 158
#define SYS_futex 202
#define SYS_sched_getaffinity 204
#define SYS_gettid 186
#define SYS_set_tid_address 218
#define SYS_exit_group 231
#define SYS_mbind 237
#define SYS_close_range 436

#define PROT_NONE 0
#define PROT_READ 1
#define PROT_WRITE 2
#define MAP_SHARED 0x01
#define MAP_PRIVATE 0x02
#define MAP_FIXED 0x10
#define MAP_ANONYMOUS 0x20
#define MAP_NORESERVE 0x4000
#define MAP_FIXED_NOREPLACE 0x100000
#define MREMAP_MAYMOVE 1
#define MREMAP_FIXED 2
#define O_RDONLY 0
#define O_RDWR 2
#define O_CLOEXEC 02000000
#define ARCH_SET_FS 0x1002
#define MPOL_PREFERRED 1
#define MADV_POPULATE_WRITE 23
#define FUTEX_WAIT 0

static i64 sys6(i64 n, i64 a, i64 b, i64 c, i64 d, i64 e, i64 f)
{
    i64 ret;
    register i64 r10 __asm__("r10") = d;
    register i64 r8 __asm__("r8") = e;
    register i64 r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}
#define sys1(n, a) sys6(n, (i64)(a), 0, 0, 0, 0, 0)
#define sys2(n, a, b) sys6(n, (i64)(a), (i64)(b), 0, 0, 0, 0)
#define sys3(n, a, b, c) sys6(n, (i64)(a), (i64)(b), (i64)(c), 0, 0, 0)
#define sys4(n, a, b, c, d) sys6(n, (i64)(a), (i64)(b), (i64)(c), (i64)(d), 0, 0)
#define sys5(n, a, b, c, d, e) sys6(n, (i64)(a), (i64)(b), (i64)(c), (i64)(d), (i64)(e), 0)

/* The compiler may emit calls to these. */
void *memcpy(void *d, const void *s, size_t n)
{
    uint8_t *a = d;
    const uint8_t *b = s;
    while (n--)
        *a++ = *b++;
    return d;
}
void *memset(void *d, int c, size_t n)
{
    uint8_t *a = d;
    while (n--)
        *a++ = (uint8_t)c;
    return d;
}

static size_t slen(const char *s)
{
    size_t n = 0;
    while (s[n])
        n++;
    return n;
}
static int seq(const char *a, const char *b)
{
    while (*a && *a == *b)
        a++, b++;
    return *a == *b;
}
static int sprefix(const char *s, const char *p)
{
    while (*p)
        if (*s++ != *p++)
            return 0;
    return 1;
}
static void scopy(char *d, const char *s, size_t cap)
{
    size_t i = 0;
    for (; s[i] && i + 1 < cap; i++)
        d[i] = s[i];
    d[i] = 0;
}

/* ---- messages and failing --------------------------------------------------------- */

static char msg[1024];
static size_t msg_len;

static void put(const char *s)
{
    while (*s && msg_len + 1 < sizeof msg)
        msg[msg_len++] = *s++;
}
static void put_num(u64 v, int base)
{
    char buf[24];
    int n = 0;
    do {
        buf[n++] = "0123456789abcdef"[v % (u64)base];
        v /= (u64)base;
    } while (v);
    if (base == 16)
        put("0x");
    while (n)
        msg[msg_len < sizeof msg - 1 ? msg_len++ : msg_len] = buf[--n];
}
static void flush_msg(void)
{
    put("\n");
    sys3(SYS_write, 2, msg, msg_len);
    msg_len = 0;
}

/* Before anything is mapped the restorer can exit with a code; after, only kill itself
 * (exit_group of a half-built process is the same thing, said plainly). */
static void fail(int code, const char *what)
{
    put(what);
    flush_msg();
    sys1(SYS_exit_group, code);
    for (;;) {
    }
}

/* ---- image reading ----------------------------------------------------------------- */

static int img = -1;
static struct cairn_img_header H;
#define MAX_REGIONS 8192
#define MAX_THREADS 1025
static struct cairn_img_region R[MAX_REGIONS];
static struct cairn_img_thread T[MAX_THREADS];
static u64 image_size;

static void pread_full(void *buf, u64 len, u64 off)
{
    uint8_t *p = buf;
    while (len) {
        i64 n = sys4(SYS_pread64, img, p, len, off);
        if (n <= 0) {
            put("cairn-restore: cannot read the image at byte ");
            put_num(off, 10);
            fail(5, "");
        }
        p += n;
        len -= (u64)n;
        off += (u64)n;
    }
}

struct kstat {
    u64 dev, ino, nlink;
    uint32_t mode, uid, gid, pad0;
    u64 rdev;
    i64 size, blksize, blocks;
    u64 atime, atime_ns, mtime, mtime_ns, ctime, ctime_ns;
    i64 unused[3];
};

struct utsname_k {
    char sysname[65], nodename[65], release[65], version[65], machine[65], domain[65];
};

static void cpuid(uint32_t leaf, uint32_t sub, uint32_t *a, uint32_t *b, uint32_t *c, uint32_t *d)
{
    __asm__ volatile("cpuid" : "=a"(*a), "=b"(*b), "=c"(*c), "=d"(*d) : "a"(leaf), "c"(sub));
}

static void check_machine(void)
{
    struct utsname_k u;
    sys1(SYS_uname, &u);
    if (!seq(u.release, H.kernel_release) || !seq(u.version, H.kernel_version)) {
        put("cairn-restore: the image was taken on kernel ");
        put(H.kernel_release);
        put(" (");
        put(H.kernel_version);
        put("); this is ");
        put(u.release);
        put(" (");
        put(u.version);
        fail(3, "): a restored process needs the same kernel build (its vdso is part of the "
                "process)");
    }
    uint32_t a, b, c, d, max;
    cpuid(0, 0, &max, &b, &c, &d);
    cpuid(1, 0, &a, &b, &c, &d);
    uint32_t have[5] = {c, d, 0, 0, 0};
    if (max >= 7) {
        cpuid(7, 0, &a, &b, &c, &d);
        have[2] = b, have[3] = c, have[4] = d;
    }
    uint32_t want[5] = {H.cpuid1_ecx, H.cpuid1_edx, H.cpuid7_ebx, H.cpuid7_ecx, H.cpuid7_edx};
    static const char *const leaf[5] = {"CPUID.1:ECX", "CPUID.1:EDX", "CPUID.7:EBX", "CPUID.7:ECX",
                                        "CPUID.7:EDX"};
    /* Bits that change from run to run (APIC ids live elsewhere; OSXSAVE is the OS's). */
    for (int i = 0; i < 5; i++) {
        uint32_t missing = want[i] & ~have[i];
        if (missing) {
            put("cairn-restore: this CPU lacks features the image uses: ");
            put(leaf[i]);
            put(" bits ");
            put_num(missing, 16);
            fail(3, " (glibc chose its code for the CPU the program started on)");
        }
    }
    if (H.xcr0) {
        uint32_t lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        u64 x = ((u64)hi << 32) | lo;
        if (H.xcr0 & ~x) {
            put("cairn-restore: this CPU saves less register state (XCR0 ");
            put_num(x, 16);
            put(") than the image's (");
            put_num(H.xcr0, 16);
            fail(3, ")");
        }
    }
}

static int in_hole(u64 a, u64 b)
{
    return b > CAIRN_IMG_HOLE_START && a < CAIRN_IMG_HOLE_START + CAIRN_IMG_HOLE_LEN;
}

/* Every offset and length the image gives is checked against the file before use. */
static void check_image(void)
{
    if (H.nregions == 0 || H.nregions > MAX_REGIONS || H.nthreads == 0 || H.nthreads > MAX_THREADS)
        fail(4, "cairn-restore: damaged image: region or thread count out of range");
    u64 rend = H.regions_off + (u64)H.nregions * sizeof(struct cairn_img_region);
    u64 tend = H.threads_off + (u64)H.nthreads * sizeof(struct cairn_img_thread);
    if (H.regions_off < sizeof H || rend > image_size || tend > image_size || H.threads_off < rend)
        fail(4, "cairn-restore: damaged image: tables outside the file");
    pread_full(R, (u64)H.nregions * sizeof R[0], H.regions_off);
    pread_full(T, (u64)H.nthreads * sizeof T[0], H.threads_off);
    u64 prev_end = 0;
    for (uint32_t i = 0; i < H.nregions; i++) {
        struct cairn_img_region *r = &R[i];
        r->path[CAIRN_IMG_PATH_MAX - 1] = 0;
        u64 pages = (r->end - r->start) / CAIRN_IMG_PAGE;
        if (r->start >= r->end || (r->start | r->end) % CAIRN_IMG_PAGE || r->start < prev_end ||
            in_hole(r->start, r->end))
            fail(4, "cairn-restore: damaged image: regions overlap, are unaligned or lie in the restore area");
        prev_end = r->end;
        if (r->flags & CAIRN_REG_SAVED) {
            if (r->saved_pages > pages || r->bitmap_off + (pages + 7) / 8 > image_size ||
                r->data_off % CAIRN_IMG_PAGE || r->data_off + r->saved_pages * CAIRN_IMG_PAGE > image_size)
                fail(4, "cairn-restore: damaged image: a region's pages lie outside the file");
        }
    }
}

/* ---- the restorer's own address space ---------------------------------------------- */

static char maps[1 << 16];

/* Parse one maps line: start, end and the name (after the 5 fixed columns). */
static const char *maps_line(const char *p, u64 *start, u64 *end, const char **name, size_t *name_len)
{
    u64 v = 0;
    *start = *end = 0;
    while (*p && *p != '-') {
        char c = *p++;
        v = v * 16 + (u64)(c <= '9' ? c - '0' : c - 'a' + 10);
    }
    *start = v;
    v = 0;
    p++;
    while (*p && *p != ' ') {
        char c = *p++;
        v = v * 16 + (u64)(c <= '9' ? c - '0' : c - 'a' + 10);
    }
    *end = v;
    for (int col = 0; col < 4 && *p; col++) {
        while (*p == ' ')
            p++;
        while (*p && *p != ' ')
            p++;
    }
    while (*p == ' ')
        p++;
    *name = p;
    while (*p && *p != '\n')
        p++;
    *name_len = (size_t)(p - *name);
    return *p ? p + 1 : p;
}

static int name_is(const char *n, size_t len, const char *want)
{
    size_t w = slen(want);
    if (len != w)
        return 0;
    for (size_t i = 0; i < w; i++)
        if (n[i] != want[i])
            return 0;
    return 1;
}

struct special { u64 start, end; };
static struct special cur[4];

static void read_own_maps(void)
{
    i64 fd = sys3(SYS_open, "/proc/self/maps", O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        fail(5, "cairn-restore: cannot read /proc/self/maps");
    u64 n = 0;
    for (;;) {
        i64 r = sys3(SYS_read, fd, maps + n, sizeof maps - 1 - n);
        if (r <= 0)
            break;
        n += (u64)r;
    }
    maps[n] = 0;
    sys1(SYS_close, fd);
}

/* Unmap everything of the restorer's but the hole and the kernel's special mappings, and
 * note where those are. */
static void clear_address_space(void)
{
    read_own_maps();
    for (const char *p = maps; *p;) {
        u64 s, e;
        const char *name;
        size_t nl;
        p = maps_line(p, &s, &e, &name, &nl);
        if (e == 0)
            continue;
        if (name_is(name, nl, "[vdso]")) {
            cur[CAIRN_SPECIAL_VDSO] = (struct special){s, e};
        } else if (name_is(name, nl, "[vvar]")) {
            cur[CAIRN_SPECIAL_VVAR] = (struct special){s, e};
        } else if (name_is(name, nl, "[vvar_vclock]")) {
            cur[CAIRN_SPECIAL_VVAR_VCLOCK] = (struct special){s, e};
        } else if (name_is(name, nl, "[vsyscall]") || in_hole(s, e)) {
            /* keep */
        } else {
            sys2(SYS_munmap, s, e - s);
        }
    }
}

/* Move the vdso and vvar areas to where the process had them, keeping their layout: the
 * restored glibc calls into the vdso at the old addresses. First all out of the way (into
 * the hole's free part), then each to its place, so old and new may overlap. */
static void move_specials(void)
{
    u64 parking = CAIRN_IMG_HOLE_START + CAIRN_IMG_HOLE_LEN - (4ull << 20);
    for (int k = 1; k <= 3; k++) {
        struct cairn_img_region *want = 0;
        for (uint32_t i = 0; i < H.nregions; i++)
            if ((R[i].flags & CAIRN_REG_SPECIAL) && R[i].special == (uint32_t)k)
                want = &R[i];
        u64 have = cur[k].end - cur[k].start;
        if (!want && !have)
            continue;
        if (!want || !have || want->end - want->start != have)
            fail(3, "cairn-restore: the vdso/vvar layout differs from the image's (another kernel build?)");
        i64 r = sys5(SYS_mremap, cur[k].start, have, have, MREMAP_MAYMOVE | MREMAP_FIXED, parking);
        if (r < 0)
            fail(3, "cairn-restore: cannot move the vdso/vvar areas");
        cur[k].start = parking;
        cur[k].end = parking + have;
        parking += have;
    }
    for (uint32_t i = 0; i < H.nregions; i++) {
        struct cairn_img_region *w = &R[i];
        if (!(w->flags & CAIRN_REG_SPECIAL) || w->special < 1 || w->special > 3)
            continue;
        struct special *c = &cur[w->special];
        i64 r = sys5(SYS_mremap, c->start, c->end - c->start, c->end - c->start,
                     MREMAP_MAYMOVE | MREMAP_FIXED, w->start);
        if (r != (i64)w->start) {
            put("cairn-restore: cannot move ");
            put(w->path);
            put(" to ");
            put_num(w->start, 16);
            fail(3, "");
        }
    }
}

/* ---- mapping the regions ----------------------------------------------------------- */

static uint8_t bitmap[1 << 20];

static void map_failed(struct cairn_img_region *r, i64 err, const char *what)
{
    put("cairn-restore: cannot map ");
    put_num(r->start, 16);
    put("-");
    put_num(r->end, 16);
    put(" (");
    put(r->path[0] ? r->path : "anonymous");
    put("): ");
    put(what);
    put(", error ");
    put_num((u64)-err, 10);
    fail(3, "");
}

/* Open the file of a region, checking it is the one the process had mapped. */
static i64 open_region_file(struct cairn_img_region *r)
{
    int writable_shared = (r->flags & CAIRN_REG_SHARED) && (r->prot & PROT_WRITE);
    i64 fd = sys3(SYS_open, r->path, (writable_shared ? O_RDWR : O_RDONLY) | O_CLOEXEC, 0);
    if (fd < 0)
        map_failed(r, fd, "cannot open the file");
    struct kstat st;
    sys2(SYS_fstat, fd, &st);
    u64 dev = ((st.dev >> 8) & 0xfff) | ((st.dev >> 32) & ~0xfffull);
    u64 mn = (st.dev & 0xff) | ((st.dev >> 12) & ~0xffull);
    u64 recorded_maj = r->dev >> 32, recorded_min = r->dev & 0xffffffff;
    i64 mtime = (i64)st.mtime * 1000000000 + (i64)st.mtime_ns;
    if (st.ino != r->ino || dev != recorded_maj || mn != recorded_min)
        map_failed(r, 0, "the file was replaced since the checkpoint");
    if (writable_shared && (r->flags & CAIRN_REG_SAVED)) {
        /* Its bytes under the mapping come from the image, written through the mapping;
         * the file goes back to its size at the checkpoint first. */
        i64 e = sys2(SYS_ftruncate, fd, r->file_size);
        if (e < 0)
            map_failed(r, e, "cannot set the file back to its size at the checkpoint");
    } else if ((u64)st.size != r->file_size || mtime != r->file_mtime_ns) {
        map_failed(r, 0, "the file changed since the checkpoint");
    }
    return fd;
}

/* ---- filling pages ------------------------------------------------------------------ */

/* Most of a restart is the kernel allocating and clearing the fresh pages the saved ones are
 * read into, which is work per CPU: the restorer fills in parallel, with one worker per CPU
 * it may run on (the main thread is one of them). Runs of saved pages become jobs of at most
 * FILL_PIECE bytes, queued until MAX_JOBS are waiting and then done together; a worker takes
 * the next job, populates its pages (MADV_POPULATE_WRITE: one call allocates them all, which
 * costs about half of taking a fault on each) and reads them from the image. */
#define FILL_PIECE (8ull << 20)
#define MAX_JOBS 4096
#define MAX_WORKERS 16
#define POPULATE_MIN (64ull << 10)

struct fill_job {
    u64 addr, len, off;
};
static struct fill_job jobs[MAX_JOBS];
static uint32_t njobs, next_job;
static u64 queued_bytes;
static int nworkers = 1;

static void do_jobs(void)
{
    for (;;) {
        uint32_t i = __atomic_fetch_add(&next_job, 1, __ATOMIC_RELAXED);
        if (i >= njobs)
            return;
        struct fill_job *j = &jobs[i];
        if (j->len >= POPULATE_MIN)
            sys3(SYS_madvise, j->addr, j->len, MADV_POPULATE_WRITE); /* a hint: errors are fine */
        pread_full((void *)j->addr, j->len, j->off);
    }
}

__attribute__((noreturn, used)) static void worker_main(void)
{
    do_jobs();
    sys1(SYS_exit, 0);
    for (;;) {
    }
}

static void start_workers(int n);

/* Do every queued job, with the workers if there is enough to share. */
static void run_jobs(void)
{
    if (!njobs)
        return;
    next_job = 0;
    start_workers(queued_bytes >= 2 * FILL_PIECE ? nworkers - 1 : 0);
    njobs = 0;
    queued_bytes = 0;
}

static void queue_job(u64 addr, u64 len, u64 off)
{
    while (len) {
        u64 n = len < FILL_PIECE ? len : FILL_PIECE;
        if (njobs == MAX_JOBS)
            run_jobs();
        jobs[njobs++] = (struct fill_job){addr, n, off};
        queued_bytes += n;
        addr += n, off += n, len -= n;
    }
}

/* Queue the saved pages of r (mapped writable) for filling from the image. */
static void fill_pages(struct cairn_img_region *r)
{
    u64 pages = (r->end - r->start) / CAIRN_IMG_PAGE;
    u64 idx = 0;
    for (u64 base = 0; base < pages; base += sizeof bitmap * 8) {
        u64 span = pages - base < sizeof bitmap * 8 ? pages - base : sizeof bitmap * 8;
        pread_full(bitmap, (span + 7) / 8, r->bitmap_off + base / 8);
        for (u64 p = 0; p < span;) {
            if (!(bitmap[p / 8] & (1u << (p % 8)))) {
                p++;
                continue;
            }
            u64 q = p;
            while (q < span && (bitmap[q / 8] & (1u << (q % 8))))
                q++;
            if (idx + (q - p) > r->saved_pages)
                fail(4, "cairn-restore: damaged image: more pages marked than saved");
            queue_job(r->start + (base + p) * CAIRN_IMG_PAGE, (q - p) * CAIRN_IMG_PAGE,
                      r->data_off + idx * CAIRN_IMG_PAGE);
            idx += q - p;
            p = q;
        }
    }
}

static void map_region(struct cairn_img_region *r)
{
    u64 len = r->end - r->start;
    int saved = (r->flags & CAIRN_REG_SAVED) != 0;
    int shared = (r->flags & CAIRN_REG_SHARED) != 0;
    i64 got;
    if (r->flags & CAIRN_REG_FILE) {
        i64 fd = open_region_file(r);
        u64 prot = r->prot | (saved ? PROT_WRITE : 0);
        got = sys6(SYS_mmap, (i64)r->start, (i64)len, (i64)prot,
                   (shared ? MAP_SHARED : MAP_PRIVATE) | MAP_FIXED_NOREPLACE, fd, (i64)r->file_offset);
        sys1(SYS_close, fd);
    } else {
        u64 prot = saved ? (PROT_READ | PROT_WRITE) : r->prot;
        u64 flags = (shared ? MAP_SHARED : MAP_PRIVATE) | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE;
        if (r->prot == PROT_NONE)
            flags |= MAP_NORESERVE;
        got = -1;
        if (r->flags & CAIRN_REG_STACK) {
            /* The kernel grew the original stack on demand; give the restored one room to
             * grow (8 MiB below it, where that is free). */
            u64 room = 8ull << 20;
            if (r->start > room)
                got = sys6(SYS_mmap, (i64)(r->start - room), (i64)(len + room), (i64)prot,
                           (i64)flags, -1, 0);
            if (got != (i64)(r->start - room))
                got = -1;
            else
                got = (i64)r->start;
        }
        if (got == -1)
            got = sys6(SYS_mmap, (i64)r->start, (i64)len, (i64)prot, (i64)flags, -1, 0);
        if (got == (i64)r->start && (r->flags & CAIRN_REG_NUMA) && r->node >= 0 && r->node < 64) {
            /* First touch below happens here, on whatever CPU: bind the pages to their
             * node before filling them. */
            u64 mask = 1ull << r->node;
            sys6(SYS_mbind, (i64)r->start, (i64)len, MPOL_PREFERRED, (i64)&mask, 64, 0);
        }
    }
    if (got != (i64)r->start)
        map_failed(r, got < 0 ? got : -17, "the address is taken or refused");
    if (saved)
        fill_pages(r);
}

/* ---- threads --------------------------------------------------------------------- */

/* Start at a saved context: the registers of cairn_ctx_save's caller, returning 1. */
__attribute__((noreturn)) void cairn_jump(const struct cairn_img_jump *j);
__asm__(".text\n"
        ".globl cairn_jump\n"
        "cairn_jump:\n"
        "  movq 0(%rdi), %rbx\n"
        "  movq 8(%rdi), %rbp\n"
        "  movq 16(%rdi), %r12\n"
        "  movq 24(%rdi), %r13\n"
        "  movq 32(%rdi), %r14\n"
        "  movq 40(%rdi), %r15\n"
        "  movq 48(%rdi), %rsp\n"
        "  movl $1, %eax\n"
        "  jmp *56(%rdi)\n");

/* clone(flags, stack, ptid, ctid, tls); the child pops the context pointer the parent put
 * on top of its stack and jumps to it. Returns the child's tid in the parent. */
i64 cairn_clone_jump(u64 flags, u64 stack, u64 ptid, u64 ctid, u64 tls);
__asm__(".text\n"
        ".globl cairn_clone_jump\n"
        "cairn_clone_jump:\n"
        "  movq %rcx, %r10\n"
        "  movl $56, %eax\n"
        "  syscall\n"
        "  testq %rax, %rax\n"
        "  jnz 1f\n"
        "  popq %rdi\n"
        "  jmp cairn_jump\n"
        "1:\n"
        "  ret\n");

#define CLONE_VM 0x100
#define CLONE_FS 0x200
#define CLONE_FILES 0x400
#define CLONE_SIGHAND 0x800
#define CLONE_THREAD 0x10000
#define CLONE_SYSVSEM 0x40000
#define CLONE_SETTLS 0x80000
#define CLONE_PARENT_SETTID 0x100000
#define CLONE_CHILD_CLEARTID 0x200000

static u64 child_stacks[MAX_THREADS][64] __attribute__((aligned(16)));

/* Fill workers: threads of the restorer itself, on stacks of its own, gone (joined through
 * CLONE_CHILD_CLEARTID, which the kernel clears and wakes at exit) before any restored
 * thread starts. */
#define WORKER_STACK 2048
static u64 worker_stacks[MAX_WORKERS][WORKER_STACK] __attribute__((aligned(16)));
static struct cairn_img_jump worker_jumps[MAX_WORKERS];
static int32_t worker_tids[MAX_WORKERS];

static void start_workers(int n)
{
    u64 flags = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM |
                CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID;
    int started = 0;
    for (int i = 0; i < n && i < MAX_WORKERS; i++) {
        u64 *top = &worker_stacks[i][WORKER_STACK - 1];
        /* Entered as if called: rsp + 8 is 16-aligned. */
        worker_jumps[i] = (struct cairn_img_jump){0};
        worker_jumps[i].rsp = (u64)&worker_stacks[i][WORKER_STACK - 8] - 8;
        worker_jumps[i].rip = (u64)worker_main;
        *top = (u64)&worker_jumps[i];
        if (cairn_clone_jump(flags, (u64)top, (u64)&worker_tids[i], (u64)&worker_tids[i], 0) < 0)
            break; /* fewer workers: the main thread does the rest */
        started++;
    }
    do_jobs();
    for (int i = 0; i < started; i++)
        for (int32_t t; (t = __atomic_load_n(&worker_tids[i], __ATOMIC_ACQUIRE)) != 0;)
            sys6(SYS_futex, (i64)&worker_tids[i], FUTEX_WAIT, t, 0, 0, 0);
}

/* How many CPUs the restorer may run on: its fill workers, the main thread included. */
static int count_cpus(void)
{
    static u64 mask[16];
    i64 n = sys3(SYS_sched_getaffinity, 0, sizeof mask, mask);
    int cpus = 0;
    for (i64 i = 0; i < n / 8; i++)
        for (u64 m = mask[i]; m; m &= m - 1)
            cpus++;
    return cpus < 1 ? 1 : cpus > MAX_WORKERS ? MAX_WORKERS : cpus;
}

static void start_threads(void)
{
    struct cairn_img_thread *main_thread = 0;
    for (uint32_t i = 0; i < H.nthreads; i++)
        if (T[i].flags & CAIRN_THR_MAIN)
            main_thread = &T[i];
    if (!main_thread)
        main_thread = &T[0];
    u64 flags = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM |
                CLONE_SETTLS | CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID;
    for (uint32_t i = 0; i < H.nthreads; i++) {
        struct cairn_img_thread *t = &T[i];
        if (t == main_thread)
            continue;
        u64 *top = &child_stacks[i][63];
        *top = t->jump_addr;
        i64 tid = cairn_clone_jump(flags, (u64)top, t->tid_addr, t->tid_addr, t->fs_base);
        if (tid < 0)
            fail(5, "cairn-restore: cannot start a thread");
    }
    sys2(SYS_arch_prctl, ARCH_SET_FS, main_thread->fs_base);
    sys1(SYS_set_tid_address, main_thread->tid_addr);
    *(volatile int32_t *)main_thread->tid_addr = (int32_t)sys1(SYS_gettid, 0);
    cairn_jump((const struct cairn_img_jump *)main_thread->jump_addr);
}

/* ---- main ---------------------------------------------------------------------------- */

static const char *arg_value(char **argv, int argc, const char *name)
{
    for (int i = 2; i + 1 < argc; i++)
        if (seq(argv[i], name))
            return argv[i + 1];
    return 0;
}

static i64 parse_int(const char *s)
{
    i64 v = 0;
    while (s && *s >= '0' && *s <= '9')
        v = v * 10 + (*s++ - '0');
    return v;
}

#define SYS_clock_gettime 228

static i64 monotonic_ns(void)
{
    i64 ts[2] = {0, 0};
    sys2(SYS_clock_gettime, 1 /* CLOCK_MONOTONIC */, ts);
    return ts[0] * 1000000000 + ts[1];
}

__attribute__((noreturn, used)) void restorer_main(u64 *sp)
{
    i64 started = monotonic_ns();
    int argc = (int)sp[0];
    char **argv = (char **)(sp + 1);
    /* Nothing may interrupt the rebuild; each thread gets its own mask back when it
     * returns from the checkpoint signal handler. */
    u64 all = ~0ull;
    sys4(SYS_rt_sigprocmask, 2 /* SIG_SETMASK */, &all, 0, 8);
    if (argc < 2 || sprefix(argv[1], "-"))
        fail(2, "usage: cairn-restore IMAGE [--coord HOST:PORT] [--token HEX] [--proc N] "
                "[--cpus LIST] [--affinity on|off]");
    /* The restored process gets its standard streams from whoever started the restorer and
     * its files from the image, nothing else: descriptors inherited beyond those would
     * take the numbers its files come back at, or make its next checkpoint fail. */
    if (sys3(SYS_close_range, 3, ~0u, 0) != 0)
        for (int fd = 3; fd < 4096; fd++)
            sys1(SYS_close, fd);
    img = (int)sys3(SYS_open, argv[1], O_RDONLY | O_CLOEXEC, 0);
    if (img < 0) {
        put("cairn-restore: cannot open the image ");
        put(argv[1]);
        fail(5, "");
    }
    struct kstat st;
    sys2(SYS_fstat, img, &st);
    image_size = (u64)st.size;
    if (image_size < sizeof H)
        fail(4, "cairn-restore: damaged image: shorter than its header");
    pread_full(&H, sizeof H, 0);
    const char magic[8] = CAIRN_IMG_MAGIC;
    for (int i = 0; i < 8; i++)
        if (H.magic[i] != magic[i])
            fail(4, "cairn-restore: not a Cairn process image");
    if (H.version != CAIRN_IMG_VERSION || H.header_size != sizeof H)
        fail(4, "cairn-restore: image version or layout unknown to this build");
    if (H.file_size != image_size)
        fail(4, "cairn-restore: damaged image: its size is not the one recorded (truncated?)");
    if (H.hole_start != CAIRN_IMG_HOLE_START || H.hole_len != CAIRN_IMG_HOLE_LEN)
        fail(4, "cairn-restore: the image reserves another restore area than this build");
    check_machine();
    check_image();
    /* The arguments live on the kernel's stack, which goes away below: copy them. */
    static char coord[128], token[80], proc[16], cpus[256], aff[8];
    const char *v;
    scopy(coord, (v = arg_value(argv, argc, "--coord")) ? v : "", sizeof coord);
    scopy(token, (v = arg_value(argv, argc, "--token")) ? v : "", sizeof token);
    if (!token[0]) {
        /* Better than --token, which ps shows: CAIRN_COORD_TOKEN in the environment. */
        for (char **e = argv + argc + 1; *e; e++)
            if (sprefix(*e, "CAIRN_COORD_TOKEN="))
                scopy(token, *e + 18, sizeof token);
    }
    scopy(proc, (v = arg_value(argv, argc, "--proc")) ? v : "", sizeof proc);
    scopy(cpus, (v = arg_value(argv, argc, "--cpus")) ? v : "", sizeof cpus);
    scopy(aff, (v = arg_value(argv, argc, "--affinity")) ? v : "on", sizeof aff);
    if (!seq(aff, "on") && !seq(aff, "off"))
        fail(2, "cairn-restore: --affinity takes on or off");

    nworkers = count_cpus();
    /* Past this point the restorer's own memory is being replaced. */
    clear_address_space();
    move_specials();
    for (uint32_t i = 0; i < H.nregions; i++)
        if (!(R[i].flags & CAIRN_REG_SPECIAL))
            map_region(&R[i]);
    run_jobs();
    for (uint32_t i = 0; i < H.nregions; i++) {
        struct cairn_img_region *r = &R[i];
        if ((r->flags & CAIRN_REG_SAVED) && !(r->flags & CAIRN_REG_SPECIAL) &&
            r->prot != (PROT_READ | PROT_WRITE))
            sys3(SYS_mprotect, r->start, r->end - r->start, r->prot);
    }
    sys1(SYS_close, img);

    struct cairn_img_control *c = (struct cairn_img_control *)H.control_addr;
    if (c->magic != CAIRN_CONTROL_MAGIC)
        fail(4, "cairn-restore: damaged image: the library's control block is not where recorded");
    c->restarted = 1;
    c->new_pid = (int32_t)sys1(SYS_getpid, 0);
    c->main_tid = c->new_pid;
    scopy(c->coord_addr, coord, sizeof c->coord_addr);
    scopy(c->token, token, sizeof c->token);
    c->proc = proc[0] ? (int32_t)parse_int(proc) : c->proc;
    c->affinity = !seq(aff, "off");
    scopy(c->cpus, cpus, sizeof c->cpus);
    c->restore_start_ns = started;
    start_threads();
    for (;;) {
    }
}

/* The entry point: move to a stack inside the restorer's own (hole) memory first, since
 * the kernel's stack will be unmapped. */
static u64 stack[1 << 16] __attribute__((aligned(16), used));
__asm__(".text\n"
        ".globl _start\n"
        "_start:\n"
        "  movq %rsp, %rdi\n"
        "  leaq stack+524288(%rip), %rsp\n"
        "  andq $-16, %rsp\n"
        "  call restorer_main\n"
        "  hlt\n");
