"""Default CUDA schedule of ``ops.attention``: one kernel, a thread block per (batch, head,
query block), a thread per query.

Each thread runs the one-pass online softmax for its query: the merge's key-block loop
outermost, the block's scores, probabilities, statistics and weighted values in the
thread's local memory (registers where the compiler keeps them), so no seq_q x seq_k
buffer exists.  K and V are staged in shared memory, ``TILE_K`` keys at a time: all the
block's threads fetch a tile (consecutive lanes on consecutive 16-byte chunks of its rows:
coalesced), then each reads it as broadcasts (the whole warp on one key), so each K/V
element is read from global memory once per query block rather than once per query.  The
tile fetches sit between barriers inside the key-block loop, so the causal skip of blocks
above the diagonal is decided per thread block (``lowering/idle_iterations.py``).

Not done yet (issue 24's target): a query row split across threads with the running max,
sum and accumulator in registers (the declaration's merge keeps (max, sum) per (query, d),
and the per-thread score / probability rows of a key block live in local memory: the
stack frame), Q staged for coalesced reads, the output written through shared memory.
"""
from __future__ import annotations

from tdsl.schedule import Schedule, Stage
from tdsl.tensor import thread_axis

from .llvm_attention import attention_stages

#: Queries (threads) per thread block.
BLOCK_Q = 64
#: Keys per shared-memory K / V tile (best a divisor of the declaration's key block):
#: 2 x 64 x d=64 floats = 32 KB, under the 48 KB of static shared memory.
TILE_K = 64
#: Floats per fetch of a tile element run (one 16-byte load).
VEC = 4


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
    _stage_tiles(s, a)
    return {anchor, a.merge, a.bacc, a.bsum, a.prob, a.bmax, a.score, a.qt}


def _fetch(st: Stage, at: Stage, where: object) -> None:
    """``st`` (a K or V tile: (b, h, key, d)) computed at ``where`` of ``at``, fetched by
    all the block's threads: consecutive lanes on consecutive ``VEC``-float chunks of the
    tile's rows, which are contiguous in global memory (16-byte coalesced reads)."""
    st.compute_at(at, where)
    j, d = st.op.axis[-2:]
    rest, vi = st.split(st.fuse(j, d), factor=VEC)
    _, tx = st.split(rest, factor=BLOCK_Q)
    st.bind(tx, thread_axis("threadIdx.x"))
    st.vectorize(vi)


def _stage_tiles(s: Schedule, a) -> None:
    """K and V tiles of ``TILE_K`` keys in shared memory: the scores' key loop and the
    weighted values' key reduction are split by ``TILE_K`` and the tiles fetched at the
    outer loops, so each K/V element is read from global memory once per query block."""
    k_t = next(t for t in a.score.op.input_tensors if s[t].is_placeholder)
    v_t = next(t for t in a.bacc.op.input_tensors if s[t].is_placeholder)
    ks = s[s.cache_read(k_t, "shared", [a.score])]
    vs = s[s.cache_read(v_t, "shared", [a.bacc])]
    jj = a.score.op.axis[3]
    jo, ji = a.score.split(jj, factor=TILE_K)
    _fetch(ks, a.score, jo)
    a.score.pragma(ji, "unroll_limit", 1)
    bd = a.bacc.op.axis[4]
    (jr,) = a.bacc.op.reduce_axis
    ro, ri = a.bacc.split(jr, factor=TILE_K)
    a.bacc.reorder(ro, bd, ri)
    _fetch(vs, a.bacc, ro)
    a.bacc.pragma(bd, "unroll_limit", 1)
