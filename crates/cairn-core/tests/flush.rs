//! The DURABLE step and the schedules, without MPI: ranks are threads on the in-process
//! [`Threads`] communicator, simulated nodes are directories. What is checked here is what the
//! stored files say after each step: which versions carry which scheme and state, which are
//! durable, which the cache window kept, and what a failed flush leaves.

mod common;

use cairn_core::{CkptState, Config, Engine, ErrorKind, RegionMut, RegionRef};
use cairn_format::Manifest;
use common::job;
use std::path::Path;

const NAME: &str = "sched";

fn config(root: &Path) -> Config {
    Config {
        local: Some(root.join("local")),
        global: root.join("global"),
        fsync_global: false,
        sim_nodes: 2,
        block: 4096,
        finalize_flush: false,
        ..Config::default()
    }
}

fn data(rank: usize, version: i64, len: usize) -> Vec<u64> {
    (0..len as u64)
        .map(|i| i.wrapping_mul(0x9e37_79b9) ^ (rank as u64) << 40 ^ version as u64)
        .collect()
}

fn checkpoint(e: &mut Engine, rank: usize, v: i64) {
    let d = data(rank, v, 3000);
    e.checkpoint(NAME, v, &[RegionRef::new(0, &d)])
        .unwrap_or_else(|err| panic!("rank {rank} v{v}: {err}"));
}

fn manifest(root: &Path, tier: &str, v: i64) -> Option<Manifest> {
    let p = root.join(tier).join(format!("{NAME}/v{v}/manifest.json"));
    std::fs::read(p)
        .ok()
        .map(|b| Manifest::decode(&b).expect("manifest decodes"))
}

#[test]
fn multi_level_schedule_sets_scheme_state_and_durability_per_version() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config {
        redundancy: "partner".into(),
        redundancy_every: 2,
        flush_every: 3,
        keep: 10,
        ..config(dir.path())
    };
    let states = job(4, &cfg, |rank, e| {
        let mut states = Vec::new();
        for v in 1..=6 {
            checkpoint(e, rank, v);
        }
        // Wait for v6's flush, then ask every version's state.
        e.flush(NAME, 6).unwrap();
        for v in 1..=7 {
            states.push(e.test(NAME, v).unwrap());
        }
        states
    });
    use CkptState::*;
    let want = vec![
        Some(Captured),
        Some(Protected),
        Some(Durable),
        Some(Protected),
        Some(Captured),
        Some(Durable),
        None,
    ];
    assert!(states.iter().all(|s| *s == want), "{states:?}");
    for v in 1..=6 {
        let m = manifest(dir.path(), "local/node0", v).expect("local manifest");
        let redundant = v % 2 == 0;
        assert_eq!(
            (m.scheme.as_str(), m.state),
            if redundant {
                ("partner", Protected)
            } else {
                ("single", Captured)
            },
            "v{v}"
        );
        let partner_copy = dir
            .path()
            .join(format!("local/node1/{NAME}/v{v}/partner"))
            .is_dir();
        assert_eq!(partner_copy, redundant, "v{v}: partner copies");
        let g = manifest(dir.path(), "global", v);
        assert_eq!(
            g.map(|m| (m.state, m.ranks.len())),
            (v % 3 == 0).then_some((Durable, 4)),
            "v{v} on the global tier"
        );
    }
}

#[test]
fn the_cache_window_keeps_a_version_until_its_flush_ends() {
    let dir = tempfile::tempdir().unwrap();
    // A slow global tier: each rank's ~24 KiB part takes about a quarter of a second.
    let cfg = Config {
        keep: 1,
        flush_every: 2,
        flush_bandwidth: 100_000,
        ..config(dir.path())
    };
    let root = dir.path().to_path_buf();
    let seen = job(2, &cfg, move |rank, e| {
        checkpoint(e, rank, 1);
        checkpoint(e, rank, 2); // flush of v2 starts
        checkpoint(e, rank, 3); // the window drops v2, but its flush is still running
        let v2_local = root
            .join(format!("local/node{rank}/{NAME}/v2/rank{rank}.ckpt"))
            .exists();
        e.flush(NAME, 2).unwrap();
        v2_local
    });
    for (rank, v2) in seen.iter().enumerate() {
        assert!(*v2, "rank {rank}: v2 was deleted while being flushed");
    }
    assert!(manifest(dir.path(), "global", 2).is_some(), "v2 is durable");
    // Once durable, v2 left the node-local tier (keep = 1 keeps only v3 there).
    for node in 0..2 {
        let local = dir.path().join(format!("local/node{node}/{NAME}"));
        let mut left: Vec<String> = std::fs::read_dir(&local)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["v3"], "node {node}");
    }
}

#[test]
fn a_failed_flush_is_reported_and_the_version_stays_restorable() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config {
        flush_every: 1,
        ..config(dir.path())
    };
    // Rank 1's copy of v2 cannot be published: a directory sits where its file must go.
    std::fs::create_dir_all(dir.path().join(format!("global/{NAME}/v2/rank1.ckpt/x"))).unwrap();
    let out = job(2, &cfg, |rank, e| {
        checkpoint(e, rank, 1);
        checkpoint(e, rank, 2);
        let waited = e.flush(NAME, 2).map_err(|err| (err.kind, err.msg));
        let state = e.test(NAME, 2).unwrap();
        (waited, state, e.stats().flush_failures)
    });
    for (rank, (waited, state, failures)) in out.iter().enumerate() {
        let (kind, msg) = waited.as_ref().expect_err("the flush must fail");
        assert_eq!(*kind, ErrorKind::Io, "rank {rank}: {msg}");
        assert!(msg.contains("could not be made durable"), "{msg}");
        if rank == 1 {
            assert!(
                msg.contains("rank1.ckpt"),
                "the message names the file: {msg}"
            );
        }
        assert_eq!(*state, Some(CkptState::Protected), "rank {rank}");
        assert_eq!(*failures, 1);
    }
    assert!(manifest(dir.path(), "global", 1).is_some());
    assert!(manifest(dir.path(), "global", 2).is_none(), "v2 published");
    assert!(!dir
        .path()
        .join(format!("global/{NAME}/v2/rank0.ckpt"))
        .exists());
    // v2 is still the newest restorable version, from the node-local tier.
    let got = job(2, &cfg, |rank, e| {
        let v = e.restart_test(NAME).unwrap();
        let mut buf = vec![0u64; 3000];
        e.restart(NAME, 2, &mut [RegionMut::new(0, &mut buf)])
            .unwrap();
        (v, buf == data(rank, 2, 3000))
    });
    assert!(got.iter().all(|g| *g == (Some(2), true)), "{got:?}");
}

#[test]
fn auto_intervals_follow_the_measured_cost() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.set_dotted("checkpoint.seconds", "auto", "test")
        .unwrap();
    cfg.set_dotted("failure.node_mtbf", "2h", "test").unwrap();
    let out = job(2, &cfg, |rank, e| {
        let before = e.checkpoint_interval();
        let first = e.need_checkpoint().unwrap();
        checkpoint(e, rank, 1);
        let after = e.checkpoint_interval().unwrap();
        let second = e.need_checkpoint().unwrap();
        (before, first, after, second)
    });
    for (before, first, after, second) in out {
        assert_eq!(before, Some(0.0), "no cost measured yet");
        assert!(first, "the first call measures the cost");
        // Job MTBF = 2 h / 2 nodes; a checkpoint of a few ms gives an interval of seconds
        // to a minute or so, far below the MTBF.
        assert!(after > 0.01 && after < 600.0, "{after}");
        assert!(!second, "a checkpoint just happened");
    }
    let mut bad = Config {
        sim_nodes: 0,
        ..config(dir.path())
    };
    bad.set_dotted("flush.seconds", "auto", "test").unwrap();
    let err = match Engine::new(Box::new(cairn_comm::Solo), bad) {
        Err(e) => e,
        Ok(_) => panic!("auto without an MTBF was accepted"),
    };
    assert!(
        err.kind == ErrorKind::Config && err.msg.contains("[failure] mtbf"),
        "{err}"
    );
}

#[test]
fn wait_flushes_waits_for_what_the_schedule_started_and_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config {
        flush_every: 2,
        // Slow copies (1 MiB per rank at 4 MiB/s), so the flush of v2 is still under way when
        // wait_flushes is called.
        flush_bandwidth: 4 << 20,
        keep: 4,
        ..config(dir.path())
    };
    let root = dir.path().to_path_buf();
    job(4, &cfg, move |rank, e| {
        for v in 1..=3 {
            let d = data(rank, v, 1 << 17);
            e.checkpoint(NAME, v, &[RegionRef::new(0, &d)]).unwrap();
        }
        e.wait_flushes().unwrap();
        // v2 was scheduled for the global tier and is durable now (test() alone publishes only
        // flushes that have ended, and the copy takes about a quarter of a second); v1 and v3
        // were not scheduled, and nothing started a flush of them.
        assert_eq!(e.test(NAME, 2).unwrap(), Some(CkptState::Durable));
        for v in [1, 3] {
            assert_ne!(e.test(NAME, v).unwrap(), Some(CkptState::Durable), "v{v}");
        }
        if rank == 0 {
            assert!(manifest(&root, "global", 2).is_some());
            assert!(manifest(&root, "global", 3).is_none());
        }
        // Nothing under way: it returns at once.
        e.wait_flushes().unwrap();
    });
}

/// Every rank's flush of v2 commits after `checkpoint` returned, and the job ends before any
/// later call could publish the global manifest (its engines are dropped, not finalized).
/// With every node-local directory gone, the commit records are what a restart agrees on:
/// it restores v2 and publishes its manifest. A version one rank never committed is not
/// taken from the global tier.
#[test]
fn flushed_parts_with_every_commit_record_restart_after_the_job_died_unpublished() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config {
        flush_every: 1,
        ..config(dir.path())
    };
    let ranks = 3;
    let handles: Vec<_> = cairn_comm::Threads::world(ranks)
        .into_iter()
        .enumerate()
        .map(|(rank, comm)| {
            let (cfg, root) = (cfg.clone(), dir.path().to_path_buf());
            std::thread::spawn(move || {
                let mut e = Engine::new(Box::new(comm), cfg).expect("engine");
                checkpoint(&mut e, rank, 1);
                checkpoint(&mut e, rank, 2);
                let done = root.join(format!("global/{NAME}/v2/rank{rank}.done"));
                let t0 = std::time::Instant::now();
                while !done.exists() {
                    assert!(t0.elapsed().as_secs() < 60, "rank {rank}: no commit record");
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                drop(e);
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert!(
        manifest(dir.path(), "global", 2).is_none(),
        "v2 was published"
    );
    std::fs::remove_dir_all(dir.path().join("local")).unwrap();

    // A third version whose copy only rank 0 committed: never a candidate.
    let v3 = dir.path().join(format!("global/{NAME}/v3"));
    std::fs::create_dir_all(&v3).unwrap();
    let v2 = dir.path().join(format!("global/{NAME}/v2"));
    std::fs::copy(v2.join("rank0.ckpt"), v3.join("rank0.ckpt")).unwrap();
    let mut record = Manifest::decode(&std::fs::read(v2.join("rank0.done")).unwrap()).unwrap();
    record.version = 3;
    std::fs::write(v3.join("rank0.done"), record.encode()).unwrap();

    let got = job(ranks, &cfg, |rank, e| {
        let v = e.restart_test(NAME).unwrap();
        let mut buf = vec![0u64; 3000];
        let restored = e.restart(NAME, 2, &mut [RegionMut::new(0, &mut buf)]);
        (
            v,
            restored
                .map(|v| (v, buf == data(rank, 2, 3000)))
                .map_err(|e| e.msg),
        )
    });
    for (rank, (v, restored)) in got.iter().enumerate() {
        assert_eq!(*v, Some(2), "rank {rank}");
        assert_eq!(restored, &Ok((2, true)), "rank {rank}");
    }
    let m = manifest(dir.path(), "global", 2).expect("the restart publishes v2's manifest");
    assert_eq!(m.ranks, (0..ranks as u32).collect::<Vec<_>>());
    assert_eq!(m.state, CkptState::Durable);
}
