"""Fused scaled dot-product attention (FlashAttention-style) as compute declarations.

``softmax(Q Kᵀ · scale + mask) V`` in one pass over the keys, block by block:

* ``T_attn_qt[b, h, d, i]``: the queries transposed, so that
* ``T_attn_score[b, h, jb, jj, i]``, the dot product of query ``i`` with key
  ``j = jb * block_k + jj``, lies along queries (the key index is clamped into range: the
  tail block's extra keys read the last key and are masked below);
* ``T_attn_bmax[b, h, i, jb]``: the largest masked score of key block ``jb`` (masked:
  scaled, plus an additive mask, ``-inf`` where a boolean mask, causality or the tail
  excludes the key);
* ``T_attn_prob[b, h, jb, jj, i]``: ``exp(score - bmax)`` -- each exponential once per
  (query, key), 0 for excluded keys;
* ``T_attn_bsum[b, h, i, jb]`` and ``T_attn_bacc[b, h, i, jb, d]``: the block's row sum and
  its probability-weighted values;
* ``T_attn_merge[b, h, i, d]``: the online-softmax merge of the blocks' statistics, a
  ``td.comm_reducer`` tuple reduction over ``jb`` with state (running max, running sum,
  accumulator): ``(m1, l1, a1) ⊕ (m2, l2, a2) = (M, l1·e1 + l2·e2, a1·e1 + a2·e2)`` with
  ``M = max(m1, m2)``, ``e = exp(m - M)`` (0 for an empty side, ``m = -inf``);
* ``T_attn``: ``acc / sum`` (0 for a query that sees no key, as PyTorch's CPU SDPA).

Only the merge runs over the whole key sequence; every per-key stage is indexed by a key
block, and the default schedules compute them inside the merge's key-block loop, so no
buffer larger than a (query block x key block) tile exists and the keys are read once.  The
merge's rescale exponential is per (query, key block, d): ``d / block_k`` per key.
"""
from __future__ import annotations

import math
from typing import Any

import tdsl.intrin as _i
from tdsl.dtype import INDEX
from tdsl.errors import DTypeError, ShapeError
from tdsl.expr import Const, Expr, convert
from tdsl.reduction import comm_reducer, min_value
from tdsl.reduction import max as _rmax
from tdsl.reduction import sum as _rsum
from tdsl.target import TargetKind, as_target
from tdsl.tensor import Tensor, compute, reduce_axis

from ._util import broadcast_shape, check_tensor, const_value, same_size, shape_str, size_str
from .tags import OpKind

__all__ = ["attention", "online_softmax", "BLOCK_K", "default_block_k"]

#: Default key block: the per-key stages' tile width (a multiple of every vector width).
#: 128 ran 16% faster than 64 at seq 1024 (AVX-512, one thread: the merge's rescale
#: exponentials are per key block).  Causal attention and short or symbolic key sequences
#: keep it (causal: the diagonal block is computed whole, so a wider block wastes more).
BLOCK_K = 128
#: The key block of a non-causal attention over ``LONG_SEQ_K`` keys or more: half the merge
#: work per key.  Interleaved with 128 (12 heads, d 64, 32 queries per task, one thread,
#: loaded 2-core Zen 4): 1.14-1.24x faster at seq 512 and 2048 (benchmarks/attention.py).
BLOCK_K_LONG = 256
LONG_SEQ_K = 512
#: On a CUDA target the long-sequence rule is off: there a key block of 256 costs the
#: staged kernel its occupancy.  fp32, 1 x 12 heads x d 64, non-causal, H200: 256 (the CPU
#: rule) 0.650 ms at seq 1024 and 6.71 at 4096, 128 0.311 and 5.51, 64 0.358 and 5.26
#: (benchmarks/cuda_attention_variants.py).


def default_block_k(seq_q: Any, seq_k: Any, causal: bool, target: Any = None) -> int:
    """The key block ``attention`` uses when none is given (a rule by key count, for the
    CPU unless ``target`` is a CUDA one).  A decode step (one query) keeps ``BLOCK_K``: its
    merge is cheap, and more blocks make more parts to split across threads
    (``llvm_attention.split_parts``)."""
    if target is not None and as_target(target).kind is TargetKind.CUDA:
        return BLOCK_K
    n = const_value(seq_k)
    long_k = n is not None and n >= LONG_SEQ_K
    return BLOCK_K_LONG if long_k and not causal and const_value(seq_q) != 1 else BLOCK_K


def _merge(x: tuple, y: tuple) -> tuple:
    """Combine two (max, sum, acc) partial softmax states (commutative, associative).

    One of the two rescale factors is 1 (the side holding the larger max), the other
    ``exp(-|m1 - m2|)``: one exponential per merge rather than two (the merge runs per
    (query, key block, d), so its exponentials would otherwise match the probabilities').
    An empty side (``m = -inf``) gets factor 0; two empty sides give an empty state."""
    m = _i.maximum(x[0], y[0])
    zero = Const(0.0, x[1].dtype)
    one = Const(1.0, x[1].dtype)
    neg = min_value(x[0].dtype)
    t = _i.if_then_else(_i.minimum(x[0], y[0]) == neg, zero,
                        _i.exp(_i.minimum(x[0], y[0]) - m))
    x_big = x[0] >= y[0]
    ex = _i.if_then_else(x_big, one, t)
    ey = _i.if_then_else(x_big, t, one)
    return m, x[1] * ex + y[1] * ey, x[2] * ex + y[2] * ey


def _identity(t0: Any, t1: Any, t2: Any) -> tuple:
    return min_value(t0), Const(0.0, t1), Const(0.0, t2)


#: The online-softmax reducer over (max, sum, acc) triples: ``online_softmax((m, l, a),
#: axis=k)`` folds partial softmax statistics (a block's max, its ``sum exp(s - max)`` and
#: its ``sum exp(s - max) * v``) into those of their union.
online_softmax = comm_reducer(_merge, _identity, name="online_softmax")


def _check(q: Tensor, k: Tensor, v: Tensor) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor("attention", t, name)
        if t.ndim != 4:
            raise ShapeError(f"ops.attention: {name} must be 4-D (batch, heads, seq, d), got "
                             f"shape {shape_str(t.shape)}")
        if not t.dtype.is_float:
            raise DTypeError(f"ops.attention: {name} must be a float tensor, got {t.dtype}")
        if t.dtype != q.dtype:
            raise DTypeError(f"ops.attention: q, k and v must share a dtype, got {q.dtype} "
                             f"and {t.dtype} ({name})")
    for d, what in ((0, "batch"), (1, "heads")):
        for name, t in (("k", k), ("v", v)):
            if not same_size(q.shape[d], t.shape[d]):
                raise ShapeError(f"ops.attention: {what} of q ({size_str(q.shape[d])}) and "
                                 f"{name} ({size_str(t.shape[d])}) differ")
    if not same_size(k.shape[2], v.shape[2]):
        raise ShapeError(f"ops.attention: k and v have different sequence lengths "
                         f"({size_str(k.shape[2])} and {size_str(v.shape[2])})")
    if not same_size(q.shape[3], k.shape[3]):
        raise ShapeError(f"ops.attention: q and k have different head sizes "
                         f"({size_str(q.shape[3])} and {size_str(k.shape[3])})")


def _mask_reader(mask: Any, full: tuple, dtype: Any) -> Any:
    """``(b, h, i, j) -> mask value`` under PyTorch's ``attn_mask`` broadcasting."""
    if mask is None:
        return None
    check_tensor("attention", mask, "mask")
    if not (mask.dtype.is_bool or mask.dtype == dtype):
        raise DTypeError(f"ops.attention: mask must be bool or {dtype} (additive), got "
                         f"{mask.dtype}")
    if mask.ndim > 4:
        raise ShapeError(f"ops.attention: mask has {mask.ndim} dimensions, at most 4 "
                         f"(batch, heads, seq_q, seq_k)")
    out = broadcast_shape("attention", mask.shape, full)
    if not all(same_size(a, b) for a, b in zip(out, full)):
        raise ShapeError(f"ops.attention: mask of shape {shape_str(mask.shape)} does not "
                         f"broadcast to the scores' shape {shape_str(full)}")
    off = 4 - mask.ndim

    def read(*idx: Expr) -> Expr:
        src = [Const(0, INDEX) if const_value(s) == 1 and const_value(full[off + d]) != 1
               else idx[off + d] for d, s in enumerate(mask.shape)]
        return mask(*src)
    return read


def attention(q: Tensor, k: Tensor, v: Tensor, causal: bool = False, scale: Any = None,
              mask: "Tensor | None" = None, block_k: "int | None" = None,
              target: Any = None) -> Tensor:
    """``softmax(q kᵀ · scale + mask) v`` (PyTorch's ``scaled_dot_product_attention``).

    ``q`` (B, H, Sq, D), ``k``/``v`` (B, H, Sk, D) (``v`` may have its own head size);
    ``causal`` as ``is_causal`` (key ``j`` is seen by query ``i`` when ``j <= i``),
    ``scale`` defaults to ``1 / sqrt(D)``; ``mask`` broadcasts to (B, H, Sq, Sk): a bool mask
    says which keys take part, a float mask is added to the scores; with ``causal`` too, a
    key takes part where both allow it (as PyTorch 2.13's SDPA).  A query row that sees
    no key (fully masked) gives zeros, as PyTorch 2.13's CPU SDPA does.  ``block_k`` is
    the key block of the one-pass schedule (a compile-time constant; None:
    ``default_block_k``'s rule for ``target``, the one the kernel will be built for: a
    target string or ``Target``; None: the CPU's rule)."""
    _check(q, k, v)
    if block_k is None:
        block_k = default_block_k(q.shape[2], k.shape[2], causal, target)
    if not isinstance(block_k, int) or block_k < 1:
        raise ShapeError(f"ops.attention: block_k must be a positive int, got {block_k!r}")
    B, H, Sq, D = q.shape
    Sk, Dv = k.shape[2], v.shape[3]
    dt = q.dtype
    if scale is None:
        dc = const_value(D)
        sc = convert(1.0 / math.sqrt(dc), dt) if dc is not None else \
            _i.rsqrt(D.astype(dt))
    else:
        sc = convert(float(scale), dt)
    read_mask = _mask_reader(mask, (B, H, Sq, Sk), dt)
    nblocks = (Sk + (block_k - 1)) // block_k
    last = Sk - 1
    neg = min_value(dt)

    # the query rows transposed (d, query): the scores of a key then lie along queries
    qt = compute((B, H, D, Sq), lambda b, h, d, i: q[b, h, i, d],
                 name="T_attn_qt", tag=OpKind.ATTENTION)
    dk = reduce_axis((0, D), name="dk")
    score = compute(
        (B, H, nblocks, block_k, Sq),
        lambda b, h, jb, jj, i: _rsum(
            k[b, h, _i.minimum(jb * block_k + jj, last), dk] * qt[b, h, dk, i], axis=dk),
        name="T_attn_score", tag=OpKind.ATTENTION)

    def masked(b: Expr, h: Expr, i: Expr, jb: Expr, jj: Expr) -> Expr:
        j = jb * block_k + jj
        s = score[b, h, jb, jj, i] * sc
        ok = j < Sk
        if causal:
            ok = ok & (j <= i)
        if read_mask is not None:
            mv = read_mask(b, h, i, _i.minimum(j, last))
            if mask.dtype.is_bool:
                ok = ok & mv
            else:
                s = s + mv
        return _i.if_then_else(ok, s, neg)

    jj1 = reduce_axis((0, block_k), name="jj")
    bmax = compute((B, H, Sq, nblocks),
                   lambda b, h, i, jb: _rmax(masked(b, h, i, jb, jj1), axis=jj1),
                   name="T_attn_bmax", tag=OpKind.ATTENTION)
    prob = compute(
        (B, H, nblocks, block_k, Sq),
        lambda b, h, jb, jj, i: _i.if_then_else(
            bmax[b, h, i, jb] == neg, Const(0.0, dt),
            _i.exp(masked(b, h, i, jb, jj) - bmax[b, h, i, jb])),
        name="T_attn_prob", tag=OpKind.ATTENTION)
    jj2 = reduce_axis((0, block_k), name="jj")
    bsum = compute((B, H, Sq, nblocks),
                   lambda b, h, i, jb: _rsum(prob[b, h, jb, jj2, i], axis=jj2),
                   name="T_attn_bsum", tag=OpKind.ATTENTION)
    jj3 = reduce_axis((0, block_k), name="jj")
    bacc = compute(
        (B, H, Sq, nblocks, Dv),
        lambda b, h, i, jb, d: _rsum(
            prob[b, h, jb, jj3, i] * v[b, h, _i.minimum(jb * block_k + jj3, last), d],
            axis=jj3),
        name="T_attn_bacc", tag=OpKind.ATTENTION)
    kb = reduce_axis((0, nblocks), name="kb")
    _m, lsum, acc = compute(
        (B, H, Sq, Dv),
        lambda b, h, i, d: online_softmax(
            (bmax[b, h, i, kb], bsum[b, h, i, kb], bacc[b, h, i, kb, d]), axis=kb,
            where=(kb * block_k <= i) if causal else None),
        name="T_attn_merge", tag=OpKind.ATTENTION)
    zero = Const(0.0, dt)
    # a query that sees no key has sum 0 and accumulator 0: divided by 1 instead, it gives
    # 0 (an add rather than a select: the CUDA output store stays one vector store)
    return compute(
        (B, H, Sq, Dv),
        lambda b, h, i, d: acc[b, h, i, d] / (
            lsum[b, h, i, d] + (lsum[b, h, i, d] == zero).astype(dt)),
        name="T_attn", tag=OpKind.ATTENTION_OUT)
