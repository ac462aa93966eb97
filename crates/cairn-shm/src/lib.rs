//! Cairn's shared-memory chunk store, seen from Rust.
//!
//! The store itself is C (`native/fs/store.c`, layout in `native/fs/store.h`): the same code
//! serves the LD_PRELOAD interposer (`libcairn-fs.so`, built beside this crate) and the
//! engine's `mem` tier, so there is one implementation of its locking and allocation. This
//! crate has three layers: the raw declarations and the `#[repr(C)]` mirror of the layout
//! ([`raw`], checked field by field against the C side by a test), the safe [`Store`] handle,
//! and helpers to name stores ([`store_name`]) and find the preload library
//! ([`preload_library`]).
//!
//! ```
//! use cairn_shm::{Store, StoreConfig};
//! let name = format!("/cairn-doc-{}", std::process::id());
//! let store = Store::open(&StoreConfig::new(&name, 4 << 20, 64 << 10)).unwrap();
//! let f = store.create("ckpt/rank0", false).unwrap();
//! store.write_all_at(f, b"hello", 0).unwrap();
//! let mut back = [0u8; 5];
//! store.read_exact_at(f, &mut back, 0).unwrap();
//! assert_eq!(&back, b"hello");
//! Store::wipe(&name, None).unwrap();
//! ```

use std::ffi::{CStr, CString};
use std::os::raw::c_char;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

pub mod raw;

pub use raw::{ChunkMeta, FileHandle};

/// What went wrong, with the operation and the path or store it concerns.
#[derive(Debug, thiserror::Error)]
#[error("{op} {what}: {message}")]
pub struct StoreError {
    pub op: &'static str,
    pub what: String,
    pub message: String,
    /// The errno, for callers that map errors (ENOSPC, ENOENT...).
    pub errno: i32,
}

impl StoreError {
    fn new(op: &'static str, what: &str, errno: i32) -> StoreError {
        StoreError {
            op,
            what: what.to_string(),
            message: std::io::Error::from_raw_os_error(errno).to_string(),
            errno,
        }
    }

    pub fn is_not_found(&self) -> bool {
        self.errno == libc::ENOENT
    }

    /// The same error as an `io::Error` of the matching kind.
    pub fn to_io(&self) -> std::io::Error {
        std::io::Error::new(
            std::io::Error::from_raw_os_error(self.errno).kind(),
            self.to_string(),
        )
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// Turn a C return value (negative errno on failure) into a Result.
fn check(op: &'static str, what: &str, r: i64) -> Result<i64> {
    if r < 0 {
        Err(StoreError::new(op, what, (-r) as i32))
    } else {
        Ok(r)
    }
}

/// How to open a store, and the sizes to create it with when it does not exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// The shared-memory name, `/cairn-...` (see [`store_name`]).
    pub name: String,
    /// Bytes of the in-memory chunk pool.
    pub size: u64,
    /// Bytes per chunk, a multiple of 4096.
    pub chunk: u64,
    pub max_files: u32,
    /// The spill file, for chunks beyond the pool.
    pub spill: Option<PathBuf>,
    pub spill_size: u64,
    pub per_process: bool,
    /// Create the store when it does not exist (else: not found is an error).
    pub create: bool,
    /// Fill this process's page tables for the metadata when attaching (pool chunks are
    /// filled one by one as the process first touches them).
    pub populate: bool,
}

impl StoreConfig {
    /// A store of `size` bytes of `chunk`-byte chunks, no spill, created if missing.
    pub fn new(name: &str, size: u64, chunk: u64) -> StoreConfig {
        StoreConfig {
            name: name.to_string(),
            size,
            chunk,
            max_files: 4096,
            spill: None,
            spill_size: 0,
            per_process: false,
            create: true,
            populate: true,
        }
    }
}

/// Which store of a job: one per (simulated) node, or one per process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOwner {
    /// The node's index among the (simulated) nodes of its host.
    Node(u32),
    /// A process: its rank on the host plus one, or its pid.
    Process(u32),
}

/// The shared-memory name of a store: `/cairn-<uid>-<job>-n<node>` or `-p<process>`, with
/// characters of `job` outside `[A-Za-z0-9._-]` replaced by `_`.
pub fn store_name(uid: u32, job: &str, owner: StoreOwner) -> String {
    let node: libc::c_long = match owner {
        StoreOwner::Node(n) => n as libc::c_long,
        StoreOwner::Process(p) => -(p.max(1) as libc::c_long),
    };
    let job = CString::new(job.replace('\0', "_")).expect("no NUL");
    let mut buf = vec![0u8; 512];
    // SAFETY: buf is writable for its length; job is a valid C string.
    let n = unsafe {
        raw::cairn_store_name(
            buf.as_mut_ptr() as *mut c_char,
            buf.len(),
            uid,
            job.as_ptr(),
            node,
        )
    };
    buf.truncate(n.max(0) as usize);
    String::from_utf8_lossy(&buf).into_owned()
}

/// The spill file of a store: `<dir>/<name without the slash>.spill`.
pub fn spill_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{}.spill", name.trim_start_matches('/')))
}

/// Normalise a path relative to the mount point (`a/./b//c/../d` → `a/b/d`); `..` above the
/// mount point is an error.
pub fn normalize(path: &str) -> Result<String> {
    let c = CString::new(path).map_err(|_| StoreError::new("normalize", path, libc::EINVAL))?;
    let mut buf = vec![0u8; raw::PATH_MAX];
    // SAFETY: both buffers are valid for the lengths given.
    let n = unsafe {
        raw::cairn_store_normalize(c.as_ptr(), buf.as_mut_ptr() as *mut c_char, buf.len())
    };
    check("normalize", path, n as i64)?;
    buf.truncate(n as usize);
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Where the LD_PRELOAD interposer is: `CAIRN_FS_PRELOAD` if set, else beside the running
/// binary (or in `../lib`), else where this crate's build put it.
pub fn preload_library() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CAIRN_FS_PRELOAD") {
        return Some(PathBuf::from(p));
    }
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.parent() {
            for cand in [
                dir.join("libcairn-fs.so"),
                dir.join("../lib/libcairn-fs.so"),
                dir.join("../libcairn-fs.so"),
            ] {
                if cand.is_file() {
                    return Some(cand);
                }
            }
        }
    }
    let built = PathBuf::from(env!("CAIRN_FS_PRELOAD_BUILT"));
    built.is_file().then_some(built)
}

/// A file's type in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileType {
    File,
    Dir,
}

/// A file as `stat` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStat {
    pub kind: FileType,
    pub mode: u32,
    pub size: u64,
    pub chunks: u64,
    pub mtime_ns: i64,
    pub ino: u64,
    /// Writes and truncations (begun, ended): equal when none is in flight. A reader that
    /// sees them equal before copying a file and unchanged after copied bytes no write
    /// touched meanwhile.
    pub writes: (u64, u64),
}

/// Space and records in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub chunk_size: u64,
    pub mem_chunks: u64,
    pub mem_free: u64,
    pub spill_chunks: u64,
    pub spill_free: u64,
    pub max_files: u64,
    pub files_used: u64,
    pub numa_nodes: u32,
    /// Times a repair ran because a process died holding the store's lock.
    pub repairs: u32,
    pub per_process: bool,
}

/// A store attached to this process. All methods may be called from any thread.
pub struct Store {
    raw: NonNull<raw::cairn_store>,
    name: String,
}

// SAFETY: the C store serialises every metadata access with its process-shared mutex
// (including the per-handle chain cursor) and copies data without shared mutable state of
// its own, so one handle may be used from several threads at once.
unsafe impl Send for Store {}
// SAFETY: as above.
unsafe impl Sync for Store {}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("name", &self.name).finish()
    }
}

fn c_path(op: &'static str, path: &str) -> Result<CString> {
    CString::new(path).map_err(|_| StoreError::new(op, path, libc::EINVAL))
}

impl Store {
    /// Attach to the store `cfg.name`, creating it (pre-faulted) when it is missing and
    /// `cfg.create` is set. An existing store keeps the sizes it was created with.
    pub fn open(cfg: &StoreConfig) -> Result<Store> {
        let name = c_path("open store", &cfg.name)?;
        let spill = match &cfg.spill {
            Some(p) => Some(c_path(
                "open store",
                p.to_str().ok_or_else(|| {
                    StoreError::new("open store", &p.display().to_string(), libc::EINVAL)
                })?,
            )?),
            None => None,
        };
        let c = raw::cairn_store_config {
            name: name.as_ptr(),
            size: cfg.size,
            chunk: cfg.chunk,
            max_files: cfg.max_files,
            spill_path: spill.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            spill_size: cfg.spill_size,
            per_process: cfg.per_process as i32,
            create: cfg.create as i32,
            populate: cfg.populate as i32,
        };
        let mut out: *mut raw::cairn_store = std::ptr::null_mut();
        let mut err = vec![0u8; 512];
        // SAFETY: c and the strings it points to outlive the call; out and err are valid.
        let r = unsafe {
            raw::cairn_store_open(&c, &mut out, err.as_mut_ptr() as *mut c_char, err.len())
        };
        if r < 0 {
            let msg = CStr::from_bytes_until_nul(&err)
                .map(|m| m.to_string_lossy().into_owned())
                .unwrap_or_default();
            let mut e = StoreError::new("open store", &cfg.name, -r);
            if !msg.is_empty() {
                e.message = msg;
            }
            return Err(e);
        }
        Ok(Store {
            raw: NonNull::new(out).expect("cairn_store_open returned a store"),
            name: cfg.name.clone(),
        })
    }

    /// Remove a store's segment and spill file (processes attached keep their mapping).
    pub fn wipe(name: &str, spill: Option<&Path>) -> Result<()> {
        let n = c_path("wipe", name)?;
        let s = match spill {
            Some(p) => Some(c_path("wipe", &p.to_string_lossy())?),
            None => None,
        };
        // SAFETY: valid C strings or null.
        let r = unsafe {
            raw::cairn_store_wipe(
                n.as_ptr(),
                s.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            )
        };
        check("wipe", name, r as i64).map(|_| ())
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    fn p(&self) -> *mut raw::cairn_store {
        self.raw.as_ptr()
    }

    /// Open the file at `path` (relative to the mount point, normalised), creating it if
    /// missing; `truncate` empties it.
    pub fn create(&self, path: &str, truncate: bool) -> Result<FileHandle> {
        let flags = raw::O_CREAT | if truncate { raw::O_TRUNC } else { 0 };
        self.open_file(path, flags, 0o600)
    }

    /// Open an existing file.
    pub fn open_existing(&self, path: &str) -> Result<FileHandle> {
        self.open_file(path, 0, 0)
    }

    /// Open with `raw::O_*` flags.
    pub fn open_file(&self, path: &str, flags: i32, mode: u32) -> Result<FileHandle> {
        let c = c_path("open", path)?;
        let mut fh = FileHandle { index: 0, gen: 0 };
        // SAFETY: the store is attached; c and fh are valid.
        let r = unsafe { raw::cairn_store_open_file(self.p(), c.as_ptr(), flags, mode, &mut fh) };
        check("open", path, r as i64)?;
        Ok(fh)
    }

    /// Write `buf` at `off`; fewer bytes than asked when the store fills part way.
    pub fn pwrite(&self, fh: FileHandle, buf: &[u8], off: u64) -> Result<usize> {
        // SAFETY: buf is valid for its length.
        let r = unsafe {
            raw::cairn_store_pwrite(self.p(), fh, buf.as_ptr() as *const _, buf.len(), off)
        };
        check("write", &self.name, r as i64).map(|n| n as usize)
    }

    /// Write all of `buf` at `off`, or fail (ENOSPC when the store is full).
    pub fn write_all_at(&self, fh: FileHandle, mut buf: &[u8], mut off: u64) -> Result<()> {
        while !buf.is_empty() {
            let n = self.pwrite(fh, buf, off)?;
            if n == 0 {
                return Err(StoreError::new("write", &self.name, libc::ENOSPC));
            }
            buf = &buf[n..];
            off += n as u64;
        }
        Ok(())
    }

    /// Read into `buf` from `off`; fewer bytes at the end of the file.
    pub fn pread(&self, fh: FileHandle, buf: &mut [u8], off: u64) -> Result<usize> {
        // SAFETY: buf is valid for writes of its length.
        let r = unsafe {
            raw::cairn_store_pread(self.p(), fh, buf.as_mut_ptr() as *mut _, buf.len(), off)
        };
        check("read", &self.name, r as i64).map(|n| n as usize)
    }

    /// Fill `buf` from `off`; a short file is an error.
    pub fn read_exact_at(&self, fh: FileHandle, buf: &mut [u8], off: u64) -> Result<()> {
        let n = self.pread(fh, buf, off)?;
        if n < buf.len() {
            let mut e = StoreError::new("read", &self.name, libc::EIO);
            e.message = format!(
                "{} bytes at {off} asked, the file ends after {n}",
                buf.len()
            );
            return Err(e);
        }
        Ok(())
    }

    pub fn truncate(&self, fh: FileHandle, size: u64) -> Result<()> {
        // SAFETY: the store is attached.
        let r = unsafe { raw::cairn_store_ftruncate(self.p(), fh, size) };
        check("truncate", &self.name, r as i64).map(|_| ())
    }

    pub fn fstat(&self, fh: FileHandle) -> Result<FileStat> {
        let mut st = raw::cairn_store_stat::default();
        // SAFETY: st is valid for writes.
        let r = unsafe { raw::cairn_store_fstat(self.p(), fh, &mut st) };
        check("stat", &self.name, r as i64)?;
        Ok(st.into())
    }

    pub fn stat(&self, path: &str) -> Result<FileStat> {
        let c = c_path("stat", path)?;
        let mut st = raw::cairn_store_stat::default();
        // SAFETY: c and st are valid.
        let r = unsafe { raw::cairn_store_stat(self.p(), c.as_ptr(), &mut st) };
        check("stat", path, r as i64)?;
        Ok(st.into())
    }

    /// Make spill-file data durable (pool data needs nothing).
    pub fn sync(&self) -> Result<()> {
        // SAFETY: the store is attached.
        let r = unsafe { raw::cairn_store_sync(self.p()) };
        check("sync", &self.name, r as i64).map(|_| ())
    }

    pub fn unlink(&self, path: &str) -> Result<()> {
        let c = c_path("unlink", path)?;
        // SAFETY: c is valid.
        let r = unsafe { raw::cairn_store_unlink(self.p(), c.as_ptr()) };
        check("unlink", path, r as i64).map(|_| ())
    }

    /// Rename a file (replacing one at `to`) or a directory.
    pub fn rename(&self, from: &str, to: &str) -> Result<()> {
        let (f, t) = (c_path("rename", from)?, c_path("rename", to)?);
        // SAFETY: both are valid.
        let r = unsafe { raw::cairn_store_rename(self.p(), f.as_ptr(), t.as_ptr()) };
        check("rename", from, r as i64).map(|_| ())
    }

    pub fn mkdir(&self, path: &str) -> Result<()> {
        let c = c_path("mkdir", path)?;
        // SAFETY: c is valid.
        let r = unsafe { raw::cairn_store_mkdir(self.p(), c.as_ptr(), 0o700) };
        check("mkdir", path, r as i64).map(|_| ())
    }

    pub fn rmdir(&self, path: &str) -> Result<()> {
        let c = c_path("rmdir", path)?;
        // SAFETY: c is valid.
        let r = unsafe { raw::cairn_store_rmdir(self.p(), c.as_ptr()) };
        check("rmdir", path, r as i64).map(|_| ())
    }

    /// The children of a directory (explicit or implied), in table order.
    pub fn read_dir(&self, dir: &str) -> Result<Vec<(String, FileType)>> {
        let c = c_path("readdir", dir)?;
        let mut cookie = 0u64;
        let mut out = Vec::new();
        let mut name = vec![0u8; raw::PATH_MAX];
        loop {
            let mut ty = 0u32;
            // SAFETY: all pointers are valid for the lengths given.
            let r = unsafe {
                raw::cairn_store_readdir(
                    self.p(),
                    c.as_ptr(),
                    &mut cookie,
                    name.as_mut_ptr() as *mut c_char,
                    name.len(),
                    &mut ty,
                )
            };
            if check("readdir", dir, r as i64)? == 0 {
                return Ok(out);
            }
            let n = CStr::from_bytes_until_nul(&name).expect("NUL-terminated");
            let kind = if ty == raw::FILE_DIR {
                FileType::Dir
            } else {
                FileType::File
            };
            out.push((n.to_string_lossy().into_owned(), kind));
        }
    }

    /// Every regular file under `dir` ("" for all), as paths relative to the mount point.
    pub fn walk(&self, dir: &str) -> Result<Vec<String>> {
        let mut out = Vec::new();
        let mut todo = vec![dir.to_string()];
        while let Some(d) = todo.pop() {
            for (name, kind) in self.read_dir(&d)? {
                let p = if d.is_empty() {
                    name
                } else {
                    format!("{d}/{name}")
                };
                match kind {
                    FileType::Dir => todo.push(p),
                    FileType::File => out.push(p),
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// Where a file's chunks are (CRUISE's get_chunk_meta_list).
    pub fn chunks(&self, fh: FileHandle) -> Result<Vec<ChunkMeta>> {
        let mut v: Vec<ChunkMeta> = Vec::new();
        loop {
            // SAFETY: v has capacity for v.capacity() entries; the C side writes at most that.
            let n = unsafe { raw::cairn_store_chunks(self.p(), fh, v.as_mut_ptr(), v.capacity()) };
            let n = check("chunks", &self.name, n as i64)? as usize;
            if n <= v.capacity() {
                // SAFETY: the first n entries were written.
                unsafe { v.set_len(n) };
                return Ok(v);
            }
            v.reserve(n);
        }
    }

    /// Read the bytes of one chunk (`meta.length` of them) into `buf`: in place from the
    /// mapped pool (one copy, straight from shared memory), or from the spill file.
    pub fn read_chunk(&self, meta: &ChunkMeta, buf: &mut [u8]) -> Result<()> {
        let n = meta.length as usize;
        assert!(buf.len() >= n, "buffer shorter than the chunk");
        if meta.in_spill != 0 {
            // SAFETY: buf is valid for n bytes.
            let r = unsafe {
                raw::cairn_store_read_spill(self.p(), meta.offset, buf.as_mut_ptr() as *mut _, n)
            };
            return check("read spill", &self.name, r as i64).map(|_| ());
        }
        buf[..n].copy_from_slice(self.chunk_in_place(meta));
        Ok(())
    }

    /// The bytes of a pool chunk where they lie in shared memory, for zero-copy draining.
    /// They change if the file is written meanwhile: drain files that are complete.
    ///
    /// # Panics
    /// If the chunk is in the spill file (use [`Store::read_chunk`]).
    pub fn chunk_in_place(&self, meta: &ChunkMeta) -> &[u8] {
        assert!(meta.in_spill == 0, "spill chunks are not mapped");
        let h = self.header();
        assert!(
            meta.offset + meta.length <= h.segment_size,
            "chunk outside the segment"
        );
        // SAFETY: the segment stays mapped while self lives, and the range lies inside it
        // (checked above). The bytes are plain data; a concurrent writer can change them,
        // which the documentation of this method leaves to the caller.
        unsafe {
            let base = raw::cairn_store_base(self.p()) as *const u8;
            std::slice::from_raw_parts(base.add(meta.offset as usize), meta.length as usize)
        }
    }

    /// Where the segment is mapped in this process.
    #[cfg(test)]
    pub(crate) fn chunk_base(&self) -> *const u8 {
        // SAFETY: the store is attached; this only returns its mapping's address.
        unsafe { raw::cairn_store_base(self.p()) as *const u8 }
    }

    /// A copy of the store's header.
    pub fn header(&self) -> raw::StoreHeader {
        // SAFETY: the header is mapped at the start of the segment; reading it unlocked
        // gives a possibly torn but memory-safe snapshot of plain integers.
        unsafe { std::ptr::read_volatile(raw::cairn_store_header(self.p())) }
    }

    pub fn usage(&self) -> Result<Usage> {
        let mut u = raw::cairn_store_usage::default();
        // SAFETY: u is valid for writes.
        let r = unsafe { raw::cairn_store_usage(self.p(), &mut u) };
        check("usage", &self.name, r as i64)?;
        Ok(Usage {
            chunk_size: u.chunk_size,
            mem_chunks: u.mem_chunks,
            mem_free: u.mem_free,
            spill_chunks: u.spill_chunks,
            spill_free: u.spill_free,
            max_files: u.max_files,
            files_used: u.files_used,
            numa_nodes: u.numa_nodes,
            repairs: u.repairs,
            per_process: u.per_process != 0,
        })
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // SAFETY: the handle was returned by cairn_store_open and is closed once.
        unsafe { raw::cairn_store_close(self.p()) }
    }
}

impl From<raw::cairn_store_stat> for FileStat {
    fn from(s: raw::cairn_store_stat) -> FileStat {
        FileStat {
            kind: if s.type_ == raw::FILE_DIR {
                FileType::Dir
            } else {
                FileType::File
            },
            mode: s.mode,
            size: s.size,
            chunks: s.nchunks,
            mtime_ns: s.mtime_ns,
            ino: s.ino,
            writes: (s.writes_started, s.writes_done),
        }
    }
}

#[cfg(test)]
mod tests;
