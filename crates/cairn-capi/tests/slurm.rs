//! Cairn under a real Slurm: munge, a controller and a node daemon started by this test on
//! this machine, with private state, logs and ports, and a small C program submitted with
//! sbatch and run as a two-rank job step with `srun --mpi=pmix`.
//!
//! - `sbatch --time=2`, with no `SLURM_JOB_END_TIME` set by hand and nothing about time
//!   limits in Cairn's configuration: the program learns the job's end from Slurm, stops
//!   with a tenth of the job's time to spare (not the 60 s default margin), takes a last
//!   checkpoint and ends COMPLETED, and that checkpoint restores outside Slurm.
//! - `sbatch --time=2 --signal=USR1@100`, with `[exit] signals` at its default: the program,
//!   which only asks `cairn_need_checkpoint`, is due a checkpoint when SIGUSR1 comes, stops
//!   early and ends COMPLETED instead of being killed by the signal.
//! - Slurm unable to say: an unknown job, a hung controller (stopped with SIGSTOP), no squeue
//!   on the PATH: rank 0 alone warns once, naming what failed, and the program runs on.
//! - Transparent checkpointing in a batch job: `cairn launch` (its node started by `srun`)
//!   of an unmodified MPI ring whose ranks `cairn-prun` starts, checkpointed, cancelled with
//!   `scancel`, and restarted by a second batch job to its end.
//!
//! Skipped, with a message on standard error, when Slurm (slurmctld, slurmd, sbatch, srun,
//! squeue, scontrol), munge or Open MPI are not installed or cannot start here; `./run test`
//! installs them (Debian: slurmctld slurmd slurm-client munge). The daemons need root.

mod support;

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::*;

/// The program the jobs run. A step is half a second; the counter is `step * (rank + 1)`.
const LOOP_C: &str = r#"/* slurm_loop: a counter protected by Cairn, one step every half second, until Cairn says stop.
 *   slurm_loop               each step cairn_should_exit, then cairn_checkpoint_if_due; when
 *                            told to stop, a last checkpoint, "stopping at step N", exit 0
 *   slurm_loop --due-only    each step cairn_need_checkpoint only; after a checkpoint it was
 *                            due, cairn_should_exit decides whether to stop
 *   slurm_loop --resume-only resume, check the counter, print the step, exit */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cairn_mpi.h"

static int rank;

static void check(int rc, const char *what)
{
    if (rc != CAIRN_OK) {
        fprintf(stderr, "slurm_loop: rank %d: %s failed (%d): %s\n", rank, what, rc,
                cairn_last_error());
        exit(5);
    }
}

static double since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

int main(int argc, char **argv)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const char *mode = argc > 1 ? argv[1] : "";
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    check(cairn_init(MPI_COMM_WORLD, NULL), "cairn_init");
    int64_t step = 0, counter = 0;
    check(cairn_protect(0, &step, 1, CAIRN_INT64), "cairn_protect");
    check(cairn_protect(1, &counter, 1, CAIRN_INT64), "cairn_protect");
    int64_t resumed = -1;
    check(cairn_resume("loop", &resumed), "cairn_resume");
    if (counter != step * (rank + 1)) {
        fprintf(stderr, "slurm_loop: rank %d: counter %" PRId64 " does not match step %" PRId64 "\n",
                rank, counter, step);
        exit(4);
    }
    if (rank == 0) {
        printf("slurm_loop: resumed v%" PRId64 " at step %" PRId64 "\n", resumed, step);
        fflush(stdout);
    }
    if (strcmp(mode, "--resume-only") != 0) {
        const struct timespec half = {0, 500 * 1000 * 1000};
        for (;;) {
            nanosleep(&half, NULL);
            step++;
            counter = step * (rank + 1);
            int stop = 0;
            if (strcmp(mode, "--due-only") == 0) {
                int due = 0;
                check(cairn_need_checkpoint(&due), "cairn_need_checkpoint");
                if (due) {
                    check(cairn_checkpoint("loop", step), "cairn_checkpoint");
                    if (rank == 0)
                        printf("slurm_loop: checkpoint due at step %" PRId64 "\n", step);
                    check(cairn_should_exit(&stop), "cairn_should_exit");
                }
            } else {
                check(cairn_should_exit(&stop), "cairn_should_exit");
                if (stop)
                    check(cairn_checkpoint("loop", step), "cairn_checkpoint");
                else
                    check(cairn_checkpoint_if_due("loop", step), "cairn_checkpoint_if_due");
            }
            if (stop) {
                if (rank == 0)
                    printf("slurm_loop: stopping at step %" PRId64 " after %.1f s\n", step,
                           since(&t0));
                break;
            }
            if (rank == 0 && step % 20 == 0) {
                printf("slurm_loop: step %" PRId64 " at %.1f s\n", step, since(&t0));
                fflush(stdout);
            }
        }
    }
    fflush(stdout);
    check(cairn_finalize(), "cairn_finalize");
    MPI_Finalize();
    return 0;
}
"#;

/// What the jobs may take at most: the 2-minute limit, Slurm's KillWait and start-up slack.
const JOB_TIMEOUT: Duration = Duration::from_secs(200);

// ---- Finding the tools ------------------------------------------------------------------------

/// `name` on the PATH, or in the sbin directories a non-login root shell may lack.
fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

/// Every tool the test needs, by name, or what is missing.
fn tools() -> Result<Vec<(&'static str, PathBuf)>, String> {
    let names = [
        "munged",
        "slurmctld",
        "slurmd",
        "sbatch",
        "srun",
        "squeue",
        "scontrol",
        "scancel",
        "sinfo",
        "mpicc",
        "mpirun",
    ];
    let missing: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| find_tool(n).is_none())
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "{} not installed (Debian: apt-get install slurmctld slurmd slurm-client munge openmpi-bin libopenmpi-dev; `./run test` installs them)",
            missing.join(", ")
        ));
    }
    Ok(names
        .iter()
        .map(|n| (*n, find_tool(n).expect("found above")))
        .collect())
}

/// A loopback TCP port no one listens on now.
fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

/// The last lines of a log file, for messages.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(15);
    format!("--- {} ---\n{}\n", path.display(), lines[from..].join("\n"))
}

/// Remove the variables of any Slurm job or Cairn configuration the test itself runs under,
/// so that only what the test sets reaches the programs.
fn clean_env(cmd: &mut Command) -> &mut Command {
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().to_string();
        if k.starts_with("CAIRN_") || k.starts_with("SLURM_") || k.starts_with("SBATCH_") {
            cmd.env_remove(k);
        }
    }
    cmd
}

// ---- The cluster ------------------------------------------------------------------------------

/// munged, slurmctld and slurmd, children of this test, with everything under `dir`. Dropping
/// it cancels the jobs and stops every process that runs with its configuration.
struct Slurm {
    dir: tempfile::TempDir,
    conf: PathBuf,
    tools: Vec<(&'static str, PathBuf)>,
    daemons: Vec<(&'static str, Child)>,
    jobs: Vec<String>,
}

impl Slurm {
    fn tool(&self, name: &str) -> &Path {
        &self
            .tools
            .iter()
            .find(|(n, _)| *n == name)
            .expect("a known tool")
            .1
    }

    /// A Slurm client command aimed at this cluster.
    fn cmd(&self, name: &str) -> Command {
        let mut c = Command::new(self.tool(name));
        clean_env(&mut c).env("SLURM_CONF", &self.conf);
        c
    }

    /// Run a client command to completion: its standard output, or what went wrong.
    fn query(&self, name: &str, args: &[&str]) -> Result<String, String> {
        let o = self
            .cmd(name)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("{name}: {e}"))?;
        if !o.status.success() {
            return Err(format!(
                "{name} {}: {}{}",
                args.join(" "),
                o.status,
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&o.stdout).to_string())
    }

    fn start_daemon(&mut self, name: &'static str, args: &[&str], env: bool) -> Result<(), String> {
        let out = std::fs::File::create(self.dir.path().join(format!("{name}.out")))
            .map_err(|e| e.to_string())?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let mut c = Command::new(self.tool(name));
        clean_env(&mut c);
        if env {
            c.env("SLURM_CONF", &self.conf);
        }
        let child = c
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot start {name}: {e}"))?;
        self.daemons.push((name, child));
        Ok(())
    }

    /// Whether every daemon still runs; if one exited, what its log says.
    fn daemons_alive(&mut self) -> Result<(), String> {
        for (name, child) in &mut self.daemons {
            if let Ok(Some(st)) = child.try_wait() {
                return Err(format!(
                    "{name} exited ({st})\n{}",
                    tail(&self.dir.path().join(format!("{name}.out")))
                ));
            }
        }
        Ok(())
    }

    fn logs(&self) -> String {
        ["munged.out", "slurmctld.out", "slurmd.out"]
            .iter()
            .map(|f| tail(&self.dir.path().join(f)))
            .collect()
    }

    /// Start munge, the controller and the node daemon; `Err` says why they cannot run here.
    fn start(tools: Vec<(&'static str, PathBuf)>) -> Result<Slurm, String> {
        // SAFETY: geteuid(2) cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Err("slurmd and munged run as root here, and this test does not".into());
        }
        let dir = tempfile::Builder::new()
            .prefix("cairn-slurm-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let d = dir.path().to_path_buf();
        // munged wants every directory above its socket searchable by all.
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| e.to_string())?;
        for sub in ["state", "spool"] {
            std::fs::create_dir(d.join(sub)).map_err(|e| e.to_string())?;
        }
        let mut key = vec![0u8; 1024];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut key))
            .map_err(|e| format!("read /dev/urandom: {e}"))?;
        let key_file = d.join("munge.key");
        std::fs::write(&key_file, &key).map_err(|e| e.to_string())?;
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o400))
            .map_err(|e| e.to_string())?;
        let socket = d.join("munge.socket");
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "localhost".into());
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let (ctld_port, slurmd_port) = (free_port()?, free_port()?);
        let p = |f: &str| d.join(f).display().to_string();
        let conf = d.join("slurm.conf");
        let text = format!(
            "ClusterName=cairntest
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={socket}
CredType=cred/munge
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
StateSaveLocation={state}
SlurmdSpoolDir={spool}
SlurmctldPidFile={ctld_pid}
SlurmdPidFile={slurmd_pid}
SlurmctldLogFile={ctld_log}
SlurmdLogFile={slurmd_log}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
MinJobAge=600
KillWait=5
ReturnToService=2
NodeName=localhost NodeHostname={hostname} CPUs={cpus} State=UNKNOWN
PartitionName=cairn Nodes=localhost Default=YES MaxTime=INFINITE State=UP
",
            socket = socket.display(),
            state = p("state"),
            spool = p("spool"),
            ctld_pid = p("slurmctld.pid"),
            slurmd_pid = p("slurmd.pid"),
            ctld_log = p("slurmctld.log"),
            slurmd_log = p("slurmd.log"),
        );
        std::fs::write(&conf, text).map_err(|e| e.to_string())?;
        let mut s = Slurm {
            dir,
            conf,
            tools,
            daemons: Vec::new(),
            jobs: Vec::new(),
        };
        let arg = |k: &str, f: &str| format!("--{k}={}", d.join(f).display());
        s.start_daemon(
            "munged",
            &[
                "-F",
                &format!("--socket={}", socket.display()),
                &arg("key-file", "munge.key"),
                &arg("pid-file", "munged.pid"),
                &arg("log-file", "munged.log"),
                &arg("seed-file", "munged.seed"),
            ],
            false,
        )?;
        let give_up = Instant::now() + Duration::from_secs(20);
        while !socket.exists() {
            s.daemons_alive()?;
            if Instant::now() > give_up {
                return Err(format!("munged made no socket\n{}", s.logs()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let conf_arg = s.conf.display().to_string();
        s.start_daemon("slurmctld", &["-D", "-i", "-f", &conf_arg], true)?;
        s.start_daemon("slurmd", &["-D", "-N", "localhost", "-f", &conf_arg], true)?;
        let give_up = Instant::now() + Duration::from_secs(60);
        loop {
            s.daemons_alive()?;
            match s.query("sinfo", &["-h", "-n", "localhost", "-o", "%T"]) {
                Ok(state) if state.trim() == "idle" => break,
                _ if Instant::now() > give_up => {
                    return Err(format!("the node did not come up idle\n{}", s.logs()))
                }
                _ => std::thread::sleep(Duration::from_millis(200)),
            }
        }
        let mpis = s.query("srun", &["--mpi=list"]).unwrap_or_default();
        if !mpis.contains("pmix") {
            return Err(format!("srun has no pmix plugin: {mpis}"));
        }
        Ok(s)
    }

    /// Submit `program args` as a two-rank step (`srun --mpi=pmix --overcommit -n 2` in a
    /// one-CPU job, so two jobs fit a two-core node), with `sbatch_args` and the tiers'
    /// variables; returns the job id.
    fn submit(
        &mut self,
        label: &str,
        sbatch_args: &[&str],
        program: &Path,
        args: &[&str],
        tiers: &Tiers,
    ) -> String {
        let script = format!(
            "#!/bin/sh\nexec srun --mpi=pmix --overcommit -n 2 {} {}\n",
            program.display(),
            args.join(" ")
        );
        let mut env = vec![
            (
                "CAIRN_TIERS_LOCAL".to_string(),
                tiers.local().display().to_string(),
            ),
            (
                "CAIRN_TIERS_GLOBAL".to_string(),
                tiers.global().display().to_string(),
            ),
        ];
        env.extend(tiers.extra.iter().cloned());
        self.submit_script(label, sbatch_args, &script, (tiers.path(), &env))
    }

    /// Submit `script` (the batch script's text) as job `label`, run in `dir` with `env`
    /// added; returns the job id.
    fn submit_script(
        &mut self,
        label: &str,
        sbatch_args: &[&str],
        script: &str,
        (dir, env): (&Path, &[(String, String)]),
    ) -> String {
        let path = self.dir.path().join(format!("{label}.sh"));
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut c = self.cmd("sbatch");
        c.args(["--parsable", "-J", label, "-n", "1"])
            .args(sbatch_args)
            .arg(format!("--output={}", self.out(label).display()))
            .arg(format!("--error={}", self.err(label).display()))
            .arg(format!("--chdir={}", dir.display()))
            .arg(&path);
        for (k, v) in env {
            c.env(k, v);
        }
        let o = c.stdin(Stdio::null()).output().expect("run sbatch");
        assert!(
            o.status.success(),
            "sbatch {label}: {}\n{}{}",
            o.status,
            String::from_utf8_lossy(&o.stderr),
            self.logs()
        );
        let id = String::from_utf8_lossy(&o.stdout)
            .trim()
            .split(';')
            .next()
            .unwrap_or_default()
            .to_string();
        assert!(
            !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()),
            "sbatch printed {:?}",
            String::from_utf8_lossy(&o.stdout)
        );
        self.jobs.push(id.clone());
        id
    }

    fn out(&self, label: &str) -> PathBuf {
        self.dir.path().join(format!("{label}.out"))
    }

    fn err(&self, label: &str) -> PathBuf {
        self.dir.path().join(format!("{label}.err"))
    }

    /// `Key=Value` from `scontrol show job -o <id>`.
    fn job_field(&self, id: &str, key: &str) -> Option<String> {
        let text = self.query("scontrol", &["show", "job", "-o", id]).ok()?;
        text.split_whitespace()
            .find_map(|f| f.strip_prefix(&format!("{key}=")).map(str::to_string))
    }

    /// Wait for job `id` to end (MinJobAge keeps it in the controller); its final state and
    /// exit code (`COMPLETED`, `0:0`).
    fn wait_job(&self, id: &str, label: &str) -> (String, String) {
        let give_up = Instant::now() + JOB_TIMEOUT;
        loop {
            let state = self.job_field(id, "JobState").unwrap_or_default();
            if !matches!(
                state.as_str(),
                "" | "PENDING" | "CONFIGURING" | "RUNNING" | "COMPLETING" | "SUSPENDED"
            ) {
                let code = self.job_field(id, "ExitCode").unwrap_or_default();
                return (state, code);
            }
            assert!(
                Instant::now() < give_up,
                "job {id} ({label}) still {state:?} after {JOB_TIMEOUT:?}\n{}",
                self.job_output(label)
            );
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    /// The job's standard output and error, for messages.
    fn job_output(&self, label: &str) -> String {
        format!(
            "--- {label} stdout ---\n{}--- {label} stderr ---\n{}",
            std::fs::read_to_string(self.out(label)).unwrap_or_default(),
            std::fs::read_to_string(self.err(label)).unwrap_or_default()
        )
    }

    /// Processes running with this cluster's configuration (the daemons, slurmstepd, the
    /// jobs' processes), found through /proc.
    fn processes(&self) -> Vec<u32> {
        let want = format!("SLURM_CONF={}", self.conf.display());
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.flatten()
            .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
            .filter(|pid| *pid != std::process::id())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/environ"))
                    .map(|b| b.split(|c| *c == 0).any(|kv| kv == want.as_bytes()))
                    .unwrap_or(false)
            })
            .collect()
    }

    fn daemon_pid(&self, name: &str) -> u32 {
        self.daemons
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, c)| c.id())
            .expect("a started daemon")
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        if !self.jobs.is_empty() {
            let mut args = vec!["--quiet".to_string()];
            args.extend(self.jobs.iter().cloned());
            let _ = self
                .cmd("scancel")
                .args(&args)
                .stdin(Stdio::null())
                .output();
        }
        // Let the cancelled jobs end, then stop whatever of this cluster is left, daemons last.
        let daemons: Vec<u32> = self.daemons.iter().map(|(_, c)| c.id()).collect();
        let give_up = Instant::now() + Duration::from_secs(15);
        loop {
            let left: Vec<u32> = self
                .processes()
                .into_iter()
                .filter(|p| !daemons.contains(p))
                .collect();
            if left.is_empty() {
                break;
            }
            if Instant::now() > give_up {
                for p in left {
                    signal(p, libc::SIGKILL);
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        for (_, child) in self.daemons.iter_mut().rev() {
            signal(child.id(), libc::SIGCONT);
            signal(child.id(), libc::SIGTERM);
            let give_up = Instant::now() + Duration::from_secs(10);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < give_up {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        for p in self.processes() {
            signal(p, libc::SIGKILL);
        }
    }
}

// ---- Checks -----------------------------------------------------------------------------------

/// `slurm_loop: <what> at step <n>...` -> n.
fn step_of(text: &str, prefix: &str) -> Option<i64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(prefix)?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// The seconds in `slurm_loop: stopping at step <n> after <t> s`.
fn stop_time(text: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix("slurm_loop: stopping at step ")?;
        rest.split(" after ")
            .nth(1)?
            .strip_suffix(" s")?
            .parse()
            .ok()
    })
}

/// Run the program with two ranks under mpirun, outside any Slurm job unless `env` says
/// otherwise; `mpirun_args` go before the program (`-x NAME=VALUE`).
fn run_outside(
    program: &Path,
    args: &[&str],
    tiers: &Tiers,
    env: &[(&str, &str)],
    mpirun_args: &[&str],
    what: &str,
) -> Outcome {
    let mut c = Command::new("mpirun");
    clean_env(&mut c)
        .args(["--oversubscribe", "--bind-to", "none"])
        .args(mpirun_args)
        .args(["-n", "2"])
        .arg(program)
        .args(args)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("CAIRN_TIERS_LOCAL", tiers.local())
        .env("CAIRN_TIERS_GLOBAL", tiers.global())
        .envs(env.iter().copied())
        .current_dir(tiers.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    run(c, what)
}

/// The program resumes from `step` outside Slurm, counter checked.
fn resumes_from(program: &Path, tiers: &Tiers, step: i64, what: &str) {
    let o = run_outside(program, &["--resume-only"], tiers, &[], &[], what);
    o.assert_ok();
    assert!(
        o.stdout
            .contains(&format!("slurm_loop: resumed v{step} at step {step}\n")),
        "{what}: expected to resume from step {step}\n{}",
        o.show()
    );
}

/// Slurm cannot say how long the job has: one warning, from rank 0, naming `expect`, and
/// the program runs as without a time limit.
fn one_warning(o: &Outcome, expect: &str, what: &str) {
    o.assert_ok();
    let warnings: Vec<&str> = o
        .stderr
        .lines()
        .filter(|l| l.contains("cannot learn the time limit of Slurm job"))
        .collect();
    assert_eq!(warnings.len(), 1, "{what}: one warning\n{}", o.show());
    assert!(
        warnings[0].contains(expect) && warnings[0].contains("running without a time limit"),
        "{what}: the warning should name {expect:?}\n{}",
        o.show()
    );
    assert!(
        o.stdout.contains("slurm_loop: resumed v-1 at step 0"),
        "{what}\n{}",
        o.show()
    );
}

/// A cluster of this test's own; `None`, saying why, when its tools are missing or it
/// cannot start here.
fn cluster() -> Option<Slurm> {
    let started = tools().and_then(|t| {
        Slurm::start(t).map_err(|e| format!("Slurm cannot start on this machine: {e}"))
    });
    started.map_err(|e| eprintln!("skipped: {e}")).ok()
}

#[test]
fn slurm_time_limit_and_signal_lead_to_a_last_checkpoint() {
    let Some(mut slurm) = cluster() else {
        return;
    };
    let program = build_c_program("slurm_loop", LOOP_C, &slurm.dir.path().join("bin"))
        .unwrap_or_else(|e| panic!("{e}"));

    // No time policy is reached on its own: only Cairn's stop makes a checkpoint.
    let mut limit_tiers = Tiers::new(0);
    limit_tiers.set("CAIRN_CHECKPOINT_SECONDS", "1000");
    let mut signal_tiers = Tiers::new(0);
    signal_tiers.set("CAIRN_CHECKPOINT_SECONDS", "1000");
    let limit = slurm.submit("limit", &["--time=2"], &program, &[], &limit_tiers);
    let signalled = slurm.submit(
        "signal",
        &["--time=2", "--signal=USR1@100"],
        &program,
        &["--due-only"],
        &signal_tiers,
    );

    // SIGUSR1 comes about 20 s into the job: the checkpoint the program asks about is due,
    // should_exit agrees, and the job ends on its own instead of being killed by the signal.
    let (state, code) = slurm.wait_job(&signalled, "signal");
    let out = slurm.job_output("signal");
    assert_eq!(
        (state.as_str(), code.as_str()),
        ("COMPLETED", "0:0"),
        "the signalled job\n{out}\n{}",
        slurm.logs()
    );
    let due = step_of(&out, "slurm_loop: checkpoint due at step ").expect(&out);
    assert_eq!(
        step_of(&out, "slurm_loop: stopping at step "),
        Some(due),
        "it stops at the checkpoint the signal made due\n{out}"
    );
    for rank in 0..2 {
        assert!(
            out.contains(&format!("rank {rank}: time to stop: SIGUSR1 arrived")),
            "rank {rank} saw SIGUSR1\n{out}"
        );
    }
    assert!(!out.contains("time limit"), "{out}");
    eprintln!("signalled job {signalled}: {state} {code}, last checkpoint at step {due}");
    resumes_from(&program, &signal_tiers, due, "after the signal");

    // The time limit: learnt from Slurm (squeue here, Slurm 22.05 exports no
    // SLURM_JOB_END_TIME), with a margin of a tenth of the job's two minutes.
    let (state, code) = slurm.wait_job(&limit, "limit");
    let out = slurm.job_output("limit");
    assert_eq!(
        (state.as_str(), code.as_str()),
        ("COMPLETED", "0:0"),
        "the job must stop before its time limit, not end in TIMEOUT\n{out}\n{}",
        slurm.logs()
    );
    let last = step_of(&out, "slurm_loop: stopping at step ").expect(&out);
    for rank in 0..2 {
        assert!(
            out.lines()
                .any(|l| l.contains(&format!("rank {rank}: time to stop: "))
                    && l.contains("s remain before the time limit")
                    && l.contains("margin (a tenth of the job's 1")),
            "rank {rank} stopped for the time limit, with the margin scaled to the job\n{out}"
        );
    }
    assert!(!out.contains("cannot learn"), "{out}");
    // With the 60 s margin unscaled, a 2-minute job would stop within its first minute.
    let after = stop_time(&out).expect(&out);
    assert!(after > 70.0, "stopped after {after} s\n{out}");
    eprintln!(
        "time-limited job {limit}: {state} {code}, last checkpoint at step {last} after {after} s"
    );
    resumes_from(&program, &limit_tiers, last, "after the time limit");

    // Slurm unable to say: rank 0 warns once, and the program runs without a limit.
    let conf = slurm.conf.display().to_string();
    let o = run_outside(
        &program,
        &["--resume-only"],
        &Tiers::new(0),
        &[("SLURM_JOB_ID", "4000000"), ("SLURM_CONF", &conf)],
        &[],
        "an unknown job",
    );
    one_warning(
        &o,
        "`squeue -h -j 4000000 -o %L` failed (exit status: 1)",
        "an unknown job",
    );
    let o = run_outside(
        &program,
        &["--resume-only"],
        &Tiers::new(0),
        &[("SLURM_JOB_ID", &limit)],
        &["-x", "PATH=/nonexistent"],
        "no squeue",
    );
    one_warning(&o, "could not be started", "no squeue");
    let ctld = slurm.daemon_pid("slurmctld");
    signal(ctld, libc::SIGSTOP);
    let o = run_outside(
        &program,
        &["--resume-only"],
        &Tiers::new(0),
        &[("SLURM_JOB_ID", &limit), ("SLURM_CONF", &conf)],
        &[],
        "a hung controller",
    );
    signal(ctld, libc::SIGCONT);
    one_warning(&o, "did not answer within 5 s", "a hung controller");
}

/// `cairn` and `cairn-prun`, built beside this test's directory (`target/<profile>/`); `None`
/// when the workspace's binaries are not built.
fn cairn_binaries() -> Option<(PathBuf, PathBuf)> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?.parent()?;
    let (cairn, prun) = (dir.join("cairn"), dir.join("cairn-prun"));
    (cairn.is_file() && prun.is_file()).then_some((cairn, prun))
}

/// An address of this host other than loopback, for coordinators that nodes started by an
/// agent (srun here) reach.
fn host_address() -> Option<String> {
    let o = Command::new("hostname").arg("-I").output().ok()?;
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .find(|a| a.parse::<std::net::Ipv4Addr>().is_ok())
        .map(str::to_string)
}

/// Transparent checkpointing in a Slurm job: a batch job runs `cairn launch`, whose node is
/// started by `srun` (the agent), of an unmodified MPI ring whose two ranks `cairn-prun`
/// starts as `srun --mpi=pmix` would, with a PMIx server inside the job. The job is
/// checkpointed, then cancelled (`scancel`: SIGTERM to every process of the job, and the
/// PMIx server removes its store on the way out); a second batch job runs `cairn restart`,
/// and the ring ends there with every message and reduction right.
#[test]
fn a_transparent_mpi_job_cancelled_by_slurm_comes_back_in_a_new_job() {
    let Some((cairn, prun)) = cairn_binaries() else {
        eprintln!("skipped: cairn and cairn-prun are not built beside the tests");
        return;
    };
    let Some(addr) = host_address() else {
        eprintln!("skipped: this host has no IPv4 address but loopback");
        return;
    };
    let Some(mut slurm) = cluster() else {
        return;
    };
    let d = slurm.dir.path().join("ring");
    let run = d.join("run");
    std::fs::create_dir_all(&run).unwrap();
    let ring = d.join("mpiring");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../native/ckpt/tests/mpiring.c");
    let o = Command::new("mpicc")
        .arg(&src)
        .arg("-o")
        .arg(&ring)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "mpicc: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let steps = 20000;
    let common = format!(
        "--job sj --dir {d}/imgs --local {d}/local --global {d}/global --bind {addr} \
         --hosts localhost --agent 'srun -N1 -n1 --overlap -w'",
        d = d.display()
    );
    let head = "#!/bin/sh\nexport OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
                OMPI_MCA_btl=self,vader\n";
    let launch = format!(
        "{head}exec {} launch {common} -- {} -n 2 {} {steps} {}\n",
        cairn.display(),
        prun.display(),
        ring.display(),
        run.display()
    );
    let first = slurm.submit_script("ring1", &[], &launch, (&d, &[]));
    let out = run.join("out.ring");
    let last_step = || {
        std::fs::read_to_string(&out)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.strip_prefix("step ")?.parse::<u64>().ok())
            .next_back()
            .unwrap_or(0)
    };
    let give_up = Instant::now() + Duration::from_secs(120);
    while last_step() < 300 {
        assert!(
            Instant::now() < give_up,
            "the ring did not start\n{}",
            slurm.job_output("ring1")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let o = Command::new(&cairn)
        .args(["checkpoint", "--job", "sj", "--dir"])
        .arg(d.join("imgs"))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "checkpoint: {}\n{}",
        String::from_utf8_lossy(&o.stderr),
        slurm.job_output("ring1")
    );
    slurm.query("scancel", &[&first]).unwrap();
    let (state, _) = slurm.wait_job(&first, "ring1");
    assert_eq!(state, "CANCELLED", "{}", slurm.job_output("ring1"));
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(
        !text.contains("done"),
        "the ring ended before it was cancelled: {text}"
    );
    let restart = format!("{head}exec {} restart {common}\n", cairn.display());
    let second = slurm.submit_script("ring2", &[], &restart, (&d, &[]));
    let (state, code) = slurm.wait_job(&second, "ring2");
    assert_eq!(
        (state.as_str(), code.as_str()),
        ("COMPLETED", "0:0"),
        "{}\n{}",
        slurm.job_output("ring2"),
        slurm.logs()
    );
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains(&format!("done {steps} ")), "{text}");
    for r in 0..2 {
        let end = std::fs::read_to_string(run.join(format!("end.{r}"))).unwrap();
        assert_eq!(end.trim(), format!("rank {r} ok"));
    }
}
