//! Helpers shared by the benchmark binaries (`cairn-bench-ckpt`, `cairn-bench-redundancy`,
//! `cairn-bench-flush` and the others): agreed failures and barrier-to-return timing over MPI,
//! command lines, the run's private directory, statistics and orders of repetitions, memory
//! checks, removal of checkpoints between runs, plain-file baselines, the JSON results
//! file of `--json-out` that `cairn-bench-plot` reads, and the rows and ratios of the tables.
//! [`jobs`] starts and times jobs from outside (`cairn launch` and plain `mpirun`).

pub mod jobs;

use cairn_core::Config;
use cairn_mpi::mpi::collective::SystemOperation;
use cairn_mpi::mpi::topology::{Communicator, SimpleCommunicator};
use cairn_mpi::mpi::traits::*;
use std::fs::{self, DirBuilder, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

pub const MIB: usize = 1 << 20;

/// A failed step. `peer` marks the echo on ranks whose own step succeeded, so only the rank
/// that saw the cause (and rank 0) prints.
#[derive(Debug)]
pub struct Failure {
    pub msg: String,
    pub peer: bool,
}

pub fn fail(msg: impl std::fmt::Display) -> Failure {
    Failure {
        msg: msg.to_string(),
        peer: false,
    }
}

pub type Res<T> = Result<T, Failure>;

pub struct Mpi {
    pub world: SimpleCommunicator,
    pub rank: usize,
    pub size: usize,
}

/// The parsed arguments of a benchmark that is not an MPI program, or the end of the
/// process: the usage and exit code 0 for `--help`, the error, the usage and exit code 2 for
/// bad arguments.
pub fn args_or_exit<A>(prog: &str, usage: &str, parsed: Result<Option<A>, String>) -> A {
    match parsed {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("{usage}");
            std::process::exit(0);
        }
        Err(e) => {
            eprintln!("{prog}: {e}\n{usage}");
            std::process::exit(2);
        }
    }
}

/// The `main` of an MPI benchmark: initialise MPI, parse the arguments, run on every rank,
/// and exit with the run's code (0 and the usage for `--help`, 2 for bad arguments). MPI is
/// finalised before the process exits.
pub fn mpi_main<A>(
    prog: &str,
    usage: &str,
    parsed: Result<Option<A>, String>,
    run: impl FnOnce(&Mpi, &A) -> i32,
) -> ! {
    let code = {
        let Some(universe) = cairn_mpi::mpi::initialize() else {
            eprintln!("{prog}: MPI could not be initialised");
            std::process::exit(1);
        };
        let world = universe.world();
        let mpi = Mpi {
            rank: world.rank() as usize,
            size: world.size() as usize,
            world,
        };
        match parsed {
            Ok(Some(args)) => run(&mpi, &args),
            Ok(None) => {
                if mpi.rank == 0 {
                    println!("{usage}");
                }
                0
            }
            Err(e) => {
                if mpi.rank == 0 {
                    eprintln!("{prog}: {e}\n{usage}");
                }
                2
            }
        }
        // `universe` is dropped here, finalising MPI.
    };
    std::process::exit(code);
}

impl Mpi {
    /// Turn this rank's outcome into one every rank shares: all fail if any does.
    pub fn agree<T>(&self, what: &str, r: Result<T, String>) -> Res<T> {
        let mut bad = 0i64;
        self.world
            .all_reduce_into(&(r.is_err() as i64), &mut bad, SystemOperation::max());
        match r {
            Err(e) => Err(fail(format!("rank {}: {what}: {e}", self.rank))),
            Ok(_) if bad != 0 => Err(Failure {
                msg: format!("{what} failed on another rank (see its message)"),
                peer: true,
            }),
            Ok(v) => Ok(v),
        }
    }

    /// Run `f` on every rank from a barrier to its return. The run's time is the slowest
    /// rank's, in seconds; a failure on any rank fails the run on every rank.
    pub fn timed(&self, what: &str, f: impl FnOnce() -> Result<(), String>) -> Res<f64> {
        self.world.barrier();
        let t0 = Instant::now();
        let r = f();
        let ns = t0.elapsed().as_nanos() as i64;
        let mut slowest = 0i64;
        self.world
            .all_reduce_into(&ns, &mut slowest, SystemOperation::max());
        self.agree(what, r)?;
        Ok(slowest as f64 * 1e-9)
    }
}

/// The run's private directory `<base>/<prog>-<pid of rank 0>` (mode 0700). Rank 0 creates it
/// and removes it, with everything in it, when this is dropped.
pub struct RunDir {
    pub path: PathBuf,
    owner: bool,
    /// The program, for messages.
    prog: &'static str,
}

impl RunDir {
    /// Collective. `prog` names the directory and the program in messages.
    pub fn create(mpi: &Mpi, base: &Path, prog: &'static str) -> Res<RunDir> {
        let path = base.join(format!("{prog}-{}", std::process::id()));
        let mut dir = None;
        let mut text = Vec::new();
        if mpi.rank == 0 {
            let made = DirBuilder::new()
                .mode(0o700)
                .create(&path)
                .map_err(|e| format!("cannot create {}: {e}", path.display()));
            if made.is_ok() {
                dir = Some(RunDir {
                    path: path.clone(),
                    owner: true,
                    prog,
                });
                text = path.as_os_str().as_encoded_bytes().to_vec();
            }
            mpi.agree("create the run directory", made)?;
        } else {
            mpi.agree("create the run directory", Ok(()))?;
        }
        let root = mpi.world.process_at_rank(0);
        let mut len = text.len() as u64;
        root.broadcast_into(&mut len);
        text.resize(len as usize, 0);
        root.broadcast_into(&mut text[..]);
        Ok(dir.unwrap_or(RunDir {
            path: PathBuf::from(String::from_utf8_lossy(&text).into_owned()),
            owner: false,
            prog,
        }))
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if self.owner {
            if let Err(e) = fs::remove_dir_all(&self.path) {
                eprintln!(
                    "{}: could not remove {}: {e}",
                    self.prog,
                    self.path.display()
                );
            }
        }
    }
}

/// Median (mean of the middle two for an even count) and 90th percentile (nearest rank).
pub fn median_p90(samples: &[f64]) -> (f64, f64) {
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return (f64::NAN, f64::NAN);
    }
    let med = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    let p90 = v[((n * 9).div_ceil(10)).max(1) - 1];
    (med, p90)
}

/// `cfg` with the tier roots moved under `root`.
pub fn with_root(cfg: &Config, root: &Path) -> Config {
    let mut cfg = cfg.clone();
    cfg.local = Some(root.join("local"));
    cfg.global = root.join("global");
    cfg
}

pub fn private_dir(p: &Path) -> Result<(), String> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(p)
        .map_err(|e| format!("cannot create {}: {e}", p.display()))
}

/// Write `pieces` to a new file `tmp`, then rename it to `dst`: the plain way to publish a
/// file atomically, with the file flags the node-local tier uses.
pub fn write_rename(
    tmp: &Path,
    dst: &Path,
    pieces: &mut dyn Iterator<Item = &[u8]>,
) -> Result<(), String> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(tmp)
        .map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
    for p in pieces {
        f.write_all(p)
            .map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    }
    drop(f);
    fs::rename(tmp, dst).map_err(|e| format!("cannot rename to {}: {e}", dst.display()))
}

pub fn remove_file(p: &Path) -> Result<(), String> {
    fs::remove_file(p).map_err(|e| format!("cannot remove {}: {e}", p.display()))
}
/// Read a `/proc/meminfo` field, in bytes.
pub fn meminfo(field: &str) -> Option<u64> {
    let text = fs::read_to_string("/proc/meminfo").ok()?;
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(field)?.strip_prefix(':')?;
        let kb: u64 = rest.trim().strip_suffix("kB")?.trim().parse().ok()?;
        Some(kb * 1024)
    })
}

/// Bytes available to an unprivileged writer on the file system holding `p`.
pub fn fs_available(p: &Path) -> Option<u64> {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statvfs(3) writes into the zeroed struct we pass and reads the C string.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut st) != 0 {
            return None;
        }
        Some(st.f_bavail as u64 * st.f_frsize as u64)
    }
}

/// Whether `p` is on tmpfs (where file pages are memory).
pub fn on_tmpfs(p: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: statfs(2) writes into the zeroed struct we pass and reads the C string.
    // The width of f_type differs between platforms, hence the casts.
    #[allow(clippy::unnecessary_cast)]
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type as i64 == libc::TMPFS_MAGIC as i64
    }
}

/// A buffer of `n` pseudo-random bytes (xorshift64), every page touched.
pub fn filled(n: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; n];
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for w in v.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        w.copy_from_slice(&b[..w.len()]);
    }
    v
}

pub fn verdict(meets: bool) -> &'static str {
    if meets {
        "MEETS"
    } else {
        "MISSES"
    }
}

pub fn size_label(bytes: usize) -> String {
    if bytes % MIB == 0 {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{} KiB", bytes / 1024)
    }
}

pub fn ms(s: f64) -> String {
    format!("{:.3} ms", s * 1e3)
}
pub fn count_nodes(mpi: &Mpi) -> usize {
    let node = mpi.world.split_shared(mpi.rank as i32);
    let leader = (node.rank() == 0) as i64;
    let mut nodes = 0i64;
    mpi.world
        .all_reduce_into(&leader, &mut nodes, SystemOperation::sum());
    nodes as usize
}

// ---- command lines -------------------------------------------------------------------------

/// Split `--flag=value` and walk the arguments; `on` handles one flag with its value getter
/// and returns `false` for a flag it does not know. `Ok(false)` asks for the usage text.
pub fn walk(
    argv: Vec<String>,
    mut on: impl FnMut(&str, &mut dyn FnMut() -> Result<String, String>) -> Result<bool, String>,
) -> Result<bool, String> {
    let mut it = argv.into_iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        if flag == "-h" || flag == "--help" {
            return Ok(false);
        }
        let mut used_inline = false;
        let mut value = || -> Result<String, String> {
            used_inline = true;
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        if !on(&flag, &mut value)? {
            return Err(format!("unknown argument {arg:?}"));
        }
        if inline.is_some() && !used_inline {
            return Err(format!("{flag} takes no value"));
        }
    }
    Ok(true)
}

/// Owned arguments, for tests of the parsers.
pub fn strings(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// A whole number `>= min` given to option `name`.
pub fn count(name: &str, v: String, min: usize) -> Result<usize, String> {
    match v.parse::<usize>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(format!("{name} {v:?}: expected a whole number >= {min}")),
    }
}

/// Comma-separated whole numbers, each `>= min`, given to option `name`.
pub fn list(name: &str, v: &str, min: usize) -> Result<Vec<usize>, String> {
    let out: Result<Vec<usize>, _> = v.split(',').map(|x| x.trim().parse::<usize>()).collect();
    match out {
        Ok(o) if !o.is_empty() && o.iter().all(|x| *x >= min) => Ok(o),
        _ => Err(format!(
            "{name} {v:?}: expected comma-separated whole numbers >= {min}"
        )),
    }
}

// ---- results as files ----------------------------------------------------------------------

/// The fastest and slowest of `samples` (infinities when there are none).
pub fn span(samples: &[f64]) -> (f64, f64) {
    let lo = samples.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = samples.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo, hi)
}

/// `CLOCK_MONOTONIC` in nanoseconds: one clock for every process of the machine, the one the
/// benchmarks' C programs stamp their lines with.
pub fn mono_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime(2) writes into the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// The running kernel's release (`/proc/sys/kernel/osrelease`), `?` if unreadable.
pub fn kernel() -> String {
    fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// A series of timed runs in JSON: median, fastest, slowest and every sample, in seconds.
pub fn series_json(samples: &[f64]) -> serde_json::Value {
    let (lo, hi) = span(samples);
    serde_json::json!({
        "median_s": median(samples),
        "min_s": if samples.is_empty() { None } else { Some(lo) },
        "max_s": if samples.is_empty() { None } else { Some(hi) },
        "samples_s": samples,
    })
}

/// The temporary name `write_json` writes `path` under before renaming it into place.
fn json_tmp(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{}.tmp", std::process::id()));
    path.with_file_name(name)
}

/// `--json-out FILE`, checked before the run starts, so a long run cannot fail at its end
/// for want of a directory: creates the file's directory if needed and makes sure a file can
/// be created there (the temporary one `write_json` uses, removed again).
pub fn json_out_ready(path: &Path) -> Result<(), String> {
    if path.file_name().is_none() {
        return Err(format!("--json-out {}: not a file name", path.display()));
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir)
            .map_err(|e| format!("--json-out: cannot create {}: {e}", dir.display()))?;
    }
    let tmp = json_tmp(path);
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(|e| {
            format!(
                "--json-out: cannot write in the directory of {}: {e}",
                path.display()
            )
        })?;
    remove_file(&tmp)
}

/// Write `v` to `path` (`--json-out`), pretty-printed with a final newline, through a
/// temporary file renamed into place: a reader (the plotter) never sees half an object, and a
/// failed run leaves no file behind.
pub fn write_json(path: &Path, v: &serde_json::Value) -> Result<(), String> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let tmp = json_tmp(path);
    let text = format!("{v:#}\n");
    fs::write(&tmp, text).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    fs::rename(&tmp, path).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        format!("cannot rename {} to {}: {e}", tmp.display(), path.display())
    })
}

/// The end of a one-process benchmark's `main`: checks `--json-out` before the run, runs it,
/// prints its JSON (`--json`) and writes it (`--json-out`), says how long it took, and exits 1
/// naming what failed.
pub fn json_main(
    prog: &str,
    json: bool,
    json_out: Option<&Path>,
    run: impl FnOnce() -> Result<serde_json::Value, String>,
) {
    let die = |e: String| -> ! {
        eprintln!("{prog}: {e}");
        std::process::exit(1);
    };
    if let Some(p) = json_out {
        json_out_ready(p).unwrap_or_else(|e| die(e));
    }
    let t = std::time::Instant::now();
    match run() {
        Ok(v) => {
            if json {
                println!("{v}");
            }
            if let Some(p) = json_out {
                write_json(p, &v).unwrap_or_else(|e| die(e));
            }
            eprintln!("{prog}: done in {:.0} s", t.elapsed().as_secs_f64());
        }
        Err(e) => die(format!("FAILED: {e}")),
    }
}

// ---- repetitions -----------------------------------------------------------------------------

pub fn median(v: &[f64]) -> f64 {
    median_p90(v).0
}

/// The order of `n` kinds in repetition `rep`: rotated, and reversed every other time, so no
/// kind always follows the same other one.
pub fn order(n: usize, rep: usize) -> Vec<usize> {
    let mut o: Vec<usize> = (0..n).map(|i| (i + rep) % n).collect();
    if rep % 2 == 1 {
        o.reverse();
    }
    o
}

// ---- storage ----------------------------------------------------------------------------------

/// Collective: refuse to start a part when a node cannot hold what its ranks need: per rank,
/// `mem_per_rank` bytes of memory and `disk_per_rank` bytes of files under `root` (memory too
/// when `root` is on tmpfs), plus `slack` bytes per node.
pub fn check_fits(
    mpi: &Mpi,
    root: &Path,
    mem_per_rank: u64,
    disk_per_rank: u64,
    slack: u64,
) -> Res<()> {
    let node = mpi.world.split_shared(mpi.rank as i32);
    let local = node.size() as u64;
    let check = || -> Result<(), String> {
        let tmpfs = on_tmpfs(root);
        let need = local * (mem_per_rank + if tmpfs { disk_per_rank } else { 0 }) + slack;
        let avail = meminfo("MemAvailable").ok_or("cannot read MemAvailable")?;
        if avail < need {
            return Err(format!(
                "{local} ranks need {} MiB of memory on this node (buffers and tmpfs files), {} MiB is available; use smaller sizes",
                need >> 20,
                avail >> 20
            ));
        }
        let space =
            fs_available(root).ok_or_else(|| format!("cannot statvfs {}", root.display()))?;
        if space < local * disk_per_rank + slack {
            return Err(format!(
                "{local} ranks need {} MiB on {}, {} MiB is free; use smaller sizes",
                (local * disk_per_rank + slack) >> 20,
                root.display(),
                space >> 20
            ));
        }
        Ok(())
    };
    let res = if node.rank() == 0 { check() } else { Ok(()) };
    mpi.agree("memory check", res)
}

/// Collective: remove checkpoint `name` from every simulated node's directory under the
/// node-local tier root `local` and, with `global`, from that global tier root. All nodes
/// share this host, so rank 0 does it for all.
pub fn remove_ckpt(mpi: &Mpi, local: &Path, global: Option<&Path>, name: &str) -> Res<()> {
    mpi.world.barrier();
    let res = if mpi.rank == 0 {
        (|| -> Result<(), String> {
            let nodes = fs::read_dir(local).map_err(|e| format!("{}: {e}", local.display()))?;
            let mut dirs: Vec<PathBuf> = Vec::new();
            for n in nodes {
                dirs.push(n.map_err(|e| e.to_string())?.path().join(name));
            }
            dirs.extend(global.map(|g| g.join(name)));
            for d in dirs {
                if d.exists() {
                    fs::remove_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
                }
            }
            Ok(())
        })()
    } else {
        Ok(())
    };
    mpi.agree("remove a checkpoint", res)
}

// ---- tables ----------------------------------------------------------------------------------

/// Seconds as the tables print them: milliseconds below one second.
pub fn secs(s: f64) -> String {
    if s < 1.0 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{s:.3} s")
    }
}

/// `a / b` of two medians, NaN when either side has no samples.
pub fn ratio(a: &[f64], b: &[f64]) -> f64 {
    if a.is_empty() || b.is_empty() {
        f64::NAN
    } else {
        median(a) / median(b)
    }
}

/// A ratio as the tables print it: `1.23x`, or `-` when it was not measured.
pub fn x(r: f64) -> String {
    if r.is_nan() {
        "-".into()
    } else {
        format!("{r:.2}x")
    }
}

/// Whether ratio `r` meets `target` (at most), or `not measured`.
pub fn verdict_ratio(r: f64, target: f64) -> String {
    if r.is_nan() {
        "not measured".into()
    } else {
        verdict(r <= target).into()
    }
}

/// A row of a table: a series' median and its span, the name in a column `width` wide.
pub fn row(width: usize, name: &str, v: &[f64]) -> String {
    if v.is_empty() {
        return format!("   {name:<width$} {:>10}", "-");
    }
    let (l, h) = span(v);
    format!(
        "   {name:<width$} {:>10}   {} .. {}",
        secs(median(v)),
        secs(l),
        secs(h)
    )
}

/// The head of the columns of `row`.
pub fn head(width: usize) -> String {
    format!("   {:<width$} {:>10}   runs", "", "median")
}

/// Text lines, unless the run prints JSON.
pub struct Out {
    pub json: bool,
}

impl Out {
    pub fn line(&self, s: impl AsRef<str>) {
        if !self.json {
            println!("{}", s.as_ref());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_rotate_and_cover() {
        for rep in 0..6 {
            let mut o = order(5, rep);
            o.sort();
            assert_eq!(o, vec![0, 1, 2, 3, 4]);
        }
        assert_ne!(order(5, 0), order(5, 1));
        assert_ne!(order(5, 1)[1], order(5, 0)[1]);
    }
}
