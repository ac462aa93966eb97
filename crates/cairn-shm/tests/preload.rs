//! Unmodified programs under the LD_PRELOAD interposer (`libcairn-fs.so`) writing and reading
//! files under `/cairn`: cp, dd, cat, sh, C programs using POSIX calls, stdio, threads and MPI
//! (`native/fs/tests/*.c`, compiled here), a Python script, a writer killed with SIGKILL,
//! spill-over, ENOSPC, a failed attach, and paths outside the prefix left alone; working
//! directories under the prefix, and descriptors of ours passed to the programs a shell, a C
//! program or Python starts.
//!
//! Each test has a store of its own (its own `CAIRN_JOB`) and removes it when done. What the
//! programs wrote is checked against data kept outside the store and, where it matters,
//! against the store read directly through [`cairn_shm::Store`], which does not go through the
//! interposer. `/cairn` never exists on the real file system.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};

use cairn_shm::{preload_library, spill_path, store_name, Store, StoreConfig, StoreOwner};

const CHUNK: u64 = 64 << 10;

/// Variables of the interposer that must not leak in from the environment of the test run.
const CLEARED: &[&str] = &[
    "CAIRN_TIERS_MEM_PREFIX",
    "CAIRN_TIERS_MEM_SIZE",
    "CAIRN_TIERS_MEM_CHUNK",
    "CAIRN_TIERS_MEM_MAX_FILES",
    "CAIRN_TIERS_MEM_SPILL_DIR",
    "CAIRN_TIERS_MEM_SPILL_SIZE",
    "CAIRN_TIERS_MEM_STORE",
    "CAIRN_NODE",
    "CAIRN_TOPOLOGY_SIM_NODES",
    "CAIRN_FS_FAULT",
    "CAIRN_FS_INHERIT",
    "SLURM_JOB_ID",
];

/// One test's file system: the preload library, the variables that configure it, and the
/// store, wiped on drop.
struct Fs {
    job: String,
    vars: Vec<(String, String)>,
    spill_dir: Option<tempfile::TempDir>,
}

impl Fs {
    /// A store of 64 MiB in 64 KiB chunks for the test `name`.
    fn new(name: &str) -> Fs {
        let job = format!("preload-{name}-{}", std::process::id());
        let fs = Fs {
            job: job.clone(),
            vars: Vec::new(),
            spill_dir: None,
        };
        fs.wipe();
        fs.var("CAIRN_JOB", &job)
            .var("CAIRN_TIERS_MEM_SIZE", "64M")
            .var("CAIRN_TIERS_MEM_CHUNK", &CHUNK.to_string())
    }

    fn var(mut self, key: &str, value: &str) -> Fs {
        self.vars.retain(|(k, _)| k != key);
        self.vars.push((key.to_string(), value.to_string()));
        self
    }

    /// Memory for 4 chunks and a spill file of `spill_chunks` more.
    fn small(name: &str, spill_chunks: u64) -> Fs {
        Fs::new(name)
            .var("CAIRN_TIERS_MEM_SIZE", &(4 * CHUNK).to_string())
            .spill(spill_chunks * CHUNK)
    }

    /// A spill file of `size` bytes in a temporary directory.
    fn spill(mut self, size: u64) -> Fs {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_str().unwrap().to_string();
        self.spill_dir = Some(dir);
        self.var("CAIRN_TIERS_MEM_SPILL_DIR", &path)
            .var("CAIRN_TIERS_MEM_SPILL_SIZE", &size.to_string())
    }

    fn name(&self) -> String {
        // SAFETY: getuid has no preconditions.
        store_name(unsafe { libc::getuid() }, &self.job, StoreOwner::Node(0))
    }

    fn spill_file(&self) -> Option<PathBuf> {
        self.spill_dir
            .as_ref()
            .map(|d| spill_path(d.path(), &self.name()))
    }

    /// `program` with the library preloaded and this store configured.
    fn cmd(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(program);
        for k in CLEARED {
            c.env_remove(k);
        }
        c.env("LD_PRELOAD", library());
        c.envs(self.vars.iter().map(|(k, v)| (k, v)));
        c
    }

    /// Runs `program args` under the preload and returns its output, which must be a success.
    fn run(&self, program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Output {
        let program = program.as_ref().to_owned();
        let out = self.cmd(&program).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{program:?} {args:?}: {}\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// `sh -c script` under the preload; its stdout.
    fn sh(&self, script: &str) -> Vec<u8> {
        self.run("sh", &["-c", script]).stdout
    }

    /// The store, attached directly (not through the interposer), if it exists.
    fn store(&self) -> Option<Store> {
        let mut cfg = StoreConfig::new(&self.name(), 64 << 20, CHUNK);
        cfg.create = false;
        cfg.populate = false;
        cfg.spill = self.spill_file();
        Store::open(&cfg).ok()
    }

    /// The bytes of `path` (relative to the mount point), read from the store directly.
    fn stored(&self, path: &str) -> Vec<u8> {
        let store = self.store().expect("the store exists");
        let fh = store.open_existing(path).unwrap();
        let mut buf = vec![0u8; store.fstat(fh).unwrap().size as usize];
        store.read_exact_at(fh, &mut buf, 0).unwrap();
        buf
    }

    fn wipe(&self) {
        let _ = Store::wipe(&self.name(), self.spill_file().as_deref());
    }
}

impl Drop for Fs {
    fn drop(&mut self) {
        self.wipe();
    }
}

fn library() -> PathBuf {
    let lib = preload_library().expect("libcairn-fs.so is built beside the test binaries");
    assert!(lib.is_file(), "{} is missing", lib.display());
    lib
}

/// `native/fs/tests/<name>.c`, compiled once per test run with `compiler`.
fn program(name: &str, compiler: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let mut built = BUILT.get_or_init(Default::default).lock().unwrap();
    if let Some(p) = built.get(name) {
        return p.clone();
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../native/fs/tests")
        .join(format!("{name}.c"));
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("preload-{name}"));
    let out = Command::new(compiler)
        .args(["-std=gnu11", "-O1", "-Wall", "-Wextra", "-pthread", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("run {compiler}: {e}"));
    assert!(
        out.status.success(),
        "{compiler} {}: {}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    built.insert(name.to_string(), exe.clone());
    exe
}

/// Reproducible bytes with no period a chunk size could hide (splitmix64, 8 bytes a step).
fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(len);
    out
}

fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

/// The real Python interpreter, not a pyenv shim script.
fn python() -> String {
    let py = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3 is installed");
    text(&py.stdout).trim().to_string()
}

#[test]
fn cp_copies_into_the_store_and_back_byte_exact() {
    let fs = Fs::new("cp");
    let tmp = tempfile::tempdir().unwrap();
    let chunk = CHUNK as usize;
    fs.run("mkdir", &["/cairn/cp"]);
    // 3.3 MiB, nothing, less than a chunk, exactly one, one more.
    let sizes = [33 * (1 << 20) / 10, 0, 1000, chunk, chunk + 1];
    for (i, &len) in sizes.iter().enumerate() {
        let bytes = data(len, i as u64 + 1);
        let src = write_file(tmp.path(), &format!("src{i}"), &bytes);
        let back = tmp.path().join(format!("back{i}"));
        let inside = format!("/cairn/cp/f{i}.bin");
        fs.run("cp", &[src.to_str().unwrap(), &inside]);
        fs.run("cp", &[&inside, back.to_str().unwrap()]);
        assert_eq!(std::fs::read(&back).unwrap(), bytes, "size {len} back out");
        assert_eq!(
            fs.stored(&format!("cp/f{i}.bin")),
            bytes,
            "size {len} in the store"
        );
    }
    let listing = text(&fs.sh("ls /cairn/cp && ls -la /cairn/cp >/dev/null"));
    assert_eq!(listing, "f0.bin\nf1.bin\nf2.bin\nf3.bin\nf4.bin\n");
    assert!(!Path::new("/cairn").exists());
}

#[test]
fn dd_writes_what_cat_and_dd_read_back_through_pipes() {
    let fs = Fs::new("dd");
    let tmp = tempfile::tempdir().unwrap();
    // 37 blocks of 10000 bytes: blocks and chunks never line up.
    fs.run(
        "dd",
        &[
            "if=/dev/urandom",
            "of=/cairn/x",
            "bs=10000",
            "count=37",
            "status=none",
        ],
    );
    let stored = fs.stored("x");
    assert_eq!(stored.len(), 370_000);
    let via_cat = tmp.path().join("cat");
    let via_dd = tmp.path().join("dd");
    fs.sh(&format!(
        "cat /cairn/x | cat > {0} && dd if=/cairn/x bs=4096 status=none | dd of={1} status=none",
        via_cat.display(),
        via_dd.display()
    ));
    assert_eq!(std::fs::read(&via_cat).unwrap(), stored);
    assert_eq!(std::fs::read(&via_dd).unwrap(), stored);
    // dd with conv=notrunc and seek= rewrites the middle in place.
    fs.run(
        "dd",
        &[
            "if=/dev/zero",
            "of=/cairn/x",
            "bs=1000",
            "seek=5",
            "count=2",
            "conv=notrunc",
            "status=none",
        ],
    );
    let mut expect = stored.clone();
    expect[5000..7000].fill(0);
    assert_eq!(fs.stored("x"), expect);
}

#[test]
fn shell_redirections_dup2_onto_stdout_and_append() {
    let fs = Fs::new("sh");
    let out = fs.sh("echo hi > /cairn/f && echo there >> /cairn/f && cat /cairn/f");
    assert_eq!(text(&out), "hi\nthere\n");
    assert_eq!(fs.stored("f"), b"hi\nthere\n");
    // Reading through a redirection of stdin, and `exec` moving descriptors around.
    let out = fs.sh("exec 3</cairn/f; read a <&3; read b <&3; exec 3<&-; echo \"$b $a\"");
    assert_eq!(text(&out), "there hi\n");
}

#[test]
fn c_program_posix_calls() {
    let fs = Fs::new("posix");
    let out = fs.run(program("writer", "cc"), &["check", "/cairn/w"]);
    assert_eq!(text(&out.stdout), "writer ok\n");
    assert_eq!(fs.stored("w/shared"), b"!123456789abcdefXYZ");
}

#[test]
fn c_program_stdio() {
    let fs = Fs::new("stdio");
    let out = fs.run(program("stdio", "cc"), &["/cairn/s"]);
    assert_eq!(text(&out.stdout), "stdio ok\n");
    let stored = fs.stored("s/text");
    assert!(stored.starts_with(b"line ZERO text\nline 1 of text\n"));
    assert!(stored.ends_with(b"appended\n"));
    assert_eq!(fs.stored("s/stdout.txt"), b"to the store 42\n");
}

#[test]
fn four_threads_write_four_files_at_once() {
    let fs = Fs::new("threads");
    let out = fs.run(program("writer", "cc"), &["threads", "/cairn/t"]);
    assert_eq!(text(&out.stdout), "threads ok\n");
    let store = fs.store().unwrap();
    for k in 0..4u64 {
        let fh = store.open_existing(&format!("t/thread.{k}")).unwrap();
        assert_eq!(store.fstat(fh).unwrap().size, (2 << 20) + k * 4099);
    }
}

#[test]
fn python_open_listdir_rename_remove() {
    let fs = Fs::new("python");
    let py = python();
    let script = r#"
import os
os.makedirs("/cairn/py/sub")
with open("/cairn/py/a.txt", "w") as f:
    f.write("alpha\n" * 1000)
with open("/cairn/py/b.bin", "wb") as f:
    f.write(bytes(range(256)) * 300)
assert sorted(os.listdir("/cairn/py")) == ["a.txt", "b.bin", "sub"], os.listdir("/cairn/py")
os.rename("/cairn/py/a.txt", "/cairn/py/sub/c.txt")
assert os.listdir("/cairn/py/sub") == ["c.txt"]
with open("/cairn/py/sub/c.txt") as f:
    assert f.read() == "alpha\n" * 1000
with open("/cairn/py/b.bin", "rb") as f:
    f.seek(256 * 299)
    assert f.read() == bytes(range(256))
assert os.stat("/cairn/py/b.bin").st_size == 256 * 300
assert os.path.isdir("/cairn/py/sub") and not os.path.exists("/cairn/py/a.txt")
os.remove("/cairn/py/b.bin")
assert sorted(os.listdir("/cairn/py")) == ["sub"]
with open("/cairn/py/sub/c.txt", "a") as f:
    f.write("omega\n")
print("python ok")
"#;
    let out = fs.run(&py, &["-c", script]);
    assert_eq!(text(&out.stdout), "python ok\n");
    let c = fs.stored("py/sub/c.txt");
    assert_eq!(c.len(), 6006);
    assert!(c.ends_with(b"alpha\nomega\n"));
    let store = fs.store().unwrap();
    assert!(store.stat("py/b.bin").unwrap_err().is_not_found());
}

#[test]
fn killed_writer_leaves_completed_files_readable() {
    let fs = Fs::new("kill");
    let tmp = tempfile::tempdir().unwrap();
    let bytes = data(1_000_003, 7);
    let src = write_file(tmp.path(), "src", &bytes);
    fs.run("mkdir", &["/cairn/k"]);
    let mut child = fs
        .cmd(program("writer", "cc"))
        .args(["hold", src.to_str().unwrap(), "/cairn/k", "3"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "ready\n");
    // Let it get into the middle of rewriting `partial`, then SIGKILL it.
    std::thread::sleep(std::time::Duration::from_millis(50));
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );

    // A new process attaches to the store and reads what was completed.
    for k in 0..3 {
        let out = fs.run("cat", &[&format!("/cairn/k/ckpt.{k}")]);
        assert!(out.stdout == bytes, "ckpt.{k} differs");
    }
    // Whatever part of `partial` was written is exactly what the writer wrote.
    let partial = fs.run("cat", &["/cairn/k/partial"]).stdout;
    assert!(partial.len() <= bytes.len() && partial[..] == bytes[..partial.len()]);
}

#[test]
fn spill_over_reads_back_byte_exact() {
    // Memory for 4 chunks, the rest goes to the spill file.
    let fs = Fs::small("spill", 16);
    let tmp = tempfile::tempdir().unwrap();
    let bytes = data(10 * CHUNK as usize + 4321, 11);
    let src = write_file(tmp.path(), "src", &bytes);
    fs.run("cp", &[src.to_str().unwrap(), "/cairn/big"]);
    let back = fs.run("cat", &["/cairn/big"]).stdout;
    assert!(back == bytes, "spilled file differs");
    let store = fs.store().unwrap();
    let chunks = store.chunks(store.open_existing("big").unwrap()).unwrap();
    assert_eq!(chunks.len(), 11);
    assert_eq!(chunks.iter().filter(|c| c.in_spill == 0).count(), 4);
    assert!(fs.spill_file().unwrap().is_file());
    // Reads that straddle the memory/disk boundary.
    let at = 4 * CHUNK - 100;
    let out = fs.sh(&format!(
        "dd if=/cairn/big bs=1 skip={at} count=300 status=none"
    ));
    assert_eq!(out, &bytes[at as usize..at as usize + 300]);
}

#[test]
fn enospc_when_memory_and_spill_are_full() {
    let fs = Fs::small("enospc", 4);
    let tmp = tempfile::tempdir().unwrap();
    let bytes = data(3 * CHUNK as usize - 10, 13);
    let src = write_file(tmp.path(), "src", &bytes);
    fs.run("cp", &[src.to_str().unwrap(), "/cairn/kept"]);
    // 8 chunks in all, 3 taken: the writer gets 5 chunks' worth, then ENOSPC.
    let out = fs.run(
        program("writer", "cc"),
        &["fill", "/cairn/fill", &CHUNK.to_string()],
    );
    assert_eq!(text(&out.stdout), format!("filled {} ENOSPC\n", 5 * CHUNK));
    // cp into a full store fails, and says so.
    let full = fs
        .cmd("cp")
        .args([src.to_str().unwrap(), "/cairn/more"])
        .output()
        .unwrap();
    assert!(!full.status.success());
    assert!(
        text(&full.stderr).contains("No space left on device"),
        "{}",
        text(&full.stderr)
    );
    // What was stored before is intact.
    assert!(fs.run("cat", &["/cairn/kept"]).stdout == bytes);
    assert_eq!(fs.stored("fill").len() as u64, 5 * CHUNK);
}

#[test]
fn four_mpi_ranks_write_into_one_store() {
    let fs = Fs::new("mpi");
    let exe = program("mpi_writer", "mpicc");
    let mut cmd = fs.cmd("mpirun");
    cmd.args(["-np", "4", "--oversubscribe"])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    for var in [
        "LD_PRELOAD",
        "CAIRN_JOB",
        "CAIRN_TIERS_MEM_SIZE",
        "CAIRN_TIERS_MEM_CHUNK",
    ] {
        cmd.args(["-x", var]);
    }
    let out = cmd
        .arg(&exe)
        .arg("/cairn/mpi")
        .output()
        .expect("mpirun runs");
    assert!(
        out.status.success(),
        "{}\n{}\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(text(&out.stdout), "mpi ok 4\n");
    let store = fs.store().unwrap();
    assert_eq!(store.read_dir("mpi").unwrap().len(), 4);
}

#[test]
fn paths_outside_the_prefix_are_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    let beside = tmp.path().join("mntx");
    std::fs::create_dir(&mnt).unwrap();
    std::fs::create_dir(&beside).unwrap();
    let fs = Fs::new("outside").var("CAIRN_TIERS_MEM_PREFIX", mnt.to_str().unwrap());
    let bytes = data(200_000, 17);
    let src = write_file(tmp.path(), "src", &bytes);
    // A real directory that merely starts like the prefix, and /tmp itself.
    let copy = beside.join("copy");
    fs.run("cp", &[src.to_str().unwrap(), copy.to_str().unwrap()]);
    fs.sh(&format!("echo real > {}/note", beside.display()));
    let out = fs.run(
        program("writer", "cc"),
        &["threads", beside.to_str().unwrap()],
    );
    assert_eq!(text(&out.stdout), "threads ok\n");
    assert_eq!(std::fs::read(&copy).unwrap(), bytes);
    assert_eq!(std::fs::read(beside.join("note")).unwrap(), b"real\n");
    assert!(beside.join("thread.3").is_file());
    // Nothing went through the store, which was therefore never even created.
    assert!(fs.store().is_none(), "a store appeared");
    // And with the prefix in use, the real directory under it stays empty.
    fs.sh(&format!("echo mem > {}/f", mnt.display()));
    assert_eq!(fs.stored("f"), b"mem\n");
    assert_eq!(std::fs::read_dir(&mnt).unwrap().count(), 0);
}

#[test]
fn bad_configuration_turns_the_prefix_off() {
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let fs = Fs::new("badcfg")
        .var("CAIRN_TIERS_MEM_PREFIX", mnt.to_str().unwrap())
        .var("CAIRN_TIERS_MEM_SIZE", "12Q");
    let out = fs
        .cmd("sh")
        .args([
            "-c",
            &format!("echo real > {0}/f && cat {0}/f", mnt.display()),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "real\n");
    let err = text(&out.stderr);
    assert!(err.contains("CAIRN_TIERS_MEM_SIZE=12Q"), "{err}");
    assert_eq!(
        err.lines().count(),
        2,
        "one line per process (sh, cat): {err}"
    );
    assert_eq!(std::fs::read(mnt.join("f")).unwrap(), b"real\n");
    assert!(fs.store().is_none());
}

/// CAIRN_FS_FAULT fails the store's posix_fallocate, as a too small /dev/shm would: every call
/// under the prefix fails with ENOSPC, one line says why, and the program goes on.
#[test]
fn failed_attach_is_an_error_not_a_crash() {
    let fs = Fs::new("fault").var("CAIRN_FS_FAULT", "posix_fallocate:1:ENOSPC");
    let out = fs
        .cmd("sh")
        .args([
            "-c",
            "echo a > /cairn/a; echo b > /cairn/b; cat /dev/null /cairn/a; echo survived",
        ])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(text(&out.stdout), "survived\n", "{err}");
    assert_eq!(
        err.matches("cannot attach").count(),
        2,
        "once in sh, once in cat: {err}"
    );
    for failed in [
        "create /cairn/a: No space",
        "create /cairn/b: No space",
        "cat: /cairn/a: No space",
    ] {
        assert!(err.contains(failed), "{failed}: {err}");
    }
    assert!(fs.store().is_none());
}

#[test]
fn stat_and_listing_through_coreutils() {
    let fs = Fs::new("coreutils");
    fs.sh("mkdir /cairn/d && mkdir /cairn/d/e && echo 12345 > /cairn/d/e/f");
    let out = text(&fs.sh(
        "stat -c '%s %F %b %B' /cairn/d/e/f /cairn/d && ls -a /cairn/d && test -d /cairn/d/e && \
         test -f /cairn/d/e/f && test ! -e /cairn/nothing && echo tests-ok",
    ));
    assert_eq!(
        out,
        "6 regular file 128 512\n0 directory 0 512\n.\n..\ne\ntests-ok\n"
    );
    fs.sh("mv /cairn/d/e /cairn/g && rm -r /cairn/d");
    assert_eq!(text(&fs.sh("ls -R /cairn")), "/cairn:\ng\n\n/cairn/g:\nf\n");
    // Moving out of the store copies (EXDEV), and removes the original.
    let tmp = tempfile::tempdir().unwrap();
    fs.sh(&format!("mv /cairn/g/f {}/f", tmp.path().display()));
    assert_eq!(std::fs::read(tmp.path().join("f")).unwrap(), b"12345\n");
    assert!(fs.store().unwrap().stat("g/f").unwrap_err().is_not_found());
}

#[test]
fn mkdir_p_df_and_a_shell_in_a_working_directory_under_the_prefix() {
    let fs = Fs::new("cwd");
    // GNU mkdir -p and df both chdir into the directory they are given.
    fs.run("mkdir", &["-p", "/cairn/a/b/c"]);
    assert_eq!(text(&fs.run("ls", &["/cairn/a/b"]).stdout), "c\n");
    let out = fs.sh("cd /cairn/a && echo x > rel && cat rel && pwd && /bin/pwd && ls");
    assert_eq!(text(&out), "x\n/cairn/a\n/cairn/a\nb\nrel\n");
    assert_eq!(fs.stored("a/rel"), b"x\n");
    // Leaving the prefix, relative names are real ones again.
    let tmp = tempfile::tempdir().unwrap();
    fs.sh(&format!(
        "cd /cairn/a/b && cd {} && echo real > here",
        tmp.path().display()
    ));
    assert_eq!(std::fs::read(tmp.path().join("here")).unwrap(), b"real\n");
    // df: the store's size (64 MiB) in 1K blocks, mounted on the prefix.
    let df = text(&fs.run("df", &["-P", "/cairn/a"]).stdout);
    let line: Vec<&str> = df.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!((line[1], line[5]), ("65536", "/cairn"), "{df}");
}

#[test]
fn c_program_in_a_working_directory_under_the_prefix() {
    let fs = Fs::new("cwdc");
    let out = fs.run(program("inherit", "cc"), &["cwd", "/cairn/c"]);
    assert_eq!(text(&out.stdout), "cwd ok\n");
    assert_eq!(fs.stored("c/by_open"), b"open\n");
    assert_eq!(fs.stored("c/sub/moved"), b"fopen\n");
    assert_eq!(fs.stored("c/sub/by_openat"), b"openat\n");
}

#[test]
fn commands_a_shell_starts_write_to_its_redirections() {
    let fs = Fs::new("exec");
    // A text file of our own (a system file such as /etc/services is missing on minimal
    // systems), of 70890 bytes: more than one chunk, the last one partial.
    let tmp = tempfile::tempdir().unwrap();
    let lines: String = (0..3000)
        .map(|i| format!("line {i} of the source\n"))
        .collect();
    let src = write_file(tmp.path(), "src.txt", lines.as_bytes());
    fs.sh(&format!("cat {} > /cairn/f", src.display()));
    assert!(fs.stored("f") == lines.as_bytes());
    let out = fs.sh("dd if=/dev/urandom bs=64k count=20 2>/dev/null >> /cairn/g; ls -l /cairn/g");
    assert_eq!(fs.stored("g").len(), 20 << 16);
    assert!(text(&out).contains(" 1310720 "), "{}", text(&out));
    let out = fs.sh("seq 1 100000 | gzip > /cairn/z.gz && gunzip -c < /cairn/z.gz | tail -1");
    assert_eq!(text(&out), "100000\n");
    // A program writing through stdio (seq) into a redirection, run from a working directory
    // under the prefix with a relative name.
    fs.sh("mkdir /cairn/w && cd /cairn/w && seq 3 > three && sort -r < three > rev");
    assert_eq!(fs.stored("w/rev"), b"3\n2\n1\n");
    // Each program has its own offset after exec: the shell's next write lands where the
    // shell's offset is, over what the external echo wrote (documented).
    fs.sh("{ echo a; /bin/echo b; echo c; } > /cairn/t");
    assert_eq!(fs.stored("t"), b"a\nc\n");
    // With >> every write appends, whoever makes it.
    fs.sh("{ echo a; /bin/echo b; echo c; } >> /cairn/u");
    assert_eq!(fs.stored("u"), b"a\nb\nc\n");
}

#[test]
fn bash_builtins_write_through_stdout() {
    let fs = Fs::new("bash");
    let out = fs.run(
        "bash",
        &[
            "-c",
            "echo hi > /cairn/h && printf '%s\\n' there >> /cairn/h && echo back && cat /cairn/h",
        ],
    );
    assert_eq!(text(&out.stdout), "back\nhi\nthere\n");
    assert_eq!(fs.stored("h"), b"hi\nthere\n");
}

#[test]
fn c_program_forks_and_execs_children_onto_inherited_descriptors() {
    let fs = Fs::new("inherit");
    let exe = program("inherit", "cc");
    let out = fs.run(&exe, &["exec", "/cairn/e", exe.to_str().unwrap()]);
    assert_eq!(text(&out.stdout), "exec ok\n");
    assert_eq!(fs.stored("e/out"), b"parent\nchild\nchild\nsys\nafter\nv\n");
    assert_eq!(fs.stored("e/log"), b"p\nc\nc\n");
}

#[test]
fn python_subprocess_keeps_and_passes_descriptors() {
    let fs = Fs::new("pysub");
    let py = python();
    // CPython starts children with vfork, whose closes must not reach the parent's table.
    let script = r#"
import os, subprocess
os.mkdir("/cairn/py")
os.chdir("/cairn/py")
f = open("kept", "w")
subprocess.run(["true"], check=True)
f.write("still mine\n")
f.close()
with open("out", "w") as out:
    subprocess.run(["sh", "-c", "echo child; pwd"], stdout=out, check=True)
print(open("/cairn/py/out").read(), end="")
"#;
    let out = fs.run(&py, &["-c", script]);
    assert_eq!(text(&out.stdout), "child\n/cairn/py\n");
    assert_eq!(fs.stored("py/kept"), b"still mine\n");
}
