"""A checkpoint written from Python restores into C and the reverse: examples/heat2d.c and
examples/python/heat2d.py protect the same regions (0: int64 steps done, 1: float64 field)
and checkpoint with version = step. Each run below is killed with SIGKILL after two
checkpoints and finished by the other language, under mpirun with 4 ranks on 2 simulated
nodes; the final checksum must be that of an uninterrupted run. The CLI lists and verifies
checkpoints written from Python."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import cairn
from conftest import EXAMPLES, REPO, Tiers, run, run_and_kill


RANKS = 4
ARGS = ["--n", "64", "--steps", "60", "--every", "10"]


@pytest.fixture
def tiers(tmp_path: Path) -> Tiers:
    return Tiers(tmp_path, sim_nodes=2)


def test_the_cli_lists_and_verifies_python_checkpoints(tmp_path: Path) -> None:
    cli = Path(os.environ.get("PYCAIRN_LIBDIR", REPO / "target" / "release")) / "cairn"
    if not cli.exists():
        pytest.fail(f"no cairn binary at {cli}: run cargo build --release -p cairn-cli (test.sh does)")
    tiers = Tiers(tmp_path)
    with cairn.Checkpointer("from-python", config=tiers.config()) as ck:
        ck.protect(0, np.zeros(1, dtype=np.int64))
        ck.protect(1, np.arange(1000.0))
        ck.checkpoint(7)
    env = tiers.env()
    listed = subprocess.run([str(cli), "list"], env=env, capture_output=True, text=True)
    assert listed.returncode == 0 and "from-python" in listed.stdout, listed.stdout + listed.stderr
    checked = subprocess.run([str(cli), "verify", "from-python", "7"], env=env, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.fixture
def programs(c_programs: dict[str, Path]) -> dict[str, Path]:
    return {"c": c_programs["heat2d"], "python": EXAMPLES / "heat2d.py"}


@pytest.mark.mpi
@pytest.mark.usefixtures("mpi")
@pytest.mark.parametrize("writer, reader", [("python", "c"), ("c", "python")])
def test_killed_run_finishes_in_the_other_language(tiers: Tiers, programs: dict[str, Path], writer: str, reader: str) -> None:
    want = run(programs["c"], ARGS + ["--name", "clean"], tiers, RANKS).ok().line("heat2d: final checksum")
    killed = run_and_kill(programs[writer], ARGS + ["--name", "x", "--sleep-ms", "40"], tiers, RANKS, "checkpoint v", 2)
    assert killed.returncode != 0, killed.show()
    assert "final checksum" not in killed.stdout
    done = run(programs[reader], ARGS + ["--name", "x"], tiers, RANKS).ok()
    assert "heat2d: restarted from checkpoint v" in done.stdout, done.show()
    assert done.line("heat2d: final checksum") == want
