"""The file API (cairn/checkpointer.py: output, route_file, restart_files ...): files the
program writes itself, stored as its checkpoint; in one process, and as 4-rank MPI jobs on 2
simulated nodes killed with SIGKILL, with a node's storage deleted, and with a rank that
rejects its files."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import cairn
from conftest import PROGS, Tiers, run, run_and_kill


def _write(ck: cairn.Checkpointer, v: int, payload: bytes) -> cairn.FileSet:
    with ck.output(v, label=f"ds{v}") as out:
        Path(out.route("data/a.bin")).write_bytes(payload)
        Path(out.route("b.txt")).write_text(f"version {v}\n")
    return out


def test_files_round_trip_with_label_and_names(tiers: Tiers) -> None:
    with cairn.Checkpointer("f", config=tiers.config()) as ck:
        assert ck.route_file("x/y") == "x/y"  # outside output and restart
        for v in (1, 2):
            out = _write(ck, v, bytes(range(256)) * v)
            assert out.kept
    with cairn.Checkpointer("f", config=tiers.config()) as ck:
        assert ck.have_restart() == 2
        got = ck.start_restart()
        assert got is not None and got.version == 2 and got.label == "ds2"
        assert got.files == ["data/a.bin", "b.txt"]
        assert Path(got.route("data/a.bin")).read_bytes() == bytes(range(256)) * 2
        assert Path(got.route("b.txt")).read_text() == "version 2\n"
        with pytest.raises(cairn.NotFoundError, match="b.txt"):
            got.route("missing")
        assert ck.complete_restart(True)


def test_an_exception_in_the_output_block_drops_the_dataset(tiers: Tiers) -> None:
    with cairn.Checkpointer("f", config=tiers.config()) as ck:
        _write(ck, 1, b"one")
        with pytest.raises(RuntimeError, match="disk full"):
            with ck.output(2) as out:
                Path(out.route("a")).write_bytes(b"half")
                raise RuntimeError("disk full")
        assert out.kept is False
        with ck.output(3) as out:
            out.route("never-written")
        assert out.kept is False
        assert ck.have_restart() == 1


def test_rejected_files_fall_back_and_regions_travel_with_files(tiers: Tiers) -> None:
    cfg = tiers.config(cache__keep=5)
    with cairn.Checkpointer("f", config=cfg) as ck:
        arr = ck.protect(0, np.zeros(10))
        ck.state["note"] = "x"
        for v in (1, 2, 3):
            arr[:] = v
            ck.state["note"] = f"v{v}"
            with ck.output(v, regions=True) as out:
                Path(out.route("f")).write_text(str(v))
    with cairn.Checkpointer("f", config=cfg) as ck:
        arr = ck.protect(0, np.zeros(10))
        ck.state["note"] = None
        offered = []

        def read(got: cairn.RestoredFiles) -> bool:
            offered.append(got.version)
            if got.version == 3:
                raise ValueError("unreadable")  # counted as invalid, with a warning
            return Path(got.route("f")).read_text() == str(got.version)

        with pytest.warns(RuntimeWarning, match="unreadable"):
            got = ck.restart_files(read, regions=True)
        assert got is not None and got.version == 2 and offered == [3, 2]
        assert (arr == 2).all() and ck.state["note"] == "v2"
        ck.drop(2)
        ck.drop(1)
        assert ck.have_restart() is None
        ck.delete(3)
        ck.delete(2)
        assert ck.restart_test() == 1


def test_an_output_dataset_lands_at_its_path(tiers: Tiers, tmp_path: Path) -> None:
    dest = tmp_path / "results" / "step4.txt"
    with cairn.Checkpointer("viz", config=tiers.config()) as ck:
        with ck.output(4, checkpoint=False, output=True) as out:
            Path(out.route(str(dest))).write_text("four")
        assert out.kept and dest.read_text() == "four"
        assert ck.have_restart() is None


RANKS = 4


@pytest.mark.mpi
@pytest.mark.usefixtures("mpi")
def test_mpi_files_survive_kill_lost_node_and_a_rejecting_rank(tmp_path: Path) -> None:
    args = ["--mpi", "--steps", "40", "--every", "5"]
    clean = Tiers(tmp_path / "clean", sim_nodes=2)
    clean.root.mkdir()
    run(PROGS / "files.py", [str(tmp_path / "clean"), *args], clean, RANKS).ok()

    tiers = Tiers(tmp_path / "t", sim_nodes=2, extra={"CAIRN_REDUNDANCY_SCHEME": "partner"})
    tiers.root.mkdir()
    out = str(tmp_path / "killed")
    killed = run_and_kill(PROGS / "files.py", [out, *args, "--sleep-ms", "40"], tiers, RANKS, "checkpoint v", 3)
    assert killed.returncode != 0, killed.show()
    shutil.rmtree(tiers.local / "node1")
    again = run(PROGS / "files.py", [out, *args], tiers, RANKS).ok()
    assert again.stdout.count("restored v") == RANKS, again.show()
    for r in range(RANKS):
        want = np.load(tmp_path / f"clean.rank{r}.npy")
        assert np.load(f"{out}.rank{r}.npy").tobytes() == want.tobytes(), f"rank {r}"

    # v40 is the newest; rank 2 rejects it, and every rank restarts from v35 instead.
    back = run(PROGS / "files.py", [out, "--mpi", "--steps", "45", "--every", "5", "--reject-rank", "2"], tiers, RANKS).ok()
    assert back.stdout.count("rejected v40") == 1, back.show()
    assert back.stdout.count("restored v35") == RANKS, back.show()
