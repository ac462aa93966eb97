//! Engine errors as Python exceptions. The hierarchy itself is Python (`cairn/errors.py`), so
//! it reads as the documentation of what can be caught; this side names the kind and hands
//! the message over, and `cairn.errors._from_engine` picks the class (and the OSError
//! subclass of a storage error).

use cairn_core::{Error, ErrorKind};
use pyo3::prelude::*;

/// The kind names `cairn.errors._from_engine` understands.
fn kind_name(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Config => "config",
        ErrorKind::InvalidArgument => "invalid",
        ErrorKind::State => "state",
        ErrorKind::Io => "io",
        ErrorKind::Corrupt => "corrupt",
        ErrorKind::Mismatch => "mismatch",
        ErrorKind::NotFound => "notfound",
        ErrorKind::Comm => "comm",
        ErrorKind::Peer => "peer",
        ErrorKind::InUse => "inuse",
        _ => "internal",
    }
}

/// A `cairn.errors` exception of `kind` with `msg`.
pub fn raise(kind: &str, msg: String) -> PyErr {
    Python::attach(|py| {
        let exc = py
            .import("cairn.errors")
            .and_then(|m| m.getattr("_from_engine"))
            .and_then(|f| f.call1((kind, msg)));
        match exc {
            Ok(e) => PyErr::from_value(e),
            // The package is broken (e.g. _cairn imported on its own); say so rather than
            // losing the original message.
            Err(e) => e,
        }
    })
}

pub fn engine(e: Error) -> PyErr {
    raise(kind_name(e.kind), e.msg)
}

pub fn invalid(msg: String) -> PyErr {
    raise("invalid", msg)
}

pub fn state(msg: impl Into<String>) -> PyErr {
    raise("state", msg.into())
}

/// An internal error caught as a panic: reported as an exception, never unwound into Python.
pub fn panic(what: &str, payload: Box<dyn std::any::Any + Send>) -> PyErr {
    let m = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    raise(
        "internal",
        format!("internal error in {what}: {m} (please report it)"),
    )
}
