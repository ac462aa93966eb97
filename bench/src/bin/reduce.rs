//! `cairn-bench-reduce`: what Cairn's block reduction (`cairn-reduce`) costs and gains on data
//! shaped like real checkpoints, single core, next to baselines measured in the same run.
//!
//! ```text
//! target/release/cairn-bench-reduce [--mib 64] [--block 64K] [--reps 5] [--python PATH]
//! ```
//!
//! 1. `codec`: for five generated datasets (a 2D heat field, N-body positions, and the state of
//!    NPB CG, MG and FT) and each codec configuration, the compression and decompression speed
//!    of one `Encoder` / `Decoder` per pass over every block (the engine holds one per part),
//!    and the ratio raw / stored (with the per-block record the format adds), next to a memcpy
//!    of the same bytes and to Blosc2 (python-blosc2, LZ4 + shuffle, level 5, one thread) on
//!    the same bytes.
//! 2. `hash`: `block_hash` (xxh3-128) throughput at block sizes from 4 KiB to 1 MiB, and
//!    `is_zero`, next to memcpy.
//! 3. `blocks`: how the block size changes LZ4 + shuffle's speed and ratio, with the shuffled
//!    block compressed whole (kind 4) and as separately compressed byte planes (kind 7).
//!
//! No MPI: one process, one thread. The machine this is developed on is small and shared, so
//! the ratios to the baselines are the result, absolute speeds only context. `bench/README.md`
//! explains every figure.

use cairn_reduce::{block_hash, is_zero, BlockKind, Codec, Decoder, Encoder, Settings};
use serde_json::{json, Value};
use std::hint::black_box;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

const PROG: &str = "cairn-bench-reduce";
const MIB: usize = 1 << 20;
/// Bytes of the record the checkpoint format keeps for every block, stored or not (kind,
/// stored length, checksum, hash). Counted in every ratio, zero blocks included.
const RECORD_BYTES: usize = 29;
/// Target: encoding (zero detection, shuffle, compression, raw fallback) on one core.
const TARGET_COMPRESS_MB_S: f64 = 1000.0;
/// Target: block hashing on one core.
const TARGET_HASH_GB_S: f64 = 5.0;
/// The block sizes of the hash and block-size parts.
const BLOCK_SIZES: [usize; 8] = [
    4 << 10,
    8 << 10,
    16 << 10,
    32 << 10,
    64 << 10,
    128 << 10,
    256 << 10,
    1 << 20,
];
/// Blosc2 compresses each region in pieces of this size (see bench/reduce/blosc2_baseline.py).
const BLOSC2_CHUNK: usize = 4 << 20;
/// The datasets of the block-size part.
const BLOCK_PART_DATASETS: [&str; 2] = ["heat2d", "nbody"];

/// One codec configuration: the `[reduction]` settings, and how the encoder stores shuffled
/// blocks (`Encoder::split_planes`): compressed whole (`split: false`, kinds 4 and 5) or as
/// byte planes compressed one by one (`split: true`, kinds 7 and 8). The engine writes kind 4
/// for LZ4 and kind 8 for Zstandard: `lz4+shuffle` and `zstd-N+split` are what it does.
#[derive(Debug, Clone, Copy)]
struct Config {
    name: &'static str,
    settings: Settings,
    split: bool,
}

const fn config(
    name: &'static str,
    codec: Codec,
    level: i32,
    shuffle: bool,
    split: bool,
) -> Config {
    Config {
        name,
        settings: Settings {
            codec,
            level,
            shuffle,
        },
        split,
    }
}

/// The codec configurations compared.
const CONFIGS: [Config; 8] = [
    config("lz4", Codec::Lz4, 0, false, false),
    config("lz4+shuffle", Codec::Lz4, 0, true, false),
    config("lz4+split", Codec::Lz4, 0, true, true),
    config("zstd-1", Codec::Zstd, 1, false, false),
    config("zstd-1+shuffle", Codec::Zstd, 1, true, false),
    config("zstd-1+split", Codec::Zstd, 1, true, true),
    config("zstd-3+shuffle", Codec::Zstd, 3, true, false),
    config("zstd-3+split", Codec::Zstd, 3, true, true),
];
/// The configurations of the block-size part.
const BLOCK_CONFIGS: [Config; 2] = [CONFIGS[1], CONFIGS[2]];

const USAGE: &str = "\
usage: cairn-bench-reduce [options]
  --mib N           MiB per dataset (default 64)
  --block SIZE      block size of the codec part, e.g. 64K, 1M (default 64K; 4K..64M)
  --reps N          timed runs of everything, medians printed (default 5)
  --only PART       run one part: codec, hash or blocks
  --json            print one JSON object instead of the tables
  --json-out FILE   also write that JSON object to FILE (the tables are printed as usual)
  --python PATH     Python with python-blosc2 for the baseline (default python3)
  --blosc2-script P the baseline script (default bench/reduce/blosc2_baseline.py)
  --no-blosc2       skip the Blosc2 baseline
  --dir DIR         where the datasets are written for Blosc2 (default the temp directory)";

// ---- arguments ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Args {
    mib: usize,
    block: usize,
    reps: usize,
    codec: bool,
    hash: bool,
    blocks: bool,
    json: bool,
    /// `--json-out`: where the JSON object is also written.
    json_out: Option<PathBuf>,
    python: String,
    script: PathBuf,
    blosc2: bool,
    dir: PathBuf,
}

/// A size with an optional K, M or G suffix (powers of 1024).
fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()?.to_ascii_uppercase() {
        'K' => (&s[..s.len() - 1], 1usize << 10),
        'M' => (&s[..s.len() - 1], 1 << 20),
        'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().ok()?.checked_mul(mult)
}

/// Parse the command line; `Ok(None)` asks for the usage text.
fn parse_args(argv: Vec<String>) -> Result<Option<Args>, String> {
    let mut a = Args {
        mib: 64,
        block: 64 << 10,
        reps: 5,
        codec: true,
        hash: true,
        blocks: true,
        json: false,
        json_out: None,
        python: "python3".into(),
        script: PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/reduce/blosc2_baseline.py"
        )),
        blosc2: true,
        dir: std::env::temp_dir(),
    };
    let mut it = argv.into_iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = || -> Result<String, String> {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        let number = |v: String, min: usize| -> Result<usize, String> {
            match v.parse::<usize>() {
                Ok(n) if n >= min => Ok(n),
                _ => Err(format!("{flag} {v:?}: expected a whole number >= {min}")),
            }
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(None),
            "--mib" => a.mib = number(value()?, 1)?,
            "--reps" => a.reps = number(value()?, 1)?,
            "--block" => {
                let v = value()?;
                a.block = match parse_size(&v) {
                    Some(b) if (4 << 10..=64 << 20).contains(&b) => b,
                    _ => return Err(format!("--block {v:?}: expected a size from 4K to 64M")),
                }
            }
            "--only" => {
                let v = value()?;
                (a.codec, a.hash, a.blocks) = match v.as_str() {
                    "codec" => (true, false, false),
                    "hash" => (false, true, false),
                    "blocks" => (false, false, true),
                    _ => return Err(format!("--only {v:?}: expected codec, hash or blocks")),
                }
            }
            "--json" => a.json = true,
            "--json-out" => a.json_out = Some(PathBuf::from(value()?)),
            "--python" => a.python = value()?,
            "--blosc2-script" => a.script = PathBuf::from(value()?),
            "--no-blosc2" => a.blosc2 = false,
            "--dir" => a.dir = PathBuf::from(value()?),
            _ => return Err(format!("unknown option {arg:?}")),
        }
    }
    Ok(Some(a))
}

// ---- small helpers -----------------------------------------------------------------------

/// splitmix64: a small deterministic generator, so every run benchmarks the same bytes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Standard normal (Box-Muller).
    fn normal(&mut self) -> f64 {
        let u = 1.0 - self.unit();
        let v = self.unit();
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn time<R>(f: impl FnOnce() -> R) -> (f64, R) {
    let t = Instant::now();
    let r = f();
    (t.elapsed().as_secs_f64(), r)
}

fn f64_bytes(v: &[f64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * 8);
    for x in v {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

fn i32_bytes(v: &[i32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * 4);
    for x in v {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

/// "64K", "1M", or bytes.
fn size_name(b: usize) -> String {
    if b >= MIB && b % MIB == 0 {
        format!("{}M", b / MIB)
    } else if b >= 1024 && b % 1024 == 0 {
        format!("{}K", b / 1024)
    } else {
        format!("{b}")
    }
}

/// A buffer of `n` bytes whose pages are all touched (faulted in) before any timing.
fn faulted(n: usize) -> Vec<u8> {
    vec![1u8; n]
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

// ---- datasets ----------------------------------------------------------------------------

/// One protected region: its element size (the dtype's) and its bytes.
struct Region {
    name: &'static str,
    elem: usize,
    bytes: Vec<u8>,
}

struct Dataset {
    name: &'static str,
    what: String,
    regions: Vec<Region>,
}

impl Dataset {
    fn raw(&self) -> usize {
        self.regions.iter().map(|r| r.bytes.len()).sum()
    }

    fn blocks(&self, block: usize) -> usize {
        self.regions
            .iter()
            .map(|r| r.bytes.len().div_ceil(block))
            .sum()
    }

    fn zero_blocks(&self, block: usize) -> usize {
        self.regions
            .iter()
            .map(|r| r.bytes.chunks(block).filter(|b| is_zero(b)).count())
            .sum()
    }
}

/// Jacobi sweeps of the 2D 5-point stencil on an `ny x nx` grid: every cell whose `fixed`
/// value is NaN becomes the mean of its four neighbours; edges and the other cells keep
/// their value.
fn jacobi2d(u: &mut Vec<f64>, fixed: &[f64], ny: usize, nx: usize, sweeps: usize) {
    let mut next = u.clone();
    for _ in 0..sweeps {
        for i in 1..ny - 1 {
            let (up, mid, dn) = (
                &u[(i - 1) * nx..i * nx],
                &u[i * nx..(i + 1) * nx],
                &u[(i + 1) * nx..(i + 2) * nx],
            );
            let fx = &fixed[i * nx..(i + 1) * nx];
            let out = &mut next[i * nx..(i + 1) * nx];
            for j in 1..nx - 1 {
                out[j] = if fx[j].is_nan() {
                    0.25 * (up[j] + dn[j] + mid[j - 1] + mid[j + 1])
                } else {
                    fx[j]
                };
            }
        }
        std::mem::swap(u, &mut next);
    }
}

/// Held temperatures of the heat problem on an `ny x nx` grid (NaN: free): the top edge at
/// 100, two hot discs in the upper half, the other edges at 0.
fn heat_sources(ny: usize, nx: usize) -> Vec<f64> {
    // (row, column, radius) as fractions of the grid's width, and the temperature.
    const SPOTS: [(f64, f64, f64, f64); 2] =
        [(0.20, 0.30, 0.025, 250.0), (0.30, 0.70, 0.015, 150.0)];
    let mut fixed = vec![f64::NAN; ny * nx];
    for i in 0..ny {
        for j in 0..nx {
            let k = i * nx + j;
            if i == 0 {
                fixed[k] = 100.0;
            } else if i == ny - 1 || j == 0 || j == nx - 1 {
                fixed[k] = 0.0;
            }
            for (r, c, rad, t) in SPOTS {
                let (di, dj) = (i as f64 - r * ny as f64, j as f64 - c * nx as f64);
                if (di * di + dj * dj).sqrt() <= rad * nx as f64 {
                    fixed[k] = t;
                }
            }
        }
    }
    fixed
}

/// 1. A 2D temperature field (row-major): Jacobi iterations of the heat equation's steady
///    state from a cold (0.0) plate with a hot top edge and two hot spots in its upper half.
///    Run on a grid 4x coarser for 0.4 x its height sweeps (the heat front, one cell per
///    sweep, has crossed about two thirds of the plate; the bottom rows are still exactly
///    0.0), interpolated bilinearly to full size, then 10 sweeps at full size.
fn heat2d(bytes: usize) -> Dataset {
    let cells = bytes / 8;
    let nx = ((cells as f64).sqrt() as usize).max(32);
    let ny = (cells / nx).max(32);
    let (cy, cx) = (ny.div_ceil(4), nx.div_ceil(4));
    let cfix = heat_sources(cy, cx);
    let mut c: Vec<f64> = cfix
        .iter()
        .map(|&f| if f.is_nan() { 0.0 } else { f })
        .collect();
    let coarse_sweeps = (cy as f64 * 0.4) as usize;
    jacobi2d(&mut c, &cfix, cy, cx, coarse_sweeps);
    let fix = heat_sources(ny, nx);
    let at = |p: usize, n: usize, cn: usize| {
        let x = ((p as f64 + 0.5) * cn as f64 / n as f64 - 0.5).clamp(0.0, (cn - 1) as f64);
        let lo = x.floor() as usize;
        (lo, (lo + 1).min(cn - 1), x - lo as f64)
    };
    let mut u = vec![0.0; ny * nx];
    for i in 0..ny {
        let (i0, i1, wy) = at(i, ny, cy);
        for j in 0..nx {
            let (j0, j1, wx) = at(j, nx, cx);
            let top = c[i0 * cx + j0] * (1.0 - wx) + c[i0 * cx + j1] * wx;
            let bot = c[i1 * cx + j0] * (1.0 - wx) + c[i1 * cx + j1] * wx;
            let k = i * nx + j;
            u[k] = if fix[k].is_nan() {
                top * (1.0 - wy) + bot * wy
            } else {
                fix[k]
            };
        }
    }
    jacobi2d(&mut u, &fix, ny, nx, 10);
    Dataset {
        name: "heat2d",
        what: format!(
            "2D temperature field {ny} x {nx} f64 ({coarse_sweeps} Jacobi sweeps at 1/4 \
             resolution + 10 at full; hot top edge and spots, bottom still 0.0)"
        ),
        regions: vec![Region {
            name: "T",
            elem: 8,
            bytes: f64_bytes(&u),
        }],
    }
}

/// 2. N-body initial conditions: positions x,y,z interleaved (array of structs, f64) of
///    particles in four Plummer spheres of different scale radii and masses, centred at
///    random points of a 80-unit box; radii drawn from the Plummer cumulative mass profile,
///    directions uniform.
fn nbody(bytes: usize) -> Dataset {
    let n = bytes / 24;
    let mut rng = Rng(0xB0D1);
    // (share of the particles, scale radius)
    const CLUSTERS: [(f64, f64); 4] = [(0.4, 2.0), (0.3, 1.0), (0.2, 4.0), (0.1, 0.5)];
    let centers: Vec<[f64; 3]> = CLUSTERS
        .iter()
        .map(|_| [0; 3].map(|_| (rng.unit() - 0.5) * 80.0))
        .collect();
    let mut pos = Vec::with_capacity(n * 3);
    let mut start = 0usize;
    for (c, &(share, a)) in CLUSTERS.iter().enumerate() {
        let end = if c + 1 == CLUSTERS.len() {
            n
        } else {
            start + (share * n as f64) as usize
        };
        for _ in start..end {
            let r = loop {
                let m = 1.0 - rng.unit(); // (0, 1]
                let r = a / (m.powf(-2.0 / 3.0) - 1.0).sqrt();
                if r.is_finite() && r < 15.0 * a {
                    break r;
                }
            };
            let z = 2.0 * rng.unit() - 1.0;
            let phi = 2.0 * std::f64::consts::PI * rng.unit();
            let s = (1.0 - z * z).sqrt();
            let dir = [s * phi.cos(), s * phi.sin(), z];
            for d in 0..3 {
                pos.push(centers[c][d] + r * dir[d]);
            }
        }
        start = end;
    }
    Dataset {
        name: "nbody",
        what: format!("N-body positions, {n} particles x,y,z f64 interleaved, 4 Plummer spheres"),
        regions: vec![Region {
            name: "pos",
            elem: 8,
            bytes: f64_bytes(&pos),
        }],
    }
}

/// 3. NPB CG's state: a sparse matrix in CSR form (int32 row starts, int32 column indices
///    sorted within each row, f64 values) with 24 to 40 entries per row at random columns
///    plus the diagonal (off-diagonal values uniform in (-0.1, 0.1), diagonal 20 + uniform),
///    and the f64 vectors x (about 1/sqrt(n), as after normalisation), r and p (random,
///    around 1e-7, residual-like) and q = A p (computed).
fn cg(bytes: usize) -> Dataset {
    const ROW_MIN: usize = 24;
    const ROW_SPREAD: usize = 17; // 24..=40 entries, 32 on average
    let n = (bytes / (4 + 32 * 12 + 4 * 8)).max(64);
    let mut rng = Rng(0xC6);
    let mut rowstr = Vec::with_capacity(n + 1);
    let mut colidx: Vec<i32> = Vec::with_capacity(n * 33);
    let mut a: Vec<f64> = Vec::with_capacity(n * 33);
    let mut cols = Vec::with_capacity(ROW_MIN + ROW_SPREAD);
    rowstr.push(0i32);
    for i in 0..n {
        let k = ROW_MIN + rng.below(ROW_SPREAD);
        cols.clear();
        cols.push(i);
        cols.extend((1..k).map(|_| rng.below(n)));
        cols.sort_unstable();
        cols.dedup();
        for &c in &cols {
            colidx.push(c as i32);
            a.push(if c == i {
                20.0 + rng.unit()
            } else {
                (rng.unit() - 0.5) * 0.2
            });
        }
        rowstr.push(colidx.len() as i32);
    }
    let scale = 1.0 / (n as f64).sqrt();
    let x: Vec<f64> = (0..n).map(|_| scale * (0.75 + 0.5 * rng.unit())).collect();
    let r: Vec<f64> = (0..n).map(|_| 1e-7 * rng.normal()).collect();
    let p: Vec<f64> = r.iter().map(|&v| v + 0.4e-7 * rng.normal()).collect();
    let q: Vec<f64> = (0..n)
        .map(|i| {
            let (s, e) = (rowstr[i] as usize, rowstr[i + 1] as usize);
            (s..e).map(|k| a[k] * p[colidx[k] as usize]).sum()
        })
        .collect();
    let nnz = colidx.len();
    Dataset {
        name: "cg",
        what: format!(
            "NPB CG-shaped: CSR {n} rows, {nnz} nonzeros (int32 rowstr, colidx; f64 a) + f64 x, p, q, r"
        ),
        regions: vec![
            Region {
                name: "rowstr",
                elem: 4,
                bytes: i32_bytes(&rowstr),
            },
            Region {
                name: "colidx",
                elem: 4,
                bytes: i32_bytes(&colidx),
            },
            Region {
                name: "a",
                elem: 8,
                bytes: f64_bytes(&a),
            },
            Region {
                name: "x",
                elem: 8,
                bytes: f64_bytes(&x),
            },
            Region {
                name: "p",
                elem: 8,
                bytes: f64_bytes(&p),
            },
            Region {
                name: "q",
                elem: 8,
                bytes: f64_bytes(&q),
            },
            Region {
                name: "r",
                elem: 8,
                bytes: f64_bytes(&r),
            },
        ],
    }
}

/// Jacobi sweeps for -laplace(u) = f on a periodic `m^3` grid with spacing^2 `h2`.
fn jacobi3d(u: &mut Vec<f64>, f: &[f64], m: usize, h2: f64, sweeps: usize) {
    let mut next = vec![0.0; u.len()];
    let idx = |z: usize, y: usize, x: usize| (z * m + y) * m + x;
    for _ in 0..sweeps {
        for z in 0..m {
            let (zm, zp) = ((z + m - 1) % m, (z + 1) % m);
            for y in 0..m {
                let (ym, yp) = ((y + m - 1) % m, (y + 1) % m);
                for x in 0..m {
                    let (xm, xp) = ((x + m - 1) % m, (x + 1) % m);
                    let s = u[idx(zm, y, x)]
                        + u[idx(zp, y, x)]
                        + u[idx(z, ym, x)]
                        + u[idx(z, yp, x)]
                        + u[idx(z, y, xm)]
                        + u[idx(z, y, xp)];
                    next[idx(z, y, x)] = (s + h2 * f[idx(z, y, x)]) / 6.0;
                }
            }
        }
        std::mem::swap(u, &mut next);
    }
}

/// 4. NPB MG's state: a periodic 3D f64 grid (side m, m^3 x 8 bytes ~ the dataset size; 256^3
///    is 128 MiB) for -laplace(u) = v, v being 10 charges of +1 and 10 of -1 at random points
///    (as NPB MG places them), after one two-grid cycle from u = 0: 2 Jacobi sweeps, the
///    residual restricted to a grid of side m/2, m/50 sweeps of the correction there, added
///    back (injection), 2 more sweeps. Smooth blobs around the charges (radius about m/12),
///    exactly 0.0 elsewhere.
fn mg(bytes: usize) -> Dataset {
    let m = (((bytes / 8) as f64).cbrt() as usize / 2 * 2).max(8);
    let mut rng = Rng(0x36);
    let mut v = vec![0.0; m * m * m];
    let mut placed = 0;
    while placed < 20 {
        let k = rng.below(v.len());
        if v[k] == 0.0 {
            v[k] = if placed < 10 { 1.0 } else { -1.0 };
            placed += 1;
        }
    }
    let mut u = vec![0.0; v.len()];
    let coarse_sweeps = (m / 50).max(2);
    jacobi3d(&mut u, &v, m, 1.0, 2);
    let idx = |z: usize, y: usize, x: usize, n: usize| (z * n + y) * n + x;
    let mc = m / 2;
    let mut rc = vec![0.0; mc * mc * mc];
    for z in 0..m {
        let (zm, zp) = ((z + m - 1) % m, (z + 1) % m);
        for y in 0..m {
            let (ym, yp) = ((y + m - 1) % m, (y + 1) % m);
            for x in 0..m {
                let (xm, xp) = ((x + m - 1) % m, (x + 1) % m);
                let au = 6.0 * u[idx(z, y, x, m)]
                    - u[idx(zm, y, x, m)]
                    - u[idx(zp, y, x, m)]
                    - u[idx(z, ym, x, m)]
                    - u[idx(z, yp, x, m)]
                    - u[idx(z, y, xm, m)]
                    - u[idx(z, y, xp, m)];
                rc[idx(z / 2, y / 2, x / 2, mc)] += (v[idx(z, y, x, m)] - au) / 8.0;
            }
        }
    }
    let mut e = vec![0.0; rc.len()];
    jacobi3d(&mut e, &rc, mc, 4.0, coarse_sweeps);
    for z in 0..m {
        for y in 0..m {
            for x in 0..m {
                u[idx(z, y, x, m)] += e[idx(z / 2, y / 2, x / 2, mc)];
            }
        }
    }
    jacobi3d(&mut u, &v, m, 1.0, 2);
    Dataset {
        name: "mg",
        what: format!(
            "NPB MG-shaped: {m}^3 f64 grid, 20 +-1 charges after a two-grid cycle \
             (2 + {coarse_sweeps} coarse + 2 sweeps)"
        ),
        regions: vec![Region {
            name: "u",
            elem: 8,
            bytes: f64_bytes(&u),
        }],
    }
}

/// 5. NPB FT's state: a 3D complex128 array (stored as pairs of f64, declared to Cairn as
///    doubles, so element size 8) holding the evolved spectrum of a uniform random field: the
///    spectrum of NPB's random initial data (a DC term of N/2 and normal random complex values
///    of its variance) times exp(-4 alpha pi^2 |k|^2 t) with NPB's alpha = 1e-6 and t = 6.
fn ft(bytes: usize) -> Dataset {
    const ALPHA: f64 = 1e-6;
    const T: f64 = 6.0;
    let n = bytes / 16;
    let nx = ((n as f64).sqrt() as usize).clamp(1, 128);
    let ny = nx;
    let nz = (n / (nx * ny)).max(1);
    let total = nx * ny * nz;
    let mut rng = Rng(0xF7);
    let sigma = (total as f64 / 24.0).sqrt();
    let wrap = |i: usize, n: usize| {
        if i < n.div_ceil(2) {
            i as f64
        } else {
            i as f64 - n as f64
        }
    };
    let pi2 = std::f64::consts::PI * std::f64::consts::PI;
    let mut u = Vec::with_capacity(total * 2);
    for z in 0..nz {
        for y in 0..ny {
            for x in 0..nx {
                let k2 = wrap(x, nx).powi(2) + wrap(y, ny).powi(2) + wrap(z, nz).powi(2);
                let decay = (-4.0 * ALPHA * pi2 * k2 * T).exp();
                let (re, im) = if k2 == 0.0 {
                    (total as f64 * 0.5, 0.0)
                } else {
                    (sigma * rng.normal(), sigma * rng.normal())
                };
                u.push(re * decay);
                u.push(im * decay);
            }
        }
    }
    Dataset {
        name: "ft",
        what: format!(
            "NPB FT-shaped: {nz} x {ny} x {nx} complex128 evolved spectrum (t = {T}), as f64 pairs"
        ),
        regions: vec![Region {
            name: "u1",
            elem: 8,
            bytes: f64_bytes(&u),
        }],
    }
}

/// Makes a dataset of about the given number of bytes.
type Generator = fn(usize) -> Dataset;

// ---- measurements ------------------------------------------------------------------------

/// The stored form of a dataset: every block's kind and stored length, the stored bytes
/// back to back.
struct Stored {
    bytes: Vec<u8>,
    blocks: Vec<(BlockKind, usize)>,
}

impl Stored {
    fn for_dataset(ds: &Dataset, block: usize) -> Stored {
        Stored {
            // Room for the raw size plus one block's worst-case expansion, so no timed run
            // reallocates.
            bytes: faulted(ds.raw() + 2 * block + 4096),
            blocks: Vec::with_capacity(ds.blocks(block)),
        }
    }

    /// (zero, raw, compressed) block counts.
    fn kinds(&self) -> (usize, usize, usize) {
        let zero = self
            .blocks
            .iter()
            .filter(|b| b.0 == BlockKind::Zero)
            .count();
        let raw = self.blocks.iter().filter(|b| b.0 == BlockKind::Raw).count();
        (zero, raw, self.blocks.len() - zero - raw)
    }
}

/// One [`Encoder`] over every block of every region, as the engine encodes a part.
fn encode(ds: &Dataset, block: usize, c: &Config, st: &mut Stored) {
    st.bytes.clear();
    st.blocks.clear();
    let mut enc = Encoder::new(c.settings).split_planes(c.split);
    for r in &ds.regions {
        for b in r.bytes.chunks(block) {
            let start = st.bytes.len();
            let kind = enc.encode(b, r.elem, &mut st.bytes);
            st.blocks.push((kind, st.bytes.len() - start));
        }
    }
}

/// One [`Decoder`] for every block of the dataset, into `out` (one buffer per region).
fn decode(ds: &Dataset, block: usize, st: &Stored, out: &mut [Vec<u8>]) -> Result<(), String> {
    let mut pos = 0;
    let mut recs = st.blocks.iter();
    let mut dec = Decoder::new();
    for (r, o) in ds.regions.iter().zip(out.iter_mut()) {
        for dst in o.chunks_mut(block) {
            let &(kind, n) = recs.next().ok_or("fewer records than blocks")?;
            dec.decode(kind, &st.bytes[pos..pos + n], r.elem, dst)
                .map_err(|e| format!("region {}: {e}", r.name))?;
            pos += n;
        }
    }
    Ok(())
}

fn memcpy(ds: &Dataset, out: &mut [Vec<u8>]) {
    for (r, o) in ds.regions.iter().zip(out.iter_mut()) {
        o.copy_from_slice(&r.bytes);
    }
    black_box(out);
}

fn out_buffers(ds: &Dataset) -> Vec<Vec<u8>> {
    ds.regions.iter().map(|r| faulted(r.bytes.len())).collect()
}

/// Encode and decode once, untimed, and check the round trip.
fn round_trip(
    ds: &Dataset,
    block: usize,
    c: &Config,
    st: &mut Stored,
    out: &mut [Vec<u8>],
) -> Result<(), String> {
    for o in out.iter_mut() {
        o.fill(0xA5);
    }
    encode(ds, block, c, st);
    decode(ds, block, st, out)?;
    for (r, o) in ds.regions.iter().zip(out.iter()) {
        if r.bytes != *o {
            let at = r.bytes.iter().zip(o.iter()).position(|(a, b)| a != b);
            return Err(format!(
                "region {} decodes differently (first difference at byte {at:?})",
                r.name
            ));
        }
    }
    Ok(())
}

/// Samples of one timed series, in seconds, over `bytes` raw bytes.
#[derive(Default, Clone)]
struct Series {
    samples: Vec<f64>,
}

impl Series {
    fn median(&self) -> f64 {
        median(&self.samples)
    }

    /// Raw bytes per second, in MB/s (10^6).
    fn mb_s(&self, bytes: usize) -> f64 {
        bytes as f64 / self.median() / 1e6
    }

    fn json(&self, bytes: usize) -> Value {
        json!({
            "median_s": self.median(),
            "samples_s": self.samples,
            "mb_s": self.mb_s(bytes),
        })
    }
}

/// One codec configuration on one dataset.
struct CodecResult {
    config: &'static str,
    stored: usize,
    records: usize,
    kinds: (usize, usize, usize),
    comp: Series,
    decomp: Series,
}

impl CodecResult {
    /// The result of storing with `config` what `st` holds, not timed yet.
    fn new(config: &'static str, st: &Stored) -> CodecResult {
        CodecResult {
            config,
            stored: st.bytes.len(),
            records: RECORD_BYTES * st.blocks.len(),
            kinds: st.kinds(),
            comp: Series::default(),
            decomp: Series::default(),
        }
    }

    fn ratio(&self, raw: usize) -> f64 {
        raw as f64 / (self.stored + self.records) as f64
    }
}

struct DatasetCodec {
    raw: usize,
    memcpy: Series,
    configs: Vec<CodecResult>,
}

/// Part 1 on one dataset: every configuration, `reps` times in a rotating order, each
/// repetition also timing a memcpy of the dataset.
fn codec_part(ds: &Dataset, a: &Args) -> Result<DatasetCodec, String> {
    let mut st = Stored::for_dataset(ds, a.block);
    let mut out = out_buffers(ds);
    let mut res: Vec<CodecResult> = Vec::new();
    for c in &CONFIGS {
        round_trip(ds, a.block, c, &mut st, &mut out)
            .map_err(|e| format!("{}, {}: round trip failed: {e}", ds.name, c.name))?;
        res.push(CodecResult::new(c.name, &st));
    }
    let mut mc = Series::default();
    for rep in 0..a.reps {
        mc.samples.push(time(|| memcpy(ds, &mut out)).0);
        for j in 0..CONFIGS.len() {
            let c = (j + rep) % CONFIGS.len();
            let (t, ()) = time(|| encode(ds, a.block, &CONFIGS[c], &mut st));
            res[c].comp.samples.push(t);
            let (t, r) = time(|| decode(ds, a.block, &st, &mut out));
            r.map_err(|e| format!("{}, {}: decode failed: {e}", ds.name, CONFIGS[c].name))?;
            res[c].decomp.samples.push(t);
        }
    }
    Ok(DatasetCodec {
        raw: ds.raw(),
        memcpy: mc,
        configs: res,
    })
}

/// Part 2 on one dataset: hash throughput at every block size, `is_zero` at `--block`.
struct DatasetHash {
    raw: usize,
    memcpy: Series,
    hash: Vec<Series>,
    is_zero: Series,
    zero_full: Series,
}

fn hash_part(ds: &Dataset, a: &Args) -> DatasetHash {
    let mut out = out_buffers(ds);
    // A zeroed buffer as large as the dataset's largest region, every page written, so
    // `is_zero` must read every byte (its worst case).
    let mut zeros = faulted(ds.regions.iter().map(|r| r.bytes.len()).max().unwrap_or(0));
    zeros.fill(0);
    let mut h = DatasetHash {
        raw: ds.raw(),
        memcpy: Series::default(),
        hash: vec![Series::default(); BLOCK_SIZES.len()],
        is_zero: Series::default(),
        zero_full: Series::default(),
    };
    let n = BLOCK_SIZES.len();
    for rep in 0..a.reps {
        h.memcpy.samples.push(time(|| memcpy(ds, &mut out)).0);
        for j in 0..n {
            let k = (j + rep) % n;
            let bs = BLOCK_SIZES[k];
            let (t, acc) = time(|| {
                let mut acc = 0u128;
                for r in &ds.regions {
                    for b in r.bytes.chunks(bs) {
                        acc ^= block_hash(b);
                    }
                }
                acc
            });
            black_box(acc);
            h.hash[k].samples.push(t);
        }
        let (t, z) = time(|| {
            ds.regions
                .iter()
                .map(|r| r.bytes.chunks(a.block).filter(|b| is_zero(b)).count())
                .sum::<usize>()
        });
        black_box(z);
        h.is_zero.samples.push(t);
        let (t, z) = time(|| zeros.chunks(a.block).filter(|b| is_zero(b)).count());
        black_box(z);
        h.zero_full
            .samples
            .push(t * h.raw as f64 / zeros.len().max(1) as f64);
    }
    h
}

/// Part 3 on one dataset: LZ4 + shuffle, whole and split, at every block size.
struct DatasetBlocks {
    raw: usize,
    memcpy: Series,
    /// `sizes[c][k]`: configuration `BLOCK_CONFIGS[c]` at block size `BLOCK_SIZES[k]`.
    sizes: Vec<Vec<CodecResult>>,
}

fn blocks_part(ds: &Dataset, a: &Args) -> Result<DatasetBlocks, String> {
    let mut st = Stored::for_dataset(ds, *BLOCK_SIZES.last().expect("sizes"));
    let mut out = out_buffers(ds);
    let mut sizes = Vec::new();
    for c in &BLOCK_CONFIGS {
        let mut res = Vec::new();
        for bs in BLOCK_SIZES {
            round_trip(ds, bs, c, &mut st, &mut out).map_err(|e| {
                format!(
                    "{}, {} at {}: round trip failed: {e}",
                    ds.name,
                    c.name,
                    size_name(bs)
                )
            })?;
            res.push(CodecResult::new(c.name, &st));
        }
        sizes.push(res);
    }
    let mut mc = Series::default();
    let n = BLOCK_SIZES.len() * BLOCK_CONFIGS.len();
    for rep in 0..a.reps {
        mc.samples.push(time(|| memcpy(ds, &mut out)).0);
        for j in 0..n {
            let (c, k) = (
                (j + rep) % n % BLOCK_CONFIGS.len(),
                (j + rep) % n / BLOCK_CONFIGS.len(),
            );
            let bs = BLOCK_SIZES[k];
            let (t, ()) = time(|| encode(ds, bs, &BLOCK_CONFIGS[c], &mut st));
            sizes[c][k].comp.samples.push(t);
            let (t, r) = time(|| decode(ds, bs, &st, &mut out));
            r.map_err(|e| format!("{}: decode failed: {e}", ds.name))?;
            sizes[c][k].decomp.samples.push(t);
        }
    }
    Ok(DatasetBlocks {
        raw: ds.raw(),
        memcpy: mc,
        sizes,
    })
}

// ---- Blosc2 ------------------------------------------------------------------------------

/// Blosc2's figures on one dataset.
struct Blosc2Result {
    raw: usize,
    stored: usize,
    comp: Series,
    decomp: Series,
}

impl Blosc2Result {
    fn ratio(&self) -> f64 {
        self.raw as f64 / self.stored as f64
    }
}

struct Blosc2 {
    /// Versions and settings as the script reports them.
    about: Value,
    results: Vec<(String, Blosc2Result)>,
    seconds: f64,
}

impl Blosc2 {
    fn get(&self, name: &str) -> Option<&Blosc2Result> {
        self.results.iter().find(|(n, _)| n == name).map(|(_, r)| r)
    }
}

/// Removes the run's directory when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Write the datasets under `--dir`, run the Python script on them, parse its answer.
/// `Err` is the reason the baseline was skipped.
fn run_blosc2(datasets: &[Dataset], a: &Args) -> Result<Blosc2, String> {
    if !a.script.is_file() {
        return Err(format!("script {} not found", a.script.display()));
    }
    let dir = TempDir(a.dir.join(format!("{PROG}-{}", std::process::id())));
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir.0)
            .map_err(|e| format!("cannot create {}: {e}", dir.0.display()))?;
    }
    let mut list = Vec::new();
    for ds in datasets {
        let mut regions = Vec::new();
        for (i, r) in ds.regions.iter().enumerate() {
            let file = format!("{}.{i}.bin", ds.name);
            std::fs::write(dir.0.join(&file), &r.bytes)
                .map_err(|e| format!("cannot write {}: {e}", dir.0.join(&file).display()))?;
            regions.push(json!({ "file": file, "elem": r.elem, "bytes": r.bytes.len() }));
        }
        list.push(json!({ "name": ds.name, "regions": regions }));
    }
    let manifest = dir.0.join("manifest.json");
    let text = json!({ "reps": a.reps, "chunk_bytes": BLOSC2_CHUNK, "datasets": list });
    std::fs::write(&manifest, text.to_string())
        .map_err(|e| format!("cannot write {}: {e}", manifest.display()))?;
    let (seconds, run) = time(|| {
        Command::new(&a.python)
            .arg(&a.script)
            .arg(&manifest)
            .output()
    });
    let run = run.map_err(|e| format!("cannot run {}: {e}", a.python))?;
    let stdout = String::from_utf8_lossy(&run.stdout);
    let answer: Option<Value> = serde_json::from_str(stdout.trim()).ok();
    if !run.status.success() {
        let why = answer
            .as_ref()
            .and_then(|v| v["error"].as_str().map(str::to_string))
            .or_else(|| {
                String::from_utf8_lossy(&run.stderr)
                    .lines()
                    .last()
                    .map(str::to_string)
            })
            .unwrap_or_default();
        return Err(format!(
            "{} {} exited with {}: {why}",
            a.python,
            a.script.display(),
            run.status
        ));
    }
    let v = answer.ok_or_else(|| format!("the script printed no JSON: {stdout:.200}"))?;
    let series = |x: &Value| -> Option<Series> {
        Some(Series {
            samples: x
                .as_array()?
                .iter()
                .map(Value::as_f64)
                .collect::<Option<_>>()?,
        })
    };
    let mut results = Vec::new();
    for ds in datasets {
        let d = &v["datasets"][ds.name];
        let r = (|| {
            Some(Blosc2Result {
                raw: d["raw_bytes"].as_u64()? as usize,
                stored: d["stored_bytes"].as_u64()? as usize,
                comp: series(&d["compress_s"])?,
                decomp: series(&d["decompress_s"])?,
            })
        })()
        .ok_or_else(|| format!("the script's JSON has no usable entry for {}", ds.name))?;
        if r.raw != ds.raw() {
            return Err(format!(
                "the script saw {} bytes of {}, not {}",
                r.raw,
                ds.name,
                ds.raw()
            ));
        }
        results.push((ds.name.to_string(), r));
    }
    let mut about = v.clone();
    if let Some(o) = about.as_object_mut() {
        o.remove("datasets");
    }
    Ok(Blosc2 {
        about,
        results,
        seconds,
    })
}

// ---- report ------------------------------------------------------------------------------

fn ratio_or_na(x: Option<f64>) -> String {
    x.map_or("n/a".into(), |v| format!("{v:.2}"))
}

/// Compression ratios relative to Blosc2's decide a target: three decimals.
fn fine_ratio_or_na(x: Option<f64>) -> String {
    x.map_or("n/a".into(), |v| format!("{v:.3}"))
}

fn verdict(speed_mb_s: f64, ratio: f64, blosc2_ratio: Option<f64>) -> &'static str {
    let fast = speed_mb_s >= TARGET_COMPRESS_MB_S;
    match blosc2_ratio {
        None if fast => "fast; ratio n/a",
        None => "MISSES speed",
        Some(b) => match (fast, ratio >= b) {
            (true, true) => "MEETS",
            (false, true) => "MISSES speed",
            (true, false) => "MISSES ratio",
            (false, false) => "MISSES both",
        },
    }
}

fn codec_json(ds: &Dataset, r: &DatasetCodec, b: Option<&Blosc2Result>) -> Value {
    let mc = r.memcpy.mb_s(r.raw);
    let configs: Vec<Value> = r
        .configs
        .iter()
        .map(|c| {
            let (cs, ds_) = (c.comp.mb_s(r.raw), c.decomp.mb_s(r.raw));
            json!({
                "config": c.config,
                "ratio": c.ratio(r.raw),
                "ratio_without_records": r.raw as f64 / c.stored.max(1) as f64,
                "stored_bytes": c.stored,
                "record_bytes": c.records,
                "blocks": { "zero": c.kinds.0, "raw": c.kinds.1, "compressed": c.kinds.2 },
                "compress": c.comp.json(r.raw),
                "decompress": c.decomp.json(r.raw),
                "compress_vs_memcpy": cs / mc,
                "decompress_vs_memcpy": ds_ / mc,
                "vs_blosc2": b.map(|b| json!({
                    "ratio": c.ratio(r.raw) / b.ratio(),
                    "compress_speed": cs / b.comp.mb_s(b.raw),
                    "decompress_speed": ds_ / b.decomp.mb_s(b.raw),
                })),
                "meets_target": b.map(|b| cs >= TARGET_COMPRESS_MB_S && c.ratio(r.raw) >= b.ratio()),
            })
        })
        .collect();
    json!({
        "dataset": ds.name,
        "raw_bytes": r.raw,
        "memcpy": r.memcpy.json(r.raw),
        "configs": configs,
        "blosc2": b.map(|b| json!({
            "ratio": b.ratio(),
            "stored_bytes": b.stored,
            "compress": b.comp.json(b.raw),
            "decompress": b.decomp.json(b.raw),
        })),
    })
}

fn print_codec(
    datasets: &[Dataset],
    res: &[DatasetCodec],
    blosc2: &Result<Blosc2, String>,
    a: &Args,
) {
    println!();
    println!(
        "== 1. codecs: one Encoder / Decoder per pass over every {} block, one core ==",
        size_name(a.block)
    );
    match blosc2 {
        Ok(b) => println!(
            "Blosc2 baseline: python-blosc2 {} (C-Blosc2 {}), LZ4 clevel 5 + SHUFFLE, typesize = \
             element size, 1 thread, {} MiB pieces per compress2 call ({:.0} s)",
            b.about["blosc2"].as_str().unwrap_or("?"),
            b.about["c_blosc2"].as_str().unwrap_or("?"),
            BLOSC2_CHUNK / MIB,
            b.seconds
        ),
        Err(why) => println!("Blosc2 baseline SKIPPED: {why}"),
    }
    println!(
        "ratio = raw / (stored + {RECORD_BYTES} B record per block); speeds in MB/s of raw data \
         (10^6 B/s), medians of {} runs; target: compress >= {:.0} MB/s with ratio >= Blosc2's",
        a.reps, TARGET_COMPRESS_MB_S
    );
    let b = blosc2.as_ref().ok();
    let mut tot_raw = 0usize;
    let mut tot = vec![(0usize, 0.0f64, 0.0f64); CONFIGS.len()];
    let mut tot_b = (0usize, 0.0f64, 0.0f64);
    let mut tot_mc = 0.0;
    for (ds, r) in datasets.iter().zip(res) {
        let bb = b.and_then(|b| b.get(ds.name));
        println!();
        println!(
            "{} ({:.1} MiB, {} blocks, {} all zero): {}",
            ds.name,
            r.raw as f64 / MIB as f64,
            ds.blocks(a.block),
            ds.zero_blocks(a.block),
            ds.what
        );
        println!(
            "  {:<15} {:>6} {:>15} {:>9} {:>8} {:>9} {:>8} | {:>8} {:>8} {:>8} | target",
            "",
            "ratio",
            "zero/raw/comp",
            "comp MB/s",
            "/memcpy",
            "dec MB/s",
            "/memcpy",
            "ratio/b2",
            "comp/b2",
            "dec/b2"
        );
        let mc = r.memcpy.mb_s(r.raw);
        println!(
            "  {:<15} {:>6} {:>15} {:>9.0} {:>8.2} {:>9.0} {:>8.2} |",
            "memcpy", "-", "-", mc, 1.0, mc, 1.0
        );
        tot_raw += r.raw;
        tot_mc += r.memcpy.median();
        for (i, c) in r.configs.iter().enumerate() {
            let (cs, dss) = (c.comp.mb_s(r.raw), c.decomp.mb_s(r.raw));
            tot[i].0 += c.stored + c.records;
            tot[i].1 += c.comp.median();
            tot[i].2 += c.decomp.median();
            println!(
                "  {:<15} {:>6.2} {:>15} {:>9.0} {:>8.2} {:>9.0} {:>8.2} | {:>8} {:>8} {:>8} | {}",
                c.config,
                c.ratio(r.raw),
                format!("{}/{}/{}", c.kinds.0, c.kinds.1, c.kinds.2),
                cs,
                cs / mc,
                dss,
                dss / mc,
                fine_ratio_or_na(bb.map(|b| c.ratio(r.raw) / b.ratio())),
                ratio_or_na(bb.map(|b| cs / b.comp.mb_s(b.raw))),
                ratio_or_na(bb.map(|b| dss / b.decomp.mb_s(b.raw))),
                verdict(cs, c.ratio(r.raw), bb.map(Blosc2Result::ratio)),
            );
        }
        if let Some(bb) = bb {
            tot_b.0 += bb.stored;
            tot_b.1 += bb.comp.median();
            tot_b.2 += bb.decomp.median();
            let (cs, dss) = (bb.comp.mb_s(bb.raw), bb.decomp.mb_s(bb.raw));
            println!(
                "  {:<15} {:>6.2} {:>15} {:>9.0} {:>8.2} {:>9.0} {:>8.2} |",
                "blosc2 lz4+sh5",
                bb.ratio(),
                "-",
                cs,
                cs / mc,
                dss,
                dss / mc
            );
        }
    }
    if datasets.len() > 1 {
        println!();
        println!(
            "all datasets ({:.1} MiB): total raw / total stored, total raw / sum of median times",
            tot_raw as f64 / MIB as f64
        );
        let mc = tot_raw as f64 / tot_mc / 1e6;
        let have_b = b.is_some() && tot_b.0 > 0;
        let b_ratio = tot_raw as f64 / tot_b.0.max(1) as f64;
        let (b_cs, b_ds) = (
            tot_raw as f64 / tot_b.1 / 1e6,
            tot_raw as f64 / tot_b.2 / 1e6,
        );
        println!(
            "  {:<15} {:>6} {:>15} {:>9.0} {:>8.2} {:>9.0} {:>8.2} |",
            "memcpy", "-", "-", mc, 1.0, mc, 1.0
        );
        for (i, Config { name, .. }) in CONFIGS.iter().enumerate() {
            let ratio = tot_raw as f64 / tot[i].0 as f64;
            let (cs, dss) = (
                tot_raw as f64 / tot[i].1 / 1e6,
                tot_raw as f64 / tot[i].2 / 1e6,
            );
            let opt = |v: f64| have_b.then_some(v);
            println!(
                "  {:<15} {:>6.2} {:>15} {:>9.0} {:>8.2} {:>9.0} {:>8.2} | {:>8} {:>8} {:>8} | {}",
                name,
                ratio,
                "",
                cs,
                cs / mc,
                dss,
                dss / mc,
                fine_ratio_or_na(opt(ratio / b_ratio)),
                ratio_or_na(opt(cs / b_cs)),
                ratio_or_na(opt(dss / b_ds)),
                verdict(cs, ratio, opt(b_ratio)),
            );
        }
        if have_b {
            println!(
                "  {:<15} {:>6.2} {:>15} {:>9.0} {:>8.2} {:>9.0} {:>8.2} |",
                "blosc2 lz4+sh5",
                b_ratio,
                "",
                b_cs,
                b_cs / mc,
                b_ds,
                b_ds / mc
            );
        }
    }
}

fn print_hash(datasets: &[Dataset], res: &[DatasetHash], a: &Args) {
    println!();
    println!(
        "== 2. block_hash (xxh3-128) over every block, GB/s (10^9 B/s) on one core, medians of {}; \
         target >= {TARGET_HASH_GB_S:.0} GB/s ==",
        a.reps
    );
    print!("  {:<22}", "block");
    for ds in datasets {
        print!(" {:>8}", ds.name);
    }
    println!("  verdict (slowest)");
    let gb = |s: &Series, raw: usize| raw as f64 / s.median() / 1e9;
    for (k, bs) in BLOCK_SIZES.iter().enumerate() {
        print!("  {:<22}", size_name(*bs));
        let mut worst = f64::INFINITY;
        for h in res {
            let v = gb(&h.hash[k], h.raw);
            worst = worst.min(v);
            print!(" {v:>8.2}");
        }
        println!(
            "  {}",
            if worst >= TARGET_HASH_GB_S {
                "MEETS"
            } else {
                "MISSES"
            }
        );
    }
    print!("  {:<22}", "memcpy");
    for h in res {
        print!(" {:>8.2}", gb(&h.memcpy, h.raw));
    }
    println!();
    print!("  {:<22}", format!("is_zero {} (data)", size_name(a.block)));
    for h in res {
        print!(" {:>8.2}", gb(&h.is_zero, h.raw));
    }
    println!();
    print!(
        "  {:<22}",
        format!("is_zero {} (all 0)", size_name(a.block))
    );
    for h in res {
        print!(" {:>8.2}", gb(&h.zero_full, h.raw));
    }
    println!();
    println!(
        "  (is_zero on data stops at the first non-zero byte of a block; on an all-zero buffer \
         it reads every byte, its worst case)"
    );
}

fn print_blocks(datasets: &[&Dataset], res: &[DatasetBlocks], a: &Args) {
    println!();
    println!(
        "== 3. block size: lz4+shuffle and lz4+split, ratio with {RECORD_BYTES} B records, MB/s on one core, medians of {} ==",
        a.reps
    );
    for (ds, r) in datasets.iter().zip(res) {
        let mc = r.memcpy.mb_s(r.raw);
        println!();
        println!("{} (memcpy {mc:.0} MB/s)", ds.name);
        println!(
            "  {:<12} {:>6} {:>7} {:>6} {:>15} {:>9} {:>8} {:>9} {:>8}",
            "",
            "block",
            "blocks",
            "ratio",
            "zero/raw/comp",
            "comp MB/s",
            "/memcpy",
            "dec MB/s",
            "/memcpy"
        );
        for sizes in &r.sizes {
            for (bs, c) in BLOCK_SIZES.iter().zip(sizes) {
                let (cs, dss) = (c.comp.mb_s(r.raw), c.decomp.mb_s(r.raw));
                println!(
                    "  {:<12} {:>6} {:>7} {:>6.3} {:>15} {:>9.0} {:>8.2} {:>9.0} {:>8.2}",
                    c.config,
                    size_name(*bs),
                    c.kinds.0 + c.kinds.1 + c.kinds.2,
                    c.ratio(r.raw),
                    format!("{}/{}/{}", c.kinds.0, c.kinds.1, c.kinds.2),
                    cs,
                    cs / mc,
                    dss,
                    dss / mc
                );
            }
        }
    }
}

// ---- main --------------------------------------------------------------------------------

fn run(a: &Args) -> Result<(), String> {
    if let Some(p) = &a.json_out {
        cairn_bench::json_out_ready(p)?;
    }
    // The JSON object is built with --json (printed instead of the tables) or --json-out
    // (written to the file, beside the tables).
    let want_json = a.json || a.json_out.is_some();
    let bytes = a.mib * MIB;
    let progress = |s: &str| eprintln!("{PROG}: {s}");
    let generators: [(&str, Generator); 5] = [
        ("heat2d", heat2d),
        ("nbody", nbody),
        ("cg", cg),
        ("mg", mg),
        ("ft", ft),
    ];
    let mut datasets = Vec::new();
    for (name, make) in generators {
        let (t, ds) = time(|| make(bytes));
        progress(&format!("generated {name} in {t:.1} s"));
        datasets.push(ds);
    }

    let mut out = json!({
        "program": PROG,
        "cpu": cpu_model(),
        "cores_online": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "mib": a.mib,
        "block": a.block,
        "reps": a.reps,
        "record_bytes": RECORD_BYTES,
        "units": "MB = 10^6 bytes, GB = 10^9 bytes; speeds are raw (uncompressed) bytes per second",
        "targets": {
            "compress_mb_s": TARGET_COMPRESS_MB_S,
            "ratio_vs_blosc2": 1.0,
            "hash_gb_s": TARGET_HASH_GB_S,
        },
        "datasets": datasets.iter().map(|d| json!({
            "name": d.name,
            "what": d.what,
            "raw_bytes": d.raw(),
            "zero_blocks": d.zero_blocks(a.block),
            "blocks": d.blocks(a.block),
            "regions": d.regions.iter().map(|r| json!({
                "name": r.name, "elem": r.elem, "bytes": r.bytes.len()
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    });
    if !a.json {
        println!(
            "{PROG}: {} datasets of ~{} MiB, block {}, {} reps (medians), one core; {}",
            datasets.len(),
            a.mib,
            size_name(a.block),
            a.reps,
            cpu_model()
        );
        println!(
            "cores online {}; per-block record {RECORD_BYTES} B; MB = 10^6 B, GB = 10^9 B of raw data",
            out["cores_online"]
        );
    }

    if a.codec {
        let blosc2 = if a.blosc2 {
            progress("running the Blosc2 baseline");
            run_blosc2(&datasets, a)
        } else {
            Err("--no-blosc2".into())
        };
        if let Err(why) = &blosc2 {
            progress(&format!("Blosc2 baseline skipped: {why}"));
        }
        let mut res = Vec::new();
        for ds in &datasets {
            progress(&format!("codecs on {}", ds.name));
            res.push(codec_part(ds, a)?);
        }
        if want_json {
            let b = blosc2.as_ref().ok();
            out["codec"] = json!({
                "configs": CONFIGS.iter().map(|c| json!({
                    "name": c.name,
                    "codec": format!("{:?}", c.settings.codec),
                    "level": c.settings.level,
                    "shuffle": c.settings.shuffle,
                    "split": c.split,
                })).collect::<Vec<_>>(),
                "blosc2": match &blosc2 {
                    Ok(b) => json!({ "about": b.about, "chunk_bytes": BLOSC2_CHUNK, "seconds": b.seconds }),
                    Err(why) => json!({ "skipped": why }),
                },
                "results": datasets.iter().zip(&res)
                    .map(|(ds, r)| codec_json(ds, r, b.and_then(|b| b.get(ds.name))))
                    .collect::<Vec<_>>(),
            });
        }
        if !a.json {
            print_codec(&datasets, &res, &blosc2, a);
        }
    }

    if a.hash {
        let mut res = Vec::new();
        for ds in &datasets {
            progress(&format!("hashes on {}", ds.name));
            res.push(hash_part(ds, a));
        }
        if want_json {
            out["hash"] = json!({
                "block_sizes": BLOCK_SIZES,
                "results": datasets.iter().zip(&res).map(|(ds, h)| json!({
                    "dataset": ds.name,
                    "raw_bytes": h.raw,
                    "memcpy": h.memcpy.json(h.raw),
                    "hash": BLOCK_SIZES.iter().zip(&h.hash).map(|(bs, s)| {
                        let mut v = s.json(h.raw);
                        v["block"] = json!(bs);
                        v["meets_target"] = json!(s.mb_s(h.raw) / 1e3 >= TARGET_HASH_GB_S);
                        v
                    }).collect::<Vec<_>>(),
                    "is_zero": h.is_zero.json(h.raw),
                    "is_zero_all_zero": h.zero_full.json(h.raw),
                })).collect::<Vec<_>>(),
            });
        }
        if !a.json {
            print_hash(&datasets, &res, a);
        }
    }

    if a.blocks {
        let sel: Vec<&Dataset> = datasets
            .iter()
            .filter(|d| BLOCK_PART_DATASETS.contains(&d.name))
            .collect();
        let mut res = Vec::new();
        for ds in &sel {
            progress(&format!("block sizes on {}", ds.name));
            res.push(blocks_part(ds, a)?);
        }
        if want_json {
            out["blocks"] = json!({
                "configs": BLOCK_CONFIGS.iter().map(|c| c.name).collect::<Vec<_>>(),
                "results": sel.iter().zip(&res).map(|(ds, r)| json!({
                    "dataset": ds.name,
                    "raw_bytes": r.raw,
                    "memcpy": r.memcpy.json(r.raw),
                    "configs": BLOCK_CONFIGS.iter().zip(&r.sizes).map(|(cf, sizes)| json!({
                        "config": cf.name,
                        "sizes": BLOCK_SIZES.iter().zip(sizes).map(|(bs, c)| json!({
                            "block": bs,
                            "ratio": c.ratio(r.raw),
                            "stored_bytes": c.stored,
                            "record_bytes": c.records,
                            "blocks": { "zero": c.kinds.0, "raw": c.kinds.1, "compressed": c.kinds.2 },
                            "compress": c.comp.json(r.raw),
                            "decompress": c.decomp.json(r.raw),
                        })).collect::<Vec<_>>(),
                    })).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            });
        }
        if !a.json {
            print_blocks(&sel, &res, a);
        }
    }

    if a.json {
        println!("{out}");
    }
    if let Some(p) = &a.json_out {
        cairn_bench::write_json(p, &out)?;
    }
    Ok(())
}

fn main() {
    let a = cairn_bench::args_or_exit(PROG, USAGE, parse_args(std::env::args().skip(1).collect()));
    let (t, r) = time(|| run(&a));
    match r {
        Ok(()) => eprintln!("{PROG}: done in {t:.0} s"),
        Err(e) => {
            eprintln!("{PROG}: FAILED: {e}");
            std::process::exit(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_bench::strings;

    #[test]
    fn arguments_parse() {
        let a = parse_args(strings(&["--block=1M", "--only", "hash", "--mib", "8"]))
            .unwrap()
            .unwrap();
        assert_eq!(
            (a.block, a.codec, a.hash, a.blocks, a.mib),
            (MIB, false, true, false, 8)
        );
        assert!(parse_args(strings(&["--help"])).unwrap().is_none());
        assert!(parse_args(strings(&["--block", "1K"])).is_err());
        assert!(parse_args(strings(&["--only", "x"])).is_err());
        assert!(parse_args(strings(&["--reps", "0"])).is_err());
        assert_eq!(parse_size("64K"), Some(65536));
        let a = parse_args(strings(&["--json-out", "r/reduce.json"]))
            .unwrap()
            .unwrap();
        assert_eq!(
            (a.json, a.json_out),
            (false, Some(PathBuf::from("r/reduce.json")))
        );
    }

    #[test]
    fn datasets_have_their_shape_and_round_trip() {
        for make in [heat2d, nbody, cg, mg, ft] {
            let ds = make(2 * MIB);
            let raw = ds.raw();
            assert!(raw > MIB && raw <= 2 * MIB + 4096, "{}: {raw}", ds.name);
            assert!(ds.regions.iter().all(|r| r.bytes.len() % r.elem == 0));
            let mut st = Stored::for_dataset(&ds, 64 << 10);
            let mut out = out_buffers(&ds);
            for c in &CONFIGS {
                round_trip(&ds, 64 << 10, c, &mut st, &mut out).unwrap();
            }
        }
        // The heat field and the MG grid keep large exactly-zero areas.
        assert!(heat2d(2 * MIB).zero_blocks(4096) > 0);
        assert!(mg(2 * MIB).zero_blocks(4096) > 0);
    }

    #[test]
    fn median_of_even_and_odd() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
