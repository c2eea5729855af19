"""A tiny evaluator and formatter for shape expressions.

Shapes in lowered IR are integer expressions of symbolic sizes: constants, size
variables, and ``+ - * // % min max`` of them.  The runtime evaluates them against
the sizes bound from the argument arrays; it never needs the full simplifier.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from ..errors import ShapeError
from ..expr import Add, Const, Expr, FloorDiv, FloorMod, Max, Min, Mul, Sub, Var

_SYMBOLS = {Add: "+", Sub: "-", Mul: "*", FloorDiv: "//", FloorMod: "%"}


def eval_shape_expr(expr: Expr, env: Mapping[Var, Any], smin: Callable = min,
                    smax: Callable = max) -> Any:
    """The value of ``expr`` with the variables of ``env`` substituted.

    Only ``+ - * // %`` and ``smin``/``smax`` are applied to the values, so they may be
    ints or symbolic integers (``torch.SymInt`` under ``torch.compile``).  Raises
    ``ShapeError`` when a variable has no value or the expression uses an operator a
    shape cannot contain.
    """
    if isinstance(expr, Const):
        return int(expr.value)
    if isinstance(expr, Var):
        try:
            return env[expr]
        except KeyError:
            raise ShapeError(
                f"symbolic size '{expr.name}' has no value: it is not bound from any "
                f"argument's shape") from None
    t = type(expr)
    if t in (Add, Sub, Mul, FloorDiv, FloorMod, Min, Max):
        a = eval_shape_expr(expr.a, env, smin, smax)
        b = eval_shape_expr(expr.b, env, smin, smax)
        if t is Add:
            return a + b
        if t is Sub:
            return a - b
        if t is Mul:
            return a * b
        if t is Min:
            return smin(a, b)
        if t is Max:
            return smax(a, b)
        if isinstance(b, int) and b == 0:
            raise ShapeError(f"shape expression {format_shape_expr(expr)} divides by zero")
        return a // b if t is FloorDiv else a % b
    raise ShapeError(f"cannot evaluate shape expression node {t.__name__} "
                     f"(shapes may use + - * // % min max of sizes)")


def format_shape_expr(expr: Expr) -> str:
    """A compact, readable rendering of a shape expression (``2*n + 1``)."""
    if isinstance(expr, Const):
        return str(expr.value)
    if isinstance(expr, Var):
        return expr.name
    t = type(expr)
    if t in (Min, Max):
        return f"{t.__name__.lower()}({format_shape_expr(expr.a)}, {format_shape_expr(expr.b)})"
    if t in _SYMBOLS:
        a, b = format_shape_expr(expr.a), format_shape_expr(expr.b)
        if isinstance(expr.a, (Add, Sub)) and t is not Add:
            a = f"({a})"
        if isinstance(expr.b, (Add, Sub, Mul, FloorDiv, FloorMod)) and t is not Add:
            b = f"({b})"
        return f"{a} {_SYMBOLS[t]} {b}" if t in (Add, Sub) else f"{a}{_SYMBOLS[t]}{b}"
    return t.__name__
