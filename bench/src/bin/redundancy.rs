//! `cairn-bench-redundancy`: what Cairn's redundancy schemes cost, each figure next to
//! baselines measured in the same run.
//!
//! ```text
//! mpirun --oversubscribe -n 10 target/release/cairn-bench-redundancy [--full] [--json]
//! target/release/cairn-bench-redundancy nbody [--reps 3]      (no mpirun: it starts its own)
//! ```
//!
//! Under MPI it runs three parts, each on the first N ranks of the job (the others wait in a
//! sleeping barrier, so they take no CPU from the measured ranks):
//!
//! 1. `cpex`: the DEEP-ER cpex comparison (report section 3.2.2). A partner checkpoint whose
//!    copy is streamed while the part is written (`partner_mode = "stream"`) against the
//!    write, read back, then send scheme (`"readback"`), on 2 simulated nodes with 2 and 4
//!    ranks, next to the local write and the exchange alone.
//! 2. `codec`: the xor and Reed-Solomon codes (`stripe::encode`, `stripe::recover`) on
//!    in-memory shards in one process, next to a `memcpy` of the same bytes.
//! 3. `engine`: checkpoint time with xor / rs / partner against scheme single on 4 and 10
//!    simulated nodes, and a restart after one node's storage is deleted (the rebuild) against
//!    a plain restart.
//!
//! The `nbody` mode (DEEP-ER report section 4.2.1, Table 1) builds `examples/nbody.c` against
//! `libcairn.so` and times whole runs with partner copies streamed or read back.
//!
//! The machine this is developed on is small and shared: results are ratios against the
//! baselines, never absolute claims. `bench/README.md` explains every figure.

use cairn_bench::*;
use cairn_comm::Comm;
use cairn_core::{Config, Dtype, Engine, RegionMut, RegionRef};
use cairn_mpi::mpi::collective::SystemOperation;
use cairn_mpi::mpi::topology::{Color, Communicator, SimpleCommunicator};
use cairn_mpi::mpi::traits::*;
use cairn_mpi::{mpi, MpiComm};
use cairn_redundancy::stripe::{self, Codec};
use cairn_redundancy::{Scheme, Settings};
use serde_json::{json, Value};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const PROG: &str = "cairn-bench-redundancy";
/// Bytes per exchange step, as in the engine's partner stream and the DEEP-ER cpex runs.
const PIECE: usize = MIB;
/// Cairn's target: a streamed partner checkpoint costs at most this times the slower of the
/// local write and the exchange.
const TARGET_STREAM: f64 = 1.2;
/// Cairn's target: the read-back scheme takes at least this times as long as streaming.
const TARGET_READBACK: f64 = 1.5;
/// Memory left free beyond the buffers and files, per node.
const SLACK: u64 = 512 << 20;
/// Slice of each shard encoded at a time in the codec test's sliced row.
const SLICE: usize = 64 << 10;
/// DEEP-ER report, Table 1: N-body mock-up runtime (s) with SCR's PARTNER (read back and
/// send) and SIONlib's BUDDY (interleaved), 8 tasks per node: (nodes, MB, partner, buddy).
const TABLE1: &[(u32, u32, f64, f64)] = &[
    (2, 512, 23.91, 12.28),
    (4, 1024, 32.42, 20.06),
    (8, 2048, 32.82, 27.93),
    (16, 4096, 64.17, 47.75),
];

const USAGE: &str = "\
usage: mpirun --oversubscribe -n 10 cairn-bench-redundancy [options]
  --only LIST       comma-separated parts: cpex, codec, engine (default: all)
  --sizes LIST      MiB per rank in cpex (default 64,256)
  --full            cpex at 64,128,256,512 MiB per rank
  --cpex-ranks LIST rank counts for cpex, on 2 simulated nodes (default 2,4)
  --reps N          timed runs of each kind, after one warm-up run (default 5)
  --codec-mib N     MiB of data per stripe in the codec test (default 96)
  --engine-mib N    MiB per rank in the engine test (default 16)
  --dir DIR         where the run's private directory is created (default /dev/shm)
  --json            print one JSON object instead of the tables
  --json-out FILE   also write that JSON object to FILE (the tables are printed as usual)
The engine test needs 8 ranks (10 for rs(8+2)); parts needing more ranks than the job has
are skipped with a note.

usage: cairn-bench-redundancy nbody [options]        (not under mpirun)
  --configs LIST    ranks:nodes pairs (default 4:2,8:4)
  --bodies-per-rank N  bodies per rank, weak scaling as in DEEP-ER (default 2048)
  --steps N         steps per run (default 12)
  --every N         checkpoint every N steps (default 3)
  --reps N          runs of each kind (default 3)
  --lib-dir DIR     directory holding libcairn.so (default: this program's directory)
  --dir DIR         where the run's private directory is created (default /dev/shm)
  --json            print one JSON object instead of the table
  --json-out FILE   also write that JSON object to FILE (the table is printed as usual)";

// ---- arguments ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Args {
    cpex: bool,
    codec: bool,
    engine: bool,
    sizes: Vec<usize>,
    cpex_ranks: Vec<usize>,
    /// Only these cpex kinds (for profiling one of them); empty: all.
    cpex_kinds: Vec<String>,
    reps: usize,
    codec_mib: usize,
    engine_mib: usize,
    base: PathBuf,
    json: bool,
    /// `--json-out`: where the JSON object is also written.
    json_out: Option<PathBuf>,
}

#[derive(Debug, Clone)]
struct NbArgs {
    configs: Vec<(usize, usize)>,
    bodies_per_rank: usize,
    steps: usize,
    every: usize,
    reps: usize,
    lib_dir: Option<PathBuf>,
    base: PathBuf,
    json: bool,
    /// `--json-out`: where the JSON object is also written.
    json_out: Option<PathBuf>,
}

/// Parse the MPI mode's command line; `Ok(None)` asks for the usage text.
fn parse_args(argv: Vec<String>) -> Result<Option<Args>, String> {
    let mut a = Args {
        cpex: true,
        codec: true,
        engine: true,
        sizes: vec![64, 256],
        cpex_ranks: vec![2, 4],
        cpex_kinds: Vec::new(),
        reps: 5,
        codec_mib: 96,
        engine_mib: 16,
        base: PathBuf::from("/dev/shm"),
        json: false,
        json_out: None,
    };
    let go = walk(argv, |flag, value| {
        match flag {
            "--only" => {
                let v = value()?;
                (a.cpex, a.codec, a.engine) = (false, false, false);
                for part in v.split(',') {
                    match part.trim() {
                        "cpex" => a.cpex = true,
                        "codec" => a.codec = true,
                        "engine" => a.engine = true,
                        other => {
                            return Err(format!("--only {other:?}: expected cpex, codec or engine"))
                        }
                    }
                }
            }
            "--sizes" => a.sizes = list("--sizes", &value()?, 1)?,
            "--full" => a.sizes = vec![64, 128, 256, 512],
            "--cpex-ranks" => a.cpex_ranks = list("--cpex-ranks", &value()?, 2)?,
            "--cpex-kinds" => {
                let v = value()?;
                for k in v.split(',') {
                    if !CX_ALL.iter().any(|x| x.key() == k) {
                        let keys: Vec<&str> = CX_ALL.iter().map(|x| x.key()).collect();
                        return Err(format!(
                            "--cpex-kinds {k:?}: expected some of {}",
                            keys.join(", ")
                        ));
                    }
                    a.cpex_kinds.push(k.to_string());
                }
            }
            "--reps" => a.reps = count("--reps", value()?, 1)?,
            "--codec-mib" => a.codec_mib = count("--codec-mib", value()?, 1)?,
            "--engine-mib" => a.engine_mib = count("--engine-mib", value()?, 1)?,
            "--dir" => a.base = PathBuf::from(value()?),
            "--json" => a.json = true,
            "--json-out" => a.json_out = Some(PathBuf::from(value()?)),
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(go.then_some(a))
}

fn parse_nbody_args(argv: Vec<String>) -> Result<Option<NbArgs>, String> {
    let mut a = NbArgs {
        configs: vec![(4, 2), (8, 4)],
        bodies_per_rank: 2048,
        steps: 12,
        every: 3,
        reps: 3,
        lib_dir: None,
        base: PathBuf::from("/dev/shm"),
        json: false,
        json_out: None,
    };
    let go = walk(argv, |flag, value| {
        match flag {
            "--configs" => {
                let v = value()?;
                let mut out = Vec::new();
                for c in v.split(',') {
                    let pair = c.split_once(':').and_then(|(r, n)| {
                        Some((
                            r.trim().parse::<usize>().ok()?,
                            n.trim().parse::<usize>().ok()?,
                        ))
                    });
                    match pair {
                        Some((r, n)) if n >= 2 && r >= n => out.push((r, n)),
                        _ => {
                            return Err(format!(
                                "--configs {c:?}: expected ranks:nodes with 2 <= nodes <= ranks"
                            ))
                        }
                    }
                }
                a.configs = out;
            }
            "--bodies-per-rank" => a.bodies_per_rank = count(flag, value()?, 1)?,
            "--steps" => a.steps = count(flag, value()?, 1)?,
            "--every" => a.every = count(flag, value()?, 1)?,
            "--reps" => a.reps = count(flag, value()?, 1)?,
            "--lib-dir" => a.lib_dir = Some(PathBuf::from(value()?)),
            "--dir" => a.base = PathBuf::from(value()?),
            "--json" => a.json = true,
            "--json-out" => a.json_out = Some(PathBuf::from(value()?)),
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(go.then_some(a))
}

// ---- MPI plumbing --------------------------------------------------------------------------

/// A barrier that sleeps while it waits, so ranks left out of a part do not spin on the
/// cores the measured ranks need (a blocking MPI barrier busy-polls).
fn sleeping_barrier(world: &SimpleCommunicator) {
    let mut req = world.immediate_barrier();
    loop {
        match req.test() {
            Ok(_) => return,
            Err(r) => {
                req = r;
                std::thread::sleep(Duration::from_micros(500));
            }
        }
    }
}

/// Collective over `world`: run `f` on the first `n` ranks (a communicator of their own), the
/// others waiting in a sleeping barrier; all ranks then agree on the outcome. The value is
/// `Some` on the ranks that ran `f`.
fn on_first<T>(world: &Mpi, n: usize, f: impl FnOnce(&Mpi) -> Res<T>) -> Res<Option<T>> {
    let color = if world.rank < n {
        Color::with_value(0)
    } else {
        Color::undefined()
    };
    let sub = world.world.split_by_color(color).map(|c| Mpi {
        rank: c.rank() as usize,
        size: c.size() as usize,
        world: c,
    });
    let res = match &sub {
        Some(m) => f(m).map(Some),
        None => Ok(None),
    };
    drop(sub);
    sleeping_barrier(&world.world);
    let mut bad = 0i64;
    world
        .world
        .all_reduce_into(&(res.is_err() as i64), &mut bad, SystemOperation::max());
    match res {
        Err(e) => Err(e),
        Ok(_) if bad != 0 => Err(Failure {
            msg: "a part failed on other ranks (see their message)".into(),
            peer: true,
        }),
        Ok(v) => Ok(v),
    }
}

fn engine_cfg(
    cfg: &Config,
    root: &Path,
    nodes: usize,
    scheme: &str,
    set_size: usize,
    parity: usize,
    mode: &str,
) -> Config {
    let mut c = with_root(cfg, root);
    c.sim_nodes = nodes;
    c.redundancy = scheme.to_string();
    c.set_size = set_size;
    c.parity = parity;
    c.partner_mode = mode.to_string();
    // Checkpoints are deleted behind the engine's back after each run: finalize must not try
    // to flush the newest one.
    c.finalize_flush = false;
    // The rebuilds here are deliberate: keep the engine's warnings about them off the
    // output unless a level was asked for.
    if std::env::var_os("CAIRN_LOG_LEVEL").is_none() {
        c.log_level = "error".into();
    }
    c
}

fn new_engine(mpi: &Mpi, cfg: Config) -> Res<Engine> {
    // Engine::new is collective and agreed: every rank fails if one does.
    Engine::new(Box::new(MpiComm::new(&mpi.world)), cfg).map_err(fail)
}

// ---- 1. cpex --------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cx {
    /// Engine checkpoint with scheme single: the part alone.
    Single,
    /// Plain write of the part plus a second file of the same size (the buddy copy).
    TwoFiles,
    /// MPI sendrecv of the part's bytes in 1 MiB pieces with the partner, no I/O.
    Exchange,
    Stream,
    Readback,
    /// Breakdown: the exchange through `Comm::sendrecv`, the engine's path.
    CommExchange,
    /// Breakdown: copying the part into 1 MiB pieces.
    Pieces,
    /// Breakdown: two threads writing a file of the part's size each, at the same time.
    TwoWriters,
    /// Model: the engine's pipeline without its encoding (pieces copied and exchanged on the
    /// calling thread, a writer thread for each file, buffers recycled).
    ModelThreads,
    /// Model: one thread, per piece: write own piece, exchange, write the partner's piece.
    ModelInline,
    /// Model: a thread writes the own file at a stretch while the calling thread exchanges
    /// pieces and writes the partner's (DEEP-ER cpex, Figure 19c).
    ModelOneWriter,
}

const CX_ALL: [Cx; 11] = [
    Cx::Single,
    Cx::TwoFiles,
    Cx::Exchange,
    Cx::Stream,
    Cx::Readback,
    Cx::CommExchange,
    Cx::Pieces,
    Cx::TwoWriters,
    Cx::ModelThreads,
    Cx::ModelInline,
    Cx::ModelOneWriter,
];

impl Cx {
    fn key(self) -> &'static str {
        match self {
            Cx::Single => "single",
            Cx::TwoFiles => "two_files",
            Cx::Exchange => "exchange",
            Cx::Stream => "stream",
            Cx::Readback => "readback",
            Cx::CommExchange => "comm_exchange",
            Cx::Pieces => "pieces",
            Cx::TwoWriters => "two_writers",
            Cx::ModelThreads => "model_threads",
            Cx::ModelInline => "model_inline",
            Cx::ModelOneWriter => "model_one_writer",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Cx::Single => "baseline: checkpoint, scheme single",
            Cx::TwoFiles => "baseline: write part + buddy file (local write)",
            Cx::Exchange => "baseline: MPI sendrecv 1 MiB pieces (exchange)",
            Cx::Stream => "partner, streamed (partner_mode stream)",
            Cx::Readback => "partner, read back (partner_mode readback)",
            Cx::CommExchange => "breakdown: exchange via Comm::sendrecv",
            Cx::Pieces => "breakdown: copy part into 1 MiB pieces",
            Cx::TwoWriters => "breakdown: 2 threads writing 1 file each",
            Cx::ModelThreads => "model: copy+exchange, 2 writer threads",
            Cx::ModelInline => "model: 1 thread: write, exchange, write",
            Cx::ModelOneWriter => "model: own-file thread + exchange/write",
        }
    }
}

#[derive(Debug)]
struct CpexRow {
    ranks: usize,
    mib: usize,
    reps: usize,
    samples: Vec<(Cx, Vec<f64>)>,
}

impl CpexRow {
    fn get(&self, k: Cx) -> &[f64] {
        &self.samples.iter().find(|(x, _)| *x == k).expect("kind").1
    }

    fn med(&self, k: Cx) -> f64 {
        median(self.get(k))
    }

    /// streamed / max(local write, exchange), with `local` the baseline taken as local write.
    fn stream_over(&self, local: Cx) -> f64 {
        self.med(Cx::Stream) / self.med(local).max(self.med(Cx::Exchange))
    }

    /// The same, per repetition (the kinds of one repetition ran back to back).
    fn stream_over_paired(&self, local: Cx) -> Vec<f64> {
        let (s, l, e) = (
            self.get(Cx::Stream),
            self.get(local),
            self.get(Cx::Exchange),
        );
        (0..s.len()).map(|i| s[i] / l[i].max(e[i])).collect()
    }

    /// streamed / (local write + exchange): the floor when nothing can overlap.
    fn stream_over_sum(&self) -> f64 {
        self.med(Cx::Stream) / (self.med(Cx::TwoFiles) + self.med(Cx::Exchange))
    }

    /// The fastest of the pipeline models.
    fn best_model(&self) -> Cx {
        [Cx::ModelThreads, Cx::ModelInline, Cx::ModelOneWriter]
            .into_iter()
            .min_by(|a, b| self.med(*a).total_cmp(&self.med(*b)))
            .expect("three models")
    }

    fn readback_over_stream(&self) -> f64 {
        self.med(Cx::Readback) / self.med(Cx::Stream)
    }

    fn readback_paired(&self) -> Vec<f64> {
        let (s, r) = (self.get(Cx::Stream), self.get(Cx::Readback));
        (0..s.len()).map(|i| r[i] / s[i]).collect()
    }
}

/// Write `buf` to `dir/<stem>.tmp` in pieces and rename it to `dir/<stem>.dat`.
fn write_file(dir: &Path, stem: &str, buf: &[u8]) -> Result<PathBuf, String> {
    let dst = dir.join(format!("{stem}.dat"));
    write_rename(
        &dir.join(format!("{stem}.tmp")),
        &dst,
        &mut buf.chunks(PIECE),
    )?;
    Ok(dst)
}

/// Benchmark 1 on `mpi` (2 simulated nodes): every size, every kind, alternating.
fn bench_cpex(mpi: &Mpi, args: &Args, cfg: &Config, root: &Path) -> Res<Vec<CpexRow>> {
    mpi.agree("create the test directory", private_dir(root))?;
    let nodes = 2;
    let mut single = new_engine(mpi, engine_cfg(cfg, root, nodes, "single", 0, 2, "stream"))?;
    let mut stream = new_engine(mpi, engine_cfg(cfg, root, nodes, "partner", 0, 2, "stream"))?;
    let mut readback = new_engine(
        mpi,
        engine_cfg(cfg, root, nodes, "partner", 0, 2, "readback"),
    )?;
    let topo = stream.topology().clone();
    // The partner ring the engine uses, for the exchange baselines.
    let plan = cairn_redundancy::plan(
        &Settings {
            scheme: Scheme::Partner,
            set_size: 0,
            parity: 2,
        },
        &topo,
    )
    .map_err(fail)?;
    let (dest, src) = (plan.partner_dest[mpi.rank], plan.partner_src[mpi.rank]);
    let comm = MpiComm::new(&mpi.world);
    let plain_dir = root
        .join("local")
        .join(format!("node{}", topo.node))
        .join(format!("plain-rank{}", mpi.rank));
    mpi.agree("create the baseline directory", private_dir(&plain_dir))?;
    let mut rows = Vec::new();
    let mut runs = 0usize;
    for &mib in &args.sizes {
        let n = mib * MIB;
        // Per rank: the buffer, pieces in flight, and up to two files of the part's size.
        check_fits(mpi, root, (n + 8 * PIECE) as u64, 2 * n as u64, SLACK)?;
        let buf = filled(n, 0x5eed + mpi.rank as u64);
        let mut recv = filled(PIECE, 1);
        let mut row = CpexRow {
            ranks: mpi.size,
            mib,
            reps: args.reps,
            samples: CX_ALL.iter().map(|k| (*k, Vec::new())).collect(),
        };
        let regions = [RegionRef {
            id: 0,
            dtype: Dtype::Double,
            bytes: &buf,
        }];
        for rep in 0..=args.reps {
            for i in order(CX_ALL.len(), rep) {
                let kind = CX_ALL[i];
                if !args.cpex_kinds.is_empty() && !args.cpex_kinds.iter().any(|k| k == kind.key()) {
                    continue;
                }
                let t = match kind {
                    Cx::Single | Cx::Stream | Cx::Readback => {
                        let engine = match kind {
                            Cx::Single => &mut single,
                            Cx::Stream => &mut stream,
                            _ => &mut readback,
                        };
                        let name = format!("cpex{runs}");
                        runs += 1;
                        let t = mpi.timed(kind.key(), || {
                            engine
                                .checkpoint(&name, 1, &regions)
                                .map_err(|e| e.to_string())
                        })?;
                        // Files are deleted between runs so every run pays the same tmpfs
                        // page allocation.
                        remove_ckpt(mpi, &root.join("local"), None, &name)?;
                        t
                    }
                    Cx::TwoFiles => {
                        let mut made = Vec::new();
                        let t = mpi.timed("two files", || {
                            made.push(write_file(&plain_dir, "own", &buf)?);
                            made.push(write_file(&plain_dir, "buddy", &buf)?);
                            Ok(())
                        })?;
                        for f in made {
                            mpi.agree("remove a file", remove_file(&f))?;
                        }
                        t
                    }
                    Cx::TwoWriters => {
                        let mut made = Vec::new();
                        let t = mpi.timed("two writers", || {
                            let (a, b) = std::thread::scope(|s| {
                                let h = s.spawn(|| write_file(&plain_dir, "buddy", &buf));
                                let a = write_file(&plain_dir, "own", &buf);
                                (a, h.join().expect("writer does not panic"))
                            });
                            made.push(a?);
                            made.push(b?);
                            Ok(())
                        })?;
                        for f in made {
                            mpi.agree("remove a file", remove_file(&f))?;
                        }
                        t
                    }
                    Cx::ModelThreads | Cx::ModelInline | Cx::ModelOneWriter => {
                        let mut made = Vec::new();
                        let t = mpi.timed(kind.key(), || {
                            made = model(kind, mpi, &buf, dest, src, &plain_dir)?;
                            Ok(())
                        })?;
                        for f in made {
                            mpi.agree("remove a file", remove_file(&f))?;
                        }
                        t
                    }
                    Cx::Exchange => mpi.timed("exchange", || {
                        let (d, s) = (
                            mpi.world.process_at_rank(dest as i32),
                            mpi.world.process_at_rank(src as i32),
                        );
                        for piece in buf.chunks(PIECE) {
                            let r = &mut recv[..piece.len()];
                            mpi::point_to_point::send_receive_into(piece, &d, r, &s);
                        }
                        std::hint::black_box(&recv);
                        Ok(())
                    })?,
                    Cx::CommExchange => mpi.timed("Comm::sendrecv", || {
                        for piece in buf.chunks(PIECE) {
                            let got = comm.sendrecv(piece, dest, src).map_err(|e| e.to_string())?;
                            std::hint::black_box(got);
                        }
                        Ok(())
                    })?,
                    Cx::Pieces => mpi.timed("pieces", || {
                        // Three buffers in rotation, like the stream's pool.
                        let mut pool: Vec<Vec<u8>> =
                            (0..3).map(|_| Vec::with_capacity(PIECE)).collect();
                        for (i, piece) in buf.chunks(PIECE).enumerate() {
                            let v = &mut pool[i % 3];
                            v.clear();
                            v.extend_from_slice(piece);
                            std::hint::black_box(&v);
                        }
                        Ok(())
                    })?,
                };
                if rep > 0 {
                    row.samples
                        .iter_mut()
                        .find(|(k, _)| *k == kind)
                        .expect("kind")
                        .1
                        .push(t);
                }
            }
        }
        rows.push(row);
    }
    drop(comm);
    single.finalize().map_err(fail)?;
    stream.finalize().map_err(fail)?;
    readback.finalize().map_err(fail)?;
    Ok(rows)
}

/// A file being written in pieces, published by rename when complete.
struct PieceFile {
    file: fs::File,
    tmp: PathBuf,
    dst: PathBuf,
}

impl PieceFile {
    fn create(dir: &Path, stem: &str) -> Result<PieceFile, String> {
        let tmp = dir.join(format!("{stem}.tmp"));
        let file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
        Ok(PieceFile {
            file,
            tmp,
            dst: dir.join(format!("{stem}.dat")),
        })
    }

    fn write(&mut self, b: &[u8]) -> Result<(), String> {
        use std::io::Write;
        self.file
            .write_all(b)
            .map_err(|e| format!("cannot write {}: {e}", self.tmp.display()))
    }

    fn publish(self) -> Result<PathBuf, String> {
        drop(self.file);
        fs::rename(&self.tmp, &self.dst)
            .map_err(|e| format!("cannot rename to {}: {e}", self.dst.display()))?;
        Ok(self.dst)
    }
}

/// The partner-copy models: the same bytes and files as a streamed partner checkpoint, with
/// the exchange as raw MPI into recycled buffers and no encoding, arranged three ways.
/// Returns the files written.
fn model(
    kind: Cx,
    mpi: &Mpi,
    buf: &[u8],
    dest: usize,
    src: usize,
    dir: &Path,
) -> Result<Vec<PathBuf>, String> {
    use std::sync::mpsc::{channel, sync_channel};
    let (d, s) = (
        mpi.world.process_at_rank(dest as i32),
        mpi.world.process_at_rank(src as i32),
    );
    let exchange = |piece: &[u8], into: &mut Vec<u8>| {
        into.resize(piece.len(), 0);
        mpi::point_to_point::send_receive_into(piece, &d, &mut into[..], &s);
    };
    let mut own = PieceFile::create(dir, "own")?;
    let mut copy = PieceFile::create(dir, "buddy")?;
    match kind {
        Cx::ModelInline => {
            let mut got = Vec::with_capacity(PIECE);
            for piece in buf.chunks(PIECE) {
                own.write(piece)?;
                exchange(piece, &mut got);
                copy.write(&got)?;
            }
        }
        Cx::ModelOneWriter => {
            let (own_res, copy_res) = std::thread::scope(|sc| {
                let h = sc.spawn(move || -> Result<PieceFile, String> {
                    for piece in buf.chunks(PIECE) {
                        own.write(piece)?;
                    }
                    Ok(own)
                });
                let mut got = Vec::with_capacity(PIECE);
                let mut res = Ok(());
                for piece in buf.chunks(PIECE) {
                    exchange(piece, &mut got);
                    if res.is_ok() {
                        res = copy.write(&got);
                    }
                }
                (h.join().expect("writer does not panic"), res)
            });
            own = own_res?;
            copy_res?;
        }
        _ => {
            // As write_streamed: pieces copied out of the part, bounded queues of two pieces
            // to each writer, buffers returned to pools.
            let (own_res, copy_res) = std::thread::scope(|sc| {
                let (own_tx, own_rx) = sync_channel::<Vec<u8>>(2);
                let (copy_tx, copy_rx) = sync_channel::<Vec<u8>>(2);
                let (own_pool_tx, own_pool) = channel::<Vec<u8>>();
                let (copy_pool_tx, copy_pool) = channel::<Vec<u8>>();
                let ho = sc.spawn(move || -> Result<PieceFile, String> {
                    let mut res = Ok(());
                    for p in own_rx {
                        if res.is_ok() {
                            res = own.write(&p);
                        }
                        let _ = own_pool_tx.send(p);
                    }
                    res.map(|()| own)
                });
                let hc = sc.spawn(move || -> Result<PieceFile, String> {
                    let mut res = Ok(());
                    for p in copy_rx {
                        if res.is_ok() {
                            res = copy.write(&p);
                        }
                        let _ = copy_pool_tx.send(p);
                    }
                    res.map(|()| copy)
                });
                for piece in buf.chunks(PIECE) {
                    let mut mine = own_pool
                        .try_recv()
                        .unwrap_or_else(|_| Vec::with_capacity(PIECE));
                    mine.clear();
                    mine.extend_from_slice(piece);
                    let mut got = copy_pool
                        .try_recv()
                        .unwrap_or_else(|_| Vec::with_capacity(PIECE));
                    exchange(&mine, &mut got);
                    let _ = copy_tx.send(got);
                    let _ = own_tx.send(mine);
                }
                drop((own_tx, copy_tx));
                (
                    ho.join().expect("writer does not panic"),
                    hc.join().expect("writer does not panic"),
                )
            });
            own = own_res?;
            copy = copy_res?;
        }
    }
    Ok(vec![own.publish()?, copy.publish()?])
}

// ---- 2. codec --------------------------------------------------------------------------------

#[derive(Debug)]
struct CodecRow {
    label: String,
    k: usize,
    m: usize,
    shard: usize,
    memcpy: Vec<f64>,
    encode: Vec<f64>,
    recover: Vec<f64>,
    /// The same parity computed over slices of every shard in turn, written into place.
    encode_sliced: Vec<f64>,
}

impl CodecRow {
    fn data_bytes(&self) -> f64 {
        (self.k * self.shard) as f64
    }
}

/// Benchmark 2, in this process only: encode and recover one stripe of `k` data shards.
fn bench_codec(args: &Args) -> Res<Vec<CodecRow>> {
    let mut rows = Vec::new();
    for (label, codec, k, m) in [
        ("xor(4)", Codec::Xor, 3, 1),
        ("rs(2+2)", Codec::ReedSolomon, 2, 2),
        ("rs(4+2)", Codec::ReedSolomon, 4, 2),
        ("rs(8+2)", Codec::ReedSolomon, 8, 2),
    ] {
        // Shards of equal, even size (64-byte multiples), about --codec-mib of data in all.
        let shard = (args.codec_mib * MIB / k) / 64 * 64;
        let data: Vec<Vec<u8>> = (0..k).map(|i| filled(shard, 77 + i as u64)).collect();
        let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let mut dst = filled(k * shard, 3);
        let parity = stripe::encode(codec, &refs, m).map_err(fail)?;
        let mut row = CodecRow {
            label: label.to_string(),
            k,
            m,
            shard,
            memcpy: Vec::new(),
            encode: Vec::new(),
            recover: Vec::new(),
            encode_sliced: Vec::new(),
        };
        let mut sliced: Vec<Vec<u8>> = (0..m).map(|_| filled(shard, 9)).collect();
        for rep in 0..=args.reps {
            for i in order(4, rep) {
                let t = match i {
                    0 => {
                        let t0 = Instant::now();
                        for (d, s) in dst.chunks_mut(shard).zip(&data) {
                            d.copy_from_slice(s);
                        }
                        std::hint::black_box(&dst);
                        t0.elapsed().as_secs_f64()
                    }
                    1 => {
                        let t0 = Instant::now();
                        let p = stripe::encode(codec, &refs, m).map_err(fail)?;
                        let t = t0.elapsed().as_secs_f64();
                        if p != parity {
                            return Err(fail(format!("{label}: encode is not deterministic")));
                        }
                        t
                    }
                    3 => {
                        // Cache-sized slices: the code's passes stay in cache.
                        let t0 = Instant::now();
                        for off in (0..shard).step_by(SLICE) {
                            let end = (off + SLICE).min(shard);
                            let part: Vec<&[u8]> = data.iter().map(|d| &d[off..end]).collect();
                            let p = stripe::encode(codec, &part, m).map_err(fail)?;
                            for (dst, src) in sliced.iter_mut().zip(&p) {
                                dst[off..end].copy_from_slice(src);
                            }
                        }
                        let t = t0.elapsed().as_secs_f64();
                        if sliced != parity {
                            return Err(fail(format!("{label}: sliced encode differs")));
                        }
                        t
                    }
                    _ => {
                        // The first m data shards are lost; building the inputs is not timed.
                        let have: Vec<Option<Vec<u8>>> = data
                            .iter()
                            .enumerate()
                            .map(|(i, d)| (i >= m).then(|| d.clone()))
                            .collect();
                        let pars: Vec<Option<Vec<u8>>> = parity.iter().cloned().map(Some).collect();
                        let t0 = Instant::now();
                        let got = stripe::recover(codec, &have, &pars).map_err(fail)?;
                        let t = t0.elapsed().as_secs_f64();
                        if got != data {
                            return Err(fail(format!("{label}: recover returned other bytes")));
                        }
                        t
                    }
                };
                if rep > 0 {
                    [
                        &mut row.memcpy,
                        &mut row.encode,
                        &mut row.recover,
                        &mut row.encode_sliced,
                    ][i]
                        .push(t);
                }
            }
        }
        rows.push(row);
    }
    Ok(rows)
}

// ---- 3. engine --------------------------------------------------------------------------------

#[derive(Debug)]
struct EngineRow {
    label: String,
    ranks: usize,
    nodes: usize,
    mib: usize,
    checkpoint: Vec<f64>,
    /// restart_test + restart with everything present.
    plain_restart: Vec<f64>,
    /// restart_test + restart after one node's storage was deleted (the rebuild runs in
    /// restart_test).
    lost_restart: Vec<f64>,
    /// restart_test alone after the loss: the rebuild.
    lost_test: Vec<f64>,
    /// restart_test alone with everything present.
    plain_test: Vec<f64>,
}

/// One scheme of an engine group: label, scheme, set size, parity, partner mode.
type SchemeSpec = (&'static str, &'static str, usize, usize);

/// Benchmark 3 on `mpi`: checkpoint and restart with each scheme on `nodes` simulated nodes.
fn bench_engine(
    mpi: &Mpi,
    args: &Args,
    cfg: &Config,
    root: &Path,
    nodes: usize,
    schemes: &[SchemeSpec],
) -> Res<Vec<EngineRow>> {
    mpi.agree("create the test directory", private_dir(root))?;
    let n = args.engine_mib * MIB;
    // Buffer, restore buffer, a part, its partner copy or parity, plus rebuild traffic.
    check_fits(mpi, root, 4 * n as u64, 3 * n as u64, SLACK)?;
    let buf = filled(n, 0xe17 + mpi.rank as u64);
    let mut back = filled(n, 5);
    let mut engines = Vec::new();
    let mut rows = Vec::new();
    for (label, scheme, set, parity) in schemes {
        let c = engine_cfg(cfg, root, nodes, scheme, *set, *parity, "stream");
        let e = new_engine(mpi, c)?;
        let desc = e.redundancy();
        if *scheme != "single" && desc != *label {
            return Err(fail(format!("expected {label}, the engine set up {desc}")));
        }
        engines.push(e);
        rows.push(EngineRow {
            label: label.to_string(),
            ranks: mpi.size,
            nodes,
            mib: args.engine_mib,
            checkpoint: Vec::new(),
            plain_restart: Vec::new(),
            lost_restart: Vec::new(),
            lost_test: Vec::new(),
            plain_test: Vec::new(),
        });
    }
    // Lose the second simulated node (not rank 0's, whose rank prints).
    let victim = root.join("local").join("node1");
    let mut runs = 0usize;
    for rep in 0..=args.reps {
        for i in order(engines.len(), rep) {
            let engine = &mut engines[i];
            let redundant = schemes[i].1 != "single";
            let name = format!("eng{runs}");
            runs += 1;
            let regions = [RegionRef {
                id: 0,
                dtype: Dtype::Double,
                bytes: &buf,
            }];
            let tc = mpi.timed("checkpoint", || {
                engine
                    .checkpoint(&name, 1, &regions)
                    .map_err(|e| e.to_string())
            })?;
            // restart_test then restart, each timed; the restored bytes must be the originals.
            let mut restart = |what: &str| -> Res<(f64, f64)> {
                back.fill(0);
                let tt = mpi.timed(what, || match engine.restart_test(&name) {
                    Ok(Some(1)) => Ok(()),
                    Ok(v) => Err(format!("restart_test found {v:?}, expected v1")),
                    Err(e) => Err(e.to_string()),
                })?;
                let tr = mpi.timed(what, || {
                    let mut r = [RegionMut {
                        id: 0,
                        dtype: Dtype::Double,
                        bytes: &mut back,
                    }];
                    engine
                        .restart(&name, 1, &mut r)
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                })?;
                let same = if back == buf {
                    Ok(())
                } else {
                    Err("restored bytes differ from the checkpointed ones".to_string())
                };
                mpi.agree(what, same)?;
                Ok((tt, tr))
            };
            let lose = || -> Res<()> {
                mpi.world.barrier();
                let res = if mpi.rank == 0 {
                    fs::remove_dir_all(victim.join(&name))
                        .map_err(|e| format!("cannot delete node 1's part: {e}"))
                } else {
                    Ok(())
                };
                mpi.agree("delete node 1", res)
            };
            let (plain, lost) = if !redundant {
                (restart("restart")?, (f64::NAN, f64::NAN))
            } else if rep % 2 == 0 {
                let p = restart("restart")?;
                lose()?;
                (p, restart("restart after loss")?)
            } else {
                // The other order: after the rebuild everything is present again.
                lose()?;
                let l = restart("restart after loss")?;
                (restart("restart")?, l)
            };
            remove_ckpt(mpi, &root.join("local"), None, &name)?;
            if rep > 0 {
                let row = &mut rows[i];
                row.checkpoint.push(tc);
                row.plain_test.push(plain.0);
                row.plain_restart.push(plain.0 + plain.1);
                if redundant {
                    row.lost_test.push(lost.0);
                    row.lost_restart.push(lost.0 + lost.1);
                }
            }
        }
    }
    for e in engines {
        e.finalize().map_err(fail)?;
    }
    Ok(rows)
}

// ---- output ------------------------------------------------------------------------------------

fn ratio_span(v: &[f64]) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{lo:.2} .. {hi:.2}")
}

fn gbs(bytes: f64, s: f64) -> f64 {
    bytes / s / 1e9
}

struct Report {
    ranks: usize,
    cores: usize,
    root: PathBuf,
    tmpfs: bool,
    cpex: Vec<CpexRow>,
    codec: Vec<CodecRow>,
    engine: Vec<EngineRow>,
    notes: Vec<String>,
}

fn print_report(r: &Report) {
    println!(
        "Cairn redundancy benchmark: job of {} ranks, {} cores; tier root {} ({})",
        r.ranks,
        r.cores,
        r.root.display(),
        if r.tmpfs { "tmpfs" } else { "not tmpfs" }
    );
    println!("Each run: barrier, then timed to the op's return on every rank; the time is the slowest rank's.");
    println!("Baselines are measured in the same run, interleaved; read the ratios, not the absolute times.");
    for n in &r.notes {
        println!("note: {n}");
    }
    if !r.cpex.is_empty() {
        println!();
        println!("1. cpex (DEEP-ER 3.2.2): partner copy streamed vs read back, 2 simulated nodes, 1 MiB pieces");
    }
    for row in &r.cpex {
        println!();
        println!(
            "   {} ranks, {} MiB per rank; {} runs of each after 1 warm-up, alternating; files deleted between runs",
            row.ranks, row.mib, row.reps
        );
        println!(
            "   {:<50} {:>12} {:>10} {:>12}",
            "", "median", "vs stream", "MiB/s/rank"
        );
        let s = row.med(Cx::Stream);
        for k in CX_ALL {
            let m = row.med(k);
            println!(
                "   {:<50} {:>12} {:>9.3}x {:>12.0}",
                k.label(),
                ms(m),
                m / s,
                row.mib as f64 / m
            );
        }
        let bound = row.stream_over(Cx::TwoFiles);
        let rb = row.readback_over_stream();
        println!(
            "   stream / max(local write, exchange) = {:.3} (pairs {}); with the single checkpoint as local write: {:.3}",
            bound,
            ratio_span(&row.stream_over_paired(Cx::TwoFiles)),
            row.stream_over(Cx::Single)
        );
        println!(
            "   readback / stream = {:.3} (pairs {})",
            rb,
            ratio_span(&row.readback_paired())
        );
        println!(
            "   where writes and exchange share the same cores, their sum is the floor: stream / (local write + exchange) = {:.3}; stream / best model ({}) = {:.3}",
            row.stream_over_sum(),
            row.best_model().label(),
            row.med(Cx::Stream) / row.med(row.best_model()),
        );
        println!(
            "verdict: {} ranks x {} MiB: stream {} the <= {TARGET_STREAM} target ({bound:.3}); readback/stream {} the >= {TARGET_READBACK} target ({rb:.3})",
            row.ranks,
            row.mib,
            verdict(bound <= TARGET_STREAM),
            verdict(rb >= TARGET_READBACK),
        );
    }
    if !r.codec.is_empty() {
        println!();
        println!("2. Codec throughput, one process, one stripe in memory (GB/s of data shards; baseline memcpy of the same bytes)");
        println!(
            "   {:<10} {:>10} {:>12} {:>12} {:>12} {:>10} {:>10} {:>14}",
            "code",
            "shard",
            "memcpy GB/s",
            "encode GB/s",
            "recover GB/s",
            "enc/memcpy",
            "rec/memcpy",
            "64K-sliced enc"
        );
        for c in &r.codec {
            let (mc, en, re) = (median(&c.memcpy), median(&c.encode), median(&c.recover));
            let sl = median(&c.encode_sliced);
            let b = c.data_bytes();
            println!(
                "   {:<10} {:>10} {:>12.2} {:>12.2} {:>12.2} {:>9.2}x {:>9.2}x {:>9.2} GB/s",
                c.label,
                size_label(c.shard),
                gbs(b, mc),
                gbs(b, en),
                gbs(b, re),
                en / mc,
                re / mc,
                gbs(b, sl)
            );
        }
        println!("   (enc/memcpy, rec/memcpy: time relative to copying the data once; recover rebuilds the first m data shards;");
        println!("    64K-sliced enc: the same parity computed 64 KiB of every shard at a time, as protect.rs could)");
    }
    if !r.engine.is_empty() {
        println!();
        println!("3. Engine: checkpoint vs scheme single; restart after deleting simulated node 1's storage vs a plain restart");
        println!(
            "   {:<10} {:>5} {:>5} {:>11} {:>10} {:>12} {:>12} {:>10} {:>12}",
            "scheme",
            "ranks",
            "nodes",
            "checkpoint",
            "vs single",
            "restart",
            "after loss",
            "loss/plain",
            "rebuild only"
        );
        for e in &r.engine {
            let single = r
                .engine
                .iter()
                .find(|x| x.ranks == e.ranks && x.label == "single")
                .map(|x| median(&x.checkpoint))
                .unwrap_or(f64::NAN);
            let c = median(&e.checkpoint);
            let p = median(&e.plain_restart);
            let (l, lt) = if e.lost_restart.is_empty() {
                (f64::NAN, f64::NAN)
            } else {
                (median(&e.lost_restart), median(&e.lost_test))
            };
            let dash = |x: f64, s: String| if x.is_nan() { "-".to_string() } else { s };
            println!(
                "   {:<10} {:>5} {:>5} {:>11} {:>9.2}x {:>12} {:>12} {:>10} {:>12}",
                e.label,
                e.ranks,
                e.nodes,
                ms(c),
                c / single,
                ms(p),
                dash(l, ms(l)),
                dash(l, format!("{:.2}x", l / p)),
                dash(lt, ms(lt - median(&e.plain_test))),
            );
        }
        if let Some(e) = r.engine.first() {
            println!(
                "   ({} MiB per rank; restart = restart_test + restart, bytes checked; rebuild only = restart_test after the loss minus restart_test without; medians of {} runs)",
                e.mib,
                e.checkpoint.len()
            );
        }
    }
}

fn series(v: &[f64]) -> Value {
    json!({ "median_s": median(v), "samples_s": v })
}

fn report_json(r: &Report) -> Value {
    let cpex: Vec<Value> = r
        .cpex
        .iter()
        .map(|row| {
            let mut kinds = serde_json::Map::new();
            for k in CX_ALL {
                kinds.insert(k.key().into(), series(row.get(k)));
            }
            let bound = row.stream_over(Cx::TwoFiles);
            let rb = row.readback_over_stream();
            json!({
                "ranks": row.ranks,
                "mib_per_rank": row.mib,
                "reps": row.reps,
                "times": kinds,
                "stream_over_max_local_exchange": bound,
                "stream_over_max_local_exchange_paired": row.stream_over_paired(Cx::TwoFiles),
                "stream_over_max_single_exchange": row.stream_over(Cx::Single),
                "stream_over_sum_local_exchange": row.stream_over_sum(),
                "best_model": row.best_model().key(),
                "stream_over_best_model": row.med(Cx::Stream) / row.med(row.best_model()),
                "readback_over_stream": rb,
                "readback_over_stream_paired": row.readback_paired(),
                "target_stream": TARGET_STREAM,
                "target_readback": TARGET_READBACK,
                "stream_meets_target": bound <= TARGET_STREAM,
                "readback_meets_target": rb >= TARGET_READBACK,
            })
        })
        .collect();
    let codec: Vec<Value> = r
        .codec
        .iter()
        .map(|c| {
            let b = c.data_bytes();
            json!({
                "code": c.label, "k": c.k, "m": c.m, "shard_bytes": c.shard,
                "memcpy": series(&c.memcpy), "encode": series(&c.encode), "recover": series(&c.recover),
                "encode_sliced_64k": series(&c.encode_sliced),
                "encode_sliced_gb_s": gbs(b, median(&c.encode_sliced)),
                "memcpy_gb_s": gbs(b, median(&c.memcpy)),
                "encode_gb_s": gbs(b, median(&c.encode)),
                "recover_gb_s": gbs(b, median(&c.recover)),
                "encode_over_memcpy": median(&c.encode) / median(&c.memcpy),
                "recover_over_memcpy": median(&c.recover) / median(&c.memcpy),
            })
        })
        .collect();
    let engine: Vec<Value> = r
        .engine
        .iter()
        .map(|e| {
            let single = r
                .engine
                .iter()
                .find(|x| x.ranks == e.ranks && x.label == "single")
                .map(|x| median(&x.checkpoint));
            json!({
                "scheme": e.label, "ranks": e.ranks, "nodes": e.nodes, "mib_per_rank": e.mib,
                "checkpoint": series(&e.checkpoint),
                "checkpoint_over_single": single.map(|s| median(&e.checkpoint) / s),
                "plain_restart": series(&e.plain_restart),
                "plain_restart_test": series(&e.plain_test),
                "restart_after_loss": (!e.lost_restart.is_empty()).then(|| series(&e.lost_restart)),
                "restart_test_after_loss": (!e.lost_test.is_empty()).then(|| series(&e.lost_test)),
                "after_loss_over_plain": (!e.lost_restart.is_empty())
                    .then(|| median(&e.lost_restart) / median(&e.plain_restart)),
            })
        })
        .collect();
    json!({
        "ranks": r.ranks, "cores": r.cores, "root": r.root.display().to_string(), "tmpfs": r.tmpfs,
        "notes": r.notes, "cpex": cpex, "codec": codec, "engine": engine,
    })
}

// ---- MPI mode ----------------------------------------------------------------------------------

fn run(world: &Mpi, args: &Args) -> i32 {
    let report_failure = |f: &Failure| {
        if world.rank == 0 || !f.peer {
            eprintln!("{PROG}: {}", f.msg);
        }
    };
    // Rank 0 writes the results file; find out now, not after the run, if it cannot.
    let ready = match (&args.json_out, world.rank) {
        (Some(p), 0) => json_out_ready(p),
        _ => Ok(()),
    };
    if let Err(f) = world.agree("--json-out", ready) {
        report_failure(&f);
        return 1;
    }
    let dir = match RunDir::create(world, &args.base, PROG) {
        Ok(d) => d,
        Err(f) => {
            report_failure(&f);
            return 1;
        }
    };
    let cfg = match world.agree(
        "configuration",
        Config::resolve(None, &[]).map_err(|e| e.to_string()),
    ) {
        Ok(c) => c,
        Err(f) => {
            report_failure(&f);
            return 1;
        }
    };
    let mut report = Report {
        ranks: world.size,
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        root: dir.path.clone(),
        tmpfs: on_tmpfs(&dir.path),
        cpex: Vec::new(),
        codec: Vec::new(),
        engine: Vec::new(),
        notes: Vec::new(),
    };
    let result = (|| -> Res<()> {
        if args.cpex {
            for &ranks in &args.cpex_ranks {
                if ranks > world.size {
                    report.notes.push(format!(
                        "cpex with {ranks} ranks skipped: the job has {}",
                        world.size
                    ));
                    continue;
                }
                let root = dir.path.join(format!("cpex-{ranks}"));
                if let Some(rows) = on_first(world, ranks, |m| bench_cpex(m, args, &cfg, &root))? {
                    report.cpex.extend(rows);
                }
            }
        }
        if args.codec {
            if let Some(rows) = on_first(world, 1, |_| bench_codec(args))? {
                report.codec = rows;
            }
        }
        if args.engine {
            let groups: [(usize, usize, &[SchemeSpec]); 2] = [
                (
                    8,
                    4,
                    &[
                        ("single", "single", 0, 2),
                        ("partner", "partner", 0, 2),
                        ("xor(4)", "xor", 4, 1),
                        ("rs(2+2)", "rs", 4, 2),
                    ],
                ),
                (
                    10,
                    10,
                    &[("single", "single", 0, 2), ("rs(8+2)", "rs", 10, 2)],
                ),
            ];
            for (ranks, nodes, schemes) in groups {
                if ranks > world.size {
                    report.notes.push(format!(
                        "engine test with {ranks} ranks on {nodes} nodes skipped: the job has {} (run with -n {ranks} or more)",
                        world.size
                    ));
                    continue;
                }
                let root = dir.path.join(format!("engine-{ranks}"));
                if let Some(rows) = on_first(world, ranks, |m| {
                    bench_engine(m, args, &cfg, &root, nodes, schemes)
                })? {
                    report.engine.extend(rows);
                }
            }
        }
        Ok(())
    })();
    world.world.barrier();
    let path = dir.path.clone();
    drop(dir);
    if world.rank == 0 && path.exists() {
        eprintln!("{PROG}: warning: {} is still there", path.display());
    }
    match result {
        Ok(()) => {
            if world.rank == 0 {
                let json = (args.json || args.json_out.is_some()).then(|| report_json(&report));
                match &json {
                    Some(v) if args.json => println!("{v:#}"),
                    _ => print_report(&report),
                }
                if let (Some(p), Some(v)) = (&args.json_out, &json) {
                    if let Err(e) = write_json(p, v) {
                        eprintln!("{PROG}: {e}");
                        return 1;
                    }
                }
            }
            0
        }
        Err(f) => {
            report_failure(&f);
            1
        }
    }
}

// ---- nbody mode --------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Nb {
    /// No checkpoints: the application alone.
    None,
    Single,
    Stream,
    Readback,
}

const NB_ALL: [Nb; 4] = [Nb::None, Nb::Single, Nb::Stream, Nb::Readback];

impl Nb {
    fn key(self) -> &'static str {
        match self {
            Nb::None => "no_checkpoint",
            Nb::Single => "single",
            Nb::Stream => "partner_stream",
            Nb::Readback => "partner_readback",
        }
    }
}

/// What one nbody run printed, plus its wall time.
#[derive(Debug, Clone, Copy, Default)]
struct NbRun {
    wall: f64,
    /// Steps x mean step time + checkpoint time: the run's loop, without MPI start-up.
    runtime: f64,
    ckpt: f64,
    checkpoints: u64,
    checksum: u64,
}

fn parse_nbody(out: &str) -> Option<NbRun> {
    let mut r = NbRun::default();
    let (mut steps, mut step_ms, mut ck_ms, mut sum) = (None, None, None, None);
    for line in out.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["nbody:", "steps", s, "checkpoints", c, "checkpoint-time", t, "ms"] => {
                steps = s.parse::<f64>().ok();
                r.checkpoints = c.parse().ok()?;
                ck_ms = t.parse::<f64>().ok();
            }
            ["nbody:", "step-time", t, "ms"] => step_ms = t.parse::<f64>().ok(),
            ["nbody:", "final", "checksum", x] => sum = u64::from_str_radix(x, 16).ok(),
            _ => {}
        }
    }
    r.ckpt = ck_ms? * 1e-3;
    r.runtime = steps? * step_ms? * 1e-3 + r.ckpt;
    r.checksum = sum?;
    Some(r)
}

#[derive(Debug)]
struct NbRow {
    ranks: usize,
    nodes: usize,
    bodies: usize,
    bytes_per_rank: usize,
    runs: Vec<(Nb, Vec<NbRun>)>,
}

impl NbRow {
    fn get(&self, k: Nb) -> &[NbRun] {
        &self.runs.iter().find(|(x, _)| *x == k).expect("kind").1
    }
    fn med(&self, k: Nb, f: impl Fn(&NbRun) -> f64) -> f64 {
        median(&self.get(k).iter().map(f).collect::<Vec<_>>())
    }
}

/// Removes the nbody driver's directory when dropped.
struct TmpDir(PathBuf);

impl Drop for TmpDir {
    fn drop(&mut self) {
        if let Err(e) = fs::remove_dir_all(&self.0) {
            eprintln!("{PROG}: could not remove {}: {e}", self.0.display());
        }
    }
}

fn nbody_main(a: &NbArgs) -> Result<(), String> {
    if let Some(p) = &a.json_out {
        json_out_ready(p)?;
    }
    let src_root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let source = src_root.join("examples").join("nbody.c");
    let include = src_root.join("crates").join("cairn-capi").join("include");
    let lib_dir = match &a.lib_dir {
        Some(d) => d.clone(),
        None => std::env::current_exe()
            .map_err(|e| format!("cannot find this program: {e}"))?
            .parent()
            .map(Path::to_path_buf)
            .ok_or("this program has no directory")?,
    };
    let lib_dir = lib_dir
        .canonicalize()
        .map_err(|e| format!("{}: {e}", lib_dir.display()))?;
    if !lib_dir.join("libcairn.so").exists() {
        return Err(format!(
            "no libcairn.so in {}: run `cargo build --release -p cairn-capi` first, or pass --lib-dir",
            lib_dir.display()
        ));
    }
    let dir = a.base.join(format!("{PROG}-nbody-{}", std::process::id()));
    private_dir(&dir)?;
    let dir = TmpDir(dir);
    let exe = dir.0.join("nbody");
    let cc = Command::new("mpicc")
        .args(["-O2", "-std=c11", "-o"])
        .arg(&exe)
        .arg(&source)
        .arg(format!("-I{}", include.display()))
        .arg(format!("-L{}", lib_dir.display()))
        .arg("-lcairn")
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .arg("-lm")
        .status()
        .map_err(|e| format!("cannot run mpicc (Open MPI's compiler wrapper): {e}"))?;
    if !cc.success() {
        return Err(format!("mpicc failed to build {}", source.display()));
    }
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    let root_user = unsafe { libc::geteuid() } == 0;
    let mut rows = Vec::new();
    let mut run_no = 0usize;
    for &(ranks, nodes) in &a.configs {
        let bodies = ranks * a.bodies_per_rank;
        let mut row = NbRow {
            ranks,
            nodes,
            bodies,
            bytes_per_rank: a.bodies_per_rank * 7 * 8 + 8,
            runs: NB_ALL.iter().map(|k| (*k, Vec::new())).collect(),
        };
        for rep in 0..=a.reps {
            for i in order(NB_ALL.len(), rep) {
                let kind = NB_ALL[i];
                let tiers = dir.0.join(format!("run{run_no}"));
                run_no += 1;
                private_dir(&tiers)?;
                let mut cmd = Command::new("mpirun");
                cmd.args(["--oversubscribe", "-n", &ranks.to_string()])
                    .arg(&exe)
                    .args(["--bodies", &bodies.to_string()])
                    .args(["--steps", &a.steps.to_string()])
                    .args([
                        "--every",
                        &if kind == Nb::None { 0 } else { a.every }.to_string(),
                    ])
                    .env("CAIRN_TIERS_LOCAL", tiers.join("local"))
                    .env("CAIRN_TIERS_GLOBAL", tiers.join("global"))
                    .env("CAIRN_TOPOLOGY_SIM_NODES", nodes.to_string())
                    .env(
                        "CAIRN_REDUNDANCY_SCHEME",
                        if kind == Nb::Single || kind == Nb::None {
                            "single"
                        } else {
                            "partner"
                        },
                    )
                    .env(
                        "CAIRN_REDUNDANCY_PARTNER_MODE",
                        if kind == Nb::Readback {
                            "readback"
                        } else {
                            "stream"
                        },
                    );
                if root_user {
                    // Open MPI refuses to run as root without both of these.
                    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
                }
                let t0 = Instant::now();
                let out = cmd
                    .output()
                    .map_err(|e| format!("cannot run mpirun: {e}"))?;
                let wall = t0.elapsed().as_secs_f64();
                let stdout = String::from_utf8_lossy(&out.stdout);
                if !out.status.success() {
                    return Err(format!(
                        "nbody ({} ranks, {}) failed: {}\n{stdout}{}",
                        ranks,
                        kind.key(),
                        out.status,
                        String::from_utf8_lossy(&out.stderr)
                    ));
                }
                let mut run = parse_nbody(&stdout)
                    .ok_or_else(|| format!("cannot read nbody's output:\n{stdout}"))?;
                run.wall = wall;
                fs::remove_dir_all(&tiers).map_err(|e| format!("{}: {e}", tiers.display()))?;
                if rep > 0 {
                    row.runs[i].1.push(run);
                }
            }
        }
        let sums: Vec<u64> = row
            .runs
            .iter()
            .flat_map(|(_, v)| v.iter().map(|r| r.checksum))
            .collect();
        if sums.windows(2).any(|w| w[0] != w[1]) {
            return Err(format!(
                "nbody with {ranks} ranks ended with different checksums: {sums:x?}"
            ));
        }
        rows.push(row);
    }
    if a.json || a.json_out.is_some() {
        let v: Vec<Value> = rows
            .iter()
            .map(|r| {
                let mut kinds = serde_json::Map::new();
                for k in NB_ALL {
                    let runs = r.get(k);
                    kinds.insert(
                        k.key().into(),
                        json!({
                            "runtime": series(&runs.iter().map(|x| x.runtime).collect::<Vec<_>>()),
                            "checkpoint": series(&runs.iter().map(|x| x.ckpt).collect::<Vec<_>>()),
                            "wall": series(&runs.iter().map(|x| x.wall).collect::<Vec<_>>()),
                        }),
                    );
                }
                json!({
                    "ranks": r.ranks, "nodes": r.nodes, "bodies": r.bodies,
                    "checkpoint_bytes_per_rank": r.bytes_per_rank,
                    "steps": a.steps, "every": a.every, "reps": a.reps,
                    "runs": kinds,
                    "readback_over_stream_runtime": r.med(Nb::Readback, |x| x.runtime) / r.med(Nb::Stream, |x| x.runtime),
                    "readback_over_stream_checkpoint": r.med(Nb::Readback, |x| x.ckpt) / r.med(Nb::Stream, |x| x.ckpt),
                    "stream_over_no_checkpoint_runtime": r.med(Nb::Stream, |x| x.runtime) / r.med(Nb::None, |x| x.runtime),
                })
            })
            .collect();
        let v = json!({ "nbody": v });
        if let Some(p) = &a.json_out {
            write_json(p, &v)?;
        }
        if a.json {
            println!("{v:#}");
            return Ok(());
        }
    }
    println!("N-body mock-up (DEEP-ER 4.2.1, Table 1 shape): examples/nbody.c, partner copies streamed vs read back");
    println!(
        "{} steps, a checkpoint every {}; {} runs of each kind after 1 warm-up, alternating; medians",
        a.steps, a.every, a.reps
    );
    println!("runtime = steps x mean step time + checkpoint time, as nbody prints them (slowest rank); wall includes mpirun start-up");
    for r in &rows {
        println!();
        println!(
            "   {} ranks on {} simulated nodes, {} bodies, {} per rank per checkpoint",
            r.ranks,
            r.nodes,
            r.bodies,
            size_label_any(r.bytes_per_rank)
        );
        println!(
            "   {:<28} {:>12} {:>12} {:>12} {:>14}",
            "", "runtime", "checkpoints", "wall", "runtime/none"
        );
        let none = r.med(Nb::None, |x| x.runtime);
        for k in NB_ALL {
            let rt = r.med(k, |x| x.runtime);
            println!(
                "   {:<28} {:>12} {:>12} {:>12} {:>13.3}x",
                k.key(),
                ms(rt),
                ms(r.med(k, |x| x.ckpt)),
                ms(r.med(k, |x| x.wall)),
                rt / none
            );
        }
        println!(
            "   readback/stream: runtime {:.3}, checkpoint time {:.3}; stream/single checkpoint time {:.3}",
            r.med(Nb::Readback, |x| x.runtime) / r.med(Nb::Stream, |x| x.runtime),
            r.med(Nb::Readback, |x| x.ckpt) / r.med(Nb::Stream, |x| x.ckpt),
            r.med(Nb::Stream, |x| x.ckpt) / r.med(Nb::Single, |x| x.ckpt),
        );
    }
    println!();
    println!("   DEEP-ER Table 1 (quoted, not measured here; 8 tasks per node, computation switched off):");
    for (nodes, mb, partner, buddy) in TABLE1 {
        println!(
            "   {nodes:>2} nodes, {mb:>4} MB: PARTNER {partner:.2} s, BUDDY {buddy:.2} s, PARTNER/BUDDY = {:.2}",
            partner / buddy
        );
    }
    Ok(())
}

fn size_label_any(bytes: usize) -> String {
    if bytes >= MIB {
        format!("{:.1} MiB", bytes as f64 / MIB as f64)
    } else {
        format!("{:.0} KiB", bytes as f64 / 1024.0)
    }
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().map(String::as_str) == Some("nbody") {
        // The driver starts mpirun itself, so it must not be an MPI process.
        let code = match parse_nbody_args(argv[1..].to_vec()) {
            Ok(Some(a)) => match nbody_main(&a) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("{PROG} nbody: {e}");
                    1
                }
            },
            Ok(None) => {
                println!("{USAGE}");
                0
            }
            Err(e) => {
                eprintln!("{PROG} nbody: {e}\n{USAGE}");
                2
            }
        };
        std::process::exit(code);
    }
    cairn_bench::mpi_main(PROG, USAGE, parse_args(argv), run);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_parse() {
        let a = parse_args(strings(&[
            "--only",
            "cpex,engine",
            "--sizes=8,16",
            "--reps",
            "2",
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            (a.cpex, a.codec, a.engine, a.sizes, a.reps),
            (true, false, true, vec![8, 16], 2)
        );
        assert_eq!(
            parse_args(strings(&["--full"])).unwrap().unwrap().sizes,
            vec![64, 128, 256, 512]
        );
        assert!(parse_args(strings(&["--help"])).unwrap().is_none());
        assert!(parse_args(strings(&["--only", "x"])).is_err());
        assert!(parse_args(strings(&["--sizes", "0"])).is_err());
        assert!(parse_args(strings(&["--json=1"])).is_err());
        let n = parse_nbody_args(strings(&["--configs", "4:2,16:8", "--steps", "3"]))
            .unwrap()
            .unwrap();
        assert_eq!((n.configs, n.steps), (vec![(4, 2), (16, 8)], 3));
        assert!(parse_nbody_args(strings(&["--configs", "2:4"])).is_err());
        let a = parse_args(strings(&["--json-out", "r.json"]))
            .unwrap()
            .unwrap();
        assert_eq!((a.json, a.json_out), (false, Some(PathBuf::from("r.json"))));
        let n = parse_nbody_args(strings(&["--json-out=n.json"]))
            .unwrap()
            .unwrap();
        assert_eq!(n.json_out, Some(PathBuf::from("n.json")));
    }

    #[test]
    fn nbody_output_parses() {
        let out = "nbody: no checkpoint, starting fresh\n\
                   nbody: step 2 checkpoint v2 1.5 ms\n\
                   nbody: steps 4 checkpoints 2 checkpoint-time 3.000 ms\n\
                   nbody: step-time 10.000 ms\n\
                   nbody: final checksum a7e4fda6ae4b4ac8\n";
        let r = parse_nbody(out).unwrap();
        assert_eq!((r.checkpoints, r.checksum), (2, 0xa7e4fda6ae4b4ac8));
        assert!((r.runtime - 0.043).abs() < 1e-12 && (r.ckpt - 0.003).abs() < 1e-12);
        assert!(parse_nbody("nbody: step-time 1 ms\n").is_none());
    }
}
