//! Generates `cairn.h` from the crate's `extern "C"` items with cbindgen, into `OUT_DIR`.
//! The committed `include/cairn.h` must match it (a test checks).

fn main() {
    let crate_dir = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("cairn.h");
    println!("cargo:rerun-if-changed=src/lib.rs");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    let config =
        cbindgen::Config::from_file(format!("{crate_dir}/cbindgen.toml")).expect("cbindgen.toml");
    match cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
    {
        Ok(b) => {
            b.write_to_file(&out);
        }
        Err(e) => println!("cargo:warning=cbindgen could not generate cairn.h: {e}"),
    }
}
