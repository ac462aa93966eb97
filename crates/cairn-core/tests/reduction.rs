//! Incremental checkpoints and compression through the engine, without MPI: ranks are threads
//! on the in-process [`Threads`] communicator, simulated nodes are directories. Storage is
//! damaged and deleted for real; what is checked is what restart brings back, bit for bit,
//! and what the stored files and manifests say.

mod common;

use cairn_core::{Config, Engine, OwnedRegion, RegionMut, RegionRef, Shape};
use cairn_format::{block_kind, Manifest, RankIndex, Trailer, TRAILER_LEN};
use common::job;
use std::path::{Path, PathBuf};

const NAME: &str = "field";
/// Elements per rank: 40 blocks of 4 KiB, the last one short.
const LEN: usize = 20_000;

fn config(root: &Path) -> Config {
    Config {
        local: Some(root.join("local")),
        global: root.join("global"),
        fsync_global: false,
        sim_nodes: 2,
        block: 4096,
        incremental: true,
        full_every: 4,
        keep: 1,
        finalize_flush: false,
        ..Config::default()
    }
}

/// The field of `rank` at version `v`: each version rewrites a few blocks, so incrementals
/// store a small part of the field; every fifth element stays zero.
fn field(rank: usize, v: i64) -> Vec<f64> {
    let mut f: Vec<f64> = (0..LEN)
        .map(|i| {
            if i % 5 == 0 {
                0.0
            } else {
                (i * (rank + 1)) as f64 * 0.5
            }
        })
        .collect();
    for u in 1..=v {
        let at = (u as usize * 7919 + rank * 131) % LEN;
        for x in f.iter_mut().skip(at).take(700) {
            *x += u as f64;
        }
    }
    f
}

fn checkpoint(e: &mut Engine, rank: usize, v: i64) {
    let step = [v];
    let f = field(rank, v);
    e.checkpoint(NAME, v, &[RegionRef::new(0, &step), RegionRef::new(1, &f)])
        .unwrap_or_else(|err| panic!("rank {rank} v{v}: {err}"));
}

/// Restart from the newest checkpoint; returns (version restored, step, field).
fn restart(e: &mut Engine) -> (i64, i64, Vec<f64>) {
    let v = e
        .restart_test(NAME)
        .unwrap()
        .expect("a checkpoint to restart from");
    let mut step = [0i64];
    let mut f = vec![-1.0; LEN];
    let got = e
        .restart(
            NAME,
            v,
            &mut [RegionMut::new(0, &mut step), RegionMut::new(1, &mut f)],
        )
        .unwrap();
    (got, step[0], f)
}

fn node_dir(root: &Path, node: usize) -> PathBuf {
    root.join(format!("local/node{node}/{NAME}"))
}

fn manifest(dir: &Path, v: i64) -> Option<Manifest> {
    std::fs::read(dir.join(format!("v{v}/manifest.json")))
        .ok()
        .map(|b| Manifest::decode(&b).expect("manifest decodes"))
}

fn index_of(path: &Path) -> RankIndex {
    let b = std::fs::read(path).unwrap();
    let t = Trailer::decode(&b[b.len() - TRAILER_LEN as usize..], b.len() as u64).unwrap();
    let ix = &b[t.index_offset as usize..(t.index_offset + t.index_len) as usize];
    RankIndex::decode(ix).unwrap()
}

fn versions(dir: &Path) -> Vec<i64> {
    let mut v: Vec<i64> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| {
                e.ok()?
                    .file_name()
                    .to_str()?
                    .strip_prefix('v')?
                    .parse()
                    .ok()
            })
            .collect()
        })
        .unwrap_or_default();
    v.sort_unstable();
    v
}

#[test]
fn chains_follow_full_every_and_restart_bit_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let stats = job(4, &cfg, |rank, e| {
        for v in 1..=10 {
            checkpoint(e, rank, v);
        }
        e.stats()
    });
    // Every 4th checkpoint of the run is full: v1, v5, v9; the others are based on the one
    // before.
    let node0 = node_dir(dir.path(), 0);
    for v in 9..=10 {
        let m = manifest(&node0, v).expect("kept");
        assert_eq!(m.base, (v != 9).then_some(v - 1), "v{v}");
    }
    // keep = 1, but v10 needs v9: both stay, and nothing older does.
    assert_eq!(versions(&node0), vec![9, 10]);
    for s in &stats {
        assert_eq!(s.incrementals, 7);
        // Incrementals store a few changed blocks out of 40: far less than the raw bytes.
        assert!(
            s.bytes_stored * 2 < s.bytes_written,
            "stored {} of {}",
            s.bytes_stored,
            s.bytes_written
        );
    }
    let ix = index_of(&node0.join("v10/rank0.ckpt"));
    let r = &ix.regions[1];
    let counts = r.kind_counts();
    assert!(counts[block_kind::UNCHANGED as usize] > 30, "{counts:?}");
    assert!(r.stored_bytes() < 4 * 4096, "{}", r.stored_bytes());

    let back = job(4, &cfg, |rank, e| {
        let (v, step, f) = restart(e);
        assert_eq!((v, step), (10, 10));
        assert!(f == field(rank, 10), "rank {rank}: field differs");
        // The run goes on incrementally against the restored version.
        checkpoint(e, rank, 11);
        e.stats().incrementals
    });
    assert_eq!(back, vec![1; 4]);
    assert_eq!(manifest(&node0, 11).unwrap().base, Some(10));
    let again = job(4, &cfg, |rank, e| {
        let (v, _, f) = restart(e);
        (v, f == field(rank, 11))
    });
    assert_eq!(again, vec![(11, true); 4]);
}

#[test]
fn a_damaged_block_mid_chain_falls_back_to_a_version_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config {
        keep: 10,
        full_every: 10,
        ..config(dir.path())
    };
    job(4, &cfg, |rank, e| {
        for v in 1..=4 {
            checkpoint(e, rank, v);
        }
    });
    // Damage, in rank 1's part of v2, every stored block of the field that v4 takes from v2.
    let node0 = node_dir(dir.path(), 0);
    let path = node0.join("v2/rank1.ckpt");
    let ix2 = index_of(&path);
    let (ix3, ix4) = (
        index_of(&node0.join("v3/rank1.ckpt")),
        index_of(&node0.join("v4/rank1.ckpt")),
    );
    let mut bytes = std::fs::read(&path).unwrap();
    let mut damaged = 0;
    for b in ix2.regions[1].stored_blocks() {
        let later = |ix: &RankIndex| ix.regions[1].blocks[b.index].kind == block_kind::UNCHANGED;
        if later(&ix3) && later(&ix4) {
            bytes[b.offset as usize] ^= 0x55;
            damaged += 1;
        }
    }
    assert!(damaged > 0, "v4 takes some block from v2");
    std::fs::write(&path, &bytes).unwrap();
    let back = job(4, &cfg, |rank, e| {
        let (v, step, f) = restart(e);
        assert_eq!(step, v);
        (v, f == field(rank, v))
    });
    // v4 and v3 need the damaged blocks; v2 itself is damaged: every rank falls back to v1.
    assert_eq!(back, vec![(1, true); 4]);
}

#[test]
fn flushes_merge_chains_and_recode_for_the_global_tier() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config {
        flush_every: 3,
        compress: "none".into(),
        global_compress: Some("zstd".into()),
        ..config(dir.path())
    };
    job(4, &cfg, |rank, e| {
        for v in 1..=6 {
            checkpoint(e, rank, v);
        }
        e.flush(NAME, 6).unwrap();
    });
    let global = dir.path().join(format!("global/{NAME}"));
    assert_eq!(manifest(&node_dir(dir.path(), 1), 6).unwrap().base, Some(5));
    for v in [3, 6] {
        let m = manifest(&global, v).expect("durable");
        assert_eq!(m.base, None, "global copies are full");
        for r in 0..4 {
            let ix = index_of(&global.join(format!("v{v}/rank{r}.ckpt")));
            assert_eq!(ix.base, None);
            let counts = ix.regions[1].kind_counts();
            assert_eq!(counts[block_kind::UNCHANGED as usize], 0);
            assert!(
                counts[3] + counts[5] > 0,
                "zstd on the global tier: {counts:?}"
            );
        }
    }
    // Lose every node-local copy: restart reads the merged copies from the global tier.
    std::fs::remove_dir_all(dir.path().join("local")).unwrap();
    std::fs::create_dir(dir.path().join("local")).unwrap();
    let back = job(4, &cfg, |rank, e| {
        let (v, _, f) = restart(e);
        let exact = f == field(rank, v);
        // Restored from the global tier: the next checkpoint must be full (no local base).
        checkpoint(e, rank, 7);
        (v, exact, e.stats().incrementals)
    });
    assert_eq!(back, vec![(6, true, 0); 4]);
    assert_eq!(manifest(&node_dir(dir.path(), 0), 7).unwrap().base, None);
}

#[test]
fn a_lost_node_rebuilds_the_whole_chain_from_partner_copies() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config {
        redundancy: "partner".into(),
        full_every: 8,
        keep: 1,
        ..config(dir.path())
    };
    job(4, &cfg, |rank, e| {
        for v in 1..=5 {
            checkpoint(e, rank, v);
        }
    });
    std::fs::remove_dir_all(dir.path().join("local/node1")).unwrap();
    let back = job(4, &cfg, |rank, e| {
        let (v, step, f) = restart(e);
        (v, step, f == field(rank, v))
    });
    assert_eq!(back, vec![(5, 5, true); 4]);
    // The rebuilt node holds the chain again.
    assert_eq!(versions(&node_dir(dir.path(), 1)), vec![1, 2, 3, 4, 5]);
}

#[test]
fn incrementals_are_never_based_on_a_less_protected_version() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config {
        redundancy: "partner".into(),
        redundancy_every: 2,
        full_every: 8,
        keep: 10,
        ..config(dir.path())
    };
    job(4, &cfg, |rank, e| {
        for v in 1..=6 {
            checkpoint(e, rank, v);
        }
    });
    let node0 = node_dir(dir.path(), 0);
    let chain: Vec<(String, Option<i64>)> = (1..=6)
        .map(|v| {
            let m = manifest(&node0, v).unwrap();
            (m.scheme, m.base)
        })
        .collect();
    // Odd versions are stored single, even ones with partner copies. A protected version
    // never rests on a single one (its base would not survive the node loss it survives), so
    // each even version is full; a single version may rest on anything.
    assert_eq!(
        chain,
        vec![
            ("single".to_string(), None),
            ("partner".to_string(), None),
            ("single".to_string(), Some(2)),
            ("partner".to_string(), None),
            ("single".to_string(), Some(4)),
            ("partner".to_string(), None),
        ]
    );
}

/// The bytes of `field(rank, v)`, as a region holds them.
fn field_bytes(rank: usize, v: i64) -> Vec<u8> {
    field(rank, v)
        .iter()
        .flat_map(|x| x.to_ne_bytes())
        .collect()
}

#[test]
fn a_copy_the_caller_kept_is_taken_in_place_only_when_every_block_matches() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    job(4, &cfg, |rank, e| {
        for v in 1..=3 {
            checkpoint(e, rank, v);
        }
    });
    // v3 is an incremental chain (v1, v2, v3). Each rank offers a file said to hold its
    // field as v3 stored it: rank 0 the right bytes, rank 1 one byte changed, rank 2 a
    // FIFO (which must not block the restart), rank 3 a file that is not there.
    let kept = dir.path().join("kept");
    std::fs::create_dir(&kept).unwrap();
    let offer = move |rank: usize| kept.join(format!("field{rank}"));
    std::fs::write(offer(0), field_bytes(0, 3)).unwrap();
    let mut bad = field_bytes(1, 3);
    bad[70_000] ^= 1;
    std::fs::write(offer(1), bad).unwrap();
    let fifo = std::ffi::CString::new(offer(2).to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let got = job(4, &cfg, {
        let offer = offer.clone();
        move |rank, e| {
            let mut step = [0i64];
            let mut sized = |v: i64, shapes: &[Shape]| {
                assert_eq!(v, 3);
                Ok(shapes
                    .iter()
                    .map(|s| OwnedRegion {
                        in_place: Some(offer(rank)),
                        ..OwnedRegion::new(
                            s.id,
                            s.dtype,
                            Box::new(vec![0xAAu8; s.bytes() as usize]),
                        )
                    })
                    .collect())
            };
            let (v, mut bufs) = e
                .restart_sized(NAME, 3, &mut [RegionMut::new(0, &mut step)], &mut sized)
                .unwrap();
            assert_eq!((v, step[0], bufs.len()), (3, 3, 1));
            let b = &mut bufs[0];
            let restored = b.buf.as_mut().as_mut().to_vec();
            (
                b.in_place.clone(),
                restored == field_bytes(rank, 3),
                restored.iter().all(|&x| x == 0xAA),
            )
        }
    });
    // Rank 0's copy matched every block of the chain's index: taken, its buffer unused.
    assert_eq!(got[0], (Some(offer(0)), false, true));
    // The others were restored from the chain into their buffers.
    for (rank, g) in got.iter().enumerate().skip(1) {
        assert_eq!(g, &(None, true, false), "rank {rank}");
    }
}
