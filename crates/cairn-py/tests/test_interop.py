"""A checkpoint written from Python restores into C and the reverse: examples/heat2d.c and
examples/python/heat2d.py protect the same regions (0: int64 steps done, 1: float64 field)
and checkpoint with version = step. Each run below is killed with SIGKILL after two
checkpoints and finished by the other language, under mpirun with 4 ranks on 2 simulated
nodes; the final checksum must be that of an uninterrupted run."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import EXAMPLES, Tiers, run, run_and_kill

pytestmark = [pytest.mark.mpi, pytest.mark.usefixtures("mpi")]

RANKS = 4
ARGS = ["--n", "64", "--steps", "60", "--every", "10"]


@pytest.fixture
def tiers(tmp_path: Path) -> Tiers:
    return Tiers(tmp_path, sim_nodes=2)


@pytest.fixture
def programs(c_programs: dict[str, Path]) -> dict[str, Path]:
    return {"c": c_programs["heat2d"], "python": EXAMPLES / "heat2d.py"}


@pytest.mark.parametrize("writer, reader", [("python", "c"), ("c", "python")])
def test_killed_run_finishes_in_the_other_language(tiers: Tiers, programs: dict[str, Path], writer: str, reader: str) -> None:
    want = run(programs["c"], ARGS + ["--name", "clean"], tiers, RANKS).ok().line("heat2d: final checksum")
    killed = run_and_kill(programs[writer], ARGS + ["--name", "x", "--sleep-ms", "30"], tiers, RANKS, "checkpoint v", 2)
    assert killed.returncode != 0, killed.show()
    assert "final checksum" not in killed.stdout
    done = run(programs[reader], ARGS + ["--name", "x"], tiers, RANKS).ok()
    assert "heat2d: restarted from checkpoint v" in done.stdout, done.show()
    assert done.line("heat2d: final checksum") == want
