//! [`CrashTier`]: tiers on a simulated machine that loses power, for testing that the engine
//! never loses a checkpoint it reported complete and never restores a damaged one.
//!
//! The model is SQLite's crash-test file system (`test6.c`): every change to a tier (an
//! object published, an object removed) is first only *pending*, as in a page cache. A
//! change becomes durable when its object is synced, which a tier opened with `fsync` does
//! at every publish, as [`DirTier`](crate::DirTier) does (the file, then its directory);
//! a tier without `fsync` never syncs. A seed chooses the sync at which the machine
//! crashes; at that moment each change still pending, in every tier of the machine, is
//! independently kept, dropped or torn (the object's name appears with its bytes cut short
//! or partly garbage), and every call after it fails, as on a machine that is gone.
//! [`CrashMachine::reboot`] then gives a machine holding what survived.
//!
//! Changes are synced per object, not all at once: a sync makes durable the pending changes
//! of its own key only, so a later synced object may survive while an earlier unsynced one
//! does not, which is what POSIX promises and no more.

use crate::{check_key, ObjectReader, ObjectWriter, Result, Scope, Tier, TierError};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

/// A change not yet durable.
#[derive(Debug, Clone)]
enum Change {
    Put(Arc<Vec<u8>>),
    Remove,
}

/// What the crash did to the changes pending when it came.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CrashReport {
    /// The sync the machine crashed at (counting from 1), 0 if it did not crash.
    pub at_sync: u64,
    pub kept: u32,
    pub dropped: u32,
    pub torn: u32,
}

#[derive(Debug)]
struct Machine {
    /// What readers see: "<disk>/<key>" -> bytes.
    live: BTreeMap<String, Arc<Vec<u8>>>,
    /// What a crash leaves, before the pending changes are decided.
    durable: BTreeMap<String, Arc<Vec<u8>>>,
    pending: Vec<(String, Change)>,
    syncs: u64,
    crash_at: u64,
    rng: fastrand::Rng,
    report: CrashReport,
}

impl Machine {
    fn crashed(&self) -> bool {
        self.report.at_sync != 0
    }

    /// Make the pending changes of `key` durable, or crash if this is the chosen sync.
    fn sync(&mut self, key: &str) -> std::result::Result<(), ()> {
        self.syncs += 1;
        if self.syncs == self.crash_at {
            self.crash();
            return Err(());
        }
        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|(k, _)| k == key);
        self.pending = rest;
        for (k, c) in mine {
            apply(&mut self.durable, k, c);
        }
        Ok(())
    }

    fn crash(&mut self) {
        self.report.at_sync = self.syncs.max(1);
        for (k, c) in std::mem::take(&mut self.pending) {
            match (self.rng.u32(0..3), c) {
                (0, c) => {
                    self.report.kept += 1;
                    apply(&mut self.durable, k, c);
                }
                (1, _) | (_, Change::Remove) => self.report.dropped += 1,
                (_, Change::Put(bytes)) => {
                    self.report.torn += 1;
                    let torn = tear(&mut self.rng, &bytes);
                    self.durable.insert(k, Arc::new(torn));
                }
            }
        }
        self.live.clear();
    }
}

fn apply(map: &mut BTreeMap<String, Arc<Vec<u8>>>, key: String, c: Change) {
    match c {
        Change::Put(b) => {
            map.insert(key, b);
        }
        Change::Remove => {
            map.remove(&key);
        }
    }
}

/// What a torn write leaves: the bytes cut short, or some 512-byte sectors of them garbage.
fn tear(rng: &mut fastrand::Rng, bytes: &[u8]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    if out.is_empty() || rng.bool() {
        out.truncate(rng.usize(0..=bytes.len().saturating_sub(1)));
        return out;
    }
    let sectors = out.len().div_ceil(512);
    for _ in 0..rng.usize(1..=sectors.min(4)) {
        let s = rng.usize(0..sectors) * 512;
        let end = (s + 512).min(out.len());
        rng.fill(&mut out[s..end]);
    }
    out
}

/// A simulated machine: the disks its tiers are on, and the crash to come.
#[derive(Debug)]
pub struct CrashMachine {
    m: Mutex<Machine>,
}

impl CrashMachine {
    /// A machine that crashes at its `crash_at`-th sync (never, if `None`), deciding the
    /// fate of pending changes with `seed`.
    pub fn new(seed: u64, crash_at: Option<u64>) -> Arc<CrashMachine> {
        Self::holding(BTreeMap::new(), seed, crash_at)
    }

    fn holding(
        contents: BTreeMap<String, Arc<Vec<u8>>>,
        seed: u64,
        crash_at: Option<u64>,
    ) -> Arc<CrashMachine> {
        Arc::new(CrashMachine {
            m: Mutex::new(Machine {
                live: contents.clone(),
                durable: contents,
                pending: Vec::new(),
                syncs: 0,
                crash_at: crash_at.unwrap_or(u64::MAX),
                rng: fastrand::Rng::with_seed(seed),
                report: CrashReport::default(),
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Machine> {
        // A panic elsewhere while holding the lock leaves consistent maps: every change is
        // one insert or remove.
        self.m.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A tier of this machine on disk `disk`, syncing every object it publishes if `fsync`.
    pub fn tier(self: &Arc<Self>, label: &str, disk: &str, scope: Scope, fsync: bool) -> CrashTier {
        CrashTier {
            machine: self.clone(),
            label: label.to_string(),
            disk: disk.to_string(),
            scope,
            fsync,
        }
    }

    /// How many syncs the machine has done.
    pub fn syncs(&self) -> u64 {
        self.lock().syncs
    }

    /// Crash now, if it has not: every pending change is kept, dropped or torn.
    pub fn crash(&self) {
        let mut m = self.lock();
        if !m.crashed() {
            m.crash();
        }
    }

    pub fn report(&self) -> CrashReport {
        self.lock().report
    }

    /// The machine after power comes back (crashing it first if it has not crashed): what
    /// survived on every disk, and no crash to come.
    pub fn reboot(&self) -> Arc<CrashMachine> {
        let mut m = self.lock();
        if !m.crashed() {
            m.crash();
        }
        let seed = m.rng.u64(..);
        Self::holding(m.durable.clone(), seed, None)
    }

    /// Lose `disk` whole: a node that does not come back.
    pub fn lose_disk(&self, disk: &str) {
        let prefix = format!("{disk}/");
        self.remove_where(|k| k.starts_with(&prefix));
    }

    /// Remove every object whose "<disk>/<key>" `doomed` accepts, as a person would by hand.
    pub fn remove_where(&self, doomed: impl Fn(&str) -> bool) {
        let mut m = self.lock();
        m.live.retain(|k, _| !doomed(k));
        m.durable.retain(|k, _| !doomed(k));
    }
}

/// One tier of a [`CrashMachine`].
#[derive(Debug, Clone)]
pub struct CrashTier {
    machine: Arc<CrashMachine>,
    label: String,
    disk: String,
    scope: Scope,
    fsync: bool,
}

impl CrashTier {
    fn full(&self, key: &str) -> Result<String> {
        check_key(key)
            .map_err(|e| self.err("bad key", key, std::io::ErrorKind::InvalidInput, &e))?;
        Ok(format!("{}/{key}", self.disk))
    }

    fn err(&self, what: &'static str, key: &str, kind: std::io::ErrorKind, msg: &str) -> TierError {
        TierError {
            tier: self.label.clone(),
            what,
            path: PathBuf::from(format!("{}/{key}", self.location())),
            source: std::io::Error::new(kind, msg.to_string()),
        }
    }

    fn down(&self, key: &str) -> TierError {
        self.err(
            "cannot reach",
            key,
            std::io::ErrorKind::Other,
            "the machine crashed",
        )
    }

    fn live(&self, key: &str) -> Result<MutexGuard<'_, Machine>> {
        let m = self.machine.lock();
        if m.crashed() {
            return Err(self.down(key));
        }
        Ok(m)
    }

    /// An error unless the machine is still up.
    fn up(&self, key: &str) -> Result<()> {
        self.live(key).map(drop)
    }

    /// Publish `bytes` under `key` (only if absent, with `only_new`), syncing it if the tier
    /// syncs.
    fn publish(&self, key: &str, bytes: Vec<u8>, only_new: bool) -> Result<bool> {
        let full = self.full(key)?;
        let mut m = self.live(key)?;
        if only_new && m.live.contains_key(&full) {
            return Ok(false);
        }
        let bytes = Arc::new(bytes);
        m.live.insert(full.clone(), bytes.clone());
        m.pending.push((full.clone(), Change::Put(bytes)));
        if self.fsync && m.sync(&full).is_err() {
            return Err(self.down(key));
        }
        Ok(true)
    }
}

impl Tier for CrashTier {
    fn label(&self) -> &str {
        &self.label
    }

    fn scope(&self) -> Scope {
        self.scope
    }

    fn location(&self) -> String {
        format!("crash:{}", self.disk)
    }

    fn create(&self, key: &str) -> Result<Box<dyn ObjectWriter>> {
        self.full(key)?;
        self.up(key)?;
        Ok(Box::new(CrashWriter {
            tier: self.clone(),
            key: key.to_string(),
            bytes: Vec::new(),
        }))
    }

    fn open(&self, key: &str) -> Result<Box<dyn ObjectReader>> {
        let full = self.full(key)?;
        let m = self.live(key)?;
        match m.live.get(&full) {
            Some(b) => Ok(Box::new(CrashReader {
                tier: self.clone(),
                key: key.to_string(),
                bytes: b.clone(),
            })),
            None => Err(self.err(
                "cannot open",
                key,
                std::io::ErrorKind::NotFound,
                "no such object",
            )),
        }
    }

    fn list(&self, prefix: &str) -> Result<Vec<String>> {
        let base = if prefix.is_empty() {
            format!("{}/", self.disk)
        } else {
            format!("{}/", self.full(prefix)?)
        };
        let m = self.live(prefix)?;
        let mut names: Vec<String> = m
            .live
            .range(base.clone()..)
            .take_while(|(k, _)| k.starts_with(&base))
            .filter_map(|(k, _)| k[base.len()..].split('/').next().map(str::to_string))
            .collect();
        names.dedup();
        Ok(names)
    }

    fn exists(&self, key: &str) -> bool {
        match (self.full(key), self.live(key)) {
            (Ok(full), Ok(m)) => m.live.contains_key(&full),
            _ => false,
        }
    }

    fn remove(&self, key: &str) -> Result<()> {
        let full = self.full(key)?;
        let mut m = self.live(key)?;
        if m.live.remove(&full).is_some() {
            m.pending.push((full, Change::Remove));
        }
        Ok(())
    }

    fn remove_all(&self, prefix: &str) -> Result<()> {
        let base = format!("{}/", self.full(prefix)?);
        let full = self.full(prefix)?;
        let mut m = self.live(prefix)?;
        let doomed: Vec<String> = m
            .live
            .keys()
            .filter(|k| k.starts_with(&base) || **k == full)
            .cloned()
            .collect();
        for k in doomed {
            m.live.remove(&k);
            m.pending.push((k, Change::Remove));
        }
        Ok(())
    }

    fn put_new(&self, key: &str, bytes: &[u8]) -> Result<bool> {
        self.publish(key, bytes.to_vec(), true)
    }
}

struct CrashWriter {
    tier: CrashTier,
    key: String,
    bytes: Vec<u8>,
}

impl ObjectWriter for CrashWriter {
    fn write_all(&mut self, buf: &[u8]) -> Result<()> {
        self.tier.up(&self.key)?;
        self.bytes.extend_from_slice(buf);
        Ok(())
    }

    fn write_all_at(&mut self, buf: &[u8], offset: u64) -> Result<()> {
        self.tier.up(&self.key)?;
        let end = offset as usize + buf.len();
        if self.bytes.len() < end {
            self.bytes.resize(end, 0);
        }
        self.bytes[offset as usize..end].copy_from_slice(buf);
        Ok(())
    }

    fn commit(self: Box<Self>) -> Result<()> {
        let CrashWriter { tier, key, bytes } = *self;
        tier.publish(&key, bytes, false).map(|_| ())
    }
}

struct CrashReader {
    tier: CrashTier,
    key: String,
    bytes: Arc<Vec<u8>>,
}

impl ObjectReader for CrashReader {
    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.tier.up(&self.key)?;
        let src = usize::try_from(offset)
            .ok()
            .and_then(|o| self.bytes.get(o..o.checked_add(buf.len())?));
        match src {
            Some(s) => {
                buf.copy_from_slice(s);
                Ok(())
            }
            None => Err(self.tier.err(
                "cannot read",
                &self.key,
                std::io::ErrorKind::UnexpectedEof,
                "short object",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synced_objects_survive_and_unsynced_ones_are_kept_dropped_or_torn() {
        let mut fates = CrashReport::default();
        for seed in 0..200 {
            let m = CrashMachine::new(seed, Some(3));
            let durable = m.tier("global", "g", Scope::Global, true);
            let cache = m.tier("local", "l", Scope::NodeLocal, false);
            let body = vec![7u8; 3000];
            durable.put("a/v1/x", &body).unwrap(); // sync 1
            cache.put("a/v1/x", &body).unwrap();
            cache.put("a/v2/x", &body).unwrap();
            durable.put("a/v2/x", &body).unwrap(); // sync 2
            durable.remove("a/v1/x").unwrap(); // pending
            assert!(durable.put("a/v3/x", &body).is_err(), "sync 3 crashes");
            assert!(
                durable.get("a/v2/x").is_err(),
                "nothing answers after the crash"
            );
            let r = m.report();
            assert_eq!((r.at_sync, r.kept + r.dropped + r.torn), (3, 4));
            fates.kept += r.kept;
            fates.dropped += r.dropped;
            fates.torn += r.torn;
            let after = m.reboot();
            let g = after.tier("global", "g", Scope::Global, true);
            assert_eq!(
                g.get("a/v2/x").unwrap(),
                body,
                "seed {seed}: a synced object"
            );
            for key in ["a/v3/x"] {
                if let Ok(b) = g.get(key) {
                    assert!(b.len() <= body.len());
                }
            }
            let l = after.tier("local", "l", Scope::NodeLocal, false);
            assert!(l.list("a").unwrap().len() <= 2);
        }
        assert!(
            fates.kept > 0 && fates.dropped > 0 && fates.torn > 0,
            "{fates:?}"
        );
    }

    #[test]
    fn listing_and_removal_follow_the_directory_tier() {
        let m = CrashMachine::new(1, None);
        let t = m.tier("global", "g", Scope::Global, true);
        t.put("ck/v1/manifest.json", b"{}").unwrap();
        t.put("ck/v2/rank-0", b"r").unwrap();
        t.put(".ck.lock", b"l").unwrap();
        assert_eq!(t.list("").unwrap(), vec![".ck.lock", "ck"]);
        assert_eq!(t.list("ck").unwrap(), vec!["v1", "v2"]);
        assert!(!t.put_new(".ck.lock", b"m").unwrap());
        t.remove_all("ck/v1").unwrap();
        assert_eq!(t.list("ck").unwrap(), vec!["v2"]);
        assert!(t.get("ck/v1/manifest.json").unwrap_err().is_not_found());
    }
}
