//! Tidy checks: tests that keep ARCHITECTURE.md true of the code.
//!
//! This crate has no code of its own, only tests (`cargo test -p cairn-tidy`, part of
//! `./run test`). Each reads the repository as it is and compares it with what
//! ARCHITECTURE.md says:
//!
//! - the workspace's crate dependencies (`cargo metadata`) against the table under
//!   "## Layers", in both directions, so that neither the code nor the table drifts;
//! - that `cairn-mpi` is the only crate that depends on the MPI bindings;
//! - that every folder the code map names exists and every workspace crate has a section;
//! - that no crate's top-level modules import each other in a cycle, beyond the cycles listed
//!   in `tidy::KNOWN_CYCLES`, which may only shrink;
//! - that the Unsafe item of the cross-cutting concerns names every file with unsafe code,
//!   and that every crate without any forbids it.
//!
//! The restorer's "no undefined symbol" is checked where the restorer is built
//! (`crates/cairn-ckpt/tests/standalone.rs`), since only that crate knows where it is.

#![forbid(unsafe_code)]

#[cfg(test)]
mod tidy;
