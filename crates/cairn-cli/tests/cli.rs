//! The `cairn` binary's list, inspect and verify on checkpoints written by the engine: output,
//! JSON, damage and loss detection, redundancy (partner copies, parity) and its protection
//! verdicts, exit codes, and `cairn rebuild` under mpirun.

use cairn_comm::Threads;
use cairn_core::{Config, Dtype, Engine, RegionRef};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn config(root: &Path) -> Config {
    Config {
        local: Some(root.join("local")),
        global: root.join("global"),
        fsync_global: false,
        block: 4096,
        // The tests choose what is durable; finalize must not flush the newest version.
        finalize_flush: false,
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
    write_cfg(cfg, size, name, versions);
}

/// Versions of `name` from 4 ranks on 2 simulated nodes, protected with `scheme`, nothing
/// flushed.
fn write_protected(root: &Path, scheme: &str, name: &str, versions: &[i64]) {
    write_protected_on(root, 4, 2, scheme, name, versions);
}

/// As [`write_protected`], from `size` ranks on `nodes` simulated nodes.
fn write_protected_on(
    root: &Path,
    size: usize,
    nodes: usize,
    scheme: &str,
    name: &str,
    versions: &[i64],
) {
    let cfg = Config {
        sim_nodes: nodes,
        redundancy: scheme.to_string(),
        ..config(root)
    };
    write_cfg(cfg, size, name, versions);
}

/// Versions of `name` from `size` ranks over the in-process communicator, configured by `cfg`.
fn write_cfg(cfg: Config, size: usize, name: &str, versions: &[i64]) {
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
    cairn_command(root, args, env).output().unwrap()
}

/// The `cairn` command [`cairn_env`] runs.
fn cairn_command(root: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
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
    cmd
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
    // The region table: id, type, count, raw, stored, blocks, zero, unchanged, codecs.
    let row = out
        .lines()
        .find(|l| l.contains(" double ") && l.contains(" 2000 "))
        .unwrap_or_else(|| panic!("no row for the field: {out}"));
    let cells: Vec<&str> = row
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(cells[5..], ["4", "0", "0", "raw 4"], "{row}");
    assert!(out.contains("blocks of 4.0 KiB, format 2, full"), "{out}");

    let o = cairn(d.path(), &["inspect", "heat", "20", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["record"]["state"], "durable");
    assert_eq!(v["manifests"].as_array().unwrap().len(), 3);
    let files = v["files"].as_array().unwrap();
    assert_eq!(files.len(), 8);
    let reg = &files[0]["regions"][1];
    assert_eq!(
        (&reg["blocks"], &reg["stored"], &reg["bytes"]),
        (&4.into(), &16000.into(), &16000.into())
    );
    let first = xxhash_rust::xxh3::xxh3_128(&as_bytes(&field(0, 20))[..4096]) as u64;
    assert_eq!(reg["first_checksum"], format!("{first:016x}"));

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
        out.contains("block 3 of region 1 fails its checksum"),
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
        (bad["rank"].as_u64(), bad["block"].as_u64()),
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

/// A FIFO where a rank file should be (planted in a shared directory, say) is damage that
/// `list`, `verify` and `inspect` name at once: none of them waits in `open` for a writer.
#[test]
fn a_fifo_in_place_of_a_rank_file_is_named_not_waited_for() {
    let d = tempfile::tempdir().unwrap();
    write_solo(d.path(), "solo", &[1, 2]);
    let path = rank_file(d.path(), 0, "solo", 2, 0);
    std::fs::remove_file(&path).unwrap();
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo(3) with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let run = |args: &[&str]| output_within(cairn_command(d.path(), args, &[]), 30);
    let out = stdout(&run(&["list"]));
    assert!(
        out.lines()
            .any(|l| l.starts_with("solo ") && l.contains(" 2 ") && !l.contains(" ok")),
        "{out}"
    );
    let o = run(&["verify", "solo"]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    let text = format!("{}{}", stdout(&o), stderr(&o));
    assert!(text.contains("not a regular file"), "{text}");
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert_eq!(code(&run(&["verify", "solo", "1"])), 0);
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

/// `CAIRN_HOME`, `CAIRN_LIBS` and the like (set by module systems for an installed package)
/// are not settings: the command works, and names them once on standard error.
#[test]
fn package_variables_are_ignored_and_named_once() {
    let d = tempfile::tempdir().unwrap();
    write_solo(d.path(), "solo", &[1]);
    let o = cairn_env(
        d.path(),
        &["list"],
        &[("CAIRN_HOME", "/opt/cairn"), ("CAIRN_LIBS", "-lcairn")],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("solo"), "{}", stdout(&o));
    let err = stderr(&o);
    assert_eq!(
        err.matches("ignoring environment variables CAIRN_HOME, CAIRN_LIBS")
            .count(),
        1,
        "{err}"
    );
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

fn node_dir(root: &Path, node: usize) -> PathBuf {
    root.join(format!("local/node{node}"))
}

/// The line of `list` output for `name` v`v`.
fn list_line(out: &str, name: &str, v: i64) -> String {
    out.lines()
        .find(|l| l.starts_with(&format!("{name} ")) && l.contains(&format!(" {v} ")))
        .unwrap_or_else(|| panic!("no line for {name} v{v} in\n{out}"))
        .to_string()
}

#[test]
fn partner_copies_and_parity_show_in_list_inspect_and_verify() {
    let d = tempfile::tempdir().unwrap();
    write_protected(d.path(), "partner", "pa", &[1]);
    write_protected(d.path(), "xor", "xo", &[1]);
    write_solo(d.path(), "solo", &[1]);

    let o = cairn(d.path(), &["list"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    let head = out.lines().next().unwrap();
    assert!(
        head.contains("STATE") && head.contains("SCHEME") && head.contains("PROTECTION"),
        "{out}"
    );
    let pa = list_line(&out, "pa", 1);
    assert!(
        pa.contains(" partner ") && pa.contains(" protected ") && pa.contains("4/4"),
        "{out}"
    );
    let xo = list_line(&out, "xo", 1);
    assert!(
        xo.contains(" xor(2) ") && xo.contains(" protected "),
        "{out}"
    );
    let solo = list_line(&out, "solo", 1);
    assert!(
        solo.contains(" single ") && solo.contains(" none "),
        "{out}"
    );
    assert_eq!(
        out.lines().count(),
        4,
        "nothing to report below the table: {out}"
    );

    // Partner: 4 ranks on 2 nodes pair rank r with rank r+2 (mod 4), so node0 holds the
    // copies of ranks 2 and 3, and node1 those of ranks 0 and 1.
    let o = cairn(d.path(), &["inspect", "pa", "1"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("scheme     partner"), "{out}");
    assert!(out.contains("protection protected"), "{out}");
    let node0 = out
        .find("  node0  parts of ranks 0, 1")
        .unwrap_or_else(|| panic!("{out}"));
    let node1 = out
        .find("  node1  parts of ranks 2, 3")
        .unwrap_or_else(|| panic!("{out}"));
    let copies0 = &out[node0..node1];
    assert!(
        copies0.contains("partner copy of rank 2") && copies0.contains("partner copy of rank 3"),
        "{out}"
    );
    assert!(copies0.contains("pa/v1/partner/rank2.ckpt"), "{out}");
    assert!(out[node1..].contains("partner copy of rank 0"), "{out}");

    let o = cairn(d.path(), &["inspect", "pa", "1", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rec = &v["record"];
    assert_eq!(rec["scheme"], "partner");
    assert_eq!(rec["protection"]["state"], "protected");
    assert_eq!(rec["holdings"][0]["node"], 0);
    assert_eq!(rec["holdings"][0]["parts"], serde_json::json!([0, 1]));
    let ranks: Vec<u64> = rec["holdings"][1]["partner_copies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["rank"].as_u64().unwrap())
        .collect();
    assert_eq!(ranks, vec![0, 1]);
    assert_eq!(rec["holdings"][1]["partner_copies"][0]["ok"], true);
    assert!(rec["redundancy_bytes"].as_u64().unwrap() > 4 * 16_000);

    // xor(2): sets {0, 2} and {1, 3}, one member per node; each rank holds one parity object.
    let o = cairn(d.path(), &["inspect", "xo", "1"]);
    let out = stdout(&o);
    assert!(out.contains("scheme     xor(2)"), "{out}");
    for r in 0..4 {
        assert!(out.contains(&format!("parity of rank {r}")), "{out}");
    }
    assert!(out.contains("xor set 0 of ranks 0 ("), "{out}");
    assert!(out.contains(", m 1, segment "), "{out}");
    let o = cairn(d.path(), &["inspect", "xo", "1", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let par = &v["record"]["holdings"][1]["parity"][0];
    assert_eq!(par["rank"], 2);
    assert_eq!(par["ok"], true);
    assert_eq!(par["set"]["codec"], "xor");
    assert_eq!(par["set"]["m"], 1);
    let members: Vec<u64> = par["set"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["rank"].as_u64().unwrap())
        .collect();
    assert_eq!(members, vec![0, 2]);

    let o = cairn(d.path(), &["verify"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("4/4 rank files intact, 4/4 redundancy files intact"),
        "{out}"
    );
    let o = cairn(d.path(), &["verify", "pa", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let kinds: Vec<&str> = v[0]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "partner").count(),
        4,
        "{kinds:?}"
    );
    assert_eq!(v[0]["protection"]["state"], "protected");
}

#[test]
fn a_lost_node_is_degraded_and_rebuildable() {
    let d = tempfile::tempdir().unwrap();
    write_protected(d.path(), "partner", "pa", &[1]);
    write_protected(d.path(), "xor", "xo", &[1]);
    std::fs::remove_dir_all(node_dir(d.path(), 1)).unwrap();

    let o = cairn(d.path(), &["list"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    for name in ["pa", "xo"] {
        let line = list_line(&out, name, 1);
        assert!(
            line.contains("incomplete") && line.contains("degraded (rebuildable)"),
            "{out}"
        );
        assert!(line.contains("2/4"), "{out}");
        assert!(
            out.contains(&format!("{name} v1: degraded (node 1 lost; rebuildable)")),
            "{out}"
        );
        assert!(
            out.contains(&format!("cairn rebuild {name} 1")),
            "the list says how to rebuild: {out}"
        );
    }

    let o = cairn(d.path(), &["inspect", "xo", "1"]);
    let out = stdout(&o);
    assert!(
        out.contains("protection degraded (node 1 lost; rebuildable)"),
        "{out}"
    );
    assert!(out.contains("node1  lost"), "{out}");
    assert!(
        out.contains("parity of rank 0") && out.contains("parity of rank 1"),
        "{out}"
    );
    let o = cairn(d.path(), &["list", "pa", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let p = &v[0]["protection"];
    assert_eq!(p["state"], "degraded");
    assert_eq!(p["rebuildable"], true);
    assert_eq!(p["lost_nodes"], serde_json::json!([1]));
    assert_eq!(p["lost_parts"], serde_json::json!([2, 3]));
    assert_eq!(p["lost_redundancy"], serde_json::json!([0, 1]));
    assert_eq!(p["unrecoverable"], serde_json::json!([]));

    let o = cairn(d.path(), &["verify", "xo"]);
    assert_eq!(code(&o), 1);
    let out = stdout(&o);
    assert!(out.contains("INCOMPLETE"), "{out}");
    assert!(
        out.contains("protection: degraded (node 1 lost; rebuildable)"),
        "{out}"
    );

    // Only one redundancy object gone, on a node that is still there: damaged, rebuildable.
    let d = tempfile::tempdir().unwrap();
    write_protected(d.path(), "xor", "xo", &[1]);
    std::fs::remove_file(node_dir(d.path(), 1).join("xo/v1/parity/rank3.par")).unwrap();
    let out = stdout(&cairn(d.path(), &["list"]));
    let line = list_line(&out, "xo", 1);
    assert!(
        line.contains("protected") && line.contains("degraded (rebuildable)"),
        "state protected (every part is there), protection degraded: {out}"
    );
    assert!(
        out.contains("xo v1: degraded (parity of rank 3 missing; rebuildable)"),
        "{out}"
    );
    let o = cairn(d.path(), &["verify"]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    assert!(stdout(&o).contains("DAMAGED"), "{}", stdout(&o));
}

#[test]
fn losing_too_much_is_unrecoverable() {
    let d = tempfile::tempdir().unwrap();
    write_protected(d.path(), "partner", "pa", &[1]);
    write_protected(d.path(), "xor", "xo", &[1]);
    std::fs::remove_dir_all(node_dir(d.path(), 1)).unwrap();
    // The copies of ranks 2 and 3 on node0 go too.
    std::fs::remove_dir_all(node_dir(d.path(), 0).join("pa/v1/partner")).unwrap();
    // xor(2): set {0, 2} loses rank 2 (node1) and rank 0's parity: no parity of it is left.
    std::fs::remove_file(node_dir(d.path(), 0).join("xo/v1/parity/rank0.par")).unwrap();
    // xor(3) over 6 ranks on 3 nodes: sets {0, 2, 4} and {1, 3, 5}. Losing node2 (ranks 4
    // and 5) and rank 0's parity leaves a stripe of {0, 2, 4} two shards short; {1, 3, 5}
    // alone could be rebuilt.
    write_protected_on(d.path(), 6, 3, "xor", "x3", &[1]);
    std::fs::remove_dir_all(node_dir(d.path(), 2)).unwrap();
    std::fs::remove_file(node_dir(d.path(), 0).join("x3/v1/parity/rank0.par")).unwrap();

    let o = cairn(d.path(), &["list"]);
    let out = stdout(&o);
    assert!(list_line(&out, "pa", 1).contains("unrecoverable"), "{out}");
    assert!(
        out.contains("pa v1: unrecoverable (ranks 2-3 lost with their copies)"),
        "{out}"
    );
    assert!(list_line(&out, "xo", 1).contains("unrecoverable"), "{out}");
    assert!(
        out.contains("xo v1: unrecoverable (rank 2 lost and no intact parity of its set survives)"),
        "{out}"
    );
    assert!(list_line(&out, "x3", 1).contains("unrecoverable"), "{out}");
    assert!(
        out.contains("x3 v1: unrecoverable (rank 4 lost: the set of ranks 0, 2, 4 lost 2 shards of a stripe and xor(3) tolerates 1)"),
        "{out}"
    );
    assert!(!out.contains("cairn rebuild"), "no rebuild hint: {out}");
    let o = cairn(d.path(), &["inspect", "x3", "1", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let p = &v["record"]["protection"];
    assert_eq!(p["state"], "unrecoverable");
    assert_eq!(p["rebuildable"], false);
    assert_eq!(p["lost_nodes"], serde_json::json!([2]));
    assert_eq!(p["lost_parts"], serde_json::json!([4, 5]));
    assert_eq!(p["unrecoverable"], serde_json::json!([4]));
    let o = cairn(d.path(), &["verify", "pa"]);
    assert_eq!(code(&o), 1);
    assert!(
        stdout(&o).contains("protection: unrecoverable"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn damaged_redundancy_fails_verify_naming_the_file() {
    let d = tempfile::tempdir().unwrap();
    write_protected(d.path(), "xor", "xo", &[1]);
    write_protected(d.path(), "partner", "pa", &[1]);
    assert_eq!(code(&cairn(d.path(), &["verify"])), 0);

    // A parity object of xor(2): an 84-byte header (2 members, 1 shard), then the shard.
    let par = node_dir(d.path(), 1).join("xo/v1/parity/rank3.par");
    let mut b = std::fs::read(&par).unwrap();
    b[84 + 100] ^= 0x01;
    std::fs::write(&par, &b).unwrap();
    let copy = node_dir(d.path(), 0).join("pa/v1/partner/rank2.ckpt");
    let mut c = std::fs::read(&copy).unwrap();
    c[16 + 8 + 4096 + 5] ^= 0x40;
    std::fs::write(&copy, &c).unwrap();

    let o = cairn(d.path(), &["verify", "xo"]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("xo v1") && out.contains("DAMAGED"), "{out}");
    assert!(
        out.contains("parity of rank 3 (local node1): shard 0 fails its checksum"),
        "{out}"
    );
    assert!(out.contains(&par.display().to_string()), "{out}");
    assert!(
        out.contains("4/4 rank files intact, 3/4 redundancy files intact"),
        "{out}"
    );
    let o = cairn(d.path(), &["verify", "xo", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let bad: Vec<&serde_json::Value> = v[0]["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["ok"] == false)
        .collect();
    assert_eq!(bad.len(), 1);
    assert_eq!(
        (bad[0]["kind"].as_str(), bad[0]["rank"].as_u64()),
        (Some("parity"), Some(3))
    );
    assert_eq!(bad[0]["shard"], 0);

    let o = cairn(d.path(), &["verify", "pa"]);
    assert_eq!(code(&o), 1);
    let out = stdout(&o);
    assert!(
        out.contains(
            "partner copy of rank 2 (local node0): block 1 of region 1 fails its checksum"
        ),
        "{out}"
    );
    assert!(out.contains(&copy.display().to_string()), "{out}");

    // list reads parity shards (not part data): the damaged parity degrades the checkpoint.
    let out = stdout(&cairn(d.path(), &["list"]));
    assert!(
        out.contains("xo v1: degraded (parity of rank 3 damaged; rebuildable)"),
        "{out}"
    );
    assert!(list_line(&out, "pa", 1).contains(" protected "), "{out}");
    let out = stdout(&cairn(d.path(), &["inspect", "xo", "1"]));
    assert!(out.contains("DAMAGED: shard 0 fails its checksum"), "{out}");
}

/// Run `cmd` to completion, killing it after `secs` seconds.
fn output_within(mut cmd: Command, secs: u64) -> Output {
    use std::io::Read;
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start {cmd:?}: {e} (these tests need Open MPI's mpirun)")
        });
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let t_out = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = out.read_to_end(&mut b);
        b
    });
    let t_err = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = err.read_to_end(&mut b);
        b
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish within {secs} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    Output {
        status,
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    }
}

/// `mpirun -n <ranks> cairn <args>` with the xor job's configuration in the environment.
fn mpirun_cairn(root: &Path, ranks: usize, args: &[&str]) -> Output {
    let mut cmd = Command::new("mpirun");
    for (k, _) in std::env::vars() {
        if k.starts_with("CAIRN_") {
            cmd.env_remove(k);
        }
    }
    cmd.args([
        "--oversubscribe",
        "--bind-to",
        "none",
        "-n",
        &ranks.to_string(),
    ])
    .arg(env!("CARGO_BIN_EXE_cairn"))
    .args(args)
    .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
    .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    .env("CAIRN_TOPOLOGY_SIM_NODES", "2")
    .env("CAIRN_REDUNDANCY_SCHEME", "xor")
    .env("CAIRN_TIERS_LOCAL", root.join("local"))
    .env("CAIRN_TIERS_GLOBAL", root.join("global"));
    output_within(cmd, 180)
}

/// Every file under `dir`, relative, with its bytes.
fn files_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((
                    p.strip_prefix(dir).unwrap().to_path_buf(),
                    std::fs::read(&p).unwrap(),
                ));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn rebuild_under_mpirun_restores_a_lost_node() {
    let d = tempfile::tempdir().unwrap();
    write_protected(d.path(), "xor", "heat", &[1, 2]);
    let before = files_under(&node_dir(d.path(), 1));
    assert!(before.len() >= 10, "{before:?}");
    std::fs::remove_dir_all(node_dir(d.path(), 1)).unwrap();

    let o = mpirun_cairn(d.path(), 4, &["rebuild", "heat"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    for v in [1, 2] {
        assert!(
            out.contains(&format!(
                "heat v{v}: rebuilt the parts of ranks [2, 3] from parity"
            )),
            "{out}"
        );
    }
    assert!(out.contains("heat: 2 versions checked, 2 rebuilt"), "{out}");
    // Printed once (by rank 0), not once per rank.
    assert_eq!(out.matches("heat v1:").count(), 1, "{out}");

    // The node's parts and parity objects are back, byte for byte; its manifests are back.
    let after = files_under(&node_dir(d.path(), 1));
    let names = |fs: &[(PathBuf, Vec<u8>)]| fs.iter().map(|f| f.0.clone()).collect::<Vec<_>>();
    assert_eq!(names(&after), names(&before));
    for ((p, a), (_, b)) in after.iter().zip(&before) {
        if !p.ends_with("manifest.json") {
            assert!(a == b, "{} differs after the rebuild", p.display());
        }
    }
    let o = cairn(d.path(), &["verify"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&cairn(d.path(), &["list"]));
    assert!(
        list_line(&out, "heat", 2).contains(" protected  full   xor(2)  protected "),
        "{out}"
    );

    // Again: nothing to do.
    let o = mpirun_cairn(d.path(), 4, &["rebuild", "heat", "2"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("heat v2: nothing to rebuild"),
        "{}",
        stdout(&o)
    );

    // The wrong rank count is refused as a usage error, before anything is touched.
    let o = mpirun_cairn(d.path(), 2, &["rebuild", "heat", "2"]);
    assert_eq!(code(&o), 2, "{}{}", stdout(&o), stderr(&o));
    assert!(
        stderr(&o).contains("heat v2 was written by 4 ranks on 2 nodes with scheme xor(2), but this job has 2 ranks"),
        "{}",
        stderr(&o)
    );

    // Too much lost: exit 1, saying why.
    std::fs::remove_dir_all(node_dir(d.path(), 1)).unwrap();
    std::fs::remove_file(node_dir(d.path(), 0).join("heat/v2/parity/rank0.par")).unwrap();
    let o = mpirun_cairn(d.path(), 4, &["rebuild", "heat", "2"]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    assert!(
        stderr(&o).contains("heat v2: cannot rebuild: no parity of rank 2's set survives"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn rebuild_outside_mpirun_is_a_usage_error_for_a_job_of_several_ranks() {
    let d = tempfile::tempdir().unwrap();
    write_protected(d.path(), "xor", "heat", &[1]);
    // Without mpirun the command runs as a single MPI process.
    let o = cairn_env(
        d.path(),
        &["rebuild", "heat", "1"],
        &[
            ("OMPI_ALLOW_RUN_AS_ROOT", "1"),
            ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
        ],
    );
    assert_eq!(code(&o), 2, "{}{}", stdout(&o), stderr(&o));
    assert!(
        stderr(&o).contains("heat v1 was written by 4 ranks on 2 nodes with scheme xor(2), but this job has 1 rank on 1 node with scheme single"),
        "{}",
        stderr(&o)
    );
    // The other subcommands keep working without MPI, and --help documents rebuild.
    let o = cairn(d.path(), &["rebuild", "--help"]);
    assert_eq!(code(&o), 0);
    let out = stdout(&o);
    assert!(out.contains("mpirun -n 4 cairn rebuild heat 300"), "{out}");
    assert!(
        out.contains("[topology]") && out.contains("[redundancy]"),
        "{out}"
    );
}
