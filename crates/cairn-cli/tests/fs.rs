//! `cairn fs`: `ls`, `df`, `drain` and `wipe` on shared-memory stores filled directly through
//! `cairn_shm::Store`; `cairn fs run` with the interposer, and a drain beside a writer still
//! running under it; `cairn list`, `inspect` and `verify` over checkpoints the engine keeps in
//! a `mem` tier. Every test uses a job name of its own (`CAIRN_JOB`) and removes its stores
//! when it ends, passed or not.

use cairn_comm::Threads;
use cairn_core::{Config, Dtype, Engine, MemConfig, RegionRef};
use cairn_tier::cairn_shm::{self, spill_path, Store, StoreConfig, StoreOwner};
use serde_json::Value;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Store sizes of the tests: small, so that creating one is quick, with a spill file.
const POOL: u64 = 4 << 20;
const CHUNK: u64 = 64 << 10;
const SPILL: u64 = 2 << 20;

fn uid() -> u32 {
    std::fs::metadata("/proc/self").expect("/proc/self").uid()
}

/// One test's job: its name, a directory for its spill files and global tier, and its stores,
/// removed on drop.
struct Job {
    name: String,
    dir: tempfile::TempDir,
}

impl Job {
    fn new(tag: &str) -> Job {
        let dir = tempfile::Builder::new()
            .prefix("cairn-fs-")
            .tempdir()
            .expect("tempdir");
        std::fs::create_dir(dir.path().join("spill")).unwrap();
        Job {
            name: format!("fstest-{}-{tag}", std::process::id()),
            dir,
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn spill_dir(&self) -> PathBuf {
        self.path().join("spill")
    }

    fn global(&self) -> PathBuf {
        self.path().join("global")
    }

    fn store_name(&self, node: u32) -> String {
        cairn_shm::store_name(uid(), &self.name, StoreOwner::Node(node))
    }

    /// Node `node`'s store, created with the sizes `cairn` is given.
    fn store(&self, node: u32) -> Store {
        let name = self.store_name(node);
        Store::open(&StoreConfig {
            spill: Some(spill_path(&self.spill_dir(), &name)),
            spill_size: SPILL,
            populate: false,
            ..StoreConfig::new(&name, POOL, CHUNK)
        })
        .unwrap()
    }

    /// This job's entries in /dev/shm.
    fn shm_files(&self) -> Vec<PathBuf> {
        let lead = format!("cairn-{}-{}-", uid(), self.name);
        let mut v: Vec<PathBuf> = std::fs::read_dir("/dev/shm")
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(&lead))
            .map(|e| e.path())
            .collect();
        v.sort();
        v
    }

    /// `cairn` with this job's variables and no others of the test's environment.
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cairn"));
        for (k, _) in std::env::vars() {
            if k.starts_with("CAIRN_") {
                cmd.env_remove(k);
            }
        }
        cmd.env("CAIRN_JOB", &self.name)
            .env("CAIRN_TIERS_MEM_SIZE", POOL.to_string())
            .env("CAIRN_TIERS_MEM_CHUNK", CHUNK.to_string())
            .env("CAIRN_TIERS_MEM_SPILL_DIR", self.spill_dir())
            .env("CAIRN_TIERS_MEM_SPILL_SIZE", SPILL.to_string())
            .env("CAIRN_TIERS_GLOBAL", self.global())
            .env("CAIRN_TIERS_FSYNC_GLOBAL", "false")
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    fn cairn(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    fn cairn_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        self.command(args)
            .envs(env.iter().copied())
            .output()
            .unwrap()
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        for f in self.shm_files() {
            let _ = std::fs::remove_file(f);
        }
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exited normally")
}

fn show(o: &Output) -> String {
    format!(
        "{:?}\n--- stdout ---\n{}--- stderr ---\n{}",
        o.status,
        text(&o.stdout),
        text(&o.stderr)
    )
}

fn json(o: &Output) -> Value {
    assert_eq!(code(o), 0, "{}", show(o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}\n{}", show(o)))
}

/// A failure with exit code 2 whose message contains `needle`.
fn fails_with(o: &Output, needle: &str) {
    assert_eq!(code(o), 2, "{}", show(o));
    assert!(text(&o.stderr).contains(needle), "{needle}: {}", show(o));
}

/// `len` bytes that differ with `seed` and along the file.
fn data(seed: u64, len: usize) -> Vec<u8> {
    (0..len.div_ceil(8) as u64)
        .flat_map(|i| xxh3_64_with_seed(&i.to_le_bytes(), seed).to_le_bytes())
        .take(len)
        .collect()
}

fn put(store: &Store, path: &str, bytes: &[u8]) {
    let f = store.create(path, true).unwrap();
    store.write_all_at(f, bytes, 0).unwrap();
}

/// Whether the LD_PRELOAD interposer is part of this build (it is written apart from the
/// store); the tests that run programs under it are skipped, saying so, until it is.
fn interposer() -> bool {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../native/fs/interpose.c");
    let ready = src.is_file() && cairn_shm::preload_library().is_some();
    if !ready {
        eprintln!("skipped: the interposer (native/fs/interpose.c, libcairn-fs.so) is not built");
    }
    ready
}

fn files_by_path(v: &Value) -> Vec<(String, u64, u64, u64)> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                f["size"].as_u64().unwrap(),
                f["chunks"].as_u64().unwrap(),
                f["spill_chunks"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn ls_and_df_show_files_chunks_and_space() {
    let job = Job::new("ls");
    let s = job.store(0);
    put(&s, "a", b"hi\n");
    put(&s, "dir/b", &data(1, 200 << 10));
    // 5 MiB: the 4 MiB pool fills, the rest goes to the spill file.
    put(&s, "big", &data(2, 5 << 20));
    put(&s, ".cairn/obj", b"engine");

    let o = job.cairn(&["fs", "ls"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    let out = text(&o.stdout);
    let head = format!("/dev/shm{} (node 0): 3 files", job.store_name(0));
    assert!(out.starts_with(&head), "{out}");
    for w in [
        "PATH",
        "SIZE",
        "CHUNKS",
        "SPILL",
        "MODIFIED (UTC)",
        "/cairn/a",
        "/cairn/dir/b",
    ] {
        assert!(out.contains(w), "{w}: {out}");
    }
    assert!(!out.contains(".cairn/obj"), "{out}");

    let files = files_by_path(&json(&job.cairn(&["fs", "ls", "--json"])));
    let pool_chunks = POOL / CHUNK;
    let big_chunks = (5 << 20) / CHUNK;
    assert_eq!(
        files,
        vec![
            ("/cairn/a".to_string(), 3, 1, 0),
            ("/cairn/big".to_string(), 5 << 20, big_chunks, {
                // The pool holds `a`'s and `dir/b`'s chunks too.
                big_chunks - (pool_chunks - 1 - 4)
            }),
            ("/cairn/dir/b".to_string(), 200 << 10, 4, 0),
        ]
    );
    let all = files_by_path(&json(&job.cairn(&["fs", "ls", "--all", "--json"])));
    assert!(all.iter().any(|f| f.0 == "/cairn/.cairn/obj"), "{all:?}");
    let one = files_by_path(&json(&job.cairn(&["fs", "ls", "/cairn/dir", "--json"])));
    assert_eq!(one, vec![("/cairn/dir/b".to_string(), 200 << 10, 4, 0)]);
    let rel = files_by_path(&json(&job.cairn(&["fs", "ls", "a", "--json"])));
    assert_eq!(rel.len(), 1);

    let o = job.cairn(&["fs", "ls", "/cairn/nothing"]);
    fails_with(&o, "no file or directory /cairn/nothing in /dev/shm");
    let o = job.cairn(&["fs", "ls", "/tmp/x"]);
    fails_with(&o, "/tmp/x is not under the mount point /cairn");

    let df = json(&job.cairn(&["fs", "df", "--json"]));
    let d = &df[0];
    assert_eq!(d["node"], 0);
    assert_eq!(d["pool_bytes"], POOL);
    assert_eq!(d["pool_free"], 0);
    assert_eq!(d["chunk_size"], CHUNK);
    assert_eq!(d["spill_bytes"], SPILL);
    let spilled = all.iter().map(|f| f.3).sum::<u64>();
    assert_eq!(d["spill_used"], spilled * CHUNK);
    assert_eq!(d["max_files"], 4096);
    assert!(d["files_used"].as_u64().unwrap() >= 4, "{d}");
    assert_eq!(d["repairs"], 0);
    assert!(d["numa_nodes"].as_u64().unwrap() >= 1);
    let o = job.cairn(&["fs", "df"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    let out = text(&o.stdout);
    assert!(out.starts_with("STORE") && out.contains("REPAIRS"), "{out}");
    assert!(
        out.contains(&format!("/dev/shm{}", job.store_name(0))),
        "{out}"
    );
    assert!(out.contains("4.0 MiB"), "{out}");
}

#[test]
fn missing_stores_and_misplaced_options_are_named() {
    let job = Job::new("none");
    for cmd in [&["fs", "ls"][..], &["fs", "df"], &["fs", "drain"]] {
        let o = job.cairn(cmd);
        assert_eq!(code(&o), 2, "{cmd:?}: {}", show(&o));
        let err = text(&o.stderr);
        let want = format!(
            "no shared-memory store of job \"{}\" (from CAIRN_JOB)",
            job.name
        );
        assert!(err.contains(&want), "{cmd:?}: {err}");
        assert!(err.contains(&format!("/dev/shm/cairn-{}-{}-n*", uid(), job.name)));
        assert!(
            err.contains("CAIRN_JOB, else SLURM_JOB_ID, selects the job"),
            "{err}"
        );
    }
    let o = job.cairn(&["fs", "ls", "--node", "3"]);
    assert!(
        text(&o.stderr).contains(&format!("{}-n3)", job.name)),
        "{}",
        show(&o)
    );
    let o = job.cairn(&["fs", "wipe"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert!(text(&o.stdout).starts_with("nothing to wipe: no shared-memory store"));
    let o = job.cairn(&["fs", "ls", "--local", "/tmp"]);
    fails_with(&o, "--local does not apply to cairn fs");
    let o = job.cairn(&["fs", "df", "--global", "/tmp"]);
    fails_with(&o, "--global applies to cairn fs drain only");
    let o = job.cairn_env(&["fs", "ls"], &[("CAIRN_TIERS_MEM_CHUNK", "5000")]);
    fails_with(&o, "CAIRN_TIERS_MEM_CHUNK");
}

#[test]
fn drain_copies_files_byte_for_byte() {
    let job = Job::new("drain");
    let (s0, s1) = (job.store(0), job.store(1));
    let files0 = [
        ("a", data(1, 3)),
        ("run/ckpt.0", data(2, 300_000)),
        ("run/ckpt.1", data(3, 5 << 20)), // partly in the spill file
        ("empty", Vec::new()),
    ];
    for (p, d) in &files0 {
        put(&s0, p, d);
    }
    put(&s0, ".cairn/engine", b"not drained by default");
    put(&s1, "n1/only", &data(4, 70_000));

    // Every store, each to <global>/fs/node<N>.
    let v = json(&job.cairn(&["fs", "drain", "--json"]));
    assert_eq!(v["files"], 5, "{v}");
    assert_eq!(v["not_drained"], 0);
    let total: usize = files0.iter().map(|(_, d)| d.len()).sum::<usize>() + 70_000;
    assert_eq!(v["bytes"], total);
    assert_eq!(v["stores"][0]["node"], 0);
    let listed: Vec<&str> = v["stores"][0]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        listed,
        [
            "/cairn/a",
            "/cairn/empty",
            "/cairn/run/ckpt.0",
            "/cairn/run/ckpt.1"
        ]
    );
    let node0 = job.global().join("fs/node0");
    for (p, d) in &files0 {
        let target = node0.join(p);
        assert_eq!(&std::fs::read(&target).unwrap(), d, "{p}");
        let mode = std::fs::metadata(&target).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{p}");
    }
    let run_dir = std::fs::metadata(node0.join("run")).unwrap();
    assert_eq!(run_dir.permissions().mode() & 0o777, 0o700);
    assert!(!node0.join(".cairn").exists());
    assert_eq!(
        std::fs::read(job.global().join("fs/node1/n1/only")).unwrap(),
        data(4, 70_000)
    );
    // No temporaries are left.
    let leftovers: Vec<_> = std::fs::read_dir(node0.join("run"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // One store, chosen paths, another directory, text output.
    let to = job.path().join("out");
    let o = job.cairn(&[
        "fs",
        "drain",
        "--node",
        "0",
        "--to",
        to.to_str().unwrap(),
        "/cairn/run",
        "a",
        "--bandwidth",
        "1G",
        "--priority",
        "normal",
    ]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    let out = text(&o.stdout);
    assert!(
        out.contains(&format!(
            "/cairn/run/ckpt.1 -> {}",
            to.join("run/ckpt.1").display()
        )),
        "{out}"
    );
    assert!(out.contains("drained 3 files (5.3 MiB) in "), "{out}");
    assert!(to.join("a").is_file() && !to.join("empty").exists());
    assert_eq!(std::fs::read(to.join("run/ckpt.0")).unwrap(), files0[1].1);

    let o = job.cairn(&["fs", "drain", "--to", to.to_str().unwrap()]);
    fails_with(&o, "the job has 2 stores (node 0, node 1): add --node");
    let o = job.cairn(&["fs", "drain", "--bandwidth", "fast"]);
    fails_with(&o, "option --bandwidth");
    // A path only one store holds is drained from it; one no store holds is an error.
    let v = json(&job.cairn(&["fs", "drain", "/cairn/n1", "--json"]));
    assert_eq!(
        (&v["files"], &v["stores"][1]["node"]),
        (&1.into(), &1.into())
    );
    let o = job.cairn(&["fs", "drain", "/cairn/n1", "/cairn/nothing"]);
    fails_with(&o, "no file or directory /cairn/nothing in /dev/shm");
}

#[test]
fn wipe_removes_the_stores_and_their_spill_files() {
    let job = Job::new("wipe");
    for n in 0..2 {
        let s = job.store(n);
        put(&s, "x", &data(n as u64, 5 << 20));
    }
    let spill = |n: u32| spill_path(&job.spill_dir(), &job.store_name(n));
    assert!(spill(0).is_file() && spill(1).is_file());
    assert_eq!(job.shm_files().len(), 2);
    // Node 1's file API staging directory, with a routed file in it, goes with its store.
    let staging = Path::new("/dev/shm").join(format!(
        "{}.files",
        job.store_name(1).trim_start_matches('/')
    ));
    std::fs::create_dir_all(staging.join("rank2")).unwrap();
    std::fs::write(staging.join("rank2/f0-field.h5"), b"routed").unwrap();
    assert_eq!(job.shm_files().len(), 3);

    let o = job.cairn(&["fs", "wipe", "--node", "1"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    let out = text(&o.stdout);
    assert!(
        out.contains(&format!("removed {}", staging.display())),
        "{out}"
    );
    assert!(
        out.contains(&format!("removed /dev/shm{} (node 1)", job.store_name(1))),
        "{out}"
    );
    assert!(
        out.contains(&format!("removed {}", spill(1).display())),
        "{out}"
    );
    assert_eq!(
        job.shm_files(),
        vec![Path::new("/dev/shm").join(job.store_name(0).trim_start_matches('/'))]
    );
    assert!(spill(0).is_file() && !spill(1).exists());

    let o = job.cairn(&["fs", "wipe"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert!(text(&o.stdout).contains("(node 0)"));
    assert!(job.shm_files().is_empty());
    assert!(!spill(0).exists());
    let o = job.cairn(&["fs", "ls"]);
    assert_eq!(code(&o), 2);
}

// ---- the engine's mem tier ---------------------------------------------------------------------

const WRITER_ENV: &str = "FS_TEST_ENGINE_ROOT";

/// Not a test on its own: run by `list_inspect_verify_see_a_mem_tier` in a child process
/// (whose `CAIRN_JOB` names the stores), it writes v1..v3 of `heat` from 4 ranks on 2
/// simulated nodes with partner copies into the `mem` tier.
#[test]
fn engine_writer_child() {
    let Some(root) = std::env::var_os(WRITER_ENV) else {
        return;
    };
    let cfg = Config {
        local: None,
        local_mem: true,
        mem: MemConfig {
            size: POOL,
            chunk: CHUNK,
            ..MemConfig::default()
        },
        global: PathBuf::from(root).join("global"),
        fsync_global: false,
        block: 4096,
        finalize_flush: false,
        sim_nodes: 2,
        redundancy: "partner".into(),
        ..Config::default()
    };
    let ranks: Vec<_> = Threads::world(4)
        .into_iter()
        .enumerate()
        .map(|(rank, comm)| {
            let cfg = cfg.clone();
            std::thread::spawn(move || {
                let mut e = Engine::new(Box::new(comm), cfg).unwrap();
                for v in 1..=3i64 {
                    let field: Vec<u8> = data(rank as u64 * 10 + v as u64, 20_000);
                    let region = RegionRef {
                        id: 0,
                        dtype: Dtype::Byte,
                        bytes: &field,
                    };
                    e.checkpoint("heat", v, &[region]).unwrap();
                }
                e.finalize().unwrap();
            })
        })
        .collect();
    for r in ranks {
        r.join().unwrap();
    }
}

#[test]
fn list_inspect_verify_see_a_mem_tier() {
    let job = Job::new("list");
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "engine_writer_child", "--nocapture"])
        .env("CAIRN_JOB", &job.name)
        .env(WRITER_ENV, job.path())
        .output()
        .unwrap();
    assert!(child.status.success(), "{}", show(&child));
    assert_eq!(job.shm_files().len(), 2);
    let mem = [("CAIRN_TIERS_LOCAL", "mem")];

    let v = json(&job.cairn_env(&["list", "--json"], &mem));
    let recs = v.as_array().unwrap();
    // [cache] keep = 2: v1 was deleted once v3 was protected.
    assert_eq!(recs.len(), 2, "{v}");
    for (r, want) in recs.iter().zip(2..) {
        assert_eq!(r["version"], want);
        assert_eq!(r["state"], "protected", "{r}");
        assert_eq!(r["tiers"], serde_json::json!(["local(2 nodes)"]));
        assert_eq!(r["scheme"], "partner");
        assert_eq!(r["protection"]["state"], "protected", "{r}");
    }
    let o = job.cairn_env(&["list"], &mem);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert!(text(&o.stdout).contains("local(2 nodes)"));

    let v = json(&job.cairn_env(&["inspect", "heat", "3", "--json"], &mem));
    let files = v["files"].as_array().unwrap();
    assert_eq!(files.len(), 4);
    let want = format!("/dev/shm{}/.cairn/heat/v3/rank3.ckpt", job.store_name(1));
    assert_eq!(files[3]["path"], want.as_str(), "{v}");
    let o = job.cairn_env(&["verify"], &mem);
    assert_eq!(code(&o), 0, "{}", show(&o));

    // The engine's objects are in the store, listed by fs ls only with --all.
    let plain = files_by_path(&json(&job.cairn(&["fs", "ls", "--json"])));
    assert!(plain.is_empty(), "{plain:?}");
    let all = files_by_path(&json(&job.cairn(&["fs", "ls", "--all", "--json"])));
    assert!(
        all.iter()
            .any(|f| f.0 == "/cairn/.cairn/heat/v3/rank0.ckpt"),
        "{all:?}"
    );

    // Losing node 1: its parts are gone, the partner copies on node 0 can rebuild them.
    let o = job.cairn(&["fs", "wipe", "--node", "1"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    let v = json(&job.cairn_env(&["list", "heat", "--json"], &mem));
    let r3 = &v.as_array().unwrap()[1];
    assert_eq!(r3["state"], "incomplete", "{r3}");
    assert_eq!(r3["protection"]["state"], "degraded");
    assert_eq!(r3["protection"]["rebuildable"], true);
    assert_eq!(r3["protection"]["lost_nodes"], serde_json::json!([1]));
    let o = job.cairn_env(&["verify", "heat", "3"], &mem);
    assert_eq!(code(&o), 1, "{}", show(&o));
    // Offline flush and rebuild read node directories; they say so.
    let o = job.cairn_env(&["flush"], &mem);
    fails_with(&o, "the node-local tier is the shared-memory store");
    let root = [
        ("OMPI_ALLOW_RUN_AS_ROOT", "1"),
        ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
    ];
    let o = job.cairn_env(&["--local", "mem", "rebuild", "heat"], &root);
    fails_with(
        &o,
        "cairn rebuild reads node directories, and [tiers] local is \"mem\"",
    );

    // Nothing stored, nothing found; the message says where it looked.
    let o = job.cairn(&["fs", "wipe"]);
    assert_eq!(code(&o), 0);
    let o = job.cairn_env(&["list"], &mem);
    assert_eq!(code(&o), 0, "{}", show(&o));
    let out = text(&o.stdout);
    assert!(
        out.contains(&format!("/dev/shm/cairn-{}-{}-n* (local)", uid(), job.name)),
        "{out}"
    );
}

// ---- programs under the interposer -----------------------------------------------------------

#[test]
fn run_keeps_a_programs_files_in_the_store() {
    let job = Job::new("run");
    // Failures that do not need the interposer.
    let o = job.cairn_env(
        &["fs", "run", "--", "true"],
        &[("CAIRN_FS_PRELOAD", "/nonexistent/libcairn-fs.so")],
    );
    fails_with(
        &o,
        "/nonexistent/libcairn-fs.so (CAIRN_FS_PRELOAD) is not a file",
    );
    if !interposer() {
        return;
    }
    let o = job.cairn(&["fs", "run", "--", "/nonexistent/program", "x"]);
    assert_eq!(code(&o), 127, "{}", show(&o));
    assert!(text(&o.stderr).contains("cannot run /nonexistent/program"));
    let sh = |script: &str| job.cairn(&["fs", "run", "--", "sh", "-c", script]);
    let o = sh("exit 7");
    assert_eq!(code(&o), 7, "{}", show(&o));

    let o = sh("echo hi > /cairn/a && cat /cairn/a");
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(text(&o.stdout), "hi\n");
    assert!(
        !Path::new("/cairn/a").exists(),
        "the file went to the real /cairn"
    );
    let files = files_by_path(&json(&job.cairn(&["fs", "ls", "--json"])));
    assert_eq!(files, vec![("/cairn/a".to_string(), 3, 1, 0)]);
    let df = json(&job.cairn(&["fs", "df", "--json"]));
    assert_eq!(df[0]["pool_used"], CHUNK);
    assert_eq!(
        df[0]["pool_bytes"], POOL,
        "the store has the sizes cairn gave"
    );

    // The settings the program sees.
    let o = sh("env | grep -E '^(CAIRN_|LD_PRELOAD)' | sort");
    let env = text(&o.stdout);
    for want in [
        "CAIRN_TIERS_MEM_PREFIX=/cairn\n".to_string(),
        format!("CAIRN_TIERS_MEM_SIZE={POOL}\n"),
        format!("CAIRN_TIERS_MEM_CHUNK={CHUNK}\n"),
        "CAIRN_TIERS_MEM_MAX_FILES=4096\n".into(),
        format!("CAIRN_TIERS_MEM_SPILL_DIR={}\n", job.spill_dir().display()),
        "CAIRN_TIERS_MEM_STORE=node\n".into(),
        "CAIRN_TOPOLOGY_SIM_NODES=0\n".into(),
        "LD_PRELOAD=/".into(),
    ] {
        assert!(env.contains(&want), "{want}: {env}");
    }
    assert!(env.contains("libcairn-fs.so"), "{env}");
}

/// The drained copy of a file the writer below rewrites whole, record after record, must be
/// one of its records (or empty); the copy of the file it appends to must be whole records in
/// order.
const WRITER: &str = r#"
import os, sys, struct, time
def record(i, n):
    body = bytes((i * 7 + k) & 0xff for k in range(251)) * (n // 251 + 1)
    return struct.pack("<QQ", i, n) + body[:n]
app = open("/cairn/log", "ab", buffering=0)
# Rewritten in place, never changing size: only the store's write counters show a copy
# made while a write runs.
inplace = os.open("/cairn/inplace", os.O_RDWR | os.O_CREAT, 0o600)
os.pwrite(inplace, record(0, 3_000_000), 0)
deadline = time.time() + float(sys.argv[1])
i = 0
while time.time() < deadline:
    r = record(i, 100_000 + (i % 7) * 30_000)
    with open("/cairn/whole", "wb", buffering=0) as f:
        assert f.write(r) == len(r)
    r = record(i, 3_000_000)
    assert os.pwrite(inplace, r, 0) == len(r)
    # The log stops at about 2 MB, so that the store never fills.
    if i < 2000:
        r = record(i, 1000 + i % 13)
        assert app.write(r) == len(r)
    i += 1
print(i, flush=True)
"#;

fn check_record(b: &[u8]) -> Result<usize, String> {
    if b.len() < 16 {
        return Err(format!("{} bytes: a torn record header", b.len()));
    }
    let i = u64::from_le_bytes(b[..8].try_into().unwrap());
    let n = u64::from_le_bytes(b[8..16].try_into().unwrap()) as usize;
    if b.len() < 16 + n {
        return Err(format!(
            "record {i} of {n} bytes is cut at {}",
            b.len() - 16
        ));
    }
    for (k, x) in b[16..16 + n].iter().enumerate() {
        if *x != ((i * 7 + (k % 251) as u64) & 0xff) as u8 {
            return Err(format!("record {i}: byte {k} is {x}"));
        }
    }
    Ok(16 + n)
}

#[test]
fn drain_beside_a_writer_is_consistent_or_reports_the_file() {
    if !interposer() {
        return;
    }
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("skipped: no python3");
        return;
    }
    let job = Job::new("live");
    let writer = job
        .command(&["fs", "run", "--", "python3", "-c", WRITER, "4"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while job.shm_files().is_empty() && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let (mut drained, mut refused, mut rounds) = (0, 0, 0);
    while t0.elapsed() < Duration::from_millis(3500) {
        rounds += 1;
        let to = job.path().join(format!("round{rounds}"));
        let o = job.cairn(&["fs", "drain", "--json", "--to", to.to_str().unwrap()]);
        assert!(matches!(code(&o), 0 | 1), "{}", show(&o));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        for nd in v["stores"][0]["not_drained"].as_array().unwrap() {
            assert!(
                nd["reason"]
                    .as_str()
                    .unwrap()
                    .contains("written during each of 4 copies"),
                "{nd}"
            );
            refused += 1;
        }
        if let Ok(b) = std::fs::read(to.join("whole")) {
            drained += 1;
            if !b.is_empty() {
                assert_eq!(check_record(&b), Ok(b.len()), "round {rounds}: torn copy");
            }
        }
        if let Ok(b) = std::fs::read(to.join("inplace")) {
            drained += 1;
            assert_eq!(
                check_record(&b),
                Ok(b.len()),
                "round {rounds}: torn in-place copy"
            );
        }
        if let Ok(b) = std::fs::read(to.join("log")) {
            drained += 1;
            let (mut at, mut next) = (0, 0u64);
            while at < b.len() {
                let n = check_record(&b[at..])
                    .unwrap_or_else(|e| panic!("round {rounds}: log at {at}: {e}"));
                let i = u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
                assert_eq!(i, next, "round {rounds}: record {next} expected at {at}");
                (at, next) = (at + n, next + 1);
            }
        }
    }
    let out = writer.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    eprintln!(
        "{rounds} drains beside the writer ({} records): {drained} copies, {refused} files \
         not drained",
        text(&out.stdout).trim()
    );
    assert!(rounds >= 2 && drained + refused > 0);
}
