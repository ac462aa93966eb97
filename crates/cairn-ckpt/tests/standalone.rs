//! The checkpoint library and the restorer without a coordinator: unmodified C programs run
//! with `libcairn-ckpt.so` preloaded and `CAIRN_CKPT_DIR` set, are checkpointed by the
//! checkpoint signal sent from outside, killed with SIGKILL, and brought back by
//! `cairn-restore`; each program checks its own state and says OK or BAD at the end.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

fn native() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../native/ckpt")
}

/// `native/ckpt/tests/<name>.c`, built once per test process: tests run side by side,
/// and rebuilding a program another test is running would replace the file its restart
/// maps again.
fn program(name: &str, extra: &[&str]) -> PathBuf {
    static BUILT: Mutex<BTreeMap<String, PathBuf>> = Mutex::new(BTreeMap::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(out) = built.get(name) {
        return out.clone();
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ckpt-programs");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(format!("{name}-{}", std::process::id()));
    let src = native().join("tests").join(format!("{name}.c"));
    let st = Command::new("cc")
        .args(["-O2", "-g", "-pthread", "-o"])
        .arg(&out)
        .arg(&src)
        .args(extra)
        .status()
        .expect("cc");
    assert!(st.success(), "compiling {}", src.display());
    built.insert(name.to_string(), out.clone());
    out
}

fn lib() -> PathBuf {
    cairn_ckpt::preload_library().expect("libcairn-ckpt.so was built")
}

fn restorer() -> PathBuf {
    cairn_ckpt::restorer().expect("cairn-restore was built")
}

fn ckpt_signal() -> i32 {
    libc::SIGRTMIN() + 4
}

/// A program under the library, its stdout going to a file (so that it can be followed
/// across the restart: the restored process writes to the same file).
struct Run {
    child: Child,
    out: PathBuf,
    images: PathBuf,
}

fn launch(dir: &Path, prog: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let out = dir.join("out.txt");
    let images = dir.join("images");
    let mut c = Command::new(prog);
    cairn_ckpt::standard_streams_only(&mut c);
    let child = c
        .args(args)
        .env("LD_PRELOAD", lib())
        .env("CAIRN_CKPT_DIR", &images)
        .envs(env.iter().copied())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Run { child, out, images }
}

fn wait_for(path: &Path, what: &str, timeout: Duration) -> String {
    let t0 = Instant::now();
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.contains(what) {
            return text;
        }
        assert!(
            t0.elapsed() < timeout,
            "{} never showed {what:?}; it holds:\n{text}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Ask for checkpoint `v` with the signal, and wait for its image.
fn checkpoint(pid: u32, images: &Path, v: u32) -> PathBuf {
    // SAFETY: kill(2) on a child process id.
    assert_eq!(unsafe { libc::kill(pid as i32, ckpt_signal()) }, 0);
    let img = images.join(format!("v{v}/proc0.img"));
    let t0 = Instant::now();
    while !img.is_file() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no image {}",
            img.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    cairn_ckpt::read_header(&img).expect("a complete image");
    img
}

fn kill9(child: &mut Child) {
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
}

/// Restore an image in the foreground and return its exit status and stderr.
fn restore(img: &Path, args: &[&str]) -> (i32, String) {
    let o = Command::new(restorer())
        .arg(img)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn spawn_restore(img: &Path) -> Child {
    Command::new(restorer())
        .arg(img)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn the_restorer_is_freestanding() {
    let r = restorer();
    let o = Command::new("nm").arg("-u").arg(&r).output().expect("nm");
    assert!(o.status.success());
    assert!(
        o.stdout.is_empty(),
        "undefined symbols in {}: {}",
        r.display(),
        String::from_utf8_lossy(&o.stdout)
    );
    // No interpreter, no dynamic section: nothing from libc can be reached.
    let o = Command::new("readelf")
        .args(["-lW"])
        .arg(&r)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        !text.contains("INTERP") && !text.contains("DYNAMIC"),
        "{text}"
    );
    assert!(
        text.contains("0x00003f0000000000"),
        "not linked at the hole:\n{text}"
    );
}

#[test]
fn image_header_layout_matches_c() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("layout.c");
    std::fs::write(
        &src,
        r#"#include "image.h"
#define XXH_INLINE_ALL
#include <xxhash.h>
#include <stddef.h>
#include <stdio.h>
int main(void) {
    unsigned char sample[100];
    for (int i = 0; i < 100; i++) sample[i] = (unsigned char)(i * 7 + 1);
    printf("%llx %llx ", (unsigned long long)XXH3_64bits(sample, 100), (unsigned long long)XXH3_64bits(sample, 64));
    printf("%zu %zu %zu %u ", sizeof(struct cairn_img_ipc), offsetof(struct cairn_img_ipc, data_off), offsetof(struct cairn_img_ipc, sums_off), CAIRN_IPC_SHM);
    printf("%zu %d %zu %zu %zu %zu %zu %zu %zu %zu %zu %zu %zu %zu %zu %zu %zu %zu %zu %zu %s\n", offsetof(struct cairn_img_header, meta_sum), CAIRN_IMG_PATH_MAX, sizeof(struct cairn_img_header),
        offsetof(struct cairn_img_header, file_size), offsetof(struct cairn_img_header, kernel_release),
        offsetof(struct cairn_img_header, cpuid1_ecx), offsetof(struct cairn_img_header, xcr0),
        offsetof(struct cairn_img_header, pid), offsetof(struct cairn_img_header, hole_start),
        offsetof(struct cairn_img_header, control_addr), offsetof(struct cairn_img_header, time_ns),
        offsetof(struct cairn_img_header, ppid), offsetof(struct cairn_img_header, ids),
        offsetof(struct cairn_img_header, xfds_off), sizeof(struct cairn_img_xfd),
        offsetof(struct cairn_img_xfd, data_off), offsetof(struct cairn_img_header, ipc_off),
        sizeof(struct cairn_img_hashes), offsetof(struct cairn_img_hashes, block),
        offsetof(struct cairn_img_hashes, count), CAIRN_HASHES_MAGIC);
    return 0;
}"#,
    )
    .unwrap();
    let exe = dir.path().join("layout");
    let st = Command::new("cc")
        .arg("-I")
        .arg(native())
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .status()
        .unwrap();
    assert!(st.success());
    let out = String::from_utf8(Command::new(&exe).output().unwrap().stdout).unwrap();
    use cairn_ckpt::ImageHeader as H;
    use std::mem::{offset_of, size_of};
    let sample: Vec<u8> = (0..100u32).map(|i| (i * 7 + 1) as u8).collect();
    let rust = format!(
        "{:x} {:x} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {}\n",
        cairn_ckpt::image_sum(&sample),
        cairn_ckpt::image_sum(&sample[..64]),
        size_of::<cairn_ckpt::Ipc>(),
        offset_of!(cairn_ckpt::Ipc, data_off),
        offset_of!(cairn_ckpt::Ipc, sums_off),
        cairn_ckpt::IPC_SHM,
        offset_of!(H, meta_sum),
        cairn_ckpt::IMAGE_PATH_MAX,
        size_of::<H>(),
        offset_of!(H, file_size),
        offset_of!(H, kernel_release),
        offset_of!(H, cpuid1_ecx),
        offset_of!(H, xcr0),
        offset_of!(H, pid),
        offset_of!(H, hole_start),
        offset_of!(H, control_addr),
        offset_of!(H, time_ns),
        offset_of!(H, ppid),
        offset_of!(H, ids),
        offset_of!(H, xfds_off),
        size_of::<cairn_ckpt::Xfd>(),
        offset_of!(cairn_ckpt::Xfd, data_off),
        offset_of!(H, ipc_off),
        size_of::<cairn_ckpt::HashesHeader>(),
        offset_of!(cairn_ckpt::HashesHeader, block),
        offset_of!(cairn_ckpt::HashesHeader, count),
        std::str::from_utf8(cairn_ckpt::HASHES_MAGIC).unwrap()
    );
    assert_eq!(
        out, rust,
        "image.h (first) and ImageHeader (second) disagree"
    );
}

#[test]
fn a_counter_is_killed_and_restarted_twice() {
    let dir = tempfile::tempdir().unwrap();
    let prog = program("counter", &[]);
    let mut run = launch(dir.path(), &prog, &["1500", "1000"], &[]);
    wait_for(&run.out, "step 200\n", Duration::from_secs(30));
    let img1 = checkpoint(run.child.id(), &run.images, 1);
    wait_for(&run.out, "step 600\n", Duration::from_secs(30));
    kill9(&mut run.child);
    // First restart, then a checkpoint of the restored process, killed too.
    let mut r1 = spawn_restore(&img1);
    wait_for(&run.out, "step 900\n", Duration::from_secs(30));
    let img2 = checkpoint(r1.id(), &run.images, 2);
    wait_for(&run.out, "step 1000\n", Duration::from_secs(30));
    kill9(&mut r1);
    // Second restart runs to the end.
    let (code, err) = restore(&img2, &[]);
    let out = std::fs::read_to_string(&run.out).unwrap();
    assert_eq!(code, 0, "{err}\n{out}");
    assert!(
        out.contains("counter: done, sum 1125750 heap 1125750 OK"),
        "{out}"
    );
    // The output file went back to its size at each checkpoint: every step once, in order.
    let steps: Vec<u64> = out
        .lines()
        .filter_map(|l| l.strip_prefix("step ")?.parse().ok())
        .collect();
    assert_eq!(steps, (1..=1500).collect::<Vec<_>>());
}

/// Per thread: the CPU mask it reported after pinning itself, and at its end the mask and
/// the CPU sched_getcpu() gave (which reads the rseq area: stale if rseq was not registered
/// again).
fn masks(out: &str) -> Vec<(String, String, i32)> {
    let mut v: Vec<(String, String, i32)> = vec![Default::default(); 4];
    for l in out.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        if w.len() >= 5 && w[0] == "thread" {
            let i: usize = w[1].parse().unwrap();
            match w[2] {
                "start" => v[i].0 = w[4].to_string(),
                "end" => {
                    v[i].1 = w[4].to_string();
                    v[i].2 = w[6].parse().unwrap();
                }
                _ => {}
            }
        }
    }
    v
}

#[test]
fn threads_come_back_with_their_cpu_masks() {
    for affinity in ["on", "off"] {
        let dir = tempfile::tempdir().unwrap();
        let prog = program("threads", &[]);
        let mut run = launch(dir.path(), &prog, &["4", "4000000", "pin"], &[]);
        wait_for(&run.out, "threads: started 4", Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(200));
        let img = checkpoint(run.child.id(), &run.images, 1);
        kill9(&mut run.child);
        let (code, err) = restore(&img, &["--affinity", affinity]);
        let out = std::fs::read_to_string(&run.out).unwrap();
        assert_eq!(code, 0, "{err}\n{out}");
        assert!(out.contains("threads: done OK"), "{out}");
        let m = masks(&out);
        let cpus = std::thread::available_parallelism().unwrap().get();
        for (i, (start, end, cpu)) in m.iter().enumerate() {
            assert!(!start.is_empty() && !end.is_empty(), "thread {i}: {out}");
            if affinity == "on" {
                assert_eq!(start, end, "thread {i} lost its CPU mask: {out}");
                assert_eq!(start, &cpu.to_string(), "thread {i} runs elsewhere: {out}");
            }
        }
        if affinity == "off" && cpus > 1 {
            // The restored threads keep the restorer's mask: all CPUs.
            assert!(
                m.iter().any(|(s, e, _)| s != e),
                "masks came back anyway: {out}"
            );
        }
    }
}

#[test]
fn a_program_appending_to_a_file_and_blocking_signals() {
    let dir = tempfile::tempdir().unwrap();
    let prog = program("appender", &[]);
    let log = dir.path().join("log.txt");
    let mut run = launch(
        dir.path(),
        &prog,
        &[log.to_str().unwrap(), "300", "block"],
        &[],
    );
    wait_for(&run.out, "appender: started", Duration::from_secs(30));
    wait_for(&log, "line 80\n", Duration::from_secs(30));
    let img = checkpoint(run.child.id(), &run.images, 1);
    wait_for(&log, "line 150\n", Duration::from_secs(30));
    kill9(&mut run.child);
    let (code, err) = restore(&img, &[]);
    let out = std::fs::read_to_string(&run.out).unwrap();
    assert_eq!(code, 0, "{err}\n{out}");
    assert!(out.contains("appender: done OK (300 lines)"), "{out}");
}

#[test]
fn openmp_reductions_with_2_and_4_threads() {
    for threads in ["2", "4"] {
        let dir = tempfile::tempdir().unwrap();
        let prog = program("omp", &["-fopenmp"]);
        let mut run = launch(dir.path(), &prog, &["150"], &[("OMP_NUM_THREADS", threads)]);
        wait_for(&run.out, "rep 20\n", Duration::from_secs(60));
        let img = checkpoint(run.child.id(), &run.images, 1);
        kill9(&mut run.child);
        let (code, err) = restore(&img, &[]);
        let out = std::fs::read_to_string(&run.out).unwrap();
        assert_eq!(code, 0, "{threads} threads: {err}\n{out}");
        assert!(out.contains(&format!("omp: {threads} threads")), "{out}");
        assert!(out.contains("omp: done OK"), "{threads} threads: {out}");
    }
}

#[test]
fn a_1_gib_array_comes_back_intact() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let prog = program("bigarray", &[]);
    let mut run = launch(dir.path(), &prog, &["1024", "6"], &[]);
    let before = wait_for(&run.out, "round 0 ", Duration::from_secs(120));
    let img = checkpoint(run.child.id(), &run.images, 1);
    let h = cairn_ckpt::read_header(&img).unwrap();
    assert!(h.file_size > 1 << 30, "image of {} bytes", h.file_size);
    kill9(&mut run.child);
    let (code, err) = restore(&img, &[]);
    let out = std::fs::read_to_string(&run.out).unwrap();
    assert_eq!(code, 0, "{err}\n{out}");
    assert!(out.contains("bigarray: done OK"), "{out}");
    // Page placement: before, the array's pages follow the default policy on the node the
    // kernel chose; after the restart they are on that same node, bound there by the
    // restorer before it filled them (with one NUMA node here, node 0: what is exercised is
    // the recording of the node and the binding, not a move between nodes).
    let round = |text: &str, first: bool| -> (i32, i32, String) {
        let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("round ")).collect();
        let l = if first {
            lines[0]
        } else {
            lines[lines.len() - 1]
        };
        let w: Vec<&str> = l.split_whitespace().collect();
        (
            w[3].parse().unwrap(),
            w[5].parse().unwrap(),
            w[7].to_string(),
        )
    };
    let (node0, policy0, _) = round(&before, true);
    let (node1, policy1, mask1) = round(&out, false);
    assert!(node0 >= 0, "move_pages found no node: {before}");
    assert_eq!(policy0, 0, "MPOL_DEFAULT before: {before}");
    assert_eq!(node1, node0, "the pages moved to another node: {out}");
    assert_eq!(
        policy1, 1,
        "not bound (MPOL_PREFERRED) after the restart: {out}"
    );
    assert_eq!(mask1, format!("{:x}", 1u64 << node0), "{out}");
}

/// Change bytes of an image copy at `at` and restore it: the restorer must refuse. With
/// `reseal` the header checksum is made to fit again (an image as another machine writes it),
/// else the change is damage.
fn refused(img: &Path, at: usize, bytes: &[u8], reseal: bool) -> (i32, String) {
    let bad = img.with_extension("bad");
    let mut b = std::fs::read(img).unwrap();
    b[at..at + bytes.len()].copy_from_slice(bytes);
    if reseal {
        let h = cairn_ckpt::read_header(img).unwrap();
        let sum = cairn_ckpt::meta_sum(&b, h.data_start).unwrap();
        let o = cairn_ckpt::META_SUM_OFFSET;
        b[o..o + 8].copy_from_slice(&sum.to_le_bytes());
    }
    std::fs::write(&bad, &b).unwrap();
    restore(&bad, &[])
}

#[test]
fn images_from_another_kernel_or_cpu_or_truncated_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let prog = program("counter", &[]);
    let mut run = launch(dir.path(), &prog, &["100000", "1000"], &[]);
    wait_for(&run.out, "step 50\n", Duration::from_secs(30));
    let img = checkpoint(run.child.id(), &run.images, 1);
    kill9(&mut run.child);
    use cairn_ckpt::ImageHeader as H;
    use std::mem::offset_of;
    let (code, err) = refused(&img, offset_of!(H, kernel_release), b"9.99.0-other\0", true);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("kernel 9.99.0-other") && err.contains("same kernel build"),
        "{err}"
    );
    // A CPU feature this CPU lacks: a bit of CPUID.7:ECX that is clear here.
    let h = cairn_ckpt::read_header(&img).unwrap();
    // The Rust check reads this machine as the library recorded it.
    let here = cairn_ckpt::Machine::here().unwrap();
    assert_eq!(h.fits(&here), Ok(()));
    let mut lesser = here.clone();
    lesser.cpuid[1] = 0;
    assert!(h.fits(&lesser).unwrap_err().contains("CPUID.1:EDX"));
    let missing = (0..32)
        .map(|b| 1u32 << b)
        .find(|m| h.cpuid7_ecx & m == 0)
        .expect("a clear bit");
    let (code, err) = refused(
        &img,
        offset_of!(H, cpuid7_ecx),
        &(h.cpuid7_ecx | missing).to_le_bytes(),
        true,
    );
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("lacks features") && err.contains("CPUID.7:ECX"),
        "{err}"
    );
    // Truncated: the recorded size no longer matches.
    let cut = img.with_extension("cut");
    let b = std::fs::read(&img).unwrap();
    std::fs::write(&cut, &b[..b.len() - 4096]).unwrap();
    let (code, err) = restore(&cut, &[]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("truncated"), "{err}");
    assert!(cairn_ckpt::read_header(&cut).is_err());
    // Damage the checksums find: a byte of the header, of a region record, of a bitmap and
    // of saved pages (the first, the last), each refused before the process runs.
    let len = std::fs::metadata(&img).unwrap().len() as usize;
    let data = h.data_start as usize;
    let pages_end = h.sums_off as usize;
    for (at, what) in [
        (offset_of!(H, pid), "header and tables"),
        (h.regions_off as usize + 3, "header and tables"),
        (data - 1, "header and tables"),
        (data + 100, "fail their checksum"),
        (pages_end - 1, "fail their checksum"),
        (len - 1, "checksum"),
    ] {
        let b = std::fs::read(&img).unwrap()[at];
        let (code, err) = refused(&img, at, &[b ^ 0x20], false);
        assert_eq!(code, 4, "byte {at}: {err}");
        assert!(
            err.contains("damaged image") && err.contains(what),
            "byte {at}: {err}"
        );
        // The coordinator's own reading of the header refuses the same tables.
        let header_damage = what == "header and tables";
        assert_eq!(
            cairn_ckpt::read_header(&img.with_extension("bad")).is_err(),
            header_damage,
            "byte {at}"
        );
    }
    // 250 random mutations (a flipped byte anywhere, a few bytes of garbage, a cut, bytes
    // appended): every one refused as damaged, none restored, none crashing the restorer or
    // hanging it (a restored counter would run until `timeout` ends it: 124).
    let good = std::fs::read(&img).unwrap();
    let bad = img.with_extension("mutated");
    let mut rng = fastrand::Rng::with_seed(20261129);
    let mut outcomes: std::collections::BTreeMap<i32, u32> = Default::default();
    for trial in 0..250 {
        let mut b = good.clone();
        let what = match trial % 4 {
            0 => {
                let at = rng.usize(0..b.len());
                b[at] ^= 1 << rng.u32(0..8);
                format!("bit flipped at {at}")
            }
            1 => {
                let at = rng.usize(0..b.len() - 8);
                rng.fill(&mut b[at..at + 8]);
                format!("garbage at {at}")
            }
            2 => {
                let to = rng.usize(0..b.len());
                b.truncate(to);
                format!("cut to {to}")
            }
            _ => {
                b.extend_from_slice(&[0u8; 4096]);
                "4096 bytes appended".to_string()
            }
        };
        if b == good {
            continue; // the garbage happened to be the bytes that were there
        }
        std::fs::write(&bad, &b).unwrap();
        let o = Command::new("timeout")
            .arg("10")
            .arg(restorer())
            .arg(&bad)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let code = o.status.code().unwrap_or(-1);
        *outcomes.entry(code).or_default() += 1;
        assert_eq!(
            code,
            4,
            "mutation {trial} ({what}): {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    eprintln!("image mutations: exit codes {outcomes:?}");
}

/// A thread slow between entering the handler and saving its resume point (here: a
/// preloaded getpriority() that sleeps 50 ms, which the handler calls in between) must still
/// be written whole: the stop waits for it.
#[test]
fn a_thread_slow_to_stop_is_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("slowprio.c");
    std::fs::write(
        &src,
        r#"#define _GNU_SOURCE
#include <dlfcn.h>
#include <sys/resource.h>
#include <time.h>
int getpriority(__priority_which_t w, id_t who) {
    struct timespec ts = {0, 50000000};
    nanosleep(&ts, 0);
    return ((int (*)(__priority_which_t, id_t))dlsym(RTLD_NEXT, "getpriority"))(w, who);
}"#,
    )
    .unwrap();
    let shim = dir.path().join("libslowprio.so");
    assert!(Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&shim)
        .arg(&src)
        .arg("-ldl")
        .status()
        .unwrap()
        .success());
    let prog = program("counter", &[]);
    let out = dir.path().join("out.txt");
    let images = dir.path().join("images");
    let mut c = Command::new(&prog);
    cairn_ckpt::standard_streams_only(&mut c);
    let mut child = c
        .args(["800", "1000"])
        .env(
            "LD_PRELOAD",
            format!("{}:{}", shim.display(), lib().display()),
        )
        .env("CAIRN_CKPT_DIR", &images)
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&out, "step 100\n", Duration::from_secs(30));
    let img = checkpoint(child.id(), &images, 1);
    kill9(&mut child);
    let (code, err) = restore(&img, &[]);
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(code, 0, "{err}\n{text}");
    assert!(
        text.contains("counter: done, sum 320400 heap 320400 OK"),
        "{text}"
    );
}
