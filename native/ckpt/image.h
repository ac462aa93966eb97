/*
** image.h: the layout of a Cairn process image, shared by the checkpoint library
** (libcairn-ckpt.so, which writes it) and the restorer (cairn-restore, which reads it).
**
** An image file, every part aligned to 4096 bytes:
**
**     struct cairn_img_header      identity (kernel, CPU), process-wide facts, offsets
**     struct cairn_img_region [n]  one per mapping, in address order
**     struct cairn_img_thread [n]  one per thread
**     page bitmaps                 per saved region, one bit per page: saved or not
**     page data                    per saved region, its saved pages in address order
**     run checksums                one per page run (below), region by region, then segment
**                                  by segment
**
** Checksums (format version 3 and up): XXH3-64 (xxhash.h, seed 0), which finds damage and
** does not authenticate. The header's meta_sum covers [0, data_start) (the header with
** meta_sum zero, every table and bitmap); each page run (the saved pages of a region, or from
** format 4 of a System V segment, that are consecutive and within one aligned group of
** CAIRN_IMG_RUN_GROUP pages of it, so at most 256 KiB) has its own, of exactly the bytes
** written. The restorer checks the first before it uses anything and each run as it reads
** it, before any thread of the process runs: a damaged image is refused (exit 4), never
** restored.
**
** The split of work is what makes the restorer small: it rebuilds the address space (every
** region at its address, saved pages filled in), moves the vdso/vvar back, and starts each
** thread at the context it saved (struct cairn_img_jump) with its FS base. Everything else
** (signal handlers, file descriptors, rseq, robust lists, affinity, names) is restored by
** the library itself, from its own memory, once the threads run again inside the
** checkpoint signal handler they were stopped in; returning from it (rt_sigreturn) restores
** each thread's full register and signal state from the frame on its restored stack.
**
** The header says nothing in the file is trusted as a path to write to: region paths are
** only opened read-only to map files by reference, after their device, inode, size and
** modification time match what was recorded.
*/
#ifndef CAIRN_IMAGE_H
#define CAIRN_IMAGE_H

#include <stdint.h>

#define CAIRN_IMG_MAGIC "CAIRNIM1"
#define CAIRN_IMG_VERSION 4u
#define CAIRN_IMG_PAGE 4096u
#define CAIRN_IMG_PATH_MAX 512
#define CAIRN_IMG_RUN_GROUP 64u /* pages: a page run never crosses a multiple of it */

/* The end of the page run that starts at saved page p of a bitmap of `pages` pages (one bit
 * per page, set: saved): the first page after p that is not saved, is past the end, or
 * starts a group. Page numbers count from a multiple of CAIRN_IMG_RUN_GROUP. */
static inline uint64_t cairn_img_run_end(const uint8_t *bm, uint64_t p, uint64_t pages)
{
    uint64_t q = p + 1;
    while (q < pages && (bm[q / 8] & (1u << (q % 8))) && q % CAIRN_IMG_RUN_GROUP)
        q++;
    return q;
}

/* Where the restorer runs: a hole reserved (PROT_NONE) in every launched process at this
 * fixed address, so no region of an image ever lies there, and the restorer, linked at
 * this address, never collides with what it restores. */
#define CAIRN_IMG_HOLE_START 0x3f0000000000ull
#define CAIRN_IMG_HOLE_LEN (64ull << 20)
/* A page of the hole shared by the processes of a tree being restored: each counts itself
 * there once its descriptors are back (files cut back to their size at the checkpoint), and
 * none goes on before all have, so no process writes a file another then cuts. */
#define CAIRN_IMG_BARRIER_OFF (31ull << 20)

/* header.ids: the process ran in a pid namespace of Cairn's (cairn-restore --init), so a
 * restart makes it again in a new one with the same pid and thread ids. */
#define CAIRN_IDS_NAMESPACE 1u

#define CAIRN_IMG_ZOMBIES 16

/* Region flags. */
#define CAIRN_REG_SHARED 0x1u   /* MAP_SHARED (else private) */
#define CAIRN_REG_FILE 0x2u     /* backed by a file (path, dev, ino, offset valid) */
#define CAIRN_REG_SAVED 0x4u    /* pages in the image (with SHARED|FILE: written to the file at restart) */
#define CAIRN_REG_STACK 0x8u    /* [stack] (grows down) */
#define CAIRN_REG_HEAP 0x10u    /* [heap] */
#define CAIRN_REG_SPECIAL 0x20u /* [vdso], [vvar], [vvar_vclock]: moved, not mapped */
#define CAIRN_REG_NUMA 0x40u    /* node is the NUMA node of its pages */
#define CAIRN_REG_OBJECT 0x80u  /* shared memory without a name (MAP_SHARED|MAP_ANONYMOUS, a
                                 * deleted file, a memfd) of a process in a tree: the object
                                 * (dev, ino) is made once per tree from the pages its processes
                                 * saved, and mapped shared by each again */
#define CAIRN_REG_SYSV 0x100u   /* a System V shared memory segment attached whole (shmat) by a
                                 * process in a tree: `ino` is its id; the tree's root saved the
                                 * segment (struct cairn_img_ipc), the restart makes it again
                                 * with that id and attaches it here; no pages in this image */

/* Special region kinds (in `special`). */
#define CAIRN_SPECIAL_VDSO 1u
#define CAIRN_SPECIAL_VVAR 2u
#define CAIRN_SPECIAL_VVAR_VCLOCK 3u

struct cairn_img_region {
    uint64_t start, end;     /* [start, end), page aligned */
    uint32_t prot;           /* PROT_* */
    uint32_t flags;          /* CAIRN_REG_* */
    uint32_t special;        /* CAIRN_SPECIAL_*, or 0 */
    int32_t node;            /* NUMA node to place the pages on (CAIRN_REG_NUMA), or -1 */
    uint64_t file_offset;
    uint64_t dev, ino;       /* of the file, as /proc/self/maps reports them */
    uint64_t file_size;      /* st_size and st_mtime at checkpoint, checked at restart */
    int64_t file_mtime_ns;
    uint64_t bitmap_off;     /* byte offset of its page bitmap in the image (CAIRN_REG_SAVED) */
    uint64_t data_off;       /* byte offset of its first saved page */
    uint64_t saved_pages;    /* pages with their bit set */
    uint64_t sums_off;       /* byte offset of its first page run's checksum (CAIRN_REG_SAVED) */
    char path[CAIRN_IMG_PATH_MAX];
};

/* What a stopped thread resumes into: callee-saved registers, stack and instruction pointer
 * of the point where it called cairn_ctx_save(), which then returns 1. */
struct cairn_img_jump {
    uint64_t rbx, rbp, r12, r13, r14, r15, rsp, rip;
};

#define CAIRN_THR_MAIN 0x1u      /* the thread whose tid was the pid */

struct cairn_img_thread {
    int32_t tid;             /* at checkpoint */
    uint32_t flags;          /* CAIRN_THR_* */
    uint64_t fs_base;
    uint64_t tid_addr;       /* glibc's tid field of the thread (struct pthread), for
                              * CLONE_CHILD_SETTID / CLEARTID and set_tid_address */
    uint64_t jump_addr;      /* address (in restored memory) of its struct cairn_img_jump */
};

struct cairn_img_header {
    char magic[8];           /* CAIRN_IMG_MAGIC */
    uint32_t version;        /* CAIRN_IMG_VERSION */
    uint32_t header_size;    /* sizeof(struct cairn_img_header) */
    uint64_t file_size;      /* bytes of the whole image, checked at restart */
    uint32_t nregions, nthreads;
    uint64_t regions_off, threads_off;
    /* Identity: restart refuses another kernel build (the vdso must be identical) or a CPU
     * lacking a feature this one had (glibc chose its ifuncs and XSAVE layout here). */
    char kernel_release[65];
    char kernel_version[65];
    uint8_t pad0[6];
    uint32_t cpuid1_ecx, cpuid1_edx, cpuid7_ebx, cpuid7_ecx, cpuid7_edx, pad1;
    uint64_t xcr0;
    /* The process. */
    int32_t pid;
    uint32_t nfds_hint;      /* informational: descriptors the library saved itself */
    uint64_t hole_start, hole_len;
    uint64_t control_addr;   /* the library's struct cairn_img_control in restored memory */
    uint64_t brk_start, brk_end; /* the program break: where it started, where it was */
    uint64_t checkpoint;     /* the checkpoint number */
    int64_t time_ns;         /* CLOCK_REALTIME when written */
    /* Ids at the checkpoint, as the process saw them (in its pid namespace). */
    int32_t ppid, pgid, sid;
    uint32_t ids;            /* CAIRN_IDS_*: whether a restart can give the same ids back */
    /* Pipes and Unix stream sockets a process of a tree may share with others of it,
     * made again once per tree by the restorer (struct cairn_img_xfd, then their bytes in
     * flight). */
    uint32_t nxfds;
    int32_t max_fd;          /* the highest descriptor number the process had open */
    uint64_t xfds_off;       /* the table; data_off values count from its end */
    uint64_t xdata_len;
    /* Children that had ended and were not waited for yet: made again at restart with their
     * pid, ending with their status (as waitpid reports it), for the process to collect. */
    uint32_t nzombies;
    int32_t zombies[CAIRN_IMG_ZOMBIES][2];
    /* The controlling terminal, if it is a pseudo-terminal of the tree: its index + 1 (0:
     * none, or another terminal), and its foreground process group. */
    int32_t ctty, tty_pgrp;
    /* The System V shared memory segments and semaphore sets of the tree's IPC namespace,
     * saved by the tree's root process (its own namespace, made with the pid namespace):
     * struct cairn_img_ipc [nipc] at ipc_off, then semaphore values; segment pages after
     * the regions' pages. */
    uint32_t nipc;
    uint64_t ipc_off;
    /* The kernel's record of the program's memory (from /proc/self/stat), given back with
     * brk_start and brk_end (PR_SET_MM_MAP): where its text, data, arguments and environment
     * are. All 0: not recorded. */
    uint64_t mm_code[2], mm_data[2], mm_args[2], mm_env[2];
    /* Checksums: meta_sum of [0, data_start) with this field zero; the runs' checksums,
     * nsums of them, at sums_off (the end of the file). */
    uint64_t data_start;
    uint64_t meta_sum;
    uint64_t sums_off, nsums;
};

#define CAIRN_IPC_SHM 1u
#define CAIRN_IPC_SEM 2u
#define CAIRN_IPC_MAX 256

struct cairn_img_ipc {
    uint32_t kind;           /* CAIRN_IPC_* */
    int32_t id;              /* shmid or semid in the namespace, given back at restart */
    int32_t key;             /* IPC_PRIVATE (0) for a private or removed object */
    uint32_t mode;           /* permission bits, and for a segment SHM_DEST if it was removed
                              * while still attached */
    uint32_t uid, gid;       /* owner */
    uint64_t size;           /* a segment's bytes, a set's semaphores */
    uint64_t bitmap_off;     /* a segment: its page bitmap (pages saved: those not all zero) */
    uint64_t data_off;       /* a segment: its first saved page; a set: its values (uint16_t
                              * each), after the table */
    uint64_t saved_pages;
    uint64_t sums_off;       /* a segment: byte offset of its first page run's checksum */
};

/* A pipe end, a connected Unix stream or TCP socket, a listening socket or a file of a process
 * in a pid namespace of Cairn's: the tree's restorer makes each once, before the processes are made,
 * so that every process that held it holds it again (one open file description), with the
 * bytes that were in flight in it. */
#define CAIRN_XFD_PIPE_READ 1u
#define CAIRN_XFD_PIPE_WRITE 2u
#define CAIRN_XFD_STREAM 3u
#define CAIRN_XFD_FILE 4u      /* a regular file: its path is its data; `peer` links it to the
                                * descriptor of the tree's process with the smallest pid that
                                * shares its open file description */
#define CAIRN_XFD_TCP 5u       /* a connected TCP socket (IPv4 or IPv6): its data is a struct
                                * cairn_img_sock, then the bytes waiting to be read at it, then
                                * the bytes it sent that its peer had not received yet */
#define CAIRN_XFD_LISTEN 6u    /* a listening socket (Unix with a name, IPv4, IPv6): its data is
                                * a struct cairn_img_sock */
#define CAIRN_XFD_PTM 7u       /* a pseudo-terminal's master; `ino` is its index + 1; its data a
                                * struct cairn_img_tty, then the bytes waiting to be read at it */
#define CAIRN_XFD_PTS 8u       /* a pseudo-terminal's slave (/dev/pts/N): `ino` as the master's;
                                * its data a struct cairn_img_tty */
#define CAIRN_XFD_EVENT 9u     /* an eventfd: `offset` its count, `size` 1 for EFD_SEMAPHORE;
                                * `peer` links it to another process's descriptor it shares, as for
                                * a file */
#define CAIRN_XFD_UDP 10u      /* a UDP socket (IPv4 or IPv6), or an unconnected Unix datagram
                                * socket, unnamed or with an abstract name: `size` 1 if it is
                                * connected (UDP only), `peer`
                                * then the inode of the socket that receives what it sends; its
                                * data a struct cairn_img_sock, then (recv_len bytes) the
                                * datagrams waiting at it, each a struct cairn_img_datagram and
                                * its bytes */
#define CAIRN_XFD_REMOTE 11u   /* a connected TCP socket whose other end is not on this machine
                                * (another host's, in another tree of the job: the root checks
                                * that some process of the job holds it): its data as for
                                * CAIRN_XFD_TCP. The restorer puts an unconnected socket at its
                                * number; the library connects the two ends again through the
                                * coordinators (MEET) once the process runs again */
#define CAIRN_XFD_SHM 12u      /* a file without a name that the process maps shared: `ino` and
                                * `peer` the inode and device of the mappings (the regions'
                                * `dev`), `size` the file's size, `offset` its offset; it comes
                                * back as the tree's shared memory object for them */

#define CAIRN_XFD_CLOSE_UNMATCHED 0x1u /* CAIRN_CKPT_EXTERNAL=close: if its other end is not in
                                        * the tree, it comes back with that end closed */
#define CAIRN_XFD_STDIO 0x2u           /* fd 0-2, or a copy of one (which, in `offset`): if its
                                        * other end is not in the tree, the restart's own
                                        * stream takes its place */
#define CAIRN_XFD_ENDED 0x4u           /* a pipe end whose other end no process held at the
                                        * checkpoint: it comes back with that end closed (and
                                        * its bytes waiting), a standard stream too */

struct cairn_img_xfd {
    int32_t fd;
    uint32_t kind;           /* CAIRN_XFD_* */
    uint64_t ino;            /* the pipe's or the socket's inode */
    uint64_t peer;           /* a socket's peer's inode; for a file or eventfd shared with
                              * another process, (its pid << 32) | (its fd + 1) */
    uint32_t flags;          /* F_GETFL */
    uint32_t cloexec;
    uint32_t pipe_size;      /* F_GETPIPE_SZ */
    uint32_t how;            /* CAIRN_XFD_CLOSE_UNMATCHED | CAIRN_XFD_STDIO | CAIRN_XFD_ENDED */
    uint64_t data_off;       /* bytes in flight, after the table: in the pipe (read end), or */
    uint64_t data_len;       /* waiting to be read at this socket; a file's path */
    int64_t offset, size;    /* a file's offset and size at the checkpoint */
};

/* The data of a CAIRN_XFD_TCP or CAIRN_XFD_LISTEN record: what a restart needs to make the
 * socket again. Addresses are the kernel's struct sockaddr bytes. */
#define CAIRN_SOCK_NODELAY 0x1u
#define CAIRN_SOCK_KEEPALIVE 0x2u
#define CAIRN_SOCK_REUSEADDR 0x4u
#define CAIRN_SOCK_REUSEPORT 0x8u
#define CAIRN_SOCK_V6ONLY 0x10u

struct cairn_img_sock {
    uint32_t family, type, protocol;
    uint32_t opts;           /* CAIRN_SOCK_* */
    uint32_t local_len, peer_len;
    uint8_t local[112];      /* getsockname */
    uint8_t peer[112];       /* getpeername (TCP) */
    uint64_t recv_len;       /* bytes waiting to be read at this end, after the struct */
    uint64_t send_len;       /* bytes this end sent that its peer had not received, after those */
};

/* A datagram waiting at a UDP socket, as recorded after its struct cairn_img_sock. */
struct cairn_img_datagram {
    uint32_t len;            /* its bytes, which follow */
    uint32_t from_len;
    uint8_t from[28];        /* the sender's address (struct sockaddr_in or sockaddr_in6, or a
                              * Unix socket's abstract name; a longer one is refused) */
};

/* The data of a pseudo-terminal record: its settings, as the kernel's TCGETS and TIOCGWINSZ
 * give them. */
#define CAIRN_TTY_OFLAG 4   /* the low byte of c_oflag in the kernel's struct termios */
#define CAIRN_TTY_OPOST 0x1 /* in it: output processing, turned off to put waiting bytes back */

struct cairn_img_tty {
    uint8_t termios[64];     /* struct termios of the kernel (36 bytes on x86-64) */
    uint16_t winsize[4];
    uint64_t pending_len;    /* master: bytes the slave's side wrote, not read yet, after it */
};

#define CAIRN_MOVED_MAX 131072 /* the longest environment string Linux passes */

/* Filled in by the restorer before it starts the threads; read by the library when it
 * resumes. Lives in the library's memory, at header.control_addr. */
struct cairn_img_control {
    uint64_t magic;          /* CAIRN_CONTROL_MAGIC */
    int32_t restarted;       /* set to 1 by the restorer */
    int32_t new_pid;
    char coord_addr[128];    /* "host:port" of the coordinator to connect to after restart */
    char token[80];
    int32_t proc;            /* process index in the job */
    int32_t affinity;        /* 1: restore CPU masks (default), 0: leave them */
    char cpus[256];          /* "--cpus LIST": map saved masks onto these CPUs ("" none) */
    int32_t main_tid;        /* the restored main thread's tid (= new_pid) */
    int32_t tree;            /* processes restored together (the barrier page), or 0 */
    int64_t restore_start_ns; /* CLOCK_MONOTONIC when the restorer started */
    char moved[CAIRN_MOVED_MAX]; /* a restart on other hosts: "OLD=NEW;..." host addresses
                                  * (CAIRN_CKPT_MOVED), "" otherwise */
};

#define CAIRN_CONTROL_MAGIC 0x4c525443524e4143ull /* "CANRCTRL" */

/* The block hashes of an image, in "<image>.hashes" beside it: when the coordinator's WRITE
 * names a block size, the library hashes each block of the image (xxh3-128 of the file's
 * bytes, as the engine's block hash) while it writes it, and the engine records these
 * instead of reading the image back to hash it. Written before the image is renamed into
 * place; the engine checks the header against the image and samples blocks before taking
 * any of it, and hashes the image itself when the file is absent or does not match. */
#define CAIRN_HASHES_MAGIC "CAIRNBH1"

struct cairn_img_hashes {
    char magic[8];           /* CAIRN_HASHES_MAGIC */
    uint32_t block;          /* bytes per block (the last one may be shorter) */
    uint32_t reserved;
    uint64_t file_size;      /* the image's length */
    uint64_t count;          /* ceil(file_size / block) hashes follow, each 16 bytes: */
};                           /* the low then the high 64 bits, little-endian */

#endif
