//! `cairn flush [NAME [VERSION]] [--all] [--json]`: make checkpoints that are complete on the
//! node-local tier durable on the global tier while the job is not running, with a progress
//! bar. The work is `cairn_core::stage::flush`; this file parses options, draws the bar and
//! prints.
//!
//! Launched by `mpirun` (Open MPI's `OMPI_COMM_WORLD_SIZE` or a PMI's `PMI_SIZE` is set), it
//! initialises MPI and the processes share the work, each copying the rank files of the node
//! directory it sees; otherwise one process copies everything it sees. Every process gets
//! the same report and exits with the same code; only process 0 draws and prints.

use crate::show::bytes;
use crate::{resolve_config, GlobalOpts};
use cairn_comm::{Comm, Solo};
use cairn_core::stage::{self, Outcome, Pick, Progress, Report};
use cairn_core::ErrorKind;
use cairn_mpi::{mpi, MpiComm};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

pub const HELP: &str = "\
Without VERSION, flushes for each name (or NAME) the newest version that is complete on the
node-local tier (every rank's file under a node directory whose manifest lists it), unless it
is already durable; with --all, every complete version not yet durable; with VERSION, that
version. Each rank file is copied with every chunk checksum verified, then the global manifest
is published. Run it while the job is not running.

On a cluster where each node sees only its own node directory, run it under mpirun with at
least one process on every node that holds checkpoints; each copies what its node holds
(the lowest process on a node does the copying, and process 0 publishes):

  mpirun --map-by ppr:1:node cairn --config job.toml flush heat

The [flush] buffer and bandwidth settings apply to each process's copies.

Exit codes:
  0  flushed, or nothing needed it (already durable, or nothing published)
  1  a local rank file failed its checksums; that version was not published
  2  usage or configuration error, no node-local tier, no such checkpoint, a version that is
     not complete on the node-local tier (the message names the missing ranks), or a storage
     error";

/// Exit codes of `cairn flush`.
const OK: u8 = 0;
const FAILED: u8 = 1;
const USAGE: u8 = 2;

#[derive(Args, Debug)]
pub struct FlushArgs {
    /// Only checkpoints of this name
    name: Option<String>,
    /// Only this version (needs NAME)
    version: Option<i64>,
    /// Every complete version that is not yet durable, not only the newest
    #[arg(long, conflicts_with = "version")]
    all: bool,
    /// Print a JSON array of per-version results instead of text, and no progress bar
    #[arg(long)]
    json: bool,
}

/// Flush, under MPI when launched by mpirun; returns the exit code.
pub fn run(g: &GlobalOpts, args: &FlushArgs) -> u8 {
    let launched = ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
    if !launched {
        return flush(&Solo, g, args);
    }
    let Some(universe) = mpi::initialize() else {
        eprintln!("cairn: error: MPI could not be initialised (or was already)");
        return USAGE;
    };
    let world = universe.world();
    let comm = MpiComm::new(&world);
    let code = flush(&comm, g, args);
    drop(comm);
    drop(world);
    // Dropping the universe finalises MPI, after every communicator is freed.
    drop(universe);
    code
}

/// The bar over the bytes this process copies; drawn on standard error only when it is a
/// terminal (indicatif's default target), on process 0, and without --json.
fn bar(shown: bool) -> ProgressBar {
    if !shown {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(0);
    let template = "{msg} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}";
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

fn flush(comm: &dyn Comm, g: &GlobalOpts, args: &FlushArgs) -> u8 {
    let first = comm.rank() == 0;
    // Every process resolves the configuration from its own environment; all must go on, or
    // none. Process 0 reports what failed anywhere.
    let cfg = resolve_config(g);
    let mine = cfg
        .as_ref()
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
    let said = match comm.allgather(mine.as_bytes()) {
        Ok(all) => all,
        Err(e) => {
            eprintln!("cairn: error: MPI: {e}");
            return USAGE;
        }
    };
    let Ok(cfg) = cfg else {
        if first {
            eprintln!("cairn: error: {mine}");
        }
        return USAGE;
    };
    if let Some(other) = said.iter().find(|m| !m.is_empty()) {
        if first {
            eprintln!("cairn: error: {}", String::from_utf8_lossy(other));
        }
        return USAGE;
    }

    let pick = match (args.version, args.all) {
        (Some(v), _) => Pick::Version(v),
        (None, true) => Pick::All,
        (None, false) => Pick::Newest,
    };
    let bar = bar(first && !args.json);
    let progress = |p: &Progress| {
        bar.set_length(p.total);
        bar.set_message(format!("{} v{}", p.name, p.version));
        bar.set_position(p.done);
    };
    let res = stage::flush(comm, &cfg, args.name.as_deref(), pick, &progress);
    bar.finish_and_clear();
    let report = match res {
        Ok(r) => r,
        Err(e) => {
            if first {
                eprintln!("cairn: error: {}", e.msg);
            }
            return if e.kind == ErrorKind::Corrupt {
                FAILED
            } else {
                USAGE
            };
        }
    };
    if first {
        let global = cfg.global.display();
        if args.json {
            println!("{}", json_report(&report));
        }
        print_report(&report, &global.to_string(), !args.json);
        if report.versions.is_empty() && !args.json {
            match &cfg.local {
                Some(l) => println!(
                    "nothing to flush: no published checkpoints under {}",
                    l.display()
                ),
                None => println!("nothing to flush"),
            }
        }
    }
    exit_code(&report)
}

/// 1 when the only failures are damaged local parts, 2 when anything else kept a version
/// from being flushed, else 0.
fn exit_code(report: &Report) -> u8 {
    let mut code = OK;
    for s in &report.versions {
        match &s.outcome {
            Outcome::Failed(e) if e.kind == ErrorKind::Corrupt => code = code.max(FAILED),
            Outcome::Failed(_) | Outcome::Incomplete(_) => code = USAGE,
            Outcome::Flushed { .. } | Outcome::AlreadyDurable => {}
        }
    }
    code
}

/// Warnings and errors to standard error; with `text`, a line per version to standard output.
fn print_report(report: &Report, global: &str, text: bool) {
    for w in &report.warnings {
        eprintln!("cairn: warning: {w}");
    }
    for s in &report.versions {
        let (name, v) = (&s.name, s.version);
        match &s.outcome {
            Outcome::Flushed {
                ranks,
                bytes: n,
                seconds,
            } if text => {
                let rate = *n as f64 / seconds.max(1e-9);
                println!(
                    "flushed {name} v{v}: {ranks} ranks, {} in {seconds:.2} s ({}/s) -> {global}",
                    bytes(*n),
                    bytes(rate as u64)
                );
            }
            Outcome::AlreadyDurable if text => {
                println!("{name} v{v}: already durable on {global}; nothing to flush")
            }
            Outcome::Incomplete(why) => eprintln!("cairn: error: cannot flush {name} v{v}: {why}"),
            Outcome::Failed(e) => eprintln!(
                "cairn: error: {name} v{v} was not flushed (nothing of it is published): {}",
                e.msg
            ),
            _ => {}
        }
    }
}

/// The `--json` array: one object per version chosen.
fn json_report(report: &Report) -> String {
    let items: Vec<serde_json::Value> = report
        .versions
        .iter()
        .map(|s| {
            let mut o = json!({ "name": s.name, "version": s.version });
            let extra = match &s.outcome {
                Outcome::Flushed {
                    ranks,
                    bytes,
                    seconds,
                } => json!({ "status": "flushed", "ranks": ranks, "bytes": bytes, "seconds": seconds }),
                Outcome::AlreadyDurable => json!({ "status": "durable" }),
                Outcome::Incomplete(why) => json!({ "status": "incomplete", "error": why }),
                Outcome::Failed(e) => json!({ "status": "failed", "error": e.msg }),
            };
            if let (Some(o), Some(extra)) = (o.as_object_mut(), extra.as_object()) {
                o.extend(extra.clone());
            }
            o
        })
        .collect();
    serde_json::to_string_pretty(&items).unwrap_or_default()
}
