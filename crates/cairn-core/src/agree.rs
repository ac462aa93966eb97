//! The agreement that ends every collective step: the ranks' own outcomes become one.
//!
//! Every collective call of the engine ends here, so that ranks never diverge: if one rank's
//! step failed, every rank returns an error (the failing rank its own, the others
//! [`ErrorKind::Peer`]). It sits below both the engine and the PROTECTED step, which use it.

use crate::error::{Error, ErrorKind, Result};
use cairn_comm::Comm;

/// Collective: turn a per-rank result into an agreed one. Every rank fails if any does; a rank
/// whose own step succeeded reports that another rank failed.
pub(crate) fn agree<T>(comm: &dyn Comm, res: Result<T>, what: &str) -> Result<T> {
    let ok = comm.all_agree(res.is_ok())?;
    match res {
        Ok(v) if ok => Ok(v),
        Ok(_) => Err(Error::new(
            ErrorKind::Peer,
            format!("cairn could not {what} on another rank (see its message)"),
        )),
        Err(e) => Err(e),
    }
}
