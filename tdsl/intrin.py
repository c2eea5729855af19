"""Elementwise math functions and conditionals of the DSL."""
from __future__ import annotations

from functools import reduce as _fold
from typing import Any

from .errors import DTypeError
from .expr import And, Expr, Max, Min, Or, Select, _as_bool, _operands, call, convert


def exp(x: Any) -> Expr: return call("exp", x)
def exp2(x: Any) -> Expr: return call("exp2", x)
def log(x: Any) -> Expr: return call("log", x)
def log2(x: Any) -> Expr: return call("log2", x)
def log10(x: Any) -> Expr: return call("log10", x)
def sqrt(x: Any) -> Expr: return call("sqrt", x)
def rsqrt(x: Any) -> Expr: return call("rsqrt", x)
def tanh(x: Any) -> Expr: return call("tanh", x)
def sigmoid(x: Any) -> Expr: return call("sigmoid", x)
def erf(x: Any) -> Expr: return call("erf", x)
def abs(x: Any) -> Expr: return call("abs", x)  # noqa: A001
def floor(x: Any) -> Expr: return call("floor", x)
def ceil(x: Any) -> Expr: return call("ceil", x)
def round(x: Any) -> Expr: return call("round", x)  # noqa: A001
def trunc(x: Any) -> Expr: return call("trunc", x)
def sin(x: Any) -> Expr: return call("sin", x)
def cos(x: Any) -> Expr: return call("cos", x)
def isnan(x: Any) -> Expr: return call("isnan", x)
def power(x: Any, y: Any) -> Expr: return call("pow", x, y)


pow = power  # noqa: A001


def maximum(a: Any, b: Any) -> Expr:
    """Elementwise max of two expressions."""
    return Max(*_operands("maximum", a, b))


def minimum(a: Any, b: Any) -> Expr:
    """Elementwise min of two expressions."""
    return Min(*_operands("minimum", a, b))


def if_then_else(cond: Any, t: Any, f: Any) -> Expr:
    """``t`` where ``cond`` holds, else ``f``; only the chosen branch is evaluated."""
    cond = _as_bool(cond)
    t, f = _operands("if_then_else", t, f)
    return Select(cond, t, f)


def all(*conds: Any) -> Expr:  # noqa: A001
    """The conjunction of bool expressions."""
    if not conds:
        raise DTypeError("td.all needs at least one condition")
    return _fold(lambda a, b: And(a, b), [_as_bool(c) for c in conds])


def any(*conds: Any) -> Expr:  # noqa: A001
    """The disjunction of bool expressions."""
    if not conds:
        raise DTypeError("td.any needs at least one condition")
    return _fold(lambda a, b: Or(a, b), [_as_bool(c) for c in conds])


def cast(x: Any, dtype: Any) -> Expr:
    return convert(x).astype(dtype)
