//! The job's process images as checkpoints of Cairn's engine: [`Images`] runs one
//! [`Engine`] per process index, as ranks of one job (with `[topology] sim_nodes` set to the
//! launch's node count so that rank `i` lives on the node process `i` runs on). A checkpoint of the job is then an ordinary
//! engine checkpoint named after the job, one part per process holding its image as one byte
//! region, and everything the engine does for application data applies to it: the
//! node-local tier (a directory or the shared-memory store), redundancy across the simulated
//! nodes, flushes to the global tier, compression and incremental block hashing.
//!
//! [`Images::start_ranks`] runs some ranks of a world other processes share (a
//! [`cairn_comm::Net`] world across hosts): each node's sub-coordinator runs its own
//! processes' ranks and stores their images on its own node-local tier (`crate::engines`).
//! [`Images::start`] runs every rank as threads of one process (a [`Threads`] world).
//!
//! Each rank is a thread that owns its engine and waits for commands; an operation sends the
//! same command to every rank and collects one reply from each. Engine calls are collective
//! and end in an agreement, so the ranks always reply alike (all done, or all failed with
//! the failing rank's reason).
//!
//! The images are given to the engine as files (`Engine::checkpoint_files`), each a region of
//! its own. When they are staged on the node-local tier's file system (`crate::stage`) and
//! the checkpoint is full and not compressed, the tier takes each file over where the
//! process wrote it: the engine reads it once, to hash its blocks, and writes nothing of it.
//! An incremental or compressed checkpoint reads the file and stores what its reduction
//! leaves. A restore hands back such a file in place, after checking every block of it,
//! and the restorer reads the image there; other images are copied out into the restart's
//! staging directory.

use crate::error::{Error, ErrorKind, Result};
use crate::manifest::{self, EngineRecord};
use crate::stage::Staging;
use crate::sys::map_file_mut;
use cairn_comm::{Comm, Threads};
use cairn_core::part::FileRegion;
use cairn_core::{Config, Engine, NodeLocal, OwnedRegion, Shape};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::Instant;

/// The engine's configuration for a launch or a restart: defaults, then the TOML file `file`
/// (else the one `CAIRN_CONFIG` names), then `CAIRN_<SECTION>_<KEY>` variables (the
/// launcher's own, `CAIRN_CKPT_*`, `CAIRN_COORD_*`, `CAIRN_RESTORE`, ..., are not settings
/// and are skipped), then `overrides` (`("tiers.local", "/x")`, as options give them).
pub fn engine_config(file: Option<&Path>, overrides: &[(&str, &str)]) -> Result<Config> {
    Config::resolve_from(file, overrides, "the command line")
        .map_err(|e| Error::new(ErrorKind::Usage, e.msg))
}

/// What the engine did with one checkpoint of the job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stored {
    /// Per process, the bytes the engine stored for its image (after zero blocks, unchanged
    /// blocks and compression were taken out).
    pub stored: Vec<u64>,
    /// Whether the checkpoint stored only the blocks that changed since the previous one.
    pub incremental: bool,
    pub secs: f64,
}

enum Cmd {
    Checkpoint {
        version: i64,
        images: Vec<TreeImage>,
    },
    Newest,
    Restore {
        version: i64,
        /// The process the rank stores, and the node it runs on.
        proc: usize,
        node: usize,
        staging: Staging,
    },
    Finalize,
}

/// One image of a process tree: its region id in the engine (0 for the launched process,
/// else the process's pid in the tree's namespace) and its file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TreeImage {
    pub id: i32,
    pub path: PathBuf,
}

/// Where the engine restored one image of a tree (see [`Images::restore`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoredImage {
    pub id: i32,
    pub path: PathBuf,
    /// The file is where the process wrote it (taken over by the engine's tier, or kept in
    /// its version's staging directory) and was checked against the checkpoint: read it,
    /// never change or remove it.
    pub in_place: bool,
}

enum Reply {
    /// The engine is up; its redundancy plan (`partner`, `xor(4)`, ...).
    Started(String),
    Stored {
        stored: u64,
        incremental: bool,
    },
    Newest(Option<i64>),
    Restored(i64, Vec<RestoredImage>),
    Finalized,
}

type RankReply = (usize, cairn_core::Result<Reply>);

struct Ranks {
    cmds: Vec<Sender<Cmd>>,
    replies: Receiver<RankReply>,
    threads: Vec<JoinHandle<()>>,
    /// A rank thread is gone (it panicked): no further collective call can complete.
    broken: bool,
    finalized: bool,
}

/// The engine job that stores a launched job's images; see the module documentation.
pub struct Images {
    name: String,
    /// The ranks of the engine's world this process runs, in order: all of them in the
    /// root ([`Images::start`]), or one host's ([`Images::start_ranks`]).
    hosted: Vec<usize>,
    /// The global tier's root, absolute.
    global: PathBuf,
    record: EngineRecord,
    ranks: Mutex<Ranks>,
}

impl Images {
    /// Starts the engine job: `procs` ranks on `nodes` simulated nodes, checkpoints named
    /// `job`. Fails (with the engine's reason) when the configuration cannot protect or
    /// store the job, e.g. a redundancy scheme that needs more nodes.
    pub fn start(cfg: Config, job: &str, procs: usize, nodes: usize) -> Result<Images> {
        Images::start_ranks(cfg, job, nodes, Threads::world(procs))
    }

    /// As [`Images::start`], for the ranks `comms` of a world that other processes share
    /// (each host's ranks, say, over [`cairn_comm::Net`]): every process of the world calls it
    /// with its own ranks, and every later call is collective over all of them in the same
    /// way. Per-process arguments and results are then this process's ranks', in order.
    /// `nodes` is the engine's `[topology] sim_nodes`: nodes simulated per host (1 when each
    /// node is a host of its own).
    pub fn start_ranks<C: Comm + Send + 'static>(
        mut cfg: Config,
        job: &str,
        nodes: usize,
        comms: Vec<C>,
    ) -> Result<Images> {
        // The engine's listings skip names that look like node directories.
        if let Err(e) = cairn_format::check_name(job) {
            crate::error::bail!(Usage, "job id {job:?} cannot name engine checkpoints: {e}");
        }
        if job.starts_with("node") {
            crate::error::bail!(
                Usage,
                "job id {job:?} cannot name engine checkpoints: names starting with \"node\" \
                 are the engine's node directories"
            );
        }
        if cfg.node_local() == NodeLocal::Mem {
            check_mem_env(job)?;
        }
        cfg.sim_nodes = nodes;
        let record = EngineRecord::describe(&cfg, job);
        let global = PathBuf::from(&record.global);
        let (reply_tx, replies) = channel();
        let hosted: Vec<usize> = comms.iter().map(|c| c.rank()).collect();
        let mut cmds = Vec::with_capacity(comms.len());
        let mut threads = Vec::with_capacity(comms.len());
        for (slot, comm) in comms.into_iter().enumerate() {
            let (tx, rx) = channel();
            let (cfg, name, reply) = (cfg.clone(), job.to_string(), reply_tx.clone());
            let t = std::thread::Builder::new()
                .name(format!("cairn-image-{}", comm.rank()))
                .spawn(move || rank_main(slot, comm, cfg, name, rx, reply))
                .map_err(|e| Error::io("start the engine's ranks", e))?;
            cmds.push(tx);
            threads.push(t);
        }
        let n = hosted.len();
        let mut images = Images {
            name: job.to_string(),
            hosted,
            global,
            record,
            ranks: Mutex::new(Ranks {
                cmds,
                replies,
                threads,
                broken: false,
                finalized: false,
            }),
        };
        let ranks = images.ranks.get_mut().expect("engine lock");
        let started = collect(ranks, n).map_err(|e| engine_error("start the engine", e))?;
        if let Some(Reply::Started(plan)) = started.first() {
            images.record.redundancy = plan.clone();
        }
        Ok(images)
    }

    /// The engine record manifests carry (where images go, and how).
    pub fn record(&self) -> &EngineRecord {
        &self.record
    }

    /// How many ranks this process runs.
    pub fn procs(&self) -> usize {
        self.hosted.len()
    }

    /// The versions of the job that have a directory on the global tier: durable ones, and
    /// ones being flushed there. Their manifests must stay as long as the engine keeps them
    /// (`[cache] keep_global`), whatever the node-local window says. Reads the engine's
    /// layout (`cairn_core::catalog`: `<global>/<name>/v<version>/`).
    pub fn global_versions(&self) -> BTreeSet<u64> {
        global_versions(&self.global, &self.name)
    }

    /// Collective over the ranks: checkpoint `version` of the job from the images of each
    /// process's tree (`trees`, one entry per rank this process runs, in order), each a
    /// region of its own length. The root has checked that every image is a regular file;
    /// one that cannot be read fails the checkpoint on every rank with its rank's reason.
    /// Returns once the engine reports the checkpoint captured (and protected, and durable if
    /// its flush is synchronous) on every rank.
    pub fn checkpoint(&self, version: u64, trees: &[Vec<TreeImage>]) -> Result<Stored> {
        let t0 = Instant::now();
        let version = engine_version(version)?;
        let mut trees = trees.iter();
        let replies = self.run(|_| Cmd::Checkpoint {
            version,
            images: trees.next().expect("one tree per rank").clone(),
        })?;
        let mut stored = Vec::with_capacity(self.procs());
        let mut incremental = true;
        for r in replies {
            if let Reply::Stored {
                stored: s,
                incremental: inc,
            } = r
            {
                stored.push(s);
                incremental &= inc;
            }
        }
        Ok(Stored {
            stored,
            incremental,
            secs: t0.elapsed().as_secs_f64(),
        })
    }

    /// Collective: the newest version of the job every rank can restore, after the engine
    /// rebuilt what it could of lost nodes' parts from redundancy; `None` when there is none.
    pub fn newest(&self) -> Result<Option<u64>> {
        let replies = self.run(|_| Cmd::Newest)?;
        match replies.first() {
            Some(Reply::Newest(v)) => Ok(v.and_then(|v| u64::try_from(v).ok())),
            _ => Err(Error::new(ErrorKind::Engine, "the engine gave no answer")),
        }
    }

    /// Collective: restores version `version` (or, if it is damaged beyond repair, the
    /// newest older one the engine can restore), and returns the version restored and, per
    /// rank this process runs, where each image of its tree is. An image still where its
    /// process wrote it (taken over by the tier, or kept in its version's directory of
    /// `staging` on the process's node, `nodes[k]` for the k-th rank) is checked block by
    /// block against the checkpoint and left there; any other is copied into a new private
    /// file in the node's restart directory, named as in its staging directory. The engine
    /// repairs damaged parts from redundancy.
    pub fn restore(
        &self,
        version: u64,
        staging: &Staging,
        nodes: &[usize],
    ) -> Result<(u64, Vec<Vec<RestoredImage>>), RestoreError> {
        let v = engine_version(version).map_err(RestoreError::Other)?;
        let mut nodes = self.hosted.iter().zip(nodes);
        let replies = self
            .run_raw(|_| {
                let (&proc, &node) = nodes.next().expect("one node per rank");
                Cmd::Restore {
                    version: v,
                    proc,
                    node,
                    staging: staging.clone(),
                }
            })
            .map_err(|e| match e {
                RunError::Engine(e) if e.kind == cairn_core::ErrorKind::NotFound => {
                    RestoreError::NotFound(e.msg)
                }
                e => RestoreError::Other(engine_error("restore the images", e)),
            })?;
        let mut restored = None;
        let mut trees = Vec::with_capacity(self.procs());
        for r in replies {
            if let Reply::Restored(v, tree) = r {
                restored = Some(v);
                trees.push(tree);
            }
        }
        let Some(r) = restored.filter(|_| trees.len() == self.procs()) else {
            return Err(RestoreError::Other(Error::new(
                ErrorKind::Engine,
                "the engine gave no answer",
            )));
        };
        Ok((r as u64, trees))
    }

    /// Collective: finishes pending flushes, makes the newest checkpoint durable on the
    /// global tier (unless `[checkpoint] finalize = false`) and stops the ranks. Later calls
    /// do nothing.
    pub fn finalize(&self) -> Result<()> {
        let mut ranks = self.ranks.lock().expect("engine lock");
        if ranks.finalized || ranks.broken {
            return Ok(());
        }
        ranks.finalized = true;
        let r = send_all(&mut ranks, |_| Cmd::Finalize)
            .and_then(|()| collect(&mut ranks, self.hosted.len()))
            .map(|_| ())
            .map_err(|e| engine_error("finalize the engine", e));
        for t in ranks.threads.drain(..) {
            let _ = t.join();
        }
        r
    }

    fn run(&self, make: impl FnMut(usize) -> Cmd) -> Result<Vec<Reply>> {
        self.run_raw(make)
            .map_err(|e| engine_error(&format!("checkpoint {}", self.name), e))
    }

    fn run_raw(&self, make: impl FnMut(usize) -> Cmd) -> Result<Vec<Reply>, RunError> {
        let mut ranks = self.ranks.lock().expect("engine lock");
        if ranks.finalized || ranks.broken {
            return Err(RunError::Gone);
        }
        send_all(&mut ranks, make)?;
        collect(&mut ranks, self.hosted.len())
    }
}

impl Drop for Images {
    /// Without [`Images::finalize`], the ranks stop and their engines are dropped: pending
    /// flushes are abandoned and what is stored stays as it is.
    fn drop(&mut self) {
        let ranks = self.ranks.get_mut().expect("engine lock");
        ranks.cmds.clear();
        for t in ranks.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Why a restore did not give the version asked for.
#[derive(Debug)]
pub enum RestoreError {
    /// The version is not complete on every rank (the engine lost it, or never had it).
    NotFound(String),
    Other(Error),
}

enum RunError {
    /// A rank thread is gone, or the engine was finalized.
    Gone,
    Engine(cairn_core::Error),
}

/// The versions of checkpoint `name` that have a directory on the global tier `global`.
pub(crate) fn global_versions(global: &Path, name: &str) -> BTreeSet<u64> {
    let Ok(rd) = std::fs::read_dir(global.join(name)) else {
        return BTreeSet::new();
    };
    rd.filter_map(|e| e.ok())
        .filter_map(|e| {
            let n = e.file_name();
            let v = n.to_str()?.strip_prefix('v')?;
            v.bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| v.parse().ok())
                .flatten()
        })
        .collect()
}

fn engine_error(what: &str, e: RunError) -> Error {
    match e {
        RunError::Gone => Error::new(
            ErrorKind::Engine,
            format!("cannot {what}: the engine's ranks are gone"),
        ),
        RunError::Engine(e) => Error::new(ErrorKind::Engine, format!("cannot {what}: {}", e.msg)),
    }
}

fn send_all(ranks: &mut Ranks, mut make: impl FnMut(usize) -> Cmd) -> Result<(), RunError> {
    for i in 0..ranks.cmds.len() {
        if ranks.cmds[i].send(make(i)).is_err() {
            ranks.broken = true;
            return Err(RunError::Gone);
        }
    }
    Ok(())
}

/// One reply from every rank of this process, in order. Ranks agree on the outcome, so either all succeeded
/// or all failed; the error returned is the failing rank's own (the others say `Peer`).
fn collect(ranks: &mut Ranks, n: usize) -> Result<Vec<Reply>, RunError> {
    let mut out: Vec<Option<cairn_core::Result<Reply>>> = (0..n).map(|_| None).collect();
    for _ in 0..n {
        match ranks.replies.recv() {
            Ok((i, r)) => out[i] = Some(r),
            Err(_) => {
                ranks.broken = true;
                return Err(RunError::Gone);
            }
        }
    }
    let results: Vec<cairn_core::Result<Reply>> = out.into_iter().flatten().collect();
    if results.iter().all(|r| r.is_ok()) {
        return Ok(results.into_iter().flatten().collect());
    }
    let mut errors: Vec<cairn_core::Error> = results.into_iter().filter_map(|r| r.err()).collect();
    let own = errors
        .iter()
        .position(|e| e.kind != cairn_core::ErrorKind::Peer)
        .unwrap_or(0);
    Err(RunError::Engine(errors.swap_remove(own)))
}

/// One rank: creates its engine (collective), then runs commands until told to finalize or
/// until the commands end.
fn rank_main<C: Comm + Send + 'static>(
    slot: usize,
    comm: C,
    cfg: Config,
    name: String,
    cmds: Receiver<Cmd>,
    replies: Sender<RankReply>,
) {
    let reply = |r: cairn_core::Result<Reply>| {
        let _ = replies.send((slot, r));
    };
    let block = cfg.block;
    let mut engine = match Engine::new(Box::new(comm), cfg) {
        Ok(e) => {
            reply(Ok(Reply::Started(e.redundancy())));
            e
        }
        Err(e) => return reply(Err(e)),
    };
    for cmd in cmds {
        match cmd {
            Cmd::Checkpoint { version, images } => {
                let before = engine.stats();
                let hashes: Vec<Option<Vec<u128>>> = images
                    .iter()
                    .map(|img| written_hashes(&img.path, block))
                    .collect();
                let files: Vec<FileRegion<'_>> = images
                    .iter()
                    .zip(&hashes)
                    .map(|(img, h)| FileRegion {
                        id: img.id,
                        path: &img.path,
                        hashes: h.as_deref(),
                    })
                    .collect();
                let r = engine.checkpoint_files(&name, version, &[], &files);
                let after = engine.stats();
                reply(r.map(|()| Reply::Stored {
                    stored: after.bytes_stored - before.bytes_stored,
                    incremental: after.incrementals > before.incrementals,
                }));
            }
            Cmd::Newest => reply(engine.restart_test(&name).map(Reply::Newest)),
            Cmd::Restore {
                version,
                proc,
                node,
                staging,
            } => {
                let mut copies = Vec::new();
                let mut sized = |v: i64, shapes: &[Shape]| {
                    copies.clear();
                    let kept = staging.version_dir(node, v as u64);
                    let dir = staging.restart_dir(node);
                    shapes
                        .iter()
                        .map(|s| restore_buffer(proc, &kept, &dir, s, &mut copies))
                        .collect()
                };
                let r = engine.restart_sized(&name, version, &mut [], &mut sized);
                reply(r.map(|(v, bufs)| Reply::Restored(v, placed(bufs, copies))));
            }
            Cmd::Finalize => return reply(engine.finalize().map(|()| Reply::Finalized)),
        }
    }
}

/// The block hashes the library wrote beside `image` while writing it (`<image>.hashes`,
/// see `cairn_ckpt::read_hashes`), when they fit the image and its first and last blocks
/// hash as they say: the engine then takes the image without reading it. The file is
/// removed either way; without it (or when it does not fit, said in the log) the engine
/// hashes the image itself.
fn written_hashes(image: &Path, block: u32) -> Option<Vec<u128>> {
    let read = cairn_ckpt::read_hashes(image, block);
    let _ = std::fs::remove_file(cairn_ckpt::hashes_path(image));
    let hashes = match read {
        Ok(h) => h.filter(|h| !h.is_empty())?,
        Err(e) => {
            tracing::warn!("block hashes not used, the engine hashes the image: {e}");
            return None;
        }
    };
    let sampled = (|| -> std::io::Result<bool> {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::open(image)?;
        let len = f.metadata()?.len();
        let mut buf = vec![0u8; block as usize];
        let last = hashes.len() - 1;
        for i in [0, last] {
            let at = i as u64 * block as u64;
            let n = (len - at).min(block as u64) as usize;
            f.read_exact_at(&mut buf[..n], at)?;
            if cairn_core::part::block_hash(&buf[..n]) != hashes[i] {
                return Ok(false);
            }
        }
        Ok(true)
    })();
    match sampled {
        Ok(true) => Some(hashes),
        Ok(false) => {
            tracing::warn!(
                "{}: the block hashes written with it do not match its blocks; the engine \
                 hashes the image",
                image.display()
            );
            None
        }
        Err(e) => {
            tracing::warn!("{}: {e}", image.display());
            None
        }
    }
}

/// The buffer image `s` of process `proc` is restored into: the file the engine kept, in
/// place; else a new private file in `dir` mapped for writing, offered together with the
/// image its process wrote in `kept` (the staging directory of the version restored), if
/// there is one, which the engine takes in place when every block of it matches. Records
/// the copy made in `copies`.
fn restore_buffer(
    proc: usize,
    kept: &Path,
    dir: &Path,
    s: &Shape,
    copies: &mut Vec<(i32, PathBuf)>,
) -> cairn_core::Result<OwnedRegion> {
    if let Some(stored) = &s.stored {
        return Ok(OwnedRegion {
            in_place: Some(stored.clone()),
            ..OwnedRegion::new(s.id, s.dtype, Box::new(Vec::new()))
        });
    }
    let name = match u32::try_from(s.id) {
        Ok(0) => manifest::image_name(proc),
        Ok(pid) => manifest::member_image_name(proc, pid),
        Err(_) => {
            return Err(cairn_core::Error::new(
                cairn_core::ErrorKind::Corrupt,
                format!(
                    "proc {proc}: the checkpoint holds region {}, which is no image",
                    s.id
                ),
            ))
        }
    };
    let path = dir.join(&name);
    // Sparse until written: nothing is allocated if the kept image is taken.
    let buf = private_file(&path)
        .and_then(|f| map_file_mut(&f, s.bytes()))
        .map_err(|e| {
            cairn_core::Error::new(
                cairn_core::ErrorKind::Io,
                format!("proc {proc}: {}: {e}", path.display()),
            )
        })?;
    copies.push((s.id, path));
    let kept = kept.join(&name);
    Ok(OwnedRegion {
        in_place: kept.exists().then_some(kept),
        ..OwnedRegion::new(s.id, s.dtype, Box::new(buf))
    })
}

/// Where each restored buffer of `bufs` left its image: in place, or in its copy (which
/// [`restore_buffer`] recorded in `copies`; a copy not used goes). The buffers are unmapped
/// first: the files hold every byte.
fn placed(bufs: Vec<OwnedRegion>, copies: Vec<(i32, PathBuf)>) -> Vec<RestoredImage> {
    let taken: Vec<(i32, Option<PathBuf>)> = bufs.into_iter().map(|b| (b.id, b.in_place)).collect();
    taken
        .into_iter()
        .filter_map(|(id, in_place)| {
            let copy = copies.iter().find(|c| c.0 == id).map(|c| c.1.clone());
            match (in_place, copy) {
                (Some(path), copy) => {
                    if let Some(copy) = copy {
                        let _ = std::fs::remove_file(copy);
                    }
                    Some(RestoredImage {
                        id,
                        path,
                        in_place: true,
                    })
                }
                (None, Some(path)) => Some(RestoredImage {
                    id,
                    path,
                    in_place: false,
                }),
                (None, None) => None,
            }
        })
        .collect()
}

fn engine_version(v: u64) -> Result<i64> {
    i64::try_from(v).map_err(|_| Error::new(ErrorKind::Usage, format!("version {v} is too large")))
}

/// A new private file (0600), replacing what was there.
fn private_file(p: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::remove_file(p) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(p)
}

/// The shared-memory tier names a node's store after `CAIRN_JOB` and takes `CAIRN_NODE` as
/// the node of every rank of the process: in a process that holds ranks of several nodes
/// (or whose ranks' node is the engine's to say), the first must name this job and the
/// second must be unset. `cairn launch` and `cairn
/// restart` set them so before starting any thread ([`prepare_env`]).
fn check_mem_env(job: &str) -> Result<()> {
    let named = cairn_core::memstore::job_name();
    if named != job {
        crate::error::bail!(
            Usage,
            "[tiers] local = \"mem\" names the shared-memory stores after CAIRN_JOB, which is \
             {named:?} in this process, not the job {job:?}: set CAIRN_JOB={job}"
        );
    }
    if std::env::var_os("CAIRN_NODE").is_some() {
        crate::error::bail!(
            Usage,
            "[tiers] local = \"mem\": CAIRN_NODE is set in this process, which would put every \
             process's image in one node's store: unset it"
        );
    }
    Ok(())
}

/// Sets `CAIRN_JOB` to `job` and removes `CAIRN_NODE` in this process's environment, which
/// the engine's shared-memory tier names its stores by (see `check_mem_env`). The job's
/// processes get both set explicitly, so they are not affected.
///
/// Call it only while this process runs a single thread: the environment is not safe to
/// change while another thread may read it.
pub fn prepare_env(job: &str) {
    std::env::set_var("CAIRN_JOB", job);
    std::env::remove_var("CAIRN_NODE");
}

#[cfg(test)]
mod tests {
    use super::written_hashes;
    use cairn_core::part::block_hash;
    use std::path::Path;

    const BLOCK: u32 = 64 << 10;

    /// `<image>.hashes` as the library writes it, over `hashes`, for an image of `len` bytes.
    fn write_hashes(image: &Path, block: u32, len: u64, hashes: &[u128]) {
        let mut b = b"CAIRNBH1".to_vec();
        b.extend_from_slice(&block.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&len.to_le_bytes());
        b.extend_from_slice(&(hashes.len() as u64).to_le_bytes());
        for h in hashes {
            b.extend_from_slice(&h.to_le_bytes());
        }
        std::fs::write(cairn_ckpt::hashes_path(image), b).unwrap();
    }

    #[test]
    fn hashes_written_with_an_image_are_taken_only_when_they_fit_it() {
        let d = tempfile::tempdir().unwrap();
        let image = d.path().join("proc0.img");
        // Three whole blocks and a short one, each different.
        let bytes: Vec<u8> = (0..3 * BLOCK as usize + 1000)
            .map(|i| ((i / 7) ^ (i / 65536)) as u8)
            .collect();
        std::fs::write(&image, &bytes).unwrap();
        let len = bytes.len() as u64;
        let right: Vec<u128> = bytes.chunks(BLOCK as usize).map(block_hash).collect();
        assert_eq!(right.len(), 4);
        let sidecar = cairn_ckpt::hashes_path(&image);

        assert_eq!(written_hashes(&image, BLOCK), None, "no file, no hashes");

        write_hashes(&image, BLOCK, len, &right);
        assert_eq!(written_hashes(&image, BLOCK), Some(right.clone()));
        assert!(!sidecar.exists(), "the file is removed once read");

        // Each of these is refused, and the file removed all the same.
        let mut first_wrong = right.clone();
        first_wrong[0] ^= 1;
        let mut last_wrong = right.clone();
        last_wrong[3] ^= 1 << 100;
        let cases: Vec<(&str, u32, u64, Vec<u128>)> = vec![
            ("another block size", BLOCK * 2, len, right.clone()),
            ("another image's length", BLOCK, len + 1, right.clone()),
            ("one hash missing", BLOCK, len, right[..3].to_vec()),
            ("the first block's hash wrong", BLOCK, len, first_wrong),
            ("the last block's hash wrong", BLOCK, len, last_wrong),
        ];
        for (what, block, l, hashes) in cases {
            write_hashes(&image, block, l, &hashes);
            assert_eq!(written_hashes(&image, BLOCK), None, "{what}");
            assert!(!sidecar.exists(), "{what}: left behind");
        }
        // Asked for a block size the engine does not use.
        write_hashes(&image, BLOCK, len, &right);
        assert_eq!(written_hashes(&image, BLOCK / 2), None);

        // A file cut short, and one with more than it announces.
        write_hashes(&image, BLOCK, len, &right);
        let full = std::fs::read(&sidecar).unwrap();
        std::fs::write(&sidecar, &full[..full.len() - 1]).unwrap();
        assert_eq!(written_hashes(&image, BLOCK), None);
        let mut longer = full.clone();
        longer.push(0);
        std::fs::write(&sidecar, &longer).unwrap();
        assert_eq!(written_hashes(&image, BLOCK), None);
        // Not a regular file: refused without blocking.
        let made = std::process::Command::new("mkfifo").arg(&sidecar).status();
        assert!(made.unwrap().success());
        assert_eq!(written_hashes(&image, BLOCK), None);
    }
}
