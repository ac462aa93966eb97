"""Shared fixtures: private tiers per test, and running programs alone or under mpirun.

The MPI tests start real jobs (``mpirun -n 4``) with two simulated nodes, as the C API's
tests do (crates/cairn-capi/tests/support). They need mpirun and mpi4py; without them they
are skipped, or fail when ``PYCAIRN_REQUIRE_MPI=1`` (test.sh sets it).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[3]
PROGS = Path(__file__).resolve().parent / "progs"
EXAMPLES = REPO / "examples" / "python"
#: How long any one program run may take before the test gives up on it.
TIMEOUT = 180


@pytest.fixture(autouse=True)
def _no_cairn_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests see only the configuration they set, never the caller's CAIRN_* variables."""
    for k in list(os.environ):
        if k.startswith("CAIRN_"):
            monkeypatch.delenv(k)


@dataclass
class Tiers:
    """A node-local and a global tier under one private directory."""

    root: Path
    sim_nodes: int = 0
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def local(self) -> Path:
        return self.root / "local"

    @property
    def global_(self) -> Path:
        return self.root / "global"

    def config(self, **more: object) -> dict[str, object]:
        """The in-process configuration (a mapping for Checkpointer(config=...))."""
        cfg: dict[str, object] = {"tiers.local": str(self.local), "tiers.global": str(self.global_)}
        if self.sim_nodes:
            cfg["topology.sim_nodes"] = self.sim_nodes
        cfg.update({k.replace("__", "."): v for k, v in more.items()})
        return cfg

    def env(self) -> dict[str, str]:
        """The environment of a program run with these tiers."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
        env.update(
            CAIRN_TIERS_LOCAL=str(self.local),
            CAIRN_TIERS_GLOBAL=str(self.global_),
            CAIRN_TOPOLOGY_SIM_NODES=str(self.sim_nodes),
            OMPI_ALLOW_RUN_AS_ROOT="1",
            OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
            # Oversubscribed ranks on two cores: yield instead of spinning in MPI waits.
            OMPI_MCA_mpi_yield_when_idle="1",
            PYTHONUNBUFFERED="1",
        )
        env.update(self.extra)
        return env


@pytest.fixture
def tiers(tmp_path: Path) -> Tiers:
    return Tiers(tmp_path)


def mpi_available() -> str | None:
    """Why MPI jobs cannot run here, or None when they can."""
    if shutil.which("mpirun") is None:
        return "mpirun is not installed (apt-get install openmpi-bin libopenmpi-dev)"
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return "mpi4py is not installed (pip install --no-binary mpi4py mpi4py)"
    return None


@pytest.fixture
def mpi() -> None:
    why = mpi_available()
    if why is not None:
        if os.environ.get("PYCAIRN_REQUIRE_MPI") == "1":
            pytest.fail(why)
        pytest.skip(why)


@dataclass
class Run:
    """A finished program run."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    def show(self) -> str:
        return f"{' '.join(self.args)}: exit {self.returncode}\n--- stdout ---\n{self.stdout}--- stderr ---\n{self.stderr}"

    def ok(self) -> Run:
        assert self.returncode == 0, self.show()
        return self

    def line(self, prefix: str) -> str:
        """The last output line starting with ``prefix``."""
        found = [ln for ln in self.stdout.splitlines() if ln.startswith(prefix)]
        assert found, f"no line starting with {prefix!r}\n{self.show()}"
        return found[-1]


def command(program: Path | str, args: list[str], ranks: int | None) -> list[str]:
    """``python program args``, under ``mpirun -n ranks`` unless ranks is None; a path ending
    in .py runs with this interpreter, anything else is executed."""
    prog = [sys.executable, str(program)] if str(program).endswith(".py") else [str(program)]
    if ranks is None:
        return prog + args
    return ["mpirun", "--oversubscribe", "--bind-to", "none", "-n", str(ranks)] + prog + args


def run(program: Path | str, args: list[str], tiers: Tiers, ranks: int | None = None) -> Run:
    cmd = command(program, args, ranks)
    p = subprocess.run(cmd, env=tiers.env(), cwd=tiers.root, capture_output=True, text=True, timeout=TIMEOUT)
    return Run(cmd, p.returncode, p.stdout, p.stderr)


def run_and_kill(program: Path | str, args: list[str], tiers: Tiers, ranks: int | None, after: str, times: int) -> Run:
    """Start the program and SIGKILL it (with ranks: one rank process, then the job) once
    ``times`` output lines contain ``after``."""
    cmd = command(program, args, ranks)
    p = subprocess.Popen(cmd, env=tiers.env(), cwd=tiers.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # A program that hangs without printing is killed, so reading its output ends.
    guard = threading.Timer(TIMEOUT, p.kill)
    guard.start()
    seen, out = 0, []
    assert p.stdout is not None
    try:
        for line in p.stdout:
            out.append(line)
            seen += after in line
            if seen >= times:
                break
        assert seen >= times, "".join(out)
        victims = rank_pids(p.pid) if ranks is not None else [p.pid]
        assert victims, f"no rank processes under mpirun {p.pid}"
        try:
            os.kill(victims[-1], signal.SIGKILL)
        except ProcessLookupError:
            pass  # it ended first; the caller sees its exit status
        rest, err = p.communicate(timeout=60)
    finally:
        guard.cancel()
        if p.poll() is None:
            p.kill()
            p.communicate()
    return Run(cmd, p.returncode, "".join(out) + rest, err)


def rank_pids(mpirun: int) -> list[int]:
    """The rank processes under an mpirun (its direct children), in pid order."""
    kids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        # The command name is in parentheses and may contain spaces; the ppid follows it.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == mpirun:
            kids.append(int(d.name))
    return sorted(kids)


@pytest.fixture(scope="session")
def c_programs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """examples/heat2d.c and nbody.c built with mpicc against libcairn.so (from PYCAIRN_LIBDIR,
    default target/release of the repository)."""
    libdir = Path(os.environ.get("PYCAIRN_LIBDIR", REPO / "target" / "release"))
    if not (libdir / "libcairn.so").exists():
        pytest.fail(f"no libcairn.so in {libdir}: run cargo build --release -p cairn-capi (test.sh does)")
    if shutil.which("mpicc") is None:
        pytest.fail("mpicc is not installed (apt-get install libopenmpi-dev)")
    out = tmp_path_factory.mktemp("cprogs")
    built = {}
    for name, extra in (("heat2d", []), ("nbody", ["-lm"])):
        exe = out / name
        cmd = ["mpicc", "-O2", "-std=c11", "-o", str(exe), str(REPO / "examples" / f"{name}.c"),
               "-I", str(REPO / "crates" / "cairn-capi" / "include"), "-L", str(libdir), "-lcairn",
               f"-Wl,-rpath,{libdir}"] + extra
        p = subprocess.run(cmd, capture_output=True, text=True)
        assert p.returncode == 0, f"{' '.join(cmd)}\n{p.stdout}{p.stderr}"
        built[name] = exe
    yield built
