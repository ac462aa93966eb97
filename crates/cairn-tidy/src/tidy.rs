//! The tidy tests (see the crate's documentation).

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Cycles among the top-level modules of a crate that exist today, by crate: each the set of
/// modules that reach one another through `crate::` paths. There are none; a cycle that has
/// to be lived with for a while is listed here with its reason, and the test fails on any
/// cycle not listed and on any listed one that is gone.
pub(crate) const KNOWN_CYCLES: &[(&str, &[&str])] = &[];

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository's root")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The lines of ARCHITECTURE.md's section `heading` (a `## ` line), up to the next `## `.
fn section(heading: &str) -> Vec<String> {
    let text = read(&root().join("ARCHITECTURE.md"));
    let mut lines = text.lines().skip_while(|l| l.trim_end() != heading);
    assert!(
        lines.next().is_some(),
        "ARCHITECTURE.md has no section {heading:?}"
    );
    lines
        .take_while(|l| !l.starts_with("## "))
        .map(str::to_string)
        .collect()
}

/// A workspace crate as `cargo metadata` describes it.
struct Package {
    name: String,
    /// Its folder, relative to the root (`crates/cairn-core`).
    dir: String,
    /// Its dependencies: name and kind (`None` for normal ones, `dev`, `build`).
    deps: Vec<(String, Option<String>)>,
}

fn packages() -> Vec<Package> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .arg("--manifest-path")
        .arg(root().join("Cargo.toml"))
        .output()
        .expect("running cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    let root = root();
    meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| {
            let manifest = Path::new(p["manifest_path"].as_str().expect("manifest_path"));
            let dir = manifest.parent().expect("the crate's folder");
            Package {
                name: p["name"].as_str().expect("name").to_string(),
                dir: dir
                    .strip_prefix(&root)
                    .expect("a crate inside the repository")
                    .display()
                    .to_string(),
                deps: p["dependencies"]
                    .as_array()
                    .expect("dependencies")
                    .iter()
                    .map(|d| {
                        let name = d["name"].as_str().expect("name").to_string();
                        (name, d["kind"].as_str().map(str::to_string))
                    })
                    .collect(),
            }
        })
        .collect()
}

/// Each workspace crate with its `src/` folder, if it has one.
fn sources() -> Vec<(Package, PathBuf)> {
    let root = root();
    packages()
        .into_iter()
        .map(|p| {
            let src = root.join(&p.dir).join("src");
            (p, src)
        })
        .filter(|(_, src)| src.is_dir())
        .collect()
}

/// The table under "## Layers": each crate with the workspace crates it uses, in table order.
fn layer_table() -> Vec<(String, BTreeSet<String>)> {
    let lines = section("## Layers");
    let block: Vec<&String> = lines
        .iter()
        .skip_while(|l| !l.starts_with("```"))
        .skip(1)
        .take_while(|l| !l.starts_with("```"))
        .collect();
    assert!(!block.is_empty(), "no table in ARCHITECTURE.md's Layers");
    block
        .iter()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("crate "))
        .map(|l| {
            let (name, uses) = l.trim().split_once(char::is_whitespace).unwrap_or((l, "-"));
            let uses = uses.trim();
            let deps = if uses == "-" {
                BTreeSet::new()
            } else {
                uses.split(',').map(|d| d.trim().to_string()).collect()
            };
            (name.to_string(), deps)
        })
        .collect()
}

/// ARCHITECTURE.md's table of layers is the workspace's dependency graph, crate by crate
/// (normal and build dependencies; tests may use more), and each crate uses only crates
/// listed before it.
#[test]
fn the_crate_layers_are_as_architecture_md_states() {
    let pkgs = packages();
    let ours: BTreeSet<&str> = pkgs.iter().map(|p| p.name.as_str()).collect();
    let actual: BTreeMap<&str, BTreeSet<String>> = pkgs
        .iter()
        .map(|p| {
            let deps = p
                .deps
                .iter()
                .filter(|(d, kind)| ours.contains(d.as_str()) && kind.as_deref() != Some("dev"))
                .map(|(d, _)| d.clone())
                .collect();
            (p.name.as_str(), deps)
        })
        .collect();
    let table = layer_table();
    let mut wrong = Vec::new();
    let mut seen = BTreeSet::new();
    for (name, stated) in &table {
        match actual.get(name.as_str()) {
            None => wrong.push(format!("{name} is in the table but is no workspace crate")),
            Some(uses) => {
                for d in uses.difference(stated) {
                    wrong.push(format!("{name} uses {d}, which the table does not say"));
                }
                for d in stated.difference(uses) {
                    wrong.push(format!("the table says {name} uses {d}; it does not"));
                }
            }
        }
        for d in stated {
            if !seen.contains(d.as_str()) {
                wrong.push(format!("{name} uses {d}, which is not listed before it"));
            }
        }
        seen.insert(name.as_str());
    }
    for name in actual.keys() {
        if !seen.contains(name) {
            wrong.push(format!("{name} is missing from the table"));
        }
    }
    assert!(
        wrong.is_empty(),
        "ARCHITECTURE.md's Layers and the Cargo.toml files disagree:\n  {}",
        wrong.join("\n  ")
    );
}

/// `cairn-mpi` is the only crate that depends on the MPI bindings, in any kind of dependency.
#[test]
fn only_cairn_mpi_links_mpi() {
    let mpi = ["mpi", "mpi-sys"];
    let ours = packages();
    let others: Vec<String> = ours
        .iter()
        .filter(|p| p.name != "cairn-mpi")
        .flat_map(|p| {
            p.deps
                .iter()
                .filter(|(d, _)| mpi.contains(&d.as_str()))
                .map(|(d, _)| format!("{} depends on {d}", p.name))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(others.is_empty(), "{}", others.join("\n"));
    let own = ours
        .iter()
        .find(|p| p.name == "cairn-mpi")
        .expect("cairn-mpi");
    assert!(
        own.deps.iter().any(|(d, _)| d == "mpi"),
        "cairn-mpi no longer depends on mpi: update this test and ARCHITECTURE.md"
    );
}

/// Every folder or file a heading of ARCHITECTURE.md's code map names exists, and every
/// workspace crate has a heading.
#[test]
fn the_code_map_names_every_crate_and_only_what_exists() {
    let root = root();
    let mut named = BTreeSet::new();
    for line in section("## Code map")
        .iter()
        .filter(|l| l.starts_with("### "))
    {
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 1 {
                named.insert(part.trim_end_matches('/').to_string());
            }
        }
    }
    let mut wrong: Vec<String> = named
        .iter()
        .filter(|p| !root.join(p).exists())
        .map(|p| format!("the code map names {p}, which does not exist"))
        .collect();
    for p in packages() {
        if !named.contains(&p.dir) {
            wrong.push(format!(
                "{} ({}) has no section in the code map",
                p.name, p.dir
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The top-level modules of one crate's `src/` (not `lib.rs`, `main.rs` or `bin/`) with the
/// files of each.
fn modules(src: &Path) -> BTreeMap<String, Vec<PathBuf>> {
    let mut out: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for path in rust_files(src) {
        let rel = path.strip_prefix(src).expect("under src");
        let first = rel.components().next().expect("a component");
        if first.as_os_str() == "bin" {
            continue;
        }
        let top = Path::new(first.as_os_str())
            .file_stem()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        if rel.components().count() == 1 && (top == "lib" || top == "main") {
            continue;
        }
        out.entry(top).or_default().push(path);
    }
    out
}

/// Every `.rs` file under `src`, at any depth.
fn rust_files(src: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).expect("a source folder").flatten() {
            let path = e.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension() == Some(std::ffi::OsStr::new("rs")) {
                out.push(path);
            }
        }
    }
    out
}

/// The names that `crate::` paths in `text` start with (`crate::a::b` gives `a`;
/// `crate::{a, b::c}` gives `a` and `b`), outside `//` comments.
fn crate_paths(text: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            let before = rest[..i].chars().last();
            let after = &rest[i + "crate::".len()..];
            rest = after;
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
                continue;
            }
            if let Some(group) = after.strip_prefix('{') {
                let mut depth = 0;
                let mut item = String::new();
                for c in group.chars() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            out.insert(ident(item.trim()));
                            item.clear();
                            continue;
                        }
                        _ => {}
                    }
                    if depth == 0 {
                        item.push(c);
                    }
                }
                out.insert(ident(item.trim()));
            } else {
                out.insert(ident(after));
            }
        }
    }
    out.remove("");
    out
}

/// The strongly connected components of more than one node (Tarjan's algorithm).
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            for w in &self.edges[v] {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.stack.contains(&w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                while let Some(w) = self.stack.pop() {
                    comp.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    self.found.push(comp);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found.sort();
    walk.found
}

/// No crate's top-level modules import one another in a cycle, except the cycles listed in
/// [`KNOWN_CYCLES`], exactly as listed.
#[test]
fn no_module_cycles_beyond_the_known_ones() {
    let mut wrong = Vec::new();
    let mut found_known = BTreeSet::new();
    for (p, src) in sources() {
        let mods = modules(&src);
        let edges: BTreeMap<String, BTreeSet<String>> = mods
            .iter()
            .map(|(m, files)| {
                let uses = files
                    .iter()
                    .flat_map(|f| crate_paths(&read(f)))
                    .filter(|n| n != m && mods.contains_key(n))
                    .collect();
                (m.clone(), uses)
            })
            .collect();
        for cycle in cycles(&edges) {
            let known = KNOWN_CYCLES.iter().any(|(c, ms)| {
                *c == p.name && ms.iter().copied().eq(cycle.iter().map(String::as_str))
            });
            if known {
                found_known.insert(p.name.clone());
            } else {
                wrong.push(format!(
                    "{}: modules {} import one another",
                    p.name,
                    cycle.join(", ")
                ));
            }
        }
    }
    for (c, ms) in KNOWN_CYCLES {
        if !found_known.contains(*c) {
            wrong.push(format!(
                "{c}: the known cycle among {} is gone or changed: update KNOWN_CYCLES",
                ms.join(", ")
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The scanner behind the cycle check reads the forms of `crate::` paths the code uses.
#[test]
fn crate_paths_reads_single_grouped_and_nested_paths() {
    let text = "use crate::engine::agree;\n\
                use crate::{part::{self, Hashes}, catalog, Error};\n\
                let x = crate::flush::start(); // crate::commented\n\
                pub(crate) fn f() {}\n\
                macro_rules! m { () => { $crate::hidden } }\n\
                let y = notcrate::other;\n";
    let got: Vec<String> = crate_paths(text).into_iter().collect();
    assert_eq!(got, ["Error", "catalog", "engine", "flush", "part"]);
    let mut edges = BTreeMap::new();
    edges.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    edges.insert("b".to_string(), BTreeSet::from(["c".to_string()]));
    edges.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    edges.insert("d".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(cycles(&edges), [["a", "b", "c"]]);
}

/// The files of `src` (all of them, `bin/` too) whose code, outside `//` comments, has an
/// `unsafe` block, function, impl or extern block, relative to `src`.
fn unsafe_files(src: &Path) -> BTreeSet<String> {
    // Spelled in two parts so that this file does not find itself.
    let keys = ["{", "fn", "impl", "extern"].map(|k| format!("{} {k}", "unsafe"));
    rust_files(src)
        .into_iter()
        .filter(|path| {
            read(path).lines().any(|l| {
                let code = l.split("//").next().unwrap_or("");
                keys.iter().any(|k| code.contains(k.as_str()))
            })
        })
        .map(|path| {
            path.strip_prefix(src)
                .expect("under src")
                .display()
                .to_string()
        })
        .collect()
}

/// Text without its parenthesised parts (nested ones too).
fn without_parentheses(text: &str) -> String {
    let mut depth = 0usize;
    let mut out = String::new();
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// ARCHITECTURE.md's Unsafe item names every file with unsafe code under its crate, and
/// every crate without any forbids it.
#[test]
fn the_unsafe_inventory_is_complete() {
    let lines = section("## Cross-cutting concerns");
    let item: Vec<&String> = lines
        .iter()
        .skip_while(|l| !l.starts_with("- **Unsafe.**"))
        .take_while(|l| l.starts_with("- **Unsafe.**") || !l.starts_with("- **"))
        .collect();
    assert!(
        !item.is_empty(),
        "no Unsafe item in ARCHITECTURE.md's cross-cutting concerns"
    );
    // Each sub-item "  - `crate`: `file`, `file` (why)", over one or more lines: the crate
    // and the files it names outside parentheses.
    let mut entries: Vec<String> = Vec::new();
    for l in &item {
        if let Some(rest) = l.strip_prefix("  - ") {
            entries.push(rest.to_string());
        } else if l.starts_with("    ") {
            if let Some(last) = entries.last_mut() {
                last.push(' ');
                last.push_str(l.trim());
            }
        }
    }
    let mut listed: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for e in &entries {
        let Some((name, files)) = e.strip_prefix('`').and_then(|r| r.split_once("`:")) else {
            continue;
        };
        let files = without_parentheses(files)
            .split('`')
            .enumerate()
            .filter(|(i, _)| i % 2 == 1)
            .map(|(_, f)| f.to_string())
            .collect();
        listed.insert(name.to_string(), files);
    }
    let mut wrong = Vec::new();
    for (p, src) in sources() {
        let found = unsafe_files(&src);
        let stated = listed.remove(&p.name).unwrap_or_default();
        if found.is_empty() {
            let forbids = ["lib.rs", "main.rs"].iter().any(|t| {
                let f = src.join(t);
                f.exists() && read(&f).contains("#![forbid(unsafe_code)]")
            });
            if !forbids {
                wrong.push(format!(
                    "{} has no unsafe code but does not forbid it",
                    p.name
                ));
            }
        }
        for f in found.difference(&stated) {
            wrong.push(format!(
                "{}: {f} has unsafe code the Unsafe item does not list",
                p.name
            ));
        }
        for f in stated.difference(&found) {
            wrong.push(format!(
                "{}: the Unsafe item lists {f}, which has no unsafe code",
                p.name
            ));
        }
    }
    for name in listed.keys() {
        wrong.push(format!(
            "the Unsafe item names {name}, which is no workspace crate"
        ));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
