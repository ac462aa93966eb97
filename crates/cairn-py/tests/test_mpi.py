"""MPI jobs of 4 ranks on 2 simulated nodes: the Python examples against the C ones, ranks
killed with SIGKILL and restarted bit for bit (also after a lost node, from partner copies),
mismatches reported on every rank, sub-communicators, and MPI finalized too early."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import EXAMPLES, PROGS, Tiers, run, run_and_kill

pytestmark = [pytest.mark.mpi, pytest.mark.usefixtures("mpi")]

RANKS = 4


@pytest.fixture
def tiers(tmp_path: Path) -> Tiers:
    return Tiers(tmp_path, sim_nodes=2)


def test_python_examples_print_what_the_c_examples_print(tiers: Tiers, c_programs: dict[str, Path]) -> None:
    for name, args in (("heat2d", ["--n", "64", "--steps", "40", "--every", "10"]),
                       ("nbody", ["--bodies", "128", "--steps", "12", "--every", "4"])):
        py = run(EXAMPLES / f"{name}.py", args + ["--name", f"{name}-py"], tiers, RANKS).ok()
        c = run(c_programs[name], args + ["--name", f"{name}-c"], tiers, RANKS).ok()
        assert py.line(f"{name}: final checksum") == c.line(f"{name}: final checksum")
        checkpoints = [ln.split(" checkpoint ")[0] for ln in py.stdout.splitlines() if " checkpoint v" in ln]
        assert checkpoints == [ln.split(" checkpoint ")[0] for ln in c.stdout.splitlines() if " checkpoint v" in ln]
        assert py.line(f"{name}: steps").split(" checkpoint-time")[0] == c.line(f"{name}: steps").split(" checkpoint-time")[0]


def _loop(tiers: Tiers, out: Path, *extra: str) -> list[str]:
    return [str(out), "--mpi", "--steps", "32", "--every", "4", *extra]


def _same_arrays(a: Path, b: Path) -> None:
    for r in range(RANKS):
        want, got = np.load(f"{a}.rank{r}.npz"), np.load(f"{b}.rank{r}.npz")
        assert sorted(want.files) == sorted(got.files)
        for k in want.files:
            assert want[k].tobytes() == got[k].tobytes(), f"rank {r} {k}"


def test_killed_rank_restarts_bit_identically(tiers: Tiers, tmp_path: Path) -> None:
    clean = Tiers(tmp_path / "clean", sim_nodes=2)
    clean.root.mkdir()
    run(PROGS / "loop.py", _loop(clean, tmp_path / "clean"), clean, RANKS).ok()
    killed = run_and_kill(PROGS / "loop.py", _loop(tiers, tmp_path / "killed", "--sleep-ms", "60"), tiers, RANKS, "checkpoint v", 2)
    assert killed.returncode != 0, killed.show()
    again = run(PROGS / "loop.py", _loop(tiers, tmp_path / "killed"), tiers, RANKS).ok()
    assert again.stdout.count("restored v") == RANKS, again.show()
    _same_arrays(tmp_path / "clean", tmp_path / "killed")


def test_lost_node_is_rebuilt_from_partner_copies(tiers: Tiers, tmp_path: Path) -> None:
    tiers.extra["CAIRN_REDUNDANCY_SCHEME"] = "partner"
    tiers.extra["CAIRN_CHECKPOINT_FINALIZE"] = "false"
    clean = Tiers(tmp_path / "clean", sim_nodes=2)
    clean.root.mkdir()
    run(PROGS / "loop.py", _loop(clean, tmp_path / "clean"), clean, RANKS).ok()
    killed = run_and_kill(PROGS / "loop.py", _loop(tiers, tmp_path / "killed", "--sleep-ms", "60"), tiers, RANKS, "checkpoint v", 2)
    assert killed.returncode != 0, killed.show()
    node1 = tiers.local / "node1"
    assert node1.is_dir(), sorted(p.name for p in tiers.local.iterdir())
    shutil.rmtree(node1)
    again = run(PROGS / "loop.py", _loop(tiers, tmp_path / "killed"), tiers, RANKS).ok()
    assert again.stdout.count("restored v") == RANKS, again.show()
    _same_arrays(tmp_path / "clean", tmp_path / "killed")


def test_changed_dtype_is_a_mismatch_on_every_rank(tiers: Tiers) -> None:
    run(PROGS / "mpi_cases.py", ["mismatch-write"], tiers, RANKS).ok()
    out = run(PROGS / "mpi_cases.py", ["mismatch-read"], tiers, RANKS).ok()
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("mismatch: rank")]
    assert len(lines) == RANKS, out.show()
    # Every rank fails; at least one names the region and both types, the others may
    # report that another rank's regions did not fit.
    assert any("MismatchError: " in ln and "region 1 was checkpointed as" in ln and "x double but is protected now as" in ln and "x float" in ln for ln in lines), out.show()
    assert all("MismatchError" in ln or "PeerError" in ln for ln in lines), out.show()


def test_checkpointer_over_a_split_communicator(tiers: Tiers) -> None:
    out = run(PROGS / "mpi_cases.py", ["split"], tiers, RANKS).ok()
    assert sorted(ln for ln in out.stdout.splitlines() if ln.startswith("split:")) == [f"split: rank {r} ok 2" for r in range(RANKS)]


def test_mpi_finalized_before_close_is_an_error_not_an_abort(tiers: Tiers) -> None:
    out = run(PROGS / "mpi_cases.py", ["finalized"], tiers, RANKS).ok()
    assert out.stdout.count("finalized: ok") == RANKS, out.show()


def test_cairn_never_initialises_mpi_itself(tiers: Tiers) -> None:
    out = run(PROGS / "mpi_cases.py", ["uninitialised"], tiers, 1).ok()
    assert "uninitialised: ok" in out.stdout, out.show()
