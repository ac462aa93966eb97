//! `cairn flush` on checkpoints written by the engine (4 ranks as threads, 2 simulated nodes,
//! nothing flushed by the job): the newest version or every version made durable and
//! restorable from the global tier alone, a damaged or missing local part refused with the
//! right exit code, and the same under `mpirun` when it is installed.

use cairn_comm::Threads;
use cairn_core::{Config, Engine, RegionMut, RegionRef};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const RANKS: usize = 4;

fn config(root: &Path) -> Config {
    Config {
        local: Some(root.join("local")),
        global: root.join("global"),
        sim_nodes: 2,
        block: 4096,
        // Every version stays on the node-local tier.
        keep: 3,
        fsync_global: false,
        // Nothing may reach the global tier but what `cairn flush` copies.
        finalize_flush: false,
        ..Config::default()
    }
}

/// Region 1 of a rank's part: 16000 bytes, so it spans four 4 KiB checksum chunks.
fn data(rank: usize, version: i64) -> Vec<f64> {
    (0..2000)
        .map(|i| i as f64 * 0.5 + rank as f64 * 1000.0 + version as f64 / 3.0)
        .collect()
}

/// Run `f(rank, engine)` on every rank of a 4-rank job over threads.
fn job(root: &Path, f: impl Fn(usize, &mut Engine) + Send + Sync + Copy + 'static) {
    job_with(config(root), f)
}

/// As [`job`], with the given configuration.
fn job_with(cfg: Config, f: impl Fn(usize, &mut Engine) + Send + Sync + Copy + 'static) {
    let threads: Vec<_> = Threads::world(RANKS)
        .into_iter()
        .enumerate()
        .map(|(rank, comm)| {
            let cfg = cfg.clone();
            std::thread::spawn(move || {
                let mut e = Engine::new(Box::new(comm), cfg).unwrap();
                f(rank, &mut e);
                e.finalize().unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// Checkpoints 1, 2 and 3 of `heat`, on the node-local tier only.
fn write(root: &Path) {
    job(root, |rank, e| {
        for v in 1..=3i64 {
            let d = data(rank, v);
            e.checkpoint("heat", v, &[RegionRef::new(0, &[v]), RegionRef::new(1, &d)])
                .unwrap();
        }
    });
}

/// `cairn --local L --global G <args>`, with no CAIRN_* variables from the test's environment.
fn cairn(root: &Path, args: &[&str]) -> Output {
    let local = root.join("local");
    cairn_local(root, local.to_str().unwrap(), args)
}

/// As [`cairn`], with `--local <local>`.
fn cairn_local(root: &Path, local: &str, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cairn"));
    clean_env(&mut cmd);
    cmd.args(["--local", local, "--global"])
        .arg(root.join("global"))
        .args(args)
        .output()
        .unwrap()
}

fn clean_env(cmd: &mut Command) {
    for (k, _) in std::env::vars() {
        if k.starts_with("CAIRN_") || k.starts_with("OMPI_") || k.starts_with("PMI") {
            cmd.env_remove(k);
        }
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exited normally")
}

fn global_manifest(root: &Path, v: i64) -> PathBuf {
    root.join(format!("global/heat/v{v}/manifest.json"))
}

fn rank_file(root: &Path, node: usize, v: i64, rank: usize) -> PathBuf {
    root.join(format!("local/node{node}/heat/v{v}/rank{rank}.ckpt"))
}

/// The state `cairn list --json` gives each version of heat.
fn states(root: &Path) -> Vec<(i64, String)> {
    let o = cairn(root, &["list", "heat", "--json"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let state = r["state"].as_str().unwrap().to_string();
            (r["version"].as_i64().unwrap(), state)
        })
        .collect()
}

/// `cairn verify heat <v>` passes, and the global manifest lists every rank.
fn assert_durable(root: &Path, v: i64) {
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(global_manifest(root, v)).unwrap()).unwrap();
    assert_eq!(m["state"], "durable");
    assert_eq!(m["ranks"], serde_json::json!([0, 1, 2, 3]));
    assert_eq!(m["node"], serde_json::Value::Null);
    let o = cairn(root, &["verify", "heat", &v.to_string()]);
    assert_eq!(code(&o), 0, "{}{}", text(&o.stdout), text(&o.stderr));
}

/// With the node-local tier gone, the job restarts from the global tier, bit-exact.
fn assert_restores_from_global(root: &Path, v: i64) {
    std::fs::remove_dir_all(root.join("local")).unwrap();
    job(root, move |rank, e| {
        assert_eq!(e.restart_test("heat").unwrap(), Some(v));
        let (mut step, mut d) = ([0i64], vec![0f64; 2000]);
        e.restart(
            "heat",
            v,
            &mut [RegionMut::new(0, &mut step), RegionMut::new(1, &mut d)],
        )
        .unwrap();
        assert_eq!(step[0], v);
        let want = data(rank, v);
        assert!(d.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()));
    });
}

#[test]
fn flush_makes_the_newest_version_durable_and_restorable() {
    let d = tempfile::tempdir().unwrap();
    write(d.path());
    assert!(!global_manifest(d.path(), 3).exists());

    let o = cairn(d.path(), &["flush"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let global = d.path().join("global").display().to_string();
    assert!(
        out.starts_with("flushed heat v3: 4 ranks, ") && out.contains(&format!("-> {global}")),
        "{out}"
    );
    assert!(out.contains(" s (") && out.contains("/s)"), "{out}");
    // No terminal: no progress bar on standard error.
    assert!(o.stderr.is_empty(), "{}", text(&o.stderr));
    assert!(!global_manifest(d.path(), 1).exists() && !global_manifest(d.path(), 2).exists());
    assert_durable(d.path(), 3);
    assert_eq!(
        states(d.path()),
        [
            (1, "protected".into()),
            (2, "protected".into()),
            (3, "durable".into())
        ]
    );

    // The newest is durable now: nothing more to do.
    let o = cairn(d.path(), &["flush", "heat"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("heat v3: already durable"));

    assert_restores_from_global(d.path(), 3);
}

/// Region 1 of a rank's part when only its first 500 elements change between versions.
fn partly_changed(rank: usize, version: i64) -> Vec<f64> {
    let mut x = data(rank, 1);
    x[..500].copy_from_slice(&data(rank, version)[..500]);
    x
}

/// Checkpoints 1 (full), 2 and 3 (incremental) of `heat`, on the node-local tier only.
fn write_incremental(root: &Path) {
    let cfg = Config {
        incremental: true,
        ..config(root)
    };
    job_with(cfg, |rank, e| {
        for v in 1..=3i64 {
            let x = partly_changed(rank, v);
            e.checkpoint("heat", v, &[RegionRef::new(0, &[v]), RegionRef::new(1, &x)])
                .unwrap();
        }
    });
}

#[test]
fn flush_merges_incremental_chains_into_full_global_copies() {
    let d = tempfile::tempdir().unwrap();
    write_incremental(d.path());
    let o = cairn(d.path(), &["list", "--json"]);
    let list: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let bases: Vec<&serde_json::Value> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["base"])
        .collect();
    assert_eq!(bases, [&serde_json::Value::Null, &1.into(), &2.into()]);
    let o = cairn(d.path(), &["flush"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    assert_durable(d.path(), 3);
    let o = cairn(d.path(), &["inspect", "heat", "3", "--json"]);
    let ins: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for f in ins["files"].as_array().unwrap() {
        let global = f["place"]["tier"] == "global";
        assert_eq!(f["base"].is_null(), global, "{f}");
        assert_eq!(f["regions"][1]["unchanged_blocks"] == 0, global, "{f}");
    }
    let out = text(&cairn(d.path(), &["list"]).stdout);
    assert!(out.contains("incr of v2, full on global"), "{out}");
    // The merged copies alone restore v3 with the unchanged blocks of v1.
    std::fs::remove_dir_all(d.path().join("local")).unwrap();
    job(d.path(), |rank, e| {
        let (mut step, mut x) = ([0i64], vec![0f64; 2000]);
        e.restart(
            "heat",
            3,
            &mut [RegionMut::new(0, &mut step), RegionMut::new(1, &mut x)],
        )
        .unwrap();
        assert_eq!((step[0], x), (3, partly_changed(rank, 3)));
    });
}

#[test]
fn a_chain_with_a_lost_base_is_incomplete_and_not_flushed() {
    let d = tempfile::tempdir().unwrap();
    write_incremental(d.path());
    for node in 0..2 {
        std::fs::remove_dir_all(d.path().join(format!("local/node{node}/heat/v2"))).unwrap();
    }
    let out = text(&cairn(d.path(), &["list"]).stdout);
    assert!(
        out.contains("heat v3: incremental of v2, which is not complete on the node-local tier"),
        "{out}"
    );
    assert!(
        states(d.path()).contains(&(3, "incomplete".into())),
        "{out}"
    );
    // Nothing restorable to flush but v1.
    let o = cairn(d.path(), &["flush", "heat", "3"]);
    // Exit code 2, as for a missing rank file.
    assert_eq!(code(&o), 2, "{}", text(&o.stdout));
    assert!(
        text(&o.stderr).contains("heat v3 is based on v2"),
        "{}",
        text(&o.stderr)
    );
    assert!(!global_manifest(d.path(), 3).exists());
}

#[test]
fn all_flushes_every_complete_version_once() {
    let d = tempfile::tempdir().unwrap();
    write(d.path());

    let o = cairn(d.path(), &["flush", "--all", "--json"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let arr = v.as_array().unwrap();
    assert_eq!(arr.len(), 3, "{v}");
    for (i, r) in arr.iter().enumerate() {
        assert_eq!(r["name"], "heat");
        assert_eq!(r["version"], i as i64 + 1);
        assert_eq!(r["status"], "flushed");
        assert_eq!(r["ranks"], 4);
        let size: u64 = (0..RANKS)
            .map(|rank| {
                let node = rank / 2;
                std::fs::metadata(rank_file(d.path(), node, i as i64 + 1, rank))
                    .unwrap()
                    .len()
            })
            .sum();
        assert_eq!(r["bytes"], size);
        assert!(r["seconds"].as_f64().unwrap() >= 0.0);
    }
    for v in 1..=3 {
        assert_durable(d.path(), v);
    }

    let o = cairn(d.path(), &["flush", "--all"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(!out.contains("flushed"), "{out}");
    for v in 1..=3 {
        assert!(
            out.contains(&format!("heat v{v}: already durable")),
            "{out}"
        );
    }
    let o = cairn(d.path(), &["flush", "heat", "2"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("heat v2: already durable"));
}

#[test]
fn a_damaged_local_part_is_named_and_nothing_is_published() {
    let d = tempfile::tempdir().unwrap();
    write(d.path());
    // Byte 5000 of region 1 (which starts after the 16-byte header and the 8-byte region 0)
    // lies in its second 4 KiB chunk: file bytes 4120..8216.
    let f = rank_file(d.path(), 1, 3, 2);
    let mut b = std::fs::read(&f).unwrap();
    b[16 + 8 + 5000] ^= 0x20;
    std::fs::write(&f, &b).unwrap();

    let o = cairn(d.path(), &["flush"]);
    assert_eq!(code(&o), 1, "{}{}", text(&o.stdout), text(&o.stderr));
    let err = text(&o.stderr);
    assert!(err.contains("heat v3 was not flushed"), "{err}");
    assert!(
        err.contains("rank 2: ") && err.contains(&f.display().to_string()),
        "{err}"
    );
    assert!(err.contains("4120..8216"), "{err}");
    assert!(!global_manifest(d.path(), 3).exists());
    assert!(!d.path().join("global/heat/v3").exists());

    // The intact older versions can still be flushed.
    let o = cairn(d.path(), &["flush", "heat", "2"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    assert_durable(d.path(), 2);
}

#[test]
fn a_missing_rank_file_is_named() {
    let d = tempfile::tempdir().unwrap();
    write(d.path());
    std::fs::remove_file(rank_file(d.path(), 1, 3, 3)).unwrap();

    let o = cairn(d.path(), &["flush", "heat", "3"]);
    assert_eq!(code(&o), 2, "{}{}", text(&o.stdout), text(&o.stderr));
    let err = text(&o.stderr);
    assert!(
        err.contains("cannot flush heat v3: 1 of 4 ranks missing"),
        "{err}"
    );
    assert!(
        err.contains("rank 3: node1/heat/v3/rank3.ckpt is missing"),
        "{err}"
    );
    assert!(err.contains("node0, node1 under "), "{err}");
    assert!(!d.path().join("global/heat/v3").exists());

    // Without VERSION the newest complete version is flushed, with a warning about v3.
    let o = cairn(d.path(), &["flush"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    assert!(text(&o.stdout).starts_with("flushed heat v2: "));
    assert!(text(&o.stderr).contains("warning: heat v3 is not flushed: 1 of 4 ranks missing"));
    assert_durable(d.path(), 2);

    // A whole node's manifest gone: its ranks are in no manifest.
    std::fs::remove_file(d.path().join("local/node1/heat/v1/manifest.json")).unwrap();
    let o = cairn(d.path(), &["flush", "heat", "1"]);
    assert_eq!(code(&o), 2);
    assert!(
        text(&o.stderr).contains("ranks 2, 3: no node manifest lists them"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn usage_errors_exit_2() {
    let d = tempfile::tempdir().unwrap();
    write(d.path());
    let o = cairn_local(d.path(), "none", &["flush"]);
    assert_eq!(code(&o), 2, "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("no node-local tier is configured"));
    let cases: [(&[&str], &str); 3] = [
        (&["flush", "heat", "9"], "no published checkpoint heat v9"),
        (&["flush", "cool"], "no published checkpoint named cool"),
        (&["flush", "../x"], "checkpoint name"),
    ];
    for (args, want) in cases {
        let o = cairn(d.path(), args);
        assert_eq!(code(&o), 2, "{args:?}: {}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains(want),
            "{args:?}: {}",
            text(&o.stderr)
        );
    }
    assert!(!d.path().join("global/heat").exists());
}

/// `mpirun -n 2 <program> <args>` (at most 3 minutes); `None` when mpirun is not installed.
fn mpirun(program: &str, args: &[&std::ffi::OsStr]) -> Option<Output> {
    if Command::new("mpirun").arg("--version").output().is_err() {
        eprintln!("note: mpirun is not installed; skipping the MPI test of cairn flush");
        return None;
    }
    let mut cmd = Command::new("timeout");
    clean_env(&mut cmd);
    cmd.args([
        "180",
        "mpirun",
        "--oversubscribe",
        "--bind-to",
        "none",
        "-n",
        "2",
    ])
    .arg(program)
    .args(args)
    .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
    .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    Some(cmd.output().unwrap())
}

#[test]
fn flush_under_mpirun() {
    let d = tempfile::tempdir().unwrap();
    write(d.path());
    let (local, global) = (d.path().join("local"), d.path().join("global"));
    let cairn_bin = env!("CARGO_BIN_EXE_cairn");

    // Both processes see every node directory: process 0 copies everything.
    let args = [
        "--local".as_ref(),
        local.as_os_str(),
        "--global".as_ref(),
        global.as_os_str(),
    ];
    let Some(o) = mpirun(
        cairn_bin,
        &[
            &args[..],
            &["flush".as_ref(), "heat".as_ref(), "1".as_ref()],
        ]
        .concat(),
    ) else {
        return;
    };
    assert_eq!(code(&o), 0, "{}{}", text(&o.stdout), text(&o.stderr));
    assert_eq!(
        text(&o.stdout).matches("flushed heat v1: 4 ranks").count(),
        1
    );
    assert_durable(d.path(), 1);

    // As on a cluster: process i sees only node i's directory, under local<i>.
    let (local0, local1) = (d.path().join("local0"), d.path().join("local1"));
    std::fs::create_dir(&local1).unwrap();
    std::fs::rename(local.join("node1"), local1.join("node1")).unwrap();
    std::fs::rename(&local, &local0).unwrap();
    let script = r#"exec "$0" --local "$1$OMPI_COMM_WORLD_RANK" --global "$2" flush --all"#;
    let args = [
        "-c".as_ref(),
        script.as_ref(),
        cairn_bin.as_ref(),
        local.as_os_str(),
        global.as_os_str(),
    ];
    // Rank 2's part of v2, which only process 1 sees, is damaged: v2 fails everywhere.
    let damaged = local1.join("node1/heat/v2/rank2.ckpt");
    let mut b = std::fs::read(&damaged).unwrap();
    b[16 + 8 + 5000] ^= 1;
    std::fs::write(&damaged, &b).unwrap();
    let o = mpirun("sh", &args).unwrap();
    assert_eq!(code(&o), 1, "{}{}", text(&o.stdout), text(&o.stderr));
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    // Only process 0 prints.
    assert_eq!(out.matches("heat v1: already durable").count(), 1, "{out}");
    assert_eq!(out.matches("flushed heat v3: 4 ranks").count(), 1, "{out}");
    assert!(!out.contains("flushed heat v2"), "{out}");
    assert_eq!(err.matches("heat v2 was not flushed").count(), 1, "{err}");
    assert!(
        err.contains("process 1: rank 2: ") && err.contains("4120..8216"),
        "{err}"
    );
    assert!(!global.join("heat/v2").exists());
    assert_durable(d.path(), 3);
    std::fs::remove_dir_all(&local0).unwrap();
    std::fs::remove_dir_all(&local1).unwrap();
    std::fs::create_dir(&local).unwrap();
    assert_restores_from_global(d.path(), 3);
}
