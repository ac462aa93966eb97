//! `cairn demo`: run the heat2d example under mpirun, kill one rank with SIGKILL partway, show
//! what is stored, relaunch the same command and compare its final checksum with an
//! uninterrupted run's.

use crate::show;
use anyhow::{anyhow, bail, Context, Result};
use cairn_core::inventory::Inventory;
use cairn_core::Config;
use clap::Args;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::DirBuilder;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The checkpoint after which a rank is killed.
const KILL_AFTER: usize = 3;
/// Checkpoint name used by every run.
const NAME: &str = "heat2d";

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// MPI ranks
    #[arg(long, default_value_t = 4, value_name = "R")]
    ranks: u32,
    /// Simulated nodes the ranks are split into (each with its own node-local directory)
    #[arg(long, default_value_t = 2, value_name = "K")]
    nodes: u32,
    /// Steps of every run
    #[arg(long, default_value_t = 1000, value_name = "N")]
    steps: u64,
    /// Checkpoint every K steps
    #[arg(long, default_value_t = 100, value_name = "K")]
    every: u64,
    /// Grid size (N x N); the rank count must divide it
    #[arg(long, default_value_t = 512, value_name = "N")]
    n: u64,
    /// Sleep after every step of the killed run and its relaunch, so the kill lands partway
    #[arg(long, default_value_t = 5, value_name = "MS")]
    sleep_ms: u64,
    /// Rank to kill (default: the last one)
    #[arg(long, value_name = "R")]
    kill_rank: Option<u32>,
    /// The heat2d binary (default: build/bin/heat2d in the repository)
    #[arg(long, value_name = "PATH")]
    heat: Option<PathBuf>,
    /// Directory for the demo's tiers; must be new or empty (default: a new
    /// /tmp/cairn-demo-<pid>)
    #[arg(long, value_name = "DIR")]
    workdir: Option<PathBuf>,
}

/// What one run of heat2d printed, and how it ended.
#[derive(Debug, Default)]
struct Outcome {
    restarted_from: Option<(i64, i64)>,
    /// (step, milliseconds) per checkpoint line.
    checkpoints: Vec<(i64, f64)>,
    /// (steps, checkpoints, checkpoint milliseconds) from the summary line.
    summary: Option<(i64, i64, f64)>,
    checksum: Option<String>,
    killed: Option<Killed>,
    status: Option<ExitStatus>,
    stderr: Vec<String>,
    seconds: f64,
}

#[derive(Debug)]
struct Killed {
    rank: Option<u32>,
    pid: u32,
    after_step: i64,
}

impl Outcome {
    fn ckpt_ms(&self) -> f64 {
        match self.summary {
            Some((_, _, ms)) => ms,
            None => self.checkpoints.iter().map(|(_, ms)| ms).sum(),
        }
    }
}

/// How to start heat2d under mpirun.
struct Launch {
    mpirun_args: Vec<String>,
    nodes: u32,
    heat: PathBuf,
    root_env: bool,
    timeout: Duration,
}

fn repo_root() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    p.canonicalize().unwrap_or(p)
}

fn find_heat(given: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = given {
        if !p.is_file() {
            bail!("--heat {}: no such file", p.display());
        }
        return Ok(p.to_path_buf());
    }
    let p = repo_root().join("build/bin/heat2d");
    if p.is_file() {
        return Ok(p);
    }
    bail!(
        "the heat2d example is not built ({} does not exist). Run `./run demo` from the \
         repository root: it builds libcairn and heat2d, then runs this demo. Or build heat2d \
         yourself (see examples/README.md) and pass --heat PATH.",
        p.display()
    )
}

/// Create the demo directory, private to the user. A given directory may exist but must be
/// empty, so no earlier checkpoint can be mistaken for this run's.
fn make_workdir(given: Option<&Path>) -> Result<PathBuf> {
    let dir = match given {
        Some(d) => {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(d)
                .with_context(|| format!("cannot create work directory {}", d.display()))?;
            let mut entries = std::fs::read_dir(d)
                .with_context(|| format!("cannot read work directory {}", d.display()))?;
            if entries.next().is_some() {
                bail!(
                    "work directory {} is not empty; give a new or empty directory",
                    d.display()
                );
            }
            d.to_path_buf()
        }
        None => {
            let d = std::env::temp_dir().join(format!("cairn-demo-{}", std::process::id()));
            DirBuilder::new()
                .mode(0o700)
                .create(&d)
                .with_context(|| format!("cannot create work directory {}", d.display()))?;
            d
        }
    };
    for sub in ["reference", "run"] {
        DirBuilder::new()
            .mode(0o700)
            .create(dir.join(sub))
            .with_context(|| format!("cannot create {}", dir.join(sub).display()))?;
    }
    Ok(dir)
}

/// `mpirun` options for the installed MPI: Open MPI needs `--oversubscribe` to start more
/// ranks than cores, and refuses root without its two environment variables.
fn mpirun_flavour() -> Result<(bool, bool)> {
    let out = Command::new("mpirun")
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .context(
            "cannot run mpirun; install an MPI implementation (e.g. Open MPI) and put mpirun on PATH",
        )?;
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let open_mpi = text.contains("Open MPI") || text.contains("OpenRTE") || text.contains("PRRTE");
    let root = std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false);
    Ok((open_mpi, root))
}

fn validate(a: &DemoArgs) -> Result<u32> {
    if a.ranks == 0 || a.nodes == 0 || a.nodes > a.ranks {
        bail!(
            "--nodes {} must be between 1 and --ranks {} (each simulated node needs a rank)",
            a.nodes,
            a.ranks
        );
    }
    if a.n < 3 || a.n % u64::from(a.ranks) != 0 {
        bail!("--ranks {} must divide --n {} (and N >= 3)", a.ranks, a.n);
    }
    if a.every == 0 || a.steps <= KILL_AFTER as u64 * a.every {
        bail!(
            "--steps {} must be more than {KILL_AFTER} x --every {} so a rank can be killed after \
             the {KILL_AFTER}rd checkpoint, before the run ends",
            a.steps,
            a.every
        );
    }
    let kill = a.kill_rank.unwrap_or(a.ranks - 1);
    if kill >= a.ranks {
        bail!("--kill-rank {kill} is not a rank of {}", a.ranks);
    }
    Ok(kill)
}

/// Every process's parent, from /proc.
fn process_parents() -> BTreeMap<u32, (u32, String)> {
    let mut out = BTreeMap::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = stat[open + 1..close].to_string();
        let ppid = stat[close + 1..]
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            out.insert(pid, (ppid, comm));
        }
    }
    out
}

/// The MPI rank of a process, from the variables mpirun gives it.
fn rank_of(pid: u32) -> Option<u32> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|b| *b == 0).find_map(|kv| {
        let kv = std::str::from_utf8(kv).ok()?;
        ["OMPI_COMM_WORLD_RANK=", "PMIX_RANK=", "PMI_RANK="]
            .iter()
            .find_map(|p| kv.strip_prefix(p))
            .and_then(|v| v.parse().ok())
    })
}

/// The heat2d processes below `root` (mpirun), with their ranks when known.
fn rank_processes(root: u32, exe: &Path) -> Vec<(u32, Option<u32>)> {
    // The kernel keeps the first 15 bytes of the executable's name as `comm`.
    let want: String = exe
        .file_name()
        .map(|n| n.to_string_lossy().chars().take(15).collect())
        .unwrap_or_default();
    let procs = process_parents();
    let mut below: BTreeSet<u32> = BTreeSet::from([root]);
    loop {
        let more: Vec<u32> = procs
            .iter()
            .filter(|(pid, (ppid, _))| below.contains(ppid) && !below.contains(pid))
            .map(|(pid, _)| *pid)
            .collect();
        if more.is_empty() {
            break;
        }
        below.extend(more);
    }
    below
        .iter()
        .filter(|pid| **pid != root && procs.get(pid).is_some_and(|(_, c)| *c == want))
        .map(|pid| (*pid, rank_of(*pid)))
        .collect()
}

/// Send SIGKILL to `pid` with kill(2) (through rustix, so no `kill` program is needed: it
/// lives in procps, which minimal systems lack).
fn sigkill(pid: u32) -> Result<()> {
    // A pid past i32::MAX would turn negative and name a process group (-1: every process);
    // 0 names our own group. Neither is a rank.
    let target = i32::try_from(pid)
        .ok()
        .filter(|p| *p > 0)
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| anyhow!("cannot send SIGKILL to pid {pid}: not a process id"))?;
    rustix::process::kill_process(target, rustix::process::Signal::KILL)
        .map_err(|e| anyhow!("cannot send SIGKILL to pid {pid}: {e}"))
}

enum Msg {
    Out(String),
    Err(String),
    Closed,
}

fn forward(r: impl Read + Send + 'static, tx: mpsc::Sender<Msg>, err: bool) {
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            let m = if err { Msg::Err(line) } else { Msg::Out(line) };
            if tx.send(m).is_err() {
                return;
            }
        }
        let _ = tx.send(Msg::Closed);
    });
}

fn parse_line(line: &str, o: &mut Outcome) {
    let Some(rest) = line.strip_prefix("heat2d: ") else {
        return;
    };
    let words: Vec<&str> = rest.split_whitespace().collect();
    match words.as_slice() {
        ["restarted", "from", "checkpoint", v, "(step", s] => {
            let v = v.strip_prefix('v').and_then(|v| v.parse().ok());
            let s = s.strip_suffix(')').and_then(|s| s.parse().ok());
            if let (Some(v), Some(s)) = (v, s) {
                o.restarted_from = Some((v, s));
            }
        }
        ["step", s, "checkpoint", _, ms, "ms"] => {
            if let (Ok(s), Ok(ms)) = (s.parse(), ms.parse()) {
                o.checkpoints.push((s, ms));
            }
        }
        ["steps", s, "checkpoints", c, "checkpoint-time", ms, "ms"] => {
            if let (Ok(s), Ok(c), Ok(ms)) = (s.parse(), c.parse(), ms.parse()) {
                o.summary = Some((s, c, ms));
            }
        }
        ["final", "checksum", sum] => o.checksum = Some(sum.to_string()),
        _ => {}
    }
}

/// Run heat2d once under mpirun, streaming its lines; with `kill_rank`, SIGKILL that rank
/// after the [`KILL_AFTER`]th checkpoint line.
fn run_heat(
    l: &Launch,
    tiers: &Path,
    heat_args: &[String],
    kill_rank: Option<u32>,
) -> Result<Outcome> {
    let mut cmd = Command::new("mpirun");
    cmd.args(&l.mpirun_args)
        .arg(&l.heat)
        .args(heat_args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // The demo's settings only: no CAIRN_CONFIG or other CAIRN_* variable of the caller.
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("CAIRN_") {
            cmd.env_remove(&k);
        }
    }
    cmd.env("CAIRN_TOPOLOGY_SIM_NODES", l.nodes.to_string())
        .env("CAIRN_TIERS_LOCAL", tiers.join("local"))
        .env("CAIRN_TIERS_GLOBAL", tiers.join("global"))
        .env("CAIRN_FLUSH_EVERY", "2");
    if l.root_env {
        cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    }
    let t0 = Instant::now();
    let mut child: Child = cmd.spawn().context("cannot start mpirun")?;
    let (tx, rx) = mpsc::channel();
    forward(child.stdout.take().expect("piped"), tx.clone(), false);
    forward(child.stderr.take().expect("piped"), tx, true);

    let mut o = Outcome::default();
    let mut open_streams = 2;
    let deadline = t0 + l.timeout;
    while open_streams > 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        let msg = match rx.recv_timeout(left) {
            Ok(m) => m,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "mpirun did not finish within {} s; stopped it",
                    l.timeout.as_secs()
                );
            }
        };
        match msg {
            Msg::Closed => open_streams -= 1,
            Msg::Err(line) => {
                if line.contains("cairn") {
                    println!("    {line}");
                }
                o.stderr.push(line);
            }
            Msg::Out(line) => {
                if line.starts_with("heat2d: ") {
                    println!("    {line}");
                }
                parse_line(&line, &mut o);
                if let Some(want) = kill_rank {
                    if o.killed.is_none() && o.checkpoints.len() == KILL_AFTER {
                        let after_step = o.checkpoints[KILL_AFTER - 1].0;
                        let procs = rank_processes(child.id(), &l.heat);
                        let target = procs
                            .iter()
                            .find(|(_, r)| *r == Some(want))
                            .or_else(|| procs.last())
                            .copied();
                        let Some((pid, rank)) = target else {
                            let _ = child.kill();
                            let _ = child.wait();
                            bail!(
                                "found no {} processes below mpirun (pid {})",
                                l.heat.display(),
                                child.id()
                            );
                        };
                        sigkill(pid)?;
                        println!(
                            "    >>> kill -9 {} (pid {pid}) after checkpoint v{after_step}",
                            rank.map_or("a rank".to_string(), |r| format!("rank {r}"))
                        );
                        o.killed = Some(Killed {
                            rank,
                            pid,
                            after_step,
                        });
                    }
                }
            }
        }
    }
    o.status = Some(child.wait().context("waiting for mpirun")?);
    o.seconds = t0.elapsed().as_secs_f64();
    Ok(o)
}

/// Fail with the run's standard error when a run that should have succeeded did not.
fn require_success(what: &str, o: &Outcome) -> Result<String> {
    let ok = o.status.is_some_and(|s| s.success());
    match (&o.checksum, ok) {
        (Some(sum), true) => Ok(sum.clone()),
        _ => {
            let tail: Vec<&str> = o
                .stderr
                .iter()
                .rev()
                .take(20)
                .rev()
                .map(String::as_str)
                .collect();
            Err(anyhow!(
                "the {what} failed (mpirun {}){}",
                o.status
                    .map_or("status unknown".to_string(), |s| s.to_string()),
                if tail.is_empty() {
                    String::new()
                } else {
                    format!("; its last messages:\n{}", tail.join("\n"))
                }
            ))
        }
    }
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("    {l}\n")).collect()
}

/// Run the demo; `Ok(true)` when the restarted run ends identical to the reference.
pub fn run(a: &DemoArgs) -> Result<bool> {
    let kill_rank = validate(a)?;
    let heat = find_heat(a.heat.as_deref())?;
    let (open_mpi, root) = mpirun_flavour()?;
    let work = make_workdir(a.workdir.as_deref())?;

    let mut mpirun_args = vec!["-n".to_string(), a.ranks.to_string()];
    if open_mpi {
        mpirun_args.push("--oversubscribe".into());
    }
    let slow = a.steps * a.sleep_ms / 1000;
    let launch = Launch {
        mpirun_args,
        nodes: a.nodes,
        heat: heat.clone(),
        root_env: open_mpi && root,
        timeout: Duration::from_secs(300 + slow),
    };
    let base = vec![
        "--n".to_string(),
        a.n.to_string(),
        "--steps".into(),
        a.steps.to_string(),
        "--every".into(),
        a.every.to_string(),
        "--name".into(),
        NAME.into(),
    ];
    let mut slowed = base.clone();
    slowed.extend(["--sleep-ms".to_string(), a.sleep_ms.to_string()]);

    println!(
        "Cairn demo: heat2d on a {n}x{n} grid, {} ranks on {} simulated nodes, {} steps, \
         a checkpoint every {} steps",
        a.ranks,
        a.nodes,
        a.steps,
        a.every,
        n = a.n
    );
    println!("  work directory  {}", work.display());
    println!(
        "  command         mpirun {} {} {}",
        launch.mpirun_args.join(" "),
        heat.display(),
        slowed.join(" ")
    );
    println!(
        "  environment     CAIRN_TOPOLOGY_SIM_NODES={} CAIRN_FLUSH_EVERY=2 \
         CAIRN_TIERS_LOCAL=<dir>/local CAIRN_TIERS_GLOBAL=<dir>/global",
        a.nodes
    );

    println!("\n[1/4] Reference run, never interrupted (its own tiers)");
    let reference = run_heat(&launch, &work.join("reference"), &base, None)?;
    let ref_sum = require_success("reference run", &reference)?;

    println!("\n[2/4] The same run, slowed down; one rank is killed after checkpoint {KILL_AFTER}");
    let run_tiers = work.join("run");
    let killed = run_heat(&launch, &run_tiers, &slowed, Some(kill_rank))?;
    let Some(k) = &killed.killed else {
        bail!(
            "the run ended before its checkpoint {KILL_AFTER}, so nothing was killed (mpirun {})",
            killed.status.map_or("?".into(), |s| s.to_string())
        );
    };
    println!(
        "    mpirun exited ({}), as expected after losing a rank",
        killed.status.map_or("?".into(), |s| s.to_string())
    );
    if killed.checksum.is_some() {
        println!("    note: the run finished anyway; the kill came too late to interrupt it");
    }

    println!("\n[3/4] What is stored (cairn list)");
    let cfg = Config {
        local: Some(run_tiers.join("local")),
        global: run_tiers.join("global"),
        ..Config::default()
    };
    let inv = Inventory::open(&cfg)?;
    let records = inv.list(None)?;
    print!("{}", indent(&show::list(&inv, None, &records)));

    println!("\n[4/4] Relaunch of the same command");
    let relaunch = run_heat(&launch, &run_tiers, &slowed, None)?;
    let new_sum = require_success("relaunch", &relaunch)?;

    let identical = ref_sum == new_sum;
    println!("\nSummary");
    let row = |k: &str, v: String| println!("  {k:<17} {v}");
    row("steps", format!("{} per run", a.steps));
    row(
        "checkpoints",
        format!(
            "reference {}, killed run {}, relaunch {}",
            reference.checkpoints.len(),
            killed.checkpoints.len(),
            relaunch.checkpoints.len()
        ),
    );
    row(
        "killed",
        format!(
            "{} (pid {}) with SIGKILL right after checkpoint v{} (step {})",
            k.rank.map_or("a rank".to_string(), |r| format!("rank {r}")),
            k.pid,
            k.after_step,
            k.after_step
        ),
    );
    row(
        "restarted from",
        match relaunch.restarted_from {
            Some((v, s)) => format!("checkpoint v{v} (step {s})"),
            None => "nothing: the relaunch started fresh".into(),
        },
    );
    row(
        "checkpoint time",
        format!(
            "reference {:.1} ms, killed run {:.1} ms, relaunch {:.1} ms",
            reference.ckpt_ms(),
            killed.ckpt_ms(),
            relaunch.ckpt_ms()
        ),
    );
    row(
        "wall time",
        format!(
            "reference {:.1} s, killed run {:.1} s, relaunch {:.1} s",
            reference.seconds, killed.seconds, relaunch.seconds
        ),
    );
    row("stored data", work.display().to_string());
    row(
        "",
        format!(
            "cairn --local {} --global {} list",
            run_tiers.join("local").display(),
            run_tiers.join("global").display()
        ),
    );
    row("final checksum", format!("reference {ref_sum}"));
    row("", format!("restarted {new_sum}"));
    row(
        "result",
        if identical {
            "IDENTICAL: the restarted run ends bit-for-bit like the uninterrupted one".into()
        } else {
            "DIFFERENT: the restarted run does not match the uninterrupted one".into()
        },
    );
    if relaunch.restarted_from.is_none() {
        println!("  but the relaunch did not restart from a checkpoint, so nothing was shown");
        return Ok(false);
    }
    Ok(identical)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heat2d_lines_are_parsed() {
        let mut o = Outcome::default();
        for l in [
            "heat2d: restarted from checkpoint v300 (step 300)",
            "heat2d: step 400 checkpoint v400 1.250 ms",
            "heat2d: step 500 checkpoint v500 0.750 ms",
            "heat2d: steps 1000 checkpoints 2 checkpoint-time 2.500 ms",
            "heat2d: final checksum 0123456789abcdef",
            "something else",
        ] {
            parse_line(l, &mut o);
        }
        assert_eq!(o.restarted_from, Some((300, 300)));
        assert_eq!(o.checkpoints, vec![(400, 1.25), (500, 0.75)]);
        assert_eq!(o.summary, Some((1000, 2, 2.5)));
        assert_eq!(o.checksum.as_deref(), Some("0123456789abcdef"));
        assert_eq!(o.ckpt_ms(), 2.5);
    }

    #[test]
    fn our_own_process_is_found_in_proc() {
        let me = std::process::id();
        let procs = process_parents();
        let parent = procs.get(&me).map(|(p, _)| *p).unwrap();
        // We are below our parent; a search from it finds us by our own name.
        let exe = std::env::current_exe().unwrap();
        let found = rank_processes(parent, &exe);
        assert!(found.iter().any(|(p, _)| *p == me), "{found:?}");
    }
}
