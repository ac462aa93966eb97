"""PyTorch helper: protect a module's and an optimizer's state in place.

::

    import cairn, cairn.torch

    with cairn.Checkpointer("train", comm) as ck:
        cairn.torch.protect(ck, model, optimizer)
        for epoch in ck.steps(range(epochs), every=1):
            train_one_epoch(model, optimizer)

Every tensor of ``module.state_dict()`` and of the optimizer's per-parameter state is
protected as a region, without copying: checkpoints read the tensors' memory and a restart
writes into it. Tensors must be on the CPU and contiguous. Types Cairn has no dtype for
(float16, bfloat16, bool, complex) are protected as their bytes. The optimizer's
hyper-parameters (``param_groups`` without the parameters) and any non-tensor state go into
``ck.state`` and are put back after a restart.

Optimizers create their state on their first step. So that a fresh run and a restarted one
protect the same tensors, :func:`protect` creates missing state first: one step with zero
gradients, after which the parameters are put back and the new state tensors are zeroed,
which is the state Adam, AdamW, RMSprop and SGD (momentum without dampening) start from.
For an optimizer whose fresh state is not zeros, take one real step before protecting, in
every run alike.

Importing this module without PyTorch installed raises ImportError.
"""

from __future__ import annotations

from typing import Any

try:
    import torch as _torch
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "cairn.torch needs PyTorch (pip install torch); the rest of cairn works without it"
    ) from e

from .checkpointer import Checkpointer
from .errors import InvalidArgumentError

__all__ = ["protect"]

# Tensor dtypes protected under their own Cairn dtype; all others as bytes.
_NATIVE = {
    _torch.float32,
    _torch.float64,
    _torch.int8,
    _torch.int16,
    _torch.int32,
    _torch.int64,
    _torch.uint8,
}


def _buffer(name: str, t: _torch.Tensor) -> Any:
    """A numpy view sharing ``t``'s memory."""
    if t.device.type != "cpu":
        raise InvalidArgumentError(f"{name} is on {t.device}; cairn.torch protects CPU tensors (move the model with .cpu())")
    if not t.is_contiguous():
        raise InvalidArgumentError(f"{name} is not contiguous")
    t = t.detach()
    if t.dtype not in _NATIVE:
        t = t.reshape(-1).view(_torch.uint8) if t.dim() > 0 else t.reshape(1).view(_torch.uint8)
    return t.numpy()


def _materialize(optimizer: _torch.optim.Optimizer) -> None:
    """Create the optimizer's missing per-parameter state (see the module documentation)."""
    params = [p for g in optimizer.param_groups for p in g["params"] if p.requires_grad]
    if all(p in optimizer.state and optimizer.state[p] for p in params):
        return
    saved = [(p, p.detach().clone(), p.grad) for p in params]
    had = {p for p in params if p in optimizer.state and optimizer.state[p]}
    with _torch.no_grad():
        for p in params:
            p.grad = _torch.zeros_like(p)
        optimizer.step()
        for p, data, grad in saved:
            p.copy_(data)
            p.grad = grad
        for p in params:
            if p not in had:
                for value in optimizer.state[p].values():
                    if isinstance(value, _torch.Tensor):
                        value.zero_()


def protect(
    ck: Checkpointer,
    module: _torch.nn.Module | None = None,
    optimizer: _torch.optim.Optimizer | None = None,
    *,
    first_id: int = 1000,
) -> int:
    """Protect ``module``'s and ``optimizer``'s state in ``ck`` under ids from ``first_id``.

    Call it before :meth:`Checkpointer.steps` or :meth:`Checkpointer.resume`, with the same
    model and optimizer in every run. Returns the next free id.
    """
    next_id = first_id
    if module is not None:
        for name, t in module.state_dict().items():
            if isinstance(t, _torch.Tensor):
                ck.protect(next_id, _buffer(f"module tensor {name!r}", t))
                next_id += 1
    if optimizer is not None:
        _materialize(optimizer)
        # Parameters in param_groups order, as state_dict() numbers them.
        params = [p for g in optimizer.param_groups for p in g["params"]]
        extra: dict[tuple[int, str], Any] = {}
        for i, p in enumerate(params):
            for key, value in sorted(optimizer.state.get(p, {}).items()):
                if isinstance(value, _torch.Tensor):
                    ck.protect(next_id, _buffer(f"optimizer state {key!r} of parameter {i}", value))
                    next_id += 1
                else:
                    extra[(i, key)] = value
        state_key = f"cairn.torch.optimizer.{first_id}"
        groups = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
        ck.state[state_key] = {"param_groups": groups, "extra": extra}

        def put_back() -> None:
            saved = ck.state.get(state_key)
            if saved is None:
                return
            for group, values in zip(optimizer.param_groups, saved["param_groups"]):
                group.update(values)
            for (i, key), value in saved["extra"].items():
                optimizer.state[params[i]][key] = value

        ck._after_restart.append(put_back)
    return next_id
