//! Starting a job's processes where they run: the launcher describes each process
//! ([`ProcStart`]: its command line, its whole environment, its directory, its CPUs and
//! whether it reads standard input) and sends each node's sub-coordinator the descriptions
//! of its own processes over the engine connection ([`crate::engines::Engines::spawn`]).
//! The sub-coordinator starts them as its children ([`Procs`]), reaps them, reports each
//! end to the root (`ENDED proc=<i> status=<wait status>`) and signals them on the root's
//! `KILL`. A host's processes are therefore started, watched and ended by that host's
//! sub-coordinator, as `orted` does for `mpirun`, and no node needs the launcher's own
//! process tree.

use crate::error::{Error, Result};
use crate::sys;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};

// ---- the environment of a job's processes ---------------------------------------------
// Here, below the launcher, the coordinators and the manifests, which all read these names.

/// The variables every process of a job gets (and the restorer too): where its node's
/// sub-coordinator listens, the job's token, the job id, the process and node indices, and
/// the affinity settings; and a slot's mark (`--rsh`). Not recorded in manifests: they
/// differ from run to run.
pub const JOB_ENV: &[&str] = &[
    "CAIRN_COORD_ADDR",
    "CAIRN_COORD_TOKEN",
    "CAIRN_JOB",
    "CAIRN_PROC",
    "CAIRN_NODE",
    "CAIRN_CKPT_AFFINITY",
    "CAIRN_CKPT_CPUS",
    MOVED_ENV,
    SLOT_ENV,
];

/// A restart's pairs `OLD=NEW;...` of host addresses that changed, for the restorer: the
/// processes translate the old addresses (see docs/transparent.md).
pub const MOVED_ENV: &str = "CAIRN_CKPT_MOVED";

/// Set to `1` in a slot's environment (`--rsh`): the checkpoint library of that process, and
/// of no other, runs the command its node sends it (`RUN`) in its place.
pub const SLOT_ENV: &str = "CAIRN_CKPT_SLOT";

/// The checkpoint library's file name, and the variable that names another one.
pub const PRELOAD_NAME: &str = "libcairn-ckpt.so";
pub const PRELOAD_ENV: &str = "CAIRN_CKPT_PRELOAD";
/// The restorer's file name, and the variable that names another one.
pub const RESTORER_NAME: &str = "cairn-restore";
pub const RESTORER_ENV: &str = "CAIRN_RESTORE";

/// How one process of a job is started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcStart {
    /// The process index.
    pub proc: usize,
    /// The program, found on the environment's `PATH` if it has no slash.
    pub program: OsString,
    pub args: Vec<OsString>,
    /// The process's whole environment: nothing of the sub-coordinator's is passed on.
    pub env: Vec<(OsString, OsString)>,
    /// Its working directory.
    pub cwd: PathBuf,
    /// The CPUs it is confined to before the program runs (`--cpus`).
    pub cpus: Option<Vec<usize>>,
    /// It reads the sub-coordinator's standard input (process 0, like an MPI job's rank
    /// 0); the others read `/dev/null`.
    pub stdin: bool,
}

impl ProcStart {
    /// The command that starts the process: only standard input, output and error pass to
    /// it, it dies with the thread that starts it (see [`sys::die_with_parent`]), and it joins
    /// process group `group` when one is given (the launcher's, so that a Ctrl-C at the
    /// terminal reaches it).
    pub fn command(&self, group: Option<i32>) -> Command {
        let mut c = Command::new(&self.program);
        c.args(&self.args)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.cwd)
            .stdin(if self.stdin {
                Stdio::inherit()
            } else {
                Stdio::null()
            });
        if let Some(g) = group {
            c.process_group(g);
        }
        if let Some(cpus) = &self.cpus {
            sys::confine_on_exec(&mut c, cpus);
        }
        cairn_ckpt::standard_streams_only(&mut c);
        sys::die_with_parent(&mut c);
        c
    }
}

/// A wait status as a shell reports it: the exit code, or 128 + the signal.
pub fn exit_code(status: &ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// The processes a sub-coordinator started. Reaping and signalling happen on the one thread
/// that owns this, so a signal never reaches a pid that was reaped (and maybe reused).
/// Dropping it kills and reaps those still running.
#[derive(Default)]
pub struct Procs {
    running: BTreeMap<usize, Child>,
}

impl Procs {
    /// Starts every process of `starts`; returns their pids in order. On an error (naming
    /// the process and its program) those already started keep running: the caller ends
    /// the job.
    pub fn spawn(&mut self, starts: &[ProcStart], group: Option<i32>) -> Result<Vec<u32>> {
        let mut pids = Vec::with_capacity(starts.len());
        for s in starts {
            if self.running.contains_key(&s.proc) {
                crate::error::bail!(Protocol, "proc {} was already started", s.proc);
            }
            let child = s.command(group).spawn().map_err(|e| {
                Error::io(
                    format_args!(
                        "start proc {} ({})",
                        s.proc,
                        Path::new(&s.program).display()
                    ),
                    e,
                )
            })?;
            pids.push(child.id());
            self.running.insert(s.proc, child);
        }
        Ok(pids)
    }

    /// Reaps what has exited: each process index with its wait status.
    pub fn reap(&mut self) -> Vec<(usize, ExitStatus)> {
        let mut ended = Vec::new();
        for (&i, c) in &mut self.running {
            match c.try_wait() {
                Ok(Some(st)) => ended.push((i, st)),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!("wait for proc {i} (pid {}): {e}", c.id());
                    ended.push((i, ExitStatus::from_raw(255 << 8)));
                }
            }
        }
        for (i, _) in &ended {
            self.running.remove(i);
        }
        ended
    }

    /// Sends `sig` to every process still running; returns how many got it.
    pub fn signal(&self, sig: i32) -> usize {
        self.signal_where(sig, |_| true)
    }

    /// Sends `sig` to the processes still running whose index `which` accepts (the root
    /// ends a job's unused slots this way); returns how many got it.
    pub fn signal_where(&self, sig: i32, which: impl Fn(usize) -> bool) -> usize {
        self.running
            .iter()
            .filter(|(&i, c)| which(i) && sys::kill(c.id(), sig).is_ok())
            .count()
    }

    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        for c in self.running.values_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(proc: usize, script: &str) -> ProcStart {
        ProcStart {
            proc,
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into()],
            env: vec![("ONLY".into(), "this".into())],
            cwd: std::env::temp_dir(),
            cpus: None,
            stdin: false,
        }
    }

    fn wait_all(p: &mut Procs, n: usize) -> BTreeMap<usize, i32> {
        let mut got = BTreeMap::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while got.len() < n {
            assert!(
                std::time::Instant::now() < deadline,
                "processes did not end"
            );
            for (i, st) in p.reap() {
                got.insert(i, exit_code(&st));
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        got
    }

    #[test]
    fn processes_get_only_their_own_environment_and_report_their_status() {
        let mut p = Procs::default();
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("env");
        let script = format!(
            "env > {}; [ \"$PWD\" = {} ] || exit 9; exit 3",
            out.display(),
            std::env::temp_dir().display()
        );
        let pids = p.spawn(&[start(4, &script)], None).unwrap();
        assert_eq!(pids.len(), 1);
        assert_eq!(wait_all(&mut p, 1), BTreeMap::from([(4, 3)]));
        let env = std::fs::read_to_string(&out).unwrap();
        assert!(env.contains("ONLY=this"), "{env}");
        assert!(
            !env.contains("CARGO"),
            "the test's environment leaked: {env}"
        );
        assert!(p.is_empty());
    }

    #[test]
    fn a_signal_reaches_every_running_process_and_shows_in_its_status() {
        let mut p = Procs::default();
        p.spawn(&[start(0, "sleep 60"), start(1, "sleep 60")], None)
            .unwrap();
        assert_eq!(p.signal_where(libc::SIGKILL, |i| i == 1), 1);
        assert_eq!(
            wait_all(&mut p, 1),
            BTreeMap::from([(1, 128 + libc::SIGKILL)])
        );
        p.spawn(&[start(1, "sleep 60")], None).unwrap();
        assert_eq!(p.signal(libc::SIGTERM), 2);
        assert_eq!(
            wait_all(&mut p, 2),
            BTreeMap::from([(0, 128 + libc::SIGTERM), (1, 128 + libc::SIGTERM)])
        );
        assert_eq!(p.signal(libc::SIGTERM), 0);
    }

    #[test]
    fn a_program_that_cannot_start_is_named_and_an_index_starts_once() {
        let mut p = Procs::default();
        let mut bad = start(2, "");
        bad.program = "/nonexistent/prog".into();
        let e = p.spawn(&[bad], None).unwrap_err();
        assert!(
            e.to_string().contains("start proc 2 (/nonexistent/prog)"),
            "{e}"
        );
        p.spawn(&[start(1, "sleep 60")], None).unwrap();
        let e = p.spawn(&[start(1, "true")], None).unwrap_err();
        assert!(e.to_string().contains("proc 1 was already started"), "{e}");
    }
}
