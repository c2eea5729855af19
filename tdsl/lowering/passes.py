"""Passes over the built loop nest: simplification and legality checks."""
from __future__ import annotations

from typing import Any

from ..arith import Analyzer
from ..errors import LoweringError
from ..expr import Const, Expr
from ..stmt import (AllReduce, Allocate, Barrier, BufferRegion, BufferStore, For, ForKind, IfThenElse, IntrinCall, LetStmt,
                    SeqStmt, Stmt)
from ..tensor import Range
from ..visitor import children, map_children, substitute, transform
from .nest import seq

#: Largest constant upper bound to which a vectorized/unrolled loop of varying extent is
#: padded (beyond it most lanes or copies would be guarded off: refuse instead).
MAX_PADDED_EXTENT = 256


#: Loop kinds whose single-iteration loops ``simplify_stmt`` replaces by their body.
_UNIT_KINDS = (ForKind.SERIAL, ForKind.UNROLLED, ForKind.VECTORIZED, ForKind.PARALLEL)


def _drop_unit_loops(loop: For, lo: Expr, ana: Analyzer) -> Stmt:
    """The body of the single-iteration ``loop`` (its variable bound to ``lo``), and of the
    single-iteration loops nested directly in it, with one substitution for the whole
    chain: a nest of k unit loops (a conv's kernel-size-1 axes, batch 1) rewrote the body
    k times, one loop at a time."""
    vmap = {loop.var: lo}
    body = loop.body
    while isinstance(body, For) and body.kind in _UNIT_KINDS:
        ext = ana.simplify(substitute(body.extent, vmap))
        if not (isinstance(ext, Const) and ext.value == 1):
            break
        vmap[body.var] = ana.simplify(substitute(body.min, vmap))
        body = body.body
    return substitute(body, vmap)


def simplify_stmt(stmt: Stmt, ana: Analyzer) -> "Stmt | None":
    """Simplify every expression with the loop bounds known; drop dead branches and
    unit loops.  Returns None for a statement that does nothing."""
    if isinstance(stmt, For):
        ext = ana.simplify(stmt.extent)
        lo = ana.simplify(stmt.min)
        hi_bound = ana.const_int_bound(ext)[1]
        if hi_bound is not None and hi_bound <= 0:
            return None
        if isinstance(ext, Const) and ext.value == 1 and stmt.kind in _UNIT_KINDS:
            return simplify_stmt(_drop_unit_loops(stmt, lo, ana), ana)
        if stmt.kind in (ForKind.VECTORIZED, ForKind.UNROLLED) and not isinstance(ext, Const) \
                and hi_bound is not None and hi_bound <= MAX_PADDED_EXTENT:
            return simplify_stmt(pad_to_constant(stmt, lo, ext, hi_bound), ana)
        # The range implies ``ext >= 1`` (the loop runs), which holds only inside the
        # loop: scoped, or a sibling guard such as ``f < 1`` next to a loop of extent
        # ``1 - f`` would be "proved" and dropped.
        with ana.bind(stmt.var, Range(lo, ext)):
            body = simplify_stmt(stmt.body, ana)
        if body is None:
            return None
        return For(stmt.var, lo, ext, stmt.kind, body, stmt.thread_tag, stmt.annotations)
    if isinstance(stmt, IfThenElse):
        cond = ana.simplify(stmt.cond)
        if isinstance(cond, Const):
            branch = stmt.then_case if cond.value else stmt.else_case
            return None if branch is None else simplify_stmt(branch, ana)
        with ana.constraint(cond):
            then = simplify_stmt(stmt.then_case, ana)
        other = simplify_stmt(stmt.else_case, ana) if stmt.else_case is not None else None
        if then is None and other is None:
            return None
        if then is None:
            return IfThenElse(ana.simplify(~cond), other)
        return IfThenElse(cond, then, other)
    if isinstance(stmt, SeqStmt):
        parts = [simplify_stmt(s, ana) for s in stmt.stmts]
        parts = [p for p in parts if p is not None]
        parts = [p for i, p in enumerate(parts)
                 if not (isinstance(p, Barrier) and i > 0 and isinstance(parts[i - 1], Barrier))]
        return seq(parts) if parts else None
    if isinstance(stmt, (Allocate,)):
        body = simplify_stmt(stmt.body, ana)
        return None if body is None else Allocate(stmt.buffer, body)
    if isinstance(stmt, LetStmt):
        body = simplify_stmt(stmt.body, ana)
        return None if body is None else LetStmt(stmt.var, ana.simplify(stmt.value), body)
    if isinstance(stmt, BufferStore):
        return BufferStore(stmt.buffer, ana.simplify(stmt.value),
                           [ana.simplify(i) for i in stmt.indices])
    if isinstance(stmt, IntrinCall):
        def region(r: BufferRegion) -> BufferRegion:
            return BufferRegion(r.buffer, [ana.simplify(m) for m in r.mins], r.extents, r.axes)
        return IntrinCall(stmt.intrin, [region(r) for r in stmt.inputs],
                          [region(r) for r in stmt.outputs], stmt.reset, stmt.update)
    if isinstance(stmt, Barrier):
        return stmt
    if isinstance(stmt, AllReduce):   # a collective: kept even where its condition is false
        return AllReduce(stmt.combiner, [ana.simplify(v) for v in stmt.values],
                         ana.simplify(stmt.cond), stmt.results, stmt.tags)
    return map_children(stmt, lambda n: ana.simplify(n) if isinstance(n, Expr) else n)


def pad_to_constant(loop: For, lo: Expr, ext: Expr, bound: int) -> For:
    """A vectorized or unrolled loop whose extent varies but never exceeds the constant
    ``bound`` (an attached region clamped at the domain's edge, ``8 - max(0, 8*io - 1) +
    8*io - 1``) runs over ``bound`` iterations with the extra ones guarded off: in vector
    code the guard is a lane mask, so no lane past ``ext`` touches memory."""
    body = IfThenElse(loop.var < lo + ext, loop.body)
    return For(loop.var, lo, Const(bound, ext.dtype), loop.kind, body, loop.thread_tag, loop.annotations)


def check_loops(stmt: Stmt) -> None:
    """Vectorized and unrolled loops have a constant extent (``simplify_stmt`` already padded
    those with a constant upper bound).  A vectorized loop may enclose other loops."""
    def fn(n: Any) -> Any:
        if isinstance(n, For):
            if n.kind in (ForKind.VECTORIZED, ForKind.UNROLLED) and not isinstance(n.extent, Const):
                raise LoweringError(f"{n.kind.value} loop '{n.var.name}' has a non-constant extent "
                                    f"{n.extent!r} with no constant upper bound (at most "
                                    f"{MAX_PADDED_EXTENT}); split it by a constant factor and "
                                    f"{'vectorize' if n.kind is ForKind.VECTORIZED else 'unroll'} "
                                    f"the inner loop")
        return None
    transform(stmt, pre=fn)


def check_thread_extents(stmt: Stmt) -> None:
    """Within one kernel, every loop bound to a thread axis has the same extent (but for
    loops of extent 1 on a hardware axis: they run on its first index only)."""
    from .single_store import is_first_thread_loop

    def walk(n: Any, kernel: "dict | None") -> None:
        if isinstance(n, For) and n.kind is ForKind.THREAD_BINDING:
            if kernel is None:
                kernel = {}
            if is_first_thread_loop(n):
                for c in children(n):
                    if isinstance(c, Stmt):
                        walk(c, kernel)
                return
            prev = kernel.get(n.thread_tag)
            if prev is not None and not _same(prev[0], n.extent):
                raise LoweringError(
                    f"bind: thread axis {n.thread_tag} is bound to loop '{prev[1]}' with extent "
                    f"{prev[0]!r} and to loop '{n.var.name}' with extent {n.extent!r} in one kernel; "
                    f"every loop bound to one thread axis in a kernel needs the same extent")
            kernel.setdefault(n.thread_tag, (n.extent, n.var.name))
        for c in children(n):
            if isinstance(c, Stmt):
                walk(c, kernel)
    for top in (stmt.stmts if isinstance(stmt, SeqStmt) else [stmt]):
        walk(top, None)


def _same(a: Expr, b: Expr) -> bool:
    from ..structural import structural_equal
    return structural_equal(a, b)


def check_scope(stmt: Stmt, sizes: "set | frozenset", name: str) -> None:
    """Every variable the body uses is bound where it is used: by an enclosing loop or
    let, or as a symbolic size of an argument.  A nest built with a variable outside its
    loop (a guard kept around a region whose loops were replaced) would otherwise reach
    a backend: C compilers reject it, and the LLVM backend and the interpreter have no
    value for it."""
    from ..expr import Var
    from ..visitor import children

    def visit(n: Any, scope: frozenset) -> None:
        if isinstance(n, Var):
            if n not in scope:
                raise LoweringError(f"lower '{name}': variable '{n.name}' is used where no "
                                    f"enclosing loop or let defines it and it is no symbolic "
                                    f"size of an argument (an internal error of the schedule's "
                                    f"lowering; please report it with the schedule)")
            return
        if isinstance(n, (For, LetStmt)):
            for c in ((n.min, n.extent) if isinstance(n, For) else (n.value,)):
                visit(c, scope)
            visit(n.body, scope | {n.var})
            return
        for c in children(n):
            visit(c, scope)
    visit(stmt, frozenset(sizes))
