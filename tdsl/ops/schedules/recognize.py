"""Recognize operators written by hand with ``td.compute`` that the default schedules know.

``tdsl.ops`` tags its operators (``OpKind``), and the default schedules key on the tag. A
user who writes the textbook matmul themselves (TVM's tutorials do) gets an untagged
compute with the same structure; ``gemm_form`` finds it, so it gets the same register-tiled,
panel-packed schedule instead of the generic reduction one (measured 512^3 on two
threads: 6.2 ms generic vs 1.5 ms).  A hand-written ``dense`` (B read as ``B[j, k]``) with
a small M gets ``ops.dense``'s streaming schedule (1 x 4096 by 4096 x 4096, one thread,
interleaved medians: 3.6 ms generic vs 2.8 ms, as fast as ``ops.dense``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from tdsl.expr import Add, Cast, Mul, Reduce, TensorLoad
from tdsl.tensor import ComputeOp, PlaceholderOp, Tensor


@dataclass(frozen=True)
class GemmForm:
    """``C[*b, i, j] = sum_k A[*b, i, k] * B[*b, k, j]`` (``transpose_b``: ``B[*b, j, k]``):
    ``a`` and ``b`` are the operands (placeholders) in the roles of A and B."""

    a: Tensor
    b: Tensor
    transpose_b: bool = False


def _is_plain_sum(red: Reduce) -> bool:
    comb = red.combiner
    if len(comb.result) != 1 or not isinstance(comb.result[0], Add):
        return False
    res = comb.result[0]
    return {id(res.a), id(res.b)} == {id(comb.lhs[0]), id(comb.rhs[0])}


def _load(e: Any) -> "Optional[TensorLoad]":
    """A load of a placeholder, under at most one cast."""
    if isinstance(e, Cast):
        e = e.value
    if isinstance(e, TensorLoad) and isinstance(e.tensor.op, PlaceholderOp):
        return e
    return None


def _is(index: Any, iv: Any) -> bool:
    return index is iv.var


def gemm_form(op: Any) -> "Optional[GemmForm]":
    """The operands of ``op`` when it is an untagged (hand-written) matmul or batched
    matmul, B transposed or not, else None.  (A transposed B's panels are copied laid out
    ``[k, j]``, as ``dense``'s PACK stage is: ``llvm_matmul.schedule_matmul``.)"""
    if not isinstance(op, ComputeOp) or op.tag or len(op.body) != 1 or len(op.axis) not in (2, 3):
        return None
    red = op.body[0]
    if not isinstance(red, Reduce) or len(red.axis) != 1 or len(red.source) != 1 \
            or not _is_plain_sum(red) or not red.dtype.is_float:
        return None
    if red.init or getattr(red.condition, "value", None) is not True:
        return None
    src = red.source[0]
    if isinstance(src, Cast):
        src = src.value
    if not isinstance(src, Mul):
        return None
    (k,) = red.axis
    *batch, i, j = op.axis
    for x, y in ((src.a, src.b), (src.b, src.a)):
        la, lb = _load(x), _load(y)
        if la is None or lb is None or la.tensor is lb.tensor:
            continue
        ia, ib = la.indices, lb.indices
        if len(ia) != len(op.axis) or len(ib) != len(op.axis):
            continue
        if not all(_is(p, q) for p, q in zip(ia, [*batch, i, k])):
            continue
        for transposed, order in ((False, [*batch, k, j]), (True, [*batch, j, k])):
            if all(_is(p, q) for p, q in zip(ib, order)):
                return GemmForm(la.tensor, lb.tensor, transposed)
    return None
