//! `cairn launch`, `checkpoint`, `status` and `restart` as programs: the environment the
//! processes get, exit codes, signal forwarding, the client commands and restart's refusals,
//! with `cairn coord-node` as the sub-coordinators. Until the checkpoint library exists, the
//! processes run with a fake one that preloads and does nothing (so they never register);
//! the end-to-end tests with the real `libcairn-ckpt.so` and `cairn-restore` skip, saying
//! so, when those are not built.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn cairn() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cairn"));
    c.env_remove("CAIRN_CONFIG")
        .env_remove("CAIRN_CKPT_PRELOAD");
    c
}

/// A shared object that preloads and does nothing, built once with cc.
fn fake_lib() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("cairn-cli-launch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("fake.c"), "int cairn_fake_ckpt_library;\n").unwrap();
        let so = dir.join("libfake-ckpt.so");
        let ok = Command::new("cc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(&so)
            .arg(dir.join("fake.c"))
            .status()
            .expect("cc (to build a fake preload library)")
            .success();
        assert!(ok);
        so
    })
    .clone()
}

/// `cairn ARGS` with the fake library.
fn fake(args: &[&str]) -> Command {
    let mut c = cairn();
    c.env("CAIRN_CKPT_PRELOAD", fake_lib()).args(args);
    c
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
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

/// Waits for a background `cairn launch` at most `secs`.
fn wait_child(c: &mut Child, secs: u64) -> std::process::ExitStatus {
    wait_for("cairn launch to end", secs, || c.try_wait().unwrap())
}

/// `cairn status --json` of the job in `dir`, once it answers.
fn status(dir: &Path) -> Value {
    wait_for("cairn status", 20, || {
        let o = cairn()
            .args(["status", "--json", "--dir"])
            .arg(dir)
            .output()
            .unwrap();
        o.status
            .success()
            .then(|| serde_json::from_slice(&o.stdout).unwrap())
    })
}

#[test]
fn launch_gives_each_process_its_environment_and_returns_the_job_status() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("out");
    let script = format!(
        "echo \"$CAIRN_PROC $CAIRN_NODE $CAIRN_JOB $CAIRN_CKPT_AFFINITY ${{#CAIRN_COORD_TOKEN}} \
         $CAIRN_COORD_ADDR ${{LD_PRELOAD%%:*}}\" >> {}; [ $CAIRN_PROC = 1 ] && exit 5; exit 0",
        out.display()
    );
    let o = fake(&[
        "launch",
        "--job",
        "j1",
        "-n",
        "3",
        "--sim-nodes",
        "2",
        "--affinity",
        "off",
    ])
    .current_dir(t.path())
    .args(["--", "sh", "-c", &script])
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(5), "{}", text(&o));
    let lines = std::fs::read_to_string(&out).unwrap();
    let mut rows: Vec<Vec<&str>> = lines.lines().map(|l| l.split(' ').collect()).collect();
    rows.sort();
    assert_eq!(rows.len(), 3, "{lines}");
    let lib = fake_lib().display().to_string();
    for (i, r) in rows.iter().enumerate() {
        let node = (i * 2 / 3).to_string();
        assert_eq!(
            r[..5],
            [&i.to_string(), node.as_str(), "j1", "off", "32"],
            "{lines}"
        );
        assert!(r[5].starts_with("127.0.0.1:"), "{lines}");
        assert_eq!(r[6], lib, "the library comes first in LD_PRELOAD");
    }
    // Procs 0 and 1 share node 0's sub-coordinator; proc 2 has node 1's.
    assert_eq!(rows[0][5], rows[1][5]);
    assert_ne!(rows[0][5], rows[2][5]);
    // The job directory is private; the coordinator file went with the coordinator.
    let job_dir = t.path().join("cairn-images/j1");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&job_dir).unwrap().mode() & 0o777, 0o700);
    assert!(!job_dir.join("coord").exists());
}

#[test]
fn launch_refuses_what_it_cannot_run() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().to_str().unwrap();
    let o = fake(&["launch", "--dir", dir, "--", "no-such-command-cairn"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(127), "{}", text(&o));
    assert!(text(&o).contains("command not found"));
    let o = fake(&["launch", "--dir", dir, "--", "/etc/passwd"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(126), "{}", text(&o));
    let o = fake(&[
        "launch",
        "--dir",
        dir,
        "-n",
        "2",
        "--sim-nodes",
        "3",
        "--",
        "true",
    ])
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
    assert!(
        text(&o).contains("need 1 <= nodes <= processes"),
        "{}",
        text(&o)
    );
    let o = cairn()
        .env("CAIRN_CKPT_PRELOAD", t.path().join("missing.so"))
        .args(["launch", "--dir", dir, "--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
    assert!(text(&o).contains("missing.so"), "{}", text(&o));
}

#[test]
fn status_and_checkpoint_reach_the_running_job() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("imgs");
    let mut job = fake(&[
        "launch",
        "--job",
        "s1",
        "-n",
        "3",
        "--sim-nodes",
        "2",
        "--timeout",
        "1",
    ])
    .arg("--dir")
    .arg(&dir)
    .args(["--", "sleep", "30"])
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    // The processes start once both sub-coordinators have registered.
    let s = wait_for("the sub-coordinators", 20, || {
        let s = status(&dir);
        let nodes = s["nodes"].as_array().unwrap();
        nodes.iter().all(|n| n["state"] == "connected").then_some(s)
    });
    assert_eq!(s["job"]["job"], "s1");
    assert_eq!(s["procs"].as_array().unwrap().len(), 3);
    assert_eq!(s["nodes"].as_array().unwrap().len(), 2);
    // The fake library does not connect: the processes are missing, the nodes are there.
    assert!(s["procs"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["state"] == "missing"));
    assert!(s["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|n| n["state"] == "connected"));
    assert_eq!(s["last"]["ckpt"], "none");
    let o = cairn()
        .args(["status", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(
        table.starts_with("job s1: 3 processes on 2 nodes, idle\n"),
        "{table}"
    );
    assert!(table.contains("last checkpoint: none yet"), "{table}");
    // A checkpoint cannot complete: the report names the processes and nodes.
    let o = cairn()
        .args(["checkpoint", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains(
            "checkpoint 1 of job s1 failed: procs 0-2 (nodes 0-1) did not register within 1 s"
        ),
        "{}",
        text(&o)
    );
    assert!(!dir.join("s1/v1").exists());
    // SIGTERM to cairn reaches the processes; the job ends as they do.
    let st = Command::new("kill")
        .args(["-TERM", &job.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    assert_eq!(wait_child(&mut job, 20).code(), Some(128 + 15));
    // No job runs any more.
    let o = cairn()
        .args(["checkpoint", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("is running (jobs there: s1)"),
        "{}",
        text(&o)
    );
}

#[test]
fn restart_refuses_a_version_without_manifest() {
    let t = tempfile::tempdir().unwrap();
    let v1 = t.path().join("old/v1");
    std::fs::create_dir_all(&v1).unwrap();
    std::fs::write(v1.join("proc0.img"), b"x").unwrap();
    for version in [None, Some("1")] {
        let mut c = cairn();
        c.env("CAIRN_RESTORE", "/bin/true")
            .args(["restart", "--dir"])
            .arg(t.path());
        c.args(version);
        let o = c.output().unwrap();
        assert_eq!(o.status.code(), Some(125), "{}", text(&o));
        let all = text(&o);
        assert!(all.contains("v1 (no manifest: proc0.img)"), "{all}");
        assert!(
            all.contains("no complete checkpoint of job old")
                || all.contains("version 1 of job old is not complete"),
            "{all}"
        );
    }
}

// ---- with the real checkpoint library ----------------------------------------------------

/// `target/<profile>/NAME` beside the cairn binary, if built.
fn built(name: &str) -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_BIN_EXE_cairn")).with_file_name(name);
    p.is_file().then_some(p)
}

fn real_lib() -> Option<PathBuf> {
    let lib = built("libcairn-ckpt.so");
    if lib.is_none() {
        eprintln!("skipped: libcairn-ckpt.so is not built beside the cairn binary yet");
    }
    lib
}

#[test]
fn real_library_launch_true() {
    let Some(_) = real_lib() else { return };
    let t = tempfile::tempdir().unwrap();
    let o = cairn()
        .args(["launch", "--dir"])
        .arg(t.path())
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let o = cairn()
        .args(["launch", "--dir"])
        .arg(t.path())
        .args(["-n", "2", "--", "sh", "-c", "exit 3"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
}

#[test]
fn real_library_checkpoint_kill_and_restart() {
    let Some(_) = real_lib() else { return };
    let Some(_) = built("cairn-restore") else {
        eprintln!("skipped: cairn-restore is not built beside the cairn binary yet");
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("imgs");
    // Each process counts to 25 in its own file (named by its pid, which the restored shell
    // keeps in $$), one step every 0.1 s.
    let script = format!(
        "i=0; while [ $i -lt 25 ]; do i=$((i+1)); echo $i >> {}/out.$$; sleep 0.1; done",
        t.path().display()
    );
    let mut job = cairn()
        .args([
            "launch",
            "--job",
            "r1",
            "-n",
            "2",
            "--sim-nodes",
            "2",
            "--dir",
        ])
        .arg(&dir)
        .args(["--", "sh", "-c", &script])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let s = wait_for("the processes to register", 20, || {
        let s = status(&dir);
        s["procs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["state"] == "running")
            .then_some(s)
    });
    assert_eq!(s["nodes"].as_array().unwrap().len(), 2);
    std::thread::sleep(Duration::from_millis(500));
    let o = cairn()
        .args(["checkpoint", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(dir.join("r1/v1/manifest.json").is_file());
    for p in s["procs"].as_array().unwrap() {
        let pid = p["pid"].as_str().unwrap();
        assert!(Command::new("kill")
            .args(["-9", pid])
            .status()
            .unwrap()
            .success());
    }
    assert_eq!(wait_child(&mut job, 20).code(), Some(128 + 9));
    let o = cairn()
        .args(["restart", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let outs: Vec<_> = std::fs::read_dir(t.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("out."))
        .collect();
    assert_eq!(
        outs.len(),
        2,
        "one file per process, kept across the restart"
    );
    for f in outs {
        let steps: Vec<u32> = std::fs::read_to_string(&f)
            .unwrap()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        // Counted to 25, went on from the checkpoint rather than from 1 (steps taken
        // between the checkpoint and the kill come again).
        assert_eq!(steps.last(), Some(&25), "{steps:?}");
        assert_eq!(steps.iter().filter(|&&x| x == 1).count(), 1, "{steps:?}");
        assert!(
            steps.windows(2).all(|w| w[1] == w[0] + 1 || w[1] <= w[0]),
            "{steps:?}"
        );
    }
}

#[test]
fn real_library_eight_processes_on_two_nodes_restart_together() {
    let Some(_) = real_lib() else { return };
    let Some(_) = built("cairn-restore") else {
        eprintln!("skipped: cairn-restore is not built beside the cairn binary yet");
        return;
    };
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
    // 8 processes, each counting 600 steps of 5 ms into <t>/out.<proc> and checking its own
    // state; 2 simulated nodes, so 2 sub-coordinators.
    let mut job = cairn()
        .args([
            "launch",
            "--job",
            "e8",
            "-n",
            "8",
            "--sim-nodes",
            "2",
            "--dir",
        ])
        .arg(&dir)
        .arg("--")
        .arg(&counter)
        .args(["600", "5000"])
        .arg(t.path())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let s = wait_for("8 processes to register", 30, || {
        let s = status(&dir);
        let procs = s["procs"].as_array()?;
        (procs.len() == 8 && procs.iter().all(|p| p["state"] == "running")).then_some(s)
    });
    assert_eq!(s["nodes"].as_array().unwrap().len(), 2);
    wait_for("every process to pass step 100", 30, || {
        (0..8)
            .all(|i| {
                std::fs::read_to_string(t.path().join(format!("out.{i}")))
                    .is_ok_and(|o| o.contains("step 100\n"))
            })
            .then_some(())
    });
    let o = cairn()
        .args(["checkpoint", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let manifest = std::fs::read_to_string(dir.join("e8/v1/manifest.json")).unwrap();
    for i in 0..8 {
        assert!(
            dir.join(format!("e8/v1/proc{i}.img")).is_file(),
            "{manifest}"
        );
    }
    // Let them run on, then kill every process of the job for real.
    std::thread::sleep(Duration::from_millis(300));
    for p in s["procs"].as_array().unwrap() {
        let pid = p["pid"].as_str().unwrap();
        assert!(Command::new("kill")
            .args(["-9", pid])
            .status()
            .unwrap()
            .success());
    }
    wait_child(&mut job, 30);
    let o = cairn()
        .args(["restart", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    for i in 0..8 {
        let out = std::fs::read_to_string(t.path().join(format!("out.{i}"))).unwrap();
        assert!(
            out.contains("counter: done, sum 180300 heap 180300 OK"),
            "process {i}: {out}"
        );
        // The output file went back to its size at the checkpoint: each step once, in order.
        let steps: Vec<u64> = out
            .lines()
            .filter_map(|l| l.strip_prefix("step ")?.parse().ok())
            .collect();
        assert_eq!(steps, (1..=600).collect::<Vec<_>>(), "process {i}");
    }
}
