"""Tests of cairn/checkpointer.py in one process: protection, values, restart, the loop
helper, the context manager, and a process killed with SIGKILL and restarted."""

from __future__ import annotations

import array
import importlib.util
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import cairn
from conftest import PROGS, Tiers, run, run_and_kill

ALL_DTYPES = {
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "uint8": "byte",
    "uint32": "uint32",
    "uint64": "uint64",
    "float32": "float",
    "float64": "double",
}


def test_every_dtype_round_trips_bit_for_bit(tiers: Tiers) -> None:
    rng = np.random.default_rng(7)
    with cairn.Checkpointer("dt", config=tiers.config()) as ck:
        arrays = {}
        for i, dt in enumerate(ALL_DTYPES):
            a = np.frombuffer(rng.bytes(8 * (100 + i)), dtype=dt).copy()
            arrays[dt] = ck.protect(i, a)
        ba = ck.protect(20, bytearray(rng.bytes(999)))
        arr = ck.protect(21, array.array("q", range(50)))
        assert ck.regions() == {
            **{i: (ALL_DTYPES[dt], arrays[dt].size) for i, dt in enumerate(ALL_DTYPES)},
            20: ("byte", 999),
            21: ("int64", 50),
        }
        saved = {dt: a.copy() for dt, a in arrays.items()}
        saved_ba, saved_arr = bytes(ba), arr.tobytes()
        ck.checkpoint(3)
        for a in arrays.values():
            a[...] = 0
        ba[:] = bytes(len(ba))
        arr[0] = -1
        assert ck.restart(3) == 3
        for dt, a in arrays.items():
            assert a.tobytes() == saved[dt].tobytes(), dt
        assert bytes(ba) == saved_ba and arr.tobytes() == saved_arr
        assert ck.restored_version == 3


def test_protect_is_zero_copy_and_keeps_the_object(tiers: Tiers) -> None:
    with cairn.Checkpointer("zc", config=tiers.config()) as ck:
        a = ck.protect(1, np.zeros(1000))
        assert isinstance(a, np.ndarray)
        # Changes after protect are what the checkpoint stores: the array is not copied.
        a[:] = 2.5
        ck.checkpoint(1)
        a[:] = 0
        ck.restart(1)
        assert (a == 2.5).all()
        # An export is held: numpy refuses to move the memory while it is protected.
        with pytest.raises(ValueError):
            a.resize(2000)
        # A temporary array stays alive while protected.
        ck.protect(2, np.full(10, 7, dtype=np.int32))
        ck.checkpoint(2)
        ck.unprotect(1)
        a.resize(2000, refcheck=False)  # released once unprotected


def test_unsupported_buffers_are_clear_errors(tiers: Tiers) -> None:
    with cairn.Checkpointer("bad", config=tiers.config()) as ck:
        with pytest.raises(cairn.InvalidArgumentError, match=r"format 'e'.*no Cairn dtype.*view\(numpy.uint8\)"):
            ck.protect(1, np.zeros(4, dtype=np.float16))
        with pytest.raises(cairn.InvalidArgumentError, match=r"format '\?'"):
            ck.protect(1, np.zeros(4, dtype=bool))
        with pytest.raises(cairn.InvalidArgumentError, match="not contiguous"):
            ck.protect(1, np.zeros((4, 4))[:, 1])
        with pytest.raises(cairn.InvalidArgumentError, match="cannot be written"):
            ck.protect(1, b"read-only bytes")
        ro = np.zeros(4)
        ro.flags.writeable = False
        with pytest.raises(cairn.InvalidArgumentError, match="cannot be written"):
            ck.protect(1, ro)
        with pytest.raises(cairn.InvalidArgumentError, match="big-endian"):
            ck.protect(1, np.zeros(4, dtype=">f8"))
        with pytest.raises(TypeError, match="does not expose a buffer.*ck.state"):
            ck.protect(1, 42)
        with pytest.raises(cairn.InvalidArgumentError, match="reserved"):
            ck.protect(cairn.VALUE_REGION, bytearray(8))
        with pytest.raises(cairn.InvalidArgumentError, match="out of range"):
            ck.protect(2**40, bytearray(8))
        with pytest.raises(cairn.InvalidArgumentError, match="region 5 is not protected"):
            ck.unprotect(5)
        assert ck.regions() == {}
        # Fortran-ordered arrays are contiguous too.
        assert ck.protect(1, np.zeros((3, 4), order="F")).flags.f_contiguous
        # Errors are CairnErrors and ValueErrors alike.
        with pytest.raises(ValueError):
            ck.protect(2, np.zeros(1, dtype=np.complex128))


def test_values_in_state_come_back_in_the_same_dict(tiers: Tiers) -> None:
    with cairn.Checkpointer("vals", config=tiers.config()) as ck:
        rng = np.random.default_rng(3)
        state = ck.state
        state.update(step=10, rng=rng.bit_generator.state, nested={"a": [1, 2.5, "x"]})
        ck.protect(1, np.arange(5.0))
        ck.checkpoint(10)
        expected = rng.random(3)
        state.clear()
        state["step"] = 0  # anything non-empty: the values region is then read
        assert ck.restart(10) == 10
        assert state is ck.state
        assert state["step"] == 10 and state["nested"] == {"a": [1, 2.5, "x"]}
        rng2 = np.random.default_rng()
        rng2.bit_generator.state = state["rng"]
        assert (rng2.random(3) == expected).all()
        assert cairn.VALUE_REGION in ck.regions()


def test_values_larger_than_the_capacity_are_refused(tiers: Tiers) -> None:
    with cairn.Checkpointer("cap", config=tiers.config(), value_capacity=100) as ck:
        ck.state["big"] = "x" * 1000
        with pytest.raises(cairn.InvalidArgumentError, match="value_capacity"):
            ck.checkpoint(1)
        ck.state["big"] = "small"
        ck.checkpoint(2)


def test_values_missing_at_restart_are_explained(tiers: Tiers) -> None:
    with cairn.Checkpointer("miss", config=tiers.config()) as ck:
        ck.state["x"] = 1
        ck.checkpoint(1)
    with cairn.Checkpointer("miss", config=tiers.config()) as ck:
        with pytest.raises(cairn.MismatchError, match=r"region 2147483647.*values of ck.state"):
            ck.restart(1)


def test_changed_dtype_or_shape_is_a_mismatch_naming_the_region(tiers: Tiers) -> None:
    with cairn.Checkpointer("shape", config=tiers.config()) as ck:
        ck.protect(1, np.zeros(100))
        ck.protect(2, np.zeros(10, dtype=np.int32))
        ck.checkpoint(1)
    with cairn.Checkpointer("shape", config=tiers.config()) as ck:
        ck.protect(1, np.zeros(100, dtype=np.float32))
        ck.protect(2, np.zeros(10, dtype=np.int32))
        with pytest.raises(cairn.MismatchError, match=r"region 1 was checkpointed as 100 x double but is protected now as 100 x float"):
            ck.resume()
        ck.protect(1, np.zeros(101))
        with pytest.raises(cairn.MismatchError, match=r"region 1 .*100 x double.*101 x double"):
            ck.resume()
        ck.protect(1, np.zeros(100))
        ck.protect(3, np.zeros(1))
        with pytest.raises(cairn.MismatchError, match="region 3 is protected now but is not in the checkpoint"):
            ck.resume()
        ck.unprotect(3)
        assert ck.resume() == 1


def test_steps_resumes_after_the_last_checkpoint(tiers: Tiers) -> None:
    cfg = tiers.config()
    done = []
    with cairn.Checkpointer("loop", config=cfg) as ck:
        total = ck.protect(1, np.zeros(1))
        for i in ck.steps(range(10), every=3):
            total += i
            done.append(i)
            if i == 7:
                break  # a break writes nothing: the last checkpoint is v6 (after item 5)
    assert done == list(range(8))
    with cairn.Checkpointer("loop", config=cfg) as ck:
        total = ck.protect(1, np.zeros(1))
        items = list(ck.steps(range(10), every=3))
        assert ck.restored_version == 6
        assert items == [6, 7, 8, 9]
        assert total[0] == sum(range(6))
        assert ck.test(9) == "protected" and ck.test(10) is None
    with cairn.Checkpointer("loop", config=cfg) as ck:
        ck.protect(1, np.zeros(1))
        assert list(ck.steps(range(10), every=3)) == [9]  # v9 was the last checkpoint


def test_steps_follows_the_policy_and_stops_when_told(tiers: Tiers) -> None:
    cfg = tiers.config(checkpoint__every=4)
    with cairn.Checkpointer("policy", config=cfg) as ck:
        ck.protect(1, np.zeros(1))
        for _ in ck.steps(range(10)):
            pass
        assert ck.stats()["checkpoints"] == 2  # after items 4 and 8
        assert ck.test(8) is not None and ck.test(4) is not None
    # The halt file makes should_exit() true: a last checkpoint, then ExitRequested.
    tiers.global_.joinpath("cairn.halt").write_text("")
    with pytest.raises(cairn.ExitRequested) as exc:
        with cairn.Checkpointer("halt", config=tiers.config()) as ck:
            ck.protect(1, np.zeros(1))
            for _ in ck.steps(range(100), every=50):
                pass
    assert exc.value.version == 1 and exc.value.code == 0
    assert isinstance(exc.value, SystemExit)
    assert ck.closed
    # The with block finalized: the last checkpoint is durable.
    tiers.global_.joinpath("cairn.halt").unlink()
    with cairn.Checkpointer("halt", config=tiers.config()) as ck:
        assert ck.test(1) == "durable"


def test_steps_misuse_is_refused(tiers: Tiers) -> None:
    with cairn.Checkpointer("misuse", config=tiers.config()) as ck:
        ck.protect(0, np.zeros(1, dtype=np.int64))
        with pytest.raises(cairn.InvalidArgumentError, match="already protected"):
            ck.steps(range(3), id=0)
        with pytest.raises(cairn.InvalidArgumentError, match="every"):
            ck.steps(range(3), every=-1)
        list(ck.steps(range(3), every=1))
        with pytest.raises(cairn.StateError, match="once"):
            ck.steps(range(3))
    with cairn.Checkpointer("misuse", config=tiers.config()) as ck:
        ck.protect(0, np.zeros(1, dtype=np.int64))
        with pytest.raises(cairn.MismatchError, match="step counter of ck.steps"):
            ck.resume()


def test_explicit_calls(tiers: Tiers) -> None:
    with cairn.Checkpointer("calls", config=tiers.config(checkpoint__every=2)) as ck:
        assert (ck.rank, ck.size, ck.node, ck.nodes) == (0, 1, 0, 1)
        assert ck.resume() is None and ck.restart_test() is None
        ck.protect(1, np.zeros(3))
        assert [ck.checkpoint_if_due(v) for v in range(1, 5)] == [False, True, False, True]
        assert ck.restart_test() == 4
        assert ck.should_exit() is False
        assert ck.test(4) == "protected"
        ck.wait(4)
        assert ck.test(4) == "durable"
        stats = ck.stats()
        assert stats["checkpoints"] == 2 and stats["flushes"] == 1 and stats["restored_version"] is None
        with pytest.raises(cairn.InvalidArgumentError, match="not newer"):
            ck.checkpoint(3)
        with pytest.raises(cairn.InvalidArgumentError, match="negative"):
            ck.checkpoint(-1)
        with pytest.raises(cairn.NotFoundError):
            ck.restart(99)
        assert "rank 0 of 1" in repr(ck)
    assert ck.closed and "closed" in repr(ck)
    with pytest.raises(cairn.StateError, match="closed"):
        ck.checkpoint(5)
    ck.close()  # a second close does nothing


def test_an_exception_releases_without_finalizing(tiers: Tiers) -> None:
    with pytest.raises(KeyError):
        with cairn.Checkpointer("exc", config=tiers.config()) as ck:
            ck.protect(1, np.zeros(3))
            ck.checkpoint(1)
            raise KeyError("boom")
    assert ck.closed
    with cairn.Checkpointer("exc", config=tiers.config()) as ck:
        # Not finalized, so not flushed; still restart-eligible on the node-local tier.
        assert ck.test(1) == "protected"
        ck.protect(1, np.zeros(3))
        assert ck.resume() == 1


def test_config_arguments(tiers: Tiers, tmp_path: Path) -> None:
    toml = tmp_path / "cairn.toml"
    toml.write_text(f'[tiers]\nlocal = "{tiers.local}"\nglobal = "{tiers.global_}"\n[cache]\nkeep = 2\n')
    with cairn.Checkpointer("cfg", config=toml) as ck:
        ck.protect(1, np.zeros(1))
        ck.checkpoint(1)
    with cairn.Checkpointer("cfg", config=str(toml)) as ck:
        assert ck.restart_test() == 1
    with cairn.Checkpointer("cfg", config=tiers.config(checkpoint__finalize=False, tiers__fsync_global=True)):
        pass
    with pytest.raises(cairn.ConfigError, match="unknown"):
        cairn.Checkpointer("cfg", config={"cache.nonsense": 1})
    with pytest.raises(cairn.ConfigError, match="cannot read config file"):
        cairn.Checkpointer("cfg", config=tmp_path / "missing.toml")
    with pytest.raises(TypeError, match="config must be"):
        cairn.Checkpointer("cfg", config=42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="name must be a str"):
        cairn.Checkpointer(b"cfg")  # type: ignore[arg-type]
    if importlib.util.find_spec("mpi4py") is None:
        with pytest.raises(cairn.InvalidArgumentError, match="comm= needs mpi4py"):
            cairn.Checkpointer("cfg", comm=object(), config=tiers.config())
    else:
        with pytest.raises(TypeError, match="mpi4py communicator"):
            cairn.Checkpointer("cfg", comm=object(), config=tiers.config())
    with pytest.raises(cairn.InvalidArgumentError, match='checkpoint name: "bad/name"'):
        cairn.Checkpointer("bad/name", config=tiers.config())


def test_the_gil_is_released_during_io(tiers: Tiers) -> None:
    ticks = 0
    stop = threading.Event()

    def spin() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            time.sleep(0)  # lets the main thread have the GIL back whenever it wants it

    old = sys.getswitchinterval()
    with cairn.Checkpointer("gil", config=tiers.config()) as ck:
        ck.protect(1, np.random.default_rng(0).random(2 << 20))  # 16 MiB
        t = threading.Thread(target=spin)
        t.start()
        try:
            # The spinning thread can run during checkpoint() only if the GIL is let go: the
            # main thread, once it has the GIL, is not forced to give it up within 100 s. A
            # checkpoint may end before the woken thread is scheduled on a busy machine, so
            # up to 20 are taken; with the GIL held throughout, none lets it run.
            sys.setswitchinterval(100)
            during = 0
            for version in range(1, 21):
                before = ticks
                ck.checkpoint(version)
                during = ticks - before
                if during > 0:
                    break
        finally:
            sys.setswitchinterval(old)
            stop.set()
            t.join()
    assert during > 0


def test_killed_process_restarts_bit_identically(tiers: Tiers, tmp_path: Path) -> None:
    args = ["--steps", "30", "--every", "5"]
    clean = Tiers(tmp_path / "clean")
    clean.root.mkdir()
    run(PROGS / "loop.py", [str(tmp_path / "clean")] + args, clean).ok()
    killed = run_and_kill(PROGS / "loop.py", [str(tmp_path / "killed")] + args + ["--sleep-ms", "60"], tiers, None, "checkpoint v", 2)
    assert killed.returncode == -9, killed.show()
    again = run(PROGS / "loop.py", [str(tmp_path / "killed")] + args, tiers).ok()
    assert "restored v" in again.stdout, again.show()
    want = np.load(tmp_path / "clean.rank0.npz")
    got = np.load(tmp_path / "killed.rank0.npz")
    assert sorted(want.files) == sorted(got.files)
    for k in want.files:
        assert want[k].tobytes() == got[k].tobytes(), k


def test_threads_share_a_checkpointer_without_deadlock(tiers: Tiers) -> None:
    errors: list[BaseException] = []
    with cairn.Checkpointer("threads", config=tiers.config()) as ck:
        ck.protect(1, np.random.default_rng(1).random(1 << 20))

        def poll() -> None:
            try:
                for _ in range(50):
                    ck.restart_test()
                    ck.stats()
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=poll) for _ in range(3)]
        for t in threads:
            t.start()
        for v in range(1, 6):
            ck.checkpoint(v)  # waits for the lock without the GIL, as the others do
        for t in threads:
            t.join(timeout=60)
            assert not t.is_alive()
        assert not errors
        assert ck.restart_test() == 5
