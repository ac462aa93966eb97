//! Redundancy across simulated nodes, without MPI: every rank is a thread on the in-process
//! [`Threads`] communicator, every simulated node a directory under the node-local tier.
//!
//! A [`Matrix`] runs one scenario over scheme x (ranks, nodes) x flush (none, synchronous, in
//! the background) x node-local tier (directories, or shared-memory stores for the loss
//! scenario), the way ripgrep's `SearcherTester` runs one search over every searcher
//! configuration: each combination is a [`Case`] with its own tiers, combinations the scheme
//! cannot protect must be refused by `plan()` with a clear message, and all failures are
//! reported together, each naming its case.
//!
//! A scenario writes versions 1..=5 of checkpoint `matrix` (regions of odd, rank-dependent
//! sizes and every dtype, filled by a pure function of (version, rank, region, index)), drops
//! the engines (the job dies), damages or deletes the storage of simulated nodes, starts a new
//! job (new threads, new engines) and runs `restart_test` + `restart`. Restored data is compared
//! bit for bit with what that version held, so "never wrong data" is checked on every path.
//!
//! With `[cache] keep = 2` the node-local tier holds v4 and v5; with `[flush] every = 2` the
//! global tier also holds v2 and v4.
//!
//! `REDUNDANCY_LOG=warn` (or `info`, `debug`) shows the engine's messages.

use cairn_comm::{Threads, Topology};
use cairn_core::memstore;
use cairn_core::{CkptState, Config, Dtype, Engine, ErrorKind, RegionMut, RegionRef};
use cairn_format::{checksum, Manifest, ParityHeader, HEADER_LEN, TRAILER_LEN};
use cairn_redundancy::{Plan, Scheme as Code, Settings};
use cairn_tier::cairn_shm::StoreOwner;
use cairn_tier::{CrashMachine, CrashReport, Scope as TierScope, Tier};
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

const NAME: &str = "matrix";
/// Versions 1..=NEWEST are written.
const NEWEST: i64 = 5;
/// The newest version flushed to the global tier (flush every 2).
const DURABLE: i64 = 4;
/// The version before the newest, still cached on the node-local tier (keep = 2).
const PREVIOUS: i64 = 4;
/// A job that takes longer than this is taken to be deadlocked.
const JOB_TIMEOUT: Duration = Duration::from_secs(30);
/// An offset inside region 1's data in every rank file: after the 16-byte header and region
/// 0's 8 bytes, in the second 4 KiB chunk.
const DATA_OFFSET: u64 = HEADER_LEN + 8 + 5000;

// ---- What the ranks protect -------------------------------------------------------------

/// (id, dtype, element count) of every region of `rank`. Rank 1's doubles pass 3 MiB, so its
/// part takes several pieces of a partner stream while the others take one, a set's segments
/// are encoded in more than one slice, and parts differ in length within every set; rank 0's
/// region 6 is empty.
fn regions_of(rank: usize) -> Vec<(i32, Dtype, usize)> {
    vec![
        (0, Dtype::Int64, 1),
        (
            1,
            Dtype::Double,
            if rank == 1 {
                393_301
            } else {
                1_001 + 37 * rank
            },
        ),
        (2, Dtype::Byte, 4_099 + rank),
        (3, Dtype::Int32, 777 + 3 * rank),
        (4, Dtype::Float, 333 + rank),
        (5, Dtype::Int16, 1_001),
        (6, Dtype::Uint64, rank),
        (9, Dtype::Int8, 5),
        (10, Dtype::Uint32, 65),
    ]
}

fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The bytes of every region `layout` gives `rank` in `version`: region 0 is the version
/// itself, the rest a pure function of (version, rank, region, index).
fn contents(layout: &[(i32, Dtype, usize)], version: i64, rank: usize) -> Vec<Vec<u8>> {
    layout
        .iter()
        .map(|(id, dtype, count)| {
            if *id == 0 {
                return version.to_le_bytes().to_vec();
            }
            let len = count * dtype.size();
            let seed = mix(mix(version as u64) ^ ((rank as u64) << 20) ^ (*id as u64));
            let mut b: Vec<u8> = (0..len.div_ceil(8) as u64)
                .flat_map(|j| mix(seed.wrapping_add(j)).to_le_bytes())
                .collect();
            b.truncate(len);
            b
        })
        .collect()
}

/// Where restored bytes of the regions `layout` first differ from `version`'s, if they do.
fn first_difference(
    layout: &[(i32, Dtype, usize)],
    version: i64,
    rank: usize,
    got: &[Vec<u8>],
) -> Option<String> {
    let want = contents(layout, version, rank);
    for ((id, _, _), (g, w)) in layout.iter().zip(got.iter().zip(&want)) {
        if let Some(i) = (0..w.len()).find(|i| g[*i] != w[*i]) {
            return Some(format!(
                "rank {rank}: region {id} differs from v{version} at byte {i}"
            ));
        }
    }
    None
}

// ---- Schemes --------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scheme {
    Single,
    PartnerStream,
    PartnerReadback,
    Xor,
    Rs1,
    Rs2,
}

const SCHEMES: [Scheme; 6] = [
    Scheme::Single,
    Scheme::PartnerStream,
    Scheme::PartnerReadback,
    Scheme::Xor,
    Scheme::Rs1,
    Scheme::Rs2,
];
const REDUNDANT: [Scheme; 5] = [
    Scheme::PartnerStream,
    Scheme::PartnerReadback,
    Scheme::Xor,
    Scheme::Rs1,
    Scheme::Rs2,
];
const LAYOUTS: [(usize, usize); 4] = [(2, 2), (4, 2), (6, 3), (8, 4)];

impl Scheme {
    fn label(self) -> &'static str {
        match self {
            Scheme::Single => "single",
            Scheme::PartnerStream => "partner(stream)",
            Scheme::PartnerReadback => "partner(readback)",
            Scheme::Xor => "xor",
            Scheme::Rs1 => "rs(parity 1)",
            Scheme::Rs2 => "rs(parity 2)",
        }
    }

    fn code(self) -> Code {
        match self {
            Scheme::Single => Code::Single,
            Scheme::PartnerStream | Scheme::PartnerReadback => Code::Partner,
            Scheme::Xor => Code::Xor,
            Scheme::Rs1 | Scheme::Rs2 => Code::Rs,
        }
    }

    fn parity(self) -> usize {
        if self == Scheme::Rs2 {
            2
        } else {
            1
        }
    }

    /// Nodes of one set (or partner pair) that may be lost together.
    fn tolerates(self) -> usize {
        match self {
            Scheme::Single => 0,
            Scheme::Rs2 => 2,
            _ => 1,
        }
    }

    fn apply(self, cfg: &mut Config) {
        cfg.redundancy = self.code().name().to_string();
        cfg.parity = self.parity();
        cfg.partner_mode = if self == Scheme::PartnerReadback {
            "readback"
        } else {
            "stream"
        }
        .to_string();
    }
}

// ---- One case: a scheme on a layout, with its own tiers ---------------------------------------

fn topology(ranks: usize, nodes: usize) -> Topology {
    let hosts: Vec<(String, String)> = (0..ranks)
        .map(|_| ("host".to_string(), String::new()))
        .collect();
    Topology::from_hosts(0, &hosts, nodes, false).expect("a valid simulated topology")
}

/// Whether and how a case flushes to the global tier (every second version).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flush {
    Off,
    /// Within the checkpoint call (`[flush] sync`).
    Sync,
    /// In the background; the write job waits for v4's flush before it dies.
    Async,
}

struct Case {
    scheme: Scheme,
    ranks: usize,
    nodes: usize,
    flush: Flush,
    /// The node-local tier is each node's shared-memory store (`[tiers] local = "mem"`)
    /// rather than a directory.
    mem: bool,
    /// `[redundancy] set_size` (0: as many nodes as there are).
    set_size: usize,
    topo: Topology,
    plan: Plan,
    dir: tempfile::TempDir,
}

impl Drop for Case {
    /// A case's shared-memory stores go with it (its directories go with its `dir`).
    fn drop(&mut self) {
        if self.mem {
            for n in 0..self.nodes {
                let _ = std::fs::remove_file(self.store_file(n));
            }
        }
    }
}

/// What a relaunched job found and restored (agreed by every rank), and what an explicit
/// `Engine::rebuild` of one version answered on each rank, if one was asked for.
#[derive(Debug)]
struct Relaunch {
    found: Option<i64>,
    restored: Option<i64>,
    rebuild: Vec<Result<Option<String>, String>>,
}

fn ensure(ok: bool, msg: impl FnOnce() -> String) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(msg())
    }
}

/// `REDUNDANCY_CASE=<text>` runs only the matrix cases whose name contains the text.
fn case_filter() -> Option<String> {
    std::env::var("REDUNDANCY_CASE")
        .ok()
        .filter(|f| !f.is_empty())
}

fn log_level() -> String {
    std::env::var("REDUNDANCY_LOG").unwrap_or_else(|_| "error".into())
}

impl Case {
    /// The case, or `plan()`'s reason for refusing the scheme on this layout.
    fn new(scheme: Scheme, ranks: usize, nodes: usize, flush: Flush) -> Result<Case, String> {
        Case::with_sets(scheme, ranks, nodes, flush, 0)
    }

    fn with_sets(
        scheme: Scheme,
        ranks: usize,
        nodes: usize,
        flush: Flush,
        set_size: usize,
    ) -> Result<Case, String> {
        let topo = topology(ranks, nodes);
        let settings = Settings {
            scheme: scheme.code(),
            set_size,
            parity: scheme.parity(),
        };
        let plan = cairn_redundancy::plan(&settings, &topo)?;
        let dir = tempfile::Builder::new()
            .prefix("cairn-redundancy-")
            .tempdir()
            .map_err(|e| format!("tempdir: {e}"))?;
        Ok(Case {
            scheme,
            ranks,
            nodes,
            flush,
            mem: false,
            set_size,
            topo,
            plan,
            dir,
        })
    }

    fn name(&self) -> String {
        format!(
            "{} on {} ranks / {} nodes{}, {}",
            self.scheme.label(),
            self.ranks,
            self.nodes,
            if self.mem { " (mem tier)" } else { "" },
            match self.flush {
                Flush::Off => "local only",
                Flush::Sync => "local + flush every 2",
                Flush::Async => "local + background flush every 2",
            }
        )
    }

    fn config(&self) -> Config {
        let mut cfg = Config {
            local: Some(self.dir.path().join("local")),
            global: self.dir.path().join("global"),
            fsync_global: false,
            sim_nodes: self.nodes,
            keep: 2,
            block: 4096,
            flush_every: if self.flush == Flush::Off { 0 } else { 2 },
            // With a synchronous flush v4 is durable when its checkpoint returns; with a
            // background one the write job waits for it before it dies.
            flush_sync: self.flush != Flush::Async,
            log_level: log_level(),
            set_size: self.set_size,
            ..Config::default()
        };
        if self.mem {
            cfg.local = None;
            cfg.local_mem = true;
            cfg.mem.size = 40 << 20;
            cfg.mem.chunk = 64 << 10;
        }
        self.scheme.apply(&mut cfg);
        cfg
    }

    /// Node `n`'s shared-memory store, as a file under `/dev/shm`.
    fn store_file(&self, n: usize) -> PathBuf {
        let name = memstore::store_config(&self.config(), StoreOwner::Node(n as u32)).name;
        Path::new("/dev/shm").join(name.trim_start_matches('/'))
    }

    /// What a loss beyond the scheme's tolerance leaves: the newest durable version, if any.
    fn durable(&self) -> Option<i64> {
        (self.flush != Flush::Off).then_some(DURABLE)
    }

    fn node_dir(&self, node: usize) -> PathBuf {
        self.dir.path().join("local").join(format!("node{node}"))
    }

    fn vdir(&self, node: usize, version: i64) -> PathBuf {
        self.node_dir(node).join(NAME).join(format!("v{version}"))
    }

    fn node_of(&self, rank: usize) -> usize {
        self.topo.node_of[rank]
    }

    fn ranks_on(&self, node: usize) -> Vec<usize> {
        (0..self.ranks)
            .filter(|r| self.node_of(*r) == node)
            .collect()
    }

    /// `count` consecutive nodes from `first` (wrapping). Consecutive nodes hold partner
    /// pairs, and with sets as large as the node count every node is in every set.
    fn nodes_from(&self, first: usize, count: usize) -> Vec<usize> {
        (0..count.min(self.nodes))
            .map(|i| (first + i) % self.nodes)
            .collect()
    }

    /// The first node a case loses, varied across layouts and tiers.
    fn first_victim(&self) -> usize {
        (self.ranks / 2 + self.nodes - 1 + self.flush as usize % 2) % self.nodes
    }

    /// Job 1: checkpoint versions 1..=NEWEST, then die (drop the engines, no finalize).
    fn write(&self) -> Result<(), String> {
        let cfg = self.config();
        let wait = self.flush == Flush::Async;
        let out = job(self.ranks, "write", move |comm| -> Result<(), String> {
            let rank = comm_rank(&comm);
            let mut engine = Engine::new(Box::new(comm), cfg.clone())
                .map_err(|e| format!("rank {rank}: init: {e}"))?;
            checkpoint_range(&mut engine, rank, 1..=NEWEST)?;
            if wait {
                engine
                    .flush(NAME, DURABLE)
                    .map_err(|e| format!("rank {rank}: waiting for v{DURABLE}'s flush: {e}"))?;
            }
            Ok(())
        })?;
        out.into_iter().collect()
    }

    /// Job 2 on fresh threads and engines: optionally an explicit `rebuild` of `probe`, then
    /// `restart_test` and, if it finds something, `restart` into poisoned buffers, which are
    /// compared bit for bit with the version restart reports.
    fn relaunch(&self, probe: Option<i64>) -> Result<Relaunch, String> {
        self.relaunch_then(probe, None)
    }

    /// [`Case::relaunch`], after which the job goes on checkpointing up to version `then`
    /// (from the version restored, or from 1) and dies again.
    fn relaunch_then(&self, probe: Option<i64>, then: Option<i64>) -> Result<Relaunch, String> {
        let cfg = self.config();
        type RankOut = Result<
            (
                Option<Result<Option<String>, String>>,
                Option<i64>,
                Option<i64>,
            ),
            String,
        >;
        let out = job(self.ranks, "relaunch", move |comm| -> RankOut {
            let rank = comm_rank(&comm);
            let mut engine = Engine::new(Box::new(comm), cfg.clone())
                .map_err(|e| format!("rank {rank}: init: {e}"))?;
            let rebuilt = probe.map(|v| engine.rebuild(NAME, v).map_err(|e| e.msg));
            let found = engine
                .restart_test(NAME)
                .map_err(|e| format!("rank {rank}: restart_test: {e}"))?;
            let restored = match found {
                None => None,
                Some(v) => Some(restore_checked(&mut engine, rank, v, &regions_of(rank))?),
            };
            if let Some(last) = then {
                checkpoint_range(&mut engine, rank, restored.unwrap_or(0) + 1..=last)?;
            }
            Ok((rebuilt, found, restored))
        })?;
        let mut rebuild = Vec::new();
        let mut agreed: Option<(Option<i64>, Option<i64>)> = None;
        for (rank, res) in out.into_iter().enumerate() {
            let (probe_res, found, restored) = res?;
            rebuild.extend(probe_res);
            match agreed {
                None => agreed = Some((found, restored)),
                Some(a) => ensure(a == (found, restored), || {
                    format!(
                        "ranks disagree: rank 0 found/restored {a:?}, rank {rank} {:?}",
                        (found, restored)
                    )
                })?,
            }
        }
        let (found, restored) = agreed.expect("at least one rank");
        Ok(Relaunch {
            found,
            restored,
            rebuild,
        })
    }

    /// Remove both tiers: the case starts again from nothing.
    fn reset(&self) -> Result<(), String> {
        for t in ["local", "global"] {
            let d = self.dir.path().join(t);
            if d.exists() {
                std::fs::remove_dir_all(&d).map_err(|e| format!("remove {}: {e}", d.display()))?;
            }
        }
        Ok(())
    }

    /// Lose `nodes`: their directories, or their shared-memory stores, removed.
    fn lose(&self, nodes: &[usize]) -> Result<(), String> {
        for n in nodes {
            let (gone, res) = if self.mem {
                let f = self.store_file(*n);
                let r = std::fs::remove_file(&f);
                (f, r)
            } else {
                let d = self.node_dir(*n);
                let r = std::fs::remove_dir_all(&d);
                (d, r)
            };
            res.map_err(|e| format!("remove {}: {e}", gone.display()))?;
        }
        Ok(())
    }

    /// After job 1: every partner copy and parity object is where the plan puts it, and no
    /// set or pair has two members on one node.
    fn check_layout(&self) -> Result<(), String> {
        if self.mem {
            return Ok(()); // a store is not files
        }
        for r in 0..self.ranks {
            let home = self.vdir(self.node_of(r), NEWEST);
            ensure(home.join(format!("rank{r}.ckpt")).is_file(), || {
                format!("v{NEWEST} of rank {r} is not on node {}", self.node_of(r))
            })?;
            match self.scheme.code() {
                Code::Single => ensure(
                    !home.join("partner").exists() && !home.join("parity").exists(),
                    || format!("scheme single stored redundancy in {}", home.display()),
                )?,
                Code::Partner => {
                    let dest = self.plan.partner_dest[r];
                    let holder = self.node_of(dest);
                    ensure(holder != self.node_of(r), || {
                        format!("rank {r}'s partner {dest} is on its own node {holder}")
                    })?;
                    let copy = self
                        .vdir(holder, NEWEST)
                        .join(format!("partner/rank{r}.ckpt"));
                    let own = std::fs::read(home.join(format!("rank{r}.ckpt"))).ok();
                    ensure(std::fs::read(&copy).ok() == own, || {
                        format!("{} is not a copy of rank {r}'s part", copy.display())
                    })?;
                    ensure(!home.join(format!("partner/rank{r}.ckpt")).exists(), || {
                        format!("rank {r}'s partner copy is on its own node")
                    })?;
                }
                Code::Xor | Code::Rs => {
                    let (h, _) = parity_file(&home.join(format!("parity/rank{r}.par")))?;
                    let members: Vec<usize> = h.members.iter().map(|m| m.0 as usize).collect();
                    let (set, _) = self.plan.set_of(r).expect("every rank is in a set");
                    ensure(members == self.plan.sets[set], || {
                        format!(
                            "rank {r}'s parity protects {members:?}, the plan says {:?}",
                            self.plan.sets[set]
                        )
                    })?;
                    let mut nodes: Vec<usize> = members.iter().map(|m| self.node_of(*m)).collect();
                    nodes.sort_unstable();
                    nodes.dedup();
                    ensure(nodes.len() == members.len(), || {
                        format!("set {members:?} has two members on one node")
                    })?;
                    let n = match self.set_size {
                        0 => self.nodes.min(8),
                        n => n,
                    };
                    ensure(
                        h.m as usize == self.scheme.parity() && members.len() == n,
                        || format!("rank {r}'s parity has m = {} over {} members", h.m, h.n()),
                    )?;
                }
            }
        }
        Ok(())
    }

    /// Every file of `version` on `nodes`, by path relative to the local tier.
    fn snapshot(&self, nodes: &[usize], version: i64) -> BTreeMap<PathBuf, Vec<u8>> {
        let mut out = BTreeMap::new();
        if self.mem {
            return out; // a store is not files
        }
        let local = self.dir.path().join("local");
        for n in nodes {
            let mut todo = vec![self.vdir(*n, version)];
            while let Some(d) = todo.pop() {
                for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                    let p = e.path();
                    if p.is_dir() {
                        todo.push(p);
                    } else if let Ok(b) = std::fs::read(&p) {
                        out.insert(p.strip_prefix(&local).unwrap().to_path_buf(), b);
                    }
                }
            }
        }
        out
    }

    /// The wiped nodes hold again exactly what they held: rank files, partner copies and
    /// parity objects byte for byte, and a manifest that differs at most in its timestamp.
    fn check_rebuilt(
        &self,
        nodes: &[usize],
        before: &BTreeMap<PathBuf, Vec<u8>>,
    ) -> Result<(), String> {
        if self.mem {
            return Ok(()); // a store is not files
        }
        let after = self.snapshot(nodes, NEWEST);
        let names = |m: &BTreeMap<PathBuf, Vec<u8>>| m.keys().cloned().collect::<Vec<_>>();
        ensure(names(before) == names(&after), || {
            format!(
                "nodes {nodes:?} held {:?} before the loss, {:?} after the rebuild",
                names(before),
                names(&after)
            )
        })?;
        for (path, was) in before {
            let now = &after[path];
            if path.ends_with("manifest.json") {
                let (mut a, b) = (decode_manifest(was)?, decode_manifest(now)?);
                a.created_unix_ms = b.created_unix_ms;
                ensure(a == b, || {
                    format!(
                        "{}: rebuilt manifest {b:?} differs from {a:?}",
                        path.display()
                    )
                })?;
            } else {
                ensure(was == now, || {
                    format!(
                        "{}: the rebuilt file differs from the lost one",
                        path.display()
                    )
                })?;
            }
        }
        Ok(())
    }
}

/// Checkpoint `versions` of every region of `rank`.
fn checkpoint_range(
    engine: &mut Engine,
    rank: usize,
    versions: std::ops::RangeInclusive<i64>,
) -> Result<(), String> {
    for v in versions {
        checkpoint_of(engine, rank, v, &regions_of(rank))
            .map_err(|e| format!("rank {rank}: checkpoint v{v}: {e}"))?;
    }
    Ok(())
}

/// Checkpoint version `v` of the regions `layout` of `rank`.
fn checkpoint_of(
    engine: &mut Engine,
    rank: usize,
    v: i64,
    layout: &[(i32, Dtype, usize)],
) -> cairn_core::Result<()> {
    let data = contents(layout, v, rank);
    let refs: Vec<RegionRef<'_>> = layout
        .iter()
        .zip(&data)
        .map(|((id, dtype, _), bytes)| RegionRef {
            id: *id,
            dtype: *dtype,
            bytes,
        })
        .collect();
    engine.checkpoint(NAME, v, &refs)
}

/// `restart` of `v` into poisoned buffers of the regions `layout`, then every byte compared
/// with the version restart reports: the version, or restart's error, or an error naming
/// wrong data.
fn restore_checked(
    engine: &mut Engine,
    rank: usize,
    v: i64,
    layout: &[(i32, Dtype, usize)],
) -> Result<i64, String> {
    restore_or_refuse(engine, rank, v, layout)?
        .map_err(|e| format!("rank {rank}: restart v{v}: {e}"))
}

/// [`restore_checked`], with restart's own error apart: `Err` is wrong data only.
fn restore_or_refuse(
    engine: &mut Engine,
    rank: usize,
    v: i64,
    layout: &[(i32, Dtype, usize)],
) -> Result<cairn_core::Result<i64>, String> {
    let mut bufs: Vec<Vec<u8>> = layout
        .iter()
        .map(|(_, dtype, count)| vec![0xEE; count * dtype.size()])
        .collect();
    let mut regs: Vec<RegionMut<'_>> = layout
        .iter()
        .zip(bufs.iter_mut())
        .map(|((id, dtype, _), bytes)| RegionMut {
            id: *id,
            dtype: *dtype,
            bytes,
        })
        .collect();
    let got = match engine.restart(NAME, v, &mut regs) {
        Ok(got) => got,
        Err(e) => return Ok(Err(e)),
    };
    drop(regs);
    match first_difference(layout, got, rank, &bufs) {
        Some(diff) => Err(format!("WRONG DATA: restart said v{got} but {diff}")),
        None => Ok(Ok(got)),
    }
}

fn decode_manifest(b: &[u8]) -> Result<Manifest, String> {
    Manifest::decode(b).map_err(|e| format!("manifest: {e}"))
}

/// Read a parity object and check its header and every shard's checksum.
fn parity_file(path: &Path) -> Result<(ParityHeader, Vec<u8>), String> {
    let obj = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let h = ParityHeader::decode(&obj).map_err(|e| format!("{}: {e}", path.display()))?;
    let (start, s) = (h.encoded_len(), h.segment as usize);
    ensure(obj.len() == start + s * h.m as usize, || {
        format!(
            "{}: {} bytes for m = {}, S = {s}",
            path.display(),
            obj.len(),
            h.m
        )
    })?;
    for (j, want) in h.shard_sums.iter().enumerate() {
        ensure(
            checksum(&obj[start + j * s..start + (j + 1) * s]) == *want,
            || format!("{}: shard {j} fails its checksum", path.display()),
        )?;
    }
    Ok((h, obj))
}

fn flip(path: &Path, offset: u64) -> Result<(), String> {
    let mut b = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let byte = b
        .get_mut(offset as usize)
        .ok_or_else(|| format!("{} is shorter than {offset} bytes", path.display()))?;
    *byte ^= 0x5a;
    std::fs::write(path, &b).map_err(|e| format!("{}: {e}", path.display()))
}

fn expect(got: &Relaunch, found: Option<i64>, restored: Option<i64>) -> Result<(), String> {
    ensure(got.found == found && got.restored == restored, || {
        format!(
            "expected restart_test {found:?} and restart {restored:?}, got {:?} and {:?}",
            got.found, got.restored
        )
    })
}

// ---- Jobs: ranks as threads ---------------------------------------------------------------

fn comm_rank(comm: &Threads) -> usize {
    cairn_comm::Comm::rank(comm)
}

/// Run `body` on every rank of a fresh `ranks`-thread world and collect the results by rank.
/// A rank that panics, or a job still running after [`JOB_TIMEOUT`], is an error naming the
/// ranks (threads stuck in a collective are left behind).
fn job<T: Send + std::fmt::Debug + 'static>(
    ranks: usize,
    what: &str,
    body: impl Fn(Threads) -> T + Send + Sync + 'static,
) -> Result<Vec<T>, String> {
    let body = Arc::new(body);
    let (tx, rx) = mpsc::channel();
    let handles: Vec<_> = Threads::world(ranks)
        .into_iter()
        .enumerate()
        .map(|(r, comm)| {
            let (tx, body) = (tx.clone(), body.clone());
            std::thread::Builder::new()
                .name(format!("{what}-rank{r}"))
                .spawn(move || {
                    let out = body(comm);
                    let _ = tx.send((r, out));
                })
                .expect("spawn a rank thread")
        })
        .collect();
    drop(tx);
    let deadline = Instant::now() + JOB_TIMEOUT;
    let mut out: Vec<Option<T>> = (0..ranks).map(|_| None).collect();
    let mut handles: Vec<Option<_>> = handles.into_iter().map(Some).collect();
    while out.iter().any(Option::is_none) {
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok((r, v)) => out[r] = Some(v),
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        for (r, h) in handles.iter_mut().enumerate() {
            let finished = h.as_ref().is_some_and(|h| h.is_finished());
            if finished && out[r].is_none() {
                // Its result may still be in the channel.
                while let Ok((q, v)) = rx.try_recv() {
                    out[q] = Some(v);
                }
                if out[r].is_none() {
                    let err = h.take().unwrap().join().err();
                    return Err(format!("{what}: rank {r} panicked: {}", panic_text(err)));
                }
            }
        }
        if Instant::now() > deadline {
            let stuck: Vec<usize> = (0..ranks).filter(|r| out[*r].is_none()).collect();
            let done: Vec<String> = out
                .iter()
                .enumerate()
                .filter_map(|(r, o)| o.as_ref().map(|o| format!("rank {r}: {o:?}")))
                .collect();
            return Err(format!(
                "{what}: ranks {stuck:?} still running after {JOB_TIMEOUT:?} (a collective deadlocked?); {}",
                done.join("; ")
            ));
        }
    }
    for h in handles.into_iter().flatten() {
        let _ = h.join();
    }
    Ok(out
        .into_iter()
        .map(|v| v.expect("every rank reported"))
        .collect())
}

fn panic_text(p: Option<Box<dyn std::any::Any + Send>>) -> String {
    match p {
        Some(p) => p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "(no message)".into()),
        None => "(no message)".into(),
    }
}

// ---- The matrix ---------------------------------------------------------------------------

struct Matrix {
    schemes: Vec<Scheme>,
    layouts: Vec<(usize, usize)>,
    flush: Vec<Flush>,
    mem: bool,
}

impl Matrix {
    fn new() -> Matrix {
        Matrix {
            schemes: SCHEMES.to_vec(),
            layouts: LAYOUTS.to_vec(),
            flush: vec![Flush::Off, Flush::Sync, Flush::Async],
            mem: false,
        }
    }

    /// Every case with the node-local tier in shared memory instead (no synchronous flush:
    /// the store changes nothing about it).
    fn mem(mut self) -> Matrix {
        self.mem = true;
        self.flush = vec![Flush::Off, Flush::Async];
        self
    }

    fn schemes(mut self, s: &[Scheme]) -> Matrix {
        self.schemes = s.to_vec();
        self
    }

    /// Run `scenario` on every case; combinations `plan()` refuses are skipped after checking
    /// that the refusal is the expected one. Panics listing every failed case.
    fn test(&self, scenario: &str, body: impl Fn(&Case) -> Result<(), String>) {
        let t0 = Instant::now();
        let (mut ran, mut refused) = (0, 0);
        let mut failures = Vec::new();
        for &scheme in &self.schemes {
            for &(ranks, nodes) in &self.layouts {
                for &flush in &self.flush {
                    let case = match Case::new(scheme, ranks, nodes, flush) {
                        Ok(mut c) => {
                            c.mem = self.mem;
                            c
                        }
                        Err(why) => {
                            refused += 1;
                            if let Err(e) = check_refusal(scheme, ranks, nodes, &why) {
                                failures.push(e);
                            }
                            continue;
                        }
                    };
                    if case_filter().is_some_and(|f| !case.name().contains(&f)) {
                        continue;
                    }
                    ran += 1;
                    let tc = Instant::now();
                    let res = catch_unwind(AssertUnwindSafe(|| body(&case)))
                        .unwrap_or_else(|p| Err(format!("panicked: {}", panic_text(Some(p)))));
                    if let Err(e) = res {
                        failures.push(format!("{}: {e}", case.name()));
                    }
                    if tc.elapsed() > Duration::from_secs(5) {
                        eprintln!("{scenario}: {} took {:.1?}", case.name(), tc.elapsed());
                    }
                }
            }
        }
        eprintln!(
            "{scenario}: {ran} cases run, {refused} refused by plan(), {} failed, {:.1?}",
            failures.len(),
            t0.elapsed()
        );
        assert!(
            failures.is_empty(),
            "{scenario}: {} case(s) failed:\n  {}",
            failures.len(),
            failures.join("\n  ")
        );
        assert!(ran > 0, "{scenario}: no case ran");
    }
}

/// The only combination of the matrix a scheme cannot protect: rs with parity 2 on 2 nodes
/// (sets of 2 cannot hold 2 parity shards and any data).
fn check_refusal(scheme: Scheme, ranks: usize, nodes: usize, why: &str) -> Result<(), String> {
    let what = format!("{} on {ranks} ranks / {nodes} nodes", scheme.label());
    ensure(scheme == Scheme::Rs2 && nodes == 2, || {
        format!("{what}: plan() refused a valid combination: {why}")
    })?;
    ensure(why.contains("\"rs\"") && why.contains("2 parity"), || {
        format!("{what}: the refusal should name the scheme and its parity: {why}")
    })
}

// ---- Scenarios ------------------------------------------------------------------------------

/// Lose as many nodes as the scheme tolerates (one for single): the newest version comes back
/// bit for bit, and the wiped nodes hold again exactly what they lost; a second loss of other
/// nodes then proves the re-protection, and a third, after the job went on to v7, that new
/// checkpoints are protected as before. Single restores the durable version or nothing.
#[test]
fn losing_tolerated_nodes_restores_the_newest_version() {
    Matrix::new().test("tolerated loss", tolerated_loss);
}

/// The scenario of [`losing_tolerated_nodes_restores_the_newest_version`].
fn tolerated_loss(c: &Case) -> Result<(), String> {
    c.write()?;
    c.check_layout()?;
    let count = c.scheme.tolerates().max(1);
    let lost = c.nodes_from(c.first_victim(), count);
    let before = c.snapshot(&lost, NEWEST);
    c.lose(&lost)?;
    let got = c.relaunch(None)?;
    if c.scheme == Scheme::Single {
        return expect(&got, c.durable(), c.durable())
            .map_err(|e| format!("nodes {lost:?} lost: {e}"));
    }
    expect(&got, Some(NEWEST), Some(NEWEST)).map_err(|e| format!("nodes {lost:?} lost: {e}"))?;
    c.check_rebuilt(&lost, &before)?;
    // The rebuilt copies and parity protect v5 again: lose the next nodes. This run goes
    // on to v7 from the restored state, protected as before: lose the next nodes again.
    let again = c.nodes_from(c.first_victim() + count, count);
    c.lose(&again)?;
    let got = c.relaunch_then(None, Some(NEWEST + 2))?;
    expect(&got, Some(NEWEST), Some(NEWEST))
        .map_err(|e| format!("nodes {lost:?}, then {again:?} lost: {e}"))?;
    let third = c.nodes_from(c.first_victim() + 2 * count, count);
    c.lose(&third)?;
    let got = c.relaunch(None)?;
    expect(&got, Some(NEWEST + 2), Some(NEWEST + 2))
        .map_err(|e| format!("nodes {lost:?}, {again:?}, then after v7 {third:?} lost: {e}"))
}

/// The same losses with each node's checkpoints in its shared-memory store (`[tiers] local =
/// "mem"`): losing a node is unlinking its store; the new job makes an empty one and rebuilds
/// it from the other nodes' copies and parity, or, for scheme single, restarts from the
/// global tier. (Where copies and parity lie and what the rebuilt bytes are is checked on the
/// directory cases only: a store is not files; restart still compares every restored byte.)
#[test]
fn mem_tier_losing_tolerated_nodes_restores_the_newest_version() {
    // Store names come from the job name: this process's own, so that no other run's stores
    // are found, and the cases of this test, one at a time, remove theirs when done.
    static JOB: std::sync::Once = std::sync::Once::new();
    JOB.call_once(|| std::env::set_var("CAIRN_JOB", format!("redundancy-{}", std::process::id())));
    Matrix::new()
        .mem()
        .test("mem tier: tolerated loss", tolerated_loss);
}

/// Lose one node more than the scheme tolerates (xor: 2 nodes of a set; partner: both nodes
/// of a pair): `rebuild` fails with a clear message, and restart finds the durable version on
/// the global tier, or nothing, never wrong data.
#[test]
fn losing_more_than_tolerated_falls_back_with_a_clear_error() {
    Matrix::new().schemes(&REDUNDANT).test("loss beyond tolerance", |c| {
        c.write()?;
        let lost = c.nodes_from(c.first_victim(), c.scheme.tolerates() + 1);
        c.lose(&lost)?;
        // The job goes on from what it restored (or from scratch) to v7.
        let got = c.relaunch_then(Some(NEWEST), Some(NEWEST + 2))?;
        let clear = [
            "tolerates",
            "are both lost",
            "no node holds a manifest",
            "survives",
        ];
        for (rank, r) in got.rebuild.iter().enumerate() {
            match r {
                Ok(report) => {
                    return Err(format!(
                        "nodes {lost:?} lost: rank {rank}: rebuild of v{NEWEST} succeeded: {report:?}"
                    ))
                }
                Err(msg) => ensure(
                    clear.iter().any(|c| msg.contains(c)) || msg.contains("another rank"),
                    || format!("rank {rank}: unclear rebuild error: {msg}"),
                )?,
            }
        }
        ensure(
            got.rebuild
                .iter()
                .any(|r| matches!(r, Err(m) if clear.iter().any(|c| m.contains(c)))),
            || format!("no rank explains why v{NEWEST} cannot be rebuilt: {:?}", got.rebuild),
        )?;
        expect(&got, c.durable(), c.durable())
            .map_err(|e| format!("nodes {lost:?} lost: {e}"))?;
        // Whatever the lost version left on the surviving nodes, the new v5..v7 replaced it.
        let got = c.relaunch(None)?;
        expect(&got, Some(NEWEST + 2), Some(NEWEST + 2))
            .map_err(|e| format!("nodes {lost:?} lost, then v7 written: {e}"))
    });
}

/// No loss at all: a relaunched job restores v5 and goes on to v6 at once, with every rank of
/// a node sharing its tier (the first checkpoint after a restart must survive the restart's
/// clean-up on the other ranks of its node). Repeated, so that the ranks' timing varies.
#[test]
fn a_restarted_job_goes_on_checkpointing() {
    Matrix::new().test("restart and go on", |c| {
        c.write()?;
        for v in NEWEST..NEWEST + 3 {
            let got = c.relaunch_then(None, Some(v + 1))?;
            expect(&got, Some(v), Some(v)).map_err(|e| format!("after v{v}: {e}"))?;
        }
        let got = c.relaunch(None)?;
        expect(&got, Some(NEWEST + 3), Some(NEWEST + 3))
    });
}

/// A damaged parity shard or partner copy is found by its checksum when the node that needs it
/// is lost: rs with parity 2 rebuilds around it (and rewrites the damaged object); the others
/// cannot rebuild v5, say why, and rebuild v4 from its own redundancy instead.
#[test]
fn damaged_redundancy_is_detected_when_a_node_is_lost() {
    Matrix::new()
        .schemes(&REDUNDANT)
        .test("damaged redundancy", |c| {
            c.write()?;
            let (damaged, lost) = match c.scheme.code() {
                Code::Partner => {
                    // Rank x's copy lives with its partner; then x's node is lost.
                    let x = c.ranks - 1;
                    let holder = c.node_of(c.plan.partner_dest[x]);
                    let copy = c.vdir(holder, NEWEST).join(format!("partner/rank{x}.ckpt"));
                    (copy, c.node_of(x))
                }
                _ => {
                    // Member 0 of the first set holds parity of a stripe with member 1's data;
                    // then member 1's node is lost.
                    let set = &c.plan.sets[0];
                    let h = set[0];
                    let par = c
                        .vdir(c.node_of(h), NEWEST)
                        .join(format!("parity/rank{h}.par"));
                    (par, c.node_of(set[1]))
                }
            };
            let original =
                std::fs::read(&damaged).map_err(|e| format!("{}: {e}", damaged.display()))?;
            // A byte of region 1 in a partner copy; a byte of the last shard in a parity object.
            let offset = if c.scheme.code() == Code::Partner {
                DATA_OFFSET
            } else {
                original.len() as u64 - 3
            };
            flip(&damaged, offset)?;
            c.lose(&[lost])?;
            let got = c.relaunch(Some(NEWEST))?;
            let what = format!("{} damaged, node {lost} lost", damaged.display());
            if c.scheme == Scheme::Rs2 {
                ensure(got.rebuild.iter().all(|r| matches!(r, Ok(Some(_)))), || {
                    format!("{what}: rebuild should succeed: {:?}", got.rebuild)
                })?;
                expect(&got, Some(NEWEST), Some(NEWEST)).map_err(|e| format!("{what}: {e}"))?;
                let now = std::fs::read(&damaged).unwrap_or_default();
                return ensure(now == original, || {
                    format!("{what}: the damaged parity object was not rewritten")
                });
            }
            // With sets of 2 the damaged object is the only parity of its stripe, so with the
            // other member lost no parity of the set survives at all.
            let needles: &[&str] = if c.scheme.code() == Code::Partner {
                &["checksum"]
            } else {
                &["tolerates 1", "no parity of rank"]
            };
            let named = |m: &String| needles.iter().any(|n| m.contains(n));
            ensure(
                got.rebuild.iter().all(Result::is_err)
                    && got.rebuild.iter().any(|r| matches!(r, Err(m) if named(m))),
                || {
                    format!(
                        "{what}: rebuild should fail naming one of {needles:?}: {:?}",
                        got.rebuild
                    )
                },
            )?;
            expect(&got, Some(PREVIOUS), Some(PREVIOUS)).map_err(|e| format!("{what}: {e}"))
        });
}

/// One flipped byte in a rank file, in its data (rank 1) or in its index (rank 0): restart
/// repairs the part from redundancy and restores v5 (the repaired file is the original, byte
/// for byte); single falls back to v4.
#[test]
fn a_damaged_part_is_repaired_from_redundancy() {
    Matrix::new().test("damaged part", |c| {
        for (rank, in_index) in [(1, false), (0, true)] {
            c.reset()?;
            c.write()?;
            let path = c
                .vdir(c.node_of(rank), NEWEST)
                .join(format!("rank{rank}.ckpt"));
            let original = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            // The index ends where the trailer starts.
            let offset = if in_index {
                original.len() as u64 - TRAILER_LEN - 5
            } else {
                DATA_OFFSET
            };
            flip(&path, offset)?;
            let what = format!("{} damaged at byte {offset}", path.display());
            let got = c.relaunch(None)?;
            if c.scheme == Scheme::Single {
                expect(&got, Some(NEWEST), Some(PREVIOUS)).map_err(|e| format!("{what}: {e}"))?;
                continue;
            }
            expect(&got, Some(NEWEST), Some(NEWEST)).map_err(|e| format!("{what}: {e}"))?;
            ensure(std::fs::read(&path).ok() == Some(original), || {
                format!("{what}: the repaired part differs from the original")
            })?;
        }
        Ok(())
    });
}

/// A damaged part and a lost node at once, in one set (or pair): rs with parity 2 counts the
/// damaged part as a second loss and rebuilds both; xor and rs with parity 1 cannot, and
/// neither can partner when the lost node held the damaged part's only copy: they say why and
/// restore v4, rebuilt from its own redundancy.
#[test]
fn a_damaged_part_and_a_lost_node_in_one_set() {
    Matrix::new()
        .schemes(&REDUNDANT)
        .test("damaged part and lost node", |c| {
            c.write()?;
            let (damaged, lost) = match c.scheme.code() {
                Code::Partner => (0, c.node_of(c.plan.partner_dest[0])),
                _ => {
                    let set = &c.plan.sets[0];
                    (set[0], c.node_of(set[1]))
                }
            };
            let path = c
                .vdir(c.node_of(damaged), NEWEST)
                .join(format!("rank{damaged}.ckpt"));
            let original = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            flip(&path, DATA_OFFSET)?;
            c.lose(&[lost])?;
            let what = format!("{} damaged, node {lost} lost", path.display());
            let got = c.relaunch(Some(NEWEST))?;
            if c.scheme == Scheme::Rs2 {
                expect(&got, Some(NEWEST), Some(NEWEST)).map_err(|e| format!("{what}: {e}"))?;
                return ensure(std::fs::read(&path).ok() == Some(original), || {
                    format!("{what}: the damaged part was not rebuilt")
                });
            }
            ensure(got.rebuild.iter().all(Result::is_err), || {
                format!(
                    "{what}: rebuild of v{NEWEST} should fail: {:?}",
                    got.rebuild
                )
            })?;
            expect(&got, Some(PREVIOUS), Some(PREVIOUS)).map_err(|e| format!("{what}: {e}"))
        });
}

/// A node's manifest of v5 is missing (its leader died before publishing) or unreadable: the
/// other nodes' manifests prove v5 was captured everywhere, so its parts on that node are
/// taken as lost, rebuilt, and the manifest published again; single falls back to v4.
#[test]
fn a_missing_node_manifest_is_published_again() {
    Matrix::new().test("missing manifest", |c| {
        for garbage in [false, true] {
            c.reset()?;
            c.write()?;
            let node = c.first_victim();
            let m = c.vdir(node, NEWEST).join("manifest.json");
            let what = format!(
                "{} {}",
                m.display(),
                if garbage { "garbled" } else { "removed" }
            );
            if garbage {
                std::fs::write(&m, b"{\"format\": 1, \"na").map_err(|e| format!("{what}: {e}"))?;
            } else {
                std::fs::remove_file(&m).map_err(|e| format!("{what}: {e}"))?;
            }
            let got = c.relaunch(None)?;
            if c.scheme == Scheme::Single {
                expect(&got, Some(PREVIOUS), Some(PREVIOUS)).map_err(|e| format!("{what}: {e}"))?;
                continue;
            }
            expect(&got, Some(NEWEST), Some(NEWEST)).map_err(|e| format!("{what}: {e}"))?;
            let b = std::fs::read(&m).map_err(|e| format!("{what}: not published again: {e}"))?;
            let back = decode_manifest(&b)?;
            ensure(
                back.node == Some(node as u32)
                    && back.ranks
                        == c.ranks_on(node)
                            .iter()
                            .map(|r| *r as u32)
                            .collect::<Vec<_>>(),
                || format!("{what}: published again as {back:?}"),
            )?;
        }
        Ok(())
    });
}

// ---- Layouts outside the matrix -------------------------------------------------------------

/// Sets smaller than the node count: xor with sets of 2 on 4 nodes survives losing one node of
/// every set at once, but not two nodes of one set.
#[test]
fn small_sets_survive_one_loss_per_set() {
    let c = Case::with_sets(Scheme::Xor, 8, 4, Flush::Off, 2).unwrap();
    assert_eq!(
        c.plan.sets,
        vec![vec![0, 2], vec![4, 6], vec![1, 3], vec![5, 7]]
    );
    c.write().unwrap();
    c.check_layout().unwrap();
    // Nodes 0 and 2 hold one member of every set.
    let before = c.snapshot(&[0, 2], NEWEST);
    c.lose(&[0, 2]).unwrap();
    let got = c.relaunch(None).unwrap();
    expect(&got, Some(NEWEST), Some(NEWEST)).unwrap();
    c.check_rebuilt(&[0, 2], &before).unwrap();
    // Nodes 0 and 1 hold both members of {0, 2} and of {1, 3}.
    let c = Case::with_sets(Scheme::Xor, 8, 4, Flush::Async, 2).unwrap();
    c.write().unwrap();
    c.lose(&[0, 1]).unwrap();
    let got = c.relaunch(Some(NEWEST)).unwrap();
    assert!(
        got.rebuild
            .iter()
            .all(|r| matches!(r, Err(m) if m.contains("no parity of rank 0's set survives"))),
        "{:?}",
        got.rebuild
    );
    expect(&got, Some(DURABLE), Some(DURABLE)).unwrap();
}

/// Engine::new on `ranks` threads with `cfg` must fail on every rank with a configuration
/// error containing every one of `needles`, before creating any tier.
fn refused_at_init(what: &str, ranks: usize, cfg: Config, needles: &[&str]) {
    let (local, global) = (cfg.local.clone(), cfg.global.clone());
    let out = job(ranks, what, move |comm| {
        Engine::new(Box::new(comm), cfg.clone()).map(|_| ())
    })
    .unwrap();
    for (rank, res) in out.iter().enumerate() {
        let e = res
            .as_ref()
            .err()
            .unwrap_or_else(|| panic!("{what}: rank {rank} initialised"));
        assert_eq!(e.kind, ErrorKind::Config, "{what}: rank {rank}: {e}");
        assert!(
            needles.iter().all(|n| e.msg.contains(n)),
            "{what}: rank {rank}: the message should contain {needles:?}: {e}"
        );
    }
    assert!(
        !local.is_some_and(|l| l.exists()) && !global.exists(),
        "{what}: init created tiers before refusing"
    );
}

/// Protection the job cannot have is an error at init on every rank, with a message that names
/// the setting, and nothing is created on the tiers.
#[test]
fn impossible_protection_is_a_clear_error_at_init() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = |nodes: usize, scheme: &str, set_size: usize, parity: usize| Config {
        local: Some(dir.path().join("local")),
        global: dir.path().join("global"),
        sim_nodes: nodes,
        redundancy: scheme.into(),
        set_size,
        parity,
        log_level: log_level(),
        ..Config::default()
    };
    refused_at_init(
        "partner on one node",
        2,
        cfg(0, "partner", 0, 2),
        &["partner", "at least 2 failure domains", "sim_nodes"],
    );
    refused_at_init(
        "partner on one simulated node",
        4,
        cfg(1, "partner", 0, 2),
        &["partner", "at least 2 failure domains"],
    );
    refused_at_init(
        "partner with 3 + 2 ranks per node",
        5,
        cfg(2, "partner", 0, 2),
        &["partner", "same number of ranks"],
    );
    refused_at_init(
        "xor with sets larger than the node count",
        4,
        cfg(2, "xor", 3, 1),
        &["set_size = 3", "only 2 failure domain"],
    );
    refused_at_init(
        "xor on one node",
        3,
        cfg(0, "xor", 0, 1),
        &["\"xor\"", "sets larger than 1"],
    );
    refused_at_init(
        "rs with parity 2 on 2 nodes",
        4,
        cfg(2, "rs", 0, 2),
        &["\"rs\"", "2 parity"],
    );
    refused_at_init(
        "rs with parity equal to set_size",
        6,
        cfg(3, "rs", 3, 3),
        &["\"rs\"", "3 parity", "sets have 3"],
    );
    refused_at_init(
        "xor without a node-local tier",
        4,
        Config {
            local: None,
            ..cfg(2, "xor", 0, 1)
        },
        &["\"xor\"", "[tiers] local"],
    );
}

// ---- Crashes: storage that loses power ------------------------------------------------------
//
// The same job on [`CrashMachine`] tiers (cairn-tier's crash.rs: SQLite's crash-test VFS as a
// model): the node-local tier never syncs, the global tier syncs every object it publishes,
// as the engine's own directory tiers do. Each seed picks a layout and a flush schedule, and
// the sync at which the machine loses power; at that moment every change still pending on
// any tier is kept, dropped or torn. After the reboot (one node sometimes never comes back)
// a new job restarts: it must restore a version at least as new as the newest one the first
// job was told was durable, bit for bit, and never hang or panic.

/// Versions a crash job writes.
const CRASH_VERSIONS: i64 = 5;

/// The regions of a crash job: small, so a thousand crashes take seconds.
fn crash_regions(rank: usize) -> Vec<(i32, Dtype, usize)> {
    vec![
        (0, Dtype::Int64, 1),
        (1, Dtype::Double, 700 + 300 * rank),
        (2, Dtype::Byte, 4_099 + rank),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum CrashLayout {
    /// No node-local tier: every checkpoint goes straight to the global tier.
    GlobalOnly,
    Single,
    Partner,
    Xor,
}

const CRASH_LAYOUTS: [CrashLayout; 4] = [
    CrashLayout::GlobalOnly,
    CrashLayout::Single,
    CrashLayout::Partner,
    CrashLayout::Xor,
];

fn crash_config(layout: CrashLayout, flush_every: u64) -> Config {
    let mut cfg = Config {
        // Never opened: the tiers are the crash machine's (Engine::with_tiers).
        local: (layout != CrashLayout::GlobalOnly).then(|| PathBuf::from("/nonexistent/local")),
        global: PathBuf::from("/nonexistent/global"),
        fsync_global: true,
        sim_nodes: 4,
        keep: 2,
        block: 4096,
        flush_every,
        log_level: log_level(),
        ..Config::default()
    };
    match layout {
        CrashLayout::Partner => Scheme::PartnerStream.apply(&mut cfg),
        CrashLayout::Xor => Scheme::Xor.apply(&mut cfg),
        _ => Scheme::Single.apply(&mut cfg),
    }
    cfg
}

fn crash_engine(
    comm: Threads,
    cfg: Config,
    machine: &Arc<CrashMachine>,
) -> cairn_core::Result<Engine> {
    let machine = machine.clone();
    Engine::with_tiers(Box::new(comm), cfg, move |cfg, topo| {
        let global: Arc<dyn Tier> =
            Arc::new(machine.tier("global", "global", TierScope::Global, cfg.fsync_global));
        Ok(match cfg.local {
            None => (global, None),
            Some(_) => {
                let disk = format!("node{}", topo.node);
                let local: Arc<dyn Tier> =
                    Arc::new(machine.tier("local", &disk, TierScope::NodeLocal, false));
                (local, Some(global))
            }
        })
    })
}

/// What one rank of the first job got done before the crash: the newest version its
/// checkpoint call returned, and the newest one it was told was durable.
#[derive(Debug, Clone, Copy, Default)]
struct Done {
    written: i64,
    durable: i64,
}

/// The first job: checkpoint 1..=CRASH_VERSIONS, asking after each which versions are
/// durable, then wait for the last flush and finalize; any error (the machine is gone) ends
/// the rank there.
fn crash_write(cfg: &Config, machine: &Arc<CrashMachine>) -> Result<Vec<Done>, String> {
    let (cfg, machine) = (cfg.clone(), machine.clone());
    job(4, "crash-write", move |comm| {
        let rank = comm_rank(&comm);
        let mut done = Done::default();
        let Ok(mut e) = crash_engine(comm, cfg.clone(), &machine) else {
            return done;
        };
        let layout = crash_regions(rank);
        let note_durable = |e: &mut Engine, done: &mut Done, upto: i64| -> bool {
            for u in 1..=upto {
                match e.test(NAME, u) {
                    Ok(Some(CkptState::Durable)) => done.durable = done.durable.max(u),
                    Ok(_) => {}
                    Err(_) => return false,
                }
            }
            true
        };
        for v in 1..=CRASH_VERSIONS {
            if checkpoint_of(&mut e, rank, v, &layout).is_err() {
                return done;
            }
            done.written = v;
            if !note_durable(&mut e, &mut done, v) {
                return done;
            }
        }
        if e.flush(NAME, CRASH_VERSIONS).is_ok() {
            note_durable(&mut e, &mut done, CRASH_VERSIONS);
        }
        let _ = e.finalize();
        done
    })
}

/// What the job after the reboot restored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Restored {
    Version(i64),
    Nothing,
    /// restart_test offered a version whose data turned out damaged, and nothing older could
    /// be restored: restart said so (a `Corrupt` error) rather than restore it.
    Refused,
}

/// The job after the reboot: what restart_test found and restart restored, agreed by every
/// rank, or an error naming wrong data.
fn crash_restart(cfg: &Config, machine: &Arc<CrashMachine>) -> Result<Restored, String> {
    let (cfg, machine) = (cfg.clone(), machine.clone());
    let out = job(
        4,
        "crash-restart",
        move |comm| -> Result<Restored, String> {
            let rank = comm_rank(&comm);
            let mut e = crash_engine(comm, cfg.clone(), &machine)
                .map_err(|e| format!("rank {rank}: init after the reboot: {e}"))?;
            let found = e
                .restart_test(NAME)
                .map_err(|e| format!("rank {rank}: restart_test: {e}"))?;
            let Some(v) = found else {
                return Ok(Restored::Nothing);
            };
            let got = match restore_or_refuse(&mut e, rank, v, &crash_regions(rank))? {
                Ok(got) => Restored::Version(got),
                Err(err) if err.kind == ErrorKind::Corrupt => Restored::Refused,
                Err(err) => return Err(format!("rank {rank}: restart v{v}: {err}")),
            };
            e.finalize()
                .map_err(|e| format!("rank {rank}: finalize after restart: {e}"))?;
            Ok(got)
        },
    )?;
    let mut agreed = None;
    for (rank, r) in out.into_iter().enumerate() {
        let r = r?;
        match agreed {
            None => agreed = Some(r),
            Some(a) if a != r => {
                return Err(format!("rank {rank} restored {r:?}, rank 0 {a:?}"));
            }
            _ => {}
        }
    }
    Ok(agreed.unwrap_or(Restored::Nothing))
}

/// The syncs a whole job of `layout` does without a crash: the range the crash is drawn from.
fn crash_syncs(layout: CrashLayout, flush_every: u64) -> Result<u64, String> {
    let machine = CrashMachine::new(0, None);
    let done = crash_write(&crash_config(layout, flush_every), &machine)?;
    ensure(done.iter().all(|d| d.written == CRASH_VERSIONS), || {
        format!("{layout:?}: a job without a crash did not finish: {done:?}")
    })?;
    let durable = done.iter().map(|d| d.durable).max().unwrap_or(0);
    ensure(durable == CRASH_VERSIONS, || {
        format!(
            "{layout:?}: without a crash v{CRASH_VERSIONS} was never reported durable: {done:?}"
        )
    })?;
    Ok(machine.syncs())
}

/// Tallies of the crash trials, for the summary line.
#[derive(Debug, Default)]
struct CrashTally {
    trials: u64,
    crashed_in_job: u64,
    lost_node: u64,
    fates: CrashReport,
    restored_newest: u64,
    restored_older: u64,
    restored_nothing: u64,
    refused: u64,
}

/// One seed: returns its failure, if any, naming everything needed to run it again.
fn crash_trial(
    seed: u64,
    syncs: &BTreeMap<(CrashLayout, u64), u64>,
    tally: &mut CrashTally,
) -> Result<(), String> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let layout = CRASH_LAYOUTS[rng.usize(0..CRASH_LAYOUTS.len())];
    let flush_every = rng.u64(1..=2);
    let total = syncs[&(layout, flush_every)];
    let crash_at = rng.u64(1..=total + total / 10 + 1);
    let lose = layout != CrashLayout::GlobalOnly && rng.u32(0..3) == 0;
    let lost_node = rng.usize(0..4);
    let what =
        format!(
        "seed {seed}: {layout:?}, flush every {flush_every}, crash at sync {crash_at} of {total}{}",
        if lose { format!(", node {lost_node} lost") } else { String::new() }
    );
    let cfg = crash_config(layout, flush_every);
    let machine = CrashMachine::new(seed, Some(crash_at));
    let done = crash_write(&cfg, &machine).map_err(|e| format!("{what}: {e}"))?;
    let report = machine.report();
    let after = machine.reboot();
    let fates = machine.report();
    // No process of the first job runs after the power loss, so its locks are stale; in
    // this one test process their holder (this process) would look alive.
    after.remove_where(|k| k.ends_with(".lock"));
    if lose {
        after.lose_disk(&format!("node{lost_node}"));
    }
    let restored = crash_restart(&cfg, &after).map_err(|e| format!("{what}: {e}"))?;
    let durable = done.iter().map(|d| d.durable).max().unwrap_or(0);
    let written = done.iter().map(|d| d.written).max().unwrap_or(0);
    let attempted = (written + 1).min(CRASH_VERSIONS);
    let newest = match restored {
        Restored::Version(r) => r,
        _ => 0,
    };
    if durable > 0 && newest < durable {
        return Err(format!(
            "{what}: LOST: v{durable} was reported durable, restart: {restored:?} ({fates:?})"
        ));
    }
    ensure(newest <= attempted, || {
        format!("{what}: restored v{newest}, but no rank got past v{written}")
    })?;
    tally.trials += 1;
    tally.crashed_in_job += u64::from(report.at_sync != 0);
    tally.lost_node += u64::from(lose);
    tally.fates.kept += fates.kept;
    tally.fates.dropped += fates.dropped;
    tally.fates.torn += fates.torn;
    match restored {
        Restored::Nothing => tally.restored_nothing += 1,
        Restored::Refused => tally.refused += 1,
        Restored::Version(r) if r >= written => tally.restored_newest += 1,
        Restored::Version(_) => tally.restored_older += 1,
    }
    Ok(())
}

/// The count in variable `name`, else `default`: how many seeds or trials a longer run asks for.
fn env_count(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `CAIRN_CRASH_SEEDS=N` runs N seeds (1,000 by default; more in a longer run), from
/// `CAIRN_CRASH_FIRST` (0).
#[test]
fn a_crash_at_any_sync_never_loses_a_durable_version_or_restores_wrong_data() {
    let (seeds, first) = (
        env_count("CAIRN_CRASH_SEEDS", 1000),
        env_count("CAIRN_CRASH_FIRST", 0),
    );
    let mut syncs = BTreeMap::new();
    for layout in CRASH_LAYOUTS {
        for every in 1..=2 {
            syncs.insert((layout, every), crash_syncs(layout, every).unwrap());
        }
    }
    let mut tally = CrashTally::default();
    let mut failures = Vec::new();
    for seed in first..first + seeds {
        if let Err(e) = crash_trial(seed, &syncs, &mut tally) {
            failures.push(e);
        }
    }
    eprintln!(
        "crash trials: {} seeds passed of {seeds} (crashed during the job: {}, a node lost as \
         well: {}); pending changes at the crash kept {} / dropped {} / torn {}; restart \
         restored the newest version written {}, an older one {}, nothing {}, refused a damaged \
         one with nothing older to offer {}; syncs per job {syncs:?}",
        tally.trials,
        tally.crashed_in_job,
        tally.lost_node,
        tally.fates.kept,
        tally.fates.dropped,
        tally.fates.torn,
        tally.restored_newest,
        tally.restored_older,
        tally.restored_nothing,
        tally.refused,
    );
    assert!(
        failures.is_empty(),
        "{} of {seeds} crash trials failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        tally.fates.torn > 0 && tally.crashed_in_job > seeds / 2,
        "{tally:?}"
    );
}

// ---- Trials: one stored file damaged ---------------------------------------------------------
//
// After job 1 of a random case, one file anywhere in its tiers (a rank file, a manifest, a
// partner copy, a parity object, a lock) is damaged in one of the ways storage and people
// damage files, and a new job restarts. Every trial is tallied; the test fails on any crash,
// hang, wrong data or loss (a restart older than what one damaged file can take away: the
// newest version when the scheme is redundant, the one before it when it is not).

/// How a trial damages a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Damage {
    FlipByte,
    Truncate,
    Empty,
    Garbage,
    Delete,
    Fifo,
}

const DAMAGES: [Damage; 6] = [
    Damage::FlipByte,
    Damage::Truncate,
    Damage::Empty,
    Damage::Garbage,
    Damage::Delete,
    Damage::Fifo,
];

fn damage(path: &Path, how: Damage, rng: &mut fastrand::Rng) -> Result<(), String> {
    let at = |e: std::io::Error| format!("{}: {e}", path.display());
    let bytes = std::fs::read(path).map_err(at)?;
    match how {
        Damage::FlipByte if !bytes.is_empty() => {
            flip(path, rng.u64(0..bytes.len() as u64))?;
        }
        Damage::Truncate if !bytes.is_empty() => {
            std::fs::write(path, &bytes[..rng.usize(0..bytes.len())]).map_err(at)?;
        }
        Damage::Garbage => {
            let mut junk = vec![0u8; bytes.len().max(64)];
            rng.fill(&mut junk);
            std::fs::write(path, junk).map_err(at)?;
        }
        Damage::Delete => std::fs::remove_file(path).map_err(at)?,
        Damage::Fifo => {
            std::fs::remove_file(path).map_err(at)?;
            let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: mkfifo(3) with a NUL-terminated path and a mode.
            if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
                return Err(at(std::io::Error::last_os_error()));
            }
        }
        _ => std::fs::write(path, b"").map_err(at)?,
    }
    Ok(())
}

/// Every regular file under a case's tiers.
fn stored_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.join("local"), dir.join("global")];
    while let Some(d) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => todo.push(e.path()),
                Ok(t) if t.is_file() => out.push(e.path()),
                _ => {}
            }
        }
    }
    out.sort();
    out
}

#[derive(Debug, Default)]
struct TrialTally {
    tried: u64,
    newest: u64,
    older: u64,
    refused: u64,
    crashed: u64,
    hung: u64,
    wrong: u64,
    lost: u64,
}

/// `CAIRN_TRIALS=N` runs N trials (300 by default), from seed `CAIRN_TRIALS_FIRST` (0).
#[test]
fn one_damaged_file_is_detected_and_never_restored_wrong() {
    let (trials, first) = (
        env_count("CAIRN_TRIALS", 300),
        env_count("CAIRN_TRIALS_FIRST", 0),
    );
    let mut tally = TrialTally::default();
    let mut by_damage: BTreeMap<Damage, u64> = BTreeMap::new();
    let mut failures = Vec::new();
    for seed in first..first + trials {
        let mut rng = fastrand::Rng::with_seed(seed);
        let scheme = SCHEMES[rng.usize(0..SCHEMES.len())];
        let (ranks, nodes) = LAYOUTS[rng.usize(0..LAYOUTS.len())];
        let flush = [Flush::Off, Flush::Sync, Flush::Async][rng.usize(0..3)];
        let Ok(c) = Case::new(scheme, ranks, nodes, flush) else {
            continue;
        };
        c.write()
            .unwrap_or_else(|e| panic!("seed {seed}: {}: {e}", c.name()));
        let files = stored_files(c.dir.path());
        let target = files[rng.usize(0..files.len())].clone();
        let how = DAMAGES[rng.usize(0..DAMAGES.len())];
        let what = format!(
            "seed {seed}: {}: {how:?} of {}",
            c.name(),
            target
                .strip_prefix(c.dir.path())
                .unwrap_or(&target)
                .display()
        );
        damage(&target, how, &mut rng).unwrap_or_else(|e| panic!("{what}: {e}"));
        tally.tried += 1;
        *by_damage.entry(how).or_default() += 1;
        let floor = if scheme == Scheme::Single {
            NEWEST - 1
        } else {
            NEWEST
        };
        match c.relaunch(None) {
            Ok(got) => match got.restored {
                Some(NEWEST) => tally.newest += 1,
                Some(v) if v >= floor => tally.older += 1,
                other => {
                    tally.lost += 1;
                    failures.push(format!(
                        "{what}: LOST: restored {other:?}, expected v{floor} or newer"
                    ));
                }
            },
            Err(e) if e.contains("WRONG DATA") => {
                tally.wrong += 1;
                failures.push(format!("{what}: {e}"));
            }
            Err(e) if e.contains("panicked") => {
                tally.crashed += 1;
                failures.push(format!("{what}: {e}"));
            }
            Err(e) if e.contains("still running after") => {
                tally.hung += 1;
                failures.push(format!("{what}: {e}"));
            }
            Err(e) => {
                // Refused with an error: a loss unless nothing could be restored anyway.
                tally.refused += 1;
                failures.push(format!("{what}: LOST: refused: {e}"));
            }
        }
    }
    eprintln!(
        "damage trials: tried {} ({by_damage:?}); restored the newest {}, an older one {} \
         (detected, fell back), refused {}; crashed {}, hung {}, wrong data {}, lost {}",
        tally.tried,
        tally.newest,
        tally.older,
        tally.refused,
        tally.crashed,
        tally.hung,
        tally.wrong,
        tally.lost
    );
    assert!(
        failures.is_empty(),
        "{} of {} trials failed:\n{}",
        failures.len(),
        tally.tried,
        failures.join("\n")
    );
}
