"""Tests of the extension module cairn._cairn (crates/cairn-py/src): the engine object and
the data model it shares with the C API."""

from __future__ import annotations

import re

import numpy as np
import pytest

import cairn
from cairn import _cairn
from conftest import REPO, Tiers


def test_dtype_codes_are_the_c_api_codes() -> None:
    header = (REPO / "crates" / "cairn-capi" / "include" / "cairn.h").read_text()
    c_codes = {m[0].lower(): int(m[1]) for m in re.findall(r"#define CAIRN_(BYTE|INT8|INT16|INT32|INT64|UINT32|UINT64|FLOAT|DOUBLE) (\d+)", header)}
    assert len(c_codes) == 9, c_codes
    assert _cairn.DTYPES == c_codes
    assert cairn.DTYPES == c_codes


@pytest.mark.parametrize(
    "dtype, name",
    [("i1", "int8"), ("i2", "int16"), ("i4", "int32"), ("i8", "int64"), ("u1", "byte"), ("u4", "uint32"),
     ("u8", "uint64"), ("f4", "float"), ("f8", "double"), ("<f8", "double"), ("=i4", "int32")],
)
def test_the_dtype_comes_from_the_buffer_format(tiers: Tiers, dtype: str, name: str) -> None:
    e = _cairn.Engine(None, None, list((k, str(v)) for k, v in tiers.config().items()))
    e.protect(7, np.zeros(3, dtype=dtype))
    assert e.regions() == {7: (name, 3)}
    e.finalize()


def test_engine_lifecycle(tiers: Tiers) -> None:
    e = _cairn.Engine(None, None, [(k, str(v)) for k, v in tiers.config().items()])
    assert (e.rank, e.size, e.node, e.nodes, e.closed) == (0, 1, 0, 1, False)
    a = np.arange(4.0)
    e.protect(1, a)
    e.protect(1, np.arange(8.0))  # replaces region 1
    assert e.regions() == {1: ("double", 8)}
    e.protect(2, memoryview(bytearray(5)))
    e.unprotect(2)
    e.checkpoint("n", 1)
    assert e.restart_test("n") == 1 and e.restart("n", 1) == 1
    assert e.need_checkpoint() is True  # no policy configured: always due
    assert e.test("n", 1) == "protected"
    e.release()
    assert e.closed and "closed" in repr(e)
    e.release()
    e.finalize()  # nothing left to finalize
    with pytest.raises(cairn.StateError):
        e.regions()
    with pytest.raises(cairn.StateError):
        e.protect(1, a)


def test_zero_length_regions(tiers: Tiers) -> None:
    with cairn.Checkpointer("empty", config=tiers.config()) as ck:
        ck.protect(1, np.zeros(0))
        ck.protect(2, bytearray())
        ck.checkpoint(1)
        assert ck.restart(1) == 1
        assert ck.regions() == {1: ("double", 0), 2: ("byte", 0)}


def test_check_name() -> None:
    _cairn.check_name("heat-2d_v1.0")
    for bad in ["", ".hidden", "a/b", "x" * 129, "sp ace"]:
        with pytest.raises(cairn.InvalidArgumentError):
            _cairn.check_name(bad)


def test_scalars_and_memoryviews_are_regions(tiers: Tiers) -> None:
    with cairn.Checkpointer("scalar", config=tiers.config()) as ck:
        a = ck.protect(1, np.array(3.5, dtype=np.float32))  # 0-d, like a PyTorch step count
        m = ck.protect(2, memoryview(bytearray(16)).cast("d"))
        m[1] = 2.25
        assert ck.regions() == {1: ("float", 1), 2: ("double", 2)}
        ck.checkpoint(1)
        a[()] = 0
        m[1] = 0
        ck.restart(1)
        assert a[()] == 3.5 and m[1] == 2.25
