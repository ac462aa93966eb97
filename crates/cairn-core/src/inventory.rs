//! A read-only view of the checkpoints stored under a configuration's tiers, for the `cairn`
//! command-line tool: what is there and how complete it is ([`Inventory::list`]), what one
//! checkpoint holds ([`Inventory::inspect`]) and whether its bytes still match their checksums
//! ([`Inventory::verify`]).
//!
//! Nothing here creates or modifies anything: tiers are opened with
//! [`DirTier::open_existing`], and a missing tier root simply holds nothing. Every key is built
//! from a name that passed [`check_name`] and from integers parsed out of directory listings
//! (`node<i>`, `v<version>`, `rank<r>.ckpt`); nothing read from a manifest or rank file ever
//! becomes part of a path.

use crate::catalog::{self, manifest_key, parse_rank_file, rank_key, version_dir};
use crate::config::Config;
use crate::error::{Error, ErrorKind, Result};
use crate::part;
use cairn_format::{check_name, CkptState, Dtype, Manifest};
use cairn_tier::{DirTier, Scope, Tier};
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
    pub bytes: u64,
    pub chunks: usize,
    /// Checksum of the first chunk, 16 hex digits (none for an empty region).
    pub first_checksum: Option<String>,
}

/// One rank file, as its index describes it.
#[derive(Debug, Clone, Serialize)]
pub struct RankFileInfo {
    pub rank: u32,
    pub place: Place,
    pub path: PathBuf,
    pub file_bytes: u64,
    pub chunk_size: Option<u32>,
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

/// The outcome of re-checking one rank file.
#[derive(Debug, Clone, Serialize)]
pub struct FileCheck {
    pub rank: u32,
    pub place: Place,
    pub path: PathBuf,
    pub ok: bool,
    /// Region bytes whose checksums matched (when ok).
    pub bytes: Option<u64>,
    pub error: Option<String>,
    /// The damaged region and chunk, when the damage is in region data.
    pub region: Option<i32>,
    pub chunk: Option<u64>,
}

/// The verdict on one checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Every stored rank file matches its checksums and some tier holds a complete copy.
    Ok,
    /// A rank file fails its checksums or cannot be read, a manifest lists a missing rank
    /// file, or a manifest is unreadable.
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
    /// Region bytes checked in total.
    pub bytes: u64,
    pub problems: Vec<String>,
}

/// The tiers of one configuration, opened for reading.
#[derive(Debug)]
pub struct Inventory {
    local_root: Option<PathBuf>,
    global_root: PathBuf,
    /// Node-local directories found, by node index.
    nodes: Vec<(u32, DirTier)>,
    global: Option<DirTier>,
}

/// Everything found of one version on one tier.
struct Found {
    place: Place,
    dir: PathBuf,
    manifest: Option<Manifest>,
    manifest_error: Option<String>,
    /// rank -> file size
    files: BTreeMap<u32, u64>,
    problems: Vec<String>,
}

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

/// Parse `node<i>` strictly (no sign, no leading zero).
fn parse_node_dir(name: &str) -> Option<u32> {
    let d = name.strip_prefix("node")?;
    if d.is_empty() || !d.bytes().all(|b| b.is_ascii_digit()) || (d.len() > 1 && d.starts_with('0'))
    {
        return None;
    }
    d.parse().ok()
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

/// Pick the region and chunk out of `part::verify`'s message for damaged region data
/// (`chunk <i> of region <id> fails its checksum`).
fn damaged_chunk(msg: &str) -> Option<(i32, u64)> {
    let rest = msg.strip_prefix("chunk ")?;
    let (chunk, rest) = rest.split_once(" of region ")?;
    let (region, _) = rest.split_once(' ')?;
    Some((region.parse().ok()?, chunk.parse().ok()?))
}

impl Inventory {
    /// Open the tiers `cfg` names, for reading only. Missing roots hold nothing.
    pub fn open(cfg: &Config) -> Result<Inventory> {
        let global = open_root("global", &cfg.global, Scope::Global)?;
        let mut nodes = Vec::new();
        if let Some(local) = &cfg.local {
            if let Some(root) = open_root("local", local, Scope::NodeLocal)? {
                let mut found: Vec<u32> = root
                    .list("")?
                    .iter()
                    .filter_map(|n| parse_node_dir(n))
                    .collect();
                found.sort_unstable();
                for i in found {
                    let dir = local.join(format!("node{i}"));
                    if let Some(t) = open_root("local", &dir, Scope::NodeLocal)? {
                        nodes.push((i, t));
                    }
                }
            }
        }
        Ok(Inventory {
            local_root: cfg.local.clone(),
            global_root: cfg.global.clone(),
            nodes,
            global,
        })
    }

    /// The configured node-local root (`None` when the local tier is off).
    pub fn local_root(&self) -> Option<&Path> {
        self.local_root.as_deref()
    }

    pub fn global_root(&self) -> &Path {
        &self.global_root
    }

    /// Node indices with a directory under the local root.
    pub fn node_dirs(&self) -> Vec<u32> {
        self.nodes.iter().map(|(i, _)| *i).collect()
    }

    fn tiers(&self) -> Vec<(Place, &DirTier)> {
        self.nodes
            .iter()
            .map(|(i, t)| (Place::Local(*i), t))
            .chain(self.global.iter().map(|t| (Place::Global, t)))
            .collect()
    }

    fn tier(&self, place: Place) -> Option<&DirTier> {
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
                Selection::All => catalog::names(tier)?,
                Selection::Name(n) | Selection::Version(n, _) => vec![n.clone()],
            };
            for name in names {
                for v in catalog::versions(tier, &name)? {
                    if matches!(sel, Selection::Version(_, want) if *want != v) {
                        continue;
                    }
                    let found = self.scan_version(place, tier, &name, v)?;
                    out.entry((name.clone(), v)).or_default().push(found);
                }
            }
        }
        Ok(out)
    }

    fn scan_version(&self, place: Place, tier: &DirTier, name: &str, v: i64) -> Result<Found> {
        let dir = tier.root().join(version_dir(name, v));
        let (manifest, manifest_error) = match catalog::read_manifest(tier, name, v) {
            Ok(m) => (m, None),
            Err(e) => (None, Some(e.msg)),
        };
        let mut files = BTreeMap::new();
        let mut problems = Vec::new();
        for entry in tier.list(&version_dir(name, v))? {
            let Some(r) = parse_rank_file(&entry) else {
                continue;
            };
            let Ok(r) = u32::try_from(r) else { continue };
            match tier.open(&rank_key(name, v, r as usize)) {
                Ok(f) => {
                    files.insert(r, f.len());
                }
                Err(e) => problems.push(format!("{place}: rank {r}: {e}")),
            }
        }
        Ok(Found {
            place,
            dir,
            manifest,
            manifest_error,
            files,
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
        Ok(self
            .scan(&sel)?
            .iter()
            .map(|((n, v), copies)| self.record(n, *v, copies))
            .collect())
    }

    fn not_found(&self, what: &str) -> Error {
        let local = match &self.local_root {
            Some(l) => format!("{} and ", l.display()),
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
                    chunk_size: None,
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
                        info.chunk_size = Some(ix.chunk_size);
                        info.write_ns = Some(ix.write_ns);
                        info.regions = ix
                            .regions
                            .iter()
                            .map(|e| RegionInfo {
                                id: e.id,
                                dtype: e.dtype,
                                count: e.count,
                                bytes: e.nbytes,
                                chunks: e.chunk_sums.len(),
                                first_checksum: e.chunk_sums.first().map(|s| format!("{s:016x}")),
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
                for &r in c.files.keys() {
                    let check = self.check_file(tier, c.place, name, *version, r);
                    damaged |= !check.ok;
                    files.push(check);
                }
                // Rank files a manifest promises but that are gone.
                if let Some(m) = &c.manifest {
                    for &r in m.ranks.iter().filter(|r| !c.files.contains_key(r)) {
                        damaged = true;
                        files.push(FileCheck {
                            rank: r,
                            place: c.place,
                            path: tier.root().join(rank_key(name, *version, r as usize)),
                            ok: false,
                            bytes: None,
                            error: Some("missing (listed in the manifest)".into()),
                            region: None,
                            chunk: None,
                        });
                    }
                }
            }
            files.sort_by_key(|f| (f.rank, f.place));
            let verdict = if damaged {
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
                problems: record.problems,
            });
        }
        Ok(out)
    }

    fn check_file(&self, tier: &DirTier, place: Place, name: &str, v: i64, r: u32) -> FileCheck {
        let key = rank_key(name, v, r as usize);
        let res = (|| -> Result<u64> {
            let rd = tier.open(&key)?;
            let ix = part::read_index(&*rd)?;
            if ix.name != name || ix.version != v || ix.rank != r {
                return Err(Error::new(
                    ErrorKind::Corrupt,
                    format!(
                        "file holds {} v{} of rank {}, not {name} v{v} of rank {r}",
                        ix.name, ix.version, ix.rank
                    ),
                ));
            }
            part::verify(&*rd)
        })();
        let mut fc = FileCheck {
            rank: r,
            place,
            path: tier.root().join(&key),
            ok: res.is_ok(),
            bytes: None,
            error: None,
            region: None,
            chunk: None,
        };
        match res {
            Ok(b) => fc.bytes = Some(b),
            Err(e) => {
                if let Some((region, chunk)) = damaged_chunk(&e.msg) {
                    fc.region = Some(region);
                    fc.chunk = Some(chunk);
                }
                fc.error = Some(e.msg);
            }
        }
        fc
    }
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
            chunk: 4096,
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
        assert_eq!(f.chunk_size, Some(4096));
        assert_eq!(f.regions.len(), 2);
        assert_eq!(
            (f.regions[1].id, f.regions[1].count, f.regions[1].chunks),
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

    #[test]
    fn a_flipped_byte_is_located() {
        let d = tempfile::tempdir().unwrap();
        let cfg = config(d.path());
        write(&cfg, 2, 1, "heat", &[1, 2]);
        let path = d.path().join("local/node0/heat/v2/rank1.ckpt");
        let mut b = std::fs::read(&path).unwrap();
        // Header (16) + region 0 (8 bytes) + region 1's first two chunks + a bit.
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
        assert_eq!((f.rank, f.region, f.chunk), (1, Some(1), Some(2)));
        assert!(
            f.error.as_deref().unwrap().contains("chunk 2 of region 1"),
            "{f:?}"
        );
        assert!(c.files.iter().filter(|f| f.ok).count() == 1);

        // Damage in the index is reported too, without a chunk.
        let n = b.len();
        b[n - 40] ^= 0xff;
        std::fs::write(&path, &b).unwrap();
        let c = &inv.verify(&Selection::Version("heat".into(), 2)).unwrap()[0];
        let f = c.files.iter().find(|f| !f.ok).unwrap();
        assert_eq!((f.region, f.chunk), (None, None));
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

    #[test]
    fn helpers() {
        assert_eq!(parse_node_dir("node12"), Some(12));
        for bad in ["node", "node01", "node-1", "nodes", "x"] {
            assert_eq!(parse_node_dir(bad), None, "{bad}");
        }
        assert_eq!(ranges([0, 1, 2, 5, 7, 8]), "0-2, 5, 7-8");
        let have: BTreeSet<u32> = [1, 2, 5].into();
        assert_eq!(missing_ranges(7, &have), vec![(0, 0), (3, 4), (6, 6)]);
        assert_eq!(missing_ranges(u32::MAX, &have).len(), 3);
        assert_eq!(
            damaged_chunk("chunk 4 of region -2 fails its checksum"),
            Some((-2, 4))
        );
        assert_eq!(damaged_chunk("index fails its checksum"), None);
    }
}
