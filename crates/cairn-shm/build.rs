//! Builds the C half of the store: `native/fs/store.c` as a static library linked into this
//! crate, and `libcairn-fs.so`, the LD_PRELOAD interposer (every `.c` file of `native/fs`),
//! which is copied beside the binaries (`target/<profile>/libcairn-fs.so`) so `cairn fs run`
//! and users find it.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let native = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../native/fs");
    let native = native.canonicalize().expect("native/fs exists");
    println!("cargo:rerun-if-changed={}", native.display());
    let mut sources: Vec<PathBuf> = std::fs::read_dir(&native)
        .expect("read native/fs")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "c" || x == "h"))
        .collect();
    sources.sort();
    for s in &sources {
        println!("cargo:rerun-if-changed={}", s.display());
    }
    let c_files: Vec<&PathBuf> = sources
        .iter()
        .filter(|p| p.extension().is_some_and(|x| x == "c"))
        .collect();

    cc::Build::new()
        .file(native.join("store.c"))
        .include(&native)
        .flag_if_supported("-std=gnu11")
        .warnings(true)
        .extra_warnings(true)
        .opt_level(2)
        .compile("cairn_store");
    println!("cargo:rustc-link-lib=pthread");

    // The preload library: one shared object from every C file, linked by the same compiler.
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let so = out.join("libcairn-fs.so");
    let compiler = cc::Build::new().opt_level(2).get_compiler();
    let mut cmd: Command = compiler.to_command();
    cmd.args([
        "-std=gnu11",
        "-O2",
        "-g",
        "-fPIC",
        "-shared",
        "-Wall",
        "-Wextra",
    ])
    .arg("-fvisibility=hidden")
    .arg("-I")
    .arg(&native)
    .args(&c_files)
    .arg("-o")
    .arg(&so)
    .args(["-ldl", "-lpthread", "-Wl,-z,defs"]);
    let status = cmd.status().expect("run the C compiler");
    println!("cargo:rustc-env=CAIRN_FS_PRELOAD_BUILT={}", so.display());
    if !status.success() {
        // The store (above) is what this crate links; a broken interposer must not stop the
        // engine from building. It is loud instead: `./run build` installs the library and
        // fails without it, and the interposer's tests fail to find it.
        println!("cargo:warning=building libcairn-fs.so failed (the LD_PRELOAD interposer is missing): {cmd:?}");
        let _ = std::fs::remove_file(&so);
        if let Some(profile_dir) = out.ancestors().nth(3) {
            let _ = std::fs::remove_file(profile_dir.join("libcairn-fs.so"));
        }
        return;
    }
    // OUT_DIR is target/<profile>/build/<crate>-<hash>/out: put a copy in target/<profile>.
    if let Some(profile_dir) = out.ancestors().nth(3) {
        let dest = profile_dir.join("libcairn-fs.so");
        let tmp = profile_dir.join(".libcairn-fs.so.tmp");
        if std::fs::copy(&so, &tmp).is_ok() {
            let _ = std::fs::rename(&tmp, &dest);
        }
    }
}
