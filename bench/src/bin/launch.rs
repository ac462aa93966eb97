//! `cairn-bench-launch`: transparent checkpointing of unmodified programs through the whole
//! of `cairn launch` / `cairn checkpoint` / `cairn restart` (coordinators, library, engine,
//! restorer), side by side with DMTCP built from source, each figure next to a baseline
//! measured in the same run.
//!
//! Three parts, on two small C programs of `bench/launch/` compiled with `cc` at the start of
//! the run:
//!
//! - **a**: a process holding `--mib` MiB (1 GiB by default) of non-compressible heap, busy
//!   writing part of it and appending heartbeats to a file: the wall time of `cairn
//!   checkpoint` against that of DMTCP's blocking `dmtcp_command --bcheckpoint`, and the time
//!   from the exec of `cairn restart` / `dmtcp_restart` (after the job was killed with
//!   SIGKILL) to the restored program's first new heartbeat, images on tmpfs for both;
//! - **b**: the same process under Cairn with `[reduction] incremental` on and off: the first
//!   checkpoint of each, and the restart from the newest of `--ckpts` checkpoints (an
//!   incremental chain against a full image) with `--changed` thousandths of the pages
//!   changed between checkpoints; the chain is restarted twice, once as a crash leaves it
//!   (the newest images still where the processes wrote them, read in place after the
//!   engine checked them against the chain) and once with those images deleted (the engine
//!   assembles each image from the chain);
//! - **c**: three processes streaming over pipes (producer | filter | consumer, `--pipe-mib`
//!   MiB each, `--rate` MB/s): the checkpoint while streaming against the same three
//!   processes checkpointed idle, and, as context, against a raw write of their images' bytes
//!   and DMTCP's checkpoint of the same pipeline; after a restart the consumer checks that
//!   every record arrives once, in order, intact.
//!
//! Kinds measured against each other run in an order that changes between repetitions; the
//! figures are medians and the ratios the result (the machine is small and shared). Every job
//! is a fresh launch in a private directory, killed and removed when its step ends, also when
//! it fails; processes left behind by a failed step are found by the run's directory in their
//! command lines and killed.

use cairn_bench::jobs::{
    compile, two_words, Cairn, CairnCkpt, CairnJob, Dmtcp, DmtcpJob, Hb, Proc, RunDirs,
    ENGINE_RESTORED,
};
use cairn_bench::{
    count, fs_available, kernel, median, meminfo, mono_ns, on_tmpfs, order, ratio, secs,
    verdict_ratio, walk, x, Out, MIB,
};
use serde_json::{json, Value};
use std::ffi::OsString;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const PROG: &str = "cairn-bench-launch";
const USAGE: &str = "usage: cairn-bench-launch [--mib N] [--reps N] [--only a,b,c] [--quick] [--dmtcp PREFIX] [--dir DIR] [--ckpts K] [--changed PERMILLE] [--pipe-mib N] [--rate MB/S] [--json] [--json-out FILE]";

/// Targets: Cairn's checkpoint and restart of a large process at most DMTCP's; the first
/// checkpoint with incremental on at most 1.2 x with it off, and a restart from an
/// incremental chain at most 1.3 x one from a full image; a pipeline's checkpoint while
/// streaming at most 1.2 x the baseline.
const TARGET_CKPT: f64 = 1.0;
const TARGET_RESTART: f64 = 1.0;
const TARGET_INC_FIRST: f64 = 1.2;
const TARGET_INC_RESTART: f64 = 1.3;
const TARGET_PIPE: f64 = 1.2;
/// Between a program's start (every page filled) and its first checkpoint, and between
/// checkpoints of a chain: the spinning program changes every page of its hot region in
/// about a millisecond, the pipeline streams.
const SETTLE: Duration = Duration::from_millis(500);
/// How long a restored pipeline must go on streaming, checked, before it passes.
const STREAM_AFTER: Duration = Duration::from_secs(1);
/// The raw-write baseline writes in pieces of this size.
const PIECE: usize = 16 << 20;
/// Memory left free beside what a part needs.
const SLACK: u64 = 512 << 20;
/// The size of the first run of each system, counted in no part (a check that the tools
/// work; its checkpoint and restart are printed as context).
const PREFLIGHT_MIB: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    A,
    B,
    C,
}

const PARTS: [(Part, &str); 3] = [(Part::A, "a"), (Part::B, "b"), (Part::C, "c")];

#[derive(Debug)]
struct Args {
    /// MiB of the spinning program (parts a and b).
    mib: usize,
    reps: usize,
    parts: Vec<Part>,
    quick: bool,
    /// DMTCP's install prefix (bin/dmtcp_launch and the others).
    dmtcp: PathBuf,
    /// Where the run's private directory (tiers, staged images, DMTCP images) is made.
    dir: PathBuf,
    /// Checkpoints per job in part b (the chain restarted from).
    ckpts: usize,
    /// Thousandths of the spinning program's pages it keeps changing (its hot region).
    changed: usize,
    /// MiB of each process of the pipeline.
    pipe_mib: usize,
    /// The pipeline's rate, MB/s (10^6 bytes).
    rate: usize,
    json: bool,
    json_out: Option<PathBuf>,
}

/// Parse the command line; `Ok(None)` asks for the usage text.
fn parse_args(argv: Vec<String>) -> Result<Option<Args>, String> {
    let (mut mib, mut reps, mut pmib) = (None, None, None);
    let mut a = Args {
        mib: 0,
        reps: 0,
        parts: PARTS.iter().map(|p| p.0).collect(),
        quick: false,
        dmtcp: PathBuf::from("/opt/cairn-peers/dmtcp"),
        dir: PathBuf::from("/dev/shm"),
        ckpts: 4,
        changed: 50,
        pipe_mib: 0,
        rate: 100,
        json: false,
        json_out: None,
    };
    let go = walk(argv, |flag, value| {
        match flag {
            "--mib" => mib = Some(count(flag, value()?, 1)?),
            "--reps" => reps = Some(count(flag, value()?, 1)?),
            "--only" => {
                let v = value()?;
                a.parts = v
                    .split(',')
                    .map(|w| PARTS.iter().find(|p| p.1 == w).map(|p| p.0))
                    .collect::<Option<Vec<Part>>>()
                    .ok_or(format!(
                        "--only {v:?}: expected a, b or c (comma-separated)"
                    ))?;
            }
            "--quick" => a.quick = true,
            "--dmtcp" => a.dmtcp = PathBuf::from(value()?),
            "--dir" => a.dir = PathBuf::from(value()?),
            "--ckpts" => a.ckpts = count(flag, value()?, 2)?,
            "--changed" => {
                a.changed = count(flag, value()?, 1)?;
                if a.changed > 1000 {
                    return Err(format!("--changed {}: at most 1000 (all pages)", a.changed));
                }
            }
            "--pipe-mib" => pmib = Some(count(flag, value()?, 1)?),
            "--rate" => a.rate = count(flag, value()?, 1)?,
            "--json" => a.json = true,
            "--json-out" => a.json_out = Some(PathBuf::from(value()?)),
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    if !go {
        return Ok(None);
    }
    let q = a.quick;
    a.mib = mib.unwrap_or(if q { 64 } else { 1024 });
    a.reps = reps.unwrap_or(if q { 2 } else { 3 });
    a.pipe_mib = pmib.unwrap_or(if q { 16 } else { 96 });
    Ok(Some(a))
}

// ---- small helpers ---------------------------------------------------------------------------

/// A series in JSON: median, span and every sample.
fn series(samples: &[f64]) -> Value {
    cairn_bench::series_json(samples)
}

/// `hb NS N`: the stamp and the count (passes of the spinning program, records checked by
/// the consumer).
fn parse_hb(l: &str) -> Option<(i64, u64)> {
    two_words(l, "hb ")
}

/// The programs of a run: the C workloads, compiled into the run's `bin` directory; Cairn's
/// command, restorer and library, copied there so that a rebuild during the run changes
/// nothing; DMTCP's commands, when installed.
struct Tools {
    spin: PathBuf,
    pipeline: PathBuf,
    cairn: Cairn,
    dmtcp: Option<Dmtcp>,
}

impl Tools {
    fn build(bin: &Path, dmtcp_prefix: &Path) -> Result<Tools, String> {
        let cairn = Cairn::copy_into(bin)?;
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("launch");
        let compile =
            |name: &str| compile("cc", &src.join(format!("{name}.c")), &bin.join(name), &[]);
        let dmtcp = Dmtcp::find(dmtcp_prefix, PROG)?;
        Ok(Tools {
            spin: compile("spin")?,
            pipeline: compile("pipeline")?,
            cairn,
            dmtcp,
        })
    }
}

// ---- the spinning program under either system ------------------------------------------------

/// What one life of the spinning program measured: its checkpoints and its restart.
#[derive(Debug, Default)]
struct SpinRun {
    ckpts: Vec<CairnCkpt>,
    restart_s: f64,
    /// Cairn: from the exec of `cairn restart` to its line saying that the engine restored
    /// the images (into the staging file the restorer reads).
    engine_s: Option<f64>,
}

fn spin_args(t: &Tools, mib: usize, changed: usize, hb: &Path) -> Vec<OsString> {
    vec![
        t.spin.clone().into(),
        mib.to_string().into(),
        changed.to_string().into(),
        hb.into(),
    ]
}

/// After a restart: the first heartbeat stamped after `t0` (seconds from `t0`), then the
/// restored program's check of its cold memory.
fn restarted(hb: &mut Hb, job: &mut Proc, t0: i64) -> Result<f64, String> {
    let first = hb.wait("a heartbeat of the restored program", job, |l| {
        parse_hb(l).and_then(|(ns, _)| (ns > t0).then_some(ns))
    })?;
    let v = hb.path.with_extension("verify");
    fs::write(&v, b"").map_err(|e| format!("cannot create {}: {e}", v.display()))?;
    let ok = hb.wait("the restored program's memory check", job, |l| {
        l.strip_prefix("verify ").map(|r| r.starts_with("OK"))
    })?;
    if !ok {
        return Err("the restored program found its memory changed (verify BAD)".into());
    }
    Ok((first - t0) as f64 * 1e-9)
}

/// How the spinning program's checkpoints are stored, and what its restart finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chain {
    /// `[reduction] incremental` off: every checkpoint is a full image.
    Off,
    /// Incremental on: the restart finds the images of the newest checkpoint kept where
    /// the processes wrote them.
    On,
    /// Incremental on, and those kept images deleted before the restart (as if the node's
    /// staging were lost): the engine assembles each image from the chain.
    OnKeptLost,
}

/// The spinning program under `cairn launch`: start, `n` checkpoints SETTLE apart, SIGKILL,
/// `cairn restart`, the first new heartbeat and the memory check, SIGKILL.
fn cairn_spin(
    t: &Tools,
    dirs: &RunDirs,
    tag: &str,
    mib: usize,
    changed: usize,
    chain: Chain,
    n: usize,
) -> Result<SpinRun, String> {
    let mut job = CairnJob::new(&t.cairn, dirs, tag, chain != Chain::Off)?;
    let mut hb = Hb::new(job.hb());
    job.launch(&spin_args(t, mib, changed, &job.hb()))?;
    hb.wait("the program's ready line", job.fg(), |l| {
        l.starts_with("ready ").then_some(())
    })?;
    let mut run = SpinRun::default();
    for _ in 0..n {
        std::thread::sleep(SETTLE);
        run.ckpts.push(job.checkpoint()?);
    }
    job.kill()?;
    if chain == Chain::OnKeptLost {
        job.lose_kept_images()?;
    }
    hb.poll();
    let t0 = job.restart()?;
    run.restart_s = restarted(&mut hb, job.fg(), t0)?;
    run.engine_s = job
        .fg()
        .line_at(ENGINE_RESTORED)
        .map(|at| (at - t0) as f64 * 1e-9);
    job.kill()?;
    Ok(run)
}

/// The same under DMTCP: `dmtcp_launch`, `n` blocking checkpoints, SIGKILL of the program
/// and its coordinator, a new coordinator and `dmtcp_restart`.
fn dmtcp_spin(
    t: &Tools,
    d: &Dmtcp,
    dirs: &RunDirs,
    tag: &str,
    mib: usize,
    changed: usize,
    n: usize,
) -> Result<(Vec<(f64, u64)>, f64), String> {
    let mut job = DmtcpJob::new(d, dirs, tag)?;
    let mut hb = Hb::new(job.hb());
    job.launch(&spin_args(t, mib, changed, &job.hb()))?;
    let fg = job.fg().expect("launched");
    hb.wait("the program's ready line", fg, |l| {
        l.starts_with("ready ").then_some(())
    })?;
    let mut ck = Vec::new();
    for _ in 0..n {
        std::thread::sleep(SETTLE);
        let (s, sizes) = job.checkpoint()?;
        ck.push((s, sizes.iter().sum()));
    }
    job.kill();
    hb.poll();
    let t0 = job.restart()?;
    let fg = job.fg().expect("restarted");
    let r = restarted(&mut hb, fg, t0)?;
    job.kill();
    Ok((ck, r))
}

/// Refuse a part whose processes, images and restored copies would not fit.
fn check_memory(what: &str, need: u64, disk: u64, dir: &Path) -> Result<(), String> {
    let avail = meminfo("MemAvailable").unwrap_or(0);
    let tmpfs = on_tmpfs(dir);
    let need = need + if tmpfs { disk } else { 0 } + SLACK;
    if avail < need {
        return Err(format!(
            "{what} needs about {} MiB of memory (processes, restored copies{}), {} MiB is available; use smaller sizes",
            need >> 20,
            if tmpfs { ", images on tmpfs" } else { "" },
            avail >> 20
        ));
    }
    let space = fs_available(dir).unwrap_or(0);
    if space < disk + SLACK {
        return Err(format!(
            "{what} needs about {} MiB free in {}, {} MiB is",
            (disk + SLACK) >> 20,
            dir.display(),
            space >> 20
        ));
    }
    Ok(())
}

/// A first round of each system on a small program, not counted in any part: the tools
/// work, their files are in the page cache. Its one checkpoint and restart are printed as
/// context: what each system costs when there is little memory to write.
fn preflight(a: &Args, t: &Tools, dirs: &RunDirs, out: &Out) -> Result<Value, String> {
    let c = cairn_spin(
        t,
        dirs,
        "pre-cairn",
        PREFLIGHT_MIB,
        a.changed,
        Chain::Off,
        1,
    )
    .map_err(|e| format!("first run under Cairn: {e}"))?;
    let d = match &t.dmtcp {
        Some(d) => Some(
            dmtcp_spin(t, d, dirs, "pre-dmtcp", PREFLIGHT_MIB, a.changed, 1)
                .map_err(|e| format!("first run under DMTCP: {e}"))?,
        ),
        None => None,
    };
    out.line(format!(
        "   first run of each system, not counted ({PREFLIGHT_MIB} MiB process, one checkpoint and restart): Cairn {} and {}{}",
        secs(c.ckpts[0].secs),
        secs(c.restart_s),
        d.as_ref().map_or(String::new(), |(ck, r)| format!(
            ", DMTCP {} and {}",
            secs(ck[0].0),
            secs(*r)
        ))
    ));
    Ok(json!({
        "mib": PREFLIGHT_MIB,
        "cairn_checkpoint_s": c.ckpts[0].secs, "cairn_restart_s": c.restart_s,
        "dmtcp_checkpoint_s": d.as_ref().map(|x| x.0[0].0),
        "dmtcp_restart_s": d.as_ref().map(|x| x.1),
    }))
}

/// A row of a table: a series' median and its span.
fn row(name: &str, v: &[f64]) -> String {
    cairn_bench::row(58, name, v)
}

fn head() -> String {
    cairn_bench::head(58)
}

fn mb(b: u64) -> String {
    format!("{:.0} MB", b as f64 / 1e6)
}

// ---- part a: Cairn against DMTCP -------------------------------------------------------------

fn part_a(a: &Args, t: &Tools, dirs: &RunDirs, out: &Out) -> Result<Value, String> {
    let mib = a.mib as u64 * MIB as u64;
    // Cairn: the process, its staged image, the stored one, the image restored for the
    // restart and the restored process; DMTCP needs less.
    check_memory("part a", 3 * mib, 3 * mib, &dirs.data)?;
    let vs = t
        .dmtcp
        .as_ref()
        .map_or("alone (DMTCP not installed)".into(), |d| {
            format!("against {}", d.version)
        });
    out.line(format!(
        "\na. A {} MiB process (heap of random words, {:.1}% of its pages rewritten continually, a heartbeat each ms), images in {}: Cairn {vs}, {} repetitions",
        a.mib,
        a.changed as f64 / 10.0,
        dirs.data.display(),
        a.reps
    ));
    let (mut c_ck, mut c_rs, mut c_wr, mut c_st, mut c_bytes) =
        (vec![], vec![], vec![], vec![], vec![]);
    let (mut c_eng, mut c_rest) = (vec![], vec![]);
    let (mut d_ck, mut d_rs, mut d_bytes) = (vec![], vec![], vec![]);
    for rep in 0..a.reps {
        for k in order(2, rep) {
            if k == 0 {
                let r = cairn_spin(
                    t,
                    dirs,
                    &format!("a{rep}-cairn"),
                    a.mib,
                    a.changed,
                    Chain::Off,
                    1,
                )
                .map_err(|e| format!("Cairn, repetition {}: {e}", rep + 1))?;
                let c = &r.ckpts[0];
                c_ck.push(c.secs);
                c_wr.extend(c.phase("WRITE", "STORE"));
                c_st.extend(c.phase("STORE", "RESUME"));
                c_bytes.push(c.bytes);
                c_rs.push(r.restart_s);
                if let Some(e) = r.engine_s {
                    c_eng.push(e);
                    c_rest.push(r.restart_s - e);
                }
            } else if let Some(d) = &t.dmtcp {
                let (ck, r) = dmtcp_spin(t, d, dirs, &format!("a{rep}-dmtcp"), a.mib, a.changed, 1)
                    .map_err(|e| format!("DMTCP, repetition {}: {e}", rep + 1))?;
                d_ck.push(ck[0].0);
                d_bytes.push(ck[0].1);
                d_rs.push(r);
            }
        }
    }
    out.line(head());
    out.line(row("Cairn: cairn checkpoint (wall time)", &c_ck));
    out.line(row(
        "   of which WRITE: the process writes its image",
        &c_wr,
    ));
    out.line(row("   of which STORE: the engine stores it", &c_st));
    out.line(row("DMTCP: dmtcp_command --bcheckpoint (wall time)", &d_ck));
    out.line(row(
        "Cairn: exec of cairn restart to the first heartbeat",
        &c_rs,
    ));
    out.line(row("   of which the engine restores the image", &c_eng));
    out.line(row(
        "   then restorer, processes, program (to the heartbeat)",
        &c_rest,
    ));
    out.line(row(
        "DMTCP: coordinator + dmtcp_restart to the first heartbeat",
        &d_rs,
    ));
    out.line(format!(
        "   image: Cairn {}, DMTCP {}",
        c_bytes.first().map_or("-".into(), |b| mb(*b)),
        d_bytes.first().map_or("-".into(), |b| mb(*b))
    ));
    let rc = ratio(&c_ck, &d_ck);
    let rr = ratio(&c_rs, &d_rs);
    out.line(format!(
        "   checkpoint Cairn / DMTCP: {}, target <= {TARGET_CKPT}: {}",
        x(rc),
        verdict_ratio(rc, TARGET_CKPT)
    ));
    out.line(format!(
        "   restart Cairn / DMTCP: {}, target <= {TARGET_RESTART}: {}",
        x(rr),
        verdict_ratio(rr, TARGET_RESTART)
    ));
    Ok(json!({
        "mib": a.mib, "changed_permille": a.changed,
        "cairn": {
            "checkpoint": series(&c_ck), "write_phase": series(&c_wr),
            "store_phase": series(&c_st), "restart": series(&c_rs), "image_bytes": c_bytes,
            "restart_engine": series(&c_eng), "restart_after_engine": series(&c_rest),
        },
        "dmtcp": t.dmtcp.as_ref().map(|d| json!({
            "version": d.version, "checkpoint": series(&d_ck), "restart": series(&d_rs),
            "image_bytes": d_bytes,
        })),
        "checkpoint_vs_dmtcp": rc, "restart_vs_dmtcp": rr,
        "target_checkpoint": TARGET_CKPT, "target_restart": TARGET_RESTART,
        "meets_checkpoint": rc <= TARGET_CKPT, "meets_restart": rr <= TARGET_RESTART,
    }))
}

// ---- part b: incremental ---------------------------------------------------------------------

fn part_b(a: &Args, t: &Tools, dirs: &RunDirs, out: &Out) -> Result<Value, String> {
    let mib = a.mib as u64 * MIB as u64;
    // The process, a staged image, two full checkpoints kept (incremental off), the image
    // restored and the restored process.
    check_memory("part b", 3 * mib, 4 * mib, &dirs.data)?;
    out.line(format!(
        "\nb. The same {} MiB process under Cairn with [reduction] incremental on and off: {} checkpoints {} ms apart ({:.1}% of the pages changed between them), then a restart from the newest; {} repetitions",
        a.mib,
        a.ckpts,
        SETTLE.as_millis(),
        a.changed as f64 / 10.0,
        a.reps
    ));
    // [on, off, on with the kept images lost]: first checkpoints, later ones, restarts,
    // stored / image bytes of later ones.
    const KINDS: [(Chain, &str); 3] = [
        (Chain::On, "on"),
        (Chain::Off, "off"),
        (Chain::OnKeptLost, "on, kept images lost"),
    ];
    let mut first = [vec![], vec![], vec![]];
    let mut later = [vec![], vec![], vec![]];
    let mut restart = [vec![], vec![], vec![]];
    let mut share = [vec![], vec![], vec![]];
    let mut engine = [vec![], vec![], vec![]];
    for rep in 0..a.reps {
        for k in order(KINDS.len(), rep) {
            let (chain, label) = KINDS[k];
            let tag = format!("b{rep}-{k}");
            let r = cairn_spin(t, dirs, &tag, a.mib, a.changed, chain, a.ckpts)
                .map_err(|e| format!("incremental {label}, repetition {}: {e}", rep + 1))?;
            first[k].push(r.ckpts[0].secs);
            for c in &r.ckpts[1..] {
                later[k].push(c.secs);
                share[k].push(c.stored as f64 / c.bytes.max(1) as f64);
            }
            restart[k].push(r.restart_s);
            engine[k].extend(r.engine_s);
        }
    }
    out.line(head());
    out.line(row("first checkpoint, incremental on", &first[0]));
    out.line(row("first checkpoint, incremental off", &first[1]));
    out.line(row("later checkpoints, incremental on", &later[0]));
    out.line(row("later checkpoints, incremental off", &later[1]));
    out.line(row(
        &format!("restart from the chain of {} (incremental on)", a.ckpts),
        &restart[0],
    ));
    out.line(row("   of which the engine restores the image", &engine[0]));
    out.line(row(
        "restart from a full image (incremental off)",
        &restart[1],
    ));
    out.line(row("   of which the engine restores the image", &engine[1]));
    out.line(row(
        &format!("restart from the chain of {}, kept images deleted", a.ckpts),
        &restart[2],
    ));
    out.line(row(
        "   of which the engine assembles the image",
        &engine[2],
    ));
    out.line(format!(
        "   stored / image bytes of the later checkpoints (median): on {:.1}%, off {:.1}%",
        median(&share[0]) * 100.0,
        median(&share[1]) * 100.0
    ));
    let rf = ratio(&first[0], &first[1]);
    let rr = ratio(&restart[0], &restart[1]);
    let rl = ratio(&restart[2], &restart[1]);
    out.line(format!(
        "   first checkpoint on / off: {}, target <= {TARGET_INC_FIRST}: {}",
        x(rf),
        verdict_ratio(rf, TARGET_INC_FIRST)
    ));
    out.line(format!(
        "   restart chain / full: {}, target <= {TARGET_INC_RESTART}: {}",
        x(rr),
        verdict_ratio(rr, TARGET_INC_RESTART)
    ));
    out.line(format!(
        "   restart chain with the kept images deleted / full: {} (context: the images are \
         assembled from the chain into new files)",
        x(rl)
    ));
    let side = |k: usize| {
        json!({
            "first": series(&first[k]), "later": series(&later[k]),
            "restart": series(&restart[k]), "restart_engine": series(&engine[k]),
            "stored_share": share[k],
        })
    };
    Ok(json!({
        "mib": a.mib, "ckpts": a.ckpts, "changed_permille": a.changed,
        "gap_s": SETTLE.as_secs_f64(), "on": side(0), "off": side(1),
        "on_kept_lost": side(2),
        "first_on_vs_off": rf, "restart_chain_vs_full": rr,
        "restart_chain_kept_lost_vs_full": rl,
        "target_first": TARGET_INC_FIRST, "target_restart": TARGET_INC_RESTART,
        "meets_first": rf <= TARGET_INC_FIRST, "meets_restart": rr <= TARGET_INC_RESTART,
    }))
}

// ---- part c: a pipeline ----------------------------------------------------------------------

/// What the consumer says in the heartbeat file.
#[derive(Debug, Default)]
struct Consumer {
    /// `ready ROLE` lines seen.
    ready: usize,
    /// The last `hb` line: stamp and records checked.
    last: Option<(i64, u64)>,
    bad: Option<String>,
}

impl Consumer {
    fn take(&mut self, l: &str) {
        if l.starts_with("ready ") {
            self.ready += 1;
        } else if l.starts_with("BAD") {
            self.bad.get_or_insert_with(|| l.to_string());
        } else if let Some(h) = parse_hb(l) {
            self.last = Some(h);
        }
    }
}

/// Wait until the pipeline's three processes have filled their memory and, streaming, the
/// consumer has checked SETTLE's worth of records.
fn pipeline_ready(hb: &mut Hb, job: &mut Proc, streaming: bool) -> Result<Consumer, String> {
    let mut c = Consumer::default();
    hb.wait("the three ready lines", job, |l| {
        c.take(l);
        (c.ready == 3).then_some(())
    })?;
    std::thread::sleep(SETTLE);
    for l in hb.poll() {
        c.take(l.as_str());
    }
    if let Some(b) = &c.bad {
        return Err(format!("the consumer found a wrong record: {b}"));
    }
    let streamed = matches!(c.last, Some((_, n)) if n > 0);
    if streaming && !streamed {
        return Err(format!(
            "the pipeline did not stream: no record checked {} ms after it started",
            SETTLE.as_millis()
        ));
    }
    Ok(c)
}

/// After a restart of a streaming pipeline: the consumer's first heartbeat after `t0`, which
/// must count more records than it had checked before the checkpoint started, then
/// STREAM_AFTER of records checked without a wrong one. Returns the restart's seconds and
/// the records checked after it.
fn pipeline_restarted(
    hb: &mut Hb,
    job: &mut Proc,
    t0: i64,
    before: u64,
) -> Result<(f64, u64), String> {
    let mut bad = None;
    let (ns, n0) = hb.wait("a heartbeat of the restored consumer", job, |l| {
        if l.starts_with("BAD") {
            bad.get_or_insert_with(|| l.to_string());
            return Some((0, 0));
        }
        parse_hb(l).filter(|h| h.0 > t0)
    })?;
    if let Some(b) = bad {
        return Err(format!(
            "after the restart the consumer found a wrong record: {b}"
        ));
    }
    if n0 <= before {
        return Err(format!(
            "after the restart the consumer had checked {n0} records, not more than the {before} it had before the checkpoint: it did not come back from the checkpoint"
        ));
    }
    let until = ns + STREAM_AFTER.as_nanos() as i64;
    let mut err = None;
    let n1 = hb.wait("the restored pipeline streaming on", job, |l| {
        if l.starts_with("BAD") {
            err = Some(l.to_string());
            return Some(0);
        }
        parse_hb(l).and_then(|(s, n)| (s >= until).then_some(n))
    })?;
    if let Some(b) = err {
        return Err(format!(
            "after the restart the consumer found a wrong record: {b}"
        ));
    }
    if n1 <= n0 {
        return Err("the restored pipeline did not stream".into());
    }
    Ok(((ns - t0) as f64 * 1e-9, n1 - n0))
}

fn pipe_args(t: &Tools, mib: usize, rate: usize, hb: &Path) -> Vec<OsString> {
    vec![
        t.pipeline.clone().into(),
        mib.to_string().into(),
        rate.to_string().into(),
        hb.into(),
    ]
}

/// The last records count the consumer reported before `t` (CLOCK_MONOTONIC).
fn count_before(c: &Consumer, lines: &[String], t: i64) -> u64 {
    let mut n = c.last.filter(|h| h.0 < t).map_or(0, |h| h.1);
    for l in lines {
        if let Some((s, k)) = parse_hb(l) {
            if s < t {
                n = n.max(k);
            }
        }
    }
    n
}

/// Write files of `sizes` bytes from `buf` into `dir` in PIECE-sized write()s, each fsynced
/// and renamed into place; the time from the first open to the last rename. The files are
/// removed afterwards (not timed).
fn raw_write(dir: &Path, sizes: &[u64], buf: &[u8]) -> Result<f64, String> {
    let t0 = Instant::now();
    let mut done = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        let tmp = dir.join(format!("raw{i}.tmp"));
        let dst = dir.join(format!("raw{i}.img"));
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
        for p in buf[..n as usize].chunks(PIECE) {
            f.write_all(p)
                .map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
        }
        f.sync_all()
            .map_err(|e| format!("cannot fsync {}: {e}", tmp.display()))?;
        drop(f);
        fs::rename(&tmp, &dst).map_err(|e| format!("cannot rename {}: {e}", tmp.display()))?;
        done.push(dst);
    }
    let s = t0.elapsed().as_secs_f64();
    for d in done {
        fs::remove_file(&d).map_err(|e| format!("cannot remove {}: {e}", d.display()))?;
    }
    Ok(s)
}

/// One pipeline under Cairn: checkpoint (streaming or idle); streaming, also kill, restart
/// and check. Returns the checkpoint and, streaming, the restart's seconds and the records
/// checked after it.
fn cairn_pipe(
    a: &Args,
    t: &Tools,
    dirs: &RunDirs,
    tag: &str,
    streaming: bool,
) -> Result<(CairnCkpt, Option<(f64, u64)>), String> {
    let mut job = CairnJob::new(&t.cairn, dirs, tag, false)?;
    let mut hb = Hb::new(job.hb());
    let rate = if streaming { a.rate } else { 0 };
    job.launch(&pipe_args(t, a.pipe_mib, rate, &job.hb()))?;
    let c = pipeline_ready(&mut hb, job.fg(), streaming)?;
    let start = mono_ns();
    let ck = job.checkpoint()?;
    if ck.images.len() != 3 {
        return Err(format!(
            "the checkpoint holds {} images, 3 expected",
            ck.images.len()
        ));
    }
    if !streaming {
        job.kill()?;
        return Ok((ck, None));
    }
    let lines = hb.poll();
    let before = count_before(&c, &lines, start);
    job.kill()?;
    hb.poll();
    let t0 = job.restart()?;
    let r = pipeline_restarted(&mut hb, job.fg(), t0, before)?;
    job.kill()?;
    Ok((ck, Some(r)))
}

/// The streaming pipeline under DMTCP, as `cairn_pipe` does it: the checkpoint's seconds
/// and images' bytes, the restart's seconds and the records checked after it.
fn dmtcp_pipe(
    a: &Args,
    t: &Tools,
    d: &Dmtcp,
    dirs: &RunDirs,
    tag: &str,
) -> Result<(f64, u64, f64, u64), String> {
    let mut job = DmtcpJob::new(d, dirs, tag)?;
    let mut hb = Hb::new(job.hb());
    job.launch(&pipe_args(t, a.pipe_mib, a.rate, &job.hb()))?;
    let fg = job.fg().expect("launched");
    let c = pipeline_ready(&mut hb, fg, true)?;
    let start = mono_ns();
    let (s, sizes) = job.checkpoint()?;
    if sizes.len() != 3 {
        return Err(format!("DMTCP wrote {} images, 3 expected", sizes.len()));
    }
    let lines = hb.poll();
    let before = count_before(&c, &lines, start);
    job.kill();
    hb.poll();
    let t0 = job.restart()?;
    let fg = job.fg().expect("restarted");
    let (r, n) = pipeline_restarted(&mut hb, fg, t0, before)?;
    job.kill();
    Ok((s, sizes.iter().sum(), r, n))
}

fn part_c(a: &Args, t: &Tools, dirs: &RunDirs, out: &Out) -> Result<Value, String> {
    let pm = 3 * a.pipe_mib as u64 * MIB as u64;
    // The processes and the restored ones; staged, stored and restored images, the raw files.
    check_memory("part c", 2 * pm, 5 * pm, &dirs.data)?;
    out.line(format!(
        "\nc. A pipeline of 3 processes (producer | filter | consumer over pipes, {} MiB each, {} MB/s of 4 KiB records) under Cairn, {} repetitions",
        a.pipe_mib, a.rate, a.reps
    ));
    let kinds = if t.dmtcp.is_some() { 3 } else { 2 };
    let (mut s_ck, mut i_ck, mut raw, mut s_rs, mut after) =
        (vec![], vec![], vec![], vec![], vec![]);
    let (mut s_wr, mut s_st, mut i_wr, mut i_st) = (vec![], vec![], vec![], vec![]);
    let (mut d_ck, mut d_rs, mut d_bytes, mut d_after) = (vec![], vec![], vec![], vec![]);
    let mut bytes = Vec::new();
    let mut buf: Vec<u8> = Vec::new();
    for rep in 0..a.reps {
        for k in order(kinds, rep) {
            match k {
                0 => {
                    let (ck, r) = cairn_pipe(a, t, dirs, &format!("c{rep}-stream"), true)
                        .map_err(|e| format!("Cairn, streaming, repetition {}: {e}", rep + 1))?;
                    s_ck.push(ck.secs);
                    s_wr.extend(ck.phase("WRITE", "STORE"));
                    s_st.extend(ck.phase("STORE", "RESUME"));
                    let (rs, n) = r.expect("streaming restarts");
                    s_rs.push(rs);
                    after.push(n);
                    bytes.push(ck.bytes);
                    // The baseline right after: the same images' bytes, written raw.
                    let big = ck.images.iter().copied().max().unwrap_or(0) as usize;
                    if buf.len() < big {
                        drop(std::mem::take(&mut buf));
                        buf = cairn_bench::filled(big, 11);
                    }
                    raw.push(raw_write(&dirs.data, &ck.images, &buf)?);
                }
                1 => {
                    let (ck, _) = cairn_pipe(a, t, dirs, &format!("c{rep}-idle"), false)
                        .map_err(|e| format!("Cairn, idle, repetition {}: {e}", rep + 1))?;
                    i_ck.push(ck.secs);
                    i_wr.extend(ck.phase("WRITE", "STORE"));
                    i_st.extend(ck.phase("STORE", "RESUME"));
                }
                _ => {
                    let d = t.dmtcp.as_ref().expect("kinds");
                    let (s, b, r, n) = dmtcp_pipe(a, t, d, dirs, &format!("c{rep}-dmtcp"))
                        .map_err(|e| format!("DMTCP, streaming, repetition {}: {e}", rep + 1))?;
                    d_ck.push(s);
                    d_bytes.push(b);
                    d_rs.push(r);
                    d_after.push(n);
                }
            }
        }
    }
    drop(buf);
    out.line(head());
    out.line(row("Cairn checkpoint, streaming (wall time)", &s_ck));
    out.line(row("   of which WRITE", &s_wr));
    out.line(row("   of which STORE", &s_st));
    out.line(row("Cairn checkpoint, idle (the baseline)", &i_ck));
    out.line(row("   of which WRITE", &i_wr));
    out.line(row("   of which STORE", &i_st));
    out.line(row(
        "raw write of the 3 images' bytes (write, fsync, rename)",
        &raw,
    ));
    out.line(row(
        "Cairn restart, exec to the consumer's first record",
        &s_rs,
    ));
    if t.dmtcp.is_some() {
        out.line(row("DMTCP checkpoint, streaming (context)", &d_ck));
        out.line(row("DMTCP restart, to the consumer's first record", &d_rs));
    }
    out.line(format!(
        "   images: Cairn {}{}; after each restart the consumer checked {} records ({}) in order, none wrong",
        bytes.first().map_or("-".into(), |b| mb(*b)),
        d_bytes
            .first()
            .map_or(String::new(), |b| format!(", DMTCP {}", mb(*b))),
        after
            .iter()
            .chain(&d_after)
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        mb(after.iter().chain(&d_after).copied().min().unwrap_or(0) * 4096) + " or more"
    ));
    let r_idle = ratio(&s_ck, &i_ck);
    let r_raw = ratio(&s_ck, &raw);
    let r_d = ratio(&s_ck, &d_ck);
    out.line(format!(
        "   checkpoint streaming / idle: {}, target <= {TARGET_PIPE}: {}",
        x(r_idle),
        verdict_ratio(r_idle, TARGET_PIPE)
    ));
    out.line(format!(
        "   checkpoint streaming / raw write of the images (context): {}",
        x(r_raw)
    ));
    if t.dmtcp.is_some() {
        out.line(format!(
            "   checkpoint streaming, Cairn / DMTCP (context): {}; restart {}",
            x(r_d),
            x(ratio(&s_rs, &d_rs))
        ));
    }
    Ok(json!({
        "pipe_mib": a.pipe_mib, "rate_mb_s": a.rate,
        "streaming": {
            "checkpoint": series(&s_ck), "write_phase": series(&s_wr),
            "store_phase": series(&s_st), "restart": series(&s_rs), "image_bytes": bytes,
            "records_checked_after_restart": after,
        },
        "idle": {
            "checkpoint": series(&i_ck), "write_phase": series(&i_wr),
            "store_phase": series(&i_st),
        },
        "raw_write": series(&raw),
        "dmtcp": t.dmtcp.as_ref().map(|d| json!({
            "version": d.version, "checkpoint": series(&d_ck), "restart": series(&d_rs),
            "image_bytes": d_bytes, "records_checked_after_restart": d_after,
        })),
        "streaming_vs_idle": r_idle, "streaming_vs_raw": r_raw, "cairn_vs_dmtcp": r_d,
        "target": TARGET_PIPE, "meets_target": r_idle <= TARGET_PIPE,
    }))
}

// ---- main ------------------------------------------------------------------------------------

fn run(a: &Args) -> Result<Value, String> {
    let out = Out { json: a.json };
    let dirs = RunDirs::create(&a.dir, PROG, "bl")?;
    let t = Tools::build(&dirs.bin, &a.dmtcp)?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    out.line(format!(
        "{PROG}: {cores} cores, Linux {}, MemAvailable {} MiB; jobs in {} ({}); {} repetitions; medians",
        kernel(),
        meminfo("MemAvailable").unwrap_or(0) >> 20,
        dirs.data.display(),
        if on_tmpfs(&dirs.data) { "tmpfs" } else { "not tmpfs" },
        a.reps
    ));
    out.line(format!(
        "   Cairn: cairn, cairn-restore, libcairn-ckpt.so built {} (copied into {}); DMTCP: {}",
        t.cairn.built,
        dirs.bin.display(),
        t.dmtcp.as_ref().map_or("not installed".into(), |d| format!(
            "{} in {} ({})",
            d.version,
            d.bin.display(),
            d.build
                .as_deref()
                .unwrap_or("not built by bench/peers/build.sh")
        ))
    ));
    out.line(
        "   Cairn's configuration: node-local tier in the job's directory, compress none, redundancy single, no flush, finalize false; DMTCP: --no-gzip, images in the job's directory",
    );
    let mut res = serde_json::Map::new();
    res.insert("program".into(), json!(PROG));
    res.insert(
        "settings".into(),
        json!({
            "mib": a.mib, "reps": a.reps, "ckpts": a.ckpts, "changed_permille": a.changed,
            "pipe_mib": a.pipe_mib, "rate_mb_s": a.rate, "quick": a.quick,
            "dir": dirs.data, "tmpfs": on_tmpfs(&dirs.data), "cores": cores,
            "kernel": kernel(), "cairn_built": t.cairn.built,
            "dmtcp": t.dmtcp.as_ref().map(|d| json!({
                "bin": d.bin, "version": d.version, "build": d.build,
            })),
        }),
    );
    let small = preflight(a, &t, &dirs, &out)?;
    res.insert("small".into(), small);
    if a.parts.contains(&Part::A) {
        let v = part_a(a, &t, &dirs, &out).map_err(|e| format!("part a: {e}"))?;
        res.insert("vs_dmtcp".into(), v);
    }
    if a.parts.contains(&Part::B) {
        let v = part_b(a, &t, &dirs, &out).map_err(|e| format!("part b: {e}"))?;
        res.insert("incremental".into(), v);
    }
    if a.parts.contains(&Part::C) {
        let v = part_c(a, &t, &dirs, &out).map_err(|e| format!("part c: {e}"))?;
        res.insert("pipeline".into(), v);
    }
    Ok(Value::Object(res))
}

fn main() {
    let a = cairn_bench::args_or_exit(PROG, USAGE, parse_args(std::env::args().skip(1).collect()));
    cairn_bench::json_main(PROG, a.json, a.json_out.as_deref(), || run(&a));
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_bench::strings;

    #[test]
    fn arguments_parse() {
        let a = parse_args(strings(&["--mib=8", "--only", "a,c", "--json"]))
            .unwrap()
            .unwrap();
        assert_eq!(
            (a.mib, a.reps, a.parts, a.json, a.pipe_mib),
            (8, 3, vec![Part::A, Part::C], true, 96)
        );
        let q = parse_args(strings(&["--quick", "--reps", "4"]))
            .unwrap()
            .unwrap();
        assert_eq!((q.mib, q.reps, q.pipe_mib), (64, 4, 16));
        assert!(parse_args(strings(&["--help"])).unwrap().is_none());
        assert!(parse_args(strings(&["--only", "d"])).is_err());
        assert!(parse_args(strings(&["--ckpts", "1"])).is_err());
        assert!(parse_args(strings(&["--changed", "1001"])).is_err());
        let d = parse_args(strings(&["--dmtcp", "/x"])).unwrap().unwrap();
        assert_eq!(d.dmtcp, PathBuf::from("/x"));
    }

    #[test]
    fn heartbeats_parse() {
        assert_eq!(parse_hb("hb 123 45"), Some((123, 45)));
        assert_eq!(parse_hb("ready 1 2"), None);
    }
}
