"""Calling tdsl kernels from other code: NumPy conveniences and PyTorch custom operators.

* ``tdsl.integrations.numpy`` — which arguments of a built module are inputs and which are
  outputs (``signature``), and calling a module with its inputs only, the outputs allocated
  and returned (``call``, ``allocating``).
* ``tdsl.integrations.torch`` — ``to_torch(f)``: a built module as a ``torch.library`` custom
  operator (zero-copy through DLPack, shapes checked, outputs allocated, autograd with a
  backward kernel written in tdsl, opaque under ``torch.compile``).

Nothing here is imported by ``import tdsl``; PyTorch is imported only by ``to_torch``.
"""
from __future__ import annotations

from typing import Any

from .numpy import ParamInfo, allocate_outputs, allocating, call, output_shapes, signature

__all__ = ["ParamInfo", "signature", "output_shapes", "allocate_outputs", "call", "allocating",
           "to_torch", "TorchOp"]


def __getattr__(name: str) -> Any:
    if name in ("to_torch", "TorchOp"):
        from . import torch as _torch
        return getattr(_torch, name)
    raise AttributeError(f"module 'tdsl.integrations' has no attribute '{name}'")
