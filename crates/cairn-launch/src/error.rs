//! The crate's error type: a kind for callers that branch on it and a message that says where
//! (which job, node, process, checkpoint or file).

use std::fmt;

/// What kind of failure an [`Error`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Bad options or arguments (a malformed CPU list, an invalid job id, too many nodes).
    Usage,
    /// A file, directory or socket operation failed.
    Io,
    /// A peer sent a line that does not follow the protocol.
    Protocol,
    /// The peer refused us (wrong token, duplicate process index, job mismatch).
    Denied,
    /// No such job, coordinator or checkpoint version.
    NotFound,
    /// A peer did not answer in time.
    Timeout,
    /// A checkpoint was attempted and failed; the message is the failure report.
    CheckpointFailed,
    /// The images cannot run on this machine (another kernel build, a CPU lacking a feature
    /// they use).
    Machine,
    /// Cairn's engine could not store or restore the images (storage, redundancy, damaged
    /// data); the message is the engine's.
    Engine,
}

/// An error of this crate.
#[derive(Debug, Clone)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
        }
    }

    /// An I/O error with what was being done: `context: error`.
    pub fn io(context: impl fmt::Display, e: std::io::Error) -> Error {
        let kind = if e.kind() == std::io::ErrorKind::TimedOut
            || e.kind() == std::io::ErrorKind::WouldBlock
        {
            ErrorKind::Timeout
        } else {
            ErrorKind::Io
        };
        Error::new(kind, format!("{context}: {e}"))
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `Err(Error::new(kind, format!(...)))`.
macro_rules! bail {
    ($kind:ident, $($arg:tt)*) => {
        return Err($crate::error::Error::new($crate::error::ErrorKind::$kind, format!($($arg)*)))
    };
}
pub(crate) use bail;
