//! Support for the C API and Fortran tests: build the C programs against the freshly built
//! libcairn (or give the Fortran tests a copy of it), run them under mpirun (or alone) with
//! their own tiers, watch their output, find and kill rank processes through /proc.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long any single program run may take before the test gives up on it.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(120);

// ---- Building the C programs ------------------------------------------------------------------

/// The compiled test programs.
pub struct Bins {
    pub dir: PathBuf,
    pub heat2d: PathBuf,
    pub stress: PathBuf,
    pub vector: PathBuf,
    pub files: PathBuf,
}

/// `target/<profile>` of this test binary (`target/<profile>/deps/capi-<hash>`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("test binary lives in target/<profile>/deps")
        .to_path_buf()
}

/// The newest libcairn.so of this profile. `cargo build` puts it in target/<profile>;
/// `cargo test` refreshes only target/<profile>/deps, so take whichever is newer.
fn libcairn() -> Result<PathBuf, String> {
    let prof = profile_dir();
    let candidates = [
        prof.join("libcairn.so"),
        prof.join("deps").join("libcairn.so"),
    ];
    candidates
        .iter()
        .filter_map(|p| {
            let m = std::fs::metadata(p).ok()?.modified().ok()?;
            Some((m, p.clone()))
        })
        .max()
        .map(|(_, p)| p)
        .ok_or_else(|| {
            format!(
                "no libcairn.so in {} or its deps/ directory: run `cargo build --release -p cairn-capi` first",
                prof.display()
            )
        })
}

pub fn check_mpi_tools() -> Result<(), String> {
    for tool in ["mpicc", "mpirun"] {
        let ok = Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            return Err(format!(
                "`{tool}` is not available: these tests need Open MPI (mpicc and mpirun on PATH; \
                 on Debian/Ubuntu: apt-get install openmpi-bin libopenmpi-dev; `./run test` installs them)"
            ));
        }
    }
    Ok(())
}

/// Put a private copy of the freshly built libcairn.so into `dir` (created if needed), for
/// programs to link against: a rebuild while the tests run cannot swap the library under them.
pub fn copy_libcairn(dir: &Path) -> Result<(), String> {
    let lib = libcairn()?;
    std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let tmp = dir.join(format!("libcairn.so.tmp.{}", std::process::id()));
    std::fs::copy(&lib, &tmp).map_err(|e| format!("copy {}: {e}", lib.display()))?;
    std::fs::rename(&tmp, dir.join("libcairn.so"))
        .map_err(|e| format!("rename {}: {e}", tmp.display()))
}

/// A private install prefix under target/ for the compatibility library `lib` (scr, fti or
/// veloc): libcairn and its headers copied in, then `native/compat/build.sh` run on it, as
/// `./run build` does. Returns the prefix (`include/`, `lib/`).
pub fn compat_prefix(lib: &str) -> Result<PathBuf, String> {
    check_mpi_tools()?;
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let prefix = profile_dir().join(format!("compat-{lib}"));
    copy_libcairn(&prefix.join("lib"))?;
    std::fs::create_dir_all(prefix.join("include")).map_err(|e| format!("mkdir: {e}"))?;
    for h in ["cairn.h", "cairn_mpi.h"] {
        std::fs::copy(
            manifest.join("include").join(h),
            prefix.join("include").join(h),
        )
        .map_err(|e| format!("copy {h}: {e}"))?;
    }
    let out = Command::new(manifest.join("../../native/compat/build.sh"))
        .arg(&prefix)
        .arg(lib)
        .output()
        .map_err(|e| format!("run native/compat/build.sh: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "native/compat/build.sh {lib} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(prefix)
}

fn build() -> Result<Bins, String> {
    check_mpi_tools()?;
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let include = manifest.join("include");
    // A fixed directory under target/ rather than a fresh /tmp directory: a static is never
    // dropped, so a TempDir here would leak one directory per test run.
    let dir = profile_dir().join("capi-tests");
    copy_libcairn(&dir)?;

    // Open MPI's deprecated C++ bindings do not build warning-free; C++ programs use MPI's C
    // API, which OMPI_SKIP_MPICXX selects.
    let sources = [
        (
            "heat2d",
            "mpicc",
            "-std=c11",
            manifest.join("../../examples/heat2d.c"),
        ),
        (
            "stress",
            "mpicc",
            "-std=c11",
            manifest.join("tests/c/stress.c"),
        ),
        (
            "files",
            "mpicc",
            "-std=c11",
            manifest.join("tests/c/files.c"),
        ),
        (
            "vector",
            "mpicxx",
            "-DOMPI_SKIP_MPICXX",
            manifest.join("tests/c/vector.cpp"),
        ),
    ];
    for (name, compiler, flag, src) in &sources {
        let tmp_out = dir.join(format!("{name}.tmp.{}", std::process::id()));
        let out = Command::new(compiler)
            .args(["-O2", flag, "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&tmp_out)
            .arg(src)
            .arg("-I")
            .arg(&include)
            .arg("-L")
            .arg(&dir)
            .arg("-lcairn")
            .arg(format!("-Wl,-rpath,{}", dir.display()))
            .output()
            .map_err(|e| format!("run {compiler}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{compiler} failed to build {}:\n{}{}",
                src.display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        std::fs::rename(&tmp_out, dir.join(name)).map_err(|e| format!("rename: {e}"))?;
    }
    Ok(Bins {
        heat2d: dir.join("heat2d"),
        stress: dir.join("stress"),
        vector: dir.join("vector"),
        files: dir.join("files"),
        dir,
    })
}

/// Build one more C program from `source` (its text) with mpicc against a private copy of
/// the freshly built libcairn, in `dir` (created if needed); returns the executable
/// `dir/<name>`.
pub fn build_c_program(name: &str, source: &str, dir: &Path) -> Result<PathBuf, String> {
    check_mpi_tools()?;
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    copy_libcairn(dir)?;
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).map_err(|e| format!("write {}: {e}", src.display()))?;
    let exe = dir.join(name);
    let out = Command::new("mpicc")
        .args(["-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-I")
        .arg(&include)
        .arg("-L")
        .arg(dir)
        .arg("-lcairn")
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .output()
        .map_err(|e| format!("run mpicc: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "mpicc failed to build {}:\n{}{}",
            src.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(exe)
}

/// The C programs, built once per test binary.
pub fn bins() -> &'static Bins {
    static BINS: OnceLock<Result<Bins, String>> = OnceLock::new();
    match BINS.get_or_init(build) {
        Ok(b) => b,
        Err(e) => panic!("{e}"),
    }
}

/// Serialises the MPI-heavy tests: on two cores, two oversubscribed 4-rank jobs at once
/// would starve each other and blur every timing the kill tests rely on.
pub fn mpi_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

// ---- Tiers ------------------------------------------------------------------------------------

/// A private directory for one test's tiers, removed when dropped.
pub struct Tiers {
    pub dir: tempfile::TempDir,
    /// Extra `CAIRN_*` (or other) variables for every program run with these tiers.
    pub extra: Vec<(String, String)>,
}

impl Tiers {
    /// Local and global tiers under a fresh directory, with `sim_nodes` simulated nodes
    /// (0: the real node only).
    pub fn new(sim_nodes: usize) -> Tiers {
        let dir = tempfile::Builder::new()
            .prefix("cairn-capi-")
            .tempdir()
            .expect("tempdir");
        let mut t = Tiers {
            dir,
            extra: Vec::new(),
        };
        t.set("CAIRN_TOPOLOGY_SIM_NODES", &sim_nodes.to_string());
        t
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn local(&self) -> PathBuf {
        self.path().join("local")
    }

    pub fn global(&self) -> PathBuf {
        self.path().join("global")
    }

    /// Set (or replace) a variable for the programs run with these tiers.
    pub fn set(&mut self, key: &str, value: &str) {
        self.extra.retain(|(k, _)| k != key);
        self.extra.push((key.to_string(), value.to_string()));
    }

    /// The environment for a program run: tiers first, so `extra` can override them.
    fn env(&self) -> Vec<(String, String)> {
        let mut v = vec![
            (
                "CAIRN_TIERS_LOCAL".to_string(),
                self.local().display().to_string(),
            ),
            (
                "CAIRN_TIERS_GLOBAL".to_string(),
                self.global().display().to_string(),
            ),
        ];
        for (k, val) in &self.extra {
            v.retain(|(x, _)| x != k);
            v.push((k.clone(), val.clone()));
        }
        v
    }

    /// Write a file under the tier directory and return its path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path().join(name);
        std::fs::write(&p, text).expect("write file");
        p
    }
}

// ---- Running programs -------------------------------------------------------------------------

/// How to start a program: under mpirun with `ranks` ranks, or alone.
pub fn command(program: &Path, ranks: Option<usize>, args: &[&str], tiers: &Tiers) -> Command {
    let mut cmd = match ranks {
        Some(n) => {
            let mut c = Command::new("mpirun");
            c.args(["--oversubscribe", "--bind-to", "none", "-n", &n.to_string()])
                .arg(program);
            c
        }
        None => Command::new(program),
    };
    cmd.args(args);
    // Only the child's environment: never the test process's own.
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("CAIRN_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .envs(tiers.env())
        .current_dir(tiers.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// A finished run.
#[derive(Debug)]
pub struct Outcome {
    pub what: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Outcome {
    /// Everything about the run, for assertion messages.
    pub fn show(&self) -> String {
        format!(
            "{}: {:?} after {:.2?}\n--- stdout ---\n{}--- stderr ---\n{}",
            self.what, self.status, self.elapsed, self.stdout, self.stderr
        )
    }

    pub fn assert_ok(&self) -> &Outcome {
        assert!(self.status.success(), "expected success\n{}", self.show());
        self
    }

    /// The program's own exit code 5 ("a Cairn call failed"): not a signal, not MPI_Abort.
    pub fn assert_exit5(&self) -> &Outcome {
        assert_eq!(
            self.status.signal(),
            None,
            "killed by a signal\n{}",
            self.show()
        );
        assert_eq!(
            self.status.code(),
            Some(5),
            "expected exit code 5\n{}",
            self.show()
        );
        for bad in [
            "MPI_ABORT",
            "MPI_Abort",
            "exited on signal",
            "panicked",
            "internal error",
        ] {
            assert!(
                !self.stderr.contains(bad),
                "stderr mentions {bad:?}\n{}",
                self.show()
            );
        }
        self
    }

    pub fn lines(&self) -> impl Iterator<Item = &str> {
        self.stdout.lines()
    }
}

fn reader<R: Read + Send + 'static>(r: R, tx: Option<mpsc::Sender<String>>) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            all.push_str(&line);
            all.push('\n');
            if let Some(tx) = &tx {
                let _ = tx.send(line);
            }
        }
        all
    })
}

/// A program started in the background, its standard output watched line by line.
pub struct Running {
    pub what: String,
    child: Option<Child>,
    started: Instant,
    lines: Receiver<String>,
    /// Lines received so far through [`Running::wait_line`].
    pub seen: Vec<String>,
    out: Option<JoinHandle<String>>,
    err: Option<JoinHandle<String>>,
}

pub fn spawn(mut cmd: Command, what: &str) -> Running {
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start {cmd:?}: {e}"));
    let (tx, rx) = mpsc::channel();
    let out = reader(child.stdout.take().unwrap(), Some(tx));
    let err = reader(child.stderr.take().unwrap(), None);
    Running {
        what: what.to_string(),
        child: Some(child),
        started: Instant::now(),
        lines: rx,
        seen: Vec::new(),
        out: Some(out),
        err: Some(err),
    }
}

/// Run to completion (or fail the test after [`RUN_TIMEOUT`]).
pub fn run(cmd: Command, what: &str) -> Outcome {
    spawn(cmd, what).finish(RUN_TIMEOUT)
}

impl Running {
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Wait for a stdout line matching `pred`; `None` on timeout or when output ends.
    pub fn wait_line(
        &mut self,
        timeout: Duration,
        mut pred: impl FnMut(&str) -> bool,
    ) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if pred(&l) {
                        return Some(l);
                    }
                }
                Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {
                    return None
                }
            }
        }
    }

    /// Wait for the program to end and collect everything it printed.
    pub fn finish(mut self, timeout: Duration) -> Outcome {
        let deadline = Instant::now() + timeout;
        let status = loop {
            let child = self.child.as_mut().unwrap();
            match child.try_wait().expect("try_wait") {
                Some(s) => break s,
                None if Instant::now() >= deadline => {
                    self.stop();
                    let out = self.out.take().unwrap().join().unwrap_or_default();
                    let err = self.err.take().unwrap().join().unwrap_or_default();
                    panic!(
                        "{}: still running after {timeout:?}; stopped it\n--- stdout ---\n{out}--- stderr ---\n{err}",
                        self.what
                    );
                }
                None => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        self.child = None;
        let stdout = self.out.take().unwrap().join().unwrap_or_default();
        let stderr = self.err.take().unwrap().join().unwrap_or_default();
        Outcome {
            what: self.what.clone(),
            status,
            stdout,
            stderr,
            elapsed: self.started.elapsed(),
        }
    }

    /// Stop the program and every process it started: SIGTERM to mpirun (which takes its
    /// ranks down), then SIGKILL to whatever is left, each by its own pid.
    fn stop(&mut self) {
        let Some(child) = self.child.as_mut() else {
            return;
        };
        if child.try_wait().ok().flatten().is_some() {
            return;
        }
        let pid = child.id();
        let family = descendants(pid);
        signal(pid, libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if child.try_wait().ok().flatten().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for p in family.iter().chain(std::iter::once(&pid)) {
            if alive(*p) {
                signal(*p, libc::SIGKILL);
            }
        }
        let _ = child.wait();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

// ---- Processes --------------------------------------------------------------------------------

/// (pid, parent pid, command name) of every process, from /proc/<pid>/stat.
fn processes() -> Vec<(u32, u32, String)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // "<pid> (<comm>) <state> <ppid> ..."; comm may itself contain ") ".
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = stat[open + 1..close].to_string();
        let ppid = stat[close + 1..]
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        out.push((pid, ppid, comm));
    }
    out
}

/// Every process below `root`.
pub fn descendants(root: u32) -> Vec<u32> {
    let procs = processes();
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for (pid, ppid, _) in &procs {
        children.entry(*ppid).or_default().push(*pid);
    }
    let mut out = Vec::new();
    let mut todo = vec![root];
    while let Some(p) = todo.pop() {
        for c in children.get(&p).into_iter().flatten() {
            out.push(*c);
            todo.push(*c);
        }
    }
    out
}

fn comm(pid: u32) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(s.trim_end().to_string())
}

fn environ_var(pid: u32, key: &str) -> Option<String> {
    let bytes = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    bytes.split(|b| *b == 0).find_map(|kv| {
        let kv = String::from_utf8_lossy(kv);
        kv.strip_prefix(key)
            .and_then(|r| r.strip_prefix('='))
            .map(str::to_string)
    })
}

/// The pid of MPI rank `rank` of the program named `name` running under mpirun `mpirun`,
/// waiting up to `timeout` for it to appear.
pub fn rank_pid(mpirun: u32, name: &str, rank: usize, timeout: Duration) -> Option<u32> {
    let deadline = Instant::now() + timeout;
    loop {
        for pid in descendants(mpirun) {
            if comm(pid).as_deref() == Some(name)
                && environ_var(pid, "OMPI_COMM_WORLD_RANK").and_then(|r| r.parse().ok())
                    == Some(rank)
            {
                return Some(pid);
            }
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

pub fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) with a pid this test started (or one of its descendants).
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// kill -9 one process.
pub fn kill9(pid: u32) {
    signal(pid, libc::SIGKILL);
}

// ---- Files and numbers ------------------------------------------------------------------------

/// Flip one byte of a file in place.
pub fn flip_byte(path: &Path, offset: u64) {
    let mut b = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    assert!(
        (offset as usize) < b.len(),
        "{} has {} bytes, cannot flip byte {offset}",
        path.display(),
        b.len()
    );
    b[offset as usize] ^= 0x5a;
    std::fs::write(path, &b).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// A small deterministic generator (splitmix64) for the randomised tests.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5eed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}
