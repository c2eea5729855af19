"""``tvm.register_func`` / ``tvm.get_global_func``: packed functions over tdsl's table.

A function registered here is called by extern stages (``tir.call_packed``) with its
buffers as ``NDArray``s sharing the stage's memory (TVM passes DLTensors), so
``y.copyfrom(...)`` or ``x.copyto(y)`` write the stage's output.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

import tdsl

from .runtime import NDArray


def _with_ndarrays(f: Callable) -> Callable:
    def call(*args: Any) -> Any:
        return f(*[NDArray(a) if isinstance(a, np.ndarray) else a for a in args])
    call.__wrapped__ = f   # type: ignore[attr-defined]
    call.__name__ = getattr(f, "__name__", "packed")
    return call


def register_func(func_name: Any, f: "Callable | None" = None, override: bool = False) -> Any:
    """Register a Python function as a packed function (a decorator without ``f``)."""
    if callable(func_name) and f is None:
        return register_func(func_name.__name__, func_name, override)

    def do(func: Callable) -> Callable:
        tdsl.register_func(func_name, _with_ndarrays(func), override=override)
        return func
    return do(f) if f is not None else do


def get_global_func(name: str, allow_missing: bool = False) -> "Callable | None":
    """The packed function registered as ``name`` (None if missing and ``allow_missing``)."""
    return tdsl.get_global_func(name, allow_missing=allow_missing)
