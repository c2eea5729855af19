"""Double buffering with asynchronous copies (``cp.async``, sm_80+).

The lowering's double buffer (``NestBuilder.double_buffered``) is, in a statement
sequence::

    fill(slot 0); sync
    for v: [if v + 1 < n: fill(slot (v+1) % 2)]; compute(slot v % 2); sync

where a fill's stores all go to the double-buffered shared arrays.  On sm_80+ the stores
of a fill that copy a global element unchanged (``S[...] = G[...]``, 4, 8 or 16 bytes:
vector copies included; ``if_then_else(c, G[...], 0)``, padding, as a copy that
zero-fills where ``c`` is false) become ``cp.async`` copies, which do not hold the thread until the
data arrive, and the sequence becomes::

    fill(slot 0) [async]; commit
    for v:
      wait_all; sync                    slot v%2 landed (own copies), for all threads;
                                        and every thread is done reading slot (v+1)%2
      [if v + 1 < n: fill(slot (v+1) % 2) [async]]; commit
      compute(slot v % 2)               overlaps the copies in flight
    sync                                the slots are free again after the loop

still one barrier per iteration.  Stores that compute something (a cast, arithmetic) stay
ordinary stores: they are ordered the same way.  Under emulation a copy reads global
memory when issued and lands in shared memory at the thread's wait; an access to its
destination in between is reported, so a missing wait is caught (emu.h).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from tdsl.expr import BufferLoad, Const, Expr, Select
from tdsl.stmt import Barrier, BufferStore, For, ForKind, IfThenElse, SeqStmt, StorageScope
from tdsl.visitor import free_vars, post_order_visit

#: Bytes one ``cp.async.ca`` may copy.
ASYNC_SIZES = (4, 8, 16)


@dataclass
class Pipeline:
    """``items[start:loop]`` are the prologue fills and their barrier; ``items[loop]`` the
    double-buffered loop; ``buffers`` the shared arrays its fills write."""
    start: int
    loop: int
    buffers: frozenset


def _stores(s: Any) -> list:
    out: list = []
    post_order_visit(s, lambda n: out.append(n) if isinstance(n, BufferStore) else None)
    return out


def async_source(s: BufferStore, buffers: "set | frozenset") -> "Optional[tuple[BufferLoad, Expr | None]]":
    """(the global load, its condition) of a store into one of ``buffers`` that a
    ``cp.async`` can do: ``S[...] = G[...]`` (condition None), or ``S[...] =
    if_then_else(c, G[...], 0)`` (padding: the copy zero-fills where ``c`` is false)."""
    if id(s.buffer) not in buffers or s.buffer.dtype.itemsize not in ASYNC_SIZES:
        return None
    v, cond = s.value, None
    if isinstance(v, Select) and isinstance(v.false_value, Const) and v.false_value.value == 0:
        v, cond = v.true_value, v.cond
    if isinstance(v, BufferLoad) and v.buffer.scope is StorageScope.GLOBAL and \
            v.dtype == s.buffer.dtype:
        return v, cond
    return None


def is_async_copy(s: BufferStore, buffers: "set | frozenset") -> bool:
    """A store into one of ``buffers`` a ``cp.async`` can do (see ``async_source``)."""
    return async_source(s, buffers) is not None


def _next_slot(s: BufferStore, loop: For, cond: Expr) -> bool:
    """``s`` writes slot ``(v + 1) % 2`` of a buffer of two (``v`` the loop's variable,
    known in its range and where the fill's condition holds)."""
    from tdsl.arith import Analyzer
    from tdsl.tensor import Range
    two = s.buffer.shape[0] if s.buffer.shape else None
    if not (isinstance(two, Const) and two.value == 2):
        return False
    ana = Analyzer()
    with ana.bind(loop.var, Range(loop.min, loop.extent)), ana.constraint(cond):
        d = ana.simplify(s.indices[0] - (loop.var + 1) % 2)
    return isinstance(d, Const) and d.value == 0


def plan(renderer: Any, items: list) -> "dict[int, Pipeline]":
    """The double-buffered loops of one statement sequence, by the index of their first
    prologue statement (sm_80+, and only where some fill store can be a ``cp.async``)."""
    if renderer.target.gpu.sm < 80:
        return {}
    out: dict[int, Pipeline] = {}
    for k, loop in enumerate(items):
        p = _match(items, k, loop)
        if p is not None:
            out[p.start] = p
    return out


def _match(items: list, k: int, loop: Any) -> "Optional[Pipeline]":
    if not (isinstance(loop, For) and loop.kind in (ForKind.SERIAL, ForKind.UNROLLED)
            and isinstance(loop.body, SeqStmt) and len(loop.body.stmts) >= 3):
        return None
    first, last = loop.body.stmts[0], loop.body.stmts[-1]
    if not (isinstance(first, IfThenElse) and first.else_case is None and isinstance(last, Barrier)
            and loop.var in free_vars(first.cond)):
        return None
    fill = first.then_case
    stores = _stores(fill)
    bufs = {id(s.buffer) for s in stores}
    if not stores or any(s.buffer.scope is not StorageScope.SHARED for s in stores):
        return None
    # the fill writes slot (v + 1) % 2 of two (so the compute, on slot v % 2, never reads
    # what is in flight)
    if any(not _next_slot(s, loop, first.cond) for s in stores):
        return None
    nf = len(fill.stmts) if isinstance(fill, SeqStmt) else 1
    start = k - 1 - nf
    if start < 0 or not isinstance(items[k - 1], Barrier):
        return None
    for pro in items[start:k - 1]:
        ps = _stores(pro)
        if not ps or any(id(s.buffer) not in bufs for s in ps):
            return None
    if not any(is_async_copy(s, bufs) for s in stores):
        return None
    return Pipeline(start, k, frozenset(bufs))


def render(renderer: Any, items: list, p: Pipeline) -> None:
    """Emit the prologue and the loop of ``p`` with asynchronous fills."""
    loop: For = items[p.loop]
    renderer.helpers.add("async")
    renderer.emit(f"// double buffer over '{loop.var.name}': cp.async fills, one barrier per "
                  f"iteration")
    prev = renderer.async_dst
    renderer.async_dst = p.buffers
    try:
        for s in items[p.start:p.loop - 1]:
            renderer.stmt(s)
    finally:
        renderer.async_dst = prev
    renderer.emit("tdsl_cp_async_commit();")
    first = loop.body.stmts[0]
    body = SeqStmt(loop.body.stmts[1:-1])
    renderer.pipelined[id(loop.body)] = (first, body, p.buffers)
    try:
        renderer.stmt(loop)
    finally:
        del renderer.pipelined[id(loop.body)]
    renderer.barrier(Barrier())


def render_body(renderer: Any, seq: SeqStmt) -> None:
    """The body of a pipelined loop (the renderer's ``seq`` calls it inside the loop)."""
    first, body, buffers = renderer.pipelined[id(seq)]
    renderer.emit("tdsl_cp_async_wait_all();")
    renderer.barrier(Barrier())
    prev = renderer.async_dst
    renderer.async_dst = buffers
    try:
        renderer.stmt(first)
    finally:
        renderer.async_dst = prev
    renderer.emit("tdsl_cp_async_commit();")
    renderer.stmt(body)
