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

use std::path::{Path, PathBuf};

pub const IMAGE_MAGIC: &[u8; 8] = b"CAIRNIM1";
pub const IMAGE_VERSION: u32 = 1;
/// Where every checkpointed process keeps an area free for the restorer.
pub const HOLE_START: u64 = 0x3f00_0000_0000;
pub const HOLE_LEN: u64 = 64 << 20;
/// Longest path an image records or is written at (`CAIRN_IMG_PATH_MAX`, with its NUL).
pub const IMAGE_PATH_MAX: usize = 512;

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
    pub reserved: [u8; 256],
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
    Ok(h)
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
