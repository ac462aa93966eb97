"""The exceptions Cairn raises, rooted at :class:`CairnError`.

One class per kind of engine error (the ``CAIRN_ERR_*`` codes of the C API)::

    CairnError
    ├── ConfigError              a configuration file, variable or override is bad
    ├── InvalidArgumentError     also a ValueError: a bad name, version, id or buffer
    ├── StateError               the call does not fit the state (e.g. closed)
    ├── StorageError             also an OSError: a tier could not be read or written
    │   ├── StorageFileNotFoundError     also FileNotFoundError (ENOENT)
    │   ├── StoragePermissionError       also PermissionError (EACCES, EPERM)
    │   ├── StorageFileExistsError       also FileExistsError (EEXIST)
    │   ├── StorageNotADirectoryError    also NotADirectoryError (ENOTDIR)
    │   └── StorageIsADirectoryError     also IsADirectoryError (EISDIR)
    ├── CorruptError             stored data is damaged and nothing older could be restored
    ├── MismatchError            a checkpoint does not fit the protected regions or the job
    ├── NotFoundError            no such checkpoint
    ├── CommError                a collective operation failed
    ├── PeerError                the call failed on another rank (its message says why)
    ├── InUseError               another job writes this checkpoint name into the same tiers
    └── InternalError            a bug in Cairn, caught; please report it

A storage error carries the ``errno`` of the failed system call when the engine's message
names one, so ``except FileNotFoundError`` and ``e.errno`` work as for any I/O error.
"""

from __future__ import annotations

import errno as _errno
import re as _re

__all__ = [
    "CairnError",
    "ConfigError",
    "InvalidArgumentError",
    "StateError",
    "StorageError",
    "StorageFileNotFoundError",
    "StoragePermissionError",
    "StorageFileExistsError",
    "StorageNotADirectoryError",
    "StorageIsADirectoryError",
    "CorruptError",
    "MismatchError",
    "NotFoundError",
    "CommError",
    "PeerError",
    "InUseError",
    "InternalError",
]


class CairnError(Exception):
    """Root of every error Cairn raises."""


class ConfigError(CairnError):
    """A configuration file, ``CAIRN_*`` variable or override is unknown or has a bad value."""


class InvalidArgumentError(CairnError, ValueError):
    """An argument is invalid: a name, version, region id, or a buffer Cairn cannot protect."""


class StateError(CairnError):
    """The call does not fit the checkpointer's state (closed, or steps() used twice)."""


class StorageError(CairnError, OSError):
    """A tier could not be read or written (full disk, missing or unwritable directory)."""


class StorageFileNotFoundError(StorageError, FileNotFoundError):
    """A storage error for a file or directory that does not exist (ENOENT)."""


class StoragePermissionError(StorageError, PermissionError):
    """A storage error for a file or directory Cairn may not use (EACCES, EPERM)."""


class StorageFileExistsError(StorageError, FileExistsError):
    """A storage error for a path that already exists (EEXIST)."""


class StorageNotADirectoryError(StorageError, NotADirectoryError):
    """A storage error for a path that should be a directory (ENOTDIR)."""


class StorageIsADirectoryError(StorageError, IsADirectoryError):
    """A storage error for a path that should not be a directory (EISDIR)."""


class CorruptError(CairnError):
    """Stored data failed its checksums and nothing older could be restored."""


class MismatchError(CairnError):
    """A checkpoint does not fit the protected regions (id, dtype, size) or the job (ranks)."""


class NotFoundError(CairnError):
    """No such checkpoint (or it is not complete on every rank)."""


class CommError(CairnError):
    """A collective operation failed."""


class PeerError(CairnError):
    """The call failed on another rank; that rank's own exception says why."""


class InUseError(CairnError):
    """Another job holds the checkpoint name in the same tiers; the message names it (host,
    pid, since when)."""


class InternalError(CairnError):
    """An internal error was caught (a bug in Cairn); please report it with the message."""


_KINDS: dict[str, type[CairnError]] = {
    "config": ConfigError,
    "invalid": InvalidArgumentError,
    "state": StateError,
    "corrupt": CorruptError,
    "mismatch": MismatchError,
    "notfound": NotFoundError,
    "comm": CommError,
    "peer": PeerError,
    "inuse": InUseError,
    "internal": InternalError,
}

_BY_ERRNO: dict[int, type[StorageError]] = {
    _errno.ENOENT: StorageFileNotFoundError,
    _errno.EACCES: StoragePermissionError,
    _errno.EPERM: StoragePermissionError,
    _errno.EEXIST: StorageFileExistsError,
    _errno.ENOTDIR: StorageNotADirectoryError,
    _errno.EISDIR: StorageIsADirectoryError,
}

# The engine keeps an I/O error's message, not its errno; Rust formats an OS error as
# "<description> (os error N)", so the number is read back from there.
_OS_ERROR = _re.compile(r"\(os error (\d+)\)")
# The one storage error the engine raises without a system call: a tier whose parent
# directory is missing (checked before anything is created).
_MISSING_DIR = _re.compile(r"directory .* does not exist")


def _errno_of(message: str) -> int | None:
    found = _OS_ERROR.findall(message)
    if found:
        return int(found[-1])
    if _MISSING_DIR.search(message):
        return _errno.ENOENT
    return None


def _from_engine(kind: str, message: str) -> CairnError:
    """The exception for an engine error of ``kind`` (called by the extension module)."""
    if kind == "io":
        code = _errno_of(message)
        if code is None:
            return StorageError(message)
        cls = _BY_ERRNO.get(code, StorageError)
        return cls(code, message)
    return _KINDS.get(kind, InternalError)(message)
