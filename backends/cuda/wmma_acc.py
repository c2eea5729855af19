"""WMMA accumulators held in registers across the reduction loop.

A tensorized matmul lowers to::

    for i, j in 16x16: C[tile] = 0                # every lane of the warp zero-fills the tile
    for ko: ... wmma(C[tile] += A[..] B[..])      # each call loads C, mma, stores C

which emitted call by call means a load and a store of the accumulator tile per k step,
and 32 lanes racing to write the same zeros.  When the pattern is exactly that (a zero
initialization of the call's output tile directly followed by a serial loop whose body
contains the one WMMA call on that tile, at a place that does not depend on the loop, and
nothing else in the loop touches the tile's buffer), the code becomes::

    tdsl_wmma_acc acc; tdsl_wmma_fill_acc(acc, 0.0f);      // a fragment: registers
    for ko: ... load a, b; mma(acc, a, b, acc)               // no C traffic in the loop
    __syncwarp(); tdsl_wmma_store_acc_row(C tile, acc, ld);  // once

``plan`` finds it; ``emit_wmma`` (``wmma.py``) uses the fragment named by the renderer's
``wmma_acc`` map instead of loading and storing the tile.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from tdsl.expr import BufferLoad, Const
from tdsl.stmt import BufferStore, For, ForKind, IntrinCall, LetStmt, Stmt
from tdsl.visitor import free_vars, post_order_visit

TILE = 16


@dataclass
class AccPlan:
    """The WMMA call whose accumulator lives in a fragment across ``loop``."""
    init: For
    loop: For
    call: IntrinCall


def _is_wmma(call: Any) -> bool:
    from .wmma import emit_wmma
    return isinstance(call, IntrinCall) and \
        getattr(call.intrin, "impls", {}).get("cuda") is emit_wmma


def _bound_vars(s: Stmt) -> set:
    out: set = set()

    def fn(n: Any) -> None:
        if isinstance(n, (For,)):
            out.add(n.var)
        elif isinstance(n, LetStmt):
            out.add(n.var)
    post_order_visit(s, fn)
    return out


def _init_nest(s: Stmt) -> "Optional[tuple[list[For], BufferStore]]":
    """``for a in 16: for b in 16: buf[...] = 0`` (serial loops from 0)."""
    loops = []
    while isinstance(s, For) and s.kind is ForKind.SERIAL and len(loops) < 2:
        if not (isinstance(s.min, Const) and s.min.value == 0 and isinstance(s.extent, Const)
                and s.extent.value == TILE):
            return None
        loops.append(s)
        s = s.body
    if len(loops) != 2 or not isinstance(s, BufferStore):
        return None
    if not (isinstance(s.value, Const) and float(s.value.value) == 0.0):
        return None
    return loops, s


def _find_calls(loop: For) -> "Optional[IntrinCall]":
    calls: list = []

    def fn(n: Any) -> None:
        if isinstance(n, IntrinCall):
            calls.append(n)
    post_order_visit(loop.body, fn)
    if len(calls) != 1 or not _is_wmma(calls[0]):
        return None
    return calls[0]


def _touches(node: Any, buf: Any, skip: Any) -> bool:
    found = False

    def fn(n: Any) -> None:
        nonlocal found
        if n is skip:
            return
        if isinstance(n, (BufferLoad, BufferStore)) and n.buffer is buf:
            found = True
        if isinstance(n, IntrinCall) and n is not skip and any(
                r.buffer is buf for r in (*n.inputs, *n.outputs)):
            found = True
    post_order_visit(node, fn)
    return found


def plan(renderer: Any, first: Stmt, second: Stmt) -> "Optional[AccPlan]":
    """An ``AccPlan`` if ``first; second`` is a zero-init of a WMMA tile then its k loop."""
    nest = _init_nest(first)
    if nest is None or not isinstance(second, For) or second.kind is not ForKind.SERIAL:
        return None
    (la, lb), store = nest
    call = _find_calls(second)
    if call is None:
        return None
    (rc,) = call.outputs
    if rc.buffer is not store.buffer:
        return None
    inner = _bound_vars(second)
    if any(free_vars(m) & inner for m in rc.mins):
        return None                       # the tile moves with the loop
    if _touches(second.body, rc.buffer, call):
        return None                       # the loop reads or writes the buffer elsewhere
    # the init writes exactly the call's tile: offset(a, b) == base + a*s_a + b*s_b with
    # {s_a, s_b} the tile's strides along its two dimensions
    ana = renderer.ana
    off = renderer.flat_offset(store.buffer, store.indices)
    base = renderer.flat_offset(rc.buffer, rc.mins)
    strides = rc.buffer.effective_strides()
    dims = [d for d, e in enumerate(rc.extents) if not (isinstance(e, Const) and e.value == 1)]
    if len(dims) != 2 or any(not (isinstance(rc.extents[d], Const) and rc.extents[d].value == TILE)
                             for d in dims):
        return None
    s0, s1 = strides[dims[0]], strides[dims[1]]
    for sa, sb in ((s0, s1), (s1, s0)):
        diff = ana.simplify(off - (base + la.var * sa + lb.var * sb))
        if isinstance(diff, Const) and diff.value == 0:
            return AccPlan(first, second, call)
    return None


def render(renderer: Any, p: AccPlan) -> None:
    """Emit the fill, the loop (its WMMA call using the fragment) and the final store."""
    from .codegen import IntrinContext
    from .wmma import store_accumulator
    name = renderer.names.fresh("wmma_acc")
    renderer.helpers.add("wmma")
    renderer.wmma_functions.add("tdsl_wmma_fill_acc")
    renderer.emit(f"tdsl_wmma_acc {name};  // the accumulator tile, in registers across "
                  f"'{p.loop.var.name}'")
    renderer.emit(f"tdsl_wmma_fill_acc({name}, 0.0f);")
    renderer.wmma_acc[id(p.call)] = name
    try:
        renderer.stmt(p.loop)
    finally:
        del renderer.wmma_acc[id(p.call)]
    store_accumulator(p.call, IntrinContext(renderer, p.call), name)
