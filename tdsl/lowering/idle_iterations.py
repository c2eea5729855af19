"""Skip the iterations of a loop that cannot store anything that outlives them.

A reduction with a ``where=`` condition over its reduce loop (a causal attention's merge:
key block ``kb`` contributes to query ``i`` only when ``kb * block <= i``) guards its
update, but the stages attached inside that loop (the block's scores, probabilities, ...)
are computed for every iteration.  Where every store of a loop body to a buffer that lives
outside the body is guarded, and the guards can be relaxed to a condition ``G`` on the
loop's own variable and the enclosing ones (the inner loop variables eliminated: ``exists
i in [lo, hi]: a(i) <= b(i)`` becomes ``max over i of (b - a) >= 0``), the body runs under
``if G``: an iteration where ``G`` fails stores nothing that is read after it (the body's
own buffers are fresh each iteration), so skipping it changes nothing but the time.

The relaxation is sound (``G`` holds wherever some guarded store would run): a conjunction
is relaxed term by term, a comparison that is not affine in the index variables, a data
load, a call or an unknown statement counts as "may store".
"""
from __future__ import annotations

from typing import Any

from tdsl.arith import Analyzer
from tdsl.arith.interval import Interval
from tdsl.dtype import INDEX
from tdsl.expr import GE, GT, LE, LT, And, BufferLoad, Call, Const, Expr, Or
from tdsl.stmt import (AllReduce, Allocate, Barrier, BufferStore, For, ForKind, IfThenElse,
                       LetStmt, SeqStmt, Stmt)
from tdsl.visitor import free_vars, post_order_visit

_TRUE = Const(True, "bool")
_FALSE = Const(False, "bool")


def _is(c: Expr, value: bool) -> bool:
    return isinstance(c, Const) and bool(c.value) is value


def _or(a: Expr, b: Expr) -> Expr:
    if _is(a, True) or _is(b, False):
        return a
    if _is(b, True) or _is(a, False):
        return b
    return Or(a, b)


def _and(a: Expr, b: Expr) -> Expr:
    if _is(a, False) or _is(b, True):
        return a
    if _is(b, False) or _is(a, True):
        return b
    return And(a, b)


class _Guards:
    def __init__(self, ana: Analyzer):
        self.ana = ana

    def exists(self, cond: Expr, var: Any, lo: Expr, ext: Expr) -> Expr:
        """A condition without ``var`` that holds if ``cond`` holds for some ``var`` in
        ``[lo, lo + ext)`` (an over-approximation)."""
        if var not in free_vars(cond):
            return cond
        if isinstance(cond, And):
            return _and(self.exists(cond.a, var, lo, ext), self.exists(cond.b, var, lo, ext))
        if isinstance(cond, Or):
            return _or(self.exists(cond.a, var, lo, ext), self.exists(cond.b, var, lo, ext))
        if isinstance(cond, (LE, LT, GE, GT)) and cond.a.dtype.is_int:
            small, big = (cond.a, cond.b) if isinstance(cond, (LE, LT)) else (cond.b, cond.a)
            diff = big.astype(INDEX) - small.astype(INDEX) if big.dtype != small.dtype \
                else big - small
            iv = self.ana.int_set(diff, {var: Interval(lo, lo + ext - 1)})
            if iv.max is None:
                return _TRUE
            hi = self.ana.simplify(iv.max)
            zero = Const(0, hi.dtype)
            return self.ana.simplify(hi > zero if isinstance(cond, (LT, GT)) else hi >= zero)
        return _TRUE

    def guard(self, s: Stmt, local: frozenset) -> Expr:
        """When false, ``s`` stores to no buffer outside ``local`` (the buffers allocated
        in the loop body)."""
        if isinstance(s, BufferStore):
            return _FALSE if s.buffer in local else _TRUE
        if isinstance(s, Barrier):      # stores nothing (its block-uniform guard: skip_...)
            return _FALSE
        if isinstance(s, AllReduce):    # stores its results only (block-uniform, as a barrier)
            return _FALSE if all(r in local for r in s.results) else _TRUE
        if isinstance(s, SeqStmt):
            g = _FALSE
            for c in s.stmts:
                g = _or(g, self.guard(c, local))
                if _is(g, True):
                    break
            return g
        if isinstance(s, Allocate):
            return self.guard(s.body, local | {s.buffer})
        if isinstance(s, IfThenElse):
            # a condition on data (loaded, perhaps, from a buffer the body fills first)
            # cannot be evaluated before the body: it may hold
            cond = _TRUE if _reads_data(s.cond) else s.cond
            g = _and(cond, self.guard(s.then_case, local))
            if s.else_case is not None:
                g = _or(g, self.guard(s.else_case, local))
            return g
        if isinstance(s, For):
            # a thread-bound loop inside the body (a cooperative fetch): some thread stores
            return self.exists(self.guard(s.body, local), s.var, s.min, s.extent)
        if isinstance(s, LetStmt):
            g = self.guard(s.body, local)
            return _TRUE if s.var in free_vars(g) else g
        return _TRUE


def _reads_data(e: Expr) -> bool:
    found = []
    post_order_visit(e, lambda n: found.append(n) if isinstance(n, (BufferLoad, Call)) else None)
    return bool(found)


def _has_idle_work(body: Stmt, guards: _Guards) -> bool:
    """The body holds statements that only fill its own buffers (the attached stages)."""
    local = _allocated(body)
    while isinstance(body, Allocate):
        body = body.body
    if not isinstance(body, SeqStmt):
        return False
    return any(_is(guards.guard(c, local | _allocated(c)), False) for c in body.stmts)


def _allocated(s: Stmt) -> frozenset:
    out = set()
    while isinstance(s, Allocate):
        out.add(s.buffer)
        s = s.body
    return frozenset(out)


def _cooperative(s: Stmt) -> bool:
    """``s`` holds a barrier or a thread-bound loop: work shared by a block's threads (a
    fetch into shared memory, a cross-thread reduction), which all of them must reach."""
    found = []
    post_order_visit(s, lambda n: found.append(n) if isinstance(n, Barrier) or (
        isinstance(n, For) and n.kind is ForKind.THREAD_BINDING) else None)
    return bool(found)


def skip_idle_iterations(stmt: Stmt, ana: "Analyzer | None" = None) -> Stmt:
    """``stmt`` with each serial loop's body guarded by the condition under which it may
    store something that outlives the iteration (when that is not always).

    A body with cooperative work (a thread-bound loop: a fetch into shared memory, between
    barriers) gets a guard that is the same for all the block's threads: the condition
    relaxed over the enclosing thread-bound loops' variables (some thread may store), so
    that no thread skips a barrier the others wait at."""
    guards = _Guards(ana or Analyzer())

    def visit(s: Stmt, threads: tuple) -> Stmt:
        if isinstance(s, SeqStmt):
            return SeqStmt([visit(c, threads) for c in s.stmts])
        if isinstance(s, Allocate):
            return Allocate(s.buffer, visit(s.body, threads))
        if isinstance(s, LetStmt):
            return LetStmt(s.var, s.value, visit(s.body, threads))
        if isinstance(s, IfThenElse):
            return IfThenElse(s.cond, visit(s.then_case, threads),
                              None if s.else_case is None else visit(s.else_case, threads))
        if not isinstance(s, For):
            return s
        # the threads of a block are relaxed; blockIdx is the same for all of them: not
        # relaxed, its range known (a tail guard of the grid then holds for every block)
        block = s.kind is ForKind.THREAD_BINDING and \
            str(s.thread_tag or "").startswith("blockIdx")
        inner = threads + (s,) if s.kind is ForKind.THREAD_BINDING and not block else threads
        if block:
            with guards.ana.bind(s.var, Interval(s.min, s.min + s.extent - 1)):
                body = visit(s.body, inner)
        else:
            body = visit(s.body, inner)
        if s.kind in (ForKind.SERIAL, ForKind.PARALLEL) and _has_idle_work(body, guards):
            g = guards.guard(body, frozenset())
            if threads and _cooperative(body):
                for t in reversed(threads):
                    g = guards.exists(g, t.var, t.min, t.extent)
            if not _is(g, True) and not _is(g, False):
                body = IfThenElse(g, body, None)
        return For(s.var, s.min, s.extent, s.kind, body, s.thread_tag, s.annotations)
    return visit(stmt, ())
