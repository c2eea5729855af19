"""Where each stage's outputs live: parameter buffers, or buffers lowering allocates
(the whole domain at root, the inferred region when attached with compute_at)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from ..arith import Analyzer
from ..expr import Const, Expr
from ..stmt import Buffer
from .bound import StageBounds, enclosing_scope, storage_scope

if TYPE_CHECKING:
    from tdsl.schedule import Stage


@dataclass
class Storage:
    """Where a stage's outputs live: one buffer per output and the region origin."""

    buffers: list[Buffer]
    offsets: list[Expr]
    allocated: bool      # needs an Allocate (not a parameter)
    #: the buffer holds the stage's whole (unclamped) region, out-of-domain points
    #: included: its nest may run unguarded there (padding.py)
    covers_region: bool = False


def aligned_strides(shape: Sequence[Expr], align: dict[int, tuple[int, int]], ana: Analyzer
                    ) -> "tuple[Expr, ...] | None":
    """Row-major strides where dimension d's stride is k*factor + offset (storage_align)."""
    if not align:
        return None
    strides: list[Expr] = [Const(1, "int64")] * len(shape)
    acc: Expr = Const(1, "int64")
    for d in range(len(shape) - 1, -1, -1):
        if d in align:
            factor, offset = align[d]
            acc = ana.simplify(((acc + (factor - offset) - 1) // factor) * factor + offset) \
                if not isinstance(acc, Const) else \
                Const(-(-(acc.value - offset) // factor) * factor + offset, "int64")
        strides[d] = acc
        acc = ana.simplify(acc * shape[d])
    return tuple(strides)


def allocated_storage(st: "Stage", bounds: dict["Stage", StageBounds], ana: Analyzer) -> Storage:
    """A buffer for a stage that is not an argument: its declared shape at root; when
    attached, the largest region it computes (a constant where one is known) at the
    region's origin.  The region's extent depends on the loops around the stage, so it is
    bounded knowing those loops."""
    from tdsl.schedule.stage import AttachType
    from tdsl.stmt import StorageScope
    from .bound import in_kernel
    op = st.op
    b = bounds[st]
    # a kernel's staged (local, shared) buffer holds its whole unclamped region, so that
    # its out-of-domain points can be zero filled or computed unguarded (padding.py)
    staged = in_kernel(st) and storage_scope(st) is not StorageScope.GLOBAL
    covers = st.attach_type is not AttachType.ROOT and staged
    if st.attach_type is AttachType.ROOT:
        shape = [iv.dom.extent for iv in op.axis]
        offsets: list[Expr] = [Const(0, "int64")] * len(op.axis)
    else:
        shape, offsets = [], []
        with enclosing_scope(st, bounds, ana):
            for iv in op.axis:
                r = b.root_ranges[iv]
                hi = ana.const_int_bound(r.extent)[1]
                if r.alloc_bound is not None:
                    hi = r.alloc_bound if hi is None else min(hi, r.alloc_bound)
                declared = iv.dom.extent
                dhi = ana.const_int_bound(declared)[1]
                if hi is not None and (dhi is None or hi <= dhi or staged):
                    shape.append(Const(hi, "int64"))
                else:
                    shape.append(declared)
                    covers = False
                offsets.append(r.min)
    strides = aligned_strides(shape, st.storage_alignment, ana)
    # (the outputs of an opaque operation may differ in shape; they are computed at root)
    bufs = [Buffer(t.name, shape if len(op.outputs) == 1 or st.attach_type is not
                   AttachType.ROOT else list(t.shape), t.dtype, strides, storage_scope(st))
            for t in op.outputs]
    return Storage(bufs, offsets, True, covers)
