//! The job lock: one job at a time writes a checkpoint name into a tier.
//!
//! Two jobs writing checkpoint `heat` into the same directories delete each other's versions
//! through the cache window and leave manifests whose rank files are gone. So the first
//! collective call that names a checkpoint takes `.<name>.lock` on every tier the job
//! writes (each rank its node-local tier, rank 0 the global one), and the job holds it until
//! finalize.
//!
//! A lock records its holder: the job's id, which every rank of the job shares (so the ranks
//! of one job never refuse each other), and the host, kernel boot, pid namespace, pid and
//! start time of the process that took it. Whether the holder still runs is decided by
//! looking at that process when it ran under this kernel and in this pid namespace (at once,
//! and a reused pid does not fool it: its start time differs), and otherwise by a heartbeat:
//! the holder rewrites its lock every quarter of the lease, and a lock seen unchanged for
//! half a lease, and last rewritten a lease ago by its own clock, is stale.
//!
//! A stale lock is taken over under a second lock (`.<name>.lock.break`): the taker checks that
//! the lock is still the one it judged stale, removes it and then competes for it like any
//! job, so two jobs taking over at once cannot both win.

use crate::{Error, ErrorKind, Result};
use cairn_tier::Tier;
use serde::{Deserialize, Serialize};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};
use tracing::{error, warn};

/// The lock of checkpoint `name`: `.<name>.lock` beside the name's directory, at the tier's
/// root, so that a job leaves no directory behind where it stored nothing (a name never
/// starts with a dot, so this is no checkpoint name).
pub fn lock_key(name: &str) -> String {
    format!(".{name}.lock")
}
/// A lock is a few hundred bytes; more is not one of ours.
const LOCK_MAX: u64 = 64 << 10;
/// A take-over lock older than this (seen unchanged by us) was left by a crashed taker.
const BREAK_STUCK: Duration = Duration::from_secs(5);

/// Who holds a lock.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Holder {
    /// The job's id, shared by its ranks (hex).
    pub job: String,
    pub host: String,
    /// `/proc/sys/kernel/random/boot_id`: the same host after a reboot is another kernel.
    pub boot: String,
    /// Inode of `/proc/self/ns/pid`: pids mean something only in their namespace.
    pub pidns: u64,
    pub pid: u32,
    /// The process's start time in clock ticks after boot (`/proc/<pid>/stat`, field 22).
    pub start: u64,
    /// When the lock was taken, seconds since the Unix epoch.
    pub since: u64,
    /// The batch system's job id, when there is one.
    #[serde(default)]
    pub batch: Option<String>,
    /// Heartbeats so far, and when the last one was written (seconds since the epoch).
    pub beat: u64,
    pub beat_at: u64,
}

impl Holder {
    fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a holder serialises")
    }

    fn decode(bytes: &[u8]) -> Option<Holder> {
        serde_json::from_slice(bytes).ok()
    }

    /// The holder for messages: `pid 123 on host n1 since 2026-11-29 07:10:00 UTC (batch
    /// job 42)`.
    pub fn describe(&self) -> String {
        let batch = self
            .batch
            .as_ref()
            .map(|b| format!(" (batch job {})", cairn_format::shown(b)))
            .unwrap_or_default();
        format!(
            "pid {} on host {} since {} UTC{batch}",
            self.pid,
            cairn_format::shown(&self.host),
            crate::clock::utc_text(self.since as i64)
        )
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// This process, as a lock records it.
struct Me {
    host: String,
    boot: String,
    pidns: u64,
    pid: u32,
    start: u64,
    batch: Option<String>,
}

impl Me {
    fn find() -> Me {
        let pid = std::process::id();
        Me {
            host: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            boot: boot_id(),
            pidns: pid_namespace(),
            pid,
            start: start_ticks(pid).unwrap_or(0),
            batch: ["SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID"]
                .iter()
                .filter_map(|v| std::env::var(v).ok())
                .find(|v| !v.is_empty()),
        }
    }

    fn holder(&self, job: u64) -> Holder {
        let now = now_secs();
        Holder {
            job: format!("{job:016x}"),
            host: self.host.clone(),
            boot: self.boot.clone(),
            pidns: self.pidns,
            pid: self.pid,
            start: self.start,
            since: now,
            batch: self.batch.clone(),
            beat: 0,
            beat_at: now,
        }
    }

    /// Whether `h`'s pid can be looked up here: the same kernel and pid namespace.
    fn sees(&self, h: &Holder) -> bool {
        !self.boot.is_empty() && h.boot == self.boot && h.pidns == self.pidns && self.pidns != 0
    }
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn pid_namespace() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid")
        .map(|m| m.ino())
        .unwrap_or(0)
}

/// The state (field 3) and start time in clock ticks after boot (field 22) of `/proc/<pid>/stat`,
/// counted from the command name's closing parenthesis (the name may hold spaces and
/// parentheses).
fn proc_stat(pid: u32) -> Option<(String, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.to_string();
    Some((state, fields.nth(18)?.parse().ok()?))
}

fn start_ticks(pid: u32) -> Option<u64> {
    proc_stat(pid).map(|(_, start)| start)
}

/// Whether process `pid`, started at `start`, still runs: there, with that start time, and
/// not a zombie (killed and not yet reaped: its lock is as dead as it is).
fn runs(pid: u32, start: u64) -> bool {
    proc_stat(pid)
        .is_some_and(|(state, s)| s == start && !matches!(state.as_str(), "Z" | "X" | "x"))
}

/// How long a holder on this host that was just killed may take to be gone (a process
/// exiting still unmaps its memory): [`runs`] is asked again until then before it counts.
const DYING: Duration = Duration::from_secs(2);

/// What became of a lock we found taken.
enum Verdict {
    /// Its holder runs: the lock is theirs.
    Alive(Option<Holder>),
    /// Its holder is gone; these are the bytes judged.
    Stale(Vec<u8>),
}

/// One lock this process took.
struct Held {
    tier: Arc<dyn Tier>,
    key: String,
    holder: Holder,
}

/// The locks of one engine, and the thread that keeps them fresh.
pub struct Locks {
    job: u64,
    lease: Duration,
    me: Me,
    held: Arc<Mutex<Vec<Held>>>,
    /// Set by the heartbeat when a lock turns out to be someone else's.
    lost: Arc<Mutex<Option<String>>>,
    beat: Option<(mpsc::Sender<()>, JoinHandle<()>)>,
}

impl Locks {
    /// Locks of the job `job`, judged elsewhere after `lease` (`[tiers] lock_lease`).
    pub fn new(job: u64, lease: Duration) -> Locks {
        Locks {
            job,
            lease,
            me: Me::find(),
            held: Arc::default(),
            lost: Arc::default(),
            beat: None,
        }
    }

    /// Take the lock of `name` on `tier` for this job, or fail naming its holder. Waits when
    /// the holder runs elsewhere and its heartbeat must be watched (at most a lease).
    pub fn take(&mut self, tier: &Arc<dyn Tier>, name: &str) -> Result<()> {
        let key = lock_key(name);
        let ours = format!("{:016x}", self.job);
        // Each pass either takes the lock, finds it ours or alive, or removes a stale one;
        // only jobs racing for the same lock make a pass repeat.
        for _ in 0..50 {
            let mine = self.me.holder(self.job);
            if tier.put_new(&key, &mine.encode()).map_err(Error::from)? {
                self.held.lock().expect("lock list").push(Held {
                    tier: tier.clone(),
                    key,
                    holder: mine,
                });
                self.start_heartbeat();
                return Ok(());
            }
            let Some(bytes) = read(tier, &key)? else {
                continue;
            };
            if Holder::decode(&bytes).is_some_and(|h| h.job == ours) {
                return Ok(());
            }
            match self.judge(tier, &key, bytes)? {
                // Taken meanwhile by another rank of this job.
                Verdict::Alive(Some(h)) if h.job == ours => return Ok(()),
                Verdict::Alive(h) => return Err(in_use(tier, &key, name, h, self.lease)),
                Verdict::Stale(seen) => {
                    // Said only when the lock was there to be taken (not released meanwhile
                    // by a job that ended as it should).
                    if self.break_lock(tier, &key, &seen)? {
                        if let Some(h) = Holder::decode(&seen) {
                            warn!(
                                "cairn: took over the lock of checkpoint {} in {}: its job ({}) is gone",
                                cairn_format::shown(name),
                                tier.location(),
                                h.describe()
                            );
                        }
                    }
                }
            }
        }
        Err(Error::new(
            ErrorKind::Io,
            format!(
                "cannot take the lock {}/{key}: other jobs keep taking it",
                tier.location()
            ),
        ))
    }

    /// Decide whether the holder of the lock now holding `bytes` still runs.
    fn judge(&self, tier: &Arc<dyn Tier>, key: &str, bytes: Vec<u8>) -> Result<Verdict> {
        let holder = Holder::decode(&bytes);
        if let Some(h) = &holder {
            if self.me.sees(h) {
                let until = Instant::now() + DYING;
                while runs(h.pid, h.start) {
                    if Instant::now() >= until {
                        return Ok(Verdict::Alive(holder));
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                return Ok(Verdict::Stale(bytes));
            }
            if !h.host.is_empty() && h.host == self.me.host && h.boot != self.me.boot {
                // This host, an earlier boot: every process of it is gone.
                return Ok(Verdict::Stale(bytes));
            }
        }
        // Elsewhere (or unreadable, as a lock still being written in the shared-memory store
        // is for a moment): watch for a heartbeat. A live holder rewrites its lock every
        // quarter lease, so half a lease without a change, and a lease since its last beat by
        // its own clock, means it is gone.
        let age = holder
            .as_ref()
            .map(|h| Duration::from_secs(now_secs().saturating_sub(h.beat_at)))
            .unwrap_or(self.lease);
        let watch = self.lease.saturating_sub(age).max(self.lease / 2);
        let until = Instant::now() + watch;
        let step = (self.lease / 8).clamp(Duration::from_millis(100), Duration::from_secs(1));
        while Instant::now() < until {
            std::thread::sleep(step.min(until.saturating_duration_since(Instant::now())));
            match read(tier, key)? {
                Some(now) if now == bytes => {}
                // Rewritten: a heartbeat or a new holder. Either way someone runs.
                Some(now) => return Ok(Verdict::Alive(Holder::decode(&now).or(holder))),
                // Released meanwhile: nothing to break.
                None => return Ok(Verdict::Stale(Vec::new())),
            }
        }
        Ok(Verdict::Stale(bytes))
    }

    /// Remove the stale lock `seen`, under the take-over lock, if it is still there; whether
    /// it was.
    fn break_lock(&self, tier: &Arc<dyn Tier>, key: &str, seen: &[u8]) -> Result<bool> {
        if seen.is_empty() {
            return Ok(false);
        }
        // Held for the moment of a take-over.
        let bkey = format!("{key}.break");
        let mine = self.me.holder(self.job).encode();
        let mut other: Option<(Vec<u8>, Instant)> = None;
        let give_up = Instant::now() + BREAK_STUCK * 4;
        // A take-over lasts a few file operations, and the other taker is most often a rank of
        // this same job restarting on this node: look again soon, then less often.
        let mut pause = Duration::from_millis(1);
        loop {
            if tier.put_new(&bkey, &mine).map_err(Error::from)? {
                let res = match read(tier, key) {
                    Ok(Some(now)) if now == seen => {
                        tier.remove(key).map(|()| true).map_err(Error::from)
                    }
                    Ok(_) => Ok(false),
                    Err(e) => Err(e),
                };
                let _ = tier.remove(&bkey);
                return res;
            }
            // Another job is taking over: wait for it, unless its take-over lock is stuck.
            let Some(b) = read(tier, &bkey)? else {
                continue;
            };
            let dead_here =
                Holder::decode(&b).is_some_and(|h| self.me.sees(&h) && !runs(h.pid, h.start));
            let stuck = match &other {
                Some((prev, at)) if *prev == b => at.elapsed() >= BREAK_STUCK,
                _ => {
                    other = Some((b.clone(), Instant::now()));
                    false
                }
            };
            if dead_here || stuck {
                if read(tier, &bkey)?.as_deref() == Some(&b[..]) {
                    tier.remove(&bkey).map_err(Error::from)?;
                }
                other = None;
                continue;
            }
            if Instant::now() > give_up {
                return Err(Error::new(
                    ErrorKind::Io,
                    format!(
                        "cannot take over {}/{key}: {}/{bkey} stays in place",
                        tier.location(),
                        tier.location()
                    ),
                ));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    fn start_heartbeat(&mut self) {
        if self.beat.is_some() {
            return;
        }
        let (tx, rx) = mpsc::channel::<()>();
        let held = self.held.clone();
        let lost = self.lost.clone();
        let period = self.lease / 4;
        let spawned = std::thread::Builder::new()
            .name("cairn-lock".into())
            .spawn(move || {
                while let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(period) {
                    beat(&held, &lost);
                }
            });
        match spawned {
            Ok(h) => self.beat = Some((tx, h)),
            // Without a heartbeat a lock is judged stale by other hosts after a lease, but
            // on this host it stays judged by its pid: say so rather than fail the job.
            Err(e) => warn!("cairn: no heartbeat thread for the job lock: {e}"),
        }
    }

    /// Fails once a lock of this job was taken over by another (it was not rewritten for a
    /// lease: the process was stopped that long), naming the new holder.
    pub fn check(&self) -> Result<()> {
        match &*self.lost.lock().expect("lost") {
            Some(msg) => Err(Error::new(ErrorKind::Io, msg.clone())),
            None => Ok(()),
        }
    }

    /// Give up every lock still ours.
    pub fn release(&mut self) {
        if let Some((tx, h)) = self.beat.take() {
            drop(tx);
            let _ = h.join();
        }
        for held in self.held.lock().expect("lock list").drain(..) {
            if let Ok(Some(b)) = read(&held.tier, &held.key) {
                if Holder::decode(&b).is_some_and(|h| h.job == held.holder.job) {
                    let _ = held.tier.remove(&held.key);
                }
            }
        }
    }
}

impl Drop for Locks {
    fn drop(&mut self) {
        self.release();
    }
}

/// Rewrite each held lock with its next heartbeat; one that is no longer ours is dropped and
/// reported.
fn beat(held: &Mutex<Vec<Held>>, lost: &Mutex<Option<String>>) {
    let mut held = held.lock().expect("lock list");
    held.retain_mut(|l| {
        let theirs = match read(&l.tier, &l.key) {
            Ok(Some(b)) => Holder::decode(&b).filter(|h| h.job != l.holder.job),
            Ok(None) => None,
            // Unreadable for now (a full or failing file system): try again next beat.
            Err(_) => return true,
        };
        if let Some(h) = theirs {
            let msg = format!(
                "the lock {}/{} was taken over by another job ({}) after this process did not \
                 renew it for a lease (was it stopped?); this job's checkpoints there are no \
                 longer safe from it",
                l.tier.location(),
                l.key,
                h.describe()
            );
            error!("cairn: {msg}");
            *lost.lock().expect("lost") = Some(msg);
            return false;
        }
        l.holder.beat += 1;
        l.holder.beat_at = now_secs();
        if let Err(e) = l.tier.put(&l.key, &l.holder.encode()) {
            warn!("cairn: cannot renew {}: {e}", l.key);
        }
        true
    });
}

/// The lock's bytes, `None` when there is none.
fn read(tier: &Arc<dyn Tier>, key: &str) -> Result<Option<Vec<u8>>> {
    match tier.get_at_most(key, LOCK_MAX, "job lock") {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn in_use(
    tier: &Arc<dyn Tier>,
    key: &str,
    name: &str,
    holder: Option<Holder>,
    lease: Duration,
) -> Error {
    let who = holder
        .map(|h| format!("the job of {}", h.describe()))
        .unwrap_or_else(|| "another job".into());
    Error::new(
        ErrorKind::InUse,
        format!(
            "checkpoint {} on the {} tier ({}) is in use by {who} (lock {}/{key}). Two jobs \
             writing one checkpoint name into the same directories destroy each other's \
             checkpoints: give this job another name or directory, or wait until that job \
             ends. A lock whose job is gone is taken over: at once on its host, after \
             [tiers] lock_lease ({} s) elsewhere.",
            cairn_format::shown(name),
            tier.label(),
            tier.location(),
            tier.location(),
            lease.as_secs_f64()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_tier::DirTier;

    /// A lock left by a process that has ended: its pid is gone (or another's, with another
    /// start time).
    fn dead_holder() -> Holder {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let start = start_ticks(pid).unwrap_or(1);
        child.wait().unwrap();
        let mut h = Me::find().holder(0xdead);
        h.pid = pid;
        h.start = start;
        h
    }

    #[test]
    fn of_jobs_racing_to_take_over_a_dead_jobs_lock_exactly_one_wins() {
        let d = tempfile::tempdir().unwrap();
        let tier: Arc<dyn Tier> =
            Arc::new(DirTier::new("global", d.path().join("g"), false).unwrap());
        for round in 0..3 {
            assert!(tier.put_new(".heat.lock", &dead_holder().encode()).unwrap());
            let results: Vec<Result<()>> = (0..6u64)
                .map(|j| {
                    let tier = tier.clone();
                    std::thread::spawn(move || {
                        let mut l = Locks::new(100 * round + j + 1, Duration::from_secs(60));
                        let r = l.take(&tier, "heat");
                        // Hold it until every taker has judged.
                        std::thread::sleep(Duration::from_millis(300));
                        r
                    })
                })
                .collect::<Vec<_>>()
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect();
            let won = results.iter().filter(|r| r.is_ok()).count();
            assert_eq!(won, 1, "round {round}: {results:?}");
            for e in results.iter().filter_map(|r| r.as_ref().err()) {
                assert_eq!(e.kind, ErrorKind::InUse, "{e}");
                assert!(
                    e.msg.contains(&format!("pid {}", std::process::id())),
                    "{e}"
                );
            }
            // The winner's lock went with it; no take-over lock is left behind.
            assert!(!tier.exists(".heat.lock") && !tier.exists(".heat.lock.break"));
        }
    }

    #[test]
    fn a_zombie_holds_no_lock() {
        // Killed but not yet reaped by its parent (this test): /proc still shows it, with its
        // start time, in state Z.
        let d = tempfile::tempdir().unwrap();
        let tier: Arc<dyn Tier> =
            Arc::new(DirTier::new("global", d.path().join("g"), false).unwrap());
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let pid = child.id();
        let start = start_ticks(pid).unwrap();
        assert!(runs(pid, start));
        let mut h = Me::find().holder(0xdead);
        (h.pid, h.start) = (pid, start);
        assert!(tier.put_new(".heat.lock", &h.encode()).unwrap());
        let mut other = Locks::new(1, Duration::from_secs(60));
        let e = other.take(&tier, "heat").unwrap_err();
        assert!(e.msg.contains(&format!("pid {pid}")), "{e}");
        child.kill().unwrap();
        while std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| !s.contains(") Z "))
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(start_ticks(pid), Some(start), "still there, as a zombie");
        other.take(&tier, "heat").unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn a_lock_is_ours_again_for_another_rank_of_the_same_job_and_garbage_is_stale() {
        let d = tempfile::tempdir().unwrap();
        let tier: Arc<dyn Tier> =
            Arc::new(DirTier::new("global", d.path().join("g"), false).unwrap());
        let mut a = Locks::new(7, Duration::from_secs(2));
        let mut b = Locks::new(7, Duration::from_secs(2));
        a.take(&tier, "x").unwrap();
        b.take(&tier, "x").unwrap();
        b.release();
        assert!(tier.exists(".x.lock"), "only its taker removes a lock");
        a.release();
        assert!(!tier.exists(".x.lock"));
        // Bytes that are no lock record (a torn write in the shared-memory store, or junk)
        // are judged by watching them: unchanged for half a lease, they are taken over.
        assert!(tier.put_new(".x.lock", b"{\"job\":").unwrap());
        let t0 = Instant::now();
        let mut c = Locks::new(8, Duration::from_secs(2));
        c.take(&tier, "x").unwrap();
        assert!(t0.elapsed() >= Duration::from_secs(1));
        let h = Holder::decode(&tier.get(".x.lock").unwrap()).unwrap();
        assert_eq!(h.job, format!("{:016x}", 8));
    }
}
