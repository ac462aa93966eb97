//! The checkpoint engine: one per process, collective over its communicator.
//!
//! # The checkpoint lifecycle
//!
//! ```text
//!   checkpoint(name, v)                         (cache window, later checkpoints)
//!        |                                                |
//!        v                                                v
//!   WRITING --all agree--> CAPTURED = PROTECTED --flush--> DURABLE ----> deleted
//!   rank files        node manifests published     global copy +       (manifest first,
//!   being written     (scheme "single": nothing    global manifest      then rank files)
//!                      more to encode)
//! ```
//!
//! - WRITING (`Engine::checkpoint`, `part::write_part`): each rank streams its regions into a
//!   private temporary object and publishes it as `rank<r>.ckpt` by atomic rename. Nothing is
//!   eligible yet: eligibility needs a manifest.
//! - CAPTURED (`Engine::checkpoint`, after its first reduction): all ranks report success in
//!   one reduction (which also checks that they all passed the same name and version); then
//!   the lowest rank of each node publishes that node's `manifest.json`. A crash before that
//!   leaves a version without manifests, which restart ignores. A second reduction confirms
//!   every publication, so `checkpoint` returns on no rank before all manifests are out.
//! - PROTECTED: with scheme "single" this is reached at capture (the scheme promises survival
//!   of process failures only).
//! - DURABLE (`Engine::flush`): the rank files are copied to the global tier, all ranks
//!   agree, rank 0 publishes the global manifest, and all ranks agree again.
//!
//! Deletion (`window`, `Engine::schedule_delete`) runs on a background thread, off the
//! application's critical path, and starts only after the reduction that confirms every
//! manifest of the new checkpoint is published: at that point the new checkpoint is
//! restart-eligible everywhere, so the versions the cache window drops are never the newest
//! eligible one, whatever `[cache] keep` says.

use crate::catalog::{self, manifest_key, rank_key, version_dir};
use crate::config::Config;
use crate::error::{Error, ErrorKind, Result};
use crate::part::{self, PartMeta, RegionMut, RegionRef};
use crate::protect;
use cairn_comm::{Comm, Op, Topology};
use cairn_format::{check_name, CkptState, Manifest, MANIFEST_FORMAT};
use cairn_redundancy::{Plan, Scheme, Settings};
use cairn_tier::{DirTier, Scope, Tier};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tracing::{debug, info, warn};

/// Counters an application or the demo can print.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Stats {
    pub checkpoints: u64,
    /// Wall time spent inside `checkpoint`, seconds.
    pub checkpoint_seconds: f64,
    /// Bytes of region data this rank wrote.
    pub bytes_written: u64,
    pub restarts: u64,
    pub restart_seconds: f64,
    /// Version restored by the last restart, or -1.
    pub restored_version: i64,
}

#[derive(Debug, Default)]
struct NameState {
    /// Versions known complete on the first tier (local, or global when local is off).
    first: BTreeSet<i64>,
    /// Versions known durable on the global tier (when it is not the first tier).
    global: BTreeSet<i64>,
    last: Option<i64>,
    restored: Option<i64>,
    /// Checkpoints taken in this run, for the flush cadence.
    count: u64,
}

type Job = Box<dyn FnOnce() + Send>;

/// Versions a rank can restore, each with the tiers holding its part (fastest first).
type Candidates = BTreeMap<i64, Vec<Arc<dyn Tier>>>;

/// Runs deletions in the background so they never sit on the checkpoint path (the DEEP-ER
/// measurements attribute most of SCR's per-checkpoint cost growth to synchronous deletion).
struct Deleter {
    tx: Option<mpsc::Sender<Job>>,
    handle: Option<JoinHandle<()>>,
}

impl Deleter {
    fn new() -> Deleter {
        let (tx, rx) = mpsc::channel::<Job>();
        let handle = std::thread::Builder::new()
            .name("cairn-delete".into())
            .spawn(move || {
                for job in rx {
                    job();
                }
            })
            .ok();
        Deleter {
            tx: Some(tx),
            handle,
        }
    }

    fn submit(&self, job: Job) {
        match (&self.tx, &self.handle) {
            (Some(tx), Some(_)) => {
                if let Err(mpsc::SendError(job)) = tx.send(job) {
                    job();
                }
            }
            // No thread could be started: delete inline rather than not at all.
            _ => job(),
        }
    }

    /// Wait until every deletion submitted so far has run.
    fn drain(&self) {
        let (tx, rx) = mpsc::channel::<()>();
        self.submit(Box::new(move || {
            let _ = tx.send(());
        }));
        let _ = rx.recv();
    }

    fn finish(&mut self) {
        self.tx.take();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The checkpoint engine.
pub struct Engine {
    comm: Box<dyn Comm + Send>,
    cfg: Config,
    topo: Topology,
    /// The first tier checkpoints are written to: this node's local directory, or the global
    /// tier when `[tiers] local = "none"`.
    first: Arc<dyn Tier>,
    /// The global tier, when it is not already `first`.
    global: Option<Arc<dyn Tier>>,
    /// Who protects whom, from `[redundancy]`.
    plan: Plan,
    names: HashMap<String, NameState>,
    calls_since: u64,
    last_ckpt: Instant,
    stats: Stats,
    deleter: Deleter,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A 62-bit fingerprint of a call's arguments, compared across ranks in the agreement.
fn fingerprint(name: &str, version: i64) -> i64 {
    let mut b = name.as_bytes().to_vec();
    b.extend_from_slice(&version.to_le_bytes());
    (cairn_format::checksum(&b) >> 2) as i64
}

/// Open a tier root whose parent must already exist: a missing parent is almost always a
/// typo or an unmounted file system, and creating it would hide that.
fn open_root(label: &str, root: &std::path::Path, fsync: bool, scope: Scope) -> Result<DirTier> {
    if let Some(parent) = root.parent().filter(|p| !p.as_os_str().is_empty()) {
        if !parent.is_dir() {
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "{label} tier {}: directory {} does not exist (create it, or set [tiers] {label} / CAIRN_TIERS_{})",
                    root.display(),
                    parent.display(),
                    label.to_uppercase()
                ),
            ));
        }
    }
    Ok(DirTier::with_scope(label, root, fsync, scope)?)
}

/// Install the stderr logger once per process at the configured level.
fn init_logging(level: &str) {
    let filter = tracing_subscriber::EnvFilter::new(format!("cairn_core={level},cairn={level}"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .without_time()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .try_init();
}

impl Engine {
    /// Collective: set up the engine over `comm`. Fails on every rank if it fails on one.
    pub fn new(comm: Box<dyn Comm + Send>, cfg: Config) -> Result<Engine> {
        init_logging(&cfg.log_level);
        let topo = Topology::discover(&*comm, cfg.sim_nodes, cfg.domain_env.as_deref());
        let setup = topo.map_err(Error::from).and_then(|topo| {
            let settings = Settings {
                scheme: Scheme::parse(&cfg.redundancy).expect("config checks the scheme"),
                set_size: cfg.set_size,
                parity: cfg.parity,
            };
            let plan = cairn_redundancy::plan(&settings, &topo).map_err(Error::config)?;
            if plan.scheme != Scheme::Single && cfg.local.is_none() {
                return Err(Error::config(format!(
                    "[redundancy] scheme \"{}\" protects node-local checkpoints, but [tiers] local is \"none\"",
                    cfg.redundancy
                )));
            }
            let global = open_root("global", &cfg.global, cfg.fsync_global, Scope::Global)?;
            let global: Arc<dyn Tier> = Arc::new(global);
            let (first, global) = match &cfg.local {
                Some(local) => {
                    let _root = open_root("local", local, false, Scope::NodeLocal)?;
                    let node_root = local.join(format!("node{}", topo.node));
                    let t: Arc<dyn Tier> = Arc::new(DirTier::with_scope(
                        "local",
                        node_root,
                        false,
                        Scope::NodeLocal,
                    )?);
                    (t, Some(global))
                }
                None => (global, None),
            };
            Ok((topo, plan, first, global))
        });
        let (topo, plan, first, global) = agree(&*comm, setup, "initialise")?;
        debug!(
            "cairn: rank {} of {} on node {} of {} ({}), first tier {}",
            topo.rank,
            topo.size,
            topo.node,
            topo.nodes,
            topo.hostname,
            first.location()
        );
        Ok(Engine {
            comm,
            cfg,
            topo,
            first,
            global,
            plan,
            names: HashMap::new(),
            calls_since: 0,
            last_ckpt: Instant::now(),
            stats: Stats {
                restored_version: -1,
                ..Stats::default()
            },
            deleter: Deleter::new(),
        })
    }

    fn ctx(&self) -> protect::Ctx<'_> {
        protect::Ctx {
            comm: &*self.comm,
            topo: &self.topo,
            tier: &*self.first,
            plan: &self.plan,
        }
    }

    /// The redundancy plan in force (`xor(4)`, `partner`, ...).
    pub fn redundancy(&self) -> String {
        self.plan.describe()
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    pub fn rank(&self) -> usize {
        self.topo.rank
    }

    /// Collective: write checkpoint `version` of `name` from `regions`, returning once it is
    /// CAPTURED on every rank (and DURABLE when the flush policy says so). Versions of a name
    /// must increase within a run; checkpointing the version just restored is a no-op.
    pub fn checkpoint(
        &mut self,
        name: &str,
        version: i64,
        regions: &[RegionRef<'_>],
    ) -> Result<()> {
        let t0 = Instant::now();
        let rank = self.topo.rank;
        let ns = self.names.entry(name.to_string()).or_default();
        let mut noop = false;
        let pre: Result<()> = (|| {
            check_name(name)?;
            if version < 0 {
                return Err(Error::invalid(format!(
                    "checkpoint version {version} is negative"
                )));
            }
            match ns.last {
                Some(last) if version == last && ns.restored == Some(last) => noop = true,
                Some(last) if version <= last => {
                    return Err(Error::invalid(format!(
                        "checkpoint {name} v{version} is not newer than v{last}, the last one of this run; versions must increase"
                    )))
                }
                _ => {}
            }
            Ok(())
        })();
        let key = rank_key(name, version, rank);
        let first = self.first.clone();
        let partner = self.plan.scheme == Scheme::Partner;
        // Partner streams are exchanges: every rank must enter them, or none.
        let pre = if partner && !self.comm.all_agree(pre.is_ok())? {
            pre.and(Err(Error::new(
                ErrorKind::Peer,
                format!(
                    "checkpoint {name} v{version} was refused on another rank (see its message)"
                ),
            )))
        } else {
            pre
        };
        let written = pre.and_then(|()| {
            if noop {
                return Ok(None);
            }
            // A previous run may have left this version (complete or not): unpublish it before
            // overwriting any part, so a crash mid-write can never make a mix eligible.
            first.remove(&manifest_key(name, version))?;
            let meta = PartMeta {
                name,
                version,
                rank: rank as u32,
                world_size: self.topo.size as u32,
                chunk: self.cfg.chunk,
            };
            let ctx = self.ctx();
            let res = match (partner, self.cfg.partner_mode.as_str()) {
                (true, "readback") => protect::write_readback(&ctx, meta, regions),
                (true, _) => protect::write_streamed(&ctx, meta, regions),
                (false, _) => part::write_part(&*first, &key, meta, regions),
            };
            res.map(Some).map_err(|e| {
                e.context(format!(
                    "rank {rank}: checkpoint {name} v{version} on {} tier {}",
                    first.label(),
                    first.location()
                ))
            })
        });
        let own_ok = written.is_ok();
        let write_ns = written
            .as_ref()
            .ok()
            .and_then(|w| w.as_ref().map(|ix| ix.write_ns))
            .unwrap_or(0);
        let fp = fingerprint(name, version);
        let mut v = [
            own_ok as i64,
            fp,
            -fp,
            -(write_ns as i64),
            noop as i64,
            -(noop as i64),
        ];
        self.comm.allreduce_i64(&mut v, Op::Min)?;
        let same_args = v[1] == fp && -v[2] == fp && v[4] == -v[5];
        if v[0] != 1 || !same_args {
            if matches!(written, Ok(Some(_))) {
                let _ = first.remove(&key);
            }
            if !same_args {
                return Err(Error::invalid(format!(
                    "rank {rank}: ranks called checkpoint with different names or versions (this rank: {name} v{version})"
                )));
            }
            return Err(match written {
                Err(e) => e,
                Ok(_) => Error::new(ErrorKind::Peer, format!("checkpoint {name} v{version} failed on another rank (see its message); nothing was published")),
            });
        }
        if noop {
            debug!("cairn: rank {rank}: {name} v{version} was just restored; not written again");
            return Ok(());
        }
        let capture_ns = (-v[3]) as u64;
        let bytes: u64 = regions.iter().map(|r| r.bytes.len() as u64).sum();
        let first_is_global = self.global.is_none();
        let state = if first_is_global {
            CkptState::Durable
        } else {
            CkptState::Protected
        };
        let publish = if first_is_global {
            rank == 0
        } else {
            self.topo.is_node_leader()
        };
        // PROTECTED: partner copies were streamed with the write; sets encode their parity now.
        if matches!(self.plan.scheme, Scheme::Xor | Scheme::Rs) {
            let ctx = self.ctx();
            // Encoding is collective: a rank that cannot open its part must still take part in
            // every exchange (it fails reading the part and reports it afterwards), or the
            // others wait for it forever.
            let own_len = first.open(&key).map(|r| r.len()).map_err(Error::from);
            let encoded =
                protect::encode_parity(&ctx, name, version, *own_len.as_ref().unwrap_or(&0));
            let res = own_len.and(encoded);
            agree(&*self.comm, res, &format!("protect {name} v{version}"))?;
        }
        // Return only once every node's manifest is out: a rank told that v is captured may
        // rely on it even if another node's leader dies right after.
        self.publish(&*first, name, version, state, capture_ns, publish)?;
        let ns = self.names.get_mut(name).expect("entry created above");
        ns.first.insert(version);
        ns.last = Some(version);
        ns.restored = None;
        ns.count += 1;
        let flush_due =
            !first_is_global && self.cfg.flush_every > 0 && ns.count % self.cfg.flush_every == 0;
        let keep = if first_is_global {
            self.cfg.keep_global
        } else {
            self.cfg.keep
        };
        let doomed = if keep == 0 {
            Vec::new()
        } else {
            window(&mut ns.first, keep)
        };
        self.schedule_delete(first, name, doomed, first_is_global);
        self.stats.checkpoints += 1;
        self.stats.bytes_written += bytes;
        self.calls_since = 0;
        self.last_ckpt = Instant::now();
        let result = if flush_due {
            self.flush(name, version)
        } else {
            Ok(())
        };
        self.stats.checkpoint_seconds += t0.elapsed().as_secs_f64();
        result
    }

    /// Collective: `publisher` writes the manifest of `name` v`version` to `tier` (listing
    /// every rank on a global tier, its node's ranks on a node-local one), then all ranks agree,
    /// so a failed publication fails the call on every rank.
    fn publish(
        &self,
        tier: &dyn Tier,
        name: &str,
        version: i64,
        state: CkptState,
        capture_ns: u64,
        publisher: bool,
    ) -> Result<()> {
        let all_ranks = tier.scope() == Scope::Global;
        let res = if publisher {
            let m = self.manifest(name, version, state, capture_ns, all_ranks);
            tier.put(&manifest_key(name, version), &m.encode())
                .map_err(|e| {
                    Error::from(e).context(format!(
                        "rank {}: publishing {name} v{version} on the {} tier",
                        self.topo.rank,
                        tier.label()
                    ))
                })
        } else {
            Ok(())
        };
        agree(
            &*self.comm,
            res,
            &format!("publish {name} v{version} on the {} tier", tier.label()),
        )
    }

    fn manifest(
        &self,
        name: &str,
        version: i64,
        state: CkptState,
        capture_ns: u64,
        all_ranks: bool,
    ) -> Manifest {
        let ranks = if all_ranks {
            (0..self.topo.size as u32).collect()
        } else {
            self.topo
                .node_ranks()
                .into_iter()
                .map(|r| r as u32)
                .collect()
        };
        Manifest {
            format: MANIFEST_FORMAT,
            name: name.to_string(),
            version,
            world_size: self.topo.size as u32,
            nodes: self.topo.nodes as u32,
            node: if all_ranks {
                None
            } else {
                Some(self.topo.node as u32)
            },
            ranks,
            scheme: self.plan.describe(),
            state,
            created_unix_ms: unix_ms(),
            capture_ns,
        }
    }

    /// Collective: copy checkpoint `version` of `name` from the node-local tier to the global
    /// tier and publish it there (DURABLE).
    pub fn flush(&mut self, name: &str, version: i64) -> Result<()> {
        let Some(global) = self.global.clone() else {
            return Ok(());
        };
        let rank = self.topo.rank;
        let key = rank_key(name, version, rank);
        let t0 = Instant::now();
        let copied = global
            .remove(&manifest_key(name, version))
            .map_err(Error::from)
            .and_then(|()| part::copy_object(&*self.first, &*global, &key))
            .map_err(|e| {
                e.context(format!(
                    "rank {rank}: flushing {name} v{version} to the global tier {}",
                    global.location()
                ))
            });
        let mut v = [copied.is_ok() as i64, -(t0.elapsed().as_nanos() as i64)];
        self.comm.allreduce_i64(&mut v, Op::Min)?;
        if v[0] != 1 {
            return Err(match copied {
                Err(e) => e,
                Ok(_) => Error::new(
                    ErrorKind::Peer,
                    format!("flush of {name} v{version} failed on another rank (see its message)"),
                ),
            });
        }
        // As for capture: no rank may report the version durable before the global manifest
        // is out.
        self.publish(
            &*global,
            name,
            version,
            CkptState::Durable,
            (-v[1]) as u64,
            rank == 0,
        )?;
        let ns = self.names.entry(name.to_string()).or_default();
        ns.global.insert(version);
        let doomed = if self.cfg.keep_global == 0 {
            Vec::new()
        } else {
            window(&mut ns.global, self.cfg.keep_global)
        };
        self.schedule_delete(global, name, doomed, true);
        info!(
            "cairn: rank {rank}: {name} v{version} is durable on {}",
            self.cfg.global.display()
        );
        Ok(())
    }

    /// Delete versions in the background: the publisher unpublishes first, so a version is
    /// ineligible before any of its parts disappear.
    fn schedule_delete(
        &self,
        tier: Arc<dyn Tier>,
        name: &str,
        versions: Vec<i64>,
        global_scope: bool,
    ) {
        if versions.is_empty() {
            return;
        }
        let publisher = if global_scope {
            self.topo.rank == 0
        } else {
            self.topo.is_node_leader()
        };
        let rank = self.topo.rank;
        let name = name.to_string();
        self.deleter.submit(Box::new(move || {
            for v in versions {
                delete_version(&*tier, &name, v, rank, publisher);
            }
        }));
    }

    /// Collective: rebuild versions of `name` whose parts some ranks lost (a replaced or wiped
    /// node), newest first, down to the newest version every rank still holds. A version the
    /// scheme cannot rebuild is reported and skipped; restart then falls back to an older
    /// one or to the global tier.
    fn rebuild_missing(&mut self, name: &str) -> Result<()> {
        if self.plan.scheme == Scheme::Single || check_name(name).is_err() {
            return Ok(());
        }
        let rank = self.topo.rank;
        let mut mine = Vec::new();
        for v in catalog::versions(&*self.first, name).unwrap_or_default() {
            if let Ok(Some(m)) = catalog::read_manifest(&*self.first, name, v) {
                let has =
                    m.ranks.contains(&(rank as u32)) && self.first.exists(&rank_key(name, v, rank));
                mine.extend_from_slice(&v.to_le_bytes());
                mine.push(has as u8);
            }
        }
        let mut holders: BTreeMap<i64, usize> = BTreeMap::new();
        for theirs in self.comm.allgather(&mine)? {
            for rec in theirs.chunks_exact(9) {
                let v = i64::from_le_bytes(rec[..8].try_into().expect("8 bytes"));
                *holders.entry(v).or_default() += rec[8] as usize;
            }
        }
        for (v, have) in holders.iter().rev() {
            if *have == self.topo.size {
                break;
            }
            match protect::rebuild(&self.ctx(), name, *v) {
                Ok(report) => {
                    if let (Some(report), 0) = (report, rank) {
                        warn!("cairn: {name} v{v}: {report}");
                    }
                    break;
                }
                Err(e) if rank == 0 => warn!(
                    "cairn: cannot rebuild {name} v{v}: {}; falling back to an older checkpoint or the global tier",
                    e.msg
                ),
                Err(_) => {}
            }
        }
        Ok(())
    }

    /// Collective: rebuild and re-protect one version of `name` (`cairn rebuild`). Returns
    /// what was done, or `None` when nothing was missing.
    pub fn rebuild(&mut self, name: &str, version: i64) -> Result<Option<String>> {
        check_name(name)?;
        protect::rebuild(&self.ctx(), name, version)
    }

    /// Versions of `name` this rank could restore: version -> tiers holding its part.
    fn candidates(&self, name: &str) -> Result<(Candidates, Option<(i64, u32)>)> {
        let mut out: BTreeMap<i64, Vec<Arc<dyn Tier>>> = BTreeMap::new();
        let mut wrong_size: Option<(i64, u32)> = None;
        let rank = self.topo.rank;
        let tiers: Vec<Arc<dyn Tier>> = std::iter::once(self.first.clone())
            .chain(self.global.clone())
            .collect();
        for tier in tiers {
            for v in catalog::versions(&*tier, name)? {
                let m = match catalog::read_manifest(&*tier, name, v) {
                    Ok(Some(m)) => m,
                    Ok(None) => continue,
                    Err(e) => {
                        warn!(
                            "cairn: rank {rank}: skipping checkpoint {name} v{v}: {}",
                            e.msg
                        );
                        continue;
                    }
                };
                if m.world_size as usize != self.topo.size {
                    wrong_size = wrong_size.max(Some((v, m.world_size)));
                    continue;
                }
                if m.ranks.contains(&(rank as u32)) && tier.exists(&rank_key(name, v, rank)) {
                    out.entry(v).or_default().push(tier.clone());
                }
            }
        }
        Ok((out, wrong_size))
    }

    /// Collective: the newest version `<= upper` present in every rank's candidates.
    fn agree_newest(&self, cands: &Candidates, upper: i64) -> Result<Option<i64>> {
        let mut upper = upper;
        loop {
            let mine = cands
                .range(..=upper)
                .next_back()
                .map(|(v, _)| *v)
                .unwrap_or(-1);
            let mut v = [mine];
            self.comm.allreduce_i64(&mut v, Op::Min)?;
            if v[0] < 0 {
                return Ok(None);
            }
            if self.comm.all_agree(cands.contains_key(&v[0]))? {
                return Ok(Some(v[0]));
            }
            upper = v[0] - 1;
        }
    }

    /// Collective: the newest version of `name` every rank can restore, from any tier, or
    /// `None`. A checkpoint written by a different number of ranks is an error when nothing
    /// else can be restored.
    pub fn restart_test(&mut self, name: &str) -> Result<Option<i64>> {
        self.rebuild_missing(name)?;
        let cands = agree(
            &*self.comm,
            check_name(name)
                .map_err(Error::from)
                .and_then(|()| self.candidates(name)),
            "look for checkpoints",
        )?;
        let (cands, wrong_size) = cands;
        let found = self.agree_newest(&cands, i64::MAX)?;
        let mut ws = [
            wrong_size.map(|(v, _)| v).unwrap_or(-1),
            wrong_size.map(|(_, n)| n as i64).unwrap_or(-1),
        ];
        self.comm.allreduce_i64(&mut ws, Op::Max)?;
        match (found, ws[0]) {
            (None, v) if v >= 0 => Err(Error::new(
                ErrorKind::Mismatch,
                format!(
                    "checkpoint {name} v{v} was written by {} ranks but this job has {}; relaunch with {} ranks, or remove it to start afresh",
                    ws[1], self.topo.size, ws[1]
                ),
            )),
            (Some(f), v) if v > f && self.topo.rank == 0 => {
                warn!("cairn: ignoring {name} v{v}, written by {} ranks (this job has {}); using v{f}", ws[1], self.topo.size);
                Ok(Some(f))
            }
            (f, _) => Ok(f),
        }
    }

    /// Collective: restore `regions` from checkpoint `version` of `name`. If that checkpoint
    /// turns out to be damaged on any rank, the next older one every rank can restore is used
    /// instead, with a message naming the damage. Returns the version restored.
    pub fn restart(
        &mut self,
        name: &str,
        version: i64,
        regions: &mut [RegionMut<'_>],
    ) -> Result<i64> {
        let t0 = Instant::now();
        let rank = self.topo.rank;
        // Background deletions must not race with the clean-up of newer versions below.
        self.deleter.drain();
        self.rebuild_missing(name)?;
        let (mut cands, _) = agree(
            &*self.comm,
            check_name(name)
                .map_err(Error::from)
                .and_then(|()| self.candidates(name)),
            "look for checkpoints",
        )?;
        if !self.comm.all_agree(cands.contains_key(&version))? {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!("rank {rank}: checkpoint {name} v{version} cannot be restarted: it is not complete on every rank (see `cairn list`)"),
            ));
        }
        let mut v = version;
        let mut repaired = BTreeSet::new();
        loop {
            let tiers = cands.get(&v).cloned().unwrap_or_default();
            let res = self.restore_from(name, v, &tiers, regions);
            let mismatch = matches!(&res, Err(e) if e.kind == ErrorKind::Mismatch);
            let mut flags = [res.is_ok() as i64, -(mismatch as i64)];
            self.comm.allreduce_i64(&mut flags, Op::Min)?;
            if flags[0] == 1 {
                break;
            }
            if flags[1] == -1 {
                return Err(match res {
                    Err(e) if e.kind == ErrorKind::Mismatch => e,
                    _ => Error::new(ErrorKind::Peer, format!("checkpoint {name} v{v} does not fit the protected regions of another rank (see its message)")),
                });
            }
            // Damaged parts of a redundant checkpoint are repaired from its partners or parity
            // before anything older is considered.
            if self.plan.scheme != Scheme::Single && repaired.insert(v) {
                if let Err(e) = &res {
                    warn!("cairn: rank {rank}: checkpoint {name} v{v} cannot be restored: {}; rebuilding it from redundancy", e.msg);
                    let _ = self.first.remove(&rank_key(name, v, rank));
                }
                match protect::rebuild(&self.ctx(), name, v) {
                    Ok(Some(report)) => {
                        if rank == 0 {
                            warn!("cairn: repaired {name} v{v}: {report}");
                        }
                        let tiers = cands.entry(v).or_default();
                        if !tiers.iter().any(|t| Arc::ptr_eq(t, &self.first)) {
                            tiers.insert(0, self.first.clone());
                        }
                        continue;
                    }
                    Ok(None) => {}
                    Err(e) if rank == 0 => warn!("cairn: cannot repair {name} v{v}: {}", e.msg),
                    Err(_) => {}
                }
            }
            match &res {
                Err(e) => warn!("cairn: rank {rank}: checkpoint {name} v{v} cannot be restored: {}; falling back to an older checkpoint", e.msg),
                Ok(()) if rank == 0 => warn!("cairn: checkpoint {name} v{v} is damaged on another rank; falling back to an older checkpoint"),
                Ok(()) => {}
            }
            cands.remove(&v);
            match self.agree_newest(&cands, v - 1)? {
                Some(older) => {
                    if rank == 0 {
                        warn!("cairn: restarting {name} from v{older} instead of v{v}");
                    }
                    v = older;
                }
                None => {
                    return Err(Error::new(
                        ErrorKind::Corrupt,
                        format!("checkpoint {name} v{v} is damaged and no older checkpoint of {name} can be restored by every rank"),
                    ))
                }
            }
        }
        // The run continues from v: newer versions (damaged, incomplete, or from the run that
        // went on past v) would otherwise be taken for its future. Remove them now, before any
        // new checkpoint of this run can reuse their numbers.
        let mut all_newer: BTreeSet<i64> = cands.range(v + 1..).map(|(k, _)| *k).collect();
        let tiers: Vec<Arc<dyn Tier>> = std::iter::once(self.first.clone())
            .chain(self.global.clone())
            .collect();
        for tier in &tiers {
            if let Ok(vs) = catalog::versions(&**tier, name) {
                all_newer.extend(vs.into_iter().filter(|x| *x > v));
            }
        }
        for tier in &tiers {
            let publisher = if tier.scope() == Scope::Global {
                rank == 0
            } else {
                self.topo.is_node_leader()
            };
            for x in &all_newer {
                delete_version(&**tier, name, *x, rank, publisher);
            }
        }
        // Ranks of one node share its tier: a rank that went on to write the next checkpoint
        // while another was still listing newer versions would have its new part deleted.
        self.comm.barrier()?;
        let first_is_global = self.global.is_none();
        let ns = self.names.entry(name.to_string()).or_default();
        ns.first = cands
            .iter()
            .filter(|(k, t)| **k <= v && t.iter().any(|t| Arc::ptr_eq(t, &self.first)))
            .map(|(k, _)| *k)
            .collect();
        ns.global = if first_is_global {
            BTreeSet::new()
        } else {
            cands
                .iter()
                .filter(|(k, t)| **k <= v && t.iter().any(|t| t.scope() == Scope::Global))
                .map(|(k, _)| *k)
                .collect()
        };
        ns.last = Some(v);
        ns.restored = Some(v);
        self.stats.restarts += 1;
        self.stats.restart_seconds += t0.elapsed().as_secs_f64();
        self.stats.restored_version = v;
        self.calls_since = 0;
        self.last_ckpt = Instant::now();
        if rank == 0 {
            info!("cairn: restored {name} v{v}");
        }
        Ok(v)
    }

    fn restore_from(
        &self,
        name: &str,
        v: i64,
        tiers: &[Arc<dyn Tier>],
        regions: &mut [RegionMut<'_>],
    ) -> Result<()> {
        let rank = self.topo.rank;
        let key = rank_key(name, v, rank);
        let mut last_err = Error::new(
            ErrorKind::NotFound,
            format!("rank {rank}: no tier holds {key}"),
        );
        for tier in tiers {
            let where_ = format!(
                "rank {rank}: {} tier {}/{key}",
                tier.label(),
                tier.location()
            );
            let attempt = (|| -> Result<()> {
                let r = tier.open(&key)?;
                let index = part::read_index(&*r)?;
                if index.name != name
                    || index.version != v
                    || index.rank as usize != rank
                    || index.world_size as usize != self.topo.size
                {
                    return Err(Error::new(
                        ErrorKind::Corrupt,
                        format!(
                            "file holds {} v{} of rank {}/{}",
                            index.name, index.version, index.rank, index.world_size
                        ),
                    ));
                }
                part::check_fits(&index, regions)?;
                part::restore(&*r, &index, regions)
            })();
            match attempt {
                Ok(()) => return Ok(()),
                Err(e) if e.kind == ErrorKind::Mismatch => {
                    return Err(e.context(format!("rank {rank}: checkpoint {name} v{v}")))
                }
                Err(e) => {
                    warn!("cairn: {where_}: {}", e.msg);
                    last_err = e.context(where_);
                }
            }
        }
        Err(last_err)
    }

    /// Collective when a time policy is set: whether the configured policy says a checkpoint
    /// is due. Every call counts as one step.
    pub fn need_checkpoint(&mut self) -> Result<bool> {
        self.calls_since += 1;
        let by_steps = self.cfg.every > 0 && self.calls_since >= self.cfg.every;
        if self.cfg.seconds > 0.0 {
            let mut v =
                [(by_steps || self.last_ckpt.elapsed().as_secs_f64() >= self.cfg.seconds) as i64];
            self.comm.allreduce_i64(&mut v, Op::Max)?;
            return Ok(v[0] == 1);
        }
        Ok(by_steps || self.cfg.every == 0)
    }

    /// Collective: wait for background deletions and release the engine.
    pub fn finalize(mut self) -> Result<()> {
        self.deleter.finish();
        self.comm.barrier()?;
        Ok(())
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.deleter.finish();
    }
}

/// Remove one version from a tier: the publisher first unpublishes the manifest (making the
/// version ineligible), then each rank removes its own part, and the publisher the directory.
fn delete_version(tier: &dyn Tier, name: &str, version: i64, rank: usize, publisher: bool) {
    let res = (|| -> cairn_tier::Result<()> {
        if publisher {
            tier.remove(&manifest_key(name, version))?;
        }
        tier.remove(&rank_key(name, version, rank))?;
        if publisher {
            tier.remove_all(&version_dir(name, version))?;
        }
        Ok(())
    })();
    if let Err(e) = res {
        warn!("cairn: rank {rank}: could not delete {name} v{version}: {e}");
    }
}

/// The cache window: keep the newest `keep` (at least one) versions of `set`, whose newest
/// member is the checkpoint just confirmed on every rank. Returns the versions removed.
fn window(set: &mut BTreeSet<i64>, keep: usize) -> Vec<i64> {
    let keepers: BTreeSet<i64> = set.iter().rev().take(keep.max(1)).copied().collect();
    let doomed: Vec<i64> = set
        .iter()
        .filter(|v| !keepers.contains(v))
        .copied()
        .collect();
    for v in &doomed {
        set.remove(v);
    }
    doomed
}

/// Collective: turn a per-rank result into an agreed one. Every rank fails if any does; a rank
/// whose own step succeeded reports that another rank failed.
pub(crate) fn agree<T>(comm: &dyn Comm, res: Result<T>, what: &str) -> Result<T> {
    let ok = comm.all_agree(res.is_ok())?;
    match res {
        Ok(v) if ok => Ok(v),
        Ok(_) => Err(Error::new(
            ErrorKind::Peer,
            format!("cairn could not {what} on another rank (see its message)"),
        )),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::window;
    use std::collections::BTreeSet;

    #[test]
    fn window_keeps_the_newest() {
        let mut s: BTreeSet<i64> = [1, 2, 3, 4].into();
        assert_eq!(window(&mut s, 2), vec![1, 2]);
        assert_eq!(s, [3, 4].into());
        let mut s: BTreeSet<i64> = [1, 2, 3, 4].into();
        assert_eq!(window(&mut s, 1), vec![1, 2, 3]);
        assert_eq!(s, [4].into());
        let mut s: BTreeSet<i64> = [7].into();
        assert_eq!(
            window(&mut s, 0),
            Vec::<i64>::new(),
            "keep 0 still keeps the newest"
        );
    }
}
