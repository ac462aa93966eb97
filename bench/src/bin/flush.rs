//! `cairn-bench-flush`: what flushing checkpoints to the global tier costs an application, and
//! the fixed and per-byte cost of a checkpoint made durable, each next to a baseline measured
//! in the same run.
//!
//! ```text
//! mpirun --oversubscribe -n 2 target/release/cairn-bench-flush [--mib 32] [--global /tmp] [--json]
//! ```
//!
//! 1. `app` (DEEP-ER style): a 2D 5-point Jacobi stencil on each rank's own array that
//!    checkpoints every K steps; the whole application's wall time with checkpoints kept
//!    node-local only (`none`), flushed to the global tier in the background (`async`) or
//!    before `checkpoint` returns (`sync`), and without checkpoints (`no-ckpt`), repeated in a
//!    rotating order, medians compared.
//! 2. `fit` (scrio style): per-rank sizes n, the time of a checkpoint made durable
//!    (`checkpoint` then `flush`) and of a node-local checkpoint alone, each fitted by least
//!    squares to t(n) = t_overhead + n / B_max.
//!
//! The machine this is developed on is small and shared: results are ratios against the
//! baselines, never absolute claims. `bench/README.md` explains every figure.

use cairn_bench::*;
use cairn_core::{Config, Engine, RegionRef};
use cairn_mpi::mpi::collective::SystemOperation;
use cairn_mpi::mpi::traits::*;
use cairn_mpi::MpiComm;
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

const PROG: &str = "cairn-bench-flush";
/// Memory and disk left free beyond the arrays and files, per node.
const SLACK: u64 = 256 << 20;
/// Cairn's target: flushing every checkpoint in the background costs the application at most
/// this much over keeping checkpoints node-local, when a flush takes less time than the
/// compute between two checkpoints.
const TARGET_ASYNC: f64 = 1.05;
/// Columns of each rank's grid (rows follow from `--mib`).
const COLS: usize = 1024;
/// The checkpoint name used by the application.
const APP: &str = "app";

const USAGE: &str = "\
usage: mpirun --oversubscribe -n 2 cairn-bench-flush [options]
  --only WHAT       run only the `app` or only the `fit` part
  --mib N           MiB of f64 per rank in the application (default 32)
  --steps N         application steps per run (default 40)
  --every K         checkpoint after every K-th step, except the last (default 5)
  --sweeps N        stencil sweeps per step (default 0: calibrated to --step-ms)
  --step-ms N       compute per step the calibration aims at, in ms (default 75)
  --reps N          runs of each application variant, medians printed (default 5)
  --sizes LIST      MiB per rank in the fit (default 1,4,16,64,128)
  --fit-reps N      timed calls per size and kind in the fit, after one warm-up (default 5)
  --local DIR       where the node-local tier's private directory is created (default /dev/shm)
  --global DIR      where the global tier's private directory is created, on a real disk
                    (default /tmp)
  --json            print one JSON object instead of the tables
  --json-out FILE   also write that JSON object to FILE (the tables are printed as usual)";

// ---- arguments ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Args {
    app: bool,
    fit: bool,
    mib: usize,
    steps: usize,
    every: usize,
    sweeps: usize,
    step_ms: usize,
    reps: usize,
    sizes: Vec<usize>,
    fit_reps: usize,
    local: PathBuf,
    global: PathBuf,
    json: bool,
    /// `--json-out`: where the JSON object is also written.
    json_out: Option<PathBuf>,
}

/// Parse the command line; `Ok(None)` asks for the usage text.
fn parse_args(argv: Vec<String>) -> Result<Option<Args>, String> {
    let mut a = Args {
        app: true,
        fit: true,
        mib: 32,
        steps: 40,
        every: 5,
        sweeps: 0,
        step_ms: 75,
        reps: 5,
        sizes: vec![1, 4, 16, 64, 128],
        fit_reps: 5,
        local: PathBuf::from("/dev/shm"),
        global: PathBuf::from("/tmp"),
        json: false,
        json_out: None,
    };
    let go = walk(argv, |flag, value| {
        match flag {
            "--only" => match value()?.as_str() {
                "app" => (a.app, a.fit) = (true, false),
                "fit" => (a.app, a.fit) = (false, true),
                other => return Err(format!("--only {other:?}: expected app or fit")),
            },
            "--mib" => a.mib = count(flag, value()?, 1)?,
            "--steps" => a.steps = count(flag, value()?, 2)?,
            "--every" => a.every = count(flag, value()?, 1)?,
            "--sweeps" => a.sweeps = count(flag, value()?, 0)?,
            "--step-ms" => a.step_ms = count(flag, value()?, 1)?,
            "--reps" => a.reps = count(flag, value()?, 1)?,
            "--sizes" => a.sizes = list(flag, &value()?, 1)?,
            "--fit-reps" => a.fit_reps = count(flag, value()?, 1)?,
            "--local" => a.local = PathBuf::from(value()?),
            "--global" => a.global = PathBuf::from(value()?),
            "--json" => a.json = true,
            "--json-out" => a.json_out = Some(PathBuf::from(value()?)),
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    if !go {
        return Ok(None);
    }
    if a.every >= a.steps {
        return Err(format!(
            "--every {} with --steps {}: no checkpoint would be taken (none after the last step)",
            a.every, a.steps
        ));
    }
    let mut distinct = a.sizes.clone();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() < 2 {
        return Err("--sizes: the fit needs at least two different sizes".into());
    }
    Ok(Some(a))
}

// ---- the application ---------------------------------------------------------------------

/// Each rank's grid: `rows x COLS` f64, two copies for the Jacobi sweep.
struct Grid {
    cur: Vec<f64>,
    next: Vec<f64>,
}

impl Grid {
    fn new(mib: usize, rank: usize) -> Grid {
        let n = (mib * MIB / 8) / COLS * COLS;
        let mut g = Grid {
            cur: vec![0.0; n],
            next: vec![0.0; n],
        };
        g.reset(rank);
        g
    }

    fn rows(&self) -> usize {
        self.cur.len() / COLS
    }

    /// The same start on every run: a hot top edge, pseudo-random values elsewhere.
    fn reset(&mut self, rank: usize) {
        let seed = 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(rank as u64 + 1);
        for (i, v) in self.cur.iter_mut().enumerate() {
            *v = if i < COLS {
                1.0
            } else {
                ((i as u64 ^ seed).wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64
                    / (1u64 << 53) as f64
            };
        }
        self.next.copy_from_slice(&self.cur);
    }

    /// `sweeps` Jacobi sweeps; returns the squared change of the last one.
    fn step(&mut self, sweeps: usize) -> f64 {
        let mut res = 0.0;
        for s in 0..sweeps {
            res = sweep(&self.cur, &mut self.next, s + 1 == sweeps);
            std::mem::swap(&mut self.cur, &mut self.next);
        }
        res
    }

    fn sum(&self) -> f64 {
        self.cur.iter().sum()
    }
}

/// One 5-point Jacobi sweep `src -> dst` with fixed edges; with `residual`, the sum of the
/// squared changes.
fn sweep(src: &[f64], dst: &mut [f64], residual: bool) -> f64 {
    let rows = src.len() / COLS;
    let last = (rows - 1) * COLS;
    dst[..COLS].copy_from_slice(&src[..COLS]);
    dst[last..].copy_from_slice(&src[last..]);
    let mut res = 0.0;
    for i in 1..rows - 1 {
        let up = &src[(i - 1) * COLS..i * COLS];
        let mid = &src[i * COLS..(i + 1) * COLS];
        let dn = &src[(i + 1) * COLS..(i + 2) * COLS];
        let out = &mut dst[i * COLS..(i + 1) * COLS];
        out[0] = mid[0];
        out[COLS - 1] = mid[COLS - 1];
        let inner = 1..COLS - 1;
        for ((((o, u), d), l), r) in out[inner.clone()]
            .iter_mut()
            .zip(&up[inner.clone()])
            .zip(&dn[inner.clone()])
            .zip(&mid[..COLS - 2])
            .zip(&mid[2..])
        {
            *o = 0.25 * (u + d + l + r);
        }
        if residual {
            res += out[inner.clone()]
                .iter()
                .zip(&mid[inner])
                .map(|(o, m)| (o - m) * (o - m))
                .sum::<f64>();
        }
    }
    res
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    NoCkpt,
    None,
    Async,
    Sync,
}

const VARIANTS: [Variant; 4] = [
    Variant::NoCkpt,
    Variant::None,
    Variant::Async,
    Variant::Sync,
];

impl Variant {
    fn key(self) -> &'static str {
        match self {
            Variant::NoCkpt => "no-ckpt",
            Variant::None => "none",
            Variant::Async => "async",
            Variant::Sync => "sync",
        }
    }

    fn meaning(self) -> &'static str {
        match self {
            Variant::NoCkpt => "no checkpoints (compute baseline)",
            Variant::None => "node-local only, no flush",
            Variant::Async => "flush every one, background",
            Variant::Sync => "flush every one, before return",
        }
    }

    /// The engine's configuration for this variant, or `None` for no engine.
    fn config(self, base: &Config, local: &Path, global: &Path) -> Option<Config> {
        let mut c = base.clone();
        c.local = Some(local.to_path_buf());
        c.global = global.to_path_buf();
        c.fsync_global = true;
        c.flush_seconds = 0.0;
        c.flush_auto = false;
        match self {
            Variant::NoCkpt => return None,
            Variant::None => {
                c.flush_every = 0;
                c.finalize_flush = false;
            }
            Variant::Async | Variant::Sync => {
                c.flush_every = 1;
                c.flush_sync = self == Variant::Sync;
                c.finalize_flush = true;
            }
        }
        Some(c)
    }
}

/// One application run; every time is the slowest rank's, in seconds.
#[derive(Debug, Clone, Copy, Default)]
struct AppRun {
    /// Barrier to the return of `finalize` (the engine is created before the barrier).
    wall: f64,
    /// Stencil sweeps alone, summed over the steps.
    compute: f64,
    /// The end of the last step to the return of `finalize` (pending flushes waited for).
    end: f64,
    /// Inside `checkpoint`, summed over the run.
    checkpoint: f64,
    checkpoints: u64,
    /// Sum over flushes of the slowest rank's copy time (`Stats::flush_seconds`).
    flush: f64,
    flushes: u64,
    /// CPU time of the rank's process (all its threads, the flush thread included) over the
    /// timed run.
    cpu: f64,
}

/// CPU time (user + system) of this process so far, every thread included, in seconds.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage(2) writes into the zeroed struct we pass.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Cores this process may run on (its CPU affinity, which `mpirun` may have narrowed by
/// binding the rank) and cores online.
fn cores() -> (usize, usize) {
    let allowed = std::thread::available_parallelism().map_or(1, |n| n.get());
    // SAFETY: sysconf(3) has no preconditions.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
    (allowed, online)
}

fn new_engine(mpi: &Mpi, cfg: Config) -> Res<Engine> {
    // Engine::new is collective and agreed: every rank fails if one does.
    Engine::new(Box::new(MpiComm::new(&mpi.world)), cfg).map_err(fail)
}

/// One run of the application with `cfg` (`None`: without checkpoints). Returns the run and
/// this rank's final grid sum.
fn app_run(
    mpi: &Mpi,
    args: &Args,
    cfg: Option<Config>,
    grid: &mut Grid,
    sweeps: usize,
) -> Res<(AppRun, f64)> {
    grid.reset(mpi.rank);
    let flushing = cfg.as_ref().is_some_and(|c| c.flush_every > 0);
    let mut engine = match cfg {
        Some(c) => Some(new_engine(mpi, c)?),
        None => None,
    };
    let mut mine = [0.0f64; 5]; // loop, compute, end, checkpoint, cpu
    let mut counts = (0, 0.0, 0);
    let wall = mpi.timed("application run", || {
        let t0 = Instant::now();
        let cpu0 = cpu_seconds();
        let mut last = None;
        for s in 1..=args.steps {
            let tc = Instant::now();
            let r = grid.step(sweeps);
            mine[1] += tc.elapsed().as_secs_f64();
            // The convergence check a real solver makes every step.
            let mut total = 0.0;
            mpi.world
                .all_reduce_into(&r, &mut total, SystemOperation::sum());
            std::hint::black_box(total);
            // No checkpoint after the last step: there is nothing left to restart.
            if s % args.every == 0 && s < args.steps {
                if let Some(e) = engine.as_mut() {
                    e.checkpoint(APP, s as i64, &[RegionRef::new(0, &grid.cur[..])])
                        .map_err(|e| e.to_string())?;
                    last = Some(s as i64);
                }
            }
        }
        mine[0] = t0.elapsed().as_secs_f64();
        if let Some(mut e) = engine.take() {
            // What finalize does with [checkpoint] finalize = true, made explicit so the
            // statistics include the last flush.
            if let (true, Some(v)) = (flushing, last) {
                e.flush(APP, v).map_err(|e| e.to_string())?;
            }
            let st = e.stats();
            mine[3] = st.checkpoint_seconds;
            counts = (st.checkpoints, st.flush_seconds, st.flushes);
            e.finalize().map_err(|e| e.to_string())?;
        }
        mine[2] = t0.elapsed().as_secs_f64() - mine[0];
        mine[4] = cpu_seconds() - cpu0;
        Ok(())
    })?;
    let mut slowest = [0.0f64; 5];
    // The loop's time (mine[0]) only splits `end` from the wall time.
    mpi.world
        .all_reduce_into(&mine[..], &mut slowest[..], SystemOperation::max());
    let run = AppRun {
        wall,
        compute: slowest[1],
        end: slowest[2],
        checkpoint: slowest[3],
        checkpoints: counts.0,
        flush: counts.1,
        flushes: counts.2,
        cpu: slowest[4],
    };
    Ok((run, grid.sum()))
}

struct AppReport {
    rows: usize,
    sweeps: usize,
    sweep_s: f64,
    calibrated: bool,
    checkpoints: usize,
    /// Per variant (in `VARIANTS` order), per repetition.
    runs: Vec<Vec<AppRun>>,
}

impl AppReport {
    fn get(&self, v: Variant) -> &[AppRun] {
        &self.runs[VARIANTS.iter().position(|x| *x == v).unwrap_or(0)]
    }

    fn med(&self, v: Variant, f: impl Fn(&AppRun) -> f64) -> f64 {
        median(&self.get(v).iter().map(f).collect::<Vec<_>>())
    }

    /// For each run of `v` that counted something: a time over its count (`f` gives both),
    /// e.g. the flush time per flush.
    fn per_count(&self, v: Variant, f: impl Fn(&AppRun) -> (f64, u64)) -> Vec<f64> {
        self.get(v)
            .iter()
            .map(f)
            .filter(|(_, n)| *n > 0)
            .map(|(s, n)| s / n as f64)
            .collect()
    }

    /// Whether a flush can hide behind the compute: the median background flush per
    /// checkpoint, the compute between two checkpoints and the compute per step (of the
    /// runs without checkpoints).
    fn flush_vs_compute(&self, args: &Args) -> (f64, f64, f64) {
        let flush = median(&self.per_count(Variant::Async, |x| (x.flush, x.flushes)));
        let step = self.med(Variant::NoCkpt, |x| x.compute / args.steps as f64);
        (flush, step * args.every as f64, step)
    }

    /// Per repetition: variant `a`'s wall time over `b`'s (runs of one repetition are adjacent).
    fn paired(&self, a: Variant, b: Variant) -> Vec<f64> {
        self.get(a)
            .iter()
            .zip(self.get(b))
            .map(|(x, y)| x.wall / y.wall)
            .collect()
    }
}

/// Part 1: the application's wall time in each variant.
fn bench_app(mpi: &Mpi, args: &Args, cfg: &Config, shm: &Path, disk: &Path) -> Res<AppReport> {
    let bytes = (args.mib * MIB) as u64;
    let checkpoints = (args.steps - 1) / args.every;
    // Two grids; up to keep + 2 versions node-local (the window, a new one and one pinned by
    // its flush); every checkpoint on the global tier (keep_global = 0 keeps all).
    let keep_local = cfg.keep as u64 + 2;
    check_fits(mpi, shm, 2 * bytes, keep_local * bytes, SLACK)?;
    check_fits(mpi, disk, 0, checkpoints as u64 * bytes, SLACK)?;
    let mut grid = Grid::new(args.mib, mpi.rank);
    let (sweeps, sweep_s) = if args.sweeps > 0 {
        (args.sweeps, f64::NAN)
    } else {
        grid.step(2);
        let t = mpi.timed("calibration", || {
            grid.step(4);
            Ok(())
        })? / 4.0;
        let n = (args.step_ms as f64 * 1e-3 / t).round().max(1.0) as usize;
        (n, t)
    };
    let local = shm.join("app-local");
    let global = disk.join("app-global");
    let mut report = AppReport {
        rows: grid.rows(),
        sweeps,
        sweep_s,
        calibrated: args.sweeps == 0,
        checkpoints,
        runs: vec![Vec::new(); VARIANTS.len()],
    };
    let mut reference = None;
    for rep in 0..args.reps {
        for i in order(VARIANTS.len(), rep) {
            let v = VARIANTS[i];
            let (run, sum) = app_run(mpi, args, v.config(cfg, &local, &global), &mut grid, sweeps)?;
            if v != Variant::NoCkpt {
                remove_ckpt(mpi, &local, Some(&global), APP)?;
            }
            // Checkpointing must not change the result (bit for bit: the same operations).
            let same = match reference {
                None => {
                    reference = Some(sum);
                    Ok(())
                }
                Some(r) if r.to_bits() == sum.to_bits() => Ok(()),
                Some(r) => Err(format!(
                    "the {} run ended with grid sum {sum}, the first run with {r}",
                    v.key()
                )),
            };
            mpi.agree("check the result", same)?;
            report.runs[i].push(run);
        }
    }
    Ok(report)
}

fn print_app(args: &Args, ranks_per_node: usize, r: &AppReport) {
    println!();
    println!("1. Application overhead of flushing (DEEP-ER style)");
    let calib = if r.calibrated {
        format!(
            " (calibrated: one sweep {} x {} = {} per step, aimed at {} ms)",
            ms(r.sweep_s),
            r.sweeps,
            ms(r.sweep_s * r.sweeps as f64),
            args.step_ms
        )
    } else {
        String::new()
    };
    println!(
        "   2D 5-point Jacobi stencil, {} MiB of f64 per rank ({} x {COLS}), {} sweeps per step{calib}",
        args.mib,
        r.rows,
        r.sweeps
    );
    println!(
        "   {} steps, one allreduce per step; a checkpoint of the grid after every {}th step but the last ({} per run)",
        args.steps, args.every, r.checkpoints
    );
    println!(
        "   {} runs of each variant, order rotating; medians. wall = barrier to the return of finalize, slowest rank",
        args.reps
    );
    println!(
        "   {:<8} {:<33} {:>8} {:>16} {:>7} {:>12} {:>10} {:>10} {:>10} {:>9}",
        "variant",
        "",
        "wall",
        "runs span",
        "/ none",
        "compute/step",
        "cpu/step",
        "ckpt/ckpt",
        "flush/ckpt",
        "end"
    );
    let none = r.med(Variant::None, |x| x.wall);
    let steps = args.steps as f64;
    for v in VARIANTS {
        let runs = r.get(v);
        let walls: Vec<f64> = runs.iter().map(|x| x.wall).collect();
        let lo = walls.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = walls.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let wall = median(&walls);
        let per = |f: fn(&AppRun) -> (f64, u64)| {
            let vals = r.per_count(v, f);
            if vals.is_empty() {
                "-".to_string()
            } else {
                ms(median(&vals))
            }
        };
        println!(
            "   {:<8} {:<33} {:>8} {:>16} {:>7.3} {:>12} {:>10} {:>10} {:>10} {:>9}",
            v.key(),
            v.meaning(),
            format!("{wall:.3} s"),
            format!("{lo:.3} .. {hi:.3} s"),
            wall / none,
            ms(r.med(v, |x| x.compute / steps)),
            ms(r.med(v, |x| x.cpu / steps)),
            per(|x| (x.checkpoint, x.checkpoints)),
            per(|x| (x.flush, x.flushes)),
            ms(r.med(v, |x| x.end)),
        );
    }
    let no_ckpt = r.med(Variant::NoCkpt, |x| x.wall);
    let asy = r.med(Variant::Async, |x| x.wall);
    let syn = r.med(Variant::Sync, |x| x.wall);
    let join = |v: Vec<f64>| {
        v.iter()
            .map(|x| format!("{x:.3}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "   async/none = {:.3} (per repetition: {}), sync/none = {:.3} (per repetition: {}), none/no-ckpt = {:.3}",
        asy / none,
        join(r.paired(Variant::Async, Variant::None)),
        syn / none,
        join(r.paired(Variant::Sync, Variant::None)),
        none / no_ckpt
    );
    // Was the global tier the bottleneck? Compare a flush with the compute it can hide behind.
    let (flush, between, step) = r.flush_vs_compute(args);
    println!(
        "   flush vs compute: async flush {} per checkpoint vs {} of compute between checkpoints ({} steps x {}, no-ckpt) = {:.2}",
        ms(flush),
        ms(between),
        args.every,
        ms(step),
        flush / between
    );
    // Where the rest goes: CPU the engine's threads take from the compute.
    let cpu0 = r.med(Variant::NoCkpt, |x| x.cpu);
    let extra = |v: Variant| ms((r.med(v, |x| x.cpu) - cpu0) / r.checkpoints as f64);
    let (allowed, online) = cores();
    println!(
        "   CPU beyond no-ckpt per checkpoint (slowest rank, all threads): none {}, async {}, sync {}; compute per step async / no-ckpt = {:.3}",
        extra(Variant::None),
        extra(Variant::Async),
        extra(Variant::Sync),
        r.med(Variant::Async, |x| x.compute / steps) / step
    );
    let flush_thread = if allowed == 1 {
        "shares its rank's only core with the compute"
    } else if ranks_per_node < online {
        "can run on a core no rank computes on"
    } else {
        "competes with the compute (every core has a computing rank)"
    };
    println!(
        "   each rank may run on {allowed} of {online} cores (its CPU affinity), {ranks_per_node} rank(s) per node: the flush thread {flush_thread}"
    );
    let ratio = asy / none;
    if flush < between {
        println!(
            "verdict: async/none = {ratio:.3} {} the {TARGET_ASYNC} target (a flush takes {:.2} of the compute between checkpoints)",
            verdict(ratio <= TARGET_ASYNC),
            flush / between
        );
    } else {
        println!(
            "verdict: the global tier is the bottleneck (a flush takes {:.2}x the compute between checkpoints); the {TARGET_ASYNC} target does not apply; async/none = {ratio:.3}",
            flush / between
        );
    }
}

// ---- the fit -----------------------------------------------------------------------------

/// t(n) = t0 + n / bw fitted by least squares of the relative residuals (weights 1 / t_i^2),
/// n in MiB, t in seconds. Unweighted, the largest sizes' noise (a few per cent of a long call)
/// would outweigh the whole fixed cost the small sizes measure.
#[derive(Debug, Clone, Copy)]
struct LinFit {
    t0: f64,
    /// Seconds per MiB (1 / B_max).
    per_mib: f64,
    /// Weighted coefficient of determination.
    r2: f64,
}

impl LinFit {
    fn of(x: &[f64], y: &[f64]) -> LinFit {
        let w: Vec<f64> = y.iter().map(|t| 1.0 / (t * t)).collect();
        let sw: f64 = w.iter().sum();
        let mean = |v: &[f64]| v.iter().zip(&w).map(|(a, w)| w * a).sum::<f64>() / sw;
        let (mx, my) = (mean(x), mean(y));
        let sum = |f: &dyn Fn(f64, f64) -> f64| -> f64 {
            x.iter()
                .zip(y)
                .zip(&w)
                .map(|((a, b), w)| w * f(*a, *b))
                .sum()
        };
        let per_mib = sum(&|a, b| (a - mx) * (b - my)) / sum(&|a, _| (a - mx) * (a - mx));
        let t0 = my - per_mib * mx;
        let ss_res = sum(&|a, b| (b - t0 - per_mib * a).powi(2));
        let ss_tot = sum(&|_, b| (b - my) * (b - my));
        LinFit {
            t0,
            per_mib,
            r2: 1.0 - ss_res / ss_tot,
        }
    }

    /// B_max in MiB/s per rank.
    fn bw(&self) -> f64 {
        1.0 / self.per_mib
    }

    /// The model's time for `n` MiB.
    fn t(&self, n: f64) -> f64 {
        self.t0 + n * self.per_mib
    }
}

struct FitReport {
    sizes: Vec<usize>,
    /// Per size: the timed calls of each kind.
    local: Vec<Vec<f64>>,
    durable: Vec<Vec<f64>>,
}

/// Part 2: per size, checkpoint + flush and checkpoint alone, alternating.
fn bench_fit(mpi: &Mpi, args: &Args, cfg: &Config, shm: &Path, disk: &Path) -> Res<FitReport> {
    let max = args.sizes.iter().copied().max().unwrap_or(1) * MIB;
    check_fits(mpi, shm, max as u64, max as u64, SLACK)?;
    check_fits(mpi, disk, 0, max as u64, SLACK)?;
    let local = shm.join("fit-local");
    let global = disk.join("fit-global");
    let mut c = cfg.clone();
    c.local = Some(local.clone());
    c.global = global.clone();
    c.fsync_global = true;
    // No flush but the ones asked for.
    (
        c.flush_every,
        c.flush_seconds,
        c.flush_auto,
        c.finalize_flush,
    ) = (0, 0.0, false, false);
    let buf = filled(max, 0xf1 + mpi.rank as u64);
    let mut engine = new_engine(mpi, c)?;
    let mut out = FitReport {
        sizes: args.sizes.clone(),
        local: Vec::new(),
        durable: Vec::new(),
    };
    for &mib in &args.sizes {
        let regions = [RegionRef::new(0, &buf[..mib * MIB])];
        let (mut lt, mut dt) = (Vec::new(), Vec::new());
        // Repetition 0 is the warm-up of each kind.
        for rep in 0..=args.fit_reps {
            for k in order(2, rep) {
                // A fresh name per call, deleted right after, so every call starts from the
                // same state (the engine never deletes these itself).
                let name = format!("s{mib}r{rep}k{k}");
                let t = if k == 0 {
                    mpi.timed("checkpoint", || {
                        engine
                            .checkpoint(&name, 1, &regions)
                            .map_err(|e| e.to_string())
                    })?
                } else {
                    mpi.timed("checkpoint + flush", || {
                        engine
                            .checkpoint(&name, 1, &regions)
                            .and_then(|()| engine.flush(&name, 1))
                            .map_err(|e| e.to_string())
                    })?
                };
                remove_ckpt(mpi, &local, Some(&global), &name)?;
                if rep > 0 {
                    if k == 0 { &mut lt } else { &mut dt }.push(t);
                }
            }
        }
        out.local.push(lt);
        out.durable.push(dt);
    }
    engine.finalize().map_err(fail)?;
    Ok(out)
}

fn print_fit(args: &Args, ranks: usize, r: &FitReport) -> [LinFit; 2] {
    println!();
    println!("2. Fixed and per-byte cost (scrio style): t(n) = t_overhead + n / B_max, least squares of the relative residuals over the medians");
    println!(
        "   n MiB per rank, one region; {} timed calls of each kind per size after 1 warm-up, alternating; time = slowest rank's",
        args.fit_reps
    );
    let x: Vec<f64> = r.sizes.iter().map(|&n| n as f64).collect();
    let mut fits = Vec::new();
    for (label, calls) in [
        (
            "checkpoint + flush (durable on the global tier, fsync)",
            &r.durable,
        ),
        ("checkpoint alone (node-local tier)", &r.local),
    ] {
        let y: Vec<f64> = calls.iter().map(|c| median(c)).collect();
        let f = LinFit::of(&x, &y);
        println!("   {label}");
        println!(
            "   {:>8} {:>12} {:>14} {:>14} {:>10}",
            "n MiB", "t measured", "n/t MiB/s", "model MiB/s", "rel. err"
        );
        for (n, t) in x.iter().zip(&y) {
            let bw = n / t;
            let model = n / f.t(*n);
            println!(
                "   {:>8} {:>12} {:>14.1} {:>14.1} {:>+9.1}%",
                n,
                ms(*t),
                bw,
                model,
                (model - bw) / bw * 100.0
            );
        }
        println!(
            "   fit: t_overhead = {}, B_max = {:.1} MiB/s per rank ({:.1} MiB/s for {ranks} ranks), R^2 = {:.4}, n_1/2 = {:.2} MiB",
            ms(f.t0),
            f.bw(),
            f.bw() * ranks as f64,
            f.r2,
            f.t0 * f.bw()
        );
        fits.push(f);
    }
    let (d, l) = (fits[0], fits[1]);
    let overhead = if d.t0 > 0.0 && l.t0 > 0.0 {
        format!("{:.2}x", d.t0 / l.t0)
    } else {
        "n/a (a t_overhead <= 0: below what the fit resolves)".to_string()
    };
    println!(
        "   durable / local: t_overhead {overhead}, B_max {:.3}x (the local checkpoint moves bytes {:.1}x as fast)",
        d.bw() / l.bw(),
        l.bw() / d.bw()
    );
    // A durable call is the local checkpoint followed by the copy, so the two fits' difference
    // is the flush step alone.
    println!(
        "   the flush step alone (durable - local): t_overhead = {}, B = {:.1} MiB/s per rank",
        ms(d.t0 - l.t0),
        1.0 / (d.per_mib - l.per_mib)
    );
    [d, l]
}

// ---- JSON --------------------------------------------------------------------------------

/// Part 1 in JSON: every variant's series (per run; the per-checkpoint series only over runs
/// that took checkpoints or flushes), the ratios of the medians and per repetition, and the
/// verdict's inputs, as `print_app` computes them.
fn app_json(args: &Args, ranks_per_node: usize, r: &AppReport) -> Value {
    let steps = args.steps as f64;
    let none = r.med(Variant::None, |x| x.wall);
    let no_ckpt = r.med(Variant::NoCkpt, |x| x.wall);
    let cpu0 = r.med(Variant::NoCkpt, |x| x.cpu);
    let per_ckpt = |v: Variant, f: fn(&AppRun) -> (f64, u64)| -> Value {
        let vals = r.per_count(v, f);
        if vals.is_empty() {
            Value::Null
        } else {
            series_json(&vals)
        }
    };
    let mut variants = serde_json::Map::new();
    for v in VARIANTS {
        let runs = r.get(v);
        let of = |f: &dyn Fn(&AppRun) -> f64| series_json(&runs.iter().map(f).collect::<Vec<_>>());
        let wall = r.med(v, |x| x.wall);
        variants.insert(
            v.key().into(),
            json!({
                "meaning": v.meaning(),
                "wall": of(&|x| x.wall),
                "wall_over_none": wall / none,
                "compute_per_step": of(&|x| x.compute / steps),
                "cpu_per_step": of(&|x| x.cpu / steps),
                "checkpoint_per_checkpoint": per_ckpt(v, |x| (x.checkpoint, x.checkpoints)),
                "flush_per_checkpoint": per_ckpt(v, |x| (x.flush, x.flushes)),
                "end": of(&|x| x.end),
                "cpu_beyond_no_ckpt_per_checkpoint_s": (v != Variant::NoCkpt)
                    .then(|| (r.med(v, |x| x.cpu) - cpu0) / r.checkpoints as f64),
            }),
        );
    }
    let (flush, between, step) = r.flush_vs_compute(args);
    let ratio = r.med(Variant::Async, |x| x.wall) / none;
    let (allowed, online) = cores();
    json!({
        "mib_per_rank": args.mib,
        "rows": r.rows,
        "cols": COLS,
        "steps": args.steps,
        "every": args.every,
        "sweeps": r.sweeps,
        "sweep_s": r.sweep_s,
        "calibrated": r.calibrated,
        "step_ms": args.step_ms,
        "checkpoints": r.checkpoints,
        "reps": args.reps,
        "variants": variants,
        "async_over_none": ratio,
        "async_over_none_per_rep": r.paired(Variant::Async, Variant::None),
        "sync_over_none": r.med(Variant::Sync, |x| x.wall) / none,
        "sync_over_none_per_rep": r.paired(Variant::Sync, Variant::None),
        "none_over_no_ckpt": none / no_ckpt,
        "flush_per_checkpoint_s": flush,
        "compute_between_checkpoints_s": between,
        "flush_over_compute": flush / between,
        "compute_per_step_async_over_no_ckpt": r.med(Variant::Async, |x| x.compute / steps) / step,
        "cores_allowed": allowed,
        "cores_online": online,
        "ranks_per_node": ranks_per_node,
        "target": TARGET_ASYNC,
        "target_applies": flush < between,
        "meets_target": flush < between && ratio <= TARGET_ASYNC,
    })
}

/// Part 2 in JSON: per kind every call's series per size, the measured and the model's
/// bandwidth, and the fit, as `print_fit` computes them.
fn fit_json(args: &Args, ranks: usize, r: &FitReport) -> Value {
    let x: Vec<f64> = r.sizes.iter().map(|&n| n as f64).collect();
    let kind = |calls: &[Vec<f64>]| -> (LinFit, Value) {
        let y: Vec<f64> = calls.iter().map(|c| median(c)).collect();
        let f = LinFit::of(&x, &y);
        let rows: Vec<Value> = x
            .iter()
            .zip(&y)
            .zip(calls)
            .map(|((n, t), c)| {
                let (bw, model) = (n / t, n / f.t(*n));
                json!({
                    "mib": n, "time": series_json(c), "mib_s": bw, "model_mib_s": model,
                    "rel_err": (model - bw) / bw,
                })
            })
            .collect();
        let v = json!({
            "calls": rows,
            "t_overhead_s": f.t0,
            "s_per_mib": f.per_mib,
            "b_max_mib_s": f.bw(),
            "b_max_all_ranks_mib_s": f.bw() * ranks as f64,
            "r2": f.r2,
            "n_half_mib": f.t0 * f.bw(),
        });
        (f, v)
    };
    let (d, durable) = kind(&r.durable);
    let (l, local) = kind(&r.local);
    json!({
        "model": "t(n) = t_overhead + n / B_max, n in MiB per rank; least squares of the relative residuals (weights 1 / t^2) over the medians",
        "reps": args.fit_reps,
        "sizes_mib": r.sizes,
        "ranks": ranks,
        "durable": durable,
        "local": local,
        "durable_over_local_t_overhead": (d.t0 > 0.0 && l.t0 > 0.0).then(|| d.t0 / l.t0),
        "durable_over_local_b_max": d.bw() / l.bw(),
        "flush_step_t_overhead_s": d.t0 - l.t0,
        "flush_step_mib_s": 1.0 / (d.per_mib - l.per_mib),
    })
}

// ---- main --------------------------------------------------------------------------------

fn run(mpi: &Mpi, args: &Args) -> i32 {
    let report_failure = |f: &Failure| {
        if mpi.rank == 0 || !f.peer {
            eprintln!("{PROG}: {}", f.msg);
        }
    };
    // Rank 0 prints the tables (unless --json) and builds the JSON object (with --json or
    // --json-out).
    let tables = mpi.rank == 0 && !args.json;
    let want_json = mpi.rank == 0 && (args.json || args.json_out.is_some());
    let result = (|| -> Res<Option<Value>> {
        // Rank 0 writes the results file; find out now, not after the run, if it cannot.
        let ready = match (&args.json_out, mpi.rank) {
            (Some(p), 0) => json_out_ready(p),
            _ => Ok(()),
        };
        mpi.agree("--json-out", ready)?;
        // Both private directories are removed by rank 0 when they are dropped, also on
        // failure (failures are agreed, so all ranks leave together).
        let shm = RunDir::create(mpi, &args.local, PROG)?;
        let disk = RunDir::create(mpi, &args.global, PROG)?;
        let cfg = mpi.agree(
            "configuration",
            Config::resolve(None, &[]).map_err(|e| e.to_string()),
        )?;
        let nodes = count_nodes(mpi);
        let (allowed, online) = cores();
        let mut out = json!({
            "ranks": mpi.size,
            "nodes": nodes,
            "cores_online": online,
            "cores_allowed_rank0": allowed,
            "local": shm.path.display().to_string(),
            "local_tmpfs": on_tmpfs(&shm.path),
            "global": disk.path.display().to_string(),
            "global_tmpfs": on_tmpfs(&disk.path),
            "settings": {
                "reduction.block": cfg.block,
                "cache.keep": cfg.keep,
                "cache.keep_global": cfg.keep_global,
                "flush.buffer": cfg.flush_buffer,
                "flush.bandwidth": cfg.flush_bandwidth,
                "fsync_global": true,
            },
        });
        if tables {
            let tmpfs = |p: &Path| if on_tmpfs(p) { "tmpfs" } else { "not tmpfs" };
            println!(
                "Cairn flush benchmark: {} ranks on {nodes} node(s), {online} cores online, {allowed} allowed to rank 0",
                mpi.size,
            );
            println!(
                "node-local tier under {} ({}), global tier under {} ({}), fsync_global = true",
                shm.path.display(),
                tmpfs(&shm.path),
                disk.path.display(),
                tmpfs(&disk.path)
            );
            let bw = match cfg.flush_bandwidth {
                0 => "0 (no limit)".to_string(),
                b => format!("{}/s", size_label(b as usize)),
            };
            println!(
                "Engine settings: reduction.block = {}, cache.keep = {}, cache.keep_global = {}, flush.buffer = {}, flush.bandwidth = {bw} (defaults unless CAIRN_* says otherwise)",
                size_label(cfg.block as usize),
                cfg.keep,
                cfg.keep_global,
                size_label(cfg.flush_buffer as usize),
            );
            println!("Every run starts at a barrier and its time is the slowest rank's; baselines are measured in the same run, interleaved: read the ratios, not the absolute times.");
            if on_tmpfs(&disk.path) {
                println!("note: the global tier is on tmpfs, not a disk; use --global DIR for a real one");
            }
        }
        if args.app {
            let r = bench_app(mpi, args, &cfg, &shm.path, &disk.path)?;
            if tables {
                print_app(args, mpi.size / nodes, &r);
                let _ = std::io::stdout().flush();
            }
            if want_json {
                out["app"] = app_json(args, mpi.size / nodes, &r);
            }
        }
        if args.fit {
            let r = bench_fit(mpi, args, &cfg, &shm.path, &disk.path)?;
            if tables {
                print_fit(args, mpi.size, &r);
            }
            if want_json {
                out["fit"] = fit_json(args, mpi.size, &r);
            }
        }
        mpi.world.barrier();
        Ok(want_json.then_some(out))
    })();
    match result {
        Ok(json) => {
            if let Some(v) = json {
                if args.json {
                    println!("{v:#}");
                }
                if let Some(p) = &args.json_out {
                    if let Err(e) = write_json(p, &v) {
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

fn main() {
    cairn_bench::mpi_main(
        PROG,
        USAGE,
        parse_args(std::env::args().skip(1).collect()),
        run,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_parse() {
        let a = parse_args(strings(&["--only", "fit", "--sizes=2,8", "--global", "/x"]))
            .unwrap()
            .unwrap();
        assert_eq!(
            (a.app, a.fit, a.sizes, a.global),
            (false, true, vec![2, 8], PathBuf::from("/x"))
        );
        assert!(parse_args(strings(&["--help"])).unwrap().is_none());
        assert!(parse_args(strings(&["--sizes", "4,4"])).is_err());
        assert!(parse_args(strings(&["--every", "5", "--steps", "5"])).is_err());
        assert!(parse_args(strings(&["--only", "x"])).is_err());
        let a = parse_args(strings(&["--json", "--json-out", "r/flush.json"]))
            .unwrap()
            .unwrap();
        assert_eq!(
            (a.json, a.json_out),
            (true, Some(PathBuf::from("r/flush.json")))
        );
        assert!(parse_args(strings(&["--json=yes"])).is_err());
    }

    #[test]
    fn fit_recovers_a_line() {
        let x = [1.0, 4.0, 16.0, 64.0];
        let y: Vec<f64> = x.iter().map(|n| 0.01 + n / 200.0).collect();
        let f = LinFit::of(&x, &y);
        assert!((f.t0 - 0.01).abs() < 1e-12 && (f.bw() - 200.0).abs() < 1e-9);
        assert!((f.r2 - 1.0).abs() < 1e-12);
    }

    #[test]
    fn sweep_keeps_edges_and_averages() {
        let mut g = Grid::new(1, 0);
        let before = g.cur.clone();
        g.step(1);
        assert_eq!(g.cur[..COLS], before[..COLS]);
        let (i, j) = (5 * COLS, 7);
        let want = 0.25
            * (before[i - COLS + j] + before[i + COLS + j] + before[i + j - 1] + before[i + j + 1]);
        assert_eq!(g.cur[i + j], want);
    }
}
