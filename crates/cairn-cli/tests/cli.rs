//! The `cairn` binary's list, inspect and verify on checkpoints written by the engine: output,
//! JSON, damage and loss detection, and exit codes.

use cairn_comm::Threads;
use cairn_core::{Config, Dtype, Engine, RegionRef};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn config(root: &Path) -> Config {
    Config {
        local: Some(root.join("local")),
        global: root.join("global"),
        fsync_global: false,
        chunk: 4096,
        ..Config::default()
    }
}

fn field(rank: usize, version: i64) -> Vec<f64> {
    (0..2000)
        .map(|i| (i * 3 + rank * 11) as f64 + version as f64 / 7.0)
        .collect()
}

fn as_bytes(x: &[f64]) -> Vec<u8> {
    x.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn save(e: &mut Engine, rank: usize, name: &str, v: i64) {
    let f = as_bytes(&field(rank, v));
    let step = v.to_le_bytes();
    e.checkpoint(
        name,
        v,
        &[
            RegionRef {
                id: 0,
                dtype: Dtype::Int64,
                bytes: &step,
            },
            RegionRef {
                id: 1,
                dtype: Dtype::Double,
                bytes: &f,
            },
        ],
    )
    .unwrap();
}

/// Versions of `name` from `size` ranks on `nodes` simulated nodes, every 2nd one flushed to
/// the global tier.
fn write_multi(root: &Path, size: usize, nodes: usize, name: &str, versions: &[i64]) {
    let cfg = Config {
        sim_nodes: nodes,
        flush_every: 2,
        ..config(root)
    };
    let threads: Vec<_> = Threads::world(size)
        .into_iter()
        .enumerate()
        .map(|(rank, comm)| {
            let (cfg, name, versions) = (cfg.clone(), name.to_string(), versions.to_vec());
            std::thread::spawn(move || {
                let mut e = Engine::new(Box::new(comm), cfg).unwrap();
                for v in versions {
                    save(&mut e, rank, &name, v);
                }
                e.finalize().unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

fn write_solo(root: &Path, name: &str, versions: &[i64]) {
    let mut e = Engine::new(Box::new(cairn_comm::Solo), config(root)).unwrap();
    for &v in versions {
        save(&mut e, 0, name, v);
    }
    e.finalize().unwrap();
}

/// Run `cairn` with no CAIRN_* variables from the test's environment.
fn cairn(root: &Path, args: &[&str]) -> Output {
    cairn_env(root, args, &[])
}

fn cairn_env(root: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cairn"));
    for (k, _) in std::env::vars() {
        if k.starts_with("CAIRN_") {
            cmd.env_remove(k);
        }
    }
    let local = root.join("local");
    let global = root.join("global");
    if !env.iter().any(|(k, _)| *k == "CAIRN_TIERS_GLOBAL") {
        cmd.arg("--global").arg(&global);
    }
    cmd.arg("--local")
        .arg(&local)
        .args(args)
        .envs(env.iter().copied());
    cmd.output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exited normally")
}

fn rank_file(root: &Path, node: usize, name: &str, v: i64, rank: usize) -> PathBuf {
    root.join(format!("local/node{node}/{name}/v{v}/rank{rank}.ckpt"))
}

#[test]
fn empty_tiers_are_reported_and_left_uncreated() {
    let d = tempfile::tempdir().unwrap();
    let o = cairn(d.path(), &["list"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.starts_with("no checkpoints under "), "{out}");
    assert!(
        out.contains(&d.path().join("local").display().to_string()),
        "{out}"
    );
    assert!(
        out.contains(&d.path().join("global").display().to_string()),
        "{out}"
    );
    let o = cairn(d.path(), &["list", "--json"]);
    assert_eq!(stdout(&o).trim(), "[]");
    let o = cairn(d.path(), &["verify"]);
    assert_eq!(code(&o), 0);
    assert!(!d.path().join("local").exists() && !d.path().join("global").exists());
}

#[test]
fn list_inspect_and_verify_healthy_checkpoints() {
    let d = tempfile::tempdir().unwrap();
    write_multi(d.path(), 4, 2, "heat", &[10, 20]);
    write_solo(d.path(), "aux", &[3]);

    let o = cairn(d.path(), &["list"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("VERSION  STATE"),
        "{out}"
    );
    for w in ["TIERS", "RANKS", "SIZE", "CREATED"] {
        assert!(lines[0].contains(w), "{out}");
    }
    assert!(
        lines[1].starts_with("aux ") && lines[1].contains("protected"),
        "{out}"
    );
    assert!(lines[1].contains("local(1 node)") && lines[1].contains("1/1"));
    assert!(lines[2].starts_with("heat ") && lines[2].contains(" 10 "));
    assert!(lines[2].contains("protected") && lines[2].contains("local(2 nodes)"));
    assert!(lines[2].contains("4/4"), "{out}");
    assert!(lines[3].contains(" 20 ") && lines[3].contains("durable"));
    assert!(lines[3].contains("local(2 nodes), global"), "{out}");
    assert_eq!(lines.len(), 4, "{out}");

    let o = cairn(d.path(), &["list", "heat", "--json"]);
    assert_eq!(code(&o), 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let arr = v.as_array().unwrap();
    assert_eq!(arr.len(), 2);
    assert_eq!(arr[1]["name"], "heat");
    assert_eq!(arr[1]["version"], 20);
    assert_eq!(arr[1]["state"], "durable");
    assert_eq!(arr[1]["world_size"], 4);
    assert_eq!(arr[1]["ranks"], serde_json::json!([0, 1, 2, 3]));
    assert!(arr[1]["bytes"].as_u64().unwrap() > 4 * 16_008);

    let o = cairn(d.path(), &["inspect", "heat", "20"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.starts_with("checkpoint heat v20\n"), "{out}");
    assert!(out.contains("state      durable"), "{out}");
    assert!(out.contains("4 present of 4, on 2 nodes"), "{out}");
    assert!(out.contains("rank 3  local node1"), "{out}");
    assert!(out.contains("rank 3  global"), "{out}");
    assert!(out.contains("double  x 2000"), "{out}");
    assert!(out.contains("4 chunks"), "{out}");
    let first = cairn_format::checksum(&as_bytes(&field(2, 20))[..4096]);
    assert!(out.contains(&format!("first {first:016x}")), "{out}");

    let o = cairn(d.path(), &["inspect", "heat", "20", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["record"]["state"], "durable");
    assert_eq!(v["manifests"].as_array().unwrap().len(), 3);
    let files = v["files"].as_array().unwrap();
    assert_eq!(files.len(), 8);
    assert_eq!(files[0]["regions"][1]["chunks"], 4);

    let o = cairn(d.path(), &["verify"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("heat v20") && out.contains("OK"), "{out}");
    assert!(
        out.contains("3 checkpoints checked: 3 OK, 0 damaged, 0 incomplete"),
        "{out}"
    );
    let o = cairn(d.path(), &["verify", "heat", "10", "--json"]);
    assert_eq!(code(&o), 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1);
    assert_eq!(v[0]["verdict"], "ok");
}

#[test]
fn a_flipped_byte_fails_verify_with_exit_1() {
    let d = tempfile::tempdir().unwrap();
    write_multi(d.path(), 2, 1, "heat", &[1]);
    assert_eq!(code(&cairn(d.path(), &["verify"])), 0);

    let path = rank_file(d.path(), 0, "heat", 1, 1);
    let mut b = std::fs::read(&path).unwrap();
    // Header (16 bytes), region 0 (8 bytes), then region 1's chunks of 4096 bytes.
    b[16 + 8 + 4096 * 3 + 5] ^= 0x20;
    std::fs::write(&path, &b).unwrap();

    let o = cairn(d.path(), &["verify"]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("heat v1") && out.contains("DAMAGED"), "{out}");
    assert!(out.contains("rank 1 (local node0)"), "{out}");
    assert!(
        out.contains("chunk 3 of region 1 fails its checksum"),
        "{out}"
    );
    assert!(out.contains(&path.display().to_string()), "{out}");
    assert!(out.contains("1/2 rank files intact"), "{out}");

    let o = cairn(d.path(), &["verify", "heat", "--json"]);
    assert_eq!(code(&o), 1);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v[0]["verdict"], "damaged");
    let bad = v[0]["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["ok"] == false)
        .unwrap();
    assert_eq!(
        (bad["rank"].as_u64(), bad["chunk"].as_u64()),
        (Some(1), Some(3))
    );
    assert_eq!(bad["region"], 1);

    // Repaired, it is clean again.
    b[16 + 8 + 4096 * 3 + 5] ^= 0x20;
    std::fs::write(&path, &b).unwrap();
    assert_eq!(code(&cairn(d.path(), &["verify", "heat", "1"])), 0);
}

#[test]
fn a_lost_node_directory_shows_as_incomplete() {
    let d = tempfile::tempdir().unwrap();
    write_multi(d.path(), 4, 2, "heat", &[10, 20]);
    std::fs::remove_dir_all(d.path().join("local/node1")).unwrap();

    let o = cairn(d.path(), &["list"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    let v10 = out
        .lines()
        .find(|l| l.starts_with("heat ") && l.contains(" 10 "));
    let v10 = v10.unwrap_or_else(|| panic!("{out}"));
    assert!(v10.contains("incomplete") && v10.contains("2/4"), "{out}");
    assert!(v10.contains("local(1 node)"), "{out}");
    // v20 was flushed: the global copy still makes it durable.
    let v20 = out.lines().find(|l| l.contains(" 20 ")).unwrap();
    assert!(v20.contains("durable"), "{out}");
    assert!(
        out.contains("heat v10: 2 of 4 ranks (2-3) have no complete copy on any tier"),
        "{out}"
    );

    let o = cairn(d.path(), &["verify"]);
    assert_eq!(code(&o), 1);
    assert!(stdout(&o).contains("INCOMPLETE"), "{}", stdout(&o));
}

#[test]
fn a_deleted_rank_file_is_damage() {
    let d = tempfile::tempdir().unwrap();
    write_solo(d.path(), "solo", &[1, 2]);
    let path = rank_file(d.path(), 0, "solo", 2, 0);
    std::fs::remove_file(&path).unwrap();
    let out = stdout(&cairn(d.path(), &["list"]));
    assert!(
        out.lines()
            .any(|l| l.starts_with("solo ") && l.contains(" 2 ") && l.contains("incomplete")),
        "{out}"
    );
    let o = cairn(d.path(), &["verify", "solo"]);
    assert_eq!(code(&o), 1);
    let out = stdout(&o);
    assert!(out.contains("missing (listed in the manifest)"), "{out}");
    assert!(out.contains(&path.display().to_string()), "{out}");
    assert_eq!(code(&cairn(d.path(), &["verify", "solo", "1"])), 0);
}

#[test]
fn configuration_comes_from_files_variables_and_options() {
    let d = tempfile::tempdir().unwrap();
    write_solo(d.path(), "solo", &[1]);
    let global = d.path().join("global");
    let o = cairn_env(
        d.path(),
        &["list"],
        &[("CAIRN_TIERS_GLOBAL", global.to_str().unwrap())],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("solo"));

    let toml = d.path().join("cairn.toml");
    std::fs::write(
        &toml,
        format!(
            "[tiers]\nlocal = {:?}\nglobal = \"/nonexistent-cairn\"\n",
            d.path().join("local").display().to_string()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["--config", toml.to_str().unwrap(), "list"])
        .env_remove("CAIRN_TIERS_LOCAL")
        .env_remove("CAIRN_TIERS_GLOBAL")
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("solo"));
}

#[test]
fn bad_input_exits_2_with_a_clear_message() {
    let d = tempfile::tempdir().unwrap();
    write_solo(d.path(), "solo", &[1]);
    let cases: &[(&[&str], &str)] = &[
        (&["inspect", "solo", "9"], "no checkpoint solo v9 under"),
        (&["verify", "nope"], "no checkpoint nope under"),
        (&["inspect", "../etc", "1"], "invalid field checkpoint name"),
        (
            &["list", "--config", "/nonexistent/cairn.toml"],
            "cannot read config file /nonexistent/cairn.toml",
        ),
        (&["inspect", "solo", "seven"], "invalid value 'seven'"),
        (&["frobnicate"], "unrecognized subcommand"),
        (
            &["list", "--global", ""],
            "a value is required for '--global",
        ),
    ];
    for (args, want) in cases {
        let o = cairn(d.path(), args);
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{args:?}: {}", stderr(&o));
    }
    let o = cairn_env(d.path(), &["list"], &[("CAIRN_CACHE_KEPE", "3")]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("CAIRN_CACHE_KEPE"), "{}", stderr(&o));

    let o = cairn(d.path(), &["--help"]);
    assert_eq!(code(&o), 0);
    assert!(stdout(&o).contains("Exit codes:"), "{}", stdout(&o));
}
