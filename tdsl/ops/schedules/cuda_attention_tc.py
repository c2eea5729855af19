"""Default CUDA schedule of fp16/bf16 ``ops.attention`` on sm_80+: tensor cores.

Like the tensor-core GEMM (``cuda_tc.py``), the schedule only shapes the loop nest the
backend's microkernel replaces (``backends/cuda/tc_attention.py``): the output's
(batch x head) on ``blockIdx.x``, its 64-query blocks on ``blockIdx.y``, the block's
64 x d outputs over 128 threads (``threadIdx.x``) times a serial loop marked
``pragma(f, "tdsl_tc_attention", key)`` (key: head size, causality, scale, the user
mask's kind: none, additive or boolean), the whole declaration computed per output inside
it (a thread's merge over the key blocks, what the reference interpreter runs).  The
backend emits the FlashAttention-2 kernel in its place (``tc_attention_kernel.py``: 4 warps
of 16 query rows, K/V tiles of 64 keys double-buffered by cp.async, ldmatrix + mma.sync
m16n8k16, fp32 online softmax in registers).

Eligible: fp16 or bf16 q/k/v, a constant head size of 64 or 128 shared by q, k and v, an
sm_80+ target; a user mask (bool, or additive of q's dtype; causal or not) if it is an
input of the kernel (a placeholder: a computed mask inlined into the scores keeps the SIMT
"staged" schedule).
"""
from __future__ import annotations

import math
from typing import Any, Optional

from tdsl.expr import Const, Mul
from tdsl.schedule import Schedule, Stage
from tdsl.tensor import PlaceholderOp, thread_axis
from tdsl.visitor import post_order_visit

from .._util import const_value, simplify
from .cuda_tc import sm_of

#: Query rows per block, threads per block, head sizes the microkernel takes.
BLOCK_Q, THREADS, HEAD_SIZES = 64, 128, (64, 128)
DTYPES = ("float16", "bfloat16")
PRAGMA = "tdsl_tc_attention"


def _scale(a: Any) -> Optional[float]:
    """The constant the scores are multiplied by in the block max (None: not one)."""
    found: list = []

    def visit(n: Any) -> None:
        if isinstance(n, Mul):
            for x in (n.a, n.b):
                if isinstance(x, Const) and x.dtype.is_float:
                    found.append(float(x.value))
    for body in a.bmax.op.body:
        post_order_visit(body, visit)
    return found[0] if len(set(found)) == 1 else None


def mask_kind(a: Any, dtype: str) -> Optional[int]:
    """The user mask's kind (``MASK_NONE``, ``MASK_ADD``, ``MASK_BOOL``) read by the block
    max of attention stages ``a``; None where the microkernel cannot take it (more than one
    tensor besides the scores, not a placeholder, another dtype)."""
    from tdsl.backends.cuda.tc_attention import MASK_ADD, MASK_BOOL, MASK_NONE
    others = [t for t in a.bmax.op.input_tensors if t.op is not a.score.op]
    if not others:
        return MASK_NONE
    if len(others) != 1 or not isinstance(others[0].op, PlaceholderOp) or \
            others[0].ndim > 4:
        return None
    mdt = str(others[0].dtype)
    return MASK_BOOL if mdt == "bool" else MASK_ADD if mdt == dtype else None


def plan(a: Any, target: Any) -> "Optional[tuple[int, bool, float, int]]":
    """(head size, causal, scale, mask kind) where the microkernel applies to attention
    stages ``a`` (``llvm_attention.AttentionStages``), None otherwise."""
    if target is None or sm_of(target) < 80:
        return None
    dt = str(a.out.op.output(0).dtype)
    d = const_value(simplify(a.qt.op.axis[2].dom.extent))
    dv = const_value(simplify(a.out.op.axis[3].dom.extent))
    if dt not in DTYPES or d not in HEAD_SIZES or dv != d:
        return None
    mask = mask_kind(a, dt)
    if mask is None:
        return None
    scale = _scale(a)
    if scale is None or not math.isfinite(scale):    # (the SIMT schedule computes inf/nan)
        return None
    cond = a.merge.op.body[0].condition
    causal = cond is not None and not (isinstance(cond, Const) and cond.value)
    return d, causal, scale, mask


def schedule_tc_attention(s: Schedule, a: Any, anchor: Stage, d: int, causal: bool,
                          scale: float, mask: int = 0) -> set:
    """The loop nest of the module docstring (``mask``: the user mask's kind, as
    ``mask_kind``); returns the stages done."""
    from tdsl.backends.cuda.tc_attention import attn_key
    y = anchor
    b, h, i, dd = y.op.axis
    io, ii = y.split(i, factor=BLOCK_Q)
    y.reorder(b, h, io, ii, dd)
    f = y.fuse(ii, dd)
    tx, fi = y.split(f, factor=BLOCK_Q * d // THREADS)
    y.bind(y.fuse(b, h), thread_axis("blockIdx.x"))    # x: up to 2^31 - 1 (batch x heads)
    y.bind(io, thread_axis("blockIdx.y"))
    y.bind(tx, thread_axis("threadIdx.x"))
    y.pragma(fi, PRAGMA, attn_key(d, causal, scale, mask))
    m = a.merge
    m.compute_at(y, fi)
    m.set_scope("local")
    (kb,) = m.op.reduce_axis
    for st in (a.bacc, a.bsum, a.prob, a.bmax, a.score):
        st.compute_at(m, kb)
        st.set_scope("local")
    a.qt.compute_at(y, fi)
    a.qt.set_scope("local")
    return {anchor, a.merge, a.bacc, a.bsum, a.prob, a.bmax, a.score, a.qt}
