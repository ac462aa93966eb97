//! Redundancy across simulated nodes with real MPI processes: `stress` and `heat2d` run with
//! scheme partner, xor or rs, a rank is killed with SIGKILL, the node-local directory of one
//! simulated node (for rs with parity 2: of two nodes of one set) is deleted, and the relaunch
//! must rebuild what the nodes held and restore, bit for bit, a version at least as new as the
//! newest one any rank reported done. Protection the job cannot have is an error at
//! `cairn_init`.

use super::*;

/// Tiers for `nodes` simulated nodes with `[redundancy] scheme` and the given extra settings.
fn redundant_tiers(nodes: usize, scheme: &str, extra: &[(&str, &str)]) -> Tiers {
    let mut t = Tiers::new(nodes);
    t.set("CAIRN_REDUNDANCY_SCHEME", scheme);
    for (k, v) in extra {
        t.set(k, v);
    }
    t
}

/// Ranks are split into contiguous simulated nodes of equal size.
fn node_of(rank: usize, ranks: usize, nodes: usize) -> usize {
    rank * nodes / ranks
}

/// Where the node-local tier keeps a simulated node's data, how a test loses it, and where a
/// rebuilt part is found again.
pub trait NodeStorage {
    /// Delete everything node `n` holds.
    fn lose(&self, n: usize);
    /// `None` if node `n` holds rank `r`'s part of version `v`, else where it should be.
    fn missing_part(&self, n: usize, r: usize, v: i64) -> Option<String>;
}

/// Node directories under [`Tiers::local`].
struct Dirs<'a>(&'a Tiers);

impl NodeStorage for Dirs<'_> {
    fn lose(&self, n: usize) {
        std::fs::remove_dir_all(self.0.local().join(format!("node{n}")))
            .unwrap_or_else(|e| panic!("remove node{n}: {e}"));
    }

    fn missing_part(&self, n: usize, r: usize, v: i64) -> Option<String> {
        let p = self
            .0
            .local()
            .join(format!("node{n}/stress/v{v}/rank{r}.ckpt"));
        (!p.is_file()).then(|| p.display().to_string())
    }
}

/// One scheme end to end: a complete run of v1..v3; a second run that restores v3, goes on and
/// has rank `victim` killed right after its first checkpoint; the loss of the victim's node and
/// of `extra_lost` more nodes; a verifying relaunch.
fn kill_lose_and_rebuild(
    what: &str,
    tiers: &Tiers,
    ranks: usize,
    nodes: usize,
    victim: usize,
    extra_lost: usize,
) {
    kill_lose_and_rebuild_with(
        what,
        tiers,
        &Dirs(tiers),
        (ranks, nodes),
        victim,
        extra_lost,
        &["--mib", "1"],
    );
}

/// `kill_lose_and_rebuild` with the given `stress` arguments (besides the version options),
/// the node-local tier kept in `storage`.
pub(crate) fn kill_lose_and_rebuild_with(
    what: &str,
    tiers: &Tiers,
    storage: &dyn NodeStorage,
    (ranks, nodes): (usize, usize),
    victim: usize,
    extra_lost: usize,
    mib: &[&str],
) {
    let first = run(
        stress_cmd(Some(ranks), &[mib, &["--versions", "3"]].concat(), tiers),
        &format!("{what}: complete run"),
    );
    first.assert_ok();
    let done = done_by_version(&first.stdout);
    assert!(
        (1..=3).all(|v| done.get(&v).is_some_and(|r| r.len() == ranks)),
        "{what}: every rank should report v1..v3 done\n{}",
        first.show()
    );
    assert!(
        !first.stderr.lines().any(|l| l.contains("cairn:")),
        "{what}: a clean run should not warn\n{}",
        first.show()
    );

    let args = [mib, &["--versions", "100000"]].concat();
    let mut job = spawn(
        stress_cmd(Some(ranks), &args, tiers),
        &format!("{what}: run to be killed"),
    );
    let pid = rank_pid(job.pid(), "stress", victim, Duration::from_secs(30))
        .unwrap_or_else(|| panic!("{what}: rank {victim} not found under mpirun"));
    let line = job.wait_line(Duration::from_secs(60), |l| {
        stress_done(l).is_some_and(|(r, _)| r == victim)
    });
    assert!(
        line.is_some(),
        "{what}: rank {victim} reported no checkpoint; saw {:?}",
        job.seen
    );
    kill9(pid);
    let killed = job.finish(Duration::from_secs(60));
    assert!(
        !killed.status.success(),
        "{what}: the run was not killed\n{}",
        killed.show()
    );
    // The second run first restored v3 from the redundant checkpoint of the first.
    assert_eq!(
        restored_ok(&killed, ranks, what),
        Some(3),
        "{}",
        killed.show()
    );
    let newest = done_by_version(&killed.stdout)
        .keys()
        .max()
        .copied()
        .expect("the victim reported a checkpoint");
    assert!(newest >= 4, "{what}\n{}", killed.show());

    let home = node_of(victim, ranks, nodes);
    let lost: Vec<usize> = (0..=extra_lost).map(|i| (home + i) % nodes).collect();
    for n in &lost {
        storage.lose(*n);
    }
    let ctx = format!("{what}, rank {victim} killed, nodes {lost:?} lost");
    let check = run(
        stress_cmd(Some(ranks), &[mib, &["--verify-only"]].concat(), tiers),
        &format!("{ctx}: verify"),
    );
    check.assert_ok();
    let got = restored_ok(&check, ranks, &ctx);
    assert!(
        got.is_some_and(|g| g >= newest && g <= newest + 1),
        "{ctx}: restored {got:?}, but v{newest} was reported done before the kill\n{}\n{}",
        killed.show(),
        check.show()
    );
    assert!(
        check.stderr.contains("rebuilt"),
        "{ctx}: stderr should say what was rebuilt\n{}",
        check.show()
    );
    // The lost nodes hold their parts of the restored version again.
    let v = got.unwrap();
    for n in &lost {
        for r in (0..ranks).filter(|r| node_of(*r, ranks, nodes) == *n) {
            if let Some(part) = storage.missing_part(*n, r, v) {
                panic!("{ctx}: {part} was not rebuilt");
            }
        }
    }
    eprintln!("{ctx}: v{newest} reported done, v{v} restored after the rebuild");
}

#[test]
fn partner_xor_and_rs_rebuild_lost_nodes_after_kill9() {
    let _mpi = mpi_lock();
    let t = redundant_tiers(2, "partner", &[]);
    kill_lose_and_rebuild("partner, 4 ranks on 2 nodes", &t, 4, 2, 1, 0);
    let t = redundant_tiers(2, "xor", &[]);
    kill_lose_and_rebuild("xor, 4 ranks on 2 nodes", &t, 4, 2, 2, 0);
    let t = redundant_tiers(4, "rs", &[("CAIRN_REDUNDANCY_PARITY", "2")]);
    kill_lose_and_rebuild("rs(2+2), 8 ranks on 4 nodes", &t, 8, 4, 5, 1);
}

#[test]
fn incremental_compressed_chains_survive_kill9_and_a_lost_node() {
    let _mpi = mpi_lock();
    let reduce = [
        ("CAIRN_REDUCTION_INCREMENTAL", "true"),
        ("CAIRN_REDUCTION_FULL_EVERY", "4"),
        ("CAIRN_REDUCTION_COMPRESS", "lz4"),
        ("CAIRN_REDUCTION_BLOCK", "16K"),
    ];
    // 10% of the field changes per version: incrementals skip most blocks.
    let args = ["--mib", "2", "--changing", "10"];
    for (scheme, ranks, nodes, victim, extra) in [("partner", 4, 2, 1, 0), ("rs", 8, 4, 6, 1)] {
        let mut t = redundant_tiers(nodes, scheme, &reduce);
        if scheme == "rs" {
            t.set("CAIRN_REDUNDANCY_PARITY", "2");
        }
        let what = format!("{scheme}, incremental lz4, {ranks} ranks on {nodes} nodes");
        kill_lose_and_rebuild_with(&what, &t, &Dirs(&t), (ranks, nodes), victim, extra, &args);
        // The node-local tier holds incremental versions, and they stored little.
        let node0 = t.local().join("node0/stress");
        let mut bases = 0;
        let mut seen = Vec::new();
        for e in std::fs::read_dir(&node0).unwrap().flatten() {
            let m = e.path().join("manifest.json");
            if let Ok(text) = std::fs::read_to_string(&m) {
                seen.push(text.clone());
                let base = text.split("\"base\":").nth(1).unwrap_or("");
                bases += base.trim_start().starts_with(|c: char| c.is_ascii_digit()) as usize;
            }
        }
        assert!(
            bases > 0,
            "{what}: no incremental version on node0: {seen:?}"
        );
    }
}

#[test]
fn heat2d_with_partner_survives_kill9_and_a_lost_node() {
    let _mpi = mpi_lock();
    let (ranks, nodes, victim) = (4, 2, 2);
    let what = "heat2d with partner, 4 ranks on 2 nodes";
    let plain = redundant_tiers(nodes, "partner", &[]);
    let reference = run(
        heat_cmd(ranks, &HEAT, &plain),
        &format!("{what}, uninterrupted"),
    );
    reference.assert_ok();
    let expected = heat_checksum(&reference);

    let tiers = redundant_tiers(nodes, "partner", &[]);
    let mut slow = HEAT.to_vec();
    slow.extend(["--sleep-ms", "3"]);
    let mut job = spawn(
        heat_cmd(ranks, &slow, &tiers),
        &format!("{what}, to be killed"),
    );
    let pid = rank_pid(job.pid(), "heat2d", victim, Duration::from_secs(30))
        .unwrap_or_else(|| panic!("{what}: no process for rank {victim}"));
    let mut seen = 0;
    let last = job.wait_line(Duration::from_secs(60), |l| {
        seen += heat_ckpt_line(l).is_some() as usize;
        seen == 2
    });
    let newest = last
        .as_deref()
        .and_then(heat_ckpt_line)
        .unwrap_or_else(|| panic!("{what}: no second checkpoint; saw {:?}", job.seen));
    kill9(pid);
    let killed = job.finish(Duration::from_secs(60));
    assert!(
        !killed.status.success() && !killed.stdout.contains("final checksum"),
        "{what}: the killed run should not have finished\n{}",
        killed.show()
    );
    let node = node_of(victim, ranks, nodes);
    std::fs::remove_dir_all(tiers.local().join(format!("node{node}"))).unwrap();

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
        from >= newest,
        "{what}: restarted from v{from}, but v{newest} was reported before the kill\n{}",
        again.show()
    );
    assert!(
        again.stderr.contains("rebuilt") && !again.stderr.contains("heat2d: warning"),
        "{what}: node{node}'s parts should have been rebuilt\n{}",
        again.show()
    );
    assert_eq!(
        heat_checksum(&again),
        expected,
        "{what}: the relaunched run ends differently from the uninterrupted one\n{}",
        again.show()
    );
}

/// `stress` under mpirun must stop at `cairn_init` with exit code 5 and a message containing
/// every one of `needles`, before creating any tier.
fn init_fails(tiers: &Tiers, ranks: usize, needles: &[&str], what: &str) {
    let o = run(
        stress_cmd(Some(ranks), &["--mib", "0"], tiers),
        &format!("{what} ({ranks} ranks)"),
    );
    o.assert_exit5();
    assert!(
        o.stderr.contains("cairn_init failed") && needles.iter().all(|n| o.stderr.contains(n)),
        "{what}: the message should contain {needles:?}\n{}",
        o.show()
    );
    assert!(!o.stdout.contains("restored") && !o.stdout.contains("done"));
    assert!(
        !tiers.local().exists() && !tiers.global().exists(),
        "{what}: no tier may be created\n{}",
        o.show()
    );
}

#[test]
fn impossible_protection_fails_at_init() {
    let _mpi = mpi_lock();
    // All ranks on one (real) node: no partner in another failure domain, with MPI or alone.
    let t = redundant_tiers(0, "partner", &[]);
    fails_clearly(
        &t,
        &["--mib", "0"],
        &["cairn_init", "partner", "at least 2 failure domains"],
        "partner on one node",
    );
    assert!(!t.local().exists() && !t.global().exists());
    let t = redundant_tiers(2, "xor", &[("CAIRN_REDUNDANCY_SET_SIZE", "3")]);
    init_fails(
        &t,
        4,
        &["set_size = 3", "only 2"],
        "xor sets of 3 on 2 nodes",
    );
    let t = redundant_tiers(2, "rs", &[("CAIRN_REDUNDANCY_PARITY", "2")]);
    init_fails(
        &t,
        4,
        &["\"rs\"", "2 parity", "parity"],
        "rs parity 2 on 2 nodes",
    );
}
