//! [`DirTier`]: a tier over a directory tree, private to the user.
//!
//! Objects are files under the root; a writer fills `<name>.tmp.<pid>.<n>` and publishes it by
//! `rename(2)`, which is atomic within one file system. Directories are created 0700 and files
//! 0600. With `fsync` on (the default for the global tier), the file is synced before the
//! rename and the directory after it, so a published object survives a node crash; node-local
//! tiers skip it because they are lost with the node anyway and checksums catch torn data.

use crate::{check_key, ObjectReader, ObjectWriter, Result, Scope, StoredFile, Tier, TierError};
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static TMP_SEQ: AtomicU64 = AtomicU64::new(0);

/// Adopted file `i` of an object is stored beside it as `<object>~seg<i>` (`~` is in no key,
/// so the name is never an object's).
const SEG_MARK: &str = "~seg";

fn seg_path(object: &Path, i: usize) -> PathBuf {
    let mut p = object.as_os_str().to_os_string();
    p.push(format!("{SEG_MARK}{i}"));
    PathBuf::from(p)
}

/// Remove the adopted files of `object` from number `from` on (they are numbered without
/// gaps).
fn remove_segs(label: &str, object: &Path, from: usize) -> Result<()> {
    for i in from.. {
        let p = seg_path(object, i);
        match fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(err(label, "cannot remove", &p, e)),
        }
    }
    Ok(())
}

/// A tier stored in a directory.
#[derive(Debug)]
pub struct DirTier {
    label: String,
    root: PathBuf,
    fsync: bool,
    scope: Scope,
    /// Opened to write (its directories may be made and made private), or only to read.
    writable: bool,
}

fn err(tier: &str, what: &'static str, path: &Path, source: std::io::Error) -> TierError {
    TierError {
        tier: tier.to_string(),
        what,
        path: path.to_path_buf(),
        source,
    }
}

fn current_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Create `dir` and its missing parents with mode 0700. An existing directory must belong to
/// this user, so another user cannot plant a directory (or a symlink to one) where our
/// checkpoints will go.
pub(crate) fn make_private_dir(label: &str, dir: &Path) -> Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| err(label, "cannot create directory", dir, e))?;
    let md = fs::symlink_metadata(dir).map_err(|e| err(label, "cannot stat", dir, e))?;
    check_private_dir(label, dir, &md, 0o077)
}

/// `base/rel`, after walking the directories of `rel` below `base` (a place trusted but not
/// owned whole: `/tmp`, `/dev/shm`, a tier's node directory): each that exists must be a
/// directory, not a symbolic link, and this user's (one others may write is made 0700);
/// missing ones are made, 0700. `rel` must be relative, without `..`.
pub fn private_dirs(label: &str, base: &Path, rel: &Path) -> Result<PathBuf> {
    let mut dir = base.to_path_buf();
    for part in rel.components() {
        let std::path::Component::Normal(part) = part else {
            let e = std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a plain relative path",
            );
            return Err(err(label, "refusing directory", &base.join(rel), e));
        };
        dir.push(part);
        if let Err(e) = DirBuilder::new().mode(0o700).create(&dir) {
            if e.kind() != std::io::ErrorKind::AlreadyExists {
                return Err(err(label, "cannot create directory", &dir, e));
            }
        }
        let md = fs::symlink_metadata(&dir).map_err(|e| err(label, "cannot stat", &dir, e))?;
        check_private_dir(label, &dir, &md, 0o077)?;
    }
    Ok(dir)
}

/// A directory (`md` from `symlink_metadata`) where checkpoints go, or that leads to them:
/// not a symbolic link, a directory, and this user's; one with any of the mode bits
/// `make_private` (group and other bits, or 0 to change nothing) is made 0700.
fn check_private_dir(label: &str, dir: &Path, md: &fs::Metadata, make_private: u32) -> Result<()> {
    let refuse = |why: String| {
        let e = std::io::Error::new(std::io::ErrorKind::PermissionDenied, why);
        Err(err(label, "refusing directory", dir, e))
    };
    if md.file_type().is_symlink() {
        return refuse("a symbolic link (symlinks are not followed)".into());
    }
    if !md.is_dir() {
        return refuse("not a directory".into());
    }
    if md.uid() != current_uid() {
        return refuse(format!(
            "owned by uid {}, not by this user (uid {}): its owner could plant files in it",
            md.uid(),
            current_uid()
        ));
    }
    if md.mode() & make_private != 0 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| err(label, "cannot make private", dir, e))?;
    }
    Ok(())
}

impl DirTier {
    /// Open (creating if needed) a global-scope tier rooted at `root`.
    pub fn new(label: &str, root: impl Into<PathBuf>, fsync: bool) -> Result<DirTier> {
        Self::with_scope(label, root, fsync, Scope::Global)
    }

    /// Open (creating if needed) a tier rooted at `root` with the given scope.
    pub fn with_scope(
        label: &str,
        root: impl Into<PathBuf>,
        fsync: bool,
        scope: Scope,
    ) -> Result<DirTier> {
        let root = root.into();
        make_private_dir(label, &root)?;
        Ok(DirTier {
            label: label.to_string(),
            root,
            fsync,
            scope,
            writable: true,
        })
    }

    /// Open an existing tier for reading without creating or changing anything.
    pub fn open_existing(label: &str, root: impl Into<PathBuf>, scope: Scope) -> Result<DirTier> {
        let root = root.into();
        let md = fs::metadata(&root).map_err(|e| err(label, "cannot open", &root, e))?;
        if !md.is_dir() {
            let e = std::io::Error::other("not a directory");
            return Err(err(label, "cannot open", &root, e));
        }
        Ok(DirTier {
            label: label.to_string(),
            root,
            fsync: false,
            scope,
            writable: false,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The path of `key`, after walking the directories it passes through below the root
    /// (every component but the last, or all of them when `key` names a directory): each that
    /// exists must be a directory, not a symbolic link, and this user's; one others may
    /// write is made private (0700) when the tier is writable. With `create`, missing ones
    /// are made, 0700. The root itself was checked when the tier was opened, and no other
    /// user can change what lies in a directory that is ours and private, so nothing can be
    /// swapped in after the walk.
    fn walk(&self, key: &str, (key_is_dir, create): (bool, bool)) -> Result<PathBuf> {
        check_key(key).map_err(|m| {
            err(
                &self.label,
                "bad key",
                Path::new(key),
                std::io::Error::new(std::io::ErrorKind::InvalidInput, m),
            )
        })?;
        let parts: Vec<&str> = key.split('/').collect();
        let dirs = if key_is_dir {
            parts.len()
        } else {
            parts.len() - 1
        };
        let mut dir = self.root.clone();
        for part in &parts[..dirs] {
            dir.push(part);
            let md = match fs::symlink_metadata(&dir) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                    match DirBuilder::new().mode(0o700).create(&dir) {
                        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                            return Err(err(&self.label, "cannot create directory", &dir, e))
                        }
                        _ => fs::symlink_metadata(&dir),
                    }
                }
                other => other,
            };
            match md {
                // A writing tier makes private what others may write; a reading one changes
                // nothing.
                Ok(md) => {
                    let fix = if self.writable { 0o022 } else { 0 };
                    check_private_dir(&self.label, &dir, &md, fix)?
                }
                // Nothing below a missing directory exists either.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                Err(e) => return Err(err(&self.label, "cannot stat", &dir, e)),
            }
        }
        Ok(self.root.join(key))
    }

    fn path(&self, key: &str) -> Result<PathBuf> {
        self.walk(key, (false, false))
    }

    fn writer(&self, key: &str) -> Result<DirWriter> {
        let dest = self.walk(key, (false, true))?;
        let seq = TMP_SEQ.fetch_add(1, Ordering::Relaxed);
        let mut tmp = dest.clone().into_os_string();
        tmp.push(format!(".tmp.{}.{}", std::process::id(), seq));
        let tmp = PathBuf::from(tmp);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .map_err(|e| err(&self.label, "cannot create", &tmp, e))?;
        Ok(DirWriter {
            label: self.label.clone(),
            file: Some(file),
            tmp,
            dest,
            fsync: self.fsync,
            pos: 0,
            direct: Some(false),
            segs: Vec::new(),
        })
    }
}

struct DirWriter {
    label: String,
    file: Option<File>,
    tmp: PathBuf,
    dest: PathBuf,
    fsync: bool,
    /// Where `write_all` appends.
    pos: u64,
    /// Whether `O_DIRECT` is set on the file now; `None` once the file system refused it.
    direct: Option<bool>,
    /// Adopted files, under their temporary names, in order.
    segs: Vec<PathBuf>,
}

impl DirWriter {
    /// Set or clear `O_DIRECT`; false when the file system refuses (never asked again).
    fn set_direct(&mut self, on: bool) -> bool {
        if self.direct.is_none() {
            return false;
        }
        if self.direct == Some(on) {
            return true;
        }
        let fd = self
            .file
            .as_ref()
            .expect("writer used after commit")
            .as_raw_fd();
        // SAFETY: fcntl on a descriptor this writer owns, with integer arguments only.
        let ok = unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            let want = if on {
                flags | libc::O_DIRECT
            } else {
                flags & !libc::O_DIRECT
            };
            flags >= 0 && libc::fcntl(fd, libc::F_SETFL, want) == 0
        };
        self.direct = if ok { Some(on) } else { None };
        ok
    }
}

impl ObjectWriter for DirWriter {
    fn write_all(&mut self, buf: &[u8]) -> Result<()> {
        if self.direct == Some(true) {
            self.set_direct(false);
        }
        let f = self.file.as_mut().expect("writer used after commit");
        f.write_all(buf)
            .map_err(|e| err(&self.label, "cannot write", &self.tmp, e))?;
        self.pos += buf.len() as u64;
        Ok(())
    }

    fn write_all_direct(&mut self, buf: &[u8]) -> Result<()> {
        let a = crate::DIRECT_ALIGN;
        let aligned =
            (buf.as_ptr() as usize) % a == 0 && buf.len() % a == 0 && self.pos % a as u64 == 0;
        if !aligned || buf.is_empty() || !self.set_direct(true) {
            return self.write_all(buf);
        }
        let f = self.file.as_mut().expect("writer used after commit");
        match f.write_all(buf) {
            Ok(()) => {
                self.pos += buf.len() as u64;
                Ok(())
            }
            // Some file systems accept the flag and refuse the write; nothing was written
            // (a direct write is all or nothing for one aligned request of a regular file,
            // and the position tells): write it the ordinary way from here on.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                let at = f
                    .stream_position()
                    .map_err(|e| err(&self.label, "cannot write", &self.tmp, e))?;
                if at != self.pos {
                    return Err(err(&self.label, "cannot write", &self.tmp, e));
                }
                self.set_direct(false);
                self.direct = None;
                self.write_all(buf)
            }
            Err(e) => Err(err(&self.label, "cannot write", &self.tmp, e)),
        }
    }

    fn write_all_at(&mut self, buf: &[u8], offset: u64) -> Result<()> {
        if self.direct == Some(true) {
            self.set_direct(false);
        }
        let f = self.file.as_ref().expect("writer used after commit");
        f.write_all_at(buf, offset)
            .map_err(|e| err(&self.label, "cannot write", &self.tmp, e))
    }

    fn adopt(&mut self, path: &Path) -> Result<Option<File>> {
        let refuse = |why: &str| {
            let e = std::io::Error::new(std::io::ErrorKind::InvalidInput, why.to_string());
            Err(err(&self.label, "cannot adopt", path, e))
        };
        if self.pos > 0 {
            return refuse("the object already has written bytes");
        }
        let f = self.file.as_ref().expect("writer used after commit");
        let here = f
            .metadata()
            .map_err(|e| err(&self.label, "cannot stat", &self.tmp, e))?;
        let md =
            fs::symlink_metadata(path).map_err(|e| err(&self.label, "cannot stat", path, e))?;
        if !md.file_type().is_file() {
            return refuse("not a regular file");
        }
        if md.uid() != current_uid() || md.dev() != here.dev() {
            // Someone else's file is never taken over; another file system cannot be.
            return Ok(None);
        }
        let mut seg = seg_path(&self.tmp, self.segs.len());
        match fs::rename(path, &seg) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EXDEV) => return Ok(None),
            Err(e) => return Err(err(&self.label, "cannot adopt", path, e)),
        }
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&seg)
            .and_then(|file| {
                file.set_permissions(fs::Permissions::from_mode(0o600))?;
                Ok(file)
            });
        match file {
            Ok(file) => {
                self.segs.push(std::mem::take(&mut seg));
                Ok(Some(file))
            }
            Err(e) => {
                let _ = fs::remove_file(&seg);
                Err(err(&self.label, "cannot open", &seg, e))
            }
        }
    }

    fn commit(mut self: Box<Self>) -> Result<()> {
        let f = self.file.take().expect("writer committed twice");
        if self.fsync {
            f.sync_all()
                .map_err(|e| err(&self.label, "cannot sync", &self.tmp, e))?;
            for s in &self.segs {
                File::open(s)
                    .and_then(|f| f.sync_all())
                    .map_err(|e| err(&self.label, "cannot sync", s, e))?;
            }
        }
        drop(f);
        // The adopted files go in place first, then any left by an older object of this key
        // with more of them, and the object itself last: once it is visible, so are they.
        for (i, s) in self.segs.iter().enumerate() {
            let to = seg_path(&self.dest, i);
            fs::rename(s, &to).map_err(|e| err(&self.label, "cannot publish", &to, e))?;
        }
        remove_segs(&self.label, &self.dest, self.segs.len())?;
        fs::rename(&self.tmp, &self.dest)
            .map_err(|e| err(&self.label, "cannot publish", &self.dest, e))?;
        if self.fsync {
            sync_parent(&self.label, &self.dest)?;
        }
        Ok(())
    }
}

/// Sync the directory holding `path`, so that a name just made there survives a crash.
fn sync_parent(label: &str, path: &Path) -> Result<()> {
    match path.parent() {
        Some(parent) => File::open(parent)
            .and_then(|d| d.sync_all())
            .map_err(|e| err(label, "cannot sync directory", parent, e)),
        None => Ok(()),
    }
}

impl Drop for DirWriter {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = fs::remove_file(&self.tmp);
            for s in &self.segs {
                let _ = fs::remove_file(s);
            }
        }
    }
}

/// One stored file of an object: where its bytes start in the object.
struct Piece {
    file: File,
    start: u64,
    len: u64,
    path: PathBuf,
}

/// An object: its adopted files, if any, then the file written for it.
struct DirReader {
    label: String,
    pieces: Vec<Piece>,
    len: u64,
}

impl ObjectReader for DirReader {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let mut done = 0usize;
        // The first piece that ends after `offset`.
        let mut i = self.pieces.partition_point(|p| p.start + p.len <= offset);
        while done < buf.len() {
            let at = offset + done as u64;
            let Some(p) = self.pieces.get(i) else {
                let e = std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
                let path = &self.pieces.last().expect("an object has a file").path;
                return Err(err(&self.label, "cannot read", path, e));
            };
            let n = ((p.start + p.len - at) as usize).min(buf.len() - done);
            p.file
                .read_exact_at(&mut buf[done..done + n], at - p.start)
                .map_err(|e| err(&self.label, "cannot read", &p.path, e))?;
            done += n;
            i += 1;
        }
        Ok(())
    }

    fn files(&self) -> Vec<(u64, u64, PathBuf)> {
        // All but the last, the file written for the object itself.
        let mut all = self.stored_files();
        all.pop();
        all.into_iter()
            .map(|f| (f.start, f.len, f.path.to_path_buf()))
            .collect()
    }

    fn stored_files(&self) -> Vec<StoredFile<'_>> {
        self.pieces
            .iter()
            .map(|p| StoredFile {
                start: p.start,
                len: p.len,
                file: &p.file,
                path: &p.path,
            })
            .collect()
    }
}

impl Tier for DirTier {
    fn label(&self) -> &str {
        &self.label
    }

    fn scope(&self) -> Scope {
        self.scope
    }

    fn location(&self) -> String {
        self.root.display().to_string()
    }

    fn create(&self, key: &str) -> Result<Box<dyn ObjectWriter>> {
        Ok(Box::new(self.writer(key)?))
    }

    fn put_new(&self, key: &str, bytes: &[u8]) -> Result<bool> {
        // Written whole under a temporary name, then linked to the key: link(2) never
        // replaces, so of two racing callers one fails with EEXIST, and no reader sees the
        // object before its bytes.
        let mut w = self.writer(key)?;
        w.write_all(bytes)?;
        let f = w.file.take().expect("fresh writer");
        if w.fsync {
            f.sync_all()
                .map_err(|e| err(&self.label, "cannot sync", &w.tmp, e))?;
        }
        drop(f);
        let linked = fs::hard_link(&w.tmp, &w.dest);
        let _ = fs::remove_file(&w.tmp);
        match linked {
            Ok(()) => {
                if w.fsync {
                    sync_parent(&self.label, &w.dest)?;
                }
                Ok(true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(err(&self.label, "cannot publish", &w.dest, e)),
        }
    }

    fn open(&self, key: &str) -> Result<Box<dyn ObjectReader>> {
        let path = self.path(key)?;
        // Not a symbolic link, and not a FIFO or device either: one planted in place of an
        // object must not hold the reader in open(2) (O_NONBLOCK) or be read from.
        let open = |path: PathBuf, start: u64| -> std::io::Result<Piece> {
            let file = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(&path)?;
            let md = file.metadata()?;
            if !md.file_type().is_file() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "not a regular file",
                ));
            }
            let len = md.len();
            Ok(Piece {
                file,
                start,
                len,
                path,
            })
        };
        // The object first (it is published last), then its adopted files in order.
        let last = open(path.clone(), 0).map_err(|e| err(&self.label, "cannot open", &path, e))?;
        let mut pieces = Vec::new();
        let mut start = 0;
        loop {
            let p = seg_path(&path, pieces.len());
            match open(p.clone(), start) {
                Ok(piece) => {
                    start += piece.len;
                    pieces.push(piece);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                Err(e) => return Err(err(&self.label, "cannot open", &p, e)),
            }
        }
        let len = start + last.len;
        pieces.push(Piece { start, ..last });
        Ok(Box::new(DirReader {
            label: self.label.clone(),
            pieces,
            len,
        }))
    }

    fn remove_temporaries(&self, key: &str) -> Result<()> {
        let dest = self.path(key)?;
        let (Some(dir), Some(base)) = (dest.parent(), dest.file_name()) else {
            return Ok(());
        };
        let mut prefix = base.to_os_string();
        prefix.push(".tmp.");
        let prefix = prefix.as_encoded_bytes();
        let rd = match fs::read_dir(dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(err(&self.label, "cannot list", dir, e)),
        };
        for entry in rd.flatten() {
            if entry.file_name().as_encoded_bytes().starts_with(prefix) {
                let p = entry.path();
                match fs::remove_file(&p) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(err(&self.label, "cannot remove", &p, e))
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    fn list(&self, prefix: &str) -> Result<Vec<String>> {
        let dir = if prefix.is_empty() {
            self.root.clone()
        } else {
            self.walk(prefix, (true, false))?
        };
        let rd = match fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(err(&self.label, "cannot list", &dir, e)),
        };
        let mut names: Vec<String> = rd
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| !n.contains(".tmp.") && !n.contains(SEG_MARK))
            .collect();
        names.sort();
        Ok(names)
    }

    fn exists(&self, key: &str) -> bool {
        self.path(key).map(|p| p.exists()).unwrap_or(false)
    }

    fn remove(&self, key: &str) -> Result<()> {
        let path = self.path(key)?;
        match fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(err(&self.label, "cannot remove", &path, e))
            }
            _ => remove_segs(&self.label, &path, 0),
        }
    }

    fn remove_all(&self, prefix: &str) -> Result<()> {
        let path = self.walk(prefix, (true, false))?;
        match fs::remove_dir_all(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(err(&self.label, "cannot remove", &path, e))
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_writes_mixed_with_ordinary_ones_store_the_same_bytes() {
        // On a disk file system the aligned pieces bypass the page cache; on tmpfs (or one
        // that refuses O_DIRECT) they are written the ordinary way. Either way the object
        // must hold exactly what was written, in order.
        let a = crate::DIRECT_ALIGN;
        let mut backing = vec![0u8; 5 * a + 3 * a];
        let off = backing.as_ptr().align_offset(a);
        let buf = &mut backing[off..off + 5 * a];
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (i * 31 + i / 4096) as u8;
        }
        let mut want = Vec::new();
        for dir in [std::env::temp_dir(), PathBuf::from("/dev/shm")] {
            if !dir.is_dir() {
                continue;
            }
            let d = tempfile::tempdir_in(dir).unwrap();
            let t = DirTier::new("global", d.path().join("r"), true).unwrap();
            let mut w = t.create("v/x").unwrap();
            want.clear();
            for piece in [&buf[..2 * a], &buf[..3], &buf[..a], &buf[a..a + 7]] {
                w.write_all_direct(piece).unwrap();
                want.extend_from_slice(piece);
            }
            // Back on an aligned offset: direct again.
            let pad = a - want.len() % a;
            w.write_all(&vec![9u8; pad]).unwrap();
            want.extend_from_slice(&vec![9u8; pad]);
            w.write_all_direct(&buf[..3 * a]).unwrap();
            want.extend_from_slice(&buf[..3 * a]);
            w.write_all_at(b"head", 1).unwrap();
            want[1..5].copy_from_slice(b"head");
            w.commit().unwrap();
            assert_eq!(t.get("v/x").unwrap(), want, "in {}", d.path().display());
        }
    }

    #[test]
    fn put_new_never_replaces_and_one_racer_wins() {
        let d = tempfile::tempdir().unwrap();
        let t = DirTier::new("global", d.path().join("r"), true).unwrap();
        let t = std::sync::Arc::new(t);
        crate::tests::put_new_never_replaces_and_one_racer_wins(t.clone(), || {
            // Nothing but the object is left: no temporary of any call.
            assert_eq!(fs::read_dir(d.path().join("r/ck")).unwrap().count(), 1);
        });
    }

    #[test]
    fn uncommitted_writes_leave_nothing() {
        let d = tempfile::tempdir().unwrap();
        let t = DirTier::new("local", d.path().join("r"), false).unwrap();
        let mut w = t.create("a/b").unwrap();
        w.write_all(b"partial").unwrap();
        drop(w);
        assert!(!t.exists("a/b"));
        assert_eq!(
            fs::read_dir(d.path().join("r/a")).unwrap().count(),
            0,
            "temporary file left behind"
        );
    }

    #[test]
    fn temporaries_of_a_crashed_writer_are_removed() {
        let d = tempfile::tempdir().unwrap();
        let t = DirTier::new("global", d.path().join("r"), false).unwrap();
        t.put("v1/rank1.ckpt", b"kept").unwrap();
        t.put("v1/rank10.ckpt", b"kept too").unwrap();
        // What a killed process leaves: its temporary file, never renamed.
        let w = t.create("v1/rank1.ckpt").unwrap();
        std::mem::forget(w);
        fs::write(d.path().join("r/v1/rank10.ckpt.tmp.1.2"), b"other key").unwrap();
        t.remove_temporaries("v1/rank1.ckpt").unwrap();
        let mut left: Vec<String> = fs::read_dir(d.path().join("r/v1"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["rank1.ckpt", "rank10.ckpt", "rank10.ckpt.tmp.1.2"]);
        t.remove_temporaries("v9/rank1.ckpt").unwrap();
    }

    #[test]
    fn objects_and_dirs_are_private() {
        let d = tempfile::tempdir().unwrap();
        let t = DirTier::new("global", d.path().join("r"), true).unwrap();
        t.put("x/y", b"123").unwrap();
        let fmode = fs::metadata(d.path().join("r/x/y")).unwrap().mode() & 0o777;
        let dmode = fs::metadata(d.path().join("r/x")).unwrap().mode() & 0o777;
        assert_eq!((fmode, dmode), (0o600, 0o700));
        let r = t.open("x/y").unwrap();
        let mut b = [0u8; 2];
        r.read_exact_at(&mut b, 1).unwrap();
        assert_eq!(&b, b"23");
        assert!(r.read_exact_at(&mut b, 2).is_err(), "short read accepted");
    }

    /// Directories below the root: a symbolic link in place of a name directory is not
    /// followed (nothing is written to, read from or listed in its target), one of another
    /// user is refused even when anyone may write it, and one of ours that others may write
    /// is made private.
    #[test]
    fn name_directories_are_walked_without_links_and_must_be_ours() {
        let d = tempfile::tempdir().unwrap();
        let t = DirTier::new("local", d.path().join("r"), false).unwrap();
        fs::create_dir(d.path().join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(d.path().join("elsewhere"), d.path().join("r/ck")).unwrap();
        let e = t.put("ck/v1/rank0.ckpt", b"x").unwrap_err().to_string();
        assert!(e.contains("a symbolic link"), "{e}");
        assert_eq!(fs::read_dir(d.path().join("elsewhere")).unwrap().count(), 0);
        fs::create_dir_all(d.path().join("elsewhere/v1")).unwrap();
        fs::write(d.path().join("elsewhere/v1/rank0.ckpt"), b"planted").unwrap();
        assert!(t.open("ck/v1/rank0.ckpt").is_err());
        assert!(t.list("ck").is_err() && t.list("ck/v1").is_err());
        assert!(!t.exists("ck/v1/rank0.ckpt"));

        fs::create_dir(d.path().join("r/mine")).unwrap();
        fs::set_permissions(d.path().join("r/mine"), fs::Permissions::from_mode(0o777)).unwrap();
        t.put("mine/v1/rank0.ckpt", b"ok").unwrap();
        let mode = fs::metadata(d.path().join("r/mine")).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);

        // Another user's directory (only root can make one here).
        if current_uid() == 0 {
            let theirs = d.path().join("r/theirs");
            fs::create_dir(&theirs).unwrap();
            fs::set_permissions(&theirs, fs::Permissions::from_mode(0o777)).unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
            let e = t.put("theirs/v1/rank0.ckpt", b"x").unwrap_err().to_string();
            assert!(e.contains("owned by uid 65534"), "{e}");
            assert_eq!(fs::read_dir(&theirs).unwrap().count(), 0);
        }
    }

    #[test]
    fn symlinked_root_is_refused() {
        let d = tempfile::tempdir().unwrap();
        fs::create_dir(d.path().join("real")).unwrap();
        std::os::unix::fs::symlink(d.path().join("real"), d.path().join("link")).unwrap();
        let e = DirTier::new("local", d.path().join("link"), false).unwrap_err();
        assert!(e.to_string().contains("symlink"), "{e}");
    }

    #[test]
    fn remove_is_idempotent_and_bad_keys_fail() {
        let d = tempfile::tempdir().unwrap();
        let t = DirTier::new("local", d.path().join("r"), false).unwrap();
        t.remove("nope").unwrap();
        t.remove_all("nope/x").unwrap();
        assert!(t.create("../escape").is_err());
        assert!(t.list("..").is_err());
    }
}

#[cfg(test)]
mod adopt_tests {
    use super::*;

    #[test]
    fn adopted_files_read_as_the_head_of_their_object_and_go_with_it() {
        let d = tempfile::tempdir().unwrap();
        let tier = DirTier::new("local", d.path().join("t"), false).unwrap();
        let staged = d.path().join("t").join("staged");
        fs::create_dir_all(&staged).unwrap();
        let a = staged.join("a");
        let b = staged.join("b");
        fs::write(&a, b"first file ").unwrap();
        fs::write(&b, b"").unwrap();
        let c = staged.join("c");
        fs::write(&c, b"second ").unwrap();
        let mut w = tier.create("ck/v1/rank0.ckpt").unwrap();
        for p in [&a, &b, &c] {
            assert!(w.adopt(p).unwrap().is_some(), "{} not adopted", p.display());
            assert!(!p.exists(), "{} was copied, not moved", p.display());
        }
        w.write_all(b"and the rest").unwrap();
        let late = staged.join("late");
        fs::write(&late, b"x").unwrap();
        assert!(w.adopt(&late).is_err(), "adopted after a write");
        w.commit().unwrap();

        let r = tier.open("ck/v1/rank0.ckpt").unwrap();
        let want = b"first file second and the rest";
        assert_eq!(r.len(), want.len() as u64);
        let mut all = vec![0u8; want.len()];
        r.read_exact_at(&mut all, 0).unwrap();
        assert_eq!(&all, want);
        // A read spanning three stored files (one of them empty).
        let mut mid = vec![0u8; 12];
        r.read_exact_at(&mut mid, 6).unwrap();
        assert_eq!(&mid, b"file second ");
        assert!(r
            .read_exact_at(&mut [0u8; 2], want.len() as u64 - 1)
            .is_err());
        let files = r.files();
        assert_eq!(
            files.iter().map(|f| (f.0, f.1)).collect::<Vec<_>>(),
            vec![(0, 11), (11, 0), (11, 7)]
        );
        assert_eq!(fs::read(&files[2].2).unwrap(), b"second ");
        assert_eq!(
            fs::metadata(&files[0].2).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(tier.list("ck/v1").unwrap(), vec!["rank0.ckpt".to_string()]);

        // Replaced by an object written as a whole: the old adopted files go.
        tier.put("ck/v1/rank0.ckpt", b"plain").unwrap();
        let r = tier.open("ck/v1/rank0.ckpt").unwrap();
        assert_eq!(r.len(), 5);
        assert!(r.files().is_empty());
        assert!(!files[0].2.exists());

        // Removing an object removes its adopted files; an uncommitted writer leaves nothing.
        fs::write(&a, b"again").unwrap();
        let mut w = tier.create("ck/v2/rank0.ckpt").unwrap();
        w.adopt(&a).unwrap().unwrap();
        w.commit().unwrap();
        let seg = tier.open("ck/v2/rank0.ckpt").unwrap().files()[0].2.clone();
        tier.remove("ck/v2/rank0.ckpt").unwrap();
        assert!(!seg.exists());
        fs::write(&a, b"dropped").unwrap();
        let mut w = tier.create("ck/v3/rank0.ckpt").unwrap();
        w.adopt(&a).unwrap().unwrap();
        drop(w);
        assert!(tier.list("ck/v3").unwrap().is_empty());
        assert_eq!(fs::read_dir(d.path().join("t/ck/v3")).unwrap().count(), 0);
    }

    #[test]
    fn what_is_not_a_regular_file_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let tier = DirTier::new("local", d.path().join("t"), false).unwrap();
        let target = d.path().join("t/target");
        fs::write(&target, b"x").unwrap();
        let link = d.path().join("t/link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let mut w = tier.create("ck/v1/rank0.ckpt").unwrap();
        assert!(w.adopt(&link).is_err());
        assert!(w.adopt(&d.path().join("t")).is_err());
        assert!(w.adopt(&d.path().join("t/missing")).is_err());
        assert!(target.exists() && link.exists());
    }
}
