//! FTI's API over Cairn (`native/compat/fti`: `fti.h`, `libfti.so`) with real MPI and real
//! processes. `native/compat/build.sh` installs the library into a prefix holding a copy of
//! the freshly built libcairn, and the programs in `tests/fti/` are compiled against it as an
//! FTI application would be: `heatdis.c` (the heat-distribution loop of FTI's examples) is
//! killed with SIGKILL under mpirun (4 ranks, 2 simulated nodes) at every checkpoint level and
//! with FTI_Snapshot, a node's storage is lost where the level has redundancy, and the
//! relaunch must recover and end bit-exactly as an uninterrupted run; `types.c` restores every
//! FTI type bit for bit and has FTI's errors reported without stopping. The configuration
//! file's settings must reach Cairn, the ones Cairn has no equivalent for must be reported
//! once, and a bad file must fail FTI_Init with a message, never an abort.
//!
//! Needs Open MPI (mpicc, mpicxx, mpirun) and `cargo build --release -p cairn-capi`.

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;
use support::*;

const RANKS: usize = 4;
const NODES: usize = 2;
/// The heat run of every test: 400 iterations, a checkpoint after every 50th.
const HEAT: [&str; 6] = ["--n", "128", "--iters", "400", "--every", "50"];

// ---- Building the programs --------------------------------------------------------------------

struct Programs {
    heatdis: PathBuf,
    types: PathBuf,
    vars: PathBuf,
    fortran: PathBuf,
}

fn compile(
    compiler: &str,
    flags: &[&str],
    src: &Path,
    out: &Path,
    prefix: &Path,
) -> Result<(), String> {
    let lib = prefix.join("lib");
    let o = Command::new(compiler)
        .args(flags)
        .args(["-Wall", "-Wextra", "-Werror", "-o"])
        .arg(out)
        .arg(src)
        .arg("-I")
        .arg(prefix.join("include"))
        .arg("-L")
        .arg(&lib)
        .args(["-lfti", "-lcairn"])
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .output()
        .map_err(|e| format!("run {compiler}: {e}"))?;
    if o.status.success() {
        return Ok(());
    }
    Err(format!(
        "{compiler} failed to build {}:\n{}{}",
        src.display(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    ))
}

fn build() -> Result<Programs, String> {
    let prefix = compat_prefix("fti")?;
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fti");
    let bin = prefix.join("bin");
    std::fs::create_dir_all(&bin).map_err(|e| format!("mkdir {}: {e}", bin.display()))?;
    for name in ["heatdis", "types", "vars"] {
        // Built under a temporary name, so a concurrent build never runs half a file.
        let tmp = bin.join(format!("{name}.tmp.{}", std::process::id()));
        compile(
            "mpicc",
            &["-O2", "-std=c11"],
            &src.join(format!("{name}.c")),
            &tmp,
            &prefix,
        )?;
        std::fs::rename(&tmp, bin.join(name)).map_err(|e| format!("rename: {e}"))?;
    }
    // FTI's Fortran module (fti.mod), as a Fortran application uses it.
    let tmp = bin.join(format!("fortran.tmp.{}", std::process::id()));
    compile("mpif90", &["-O2"], &src.join("fortran.f90"), &tmp, &prefix)?;
    std::fs::rename(&tmp, bin.join("fortran")).map_err(|e| format!("rename: {e}"))?;
    // fti.h must also compile as C++ (Open MPI's deprecated C++ bindings are left out).
    compile(
        "mpicxx",
        &["-std=c++11", "-DOMPI_SKIP_MPICXX", "-fsyntax-only"],
        &src.join("header.cpp"),
        Path::new("/dev/null"),
        &prefix,
    )?;
    Ok(Programs {
        heatdis: bin.join("heatdis"),
        types: bin.join("types"),
        vars: bin.join("vars"),
        fortran: bin.join("fortran"),
    })
}

fn programs() -> &'static Programs {
    static PROGRAMS: OnceLock<Result<Programs, String>> = OnceLock::new();
    match PROGRAMS.get_or_init(build) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}

// ---- Running heatdis --------------------------------------------------------------------------

/// An FTI configuration file: `[basic]` with Head = 0 and Node_size = 2, then `body`.
fn config(tiers: &Tiers, body: &str) -> String {
    let text = format!("[basic]\nHead = 0\nNode_size = 2\n{body}");
    tiers.write("fti.cfg", &text).display().to_string()
}

/// The heat run checkpointing at `level` (0: cycling through 1 to 4).
fn at_level(level: &str) -> Vec<&str> {
    [&HEAT[..], &["--level", level]].concat()
}

fn heatdis(cfg: &str, args: &[&str], tiers: &Tiers) -> Command {
    let all: Vec<&str> = std::iter::once(cfg).chain(args.iter().copied()).collect();
    command(&programs().heatdis, Some(RANKS), &all, tiers)
}

/// `heatdis: final checksum <hex>`.
fn checksum(o: &Outcome) -> String {
    o.lines()
        .find_map(|l| l.strip_prefix("heatdis: final checksum "))
        .unwrap_or_else(|| panic!("no final checksum\n{}", o.show()))
        .to_string()
}

/// The iteration of `heatdis: iteration <i> checkpoint level <l>` or `... <i> snapshot`.
fn checkpoint_line(l: &str) -> Option<i64> {
    let rest = l.strip_prefix("heatdis: iteration ")?;
    let (i, what) = rest.split_once(' ')?;
    (what.starts_with("checkpoint level ") || what == "snapshot")
        .then(|| i.parse().ok())
        .flatten()
}

/// `heatdis: recovered at iteration <i>`.
fn recovered(o: &Outcome) -> Option<i64> {
    o.lines()
        .find_map(|l| l.strip_prefix("heatdis: recovered at iteration "))
        .and_then(|i| i.parse().ok())
}

fn status(o: &Outcome) -> i64 {
    o.lines()
        .find_map(|l| l.strip_prefix("heatdis: status "))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line\n{}", o.show()))
}

/// The checksum of an uninterrupted run: the same whatever the checkpoints.
fn reference() -> &'static str {
    static SUM: OnceLock<String> = OnceLock::new();
    SUM.get_or_init(|| {
        let tiers = Tiers::new(NODES);
        let cfg = config(&tiers, "");
        let o = run(heatdis(&cfg, &HEAT, &tiers), "heatdis, uninterrupted");
        o.assert_ok();
        assert_eq!(status(&o), 0, "{}", o.show());
        checksum(&o)
    })
}

/// Start heatdis, kill rank 2 (on node 1) with SIGKILL once `lines` checkpoints were reported,
/// delete the node-local storage of the nodes in `lose`, relaunch with the same arguments and
/// check that it recovers a checkpoint at least as new as the last one reported before the
/// kill (one reported later is fine too) and ends as an uninterrupted run. Returns the
/// relaunch.
fn kill_and_recover(
    what: &str,
    tiers: &Tiers,
    cfg: &str,
    args: &[&str],
    lines: usize,
    lose: &[usize],
) -> Outcome {
    let expected = reference();
    let mut slow = args.to_vec();
    if !slow.contains(&"--sleep-ms") {
        slow.extend(["--sleep-ms", "3"]);
    }
    let mut job = spawn(heatdis(cfg, &slow, tiers), &format!("{what}, to be killed"));
    // Found first, so that the kill follows the checkpoint line as closely as possible.
    let victim = rank_pid(job.pid(), "heatdis", 2, Duration::from_secs(30))
        .unwrap_or_else(|| panic!("{what}: no process for rank 2 under mpirun {}", job.pid()));
    let mut seen = 0;
    let last = job.wait_line(Duration::from_secs(90), |l| {
        seen += checkpoint_line(l).is_some() as usize;
        seen == lines
    });
    let last =
        last.unwrap_or_else(|| panic!("{what}: no checkpoint line {lines}; saw {:?}", job.seen));
    kill9(victim);
    let newest_before = checkpoint_line(&last).unwrap();
    let killed = job.finish(Duration::from_secs(60));
    assert!(
        !killed.status.success() && !killed.stdout.contains("final checksum"),
        "{what}: the killed run should not have finished\n{}",
        killed.show()
    );
    // Rank 0 reports a checkpoint only once FTI_Checkpoint returned, complete on every rank.
    let reported: BTreeSet<i64> = killed.lines().filter_map(checkpoint_line).collect();
    for n in lose {
        std::fs::remove_dir_all(tiers.local().join(format!("node{n}")))
            .unwrap_or_else(|e| panic!("{what}: remove node{n}: {e}"));
    }

    let again = run(heatdis(cfg, args, tiers), &format!("{what}, relaunched"));
    again.assert_ok();
    assert_eq!(
        status(&again),
        1,
        "{what}: FTI_Status after a failure\n{}",
        again.show()
    );
    let from = recovered(&again)
        .unwrap_or_else(|| panic!("{what}: the relaunch did not recover\n{}", again.show()));
    assert!(
        reported.contains(&from) && from >= newest_before,
        "{what}: recovered iteration {from}; before the kill {newest_before} was the newest reported, {reported:?} in all\n{}\n{}",
        killed.show(),
        again.show()
    );
    assert_eq!(
        checksum(&again),
        expected,
        "{what}: the relaunch ends differently from an uninterrupted run\n{}",
        again.show()
    );
    again
}

// ---- Kill, lose, recover ----------------------------------------------------------------------

#[test]
fn level_1_recovers_after_kill9() {
    let _mpi = mpi_lock();
    let tiers = Tiers::new(NODES);
    let cfg = config(&tiers, "Ckpt_L1 = 0\n");
    let again = kill_and_recover("level 1", &tiers, &cfg, &at_level("1"), 2, &[]);
    assert!(!again.stderr.contains("made durable"), "{}", again.show());
}

/// Levels 2 and 3 with their scheme: rank 2 killed and node 1 lost after `lines` checkpoints;
/// the relaunch rebuilds node 1 from redundancy, with nothing on the global tier.
fn rebuilds_from_redundancy(level: &str, body: &str, lines: usize) {
    let tiers = Tiers::new(NODES);
    let cfg = config(&tiers, body);
    let what = format!("level {level}");
    let again = kill_and_recover(&what, &tiers, &cfg, &at_level(level), lines, &[1]);
    assert!(
        again.stderr.contains("rebuil"),
        "{what}: the relaunch should say what it rebuilt\n{}",
        again.show()
    );
    assert!(
        !tiers.global().join("fti").exists(),
        "{what}: nothing should reach the global tier"
    );
}

#[test]
fn level_2_rebuilds_a_lost_node_from_partner_copies() {
    let _mpi = mpi_lock();
    // A level-2 interval selects the partner scheme (FTI_Snapshot is not used here).
    rebuilds_from_redundancy("2", "Ckpt_L2 = 5\n", 3);
}

#[test]
fn level_3_rebuilds_a_lost_node_with_reed_solomon() {
    let _mpi = mpi_lock();
    rebuilds_from_redundancy("3", "Ckpt_L3 = 7\nGroup_size = 2\n", 2);
}

#[test]
fn level_4_recovers_from_the_global_tier_when_every_node_is_lost() {
    let _mpi = mpi_lock();
    let tiers = Tiers::new(NODES);
    let cfg = config(&tiers, "");
    kill_and_recover("level 4", &tiers, &cfg, &at_level("4"), 2, &[0, 1]);
}

#[test]
fn level_2_without_a_schedule_gets_partner_copies() {
    let _mpi = mpi_lock();
    // Ckpt_L2 and Ckpt_L3 are 0: FTI_Checkpoint(id, 2) still stores partner copies, and a
    // lost node is rebuilt from them, with nothing on the global tier.
    rebuilds_from_redundancy("2", "Ckpt_L2 = 0\nCkpt_L3 = 0\n", 3);
}

#[test]
fn level_2_on_one_failure_domain_is_made_durable_and_survives_losing_it() {
    let _mpi = mpi_lock();
    // One node: no partner to copy to, so level 2 goes to the global tier.
    let tiers = Tiers::new(1);
    let cfg = config(&tiers, "Ckpt_L2 = 0\nCkpt_L3 = 0\n");
    let args = at_level("2");
    let reference = run(
        heatdis(&cfg, &args, &Tiers::new(1)),
        "level 2 promoted, uninterrupted",
    );
    reference.assert_ok();
    let notes = reference
        .stderr
        .matches("level 2 checkpoints are made durable")
        .count();
    assert_eq!(
        notes,
        1,
        "the promotion should be reported once\n{}",
        reference.show()
    );
    kill_and_recover("level 2 promoted", &tiers, &cfg, &args, 2, &[0]);
}

#[test]
fn mixed_levels_recover_after_a_lost_node() {
    let _mpi = mpi_lock();
    let tiers = Tiers::new(NODES);
    let cfg = config(&tiers, "Ckpt_L2 = 5\nCkpt_L4 = 11\n");
    // --level 0 cycles 1, 2, 3, 4: the fifth checkpoint (iteration 250) is level 1 again.
    kill_and_recover("levels 1 to 4", &tiers, &cfg, &at_level("0"), 5, &[1]);
}

#[test]
fn snapshot_checkpoints_on_its_intervals_and_recovers() {
    let _mpi = mpi_lock();
    let tiers = Tiers::new(NODES);
    // Fractions of a minute: level 1 every 0.3 s, level 2 (partner) every 0.6 s, level 4
    // every 1.2 s, on a run of about 4 s.
    let cfg = config(
        &tiers,
        "Ckpt_L1 = 0.005\nCkpt_L2 = 0.01\nCkpt_L3 = 0\nCkpt_L4 = 0.02\n",
    );
    let args = [
        "--n",
        "128",
        "--iters",
        "400",
        "--snapshot",
        "--sleep-ms",
        "10",
    ];
    let again = kill_and_recover("FTI_Snapshot", &tiers, &cfg, &args, 3, &[1]);
    assert!(
        again.lines().filter_map(checkpoint_line).count() >= 2,
        "the relaunch should take snapshots too\n{}",
        again.show()
    );
    assert!(
        tiers.global().join("fti").exists(),
        "level 4 snapshots should reach the global tier"
    );
}

// ---- The end of a run -------------------------------------------------------------------------

#[test]
fn a_finished_run_starts_afresh_unless_it_kept_its_last_checkpoint() {
    let _mpi = mpi_lock();
    let expected = reference();
    let args = at_level("1");
    for (keep, want) in [(0, 0), (1, 2)] {
        let tiers = Tiers::new(NODES);
        let cfg = config(&tiers, &format!("Keep_last_ckpt = {keep}\n"));
        let first = run(heatdis(&cfg, &args, &tiers), "first run");
        first.assert_ok();
        // As FTI does, a finished run leaves its checkpoints only with Keep_last_ckpt.
        let stored = |dir: PathBuf| -> usize {
            std::fs::read_dir(dir)
                .map(|d| {
                    d.flatten()
                        .filter(|e| e.file_name().to_string_lossy().starts_with('v'))
                        .count()
                })
                .unwrap_or(0)
        };
        let left: usize = (0..NODES)
            .map(|n| stored(tiers.local().join(format!("node{n}")).join("fti")))
            .sum::<usize>()
            + stored(tiers.global().join("fti"));
        assert_eq!(
            left > 0,
            keep == 1,
            "{left} versions left\n{}",
            first.show()
        );
        let second = run(
            heatdis(&cfg, &args, &tiers),
            &format!("run after a finished one, Keep_last_ckpt = {keep}"),
        );
        second.assert_ok();
        assert_eq!(status(&second), want, "{}", second.show());
        assert_eq!(checksum(&second), expected, "{}", second.show());
        match keep {
            0 => assert_eq!(recovered(&second), None, "{}", second.show()),
            _ => assert_eq!(recovered(&second), Some(350), "{}", second.show()),
        }
        if keep == 0 {
            // A third run killed after its first checkpoint recovers that one.
            kill_and_recover("after a finished run", &tiers, &cfg, &args, 1, &[]);
        }
    }
}

// ---- Types and errors -------------------------------------------------------------------------

#[test]
fn every_type_is_restored_bit_for_bit_and_errors_do_not_stop_the_program() {
    let _mpi = mpi_lock();
    for level in ["1", "2", "4"] {
        let tiers = Tiers::new(NODES);
        let cfg = config(&tiers, "Ckpt_L2 = 3\nKeep_last_ckpt = 1\n");
        let types = |what: &str| {
            let o = run(
                command(
                    &programs().types,
                    Some(RANKS),
                    &[&cfg, "--level", level],
                    &tiers,
                ),
                what,
            );
            o.assert_ok();
            assert!(o.stdout.contains("types: errors ok"), "{}", o.show());
            o
        };
        let first = types(&format!("types, level {level}"));
        assert!(
            first
                .stdout
                .contains("types: status 0\ntypes: checkpointed"),
            "{}",
            first.show()
        );
        let second = types(&format!("types after level {level}"));
        assert!(
            second
                .stdout
                .contains("types: status 2\ntypes: recovered ok")
                && !second.stdout.contains("MISMATCH"),
            "{}",
            second.show()
        );
        // Every refused call said why, and each rank said it once.
        for needle in [
            "FTI_Protect(id 0): call FTI_Init first",
            "unknown type 12345",
            "the count -1 is negative",
            "level 10 is not one of FTI_L1 ... FTI_L4_H5_SINGLE",
            "a type needs a size of at least 1 byte",
        ] {
            assert_eq!(
                first.stderr.matches(needle).count(),
                RANKS,
                "{needle:?}\n{}",
                first.show()
            );
        }
        assert!(
            first.stderr.contains("there is no checkpoint to recover"),
            "{}",
            first.show()
        );
        assert!(
            !second.stderr.contains("there is no checkpoint to recover"),
            "{}",
            second.show()
        );
    }
}

// ---- The configuration file -------------------------------------------------------------------

/// Every key of an FTI configuration file; the ones Cairn has no equivalent for are listed in
/// UNSUPPORTED.
const FULL: &str = "\
; FTI configuration, as FTI's examples ship it
[basic]
Head                = 0
Node_size           = 2
Ckpt_dir            = @/fti-local
Glbl_dir            = @/fti-global
Meta_dir            = @/fti-meta
Ckpt_L1             = 3
Ckpt_L2             = 5
Ckpt_L3             = 0
Ckpt_L4             = 11
Inline_L2           = 1
Inline_L3           = 1
Inline_L4           = 1
Keep_last_ckpt      = 0
Keep_L4_ckpt        = 0
Group_size          = 2
Verbosity           = 3
Max_sync_intv       = 0      ; FTI's default (512)
Ckpt_io             = 1
Enable_staging      = 0
Enable_dcp          = 0
Dcp_mode            = 0
Dcp_block_size      = 16384
Dcp_stack_size      = 5

[restart]
Failure             = 0
Exec_ID             = 2024-01-01_00-00-00

[injection]
Rank                = 0
Number              = 0
Position            = 0
Frequency           = 0

[advanced]
Block_size          = 1024   ; KB
Transfer_size       = 16
General_tag         = 2612
Ckpt_tag            = 711
Stage_tag           = 406
Final_tag           = 3107
Local_test          = 1
Lustre_striping_unit = 4194304
Bogus_key           = 7
";

const UNSUPPORTED: [&str; 16] = [
    "Meta_dir",
    "Dcp_mode",
    "Dcp_stack_size",
    "Exec_ID",
    "[injection] Rank",
    "[injection] Number",
    "[injection] Position",
    "[injection] Frequency",
    "Block_size",
    "General_tag",
    "Ckpt_tag",
    "Stage_tag",
    "Final_tag",
    "Lustre_striping_unit",
    "Bogus_key",
    "Inline_L4 = 0",
];

#[test]
fn configuration_settings_reach_cairn_and_the_rest_is_reported_once() {
    let _mpi = mpi_lock();
    let tiers = Tiers::new(NODES);
    let root = tiers.path().display().to_string();
    // The same file with one supported key set to a value Cairn does not have (Inline_L4 = 0).
    let text = FULL
        .replace('@', &root)
        .replace("Inline_L4           = 1", "Inline_L4 = 0");
    let cfg = tiers.write("fti.cfg", &text).display().to_string();
    // Cairn's own variables would win over Ckpt_dir, Glbl_dir and Local_test: leave them out.
    let mut cmd = heatdis(&cfg, &at_level("4"), &tiers);
    cmd.env_remove("CAIRN_TIERS_LOCAL")
        .env_remove("CAIRN_TIERS_GLOBAL")
        .env_remove("CAIRN_TOPOLOGY_SIM_NODES");
    let o = run(cmd, "heatdis with a full FTI configuration");
    o.assert_ok();
    assert_eq!(checksum(&o), reference(), "{}", o.show());
    for key in UNSUPPORTED {
        let lines: Vec<&str> = o
            .stderr
            .lines()
            .filter(|l| l.starts_with("fti: ") && l.contains(key))
            .collect();
        assert_eq!(
            lines.len(),
            1,
            "{key} should be reported exactly once\n{}",
            o.show()
        );
        assert!(lines[0].contains("ignored"), "{}", lines[0]);
    }
    for key in [
        "Head",
        "Node_size",
        "Ckpt_dir",
        "Glbl_dir",
        "Ckpt_L",
        "Inline_L2",
        "Keep_",
        "Group_size",
        "Verbosity",
        "Max_sync",
        "Ckpt_io",
        "Enable_",
        "Dcp_block",
        "Transfer_size",
        "Local_test",
        "Failure",
    ] {
        assert!(
            !o.stderr
                .lines()
                .any(|l| l.starts_with("fti: ") && l.contains(&format!("] {key}"))),
            "{key} has a Cairn equivalent and should not be reported\n{}",
            o.show()
        );
    }
    // Ckpt_dir and Glbl_dir are the tiers; Local_test with Node_size = 2 made two nodes.
    let local = tiers.path().join("fti-local");
    for n in 0..NODES {
        assert!(
            local.join(format!("node{n}/fti")).is_dir(),
            "no {}/node{n}/fti",
            local.display()
        );
    }
    let global = tiers.path().join("fti-global/fti");
    assert!(global.is_dir(), "level 4 should have reached Glbl_dir");
    assert!(
        !tiers.local().exists() && !tiers.global().exists(),
        "the default tiers should be unused"
    );
    // Keep_L4_ckpt = 0 and Keep_last_ckpt = 0: as FTI does, the finished run deleted its
    // checkpoints, from the global tier too.
    let kept = std::fs::read_dir(&global).unwrap().count();
    assert_eq!(kept, 0, "a finished run's level-4 checkpoints are deleted");
}

#[test]
fn cairn_variables_win_over_the_configuration_file() {
    let _mpi = mpi_lock();
    let tiers = Tiers::new(NODES);
    let root = tiers.path().display().to_string();
    let cfg = config(
        &tiers,
        &format!("Ckpt_dir = {root}/fti-local\nGlbl_dir = {root}/fti-global\n"),
    );
    let o = run(
        heatdis(&cfg, &at_level("4"), &tiers),
        "heatdis with CAIRN_TIERS_*",
    );
    o.assert_ok();
    assert!(tiers.local().join("node1/fti").is_dir() && tiers.global().join("fti").is_dir());
    assert!(!tiers.path().join("fti-local").exists() && !tiers.path().join("fti-global").exists());
}

/// heatdis must leave with its own exit code 5 (FTI_Init returned FTI_NSCS) after exactly one
/// `fti: rank <r>: FTI_Init: ...` line containing every needle, never an abort.
fn init_fails(tiers: &Tiers, cfg: &str, needles: &[&str], what: &str) {
    let o = run(heatdis(cfg, &HEAT, tiers), what);
    o.assert_exit5();
    let lines: Vec<&str> = o
        .stderr
        .lines()
        .filter(|l| l.starts_with("fti: rank ") && l.contains(": FTI_Init: "))
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "{what}: one rank should say why\n{}",
        o.show()
    );
    for n in needles {
        assert!(lines[0].contains(n), "{what}: {n:?} missing\n{}", o.show());
    }
    assert_eq!(
        o.stderr.matches("FTI_Init failed").count(),
        RANKS,
        "{what}: every rank should see FTI_Init fail\n{}",
        o.show()
    );
}

#[test]
fn a_bad_configuration_file_fails_fti_init_with_a_message() {
    let _mpi = mpi_lock();
    let tiers = Tiers::new(NODES);
    let missing = tiers.path().join("nowhere.cfg").display().to_string();
    init_fails(
        &tiers,
        &missing,
        &[
            "cannot open the FTI configuration file",
            &missing,
            "No such file",
        ],
        "missing file",
    );
    let dir = tiers.path().display().to_string();
    init_fails(
        &tiers,
        &dir,
        &["cannot read the FTI configuration file", &dir],
        "a directory",
    );
    let cases = [
        (
            "[basic\nCkpt_L1 = 1\n",
            "syntax error: expected [section]",
            "unclosed section",
        ),
        (
            "Ckpt_L1 = 1\nthis is not a setting\n",
            "fti.cfg:5: syntax error",
            "a line without =",
        ),
        (
            "Ckpt_L1 = soon\n",
            "[basic] Ckpt_L1 = soon: expected minutes >= 0",
            "a bad interval",
        ),
        (
            "Max_sync_intv = -1\n",
            "Max_sync_intv = -1: expected a whole number from 0 to",
            "a negative synchronisation interval",
        ),
        (
            "Keep_last_ckpt = 2\n",
            "Keep_last_ckpt = 2: expected a whole number from 0 to 1",
            "a bad flag",
        ),
        (
            "Enable_dcp = 1\nDcp_block_size = 100\n",
            "Dcp_block_size = 100, as Cairn's reduction.block",
            "a block Cairn refuses",
        ),
        (
            "Ckpt_dir = \"unclosed\n",
            "syntax error",
            "an unclosed quote",
        ),
    ];
    for (body, needle, what) in cases {
        let cfg = config(&tiers, body);
        init_fails(&tiers, &cfg, &[needle], what);
    }
    // A scheme the job cannot have: partner copies on one node.
    let mut one = Tiers::new(0);
    one.set("CAIRN_TOPOLOGY_SIM_NODES", "1");
    let cfg = config(&one, "Ckpt_L2 = 5\n");
    init_fails(
        &one,
        &cfg,
        &["scheme partner", "failure domains"],
        "partner on one node",
    );
}

// ---- Variables by name and size, iCP, staging, [restart] Failure ------------------------------

/// `[restart] failure` as the file says now.
fn failure_in(path: &str) -> Option<i64> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut section = String::new();
    for line in text.lines() {
        let l = line.trim();
        if l.starts_with('[') {
            section = l.trim_matches(|c| c == '[' || c == ']').to_lowercase();
        } else if let Some((k, v)) = l.split_once('=') {
            if section == "restart" && k.trim().eq_ignore_ascii_case("failure") {
                return v.trim().parse().ok();
            }
        }
    }
    None
}

#[test]
fn variables_by_name_size_and_one_by_one_icp_staging_and_the_failure_field() {
    let _mpi = mpi_lock();
    let prog = &programs().vars;
    let tiers = Tiers::new(NODES);
    // FTI's own test template's values: every one is taken or reported, none fails FTI_Init.
    let cfg = config(
        &tiers,
        "Ckpt_dir = local\nGlbl_dir = global\nckpt_l1 = 0\nmax_sync_intv = 0\nVerbosity = 2\n\
         enable_dcp = 0\ndcp_block_size = -1\nDcp_L4 = 0\nh5_single_file_dir =\n\
         h5_single_file_enable = 0\n[restart]\nfailure = 0\nexec_id = NULL\n\
         [advanced]\nfast_forward = 1\nlustre_striping_factor = -1\n",
    );
    let run_vars = |mode: &str| {
        let mut c = command(prog, Some(RANKS), &[&cfg, mode], &tiers);
        c.env_remove("CAIRN_TIERS_LOCAL")
            .env_remove("CAIRN_TIERS_GLOBAL");
        run(c, &format!("vars {mode}"))
    };
    let first = run_vars("first");
    first.assert_ok();
    for step in ["getconfig", "icp", "staging"] {
        assert!(
            first.stdout.contains(&format!("vars: {step} ok")),
            "{}",
            first.show()
        );
    }
    assert_eq!(
        failure_in(&cfg),
        Some(1),
        "a checkpoint exists: failure = 1"
    );
    for r in 0..RANKS {
        let staged = std::fs::read_to_string(tiers.path().join(format!("staged.{r}"))).unwrap();
        assert_eq!(staged, format!("rank {r}\n"));
    }

    let second = run_vars("second");
    second.assert_ok();
    assert!(
        second.stdout.contains("vars: recovered ok"),
        "{}",
        second.show()
    );
    assert!(
        second.stdout.contains("vars: same run ok"),
        "{}",
        second.show()
    );
    // FTI's information lines at Verbosity 2, once (rank 0), as FTI prints them.
    let says = |o: &Outcome, line: &str| {
        o.stdout
            .matches(&format!("[ FTI  Information ] : {line}"))
            .count()
    };
    assert_eq!(
        says(&first, "Variable ID 1 to protect (Stored in CPU)"),
        1,
        "{}",
        first.show()
    );
    // FTI_Init and FTI_Init again each find a checkpoint.
    assert_eq!(
        says(&second, "This is a restart. The execution ID is: NULL"),
        2,
        "{}",
        second.show()
    );
    assert_eq!(says(&second, "Ckpt. ID 9 (L1)"), 1, "{}", second.show());
    assert_eq!(says(&second, "Ckpt. ID 10 (L4)"), 1, "{}", second.show());
    assert_eq!(failure_in(&cfg), Some(0), "a finished run: failure = 0");

    // The file says a restart is expected, and nothing is stored: FTI_NREC, not a fresh start.
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("failure = 0", "failure = 1");
    std::fs::write(&cfg, text).unwrap();
    let none = run_vars("none");
    none.assert_ok();
    assert!(none.stdout.contains("vars: nrec ok"), "{}", none.show());
    assert!(
        none.stderr.contains("says a restart is expected"),
        "{}",
        none.show()
    );
}

#[test]
fn the_fortran_module_protects_checkpoints_and_recovers() {
    let _mpi = mpi_lock();
    let prog = &programs().fortran;
    let tiers = Tiers::new(NODES);
    let cfg = config(&tiers, "");
    let first = run(
        command(prog, Some(RANKS), &[&cfg, "first"], &tiers),
        "fortran first",
    );
    first.assert_ok();
    assert!(
        first.stdout.contains("fortran: wrote ok"),
        "{}",
        first.show()
    );
    let second = run(
        command(prog, Some(RANKS), &[&cfg, "second"], &tiers),
        "fortran second",
    );
    second.assert_ok();
    assert!(
        second.stdout.contains("fortran: recovered ok"),
        "{}",
        second.show()
    );
}
