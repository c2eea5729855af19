"""``tvm.te``: tensor expressions and schedules — tdsl's own functions under TVM's names."""
from __future__ import annotations

from typing import Any

import tdsl
from tdsl import (ComputeOp, IterVar, PlaceholderOp, Schedule, Stage, Tensor, TensorIntrin,
                  abs, all, any, ceil, comm_reducer, cos, create_schedule,
                  decl_tensor_intrin, erf, exp, exp2, floor, if_then_else, isnan, log, log2,
                  log10, max, max_value, min, min_value, power, reduce_axis, round,
                  rsqrt, scan, sigmoid, sin, size_var, sqrt, sum, tanh, thread_axis, trunc, var)
from tdsl.expr import Expr

from .tir import const

Operation = tdsl.tensor.Operation


def _shape(shape: Any) -> Any:
    """TVM accepts whole floats as extents (``(N / bn, K, bn)`` in Python 3): make them ints."""
    dims = shape if isinstance(shape, (tuple, list)) else (shape,)
    return tuple(int(d) if isinstance(d, float) and d.is_integer() else d for d in dims)


def placeholder(shape: Any, dtype: str = "float32", name: str = "placeholder") -> Tensor:
    """An input tensor."""
    return tdsl.placeholder(_shape(shape), dtype, name=name)


def compute(shape: Any, fcompute: Any, name: str = "compute", tag: str = "",
            attrs: Any = None, varargs_names: Any = None) -> Any:
    """A computed tensor (``fcompute`` maps indices to the element)."""
    return tdsl.compute(_shape(shape), fcompute, name=name, tag=tag, attrs=attrs)


def extern(shape: Any, inputs: Any, fcompute: Any, name: str = "extern", dtype: Any = None,
           in_buffers: Any = None, out_buffers: Any = None, tag: str = "",
           attrs: Any = None) -> Any:
    """Tensors computed by a packed or C function (``tir.call_packed``/``call_extern``)."""
    if isinstance(shape, list) and shape and isinstance(shape[0], (list, tuple)):
        shape = [_shape(s) for s in shape]
    else:
        shape = _shape(shape)
    return tdsl.extern(shape, inputs, fcompute, name=name, dtype=dtype, in_buffers=in_buffers,
                       out_buffers=out_buffers, tag=tag, attrs=attrs)


def pow(x: Any, y: Any) -> Expr:  # noqa: A001
    return power(x, y)


def lang_op_names() -> list[str]:
    return sorted(n for n in globals() if not n.startswith("_"))


#: TVM v0.19 ``te`` names tdsl does not implement, and why (see README "Coming from TVM")
NOT_SUPPORTED = {
    "extern_primfunc": "te.extern_primfunc needs TVMScript, which tdsl does not have",
    "scan_placeholder": "te.scan_placeholder is not implemented (use te.placeholder)",
    "hybrid": "te.hybrid scripts are not supported",
    "create_prim_func": "tdsl has no TensorIR; use tvm.lower",
}


def __getattr__(name: str) -> Any:
    if name in NOT_SUPPORTED:
        raise tdsl.TDSLError(f"tvm.te.{name}: {NOT_SUPPORTED[name]} in tdsl.compat; see the README "
                             f"section 'Coming from TVM'")
    raise AttributeError(f"module 'tvm.te' (tdsl.compat) has no attribute {name!r}")


__all__ = ["placeholder", "compute", "var", "size_var", "reduce_axis", "thread_axis",
           "create_schedule", "Schedule", "Stage", "Tensor", "IterVar", "ComputeOp",
           "PlaceholderOp", "Operation", "comm_reducer", "sum", "max", "min", "max_value",
           "min_value", "const", "exp", "exp2", "log", "log2", "log10", "sqrt", "rsqrt", "tanh",
           "sigmoid", "erf", "abs", "floor", "ceil", "round", "trunc", "sin", "cos", "isnan",
           "power", "pow", "if_then_else", "all", "any", "decl_tensor_intrin", "TensorIntrin", "scan", "extern"]
