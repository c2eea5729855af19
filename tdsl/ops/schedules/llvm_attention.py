"""Default CPU schedule of ``ops.attention`` (one pass over the keys, FlashAttention-style).

The output's (batch, head, query block) iterations run in parallel.  In each, the online
softmax merge (``T_attn_merge``) runs its key-block loop outermost, over a query block's
(max, sum, accumulator) vectors kept in L1; inside each key-block iteration the block's
stages are computed for the query block only:

* the key block transposed (``T_attn_kt``, d x block_k), so that
* the scores (query block x block_k) accumulate along keys in vector lanes,
* the block max and sum (per query), the probabilities (vectorized ``exp``) and the
  weighted values (query block x d, vectorized along d, values streamed by rows),

then the merge folds the block into the running state (vectorized along d).  Every buffer is
a tile: nothing of size seq_q x seq_k exists.  With ``causal``, the key blocks wholly above
the diagonal of a query block are skipped (the merge's key loop stops at the diagonal).
"""
from __future__ import annotations

from dataclasses import dataclass

from tdsl.schedule import Schedule, Stage
from tdsl.tensor import ComputeOp

from .._util import const_value
from ..tags import OpKind
from .graph import stage_kind

#: Queries per parallel task (the rows whose state stays in L1 through the key loop).
BLOCK_Q = 16


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
    kt: Stage


_ROLES = {"T_attn_merge": "merge", "T_attn_bacc": "bacc", "T_attn_bsum": "bsum",
          "T_attn_prob": "prob", "T_attn_bmax": "bmax", "T_attn_score": "score",
          "T_attn_kt": "kt"}


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


def _vectorize_last(st: Stage, iv, lanes: int) -> None:
    e = const_value(iv.dom.extent) if iv.dom is not None else None
    if e is not None and e < lanes:
        if e > 1:
            st.vectorize(iv)
        return
    _o, vi = st.split(iv, factor=lanes)
    st.vectorize(vi)


def schedule_attention(s: Schedule, anchor: Stage, out: "Stage | None", cpu) -> set:
    """The one-pass schedule of an attention whose result is ``anchor`` (``out``: an
    elementwise consumer -- left to its own schedule)."""
    a = attention_stages(s, anchor)
    if a is None:
        return set()
    dtype = anchor.op.outputs[0].dtype
    lanes = cpu.lanes(dtype)
    y = anchor
    b, h, i, d = y.op.axis
    io, ii = y.split(i, factor=BLOCK_Q)
    y.reorder(b, h, io, ii, d)
    task = y.fuse(b, h, io)
    y.parallel(task)
    _vectorize_last(y, d, lanes)

    m = a.merge
    m.compute_at(y, task)
    mb, mh, mi, md = m.op.axis
    (kb,) = m.op.reduce_axis
    m.reorder(mb, mh, kb, mi, md)
    _vectorize_last(m, md, lanes)

    for st in (a.bacc, a.bsum, a.prob, a.bmax, a.score, a.kt):
        st.compute_at(m, kb)
    # scores: query rows x keys, the head dimension reduced outside the key lanes
    sb, sh, si, sjb, sjj = a.score.op.axis
    (sdk,) = a.score.op.reduce_axis
    a.score.reorder(sb, sh, si, sjb, sdk, sjj)
    _vectorize_last(a.score, sjj, lanes)
    # probabilities: exp along keys
    _vectorize_last(a.prob, a.prob.op.axis[-1], lanes)
    # weighted values: query rows x d, keys reduced outside the d lanes
    vb, vh, vi, vjb, vd = a.bacc.op.axis
    (vjj,) = a.bacc.op.reduce_axis
    a.bacc.reorder(vb, vh, vi, vjb, vjj, vd)
    _vectorize_last(a.bacc, vd, lanes)
    _vectorize_last(a.kt, a.kt.op.axis[-1], lanes)
    return {anchor, a.merge, a.bacc, a.bsum, a.prob, a.bmax, a.score, a.kt}


def is_attention(op: ComputeOp) -> bool:
    return stage_kind_of_op(op) is OpKind.ATTENTION_OUT


def stage_kind_of_op(op: ComputeOp) -> "OpKind | None":
    from ..tags import kind_of
    return kind_of(op)
