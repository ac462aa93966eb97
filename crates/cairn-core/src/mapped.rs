//! Files mapped into memory, for the file API: read-only to store a routed file that is
//! copied into a part, writable to restore a file straight into it.

use crate::error::{Error, ErrorKind, Result};
use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

fn io(e: std::io::Error, what: &str, path: &Path) -> Error {
    Error::new(ErrorKind::Io, format!("{what} {}: {e}", path.display()))
}

/// A file mapped read-only (privately) into memory, to store it.
pub(crate) struct Mapped {
    map: memmap2::Mmap,
    _file: File,
}

impl Mapped {
    pub(crate) fn read(path: &Path) -> Result<Mapped> {
        let file = File::open(path).map_err(|e| io(e, "open", path))?;
        Mapped::read_file(file, path)
    }

    /// [`Mapped::read`] of a file that must be a regular file of its own: a symbolic link is
    /// not followed, and a FIFO or device is refused without blocking in `open`.
    pub(crate) fn read_regular(path: &Path) -> Result<Mapped> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| io(e, "open", path))?;
        let md = file.metadata().map_err(|e| io(e, "stat", path))?;
        if !md.is_file() {
            return Err(Error::invalid(format!(
                "{} is not a regular file",
                path.display()
            )));
        }
        Mapped::read_file(file, path)
    }

    /// Map an open file read-only, its pages mapped in advance (it is about to be read
    /// through from start to end).
    pub(crate) fn read_file(file: File, path: &Path) -> Result<Mapped> {
        Mapped::map(file, true, path)
    }

    /// [`Mapped::read_file`] without mapping the pages in advance: for a file that is
    /// probably never read (its block hashes are known), whose pages are then mapped only
    /// if and where it is.
    pub(crate) fn read_file_lazily(file: File, path: &Path) -> Result<Mapped> {
        Mapped::map(file, false, path)
    }

    fn map(file: File, populate: bool, path: &Path) -> Result<Mapped> {
        let md = file.metadata().map_err(|e| io(e, "stat", path))?;
        let len = usize::try_from(md.len()).map_err(|_| Error::invalid("file too large"))?;
        let mut o = memmap2::MmapOptions::new();
        o.len(len);
        if populate {
            o.populate();
        }
        // SAFETY: a private read-only mapping of the file's current length, read only while
        // `self` lives. The files mapped are the user's own (routed files, stored objects in
        // private directories); one truncated by another process while mapped would raise
        // SIGBUS where it is read, as with any mapping of a file.
        let map = unsafe { o.map_copy_read_only(&file) }.map_err(|e| io(e, "map", path))?;
        Ok(Mapped { map, _file: file })
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.map
    }
}

/// A file created and mapped shared and writable, to restore a file straight into it.
pub(crate) struct MappedMut {
    map: memmap2::MmapMut,
    _file: File,
}

impl MappedMut {
    pub(crate) fn create(path: &Path, len: usize) -> Result<MappedMut> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| io(e, "create", path))?;
        file.set_len(len as u64).map_err(|e| io(e, "size", path))?;
        // SAFETY: a shared writable mapping of a file this call just created (create_new,
        // mode 0600) at exactly `len` bytes; no one else has it open to truncate it.
        let map = unsafe { memmap2::MmapOptions::new().len(len).map_mut(&file) }
            .map_err(|e| io(e, "map", path))?;
        Ok(MappedMut { map, _file: file })
    }
}

impl AsMut<[u8]> for MappedMut {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.map[..]
    }
}

/// A stored object's files mapped read-only, so that runs of its bytes can be handed to a
/// send or an encoder without reading them into a buffer first.
pub(crate) struct MappedObject {
    /// (offset in the object, bytes of the object in this file, the file's mapping).
    maps: Vec<(u64, usize, Mapped)>,
}

impl MappedObject {
    /// The mapping of `r`, or None where the tier does not keep it in files of its own or a
    /// file cannot be mapped: then it is read instead.
    pub(crate) fn of(r: &dyn cairn_tier::ObjectReader) -> Option<MappedObject> {
        let files = r.stored_files();
        if files.is_empty() {
            return None;
        }
        let mut maps = Vec::with_capacity(files.len());
        for f in files {
            let m = Mapped::read_file(f.file.try_clone().ok()?, f.path).ok()?;
            let len = usize::try_from(f.len).ok()?;
            if m.bytes().len() < len {
                return None;
            }
            maps.push((f.start, len, m));
        }
        Some(MappedObject { maps })
    }

    /// Bytes `[off, off + len)` of the object when they lie in one of its files.
    pub(crate) fn get(&self, off: u64, len: usize) -> Option<&[u8]> {
        let i = self
            .maps
            .partition_point(|(start, n, _)| start + *n as u64 <= off);
        let (start, n, m) = self.maps.get(i)?;
        let at = usize::try_from(off.checked_sub(*start)?).ok()?;
        m.bytes()[..*n].get(at..at.checked_add(len)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_tier::{DirTier, Tier};

    #[test]
    fn a_mapped_object_hands_out_runs_inside_one_file_only() {
        let dir = tempfile::tempdir().unwrap();
        let tier = DirTier::new("local", dir.path().join("t"), false).unwrap();
        // An object of an adopted 8-byte file followed by 4 bytes written for it.
        let routed = dir.path().join("t").join("routed");
        std::fs::write(&routed, b"abcdefgh").unwrap();
        let mut w = tier.create("ck/obj").unwrap();
        assert!(w.adopt(&routed).unwrap().is_some());
        w.write_all(b"IJKL").unwrap();
        w.commit().unwrap();
        let r = tier.open("ck/obj").unwrap();
        let v = MappedObject::of(&*r).expect("a directory tier's object can be mapped");
        assert_eq!(v.get(0, 8), Some(&b"abcdefgh"[..]));
        assert_eq!(v.get(2, 3), Some(&b"cde"[..]));
        assert_eq!(v.get(8, 4), Some(&b"IJKL"[..]));
        // Across the two files, or past the end: read instead.
        assert_eq!(v.get(6, 4), None);
        assert_eq!(v.get(10, 4), None);
        assert_eq!(v.get(12, 1), None);
        // What a read of the object gives, byte for byte.
        let mut all = vec![0u8; 12];
        r.read_exact_at(&mut all, 0).unwrap();
        assert_eq!(&all, b"abcdefghIJKL");
    }
}
