"""Default CPU schedule of ``ops.attention`` (one pass over the keys, FlashAttention-style).

The output's (batch, head, query block) iterations run in parallel.  In each, the online
softmax merge (``T_attn_merge``) runs its key-block loop outermost, over a query block's
(max, sum, accumulator) vectors kept in L1; inside each key-block iteration the block's
stages are computed for the query block only:

* the scores (``T_attn_score``, key block x query block: keys in register tiles, the
  queries -- transposed once per task, ``T_attn_qt`` -- in vector lanes),
* the block max and sum (a vector of queries), the probabilities (vectorized ``exp``) and
  the weighted values (register tiles of queries x d, vectorized along d),

then the merge folds the block into the running state (vectorized along d).  Every buffer is
a tile: nothing of size seq_q x seq_k exists.  With ``causal``, the key blocks wholly above
the diagonal of a query block are skipped (the merge's ``where=``, hoisted by lowering's
``skip_idle_iterations``).  One query (decode): the query block is that query, each key's
dot product runs in lanes along d (``rfactor``) and the exponentials along keys.

Measured at one thread (AVX-512, 12 heads, d 64, thread CPU time): the non-causal kernel
runs its multiply-adds at 87-91% of the rate OpenBLAS's sgemm reaches on the same core,
1.1-1.2x PyTorch's SDPA at seq 512-4096 (``benchmarks/README.md``).
"""
from __future__ import annotations

from dataclasses import dataclass

from tdsl.schedule import Schedule, Stage
from tdsl.schedule.rfactor import first_output as _first
from tdsl.tensor import IterKind

from .._util import const_value, simplify
from ..tags import OpKind
from .graph import stage_kind

#: Query vectors per parallel task (the rows whose state stays in L1 through the key loop):
#: two vectors read each key block from L2 half as often as one, and make the scores'
#: register tile keys x 2 vectors.  Interleaved with one vector (12 heads, d 64, one
#: thread, loaded 2-core Zen 4): with 256-key blocks 1.16x faster at seq 2048 and 1.25x at
#: 512 (non-causal); causal (128-key blocks) from equal (seq 2048) to 1.12x (seq 1024).
QUERY_VECTORS = 2


@dataclass
class AttentionStages:
    """The stages of one ``ops.attention``, by role."""

    out: Stage
    merge: Stage
    bacc: Stage
    bsum: Stage
    prob: Stage
    bmax: Stage
    score: Stage
    qt: Stage


_ROLES = {"T_attn_merge": "merge", "T_attn_bacc": "bacc", "T_attn_bsum": "bsum",
          "T_attn_prob": "prob", "T_attn_bmax": "bmax", "T_attn_score": "score",
          "T_attn_qt": "qt"}


def attention_stages(s: Schedule, out: Stage) -> "AttentionStages | None":
    """The stages of the attention whose result ``out`` is (walking its producers)."""
    found: dict = {}
    todo = [out]
    while todo:
        st = todo.pop()
        for t in st.op.input_tensors:
            p = s[t]
            if p.is_placeholder or stage_kind(p) is not OpKind.ATTENTION:
                continue
            role = next((r for n, r in _ROLES.items() if p.op.name.startswith(n)), None)
            if role is not None and role not in found:
                found[role] = p
                todo.append(p)
    if len(found) != len(_ROLES):
        return None
    return AttentionStages(out=out, **found)


def _ext(iv) -> "int | None":
    return None if iv.dom is None else const_value(simplify(iv.dom.extent))


def _vectorize_last(st: Stage, iv, lanes: int) -> None:
    e = _ext(iv)
    if e is not None and e <= lanes:
        if e > 1:
            st.vectorize(iv)
        return
    _o, vi = st.split(iv, factor=lanes)
    st.vectorize(vi)


@dataclass(frozen=True)
class AttentionTiles:
    """``rows``: queries per parallel task (a multiple of the vector lanes: the per-query
    statistics are vectors); ``score_keys``: keys per register tile of the scores (x the
    task's vectors of queries, unrolled); ``acc_rows``: queries per register tile of the
    weighted values (x d, unrolled); ``parts``: a decode step's key blocks split into this
    many parts reduced in parallel (None: ``split_parts``'s rule).  These are the knobs the
    tuner's sketch offers (``autotune.sketch_fused``)."""

    rows: int
    score_keys: int
    acc_rows: int
    parts: "int | None" = None


def default_tiles(cpu, dtype, d: "int | None", seq_q: "int | None") -> AttentionTiles:
    """``QUERY_VECTORS`` vectors of queries per task (one when there are fewer queries, all of
    them when fewer than a vector: a decode step has no query tail to guard); register
    tiles of half the vector registers."""
    lanes = cpu.lanes(dtype)
    regs = 32 if cpu.vector_bits >= 512 else 16
    dvec = max(1, -(-(d or 4 * lanes) // lanes))
    if seq_q is not None and seq_q < lanes:
        rows = seq_q
    elif seq_q is not None and seq_q < QUERY_VECTORS * lanes:
        rows = lanes
    else:
        rows = QUERY_VECTORS * lanes
    qvec = max(1, rows // lanes)
    return AttentionTiles(rows=rows, score_keys=max(1, regs // 2 // qvec),
                          acc_rows=max(1, min(rows, (regs // 2) // dvec)))


def schedule_attention(s: Schedule, anchor: Stage, out: "Stage | None", cpu,
                       tiles: "AttentionTiles | None" = None) -> set:
    """The one-pass schedule of an attention whose result is ``anchor`` (``out``: an
    elementwise consumer, given the injective schedule)."""
    a = attention_stages(s, anchor)
    if a is None:
        return set()
    if out is not None:
        from tdsl.lowering.inline import inlined_bodies
        from .llvm import schedule_injective
        schedule_injective(s, out, cpu, inlined_bodies(s))
    dtype = anchor.op.outputs[0].dtype
    lanes = cpu.lanes(dtype)
    t = tiles or default_tiles(cpu, dtype, _ext(anchor.op.axis[3]), _ext(anchor.op.axis[2]))
    decode = t.rows == 1
    score_c = None if decode else s[s.cache_write(a.score.op.outputs[0], "local")]
    score_rf = _decode_rfactor(s, a.score, lanes) if decode else None
    bacc_c = s[s.cache_write(a.bacc.op.outputs[0], "local")]

    y = anchor
    b, h, i, d = y.op.axis
    io, ii = y.split(i, factor=t.rows)
    y.reorder(b, h, io, ii, d)
    task = y.fuse(b, h, io)
    y.parallel(task)
    _vectorize_last(y, d, lanes)

    m = a.merge
    mb, mh, mi, md = m.op.axis
    (kb,) = m.op.reduce_axis
    parts = (split_parts(_ext(kb)) if t.parts is None else t.parts) if decode else 1
    if parts > 1:
        # split-K: the key blocks in ``parts`` parts reduced in parallel (partial
        # statistics, ``rfactor``), merged per output by the combiner
        kp, _kr = m.split(kb, nparts=parts)
        host = s[_first(s.rfactor(m.op.outputs[0], kp, factor_axis=4))]
        rb, rh, ri, rd, rp = host.op.axis
        (at,) = host.op.reduce_axis
        host.reorder(rb, rh, rp, at, ri, rd)
        qt_at = host.fuse(rb, rh, rp)
        host.parallel(qt_at)
        _vectorize_last(host, rd, lanes)
        (kb,) = [iv for iv in m.leaf_iter_vars if iv.kind is IterKind.REDUCE]
        qt_host = host
    else:
        host, at, qt_host, qt_at = m, kb, y, task
    m.compute_at(y, task)
    m.reorder(mb, mh, kb, mi, md)
    _vectorize_last(m, md, lanes)

    for st in (a.bacc, a.bsum, a.prob, a.bmax, a.score):
        st.compute_at(host, at)
    # scores (keys x the task's queries): register tiles of score_keys keys x the query
    # vectors, the head dimension reduced outside them
    if score_rf is not None:
        score_rf.compute_at(a.score, a.score.op.axis[3])
        score_rf.vectorize(score_rf.op.axis[5])
    elif not decode:
        sb, sh, sjb, sjj, si = a.score.op.axis
        sjo, sji = a.score.split(sjj, factor=t.score_keys)
        a.score.reorder(sb, sh, sjb, sjo, sji, si)
        _vectorize_last(a.score, si, lanes)
        score_c.compute_at(a.score, sjo)
        cb, ch, cjb, cjj, ci = score_c.op.axis
        (cdk,) = score_c.op.reduce_axis
        ce = _ext(ci)
        if ce is not None and ce > lanes:
            cio, cii = score_c.split(ci, factor=lanes)
            score_c.reorder(cb, ch, cjb, cdk, cjj, cio, cii)
            score_c.unroll(cjj)
            score_c.unroll(cio)
            score_c.vectorize(cii)
        else:
            score_c.reorder(cb, ch, cjb, cdk, cjj, ci)
            score_c.unroll(cjj)
            _vectorize_last(score_c, ci, lanes)
    a.qt.compute_at(qt_host, qt_at)
    _vectorize_last(a.qt, a.qt.op.axis[-1], lanes)
    # per-query block max / sum: keys reduced outside a vector of queries
    for st in (a.bmax, a.bsum):
        xb, xh, xi, xjb = st.op.axis
        (xjj,) = st.op.reduce_axis
        st.reorder(xb, xh, xjb, xjj, xi)
        _vectorize_last(st, xi, lanes)
    pb, ph, pjb, pjj, pi = a.prob.op.axis
    if decode:              # one query: the exponentials along keys
        a.prob.reorder(pb, ph, pjb, pi, pjj)
    _vectorize_last(a.prob, pjj if decode else pi, lanes)
    # weighted values: register tiles of acc_rows queries x d, keys reduced outside them
    vb, vh, vi, vjb, vd = a.bacc.op.axis
    vio, vii = a.bacc.split(vi, factor=t.acc_rows)
    a.bacc.reorder(vb, vh, vjb, vio, vii, vd)
    _vectorize_last(a.bacc, vd, lanes)
    bacc_c.compute_at(a.bacc, vio)
    wb, wh, wi, wjb, wd = bacc_c.op.axis
    (wjj,) = bacc_c.op.reduce_axis
    bacc_c.reorder(wb, wh, wjb, wjj, wi, wd)
    bacc_c.unroll(wi)
    dv = _ext(wd)
    if dv is not None and dv > lanes:
        wdo, wdi = bacc_c.split(wd, factor=lanes)
        bacc_c.unroll(wdo)
        bacc_c.vectorize(wdi)
    else:
        _vectorize_last(bacc_c, wd, lanes)
    done = {anchor, out, host, a.merge, a.bacc, a.bsum, a.prob, a.bmax, a.score, a.qt, bacc_c}
    return {st for st in done | {score_c, score_rf} if st is not None}


#: Key blocks per part at least, when a decode step's keys are split across threads.
MIN_BLOCKS_PER_PART = 4
#: At most this many parts.
MAX_PARTS = 8


def split_parts(nblocks: "int | None") -> int:
    """Parts of the key sequence reduced in parallel for one query (decode)."""
    if nblocks is None:
        return 1
    return max(1, min(MAX_PARTS, nblocks // MIN_BLOCKS_PER_PART))


def _decode_rfactor(s: Schedule, score: Stage, lanes: int) -> "Stage | None":
    """One query: each key's dot product in vector lanes along d (contiguous rows of k),
    partial sums per lane (``rfactor``; attach it in the key loop), then the lanes added."""
    (dk,) = score.op.reduce_axis
    d = _ext(dk)
    if d is None or d < lanes or d % lanes:
        return None
    _dko, dki = score.split(dk, factor=lanes)
    return s[s.rfactor(score.op.outputs[0], dki, factor_axis=5)]
