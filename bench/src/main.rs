//! `cairn-bench-ckpt`: what a Cairn checkpoint costs, next to baselines measured in the same
//! run. Run it under MPI:
//!
//! ```text
//! mpirun --oversubscribe -n 4 target/release/cairn-bench-ckpt [--mib 256] [--json]
//! ```
//!
//! 1. Fixed cost: many checkpoints of two tiny regions per rank on the node-local tier, each
//!    timed from a barrier to the return of `Engine::checkpoint` (the slowest rank's time),
//!    interleaved with two baselines: one allreduce (the agreement every coordinated
//!    checkpoint needs) and a plain open/write/rename of a tiny file.
//! 2. Bandwidth: a large checkpoint per rank against a plain `write()` of the same buffer to a
//!    file in the same directory tree, alternating, with the files deleted between runs so
//!    both sides pay the same tmpfs page allocation.
//!
//! The machine this is developed on is small and shared, so results are ratios against the
//! baselines, never absolute claims. `bench/README.md` explains every figure.

use cairn_bench::*;
use cairn_comm::{Comm, Op};
use cairn_core::{Config, Dtype, Engine, RegionRef};
use cairn_mpi::mpi::traits::*;
use cairn_mpi::MpiComm;
use serde_json::json;
use std::fs;
use std::path::{Path, PathBuf};

/// Cairn's target for the fixed cost of one checkpoint.
const TARGET_FIXED_S: f64 = 2e-3;
/// SCR's fixed cost per checkpoint as measured in the DEEP-ER project report.
const SCR_FIXED_S: f64 = 0.125;
/// Cairn's target for checkpoint bandwidth relative to a plain write of the same bytes.
const TARGET_BW_RATIO: f64 = 0.9;
/// Memory left free beyond the buffers and files, per node.
const SLACK: u64 = 256 << 20;

const USAGE: &str = "\
usage: mpirun --oversubscribe -n 4 cairn-bench-ckpt [options]
  --mib N       MiB per rank in the bandwidth test (default 256)
  --iters N     timed checkpoints in the fixed-cost test (default 200)
  --warmup N    untimed checkpoints before them (default 20)
  --reps N      timed runs of each kind in the bandwidth test, after one warm-up (default 7)
  --dir DIR     where the run's private directory is created (default /dev/shm)
  --only WHAT   run only the `fixed` or only the `bandwidth` test
  --json        print one JSON object instead of the table
  --json-out F  also write that JSON object to file F (the table is printed as usual)";

#[derive(Debug, Clone)]
struct Args {
    mib: usize,
    iters: usize,
    warmup: usize,
    reps: usize,
    base: PathBuf,
    fixed: bool,
    bandwidth: bool,
    json: bool,
    /// `--json-out`: where the JSON object is also written.
    json_out: Option<PathBuf>,
}

/// Parse the command line; `Ok(None)` asks for the usage text.
fn parse_args(argv: impl IntoIterator<Item = String>) -> Result<Option<Args>, String> {
    let mut a = Args {
        mib: 256,
        iters: 200,
        warmup: 20,
        reps: 7,
        base: PathBuf::from("/dev/shm"),
        fixed: true,
        bandwidth: true,
        json: false,
        json_out: None,
    };
    let mut it = argv.into_iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |name: &str| -> Result<String, String> {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        let mut count = |name: &str, min: usize| -> Result<usize, String> {
            let v = value(name)?;
            match v.parse::<usize>() {
                Ok(n) if n >= min => Ok(n),
                _ => Err(format!("{name} {v:?}: expected a whole number >= {min}")),
            }
        };
        match flag.as_str() {
            "--mib" => a.mib = count("--mib", 1)?,
            "--iters" => a.iters = count("--iters", 1)?,
            "--warmup" => a.warmup = count("--warmup", 0)?,
            "--reps" => a.reps = count("--reps", 1)?,
            "--dir" => a.base = PathBuf::from(value("--dir")?),
            "--only" => match value("--only")?.as_str() {
                "fixed" => (a.fixed, a.bandwidth) = (true, false),
                "bandwidth" => (a.fixed, a.bandwidth) = (false, true),
                other => return Err(format!("--only {other:?}: expected fixed or bandwidth")),
            },
            "--json" if inline.is_none() => a.json = true,
            "--json-out" => a.json_out = Some(PathBuf::from(value("--json-out")?)),
            "-h" | "--help" => return Ok(None),
            _ => return Err(format!("unknown argument {arg:?}")),
        }
    }
    Ok(Some(a))
}

#[derive(Debug)]
struct Fixed {
    iters: usize,
    warmup: usize,
    cairn: Vec<f64>,
    floor: Vec<f64>,
    plain: Vec<f64>,
}

/// Benchmark 1: the fixed cost of a checkpoint of tiny regions.
fn bench_fixed(mpi: &Mpi, args: &Args, cfg: &Config, root: &Path) -> Res<Fixed> {
    mpi.agree("create the test directory", private_dir(root))?;
    // With the default settings: node-local tier, [cache] keep = 2 with deletion in the
    // background, no flush to the global tier; what an application pays between flushes.
    let mut engine =
        Engine::new(Box::new(MpiComm::new(&mpi.world)), with_root(cfg, root)).map_err(fail)?;
    // The floor goes through the same Comm implementation the engine uses.
    let floor_comm = MpiComm::new(&mpi.world);
    let plain_dir = root.join("plain-fixed");
    mpi.agree("create the baseline directory", private_dir(&plain_dir))?;
    let tmp = plain_dir.join(format!("rank{}.tmp", mpi.rank));
    let dst = plain_dir.join(format!("rank{}.dat", mpi.rank));

    let mut state = [0u8; 64];
    for (i, b) in state.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31) ^ mpi.rank as u8;
    }
    let mut out = Fixed {
        iters: args.iters,
        warmup: args.warmup,
        cairn: Vec::with_capacity(args.iters),
        floor: Vec::with_capacity(args.iters),
        plain: Vec::with_capacity(args.iters),
    };
    for i in 0..args.warmup + args.iters {
        let step = (i as i64).to_le_bytes();
        state[0] = i as u8;
        let regions = [
            RegionRef {
                id: 0,
                dtype: Dtype::Int64,
                bytes: &step,
            },
            RegionRef {
                id: 1,
                dtype: Dtype::Double,
                bytes: &state,
            },
        ];
        // Rotate the order so whatever runs after a checkpoint (its background deletion,
        // scheduler effects) does not always land on the same measurement.
        let (mut tc, mut tf, mut tp) = (0.0, 0.0, 0.0);
        for k in 0..3 {
            match (i + k) % 3 {
                0 => {
                    tc = mpi.timed("checkpoint", || {
                        engine
                            .checkpoint("fixed", i as i64 + 1, &regions)
                            .map_err(|e| e.to_string())
                    })?
                }
                1 => {
                    tf = mpi.timed("allreduce", || {
                        let mut v = [1, i as i64, -(i as i64), 0, 0, 0];
                        floor_comm
                            .allreduce_i64(&mut v, Op::Min)
                            .map_err(|e| e.to_string())
                    })?
                }
                _ => {
                    tp = mpi.timed("tiny file", || {
                        let mut bytes = [0u8; 72];
                        bytes[..8].copy_from_slice(&step);
                        bytes[8..].copy_from_slice(&state);
                        write_rename(&tmp, &dst, &mut std::iter::once(&bytes[..]))
                    })?
                }
            }
        }
        if i >= args.warmup {
            out.cairn.push(tc);
            out.floor.push(tf);
            out.plain.push(tp);
        }
    }
    engine.finalize().map_err(fail)?;
    Ok(out)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Plain,
    Cairn,
    Pieces,
    Checksum,
}

#[derive(Debug)]
struct Bandwidth {
    mib: usize,
    reps: usize,
    chunk: usize,
    bytes_total: u64,
    plain: Vec<f64>,
    cairn: Vec<f64>,
    pieces: Vec<f64>,
    checksum: Vec<f64>,
}

/// Collective: refuse to start when a node cannot hold every local rank's buffer and file.
fn check_memory(mpi: &Mpi, root: &Path, mib: usize) -> Res<()> {
    let per_rank = (mib * MIB) as u64;
    check_fits(mpi, root, per_rank, per_rank, SLACK)
}

/// Benchmark 2: checkpoint bandwidth against a plain write of the same bytes.
fn bench_bandwidth(mpi: &Mpi, args: &Args, cfg: &Config, root: &Path) -> Res<Bandwidth> {
    mpi.agree("create the test directory", private_dir(root))?;
    check_memory(mpi, root, args.mib)?;
    let n = args.mib * MIB;
    let buf = filled(n, mpi.rank as u64 + 1);
    let mut cfg = with_root(cfg, root);
    // The checkpoints are deleted behind the engine's back after each run: finalize must not
    // try to flush the newest one.
    cfg.finalize_flush = false;
    let chunk = cfg.block as usize;
    let mut engine = Engine::new(Box::new(MpiComm::new(&mpi.world)), cfg).map_err(fail)?;
    let node_root = root
        .join("local")
        .join(format!("node{}", engine.topology().node));
    let leader = engine.topology().is_node_leader();
    // The plain files go under the same tier root as the checkpoints.
    let plain_dir = node_root.join("plain");
    mpi.agree("create the baseline directory", private_dir(&plain_dir))?;
    let tmp = plain_dir.join(format!("rank{}.tmp", mpi.rank));
    let dst = plain_dir.join(format!("rank{}.dat", mpi.rank));

    let mut out = Bandwidth {
        mib: args.mib,
        reps: args.reps,
        chunk,
        bytes_total: (n * mpi.size) as u64,
        plain: Vec::new(),
        cairn: Vec::new(),
        pieces: Vec::new(),
        checksum: Vec::new(),
    };
    let mut runs = 0usize;
    for rep in 0..=args.reps {
        // Alternate which side goes first; rep 0 is the warm-up of each kind.
        let order = if rep % 2 == 0 {
            [Kind::Plain, Kind::Cairn, Kind::Pieces, Kind::Checksum]
        } else {
            [Kind::Cairn, Kind::Plain, Kind::Checksum, Kind::Pieces]
        };
        for kind in order {
            let t = match kind {
                Kind::Plain => {
                    let t = mpi.timed("plain write", || {
                        write_rename(&tmp, &dst, &mut std::iter::once(&buf[..]))
                    })?;
                    mpi.agree("remove the plain file", remove_file(&dst))?;
                    t
                }
                Kind::Pieces => {
                    let t = mpi.timed("plain write in pieces", || {
                        write_rename(&tmp, &dst, &mut buf.chunks(chunk))
                    })?;
                    mpi.agree("remove the plain file", remove_file(&dst))?;
                    t
                }
                Kind::Cairn => {
                    let name = format!("bw{runs}");
                    runs += 1;
                    let regions = [RegionRef {
                        id: 0,
                        dtype: Dtype::Double,
                        bytes: &buf,
                    }];
                    let t = mpi.timed("checkpoint", || {
                        engine
                            .checkpoint(&name, 1, &regions)
                            .map_err(|e| e.to_string())
                    })?;
                    // A fresh name per run: the engine never deletes these itself, so the
                    // next timed run starts from the same tmpfs state as the plain side.
                    let part = node_root
                        .join(&name)
                        .join("v1")
                        .join(format!("rank{}.ckpt", mpi.rank));
                    mpi.agree("remove the checkpoint", remove_file(&part))?;
                    let dir = node_root.join(&name);
                    let gone = if leader {
                        fs::remove_dir_all(&dir)
                            .map_err(|e| format!("cannot remove {}: {e}", dir.display()))
                    } else {
                        Ok(())
                    };
                    mpi.agree("remove the checkpoint", gone)?;
                    t
                }
                Kind::Checksum => mpi.timed("checksum", || {
                    let mut acc = 0u64;
                    for c in buf.chunks(chunk) {
                        acc ^= cairn_format::checksum(c);
                    }
                    std::hint::black_box(acc);
                    Ok(())
                })?,
            };
            if rep > 0 {
                match kind {
                    Kind::Plain => out.plain.push(t),
                    Kind::Cairn => out.cairn.push(t),
                    Kind::Pieces => out.pieces.push(t),
                    Kind::Checksum => out.checksum.push(t),
                }
            }
        }
    }
    engine.finalize().map_err(fail)?;
    Ok(out)
}

/// Ways of reading the bandwidth runs: cairn/plain bandwidth, i.e. plain time / cairn time.
struct BwRatios {
    /// Ratio of the medians: the headline figure.
    of_medians: f64,
    /// Median over the adjacent (plain, cairn) pairs of one repetition.
    paired_median: f64,
    /// Fastest plain run over fastest cairn run.
    best_of: f64,
    paired_lo: f64,
    paired_hi: f64,
    paired: Vec<f64>,
}

impl BwRatios {
    fn of(b: &Bandwidth) -> BwRatios {
        let paired: Vec<f64> = b.plain.iter().zip(&b.cairn).map(|(p, c)| p / c).collect();
        let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = |v: &[f64]| v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        BwRatios {
            of_medians: median_p90(&b.plain).0 / median_p90(&b.cairn).0,
            paired_median: median_p90(&paired).0,
            best_of: min(&b.plain) / min(&b.cairn),
            paired_lo: min(&paired),
            paired_hi: max(&paired),
            paired,
        }
    }

    /// Whether the other readings fall on the same side of the target as the headline.
    fn readings_agree(&self) -> bool {
        let meets = self.of_medians >= TARGET_BW_RATIO;
        [self.paired_median, self.best_of]
            .iter()
            .all(|x| (*x >= TARGET_BW_RATIO) == meets)
    }
}

struct Context {
    /// The engine settings that matter here, as `section.key = value`.
    settings: Vec<(&'static str, String)>,
    ranks: usize,
    nodes: usize,
    cores: usize,
    root: PathBuf,
    tmpfs: bool,
}

fn print_table(ctx: &Context, fixed: Option<&Fixed>, bw: Option<&Bandwidth>) {
    println!(
        "Cairn checkpoint benchmark: {} ranks on {} node(s), {} cores; tier root {} ({})",
        ctx.ranks,
        ctx.nodes,
        ctx.cores,
        ctx.root.display(),
        if ctx.tmpfs { "tmpfs" } else { "not tmpfs" }
    );
    let settings: Vec<String> = ctx
        .settings
        .iter()
        .map(|(k, v)| format!("{k} = {v}"))
        .collect();
    println!(
        "Engine settings: {} (defaults unless CAIRN_* says otherwise)",
        settings.join(", ")
    );
    println!("Each run: barrier, then timed to the op's return on every rank; the time is the slowest rank's.");
    println!("Baselines are measured in the same run, interleaved; read the ratios, not the absolute times.");
    if let Some(f) = fixed {
        let (cm, cp) = median_p90(&f.cairn);
        let (fm, fp) = median_p90(&f.floor);
        let (pm, pp) = median_p90(&f.plain);
        println!();
        println!(
            "1. Fixed cost: checkpoint of 8 B + 64 B per rank, node-local tier; {} iterations after {} warm-up",
            f.iters, f.warmup
        );
        println!(
            "   {:<44} {:>11} {:>11} {:>12}",
            "", "median", "p90", "median/floor"
        );
        for (label, m, p) in [
            ("cairn Engine::checkpoint", cm, cp),
            ("baseline: allreduce of 6 x i64 (floor)", fm, fp),
            ("baseline: open/write/rename 72 B file", pm, pp),
        ] {
            println!(
                "   {label:<44} {:>11} {:>11} {:>11.1}x",
                ms(m),
                ms(p),
                m / fm
            );
        }
        println!(
            "   cairn above floor + tiny file: {} (median)",
            ms(cm - fm - pm)
        );
        println!(
            "   target 2 ms: median = {:.3}x target, p90 = {:.3}x target",
            cm / TARGET_FIXED_S,
            cp / TARGET_FIXED_S
        );
        println!(
            "   SCR 125 ms (DEEP-ER report): median = {:.5}x SCR ({:.0}x less)",
            cm / SCR_FIXED_S,
            SCR_FIXED_S / cm
        );
        println!(
            "verdict: fixed cost {} the 2 ms target (median {}, p90 {})",
            verdict(cm <= TARGET_FIXED_S),
            ms(cm),
            ms(cp)
        );
    }
    if let Some(b) = bw {
        let mib_total = b.bytes_total as f64 / MIB as f64;
        let (pm, _) = median_p90(&b.plain);
        println!();
        println!(
            "2. Bandwidth: {} MiB per rank x {} ranks = {:.0} MiB; {} runs of each after 1 warm-up, alternating; files deleted between runs",
            b.mib, ctx.ranks, mib_total, b.reps
        );
        println!(
            "   {:<44} {:>11} {:>12} {:>10}",
            "", "median", "MiB/s", "vs plain"
        );
        let pieces = format!(
            "breakdown: write() in {} pieces + rename",
            size_label(b.chunk)
        );
        for (label, v) in [
            ("baseline: plain write() + rename", &b.plain),
            ("cairn Engine::checkpoint", &b.cairn),
            (pieces.as_str(), &b.pieces),
            ("breakdown: xxh3 checksum only, no I/O", &b.checksum),
        ] {
            let (m, _) = median_p90(v);
            println!(
                "   {label:<44} {:>11} {:>12.0} {:>9.3}x",
                ms(m),
                mib_total / m,
                pm / m
            );
        }
        let r = BwRatios::of(b);
        println!(
            "   cairn/plain bandwidth: {:.3} (ratio of medians); median of adjacent pairs {:.3}, best-of {:.3}, pairs span {:.2} .. {:.2}",
            r.of_medians, r.paired_median, r.best_of, r.paired_lo, r.paired_hi
        );
        // The headline is the ratio of medians; say so when the other readings of the same
        // runs land on the other side of the target.
        let meets = r.of_medians >= TARGET_BW_RATIO;
        let noisy = if r.readings_agree() {
            String::new()
        } else {
            "; other readings disagree: too noisy, rerun or raise --reps".to_string()
        };
        println!(
            "verdict: bandwidth {} the 0.9 target (cairn/plain = {:.3}{noisy})",
            verdict(meets),
            r.of_medians
        );
    }
}

fn to_json(ctx: &Context, fixed: Option<&Fixed>, bw: Option<&Bandwidth>) -> serde_json::Value {
    let series = |v: &[f64]| {
        let (m, p) = median_p90(v);
        json!({ "median_s": m, "p90_s": p, "samples_s": v })
    };
    let fixed = fixed.map(|f| {
        let (cm, cp) = median_p90(&f.cairn);
        let fm = median_p90(&f.floor).0;
        json!({
            "iterations": f.iters,
            "warmup": f.warmup,
            "regions_bytes_per_rank": [8, 64],
            "cairn": series(&f.cairn),
            "baseline_allreduce": series(&f.floor),
            "baseline_tiny_file": series(&f.plain),
            "cairn_over_floor": cm / fm,
            "target_s": TARGET_FIXED_S,
            "median_over_target": cm / TARGET_FIXED_S,
            "p90_over_target": cp / TARGET_FIXED_S,
            "scr_s": SCR_FIXED_S,
            "median_over_scr": cm / SCR_FIXED_S,
            "meets_target": cm <= TARGET_FIXED_S,
        })
    });
    let bw = bw.map(|b| {
        let pm = median_p90(&b.plain).0;
        let r = BwRatios::of(b);
        let mib_total = b.bytes_total as f64 / MIB as f64;
        let with_bw = |v: &[f64]| {
            let mut s = series(v);
            let m = median_p90(v).0;
            s["mib_per_s"] = json!(mib_total / m);
            s["bandwidth_vs_plain"] = json!(pm / m);
            s
        };
        json!({
            "mib_per_rank": b.mib,
            "bytes_total": b.bytes_total,
            "reps": b.reps,
            "chunk_bytes": b.chunk,
            "baseline_plain_write": with_bw(&b.plain),
            "cairn": with_bw(&b.cairn),
            "breakdown_write_in_chunks": with_bw(&b.pieces),
            "breakdown_checksum_only": with_bw(&b.checksum),
            "cairn_over_plain_bandwidth": r.of_medians,
            "paired_ratio_median": r.paired_median,
            "best_of_ratio": r.best_of,
            "paired_ratios": r.paired,
            "readings_agree": r.readings_agree(),
            "target_ratio": TARGET_BW_RATIO,
            "meets_target": r.of_medians >= TARGET_BW_RATIO,
        })
    });
    json!({
        "ranks": ctx.ranks,
        "nodes": ctx.nodes,
        "cores": ctx.cores,
        "root": ctx.root.display().to_string(),
        "tmpfs": ctx.tmpfs,
        "settings": ctx.settings.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "fixed_cost": fixed,
        "bandwidth": bw,
    })
}

fn run(mpi: &Mpi, args: &Args) -> i32 {
    // Rank 0 writes the results file; find out now, not after the run, if it cannot.
    let ready = match (&args.json_out, mpi.rank) {
        (Some(p), 0) => json_out_ready(p),
        _ => Ok(()),
    };
    if let Err(f) = mpi.agree("--json-out", ready) {
        if mpi.rank == 0 || !f.peer {
            eprintln!("cairn-bench-ckpt: {}", f.msg);
        }
        return 1;
    }
    let dir = match RunDir::create(mpi, &args.base, "cairn-bench-ckpt") {
        Ok(d) => d,
        Err(f) => {
            if mpi.rank == 0 || !f.peer {
                eprintln!("cairn-bench-ckpt: {}", f.msg);
            }
            return 1;
        }
    };
    // The engine's usual configuration (defaults, the CAIRN_CONFIG file, CAIRN_* variables,
    // so settings can be varied from outside); each test moves the tier roots under its own
    // directory.
    let cfg = match mpi.agree(
        "configuration",
        Config::resolve(None, &[]).map_err(|e| e.to_string()),
    ) {
        Ok(c) => c,
        Err(f) => {
            if mpi.rank == 0 || !f.peer {
                eprintln!("cairn-bench-ckpt: {}", f.msg);
            }
            return 1;
        }
    };
    let ctx = Context {
        settings: vec![
            ("reduction.block", size_label(cfg.block as usize)),
            ("cache.keep", cfg.keep.to_string()),
            ("flush.every", cfg.flush_every.to_string()),
        ],
        ranks: mpi.size,
        nodes: count_nodes(mpi),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        root: dir.path.clone(),
        tmpfs: on_tmpfs(&dir.path),
    };
    let result = (|| -> Res<(Option<Fixed>, Option<Bandwidth>)> {
        let fixed = if args.fixed {
            let f = bench_fixed(mpi, args, &cfg, &dir.path.join("fixed"))?;
            Some(f)
        } else {
            None
        };
        let bw = if args.bandwidth {
            Some(bench_bandwidth(
                mpi,
                args,
                &cfg,
                &dir.path.join("bandwidth"),
            )?)
        } else {
            None
        };
        Ok((fixed, bw))
    })();
    // Every rank has left its files (failures are agreed, so all ranks get here together).
    mpi.world.barrier();
    let path = dir.path.clone();
    drop(dir);
    if mpi.rank == 0 && path.exists() {
        eprintln!(
            "cairn-bench-ckpt: warning: {} is still there",
            path.display()
        );
    }
    match result {
        Ok((fixed, bw)) => {
            if mpi.rank == 0 {
                let json = (args.json || args.json_out.is_some())
                    .then(|| to_json(&ctx, fixed.as_ref(), bw.as_ref()));
                match &json {
                    Some(v) if args.json => println!("{v:#}"),
                    _ => print_table(&ctx, fixed.as_ref(), bw.as_ref()),
                }
                if let (Some(p), Some(v)) = (&args.json_out, &json) {
                    if let Err(e) = write_json(p, v) {
                        eprintln!("cairn-bench-ckpt: {e}");
                        return 1;
                    }
                }
            }
            0
        }
        Err(f) => {
            if mpi.rank == 0 || !f.peer {
                eprintln!("cairn-bench-ckpt: {}", f.msg);
            }
            1
        }
    }
}

fn main() {
    cairn_bench::mpi_main(
        "cairn-bench-ckpt",
        USAGE,
        parse_args(std::env::args().skip(1)),
        run,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Result<Option<Args>, String> {
        parse_args(strings(v))
    }

    #[test]
    fn arguments_parse() {
        let a = args(&["--mib", "16", "--iters=50", "--json", "--only", "fixed"])
            .unwrap()
            .unwrap();
        assert_eq!(
            (a.mib, a.iters, a.json, a.fixed, a.bandwidth),
            (16, 50, true, true, false)
        );
        let a = args(&["--json-out", "r/ckpt.json"]).unwrap().unwrap();
        assert_eq!(
            (a.json, a.json_out),
            (false, Some(PathBuf::from("r/ckpt.json")))
        );
        assert!(args(&["--json-out"]).unwrap_err().contains("needs a value"));
        assert!(args(&["--help"]).unwrap().is_none());
        assert!(args(&["--mib", "0"]).unwrap_err().contains(">= 1"));
        assert!(args(&["--mib"]).unwrap_err().contains("needs a value"));
        assert!(args(&["--only", "x"]).is_err());
        assert!(args(&["--bogus"]).is_err());
    }

    #[test]
    fn median_and_p90() {
        assert_eq!(median_p90(&[3.0, 1.0, 2.0]), (2.0, 3.0));
        assert_eq!(median_p90(&[4.0, 1.0, 2.0, 3.0]), (2.5, 4.0));
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(median_p90(&v), (50.5, 90.0));
        assert_eq!(median_p90(&[7.0]), (7.0, 7.0));
    }
}
