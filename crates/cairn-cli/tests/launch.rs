//! `cairn launch`, `checkpoint`, `status` and `restart` as programs: the environment the
//! processes get, exit codes, signal forwarding, the client commands and restart's refusals,
//! with `cairn coord-node` as the sub-coordinators. Some run with a fake checkpoint library
//! that preloads and does nothing (so the processes never register); the end-to-end tests
//! with the real `libcairn-ckpt.so` and `cairn-restore` (skipped, saying so, when those are
//! not built) checkpoint through the engine, kill every process, delete a simulated node's
//! storage and restart.

use rustix::process::Signal;
use serde_json::Value;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// `cairn`, with the engine's tiers in this test run's scratch directory (tests that look
/// at the storage give their own with [`tiers`]).
fn cairn() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cairn"));
    c.env_remove("CAIRN_CONFIG")
        .env_remove("CAIRN_CKPT_PRELOAD");
    tiers(&mut c, &scratch());
    c
}

/// This test run's scratch directory.
fn scratch() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("cairn-cli-launch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The engine's tiers under `dir`: `local/node<i>` and `global`.
fn tiers<'a>(c: &'a mut Command, dir: &Path) -> &'a mut Command {
    c.env("CAIRN_TIERS_LOCAL", dir.join("local"))
        .env("CAIRN_TIERS_GLOBAL", dir.join("global"))
        .env("CAIRN_TIERS_FSYNC_GLOBAL", "false")
}

/// A shared object that preloads and does nothing, built once with cc.
fn fake_lib() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let dir = scratch();
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

/// Send `sig` to process `pid` with kill(2): no `kill` program (procps) is needed.
fn signal(pid: &str, sig: Signal) {
    let raw: i32 = pid.parse().unwrap_or_else(|_| panic!("pid {pid:?}"));
    // 0 and negative numbers name process groups: never send those.
    assert!(raw > 0, "pid {pid:?}");
    let target = rustix::process::Pid::from_raw(raw).unwrap();
    rustix::process::kill_process(target, sig)
        .unwrap_or_else(|e| panic!("kill({pid}, {sig:?}): {e}"));
}

fn wait_for<T>(what: &str, secs: u64, f: impl FnMut() -> Option<T>) -> T {
    wait_or_say(secs, f, || format!("timed out waiting for {what}"))
}

/// Calls `f` every 20 ms until it gives a value; after `secs`, fails with what `why` says.
fn wait_or_say<T>(secs: u64, mut f: impl FnMut() -> Option<T>, why: impl Fn() -> String) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(x) = f() {
            return x;
        }
        assert!(Instant::now() < deadline, "{}", why());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for a background `cairn launch` at most `secs`.
fn wait_child(c: &mut Child, secs: u64) -> std::process::ExitStatus {
    wait_for("cairn launch to end", secs, || c.try_wait().unwrap())
}

/// Waits for a `cairn launch` or `cairn restart` whose processes were just killed. It ends
/// once the engine has flushed the newest checkpoint to the global tier, on a thread at the
/// lowest CPU priority: on a machine busy with other tests that takes 20 s for a 40 MB job
/// (at once when idle).
fn ended_after_kill(c: &mut Child) -> std::process::ExitStatus {
    wait_child(c, 120)
}

/// `cairn status --json` of the job in `dir`, once it answers.
fn status(dir: &Path) -> Value {
    let said = std::cell::RefCell::new(String::new());
    wait_or_say(
        20,
        || {
            let o = cairn()
                .args(["status", "--json", "--dir"])
                .arg(dir)
                .output()
                .unwrap();
            *said.borrow_mut() = String::from_utf8_lossy(&o.stderr).into_owned();
            o.status
                .success()
                .then(|| serde_json::from_slice(&o.stdout).unwrap())
        },
        || {
            format!(
                "cairn status did not answer within 20 s; it last said: {}",
                said.borrow()
            )
        },
    )
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

/// The processes of `group` whose command line starts with `prog`, by reading `/proc`.
fn group_members(group: u32, prog: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let (Ok(stat), Ok(cmd)) = (
            std::fs::read_to_string(e.path().join("stat")),
            std::fs::read(e.path().join("cmdline")),
        ) else {
            continue;
        };
        // pid (comm) state ppid pgrp ...: the fields after the last ')'.
        let pgrp = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(2)?.parse::<u32>().ok());
        if pgrp == Some(group) && cmd.starts_with(prog.as_bytes()) {
            out.push(pid);
        }
    }
    out
}

#[test]
fn process_0_reads_standard_input_and_a_ctrl_c_reaches_every_process() {
    use std::io::Write;
    use std::os::unix::process::CommandExt;
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("out");
    let script = format!(
        "read line; echo \"$CAIRN_PROC [$line]\" >> {}; exec sleep 60",
        out.display()
    );
    let mut job = fake(&["launch", "--job", "c1", "-n", "3", "--sim-nodes", "2"]);
    job.current_dir(t.path())
        .args(["--", "sh", "-c", &script, "sh"])
        .stdin(Stdio::piped())
        .stderr(job_log(t.path()))
        // As a shell starts a foreground job: a process group of its own, and Ctrl-C's
        // signal as the program would have it. A test run in the background (`cmd &` in a
        // script) inherits SIGINT ignored, and the job's processes would inherit that.
        .process_group(0);
    // SAFETY: between fork and exec only signal(2), which is async-signal-safe, is called.
    unsafe {
        job.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        })
    };
    let mut job = job.spawn().unwrap();
    job.stdin.take().unwrap().write_all(b"hello\n").unwrap();
    let lines = wait_for("every process to read its input", 20, || {
        let s = std::fs::read_to_string(&out).ok()?;
        (s.lines().count() == 3).then_some(s)
    });
    let mut rows: Vec<&str> = lines.lines().collect();
    rows.sort();
    // Like mpirun: process 0 reads the launcher's standard input, the others read nothing.
    assert_eq!(rows, ["0 [hello]", "1 []", "2 []"], "{lines}");
    // Their sub-coordinators start them (two nodes), in the launcher's process group: the
    // terminal's Ctrl-C goes to that group, and ends the job.
    let group = job.id();
    let members = wait_for("the processes in the launcher's group", 20, || {
        let m = group_members(group, "sleep");
        (m.len() == 3).then_some(m)
    });
    assert!(!members.contains(&group));
    rustix::process::kill_process_group(
        rustix::process::Pid::from_raw(group as i32).unwrap(),
        Signal::INT,
    )
    .unwrap();
    let st = wait_for("cairn launch to end", 60, || job.try_wait().unwrap());
    assert_eq!(st.code(), Some(128 + 2), "{}", log_tail(t.path()));
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
    // The processes start once both sub-coordinators have registered; the job is
    // `starting` until its engine is up (a checkpoint asked for then is refused).
    let s = wait_for("the sub-coordinators and the engine", 20, || {
        let s = status(&dir);
        let nodes = s["nodes"].as_array().unwrap();
        let up = s["job"]["state"] == "idle";
        assert!(up || s["job"]["state"] == "starting", "{s}");
        (up && nodes.iter().all(|n| n["state"] == "connected")).then_some(s)
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
    signal(&job.id().to_string(), Signal::TERM);
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

/// Whether the real library and restorer are both built (saying so when not).
fn real_tools() -> bool {
    if real_lib().is_none() {
        return false;
    }
    let restorer = built("cairn-restore");
    if restorer.is_none() {
        eprintln!("skipped: cairn-restore is not built beside the cairn binary yet");
    }
    restorer.is_some()
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
    if !real_tools() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("imgs");
    // Each process counts to 25 in its own file (named by its pid, which a restart gives
    // back), a step about every 0.1 s. The wait between steps is the shell's own
    // loop: a `sleep` child would not be under checkpoint control, and the checkpoint would
    // be refused for it.
    let script = format!(
        "i=0; while [ $i -lt 25 ]; do i=$((i+1)); echo $i >> {}/out.$$; \
         j=0; while [ $j -lt 100000 ]; do j=$((j+1)); done; done",
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
        signal(pid, Signal::KILL);
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
    if !real_tools() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("imgs");
    let counter = build_counter(t.path());
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
    wait_steps(t.path(), 8, 100);
    let o = cairn()
        .args(["checkpoint", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let manifest = std::fs::read_to_string(dir.join("e8/v1/manifest.json")).unwrap();
    for i in 0..8 {
        // The engine holds each image as rank i's part, on its node's local tier.
        let part = scratch().join(format!("local/node{}/e8/v1/rank{i}.ckpt", i / 4));
        assert!(part.is_file(), "{}: {manifest}", part.display());
    }
    // Let them run on, then kill every process of the job for real.
    std::thread::sleep(Duration::from_millis(300));
    for p in s["procs"].as_array().unwrap() {
        let pid = p["pid"].as_str().unwrap();
        signal(pid, Signal::KILL);
    }
    wait_child(&mut job, 30);
    let o = cairn()
        .args(["restart", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    check_counters(t.path(), 8, 600);
}

/// `native/ckpt/tests/counter.c` built into `dir`.
fn build_counter(dir: &Path) -> PathBuf {
    build_test_program(dir, "counter")
}

/// `native/ckpt/tests/<name>.c` built into `dir/<name>`.
fn build_test_program(dir: &Path, name: &str) -> PathBuf {
    let exe = dir.join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../native/ckpt/tests")
        .join(format!("{name}.c"));
    assert!(Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .unwrap()
        .success());
    exe
}

/// Waits until each of `procs` counters writing into `dir` has passed `step`.
fn wait_steps(dir: &Path, procs: usize, step: u64) {
    wait_for(&format!("every process to pass step {step}"), 30, || {
        (0..procs)
            .all(|i| {
                std::fs::read_to_string(dir.join(format!("out.{i}")))
                    .is_ok_and(|o| o.contains(&format!("step {step}\n")))
            })
            .then_some(())
    });
}

/// Checks that each of `procs` counters finished `steps` steps with its state intact, each
/// step printed once and in order (the output file went back to its size at the
/// checkpoint).
fn check_counters(dir: &Path, procs: usize, steps: u64) {
    let sum = steps * (steps + 1) / 2;
    for i in 0..procs {
        let out = std::fs::read_to_string(dir.join(format!("out.{i}"))).unwrap();
        assert!(
            out.contains(&format!("counter: done, sum {sum} heap {sum} OK")),
            "process {i}: {out}"
        );
        let seen: Vec<u64> = out
            .lines()
            .filter_map(|l| l.strip_prefix("step ")?.parse().ok())
            .collect();
        assert_eq!(seen, (1..=steps).collect::<Vec<_>>(), "process {i}");
    }
}

/// Writes `<t>/cairn.toml`: `[tiers]` with `local` and `<t>/global`, then `rest`.
fn write_config(t: &Path, local: &str, rest: &str) -> PathBuf {
    let config = t.join("cairn.toml");
    let global = t.join("global");
    let tiers = format!("[tiers]\nlocal = {local:?}\nglobal = {global:?}\nfsync_global = false\n");
    std::fs::write(&config, tiers + rest).unwrap();
    config
}

/// `cairn ARGS --config CONFIG`, with the tiers the configuration names rather than the
/// scratch ones.
fn configured(config: &Path, args: &[&str]) -> Command {
    let mut c = cairn();
    c.env_remove("CAIRN_TIERS_LOCAL")
        .env_remove("CAIRN_TIERS_GLOBAL")
        .env_remove("CAIRN_TIERS_FSYNC_GLOBAL")
        .arg("--config")
        .arg(config)
        .args(args);
    c
}

/// Launches `procs` counters of `steps` steps of 5 ms on 2 simulated nodes as job `job`,
/// configured by `config`, and waits until they all run; returns the launcher and their
/// pids.
fn launch_counters(
    t: &Path,
    config: &Path,
    job: &str,
    procs: usize,
    steps: u64,
) -> (Child, Vec<String>) {
    let counter = build_counter(t);
    let n = procs.to_string();
    let job_cmd = configured(
        config,
        &[
            "launch",
            "--job",
            job,
            "-n",
            &n,
            "--sim-nodes",
            "2",
            "--dir",
        ],
    )
    .arg(t.join("imgs"))
    .arg("--")
    .arg(&counter)
    .args([steps.to_string(), "5000".into()])
    .arg(t)
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    (job_cmd, running_pids(t, procs))
}

fn kill9_all(pids: &[String]) {
    for pid in pids {
        signal(pid, Signal::KILL);
    }
}

/// `cairn checkpoint` of the job in `t/imgs`; returns the bytes stored.
fn checkpoint(t: &Path) -> u64 {
    let o = cairn()
        .args(["checkpoint", "--dir"])
        .arg(t.join("imgs"))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}\nthe job's messages:\n{}",
        text(&o),
        std::fs::read_to_string(t.join("job.log")).unwrap_or_default()
    );
    let out = String::from_utf8_lossy(&o.stdout);
    out.split_once(" (")
        .and_then(|(_, r)| r.split_once(" stored)"))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no stored bytes in {out:?}"))
}

fn manifest(t: &Path, job: &str, v: u64) -> Value {
    let text = std::fs::read_to_string(t.join(format!("imgs/{job}/v{v}/manifest.json")));
    serde_json::from_str(&text.unwrap()).unwrap()
}

#[test]
fn real_library_images_survive_a_lost_node_through_partner_copies() {
    if !real_tools() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let local = t.path().join("local");
    let config = write_config(
        t.path(),
        local.to_str().unwrap(),
        "[redundancy]\nscheme = \"partner\"\n\
         [reduction]\ncompress = \"lz4\"\nincremental = true\n\
         [checkpoint]\nfinalize = false\n",
    );
    // 4 processes on 2 simulated nodes: each node's two images have partner copies on the
    // other node.
    let (mut job, pids) = launch_counters(t.path(), &config, "pl", 4, 800);
    wait_steps(t.path(), 4, 100);
    let first = checkpoint(t.path());
    std::thread::sleep(Duration::from_millis(200));
    let second = checkpoint(t.path());
    let (m1, m2) = (manifest(t.path(), "pl", 1), manifest(t.path(), "pl", 2));
    assert_eq!(m1["engine"]["redundancy"], "partner", "{m1}");
    assert_eq!(m1["engine"]["compress"], "lz4", "{m1}");
    assert_eq!(m1["engine"]["incremental"], false, "{m1}");
    // Based on version 1 (the counters' images are a few 64 KiB blocks, all of which
    // change: real_library_idle_process_checkpoints_incrementally measures the savings).
    assert_eq!(m2["engine"]["incremental"], true, "{m2}");
    let images = m1["bytes"].as_u64().unwrap();
    assert!(first < images, "lz4: {first} of {images}");
    // They are ordinary engine checkpoints: `cairn list` shows them, protected.
    let o = configured(&config, &["list", "--json", "pl"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let list: Value = serde_json::from_slice(&o.stdout).unwrap();
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 2, "{list:?}");
    assert_eq!(list[1]["version"], 2);
    assert_eq!(list[1]["base"], 1);
    assert_eq!(list[1]["protection"]["state"], "protected", "{:?}", list[1]);
    // Its files hold what the engine stored plus their headers and indices.
    assert!(
        list[1]["stored_bytes"].as_u64().unwrap() >= second,
        "{list:?}"
    );
    // Each node's sub-coordinator stored its own processes' parts and its partner's
    // copies; the root, which orders the phases and writes manifests, moved no image.
    let st = status(&t.path().join("imgs"));
    // Parts are written with write(2), which wchar counts (images are read through
    // mappings, which rchar would not).
    let wchar = |pid: &str| -> u64 {
        let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap();
        io.lines()
            .find_map(|l| l.strip_prefix("wchar:")?.trim().parse().ok())
            .unwrap()
    };
    let stored = |p: usize| m1["procs"][p]["stored"].as_u64().unwrap();
    for (k, procs) in [(0, [0, 1]), (1, [2, 3])] {
        let pid = st["nodes"][k]["pid"].to_string().replace('"', "");
        let w = wchar(&pid);
        let own = stored(procs[0]) + stored(procs[1]);
        assert!(
            w >= own,
            "node {k} wrote {w} bytes, its parts hold {own}: {st}"
        );
    }
    let w = wchar(&job.id().to_string());
    assert!(
        w < (first + second) / 8,
        "the root wrote {w} bytes for {first} + {second} stored"
    );
    // Kill every process for real, then lose node 1's storage.
    kill9_all(&pids);
    ended_after_kill(&mut job);
    std::fs::remove_dir_all(local.join("node1")).unwrap();
    let all = restart_from(&config, t.path(), 2);
    assert!(
        all.contains("pl v2: rebuilt the parts of ranks [2, 3] from partner copies"),
        "{all}"
    );
    check_counters(t.path(), 4, 800);
    // The engine rebuilt node 1's parts from the copies on node 0.
    for i in 2..4 {
        let part = local.join(format!("node1/pl/v2/rank{i}.ckpt"));
        assert!(part.is_file(), "{}", part.display());
    }
    // The images the engine copied out for the restart went once the processes ran.
    for k in 0..2 {
        let staged = local.join(format!("node{k}/.launch/pl"));
        assert!(!staged.join("restart").exists(), "{}", staged.display());
    }
}

#[test]
fn real_library_idle_process_checkpoints_incrementally() {
    if !real_tools() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let local = t.path().join("local");
    let config = write_config(
        t.path(),
        local.to_str().unwrap(),
        "[reduction]\nincremental = true\n",
    );
    let big = build_test_program(t.path(), "bigarray");
    // 2 processes, each with 16 MiB of distinct words that it only reads, 40 rounds of 0.1 s.
    let imgs = t.path().join("imgs");
    let mut job = configured(
        &config,
        &["launch", "--job", "ia", "-n", "2", "--sim-nodes", "2"],
    )
    .arg("--dir")
    .arg(&imgs)
    .arg("--")
    .arg(&big)
    .args(["16", "40"])
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let s = wait_for("the processes to register", 30, || {
        let s = status(&imgs);
        let p = s["procs"].as_array()?;
        (p.len() == 2 && p.iter().all(|p| p["state"] == "running")).then_some(s)
    });
    std::thread::sleep(Duration::from_millis(300));
    let first = checkpoint(t.path());
    std::thread::sleep(Duration::from_millis(300));
    let second = checkpoint(t.path());
    let (m1, m2) = (manifest(t.path(), "ia", 1), manifest(t.path(), "ia", 2));
    let images = m2["bytes"].as_u64().unwrap();
    assert!(images > 32 << 20, "{m2}");
    // Version 1 stores the arrays (the staged images, taken over where they were written);
    // version 2 only the blocks that changed (the stacks, the image's tables), even if an
    // image gained a page meanwhile: blocks are compared one by one.
    assert!(first > 30 << 20, "{first} of {images}");
    assert!(second * 20 < first, "incremental: {second} after {first}");
    assert_eq!(m1["engine"]["incremental"], false, "{m1}");
    assert_eq!(m2["engine"]["incremental"], true, "{m2}");
    // Each image is a region of its own length. The full checkpoint took each staged image
    // over where its process wrote it (the part is that file, then the index); the
    // incremental one read it and stored the changed blocks.
    for (i, p) in m1["procs"].as_array().unwrap().iter().enumerate() {
        assert_eq!(p["region"], p["bytes"], "{m1}");
        let seg = local.join(format!("node{i}/ia/v1/rank{i}.ckpt~seg0"));
        let len = std::fs::metadata(&seg).map(|m| m.len()).ok();
        assert_eq!(len, p["bytes"].as_u64(), "{}", seg.display());
        assert!(!local
            .join(format!("node{i}/ia/v2/rank{i}.ckpt~seg0"))
            .exists());
    }
    // `cairn list` says the same: version 2 is based on version 1.
    let o = configured(&config, &["list", "--json", "ia"])
        .output()
        .unwrap();
    let list: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(list[1]["base"], 1, "{list}");
    let files = |v: usize| list[v]["stored_bytes"].as_u64().unwrap();
    assert!(files(1) * 20 < files(0), "{list}");
    let pids: Vec<String> = s["procs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pid"].as_str().unwrap().to_string())
        .collect();
    // The images of version 2 stay where the processes wrote them until a newer checkpoint
    // completes; version 1's staging directory is gone.
    let kept = |i: usize, v: u64| local.join(format!("node{i}/.launch/ia/v{v}/proc{i}.img"));
    for (i, p) in m2["procs"].as_array().unwrap().iter().enumerate() {
        let len = std::fs::metadata(kept(i, 2)).map(|m| m.len()).ok();
        assert_eq!(len, p["bytes"].as_u64(), "{}", kept(i, 2).display());
        assert!(!kept(i, 1).parent().unwrap().exists());
    }
    kill9_all(&pids);
    ended_after_kill(&mut job);
    // One byte of process 1's kept image changes after the crash.
    let mut img = std::fs::read(kept(1, 2)).unwrap();
    let mid = img.len() / 2;
    img[mid] ^= 0x40;
    std::fs::write(kept(1, 2), img).unwrap();
    // Restored from the chain (version 2 on top of version 1), every word is still right:
    // process 0's kept image matched the chain block by block and was read in place,
    // process 1's did not and the engine assembled its image from the chain.
    let o = configured(&config, &["restart", "--dir"])
        .arg(&imgs)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(out.matches("bigarray: done OK").count(), 2, "{}", text(&o));
    assert!(
        text(&o).contains("1 image(s) read where their processes wrote them, 1 copied out"),
        "{}",
        text(&o)
    );
    // The job ended well: nothing is kept for a restart any more.
    for i in 0..2 {
        assert!(
            !kept(i, 2).parent().unwrap().exists(),
            "{}",
            kept(i, 2).display()
        );
    }
}

/// Removes the job's shared-memory stores when dropped (a failed test too).
struct Stores<'a> {
    config: &'a Path,
    job: String,
}

impl Drop for Stores<'_> {
    fn drop(&mut self) {
        let _ = configured(self.config, &["fs", "wipe"])
            .env("CAIRN_JOB", &self.job)
            .output();
    }
}

#[test]
fn real_library_images_in_shared_memory_survive_a_wiped_store() {
    if !real_tools() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let config = write_config(
        t.path(),
        "mem",
        "[tiers.mem]\nsize = \"128M\"\n\
         [redundancy]\nscheme = \"partner\"\n\
         [checkpoint]\nfinalize = false\n",
    );
    let job = format!("mem{}", std::process::id());
    let _stores = Stores {
        config: &config,
        job: job.clone(),
    };
    let (mut launched, pids) = launch_counters(t.path(), &config, &job, 4, 600);
    wait_steps(t.path(), 4, 100);
    checkpoint(t.path());
    // `cairn fs df` sees the images in the stores of both nodes.
    let o = configured(&config, &["fs", "df", "--json"])
        .env("CAIRN_JOB", &job)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let df: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(df.as_array().map(Vec::len), Some(2), "{df}");
    kill9_all(&pids);
    ended_after_kill(&mut launched);
    // Node 1 is lost with its store.
    let o = configured(&config, &["fs", "wipe", "--node", "1"])
        .env("CAIRN_JOB", &job)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("removed"), "{}", text(&o));
    restart_from(&config, t.path(), 1);
    check_counters(t.path(), 4, 600);
}

/// `cairn restart` of the job in `t/imgs` in the foreground: it must succeed, saying the
/// engine restored `version`; returns everything it printed.
fn restart_from(config: &Path, t: &Path, version: u64) -> String {
    let o = configured(config, &["restart", "--dir"])
        .arg(t.join("imgs"))
        .output()
        .unwrap();
    let all = text(&o);
    assert!(o.status.success(), "{all}");
    assert!(
        all.contains(&format!("the engine restored version {version}")),
        "{all}"
    );
    all
}

/// `cairn restart` of the job in `t/imgs` in the background; returns it and the pids of its
/// `procs` processes once they all run.
fn restart_in_background(config: &Path, t: &Path, procs: usize) -> (Child, Vec<String>) {
    let job = configured(config, &["restart", "--dir"])
        .arg(t.join("imgs"))
        .stderr(job_log(t))
        .spawn()
        .unwrap();
    (job, running_pids(t, procs))
}

/// `t/job.log`, which the standard error of the launches and restarts of a test that has
/// no other use for it goes to (appended), for [`log_tail`] to show when the test fails.
fn job_log(t: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(t.join("job.log"))
        .unwrap()
}

/// Waits for the job of test directory `t` to end, and checks it ended well.
fn ended_well(job: &mut Child, t: &Path) {
    let st = wait_or_say(
        300,
        || job.try_wait().unwrap(),
        || {
            format!(
                "the job did not end within 300 s; its messages:\n{}",
                log_tail(t)
            )
        },
    );
    assert!(st.success(), "{st}; the job's messages:\n{}", log_tail(t));
}

/// The last lines of `t/job.log`.
fn log_tail(t: &Path) -> String {
    let all = std::fs::read_to_string(t.join("job.log")).unwrap_or_default();
    let lines: Vec<&str> = all.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// The pids of the job's `procs` processes in `t/imgs`, once all run again.
fn running_pids(t: &Path, procs: usize) -> Vec<String> {
    wait_for("the processes to register", 30, || {
        let s = status(&t.join("imgs"));
        let p = s["procs"].as_array()?;
        (p.len() == procs && p.iter().all(|p| p["state"] == "running")).then(|| {
            p.iter()
                .map(|p| p["pid"].as_str().unwrap().to_string())
                .collect()
        })
    })
}

#[test]
fn real_library_a_restarted_job_checkpoints_again_and_restarts_from_that() {
    let Some((t, config)) = real_setup() else {
        return;
    };
    let (mut job, pids) = launch_counters(t.path(), &config, "again", 2, 1000);
    wait_steps(t.path(), 2, 200);
    checkpoint(t.path());
    kill9_all(&pids);
    ended_after_kill(&mut job);
    // The first restart runs in the background: its processes register again, with new
    // pids, and are checkpointed while they run restored.
    let (mut job, restored) = restart_in_background(&config, t.path(), 2);
    assert!(
        restored.iter().all(|p| !pids.contains(p)),
        "{pids:?} {restored:?}"
    );
    wait_steps(t.path(), 2, 500);
    checkpoint(t.path());
    assert!(t.path().join("imgs/again/v2/manifest.json").is_file());
    kill9_all(&restored);
    ended_after_kill(&mut job);
    // The second restart, from the image taken after the first one, runs to the end.
    restart_from(&config, t.path(), 2);
    check_counters(t.path(), 2, 1000);
}

/// Launches `args` as job `job` (one process) with the tiers of `config`; returns the
/// launcher and the process's pid once it runs.
fn launch_one(t: &Path, config: &Path, job: &str, args: &[&str]) -> (Child, String) {
    let child = configured(config, &["launch", "--job", job, "--dir"])
        .arg(t.join("imgs"))
        .arg("--")
        .args(args)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = running_pids(t, 1).remove(0);
    (child, pid)
}

/// `cairn checkpoint` of the job in `t/imgs`, which must fail naming its process 0, the
/// holder with pid `pid`; returns what it printed.
fn refused_checkpoint(t: &Path, pid: &str) -> String {
    let o = cairn()
        .args(["checkpoint", "--dir"])
        .arg(t.join("imgs"))
        .output()
        .unwrap();
    let all = text(&o);
    assert!(!o.status.success(), "{all}");
    // The launched process, or a process it started.
    assert!(
        all.contains(&format!("proc 0 (pid {pid}")) || all.contains("proc 0's process "),
        "{all}"
    );
    all
}

/// A scratch directory with a configuration whose local tier is in it, for the tests of the
/// real library; None (saying why) when the library is not built.
fn real_setup() -> Option<(tempfile::TempDir, PathBuf)> {
    if !real_tools() {
        return None;
    }
    let t = tempfile::tempdir().unwrap();
    let config = write_config(t.path(), t.path().join("local").to_str().unwrap(), "");
    Some((t, config))
}

/// [`real_setup`] with `holder` built in the scratch directory.
fn holder_setup() -> Option<(tempfile::TempDir, PathBuf, PathBuf)> {
    let (t, config) = real_setup()?;
    let holder = build_test_program(t.path(), "holder");
    Some((t, config, holder))
}

/// `holder WHAT 600 t` (native/ckpt/tests/holder.c) launched as job `job`.
fn launch_holder(t: &Path, config: &Path, job: &str, holder: &Path, what: &str) -> (Child, String) {
    let args = [holder.to_str().unwrap(), what, "600", t.to_str().unwrap()];
    launch_one(t, config, job, &args)
}

/// A child that maps the checkpoint library but does not stay in the job (the shell's fork
/// joins it, then execs `env`, which joins again and execs `sleep` with the coordinator's
/// address removed, so its library runs alone) is waited for longer than one without the
/// library (15 s, not 2), then named as loading the library: as one whose connection closed
/// while it ran on, or, when `env` execs before its connection is made, one that never joined.
#[test]
fn real_library_a_child_with_the_library_that_never_joins_is_named() {
    let Some((t, config)) = real_setup() else {
        return;
    };
    let script = format!(
        "env -u CAIRN_COORD_ADDR sleep 30 & echo started > {}/started; wait",
        t.path().display()
    );
    let (mut job, pid) = launch_one(t.path(), &config, "unjoined", &["sh", "-c", &script]);
    wait_for("the child to start", 20, || {
        t.path().join("started").exists().then_some(())
    });
    let all = refused_checkpoint(t.path(), &pid);
    assert!(
        all.contains("(sleep), a child of pid")
            && all.contains("loads the checkpoint library")
            && all.contains("within 15 s"),
        "{all}"
    );
    assert!(!t.path().join("imgs/unjoined/v1").exists());
    kill9_all(&[pid]);
    ended_after_kill(&mut job);
}

/// A process of the tree that joined the job and then closed the descriptors it did not open
/// (the connection to its sub-coordinator among them) while it goes on running: the next
/// checkpoint is refused, naming it as one that joined and whose connection closed, not as
/// one that never joined.
#[test]
fn real_library_a_child_that_closes_its_connection_after_joining_is_named() {
    let Some((t, config)) = real_setup() else {
        return;
    };
    if !trees_have_their_own_proc() {
        return;
    }
    let script = "import os, sys, time\n\
        d = sys.argv[1]\n\
        if os.fork() == 0:\n\
        \x20   while not os.path.exists(d + '/close'):\n\
        \x20       time.sleep(0.05)\n\
        \x20   os.closerange(3, 65536)\n\
        \x20   open(d + '/closed', 'w').close()\n\
        \x20   time.sleep(600)\n\
        \x20   os._exit(0)\n\
        open(d + '/started', 'w').close()\n\
        os.wait()\n";
    let args = ["python3", "-c", script, t.path().to_str().unwrap()];
    let (mut job, pid) = launch_one(t.path(), &config, "closer", &args);
    wait_for("the child to start", 20, || {
        t.path().join("started").exists().then_some(())
    });
    // The first checkpoint waits for the child to join and takes it.
    checkpoint(t.path());
    let m = manifest(t.path(), "closer", 1);
    assert_eq!(
        m["procs"][0]["members"].as_array().map(Vec::len),
        Some(1),
        "{m}"
    );
    std::fs::write(t.path().join("close"), "").unwrap();
    wait_for("the child to close its descriptors", 20, || {
        t.path().join("closed").exists().then_some(())
    });
    let all = refused_checkpoint(t.path(), &pid);
    assert!(
        all.contains("(python3), a child of pid")
            && all.contains("joined the job, but its connection to the sub-coordinator closed")
            && all.contains("did not join again within 15 s"),
        "{all}"
    );
    assert!(!t.path().join("imgs/closer/v2").exists());
    kill9_all(&[pid]);
    ended_after_kill(&mut job);
}

#[test]
fn real_library_a_program_started_through_two_exec_wrappers_is_checkpointed_and_restarted() {
    let Some((t, config)) = real_setup() else {
        return;
    };
    let counter = build_counter(t.path());
    // The launched shell execs a second shell, which execs the counter: the pid is the job's
    // throughout, and the counter must be under checkpoint control when it runs.
    let inner = format!(
        "exec {} 1000 5000 {}",
        counter.display(),
        t.path().display()
    );
    let outer = format!("exec sh -c '{inner}'");
    let (mut job, pid) = launch_one(t.path(), &config, "wrapped", &["sh", "-c", &outer]);
    wait_steps(t.path(), 1, 100);
    wait_for("the counter to join the job", 20, || {
        let s = status(&t.path().join("imgs"));
        (s["procs"][0]["state"] == "running").then_some(())
    });
    checkpoint(t.path());
    let m = manifest(t.path(), "wrapped", 1);
    assert_eq!(m["procs"].as_array().unwrap().len(), 1, "{m}");
    kill9_all(&[pid]);
    ended_after_kill(&mut job);
    restart_from(&config, t.path(), 1);
    check_counters(t.path(), 1, 1000);
}

#[test]
fn real_library_refuses_a_checkpoint_of_what_a_restart_could_not_bring_back() {
    let Some((t, config, holder)) = holder_setup() else {
        return;
    };
    // A statically linked program for `static`.
    let src = t.path().join("static-sleep.c");
    std::fs::write(
        &src,
        "#include <unistd.h>\nint main(void) { sleep(600); return 0; }\n",
    )
    .unwrap();
    let built = Command::new("cc")
        .args(["-static", "-O2", "-o"])
        .arg(t.path().join("static-sleep"))
        .arg(&src)
        .status()
        .unwrap();
    assert!(built.success(), "cc -static (libc6-dev's libc.a)");
    let cases = [
        (
            "socket",
            &[
                ", holder) holds",
                "is a socket (IPv4 datagram, peer 127.0.0.1:9",
            ][..],
        ),
        // A list longer than the library keeps is cut short, and still reaches the user.
        (
            "sockets",
            &["is a socket (IPv4 datagram, peer 127.0.0.1:9", "..."][..],
        ),
        // System V message queues are not saved.
        (
            "msgq",
            &["System V message queue", "is not saved: use a pipe"][..],
        ),
        // A child that cleared its environment runs without the library: named, with
        // what to look for.
        (
            "child",
            &[
                "(sleep), a child of pid",
                "is not under checkpoint control",
                "environment cleared",
            ][..],
        ),
        // So does a statically linked one.
        (
            "static",
            &["(static-sleep), a child of pid", "statically linked"][..],
        ),
    ];
    for (what, expected) in cases {
        let job_name = format!("holds-{what}");
        let (mut job, pid) = launch_holder(t.path(), &config, &job_name, &holder, what);
        wait_steps(t.path(), 1, 20);
        // Refused at the checkpoint, naming the process and what it holds.
        let all = refused_checkpoint(t.path(), &pid);
        for e in expected {
            assert!(all.contains(e), "{what}: no {e:?} in {all}");
        }
        assert!(
            !t.path().join(format!("imgs/{job_name}/v1")).exists(),
            "{what}: a refused checkpoint left a version"
        );
        // The program goes on to its end.
        assert_eq!(wait_child(&mut job, 60).code(), Some(0), "{what}");
        let out = std::fs::read_to_string(t.path().join("out.0")).unwrap();
        assert!(out.ends_with("holder: done\n"), "{what}: {out}");
    }
}

#[test]
fn real_library_shared_memory_directories_event_descriptors_pipes_and_socket_pairs_come_back() {
    let Some((t, config, holder)) = holder_setup() else {
        return;
    };
    // Each step adds 1 to one byte of a shared file mapping (or shared anonymous memory);
    // the steps between the checkpoint and the kill run twice, so unless the bytes go back
    // to what they were at the checkpoint, some end at 2. With `dirs`, every step goes
    // through a directory's descriptor and two devices, which must be open again; with
    // `epoll`, through an epoll instance watching a timerfd and, through a second epoll
    // with a higher number nested in it, an eventfd, whose count is checked every 10 steps; with `selfpipe` and `selfsock`, through a pipe and a socket
    // pair inside the process that always hold the previous step's number; with `pipe`,
    // `pairchild`, `anonchild` and `eventchild`, through a pipe, a socket pair, shared
    // anonymous memory and an eventfd to a child process; with `dgramchild` and `seqchild`,
    // through Unix datagram and seqpacket pairs and UDP sockets to a child, with messages in
    // flight (at the parent's unconnected UDP socket, sent by the child's), and between two
    // unconnected Unix datagram sockets with abstract names; with `passfile`,
    // through a file one child passed to another over a Unix socket (one offset); with
    // `inotify`, through inotify watches with a gap in their numbers and a relative path.
    // The modes that print no sum of shared bytes before they end.
    const PLAIN: [&str; 14] = [
        "dirs",
        "epoll",
        "selfpipe",
        "selfsock",
        "pipe",
        "pairchild",
        "anonchild",
        "eventchild",
        "dgramchild",
        "seqchild",
        "udpchild",
        "unixdgchild",
        "passfile",
        "inotify",
    ];
    for what in ["shared", "anon"].into_iter().chain(PLAIN) {
        let job_name = format!("maps-{what}");
        let (mut job, pid) = launch_holder(t.path(), &config, &job_name, &holder, what);
        wait_steps(t.path(), 1, 100);
        checkpoint(t.path());
        wait_steps(t.path(), 1, 300);
        kill9_all(&[pid]);
        ended_after_kill(&mut job);
        restart_from(&config, t.path(), 1);
        let out = std::fs::read_to_string(t.path().join("out.0")).unwrap();
        let end = if PLAIN.contains(&what) {
            "holder: done\n"
        } else {
            "holder: sum 600\nholder: done\n"
        };
        assert!(out.ends_with(end), "{what}: {out}");
        let seen: Vec<u64> = out
            .lines()
            .filter_map(|l| l.strip_prefix("step ")?.parse().ok())
            .collect();
        assert_eq!(seen, (1..=600).collect::<Vec<_>>(), "{what}");
        if what == "shared" {
            let bytes = std::fs::read(t.path().join("shared.dat")).unwrap();
            assert_eq!(bytes.len(), 4096);
            for (k, b) in bytes.iter().enumerate() {
                assert_eq!(*b, u8::from((1..=600).contains(&k)), "byte {k}");
            }
        }
    }
}

#[test]
fn real_library_a_fifo_to_outside_the_job_fails_the_checkpoint_or_comes_back_closed() {
    let Some((t, config, holder)) = holder_setup() else {
        return;
    };
    let fifo = t.path().join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    // The test holds the reading end (opened read-write, which Linux does not block on):
    // the writer's peer is outside the job.
    let _reader = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fifo)
        .unwrap();
    // By default the checkpoint fails, naming the FIFO, and the program goes on.
    let (mut job, pid) = launch_holder(t.path(), &config, "fifo-fail", &holder, "fifo");
    wait_steps(t.path(), 1, 20);
    let all = refused_checkpoint(t.path(), &pid);
    assert!(all.contains("is a pipe or FIFO"), "{all}");
    assert_eq!(wait_child(&mut job, 60).code(), Some(0));
    // With CAIRN_CKPT_EXTERNAL=close it is checkpointed, and after a restart the program's
    // writes to it fail (EPIPE), which it handles.
    let mut job = configured(&config, &["launch", "--job", "fifo-close", "--dir"])
        .arg(t.path().join("imgs"))
        .arg("--")
        .args([holder.to_str().unwrap(), "fifo", "600"])
        .arg(t.path())
        .env("CAIRN_CKPT_EXTERNAL", "close")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = running_pids(t.path(), 1).remove(0);
    wait_steps(t.path(), 1, 100);
    checkpoint(t.path());
    kill9_all(&[pid]);
    ended_after_kill(&mut job);
    restart_from(&config, t.path(), 1);
    let out = std::fs::read_to_string(t.path().join("out.0")).unwrap();
    assert!(
        out.contains("holder: the FIFO is closed: Broken pipe\n"),
        "{out}"
    );
    assert!(out.ends_with("holder: done\n"), "{out}");
    let seen: Vec<u64> = out
        .lines()
        .filter_map(|l| l.strip_prefix("step ")?.parse().ok())
        .collect();
    assert_eq!(seen, (1..=600).collect::<Vec<_>>());
}

#[test]
fn real_library_a_listening_socket_is_bound_again_and_serves_after_a_restart() {
    use std::io::Read;
    let Some((t, config, holder)) = holder_setup() else {
        return;
    };
    let hello = || {
        let port: u16 = std::fs::read_to_string(t.path().join("port"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut got = String::new();
        c.read_to_string(&mut got).unwrap();
        got
    };
    let (mut job, pid) = launch_holder(t.path(), &config, "listens", &holder, "listen");
    wait_steps(t.path(), 1, 20);
    assert_eq!(hello(), "hello\n");
    checkpoint(t.path());
    kill9_all(&[pid]);
    ended_after_kill(&mut job);
    // The restored process listens on the same address again, and serves.
    let (mut job, _) = restart_in_background(&config, t.path(), 1);
    assert_eq!(hello(), "hello\n");
    assert_eq!(wait_child(&mut job, 60).code(), Some(0));
    let out = std::fs::read_to_string(t.path().join("out.0")).unwrap();
    assert!(out.ends_with("holder: done\n"), "{out}");
}

/// Waits until `t/out.<role>` has passed `step` (native/ckpt/tests/tree.c).
fn wait_role(t: &Path, role: &str, step: u64) {
    wait_for(&format!("the {role} to pass step {step}"), 30, || {
        std::fs::read_to_string(t.join(format!("out.{role}")))
            .is_ok_and(|o| o.contains(&format!("step {step}\n")))
            .then_some(())
    });
}

/// Checks a finished tree (native/ckpt/tests/tree.c): parent and child counted every step
/// once, in order, kept their pids (and the child its parent's) throughout, and the parent
/// collected the child, by the pid fork gave it, with its exit status.
fn check_tree(t: &Path, steps: u64) {
    for role in ["parent", "child"] {
        let out = std::fs::read_to_string(t.join(format!("out.{role}"))).unwrap();
        assert!(!out.contains("BAD"), "{role}: {out}");
        assert!(out.contains(&format!("{role}: done OK")), "{role}: {out}");
        let steps_seen: Vec<u64> = out
            .lines()
            .filter_map(|l| l.strip_prefix("step ")?.parse().ok())
            .collect();
        assert_eq!(steps_seen, (1..=steps).collect::<Vec<_>>(), "{role}");
    }
    let parent = std::fs::read_to_string(t.join("out.parent")).unwrap();
    assert!(parent.contains("collected, status 7"), "{parent}");
}

/// A parent and the child it forked (or forked and exec'd) are one job process: both are
/// checkpointed, the whole tree is killed, and it comes back with the same pids, the child
/// still the parent's, three times in a row.
fn tree_cycles(mode: &str) {
    let Some((t, config)) = real_setup() else {
        return;
    };
    let tree = build_test_program(t.path(), "tree");
    let steps = 3000u64;
    let args = [
        tree.to_str().unwrap(),
        mode,
        &steps.to_string(),
        t.path().to_str().unwrap(),
    ];
    let job_name = format!("tree-{mode}");
    let (mut job, mut pid) = launch_one(t.path(), &config, &job_name, &args);
    let mut at = 100;
    for v in 1..=3u64 {
        wait_role(t.path(), "parent", at);
        wait_role(t.path(), "child", at);
        checkpoint(t.path());
        let m = manifest(t.path(), &job_name, v);
        let members = m["procs"][0]["members"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            members.len(),
            1,
            "the child's image is stored with its parent's: {m}"
        );
        at += 300;
        wait_role(t.path(), "parent", at);
        // The whole tree dies with its first process (its namespace's init ends it).
        kill9_all(&[pid]);
        ended_after_kill(&mut job);
        let (again, pids) = restart_in_background(&config, t.path(), 1);
        job = again;
        pid = pids[0].clone();
        at += 100;
    }
    assert!(wait_child(&mut job, 120).success());
    check_tree(t.path(), steps);
}

#[test]
fn real_library_a_forked_child_is_checkpointed_and_restored_with_its_pid() {
    tree_cycles("fork");
}

#[test]
fn real_library_a_child_started_by_fork_and_exec_is_checkpointed_and_restored() {
    tree_cycles("exec");
}

/// The last `step N` line in the file at `path` (0 before the first).
fn last_step(path: &Path) -> u64 {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("step ")?.parse().ok())
        .next_back()
        .unwrap_or(0)
}

/// Three times in a row: once `progress` has moved on, checkpoint the job `job_name` launched
/// as `launched` (its tree must have at least `members` processes besides the first), let
/// it move on again, kill the tree and restart it in the background. Returns the last
/// restart's `cairn` process.
fn three_cycles(
    t: &Path,
    config: &Path,
    job_name: &str,
    launched: (Child, String),
    members: usize,
    progress: &dyn Fn() -> u64,
) -> Running {
    let (job, mut pid) = launched;
    let mut job = Running(job);
    let moved_on = || {
        let at = progress();
        wait_for("the program to go on", 60, || {
            (progress() > at + 300).then_some(())
        });
    };
    for v in 1..=3u64 {
        moved_on();
        checkpoint(t);
        let m = manifest(t, job_name, v);
        let n = m["procs"][0]["members"].as_array().map_or(0, |a| a.len());
        assert!(n >= members, "the tree's other processes: {m}");
        moved_on();
        kill9_all(&[pid]);
        ended_after_kill(&mut job);
        let (again, pids) = restart_in_background(config, t, 1);
        job.0 = again;
        pid = pids[0].clone();
    }
    job
}

/// A `cairn launch` or `cairn restart` that is killed if the test fails while it runs: its
/// processes end with it (parent-death signal) instead of outliving the test and holding
/// the harness's output open.
struct Running(Child);

impl std::ops::Deref for Running {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Running {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// `producer | filter | consumer` started by a shell (native/ckpt/tests/pipeline.c): the
/// shell and its three children, with the bytes in flight in both pipes and in the stages'
/// buffers, are checkpointed, killed and restored three times in a row, and the consumer
/// still sees every line once, in order.
#[test]
fn real_library_a_shell_pipeline_comes_back_with_the_bytes_in_its_pipes() {
    let Some((t, config)) = real_setup() else {
        return;
    };
    let stage = build_test_program(t.path(), "pipeline");
    let (p, dir) = (stage.display(), t.path().display());
    let lines = 400_000u64;
    let script = format!("{p} produce {lines} | {p} filter | {p} consume {dir}");
    let (job, pid) = launch_one(t.path(), &config, "pipeline", &["sh", "-c", &script]);
    let out = t.path().join("out.consumer");
    let mut job = three_cycles(t.path(), &config, "pipeline", (job, pid), 3, &|| {
        last_step(&out)
    });
    ended_well(&mut job, t.path());
    let out = std::fs::read_to_string(t.path().join("out.consumer")).unwrap();
    assert!(!out.contains("BAD"), "{out}");
    assert!(
        out.ends_with(&format!("consumer: done {lines} OK\n")),
        "{out}"
    );
}

/// Python's `multiprocessing.Pool` (three workers forked by the interpreter, their queues
/// over pipes, their locks POSIX semaphores in unlinked shared memory) is checkpointed,
/// killed and restored three times in a row, and every result arrives once, right.
#[test]
fn real_library_a_python_multiprocessing_pool_comes_back() {
    let Some((t, config)) = real_setup() else {
        return;
    };
    let script = t.path().join("pool.py");
    std::fs::write(
        &script,
        "import multiprocessing as mp, sys, time\n\
         def work(x):\n    time.sleep(0.001)\n    return x * x\n\
         if __name__ == '__main__':\n\
         \x20   n = 30000\n\
         \x20   out = open(sys.argv[1], 'w')\n\
         \x20   with mp.get_context('fork').Pool(3) as pool:\n\
         \x20       total = 0\n\
         \x20       for i, r in enumerate(pool.imap(work, range(1, n + 1), chunksize=4), 1):\n\
         \x20           if r != i * i:\n\
         \x20               print('pool: BAD', i, r, file=out, flush=True)\n\
         \x20               sys.exit(1)\n\
         \x20           total += r\n\
         \x20           if i % 100 == 0:\n\
         \x20               print('step', i, file=out, flush=True)\n\
         \x20   print('pool: done', total, file=out, flush=True)\n",
    )
    .unwrap();
    let out = t.path().join("pool.out");
    let args = ["python3", script.to_str().unwrap(), out.to_str().unwrap()];
    let launched = launch_one(t.path(), &config, "pool", &args);
    let mut job = three_cycles(t.path(), &config, "pool", launched, 3, &|| last_step(&out));
    ended_well(&mut job, t.path());
    let text = std::fs::read_to_string(&out).unwrap();
    let n: u64 = 30000;
    let total = n * (n + 1) * (2 * n + 1) / 6;
    assert!(text.ends_with(&format!("pool: done {total}\n")), "{text}");
}

/// A forking TCP server (native/ckpt/tests/tcpserv.c): the listener, three clients and the
/// three handlers it forked, each connection with requests and replies of up to 96 KiB in
/// flight, are checkpointed, killed and restored three times in a row: every client sees
/// every reply once, right, and the server collects all six children with status 0.
#[test]
fn real_library_a_forking_tcp_server_and_its_clients_come_back_connected() {
    let Some((t, config)) = real_setup() else {
        return;
    };
    let prog = build_test_program(t.path(), "tcpserv");
    let rounds = 4000u64;
    let args = [
        prog.to_str().unwrap(),
        t.path().to_str().unwrap(),
        "3",
        &rounds.to_string(),
    ];
    let launched = launch_one(t.path(), &config, "tcp", &args);
    let out0 = t.path().join("out.client0");
    let mut job = three_cycles(t.path(), &config, "tcp", launched, 6, &|| last_step(&out0));
    ended_well(&mut job, t.path());
    for i in 0..3 {
        let out = std::fs::read_to_string(t.path().join(format!("out.client{i}"))).unwrap();
        assert!(!out.contains("BAD"), "client {i}: {out}");
        assert!(out.ends_with(&format!("client {i}: done OK\n")), "{out}");
    }
    let server = std::fs::read_to_string(t.path().join("out.server")).unwrap();
    assert_eq!(server, "server: done 6 OK\n");
}

/// A producer and a consumer sharing a POSIX shared-memory ring (native/ckpt/tests/shmpair.c):
/// the object is saved once and mapped by both processes again under its name, the pipe that
/// tells the consumer of new records keeps its bytes, and the consumer's epoll loop over that
/// pipe, a timerfd and an eventfd goes on. After three checkpoint/kill/restart cycles every
/// record arrived once, in order, intact, the pipe carried one byte per record, the eventfd
/// gave back every count added to it, and the object is found by its name.
#[test]
fn real_library_a_posix_shared_memory_producer_and_consumer_come_back_sharing_it() {
    let Some((t, config)) = real_setup() else {
        return;
    };
    producer_and_consumer(t.path(), &config, "shmpair", "shm");
}

/// `native/ckpt/tests/<program>.c DIR 12000` (a producer and a consumer it forks, 12000
/// records between them) launched as job `job`, through three checkpoint/kill/restart
/// cycles: the consumer saw every record once, in order, intact, and both said OK.
fn producer_and_consumer(t: &Path, config: &Path, program: &str, job: &str) {
    let prog = build_test_program(t, program);
    let records = 12000u64;
    let args = [
        prog.to_str().unwrap(),
        t.to_str().unwrap(),
        &records.to_string(),
    ];
    let launched = launch_one(t, config, job, &args);
    let out = t.join("out.consumer");
    let mut job = three_cycles(t, config, job, launched, 1, &|| last_step(&out));
    ended_well(&mut job, t);
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(!text.contains("BAD"), "{text}");
    assert!(text.ends_with("consumer: done OK\n"), "{text}");
    let seen: Vec<u64> = text
        .lines()
        .filter_map(|l| l.strip_prefix("step ")?.parse().ok())
        .collect();
    assert!(
        seen == (1..=records).collect::<Vec<_>>(),
        "{} steps",
        seen.len()
    );
    let producer = std::fs::read_to_string(t.join("out.producer")).unwrap();
    assert_eq!(producer, "producer: done OK\n");
}

/// A producer and a consumer sharing System V shared memory and semaphores
/// (native/ckpt/tests/sysvpair.c): a ring segment, a semaphore set counting its slots, a
/// keyed segment nobody has attached and a segment removed while both still use it. After
/// three checkpoint/kill/restart cycles every record arrived once, in order and intact, and
/// every object has its id, key, size, mode, contents and removed state.
#[test]
fn real_library_system_v_shared_memory_and_semaphores_come_back_with_their_ids() {
    let Some((t, config)) = real_setup() else {
        return;
    };
    producer_and_consumer(t.path(), &config, "sysvpair", "sysv");
}

/// With `[security] authenticate`, a launched job's own manifests carry the key's MAC as
/// its checkpoints do: it restarts from them, and one changed by hand (here the version's
/// creation time) is refused, naming it.
#[test]
fn real_library_an_authenticated_job_restarts_and_refuses_a_changed_manifest() {
    if !real_tools() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let key = t.path().join("key");
    let config = write_config(
        t.path(),
        t.path().join("local").to_str().unwrap(),
        &format!("[security]\nauthenticate = true\nkey_file = {key:?}\n"),
    );
    let (job, pids) = launch_counters(t.path(), &config, "auth", 2, 3000);
    let mut job = Running(job);
    wait_steps(t.path(), 2, 50);
    checkpoint(t.path());
    kill9_all(&pids);
    ended_after_kill(&mut job);
    assert!(key.is_file(), "the launch created no key");
    let v1 = t.path().join("imgs/auth/v1");
    assert!(v1.join("manifest.json.mac").is_file());
    // Restarts, and checkpoints again.
    let (again, pids) = restart_in_background(&config, t.path(), 2);
    let mut job = Running(again);
    wait_steps(t.path(), 2, 100);
    checkpoint(t.path());
    kill9_all(&pids);
    ended_after_kill(&mut job);
    // Version 2's manifest changed by hand: refused, and so is the restart from it.
    let path = t.path().join("imgs/auth/v2/manifest.json");
    let json = std::fs::read_to_string(&path).unwrap();
    let changed = json.replacen("\"created\": ", "\"created\": 1", 1);
    assert_ne!(changed, json);
    std::fs::write(&path, changed).unwrap();
    let o = configured(&config, &["restart", "--dir"])
        .arg(t.path().join("imgs"))
        .arg("2")
        .output()
        .unwrap();
    let all = text(&o);
    assert!(!o.status.success(), "{all}");
    assert!(
        all.contains("fails authentication") && all.contains("v2/manifest.json"),
        "{all}"
    );
}

/// A byte of a System V segment's saved pages damaged in the image of the tree's root: the
/// restorer refuses the image (exit 4, naming the segment) before any process of the tree
/// runs, rather than give the segment back with wrong contents; the undamaged image is
/// restored.
#[test]
fn real_library_a_damaged_system_v_segment_is_refused() {
    let Some((t, config)) = real_setup() else {
        return;
    };
    let prog = build_test_program(t.path(), "sysvpair");
    let args = [
        prog.to_str().unwrap(),
        t.path().to_str().unwrap(),
        "1000000",
    ];
    let (job, pid) = launch_one(t.path(), &config, "sysvbad", &args);
    let mut job = Running(job);
    let out = t.path().join("out.consumer");
    wait_for("the consumer to go on", 60, || {
        (last_step(&out) > 100).then_some(())
    });
    checkpoint(t.path());
    kill9_all(&[pid]);
    ended_after_kill(&mut job);
    // The root's image is the stored one that lists the tree's System V objects.
    let stored = t.path().join("local/node0/sysvbad/v1");
    let (root, seg) = std::fs::read_dir(&stored)
        .unwrap()
        .filter_map(|e| {
            let p = e.ok()?.path();
            let ipcs = cairn_ckpt::read_ipcs(&p).ok()?;
            let seg = ipcs
                .into_iter()
                .find(|c| c.kind == cairn_ckpt::IPC_SHM && c.saved_pages > 0)?;
            Some((p, seg))
        })
        .next()
        .unwrap_or_else(|| panic!("no image with a saved segment in {}", stored.display()));
    let restorer = built("cairn-restore").unwrap();
    let run = |img: &Path| {
        Command::new("timeout")
            .arg("10")
            .arg(&restorer)
            .arg("--init")
            .arg(img)
            .stdout(Stdio::null())
            .output()
            .unwrap()
    };
    let mut bytes = std::fs::read(&root).unwrap();
    bytes[seg.data_off as usize + 100] ^= 0x20;
    let bad = t.path().join("bad.img");
    std::fs::write(&bad, &bytes).unwrap();
    let o = run(&bad);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(
        err.contains(&format!("System V shared memory segment {}", seg.id))
            && err.contains("fail their checksum"),
        "{err}"
    );
    // The same image undamaged gets past the segments: it runs until the timeout ends it.
    let o = run(&root);
    assert_eq!(
        o.status.code(),
        Some(124),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A program whose heap keeps growing (native/ckpt/tests/heapgrow.c: blocks allocated every
/// step, an older one freed every third) through three checkpoint/kill/restart cycles: after
/// each restart the program break is where the restored heap ends, so malloc grows the heap
/// on from there and frees blocks from before the restart (with the restorer's break it
/// aborted), every block keeps its bytes, and /proc/self/cmdline is still the program's
/// command line.
#[test]
fn real_library_a_growing_heap_goes_on_growing_after_a_restart() {
    let Some((t, config)) = real_setup() else {
        return;
    };
    let prog = build_test_program(t.path(), "heapgrow");
    let steps = 3000u64;
    let (dir, steps_arg) = (t.path().to_str().unwrap(), steps.to_string());
    let launched = launch_one(
        t.path(),
        &config,
        "heap",
        &[prog.to_str().unwrap(), dir, &steps_arg],
    );
    let out = t.path().join("out.heap");
    let mut job = three_cycles(t.path(), &config, "heap", launched, 0, &|| last_step(&out));
    ended_well(&mut job, t.path());
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(!text.contains("BAD"), "{text}");
    assert!(
        text.ends_with(&format!("heap: done {steps} OK\n")),
        "{text}"
    );
}

/// A program on a pseudo-terminal, under `script` (native/ckpt/tests/ttyprog.c): `script`
/// holds the master and copies what the program writes into a file, the program has the
/// slave as its controlling terminal, in its foreground group, with its own settings. After
/// each of three checkpoint/kill/restart cycles all of that holds again, and the file has
/// every line once, in order.
#[test]
fn real_library_a_program_on_a_pseudo_terminal_comes_back_with_its_terminal() {
    let Some((t, config)) = real_setup() else {
        return;
    };
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: no `script` (util-linux)");
        return;
    }
    let prog = build_test_program(t.path(), "ttyprog");
    let steps = 3000u64;
    let dir = t.path().display();
    let script = format!(
        "script -qfec '{} {dir} {steps}' /dev/null > {dir}/typescript",
        prog.display()
    );
    let launched = launch_one(t.path(), &config, "tty", &["sh", "-c", &script]);
    let out = t.path().join("out.tty");
    let mut job = three_cycles(t.path(), &config, "tty", launched, 2, &|| last_step(&out));
    ended_well(&mut job, t.path());
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(!text.contains("BAD"), "{text}");
    assert!(text.ends_with(&format!("tty: done {steps} OK\n")), "{text}");
    let typescript = std::fs::read_to_string(t.path().join("typescript")).unwrap();
    let want: String = (1..=steps).map(|i| format!("line {i}\r\n")).collect();
    assert!(
        typescript == want,
        "typescript: {} bytes, first difference at {:?}",
        typescript.len(),
        typescript
            .bytes()
            .zip(want.bytes())
            .position(|(a, b)| a != b)
    );
}

/// A job ends with its launcher: after `cairn launch` is killed with SIGKILL, its program
/// (and the child it forked) are gone within seconds, so a later `cairn restart` cannot run
/// the job twice.
#[test]
fn real_library_the_job_ends_when_its_launcher_is_killed() {
    let Some((t, config)) = real_setup() else {
        return;
    };
    let tree = build_test_program(t.path(), "tree");
    let args = [
        tree.to_str().unwrap(),
        "fork",
        "100000",
        t.path().to_str().unwrap(),
    ];
    let (mut job, pid) = launch_one(t.path(), &config, "orphan", &args);
    wait_role(t.path(), "child", 20);
    // Running: its /proc entry is there and not a zombie's.
    let alive = |p: &str| {
        std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|st| {
            st.rsplit_once(") ")
                .is_some_and(|(_, r)| !r.starts_with('Z'))
        })
    };
    assert!(alive(&pid));
    job.kill().unwrap();
    job.wait().unwrap();
    wait_for("the program to end with its launcher", 20, || {
        (!alive(&pid)).then_some(())
    });
    // The forked child went with it: its output stops.
    let out = t.path().join("out.child");
    let at = last_step(&out);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(last_step(&out), at, "the child still runs");
}

/// A shell script that sends its output to a log (`exec > log`) and runs a pipeline in each
/// of its rounds: the shell and every command it runs share the log's one open file
/// description, so after each restart the log must go on from where it was at the
/// checkpoint, shared again: every round's line once, in order, nothing written over.
#[test]
fn real_library_a_log_shared_by_a_shell_and_its_commands_keeps_one_offset() {
    let Some((t, config)) = real_setup() else {
        return;
    };
    let stage = build_test_program(t.path(), "pipeline");
    let (p, dir) = (stage.display(), t.path().display());
    let rounds = 10;
    let script = format!(
        "exec > {dir}/log; i=0; while [ $i -lt {rounds} ]; do i=$((i+1)); \
         {p} produce 150000 | {p} filter | {p} consume {dir}; \
         echo \"round $i $(tail -n 1 {dir}/out.consumer)\"; done"
    );
    let log = t.path().join("log");
    let out = t.path().join("out.consumer");
    let progress = || {
        let done = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count() as u64;
        done * 100_000 + last_step(&out)
    };
    let launched = launch_one(t.path(), &config, "log", &["sh", "-c", &script]);
    let mut job = three_cycles(t.path(), &config, "log", launched, 3, &progress);
    ended_well(&mut job, t.path());
    let text = std::fs::read_to_string(&log).unwrap();
    let want: String = (1..=rounds)
        .map(|i| format!("round {i} consumer: done 150000 OK\n"))
        .collect();
    assert_eq!(text, want);
}

/// A child that has ended and is not collected yet (a zombie) comes back as one with its exit
/// status: its parent, restored, collects it by its pid with status 7.
#[test]
fn real_library_an_ended_child_comes_back_for_its_parent_to_collect() {
    let Some((t, config)) = real_setup() else {
        return;
    };
    let tree = build_test_program(t.path(), "tree");
    let args = [
        tree.to_str().unwrap(),
        "zombie",
        "1500",
        t.path().to_str().unwrap(),
    ];
    let (mut job, pid) = launch_one(t.path(), &config, "zombie", &args);
    wait_role(t.path(), "parent", 100);
    checkpoint(t.path());
    wait_role(t.path(), "parent", 300);
    kill9_all(&[pid]);
    ended_after_kill(&mut job);
    restart_from(&config, t.path(), 1);
    let out = std::fs::read_to_string(t.path().join("out.parent")).unwrap();
    assert!(out.contains("parent: done OK"), "{out}");
    assert!(out.contains("collected, status 7"), "{out}");
    let steps: Vec<u64> = out
        .lines()
        .filter_map(|l| l.strip_prefix("step ")?.parse().ok())
        .collect();
    assert_eq!(steps, (1..=1500).collect::<Vec<_>>());
}

/// A Python asyncio program (an epoll event loop, and CPython's check that `getpid()` is the
/// pid it started with) goes on after a restart: its pid is the same.
#[test]
fn real_library_a_python_asyncio_program_comes_back() {
    let Some((t, config)) = real_setup() else {
        return;
    };
    let script = t.path().join("aio.py");
    std::fs::write(
        &script,
        "import asyncio, sys\n\
         async def main(path):\n\
         \x20   out = open(path, 'w')\n\
         \x20   for i in range(1, 1201):\n\
         \x20       await asyncio.sleep(0.004)\n\
         \x20       print('step', i, file=out, flush=True)\n\
         \x20   print('asyncio: done', file=out, flush=True)\n\
         asyncio.run(main(sys.argv[1]))\n",
    )
    .unwrap();
    let out = t.path().join("aio.out");
    let args = ["python3", script.to_str().unwrap(), out.to_str().unwrap()];
    let (mut job, pid) = launch_one(t.path(), &config, "aio", &args);
    wait_for("the loop to run", 60, || {
        (last_step(&out) > 100).then_some(())
    });
    checkpoint(t.path());
    let at = last_step(&out);
    wait_for("the loop to go on", 60, || {
        (last_step(&out) > at + 100).then_some(())
    });
    kill9_all(&[pid]);
    ended_after_kill(&mut job);
    restart_from(&config, t.path(), 1);
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.ends_with("asyncio: done\n"), "{text}");
    let steps: Vec<u64> = text
        .lines()
        .filter_map(|l| l.strip_prefix("step ")?.parse().ok())
        .collect();
    assert_eq!(steps, (1..=1200).collect::<Vec<_>>());
}

/// `cairn --config CONFIG ARGS` where no pid namespace can be made: in a user namespace (its
/// user mapped to itself) whose `max_pid_namespaces` is 0, as on a system that allows none.
/// None, saying why, when this machine cannot make that user namespace.
fn without_pid_namespaces(config: &Path, args: &[&str]) -> Option<Command> {
    let probe = Command::new("unshare")
        .args(["--user", "--map-root-user", "true"])
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        eprintln!("skipped: `unshare --user --map-root-user` is not allowed here");
        return None;
    }
    let plain = configured(config, args);
    let mut c = Command::new("unshare");
    c.args(["--user", "--map-root-user", "sh", "-c"])
        .arg("echo 0 > /proc/sys/user/max_pid_namespaces && exec \"$@\"")
        .arg("sh")
        .arg(plain.get_program())
        .args(plain.get_args());
    for (k, v) in plain.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    Some(c)
}

/// Where the system allows no pid namespace, `cairn launch` runs the program without one: a
/// single process is checkpointed, killed and restarted as usual, and a process with a
/// child is refused at the checkpoint, naming the child (its pid could not come back).
#[test]
fn real_library_without_a_pid_namespace_one_process_restarts_and_a_child_is_refused() {
    let Some((t, config, holder)) = holder_setup() else {
        return;
    };
    let counter = build_counter(t.path());
    let imgs = t.path().join("imgs");
    let (c, d) = (counter.to_str().unwrap(), t.path().to_str().unwrap());
    let launch = |job: &str, prog: &[&str]| {
        let mut args = vec![
            "launch",
            "--job",
            job,
            "--dir",
            imgs.to_str().unwrap(),
            "--",
        ];
        args.extend_from_slice(prog);
        without_pid_namespaces(&config, &args)
    };
    let Some(mut cmd) = launch("nons", &[c, "1000", "5000", d]) else {
        return;
    };
    let mut job = Running(cmd.stderr(Stdio::null()).spawn().unwrap());
    let pid = running_pids(t.path(), 1).remove(0);
    wait_steps(t.path(), 1, 100);
    checkpoint(t.path());
    kill9_all(&[pid]);
    ended_after_kill(&mut job);
    let o = without_pid_namespaces(&config, &["restart", "--dir", imgs.to_str().unwrap()])
        .unwrap()
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    check_counters(t.path(), 1, 1000);

    let h = holder.to_str().unwrap();
    let mut cmd = launch("nons-child", &[h, "pairchild", "600", d]).unwrap();
    let mut job = Running(cmd.stderr(Stdio::null()).spawn().unwrap());
    let pid = running_pids(t.path(), 1).remove(0);
    wait_steps(t.path(), 1, 20);
    let all = refused_checkpoint(t.path(), &pid);
    assert!(
        all.contains("is not under checkpoint control (the job runs without a pid namespace"),
        "{all}"
    );
    assert_eq!(wait_child(&mut job, 60).code(), Some(0));
}

/// `native/ckpt/tests/<name>.c` built with Open MPI's `mpicc` into `dir/<name>`.
fn build_mpi_program(dir: &Path, name: &str) -> PathBuf {
    build_with(dir, name, "mpicc")
}

/// `native/ckpt/tests/<name>.c` built with the compiler wrapper `mpicc` (`mpicc` is Open
/// MPI's, `mpicc.mpich` MPICH's) into `dir/<name>`.
fn build_with(dir: &Path, name: &str, mpicc: &str) -> PathBuf {
    let exe = dir.join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../native/ckpt/tests")
        .join(format!("{name}.c"));
    let o = Command::new(mpicc)
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-lm")
        .output()
        .unwrap_or_else(|e| panic!("{mpicc} must be installed (`./run test` installs it): {e}"));
    assert!(o.status.success(), "{}", text(&o));
    exe
}

/// Held by a test while it runs an MPI job in this host's own network: Open MPI's TCP
/// transport takes the same ports (1024, 1025, ...) in every job, and a restarted job finds
/// them taken by another job started meanwhile (docs/transparent.md: its listener then comes
/// back not listening). Jobs on namespace hosts have ports of their own.
fn host_mpi() -> std::sync::MutexGuard<'static, ()> {
    static HOST_MPI: std::sync::Mutex<()> = std::sync::Mutex::new(());
    HOST_MPI.lock().unwrap_or_else(|e| e.into_inner())
}

/// Options that keep an MPI job in this host's own network on IPv4 loopback. Open MPI's TCP
/// transports take every interface but loopback by default, and the other tests' namespace
/// hosts add and remove bridges on this machine: a job that published a bridge's address
/// when it started hangs, or cannot listen there again at a restart, once that bridge is
/// gone. Its launcher listens on a port the kernel picks, once per address family; one
/// listener is less to find taken by another test's connection at a restart (a listener that
/// cannot be bound again comes back not listening: docs/transparent.md).
const ON_LOOPBACK: [&str; 9] = [
    "--mca",
    "btl_tcp_if_include",
    "127.0.0.1/8",
    "--mca",
    "oob_tcp_if_include",
    "127.0.0.1/8",
    "--mca",
    "oob_tcp_disable_ipv6_family",
    "1",
];

/// An unmodified MPI job, `mpirun -n 4` with its ranks over `btls` (Open MPI's launcher with
/// its PMIx server, and the ranks with two messages always in flight around a ring, an
/// allreduce and a broadcast on a split communicator: native/ckpt/tests/mpiring.c), is
/// checkpointed, killed and restarted three times in a row, and every rank checks every
/// message and reduction to the end.
fn mpi_ring_three_times(job_name: &str, btls: &str) {
    let Some((t, config)) = real_setup() else {
        return;
    };
    let _alone = host_mpi();
    let ring = build_mpi_program(t.path(), "mpiring");
    let steps = 6000u64;
    let mut launch = configured(&config, &["launch", "--job", job_name, "--dir"]);
    launch
        .arg(t.path().join("imgs"))
        .args([
            "--",
            "mpirun",
            "--oversubscribe",
            "-n",
            "4",
            "--mca",
            "btl",
            btls,
        ])
        .args(ON_LOOPBACK)
        .arg(&ring)
        .arg(steps.to_string())
        .arg(t.path())
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    ring_through_three_cycles(&t, &config, job_name, launch, steps);
}

/// The ring `launch` starts (`cairn launch` of an MPI launcher of 4 ranks of
/// native/ckpt/tests/mpiring.c, `steps` steps, writing into `t`) through three
/// checkpoint/kill/restart cycles to its end, every message and reduction right.
fn ring_through_three_cycles(
    t: &tempfile::TempDir,
    config: &Path,
    job_name: &str,
    mut launch: Command,
    steps: u64,
) {
    let child = launch.stderr(job_log(t.path())).spawn().unwrap();
    let pid = running_pids(t.path(), 1).remove(0);
    let out = t.path().join("out.ring");
    let mut job = three_cycles(t.path(), config, job_name, (child, pid), 4, &|| {
        last_step(&out)
    });
    ended_well(&mut job, t.path());
    ring_ended_well(t.path(), &out, steps);
}

/// The ring (native/ckpt/tests/mpiring.c) of `steps` steps, its rank 0 writing to `out`,
/// reached its end with every message and reduction right on every rank.
fn ring_ended_well(t: &Path, out: &Path, steps: u64) {
    let text = std::fs::read_to_string(out).unwrap();
    assert!(text.contains(&format!("done {steps} ")), "{text}");
    for r in 0..4 {
        let end = std::fs::read_to_string(t.join(format!("end.{r}"))).unwrap();
        assert_eq!(end.trim(), format!("rank {r} ok"));
    }
}

#[test]
fn real_library_an_mpi_job_over_shared_memory_comes_back_with_its_messages_in_flight() {
    mpi_ring_three_times("mpishm", "self,vader");
}

#[test]
fn real_library_an_mpi_job_over_tcp_comes_back_with_its_messages_in_flight() {
    mpi_ring_three_times("mpitcp", "self,tcp");
}

/// The same ring under MPICH (Debian's 4.0: its ch4 device over UCX) started by its own
/// launcher, Hydra (`mpiexec.mpich`, its proxy and the ranks), with UCX's transports `tls`
/// (its choice when `None`): checkpointed, killed and restarted three times in a row, every
/// rank checking every message and reduction to the end.
fn mpich_ring_three_times(job_name: &str, tls: Option<&str>) {
    let Some((t, config)) = real_setup() else {
        return;
    };
    if !trees_have_their_own_proc() {
        return;
    }
    let _alone = host_mpi();
    let ring = build_with(t.path(), "mpiring", "mpicc.mpich");
    let steps = 3000u64;
    let mut launch = configured(&config, &["launch", "--job", job_name, "--dir"]);
    launch
        .arg(t.path().join("imgs"))
        .args(["--", "mpiexec.mpich", "-n", "4"])
        .arg(&ring)
        .arg(steps.to_string())
        .arg(t.path())
        .env_remove("UCX_TLS");
    if let Some(tls) = tls {
        launch.env("UCX_TLS", tls);
    }
    ring_through_three_cycles(&t, &config, job_name, launch, steps);
}

/// MPICH with UCX's own choice of transports on one host: shared memory through its POSIX
/// transport (files in /dev/shm removed as soon as made, their descriptors kept and opened by
/// the peers through /proc), Unix datagram sockets with abstract names through which the
/// ranks wake each other, and cross-memory attach for large messages.
#[test]
fn real_library_an_mpich_job_comes_back_with_its_messages_in_flight() {
    mpich_ring_three_times("mpich", None);
}

/// MPICH over UCX's System V shared-memory transport (its segments, and the same sockets).
/// Not over UCX's TCP transport: MPICH before 4.2 hangs in MPI_Finalize over it when the
/// ranks reach it at different times, without Cairn in 8 of 20 runs of this ring
/// (docs/transparent.md).
#[test]
fn real_library_an_mpich_job_over_system_v_shared_memory_comes_back() {
    mpich_ring_three_times("mpichsysv", Some("sysv,self"));
}

/// `cairn-prun`, Cairn's PMIx launcher, beside the cairn binary; `None`, saying so, when it
/// is not built (no libpmix development files).
fn prun() -> Option<PathBuf> {
    let p = built("cairn-prun");
    if p.is_none() {
        eprintln!("skipped: cairn-prun is not built beside the cairn binary (no libpmix-dev)");
    }
    p
}

/// An MPI job whose ranks are started as a PMIx batch system starts them (`srun
/// --mpi=pmix`), by `cairn-prun` as the job's process: the ring of 4 ranks over Open MPI's
/// own choice of transports (shared memory between them), each rank's PMIx connection to
/// the launcher's server and the server's store, checkpointed, killed and restarted three
/// times in a row, every rank checking every message and reduction to the end.
#[test]
fn real_library_an_mpi_job_started_by_a_pmix_launcher_comes_back_with_its_messages_in_flight() {
    let Some((t, config)) = real_setup() else {
        return;
    };
    let Some(prun) = prun() else {
        return;
    };
    let _alone = host_mpi();
    let ring = build_mpi_program(t.path(), "mpiring");
    let steps = 6000u64;
    let mut launch = configured(&config, &["launch", "--job", "prun", "--dir"]);
    launch
        .arg(t.path().join("imgs"))
        .arg("--")
        .arg(&prun)
        .args(["-n", "4"])
        .arg(&ring)
        .arg(steps.to_string())
        .arg(t.path())
        .env("OMPI_MCA_btl_tcp_if_include", "127.0.0.1/8");
    ring_through_three_cycles(&t, &config, "prun", launch, steps);
}

/// The end of a batch job: the launcher of a running MPI job is sent SIGTERM after a
/// checkpoint (as Slurm does at a time limit or `scancel`), passes it on, and the job's
/// launcher (`args` given the ring) removes its shared files on the way out (the PMIx store,
/// Open MPI's session directory, under the job's `TMPDIR`: no entry there starting with
/// `gone` is left). A restart makes those files again from the images and the ring ends with
/// every message and reduction right.
fn ended_by_sigterm_comes_back(
    (job_name, gone): (&str, &str),
    args: &dyn Fn(&Path) -> Vec<std::ffi::OsString>,
) {
    let Some((t, config)) = real_setup() else {
        return;
    };
    let _alone = host_mpi();
    let ring = build_mpi_program(t.path(), "mpiring");
    let tmp = t.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let steps = 4000u64;
    let mut launch = configured(&config, &["launch", "--job", job_name, "--dir"]);
    launch
        .arg(t.path().join("imgs"))
        .arg("--")
        .args(args(&ring))
        .arg(steps.to_string())
        .arg(t.path())
        .env("TMPDIR", &tmp)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    let mut job = Running(launch.stderr(job_log(t.path())).spawn().unwrap());
    running_pids(t.path(), 1);
    let out = t.path().join("out.ring");
    wait_for("the ring to go on", 60, || {
        (last_step(&out) > 300).then_some(())
    });
    checkpoint(t.path());
    signal(&job.id().to_string(), Signal::TERM);
    let st = ended_after_kill(&mut job.0);
    assert!(!st.success(), "{st}");
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    assert!(
        !left.iter().any(|n| n.starts_with(gone)),
        "the job's launcher left {left:?}"
    );
    let (again, _) = restart_in_background(&config, t.path(), 1);
    job.0 = again;
    ended_well(&mut job.0, t.path());
    ring_ended_well(t.path(), &out, steps);
}

#[test]
fn real_library_a_pmix_launched_job_ended_by_sigterm_comes_back() {
    let Some(prun) = prun() else {
        return;
    };
    ended_by_sigterm_comes_back(("prunterm", "cairn-prun."), &|ring| {
        vec![prun.clone().into(), "-n".into(), "4".into(), ring.into()]
    });
}

#[test]
fn real_library_an_mpirun_job_ended_by_sigterm_comes_back() {
    ended_by_sigterm_comes_back(("mpirunterm", "ompi."), &|ring| {
        let mut a: Vec<std::ffi::OsString> = ["mpirun", "--oversubscribe", "-n", "4"]
            .iter()
            .chain(ON_LOOPBACK.iter())
            .map(Into::into)
            .collect();
        a.push(ring.into());
        a
    });
}

/// `cairn-prun` says what is wrong with what it is given, and ends the job when a rank
/// aborts: -n against --host, more than one host without the job's token or without
/// --bind, a program that does not exist (127), and MPI_Abort's status from rank 1 of 3.
#[test]
fn a_pmix_launcher_refuses_bad_arguments_and_ends_on_mpi_abort() {
    let Some(prun) = prun() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let run = |args: &[&str], token: bool| {
        let mut c = Command::new(&prun);
        c.args(args).env_remove("CAIRN_COORD_TOKEN");
        if token {
            c.env("CAIRN_COORD_TOKEN", "0123456789abcdef");
        }
        c.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .output()
            .unwrap()
    };
    for (args, token, want) in [
        (
            &["-n", "3", "--host", "a:2,b:2", "true"][..],
            true,
            "-n 3 but --host a:2,b:2 places 4 ranks",
        ),
        (
            &["--host", "a,b", "true"][..],
            false,
            "need the job's token in CAIRN_COORD_TOKEN",
        ),
        (&["--host", "a,b", "true"][..], true, "--bind ADDR must say"),
        (
            &["-n", "0", "true"][..],
            true,
            "-n 0: expected a number of ranks from 1",
        ),
        (
            &["--host", "a:x", "true"][..],
            true,
            "--host: a:x: expected a number of ranks",
        ),
    ] {
        let o = run(args, token);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(text(&o).contains(want), "{args:?}: {}", text(&o));
    }
    let o = run(&["-n", "2", "/nonexistent/program"], false);
    assert_eq!(o.status.code(), Some(127), "{}", text(&o));
    let src = t.path().join("aborter.c");
    std::fs::write(
        &src,
        "#include <mpi.h>\n#include <unistd.h>\nint main(int c, char **v) { MPI_Init(&c, &v); \
         int r; MPI_Comm_rank(MPI_COMM_WORLD, &r); if (r == 1) MPI_Abort(MPI_COMM_WORLD, 7); \
         sleep(60); MPI_Finalize(); return 0; }\n",
    )
    .unwrap();
    let exe = t.path().join("aborter");
    let o = Command::new("mpicc")
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let o = run(&["-n", "3", exe.to_str().unwrap()], false);
    assert_eq!(o.status.code(), Some(7), "{}", text(&o));
    assert!(
        text(&o).contains("rank 1 aborted the job with status 7"),
        "{}",
        text(&o)
    );
}

/// Whether a tree can have a `/proc` of its own here, saying why not. Where this system lets
/// nobody mount a /proc in a new pid and mount namespace (a chroot: "cannot change root
/// filesystem propagation"), a tree keeps the host's (the restorer says so), and what needs
/// the tree's own cannot be tested: its pids in `/proc`, telling which process of the
/// machine holds the other end of a connection between two trees, and UCX's shared memory,
/// which opens its peers' descriptors through `/proc/<pid>/fd` by the pids it learnt.
fn trees_have_their_own_proc() -> bool {
    let probe = Command::new("unshare")
        .args(["--mount", "--pid", "--fork", "--mount-proc", "true"])
        .output();
    let ok = probe.is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!(
            "skipped: `unshare --mount --pid --fork --mount-proc` is not allowed here, so a \
             tree has no /proc of its own"
        );
    }
    ok
}

/// `/proc` in a launched tree is the tree's own: a shell reads its background child's entry,
/// `/proc/<pid>`, by the pid `$!` gave it (once the child runs `sleep`), and its own by `$$`,
/// at every step, through three
/// checkpoint, kill and restart cycles. With the host's `/proc` those pids name other
/// processes, or none.
#[test]
fn real_library_proc_shows_the_trees_processes_by_their_pids() {
    let Some((t, config)) = real_setup() else {
        return;
    };
    if !trees_have_their_own_proc() {
        return;
    }
    let out = t.path().join("out.proc");
    let script = format!(
        "sleep 100000 & child=$!; i=0; n=0; \
         while [ \"$(cat /proc/$child/comm 2>/dev/null)\" != sleep ] && [ $n -lt 500 ]; do \
           sleep 0.01; n=$((n+1)); done; \
         while [ $i -lt 2000 ]; do \
           read comm < /proc/$child/comm; read me < /proc/$$/comm; \
           while read key value; do [ \"$key\" = PPid: ] && parent=$value; done < /proc/$child/status; \
           if [ \"$comm $me $parent\" != \"sleep sh $$\" ]; then echo \"BAD $comm $me $parent\" >> {o}; fi; \
           echo \"step $i\" >> {o}; i=$((i+1)); sleep 0.005; \
         done; kill $child",
        o = out.display()
    );
    let (job, pid) = launch_one(t.path(), &config, "proc", &["sh", "-c", &script]);
    let mut job = three_cycles(t.path(), &config, "proc", (job, pid), 1, &|| {
        last_step(&out)
    });
    assert!(wait_child(&mut job, 120).success());
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(!text.contains("BAD"), "{text}");
    assert_eq!(last_step(&out), 1999, "{text}");
}

/// A pipe whose writer has ended while its reader has not read yet (`echo | (sleep; cat)`,
/// or a shell's command substitution) is a pipe with its write end closed: checkpointed
/// while the reader sleeps, it comes back with its line waiting and end-of-file after it,
/// three times in a row, and every line arrives once, in order. The programs the shell
/// starts after each restart join the job.
#[test]
fn real_library_a_pipe_whose_writer_has_ended_comes_back_closed_with_its_bytes() {
    let Some((t, config)) = real_setup() else {
        return;
    };
    let out = t.path().join("out.pipe");
    let steps = 12u64;
    // The reader sleeps 2 s: the checkpoint comes 0.15 s into it and the kill right after,
    // before `cat` appends the line (a line appended after the checkpoint to a file nobody
    // had open then would be appended again after the restart).
    let script = format!(
        "i=0; while [ $i -lt {steps} ]; do echo \"step $i\" | (sleep 2; cat >> {o}); i=$((i+1)); done",
        o = out.display()
    );
    let (job, mut pid) = launch_one(t.path(), &config, "pipe", &["sh", "-c", &script]);
    let mut job = Running(job);
    for k in 1..=3u64 {
        wait_for("the next line", 30, || {
            (last_step(&out) >= 3 * k).then_some(())
        });
        // Into the reader's sleep: the writer has written its line and ended.
        std::thread::sleep(std::time::Duration::from_millis(150));
        checkpoint(t.path());
        // The reader and its `sleep`, started by fork and exec after the previous restart,
        // are processes of the job (a program exec'd after a restart joins the new
        // coordinator).
        let m = manifest(t.path(), "pipe", k);
        let members = m["procs"][0]["members"].as_array().map_or(0, |a| a.len());
        assert!(members >= 2, "checkpoint {k}: {m}");
        kill9_all(&[pid]);
        ended_after_kill(&mut job);
        let (again, pids) = restart_in_background(&config, t.path(), 1);
        job.0 = again;
        pid = pids[0].clone();
    }
    assert!(wait_child(&mut job, 120).success());
    let seen: Vec<u64> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("step ")?.parse().ok())
        .collect();
    assert_eq!(seen, (0..steps).collect::<Vec<_>>());
}

/// Every file under `dir`, for failure reports.
fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p.display().to_string());
        }
    }
    out
}

/// Two "hosts" on this machine for one test, made with `tools/nshost`: network namespaces
/// on a bridge of their own, each with its own hostname, `/dev/shm` and node-local
/// directory (`/var/tmp/cairn-node` there, `<t>/hosts/<name>/` here). Removed when dropped.
struct NsHosts {
    bridge: String,
    names: Vec<String>,
    /// The bridge's address: the coordinators' `--bind`.
    addr: String,
    /// The first three numbers of the hosts' addresses: host k is `<subnet>.<11 + k>`.
    subnet: String,
    /// `NSHOST_ROOT`: each host's state directory.
    root: PathBuf,
}

impl NsHosts {
    fn tool() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/nshost")
    }

    /// `None`, saying why, where namespaces cannot be made (not root, no `ip`). Each call
    /// makes hosts of its own (names, bridge and subnet), so tests may run at once.
    fn up(t: &Path) -> Option<NsHosts> {
        // Unique per test: the tests of this binary run side by side.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tag = (std::process::id() % 1000) * 10 + k % 10;
        let subnet = format!("10.{}.{}", 190 + k % 10, std::process::id() % 250);
        let hosts = NsHosts {
            bridge: format!("cb{tag}"),
            names: vec![format!("cn{tag}a"), format!("cn{tag}b")],
            addr: format!("{subnet}.1"),
            subnet: subnet.clone(),
            root: t.join("hosts"),
        };
        let o = Command::new(Self::tool())
            .env("NSHOST_ROOT", &hosts.root)
            .args(["up", &hosts.bridge, &format!("{subnet}.1/24")])
            .arg(format!("{}={subnet}.11", hosts.names[0]))
            .arg(format!("{}={subnet}.12", hosts.names[1]))
            .output();
        match o {
            Ok(o) if o.status.success() => Some(hosts),
            other => {
                eprintln!("SKIP: cannot make namespace hosts (needs root and iproute2): {other:?}");
                drop(hosts);
                None
            }
        }
    }

    /// Host `k`'s address on the bridge.
    fn host_addr(&self, k: usize) -> String {
        format!("{}.{}", self.subnet, 11 + k)
    }

    /// `cairn ARGS` with `config`, its nodes on these hosts.
    fn cairn(&self, config: &Path, args: &[&str]) -> Command {
        let mut c = configured(config, args);
        c.env("NSHOST_ROOT", &self.root)
            .args(["--bind", &self.addr]);
        c
    }

    /// `cairn launch` of `n` processes of `cmd` as job `job`, its nodes on these hosts
    /// (started by `nshost run`), with `env` added to the job's environment, its messages
    /// in `<t>/job.log`.
    fn launch(
        &self,
        config: &Path,
        t: &Path,
        job: &str,
        (n, env): (usize, &[(&str, &str)]),
        cmd: &[&OsStr],
    ) -> Running {
        let agent = format!("{} run", Self::tool().display());
        let host_list = self.names.join(",");
        let n = n.to_string();
        let args = [
            "launch", "--job", job, "-n", &n, "--hosts", &host_list, "--agent", &agent,
        ];
        Running(
            self.cairn(config, &args)
                .arg("--dir")
                .arg(t.join("imgs"))
                .arg("--")
                .args(cmd)
                .envs(env.iter().copied())
                .stderr(job_log(t))
                .spawn()
                .unwrap(),
        )
    }

    /// `cairn restart` of the job in `<t>/imgs` on these hosts, its messages in
    /// `<t>/restart<cycle>.log`.
    fn restart(&self, config: &Path, t: &Path, cycle: u64) -> Running {
        self.restart_with(config, t, cycle, &[])
    }

    /// As `restart`, with `args` given to `cairn restart`.
    fn restart_with(&self, config: &Path, t: &Path, cycle: u64, args: &[&str]) -> Running {
        Running(
            self.cairn(config, &["restart"])
                .args(args)
                .arg("--dir")
                .arg(t.join("imgs"))
                .stderr(std::fs::File::create(t.join(format!("restart{cycle}.log"))).unwrap())
                .spawn()
                .unwrap(),
        )
    }

    /// A scratch directory, two hosts, and a configuration with each node's data in its
    /// host's node-local directory and partner copies across the hosts; `None` (saying why)
    /// where the library is not built or hosts cannot be made.
    fn with_partner_copies() -> Option<(tempfile::TempDir, NsHosts, PathBuf)> {
        let (t, hosts) = real_hosts()?;
        let config = write_config(
            t.path(),
            "/var/tmp/cairn-node",
            "[redundancy]\nscheme = \"partner\"\n[checkpoint]\nfinalize = false\n",
        );
        Some((t, hosts, config))
    }

    /// Three cycles of the running job `job` of `procs` processes: `checkpoint(cycle)` (which
    /// waits for progress, checkpoints and checks), then every process killed and the job
    /// restarted; before the third restart host 1's storage is wiped. Returns the job
    /// running after the third restart.
    fn three_cycles(
        &self,
        config: &Path,
        t: &Path,
        (mut job, procs): (Running, usize),
        checkpoint: &mut dyn FnMut(u64),
    ) -> Running {
        let mut pids = running_pids(t, procs);
        for cycle in 1..=3u64 {
            checkpoint(cycle);
            kill9_all(&pids);
            let st = ended_after_kill(&mut job.0);
            assert!(!st.success(), "{st}");
            if cycle == 3 {
                self.wipe(1);
            }
            job = self.restart(config, t, cycle);
            pids = running_pids(t, procs);
        }
        job
    }

    /// Loses host `k`: its storage is wiped (its processes are already dead).
    fn wipe(&self, k: usize) {
        for d in ["shm", "node"] {
            let dir = self.root.join(&self.names[k]).join(d);
            std::fs::remove_dir_all(&dir).unwrap();
            std::fs::create_dir(&dir).unwrap();
        }
    }
}

/// A scratch directory and two namespace hosts for a test of the real library; `None`,
/// saying why, when the library is not built or hosts cannot be made.
fn real_hosts() -> Option<(tempfile::TempDir, NsHosts)> {
    if !real_tools() {
        return None;
    }
    let t = tempfile::tempdir().unwrap();
    let hosts = NsHosts::up(t.path())?;
    Some((t, hosts))
}

impl Drop for NsHosts {
    fn drop(&mut self) {
        let _ = Command::new(Self::tool())
            .arg("down")
            .arg(&self.bridge)
            .args(&self.names)
            .status();
    }
}

/// A job across two hosts (network namespaces, each with its own address, hostname and
/// storage): each host's sub-coordinator starts and stores its own processes, partner
/// copies cross hosts; checkpointed, killed and restarted three times in a row, the last
/// time with one host's storage wiped, and the counters end bit-exact.
#[test]
fn real_library_a_job_across_two_namespace_hosts_restarts_three_times_and_after_a_host_is_lost() {
    let Some((t, hosts, config)) = NsHosts::with_partner_copies() else {
        return;
    };
    let steps = 3000u64;
    let counter = build_counter(t.path());
    let (steps_arg, pause) = (steps.to_string(), "5000");
    let cmd = [
        counter.as_os_str(),
        OsStr::new(&steps_arg),
        OsStr::new(pause),
        t.path().as_os_str(),
    ];
    let job = hosts.launch(&config, t.path(), "hl", (4, &[]), &cmd);
    running_pids(t.path(), 4);
    let s = status(&t.path().join("imgs"));
    for (i, want) in [0, 0, 1, 1].into_iter().enumerate() {
        assert_eq!(s["procs"][i]["host"], hosts.names[want].as_str(), "{s}");
    }
    let node_dir = |k: usize| hosts.root.join(&hosts.names[k]).join("node");
    let mut job = hosts.three_cycles(&config, t.path(), (job, 4), &mut |cycle| {
        wait_steps(t.path(), 4, 150 * cycle);
        checkpoint(t.path());
        if cycle == 1 {
            // Each host holds its own processes' parts, on its own storage only.
            for (k, ranks) in [(0, [0, 1]), (1, [2, 3])] {
                let v1 = node_dir(k).join(format!("node{k}/hl/v1"));
                let files: Vec<String> = std::fs::read_dir(&v1)
                    .map(|d| {
                        d.flatten()
                            .map(|e| e.file_name().to_string_lossy().into_owned())
                            .collect()
                    })
                    .unwrap_or_default();
                for r in 0..4 {
                    let part = format!("rank{r}.ckpt");
                    assert_eq!(
                        files.contains(&part),
                        ranks.contains(&r),
                        "{}: {files:?}; everything on the hosts: {:?}",
                        v1.display(),
                        walk(&hosts.root)
                    );
                }
                assert!(!node_dir(1 - k).join(format!("node{k}")).exists());
            }
            assert!(!Path::new("/var/tmp/cairn-node/node0/hl").exists());
        }
    });
    ended_well(&mut job.0, t.path());
    check_counters(t.path(), 4, steps);
    let log = std::fs::read_to_string(t.path().join("restart3.log")).unwrap();
    assert!(
        log.contains("hl v3: rebuilt the parts of ranks [2, 3] from partner copies"),
        "{log}"
    );
    // The parts of host 1's processes are back on host 1.
    assert!(node_dir(1).join("node1/hl/v3/rank2.ckpt").is_file());
}

/// A server on one namespace host and its clients on the other, as two processes of one job
/// (native/ckpt/tests/tcpserv.c with HOST and PORT): three TCP connections between the hosts
/// with requests and replies of up to 3 MiB in flight both ways are checkpointed, killed and
/// restarted three times in a row, the last time with the clients' host wiped (its images
/// rebuilt from partner copies): the connections are made again through the coordinators,
/// every client sees every reply once and right, and both sides end well. A connection from
/// the job to a listener outside it fails the checkpoint, naming it.
#[test]
fn real_library_tcp_connections_between_two_namespace_hosts_come_back() {
    let Some((t, hosts, config)) = NsHosts::with_partner_copies() else {
        return;
    };
    let cmd = tcpserv_across(t.path(), &hosts.names[0]);
    let cmd: Vec<&OsStr> = cmd.iter().map(|a| a.as_os_str()).collect();
    let verbose = [("CAIRN_CKPT_VERBOSE", "1")];
    let job = hosts.launch(&config, t.path(), "tcp2", (2, &verbose), &cmd);
    let mut job = hosts.three_cycles(&config, t.path(), (job, 2), &mut |cycle| {
        tcpserv_checkpoint(t.path(), "tcp2", cycle)
    });
    ended_well(&mut job.0, t.path());
    let log = std::fs::read_to_string(t.path().join("restart3.log")).unwrap();
    assert!(log.contains("rebuilt the parts of ranks [1]"), "{log}");
    tcpserv_came_back_three_times(t.path());
}

/// Once `tcpserv`'s clients have gone on, checkpoint `cycle` of job `job`, which closed none
/// of its connections.
fn tcpserv_checkpoint(t: &Path, job: &str, cycle: u64) {
    let out0 = t.join("out.client0");
    let at = last_step(&out0);
    wait_for("the clients to go on", 60, || {
        (last_step(&out0) > at + 200).then_some(())
    });
    checkpoint(t);
    let m = manifest(t, job, cycle);
    assert!(m.get("closed").is_none(), "{m}");
}

/// `tcpserv_across`'s job ended well after three restarts, each of which made the three
/// connections again from both ends: the processes say so on their standard error, the
/// launch's log file, reopened at each restart.
fn tcpserv_came_back_three_times(t: &Path) {
    tcpserv_across_ended_well(t);
    let log = std::fs::read_to_string(t.join("job.log")).unwrap();
    let made = log
        .matches("restart: 1 of 1 connections to other hosts or trees made again")
        .count();
    assert_eq!(made, 3 * 6, "{log}");
}

/// `tcpserv` across two processes of a job on this one host (two trees, each in its own pid
/// namespace, in one network): process 0 serves on 127.0.0.1, process 1's three clients
/// connect to it, and their connections are between trees, met again through the
/// coordinators at each restart as connections between hosts are. Three
/// checkpoint/kill/restart cycles, every byte checked to the end.
#[test]
fn real_library_tcp_connections_between_two_trees_of_one_host_come_back() {
    let Some((t, config)) = real_setup() else {
        return;
    };
    if !trees_have_their_own_proc() {
        return;
    }
    let prog = build_test_program(t.path(), "tcpserv");
    let mut job = Running(
        configured(&config, &["launch", "--job", "tcp1", "-n", "2", "--dir"])
            .arg(t.path().join("imgs"))
            .arg("--")
            .arg(&prog)
            .arg(t.path())
            .args(["3", "3000", "127.0.0.1", "17781"])
            .env("CAIRN_CKPT_VERBOSE", "1")
            .stderr(job_log(t.path()))
            .spawn()
            .unwrap(),
    );
    let mut pids = running_pids(t.path(), 2);
    for v in 1..=3u64 {
        tcpserv_checkpoint(t.path(), "tcp1", v);
        kill9_all(&pids);
        ended_after_kill(&mut job.0);
        let (again, p) = restart_in_background(&config, t.path(), 2);
        job = Running(again);
        pids = p;
    }
    ended_well(&mut job.0, t.path());
    tcpserv_came_back_three_times(t.path());
}

/// `tcpserv DIR 3 3000 SERVER 7777` (native/ckpt/tests/tcpserv.c built in `t`): process 0
/// of the job serves on port 7777 of its host, process 1's three clients connect to `server`.
fn tcpserv_across(t: &Path, server: &str) -> Vec<std::ffi::OsString> {
    let prog = build_test_program(t, "tcpserv");
    [prog.as_os_str(), t.as_os_str()]
        .into_iter()
        .map(OsStr::to_os_string)
        .chain(["3", "3000", server, "7777"].map(Into::into))
        .collect()
}

/// `tcpserv_across` with a fourth client that connects only once `late` exists (see
/// tcpserv.c).
fn tcpserv_across_late(t: &Path, server: &str, late: &Path) -> Vec<std::ffi::OsString> {
    let mut cmd = tcpserv_across(t, server);
    cmd.push(late.into());
    cmd
}

/// `tcpserv_across`'s job ended well: every client saw every reply once and right, the
/// server collected its three handlers and process 1 its three clients.
fn tcpserv_across_ended_well(t: &Path) {
    tcpserv_clients_ended_well(t, 3);
}

/// As `tcpserv_across_ended_well`, for `n` clients.
fn tcpserv_clients_ended_well(t: &Path, n: usize) {
    for i in 0..n {
        let out = std::fs::read_to_string(t.join(format!("out.client{i}"))).unwrap();
        assert!(!out.contains("BAD"), "client {i}: {out}");
        assert!(out.ends_with(&format!("client {i}: done OK\n")), "{out}");
    }
    let server = std::fs::read_to_string(t.join("out.server")).unwrap();
    assert_eq!(server, format!("server: done {n} OK\n"));
    let clients = std::fs::read_to_string(t.join("out.clients")).unwrap();
    assert_eq!(clients, format!("clients: done {n} OK\n"));
}

/// Two processes of a job on two namespace hosts, each with a connection to a listener
/// outside the job (this test's, on the bridge): a checkpoint fails, naming each; with
/// CAIRN_CKPT_EXTERNAL=close it succeeds, the manifest names the two connections as closed,
/// and after a restart each process reads end-of-file from its socket.
#[test]
fn real_library_a_connection_from_namespace_hosts_to_outside_the_job_is_refused_or_closed() {
    if !real_tools() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let Some(hosts) = NsHosts::up(t.path()) else {
        return;
    };
    let config = write_config(t.path(), "/var/tmp/cairn-node", "");
    let outside = std::net::TcpListener::bind((hosts.addr.as_str(), 0)).unwrap();
    let port = outside.local_addr().unwrap().port().to_string();
    std::thread::spawn(move || {
        // Held open, silent: the job's processes wait for bytes that never come.
        let held: Vec<_> = outside.incoming().flatten().collect();
        drop(held);
    });
    let script = "import os, socket, sys\n\
        s = socket.create_connection((sys.argv[1], int(sys.argv[2])))\n\
        p = os.environ['CAIRN_PROC']\n\
        open(f'{sys.argv[3]}/ready.{p}', 'w').close()\n\
        open(f'{sys.argv[3]}/after.{p}', 'w').write(repr(s.recv(10)))\n";
    let cmd =
        |d: &str| ["python3", "-c", script, hosts.addr.as_str(), &port, d].map(|a| a.to_string());
    let run = |job: &str, env: &[(&str, &str)], d: &Path| {
        std::fs::create_dir_all(d).unwrap();
        let args = cmd(d.to_str().unwrap());
        let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
        let job = hosts.launch(&config, t.path(), job, (2, env), &args);
        for p in 0..2 {
            wait_for("the connection", 30, || {
                d.join(format!("ready.{p}")).exists().then_some(())
            });
        }
        job
    };
    // Without CAIRN_CKPT_EXTERNAL: refused, naming both processes' connections.
    let mut refused = run("out1", &[], &t.path().join("a"));
    let pids = running_pids(t.path(), 2);
    let why = refused_checkpoint(t.path(), &pids[0]);
    assert!(
        why.contains("no process of the job holds its other end")
            && why.matches(&format!(" to {}:{port}", hosts.addr)).count() == 2,
        "{why}"
    );
    kill9_all(&pids);
    ended_after_kill(&mut refused.0);
    // With it: they come back closed.
    let d = t.path().join("b");
    std::fs::remove_dir_all(t.path().join("imgs")).unwrap();
    let mut job = run("out2", &[("CAIRN_CKPT_EXTERNAL", "close")], &d);
    let pids = running_pids(t.path(), 2);
    checkpoint(t.path());
    let m = manifest(t.path(), "out2", 1);
    let closed = m["closed"].as_array().cloned().unwrap_or_default();
    assert_eq!(closed.len(), 2, "{m}");
    assert!(
        closed.iter().all(|k| k
            .as_str()
            .unwrap()
            .contains(&format!("{}:{port}", hosts.addr))),
        "{m}"
    );
    kill9_all(&pids);
    ended_after_kill(&mut job.0);
    let mut job = hosts.restart(&config, t.path(), 1);
    ended_well(&mut job.0, t.path());
    for p in 0..2 {
        let after = std::fs::read_to_string(d.join(format!("after.{p}"))).unwrap();
        assert_eq!(after, "b''", "process {p}");
    }
}

/// `cairn rsh` outside a job says so and exits 255, as ssh does when it cannot connect; a
/// launch with --rsh needs hosts and runs the program once.
#[test]
fn rsh_outside_a_job_and_rsh_launches_without_hosts_are_refused() {
    let o = cairn()
        .env_remove("CAIRN_COORD_ADDR")
        .env_remove("CAIRN_COORD_TOKEN")
        .env_remove("CAIRN_JOB")
        .args(["rsh", "-x", "-l", "me", "nodeb", "orted", "--x"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(255), "{}", text(&o));
    assert!(
        text(&o).contains("not run inside a Cairn job")
            && text(&o).contains("`orted --x` on nodeb"),
        "{}",
        text(&o)
    );
    let t = tempfile::tempdir().unwrap();
    for (args, why) in [
        (&["--rsh"][..], "--rsh needs --hosts"),
        (
            &["--rsh", "-n", "2", "--hosts", "a,b"][..],
            "--rsh runs the program once",
        ),
    ] {
        let o = fake(&["launch", "--dir"])
            .arg(t.path())
            .args(args)
            .args(["--", "true"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(125), "{}", text(&o));
        assert!(text(&o).contains(why), "{}", text(&o));
    }
}

/// Two namespace hosts and a job launched on them with `--rsh`, its nodes started by
/// `nshost run`: process 0 runs `program`, process 1 is host b's slot.
fn launch_with_slots(t: &Path, hosts: &NsHosts, job: &str, program: &[&OsStr]) -> Running {
    let config = write_config(t, "/var/tmp/cairn-node", "");
    launch_with_slots_configured(t, hosts, &config, job, program)
}

/// `mpirun` of `program` as 4 ranks, 2 on each of the two hosts, over TCP between them (the
/// hosts' `eth0`).
fn mpirun_on_two_hosts(hosts: &NsHosts, program: &[&str]) -> Vec<String> {
    let on = format!("{}:2,{}:2", hosts.names[0], hosts.names[1]);
    let mut args: Vec<String> = ["mpirun", "--oversubscribe", "-np", "4", "--host", &on]
        .map(String::from)
        .to_vec();
    for (k, v) in [
        ("btl", "self,tcp"),
        ("btl_tcp_if_include", "eth0"),
        ("oob_tcp_if_include", "eth0"),
    ] {
        args.extend(["--mca".into(), k.into(), v.into()]);
    }
    args.extend(program.iter().map(|a| a.to_string()));
    args
}

/// `mpirun` of `program` on two hosts (`mpirun_on_two_hosts`) as job `job`, launched with
/// slots and `config`, through `NsHosts::three_cycles`, each checkpoint once the step its
/// rank 0 writes to `out` has moved on by 300; the job then ends well.
fn mpi_three_cycles_across(
    t: &Path,
    hosts: &NsHosts,
    config: &Path,
    (job, program): (&str, &[&str]),
    out: &Path,
) {
    let args = mpirun_on_two_hosts(hosts, program);
    launcher_three_cycles_across(t, hosts, config, (job, &args), out);
}

/// As `mpi_three_cycles_across`, the MPI launcher's whole command line `args`.
fn launcher_three_cycles_across(
    t: &Path,
    hosts: &NsHosts,
    config: &Path,
    (job, args): (&str, &[String]),
    out: &Path,
) {
    let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    let launched = launch_with_slots_configured(t, hosts, config, job, &args);
    let mut job = hosts.three_cycles(config, t, (launched, 2), &mut |_| {
        let at = last_step(out);
        wait_for("the program to go on", 90, || {
            (last_step(out) > at + 300).then_some(())
        });
        checkpoint(t);
    });
    ended_well(&mut job.0, t);
}

/// As `launch_with_slots`, with the configuration `config`.
fn launch_with_slots_configured(
    t: &Path,
    hosts: &NsHosts,
    config: &Path,
    job: &str,
    program: &[&OsStr],
) -> Running {
    let config = config.to_path_buf();
    let agent = format!("{} run", NsHosts::tool().display());
    let host_list = hosts.names.join(",");
    let launched = hosts
        .cairn(
            &config,
            &[
                "launch", "--job", job, "--hosts", &host_list, "--agent", &agent, "--rsh",
            ],
        )
        .arg("--dir")
        .arg(t.join("imgs"))
        .arg("--")
        .args(program)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .stderr(job_log(t))
        .spawn()
        .unwrap();
    Running(launched)
}

/// A program launched with `--rsh` on host a runs a command on host b with `cairn rsh`: the
/// command runs there (its host name is b's), in b's slot, as process 1 of the job on node 1,
/// and the job ends with status 0 once the program and the command have. A host that is not
/// the job's, and the program's own host (no slot), are refused with exit status 255 and a
/// message naming why.
#[test]
fn real_library_rsh_runs_a_command_on_another_host_in_its_slot() {
    let Some((t, hosts)) = real_hosts() else {
        return;
    };
    let cairn_bin = env!("CARGO_BIN_EXE_cairn");
    let d = t.path().display();
    let (a, b) = (&hosts.names[0], &hosts.names[1]);
    let script = format!(
        "{cairn_bin} rsh -x {b} 'hostname > {d}/remote; echo $CAIRN_PROC $CAIRN_NODE \
         ${{CAIRN_CKPT_SLOT:-none}} >> {d}/remote; while [ ! -e {d}/go ]; do sleep 0.05; done'; \
         echo $? > {d}/rsh.status; \
         {cairn_bin} rsh nosuchhost true 2> {d}/unknown; echo $? >> {d}/rsh.status; \
         {cairn_bin} rsh {a} true 2> {d}/own; echo $? >> {d}/rsh.status; \
         while [ ! -e {d}/go ]; do sleep 0.05; done"
    );
    let mut job = launch_with_slots(
        t.path(),
        &hosts,
        "rs",
        &[OsStr::new("sh"), OsStr::new("-c"), OsStr::new(&script)],
    );
    let statuses = wait_for("the rsh calls", 60, || {
        let s = std::fs::read_to_string(t.path().join("rsh.status")).ok()?;
        (s.lines().count() == 3).then_some(s)
    });
    assert_eq!(statuses, "0\n255\n255\n", "{}", log_tail(t.path()));
    let remote = wait_for("the remote command", 30, || {
        let r = std::fs::read_to_string(t.path().join("remote")).ok()?;
        (r.lines().count() == 2).then_some(r)
    });
    assert_eq!(remote, format!("{b}\n1 1 none\n"));
    let unknown = std::fs::read_to_string(t.path().join("unknown")).unwrap();
    assert!(
        unknown.contains(&format!(
            "nosuchhost is not a host of job rs (its hosts are {a}, {b})"
        )),
        "{unknown}"
    );
    let own = std::fs::read_to_string(t.path().join("own")).unwrap();
    assert!(
        own.contains(&format!("host {a} (node 0) has no slot")),
        "{own}"
    );
    // The command is process 1 of the job, on node 1, host b: a slot that has been used.
    let s = status(&t.path().join("imgs"));
    let p1 = &s["procs"][1];
    assert_eq!(
        (&p1["node"], &p1["host"], &p1["state"], &p1["slot"]),
        (
            &Value::from("1"),
            &Value::from(b.as_str()),
            &Value::from("running"),
            &Value::from("used")
        ),
        "{s}"
    );
    std::fs::write(t.path().join("go"), "").unwrap();
    ended_well(&mut job.0, t.path());
}

/// An unmodified `mpirun` across two hosts: launched with `--rsh` on host a, it starts its
/// daemon on host b through `cairn rsh` (the job's rsh agent), in b's slot; ranks 2 and 3 run
/// on b, and the MPI ring (messages around a ring over TCP between the hosts, an allreduce,
/// a broadcast) runs to its end with status 0. No checkpoint is taken.
#[test]
fn real_library_mpirun_starts_its_daemon_on_another_host_through_the_slot() {
    let Some((t, hosts)) = real_hosts() else {
        return;
    };
    let ring = build_mpi_program(t.path(), "mpiring");
    let (a, b) = (&hosts.names[0], &hosts.names[1]);
    let rank = format!(
        "hostname > {d}/host.$OMPI_COMM_WORLD_RANK; exec {} 300 {d}",
        ring.display(),
        d = t.path().display()
    );
    let args = mpirun_on_two_hosts(&hosts, &["sh", "-c", &rank]);
    let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    let mut job = launch_with_slots(t.path(), &hosts, "mr", &args);
    ended_well(&mut job.0, t.path());
    for r in 0..4 {
        let host = std::fs::read_to_string(t.path().join(format!("host.{r}"))).unwrap();
        assert_eq!(host.trim(), if r < 2 { a } else { b }, "rank {r}");
        let end = std::fs::read_to_string(t.path().join(format!("end.{r}"))).unwrap();
        assert_eq!(end.trim(), format!("rank {r} ok"));
    }
    let log = std::fs::read_to_string(t.path().join("job.log")).unwrap();
    assert!(
        log.contains(&format!(
            "host {b}: proc 1, the slot on node 1, runs ` orted"
        )),
        "{log}"
    );
}

/// An unmodified `mpirun` across two hosts (2 ranks on each, the daemon of host b in its
/// slot, ranks over TCP between the hosts with two messages always in flight, an allreduce
/// and a broadcast on a split communicator): checkpointed, killed and restarted three times
/// in a row, the last time with host b's storage wiped (its images rebuilt from partner
/// copies); every rank checks every message and reduction to the end.
#[test]
fn real_library_an_mpi_job_across_two_namespace_hosts_comes_back_three_times() {
    let Some((t, hosts, config)) = NsHosts::with_partner_copies() else {
        return;
    };
    let ring = build_mpi_program(t.path(), "mpiring");
    let steps = 6000u64;
    let (steps_arg, dir) = (steps.to_string(), t.path().to_str().unwrap());
    let out = t.path().join("out.ring");
    let program = [ring.to_str().unwrap(), &steps_arg, dir];
    mpi_three_cycles_across(t.path(), &hosts, &config, ("mx", &program), &out);
    ring_ended_well(t.path(), &out, steps);
}

/// Ranks started as a PMIx batch system starts them, across two hosts: `cairn-prun` (the
/// job's process 0 on host a) serves host a's ranks and starts its daemon on host b through
/// the job's rsh agent, in b's slot, which serves b's; the ring's ranks 2 and 3 run on b,
/// over TCP between the hosts, with two messages always in flight. Checkpointed, killed and
/// restarted three times in a row, the last time with host b's storage wiped (its images
/// rebuilt from partner copies); every rank checks every message and reduction to the end.
#[test]
fn real_library_an_mpi_job_started_by_a_pmix_launcher_across_two_hosts_comes_back() {
    let Some((t, hosts, config)) = NsHosts::with_partner_copies() else {
        return;
    };
    let Some(prun) = prun() else {
        return;
    };
    let ring = build_mpi_program(t.path(), "mpiring");
    let steps = 6000u64;
    let d = t.path().display();
    let rank = format!(
        "hostname > {d}/host.$PMIX_RANK; exec {} {steps} {d}",
        ring.display()
    );
    let on = format!("{}:2,{}:2", hosts.names[0], hosts.names[1]);
    let args: Vec<String> = [
        prun.to_str().unwrap(),
        "--host",
        &on,
        "--bind",
        &hosts.host_addr(0),
        "-x",
        "OMPI_MCA_btl=self,tcp",
        "-x",
        "OMPI_MCA_btl_tcp_if_include=eth0",
        "sh",
        "-c",
        &rank,
    ]
    .map(String::from)
    .to_vec();
    let out = t.path().join("out.ring");
    launcher_three_cycles_across(t.path(), &hosts, &config, ("px", &args), &out);
    ring_ended_well(t.path(), &out, steps);
    for r in 0..4 {
        let host = std::fs::read_to_string(t.path().join(format!("host.{r}"))).unwrap();
        assert_eq!(host.trim(), hosts.names[r / 2], "rank {r}");
    }
}

/// An unmodified MPI halo-exchange stencil (native/ckpt/tests/stencil.c: 4 ranks, each a band
/// of rows, its halo rows exchanged with both neighbours every step) across two hosts,
/// checkpointed, killed and restarted three times in a row, the last time with host b's
/// storage wiped: it ends with the same bits as the same program run once, uninterrupted,
/// by mpirun alone.
#[test]
fn real_library_an_mpi_stencil_across_two_namespace_hosts_ends_as_an_uninterrupted_run() {
    let Some((t, hosts, config)) = NsHosts::with_partner_copies() else {
        return;
    };
    let stencil = build_mpi_program(t.path(), "stencil");
    let grid = ["128", "1024", "12000"];
    let reference = t.path().join("reference");
    std::fs::create_dir(&reference).unwrap();
    let alone = host_mpi();
    let o = Command::new("mpirun")
        .args(["--oversubscribe", "-np", "4", "--mca", "btl", "self,tcp"])
        .args(ON_LOOPBACK)
        .arg(&stencil)
        .args(grid)
        .arg(&reference)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .unwrap();
    drop(alone);
    assert!(o.status.success(), "{}", text(&o));
    let last = |dir: &Path| {
        let text = std::fs::read_to_string(dir.join("out.stencil")).unwrap_or_default();
        text.lines().last().unwrap_or("").to_string()
    };
    let want = last(&reference);
    assert!(want.starts_with("done 12000 sum "), "{want}");
    let dir = t.path().to_str().unwrap();
    let mut program = vec![stencil.to_str().unwrap()];
    program.extend(grid);
    program.push(dir);
    let out = t.path().join("out.stencil");
    mpi_three_cycles_across(t.path(), &hosts, &config, ("st", &program), &out);
    assert_eq!(last(t.path()), want);
}

/// A scratch directory, two sets of two namespace hosts (the first to launch on, the other
/// to restart on), and a configuration whose checkpoints are flushed to the global tier
/// before they count; `None` (saying why) where they cannot be made.
fn two_sets_of_hosts() -> Option<(tempfile::TempDir, NsHosts, NsHosts, PathBuf)> {
    if !real_tools() {
        return None;
    }
    let t = tempfile::tempdir().unwrap();
    let first = NsHosts::up(t.path())?;
    let other = NsHosts::up(t.path())?;
    let config = write_config(
        t.path(),
        "/var/tmp/cairn-node",
        "[flush]\nevery = 1\nmode = \"sync\"\n[checkpoint]\nfinalize = false\n",
    );
    Some((t, first, other, config))
}

/// Checkpoints the running job (its two processes `pids`), kills every process, and restarts
/// it on the hosts `other` (`cairn restart --hosts`), which the status then names.
fn restart_elsewhere(
    t: &Path,
    (mut job, pids): (Running, &[String]),
    other: &NsHosts,
    config: &Path,
) -> Running {
    checkpoint(t);
    kill9_all(pids);
    assert!(!ended_after_kill(&mut job.0).success());
    let (names, agent) = (
        other.names.join(","),
        format!("{} run", NsHosts::tool().display()),
    );
    let job = other.restart_with(config, t, 1, &["--hosts", &names, "--agent", &agent]);
    running_pids(t, 2);
    let s = status(&t.join("imgs"));
    for (i, host) in other.names.iter().enumerate() {
        assert_eq!(s["procs"][i]["host"], host.as_str(), "{s}");
    }
    job
}

/// Restart elsewhere for MPI: `mpirun` of the ring (as in the three-cycle test) on two
/// namespace hosts, checkpointed (flushed to the global tier), every process killed, and
/// restarted on two other hosts with empty node-local storage: mpirun's connections to its
/// daemon and the ranks' connections between the hosts are made again between the new
/// addresses, the addresses the ranks learnt at start-up are translated, and the ring ends
/// with every message and reduction right.
#[test]
fn real_library_an_mpi_job_restarts_on_other_hosts() {
    let Some((t, first, other, config)) = two_sets_of_hosts() else {
        return;
    };
    let ring = build_mpi_program(t.path(), "mpiring");
    let steps = 4000u64;
    let (steps_arg, dir) = (steps.to_string(), t.path().to_str().unwrap());
    let out = t.path().join("out.ring");
    let args = mpirun_on_two_hosts(&first, &[ring.to_str().unwrap(), &steps_arg, dir]);
    let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    let job = launch_with_slots_configured(t.path(), &first, &config, "mv", &args);
    let pids = running_pids(t.path(), 2);
    let moved_on = || {
        let at = last_step(&out);
        wait_for("the ring to go on", 90, || {
            (last_step(&out) > at + 300).then_some(())
        });
    };
    moved_on();
    let mut job = restart_elsewhere(t.path(), (job, &pids), &other, &config);
    moved_on();
    ended_well(&mut job.0, t.path());
    ring_ended_well(t.path(), &out, steps);
}

/// Restart elsewhere: a server on one namespace host and its clients on another (tcpserv
/// with HOST and PORT), checkpointed (flushed to the global tier), killed, and restarted on
/// two other hosts (other names, other addresses, empty node-local storage), as after a
/// resubmission: the images come from the global tier, the connections between the hosts are
/// made again between the new addresses, a client that connects only after the restart, to
/// the server host's old address, reaches the server, which sees it come from the client
/// host's old address (the addresses the program knew are translated both ways), a
/// checkpoint on the new hosts succeeds, and every client sees every reply once and right.
#[test]
fn real_library_a_job_restarts_on_other_hosts_with_its_connections() {
    let Some((t, first, other, config)) = two_sets_of_hosts() else {
        return;
    };
    let late = t.path().join("late");
    let cmd = tcpserv_across_late(t.path(), &first.names[0], &late);
    let cmd: Vec<&OsStr> = cmd.iter().map(|a| a.as_os_str()).collect();
    let job = first.launch(&config, t.path(), "moved", (2, &[]), &cmd);
    let pids = running_pids(t.path(), 2);
    let out0 = t.path().join("out.client0");
    let moved_on = || {
        let at = last_step(&out0);
        wait_for("the clients to go on", 60, || {
            (last_step(&out0) > at + 200).then_some(())
        });
    };
    moved_on();
    let mut job = restart_elsewhere(t.path(), (job, &pids), &other, &config);
    // The late client connects now, to the address the server's host had: it reaches the
    // server on its new host, which sees it come from the address it announced (the
    // clients' old host's).
    std::fs::write(&late, "").unwrap();
    let out3 = t.path().join("out.client3");
    wait_for("the late client to go on", 60, || {
        (last_step(&out3) > 100).then_some(())
    });
    moved_on();
    checkpoint(t.path());
    ended_well(&mut job.0, t.path());
    tcpserv_clients_ended_well(t.path(), 4);
    // The new hosts' storage held nothing of the job: the images came from the global tier.
    let log = std::fs::read_to_string(t.path().join("restart1.log")).unwrap();
    assert!(
        log.contains("0 image(s) read where their processes wrote them"),
        "{log}"
    );
}
