//! [`MpiComm`]: Cairn's [`Comm`] over an MPI communicator. This is the only crate that links
//! MPI; everything above it sees the trait.
//!
//! The engine works on a duplicate of the application's communicator, so its messages can
//! never match the application's receives.
//!
//! ```no_run
//! let universe = mpi::initialize().unwrap();
//! let comm = cairn_mpi::MpiComm::new(&universe.world());
//! use cairn_comm::Comm;
//! assert!(comm.size() >= 1);
//! ```

use cairn_comm::{Comm, CommError, Op, Result};
use mpi::collective::SystemOperation;
use mpi::datatype::PartitionMut;
use mpi::ffi;
use mpi::raw::{AsRaw, FromRaw};
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::*;

pub use mpi;

/// An MPI communicator owned by Cairn (a duplicate of the one it was made from).
pub struct MpiComm {
    comm: SimpleCommunicator,
}

// SAFETY: the engine uses its communicator from one thread at a time (all engine entry points
// take `&mut self` or are serialised by the C API's lock), which every MPI thread level
// including MPI_THREAD_SERIALIZED allows; the handle itself is a plain value.
unsafe impl Send for MpiComm {}

impl MpiComm {
    /// Duplicate `comm` for Cairn's use. Collective over `comm`.
    pub fn new<C: Communicator>(comm: &C) -> MpiComm {
        MpiComm {
            comm: comm.duplicate(),
        }
    }

    /// Duplicate a raw communicator handle received through the C ABI. Collective over it.
    ///
    /// # Safety
    /// `raw` must be a valid intra-communicator of the initialised MPI library this crate
    /// links; it is only read (duplicated), never freed.
    pub unsafe fn from_raw_dup(raw: ffi::MPI_Comm) -> std::result::Result<MpiComm, CommError> {
        let mut initialized = 0;
        // SAFETY: MPI_Initialized may be called at any time, even before MPI_Init.
        unsafe { ffi::MPI_Initialized(&mut initialized) };
        if initialized == 0 {
            return Err(CommError {
                op: "init",
                msg: "MPI is not initialised: call MPI_Init before cairn_init".into(),
            });
        }
        // SAFETY: reading an MPI-provided constant handle.
        let mut dup: ffi::MPI_Comm = unsafe { ffi::RSMPI_COMM_NULL };
        // SAFETY: `raw` is valid per this function's contract and `dup` is a valid out slot.
        let rc = unsafe { ffi::MPI_Comm_dup(raw, &mut dup) };
        if rc != 0 {
            return Err(CommError {
                op: "MPI_Comm_dup",
                msg: format!("error code {rc}"),
            });
        }
        // SAFETY: `dup` is a fresh intra-communicator owned by us; SimpleCommunicator frees
        // it on drop and we never use the handle otherwise.
        Ok(MpiComm {
            comm: unsafe { SimpleCommunicator::from_raw(dup) },
        })
    }

    /// The raw handle, for the few callers that must pass it on.
    pub fn as_raw(&self) -> ffi::MPI_Comm {
        self.comm.as_raw()
    }
}

impl Comm for MpiComm {
    fn rank(&self) -> usize {
        self.comm.rank() as usize
    }

    fn size(&self) -> usize {
        self.comm.size() as usize
    }

    fn barrier(&self) -> Result<()> {
        self.comm.barrier();
        Ok(())
    }

    fn allreduce_i64(&self, vals: &mut [i64], op: Op) -> Result<()> {
        let send = vals.to_vec();
        let op = match op {
            Op::Min => SystemOperation::min(),
            Op::Max => SystemOperation::max(),
            Op::Sum => SystemOperation::sum(),
        };
        self.comm.all_reduce_into(&send[..], vals, op);
        Ok(())
    }

    fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let n = self.size();
        let mut lens = vec![0i32; n];
        let len = i32::try_from(mine.len()).map_err(|_| CommError {
            op: "allgather",
            msg: format!("{} bytes is too large", mine.len()),
        })?;
        self.comm.all_gather_into(&len, &mut lens[..]);
        let mut displs = Vec::with_capacity(n);
        let mut total = 0i32;
        for l in &lens {
            displs.push(total);
            total = total.checked_add(*l).ok_or(CommError {
                op: "allgather",
                msg: "gathered data exceeds 2 GiB".into(),
            })?;
        }
        if total == 0 {
            // Nothing to move; Open MPI rejects an all-empty MPI_Allgatherv (MPI_ERR_ARG).
            return Ok(vec![Vec::new(); n]);
        }
        let mut buf = vec![0u8; total as usize];
        {
            let mut part = PartitionMut::new(&mut buf[..], &lens[..], &displs[..]);
            self.comm.all_gather_varcount_into(mine, &mut part);
        }
        Ok(lens
            .iter()
            .zip(&displs)
            .map(|(l, d)| buf[*d as usize..(*d + *l) as usize].to_vec())
            .collect())
    }

    fn send(&self, bytes: &[u8], dest: usize) -> Result<()> {
        let n = self.size();
        if dest >= n {
            return Err(CommError {
                op: "send",
                msg: format!("peer {dest} outside a world of {n}"),
            });
        }
        let p = self.comm.process_at_rank(dest as i32);
        p.send(&(bytes.len() as u64));
        p.send(bytes);
        Ok(())
    }

    fn recv(&self, src: usize) -> Result<Vec<u8>> {
        let n = self.size();
        if src >= n {
            return Err(CommError {
                op: "recv",
                msg: format!("peer {src} outside a world of {n}"),
            });
        }
        let p = self.comm.process_at_rank(src as i32);
        let (len, _) = p.receive::<u64>();
        let mut buf = vec![0u8; len as usize];
        p.receive_into(&mut buf[..]);
        Ok(buf)
    }

    fn sendrecv(&self, send: &[u8], dest: usize, src: usize) -> Result<Vec<u8>> {
        let mut buf = Vec::new();
        self.sendrecv_into(send, dest, src, &mut buf)?;
        Ok(buf)
    }

    fn sendrecv_into(&self, send: &[u8], dest: usize, src: usize, out: &mut Vec<u8>) -> Result<()> {
        let n = self.size();
        if dest >= n || src >= n {
            return Err(CommError {
                op: "sendrecv",
                msg: format!("peer {dest}/{src} outside a world of {n}"),
            });
        }
        let (d, s) = (
            self.comm.process_at_rank(dest as i32),
            self.comm.process_at_rank(src as i32),
        );
        let mut len = 0u64;
        mpi::point_to_point::send_receive_into(&(send.len() as u64), &d, &mut len, &s);
        // Only growth is zeroed; a buffer kept from piece to piece is overwritten in place.
        out.resize(len as usize, 0);
        mpi::point_to_point::send_receive_into(send, &d, &mut out[..], &s);
        Ok(())
    }
}
