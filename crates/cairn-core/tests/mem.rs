//! The engine with its node-local tier in shared memory (`[tiers] local = "mem"`): ranks are
//! threads, simulated nodes are separate shared-memory stores. Checkpoints are written into
//! the stores, found again by new engines, and a store is wiped for real (a lost node) to
//! show redundancy rebuilding it.
//!
//! One test function: stores are named by the job (`CAIRN_JOB`, process-wide), so scenarios
//! that ran in parallel would share stores.

mod common;

use cairn_core::{memstore, Config, Engine, RegionMut, RegionRef};
use cairn_tier::cairn_shm::{Store, StoreOwner};
use cairn_tier::{MemTier, Tier};
use common::job;

const LEN: usize = 50_000;

fn field(rank: usize, v: i64) -> Vec<f64> {
    (0..LEN)
        .map(|i| (i as f64 + 0.25) * (rank + 1) as f64 + v as f64 * 1e-3)
        .collect()
}

fn checkpoint(e: &mut Engine, rank: usize, v: i64) {
    let f = field(rank, v);
    e.checkpoint("m", v, &[RegionRef::new(0, &[v]), RegionRef::new(1, &f)])
        .unwrap_or_else(|err| panic!("rank {rank} v{v}: {err}"));
}

fn restart(e: &mut Engine) -> (i64, Vec<f64>) {
    let v = e.restart_test("m").unwrap().expect("a checkpoint");
    let mut step = [0i64];
    let mut f = vec![0.0; LEN];
    e.restart(
        "m",
        v,
        &mut [RegionMut::new(0, &mut step), RegionMut::new(1, &mut f)],
    )
    .unwrap();
    assert_eq!(step[0], v);
    (v, f)
}

struct Wipe(Vec<String>);
impl Drop for Wipe {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = Store::wipe(n, None);
        }
    }
}

#[test]
fn checkpoints_live_in_node_stores_and_survive_a_lost_node() {
    std::env::set_var("CAIRN_JOB", format!("enginetest{}", std::process::id()));
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = Config {
        local: None,
        local_mem: true,
        global: dir.path().join("global"),
        fsync_global: false,
        sim_nodes: 2,
        keep: 2,
        finalize_flush: false,
        redundancy: "partner".into(),
        block: 16 << 10,
        compress: "lz4".into(),
        ..Config::default()
    };
    cfg.mem.size = 16 << 20;
    cfg.mem.chunk = 64 << 10;
    let names: Vec<String> = (0..2)
        .map(|n| memstore::store_config(&cfg, StoreOwner::Node(n)).name)
        .collect();
    let _wipe = Wipe(names.clone());
    for n in &names {
        let _ = Store::wipe(n, None);
    }

    job(4, &cfg, |rank, e| {
        for v in 1..=3 {
            checkpoint(e, rank, v);
        }
    });
    // Each simulated node has its own store, holding its ranks' parts and its partners'.
    for (n, name) in names.iter().enumerate() {
        let shm = std::path::Path::new("/dev/shm").join(name.trim_start_matches('/'));
        let meta = std::fs::metadata(&shm).unwrap_or_else(|e| panic!("{}: {e}", shm.display()));
        use std::os::unix::fs::MetadataExt;
        assert_eq!(meta.mode() & 0o777, 0o600);
        let t = MemTier::open(
            "local",
            &memstore::store_config(&cfg, StoreOwner::Node(n as u32)),
        )
        .unwrap();
        // keep = 2: v1 was deleted once v3 was complete.
        assert_eq!(t.list("m").unwrap(), vec!["v2", "v3"], "node {n}");
        assert!(t.exists("m/v3/manifest.json"));
    }
    // Nothing reached the global tier: no flush was asked for.
    assert!(!dir.path().join("global/m").exists());

    // New engines (a restarted job) find v3 in the stores.
    let got = job(4, &cfg, |rank, e| (rank, restart(e)));
    for (rank, (v, f)) in got {
        assert_eq!(v, 3);
        assert!(f == field(rank, 3), "rank {rank}");
    }

    // Node 1 is lost: its store is removed. Partner copies on node 0 rebuild its ranks.
    Store::wipe(&names[1], None).unwrap();
    let got = job(4, &cfg, |rank, e| (rank, restart(e)));
    for (rank, (v, f)) in got {
        assert_eq!(v, 3, "rank {rank}");
        assert!(f == field(rank, 3), "rank {rank} after losing node 1");
    }
    // And checkpointing goes on in the re-created store.
    job(4, &cfg, |rank, e| checkpoint(e, rank, 4));
    let got = job(4, &cfg, |rank, e| (rank, restart(e)));
    for (rank, (v, f)) in got {
        assert_eq!(v, 4);
        assert!(f == field(rank, 4), "rank {rank}");
    }
}
