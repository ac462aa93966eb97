//! A read-only view of the checkpoints stored under a configuration's tiers, for the `cairn`
//! command-line tool: what is there and how complete it is ([`Inventory::list`]), what one
//! checkpoint holds ([`Inventory::inspect`]) and whether its bytes still match their checksums
//! ([`Inventory::verify`]).
//!
//! For a redundant checkpoint it also records what each node directory holds of its
//! redundancy (partner copies under `partner/`, parity objects under `parity/`, each checked)
//! and a [`Protection`] verdict: whether every lost part and redundancy object can still be
//! rebuilt (`cairn rebuild`), judged the way the engine's rebuild judges it.
//!
//! Nothing here creates or modifies anything: tiers are opened with
//! [`DirTier::open_existing`], and a missing tier root simply holds nothing. With
//! `[tiers] local = "mem"` the node-local tier is the job's shared-memory stores: each per-node
//! store found in `/dev/shm` ([`memstore::job_stores`]) is attached without creating it, and
//! its objects are shown as `/dev/shm/<store>/.cairn/<key>` (the store is one segment, so this
//! names the store and the key inside it, not a file). Every key is built
//! from a name that passed [`check_name`] and from integers parsed out of directory listings
//! (`node<i>`, `v<version>`, `rank<r>.ckpt`); nothing read from a manifest or rank file ever
//! becomes part of a path.

use crate::catalog::{self, manifest_key, parse_rank_file, rank_key, version_dir};
use crate::config::{Config, NodeLocal};
use crate::error::{Error, ErrorKind, Result};
use crate::memstore;
use crate::part;
use crate::protect::{parity_key, partner_key};
use cairn_format::{
    block_kind, check_name, checksum, node_index, CkptState, Dtype, Manifest, ParityCodec,
    ParityHeader, KIND_COUNT,
};
use cairn_redundancy::stripe;
use cairn_tier::cairn_shm::StoreOwner;
use cairn_tier::{DirTier, MemTier, Scope, Tier, ENGINE_DIR};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// How complete a stored checkpoint is, across all tiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// No tier holds a complete copy (a node directory was lost, a rank file is missing, or the
    /// checkpoint was never published): it cannot be restarted from.
    Incomplete,
    /// Complete on the node-local tier.
    Captured,
    /// Complete on the node-local tier, with its redundancy encoded.
    Protected,
    /// Complete on the global tier.
    Durable,
}

impl Status {
    pub fn is_complete(self) -> bool {
        self != Status::Incomplete
    }

    fn from_state(s: CkptState) -> Status {
        match s {
            CkptState::Writing => Status::Incomplete,
            CkptState::Captured => Status::Captured,
            CkptState::Protected => Status::Protected,
            CkptState::Durable => Status::Durable,
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Status::Incomplete => "incomplete",
            Status::Captured => "captured",
            Status::Protected => "protected",
            Status::Durable => "durable",
        })
    }
}

/// Where a copy lives: one node's directory of the node-local tier, or the global tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase", tag = "tier", content = "node")]
pub enum Place {
    Local(u32),
    Global,
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Place::Local(n) => write!(f, "local node{n}"),
            Place::Global => f.write_str("global"),
        }
    }
}

/// One tier's (or one node's) copy of a checkpoint.
#[derive(Debug, Clone, Serialize)]
pub struct CopyInfo {
    pub place: Place,
    /// The checkpoint's directory on that tier.
    pub path: PathBuf,
    /// The state its manifest records, if it has a readable one.
    pub manifest_state: Option<CkptState>,
    /// Ranks whose rank file is present in this copy.
    pub ranks: Vec<u32>,
    /// Sum of the sizes of those rank files.
    pub bytes: u64,
}

/// A partner copy found in a node directory (`partner/rank<r>.ckpt`): a byte-identical copy
/// of rank `rank`'s part, held for it by a rank of this node.
#[derive(Debug, Clone, Serialize)]
pub struct PartnerCopyInfo {
    /// The rank whose part this is a copy of.
    pub rank: u32,
    pub path: PathBuf,
    pub bytes: u64,
    /// Whether its index reads and names this checkpoint, version and rank (`list`,
    /// `inspect`); `verify` also re-checks every block.
    pub ok: bool,
    pub error: Option<String>,
}

/// One member of an xor / rs set, as a parity header records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SetMember {
    pub rank: u32,
    /// Length of its rank file when the parity was encoded.
    pub bytes: u64,
    /// The index checksum of the rank file it was encoded from (parity format 2).
    pub index_sum: Option<u64>,
}

/// The set a parity object protects, from its header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ParitySet {
    /// `xor` or `rs`.
    pub codec: String,
    pub set_id: u32,
    pub members: Vec<SetMember>,
    /// Parity shards per stripe: how many lost members the set tolerates.
    pub m: u32,
    /// Shard (segment) size in bytes.
    pub segment: u64,
    /// This holder's index among `members`.
    pub holder: u32,
}

/// A parity object found in a node directory (`parity/rank<r>.par`), checked: its header
/// decodes, belongs to rank `rank`, the object has the length the header implies, and each
/// shard matches its checksum.
#[derive(Debug, Clone, Serialize)]
pub struct ParityInfo {
    /// The rank that holds it (its set member).
    pub rank: u32,
    pub path: PathBuf,
    pub bytes: u64,
    /// The set, when the header decodes.
    pub set: Option<ParitySet>,
    pub ok: bool,
    /// Shards whose checksum does not match.
    pub damaged_shards: Vec<u32>,
    pub error: Option<String>,
}

/// What one node directory holds of a checkpoint.
#[derive(Debug, Clone, Serialize)]
pub struct NodeHoldings {
    pub node: u32,
    /// The checkpoint's directory in that node directory.
    pub path: PathBuf,
    /// Ranks whose own part (rank file) is here.
    pub parts: Vec<u32>,
    pub partner_copies: Vec<PartnerCopyInfo>,
    pub parity: Vec<ParityInfo>,
}

/// How well a checkpoint's redundancy still protects it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProtectionState {
    /// Every part and every redundancy object is present and intact.
    Protected,
    /// Parts or redundancy objects are lost or damaged; see `rebuildable`.
    Degraded,
    /// A lost part can no longer be rebuilt from what the node directories hold.
    Unrecoverable,
    /// Scheme `single`: nothing is lost, but nothing is kept twice either.
    Unprotected,
    /// No node directory holds the checkpoint (only the global tier does).
    NotLocal,
    /// No manifest records the scheme and world size.
    Unknown,
}

/// The protection verdict on one checkpoint, judged from the node-local tier the way the
/// engine's rebuild judges it: a part is lost when no node directory holds it; a partner copy
/// or parity object is lost when it is missing or fails its checks; a set can rebuild as long
/// as no stripe lost more shards than its parity count.
#[derive(Debug, Clone, Serialize)]
pub struct Protection {
    pub state: ProtectionState,
    /// Whether `cairn rebuild` can restore every lost part and redundancy object.
    pub rebuildable: bool,
    /// Node indices (of the job's `nodes`) with no directory of this checkpoint.
    pub lost_nodes: Vec<u32>,
    /// Ranks whose part no node directory holds.
    pub lost_parts: Vec<u32>,
    /// Ranks whose partner copy or parity object is missing or damaged.
    pub lost_redundancy: Vec<u32>,
    /// Ranks whose lost part cannot be rebuilt.
    pub unrecoverable: Vec<u32>,
    /// Whether something is missing or damaged in node directories that still hold the
    /// checkpoint (a part a manifest lists, a partner copy, a parity object), rather than only
    /// gone with lost nodes. `verify` counts this as damage.
    pub local_damage: bool,
    /// In words, e.g. `degraded (node 1 lost; rebuildable)`.
    pub summary: String,
}

impl Protection {
    /// A short form for tables: `protected`, `degraded (rebuildable)`, `unrecoverable`, ...
    pub fn short(&self) -> &'static str {
        match (self.state, self.rebuildable) {
            (ProtectionState::Protected, _) => "protected",
            (ProtectionState::Degraded, true) => "degraded (rebuildable)",
            (ProtectionState::Degraded, false) => "degraded (not rebuildable)",
            (ProtectionState::Unrecoverable, _) => "unrecoverable",
            (ProtectionState::Unprotected, _) => "none",
            (ProtectionState::NotLocal, _) | (ProtectionState::Unknown, _) => "-",
        }
    }

    /// Whether something is lost or damaged.
    pub fn is_impaired(&self) -> bool {
        matches!(
            self.state,
            ProtectionState::Degraded | ProtectionState::Unrecoverable
        )
    }
}

impl std::fmt::Display for Protection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.summary)
    }
}

/// What is stored of one checkpoint version.
#[derive(Debug, Clone, Serialize)]
pub struct CkptRecord {
    pub name: String,
    pub version: i64,
    /// The highest state in which some tier holds a complete copy.
    pub state: Status,
    /// Number of ranks that wrote it (from a manifest, else from a rank file's index).
    pub world_size: Option<u32>,
    /// Number of (possibly simulated) nodes the job ran on, from a manifest.
    pub nodes: Option<u32>,
    /// Tiers holding some of it, e.g. `local(2 nodes)`, `global`.
    pub tiers: Vec<String>,
    /// Ranks with a rank file on some tier.
    pub ranks: Vec<u32>,
    /// Size of one copy: for each rank present, the size of its rank file.
    pub bytes: u64,
    /// Size of every copy on every tier.
    pub stored_bytes: u64,
    /// Earliest creation time among its manifests, milliseconds since the Unix epoch.
    pub created_unix_ms: Option<u64>,
    /// Time the slowest rank spent writing its part, from the node-local manifests (else the
    /// global one), nanoseconds.
    pub capture_ns: Option<u64>,
    pub copies: Vec<CopyInfo>,
    /// The redundancy scheme its manifests record (`single`, `partner`, `xor(4)`, `rs(2+2)`).
    pub scheme: Option<String>,
    /// On the node-local tier, the version an incremental checkpoint is based on (its
    /// manifests record it; flushes store full copies on the global tier).
    pub base: Option<i64>,
    /// Size of every partner copy and parity object in the node directories.
    pub redundancy_bytes: u64,
    /// Per node directory: own parts, partner copies and parity objects.
    pub holdings: Vec<NodeHoldings>,
    pub protection: Protection,
    /// What is wrong with it, in words (unreadable manifest, missing rank files, ...).
    pub problems: Vec<String>,
}

/// One manifest, as found.
#[derive(Debug, Clone, Serialize)]
pub struct ManifestInfo {
    pub place: Place,
    pub path: PathBuf,
    pub manifest: Manifest,
}

/// One region of a rank file, as its index describes it.
#[derive(Debug, Clone, Serialize)]
pub struct RegionInfo {
    pub id: i32,
    pub dtype: Dtype,
    pub count: u64,
    /// Raw bytes.
    pub bytes: u64,
    /// Bytes stored in this file for the region.
    pub stored: u64,
    pub blocks: usize,
    /// Blocks that are all zeros (nothing stored).
    pub zero_blocks: u64,
    /// Blocks an incremental checkpoint takes from its base (nothing stored).
    pub unchanged_blocks: u64,
    /// How the stored blocks are encoded, e.g. `lz4+shuffle 12, raw 3` (`-` when none is).
    pub codecs: String,
    /// Checksum of the first block's stored bytes, 16 hex digits (none when nothing stored).
    pub first_checksum: Option<String>,
}

/// An incremental checkpoint can be restored from the node-local tier only if its base can:
/// report the ones whose base is missing or incomplete there (following whole chains, in
/// version order), and count them incomplete unless the global tier holds a full copy.
fn chain_problems(records: &mut [CkptRecord]) {
    let mut usable: BTreeSet<(String, i64)> = BTreeSet::new();
    // Records are sorted by name then version, so a base is judged before what rests on it.
    for r in records.iter_mut() {
        let local = r.copies.iter().any(|c| matches!(c.place, Place::Local(_)));
        let base_ok = r
            .base
            .map_or(true, |b| usable.contains(&(r.name.clone(), b)));
        if r.state.is_complete() && local && base_ok {
            usable.insert((r.name.clone(), r.version));
        }
        if let (Some(b), false) = (r.base, base_ok) {
            r.problems.push(format!(
                "incremental of v{b}, which is not complete on the node-local tier: the node-local copy cannot be restored"
            ));
            if r.state != Status::Durable {
                r.state = Status::Incomplete;
            }
        }
    }
}

/// How many blocks of a region each codec stored, as `lz4+shuffle 12, raw 3`.
fn codec_summary(counts: &[u64; KIND_COUNT]) -> String {
    // Zero (0) and unchanged (6) blocks have columns of their own.
    const NAMES: [&str; KIND_COUNT] = [
        "",
        "raw",
        "lz4",
        "zstd",
        "lz4+shuffle",
        "zstd+shuffle",
        "",
        "lz4+split",
        "zstd+split",
    ];
    let parts: Vec<String> = (1..KIND_COUNT)
        .filter(|k| !NAMES[*k].is_empty() && counts[*k] > 0)
        .map(|k| format!("{} {}", NAMES[k], counts[k]))
        .collect();
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

/// One rank file, as its index describes it.
#[derive(Debug, Clone, Serialize)]
pub struct RankFileInfo {
    pub rank: u32,
    pub place: Place,
    pub path: PathBuf,
    pub file_bytes: u64,
    /// Raw bytes per block.
    pub block_size: Option<u32>,
    /// Container format version.
    pub format: Option<u32>,
    /// The version an incremental part takes unchanged blocks from.
    pub base: Option<i64>,
    /// Time this rank spent writing the file, nanoseconds.
    pub write_ns: Option<u64>,
    pub regions: Vec<RegionInfo>,
    /// Why the index could not be read, if it could not.
    pub error: Option<String>,
}

/// Everything about one checkpoint version.
#[derive(Debug, Clone, Serialize)]
pub struct Inspection {
    pub record: CkptRecord,
    pub manifests: Vec<ManifestInfo>,
    /// Rank files, by rank, local copies before the global one.
    pub files: Vec<RankFileInfo>,
}

/// Which checkpoints [`Inventory::verify`] checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    All,
    Name(String),
    Version(String, i64),
}

/// What kind of file a [`FileCheck`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FileKind {
    /// A rank's own part (`rank<r>.ckpt`).
    Part,
    /// A partner copy of rank `rank`'s part (`partner/rank<r>.ckpt`).
    Partner,
    /// The parity object rank `rank` holds (`parity/rank<r>.par`).
    Parity,
}

/// The outcome of re-checking one rank file, partner copy or parity object.
#[derive(Debug, Clone, Serialize)]
pub struct FileCheck {
    pub kind: FileKind,
    /// The part's rank (for a partner copy, the rank it is a copy of; for a parity object,
    /// the rank holding it).
    pub rank: u32,
    pub place: Place,
    pub path: PathBuf,
    pub ok: bool,
    /// Bytes whose checksums matched (when ok): region bytes, or parity shard bytes.
    pub bytes: Option<u64>,
    pub error: Option<String>,
    /// The damaged region and block, when the damage is in region data.
    pub region: Option<i32>,
    pub block: Option<u64>,
    /// The first damaged shard, when the damage is in a parity shard.
    pub shard: Option<u32>,
}

/// The verdict on one checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Every stored rank file matches its checksums and some tier holds a complete copy.
    Ok,
    /// A rank file, partner copy or parity object fails its checksums or cannot be read, a
    /// manifest lists a missing rank file, a manifest is unreadable, or a node directory that
    /// holds the checkpoint lacks redundancy its scheme calls for.
    Damaged,
    /// Nothing stored is damaged, but no tier holds a complete copy.
    Incomplete,
}

/// The result of re-checking one checkpoint version.
#[derive(Debug, Clone, Serialize)]
pub struct CkptCheck {
    pub name: String,
    pub version: i64,
    pub verdict: Verdict,
    pub state: Status,
    pub files: Vec<FileCheck>,
    /// Bytes checked in total (region bytes of parts and partner copies, parity shards).
    pub bytes: u64,
    pub protection: Protection,
    pub problems: Vec<String>,
}

/// The tiers of one configuration, opened for reading.
#[derive(Debug)]
pub struct Inventory {
    local_root: Option<PathBuf>,
    /// Where the node-local tier was looked for, for messages.
    local_location: Option<String>,
    global_root: PathBuf,
    /// Node-local directories (or shared-memory stores) found, by node index.
    nodes: Vec<(u32, Opened)>,
    global: Option<Opened>,
}

/// A tier opened for reading, and the path its objects are shown under.
struct Opened {
    tier: Box<dyn Tier>,
    root: PathBuf,
}

impl Opened {
    fn dir(t: DirTier) -> Opened {
        Opened {
            root: t.root().to_path_buf(),
            tier: Box::new(t),
        }
    }

    fn root(&self) -> &Path {
        &self.root
    }
}

impl std::ops::Deref for Opened {
    type Target = dyn Tier;

    fn deref(&self) -> &(dyn Tier + 'static) {
        &*self.tier
    }
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opened").field("root", &self.root).finish()
    }
}

/// The job's per-node shared-memory stores (`[tiers] local = "mem"`), attached without
/// creating any, by node index.
fn open_stores(cfg: &Config) -> Result<Vec<(u32, Opened)>> {
    let found = memstore::job_stores().map_err(|e| {
        Error::new(
            ErrorKind::Io,
            format!("cannot list {}: {e}", memstore::SHM_DIR),
        )
    })?;
    if cfg.mem.per_process {
        if found.is_empty() {
            return Ok(Vec::new());
        }
        return Err(Error::config(
            "[tiers.mem] store = \"process\": each rank's objects are in a store of its own, \
             which does not record the node it belongs to; list, inspect and verify read \
             per-node stores only",
        ));
    }
    let mut out = Vec::new();
    for (owner, name) in found {
        let StoreOwner::Node(node) = owner else {
            continue;
        };
        let mut sc = memstore::store_config(cfg, owner);
        sc.create = false;
        sc.populate = false;
        match MemTier::open("local", &sc) {
            Ok(t) => out.push((
                node,
                Opened {
                    tier: Box::new(t),
                    root: Path::new(memstore::SHM_DIR)
                        .join(name.trim_start_matches('/'))
                        .join(ENGINE_DIR),
                },
            )),
            // Wiped since it was listed.
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(out)
}

/// Everything found of one version on one tier.
struct Found {
    place: Place,
    dir: PathBuf,
    manifest: Option<Manifest>,
    manifest_error: Option<String>,
    /// rank -> file size
    files: BTreeMap<u32, u64>,
    /// rank -> the index checksum of its rank file here, when its trailer reads.
    sums: BTreeMap<u32, u64>,
    /// Partner copies and parity objects held here (node-local tiers only).
    partner: Vec<PartnerCopyInfo>,
    parity: Vec<ParityInfo>,
    problems: Vec<String>,
}

/// The manifest a restart publishes for a flushed version whose job died before it could:
/// present when every rank's commit record is on the global tier (see `catalog`).
fn committed_manifest(tier: &dyn Tier, name: &str, v: i64) -> Option<Manifest> {
    let first = catalog::read_commit(tier, name, v, 0).ok().flatten()?;
    let world = first.world_size;
    if world == 0 || world as usize > MAX_LISTED_RANKS {
        return None;
    }
    for r in 1..world as usize {
        let c = catalog::read_commit(tier, name, v, r).ok().flatten()?;
        if c.world_size != world {
            return None;
        }
    }
    Some(Manifest {
        ranks: (0..world).collect(),
        ..first
    })
}

/// Commit records read for one version at most (one file each).
const MAX_LISTED_RANKS: usize = 1 << 20;

/// Check a name given by the user.
fn valid_name(name: &str) -> Result<()> {
    check_name(name).map_err(|e| Error::new(ErrorKind::InvalidArgument, e.to_string()))
}

/// Open a tier root if it exists; `Ok(None)` if it does not.
fn open_root(label: &str, root: &Path, scope: Scope) -> Result<Option<DirTier>> {
    match DirTier::open_existing(label, root, scope) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// `0-3, 6, 9-10` for a sorted set of integers.
fn ranges(xs: impl IntoIterator<Item = u32>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut run: Option<(u32, u32)> = None;
    let flush = |out: &mut Vec<String>, (a, b): (u32, u32)| {
        out.push(if a == b {
            a.to_string()
        } else {
            format!("{a}-{b}")
        })
    };
    for x in xs {
        run = match run {
            Some((a, b)) if b.checked_add(1) == Some(x) => Some((a, x)),
            Some(r) => {
                flush(&mut out, r);
                Some((x, x))
            }
            None => Some((x, x)),
        };
    }
    if let Some(r) = run {
        flush(&mut out, r);
    }
    out.join(", ")
}

/// The ranks of `0..world` missing from `have`, as ranges, without walking `0..world` (a
/// manifest's world size is not trusted to be small).
fn missing_ranges(world: u32, have: &BTreeSet<u32>) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    let mut next = 0u32;
    for &r in have.range(..world) {
        if r > next {
            out.push((next, r - 1));
        }
        next = r + 1;
    }
    if next < world {
        out.push((next, world - 1));
    }
    out
}

fn show_ranges(rs: &[(u32, u32)]) -> String {
    rs.iter()
        .map(|(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn count_ranges(rs: &[(u32, u32)]) -> u64 {
    rs.iter().map(|(a, b)| (*b - *a) as u64 + 1).sum()
}

/// Pick the region and block out of `part::verify`'s message for damaged region data
/// (`block <i> of region <id> fails its checksum`).
fn damaged_block(msg: &str) -> Option<(i32, u64)> {
    let rest = msg.strip_prefix("block ")?;
    let (chunk, rest) = rest.split_once(" of region ")?;
    let (region, _) = rest.split_once(' ')?;
    Some((region.parse().ok()?, chunk.parse().ok()?))
}

/// Parse `rank<r>.par` strictly, as [`parse_rank_file`] does `rank<r>.ckpt`.
fn parse_parity_file(file: &str) -> Option<u32> {
    let stem = file.strip_suffix(".par")?;
    parse_rank_file(&format!("{stem}.ckpt")).and_then(|r| u32::try_from(r).ok())
}

/// At most this many ranks or nodes are spelled out in a [`Protection`] (a manifest's world
/// size is not trusted to be small).
const MAX_LISTED: u64 = 1 << 16;

/// The integers of some ranges, at most [`MAX_LISTED`] of them.
fn expand(rs: &[(u32, u32)]) -> Vec<u32> {
    rs.iter()
        .flat_map(|(a, b)| *a..=*b)
        .take(MAX_LISTED as usize)
        .collect()
}

/// `rank 3` or `ranks 2-3, 5`.
fn ranks_phrase(rs: &BTreeSet<u32>) -> String {
    format!(
        "rank{} {}",
        if rs.len() == 1 { "" } else { "s" },
        ranges(rs.iter().copied())
    )
}

/// Check a partner copy's index: it must read and name `name` v`v` of rank `r`.
fn check_partner_index(
    tier: &dyn Tier,
    name: &str,
    v: i64,
    r: u32,
    world: Option<usize>,
) -> Result<()> {
    let rd = tier.open(&partner_key(name, v, r as usize))?;
    let ix = part::read_index(&*rd)?;
    part::index_is(&ix, (name, v), r as usize, world)
}

/// Read and check the parity object rank `r` holds of `name` v`v`, through the tier, one
/// shard at a time.
fn check_parity(
    tier: &dyn Tier,
    place_path: PathBuf,
    (key, name, v): (&str, &str, i64),
    r: u32,
) -> ParityInfo {
    let mut info = ParityInfo {
        rank: r,
        path: place_path,
        bytes: 0,
        set: None,
        ok: false,
        damaged_shards: Vec::new(),
        error: None,
    };
    let res = (|| -> Result<()> {
        let rd = tier.open(key)?;
        let len = rd.len();
        info.bytes = len;
        if len < 16 {
            return Err(Error::new(
                ErrorKind::Corrupt,
                format!("file of {len} bytes is too short"),
            ));
        }
        let mut lead = [0u8; 16];
        rd.read_exact_at(&mut lead, 0)?;
        let h = u32::from_le_bytes(lead[12..16].try_into().expect("4 bytes")) as u64;
        // A header length the format cannot have is left to `decode` to name.
        let want = if (52..=ParityHeader::MAX_LEN as u64).contains(&h) && h <= len {
            h
        } else {
            len.min(52)
        };
        let mut hb = vec![0u8; want as usize];
        rd.read_exact_at(&mut hb, 0)?;
        let hd = ParityHeader::decode(&hb)
            .map_err(|e| Error::new(ErrorKind::Corrupt, format!("parity header: {e}")))?;
        info.set = Some(ParitySet {
            codec: match hd.codec {
                ParityCodec::Xor => "xor",
                ParityCodec::ReedSolomon => "rs",
            }
            .to_string(),
            set_id: hd.set_id,
            members: hd
                .members
                .iter()
                .enumerate()
                .map(|(i, (rank, bytes))| SetMember {
                    rank: *rank,
                    bytes: *bytes,
                    index_sum: hd.bound.as_ref().map(|b| b.index_sums[i]),
                })
                .collect(),
            m: hd.m,
            segment: hd.segment,
            holder: hd.holder,
        });
        let holder = hd.members[hd.holder as usize].0;
        if holder != r {
            return Err(Error::new(
                ErrorKind::Corrupt,
                format!("holds the parity of rank {holder}, not of rank {r}"),
            ));
        }
        hd.protects(name, v, |_| None)
            .map_err(|e| Error::new(ErrorKind::Corrupt, e))?;
        let start = hd.encoded_len() as u64;
        let expected = hd
            .segment
            .checked_mul(hd.m as u64)
            .and_then(|x| x.checked_add(start));
        if expected != Some(len) {
            return Err(Error::new(
                ErrorKind::Corrupt,
                format!(
                    "object is {len} bytes but its header describes {} shard(s) of {} bytes",
                    hd.m, hd.segment
                ),
            ));
        }
        let s = usize::try_from(hd.segment)
            .map_err(|_| Error::new(ErrorKind::Corrupt, "shard size does not fit in memory"))?;
        let mut buf = vec![0u8; s];
        for (j, want) in hd.shard_sums.iter().enumerate() {
            rd.read_exact_at(&mut buf, start + j as u64 * hd.segment)?;
            if checksum(&buf) != *want {
                info.damaged_shards.push(j as u32);
            }
        }
        match info.damaged_shards.as_slice() {
            [] => Ok(()),
            [j] => Err(Error::new(
                ErrorKind::Corrupt,
                format!("shard {j} fails its checksum"),
            )),
            js => Err(Error::new(
                ErrorKind::Corrupt,
                format!("shards {} fail their checksums", ranges(js.iter().copied())),
            )),
        }
    })();
    match res {
        Ok(()) => info.ok = true,
        Err(e) => info.error = Some(e.msg),
    }
    info
}

/// Mark as damaged every intact parity object encoded from other rank files than the node
/// directories hold (the index checksums it records differ): rebuilding from it would make
/// garbage, so the engine does not use it either.
fn bind_parity(copies: &mut [Found]) {
    let mut sums: BTreeMap<u32, u64> = BTreeMap::new();
    for c in copies.iter().filter(|c| matches!(c.place, Place::Local(_))) {
        sums.extend(c.sums.iter().map(|(r, s)| (*r, *s)));
    }
    for x in copies.iter_mut().flat_map(|c| c.parity.iter_mut()) {
        let Some(set) = x.set.as_ref().filter(|_| x.ok) else {
            continue;
        };
        let other = set.members.iter().find_map(|m| {
            let (want, have) = (m.index_sum?, *sums.get(&m.rank)?);
            (want != have).then_some((m.rank, want, have))
        });
        if let Some((rank, want, have)) = other {
            x.ok = false;
            x.error = Some(format!(
                "was encoded from another rank file of rank {rank} (index checksum {want:016x}, \
                 the rank file has {have:016x})"
            ));
        }
    }
}

/// The ranks of a set of parity headers' members, as a phrase: `ranks 0, 2`.
fn members_phrase(set: &ParitySet) -> String {
    let rs: Vec<String> = set.members.iter().map(|m| m.rank.to_string()).collect();
    format!("ranks {}", rs.join(", "))
}

/// The protection verdict on one checkpoint from what its node directories hold (see
/// [`Protection`]). Mirrors the engine's rebuild: a part counts as present when some node
/// directory holds it; sets are those recorded by the intact parity objects.
fn judge(
    scheme: Option<&str>,
    world: Option<u32>,
    nodes: Option<u32>,
    copies: &[Found],
    global_complete: bool,
) -> Protection {
    let mut p = Protection {
        state: ProtectionState::Unknown,
        rebuildable: false,
        lost_nodes: Vec::new(),
        lost_parts: Vec::new(),
        lost_redundancy: Vec::new(),
        unrecoverable: Vec::new(),
        local_damage: false,
        summary: String::new(),
    };
    let local: Vec<&Found> = copies
        .iter()
        .filter(|c| matches!(c.place, Place::Local(_)))
        .collect();
    if local.is_empty() {
        p.state = ProtectionState::NotLocal;
        p.summary = "none on the node-local tier (only the global tier holds it)".into();
        return p;
    }
    let (Some(scheme), Some(world)) = (scheme, world) else {
        p.summary = "unknown (no manifest records its scheme)".into();
        return p;
    };
    let present_nodes: BTreeSet<u32> = local
        .iter()
        .filter_map(|c| match c.place {
            Place::Local(n) => Some(n),
            Place::Global => None,
        })
        .collect();
    let lost_nodes = nodes
        .map(|n| missing_ranges(n, &present_nodes))
        .unwrap_or_default();
    p.lost_nodes = expand(&lost_nodes);
    let parts: BTreeSet<u32> = local
        .iter()
        .flat_map(|c| c.files.keys().copied())
        .filter(|r| *r < world)
        .collect();
    let lost_parts: BTreeSet<u32> = expand(&missing_ranges(world, &parts)).into_iter().collect();
    // Ranks a surviving node manifest lists: what is missing of them is not explained by a
    // lost node.
    let listed: BTreeSet<u32> = local
        .iter()
        .filter_map(|c| c.manifest.as_ref())
        .flat_map(|m| m.ranks.iter().copied())
        .collect();

    let mut issues: Vec<String> = Vec::new();
    if !lost_nodes.is_empty() {
        issues.push(format!(
            "node{} {} lost",
            if count_ranges(&lost_nodes) == 1 {
                ""
            } else {
                "s"
            },
            show_ranges(&lost_nodes)
        ));
    }
    let missing_listed: BTreeSet<u32> = lost_parts.intersection(&listed).copied().collect();
    let mut local_damage = !missing_listed.is_empty();
    if !missing_listed.is_empty() {
        issues.push(format!(
            "part{} of {} missing",
            if missing_listed.len() == 1 { "" } else { "s" },
            ranks_phrase(&missing_listed)
        ));
    }
    // Why lost parts cannot be rebuilt, and why lost redundancy cannot be re-made.
    let mut fatal: Vec<String> = Vec::new();
    let mut unrecoverable: BTreeSet<u32> = BTreeSet::new();
    let mut blocked: Vec<String> = Vec::new();
    let kind = scheme.split('(').next().unwrap_or(scheme);
    match kind {
        "partner" => {
            let good: BTreeSet<u32> = local
                .iter()
                .flat_map(|c| &c.partner)
                .filter(|x| x.ok && x.rank < world)
                .map(|x| x.rank)
                .collect();
            let damaged: BTreeSet<u32> = local
                .iter()
                .flat_map(|c| &c.partner)
                .filter(|x| !x.ok && !good.contains(&x.rank))
                .map(|x| x.rank)
                .collect();
            let no_copy: BTreeSet<u32> =
                expand(&missing_ranges(world, &good)).into_iter().collect();
            p.lost_redundancy = no_copy.iter().copied().collect();
            if lost_nodes.is_empty() {
                let missing: BTreeSet<u32> = no_copy.difference(&damaged).copied().collect();
                if !missing.is_empty() {
                    local_damage = true;
                    issues.push(format!(
                        "partner copy of {} missing",
                        ranks_phrase(&missing)
                    ));
                }
            }
            if !damaged.is_empty() {
                local_damage = true;
                issues.push(format!(
                    "partner copy of {} damaged",
                    ranks_phrase(&damaged)
                ));
            }
            unrecoverable = lost_parts.intersection(&no_copy).copied().collect();
            if !unrecoverable.is_empty() {
                fatal.push(format!(
                    "{} lost with {}",
                    ranks_phrase(&unrecoverable),
                    if unrecoverable.len() == 1 {
                        "its copy"
                    } else {
                        "their copies"
                    }
                ));
            }
        }
        "xor" | "rs" => {
            let mut good: BTreeMap<u32, &ParitySet> = BTreeMap::new();
            for x in local.iter().flat_map(|c| &c.parity) {
                if let (true, Some(set)) = (x.ok && x.rank < world, &x.set) {
                    good.insert(x.rank, set);
                }
            }
            let damaged: BTreeSet<u32> = local
                .iter()
                .flat_map(|c| &c.parity)
                .filter(|x| !x.ok && !good.contains_key(&x.rank))
                .map(|x| x.rank)
                .collect();
            let have: BTreeSet<u32> = good.keys().copied().collect();
            let no_parity: BTreeSet<u32> =
                expand(&missing_ranges(world, &have)).into_iter().collect();
            p.lost_redundancy = no_parity.iter().copied().collect();
            let missing: BTreeSet<u32> = no_parity
                .iter()
                .filter(|r| listed.contains(r) && !damaged.contains(r))
                .copied()
                .collect();
            if !missing.is_empty() {
                local_damage = true;
                issues.push(format!("parity of {} missing", ranks_phrase(&missing)));
            }
            if !damaged.is_empty() {
                local_damage = true;
                issues.push(format!("parity of {} damaged", ranks_phrase(&damaged)));
            }
            // The sets, as the intact parity objects record them.
            let mut sets: BTreeMap<Vec<u32>, &ParitySet> = BTreeMap::new();
            for set in good.values() {
                sets.entry(set.members.iter().map(|m| m.rank).collect())
                    .or_insert(set);
            }
            let set_of = |r: u32| {
                sets.iter()
                    .find(|(members, _)| members.contains(&r))
                    .map(|(_, s)| *s)
            };
            let holds_parity =
                |r: u32, set: &ParitySet| good.get(&r).is_some_and(|g| g.members == set.members);
            let needy: BTreeSet<u32> = lost_parts.union(&no_parity).copied().collect();
            let mut orphans: BTreeSet<u32> = BTreeSet::new();
            let mut checked: BTreeSet<Vec<u32>> = BTreeSet::new();
            for &r in &needy {
                let Some(set) = set_of(r) else {
                    orphans.insert(r);
                    continue;
                };
                let members: Vec<u32> = set.members.iter().map(|m| m.rank).collect();
                if !checked.insert(members.clone()) {
                    continue;
                }
                let (n, m) = (members.len(), set.m as usize);
                let worst = (0..n)
                    .map(|t| {
                        (0..n - m)
                            .filter(|i| !parts.contains(&members[stripe::data_member(n, m, t, *i)]))
                            .count()
                            + (0..m)
                                .filter(|j| {
                                    !holds_parity(members[stripe::parity_holder(n, t, *j)], set)
                                })
                                .count()
                    })
                    .max()
                    .unwrap_or(0);
                if worst > m {
                    let lost_here: BTreeSet<u32> = members
                        .iter()
                        .filter(|r| lost_parts.contains(r))
                        .copied()
                        .collect();
                    let why = format!(
                        "the set of {} lost {worst} shards of a stripe and {} tolerates {m}",
                        members_phrase(set),
                        scheme
                    );
                    if lost_here.is_empty() {
                        blocked.push(why);
                    } else {
                        fatal.push(format!("{} lost: {why}", ranks_phrase(&lost_here)));
                        unrecoverable.extend(lost_here);
                    }
                }
            }
            let lost_orphans: BTreeSet<u32> = orphans.intersection(&lost_parts).copied().collect();
            if !lost_orphans.is_empty() {
                fatal.push(format!(
                    "{} lost and no intact parity of {} set survives",
                    ranks_phrase(&lost_orphans),
                    if lost_orphans.len() == 1 {
                        "its"
                    } else {
                        "their"
                    }
                ));
                unrecoverable.extend(lost_orphans);
            }
            let bare: BTreeSet<u32> = orphans.difference(&lost_parts).copied().collect();
            if !bare.is_empty() {
                blocked.push(format!(
                    "no intact parity of the set of {} survives to re-encode from",
                    ranks_phrase(&bare)
                ));
            }
        }
        // Nothing to judge: what a lost node took is gone, which `state` already says.
        _ => {
            p.lost_parts = lost_parts.into_iter().collect();
            p.state = ProtectionState::Unprotected;
            p.summary = format!("none (scheme {scheme} keeps no copies)");
            return p;
        }
    }
    p.lost_parts = lost_parts.iter().copied().collect();
    p.unrecoverable = unrecoverable.into_iter().collect();
    p.local_damage = local_damage;
    if lost_parts.is_empty() && p.lost_redundancy.is_empty() && issues.is_empty() {
        p.state = ProtectionState::Protected;
        p.rebuildable = true;
        p.summary = "protected".into();
        return p;
    }
    if issues.is_empty() {
        let mut all = lost_parts.clone();
        all.extend(p.lost_redundancy.iter().copied());
        issues.push(format!("{} incomplete", ranks_phrase(&all)));
    }
    if !p.unrecoverable.is_empty() {
        p.state = ProtectionState::Unrecoverable;
        if global_complete {
            fatal.push("the global tier still holds a complete copy".into());
        }
        p.summary = format!("unrecoverable ({})", fatal.join("; "));
    } else {
        p.state = ProtectionState::Degraded;
        p.rebuildable = blocked.is_empty();
        p.summary = if p.rebuildable {
            format!("degraded ({}; rebuildable)", issues.join("; "))
        } else {
            format!(
                "degraded ({}; not rebuildable: {})",
                issues.join("; "),
                blocked.join("; ")
            )
        };
    }
    p
}

impl Inventory {
    /// Open the tiers `cfg` names, for reading only. Missing roots hold nothing.
    pub fn open(cfg: &Config) -> Result<Inventory> {
        let global = open_root("global", &cfg.global, Scope::Global)?.map(Opened::dir);
        let mut nodes = Vec::new();
        let mut local_location = None;
        match cfg.node_local() {
            NodeLocal::Dir(local) => {
                local_location = Some(local.display().to_string());
                if let Some(root) = open_root("local", local, Scope::NodeLocal)? {
                    let mut found: Vec<u32> = root
                        .list("")?
                        .iter()
                        .filter_map(|n| node_index(n))
                        .collect();
                    found.sort_unstable();
                    for i in found {
                        let dir = local.join(format!("node{i}"));
                        if let Some(t) = open_root("local", &dir, Scope::NodeLocal)? {
                            nodes.push((i, Opened::dir(t)));
                        }
                    }
                }
            }
            NodeLocal::Mem => {
                local_location = Some(memstore::job_pattern());
                nodes = open_stores(cfg)?;
            }
            NodeLocal::None => {}
        }
        Ok(Inventory {
            local_root: cfg.local.clone(),
            local_location,
            global_root: cfg.global.clone(),
            nodes,
            global,
        })
    }

    /// The configured node-local root (`None` when the local tier is off or in memory).
    pub fn local_root(&self) -> Option<&Path> {
        self.local_root.as_deref()
    }

    /// Where the node-local tier was looked for: its root directory, or the pattern of the
    /// job's shared-memory stores (`None` when the local tier is off).
    pub fn local_location(&self) -> Option<&str> {
        self.local_location.as_deref()
    }

    pub fn global_root(&self) -> &Path {
        &self.global_root
    }

    /// Node indices with a directory under the local root (or a shared-memory store).
    pub fn node_dirs(&self) -> Vec<u32> {
        self.nodes.iter().map(|(i, _)| *i).collect()
    }

    fn tiers(&self) -> Vec<(Place, &Opened)> {
        self.nodes
            .iter()
            .map(|(i, t)| (Place::Local(*i), t))
            .chain(self.global.iter().map(|t| (Place::Global, t)))
            .collect()
    }

    fn tier(&self, place: Place) -> Option<&Opened> {
        match place {
            Place::Local(n) => self.nodes.iter().find(|(i, _)| *i == n).map(|(_, t)| t),
            Place::Global => self.global.as_ref(),
        }
    }

    /// What each tier holds of the selected checkpoints, by (name, version).
    fn scan(&self, sel: &Selection) -> Result<BTreeMap<(String, i64), Vec<Found>>> {
        let mut out: BTreeMap<(String, i64), Vec<Found>> = BTreeMap::new();
        for (place, tier) in self.tiers() {
            let names = match sel {
                Selection::All => catalog::names(&**tier)?,
                Selection::Name(n) | Selection::Version(n, _) => vec![n.clone()],
            };
            for name in names {
                for v in catalog::versions(&**tier, &name)? {
                    if matches!(sel, Selection::Version(_, want) if *want != v) {
                        continue;
                    }
                    let found = self.scan_version(place, tier, &name, v)?;
                    out.entry((name.clone(), v)).or_default().push(found);
                }
            }
        }
        for copies in out.values_mut() {
            bind_parity(copies);
        }
        Ok(out)
    }

    fn scan_version(&self, place: Place, tier: &Opened, name: &str, v: i64) -> Result<Found> {
        let dir = tier.root().join(version_dir(name, v));
        let (manifest, manifest_error) = match catalog::read_manifest(&**tier, name, v) {
            Ok(None) if place == Place::Global => (committed_manifest(&**tier, name, v), None),
            Ok(m) => (m, None),
            Err(e) => (None, Some(e.msg)),
        };
        let mut files = BTreeMap::new();
        let mut sums = BTreeMap::new();
        let mut problems = Vec::new();
        for entry in tier.list(&version_dir(name, v))? {
            let Some(r) = parse_rank_file(&entry) else {
                continue;
            };
            let Ok(r) = u32::try_from(r) else { continue };
            match tier.open(&rank_key(name, v, r as usize)) {
                Ok(f) => {
                    files.insert(r, f.len());
                    if let Ok(sum) = part::index_sum(&*f) {
                        sums.insert(r, sum);
                    }
                }
                Err(e) => problems.push(format!("{place}: rank {r}: {e}")),
            }
        }
        let mut partner = Vec::new();
        let mut parity = Vec::new();
        if let Place::Local(_) = place {
            let vdir = version_dir(name, v);
            for entry in tier.list(&format!("{vdir}/partner"))? {
                let Some(r) = parse_rank_file(&entry).and_then(|r| u32::try_from(r).ok()) else {
                    continue;
                };
                let key = partner_key(name, v, r as usize);
                let bytes = tier.open(&key).map(|f| f.len()).unwrap_or(0);
                let world = manifest.as_ref().map(|m| m.world_size as usize);
                let checked = check_partner_index(&**tier, name, v, r, world);
                partner.push(PartnerCopyInfo {
                    rank: r,
                    path: tier.root().join(&key),
                    bytes,
                    ok: checked.is_ok(),
                    error: checked.err().map(|e| e.msg),
                });
            }
            for entry in tier.list(&format!("{vdir}/parity"))? {
                let Some(r) = parse_parity_file(&entry) else {
                    continue;
                };
                let key = parity_key(name, v, r as usize);
                parity.push(check_parity(
                    &**tier,
                    tier.root().join(&key),
                    (&key, name, v),
                    r,
                ));
            }
        }
        Ok(Found {
            place,
            dir,
            manifest,
            manifest_error,
            files,
            sums,
            partner,
            parity,
            problems,
        })
    }

    fn record(&self, name: &str, version: i64, copies: &[Found]) -> CkptRecord {
        let mut problems: Vec<String> = Vec::new();
        for c in copies {
            problems.extend(c.problems.iter().cloned());
            if let Some(e) = &c.manifest_error {
                problems.push(format!("{}: unreadable manifest: {e}", c.place));
            }
        }
        // The world size: the global manifest's, else the first node manifest's, else the one
        // recorded in a rank file's index.
        let manifests: Vec<(Place, &Manifest)> = {
            let mut m: Vec<(Place, &Manifest)> = copies
                .iter()
                .filter_map(|c| c.manifest.as_ref().map(|m| (c.place, m)))
                .collect();
            m.sort_by_key(|(p, _)| *p != Place::Global);
            m
        };
        let mut world = manifests.first().map(|(_, m)| m.world_size);
        for (p, m) in &manifests {
            if Some(m.world_size) != world {
                problems.push(format!(
                    "{p}: manifest says {} ranks, another says {}",
                    m.world_size,
                    world.unwrap_or(0)
                ));
            }
        }
        if world.is_none() {
            world = copies.iter().find_map(|c| {
                let (&r, _) = c.files.iter().next()?;
                let tier = self.tier(c.place)?;
                let reader = tier.open(&rank_key(name, version, r as usize)).ok()?;
                part::read_index(&*reader).ok().map(|ix| ix.world_size)
            });
        }
        let nodes = manifests.first().map(|(_, m)| m.nodes);
        let scheme = manifests.first().map(|(_, m)| m.scheme.clone());
        let base = copies
            .iter()
            .filter(|c| matches!(c.place, Place::Local(_)))
            .find_map(|c| c.manifest.as_ref().and_then(|m| m.base));
        for (p, m) in &manifests {
            if Some(&m.scheme) != scheme.as_ref() {
                problems.push(format!(
                    "{p}: manifest says scheme {}, another says {}",
                    m.scheme,
                    scheme.as_deref().unwrap_or("")
                ));
            }
        }

        // Coverage: which ranks each tier holds a published, present copy of.
        let mut global_state = None;
        let mut local_cover: BTreeSet<u32> = BTreeSet::new();
        let mut local_state: Option<CkptState> = None;
        for c in copies {
            let Some(m) = &c.manifest else { continue };
            let mut listed_missing = Vec::new();
            let mut cover = BTreeSet::new();
            for &r in &m.ranks {
                if c.files.contains_key(&r) {
                    cover.insert(r);
                } else {
                    listed_missing.push(r);
                }
            }
            if !listed_missing.is_empty() {
                problems.push(format!(
                    "{}: rank file(s) of rank {} listed in the manifest are missing",
                    c.place,
                    ranges(listed_missing)
                ));
            }
            match c.place {
                Place::Global => {
                    if missing_ranges(m.world_size, &cover).is_empty()
                        && Some(m.world_size) == world
                    {
                        global_state = Some(m.state);
                    }
                }
                Place::Local(n) => {
                    if m.node != Some(n) {
                        problems.push(format!(
                            "{}: manifest belongs to node {}",
                            c.place,
                            m.node.map_or("(none)".to_string(), |x| x.to_string())
                        ));
                        continue;
                    }
                    if Some(m.world_size) != world {
                        continue;
                    }
                    local_cover.extend(cover);
                    local_state = Some(local_state.map_or(m.state, |s| s.min(m.state)));
                }
            }
        }
        let local_missing = world.map(|w| missing_ranges(w, &local_cover));
        let state = match (global_state, &local_missing, local_state) {
            (Some(s), _, _) => Status::from_state(s),
            (None, Some(miss), Some(s)) if miss.is_empty() => Status::from_state(s),
            _ => Status::Incomplete,
        };

        let mut ranks: BTreeSet<u32> = BTreeSet::new();
        let mut bytes = 0u64;
        let mut stored_bytes = 0u64;
        for c in copies {
            for (&r, &len) in &c.files {
                if ranks.insert(r) {
                    bytes += len;
                }
                stored_bytes += len;
            }
        }
        if let Some(w) = world {
            let beyond: Vec<u32> = ranks.range(w..).copied().collect();
            if !beyond.is_empty() {
                problems.push(format!(
                    "rank file(s) of rank {} do not fit a world of {w}",
                    ranges(beyond)
                ));
            }
        }

        if !state.is_complete() {
            if manifests.is_empty() && copies.iter().all(|c| c.manifest_error.is_none()) {
                problems.push(
                    "no manifest on any tier: never completed (or being written or deleted)".into(),
                );
            } else if let Some(w) = world {
                // Name the ranks no tier has a published copy of.
                let mut cover = local_cover.clone();
                for c in copies.iter().filter(|c| c.place == Place::Global) {
                    if let Some(m) = &c.manifest {
                        cover.extend(m.ranks.iter().filter(|r| c.files.contains_key(r)));
                    }
                }
                let miss = missing_ranges(w, &cover);
                if !miss.is_empty() {
                    let local_nodes = copies
                        .iter()
                        .filter(|c| matches!(c.place, Place::Local(_)))
                        .count();
                    let hint = match nodes {
                        Some(n) if (local_nodes as u32) < n && global_state.is_none() => {
                            format!(" (only {local_nodes} of {n} node directories hold it)")
                        }
                        _ => String::new(),
                    };
                    problems.push(format!(
                        "{} of {w} ranks ({}) have no complete copy on any tier{hint}",
                        count_ranges(&miss),
                        show_ranges(&miss)
                    ));
                }
            }
        }

        let local_nodes = copies
            .iter()
            .filter(|c| matches!(c.place, Place::Local(_)))
            .count();
        let mut tiers = Vec::new();
        if local_nodes > 0 {
            tiers.push(format!(
                "local({local_nodes} node{})",
                if local_nodes == 1 { "" } else { "s" }
            ));
        }
        if copies.iter().any(|c| c.place == Place::Global) {
            tiers.push("global".to_string());
        }
        let protection = judge(
            scheme.as_deref(),
            world,
            nodes,
            copies,
            global_state.is_some(),
        );
        let holdings: Vec<NodeHoldings> = copies
            .iter()
            .filter_map(|c| match c.place {
                Place::Local(node) => Some(NodeHoldings {
                    node,
                    path: c.dir.clone(),
                    parts: c.files.keys().copied().collect(),
                    partner_copies: c.partner.clone(),
                    parity: c.parity.clone(),
                }),
                Place::Global => None,
            })
            .collect();
        let redundancy_bytes = holdings
            .iter()
            .map(|h| {
                h.partner_copies.iter().map(|p| p.bytes).sum::<u64>()
                    + h.parity.iter().map(|p| p.bytes).sum::<u64>()
            })
            .sum();
        let created_unix_ms = manifests.iter().map(|(_, m)| m.created_unix_ms).min();
        let capture_ns = manifests
            .iter()
            .filter(|(p, _)| *p != Place::Global)
            .map(|(_, m)| m.capture_ns)
            .max()
            .or_else(|| manifests.first().map(|(_, m)| m.capture_ns));
        CkptRecord {
            name: name.to_string(),
            version,
            state,
            world_size: world,
            nodes,
            tiers,
            ranks: ranks.into_iter().collect(),
            bytes,
            stored_bytes,
            created_unix_ms,
            capture_ns,
            copies: copies
                .iter()
                .map(|c| CopyInfo {
                    place: c.place,
                    path: c.dir.clone(),
                    manifest_state: c.manifest.as_ref().map(|m| m.state),
                    ranks: c.files.keys().copied().collect(),
                    bytes: c.files.values().sum(),
                })
                .collect(),
            scheme,
            base,
            redundancy_bytes,
            holdings,
            protection,
            problems,
        }
    }

    /// Every stored checkpoint (of `name`, if given), sorted by name then version.
    pub fn list(&self, name: Option<&str>) -> Result<Vec<CkptRecord>> {
        let sel = match name {
            Some(n) => {
                valid_name(n)?;
                Selection::Name(n.to_string())
            }
            None => Selection::All,
        };
        let mut records: Vec<CkptRecord> = self
            .scan(&sel)?
            .iter()
            .map(|((n, v), copies)| self.record(n, *v, copies))
            .collect();
        chain_problems(&mut records);
        Ok(records)
    }

    fn not_found(&self, what: &str) -> Error {
        let local = match &self.local_location {
            Some(l) => format!("{l} and "),
            None => String::new(),
        };
        Error::new(
            ErrorKind::NotFound,
            format!(
                "no checkpoint {what} under {local}{}",
                self.global_root.display()
            ),
        )
    }

    /// Everything about checkpoint `version` of `name`: its record, manifests, and every rank
    /// file's index.
    pub fn inspect(&self, name: &str, version: i64) -> Result<Inspection> {
        valid_name(name)?;
        let scanned = self.scan(&Selection::Version(name.to_string(), version))?;
        let Some(copies) = scanned.get(&(name.to_string(), version)) else {
            return Err(self.not_found(&format!("{name} v{version}")));
        };
        let record = self.record(name, version, copies);
        let mut manifests = Vec::new();
        let mut files = Vec::new();
        for c in copies {
            let Some(tier) = self.tier(c.place) else {
                continue;
            };
            if let Some(m) = &c.manifest {
                manifests.push(ManifestInfo {
                    place: c.place,
                    path: tier.root().join(manifest_key(name, version)),
                    manifest: m.clone(),
                });
            }
            for (&r, &len) in &c.files {
                let key = rank_key(name, version, r as usize);
                let mut info = RankFileInfo {
                    rank: r,
                    place: c.place,
                    path: tier.root().join(&key),
                    file_bytes: len,
                    block_size: None,
                    format: None,
                    base: None,
                    write_ns: None,
                    regions: Vec::new(),
                    error: None,
                };
                match tier
                    .open(&key)
                    .map_err(Error::from)
                    .and_then(|rd| part::read_index(&*rd))
                {
                    Ok(ix) => {
                        info.block_size = Some(ix.block_size);
                        info.format = Some(ix.format);
                        info.base = ix.base;
                        info.write_ns = Some(ix.write_ns);
                        info.regions = ix
                            .regions
                            .iter()
                            .map(|e| {
                                let counts = e.kind_counts();
                                RegionInfo {
                                    id: e.id,
                                    dtype: e.dtype,
                                    count: e.count,
                                    bytes: e.nbytes,
                                    stored: e.stored_bytes(),
                                    blocks: e.blocks.len(),
                                    zero_blocks: counts[block_kind::ZERO as usize],
                                    unchanged_blocks: counts[block_kind::UNCHANGED as usize],
                                    codecs: codec_summary(&counts),
                                    first_checksum: e
                                        .stored_blocks()
                                        .next()
                                        .map(|b| format!("{:016x}", b.sum)),
                                }
                            })
                            .collect();
                    }
                    Err(e) => info.error = Some(e.msg),
                }
                files.push(info);
            }
        }
        files.sort_by_key(|f| (f.rank, f.place));
        Ok(Inspection {
            record,
            manifests,
            files,
        })
    }

    /// Re-check every checksum of every rank file of the selected checkpoints, reading each
    /// through its tier with [`part::read_index`] and [`part::verify`]. Naming a checkpoint
    /// that is not stored is an error.
    pub fn verify(&self, sel: &Selection) -> Result<Vec<CkptCheck>> {
        match sel {
            Selection::All => {}
            Selection::Name(n) | Selection::Version(n, _) => valid_name(n)?,
        }
        let scanned = self.scan(sel)?;
        if scanned.is_empty() {
            match sel {
                Selection::All => {}
                Selection::Name(n) => return Err(self.not_found(n)),
                Selection::Version(n, v) => return Err(self.not_found(&format!("{n} v{v}"))),
            }
        }
        let mut out = Vec::new();
        for ((name, version), copies) in &scanned {
            let record = self.record(name, *version, copies);
            let mut files = Vec::new();
            let mut damaged = copies.iter().any(|c| c.manifest_error.is_some());
            for c in copies {
                let Some(tier) = self.tier(c.place) else {
                    continue;
                };
                let world = c.manifest.as_ref().map(|m| m.world_size as usize);
                for &r in c.files.keys() {
                    let at = (FileKind::Part, c.place, world);
                    let check = self.check_object(tier, at, name, *version, r);
                    damaged |= !check.ok;
                    files.push(check);
                }
                // Rank files a manifest promises but that are gone.
                if let Some(m) = &c.manifest {
                    for &r in m.ranks.iter().filter(|r| !c.files.contains_key(r)) {
                        damaged = true;
                        files.push(FileCheck {
                            kind: FileKind::Part,
                            rank: r,
                            place: c.place,
                            path: tier.root().join(rank_key(name, *version, r as usize)),
                            ok: false,
                            bytes: None,
                            error: Some("missing (listed in the manifest)".into()),
                            region: None,
                            block: None,
                            shard: None,
                        });
                    }
                }
                for x in &c.partner {
                    let at = (FileKind::Partner, c.place, world);
                    let check = self.check_object(tier, at, name, *version, x.rank);
                    damaged |= !check.ok;
                    files.push(check);
                }
                // Parity objects were read in full and checked by the scan.
                for x in &c.parity {
                    damaged |= !x.ok;
                    files.push(FileCheck {
                        kind: FileKind::Parity,
                        rank: x.rank,
                        place: c.place,
                        path: x.path.clone(),
                        ok: x.ok,
                        bytes: x
                            .set
                            .as_ref()
                            .filter(|_| x.ok)
                            .map(|s| s.segment * s.m as u64),
                        error: x.error.clone(),
                        region: None,
                        block: None,
                        shard: x.damaged_shards.first().copied(),
                    });
                }
            }
            files.sort_by_key(|f| (f.kind, f.rank, f.place));
            // Redundancy a surviving node should hold but does not is damage too; a lost node
            // makes the checkpoint incomplete instead (unless another tier holds all of it).
            let verdict = if damaged || record.protection.local_damage {
                Verdict::Damaged
            } else if !record.state.is_complete() {
                Verdict::Incomplete
            } else {
                Verdict::Ok
            };
            out.push(CkptCheck {
                name: name.clone(),
                version: *version,
                verdict,
                state: record.state,
                bytes: files.iter().filter_map(|f| f.bytes).sum(),
                files,
                protection: record.protection,
                problems: record.problems,
            });
        }
        Ok(out)
    }

    /// Re-check a rank file (`FileKind::Part`) or a partner copy: its index names the right
    /// checkpoint, rank and job size, and every block matches its checksum.
    fn check_object(
        &self,
        tier: &Opened,
        (kind, place, world): (FileKind, Place, Option<usize>),
        name: &str,
        v: i64,
        r: u32,
    ) -> FileCheck {
        let key = match kind {
            FileKind::Partner => partner_key(name, v, r as usize),
            _ => rank_key(name, v, r as usize),
        };
        let res = (|| -> Result<u64> {
            let rd = tier.open(&key)?;
            let ix = part::read_index(&*rd)?;
            part::index_is(&ix, (name, v), r as usize, world)?;
            part::verify(&*rd)
        })();
        file_check(kind, r, place, tier.root().join(&key), res)
    }
}

/// The result of re-checking one data file (a part or a partner copy).
fn file_check(
    kind: FileKind,
    rank: u32,
    place: Place,
    path: PathBuf,
    res: Result<u64>,
) -> FileCheck {
    let mut fc = FileCheck {
        kind,
        rank,
        place,
        path,
        ok: res.is_ok(),
        bytes: None,
        error: None,
        region: None,
        block: None,
        shard: None,
    };
    match res {
        Ok(b) => fc.bytes = Some(b),
        Err(e) => {
            if let Some((region, chunk)) = damaged_block(&e.msg) {
                fc.region = Some(region);
                fc.block = Some(chunk);
            }
            fc.error = Some(e.msg);
        }
    }
    fc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Engine, RegionRef};
    use cairn_comm::Threads;

    fn config(root: &Path) -> Config {
        Config {
            local: Some(root.join("local")),
            global: root.join("global"),
            fsync_global: false,
            block: 4096,
            finalize_flush: false,
            ..Config::default()
        }
    }

    fn field(rank: usize, version: i64) -> Vec<u8> {
        (0..10_000u32)
            .map(|i| (i as u64 * 31 + rank as u64 * 7 + version as u64) as u8)
            .collect()
    }

    /// Write `versions` of `name` with `size` ranks on `nodes` simulated nodes.
    fn write(cfg: &Config, size: usize, nodes: usize, name: &str, versions: &[i64]) {
        let mut cfg = cfg.clone();
        cfg.sim_nodes = nodes;
        let handles: Vec<_> = Threads::world(size)
            .into_iter()
            .enumerate()
            .map(|(rank, comm)| {
                let cfg = cfg.clone();
                let name = name.to_string();
                let versions = versions.to_vec();
                std::thread::spawn(move || {
                    let mut e = Engine::new(Box::new(comm), cfg).unwrap();
                    for v in versions {
                        let a = field(rank, v);
                        let step = v.to_le_bytes();
                        e.checkpoint(
                            &name,
                            v,
                            &[
                                RegionRef {
                                    id: 0,
                                    dtype: Dtype::Int64,
                                    bytes: &step,
                                },
                                RegionRef {
                                    id: 1,
                                    dtype: Dtype::Byte,
                                    bytes: &a,
                                },
                            ],
                        )
                        .unwrap();
                    }
                    e.finalize().unwrap();
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    }

    fn solo(cfg: &Config, name: &str, versions: &[i64]) {
        let mut e = Engine::new(Box::new(cairn_comm::Solo), cfg.clone()).unwrap();
        for &v in versions {
            let a = field(0, v);
            e.checkpoint(
                name,
                v,
                &[RegionRef {
                    id: 7,
                    dtype: Dtype::Byte,
                    bytes: &a,
                }],
            )
            .unwrap();
        }
        e.finalize().unwrap();
    }

    fn snapshot(dir: &Path) -> Vec<(PathBuf, u64, Vec<u8>)> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in rd.flatten() {
                let p = e.path();
                let md = std::fs::symlink_metadata(&p).unwrap();
                if md.is_dir() {
                    stack.push(p.clone());
                    out.push((p, 0, Vec::new()));
                } else {
                    out.push((p.clone(), md.len(), std::fs::read(&p).unwrap()));
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn missing_tiers_hold_nothing_and_are_not_created() {
        let d = tempfile::tempdir().unwrap();
        let cfg = config(d.path());
        let inv = Inventory::open(&cfg).unwrap();
        assert!(inv.list(None).unwrap().is_empty());
        assert!(inv.verify(&Selection::All).unwrap().is_empty());
        let e = inv.inspect("heat", 3).unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotFound);
        assert!(e.msg.contains("no checkpoint heat v3 under"), "{}", e.msg);
        assert_eq!(
            inv.verify(&Selection::Name("x".into())).unwrap_err().kind,
            ErrorKind::NotFound
        );
        assert!(!d.path().join("local").exists() && !d.path().join("global").exists());
    }

    #[test]
    fn lists_states_tiers_and_sizes_without_changing_anything() {
        let d = tempfile::tempdir().unwrap();
        let mut cfg = config(d.path());
        cfg.flush_every = 2;
        write(&cfg, 4, 2, "heat", &[10, 20]);
        solo(&config(d.path()), "aux", &[1]);
        let before = snapshot(d.path());

        let inv = Inventory::open(&cfg).unwrap();
        assert_eq!(inv.node_dirs(), vec![0, 1]);
        let all = inv.list(None).unwrap();
        let keys: Vec<(&str, i64)> = all.iter().map(|r| (r.name.as_str(), r.version)).collect();
        assert_eq!(keys, vec![("aux", 1), ("heat", 10), ("heat", 20)]);

        let v10 = &all[1];
        assert_eq!(v10.state, Status::Protected);
        assert_eq!(v10.tiers, vec!["local(2 nodes)"]);
        assert_eq!((v10.world_size, v10.nodes), (Some(4), Some(2)));
        assert_eq!(v10.ranks, vec![0, 1, 2, 3]);
        assert!(v10.problems.is_empty(), "{:?}", v10.problems);
        // 10_008 region bytes per rank; each file adds its header, index and trailer.
        assert!(v10.bytes > 4 * 10_008 && v10.bytes == v10.stored_bytes);
        assert!(v10.created_unix_ms.is_some() && v10.capture_ns.is_some());

        let v20 = &all[2];
        assert_eq!(v20.state, Status::Durable);
        assert_eq!(v20.tiers, vec!["local(2 nodes)", "global"]);
        assert_eq!(v20.stored_bytes, 2 * v20.bytes);

        let aux = &all[0];
        assert_eq!((aux.state, aux.world_size), (Status::Protected, Some(1)));
        assert_eq!(aux.tiers, vec!["local(1 node)"]);

        assert_eq!(inv.list(Some("heat")).unwrap().len(), 2);
        assert!(inv.list(Some("nope")).unwrap().is_empty());
        assert_eq!(
            inv.list(Some("../etc")).unwrap_err().kind,
            ErrorKind::InvalidArgument
        );

        let ins = inv.inspect("heat", 20).unwrap();
        assert_eq!(ins.manifests.len(), 3);
        assert_eq!(ins.files.len(), 8);
        assert_eq!(
            (ins.files[0].rank, ins.files[0].place),
            (0, Place::Local(0))
        );
        assert_eq!((ins.files[7].rank, ins.files[7].place), (3, Place::Global));
        let f = &ins.files[5];
        assert!(f.error.is_none());
        assert_eq!(f.block_size, Some(4096));
        assert_eq!(f.regions.len(), 2);
        assert_eq!(
            (f.regions[1].id, f.regions[1].count, f.regions[1].blocks),
            (1, 10_000, 3)
        );
        let sum = cairn_format::checksum(&field(f.rank as usize, 20)[..4096]);
        assert_eq!(
            f.regions[1].first_checksum.as_deref(),
            Some(format!("{sum:016x}").as_str())
        );

        let checks = inv.verify(&Selection::All).unwrap();
        assert_eq!(checks.len(), 3);
        assert!(
            checks.iter().all(|c| c.verdict == Verdict::Ok),
            "{checks:?}"
        );
        assert_eq!(checks[2].files.len(), 8);
        assert_eq!(checks[2].bytes, 8 * 10_008);
        assert_eq!(
            inv.verify(&Selection::Version("heat".into(), 10))
                .unwrap()
                .len(),
            1
        );

        assert_eq!(
            snapshot(d.path()),
            before,
            "the inventory changed the tiers"
        );
    }

    #[test]
    fn a_lost_node_directory_makes_a_checkpoint_incomplete() {
        let d = tempfile::tempdir().unwrap();
        let mut cfg = config(d.path());
        cfg.flush_every = 2;
        write(&cfg, 4, 2, "heat", &[10, 20]);
        std::fs::remove_dir_all(d.path().join("local/node1")).unwrap();
        let inv = Inventory::open(&cfg).unwrap();
        let all = inv.list(None).unwrap();
        let v10 = &all[0];
        assert_eq!(v10.state, Status::Incomplete);
        assert_eq!(v10.ranks, vec![0, 1]);
        assert_eq!(v10.tiers, vec!["local(1 node)"]);
        assert!(
            v10.problems
                .iter()
                .any(|p| p.contains("2 of 4 ranks (2-3)")
                    && p.contains("only 1 of 2 node directories")),
            "{:?}",
            v10.problems
        );
        // v20 survives on the global tier.
        assert_eq!(all[1].state, Status::Durable);
        let checks = inv.verify(&Selection::Name("heat".into())).unwrap();
        assert_eq!(checks[0].verdict, Verdict::Incomplete);
        assert_eq!(checks[1].verdict, Verdict::Ok);
    }

    #[test]
    fn a_deleted_rank_file_is_named() {
        let d = tempfile::tempdir().unwrap();
        let cfg = config(d.path());
        write(&cfg, 4, 2, "heat", &[5]);
        std::fs::remove_file(d.path().join("local/node1/heat/v5/rank3.ckpt")).unwrap();
        let inv = Inventory::open(&cfg).unwrap();
        let r = &inv.list(None).unwrap()[0];
        assert_eq!(r.state, Status::Incomplete);
        assert_eq!(r.ranks, vec![0, 1, 2]);
        assert!(
            r.problems.iter().any(|p| p.contains(
                "local node1: rank file(s) of rank 3 listed in the manifest are missing"
            )),
            "{:?}",
            r.problems
        );
        let c = &inv.verify(&Selection::All).unwrap()[0];
        assert_eq!(c.verdict, Verdict::Damaged);
        let bad: Vec<&FileCheck> = c.files.iter().filter(|f| !f.ok).collect();
        assert_eq!(bad.len(), 1);
        assert_eq!((bad[0].rank, bad[0].place), (3, Place::Local(1)));
        assert!(bad[0].path.ends_with("node1/heat/v5/rank3.ckpt"));
    }

    /// A rank file consistent in itself (its checksums right) whose index claims another
    /// job's size is damage to verify, as it is to restart: one check judges both.
    #[test]
    fn a_rank_file_of_another_world_size_is_damage_to_verify_and_restart() {
        let d = tempfile::tempdir().unwrap();
        let cfg = config(d.path());
        write(&cfg, 1, 1, "solo", &[1]);
        let tier = cairn_tier::DirTier::new("local", d.path().join("local/node0"), false).unwrap();
        let bytes = [7u8; 64];
        let regs = [part::RegionRef {
            id: 0,
            dtype: cairn_format::Dtype::Byte,
            bytes: &bytes,
        }];
        let meta = part::PartMeta {
            name: "solo",
            version: 1,
            rank: 0,
            world_size: u32::MAX,
            block: 4096,
        };
        tier.remove("solo/v1/rank0.ckpt").unwrap();
        part::write_part(
            &tier,
            "solo/v1/rank0.ckpt",
            meta,
            &regs,
            part::Reduction::RAW,
        )
        .unwrap();
        let c = &Inventory::open(&cfg)
            .unwrap()
            .verify(&Selection::All)
            .unwrap()[0];
        assert_eq!(c.verdict, Verdict::Damaged, "{c:?}");
        let why = c.files.iter().find_map(|f| f.error.clone()).unwrap();
        assert!(
            why.contains("of rank 0/4294967295, not solo v1 of rank 0/1"),
            "{why}"
        );
        let e = part::open_chain(&tier, "solo", 1, 0, Some(1))
            .err()
            .unwrap()
            .msg;
        assert!(
            e.contains("of rank 0/4294967295, not solo v1 of rank 0/1"),
            "{e}"
        );
    }

    #[test]
    fn a_flipped_byte_is_located() {
        let d = tempfile::tempdir().unwrap();
        let cfg = config(d.path());
        write(&cfg, 2, 1, "heat", &[1, 2]);
        let path = d.path().join("local/node0/heat/v2/rank1.ckpt");
        let mut b = std::fs::read(&path).unwrap();
        // Header (16) + region 0 (8 bytes) + region 1's first two blocks + a bit.
        b[16 + 8 + 2 * 4096 + 100] ^= 0x01;
        std::fs::write(&path, &b).unwrap();

        let inv = Inventory::open(&cfg).unwrap();
        // list does not read data: the checkpoint still looks complete.
        assert_eq!(inv.list(None).unwrap()[1].state, Status::Protected);
        let checks = inv.verify(&Selection::All).unwrap();
        assert_eq!(checks[0].verdict, Verdict::Ok);
        let c = &checks[1];
        assert_eq!(c.verdict, Verdict::Damaged);
        let f = c.files.iter().find(|f| !f.ok).unwrap();
        assert_eq!((f.rank, f.region, f.block), (1, Some(1), Some(2)));
        assert!(
            f.error.as_deref().unwrap().contains("block 2 of region 1"),
            "{f:?}"
        );
        assert!(c.files.iter().filter(|f| f.ok).count() == 1);

        // Damage in the index is reported too, without a block.
        let n = b.len();
        b[n - 40] ^= 0xff;
        std::fs::write(&path, &b).unwrap();
        let c = &inv.verify(&Selection::Version("heat".into(), 2)).unwrap()[0];
        let f = c.files.iter().find(|f| !f.ok).unwrap();
        assert_eq!((f.region, f.block), (None, None));
        assert!(f.error.as_deref().unwrap().contains("index"), "{f:?}");
        // inspect still shows the other rank, and the error for this one.
        let ins = inv.inspect("heat", 2).unwrap();
        assert!(ins.files[0].error.is_none() && ins.files[1].error.is_some());
    }

    #[test]
    fn hostile_entries_are_ignored_or_reported() {
        let d = tempfile::tempdir().unwrap();
        let cfg = config(d.path());
        solo(&cfg, "ok", &[1]);
        let local = d.path().join("local");
        // Directories that are not node<i>, versions that are not v<n>, junk files.
        for p in ["node01/x/v1", "nodeX/x/v1", "node0/ok/v01", "node0/ok/vx"] {
            std::fs::create_dir_all(local.join(p)).unwrap();
        }
        std::fs::write(local.join("node0/ok/v1/rank01.ckpt"), b"junk").unwrap();
        std::fs::write(local.join("node0/ok/v1/notes.txt"), b"junk").unwrap();
        // A manifest that lies about its name.
        std::fs::create_dir_all(local.join("node0/ok/v2")).unwrap();
        let m = std::fs::read(local.join("node0/ok/v1/manifest.json")).unwrap();
        std::fs::write(local.join("node0/ok/v2/manifest.json"), &m).unwrap();
        let inv = Inventory::open(&cfg).unwrap();
        assert_eq!(inv.node_dirs(), vec![0]);
        let all = inv.list(None).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].state, Status::Protected);
        assert_eq!(all[0].ranks, vec![0]);
        assert_eq!(all[1].state, Status::Incomplete);
        assert!(
            all[1].problems[0].contains("unreadable manifest")
                && all[1].problems[0].contains("describes ok v1"),
            "{:?}",
            all[1].problems
        );
        assert_eq!(
            inv.verify(&Selection::Version("ok".into(), 2)).unwrap()[0].verdict,
            Verdict::Damaged
        );
    }

    fn protected_cfg(root: &Path, scheme: &str, parity: usize) -> Config {
        Config {
            redundancy: scheme.into(),
            parity,
            ..config(root)
        }
    }

    #[test]
    fn redundancy_is_recorded_per_node_without_changing_anything() {
        let d = tempfile::tempdir().unwrap();
        let cfg = protected_cfg(d.path(), "rs", 2);
        write(&cfg, 8, 4, "heat", &[1]);
        let before = snapshot(d.path());
        let inv = Inventory::open(&cfg).unwrap();
        let r = &inv.list(None).unwrap()[0];
        assert_eq!(r.scheme.as_deref(), Some("rs(2+2)"));
        assert_eq!(r.protection.state, ProtectionState::Protected);
        assert!(r.protection.rebuildable && !r.protection.local_damage);
        assert_eq!(r.holdings.len(), 4);
        let h = &r.holdings[1];
        assert_eq!((h.node, h.parts.clone()), (1, vec![2, 3]));
        assert!(h.partner_copies.is_empty());
        let ranks: Vec<u32> = h.parity.iter().map(|p| p.rank).collect();
        assert_eq!(ranks, vec![2, 3]);
        let set = h.parity[0].set.as_ref().unwrap();
        assert_eq!((set.codec.as_str(), set.m, set.holder), ("rs", 2, 1));
        let members: Vec<u32> = set.members.iter().map(|m| m.rank).collect();
        assert_eq!(members, vec![0, 2, 4, 6]);
        assert!(h.parity.iter().all(|p| p.ok && p.damaged_shards.is_empty()));
        assert_eq!(
            r.redundancy_bytes,
            r.holdings
                .iter()
                .flat_map(|h| &h.parity)
                .map(|p| p.bytes)
                .sum::<u64>()
        );
        let c = &inv.verify(&Selection::All).unwrap()[0];
        assert_eq!(c.verdict, Verdict::Ok);
        assert_eq!(
            c.files
                .iter()
                .filter(|f| f.kind == FileKind::Parity)
                .count(),
            8
        );
        assert_eq!(
            snapshot(d.path()),
            before,
            "the inventory changed the tiers"
        );
    }

    #[test]
    fn rs_tolerates_parity_many_lost_nodes_per_set() {
        let d = tempfile::tempdir().unwrap();
        let cfg = protected_cfg(d.path(), "rs", 2);
        write(&cfg, 8, 4, "heat", &[1]);
        // Nodes 1 and 2 (ranks 2-5): each set {0,2,4,6}, {1,3,5,7} loses two members.
        for n in [1, 2] {
            std::fs::remove_dir_all(d.path().join(format!("local/node{n}"))).unwrap();
        }
        let inv = Inventory::open(&cfg).unwrap();
        let p = inv.list(None).unwrap()[0].protection.clone();
        assert_eq!(p.state, ProtectionState::Degraded, "{p:?}");
        assert!(p.rebuildable && !p.local_damage);
        assert_eq!(p.summary, "degraded (nodes 1-2 lost; rebuildable)");
        assert_eq!(p.lost_nodes, vec![1, 2]);
        assert_eq!(p.lost_parts, vec![2, 3, 4, 5]);
        assert_eq!(p.lost_redundancy, vec![2, 3, 4, 5]);
        // A third node is one member too many.
        std::fs::remove_dir_all(d.path().join("local/node3")).unwrap();
        let p = inv.list(None).unwrap()[0].protection.clone();
        assert_eq!(p.state, ProtectionState::Unrecoverable, "{p:?}");
        assert!(!p.rebuildable);
        assert_eq!(p.unrecoverable, vec![2, 3, 4, 5, 6, 7]);
        assert!(
            p.summary.contains(
                "the set of ranks 0, 2, 4, 6 lost 3 shards of a stripe and rs(2+2) tolerates 2"
            ),
            "{}",
            p.summary
        );
    }

    #[test]
    fn bad_partner_copies_and_parity_objects_are_named() {
        let d = tempfile::tempdir().unwrap();
        let cfg = protected_cfg(d.path(), "partner", 2);
        write(&cfg, 4, 2, "heat", &[1]);
        let node0 = d.path().join("local/node0/heat/v1");
        // A copy stored under the wrong rank's name.
        std::fs::rename(
            node0.join("partner/rank2.ckpt"),
            node0.join("partner/rank9.ckpt"),
        )
        .unwrap();
        let inv = Inventory::open(&cfg).unwrap();
        let r = &inv.list(None).unwrap()[0];
        let c = r.holdings[0]
            .partner_copies
            .iter()
            .find(|c| c.rank == 9)
            .unwrap();
        assert!(!c.ok);
        assert!(
            c.error
                .as_deref()
                .unwrap()
                .contains("not heat v1 of rank 9"),
            "{c:?}"
        );
        assert_eq!(r.protection.state, ProtectionState::Degraded);
        assert!(r.protection.local_damage);
        assert_eq!(
            r.protection.summary,
            "degraded (partner copy of rank 2 missing; partner copy of rank 9 damaged; rebuildable)"
        );
        assert_eq!(
            inv.verify(&Selection::All).unwrap()[0].verdict,
            Verdict::Damaged
        );

        let d = tempfile::tempdir().unwrap();
        let cfg = protected_cfg(d.path(), "xor", 2);
        write(&cfg, 4, 2, "heat", &[1]);
        let par = d.path().join("local/node1/heat/v1/parity/rank3.par");
        let inv = Inventory::open(&cfg).unwrap();
        for (bytes, want) in [
            (b"junk".to_vec(), "too short"),
            (vec![0u8; 200], "parity header"),
        ] {
            std::fs::write(&par, &bytes).unwrap();
            let r = &inv.list(None).unwrap()[0];
            let p = r.holdings[1].parity.iter().find(|p| p.rank == 3).unwrap();
            assert!(!p.ok && p.set.is_none());
            assert!(p.error.as_deref().unwrap().contains(want), "{p:?}");
            assert_eq!(
                r.protection.summary,
                "degraded (parity of rank 3 damaged; rebuildable)"
            );
        }
        // Rank 1's parity object under rank 3's name: the header names the holder.
        std::fs::copy(d.path().join("local/node0/heat/v1/parity/rank1.par"), &par).unwrap();
        let r = &inv.list(None).unwrap()[0];
        let p = r.holdings[1].parity.iter().find(|p| p.rank == 3).unwrap();
        assert!(
            p.error
                .as_deref()
                .unwrap()
                .contains("holds the parity of rank 1"),
            "{p:?}"
        );
    }

    #[test]
    fn parity_of_another_checkpoint_or_other_rank_files_does_not_protect() {
        // Defect: an older version's parity objects copied over a newer one's passed `verify`
        // and `list` said "protected"; a node loss then could not be rebuilt.
        let d = tempfile::tempdir().unwrap();
        let cfg = Config {
            keep: 2,
            ..protected_cfg(d.path(), "xor", 2)
        };
        write(&cfg, 4, 2, "heat", &[1, 2]);
        let inv = Inventory::open(&cfg).unwrap();
        let v2 = |inv: &Inventory| {
            inv.list(Some("heat"))
                .unwrap()
                .into_iter()
                .find(|r| r.version == 2)
                .unwrap()
        };
        assert_eq!(v2(&inv).protection.state, ProtectionState::Protected);
        let par = |v: i64, n: usize, r: usize| {
            d.path()
                .join(format!("local/node{n}/heat/v{v}/parity/rank{r}.par"))
        };
        let all = [(0, 0), (0, 1), (1, 2), (1, 3)];
        for (n, r) in all {
            std::fs::copy(par(1, n, r), par(2, n, r)).unwrap();
        }
        let r = v2(&inv);
        assert_ne!(r.protection.state, ProtectionState::Protected, "{r:?}");
        let p = &r.holdings[1].parity[0];
        assert!(!p.ok, "{p:?}");
        assert!(
            p.error
                .as_deref()
                .unwrap()
                .contains("protects \"heat\" v1, not \"heat\" v2"),
            "{p:?}"
        );
        let c = inv.verify(&Selection::Version("heat".into(), 2)).unwrap();
        assert_eq!(c[0].verdict, Verdict::Damaged);

        // The same checkpoint name and version from another run (other rank files: another
        // block size): the index checksums it records do not match.
        let other = tempfile::tempdir().unwrap();
        let ocfg = Config {
            block: 8192,
            ..protected_cfg(other.path(), "xor", 2)
        };
        write(&ocfg, 4, 2, "heat", &[2]);
        for (n, r) in all {
            std::fs::copy(
                other
                    .path()
                    .join(format!("local/node{n}/heat/v2/parity/rank{r}.par")),
                par(2, n, r),
            )
            .unwrap();
        }
        let r = v2(&inv);
        assert_ne!(r.protection.state, ProtectionState::Protected, "{r:?}");
        let p = &r.holdings[0].parity[0];
        assert!(
            !p.ok
                && p.error
                    .as_deref()
                    .unwrap()
                    .contains("was encoded from another rank file of rank"),
            "{p:?}"
        );
        assert_eq!(
            inv.verify(&Selection::Version("heat".into(), 2)).unwrap()[0].verdict,
            Verdict::Damaged
        );
    }

    #[test]
    fn helpers() {
        assert_eq!(node_index("node12"), Some(12));
        for bad in ["node", "node01", "node-1", "nodes", "x"] {
            assert_eq!(node_index(bad), None, "{bad}");
        }
        assert_eq!(ranges([0, 1, 2, 5, 7, 8]), "0-2, 5, 7-8");
        let have: BTreeSet<u32> = [1, 2, 5].into();
        assert_eq!(missing_ranges(7, &have), vec![(0, 0), (3, 4), (6, 6)]);
        assert_eq!(missing_ranges(u32::MAX, &have).len(), 3);
        assert_eq!(
            damaged_block("block 4 of region -2 fails its checksum"),
            Some((-2, 4))
        );
        assert_eq!(damaged_block("index fails its checksum"), None);
        assert_eq!(parse_parity_file("rank12.par"), Some(12));
        for bad in ["rank01.par", "rank.par", "rank1.ckpt", "rank1.par.tmp.3.0"] {
            assert_eq!(parse_parity_file(bad), None, "{bad}");
        }
    }
}
