//! The file API over the engine: 4 ranks (threads) on 2 simulated nodes write files of their
//! own through `route_file`, under every redundancy scheme; a later job (new engines)
//! restarts from them, also after a node's storage is deleted; an invalid rank makes every
//! rank fall back together; output datasets land at their own paths. Incremental parts and
//! LZ4 are on throughout.

mod common;

use cairn_core::files::{FLAG_CHECKPOINT, FLAG_OUTPUT};
use cairn_core::{Config, Engine, ErrorKind, Files, RegionMut, RegionRef};
use common::job;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

const RANKS: usize = 4;

fn config(root: &Path, scheme: &str) -> Config {
    let mut cfg = Config {
        local: Some(root.join("local")),
        global: root.join("global"),
        fsync_global: false,
        sim_nodes: 2,
        keep: 3,
        block: 4096,
        finalize_flush: false,
        // Files change size from version to version: incremental parts and compression must
        // cope with regions that grow, shrink and appear.
        incremental: true,
        ..Config::default()
    };
    cfg.compress = "lz4".to_string();
    cfg.redundancy = scheme.to_string();
    cfg.parity = if scheme == "rs" { 1 } else { 0 };
    cfg
}

/// The bytes rank `rank` writes into file `k` of version `v`: sizes differ per rank, file
/// and version (one file is empty on rank 3), so no two restored files could be confused.
fn content(rank: usize, k: usize, v: i64) -> Vec<u8> {
    let len = if rank == 3 && k == 1 {
        0
    } else {
        1000 * (rank + 1) + 37 * k + 5000 * v as usize
    };
    (0..len)
        .map(|i| (i as u64 * 31 + rank as u64 * 7 + k as u64 * 3 + v as u64) as u8)
        .collect()
}

fn names(rank: usize) -> [String; 2] {
    [format!("out/field.{rank}.h5"), "params.txt".to_string()]
}

/// One checkpoint of files (and a protected step counter) through the file API.
fn write_version(files: &mut Files, e: &mut Engine, rank: usize, v: i64) {
    files
        .start_output(e, "sim", v, FLAG_CHECKPOINT, Some(&format!("ckpt.{v}")))
        .unwrap();
    for (k, n) in names(rank).iter().enumerate() {
        let p = files.route_file(n).unwrap();
        assert_eq!(
            files.route_file(n).unwrap(),
            p,
            "routing twice gives one path"
        );
        assert!(p.starts_with(files.root()), "{}", p.display());
        std::fs::write(&p, content(rank, k, v)).unwrap();
    }
    let step = [v * 10];
    let kept = files
        .complete_output(e, true, &[RegionRef::new(0, &step)])
        .unwrap();
    assert!(kept, "rank {rank} v{v}");
}

/// Restart through the file API and check every file and the step counter.
fn read_back(files: &mut Files, e: &mut Engine, rank: usize, want: i64) {
    let mut step = [0i64];
    let got = files
        .start_restart(e, "sim", &mut [RegionMut::new(0, &mut step)])
        .unwrap()
        .expect("a checkpoint to restart from");
    assert_eq!(got.version, want, "rank {rank}");
    assert_eq!(got.label.as_deref(), Some(format!("ckpt.{want}").as_str()));
    assert_eq!(step[0], want * 10);
    for (k, n) in names(rank).iter().enumerate() {
        let p = files.route_file(n).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        assert!(
            bytes == content(rank, k, want),
            "rank {rank} file {n} of v{want}: {} bytes",
            bytes.len()
        );
    }
    let e2 = files.route_file("never-written.dat").unwrap_err();
    assert_eq!(e2.kind, ErrorKind::NotFound, "{e2}");
    assert!(e2.to_string().contains("params.txt"), "{e2}");
    assert!(files.complete_restart(e, true).unwrap());
}

/// A job that writes versions 1 to `last` of checkpoint "sim" through the file API.
fn write_job(cfg: &Config, last: i64) {
    job(RANKS, cfg, move |rank, e| {
        let mut files = Files::new(e);
        for v in 1..=last {
            write_version(&mut files, e, rank, v);
        }
    });
}

#[test]
fn files_restart_bit_exactly_under_every_scheme_and_after_a_lost_node() {
    for scheme in ["single", "partner", "xor", "rs"] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config(dir.path(), scheme);
        job(RANKS, &cfg, |rank, e| {
            let mut files = Files::new(e);
            // Outside output and restart, a name routes to itself.
            assert_eq!(files.route_file("a/b").unwrap(), PathBuf::from("a/b"));
            for v in 1..=2 {
                write_version(&mut files, e, rank, v);
            }
            // The staging directory is gone once the files are stored.
            assert!(!files.root().join("out-sim-v2").exists());
        });
        job(RANKS, &cfg, |rank, e| {
            let mut files = Files::new(e);
            assert_eq!(files.have_restart(e, "sim").unwrap(), Some(2));
            read_back(&mut files, e, rank, 2);
        });
        if scheme == "single" {
            continue;
        }
        lose_node_1_and_go_on(dir.path(), &cfg);
    }
}

/// Node 1 is lost: its storage (parts, copies, parity, staging, adopted files) is deleted
/// for real. A new job restores v2 and goes on checkpointing files (v3), which the next
/// job restores.
fn lose_node_1_and_go_on(root: &Path, cfg: &Config) {
    std::fs::remove_dir_all(root.join("local/node1")).unwrap();
    job(RANKS, cfg, |rank, e| {
        let mut files = Files::new(e);
        read_back(&mut files, e, rank, 2);
        write_version(&mut files, e, rank, 3);
    });
    job(RANKS, cfg, |rank, e| {
        read_back(&mut Files::new(e), e, rank, 3);
    });
}

#[test]
fn an_invalid_rank_at_complete_restart_makes_every_rank_fall_back() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "partner");
    write_job(&cfg, 3);
    job(RANKS, &cfg, |rank, e| {
        let mut files = Files::new(e);
        let mut step = [0i64];
        let got = files
            .start_restart(e, "sim", &mut [RegionMut::new(0, &mut step)])
            .unwrap()
            .unwrap();
        assert_eq!(got.version, 3);
        // Rank 2 finds its files of v3 unusable; every rank passes over v3 with it.
        assert!(!files.complete_restart(e, rank != 2).unwrap());
        assert_eq!(files.have_restart(e, "sim").unwrap(), Some(2));
        let got = files
            .start_restart(e, "sim", &mut [RegionMut::new(0, &mut step)])
            .unwrap()
            .unwrap();
        assert_eq!(got.version, 2);
        assert!(!files.complete_restart(e, rank != 0).unwrap());
        read_back(&mut files, e, rank, 1);
        // Every version passed over: nothing is left to restart from.
        files.drop_version("sim", 1);
        assert_eq!(files.have_restart(e, "sim").unwrap(), None);
        assert!(files
            .start_restart(e, "sim", &mut [RegionMut::new(0, &mut step)])
            .unwrap()
            .is_none());
    });
}

#[test]
fn a_named_older_version_restarts_and_the_run_goes_on_from_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "xor");
    write_job(&cfg, 3);
    job(RANKS, &cfg, |rank, e| {
        let mut files = Files::new(e);
        let mut step = [0i64];
        // A version the application names (VeloC restarts version N): the newest up to 2.
        let got = files
            .start_restart_upto(e, "sim", 2, &mut [RegionMut::new(0, &mut step)], false)
            .unwrap()
            .unwrap();
        assert_eq!((got.version, step[0]), (2, 20));
        assert!(got.held.is_empty());
        let p = files.route_file(&names(rank)[0]).unwrap();
        assert!(std::fs::read(&p).unwrap() == content(rank, 0, 2));
        // SCR 1.x looks a file up by its bare name, wherever it was routed from.
        assert_eq!(files.route_file(&format!("field.{rank}.h5")).unwrap(), p);
        let err = files.route_file("field.h5").unwrap_err();
        assert_eq!(err.kind, ErrorKind::NotFound, "{err}");
        assert_eq!(files.restart_files().len(), 2);
        assert!(files.complete_restart(e, true).unwrap());
        // As with any restart, the run continues from v2: v3 is not its future.
        assert_eq!(files.have_restart(e, "sim").unwrap(), Some(2));
        // With hold, a region not protected now is read into a buffer of its own.
        let mut got = files
            .start_restart_upto(e, "sim", 2, &mut [], true)
            .unwrap()
            .unwrap();
        assert_eq!(got.version, 2);
        let held = got.held.get_mut(&0).expect("region 0 is held");
        assert_eq!(held.bytes(), &20i64.to_ne_bytes()[..]);
        assert!(files.complete_restart(e, true).unwrap());
        // Without, it fails the restart as before.
        let err = files
            .start_restart_upto(e, "sim", 2, &mut [], false)
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::Mismatch, "{err}");
    });
}

#[test]
fn an_invalid_or_unwritten_output_is_not_kept_on_any_rank() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "single");
    job(RANKS, &cfg, |rank, e| {
        let mut files = Files::new(e);
        write_version(&mut files, e, rank, 1);
        // Rank 1 reports failure.
        files
            .start_output(e, "sim", 2, FLAG_CHECKPOINT, None)
            .unwrap();
        let p = files.route_file("x").unwrap();
        std::fs::write(&p, b"x").unwrap();
        assert!(!files.complete_output(e, rank != 1, &[]).unwrap());
        // Rank 3 routes a file and never writes it.
        files
            .start_output(e, "sim", 3, FLAG_CHECKPOINT, None)
            .unwrap();
        let p = files.route_file("y").unwrap();
        if rank != 3 {
            std::fs::write(&p, b"y").unwrap();
        }
        assert!(!files.complete_output(e, true, &[]).unwrap());
        assert_eq!(files.have_restart(e, "sim").unwrap(), Some(1));
        // State errors are the same on every rank and leave the API usable.
        let err = files.complete_output(e, true, &[]).unwrap_err();
        assert_eq!(err.kind, ErrorKind::State, "{err}");
        let err = files
            .start_output(e, "../bad", 4, FLAG_CHECKPOINT, None)
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidArgument, "{err}");
        let err = files.start_output(e, "sim", 4, 0, None).unwrap_err();
        assert!(err.to_string().contains("flags"), "{err}");
        // A protected region may not use the ids the file API reserves.
        files
            .start_output(e, "sim", 4, FLAG_CHECKPOINT, None)
            .unwrap();
        let err = files
            .complete_output(e, true, &[RegionRef::new(-1, &[1u8])])
            .unwrap_err();
        assert!(err.to_string().contains("negative id"), "{err}");
    });
}

#[test]
fn output_datasets_are_copied_to_their_paths_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "partner");
    let results = dir.path().join("results");
    let res = results.clone();
    job(RANKS, &cfg, move |rank, e| {
        let mut files = Files::new(e);
        let mine = res.join(format!("step5/rank{rank}.dat"));
        // An output only: copied to its own path, not a checkpoint.
        files.start_output(e, "viz", 5, FLAG_OUTPUT, None).unwrap();
        let p = files.route_file(mine.to_str().unwrap()).unwrap();
        assert_ne!(p, mine);
        std::fs::write(&p, content(rank, 0, 5)).unwrap();
        assert!(files.complete_output(e, true, &[]).unwrap());
        assert_eq!(std::fs::read(&mine).unwrap(), content(rank, 0, 5));
        assert_eq!(files.have_restart(e, "viz").unwrap(), None);
        // Both: a checkpoint, and its files at their paths.
        let both = res.join(format!("step6/rank{rank}.dat"));
        files
            .start_output(e, "viz", 6, FLAG_CHECKPOINT | FLAG_OUTPUT, None)
            .unwrap();
        let p = files.route_file(both.to_str().unwrap()).unwrap();
        std::fs::write(&p, content(rank, 0, 6)).unwrap();
        assert!(files.complete_output(e, true, &[]).unwrap());
        assert_eq!(std::fs::read(&both).unwrap(), content(rank, 0, 6));
        assert_eq!(files.have_restart(e, "viz").unwrap(), Some(6));
        // An output that cannot reach its path (a file stands where a directory must be) is
        // an error on every rank, and its staged files stay where the error says.
        let blocker = res.join(format!("blocker{rank}"));
        std::fs::write(&blocker, b"a file").unwrap();
        let unreachable = blocker.join("sub/out.dat");
        files.start_output(e, "viz", 7, FLAG_OUTPUT, None).unwrap();
        let staged = files.route_file(unreachable.to_str().unwrap()).unwrap();
        std::fs::write(&staged, b"only copy").unwrap();
        let err = files.complete_output(e, true, &[]).unwrap_err();
        assert!(
            err.to_string().contains("the output files are kept in"),
            "{err}"
        );
        assert_eq!(std::fs::read(&staged).unwrap(), b"only copy");
    });
    // No temporaries are left beside the outputs.
    for d in ["step5", "step6"] {
        let left: Vec<_> = std::fs::read_dir(results.join(d))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| !n.starts_with("rank"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}

#[test]
fn deleted_versions_are_gone_from_every_tier_and_bases_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), "partner");
    cfg.flush_every = 1;
    cfg.flush_sync = true;
    job(RANKS, &cfg, |rank, e| {
        let mut files = Files::new(e);
        for v in 1..=3 {
            write_version(&mut files, e, rank, v);
        }
        // v2 and v3 are incrementals: v3 is based on v2, v2 on v1.
        let err = e.delete("sim", 2).unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidArgument, "{err}");
        assert!(err.to_string().contains("v3 is an incremental"), "{err}");
        e.delete("sim", 3).unwrap();
        assert_eq!(files.have_restart(e, "sim").unwrap(), Some(2));
        // Deleting what is not there is no error.
        e.delete("sim", 3).unwrap();
        e.delete("sim", 2).unwrap();
        read_back(&mut files, e, rank, 1);
        // The next checkpoint is full again: its base is gone.
        write_version(&mut files, e, rank, 4);
    });
    // The paths checked are the ones the versions kept do have.
    for v in [1, 4] {
        assert!(dir.path().join(format!("global/sim/v{v}")).is_dir(), "v{v}");
        assert!(
            dir.path().join(format!("local/node1/sim/v{v}")).is_dir(),
            "v{v}"
        );
    }
    for v in [2, 3] {
        let gone = |p: PathBuf| !p.exists();
        assert!(
            gone(dir.path().join(format!("global/sim/v{v}"))),
            "v{v} global"
        );
        for node in 0..2 {
            assert!(
                gone(dir.path().join(format!("local/node{node}/sim/v{v}"))),
                "v{v} node {node}"
            );
        }
    }
    job(RANKS, &cfg, |rank, e| {
        read_back(&mut Files::new(e), e, rank, 4);
    });
}

/// The files of rank `rank`'s part of `sim` v`v` on node `node`'s local tier that the tier
/// keeps as they were written (adopted), with their lengths.
fn adopted(root: &Path, node: usize, rank: usize, v: i64) -> Vec<(u64, PathBuf)> {
    use cairn_tier::{DirTier, Scope, Tier};
    let tier = DirTier::open_existing(
        "local",
        root.join(format!("local/node{node}")),
        Scope::NodeLocal,
    )
    .unwrap();
    let r = tier.open(&format!("sim/v{v}/rank{rank}.ckpt")).unwrap();
    r.files().into_iter().map(|(_, len, p)| (len, p)).collect()
}

#[test]
fn uncompressed_files_are_kept_where_they_were_written_and_restart_under_every_scheme() {
    for scheme in ["single", "partner", "xor", "rs"] {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = config(dir.path(), scheme);
        cfg.compress = "none".to_string();
        // Full checkpoints: an incremental one reads the files and stores the blocks that
        // changed instead (checked below).
        cfg.incremental = false;
        write_job(&cfg, 2);
        for rank in 0..RANKS {
            // Ranks 0, 1 are on node 0 and 2, 3 on node 1; each routed two files.
            let files = adopted(dir.path(), rank / 2, rank, 2);
            let lens: Vec<u64> = files.iter().map(|f| f.0).collect();
            let want: Vec<u64> = (0..2).map(|k| content(rank, k, 2).len() as u64).collect();
            assert_eq!(lens, want, "{scheme}: rank {rank}'s files were not adopted");
            assert_eq!(std::fs::read(&files[0].1).unwrap(), content(rank, 0, 2));
        }
        let root = dir.path().to_path_buf();
        job(RANKS, &cfg, move |rank, e| {
            // The restart hands back the stored files themselves, read-only.
            let mut files = Files::new(e);
            let mut step = [0i64];
            files
                .start_restart(e, "sim", &mut [RegionMut::new(0, &mut step)])
                .unwrap()
                .unwrap();
            let stored = adopted(&root, rank / 2, rank, 2);
            for (k, n) in names(rank).iter().enumerate() {
                let p = files.route_file(n).unwrap();
                assert_eq!(p, stored[k].1, "rank {rank}: {n} was copied");
                let mode = std::fs::metadata(&p).unwrap().permissions().mode();
                assert_eq!(mode & 0o777, 0o400, "{}", p.display());
            }
            assert!(files.complete_restart(e, true).unwrap());
            read_back(&mut files, e, rank, 2);
        });
        if scheme == "single" {
            // A byte of an adopted file changed on disk: its checksum catches it, and the
            // restart falls back to the version before.
            let (_, path) = adopted(dir.path(), 0, 1, 2).remove(0);
            let mut bytes = std::fs::read(&path).unwrap();
            bytes[700] ^= 0x40;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
            std::fs::write(&path, bytes).unwrap();
            job(RANKS, &cfg, |rank, e| {
                read_back(&mut Files::new(e), e, rank, 1)
            });
            // Flushed to the global tier, a part with adopted files is one ordinary file
            // there, and restarts when every node-local tier is gone.
            let dir = tempfile::tempdir().unwrap();
            let mut cfg = config(dir.path(), scheme);
            cfg.compress = "none".to_string();
            cfg.incremental = false;
            cfg.flush_every = 1;
            write_job(&cfg, 2);
            std::fs::remove_dir_all(dir.path().join("local")).unwrap();
            job(RANKS, &cfg, |rank, e| {
                read_back(&mut Files::new(e), e, rank, 2)
            });
            continue;
        }
        // Node 1 is lost: its adopted files go with it and are rebuilt from redundancy.
        lose_node_1_and_go_on(dir.path(), &cfg);
    }
}

#[test]
fn incremental_checkpoints_read_the_files_instead_of_keeping_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), "single");
    cfg.compress = "none".to_string();
    write_job(&cfg, 2);
    for rank in 0..RANKS {
        // Version 1 is full: its files are kept where they were written. Version 2 is
        // incremental: its part stores the blocks that changed, and holds no file.
        assert_eq!(
            adopted(dir.path(), rank / 2, rank, 1).len(),
            2,
            "rank {rank}"
        );
        assert!(
            adopted(dir.path(), rank / 2, rank, 2).is_empty(),
            "rank {rank}"
        );
    }
    job(RANKS, &cfg, |rank, e| {
        read_back(&mut Files::new(e), e, rank, 2)
    });
}

/// The staging directories are this user's alone: a `.files` directory planted in a node's
/// directory as a symbolic link (to a place another user chose) is refused at
/// `start_output` with a message naming it, on every rank, and nothing is written where it
/// points; a staging directory others may write is made private again.
#[test]
fn a_planted_staging_directory_is_refused_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "single");
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let (root, target) = (dir.path().to_path_buf(), elsewhere.clone());
    let errors = job(RANKS, &cfg, move |rank, e| {
        let node = root.join(format!("local/node{}", e.topology().node));
        let files_dir = node.join(".files");
        if rank == 0 {
            let _ = std::fs::remove_dir_all(&files_dir);
            std::os::unix::fs::symlink(&target, &files_dir).unwrap();
        }
        e.all_agree(true).unwrap();
        let mut files = Files::new(e);
        files
            .start_output(e, "sim", 1, FLAG_CHECKPOINT, None)
            .err()
            .map(|err| (rank, err.msg))
    });
    for err in errors {
        let (rank, msg) = err.expect("start_output refused");
        if rank == 0 || rank == 1 {
            // Ranks 0 and 1 share node 0, whose .files is the link.
            assert!(
                msg.contains(".files") && msg.contains("symbolic link"),
                "rank {rank}: {msg}"
            );
        }
    }
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    // A staging directory others may write is made private.
    let files_dir = dir.path().join("local/node0/.files");
    std::fs::remove_file(&files_dir).unwrap();
    std::fs::create_dir(&files_dir).unwrap();
    std::fs::set_permissions(&files_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let modes = job(RANKS, &cfg, move |rank, e| {
        let mut files = Files::new(e);
        write_version(&mut files, e, rank, 1);
        // Still there while this rank's Files lives (it removes it, empty, when dropped).
        let staging = files.root().parent().unwrap().to_path_buf();
        std::fs::metadata(staging).unwrap().permissions().mode() & 0o777
    });
    assert!(modes.iter().all(|m| *m == 0o700), "{modes:?}");
}

#[test]
fn a_checkpoint_of_another_rank_count_is_not_offered() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "single");
    write_job(&cfg, 2);
    // Half the ranks: nothing can be restored; the file API offers nothing (rank 0 logs
    // why), and the engine's own restart test names the checkpoint.
    let got = job(RANKS / 2, &cfg, |_, e| {
        let mut files = Files::new(e);
        (
            files.have_restart(e, "sim").unwrap(),
            e.restart_test("sim").unwrap_err(),
        )
    });
    for (offered, err) in got {
        assert_eq!(offered, None);
        assert_eq!(err.kind, ErrorKind::Mismatch, "{err}");
        assert!(
            err.msg.contains(&format!("written by {RANKS} ranks")),
            "{err}"
        );
    }
}
