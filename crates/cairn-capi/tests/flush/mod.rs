//! The DURABLE step with real processes: background flushes to the global tier, their
//! verification, restart from the global tier after every node-local directory is gone,
//! kill -9 in the middle of a flush, and `cairn_should_exit` (time limit, halt file, signal)
//! leaving a durable last checkpoint.

use super::*;
use cairn_core::inventory::{Inventory, Selection, Status, Verdict};
use cairn_core::Config;

const RANKS: usize = 4;

/// Check every checkpoint of `name` the global tier holds complete: each must verify. Returns
/// the durable versions.
fn verify_global(tiers: &Tiers, name: &str, ctx: &str) -> Vec<i64> {
    let cfg = Config {
        local: None,
        global: tiers.global(),
        ..Config::default()
    };
    let inv = Inventory::open(&cfg).unwrap_or_else(|e| panic!("{ctx}: open the tiers: {e}"));
    let checks = inv
        .verify(&Selection::Name(name.to_string()))
        .unwrap_or_else(|e| panic!("{ctx}: verify: {e}"));
    let mut durable = Vec::new();
    for c in checks.iter().filter(|c| c.state == Status::Durable) {
        assert_eq!(
            c.verdict,
            Verdict::Ok,
            "{ctx}: durable v{} does not verify: {:?}",
            c.version,
            c.problems
        );
        durable.push(c.version);
    }
    durable
}

/// Temporary files a crashed writer may leave; nothing else but published objects may be there.
fn temporaries(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.to_string_lossy().contains(".tmp.") {
                out.push(p.display().to_string());
            }
        }
    }
    out
}

fn verify_only(tiers: &Tiers, mib: &str, ctx: &str) -> Outcome {
    let o = run(
        stress_cmd(Some(RANKS), &["--mib", mib, "--verify-only"], tiers),
        &format!("{ctx}, verify"),
    );
    o.assert_ok();
    o
}

#[test]
fn background_flushes_verify_and_restart_after_all_local_storage_is_wiped() {
    let _mpi = mpi_lock();
    let mut tiers = Tiers::new(2);
    tiers.set("CAIRN_FLUSH_EVERY", "2");
    let o = run(
        stress_cmd(Some(RANKS), &["--mib", "2", "--versions", "7"], &tiers),
        "run flushing every 2 in the background",
    );
    o.assert_ok();
    // The run saw its flushes finish (cairn_test), and finalize made v7 durable too.
    let seen = newest_durable(&o.stdout);
    assert!(
        seen.is_some_and(|v| v % 2 == 0),
        "no flushed version was reported durable\n{}",
        o.show()
    );
    let durable = verify_global(&tiers, "stress", "after the run");
    assert_eq!(durable, vec![2, 4, 6, 7], "{}", o.show());
    assert_eq!(temporaries(&tiers.global()), Vec::<String>::new());

    // Every node-local directory is gone: the ranks read their parts from the global tier.
    std::fs::remove_dir_all(tiers.local()).unwrap();
    let v = verify_only(&tiers, "2", "all local storage wiped");
    assert_eq!(
        restored_ok(&v, RANKS, "all local storage wiped"),
        Some(7),
        "{}",
        v.show()
    );

    // Without a flush schedule, finalize alone makes the newest checkpoint durable, unless
    // told not to.
    for (finalize, expect) in [("true", Some(3)), ("false", None)] {
        let mut tiers = Tiers::new(2);
        tiers.set("CAIRN_CHECKPOINT_FINALIZE", finalize);
        run(
            stress_cmd(Some(RANKS), &["--mib", "1", "--versions", "3"], &tiers),
            "run without a flush schedule",
        )
        .assert_ok();
        std::fs::remove_dir_all(tiers.local()).unwrap();
        let v = verify_only(&tiers, "1", &format!("finalize = {finalize}, local wiped"));
        assert_eq!(
            restored_ok(&v, RANKS, "finalize"),
            expect,
            "finalize = {finalize}\n{}",
            v.show()
        );
    }
}

#[test]
fn kill9_during_a_flush_keeps_the_previous_durable_checkpoint() {
    let seeds: Vec<u64> = match std::env::var("CAPI_FLUSH_SEEDS") {
        Ok(s) => s
            .split(',')
            .map(|x| x.trim().parse().expect("CAPI_FLUSH_SEEDS: numbers"))
            .collect(),
        Err(_) => (1..=8).collect(),
    };
    let _mpi = mpi_lock();
    for seed in seeds {
        let mut rng = Rng::new(seed);
        let mut tiers = Tiers::new(2);
        // Each rank's 4 MiB part takes about half a second to flush at 8 MiB/s, so most kills
        // land while a copy is under way; keep = 1 deletes old local versions right behind.
        tiers.set("CAIRN_FLUSH_EVERY", "2");
        tiers.set("CAIRN_FLUSH_BANDWIDTH", "8M");
        tiers.set("CAIRN_CACHE_KEEP", "1");
        let ctx = format!("seed {seed} (rerun with CAPI_FLUSH_SEEDS={seed})");
        let mut job = spawn(
            stress_cmd(Some(RANKS), &["--mib", "4", "--versions", "100000"], &tiers),
            &ctx,
        );
        let first = job.wait_line(Duration::from_secs(60), |l| stress_durable(l).is_some());
        assert!(
            first.is_some(),
            "{ctx}: nothing became durable; saw {:?}",
            job.seen
        );
        let delay = rng.range(0, 1500);
        let victim = rng.range(0, RANKS as u64 - 1) as usize;
        let pid = rank_pid(job.pid(), "stress", victim, Duration::from_secs(5))
            .unwrap_or_else(|| panic!("{ctx}: rank {victim} not found under mpirun"));
        std::thread::sleep(Duration::from_millis(delay));
        kill9(pid);
        let killed = job.finish(Duration::from_secs(60));
        let ctx = format!("{ctx}, rank {victim} killed {delay} ms after the first durable version");
        assert!(
            !killed.status.success(),
            "{ctx}: not killed\n{}",
            killed.show()
        );
        let must = newest_durable(&killed.stdout).expect("a durable version was seen");
        let newest_done = done_by_version(&killed.stdout)
            .keys()
            .max()
            .copied()
            .unwrap_or(0);

        // Whatever the kill interrupted, the global tier holds only intact durable versions,
        // and the newest one a rank saw durable is among them.
        let durable = verify_global(&tiers, "stress", &ctx);
        assert!(
            durable.contains(&must) && durable.iter().all(|v| v % 2 == 0),
            "{ctx}: durable versions {durable:?}, v{must} was reported durable\n{}",
            killed.show()
        );
        // With every node-local directory gone, restart takes the newest durable version.
        std::fs::remove_dir_all(tiers.local()).unwrap();
        let check = verify_only(&tiers, "4", &ctx);
        let got = restored_ok(&check, RANKS, &ctx);
        assert_eq!(
            got,
            durable.iter().max().copied(),
            "{ctx}: newest reported done v{newest_done}\n{}\n{}",
            killed.show(),
            check.show()
        );
        eprintln!("{ctx}: durable {durable:?}, reported durable v{must}, restored {got:?}");
    }
}

/// Run stress in its `--until-exit` loop until `stop` (given the running job) makes
/// `cairn_should_exit` true; every rank must take a last checkpoint and exit 0, and that
/// checkpoint must be durable and restorable with all local storage gone.
fn exits_with_a_durable_last_checkpoint(
    tiers: &Tiers,
    what: &str,
    stop: impl FnOnce(&mut Running),
) {
    let mut job = spawn(
        stress_cmd(Some(RANKS), &["--mib", "1", "--until-exit", "40"], tiers),
        what,
    );
    stop(&mut job);
    let o = job.finish(Duration::from_secs(60));
    o.assert_ok();
    let exits: BTreeMap<usize, i64> = o
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("stress: rank ")?;
            let (r, v) = rest.split_once(" exiting after v")?;
            Some((r.parse().ok()?, v.parse().ok()?))
        })
        .collect();
    let last: BTreeSet<i64> = exits.values().copied().collect();
    assert!(
        exits.len() == RANKS && last.len() == 1,
        "{what}: every rank must stop after the same version\n{}",
        o.show()
    );
    let last = *last.iter().next().unwrap();
    let durable = verify_global(tiers, "stress", what);
    assert_eq!(durable.iter().max(), Some(&last), "{what}\n{}", o.show());
    std::fs::remove_dir_all(tiers.local()).unwrap();
    let v = verify_only(tiers, "1", what);
    assert_eq!(restored_ok(&v, RANKS, what), Some(last), "{}", v.show());
}

#[test]
fn should_exit_leaves_a_durable_last_checkpoint() {
    let _mpi = mpi_lock();
    // A time limit: 3 s from init, with a 1 s margin.
    let mut tiers = Tiers::new(2);
    tiers.set("CAIRN_EXIT_TIME_LIMIT", "3");
    tiers.set("CAIRN_EXIT_MARGIN", "1");
    tiers.set("CAIRN_CHECKPOINT_EVERY", "5");
    exits_with_a_durable_last_checkpoint(&tiers, "time limit", |_| {});

    // A halt file, created once the job is checkpointing.
    let mut tiers = Tiers::new(2);
    tiers.set("CAIRN_CHECKPOINT_EVERY", "5");
    let halt = tiers.global().join("cairn.halt");
    exits_with_a_durable_last_checkpoint(&tiers, "halt file", |job| {
        assert!(job
            .wait_line(Duration::from_secs(60), |l| stress_done(l).is_some())
            .is_some());
        std::fs::write(&halt, b"").unwrap();
    });

    // SIGUSR1 to one rank only, with [exit] signals on: all ranks stop together.
    let mut tiers = Tiers::new(2);
    tiers.set("CAIRN_CHECKPOINT_EVERY", "5");
    tiers.set("CAIRN_EXIT_SIGNALS", "true");
    exits_with_a_durable_last_checkpoint(&tiers, "SIGUSR1", |job| {
        assert!(job
            .wait_line(Duration::from_secs(60), |l| stress_done(l).is_some())
            .is_some());
        let pid = rank_pid(job.pid(), "stress", 2, Duration::from_secs(5)).expect("rank 2");
        signal(pid, libc::SIGUSR1);
    });
}

/// Kill every process of a running job at once (ranks first, then mpirun) with SIGKILL.
fn kill_job(job: Running) -> Outcome {
    let pid = job.pid();
    for p in descendants(pid) {
        kill9(p);
    }
    kill9(pid);
    job.finish(Duration::from_secs(30))
}

/// Run `stress --versions 3 --then-hang` until every rank hangs after v3, having made no
/// Cairn call since v3's cairn_checkpoint returned.
fn hang_after_v3(tiers: &Tiers, mib: &str, ctx: &str) -> Running {
    let args = ["--mib", mib, "--versions", "3", "--then-hang"];
    let mut job = spawn(stress_cmd(Some(RANKS), &args, tiers), ctx);
    let mut hanging = 0;
    job.wait_line(Duration::from_secs(120), |l| {
        hanging += l.contains(" hanging after v3") as usize;
        hanging == RANKS
    })
    .unwrap_or_else(|| panic!("{ctx}: not every rank reached v3; saw {:?}", job.seen));
    job
}

#[test]
fn a_checkpoint_is_not_lost_when_the_job_dies_right_after_the_call_returns() {
    let _mpi = mpi_lock();

    // 1. The background flush of v3 finishes after cairn_checkpoint returned; the job makes
    //    no further call (which is where the global manifest would be published) and is
    //    killed; then every node-local directory is wiped. Each rank's commit record on the
    //    global tier says its copy is complete; the restart agrees on them and restores v3.
    let ctx = "killed after v3's flush, node-local tiers wiped";
    let mut tiers = Tiers::new(2);
    tiers.set("CAIRN_FLUSH_EVERY", "1");
    let job = hang_after_v3(&tiers, "4", ctx);
    let vdir = tiers.global().join("stress/v3");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !(0..RANKS).all(|r| vdir.join(format!("rank{r}.done")).exists()) {
        assert!(
            std::time::Instant::now() < deadline,
            "{ctx}: the flush of v3 did not commit on every rank within 60 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !vdir.join("manifest.json").exists(),
        "{ctx}: the job published v3's global manifest after its last call; the test proves \
         nothing"
    );
    let killed = kill_job(job);
    assert!(!killed.status.success(), "{ctx}: {}", killed.show());
    std::fs::remove_dir_all(tiers.local()).expect("wipe the node-local tiers");
    let o = verify_only(&tiers, "4", ctx);
    assert_eq!(restored_ok(&o, RANKS, ctx), Some(3), "{ctx}\n{}", o.show());
    assert!(
        vdir.join("manifest.json").exists(),
        "{ctx}: the restart should have published v3's global manifest"
    );
    assert!(
        verify_global(&tiers, "stress", ctx).contains(&3),
        "{ctx}: v3 should be durable and verify"
    );

    // 2. The job is killed as soon as cairn_checkpoint returned, while v3's flush is held
    //    back (1 MiB/s for over 1 MiB per rank): the node-local copy, complete when the call
    //    returned, is what the restart takes; it carries the flush on.
    let ctx = "killed during v3's flush, node-local tiers kept";
    let mut tiers = Tiers::new(2);
    tiers.set("CAIRN_FLUSH_EVERY", "1");
    tiers.set("CAIRN_FLUSH_BANDWIDTH", "1M");
    let job = hang_after_v3(&tiers, "1", ctx);
    let killed = kill_job(job);
    assert!(!killed.status.success(), "{ctx}: {}", killed.show());
    let vdir = tiers.global().join("stress/v3");
    assert!(
        !vdir.join("manifest.json").exists(),
        "{ctx}: v3 was durable already; the test proves nothing"
    );
    tiers.extra.retain(|(k, _)| k != "CAIRN_FLUSH_BANDWIDTH");
    let o = verify_only(&tiers, "1", ctx);
    assert_eq!(restored_ok(&o, RANKS, ctx), Some(3), "{ctx}\n{}", o.show());
    assert!(
        verify_global(&tiers, "stress", ctx).contains(&3),
        "{ctx}: the restart should have carried v3's flush on to the global tier"
    );
    assert!(
        temporaries(&tiers.global()).is_empty(),
        "{ctx}: {:?}",
        temporaries(&tiers.global())
    );
}
