//! cairn-bench-coord: the coordinators' checkpoint latency, from the request to the last
//! process resumed, as the job grows, with images of 4 KiB so that the protocol, not the
//! bytes, is what is timed. The processes are this program in its `fake-proc` mode: each
//! speaks the checkpoint library's side of the protocol (HELLO; SUSPEND, WRITE of a 4 KiB
//! image written and fsynced, RESUME) and nothing else. Every configuration runs the real
//! root, sub-coordinators (this program in its `coord-node` mode, one process per node) and
//! engine, on this machine.
//!
//! It fits `t = a + b * procs + c * nodes` by least squares to the medians and extrapolates to
//! 32,768 processes on 1,024 nodes, saying which term dominates there.
//!
//!   cairn-bench-coord [--reps N] [--per-node N] [--dir DIR] [--json]

use cairn_launch::{Affinity, Client, Helper, Options};
use serde_json::{json, Value};
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const USAGE: &str = "usage: cairn-bench-coord [--reps N] [--per-node N] [--dir DIR] [--json]";
const IMAGE: usize = 4096;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("fake-proc") => std::process::exit(fake_proc(args.get(1).map(PathBuf::from))),
        Some("coord-node") => std::process::exit(cairn_launch::node::main(&args[1..])),
        _ => {}
    }
    match run(&args) {
        Ok(()) => {}
        Err(e) => {
            eprintln!("cairn-bench-coord: {e}");
            std::process::exit(1);
        }
    }
}

struct Args {
    reps: usize,
    per_node: usize,
    dir: PathBuf,
    json: bool,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        reps: 7,
        per_node: 16,
        dir: PathBuf::from("/dev/shm"),
        json: false,
    };
    let mut it = args.iter();
    while let Some(k) = it.next() {
        let mut val = |what: &str| {
            it.next()
                .cloned()
                .ok_or(format!("{k} needs {what}\n{USAGE}"))
        };
        match k.as_str() {
            "--reps" => {
                a.reps = val("a count")?
                    .parse()
                    .map_err(|_| format!("--reps: not a count\n{USAGE}"))?
            }
            "--per-node" => {
                a.per_node = val("a count")?
                    .parse()
                    .map_err(|_| format!("--per-node: not a count\n{USAGE}"))?
            }
            "--dir" => a.dir = PathBuf::from(val("a directory")?),
            "--json" => a.json = true,
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    if a.reps == 0 || a.per_node == 0 {
        return Err(format!("--reps and --per-node must be at least 1\n{USAGE}"));
    }
    Ok(a)
}

/// The process side of the protocol, as the checkpoint library speaks it, writing 4 KiB
/// images; it says BYE and ends once the file `stop` exists, or when its connection ends.
fn fake_proc(stop: Option<PathBuf>) -> i32 {
    use cairn_launch::proto::{send, Conn, Msg, Verb};
    let env = |k: &str| std::env::var(k).unwrap_or_default();
    let proc: u64 = env("CAIRN_PROC").parse().unwrap_or(0);
    let Ok(stream) = cairn_launch::net::connect(&env("CAIRN_COORD_ADDR"), proc) else {
        return 3;
    };
    let Ok(mut conn) = Conn::new(stream) else {
        return 3;
    };
    let hello = Msg::new(Verb::Hello)
        .arg("token", env("CAIRN_COORD_TOKEN"))
        .arg("job", env("CAIRN_JOB"))
        .arg("proc", proc)
        .arg("pid", std::process::id())
        .arg("host", cairn_launch::jobdir::hostname())
        .arg("node", env("CAIRN_NODE"))
        .arg("restarted", 0);
    if conn.send(&hello).is_err()
        || !conn
            .expect("WELCOME")
            .is_ok_and(|m| m.verb == Verb::Welcome)
    {
        return 3;
    }
    let (mut reader, mut w) = conn.split();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        while let Ok(Some(m)) = reader.next_msg() {
            if tx.send(m).is_err() {
                return;
            }
        }
    });
    let image = vec![b'.'; IMAGE];
    loop {
        if stop.as_ref().is_some_and(|s| s.exists()) {
            let _ = send(&mut w, &Msg::new(Verb::Bye).arg("status", 0));
            return 0;
        }
        let m = match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(m) => m,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
            Err(_) => return 0,
        };
        let Ok(v) = m.num::<u64>("ckpt") else {
            continue;
        };
        let reply = match m.verb {
            Verb::Suspend => Msg::new(Verb::Suspended).arg("ckpt", v),
            Verb::Write => {
                let path = PathBuf::from(m.get("path").unwrap_or_default());
                let tmp = path.with_extension("img.tmp");
                let written = std::fs::File::create(&tmp)
                    .and_then(|mut f| {
                        f.write_all(&image)?;
                        f.sync_all()
                    })
                    .and_then(|()| std::fs::rename(&tmp, &path));
                match written {
                    Ok(()) => Msg::new(Verb::Written).arg("ckpt", v).arg("bytes", IMAGE),
                    Err(e) => Msg::new(Verb::Failed).arg("ckpt", v).arg("why", e),
                }
            }
            Verb::Resume => Msg::new(Verb::Resumed).arg("ckpt", v),
            _ => continue,
        };
        if send(&mut w, &reply).is_err() {
            return 0;
        }
    }
}

/// A no-op shared object for the launcher to preload (the fake processes need no library).
fn noop_preload(dir: &Path) -> Result<PathBuf, String> {
    let c = dir.join("noop.c");
    std::fs::write(&c, "int cairn_bench_noop;\n").map_err(|e| format!("{}: {e}", c.display()))?;
    let so = dir.join("libnoop.so");
    let ok = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(&c)
        .status()
        .map_err(|e| format!("cc (to build a no-op preload library): {e}"))?
        .success();
    if !ok {
        return Err("cc failed to build a no-op preload library".into());
    }
    Ok(so)
}

struct Measured {
    procs: usize,
    nodes: usize,
    /// Request to resume, per checkpoint (seconds).
    total: Vec<f64>,
    /// When each phase began, per checkpoint: SUSPEND, WRITE, STORE, RESUME.
    phases: Vec<Vec<(String, f64)>>,
}

/// One job of `procs` fake processes on `nodes` nodes: `reps` checkpoints (after one not
/// counted), each timed from the request to its answer (every process resumed).
fn measure(
    dir: &Path,
    preload: &Path,
    procs: usize,
    nodes: usize,
    reps: usize,
) -> Result<Measured, String> {
    let tmp = dir.join(format!("p{procs}n{nodes}"));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let opts = Options {
        dir: tmp.join("images"),
        job: "scale".into(),
        bind: "127.0.0.1".parse().expect("an address"),
        forward_signals: false,
        subcoord: Helper {
            program: exe.clone(),
            args: vec!["coord-node".into()],
        },
        engine: cairn_core::Config {
            local: Some(tmp.join("local")),
            global: tmp.join("global"),
            fsync_global: false,
            ..cairn_core::Config::default()
        },
        hosts: Vec::new(),
        agent: Vec::new(),
        rsh: None,
        init: None,
    };
    let settings = cairn_launch::launch::Settings {
        interval: None,
        timeout: Duration::from_secs(120),
        keep: 2,
        affinity: Affinity::Off,
        cpus: None,
    };
    let stop = tmp.join("stop");
    let command: Vec<OsString> = vec![exe.into(), "fake-proc".into(), stop.clone().into()];
    let (o, lib) = (opts.clone(), preload.to_path_buf());
    let job = std::thread::spawn(move || {
        cairn_launch::launch(&o, &settings, procs, nodes, &lib, &command)
    });
    let job_dir = opts.dir.join(&opts.job);
    let t0 = Instant::now();
    let client = loop {
        if let Ok(c) = Client::new(&job_dir) {
            if c.status().is_ok_and(|s| {
                s.procs
                    .iter()
                    .filter(|p| p.get("state") == Some("running"))
                    .count()
                    == procs
            }) {
                break c;
            }
        }
        if t0.elapsed() > Duration::from_secs(120) || job.is_finished() {
            return Err(format!(
                "{procs} processes on {nodes} nodes did not all start"
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut m = Measured {
        procs,
        nodes,
        total: Vec::new(),
        phases: Vec::new(),
    };
    for rep in 0..=reps {
        let mut phases = Vec::new();
        let t = Instant::now();
        client
            .checkpoint(|p| {
                if let (Some(ph), Some(s)) =
                    (p.get("phase"), p.get("secs").and_then(|s| s.parse().ok()))
                {
                    phases.push((ph.to_string(), s));
                }
            })
            .map_err(|e| format!("{procs} processes on {nodes} nodes: {e}"))?;
        if rep > 0 {
            m.total.push(t.elapsed().as_secs_f64());
            m.phases.push(phases);
        }
    }
    std::fs::write(&stop, b"").map_err(|e| format!("{}: {e}", stop.display()))?;
    match job.join() {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            return Err(format!(
                "{procs} processes on {nodes} nodes: the job ended with {e}"
            ))
        }
        Err(_) => return Err("the launcher's thread panicked".into()),
    }
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(m)
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    s[s.len() / 2]
}

/// Least squares for t = a + b x1 + c x2 (normal equations, 3 x 3).
fn fit(points: &[(f64, f64, f64)]) -> Option<[f64; 3]> {
    let mut m = [[0.0f64; 4]; 3];
    for &(x1, x2, t) in points {
        let r = [1.0, x1, x2];
        for i in 0..3 {
            for j in 0..3 {
                m[i][j] += r[i] * r[j];
            }
            m[i][3] += r[i] * t;
        }
    }
    for c in 0..3 {
        let p = (c..3).max_by(|&i, &j| m[i][c].abs().total_cmp(&m[j][c].abs()))?;
        m.swap(c, p);
        if m[c][c].abs() < 1e-12 {
            return None;
        }
        let pivot = m[c];
        for (r, row) in m.iter_mut().enumerate() {
            if r != c {
                let f = row[c] / pivot[c];
                for (x, p) in row.iter_mut().zip(pivot).skip(c) {
                    *x -= f * p;
                }
            }
        }
    }
    Some([m[0][3] / m[0][0], m[1][3] / m[1][1], m[2][3] / m[2][2]])
}

fn run(argv: &[String]) -> Result<(), String> {
    let a = parse(argv)?;
    let say = |line: String| {
        if !a.json {
            println!("{line}");
        }
    };
    let dir = a
        .dir
        .join(format!("cairn-bench-coord-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let preload = noop_preload(&dir)?;
    // Processes grow at a fixed number per node (the fan-in of the sub-coordinators), and at
    // 64 and 256 processes the node count varies too, so that the per-process and per-node
    // costs can be told apart.
    let mut configs: Vec<(usize, usize)> = [1usize, 16, 64, 256]
        .iter()
        .map(|&p| (p, p.div_ceil(a.per_node)))
        .collect();
    configs.extend([(64, 1), (64, 16), (256, 1), (256, 64)]);
    configs.sort();
    configs.dedup();
    say(format!(
        "cairn-bench-coord: checkpoint latency (request to resume) of fake processes with {IMAGE}-byte images, \
         real root, sub-coordinators and engine; {} repetitions after one not counted; medians",
        a.reps
    ));
    say(format!(
        "{:>7} {:>6}  {:>10}  {:>9} {:>9} {:>9} {:>9}",
        "procs", "nodes", "total", "SUSPEND", "WRITE", "STORE", "RESUME"
    ));
    let mut rows = Vec::new();
    let mut points = Vec::new();
    for (procs, nodes) in configs {
        let m = measure(&dir, &preload, procs, nodes, a.reps)?;
        let t = median(&m.total);
        // Each phase's length: from its start to the next one's (RESUME to the end).
        let mut lens: Vec<(String, f64)> = Vec::new();
        for name in ["SUSPEND", "WRITE", "STORE", "RESUME"] {
            let per: Vec<f64> = m
                .phases
                .iter()
                .zip(&m.total)
                .filter_map(|(ph, &tot)| {
                    let i = ph.iter().position(|(n, _)| n == name)?;
                    let end = ph.get(i + 1).map_or(tot, |(_, s)| *s);
                    Some((end - ph[i].1).max(0.0))
                })
                .collect();
            lens.push((
                name.to_string(),
                if per.is_empty() {
                    f64::NAN
                } else {
                    median(&per)
                },
            ));
        }
        let ms = |s: f64| format!("{:.1} ms", s * 1e3);
        say(format!(
            "{:>7} {:>6}  {:>10}  {:>9} {:>9} {:>9} {:>9}",
            m.procs,
            m.nodes,
            ms(t),
            ms(lens[0].1),
            ms(lens[1].1),
            ms(lens[2].1),
            ms(lens[3].1)
        ));
        points.push((m.procs as f64, m.nodes as f64, t));
        rows.push(json!({"procs": m.procs, "nodes": m.nodes, "median_s": t, "runs_s": m.total,
            "phases_s": lens.iter().map(|(n, s)| (n.clone(), json!(s))).collect::<serde_json::Map<String, Value>>()}));
    }
    let _ = std::fs::remove_dir_all(&dir);
    let Some([c0, per_proc, per_node]) = fit(&points) else {
        return Err(
            "the model could not be fitted (the configurations do not separate its terms)".into(),
        );
    };
    let (p, n) = (32768.0, 1024.0);
    let at_scale = c0 + per_proc * p + per_node * n;
    say(format!(
        "model: t = {:.2} ms + {:.3} ms x procs + {:.3} ms x nodes",
        c0 * 1e3,
        per_proc * 1e3,
        per_node * 1e3
    ));
    say(format!(
        "extrapolated to {p} processes on {n} nodes: {:.2} s ({:.2} s of it per process, {:.2} s per node); the {} term dominates",
        at_scale,
        per_proc * p,
        per_node * n,
        if per_proc * p >= per_node * n { "per-process" } else { "per-node" }
    ));
    if a.json {
        let v = json!({"rows": rows, "model_s": {"constant": c0, "per_proc": per_proc, "per_node": per_node},
            "extrapolated": {"procs": p, "nodes": n, "seconds": at_scale}});
        println!("{v}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fit_finds_a_plane_it_was_given() {
        let pts: Vec<(f64, f64, f64)> = [
            (1.0, 1.0),
            (16.0, 1.0),
            (64.0, 4.0),
            (64.0, 16.0),
            (256.0, 1.0),
        ]
        .iter()
        .map(|&(p, n)| (p, n, 0.5 + 0.25 * p + 2.0 * n))
        .collect();
        let [a, b, c] = fit(&pts).unwrap();
        assert!((a - 0.5).abs() < 1e-9 && (b - 0.25).abs() < 1e-9 && (c - 2.0).abs() < 1e-9);
        // Points that cannot tell the terms apart.
        assert!(fit(&[(1.0, 1.0, 1.0), (2.0, 2.0, 2.0), (3.0, 3.0, 3.0)]).is_none());
    }
}
