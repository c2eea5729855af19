"""``tvm.topi``: TVM's operator library names over ``tdsl.ops``.

Elementwise, broadcast, reduction and layout operators are ``tdsl.ops``'s own;
``split``/``take`` are ``transform.py``'s; ``topi.nn`` has ``dense``, ``conv2d_nchw``, ``softmax``, ``pool2d``...; the
``generic``/``x86``/``cuda`` submodules' ``schedule_*`` functions return
``tdsl.ops.schedule`` for the target.
"""
from __future__ import annotations

from typing import Any

from tdsl import ops as _ops
from tdsl.ops import (abs, add, broadcast_to, cast, ceil, clip, concatenate, cos, divide, equal,
                      erf, exp, expand_dims, floor, floor_divide, greater, greater_equal, less,
                      less_equal, log, logical_and, logical_not, logical_or, maximum, minimum,
                      mod, multiply, negative, not_equal, power, reshape, round, rsqrt, sigmoid,
                      sin, sqrt, squeeze, subtract, tanh, transpose, where)

from . import cuda, generic, nn, utils, x86
from .contract import einsum, tensordot
from .transform import split, take

floor_mod = mod
identity = _ops.identity


def sum(data: Any, axis: Any = None, keepdims: bool = False) -> Any:  # noqa: A001
    return _ops.sum(data, axis, keepdims)


def max(data: Any, axis: Any = None, keepdims: bool = False) -> Any:  # noqa: A001
    return _ops.max(data, axis, keepdims)


def min(data: Any, axis: Any = None, keepdims: bool = False) -> Any:  # noqa: A001
    return _ops.min(data, axis, keepdims)


def prod(data: Any, axis: Any = None, keepdims: bool = False) -> Any:
    return _ops.prod(data, axis, keepdims)


def argmax(data: Any, axis: Any = None, keepdims: bool = False) -> Any:
    return _ops.argmax(data, axis, keepdims)


def argmin(data: Any, axis: Any = None, keepdims: bool = False) -> Any:
    return _ops.argmin(data, axis, keepdims)


def full(shape: Any, dtype: str, fill_value: Any) -> Any:
    """A tensor of ``shape`` filled with ``fill_value`` (one compute, ``T_full``)."""
    import tdsl
    return tdsl.compute(tuple(shape), lambda *i: tdsl.const(fill_value, dtype), name="T_full",
                        tag="elemwise")


def full_like(x: Any, fill_value: Any) -> Any:
    """A tensor of ``x``'s shape and dtype filled with ``fill_value`` (``T_full_like``)."""
    import tdsl
    return tdsl.compute(x.shape, lambda *i: tdsl.const(fill_value, str(x.dtype)),
                        name="T_full_like", tag="elemwise")


def matmul(a: Any, b: Any, transp_a: bool = False, transp_b: bool = False) -> Any:
    return _ops.matmul(a, b, transpose_a=transp_a, transpose_b=transp_b)


__all__ = ["nn", "generic", "x86", "cuda", "utils", "add", "subtract", "multiply", "divide",
           "floor_divide", "mod", "floor_mod", "power", "maximum", "minimum", "equal",
           "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and",
           "logical_or", "logical_not", "where", "negative", "abs", "exp", "log", "sqrt", "rsqrt",
           "tanh", "sigmoid", "erf", "floor", "ceil", "round", "sin", "cos", "clip", "cast",
           "identity", "broadcast_to", "transpose", "reshape", "expand_dims", "squeeze",
           "concatenate", "sum", "max", "min", "prod", "argmax", "argmin", "matmul",
           "full", "full_like", "einsum", "tensordot", "split", "take"]
