//! `cairn-bench-incremental`: what an incremental checkpoint stores and costs when 1%, 10% or
//! 50% of the blocks changed, against a full checkpoint of the same field taken in the same
//! run, interleaved with it (one process; the node-local tier in a private directory).
//!
//! Each repetition changes the chosen share of blocks of a heat2d-like float64 field (whole
//! blocks, chosen at random, values nudged), then checkpoints it twice: once with an engine
//! writing full checkpoints and once with an engine writing incrementals (its first, untimed
//! checkpoint is the full base). The figures are medians; the ratios are the result.

use cairn_bench::{
    count, json_out_ready, median, ms, private_dir, series_json, size_label, write_json,
};
use cairn_comm::Solo;
use cairn_core::{Config, Engine, RegionRef};
use std::path::PathBuf;
use std::time::Instant;

/// The target (issue 5, from the CPPC paper): with 1% of the blocks changed, an incremental
/// checkpoint stores at most this share of a full one's bytes.
const TARGET_BYTES_AT_1PCT: f64 = 0.02;

struct Args {
    mib: usize,
    reps: usize,
    block: u32,
    dir: PathBuf,
    codec: String,
    json: bool,
    /// `--json-out`: where the JSON object is also written.
    json_out: Option<PathBuf>,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        mib: 256,
        reps: 7,
        block: 64 << 10,
        dir: PathBuf::from("/dev/shm"),
        codec: "none".into(),
        json: false,
        json_out: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut val = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match k.as_str() {
            "--mib" => a.mib = count("--mib", val("--mib")?, 1)?,
            "--reps" => a.reps = count("--reps", val("--reps")?, 1)?,
            "--block" => a.block = count("--block", val("--block")?, 4096)? as u32,
            "--dir" => a.dir = PathBuf::from(val("--dir")?),
            "--compress" => a.codec = val("--compress")?,
            "--json" => a.json = true,
            "--json-out" => a.json_out = Some(PathBuf::from(val("--json-out")?)),
            "-h" | "--help" => {
                println!("usage: cairn-bench-incremental [--mib N] [--reps N] [--block BYTES] [--compress none|lz4|zstd] [--dir DIR] [--json] [--json-out FILE]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(a)
}

/// A smooth temperature field with a cold (exactly zero) corner, as heat2d leaves it.
fn field(n: usize) -> Vec<f64> {
    let side = (n as f64).sqrt() as usize;
    (0..n)
        .map(|i| {
            let (x, y) = ((i % side) as f64, (i / side.max(1)) as f64);
            let r = (x * x + y * y).sqrt() / side as f64;
            if r > 1.2 {
                0.0
            } else {
                100.0 * (-3.0 * r * r).exp()
            }
        })
        .collect()
}

/// xorshift64*: the blocks each repetition changes.
fn next(s: &mut u64) -> u64 {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    s.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

fn engine(root: &std::path::Path, args: &Args, incremental: bool) -> Result<Engine, String> {
    private_dir(root)?;
    let cfg = Config {
        local: Some(root.join("local")),
        global: root.join("global"),
        fsync_global: false,
        block: args.block,
        incremental,
        full_every: 1_000_000,
        compress: args.codec.clone(),
        keep: 2,
        finalize_flush: false,
        ..Config::default()
    };
    Engine::new(Box::new(Solo), cfg).map_err(|e| e.to_string())
}

struct Row {
    share: f64,
    full_s: f64,
    incr_s: f64,
    full_bytes: f64,
    incr_bytes: f64,
    /// Every repetition's times (s) and rank-file sizes (bytes), full and incremental.
    samples: [Vec<f64>; 4],
}

fn run(args: &Args) -> Result<Vec<Row>, String> {
    let root = args
        .dir
        .join(format!("cairn-bench-incr-{}", std::process::id()));
    private_dir(&root)?;
    let out = (|| {
        let n = args.mib * (1 << 20) / 8;
        let mut f = field(n);
        let elems_per_block = args.block as usize / 8;
        let blocks = n.div_ceil(elems_per_block);
        let mut full = engine(&root.join("full"), args, false)?;
        let mut incr = engine(&root.join("incr"), args, true)?;
        let mut v = 1i64;
        incr.checkpoint("f", v, &[RegionRef::new(0, &f)])
            .map_err(|e| e.to_string())?;
        let mut rng = 0x1234_5678_9abc_def1u64;
        let mut rows = Vec::new();
        for share in [0.01, 0.10, 0.50] {
            let (mut ft, mut it, mut fb, mut ib) = (vec![], vec![], vec![], vec![]);
            for _ in 0..args.reps {
                let k = ((blocks as f64) * share).round().max(1.0) as usize;
                for _ in 0..k {
                    let b = (next(&mut rng) % blocks as u64) as usize;
                    let end = ((b + 1) * elems_per_block).min(n);
                    for x in &mut f[b * elems_per_block..end] {
                        *x += 0.5;
                    }
                }
                v += 1;
                for (e, t, bytes, dir) in [
                    (&mut full, &mut ft, &mut fb, "full"),
                    (&mut incr, &mut it, &mut ib, "incr"),
                ] {
                    let t0 = Instant::now();
                    e.checkpoint("f", v, &[RegionRef::new(0, &f)])
                        .map_err(|e| e.to_string())?;
                    t.push(t0.elapsed().as_secs_f64());
                    // The whole rank file: stored blocks, block records, header and trailer.
                    let part = root.join(format!("{dir}/local/node0/f/v{v}/rank0.ckpt"));
                    let meta = std::fs::metadata(&part);
                    let len = meta.map_err(|e| format!("{}: {e}", part.display()))?.len();
                    bytes.push(len as f64);
                }
            }
            rows.push(Row {
                share,
                full_s: median(&ft),
                incr_s: median(&it),
                full_bytes: median(&fb),
                incr_bytes: median(&ib),
                samples: [ft, it, fb, ib],
            });
        }
        full.finalize().map_err(|e| e.to_string())?;
        incr.finalize().map_err(|e| e.to_string())?;
        Ok(rows)
    })();
    let _ = std::fs::remove_dir_all(&root);
    out
}

fn kib(bytes: f64) -> String {
    format!("{:.1} KiB", bytes / 1024.0)
}

fn main() {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("cairn-bench-incremental: {e}");
            std::process::exit(2);
        }
    };
    if let Some(p) = &args.json_out {
        if let Err(e) = json_out_ready(p) {
            eprintln!("cairn-bench-incremental: {e}");
            std::process::exit(1);
        }
    }
    let rows = match run(&args) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cairn-bench-incremental: {e}");
            std::process::exit(1);
        }
    };
    if args.json || args.json_out.is_some() {
        let j: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                let [ft, it, fb, ib] = &r.samples;
                serde_json::json!({
                    "changed": r.share, "full_s": r.full_s, "incremental_s": r.incr_s,
                    "full_bytes": r.full_bytes, "incremental_bytes": r.incr_bytes,
                    "full": series_json(ft), "incremental": series_json(it),
                    "full_bytes_samples": fb, "incremental_bytes_samples": ib,
                })
            })
            .collect();
        let v = serde_json::json!({
            "mib": args.mib, "block": args.block, "compress": args.codec, "reps": args.reps,
            "dir": args.dir, "target_bytes_ratio_at_1pct": TARGET_BYTES_AT_1PCT, "rows": j,
        });
        if let Some(p) = &args.json_out {
            if let Err(e) = write_json(p, &v) {
                eprintln!("cairn-bench-incremental: {e}");
                std::process::exit(1);
            }
        }
        if args.json {
            println!("{v}");
            return;
        }
    }
    println!(
        "Incremental checkpoints: {} MiB float64 field, blocks of {}, codec {}, medians of {} (one process, {})",
        args.mib,
        size_label(args.block as usize),
        args.codec,
        args.reps,
        args.dir.display()
    );
    println!(
        "{:>8}  {:>10}  {:>10}  {:>10}  {:>12}  {:>12}  {:>11}  {:>8}",
        "changed", "full", "incr", "time", "full bytes", "incr bytes", "bytes", "target"
    );
    for r in &rows {
        let bytes = r.incr_bytes / r.full_bytes;
        let target = if r.share == 0.01 {
            cairn_bench::verdict(bytes <= TARGET_BYTES_AT_1PCT)
        } else {
            ""
        };
        println!(
            "{:>7.0}%  {:>10}  {:>10}  {:>9.3}x  {:>12}  {:>12}  {:>10.4}x  {:>8}",
            r.share * 100.0,
            ms(r.full_s),
            ms(r.incr_s),
            r.incr_s / r.full_s,
            kib(r.full_bytes),
            kib(r.incr_bytes),
            bytes,
            target
        );
    }
    println!("time and bytes (whole rank files) are incremental / full; target at 1% changed: <= 0.02x the bytes");
}
