//! VeloC's C API on Cairn (`native/compat/veloc`): programs written the way VeloC's own
//! examples are (`tests/veloc/*.c`) are built against the compatibility `veloc.h` and linked
//! with `-lveloc` only, then run under mpirun with 4 ranks on 2 simulated nodes, killed with
//! SIGKILL, relaunched (with a simulated node's storage lost too), and given configurations
//! with settings Cairn maps, settings it does not support, and errors.
//!
//! Needs Open MPI (mpicc, mpirun) and `cargo build --release -p cairn-capi`. The programs'
//! tiers come from the VeloC configuration file (`scratch`, `persistent`), not from the
//! `CAIRN_TIERS_*` variables the support module sets, except where a test checks that those
//! variables win.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;
use support::*;

// ---- Building the programs --------------------------------------------------------------------

struct Progs {
    heatdis_mem: PathBuf,
    heatdis_mixed: PathBuf,
    single: PathBuf,
    groups: PathBuf,
    client: PathBuf,
}

fn build() -> Result<Progs, String> {
    let prefix = compat_prefix("veloc")?;
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/veloc");
    let bin = prefix.join("bin");
    std::fs::create_dir_all(&bin).map_err(|e| format!("mkdir {}: {e}", bin.display()))?;
    let lib = prefix.join("lib");
    let mut out = Vec::new();
    for name in ["heatdis_mem", "heatdis_mixed", "single", "groups", "client"] {
        let tmp = bin.join(format!("{name}.tmp.{}", std::process::id()));
        // As an application would build: VeloC's header and -lveloc, nothing of Cairn's (the
        // C++ client with Open MPI's C bindings only, as heat2d's C++ sibling).
        let (cc, std, file) = if name == "client" {
            ("mpicxx", "-std=c++17", format!("{name}.cpp"))
        } else {
            ("mpicc", "-std=c11", format!("{name}.c"))
        };
        let o = Command::new(cc)
            .args([
                "-O2",
                std,
                "-Wall",
                "-Wextra",
                "-Werror",
                "-DOMPI_SKIP_MPICXX",
                "-o",
            ])
            .arg(&tmp)
            .arg(src.join(file))
            .arg("-I")
            .arg(prefix.join("include"))
            .arg("-L")
            .arg(&lib)
            .arg("-lveloc")
            .arg(format!("-Wl,-rpath,{}", lib.display()))
            .output()
            .map_err(|e| format!("run mpicc: {e}"))?;
        if !o.status.success() {
            return Err(format!(
                "mpicc failed to build {name}.c:\n{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        let dest = bin.join(name);
        std::fs::rename(&tmp, &dest).map_err(|e| format!("rename: {e}"))?;
        out.push(dest);
    }
    let mut out = out.into_iter();
    Ok(Progs {
        heatdis_mem: out.next().unwrap(),
        heatdis_mixed: out.next().unwrap(),
        single: out.next().unwrap(),
        groups: out.next().unwrap(),
        client: out.next().unwrap(),
    })
}

/// The compatibility library and the programs, built once per test binary.
fn progs() -> &'static Progs {
    static PROGS: OnceLock<Result<Progs, String>> = OnceLock::new();
    match PROGS.get_or_init(build) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}

// ---- Running them -----------------------------------------------------------------------------

/// A VeloC configuration with the tiers' directories as scratch and persistent, then `extra`
/// lines; written into the tiers' directory.
fn config(tiers: &Tiers, extra: &str) -> PathBuf {
    let text = format!(
        "# written by the veloc tests\nscratch = {}\npersistent = {}\n{extra}",
        tiers.local().display(),
        tiers.global().display()
    );
    tiers.write("veloc.cfg", &text)
}

/// `prog CONFIG args...` under mpirun with `ranks` ranks (or alone), its tiers from the
/// configuration file.
fn veloc(prog: &Path, ranks: Option<usize>, cfg: &Path, args: &[&str], tiers: &Tiers) -> Command {
    let cfg = cfg.display().to_string();
    let all: Vec<&str> = std::iter::once(cfg.as_str())
        .chain(args.iter().copied())
        .collect();
    let mut cmd = command(prog, ranks, &all, tiers);
    cmd.env_remove("CAIRN_TIERS_LOCAL")
        .env_remove("CAIRN_TIERS_GLOBAL");
    cmd
}

/// What follows `prefix` on the first line of standard output that starts with it.
fn after<'a>(o: &'a Outcome, prefix: &str) -> Option<&'a str> {
    o.lines().find_map(|l| l.strip_prefix(prefix))
}

/// `heatdis: final checksum <hex>`.
fn heat_checksum(o: &Outcome) -> &str {
    after(o, "heatdis: final checksum ")
        .unwrap_or_else(|| panic!("no final checksum\n{}", o.show()))
}

/// The version of `heatdis: checkpoint v<v> done`.
fn heat_ckpt(l: &str) -> Option<i64> {
    l.strip_prefix("heatdis: checkpoint v")?
        .strip_suffix(" done")?
        .parse()
        .ok()
}

/// `mixed: rank <r> <what> ...` -> (r, the rest after `<what> `).
fn mixed_lines<'a>(o: &'a Outcome, what: &'a str) -> impl Iterator<Item = (usize, &'a str)> + 'a {
    o.lines().filter_map(move |l| {
        let (r, rest) = l.strip_prefix("mixed: rank ")?.split_once(' ')?;
        let rest = rest.strip_prefix(what)?;
        let rest = if rest.is_empty() {
            rest
        } else {
            rest.strip_prefix(' ')?
        };
        Some((r.parse().ok()?, rest))
    })
}

/// Rank -> version of `mixed: rank <r> restored v<v> memory and file ok`.
fn mixed_restored(o: &Outcome) -> BTreeMap<usize, i64> {
    mixed_lines(o, "restored")
        .filter_map(|(r, rest)| {
            let v = rest
                .strip_prefix('v')?
                .strip_suffix(" memory and file ok")?;
            Some((r, v.parse().ok()?))
        })
        .collect()
}

/// Rank -> `step <n> digest <hex>` of `mixed: rank <r> finished ...`.
fn mixed_finished(o: &Outcome) -> BTreeMap<usize, String> {
    mixed_lines(o, "finished")
        .map(|(r, rest)| (r, rest.to_string()))
        .collect()
}

/// How many lines of `text` contain `needle`.
fn count(text: &str, needle: &str) -> usize {
    text.lines().filter(|l| l.contains(needle)).count()
}

const RANKS: usize = 4;
const NODES: usize = 2;

// ---- heatdis_mem: kill -9, a lost node --------------------------------------------------------

/// An uninterrupted heatdis run and one killed (rank 2, right after its second checkpoint)
/// and relaunched, with node 1's storage lost in between if `lose_node`; both must end with
/// the same checksum.
fn heatdis_kill_and_relaunch(cfg_extra: &str, lose_node: bool) {
    let what = format!("heatdis_mem ({cfg_extra:?}, node lost: {lose_node})");
    let prog = &progs().heatdis_mem;
    let plain = Tiers::new(NODES);
    let cfg = config(&plain, cfg_extra);
    let reference = run(
        veloc(prog, Some(RANKS), &cfg, &[], &plain),
        &format!("{what}, uninterrupted"),
    );
    reference.assert_ok();
    assert!(
        reference
            .stdout
            .contains("heatdis: no checkpoint, starting fresh"),
        "{}",
        reference.show()
    );
    let expected = heat_checksum(&reference).to_string();

    let tiers = Tiers::new(NODES);
    let cfg = config(&tiers, cfg_extra);
    let mut job = spawn(
        veloc(prog, Some(RANKS), &cfg, &["--sleep-ms", "3"], &tiers),
        &format!("{what}, to be killed"),
    );
    let victim = rank_pid(job.pid(), "heatdis_mem", 2, Duration::from_secs(30))
        .unwrap_or_else(|| panic!("{what}: no rank 2 under mpirun {}", job.pid()));
    let mut seen = 0;
    job.wait_line(Duration::from_secs(60), |l| {
        seen += heat_ckpt(l).is_some() as usize;
        seen == 2
    })
    .unwrap_or_else(|| panic!("{what}: no second checkpoint; saw {:?}", job.seen));
    kill9(victim);
    let killed = job.finish(Duration::from_secs(60));
    assert!(
        !killed.status.success() && !killed.stdout.contains("final checksum"),
        "{what}: the killed run should not have finished\n{}",
        killed.show()
    );
    // Rank 0 prints a line once VELOC_Checkpoint returned: that version is restorable.
    let newest = killed.lines().filter_map(heat_ckpt).max().unwrap();
    if lose_node {
        std::fs::remove_dir_all(tiers.local().join("node1")).expect("remove node1");
    }

    let again = run(
        veloc(prog, Some(RANKS), &cfg, &[], &tiers),
        &format!("{what}, relaunched"),
    );
    again.assert_ok();
    let restarted = after(&again, "heatdis: restarted from v");
    let Some(from) = restarted.and_then(|r| r.split(' ').next()?.parse::<i64>().ok()) else {
        panic!("{what}: the relaunch did not restart\n{}", again.show())
    };
    assert!(
        from >= newest && again.stdout.contains(&format!("(iteration {from})")),
        "{what}: restarted from v{from}, but v{newest} was complete before the kill\n{}",
        again.show()
    );
    if lose_node {
        assert!(
            again.stderr.contains("from parity"),
            "{what}: node 1's parts should be rebuilt from the erasure code\n{}",
            again.show()
        );
    }
    assert_eq!(
        heat_checksum(&again),
        expected,
        "{what}: the relaunched run ends differently from the uninterrupted one\n{}",
        again.show()
    );
}

#[test]
fn heatdis_survives_kill9_of_a_rank() {
    let _mpi = mpi_lock();
    heatdis_kill_and_relaunch("mode = async\n", false);
}

#[test]
fn heatdis_survives_a_lost_node_through_erasure_coding() {
    let _mpi = mpi_lock();
    // Nothing is flushed to persistent storage: node 1's parts can only come back from the
    // erasure code (ec_interval = 0: every checkpoint).
    heatdis_kill_and_relaunch("ec_interval = 0\npersistent_interval = -1\n", true);
}

// ---- heatdis_mixed: memory and a file in one checkpoint ---------------------------------------

#[test]
fn memory_and_file_come_back_together_after_kill9_and_a_lost_node() {
    let _mpi = mpi_lock();
    let prog = &progs().heatdis_mixed;
    let extra = "persistent_interval = -1\n";
    let plain = Tiers::new(NODES);
    let reference = run(
        veloc(
            prog,
            Some(RANKS),
            &config(&plain, extra),
            &["--steps", "100"],
            &plain,
        ),
        "heatdis_mixed, uninterrupted",
    );
    reference.assert_ok();
    let expected = mixed_finished(&reference);
    assert_eq!(expected.len(), RANKS, "{}", reference.show());

    let tiers = Tiers::new(NODES);
    let cfg = config(&tiers, extra);
    let mut job = spawn(
        veloc(
            prog,
            Some(RANKS),
            &cfg,
            &["--steps", "1000", "--sleep-ms", "20"],
            &tiers,
        ),
        "heatdis_mixed, to be killed",
    );
    let victim = rank_pid(job.pid(), "heatdis_mixed", 1, Duration::from_secs(30))
        .expect("rank 1 of heatdis_mixed");
    job.wait_line(Duration::from_secs(60), |l| {
        l == "mixed: rank 1 checkpoint v15 done"
    })
    .unwrap_or_else(|| panic!("no checkpoint v15 of rank 1; saw {:?}", job.seen));
    kill9(victim);
    let killed = job.finish(Duration::from_secs(60));
    assert!(!killed.status.success(), "{}", killed.show());
    let newest = mixed_lines(&killed, "checkpoint")
        .filter_map(|(_, rest)| rest.strip_prefix('v')?.strip_suffix(" done")?.parse().ok())
        .max()
        .unwrap_or(0i64);
    std::fs::remove_dir_all(tiers.local().join("node1")).expect("remove node1");

    let again = run(
        veloc(prog, Some(RANKS), &cfg, &["--steps", "100"], &tiers),
        "heatdis_mixed, relaunched",
    );
    again.assert_ok();
    let restored = mixed_restored(&again);
    let from = restored.get(&0).copied().unwrap_or(-1);
    assert!(
        restored.len() == RANKS
            && restored.values().all(|v| *v == from)
            && (15..=newest).contains(&from),
        "every rank must restore the same version, v15..=v{newest}, memory and file\n{}",
        again.show()
    );
    assert_eq!(
        mixed_finished(&again),
        expected,
        "the relaunched run ends differently from the uninterrupted one\n{}",
        again.show()
    );
}

#[test]
fn restart_test_finds_the_newest_version_no_newer_than_needed() {
    let _mpi = mpi_lock();
    let prog = &progs().heatdis_mixed;
    let tiers = Tiers::new(NODES);
    let cfg = config(&tiers, "mode = sync\n");
    let mixed = |args: &[&str], what: &str| {
        let o = run(veloc(prog, Some(RANKS), &cfg, args, &tiers), what);
        o.assert_ok();
        o
    };

    let none = mixed(&["--probe", "0,10"], "probe before any checkpoint");
    assert!(
        none.stdout.contains("mixed: restart_test 0 = -1")
            && none.stdout.contains("mixed: restart_test 10 = -1"),
        "no version yet: VELOC_FAILURE\n{}",
        none.show()
    );
    let first = mixed(&["--steps", "30"], "v0..v30");
    assert_eq!(mixed_lines(&first, "fresh").count(), RANKS);
    let at30 = mixed_finished(&first);

    let probe = mixed(&["--probe", "0,30,29,25,24,4,5,1000"], "probe");
    for (needed, got) in [
        (0, 30),
        (30, 30),
        (29, 25),
        (25, 25),
        (24, 20),
        (4, 0),
        (5, 5),
        (1000, 30),
    ] {
        assert!(
            probe
                .stdout
                .contains(&format!("mixed: restart_test {needed} = {got}\n")),
            "VELOC_Restart_test(\"mixed\", {needed}) should be {got}\n{}",
            probe.show()
        );
    }

    // An older version than the newest, restarted on purpose, goes on bit for bit.
    let older = mixed(&["--upto", "12", "--steps", "30"], "restart from v10");
    let restored = mixed_restored(&older);
    assert!(
        restored.len() == RANKS && restored.values().all(|v| *v == 10),
        "VELOC_Restart_test(\"mixed\", 12) should give v10\n{}",
        older.show()
    );
    assert_eq!(mixed_finished(&older), at30, "{}", older.show());

    // A rank rejecting v30 makes every rank pass over it; VELOC_Restart_test(name, 29) then
    // gives v25, and every rank restores it.
    let fallback = mixed(&["--steps", "30", "--invalid-rank", "2"], "v30 rejected");
    assert_eq!(
        mixed_lines(&fallback, "rejected")
            .filter(|(_, v)| *v == "v30")
            .count(),
        RANKS,
        "{}",
        fallback.show()
    );
    let restored = mixed_restored(&fallback);
    assert!(
        restored.len() == RANKS && restored.values().all(|v| *v == 25),
        "{}",
        fallback.show()
    );
    assert_eq!(mixed_finished(&fallback), at30, "{}", fallback.show());
}

#[test]
fn recover_selective_accepts_the_selections_cairn_can_honour() {
    let _mpi = mpi_lock();
    let prog = &progs().heatdis_mixed;
    let tiers = Tiers::new(NODES);
    let cfg = config(&tiers, "");
    run(
        veloc(prog, Some(RANKS), &cfg, &["--steps", "10"], &tiers),
        "v0..v10",
    )
    .assert_ok();
    // Regions 0 (step) and 1 (a) are protected at VELOC_Restart_begin, and both are restored.
    for (mode, ok) in [
        ("some", true),
        ("rest", true),
        ("some-part", false),
        ("rest-part", false),
    ] {
        let o = run(
            veloc(
                prog,
                Some(RANKS),
                &cfg,
                &["--steps", "10", "--recover", mode],
                &tiers,
            ),
            &format!("--recover {mode}"),
        );
        o.assert_ok();
        let verdict = if ok { "ok" } else { "failed" };
        assert_eq!(
            mixed_lines(&o, "recover")
                .filter(|(_, rest)| *rest == format!("{mode} {verdict}"))
                .count(),
            RANKS,
            "VELOC_Recover_selective for {mode} should be {verdict}\n{}",
            o.show()
        );
        assert_eq!(
            count(&o.stderr, "VELOC_Recover_selective: region"),
            if ok { 0 } else { RANKS },
            "a refused selection says why, once per rank\n{}",
            o.show()
        );
    }
}

// ---- Configuration ----------------------------------------------------------------------------

#[test]
fn settings_are_mapped_or_reported_once() {
    let _mpi = mpi_lock();
    let prog = &progs().heatdis_mem;
    let tiers = Tiers::new(NODES);
    let cfg = config(
        &tiers,
        "mode = sync\nmax_versions = 2\nec_interval = 30\nwatchdog_interval = 10\n\
         axl_type = AXL_XFER_SYNC\nmeta = /nonexistent/meta\nchksum = false\ncolour = blue\n",
    );
    let o = run(
        veloc(prog, Some(RANKS), &cfg, &["--iters", "200"], &tiers),
        "heatdis with settings Cairn lacks",
    );
    o.assert_ok();
    for key in [
        "watchdog_interval = 10",
        "axl_type = AXL_XFER_SYNC",
        "meta = /nonexistent/meta",
        "chksum = false",
        "colour = blue",
        "ec_interval = 30",
    ] {
        assert_eq!(
            count(&o.stderr, key),
            1,
            "{key} should be reported exactly once (by rank 0)\n{}",
            o.show()
        );
    }
    assert_eq!(
        count(&o.stderr, "veloc:"),
        6,
        "nothing else should be reported\n{}",
        o.show()
    );
    // scratch and persistent are the tiers; max_versions = 2 keeps two versions on each.
    let versions = |dir: PathBuf| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('v'))
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        versions(tiers.global().join("heatdis")),
        ["v100", "v150"],
        "{}",
        o.show()
    );
    for node in 0..NODES {
        assert_eq!(
            versions(tiers.local().join(format!("node{node}/heatdis"))),
            ["v100", "v150"]
        );
    }
}

#[test]
fn a_missing_or_broken_configuration_fails_without_aborting() {
    let _mpi = mpi_lock();
    let prog = &progs().heatdis_mem;
    let tiers = Tiers::new(NODES);
    let missing = tiers.path().join("no-such.cfg");
    let scratch_only = tiers.write("scratch-only.cfg", "scratch = /tmp\n");
    let bad_mode = tiers.write(
        "bad-mode.cfg",
        &format!(
            "scratch = {}\npersistent = {}\n\nmode = fast\n",
            tiers.local().display(),
            tiers.global().display()
        ),
    );
    let no_equals = tiers.write("no-equals.cfg", "scratch /tmp\n");
    for (cfg, message) in [
        (
            &missing,
            format!(
                "cannot read the configuration file {}: No such file or directory",
                missing.display()
            ),
        ),
        (
            &scratch_only,
            "persistent is not set (the shared checkpoint directory is mandatory)".to_string(),
        ),
        (
            &bad_mode,
            format!(
                "{}:4: mode = fast (expected sync or async)",
                bad_mode.display()
            ),
        ),
        (
            &no_equals,
            format!(
                "{}:1: \"scratch /tmp\" is not a `key = value` line",
                no_equals.display()
            ),
        ),
    ] {
        let o = run(
            veloc(prog, Some(RANKS), cfg, &[], &tiers),
            &format!("heatdis with {}", cfg.display()),
        );
        o.assert_exit5();
        assert!(
            o.stdout.contains("heatdis: VELOC_Init failed"),
            "VELOC_Init should return VELOC_FAILURE\n{}",
            o.show()
        );
        assert_eq!(
            count(&o.stderr, &message),
            1,
            "the message should be printed once, by rank 0\n{}",
            o.show()
        );
    }
    assert!(
        !tiers.local().exists() && !tiers.global().exists(),
        "nothing should be stored"
    );
}

#[test]
fn cairn_variables_win_and_one_node_goes_without_erasure_coding() {
    let _mpi = mpi_lock();
    let prog = &progs().heatdis_mem;
    let tiers = Tiers::new(0);
    let elsewhere = tiers.path().join("scratch-from-the-file");
    let cfg = tiers.write(
        "veloc.cfg",
        &format!(
            "scratch = {}\npersistent = {}\nec_interval = 0\n",
            elsewhere.display(),
            tiers.global().display()
        ),
    );
    // CAIRN_TIERS_LOCAL (set by the tiers) is kept: it wins over scratch.
    let mut cmd = command(
        prog,
        Some(2),
        &[cfg.to_str().unwrap(), "--iters", "100"],
        &tiers,
    );
    cmd.env_remove("CAIRN_TIERS_GLOBAL");
    let o = run(cmd, "heatdis on one node");
    o.assert_ok();
    assert!(
        tiers.local().join("node0/heatdis").is_dir() && !elsewhere.exists(),
        "CAIRN_TIERS_LOCAL should be the node-local tier\n{}",
        o.show()
    );
    assert_eq!(
        count(
            &o.stderr,
            "veloc: ec_interval: erasure coding is off for this job"
        ),
        1,
        "two ranks on one node cannot be erasure-coded; rank 0 says so once\n{}",
        o.show()
    );
}

// ---- VELOC_Init_single ------------------------------------------------------------------------

#[test]
fn single_processes_checkpoint_and_restart_on_their_own() {
    let prog = &progs().single;
    let tiers = Tiers::new(0);
    let cfg = config(&tiers, "");
    let single = |id: &str, steps: &str| {
        let o = run(
            veloc(prog, None, &cfg, &[id, "--steps", steps], &tiers),
            &format!("single {id} to step {steps}"),
        );
        o.assert_ok();
        assert!(!o.stderr.contains("veloc:"), "{}", o.show());
        o
    };
    single("0", "10");
    single("1", "20");
    let zero = single("0", "30");
    let one = single("1", "30");
    assert!(
        zero.stdout.contains("single: id 0 restored v10\n")
            && one.stdout.contains("single: id 1 restored v20\n"),
        "each process restarts from its own newest version\n{}\n{}",
        zero.show(),
        one.show()
    );
    let fresh = single("7", "30");
    assert!(
        fresh.stdout.contains("single: id 7 fresh\n"),
        "{}",
        fresh.show()
    );
}

// ---- The API of VeloC's later releases --------------------------------------------------------

#[test]
fn region_groups_selections_sizes_cleanup_and_one_file_routing() {
    let _mpi = mpi_lock();
    let prog = &progs().groups;
    let tiers = Tiers::new(NODES);
    let cfg = config(&tiers, "mode = async\n");
    let w = run(
        veloc(prog, Some(RANKS), &cfg, &["write"], &tiers),
        "groups write",
    );
    w.assert_ok();
    for step in ["groups", "selective", "file", "cleanup", "all"] {
        assert!(
            w.stdout.contains(&format!("groups: {step} ok")),
            "write: {step}\n{}",
            w.show()
        );
    }
    assert_eq!(
        count(&w.stderr, "VELOC_Checkpoint_selective: "),
        RANKS,
        "{}",
        w.show()
    );
    // VELOC_Cleanup removed gamma's node-local copies (it is durable) and nothing else.
    let local_gamma: Vec<_> = (0..NODES)
        .map(|n| tiers.local().join(format!("node{n}/gamma/v1")))
        .filter(|p| p.exists())
        .collect();
    assert!(local_gamma.is_empty(), "{local_gamma:?}\n{}", w.show());
    assert!(tiers.global().join("gamma/v1/manifest.json").exists());
    assert!(tiers.local().join("node0/alpha/v2/manifest.json").exists());

    let r = run(
        veloc(prog, Some(RANKS), &cfg, &["read"], &tiers),
        "groups read",
    );
    r.assert_ok();
    for step in ["recover_size", "partial", "default", "file", "all"] {
        assert!(
            r.stdout.contains(&format!("groups: {step} ok")),
            "read: {step}\n{}",
            r.show()
        );
    }
    assert_eq!(
        count(&r.stderr, "its one file"),
        RANKS,
        "the one-file routing is noted once per process\n{}",
        r.show()
    );
}

#[test]
fn the_cpp_client_restores_raw_and_serialized_regions() {
    let prog = &progs().client;
    let tiers = Tiers::new(0);
    let cfg = config(&tiers, "mode = async\n");
    let w = run(veloc(prog, None, &cfg, &["write"], &tiers), "client write");
    w.assert_ok();
    for v in 1..=3 {
        assert!(
            w.stdout.contains(&format!("client: observed state v{v}")),
            "{}",
            w.show()
        );
    }
    let r = run(veloc(prog, None, &cfg, &["read"], &tiers), "client read");
    r.assert_ok();
    assert!(r.stdout.contains("client: ok"), "{}", r.show());
    assert!(
        r.stderr.contains("target_rank 3"),
        "another rank's restart is refused by name\n{}",
        r.show()
    );
}
