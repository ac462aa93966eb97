//! `cairn rebuild NAME [VERSION]`: the one collective subcommand. Run under `mpirun` with the
//! job's rank count and configuration, it starts an engine exactly as the job would and asks
//! it to rebuild lost or damaged parts and redundancy (partner copies, parity) of one version,
//! or of every version stored on the node-local tier.
//!
//! MPI is initialised here and nowhere else, so the other subcommands keep running without
//! `mpirun`. Every rank takes every decision from the same gathered information, so all ranks
//! make the same collective calls and exit with the same code; only rank 0 prints.

use crate::{resolve_config, GlobalOpts};
use cairn_comm::Comm;
use cairn_core::{catalog, Config, Engine, ErrorKind};
use cairn_format::check_name;
use cairn_mpi::mpi::topology::SimpleCommunicator;
use cairn_mpi::{mpi, MpiComm};
use cairn_tier::{DirTier, Scope};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Exit codes of `cairn rebuild`.
const OK: u8 = 0;
const FAILED: u8 = 1;
const USAGE: u8 = 2;

/// What one rank found of one version in its node directory: `(world size, nodes, scheme)`
/// from its manifest, or the reason the manifest could not be read.
type Seen = Result<(u32, u32, String), String>;

/// One version as sent between ranks: `(version, layout, or why the manifest is unreadable)`.
type Wire = (i64, Option<(u32, u32, String)>, Option<String>);

/// Initialise MPI, rebuild, finalise MPI; returns the exit code.
pub fn run(g: &GlobalOpts, name: &str, version: Option<i64>) -> u8 {
    let Some(universe) = mpi::initialize() else {
        eprintln!("cairn: error: MPI could not be initialised (or was already)");
        return USAGE;
    };
    let world = universe.world();
    let ctl = MpiComm::new(&world);
    let code = rebuild(&world, &ctl, g, name, version);
    drop(ctl);
    drop(world);
    // Dropping the universe finalises MPI, after every communicator is freed.
    drop(universe);
    code
}

/// One message per rank that has one: `(rank, message, is_own)`; `is_own` is false for "failed
/// on another rank" reports, which are printed only when no rank says more.
fn gather(ctl: &MpiComm, mine: Option<(String, bool)>) -> Vec<(usize, String, bool)> {
    let bytes = match &mine {
        None => vec![0],
        Some((m, own)) => {
            let mut b = vec![if *own { 1 } else { 2 }];
            b.extend_from_slice(m.as_bytes());
            b
        }
    };
    match ctl.allgather(&bytes) {
        Ok(all) => all
            .iter()
            .enumerate()
            .filter(|(_, b)| matches!(b.first(), Some(1) | Some(2)))
            .map(|(r, b)| (r, String::from_utf8_lossy(&b[1..]).into_owned(), b[0] == 1))
            .collect(),
        Err(e) => vec![(ctl.rank(), format!("MPI: {e}"), true)],
    }
}

/// The distinct messages worth printing: the ranks' own, else the "another rank" ones.
fn reasons(msgs: &[(usize, String, bool)]) -> Vec<String> {
    let own = msgs.iter().any(|m| m.2);
    let mut out: Vec<String> = Vec::new();
    for (_, m, is_own) in msgs {
        if *is_own == own && !out.contains(m) {
            out.push(m.clone());
        }
    }
    out
}

fn print0(rank: usize, line: &str) {
    if rank == 0 {
        println!("{line}");
    }
}

fn error0(rank: usize, line: &str) {
    if rank == 0 {
        eprintln!("cairn: error: {line}");
    }
}

/// The directory holding this rank's first tier: its node's directory of the node-local tier,
/// or the global tier when there is none.
fn first_root(cfg: &Config, node: usize) -> PathBuf {
    match &cfg.local {
        Some(l) => l.join(format!("node{node}")),
        None => cfg.global.clone(),
    }
}

/// The versions of `name` in one directory, with what their manifests say.
fn seen_here(root: &Path, name: &str) -> Vec<(i64, Seen)> {
    let Ok(tier) = DirTier::open_existing("local", root, Scope::NodeLocal) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for v in catalog::versions(&tier, name).unwrap_or_default() {
        match catalog::read_manifest(&tier, name, v) {
            Ok(Some(m)) => out.push((v, Ok((m.world_size, m.nodes, m.scheme)))),
            Ok(None) => {}
            Err(e) => out.push((v, Err(e.msg))),
        }
    }
    out
}

/// Collective: what every rank's node directory holds of `name`, by version.
fn seen_everywhere(ctl: &MpiComm, mine: &[(i64, Seen)]) -> BTreeMap<i64, Vec<Seen>> {
    let enc: Vec<Wire> = mine
        .iter()
        .map(|(v, s)| match s {
            Ok(x) => (*v, Some(x.clone()), None),
            Err(e) => (*v, None, Some(e.clone())),
        })
        .collect();
    let bytes = serde_json::to_vec(&enc).unwrap_or_default();
    let mut out: BTreeMap<i64, Vec<Seen>> = BTreeMap::new();
    for theirs in ctl.allgather(&bytes).unwrap_or_default() {
        let dec: Vec<Wire> = serde_json::from_slice(&theirs).unwrap_or_default();
        for (v, ok, err) in dec {
            let s = match (ok, err) {
                (Some(x), _) => Ok(x),
                (None, e) => Err(e.unwrap_or_default()),
            };
            out.entry(v).or_default().push(s);
        }
    }
    out
}

fn plural(n: usize, one: &str) -> String {
    if n == 1 {
        format!("{n} {one}")
    } else {
        format!("{n} {one}s")
    }
}

fn rebuild(
    world: &SimpleCommunicator,
    ctl: &MpiComm,
    g: &GlobalOpts,
    name: &str,
    version: Option<i64>,
) -> u8 {
    let rank = ctl.rank();
    let size = ctl.size();

    // The configuration, as every rank resolves it from its own environment.
    let cfg = resolve_config(g).and_then(|c| {
        check_name(name)?;
        if c.local_mem {
            anyhow::bail!(
                "cairn rebuild reads node directories, and [tiers] local is \"mem\" (the job's \
                 shared-memory stores): restarting the job rebuilds what a lost node's store held"
            );
        }
        Ok(c)
    });
    let msgs = gather(ctl, cfg.as_ref().err().map(|e| (format!("{e:#}"), true)));
    let cfg = match cfg {
        Ok(c) if msgs.is_empty() => c,
        _ => {
            for m in reasons(&msgs) {
                error0(rank, &m);
            }
            return USAGE;
        }
    };

    // The engine, set up exactly as the job's (topology, redundancy plan, tiers).
    let engine = Engine::new(Box::new(MpiComm::new(world)), cfg.clone());
    let msgs = gather(
        ctl,
        engine
            .as_ref()
            .err()
            .map(|e| (e.msg.clone(), e.kind != ErrorKind::Peer)),
    );
    let mut engine = match engine {
        Ok(e) if msgs.is_empty() => e,
        Ok(e) => {
            drop(e);
            for m in reasons(&msgs) {
                error0(rank, &format!("cannot start the engine: {m}"));
            }
            return USAGE;
        }
        Err(_) => {
            for m in reasons(&msgs) {
                error0(rank, &format!("cannot start the engine: {m}"));
            }
            return USAGE;
        }
    };
    let topo = engine.topology().clone();
    let scheme = engine.redundancy();

    // Which versions exist, and with what layout, from every node's manifests.
    let root = first_root(&cfg, topo.node);
    let seen = seen_everywhere(ctl, &seen_here(&root, name));
    let where_ = match &cfg.local {
        Some(l) => format!("the node-local tier {}", l.display()),
        None => format!("the global tier {}", cfg.global.display()),
    };
    let versions: Vec<(i64, Vec<Seen>)> = match version {
        Some(v) => match seen.get(&v) {
            Some(s) if s.iter().any(Result::is_ok) => vec![(v, s.clone())],
            Some(s) => {
                let why = s.iter().find_map(|x| x.clone().err()).unwrap_or_default();
                error0(
                    rank,
                    &format!("no readable manifest of {name} v{v} on {where_}: {why}"),
                );
                let _ = engine.finalize();
                return USAGE;
            }
            None => {
                error0(
                    rank,
                    &format!("no node holds a published checkpoint {name} v{v} on {where_}"),
                );
                let _ = engine.finalize();
                return USAGE;
            }
        },
        None => {
            let vs: Vec<(i64, Vec<Seen>)> = seen
                .into_iter()
                .filter(|(_, s)| s.iter().any(Result::is_ok))
                .collect();
            if vs.is_empty() {
                error0(
                    rank,
                    &format!("no node holds a published checkpoint named {name} on {where_}"),
                );
                let _ = engine.finalize();
                return USAGE;
            }
            vs
        }
    };

    let mut code = OK;
    let mut rebuilt = 0;
    for (v, s) in &versions {
        // The checkpoint must have been written by a job laid out like this one: the same
        // rank count, nodes and scheme, or rebuilt files would land on the wrong nodes.
        let (w, n, sch) = s
            .iter()
            .find_map(|x| x.as_ref().ok())
            .cloned()
            .expect("filtered above");
        if w as usize != size || n as usize != topo.nodes || sch != scheme {
            error0(
                rank,
                &format!(
                    "{name} v{v} was written by {} on {} with scheme {sch}, but this job has {} on {} with scheme {scheme}; run `cairn rebuild` under mpirun with the job's rank count and its [topology] and [redundancy] settings",
                    plural(w as usize, "rank"),
                    plural(n as usize, "node"),
                    plural(size, "rank"),
                    plural(topo.nodes, "node"),
                ),
            );
            code = USAGE;
            continue;
        }
        let res = engine.rebuild(name, *v);
        let msgs = gather(
            ctl,
            res.as_ref()
                .err()
                .map(|e| (e.msg.clone(), e.kind != ErrorKind::Peer)),
        );
        match res {
            Ok(Some(what)) if msgs.is_empty() => {
                rebuilt += 1;
                print0(rank, &format!("{name} v{v}: {what}"));
            }
            Ok(None) if msgs.is_empty() => {
                print0(rank, &format!("{name} v{v}: nothing to rebuild"));
            }
            _ => {
                let why = reasons(&msgs);
                error0(
                    rank,
                    &format!("{name} v{v}: cannot rebuild: {}", why.join("; ")),
                );
                if code == OK {
                    code = FAILED;
                }
            }
        }
    }
    if versions.len() > 1 {
        print0(
            rank,
            &format!(
                "{name}: {} checked, {} rebuilt",
                plural(versions.len(), "version"),
                rebuilt
            ),
        );
    }
    if let Err(e) = engine.finalize() {
        error0(rank, &format!("finalising: {}", e.msg));
        if code == OK {
            code = FAILED;
        }
    }
    code
}
