"""Decompositions of composite graph ops into ones the fusion rules know.

``attention(q, k, v, [mask]; causal, scale)`` stays whole -- one kernel, ``ops.attention``'s
one-pass (online softmax) schedule -- where ``use_fused_attention`` says so; otherwise it
becomes ``matmul(q, k^T)``, a scale, the causal mask and/or the given mask (additive float,
or boolean: True attends), ``softmax`` and ``matmul(p, v)``: the scale and masks fuse into
the softmax's row group.  The node's optional ``impl`` attr overrides the choice: "fused"
(an error where the fused kernel does not apply), "decomposed", or "auto" (the default).
"""
from __future__ import annotations

import math

import numpy as np

from tdsl.ops._util import const_value
from tdsl.ops.attention import BLOCK_K

from ..ir import Graph, GraphError, Node, Value, constant
from ..opset import fused_attention_applies

#: The values of an ``attention`` node's ``impl`` attr.
IMPLS = ("auto", "fused", "decomposed")


def _attention(n: Node) -> list[Node]:
    q, k, v = n.inputs[:3]
    mask = n.inputs[3] if len(n.inputs) > 3 else None
    lk = k.shape[-2]
    d = const_value(q.shape[-1])
    scale = n.attrs.get("scale")
    if scale is None:
        if d is None:
            raise GraphError("graph attention: a symbolic head size needs scale=")
        scale = 1.0 / math.sqrt(d)
    out = n.outputs[0]
    s_shape = (*q.shape[:-1], lk)
    nodes = []
    s = Value(s_shape, q.dtype, name=out.name + "_scores")
    nodes.append(Node("matmul", [q, k], {"transpose_b": True}, [s]))
    cur = s
    if scale != 1.0:
        t = Value(s_shape, q.dtype, name=out.name + "_scaled")
        nodes.append(Node("mul", [cur, constant(np.array(scale, dtype=q.dtype))], {}, [t]))
        cur = t
    if n.attrs.get("causal"):
        # PyTorch's is_causal: query i sees keys j <= i, whatever the two lengths (the
        # mask is aligned top-left, as ``ops.attention``'s)
        t = Value(s_shape, q.dtype, name=out.name + "_causal")
        nodes.append(Node("causal_mask", [cur], {"offset": 0}, [t]))
        cur = t
    if mask is not None:
        t = Value(s_shape, q.dtype, name=out.name + "_masked")
        if mask.dtype == "bool":
            ninf = constant(np.array(-np.inf, dtype=q.dtype))
            nodes.append(Node("where", [mask, cur, ninf], {}, [t]))
        else:
            nodes.append(Node("add", [cur, mask], {}, [t]))
        cur = t
    p = Value(s_shape, q.dtype, name=out.name + "_probs")
    # a row the mask hides whole gives 0 (PyTorch's attention, and the fused kernel)
    nodes.append(Node("softmax", [cur], {"axis": -1, "masked_rows": mask is not None}, [p]))
    nodes.append(Node("matmul", [p, v], {}, [out]))
    return nodes


#: An attention over a constant number of keys up to this (causal: up to one key block,
#: ``ops.attention.BLOCK_K``) runs decomposed; longer or symbolic ones run fused.
#: Measured (benchmarks/graph_attention.py and interleaved variants of it: 12 heads, d 64,
#: batch 1, one thread, AVX-512 EPYC under a load of 5-8, so +-15% noise; ms, fused /
#: decomposed): non-causal 128: 1.98 / 1.89 (min of 15 rounds), 256: 8.6 / 7.3 (min),
#: 512: 26.9 / 26.0, 1024: 94 / 91 -- the decomposition's GEMMs are as fast as the one
#: pass while the scores fit in cache; at 2048 fused (heads-first operands) 541 / 741, and
#: no (seq x seq) buffer.  Causal 128 (one key block: none to skip): 2.56 / 2.15 (min),
#: 0.88 / 0.82, 1.47 / 1.49; from two blocks the blocks above the diagonal are skipped,
#: which the GEMM cannot: 256: 6.7 / 7.8 (min), 512: 11.6 / 25.5, 1024: 69 / 114.  A
#: symbolic key length runs fused (no buffer growing as its square).
DECOMPOSE_MAX_SEQ_K = 1024


def use_fused_attention(n: Node) -> bool:
    """Whether the ``attention`` node ``n`` runs as the fused kernel.  ``impl`` "auto" (the
    default): where the fused kernel applies (``opset.fused_attention_applies``) and pays
    (a symbolic key length, or over ``DECOMPOSE_MAX_SEQ_K`` keys -- with ``causal``, over
    one key block); "fused": where it applies (else an error); "decomposed": never."""
    impl = n.attrs.get("impl", "auto")
    if impl not in IMPLS:
        raise GraphError(f"graph attention: impl must be one of {', '.join(IMPLS)}, got "
                         f"{impl!r}")
    if impl == "decomposed":
        return False
    q, k, v = n.inputs[:3]
    mask = n.inputs[3] if len(n.inputs) > 3 else None
    causal = bool(n.attrs.get("causal"))
    applies = fused_attention_applies(q, k, v, mask, causal)
    if impl == "fused":
        if not applies:
            raise GraphError(f"graph attention: impl='fused' but ops.attention does not "
                             f"apply to {n!r} (see opset.fused_attention_applies)")
        return True
    seq_k = const_value(k.shape[-2])
    longest = BLOCK_K if causal else DECOMPOSE_MAX_SEQ_K
    return applies and (seq_k is None or seq_k > longest)


def decompose(graph: Graph) -> int:
    """Expand composite ops in place; returns how many were expanded."""
    count = 0
    new: list[Node] = []
    for n in graph.nodes:
        if n.op == "attention" and not use_fused_attention(n):
            new.extend(_attention(n))
            count += 1
        else:
            new.append(n)
    graph.nodes = new
    return count
