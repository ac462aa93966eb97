//! The C API with real MPI and real processes: `examples/heat2d.c` and `tests/c/stress.c` are
//! built with mpicc against the freshly built libcairn and run under mpirun, killed with
//! SIGKILL, relaunched, and have their stored checkpoints deleted or damaged in between.
//!
//! Needs Open MPI (mpicc, mpirun) and `cargo build --release -p cairn-capi` (or the libcairn.so
//! that `cargo test` builds). The MPI-heavy tests take a global lock so that they run one at a
//! time on small machines. `CAPI_KILL_SEEDS=3,7` reruns chosen seeds of the kill test. The
//! redundancy schemes (partner, xor, rs) under kill -9 and lost nodes are in `redundancy/`.

mod flush;
mod redundancy;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::*;

// ---- Reading the programs' output -------------------------------------------------------------

/// `heat2d: final checksum <hex>`.
fn heat_checksum(o: &Outcome) -> String {
    o.lines()
        .find_map(|l| l.strip_prefix("heat2d: final checksum "))
        .unwrap_or_else(|| panic!("no final checksum\n{}", o.show()))
        .to_string()
}

/// The version in `heat2d: step <s> checkpoint v<v> <t> ms`.
fn heat_ckpt_line(l: &str) -> Option<i64> {
    let rest = l.strip_prefix("heat2d: step ")?;
    let v = rest.split(" checkpoint v").nth(1)?;
    v.split_whitespace().next()?.parse().ok()
}

/// `stress: rank <r> checkpoint v<v> done` -> (r, v).
fn stress_done(l: &str) -> Option<(usize, i64)> {
    let rest = l.strip_prefix("stress: rank ")?;
    let (r, rest) = rest.split_once(" checkpoint v")?;
    let v = rest.strip_suffix(" done")?;
    Some((r.parse().ok()?, v.parse().ok()?))
}

/// `stress: rank <r> restored v<v> ok|MISMATCH ...` -> (r, v, ok).
fn stress_restored(l: &str) -> Option<(usize, i64, bool)> {
    let rest = l.strip_prefix("stress: rank ")?;
    let (r, rest) = rest.split_once(" restored v")?;
    let (v, verdict) = rest.split_once(' ')?;
    Some((r.parse().ok()?, v.parse().ok()?, verdict == "ok"))
}

/// `stress: rank <r> durable v<v>` -> (r, v).
fn stress_durable(l: &str) -> Option<(usize, i64)> {
    let rest = l.strip_prefix("stress: rank ")?;
    let (r, v) = rest.split_once(" durable v")?;
    Some((r.parse().ok()?, v.parse().ok()?))
}

/// The newest version any rank reported durable.
fn newest_durable(stdout: &str) -> Option<i64> {
    stdout
        .lines()
        .filter_map(stress_durable)
        .map(|(_, v)| v)
        .max()
}

/// Version -> ranks that reported it done.
fn done_by_version(stdout: &str) -> BTreeMap<i64, BTreeSet<usize>> {
    let mut m: BTreeMap<i64, BTreeSet<usize>> = BTreeMap::new();
    for (r, v) in stdout.lines().filter_map(stress_done) {
        m.entry(v).or_default().insert(r);
    }
    m
}

/// The version every one of `ranks` restored and verified, or `None` if the output reports no
/// restore. Fails on a mismatch, on ranks that disagree, or on a partial report.
fn restored_ok(o: &Outcome, ranks: usize, ctx: &str) -> Option<i64> {
    assert!(
        !o.stdout.contains("MISMATCH"),
        "{ctx}: verification MISMATCH\n{}",
        o.show()
    );
    let got: BTreeMap<usize, (i64, bool)> = o
        .lines()
        .filter_map(stress_restored)
        .map(|(r, v, ok)| (r, (v, ok)))
        .collect();
    if got.is_empty() {
        return None;
    }
    let versions: BTreeSet<i64> = got.values().map(|(v, _)| *v).collect();
    assert!(
        got.len() == ranks && versions.len() == 1 && got.values().all(|(_, ok)| *ok),
        "{ctx}: expected all {ranks} ranks to restore the same version ok\n{}",
        o.show()
    );
    versions.into_iter().next()
}

fn stress_cmd(ranks: Option<usize>, args: &[&str], tiers: &Tiers) -> std::process::Command {
    command(&bins().stress, ranks, args, tiers)
}

fn heat_cmd(ranks: usize, args: &[&str], tiers: &Tiers) -> std::process::Command {
    command(&bins().heat2d, Some(ranks), args, tiers)
}

// ---- 1. heat2d: kill -9 of a rank, relaunch, same answer --------------------------------------

const HEAT: [&str; 6] = ["--n", "128", "--steps", "400", "--every", "50"];

fn heat_kill_and_relaunch(
    ranks: usize,
    sim_nodes: usize,
    victim: usize,
    after_lines: usize,
) -> String {
    let what = format!("heat2d with {ranks} ranks");
    let plain = Tiers::new(sim_nodes);
    let reference = run(
        heat_cmd(ranks, &HEAT, &plain),
        &format!("{what}, uninterrupted"),
    );
    reference.assert_ok();
    assert!(
        reference.stdout.contains("no checkpoint, starting fresh"),
        "{}",
        reference.show()
    );
    let expected = heat_checksum(&reference);

    let tiers = Tiers::new(sim_nodes);
    let mut slow = HEAT.to_vec();
    slow.extend(["--sleep-ms", "3"]);
    let mut job = spawn(
        heat_cmd(ranks, &slow, &tiers),
        &format!("{what}, to be killed"),
    );
    // Found first, so that the kill follows the checkpoint line as closely as possible.
    let pid = rank_pid(job.pid(), "heat2d", victim, Duration::from_secs(30)).unwrap_or_else(|| {
        panic!(
            "{what}: no process for rank {victim} under mpirun {}",
            job.pid()
        )
    });
    let mut lines = 0;
    let last = job.wait_line(Duration::from_secs(60), |l| {
        if heat_ckpt_line(l).is_some() {
            lines += 1;
        }
        lines == after_lines
    });
    let last = last.unwrap_or_else(|| {
        panic!(
            "{what}: no checkpoint line {after_lines}; saw {:?}",
            job.seen
        )
    });
    kill9(pid);
    let before: Vec<i64> = job.seen.iter().filter_map(|l| heat_ckpt_line(l)).collect();
    let newest_before = heat_ckpt_line(&last).unwrap();
    let killed = job.finish(Duration::from_secs(60));
    assert!(
        !killed.status.success() && !killed.stdout.contains("final checksum"),
        "{what}: the killed run should not have finished\n{}",
        killed.show()
    );
    // Every line rank 0 printed, even after the kill, is a checkpoint it saw complete.
    let reported: BTreeSet<i64> = killed.lines().filter_map(heat_ckpt_line).collect();
    assert!(before.iter().all(|v| reported.contains(v)));

    let again = run(
        heat_cmd(ranks, &HEAT, &tiers),
        &format!("{what}, relaunched"),
    );
    again.assert_ok();
    let from: i64 = again
        .lines()
        .find_map(|l| l.strip_prefix("heat2d: restarted from checkpoint v"))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("{what}: the relaunch did not restart\n{}", again.show()));
    assert!(
        reported.contains(&from) && from >= newest_before,
        "{what}: restarted from v{from}; before the kill v{newest_before} was the newest reported complete, {reported:?} were reported in all\n{}",
        again.show()
    );
    assert!(
        again.stdout.contains(&format!("(step {from})"))
            && !again.stderr.contains("heat2d: warning"),
        "{what}: the restored step must be the version\n{}",
        again.show()
    );
    assert_eq!(
        heat_checksum(&again),
        expected,
        "{what}: the relaunched run ends differently from the uninterrupted one\n{}",
        again.show()
    );
    expected
}

#[test]
fn heat2d_survives_kill9_of_a_rank() {
    let _mpi = mpi_lock();
    let one = heat_kill_and_relaunch(1, 0, 0, 2);
    let two = heat_kill_and_relaunch(2, 0, 1, 3);
    let four = heat_kill_and_relaunch(4, 2, 2, 2);
    // The arithmetic per cell does not depend on the decomposition.
    assert_eq!(
        (&one, &two),
        (&four, &four),
        "checksums differ between rank counts"
    );
}

// ---- 2. kill -9 at random points during checkpoints -------------------------------------------

const KILL_RANKS: usize = 4;
const KILL_MIB: &str = "8";

/// One killed run (continuing from `floor`, the version a previous round verified, if any)
/// followed by a verification. Returns the version verified.
///
/// With `lose_node` = Some(f) (a fresh run flushing every f checkpoints in the background, so
/// only multiples of f can become durable), the victim's whole simulated node is lost with it:
/// its node-local directory is deleted before the relaunch, and the newest version any rank
/// saw durable (`cairn_test`) must still be restored.
fn kill_round(
    tiers: &Tiers,
    rng: &mut Rng,
    floor: Option<i64>,
    lose_node: Option<i64>,
    ctx: &str,
) -> Option<i64> {
    let args = ["--mib", KILL_MIB, "--versions", "100000"];
    let mut job = spawn(stress_cmd(Some(KILL_RANKS), &args, tiers), ctx);
    let first = job.wait_line(Duration::from_secs(60), |l| stress_done(l).is_some());
    assert!(
        first.is_some(),
        "{ctx}: no checkpoint was reported; saw {:?}",
        job.seen
    );
    let delay = rng.range(20, 700);
    let victim = rng.range(0, KILL_RANKS as u64 - 1) as usize;
    let pid = rank_pid(job.pid(), "stress", victim, Duration::from_secs(5))
        .unwrap_or_else(|| panic!("{ctx}: rank {victim} not found under mpirun"));
    std::thread::sleep(Duration::from_millis(delay));
    kill9(pid);
    let killed = job.finish(Duration::from_secs(60));
    let mut ctx = format!("{ctx}, rank {victim} killed {delay} ms after the first checkpoint");
    assert!(
        !killed.status.success(),
        "{ctx}: the run was not killed\n{}",
        killed.show()
    );
    if let Some(f) = floor {
        assert_eq!(
            restored_ok(&killed, KILL_RANKS, &ctx),
            Some(f),
            "{ctx}: {}",
            killed.show()
        );
    }
    let done = done_by_version(&killed.stdout);
    let complete = done
        .iter()
        .filter(|(_, rs)| rs.len() == KILL_RANKS)
        .map(|(v, _)| *v)
        .max();
    let newest_any = done.keys().max().copied().unwrap_or(0);
    // cairn_checkpoint returns once the checkpoint is captured on every rank (and durable when
    // flushed), so one rank's report is enough to make a version restorable.
    let mut must = complete.max(floor).max(done.keys().max().copied());
    if let Some(every) = lose_node {
        // Ranks 2n and 2n+1 share simulated node n.
        let node = victim / 2;
        std::fs::remove_dir_all(tiers.local().join(format!("node{node}"))).unwrap();
        ctx.push_str(&format!(", node{node} lost"));
        must = newest_durable(&killed.stdout);
        assert!(
            must.map_or(true, |m| m % every == 0),
            "{ctx}: v{must:?} reported durable but only multiples of {every} are flushed\n{}",
            killed.show()
        );
    }

    let check = run(
        stress_cmd(
            Some(KILL_RANKS),
            &["--mib", KILL_MIB, "--verify-only"],
            tiers,
        ),
        &format!("{ctx}, verify"),
    );
    check.assert_ok();
    let got = restored_ok(&check, KILL_RANKS, &ctx);
    match (got, must) {
        (None, None) => assert!(check.stdout.contains("stress: none"), "{ctx}\n{}", check.show()),
        (None, Some(m)) => panic!(
            "{ctx}: v{m} was reported complete before the kill but nothing was restored\n{}\n{}",
            killed.show(),
            check.show()
        ),
        (Some(g), m) => assert!(
            Some(g) >= m
                && g <= newest_any + 1
                && !matches!(lose_node, Some(every) if g % every != 0),
            "{ctx}: restored v{g}, expected at least {m:?}; every rank had completed {complete:?}, the newest any rank completed was v{newest_any}\n{}\n{}",
            killed.show(),
            check.show()
        ),
    }
    eprintln!(
        "{ctx}: complete on every rank {complete:?}, newest reported v{newest_any}, verified {got:?}"
    );
    got
}

#[test]
fn kill9_at_random_points_never_loses_a_complete_checkpoint() {
    let seeds: Vec<u64> = match std::env::var("CAPI_KILL_SEEDS") {
        Ok(s) => s
            .split(',')
            .map(|x| x.trim().parse().expect("CAPI_KILL_SEEDS: numbers"))
            .collect(),
        Err(_) => (1..=16).collect(),
    };
    let _mpi = mpi_lock();
    for seed in seeds {
        let mut rng = Rng::new(seed);
        let mut tiers = Tiers::new(2);
        // keep = 1 makes the background deletion run after every checkpoint, right behind the
        // one being confirmed; some seeds also flush to the global tier.
        let variant = match seed % 3 {
            0 => {
                tiers.set("CAIRN_CACHE_KEEP", "1");
                "keep 1"
            }
            1 => "keep 2",
            _ => {
                tiers.set("CAIRN_CACHE_KEEP", "1");
                tiers.set("CAIRN_FLUSH_EVERY", "2");
                "keep 1, flush every 2, node lost"
            }
        };
        let ctx = format!("seed {seed} ({variant}; rerun with CAPI_KILL_SEEDS={seed})");
        eprintln!("{ctx}");
        // With flushes, the killed rank's node is lost too: only durable versions survive.
        let lose_node = (seed % 3 == 2).then_some(2);
        let got = kill_round(
            &tiers,
            &mut rng,
            None,
            lose_node,
            &format!("{ctx}, round 1"),
        );
        // Half the seeds go on from what was restored and are killed again.
        if seed % 2 == 0 && got.is_some() {
            kill_round(&tiers, &mut rng, got, None, &format!("{ctx}, round 2"));
        }
    }
}

// ---- 3. losing a simulated node ---------------------------------------------------------------

#[test]
fn losing_a_node_restores_from_the_global_tier_or_finds_nothing() {
    let _mpi = mpi_lock();
    // With flushes: v2 and v4 are durable on the global tier, v4 and v5 cached locally (and
    // finalize leaves v5 as it is).
    let tiers = Tiers::new(2);
    let cfg = tiers.write(
        "cairn.toml",
        "[cache]\nkeep = 2\n\n[flush]\nevery = 2\n\n[checkpoint]\nfinalize = false\n",
    );
    let cfg = cfg.to_str().unwrap();
    run(
        stress_cmd(
            Some(4),
            &["--mib", "1", "--versions", "5", "--config", cfg],
            &tiers,
        ),
        "run with flush",
    )
    .assert_ok();
    assert!(
        tiers.global().join("stress/v4/manifest.json").is_file(),
        "v4 was not flushed"
    );
    assert!(tiers
        .local()
        .join("node1/stress/v5/manifest.json")
        .is_file());
    std::fs::remove_dir_all(tiers.local().join("node1")).unwrap();
    let o = run(
        stress_cmd(
            Some(4),
            &["--mib", "1", "--verify-only", "--config", cfg],
            &tiers,
        ),
        "verify after losing node1",
    );
    o.assert_ok();
    assert_eq!(
        restored_ok(&o, 4, "lost node1 with flush"),
        Some(4),
        "{}",
        o.show()
    );

    // Without flushes nothing survives on node1, so no checkpoint is complete.
    let mut tiers = Tiers::new(2);
    tiers.set("CAIRN_CHECKPOINT_FINALIZE", "false");
    run(
        stress_cmd(Some(4), &["--mib", "1", "--versions", "3"], &tiers),
        "run without flush",
    )
    .assert_ok();
    std::fs::remove_dir_all(tiers.local().join("node1")).unwrap();
    let o = run(
        stress_cmd(Some(4), &["--mib", "1", "--verify-only"], &tiers),
        "verify after losing node1",
    );
    o.assert_ok();
    assert_eq!(
        restored_ok(&o, 4, "lost node1 without flush"),
        None,
        "{}",
        o.show()
    );
    assert!(o.stdout.contains("stress: none"), "{}", o.show());
}

// ---- 3b. losing a node whose node-local tier is its shared-memory store ------------------------

/// The job's per-node shared-memory stores, the node-local tier with `[tiers] local = "mem"`;
/// a lost node is a wiped store. Dropping it wipes them all, so no test leaves one behind.
struct MemStores {
    job: String,
    nodes: usize,
}

impl MemStores {
    fn name(&self, n: usize) -> String {
        // SAFETY: getuid(2) has no preconditions and cannot fail.
        let uid = unsafe { libc::getuid() };
        cairn_shm::store_name(uid, &self.job, cairn_shm::StoreOwner::Node(n as u32))
    }
}

impl redundancy::NodeStorage for MemStores {
    fn lose(&self, n: usize) {
        cairn_shm::Store::wipe(&self.name(n), None)
            .unwrap_or_else(|e| panic!("wipe node {n}'s store: {e}"));
    }

    fn missing_part(&self, n: usize, r: usize, v: i64) -> Option<String> {
        let key = format!(".cairn/stress/v{v}/rank{r}.ckpt");
        let cfg = cairn_shm::StoreConfig {
            create: false,
            populate: false,
            ..cairn_shm::StoreConfig::new(&self.name(n), 0, 4096)
        };
        match cairn_shm::Store::open(&cfg) {
            Ok(s) if s.stat(&key).is_ok() => None,
            _ => Some(format!("/dev/shm{}/{key}", self.name(n))),
        }
    }
}

impl Drop for MemStores {
    fn drop(&mut self) {
        for n in 0..self.nodes {
            let _ = cairn_shm::Store::wipe(&self.name(n), None);
        }
    }
}

/// Two simulated nodes whose node-local tier is a 64 MiB shared-memory store each, under
/// partner redundancy; the stores (of job `<tag>-<pid>`) go when the `MemStores` is dropped.
fn mem_partner_tiers(tag: &str) -> (MemStores, Tiers) {
    let stores = MemStores {
        job: format!("{tag}-{}", std::process::id()),
        nodes: 2,
    };
    let mut t = Tiers::new(2);
    t.set("CAIRN_JOB", &stores.job);
    t.set("CAIRN_TIERS_LOCAL", "mem");
    t.set("CAIRN_TIERS_MEM_SIZE", "64M");
    t.set("CAIRN_REDUNDANCY_SCHEME", "partner");
    (stores, t)
}

#[test]
fn mem_tier_with_partner_rebuilds_a_wiped_store_after_kill9() {
    let _mpi = mpi_lock();
    let (stores, t) = mem_partner_tiers("capi-mem");
    // Rank 3 is killed and node 1 (ranks 2 and 3) loses its store; node 0 holds the partner
    // copies of its parts.
    redundancy::kill_lose_and_rebuild_with(
        "partner in shared-memory stores, 4 ranks on 2 nodes",
        &t,
        &stores,
        (4, 2),
        3,
        0,
        &["--mib", "1"],
    );
    assert!(!t.local().exists(), "a node directory was written");
}

// ---- 4. a flipped byte in the newest checkpoint -----------------------------------------------

/// An offset inside region 1 (after the 16-byte header and region 0's 8 bytes) of a rank file.
const DATA_OFFSET: u64 = 16 + 8 + 3 * 4096 + 5;

#[test]
fn a_flipped_byte_falls_back_to_the_previous_checkpoint() {
    let _mpi = mpi_lock();
    // Finalize would make the newest version durable, and restart would take its intact
    // global copy (the last case below).
    let mut tiers = Tiers::new(2);
    tiers.set("CAIRN_CHECKPOINT_FINALIZE", "false");
    run(
        stress_cmd(Some(4), &["--mib", "1", "--versions", "4"], &tiers),
        "run",
    )
    .assert_ok();
    // Rank 1 lives on simulated node 0 (ranks 0 and 1).
    flip_byte(
        &tiers.local().join("node0/stress/v4/rank1.ckpt"),
        DATA_OFFSET,
    );
    let o = run(
        stress_cmd(Some(4), &["--mib", "1", "--verify-only"], &tiers),
        "verify after the flip",
    );
    o.assert_ok();
    assert_eq!(
        restored_ok(&o, 4, "flipped byte in v4"),
        Some(3),
        "{}",
        o.show()
    );
    assert!(
        o.stderr
            .lines()
            .any(|l| l.contains("v4") && l.contains("rank1.ckpt") && l.contains("checksum")),
        "stderr should name the damaged checkpoint\n{}",
        o.show()
    );

    // With the damaged version the only one, restarting must fail, never hand out its data.
    let mut tiers = Tiers::new(2);
    tiers.set("CAIRN_CHECKPOINT_FINALIZE", "false");
    run(
        stress_cmd(Some(4), &["--mib", "1", "--versions", "1"], &tiers),
        "run",
    )
    .assert_ok();
    flip_byte(
        &tiers.local().join("node0/stress/v1/rank1.ckpt"),
        DATA_OFFSET,
    );
    let o = run(
        stress_cmd(Some(4), &["--mib", "1", "--verify-only"], &tiers),
        "verify the only version",
    );
    o.assert_exit5();
    assert!(!o.stdout.contains("restored"), "{}", o.show());
    assert!(
        o.stderr.contains("cairn_restart failed")
            && o.stderr.contains("v1")
            && o.stderr.contains("damaged"),
        "{}",
        o.show()
    );

    // An intact copy of the same version on the global tier is used instead.
    let mut tiers = Tiers::new(2);
    tiers.set("CAIRN_FLUSH_EVERY", "1");
    run(
        stress_cmd(Some(4), &["--mib", "1", "--versions", "2"], &tiers),
        "run with flush",
    )
    .assert_ok();
    flip_byte(
        &tiers.local().join("node0/stress/v2/rank1.ckpt"),
        DATA_OFFSET,
    );
    let o = run(
        stress_cmd(Some(4), &["--mib", "1", "--verify-only"], &tiers),
        "verify with a global copy",
    );
    o.assert_ok();
    assert_eq!(
        restored_ok(&o, 4, "flipped byte, global copy"),
        Some(2),
        "{}",
        o.show()
    );
    assert!(o.stderr.contains("checksum"), "{}", o.show());
}

// ---- 5 and 6. clear errors, and the program's own exit code -----------------------------------

/// Run the error case under mpirun with 2 ranks and alone (`--solo`); both must exit 5 with a
/// message containing every one of `needles`.
fn fails_clearly(tiers: &Tiers, args: &[&str], needles: &[&str], what: &str) {
    let mpi = run(
        stress_cmd(Some(2), args, tiers),
        &format!("{what} (2 ranks)"),
    );
    let mut solo_args = args.to_vec();
    solo_args.push("--solo");
    let solo = run(
        stress_cmd(None, &solo_args, tiers),
        &format!("{what} (solo)"),
    );
    for o in [&mpi, &solo] {
        o.assert_exit5();
        assert!(
            needles.iter().all(|n| o.stderr.contains(n)),
            "the message should contain {needles:?}\n{}",
            o.show()
        );
    }
}

#[test]
fn configuration_errors_name_the_culprit() {
    let _mpi = mpi_lock();
    let tiers = Tiers::new(0);
    let cfg = tiers.write("bad.toml", "[cache]\nkepp = 3\n");
    fails_clearly(
        &tiers,
        &["--mib", "0", "--config", cfg.to_str().unwrap()],
        &["cairn_init", "kepp", "bad.toml"],
        "unknown key",
    );

    let mut tiers = Tiers::new(0);
    tiers.set("CAIRN_CACHE_KEEP", "abc");
    fails_clearly(
        &tiers,
        &["--mib", "0"],
        &["CAIRN_CACHE_KEEP", "abc"],
        "bad variable",
    );

    let mut tiers = Tiers::new(0);
    let missing = tiers.path().join("no-such-dir");
    tiers.set("CAIRN_TIERS_LOCAL", missing.join("local").to_str().unwrap());
    fails_clearly(
        &tiers,
        &["--mib", "0"],
        &[missing.to_str().unwrap(), "does not exist"],
        "missing parent",
    );
    assert!(
        !missing.exists(),
        "the missing directory must not be created"
    );
}

/// Module systems and package managers set `CAIRN_ROOT`, `CAIRN_PREFIX` and the like for an
/// installed package: such names are no settings, so a job with them checkpoints and restarts
/// as usual, and rank 0 alone says once which names it ignored. A misspelt key of a real
/// section stays an error naming it.
#[test]
fn package_variables_in_the_environment_do_not_stop_a_job() {
    let _mpi = mpi_lock();
    let mut tiers = Tiers::new(2);
    tiers.set("CAIRN_ROOT", "/x");
    tiers.set("CAIRN_PREFIX", "/y");
    let args = ["--n", "64", "--steps", "60", "--every", "20"];
    let first = run(
        heat_cmd(4, &args, &tiers),
        "heat2d with CAIRN_ROOT and CAIRN_PREFIX",
    );
    first.assert_ok();
    let wanted = "ignoring environment variables CAIRN_PREFIX, CAIRN_ROOT";
    assert_eq!(
        first.stderr.matches(wanted).count(),
        1,
        "reported once, by rank 0\n{}",
        first.show()
    );
    assert!(
        first.lines().any(|l| heat_ckpt_line(l) == Some(60)),
        "{}",
        first.show()
    );
    // Relaunched with more steps, it resumes from v60 and says so again, once.
    let args = ["--n", "64", "--steps", "80", "--every", "20"];
    let second = run(heat_cmd(4, &args, &tiers), "heat2d relaunched");
    second.assert_ok();
    assert!(
        second.stdout.contains("restarted from checkpoint v60"),
        "{}",
        second.show()
    );
    assert_eq!(
        second.stderr.matches(wanted).count(),
        1,
        "{}",
        second.show()
    );

    let mut tiers = Tiers::new(0);
    tiers.set("CAIRN_ROOT", "/x");
    tiers.set("CAIRN_TIERS_LOCALL", "x");
    fails_clearly(
        &tiers,
        &["--mib", "0"],
        &["CAIRN_TIERS_LOCALL", "unknown config key [tiers] locall"],
        "misspelt key beside a package variable",
    );
}

#[test]
fn restart_mismatches_name_both_sides() {
    let _mpi = mpi_lock();
    // Region 1 holds --mib MiB of doubles: 2 MiB = 262144 elements, 1 MiB = 131072.
    let tiers = Tiers::new(0);
    run(
        stress_cmd(Some(2), &["--mib", "2", "--versions", "2"], &tiers),
        "run with 2 MiB",
    )
    .assert_ok();
    let o = run(
        stress_cmd(Some(2), &["--mib", "1", "--versions", "3"], &tiers),
        "relaunch with 1 MiB",
    );
    o.assert_exit5();
    assert!(
        o.stderr.contains("region 1") && o.stderr.contains("262144") && o.stderr.contains("131072"),
        "{}",
        o.show()
    );
    assert!(
        !o.stdout.contains("restored") && !o.stdout.contains("done"),
        "{}",
        o.show()
    );

    let tiers = Tiers::new(2);
    run(
        stress_cmd(Some(4), &["--mib", "1", "--versions", "2"], &tiers),
        "run with 4 ranks",
    )
    .assert_ok();
    let o = run(
        stress_cmd(Some(2), &["--mib", "1", "--versions", "3"], &tiers),
        "relaunch with 2 ranks",
    );
    o.assert_exit5();
    assert!(
        o.stderr.contains("4 ranks") && o.stderr.contains("has 2"),
        "the message should give both rank counts\n{}",
        o.show()
    );
    // Nothing was touched: the 4-rank checkpoint still restores with 4 ranks.
    let o = run(
        stress_cmd(Some(4), &["--mib", "1", "--verify-only"], &tiers),
        "verify with 4 ranks",
    );
    o.assert_ok();
    assert_eq!(restored_ok(&o, 4, "4 ranks again"), Some(2), "{}", o.show());
}

#[test]
fn cxx_program_on_its_own_communicator_restarts() {
    let tiers = Tiers::new(2);
    let _mpi = mpi_lock();
    let first = run(
        command(&bins().vector, Some(2), &[], &tiers),
        "C++ first run",
    );
    first.assert_ok();
    assert_eq!(first.stdout.matches("done").count(), 2, "{}", first.show());
    assert!(!first.stdout.contains("restored"), "{}", first.show());
    let second = run(
        command(&bins().vector, Some(2), &[], &tiers),
        "C++ second run",
    );
    second.assert_ok();
    assert_eq!(
        second.stdout.matches("restored v5 ok").count(),
        2,
        "{}",
        second.show()
    );
}

#[test]
fn solo_mode_checkpoints_and_restarts() {
    let tiers = Tiers::new(0);
    let solo = |args: &[&str], what: &str| {
        let mut a = args.to_vec();
        a.push("--solo");
        let o = run(stress_cmd(None, &a, &tiers), what);
        o.assert_ok();
        o
    };
    let o = solo(
        &["--mib", "1", "--versions", "3", "--regions", "6"],
        "solo run",
    );
    assert!(
        o.stdout.contains("stress: rank 0 checkpoint v3 done"),
        "{}",
        o.show()
    );
    assert!(tiers.local().join("node0/stress/v3/rank0.ckpt").is_file());
    let o = solo(
        &["--mib", "1", "--regions", "6", "--verify-only"],
        "solo verify",
    );
    assert_eq!(restored_ok(&o, 1, "solo verify"), Some(3), "{}", o.show());
    let o = solo(
        &["--mib", "1", "--regions", "6", "--versions", "5"],
        "solo continue",
    );
    assert_eq!(restored_ok(&o, 1, "solo continue"), Some(3), "{}", o.show());
    assert!(
        o.stdout.contains("checkpoint v4 done") && o.stdout.contains("checkpoint v5 done"),
        "{}",
        o.show()
    );
    let o = solo(
        &["--mib", "1", "--regions", "6", "--verify-only"],
        "solo verify again",
    );
    assert_eq!(
        restored_ok(&o, 1, "solo verify again"),
        Some(5),
        "{}",
        o.show()
    );
    // Solo errors are the program's own exit code too, seen directly (no mpirun between).
    let o = run(
        stress_cmd(None, &["--solo", "--mib", "2", "--verify-only"], &tiers),
        "solo mismatch",
    );
    assert_eq!(
        (o.status.signal(), o.status.code()),
        (None, Some(5)),
        "{}",
        o.show()
    );
}

// ---- Authenticated checkpoints ---------------------------------------------------------------

/// Copy version `v` of `stress` from `from`'s tiers into `to`'s, as someone who can write
/// there would plant it: directories 0700 and files 0600, like Cairn's own.
fn plant(from: &Tiers, to: &Tiers, v: i64) {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let mut planted = 0;
    for tier in ["local/node0", "global"] {
        let src = from.path().join(tier).join(format!("stress/v{v}"));
        let Ok(entries) = std::fs::read_dir(&src) else {
            continue;
        };
        let dst = to.path().join(tier).join(format!("stress/v{v}"));
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dst)
            .unwrap();
        for e in entries {
            let e = e.unwrap();
            let to_file = dst.join(e.file_name());
            std::fs::copy(e.path(), &to_file).unwrap();
            std::fs::set_permissions(&to_file, std::fs::Permissions::from_mode(0o600)).unwrap();
            planted += 1;
        }
    }
    assert!(
        planted > 0,
        "nothing of v{v} under {}",
        from.path().display()
    );
}

/// With `[security] authenticate`, a job restores only what was written with its user's key:
/// a self-consistent checkpoint planted in its tiers (written without a key, or with another
/// user's) is refused with a message naming it, and the job's own newest checkpoint is
/// restored instead. The key is created private, and one others may read is refused.
#[test]
fn authenticated_checkpoints_refuse_planted_and_foreign_ones() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let keys = tempfile::tempdir().unwrap();
    let mine = keys.path().join("me/cairn/key");
    let theirs = keys.path().join("them/key");
    let (victim, plain, other) = (Tiers::new(0), Tiers::new(0), Tiers::new(0));
    let job = |tiers: &Tiers, key: Option<&Path>, args: &[&str], what: &str| {
        let mut a = vec!["--solo", "--mib", "1", "--regions", "3"];
        a.extend_from_slice(args);
        let mut c = stress_cmd(None, &a, tiers);
        if let Some(k) = key {
            c.env("CAIRN_SECURITY_AUTHENTICATE", "true")
                .env("CAIRN_SECURITY_KEY_FILE", k);
        }
        run(c, what)
    };
    let o = job(&victim, Some(&mine), &["--versions", "3"], "the user's job");
    o.assert_ok();
    assert!(
        o.stderr.contains("created the key") && o.stderr.contains(&*mine.to_string_lossy()),
        "{}",
        o.show()
    );
    assert_eq!(std::fs::metadata(&mine).unwrap().mode() & 0o777, 0o600);
    assert_eq!(
        std::fs::metadata(mine.parent().unwrap()).unwrap().mode() & 0o777,
        0o700
    );
    // Two planted checkpoints, newer than the user's own: one written without a key, one
    // with another user's.
    job(&plain, None, &["--versions", "5"], "a job without a key").assert_ok();
    job(
        &other,
        Some(&theirs),
        &["--versions", "6"],
        "another user's job",
    )
    .assert_ok();
    plant(&plain, &victim, 5);
    plant(&other, &victim, 6);
    let o = job(
        &victim,
        Some(&mine),
        &["--verify-only"],
        "the user's restart",
    );
    assert_eq!(
        restored_ok(&o, 1, "the user's restart"),
        Some(3),
        "{}",
        o.show()
    );
    for needle in [
        "v6",
        "v5",
        "fails authentication",
        "MAC does not match",
        "carries no MAC",
    ] {
        assert!(o.stderr.contains(needle), "no {needle:?} in\n{}", o.show());
    }
    // The restart went on from v3, so the planted versions, newer than it, are gone.
    for v in [5, 6] {
        for tier in [victim.local().join("node0"), victim.global()] {
            let dir = tier.join(format!("stress/v{v}"));
            assert!(!dir.exists(), "{} is still there", dir.display());
        }
    }
    // Without authentication the user's own checkpoints are refused with the reason, never
    // misread as damaged data.
    let o = job(
        &victim,
        None,
        &["--verify-only"],
        "a restart without authentication",
    );
    o.assert_exit5();
    assert!(
        o.stderr.contains("authenticated checkpoint")
            && o.stderr.contains("turn authentication on"),
        "{}",
        o.show()
    );
    // Under MPI rank 0 reads the key and hands it to the others: a two-rank job writes and
    // restores authenticated checkpoints, which a job with another key cannot restore.
    {
        let _mpi = mpi_lock();
        let shared = Tiers::new(2);
        let mpi_job = |key: &Path, args: &[&str], what: &str| {
            let mut a = vec!["--mib", "1", "--regions", "3"];
            a.extend_from_slice(args);
            let mut c = stress_cmd(Some(2), &a, &shared);
            c.env("CAIRN_SECURITY_AUTHENTICATE", "true")
                .env("CAIRN_SECURITY_KEY_FILE", key);
            run(c, what)
        };
        mpi_job(&mine, &["--versions", "2"], "an MPI job").assert_ok();
        let o = mpi_job(&mine, &["--verify-only"], "its restart");
        assert_eq!(restored_ok(&o, 2, "MPI restart"), Some(2), "{}", o.show());
        let o = mpi_job(&theirs, &["--verify-only"], "a restart with another key");
        assert!(
            o.stdout.contains("stress: none") && o.stderr.contains("fails authentication"),
            "{}",
            o.show()
        );
    }
    // A key others may read is refused, naming the file and the fix.
    std::fs::set_permissions(&mine, std::fs::Permissions::from_mode(0o644)).unwrap();
    let o = job(
        &victim,
        Some(&mine),
        &["--verify-only"],
        "a key others may read",
    );
    o.assert_exit5();
    assert!(o.stderr.contains("chmod 600"), "{}", o.show());
}

// ---- The job lock: one job per checkpoint name and tiers ---------------------------------------

/// A job checkpointing `stress` every step of 40 ms until it is told to stop (SIGTERM) or
/// killed, started by `launcher` (empty: directly) and waited for until its first checkpoint
/// of this run.
fn lock_holder(tiers: &Tiers, launcher: &[&str], what: &str) -> Running {
    let stress = bins().stress.display().to_string();
    let mut args: Vec<&str> = launcher.to_vec();
    args.extend([
        stress.as_str(),
        "--solo",
        "--mib",
        "1",
        "--until-exit",
        "40",
    ]);
    let program = PathBuf::from(args.remove(0));
    let mut job = spawn(command(&program, None, &args, tiers), what);
    assert!(
        job.wait_line(RUN_TIMEOUT, |l| l.contains(" checkpoint v")
            && l.ends_with(" done"))
            .is_some(),
        "{what}: no checkpoint\n{}",
        job.finish(Duration::from_secs(5)).show()
    );
    job
}

/// A second job on the same tiers and checkpoint name, restoring and verifying the newest
/// checkpoint: alone, or under mpirun with `ranks` ranks.
fn second_job(tiers: &Tiers, ranks: Option<usize>, what: &str) -> Outcome {
    let mut args = vec!["--mib", "1", "--verify-only"];
    if ranks.is_none() {
        args.push("--solo");
    }
    run(stress_cmd(ranks, &args, tiers), what)
}

#[test]
fn a_second_job_on_the_same_name_and_tiers_is_refused_and_a_dead_jobs_lock_is_taken_over() {
    let _g = mpi_lock();
    let mut tiers = Tiers::new(0);
    tiers.set("CAIRN_CHECKPOINT_EVERY", "1");
    tiers.set("CAIRN_EXIT_SIGNALS", "true");
    let local_lock = tiers.local().join("node0/.stress.lock");
    let global_lock = tiers.global().join(".stress.lock");

    // While the first job runs, a second one (alone, then two ranks under mpirun) is refused
    // at its first call, with the holder named, and the first goes on untouched.
    let first = lock_holder(&tiers, &[], "first job");
    let pid = first.pid();
    assert!(local_lock.is_file() && global_lock.is_file());
    for ranks in [None, Some(2)] {
        let o = second_job(&tiers, ranks, "second job while the first runs");
        assert_eq!(o.status.code(), Some(5), "{}", o.show());
        assert!(
            o.stderr
                .contains(&format!("is in use by the job of pid {pid} on host"))
                && o.stderr.contains("failed (-11)")
                && o.stderr.contains(".stress.lock"),
            "{}",
            o.show()
        );
        assert!(!o.stdout.contains("checkpoint v"), "{}", o.show());
    }
    // Ended as a batch system ends it: its last checkpoint, then the locks go with it.
    signal(pid, libc::SIGTERM);
    let o = first.finish(RUN_TIMEOUT);
    o.assert_ok();
    let last = o
        .lines()
        .filter_map(|l| l.strip_prefix("stress: rank 0 exiting after v"))
        .find_map(|v| v.parse::<i64>().ok())
        .unwrap_or_else(|| panic!("no last checkpoint\n{}", o.show()));
    assert!(
        !local_lock.exists() && !global_lock.exists(),
        "locks left behind"
    );

    // A job killed outright leaves its lock; the next job on this host sees its holder is
    // gone, takes the lock over and restores the killed job's newest checkpoint.
    let mut killed = lock_holder(&tiers, &[], "job to be killed");
    let newest = killed
        .wait_line(RUN_TIMEOUT, |l| {
            l.contains(&format!("checkpoint v{} done", last + 3))
        })
        .expect("checkpoints after the restart");
    let newest: i64 = newest
        .rsplit_once(" v")
        .and_then(|(_, v)| v.strip_suffix(" done"))
        .and_then(|v| v.parse().ok())
        .unwrap();
    kill9(killed.pid());
    let _ = killed.finish(RUN_TIMEOUT);
    assert!(
        local_lock.is_file() && global_lock.is_file(),
        "kill -9 leaves the locks"
    );
    let o = second_job(&tiers, None, "job after a kill -9");
    o.assert_ok();
    assert!(
        o.stderr
            .contains("took over the lock of checkpoint \"stress\""),
        "{}",
        o.show()
    );
    let restored = restored_ok(&o, 1, "after kill -9");
    assert!(
        restored >= Some(newest),
        "restored {restored:?}, newest done v{newest}"
    );
}

#[test]
fn a_lock_held_from_another_pid_namespace_is_judged_by_its_heartbeat() {
    // A process in another pid namespace cannot be looked up by pid, exactly like one on
    // another host: its lock is kept alive by a heartbeat (every quarter lease) and taken
    // over once the heartbeat stops.
    let ok = std::process::Command::new("unshare")
        .args(["--pid", "--fork", "--kill-child", "true"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        eprintln!("skipped: `unshare --pid` does not work here (not root, or no pid namespaces)");
        return;
    }
    let _g = mpi_lock();
    let mut tiers = Tiers::new(0);
    tiers.set("CAIRN_CHECKPOINT_EVERY", "1");
    tiers.set("CAIRN_TIERS_LOCK_LEASE", "2");
    let away = lock_holder(
        &tiers,
        &["unshare", "--pid", "--fork", "--kill-child"],
        "job in another pid namespace",
    );
    let o = second_job(&tiers, None, "second job while the first runs");
    assert_eq!(o.status.code(), Some(5), "{}", o.show());
    assert!(
        o.stderr.contains("is in use by the job of pid 1 on host"),
        "{}",
        o.show()
    );
    kill9(away.pid());
    let _ = away.finish(RUN_TIMEOUT);
    let o = second_job(&tiers, None, "job after the holder is gone");
    o.assert_ok();
    assert!(o.stderr.contains("took over the lock"), "{}", o.show());
    assert!(
        restored_ok(&o, 1, "after the holder is gone").is_some(),
        "{}",
        o.show()
    );
}

// ---- The committed header ---------------------------------------------------------------------

// ---- The file API: an application writing its own checkpoint files ----------------------------

fn files_lines<'a>(o: &'a Outcome, what: &'a str) -> impl Iterator<Item = (usize, i64)> + 'a {
    let what = format!(" {what} v");
    o.lines().filter_map(move |l| {
        let rest = l.strip_prefix("files: rank ")?;
        let (r, rest) = rest.split_once(&what)?;
        let v = rest.split_whitespace().next()?.parse().ok()?;
        Some((r.parse().ok()?, v))
    })
}

#[test]
fn routed_files_survive_kill9_and_an_invalid_rank_falls_back_everywhere() {
    let _mpi = mpi_lock();
    let mut tiers = Tiers::new(2);
    tiers.set("CAIRN_REDUNDANCY_SCHEME", "partner");
    let files = |args: &[&str]| command(&bins().files, Some(4), args, &tiers);
    let mut job = spawn(
        files(&["--steps", "400", "--every", "5", "--sleep-ms", "20"]),
        "files, to be killed",
    );
    let victim = rank_pid(job.pid(), "files", 1, Duration::from_secs(30))
        .expect("rank 1 of the files program");
    job.wait_line(Duration::from_secs(60), |l| {
        l.starts_with("files: rank 1 checkpoint v15 ")
    })
    .expect("checkpoint v15");
    kill9(victim);
    let killed = job.finish(Duration::from_secs(60));
    assert!(!killed.status.success(), "{}", killed.show());
    let newest = files_lines(&killed, "checkpoint")
        .map(|(_, v)| v)
        .max()
        .unwrap();
    // Node 1 (ranks 2 and 3) is lost too: its storage goes, the partner copies rebuild it.
    std::fs::remove_dir_all(tiers.local().join("node1")).unwrap();

    let again = run(
        files(&["--steps", "60", "--every", "5"]),
        "files, relaunched",
    );
    again.assert_ok();
    let restored: BTreeMap<usize, i64> = files_lines(&again, "restored").collect();
    assert_eq!(restored.len(), 4, "{}", again.show());
    let from = restored[&0];
    assert!(
        restored.values().all(|v| *v == from) && from >= 15 && from <= newest,
        "restored {restored:?}, newest written v{newest}\n{}",
        again.show()
    );
    assert_eq!(
        files_lines(&again, "finished").count(),
        4,
        "{}",
        again.show()
    );

    // v60 is the newest; rank 2 rejects the first checkpoint it is offered, and every rank
    // falls back to v55 with it.
    let fallback = run(
        files(&["--steps", "70", "--every", "5", "--invalid-rank", "2"]),
        "files, an invalid rank",
    );
    fallback.assert_ok();
    let rejected: BTreeMap<usize, i64> = files_lines(&fallback, "rejected").collect();
    let restored: BTreeMap<usize, i64> = files_lines(&fallback, "restored").collect();
    assert!(
        rejected.len() == 4 && rejected.values().all(|v| *v == 60),
        "{}",
        fallback.show()
    );
    assert!(
        restored.len() == 4 && restored.values().all(|v| *v == 55),
        "{}",
        fallback.show()
    );
}

#[test]
fn routed_files_live_in_the_shared_memory_tier() {
    let _mpi = mpi_lock();
    let (stores, t) = mem_partner_tiers("capi-files");
    let files = |args: &[&str]| command(&bins().files, Some(4), args, &t);
    run(
        files(&["--steps", "20", "--every", "5"]),
        "files in mem stores",
    )
    .assert_ok();
    let again = run(
        files(&["--steps", "30", "--every", "5"]),
        "files in mem stores, again",
    );
    again.assert_ok();
    let restored: BTreeMap<usize, i64> = files_lines(&again, "restored").collect();
    assert!(
        restored.len() == 4 && restored.values().all(|v| *v == 20),
        "{}",
        again.show()
    );
    assert!(!t.local().exists(), "a node directory was written");
    // Staged and restored files were in /dev/shm beside the stores, and nothing is left.
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    for node in 0..2 {
        let store = cairn_shm::store_name(uid, &stores.job, cairn_shm::StoreOwner::Node(node));
        let dir = format!("/dev/shm/{}.files", store.trim_start_matches('/'));
        assert!(!Path::new(&dir).exists(), "{dir} was left behind");
    }
}

#[test]
fn header_is_current() {
    let committed_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("include/cairn.h");
    let committed = std::fs::read_to_string(&committed_path).expect("read include/cairn.h");
    let generated = cairn::GENERATED_HEADER;
    assert!(
        !generated.starts_with("/* cbindgen could not generate"),
        "the build script could not generate cairn.h: {generated}"
    );
    if committed != generated {
        let line = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .map(|i| i + 1)
            .unwrap_or(committed.lines().count().min(generated.lines().count()) + 1);
        panic!(
            "{} is out of date with src/lib.rs (first difference at line {line}); copy the \
             header cbindgen generated, e.g.\n  cp \"$(ls -t target/*/build/cairn-capi-*/out/cairn.h | head -1)\" {}",
            committed_path.display(),
            committed_path.display()
        );
    }
}
