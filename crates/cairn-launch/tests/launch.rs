//! The coordinator tree with real processes and sockets: the root runs in the test process,
//! and this test binary also plays every other part as a separate process — the
//! sub-coordinator (`coord-node`, as `cairn coord-node` does), a fake checkpointed process
//! (`fake-proc`: speaks the process side of the protocol and writes a fake image) and a fake
//! restorer (run with an image path first, as `cairn-restore` is). `main` picks the part from
//! the arguments, then runs the tests one after the other (they measure timeouts, so they do
//! not share the two cores with each other).

use cairn_launch::launch::{Overrides, Settings};
use cairn_launch::proto::{Conn, Msg, Verb};
use cairn_launch::{
    jobdir, manifest, net, Affinity, Client, ErrorKind, Helper, JobExit, Manifest, Options,
};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::sync::{Arc, Barrier, OnceLock};
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("coord-node") => std::process::exit(cairn_launch::node::main(&args[2..])),
        Some("fake-proc") => std::process::exit(fake::proc_main(&args[2..], None)),
        // The restorer is given an image's absolute path first.
        Some(img) if img.starts_with('/') => std::process::exit(fake::restore_main(&args[1..])),
        _ => std::process::exit(run_tests(&args[1..])),
    }
}

type Test = (&'static str, fn());

const TESTS: &[Test] = &[
    (
        "checkpoint_8_procs_on_2_nodes",
        checkpoint_8_procs_on_2_nodes,
    ),
    (
        "suspend_timeout_names_the_process",
        suspend_timeout_names_the_process,
    ),
    (
        "sigkill_during_write_fails_the_checkpoint",
        sigkill_during_write_fails_the_checkpoint,
    ),
    (
        "lost_subcoordinator_fails_the_checkpoint",
        lost_subcoordinator_fails_the_checkpoint,
    ),
    (
        "wrong_token_and_bad_hellos_are_denied",
        wrong_token_and_bad_hellos_are_denied,
    ),
    ("missing_process_is_reported", missing_process_is_reported),
    (
        "backoff_spreads_connection_attempts",
        backoff_spreads_connection_attempts,
    ),
    (
        "backoff_retries_until_the_listener_appears",
        backoff_retries_until_the_listener_appears,
    ),
    (
        "interval_triggers_checkpoints",
        interval_triggers_checkpoints,
    ),
    (
        "keep_deletes_old_versions_only_after_a_newer_one_is_complete",
        keep_deletes_only_after_newer_complete,
    ),
    (
        "process_can_request_a_checkpoint",
        process_can_request_a_checkpoint,
    ),
    ("kill_command_ends_the_job", kill_command_ends_the_job),
    (
        "restart_refuses_a_version_without_manifest",
        restart_refuses_a_version_without_manifest,
    ),
    (
        "restart_runs_the_restorer_and_checkpoints_again",
        restart_runs_the_restorer_and_checkpoints_again,
    ),
    (
        "engine_failure_fails_the_checkpoint",
        engine_failure_fails_the_checkpoint,
    ),
    (
        "restart_falls_back_when_the_newest_version_is_damaged",
        restart_falls_back_when_the_newest_version_is_damaged,
    ),
];

/// A minimal libtest: `NAME` filters (substring), `--skip NAME`, `--list`, `--exact`;
/// other flags are accepted and ignored.
fn run_tests(args: &[String]) -> i32 {
    let mut filters = Vec::new();
    let mut skips = Vec::new();
    let mut exact = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--list" => {
                for (name, _) in TESTS {
                    println!("{name}: test");
                }
                return 0;
            }
            "--exact" => exact = true,
            "--skip" => skips.extend(it.next().cloned()),
            "--test-threads" | "--format" | "--color" | "-Z" => {
                it.next();
            }
            f if f.starts_with('-') => {}
            f => filters.push(f.to_string()),
        }
    }
    let matches = |name: &str, f: &str| if exact { name == f } else { name.contains(f) };
    let chosen: Vec<&Test> = TESTS
        .iter()
        .filter(|(n, _)| filters.is_empty() || filters.iter().any(|f| matches(n, f)))
        .filter(|(n, _)| !skips.iter().any(|s| n.contains(s.as_str())))
        .collect();
    cairn_launch::init_logging();
    println!("\nrunning {} tests", chosen.len());
    let start = Instant::now();
    let mut failed = Vec::new();
    for (name, f) in chosen.iter().copied() {
        let t = Instant::now();
        let r = std::panic::catch_unwind(f);
        let secs = t.elapsed().as_secs_f64();
        match r {
            Ok(()) => println!("test {name} ... ok ({secs:.2} s)"),
            Err(_) => {
                println!("test {name} ... FAILED ({secs:.2} s)");
                failed.push(*name);
            }
        }
    }
    let _ = std::fs::remove_dir_all(scratch());
    println!(
        "\ntest result: {}. {} passed; {} failed; finished in {:.2}s\n",
        if failed.is_empty() { "ok" } else { "FAILED" },
        chosen.len() - failed.len(),
        failed.len(),
        start.elapsed().as_secs_f64()
    );
    if failed.is_empty() {
        0
    } else {
        println!("failures: {}", failed.join(", "));
        101
    }
}

// ---- the fake process and restorer ------------------------------------------------------

mod fake {
    //! The process side of the protocol, as the checkpoint library speaks it, with faults on
    //! request. Options (all optional):
    //!   --log DIR         append what happens to DIR/proc<i>.log
    //!   --stop FILE       send BYE and exit once FILE exists
    //!   --exit I:CODE     proc I exits with CODE (default 0)
    //!   --hang I:PHASE    proc I stops answering at PHASE (suspend or write; at write it
    //!                     first leaves a partial <path>.tmp)
    //!   --fail I:PHASE:V  proc I answers FAILED to PHASE of checkpoint V
    //!   --request I:MS    proc I sends CHECKPOINT MS milliseconds after WELCOME
    //!   --no-connect I    proc I never connects
    //!   --grow I          proc I's image of checkpoint V is 100000 V bytes longer
    //! The image holds the job, the indices and these options, so that the fake restorer
    //! can bring the same fake process back.

    use super::*;

    pub struct Restored {
        pub coord: String,
        pub token: String,
        pub proc: usize,
        pub node: usize,
        pub job: String,
        pub line: String,
    }

    fn opt<'a>(args: &'a [String], name: &str) -> Vec<&'a str> {
        args.windows(2)
            .filter(|w| w[0] == name)
            .map(|w| w[1].as_str())
            .collect()
    }

    /// The values of `--name I:REST` options for process `me`.
    fn mine<'a>(args: &'a [String], name: &str, me: usize) -> Vec<&'a str> {
        opt(args, name)
            .into_iter()
            .filter_map(|v| {
                let (i, rest) = v.split_once(':').unwrap_or((v, ""));
                (i.parse::<usize>().ok() == Some(me)).then_some(rest)
            })
            .collect()
    }

    pub fn proc_main(args: &[String], restored: Option<Restored>) -> i32 {
        let env = |k: &str| std::env::var(k).unwrap_or_default();
        let (coord, token, proc, node, job) = match &restored {
            Some(r) => (
                r.coord.clone(),
                r.token.clone(),
                r.proc,
                r.node,
                r.job.clone(),
            ),
            None => (
                env("CAIRN_COORD_ADDR"),
                env("CAIRN_COORD_TOKEN"),
                env("CAIRN_PROC").parse().expect("CAIRN_PROC"),
                env("CAIRN_NODE").parse().expect("CAIRN_NODE"),
                env("CAIRN_JOB"),
            ),
        };
        let logdir = opt(args, "--log").first().map(PathBuf::from);
        let log = |line: &str| {
            if let Some(d) = &logdir {
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(d.join(format!("proc{proc}.log")))
                    .unwrap();
                writeln!(f, "{line}").unwrap();
            }
        };
        let stop = opt(args, "--stop").first().map(PathBuf::from);
        let stopped = || stop.as_ref().is_some_and(|s| s.exists());
        let code: i32 = mine(args, "--exit", proc)
            .first()
            .map(|c| c.parse().unwrap())
            .unwrap_or(0);
        let hang = mine(args, "--hang", proc);
        let grows = !mine(args, "--grow", proc).is_empty();
        let fails = mine(args, "--fail", proc);
        log(&format!(
            "start pid={} restarted={} node={node} job={job} affinity={} cpus={} preload={}",
            std::process::id(),
            u8::from(restored.is_some()),
            env("CAIRN_CKPT_AFFINITY"),
            env("CAIRN_CKPT_CPUS"),
            env("LD_PRELOAD"),
        ));
        if let Some(r) = &restored {
            log(&format!("restorer {}", r.line));
        }
        let idle_until_stop = || -> i32 {
            while !stopped() {
                std::thread::sleep(Duration::from_millis(20));
            }
            code
        };
        if opt(args, "--no-connect").contains(&proc.to_string().as_str()) {
            return idle_until_stop();
        }
        let stream = net::connect(&coord, proc as u64).expect("connect");
        let mut conn = Conn::new(stream).unwrap();
        conn.send(
            &Msg::new(Verb::Hello)
                .arg("token", &token)
                .arg("job", &job)
                .arg("proc", proc)
                .arg("pid", std::process::id())
                .arg("host", jobdir::hostname())
                .arg("node", node)
                .arg("restarted", u8::from(restored.is_some())),
        )
        .unwrap();
        let welcome = conn.expect("WELCOME").unwrap();
        if welcome.verb != Verb::Welcome {
            log(&format!("denied {welcome}"));
            return 3;
        }
        let (mut reader, mut w) = conn.split();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            while let Ok(Some(m)) = reader.next_msg() {
                if tx.send(m).is_err() {
                    return;
                }
            }
        });
        let mut request = mine(args, "--request", proc)
            .first()
            .map(|ms| Instant::now() + Duration::from_millis(ms.parse().unwrap()));
        let mut paths: BTreeMap<u64, PathBuf> = BTreeMap::new();
        let send = |w: &mut std::net::TcpStream, m: Msg| cairn_launch::proto::send(w, &m).unwrap();
        loop {
            if stopped() {
                log("bye");
                send(&mut w, Msg::new(Verb::Bye).arg("status", code));
                return code;
            }
            if request.is_some_and(|t| Instant::now() >= t) {
                request = None;
                send(&mut w, Msg::new(Verb::Checkpoint));
            }
            let m = match rx.recv_timeout(Duration::from_millis(20)) {
                Ok(m) => m,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => {
                    log("coordinator gone");
                    return idle_until_stop();
                }
            };
            let v: u64 = m.num("ckpt").unwrap();
            match m.verb {
                Verb::Suspend => {
                    log(&format!("suspend {v}"));
                    if hang.contains(&"suspend") {
                        return idle_until_stop();
                    }
                    send(&mut w, Msg::new(Verb::Suspended).arg("ckpt", v));
                }
                Verb::Write => {
                    let path = PathBuf::from(m.get("path").unwrap());
                    log(&format!("write {v} {}", path.display()));
                    let tmp = path.with_extension("img.tmp");
                    if hang.contains(&"write") {
                        std::fs::write(&tmp, b"partial").unwrap();
                        return idle_until_stop();
                    }
                    if fails.contains(&format!("write:{v}").as_str()) {
                        send(
                            &mut w,
                            Msg::new(Verb::Failed)
                                .arg("ckpt", v)
                                .arg("why", "fake: no space left"),
                        );
                        continue;
                    }
                    let mut image = format!(
                        "cairn-fake-image\njob={job}\nproc={proc}\nnode={node}\nargs={}\n",
                        args.join("\u{1f}")
                    )
                    .into_bytes();
                    image.resize(image.len() + 1000 + 100 * proc, b'.');
                    if grows {
                        image.resize(image.len() + 100_000 * v as usize, b'g');
                    }
                    let written = std::fs::File::create(&tmp)
                        .and_then(|mut f| {
                            f.write_all(&image)?;
                            f.sync_all()
                        })
                        .and_then(|()| std::fs::rename(&tmp, &path));
                    match written {
                        Ok(()) => {
                            paths.insert(v, path);
                            send(
                                &mut w,
                                Msg::new(Verb::Written)
                                    .arg("ckpt", v)
                                    .arg("bytes", image.len()),
                            );
                        }
                        Err(e) => {
                            log(&format!("write {v} failed: {e}"));
                            let _ = std::fs::remove_file(&tmp);
                            send(&mut w, Msg::new(Verb::Failed).arg("ckpt", v).arg("why", e));
                        }
                    }
                }
                Verb::Resume => {
                    let ok = m.get("ok").unwrap();
                    log(&format!("resume {v} ok={ok}"));
                    if ok == "0" {
                        if let Some(p) = paths.remove(&v) {
                            let _ = std::fs::remove_file(p);
                        }
                    }
                    send(&mut w, Msg::new(Verb::Resumed).arg("ckpt", v));
                }
                other => panic!("fake proc {proc}: unexpected {other}"),
            }
        }
    }

    /// `<image> --coord ADDR --proc I --affinity on|off [--cpus LIST]`, the token in
    /// `CAIRN_COORD_TOKEN`.
    pub fn restore_main(args: &[String]) -> i32 {
        let image = std::fs::read_to_string(&args[0]).expect("the image");
        let field = |k: &str| {
            image
                .lines()
                .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
                .unwrap()
                .to_string()
        };
        let flag = |k: &str| {
            args.windows(2)
                .find(|w| w[0] == k)
                .map(|w| w[1].clone())
                .unwrap_or_else(|| panic!("restorer without {k}"))
        };
        let proc: usize = flag("--proc").parse().unwrap();
        assert_eq!(
            field("proc").parse::<usize>().unwrap(),
            proc,
            "the image is proc {proc}'s"
        );
        let saved: Vec<String> = field("args").split('\u{1f}').map(String::from).collect();
        let r = Restored {
            coord: flag("--coord"),
            token: std::env::var("CAIRN_COORD_TOKEN").expect("the token in the environment"),
            proc,
            node: field("node").parse().unwrap(),
            job: field("job"),
            line: args[1..].join(" "),
        };
        proc_main(&saved, Some(r))
    }
}

// ---- helpers -----------------------------------------------------------------------------

/// The scratch directory of this test run, with the fake checkpoint library.
fn scratch() -> PathBuf {
    std::env::temp_dir().join(format!("cairn-launch-test-{}", std::process::id()))
}

/// A shared object that preloads and does nothing: what `libcairn-ckpt.so` is here.
fn fake_preload() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let dir = scratch();
        std::fs::create_dir_all(&dir).unwrap();
        let c = dir.join("fake.c");
        std::fs::write(&c, "int cairn_fake_ckpt_library;\n").unwrap();
        let so = dir.join("libfake-ckpt.so");
        let st = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(&so)
            .arg(&c)
            .status()
            .expect("cc (to build a fake preload library)");
        assert!(st.success());
        so
    })
    .clone()
}

fn exe() -> PathBuf {
    std::env::current_exe().unwrap()
}

/// The engine's tiers under `tmp`: `local/node<i>` and `global`.
fn engine_config(tmp: &Path) -> cairn_core::Config {
    cairn_core::Config {
        local: Some(tmp.join("local")),
        global: tmp.join("global"),
        fsync_global: false,
        ..cairn_core::Config::default()
    }
}

fn settings() -> Settings {
    Settings {
        interval: None,
        timeout: Duration::from_secs(20),
        keep: 2,
        affinity: Affinity::On,
        cpus: None,
    }
}

/// A job of fake processes run by `cairn_launch::launch` on a thread of the test process.
struct Job {
    tmp: Option<tempfile::TempDir>,
    opts: Options,
    stop: PathBuf,
    logs: PathBuf,
    thread: Option<std::thread::JoinHandle<cairn_launch::Result<JobExit>>>,
}

impl Job {
    fn options(tmp: &Path, job: &str) -> Options {
        Options {
            dir: tmp.join("images"),
            job: job.into(),
            bind: "127.0.0.1".parse().unwrap(),
            forward_signals: false,
            subcoord: Helper {
                program: exe(),
                args: vec!["coord-node".into()],
            },
            engine: engine_config(tmp),
            hosts: Vec::new(),
            agent: Vec::new(),
            rsh: None,
            init: None,
        }
    }

    fn start(procs: usize, nodes: usize, s: Settings, fake_args: &[&str]) -> Job {
        Job::start_configured(procs, nodes, s, fake_args, |_| {})
    }

    /// As [`Job::start`], with the engine's configuration changed by `engine`.
    fn start_configured(
        procs: usize,
        nodes: usize,
        s: Settings,
        fake_args: &[&str],
        engine: impl FnOnce(&mut cairn_core::Config),
    ) -> Job {
        let tmp = tempfile::tempdir().unwrap();
        let mut opts = Job::options(tmp.path(), "job1");
        engine(&mut opts.engine);
        let (stop, logs) = (tmp.path().join("stop"), tmp.path().join("logs"));
        std::fs::create_dir(&logs).unwrap();
        let mut command: Vec<OsString> = vec![exe().into(), "fake-proc".into()];
        command.extend(["--log".into(), logs.clone().into_os_string()]);
        command.extend(["--stop".into(), stop.clone().into_os_string()]);
        command.extend(fake_args.iter().map(OsString::from));
        let (o, lib) = (opts.clone(), fake_preload());
        let thread =
            std::thread::spawn(move || cairn_launch::launch(&o, &s, procs, nodes, &lib, &command));
        Job {
            tmp: Some(tmp),
            opts,
            stop,
            logs,
            thread: Some(thread),
        }
    }

    fn job_dir(&self) -> PathBuf {
        self.opts.dir.join(&self.opts.job)
    }

    /// The test's directory: the job's, the engine's tiers (`local`, `global`), the logs.
    fn tmp(&self) -> &Path {
        self.tmp.as_ref().expect("the job's directory").path()
    }

    fn vdir(&self, v: u64) -> PathBuf {
        manifest::version_dir(&self.job_dir(), v)
    }

    /// Where the processes of `node` stage the images of checkpoint `v`: beside the node's
    /// data on the node-local tier.
    fn stage(&self, node: usize, v: u64) -> PathBuf {
        self.tmp()
            .join(format!("local/node{node}/.launch/{}/v{v}", self.opts.job))
    }

    /// A client, once the coordinator file is there.
    fn client(&self) -> Client {
        wait_for("the coordinator file", 20.0, || {
            Client::new(&self.job_dir()).ok()
        })
    }

    /// Waits until `n` processes are running and returns the status.
    fn wait_running(&self, n: usize) -> cairn_launch::Status {
        let c = self.client();
        wait_for("the processes to register", 20.0, || {
            let s = c.status().ok()?;
            let running = s
                .procs
                .iter()
                .filter(|p| p.get("state") == Some("running"))
                .count();
            (running == n).then_some(s)
        })
    }

    fn log(&self, proc: usize) -> String {
        std::fs::read_to_string(self.logs.join(format!("proc{proc}.log"))).unwrap_or_default()
    }

    fn finish(self) -> JobExit {
        self.finish_keeping_files().0
    }

    /// Ends the job and hands over its directory, which would otherwise go with the job.
    fn finish_keeping_files(mut self) -> (JobExit, tempfile::TempDir) {
        std::fs::write(&self.stop, b"").unwrap();
        let exit = self
            .thread
            .take()
            .unwrap()
            .join()
            .unwrap()
            .expect("the job ran");
        (exit, self.tmp.take().unwrap())
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        // A failed test must not leave its processes behind.
        let _ = std::fs::write(&self.stop, b"");
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Polls `f` every 20 ms until it gives something; panics after `secs`.
fn wait_for<T>(what: &str, secs: f64, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    loop {
        if let Some(x) = f() {
            return x;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn pid_of(s: &cairn_launch::Status, proc: usize) -> u32 {
    s.procs[proc].num("pid").unwrap()
}

/// SIGKILL to `pid` with kill(2): no `kill` program (procps) is needed.
fn kill9(pid: u32) {
    // 0 and negative numbers name process groups: never send those.
    let target = i32::try_from(pid)
        .ok()
        .filter(|p| *p > 0)
        .and_then(rustix::process::Pid::from_raw)
        .unwrap_or_else(|| panic!("pid {pid}"));
    rustix::process::kill_process(target, rustix::process::Signal::KILL)
        .unwrap_or_else(|e| panic!("kill -9 {pid}: {e}"));
}

type Restarted = std::thread::JoinHandle<cairn_launch::Result<JobExit>>;

/// Restarts the job of `opts` on a thread with the fake restorer; returns the thread, a
/// client, and the status once every restored process runs.
fn restart_in_background(
    opts: &Options,
    ov: Overrides,
) -> (Restarted, Client, cairn_launch::Status) {
    let o = opts.clone();
    let t = std::thread::spawn(move || cairn_launch::restart(&o, None, &ov, &exe()));
    let job_dir = opts.dir.join(&opts.job);
    let c = wait_for("the new coordinator", 20.0, || Client::new(&job_dir).ok());
    let s = wait_for("the restored processes", 20.0, || {
        let s = c.status().ok()?;
        s.procs
            .iter()
            .all(|p| p.get("state") == Some("running"))
            .then_some(s)
    });
    (t, c, s)
}

fn complete_versions(job_dir: &Path) -> Vec<u64> {
    manifest::versions(job_dir)
        .unwrap()
        .iter()
        .filter(|v| v.has_manifest)
        .map(|v| v.version)
        .collect()
}

// ---- tests -------------------------------------------------------------------------------

fn checkpoint_8_procs_on_2_nodes() {
    let job = Job::start(8, 2, settings(), &["--exit", "5:3", "--exit", "6:4"]);
    let s = job.wait_running(8);
    // Status: every process with its pid and node, both nodes with their sub-coordinator.
    assert_eq!(s.job.get("procs"), Some("8"));
    assert_eq!(s.last.get("ckpt"), Some("none"));
    for (i, p) in s.procs.iter().enumerate() {
        assert_eq!(p.num::<usize>("proc").unwrap(), i);
        assert_eq!(p.num::<usize>("node").unwrap(), i * 2 / 8);
        assert_eq!(p.get("host"), Some(jobdir::hostname().as_str()));
        assert_eq!(p.get("restarted"), Some("0"));
        assert!(job.log(i).contains(&format!("pid={}", pid_of(&s, i))));
    }
    assert_eq!(s.nodes.len(), 2);
    let mut sub_pids = Vec::new();
    for (n, node) in s.nodes.iter().enumerate() {
        assert_eq!(node.num::<usize>("node").unwrap(), n);
        assert_eq!(node.get("procs"), Some("4"));
        assert_eq!(node.get("running"), Some("4"));
        assert_eq!(node.get("state"), Some("connected"));
        let pid: u32 = node.num("pid").unwrap();
        // A separate process, running this binary as the sub-coordinator.
        assert_ne!(pid, std::process::id());
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
        assert!(String::from_utf8_lossy(&cmdline).contains("coord-node"));
        sub_pids.push(pid);
    }
    assert_ne!(s.nodes[0].get("subcoord"), s.nodes[1].get("subcoord"));
    // Each process got its node's sub-coordinator, the job and the library to preload.
    for i in 0..8 {
        let log = job.log(i);
        assert!(log.contains(&format!("node={}", i / 4)), "{log}");
        assert!(log.contains("affinity=on"), "{log}");
        assert!(
            log.contains(&format!("preload={}", fake_preload().display())),
            "{log}"
        );
    }

    let mut phases = Vec::new();
    let done = job
        .client()
        .checkpoint(|m| phases.push(m.get("phase").unwrap().to_string()))
        .unwrap();
    assert_eq!(phases, ["SUSPEND", "WRITE", "STORE", "RESUME"]);
    assert_eq!(done.version, 1);
    assert_eq!(Path::new(&done.dir), job.vdir(1));
    let m = Manifest::load(&job.job_dir(), "job1", 1).unwrap();
    assert_eq!(m.procs.len(), 8);
    assert_eq!(m.nodes, 2);
    assert_eq!(m.engine.name, "job1");
    assert_eq!(m.engine.redundancy, "single");
    let tmp = job.tmp();
    assert_eq!(Path::new(&m.engine.local), tmp.join("local"));
    for (i, p) in m.procs.iter().enumerate() {
        assert_eq!((p.proc, p.node, p.pid), (i, i / 4, pid_of(&s, i)));
        // The fake image: a header, its arguments and 1000 + 100 i dots.
        assert!(p.bytes > 1000 + 100 * i as u64, "{p:?}");
        // Stored as a region of its own length (no compression configured).
        assert_eq!(p.region, p.bytes, "{p:?}");
        assert!(p.stored > 0 && p.stored <= p.region, "{p:?}");
        // Each image is the engine's part of rank i, on the node-local tier of its node.
        let part = tmp.join(format!("local/node{}/job1/v1/rank{i}.ckpt", i / 4));
        assert!(part.is_file(), "{}", part.display());
        let log = job.log(i);
        for step in ["suspend 1", "write 1", "resume 1 ok=1"] {
            assert!(log.contains(step), "proc {i}: {log}");
        }
        let staged = job.stage(i / 4, 1).join(format!("proc{i}.img"));
        assert!(
            log.contains(&staged.display().to_string()),
            "proc {i}: {log}"
        );
    }
    // The staged images went once the engine had them (it took each file over, where it
    // was written): the newest version's staging directories stay, empty; the version
    // directory holds only the manifest.
    for node in 0..2 {
        let left: Vec<_> = std::fs::read_dir(job.stage(node, 1)).unwrap().collect();
        assert!(left.is_empty(), "node {node}: {left:?}");
    }
    let files: Vec<_> = std::fs::read_dir(job.vdir(1)).unwrap().collect();
    assert_eq!(files.len(), 1);
    assert_eq!(m.bytes, m.procs.iter().map(|p| p.bytes).sum::<u64>());
    assert_eq!(done.bytes, m.bytes);
    assert_eq!(done.stored, m.procs.iter().map(|p| p.stored).sum::<u64>());
    assert_eq!(m.launch.command[1], "fake-proc");
    assert_eq!(m.launch.affinity, Affinity::On);
    let s = job.client().status().unwrap();
    assert_eq!(s.last.get("ckpt"), Some("1"));
    assert_eq!(s.job.get("state"), Some("idle"));

    let job_dir = job.job_dir();
    let exit = job.finish();
    // The lowest-numbered non-zero status is the job's.
    assert_eq!(exit.code, 3);
    assert_eq!(exit.statuses[6].code(), Some(4));
    assert!(exit
        .statuses
        .iter()
        .enumerate()
        .all(|(i, s)| i == 5 || i == 6 || s.success()));
    assert!(
        !job_dir.join(jobdir::COORD_FILE).exists(),
        "the coordinator file is removed"
    );
    for pid in sub_pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "sub-coordinator {pid} ended"
        );
    }
}

fn suspend_timeout_names_the_process() {
    let s = Settings {
        timeout: Duration::from_secs(1),
        ..settings()
    };
    let job = Job::start(4, 2, s, &["--hang", "3:suspend"]);
    job.wait_running(4);
    let t = Instant::now();
    let e = job.client().checkpoint(|_| {}).unwrap_err();
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(e.kind(), ErrorKind::CheckpointFailed);
    let msg = e.message();
    assert!(msg.contains("checkpoint 1 of job job1 failed"), "{msg}");
    assert!(msg.contains("node 1: proc 3 (pid"), "{msg}");
    assert!(msg.contains("did not answer SUSPEND within 1 s"), "{msg}");
    assert!(
        !msg.contains("proc 2"),
        "only the silent process is named: {msg}"
    );
    assert!((0.9..5.0).contains(&secs), "{secs} s");
    // No manifest; the others were told to resume and drop the checkpoint.
    assert!(!job.vdir(1).exists());
    for i in 0..3 {
        let log = job.log(i);
        assert!(
            log.contains("suspend 1") && log.contains("resume 1 ok=0"),
            "proc {i}: {log}"
        );
        assert!(!log.contains("write 1"), "proc {i}: {log}");
    }
    assert!(!job.log(3).contains("resume"));
    let s = job.client().status().unwrap();
    assert_eq!(s.job.get("state"), Some("idle"));
    assert_eq!(s.last.get("ckpt"), Some("none"));
    job.finish();
}

fn sigkill_during_write_fails_the_checkpoint() {
    let job = Job::start(4, 2, settings(), &["--hang", "2:write"]);
    let s = job.wait_running(4);
    let c = job.client();
    let t = Instant::now();
    let ckpt = std::thread::spawn(move || c.checkpoint(|_| {}));
    // Proc 2 is writing its image (and will never finish): kill it there.
    let partial = job.stage(1, 1).join("proc2.img.tmp");
    wait_for("proc 2 to start writing", 20.0, || {
        partial.exists().then_some(())
    });
    kill9(pid_of(&s, 2));
    let e = ckpt.join().unwrap().unwrap_err();
    let msg = e.message();
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "not the 20 s timeout: {msg}"
    );
    assert!(msg.contains("node 1: proc 2 (pid"), "{msg}");
    assert!(
        msg.contains("lost its connection") && msg.contains("during WRITE"),
        "{msg}"
    );
    assert!(!job.vdir(1).join(manifest::MANIFEST).exists());
    // The failure is reported while the others may still be writing: their RESUME comes when
    // their node has it, so wait for each to say so.
    for i in [0, 1, 3] {
        wait_for("the others to be resumed", 20.0, || {
            job.log(i).contains("resume 1 ok=0").then_some(())
        });
        let log = job.log(i);
        assert!(log.contains("write 1"), "proc {i}: {log}");
        assert!(!job.stage(i / 2, 1).join(format!("proc{i}.img")).exists());
    }
    let s = job.client().status().unwrap();
    assert_eq!(s.procs[2].get("state"), Some("lost"));
    assert_eq!(s.last.get("ckpt"), Some("none"));
    // Another checkpoint is refused at once: a process is gone.
    let e = job.client().checkpoint(|_| {}).unwrap_err();
    assert!(e.message().contains("proc 2 (node 1) is gone"), "{e}");
    let exit = job.finish();
    assert_eq!(exit.code, 128 + 9);
}

fn lost_subcoordinator_fails_the_checkpoint() {
    let job = Job::start(4, 2, settings(), &["--hang", "0:suspend"]);
    let s = job.wait_running(4);
    let sub1: u32 = s.nodes[1].num("pid").unwrap();
    let c = job.client();
    let t = Instant::now();
    let ckpt = std::thread::spawn(move || c.checkpoint(|_| {}));
    // Node 0 waits for proc 0, which hangs; node 1's sub-coordinator dies meanwhile.
    wait_for("proc 0 to get SUSPEND", 20.0, || {
        job.log(0).contains("suspend 1").then_some(())
    });
    kill9(sub1);
    let e = ckpt.join().unwrap().unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(10), "{e}");
    assert!(
        e.message()
            .contains("node 1: the sub-coordinator's connection was lost (procs 2-3)"),
        "{e}"
    );
    let s = job.client().status().unwrap();
    assert_eq!(s.nodes[1].get("state"), Some("lost"));
    assert_eq!(s.procs[3].get("state"), Some("lost"));
    job.finish();
}

fn wrong_token_and_bad_hellos_are_denied() {
    let job = Job::start(2, 1, settings(), &["--no-connect", "1"]);
    job.wait_running(1);
    let info = jobdir::CoordInfo::read(&job.job_dir()).unwrap();
    let token = info.token.hex();
    let s = job.client().status().unwrap();
    let sub = s.nodes[0].get("subcoord").unwrap().to_string();
    let hello = |addr: &str, token: &str, job: &str, proc: usize| {
        let mut c = Conn::new(net::connect(addr, 0).unwrap()).unwrap();
        c.send(
            &Msg::new(Verb::Hello)
                .arg("token", token)
                .arg("job", job)
                .arg("proc", proc)
                .arg("pid", 1)
                .arg("host", "h")
                .arg("node", 0)
                .arg("restarted", 0),
        )
        .unwrap();
        let answer = c.expect("an answer").unwrap();
        (answer, c)
    };
    let denied = |(m, mut c): (Msg, Conn)| {
        assert_eq!(m.verb, Verb::Denied, "{m}");
        assert!(c.recv().unwrap().is_none(), "closed after DENIED");
        m.get("why").unwrap().to_string()
    };
    let wrong = "0".repeat(32);
    assert_eq!(denied(hello(&sub, &wrong, "job1", 1)), "wrong token");
    assert!(denied(hello(&sub, &token, "other", 1)).contains("job mismatch"));
    assert!(denied(hello(&sub, &token, "job1", 0)).contains("proc 0 is already connected"));
    assert!(denied(hello(&sub, &token, "job1", 5)).contains("no proc 5"));
    let to_root = denied(hello(&info.addr.to_string(), &token, "job1", 1));
    assert!(to_root.contains("sub-coordinator"), "{to_root}");
    // A client with a wrong token.
    let mut c = Conn::new(net::connect(&info.addr.to_string(), 0).unwrap()).unwrap();
    c.send(
        &Msg::new(Verb::Client)
            .arg("token", &wrong)
            .arg("cmd", "status"),
    )
    .unwrap();
    assert_eq!(c.expect("DENIED").unwrap().get("why"), Some("wrong token"));
    // A good HELLO is welcome; an unknown verb after it closes the connection.
    let (m, c) = hello(&sub, &token, "job1", 1);
    assert_eq!(m.verb, Verb::Welcome);
    assert_eq!(m.get("proc"), Some("1"));
    c.stream().write_all(b"FROB x=1\n").unwrap();
    let mut rest = Vec::new();
    let _ = c.stream().read_to_end(&mut rest);
    let s = wait_for("proc 1 to be lost", 10.0, || {
        let s = job.client().status().ok()?;
        (s.procs[1].get("state") == Some("lost")).then_some(s)
    });
    assert_eq!(s.procs[0].get("state"), Some("running"));
    job.finish();
}

fn missing_process_is_reported() {
    let s = Settings {
        timeout: Duration::from_secs(1),
        ..settings()
    };
    let job = Job::start(3, 1, s, &["--no-connect", "2"]);
    let st = job.wait_running(2);
    assert_eq!(st.procs[2].get("state"), Some("missing"));
    let e = job.client().checkpoint(|_| {}).unwrap_err();
    assert!(
        e.message()
            .contains("proc 2 (node 0) did not register within 1 s"),
        "{e}"
    );
    // Nothing was suspended.
    assert!(!job.log(0).contains("suspend"));
    job.finish();
}

fn backoff_spreads_connection_attempts() {
    const N: usize = 48;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let barrier = Arc::new(Barrier::new(N + 1));
    let clients: Vec<_> = (0..N)
        .map(|i| {
            let (b, addr) = (barrier.clone(), addr.clone());
            std::thread::spawn(move || {
                b.wait();
                let mut s = net::connect(&addr, i as u64).unwrap();
                s.write_all(&[i as u8]).unwrap();
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    let mut arrival = vec![Duration::ZERO; N];
    for _ in 0..N {
        let (mut s, _) = listener.accept().unwrap();
        let t = start.elapsed();
        let mut b = [0u8];
        s.read_exact(&mut b).unwrap();
        arrival[b[0] as usize] = t;
    }
    for c in clients {
        c.join().unwrap();
    }
    // Client i first tries after i ms: the connections are spread over ~48 ms, in order.
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let first_5ms = arrival.iter().filter(|&&a| ms(a) < 5.0).count();
    assert!(
        first_5ms <= 10,
        "{first_5ms} of {N} arrived in the first 5 ms: {arrival:?}"
    );
    assert!(ms(arrival[N - 1]) - ms(arrival[0]) >= 35.0, "{arrival:?}");
    let late_first = arrival[..N / 4].iter().max().unwrap();
    let early_last = arrival[3 * N / 4..].iter().min().unwrap();
    assert!(
        late_first < early_last,
        "the first quarter before the last: {arrival:?}"
    );
}

fn backoff_retries_until_the_listener_appears() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let start = Instant::now();
    let clients: Vec<_> = (0..8u64)
        .map(|i| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                net::connect(&addr, i).unwrap();
                start.elapsed()
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let listener = TcpListener::bind(&addr).unwrap();
    let accept = std::thread::spawn(move || {
        for _ in 0..8 {
            listener.accept().unwrap();
        }
    });
    for c in clients {
        let t = c.join().unwrap();
        // Refused for 300 ms, then in within the doubling delays (at most 1 s apart).
        assert!(
            t >= Duration::from_millis(300) && t < Duration::from_millis(1500),
            "{t:?}"
        );
    }
    accept.join().unwrap();
}

fn interval_triggers_checkpoints() {
    let s = Settings {
        interval: Some(Duration::from_millis(300)),
        keep: 2,
        ..settings()
    };
    let job = Job::start(2, 1, s, &[]);
    wait_for("three interval checkpoints", 20.0, || {
        job.vdir(3).join(manifest::MANIFEST).exists().then_some(())
    });
    // Wait for the deletion that follows version 3's manifest.
    wait_for("v1 to be deleted", 5.0, || {
        (!job.vdir(1).exists()).then_some(())
    });
    let complete = complete_versions(&job.job_dir());
    assert!(complete.len() == 2 || complete.len() == 3, "{complete:?}");
    assert!(
        complete.windows(2).all(|w| w[1] == w[0] + 1) && complete[0] >= 2,
        "{complete:?}"
    );
    let log = job.log(0);
    for v in 1..=3 {
        assert!(log.contains(&format!("resume {v} ok=1")), "{log}");
    }
    job.finish();
}

fn keep_deletes_only_after_newer_complete() {
    let s = Settings {
        keep: 1,
        timeout: Duration::from_secs(5),
        ..settings()
    };
    let job = Job::start(2, 1, s, &["--fail", "1:write:2"]);
    job.wait_running(2);
    assert_eq!(job.client().checkpoint(|_| {}).unwrap().version, 1);
    // Version 2 fails in WRITE: version 1 stays complete.
    let e = job.client().checkpoint(|_| {}).unwrap_err();
    assert!(e.message().contains("proc 1 (pid"), "{e}");
    assert!(
        e.message()
            .contains("failed to write its image: fake: no space left"),
        "{e}"
    );
    assert_eq!(complete_versions(&job.job_dir()), [1]);
    Manifest::load(&job.job_dir(), "job1", 1).unwrap();
    // Proc 0 may have been writing when the checkpoint was called off: it drops its image
    // when it reads RESUME ok=0, and nothing of version 2 is left.
    wait_for("proc 0 to drop version 2", 10.0, || {
        job.log(0).contains("resume 2 ok=0").then_some(())
    });
    assert!(!job.stage(0, 2).join("proc0.img").exists());
    assert!(!job.vdir(2).join(manifest::MANIFEST).exists());
    // Version 3 completes: only now do versions 1 (complete) and 2 (not) go.
    assert_eq!(job.client().checkpoint(|_| {}).unwrap().version, 3);
    assert_eq!(complete_versions(&job.job_dir()), [3]);
    assert!(!job.vdir(1).exists() && !job.vdir(2).exists());
    job.finish();
}

fn process_can_request_a_checkpoint() {
    let job = Job::start(2, 1, settings(), &["--request", "1:100"]);
    wait_for("the requested checkpoint", 20.0, || {
        job.vdir(1).join(manifest::MANIFEST).exists().then_some(())
    });
    let s = wait_for("the checkpoint to end", 10.0, || {
        let s = job.client().status().ok()?;
        (s.job.get("state") == Some("idle")).then_some(s)
    });
    assert_eq!(s.last.get("ckpt"), Some("1"));
    assert!(!job.vdir(2).exists(), "one request, one checkpoint");
    job.finish();
}

fn kill_command_ends_the_job() {
    let mut job = Job::start(2, 1, settings(), &[]);
    job.wait_running(2);
    assert_eq!(job.client().kill(9).unwrap(), 2);
    let exit = job.thread.take().unwrap().join().unwrap().unwrap();
    assert_eq!(exit.code, 137);
}

fn restart_refuses_a_version_without_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let o = Job::options(tmp.path(), "old");
    let v1 = o.dir.join("old/v1");
    std::fs::create_dir_all(&v1).unwrap();
    std::fs::write(v1.join("proc0.img"), b"x").unwrap();
    let restorer = exe();
    let e = cairn_launch::restart(&o, None, &Overrides::default(), &restorer).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert!(
        e.message().contains("no complete checkpoint of job old"),
        "{e}"
    );
    assert!(e.message().contains("v1 (no manifest: proc0.img)"), "{e}");
    let e = cairn_launch::restart(&o, Some(1), &Overrides::default(), &restorer).unwrap_err();
    assert!(
        e.message().contains("version 1 of job old is not complete"),
        "{e}"
    );
    assert!(e.message().contains("complete versions: none"), "{e}");
    assert_eq!(
        cairn_launch::launch::restart_job(&o.dir, None).unwrap(),
        "old"
    );
    // Nothing was started.
    assert!(!o.dir.join("old").join(jobdir::COORD_FILE).exists());
}

fn restart_runs_the_restorer_and_checkpoints_again() {
    let job = Job::start(4, 2, settings(), &["--exit", "3:7"]);
    job.wait_running(4);
    assert_eq!(job.client().checkpoint(|_| {}).unwrap().version, 1);
    let opts = job.opts.clone();
    let logs = job.logs.clone();
    let stop = job.stop.clone();
    let (exit, _tmp) = job.finish_keeping_files();
    assert_eq!(exit.code, 7);
    std::fs::remove_file(&stop).unwrap();

    let ov = Overrides {
        affinity: Some(Affinity::Off),
        ..Overrides::default()
    };
    let (t, c, s) = restart_in_background(&opts, ov);
    let job_dir = opts.dir.join(&opts.job);
    assert!(s.procs.iter().all(|p| p.get("restarted") == Some("1")));
    assert_eq!(s.last.get("ckpt"), Some("1"));
    let token = jobdir::CoordInfo::read(&job_dir).unwrap().token.hex();
    for i in 0..4 {
        let log = std::fs::read_to_string(logs.join(format!("proc{i}.log"))).unwrap();
        let node_addr = s.nodes[i / 2].get("subcoord").unwrap();
        let want = format!("restorer --coord {node_addr} --proc {i} --affinity off");
        assert!(log.contains(&want), "proc {i}: {log}");
        assert!(
            !log.contains(&token),
            "the token is on a command line: {log}"
        );
        assert!(log.contains("restarted=1"), "{log}");
    }
    // A checkpoint after the restart gets the next version and records the restart.
    let done = c.checkpoint(|_| {}).unwrap();
    assert_eq!(done.version, 2);
    let m = Manifest::load(&job_dir, "job1", 2).unwrap();
    assert_eq!(m.launch.restarts, 1);
    assert_eq!(m.launch.affinity, Affinity::Off);
    assert_eq!(m.procs.len(), 4);
    std::fs::write(&stop, b"").unwrap();
    let exit = t.join().unwrap().unwrap();
    assert_eq!(exit.code, 7, "the restored fake exits as the original did");
}

fn engine_failure_fails_the_checkpoint() {
    let job = Job::start(4, 2, settings(), &[]);
    job.wait_running(4);
    assert_eq!(job.client().checkpoint(|_| {}).unwrap().version, 1);
    // The job's directory on node 1's storage becomes a file: the engine cannot write its
    // parts there (the images are still staged beside it).
    let node1 = job.tmp().join("local/node1/job1");
    std::fs::remove_dir_all(&node1).unwrap();
    std::fs::write(&node1, b"not a directory").unwrap();
    let e = job.client().checkpoint(|_| {}).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::CheckpointFailed);
    let msg = e.message();
    assert!(msg.contains("checkpoint 2 of job job1 failed"), "{msg}");
    assert!(
        msg.contains("the engine could not store the images"),
        "{msg}"
    );
    // No manifest; the processes were told to drop their images, and the staged ones went.
    assert!(!job.vdir(2).exists());
    assert!(!job.stage(0, 2).exists() && !job.stage(1, 2).exists());
    for i in 0..4 {
        let log = job.log(i);
        assert!(log.contains("resume 2 ok=0"), "proc {i}: {log}");
    }
    // With its storage back, the job checkpoints again.
    std::fs::remove_file(&node1).unwrap();
    std::fs::create_dir(&node1).unwrap();
    assert_eq!(job.client().checkpoint(|_| {}).unwrap().version, 3);
    assert_eq!(complete_versions(&job.job_dir()), [1, 3]);
    job.finish();
}

fn restart_falls_back_when_the_newest_version_is_damaged() {
    // Proc 1's image grows at each checkpoint, so version 1 does not fit version 2's region;
    // the global tier gets nothing (no flush, no finalize), so only node-local copies count.
    let job = Job::start_configured(2, 2, settings(), &["--grow", "1"], |c| {
        c.finalize_flush = false
    });
    job.wait_running(2);
    assert_eq!(job.client().checkpoint(|_| {}).unwrap().version, 1);
    assert_eq!(job.client().checkpoint(|_| {}).unwrap().version, 2);
    let m1 = Manifest::load(&job.job_dir(), "job1", 1).unwrap();
    let m2 = Manifest::load(&job.job_dir(), "job1", 2).unwrap();
    assert!(m2.procs[1].region > m1.procs[1].region, "{m1:?} {m2:?}");
    let (opts, logs, stop) = (job.opts.clone(), job.logs.clone(), job.stop.clone());
    let (_, tmp) = job.finish_keeping_files();
    std::fs::remove_file(&stop).unwrap();
    // Damage proc 1's part of version 2 in the middle of its stored blocks.
    let part = tmp.path().join("local/node1/job1/v2/rank1.ckpt");
    let mut bytes = std::fs::read(&part).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&part, bytes).unwrap();

    // An engine configured with other tiers finds nothing, and says where it looked.
    let mut elsewhere = opts.clone();
    std::fs::create_dir(tmp.path().join("elsewhere")).unwrap();
    elsewhere.engine = engine_config(&tmp.path().join("elsewhere"));
    let e = cairn_launch::restart(&elsewhere, None, &Overrides::default(), &exe()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    let msg = e.message();
    assert!(msg.contains("the engine holds no checkpoint job1"), "{msg}");
    assert!(
        msg.contains(&format!(
            "launched with local {}",
            tmp.path().join("local").display()
        )),
        "{msg}"
    );

    let (t, c, s) = restart_in_background(&opts, Overrides::default());
    let job_dir = opts.dir.join(&opts.job);
    // Version 1 was restored; version 2 is gone, manifest included, and its number is the
    // next checkpoint's.
    assert_eq!(s.last.get("ckpt"), Some("1"));
    assert_eq!(complete_versions(&job_dir), [1]);
    for i in 0..2 {
        let log = std::fs::read_to_string(logs.join(format!("proc{i}.log"))).unwrap();
        assert_eq!(log.matches("restarted=1").count(), 1, "proc {i}: {log}");
    }
    assert_eq!(c.checkpoint(|_| {}).unwrap().version, 2);
    std::fs::write(&stop, b"").unwrap();
    t.join().unwrap().unwrap();
    drop(tmp);
}
