//! Storage tiers behind one trait.
//!
//! A [`Tier`] stores named objects (a checkpoint's rank files and manifests) under
//! slash-separated [`keys`](check_key). Writers are atomic: bytes go to a private temporary
//! object that only [`ObjectWriter::commit`] publishes under its key, so a reader never sees a
//! half-written object and a crashed writer leaves nothing under the final name. Everything the
//! engine knows about storage goes through this trait, so an in-memory chunk store, a
//! crash-simulating tier or a redundancy layer can stand in for a directory without changes
//! above it.
//!
//! [`DirTier`] is the implementation over a directory, used for node-local storage
//! (`/dev/shm`, a local SSD) and for the global parallel-file-system directory; [`MemTier`]
//! keeps a node's objects in its shared-memory chunk store (`cairn-shm`); [`CrashTier`] is a
//! tier on a simulated machine that loses power, for the engine's crash tests.
//!
//! ```
//! use cairn_tier::{DirTier, Tier};
//! let dir = tempfile::tempdir().unwrap();
//! let tier = DirTier::new("local", dir.path().join("t"), false).unwrap();
//! tier.put("ck/v1/manifest.json", b"{}").unwrap();
//! assert_eq!(tier.get("ck/v1/manifest.json").unwrap(), b"{}");
//! assert_eq!(tier.list("ck").unwrap(), vec!["v1".to_string()]);
//! ```

mod crash;
mod dir;
mod mem;

pub use cairn_shm;
pub use crash::{CrashMachine, CrashReport, CrashTier};
pub use dir::{private_dirs, DirTier};
pub use mem::{MemTier, ENGINE_DIR};

use std::fs::File;
use std::path::{Path, PathBuf};

/// What went wrong in a tier, with the tier and object it concerns.
#[derive(Debug, thiserror::Error)]
#[error("{tier} tier: {what} {path}: {source}")]
pub struct TierError {
    pub tier: String,
    pub what: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

impl TierError {
    pub fn is_not_found(&self) -> bool {
        self.source.kind() == std::io::ErrorKind::NotFound
    }
}

pub type Result<T> = std::result::Result<T, TierError>;

/// An object being written. Dropping it without [`commit`](ObjectWriter::commit) discards it.
pub trait ObjectWriter: Send {
    fn write_all(&mut self, buf: &[u8]) -> Result<()>;
    /// Write `buf` at byte `offset` of the object (for an object whose header is written
    /// last, once its contents are known). Does not move where `write_all` appends.
    fn write_all_at(&mut self, buf: &[u8], offset: u64) -> Result<()>;
    /// Append `buf` like [`write_all`](ObjectWriter::write_all), bypassing the kernel's page
    /// cache where the tier and the file system allow it (`O_DIRECT`: the device reads the
    /// buffer itself, no copy into the cache and no writeback work later). Used for bulk
    /// copies whose bytes will not be read again soon. Only a buffer starting on a
    /// [`DIRECT_ALIGN`] boundary, a multiple of it long, written at such an offset, goes
    /// direct; anything else, or a file system that refuses, is written the ordinary way.
    fn write_all_direct(&mut self, buf: &[u8]) -> Result<()> {
        self.write_all(buf)
    }
    /// Take the file at `path` as the object's next bytes without copying them: the tier
    /// moves the file into its own storage, and the object then reads as its adopted files,
    /// in order, followed by everything written. Only before the first write. Returns the
    /// adopted file opened for reading, or `None` when this tier cannot take it (another
    /// file system, a tier in memory), in which case the caller writes the bytes instead and
    /// the file stays where it is. The caller must not change the file after adopting it.
    fn adopt(&mut self, _path: &Path) -> Result<Option<File>> {
        Ok(None)
    }
    /// Make the object visible under its key, atomically replacing any older one.
    fn commit(self: Box<Self>) -> Result<()>;
}

/// Alignment of a buffer, its length and its file offset for
/// [`ObjectWriter::write_all_direct`] to bypass the page cache.
pub const DIRECT_ALIGN: usize = 4096;

/// A stored object opened for reading.
pub trait ObjectReader: Send + Sync {
    fn len(&self) -> u64;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Fill `buf` from byte `offset`; a short object is an error.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()>;
    /// The stored files holding a run of the object's bytes as they are, as (offset in the
    /// object, length, path): its adopted files (see [`ObjectWriter::adopt`]). Empty for
    /// an object written as a whole.
    fn files(&self) -> Vec<(u64, u64, PathBuf)> {
        Vec::new()
    }
    /// Every file the object's bytes are kept in, in order, covering the object whole: what
    /// a reader may map instead of copying. Empty for a tier that keeps objects elsewhere.
    fn stored_files(&self) -> Vec<StoredFile<'_>> {
        Vec::new()
    }
}

/// One file holding the run `[start, start + len)` of an object's bytes from its offset 0.
#[derive(Debug, Clone, Copy)]
pub struct StoredFile<'a> {
    pub start: u64,
    pub len: u64,
    pub file: &'a File,
    pub path: &'a Path,
}

/// Whether a tier's contents are visible from one node or from all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    NodeLocal,
    Global,
}

/// A place checkpoints are stored.
pub trait Tier: Send + Sync {
    /// The configured name of the tier (`local`, `global`).
    fn label(&self) -> &str;
    fn scope(&self) -> Scope;
    /// Where the tier lives, for messages.
    fn location(&self) -> String;
    fn create(&self, key: &str) -> Result<Box<dyn ObjectWriter>>;
    fn open(&self, key: &str) -> Result<Box<dyn ObjectReader>>;
    /// Names of the direct children of `prefix` (empty if it does not exist), sorted.
    fn list(&self, prefix: &str) -> Result<Vec<String>>;
    fn exists(&self, key: &str) -> bool;
    /// Remove one object; a missing object is not an error.
    fn remove(&self, key: &str) -> Result<()>;
    /// Remove `prefix` and everything under it; a missing prefix is not an error.
    fn remove_all(&self, prefix: &str) -> Result<()>;

    /// Remove what crashed writers of `key` left behind (their unpublished temporary data).
    /// Only call it when no other writer of `key` can be running.
    fn remove_temporaries(&self, _key: &str) -> Result<()> {
        Ok(())
    }

    /// Store `bytes` under `key` atomically.
    fn put(&self, key: &str, bytes: &[u8]) -> Result<()> {
        let mut w = self.create(key)?;
        w.write_all(bytes)?;
        w.commit()
    }

    /// Store `bytes` under `key` only if no object is there: `Ok(false)`, changing nothing,
    /// when one is. Two callers racing for one key cannot both get `Ok(true)`. On a
    /// directory tier the object appears whole; in the shared-memory store a reader may see
    /// it empty or short for a moment, so a reader of such objects must treat those as being
    /// written.
    fn put_new(&self, key: &str, bytes: &[u8]) -> Result<bool>;

    /// Read a whole object.
    fn get(&self, key: &str) -> Result<Vec<u8>> {
        let r = self.open(key)?;
        let mut buf = vec![0u8; r.len() as usize];
        r.read_exact_at(&mut buf, 0)?;
        Ok(buf)
    }

    /// [`Tier::get`] of an object that may be at most `max` bytes (`what` it is, for the
    /// message): a larger one is refused before any of it is read, since its size comes
    /// from stored data.
    fn get_at_most(&self, key: &str, max: u64, what: &str) -> Result<Vec<u8>> {
        let r = self.open(key)?;
        if r.len() > max {
            return Err(TierError {
                tier: self.label().to_string(),
                what: "refused",
                path: PathBuf::from(format!("{}/{key}", self.location())),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{} bytes, more than a {what} may have ({max})", r.len()),
                ),
            });
        }
        let mut buf = vec![0u8; r.len() as usize];
        r.read_exact_at(&mut buf, 0)?;
        Ok(buf)
    }
}

/// Check a key: relative, slash-separated, no empty, `.` or `..` components, no NUL. Keys are
/// built by the engine from validated names, but this check is what makes a key taken from
/// stored data unable to escape the tier's root.
pub fn check_key(key: &str) -> std::result::Result<(), String> {
    if key.is_empty() || key.starts_with('/') || key.contains('\0') {
        return Err(format!("invalid object key {key:?}"));
    }
    if key
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err(format!("invalid object key {key:?}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Tier;
    use std::sync::Arc;

    /// `put_new` on any tier: it never replaces, and of racing callers exactly one wins.
    /// `after_first` runs once the first object is in place, alone.
    pub(crate) fn put_new_never_replaces_and_one_racer_wins<T: Tier + 'static>(
        t: Arc<T>,
        after_first: impl FnOnce(),
    ) {
        assert!(t.put_new("ck/lock", b"first").unwrap());
        assert!(!t.put_new("ck/lock", b"second").unwrap());
        assert_eq!(t.get("ck/lock").unwrap(), b"first");
        after_first();
        t.remove("ck/lock").unwrap();
        let wins: usize = (0..8)
            .map(|i| {
                let t = t.clone();
                std::thread::spawn(move || t.put_new("ck/lock", format!("{i}").as_bytes()).unwrap())
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap() as usize)
            .sum();
        assert_eq!(wins, 1);
        assert_eq!(t.get("ck/lock").unwrap().len(), 1);
    }

    #[test]
    fn keys_cannot_escape() {
        for bad in [
            "",
            "/etc/passwd",
            "a/../b",
            "..",
            "a//b",
            "./a",
            "a\0b",
            "a/",
        ] {
            assert!(super::check_key(bad).is_err(), "{bad:?} accepted");
        }
        super::check_key("heat/v10/rank3.ckpt").unwrap();
    }
}
