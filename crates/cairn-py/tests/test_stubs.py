"""The stubs (`_cairn.pyi`) and inline types against the installed module: names and
signatures, by introspection, and by mypy's stubtest when mypy is installed."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import cairn
from cairn import _cairn

STUB = Path(cairn.__file__).with_name("_cairn.pyi")


def _stub_tree() -> ast.Module:
    assert STUB.exists(), f"{STUB} is not installed with the package"
    return ast.parse(STUB.read_text())


def test_py_typed_is_installed() -> None:
    assert Path(cairn.__file__).with_name("py.typed").exists()


def test_stub_names_match_the_module() -> None:
    tree = _stub_tree()
    stub_names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            stub_names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            stub_names.add(node.target.id)
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            stub_names.add(node.targets[0].id)
    runtime = {n for n in dir(_cairn) if not n.startswith("__") or n in ("__version__", "__all__")}
    assert stub_names == runtime


def test_stub_methods_and_parameters_match_the_engine() -> None:
    (cls,) = [n for n in _stub_tree().body if isinstance(n, ast.ClassDef) and n.name == "Engine"]
    stub = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)}
    runtime = {n for n in dir(_cairn.Engine) if not n.startswith("_")}
    assert set(stub) - {"__new__"} == runtime
    for name, f in stub.items():
        if any(isinstance(d, ast.Name) and d.id == "property" for d in f.decorator_list):
            assert isinstance(inspect.getattr_static(_cairn.Engine, name), type(_cairn.Engine.rank)), name
            continue
        target = _cairn.Engine if name == "__new__" else getattr(_cairn.Engine, name)
        params = [p.name for p in inspect.signature(target).parameters.values() if p.name != "self"]
        stub_params = [a.arg for a in f.args.args][1:]  # without self / cls
        assert params == stub_params, name


@pytest.mark.skipif(sys.version_info < (3, 10), reason="stubtest output differs on old interpreters")
def test_mypy_stubtest(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    args = [
        sys.executable, "-m", "mypy.stubtest", "cairn",
        # [tool.mypy] there: PyTorch, an optional dependency, may be missing.
        "--mypy-config-file", str(Path(__file__).parents[1] / "pyproject.toml"),
    ]
    try:
        import torch  # noqa: F401
    except ImportError:
        # cairn.torch cannot be imported without PyTorch: that is its documented behaviour.
        (tmp_path / "allow.txt").write_text("cairn.torch\n")
        args += ["--allowlist", str(tmp_path / "allow.txt")]
    p = subprocess.run(
        args,
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stdout + p.stderr
