//! Cairn's collective trait ([`Comm`]), its one-process implementation ([`Solo`]) and the
//! node / failure-domain [`Topology`] built on top of it.
//!
//! The engine speaks to other ranks only through [`Comm`], so it runs unchanged over MPI
//! (`cairn-mpi`) or in a single process:
//!
//! ```
//! use cairn_comm::{Comm, Op, Solo, Topology};
//! let comm = Solo;
//! let mut v = [3i64, -1];
//! comm.allreduce_i64(&mut v, Op::Min).unwrap();
//! assert!(comm.all_agree(true).unwrap());
//! let topo = Topology::discover(&comm, 0, None).unwrap();
//! assert_eq!((topo.node, topo.nodes), (0, 1));
//! ```
#![forbid(unsafe_code)]

mod net;
mod threads;
mod topology;

pub use net::Net;
pub use threads::Threads;
pub use topology::Topology;

/// A failed collective operation.
#[derive(Debug, thiserror::Error)]
#[error("collective {op} failed: {msg}")]
pub struct CommError {
    pub op: &'static str,
    pub msg: String,
}

pub type Result<T> = std::result::Result<T, CommError>;

/// Reduction operators for [`Comm::allreduce_i64`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Min,
    Max,
    Sum,
}

impl Op {
    /// Fold `b` into `a`.
    pub fn apply(self, a: i64, b: i64) -> i64 {
        match self {
            Op::Min => a.min(b),
            Op::Max => a.max(b),
            Op::Sum => a.wrapping_add(b),
        }
    }
}

/// The collectives the engine needs, over one communicator. Every method is collective: all
/// ranks of the communicator call it, in the same order.
pub trait Comm {
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    fn barrier(&self) -> Result<()>;
    /// Element-wise reduction of `vals` across ranks, result on every rank.
    fn allreduce_i64(&self, vals: &mut [i64], op: Op) -> Result<()>;
    /// Every rank's `mine`, indexed by rank, on every rank.
    fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>>;
    /// Exchange with peers: send `send` to rank `dest` and receive from rank `src`.
    fn sendrecv(&self, send: &[u8], dest: usize, src: usize) -> Result<Vec<u8>>;
    /// [`sendrecv`](Comm::sendrecv) into `out`, replacing its contents: a caller exchanging
    /// many pieces keeps one buffer instead of allocating (and zeroing) one per piece.
    fn sendrecv_into(&self, send: &[u8], dest: usize, src: usize, out: &mut Vec<u8>) -> Result<()> {
        *out = self.sendrecv(send, dest, src)?;
        Ok(())
    }
    /// Point to point: send `bytes` to rank `dest` (blocks until it can be delivered).
    fn send(&self, bytes: &[u8], dest: usize) -> Result<()>;
    /// Point to point: receive the next message rank `src` sent to this rank.
    fn recv(&self, src: usize) -> Result<Vec<u8>>;

    /// True on every rank if `ok` is true on every rank. This is how ranks agree on the
    /// outcome of each step, so they never diverge.
    fn all_agree(&self, ok: bool) -> Result<bool> {
        let mut v = [ok as i64];
        self.allreduce_i64(&mut v, Op::Min)?;
        Ok(v[0] == 1)
    }
}

/// The one-process communicator: rank 0 of 1.
#[derive(Debug, Clone, Copy, Default)]
pub struct Solo;

impl Comm for Solo {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn barrier(&self) -> Result<()> {
        Ok(())
    }
    fn allreduce_i64(&self, _vals: &mut [i64], _op: Op) -> Result<()> {
        Ok(())
    }
    fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        Ok(vec![mine.to_vec()])
    }
    fn sendrecv(&self, send: &[u8], dest: usize, src: usize) -> Result<Vec<u8>> {
        if dest != 0 || src != 0 {
            return Err(CommError {
                op: "sendrecv",
                msg: format!("peer {dest}/{src} outside a world of 1"),
            });
        }
        Ok(send.to_vec())
    }
    fn send(&self, _bytes: &[u8], dest: usize) -> Result<()> {
        Err(CommError {
            op: "send",
            msg: format!("no peer {dest} in a world of 1"),
        })
    }
    fn recv(&self, src: usize) -> Result<Vec<u8>> {
        Err(CommError {
            op: "recv",
            msg: format!("no peer {src} in a world of 1"),
        })
    }
}
