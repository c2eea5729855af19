"""Small helpers over expressions: integer evaluation and counting operations.

Used by the flop count of a task and by the feature extractor, which need
numbers (loop extents, strides) from expressions under a binding of variables.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Mapping

from tdsl.expr import (Add, And, BinaryOp, BufferLoad, Call, Cast, CmpOp, Const, Div,
                       FloorDiv, FloorMod, Max, Min, Mul, Not, Or, Reduce, Select, Sub,
                       TensorLoad, Var)
from tdsl.tensor import IterVar
from tdsl.visitor import children

_INT_OPS = {
    Add: lambda a, b: a + b, Sub: lambda a, b: a - b, Mul: lambda a, b: a * b,
    FloorDiv: lambda a, b: a // b if b else 0, FloorMod: lambda a, b: a % b if b else 0,
    Div: lambda a, b: int(a / b) if b else 0, Min: min, Max: max,
}


def eval_int(e: Any, env: Mapping[Any, int], default: int = 0) -> int:
    """``e`` evaluated with variables from ``env`` (keyed by Var or by name); unknown → ``default``."""
    if isinstance(e, int):
        return e
    if isinstance(e, Const):
        v = e.value
        return int(v) if isinstance(v, (int, float, bool)) else default
    if isinstance(e, Var):
        if e in env:
            return int(env[e])
        return int(env.get(e.name, default))
    if isinstance(e, IterVar):
        return eval_int(e.var, env, default)
    if isinstance(e, Cast):
        return eval_int(e.value, env, default)
    op = _INT_OPS.get(type(e))
    if op is not None:
        return int(op(eval_int(e.a, env, default), eval_int(e.b, env, default)))
    if isinstance(e, CmpOp):
        a, b = eval_int(e.a, env, default), eval_int(e.b, env, default)
        return int({"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b,
                    "!=": a != b}[e.symbol])
    if isinstance(e, And):
        return int(bool(eval_int(e.a, env, default)) and bool(eval_int(e.b, env, default)))
    if isinstance(e, Or):
        return int(bool(eval_int(e.a, env, default)) or bool(eval_int(e.b, env, default)))
    if isinstance(e, Not):
        return int(not eval_int(e.a, env, default))
    if isinstance(e, Select):
        c = eval_int(e.cond, env, default)
        return eval_int(e.true_value if c else e.false_value, env, default)
    return default


#: Operation kinds counted by ``count_ops`` (a fixed order: feature slots).
OP_KINDS = ("fadd", "fmul", "fdiv", "fminmax", "fmath", "fcmp", "iarith", "select", "load")


def count_ops(e: Any, counts: "Counter[str] | None" = None) -> "Counter[str]":
    """Operations in expression ``e`` by kind (floating point vs integer)."""
    c = counts if counts is not None else Counter()

    def visit(n: Any) -> None:
        dt = getattr(n, "dtype", None)
        is_float = dt is not None and dt.is_float
        if isinstance(n, (Add, Sub)):
            c["fadd" if is_float else "iarith"] += 1
        elif isinstance(n, Mul):
            c["fmul" if is_float else "iarith"] += 1
        elif isinstance(n, (Div, FloorDiv, FloorMod)):
            c["fdiv" if is_float else "iarith"] += 1
        elif isinstance(n, (Min, Max)):
            c["fminmax" if is_float else "iarith"] += 1
        elif isinstance(n, Call):
            c["fmath"] += 1
        elif isinstance(n, CmpOp):
            c["fcmp" if n.a.dtype.is_float else "iarith"] += 1
        elif isinstance(n, Select):
            c["select"] += 1
        elif isinstance(n, (BufferLoad, TensorLoad)):
            c["load"] += 1
            for i in n.indices:
                visit_index(i)
            return
        if isinstance(n, Reduce):
            for s in n.source:
                visit(s)
            return
        for ch in children(n):
            visit(ch)

    def visit_index(i: Any) -> None:
        # index arithmetic is integer work; count it separately from the math
        for ch in children(i):
            visit_index(ch)
        if isinstance(i, BinaryOp):
            c["iarith"] += 1

    visit(e)
    return c


def float_flops(counts: Mapping[str, int]) -> int:
    """Floating-point operations in a ``count_ops`` result (a math call counts as one)."""
    return sum(counts.get(k, 0) for k in ("fadd", "fmul", "fdiv", "fminmax", "fmath"))
