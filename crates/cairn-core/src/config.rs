//! Configuration: defaults, then a TOML file, then `CAIRN_<SECTION>_<KEY>` environment
//! variables, then overrides from the API, each layer replacing the one before.
//!
//! Every key is listed once, in [`KEYS`], with its type and documentation; `docs/config.md`
//! describes the same table and a test keeps the two in step. Unknown sections or keys and
//! bad values are errors that name the key, the value, where it came from and what is
//! accepted.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// How a key's value is parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    /// A directory path.
    Path,
    /// A directory path, or `none` to disable the tier.
    OptPath,
    Bool,
    /// A whole number (the minimum is given).
    Count(u64),
    /// A size in bytes, with an optional K, M or G suffix (powers of 1024).
    Bytes,
    /// A duration in seconds, with an optional s, m, h, d or y suffix.
    Seconds,
    /// A duration, or `auto` for the interval the failure model gives.
    SecondsOrAuto,
    /// A number from 0 to 1.
    Fraction,
    /// A log level.
    Level,
    /// One of a fixed list of words.
    Choice(&'static [&'static str]),
    /// Free text.
    Text,
}

impl KeyType {
    fn expected(self) -> String {
        match self {
            KeyType::Path => "a directory path".into(),
            KeyType::OptPath => "a directory path, or \"none\"".into(),
            KeyType::Bool => "true or false".into(),
            KeyType::Count(min) => format!("a whole number >= {min}"),
            KeyType::Bytes => "a size in bytes such as 1048576, \"4K\" or \"1M\"".into(),
            KeyType::Seconds => {
                "a duration such as 30, 2.5, \"90s\", \"10m\", \"1h\" or \"5y\"".into()
            }
            KeyType::SecondsOrAuto => {
                "a duration such as 30, \"90s\", \"10m\" or \"1h\", or \"auto\"".into()
            }
            KeyType::Fraction => "a number from 0 to 1".into(),
            KeyType::Level => "one of error, warn, info, debug, trace".into(),
            KeyType::Choice(words) => format!("one of {}", words.join(", ")),
            KeyType::Text => "text".into(),
        }
    }
}

/// One configuration key: section, name, type, default (as written in TOML) and meaning.
pub struct KeySpec {
    pub section: &'static str,
    pub key: &'static str,
    pub ty: KeyType,
    pub default: &'static str,
    pub doc: &'static str,
}

/// Every configuration key Cairn knows.
pub const KEYS: &[KeySpec] = &[
    KeySpec { section: "tiers", key: "local", ty: KeyType::OptPath, default: "/dev/shm/cairn-<user>",
        doc: "Root of the node-local tier (<user>: the user id's login name in the user database, else uid<N>); each (simulated) node keeps its data under <local>/node<i>/. \"mem\" uses the node's shared-memory chunk store ([tiers.mem]); \"none\" writes checkpoints straight to the global tier." },
    KeySpec { section: "tiers", key: "global", ty: KeyType::Path, default: "./cairn-ckpt",
        doc: "Root of the global tier, a directory every node shares (the parallel file system)." },
    KeySpec { section: "tiers", key: "fsync_global", ty: KeyType::Bool, default: "true",
        doc: "Sync files and directories on the global tier before a checkpoint is declared stored there." },
    KeySpec { section: "tiers", key: "fetch", ty: KeyType::Bool, default: "true",
        doc: "Restart may read a checkpoint from the global tier. false: only from node-local copies and their redundancy (SCR_FETCH=0); the global tier is still written." },
    KeySpec { section: "tiers", key: "lock_lease", ty: KeyType::Seconds, default: "60",
        doc: "How long a job lock (one job at a time per checkpoint name and tiers) held by a process on another host stays valid without its heartbeat, which comes every quarter of it; a lock left by a job that is gone is taken over after half to one lease (at once on its own host). At least 2 s." },
    KeySpec { section: "tiers.mem", key: "prefix", ty: KeyType::Text, default: "\"/cairn\"",
        doc: "Mount point of the in-memory file system: programs run under the interposer (cairn fs run, or LD_PRELOAD=libcairn-fs.so) keep files under it in the store." },
    KeySpec { section: "tiers.mem", key: "size", ty: KeyType::Bytes, default: "\"256M\"",
        doc: "Bytes of shared memory in the store's chunk pool, allocated (pre-faulted) when the store is created." },
    KeySpec { section: "tiers.mem", key: "chunk", ty: KeyType::Bytes, default: "\"1M\"",
        doc: "Chunk size of the store, a multiple of 4K: the unit of allocation (a file holds whole chunks)." },
    KeySpec { section: "tiers.mem", key: "max_files", ty: KeyType::Count(1), default: "4096",
        doc: "File records in the store (files and directories)." },
    KeySpec { section: "tiers.mem", key: "spill_dir", ty: KeyType::OptPath, default: "\"none\"",
        doc: "Node-local directory for the spill file, which takes chunks once the pool is full (\"none\": no spill; a write then fails with ENOSPC)." },
    KeySpec { section: "tiers.mem", key: "spill_size", ty: KeyType::Bytes, default: "\"1G\"",
        doc: "Bytes of the spill file, reserved when the store is created (with spill_dir)." },
    KeySpec { section: "tiers.mem", key: "store", ty: KeyType::Choice(&["node", "process"]), default: "\"node\"",
        doc: "One store shared by the processes of each (simulated) node, or one per process." },
    KeySpec { section: "topology", key: "sim_nodes", ty: KeyType::Count(0), default: "0",
        doc: "Split the ranks of each real node into this many contiguous simulated nodes, each with its own node-local storage and failure domain (0: real nodes only)." },
    KeySpec { section: "topology", key: "domain_env", ty: KeyType::Text, default: "\"\"",
        doc: "Name of an environment variable (e.g. a rack name) whose value groups nodes into coarser failure domains; empty: one domain per node." },
    KeySpec { section: "cache", key: "keep", ty: KeyType::Count(1), default: "2",
        doc: "Checkpoints of each name kept on the node-local tier (at least 1); older ones are deleted in the background once a newer one is complete on every rank." },
    KeySpec { section: "cache", key: "keep_global", ty: KeyType::Count(0), default: "0",
        doc: "Checkpoints of each name kept on the global tier (0: keep all)." },
    KeySpec { section: "checkpoint", key: "every", ty: KeyType::Count(0), default: "0",
        doc: "cairn_need_checkpoint is true every this many calls (0: no step policy)." },
    KeySpec { section: "checkpoint", key: "seconds", ty: KeyType::SecondsOrAuto, default: "0",
        doc: "cairn_need_checkpoint is true when this much time has passed since the last checkpoint (0: no time policy; \"auto\": the optimal interval for the job's MTBF and the checkpoint cost the engine measures). With no policy set, it is always true." },
    KeySpec { section: "checkpoint", key: "finalize", ty: KeyType::Bool, default: "true",
        doc: "At finalize, make the newest checkpoint of each name durable on the global tier if it is not already (needs a node-local tier)." },
    KeySpec { section: "flush", key: "every", ty: KeyType::Count(0), default: "0",
        doc: "Flush every n-th checkpoint (by count in this run) to the global tier, making it durable (0: no step schedule)." },
    KeySpec { section: "flush", key: "seconds", ty: KeyType::SecondsOrAuto, default: "0",
        doc: "Flush a checkpoint when this much time has passed since the last flush began (0: no time schedule; \"auto\": the interval the failure model gives for the measured flush cost and the failures only the global tier recovers)." },
    KeySpec { section: "flush", key: "mode", ty: KeyType::Choice(&["async", "sync"]), default: "\"async\"",
        doc: "async: checkpoint returns once the checkpoint is protected and the copy runs in the background; sync: checkpoint returns once it is durable." },
    KeySpec { section: "flush", key: "buffer", ty: KeyType::Bytes, default: "\"8M\"",
        doc: "Memory each rank's flush thread holds at once (at least one checksum chunk)." },
    KeySpec { section: "flush", key: "bandwidth", ty: KeyType::Bytes, default: "0",
        doc: "Bytes per second each rank's flush may write, to spare the application's I/O (0: no limit; else at least 1M)." },
    KeySpec { section: "flush", key: "priority", ty: KeyType::Choice(&["low", "normal"]), default: "\"low\"",
        doc: "CPU priority of the flush thread: low (nice 19: on a core shared with the application it uses only the time the application leaves idle) or normal." },
    KeySpec { section: "flush", key: "direct", ty: KeyType::Bool, default: "true",
        doc: "Write flushed copies past the global tier's page cache (O_DIRECT) where its file system allows; ordinary writes otherwise." },
    KeySpec { section: "redundancy", key: "every", ty: KeyType::Count(1), default: "1",
        doc: "Protect every k-th checkpoint (by count in this run) with the scheme; the others are stored single (node-local only)." },
    KeySpec { section: "redundancy", key: "scheme", ty: KeyType::Choice(&["single", "partner", "xor", "rs"]), default: "\"single\"",
        doc: "How node-local checkpoints survive the loss of nodes: single (no copy), partner (a full copy on a rank of the next failure domain), xor (parity over sets, survives 1 lost member per set), rs (Reed-Solomon over sets, survives [redundancy] parity lost members per set)." },
    KeySpec { section: "redundancy", key: "set_size", ty: KeyType::Count(0), default: "0",
        doc: "Members per xor / rs set, each in a distinct failure domain (0: as many domains as the job has, at most 8). Storage overhead is parity / (set_size - parity)." },
    KeySpec { section: "redundancy", key: "parity", ty: KeyType::Count(1), default: "2",
        doc: "Parity shards per stripe for rs: how many lost members of a set can be rebuilt. Must be smaller than the set size." },
    KeySpec { section: "redundancy", key: "partner_mode", ty: KeyType::Choice(&["stream", "readback"]), default: "\"stream\"",
        doc: "How partner copies are made: stream (sent in pieces while the part is written, overlapping send, receive and write) or readback (written, read back and sent afterwards: the baseline the benchmarks measure streaming against; parts of routed files always go this way)." },
    KeySpec { section: "failure", key: "mtbf", ty: KeyType::Seconds, default: "0",
        doc: "Mean time between failures of the whole job, for \"auto\" intervals (0: derive it from node_mtbf)." },
    KeySpec { section: "failure", key: "node_mtbf", ty: KeyType::Seconds, default: "0",
        doc: "Mean time between failures of one node; the job's MTBF is this divided by its node count (used when mtbf is 0)." },
    KeySpec { section: "failure", key: "restart", ty: KeyType::Seconds, default: "0",
        doc: "Time a restart costs, for the expected efficiency the model reports." },
    KeySpec { section: "failure", key: "formula", ty: KeyType::Choice(&["young", "daly", "exact"]), default: "\"exact\"",
        doc: "How \"auto\" intervals are computed: Young's first-order formula, Daly's higher-order estimate, or the exact optimum of Daly's model (Lambert W)." },
    KeySpec { section: "failure", key: "global_share", ty: KeyType::Fraction, default: "0.1",
        doc: "Fraction of failures only the global tier recovers (more nodes lost than the redundancy covers, or the whole system); sets the failure rate the flush interval must cover." },
    KeySpec { section: "exit", key: "time_limit", ty: KeyType::Seconds, default: "0",
        doc: "Wall time the job may run, counted from cairn_init (0: inside a Slurm job, the job's end as Slurm knows it: SLURM_JOB_END_TIME if set, else the time left that rank 0 asks squeue for once at cairn_init, waiting at most 5 s; no limit when neither gives one)." },
    KeySpec { section: "exit", key: "margin", ty: KeyType::Seconds, default: "60",
        doc: "should_exit turns true when less than the margin, plus the measured cost of a checkpoint and its flush, remains before the time limit. The margin is this value, but at most a tenth of the job's time (time_limit, or the time Slurm gave the job when cairn_init learnt its end), so a short job still runs." },
    KeySpec { section: "exit", key: "halt_file", ty: KeyType::OptPath, default: "<global>/cairn.halt",
        doc: "should_exit turns true when this file exists (\"none\": no halt file)." },
    KeySpec { section: "exit", key: "signals", ty: KeyType::Bool, default: "true",
        doc: "SIGTERM, SIGUSR1 and SIGUSR2 (what Slurm sends with --signal, and SIGTERM at the time limit) make should_exit true and the next need_checkpoint due, instead of killing the process. SIGUSR1 and SIGUSR2 are taken at cairn_init, SIGTERM at the first should_exit or need_checkpoint; a signal the application already handles or ignores is left to it. false: leave all three alone." },
    KeySpec { section: "reduction", key: "block", ty: KeyType::Bytes, default: "\"64K\"",
        doc: "Size of the blocks each region is cut into (4K to 64M): the unit of checksums, change detection, zero detection and compression." },
    KeySpec { section: "reduction", key: "incremental", ty: KeyType::Bool, default: "false",
        doc: "Store only the blocks that changed since the previous checkpoint of the name (found by comparing xxh3-128 hashes kept in memory); restart reads the last full checkpoint and the incrementals after it." },
    KeySpec { section: "reduction", key: "full_every", ty: KeyType::Count(1), default: "8",
        doc: "With incremental, every n-th checkpoint is full, which bounds the chains restart reads (1: always full)." },
    KeySpec { section: "reduction", key: "compress", ty: KeyType::Choice(&["none", "lz4", "zstd"]), default: "\"none\"",
        doc: "Codec for changed, non-zero blocks on every tier (a block that does not shrink is stored raw)." },
    KeySpec { section: "reduction", key: "global_compress", ty: KeyType::Choice(&["same", "none", "lz4", "zstd"]), default: "\"same\"",
        doc: "Codec for the global tier, e.g. zstd there while node-local copies stay raw; flushes re-encode when it differs (same: as compress)." },
    KeySpec { section: "reduction", key: "level", ty: KeyType::Count(0), default: "0",
        doc: "Zstandard compression level, 1 to 22 (0: Zstandard's default, 3); ignored by lz4." },
    KeySpec { section: "reduction", key: "shuffle", ty: KeyType::Bool, default: "true",
        doc: "Before compressing, group the bytes of each region's elements by significance (using the region's type), so that e.g. float64 exponents compress." },
    KeySpec { section: "security", key: "authenticate", ty: KeyType::Bool, default: "false",
        doc: "Authenticated checkpoints: every rank file index and manifest written carries a keyed MAC and every block a keyed hash (BLAKE3, with the key of key_file), and every one read must, so a checkpoint written by someone without the key is refused, naming the file. Checkpoints written before it was turned on are refused too." },
    KeySpec { section: "security", key: "key_file", ty: KeyType::Path, default: "\"~/.config/cairn/key\"",
        doc: "The key of authenticated checkpoints: 64 hex digits in a file only its owner may read, created (0600, in a 0700 directory) on first use. Rank 0 reads it and hands it to the other ranks. Default: $XDG_CONFIG_HOME/cairn/key, else $HOME/.config/cairn/key." },
    KeySpec { section: "log", key: "level", ty: KeyType::Level, default: "\"warn\"",
        doc: "Messages printed to standard error: error, warn, info, debug or trace." },
];

/// The largest configuration file read: every key set is a few kilobytes.
pub const CONFIG_MAX: u64 = 1 << 20;

/// The lowest `[flush] bandwidth` but 0 (no limit): 1M (1,048,576) bytes a second.
pub const MIN_FLUSH_BANDWIDTH: u64 = 1 << 20;

/// The shortest `[tiers] lock_lease`, seconds.
pub const MIN_LOCK_LEASE: f64 = 2.0;

/// Resolved configuration. It serializes (serde) so that a process can hand the configuration
/// it resolved to another, e.g. the launcher to the sub-coordinators that run the engine on
/// each host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// Node-local tier root, or `None` when disabled or in memory (`local_mem`).
    pub local: Option<PathBuf>,
    /// `[tiers] local = "mem"`: the node-local tier is the shared-memory chunk store.
    pub local_mem: bool,
    /// `[tiers.mem]`.
    pub mem: MemConfig,
    pub global: PathBuf,
    pub fsync_global: bool,
    /// `[tiers] fetch`: restart may read from the global tier.
    pub fetch: bool,
    /// `[tiers] lock_lease`, seconds.
    pub lock_lease: f64,
    /// `[security] authenticate`.
    pub authenticate: bool,
    /// `[security] key_file`; `None`: the default (`auth::default_key_file`).
    pub key_file: Option<PathBuf>,
    pub sim_nodes: usize,
    pub domain_env: Option<String>,
    pub keep: usize,
    pub keep_global: usize,
    pub block: u32,
    pub incremental: bool,
    pub full_every: u64,
    pub compress: String,
    /// `None`: as `compress`.
    pub global_compress: Option<String>,
    pub level: u32,
    pub shuffle: bool,
    pub every: u64,
    pub seconds: f64,
    /// `[checkpoint] seconds = "auto"`.
    pub seconds_auto: bool,
    pub finalize_flush: bool,
    pub flush_every: u64,
    pub flush_seconds: f64,
    pub flush_auto: bool,
    pub flush_sync: bool,
    pub flush_buffer: u64,
    pub flush_bandwidth: u64,
    pub flush_low_priority: bool,
    pub flush_direct: bool,
    pub redundancy_every: u64,
    pub mtbf: f64,
    pub node_mtbf: f64,
    pub restart_cost: f64,
    pub formula: String,
    pub global_share: f64,
    pub time_limit: f64,
    pub exit_margin: f64,
    /// Halt file; `None` when disabled. `Some("")` means the default under the global tier.
    pub halt_file: Option<PathBuf>,
    pub exit_signals: bool,
    pub log_level: String,
    pub redundancy: String,
    pub set_size: usize,
    pub parity: usize,
    pub partner_mode: String,
    /// `CAIRN_*` environment variables that name no configuration section (`CAIRN_ROOT`,
    /// `CAIRN_CFLAGS`, as module systems and package managers set them): not settings, so
    /// left alone, and reported once by [`Config::ignored_env_report`].
    pub ignored_env: Vec<String>,
}

/// `[tiers.mem]`: the shared-memory chunk store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemConfig {
    pub prefix: String,
    pub size: u64,
    pub chunk: u64,
    pub max_files: u32,
    pub spill_dir: Option<PathBuf>,
    pub spill_size: u64,
    /// `store = "process"`.
    pub per_process: bool,
}

impl Default for MemConfig {
    fn default() -> MemConfig {
        MemConfig {
            prefix: "/cairn".into(),
            size: 256 << 20,
            chunk: 1 << 20,
            max_files: 4096,
            spill_dir: None,
            spill_size: 1 << 30,
            per_process: false,
        }
    }
}

/// Environment variables that start with `CAIRN_` but are not configuration keys: the
/// config file, the job, node and process a store or a launched process belongs to, and the
/// restorer's location.
pub const NOT_CONFIG_ENV: &[&str] = &[
    "CAIRN_CONFIG",
    "CAIRN_JOB",
    "CAIRN_NODE",
    "CAIRN_PROC",
    "CAIRN_RESTORE",
];
/// Prefix of the interposer's variables (`CAIRN_FS_PRELOAD`, `CAIRN_FS_FAULT`).
pub const FS_ENV_PREFIX: &str = "CAIRN_FS_";
/// Prefixes of the variables of transparent checkpointing: the checkpoint library's
/// (`CAIRN_CKPT_*`) and the coordinator's (`CAIRN_COORD_*`).
pub const NOT_CONFIG_ENV_PREFIXES: &[&str] = &[FS_ENV_PREFIX, "CAIRN_CKPT_", "CAIRN_COORD_"];

/// The node-local tier as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeLocal<'a> {
    /// `[tiers] local = "none"`.
    None,
    /// A directory root; node i keeps its data under `<root>/node<i>`.
    Dir(&'a Path),
    /// The shared-memory chunk store of each node.
    Mem,
}

/// A raw value before parsing, from TOML or from text.
#[derive(Debug, Clone)]
pub enum Raw {
    Text(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl std::fmt::Display for Raw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Raw::Text(s) => write!(f, "{s:?}"),
            Raw::Int(i) => write!(f, "{i}"),
            Raw::Float(x) => write!(f, "{x}"),
            Raw::Bool(b) => write!(f, "{b}"),
        }
    }
}

/// The user name used in default paths: the passwd name of the effective user id, else
/// `uid<N>`. It comes from the user database, not from `$USER`, so a login shell, a batch
/// job started with a clean environment and `sudo -E` all agree on it.
pub fn user_name() -> String {
    let uid = rustix::process::geteuid().as_raw();
    passwd_name(uid)
        .filter(|u| {
            !u.is_empty()
                && u.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
        })
        .unwrap_or_else(|| format!("uid{uid}"))
}

/// The login name of `uid` in the user database (getpwuid_r), if it has one.
fn passwd_name(uid: libc::uid_t) -> Option<String> {
    let mut buf = vec![0u8; 1024];
    loop {
        // SAFETY: an all-zero passwd is a valid value for getpwuid_r to overwrite.
        let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call; `buf` outlives the use of `pw`.
        let rc = unsafe {
            libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut found)
        };
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        if rc != 0 || found.is_null() || pw.pw_name.is_null() {
            return None;
        }
        // SAFETY: on success pw_name points to a NUL-terminated string inside `buf`.
        let name = unsafe { std::ffi::CStr::from_ptr(pw.pw_name) };
        return name.to_str().ok().map(str::to_string);
    }
}

impl Default for Config {
    fn default() -> Config {
        Config {
            local: Some(PathBuf::from(format!("/dev/shm/cairn-{}", user_name()))),
            local_mem: false,
            mem: MemConfig::default(),
            global: PathBuf::from("./cairn-ckpt"),
            fsync_global: true,
            fetch: true,
            lock_lease: 60.0,
            authenticate: false,
            key_file: None,
            sim_nodes: 0,
            domain_env: None,
            keep: 2,
            keep_global: 0,
            block: 64 << 10,
            incremental: false,
            full_every: 8,
            compress: "none".into(),
            global_compress: None,
            level: 0,
            shuffle: true,
            every: 0,
            seconds: 0.0,
            seconds_auto: false,
            finalize_flush: true,
            flush_every: 0,
            flush_seconds: 0.0,
            flush_auto: false,
            flush_sync: false,
            flush_buffer: 8 << 20,
            flush_bandwidth: 0,
            flush_low_priority: true,
            flush_direct: true,
            redundancy_every: 1,
            mtbf: 0.0,
            node_mtbf: 0.0,
            restart_cost: 0.0,
            formula: "exact".into(),
            global_share: 0.1,
            time_limit: 0.0,
            exit_margin: 60.0,
            halt_file: Some(PathBuf::new()),
            exit_signals: true,
            log_level: "warn".into(),
            redundancy: "single".into(),
            set_size: 0,
            parity: 2,
            partner_mode: "stream".into(),
            ignored_env: Vec::new(),
        }
    }
}

fn parse_number_with_suffix(s: &str, suffixes: &[(&str, f64)]) -> Option<f64> {
    let s = s.trim();
    for (suf, mult) in suffixes {
        if let Some(num) = s.strip_suffix(suf) {
            if let Ok(x) = num.trim().parse::<f64>() {
                return Some(x * mult);
            }
        }
    }
    s.parse::<f64>().ok()
}

impl Config {
    /// The node-local tier: none, a directory, or the shared-memory store.
    pub fn node_local(&self) -> NodeLocal<'_> {
        match (&self.local, self.local_mem) {
            (_, true) => NodeLocal::Mem,
            (Some(p), false) => NodeLocal::Dir(p),
            (None, false) => NodeLocal::None,
        }
    }

    /// Whether checkpoints are written to a node-local tier first.
    pub fn has_local(&self) -> bool {
        self.node_local() != NodeLocal::None
    }

    /// Resolve the configuration: defaults, then the TOML file at `path` (or the one named by
    /// `CAIRN_CONFIG` when `path` is `None`), then `CAIRN_*` environment variables, then
    /// `overrides` (`("section.key", "value")` pairs from the API).
    pub fn resolve(path: Option<&Path>, overrides: &[(String, String)]) -> Result<Config> {
        Config::resolve_from(path, overrides, "the API")
    }

    /// [`Config::resolve`], with `origin` naming where the overrides came from in errors
    /// ("the command line").
    pub fn resolve_from(
        path: Option<&Path>,
        overrides: &[(impl AsRef<str>, impl AsRef<str>)],
        origin: &str,
    ) -> Result<Config> {
        let mut cfg = Config::default();
        let env_path = std::env::var_os("CAIRN_CONFIG")
            .filter(|p| !p.is_empty())
            .map(PathBuf::from);
        if let Some(p) = path.map(Path::to_path_buf).or(env_path) {
            cfg.apply_file(&p)?;
        }
        cfg.apply_env(std::env::vars())?;
        for (k, v) in overrides {
            cfg.set_dotted(k.as_ref(), v.as_ref(), origin)?;
        }
        Ok(cfg)
    }

    /// Apply a TOML file: a regular file (a FIFO or device is refused without waiting in
    /// `open`) of at most [`CONFIG_MAX`] bytes.
    pub fn apply_file(&mut self, path: &Path) -> Result<()> {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        let bad = |why: String| {
            Error::config(format!("cannot read config file {}: {why}", path.display()))
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| bad(e.to_string()))?;
        let md = file.metadata().map_err(|e| bad(e.to_string()))?;
        if !md.is_file() {
            return Err(bad("not a regular file".into()));
        }
        if md.len() > CONFIG_MAX {
            return Err(bad(format!(
                "{} bytes, more than a configuration file may have ({CONFIG_MAX})",
                md.len()
            )));
        }
        let mut text = String::new();
        file.take(CONFIG_MAX + 1)
            .read_to_string(&mut text)
            .map_err(|e| bad(e.to_string()))?;
        if text.len() as u64 > CONFIG_MAX {
            return Err(bad(format!(
                "more than a configuration file may have ({CONFIG_MAX} bytes)"
            )));
        }
        self.apply_toml(&text, &path.display().to_string())
    }

    /// Apply TOML text; `origin` names it in errors.
    pub fn apply_toml(&mut self, text: &str, origin: &str) -> Result<()> {
        let table: toml::Table = text
            .parse()
            .map_err(|e| Error::config(format!("config file {origin} is not valid TOML: {e}")))?;
        for (section, val) in &table {
            let Some(sect) = val.as_table() else {
                return Err(Error::config(format!(
                    "config file {origin}: top-level key {section:?} must be a [section]; sections: {}",
                    sections().join(", ")
                )));
            };
            for (key, v) in sect {
                if let Some(sub) = v.as_table() {
                    // `[tiers.mem]` is the table `mem` inside `[tiers]`.
                    let nested = format!("{section}.{key}");
                    for (k, v) in sub {
                        self.set(&nested, k, toml_raw(v), &format!("config file {origin}"))?;
                    }
                    continue;
                }
                self.set(section, key, toml_raw(v), &format!("config file {origin}"))?;
            }
        }
        Ok(())
    }

    /// Apply `CAIRN_<SECTION>_<KEY>` variables from `vars`. Cairn's own variables that are
    /// not settings (`CAIRN_CONFIG`, `CAIRN_JOB`, `CAIRN_FS_*`, ...) are skipped; a name whose
    /// section is none of Cairn's (`CAIRN_ROOT`, `CAIRN_PREFIX`, as module systems set them)
    /// is not a setting either and goes to `ignored_env`. A known section with an unknown
    /// key (`CAIRN_TIERS_LOCALL`) or a bad value is an error.
    pub fn apply_env(&mut self, vars: impl Iterator<Item = (String, String)>) -> Result<()> {
        let mut vars: Vec<(String, String)> = vars
            .filter(|(k, _)| {
                k.starts_with("CAIRN_")
                    && !NOT_CONFIG_ENV.contains(&k.as_str())
                    && !NOT_CONFIG_ENV_PREFIXES.iter().any(|p| k.starts_with(p))
            })
            .collect();
        vars.sort();
        let known = sections();
        for (name, value) in vars {
            let rest = name["CAIRN_".len()..].to_ascii_lowercase();
            // A key of a nested section: CAIRN_TIERS_MEM_SIZE is [tiers.mem] size.
            let nested = KEYS.iter().find(|k| {
                k.section.contains('.')
                    && rest == format!("{}_{}", k.section.replace('.', "_"), k.key)
            });
            let (section, key) = match nested {
                Some(k) => (k.section, k.key),
                None => rest.split_once('_').unwrap_or((&rest, "")),
            };
            if !known.contains(&section) {
                if !self.ignored_env.contains(&name) {
                    self.ignored_env.push(name);
                }
                continue;
            }
            self.set(
                section,
                key,
                Raw::Text(value.clone()),
                &format!("environment variable {name}"),
            )?;
        }
        Ok(())
    }

    /// The message that reports `ignored_env`, the first time this process asks while there
    /// is something to report; `None` after that, so each process says it once.
    pub fn ignored_env_report(&self) -> Option<String> {
        static REPORTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if self.ignored_env.is_empty() || REPORTED.swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            return None;
        }
        let (s, them) = match self.ignored_env.len() {
            1 => ("", "it names"),
            _ => ("s", "they name"),
        };
        Some(format!(
            "ignoring environment variable{s} {}: {them} no configuration section (sections: {})",
            self.ignored_env.join(", "),
            sections().join(", ")
        ))
    }

    /// Set `section.key` from text (the API form).
    pub fn set_dotted(&mut self, dotted: &str, value: &str, origin: &str) -> Result<()> {
        let (section, key) = dotted.rsplit_once('.').ok_or_else(|| {
            Error::config(format!(
                "config key {dotted:?} from {origin} must be written section.key, e.g. cache.keep"
            ))
        })?;
        self.set(section, key, Raw::Text(value.to_string()), origin)
    }

    /// Set one key, checking that it exists and that the value fits its type.
    pub fn set(&mut self, section: &str, key: &str, raw: Raw, origin: &str) -> Result<()> {
        let spec = find_key(section, key, origin)?;
        let bad = || {
            Error::config(format!(
                "invalid value {raw} for [{section}] {key} from {origin} (expected {})",
                spec.ty.expected()
            ))
        };
        let text = match &raw {
            Raw::Text(s) => Some(s.trim().to_string()),
            _ => None,
        };
        let count = |min: u64| -> Result<u64> {
            let v = match &raw {
                Raw::Int(i) if *i >= 0 => *i as u64,
                Raw::Text(s) => s.trim().parse::<u64>().map_err(|_| bad())?,
                _ => return Err(bad()),
            };
            if v < min {
                return Err(bad());
            }
            Ok(v)
        };
        match (section, key) {
            ("tiers", "local") => {
                let s = text.ok_or_else(bad)?;
                self.local_mem = s == "mem";
                self.local = match s.as_str() {
                    "" => return Err(bad()),
                    "none" | "mem" => None,
                    p => Some(PathBuf::from(p)),
                };
            }
            ("tiers", "global") => {
                let s = text.filter(|s| !s.is_empty()).ok_or_else(bad)?;
                self.global = PathBuf::from(s);
            }
            ("tiers", "fsync_global") => self.fsync_global = parse_bool(&raw).ok_or_else(bad)?,
            ("tiers", "fetch") => self.fetch = parse_bool(&raw).ok_or_else(bad)?,
            ("tiers", "lock_lease") => {
                let v = parse_seconds(&raw).ok_or_else(bad)?;
                // Its heartbeat comes every quarter lease: below 2 s a loaded node's missed
                // beat would let another job take a live job's lock.
                if v < MIN_LOCK_LEASE {
                    return Err(Error::config(format!(
                        "invalid value {raw} for [tiers] lock_lease from {origin} (expected at \
                         least {MIN_LOCK_LEASE} s: the holder renews its lock every quarter \
                         lease, and a shorter one lets a busy job lose its lock)"
                    )));
                }
                self.lock_lease = v;
            }
            ("tiers.mem", "prefix") => {
                let s = text.ok_or_else(bad)?;
                let ok = s.starts_with('/')
                    && s.len() > 1
                    && s.len() < 200
                    && !s.ends_with('/')
                    && !s.split('/').any(|c| c == "." || c == "..");
                if !ok {
                    return Err(Error::config(format!(
                        "invalid value {raw} for [tiers.mem] prefix from {origin} (expected an absolute path other than /, without a trailing slash, . or .., e.g. \"/cairn\")"
                    )));
                }
                self.mem.prefix = s;
            }
            ("tiers.mem", "size") => {
                let v = parse_bytes(&raw).ok_or_else(bad)?;
                if v < 4096.0 {
                    return Err(bad());
                }
                self.mem.size = v as u64;
            }
            ("tiers.mem", "chunk") => {
                let v = parse_bytes(&raw).ok_or_else(bad)? as u64;
                if v < 4096 || v % 4096 != 0 || v > 1 << 30 {
                    return Err(Error::config(format!(
                        "invalid value {raw} for [tiers.mem] chunk from {origin} (expected a multiple of 4K from 4K to 1G)"
                    )));
                }
                self.mem.chunk = v;
            }
            ("tiers.mem", "max_files") => {
                let v = count(1)?;
                if v > 1 << 24 {
                    return Err(bad());
                }
                self.mem.max_files = v as u32;
            }
            ("tiers.mem", "spill_dir") => {
                let s = text.filter(|s| !s.is_empty()).ok_or_else(bad)?;
                self.mem.spill_dir = (s != "none").then(|| PathBuf::from(s));
            }
            ("tiers.mem", "spill_size") => {
                self.mem.spill_size = parse_bytes(&raw).ok_or_else(bad)? as u64
            }
            ("tiers.mem", "store") => {
                self.mem.per_process = choice(spec, &raw).ok_or_else(bad)? == "process"
            }
            ("topology", "sim_nodes") => self.sim_nodes = count(0)? as usize,
            ("topology", "domain_env") => {
                let s = text.ok_or_else(bad)?;
                self.domain_env = if s.is_empty() { None } else { Some(s) };
            }
            ("cache", "keep") => self.keep = count(1)? as usize,
            ("cache", "keep_global") => self.keep_global = count(0)? as usize,
            ("reduction", "block") => {
                let v = parse_bytes(&raw).ok_or_else(bad)?;
                if !(4096.0..=67108864.0).contains(&v) || v.fract() != 0.0 {
                    return Err(Error::config(format!(
                        "invalid value {raw} for [reduction] block from {origin} (expected a size from 4K to 64M)"
                    )));
                }
                self.block = v as u32;
            }
            ("reduction", "incremental") => self.incremental = parse_bool(&raw).ok_or_else(bad)?,
            ("reduction", "full_every") => self.full_every = count(1)?,
            ("reduction", "compress") => self.compress = choice(spec, &raw).ok_or_else(bad)?,
            ("reduction", "global_compress") => {
                let c = choice(spec, &raw).ok_or_else(bad)?;
                self.global_compress = (c != "same").then_some(c);
            }
            ("reduction", "level") => {
                let v = count(0)?;
                if v > 22 {
                    return Err(Error::config(format!(
                        "invalid value {raw} for [reduction] level from {origin} (expected 0, \
                         Zstandard's default, or a level from 1 to 22)"
                    )));
                }
                self.level = v as u32;
            }
            ("reduction", "shuffle") => self.shuffle = parse_bool(&raw).ok_or_else(bad)?,
            ("checkpoint", "every") => self.every = count(0)?,
            ("checkpoint", "seconds") => {
                (self.seconds, self.seconds_auto) = seconds_or_auto(&raw).ok_or_else(bad)?
            }
            ("checkpoint", "finalize") => self.finalize_flush = parse_bool(&raw).ok_or_else(bad)?,
            ("flush", "every") => self.flush_every = count(0)?,
            ("flush", "seconds") => {
                (self.flush_seconds, self.flush_auto) = seconds_or_auto(&raw).ok_or_else(bad)?
            }
            ("flush", "mode") => self.flush_sync = choice(spec, &raw).ok_or_else(bad)? == "sync",
            ("flush", "buffer") => self.flush_buffer = parse_bytes(&raw).ok_or_else(bad)? as u64,
            ("flush", "bandwidth") => {
                let v = parse_bytes(&raw).ok_or_else(bad)? as u64;
                // Below 1M a second the newest checkpoint's flush, which finalize waits for,
                // takes longer than any job: a typo (a unit left out), not a choice.
                if v != 0 && v < MIN_FLUSH_BANDWIDTH {
                    return Err(Error::config(format!(
                        "invalid value {raw} for [flush] bandwidth from {origin} (expected 0, no \
                         limit, or at least 1M bytes per second: finalize waits for the newest \
                         checkpoint's flush at this rate)"
                    )));
                }
                self.flush_bandwidth = v
            }
            ("flush", "priority") => {
                self.flush_low_priority = choice(spec, &raw).ok_or_else(bad)? == "low"
            }
            ("flush", "direct") => self.flush_direct = parse_bool(&raw).ok_or_else(bad)?,
            ("redundancy", "every") => self.redundancy_every = count(1)?,
            ("failure", "mtbf") => self.mtbf = parse_seconds(&raw).ok_or_else(bad)?,
            ("failure", "node_mtbf") => self.node_mtbf = parse_seconds(&raw).ok_or_else(bad)?,
            ("failure", "restart") => self.restart_cost = parse_seconds(&raw).ok_or_else(bad)?,
            ("failure", "formula") => self.formula = choice(spec, &raw).ok_or_else(bad)?,
            ("failure", "global_share") => {
                self.global_share = parse_float(&raw)
                    .filter(|x| (0.0..=1.0).contains(x))
                    .ok_or_else(bad)?
            }
            ("exit", "time_limit") => self.time_limit = parse_seconds(&raw).ok_or_else(bad)?,
            ("exit", "margin") => self.exit_margin = parse_seconds(&raw).ok_or_else(bad)?,
            ("exit", "halt_file") => {
                let s = text.filter(|s| !s.is_empty()).ok_or_else(bad)?;
                self.halt_file = match s.as_str() {
                    "none" => None,
                    "<global>/cairn.halt" => Some(PathBuf::new()),
                    p => Some(PathBuf::from(p)),
                };
            }
            ("exit", "signals") => self.exit_signals = parse_bool(&raw).ok_or_else(bad)?,
            ("redundancy", "scheme") => self.redundancy = choice(spec, &raw).ok_or_else(bad)?,
            ("redundancy", "partner_mode") => {
                self.partner_mode = choice(spec, &raw).ok_or_else(bad)?
            }
            ("redundancy", "set_size") => self.set_size = count(0)? as usize,
            ("redundancy", "parity") => self.parity = count(1)? as usize,
            ("security", "authenticate") => self.authenticate = parse_bool(&raw).ok_or_else(bad)?,
            ("security", "key_file") => {
                let s = text.filter(|s| !s.is_empty()).ok_or_else(bad)?;
                self.key_file = match s.as_str() {
                    "~/.config/cairn/key" => None,
                    p => Some(PathBuf::from(p)),
                };
            }
            ("log", "level") => {
                let s = text.ok_or_else(bad)?.to_ascii_lowercase();
                if !["error", "warn", "info", "debug", "trace"].contains(&s.as_str()) {
                    return Err(bad());
                }
                self.log_level = s;
            }
            _ => unreachable!("every key in KEYS has a setter"),
        }
        Ok(())
    }
}

/// The word a `Choice` key was given, lower-cased, if it is one of its words.
fn choice(spec: &KeySpec, raw: &Raw) -> Option<String> {
    let KeyType::Choice(words) = spec.ty else {
        return None;
    };
    let Raw::Text(s) = raw else { return None };
    let s = s.trim().to_ascii_lowercase();
    words.contains(&s.as_str()).then_some(s)
}

fn toml_raw(v: &toml::Value) -> Raw {
    match v {
        toml::Value::String(s) => Raw::Text(s.clone()),
        toml::Value::Integer(i) => Raw::Int(*i),
        toml::Value::Float(x) => Raw::Float(*x),
        toml::Value::Boolean(b) => Raw::Bool(*b),
        other => Raw::Text(other.to_string()),
    }
}

fn parse_float(raw: &Raw) -> Option<f64> {
    match raw {
        Raw::Int(i) => Some(*i as f64),
        Raw::Float(x) => Some(*x),
        Raw::Text(s) => s.trim().parse::<f64>().ok(),
        Raw::Bool(_) => None,
    }
    .filter(|x| x.is_finite())
}

/// A size in bytes with an optional K/M/G (or KiB/MiB/GiB) suffix.
fn parse_bytes(raw: &Raw) -> Option<f64> {
    let v = match raw {
        Raw::Int(i) if *i >= 0 => *i as f64,
        Raw::Text(s) => parse_number_with_suffix(
            s,
            &[
                ("KiB", 1024.0),
                ("MiB", 1048576.0),
                ("GiB", 1073741824.0),
                ("K", 1024.0),
                ("M", 1048576.0),
                ("G", 1073741824.0),
            ],
        )?,
        _ => return None,
    };
    (v.is_finite() && v >= 0.0 && v.fract() == 0.0).then_some(v)
}

/// A duration in seconds with an optional s/m/h/d/y suffix.
fn parse_seconds(raw: &Raw) -> Option<f64> {
    let v = match raw {
        Raw::Text(s) => parse_number_with_suffix(
            s,
            &[
                ("s", 1.0),
                ("m", 60.0),
                ("h", 3600.0),
                ("d", 86400.0),
                ("y", 365.0 * 86400.0),
            ],
        )?,
        other => parse_float(other)?,
    };
    (v.is_finite() && v >= 0.0).then_some(v)
}

/// A duration, or `auto`: `(seconds, is_auto)`.
fn seconds_or_auto(raw: &Raw) -> Option<(f64, bool)> {
    match raw {
        Raw::Text(s) if s.trim().eq_ignore_ascii_case("auto") => Some((0.0, true)),
        other => parse_seconds(other).map(|v| (v, false)),
    }
}

fn parse_bool(raw: &Raw) -> Option<bool> {
    match raw {
        Raw::Bool(b) => Some(*b),
        Raw::Text(s) => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Some(true),
            "false" | "0" | "no" | "off" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

fn sections() -> Vec<&'static str> {
    let mut s: Vec<&str> = Vec::new();
    for k in KEYS {
        if !s.contains(&k.section) {
            s.push(k.section);
        }
    }
    s
}

fn find_key(section: &str, key: &str, origin: &str) -> Result<&'static KeySpec> {
    if let Some(spec) = KEYS.iter().find(|k| k.section == section && k.key == key) {
        return Ok(spec);
    }
    if (section, key) == ("checkpoint", "chunk") {
        return Err(Error::config(format!(
            "config key [checkpoint] chunk from {origin} is now [reduction] block (CAIRN_REDUCTION_BLOCK)"
        )));
    }
    let in_section: Vec<&str> = KEYS
        .iter()
        .filter(|k| k.section == section)
        .map(|k| k.key)
        .collect();
    if in_section.is_empty() {
        Err(Error::config(format!(
            "unknown config section [{section}] (key {key:?}) from {origin}; sections: {}",
            sections().join(", ")
        )))
    } else {
        Err(Error::config(format!(
            "unknown config key [{section}] {key} from {origin}; keys in [{section}]: {}",
            in_section.join(", ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Iterator<Item = (String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<Vec<_>>()
            .into_iter()
    }

    #[test]
    fn a_resolved_configuration_survives_json() {
        let mut c = Config::default();
        c.apply_toml(
            "[tiers]\nlocal = \"mem\"\n[tiers.mem]\nsize = \"64M\"\nspill_dir = \"/tmp/s\"\n\
             [reduction]\ncompress = \"zstd\"\nincremental = true\n[redundancy]\nscheme = \"rs\"\n",
            "t.toml",
        )
        .unwrap();
        let back: Config = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
        assert_ne!(back, Config::default());
    }

    #[test]
    fn layers_override_in_order() {
        let mut c = Config::default();
        c.apply_toml("[cache]\nkeep = 5\n[tiers]\nlocal = \"/tmp/a\"\n", "t.toml")
            .unwrap();
        assert_eq!(
            (c.keep, c.local.clone()),
            (5, Some(PathBuf::from("/tmp/a")))
        );
        c.apply_env(env(&[
            ("CAIRN_TIERS_LOCAL", "/tmp/b"),
            ("CAIRN_TOPOLOGY_SIM_NODES", "2"),
            ("PATH", "/x"),
        ]))
        .unwrap();
        assert_eq!(
            (c.local.clone(), c.sim_nodes, c.keep),
            (Some(PathBuf::from("/tmp/b")), 2, 5)
        );
        c.set_dotted("cache.keep", "3", "the API").unwrap();
        assert_eq!(c.keep, 3);
    }

    #[test]
    fn env_names_outside_the_sections_are_not_settings() {
        let mut c = Config::default();
        c.apply_env(env(&[
            ("CAIRN_ROOT", "/opt/cairn"),
            ("CAIRN_PREFIX", "/y"),
            ("CAIRN_CFLAGS", "-I/opt/cairn/include"),
            ("CAIRN_HOME", "/opt/cairn"),
            ("CAIRN_CACHE_KEEP", "4"),
        ]))
        .unwrap();
        assert_eq!(c.keep, 4, "a real setting beside them still applies");
        assert_eq!(
            c.ignored_env,
            ["CAIRN_CFLAGS", "CAIRN_HOME", "CAIRN_PREFIX", "CAIRN_ROOT"]
        );
        // A known section with an unknown key is still an error naming it.
        for bad in ["CAIRN_TIERS_LOCALL", "CAIRN_TIERS_MEM_SIZX", "CAIRN_EXIT"] {
            let e = Config::default()
                .apply_env(env(&[(bad, "x")]))
                .unwrap_err()
                .msg;
            assert!(e.contains(bad) && e.contains("unknown config key"), "{e}");
        }
    }

    #[test]
    fn ignored_env_is_reported_once_per_process() {
        let quiet = Config::default();
        assert_eq!(quiet.ignored_env_report(), None, "nothing to report");
        let mut c = Config::default();
        c.apply_env(env(&[("CAIRN_ROOT", "/x"), ("CAIRN_DIR", "/y")]))
            .unwrap();
        let msg = c.ignored_env_report().expect("the first report");
        assert!(
            msg.contains("CAIRN_DIR, CAIRN_ROOT") && msg.contains("no configuration section"),
            "{msg}"
        );
        assert_eq!(c.ignored_env_report(), None, "said once");
    }

    #[test]
    fn user_name_comes_from_the_user_database() {
        let uid = rustix::process::geteuid().as_raw();
        // Read /etc/passwd independently; the environment plays no part.
        let listed = std::fs::read_to_string("/etc/passwd")
            .unwrap_or_default()
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.len() > 2 && f[2] == uid.to_string()).then(|| f[0].to_string())
            });
        let name = user_name();
        match listed {
            Some(pw) => assert_eq!(name, pw),
            None => assert!(
                name == format!("uid{uid}") || passwd_name(uid).is_some(),
                "{name}"
            ),
        }
    }

    #[test]
    fn units_parse() {
        let mut c = Config::default();
        c.apply_toml(
            "[reduction]\nblock = \"64K\"\n[checkpoint]\nseconds = \"2m\"\n",
            "t",
        )
        .unwrap();
        assert_eq!((c.block, c.seconds), (65536, 120.0));
        c.apply_env(env(&[
            ("CAIRN_CHECKPOINT_SECONDS", "1.5"),
            ("CAIRN_TIERS_LOCAL", "none"),
        ]))
        .unwrap();
        assert_eq!((c.seconds, c.local.clone()), (1.5, None));
    }

    #[test]
    fn errors_name_key_value_origin_and_choices() {
        let mut c = Config::default();
        let e = c
            .apply_toml("[tiers]\nlcoal = \"/x\"\n", "my.toml")
            .unwrap_err()
            .msg;
        assert!(
            e.contains("[tiers] lcoal") && e.contains("my.toml") && e.contains("local, global"),
            "{e}"
        );
        let e = c
            .apply_env(env(&[("CAIRN_CACHE_KEEP", "zero")]))
            .unwrap_err()
            .msg;
        assert!(
            e.contains("\"zero\"")
                && e.contains("CAIRN_CACHE_KEEP")
                && e.contains("whole number >= 1"),
            "{e}"
        );
        let e = c
            .apply_env(env(&[("CAIRN_CACHE_KEEP", "0")]))
            .unwrap_err()
            .msg;
        assert!(e.contains("[cache] keep"), "{e}");
        let e = c
            .apply_toml("[tier]\nlocal = \"/x\"\n", "f")
            .unwrap_err()
            .msg;
        assert!(
            e.contains("unknown config section [tier]") && e.contains("tiers"),
            "{e}"
        );
        let e = c
            .apply_toml("[reduction]\nblock = 12\n", "f")
            .unwrap_err()
            .msg;
        assert!(e.contains("4K to 64M"), "{e}");
        let e = c.apply_toml("keep = 1\n", "f").unwrap_err().msg;
        assert!(e.contains("[section]"), "{e}");
        let e = c.set_dotted("keep", "1", "the API").unwrap_err().msg;
        assert!(e.contains("section.key"), "{e}");
        let e = c
            .apply_toml("[log]\nlevel = \"loud\"\n", "f")
            .unwrap_err()
            .msg;
        assert!(e.contains("one of error"), "{e}");
        // A configuration file: not a device, nor a FIFO (no wait in open), nor too large.
        let e = c.apply_file(Path::new("/dev/zero")).unwrap_err().msg;
        assert!(e.contains("/dev/zero: not a regular file"), "{e}");
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        let cpath = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo(3) with a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(cpath.as_ptr(), 0o600) }, 0);
        let e = c.apply_file(&fifo).unwrap_err().msg;
        assert!(e.contains("not a regular file"), "{e}");
        let big = d.path().join("big.toml");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(CONFIG_MAX + 1)
            .unwrap();
        let e = c.apply_file(&big).unwrap_err().msg;
        assert!(e.contains("more than a configuration file may have"), "{e}");
        let e = c.set_dotted("reduction.level", "99", "f").unwrap_err().msg;
        assert!(e.contains("a level from 1 to 22"), "{e}");
        let e = c.set_dotted("flush.bandwidth", "1", "f").unwrap_err().msg;
        assert!(e.contains("at least 1M bytes per second"), "{e}");
        for ok in ["0", "1M", "200M"] {
            c.set_dotted("flush.bandwidth", ok, "f").unwrap();
        }
        assert_eq!(c.flush_bandwidth, 200 << 20);
        assert!(c
            .apply_toml("not toml [", "f")
            .unwrap_err()
            .msg
            .contains("not valid TOML"));
    }

    #[test]
    fn every_key_has_a_setter_and_its_default_parses() {
        for k in KEYS {
            let mut c = Config::default();
            let value = match k.ty {
                KeyType::Choice(_) => k.default.to_string(),
                KeyType::Path | KeyType::OptPath => {
                    format!("{:?}", k.default.replace("<user>", "u"))
                }
                _ => k.default.to_string(),
            };
            let text = format!("[{}]\n{} = {}\n", k.section, k.key, value);
            c.apply_toml(&text, "defaults")
                .unwrap_or_else(|e| panic!("{}.{}: {e}", k.section, k.key));
        }
    }

    #[test]
    fn mem_tier_keys_from_toml_env_and_api() {
        let mut c = Config::default();
        c.apply_toml(
            "[tiers]\nlocal = \"mem\"\n[tiers.mem]\nsize = \"64M\"\nchunk = \"64K\"\nspill_dir = \"/tmp/s\"\n",
            "t.toml",
        )
        .unwrap();
        assert_eq!(c.node_local(), NodeLocal::Mem);
        assert_eq!((c.mem.size, c.mem.chunk), (64 << 20, 64 << 10));
        assert_eq!(c.mem.spill_dir.as_deref(), Some(Path::new("/tmp/s")));
        c.apply_env(env(&[
            ("CAIRN_TIERS_MEM_STORE", "process"),
            ("CAIRN_TIERS_MEM_MAX_FILES", "100"),
            // Not configuration: the store's job name and the interposer's own variables.
            ("CAIRN_JOB", "j1"),
            ("CAIRN_NODE", "2"),
            ("CAIRN_FS_FAULT", "write:3:5"),
            ("CAIRN_CKPT_PRELOAD", "/x/libcairn-ckpt.so"),
            ("CAIRN_COORD_TOKEN", "00ff"),
            ("CAIRN_PROC", "3"),
        ]))
        .unwrap();
        assert!(c.mem.per_process);
        assert_eq!(c.mem.max_files, 100);
        c.set_dotted("tiers.mem.prefix", "/ckfs", "the API")
            .unwrap();
        assert_eq!(c.mem.prefix, "/ckfs");
        let e = c
            .set_dotted("tiers.mem.chunk", "5000", "the API")
            .unwrap_err()
            .to_string();
        assert!(e.contains("multiple of 4K"), "{e}");
        let e = c
            .set_dotted("tiers.mem.prefix", "/", "the API")
            .unwrap_err()
            .to_string();
        assert!(e.contains("[tiers.mem] prefix"), "{e}");
        let e = c
            .apply_toml("[tiers.mem]\nsise = 1\n", "u.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("[tiers.mem] sise") && e.contains("spill_dir"),
            "{e}"
        );
        c.apply_toml("[tiers]\nlocal = \"none\"\n", "t.toml")
            .unwrap();
        assert_eq!(c.node_local(), NodeLocal::None);
    }

    #[test]
    fn docs_list_every_key() {
        let doc = include_str!("../../../docs/config.md");
        for k in KEYS {
            let env = format!(
                "CAIRN_{}_{}",
                k.section.to_uppercase().replace('.', "_"),
                k.key.to_uppercase()
            );
            assert!(
                doc.contains(&format!("`{}`", k.key)) && doc.contains(&env),
                "docs/config.md misses [{}] {}",
                k.section,
                k.key
            );
        }
    }
}
