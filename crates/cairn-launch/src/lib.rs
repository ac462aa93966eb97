//! Cairn's checkpoint coordinator and launcher: the only network code of Cairn.
//!
//! `cairn launch` starts a job of unmodified programs with the checkpoint library
//! (`libcairn-ckpt.so`, `native/ckpt`) preloaded, under a two-level tree of coordinators: a
//! [`Root`] inside the `cairn` process and one sub-coordinator per (simulated) node
//! ([`node`], a separate `cairn coord-node` process). A checkpoint is a sequence of global
//! barriers (SUSPEND, WRITE, RESUME) with a timeout per phase. Between WRITE and RESUME the
//! images go through Cairn's engine ([`Images`]: one engine rank per process, run by its
//! node's sub-coordinator and driven by the root through [`engines::Engines`], so the
//! node-local tier, redundancy, flushes, compression and incremental checkpoints apply to
//! them); the root then writes the version's manifest ([`Manifest`]), which alone makes it
//! complete. `cairn restart` has the engine restore the images and starts the same tree
//! with the restorer (`cairn-restore`) in place of the program.
//!
//! - [`proto`]: the text protocol's lines ([`Msg`], [`Verb`]) and connections ([`Conn`]).
//! - [`net`]: staggered exponential back-off ([`Backoff`]) and listeners.
//! - [`root`], [`node`]: the two levels of the tree, each one state-machine thread.
//! - [`images`]: the engine ranks that store and restore the images.
//! - [`engines`]: those ranks spread over the sub-coordinators, and the root's side.
//! - [`mod@launch`]: spawning the tree and the processes ([`launch()`], [`restart()`]).
//! - [`client`]: `cairn checkpoint` and `cairn status` ([`Client`]).
//! - [`manifest`], [`jobdir`]: what is on disk (`docs/coordinator.md`).
//!
//! ```
//! use cairn_launch::proto::{Msg, Verb};
//! let line = Msg::new(Verb::Hello).arg("proc", 3).arg("host", "node a").encode();
//! assert_eq!(line, "HELLO proc=3 host=node%20a\n");
//! assert_eq!(Msg::parse(&line).unwrap().num::<usize>("proc").unwrap(), 3);
//! assert_eq!(cairn_launch::node_of(5, 8, 2), 1);
//! ```
#![deny(unsafe_code)]

mod check;
pub mod client;
pub mod engines;
pub mod error;
mod hub;
pub mod images;
pub mod jobdir;
pub mod launch;
pub mod manifest;
pub mod net;
pub mod node;
pub mod proto;
pub mod root;
pub mod spawn;
pub mod stage;
mod sys;

pub use client::{Client, RshDone, Status};
pub use error::{Error, ErrorKind, Result};
pub use images::Images;
pub use launch::{launch, restart, CpuList, Helper, JobExit, Options, RshSlots};
pub use manifest::{Affinity, Manifest};
pub use net::Backoff;
pub use proto::{Conn, Msg, Verb};
pub use root::Root;

/// The environment variable that hands a sub-coordinator the job's token.
pub const TOKEN_ENV: &str = "CAIRN_COORD_TOKEN";

/// The node of process `proc` among `procs` processes on `nodes` nodes: `proc * nodes /
/// procs`, so each node gets a contiguous block and the sizes differ by at most one.
pub fn node_of(proc: usize, procs: usize, nodes: usize) -> usize {
    proc * nodes / procs
}

/// The processes of `node`, in order.
pub fn procs_of_node(node: usize, procs: usize, nodes: usize) -> impl Iterator<Item = usize> {
    (0..procs).filter(move |&i| node_of(i, procs, nodes) == node)
}

/// Installs the stderr logger (once per process): `CAIRN_LOG_LEVEL` if set (as the engine
/// reads `[log] level`), else `info` for the coordinator, so checkpoints and their failures
/// are reported, and `warn` for the engine, so its fallbacks and repairs are.
pub fn init_logging() {
    let level = std::env::var("CAIRN_LOG_LEVEL").ok();
    let filter = tracing_subscriber::EnvFilter::new(format!(
        "cairn_launch={},cairn_core={}",
        level.as_deref().unwrap_or("info"),
        level.as_deref().unwrap_or("warn")
    ));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .without_time()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_get_contiguous_balanced_blocks() {
        let blocks: Vec<Vec<usize>> = (0..3).map(|n| procs_of_node(n, 8, 3).collect()).collect();
        assert_eq!(blocks, [vec![0, 1, 2], vec![3, 4, 5], vec![6, 7]]);
        assert!((0..8).all(|i| node_of(i, 8, 1) == 0));
        assert!((0..8).all(|i| node_of(i, 8, 8) == i));
    }
}
