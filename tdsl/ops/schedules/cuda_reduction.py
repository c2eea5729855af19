"""Default CUDA schedules of reductions: a warp (or a block) per row, cross-thread.

A row reduction (the reduced axes include the input's innermost one, so consecutive
lanes read consecutive elements) binds its reduction loop to ``threadIdx.x``: each lane
reduces a strided share of the row, then the lanes combine their shares with warp
shuffles (shared memory across warps when a block works on one row).  Rows go to
``threadIdx.y`` (several rows per block) and ``blockIdx.x``.

A row group (softmax, log_softmax, layernorm, rmsnorm: an elementwise output and the
row reductions it reads) becomes one kernel: per row, each reduction is computed by the
row's lanes into shared memory, then the same lanes write the output row; the per-row
temporaries (softmax's exp) stay inlined (recomputed, cheaper than a round trip).

Small reductions (pooling windows) and reductions along an outer axis keep one thread
per output: there the threads of a warp read consecutive outputs.
"""
from __future__ import annotations

from typing import Any

from tdsl.expr import Const, TensorLoad
from tdsl.schedule import Schedule, Stage
from tdsl.tensor import IterVar, thread_axis
from tdsl.visitor import free_vars, post_order_visit

from .graph import RowGroup, row_group

WARP = 32
#: rows per block when a warp reduces a row (4 warps, 128 threads)
ROWS_PER_BLOCK = 4
#: lanes per row when a block reduces a row (rows of at least BLOCK_ROW_MIN elements)
BLOCK_LANES = 256
BLOCK_ROW_MIN = 4096
#: reductions along rows shorter than this keep one thread per output
MIN_CROSS_THREAD = WARP


def _const(e: Any) -> "int | None":
    return int(e.value) if isinstance(e, Const) else None


def _extent(axes: "list[IterVar]") -> "int | None":
    """The constant product of the axes' extents, or None if one is symbolic."""
    total = 1
    for iv in axes:
        c = _const(iv.dom.extent)
        if c is None:
            return None
        total *= c
    return total


def _fuse(st: Stage, axes: "list[IterVar]") -> IterVar:
    return axes[0] if len(axes) == 1 else st.fuse(*axes)


def _lanes(length: "int | None") -> int:
    """Lanes per row: a warp, or a block for long rows of known length."""
    return BLOCK_LANES if length is not None and length >= BLOCK_ROW_MIN else WARP


def _row_length(st: Stage) -> "int | None | bool":
    """How many consecutive elements of a row the reduction reads: the extent of the
    reduction axes that index the innermost dimension of some load (None: symbolic; False:
    no load is indexed that way, e.g. a column sum or a pooling window's height)."""
    red = {iv.var: iv for iv in st.op.reduce_axis}
    best: "int | None | bool" = False

    def fn(n: Any) -> None:
        nonlocal best
        if not isinstance(n, TensorLoad) or not n.indices:
            return
        used = [red[v] for v in free_vars(n.indices[-1]) if v in red]
        if used:
            length = _extent(used)
            if length is None or best is None:
                best = None
            elif best is False or length > best:
                best = length
    for b in st.op.body:
        post_order_visit(b, fn)
    return best


def is_row_reduction(st: Stage) -> bool:
    """A reduction worth reducing across threads: it reads rows of at least a warp's
    length (or of unknown length) -- not pooling windows, not column sums."""
    if not st.op.reduce_axis:
        return False
    n = _row_length(st)
    return n is None or (n is not False and n >= MIN_CROSS_THREAD)


def _cross_thread(st: Stage, lanes: int) -> None:
    """Bind the stage's (fused) reduction loop, split by ``lanes``, to threadIdx.x."""
    k = _fuse(st, [iv for iv in st.leaf_iter_vars if iv in st.op.reduce_axis])
    _, ki = st.split(k, factor=lanes)
    st.bind(ki, thread_axis("threadIdx.x"))


def schedule_reduction(s: Schedule, st: Stage) -> bool:
    """A row reduction on its own: rows over blocks and threadIdx.y, lanes across the row.
    Returns False (nothing done) where one thread per output fits better."""
    if not is_row_reduction(st):
        return False
    lanes = _lanes(_extent(list(st.op.reduce_axis)))
    rows_per_block = ROWS_PER_BLOCK if lanes == WARP else 1
    r = _fuse(st, list(st.op.axis))
    rb, ry = st.split(r, factor=rows_per_block)
    st.bind(rb, thread_axis("blockIdx.x"))
    st.bind(ry, thread_axis("threadIdx.y"))
    _cross_thread(st, lanes)
    return True


def schedule_row_group(s: Schedule, g: RowGroup) -> bool:
    """softmax / layernorm / rmsnorm: one kernel, a warp (or block) per row.  Returns False
    where the group does not have that shape (then each stage is scheduled on its own)."""
    y = g.out
    axes = list(y.op.axis)
    rows = [axes[p] for p in g.row_axes]
    inner = [iv for iv in axes if iv not in rows]
    if not rows or not all(is_row_reduction(r) for r in g.reductions):
        return False
    if inner and inner[-1] is not axes[-1]:
        return False
    length = _extent(inner) if inner else _extent(list(g.reductions[0].op.reduce_axis))
    lanes = _lanes(length)
    rows_per_block = ROWS_PER_BLOCK if lanes == WARP else 1
    if rows != axes[:len(rows)]:
        y.reorder(*(rows + inner))
    # one value per row (mean, argmax): no loop of y is bound to threadIdx.x; lowering stores
    # it from lane 0 only (tdsl/lowering/single_store.py)
    inner_loops = list(y.split(_fuse(y, inner), factor=lanes)) if inner else []
    # rows of the last row axis share a block (the reductions' regions stay exact boxes);
    # the other row axes join the block index
    rlo, ry = y.split(rows[-1], factor=rows_per_block)
    y.reorder(*rows[:-1], rlo, ry, *inner_loops[::-1])
    rb = _fuse(y, rows[:-1] + [rlo])
    y.bind(rb, thread_axis("blockIdx.x"))
    y.bind(ry, thread_axis("threadIdx.y"))
    if inner_loops:
        y.bind(inner_loops[1], thread_axis("threadIdx.x"))
    for st in g.reductions:    # producers first (layernorm's variance reads its mean)
        st.compute_at(y, ry)
        # the block's rows (its region in shared memory), one per threadIdx.y, as in y
        st.bind(_fuse(st, list(st.op.axis)), thread_axis("threadIdx.y"))
        _cross_thread(st, lanes)
    return True


def try_row_group(s: Schedule, st: Stage, bodies: dict) -> "list[Stage] | None":
    """The stages scheduled as a row group with output ``st``, or None."""
    g = row_group(s, st, bodies)
    if g is None or g.temps and any(not t.attach_type.value == "inline" for t in g.temps):
        return None
    if not schedule_row_group(s, g):
        return None
    return [st, *g.reductions]


__all__ = ["schedule_reduction", "schedule_row_group", "try_row_group", "is_row_reduction"]
