//! Files mapped into memory, for the file API: read-only to store a routed file that is
//! copied into a part, writable to restore a file straight into it.

use crate::error::{Error, ErrorKind, Result};
use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

fn io(e: std::io::Error, what: &str, path: &Path) -> Error {
    Error::new(ErrorKind::Io, format!("{what} {}: {e}", path.display()))
}

/// A file mapped into memory: read-only to store it, writable to restore into it.
pub(crate) struct Mapped {
    ptr: *mut u8,
    pub(crate) len: usize,
    _file: File,
}

// SAFETY: the mapping is owned by this value alone and freed in Drop; nothing else refers to
// the pointer, so moving it to another thread is sound.
unsafe impl Send for Mapped {}

impl Mapped {
    pub(crate) fn read(path: &Path) -> Result<Mapped> {
        let file = File::open(path).map_err(|e| io(e, "open", path))?;
        Mapped::read_file(file, path)
    }

    /// Map an open file read-only, its pages mapped in advance (it is about to be read
    /// through from start to end).
    pub(crate) fn read_file(file: File, path: &Path) -> Result<Mapped> {
        let md = file.metadata().map_err(|e| io(e, "stat", path))?;
        let len = usize::try_from(md.len()).map_err(|_| Error::invalid("file too large"))?;
        Mapped::map(
            file,
            len,
            libc::PROT_READ,
            libc::MAP_PRIVATE | libc::MAP_POPULATE,
            path,
        )
    }

    pub(crate) fn create(path: &Path, len: usize) -> Result<Mapped> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| io(e, "create", path))?;
        file.set_len(len as u64).map_err(|e| io(e, "size", path))?;
        Mapped::map(
            file,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            path,
        )
    }

    fn map(file: File, len: usize, prot: i32, flags: i32, path: &Path) -> Result<Mapped> {
        use std::os::fd::AsRawFd;
        let ptr = if len == 0 {
            std::ptr::null_mut()
        } else {
            // SAFETY: a fresh mapping of `len` bytes of an open file; the kernel picks the
            // address, and the result is checked.
            let p =
                unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, file.as_raw_fd(), 0) };
            if p == libc::MAP_FAILED {
                return Err(io(std::io::Error::last_os_error(), "map", path));
            }
            p.cast::<u8>()
        };
        Ok(Mapped {
            ptr,
            len,
            _file: file,
        })
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `ptr` maps `len` readable bytes for the life of self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl AsMut<[u8]> for Mapped {
    fn as_mut(&mut self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: buffers for restoring are writable shared mappings of `len` bytes, owned
        // by self and borrowed exclusively here.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: the mapping made in `map`, unmapped once.
            unsafe { libc::munmap(self.ptr.cast(), self.len) };
        }
    }
}
