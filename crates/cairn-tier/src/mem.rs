//! [`MemTier`]: a node-local tier in the node's shared-memory chunk store (`cairn-shm`).
//!
//! Objects are files of the store under `.cairn/` (so they sit beside, and never among, the
//! files programs keep under the mount point through the interposer). As in [`DirTier`],
//! a writer fills `<key>.tmp.<pid>.<n>` and publishes it by renaming it, which the store does
//! atomically under its lock; the bytes go straight from the caller's buffer into
//! pre-faulted shared-memory chunks. The store outlives the processes of the job, so a
//! restarted job finds its checkpoints there; wiping the store is losing the node.
//!
//! [`DirTier`]: crate::DirTier

use crate::{check_key, ObjectReader, ObjectWriter, Result, Scope, Tier, TierError};
use cairn_shm::{FileHandle, FileType, Store, StoreConfig, StoreError};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Where the engine's objects live inside a store.
pub const ENGINE_DIR: &str = ".cairn";

static TMP_SEQ: AtomicU64 = AtomicU64::new(0);

/// A tier in a shared-memory chunk store.
#[derive(Debug)]
pub struct MemTier {
    label: String,
    store: Arc<Store>,
}

fn err(tier: &str, what: &'static str, key: &str, e: &StoreError) -> TierError {
    TierError {
        tier: tier.to_string(),
        what,
        path: PathBuf::from(format!("{ENGINE_DIR}/{key}")),
        source: e.to_io(),
    }
}

impl MemTier {
    /// Attach to (creating if needed) the store `cfg` names.
    pub fn open(label: &str, cfg: &StoreConfig) -> Result<MemTier> {
        let store = Store::open(cfg).map_err(|e| TierError {
            tier: label.to_string(),
            what: "cannot open the shared-memory store",
            path: PathBuf::from(format!("/dev/shm{}", cfg.name)),
            source: e.to_io(),
        })?;
        Ok(MemTier::over(label, Arc::new(store)))
    }

    /// A tier over a store already attached.
    pub fn over(label: &str, store: Arc<Store>) -> MemTier {
        MemTier {
            label: label.to_string(),
            store,
        }
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    fn path(&self, key: &str) -> Result<String> {
        check_key(key).map_err(|m| TierError {
            tier: self.label.clone(),
            what: "bad key",
            path: PathBuf::from(key),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, m),
        })?;
        Ok(format!("{ENGINE_DIR}/{key}"))
    }

    fn dir(&self, prefix: &str) -> Result<String> {
        if prefix.is_empty() {
            Ok(ENGINE_DIR.to_string())
        } else {
            self.path(prefix)
        }
    }
}

struct MemWriter {
    label: String,
    store: Arc<Store>,
    fh: FileHandle,
    tmp: String,
    dest: String,
    key: String,
    off: u64,
    committed: bool,
}

impl ObjectWriter for MemWriter {
    fn write_all(&mut self, buf: &[u8]) -> Result<()> {
        self.store
            .write_all_at(self.fh, buf, self.off)
            .map_err(|e| err(&self.label, "cannot write", &self.key, &e))?;
        self.off += buf.len() as u64;
        Ok(())
    }

    fn write_all_at(&mut self, buf: &[u8], offset: u64) -> Result<()> {
        self.store
            .write_all_at(self.fh, buf, offset)
            .map_err(|e| err(&self.label, "cannot write", &self.key, &e))
    }

    fn commit(mut self: Box<Self>) -> Result<()> {
        self.store
            .rename(&self.tmp, &self.dest)
            .map_err(|e| err(&self.label, "cannot publish", &self.key, &e))?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for MemWriter {
    fn drop(&mut self) {
        if !self.committed {
            let _ = self.store.unlink(&self.tmp);
        }
    }
}

struct MemReader {
    label: String,
    store: Arc<Store>,
    fh: FileHandle,
    len: u64,
    key: String,
}

impl ObjectReader for MemReader {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.store
            .read_exact_at(self.fh, buf, offset)
            .map_err(|e| err(&self.label, "cannot read", &self.key, &e))
    }
}

impl Tier for MemTier {
    fn label(&self) -> &str {
        &self.label
    }

    fn scope(&self) -> Scope {
        Scope::NodeLocal
    }

    fn location(&self) -> String {
        format!("shared memory /dev/shm{}", self.store.name())
    }

    fn create(&self, key: &str) -> Result<Box<dyn ObjectWriter>> {
        let dest = self.path(key)?;
        let seq = TMP_SEQ.fetch_add(1, Ordering::Relaxed);
        let tmp = format!("{dest}.tmp.{}.{seq}", std::process::id());
        let fh = self
            .store
            .create(&tmp, true)
            .map_err(|e| err(&self.label, "cannot create", key, &e))?;
        Ok(Box::new(MemWriter {
            label: self.label.clone(),
            store: self.store.clone(),
            fh,
            tmp,
            dest,
            key: key.to_string(),
            off: 0,
            committed: false,
        }))
    }

    fn put_new(&self, key: &str, bytes: &[u8]) -> Result<bool> {
        // The store has no link(2): the object is created exclusively and then written, so
        // a reader may see it empty or short until the write below (see the trait).
        let dest = self.path(key)?;
        let flags = cairn_shm::raw::O_CREAT | cairn_shm::raw::O_EXCL;
        let fh = match self.store.open_file(&dest, flags, 0o600) {
            Ok(fh) => fh,
            Err(e) if e.to_io().kind() == std::io::ErrorKind::AlreadyExists => return Ok(false),
            Err(e) => return Err(err(&self.label, "cannot create", key, &e)),
        };
        if let Err(e) = self.store.write_all_at(fh, bytes, 0) {
            let _ = self.store.unlink(&dest);
            return Err(err(&self.label, "cannot write", key, &e));
        }
        Ok(true)
    }

    fn open(&self, key: &str) -> Result<Box<dyn ObjectReader>> {
        let path = self.path(key)?;
        let fh = self
            .store
            .open_existing(&path)
            .map_err(|e| err(&self.label, "cannot open", key, &e))?;
        let len = self
            .store
            .fstat(fh)
            .map_err(|e| err(&self.label, "cannot stat", key, &e))?
            .size;
        Ok(Box::new(MemReader {
            label: self.label.clone(),
            store: self.store.clone(),
            fh,
            len,
            key: key.to_string(),
        }))
    }

    fn list(&self, prefix: &str) -> Result<Vec<String>> {
        let dir = self.dir(prefix)?;
        let mut names: Vec<String> = self
            .store
            .read_dir(&dir)
            .map_err(|e| err(&self.label, "cannot list", prefix, &e))?
            .into_iter()
            .map(|(n, _)| n)
            .filter(|n| !n.contains(".tmp."))
            .collect();
        names.sort();
        Ok(names)
    }

    fn exists(&self, key: &str) -> bool {
        self.path(key)
            .map(|p| self.store.stat(&p).is_ok())
            .unwrap_or(false)
    }

    fn remove(&self, key: &str) -> Result<()> {
        let path = self.path(key)?;
        match self.store.unlink(&path) {
            Err(e) if !e.is_not_found() => Err(err(&self.label, "cannot remove", key, &e)),
            _ => Ok(()),
        }
    }

    fn remove_all(&self, prefix: &str) -> Result<()> {
        let dir = self.path(prefix)?;
        let fail = |e: &StoreError| err(&self.label, "cannot remove", prefix, e);
        match self.store.stat(&dir) {
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(fail(&e)),
            Ok(st) if st.kind == FileType::File => {
                return self.store.unlink(&dir).map_err(|e| fail(&e));
            }
            Ok(_) => {}
        }
        for f in self.store.walk(&dir).map_err(|e| fail(&e))? {
            match self.store.unlink(&f) {
                Err(e) if !e.is_not_found() => return Err(fail(&e)),
                _ => {}
            }
        }
        Ok(())
    }

    fn remove_temporaries(&self, key: &str) -> Result<()> {
        let dest = self.path(key)?;
        let (dir, base) = dest.rsplit_once('/').expect("under ENGINE_DIR");
        let prefix = format!("{base}.tmp.");
        let names = self
            .store
            .read_dir(dir)
            .map_err(|e| err(&self.label, "cannot list", key, &e))?;
        for (n, _) in names {
            if n.starts_with(&prefix) {
                match self.store.unlink(&format!("{dir}/{n}")) {
                    Err(e) if !e.is_not_found() => {
                        return Err(err(&self.label, "cannot remove", key, &e))
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Scratch(String);
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = Store::wipe(&self.0, None);
        }
    }

    fn tier(tag: &str) -> (MemTier, Scratch) {
        let name = format!("/cairn-tier-test-{}-{tag}", std::process::id());
        let t = MemTier::open("local", &StoreConfig::new(&name, 8 << 20, 64 << 10)).unwrap();
        (t, Scratch(name))
    }

    #[test]
    fn objects_publish_atomically_and_list_like_a_directory() {
        let (t, _s) = tier("obj");
        let mut w = t.create("ck/v1/rank0.ckpt").unwrap();
        w.write_all(&[7u8; 100_000]).unwrap();
        // Not visible before the commit.
        assert!(!t.exists("ck/v1/rank0.ckpt"));
        assert!(t.list("ck/v1").unwrap().is_empty());
        w.commit().unwrap();
        t.put("ck/v1/manifest.json", b"{}").unwrap();
        t.put("ck/v2/manifest.json", b"{}").unwrap();
        assert_eq!(t.list("").unwrap(), vec!["ck"]);
        assert_eq!(t.list("ck").unwrap(), vec!["v1", "v2"]);
        assert_eq!(
            t.list("ck/v1").unwrap(),
            vec!["manifest.json", "rank0.ckpt"]
        );
        let r = t.open("ck/v1/rank0.ckpt").unwrap();
        assert_eq!(r.len(), 100_000);
        let mut b = vec![0u8; 10];
        r.read_exact_at(&mut b, 99_990).unwrap();
        assert_eq!(b, vec![7u8; 10]);
        assert!(r.read_exact_at(&mut b, 99_995).is_err());
        t.remove_all("ck/v1").unwrap();
        assert_eq!(t.list("ck").unwrap(), vec!["v2"]);
        t.remove("ck/v2/manifest.json").unwrap();
        t.remove("ck/v2/manifest.json").unwrap();
        assert!(t.list("").unwrap().is_empty());
        assert!(t.create("../x").is_err());
        let e = t.open("ck/none").err().unwrap();
        assert!(e.is_not_found(), "{e}");
    }

    #[test]
    fn put_new_never_replaces_and_one_racer_wins() {
        let (t, _s) = tier("new");
        crate::tests::put_new_never_replaces_and_one_racer_wins(Arc::new(t), || {});
    }

    #[test]
    fn dropped_and_crashed_writers_leave_nothing() {
        let (t, _s) = tier("tmp");
        let mut w = t.create("a/b").unwrap();
        w.write_all(b"half").unwrap();
        drop(w);
        assert!(t.store().walk("").unwrap().is_empty());
        // A writer that never ran its Drop (a killed process) leaves a temporary behind.
        let w = t.create("a/b").unwrap();
        std::mem::forget(w);
        assert_eq!(t.store().walk("").unwrap().len(), 1);
        assert!(t.list("a").unwrap().is_empty());
        t.remove_temporaries("a/b").unwrap();
        assert!(t.store().walk("").unwrap().is_empty());
    }

    #[test]
    fn a_full_store_is_an_error_and_keeps_what_it_holds() {
        let (t, _s) = tier("full");
        t.put("keep", &[1u8; 4 << 20]).unwrap();
        let mut w = t.create("big").unwrap();
        let e = w.write_all(&vec![2u8; 8 << 20]).err().unwrap();
        assert!(e.to_string().contains("No space"), "{e}");
        drop(w);
        assert_eq!(t.get("keep").unwrap(), vec![1u8; 4 << 20]);
    }
}
