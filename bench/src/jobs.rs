//! Jobs the launch benchmarks start and time from outside: child processes whose output is
//! kept, commands timed to their end, heartbeat files read as they grow, the run's and each
//! job's private directories (every process naming them killed before they are removed), and
//! jobs under `cairn launch` / `cairn checkpoint` / `cairn restart` with Cairn's binaries
//! copied into the run.

use crate::{mono_ns, private_dir};
use serde_json::Value;
use std::collections::VecDeque;
use std::ffi::OsString;
use std::fs::{self, DirBuilder, File};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::str::FromStr;
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a program may take to fill its memory, a command to end, a restored program to
/// show a sign of life.
pub const TIMEOUT: Duration = Duration::from_secs(300);
/// What `cairn restart` logs once the engine has restored the images, before any process
/// starts.
pub const ENGINE_RESTORED: &str = "the engine restored version";

pub fn sigkill(pid: i32) {
    // SAFETY: kill(2) with a pid we read; an id that is gone or reused by a process of ours
    // only fails or ends that process, which the caller means to end.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

/// Kill (SIGKILL) every process but this one whose command line mentions one of `needles`:
/// what a failed step left behind (the run's directory is in every command line of the
/// run: configuration, heartbeat file, images, DMTCP's directories; sub-coordinators name
/// the job id). Rounds until none is found (a process that has released its memory shows an
/// empty command line), for processes started meanwhile and to see the killed ones gone: at
/// most a second.
pub fn kill_strays(needles: &[String]) {
    let me = std::process::id() as i32;
    for _ in 0..50 {
        let mut found = 0;
        let Ok(dir) = fs::read_dir("/proc") else {
            return;
        };
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            if pid == me {
                continue;
            }
            let Ok(cmd) = fs::read(e.path().join("cmdline")) else {
                continue;
            };
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if needles.iter().any(|n| cmd.contains(n.as_str())) {
                sigkill(pid);
                found += 1;
            }
        }
        if found == 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Remove the settings of the caller's environment that would change a job: Cairn's and
/// DMTCP's variables and preloads.
pub fn clean_env(c: &mut Command) {
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if k.starts_with("CAIRN_") || k.starts_with("DMTCP_") || k == "LD_PRELOAD" {
            c.env_remove(&k);
        }
    }
}

// ---- child processes -------------------------------------------------------------------------

/// A child process whose output lines are kept (the last 40, each with the CLOCK_MONOTONIC
/// time it was read at), for error messages and to time what it reports. Dropping it kills
/// the process (SIGKILL) if it still runs, and reaps it.
pub struct Proc {
    pub what: String,
    child: Child,
    log: Arc<Mutex<VecDeque<(i64, String)>>>,
}

impl Proc {
    pub fn spawn(what: &str, mut cmd: Command) -> Result<Proc, String> {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {what}: {e}"))?;
        let log = Arc::new(Mutex::new(VecDeque::new()));
        let out: Box<dyn Read + Send> = Box::new(child.stdout.take().expect("piped"));
        let err: Box<dyn Read + Send> = Box::new(child.stderr.take().expect("piped"));
        for r in [out, err] {
            let log = log.clone();
            std::thread::spawn(move || {
                for l in BufReader::new(r).lines() {
                    let Ok(l) = l else { break };
                    let at = mono_ns();
                    let mut g = log.lock().expect("log");
                    if g.len() == 40 {
                        g.pop_front();
                    }
                    g.push_back((at, l));
                }
            });
        }
        Ok(Proc {
            what: what.to_string(),
            child,
            log,
        })
    }

    /// The last lines it printed.
    pub fn tail(&self) -> String {
        let g = self.log.lock().expect("log");
        let v: Vec<&str> = g.iter().map(|l| l.1.as_str()).collect();
        if v.is_empty() {
            "(nothing)".into()
        } else {
            v.join("\n")
        }
    }

    /// When the first kept line containing `text` was read (CLOCK_MONOTONIC).
    pub fn line_at(&self, text: &str) -> Option<i64> {
        let g = self.log.lock().expect("log");
        g.iter().find(|l| l.1.contains(text)).map(|l| l.0)
    }

    /// The exit status, if it has ended.
    pub fn ended(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Wait for it to end by itself.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus, String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = self.ended() {
                return Ok(st);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{} did not end within {} s; its last lines:\n{}",
                    self.what,
                    timeout.as_secs(),
                    self.tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// SIGKILL, and reap it.
    pub fn kill(&mut self) {
        if self.ended().is_none() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What a command that was run to its end printed, and its exit status.
pub struct Ran {
    pub secs: f64,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Run `cmd` to its end and time it from just before the spawn to its exit (a thread waits
/// for it, so the end is seen at once). Killed after TIMEOUT.
pub fn run_timed(what: &str, mut cmd: Command) -> Result<Ran, String> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let t0 = Instant::now();
    let mut child = cmd.spawn().map_err(|e| format!("cannot run {what}: {e}"))?;
    let pid = child.id() as i32;
    let mut so = child.stdout.take().expect("piped");
    let mut se = child.stderr.take().expect("piped");
    let ro = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = so.read_to_string(&mut s);
        s
    });
    let re = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = se.read_to_string(&mut s);
        s
    });
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let st = child.wait();
        let _ = tx.send((st, Instant::now()));
    });
    let (st, end) = match rx.recv_timeout(TIMEOUT) {
        Ok(v) => v,
        Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {
            sigkill(pid);
            let _ = rx.recv_timeout(Duration::from_secs(10));
            return Err(format!("{what} did not end within {} s", TIMEOUT.as_secs()));
        }
    };
    let status = st.map_err(|e| format!("{what}: {e}"))?;
    Ok(Ran {
        secs: end.duration_since(t0).as_secs_f64(),
        status,
        stdout: ro.join().unwrap_or_default(),
        stderr: re.join().unwrap_or_default(),
    })
}

// ---- heartbeat files -------------------------------------------------------------------------

/// The lines the C programs append to their heartbeat file, read as they come.
pub struct Hb {
    pub path: PathBuf,
    off: u64,
    partial: String,
}

impl Hb {
    pub fn new(path: PathBuf) -> Hb {
        Hb {
            path,
            off: 0,
            partial: String::new(),
        }
    }

    /// The whole lines appended since the last call. A file that became shorter (a restart
    /// cuts a file that was open for writing back to its size at the checkpoint) is read
    /// again from its start.
    pub fn poll(&mut self) -> Vec<String> {
        let Ok(mut f) = File::open(&self.path) else {
            return Vec::new();
        };
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        if len < self.off {
            self.off = 0;
            self.partial.clear();
        }
        if len == self.off || f.seek(SeekFrom::Start(self.off)).is_err() {
            return Vec::new();
        }
        let mut buf = Vec::new();
        let n = f.read_to_end(&mut buf).unwrap_or(0);
        self.off += n as u64;
        self.partial.push_str(&String::from_utf8_lossy(&buf));
        let mut lines: Vec<String> = self.partial.split('\n').map(str::to_string).collect();
        self.partial = lines.pop().unwrap_or_default();
        lines
    }

    /// Lines until `f` returns `Some`, polling every half millisecond; fails when `job` (the
    /// process the program runs under) ends first, or after TIMEOUT.
    pub fn wait<T>(
        &mut self,
        what: &str,
        job: &mut Proc,
        f: impl FnMut(&str) -> Option<T>,
    ) -> Result<T, String> {
        self.wait_at_most(what, job, TIMEOUT, f)
    }

    /// [`Hb::wait`] for at most `limit`.
    pub fn wait_at_most<T>(
        &mut self,
        what: &str,
        job: &mut Proc,
        limit: Duration,
        mut f: impl FnMut(&str) -> Option<T>,
    ) -> Result<T, String> {
        let deadline = Instant::now() + limit;
        loop {
            for l in self.poll() {
                if let Some(v) = f(&l) {
                    return Ok(v);
                }
            }
            if let Some(st) = job.ended() {
                return Err(format!(
                    "{} ended ({st}) before {what}; its last lines:\n{}",
                    job.what,
                    job.tail()
                ));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{what}: none within {} s; the last lines of {}:\n{}",
                    limit.as_secs(),
                    job.what,
                    job.tail()
                ));
            }
            std::thread::sleep(Duration::from_micros(500));
        }
    }
}

// ---- what the run creates --------------------------------------------------------------------

/// The run's private directories, removed with everything in them when dropped, after every
/// process whose command line names them is killed: `data` under `--dir` (tiers, staged and
/// DMTCP images, heartbeat files, baseline files) and `bin` in the temp directory (the
/// compiled programs and the copied Cairn binaries; `--dir` may not allow exec).
pub struct RunDirs {
    pub data: PathBuf,
    pub bin: PathBuf,
    /// The program, for the directories' names and messages.
    prog: &'static str,
    /// What its jobs' ids start with, before this process's id and the job's tag.
    ids: &'static str,
}

impl RunDirs {
    /// `<base>/<prog>-<pid>` and `<temp>/<prog>-<pid>-bin`; the jobs' ids are
    /// `<ids><pid>-<tag>`.
    pub fn create(base: &Path, prog: &'static str, ids: &'static str) -> Result<RunDirs, String> {
        let pid = std::process::id();
        let mk = |p: &Path| {
            DirBuilder::new()
                .mode(0o700)
                .create(p)
                .map_err(|e| format!("cannot create {}: {e}", p.display()))
        };
        let data = base.join(format!("{prog}-{pid}"));
        mk(&data)?;
        let dirs = RunDirs {
            data,
            bin: std::env::temp_dir().join(format!("{prog}-{pid}-bin")),
            prog,
            ids,
        };
        mk(&dirs.bin)?;
        Ok(dirs)
    }
}

impl Drop for RunDirs {
    fn drop(&mut self) {
        kill_strays(&[
            self.data.display().to_string(),
            self.bin.display().to_string(),
        ]);
        for d in [&self.data, &self.bin] {
            if d.exists() {
                if let Err(e) = fs::remove_dir_all(d) {
                    eprintln!("{}: could not remove {}: {e}", self.prog, d.display());
                }
            }
        }
    }
}

/// One job's private directory under the run's, removed (after its processes are killed)
/// when dropped: each job starts on empty tiers.
pub struct JobDir {
    pub path: PathBuf,
    /// Other text that names the job's processes (the Cairn job id, which sub-coordinators
    /// carry).
    pub id: String,
    prog: &'static str,
}

impl JobDir {
    pub fn new(dirs: &RunDirs, tag: &str) -> Result<JobDir, String> {
        let path = dirs.data.join(tag);
        private_dir(&path)?;
        Ok(JobDir {
            path,
            id: format!("{}{}-{tag}", dirs.ids, std::process::id()),
            prog: dirs.prog,
        })
    }

    /// Write `cairn.toml` here: the node-local tier and the global one in this directory, no
    /// compression, incremental as asked, redundancy single (none), no flush, nothing made
    /// durable at the end. Returns its path.
    pub fn config(&self, incremental: bool) -> Result<PathBuf, String> {
        let q = |p: PathBuf| {
            let s = p.display().to_string();
            format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
        };
        let cfg = self.path.join("cairn.toml");
        let text = format!(
            "# {}: images on a private node-local tier, stored as written\n\
             [tiers]\nlocal = {}\nglobal = {}\n\
             [checkpoint]\nfinalize = false\n\
             [flush]\nevery = 0\nseconds = 0\n\
             [reduction]\ncompress = \"none\"\nincremental = {incremental}\n\
             [redundancy]\nscheme = \"single\"\n",
            self.prog,
            q(self.path.join("local")),
            q(self.path.join("global")),
        );
        fs::write(&cfg, text).map_err(|e| format!("cannot write {}: {e}", cfg.display()))?;
        Ok(cfg)
    }
}

impl Drop for JobDir {
    fn drop(&mut self) {
        kill_strays(&[
            self.path.display().to_string(),
            format!("--job {}", self.id),
        ]);
        if let Err(e) = fs::remove_dir_all(&self.path) {
            eprintln!(
                "{}: could not remove {}: {e}",
                self.prog,
                self.path.display()
            );
        }
    }
}

pub fn mtime_utc(p: &Path) -> String {
    let Ok(t) = fs::metadata(p).and_then(|m| m.modified()) else {
        return "?".into();
    };
    let s = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let (y, m, d, h, mi, _) = cairn_core::clock::utc_parts(s);
    format!("{y:04}-{m:02}-{d:02} {h:02}:{mi:02} UTC")
}

// ---- Cairn jobs ------------------------------------------------------------------------------

/// Cairn's command, restorer and transparent-checkpointing library, copied from beside this
/// program into the run's `bin` directory, so that a rebuild during the run changes nothing.
pub struct Cairn {
    pub cairn: PathBuf,
    pub restore: PathBuf,
    pub lib: PathBuf,
    /// The build time of the `cairn` binary copied (UTC), for the header.
    pub built: String,
}

impl Cairn {
    pub fn copy_into(bin: &Path) -> Result<Cairn, String> {
        let here = exe_dir()?;
        let copy = |name: &str| -> Result<PathBuf, String> {
            let src = here.join(name);
            if !src.is_file() {
                return Err(format!(
                    "{} not found: build Cairn (cargo build --release -p cairn-cli -p cairn-bench, or ./run build)",
                    src.display()
                ));
            }
            let dst = bin.join(name);
            fs::copy(&src, &dst)
                .map_err(|e| format!("cannot copy {} to {}: {e}", src.display(), dst.display()))?;
            Ok(dst)
        };
        Ok(Cairn {
            built: mtime_utc(&here.join("cairn")),
            cairn: copy("cairn")?,
            restore: copy("cairn-restore")?,
            lib: copy("libcairn-ckpt.so")?,
        })
    }
}

/// The two words after `prefix` of a line `PREFIX A B`, parsed.
pub fn two_words<A: FromStr, B: FromStr>(l: &str, prefix: &str) -> Option<(A, B)> {
    let mut w = l.strip_prefix(prefix)?.split(' ');
    let a = w.next()?.parse().ok()?;
    let b = w.next()?.parse().ok()?;
    Some((a, b))
}

/// Compile C program `src` into `out` with `cc` (`cc` or `mpicc`), `-O2 -g -Wall` and the
/// `extra` arguments after the source (defines, include and library paths, libraries).
pub fn compile(cc: &str, src: &Path, out: &Path, extra: &[String]) -> Result<PathBuf, String> {
    let o = Command::new(cc)
        .args(["-O2", "-g", "-Wall", "-o"])
        .arg(out)
        .arg(src)
        .args(extra)
        .output()
        .map_err(|e| format!("cannot run {cc}: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "{cc} {}: {}",
            src.display(),
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    Ok(out.to_path_buf())
}

/// The directory of this program (where cargo puts Cairn's binaries and libraries beside it).
pub fn exe_dir() -> Result<PathBuf, String> {
    std::env::current_exe()
        .map_err(|e| format!("cannot find this program: {e}"))?
        .parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| "this program has no directory".into())
}

/// One `cairn checkpoint` as timed from here, with the phase times it reports.
#[derive(Debug, Clone, Default)]
pub struct CairnCkpt {
    pub secs: f64,
    pub version: u64,
    /// Seconds from the start of the checkpoint to the start of each phase, as `cairn
    /// checkpoint` prints them (SUSPEND, WRITE, STORE, RESUME).
    pub phases: Vec<(String, f64)>,
    /// From the manifest: the images' bytes, what the engine stored, each image's bytes.
    pub bytes: u64,
    pub stored: u64,
    pub images: Vec<u64>,
}

impl CairnCkpt {
    /// Seconds from the start of phase `a` to the start of phase `b`.
    pub fn phase(&self, a: &str, b: &str) -> Option<f64> {
        let t = |p: &str| self.phases.iter().find(|x| x.0 == p).map(|x| x.1);
        Some(t(b)? - t(a)?)
    }
}

/// `cairn: checkpoint N: PHASE (S s)`.
pub fn parse_phase(l: &str) -> Option<(String, f64)> {
    let rest = l.strip_prefix("cairn: checkpoint ")?;
    let (_, rest) = rest.split_once(": ")?;
    let (phase, rest) = rest.split_once(" (")?;
    let s = rest.strip_suffix(" s)")?.parse().ok()?;
    Some((phase.to_string(), s))
}

/// `checkpoint N of job J complete: ...`.
pub fn parse_done(l: &str) -> Option<u64> {
    let rest = l.strip_prefix("checkpoint ")?;
    let (n, rest) = rest.split_once(' ')?;
    rest.starts_with("of job ").then(|| n.parse().ok())?
}

/// A job under `cairn launch`, then `cairn restart`, in its own directory: tiers, the
/// coordinator's directory and the heartbeat file.
pub struct CairnJob<'a> {
    pub t: &'a Cairn,
    pub dir: JobDir,
    pub cfg: PathBuf,
    pub jobs: PathBuf,
    /// The foreground `cairn launch` or `cairn restart`.
    pub fg: Option<Proc>,
}

impl<'a> CairnJob<'a> {
    /// A fresh directory with the configuration of `JobDir::config`.
    pub fn new(t: &'a Cairn, dirs: &RunDirs, tag: &str, incremental: bool) -> Result<Self, String> {
        let dir = JobDir::new(dirs, tag)?;
        let cfg = dir.config(incremental)?;
        let jobs = dir.path.join("jobs");
        Ok(CairnJob {
            t,
            cfg,
            jobs,
            dir,
            fg: None,
        })
    }

    pub fn hb(&self) -> PathBuf {
        self.dir.path.join("hb")
    }

    pub fn cmd(&self, sub: &str) -> Command {
        let mut c = Command::new(&self.t.cairn);
        clean_env(&mut c);
        c.env("CAIRN_CKPT_PRELOAD", &self.t.lib)
            .env("CAIRN_RESTORE", &self.t.restore)
            .arg(sub);
        if sub != "checkpoint" && sub != "status" {
            c.arg("--config").arg(&self.cfg);
        }
        c.arg("--dir")
            .arg(&self.jobs)
            .arg("--job")
            .arg(&self.dir.id);
        c
    }

    pub fn launch(&mut self, prog: &[OsString]) -> Result<(), String> {
        let mut c = self.cmd("launch");
        c.arg("--").args(prog);
        self.fg = Some(Proc::spawn("cairn launch", c)?);
        Ok(())
    }

    pub fn fg(&mut self) -> &mut Proc {
        self.fg.as_mut().expect("a job is running")
    }

    pub fn checkpoint(&mut self) -> Result<CairnCkpt, String> {
        let r = run_timed("cairn checkpoint", self.cmd("checkpoint"))?;
        if !r.status.success() {
            return Err(format!(
                "cairn checkpoint ended with {}:\n{}{}\nthe job's last lines:\n{}",
                r.status,
                r.stdout,
                r.stderr,
                self.fg().tail()
            ));
        }
        let version = r
            .stdout
            .lines()
            .find_map(parse_done)
            .ok_or_else(|| format!("cairn checkpoint printed no version:\n{}", r.stdout))?;
        let mut c = CairnCkpt {
            secs: r.secs,
            version,
            phases: r.stderr.lines().filter_map(parse_phase).collect(),
            ..CairnCkpt::default()
        };
        self.manifest(&mut c)?;
        Ok(c)
    }

    /// The images' bytes and what the engine stored, from version `c.version`'s manifest.
    pub fn manifest(&self, c: &mut CairnCkpt) -> Result<(), String> {
        let p = self
            .jobs
            .join(&self.dir.id)
            .join(format!("v{}", c.version))
            .join("manifest.json");
        let m: Value = fs::read_to_string(&p)
            .map_err(|e| format!("cannot read {}: {e}", p.display()))
            .and_then(|t| serde_json::from_str(&t).map_err(|e| format!("{}: {e}", p.display())))?;
        c.bytes = m["bytes"].as_u64().unwrap_or(0);
        for pr in m["procs"].as_array().into_iter().flatten() {
            c.stored += pr["stored"].as_u64().unwrap_or(0);
            c.images.push(pr["bytes"].as_u64().unwrap_or(0));
            for mem in pr["members"].as_array().into_iter().flatten() {
                c.images.push(mem["bytes"].as_u64().unwrap_or(0));
            }
        }
        Ok(())
    }

    /// Kill every process of the job with SIGKILL (their pids from `cairn status --json`), as
    /// a crash would, and wait for the foreground `cairn` to end.
    pub fn kill(&mut self) -> Result<(), String> {
        let r = run_timed("cairn status", {
            let mut c = self.cmd("status");
            c.arg("--json");
            c
        })?;
        let v: Value = serde_json::from_str(&r.stdout).map_err(|e| {
            format!(
                "cairn status --json: {e} (exit {}):\n{}{}",
                r.status, r.stdout, r.stderr
            )
        })?;
        let pids: Vec<i32> = v["procs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["pid"].as_str()?.parse().ok())
            .collect();
        if pids.is_empty() {
            return Err(format!("cairn status names no process:\n{}", r.stdout));
        }
        for p in pids {
            sigkill(p);
        }
        let fg = self.fg();
        fg.wait_exit(Duration::from_secs(60))?;
        self.fg = None;
        // Nothing of the job may be left (the tree ends with its namespace's init, which
        // `cairn` waited for); this only makes sure.
        kill_strays(&[self.dir.path.display().to_string()]);
        Ok(())
    }

    /// Deletes the images kept in the node-local staging directories of the job's versions
    /// (`<local>/node<k>/.launch/<job>/v<N>/`); fails if there were none.
    pub fn lose_kept_images(&self) -> Result<(), String> {
        let local = self.dir.path.join("local");
        let mut lost = 0;
        for node in read_dir(&local)? {
            for job in read_dir(&node.join(".launch")).unwrap_or_default() {
                for v in read_dir(&job)? {
                    let is_version = v
                        .file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with('v'));
                    if is_version {
                        lost += read_dir(&v)?.len();
                        fs::remove_dir_all(&v)
                            .map_err(|e| format!("cannot remove {}: {e}", v.display()))?;
                    }
                }
            }
        }
        if lost == 0 {
            return Err(format!(
                "no images were kept beside the newest checkpoint under {}",
                local.display()
            ));
        }
        Ok(())
    }

    /// Start `cairn restart`; returns CLOCK_MONOTONIC just before the spawn.
    pub fn restart(&mut self) -> Result<i64, String> {
        let c = self.cmd("restart");
        let t0 = mono_ns();
        self.fg = Some(Proc::spawn("cairn restart", c)?);
        Ok(t0)
    }
}

/// The entries of directory `p`.
pub fn read_dir(p: &Path) -> Result<Vec<PathBuf>, String> {
    let rd = fs::read_dir(p).map_err(|e| format!("cannot list {}: {e}", p.display()))?;
    rd.map(|e| {
        e.map(|e| e.path())
            .map_err(|e| format!("cannot list {}: {e}", p.display()))
    })
    .collect()
}

/// DMTCP's commands, when installed (`bench/peers/build.sh --only dmtcp` builds 4.2.0 into
/// /opt/cairn-peers/dmtcp).
pub struct Dmtcp {
    pub bin: PathBuf,
    /// "DMTCP 4.2.0", from `dmtcp_launch --version`.
    pub version: String,
    /// The install's DMTCP_VERSION file, which bench/peers/build.sh writes.
    pub build: Option<String>,
}

impl Dmtcp {
    /// DMTCP installed under `prefix`, or `None` (said on standard error by program `prog`)
    /// when one of its commands is missing.
    pub fn find(prefix: &Path, prog: &str) -> Result<Option<Dmtcp>, String> {
        let dbin = prefix.join("bin");
        let names = [
            "dmtcp_launch",
            "dmtcp_command",
            "dmtcp_restart",
            "dmtcp_coordinator",
        ];
        Ok(match names.iter().find(|n| !dbin.join(n).is_file()) {
            Some(n) => {
                eprintln!(
                    "{prog}: DMTCP not found ({} is missing; bench/peers/build.sh --only dmtcp builds it, --dmtcp PREFIX names another install): the comparisons with DMTCP are left out, Cairn's own figures are measured",
                    dbin.join(n).display()
                );
                None
            }
            None => {
                let v = Command::new(dbin.join("dmtcp_launch"))
                    .arg("--version")
                    .output()
                    .map_err(|e| format!("cannot run dmtcp_launch --version: {e}"))?;
                // "dmtcp_launch (DMTCP) 4.2.0" -> "DMTCP 4.2.0"
                let first = String::from_utf8_lossy(&v.stdout)
                    .lines()
                    .next()
                    .unwrap_or("?")
                    .trim()
                    .to_string();
                let version = match first.split_once("(DMTCP) ") {
                    Some((_, v)) => format!("DMTCP {v}"),
                    None => first,
                };
                // What bench/peers/build.sh records: the tag, its commit and the fix.
                let build = fs::read_to_string(prefix.join("DMTCP_VERSION"))
                    .map(|s| s.trim().to_string())
                    .ok();
                Some(Dmtcp {
                    bin: dbin,
                    version,
                    build,
                })
            }
        })
    }
}

// ---- DMTCP jobs ------------------------------------------------------------------------------

/// A job under DMTCP in its own directory: a coordinator started here for it (on a free
/// port, so nothing else on the machine is joined), images in `ck/`, DMTCP's temporary files
/// in `tmp/`, the heartbeat file.
pub struct DmtcpJob<'a> {
    d: &'a Dmtcp,
    dir: JobDir,
    coord: Option<Proc>,
    port: u16,
    /// `dmtcp_launch` or `dmtcp_restart`: both become the program (they exec it / restore
    /// it in place).
    fg: Option<Proc>,
    coords: usize,
    /// Variables given to every DMTCP command (and so to the program), after the caller's
    /// `CAIRN_*`, `DMTCP_*` and `LD_PRELOAD` are removed.
    env: Vec<(OsString, OsString)>,
}

impl<'a> DmtcpJob<'a> {
    pub fn new(d: &'a Dmtcp, dirs: &RunDirs, tag: &str) -> Result<Self, String> {
        let dir = JobDir::new(dirs, tag)?;
        private_dir(&dir.path.join("ck"))?;
        private_dir(&dir.path.join("tmp"))?;
        Ok(DmtcpJob {
            d,
            dir,
            coord: None,
            port: 0,
            fg: None,
            coords: 0,
            env: Vec::new(),
        })
    }

    pub fn hb(&self) -> PathBuf {
        self.dir.path.join("hb")
    }

    fn cmd(&self, name: &str) -> Command {
        let mut c = Command::new(self.d.bin.join(name));
        clean_env(&mut c);
        c.envs(self.env.iter().map(|(k, v)| (k, v)));
        c
    }

    /// Set `key` to `value` for every DMTCP command from now on.
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.env.push((key.into(), value.into()));
    }

    /// The job's directory.
    pub fn dir(&self) -> &Path {
        &self.dir.path
    }

    /// `dmtcp_launch` or `dmtcp_restart`, whichever runs the program now.
    pub fn fg(&mut self) -> Option<&mut Proc> {
        self.fg.as_mut()
    }

    /// Start a coordinator and wait for its port.
    fn coordinator(&mut self) -> Result<(), String> {
        self.coords += 1;
        let pf = self.dir.path.join(format!("port{}", self.coords));
        let mut c = self.cmd("dmtcp_coordinator");
        c.args(["-q", "-q", "-p", "0", "--port-file"])
            .arg(&pf)
            .arg("--ckptdir")
            .arg(self.dir.path.join("ck"))
            .arg("--tmpdir")
            .arg(self.dir.path.join("tmp"));
        let mut p = Proc::spawn("dmtcp_coordinator", c)?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(port) = fs::read_to_string(&pf)
                .ok()
                .and_then(|s| s.trim().parse::<u16>().ok())
            {
                self.port = port;
                break;
            }
            if let Some(st) = p.ended() {
                return Err(format!("dmtcp_coordinator ended ({st}):\n{}", p.tail()));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "dmtcp_coordinator wrote no port within 30 s:\n{}",
                    p.tail()
                ));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        self.coord = Some(p);
        Ok(())
    }

    pub fn launch(&mut self, prog: &[OsString]) -> Result<(), String> {
        self.coordinator()?;
        let mut c = self.cmd("dmtcp_launch");
        c.args(["-q", "-q", "-j", "-p", &self.port.to_string(), "--no-gzip"])
            .arg("--ckptdir")
            .arg(self.dir.path.join("ck"))
            .arg("--tmpdir")
            .arg(self.dir.path.join("tmp"))
            .args(prog);
        self.fg = Some(Proc::spawn("dmtcp_launch", c)?);
        Ok(())
    }

    /// The images in `ck/` and their sizes, and the temporary files of images being written.
    fn images(&self) -> Result<DmtcpImages, String> {
        let ck = self.dir.path.join("ck");
        let mut imgs = Vec::new();
        let mut temps = Vec::new();
        for e in fs::read_dir(&ck).map_err(|e| format!("{}: {e}", ck.display()))? {
            let e = e.map_err(|e| e.to_string())?;
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with("ckpt_") {
                continue;
            }
            if name.ends_with(".dmtcp") {
                imgs.push((e.path(), e.metadata().map_or(0, |m| m.len())));
            } else if e.file_type().is_ok_and(|t| t.is_dir()) {
                // `<image>_files/`: copies of files the process had open, part of its image.
            } else {
                temps.push(e.path());
            }
        }
        imgs.sort();
        Ok(DmtcpImages {
            done: imgs,
            writing: temps,
        })
    }

    /// `dmtcp_command --bcheckpoint`, timed; returns the seconds and the images' bytes.
    pub fn checkpoint(&mut self) -> Result<(f64, Vec<u64>), String> {
        let mut c = self.cmd("dmtcp_command");
        c.args(["-p", &self.port.to_string(), "--bcheckpoint"]);
        let r = run_timed("dmtcp_command --bcheckpoint", c)?;
        if !r.status.success() {
            return Err(format!(
                "dmtcp_command --bcheckpoint ended with {}:\n{}{}",
                r.status, r.stdout, r.stderr
            ));
        }
        // DMTCP 3.1 to 4.2 answer --bcheckpoint at once unless the coordinator is patched
        // (bench/peers/build.sh): the images would not be there yet.
        let DmtcpImages {
            done: imgs,
            writing: temps,
        } = self.images()?;
        if imgs.is_empty() || !temps.is_empty() {
            return Err(format!(
                "dmtcp_command --bcheckpoint returned after {:.3} s with the images not written yet (images {:?}, being written {:?}): this DMTCP's coordinator does not block; bench/peers/build.sh --only dmtcp builds one that does",
                r.secs, imgs, temps
            ));
        }
        Ok((r.secs, imgs.iter().map(|i| i.1).collect()))
    }

    /// SIGKILL the program, the coordinator and every other process of the job (the
    /// pipeline's filter and consumer, children of the program), and see them gone: none
    /// may write a heartbeat once a restart is timed.
    pub fn kill(&mut self) {
        if let Some(mut p) = self.fg.take() {
            p.kill();
        }
        if let Some(mut c) = self.coord.take() {
            c.kill();
        }
        kill_strays(&[self.dir.path.display().to_string()]);
    }

    /// Start a coordinator and `dmtcp_restart` on the images; returns CLOCK_MONOTONIC just
    /// before the coordinator's spawn (a restart of a killed job needs both, as `cairn
    /// restart` starts its own).
    pub fn restart(&mut self) -> Result<i64, String> {
        let imgs = self.images()?.done;
        if imgs.is_empty() {
            return Err("no DMTCP image to restart from".into());
        }
        let t0 = mono_ns();
        self.coordinator()?;
        let mut c = self.cmd("dmtcp_restart");
        c.args(["-q", "-q", "-j", "-p", &self.port.to_string()])
            .arg("--tmpdir")
            .arg(self.dir.path.join("tmp"))
            .args(imgs.iter().map(|i| i.0.as_os_str()));
        self.fg = Some(Proc::spawn("dmtcp_restart", c)?);
        Ok(t0)
    }
}

/// What a DMTCP job's image directory holds.
struct DmtcpImages {
    /// Complete images and their sizes.
    done: Vec<(PathBuf, u64)>,
    /// Temporary files of images being written.
    writing: Vec<PathBuf>,
}

impl Drop for DmtcpJob<'_> {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse() {
        assert_eq!(
            parse_phase("cairn: checkpoint 3: STORE (0.407 s)"),
            Some(("STORE".to_string(), 0.407))
        );
        assert_eq!(
            parse_done(
                "checkpoint 12 of job j complete: 1 bytes of images (2 stored) in 0.01 s, /x/v12"
            ),
            Some(12)
        );
        assert_eq!(parse_done("checkpoint of nothing"), None);
        let c = CairnCkpt {
            phases: vec![("WRITE".into(), 0.1), ("STORE".into(), 0.4)],
            ..CairnCkpt::default()
        };
        assert!((c.phase("WRITE", "STORE").unwrap() - 0.3).abs() < 1e-12);
        assert_eq!(c.phase("STORE", "RESUME"), None);
    }

    #[test]
    fn heartbeat_file_is_read_in_whole_lines_and_again_when_cut() {
        let d = std::env::temp_dir().join(format!("cairn-bench-test-{}", std::process::id()));
        private_dir(&d).unwrap();
        let p = d.join("hb");
        let mut hb = Hb::new(p.clone());
        assert!(hb.poll().is_empty());
        fs::write(&p, "hb 1 1\nhb 2").unwrap();
        assert_eq!(hb.poll(), vec!["hb 1 1".to_string()]);
        fs::write(&p, "hb 1 1\nhb 2 2\n").unwrap();
        assert_eq!(hb.poll(), vec!["hb 2 2".to_string()]);
        fs::write(&p, "hb 9 9\n").unwrap();
        assert_eq!(hb.poll(), vec!["hb 9 9".to_string()]);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn dates_read() {
        let d = std::env::temp_dir().join(format!("cairn-bench-date-{}", std::process::id()));
        fs::write(&d, "").unwrap();
        let s = mtime_utc(&d);
        fs::remove_file(&d).unwrap();
        assert!(s.ends_with(" UTC") && s.len() == 20, "{s}");
    }
}
