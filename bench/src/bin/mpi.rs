//! `cairn-bench-mpi`: transparent checkpointing of an MPI job against the same program's
//! application-level checkpoint, the floor, both measured in the same run.
//!
//! The program is `bench/launch/stencil_app.c` (the Jacobi halo-exchange stencil of
//! `native/ckpt/tests/stencil.c`, `--ranks` ranks of `--mib` MiB each: two grids of doubles),
//! compiled twice with `mpicc` at the start of the run:
//!
//! - **transparent**: the plain build (no Cairn call) under `cairn launch -- mpirun -np N
//!   --oversubscribe ...`: the wall time of `cairn checkpoint`; after the job was killed with
//!   SIGKILL, the time from the exec of `cairn restart` to the program's first new step;
//! - **application-level**: the build with `-DCAIRN_APP` under plain `mpirun`, which protects
//!   its grids and step and, when the bench asks (a file `ckpt.K` in its directory), calls
//!   `cairn_checkpoint` between two barriers and reports the seconds; after SIGKILL, the time
//!   from the exec of the relaunched `mpirun` to the first new step, after `cairn_restart`
//!   restored the state.
//!
//! - **DMTCP** (when installed, `--dmtcp PREFIX`, default /opt/cairn-peers/dmtcp, which
//!   `bench/peers/build.sh --only dmtcp` builds): the plain build under `dmtcp_launch` with a
//!   coordinator of the job's own: `dmtcp_command --bcheckpoint`, timed; after SIGKILL, a new
//!   coordinator and `dmtcp_restart` of the images, timed to the first new step; then whether
//!   the restored job goes on (SETTLE_STEPS more steps within GOES_ON).
//!
//! Both Cairn kinds use the same configuration (`JobDir::config`: node-local tier in the job's
//! directory under `--dir`, no compression, no incremental, redundancy single, no flush), so
//! the ratios are what transparency costs. Kinds run in an order that changes between
//! repetitions, every job in a fresh directory, killed and removed when its step ends (also
//! when it fails).

use cairn_bench::jobs::{
    clean_env, compile, exe_dir, kill_strays, two_words, Cairn, CairnCkpt, CairnJob, Dmtcp,
    DmtcpJob, Hb, JobDir, Proc, RunDirs, ENGINE_RESTORED,
};
use cairn_bench::{
    count, fs_available, kernel, meminfo, mono_ns, on_tmpfs, order, ratio, series_json,
    verdict_ratio, walk, x, Out, MIB,
};
use serde_json::{json, Value};
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const PROG: &str = "cairn-bench-mpi";
const USAGE: &str = "usage: cairn-bench-mpi [--mib N] [--ranks N] [--reps N] [--quick] [--dmtcp PREFIX] [--btl LIST] [--dir DIR] [--json] [--json-out FILE]";

/// The targets: the transparent checkpoint and restart of the job at most 1.3 x the
/// application-level ones.
const TARGET_CKPT: f64 = 1.3;
const TARGET_RESTART: f64 = 1.3;
/// Columns of the grids; the rows follow from `--mib`.
const COLS: usize = 4096;
/// Steps the job takes after it started (or came back) before it is checkpointed.
const SETTLE_STEPS: u64 = 3;
/// Memory left free beside what a run needs.
const SLACK: u64 = 1 << 30;
/// How long a job restored by DMTCP has to take SETTLE_STEPS more steps after its first.
const GOES_ON: Duration = Duration::from_secs(20);
/// The phases `cairn checkpoint` reports, in order.
const PHASES: [&str; 4] = ["SUSPEND", "WRITE", "STORE", "RESUME"];

#[derive(Debug)]
struct Args {
    /// MiB per rank: both grids.
    mib: usize,
    ranks: usize,
    reps: usize,
    quick: bool,
    /// Where the run's private directory (tiers, images, the jobs' files) is made.
    dir: PathBuf,
    /// DMTCP's install prefix.
    dmtcp: PathBuf,
    /// Open MPI's byte transfer layers: `self,vader` (shared memory) or `self,tcp`.
    btl: String,
    json: bool,
    json_out: Option<PathBuf>,
}

/// Parse the command line; `Ok(None)` asks for the usage text.
fn parse_args(argv: Vec<String>) -> Result<Option<Args>, String> {
    let (mut mib, mut reps) = (None, None);
    let mut a = Args {
        mib: 0,
        ranks: 4,
        reps: 0,
        quick: false,
        dir: PathBuf::from("/dev/shm"),
        dmtcp: PathBuf::from("/opt/cairn-peers/dmtcp"),
        btl: "self,vader".into(),
        json: false,
        json_out: None,
    };
    let go = walk(argv, |flag, value| {
        match flag {
            "--mib" => mib = Some(count(flag, value()?, 1)?),
            "--ranks" => a.ranks = count(flag, value()?, 2)?,
            "--reps" => reps = Some(count(flag, value()?, 1)?),
            "--quick" => a.quick = true,
            "--dir" => a.dir = PathBuf::from(value()?),
            "--dmtcp" => a.dmtcp = PathBuf::from(value()?),
            "--btl" => a.btl = value()?.to_string(),
            "--json" => a.json = true,
            "--json-out" => a.json_out = Some(PathBuf::from(value()?)),
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    if !go {
        return Ok(None);
    }
    a.mib = mib.unwrap_or(if a.quick { 32 } else { 256 });
    a.reps = reps.unwrap_or(if a.quick { 2 } else { 3 });
    if rows(a.mib) < 1 {
        return Err(format!(
            "--mib {}: too small for two grids of {COLS} columns with halo rows",
            a.mib
        ));
    }
    Ok(Some(a))
}

/// Owned rows per rank for `mib` MiB of two grids of COLS doubles, halo rows included.
fn rows(mib: usize) -> isize {
    (mib * MIB / (2 * 8 * COLS)) as isize - 2
}

/// `step N NS`.
fn parse_step(l: &str) -> Option<(u64, i64)> {
    two_words(l, "step ")
}

/// `ckpt K STEP SECONDS`, for checkpoint `k`: the step and the seconds.
fn parse_ckpt(l: &str, k: u64) -> Option<(u64, f64)> {
    let mut w = l.strip_prefix("ckpt ")?.split(' ');
    (w.next()?.parse::<u64>().ok()? == k).then_some(())?;
    let step = w.next()?.parse().ok()?;
    let s = w.next()?.parse().ok()?;
    Some((step, s))
}

/// `resume VERSION SECONDS`.
fn parse_resume(l: &str) -> Option<(u64, f64)> {
    two_words(l, "resume ")
}

// ---- the programs ----------------------------------------------------------------------------

/// Cairn's binaries copied into the run, the two builds of the stencil, DMTCP if installed.
struct Tools {
    cairn: Cairn,
    plain: PathBuf,
    app: PathBuf,
    dmtcp: Option<Dmtcp>,
}

impl Tools {
    fn build(bin: &Path, dmtcp_prefix: &Path) -> Result<Tools, String> {
        let cairn = Cairn::copy_into(bin)?;
        let dmtcp = Dmtcp::find(dmtcp_prefix, PROG)?;
        let lib = exe_dir()?.join("libcairn.so");
        if !lib.is_file() {
            return Err(format!(
                "{} not found: build the C API (cargo build --release -p cairn-capi)",
                lib.display()
            ));
        }
        fs::copy(&lib, bin.join("libcairn.so"))
            .map_err(|e| format!("cannot copy {} into {}: {e}", lib.display(), bin.display()))?;
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let src = root.join("launch").join("stencil_app.c");
        let include = root
            .join("..")
            .join("crates")
            .join("cairn-capi")
            .join("include");
        let app_flags = [
            "-DCAIRN_APP".to_string(),
            format!("-I{}", include.display()),
            format!("-L{}", bin.display()),
            "-lcairn".to_string(),
            format!("-Wl,-rpath,{}", bin.display()),
            "-lm".to_string(),
        ];
        Ok(Tools {
            plain: compile("mpicc", &src, &bin.join("stencil_plain"), &["-lm".into()])?,
            app: compile("mpicc", &src, &bin.join("stencil_app"), &app_flags)?,
            cairn,
            dmtcp,
        })
    }
}

/// `mpirun` with `ranks` ranks of `exe` on this host, its output in `dir`. Open MPI's
/// session directory and the backing files of its shared-memory transport go into `dir` too:
/// a job killed with SIGKILL leaves them behind (in /tmp and /dev/shm by default), and they
/// are removed with the job's directory. By default the ranks talk over shared memory only
/// (`btl self,vader`: they are on one host), so no TCP listener of theirs takes connections
/// from other MPI jobs of the machine; with `--btl self,tcp` they talk over IPv4 loopback.
fn mpirun_args(a: &Args, exe: &Path, dir: &Path) -> Vec<OsString> {
    let loopback: Vec<OsString> = if a.btl.contains("tcp") {
        ["btl_tcp_if_include", "oob_tcp_if_include"]
            .iter()
            .flat_map(|k| ["--mca".into(), (*k).into(), "127.0.0.1/8".into()])
            .collect()
    } else {
        Vec::new()
    };
    let mut v: Vec<OsString> = vec![
        "mpirun".into(),
        "--allow-run-as-root".into(),
        "--oversubscribe".into(),
        "-np".into(),
        a.ranks.to_string().into(),
        "--mca".into(),
        "btl".into(),
        a.btl.clone().into(),
        "--mca".into(),
        "orte_tmpdir_base".into(),
        dir.into(),
        "--mca".into(),
        "btl_vader_backing_directory".into(),
        dir.into(),
    ];
    v.extend(loopback);
    v.extend([
        exe.into(),
        rows(a.mib).to_string().into(),
        COLS.to_string().into(),
        dir.into(),
    ]);
    v
}

// ---- one job of each kind --------------------------------------------------------------------

/// What one life and restart of the job measured.
#[derive(Debug, Default)]
struct Run {
    ckpt_s: f64,
    restart_s: f64,
    /// Transparent: the phases of `cairn checkpoint` and when the engine restored the images;
    /// application-level: what `cairn_restart` took inside the program.
    ckpt: Option<CairnCkpt>,
    engine_s: Option<f64>,
    resume_s: Option<f64>,
}

/// Lines until the job has taken SETTLE_STEPS steps after its ready line; returns the last
/// step seen.
fn settle(hb: &mut Hb, job: &mut Proc) -> Result<u64, String> {
    hb.wait("the program's ready line", job, |l| {
        l.starts_with("ready ").then_some(())
    })?;
    let mut seen = 0;
    hb.wait("the program's first steps", job, |l| {
        let (n, _) = parse_step(l)?;
        seen += 1;
        (seen >= SETTLE_STEPS).then_some(n)
    })
}

/// After a restart begun at `t0`: the first step stamped after `t0`, which must come after
/// `before` (the state came back, the job did not start over); seconds from `t0`.
fn first_step(hb: &mut Hb, job: &mut Proc, t0: i64, before: u64) -> Result<f64, String> {
    let (n, ns) = hb.wait("a step of the restored job", job, |l| {
        parse_step(l).filter(|s| s.1 > t0)
    })?;
    if n <= before {
        return Err(format!(
            "the restored job's first step is {n}, the job had reached step {before} before the checkpoint: it started over"
        ));
    }
    Ok((ns - t0) as f64 * 1e-9)
}

fn transparent(a: &Args, t: &Tools, dirs: &RunDirs, tag: &str) -> Result<Run, String> {
    let mut job = CairnJob::new(&t.cairn, dirs, tag, false)?;
    let out = job.dir.path.join("out.stencil");
    let mut hb = Hb::new(out);
    job.launch(&mpirun_args(a, &t.plain, &job.dir.path))?;
    let before = settle(&mut hb, job.fg())?;
    let ck = job.checkpoint()?;
    job.kill()?;
    hb.poll();
    let t0 = job.restart()?;
    let restart_s = first_step(&mut hb, job.fg(), t0, before)?;
    let engine_s = job
        .fg()
        .line_at(ENGINE_RESTORED)
        .map(|at| (at - t0) as f64 * 1e-9);
    job.kill()?;
    Ok(Run {
        ckpt_s: ck.secs,
        restart_s,
        ckpt: Some(ck),
        engine_s,
        resume_s: None,
    })
}

fn application(a: &Args, t: &Tools, dirs: &RunDirs, tag: &str) -> Result<Run, String> {
    let dir = JobDir::new(dirs, tag)?;
    let cfg = dir.config(false)?;
    let mut hb = Hb::new(dir.path.join("out.stencil"));
    let mpirun = || {
        let args = mpirun_args(a, &t.app, &dir.path);
        let mut c = Command::new(&args[0]);
        clean_env(&mut c);
        c.args(&args[1..]).env("CAIRN_CONFIG", &cfg);
        c
    };
    let mut job = Proc::spawn("mpirun (application-level)", mpirun())?;
    let before = settle(&mut hb, &mut job)?;
    let req = dir.path.join("ckpt.1");
    fs::write(&req, b"").map_err(|e| format!("cannot create {}: {e}", req.display()))?;
    let (step, ckpt_s) = hb.wait("the program's checkpoint", &mut job, |l| parse_ckpt(l, 1))?;
    // SIGKILL mpirun, then every rank (their command lines name the job's directory).
    job.kill();
    kill_strays(&[dir.path.display().to_string()]);
    hb.poll();
    let t0 = mono_ns();
    let mut job = Proc::spawn("mpirun (application-level, restarted)", mpirun())?;
    let (version, resume_s) = hb.wait("the program's resume line", &mut job, |l| {
        if l == "fresh" {
            return Some((u64::MAX, 0.0));
        }
        parse_resume(l)
    })?;
    if version != step {
        return Err(format!(
            "the restarted program restored version {}, checkpoint {step} was written",
            if version == u64::MAX {
                "none".to_string()
            } else {
                version.to_string()
            }
        ));
    }
    let restart_s = first_step(&mut hb, &mut job, t0, before)?;
    job.kill();
    kill_strays(&[dir.path.display().to_string()]);
    Ok(Run {
        ckpt_s,
        restart_s,
        ckpt: None,
        engine_s: None,
        resume_s: Some(resume_s),
    })
}

/// What a DMTCP job measured, and whether its restored job went on (else why not).
struct DmtcpRun {
    ckpt_s: f64,
    image_bytes: u64,
    /// Exec of the new coordinator to the first new step; `None` when there was none.
    restart_s: Option<f64>,
    went_on: Result<(), String>,
}

/// The plain build under DMTCP: launched, checkpointed, killed, restarted.
fn dmtcp(a: &Args, t: &Tools, d: &Dmtcp, dirs: &RunDirs, tag: &str) -> Result<DmtcpRun, String> {
    let mut job = DmtcpJob::new(d, dirs, tag)?;
    // Without this DMTCP stops mpirun at its start: hwloc's I/O discovery opens the block
    // devices through udev, and DMTCP refuses the descriptor ("Unimplemented file type").
    job.set_env("HWLOC_COMPONENTS", "-linuxio");
    let dir = job.dir().to_path_buf();
    let mut hb = Hb::new(dir.join("out.stencil"));
    job.launch(&mpirun_args(a, &t.plain, &dir))?;
    let before = settle(&mut hb, job.fg().expect("launched"))?;
    let (ckpt_s, sizes) = job.checkpoint()?;
    job.kill();
    hb.poll();
    let t0 = job.restart()?;
    let fg = job.fg().expect("restarted");
    let first = hb.wait_at_most("a step of the restored job", fg, GOES_ON, |l| {
        parse_step(l).filter(|s| s.1 > t0)
    });
    let (restart_s, went_on) = match first {
        Err(e) => (None, Err(e)),
        Ok((n, _)) if n <= before => (
            None,
            Err(format!("its first step is {n}, step {before} was reached before the checkpoint: it started over")),
        ),
        Ok((n, ns)) => {
            let mut more = 0;
            let on = hb
                .wait_at_most("more steps of the restored job", fg, GOES_ON, |l| {
                    if parse_step(l).is_some_and(|s| s.0 > n) {
                        more += 1;
                    }
                    (more >= SETTLE_STEPS).then_some(())
                })
                .map_err(|e| format!("after its first step: {e}"));
            (Some((ns - t0) as f64 * 1e-9), on)
        }
    };
    job.kill();
    Ok(DmtcpRun {
        ckpt_s,
        image_bytes: sizes.iter().sum(),
        restart_s,
        went_on,
    })
}

// ---- the table -------------------------------------------------------------------------------

/// A row of a table: a series' median and its span.
fn row(name: &str, v: &[f64]) -> String {
    cairn_bench::row(64, name, v)
}

fn run(a: &Args) -> Result<Value, String> {
    let out = Out { json: a.json };
    let bytes = a.mib as u64 * MIB as u64 * a.ranks as u64;
    // The ranks; for the transparent kind their staged images, the stored ones and the images
    // restored for the restart; the restored ranks.
    // DMTCP's images (when it is installed) are about as large as Cairn's.
    let need = 2 * bytes + if on_tmpfs(&a.dir) { 4 * bytes } else { 0 } + SLACK;
    let avail = meminfo("MemAvailable").unwrap_or(0);
    if avail < need {
        return Err(format!(
            "{} ranks of {} MiB need about {} MiB of memory (ranks, restored ranks, images on tmpfs), {} MiB is available; use --mib",
            a.ranks,
            a.mib,
            need >> 20,
            avail >> 20
        ));
    }
    let space = fs_available(&a.dir).unwrap_or(0);
    if space < 3 * bytes + SLACK {
        return Err(format!(
            "the images need about {} MiB in {}, {} MiB is free",
            (3 * bytes + SLACK) >> 20,
            a.dir.display(),
            space >> 20
        ));
    }
    let dirs = RunDirs::create(&a.dir, PROG, "bm")?;
    let t = Tools::build(&dirs.bin, &a.dmtcp)?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    out.line(format!(
        "{PROG}: {cores} cores, Linux {}, MemAvailable {} MiB; jobs in {} ({}); {} repetitions; medians",
        kernel(),
        avail >> 20,
        dirs.data.display(),
        if on_tmpfs(&dirs.data) { "tmpfs" } else { "not tmpfs" },
        a.reps
    ));
    out.line(format!(
        "   Cairn built {}; an MPI stencil (bench/launch/stencil_app.c), {} ranks x {} MiB ({} x {COLS} doubles x 2 grids), mpirun --oversubscribe --mca btl {} on this host",
        t.cairn.built,
        a.ranks,
        a.mib,
        rows(a.mib) + 2,
        a.btl
    ));
    out.line(
        "   both kinds: node-local tier in the job's directory, compress none, incremental off, redundancy single, no flush",
    );
    const KINDS: [&str; 3] = ["transparent", "application-level", "DMTCP"];
    let kinds = if t.dmtcp.is_some() { 3 } else { 2 };
    let mut dm: Vec<DmtcpRun> = Vec::new();
    let mut ck: [Vec<f64>; 2] = [vec![], vec![]];
    let mut rs: [Vec<f64>; 2] = [vec![], vec![]];
    let mut phases: Vec<Vec<f64>> = vec![vec![]; PHASES.len()];
    let (mut engine, mut resume, mut image) = (vec![], vec![], vec![]);
    for rep in 0..a.reps {
        for k in order(kinds, rep) {
            let tag = format!("r{rep}-{k}");
            if k == 2 {
                let d = t.dmtcp.as_ref().expect("DMTCP found");
                let r = dmtcp(a, &t, d, &dirs, &tag)
                    .map_err(|e| format!("{}, repetition {}: {e}", KINDS[k], rep + 1))?;
                dm.push(r);
                continue;
            }
            let r = if k == 0 {
                transparent(a, &t, &dirs, &tag)
            } else {
                application(a, &t, &dirs, &tag)
            }
            .map_err(|e| format!("{}, repetition {}: {e}", KINDS[k], rep + 1))?;
            ck[k].push(r.ckpt_s);
            rs[k].push(r.restart_s);
            if let Some(c) = &r.ckpt {
                // Each phase until the next one starts; the last until the command ended.
                let start = |p: &str| c.phases.iter().find(|x| x.0 == p).map(|x| x.1);
                for (i, p) in PHASES.iter().enumerate() {
                    let d = match PHASES.get(i + 1) {
                        Some(e) => c.phase(p, e),
                        None => start(p).map(|s| c.secs - s),
                    };
                    phases[i].extend(d);
                }
                image.push(c.bytes);
            }
            engine.extend(r.engine_s);
            resume.extend(r.resume_s);
        }
    }
    out.line(cairn_bench::head(64));
    out.line(row("transparent: cairn checkpoint (wall time)", &ck[0]));
    for (i, p) in PHASES.iter().enumerate() {
        let what = match PHASES.get(i + 1) {
            Some(e) => format!("   {p} (from its start to {e}'s)"),
            None => format!("   {p} and the command's end (wall time minus {p}'s start)"),
        };
        out.line(row(&what, &phases[i]));
    }
    out.line(row(
        "application-level: cairn_checkpoint between barriers",
        &ck[1],
    ));
    out.line(row(
        "transparent: exec of cairn restart to the first new step",
        &rs[0],
    ));
    out.line(row("   of which the engine restores the images", &engine));
    out.line(row(
        "application-level: exec of mpirun to the first new step",
        &rs[1],
    ));
    out.line(row(
        "   of which cairn_restart_test + cairn_restart",
        &resume,
    ));
    out.line(format!(
        "   images of the transparent checkpoint: {} MB; the ranks' grids: {} MB",
        image.first().map_or(0, |b| b / 1_000_000),
        bytes / 1_000_000
    ));
    let rc = ratio(&ck[0], &ck[1]);
    let rr = ratio(&rs[0], &rs[1]);
    out.line(format!(
        "   checkpoint transparent / application-level: {}, target <= {TARGET_CKPT}: {}",
        x(rc),
        verdict_ratio(rc, TARGET_CKPT)
    ));
    out.line(format!(
        "   restart transparent / application-level: {}, target <= {TARGET_RESTART}: {}",
        x(rr),
        verdict_ratio(rr, TARGET_RESTART)
    ));
    let mut dmtcp_json = Value::Null;
    if let Some(d) = &t.dmtcp {
        let dck: Vec<f64> = dm.iter().map(|r| r.ckpt_s).collect();
        let drs: Vec<f64> = dm.iter().filter_map(|r| r.restart_s).collect();
        let on = dm.iter().filter(|r| r.went_on.is_ok()).count();
        out.line(row(
            &format!("{}: dmtcp_command --bcheckpoint", d.version),
            &dck,
        ));
        out.line(row(
            &format!("{}: exec of dmtcp_restart to the first new step", d.version),
            &drs,
        ));
        out.line(format!(
            "   {}: images {} MB; the restored job took {SETTLE_STEPS} more steps within {} s in {on} of {} runs",
            d.version,
            dm.first().map_or(0, |r| r.image_bytes / 1_000_000),
            GOES_ON.as_secs(),
            dm.len()
        ));
        for (i, r) in dm.iter().enumerate() {
            if let Err(e) = &r.went_on {
                out.line(format!(
                    "      run {}: {}",
                    i + 1,
                    e.lines()
                        .next()
                        .unwrap_or("")
                        .trim_end_matches(':')
                        .trim_end_matches("; its last lines")
                ));
            }
        }
        let rd = ratio(&ck[0], &dck);
        out.line(format!(
            "   checkpoint Cairn transparent / {}: {}",
            d.version,
            x(rd)
        ));
        let rdr = if on == dm.len() {
            ratio(&rs[0], &drs)
        } else {
            f64::NAN
        };
        out.line(format!(
            "   restart Cairn transparent / {}: {}",
            d.version,
            if rdr.is_nan() {
                "not compared: DMTCP's restored job did not go on".to_string()
            } else {
                x(rdr)
            }
        ));
        dmtcp_json = json!({
            "version": d.version, "build": d.build,
            "checkpoint": series_json(&dck), "restart": series_json(&drs),
            "image_bytes": dm.iter().map(|r| r.image_bytes).collect::<Vec<_>>(),
            "went_on": dm.iter().map(|r| r.went_on.is_ok()).collect::<Vec<_>>(),
            "why_not": dm.iter().map(|r| r.went_on.as_ref().err()).collect::<Vec<_>>(),
            "checkpoint_cairn_vs_dmtcp": rd,
            "restart_cairn_vs_dmtcp": if rdr.is_nan() { Value::Null } else { json!(rdr) },
        });
    }
    let phase_json: serde_json::Map<String, Value> = PHASES
        .iter()
        .zip(&phases)
        .map(|(p, v)| (p.to_lowercase(), series_json(v)))
        .collect();
    Ok(json!({
        "program": PROG,
        "settings": {
            "mib": a.mib, "ranks": a.ranks, "reps": a.reps, "quick": a.quick,
            "rows": rows(a.mib), "cols": COLS, "dir": dirs.data, "btl": a.btl,
            "tmpfs": on_tmpfs(&dirs.data), "cores": cores, "kernel": kernel(),
            "cairn_built": t.cairn.built,
        },
        "transparent": {
            "checkpoint": series_json(&ck[0]), "phases": phase_json,
            "restart": series_json(&rs[0]), "restart_engine": series_json(&engine),
            "image_bytes": image,
        },
        "application": {
            "checkpoint": series_json(&ck[1]), "restart": series_json(&rs[1]),
            "resume": series_json(&resume),
        },
        "dmtcp": dmtcp_json,
        "checkpoint_ratio": rc, "restart_ratio": rr,
        "target_checkpoint": TARGET_CKPT, "target_restart": TARGET_RESTART,
        "meets_checkpoint": rc <= TARGET_CKPT, "meets_restart": rr <= TARGET_RESTART,
    }))
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
        let a = parse_args(strings(&["--mib=64", "--json"]))
            .unwrap()
            .unwrap();
        assert_eq!((a.mib, a.reps, a.ranks, a.json), (64, 3, 4, true));
        let q = parse_args(strings(&["--quick"])).unwrap().unwrap();
        assert_eq!((q.mib, q.reps), (32, 2));
        assert!(parse_args(strings(&["--help"])).unwrap().is_none());
        assert!(parse_args(strings(&["--ranks", "1"])).is_err());
        let t = parse_args(strings(&["--btl", "self,tcp", "--dmtcp", "/x"]))
            .unwrap()
            .unwrap();
        assert_eq!(
            (t.btl.as_str(), t.dmtcp.as_path()),
            ("self,tcp", Path::new("/x"))
        );
    }

    #[test]
    fn sizes_hold_two_grids_with_halos() {
        assert_eq!((rows(256) + 2) as usize * COLS * 8 * 2, 256 * MIB);
        assert!(rows(32) > 0);
    }

    #[test]
    fn lines_parse() {
        assert_eq!(parse_step("step 12 345"), Some((12, 345)));
        assert_eq!(parse_step("ready 1"), None);
        assert_eq!(parse_ckpt("ckpt 1 40 0.250000", 1), Some((40, 0.25)));
        assert_eq!(parse_ckpt("ckpt 2 40 0.250000", 1), None);
        assert_eq!(parse_resume("resume 40 1.500000"), Some((40, 1.5)));
    }
}
