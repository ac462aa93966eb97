//! Transparent checkpointing end to end with the real `libcairn-ckpt.so` and `cairn-restore`,
//! under the coordinator: a job restarted, checkpointed again while it runs restored, killed
//! again and restarted from that second image. Real processes, real SIGKILLs.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `cairn` with the engine's tiers (which store the images) under `root`.
fn cairn_in(root: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cairn"));
    c.env_remove("CAIRN_CONFIG")
        .env_remove("CAIRN_CKPT_PRELOAD")
        .env("CAIRN_TIERS_LOCAL", root.join("local"))
        .env("CAIRN_TIERS_GLOBAL", root.join("global"));
    c
}

fn built(name: &str) -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_BIN_EXE_cairn")).with_file_name(name);
    p.is_file().then_some(p)
}

fn wait_for<T>(what: &str, secs: u64, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(x) = f() {
            return x;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The job's processes, once every one of `n` is registered and running.
fn running(dir: &Path, n: usize) -> Vec<String> {
    wait_for("the processes to register", 30, || {
        let o = cairn_in(dir.parent().unwrap())
            .args(["status", "--json", "--dir"])
            .arg(dir)
            .output()
            .ok()?;
        let s: Value = serde_json::from_slice(&o.stdout).ok()?;
        let procs = s["procs"].as_array()?;
        (procs.len() == n && procs.iter().all(|p| p["state"] == "running")).then(|| {
            procs
                .iter()
                .map(|p| p["pid"].as_str().unwrap().to_string())
                .collect()
        })
    })
}

fn checkpoint(dir: &Path) {
    let o = cairn_in(dir.parent().unwrap())
        .args(["checkpoint", "--dir"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn kill_all(pids: &[String], job: &mut Child) {
    for pid in pids {
        assert!(Command::new("kill")
            .args(["-9", pid])
            .status()
            .unwrap()
            .success());
    }
    wait_for("the job to end", 30, || job.try_wait().unwrap());
}

fn steps_reached(out: &Path, n: usize, step: u64) -> bool {
    (0..n).all(|i| {
        std::fs::read_to_string(out.join(format!("out.{i}")))
            .is_ok_and(|o| o.contains(&format!("step {step}\n")))
    })
}

#[test]
fn a_restarted_job_checkpoints_again_and_restarts_from_that() {
    if built("libcairn-ckpt.so").is_none() || built("cairn-restore").is_none() {
        eprintln!("skipped: libcairn-ckpt.so or cairn-restore is not built");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("imgs");
    let counter = t.path().join("counter");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../native/ckpt/tests/counter.c");
    assert!(Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&counter)
        .arg(&src)
        .status()
        .unwrap()
        .success());
    let n = 2;
    let mut job = cairn_in(t.path())
        .args([
            "launch",
            "--job",
            "again",
            "-n",
            "2",
            "--sim-nodes",
            "2",
            "--dir",
        ])
        .arg(&dir)
        .arg("--")
        .arg(&counter)
        .args(["1200", "4000"])
        .arg(t.path())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pids = running(&dir, n);
    wait_for("step 200", 30, || {
        steps_reached(t.path(), n, 200).then_some(())
    });
    checkpoint(&dir);
    kill_all(&pids, &mut job);

    // First restart, in the background: the restored processes register again, and are
    // checkpointed while they run.
    let mut job = cairn_in(t.path())
        .args(["restart", "--dir"])
        .arg(&dir)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let restored = running(&dir, n);
    assert!(
        restored.iter().all(|p| !pids.contains(p)),
        "new processes expected: {pids:?} {restored:?}"
    );
    wait_for("step 600", 30, || {
        steps_reached(t.path(), n, 600).then_some(())
    });
    checkpoint(&dir);
    assert!(dir.join("again/v2/manifest.json").is_file());
    kill_all(&restored, &mut job);

    // Second restart, from the image taken after the first one, runs to the end.
    let o = cairn_in(t.path())
        .args(["restart", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for i in 0..n {
        let out = std::fs::read_to_string(t.path().join(format!("out.{i}"))).unwrap();
        assert!(
            out.contains("counter: done, sum 720600 heap 720600 OK"),
            "process {i}: {out}"
        );
        let steps: Vec<u64> = out
            .lines()
            .filter_map(|l| l.strip_prefix("step ")?.parse().ok())
            .collect();
        assert_eq!(steps, (1..=1200).collect::<Vec<_>>(), "process {i}");
    }
}
