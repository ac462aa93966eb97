"""Tests of cairn/errors.py: the hierarchy, the errno mapping, and real engine errors."""

from __future__ import annotations

import errno
from pathlib import Path

import numpy as np
import pytest

import cairn
from cairn import errors
from conftest import Tiers


def test_every_class_is_a_cairn_error_and_exported() -> None:
    for name in errors.__all__:
        cls = getattr(cairn, name)
        assert cls is getattr(errors, name)
        assert issubclass(cls, cairn.CairnError), name
    assert issubclass(cairn.InvalidArgumentError, ValueError)
    assert issubclass(cairn.StorageError, OSError)
    for cls, base in [
        (cairn.StorageFileNotFoundError, FileNotFoundError),
        (cairn.StoragePermissionError, PermissionError),
        (cairn.StorageFileExistsError, FileExistsError),
        (cairn.StorageNotADirectoryError, NotADirectoryError),
        (cairn.StorageIsADirectoryError, IsADirectoryError),
    ]:
        assert issubclass(cls, cairn.StorageError) and issubclass(cls, base)


@pytest.mark.parametrize(
    "message, cls, code",
    [
        ("local tier: open /x/y: No such file or directory (os error 2)", cairn.StorageFileNotFoundError, errno.ENOENT),
        ("create /x: Permission denied (os error 13)", cairn.StoragePermissionError, errno.EACCES),
        ("chmod /x: Operation not permitted (os error 1)", cairn.StoragePermissionError, errno.EPERM),
        ("mkdir /x: File exists (os error 17)", cairn.StorageFileExistsError, errno.EEXIST),
        ("open /x/y: Not a directory (os error 20)", cairn.StorageNotADirectoryError, errno.ENOTDIR),
        ("open /x: Is a directory (os error 21)", cairn.StorageIsADirectoryError, errno.EISDIR),
        ("write /x: No space left on device (os error 28)", cairn.StorageError, errno.ENOSPC),
        ("global tier /a/b: directory /a does not exist (create it)", cairn.StorageFileNotFoundError, errno.ENOENT),
    ],
)
def test_storage_errors_carry_their_errno(message: str, cls: type, code: int) -> None:
    e = errors._from_engine("io", message)
    assert type(e) is cls
    assert e.errno == code
    assert message in str(e)


def test_storage_errors_without_an_errno_and_other_kinds() -> None:
    e = errors._from_engine("io", "flush of v3 failed on another rank")
    assert type(e) is cairn.StorageError and e.errno is None and str(e) == "flush of v3 failed on another rank"
    kinds = {
        "config": cairn.ConfigError,
        "invalid": cairn.InvalidArgumentError,
        "state": cairn.StateError,
        "corrupt": cairn.CorruptError,
        "mismatch": cairn.MismatchError,
        "notfound": cairn.NotFoundError,
        "comm": cairn.CommError,
        "peer": cairn.PeerError,
        "inuse": cairn.InUseError,
        "internal": cairn.InternalError,
        "something new": cairn.InternalError,
    }
    for kind, cls in kinds.items():
        e = errors._from_engine(kind, "msg")
        assert type(e) is cls and str(e) == "msg"


def test_a_missing_tier_directory_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as exc:
        cairn.Checkpointer("x", config={"tiers.global": str(tmp_path / "no" / "such"), "tiers.local": "none"})
    assert isinstance(exc.value, cairn.CairnError) and exc.value.errno == errno.ENOENT
    assert "no/such" in str(exc.value) or "no" in str(exc.value)


def test_a_tier_that_is_a_file_is_an_os_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(cairn.StorageError) as exc:
        cairn.Checkpointer("x", config={"tiers.global": str(tmp_path / "file" / "global"), "tiers.local": "none"})
    assert isinstance(exc.value, OSError)


def test_damaged_checkpoint_is_a_corrupt_error(tiers: Tiers) -> None:
    with cairn.Checkpointer("dmg", config=tiers.config()) as ck:
        ck.protect(1, np.arange(100000.0))
        ck.checkpoint(1)
    parts = [p for p in tiers.local.rglob("rank0.ckpt")] + [p for p in tiers.global_.rglob("rank0.ckpt")]
    assert parts
    for p in parts:
        data = bytearray(p.read_bytes())
        data[len(data) // 2] ^= 0xFF
        p.write_bytes(bytes(data))
    with cairn.Checkpointer("dmg", config=tiers.config()) as ck:
        a = ck.protect(1, np.zeros(100000))
        with pytest.raises(cairn.CorruptError, match="damaged"):
            ck.restart(1)


def test_a_second_job_on_the_same_name_and_tiers_is_in_use(tiers: Tiers) -> None:
    # Two checkpointers of one name on one set of tiers are two jobs writing the same
    # checkpoint; the second is refused at its first call naming the holder, and the lock
    # goes with the first one's close.
    with cairn.Checkpointer("twice", config=tiers.config()) as first:
        assert first.restart_test() is None
        first.checkpoint(1)
        with cairn.Checkpointer("twice", config=tiers.config()) as second:
            with pytest.raises(cairn.InUseError) as exc:
                second.restart_test()
            assert "in use by the job of pid" in str(exc.value) and ".twice.lock" in str(exc.value)
    with cairn.Checkpointer("twice", config=tiers.config()) as third:
        assert third.restart_test() == 1
