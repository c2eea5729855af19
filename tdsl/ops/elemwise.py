"""Elementwise and broadcasting operators (NumPy broadcasting, symbolic sizes included)."""
from __future__ import annotations

import math
import numbers
from typing import Any, Callable

import tdsl.intrin as _i
from tdsl.dtype import DType, as_dtype
from tdsl.errors import DTypeError, ShapeError
from tdsl.expr import Expr, Select, convert
from tdsl.tensor import Tensor, compute

from ._util import broadcast_index, broadcast_shape, check_tensor, result_dtype, same_size
from .tags import OpKind

__all__ = [
    "add", "subtract", "multiply", "divide", "floor_divide", "mod", "power", "maximum", "minimum",
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
    "logical_and", "logical_or", "logical_not", "where",
    "negative", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "floor", "ceil",
    "round", "sin", "cos", "relu", "leaky_relu", "gelu", "silu", "clip", "cast", "identity",
    "broadcast_to", "elemwise", "ACTIVATIONS", "apply_activation",
]


def _operand_dtype(values: list) -> DType:
    dts = [v.dtype for v in values if isinstance(v, Tensor)]
    if not dts:
        raise DTypeError("an elementwise operator needs at least one tensor operand")
    return result_dtype("elemwise", *dts)


def _scalar(op: str, v: Any, dtype: DType) -> Expr:
    if isinstance(v, Expr):
        return v
    if isinstance(v, bool) or not isinstance(v, numbers.Number):
        raise DTypeError(f"ops.{op}: operand {v!r} is neither a tensor nor a number")
    if isinstance(v, numbers.Integral) or dtype.is_float:
        return convert(v, dtype)
    raise DTypeError(f"ops.{op}: float scalar {v} with {dtype} tensors; cast the tensor to a float "
                     f"dtype first (ops.cast)")


def elemwise(name: str, fn: Callable[..., Any], *operands: Any, dtype: Any = None) -> Tensor:
    """``fn`` applied elementwise to broadcast operands (tensors or Python scalars).

    ``fn`` receives one scalar expression per operand.  The result's kind is ELEMWISE
    when every tensor operand has the output's shape, else BROADCAST.
    """
    tensors = [v for v in operands if isinstance(v, Tensor)]
    if not tensors:
        raise ShapeError(f"ops.{name}: needs at least one tensor operand")
    in_dt = _operand_dtype(list(operands))
    shape = broadcast_shape(name, *[t.shape for t in tensors])
    nd = len(shape)
    same = all(t.ndim == nd and all(same_size(a, b) for a, b in zip(t.shape, shape)) for t in tensors)
    scal = [None if isinstance(v, Tensor) else _scalar(name, v, in_dt) for v in operands]

    def body(*idx: Expr) -> Expr:
        vals = []
        for v, sc in zip(operands, scal):
            if isinstance(v, Tensor):
                e = v(*broadcast_index(v, shape, idx))
                vals.append(e.astype(in_dt) if e.dtype != in_dt else e)
            else:
                vals.append(sc)
        out = convert(fn(*vals))
        return out if dtype is None else out.astype(as_dtype(dtype))

    if nd == 0:
        raise ShapeError(f"ops.{name}: 0-d tensors are not supported")
    return compute(shape, body, name=f"T_{name}", tag=OpKind.ELEMWISE if same else OpKind.BROADCAST)


# ---- binary -----------------------------------------------------------------------------
def add(a: Any, b: Any) -> Tensor:
    """``a + b`` with broadcasting."""
    return elemwise("add", lambda x, y: x + y, a, b)


def subtract(a: Any, b: Any) -> Tensor:
    return elemwise("subtract", lambda x, y: x - y, a, b)


def multiply(a: Any, b: Any) -> Tensor:
    return elemwise("multiply", lambda x, y: x * y, a, b)


def divide(a: Any, b: Any) -> Tensor:
    """True division (float operands)."""
    return elemwise("divide", lambda x, y: x / y, a, b)


def floor_divide(a: Any, b: Any) -> Tensor:
    return elemwise("floor_divide", lambda x, y: x // y, a, b)


def mod(a: Any, b: Any) -> Tensor:
    return elemwise("mod", lambda x, y: x % y, a, b)


def power(a: Any, b: Any) -> Tensor:
    return elemwise("power", lambda x, y: _i.power(x, y), a, b)


def maximum(a: Any, b: Any) -> Tensor:
    return elemwise("maximum", _i.maximum, a, b)


def minimum(a: Any, b: Any) -> Tensor:
    return elemwise("minimum", _i.minimum, a, b)


def equal(a: Any, b: Any) -> Tensor:
    return elemwise("equal", lambda x, y: x == y, a, b)


def not_equal(a: Any, b: Any) -> Tensor:
    return elemwise("not_equal", lambda x, y: x != y, a, b)


def less(a: Any, b: Any) -> Tensor:
    return elemwise("less", lambda x, y: x < y, a, b)


def less_equal(a: Any, b: Any) -> Tensor:
    return elemwise("less_equal", lambda x, y: x <= y, a, b)


def greater(a: Any, b: Any) -> Tensor:
    return elemwise("greater", lambda x, y: x > y, a, b)


def greater_equal(a: Any, b: Any) -> Tensor:
    return elemwise("greater_equal", lambda x, y: x >= y, a, b)


def logical_and(a: Any, b: Any) -> Tensor:
    return elemwise("logical_and", lambda x, y: x & y, a, b)


def logical_or(a: Any, b: Any) -> Tensor:
    return elemwise("logical_or", lambda x, y: x | y, a, b)


def logical_not(a: Tensor) -> Tensor:
    return elemwise("logical_not", lambda x: ~x, a)


def where(cond: Tensor, a: Any, b: Any) -> Tensor:
    """``a`` where ``cond`` (a bool tensor) holds, else ``b``; broadcasting."""
    check_tensor("where", cond, "cond")
    if not cond.dtype.is_bool:
        raise DTypeError(f"ops.where: cond must be bool, got {cond.dtype}")
    vals = [v for v in (a, b) if isinstance(v, Tensor)]
    dt = result_dtype("where", *[v.dtype for v in vals]) if vals else None
    if dt is None:
        raise ShapeError("ops.where: a or b must be a tensor")
    sa = a if isinstance(a, Tensor) else _scalar("where", a, dt)
    sb = b if isinstance(b, Tensor) else _scalar("where", b, dt)
    ops_ = [cond] + [v for v in (sa, sb) if isinstance(v, Tensor)]
    shape = broadcast_shape("where", *[t.shape for t in ops_])

    def load(v: Any, idx: tuple) -> Expr:
        if isinstance(v, Tensor):
            e = v(*broadcast_index(v, shape, idx))
            return e.astype(dt) if e.dtype != dt else e
        return v

    return compute(shape, lambda *idx: _i.if_then_else(cond(*broadcast_index(cond, shape, idx)),
                                                       load(sa, idx), load(sb, idx)),
                   name="T_where", tag=OpKind.BROADCAST)


# ---- unary ------------------------------------------------------------------------------
def _unary(name: str, fn: Callable[[Expr], Any]) -> Callable[[Tensor], Tensor]:
    def op(x: Tensor) -> Tensor:
        check_tensor(name, x)
        return elemwise(name, fn, x)
    op.__name__ = name
    op.__doc__ = f"Elementwise {name}."
    return op


negative = _unary("negative", lambda x: -x)
abs = _unary("abs", _i.abs)  # noqa: A001
exp = _unary("exp", _i.exp)
log = _unary("log", _i.log)
sqrt = _unary("sqrt", _i.sqrt)
rsqrt = _unary("rsqrt", _i.rsqrt)
tanh = _unary("tanh", _i.tanh)
sigmoid = _unary("sigmoid", _i.sigmoid)
erf = _unary("erf", _i.erf)
floor = _unary("floor", _i.floor)
ceil = _unary("ceil", _i.ceil)
round = _unary("round", _i.round)  # noqa: A001
sin = _unary("sin", _i.sin)
cos = _unary("cos", _i.cos)
identity = _unary("identity", lambda x: x)


def _relu(x: Expr) -> Expr:
    return _i.maximum(x, convert(0, x.dtype))


def _gelu(x: Expr) -> Expr:
    return x * 0.5 * (_i.erf(x * (1.0 / math.sqrt(2.0))) + 1.0)


def _gelu_tanh(x: Expr) -> Expr:
    c = math.sqrt(2.0 / math.pi)
    return x * 0.5 * (_i.tanh((x + x * x * x * 0.044715) * c) + 1.0)


def _silu(x: Expr) -> Expr:
    return x * _i.sigmoid(x)


def relu(x: Tensor) -> Tensor:
    """``max(x, 0)``."""
    check_tensor("relu", x)
    return elemwise("relu", _relu, x)


def leaky_relu(x: Tensor, alpha: float = 0.01) -> Tensor:
    check_tensor("leaky_relu", x)
    return elemwise("leaky_relu", lambda v: Select(v > 0, v, v * alpha), x)


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """GELU: ``x * Phi(x)`` (``approximate="tanh"`` for the tanh form, as in PyTorch)."""
    check_tensor("gelu", x)
    if approximate not in ("none", "tanh"):
        raise ValueError(f"ops.gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    _float("gelu", x)
    return elemwise("gelu", _gelu if approximate == "none" else _gelu_tanh, x)


def silu(x: Tensor) -> Tensor:
    check_tensor("silu", x)
    _float("silu", x)
    return elemwise("silu", _silu, x)


def clip(x: Tensor, a_min: Any, a_max: Any) -> Tensor:
    check_tensor("clip", x)
    lo, hi = _scalar("clip", a_min, x.dtype), _scalar("clip", a_max, x.dtype)
    return elemwise("clip", lambda v: _i.minimum(_i.maximum(v, lo), hi), x)


def cast(x: Tensor, dtype: Any) -> Tensor:
    check_tensor("cast", x)
    dt = as_dtype(dtype)
    return elemwise("cast", lambda v: v.astype(dt), x)


def broadcast_to(x: Tensor, shape: Any) -> Tensor:
    """``x`` broadcast to ``shape`` (NumPy rules)."""
    check_tensor("broadcast_to", x)
    shape = tuple(convert(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    out = broadcast_shape("broadcast_to", x.shape, shape)
    if len(out) != len(shape) or not all(same_size(a, b) for a, b in zip(out, shape)):
        raise ShapeError(f"ops.broadcast_to: cannot broadcast {list(x.shape)} to {list(shape)}")
    return compute(shape, lambda *idx: x(*broadcast_index(x, shape, idx)), name="T_broadcast_to",
                   tag=OpKind.BROADCAST)


def _float(op: str, x: Tensor) -> None:
    if not x.dtype.is_float:
        raise DTypeError(f"ops.{op}: needs a float tensor, got {x.dtype}")


#: Activations accepted by ``dense(..., activation=)`` and ``conv2d(..., activation=)``.
ACTIVATIONS = {"relu": _relu, "gelu": _gelu, "gelu_tanh": _gelu_tanh, "silu": _silu,
               "sigmoid": _i.sigmoid, "tanh": _i.tanh}


def apply_activation(op: str, x: Tensor, activation: "str | None") -> Tensor:
    if activation is None:
        return x
    fn = ACTIVATIONS.get(activation)
    if fn is None:
        raise ValueError(f"ops.{op}: unknown activation {activation!r}; use one of "
                         f"{sorted(ACTIVATIONS)} or None")
    return elemwise(activation, fn, x)
