//! `cairn launch`, `checkpoint`, `status`, `restart` and `rsh` (an rsh agent for `mpirun`),
//! and the hidden `coord-node` (a node's sub-coordinator, started by launch and restart) and
//! `slot` (what a slot of a `--rsh` job runs until it is given a command): front ends of
//! `cairn_launch`,
//! where the coordinator, the protocol, the on-disk formats and the images' way through the
//! engine live (`docs/coordinator.md`).

use crate::GlobalOpts;
use cairn_core::model::{format_duration, parse_duration};
use cairn_launch::launch::{self as job, Overrides, Settings};
use cairn_launch::proto::Msg;
use cairn_launch::{jobdir, Affinity, Client, CpuList, ErrorKind, Helper, Options, RshSlots};
use clap::Args;
use std::ffi::OsString;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `cairn launch` / `restart` could not do their job (GNU `timeout` and `env` use 125 too).
const LAUNCH_FAILED: u8 = 125;
const NOT_EXECUTABLE: u8 = 126;
const NOT_FOUND: u8 = 127;

pub(crate) const LAUNCH_HELP: &str = "\
Runs N copies of an unmodified, dynamically linked program with the checkpoint library
libcairn-ckpt.so preloaded (found beside the cairn binary, in ../lib, or named by
CAIRN_CKPT_PRELOAD), under a root coordinator (in this process, which stays in the
foreground) and one sub-coordinator per node, which starts the node's processes. The nodes
are simulated on this host, or with --hosts one per host, each sub-coordinator started
there by --agent (`AGENT HOST cairn coord-node ...`). Process i runs on node i*K/N.
Checkpoints are taken every --interval, on `cairn checkpoint`, or when a process asks (the
checkpoint signal). The processes write their images beside their node's data on the
node-local tier (<local>/node<k>/.launch/<job>/; <dir>/<job>/stage/ with the mem or no
node-local tier); Cairn's engine then stores them as checkpoint <job>, version N, one part
per process, taking each file over where it lies when it can, with the
configuration of --config / CAIRN_CONFIG and CAIRN_* variables (node-local tier, redundancy
across the simulated nodes, flush to the global tier, compression, incremental), and
<dir>/<job>/v<N>/manifest.json makes the version complete. `cairn list` and `cairn inspect`
show the engine's checkpoints. `cairn restart` brings the job back from the newest complete
one. SIGINT and SIGTERM sent to cairn are forwarded to the processes.

With --rsh (and --hosts, -n 1) the program, typically mpirun, runs as process 0 on the first
host, and every other host runs one more process, a slot, that waits for a command. The
processes get `cairn rsh` as Open MPI's rsh agent (OMPI_MCA_plm_rsh_agent, with
OMPI_MCA_plm_rsh_no_tree_spawn=1 and OMPI_MCA_orte_leave_session_attached=1, unless set
already), so the orted mpirun starts on another host runs in that host's slot, as a process of
the job, checkpointed and restarted there. The job ends when the program and the slots that
ran a command have ended; slots never used are then ended and do not count in its exit status.

Exit codes:
  the job's: that of the lowest-numbered process that exited non-zero (128 + the signal
  for one killed by a signal), else 0
  125  cairn itself failed (bad options, no checkpoint library, a coordinator could not
       start, restart found no complete checkpoint)
  126  the command is not executable
  127  the command was not found";

pub(crate) const RESTART_HELP: &str = "\
Restarts the job (--job, else the one in DIR with the newest complete checkpoint) from
VERSION, else from its newest complete version the engine can restore on every process: a
version is complete only with its manifest.json. The engine (configured as for launch: give
the same --config / CAIRN_* settings) rebuilds lost nodes' images from redundancy, checks
every block and falls back to an older version when one is damaged; an image it kept where
its process wrote it is read there, others are copied into the staging's restart/
directory. The same number of processes and nodes as launched (on the same hosts unless
--hosts names others), each started as `cairn-restore IMAGE --coord ADDR --proc I --affinity
on|off [--cpus LIST]`, the token in its environment (found beside the cairn binary, in
../lib, or named by CAIRN_RESTORE),
under a new root coordinator and sub-coordinators; then as launch: foreground, interval,
signals forwarded. Settings not given are the launch's.

Exit codes: as launch's; 125 also when no complete checkpoint exists (the message says
what was found).";

pub(crate) const CHECKPOINT_HELP: &str = "\
Asks the job's root coordinator (found through <dir>/<job>/coord) for a checkpoint of every
process and waits for it. Progress goes to standard error (phases SUSPEND, WRITE, STORE: the
engine takes the images, RESUME); the version, its bytes and what the engine stored for them
to standard output.

Exit codes:
  0  the checkpoint is complete (its manifest is written)
  1  the checkpoint failed: the report names the processes and nodes that failed or did
     not answer, and why; no manifest was written and the processes went on
  2  no running job, or the coordinator could not be reached";

/// Where the job is: the coordinator's directory and the job id.
#[derive(Args, Debug)]
pub(crate) struct JobArgs {
    /// The coordinator's directory: the job's manifests and staged images are in DIR/JOB
    #[arg(long, value_name = "DIR", default_value = "cairn-images")]
    dir: PathBuf,
    /// The job id; default: for launch a new one (printed), otherwise the only or newest job
    /// in DIR
    #[arg(long, value_name = "ID")]
    job: Option<String>,
}

#[derive(Args, Debug)]
pub(crate) struct LaunchArgs {
    #[command(flatten)]
    at: JobArgs,
    /// Number of processes
    #[arg(short = 'n', long = "procs", value_name = "N", default_value_t = 1)]
    procs: usize,
    /// Number of simulated nodes (one sub-coordinator each)
    #[arg(long, value_name = "K", default_value_t = 1)]
    sim_nodes: usize,
    /// Checkpoint this long after the previous checkpoint ended (e.g. 10m; 0: never)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    interval: Option<f64>,
    /// Timeout of each checkpoint phase (suspend, write, resume)
    #[arg(long, value_name = "DURATION", default_value = "60", value_parser = parse_duration)]
    timeout: f64,
    /// How many checkpoints the node-local tier keeps (overrides [cache] keep)
    #[arg(long, value_name = "K")]
    keep: Option<usize>,
    /// Restore threads' CPU masks and pages' NUMA nodes on restart
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = ["on", "off"])]
    affinity: String,
    /// Run the processes on these CPUs only (e.g. 0-3,8)
    #[arg(long, value_name = "LIST")]
    cpus: Option<String>,
    /// Run one node on each of these hosts (e.g. n01,n02), its sub-coordinator started by
    /// --agent; without it every node runs on this host, simulated
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    hosts: Vec<String>,
    /// How a node's sub-coordinator is started on its host: AGENT HOST cairn coord-node ...
    #[arg(long, value_name = "COMMAND", default_value = "ssh")]
    agent: String,
    /// The address the coordinators listen on (with --hosts, one the hosts reach)
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1")]
    bind: IpAddr,
    /// Run the program once, on the first host, and a slot on every other host, where
    /// `cairn rsh HOST CMD` (the job's rsh agent for mpirun) runs CMD (needs --hosts)
    #[arg(long)]
    rsh: bool,
    /// The program and its arguments, after --
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

#[derive(Args, Debug)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    at: JobArgs,
    /// Print JSON: {"job": {...}, "procs": [...], "nodes": [...], "last": {...}}
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
pub(crate) struct RestartArgs {
    #[command(flatten)]
    at: JobArgs,
    /// The version to restart from; default: the newest complete one
    version: Option<u64>,
    /// Map the saved CPU masks onto these CPUs (e.g. 0-3)
    #[arg(long, value_name = "LIST")]
    cpus: Option<String>,
    /// Restore CPU masks and NUMA placement; default: as launched
    #[arg(long, value_name = "on|off", value_parser = ["on", "off"])]
    affinity: Option<String>,
    /// Checkpoint interval from now on (0: none); default: as launched
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    interval: Option<f64>,
    /// Timeout of each checkpoint phase; default: as launched
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    timeout: Option<f64>,
    /// How many checkpoints the node-local tier keeps; default: as launched
    #[arg(long, value_name = "K")]
    keep: Option<usize>,
    /// Run one node on each of these hosts (e.g. n01,n02), its sub-coordinator started by
    /// --agent; default: as launched
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    hosts: Vec<String>,
    /// How a node's sub-coordinator is started on its host; default: as launched
    #[arg(long, value_name = "COMMAND")]
    agent: Option<String>,
    /// The address the coordinators listen on (with hosts, one they reach)
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1")]
    bind: IpAddr,
}

#[derive(Args, Debug)]
pub(crate) struct CoordNodeArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

pub(crate) const RSH_HELP: &str = "\
Runs CMD on HOST, a host of the Cairn job this runs in (launched with --rsh), in the slot
there: the slot's process replaces itself by `/bin/sh -c CMD` and stays a process of the job,
checkpointed and restarted on that host. For use as an ssh replacement by a program of the
job (Open MPI's mpirun gets it as its rsh agent): the ssh options -x, -T, -n are ignored, and
-l USER, -p PORT, -o OPTION, -i FILE skipped with their values; USER@HOST is HOST; CMD's words
are joined by spaces, as ssh does, for the shell to split. HOST is a name of --hosts, a
node's address, or the host name its processes report. It returns as soon as the slot has the
command; no standard input or output is passed.

Exit codes:
  0    the command was handed to the slot
  255  it was not: not run inside a Cairn job (CAIRN_COORD_ADDR, CAIRN_COORD_TOKEN, CAIRN_JOB
       unset), HOST is not a host of the job, HOST has no free slot, the command does not fit
       the coordinator protocol's 4096-byte line (the message says which)";

/// `cairn rsh`'s arguments, as ssh takes them: parsed by [`rsh_args`], not by clap.
#[derive(Args, Debug)]
pub(crate) struct RshArgs {
    /// [ssh options] HOST CMD...
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    args: Vec<String>,
}

/// The host and command of `cairn rsh`'s arguments: ssh options skipped (`-x`, `-T`, `-n`;
/// `-l`, `-p`, `-o`, `-i` with their values, given apart or joined), `USER@` dropped, the
/// command's words joined by spaces.
fn rsh_args(args: &[String]) -> Result<(String, String), String> {
    const IGNORED: [&str; 3] = ["-x", "-T", "-n"];
    const WITH_VALUE: [&str; 4] = ["-l", "-p", "-o", "-i"];
    let mut it = args.iter();
    let host = loop {
        let Some(a) = it.next() else {
            return Err("no host: cairn rsh [ssh options] HOST CMD...".into());
        };
        match a.as_str() {
            "--" => break it.next().ok_or("no host after --")?,
            o if IGNORED.contains(&o) => {}
            o if WITH_VALUE.contains(&o) => {
                it.next()
                    .ok_or_else(|| format!("ssh option {o} needs a value"))?;
            }
            o if WITH_VALUE.iter().any(|w| o.starts_with(w)) => {}
            o if o.starts_with('-') => {
                return Err(format!(
                    "ssh option {o} is not one cairn rsh takes (it ignores -x -T -n and skips \
                     -l -p -o -i with their values)"
                ))
            }
            _ => break a,
        }
    };
    let host = host.rsplit_once('@').map_or(host.as_str(), |(_, h)| h);
    let cmd: Vec<&str> = it.map(String::as_str).collect();
    if host.is_empty() {
        return Err("an empty host name".into());
    }
    if cmd.is_empty() {
        return Err(format!(
            "no command for {host}: cairn rsh runs a command in a slot, it opens no login shell"
        ));
    }
    Ok((host.to_string(), cmd.join(" ")))
}

/// `cairn rsh`: hands a command to a slot of the job it runs in; 0 once the slot has it,
/// 255 (as ssh) otherwise.
pub(crate) fn rsh(a: &RshArgs) -> u8 {
    const FAILED: u8 = 255;
    let (host, cmd) = match rsh_args(&a.args) {
        Ok(hc) => hc,
        Err(e) => {
            eprintln!("cairn rsh: error: {e}");
            return FAILED;
        }
    };
    let env = ["CAIRN_COORD_ADDR", cairn_launch::TOKEN_ENV, "CAIRN_JOB"]
        .map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()));
    let [Some(addr), Some(token), Some(job)] = env else {
        eprintln!(
            "cairn rsh: error: not run inside a Cairn job (CAIRN_COORD_ADDR, CAIRN_COORD_TOKEN \
             and CAIRN_JOB must be set, as they are for the processes of `cairn launch --rsh`): \
             cannot run `{cmd}` on {host}"
        );
        return FAILED;
    };
    match cairn_launch::client::rsh(&addr, &token, &job, &host, &cmd) {
        Ok(_) => 0,
        Err(e) => {
            eprintln!("cairn rsh: error: {e}");
            FAILED
        }
    }
}

/// `cairn slot` (hidden): a slot of a `--rsh` job. It only waits: the checkpoint library in
/// it replaces it by the command its node sends (`RUN`). Refuses to run anywhere else.
pub(crate) fn slot() -> u8 {
    if std::env::var_os(job::SLOT_ENV).map_or(true, |v| v != "1") {
        eprintln!(
            "cairn slot: error: this is a slot of a job launched with `cairn launch --rsh`, \
             started by it ({}=1); it does nothing on its own",
            job::SLOT_ENV
        );
        return 2;
    }
    loop {
        std::thread::park();
    }
}

fn fail(code: u8, e: impl std::fmt::Display) -> u8 {
    eprintln!("cairn: error: {e}");
    code
}

fn absolute(dir: &Path) -> std::io::Result<PathBuf> {
    std::path::absolute(dir)
}

/// How `cairn` starts a sub-coordinator: itself, `coord-node`.
fn subcoord() -> std::io::Result<Helper> {
    Ok(Helper {
        program: std::env::current_exe()?,
        args: vec!["coord-node".into()],
    })
}

/// The slots of a `--rsh` job: they run `cairn slot`, and the job's rsh agent is `cairn rsh`,
/// both this binary.
fn rsh_slots() -> Result<RshSlots, String> {
    let me = std::env::current_exe().map_err(|e| format!("the cairn binary's path: {e}"))?;
    Ok(RshSlots {
        slot: Helper {
            program: me.clone(),
            args: vec!["slot".into()],
        },
        agent: vec![me.into_os_string(), "rsh".into()],
    })
}

/// `--agent`: a command and its arguments, split at white space.
fn agent(s: &str) -> Result<Vec<OsString>, String> {
    let words: Vec<OsString> = s.split_whitespace().map(OsString::from).collect();
    if words.is_empty() {
        return Err("--agent needs a command (e.g. ssh)".into());
    }
    Ok(words)
}

fn affinity(s: &str) -> Affinity {
    Affinity::parse(s).expect("clap checked on|off")
}

fn duration(secs: f64) -> Duration {
    Duration::from_secs_f64(secs)
}

/// The engine's configuration: --config (else CAIRN_CONFIG), CAIRN_* variables, then
/// --local and --global.
fn engine_config(g: &GlobalOpts) -> Result<cairn_core::Config, String> {
    let text = |p: &Path, opt: &str| {
        p.to_str()
            .map(str::to_string)
            .ok_or_else(|| format!("{opt} {} is not UTF-8", p.display()))
    };
    let mut overrides = Vec::new();
    if let Some(l) = &g.local {
        overrides.push(("tiers.local", text(l, "--local")?));
    }
    if let Some(gl) = &g.global {
        overrides.push(("tiers.global", text(gl, "--global")?));
    }
    let overrides: Vec<(&str, &str)> = overrides.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let cfg = cairn_launch::images::engine_config(g.config.as_deref(), &overrides)
        .map_err(|e| e.to_string())?;
    if let Some(msg) = cfg.ignored_env_report() {
        eprintln!("cairn: {msg}");
    }
    // The job's manifests are written and read here, outside the engines.
    cairn_core::auth::enable_creating(&cfg).map_err(|e| e.to_string())?;
    Ok(cfg)
}

/// `cairn launch`.
pub(crate) fn launch(g: &GlobalOpts, a: &LaunchArgs) -> u8 {
    cairn_launch::init_logging();
    match job::resolve_command(&a.command[0]) {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => return fail(NOT_FOUND, e),
        Err(e) => return fail(NOT_EXECUTABLE, e),
    }
    let run = || -> Result<job::JobExit, String> {
        let lib = job::preload_library().ok_or_else(|| {
            format!(
                "the checkpoint library {} was not found beside {} or in ../lib: build it \
                 (cargo build puts it in target/<profile>/) or name it with {}",
                job::PRELOAD_NAME,
                std::env::current_exe()
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|_| "the cairn binary".into()),
                job::PRELOAD_ENV
            )
        })?;
        let cpus = a
            .cpus
            .as_deref()
            .map(CpuList::parse)
            .transpose()
            .map_err(|e| e.to_string())?;
        let id = match &a.at.job {
            Some(j) => j.clone(),
            None => jobdir::new_job_id().map_err(|e| e.to_string())?,
        };
        jobdir::check_job_id(&id).map_err(|e| e.to_string())?;
        // Still one thread: the engine's shared-memory tier names stores by these.
        cairn_launch::images::prepare_env(&id);
        let engine = engine_config(g)?;
        let keep = a.keep.unwrap_or(engine.keep);
        let o = Options {
            dir: absolute(&a.at.dir).map_err(|e| e.to_string())?,
            job: id,
            bind: a.bind,
            forward_signals: true,
            subcoord: subcoord().map_err(|e| e.to_string())?,
            engine,
            hosts: a.hosts.clone(),
            agent: agent(&a.agent)?,
            rsh: a.rsh.then(rsh_slots).transpose()?,
            init: job::restorer(),
        };
        let nodes = match a.hosts.len() {
            0 => a.sim_nodes,
            k if a.sim_nodes == 1 || a.sim_nodes == k => k,
            k => {
                return Err(format!(
                    "--sim-nodes {} with {k} hosts: each host is one node",
                    a.sim_nodes
                ))
            }
        };
        eprintln!(
            "cairn: job {} (images in {})",
            o.job,
            o.dir.join(&o.job).display()
        );
        let s = Settings {
            interval: a.interval.filter(|&i| i > 0.0).map(duration),
            timeout: duration(a.timeout),
            keep,
            affinity: affinity(&a.affinity),
            cpus,
        };
        // With --rsh the program runs once; the other nodes' processes are slots.
        let procs = match a.rsh {
            true if a.procs != 1 => {
                return Err(format!(
                    "--rsh runs the program once (-n 1, not -n {}): its processes on other \
                     hosts are started through the slots, by mpirun",
                    a.procs
                ))
            }
            true => nodes,
            false => a.procs,
        };
        cairn_launch::launch(&o, &s, procs, nodes, &lib, &a.command).map_err(|e| e.to_string())
    };
    match run() {
        Ok(exit) => u8::try_from(exit.code).unwrap_or(255),
        Err(e) => fail(LAUNCH_FAILED, e),
    }
}

/// `cairn restart`.
pub(crate) fn restart(g: &GlobalOpts, a: &RestartArgs) -> u8 {
    cairn_launch::init_logging();
    let run = || -> Result<job::JobExit, String> {
        let dir = absolute(&a.at.dir).map_err(|e| e.to_string())?;
        let restorer = job::restorer().ok_or_else(|| {
            format!(
                "the restorer {} was not found beside the cairn binary or in ../lib: build it \
                 or name it with {}",
                job::RESTORER_NAME,
                job::RESTORER_ENV
            )
        })?;
        let id = job::restart_job(&dir, a.at.job.as_deref()).map_err(|e| e.to_string())?;
        // Still one thread: the engine's shared-memory tier names stores by these.
        cairn_launch::images::prepare_env(&id);
        let engine = engine_config(g)?;
        let ov = Overrides {
            interval: a.interval.map(duration),
            timeout: a.timeout.map(duration),
            keep: a.keep,
            affinity: a.affinity.as_deref().map(affinity),
            cpus: a
                .cpus
                .as_deref()
                .map(CpuList::parse)
                .transpose()
                .map_err(|e| e.to_string())?,
        };
        let o = Options {
            dir,
            job: id,
            bind: a.bind,
            forward_signals: true,
            subcoord: subcoord().map_err(|e| e.to_string())?,
            engine,
            hosts: a.hosts.clone(),
            agent: a
                .agent
                .as_deref()
                .map(agent)
                .transpose()?
                .unwrap_or_default(),
            // The manifest says whether the job has slots; they come back from their images.
            rsh: None,
            init: job::restorer(),
        };
        eprintln!("cairn: restarting job {}", o.job);
        cairn_launch::restart(&o, a.version, &ov, &restorer).map_err(|e| e.to_string())
    };
    match run() {
        Ok(exit) => u8::try_from(exit.code).unwrap_or(255),
        Err(e) => fail(LAUNCH_FAILED, e),
    }
}

fn client(g: &GlobalOpts, at: &JobArgs, what: &str) -> Result<Client, String> {
    crate::no_tier_options(g, what).map_err(|e| e.to_string())?;
    let dir = absolute(&at.dir).map_err(|e| e.to_string())?;
    let (_, job_dir) =
        jobdir::find_running_job(&dir, at.job.as_deref()).map_err(|e| e.to_string())?;
    Client::new(&job_dir).map_err(|e| e.to_string())
}

/// `cairn checkpoint`.
pub(crate) fn checkpoint(g: &GlobalOpts, at: &JobArgs) -> u8 {
    let c = match client(g, at, "checkpoint") {
        Ok(c) => c,
        Err(e) => return fail(2, e),
    };
    let progress = |m: &Msg| {
        eprintln!(
            "cairn: checkpoint {}: {} ({} s)",
            m.get("ckpt").unwrap_or("?"),
            m.get("phase").unwrap_or("?"),
            m.get("secs").unwrap_or("?")
        )
    };
    match c.checkpoint(progress) {
        Ok(d) => {
            println!(
                "checkpoint {} of job {} complete: {} bytes of images ({} stored) in {:.2} s, {}",
                d.version,
                c.job(),
                d.bytes,
                d.stored,
                d.secs,
                d.dir
            );
            0
        }
        Err(e) if e.kind() == ErrorKind::CheckpointFailed => fail(1, e),
        Err(e) => fail(2, e),
    }
}

/// `cairn status`.
pub(crate) fn status(g: &GlobalOpts, a: &StatusArgs) -> u8 {
    let s = match client(g, &a.at, "status").and_then(|c| c.status().map_err(|e| e.to_string())) {
        Ok(s) => s,
        Err(e) => return fail(2, e),
    };
    if a.json {
        let obj = |m: &Msg| {
            serde_json::Value::Object(
                m.fields
                    .iter()
                    .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                    .collect(),
            )
        };
        let v = serde_json::json!({
            "job": obj(&s.job),
            "procs": s.procs.iter().map(obj).collect::<Vec<_>>(),
            "nodes": s.nodes.iter().map(obj).collect::<Vec<_>>(),
            "last": obj(&s.last),
        });
        println!("{}", serde_json::to_string_pretty(&v).expect("JSON"));
        return 0;
    }
    print!("{}", render_status(&s));
    0
}

fn render_status(s: &cairn_launch::Status) -> String {
    let f = |m: &Msg, k: &str| m.get(k).unwrap_or("-").to_string();
    let mut out = format!(
        "job {}: {} processes on {} nodes, {}\n",
        f(&s.job, "job"),
        f(&s.job, "procs"),
        f(&s.job, "nodes"),
        f(&s.job, "state").replace("checkpointing:", "checkpointing, phase ")
    );
    match s.last.num::<u64>("when") {
        Ok(when) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(when);
            out.push_str(&format!(
                "last checkpoint: {}, {} ago, in {}\n",
                f(&s.last, "ckpt"),
                format_duration(now.saturating_sub(when) as f64),
                f(&s.last, "dir")
            ));
        }
        Err(_) => out.push_str("last checkpoint: none yet\n"),
    }
    let mut rows = vec![["proc", "node", "pid", "host", "state"]
        .map(String::from)
        .to_vec()];
    for p in &s.procs {
        let mut state = f(p, "state");
        if let Some(st) = p.get("status") {
            state.push_str(&format!(" ({st})"));
        }
        if p.get("restarted") == Some("1") {
            state.push_str(", restarted");
        }
        rows.push(vec![
            f(p, "proc"),
            f(p, "node"),
            f(p, "pid"),
            f(p, "host"),
            state,
        ]);
    }
    out.push_str(&crate::show::table(&rows));
    let mut rows = vec![[
        "node",
        "procs",
        "running",
        "sub-coordinator",
        "pid",
        "state",
    ]
    .map(String::from)
    .to_vec()];
    for n in &s.nodes {
        rows.push(
            ["node", "procs", "running", "subcoord", "pid", "state"]
                .iter()
                .map(|k| f(n, k))
                .collect(),
        );
    }
    out.push_str(&crate::show::table(&rows));
    out
}

/// `cairn coord-node` (hidden): a node's sub-coordinator.
pub(crate) fn coord_node(a: &CoordNodeArgs) -> u8 {
    u8::try_from(cairn_launch::node::main(&a.args)).unwrap_or(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn rsh_takes_arguments_as_ssh_does() {
        let got = rsh_args(&args(&[
            "-x",
            "-T",
            "-l",
            "me",
            "-p22",
            "-o",
            "BatchMode=yes",
            "me@nodeb",
            "orted",
            "-mca",
            "ess",
            "\"env\"",
        ]))
        .unwrap();
        assert_eq!(got, ("nodeb".into(), "orted -mca ess \"env\"".into()));
        assert_eq!(
            rsh_args(&args(&["-n", "--", "-odd", "true"])).unwrap(),
            ("-odd".into(), "true".into())
        );
        let e = rsh_args(&args(&["nodeb"])).unwrap_err();
        assert!(e.contains("no command for nodeb"), "{e}");
        let e = rsh_args(&args(&["-A", "nodeb", "true"])).unwrap_err();
        assert!(e.contains("ssh option -A"), "{e}");
        assert!(rsh_args(&args(&["-l"]))
            .unwrap_err()
            .contains("needs a value"));
        assert!(rsh_args(&[]).unwrap_err().contains("no host"));
    }
}
