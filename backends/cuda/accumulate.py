"""Reduction accumulators in registers, tail guards outside the reduction loop.

Lowering keeps a kernel's tail guards innermost (no barrier may end up under a
thread-dependent condition), and a reduction whose output lives in global memory updates
it in place.  A naive bound matmul with a tail therefore lowers to::

    if i < n and j < m: C[i, j] = 0
    for k in range(K):
        if i < n and j < m: C[i, j] = C[i, j] + A[i, k] * B[k, j]

which, emitted as is, loads and stores ``C`` in global memory at every ``k`` step.  Two
rewrites of each kernel's IR turn it into::

    if i < n and j < m:
        C_acc[0] = 0                               # a 1-element local array: a register
        for k in range(K): C_acc[0] = C_acc[0] + A[i, k] * B[k, j]
        C[i, j] = C_acc[0]

``hoist_guards``: a serial loop whose whole body is ``if c`` with ``c`` independent of the
loop (and reading no memory) becomes ``if c: for ...``; adjacent ``if c`` with equal
conditions merge.  Neither moves a barrier under a condition it was not already under.

``promote_accumulators``: a global store ``X[I] = v`` directly followed by a serial loop
in which every access to ``X`` is at ``I`` (``I`` invariant in the loop) keeps ``X[I]`` in a
local ``X_acc`` for the loop and stores it once after.  ``if c: X[I] = v`` followed by such
a loop whose accesses to ``X`` all sit under ``if c`` works the same (the final store is
under ``if c``), so a guard that could not be hoisted past a barrier still gets a register.
"""
from __future__ import annotations

from typing import Any, Optional

from tdsl.arith import Analyzer
from tdsl.expr import BufferLoad, Const, Expr
from tdsl.stmt import (AllReduce, Allocate, Buffer, BufferStore, For, ForKind, IfThenElse,
                       IntrinCall, LetStmt, SeqStmt, Stmt, StorageScope)
from tdsl.structural import structural_equal
from tdsl.visitor import children, free_vars, map_children, post_order_visit, transform

#: Loops a guard may be hoisted out of and an accumulator kept in a register across.
_SEQUENTIAL = (ForKind.SERIAL, ForKind.UNROLLED)


def optimize_kernel(root: Stmt) -> Stmt:
    """``hoist_guards`` then ``promote_accumulators`` on one kernel's IR."""
    return promote_accumulators(hoist_guards(root))


# ---- guards ----------------------------------------------------------------------------------
def _reads_memory(e: Expr) -> bool:
    found = False

    def fn(n: Any) -> None:
        nonlocal found
        if isinstance(n, BufferLoad):
            found = True
    post_order_visit(e, fn)
    return found


def _merge_guards(stmts: tuple) -> list:
    out: list = []
    for s in stmts:
        prev = out[-1] if out else None
        if (isinstance(s, IfThenElse) and s.else_case is None and isinstance(prev, IfThenElse)
                and prev.else_case is None and not _reads_memory(s.cond)
                and structural_equal(prev.cond, s.cond)):
            out[-1] = IfThenElse(prev.cond, _seq([prev.then_case, s.then_case]))
        else:
            out.append(s)
    return out


def _seq(parts: list) -> Stmt:
    flat: list = []
    for p in parts:
        flat.extend(p.stmts if isinstance(p, SeqStmt) else [p])
    return flat[0] if len(flat) == 1 else SeqStmt(flat)


def hoist_guards(stmt: Stmt) -> Stmt:
    """Loop-invariant guards moved out of the serial loops they fill (bottom-up)."""
    def post(n: Any) -> Any:
        if isinstance(n, SeqStmt):
            merged = _merge_guards(n.stmts)
            return _seq(merged) if len(merged) != len(n.stmts) else None
        if (isinstance(n, For) and n.kind in _SEQUENTIAL and isinstance(n.body, IfThenElse)
                and n.body.else_case is None and n.var not in free_vars(n.body.cond)
                and not _reads_memory(n.body.cond)):
            g = n.body
            return IfThenElse(g.cond, For(n.var, n.min, n.extent, n.kind, g.then_case,
                                          n.thread_tag, n.annotations))
        return None
    return transform(stmt, post=post)


# ---- accumulators ------------------------------------------------------------------------------
def _bound_vars(s: Stmt) -> set:
    out: set = set()

    def fn(n: Any) -> None:
        if isinstance(n, (For, LetStmt)):
            out.add(n.var)
    post_order_visit(s, fn)
    return out


def _same_index(a: tuple, b: tuple, ana: Analyzer) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if structural_equal(x, y):
            continue
        d = ana.simplify(x - y)
        if not (isinstance(d, Const) and d.value == 0):
            return False
    return True


def _accesses_ok(loop: For, buf: Buffer, idx: tuple, cond: "Expr | None", ana: Analyzer) -> bool:
    """Every access to ``buf`` in ``loop`` is a load or store at ``idx`` (under ``if cond``
    when ``cond`` is given) and at least one store is among them."""
    stores = 0

    def walk(n: Any, guarded: bool) -> bool:
        nonlocal stores
        if isinstance(n, (BufferLoad, BufferStore)) and n.buffer is buf:
            if not _same_index(tuple(n.indices), idx, ana) or (cond is not None and not guarded):
                return False
            stores += isinstance(n, BufferStore)
        elif isinstance(n, IntrinCall) and any(r.buffer is buf for r in (*n.inputs, *n.outputs)):
            return False
        elif isinstance(n, AllReduce) and any(r is buf for r in n.results):
            return False
        elif isinstance(n, For) and n.kind is ForKind.VECTORIZED and _mentions(n, buf):
            return False            # lanes of one vector access: left to vectorize.py
        if isinstance(n, IfThenElse) and cond is not None and not guarded \
                and structural_equal(n.cond, cond):
            return walk(n.cond, False) and walk(n.then_case, True) and \
                (n.else_case is None or walk(n.else_case, False))
        return all(walk(c, guarded) for c in children(n) if not isinstance(c, (str, int, float)))

    return walk(loop.body, False) and stores > 0


def _mentions(n: Any, buf: Buffer) -> bool:
    found = False

    def fn(x: Any) -> None:
        nonlocal found
        if isinstance(x, (BufferLoad, BufferStore)) and x.buffer is buf:
            found = True
    post_order_visit(n, fn)
    return found


def _init(s: Stmt) -> "Optional[tuple[BufferStore, Expr | None]]":
    """``X[I] = v`` or ``if c: X[I] = v`` (X global, I reading no memory)."""
    cond = None
    if isinstance(s, IfThenElse) and s.else_case is None and not _reads_memory(s.cond):
        cond, s = s.cond, s.then_case
    if not (isinstance(s, BufferStore) and s.buffer.scope is StorageScope.GLOBAL):
        return None
    if any(_reads_memory(i) for i in s.indices) or _mentions(s.value, s.buffer):
        return None
    return s, cond


def _promote(init: Stmt, loop: Stmt, ana: Analyzer) -> "Optional[Stmt]":
    found = _init(init)
    if found is None or not isinstance(loop, For) or loop.kind not in _SEQUENTIAL:
        return None
    store, cond = found
    buf, idx = store.buffer, tuple(store.indices)
    inner = _bound_vars(loop)
    if any(free_vars(i) & inner for i in idx) or (cond is not None and free_vars(cond) & inner):
        return None
    if not _accesses_ok(loop, buf, idx, cond, ana):
        return None
    acc = Buffer(f"{buf.name}_acc", [1], buf.dtype, scope=StorageScope.LOCAL)
    zero = (Const(0, "int32"),)

    def pre(n: Any) -> Any:
        if isinstance(n, BufferLoad) and n.buffer is buf:
            return BufferLoad(acc, zero)
        if isinstance(n, BufferStore) and n.buffer is buf:
            return BufferStore(acc, transform(n.value, pre=pre), zero)
        return None
    body = transform(loop, pre=pre)
    final: Stmt = BufferStore(buf, BufferLoad(acc, zero), idx)
    if cond is not None:
        final = IfThenElse(cond, final)
    return Allocate(acc, SeqStmt([BufferStore(acc, store.value, zero), body, final]))


def promote_accumulators(stmt: Stmt) -> Stmt:
    """Global reduction outputs kept in registers across their (outermost) update loop."""
    ana = Analyzer()

    def rewrite(n: Any) -> Any:
        if isinstance(n, For) and n.kind is ForKind.VECTORIZED:
            return n                  # its body is vector code: left as is
        if isinstance(n, SeqStmt):
            out: list = []
            i = 0
            while i < len(n.stmts):
                s = n.stmts[i]
                nxt = n.stmts[i + 1] if i + 1 < len(n.stmts) else None
                p = _promote(s, nxt, ana) if nxt is not None else None
                if p is not None:
                    out.append(p)
                    i += 2
                    continue
                out.append(rewrite(s))
                i += 1
            return SeqStmt(out)
        if isinstance(n, Stmt):
            return map_children(n, lambda c: rewrite(c) if isinstance(c, Stmt) else c)
        return n
    return rewrite(stmt)
