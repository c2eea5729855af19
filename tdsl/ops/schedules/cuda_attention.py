"""Default CUDA schedule of ``ops.attention``: one kernel, a thread block per (batch, head,
query block), a thread per query.

Each thread runs the one-pass online softmax for its query: the merge's key-block loop
outermost, the block's scores, probabilities, statistics and weighted values in the
thread's local memory (registers where the compiler keeps them), so no seq_q x seq_k
buffer exists.  K/V tiles are read from global memory by every thread of the block (the
same addresses across the warp: broadcast loads served by L1); staging them in shared
memory is not done yet.
"""
from __future__ import annotations

from tdsl.schedule import Schedule, Stage
from tdsl.tensor import thread_axis

from .llvm_attention import attention_stages

#: Queries (threads) per thread block.
BLOCK_Q = 64


def schedule_attention(s: Schedule, anchor: Stage) -> set:
    """The fused schedule; an empty set when ``anchor``'s stages are not recognized."""
    a = attention_stages(s, anchor)
    if a is None:
        return set()
    y = anchor
    b, h, i, d = y.op.axis
    io, ii = y.split(i, factor=BLOCK_Q)
    y.reorder(b, h, io, ii, d)
    blk = y.fuse(b, h, io)
    y.bind(blk, thread_axis("blockIdx.x"))
    y.bind(ii, thread_axis("threadIdx.x"))
    m = a.merge
    m.compute_at(y, ii)
    m.set_scope("local")
    mb, mh, mi, md = m.op.axis
    (kb,) = m.op.reduce_axis
    m.reorder(mb, mh, kb, mi, md)
    for st in (a.bacc, a.bsum, a.prob, a.bmax, a.score):
        st.compute_at(m, kb)
        st.set_scope("local")
    a.qt.compute_at(y, ii)
    a.qt.set_scope("local")
    return {anchor, a.merge, a.bacc, a.bsum, a.prob, a.bmax, a.score, a.qt}
