"""Apache TVM v0.19's classic API (``tvm``, ``te``, ``tir``, ``topi``, ``autotvm``,
``auto_scheduler``) as a thin layer over tdsl — not a second compiler.

Run a TVM script unchanged with ``python -m tdsl.compat.tvm script.py``, or add
``import tdsl.compat.tvm.alias`` at its top: ``import tvm`` then resolves here.
Everything computes through ``tdsl.lower``/``tdsl.build``; this package renames,
reorders arguments and wraps results (``NDArray``, ``Device``, ``runtime.Module``).
"""
from __future__ import annotations

import importlib
from typing import Any, Sequence

import tdsl
from tdsl.errors import TDSLError

from . import contrib, nd, runtime, target, te, testing, tir
from .ffi import get_global_func, register_func
from .runtime import Device, NDArray, cl, cpu, cuda, device, gpu
from .target import as_tdsl

TVMError = TDSLError
__version__ = "0.19.0+tdsl"

#: submodules imported on first use (they pull in the autotuner or the operator library)
_LAZY = ("topi", "autotvm", "auto_scheduler", "transform", "ir", "driver", "error")


def _check_binds(binds: Any, where: str) -> None:
    """``binds={tensor: tir.decl_buffer(...)}``: accepted where the buffer describes the
    compact row-major array tdsl passes (``buffer.check_bind``), else a BufferError."""
    from .buffer import check_bind
    for t, buf in dict(binds or {}).items():
        if not isinstance(t, tdsl.Tensor):
            raise TDSLError(f"{where}: binds keys are tensors, got {t!r}")
        check_bind(t, buf, where)


def lower(inputs: Any, args: "Sequence[Any] | None" = None, name: str = "main",
          binds: Any = None, simple_mode: bool = False) -> Any:
    """The loop IR of a schedule (``print`` it): a tdsl ``PrimFunc`` that also answers
    ``mod["main"]`` as TVM's ``IRModule`` does (``tvm.ir.IRModule``)."""
    _check_binds(binds, "tvm.lower")
    if isinstance(inputs, tdsl.PrimFunc):
        return inputs
    from .ir import IRModule
    return IRModule.of(tdsl.lower(inputs, list(args or []), name=name, simple_mode=simple_mode))


def build(inputs: Any, args: "Sequence[Any] | None" = None, target: Any = None,
          target_host: Any = None, name: str = "default_function", binds: Any = None) -> Any:
    """Compile a schedule (or a lowered function) into a callable ``runtime.Module``.

    ``target`` defaults to the ``with tvm.target.Target(...)`` in scope, else ``"llvm"``;
    ``target_host`` must be llvm (tdsl's hosts always are).
    """
    _check_binds(binds, "tvm.build")
    if target_host is not None and "llvm" not in str(target_host):
        raise TDSLError(f"tvm.build: target_host must be llvm, got {target_host}")
    if isinstance(target, dict):   # {"llvm": mod} or {target: mod}: one entry only
        raise TDSLError("tvm.build: a dict of targets is not supported by tdsl.compat")
    tgt = as_tdsl(target)
    mod = tdsl.build(inputs, list(args) if args is not None else None, target=tgt, name=name)
    return runtime.Module(mod)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'tvm' (tdsl.compat) has no attribute {name!r}")


__all__ = ["lower", "build", "te", "tir", "nd", "runtime", "target", "testing", "contrib",
           "device", "cpu", "cuda", "gpu", "cl", "Device", "NDArray", "TVMError",
           "register_func", "get_global_func", *_LAZY]
