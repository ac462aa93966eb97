//! Builds `native/ckpt`: `libcairn-ckpt.so` (the library `cairn launch` preloads) and
//! `cairn-restore` (the freestanding restorer, static, no libc, linked at the restore hole
//! of `image.h`), and copies both beside the binaries (`target/<profile>/`); and, from
//! `native/pmix`, `cairn-prun` (the PMIx launcher whose ranks a checkpoint takes with it),
//! when libpmix's development files are installed (`pkg-config pmix`; Debian's
//! libpmix-dev, which libopenmpi-dev pulls in). A failure is a warning, not a stop, so the
//! rest of the workspace still builds; the tests of this crate then fail to find them.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let native = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../native/ckpt")
        .canonicalize()
        .expect("native/ckpt exists");
    for f in [
        "ckpt.c",
        "hash_avx2.c",
        "hashes.h",
        "restorer.c",
        "image.h",
        "proto.h",
    ] {
        println!("cargo:rerun-if-changed={}", native.join(f).display());
    }
    // Both checksum images with xxhash.h (Debian's libxxhash-dev, which ./run installs),
    // inlined: nothing is linked.
    let xxhash = Path::new("/usr/include/xxhash.h");
    if xxhash.exists() {
        println!("cargo:rerun-if-changed={}", xxhash.display());
    } else {
        println!(
            "cargo:warning=no /usr/include/xxhash.h (install libxxhash-dev): \
             libcairn-ckpt.so and cairn-restore cannot be built"
        );
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let profile_dir = out.ancestors().nth(3).map(Path::to_path_buf);
    let cc = cc::Build::new().get_compiler();
    let lib = out.join("libcairn-ckpt.so");
    // The library's objects: the AVX2 build of the hashes, an object of its own
    // (hash_avx2.c says why), then ckpt.c linked with it.
    const LIB_FLAGS: [&str; 7] = [
        "-std=gnu11",
        "-O2",
        "-g",
        "-fPIC",
        "-Wall",
        "-Wextra",
        "-fvisibility=hidden",
    ];
    let avx2 = out.join("hash_avx2.o");
    let mut c = cc.to_command();
    c.args(LIB_FLAGS)
        .args(["-mavx2", "-c"])
        .arg(native.join("hash_avx2.c"))
        .arg("-o")
        .arg(&avx2);
    build(c, &avx2, "hash_avx2.o", None);
    let mut c = cc.to_command();
    c.args(LIB_FLAGS)
        .arg("-shared")
        .arg(native.join("ckpt.c"))
        .arg(&avx2)
        .arg("-o")
        .arg(&lib)
        .args(["-ldl", "-lpthread", "-Wl,-z,defs"]);
    build(c, &lib, "libcairn-ckpt.so", profile_dir.as_deref());
    let restorer = out.join("cairn-restore");
    let mut c = cc.to_command();
    // Freestanding and at a fixed address: -fpie code (RIP-relative) linked static, not PIE,
    // so the text lands at the hole without relocations; no stack protector (no TLS yet),
    // no CET notes, no builtin loops turned back into memcpy calls.
    c.args(["-std=gnu11", "-O1", "-g", "-Wall", "-Wextra"])
        .args([
            "-ffreestanding",
            "-fno-stack-protector",
            "-fno-tree-loop-distribute-patterns",
        ])
        .args([
            "-fpie",
            "-no-pie",
            "-static",
            "-nostdlib",
            "-fcf-protection=none",
        ])
        .args([
            "-Wl,-Ttext-segment=0x3f0000000000",
            "-Wl,--build-id=none",
            "-Wl,-z,noexecstack",
        ])
        .arg(native.join("restorer.c"))
        .arg("-o")
        .arg(&restorer);
    build(c, &restorer, "cairn-restore", profile_dir.as_deref());
    build_prun(&cc, &out, profile_dir.as_deref());
    println!("cargo:rustc-env=CAIRN_CKPT_LIB_BUILT={}", lib.display());
    println!("cargo:rustc-env=CAIRN_RESTORE_BUILT={}", restorer.display());
}

/// `cairn-prun`, linked with libpmix as `pkg-config pmix` says (its rpath included: Debian
/// keeps the library under `pmix2/lib`).
fn build_prun(cc: &cc::Tool, out: &Path, profile_dir: Option<&Path>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../native/pmix/prun.c");
    println!("cargo:rerun-if-changed={}", src.display());
    let flags = |what: &str| {
        Command::new("pkg-config")
            .args([what, "pmix"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .split_whitespace()
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
    };
    let (Some(cflags), Some(libs)) = (flags("--cflags"), flags("--libs")) else {
        println!(
            "cargo:warning=no libpmix development files (pkg-config pmix; install libpmix-dev): \
             cairn-prun is not built"
        );
        return;
    };
    let prun = out.join("cairn-prun");
    let mut c = cc.to_command();
    c.args(["-std=gnu11", "-O2", "-g", "-Wall", "-Wextra"])
        .args(&cflags)
        .arg(&src)
        .arg("-o")
        .arg(&prun)
        .args(&libs);
    build(c, &prun, "cairn-prun", profile_dir);
}

fn build(mut cmd: Command, output: &Path, name: &str, profile_dir: Option<&Path>) {
    let ok = cmd.status().map(|s| s.success()).unwrap_or(false);
    if !ok {
        println!("cargo:warning=building {name} failed: {cmd:?}");
        let _ = std::fs::remove_file(output);
        if let Some(d) = profile_dir {
            let _ = std::fs::remove_file(d.join(name));
        }
        return;
    }
    if let Some(d) = profile_dir {
        let tmp = d.join(format!(".{name}.tmp"));
        if std::fs::copy(output, &tmp).is_ok() {
            let _ = std::fs::rename(&tmp, d.join(name));
        }
    }
}
