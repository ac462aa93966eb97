//! `cairn`: the command-line tool that lists, inspects and verifies stored checkpoints, and
//! runs the kill-and-restart demo.
//!
//! Everything except `demo` only reads the tiers (through `cairn_core::inventory`); nothing is
//! created or changed. Exit codes: 0 success, 1 a check failed (`verify` found damaged or
//! incomplete checkpoints, `demo` ended with different results), 2 usage, configuration or
//! other errors that kept the command from doing its job.
#![forbid(unsafe_code)]

mod demo;
mod show;

use anyhow::{Context, Result};
use cairn_core::inventory::{Inventory, Selection, Verdict};
use cairn_core::Config;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

const EXIT_CODES: &str = "\
Exit codes:
  0  success (verify: every checkpoint checked is intact and complete)
  1  verify found a damaged or incomplete checkpoint; demo ended with different results
  2  usage or configuration error, or the command could not do its job
     (e.g. no such checkpoint, unreadable storage, demo could not run)";

#[derive(Parser, Debug)]
#[command(
    name = "cairn",
    version,
    about = "List, inspect and verify Cairn checkpoints, and run the kill-and-restart demo",
    long_about = "List, inspect and verify the checkpoints Cairn has stored, and run the \
kill-and-restart demo.\n\nThe tiers come from the same configuration the library reads: \
built-in defaults, then the TOML file given with --config (else the one named by \
CAIRN_CONFIG), then CAIRN_<SECTION>_<KEY> environment variables (e.g. CAIRN_TIERS_LOCAL), \
then --local and --global. list, inspect and verify never create or change anything.",
    after_help = EXIT_CODES
)]
struct Cli {
    #[command(flatten)]
    global: GlobalOpts,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Args, Debug)]
struct GlobalOpts {
    /// Cairn configuration file (TOML); default: the one named by CAIRN_CONFIG, if any
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Root of the node-local tier (overrides [tiers] local; "none" for no local tier)
    #[arg(long, global = true, value_name = "DIR")]
    local: Option<PathBuf>,
    /// Root of the global tier (overrides [tiers] global)
    #[arg(long, global = true, value_name = "DIR")]
    global: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// List stored checkpoints: state, tiers, ranks, size, creation time
    #[command(
        after_help = "States: durable (complete on the global tier), protected or \
captured (complete on the node-local tier), incomplete (no tier holds every rank: it cannot \
be restarted from)."
    )]
    List {
        /// Only checkpoints of this name
        name: Option<String>,
        /// Print a JSON array of objects instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Show one checkpoint: manifests, and per rank its files, regions, sizes, checksums, timings
    Inspect {
        name: String,
        version: i64,
        /// Print JSON instead of text
        #[arg(long)]
        json: bool,
    },
    /// Re-check every checksum of every stored rank file
    #[command(after_help = EXIT_CODES)]
    Verify {
        /// Only checkpoints of this name
        name: Option<String>,
        /// Only this version (needs NAME)
        version: Option<i64>,
        /// Print a JSON array of per-checkpoint results instead of text
        #[arg(long)]
        json: bool,
    },
    /// Run heat2d under mpirun, kill one rank partway, restart it and compare with an
    /// uninterrupted run
    #[command(
        after_help = "Needs mpirun and the heat2d example (build it with `./run demo`, \
or pass --heat). Exit code 0 only if the restarted run ends bit-identical to the \
uninterrupted one; 1 if it differs; 2 if the demo could not run."
    )]
    Demo(demo::DemoArgs),
}

/// An error that means "the check said no" rather than "could not check".
#[derive(Debug)]
struct CheckFailed;

impl std::fmt::Display for CheckFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("check failed")
    }
}

impl std::error::Error for CheckFailed {}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is::<CheckFailed>() => ExitCode::from(1),
        Err(e) => {
            eprintln!("cairn: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// The configuration: `Config::resolve` (file, then `CAIRN_*` variables), then the options.
pub(crate) fn resolve_config(g: &GlobalOpts) -> Result<Config> {
    let mut cfg = Config::resolve(g.config.as_deref(), &[])?;
    if let Some(l) = &g.local {
        match l.to_str() {
            Some(s) => cfg.set_dotted("tiers.local", s, "option --local")?,
            None => cfg.local = Some(l.clone()),
        }
    }
    if let Some(gl) = &g.global {
        match gl.to_str() {
            Some(s) => cfg.set_dotted("tiers.global", s, "option --global")?,
            None => cfg.global = gl.clone(),
        }
    }
    Ok(cfg)
}

fn open(g: &GlobalOpts) -> Result<Inventory> {
    let cfg = resolve_config(g)?;
    Inventory::open(&cfg).context("cannot read the checkpoint tiers")
}

fn run(cli: Cli) -> Result<()> {
    match cli.cmd {
        Cmd::List { name, json } => {
            let inv = open(&cli.global)?;
            let records = inv.list(name.as_deref())?;
            if json {
                println!("{}", serde_json::to_string_pretty(&records)?);
            } else {
                print!("{}", show::list(&inv, name.as_deref(), &records));
            }
            Ok(())
        }
        Cmd::Inspect {
            name,
            version,
            json,
        } => {
            let inv = open(&cli.global)?;
            let ins = inv.inspect(&name, version)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&ins)?);
            } else {
                print!("{}", show::inspect(&ins));
            }
            Ok(())
        }
        Cmd::Verify {
            name,
            version,
            json,
        } => {
            let sel = match (name, version) {
                (None, _) => Selection::All,
                (Some(n), None) => Selection::Name(n),
                (Some(n), Some(v)) => Selection::Version(n, v),
            };
            let inv = open(&cli.global)?;
            let checks = inv.verify(&sel)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&checks)?);
            } else {
                print!("{}", show::verify(&inv, &checks));
            }
            if checks.iter().all(|c| c.verdict == Verdict::Ok) {
                Ok(())
            } else {
                Err(CheckFailed.into())
            }
        }
        Cmd::Demo(args) => {
            let g = &cli.global;
            if g.config.is_some() || g.local.is_some() || g.global.is_some() {
                anyhow::bail!(
                    "--config, --local and --global do not apply to the demo: it keeps its own \
                     tiers under --workdir"
                );
            }
            demo_result(demo::run(&args)?)
        }
    }
}

fn demo_result(identical: bool) -> Result<()> {
    match identical {
        true => Ok(()),
        false => Err(CheckFailed.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
