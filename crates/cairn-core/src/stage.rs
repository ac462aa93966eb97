//! Flushing on demand while no job runs (`cairn flush`): copying checkpoints that are complete
//! on the node-local tier to the global tier and publishing their global manifests, for a job
//! that ran without `[flush]` or died before its flush finished.
//!
//! [`flush`] is collective over a [`Comm`]. Under `mpirun` on a cluster every process sees
//! only its own node's directory, so the processes first pool what they can see (one
//! allgather): every node manifest, with the rank files it lists that are present. From the
//! pooled view each process computes the same plan: which versions are complete (every rank
//! `0..world_size` has its rank file under a node directory whose manifest lists it), which
//! of them to flush, and which process copies each rank file (the lowest one that sees it).
//! Run as one process ([`Solo`](cairn_comm::Solo)), it sees every node directory under the
//! local root and copies everything itself.
//!
//! Each version goes through the same steps as the engine's DURABLE step, each ending in an
//! agreement so that all processes reach the same outcome:
//!
//! ```text
//! unpublish (process 0 removes any global manifest) --agree-->
//! copy (each process its rank files, every chunk verified) --agree-->
//! publish (process 0 writes the global manifest) --agree--> DURABLE
//! ```
//!
//! A version is never published while its parts are being replaced, and a failed version
//! (a damaged local part, a storage error) leaves nothing of itself on the global tier.

use crate::catalog::{self, manifest_key, rank_key, version_dir};
use crate::engine::open_root;
use crate::flush::{copy_part, Limits, Recode};
use crate::{Config, Error, ErrorKind, Result};
use cairn_comm::Comm;
use cairn_format::{check_name, node_index, CkptState, Manifest, MANIFEST_FORMAT};
use cairn_tier::{DirTier, Scope, Tier};
use serde::{Deserialize, Serialize};
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Which versions of each checkpoint name to flush.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// The newest version complete on the node-local tier; nothing when it is already durable.
    Newest,
    /// Every version complete on the node-local tier and not yet durable.
    All,
    /// This version only.
    Version(i64),
}

/// How far this process has come, over everything it copies in one [`flush`].
#[derive(Debug, Clone, Copy)]
pub struct Progress<'a> {
    /// The checkpoint being copied.
    pub name: &'a str,
    pub version: i64,
    /// Bytes this process has copied (or found intact on the global tier already).
    pub done: u64,
    /// Bytes of every rank file this process copies.
    pub total: u64,
}

/// What became of one version.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Copied and published: durable now.
    Flushed {
        ranks: u32,
        /// The size of all its rank files.
        bytes: u64,
        /// From the start of its copy to its publication, on this process.
        seconds: f64,
    },
    /// The global tier already holds its manifest; nothing was touched.
    AlreadyDurable,
    /// The node-local tier does not hold all of it; the message says what is missing and
    /// where it was looked for. Nothing was touched.
    Incomplete(String),
    /// Copying or publishing failed on some process (kind [`ErrorKind::Corrupt`] for a local
    /// part that fails its checksums). Nothing of it remains on the global tier.
    Failed(Error),
}

/// One version [`flush`] chose, and what became of it.
#[derive(Debug, Clone)]
pub struct Staged {
    pub name: String,
    pub version: i64,
    pub outcome: Outcome,
}

/// The result of [`flush`], the same on every process.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The versions chosen, by name then version.
    pub versions: Vec<Staged>,
    /// What was passed over and why: a newer version that is not complete, an unreadable
    /// manifest, a rank file that could not be opened.
    pub warnings: Vec<String>,
}

/// One node manifest as one process sees it.
#[derive(Debug, Serialize, Deserialize)]
struct Seen {
    node: u32,
    manifest: Manifest,
    /// The ranks it lists whose rank file is present, with the file's size.
    files: Vec<(u32, u64)>,
    /// Whether the global tier holds a manifest of this version.
    durable: bool,
}

/// Everything one process sees under the node-local root.
#[derive(Debug, Default, Serialize, Deserialize)]
struct View {
    nodes: Vec<u32>,
    seen: Vec<Seen>,
    problems: Vec<String>,
}

/// A rank file to copy, and the process that copies it.
#[derive(Debug, Clone, Copy)]
struct Part {
    rank: u32,
    process: usize,
    node: u32,
    bytes: u64,
}

/// What the pooled view says of one version.
#[derive(Debug)]
enum Status {
    /// Every rank file was found: the global manifest to publish and the parts to copy.
    Complete(Manifest, Vec<Part>),
    Incomplete(String),
}

struct Version {
    status: Status,
    durable: bool,
}

/// Error kinds in a fixed order, to carry an error's kind between processes (`Io`, the first,
/// stands for any kind added later).
const KINDS: [ErrorKind; 9] = [
    ErrorKind::Io,
    ErrorKind::Config,
    ErrorKind::InvalidArgument,
    ErrorKind::State,
    ErrorKind::Corrupt,
    ErrorKind::Mismatch,
    ErrorKind::NotFound,
    ErrorKind::Comm,
    ErrorKind::Peer,
];

/// Collective: `res` where it succeeded on every process; otherwise, on every process, the
/// error of the lowest process that failed, so that all return the same outcome and process
/// 0 can report it. The outer error is a failure of the collective itself.
fn agreed<T>(comm: &dyn Comm, res: Result<T>) -> Result<Result<T>> {
    if comm.all_agree(res.is_ok())? {
        return Ok(res);
    }
    let mine = match &res {
        Ok(_) => Vec::new(),
        Err(e) => {
            let kind = KINDS.iter().position(|k| *k == e.kind).unwrap_or(0);
            let mut b = vec![kind as u8];
            b.extend_from_slice(e.msg.as_bytes());
            b
        }
    };
    let all = comm.allgather(&mine)?;
    let Some((p, b)) = all.iter().enumerate().find(|(_, b)| !b.is_empty()) else {
        return Ok(Err(Error::new(
            ErrorKind::Comm,
            "a process failed without saying why",
        )));
    };
    let kind = KINDS.get(b[0] as usize).copied().unwrap_or(ErrorKind::Io);
    let msg = String::from_utf8_lossy(&b[1..]);
    Ok(Err(if comm.size() > 1 {
        Error::new(kind, format!("process {p}: {msg}"))
    } else {
        Error::new(kind, msg)
    }))
}

/// The node-local root, or why there is nothing to flush from.
fn local_root(cfg: &Config) -> Result<&Path> {
    if cfg.local_mem {
        return Err(Error::config(
            "the node-local tier is the shared-memory store ([tiers] local = \"mem\"): \
             offline flush reads node directories only; checkpoints in the store are flushed \
             by the job itself ([flush] every / seconds, and at finalize)",
        ));
    }
    cfg.local.as_deref().ok_or_else(|| {
        Error::config(
            "no node-local tier is configured ([tiers] local is \"none\"): there is nothing to \
             flush to the global tier; give its root with --local or [tiers] local",
        )
    })
}

/// What this process sees of `name` (or of every name) under the node-local root.
fn scan(cfg: &Config, name: Option<&str>, pick: Pick) -> Result<View> {
    let local = local_root(cfg)?;
    if let Some(n) = name {
        check_name(n).map_err(|e| Error::invalid(e.to_string()))?;
    }
    let mut view = View::default();
    let root = match DirTier::open_existing("local", local, Scope::NodeLocal) {
        Ok(t) => t,
        Err(e) if e.is_not_found() => return Ok(view),
        Err(e) => return Err(e.into()),
    };
    let global = DirTier::open_existing("global", &cfg.global, Scope::Global).ok();
    view.nodes = root
        .list("")?
        .iter()
        .filter_map(|d| node_index(d))
        .collect();
    view.nodes.sort_unstable();
    for &node in &view.nodes {
        let tier =
            DirTier::open_existing("local", local.join(format!("node{node}")), Scope::NodeLocal)?;
        let names = match name {
            Some(n) => vec![n.to_string()],
            None => catalog::names(&tier)?,
        };
        for n in names {
            for v in catalog::versions(&tier, &n)? {
                if matches!(pick, Pick::Version(want) if want != v) {
                    continue;
                }
                let manifest = match catalog::read_manifest(&tier, &n, v) {
                    Ok(Some(m)) => m,
                    Ok(None) => continue,
                    Err(e) => {
                        view.problems.push(e.msg);
                        continue;
                    }
                };
                let mut files = Vec::new();
                for &r in &manifest.ranks {
                    match tier.open(&rank_key(&n, v, r as usize)) {
                        Ok(f) => files.push((r, f.len())),
                        Err(e) if e.is_not_found() => {}
                        Err(e) => view.problems.push(e.to_string()),
                    }
                }
                let durable = global
                    .as_ref()
                    .is_some_and(|g| matches!(catalog::read_manifest(g, &n, v), Ok(Some(_))));
                view.seen.push(Seen {
                    node,
                    manifest,
                    files,
                    durable,
                });
            }
        }
    }
    Ok(view)
}

/// Collective: every process's view, in process order.
fn pool(comm: &dyn Comm, view: &View) -> Result<Vec<View>> {
    let bytes = serde_json::to_vec(view)
        .map_err(|e| Error::new(ErrorKind::Comm, format!("encoding a view: {e}")))?;
    comm.allgather(&bytes)?
        .iter()
        .map(|b| {
            serde_json::from_slice(b)
                .map_err(|e| Error::new(ErrorKind::Comm, format!("decoding a view: {e}")))
        })
        .collect()
}

/// `rank 3` / `ranks 2, 5`.
fn ranks_phrase(rs: &[u32]) -> String {
    let list: Vec<String> = rs.iter().map(u32::to_string).collect();
    match rs.len() {
        1 => format!("rank {}", list[0]),
        _ => format!("ranks {}", list.join(", ")),
    }
}

/// Where the processes looked, for messages.
fn looked(views: &[Vec<u32>], local: &Path) -> String {
    let nodes: BTreeSet<u32> = views.iter().flatten().copied().collect();
    if nodes.is_empty() {
        return format!("{} (it holds no node directories)", local.display());
    }
    let dirs: Vec<String> = nodes.iter().map(|i| format!("node{i}")).collect();
    format!(
        "node directories {} under {}",
        dirs.join(", "),
        local.display()
    )
}

/// What the pooled manifests `seen` (with the process that sees each) say of one version.
fn judge(name: &str, v: i64, seen: &[(usize, &Seen)], where_: &str) -> Status {
    let first = &seen[0].1.manifest;
    let layout = |m: &Manifest| (m.world_size, m.nodes, m.scheme.clone());
    if let Some((_, odd)) = seen
        .iter()
        .find(|(_, s)| layout(&s.manifest) != layout(first))
    {
        let say = |s: &Seen| {
            let m = &s.manifest;
            format!(
                "node{} says {} ranks on {} nodes with scheme {}",
                s.node, m.world_size, m.nodes, m.scheme
            )
        };
        return Status::Incomplete(format!(
            "its node manifests disagree: {}, {}",
            say(seen[0].1),
            say(odd)
        ));
    }
    let mut parts = Vec::new();
    let (mut unlisted, mut lost) = (Vec::new(), Vec::new());
    for r in 0..first.world_size {
        let holder = seen
            .iter()
            .find_map(|(p, s)| s.files.iter().find(|f| f.0 == r).map(|f| (*p, s.node, f.1)));
        match holder {
            Some((process, node, bytes)) => parts.push(Part {
                rank: r,
                process,
                node,
                bytes,
            }),
            None => match seen.iter().find(|(_, s)| s.manifest.ranks.contains(&r)) {
                Some((_, s)) => lost.push(format!(
                    "rank {r}: node{n}/{} is missing (node{n}'s manifest lists it)",
                    rank_key(name, v, r as usize),
                    n = s.node
                )),
                None => unlisted.push(r),
            },
        }
    }
    if !unlisted.is_empty() {
        lost.push(format!(
            "{}: no node manifest lists them",
            ranks_phrase(&unlisted)
        ));
    }
    if !lost.is_empty() {
        return Status::Incomplete(format!(
            "{} of {} ranks missing on the node-local tier: {}; looked in {where_}",
            first.world_size as usize - parts.len(),
            first.world_size,
            lost.join("; ")
        ));
    }
    let manifest = Manifest {
        format: MANIFEST_FORMAT,
        // Flushes merge chains: the global copy is always a full checkpoint.
        base: None,
        node: None,
        ranks: (0..first.world_size).collect(),
        state: CkptState::Durable,
        created_unix_ms: seen
            .iter()
            .map(|s| s.1.manifest.created_unix_ms)
            .min()
            .unwrap_or(0),
        capture_ns: seen
            .iter()
            .map(|s| s.1.manifest.capture_ns)
            .max()
            .unwrap_or(0),
        ..first.clone()
    };
    Status::Complete(manifest, parts)
}

/// Every version any process sees, judged from the pooled views.
fn versions(views: &[View], where_: &str) -> BTreeMap<(String, i64), Version> {
    let mut by: BTreeMap<(String, i64), Vec<(usize, &Seen)>> = BTreeMap::new();
    for (p, view) in views.iter().enumerate() {
        for s in &view.seen {
            by.entry((s.manifest.name.clone(), s.manifest.version))
                .or_default()
                .push((p, s));
        }
    }
    by.into_iter()
        .map(|((name, v), seen)| {
            let version = Version {
                status: judge(&name, v, &seen, where_),
                durable: seen.iter().any(|s| s.1.durable),
            };
            ((name, v), version)
        })
        .collect()
}

/// What to do with one chosen version.
enum Step {
    Copy(Manifest, Vec<Part>),
    Done(Outcome),
}

/// Choose the versions of one name, newest last; passed-over versions go to `warnings`.
fn choose(
    name: &str,
    all: &BTreeMap<i64, &Version>,
    pick: Pick,
    warnings: &mut Vec<String>,
) -> Vec<(i64, Step)> {
    let step = |v: &Version| match (&v.status, v.durable) {
        (_, true) => Step::Done(Outcome::AlreadyDurable),
        (Status::Incomplete(why), false) => Step::Done(Outcome::Incomplete(why.clone())),
        (Status::Complete(m, parts), false) => Step::Copy(m.clone(), parts.clone()),
    };
    let complete: Vec<i64> = all
        .iter()
        .filter(|(_, v)| matches!(v.status, Status::Complete(..)))
        .map(|(k, _)| *k)
        .collect();
    let mut skip = |v: i64, x: &Version| {
        if let Status::Incomplete(why) = &x.status {
            warnings.push(format!("{name} v{v} is not flushed: {why}"));
        }
    };
    match (pick, complete.last()) {
        (Pick::Version(v), _) => all.get(&v).map(|x| vec![(v, step(x))]).unwrap_or_default(),
        (Pick::Newest, Some(&newest)) => {
            for (v, x) in all.range(newest + 1..) {
                skip(*v, x);
            }
            vec![(newest, step(all[&newest]))]
        }
        (Pick::All, Some(_)) => {
            for (v, x) in all {
                skip(*v, x);
            }
            complete.iter().map(|v| (*v, step(all[v]))).collect()
        }
        // Nothing complete: the newest version (or every one) is what cannot be flushed.
        (Pick::Newest, None) => all
            .iter()
            .next_back()
            .map(|(v, x)| vec![(*v, step(x))])
            .unwrap_or_default(),
        (Pick::All, None) => all.iter().map(|(v, x)| (*v, step(x))).collect(),
    }
}

/// Everything one process needs to flush versions.
struct Copier<'a> {
    comm: &'a dyn Comm,
    local: PathBuf,
    global: DirTier,
    limits: Limits,
    recode: Recode,
    progress: &'a dyn Fn(&Progress),
    /// Bytes this process copies in all, and has copied so far.
    total: u64,
    done: Cell<u64>,
}

impl Copier<'_> {
    /// This process's rank files of `name` v`v`, copied with every block verified (incremental
    /// ones merged with their bases into full parts).
    fn copy_mine(&self, name: &str, v: i64, parts: &[Part]) -> Result<()> {
        let me = self.comm.rank();
        for p in parts.iter().filter(|p| p.process == me) {
            let root = self.local.join(format!("node{}", p.node));
            let key = rank_key(name, v, p.rank as usize);
            let at = (name, v, p.rank as usize);
            let base = self.done.get();
            let report = |done: u64, _total: u64| {
                (self.progress)(&Progress {
                    name,
                    version: v,
                    done: base + done,
                    total: self.total,
                });
                true
            };
            DirTier::open_existing("local", &root, Scope::NodeLocal)
                .map_err(Error::from)
                .and_then(|src| {
                    copy_part(&src, &self.global, at, self.limits, self.recode, &report)
                })
                .map_err(|e| {
                    e.context(format!("rank {}: {}", p.rank, root.join(&key).display()))
                })?;
            self.done.set(base + p.bytes);
        }
        Ok(())
    }

    /// Collective: unpublish, copy, publish one version, agreeing after each step.
    fn flush_one(
        &self,
        name: &str,
        v: i64,
        manifest: &Manifest,
        parts: &[Part],
    ) -> Result<Outcome> {
        let t0 = Instant::now();
        let first = self.comm.rank() == 0;
        let key = manifest_key(name, v);
        let unpublish = if first {
            self.global.remove(&key).map_err(|e| {
                Error::from(e)
                    .context("removing the old global manifest before replacing its parts")
            })
        } else {
            Ok(())
        };
        let mut res = agreed(self.comm, unpublish)?;
        if res.is_ok() {
            res = agreed(self.comm, self.copy_mine(name, v, parts))?;
        }
        if res.is_ok() {
            let publish = if first {
                self.global
                    .put(&key, &crate::auth::encode_manifest(manifest))
                    .map_err(|e| Error::from(e).context("publishing the global manifest"))
            } else {
                Ok(())
            };
            res = agreed(self.comm, publish)?;
        }
        match res {
            Ok(()) => Ok(Outcome::Flushed {
                ranks: manifest.world_size,
                bytes: parts.iter().map(|p| p.bytes).sum(),
                seconds: t0.elapsed().as_secs_f64(),
            }),
            Err(e) => {
                // Every process is past the agreement: nobody writes this version any more.
                if first {
                    let _ = self.global.remove_all(&version_dir(name, v));
                }
                Ok(Outcome::Failed(e))
            }
        }
    }
}

/// Collective over `comm`: flush the versions of `name` (or of every name) that `pick`
/// chooses from the node-local tier of `cfg` to its global tier, calling `progress` as this
/// process copies. Every process returns the same [`Report`]; only `Outcome::Flushed`'s
/// `seconds` are each process's own.
///
/// Errors (the same on every process) when no node-local tier is configured, `name` is not
/// a valid name or no node directory holds a published version of it (or the version asked
/// for), the storage cannot be read, the global tier cannot be opened, or a collective
/// fails. What becomes of each chosen version, including a failed copy, is in the report.
pub fn flush(
    comm: &dyn Comm,
    cfg: &Config,
    name: Option<&str>,
    pick: Pick,
    progress: &dyn Fn(&Progress),
) -> Result<Report> {
    let view = agreed(comm, scan(cfg, name, pick))??;
    let views = pool(comm, &view)?;
    let local = local_root(cfg)?.to_path_buf();
    let node_lists: Vec<Vec<u32>> = views.iter().map(|v| v.nodes.clone()).collect();
    let where_ = looked(&node_lists, &local);
    let mut report = Report::default();
    for v in &views {
        for p in &v.problems {
            if !report.warnings.contains(p) {
                report.warnings.push(p.clone());
            }
        }
    }
    let all = versions(&views, &where_);
    let mut by_name: BTreeMap<&str, BTreeMap<i64, &Version>> = BTreeMap::new();
    for ((n, v), x) in &all {
        by_name.entry(n).or_default().insert(*v, x);
    }
    if by_name.is_empty() || matches!(pick, Pick::Version(v) if !all.keys().any(|k| k.1 == v)) {
        if let Some(n) = name {
            let what = match pick {
                Pick::Version(v) => format!("{n} v{v}"),
                _ => format!("named {n}"),
            };
            return Err(Error::new(
                ErrorKind::NotFound,
                format!(
                    "no published checkpoint {what} on the node-local tier; looked in {where_}"
                ),
            ));
        }
    }
    let mut chosen = Vec::new();
    for (n, vs) in &by_name {
        for (v, step) in choose(n, vs, pick, &mut report.warnings) {
            chosen.push((n.to_string(), v, step));
        }
    }

    let me = comm.rank();
    let total = chosen
        .iter()
        .filter_map(|(_, _, s)| match s {
            Step::Copy(_, parts) => Some(parts.iter().filter(|p| p.process == me)),
            Step::Done(_) => None,
        })
        .flatten()
        .map(|p| p.bytes)
        .sum();
    // Opened for writing only when something is copied: listing must not create the root.
    let copies = chosen.iter().any(|c| matches!(c.2, Step::Copy(..)));
    let global = if copies {
        Some(agreed(
            comm,
            open_root("global", &cfg.global, cfg.fsync_global, Scope::Global),
        )??)
    } else {
        None
    };
    let copier = global.map(|global| Copier {
        comm,
        local,
        global,
        limits: Limits {
            buffer: cfg.flush_buffer,
            bandwidth: cfg.flush_bandwidth,
            // Nothing else runs beside `cairn flush`.
            low_priority: false,
            direct: cfg.flush_direct,
        },
        recode: crate::engine::codecs(cfg).1,
        progress,
        total,
        done: Cell::new(0),
    });
    for (name, version, step) in chosen {
        let outcome = match (step, &copier) {
            (Step::Copy(m, parts), Some(f)) => f.flush_one(&name, version, &m, &parts)?,
            (Step::Done(outcome), _) => outcome,
            (Step::Copy(..), None) => unreachable!("the global tier is open when there are copies"),
        };
        report.versions.push(Staged {
            name,
            version,
            outcome,
        });
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Engine, RegionRef};
    use cairn_comm::Threads;
    use std::sync::Mutex;

    /// Versions 1 and 2 of `ck` from 4 ranks on 2 simulated nodes, node-local only; then
    /// node 1's directory moved under `<root>/local1`, as a second node would see it.
    fn two_nodes(root: &Path) -> Config {
        let cfg = Config {
            local: Some(root.join("local0")),
            global: root.join("global"),
            sim_nodes: 2,
            block: 4096,
            fsync_global: false,
            finalize_flush: false,
            ..Config::default()
        };
        let writers: Vec<_> = Threads::world(4)
            .into_iter()
            .map(|comm| {
                let cfg = cfg.clone();
                std::thread::spawn(move || {
                    let mut e = Engine::new(Box::new(comm), cfg).unwrap();
                    for v in 1..=2i64 {
                        let field = vec![v as f64; 3000];
                        e.checkpoint("ck", v, &[RegionRef::new(1, &field)]).unwrap();
                    }
                    e.finalize().unwrap();
                })
            })
            .collect();
        writers.into_iter().for_each(|w| w.join().unwrap());
        std::fs::create_dir(root.join("local1")).unwrap();
        std::fs::rename(root.join("local0/node1"), root.join("local1/node1")).unwrap();
        cfg
    }

    /// Run `flush` on two processes (threads), process `p` seeing `<root>/local<p>` only;
    /// returns each one's report and the last progress it was told.
    fn flush_on_two(cfg: &Config, pick: Pick) -> Vec<(Report, (u64, u64))> {
        let runs: Vec<_> = Threads::world(2)
            .into_iter()
            .enumerate()
            .map(|(p, comm)| {
                let mut cfg = cfg.clone();
                cfg.local = Some(cfg.global.with_file_name(format!("local{p}")));
                std::thread::spawn(move || {
                    let last = Mutex::new((0, 0));
                    let seen = |g: &Progress| *last.lock().unwrap() = (g.done, g.total);
                    let report = flush(&comm, &cfg, None, pick, &seen).unwrap();
                    let last = *last.lock().unwrap();
                    (report, last)
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    }

    #[test]
    fn each_process_copies_the_node_directory_it_sees() {
        let d = tempfile::tempdir().unwrap();
        let cfg = two_nodes(d.path());
        let global = DirTier::open_existing("global", &cfg.global, Scope::Global).unwrap();
        let part = |r: usize| {
            let node = d.path().join(format!("local{}/node{}", r / 2, r / 2));
            std::fs::metadata(node.join(rank_key("ck", 2, r)))
                .unwrap()
                .len()
        };

        let out = flush_on_two(&cfg, Pick::Newest);
        for (p, (report, progress)) in out.iter().enumerate() {
            assert_eq!(report.versions.len(), 1);
            assert_eq!(report.versions[0].version, 2);
            let Outcome::Flushed { ranks, bytes, .. } = report.versions[0].outcome else {
                panic!("{:?}", report.versions[0].outcome);
            };
            assert_eq!((ranks, bytes), (4, (0..4).map(part).sum()));
            // Each process copied its own node's two ranks, and said so.
            let mine = part(2 * p) + part(2 * p + 1);
            assert_eq!(*progress, (mine, mine));
        }
        let m = catalog::read_manifest(&global, "ck", 2).unwrap().unwrap();
        assert_eq!(
            (m.node, m.ranks, m.state),
            (None, vec![0, 1, 2, 3], CkptState::Durable)
        );
        assert_eq!(catalog::read_manifest(&global, "ck", 1).unwrap(), None);

        // Everything else: v1; v2 is durable already.
        let out = flush_on_two(&cfg, Pick::All);
        let outcomes: Vec<_> = out[1].0.versions.iter().map(|s| &s.outcome).collect();
        assert!(matches!(
            outcomes[..],
            [Outcome::Flushed { .. }, Outcome::AlreadyDurable]
        ));
        for r in 0..4 {
            crate::part::verify(&*global.open(&rank_key("ck", 1, r)).unwrap()).unwrap();
        }
    }

    #[test]
    fn a_newer_incomplete_version_is_passed_over_with_a_warning() {
        let d = tempfile::tempdir().unwrap();
        let cfg = two_nodes(d.path());
        std::fs::remove_file(d.path().join("local1/node1").join(manifest_key("ck", 2))).unwrap();

        // One process that sees only node 0: v1 is as incomplete as v2.
        let alone = flush(&cairn_comm::Solo, &cfg, Some("ck"), Pick::Newest, &|_| {}).unwrap();
        assert!(
            matches!(&alone.versions[0].outcome, Outcome::Incomplete(w) if w.contains("ranks 2, 3: no node manifest lists them"))
        );
        assert_eq!(alone.versions[0].version, 2);

        let out = flush_on_two(&cfg, Pick::Newest);
        let report = &out[0].0;
        assert_eq!(report.versions.len(), 1);
        assert_eq!(report.versions[0].version, 1);
        assert!(matches!(
            report.versions[0].outcome,
            Outcome::Flushed { .. }
        ));
        assert_eq!(report.warnings.len(), 1, "{:?}", report.warnings);
        assert!(report.warnings[0].starts_with("ck v2 is not flushed: 2 of 4 ranks missing"));
    }
}
