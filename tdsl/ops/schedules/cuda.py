"""Default CUDA schedules: simple, correct, one kernel per non-inlined stage.

Each root stage's output loops are fused and split into blocks of threads
(``blockIdx.x`` x ``threadIdx.x``); a reduction along rows (and softmax, the norms) is
reduced across a warp or block per row (``cuda_reduction.py``), others serially per thread.  An anchor
(matmul, conv2d) whose only consumer is an elementwise stage is computed per thread
inside that stage's kernel (its epilogue, one kernel); every other stage is its own
kernel.  Injective producers are inlined (packing and padding stages included).
"""
from __future__ import annotations

from tdsl.opaque import is_opaque
from tdsl.lowering.inline import inlined_bodies
from tdsl.schedule import Schedule, Stage
from tdsl.schedule.stage import AttachType
from tdsl.target import Target
from tdsl.tensor import IterVar, thread_axis

from ..tags import Pattern
from . import cuda_reduction
from .graph import fusable_anchor, is_inlined, stage_pattern

#: Threads per block for elementwise kernels and for reductions.
THREADS_INJECTIVE = 256
THREADS_REDUCTION = 128


def _bind_flat(st: Stage, threads: int) -> IterVar:
    axes = list(st.op.axis)
    f = axes[0] if len(axes) == 1 else st.fuse(*axes)
    bx, tx = st.split(f, factor=threads)
    st.bind(bx, thread_axis("blockIdx.x"))
    st.bind(tx, thread_axis("threadIdx.x"))
    return tx


def apply(s: Schedule, target: Target) -> None:
    bodies = inlined_bodies(s)
    done: set = set()
    for st in list(reversed(s.stages)):
        if st.is_placeholder or is_inlined(st) or st in done or st.attach_type is AttachType.SCOPE \
                or is_opaque(st.op):   # extern/scan stages have no loops to schedule
            continue
        pat = stage_pattern(st)
        if pat is Pattern.INJECTIVE:
            a = fusable_anchor(s, st, bodies)
            group = cuda_reduction.try_row_group(s, st, bodies) if a is None else None
            if group is not None:   # softmax, norms: a warp (or block) per row, one kernel
                done.update(group)
                continue
            tx = _bind_flat(st, THREADS_INJECTIVE)
            if a is not None:
                a.set_scope("local")
                a.compute_at(st, tx)
                done.add(a)
        elif not cuda_reduction.schedule_reduction(s, st):   # cross-thread where it pays
            _bind_flat(st, THREADS_REDUCTION if st.op.reduce_axis else THREADS_INJECTIVE)
        done.add(st)
