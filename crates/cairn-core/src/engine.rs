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
//! - DURABLE (`Engine::start_flush`, then `Engine::settle`): when the flush schedule says so,
//!   each rank's background `Flusher` copies its rank file to the global tier; at a later
//!   collective call the ranks agree that every copy is committed, rank 0 publishes the
//!   global manifest, and all ranks agree again. A failed copy anywhere abandons the flush
//!   on every rank; the version stays node-local.
//!
//! Deletion (`window`, `Engine::schedule_delete`) runs on a background thread, off the
//! application's critical path, and starts only after the reduction that confirms every
//! manifest of the new checkpoint is published: at that point the new checkpoint is
//! restart-eligible everywhere, so the versions the cache window drops are never the newest
//! eligible one, whatever `[cache] keep` says.

use crate::agree::agree;
use crate::catalog::{self, commit_key, manifest_key, rank_key, version_dir};
use crate::config::{Config, NodeLocal};
use crate::error::{Error, ErrorKind, Result};
use crate::flush::{CopyJob, Flusher, JobState, Limits, Recode};
use crate::joblock::Locks;
use crate::memstore;
use crate::part::{
    self, Codec, Codecs, FileRegion, Hashes, PartMeta, Reduction, RegionMut, RegionRef,
};
use crate::policy::{Covers, Policy};
use crate::protect;
use cairn_comm::{Comm, Op, Topology};
use cairn_format::{CkptState, Dtype, Manifest, MANIFEST_FORMAT};
use cairn_redundancy::{Plan, Scheme, Settings};
use cairn_tier::{DirTier, MemTier, Scope, Tier};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tracing::{debug, info, warn};

/// Counters an application or the demo can print.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Stats {
    pub checkpoints: u64,
    /// Wall time spent inside `checkpoint`, seconds.
    pub checkpoint_seconds: f64,
    /// Bytes of region data this rank checkpointed (raw).
    pub bytes_written: u64,
    /// Bytes of region data this rank stored for them, after zero blocks, unchanged blocks
    /// and compression were taken out.
    pub bytes_stored: u64,
    /// Checkpoints written incrementally.
    pub incrementals: u64,
    pub restarts: u64,
    pub restart_seconds: f64,
    /// Version restored by the last restart, or -1.
    pub restored_version: i64,
    /// Checkpoints made durable on the global tier by flushes in this run.
    pub flushes: u64,
    /// Flushes that failed (the checkpoint stayed node-local).
    pub flush_failures: u64,
    /// Sum over flushes of the time from the start of the copy until every rank's copy was
    /// committed (the slowest rank's time), seconds.
    pub flush_seconds: f64,
}

#[derive(Debug, Default)]
struct NameState {
    /// Versions known complete on the first tier (local, or global when local is off).
    first: BTreeSet<i64>,
    /// Versions known durable on the global tier (when it is not the first tier).
    global: BTreeSet<i64>,
    last: Option<i64>,
    restored: Option<i64>,
    /// Checkpoints taken in this run, for the redundancy and flush schedules.
    count: u64,
    /// Versions with a flush in progress: the cache window must not delete them yet.
    pinned: BTreeSet<i64>,
    /// Versions the cache window dropped while pinned, deleted when their flush ends.
    deferred: BTreeSet<i64>,
    /// Versions written with the job's redundancy scheme (the others are stored single).
    protected: BTreeSet<i64>,
    /// Flushes that failed, with the reason.
    failed: BTreeMap<i64, String>,
    /// When the last flush of this name began.
    last_flush: Option<Instant>,
    /// Base of each version on the first tier (`None`: a full checkpoint).
    bases: BTreeMap<i64, Option<i64>>,
    /// The newest version on the first tier and this rank's block hashes of it: the base of
    /// the next incremental checkpoint. Set alike on every rank.
    hashes: Option<(i64, Hashes)>,
}

impl NameState {
    /// Versions `v` needs on the first tier: itself and the chain of bases below it.
    fn chain(&self, v: i64) -> Vec<i64> {
        let mut out = vec![v];
        let mut at = v;
        while let Some(Some(b)) = self.bases.get(&at) {
            out.push(*b);
            at = *b;
        }
        out
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// What a successful restore read.
struct Restored {
    /// Block hashes of the restored contents when they came from the first tier (so the next
    /// checkpoint may be incremental against them).
    hashes: Option<Hashes>,
    /// Parts read: 1 for a full checkpoint.
    chain: usize,
    /// The buffers [`Engine::restart_sized`] was given, filled.
    extra: Vec<OwnedRegion>,
}

/// The shape of a stored region: what a buffer for it must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    pub id: i32,
    pub dtype: Dtype,
    /// Elements of `dtype`.
    pub count: u64,
    /// A stored file that holds exactly this region's bytes as they are (a file the tier
    /// adopted when the checkpoint was taken), if there is one: the region may be taken from
    /// it in place (see [`OwnedRegion::in_place`]) instead of being copied.
    pub stored: Option<std::path::PathBuf>,
}

impl Shape {
    /// Bytes of the region.
    pub fn bytes(&self) -> u64 {
        self.count * self.dtype.size() as u64
    }
}

/// What [`Engine::restart_sized`] asks for buffers: given the version being read and the
/// shapes of the regions that need one.
pub type SizedFn<'a> = dyn FnMut(i64, &[Shape]) -> Result<Vec<OwnedRegion>> + 'a;

/// A buffer the caller of [`Engine::restart_sized`] owns, for one stored region: a `Vec<u8>`,
/// or a writable mapping of the file the region becomes.
pub struct OwnedRegion {
    pub id: i32,
    pub dtype: Dtype,
    pub buf: Box<dyn AsMut<[u8]> + Send>,
    /// A file to take the region from where it is rather than restore it into `buf` (which
    /// is then not used), after the restart checked every block of the file against the
    /// checkpoint's index. Either the region's [`Shape::stored`] file, which fails over like
    /// any damaged part if a block differs, or a copy of the region's bytes the caller kept
    /// (say the file a checkpoint was taken from): if that one differs, or is not a regular
    /// file, the region is restored into `buf` after all and this is set to `None`, so
    /// `buf` must be a real buffer of the region's length.
    pub in_place: Option<std::path::PathBuf>,
}

impl OwnedRegion {
    /// A buffer for region `id`, restored by copying into it.
    pub fn new(id: i32, dtype: Dtype, buf: Box<dyn AsMut<[u8]> + Send>) -> OwnedRegion {
        OwnedRegion {
            id,
            dtype,
            buf,
            in_place: None,
        }
    }

    /// A zeroed buffer in memory of the size of `shape`; an error, not an abort, when the
    /// memory cannot be had.
    pub fn zeroed(shape: &Shape) -> Result<OwnedRegion> {
        let bytes = usize::try_from(shape.bytes()).map_err(|_| {
            Error::new(
                ErrorKind::Corrupt,
                format!(
                    "region {} is {} bytes, too large here",
                    shape.id,
                    shape.bytes()
                ),
            )
        })?;
        let mut buf = Vec::new();
        buf.try_reserve_exact(bytes).map_err(|_| {
            Error::new(
                ErrorKind::Io,
                format!("region {}: no memory for its {bytes} bytes", shape.id),
            )
        })?;
        buf.resize(bytes, 0);
        Ok(OwnedRegion::new(shape.id, shape.dtype, Box::new(buf)))
    }

    /// The buffer's bytes.
    pub fn bytes(&mut self) -> &mut [u8] {
        self.buf.as_mut().as_mut()
    }
}

impl std::fmt::Debug for OwnedRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedRegion")
            .field("id", &self.id)
            .field("dtype", &self.dtype)
            .finish_non_exhaustive()
    }
}

/// Versions a rank can restore, each with the tiers holding its part (fastest first).
type Candidates = BTreeMap<i64, Vec<Arc<dyn Tier>>>;

/// What `Engine::candidates` finds: the candidates, a newer checkpoint written by another
/// number of ranks (version, ranks), and for each version on the first tier its base and
/// whether it was stored with redundancy.
type Found = (
    Candidates,
    Option<(i64, u32)>,
    BTreeMap<i64, (Option<i64>, bool)>,
);

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
    /// Codec of the first tier.
    codecs: Codecs,
    /// How flushes encode the global copy.
    recode: Recode,
    names: HashMap<String, NameState>,
    calls_since: u64,
    last_ckpt: Instant,
    started: Instant,
    stats: Stats,
    deleter: Deleter,
    flusher: Flusher,
    /// Flushes not yet settled, in the order they were started (the same on every rank).
    pending: VecDeque<(String, i64)>,
    /// Whether the next checkpoint gets the redundancy scheme, whatever `[redundancy] every`
    /// says (FTI's levels choose per checkpoint); `None`: the schedule decides.
    next_redundancy: Option<bool>,
    /// Versions written by another number of ranks already reported (once each).
    warned_world: BTreeSet<(String, i64)>,
    policy: Policy,
    /// Longest checkpoint of this run, seconds (for the time needed before the deadline).
    max_ckpt: f64,
    /// Set once `should_exit` said yes; it never turns false again.
    exiting: bool,
    /// The job locks this rank holds ([`joblock`]).
    locks: Locks,
    /// Names whose locks every rank holds.
    claimed: HashSet<String>,
}

/// A random job id for the job lock (the time and pid if the kernel gives no randomness).
fn job_id() -> i64 {
    let r = getrandom::u64().unwrap_or_else(|_| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        t ^ (u64::from(std::process::id()) << 32)
    });
    // Non-negative, so that it wins the Max reduction over the other ranks' i64::MIN.
    (r >> 1) as i64
}

/// A checkpoint name the application gave: a bad one is an invalid argument (the same check
/// on a name read from storage means damage, which is what `FormatError` converts to).
fn check_name(name: &str) -> Result<()> {
    cairn_format::check_name(name)
        .map_err(|e| Error::new(ErrorKind::InvalidArgument, e.to_string()))
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
pub(crate) fn open_root(
    label: &str,
    root: &std::path::Path,
    fsync: bool,
    scope: Scope,
) -> Result<DirTier> {
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

/// The first tier's codec, and how flushes encode the global copy, from `[reduction]`.
pub(crate) fn codecs(cfg: &Config) -> (Codecs, Recode) {
    let settings = |name: &str| Codecs {
        codec: Codec::parse(name).expect("the config checks codec names"),
        level: cfg.level as i32,
        shuffle: cfg.shuffle,
    };
    let local = settings(&cfg.compress);
    let global = settings(cfg.global_compress.as_deref().unwrap_or(&cfg.compress));
    let first = if cfg.has_local() { local } else { global };
    let recode = Recode {
        codecs: global,
        same: local == global,
    };
    (first, recode)
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

/// Collective: rank 0 reads (or creates) the key of `[security] key_file` and hands it to
/// every rank, which authenticates every checkpoint from then on (`auth`).
fn share_key(comm: &dyn Comm, cfg: &Config, rank: usize) -> Result<()> {
    let path = match &cfg.key_file {
        Some(p) => Ok(p.clone()),
        None if rank == 0 => crate::auth::default_key_file(),
        None => Ok(std::path::PathBuf::from("the key file of rank 0")),
    };
    let mine = match rank {
        0 => path.clone().and_then(|p| crate::auth::load_or_create(&p)),
        _ => Ok([0u8; 32]),
    };
    let key = agree(comm, mine, "read the authentication key")?;
    let mut words = [i64::MIN; 4];
    if rank == 0 {
        for (w, c) in words.iter_mut().zip(key.chunks_exact(8)) {
            *w = i64::from_le_bytes(c.try_into().expect("8 bytes"));
        }
    }
    comm.allreduce_i64(&mut words, Op::Max)?;
    let mut shared = [0u8; 32];
    for (c, w) in shared.chunks_exact_mut(8).zip(words) {
        c.copy_from_slice(&w.to_le_bytes());
    }
    let res = path.and_then(|p| crate::auth::enable(&p, shared));
    agree(comm, res, "turn authentication on")
}

/// A rank's first tier, and the global tier behind it when the first is node-local.
pub type FirstAndGlobal = (Arc<dyn Tier>, Option<Arc<dyn Tier>>);

/// The tiers `cfg` names, for the rank of `topo`: the global directory, and the node's own
/// directory or shared-memory store in front of it.
fn open_tiers(cfg: &Config, topo: &Topology) -> Result<FirstAndGlobal> {
    let global = open_root("global", &cfg.global, cfg.fsync_global, Scope::Global)?;
    let global: Arc<dyn Tier> = Arc::new(global);
    Ok(match cfg.node_local() {
        NodeLocal::Dir(local) => {
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
        NodeLocal::Mem => {
            let store = memstore::store_config(cfg, memstore::owner(cfg, topo));
            let t: Arc<dyn Tier> = Arc::new(MemTier::open("local", &store)?);
            (t, Some(global))
        }
        NodeLocal::None => (global, None),
    })
}

impl Engine {
    /// Collective: set up the engine over `comm`. Fails on every rank if it fails on one.
    pub fn new(comm: Box<dyn Comm + Send>, cfg: Config) -> Result<Engine> {
        Self::with_tiers(comm, cfg, open_tiers)
    }

    /// Collective: [`Engine::new`] over the tiers `tiers` gives this rank (its first tier,
    /// and the global tier behind it when that is another) instead of the directories and
    /// the store `cfg` names: for tiers that simulate failures ([`cairn_tier::CrashTier`]).
    pub fn with_tiers(
        comm: Box<dyn Comm + Send>,
        cfg: Config,
        tiers: impl FnOnce(&Config, &Topology) -> Result<FirstAndGlobal>,
    ) -> Result<Engine> {
        init_logging(&cfg.log_level);
        let topo = Topology::discover(&*comm, cfg.sim_nodes, cfg.domain_env.as_deref());
        let setup = topo.map_err(Error::from).and_then(|topo| {
            let settings = Settings {
                scheme: Scheme::parse(&cfg.redundancy).expect("config checks the scheme"),
                set_size: cfg.set_size,
                parity: cfg.parity,
            };
            let plan = cairn_redundancy::plan(&settings, &topo).map_err(Error::config)?;
            let policy = Policy::new(&cfg, topo.nodes)?;
            if plan.scheme != Scheme::Single && !cfg.has_local() {
                return Err(Error::config(format!(
                    "[redundancy] scheme \"{}\" protects node-local checkpoints, but [tiers] local is \"none\"",
                    cfg.redundancy
                )));
            }
            let (first, global) = tiers(&cfg, &topo)?;
            Ok((topo, plan, first, global, policy))
        });
        let (topo, plan, first, global, mut policy) = agree(&*comm, setup, "initialise")?;
        // The job's end as Slurm knows it: rank 0 alone looks it up (thousands of ranks must
        // not all ask slurmctld), and the Max reduction hands its answer to every rank.
        let mut end = policy.job_end_share(topo.rank);
        comm.allreduce_i64(&mut end, Op::Max)?;
        policy.set_job_end(end);
        // The job's id in its locks: rank 0's random number, handed to every rank.
        let mut job = [if topo.rank == 0 { job_id() } else { i64::MIN }];
        comm.allreduce_i64(&mut job, Op::Max)?;
        let locks = Locks::new(job[0] as u64, Duration::from_secs_f64(cfg.lock_lease));
        if cfg.authenticate {
            share_key(&*comm, &cfg, topo.rank)?;
        }
        if topo.rank == 0 {
            if let Some(msg) = cfg.ignored_env_report() {
                warn!("cairn: {msg}");
            }
        }
        let (codecs, recode) = codecs(&cfg);
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
            topo,
            first,
            global,
            plan,
            codecs,
            recode,
            names: HashMap::new(),
            calls_since: 0,
            last_ckpt: Instant::now(),
            started: Instant::now(),
            stats: Stats {
                restored_version: -1,
                ..Stats::default()
            },
            deleter: Deleter::new(),
            flusher: Flusher::new(Limits {
                buffer: cfg.flush_buffer,
                bandwidth: cfg.flush_bandwidth,
                low_priority: cfg.flush_low_priority,
                direct: cfg.flush_direct,
            }),
            pending: VecDeque::new(),
            next_redundancy: None,
            warned_world: BTreeSet::new(),
            policy,
            max_ckpt: 0.0,
            exiting: false,
            locks,
            claimed: HashSet::new(),
            cfg,
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
        self.checkpoint_files(name, version, regions, &[])
    }

    /// Make the next checkpoint (of any name) get the redundancy scheme (`Some(true)`) or
    /// not (`Some(false)`), whatever `[redundancy] every` says; `None` restores the schedule.
    /// Every rank must ask the same. With scheme "single" there is nothing to add.
    pub fn set_next_redundancy(&mut self, redundant: Option<bool>) {
        self.next_redundancy = redundant;
    }

    /// [`Engine::checkpoint`] with files as regions too (the file API), after `regions`. On
    /// a directory tier on the files' file system the files become part of the checkpoint
    /// where they are, without a copy (see [`part::write_part_files`]); they are gone from
    /// their paths afterwards in that case, whether the checkpoint succeeded or not.
    pub fn checkpoint_files(
        &mut self,
        name: &str,
        version: i64,
        regions: &[RegionRef<'_>],
        files: &[FileRegion<'_>],
    ) -> Result<()> {
        let t0 = Instant::now();
        let rank = self.topo.rank;
        self.claim(name)?;
        let lost = self.locks.check();
        self.settle(None)?;
        let flush_time_due = self.flush_time_due(name);
        let forced = self.next_redundancy.take();
        let ns = self.names.entry(name.to_string()).or_default();
        let nth = ns.count + 1;
        let redundant = self.plan.scheme != Scheme::Single
            && forced.unwrap_or(nth % self.cfg.redundancy_every.max(1) == 0);
        // Incremental against the last checkpoint when its chain is short enough and it is
        // protected at least as well as this one will be (a chain is only as safe as its
        // weakest part). Every input is the same on every rank.
        let base = ns.hashes.as_ref().map(|(b, _)| *b).filter(|b| {
            self.cfg.incremental
                && ns.first.contains(b)
                && (ns.chain(*b).len() as u64) < self.cfg.full_every
                && (!redundant || ns.protected.contains(b))
                && *b < version
        });
        if self.cfg.incremental {
            debug!(
                "cairn: rank {rank}: {name} v{version}: {}",
                base.map_or("full".to_string(), |b| format!("incremental of v{b}"))
            );
        }
        let mut noop = false;
        let first = self.first.clone();
        let pre: Result<()> = (|| {
            check_name(name)?;
            lost?;
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
            // A previous run may have left this version (complete or not): unpublish it
            // before overwriting any part, so a crash mid-write can never make a mix
            // eligible. Before the agreement below: a rank whose tier fails here must not
            // skip an exchange the others enter.
            if !noop {
                first.remove(&manifest_key(name, version))?;
            }
            Ok(())
        })();
        let key = rank_key(name, version, rank);
        let partner = redundant && self.plan.scheme == Scheme::Partner;
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
            let meta = PartMeta {
                name,
                version,
                rank: rank as u32,
                world_size: self.topo.size as u32,
                block: self.cfg.block,
            };
            let red = Reduction {
                codecs: self.codecs,
                base: base.and_then(|b| {
                    let ns = self.names.get(name)?;
                    ns.hashes.as_ref().map(|(_, h)| (b, h))
                }),
            };
            let ctx = self.ctx();
            // Files the tier adopts are read back for the partner: their bytes are in place
            // before the part is written, so there is nothing to stream alongside.
            let readback = self.cfg.partner_mode == "readback" || !files.is_empty();
            let res = match (partner, readback) {
                (true, true) => protect::write_readback(&ctx, meta, regions, files, red),
                (true, false) => protect::write_streamed(&ctx, meta, regions, red),
                (false, _) => part::write_part_files(&*first, &key, meta, regions, files, red),
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
        // The redundancy asked for is part of what every rank must agree on.
        let fp = fingerprint(name, version) ^ (redundant as i64) << 62;
        let mut v = [
            own_ok as i64,
            fp,
            -fp,
            -(write_ns as i64),
            noop as i64,
            -(noop as i64),
            -(flush_time_due as i64),
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
        let written = written.ok().flatten();
        let bytes: u64 = written
            .as_ref()
            .map_or(0, |ix| ix.regions.iter().map(|r| r.nbytes).sum());
        let stored = written.as_ref().map_or(0, |ix| ix.stored_bytes());
        let hashes = written
            .as_ref()
            .filter(|_| self.cfg.incremental)
            .and_then(Hashes::from_index);
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
        let scheme = if redundant {
            self.plan.describe()
        } else {
            "single".to_string()
        };
        let flush_due = !first_is_global
            && ((self.cfg.flush_every > 0 && nth % self.cfg.flush_every == 0) || v[6] == -1);
        // PROTECTED: partner copies were streamed with the write; sets encode their parity now.
        if redundant && matches!(self.plan.scheme, Scheme::Xor | Scheme::Rs) {
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
        // Scheme "single" promises survival of process failures only, which capture gives; a
        // checkpoint the redundancy schedule skipped promises less than the job's scheme.
        let full_scheme = redundant || self.plan.scheme == Scheme::Single;
        let state = if full_scheme || state == CkptState::Durable {
            state
        } else {
            CkptState::Captured
        };
        // A flush is about to copy parts to the global tier: a global manifest left there for
        // this version (by a run that failed to clean up) must go before any part is replaced,
        // and the publication's agreement below orders that before every rank's copy.
        let stale = if flush_due {
            self.unpublish_global(name, version)
        } else {
            Ok(())
        };
        // Return only once every node's manifest is out: a rank told that v is captured may
        // rely on it even if another node's leader dies right after.
        let published = stale.and_then(|()| {
            let m = self.manifest(name, version, state, &scheme, capture_ns, base, &*first);
            self.publish_one(&*first, &m, publish)
        });
        agree(
            &*self.comm,
            published,
            &format!("publish {name} v{version} on the {} tier", first.label()),
        )?;
        let ns = self.names.get_mut(name).expect("entry created above");
        ns.first.insert(version);
        ns.last = Some(version);
        ns.restored = None;
        ns.count += 1;
        ns.bases.insert(version, base);
        ns.hashes = hashes.map(|h| (version, h));
        if full_scheme {
            ns.protected.insert(version);
        }
        let keep = if first_is_global {
            self.cfg.keep_global
        } else {
            self.cfg.keep
        };
        let doomed = if keep == 0 {
            Vec::new()
        } else {
            first_window(ns, keep)
        };
        // Versions still being flushed are read by the flush thread: delete them once it ends.
        let (held, doomed): (Vec<i64>, Vec<i64>) =
            doomed.into_iter().partition(|v| ns.pinned.contains(v));
        ns.deferred.extend(held);
        self.schedule_delete(first, name, doomed, first_is_global);
        self.stats.checkpoints += 1;
        self.stats.bytes_written += bytes;
        self.stats.bytes_stored += stored;
        self.stats.incrementals += base.is_some() as u64;
        self.calls_since = 0;
        self.last_ckpt = Instant::now();
        let result = if flush_due {
            self.scheduled_flush(name, version)
        } else {
            Ok(())
        };
        let secs = t0.elapsed().as_secs_f64();
        self.stats.checkpoint_seconds += secs;
        self.max_ckpt = self.max_ckpt.max(secs);
        result
    }

    /// Whether the time schedule of `[flush] seconds` (fixed or `auto`) says the next
    /// checkpoint of `name` is due for a flush, on this rank.
    fn flush_time_due(&self, name: &str) -> bool {
        if self.global.is_none() {
            return false;
        }
        let interval = self.policy.schedule(
            self.cfg.flush_auto,
            self.cfg.flush_seconds,
            self.stats.flushes,
            self.stats.flush_seconds,
            Covers::GlobalOnly,
        );
        let since = self
            .names
            .get(name)
            .and_then(|ns| ns.last_flush)
            .unwrap_or(self.started)
            .elapsed()
            .as_secs_f64();
        interval.is_some_and(|iv| since >= iv)
    }

    /// Rank 0 removes the global manifest of `name` v`version`, if any, before a flush of that
    /// version replaces its parts; the caller's agreement orders this before every copy.
    fn unpublish_global(&self, name: &str, version: i64) -> Result<()> {
        match (&self.global, self.topo.rank) {
            (Some(g), 0) => Ok(g.remove(&manifest_key(name, version))?),
            _ => Ok(()),
        }
    }

    /// Collective: start the background copy of this rank's part of `name` v`version` to the
    /// global tier. The global manifest is published later, by `settle`, once every rank's
    /// copy is committed. At most one round of flushes runs at a time: a flush that comes due
    /// while older ones still run waits for them (the global tier sets the pace).
    fn start_flush(&mut self, name: &str, version: i64) -> Result<()> {
        let Some(global) = self.global.clone() else {
            return Ok(());
        };
        self.settle_all()?;
        let ns = self.names.entry(name.to_string()).or_default();
        ns.pinned.insert(version);
        ns.failed.remove(&version);
        ns.last_flush = Some(Instant::now());
        let scheme = if ns.protected.contains(&version) {
            self.plan.describe()
        } else {
            "single".to_string()
        };
        let mut record = self.manifest(
            name,
            version,
            CkptState::Durable,
            &scheme,
            0,
            None,
            &*global,
        );
        record.ranks = vec![self.topo.rank as u32];
        // A record left by an earlier flush of this version must not outlive its copy.
        let _ = global.remove(&commit_key(name, version, self.topo.rank));
        self.flusher.submit(CopyJob {
            name: name.to_string(),
            version,
            rank: self.topo.rank,
            src: self.first.clone(),
            dst: global,
            recode: self.recode,
            commit: Some(crate::auth::encode_manifest(&record)),
        });
        self.pending.push_back((name.to_string(), version));
        Ok(())
    }

    /// Collective: start a scheduled flush, and with `[flush] mode = "sync"` wait for it.
    fn scheduled_flush(&mut self, name: &str, version: i64) -> Result<()> {
        self.start_flush(name, version)?;
        if self.cfg.flush_sync {
            self.wait_durable(name, version)?;
        }
        Ok(())
    }

    /// Collective: wait until every flush under way has ended and publish the versions that
    /// became durable; never starts a flush (a failed one is reported by `test` / `flush`
    /// and leaves its version node-local, as always).
    pub fn wait_flushes(&mut self) -> Result<()> {
        self.settle_all()
    }

    /// Collective: wait for every pending flush and settle it.
    fn settle_all(&mut self) -> Result<()> {
        match self.pending.back().cloned() {
            Some(last) => self.settle(Some(last)),
            None => Ok(()),
        }
    }

    /// Collective: settle the pending flushes in order. For each, the ranks agree whether all
    /// their copies are committed; if so, rank 0 publishes the global manifest (DURABLE); if a
    /// copy failed anywhere, the flush is abandoned and its global parts removed (the version
    /// stays node-local, restart-eligible as before). With `until`, waits for the flushes up
    /// to that one; without, settles only what has finished on every rank.
    fn settle(&mut self, until: Option<(String, i64)>) -> Result<()> {
        let rank = self.topo.rank;
        while let Some((name, v)) = self.pending.front().cloned() {
            // Wait only for flushes queued no later than `until` (it is still in the queue).
            let block = until.as_ref().is_some_and(|u| self.pending.contains(u));
            let st = if block {
                self.flusher.wait(&name, v)
            } else {
                self.flusher.state(&name, v)
            };
            let (code, secs) = match &st {
                Some(JobState::Done { seconds, .. }) => (2, *seconds),
                Some(JobState::Failed(_)) | None => (0, 0.0),
                Some(_) => (1, 0.0),
            };
            let mut a = [code, -((secs * 1e9) as i64)];
            self.comm.allreduce_i64(&mut a, Op::Min)?;
            if a[0] == 1 {
                // Still copying somewhere, and nobody waits for it.
                return Ok(());
            }
            let slowest = (-a[1]) as f64 / 1e9;
            let global = self.global.clone().expect("flushes need a global tier");
            let outcome = if a[0] == 2 {
                let scheme = match self.names.get(&name) {
                    Some(ns) if ns.protected.contains(&v) => self.plan.describe(),
                    _ => "single".to_string(),
                };
                // Flushes merge chains: the global copy is always a full checkpoint.
                let m = self.manifest(
                    &name,
                    v,
                    CkptState::Durable,
                    &scheme,
                    (slowest * 1e9) as u64,
                    None,
                    &*global,
                );
                let res = self.publish_one(&*global, &m, rank == 0);
                agree(
                    &*self.comm,
                    res,
                    &format!("publish {name} v{v} on the global tier"),
                )
            } else {
                Err(match &st {
                    Some(JobState::Failed(msg)) => Error::new(ErrorKind::Io, msg.clone()),
                    None => Error::new(
                        ErrorKind::State,
                        format!("rank {rank}: no flush of {name} v{v} was started here"),
                    ),
                    _ => Error::new(
                        ErrorKind::Peer,
                        format!(
                            "the flush of {name} v{v} failed on another rank (see its message)"
                        ),
                    ),
                })
            };
            if outcome.is_ok() {
                self.stats.flushes += 1;
                self.stats.flush_seconds += slowest;
                info!(
                    "cairn: rank {rank}: {name} v{v} is durable on {}",
                    global.location()
                );
            } else {
                self.stats.flush_failures += 1;
                // Nothing was published: remove this rank's copy so no stray part remains.
                let _ = global.remove(&commit_key(&name, v, rank));
                let _ = global.remove(&rank_key(&name, v, rank));
            }
            self.pending.pop_front();
            self.flusher.forget(&name, v);
            let ns = self.names.entry(name.clone()).or_default();
            ns.pinned.remove(&v);
            match &outcome {
                Ok(()) => {
                    ns.global.insert(v);
                }
                Err(e) => {
                    warn!(
                        "cairn: rank {rank}: {name} v{v} was not made durable: {}",
                        e.msg
                    );
                    ns.failed.insert(v, e.msg.clone());
                }
            }
            let doomed_global = if outcome.is_ok() && self.cfg.keep_global > 0 {
                window(&mut ns.global, self.cfg.keep_global)
            } else {
                Vec::new()
            };
            let doomed_local: Vec<i64> = ns.deferred.take(&v).into_iter().collect();
            self.schedule_delete(global, &name, doomed_global, true);
            self.schedule_delete(self.first.clone(), &name, doomed_local, false);
            if until.as_ref() == Some(&(name, v)) {
                return Ok(());
            }
        }
        Ok(())
    }

    /// `publisher` writes the manifest of `name` v`version` to `tier`, listing every rank on a
    /// global tier and its node's ranks on a node-local one. The caller agrees on the result.
    #[allow(clippy::too_many_arguments)]
    fn publish_one(&self, tier: &dyn Tier, m: &Manifest, publisher: bool) -> Result<()> {
        if !publisher {
            return Ok(());
        }
        tier.put(
            &manifest_key(&m.name, m.version),
            &crate::auth::encode_manifest(m),
        )
        .map_err(|e| {
            Error::from(e).context(format!(
                "rank {}: publishing {} v{} on the {} tier",
                self.topo.rank,
                m.name,
                m.version,
                tier.label()
            ))
        })
    }

    /// The manifest of `name` v`version` for `tier`: listing every rank on a global tier,
    /// this node's ranks on a node-local one.
    #[allow(clippy::too_many_arguments)]
    fn manifest(
        &self,
        name: &str,
        version: i64,
        state: CkptState,
        scheme: &str,
        capture_ns: u64,
        base: Option<i64>,
        tier: &dyn Tier,
    ) -> Manifest {
        let all_ranks = tier.scope() == Scope::Global;
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
            scheme: scheme.to_string(),
            state,
            created_unix_ms: unix_ms(),
            capture_ns,
            base,
        }
    }

    /// Collective: make checkpoint `version` of `name` durable on the global tier and wait
    /// until it is: a flush already under way is waited for, and one not started is started
    /// (a flush on demand). Fails on every rank if any rank's copy failed; the checkpoint then
    /// stays as it was on the node-local tier.
    pub fn flush(&mut self, name: &str, version: i64) -> Result<()> {
        self.wait_durable(name, version)
    }

    /// Collective: the lifecycle state of `name` v`version` after settling the flushes that
    /// have finished, or `None` when no tier holds it. Never blocks on a flush.
    pub fn test(&mut self, name: &str, version: i64) -> Result<Option<CkptState>> {
        check_name(name)?;
        self.settle(None)?;
        Ok(self.state_of(name, version))
    }

    /// This rank's view of the state of `name` v`version`.
    fn state_of(&self, name: &str, version: i64) -> Option<CkptState> {
        if let Some(ns) = self.names.get(name) {
            if ns.global.contains(&version) {
                return Some(CkptState::Durable);
            }
            if ns.first.contains(&version) && self.global.is_some() {
                return Some(if ns.protected.contains(&version) {
                    CkptState::Protected
                } else {
                    CkptState::Captured
                });
            }
        }
        // Not written in this run: ask the tiers.
        let tiers = self.global.iter().chain(std::iter::once(&self.first));
        tiers
            .filter_map(|t| catalog::read_manifest(&**t, name, version).ok().flatten())
            .map(|m| m.state)
            .max()
    }

    /// Collective: wait until `name` v`version` is durable, starting its flush if none is
    /// under way.
    fn wait_durable(&mut self, name: &str, version: i64) -> Result<()> {
        check_name(name)?;
        let id = (name.to_string(), version);
        if !self.pending.contains(&id) {
            let state = self.state_of(name, version);
            if self.global.is_none() || state == Some(CkptState::Durable) {
                return match self.comm.all_agree(state.is_some())? {
                    true => Ok(()),
                    false => Err(not_stored(name, version)),
                };
            }
            // A flush on demand: the version must be complete on every rank's first tier.
            let mine = catalog::read_manifest(&*self.first, name, version)
                .ok()
                .flatten()
                .is_some_and(|m| m.ranks.contains(&(self.topo.rank as u32)))
                && self.first.exists(&rank_key(name, version, self.topo.rank));
            if !self.comm.all_agree(mine)? {
                return Err(not_stored(name, version));
            }
            let stale = self.unpublish_global(name, version);
            agree(
                &*self.comm,
                stale,
                &format!("prepare the flush of {name} v{version}"),
            )?;
            self.start_flush(name, version)?;
        }
        self.settle(Some(id))?;
        match self.names.get(name).and_then(|ns| ns.failed.get(&version)) {
            Some(msg) => Err(Error::new(
                ErrorKind::Io,
                format!("{name} v{version} could not be made durable: {msg}"),
            )),
            None => Ok(()),
        }
    }

    /// Collective: whether the run should stop now: the job's time limit is near (leaving
    /// the margin plus the time a last checkpoint and its flush took so far), the halt file
    /// exists, or SIGTERM / SIGUSR1 / SIGUSR2 arrived (with `[exit] signals`, the default;
    /// the first call takes SIGTERM). Once true, stays true.
    pub fn should_exit(&mut self) -> Result<bool> {
        self.policy.watch();
        self.settle(None)?;
        let reason = self
            .policy
            .exit_reason(self.exit_needed(), self.topo.rank == 0);
        let mut v = [reason.is_some() as i64];
        self.comm.allreduce_i64(&mut v, Op::Max)?;
        if v[0] == 1 {
            self.stop_agreed(reason);
        }
        Ok(self.exiting)
    }

    /// The time a last checkpoint and its flush need: the longest checkpoint of this run and
    /// the mean flush.
    fn exit_needed(&self) -> f64 {
        let flush_cost = match self.stats.flushes {
            0 => 0.0,
            n => self.stats.flush_seconds / n as f64,
        };
        self.max_ckpt + flush_cost
    }

    /// The ranks agreed that the run must stop (`reason` is this rank's own, if it had one):
    /// from now on `should_exit` says so, and `need_checkpoint` until a checkpoint follows.
    fn stop_agreed(&mut self, reason: Option<String>) {
        if !self.exiting {
            self.exiting = true;
            self.policy.note_stop(self.stats.checkpoints);
            if let Some(r) = reason {
                warn!("cairn: rank {}: time to stop: {r}", self.topo.rank);
            }
        }
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
                    self.rebuild_chain(name, *v)?;
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

    /// Collective: after `v` was rebuilt, rebuild the versions it is based on, down to its
    /// full checkpoint. A base that cannot be rebuilt leaves `v` unrestorable from this tier;
    /// restart then falls back.
    fn rebuild_chain(&mut self, name: &str, v: i64) -> Result<()> {
        let rank = self.topo.rank;
        let mut at = v;
        loop {
            let base = catalog::read_manifest(&*self.first, name, at)
                .ok()
                .flatten()
                .and_then(|m| m.base);
            let mut b = [base.unwrap_or(-1)];
            self.comm.allreduce_i64(&mut b, Op::Max)?;
            if b[0] < 0 {
                return Ok(());
            }
            match protect::rebuild(&self.ctx(), name, b[0]) {
                Ok(Some(report)) if rank == 0 => warn!("cairn: {name} v{}: {report}", b[0]),
                Ok(_) => {}
                Err(e) => {
                    if rank == 0 {
                        warn!(
                            "cairn: cannot rebuild {name} v{}, the base of v{at}: {}",
                            b[0], e.msg
                        );
                    }
                    return Ok(());
                }
            }
            at = b[0];
        }
    }

    /// Collective: rebuild and re-protect one version of `name` (`cairn rebuild`). Returns
    /// what was done, or `None` when nothing was missing.
    pub fn rebuild(&mut self, name: &str, version: i64) -> Result<Option<String>> {
        check_name(name)?;
        self.claim(name)?;
        protect::rebuild(&self.ctx(), name, version)
    }

    /// Versions of `name` this rank could restore: version -> tiers holding its part.
    /// An incremental version counts only where the chain of parts it is based on is
    /// complete on the same tier. Also returns the size of a newer checkpoint written by
    /// another number of ranks, and the bases of the first tier's versions. Besides, the
    /// versions this rank holds on the global tier by its commit record alone (no global
    /// manifest yet), each with that record.
    fn candidates_and_commits(&self, name: &str) -> Result<(Found, BTreeMap<i64, Manifest>)> {
        let mut commits = BTreeMap::new();
        let mut out: BTreeMap<i64, Vec<Arc<dyn Tier>>> = BTreeMap::new();
        let mut wrong_size: Option<(i64, u32)> = None;
        let mut first_bases = BTreeMap::new();
        let rank = self.topo.rank;
        // `[tiers] fetch = false`: the global tier is never read at restart (unless it is the
        // only tier).
        let global = self.global.clone().filter(|_| self.cfg.fetch);
        let tiers: Vec<Arc<dyn Tier>> = std::iter::once(self.first.clone()).chain(global).collect();
        for tier in tiers {
            let mut here: BTreeSet<i64> = BTreeSet::new();
            let mut versions = catalog::versions(&*tier, name)?;
            versions.sort_unstable();
            for v in versions {
                let m = match catalog::read_manifest(&*tier, name, v) {
                    Ok(Some(m)) => m,
                    // A flush whose global manifest was never published (the job died before
                    // its next collective call): this rank's commit record stands for it,
                    // if every rank has one (agreed in `agreed_candidates`).
                    Ok(None)
                        if tier.scope() == Scope::Global && !Arc::ptr_eq(&tier, &self.first) =>
                    {
                        match catalog::read_commit(&*tier, name, v, rank) {
                            Ok(Some(c)) if c.world_size as usize == self.topo.size => {
                                commits.insert(v, c.clone());
                                c
                            }
                            Ok(Some(c)) => c,
                            Ok(None) => continue,
                            Err(e) => {
                                warn!(
                                    "cairn: rank {rank}: skipping the flushed copy of {name} v{v}: {}",
                                    e.msg
                                );
                                continue;
                            }
                        }
                    }
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
                let chain_ok = m.base.map_or(true, |b| here.contains(&b));
                if chain_ok
                    && m.ranks.contains(&(rank as u32))
                    && tier.exists(&rank_key(name, v, rank))
                {
                    here.insert(v);
                    out.entry(v).or_default().push(tier.clone());
                    if Arc::ptr_eq(&tier, &self.first) {
                        first_bases.insert(v, (m.base, m.scheme != "single"));
                    }
                }
            }
        }
        commits.retain(|v, _| {
            out.get(v)
                .is_some_and(|t| t.iter().any(|t| t.scope() == Scope::Global))
        });
        Ok(((out, wrong_size, first_bases), commits))
    }

    /// Collective: this rank's candidates, once every rank could list its own. A version on
    /// the global tier without its manifest counts there only if every rank has its commit
    /// record; then rank 0 publishes the manifest the job that flushed it did not live to.
    fn agreed_candidates(&self, name: &str) -> Result<Found> {
        let res = check_name(name).and_then(|()| self.candidates_and_commits(name));
        let ((mut cands, wrong, bases), mut commits) =
            agree(&*self.comm, res, "look for checkpoints")?;
        let Some(global) = self.global.clone() else {
            return Ok((cands, wrong, bases));
        };
        // Newest first, one version at a time, until no rank has one left to settle.
        let mut below = i64::MAX;
        loop {
            let mine = commits
                .range(..below)
                .next_back()
                .map(|(v, _)| *v)
                .unwrap_or(-1);
            let mut x = [mine];
            self.comm.allreduce_i64(&mut x, Op::Max)?;
            let v = x[0];
            if v < 0 {
                break;
            }
            below = v;
            let record = commits.remove(&v);
            if !self.comm.all_agree(record.is_some())? {
                if let Some(tiers) = cands.get_mut(&v) {
                    tiers.retain(|t| !Arc::ptr_eq(t, &global));
                    if tiers.is_empty() {
                        cands.remove(&v);
                    }
                }
                continue;
            }
            if self.topo.rank == 0 {
                let c = record.expect("agreed");
                let m = self.manifest(
                    name,
                    v,
                    CkptState::Durable,
                    &c.scheme,
                    c.capture_ns,
                    None,
                    &*global,
                );
                match self.publish_one(&*global, &m, true) {
                    Ok(()) => info!(
                        "cairn: {name} v{v}: every rank's flush was committed; published its \
                         global manifest"
                    ),
                    Err(e) => warn!("cairn: {name} v{v}: {}", e.msg),
                }
            }
        }
        Ok((cands, wrong, bases))
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

    /// Collective: the newest version of `name` below `below` every rank can restore, or
    /// `None` (the file API's fallback past a version the application found invalid).
    pub fn restart_test_below(&mut self, name: &str, below: i64) -> Result<Option<i64>> {
        self.newest_below(name, below, false)
    }

    /// Collective: delete version `version` of checkpoint `name` from every tier (SCR_Delete).
    /// A version that a newer incremental checkpoint is based on is refused: delete the newer
    /// one first. Deleting a version that does not exist is not an error.
    pub fn delete(&mut self, name: &str, version: i64) -> Result<()> {
        let rank = self.topo.rank;
        check_name(name)?;
        self.claim(name)?;
        self.settle_all()?;
        self.deleter.drain();
        let (_, _, bases) = self.agreed_candidates(name)?;
        let ns = self.names.entry(name.to_string()).or_default();
        let dependent = bases
            .iter()
            .map(|(k, (b, _))| (*k, *b))
            .chain(ns.bases.iter().map(|(k, b)| (*k, *b)))
            .find(|(_, b)| *b == Some(version))
            .map(|(k, _)| k);
        let mut newest_dep = [dependent.unwrap_or(-1)];
        self.comm.allreduce_i64(&mut newest_dep, Op::Max)?;
        if newest_dep[0] >= 0 {
            return Err(Error::invalid(format!(
                "cannot delete {name} v{version}: v{} is an incremental checkpoint based on it (delete v{} first)",
                newest_dep[0], newest_dep[0]
            )));
        }
        let tiers: Vec<Arc<dyn Tier>> = std::iter::once(self.first.clone())
            .chain(self.global.clone())
            .collect();
        for tier in &tiers {
            let publisher = if tier.scope() == Scope::Global {
                rank == 0
            } else {
                self.topo.is_node_leader()
            };
            delete_version(&**tier, name, version, rank, publisher);
        }
        let ns = self.names.entry(name.to_string()).or_default();
        ns.first.remove(&version);
        ns.global.remove(&version);
        ns.protected.remove(&version);
        ns.bases.remove(&version);
        ns.pinned.remove(&version);
        ns.deferred.remove(&version);
        if ns.hashes.as_ref().is_some_and(|(b, _)| *b == version) {
            ns.hashes = None;
        }
        // The newest checkpoint of the name (which finalize makes durable) is now the newest
        // one left on the first tier, if any.
        if ns.last == Some(version) {
            ns.last = ns.first.last().copied();
        }
        if ns.restored == Some(version) {
            ns.restored = None;
        }
        // Ranks of a node share its tier: none may look for the version while another is
        // still removing it.
        self.comm.barrier()?;
        if rank == 0 {
            info!("cairn: deleted {name} v{version}");
        }
        Ok(())
    }

    /// Local: the shapes of this rank's regions in `name` v`version` as stored (the index
    /// of its part, from the first tier that holds it intact), without restoring anything.
    /// FTI asks for a variable's stored size before it allocates it.
    pub fn stored_shapes(&self, name: &str, version: i64) -> Result<Vec<Shape>> {
        check_name(name)?;
        let rank = self.topo.rank;
        let mut last = not_stored(name, version);
        for tier in std::iter::once(&self.first).chain(self.global.as_ref()) {
            match part::open_chain(&**tier, name, version, rank, Some(self.topo.size)) {
                Ok(chain) => {
                    let index = &chain[0].index;
                    return Ok(index
                        .regions
                        .iter()
                        .map(|e| Shape {
                            id: e.id,
                            dtype: e.dtype,
                            count: e.count,
                            stored: None,
                        })
                        .collect());
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Local: whether this rank still copies a checkpoint to the global tier (a flush it
    /// started has not ended). Never blocks and never publishes.
    pub fn flushing(&self) -> bool {
        self.pending
            .iter()
            .any(|(n, v)| self.flusher.state(n, *v).is_some_and(|s| !s.finished()))
    }

    /// Collective: wait for the flushes under way, then remove from the node-local tier every
    /// version of `name` that is durable on the global tier (VeloC's `VELOC_Cleanup`). A
    /// version stored nowhere else stays: its only copy is never removed. Returns the
    /// versions removed and the versions kept for that reason.
    pub fn evict_local(&mut self, name: &str) -> Result<(Vec<i64>, Vec<i64>)> {
        check_name(name)?;
        self.claim(name)?;
        self.settle_all()?;
        self.deleter.drain();
        if self.global.is_none() {
            let ns = self.names.entry(name.to_string()).or_default();
            return Ok((Vec::new(), ns.first.iter().copied().collect()));
        }
        let ns = self.names.entry(name.to_string()).or_default();
        // Incremental parts live only on the first tier: a durable version that a kept one is
        // based on stays too.
        let needed: BTreeSet<i64> = ns.bases.values().flatten().copied().collect();
        let (doomed, kept): (Vec<i64>, Vec<i64>) = ns
            .first
            .iter()
            .partition(|v| ns.global.contains(v) && !needed.contains(v));
        for v in &doomed {
            ns.first.remove(v);
            ns.protected.remove(v);
            ns.bases.remove(v);
            if ns.hashes.as_ref().is_some_and(|(b, _)| b == v) {
                ns.hashes = None;
            }
        }
        let publisher = self.topo.is_node_leader();
        for v in &doomed {
            delete_version(&*self.first, name, *v, self.topo.rank, publisher);
        }
        self.comm.barrier()?;
        Ok((doomed, kept))
    }

    /// Collective: true on every rank when `ok` is true on every rank.
    pub fn all_agree(&self, ok: bool) -> Result<bool> {
        Ok(self.comm.all_agree(ok)?)
    }

    /// Collective: `res` where every rank succeeded; an error on every rank otherwise (a
    /// rank whose own step succeeded reports that another failed at `what`).
    /// Collective: take the job lock of `name` ([`crate::joblock`]), once per name and run:
    /// every rank on its node-local tier, rank 0 on the global tier. A bad name is left to
    /// the caller's own check.
    fn claim(&mut self, name: &str) -> Result<()> {
        if self.claimed.contains(name) || cairn_format::check_name(name).is_err() {
            return Ok(());
        }
        let mut res = Ok(());
        if self.first.scope() == Scope::NodeLocal {
            res = self.locks.take(&self.first, name);
        }
        if res.is_ok() && self.topo.rank == 0 {
            let global = self.global.as_ref().unwrap_or(&self.first).clone();
            res = self.locks.take(&global, name);
        }
        agree(&*self.comm, res, "lock the checkpoint name")?;
        self.claimed.insert(name.to_string());
        Ok(())
    }

    pub fn agreed<T>(&self, res: Result<T>, what: &str) -> Result<T> {
        agree(&*self.comm, res, what)
    }

    /// Where this rank stages the files of the file API: beside the node-local tier's data
    /// (`<local>/node<k>/.files/rank<r>`), in `/dev/shm` beside the shared-memory store with
    /// the `mem` tier, or in the temporary directory without a node-local tier.
    pub fn files_dir(&self) -> std::path::PathBuf {
        let (base, rel) = self.files_dir_parts();
        base.join(rel)
    }

    /// [`Engine::files_dir`] as a place that is trusted but not this job's alone (the
    /// node-local tier's node directory, `/dev/shm`, the temporary directory) and the path
    /// below it that is the job's, whose directories must be this user's
    /// (`cairn_tier::private_dirs`).
    pub fn files_dir_parts(&self) -> (std::path::PathBuf, std::path::PathBuf) {
        let rank = format!("rank{}", self.topo.rank);
        match self.cfg.node_local() {
            NodeLocal::Dir(local) => (
                local.join(format!("node{}", self.topo.node)),
                std::path::Path::new(".files").join(rank),
            ),
            NodeLocal::Mem => {
                let store =
                    memstore::store_config(&self.cfg, memstore::owner(&self.cfg, &self.topo));
                (
                    "/dev/shm".into(),
                    std::path::Path::new(&format!("{}.files", store.name.trim_start_matches('/')))
                        .join(rank),
                )
            }
            NodeLocal::None => (
                std::env::temp_dir(),
                std::path::Path::new(&format!(
                    "cairn-{}-{}.files",
                    rustix::process::getuid().as_raw(),
                    memstore::job_name()
                ))
                .join(rank),
            ),
        }
    }

    /// Collective: the newest version of `name` every rank can restore, from any tier, or
    /// `None`. A checkpoint written by a different number of ranks is an error when nothing
    /// else can be restored.
    pub fn restart_test(&mut self, name: &str) -> Result<Option<i64>> {
        self.newest_below(name, i64::MAX, true)
    }

    /// Collective: the newest version of `name` below `below` every rank can restore, judged
    /// by [`Engine::judge_world_size`].
    fn newest_below(&mut self, name: &str, below: i64, strict: bool) -> Result<Option<i64>> {
        self.claim(name)?;
        self.rebuild_missing(name)?;
        let (cands, wrong_size, _) = self.agreed_candidates(name)?;
        let found = self.agree_newest(&cands, below.saturating_sub(1))?;
        let wrong_size = wrong_size.filter(|(v, _)| *v < below);
        self.judge_world_size(name, found, wrong_size, strict)
    }

    /// Collective: what `restart_test` answers, given the newest version `found` every rank
    /// can restore and a newer one written by another number of ranks, if any. With
    /// `strict`, finding only such a checkpoint is an error; otherwise (the file API, whose
    /// libraries start afresh when nothing can be restored) rank 0 says so once.
    fn judge_world_size(
        &mut self,
        name: &str,
        found: Option<i64>,
        wrong_size: Option<(i64, u32)>,
        strict: bool,
    ) -> Result<Option<i64>> {
        let mut ws = [
            wrong_size.map(|(v, _)| v).unwrap_or(-1),
            wrong_size.map(|(_, n)| n as i64).unwrap_or(-1),
        ];
        self.comm.allreduce_i64(&mut ws, Op::Max)?;
        match (found, ws[0]) {
            (None, v) if v >= 0 && !strict => {
                if self.topo.rank == 0 && self.warned_world.insert((name.to_string(), v)) {
                    warn!("cairn: {name} v{v} was written by {} ranks but this job has {}; nothing to restart from (relaunch with {} ranks to restart from it)", ws[1], self.topo.size, ws[1]);
                }
                Ok(None)
            }
            (None, v) if v >= 0 => Err(Error::new(
                ErrorKind::Mismatch,
                format!(
                    "checkpoint {name} v{v} was written by {} ranks but this job has {}; relaunch with {} ranks, or remove it to start afresh",
                    ws[1], self.topo.size, ws[1]
                ),
            )),
            (Some(f), v) if v > f && self.topo.rank == 0 => {
                if self.warned_world.insert((name.to_string(), v)) {
                    warn!("cairn: ignoring {name} v{v}, written by {} ranks (this job has {}); using v{f}", ws[1], self.topo.size);
                }
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
        self.restart_inner(name, version, regions, None)
            .map(|(v, _)| v)
    }

    /// Collective: [`Engine::restart`] of a checkpoint that also holds regions whose sizes
    /// only the checkpoint knows (the files of the file API). `regions` must match the
    /// checkpoint's regions with those ids exactly, as in `restart`; for every other stored
    /// region `sized` is asked for a buffer, given the version being read and those regions'
    /// shapes (this rank's), and may be asked again for an older version if the first turns
    /// out to be damaged. Returns the version restored and the buffers, filled.
    pub fn restart_sized(
        &mut self,
        name: &str,
        version: i64,
        regions: &mut [RegionMut<'_>],
        sized: &mut SizedFn<'_>,
    ) -> Result<(i64, Vec<OwnedRegion>)> {
        self.restart_inner(name, version, regions, Some(sized))
    }

    fn restart_inner(
        &mut self,
        name: &str,
        version: i64,
        regions: &mut [RegionMut<'_>],
        mut sized: Option<&mut SizedFn<'_>>,
    ) -> Result<(i64, Vec<OwnedRegion>)> {
        self.claim(name)?;
        let t0 = Instant::now();
        let rank = self.topo.rank;
        // Background flushes and deletions must not race with the clean-up of newer versions
        // below.
        self.settle_all()?;
        self.deleter.drain();
        self.rebuild_missing(name)?;
        let (mut cands, _, bases) = self.agreed_candidates(name)?;
        if !self.comm.all_agree(cands.contains_key(&version))? {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!("rank {rank}: checkpoint {name} v{version} cannot be restarted: it is not complete on every rank (see `cairn list`)"),
            ));
        }
        let mut v = version;
        let mut repaired = BTreeSet::new();
        let restored = loop {
            let tiers = cands.get(&v).cloned().unwrap_or_default();
            let res = self.restore_from(name, v, &tiers, regions, sized.as_deref_mut());
            let mismatch = matches!(&res, Err(e) if e.kind == ErrorKind::Mismatch);
            let mut flags = [res.is_ok() as i64, -(mismatch as i64)];
            self.comm.allreduce_i64(&mut flags, Op::Min)?;
            if flags[0] == 1 {
                break res.expect("this rank succeeded");
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
                Ok(_) if rank == 0 => warn!("cairn: checkpoint {name} v{v} is damaged on another rank; falling back to an older checkpoint"),
                Ok(_) => {}
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
        };
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
        let kept = bases.into_iter().filter(|(k, _)| ns.first.contains(k));
        for (k, (base, redundant)) in kept {
            ns.bases.insert(k, base);
            if redundant {
                ns.protected.insert(k);
            }
        }
        ns.last = Some(v);
        ns.restored = Some(v);
        let undurable = !ns.global.contains(&v) && ns.first.contains(&v);
        // The run that wrote v may have died before v became durable: carry its flush on
        // (parts already committed on the global tier are not copied again), but only when
        // the configuration says v is due: every checkpoint is flushed, or the flush time
        // schedule says one is due now. Otherwise the restart writes nothing.
        // Each rank reads the time schedule on its own clock; the agreement makes one answer.
        let scheduled = !first_is_global
            && (self.cfg.flush_every == 1 || self.cfg.flush_seconds > 0.0 || self.cfg.flush_auto);
        let due = self.cfg.flush_every == 1 || self.flush_time_due(name);
        if scheduled && self.comm.all_agree(undurable && due)? {
            self.scheduled_flush(name, v)?;
        }
        // The next checkpoint may be incremental against v only if every rank restored v from
        // the first tier (where the chain must live).
        let own = restored.hashes.filter(|_| self.cfg.incremental);
        let all = self.comm.all_agree(own.is_some())?;
        let ns = self.names.entry(name.to_string()).or_default();
        ns.hashes = own.filter(|_| all).map(|h| (v, h));
        if restored.chain > 1 {
            debug!(
                "cairn: rank {rank}: restored {name} v{v} from a chain of {} parts",
                restored.chain
            );
        }
        self.stats.restarts += 1;
        self.stats.restart_seconds += t0.elapsed().as_secs_f64();
        self.stats.restored_version = v;
        self.calls_since = 0;
        self.last_ckpt = Instant::now();
        if rank == 0 {
            info!("cairn: restored {name} v{v}");
        }
        Ok((v, restored.extra))
    }

    /// Restore `regions` from `name` v`v` on the first of `tiers` that holds it intact (with
    /// the chain of parts it is based on).
    fn restore_from(
        &self,
        name: &str,
        v: i64,
        tiers: &[Arc<dyn Tier>],
        regions: &mut [RegionMut<'_>],
        mut sized: Option<&mut SizedFn<'_>>,
    ) -> Result<Restored> {
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
            let mut attempt = || -> Result<Restored> {
                let chain = part::open_chain(&**tier, name, v, rank, Some(self.topo.size))?;
                let mut extra = Vec::new();
                if let Some(sized) = sized.as_deref_mut() {
                    let files = chain[0].reader.files();
                    let shapes: Vec<Shape> = chain[0]
                        .index
                        .regions
                        .iter()
                        .filter(|e| !regions.iter().any(|r| r.id == e.id))
                        .map(|e| Shape {
                            id: e.id,
                            dtype: e.dtype,
                            count: e.count,
                            stored: part::stored_file(e, &files),
                        })
                        .collect();
                    extra = sized(v, &shapes)?;
                    let index = &chain[0].index;
                    for o in &mut extra {
                        let Some(path) = &o.in_place else { continue };
                        let Some(e) = index.regions.iter().find(|e| e.id == o.id) else {
                            return Err(Error::invalid(format!(
                                "region {} cannot be taken from {}: the checkpoint holds no \
                                 such region",
                                o.id,
                                path.display()
                            )));
                        };
                        if part::stored_file(e, &files).as_ref() == Some(path) {
                            // The part's own file: damage fails the part over.
                            part::check_in_place(index, e, path)?;
                        } else if let Err(why) = part::check_in_place(index, e, path) {
                            debug!(
                                "cairn: rank {rank}: region {} is restored from the checkpoint, \
                                 not taken from the copy kept: {}",
                                o.id, why.msg
                            );
                            o.in_place = None;
                        }
                    }
                }
                let in_place: Vec<i32> = extra
                    .iter()
                    .filter(|o| o.in_place.is_some())
                    .map(|o| o.id)
                    .collect();
                let mut all: Vec<RegionMut<'_>> =
                    regions
                        .iter_mut()
                        .map(|r| RegionMut {
                            id: r.id,
                            dtype: r.dtype,
                            bytes: &mut *r.bytes,
                        })
                        .chain(extra.iter_mut().filter(|o| o.in_place.is_none()).map(|o| {
                            RegionMut {
                                id: o.id,
                                dtype: o.dtype,
                                bytes: o.buf.as_mut().as_mut(),
                            }
                        }))
                        .collect();
                part::check_fits_except(&chain[0].index, &all, &in_place)?;
                // Cores the node's ranks leave idle help read and check this rank's part.
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                let threads = cores / self.topo.node_ranks().len().max(1);
                part::restore_with(&chain, &mut all, threads)?;
                drop(all);
                let on_first = Arc::ptr_eq(tier, &self.first);
                let hashes = Hashes::from_index(&chain[0].index).filter(|_| on_first);
                Ok(Restored {
                    hashes,
                    chain: chain.len(),
                    extra,
                })
            };
            let attempt = attempt();
            match attempt {
                Ok(r) => return Ok(r),
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

    /// Whether a checkpoint is due: the configured policy (`[checkpoint] every` / `seconds`)
    /// says so, or the run must stop (what `should_exit` agreed, a stop signal, or the time
    /// limit as near as `should_exit` counts it) and no checkpoint was taken since, so that a
    /// program that only calls `need_checkpoint` still takes a last checkpoint. Every call
    /// counts as one step, and the first takes SIGTERM (with `[exit] signals`). With `auto`,
    /// the interval is the failure model's optimum for the job's MTBF and the mean cost of
    /// this run's checkpoints so far (the first call says yes, to measure it). Collective
    /// when a time policy is set or a stop can come (`[exit] signals`, the default, or a
    /// known time limit): every rank gets the same answer.
    pub fn need_checkpoint(&mut self) -> Result<bool> {
        self.calls_since += 1;
        self.policy.watch();
        let by_steps = self.cfg.every > 0 && self.calls_since >= self.cfg.every;
        let interval = self.checkpoint_interval();
        let watch = self.policy.watches_stop() && !self.exiting;
        if interval.is_none() && !watch {
            let last = self.exiting && self.policy.last_checkpoint_due(self.stats.checkpoints);
            return Ok(by_steps || self.cfg.every == 0 || last);
        }
        let due = match interval {
            Some(iv) => {
                self.settle(None)?;
                by_steps || self.last_ckpt.elapsed().as_secs_f64() >= iv
            }
            None => by_steps || self.cfg.every == 0,
        };
        let reason = if watch {
            self.policy.exit_reason(self.exit_needed(), false)
        } else {
            None
        };
        let mut v = [due as i64, reason.is_some() as i64];
        self.comm.allreduce_i64(&mut v, Op::Max)?;
        if v[1] == 1 {
            self.stop_agreed(reason);
        }
        Ok(v[0] == 1 || (self.exiting && self.policy.last_checkpoint_due(self.stats.checkpoints)))
    }

    /// The interval `need_checkpoint` uses now, in seconds, when it follows a time policy.
    /// With `auto`, 0 until the first checkpoint has measured the cost.
    pub fn checkpoint_interval(&self) -> Option<f64> {
        self.policy.schedule(
            self.cfg.seconds_auto,
            self.cfg.seconds,
            self.stats.checkpoints,
            self.stats.checkpoint_seconds,
            Covers::All,
        )
    }

    /// Collective: finish the pending flushes, make the newest checkpoint of each name durable
    /// (unless `[checkpoint] finalize = false`), wait for background deletions and release
    /// the engine. A flush that fails is reported, after everything else is released.
    pub fn finalize(mut self) -> Result<()> {
        let mut result = Ok(());
        if self.global.is_some() {
            if self.cfg.finalize_flush {
                let mut newest: Vec<(String, i64)> = self
                    .names
                    .iter()
                    .filter_map(|(n, ns)| ns.last.map(|v| (n.clone(), v)))
                    .collect();
                // The same order on every rank.
                newest.sort();
                for (name, v) in newest {
                    if let Err(e) = self.wait_durable(&name, v) {
                        if e.kind == ErrorKind::Comm {
                            return Err(e);
                        }
                        result = result.and(Err(e));
                    }
                }
            }
            self.settle_all()?;
        }
        self.flusher.finish();
        self.deleter.finish();
        self.comm.barrier()?;
        self.locks.release();
        result
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.deleter.finish();
    }
}

fn not_stored(name: &str, version: i64) -> Error {
    Error::new(
        ErrorKind::NotFound,
        format!("checkpoint {name} v{version} is not complete on every rank (see `cairn list`)"),
    )
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

/// The cache window of the first tier: keep the newest `keep` versions and every version
/// their chains need, and the bases of versions being flushed (the flush reads them).
/// Returns the versions removed from `ns.first`; pinned ones among them are deleted later,
/// when their flush ends.
fn first_window(ns: &mut NameState, keep: usize) -> Vec<i64> {
    let mut needed: BTreeSet<i64> = BTreeSet::new();
    for v in ns.first.iter().rev().take(keep.max(1)) {
        needed.extend(ns.chain(*v));
    }
    for v in &ns.pinned {
        needed.extend(ns.chain(*v).into_iter().skip(1));
    }
    let doomed: Vec<i64> = ns
        .first
        .iter()
        .filter(|v| !needed.contains(v))
        .copied()
        .collect();
    for v in &doomed {
        ns.first.remove(v);
        if !ns.pinned.contains(v) {
            ns.bases.remove(v);
        }
    }
    doomed
}

#[cfg(test)]
mod tests {
    use super::{window, Engine};
    use crate::{Config, ErrorKind};
    use std::collections::BTreeSet;

    #[test]
    fn a_bad_checkpoint_name_is_an_invalid_argument() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = Config {
            local: Some(dir.path().join("local")),
            global: dir.path().join("global"),
            finalize_flush: false,
            ..Config::default()
        };
        let mut e = Engine::new(Box::new(cairn_comm::Solo), cfg).unwrap();
        for name in ["../up", "a/b", "", ".hidden", "node3"] {
            let err = e.checkpoint(name, 1, &[]).unwrap_err();
            assert_eq!(err.kind, ErrorKind::InvalidArgument, "{name:?}: {err}");
            assert!(err.to_string().contains("checkpoint name"), "{err}");
            let err = e.restart_test(name).unwrap_err();
            assert_eq!(err.kind, ErrorKind::InvalidArgument, "{name:?}: {err}");
        }
        e.checkpoint("fine-name_1.0", 1, &[]).unwrap();
        assert_eq!(e.restart_test("fine-name_1.0").unwrap(), Some(1));
    }

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
