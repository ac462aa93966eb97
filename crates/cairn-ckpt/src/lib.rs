//! The C half of Cairn's transparent checkpointing, seen from Rust.
//!
//! `native/ckpt` holds the checkpoint library `libcairn-ckpt.so` (preloaded into unmodified
//! programs by `cairn launch`) and the freestanding restorer `cairn-restore`; this crate's
//! build script builds both beside the binaries. Here are where to find them
//! ([`preload_library`], [`restorer`]) and the process image's header mirrored from
//! `native/ckpt/image.h` ([`ImageHeader`], checked field by field against the C compiler by
//! a test), so the coordinator can read and check images without restoring them.
//!
//! ```no_run
//! let h = cairn_ckpt::read_header(std::path::Path::new("v3/proc0.img")).unwrap();
//! println!("{} threads, {} regions, kernel {}", h.nthreads, h.nregions, h.kernel());
//! ```

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

pub const IMAGE_MAGIC: &[u8; 8] = b"CAIRNIM1";
pub const IMAGE_VERSION: u32 = 4;
/// Where every checkpointed process keeps an area free for the restorer.
pub const HOLE_START: u64 = 0x3f00_0000_0000;
pub const HOLE_LEN: u64 = 64 << 20;
/// Longest path an image records or is written at (`CAIRN_IMG_PATH_MAX`, with its NUL).
pub const IMAGE_PATH_MAX: usize = 512;

/// `CAIRN_IDS_NAMESPACE` (`ImageHeader::ids`): the process ran in a pid namespace of
/// Cairn's, and a restart makes it again in a new one with its ids.
pub const IDS_NAMESPACE: u32 = 1;

/// `struct cairn_img_header` (native/ckpt/image.h).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ImageHeader {
    pub magic: [u8; 8],
    pub version: u32,
    pub header_size: u32,
    pub file_size: u64,
    pub nregions: u32,
    pub nthreads: u32,
    pub regions_off: u64,
    pub threads_off: u64,
    pub kernel_release: [u8; 65],
    pub kernel_version: [u8; 65],
    pub pad0: [u8; 6],
    pub cpuid1_ecx: u32,
    pub cpuid1_edx: u32,
    pub cpuid7_ebx: u32,
    pub cpuid7_ecx: u32,
    pub cpuid7_edx: u32,
    pub pad1: u32,
    pub xcr0: u64,
    pub pid: i32,
    pub nfds_hint: u32,
    pub hole_start: u64,
    pub hole_len: u64,
    pub control_addr: u64,
    pub brk_start: u64,
    pub brk_end: u64,
    pub checkpoint: u64,
    pub time_ns: i64,
    pub ppid: i32,
    pub pgid: i32,
    pub sid: i32,
    /// `CAIRN_IDS_*`: whether a restart gives the process its ids back.
    pub ids: u32,
    pub nxfds: u32,
    pub max_fd: i32,
    pub xfds_off: u64,
    pub xdata_len: u64,
    pub nzombies: u32,
    pub zombies: [[i32; 2]; 16],
    pub ctty: i32,
    pub tty_pgrp: i32,
    /// System V segments and semaphore sets the tree's root saved (`struct cairn_img_ipc`).
    pub nipc: u32,
    pub ipc_off: u64,
    /// The program's text, data, arguments and environment, as the kernel records them
    /// (start, end), given back with the program break at restart.
    pub mm_code: [u64; 2],
    pub mm_data: [u64; 2],
    pub mm_args: [u64; 2],
    pub mm_env: [u64; 2],
    /// Checksums (format 3): `meta_sum` of bytes `[0, data_start)` with itself zero, and
    /// `nsums` page-run checksums at `sums_off`.
    pub data_start: u64,
    pub meta_sum: u64,
    pub sums_off: u64,
    pub nsums: u64,
}

fn c_str(b: &[u8]) -> String {
    let end = b.iter().position(|c| *c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

impl ImageHeader {
    /// The kernel the image was taken on: release and build.
    pub fn kernel(&self) -> String {
        format!(
            "{} {}",
            c_str(&self.kernel_release),
            c_str(&self.kernel_version)
        )
    }

    /// Whether a process in this image can run here: the same kernel build (the vdso is part
    /// of the process) and a CPU with every feature the image's had (glibc chose its code
    /// and the XSAVE layout for that CPU). The restorer checks the same before it touches
    /// anything; checking here first lets `cairn restart` refuse before any process starts.
    pub fn fits(&self, here: &Machine) -> Result<(), String> {
        if self.kernel() != here.kernel {
            return Err(format!(
                "the image was taken on kernel {}; this is {}: a restored process needs the same \
                 kernel build (its vdso is part of the process)",
                self.kernel(),
                here.kernel
            ));
        }
        let want = [
            self.cpuid1_ecx,
            self.cpuid1_edx,
            self.cpuid7_ebx,
            self.cpuid7_ecx,
            self.cpuid7_edx,
        ];
        const LEAF: [&str; 5] = [
            "CPUID.1:ECX",
            "CPUID.1:EDX",
            "CPUID.7:EBX",
            "CPUID.7:ECX",
            "CPUID.7:EDX",
        ];
        for ((w, h), leaf) in want.iter().zip(here.cpuid).zip(LEAF) {
            let missing = w & !h;
            if missing != 0 {
                return Err(format!(
                    "this CPU lacks features the image uses: {leaf} bits {missing:#x} (glibc \
                     chose its code for the CPU the program started on)"
                ));
            }
        }
        if self.xcr0 & !here.xcr0 != 0 {
            return Err(format!(
                "this CPU saves less register state (XCR0 {:#x}) than the image's ({:#x})",
                here.xcr0, self.xcr0
            ));
        }
        Ok(())
    }
}

/// What [`ImageHeader::fits`] compares: this machine's kernel build and CPU features, read
/// the way the checkpoint library records them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    /// `release version` as uname(2) gives them.
    pub kernel: String,
    /// CPUID.1:ECX, CPUID.1:EDX, CPUID.7:EBX, CPUID.7:ECX, CPUID.7:EDX.
    pub cpuid: [u32; 5],
    /// XCR0 (0 without OSXSAVE).
    pub xcr0: u64,
}

impl Machine {
    /// This machine.
    pub fn here() -> std::io::Result<Machine> {
        // SAFETY: utsname is plain old data; uname fills it or fails.
        let mut u: libc::utsname = unsafe { std::mem::zeroed() };
        // SAFETY: `u` is a valid, writable utsname.
        if unsafe { libc::uname(&mut u) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let field = |f: &[libc::c_char]| {
            let b: Vec<u8> = f.iter().map(|c| *c as u8).collect();
            c_str(&b)
        };
        let kernel = format!("{} {}", field(&u.release), field(&u.version));
        let (cpuid, xcr0) = cpu_features();
        Ok(Machine {
            kernel,
            cpuid,
            xcr0,
        })
    }
}

#[cfg(target_arch = "x86_64")]
fn cpu_features() -> ([u32; 5], u64) {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    // SAFETY: CPUID exists on every x86_64 CPU; leaf 7 is read only when leaf 0 says it is
    // there, as the library does. (Safe functions since Rust 1.87, unsafe before.)
    #[allow(unused_unsafe)]
    let (l1, max) = unsafe { (__cpuid(1), __cpuid(0).eax) };
    #[allow(unused_unsafe)]
    let l7 = (max >= 7).then(|| unsafe { __cpuid_count(7, 0) });
    let (b7, c7, d7) = l7.map_or((0, 0, 0), |l| (l.ebx, l.ecx, l.edx));
    let xcr0 = if l1.ecx & (1 << 27) != 0 {
        let (lo, hi): (u32, u32);
        // SAFETY: OSXSAVE is set, so XGETBV with ECX = 0 is allowed at any privilege level.
        unsafe {
            std::arch::asm!("xgetbv", in("ecx") 0u32, out("eax") lo, out("edx") hi,
                            options(nomem, nostack, preserves_flags));
        }
        ((hi as u64) << 32) | lo as u64
    } else {
        0
    };
    ([l1.ecx, l1.edx, b7, c7, d7], xcr0)
}

#[cfg(not(target_arch = "x86_64"))]
fn cpu_features() -> ([u32; 5], u64) {
    ([0; 5], 0)
}

/// The image checksum of `native/ckpt/image.h`: XXH3-64, seed 0 (the C side uses xxhash.h).
pub fn image_sum(data: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(data)
}

/// Where `ImageHeader::meta_sum` lies in an image.
pub const META_SUM_OFFSET: usize = std::mem::offset_of!(ImageHeader, meta_sum);

/// The header checksum an image's bytes call for: [`image_sum`] of `[0, data_start)` with
/// the `meta_sum` field read as zero; `None` when the image is shorter than that.
pub fn meta_sum(image: &[u8], data_start: u64) -> Option<u64> {
    let mut meta = image.get(..usize::try_from(data_start).ok()?)?.to_vec();
    meta.get_mut(META_SUM_OFFSET..META_SUM_OFFSET + 8)?.fill(0);
    Some(image_sum(&meta))
}

/// Read and check the header of a process image: magic, version, and the size it records
/// against the file's (a truncated image is refused here, before any restart tries it).
pub fn read_header(path: &Path) -> std::io::Result<ImageHeader> {
    use std::io::Read;
    let bad = |why: String| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: {why}", path.display()),
        )
    };
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    let mut buf = vec![0u8; std::mem::size_of::<ImageHeader>()];
    f.read_exact(&mut buf)
        .map_err(|_| bad("shorter than an image header".into()))?;
    // SAFETY: ImageHeader is plain old data (integers and byte arrays) of exactly this size,
    // and read_unaligned copies it out of the buffer.
    let h: ImageHeader = unsafe { std::ptr::read_unaligned(buf.as_ptr() as *const ImageHeader) };
    if &h.magic != IMAGE_MAGIC {
        return Err(bad("not a Cairn process image".into()));
    }
    if h.version != IMAGE_VERSION || h.header_size as usize != buf.len() {
        return Err(bad(format!(
            "image version {} (header {} bytes); this build reads version {IMAGE_VERSION}",
            h.version, h.header_size
        )));
    }
    if h.file_size != len {
        return Err(bad(format!(
            "{len} bytes, the image records {} (truncated or still being written)",
            h.file_size
        )));
    }
    // The header and tables, whose checksum the header carries (bounded: they lie before
    // the pages, within the file whose size was just checked).
    if h.data_start > len || (h.data_start as usize) < buf.len() {
        return Err(bad(format!("damaged: data starts at {}", h.data_start)));
    }
    let mut meta = buf.clone();
    meta.resize(h.data_start as usize, 0);
    f.read_exact(&mut meta[buf.len()..])?;
    if meta_sum(&meta, h.data_start) != Some(h.meta_sum) {
        return Err(bad(
            "damaged: its header and tables fail their checksum".into()
        ));
    }
    Ok(h)
}

/// `CAIRN_HASHES_MAGIC`: the start of an image's block hashes file.
pub const HASHES_MAGIC: &[u8; 8] = b"CAIRNBH1";

/// `struct cairn_img_hashes` (native/ckpt/image.h): the header of `<image>.hashes`, the
/// hashes of the image's blocks the library computed while writing it.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct HashesHeader {
    pub magic: [u8; 8],
    pub block: u32,
    pub reserved: u32,
    pub file_size: u64,
    pub count: u64,
}

/// The file the library writes the block hashes of `image` to.
pub fn hashes_path(image: &Path) -> PathBuf {
    let mut p = image.as_os_str().to_owned();
    p.push(".hashes");
    PathBuf::from(p)
}

/// The block hashes the library wrote beside `image` (see [`HashesHeader`]), when they are
/// for blocks of `block` bytes and for the image as it is now (its length): `Ok(None)` when
/// there is no such file (the library was built without hashing, or was not asked), an
/// error naming what does not match otherwise. Reads at most the bytes the image's length
/// allows, whatever the file says.
pub fn read_hashes(image: &Path, block: u32) -> std::io::Result<Option<Vec<u128>>> {
    use std::io::Read;
    let path = hashes_path(image);
    let bad = |why: String| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: {why}", path.display()),
        )
    };
    let len = std::fs::metadata(image)?.len();
    let mut f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if !f.metadata()?.is_file() {
        return Err(bad("not a regular file".into()));
    }
    let mut buf = [0u8; std::mem::size_of::<HashesHeader>()];
    f.read_exact(&mut buf)
        .map_err(|_| bad("shorter than its header".into()))?;
    // SAFETY: HashesHeader is plain old data (integers and a byte array) of exactly this
    // size, and read_unaligned copies it out of the buffer.
    let h: HashesHeader = unsafe { std::ptr::read_unaligned(buf.as_ptr() as *const HashesHeader) };
    if &h.magic != HASHES_MAGIC {
        return Err(bad("not the block hashes of an image".into()));
    }
    if h.block != block || block == 0 {
        return Err(bad(format!(
            "hashes of {}-byte blocks, the engine's are {block} bytes",
            h.block
        )));
    }
    let count = len.div_ceil(block as u64);
    if h.file_size != len || h.count != count {
        return Err(bad(format!(
            "{} hashes of a {}-byte image; the image has {len} bytes ({count} blocks)",
            h.count, h.file_size
        )));
    }
    let mut raw = vec![0u8; count as usize * 16];
    f.read_exact(&mut raw)
        .map_err(|_| bad(format!("fewer than the {count} hashes it announces")))?;
    if f.read(&mut [0u8; 1])? != 0 {
        return Err(bad(format!("more than the {count} hashes it announces")));
    }
    Ok(Some(
        raw.chunks_exact(16)
            .map(|c| u128::from_le_bytes(c.try_into().expect("16 bytes")))
            .collect(),
    ))
}

/// Whether the file at `path` starts as an image of the checkpoint library does (its magic);
/// another preload library's images are for its own restorer to judge.
pub fn is_image(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 8];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && &magic == IMAGE_MAGIC
}

/// `CAIRN_XFD_*` (`Xfd::kind`): a pipe's read or write end, or a connected Unix stream socket.
pub const XFD_PIPE_READ: u32 = 1;
pub const XFD_PIPE_WRITE: u32 = 2;
pub const XFD_STREAM: u32 = 3;
/// A regular file (its open file description made once, shared by the processes that shared it).
pub const XFD_FILE: u32 = 4;
/// A connected TCP socket (made again by connecting its two ends' addresses).
pub const XFD_TCP: u32 = 5;
/// A listening socket (bound and listening again, shared by the processes that shared it).
pub const XFD_LISTEN: u32 = 6;
/// A pseudo-terminal's master (`ino`: its index + 1).
pub const XFD_PTM: u32 = 7;
/// A pseudo-terminal's slave (`ino`: its master's).
pub const XFD_PTS: u32 = 8;
/// An eventfd, made again with its count (`offset`), once per open file description.
pub const XFD_EVENT: u32 = 9;
/// A UDP socket (`size` 1 if connected; `peer` then the inode of the socket receiving what it
/// sends).
pub const XFD_UDP: u32 = 10;
/// A connected TCP socket whose other end is on another host (made again through the
/// coordinators once both ends run again; the root checks that a process of the job holds
/// that end).
pub const XFD_REMOTE: u32 = 11;
/// A file without a name that the process maps shared (`ino`, and `peer` its device as the
/// regions' `dev`): it comes back as the tree's shared memory object for those mappings.
pub const XFD_SHM: u32 = 12;
/// `Xfd::how`: with its other end outside the tree it comes back closed
/// (`CAIRN_CKPT_EXTERNAL=close`).
pub const XFD_CLOSE_UNMATCHED: u32 = 1;
/// `Xfd::how`: descriptor 0, 1 or 2; with its other end outside the tree the restart's own
/// stream takes its place.
pub const XFD_STDIO: u32 = 2;
/// `Xfd::how`: a pipe end whose other end no process held at the checkpoint; it comes back
/// with that end closed and its bytes waiting.
pub const XFD_ENDED: u32 = 4;

/// `struct cairn_img_xfd` (native/ckpt/image.h): a pipe end or Unix stream socket a process
/// of a tree may share with other processes of it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Xfd {
    pub fd: i32,
    pub kind: u32,
    pub ino: u64,
    pub peer: u64,
    pub flags: u32,
    pub cloexec: u32,
    pub pipe_size: u32,
    pub how: u32,
    pub data_off: u64,
    pub data_len: u64,
    pub offset: i64,
    pub size: i64,
}

/// A System V segment or semaphore set of a tree (`struct cairn_img_ipc`), `header.nipc` of
/// them at `header.ipc_off` in the image of the tree's root.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ipc {
    pub kind: u32,
    pub id: i32,
    pub key: i32,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub bitmap_off: u64,
    pub data_off: u64,
    pub saved_pages: u64,
    pub sums_off: u64,
}

/// `Ipc::kind` of a shared memory segment.
pub const IPC_SHM: u32 = 1;

/// The System V objects an image records, read from its table (bounded by the file).
pub fn read_ipcs(path: &Path) -> std::io::Result<Vec<Ipc>> {
    use std::io::{Read, Seek, SeekFrom};
    let h = read_header(path)?;
    let size = std::mem::size_of::<Ipc>() as u64;
    let len = u64::from(h.nipc) * size;
    if h.ipc_off
        .checked_add(len)
        .map_or(true, |end| end > h.file_size)
    {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: its System V table lies outside it", path.display()),
        ));
    }
    let mut f = std::fs::File::open(path)?;
    f.seek(SeekFrom::Start(h.ipc_off))?;
    let mut buf = vec![0u8; len as usize];
    f.read_exact(&mut buf)?;
    Ok(buf
        .chunks_exact(size as usize)
        // SAFETY: Ipc is plain old data (integers) of exactly this size, and read_unaligned
        // copies it out of the buffer.
        .map(|c| unsafe { std::ptr::read_unaligned(c.as_ptr() as *const Ipc) })
        .collect())
}

/// The shared descriptors an image records (`header.nxfds` of them at `header.xfds_off`),
/// each checked to lie within the file, and among them its connections to other hosts
/// ([`XFD_REMOTE`], with their addresses from the data after the table): one opening of the
/// file.
pub fn read_descriptors(path: &Path) -> std::io::Result<(Vec<Xfd>, Vec<RemoteEnd>)> {
    use std::io::{Read, Seek, SeekFrom};
    let h = read_header(path)?;
    let size = std::mem::size_of::<Xfd>() as u64;
    let n = u64::from(h.nxfds);
    if n == 0 {
        return Ok((Vec::new(), Vec::new()));
    }
    let bad = |why: String| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: {why}", path.display()),
        )
    };
    let Some(end) = n
        .checked_mul(size)
        .and_then(|t| h.xfds_off.checked_add(t))
        .filter(|&e| e.checked_add(h.xdata_len).is_some_and(|d| d <= h.file_size))
    else {
        return Err(bad(
            "its table of shared descriptors lies outside the file".into()
        ));
    };
    let mut f = std::fs::File::open(path)?;
    f.seek(SeekFrom::Start(h.xfds_off))?;
    let mut buf = vec![0u8; (end - h.xfds_off) as usize];
    f.read_exact(&mut buf)?;
    let xfds: Vec<Xfd> = buf
        .chunks_exact(size as usize)
        // SAFETY: Xfd is plain old data of exactly this size; read_unaligned copies it out.
        .map(|c| unsafe { std::ptr::read_unaligned(c.as_ptr() as *const Xfd) })
        .collect();
    let mut remote = Vec::new();
    for x in xfds.iter().filter(|x| x.kind == XFD_REMOTE) {
        let mut rec = [0u8; SOCK_HEAD + 2 * SOCK_ADDR];
        if x.data_len < rec.len() as u64 || x.data_off.saturating_add(x.data_len) > h.xdata_len {
            return Err(bad(format!(
                "the record of fd {}'s connection is damaged",
                x.fd
            )));
        }
        // The data follows the table.
        f.seek(SeekFrom::Start(end + x.data_off))?;
        f.read_exact(&mut rec)?;
        let (local, peer) = (
            sockaddr(&rec[SOCK_HEAD..SOCK_HEAD + SOCK_ADDR]),
            sockaddr(&rec[SOCK_HEAD + SOCK_ADDR..]),
        );
        let (Some(local), Some(peer)) = (local, peer) else {
            return Err(bad(format!(
                "fd {}'s connection has no IPv4 or IPv6 addresses",
                x.fd
            )));
        };
        remote.push(RemoteEnd {
            fd: x.fd,
            ino: x.ino,
            local,
            peer,
            close: x.how & XFD_CLOSE_UNMATCHED != 0,
        });
    }
    Ok((xfds, remote))
}

/// A connection to another host an image records ([`XFD_REMOTE`]): its descriptor, its
/// socket's inode, and its two addresses at the checkpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct RemoteEnd {
    pub fd: i32,
    pub ino: u64,
    pub local: std::net::SocketAddr,
    pub peer: std::net::SocketAddr,
    /// `CAIRN_CKPT_EXTERNAL=close`: with no process of the job at the other end, it comes
    /// back closed.
    pub close: bool,
}

/// The bytes of `struct cairn_img_sock` (native/ckpt/image.h) before its addresses, and
/// each address's room.
const SOCK_HEAD: usize = 24;
const SOCK_ADDR: usize = 112;

/// The socket address of a `struct sockaddr_in` or `sockaddr_in6` as the kernel wrote it.
fn sockaddr(b: &[u8]) -> Option<std::net::SocketAddr> {
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
    let family = u16::from_ne_bytes([b[0], b[1]]);
    let port = u16::from_be_bytes([b[2], b[3]]);
    match i32::from(family) {
        libc::AF_INET => Some(SocketAddr::from((
            Ipv4Addr::new(b[4], b[5], b[6], b[7]),
            port,
        ))),
        libc::AF_INET6 => {
            let ip: [u8; 16] = b[8..24].try_into().ok()?;
            Some(SocketAddr::from((Ipv6Addr::from(ip), port)))
        }
        _ => None,
    }
}

/// The name both ends of a TCP connection give it: its two addresses (`1.2.3.4:5`,
/// `[::1]:5`), the lower as text first, as the checkpoint library writes it.
pub fn connection_key(a: &str, b: &str) -> String {
    if a < b {
        format!("{a},{b}")
    } else {
        format!("{b},{a}")
    }
}

fn find(env: &str, name: &str, built: &str) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        return Some(PathBuf::from(p));
    }
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.parent() {
            for cand in [
                dir.join(name),
                dir.join("../lib").join(name),
                dir.join("..").join(name),
            ] {
                if cand.is_file() {
                    return Some(cand);
                }
            }
        }
    }
    let built = PathBuf::from(built);
    built.is_file().then_some(built)
}

/// Makes `cmd`'s child start with standard input, output and error only: every other
/// descriptor it would inherit from its starter's environment (a batch system's or a
/// shell's) is closed at exec. A process under the checkpoint library could not get them
/// back after a restart, so its checkpoints would be refused for them: `cairn launch` starts
/// the job's processes this way, as should anything else that starts them.
pub fn standard_streams_only(cmd: &mut std::process::Command) {
    // SAFETY: the closure runs in the child between fork and exec and only makes system
    // calls on integers (close_range, or fcntl per descriptor where the kernel has no
    // close_range); it allocates nothing. Marking rather than closing keeps the standard
    // library's own exec-status pipe working (it is close-on-exec already).
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, || {
            const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
            let r = libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC);
            if r != 0 {
                let top = match libc::sysconf(libc::_SC_OPEN_MAX) {
                    n if n > 3 => n.min(1 << 20) as libc::c_int,
                    _ => 1024,
                };
                for fd in 3..top {
                    libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
                }
            }
            Ok(())
        });
    }
}

/// `libcairn-ckpt.so`: `CAIRN_CKPT_PRELOAD` if set, else beside the running binary (or in
/// `../lib`), else where this crate's build put it.
pub fn preload_library() -> Option<PathBuf> {
    find(
        "CAIRN_CKPT_PRELOAD",
        "libcairn-ckpt.so",
        env!("CAIRN_CKPT_LIB_BUILT"),
    )
}

/// `cairn-restore`: `CAIRN_RESTORE` if set, else beside the running binary, else where this
/// crate's build put it.
pub fn restorer() -> Option<PathBuf> {
    find(
        "CAIRN_RESTORE",
        "cairn-restore",
        env!("CAIRN_RESTORE_BUILT"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header recording `m` as the machine it was taken on (the rest zero).
    fn taken_on(m: &Machine) -> ImageHeader {
        // SAFETY: ImageHeader is plain old data; all zeroes is a valid value.
        let mut h: ImageHeader = unsafe { std::mem::zeroed() };
        let (release, version) = m.kernel.split_once(' ').unwrap();
        h.kernel_release[..release.len()].copy_from_slice(release.as_bytes());
        h.kernel_version[..version.len()].copy_from_slice(version.as_bytes());
        [
            h.cpuid1_ecx,
            h.cpuid1_edx,
            h.cpuid7_ebx,
            h.cpuid7_ecx,
            h.cpuid7_edx,
        ] = m.cpuid;
        h.xcr0 = m.xcr0;
        h
    }

    #[test]
    fn an_image_of_this_machine_fits_and_others_are_refused_with_the_reason() {
        let here = Machine::here().unwrap();
        assert!(here.kernel.contains(' '), "{here:?}");
        let h = taken_on(&here);
        assert_eq!(h.fits(&here), Ok(()));

        let mut other = here.clone();
        other.kernel = "5.10.0-other #1 SMP".into();
        let e = taken_on(&other).fits(&here).unwrap_err();
        assert!(
            e.contains("5.10.0-other") && e.contains(&here.kernel),
            "{e}"
        );

        // A CPU with one feature fewer than the image's (AVX2 is CPUID.7:EBX bit 5).
        let mut lesser = here.clone();
        lesser.cpuid[2] &= !(1 << 5);
        let mut richer = taken_on(&here);
        richer.cpuid7_ebx |= 1 << 5;
        let e = richer.fits(&lesser).unwrap_err();
        assert!(e.contains("CPUID.7:EBX bits 0x20"), "{e}");
        // The other way round is fine: the image uses less than this CPU has.
        assert_eq!(taken_on(&lesser).fits(&here), Ok(()));

        let mut less_state = here.clone();
        less_state.xcr0 = 0x3;
        let mut wide = taken_on(&here);
        wide.xcr0 |= 0xe0;
        let e = wide.fits(&less_state).unwrap_err();
        assert!(e.contains("XCR0 0x3"), "{e}");
    }
}
