"""Default CUDA schedules of ``ops.attention``: one kernel over the shared declaration
(``llvm_attention.attention_stages``), a thread block per (batch, head, query block).

"staged" (the default): ``bq`` queries a block (32; 16 with 256-key blocks, so the tiles fit
48 KB) and ``d / cols`` threads a query, ``threadIdx = (query, column run)``.  Each thread
keeps the running statistics and weighted values of its query's ``cols`` (4) columns of
the output in registers (the merge and the block's weighted values), and writes them as one
float4 (the block's output rows: coalesced).  Every other stage is a block-wide shared
tile with its own thread mapping, computed inside the merge's key-block loop between
barriers:

* ``T_attn_qt`` (d x bq, rows padded by one): Q read along its rows, once per block;
* ``T_attn_score`` (key block x bq, rows padded by two): each thread ``rj`` keys x
  ``score_queries`` queries in registers (a cached local tile), K read through L1 as
  broadcasts (a warp on one key row);
* ``T_attn_bmax`` / ``T_attn_bsum`` (bq): each query's keys reduced across its ``d / cols``
  threads (partial max / sum, then warp shuffles: a cross-thread reduction);
* ``T_attn_prob`` (key block x bq): a thread per element, lanes along queries.

Registers stay under 64 and there is no local memory (stack frame 0), several blocks fit an
SM; no ``seq_q x seq_k`` buffer exists.  ``StagedTiles`` sets ``cols`` and
``score_queries``.

"thread" (the first schedule, kept to compare): a thread per query; the merge's key-block
loop outermost, the block's scores, probabilities, statistics and weighted values in the
thread's local memory; K and V staged in shared memory ``TILE_K`` keys at a time (fetched
coalesced, read as broadcasts).  Its Q loads and output stores are uncoalesced (a thread
per row) and its rows live in local memory (a 2-3 KB stack frame).  It is also what a
symbolic head size or one that is not a multiple of ``cols`` gets.

Both decide the causal skip of key blocks above the diagonal per thread block (the tile
fetches sit between barriers: ``lowering/idle_iterations.py``).
"""
from __future__ import annotations

from dataclasses import dataclass

from tdsl.errors import ScheduleError
from tdsl.schedule import Schedule, Stage
from tdsl.tensor import thread_axis

from .._util import const_value, simplify
from . import cuda_attention_tc
from .llvm_attention import attention_stages

#: Queries (threads) per thread block.
BLOCK_Q = 64
#: Keys per shared-memory K / V tile (best a divisor of the declaration's key block):
#: 2 x 64 x d=64 floats = 32 KB, under the 48 KB of static shared memory.
TILE_K = 64
#: Floats per fetch of a tile element run (one 16-byte load).
VEC = 4


def schedule_attention(s: Schedule, anchor: Stage, variant: str = "staged",
                       tiles: "StagedTiles | None" = None, target: object = None) -> set:
    """The fused schedule; an empty set when ``anchor``'s stages are not recognized.
    ``variant``: "staged" (the default; ``tiles``: its tile sizes, None: ``DEFAULT_TILES``)
    or "thread" (a thread per query, the first one; also where the staged one does not
    apply: a symbolic or odd head size, a symbolic key block).  With an sm_80+ ``target``,
    fp16/bf16 inputs and head size 64 or 128 (a user mask if it is a kernel input), the
    default variant is the tensor-core kernel (``cuda_attention_tc.py``)."""
    if variant not in ("staged", "thread"):
        raise ScheduleError("schedule_attention", anchor.name,
                            f"variant must be 'staged' or 'thread', got {variant!r}")
    a = attention_stages(s, anchor)
    if a is None:
        return set()
    if variant == "staged" and tiles is None and (tc := cuda_attention_tc.plan(a, target)):
        return cuda_attention_tc.schedule_tc_attention(s, a, anchor, *tc)
    if variant == "staged":
        t = tiles or DEFAULT_TILES
        shape = _staged_shape_of(a, t)
        if shape is not None:
            return _schedule_staged(s, a, anchor, *shape, t)
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


# ---- the staged schedule (default) -------------------------------------------------------
#: Floats of one vector access (float4): a thread's output columns come in runs of these.
VEC_COLS = 4
#: Most bytes of shared memory the key block's score and probability tiles may take.
TILE_BYTES = 36 * 1024
#: Most threads per block (queries x d / cols).
MAX_THREADS = 512
#: Most scores a thread accumulates in registers.
MAX_SCORES = 16


@dataclass(frozen=True)
class StagedTiles:
    """``cols``: output columns (of d) per thread, a multiple of ``VEC_COLS`` (its weighted
    values and running statistics stay in registers); ``score_queries``: queries per thread
    of the score tile (each thread computes ``keys x score_queries`` scores in registers);
    ``unroll_dot``: let the compiler unroll the scores' loop over d (``#pragma unroll 1``
    otherwise: at 12 x 1024 x 64, unrolled it took 51-64 registers rather than 40-48, so
    2 blocks an SM rather than 3)."""

    cols: int = 4
    score_queries: int = 1
    unroll_dot: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.cols, int) or self.cols < VEC_COLS or self.cols % VEC_COLS:
            raise ScheduleError("StagedTiles", None, f"cols must be a positive multiple of "
                                f"{VEC_COLS}, got {self.cols!r}")
        if not isinstance(self.score_queries, int) or self.score_queries < 1:
            raise ScheduleError("StagedTiles", None, f"score_queries must be a positive int, "
                                f"got {self.score_queries!r}")


def staged_shape(block_k: int, dv: int, itemsize: int = 4,
                 tiles: StagedTiles = StagedTiles()) -> "tuple[int, int] | None":
    """(queries per block, threads along d) of the staged schedule; None where it does not
    apply (a head size that is not a multiple of ``tiles.cols``)."""
    if dv % tiles.cols or tiles.cols % VEC_COLS:
        return None
    td = dv // tiles.cols
    bq = 32
    while bq > tiles.score_queries and (2 * block_k * (bq + 2) * itemsize > TILE_BYTES
                                        or bq * td > MAX_THREADS):
        bq //= 2
    return bq, td


def _threads(st: Stage, fused, bq: int, td: int):
    """``fused`` split over the block's (``bq`` x ``td``) threads, threadIdx.x fastest."""
    rest, t = st.split(fused, factor=bq * td)
    ty, tx = st.split(t, factor=td)
    st.bind(ty, thread_axis("threadIdx.y"))
    st.bind(tx, thread_axis("threadIdx.x"))
    return rest


def _cols(st: Stage, iv) -> None:
    """A thread's run of output columns ``iv``: float4 accesses, unrolled runs of them."""
    vo, vi = st.split(iv, factor=VEC_COLS)
    st.unroll(vo)
    st.vectorize(vi)


def _schedule_staged(s: Schedule, a, anchor: Stage, bq: int, td: int, block_k: int,
                     t: StagedTiles) -> set:
    y = anchor
    b, h, i, d = y.op.axis
    io, ii = y.split(i, factor=bq)
    dq, dv = y.split(d, factor=t.cols)
    y.reorder(b, h, io, ii, dq, dv)
    blk = y.fuse(b, h, io)
    y.bind(blk, thread_axis("blockIdx.x"))
    y.bind(ii, thread_axis("threadIdx.y"))
    y.bind(dq, thread_axis("threadIdx.x"))
    _cols(y, dv)
    m = a.merge
    m.compute_at(y, dq)
    m.set_scope("local")
    mb, mh, mi, md = m.op.axis
    (kb,) = m.op.reduce_axis
    m.reorder(mb, mh, kb, mi, md)
    m.unroll(md)
    # the query block transposed in shared memory: Q read along its rows (coalesced)
    qt = a.qt
    qt.compute_at(y, blk)
    qt.set_scope("shared")
    qb, qh, qd, qi = qt.op.axis
    qt.reorder(qb, qh, qi, qd)
    _threads(qt, qt.fuse(qi, qd), bq, td)
    qt.storage_align(qd, bq, 1)
    # scores: a (key block x query block) tile in shared memory (rows padded by 2: the
    # block max reads it across keys, conflict free); each thread computes ``rj`` keys x
    # ``rq`` queries in registers (a cached local tile), lanes along queries
    rq = t.score_queries
    rj = max(1, min(-(-block_k // (td * rq)), MAX_SCORES // rq))
    sc = s[s.cache_write(a.score.op.outputs[0], "local")]
    st = a.score
    st.compute_at(m, kb)
    st.set_scope("shared")
    sb, sh, sjb, sjj, si = st.op.axis
    jt, jr = st.split(sjj, factor=rj)
    iq, ir = st.split(si, factor=rq)
    st.reorder(sb, sh, sjb, jt, iq, jr, ir)
    _threads(st, st.fuse(jt, iq), bq, td)
    st.storage_align(sjj, bq, 2)
    sc.compute_at(st, st.leaf_iter_vars[-3])
    cb, ch, cjb, cjj, ci = sc.op.axis
    (cdk,) = sc.op.reduce_axis
    sc.reorder(cb, ch, cjb, cdk, cjj, ci)
    sc.unroll(cjj)
    sc.unroll(ci)
    if not t.unroll_dot:
        sc.pragma(cdk, "unroll_limit", 1)
    # probabilities: the same tile shape, a thread per element, lanes along queries
    p = a.prob
    p.compute_at(m, kb)
    p.set_scope("shared")
    pb, ph, pjb, pjj, pi = p.op.axis
    _threads(p, p.fuse(pjj, pi), bq, td)
    p.storage_align(pjj, bq, 2)
    # block max and sum: the keys reduced across the td threads of a query (shuffles)
    for x in (a.bmax, a.bsum):
        x.compute_at(m, kb)
        x.set_scope("shared")
        xb, xh, xi, xjb = x.op.axis
        (xjj,) = x.op.reduce_axis
        _jo, xt = x.split(xjj, factor=td)
        x.bind(xi, thread_axis("threadIdx.y"))
        x.bind(xt, thread_axis("threadIdx.x"))
    # weighted values: the thread's output columns of a query, in registers
    a.bacc.compute_at(m, kb)
    a.bacc.set_scope("local")
    vb, vh, vi, vjb, vd = a.bacc.op.axis
    (vjj,) = a.bacc.op.reduce_axis
    a.bacc.reorder(vb, vh, vi, vjb, vjj, vd)
    _cols(a.bacc, vd)
    return {anchor, a.merge, a.bacc, a.bsum, a.prob, a.bmax, a.score, a.qt, sc}


#: The staged schedule's default tiles.
DEFAULT_TILES = StagedTiles()


def _staged_shape_of(a, t: StagedTiles) -> "tuple[int, int, int] | None":
    block_k = const_value(simplify(a.score.op.axis[3].dom.extent))
    dv = const_value(simplify(a.out.op.axis[3].dom.extent))
    if block_k is None or dv is None:
        return None
    shape = staged_shape(block_k, dv, a.out.op.outputs[0].dtype.bits // 8, t)
    return None if shape is None else (*shape, block_k)


def attention_schedule(out, variant: str = "staged",
                       tiles: "StagedTiles | None" = None) -> Schedule:
    """A CUDA schedule of the attention whose result is tensor ``out`` with the given
    ``variant`` of ``schedule_attention`` (what ``ops.schedule(out, "cuda")`` makes with the
    default one): to build and compare the variants side by side."""
    from tdsl.schedule import create_schedule
    from . import inline_injective
    s = create_schedule([out.op])
    inline_injective(s)
    if not schedule_attention(s, s[out], variant, tiles):
        raise ScheduleError("attention_schedule", out.name, "not the result of ops.attention")
    return s
