"""Default CUDA schedules: one kernel per non-inlined stage.

matmul / dense / batch_matmul (with their elementwise epilogue) get 2-level tiles
(``cuda_gemm.py``); fp16/bf16 products with fp32 accumulation the tensor-core microkernel
on sm_80+ (``cuda_tc.py``), fp16 ones WMMA tiles before; an NCHW conv2d is an
implicit GEMM with shared-memory tiles (``cuda_conv.py``), on the tensor-core microkernel
for fp16/bf16 operands with fp32 accumulation on sm_80+ (``cuda_tc_conv.py``); so is a
hand-written one (``cuda_conv_form.py``).
Elementwise stages run 4 consecutive outputs per thread as a vector loop (float4 where
aligned).  Other root
stages' output loops are fused and split into blocks of threads (``blockIdx.x`` x
``threadIdx.x``); a reduction along rows (and softmax, the norms) is reduced across a
warp or block per row (``cuda_reduction.py``), others serially per thread.  An anchor
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

from ..tags import OpKind, Pattern
from . import cuda_conv, cuda_conv_form, cuda_gemm, cuda_reduction, cuda_tc_conv
from .cuda_attention import schedule_attention
from .graph import fusable_anchor, is_inlined, stage_kind, stage_pattern

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


#: Consecutive elements per thread of an elementwise kernel (one float4 where aligned).
VECTOR = 4


def _bind_vector(st: Stage, threads: int) -> IterVar:
    """Elementwise: ``VECTOR`` consecutive outputs per thread as one vector loop (float4
    loads and stores where the analyzer proves them aligned and contiguous, the scalar
    loop for tails, gathers and misaligned arrays)."""
    axes = list(st.op.axis)
    f = axes[0] if len(axes) == 1 else st.fuse(*axes)
    bx, rest = st.split(f, factor=threads * VECTOR)
    tx, vi = st.split(rest, factor=VECTOR)
    st.bind(bx, thread_axis("blockIdx.x"))
    st.bind(tx, thread_axis("threadIdx.x"))
    st.vectorize(vi)
    return tx


def apply(s: Schedule, target: Target) -> None:
    bodies = inlined_bodies(s)
    done: set = set()
    for st in list(reversed(s.stages)):
        if st.is_placeholder or is_inlined(st) or st in done or st.attach_type is AttachType.SCOPE \
                or is_opaque(st.op):   # extern/scan stages have no loops to schedule
            continue
        pat = stage_pattern(st)
        if stage_kind(st) is OpKind.ATTENTION_OUT and \
                (got := schedule_attention(s, st, target=target)):
            done |= got
            continue
        gemm = cuda_gemm.gemm_anchor(s, st, bodies)   # matmul family: 2-level tiles
        if gemm is not None and gemm[0] not in done:
            got = cuda_gemm.schedule_gemm(s, *gemm, target)
            if got:
                done |= got
                continue
        conv = cuda_conv.conv_anchor(s, st, bodies)   # NCHW conv2d: implicit GEMM tiles
        if conv is not None and conv[0] not in done:
            got = cuda_tc_conv.schedule_tc_conv(s, *conv, target) or \
                cuda_conv.schedule_conv(s, *conv)
            if got:
                done |= got
                continue
        conv = cuda_conv_form.conv_form_anchor(s, st, bodies)   # a hand-written one: the same
        if conv is not None and conv[0] not in done:
            got = cuda_conv_form.schedule_conv_form(s, *conv, target)
            if got:
                done |= got
                continue
        if pat is Pattern.INJECTIVE:
            a = fusable_anchor(s, st, bodies)
            group = cuda_reduction.try_row_group(s, st, bodies) if a is None else None
            if group is not None:   # softmax, norms: a warp (or block) per row, one kernel
                done.update(group)
                continue
            tx = _bind_flat(st, THREADS_INJECTIVE) if a is not None else \
                _bind_vector(st, THREADS_INJECTIVE)
            if a is not None:
                a.set_scope("local")
                a.compute_at(st, tx)
                done.add(a)
        elif not cuda_reduction.schedule_reduction(s, st):   # cross-thread where it pays
            _bind_flat(st, THREADS_REDUCTION if st.op.reduce_axis else THREADS_INJECTIVE)
        done.add(st)
