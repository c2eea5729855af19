"""``tvm.te``: tensor expressions and schedules — tdsl's own functions under TVM's names."""
from __future__ import annotations

import contextvars
from typing import Any

import tdsl
from tdsl import (ComputeOp, IterVar, PlaceholderOp, Schedule, Stage, Tensor,
                  abs, all, any, ceil, comm_reducer, cos, erf, exp, exp2, floor, if_then_else,
                  isnan, log, log2, log10, max, max_value, min, min_value, power, reduce_axis, round,
                  rsqrt, scan, sigmoid, sin, size_var, sqrt, sum, tanh, trunc, var)
from tdsl.expr import Expr, int_to_float_promotion

from . import te_schedule as schedule
from . import te_tensor as tensor
from .te_tensor import ExternOp, ScanOp
from .te_schedule import create_schedule
from .tensor_intrin import TensorIntrin, decl_tensor_intrin, lambda_arity, tensor_compute
from .autodiff import gradient
from .tir import (const, div, floordiv, floormod, indexdiv, indexmod, truncdiv, truncmod,
                  )

Operation = tdsl.tensor.Operation
#: the tag of the innermost ``tag_scope`` (a context variable: per thread and task)
_TAG: contextvars.ContextVar[str] = contextvars.ContextVar("tdsl_compat_tag", default="")


def _shape(shape: Any) -> Any:
    """TVM accepts whole floats as extents (``(N / bn, K, bn)`` in Python 3): make them ints."""
    dims = shape if isinstance(shape, (tuple, list)) else (shape,)
    return tuple(int(d) if isinstance(d, float) and d.is_integer() else d for d in dims)


def placeholder(shape: Any, dtype: str = "float32", name: str = "placeholder") -> Tensor:
    """An input tensor."""
    return tdsl.placeholder(_shape(shape), dtype, name=name)


def compute(shape: Any, fcompute: Any, name: str = "compute", tag: str = "",
            attrs: Any = None, varargs_names: Any = None) -> Any:
    """A computed tensor (``fcompute`` maps indices to the element); in its body an integer
    operand of a float operation is cast to the float, as in TVM.  A lambda over fewer
    axes than the shape applies a tensor intrinsic to slices (TVM's TensorComputeOp,
    ``tensor_intrin.tensor_compute``)."""
    tag = tag or _TAG.get()
    shape = _shape(shape)
    k = lambda_arity(fcompute)
    with int_to_float_promotion():      # TVM casts an int operand of a float operation
        if k is not None and 0 < k < len(shape):
            return tensor_compute(shape, fcompute, name, tag, attrs)
        return tdsl.compute(shape, fcompute, name=name, tag=tag, attrs=attrs)


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


def thread_axis(dom: Any = None, tag: str = "", name: str = "", span: Any = None) -> IterVar:
    """TVM's ``te.thread_axis("threadIdx.x")`` or ``te.thread_axis((0, n), "threadIdx.x")``:
    the range ``(0, n)`` caps the extent of the loops bound to it (checked at lowering)."""
    if isinstance(dom, str):
        dom, tag, name = None, dom, name or (tag if isinstance(tag, str) else "")
    extent = None
    if dom is not None:
        if isinstance(dom, tdsl.Range):
            lo, extent = dom.min, dom.extent
        elif isinstance(dom, (tuple, list)) and len(dom) == 2:
            lo, extent = dom[0], dom[1] - dom[0]
        else:
            raise tdsl.TDSLError(f"te.thread_axis: dom must be (begin, end) or a Range, got "
                                 f"{dom!r}")
        if not (isinstance(lo, int) and lo == 0 or getattr(lo, "value", None) == 0):
            raise tdsl.TDSLError(f"te.thread_axis: a thread range starts at 0, got {dom!r}")
    return tdsl.thread_axis(tag, name, extent=extent)


class tag_scope:  # noqa: N801 (TVM's name)
    """``with te.tag_scope("ewise"):`` (or ``@te.tag_scope("ewise")``): the ``te.compute``
    calls inside that pass no ``tag`` get this one (topi's way of marking operator kinds)."""

    def __init__(self, tag: str):
        self.tag = tag
        self._token: Any = None

    def __enter__(self) -> "tag_scope":
        self._token = _TAG.set(self.tag)
        return self

    def __exit__(self, *exc: Any) -> None:
        _TAG.reset(self._token)

    def __call__(self, fdecl: Any) -> Any:
        import functools

        @functools.wraps(fdecl)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with tag_scope(self.tag):
                return fdecl(*args, **kwargs)
        return wrapped


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
           "power", "pow", "if_then_else", "all", "any", "decl_tensor_intrin", "TensorIntrin",
           "scan", "extern", "tag_scope", "div", "floordiv", "floormod", "indexdiv", "indexmod",
           "truncdiv", "truncmod", "schedule", "gradient", "tensor", "ScanOp", "ExternOp"]
