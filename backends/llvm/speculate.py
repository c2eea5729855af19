"""Loads that may run speculatively: proven in bounds, so no branch needs to guard them.

``a and b``, ``a or b`` and ``if_then_else(c, t, f)`` evaluate their lazy operand only
when needed: a load there may be out of bounds on the lanes or iterations that don't
need it (padding: ``if_then_else(i >= 0, X[i], 0)``).  The code generator keeps that
promise with branches (scalar code) or masked loads (vector code), which stop LLVM from
vectorizing or cost a masked load per lane.  Many such loads are in bounds everywhere
they can run -- an arg-max's combiner (``x > acc or (x == acc and k < idx)``) reads its
accumulators at the indices the update stores to -- and evaluating them eagerly changes
nothing but speed.

``speculatable_loads(func)`` walks the function with an ``Analyzer`` that knows each
enclosing loop's range and each enclosing ``if``'s condition, and returns the loads
inside lazy operands whose every index is provably within ``[0, shape)``.
"""
from __future__ import annotations

from contextlib import ExitStack
from typing import Any

from tdsl.arith import Analyzer
from tdsl.expr import And, BufferLoad, Expr, Or, Select
from tdsl.stmt import For, IfThenElse, LetStmt, PrimFunc
from tdsl.tensor import Range
from tdsl.visitor import children


def speculatable_loads(func: PrimFunc) -> set[int]:
    """``id``s of the loads in lazy operands of ``func`` that are provably in bounds
    (the nodes stay alive with ``func``)."""
    return _Walker().run(func)


class _Walker:
    def __init__(self) -> None:
        self.ana = Analyzer()
        self.proven: set[int] = set()
        self.unproven: set[int] = set()

    def run(self, func: PrimFunc) -> set[int]:
        with ExitStack() as scope:
            for v in func.size_vars:         # sizes are never negative
                scope.enter_context(self.ana.constraint(v >= 0))
            self.node(func.body)
        # a node shared by several places is speculatable only if it is so everywhere
        return self.proven - self.unproven

    def node(self, n: Any) -> None:
        if isinstance(n, For):
            self.expr_or_node(n.min)
            self.expr_or_node(n.extent)
            with self.ana.bind(n.var, Range(n.min, n.extent)):
                self.node(n.body)
        elif isinstance(n, IfThenElse):
            self.expr_or_node(n.cond)
            with self.ana.constraint(n.cond):
                self.node(n.then_case)
            if n.else_case is not None:
                self.node(n.else_case)
        elif isinstance(n, LetStmt):
            self.expr_or_node(n.value)
            self.node(n.body)
        elif isinstance(n, Expr):
            self.expr(n, lazy=False)
        else:
            for c in children(n):
                self.expr_or_node(c)

    def expr_or_node(self, n: Any) -> None:
        if isinstance(n, Expr):
            self.expr(n, lazy=False)
        else:
            self.node(n)

    def expr(self, e: Expr, lazy: bool) -> None:
        if isinstance(e, (And, Or)):
            self.expr(e.a, lazy)
            self.expr(e.b, True)
            return
        if isinstance(e, Select):
            self.expr(e.cond, lazy)
            self.expr(e.true_value, True)
            self.expr(e.false_value, True)
            return
        if isinstance(e, BufferLoad) and lazy:
            (self.proven if self.in_bounds(e) else self.unproven).add(id(e))
        for c in children(e):
            if isinstance(c, Expr):
                self.expr(c, lazy)

    def in_bounds(self, load: BufferLoad) -> bool:
        shape = load.buffer.shape
        if len(shape) != len(load.indices):
            return False
        return all(self.ana.can_prove(i >= 0) and self.ana.can_prove(i < n)
                   for i, n in zip(load.indices, shape))
