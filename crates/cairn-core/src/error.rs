//! The engine's error type: a kind for programs, a message that says where for people.

use cairn_format::FormatError;
use cairn_tier::TierError;

/// What kind of failure an [`Error`] is. The C API maps each kind to one error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A configuration file, variable or override is unknown or has a bad value.
    Config,
    /// The caller passed something invalid (name, version, region).
    InvalidArgument,
    /// The call does not fit the engine's state (e.g. not initialised).
    State,
    /// Storage failed (full disk, missing or unwritable directory).
    Io,
    /// Stored data failed its checksums or could not be decoded.
    Corrupt,
    /// Stored data does not fit the protected regions or the job (size, type, rank count).
    Mismatch,
    /// No such checkpoint.
    NotFound,
    /// A collective operation failed.
    Comm,
    /// Another rank failed; its own message says why.
    Peer,
    /// Another job holds the checkpoint name in the same tiers (the job lock).
    InUse,
}

/// An engine error.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{msg}")]
pub struct Error {
    pub kind: ErrorKind,
    pub msg: String,
}

impl Error {
    pub fn new(kind: ErrorKind, msg: impl Into<String>) -> Error {
        Error {
            kind,
            msg: msg.into(),
        }
    }

    pub(crate) fn config(msg: impl Into<String>) -> Error {
        Error::new(ErrorKind::Config, msg)
    }

    pub(crate) fn invalid(msg: impl Into<String>) -> Error {
        Error::new(ErrorKind::InvalidArgument, msg)
    }

    /// Prefix the message with where it happened.
    pub(crate) fn context(mut self, ctx: impl std::fmt::Display) -> Error {
        self.msg = format!("{ctx}: {}", self.msg);
        self
    }
}

impl From<TierError> for Error {
    fn from(e: TierError) -> Error {
        Error::new(ErrorKind::Io, e.to_string())
    }
}

impl From<FormatError> for Error {
    fn from(e: FormatError) -> Error {
        Error::new(ErrorKind::Corrupt, e.to_string())
    }
}

impl From<cairn_comm::CommError> for Error {
    fn from(e: cairn_comm::CommError) -> Error {
        Error::new(ErrorKind::Comm, e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, Error>;
