//! `cairn`: the command-line tool that lists, inspects and verifies stored checkpoints,
//! rebuilds lost parts and redundancy, flushes checkpoints to the global tier on demand, runs
//! the kill-and-restart demo, advises how often to checkpoint, and runs programs on the
//! in-memory file system (`fs`).
//!
//! `list`, `inspect` and `verify` only read the tiers (through `cairn_core::inventory`);
//! nothing is created or changed. `interval` is arithmetic only (`cairn_core::model`): it reads
//! no tier and no configuration. `rebuild` is collective: it runs under `mpirun`. `flush`
//! (`cairn_core::stage`) runs alone, or collectively when launched by `mpirun`. They are the
//! only subcommands that initialise MPI. Exit codes: 0 success, 1 a check failed (`verify`
//! found damaged or incomplete checkpoints, `rebuild` could not rebuild, `flush` found a
//! damaged local part, `demo` ended with different results), 2 usage, configuration or other
//! errors that kept the command from doing its job. `fs` (`fs.rs`) works on the job's
//! shared-memory stores through `cairn_shm` directly, as they hold programs' files rather
//! than checkpoints; `fs run` replaces itself with the command it runs. `launch`, `restart`,
//! `checkpoint` and `status` (`launch.rs`) run unmodified programs under the checkpoint
//! coordinator of `cairn_launch`; they have exit codes of their own (see their help), and so
//! has `rsh`, the rsh agent of a job's `mpirun` (255 on failure, as ssh).
#![forbid(unsafe_code)]

mod demo;
mod flush;
mod fs;
mod interval;
mod launch;
mod rebuild;
mod show;

use anyhow::{Context, Result};
use cairn_core::inventory::{Inventory, Selection, Verdict};
use cairn_core::Config;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

const EXIT_CODES: &str = "\
Exit codes:
  0  success (verify: every checkpoint checked is intact and complete; rebuild: everything
     rebuilt, or nothing to rebuild)
  1  verify found a damaged or incomplete checkpoint; rebuild could not rebuild (the message
     says why); flush found a damaged local rank file; demo ended with different results;
     fs drain left out files that changed during every copy
  2  usage or configuration error, or the command could not do its job
     (e.g. no such checkpoint, unreadable storage, demo could not run, rebuild run with a
     rank count or [topology] / [redundancy] settings other than the checkpoint's, no
     shared-memory store of the job)
  126, 127  fs run: the command could not be executed, or was not found (otherwise fs run
     exits as the command does)";

const REBUILD_HELP: &str = "\
rebuild is collective: run it under mpirun with the job's rank count and the job's
configuration, i.e. the same [tiers], [topology] (sim_nodes, domain_env) and [redundancy]
(scheme, set_size, parity) settings, from the same --config file or CAIRN_* variables:

  mpirun -n 4 cairn rebuild heat 300
  CAIRN_TOPOLOGY_SIM_NODES=2 CAIRN_REDUNDANCY_SCHEME=xor mpirun -n 4 cairn rebuild heat

Each rank restores into its own node's directory what its node lost: its part (from its
partner's copy, or from the parity of its set), its partner copy or parity object, and its
node's manifest. Without VERSION, every version of NAME published on the node-local tier is
checked and rebuilt where needed. A checkpoint written by a different rank count, node count
or scheme is refused (exit code 2). Run it while the job is not running.

Exit codes:
  0  rebuilt, or nothing to rebuild
  1  could not rebuild (too much was lost for the scheme, or storage failed); the message
     says why
  2  usage or configuration error, no such checkpoint, or a layout that differs from the
     checkpoint's";

#[derive(Parser, Debug)]
#[command(
    name = "cairn",
    version,
    about = "List, inspect, verify, rebuild and flush Cairn checkpoints, run the kill-and-restart \
demo, work out how often to checkpoint, run programs on the in-memory file system, and run \
unmodified programs under transparent checkpointing",
    long_about = "List, inspect and verify the checkpoints Cairn has stored, rebuild what a \
lost node took with it, flush checkpoints to the global tier on demand, run the \
kill-and-restart demo, work out how often to checkpoint \
(interval), run programs with their files in shared memory (fs), and run unmodified programs \
under the checkpoint coordinator (launch, checkpoint, status, restart).\n\nThe tiers come from the same configuration the library reads: built-in \
defaults, then the TOML file given with --config (else the one named by CAIRN_CONFIG), then \
CAIRN_<SECTION>_<KEY> environment variables (e.g. CAIRN_TIERS_LOCAL), then --local and \
--global. list, inspect and verify never create or change anything. rebuild is collective and \
runs under mpirun with the job's rank count and configuration. flush copies to the global \
tier, alone or under mpirun. interval needs no tiers and no \
configuration. --local mem reads the checkpoints in the job's shared-memory stores \
(CAIRN_JOB, else SLURM_JOB_ID, names the job).",
    after_help = EXIT_CODES
)]
struct Cli {
    #[command(flatten)]
    global: GlobalOpts,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Args, Debug)]
pub(crate) struct GlobalOpts {
    /// Cairn configuration file (TOML); default: the one named by CAIRN_CONFIG, if any
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Root of the node-local tier (overrides [tiers] local; "none" for no local tier, "mem"
    /// for the job's shared-memory stores)
    #[arg(long, global = true, value_name = "DIR")]
    local: Option<PathBuf>,
    /// Root of the global tier (overrides [tiers] global)
    #[arg(long, global = true, value_name = "DIR")]
    global: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// List stored checkpoints: state, redundancy scheme and protection, tiers, ranks, size,
    /// creation time
    #[command(
        after_help = "States: durable (complete on the global tier), protected or \
captured (complete on the node-local tier), incomplete (no tier holds every rank: it cannot \
be restarted from as it is).\n\nProtection: protected (every part and every partner copy or \
parity object is there and intact), degraded (something is lost or damaged; rebuildable \
means restart or `cairn rebuild` restores it), unrecoverable (a lost part can no longer be \
rebuilt), none (scheme single)."
    )]
    List {
        /// Only checkpoints of this name
        name: Option<String>,
        /// Print a JSON array of objects instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Show one checkpoint: scheme and protection, per node its parts, partner copies and
    /// parity objects, manifests, and per rank its files, regions, sizes, checksums, timings
    Inspect {
        name: String,
        version: i64,
        /// Print JSON instead of text
        #[arg(long)]
        json: bool,
    },
    /// Re-check every checksum of every stored rank file, partner copy and parity object
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
    /// Rebuild lost or damaged parts, partner copies and parity of a checkpoint (collective:
    /// run under mpirun with the job's rank count and configuration)
    #[command(after_help = REBUILD_HELP)]
    Rebuild {
        /// Checkpoint name
        name: String,
        /// Only this version; default: every version on the node-local tier that needs it
        version: Option<i64>,
    },
    /// Make checkpoints complete on the node-local tier durable: copy them to the global tier,
    /// verifying every chunk, and publish them (while the job is not running; alone, or under
    /// mpirun when each node sees only its own directory)
    #[command(after_help = flush::HELP)]
    Flush(flush::FlushArgs),
    /// Run heat2d under mpirun, kill one rank partway, restart it and compare with an
    /// uninterrupted run
    #[command(
        after_help = "Needs mpirun and the heat2d example (build it with `./run demo`, \
or pass --heat). Exit code 0 only if the restarted run ends bit-identical to the \
uninterrupted one; 1 if it differs; 2 if the demo could not run."
    )]
    Demo(demo::DemoArgs),
    /// How often to checkpoint: Young's, Daly's and the exact optimum interval for a failure
    /// rate and checkpoint cost, for one level or a hierarchy, with the expected efficiency
    #[command(after_help = interval::HELP)]
    Interval(interval::IntervalArgs),
    /// The in-memory file system: run a program with its files under the prefix in the job's
    /// shared-memory store, list them, show the space, drain them to a directory, wipe the store
    #[command(after_help = fs::HELP)]
    Fs(fs::FsArgs),
    /// Run an unmodified program as N processes under the checkpoint coordinator, with the
    /// checkpoint library preloaded; checkpoint it every --interval or on request
    #[command(after_help = launch::LAUNCH_HELP)]
    Launch(launch::LaunchArgs),
    /// Checkpoint every process of a running job now
    #[command(after_help = launch::CHECKPOINT_HELP)]
    Checkpoint(launch::JobArgs),
    /// Show a running job's processes, nodes and last checkpoint
    Status(launch::StatusArgs),
    /// Bring a job back from its newest complete checkpoint (or VERSION)
    #[command(after_help = launch::RESTART_HELP)]
    Restart(launch::RestartArgs),
    /// Run a command on a host of the job this runs in, in the slot there (an rsh agent for
    /// mpirun in a job launched with --rsh)
    #[command(after_help = launch::RSH_HELP)]
    Rsh(launch::RshArgs),
    /// A node's sub-coordinator (started by launch and restart)
    #[command(hide = true)]
    CoordNode(launch::CoordNodeArgs),
    /// A slot of a job launched with --rsh: waits for a command (started by launch)
    #[command(hide = true)]
    Slot,
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
    // The MPI subcommands: MPI is initialised inside them and nowhere else.
    if let Cmd::Rebuild { name, version } = &cli.cmd {
        return ExitCode::from(rebuild::run(&cli.global, name, *version));
    }
    if let Cmd::Flush(args) = &cli.cmd {
        return ExitCode::from(flush::run(&cli.global, args));
    }
    // Its own exit codes: `fs run` exits as the command it runs.
    if let Cmd::Fs(args) = &cli.cmd {
        return ExitCode::from(fs::main(&cli.global, args));
    }
    // The job's exit code, or their own (see their help).
    match &cli.cmd {
        Cmd::Launch(a) => return ExitCode::from(launch::launch(&cli.global, a)),
        Cmd::Restart(a) => return ExitCode::from(launch::restart(&cli.global, a)),
        Cmd::Checkpoint(a) => return ExitCode::from(launch::checkpoint(&cli.global, a)),
        Cmd::Status(a) => return ExitCode::from(launch::status(&cli.global, a)),
        Cmd::CoordNode(a) => return ExitCode::from(launch::coord_node(a)),
        Cmd::Rsh(a) => return ExitCode::from(launch::rsh(a)),
        Cmd::Slot => return ExitCode::from(launch::slot()),
        _ => {}
    }
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
    if let Some(msg) = cfg.ignored_env_report() {
        eprintln!("cairn: {msg}");
    }
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
    cairn_core::auth::enable_for_tools(&cfg)?;
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
        Cmd::Rebuild { .. }
        | Cmd::Flush(_)
        | Cmd::Fs(_)
        | Cmd::Launch(_)
        | Cmd::Restart(_)
        | Cmd::Checkpoint(_)
        | Cmd::Status(_)
        | Cmd::Rsh(_)
        | Cmd::Slot
        | Cmd::CoordNode(_) => unreachable!("handled in main"),
        Cmd::Demo(args) => {
            no_tier_options(
                &cli.global,
                "the demo: it keeps its own tiers under --workdir",
            )?;
            demo_result(demo::run(&args)?)
        }
        Cmd::Interval(args) => {
            no_tier_options(&cli.global, "interval: it reads no checkpoints")?;
            interval::run(&args)
        }
    }
}

/// Refuses the options that say where the tiers are for a subcommand that does not use them,
/// rather than ignoring them silently.
fn no_tier_options(g: &GlobalOpts, what: &str) -> Result<()> {
    if g.config.is_some() || g.local.is_some() || g.global.is_some() {
        anyhow::bail!("--config, --local and --global do not apply to {what}");
    }
    Ok(())
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
