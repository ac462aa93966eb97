/*
** restorer.c: cairn-restore, which turns itself into a checkpointed process again.
**
**     cairn-restore [--init] IMAGE [--member IMAGE]... [--coord HOST:PORT] [--token HEX]
**                   [--proc N] [--cpus LIST] [--affinity on|off]
**     cairn-restore --init [--first-pid N] --exec PROGRAM ARG0 [ARG]...
**
** The token may come from CAIRN_COORD_TOKEN in the environment instead (ps shows arguments).
** CAIRN_CKPT_MOVED in the environment (a restart on hosts with other addresses: "OLD=NEW;...")
** goes to the library in the control block, which translates the addresses the program knew.
**
** With --init it first makes a pid namespace for a process tree and stays outside it,
** relaying signals; the namespace's init (pid 1) either runs PROGRAM (cairn launch) or makes
** the tree of IMAGE and its --member images again (cairn restart): the tree's pipes, socket
** pairs, files and shared memory once, then each process with its pid, by its saved parent,
** each of which then restores its own image.
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

/* The checksums (image.h): xxhash.h's XXH3, inlined. Freestanding means no builtin memcpy,
 * so its word loads are unaligned accesses, not calls to the byte loop below. */
#define XXH_INLINE_ALL
#define XXH_FORCE_MEMORY_ACCESS 1
#include <xxhash.h>

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
#define SYS_brk 12
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
#define SYS_nanosleep 35
#define SYS_execve 59
#define SYS_wait4 61
#define SYS_getuid 102
#define SYS_getgid 104
#define SYS_setpgid 109
#define SYS_getppid 110
#define SYS_setsid 112
#define SYS_rt_sigtimedwait 128
#define SYS_prctl 157
#define SYS_unshare 272
#define SYS_mount 165
#define SYS_clone3 435
#define SYS_sendto 44
#define SYS_socketpair 53
#define SYS_setsockopt 54
#define SYS_fcntl 72
#define SYS_dup3 292
#define SYS_pipe2 293
#define SYS_stat 4
#define SYS_socket 41
#define SYS_connect 42
#define SYS_bind 49
#define SYS_listen 50
#define SYS_getsockname 51
#define SYS_getpeername 52
#define SYS_getsockopt 55
#define SYS_unlink 87
#define SYS_ppoll 271
#define SYS_accept4 288
#define SYS_ioctl 16
#define SYS_shmget 29
#define SYS_shmat 30
#define SYS_shmctl 31
#define SYS_semget 64
#define SYS_semctl 66
#define SYS_shmdt 67
#define IPC_CREAT 01000
#define IPC_EXCL 02000
#define IPC_RMID 0
#define IPC_SET 1
#define SETALL 17
#define SHM_RDONLY 010000
#define SHM_EXEC 0100000
#define O_NOCTTY 0400
#define TCGETS 0x5401
#define TCSETS 0x5402
#define TIOCSCTTY 0x540E
#define TIOCSPGRP 0x5410
#define TIOCSWINSZ 0x5414
#define TIOCSPTLCK 0x40045431
#define TIOCGPTPEER 0x5441
#define SIGTTOU 22

#define PROT_NONE 0
#define PROT_READ 1
#define PROT_WRITE 2
#define PROT_EXEC 4
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
#define O_WRONLY 1
#define EPERM 1
#define EINTR 4
#define EAGAIN 11
#define EEXIST 17
#define EINVAL 22
#define SIGKILL 9
#define SIGCHLD 17
#define WNOHANG 1
#define CLONE_NEWPID 0x20000000
#define CLONE_NEWUSER 0x10000000
#define CLONE_NEWIPC 0x08000000
#define CLONE_NEWNS 0x00020000
#define MS_NOSUID 2
#define MS_NODEV 4
#define MS_NOEXEC 8
#define MS_REC 16384
#define MS_SLAVE (1 << 19)
#define PR_SET_PDEATHSIG 1
#define PR_SET_CHILD_SUBREAPER 36
#define F_SETFL 4
#define F_SETPIPE_SZ 1031
#define O_NONBLOCK 04000
#define AF_UNIX 1
#define SOCK_STREAM 1
#define SOCK_DGRAM 2
#define SOCK_SEQPACKET 5
#define SOL_SOCKET 1
#define SO_SNDBUF 7
#define SO_RCVBUF 8
#define SO_REUSEADDR 2
#define SO_KEEPALIVE 9
#define SO_REUSEPORT 15
#define SO_ERROR 4
#define SO_SNDBUFFORCE 32
#define SO_RCVBUFFORCE 33
#define AF_INET 2
#define AF_INET6 10
#define IPPROTO_TCP 6
#define IPPROTO_IPV6 41
#define TCP_NODELAY 1
#define IPV6_V6ONLY 26
#define SOMAXCONN 4096
#define EINPROGRESS 115
#define POLLOUT 4
#define S_IFMT 0170000
#define S_IFSOCK 0140000
#define MSG_DONTWAIT 0x40
#define MSG_NOSIGNAL 0x4000

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
static int in_tree; /* a process of a restored tree: a failure takes the whole tree down */

static void fail(int code, const char *what)
{
    put(what);
    flush_msg();
    if (in_tree)
        sys2(SYS_kill, -1, SIGKILL); /* every process of the namespace but init and this one */
    sys1(SYS_exit_group, code);
    for (;;) {
    }
}

/* ---- image reading ----------------------------------------------------------------- */

static int img = -1;
static struct cairn_img_header H;
static void give_back_layout(void);
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

/* The image's header and tables, [0, data_start) with meta_sum read as zero, must match
 * meta_sum before anything in them is used (image.h). `fd` is the image of header `h`. */
static uint8_t meta_buf[1 << 16];
static int meta_ok(int fd, const struct cairn_img_header *h, u64 size)
{
    if (h->data_start < sizeof *h || h->data_start > size || h->data_start % CAIRN_IMG_PAGE ||
        h->sums_off < h->data_start || h->nsums > size / 8 || h->sums_off + h->nsums * 8 != size)
        return 0;
    static XXH3_state_t s;
    XXH3_64bits_reset(&s);
    const u64 at = __builtin_offsetof(struct cairn_img_header, meta_sum);
    for (u64 off = 0; off < h->data_start;) {
        u64 n = h->data_start - off < sizeof meta_buf ? h->data_start - off : sizeof meta_buf;
        if (sys4(SYS_pread64, fd, meta_buf, n, off) != (i64)n)
            return 0;
        if (off <= at && at + 8 <= off + n)
            memset(meta_buf + (at - off), 0, 8);
        XXH3_64bits_update(&s, meta_buf, n);
        off += n;
    }
    return XXH3_64bits_digest(&s) == h->meta_sum;
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

static int written_in_tree(const struct cairn_img_region *r);
static int made_again(const struct cairn_img_region *r, const struct kstat *st);

/* Open the file of a region, checking it is the one the process had mapped (or the one this
 * restart made in its place: made_again). */
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
    if ((st.ino != r->ino || dev != recorded_maj || mn != recorded_min) && !made_again(r, &st))
        map_failed(r, 0, "the file was replaced since the checkpoint");
    if (writable_shared && (r->flags & CAIRN_REG_SAVED)) {
        /* Its bytes under the mapping come from the image, written through the mapping;
         * the file goes back to its size at the checkpoint first. */
        i64 e = sys2(SYS_ftruncate, fd, r->file_size);
        if (e < 0)
            map_failed(r, e, "cannot set the file back to its size at the checkpoint");
    } else if (((u64)st.size != r->file_size || mtime != r->file_mtime_ns) && !written_in_tree(r)) {
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
    u64 sum; /* of the page run [addr, addr + len), checked once it is read */
};
/* The first page run found damaged (its address), or 0. */
static u64 damaged_run;
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
        if (XXH3_64bits((const void *)j->addr, j->len) != j->sum)
            __atomic_store_n(&damaged_run, j->addr, __ATOMIC_RELAXED);
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
static void check_runs(void);

static void run_jobs(void)
{
    if (!njobs)
        return;
    next_job = 0;
    start_workers(queued_bytes >= 2 * FILL_PIECE ? nworkers - 1 : 0);
    njobs = 0;
    queued_bytes = 0;
    check_runs();
}

/* Queue one page run (at most CAIRN_IMG_RUN_GROUP pages, FILL_PIECE bytes). */
static void queue_job(u64 addr, u64 len, u64 off, u64 sum)
{
    if (njobs == MAX_JOBS)
        run_jobs();
    jobs[njobs++] = (struct fill_job){addr, len, off, sum};
    queued_bytes += len;
}

/* After the runs queued so far are read: a damaged one stops the restart before any thread
 * of the process runs. */
static void check_runs(void)
{
    u64 at = __atomic_load_n(&damaged_run, __ATOMIC_RELAXED);
    if (at) {
        put("cairn-restore: damaged image: the saved pages at ");
        put_num(at, 16);
        fail(4, " fail their checksum");
    }
}

/* The checksums of a region's page runs, read a block at a time. */
static u64 run_sums[512];
static u64 run_sums_first = ~0ull;

static u64 run_sum(const struct cairn_img_region *r, u64 k)
{
    u64 off = r->sums_off + k * 8;
    if (off < H.sums_off || off + 8 > H.sums_off + H.nsums * 8)
        fail(4, "cairn-restore: damaged image: more page runs than checksums");
    if (run_sums_first == ~0ull || off < run_sums_first || off >= run_sums_first + sizeof run_sums) {
        u64 n = H.sums_off + H.nsums * 8 - off;
        run_sums_first = off;
        pread_full(run_sums, n < sizeof run_sums ? n : sizeof run_sums, off);
    }
    return run_sums[(off - run_sums_first) / 8];
}

/* Queue the saved pages of r (mapped writable) for filling from the image, a page run at a
 * time (image.h: cut at every multiple of CAIRN_IMG_RUN_GROUP, which divides the bitmap
 * buffer's pages). */
static void fill_pages(struct cairn_img_region *r)
{
    _Static_assert((sizeof bitmap * 8) % CAIRN_IMG_RUN_GROUP == 0, "runs cut at the buffer's end");
    _Static_assert(CAIRN_IMG_RUN_GROUP * CAIRN_IMG_PAGE <= FILL_PIECE, "a run is one job");
    u64 pages = (r->end - r->start) / CAIRN_IMG_PAGE;
    u64 idx = 0, k = 0;
    for (u64 base = 0; base < pages; base += sizeof bitmap * 8) {
        u64 span = pages - base < sizeof bitmap * 8 ? pages - base : sizeof bitmap * 8;
        pread_full(bitmap, (span + 7) / 8, r->bitmap_off + base / 8);
        for (u64 p = 0; p < span;) {
            if (!(bitmap[p / 8] & (1u << (p % 8)))) {
                p++;
                continue;
            }
            u64 q = cairn_img_run_end(bitmap, p, span);
            if (idx + (q - p) > r->saved_pages)
                fail(4, "cairn-restore: damaged image: more pages marked than saved");
            queue_job(r->start + (base + p) * CAIRN_IMG_PAGE, (q - p) * CAIRN_IMG_PAGE,
                      r->data_off + idx * CAIRN_IMG_PAGE, run_sum(r, k++));
            idx += q - p;
            p = q;
        }
    }
}

static int init_mode;
static int find_shm(u64 dev, u64 ino);
static i64 shm_fd(int j);

static void map_region(struct cairn_img_region *r)
{
    u64 len = r->end - r->start;
    int saved = (r->flags & CAIRN_REG_SAVED) != 0;
    int shared = (r->flags & CAIRN_REG_SHARED) != 0;
    i64 got;
    if ((r->flags & CAIRN_REG_OBJECT) && init_mode) {
        /* Made and filled by init: mapped as it was, nothing to fill. */
        int j = find_shm(r->dev, r->ino);
        if (j < 0)
            map_failed(r, -22, "its shared memory object was not made");
        got = sys6(SYS_mmap, (i64)r->start, (i64)len, (i64)r->prot, MAP_SHARED | MAP_FIXED_NOREPLACE, shm_fd(j),
                   (i64)r->file_offset);
        if (got != (i64)r->start)
            map_failed(r, got < 0 ? got : -17, "the address is taken or refused");
        return;
    }
    if (r->flags & CAIRN_REG_SYSV) {
        /* Made by init with its id, filled from the root's image: attached here again. */
        u64 how = (r->prot & PROT_WRITE ? 0 : SHM_RDONLY) | (r->prot & PROT_EXEC ? SHM_EXEC : 0);
        got = sys3(SYS_shmat, (i64)r->ino, (i64)r->start, (i64)how);
        if (got != (i64)r->start)
            map_failed(r, got < 0 ? got : -17, "its System V segment cannot be attached there");
        if ((r->prot & PROT_READ) == 0 && sys3(SYS_mprotect, (i64)r->start, (i64)len, (i64)r->prot) != 0)
            map_failed(r, -22, "its protection cannot be set");
        return;
    }
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

/* clone3(args, size); the child starts on args->stack + args->stack_size, pops the context
 * pointer found there and jumps to it. Returns the child's tid in the parent. */
i64 cairn_clone3_jump(void *args, u64 size);
__asm__(".text\n"
        ".globl cairn_clone3_jump\n"
        "cairn_clone3_jump:\n"
        "  movl $435, %eax\n"
        "  syscall\n"
        "  testq %rax, %rax\n"
        "  jnz 1f\n"
        "  popq %rdi\n"
        "  jmp cairn_jump\n"
        "1:\n"
        "  ret\n");

struct clone_args {
    u64 flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size, cgroup;
};

/* Ids: inside a pid namespace of Cairn's, threads and processes are made with the ids they
 * had (clone3 set_tid). An id still held for a moment by a thread that just ended (a fill
 * worker) is waited for. */
static int want_ids;
static i64 pid_max = 32768;

static void sleep_ms(i64 ms)
{
    i64 ts[2] = {ms / 1000, (ms % 1000) * 1000000};
    sys2(SYS_nanosleep, ts, 0);
}

static i64 clone3_retry(struct clone_args *a, int jump)
{
    for (int tries = 0;; tries++) {
        i64 r = jump ? cairn_clone3_jump(a, sizeof *a) : sys2(SYS_clone3, a, sizeof *a);
        if ((r != -EEXIST && r != -EAGAIN) || tries >= 3000)
            return r;
        sleep_ms(1);
    }
}

/* A thread (CLONE_VM) on stack top (holding its context pointer), with id `tid` when ids
 * are restored (else any). */
static i64 clone_thread(u64 flags, u64 *top, u64 ptid, u64 ctid, u64 tls, i64 tid)
{
    struct clone_args a = {0};
    a.flags = flags;
    a.child_tid = ctid;
    a.parent_tid = ptid;
    a.tls = tls;
    a.stack = (u64)top - 64;
    a.stack_size = 64;
    if (want_ids && tid > 0) {
        a.set_tid = (u64)&tid;
        a.set_tid_size = 1;
    }
    return clone3_retry(&a, 1);
}

/* A child process with pid `pid` (fork semantics: it returns 0 in the child). */
static i64 fork_with_pid(i64 pid)
{
    struct clone_args a = {0};
    a.exit_signal = SIGCHLD;
    a.set_tid = (u64)&pid;
    a.set_tid_size = pid > 0 ? 1 : 0;
    if (pid <= 0)
        a.set_tid = 0;
    return clone3_retry(&a, 0);
}

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
        /* Restored ids are low (a namespace starts at 1): workers take ids from the top. */
        i64 high = want_ids ? pid_max - 1 - (sys1(SYS_getpid, 0) % 1024) * MAX_WORKERS - i : 0;
        if (clone_thread(flags, top, (u64)&worker_tids[i], (u64)&worker_tids[i], 0, high) < 0 &&
            clone_thread(flags, top, (u64)&worker_tids[i], (u64)&worker_tids[i], 0, 0) < 0)
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
        i64 tid = clone_thread(flags, top, t->tid_addr, t->tid_addr, t->fs_base, t->tid);
        if (tid < 0) {
            put("cairn-restore: cannot start thread ");
            put_num((u64)t->tid, 10);
            put(want_ids ? " with its id: error " : ": error ");
            put_num((u64)-tid, 10);
            fail(5, "");
        }
    }
    sys2(SYS_arch_prctl, ARCH_SET_FS, main_thread->fs_base);
    sys1(SYS_set_tid_address, main_thread->tid_addr);
    *(volatile int32_t *)main_thread->tid_addr = (int32_t)sys1(SYS_gettid, 0);
    cairn_jump((const struct cairn_img_jump *)main_thread->jump_addr);
}

/* ---- main ---------------------------------------------------------------------------- */

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

/* The options, copied out of the kernel's stack (which goes away with the address space). */
static char coord[128], token[80], proc[16], cpus[256], aff[8] = "on";
static char moved[CAIRN_MOVED_MAX]; /* CAIRN_CKPT_MOVED: the job's hosts' addresses, old=new */
static i64 first_pid; /* --first-pid N (launch): the program's pid in its namespace */
static char **exec_argv; /* --exec PROGRAM ARGS... (launch): the program's path, then its argv */

/* The processes of a tree to restore: the first image is the tree's root. */
#define MAX_MEMBERS 1024
static struct member {
    char path[CAIRN_IMG_PATH_MAX];
    int32_t pid, ppid, pgid, sid;
    int32_t ctty, tty_pgrp; /* controlling pseudo-terminal (index + 1) and its foreground group */
    int fd; /* open before the tree is made: a member restores even if its file is gone */
    u64 xdata; /* where its shared descriptors' bytes in flight start in its image */
    u64 regions_off, nregions, size;
    uint32_t nipc; /* the tree's System V objects (the root's image) */
    u64 ipc_off;
    uint32_t nzombies;
    int32_t zombies[CAIRN_IMG_ZOMBIES][2];
} M[MAX_MEMBERS];
static int nmembers;

static void usage(void)
{
    fail(2, "usage: cairn-restore [--init] IMAGE [--member IMAGE]... [--coord HOST:PORT] [--token HEX] "
            "[--proc N] [--cpus LIST] [--affinity on|off]\n"
            "       cairn-restore --init --exec PROGRAM ARG0 [ARG]...");
}

static void parse_args(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (seq(a, "--init")) {
            init_mode = 1;
        } else if (seq(a, "--exec")) {
            if (i + 2 >= argc)
                usage();
            exec_argv = argv + i + 1;
            return;
        } else if (sprefix(a, "--")) {
            if (i + 1 >= argc)
                usage();
            const char *v = argv[++i];
            if (seq(a, "--coord"))
                scopy(coord, v, sizeof coord);
            else if (seq(a, "--token"))
                scopy(token, v, sizeof token);
            else if (seq(a, "--proc"))
                scopy(proc, v, sizeof proc);
            else if (seq(a, "--cpus"))
                scopy(cpus, v, sizeof cpus);
            else if (seq(a, "--affinity"))
                scopy(aff, v, sizeof aff);
            else if (seq(a, "--first-pid"))
                first_pid = parse_int(v);
            else if (seq(a, "--member") && nmembers > 0 && nmembers < MAX_MEMBERS)
                scopy(M[nmembers++].path, v, CAIRN_IMG_PATH_MAX);
            else
                usage();
        } else if (nmembers == 0) {
            scopy(M[nmembers++].path, a, CAIRN_IMG_PATH_MAX);
        } else {
            usage();
        }
    }
    if (nmembers == 0)
        usage();
}

/* ---- the process tree and its pid namespace ------------------------------------------ */

/* Writes `text` to the file at `path` (the id maps of a new user namespace). */
static int write_file(const char *path, const char *text)
{
    i64 fd = sys3(SYS_open, path, O_WRONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return (int)fd;
    i64 n = sys3(SYS_write, fd, text, slen(text));
    sys1(SYS_close, fd);
    return n == (i64)slen(text) ? 0 : -EINVAL;
}

/* v in decimal at out, NUL-terminated (at most 21 bytes); returns its length. */
static size_t fmt_dec(char *out, u64 v)
{
    char b[24];
    size_t n = 0, k = 0;
    do {
        b[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        out[k++] = b[--n];
    out[k] = 0;
    return k;
}

/* "ID ID 1": a user or group id mapped to itself in a new user namespace. */
static void id_map(char *out, u64 id)
{
    size_t k = fmt_dec(out, id);
    out[k++] = ' ';
    k += fmt_dec(out + k, id);
    out[k++] = ' ';
    out[k++] = '1';
    out[k] = 0;
}

/* A new pid namespace for this process's children, an IPC namespace for the tree (its
 * System V objects are its own, and come back with their ids) and a mount namespace (for its
 * own /proc): as root directly; as another user inside a new user namespace that maps the
 * user to itself. Returns 0 or -errno. */
static i64 make_namespace(void)
{
    i64 r = sys1(SYS_unshare, CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWNS);
    if (r != -EPERM)
        return r;
    i64 uid = sys1(SYS_getuid, 0), gid = sys1(SYS_getgid, 0);
    r = sys1(SYS_unshare, CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWNS);
    if (r < 0)
        return r;
    char map[64];
    id_map(map, (u64)uid);
    if (write_file("/proc/self/uid_map", map) != 0 || write_file("/proc/self/setgroups", "deny") != 0)
        return -EPERM;
    id_map(map, (u64)gid);
    return write_file("/proc/self/gid_map", map) != 0 ? -EPERM : 0;
}

/* In the namespace's init: a /proc of the tree's own, so that /proc/<pid> names the process
 * the tree knows by that pid (and /proc lists the tree's processes only). Mounts below / are
 * made slaves first: the host's later mounts still show in the tree, and nothing mounted in
 * the tree shows on the host. Without it, /proc shows the host's pids, which is said. */
static void mount_own_proc(void)
{
    i64 r = sys5(SYS_mount, 0, (i64) "/", 0, MS_REC | MS_SLAVE, 0);
    if (r == 0)
        r = sys5(SYS_mount, (i64) "proc", (i64) "/proc", (i64) "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, 0);
    if (r != 0) {
        put("cairn-restore: cannot mount the tree's own /proc (error ");
        put_num((u64)-r, 10);
        put("): /proc/<pid> shows this host's pids, not the tree's");
        flush_msg();
    }
}

/* Sets where the namespace's next pid is counted from (the sysctl acts on the writer's own
 * namespace), so that the job's process trees, each in its namespace, use distinct pids:
 * a program naming files after its pid keeps them apart from its siblings'. */
static void set_last_pid(i64 last)
{
    char num[24];
    fmt_dec(num, (u64)last);
    write_file("/proc/sys/kernel/ns_last_pid", num);
}

/* An exit status as a shell gives it. */
static int status_code(int st)
{
    return (st & 0x7f) == 0 ? (st >> 8) & 0xff : 128 + (st & 0x7f);
}

#define SI_KERNEL 0x80

/* Wait for a signal: SIGCHLD reaps (and returns when `watched` ended, its status in *st);
 * any other signal sent by a process (not the terminal's, which reached the whole process
 * group already) goes on to `to`. Never returns unless watched ended. */
static int relay_until_exit(i64 watched, i64 to, int reap_all)
{
    u64 all = ~0ull;
    for (;;) {
        int info[32];
        i64 sig = sys4(SYS_rt_sigtimedwait, &all, info, 0, 8);
        if (sig == SIGCHLD) {
            for (;;) {
                int st = 0;
                i64 r = sys4(SYS_wait4, reap_all ? -1 : watched, &st, WNOHANG, 0);
                if (r == watched)
                    return status_code(st);
                if (r <= 0)
                    break;
            }
        } else if (sig > 0 && info[2] != SI_KERNEL) {
            sys2(SYS_kill, to, sig);
        }
    }
}

/* ---- pipes and sockets shared in the tree ------------------------------------------------ */

/* Each pipe and Unix stream socket pair of the tree is made once, by init, before any process
 * of the tree: every process inherits every one (at numbers above all the tree's own), puts
 * those it held at their numbers and closes the rest, so the processes that shared one share
 * it again, with the bytes that were in flight in it written back first. */
#define MAX_XFDS 4096
static struct xrec {
    struct cairn_img_xfd x;
    int member;
    int object; /* index in O, or -1: the restart's own standard stream stays */
} X[MAX_XFDS];
static int nx;

static struct object {
    uint32_t kind;  /* CAIRN_XFD_PIPE_READ for a pipe, CAIRN_XFD_STREAM for a socket pair,
                     * CAIRN_XFD_TCP for a connection, CAIRN_XFD_REMOTE for one to another
                     * host, CAIRN_XFD_LISTEN, CAIRN_XFD_FILE,
                     * CAIRN_XFD_EVENT */
    u64 a, b;       /* the pipe's, listener's or file's inode; the two ends' socket inodes */
    int has[2];     /* pipe: a read end, a write end held in the tree; pair: end a, end b */
    uint32_t pipe_size;
    uint32_t sock_type; /* a Unix pair: SOCK_STREAM, SOCK_DGRAM or SOCK_SEQPACKET */
} O[MAX_XFDS];
static int no;
static i64 xbase = 3; /* objects live at xbase + 2k (pipe read end, end a), + 2k + 1 */

static void read_xfds(int k, const struct cairn_img_header *h)
{
    if (h->max_fd + 1 > xbase)
        xbase = h->max_fd + 1;
    if (!h->nxfds)
        return;
    u64 table = (u64)h->nxfds * sizeof(struct cairn_img_xfd);
    if (h->nxfds > MAX_XFDS - (u64)nx || h->xfds_off + table + h->xdata_len > h->file_size) {
        put("cairn-restore: damaged image, or too many shared descriptors: ");
        put(M[k].path);
        fail(4, "");
    }
    for (uint32_t i = 0; i < h->nxfds; i++) {
        if (sys4(SYS_pread64, M[k].fd, &X[nx].x, sizeof X[nx].x, h->xfds_off + i * sizeof X[nx].x) !=
                (i64)sizeof X[nx].x ||
            X[nx].x.data_off + X[nx].x.data_len > h->xdata_len) {
            put("cairn-restore: damaged table of shared descriptors in ");
            put(M[k].path);
            fail(4, "");
        }
        X[nx].member = k;
        X[nx++].object = -1;
    }
    M[k].xdata = h->xfds_off + table;
}

#define F_DUPFD 0

/* Puts descriptor fd at number `to` (closing fd), or leaves it if it is there. */
static i64 put_at(i64 fd, i64 to)
{
    if (fd == to)
        return to;
    i64 r = sys3(SYS_dup3, fd, to, 0);
    sys1(SYS_close, fd);
    return r;
}

/* Puts the two new descriptors e at t0 and t1; either may have been given one of those
 * numbers, so each is first moved out of the other's way. */
static i64 put_pair_at(i64 e[2], i64 t0, i64 t1)
{
    for (int k = 0; k < 2; k++)
        if (e[k] == (k ? t0 : t1))
            e[k] = put_at(e[k], sys3(SYS_fcntl, e[k], F_DUPFD, t1 + 1));
    if (put_at(e[0], t0) < 0 || put_at(e[1], t1) < 0)
        return -1;
    return 0;
}

static int find_object(uint32_t kind, u64 a, u64 b)
{
    for (int i = 0; i < no; i++)
        if (O[i].kind == kind &&
            ((O[i].a == a && O[i].b == b) || ((kind == CAIRN_XFD_STREAM || kind == CAIRN_XFD_TCP) && O[i].a == b && O[i].b == a)))
            return i;
    return -1;
}

/* The object descriptor a record stands for: the pipe end it is, or the pair end whose
 * inode it has. */
static i64 object_fd(const struct xrec *r)
{
    const struct object *o = &O[r->object];
    int second = o->kind == CAIRN_XFD_STREAM || o->kind == CAIRN_XFD_TCP ? r->x.ino != o->a
                 : o->kind == CAIRN_XFD_FILE || o->kind == CAIRN_XFD_LISTEN || o->kind == CAIRN_XFD_EVENT ? 0
                 : o->kind == CAIRN_XFD_PTM                                 ? r->x.kind == CAIRN_XFD_PTS
                                                                            : r->x.kind == CAIRN_XFD_PIPE_WRITE;
    return xbase + 2 * r->object + second;
}

/* Ends the message being put with where record r's descriptor is: " (fd N of process P)". */
static void said_at(const struct xrec *r)
{
    put(" (fd ");
    put_num((u64)r->x.fd, 10);
    put(" of process ");
    put_num((u64)M[r->member].pid, 10);
    put(")");
    flush_msg();
}

/* Copies len bytes of record r's data from `off` on into descriptor to: into a pipe, or sent
 * from a socket to its peer. Never waits: a short write is said. */
static void refill_bytes(const struct xrec *r, u64 off, u64 len, i64 to, int sock)
{
    static uint8_t buf[1 << 16];
    u64 done = 0;
    if (sock && len > 100000) {
        int room = (int)len;
        sys5(SYS_setsockopt, to, SOL_SOCKET, SO_SNDBUF, &room, sizeof room);
    }
    while (done < len) {
        u64 k = len - done < sizeof buf ? len - done : sizeof buf;
        if (sys4(SYS_pread64, M[r->member].fd, buf, k, M[r->member].xdata + r->x.data_off + off + done) != (i64)k)
            fail(5, "cairn-restore: cannot read the bytes in flight of a pipe or socket");
        for (u64 w = 0; w < k;) {
            i64 n = sock ? sys6(SYS_sendto, to, (i64)(buf + w), (i64)(k - w), MSG_DONTWAIT | MSG_NOSIGNAL, 0, 0)
                         : sys3(SYS_write, to, buf + w, k - w);
            if (n <= 0) {
                put("cairn-restore: cannot put back ");
                put_num(len - done - w, 10);
                put(" bytes in flight into a pipe or socket of the tree");
                said_at(r);
                return;
            }
            w += (u64)n;
        }
        done += k;
    }
}

static void refill(const struct xrec *r, i64 to, int sock) { refill_bytes(r, 0, r->x.data_len, to, sock); }

/* The messages waiting at a Unix datagram or seqpacket end (record r: each its length as a
 * uint32_t, then its bytes), sent again one by one from the other end `to`. */
static void refill_messages(const struct xrec *r, i64 to)
{
    static uint8_t msg[256 << 10];
    for (u64 at = 0; at + 4 <= r->x.data_len;) {
        uint32_t len = 0;
        u64 base = M[r->member].xdata + r->x.data_off + at;
        if (sys4(SYS_pread64, M[r->member].fd, &len, 4, base) != 4 || len > sizeof msg || at + 4 + len > r->x.data_len ||
            sys4(SYS_pread64, M[r->member].fd, msg, len, base + 4) != (i64)len)
            fail(4, "cairn-restore: damaged image: a socket's messages in flight lie outside it");
        if (sys6(SYS_sendto, to, (i64)msg, len, MSG_DONTWAIT | MSG_NOSIGNAL, 0, 0) != (i64)len) {
            put("cairn-restore: cannot put back a message in flight into a socket of the tree");
            said_at(r);
            return;
        }
        at += 4 + len;
    }
}

#define SYS_lseek 8
#define O_CREAT 0100
#define O_EXCL 0200
#define O_TRUNC 01000
#define O_APPEND 02000

/* The record of kind `kind` of the descriptor `peer` names (a parent's), or -1. */
static int file_peer(uint32_t kind, u64 peer)
{
    int32_t pid = (int32_t)(peer >> 32);
    int fd = (int)(peer & 0xffffffffu) - 1;
    for (int j = 0; j < nx; j++)
        if (X[j].x.kind == kind && X[j].x.fd == fd && M[X[j].member].pid == pid)
            return j;
    return -1;
}

#define SYS_eventfd2 290
#define EFD_SEMAPHORE 1

/* An eventfd as record x had it: its count, semaphore mode and non-blocking flag. */
static i64 make_event(const struct cairn_img_xfd *x)
{
    i64 fd = sys2(SYS_eventfd2, 0, (x->size ? EFD_SEMAPHORE : 0) | (x->flags & O_NONBLOCK));
    u64 count = (u64)x->offset;
    if (fd >= 0 && count && sys3(SYS_write, fd, &count, sizeof count) != (i64)sizeof count) {
        sys1(SYS_close, fd);
        return -22;
    }
    return fd;
}

/* Files and eventfds: one open file description per chain of processes that shared it (a
 * record linked to its parent's, that to its own parent's...). A file is opened by path as
 * the first of them had it, cut back to its size at the checkpoint if it was open for
 * writing, at its offset; an eventfd is made with its count. */
static void make_files(void)
{
    for (int i = 0; i < nx; i++) {
        uint32_t kind = X[i].x.kind;
        if (kind != CAIRN_XFD_FILE && kind != CAIRN_XFD_EVENT)
            continue;
        int top = i;
        for (int hops = 0; hops < MAX_MEMBERS && X[top].x.peer; hops++) {
            int up = file_peer(kind, X[top].x.peer);
            if (up < 0)
                break;
            top = up;
        }
        if (kind == CAIRN_XFD_EVENT && X[top].object < 0) {
            i64 fd = make_event(&X[top].x);
            int k = no++;
            O[k] = (struct object){CAIRN_XFD_EVENT, 0, 0, {1, 1}, 0, 0};
            if (fd < 0 || put_at(fd, xbase + 2 * k) < 0)
                fail(5, "cairn-restore: cannot make an eventfd of the tree again (too many open files?)");
            X[top].object = k;
        } else if (X[top].object < 0 && X[top].object != -2) {
            struct cairn_img_xfd *x = &X[top].x;
            static char path[CAIRN_IMG_PATH_MAX + 1];
            u64 len = x->data_len < CAIRN_IMG_PATH_MAX ? x->data_len : CAIRN_IMG_PATH_MAX;
            path[0] = 0;
            if (sys4(SYS_pread64, M[X[top].member].fd, path, len, M[X[top].member].xdata + x->data_off) == (i64)len)
                path[len] = 0;
            i64 fd = path[0] == '/' ? sys3(SYS_open, path, x->flags & ~(O_CREAT | O_TRUNC | O_EXCL), 0) : -2;
            if (fd < 0) {
                put("cairn-restore: cannot reopen ");
                put(path);
                put(" as fd ");
                put_num((u64)x->fd, 10);
                put(" of process ");
                put_num((u64)M[X[top].member].pid, 10);
                flush_msg();
                X[top].object = -2;
            } else {
                /* What the processes wrote after the checkpoint they will write again. */
                struct kstat st;
                if ((x->flags & 3) != O_RDONLY && sys2(SYS_fstat, fd, &st) == 0 && st.size > x->size)
                    sys2(SYS_ftruncate, fd, x->size);
                if (!(x->flags & O_APPEND) && x->offset > 0)
                    sys3(SYS_lseek, fd, x->offset, 0);
                int k = no++;
                O[k] = (struct object){CAIRN_XFD_FILE, x->ino, 0, {1, 1}, 0, 0};
                if (put_at(fd, xbase + 2 * k) < 0)
                    fail(5, "cairn-restore: cannot place a file of the tree (too many open files?)");
                X[top].object = k;
            }
        }
        X[i].object = X[top].object >= 0 ? X[top].object : -1;
    }
    for (int i = 0; i < nx; i++)
        if (X[i].object == -2)
            X[i].object = -1;
}

/* ---- sockets: listeners and TCP connections ---- */

/* Record r's socket data (image.h), checked against its record. */
static void sock_of(const struct xrec *r, struct cairn_img_sock *s)
{
    if (r->x.data_len < sizeof *s ||
        sys4(SYS_pread64, M[r->member].fd, s, sizeof *s, M[r->member].xdata + r->x.data_off) != (i64)sizeof *s ||
        s->local_len > sizeof s->local || s->peer_len > sizeof s->peer || s->recv_len > r->x.data_len ||
        s->send_len > r->x.data_len - sizeof *s - s->recv_len) {
        put("cairn-restore: damaged socket record in ");
        put(M[r->member].path);
        fail(4, "");
    }
}

static void say_sock(const char *what, const struct xrec *r, i64 err)
{
    put("cairn-restore: ");
    put(what);
    put(" (fd ");
    put_num((u64)r->x.fd, 10);
    put(" of process ");
    put_num((u64)M[r->member].pid, 10);
    put(", socket:[");
    put_num(r->x.ino, 10);
    put("]): error ");
    put_num((u64)-err, 10);
    flush_msg();
}

static void set_opt(i64 fd, int level, int name, int on)
{
    sys5(SYS_setsockopt, fd, level, name, (i64)&on, sizeof on);
}

/* The socket options a record's socket had (SO_REUSEADDR included). */
static void set_opts(i64 fd, const struct cairn_img_sock *s)
{
    set_opt(fd, SOL_SOCKET, SO_REUSEADDR, (s->opts & CAIRN_SOCK_REUSEADDR) != 0);
    if (s->opts & CAIRN_SOCK_KEEPALIVE)
        set_opt(fd, SOL_SOCKET, SO_KEEPALIVE, 1);
    if ((s->opts & CAIRN_SOCK_NODELAY) && s->family != AF_UNIX)
        set_opt(fd, IPPROTO_TCP, TCP_NODELAY, 1);
}

/* A listening socket of the tree, bound again to its address and listening; if that fails
 * (the address is taken), said, and left a socket that is not listening. */
static i64 make_listener(const struct xrec *r, const struct cairn_img_sock *s)
{
    i64 fd = sys3(SYS_socket, s->family, s->type, s->protocol);
    if (fd < 0)
        fail(5, "cairn-restore: cannot make a listening socket of the tree again");
    set_opt(fd, SOL_SOCKET, SO_REUSEADDR, s->family != AF_UNIX);
    if (s->opts & CAIRN_SOCK_REUSEPORT)
        set_opt(fd, SOL_SOCKET, SO_REUSEPORT, 1);
    if (s->family == AF_INET6)
        set_opt(fd, IPPROTO_IPV6, IPV6_V6ONLY, (s->opts & CAIRN_SOCK_V6ONLY) != 0);
    if (s->family == AF_UNIX && s->local_len > 3 && s->local[2]) {
        /* The name the killed process left behind, if it is still a socket. */
        static char path[sizeof s->local];
        u64 n = s->local_len - 2;
        for (u64 i = 0; i < n; i++)
            path[i] = (char)s->local[2 + i];
        path[n] = 0;
        struct kstat st;
        if (sys2(SYS_stat, path, &st) == 0 && (st.mode & S_IFMT) == S_IFSOCK)
            sys1(SYS_unlink, path);
    }
    i64 e = sys3(SYS_bind, fd, s->local, s->local_len);
    if (e == 0)
        e = sys2(SYS_listen, fd, SOMAXCONN);
    if (e != 0)
        say_sock("cannot listen again on the address of a listening socket; it comes back not listening", r, e);
    set_opts(fd, s);
    return fd;
}

static int same_bytes(const uint8_t *a, const uint8_t *b, u64 n)
{
    for (u64 i = 0; i < n; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

/* Whether a listener bound to `l` takes connections to local address `a` (same family and
 * port, and the same address or the listener's wildcard one). */
static int listens_for(const struct cairn_img_sock *l, const struct cairn_img_sock *a)
{
    /* A Unix datagram socket by its abstract name (an unnamed one is no sender to find). */
    if (l->family == AF_UNIX && a->family == AF_UNIX)
        return a->local_len > 2 && l->local_len == a->local_len && same_bytes(l->local, a->local, a->local_len);
    if (l->family != a->family || a->family == AF_UNIX || l->local[2] != a->local[2] || l->local[3] != a->local[3])
        return 0;
    u64 at = a->family == AF_INET ? 4 : 8, len = a->family == AF_INET ? 4 : 16;
    static const uint8_t zero[16];
    return same_bytes(l->local + at, a->local + at, len) || same_bytes(l->local + at, zero, len);
}

static const struct xrec *end_record(int k, u64 ino, struct cairn_img_sock *s);

static void bcopy_n(uint8_t *d, const uint8_t *from, u64 n)
{
    for (u64 i = 0; i < n; i++)
        d[i] = from[i];
}

/* UDP socket k of the tree made again at its number: bound to its address and connected to
 * its peer if it was. */
static void make_udp(int k)
{
    struct cairn_img_sock s;
    const struct xrec *r = end_record(k, O[k].a, &s);
    i64 fd = sys3(SYS_socket, s.family, s.type, s.protocol);
    if (fd < 0)
        fail(5, "cairn-restore: cannot make a datagram socket of the tree again");
    i64 e = 0;
    if (s.family == AF_UNIX) {
        /* The library recorded only unnamed ones and ones with an abstract name. */
        if (s.local_len > 2 && s.local_len <= sizeof s.local && s.local[2] == 0)
            e = sys3(SYS_bind, fd, s.local, s.local_len);
    } else {
        set_opt(fd, SOL_SOCKET, SO_REUSEADDR, (s.opts & CAIRN_SOCK_REUSEADDR) != 0);
        if (s.opts & CAIRN_SOCK_REUSEPORT)
            set_opt(fd, SOL_SOCKET, SO_REUSEPORT, 1);
        if (s.family == AF_INET6)
            set_opt(fd, IPPROTO_IPV6, IPV6_V6ONLY, (s.opts & CAIRN_SOCK_V6ONLY) != 0);
        e = sys3(SYS_bind, fd, s.local, s.local_len);
        if (e == 0 && s.peer_len)
            e = sys3(SYS_connect, fd, s.peer, s.peer_len);
    }
    if (e != 0)
        say_sock("cannot bind or connect a datagram socket again to its addresses", r, e);
    if (put_at(fd, xbase + 2 * k) < 0)
        fail(5, "cairn-restore: cannot place a datagram socket of the tree (too many open files?)");
}

/* The datagrams that waited at UDP socket k (its first record that has any), each sent to
 * its address again from the tree's UDP socket bound to its sender's, or, if none is, from a
 * new socket (the receiver then sees another sender, which is said). Objects below `n`. */
static void refill_datagrams(int k, int n)
{
    struct cairn_img_sock s, to;
    const struct xrec *r = 0;
    for (int i = 0; i < nx && !r; i++)
        if (X[i].object == k) {
            sock_of(&X[i], &s);
            if (s.recv_len)
                r = &X[i];
        }
    if (!r)
        return;
    to = s;
    /* A socket bound to the wildcard address is reached at the loopback one. */
    static const uint8_t zero[16], lo4[4] = {127, 0, 0, 1}, lo6[16] = {[15] = 1};
    u64 at = s.family == AF_INET ? 4 : 8, alen = s.family == AF_INET ? 4 : 16;
    if (s.family != AF_UNIX && same_bytes(to.local + at, zero, alen))
        bcopy_n(to.local + at, s.family == AF_INET ? lo4 : lo6, alen);
    static uint8_t msg[64 << 10];
    u64 base = M[r->member].xdata + r->x.data_off + sizeof s;
    for (u64 off = 0; off + sizeof(struct cairn_img_datagram) <= s.recv_len;) {
        struct cairn_img_datagram d;
        if (sys4(SYS_pread64, M[r->member].fd, &d, sizeof d, base + off) != (i64)sizeof d || d.len > sizeof msg ||
            d.from_len > sizeof d.from || off + sizeof d + d.len > s.recv_len ||
            sys4(SYS_pread64, M[r->member].fd, msg, d.len, base + off + sizeof d) != (i64)d.len)
            fail(4, "cairn-restore: damaged image: a socket's datagrams in flight lie outside it");
        off += sizeof d + d.len;
        struct cairn_img_sock from;
        from.family = s.family;
        from.local_len = d.from_len;
        bcopy_n(from.local, d.from, d.from_len);
        i64 via = -1;
        for (int j = 0; j < n && via < 0; j++) {
            struct cairn_img_sock c;
            if (O[j].kind == CAIRN_XFD_UDP && end_record(j, O[j].a, &c) && listens_for(&c, &from))
                via = xbase + 2 * j;
        }
        i64 own = via < 0 ? sys3(SYS_socket, s.family, s.type, s.protocol) : -1;
        i64 sent = sys6(SYS_sendto, via < 0 ? own : via, (i64)msg, d.len, MSG_DONTWAIT | MSG_NOSIGNAL, (i64)to.local,
                        to.local_len);
        if (own >= 0)
            sys1(SYS_close, own);
        if (sent != (i64)d.len)
            say_sock("cannot send a datagram in flight again to a datagram socket of the tree", r,
                     sent < 0 ? sent : -5);
        else if (via < 0 && !(s.family == AF_UNIX && d.from_len <= 2)) /* an unnamed sender stays one */
            say_sock("a datagram in flight comes back from another sender (its sender is not in the tree)", r, 0);
    }
}

/* A record of end `ino` of the tree's connections, the one carrying its bytes if any. */
static const struct xrec *end_record(int k, u64 ino, struct cairn_img_sock *s)
{
    const struct xrec *best = 0;
    for (int i = 0; i < nx; i++) {
        if (X[i].object != k || X[i].x.ino != ino)
            continue;
        struct cairn_img_sock t;
        sock_of(&X[i], &t);
        if (!best || t.recv_len + t.send_len > s->recv_len + s->send_len) {
            best = &X[i];
            *s = t;
        }
    }
    return best;
}

/* Makes a socket's receive (or send) buffer at least `need` bytes, beyond the limit an
 * unprivileged process may set if the restorer may. */
static void room_for(i64 fd, int rcv, u64 need)
{
    if (need <= 65536)
        return;
    int size = need > (1u << 30) ? 1 << 30 : (int)(2 * need + 65536);
    if (sys5(SYS_setsockopt, fd, SOL_SOCKET, rcv ? SO_RCVBUFFORCE : SO_SNDBUFFORCE, (i64)&size, sizeof size) != 0)
        sys5(SYS_setsockopt, fd, SOL_SOCKET, rcv ? SO_RCVBUF : SO_SNDBUF, (i64)&size, sizeof size);
}

/* Binds TCP socket fd to the local address of record s, or, if that port is taken (the killed
 * connection lingers on it), to the same address with a port the kernel picks. */
static void bind_again(i64 fd, const struct cairn_img_sock *s)
{
    set_opt(fd, SOL_SOCKET, SO_REUSEADDR, 1);
    if (sys3(SYS_bind, fd, s->local, s->local_len) == 0)
        return;
    uint8_t any[sizeof s->local];
    for (u64 i = 0; i < sizeof any; i++)
        any[i] = s->local[i];
    any[2] = any[3] = 0; /* sin_port / sin6_port */
    sys3(SYS_bind, fd, any, s->local_len);
}

/* TCP connection k of the tree, connected again between its two ends' addresses: through the
 * tree's listener for the server end's address if it has one, else a listener of its own for
 * the moment. A client port that cannot be bound again (the killed process's connection
 * lingers on it) is given another by the kernel. Each end is placed at its object number,
 * and the bytes that were waiting at each end are sent again from the other, followed by
 * those the other had sent that it had not received yet. */
static void make_tcp(int k)
{
    struct object *o = &O[k];
    struct cairn_img_sock sa, sb, *ss, *cs;
    const struct xrec *ra = end_record(k, o->a, &sa), *rb = end_record(k, o->b, &sb);
    int server_b = 0;
    i64 lfd = -1;
    for (int j = 0; j < no && lfd < 0; j++) {
        if (O[j].kind != CAIRN_XFD_LISTEN)
            continue;
        struct cairn_img_sock l;
        for (int i = 0; i < nx; i++)
            if (X[i].object == j) {
                sock_of(&X[i], &l);
                break;
            }
        if (listens_for(&l, &sa))
            lfd = xbase + 2 * j;
        else if (listens_for(&l, &sb))
            lfd = xbase + 2 * j, server_b = 1;
    }
    ss = server_b ? &sb : &sa;
    cs = server_b ? &sa : &sb;
    const struct xrec *rs = server_b ? rb : ra, *rc = server_b ? ra : rb;
    i64 tmp = -1;
    if (lfd < 0) {
        tmp = sys3(SYS_socket, ss->family, SOCK_STREAM, 0);
        bind_again(tmp, ss);
        i64 e = sys2(SYS_listen, tmp, 1);
        if (e != 0) {
            say_sock("cannot make a TCP connection of the tree again", rs, e);
            fail(5, "");
        }
        lfd = tmp;
    }
    uint8_t to[112];
    u64 tolen = sizeof to;
    sys3(SYS_getsockname, lfd, to, (i64)&tolen);
    i64 c = sys3(SYS_socket, cs->family, SOCK_STREAM | O_NONBLOCK, 0);
    bind_again(c, cs);
    i64 e = sys3(SYS_connect, c, to, tolen);
    if (e == -EINPROGRESS) {
        struct {
            int fd;
            short events, revents;
        } p = {(int)c, POLLOUT, 0};
        struct {
            i64 s, ns;
        } two = {2, 0};
        int err = 0;
        u64 el = sizeof err;
        e = sys5(SYS_ppoll, (i64)&p, 1, (i64)&two, 0, 0) == 1 &&
                    sys5(SYS_getsockopt, c, SOL_SOCKET, SO_ERROR, (i64)&err, (i64)&el) == 0
                ? -err
                : -EAGAIN;
    }
    if (e != 0) {
        say_sock("cannot connect a TCP connection of the tree again", rc, e);
        fail(5, "");
    }
    sys3(SYS_fcntl, c, F_SETFL, 0);
    uint8_t mine[112], theirs[112];
    u64 minelen = sizeof mine;
    sys3(SYS_getsockname, c, mine, (i64)&minelen);
    i64 s = -1;
    for (int tries = 0; tries < 64 && s < 0; tries++) {
        s = sys4(SYS_accept4, lfd, 0, 0, 0);
        u64 tl = sizeof theirs;
        if (s >= 0 && (sys3(SYS_getpeername, s, theirs, (i64)&tl) != 0 || tl != minelen || !same_bytes(theirs, mine, tl))) {
            sys1(SYS_close, s); /* a client from outside, connecting meanwhile */
            s = -1;
        }
    }
    if (tmp >= 0)
        sys1(SYS_close, tmp);
    if (s < 0) {
        say_sock("cannot accept a TCP connection of the tree again", rs, s);
        fail(5, "");
    }
    set_opts(s, ss);
    set_opts(c, cs);
    i64 fa = server_b ? c : s, fb = server_b ? s : c;
    room_for(fa, 1, sa.recv_len + sb.send_len);
    room_for(fb, 1, sb.recv_len + sa.send_len);
    room_for(fb, 0, sa.recv_len + sb.send_len);
    room_for(fa, 0, sb.recv_len + sa.send_len);
    i64 ends[2] = {fa, fb};
    if (put_pair_at(ends, xbase + 2 * k, xbase + 2 * k + 1) != 0)
        fail(5, "cairn-restore: cannot place a TCP connection of the tree (too many open files?)");
    /* What end a had waiting, then what b had sent beyond it, from b; and the other way. */
    if (ra && sa.recv_len)
        refill_bytes(ra, sizeof sa, sa.recv_len, xbase + 2 * k + 1, 1);
    if (rb && sb.send_len)
        refill_bytes(rb, sizeof sb + sb.recv_len, sb.send_len, xbase + 2 * k + 1, 1);
    if (rb && sb.recv_len)
        refill_bytes(rb, sizeof sb, sb.recv_len, xbase + 2 * k, 1);
    if (ra && sa.send_len)
        refill_bytes(ra, sizeof sa + sa.recv_len, sa.send_len, xbase + 2 * k, 1);
}

/* Pseudo-terminal k of the tree: a new pair (another index), with the settings its master and
 * slave had, and the bytes that waited at the master written again through the slave with
 * output processing off. An end no process held is closed, as it was. */
static void make_pty(int k)
{
    struct object *o = &O[k];
    i64 m = sys3(SYS_open, "/dev/ptmx", O_RDWR | O_NOCTTY, 0);
    int unlock = 0;
    i64 sl = m < 0 || sys3(SYS_ioctl, m, TIOCSPTLCK, &unlock) != 0 ? -1 : sys3(SYS_ioctl, m, TIOCGPTPEER, O_RDWR | O_NOCTTY);
    i64 ends[2] = {m, sl};
    if (sl < 0 || put_pair_at(ends, xbase + 2 * k, xbase + 2 * k + 1) != 0)
        fail(5, "cairn-restore: cannot make a pseudo-terminal of the tree again (/dev/ptmx)");
    i64 master = xbase + 2 * k, slave = master + 1;
    static struct cairn_img_tty t;
    const struct xrec *waiting = 0;
    for (int end = 0; end < 2; end++)
        for (int i = 0; i < nx; i++) {
            const struct xrec *r = &X[i];
            if (r->object != k || (r->x.kind == CAIRN_XFD_PTS) != end)
                continue;
            if (r->x.data_len < sizeof t ||
                sys4(SYS_pread64, M[r->member].fd, &t, sizeof t, M[r->member].xdata + r->x.data_off) != (i64)sizeof t ||
                t.pending_len > r->x.data_len - sizeof t) {
                put("cairn-restore: damaged terminal record in ");
                put(M[r->member].path);
                fail(4, "");
            }
            sys3(SYS_ioctl, end ? slave : master, TCSETS, t.termios);
            if (!end) {
                sys3(SYS_ioctl, master, TIOCSWINSZ, t.winsize);
                if (t.pending_len && !waiting)
                    waiting = r;
            }
            break;
        }
    if (waiting) {
        sys4(SYS_pread64, M[waiting->member].fd, &t, sizeof t, M[waiting->member].xdata + waiting->x.data_off);
        uint8_t cooked[64], raw[64];
        sys3(SYS_ioctl, slave, TCGETS, cooked);
        for (int i = 0; i < 64; i++)
            raw[i] = cooked[i];
        raw[CAIRN_TTY_OFLAG] &= (uint8_t)~CAIRN_TTY_OPOST;
        sys3(SYS_ioctl, slave, TCSETS, raw);
        refill_bytes(waiting, sizeof t, t.pending_len, slave, 0);
        sys3(SYS_ioctl, slave, TCSETS, cooked);
    }
    if (!o->has[0])
        sys1(SYS_close, master);
    if (!o->has[1])
        sys1(SYS_close, slave);
}

/* The slave of the tree's pseudo-terminal whose index + 1 is `ctty`, or -1. */
static i64 tty_slave(int32_t ctty)
{
    for (int k = 0; ctty > 0 && k < no; k++)
        if (O[k].kind == CAIRN_XFD_PTM && O[k].a == (u64)ctty && O[k].has[1])
            return xbase + 2 * k + 1;
    return -1;
}

/* A session leader whose controlling terminal was a pseudo-terminal of the tree makes it its
 * controlling terminal again; the leader of the terminal's foreground group makes its group
 * the foreground again (SIGTTOU blocked meanwhile, as a background group may not). */
static void terminal_again(const struct member *m)
{
    i64 slave = tty_slave(m->ctty);
    if (slave < 0)
        return;
    if (m->sid == m->pid)
        sys3(SYS_ioctl, slave, TIOCSCTTY, 0);
    if (m->tty_pgrp == m->pid && m->pgid == m->pid) {
        u64 ttou = 1ull << (SIGTTOU - 1), old = 0;
        sys4(SYS_rt_sigprocmask, 0, &ttou, &old, 8);
        int32_t g = m->pid;
        sys3(SYS_ioctl, slave, TIOCSPGRP, &g);
        sys4(SYS_rt_sigprocmask, 2, &old, 0, 8);
    }
}

/* Makes every object of the tree at its number, with its bytes in flight. */
static void make_objects(void)
{
    for (int i = 0; i < nx; i++) {
        struct cairn_img_xfd *x = &X[i].x;
        if (x->kind == CAIRN_XFD_FILE || x->kind == CAIRN_XFD_EVENT)
            continue;
        int pipe = x->kind == CAIRN_XFD_PIPE_READ || x->kind == CAIRN_XFD_PIPE_WRITE;
        int pair = x->kind == CAIRN_XFD_STREAM || x->kind == CAIRN_XFD_TCP;
        int tty = x->kind == CAIRN_XFD_PTM || x->kind == CAIRN_XFD_PTS;
        uint32_t kind = pipe ? CAIRN_XFD_PIPE_READ : tty ? CAIRN_XFD_PTM : x->kind;
        int o = find_object(kind, x->ino, pair ? x->peer : 0);
        if (o < 0) {
            o = no++;
            O[o] = (struct object){kind, x->ino, pair ? x->peer : 0, {0, 0}, 0, 0};
        }
        if (x->kind == CAIRN_XFD_STREAM && x->size > 0)
            O[o].sock_type = (uint32_t)x->size;
        X[i].object = o;
        if (pipe)
            O[o].has[x->kind == CAIRN_XFD_PIPE_WRITE] = 1;
        else if (tty)
            O[o].has[x->kind == CAIRN_XFD_PTS] = 1;
        else if (pair)
            O[o].has[x->ino != O[o].a] = 1;
        else
            O[o].has[0] = O[o].has[1] = 1;
        if (x->pipe_size > O[o].pipe_size)
            O[o].pipe_size = x->pipe_size;
    }
    /* A standard stream whose other end is not in the tree is the restart's own. */
    for (int i = 0; i < nx; i++)
        if (X[i].x.kind != CAIRN_XFD_FILE && X[i].x.kind != CAIRN_XFD_EVENT && (X[i].x.how & CAIRN_XFD_STDIO) &&
            !(X[i].x.how & CAIRN_XFD_ENDED) && !(O[X[i].object].has[0] && O[X[i].object].has[1]))
            X[i].object = -1;
    int streams = no;
    make_files();
    /* Listeners first: connections to their addresses are made through them. */
    for (int k = 0; k < streams; k++)
        for (int i = 0; i < nx && O[k].kind == CAIRN_XFD_LISTEN; i++)
            if (X[i].object == k) {
                struct cairn_img_sock s;
                sock_of(&X[i], &s);
                if (put_at(make_listener(&X[i], &s), xbase + 2 * k) < 0)
                    fail(5, "cairn-restore: cannot place a listening socket of the tree (too many open files?)");
                break;
            }
    for (int k = 0; k < streams; k++) {
        struct object *o = &O[k];
        int used = 0;
        for (int i = 0; i < nx && !used; i++)
            used = X[i].object == k;
        if (!used || o->kind == CAIRN_XFD_LISTEN)
            continue;
        if (o->kind == CAIRN_XFD_UDP) {
            make_udp(k);
            continue;
        }
        if (o->kind == CAIRN_XFD_TCP && o->has[0] && o->has[1]) {
            make_tcp(k);
            continue;
        }
        if (o->kind == CAIRN_XFD_PTM) {
            make_pty(k);
            continue;
        }
        if (o->kind == CAIRN_XFD_REMOTE) {
            /* A connection to another host's process: an unconnected socket of its family
             * holds its number until the library, running again, connects it (MEET). */
            for (int i = 0; i < nx; i++)
                if (X[i].object == k) {
                    struct cairn_img_sock s;
                    sock_of(&X[i], &s);
                    if (put_at(sys3(SYS_socket, s.family, SOCK_STREAM, 0), xbase + 2 * k) < 0)
                        fail(5, "cairn-restore: cannot hold the place of a connection to another host "
                                "(too many open files?)");
                    break;
                }
            continue;
        }
        /* A connection with one end in the tree (CAIRN_CKPT_EXTERNAL=close) is a socket pair
         * with the other end closed, as a socket pair is. */
        int e[2];
        i64 r = o->kind != CAIRN_XFD_PIPE_READ
                    ? sys4(SYS_socketpair, AF_UNIX, o->sock_type ? o->sock_type : SOCK_STREAM, 0, e)
                    : sys2(SYS_pipe2, e, 0);
        i64 ends[2] = {e[0], e[1]};
        if (r != 0 || put_pair_at(ends, xbase + 2 * k, xbase + 2 * k + 1) != 0)
            fail(5, "cairn-restore: cannot make a pipe or socket pair of the tree again (too many open files?)");
        i64 first = xbase + 2 * k, second = first + 1;
        if (o->kind == CAIRN_XFD_PIPE_READ) {
            u64 need = o->pipe_size;
            for (int i = 0; i < nx; i++)
                if (X[i].object == k && X[i].x.kind == CAIRN_XFD_PIPE_READ && X[i].x.data_len > need)
                    need = X[i].x.data_len;
            if (need > 65536)
                sys3(SYS_fcntl, second, F_SETPIPE_SZ, need);
            /* One read end's copy (every reader saved the same bytes). */
            for (int i = 0; i < nx; i++)
                if (X[i].object == k && X[i].x.kind == CAIRN_XFD_PIPE_READ && X[i].x.data_len) {
                    refill(&X[i], second, 0);
                    break;
                }
        } else {
            /* The bytes waiting at each end are sent again from the other. */
            for (int end = 0; end < 2; end++)
                for (int i = 0; i < nx; i++)
                    if (X[i].object == k && (X[i].x.ino != o->a) == end && X[i].x.data_len) {
                        if (o->kind == CAIRN_XFD_TCP) {
                            struct cairn_img_sock t;
                            sock_of(&X[i], &t);
                            refill_bytes(&X[i], sizeof t, t.recv_len, end ? first : second, 1);
                        } else if (o->sock_type == SOCK_DGRAM || o->sock_type == SOCK_SEQPACKET) {
                            refill_messages(&X[i], end ? first : second);
                        } else {
                            refill(&X[i], end ? first : second, 1);
                        }
                        break;
                    }
        }
        /* An end no process of the tree holds is closed: its peers see end-of-file or EPIPE
         * (CAIRN_CKPT_EXTERNAL=close; a checkpoint without it was refused). */
        if (!o->has[0])
            sys1(SYS_close, first);
        if (!o->has[1])
            sys1(SYS_close, second);
    }
    /* Once every UDP socket is there, the datagrams that waited at each are sent to it again,
     * each from the socket of the tree that sent it. */
    for (int k = 0; k < streams; k++)
        if (O[k].kind == CAIRN_XFD_UDP)
            refill_datagrams(k, streams);
}

/* Shared memory without a name (CAIRN_REG_OBJECT) is made once for the tree, by init: a
 * memfd per object (dev, ino) as large as its largest mapping reaches, filled with the pages
 * every process of the tree saved of it (they saved the same bytes), inherited by every
 * process, which maps it shared where it was. */
#define MAX_SHM 1024
#define SYS_memfd_create 319
#define SYS_pwrite64 18
static struct shm_object {
    u64 dev, ino, size;
} SHM[MAX_SHM];
static int nshm;

static i64 shm_fd(int j) { return xbase + 2 * no + j; }

static int find_shm(u64 dev, u64 ino)
{
    for (int j = 0; j < nshm; j++)
        if (SHM[j].dev == dev && SHM[j].ino == ino)
            return j;
    return -1;
}

/* Calls each(k, region) for every region of every member's image that has all the flags. */
static void each_region_with(uint32_t flags, void (*each)(int, struct cairn_img_region *))
{
    static struct cairn_img_region r;
    for (int k = 0; k < nmembers; k++)
        for (u64 i = 0; i < M[k].nregions; i++) {
            u64 at = M[k].regions_off + i * sizeof r;
            if (at + sizeof r > M[k].size || sys4(SYS_pread64, M[k].fd, &r, sizeof r, at) != (i64)sizeof r)
                fail(4, "cairn-restore: damaged image: its region table lies outside it");
            if ((r.flags & flags) == flags)
                each(k, &r);
        }
}

static void size_object(int k, struct cairn_img_region *r)
{
    (void)k;
    int j = find_shm(r->dev, r->ino);
    if (j < 0) {
        if (nshm >= MAX_SHM)
            fail(4, "cairn-restore: more shared memory objects in the tree than this build restores");
        j = nshm++;
        SHM[j] = (struct shm_object){r->dev, r->ino, 0};
    }
    u64 reach = r->file_offset + (r->end - r->start);
    if (reach > SHM[j].size)
        SHM[j].size = reach;
}

static void fill_object(int k, struct cairn_img_region *r)
{
    if (!(r->flags & CAIRN_REG_SAVED))
        return;
    static uint8_t page[CAIRN_IMG_PAGE];
    i64 fd = shm_fd(find_shm(r->dev, r->ino));
    u64 pages = (r->end - r->start) / CAIRN_IMG_PAGE, idx = 0;
    if (r->bitmap_off + (pages + 7) / 8 > M[k].size ||
        r->data_off + r->saved_pages * CAIRN_IMG_PAGE > M[k].size)
        fail(4, "cairn-restore: damaged image: a shared region's pages lie outside it");
    for (u64 p = 0; p < pages && idx < r->saved_pages; p++) {
        uint8_t bits = 0;
        sys4(SYS_pread64, M[k].fd, &bits, 1, r->bitmap_off + p / 8);
        if (!(bits & (1u << (p % 8))))
            continue;
        if (sys4(SYS_pread64, M[k].fd, page, sizeof page, r->data_off + idx * CAIRN_IMG_PAGE) != (i64)sizeof page ||
            sys4(SYS_pwrite64, fd, page, sizeof page, r->file_offset + p * CAIRN_IMG_PAGE) != (i64)sizeof page)
            fail(5, "cairn-restore: cannot fill a shared memory object of the tree");
        idx++;
    }
}

/* Files a process of the tree maps shared and writable, with its pages under the mapping in its
 * image: the restart writes them back, so another process's read-only mapping of the same file
 * (Open MPI's ranks map the launcher's PMIx store this way) gets its bytes from there and
 * need not find the file unchanged since the checkpoint. */
#define MAX_WRITTEN 256
static struct {
    u64 dev, ino;
} WRITTEN[MAX_WRITTEN];
static int nwritten;

static void note_written(int k, struct cairn_img_region *r)
{
    (void)k;
    if (!(r->prot & PROT_WRITE) || nwritten >= MAX_WRITTEN || written_in_tree(r))
        return;
    WRITTEN[nwritten].dev = r->dev;
    WRITTEN[nwritten].ino = r->ino;
    nwritten++;
}

static int written_in_tree(const struct cairn_img_region *r)
{
    for (int j = 0; j < nwritten; j++)
        if (WRITTEN[j].dev == r->dev && WRITTEN[j].ino == r->ino)
            return 1;
    return 0;
}

/* Files a process of the tree mapped shared and writable, with their pages in its image, that
 * are gone when the tree restarts: a program ended by a signal after the checkpoint (a batch
 * system's SIGTERM at the end of a job) removes its shared files on the way out, as Open
 * MPI's launcher removes its session directory and a PMIx server its store. The image holds
 * every byte of the file under the mapping, so init makes the file again at its path (and
 * the directories leading to it, 0700), as large as it was, before any process of the tree
 * maps it; the processes then map the new file, whose bytes they write back as for any such
 * file. The path comes from the image: it is walked one directory at a time without
 * following a symbolic link, every directory on the way must be the user's or root's (and
 * one of root's that others may write must be sticky, as /tmp is), and the file is made new
 * (O_EXCL) and the user's, or refused. */
#define MAX_MADE 256
static struct {
    u64 dev, ino;        /* as the image recorded them */
    u64 now_dev, now_ino; /* of the file made again, as fstat reports them */
} MADE[MAX_MADE];
static int nmade;

#define SYS_openat 257
#define SYS_mkdirat 258
#define O_DIRECTORY 0200000
#define O_NOFOLLOW 0400000
#define ENOENT 2
#define S_IFDIR 0040000
#define S_IFREG 0100000
#define S_ISVTX 01000

static int made_again(const struct cairn_img_region *r, const struct kstat *st)
{
    for (int j = 0; j < nmade; j++)
        if (MADE[j].dev == r->dev && MADE[j].ino == r->ino)
            return MADE[j].now_dev == st->dev && MADE[j].now_ino == st->ino;
    return 0;
}

static void make_failed(const struct cairn_img_region *r, const char *what, i64 err)
{
    put("cairn-restore: the file ");
    put(r->path);
    put(", mapped shared at the checkpoint, is gone and cannot be made again: ");
    put(what);
    if (err) {
        put(", error ");
        put_num((u64)-err, 10);
    }
    fail(5, "");
}

/* Whether directory `fd` may lead to a file of the user's: the user's, or root's and not
 * writable by others unless sticky. */
static int safe_dir(i64 fd, uint32_t uid)
{
    struct kstat st;
    if (sys2(SYS_fstat, fd, &st) != 0 || (st.mode & S_IFMT) != S_IFDIR)
        return 0;
    if (st.uid == uid)
        return 1;
    return st.uid == 0 && (!(st.mode & 022) || (st.mode & S_ISVTX));
}

static void make_again(int k, struct cairn_img_region *r)
{
    (void)k;
    if (!(r->prot & PROT_WRITE) || nmade >= MAX_MADE)
        return;
    for (int j = 0; j < nmade; j++)
        if (MADE[j].dev == r->dev && MADE[j].ino == r->ino)
            return;
    r->path[sizeof r->path - 1] = 0;
    struct kstat st;
    if (sys2(SYS_stat, r->path, &st) != -ENOENT)
        return; /* there (checked when mapped), or not ours to judge here */
    if (r->path[0] != '/')
        make_failed(r, "its path is not absolute", 0);
    uint32_t uid = (uint32_t)sys1(SYS_getuid, 0);
    i64 dir = sys3(SYS_open, "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    const char *p = r->path + 1;
    static char part[CAIRN_IMG_PATH_MAX];
    for (;;) {
        u64 n = 0;
        while (p[n] && p[n] != '/')
            n++;
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            make_failed(r, "its path has an empty, . or .. part", 0);
        for (u64 i = 0; i < n; i++)
            part[i] = p[i];
        part[n] = 0;
        if (dir < 0 || !safe_dir(dir, uid))
            make_failed(r, "a directory on its path is neither the user's nor root's (or is root's and writable by others without the sticky bit)", dir < 0 ? dir : 0);
        if (!p[n]) {
            i64 fd = sys4(SYS_openat, dir, part, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
            if (fd == -EEXIST) /* made meanwhile, by another tree's restart */
                fd = sys4(SYS_openat, dir, part, O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
            sys1(SYS_close, dir);
            if (fd < 0)
                make_failed(r, "it cannot be created", fd);
            if (sys2(SYS_fstat, fd, &st) != 0 || (st.mode & S_IFMT) != S_IFREG || st.uid != uid)
                make_failed(r, "what is at its path now is not a file of the user's", 0);
            i64 e = sys2(SYS_ftruncate, fd, r->file_size);
            sys1(SYS_close, fd);
            if (e != 0)
                make_failed(r, "it cannot be given its size", e);
            MADE[nmade].dev = r->dev;
            MADE[nmade].ino = r->ino;
            MADE[nmade].now_dev = st.dev;
            MADE[nmade].now_ino = st.ino;
            nmade++;
            return;
        }
        i64 e = sys4(SYS_mkdirat, dir, part, 0700, 0);
        if (e != 0 && e != -EEXIST)
            make_failed(r, "a directory on its path cannot be created", e);
        i64 next = sys4(SYS_openat, dir, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0);
        sys1(SYS_close, dir);
        dir = next;
        p += n + 1;
    }
}

static void make_shm_objects(void)
{
    each_region_with(CAIRN_REG_SHARED | CAIRN_REG_FILE | CAIRN_REG_SAVED, note_written);
    each_region_with(CAIRN_REG_SHARED | CAIRN_REG_FILE | CAIRN_REG_SAVED, make_again);
    each_region_with(CAIRN_REG_OBJECT, size_object);
    /* A descriptor of the file behind such mappings (CAIRN_XFD_SHM) reaches to its size. */
    for (int i = 0; i < nx; i++) {
        if (X[i].x.kind != CAIRN_XFD_SHM)
            continue;
        int j = find_shm(X[i].x.peer, X[i].x.ino);
        if (j < 0 || X[i].x.size < 0)
            fail(4, "cairn-restore: damaged image: a descriptor of shared memory without its mapping");
        if ((u64)X[i].x.size > SHM[j].size)
            SHM[j].size = (u64)X[i].x.size;
    }
    for (int j = 0; j < nshm; j++) {
        i64 fd = sys2(SYS_memfd_create, "cairn-shared", 0);
        if (fd < 0 || sys2(SYS_ftruncate, fd, SHM[j].size) != 0 || put_at(fd, shm_fd(j)) < 0)
            fail(5, "cairn-restore: cannot make a shared memory object of the tree again");
    }
    each_region_with(CAIRN_REG_OBJECT, fill_object);
}

/* The tree's System V segments and semaphore sets, made once by init from the root's image
 * (struct cairn_img_ipc) in the tree's new IPC namespace, each with its id (the namespace's
 * shm_next_id / sem_next_id), key, owner, mode and contents. A segment that had been removed
 * while attached is removed again by the root's library once every process of the tree has
 * attached it (the kernel lets a removed segment be attached until its last user leaves). */
static void ipc_failed(const struct cairn_img_ipc *c, const char *what, i64 err)
{
    put(c->kind == CAIRN_IPC_SHM ? "cairn-restore: System V shared memory segment " : "cairn-restore: System V semaphore set ");
    put_num((u64)(uint32_t)c->id, 10);
    put(": ");
    put(what);
    put(", error ");
    put_num((u64)-err, 10);
    fail(5, "");
}

/* The kernel's struct ipc64_perm at the head of shmid64_ds and semid64_ds: owner and mode,
 * as IPC_SET reads them. */
static void ipc_set(const struct cairn_img_ipc *c, int call)
{
    uint32_t ds[32];
    for (int i = 0; i < 32; i++)
        ds[i] = 0;
    ds[1] = c->uid;
    ds[2] = c->gid;
    ds[5] = c->mode & 0777;
    i64 r = call == SYS_shmctl ? sys3(SYS_shmctl, c->id, IPC_SET, (i64)ds) : sys4(SYS_semctl, c->id, 0, IPC_SET, (i64)ds);
    if (r != 0)
        ipc_failed(c, "its owner and mode cannot be given back", r);
}

/* Object c made again with its id (`next_id`: the namespace's sysctl that chooses the next
 * one), key, owner and mode, by `get` (shmget or semget). Returns its id. */
static i64 ipc_make(const struct cairn_img_ipc *c, const char *next_id, int get)
{
    char num[24];
    fmt_dec(num, (u64)(uint32_t)c->id);
    write_file(next_id, num);
    i64 id = sys3(get, c->key, (i64)c->size, IPC_CREAT | IPC_EXCL | (c->mode & 0777));
    if (id != c->id)
        ipc_failed(c, "cannot be made again with its id", id < 0 ? id : -17);
    ipc_set(c, get == SYS_shmget ? SYS_shmctl : SYS_semctl);
    return id;
}

/* Whether page p of segment c (in member m's image) was saved. */
static int ipc_page_saved(const struct member *m, const struct cairn_img_ipc *c, u64 p)
{
    uint8_t bits = 0;
    sys4(SYS_pread64, m->fd, &bits, 1, c->bitmap_off + p / 8);
    return (bits >> (p % 8)) & 1;
}

static void make_ipc(void)
{
    const struct member *m = &M[0];
    static struct cairn_img_ipc c;
    static uint16_t values[65536]; /* as many as the library saves (IPC_VALUES) */
    for (uint32_t i = 0; i < m->nipc; i++) {
        u64 at = m->ipc_off + i * sizeof c;
        if (at + sizeof c > m->size || sys4(SYS_pread64, m->fd, &c, sizeof c, at) != (i64)sizeof c)
            fail(4, "cairn-restore: damaged image: its System V table lies outside it");
        if (c.kind == CAIRN_IPC_SHM) {
            u64 pages = (c.size + CAIRN_IMG_PAGE - 1) / CAIRN_IMG_PAGE;
            if (c.bitmap_off + (pages + 7) / 8 > m->size || c.data_off + c.saved_pages * CAIRN_IMG_PAGE > m->size)
                fail(4, "cairn-restore: damaged image: a System V segment's pages lie outside it");
            i64 id = ipc_make(&c, "/proc/sys/kernel/shm_next_id", SYS_shmget);
            i64 addr = sys3(SYS_shmat, id, 0, 0);
            if (addr < 0 && addr > -4096)
                ipc_failed(&c, "cannot be attached to fill it", addr);
            /* A page run at a time (image.h), each checked against its checksum once read. */
            u64 idx = 0, k = 0;
            for (u64 p = 0; p < pages;) {
                if (!ipc_page_saved(m, &c, p)) {
                    p++;
                    continue;
                }
                u64 q = p + 1;
                while (q < pages && q % CAIRN_IMG_RUN_GROUP && ipc_page_saved(m, &c, q))
                    q++;
                u64 len = (q - p) * CAIRN_IMG_PAGE, sum = 0;
                if (idx + (q - p) > c.saved_pages)
                    fail(4, "cairn-restore: damaged image: a System V segment has more pages marked than saved");
                if (sys4(SYS_pread64, m->fd, addr + (i64)(p * CAIRN_IMG_PAGE), len,
                         c.data_off + idx * CAIRN_IMG_PAGE) != (i64)len ||
                    c.sums_off + (k + 1) * 8 > m->size ||
                    sys4(SYS_pread64, m->fd, &sum, 8, c.sums_off + k * 8) != 8)
                    fail(4, "cairn-restore: damaged image: a System V segment's page cannot be read");
                if (XXH3_64bits((const void *)(addr + (i64)(p * CAIRN_IMG_PAGE)), len) != sum) {
                    put("cairn-restore: damaged image: System V shared memory segment ");
                    put_num((u64)(uint32_t)c.id, 10);
                    fail(4, ": its saved pages fail their checksum");
                }
                idx += q - p;
                k++;
                p = q;
            }
            sys1(SYS_shmdt, addr);
        } else if (c.kind == CAIRN_IPC_SEM) {
            if (c.size > sizeof values / sizeof values[0] || c.data_off + c.size * 2 > m->size ||
                sys4(SYS_pread64, m->fd, values, c.size * 2, c.data_off) != (i64)(c.size * 2))
                fail(4, "cairn-restore: damaged image: a System V semaphore set's values lie outside it");
            i64 id = ipc_make(&c, "/proc/sys/kernel/sem_next_id", SYS_semget);
            i64 r = sys4(SYS_semctl, id, 0, SETALL, (i64)values);
            if (r != 0)
                ipc_failed(&c, "its values cannot be given back", r);
        } else {
            fail(4, "cairn-restore: damaged image: an unknown kind of System V object");
        }
    }
}

/* In a restored process, before its threads run: its pipes and sockets at their numbers, and
 * none of the others. */
static void place_objects(int me)
{
    /* Copies of standard streams that led outside the tree: copies of the restart's own, which
     * the process still has at 0 to 2 (inherited from init) until its objects are placed. */
    for (int i = 0; i < nx; i++) {
        const struct xrec *r = &X[i];
        if (r->member == me && r->object < 0 && (r->x.how & CAIRN_XFD_STDIO) && r->x.fd > 2 && r->x.offset >= 0 &&
            r->x.offset <= 2)
            sys3(SYS_dup3, r->x.offset, r->x.fd, r->x.cloexec ? O_CLOEXEC : 0);
    }
    for (int i = 0; i < nx; i++) {
        struct xrec *r = &X[i];
        if (r->member != me || r->object < 0)
            continue;
        if (sys3(SYS_dup3, object_fd(r), r->x.fd, r->x.cloexec ? O_CLOEXEC : 0) < 0) {
            put("cairn-restore: cannot put a pipe or socket back at fd ");
            put_num((u64)r->x.fd, 10);
            fail(5, "");
        }
        if (r->x.kind != CAIRN_XFD_FILE)
            sys3(SYS_fcntl, r->x.fd, F_SETFL, r->x.flags & O_NONBLOCK);
    }
    /* Descriptors of the files behind shared mappings: the tree's objects for them (one open
     * file description for all their holders). */
    for (int i = 0; i < nx; i++) {
        const struct xrec *r = &X[i];
        if (r->member != me || r->x.kind != CAIRN_XFD_SHM)
            continue;
        int j = find_shm(r->x.peer, r->x.ino);
        if (j < 0 || sys3(SYS_dup3, shm_fd(j), r->x.fd, r->x.cloexec ? O_CLOEXEC : 0) < 0) {
            put("cairn-restore: cannot put a shared memory object back at fd ");
            put_num((u64)r->x.fd, 10);
            fail(5, "");
        }
        if (r->x.offset > 0)
            sys3(SYS_lseek, r->x.fd, r->x.offset, 0);
    }
    if (no || nshm)
        sys3(SYS_close_range, xbase, ~0u, 0);
}

/* Reads the ids of every image of the tree from its header. */
static void read_members(void)
{
    for (int k = 0; k < nmembers; k++) {
        struct cairn_img_header h;
        i64 fd = sys3(SYS_open, M[k].path, O_RDONLY | O_CLOEXEC, 0);
        const char magic[8] = CAIRN_IMG_MAGIC;
        int ok = fd >= 0 && sys4(SYS_pread64, fd, &h, sizeof h, 0) == (i64)sizeof h;
        for (int i = 0; ok && i < 8; i++)
            ok = h.magic[i] == magic[i];
        M[k].fd = (int)fd;
        if (!ok || h.version != CAIRN_IMG_VERSION || h.header_size != sizeof h || h.pid <= 1) {
            put("cairn-restore: not a process image of this build: ");
            put(M[k].path);
            fail(4, "");
        }
        struct kstat kst;
        if (sys2(SYS_fstat, fd, &kst) != 0 || (u64)kst.size != h.file_size || !meta_ok((int)fd, &h, h.file_size)) {
            put("cairn-restore: damaged image: its header and tables fail their checksum: ");
            put(M[k].path);
            fail(4, "");
        }
        if (!(h.ids & CAIRN_IDS_NAMESPACE)) {
            put("cairn-restore: ");
            put(M[k].path);
            fail(4, " is not of a process in a pid namespace of Cairn's: restore it without --init");
        }
        M[k].pid = h.pid;
        M[k].ppid = h.ppid;
        M[k].pgid = h.pgid;
        M[k].sid = h.sid;
        M[k].ctty = h.ctty;
        M[k].tty_pgrp = h.tty_pgrp;
        M[k].regions_off = h.regions_off;
        M[k].nregions = h.nregions;
        M[k].size = h.file_size;
        M[k].nipc = k == 0 ? h.nipc : 0;
        M[k].ipc_off = h.ipc_off;
        M[k].nzombies = h.nzombies < CAIRN_IMG_ZOMBIES ? h.nzombies : CAIRN_IMG_ZOMBIES;
        for (uint32_t z = 0; z < M[k].nzombies; z++) {
            M[k].zombies[z][0] = h.zombies[z][0];
            M[k].zombies[z][1] = h.zombies[z][1];
        }
        read_xfds(k, &h);
    }
}

/* The pid of member k's parent in the tree: its own parent if that is a member, else init. */
static int32_t parent_of(int k)
{
    for (int j = 0; j < nmembers; j++)
        if (j != k && M[j].pid == M[k].ppid)
            return M[k].ppid;
    return 1;
}

/* The children `m` had that had ended and were not waited for: each made again with its pid
 * and ended at once with its status, for m to collect. */
static void spawn_zombies(const struct member *m)
{
    for (uint32_t z = 0; z < m->nzombies; z++) {
        int32_t pid = m->zombies[z][0], st = m->zombies[z][1];
        i64 c = fork_with_pid(pid);
        if (c < 0) {
            put("cairn-restore: cannot make the ended child ");
            put_num((u64)pid, 10);
            put(" of process ");
            put_num((u64)m->pid, 10);
            put(" again; its parent will not find its exit status");
            flush_msg();
        }
        if (c != 0)
            continue;
        in_tree = 0;
        if ((st & 0x7f) == 0)
            sys1(SYS_exit_group, (st >> 8) & 0xff);
        u64 none = 0;
        sys4(SYS_rt_sigprocmask, 2, &none, 0, 8);
        sys2(SYS_kill, sys1(SYS_getpid, 0), st & 0x7f);
        sys1(SYS_exit_group, 128 + (st & 0x7f));
    }
}

/* Makes, with their pids, the members whose parent is `parent` and, in each, its own
 * children. Returns -1 in `parent`, and in every process made the index of the member it
 * is to become. */
static int spawn_tree(int32_t parent)
{
    for (int k = 0; k < nmembers; k++) {
        if (parent_of(k) != parent)
            continue;
        i64 c = fork_with_pid(M[k].pid);
        if (c < 0) {
            put("cairn-restore: cannot make process ");
            put_num((u64)M[k].pid, 10);
            put(" of the tree with its pid: error ");
            put_num((u64)-c, 10);
            fail(5, "");
        }
        if (c == 0) {
            /* A session or group it leads is made before its children are, so they
             * inherit it as they did. */
            if (M[k].sid == M[k].pid)
                sys1(SYS_setsid, 0);
            else if (M[k].pgid == M[k].pid)
                sys2(SYS_setpgid, 0, 0);
            terminal_again(&M[k]);
            int sub = spawn_tree(M[k].pid);
            if (sub >= 0)
                return sub;
            spawn_zombies(&M[k]);
            return k;
        }
    }
    return -1;
}

/* Joins the process group the member was in, once its leader exists (a sibling may lead it,
 * made after this one). */
static void join_group(const struct member *m)
{
    if (m->pgid <= 1 || m->pgid == m->pid || m->sid == m->pid)
        return;
    for (int tries = 0; tries < 2000; tries++) {
        if (sys2(SYS_setpgid, 0, m->pgid) == 0)
            return;
        sleep_ms(1);
    }
}

/* --init: this process stays outside, relaying signals to the namespace's init and exiting
 * with its status; the init (pid 1) starts the program (--exec) or makes the restored tree,
 * relays signals to the tree's root and exits when it does, which ends every process left
 * in the namespace. Returns, in a process of a restored tree, the member it is to become. */
static int init_main(char **envp)
{
    i64 r = make_namespace();
    if (r < 0) {
        if (!exec_argv) {
            put("cairn-restore: cannot make a pid namespace (error ");
            put_num((u64)-r, 10);
            fail(6, "): the processes' ids cannot be given back");
        }
        /* The program runs without one: its children's ids could not come back, and the
         * checkpoint library refuses checkpoints of a process with children. */
        u64 none = 0;
        sys4(SYS_rt_sigprocmask, 2, &none, 0, 8);
        r = sys3(SYS_execve, exec_argv[0], exec_argv + 1, envp);
        put("cairn-restore: cannot run ");
        put(exec_argv[0]);
        fail(127, "");
    }
    i64 init = fork_with_pid(0);
    if (init < 0)
        fail(5, "cairn-restore: cannot start the namespace's init");
    if (init > 0)
        sys1(SYS_exit_group, relay_until_exit(init, init, 0));
    /* pid 1 of the namespace: its end ends every process in it, and it ends with the
     * process outside. */
    sys2(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL);
    in_tree = 1;
    mount_own_proc();
    i64 root;
    if (exec_argv) {
        if (first_pid > 1 && first_pid < pid_max)
            set_last_pid(first_pid - 1);
        root = fork_with_pid(0);
        if (root == 0) {
            u64 none = 0;
            sys4(SYS_rt_sigprocmask, 2, &none, 0, 8);
            sys3(SYS_execve, exec_argv[0], exec_argv + 1, envp);
            put("cairn-restore: cannot run ");
            put(exec_argv[0]);
            in_tree = 0;
            fail(127, "");
        }
        if (root < 0)
            fail(5, "cairn-restore: cannot start the program");
    } else {
        want_ids = 1;
        read_members();
        i64 last = 1;
        for (int k = 0; k < nmembers; k++)
            last = M[k].pid > last ? M[k].pid : last;
        set_last_pid(last);
        /* The tree's objects go above every descriptor its processes had, and above the
         * images init holds open. */
        for (int k = 0; k < nmembers; k++)
            if (M[k].fd + 1 > xbase)
                xbase = M[k].fd + 1;
        make_objects();
        make_shm_objects();
        make_ipc();
        if (nmembers > 1 &&
            sys6(SYS_mmap, CAIRN_IMG_HOLE_START + CAIRN_IMG_BARRIER_OFF, CAIRN_IMG_PAGE, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) != (i64)(CAIRN_IMG_HOLE_START + CAIRN_IMG_BARRIER_OFF))
            fail(5, "cairn-restore: cannot map the tree's restore barrier");
        int me = spawn_tree(1);
        if (me >= 0)
            return me;
        /* init holds none of them: a reader must see end-of-file when the writers close. */
        for (int k = 0; k < nmembers; k++)
            sys1(SYS_close, M[k].fd);
        if (no || nshm)
            sys3(SYS_close_range, xbase, ~0u, 0);
        root = M[0].pid;
    }
    sys1(SYS_exit_group, relay_until_exit(root, root, 1));
    return -1;
}

/* ---- main ---------------------------------------------------------------------------- */

__attribute__((noreturn, used)) void restorer_main(u64 *sp)
{
    i64 started = monotonic_ns();
    int argc = (int)sp[0];
    char **argv = (char **)(sp + 1);
    char **envp = argv + argc + 1;
    /* Nothing may interrupt the rebuild; each thread gets its own mask back when it
     * returns from the checkpoint signal handler. */
    u64 all = ~0ull;
    sys4(SYS_rt_sigprocmask, 2 /* SIG_SETMASK */, &all, 0, 8);
    parse_args(argc, argv);
    if (exec_argv && !init_mode)
        usage();
    if (!token[0]) {
        /* Better than --token, which ps shows: CAIRN_COORD_TOKEN in the environment. */
        for (char **e = envp; *e; e++)
            if (sprefix(*e, "CAIRN_COORD_TOKEN="))
                scopy(token, *e + 18, sizeof token);
    }
    for (char **e = envp; *e; e++)
        if (sprefix(*e, "CAIRN_CKPT_MOVED=")) {
            const char *v = *e + 17;
            size_t n = 0;
            while (v[n])
                n++;
            if (n >= sizeof moved)
                fail(2, "cairn-restore: CAIRN_CKPT_MOVED is longer than the image's room for it");
            scopy(moved, v, sizeof moved);
        }
    if (!seq(aff, "on") && !seq(aff, "off"))
        fail(2, "cairn-restore: --affinity takes on or off");
    /* The restored process gets its standard streams from whoever started the restorer and
     * its files from the image, nothing else: descriptors inherited beyond those would
     * take the numbers its files come back at, or make its next checkpoint fail. */
    if (sys3(SYS_close_range, 3, ~0u, 0) != 0)
        for (int fd = 3; fd < 4096; fd++)
            sys1(SYS_close, fd);
    {
        char buf[32];
        i64 fd = sys3(SYS_open, "/proc/sys/kernel/pid_max", O_RDONLY | O_CLOEXEC, 0);
        if (fd >= 0) {
            i64 n = sys3(SYS_read, fd, buf, sizeof buf - 1);
            sys1(SYS_close, fd);
            buf[n > 0 ? n : 0] = 0;
            if (parse_int(buf) > 1024)
                pid_max = parse_int(buf);
        }
    }
    int me = 0;
    if (init_mode)
        me = init_main(envp);
    join_group(&M[me]);
    const char *path = M[me].path;
    if (init_mode) {
        for (int k = 0; k < nmembers; k++)
            if (k != me)
                sys1(SYS_close, M[k].fd);
        img = M[me].fd;
    } else {
        img = (int)sys3(SYS_open, path, O_RDONLY | O_CLOEXEC, 0);
    }
    if (img < 0) {
        put("cairn-restore: cannot open the image ");
        put(path);
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
    if (!meta_ok(img, &H, image_size))
        fail(4, "cairn-restore: damaged image: its header and tables fail their checksum");
    if (H.hole_start != CAIRN_IMG_HOLE_START || H.hole_len != CAIRN_IMG_HOLE_LEN)
        fail(4, "cairn-restore: the image reserves another restore area than this build");
    check_machine();
    check_image();

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
    give_back_layout();
    if (init_mode)
        place_objects(me);

    struct cairn_img_control *c = (struct cairn_img_control *)H.control_addr;
    if (c->magic != CAIRN_CONTROL_MAGIC)
        fail(4, "cairn-restore: damaged image: the library's control block is not where recorded");
    c->restarted = 1;
    c->new_pid = (int32_t)sys1(SYS_getpid, 0);
    c->main_tid = c->new_pid;
    scopy(c->coord_addr, coord, sizeof c->coord_addr);
    scopy(c->token, token, sizeof c->token);
    scopy(c->moved, moved, sizeof c->moved);
    c->proc = proc[0] ? (int32_t)parse_int(proc) : c->proc;
    c->affinity = !seq(aff, "off");
    scopy(c->cpus, cpus, sizeof c->cpus);
    c->restore_start_ns = started;
    c->tree = init_mode ? nmembers : 0;
    start_threads();
    for (;;) {
    }
}

/* The kernel's record of the program's memory (struct prctl_mm_map). */
struct mm_map {
    u64 start_code, end_code, start_data, end_data, start_brk, brk, start_stack, arg_start, arg_end, env_start,
        env_end, auxv;
    uint32_t auxv_size, exe_fd;
};

#define PR_SET_MM 35
#define PR_SET_MM_MAP 14

/* The program break and the layout the kernel had for the process (PR_SET_MM_MAP), now that
 * its memory is back: otherwise the break is the restorer's, below the restored heap, and
 * glibc's malloc, growing its heap there, would take the restored heap's chunks for foreign
 * ones and abort. Where the kernel refuses, a page no one may use at the restorer's break
 * makes every sbrk fail, and malloc grows its heap with mmap instead. */
static void give_back_layout(void)
{
    if (H.brk_start && H.brk_end && H.mm_code[1]) {
        struct mm_map m = {
            .start_code = H.mm_code[0],
            .end_code = H.mm_code[1],
            .start_data = H.mm_data[0],
            .end_data = H.mm_data[1],
            .start_brk = H.brk_start,
            .brk = H.brk_end,
            .start_stack = H.mm_args[0], /* on the stack, below nothing the program uses */
            .arg_start = H.mm_args[0],
            .arg_end = H.mm_args[1],
            .env_start = H.mm_env[0],
            .env_end = H.mm_env[1],
            .exe_fd = 0xffffffffu, /* the executable link stays */
        };
        if (sys5(SYS_prctl, PR_SET_MM, PR_SET_MM_MAP, (i64)&m, sizeof m, 0) == 0)
            return;
    }
    u64 brk = (u64)sys1(SYS_brk, 0);
    sys6(SYS_mmap, (i64)((brk + 4095) & ~4095ull), 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
         -1, 0);
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
