"""Barrier planning: drop a ``__syncthreads()`` that orders nothing.

The lowering puts a barrier after every cooperative fetch, so a k step of a tiled kernel
reads ``sync; fetch A; sync; fetch B; sync; compute``.  In a statement sequence
``b1; X; b2; Y; b3`` (X and Y with no barrier inside), ``b2`` is needed only if X and Y
conflict on memory a block shares: a buffer (shared or global: a barrier orders both
within the block) written by one and read or written by the other.  b1 and b3 still
order X and Y against everything before and after, so dropping b2 is safe; the test
runs left to right with the merged segment (one barrier for several fetches).
"""
from __future__ import annotations

from typing import Any, Sequence

from tdsl.stmt import Barrier, BufferStore, IntrinCall, StorageScope
from tdsl.expr import BufferLoad
from tdsl.visitor import post_order_visit


def _accesses(stmts: Sequence[Any]) -> "tuple[set, set, bool]":
    """(buffers read, buffers written, contains a barrier) of ``stmts``; local (per-thread)
    buffers are left out."""
    reads: set = set()
    writes: set = set()
    barrier = False

    def shared(buf: Any) -> bool:
        return buf.scope is not StorageScope.LOCAL

    def fn(n: Any) -> None:
        nonlocal barrier
        if isinstance(n, Barrier):
            barrier = True
        elif isinstance(n, BufferStore) and shared(n.buffer):
            writes.add(n.buffer)
        elif isinstance(n, BufferLoad) and shared(n.buffer):
            reads.add(n.buffer)
        elif isinstance(n, IntrinCall):
            reads.update(r.buffer for r in n.inputs if shared(r.buffer))
            writes.update(r.buffer for r in n.outputs if shared(r.buffer))
            reads.update(r.buffer for r in n.outputs if shared(r.buffer))
    for s in stmts:
        post_order_visit(s, fn)
    return reads, writes, barrier


def redundant(items: Sequence[Any]) -> set[int]:
    """Indices of the barriers of ``items`` (one statement sequence) that can be dropped."""
    bars = [i for i, s in enumerate(items) if isinstance(s, Barrier)]
    drop: set[int] = set()
    if len(bars) < 3:
        return drop
    start = bars[0]                        # the merged segment runs from after ``start``
    for j, k in zip(bars[1:], bars[2:]):
        rx, wx, bx = _accesses(items[start + 1:j])
        ry, wy, by = _accesses(items[j + 1:k])
        if not (bx or by) and not (wx & (ry | wy)) and not (rx & wy):
            drop.add(j)
        else:
            start = j
    return drop
