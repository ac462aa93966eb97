"""Tests of cairn/torch.py, run only where PyTorch is installed (the suite never installs it)."""

from __future__ import annotations

import importlib.util
import sys

import pytest

import cairn
from conftest import Tiers

HAVE_TORCH = importlib.util.find_spec("torch") is not None


@pytest.mark.skipif(HAVE_TORCH, reason="PyTorch is installed")
def test_without_torch_the_helper_is_a_clear_import_error() -> None:
    sys.modules.pop("cairn.torch", None)
    with pytest.raises(ImportError, match=r"cairn.torch needs PyTorch \(pip install torch\)"):
        import cairn.torch  # noqa: F401


needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="PyTorch is not installed")
if HAVE_TORCH:
    import torch

    import cairn.torch


def _model() -> "torch.nn.Module":  # noqa: F821
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(), torch.nn.Linear(16, 2))


def _train(model: "torch.nn.Module", opt: "torch.optim.Optimizer", steps: range) -> None:
    for step in steps:
        g = torch.Generator().manual_seed(step)
        x, y = torch.randn(32, 8, generator=g), torch.randn(32, 2, generator=g)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()


@needs_torch
def test_module_and_optimizer_state_restore_in_place(tiers: Tiers) -> None:
    # Uninterrupted: 6 steps.
    m0 = _model()
    o0 = torch.optim.Adam(m0.parameters(), lr=1e-2)
    with cairn.Checkpointer("plain", config=tiers.config()) as ck:
        cairn.torch.protect(ck, m0, o0)
        _train(m0, o0, range(6))
    # Interrupted after 3 steps (checkpoint v3), then restarted in a fresh model.
    m1 = _model()
    o1 = torch.optim.Adam(m1.parameters(), lr=1e-2)
    with cairn.Checkpointer("train", config=tiers.config()) as ck:
        cairn.torch.protect(ck, m1, o1)
        _train(m1, o1, range(3))
        ck.checkpoint(3)
    m2 = _model()
    o2 = torch.optim.Adam(m2.parameters(), lr=1e-3)  # the saved learning rate comes back
    with cairn.Checkpointer("train", config=tiers.config()) as ck:
        cairn.torch.protect(ck, m2, o2)
        assert ck.resume() == 3
        assert o2.param_groups[0]["lr"] == 1e-2
        _train(m2, o2, range(3, 6))
    for a, b in zip(m0.state_dict().values(), m2.state_dict().values()):
        assert torch.equal(a, b)


@needs_torch
def test_tensors_off_the_cpu_are_refused(tiers: Tiers) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    with cairn.Checkpointer("gpu", config=tiers.config()) as ck:
        with pytest.raises(cairn.InvalidArgumentError, match="CPU"):
            cairn.torch.protect(ck, torch.nn.Linear(2, 2).cuda())
