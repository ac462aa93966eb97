//! `cairn interval`, run as a program: Daly's published cases, the node MTBF form, a
//! three-level plan, the text table, and usage errors (exit code 2, naming the problem).

use serde_json::Value;
use std::process::{Command, Output};

fn cairn(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("interval")
        .args(args)
        // No configuration may be needed or read.
        .env_remove("CAIRN_CONFIG")
        .output()
        .expect("run cairn")
}

fn json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let o = cairn(&all);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("one JSON object")
}

fn num(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("{key} in {v}"))
}

/// Fails with exit code 2 and a message that contains every one of `needles`.
fn fails(args: &[&str], needles: &[&str]) {
    let o = cairn(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: {n:?} not in {err}");
    }
}

/// Daly's cases with a five-minute checkpoint: (MTBF, Young, Daly, exact), intervals in
/// minutes (the exact values checked independently with a bisection for Lambert W).
#[test]
fn daly_cases() {
    for (mtbf, young, daly, exact) in [
        ("24h", 120.0, 116.69, 116.69),
        ("6h", 60.0, 56.71, 56.71),
        ("15m", 12.247, 9.141, 9.167),
    ] {
        let v = json(&["--mtbf", mtbf, "--cost", "5m"]);
        let l = &v["levels"][0];
        for (key, want) in [("young", young), ("daly", daly), ("exact", exact)] {
            let got = num(l, key) / 60.0;
            assert!((got - want).abs() < 0.01, "{mtbf} {key}: {got} min");
        }
        assert_eq!(v["formula"], "exact");
        assert_eq!(num(l, "chosen"), num(l, "exact"));
        assert_eq!(num(&v, "restart_seconds"), 0.0);
        let eff = num(&v, "efficiency");
        assert!(eff > 0.0 && eff <= 1.0);
    }
    let v = json(&["--mtbf", "24h", "--cost", "5m"]);
    assert_eq!(num(&v, "mtbf_seconds"), 86_400.0);
    assert!((num(&v["levels"][0], "daly") - 7000.0).abs() <= 10.0);
}

#[test]
fn formula_chooses_the_interval() {
    let v = json(&["--mtbf", "6h", "--cost", "5m", "--formula", "young"]);
    assert_eq!(v["formula"], "young");
    assert_eq!(num(&v["levels"][0], "chosen"), 3600.0);
}

#[test]
fn node_mtbf_over_nodes_is_the_system_mtbf() {
    let per_node = json(&["--node-mtbf", "10y", "--nodes", "1000", "--cost", "1m"]);
    let system = 10.0 * 365.0 * 86_400.0 / 1000.0;
    let direct = json(&["--mtbf", &format!("{system}"), "--cost", "1m"]);
    assert_eq!(num(&per_node, "mtbf_seconds"), system);
    assert_eq!(per_node, direct);
}

#[test]
fn three_levels() {
    let v = json(&[
        "--mtbf",
        "12h",
        "--restart",
        "2m",
        "--level",
        "local=10s:0.7",
        "--level",
        "partner=40s:0.2",
        "--level",
        "global=5m",
    ]);
    let levels = v["levels"].as_array().unwrap();
    assert_eq!(levels.len(), 3);
    assert_eq!(num(&v, "restart_seconds"), 120.0);
    let names: Vec<&str> = levels.iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["local", "partner", "global"]);
    // The last level got the remaining tenth of the failures.
    assert!((num(&levels[2], "mtbf") - 10.0 * 12.0 * 3600.0).abs() < 1e-6);
    let mut product = 1.0;
    for w in levels.windows(2) {
        assert!(num(&w[1], "mtbf") > num(&w[0], "mtbf"));
        assert!(num(&w[1], "exact") > num(&w[0], "exact"));
    }
    for l in levels {
        assert!(l["every"].as_u64().unwrap() >= 1);
        product *= num(l, "efficiency");
    }
    assert_eq!(levels[0]["every"], 1);
    assert!((num(&v, "efficiency") - product).abs() < 1e-12);
}

#[test]
fn text_output() {
    let o = cairn(&[
        "--mtbf",
        "24h",
        "--restart",
        "1m",
        "--level",
        "local=10s:0.8",
        "--level",
        "global=5m:0.2",
    ]);
    assert!(o.status.success());
    let want = "\
system MTBF 1d 00h 00m, restart 1m 00s; every and efficiency use the exact interval
level     cost  MTBF covered       Young        Daly       exact  every  efficiency
local    10.0s    1d 00h 00m     21m 55s     21m 48s     21m 48s      1       98.4%
global  5m 00s    5d 00h 00m  4h 28m 20s  4h 25m 00s  4h 25m 00s     12       96.3%
expected efficiency: 94.8% (product of the levels')
";
    assert_eq!(String::from_utf8(o.stdout).unwrap(), want);
    let one = cairn(&["--mtbf", "24h", "--cost", "5m"]);
    let out = String::from_utf8(one.stdout).unwrap();
    assert!(out.contains("2h 00m 00s  1h 56m 41s  1h 56m 41s"), "{out}");
}

#[test]
fn usage_errors() {
    fails(&["--mtbf", "5x", "--cost", "5m"], &["--mtbf", "\"5x\""]);
    fails(
        &["--mtbf", "1h", "--cost=-5m"],
        &["--cost", "\"-5m\": negative"],
    );
    fails(
        &[
            "--mtbf",
            "1h",
            "--node-mtbf",
            "5y",
            "--nodes",
            "10",
            "--cost",
            "1m",
        ],
        &["--mtbf", "--node-mtbf", "cannot be used with"],
    );
    fails(&["--cost", "1m"], &["--mtbf"]);
    fails(&["--node-mtbf", "5y", "--cost", "1m"], &["--nodes"]);
    fails(
        &["--mtbf", "1h", "--nodes", "10", "--cost", "1m"],
        &["--nodes"],
    );
    fails(&["--mtbf", "1h"], &["--cost", "--level"]);
    fails(
        &["--mtbf", "1h", "--cost", "1m", "--level", "a=1s"],
        &["--cost", "--level"],
    );
    fails(
        &["--mtbf", "1h", "--level", "a=1s:0.7", "--level", "b=1m:0.5"],
        &["sum to 1.2"],
    );
    fails(
        &[
            "--mtbf", "1h", "--level", "a=1s:0.7", "--level", "b=1m:0.5", "--level", "c=1h",
        ],
        &["sum to 1.2, more than 1"],
    );
    fails(
        &["--mtbf", "1h", "--level", "a=1s", "--level", "b=1m"],
        &["share"],
    );
    fails(&["--mtbf", "1h", "--level", "a"], &["--level", "NAME=COST"]);
    fails(&["--mtbf", "0", "--cost", "1m"], &["MTBF"]);
    fails(&["--mtbf", "1h", "--cost", "0"], &["--cost"]);
    fails(
        &["--mtbf", "1h", "--cost", "1m", "--formula", "x"],
        &["young, daly or exact"],
    );
    fails(
        &["--mtbf", "1h", "--cost", "1m", "--global", "/nonexistent"],
        &["do not apply to interval"],
    );
}
