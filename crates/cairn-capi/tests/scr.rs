//! libscr, Cairn's implementation of SCR's API (`native/compat/scr`, `scr.h`), with real MPI
//! and real processes. `native/compat/build.sh` installs it into a prefix holding a copy of the
//! freshly built libcairn (`support::compat_prefix`), and the programs in `tests/scr/` are
//! compiled against that prefix as an SCR application would be (`-lscr`). `heat.c` is a heat
//! loop in the style of SCR's examples: it runs under mpirun with 4 ranks on 2 simulated
//! nodes, is killed with SIGKILL after a checkpoint (with node 1's storage deleted under
//! PARTNER, XOR and RS) and relaunched, and must end bit-exactly like an uninterrupted run.
//! Other tests check the fallback when a rank finds a restart invalid, output datasets under
//! SCR_PREFIX, SCR's settings (mapped, or reported once), and `api.c`'s dataset calls.
//!
//! SCR_PREFIX and SCR_CACHE_BASE under each test's directory stand for the parallel file
//! system and node-local storage: the CAIRN_TIERS_* variables are taken away, so they decide
//! Cairn's tiers. Needs Open MPI (mpicc, mpicxx, mpirun) and `cargo build --release -p
//! cairn-capi` (or the libcairn.so that `cargo test` builds).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;
use support::*;

const RANKS: usize = 4;
const NODES: usize = 2;
/// The heat run every test compares with: 600 steps, a checkpoint every 100.
const HEAT: [&str; 6] = ["--n", "4096", "--steps", "600", "--every", "100"];

// ---- Building -----------------------------------------------------------------------------------

struct Programs {
    heat: PathBuf,
    api: PathBuf,
    cxx: PathBuf,
    fortran: PathBuf,
    shared: PathBuf,
}

/// Compile `tests/scr/<src>` into `<prefix>/bin/<name>` against the installed scr.h and libscr.
fn compile(
    prefix: &Path,
    compiler: &str,
    flags: &[&str],
    src: &str,
    name: &str,
) -> Result<PathBuf, String> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin = prefix.join("bin");
    std::fs::create_dir_all(&bin).map_err(|e| format!("mkdir {}: {e}", bin.display()))?;
    let out = bin.join(name);
    let lib = prefix.join("lib");
    let res = Command::new(compiler)
        .args(["-O2", "-Wall", "-Wextra", "-Werror"])
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(manifest.join("tests/scr").join(src))
        .arg("-I")
        .arg(prefix.join("include"))
        .arg("-L")
        .arg(&lib)
        .args(["-lscr", "-lcairn"])
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .output()
        .map_err(|e| format!("run {compiler}: {e}"))?;
    if !res.status.success() {
        return Err(format!(
            "{compiler} failed to build tests/scr/{src}:\n{}{}",
            String::from_utf8_lossy(&res.stdout),
            String::from_utf8_lossy(&res.stderr)
        ));
    }
    Ok(out)
}

fn build() -> Result<Programs, String> {
    let prefix = compat_prefix("scr")?;
    let c = ["-std=c11"];
    // Open MPI's deprecated C++ bindings do not build warning-free; OMPI_SKIP_MPICXX leaves
    // them out, as in the C API tests.
    let cxx = ["-std=c++17", "-DOMPI_SKIP_MPICXX"];
    Ok(Programs {
        heat: compile(&prefix, "mpicc", &c, "heat.c", "heat")?,
        api: compile(&prefix, "mpicc", &c, "api.c", "api")?,
        cxx: compile(&prefix, "mpicxx", &cxx, "cxx.cpp", "cxx")?,
        // scrf.h declares every constant; a program uses some.
        fortran: compile(
            &prefix,
            "mpif90",
            &["-Wno-unused-parameter"],
            "ckpt.f90",
            "ckpt",
        )?,
        shared: compile(&prefix, "mpicc", &c, "shared.c", "shared")?,
    })
}

fn programs() -> &'static Programs {
    static PROGRAMS: OnceLock<Result<Programs, String>> = OnceLock::new();
    match PROGRAMS.get_or_init(build) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}

// ---- Running ------------------------------------------------------------------------------------

/// One test's storage: the prefix directory (SCR_PREFIX, also Cairn's global tier below it) and
/// the cache base (SCR_CACHE_BASE, Cairn's node-local tier below it), plus SCR settings.
struct Scr {
    tiers: Tiers,
}

impl Scr {
    fn new(settings: &[(&str, &str)]) -> Scr {
        let mut tiers = Tiers::new(NODES);
        let prefix = tiers.path().join("pfs");
        let cache = tiers.path().join("cache");
        std::fs::create_dir_all(&cache).expect("create the cache base");
        tiers.set("SCR_PREFIX", &prefix.display().to_string());
        tiers.set("SCR_CACHE_BASE", &cache.display().to_string());
        for (k, v) in settings {
            tiers.set(k, v);
        }
        Scr { tiers }
    }

    fn prefix(&self) -> PathBuf {
        self.tiers.path().join("pfs")
    }

    /// Node `n`'s node-local directory: `<cache>/<user>/scr.defjobid/node<n>`, where SCR
    /// keeps its cache.
    fn node_dir(&self, n: usize) -> PathBuf {
        let cache = self.tiers.path().join("cache");
        let user = std::fs::read_dir(&cache)
            .expect("read the cache base")
            .flatten()
            .find(|e| e.path().join("scr.defjobid").is_dir())
            .unwrap_or_else(|| panic!("no <user>/scr.defjobid directory in {}", cache.display()));
        user.path().join(format!("scr.defjobid/node{n}"))
    }

    fn cmd(&self, program: &Path, args: &[&str]) -> Command {
        let mut c = command(program, Some(RANKS), args, &self.tiers);
        c.env_remove("CAIRN_TIERS_LOCAL")
            .env_remove("CAIRN_TIERS_GLOBAL");
        c
    }

    /// heat.c with `args`, writing its datasets under the prefix.
    fn heat(&self, args: &[&str]) -> Command {
        let dir = self.prefix().display().to_string();
        let mut all = args.to_vec();
        all.extend(["--dir", &dir]);
        self.cmd(&programs().heat, &all)
    }
}

/// `heat: final checksum <hex> (step <s>)` -> hex.
fn checksum(o: &Outcome) -> String {
    o.lines()
        .find_map(|l| l.strip_prefix("heat: final checksum "))
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no final checksum\n{}", o.show()))
        .to_string()
}

/// The step of `heat: checkpoint ckpt.<s> complete (step <s>)`.
fn checkpoint_line(l: &str) -> Option<i64> {
    l.strip_prefix("heat: checkpoint ckpt.")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// (name, step) of `heat: restarted from <name> (step <s>)`.
fn restarted(o: &Outcome) -> Option<(String, i64)> {
    o.lines().find_map(|l| {
        let rest = l.strip_prefix("heat: restarted from ")?;
        let (name, step) = rest.split_once(" (step ")?;
        Some((name.to_string(), step.strip_suffix(')')?.parse().ok()?))
    })
}

/// Lines of `text` containing `needle`.
fn count(text: &str, needle: &str) -> usize {
    text.lines().filter(|l| l.contains(needle)).count()
}

/// The checksum of an uninterrupted run of [`HEAT`], computed once (call with the MPI lock).
fn reference() -> &'static str {
    static SUM: OnceLock<String> = OnceLock::new();
    SUM.get_or_init(|| {
        let scr = Scr::new(&[]);
        let o = run(scr.heat(&HEAT), "heat, uninterrupted");
        o.assert_ok();
        assert!(
            o.stdout.contains("heat: no checkpoint, starting fresh"),
            "{}",
            o.show()
        );
        assert_eq!(
            count(&o.stdout, "heat: checkpoint ckpt."),
            6,
            "{}",
            o.show()
        );
        checksum(&o)
    })
}

/// Run heat slowly, kill rank `victim` with SIGKILL right after rank 0 reported the second
/// checkpoint complete, and return the newest checkpoint step reported before the run ended.
fn run_and_kill(scr: &Scr, victim: usize, what: &str) -> i64 {
    let mut slow = HEAT.to_vec();
    slow.extend(["--sleep-ms", "3"]);
    let mut job = spawn(scr.heat(&slow), &format!("{what}, to be killed"));
    let pid = rank_pid(job.pid(), "heat", victim, Duration::from_secs(30))
        .unwrap_or_else(|| panic!("{what}: no process for rank {victim}"));
    let mut seen = 0;
    let line = job.wait_line(Duration::from_secs(60), |l| {
        seen += checkpoint_line(l).is_some() as usize;
        seen == 2
    });
    assert!(
        line.is_some(),
        "{what}: no second checkpoint; saw {:?}",
        job.seen
    );
    kill9(pid);
    let killed = job.finish(Duration::from_secs(60));
    assert!(
        !killed.status.success() && !killed.stdout.contains("final checksum"),
        "{what}: the run should have been killed\n{}",
        killed.show()
    );
    killed
        .lines()
        .filter_map(checkpoint_line)
        .max()
        .expect("a checkpoint was reported")
}

/// Relaunch after a kill: the run restarts from a checkpoint at least as new as `newest` and
/// ends like the uninterrupted run. Returns the relaunch.
fn relaunch_matches(scr: &Scr, newest: i64, what: &str) -> Outcome {
    let again = run(scr.heat(&HEAT), &format!("{what}, relaunched"));
    again.assert_ok();
    let (name, step) = restarted(&again)
        .unwrap_or_else(|| panic!("{what}: the relaunch did not restart\n{}", again.show()));
    assert!(
        step >= newest && name == format!("ckpt.{step}"),
        "{what}: restarted from {name} (step {step}), but ckpt.{newest} was reported complete\n{}",
        again.show()
    );
    assert!(
        again
            .stdout
            .contains(&format!("heat: have restart {name}\n")),
        "{what}: SCR_Have_restart should name {name}\n{}",
        again.show()
    );
    assert_eq!(
        checksum(&again),
        reference(),
        "{what}: the relaunched run ends differently from the uninterrupted one\n{}",
        again.show()
    );
    again
}

// ---- Tests --------------------------------------------------------------------------------------

#[test]
fn heat_survives_kill9_and_ends_like_an_uninterrupted_run() {
    let _mpi = mpi_lock();
    reference();
    let what = "heat, SCR_COPY_TYPE=SINGLE";
    let scr = Scr::new(&[("SCR_COPY_TYPE", "SINGLE")]);
    let newest = run_and_kill(&scr, 1, what);
    relaunch_matches(&scr, newest, what);
}

#[test]
fn a_second_scr_job_on_the_same_prefix_is_refused_at_scr_init() {
    let _mpi = mpi_lock();
    reference();
    let scr = Scr::new(&[]);
    // The first job waits after its first checkpoint until the second job has looked.
    let go = scr.tiers.path().join("go");
    let mut held = HEAT.to_vec();
    held.extend(["--hold", go.to_str().unwrap()]);
    let mut first = spawn(scr.heat(&held), "first SCR job");
    assert!(
        first
            .wait_line(Duration::from_secs(60), |l| checkpoint_line(l).is_some())
            .is_some(),
        "no checkpoint: {:?}",
        first.seen
    );
    let second = run(scr.heat(&HEAT), "second SCR job on the same prefix");
    assert!(
        !second.status.success()
            && second.stderr.contains("SCR_Init: checkpoint \"scr\"")
            && second.stderr.contains("is in use by the job of pid")
            && !second.stdout.contains("final checksum"),
        "{}",
        second.show()
    );
    std::fs::write(&go, b"").unwrap();
    let first = first.finish(RUN_TIMEOUT);
    first.assert_ok();
    assert_eq!(checksum(&first), reference(), "{}", first.show());
}

#[test]
fn partner_xor_and_rs_rebuild_a_lost_node_after_kill9() {
    let _mpi = mpi_lock();
    reference();
    for settings in [
        &[("SCR_COPY_TYPE", "PARTNER")][..],
        &[("SCR_COPY_TYPE", "XOR"), ("SCR_SET_SIZE", "2")][..],
        &[
            ("SCR_COPY_TYPE", "RS"),
            ("SCR_SET_SIZE", "2"),
            ("SCR_SET_FAILURES", "1"),
        ][..],
    ] {
        let what = format!("heat, {settings:?}, rank 3 killed, node 1 lost");
        let scr = Scr::new(settings);
        let newest = run_and_kill(&scr, 3, &what);
        let node = scr.node_dir(1);
        std::fs::remove_dir_all(&node).unwrap_or_else(|e| panic!("remove {}: {e}", node.display()));
        let again = relaunch_matches(&scr, newest, &what);
        assert!(
            again.stderr.contains("rebuilt"),
            "{what}: stderr should say what was rebuilt\n{}",
            again.show()
        );
    }
}

#[test]
fn an_invalid_restart_on_one_rank_falls_back_on_every_rank() {
    let _mpi = mpi_lock();
    reference();
    let what = "heat, rank 2 says its restart is invalid";
    let scr = Scr::new(&[]);
    let mut first = HEAT.to_vec();
    first[3] = "300";
    run(scr.heat(&first), &format!("{what}: 300 steps")).assert_ok();

    let mut args = HEAT.to_vec();
    args.extend(["--invalid-rank", "2"]);
    let again = run(scr.heat(&args), &format!("{what}: relaunched"));
    again.assert_ok();
    let lines: Vec<&str> = again
        .lines()
        .filter(|l| l.starts_with("heat: have restart") || l.starts_with("heat: restart"))
        .collect();
    assert_eq!(
        lines,
        [
            "heat: have restart ckpt.300",
            "heat: restart from ckpt.300 failed on some rank; trying an older checkpoint",
            "heat: have restart ckpt.200",
            "heat: restarted from ckpt.200 (step 200)",
        ],
        "{what}\n{}",
        again.show()
    );
    assert_eq!(checksum(&again), reference(), "{what}\n{}", again.show());
    assert_eq!(
        count(
            &again.stderr,
            "SCR: SCR_Complete_restart: checkpoint ckpt.300 was found invalid"
        ),
        1,
        "{what}: one line says so\n{}",
        again.show()
    );
    // The run went on from ckpt.200 and wrote ckpt.300 anew; a third run takes the new one.
    let third = run(scr.heat(&HEAT), &format!("{what}: third run"));
    third.assert_ok();
    assert_eq!(
        restarted(&third),
        Some(("ckpt.600".to_string(), 600)),
        "{}",
        third.show()
    );
}

#[test]
fn output_datasets_land_at_their_paths_under_the_prefix() {
    let _mpi = mpi_lock();
    let _ = programs();
    let scr = Scr::new(&[]);
    let mut args = HEAT.to_vec();
    args[3] = "300";
    args.extend(["--output-every", "150"]);
    let o = run(scr.heat(&args), "heat with output datasets");
    o.assert_ok();
    for step in [150, 300] {
        assert!(
            o.stdout
                .contains(&format!("heat: output output.{step} complete")),
            "{}",
            o.show()
        );
        for r in 0..RANKS {
            let p = scr.prefix().join(format!("output.{step}/field_{r}.dat"));
            let bytes =
                std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}\n{}", p.display(), o.show()));
            let head = format!("heat output step {step} rank {r} cells 4096\n");
            assert!(
                bytes.starts_with(head.as_bytes()),
                "{} starts {:?}",
                p.display(),
                &bytes[..40]
            );
            assert_eq!(bytes.len(), head.len() + 4096 * 8, "{}", p.display());
        }
    }
    // Checkpoint-only datasets stay in Cairn's tiers, not at their paths.
    assert!(!scr.prefix().join("ckpt.100").exists());
    assert!(
        scr.prefix().join(".scr/cairn/scr").is_dir(),
        "the global tier is under SCR_PREFIX"
    );
}

#[test]
fn settings_are_mapped_and_the_unsupported_ones_reported_once() {
    let _mpi = mpi_lock();
    let _ = programs();
    let mut scr = Scr::new(&[("SCR_FLUSH_WIDTH", "16"), ("SCR_HALT_EXIT", "0")]);
    let conf = scr.tiers.write(
        "scr.conf",
        "# a user configuration file\n\
         SCR_WATCHDOG_TIMEOUT=30\n\
         SCR_CACHE_SIZE=3   # three checkpoints in cache\n\
         STORE=/ssd COUNT=2\n\
         SCR_MADE_UP=1\n",
    );
    scr.tiers.set("SCR_CONF_FILE", &conf.display().to_string());
    let args = [
        &HEAT[..],
        &[
            "--config",
            "SCR_CNTL_BASE=/dev/shm/x",
            "--config",
            "SCR_CHECKPOINT_INTERVAL=2",
        ],
    ]
    .concat();
    let o = run(scr.heat(&args), "heat with SCR settings");
    o.assert_ok();
    for reported in [
        "SCR_FLUSH_WIDTH=16 (environment) has no effect",
        "SCR_WATCHDOG_TIMEOUT=30 (",
        "SCR_CNTL_BASE=/dev/shm/x (SCR_Config) has no effect",
        "STORE=/ssd COUNT=2 (",
        "SCR_MADE_UP=1 (",
    ] {
        assert_eq!(
            count(&o.stderr, reported),
            1,
            "{reported:?} once\n{}",
            o.show()
        );
    }
    for quiet in ["SCR_CACHE_SIZE", "SCR_CHECKPOINT_INTERVAL", "SCR_HALT_EXIT"] {
        assert_eq!(
            count(&o.stderr, quiet),
            0,
            "{quiet} is applied\n{}",
            o.show()
        );
    }
    // SCR_CHECKPOINT_INTERVAL=2: SCR_Need_checkpoint says yes every second time it is asked.
    let steps: Vec<i64> = o.lines().filter_map(checkpoint_line).collect();
    assert_eq!(steps, [200, 400, 600], "{}", o.show());
    // SCR_CACHE_SIZE=3: node-local storage keeps three checkpoints.
    let kept = std::fs::read_dir(scr.node_dir(0).join("scr"))
        .unwrap()
        .count();
    assert_eq!(kept, 3, "{}", o.show());
    assert_eq!(checksum(&o), reference());
}

#[test]
fn a_bad_setting_fails_scr_init_with_one_line() {
    let _mpi = mpi_lock();
    let _ = programs();
    let scr = Scr::new(&[("SCR_CACHE_SIZE", "lots")]);
    let o = run(scr.heat(&HEAT), "heat with SCR_CACHE_SIZE=lots");
    o.assert_exit5();
    assert_eq!(count(&o.stderr, "SCR: "), 1, "{}", o.show());
    assert_eq!(
        count(
            &o.stderr,
            "SCR: SCR_Init: SCR_CACHE_SIZE=lots (environment)"
        ),
        1,
        "{}",
        o.show()
    );
}

#[test]
fn scr_current_restarts_from_the_named_checkpoint() {
    let _mpi = mpi_lock();
    reference();
    let mut scr = Scr::new(&[("SCR_CACHE_SIZE", "4")]);
    run(scr.heat(&HEAT), "heat, 600 steps").assert_ok();
    scr.tiers.set("SCR_CURRENT", "ckpt.400");
    let o = run(scr.heat(&HEAT), "heat with SCR_CURRENT=ckpt.400");
    o.assert_ok();
    assert_eq!(
        restarted(&o),
        Some(("ckpt.400".to_string(), 400)),
        "{}",
        o.show()
    );
    assert_eq!(checksum(&o), reference(), "{}", o.show());
}

#[test]
fn dataset_calls_config_and_errors_behave_as_scr_documents() {
    let _mpi = mpi_lock();
    let scr = Scr::new(&[]);
    let dir = scr.prefix().display().to_string();
    for mode in ["first", "second"] {
        let o = run(
            scr.cmd(&programs().api, &["--dir", &dir, mode]),
            &format!("api {mode}"),
        );
        o.assert_ok();
        assert!(o.stdout.contains("api: ok"), "{}", o.show());
        // Refused collective calls say so once, not once per rank.
        assert!(
            count(&o.stderr, "SCR: SCR_Drop: no dataset is named") <= 1,
            "{}",
            o.show()
        );
    }
}

#[test]
fn scr_h_compiles_as_cxx_and_restarts() {
    let _mpi = mpi_lock();
    let scr = Scr::new(&[]);
    for expect in ["cxx: wrote ok", "cxx: restarted ok"] {
        let o = run(scr.cmd(&programs().cxx, &[]), expect);
        o.assert_ok();
        assert!(o.stdout.contains(expect), "{}", o.show());
    }
}

#[test]
fn the_fortran_interface_checkpoints_restarts_and_takes_scr_current_before_have_restart() {
    let _mpi = mpi_lock();
    let mut scr = Scr::new(&[("SCR_CACHE_SIZE", "8")]);
    let first = run(scr.cmd(&programs().fortran, &[]), "ckpt.f90, fresh");
    first.assert_ok();
    assert!(
        first.stdout.contains("ckpt: fresh") && first.stdout.contains("ckpt: wrote ok"),
        "{}",
        first.show()
    );
    // The newest (ckpt.3), its file found by its bare name.
    let second = run(scr.cmd(&programs().fortran, &[]), "ckpt.f90, restart");
    second.assert_ok();
    assert!(
        second.stdout.contains("ckpt: restarted ckpt.3 ok"),
        "{}",
        second.show()
    );
    // SCR_CURRENT called before SCR_HAVE_RESTART picks an older checkpoint.
    scr.tiers.set("CKPT_CURRENT", "ckpt.4");
    let third = run(scr.cmd(&programs().fortran, &[]), "ckpt.f90, SCR_Current");
    third.assert_ok();
    assert!(
        third.stdout.contains("ckpt: restarted ckpt.4 ok"),
        "{}",
        third.show()
    );
}

#[test]
fn scr_fetch_0_restarts_from_the_cache_but_never_from_the_prefix() {
    let _mpi = mpi_lock();
    let mut scr = Scr::new(&[("SCR_CACHE_SIZE", "8"), ("SCR_FLUSH", "1")]);
    run(scr.cmd(&programs().fortran, &[]), "ckpt.f90, fresh").assert_ok();
    scr.tiers.set("SCR_FETCH", "0");
    let cached = run(scr.cmd(&programs().fortran, &[]), "SCR_FETCH=0, cache kept");
    cached.assert_ok();
    assert!(
        cached.stdout.contains("ckpt: restarted ckpt.3 ok"),
        "{}",
        cached.show()
    );
    // Every cached copy gone: the flushed ones are on the prefix, and SCR_FETCH=0 leaves
    // them there.
    for n in 0..NODES {
        std::fs::remove_dir_all(scr.node_dir(n)).unwrap();
    }
    let fresh = run(scr.cmd(&programs().fortran, &[]), "SCR_FETCH=0, cache lost");
    fresh.assert_ok();
    assert!(fresh.stdout.contains("ckpt: fresh"), "{}", fresh.show());
    // With fetching, the newest flushed checkpoint comes back from the prefix.
    for n in 0..NODES {
        std::fs::remove_dir_all(scr.node_dir(n)).unwrap();
    }
    scr.tiers.set("SCR_FETCH", "1");
    let fetched = run(scr.cmd(&programs().fortran, &[]), "SCR_FETCH=1");
    fetched.assert_ok();
    assert!(
        fetched.stdout.contains("ckpt: restarted ckpt.3 ok"),
        "{}",
        fetched.show()
    );
}

/// The byte at `offset` of a file of `shared.c`'s step `step` written by rank `writer`.
fn shared_byte(offset: usize, step: usize, writer: usize) -> u8 {
    ((offset * 7 + step + 31 * writer) & 0xff) as u8
}

#[test]
fn a_file_every_rank_writes_is_checkpointed_with_cache_bypass_and_put_back_at_restart() {
    let _mpi = mpi_lock();
    const SLICE: usize = 65536;
    let scr = Scr::new(&[("SCR_CACHE_BYPASS", "1")]);
    let dir = scr.prefix().display().to_string();
    let shared = |what: &str| run(scr.cmd(&programs().shared, &["--dir", &dir]), what);
    let first = shared("shared.c, bypass");
    first.assert_ok();
    assert_eq!(
        count(&first.stdout, "complete"),
        3,
        "three checkpoints expected\n{}",
        first.show()
    );
    // The files are at their own paths: damage the shared one, delete one of a rank's own.
    let step3 = scr.prefix().join("step.3");
    let all = step3.join("all.dat");
    let mut bytes = std::fs::read(&all).unwrap();
    assert_eq!(bytes.len(), RANKS * SLICE);
    for b in &mut bytes[SLICE + 100..SLICE + 200] {
        *b ^= 0x5a;
    }
    std::fs::write(&all, &bytes).unwrap();
    std::fs::remove_file(step3.join("rank2.dat")).unwrap();

    let again = shared("shared.c, bypass, restart after damage");
    again.assert_ok();
    assert!(
        again.stdout.contains("shared: restarted from step.3"),
        "{}",
        again.show()
    );
    // Put back from what Cairn stored: every writer's slice, and the deleted file.
    let back = std::fs::read(&all).unwrap();
    for (i, b) in back.iter().enumerate() {
        assert_eq!(*b, shared_byte(i, 3, i / SLICE), "all.dat byte {i}");
    }
    let own = std::fs::read(step3.join("rank2.dat")).expect("rank2.dat put back");
    assert!(own
        .iter()
        .enumerate()
        .all(|(i, b)| *b == shared_byte(i, 3, 2)));

    // Cached (Cairn's default), every rank would write its own copy: the dataset is refused
    // and the shared file named, with the setting that makes it work.
    let cached = Scr::new(&[]);
    let dir = cached.prefix().display().to_string();
    let o = run(
        cached.cmd(&programs().shared, &["--dir", &dir, "--steps", "1"]),
        "shared.c, cached",
    );
    o.assert_ok();
    assert!(
        o.stdout.contains("shared: checkpoint step.1 not kept"),
        "{}",
        o.show()
    );
    assert!(
        o.stderr
            .contains("step.1/all.dat was routed by more than one rank")
            && o.stderr.contains("SCR_CACHE_BYPASS=1"),
        "{}",
        o.show()
    );
}
