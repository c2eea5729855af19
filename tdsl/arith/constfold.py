"""Constant folding of single nodes, with tdsl's exact semantics.

Integers wrap at their width and ``//``/``%`` are floor division/modulo; floats
are computed in their NumPy dtype so float16/float32 rounding matches the
interpreter.  ``const_fold`` folds a whole tree bottom-up (no reassociation).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..dtype import DType
from ..expr import (Add, And, BinaryOp, Call, Cast, CmpOp, Const, Div, EQ, Expr, FloorDiv,
                    FloorMod, GE, GT, Intrinsic, LE, LT, Max, Min, Mul, NE, Not, Or, Select, Sub)
from ..visitor import transform

_RANGES = {d: ((-2 ** (d.bits - 1), 2 ** (d.bits - 1) - 1) if d.is_signed else (0, 2 ** d.bits - 1))
           for d in DType if d.is_int}


def int_range(dtype: DType) -> tuple[int, int]:
    """The representable range of an integer dtype."""
    return _RANGES[dtype]


def wrap(value: int, dtype: DType) -> int:
    """``value`` wrapped (two's complement) to the width of integer ``dtype``."""
    lo, hi = _RANGES[dtype]
    if lo <= value <= hi:
        return value
    span = hi - lo + 1
    return (value - lo) % span + lo


def float_to_int(value: float, dtype: DType) -> int:
    """A float cast to integer ``dtype`` (docs/ir.md): truncated toward zero, saturating at
    the dtype's range (NaN gives 0, +-inf and values past an end give that end), as LLVM's
    ``llvm.fptosi.sat``/``llvm.fptoui.sat`` do."""
    value = float(value)
    if value != value:
        return 0
    lo, hi = _RANGES[dtype]
    if math.isinf(value):
        return hi if value > 0 else lo
    return min(max(math.trunc(value), lo), hi)


def make_const(value: Any, dtype: DType) -> Const:
    """A constant of ``dtype``; integers are wrapped, floats rounded to the dtype."""
    if dtype.is_int:
        return Const(wrap(int(value), dtype), dtype)
    if dtype.is_float:
        return Const(float(dtype.numpy.type(value)), dtype)
    return Const(bool(value), dtype)


def _int_binary(cls: type, a: int, b: int) -> "int | bool | None":
    if cls is Add: return a + b
    if cls is Sub: return a - b
    if cls is Mul: return a * b
    if cls is FloorDiv: return 0 if b == 0 else a // b     # x // 0 == 0 (docs/ir.md)
    if cls is FloorMod: return 0 if b == 0 else a % b
    if cls is Min: return min(a, b)
    if cls is Max: return max(a, b)
    return _compare(cls, a, b)


def _compare(cls: type, a: Any, b: Any) -> "bool | None":
    if cls is LT: return a < b
    if cls is LE: return a <= b
    if cls is GT: return a > b
    if cls is GE: return a >= b
    if cls is EQ: return a == b
    if cls is NE: return a != b
    return None


def _float_binary(cls: type, a: float, b: float, dtype: DType) -> "float | bool | None":
    t = dtype.numpy.type
    x, y = t(a), t(b)
    with np.errstate(all="ignore"):
        if cls is Add: r = x + y
        elif cls is Sub: r = x - y
        elif cls is Mul: r = x * y
        elif cls is Div:
            if b == 0:
                return None
            r = x / y
        elif cls is FloorDiv:
            if b == 0:
                return None
            r = np.floor(x / y)
        elif cls is FloorMod:
            if b == 0:
                return None
            r = x - np.floor(x / y) * y
        elif cls is Min: r = np.minimum(x, y)
        elif cls is Max: r = np.maximum(x, y)
        else:
            return _compare(cls, a, b)
    return float(t(r))


def fold_binary(cls: type, a: Const, b: Const, dtype: DType) -> "Const | None":
    """``a <cls> b`` for two constants, or None when it must not fold (float x / 0)."""
    if issubclass(cls, CmpOp):
        r = _compare(cls, _value(a), _value(b))
        return None if r is None else Const(r, DType.BOOL)
    if cls is And:
        return Const(a.value and b.value, DType.BOOL)
    if cls is Or:
        return Const(a.value or b.value, DType.BOOL)
    if dtype.is_int:
        r = _int_binary(cls, _value(a), _value(b))
    elif dtype.is_float:
        r = _float_binary(cls, a.value, b.value, dtype)
    else:
        return None
    return None if r is None else make_const(r, dtype)


def _value(c: Const) -> Any:
    """The value a constant stands for: integers wrapped to their width (a ``Const``
    may hold ``2**31`` as an int32; every backend reads it as ``-2**31``)."""
    return wrap(c.value, c.dtype) if c.dtype.is_int else c.value


def fold_cast(value: Const, dtype: DType) -> "Const | None":
    """Cast a constant: float->int truncates and saturates, ->bool is ``!= 0``, ints wrap."""
    v = _value(value)
    if dtype.is_bool:
        return Const(v != 0, dtype)
    if dtype.is_int:
        if isinstance(v, float):
            return Const(float_to_int(v, dtype), dtype)
        return make_const(int(v), dtype)
    return make_const(float(v), dtype)


def fold_node(e: Expr) -> Expr:
    """Fold ``e`` if its children are constants (or by trivial identities); else ``e``."""
    cls = type(e)
    if isinstance(e, BinaryOp):
        a, b = e.a, e.b
        ac, bc = type(a) is Const, type(b) is Const
        if ac and bc:
            r = fold_binary(cls, a, b, e.dtype)
            return e if r is None else r
        if cls is And:
            if ac: return b if a.value else a
            if bc: return a if b.value else b
        elif cls is Or:
            if ac: return a if a.value else b
            if bc: return b if b.value else a
        elif e.dtype.is_int:
            if cls is Add:
                if ac and a.value == 0: return b
                if bc and b.value == 0: return a
            elif cls is Sub:
                if bc and b.value == 0: return a
            elif cls is Mul:
                if (ac and a.value == 0) or (bc and b.value == 1): return a
                if (bc and b.value == 0) or (ac and a.value == 1): return b
            elif cls is FloorDiv:
                if bc and b.value == 1: return a
                if bc and _value(b) == 0: return Const(0, e.dtype)
            elif cls is FloorMod:
                if bc and (b.value == 1 or _value(b) == 0): return Const(0, e.dtype)
        return e
    if cls is Cast:
        if type(e.value) is Const:
            r = fold_cast(e.value, e.dtype)
            return e if r is None else r
        if e.value.dtype == e.dtype:
            return e.value
        return e
    if cls is Not:
        if type(e.a) is Const:
            return Const(not e.a.value, e.dtype)
        return e
    if cls is Select:
        if type(e.cond) is Const:
            return e.true_value if e.cond.value else e.false_value
        return e
    if cls is Call and e.func is Intrinsic.ABS and e.dtype.is_int and type(e.args[0]) is Const:
        return make_const(abs(_value(e.args[0])), e.dtype)
    return e


def const_fold(expr: Expr) -> Expr:
    """Fold constant subexpressions bottom-up; never reorders or reassociates."""
    return transform(expr, post=fold_node)
