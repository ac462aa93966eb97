//! `cairn-bench-fs`: the write and read bandwidth of Cairn's in-memory checkpoint file system
//! (the shared-memory chunk store of `cairn-shm`), each figure next to baselines measured in
//! the same run: memcpy into pre-faulted memory and write() to a new file in /dev/shm.
//!
//! Five parts: one writer; two writer processes sharing one store; a chunk-size sweep (CRUISE's
//! figure 6); spill-over to a file on disk against the CRUISE model; and, when the LD_PRELOAD
//! interposer is built and works, the one-writer test through it. Kinds of a part run in an
//! order that rotates between repetitions, after one untimed run of each; the figures are
//! medians and the ratios are the result (the machine is small and shared, so absolute speeds
//! move from run to run).
//!
//! Every store the run creates has a unique name and is wiped when it is dropped, so error
//! paths clean up too; so are temporary files, the spill directory and the interposer's
//! stores. Two hidden subcommands are the child processes: `__writer` (one of the two
//! writers, driven over its stdin and stdout) and `__file-writer` (the interposer test).

use cairn_bench::{count, fs_available, list, median, meminfo, order, walk, MIB};
use cairn_shm::{Store, StoreConfig};
use serde_json::{json, Value};
use std::fs::{self, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

const PROG: &str = "cairn-bench-fs";
const USAGE: &str = "usage: cairn-bench-fs [--sizes MIB,...] [--io BYTES] [--reps N] [--chunks BYTES,...] [--spill-dir DIR] [--only single|two|chunks|spill|preload[,...]] [--quick] [--json] [--json-out FILE]";

/// The chunk size of the stores outside the chunk sweep: `[tiers.mem] chunk`'s default.
const STORE_CHUNK: usize = 1 << 20;
/// Memory to leave free beside what a test needs.
const SLACK: u64 = 256 << 20;
/// Targets of issue 6: the store against memcpy into pre-faulted memory and against write()
/// to /dev/shm.
const TARGET_MEMCPY: f64 = 0.9;
const TARGET_SHM: f64 = 3.0;
const SHM: &str = "/dev/shm";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Single,
    Two,
    Chunks,
    Spill,
    Preload,
}

const PARTS: [(Part, &str); 5] = [
    (Part::Single, "single"),
    (Part::Two, "two"),
    (Part::Chunks, "chunks"),
    (Part::Spill, "spill"),
    (Part::Preload, "preload"),
];

#[derive(Debug)]
struct Args {
    /// File sizes, MiB.
    sizes: Vec<usize>,
    /// Bytes per write() / pwrite / pread.
    io: usize,
    reps: usize,
    /// Chunk sizes of the sweep, bytes.
    chunks: Vec<usize>,
    /// Where the spill files go (in a private directory made for the run).
    spill_dir: PathBuf,
    parts: Vec<Part>,
    quick: bool,
    json: bool,
    /// `--json-out`: where the JSON object is also written.
    json_out: Option<PathBuf>,
}

/// `4096`, `64K`, `1M` or `1G` as bytes.
fn bytes(v: &str) -> Option<usize> {
    let v = v.trim();
    let shift = match v.chars().last()? {
        'k' | 'K' => 10,
        'm' | 'M' => 20,
        'g' | 'G' => 30,
        _ => 0,
    };
    let digits = if shift == 0 { v } else { &v[..v.len() - 1] };
    digits.parse::<usize>().ok()?.checked_mul(1 << shift)
}

/// Parse the command line; `Ok(None)` asks for the usage text.
fn parse_args(argv: Vec<String>) -> Result<Option<Args>, String> {
    let (mut sizes, mut reps, mut chunks) = (None, None, None);
    let mut a = Args {
        sizes: vec![],
        io: 1 << 20,
        reps: 0,
        chunks: vec![],
        spill_dir: PathBuf::from("/tmp"),
        parts: PARTS.iter().map(|p| p.0).collect(),
        quick: false,
        json: false,
        json_out: None,
    };
    let go = walk(argv, |flag, value| {
        match flag {
            "--sizes" => sizes = Some(list(flag, &value()?, 1)?),
            "--io" => {
                let v = value()?;
                a.io = bytes(&v)
                    .filter(|n| (1..=1 << 30).contains(n))
                    .ok_or(format!("--io {v:?}: expected a size from 1 byte to 1G"))?;
            }
            "--reps" => reps = Some(count(flag, value()?, 1)?),
            "--chunks" => {
                let v = value()?;
                let c: Option<Vec<usize>> = v.split(',').map(bytes).collect();
                chunks = Some(
                    c.filter(|c| {
                        c.iter()
                            .all(|&n| n >= 4096 && n % 4096 == 0 && n <= 1 << 30)
                    })
                    .ok_or(format!(
                        "--chunks {v:?}: expected sizes such as 64K,1M, multiples of 4K up to 1G"
                    ))?,
                );
            }
            "--spill-dir" => a.spill_dir = PathBuf::from(value()?),
            "--only" => {
                let v = value()?;
                a.parts = v
                    .split(',')
                    .map(|w| PARTS.iter().find(|p| p.1 == w).map(|p| p.0))
                    .collect::<Option<Vec<Part>>>()
                    .ok_or(format!(
                        "--only {v:?}: expected single, two, chunks, spill or preload (comma-separated)"
                    ))?;
            }
            "--quick" => a.quick = true,
            "--json" => a.json = true,
            "--json-out" => a.json_out = Some(PathBuf::from(value()?)),
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    if !go {
        return Ok(None);
    }
    a.sizes = sizes.unwrap_or(if a.quick {
        vec![16, 32]
    } else {
        vec![64, 128, 256, 512]
    });
    a.reps = reps.unwrap_or(if a.quick { 3 } else { 5 });
    a.chunks = chunks.unwrap_or_else(|| {
        let k: &[usize] = if a.quick {
            &[64 << 10, 1 << 20, 4 << 20]
        } else {
            &[64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20]
        };
        k.to_vec()
    });
    Ok(Some(a))
}

// ---- what the run creates, removed when dropped ------------------------------------------

/// A store this run created: dropping it wipes it (segment and spill file); the mapping goes
/// with the handle.
struct Owned {
    store: Store,
    spill: Option<PathBuf>,
}

impl std::ops::Deref for Owned {
    type Target = Store;
    fn deref(&self) -> &Store {
        &self.store
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        let _ = Store::wipe(self.store.name(), self.spill.as_deref());
    }
}

/// The name of a store of this run: `/cairn-bench-<pid>-<what>`.
fn store_name(what: &str) -> String {
    format!("/cairn-bench-{}-{what}", std::process::id())
}

/// Create the store `store_name(what)` with a pool of `pool` bytes in `chunk`-byte chunks and,
/// with `spill`, a spill file of that many bytes in that directory.
fn new_store(
    what: &str,
    pool: usize,
    chunk: usize,
    spill: Option<(&Path, usize)>,
) -> Result<Owned, String> {
    let name = store_name(what);
    let spill_file = spill.map(|(dir, _)| cairn_shm::spill_path(dir, &name));
    // A store of that name can only be left by an earlier run with the same pid that was
    // killed; attaching to it would keep its sizes, so remove it first.
    let _ = Store::wipe(&name, spill_file.as_deref());
    let cfg = StoreConfig {
        max_files: 64,
        spill: spill_file.clone(),
        spill_size: spill.map_or(0, |s| s.1 as u64),
        ..StoreConfig::new(&name, pool as u64, chunk as u64)
    };
    match Store::open(&cfg) {
        Ok(store) => Ok(Owned {
            store,
            spill: spill_file,
        }),
        Err(e) => {
            let _ = Store::wipe(&name, spill_file.as_deref());
            Err(e.to_string())
        }
    }
}

/// A file or directory removed when dropped.
struct Temp(PathBuf);

impl Drop for Temp {
    fn drop(&mut self) {
        if self.0.is_dir() {
            let _ = fs::remove_dir_all(&self.0);
        } else {
            let _ = fs::remove_file(&self.0);
        }
    }
}

/// A temporary file `/dev/shm/cairn-bench-<pid>-<what>.tmp` (not created here).
fn shm_temp(what: &str) -> Temp {
    Temp(Path::new(SHM).join(format!("cairn-bench-{}-{what}.tmp", std::process::id())))
}

/// The stores the interposer made for job `.0`: every `/dev/shm/cairn-*-<job>-*` is wiped when
/// dropped, whatever node or process index the interposer named it with.
struct JobStores(String);

impl Drop for JobStores {
    fn drop(&mut self) {
        let Ok(dir) = fs::read_dir(SHM) else { return };
        let infix = format!("-{}-", self.0);
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("cairn-") && name.contains(&infix) {
                let _ = Store::wipe(&format!("/{name}"), None);
            }
        }
    }
}

// ---- measurements ----------------------------------------------------------------------------

/// One untimed run of each of `kinds` kinds, then `reps` timed rounds in an order that rotates
/// (and reverses every other round). `run(k)` performs kind k and returns its own measurement
/// (so each kind times only its own region).
fn rounds<T>(
    kinds: usize,
    reps: usize,
    mut run: impl FnMut(usize) -> Result<T, String>,
) -> Result<Vec<Vec<T>>, String> {
    for k in 0..kinds {
        run(k)?;
    }
    let mut out: Vec<Vec<T>> = (0..kinds).map(|_| Vec::with_capacity(reps)).collect();
    for rep in 0..reps {
        for k in order(kinds, rep) {
            out[k].push(run(k)?);
        }
    }
    Ok(out)
}

fn secs(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

/// MB/s (10^6 bytes per second).
fn mbs(bytes: usize, s: f64) -> f64 {
    bytes as f64 / s / 1e6
}

/// A series in JSON: median, every sample and the bandwidth at the median.
fn series(samples: &[f64], bytes: usize) -> Value {
    json!({"median_s": median(samples), "samples_s": samples, "mb_s": mbs(bytes, median(samples))})
}

/// Where buffers start relative to a page: 16 bytes past a boundary, where glibc's malloc puts
/// large blocks (it maps them and keeps a 16-byte header). Store chunks are page-aligned, and
/// how the two line up decides the speed of some copies (see the chunk sweep).
const SKEW: usize = 16;

/// `n` bytes of anonymous memory starting `skew` bytes past a page boundary, every page
/// written before use (pre-faulted).
struct Buf {
    v: Vec<u8>,
    at: usize,
    n: usize,
}

impl Buf {
    fn new(n: usize, skew: usize) -> Buf {
        let v = vec![0x5au8; n + 8192];
        let at = (4096 - v.as_ptr() as usize % 4096) % 4096 + skew;
        Buf { v, at, n }
    }

    /// `n` pseudo-random bytes (cairn_bench::filled with `seed`).
    fn filled(n: usize, seed: u64, skew: usize) -> Buf {
        let mut b = Buf::new(n, skew);
        b.get_mut().copy_from_slice(&cairn_bench::filled(n, seed));
        b
    }

    fn get(&self) -> &[u8] {
        &self.v[self.at..self.at + self.n]
    }

    fn get_mut(&mut self) -> &mut [u8] {
        &mut self.v[self.at..self.at + self.n]
    }
}

/// memcpy of `src` into `dst` (pre-faulted), in one call or in `piece`-byte calls.
fn copy(dst: &mut [u8], src: &[u8], piece: Option<usize>) -> f64 {
    let t = Instant::now();
    match piece {
        None => dst.copy_from_slice(src),
        Some(p) => {
            for (d, s) in dst.chunks_mut(p).zip(src.chunks(p)) {
                d.copy_from_slice(s);
            }
        }
    }
    std::hint::black_box(&mut *dst);
    secs(t)
}

/// Write `data` to the store file `path` (created, or emptied) in `io`-byte writes, then with
/// `sync` make spill data durable; the seconds from the create to the last return.
fn store_write(
    store: &Store,
    path: &str,
    data: &[u8],
    io: usize,
    sync: bool,
) -> Result<f64, String> {
    let t = Instant::now();
    let fh = store.create(path, true).map_err(|e| e.to_string())?;
    for (i, piece) in data.chunks(io).enumerate() {
        store
            .write_all_at(fh, piece, (i * io) as u64)
            .map_err(|e| e.to_string())?;
    }
    if sync {
        store.sync().map_err(|e| e.to_string())?;
    }
    Ok(secs(t))
}

/// Read the store file `path` into `dst` (pre-faulted) with `io`-byte preads.
fn store_read(store: &Store, path: &str, dst: &mut [u8], io: usize) -> Result<f64, String> {
    let t = Instant::now();
    let fh = store.open_existing(path).map_err(|e| e.to_string())?;
    for (i, piece) in dst.chunks_mut(io).enumerate() {
        store
            .read_exact_at(fh, piece, (i * io) as u64)
            .map_err(|e| e.to_string())?;
    }
    Ok(secs(t))
}

/// write() `data` in `io`-byte pieces to the new file `path` (O_CREAT|O_EXCL, 0600), then close
/// it; the seconds from the open to the close. The caller removes the file.
fn file_write(path: &Path, data: &[u8], io: usize) -> Result<f64, String> {
    let t = Instant::now();
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    for piece in data.chunks(io) {
        f.write_all(piece)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    drop(f);
    Ok(secs(t))
}

/// The pool of a store holding `bytes` of files in `chunk`-byte chunks, with two chunks to
/// spare.
fn pool_for(bytes: usize, chunk: usize) -> usize {
    bytes.div_ceil(chunk) * chunk + 2 * chunk
}

/// The /dev/shm bytes of a store's segment: the pool plus at most 4 MiB of metadata and
/// alignment at the sizes used here.
fn segment(pool: usize) -> u64 {
    pool as u64 + (4 << 20)
}

/// Why `shm` bytes of /dev/shm plus `mem` bytes of process memory do not fit, if they don't.
/// Shared memory cannot be reclaimed (there is no swap), so both come out of MemAvailable.
fn lacks(shm: u64, mem: u64) -> Option<String> {
    let free = fs_available(Path::new(SHM)).unwrap_or(0);
    let avail = meminfo("MemAvailable").unwrap_or(0);
    if shm + (64 << 20) > free || shm + mem + SLACK > avail {
        Some(format!(
            "needs {} MiB of {SHM} ({} MiB free) and {} MiB of memory in all ({} MiB available)",
            shm >> 20,
            free >> 20,
            (shm + mem + SLACK) >> 20,
            avail >> 20
        ))
    } else {
        None
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds: one clock for all processes of the machine, so two
/// writers' start and end times can be compared.
fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A mount: the file system holding a path.
#[derive(Debug, Clone, PartialEq)]
struct Mount {
    /// The mount's id, as in /proc/self/mountinfo (and statx's `stx_mnt_id`).
    id: u64,
    fstype: String,
    /// The mount's source: a device, or a name such as "tmpfs".
    source: String,
    /// The mount point, as this process sees it (relative to its root).
    point: PathBuf,
}

/// A field of /proc/self/mountinfo with the kernel's octal escapes (`\040` for a space,
/// `\011`, `\012`, `\134`) undone.
fn unescape_mount_field(f: &str) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStringExt;
    let b = f.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match oct {
            Some(d) if b[i] == b'\\' => {
                let v = d.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0'));
                out.push(v as u8);
                i += 4;
            }
            _ => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    std::ffi::OsString::from_vec(out)
}

/// One line of /proc/self/mountinfo: "id parent major:minor root point options [optional
/// fields] - fstype source super-options".
fn parse_mountinfo_line(line: &str) -> Option<Mount> {
    let (head, tail) = line.split_once(" - ")?;
    let h: Vec<&str> = head.split(' ').collect();
    let t: Vec<&str> = tail.split(' ').collect();
    if h.len() < 6 || t.len() < 2 {
        return None;
    }
    Some(Mount {
        id: h[0].parse().ok()?,
        fstype: t[0].to_string(),
        source: unescape_mount_field(t[1]).to_string_lossy().into_owned(),
        point: PathBuf::from(unescape_mount_field(h[4])),
    })
}

/// The file system holding `p`: the mount in /proc/self/mountinfo with the longest mount
/// point above `p` (of equal ones the last, which hides the others). A mount point outside
/// this process's root (in a chroot, or some containers) is not listed, so `/` may have
/// none: then the error says so, naming the path.
fn mount_of(p: &Path) -> Result<Mount, String> {
    let p = p
        .canonicalize()
        .map_err(|e| format!("cannot resolve {}: {e}", p.display()))?;
    let info = "/proc/self/mountinfo";
    let text = fs::read_to_string(info).map_err(|e| {
        format!(
            "cannot read {info} to find the file system of {}: {e}",
            p.display()
        )
    })?;
    let mut best: Option<Mount> = None;
    for m in text.lines().filter_map(parse_mountinfo_line) {
        let longer = best.as_ref().map_or(true, |b| {
            m.point.as_os_str().len() >= b.point.as_os_str().len()
        });
        if p.starts_with(&m.point) && longer {
            best = Some(m);
        }
    }
    best.ok_or_else(|| {
        format!(
            "no mount point listed in {info} holds {} (here / is not one, as in a chroot)",
            p.display()
        )
    })
}

/// The sizes (MiB) whose needs fit, given per size the /dev/shm and memory bytes; prints (or
/// records) why the others are skipped.
fn fitting(
    sizes: &[usize],
    need: impl Fn(usize) -> (u64, u64),
    out: &Out,
    skipped: &mut Vec<Value>,
) -> Vec<usize> {
    let mut ok = Vec::new();
    for &mib in sizes {
        let (shm, mem) = need(mib << 20);
        match lacks(shm, mem) {
            None => ok.push(mib),
            Some(why) => {
                out.line(format!("  {mib} MiB skipped: {why}"));
                skipped.push(json!({"size_mib": mib, "reason": why}));
            }
        }
    }
    ok
}

// ---- output --------------------------------------------------------------------------------

/// The readable tables, unless `--json` asked for one JSON object instead.
struct Out {
    json: bool,
}

impl Out {
    fn line(&self, s: impl AsRef<str>) {
        if !self.json {
            println!("{}", s.as_ref());
        }
    }
}

/// One size's reading of a target: (size MiB, ratio of medians, median of per-repetition
/// ratios).
type Reading = (usize, f64, f64);

/// The median of the per-repetition ratios `base[i] / t[i]` (kinds of one repetition run back
/// to back, so this reading is less exposed to slow phases of a shared machine).
fn paired(base: &[f64], t: &[f64]) -> f64 {
    let r: Vec<f64> = base.iter().zip(t).map(|(b, t)| b / t).collect();
    median(&r)
}

/// "MEETS"/"MISSES" over the sizes: the line and whether all meet. The verdict goes by the ratio
/// of medians, and the line says so when the per-repetition reading falls on the other side.
fn target_line(what: &str, target: f64, rows: &[Reading]) -> (String, bool) {
    let miss = |r: f64| r < target;
    let missed: Vec<String> = rows
        .iter()
        .filter(|r| miss(r.1))
        .map(|r| format!("{} MiB", r.0))
        .collect();
    let low = rows.iter().min_by(|a, b| a.1.total_cmp(&b.1));
    let meets = missed.is_empty() && !rows.is_empty();
    let mut detail = match low {
        None => "no size measured".to_string(),
        Some(l) if meets => format!("at every size, lowest {:.2}x at {} MiB", l.1, l.0),
        Some(l) => format!(
            "at {}, lowest {:.2}x at {} MiB",
            missed.join(", "),
            l.1,
            l.0
        ),
    };
    for r in rows.iter().filter(|r| miss(r.1) != miss(r.2)) {
        detail += &format!(
            "; noisy at {} MiB: the per-repetition ratios give {:.2}x",
            r.0, r.2
        );
    }
    (
        format!(
            "  target: {} {what} >= {target}x: {detail}",
            cairn_bench::verdict(meets)
        ),
        meets,
    )
}

fn x(r: f64) -> String {
    format!("{r:.2}x")
}

fn bw(bytes: usize, s: f64) -> String {
    format!("{:.0}", mbs(bytes, s))
}

// ---- 1. one writer -------------------------------------------------------------------------

const SINGLE_KINDS: [&str; 4] = ["memcpy", "memcpy_pieces", "store", "dev_shm"];

/// The sizes at which one writer fits: a store holding the file and the /dev/shm file, plus a
/// source and a destination buffer.
fn one_writer_sizes(a: &Args, out: &Out, skipped: &mut Vec<Value>) -> Vec<usize> {
    fitting(
        &a.sizes,
        |s| (segment(pool_for(s, STORE_CHUNK)) + s as u64, 2 * s as u64),
        out,
        skipped,
    )
}

/// The table line, the JSON row and both targets' readings (size, ratio of medians, median of
/// per-repetition ratios) of one size in parts 1 and 2, from the samples of SINGLE_KINDS;
/// `bytes` is what all writers wrote.
fn kinds_row(mib: usize, bytes: usize, t: &[Vec<f64>]) -> (String, Value, Reading, Reading) {
    let m: Vec<f64> = t.iter().map(|v| median(v)).collect();
    let (r_memcpy, r_pieces, r_shm) = (m[0] / m[2], m[1] / m[2], m[3] / m[2]);
    let (p_memcpy, p_shm) = (paired(&t[0], &t[2]), paired(&t[3], &t[2]));
    let line = format!(
        "{:>4} MiB {:>8} {:>9} {:>8} {:>8}  {:>8} {:>8} {:>8}",
        mib,
        bw(bytes, m[0]),
        bw(bytes, m[1]),
        bw(bytes, m[2]),
        bw(bytes, m[3]),
        x(r_memcpy),
        x(r_pieces),
        x(r_shm)
    );
    let mut row = json!({
        "size_mib": mib, "store_vs_memcpy": r_memcpy, "store_vs_memcpy_pieces": r_pieces,
        "store_vs_dev_shm": r_shm,
        "store_vs_memcpy_per_rep": p_memcpy, "store_vs_dev_shm_per_rep": p_shm,
        "meets_memcpy_target": r_memcpy >= TARGET_MEMCPY, "meets_dev_shm_target": r_shm >= TARGET_SHM,
    });
    for (k, name) in SINGLE_KINDS.iter().enumerate() {
        row[*name] = series(&t[k], bytes);
    }
    (line, row, (mib, r_memcpy, p_memcpy), (mib, r_shm, p_shm))
}

/// Print both targets' lines for parts 1 and 2; their JSON.
fn both_targets(out: &Out, what: &str, vs_memcpy: &[Reading], vs_shm: &[Reading]) -> Value {
    let (l1, m1) = target_line(&format!("store / memcpy{what}"), TARGET_MEMCPY, vs_memcpy);
    let (l2, m2) = target_line(
        &format!("store / write() to /dev/shm{what}"),
        TARGET_SHM,
        vs_shm,
    );
    out.line(l1);
    out.line(l2);
    json!({
        "store_vs_memcpy": {"target": TARGET_MEMCPY, "meets": m1},
        "store_vs_dev_shm": {"target": TARGET_SHM, "meets": m2},
    })
}

fn single(a: &Args, out: &Out) -> Result<Value, String> {
    out.line(format!(
        "\n1. One writer: a file written in {} writes (store chunk {}), MB/s, medians of {}",
        label(a.io),
        label(STORE_CHUNK),
        a.reps
    ));
    let mut skipped = Vec::new();
    let sizes = one_writer_sizes(a, out, &mut skipped);
    let max = sizes.iter().max().copied().unwrap_or(0) << 20;
    let src = Buf::filled(max, 1, SKEW);
    let src = src.get();
    let mut dst = Buf::new(max, SKEW);
    let dst = dst.get_mut();
    let tmp = shm_temp("single");
    out.line(format!(
        "{:>8} {:>8} {:>9} {:>8} {:>8}  {:>8} {:>8} {:>8}",
        "size", "memcpy", "memcpy-io", "store", "dev/shm", "/memcpy", "/mcp-io", "/devshm"
    ));
    let mut rows = Vec::new();
    let (mut vs_memcpy, mut vs_shm) = (Vec::new(), Vec::new());
    for &mib in &sizes {
        let s = mib << 20;
        let store = new_store(
            &format!("single-{mib}"),
            pool_for(s, STORE_CHUNK),
            STORE_CHUNK,
            None,
        )?;
        let t = rounds(SINGLE_KINDS.len(), a.reps, |k| match k {
            0 => Ok(copy(&mut dst[..s], &src[..s], None)),
            1 => Ok(copy(&mut dst[..s], &src[..s], Some(a.io))),
            2 => {
                let t = store_write(&store, "bench", &src[..s], a.io, false)?;
                let size = store.stat("bench").map_err(|e| e.to_string())?.size;
                if size != s as u64 {
                    return Err(format!("the store file has {size} bytes after writing {s}"));
                }
                store.unlink("bench").map_err(|e| e.to_string())?;
                Ok(t)
            }
            _ => {
                let t = file_write(&tmp.0, &src[..s], a.io)?;
                fs::remove_file(&tmp.0).map_err(|e| e.to_string())?;
                Ok(t)
            }
        })?;
        let (line, row, vm, vs) = kinds_row(mib, s, &t);
        out.line(line);
        vs_memcpy.push(vm);
        vs_shm.push(vs);
        rows.push(row);
    }
    out.line(format!(
        "  memcpy: one call into pre-faulted anonymous memory; memcpy-io: the same in {} calls;\n  \
         store: create + pwrite in {} pieces; dev/shm: open(O_CREAT|O_EXCL) + write() in {} pieces + close\n  \
         (removing the file is not timed, on either side); ratios are store bandwidth / the column's",
        label(a.io),
        label(a.io),
        label(a.io)
    ));
    let targets = both_targets(out, "", &vs_memcpy, &vs_shm);
    Ok(json!({
        "chunk": STORE_CHUNK, "io": a.io,
        "buffers": format!("anonymous memory, pre-faulted, {SKEW} bytes past a page boundary"),
        "rows": rows, "skipped": skipped, "targets": targets,
    }))
}

fn label(bytes: usize) -> String {
    if bytes >= MIB && bytes % MIB == 0 {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= 1024 && bytes % 1024 == 0 {
        format!("{} KiB", bytes / 1024)
    } else {
        format!("{bytes} B")
    }
}

// ---- 2. two writer processes -----------------------------------------------------------------

/// One writer process (this program's hidden `__writer`), driven line by line: the parent sends
/// a kind, the child prepares and answers `ready`; the parent sends `go <t>` to both children,
/// each spins until CLOCK_MONOTONIC reaches t (so neither start waits for a wake-up), runs, and
/// answers `done <start ns> <end ns>` after cleaning up untimed.
struct Writer {
    child: Child,
    tx: ChildStdin,
    rx: BufReader<ChildStdout>,
}

impl Writer {
    fn spawn(args: &[String]) -> Result<Writer, String> {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
        let mut child = Command::new(exe)
            .arg("__writer")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start a writer process: {e}"))?;
        let tx = child.stdin.take().expect("piped stdin");
        let rx = BufReader::new(child.stdout.take().expect("piped stdout"));
        Ok(Writer { child, tx, rx })
    }

    fn send(&mut self, what: &str) -> Result<(), String> {
        writeln!(self.tx, "{what}")
            .and_then(|_| self.tx.flush())
            .map_err(|e| format!("writer process {}: {e}", self.child.id()))
    }

    /// The next line, which must start with `word`; the rest of it.
    fn expect(&mut self, word: &str) -> Result<String, String> {
        let mut line = String::new();
        let n = self.rx.read_line(&mut line).map_err(|e| e.to_string())?;
        let line = line.trim_end();
        match line.strip_prefix(word) {
            Some(rest) if n > 0 => Ok(rest.trim().to_string()),
            _ if n == 0 => Err(format!("writer process {} exited", self.child.id())),
            _ => Err(format!("writer process {}: {line}", self.child.id())),
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // A normal end sent `quit`; on an error path the child may still run: stop it (it is
        // this process's own child, stopped by its pid).
        let _ = writeln!(self.tx, "quit");
        let _ = self.tx.flush();
        if let Ok(None) = self.child.try_wait() {
            std::thread::sleep(std::time::Duration::from_millis(200));
            if let Ok(None) = self.child.try_wait() {
                let _ = self.child.kill();
            }
        }
        let _ = self.child.wait();
    }
}

/// Run kind `what` in every writer at once: the aggregate time (first start to last end) and
/// the overlap (time all ran / aggregate time).
fn together(ws: &mut [Writer], what: &str) -> Result<(f64, f64), String> {
    for w in ws.iter_mut() {
        w.send(what)?;
    }
    for w in ws.iter_mut() {
        w.expect("ready")?;
    }
    // Both children are waiting in read(); 5 ms is ample for both to wake and start spinning.
    let start = mono_ns() + 5_000_000;
    for w in ws.iter_mut() {
        w.send(&format!("go {start}"))?;
    }
    let mut spans = Vec::new();
    for w in ws.iter_mut() {
        let rest = w.expect("done")?;
        let v: Vec<u64> = rest.split(' ').filter_map(|t| t.parse().ok()).collect();
        if v.len() != 2 {
            return Err(format!("writer process answered {rest:?}"));
        }
        spans.push((v[0], v[1]));
    }
    let first = spans.iter().map(|s| s.0).min().unwrap_or(0);
    let last = spans.iter().map(|s| s.1).max().unwrap_or(0);
    let all_start = spans.iter().map(|s| s.0).max().unwrap_or(0);
    let first_end = spans.iter().map(|s| s.1).min().unwrap_or(0);
    let total = (last - first) as f64;
    Ok((total / 1e9, (first_end as f64 - all_start as f64) / total))
}

fn two(a: &Args, out: &Out) -> Result<Value, String> {
    out.line(format!(
        "\n2. Two writer processes at once, each its own file in {} writes; aggregate MB/s (both files / first start to last end), medians of {}",
        label(a.io),
        a.reps
    ));
    let mut skipped = Vec::new();
    let sizes = fitting(
        &a.sizes,
        |s| {
            (
                segment(2 * pool_for(s, STORE_CHUNK)) + 2 * s as u64,
                4 * s as u64,
            )
        },
        out,
        &mut skipped,
    );
    out.line(format!(
        "{:>8} {:>8} {:>9} {:>8} {:>8}  {:>8} {:>8} {:>8}  {:>7}",
        "size",
        "memcpy",
        "memcpy-io",
        "store",
        "dev/shm",
        "/memcpy",
        "/mcp-io",
        "/devshm",
        "overlap"
    ));
    let (mut rows, mut vs_memcpy, mut vs_shm) = (Vec::new(), Vec::new(), Vec::new());
    for &mib in &sizes {
        let s = mib << 20;
        let store = new_store(
            &format!("two-{mib}"),
            2 * pool_for(s, STORE_CHUNK),
            STORE_CHUNK,
            None,
        )?;
        let temps: Vec<Temp> = (0..2).map(|i| shm_temp(&format!("two-{i}"))).collect();
        let mut ws = Vec::new();
        for (i, tmp) in temps.iter().enumerate() {
            ws.push(Writer::spawn(&[
                format!("--size={s}"),
                format!("--io={}", a.io),
                format!("--store={}", store.name()),
                format!("--file=writer{i}"),
                format!("--shm={}", tmp.0.display()),
                format!("--seed={}", i + 1),
            ])?);
        }
        let t = rounds(SINGLE_KINDS.len(), a.reps, |k| {
            together(&mut ws, SINGLE_KINDS[k])
        })?;
        drop(ws);
        let times: Vec<Vec<f64>> = t.iter().map(|v| v.iter().map(|p| p.0).collect()).collect();
        let overlap: Vec<f64> = t[2].iter().map(|p| p.1).collect();
        let (line, mut row, vm, vs) = kinds_row(mib, 2 * s, &times);
        out.line(format!("{line}  {:>6.0}%", median(&overlap) * 100.0));
        row["store_overlap"] = json!(median(&overlap));
        vs_memcpy.push(vm);
        vs_shm.push(vs);
        rows.push(row);
    }
    out.line(
        "  both processes spin until one CLOCK_MONOTONIC instant, then run; store: both write into\n  \
         one shared store; memcpy: each into its own pre-faulted anonymous memory; dev/shm: each its\n  \
         own new file; overlap: share of the store runs' span during which both were writing",
    );
    let targets = both_targets(out, " (2 writers)", &vs_memcpy, &vs_shm);
    Ok(json!({
        "writers": 2, "chunk": STORE_CHUNK, "io": a.io, "rows": rows, "skipped": skipped,
        "targets": targets,
    }))
}

/// The hidden `__writer` subcommand: one of the two writers.
fn writer_child(argv: Vec<String>) -> Result<(), String> {
    let (mut size, mut io, mut seed) = (0, 1 << 20, 1);
    let (mut store, mut file, mut shm) = (String::new(), String::new(), PathBuf::new());
    walk(argv, |flag, value| {
        match flag {
            "--size" => size = count(flag, value()?, 1)?,
            "--io" => io = count(flag, value()?, 1)?,
            "--seed" => seed = count(flag, value()?, 0)?,
            "--store" => store = value()?,
            "--file" => file = value()?,
            "--shm" => shm = PathBuf::from(value()?),
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    let src = Buf::filled(size, seed as u64, SKEW);
    let src = src.get();
    let mut dst = Buf::new(size, SKEW);
    let dst = dst.get_mut();
    let store = Store::open(&StoreConfig {
        create: false,
        ..StoreConfig::new(&store, 0, 0)
    })
    .map_err(|e| e.to_string())?;
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut next = || lines.next().and_then(|l| l.ok()).unwrap_or_default();
    let mut stdout = std::io::stdout();
    let mut say = |s: String| {
        let _ = writeln!(stdout, "{s}").and_then(|_| stdout.flush());
    };
    loop {
        let kind = next();
        if kind.is_empty() || kind == "quit" {
            return Ok(());
        }
        say("ready".into());
        let Some(start) = next()
            .strip_prefix("go ")
            .and_then(|t| t.parse::<u64>().ok())
        else {
            return Ok(());
        };
        while mono_ns() < start {
            std::hint::spin_loop();
        }
        let t0 = mono_ns();
        let r = match kind.as_str() {
            "memcpy" => Ok(copy(dst, src, None)),
            "memcpy_pieces" => Ok(copy(dst, src, Some(io))),
            "store" => store_write(&store, &file, src, io, false),
            "dev_shm" => file_write(&shm, src, io),
            other => Err(format!("unknown kind {other}")),
        };
        let t1 = mono_ns();
        let r = r.and_then(|_| match kind.as_str() {
            "store" => store.unlink(&file).map_err(|e| e.to_string()),
            "dev_shm" => fs::remove_file(&shm).map_err(|e| e.to_string()),
            _ => Ok(()),
        });
        match r {
            Ok(()) => say(format!("done {t0} {t1}")),
            Err(e) => {
                say(format!("error {e}"));
                return Err(e);
            }
        }
    }
}

// ---- 3. chunk sizes ----------------------------------------------------------------------------

fn chunks(a: &Args, out: &Out) -> Result<Value, String> {
    let biggest = *a.chunks.iter().max().expect("at least one chunk size");
    // The store holds the file read back and the one written; memory holds the source and two
    // destinations.
    let need = |f: usize| (segment(pool_for(2 * f, biggest)), 3 * f as u64);
    // 256 MiB, or the largest of --sizes below it; halved until it fits.
    let mut f = a.sizes.iter().copied().max().unwrap_or(256).min(256) << 20;
    let mut why = None;
    while let Some(w) = lacks(need(f).0, need(f).1) {
        why.get_or_insert(format!("{} MiB does not fit: {w}", f >> 20));
        if f <= MIB {
            out.line(format!("\n3. Chunk sizes: skipped ({w})"));
            return Ok(json!({"skipped": w}));
        }
        f /= 2;
    }
    out.line(format!(
        "\n3. Chunk sizes: a {} file written and read in {} pieces, MB/s, medians of {}{}",
        label(f),
        label(a.io),
        a.reps,
        why.as_ref().map_or(String::new(), |w| format!(" ({w})"))
    ));
    out.line(format!(
        "{:>8} {:>8} {:>8} {:>8} {:>8}  {:>8} {:>8} {:>8}",
        "chunk", "memcpy", "write", "read", "read-al", "w/memcpy", "r/memcpy", "ra/memcpy"
    ));
    let src = Buf::filled(f, 3, SKEW);
    let src = src.get();
    let mut dst = Buf::new(f, SKEW);
    let mut aligned = Buf::new(f, 0);
    let mut rows = Vec::new();
    for &c in &a.chunks {
        let store = new_store(&format!("chunk-{c}"), pool_for(2 * f, c), c, None)?;
        // The file the reads read, written once.
        store_write(&store, "kept", src, a.io, false)?;
        let mut checked = [false; 2];
        let t = rounds(4, a.reps, |k| match k {
            0 => Ok(copy(dst.get_mut(), src, None)),
            1 => {
                let t = store_write(&store, "bench", src, a.io, false)?;
                store.unlink("bench").map_err(|e| e.to_string())?;
                Ok(t)
            }
            _ => {
                let into = if k == 2 { &mut dst } else { &mut aligned };
                let t = store_read(&store, "kept", into.get_mut(), a.io)?;
                if !std::mem::replace(&mut checked[k - 2], true) && into.get() != src {
                    return Err(format!(
                        "chunk {c}: the bytes read differ from those written"
                    ));
                }
                Ok(t)
            }
        })?;
        let m: Vec<f64> = t.iter().map(|v| median(v)).collect();
        out.line(format!(
            "{:>8} {:>8} {:>8} {:>8} {:>8}  {:>8} {:>8} {:>8}",
            label(c).replace(' ', ""),
            bw(f, m[0]),
            bw(f, m[1]),
            bw(f, m[2]),
            bw(f, m[3]),
            x(m[0] / m[1]),
            x(m[0] / m[2]),
            x(m[0] / m[3])
        ));
        rows.push(json!({
            "chunk": c, "memcpy": series(&t[0], f), "write": series(&t[1], f),
            "read": series(&t[2], f), "read_aligned": series(&t[3], f),
            "write_vs_memcpy": m[0] / m[1], "read_vs_memcpy": m[0] / m[2],
            "read_aligned_vs_memcpy": m[0] / m[3],
        }));
    }
    out.line(format!(
        "  memcpy: one call between buffers {SKEW} bytes past a page boundary (where malloc puts large\n  \
         blocks); write: from such a buffer; read: pread into such a buffer; read-al: pread into a\n  \
         page-aligned buffer, as the store's chunks are (each read checked once against the data)"
    ));
    Ok(json!({"file_mib": f >> 20, "io": a.io, "buffer_skew": SKEW, "rows": rows, "reduced": why}))
}

// ---- 4. spill-over ----------------------------------------------------------------------------

/// CRUISE's spill-over model: the bandwidth of writing `s_mem` bytes at `t_mem` and `s_spill`
/// bytes at `t_spill` (bytes per second), one after the other.
fn cruise_model(s_mem: f64, t_mem: f64, s_spill: f64, t_spill: f64) -> f64 {
    (s_mem + s_spill) / (s_mem / t_mem + s_spill / t_spill)
}

/// Bytes of the store file `path` in the pool and in the spill file.
fn split(store: &Store, path: &str) -> Result<(u64, u64), String> {
    let fh = store.open_existing(path).map_err(|e| e.to_string())?;
    let (mut pool, mut spill) = (0, 0);
    for c in store.chunks(fh).map_err(|e| e.to_string())? {
        if c.in_spill != 0 {
            spill += c.length;
        } else {
            pool += c.length;
        }
    }
    Ok((pool, spill))
}

fn spill(a: &Args, out: &Out) -> Result<Value, String> {
    let c = STORE_CHUNK;
    let s = (a.sizes.iter().copied().max().unwrap_or(256).min(256) << 20).max(2 * c);
    let pool = (s / 2) / c * c;
    let dir = Temp(
        a.spill_dir
            .join(format!("cairn-bench-fs-{}", std::process::id())),
    );
    cairn_bench::private_dir(&dir.0)?;
    let mount = mount_of(&dir.0);
    let on = match &mount {
        Ok(m) => format!(
            "{} on {}, mounted at {}",
            m.fstype,
            m.source,
            m.point.display()
        ),
        Err(e) => format!("file system unknown: {e}"),
    };
    out.line(format!(
        "\n4. Spill-over: a {} file, {} pool, 1 MiB chunks, spill files in {} ({on}), MB/s, medians of {}",
        label(s),
        label(pool),
        dir.0.display(),
        a.reps
    ));
    let spill_bytes = (s - pool + 2 * c) + (s + 2 * c);
    let disk_free = fs_available(&dir.0).unwrap_or(0);
    let on_tmpfs = cairn_bench::on_tmpfs(&dir.0);
    let why = if disk_free < spill_bytes as u64 + (64 << 20) {
        Some(format!(
            "the spill files need {} MiB in {}, {} MiB is free",
            spill_bytes >> 20,
            dir.0.display(),
            disk_free >> 20
        ))
    } else {
        let spill_mem = if on_tmpfs { spill_bytes as u64 } else { 0 };
        let shm = segment(pool_for(s, c)) + segment(pool) + segment(c);
        lacks(shm + spill_mem, s as u64)
    };
    if let Some(w) = why {
        out.line(format!("  skipped: {w}"));
        return Ok(json!({"skipped": w}));
    }
    if on_tmpfs {
        out.line("  note: the spill directory is on tmpfs, so the spill file is memory too");
    }
    let src = Buf::filled(s, 4, SKEW);
    let src = src.get();
    let mem = new_store("spill-mem", pool_for(s, c), c, None)?;
    let mixed = new_store("spill-mixed", pool, c, Some((&dir.0, s - pool + 2 * c)))?;
    let only = new_store("spill-only", c, c, Some((&dir.0, s + 2 * c)))?;
    // The spill-only store's pool is one chunk, filled before timing: every chunk of the
    // measured file then comes from the spill file.
    store_write(&only, "fill", &src[..c], c, false)?;
    let stores = [&mem, &mixed, &only];
    let mut splits = [(0u64, 0u64); 3];
    let t = rounds(6, a.reps, |k| {
        let (store, sync) = (stores[k % 3], k >= 3);
        let t = store_write(store, "bench", src, a.io, sync)?;
        splits[k % 3] = split(store, "bench")?;
        store.unlink("bench").map_err(|e| e.to_string())?;
        Ok(t)
    })?;
    if splits[0].1 != 0 || splits[2].0 != 0 || splits[1].0 != pool as u64 {
        return Err(format!(
            "the files did not land where expected (pool, spill bytes): all-pool {:?}, mixed {:?}, spill-only {:?}",
            splits[0], splits[1], splits[2]
        ));
    }
    let (s_mem, s_spill) = (splits[1].0 as f64, splits[1].1 as f64);
    out.line(format!(
        "{:>22} {:>8} {:>10} {:>8} {:>8} {:>9}",
        "", "T_mem", "T_spill", "mixed", "model", "measured/model"
    ));
    let mut res = serde_json::Map::new();
    for (sync, name, what) in [
        (false, "no_sync", "without sync"),
        (true, "sync", "with fdatasync"),
    ] {
        let base = if sync { 3 } else { 0 };
        let med: Vec<f64> = (0..3).map(|i| median(&t[base + i])).collect();
        let bws: Vec<f64> = med.iter().map(|&m| s as f64 / m).collect();
        let model = cruise_model(s_mem, bws[0], s_spill, bws[2]);
        out.line(format!(
            "{what:>22} {:>8.0} {:>10.0} {:>8.0} {:>8.0} {:>9.2}x",
            bws[0] / 1e6,
            bws[2] / 1e6,
            bws[1] / 1e6,
            model / 1e6,
            bws[1] / model
        ));
        res.insert(
            name.into(),
            json!({
                "all_pool": series(&t[base], s), "mixed": series(&t[base + 1], s),
                "spill_only": series(&t[base + 2], s),
                "model_mb_s": model / 1e6, "measured_vs_model": bws[1] / model,
            }),
        );
    }
    out.line(format!(
        "  T_mem: the file all in the pool; T_spill: all in the spill file (pool of one chunk, already\n  \
         full); mixed: {} MiB in the pool, {} MiB spilled; model: CRUISE's S / (S_mem/T_mem + S_spill/T_spill).\n  \
         Without sync the spill writes end in the page cache; with it, store.sync() (fdatasync of the\n  \
         spill file) is inside the timed region",
        splits[1].0 >> 20,
        splits[1].1 >> 20
    ));
    res.insert("file_mib".into(), json!(s >> 20));
    res.insert("pool_mib".into(), json!(pool >> 20));
    res.insert("s_mem".into(), json!(splits[1].0));
    res.insert("s_spill".into(), json!(splits[1].1));
    res.insert(
        "spill_fs".into(),
        match &mount {
            Ok(m) => json!({"type": m.fstype, "device": m.source, "mount": m.point}),
            Err(e) => json!({"error": e}),
        },
    );
    Ok(Value::Object(res))
}

// ---- 5. through the interposer ---------------------------------------------------------------

/// Environment for a child run under the interposer with job `job` and a pool of `pool` bytes.
fn preload_env(cmd: &mut Command, lib: &Path, job: &str, pool: usize) {
    cmd.env("LD_PRELOAD", lib)
        .env("CAIRN_JOB", job)
        .env("CAIRN_TIERS_MEM_SIZE", pool.to_string())
        .env("CAIRN_TIERS_MEM_CHUNK", STORE_CHUNK.to_string())
        .env("CAIRN_TIERS_MEM_PREFIX", "/cairn")
        .env_remove("CAIRN_TIERS_MEM_SPILL_DIR");
}

/// Whether the interposer at `lib` works: dd writing /cairn/x through it must succeed and
/// leave no real /cairn/x.
fn probe(lib: &Path) -> Result<(), String> {
    let job = format!("cairn-bench-fs-{}-probe", std::process::id());
    let _stores = JobStores(job.clone());
    let real = Path::new("/cairn/x");
    let existed = real.exists();
    let mut cmd = Command::new("dd");
    cmd.args(["if=/dev/zero", "of=/cairn/x", "bs=1M", "count=1"]);
    preload_env(&mut cmd, lib, &job, 16 << 20);
    let o = cmd.output().map_err(|e| format!("cannot run dd: {e}"))?;
    if !o.status.success() {
        let err = String::from_utf8_lossy(&o.stderr);
        let last = err.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("");
        return Err(format!(
            "dd of=/cairn/x under LD_PRELOAD={} failed ({}): {last}",
            lib.display(),
            o.status
        ));
    }
    if !existed && real.exists() {
        let _ = fs::remove_file(real);
        return Err(format!(
            "{} does not interpose: dd wrote the real /cairn/x",
            lib.display()
        ));
    }
    Ok(())
}

/// Run the hidden `__file-writer` child (under the interposer when `lib` is given): its timed
/// samples, seconds.
fn file_child(
    path: &Path,
    s: usize,
    a: &Args,
    preload: Option<(&Path, &str)>,
) -> Result<Vec<f64>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("__file-writer")
        .arg(format!("--path={}", path.display()))
        .arg(format!("--size={s}"))
        .arg(format!("--io={}", a.io))
        .arg(format!("--reps={}", a.reps));
    if let Some((lib, job)) = preload {
        preload_env(&mut cmd, lib, job, pool_for(s, STORE_CHUNK));
    }
    let o = cmd
        .output()
        .map_err(|e| format!("cannot start the file writer: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "the file writer for {} failed ({}): {}",
            path.display(),
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("t ")?.parse().ok())
        .collect())
}

fn preload(a: &Args, out: &Out) -> Result<Value, String> {
    let skip = |why: String| {
        out.line(format!("\n5. interposer: skipped ({why})"));
        Ok(json!({"skipped": why}))
    };
    let Some(lib) = cairn_shm::preload_library() else {
        return skip("no libcairn-fs.so beside this program or from the build".into());
    };
    if let Err(why) = probe(&lib) {
        return skip(why);
    }
    out.line(format!(
        "\n5. Through the interposer ({}): a child writing /cairn/bench-file with std::fs::File in {} writes,\n   vs the same child writing {SHM} without it, MB/s, medians of {}",
        lib.display(),
        label(a.io),
        a.reps
    ));
    let mut skipped = Vec::new();
    let sizes = one_writer_sizes(a, out, &mut skipped);
    out.line(format!(
        "{:>8} {:>10} {:>8} {:>9}",
        "size", "interposer", "dev/shm", "/devshm"
    ));
    let (mut rows, mut vs_shm) = (Vec::new(), Vec::new());
    for (i, &mib) in sizes.iter().enumerate() {
        let s = mib << 20;
        let tmp = shm_temp("preload");
        let job = format!("cairn-bench-fs-{}-{mib}", std::process::id());
        let run_pre = || -> Result<Vec<f64>, String> {
            let _stores = JobStores(job.clone());
            file_child(Path::new("/cairn/bench-file"), s, a, Some((&lib, &job)))
        };
        let (pre, plain) = if i % 2 == 0 {
            let p = run_pre()?;
            (p, file_child(&tmp.0, s, a, None)?)
        } else {
            let q = file_child(&tmp.0, s, a, None)?;
            (run_pre()?, q)
        };
        let (mp, mq) = (median(&pre), median(&plain));
        out.line(format!(
            "{:>4} MiB {:>10} {:>8} {:>9}",
            mib,
            bw(s, mp),
            bw(s, mq),
            x(mq / mp)
        ));
        vs_shm.push((mib, mq / mp, mq / mp));
        rows.push(json!({
            "size_mib": mib, "interposer": series(&pre, s), "dev_shm": series(&plain, s),
            "interposer_vs_dev_shm": mq / mp, "meets_dev_shm_target": mq / mp >= TARGET_SHM,
        }));
    }
    out.line(format!(
        "  each child: one untimed run, then {} runs of open(O_CREAT|O_EXCL) + write() + close, the file\n  \
         removed untimed after each; the store is created by the interposer on the first open",
        a.reps
    ));
    let (line, meets) = target_line("interposer / write() to /dev/shm", TARGET_SHM, &vs_shm);
    out.line(line);
    Ok(json!({
        "library": lib, "io": a.io, "rows": rows, "skipped": skipped,
        "targets": {"interposer_vs_dev_shm": {"target": TARGET_SHM, "meets": meets}},
    }))
}

/// The hidden `__file-writer` subcommand: writes a file with std::fs (through the interposer
/// when LD_PRELOAD holds it) once untimed, checking it reads back, then `reps` timed times;
/// prints `t <seconds>` per timed run.
fn file_writer_child(argv: Vec<String>) -> Result<(), String> {
    let (mut path, mut size, mut io, mut reps) = (PathBuf::new(), 0, 1 << 20, 1);
    walk(argv, |flag, value| {
        match flag {
            "--path" => path = PathBuf::from(value()?),
            "--size" => size = count(flag, value()?, 1)?,
            "--io" => io = count(flag, value()?, 1)?,
            "--reps" => reps = count(flag, value()?, 1)?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    let src = Buf::filled(size, 5, SKEW);
    let src = src.get();
    for rep in 0..=reps {
        let t = file_write(&path, src, io)?;
        if rep == 0 {
            let back =
                fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            if back != src {
                return Err(format!(
                    "{} reads back other bytes than written",
                    path.display()
                ));
            }
        } else {
            println!("t {t}");
        }
        fs::remove_file(&path).map_err(|e| format!("cannot remove {}: {e}", path.display()))?;
    }
    Ok(())
}

// ---- main ------------------------------------------------------------------------------------

fn run(a: &Args) -> Result<Value, String> {
    let out = Out { json: a.json };
    let shm_free = fs_available(Path::new(SHM)).unwrap_or(0);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    out.line(format!(
        "{PROG}: {cores} cores, {SHM} {} MiB free, MemAvailable {} MiB; sizes {:?} MiB, writes of {}, {} repetitions after one warm-up run of each kind; MB/s = 10^6 bytes/s",
        shm_free >> 20,
        meminfo("MemAvailable").unwrap_or(0) >> 20,
        a.sizes,
        label(a.io),
        a.reps
    ));
    let mut res = serde_json::Map::new();
    res.insert(
        "settings".into(),
        json!({
            "sizes_mib": a.sizes, "io": a.io, "reps": a.reps, "chunks": a.chunks,
            "spill_dir": a.spill_dir, "quick": a.quick, "cores": cores, "dev_shm_free": shm_free,
        }),
    );
    for (part, name) in PARTS {
        if !a.parts.contains(&part) {
            continue;
        }
        let v = match part {
            Part::Single => single(a, &out),
            Part::Two => two(a, &out),
            Part::Chunks => chunks(a, &out),
            Part::Spill => spill(a, &out),
            Part::Preload => preload(a, &out),
        }
        .map_err(|e| format!("{name}: {e}"))?;
        res.insert(name.into(), v);
    }
    Ok(Value::Object(res))
}

fn main() {
    let mut argv: Vec<String> = std::env::args().skip(1).collect();
    let child = match argv.first().map(String::as_str) {
        Some("__writer") => Some(writer_child as fn(Vec<String>) -> Result<(), String>),
        Some("__file-writer") => Some(file_writer_child as fn(Vec<String>) -> Result<(), String>),
        _ => None,
    };
    if let Some(f) = child {
        argv.remove(0);
        if let Err(e) = f(argv) {
            eprintln!("{PROG} (child): {e}");
            std::process::exit(1);
        }
        return;
    }
    let a = cairn_bench::args_or_exit(PROG, USAGE, parse_args(argv));
    cairn_bench::json_main(PROG, a.json, a.json_out.as_deref(), || run(&a));
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_bench::strings;

    #[test]
    fn arguments_parse() {
        let a = parse_args(strings(&[
            "--sizes=8,16",
            "--io",
            "64K",
            "--only",
            "single,spill",
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            (a.sizes, a.io, a.reps, a.parts),
            (vec![8, 16], 64 << 10, 5, vec![Part::Single, Part::Spill])
        );
        let q = parse_args(strings(&["--quick", "--reps", "2"]))
            .unwrap()
            .unwrap();
        assert_eq!((q.sizes, q.reps, q.chunks.len()), (vec![16, 32], 2, 3));
        let d = parse_args(vec![]).unwrap().unwrap();
        assert_eq!(
            d.chunks,
            vec![64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20]
        );
        assert!(parse_args(strings(&["--help"])).unwrap().is_none());
        assert!(parse_args(strings(&["--chunks", "1000"])).is_err());
        assert!(parse_args(strings(&["--only", "x"])).is_err());
        assert!(parse_args(strings(&["--io", "0"])).is_err());
        assert!(parse_args(strings(&["--bogus"])).is_err());
        let a = parse_args(strings(&["--json-out=r/x.json"]))
            .unwrap()
            .unwrap();
        assert_eq!(
            (a.json, a.json_out),
            (false, Some(PathBuf::from("r/x.json")))
        );
        assert_eq!(
            (bytes("4096"), bytes("1m"), bytes("x")),
            (Some(4096), Some(MIB), None)
        );
    }

    #[test]
    fn model_weights_time_not_bandwidth() {
        // Half the bytes at 10 GB/s and half at 1 GB/s take 0.55 s per GB: 1.82 GB/s.
        let m = cruise_model(0.5e9, 10e9, 0.5e9, 1e9);
        assert!((m - 1e9 / 0.55).abs() < 1.0);
        assert_eq!(cruise_model(1.0, 5.0, 0.0, 1.0), 5.0);
    }

    #[test]
    fn targets_name_the_sizes_that_miss() {
        let (l, ok) = target_line("s", 0.9, &[(64, 0.95, 0.95), (512, 0.85, 0.85)]);
        assert!(
            !ok && l.contains("MISSES") && l.contains("at 512 MiB"),
            "{l}"
        );
        assert!(!l.contains("noisy"), "{l}");
        let (l, ok) = target_line("s", 0.9, &[(64, 0.95, 0.88)]);
        assert!(
            ok && l.contains("MEETS") && l.contains("noisy at 64 MiB"),
            "{l}"
        );
        assert_eq!(paired(&[2.0, 4.0, 9.0], &[1.0, 1.0, 3.0]), 3.0);
    }

    /// The id of the mount holding `p`, from the kernel (statx `STATX_MNT_ID`, Linux 5.8);
    /// None where the kernel does not tell.
    fn kernel_mount_id(p: &Path) -> Option<u64> {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(p.as_os_str().as_bytes()).ok()?;
        // SAFETY: statx writes into the zeroed struct we pass and reads the C string.
        unsafe {
            let mut st: libc::statx = std::mem::zeroed();
            let rc = libc::statx(libc::AT_FDCWD, c.as_ptr(), 0, libc::STATX_MNT_ID, &mut st);
            (rc == 0 && st.stx_mask & libc::STATX_MNT_ID != 0).then_some(st.stx_mnt_id)
        }
    }

    #[test]
    fn mount_of_agrees_with_the_kernel() {
        // / need not be a listed mount point (a chroot, some containers): then mount_of must
        // say so cleanly, and the kernel's mount id of / must indeed be missing from the
        // table. Otherwise the mount found must be the one the kernel names for the path.
        let listed: Vec<u64> = fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split(' ').next()?.parse().ok())
            .collect();
        let tmp =
            Temp(std::env::temp_dir().join(format!("cairn-bench-fs-mount-{}", std::process::id())));
        fs::create_dir_all(&tmp.0).unwrap();
        let paths = [
            PathBuf::from("/"),
            PathBuf::from("/proc/self"),
            PathBuf::from("/dev/shm"),
            std::env::temp_dir(),
            tmp.0.clone(),
            tmp.0.join("file"),
            PathBuf::from(env!("CARGO_MANIFEST_DIR")),
        ];
        fs::write(tmp.0.join("file"), b"x").unwrap();
        let mut checked = 0;
        for p in &paths {
            let Ok(canon) = p.canonicalize() else {
                continue;
            };
            let kernel = kernel_mount_id(&canon);
            match mount_of(p) {
                Ok(m) => {
                    assert!(canon.starts_with(&m.point), "{}: {m:?}", p.display());
                    assert!(!m.fstype.is_empty(), "{}: {m:?}", p.display());
                    if let Some(id) = kernel {
                        assert_eq!(m.id, id, "{}: {m:?}", p.display());
                    }
                    checked += 1;
                }
                Err(e) => {
                    assert!(
                        e.contains(&canon.display().to_string()),
                        "{}: {e}",
                        p.display()
                    );
                    if let Some(id) = kernel {
                        assert!(
                            !listed.contains(&id),
                            "{}: mount {id} is listed: {e}",
                            p.display()
                        );
                    }
                }
            }
        }
        // Every test machine has at least /proc listed (the table above comes from it).
        if !listed.is_empty() {
            assert!(checked > 0, "no path had a mount");
        }
        let e = mount_of(&tmp.0.join("no such file")).unwrap_err();
        assert!(e.contains("no such file"), "{e}");
    }

    #[test]
    fn mountinfo_lines_parse() {
        let m = parse_mountinfo_line(
            "36 35 98:0 /mnt1 /mnt\\040two rw,noatime master:1 shared:2 - ext3 /dev/root rw",
        )
        .unwrap();
        assert_eq!(
            m,
            Mount {
                id: 36,
                fstype: "ext3".into(),
                source: "/dev/root".into(),
                point: PathBuf::from("/mnt two"),
            }
        );
        let m = parse_mountinfo_line("1 0 0:5 / /a\\134b rw - tmpfs tmpfs rw").unwrap();
        assert_eq!(m.point, PathBuf::from("/a\\b"));
        assert_eq!(parse_mountinfo_line("garbage"), None);
    }
}
