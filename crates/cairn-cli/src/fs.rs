//! `cairn fs`: the in-memory file system from the command line. `run` starts a program with
//! the interposer (`libcairn-fs.so`) preloaded and the resolved `[tiers.mem]` settings in its
//! environment; `ls`, `df`, `wipe` and `drain` work on the job's shared-memory stores in
//! `/dev/shm` through `cairn_shm::Store`. They handle the files programs keep in a store,
//! not checkpoints, so they do not go through the engine; the engine's own objects (under
//! `.cairn/` in a store) are only listed, and only with `ls --all`.
//!
//! `drain` copies files out of a store while the program writing them may still run. It reads
//! each file's chunks where they lie in shared memory (`Store::chunks`, `chunk_in_place`;
//! spill chunks with `read_chunk`) into a temporary file beside the target, and renames it
//! into place only if the file's size and modification time are the same after the copy as
//! before it. Otherwise it copies again, at most [`RETRIES`] more times, and then reports the
//! file as not drained (exit code 1): a copy is either consistent or not made.

use crate::show::{bytes, table, utc};
use crate::{resolve_config, CheckFailed, GlobalOpts};
use anyhow::{anyhow, bail, Context, Result};
use cairn_core::memstore::{self, SHM_DIR};
use cairn_core::Config;
use cairn_tier::cairn_shm::{self, spill_path, ChunkMeta, FileType, Store, StoreOwner};
use clap::{Args, Subcommand};
use serde_json::json;
use std::ffi::OsString;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Copies of a file `drain` makes after the first one when the file changed meanwhile.
pub const RETRIES: u32 = 3;

/// Exit codes of `cairn fs`.
const OK: u8 = 0;
const FAILED: u8 = 1;
const USAGE: u8 = 2;
/// `cairn fs run`: the command could not be started (as the shells and env(1) report it).
const NOT_EXECUTABLE: u8 = 126;
const NOT_FOUND: u8 = 127;

pub const HELP: &str = "\
The in-memory file system: one POSIX shared-memory store per user, job and (simulated) node,
/dev/shm/cairn-<uid>-<job>-n<node> (or -p<k> with [tiers.mem] store = \"process\"). Programs
run under the interposer keep the files they create under [tiers.mem] prefix (default /cairn)
in it, at memory speed; the store outlives them (not a reboot). The job is CAIRN_JOB, else
SLURM_JOB_ID, else \"local\"; ls, df, wipe and drain work on every store of the job found in
/dev/shm, or on one with --node.

  cairn fs run -- ./writer --out /cairn/ckpt
  cairn fs ls
  cairn fs drain --to /scratch/me/out
  cairn fs wipe

Exit codes:
  0    success
  1    drain: some files changed while they were copied, every time; they were not drained
  2    usage or configuration error, no store of the job, or a storage error
  126  run: the command could not be executed
  127  run: the command was not found
  (run otherwise exits as the command does: it replaces cairn)";

const RUN_HELP: &str = "\
Sets LD_PRELOAD to libcairn-fs.so (found beside the cairn binary, in ../lib, or named by
CAIRN_FS_PRELOAD; prepended to any LD_PRELOAD already set), exports the resolved [tiers.mem]
settings as CAIRN_TIERS_MEM_PREFIX, _SIZE, _CHUNK, _MAX_FILES, _SPILL_DIR (unset when it is
none), _SPILL_SIZE, _STORE and [topology] sim_nodes as CAIRN_TOPOLOGY_SIM_NODES, and then
executes the command in place of cairn, so its exit status and signals are the command's
own. Under mpirun, put cairn fs run after mpirun's options (mpirun -n 4 cairn fs run --
./app): each rank then uses its (simulated) node's store.";

const DRAIN_HELP: &str = "\
Copies files from the store to DIR (default: <[tiers] global>/fs/node<N>/, or fs/process<K>/
for a per-process store), keeping their paths relative to the prefix: /cairn/run/a lands in
DIR/run/a. Without PATH, every file except the engine's objects (.cairn/) is drained. Each
file is written to a temporary file and renamed into place (files 0600, new directories
0700, synced when [tiers] fsync_global is true). Pool chunks are read where they lie in
shared memory, spill chunks from the spill file.

It can run beside the program that writes the files: by default it lowers its CPU priority
to nice 19 ([flush] priority) and writes at most [flush] bandwidth bytes per second (0: no
limit). A file written while it was copied (the store counts writes begun and ended) is
copied again, up to 3 more times, and then reported as not drained (exit code 1). With several stores, --to
needs --node.";

#[derive(Args, Debug)]
pub struct FsArgs {
    #[command(subcommand)]
    cmd: FsCmd,
}

#[derive(Subcommand, Debug)]
enum FsCmd {
    /// Run a command with the interposer loaded: the files it keeps under the prefix go to
    /// the store
    #[command(after_help = RUN_HELP)]
    Run {
        /// The command and its arguments (put -- before them)
        #[arg(
            required = true,
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "CMD"
        )]
        cmd: Vec<OsString>,
    },
    /// List the files in the job's stores: path as programs see it, size, chunks (how many
    /// in the spill file), modification time
    Ls {
        /// Only this file, or the files under this directory (/cairn/x or x)
        path: Option<String>,
        /// Only the store of this (simulated) node
        #[arg(long, value_name = "N")]
        node: Option<u32>,
        /// Also the engine's objects (under .cairn/)
        #[arg(long)]
        all: bool,
        /// Print a JSON array of files instead of tables
        #[arg(long)]
        json: bool,
    },
    /// Space in the job's stores: pool and spill size, used and free, files, chunk size,
    /// NUMA nodes, repairs after processes died holding the store's lock
    Df {
        /// Only the store of this (simulated) node
        #[arg(long, value_name = "N")]
        node: Option<u32>,
        /// Print a JSON array of stores instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Remove the job's stores and their spill files (all of them by default), e.g. to
    /// simulate a lost node; processes still attached keep their mapping
    Wipe {
        /// Only the store of this (simulated) node
        #[arg(long, value_name = "N", conflicts_with = "all_nodes")]
        node: Option<u32>,
        /// Every store of the job (the default)
        #[arg(long)]
        all_nodes: bool,
    },
    /// Copy files out of the store(s) to a directory, reading chunks in place, beside the
    /// running program
    #[command(after_help = DRAIN_HELP)]
    Drain(DrainArgs),
}

#[derive(Args, Debug)]
struct DrainArgs {
    /// Files or directories to drain (/cairn/x or x); default: every file but the engine's
    #[arg(value_name = "PATH")]
    paths: Vec<String>,
    /// Target directory (default: <[tiers] global>/fs/node<N>)
    #[arg(long, value_name = "DIR")]
    to: Option<PathBuf>,
    /// Only the store of this (simulated) node
    #[arg(long, value_name = "N")]
    node: Option<u32>,
    /// Bytes per second to write at most, e.g. 200M (default: [flush] bandwidth; 0: no limit)
    #[arg(long, value_name = "B")]
    bandwidth: Option<String>,
    /// CPU priority: low (nice 19) or normal (default: [flush] priority, low)
    #[arg(long, value_parser = ["low", "normal"])]
    priority: Option<String>,
    /// Print a JSON object instead of text
    #[arg(long)]
    json: bool,
}

/// Run one `cairn fs` command; returns the exit code (`run` does not return when the command
/// starts).
pub fn main(g: &GlobalOpts, args: &FsArgs) -> u8 {
    let res = match &args.cmd {
        FsCmd::Run { cmd } => return run(g, cmd),
        FsCmd::Ls {
            path,
            node,
            all,
            json,
        } => ls(g, path.as_deref(), *node, *all, *json),
        FsCmd::Df { node, json } => df(g, *node, *json),
        FsCmd::Wipe { node, .. } => wipe(g, *node),
        FsCmd::Drain(a) => drain(g, a),
    };
    match res {
        Ok(()) => OK,
        Err(e) if e.is::<CheckFailed>() => FAILED,
        Err(e) => {
            eprintln!("cairn: error: {e:#}");
            USAGE
        }
    }
}

/// The configuration; `--local` never applies (the store is named by the job), `--global`
/// only where files go to the global tier.
fn config(g: &GlobalOpts, global_applies: bool) -> Result<Config> {
    if g.local.is_some() {
        bail!(
            "--local does not apply to cairn fs: the job's stores are found by CAIRN_JOB / \
             SLURM_JOB_ID; [tiers.mem] in --config or CAIRN_TIERS_MEM_* sets their sizes"
        );
    }
    if g.global.is_some() && !global_applies {
        bail!("--global applies to cairn fs drain only");
    }
    resolve_config(g)
}

// ---- run ------------------------------------------------------------------------------------

fn run(g: &GlobalOpts, cmd: &[OsString]) -> u8 {
    let prepared = config(g, false).and_then(|cfg| prepare(&cfg, cmd));
    let mut command = match prepared {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cairn: error: {e:#}");
            return USAGE;
        }
    };
    // Only returns when the command could not be executed.
    let e = command.exec();
    eprintln!(
        "cairn: error: cannot run {}: {e}",
        Path::new(&cmd[0]).display()
    );
    if e.kind() == std::io::ErrorKind::NotFound {
        NOT_FOUND
    } else {
        NOT_EXECUTABLE
    }
}

/// The command with the interposer preloaded and `[tiers.mem]` in its environment.
fn prepare(cfg: &Config, cmd: &[OsString]) -> Result<Command> {
    let lib = cairn_shm::preload_library().ok_or_else(|| {
        anyhow!(
            "the interposer libcairn-fs.so was not found beside {} or in ../lib: build it with \
             `cargo build -p cairn-shm` (it is put in target/<profile>/) or name it with \
             CAIRN_FS_PRELOAD",
            std::env::current_exe()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|_| "the cairn binary".into())
        )
    })?;
    if !lib.is_file() {
        bail!(
            "the interposer {} (CAIRN_FS_PRELOAD) is not a file",
            lib.display()
        );
    }
    // ld.so separates LD_PRELOAD entries with spaces or colons, so neither may be in the path.
    let lib_s = lib
        .to_str()
        .filter(|s| !s.contains([' ', ':']))
        .ok_or_else(|| {
            anyhow!(
                "the interposer's path {} cannot go into LD_PRELOAD (spaces, colons or not UTF-8)",
                lib.display()
            )
        })?;
    let mut preload = OsString::from(lib_s);
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let m = &cfg.mem;
    let mut c = Command::new(&cmd[0]);
    c.args(&cmd[1..])
        .env("LD_PRELOAD", preload)
        .env("CAIRN_TIERS_MEM_PREFIX", &m.prefix)
        .env("CAIRN_TIERS_MEM_SIZE", m.size.to_string())
        .env("CAIRN_TIERS_MEM_CHUNK", m.chunk.to_string())
        .env("CAIRN_TIERS_MEM_MAX_FILES", m.max_files.to_string())
        .env("CAIRN_TIERS_MEM_SPILL_SIZE", m.spill_size.to_string())
        .env(
            "CAIRN_TIERS_MEM_STORE",
            if m.per_process { "process" } else { "node" },
        )
        .env("CAIRN_TOPOLOGY_SIM_NODES", cfg.sim_nodes.to_string());
    // No spill directory is the interposer's default; the variable is left out rather than
    // set to "none".
    match &m.spill_dir {
        Some(d) => c.env("CAIRN_TIERS_MEM_SPILL_DIR", d),
        None => c.env_remove("CAIRN_TIERS_MEM_SPILL_DIR"),
    };
    Ok(c)
}

// ---- finding and attaching stores -----------------------------------------------------------

/// One store of the job.
struct Found {
    owner: StoreOwner,
    name: String,
}

impl Found {
    /// `/dev/shm/cairn-0-job-n0 (node 0)`.
    fn describe(&self) -> String {
        format!("{} ({})", self.file().display(), owner_phrase(self.owner))
    }

    fn file(&self) -> PathBuf {
        Path::new(SHM_DIR).join(self.name.trim_start_matches('/'))
    }

    fn node(&self) -> Option<u32> {
        match self.owner {
            StoreOwner::Node(n) => Some(n),
            StoreOwner::Process(_) => None,
        }
    }

    fn process(&self) -> Option<u32> {
        match self.owner {
            StoreOwner::Node(_) => None,
            StoreOwner::Process(p) => Some(p),
        }
    }

    /// Attach without creating; `populate` maps the pool with its page tables filled.
    fn attach(&self, cfg: &Config, populate: bool) -> Result<Store> {
        let mut sc = memstore::store_config(cfg, self.owner);
        sc.create = false;
        sc.populate = populate;
        Store::open(&sc).with_context(|| format!("cannot attach {}", self.describe()))
    }

    /// The spill file, where this configuration puts it.
    fn spill(&self, cfg: &Config) -> Option<PathBuf> {
        cfg.mem
            .spill_dir
            .as_deref()
            .map(|d| spill_path(d, &self.name))
    }
}

fn owner_phrase(o: StoreOwner) -> String {
    match o {
        StoreOwner::Node(n) => format!("node {n}"),
        StoreOwner::Process(p) => format!("process {p}"),
    }
}

/// How the job was chosen, for messages.
fn job_phrase() -> String {
    let job = memstore::job_name();
    let from = if std::env::var("CAIRN_JOB").is_ok_and(|v| !v.is_empty()) {
        "from CAIRN_JOB"
    } else if std::env::var("SLURM_JOB_ID").is_ok_and(|v| !v.is_empty()) {
        "from SLURM_JOB_ID"
    } else {
        "neither CAIRN_JOB nor SLURM_JOB_ID is set"
    };
    format!("job {job:?} ({from})")
}

/// The job's stores in /dev/shm, or only node `node`'s.
fn find(node: Option<u32>) -> Result<Vec<Found>> {
    let all = memstore::job_stores().with_context(|| format!("cannot list {SHM_DIR}"))?;
    Ok(all
        .into_iter()
        .filter(|(o, _)| node.map_or(true, |n| *o == StoreOwner::Node(n)))
        .map(|(owner, name)| Found { owner, name })
        .collect())
}

/// What was looked for and why there: no store of the job (or of node `node`).
fn none_found(node: Option<u32>) -> String {
    let looked = match node {
        Some(n) => format!(
            "{SHM_DIR}{}",
            memstore::store_config(&Config::default(), StoreOwner::Node(n)).name
        ),
        None => memstore::job_pattern(),
    };
    format!(
        "no shared-memory store of {} (looked for {looked}); CAIRN_JOB, else SLURM_JOB_ID, \
         selects the job",
        job_phrase()
    )
}

/// As [`find`]; none found is an error naming what was looked for.
fn stores(node: Option<u32>) -> Result<Vec<Found>> {
    let found = find(node)?;
    if found.is_empty() {
        bail!("{}", none_found(node));
    }
    Ok(found)
}

/// A path given on the command line, relative to the mount point and normalised: `/cairn/x`
/// (under the prefix) or `x` (relative to it).
fn store_path(prefix: &str, arg: &str) -> Result<String> {
    let rel = if arg == prefix {
        ""
    } else if let Some(rest) = arg.strip_prefix(prefix).and_then(|r| r.strip_prefix('/')) {
        rest
    } else if arg.starts_with('/') {
        bail!("{arg} is not under the mount point {prefix} ([tiers.mem] prefix)");
    } else {
        arg
    };
    cairn_shm::normalize(rel).with_context(|| format!("bad path {arg}"))
}

/// The path as programs under the interposer see it.
fn shown(prefix: &str, rel: &str) -> String {
    format!("{}/{rel}", prefix.trim_end_matches('/'))
}

fn is_engine(rel: &str) -> bool {
    rel == cairn_tier::ENGINE_DIR
        || rel
            .strip_prefix(cairn_tier::ENGINE_DIR)
            .is_some_and(|r| r.starts_with('/'))
}

/// The regular files at or under `rel` ("" for all) in `store`; `None` when nothing is there.
/// The engine's objects are left out unless `engine` is set or `rel` is among them.
fn files_under(store: &Store, rel: &str, engine: bool) -> Result<Option<Vec<String>>> {
    let keep = |p: &String| engine || is_engine(rel) || !is_engine(p);
    if rel.is_empty() {
        return Ok(Some(store.walk("")?.into_iter().filter(keep).collect()));
    }
    match store.stat(rel) {
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.into()),
        Ok(st) if st.kind == FileType::File => Ok(Some(vec![rel.to_string()])),
        Ok(_) => Ok(Some(store.walk(rel)?.into_iter().filter(keep).collect())),
    }
}

// ---- ls -------------------------------------------------------------------------------------

/// One file as `ls` shows it.
struct Listed {
    path: String,
    size: u64,
    chunks: usize,
    spill_chunks: usize,
    mtime_ns: i64,
}

/// The files at or under `rel` in one store, with their chunks; files removed meanwhile are
/// left out.
fn list_store(store: &Store, prefix: &str, rel: &str, all: bool) -> Result<Option<Vec<Listed>>> {
    let Some(paths) = files_under(store, rel, all)? else {
        return Ok(None);
    };
    let mut out = Vec::new();
    for p in paths {
        let Ok(fh) = store.open_existing(&p) else {
            continue;
        };
        let (Ok(st), Ok(chunks)) = (store.fstat(fh), store.chunks(fh)) else {
            continue;
        };
        out.push(Listed {
            path: shown(prefix, &p),
            size: st.size,
            chunks: chunks.len(),
            spill_chunks: chunks.iter().filter(|c| c.in_spill != 0).count(),
            mtime_ns: st.mtime_ns,
        });
    }
    Ok(Some(out))
}

/// `2026-11-21 20:47:38.123` UTC.
fn mtime(ns: i64) -> String {
    let ms = (ns.max(0) / 1_000_000) as u64;
    format!("{}.{:03}", utc(ms), ms % 1000)
}

fn ls(g: &GlobalOpts, path: Option<&str>, node: Option<u32>, all: bool, json: bool) -> Result<()> {
    let cfg = config(g, false)?;
    let prefix = cfg.mem.prefix.as_str();
    let rel = match path {
        Some(p) => store_path(prefix, p)?,
        None => String::new(),
    };
    let found = stores(node)?;
    let mut rows = Vec::new();
    let mut text = String::new();
    let mut any = false;
    for f in &found {
        let store = f.attach(&cfg, false)?;
        let Some(files) = list_store(&store, prefix, &rel, all)? else {
            continue;
        };
        any = true;
        let total: u64 = files.iter().map(|l| l.size).sum();
        text.push_str(&format!(
            "{}: {} file{}, {}\n",
            f.describe(),
            files.len(),
            if files.len() == 1 { "" } else { "s" },
            bytes(total)
        ));
        let mut t = vec![vec![
            "PATH".to_string(),
            "SIZE".into(),
            "CHUNKS".into(),
            "SPILL".into(),
            "MODIFIED (UTC)".into(),
        ]];
        for l in &files {
            t.push(vec![
                l.path.clone(),
                bytes(l.size),
                l.chunks.to_string(),
                l.spill_chunks.to_string(),
                mtime(l.mtime_ns),
            ]);
            rows.push(json!({
                "store": f.file(),
                "node": f.node(),
                "process": f.process(),
                "path": l.path,
                "size": l.size,
                "chunks": l.chunks,
                "spill_chunks": l.spill_chunks,
                "mtime_unix_ns": l.mtime_ns,
            }));
        }
        if files.is_empty() {
            text.push_str("  (no files)\n");
        } else {
            for line in table(&t).lines() {
                text.push_str(&format!("  {line}\n"));
            }
        }
    }
    if let (Some(p), false) = (path, any) {
        bail!(
            "no file or directory {p} in {}",
            found
                .iter()
                .map(Found::describe)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print!("{text}");
    }
    Ok(())
}

// ---- df -------------------------------------------------------------------------------------

fn df(g: &GlobalOpts, node: Option<u32>, json: bool) -> Result<()> {
    let cfg = config(g, false)?;
    let mut rows = Vec::new();
    let mut t = vec![[
        "STORE", "OWNER", "POOL", "USED", "FREE", "SPILL", "USED", "FREE", "FILES", "CHUNK",
        "NUMA", "REPAIRS",
    ]
    .map(String::from)
    .to_vec()];
    for f in stores(node)? {
        let store = f.attach(&cfg, false)?;
        let u = store
            .usage()
            .with_context(|| format!("cannot read the usage of {}", f.describe()))?;
        let h = store.header();
        let cs = u.chunk_size;
        let pool = u.mem_chunks * cs;
        let pool_free = u.mem_free * cs;
        let spill = u.spill_chunks * cs;
        // The header's free count: the usage reports a missing spill file as full.
        let spill_free = (h.spill_top as u64).min(u.spill_chunks) * cs;
        let spill_file = f.spill(&cfg).filter(|_| spill > 0);
        t.push(vec![
            f.file().display().to_string(),
            owner_phrase(f.owner),
            bytes(pool),
            bytes(pool - pool_free),
            bytes(pool_free),
            if spill > 0 { bytes(spill) } else { "-".into() },
            if spill > 0 {
                bytes(spill - spill_free)
            } else {
                "-".into()
            },
            if spill > 0 {
                bytes(spill_free)
            } else {
                "-".into()
            },
            format!("{}/{}", u.files_used, u.max_files),
            bytes(cs),
            u.numa_nodes.to_string(),
            u.repairs.to_string(),
        ]);
        rows.push(json!({
            "store": f.file(),
            "node": f.node(),
            "process": f.process(),
            "pool_bytes": pool,
            "pool_used": pool - pool_free,
            "pool_free": pool_free,
            "spill_bytes": spill,
            "spill_used": spill - spill_free,
            "spill_free": spill_free,
            "spill_file": spill_file,
            "files_used": u.files_used,
            "max_files": u.max_files,
            "chunk_size": cs,
            "numa_nodes": u.numa_nodes,
            "repairs": u.repairs,
            "per_process": u.per_process,
        }));
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print!("{}", table(&t));
    }
    Ok(())
}

// ---- wipe -----------------------------------------------------------------------------------

fn wipe(g: &GlobalOpts, node: Option<u32>) -> Result<()> {
    let cfg = config(g, false)?;
    let found = find(node)?;
    if found.is_empty() {
        // Nothing left to remove is what wipe is for: say so and succeed.
        println!("nothing to wipe: {}", none_found(node));
        return Ok(());
    }
    for f in &found {
        // Whether it has a spill file this configuration does not know about.
        let spill_chunks = f.attach(&cfg, false).map(|s| s.header().spill_chunks).ok();
        let spill = f.spill(&cfg);
        let spill_existed = spill.as_ref().is_some_and(|p| p.exists());
        Store::wipe(&f.name, spill.as_deref())
            .with_context(|| format!("cannot wipe {}", f.describe()))?;
        println!("removed {}", f.describe());
        // The file API's staging directory beside the store (its ranks' routed files) is
        // the node's too.
        let files = Path::new("/dev/shm").join(format!("{}.files", f.name.trim_start_matches('/')));
        if files.is_dir() {
            std::fs::remove_dir_all(&files)
                .with_context(|| format!("cannot remove {}", files.display()))?;
            println!("removed {}", files.display());
        }
        match spill {
            Some(p) if spill_existed => println!("removed {}", p.display()),
            None if spill_chunks.is_some_and(|n| n > 0) => eprintln!(
                "cairn: warning: {} had a spill file, but [tiers.mem] spill_dir is \"none\" \
                 here; remove <spill_dir>/{}.spill where it was created",
                f.describe(),
                f.name.trim_start_matches('/')
            ),
            _ => {}
        }
    }
    Ok(())
}

// ---- drain ----------------------------------------------------------------------------------

/// What happened to one file.
enum Outcome {
    Drained { attempts: u32, bytes: u64 },
    NotDrained(String),
}

/// The copy of one store.
struct StoreDrain {
    to: PathBuf,
    drained: Vec<(String, PathBuf, u64, u32)>,
    not_drained: Vec<(String, String)>,
    bytes: u64,
}

/// Where drained files and the copier's throttle stand.
struct Copier {
    fsync: bool,
    bandwidth: u64,
    t0: Instant,
    /// Bytes written so far, for the bandwidth limit.
    done: u64,
    /// For spill chunks.
    buf: Vec<u8>,
}

fn drain(g: &GlobalOpts, a: &DrainArgs) -> Result<()> {
    let mut cfg = config(g, true)?;
    if let Some(b) = &a.bandwidth {
        cfg.set_dotted("flush.bandwidth", b, "option --bandwidth")?;
    }
    if let Some(p) = &a.priority {
        cfg.set_dotted("flush.priority", p, "option --priority")?;
    }
    let found = stores(a.node)?;
    if a.to.is_some() && found.len() > 1 {
        bail!(
            "--to names one directory but the job has {} stores ({}): add --node",
            found.len(),
            found
                .iter()
                .map(|f| owner_phrase(f.owner))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let prefix = cfg.mem.prefix.clone();
    let rels: Vec<String> = a
        .paths
        .iter()
        .map(|p| store_path(&prefix, p))
        .collect::<Result<_>>()?;
    if cfg.flush_low_priority {
        cairn_core::flush::lower_priority();
    }
    let mut copier = Copier {
        fsync: cfg.fsync_global,
        bandwidth: cfg.flush_bandwidth,
        t0: Instant::now(),
        done: 0,
        buf: Vec::new(),
    };
    // What to copy from each store; a PATH that no store holds is an error before anything is
    // copied.
    let mut plan = Vec::new();
    let mut seen = vec![false; rels.len()];
    for f in &found {
        let store = f.attach(&cfg, true)?;
        let mut files = Vec::new();
        if rels.is_empty() {
            files = files_under(&store, "", false)?.unwrap_or_default();
        }
        for (i, rel) in rels.iter().enumerate() {
            if let Some(fs) = files_under(&store, rel, false)? {
                files.extend(fs);
                seen[i] = true;
            }
        }
        files.sort();
        files.dedup();
        plan.push((f, store, files));
    }
    if let Some(i) = seen.iter().position(|s| !s) {
        bail!(
            "no file or directory {} in {}",
            a.paths[i],
            found
                .iter()
                .map(Found::describe)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let mut report = Vec::new();
    for (f, store, files) in plan {
        let to = match &a.to {
            Some(d) => d.clone(),
            None => cfg.global.join("fs").join(match f.owner {
                StoreOwner::Node(n) => format!("node{n}"),
                StoreOwner::Process(p) => format!("process{p}"),
            }),
        };
        let mut sd = StoreDrain {
            to: to.clone(),
            drained: Vec::new(),
            not_drained: Vec::new(),
            bytes: 0,
        };
        for rel in files {
            let target = to.join(&rel);
            let outcome = copier.file(&store, &rel, &target).with_context(|| {
                format!(
                    "cannot drain {} from {} to {}",
                    shown(&prefix, &rel),
                    f.describe(),
                    target.display()
                )
            })?;
            match outcome {
                Outcome::Drained { attempts, bytes } => {
                    sd.bytes += bytes;
                    sd.drained
                        .push((shown(&prefix, &rel), target, bytes, attempts));
                }
                Outcome::NotDrained(why) => sd.not_drained.push((shown(&prefix, &rel), why)),
            }
        }
        report.push((f, sd));
    }
    let secs = copier.t0.elapsed().as_secs_f64();
    let total: u64 = report.iter().map(|(_, s)| s.bytes).sum();
    let nfiles: usize = report.iter().map(|(_, s)| s.drained.len()).sum();
    let failed: usize = report.iter().map(|(_, s)| s.not_drained.len()).sum();
    let rate = if secs > 0.0 { total as f64 / secs } else { 0.0 };
    if a.json {
        let stores: Vec<_> = report
            .iter()
            .map(|(f, s)| {
                json!({
                    "store": f.file(),
                    "node": f.node(),
                    "process": f.process(),
                    "to": s.to,
                    "files": s.drained.iter().map(|(p, t, b, n)| json!({
                        "path": p, "target": t, "bytes": b, "attempts": n,
                    })).collect::<Vec<_>>(),
                    "not_drained": s.not_drained.iter().map(|(p, why)| json!({
                        "path": p, "reason": why,
                    })).collect::<Vec<_>>(),
                    "bytes": s.bytes,
                })
            })
            .collect();
        let out = json!({
            "stores": stores,
            "files": nfiles,
            "not_drained": failed,
            "bytes": total,
            "seconds": secs,
            "bytes_per_sec": rate,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        for (f, s) in &report {
            println!("{} -> {}", f.describe(), s.to.display());
            for (p, t, b, n) in &s.drained {
                let again = if *n > 1 {
                    format!(" (copied {n} times: it changed meanwhile)")
                } else {
                    String::new()
                };
                println!("  {p} -> {} ({}){again}", t.display(), bytes(*b));
            }
            for (p, why) in &s.not_drained {
                println!("  {p}: NOT DRAINED: {why}");
            }
        }
        println!(
            "drained {nfiles} file{} ({}) in {secs:.2} s, {}/s{}",
            if nfiles == 1 { "" } else { "s" },
            bytes(total),
            bytes(rate as u64),
            if failed > 0 {
                format!("; {failed} not drained")
            } else {
                String::new()
            }
        );
    }
    if failed > 0 {
        eprintln!(
            "cairn: {failed} file{} changed every time {} copied; not drained",
            if failed == 1 { "" } else { "s" },
            if failed == 1 { "it was" } else { "they were" }
        );
        return Err(CheckFailed.into());
    }
    Ok(())
}

impl Copier {
    /// Copy one file of the store to `target`, through a temporary file renamed into place
    /// once the store's file is seen unchanged across the copy.
    fn file(&mut self, store: &Store, rel: &str, target: &Path) -> Result<Outcome> {
        // Paths come from the store's file table; none may lead out of the target directory.
        cairn_tier::check_key(rel).map_err(|m| anyhow!("{m}"))?;
        let dir = target.parent().expect("a target inside the directory");
        make_dirs(dir)?;
        let base = target
            .file_name()
            .expect("a file name")
            .to_string_lossy()
            .into_owned();
        let tmp = dir.join(format!(".{base}.drain.{}", std::process::id()));
        for attempt in 1..=1 + RETRIES {
            let fh = match store.open_existing(rel) {
                Ok(fh) => fh,
                Err(e) if e.is_not_found() => {
                    return Ok(Outcome::NotDrained("removed while it was drained".into()))
                }
                Err(e) => return Err(e.into()),
            };
            let Ok(before) = store.fstat(fh) else {
                continue;
            };
            if before.writes.0 != before.writes.1 {
                // A write is in flight: its bytes may be half there.
                std::thread::sleep(std::time::Duration::from_millis(20));
                continue;
            }
            let Ok(chunks) = store.chunks(fh) else {
                continue;
            };
            if chunks.iter().map(|c| c.length).sum::<u64>() != before.size {
                continue;
            }
            let res = self.copy(store, &chunks, &tmp);
            if let Err(e) = res {
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
            // The handle goes stale when the file is removed or replaced meanwhile; the
            // write counters change with every write begun, even one that overwrites bytes
            // without growing the file.
            let same = store.fstat(fh).is_ok_and(|after| {
                (after.size, after.mtime_ns, after.writes)
                    == (before.size, before.mtime_ns, before.writes)
            });
            if !same {
                let _ = std::fs::remove_file(&tmp);
                continue;
            }
            std::fs::rename(&tmp, target)
                .with_context(|| format!("cannot rename {} into place", tmp.display()))?;
            if self.fsync {
                File::open(dir)
                    .and_then(|d| d.sync_all())
                    .with_context(|| format!("cannot sync {}", dir.display()))?;
            }
            return Ok(Outcome::Drained {
                attempts: attempt,
                bytes: before.size,
            });
        }
        Ok(Outcome::NotDrained(format!(
            "it was written during each of {} copies",
            1 + RETRIES
        )))
    }

    /// Write the chunks to a new file `tmp` (0600), pool chunks straight from shared memory.
    fn copy(&mut self, store: &Store, chunks: &[ChunkMeta], tmp: &Path) -> Result<()> {
        let mut out = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(tmp)
            .with_context(|| format!("cannot create {}", tmp.display()))?;
        for c in chunks {
            let bytes = if c.in_spill != 0 {
                let n = c.length as usize;
                if self.buf.len() < n {
                    self.buf.resize(n, 0);
                }
                store.read_chunk(c, &mut self.buf)?;
                &self.buf[..n]
            } else {
                store.chunk_in_place(c)
            };
            out.write_all(bytes)
                .with_context(|| format!("cannot write {}", tmp.display()))?;
            self.done += c.length;
            cairn_core::flush::throttle(self.t0, self.done, self.bandwidth);
        }
        if self.fsync {
            out.sync_all()
                .with_context(|| format!("cannot sync {}", tmp.display()))?;
        }
        Ok(())
    }
}

/// Create `dir` and its missing parents, 0700.
fn make_dirs(dir: &Path) -> Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_taken_under_the_prefix_or_relative_to_it() {
        assert_eq!(store_path("/cairn", "/cairn").unwrap(), "");
        assert_eq!(store_path("/cairn", "/cairn/a/b").unwrap(), "a/b");
        assert_eq!(store_path("/cairn", "a//./b/").unwrap(), "a/b");
        assert!(store_path("/cairn", "/cairnx/a").is_err());
        assert!(store_path("/cairn", "/tmp/a").is_err());
        assert!(store_path("/cairn", "../a").is_err());
        assert_eq!(shown("/cairn", "a/b"), "/cairn/a/b");
    }

    #[test]
    fn engine_objects_are_recognised() {
        assert!(is_engine(".cairn"));
        assert!(is_engine(".cairn/heat/v1/rank0.ckpt"));
        assert!(!is_engine(".cairnx/a"));
        assert!(!is_engine("a/.cairn/b"));
    }
}
