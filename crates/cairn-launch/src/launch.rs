//! Starting a job: the job directory and its coordinator file, the root, one sub-coordinator
//! process per node, the engine job that stores the images across them ([`Engines`]), then
//! the processes
//! (the program with the checkpoint library preloaded, or for a restart the restorer, on the
//! images the engine restored), and waiting for them all.
//!
//! What the checkpoint library and the restorer get from here (besides the protocol) is
//! listed in `docs/coordinator.md`: the variables [`JOB_ENV`] and the restorer's arguments.

use crate::engines::Engines;
use crate::error::{bail, Error, ErrorKind, Result};
use crate::images::{RestoreError, RestoredImage};
use crate::jobdir::{self, CoordInfo, Token};
use crate::manifest::{self, Affinity, LaunchRecord, Manifest, SlotUse};
use crate::node::NodeArgs;
use crate::root::{Begun, LastCheckpoint, Root, RootConfig};
use crate::spawn::ProcStart;
use crate::stage::Staging;
use crate::{net, node_of, sys, TOKEN_ENV};
use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use crate::spawn::{
    JOB_ENV, MOVED_ENV, PRELOAD_ENV, PRELOAD_NAME, RESTORER_ENV, RESTORER_NAME, SLOT_ENV,
};

/// The longest value of [`MOVED_ENV`] the restorer takes (`CAIRN_MOVED_MAX` in image.h,
/// less its terminating zero).
const MOVED_MAX: usize = 131071;

/// The IP address of a socket address `ip:port` or `[ip]:port`.
fn host_ip(addr: &str) -> String {
    match addr.parse::<std::net::SocketAddr>() {
        Ok(a) => a.ip().to_string(),
        Err(_) => addr.to_string(),
    }
}

/// The pairs `OLD=NEW` joined by `;` of the nodes whose address changed from `was` (a
/// checkpoint's, empty for a launch) to `now`.
fn moved_pairs(was: &[String], now: &[String]) -> Result<String> {
    let pairs: Vec<String> = (was.iter().zip(now))
        .filter(|(w, n)| w != n)
        .map(|(w, n)| format!("{w}={n}"))
        .collect();
    let text = pairs.join(";");
    if text.len() > MOVED_MAX {
        bail!(
            Usage,
            "{} hosts changed address, more than a restart can tell its processes ({} bytes              of pairs, at most {MOVED_MAX})",
            pairs.len(),
            text.len()
        );
    }
    if !pairs.is_empty() {
        tracing::info!("host addresses translated for the processes: {text}");
    }
    Ok(text)
}

/// What the processes of a job launched with `--rsh` get, unless the launcher's environment
/// already sets it: Open MPI's rsh agent (the words of [`RshSlots::agent`]), one daemon
/// started by `mpirun` itself per host (no tree of daemons starting daemons), and daemons
/// that stay the processes the agent started: without `orte_leave_session_attached`,
/// `mpirun` asks every daemon it starts without a tree to daemonize, and the process in the
/// slot would exit, leaving its daemon outside it. `CAIRN_RSH` is the same agent for
/// `cairn-prun`, Cairn's PMIx launcher, which starts its daemons on the other hosts with it.
const RSH_ENV: [&str; 4] = [
    "OMPI_MCA_plm_rsh_agent",
    "OMPI_MCA_plm_rsh_no_tree_spawn",
    "OMPI_MCA_orte_leave_session_attached",
    "CAIRN_RSH",
];

/// The longest image path the checkpoint library takes, NUL included (`CAIRN_IMG_PATH_MAX`
/// in `native/ckpt/image.h`, checked against it by cairn-ckpt's tests); WRITE must never
/// send a longer one.
pub const IMAGE_PATH_MAX: usize = cairn_ckpt::IMAGE_PATH_MAX;

/// How long the sub-coordinators have to register with the root.
const NODES_LIMIT: Duration = Duration::from_secs(40);
/// How long sub-coordinators get to exit once the root closed their links.
const SUBS_EXIT: Duration = Duration::from_secs(5);

/// The checkpoint library to preload: `CAIRN_CKPT_PRELOAD`, else `libcairn-ckpt.so` beside
/// the binary, in `../lib` or one level up (test binaries run from `target/<profile>/deps`),
/// else where the build of `cairn-ckpt` put it.
pub fn preload_library() -> Option<PathBuf> {
    cairn_ckpt::preload_library()
}

/// The restorer: `CAIRN_RESTORE`, else `cairn-restore`, found as the library is.
pub fn restorer() -> Option<PathBuf> {
    cairn_ckpt::restorer()
}

/// Whether `s` is a plain file name: no directory part, not `.` or `..`.
pub fn is_plain_name(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && !s.contains('/') && !s.contains('\0')
}

/// The program `cmd` names, as exec would find it: a path if it has a slash, else the first
/// executable file of that name in `PATH`. The error says which: not found, or not
/// executable (kind [`ErrorKind::NotFound`] or [`ErrorKind::Usage`]).
pub fn resolve_command(cmd: &OsStr) -> Result<PathBuf> {
    let executable = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    let p = Path::new(cmd);
    if cmd.as_encoded_bytes().contains(&b'/') {
        if !p.exists() {
            bail!(NotFound, "{}: no such file", p.display());
        }
        if !executable(p) {
            bail!(Usage, "{}: not an executable file", p.display());
        }
        return Ok(p.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(p))
        .find(|c| executable(c))
        .ok_or_else(|| {
            Error::new(
                ErrorKind::NotFound,
                format!("{}: command not found", p.display()),
            )
        })
}

/// A CPU list such as `0-3,8,10-11`: sorted, without repeats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuList(Vec<usize>);

impl CpuList {
    pub fn parse(s: &str) -> Result<CpuList> {
        let bad = || Error::new(ErrorKind::Usage, format!("bad CPU list {s:?} (e.g. 0-3,8)"));
        let mut v = Vec::new();
        for part in s.trim().split(',') {
            let (a, b) = match part.split_once('-') {
                Some((a, b)) => (a, b),
                None => (part, part),
            };
            let a: usize = a.trim().parse().map_err(|_| bad())?;
            let b: usize = b.trim().parse().map_err(|_| bad())?;
            if a > b || b >= 1 << 16 {
                return Err(bad());
            }
            v.extend(a..=b);
        }
        v.sort_unstable();
        v.dedup();
        Ok(CpuList(v))
    }

    /// The CPUs this process may run on (`Cpus_allowed_list` of `/proc/self/status`).
    pub fn allowed() -> Result<CpuList> {
        let status = std::fs::read_to_string("/proc/self/status")
            .map_err(|e| Error::io("read /proc/self/status", e))?;
        let list = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .ok_or_else(|| {
                Error::new(ErrorKind::Io, "no Cpus_allowed_list in /proc/self/status")
            })?;
        CpuList::parse(list)
    }

    /// Refuses CPUs this process may not use: the processes could not run there.
    pub fn check_allowed(&self) -> Result<()> {
        let allowed = CpuList::allowed()?;
        let outside: Vec<usize> = self
            .0
            .iter()
            .copied()
            .filter(|c| !allowed.0.contains(c))
            .collect();
        if !outside.is_empty() {
            bail!(
                Usage,
                "--cpus {self}: CPUs {} are not available here (allowed: {allowed})",
                CpuList(outside)
            );
        }
        Ok(())
    }

    pub fn cpus(&self) -> &[usize] {
        &self.0
    }
}

impl fmt::Display for CpuList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::hub::ranges(self.0.iter().copied()))
    }
}

/// How to start a sub-coordinator: `program args... <NodeArgs>` (for `cairn`, the binary
/// itself and `coord-node`).
#[derive(Debug, Clone)]
pub struct Helper {
    pub program: PathBuf,
    pub args: Vec<OsString>,
}

/// What a job is started with, launch or restart.
#[derive(Debug, Clone)]
pub struct Options {
    /// The coordinator's root (`--dir`); the job's directory is `<dir>/<job>`, with the
    /// manifests and the staging directory of the images.
    pub dir: PathBuf,
    pub job: String,
    /// The address the coordinators listen on.
    pub bind: IpAddr,
    /// Forward SIGINT and SIGTERM sent to this process to the job's processes (`cairn
    /// launch` does; tests that run a job inside the test process do not).
    pub forward_signals: bool,
    pub subcoord: Helper,
    /// The engine's configuration ([`crate::images::engine_config`]): tiers, redundancy, flush,
    /// compression. `[topology] sim_nodes` is set to the job's node count and `[cache] keep`
    /// to [`Settings::keep`].
    pub engine: cairn_core::Config,
    /// The hosts of the nodes, by node: each node's sub-coordinator is started there as
    /// `agent... HOST cairn coord-node ...` (`ssh HOST ...`). Empty: the nodes are
    /// simulated, each sub-coordinator a child of the launcher on its host.
    pub hosts: Vec<String>,
    pub agent: Vec<OsString>,
    /// Slots for an rsh agent (`--rsh`): at launch, process 0 runs the program and every other
    /// node a slot ([`RshSlots`]). A restart restores the slots from their images as it does
    /// every process (the manifest says which processes are slots), so it does not look at
    /// this.
    pub rsh: Option<RshSlots>,
    /// What each launched process starts under: `cairn-restore --init` makes a pid namespace
    /// per process tree (so a restart gives every process its ids back) and runs the
    /// program as its first process. `None` starts the program directly (the tests of the
    /// coordinators, with fake processes).
    pub init: Option<PathBuf>,
}

/// The slots of a job launched with `--rsh`: every node but the first runs, instead of a copy
/// of the program, one process that waits for a command (`cairn slot`), and the job's
/// processes get an rsh agent (`cairn rsh`) that runs a command on a host of the job in the
/// slot there, as a process of the job. This is how `mpirun` starts its daemon on each other
/// host under checkpoint control.
#[derive(Debug, Clone)]
pub struct RshSlots {
    /// What a slot runs until it is given a command: `cairn slot`.
    pub slot: Helper,
    /// The agent the job's processes get in `OMPI_MCA_plm_rsh_agent`: `cairn rsh`, the
    /// program by its absolute path.
    pub agent: Vec<OsString>,
}

/// The settings of a job that a restart may change.
#[derive(Debug, Clone)]
pub struct Settings {
    pub interval: Option<Duration>,
    pub timeout: Duration,
    /// The engine's `[cache] keep`: versions kept on the node-local tier.
    pub keep: usize,
    pub affinity: Affinity,
    pub cpus: Option<CpuList>,
}

/// What a restart changes from the manifest's settings (`None`: keep it). An interval of
/// zero turns the interval off.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub interval: Option<Duration>,
    pub timeout: Option<Duration>,
    pub keep: Option<usize>,
    pub affinity: Option<Affinity>,
    pub cpus: Option<CpuList>,
}

/// How a job ended.
#[derive(Debug, Clone)]
pub struct JobExit {
    pub job: String,
    /// The job's exit code: that of the lowest-numbered process that did not exit with 0
    /// (128 + the signal for a process killed by one), else 0.
    pub code: i32,
    /// Each process's status, by index.
    pub statuses: Vec<ExitStatus>,
    /// The slots that never ran a command (`--rsh`): ended when the rest of the job had,
    /// and not part of [`JobExit::code`].
    pub unused_slots: BTreeSet<usize>,
}

pub use crate::spawn::exit_code;

/// Runs `command` as `procs` processes on `nodes` simulated nodes, with `preload` (the
/// checkpoint library) preloaded, under a new root and sub-coordinators; returns when every
/// process has exited.
pub fn launch(
    o: &Options,
    s: &Settings,
    procs: usize,
    nodes: usize,
    preload: &Path,
    command: &[OsString],
) -> Result<JobExit> {
    let Some(program) = command.first() else {
        bail!(Usage, "no command to launch");
    };
    let resolved = resolve_command(program)?;
    let lib = preload
        .to_str()
        .filter(|p| !p.contains([' ', ':']) && preload.is_file())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Usage,
                format!(
                    "the checkpoint library {} is not a file whose path can go into LD_PRELOAD \
                     (no spaces or colons)",
                    preload.display()
                ),
            )
        })?;
    let mut ld_preload = OsString::from(lib);
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        ld_preload.push(":");
        ld_preload.push(old);
    }
    let job_dir = o.dir.join(&o.job);
    if let Some(v) = manifest::versions(&job_dir)?.first() {
        bail!(
            Usage,
            "job {} already has checkpoints in {} (v{} and maybe more): restart it with `cairn \
             restart --job {}`, or choose another --job",
            o.job,
            job_dir.display(),
            v.version,
            o.job
        );
    }
    let record = LaunchRecord {
        command: command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        cwd: std::env::current_dir()
            .map(|d| d.to_string_lossy().into_owned())
            .unwrap_or_default(),
        env: manifest::recorded_env(),
        affinity: s.affinity,
        cpus: s.cpus.as_ref().map(|c| c.to_string()),
        interval_secs: s.interval.map(|i| i.as_secs_f64()),
        timeout_secs: s.timeout.as_secs_f64(),
        keep: s.keep,
        restarts: 0,
        hosts: o.hosts.clone(),
        agent: recorded_agent(o),
        addrs: Vec::new(),
        rsh: o.rsh.is_some(),
    };
    let slots = rsh_slots(o.rsh.is_some(), procs);
    let rsh_env = match &o.rsh {
        Some(r) => {
            check_rsh(o, procs, nodes)?;
            rsh_env(r)?
        }
        None => Vec::new(),
    };
    // A slot runs `cairn slot` (its own program and arguments) rather than the command.
    let slot_command: Option<(PathBuf, Vec<OsString>)> = o.rsh.as_ref().map(|r| {
        let mut argv = vec![r.slot.program.clone().into_os_string()];
        argv.extend(r.slot.args.iter().cloned());
        (r.slot.program.clone(), argv)
    });
    let init = o.init.clone();
    let stride = pid_stride(procs);
    let slot_set: BTreeSet<usize> = slots.iter().copied().collect();
    let spawn = move |i: usize, _addr: &str| {
        let is_slot = slot_set.contains(&i);
        let (exe, argv): (&Path, &[OsString]) = match &slot_command {
            Some((p, a)) if is_slot => (p, a),
            _ => (&resolved, command),
        };
        let mut env = rsh_env.clone();
        if is_slot {
            env.push((SLOT_ENV.into(), "1".into()));
        }
        match &init {
            Some(init) => {
                let mut args: Vec<OsString> = vec![
                    "--init".into(),
                    "--first-pid".into(),
                    first_pid(i, stride).to_string().into(),
                    "--exec".into(),
                    exe.into(),
                ];
                args.extend(argv.iter().cloned());
                Argv {
                    program: init.clone().into(),
                    args,
                    preload: Some(ld_preload.clone()),
                    env,
                }
            }
            None => Argv {
                program: exe.into(),
                args: argv[1..].to_vec(),
                preload: Some(ld_preload.clone()),
                env,
            },
        }
    };
    check_job(o, s, procs, nodes)?;
    check_not_running(&job_dir)?;
    let mut start = Some(Start {
        record,
        first_version: 1,
        last: None,
        closed: Vec::new(),
        settings: s.clone(),
        spawn: Box::new(spawn),
        used_slots: BTreeSet::new(),
    });
    run(o, s, procs, nodes, &slots, &mut |_, _| {
        Ok(start.take().expect("the job starts once"))
    })
}

/// The slots of a job of `procs` processes (one per node with `--rsh`): every process but
/// the first, which runs the program.
fn rsh_slots(rsh: bool, procs: usize) -> Vec<usize> {
    match rsh {
        true => (1..procs).collect(),
        false => Vec::new(),
    }
}

/// A job with slots (`--rsh`) runs on hosts, one process per host: the program on the first,
/// a slot on each of the others.
fn check_rsh(o: &Options, procs: usize, nodes: usize) -> Result<()> {
    if o.hosts.is_empty() {
        bail!(
            Usage,
            "--rsh needs --hosts: the commands an rsh agent runs go to the slots on the \
             job's hosts"
        );
    }
    if procs != nodes {
        bail!(
            Usage,
            "--rsh runs one process on each host (the program on the first, a slot on each \
             other), not {procs} processes on {nodes} hosts"
        );
    }
    Ok(())
}

/// The variables of [`RSH_ENV`] the launcher's environment does not set already. The agent
/// must be words without spaces or colons: Open MPI splits `plm_rsh_agent` at both.
fn rsh_env(r: &RshSlots) -> Result<Vec<(OsString, OsString)>> {
    let words: Vec<&str> = r.agent.iter().filter_map(|w| w.to_str()).collect();
    if words.len() != r.agent.len() || words.iter().any(|w| w.contains([' ', ':'])) {
        bail!(
            Usage,
            "the rsh agent {:?} cannot go into OMPI_MCA_plm_rsh_agent: its words must be UTF-8 \
             without spaces or colons (move the cairn binary to such a path)",
            r.agent
        );
    }
    let values = [
        words.join(" "),
        "1".to_string(),
        "1".to_string(),
        words.join(" "),
    ];
    Ok(RSH_ENV
        .iter()
        .zip(values)
        .filter(|(k, _)| std::env::var_os(k).is_none())
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect())
}

/// Where the pids of a job's trees start: process `i`'s tree counts through
/// `FIRST_PID + i * pid_stride(procs)` and the `stride` pids after it, so the job's processes
/// and their children have distinct pids although each tree has a namespace of its own.
const FIRST_PID: u64 = 1000;

/// The pid of launched process `i` in its namespace: in the first half of its tree's range,
/// at an offset taken from the launcher's own pid. Two jobs running at once on one host then
/// start at different pids (no two launchers share a pid), which programs that name files
/// after their pid need: Open MPI names its session directory and its shared-memory files
/// after its launcher's pid, and two jobs whose `mpirun` were both pid 1000 shared them.
fn first_pid(i: usize, stride: u64) -> u64 {
    let offset = u64::from(std::process::id()) % (stride / 2).max(1);
    FIRST_PID + i as u64 * stride + offset
}

/// How many pids each process tree of a job of `procs` processes counts through before it
/// could meet the next one's: the kernel's pid range shared out.
fn pid_stride(procs: usize) -> u64 {
    let max: u64 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(32768);
    (max.saturating_sub(FIRST_PID) / procs.max(1) as u64).clamp(1, 1 << 20)
}

/// The agent as the manifest records it.
fn recorded_agent(o: &Options) -> Vec<String> {
    o.agent
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

/// The job `cairn restart` takes: `job` if given, else the job under `dir` whose newest
/// manifest is the newest (else the newest job directory with any version, so that the
/// refusal can say what it holds).
pub fn restart_job(dir: &Path, job: Option<&str>) -> Result<String> {
    if let Some(j) = job {
        jobdir::check_job_id(j)?;
        return Ok(j.to_string());
    }
    let jobs = jobdir::job_dirs(dir)?;
    let newest = |only_complete: bool| {
        jobs.iter()
            .filter_map(|(name, path)| {
                let t = manifest::versions(path)
                    .ok()?
                    .iter()
                    .filter(|v| !only_complete || v.has_manifest)
                    .filter_map(|v| {
                        let f = if only_complete {
                            v.path.join(manifest::MANIFEST)
                        } else {
                            v.path.clone()
                        };
                        std::fs::metadata(f).ok()?.modified().ok()
                    })
                    .max()?;
                Some((t, name.clone()))
            })
            .max()
            .map(|(_, n)| n)
    };
    newest(true)
        .or_else(|| newest(false))
        .ok_or_else(|| jobdir::no_such_job(dir, &jobs, "has a checkpoint"))
}

/// Restarts job `o.job` from `version` (default: its newest complete version the engine can
/// restore) with `restorer`: the engine restores each process's image into the staging
/// directory, then the same number of processes on the same number of nodes are started,
/// each as `restorer <image> --coord <addr> --token <hex> --proc <i> --affinity on|off
/// [--cpus LIST]`.
pub fn restart(
    o: &Options,
    version: Option<u64>,
    ov: &Overrides,
    restorer: &Path,
) -> Result<JobExit> {
    if !restorer.is_file() {
        bail!(Usage, "the restorer {} is not a file", restorer.display());
    }
    jobdir::check_job_id(&o.job)?;
    let job_dir = o.dir.join(&o.job);
    let cands = manifest::candidates(&job_dir, &o.job, version)?;
    check_not_running(&job_dir)?;
    let (procs, nodes) = (cands[0].procs.len(), cands[0].nodes);
    // The hosts the job ran on, unless others are given.
    let mut o = o.clone();
    if o.hosts.is_empty() {
        o.hosts = cands[0].launch.hosts.clone();
        if o.agent.is_empty() {
            o.agent = cands[0].launch.agent.iter().map(OsString::from).collect();
        }
    }
    let o = &o;
    let settings = |rec: &LaunchRecord| Settings {
        interval: match ov.interval {
            Some(i) if i.is_zero() => None,
            Some(i) => Some(i),
            None => rec.interval_secs.map(Duration::from_secs_f64),
        },
        timeout: ov
            .timeout
            .unwrap_or_else(|| Duration::from_secs_f64(rec.timeout_secs)),
        keep: ov.keep.unwrap_or(rec.keep),
        affinity: ov.affinity.unwrap_or(rec.affinity),
        cpus: ov.cpus.clone(),
    };
    let s = settings(&cands[0].launch);
    check_job(o, &s, procs, nodes)?;
    let restorer = restorer.to_path_buf();
    let slots = rsh_slots(cands[0].launch.rsh, procs);
    run(o, &s, procs, nodes, &slots, &mut |images, staging| {
        let (m, fitted) = restore_images(images, staging, &o.job, &cands)?;
        let (trees, namespaced): (Vec<Vec<RestoredImage>>, Vec<bool>) = fitted.into_iter().unzip();
        let s = settings(&m.launch);
        let rec = &m.launch;
        let record = LaunchRecord {
            affinity: s.affinity,
            cpus: s.cpus.as_ref().map(|c| c.to_string()).or(rec.cpus.clone()),
            interval_secs: s.interval.map(|i| i.as_secs_f64()),
            timeout_secs: s.timeout.as_secs_f64(),
            keep: s.keep,
            restarts: rec.restarts + 1,
            hosts: o.hosts.clone(),
            agent: recorded_agent(o),
            ..rec.clone()
        };
        // The run goes on from m: newer versions are not its past. The engine has removed
        // their data; their manifests go too.
        for v in manifest::versions(&job_dir)?
            .iter()
            .filter(|v| v.version > m.version)
        {
            manifest::remove_version(&job_dir, v.version)?;
        }
        let affinity = s.affinity;
        let cpus = s.cpus.clone();
        let restorer = restorer.clone();
        // The restorer finds the token in the environment (CAIRN_COORD_TOKEN): a token on
        // the command line is readable by every user.
        let spawn = move |i: usize, addr: &str| {
            let mut args: Vec<OsString> = Vec::new();
            if namespaced[i] {
                args.push("--init".into());
            }
            args.push(trees[i][0].path.clone().into());
            for member in &trees[i][1..] {
                args.extend(["--member".into(), member.path.clone().into()]);
            }
            args.extend([
                "--coord".into(),
                addr.into(),
                "--proc".into(),
                i.to_string().into(),
                "--affinity".into(),
                affinity.as_str().into(),
            ]);
            if let Some(cpus) = &cpus {
                args.extend(["--cpus".into(), cpus.to_string().into()]);
            }
            Argv {
                program: restorer.clone().into(),
                args,
                preload: None,
                env: Vec::new(),
            }
        };
        let used_slots = (m.procs.iter())
            .filter(|p| p.slot == Some(SlotUse::Used))
            .map(|p| p.proc)
            .collect();
        Ok(Start {
            record,
            first_version: m.version + 1,
            last: Some(LastCheckpoint {
                version: m.version,
                when: m.created,
            }),
            closed: m.closed.clone(),
            settings: s,
            spawn: Box::new(spawn),
            used_slots,
        })
    })
}

/// Has the engine restore the newest of `cands` (newest first) it can, and returns its
/// manifest and, per process, the images of its tree (its own first): where the processes
/// wrote them (taken over by the tier, or kept in the version's staging directory), or
/// copies in the staging's restart directories. The engine rebuilds what lost
/// nodes held from redundancy and checks every block; a version it cannot restore on every
/// process is passed over, with a warning that says why.
fn restore_images(
    images: &Engines,
    staging: &Staging,
    job: &str,
    cands: &[Manifest],
) -> Result<(Manifest, Vec<crate::engines::FittedTree>)> {
    let engine = images.record();
    let Some(newest) = images.newest()? else {
        let launched = &cands[0].engine;
        bail!(
            NotFound,
            "job {job} has manifests (versions {}) but the engine holds no checkpoint {job} that \
             every process can restore, looking in local {} and global {}; the job was \
             launched with local {} and global {}: restart it with the same configuration \
             (--config, CAIRN_TIERS_*)",
            cands
                .iter()
                .map(|m| m.version.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            engine.local,
            engine.global,
            launched.local,
            launched.global
        );
    };
    // Nothing runs (checked): on the first restore each node clears what its staging holds
    // from a run that ended (its versions' images may be read in place).
    let mut first = true;
    let mut passed = Vec::new();
    for m in cands {
        if m.version > newest {
            passed.push(format!(
                "v{}: the engine cannot restore it on every process",
                m.version
            ));
            continue;
        }
        if m.procs.len() != images.procs() {
            passed.push(format!(
                "v{}: {} processes, not {}",
                m.version,
                m.procs.len(),
                images.procs()
            ));
            continue;
        }
        let nodes: Vec<usize> = m.procs.iter().map(|p| p.node).collect();
        let restoring = images.restore(m.version, staging, &nodes, first);
        first = false;
        let (restored, trees) = match restoring {
            Ok(r) => r,
            Err(RestoreError::NotFound(why)) => {
                passed.push(format!("v{}: {why}", m.version));
                continue;
            }
            Err(RestoreError::Other(e)) => return Err(e),
        };
        // The engine may have fallen back to an older version.
        let m = if restored == m.version {
            m.clone()
        } else {
            passed.push(format!(
                "v{}: damaged (see the engine's messages)",
                m.version
            ));
            match cands.iter().find(|c| c.version == restored) {
                Some(older) => older.clone(),
                None => bail!(
                    NotFound,
                    "job {job}: the engine fell back to version {restored}, whose manifest is \
                     gone; passed over {}",
                    passed.join("; ")
                ),
            }
        };
        // Each node puts its trees' images in order, cuts the copies to length and checks
        // that they can run on its host.
        let trees = images.fit(m.version, &m.procs, trees)?;
        let kept = trees
            .iter()
            .flat_map(|t| &t.0)
            .filter(|i| i.in_place)
            .count();
        let copied = trees.iter().map(|t| t.0.len()).sum::<usize>() - kept;
        let placed =
            format!("{kept} image(s) read where their processes wrote them, {copied} copied out");
        if passed.is_empty() {
            tracing::info!(
                "job {job}: the engine restored version {} ({} processes, {} bytes; {placed})",
                m.version,
                m.procs.len(),
                m.bytes
            );
        } else {
            tracing::warn!(
                "job {job}: the engine restored version {} ({placed}), passing over {}",
                m.version,
                passed.join("; ")
            );
        }
        return Ok((m, trees));
    }
    bail!(
        NotFound,
        "the engine cannot restore any version of job {job}: {}",
        passed.join("; ")
    )
}

/// The sub-coordinators and the root of a running job; dropping it stops the root, waits for
/// the sub-coordinators (killing those that do not exit) and removes the coordinator file.
struct Tree {
    root: Option<Root>,
    subs: Vec<Child>,
    job_dir: PathBuf,
}

impl Drop for Tree {
    fn drop(&mut self) {
        if let Some(r) = self.root.take() {
            r.stop();
        }
        let deadline = Instant::now() + SUBS_EXIT;
        for (n, s) in self.subs.iter_mut().enumerate() {
            loop {
                match s.try_wait() {
                    Ok(Some(st)) => {
                        if !st.success() {
                            tracing::warn!("the sub-coordinator of node {n} ended with {st}");
                        }
                        break;
                    }
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    _ => {
                        let _ = s.kill();
                        let _ = s.wait();
                        break;
                    }
                }
            }
        }
        let _ = std::fs::remove_file(self.job_dir.join(jobdir::COORD_FILE));
    }
}

/// Forwards SIGINT and SIGTERM sent to this process (by `kill`, a batch system...) to the
/// job's processes, through the root and their sub-coordinators. Signals from the terminal
/// are not forwarded: the terminal already delivered them to the whole foreground process
/// group, the job's processes included (they run in the launcher's group).
struct Forwarder {
    handle: signal_hook::iterator::Handle,
    thread: Option<JoinHandle<()>>,
}

impl Forwarder {
    fn start(signal: impl Fn(i32) + Send + 'static, terminal_too: bool) -> Result<Forwarder> {
        use signal_hook::consts::{SIGINT, SIGTERM};
        use signal_hook::iterator::exfiltrator::WithOrigin;
        use signal_hook::iterator::SignalsInfo;
        use signal_hook::low_level::siginfo::Cause;
        let mut signals = SignalsInfo::<WithOrigin>::new([SIGINT, SIGTERM])
            .map_err(|e| Error::io("install signal handlers", e))?;
        let handle = signals.handle();
        let thread = std::thread::Builder::new()
            .name("cairn-signals".into())
            .spawn(move || {
                for origin in signals.forever() {
                    if matches!(origin.cause, Cause::Kernel) && !terminal_too {
                        continue;
                    }
                    signal(origin.signal);
                }
            })
            .map_err(|e| Error::io("start the signal thread", e))?;
        Ok(Forwarder {
            handle,
            thread: Some(thread),
        })
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.handle.close();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The command line of process `i`, given its node's sub-coordinator address; the
/// launcher adds the environment.
type Spawn<'a> = dyn Fn(usize, &str) -> Argv + 'a;

/// A process's command line, the `LD_PRELOAD` it starts with (none for the restorer, which
/// must not load the library it restores), and variables it gets besides the job's.
struct Argv {
    program: OsString,
    args: Vec<OsString>,
    preload: Option<OsString>,
    env: Vec<(OsString, OsString)>,
}

/// What differs between a launch and a restart once the engine job is up (a restart learns
/// it from the version the engine restored).
struct Start<'a> {
    record: LaunchRecord,
    /// The number of the first checkpoint the root takes.
    first_version: u64,
    /// The checkpoint a restart came from.
    last: Option<LastCheckpoint>,
    /// Its connections to other hosts that come back closed.
    closed: Vec<String>,
    /// The interval, timeout and window the root keeps from then on.
    settings: Settings,
    spawn: Box<Spawn<'a>>,
    /// The slots that had been given a command (a restart's, from its manifest).
    used_slots: BTreeSet<usize>,
}

/// Decides how the job starts, given its engine job, once the sub-coordinators are up.
type Prepare<'a, 'b> = dyn FnMut(&Engines, &Staging) -> Result<Start<'a>> + 'b;

/// Checks a job's shape and settings before anything is started or created.
fn check_job(o: &Options, s: &Settings, procs: usize, nodes: usize) -> Result<()> {
    if procs == 0 || nodes == 0 || nodes > procs {
        bail!(
            Usage,
            "{procs} processes on {nodes} nodes: need 1 <= nodes <= processes"
        );
    }
    if s.keep == 0 || s.timeout.is_zero() {
        bail!(Usage, "--keep and --timeout must be positive");
    }
    if let Some(c) = &s.cpus {
        c.check_allowed()?;
    }
    if !o.hosts.is_empty() {
        if o.hosts.len() != nodes {
            bail!(
                Usage,
                "{} hosts for a job of {nodes} nodes: give one host per node",
                o.hosts.len()
            );
        }
        if o.agent.is_empty() {
            bail!(
                Usage,
                "the job has hosts but no agent to start its nodes with"
            );
        }
        if o.bind.is_loopback() {
            bail!(
                Usage,
                "the nodes run on other hosts ({}), which cannot reach a coordinator bound \
                 to {}: give --bind an address of this host they reach",
                o.hosts.join(", "),
                o.bind
            );
        }
    }
    jobdir::check_job_id(&o.job)?;
    if !o.dir.is_absolute() || o.dir.to_str().is_none() {
        bail!(
            Usage,
            "the images' directory {} must be an absolute UTF-8 path",
            o.dir.display()
        );
    }
    let job_dir = o.dir.join(&o.job);
    let longest = Staging::new(&o.engine, &job_dir, &o.job, nodes).longest_path(procs);
    if longest >= IMAGE_PATH_MAX {
        bail!(
            Usage,
            "the images' paths under {} would be too long for the checkpoint library ({longest} \
             bytes, at most {}): choose a shorter --dir",
            job_dir.display(),
            IMAGE_PATH_MAX - 1
        );
    }
    Ok(())
}

/// Refuses a job whose root coordinator still runs.
fn check_not_running(job_dir: &Path) -> Result<()> {
    if let Ok(info) = CoordInfo::read(job_dir) {
        if info.is_live() {
            bail!(
                Usage,
                "job {} is already running (its root coordinator is pid {} at {})",
                info.job,
                info.pid,
                info.addr
            );
        }
    }
    Ok(())
}

/// Runs a job: the root, one sub-coordinator per node, the engine job spread over them
/// (`crate::engines`), then what `prepare` decides (a restart restores the images there),
/// then the processes; returns when every process has exited. `s` gives the engine's
/// `[cache] keep` and the root's settings until `prepare` says otherwise.
fn run(
    o: &Options,
    s: &Settings,
    procs: usize,
    nodes: usize,
    slots: &[usize],
    prepare: &mut Prepare<'_, '_>,
) -> Result<JobExit> {
    let job_dir = o.dir.join(&o.job);
    jobdir::create_private_dir(&o.dir)?;
    jobdir::create_private_dir(&job_dir)?;
    check_not_running(&job_dir)?;
    let staging = Staging::new(&o.engine, &job_dir, &o.job, nodes);
    let token = Token::random()?;
    let root = Root::start(
        net::listen(o.bind)?,
        RootConfig {
            job: o.job.clone(),
            job_dir: job_dir.clone(),
            token: token.clone(),
            procs,
            nodes,
            timeout: s.timeout,
            interval: s.interval,
            keep: s.keep,
            staging: staging.clone(),
            hosts: o.hosts.clone(),
            slots: slots.to_vec(),
        },
    )?;
    let root_addr = root.addr();
    let mut tree = Tree {
        root: Some(root),
        subs: Vec::new(),
        job_dir: job_dir.clone(),
    };
    CoordInfo {
        job: o.job.clone(),
        addr: root_addr,
        token: token.clone(),
        pid: std::process::id(),
    }
    .write(&job_dir)?;
    // The processes join the launcher's process group, as they would as its children.
    let group = sys::process_group();
    for n in 0..nodes {
        let args = NodeArgs {
            root: root_addr.to_string(),
            node: n,
            nodes,
            procs,
            job: o.job.clone(),
            timeout: s.timeout,
            bind: o.bind,
            // On the launcher's host, its processes join the launcher's process group.
            group: o.hosts.is_empty().then_some(group),
            host: o.hosts.get(n).cloned(),
            job_dir: Some(job_dir.clone()),
        };
        let mut c = match o.hosts.get(n) {
            Some(host) => {
                let mut c = Command::new(&o.agent[0]);
                c.args(&o.agent[1..]).arg(host).arg(&o.subcoord.program);
                c
            }
            None => Command::new(&o.subcoord.program),
        };
        c.args(&o.subcoord.args)
            .args(args.to_args())
            .env(TOKEN_ENV, token.hex())
            // Node 0 runs process 0, which reads the launcher's standard input.
            .stdin(if n == 0 {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            // Its own process group: a Ctrl-C at the terminal is for the program, and the
            // sub-coordinator must outlive it to see the processes out.
            .process_group(0);
        cairn_ckpt::standard_streams_only(&mut c);
        sys::die_with_parent(&mut c);
        let child = c.spawn().map_err(|e| {
            Error::io(
                format_args!("start the sub-coordinator {}", o.subcoord.program.display()),
                e,
            )
        })?;
        tree.subs.push(child);
    }
    let subs = &mut tree.subs;
    let addrs = tree
        .root
        .as_ref()
        .expect("running")
        .wait_nodes(NODES_LIMIT, || {
            for (n, c) in subs.iter_mut().enumerate() {
                if let Ok(Some(st)) = c.try_wait() {
                    bail!(
                        Io,
                        "the sub-coordinator of node {n} exited ({st}) before registering"
                    );
                }
            }
            Ok(())
        })?;
    let links: Vec<String> = addrs.iter().map(|a| a.links.clone()).collect();
    let mut engine_cfg = o.engine.clone();
    engine_cfg.keep = s.keep;
    let images = Arc::new(Engines::start(
        &engine_cfg,
        &o.job,
        procs,
        &links,
        &token,
        &staging,
        !o.hosts.is_empty(),
    )?);
    let mut start = prepare(&images, &staging)?;
    // On hosts, each one's address is recorded; a restart on hosts with other addresses has
    // the processes translate the old ones (their peers' addresses, as the program knew them).
    let moved = if o.hosts.is_empty() {
        String::new()
    } else {
        let now: Vec<String> = addrs.iter().map(|a| host_ip(&a.procs)).collect();
        let moved = moved_pairs(&start.record.addrs, &now)?;
        start.record.addrs = now;
        moved
    };
    let root = tree.root.as_ref().expect("running");
    root.begin(Begun {
        images: images.clone(),
        launch: start.record,
        first_version: start.first_version,
        last: start.last,
        interval: start.settings.interval,
        timeout: start.settings.timeout,
        keep: start.settings.keep,
        closed: start.closed,
        used_slots: start.used_slots.clone(),
    });
    let s = &start.settings;
    let _forwarder = if o.forward_signals {
        // Nodes on other hosts do not share the terminal: its signals go to them too.
        Some(Forwarder::start(root.signaller(), !o.hosts.is_empty())?)
    } else {
        None
    };
    // What a fresh process inherits from the launcher, without the per-run variables.
    let inherited: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| {
            k != "LD_PRELOAD" && k != "CAIRN_CKPT_PID" && !JOB_ENV.iter().any(|j| k == j)
        })
        .collect();
    let cwd = std::env::current_dir().map_err(|e| Error::io("the working directory", e))?;
    let starts: Vec<ProcStart> = (0..procs)
        .map(|i| {
            let node = node_of(i, procs, nodes);
            let addr = &addrs[node].procs;
            let argv = (start.spawn)(i, addr);
            let mut env = inherited.clone();
            if let Some(p) = argv.preload {
                env.push(("LD_PRELOAD".into(), p));
            }
            env.extend(argv.env);
            let mut job_env = vec![
                ("CAIRN_COORD_ADDR", addr.clone()),
                (TOKEN_ENV, token.hex().to_string()),
                ("CAIRN_JOB", o.job.clone()),
                ("CAIRN_PROC", i.to_string()),
                ("CAIRN_NODE", node.to_string()),
                ("CAIRN_CKPT_AFFINITY", s.affinity.as_str().to_string()),
            ];
            if let Some(cpus) = &s.cpus {
                job_env.push(("CAIRN_CKPT_CPUS", cpus.to_string()));
            }
            if !moved.is_empty() {
                job_env.push((MOVED_ENV, moved.clone()));
            }
            env.extend(job_env.into_iter().map(|(k, v)| (k.into(), v.into())));
            ProcStart {
                proc: i,
                program: argv.program,
                args: argv.args,
                env,
                cwd: cwd.clone(),
                cpus: s.cpus.as_ref().map(|c| c.cpus().to_vec()),
                // Like mpirun: the first process reads the terminal, the others nothing.
                stdin: i == 0,
            }
        })
        .collect();
    images.spawn(&starts)?;
    tracing::info!(
        "job {}: {procs} processes on {nodes} nodes, root coordinator at {root_addr}, images in {}",
        o.job,
        job_dir.display()
    );
    let statuses = root.wait_ended();
    let unused_slots = root.unused_slots();
    let code = (statuses.iter().enumerate())
        .filter(|(i, _)| !unused_slots.contains(i))
        .map(|(_, st)| exit_code(st))
        .find(|&c| c != 0)
        .unwrap_or(0);
    // The job has ended: the engine finishes its flushes and makes the newest checkpoint
    // durable on the global tier (as `[checkpoint] finalize` says), on every node while
    // the sub-coordinators still run.
    // Each node then removes the restart's copies (processes that never registered left
    // theirs) and, if every process finished well, the images kept for a restart, which
    // none will read.
    if let Err(e) = images.finalize(code == 0) {
        tracing::warn!("job {}: {e}", o.job);
    }
    drop(tree);
    Ok(JobExit {
        job: o.job.clone(),
        code,
        statuses,
        unused_slots,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        let c = CpuList::parse("3,0-1, 8-9,1").unwrap();
        assert_eq!(c.cpus(), [0, 1, 3, 8, 9]);
        assert_eq!(c.to_string(), "0-1,3,8-9");
        for bad in ["", "a", "3-1", "1,,2", "-1", "99999"] {
            assert!(CpuList::parse(bad).is_err(), "{bad:?}");
        }
        let allowed = CpuList::allowed().unwrap();
        assert!(!allowed.cpus().is_empty());
        allowed.check_allowed().unwrap();
        let e = CpuList::parse("4000").unwrap().check_allowed().unwrap_err();
        assert!(e.message().contains("not available"), "{e}");
    }

    #[test]
    fn commands_resolve_like_exec() {
        assert!(resolve_command(OsStr::new("sh")).unwrap().is_absolute());
        let e = resolve_command(OsStr::new("no-such-command-cairn")).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert_eq!(
            resolve_command(OsStr::new("./no/such")).unwrap_err().kind(),
            ErrorKind::NotFound
        );
        assert_eq!(
            resolve_command(OsStr::new("/etc/passwd"))
                .unwrap_err()
                .kind(),
            ErrorKind::Usage
        );
    }

    #[test]
    fn plain_names() {
        assert!(is_plain_name("proc0.img"));
        for bad in ["", ".", "..", "a/b", "/x"] {
            assert!(!is_plain_name(bad));
        }
    }
}
