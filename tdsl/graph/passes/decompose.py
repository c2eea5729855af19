"""Decompositions of composite graph ops into ones the fusion rules know.

``attention(q, k, v, [mask]; causal, scale)`` becomes ``matmul(q, k^T)``, a scale, the
causal mask and/or the given mask (additive float, or boolean: True attends), ``softmax``
and ``matmul(p, v)``: the scale and masks fuse into the softmax's row group.
"""
from __future__ import annotations

import math

import numpy as np

from tdsl.ops._util import const_value

from ..ir import Graph, GraphError, Node, Value, constant


def _attention(n: Node) -> list[Node]:
    q, k, v = n.inputs[:3]
    mask = n.inputs[3] if len(n.inputs) > 3 else None
    lq, lk = q.shape[-2], k.shape[-2]
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
        if str(lq) == str(lk):
            off = 0
        elif const_value(lq) is not None and const_value(lk) is not None:
            off = const_value(lk) - const_value(lq)
        else:
            raise GraphError("graph attention: causal with different symbolic q and k lengths")
        t = Value(s_shape, q.dtype, name=out.name + "_causal")
        nodes.append(Node("causal_mask", [cur], {"offset": off}, [t]))
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
    nodes.append(Node("softmax", [cur], {"axis": -1}, [p]))
    nodes.append(Node("matmul", [p, v], {}, [out]))
    return nodes


def decompose(graph: Graph) -> int:
    """Expand composite ops in place; returns how many were expanded."""
    count = 0
    new: list[Node] = []
    for n in graph.nodes:
        if n.op == "attention":
            new.extend(_attention(n))
            count += 1
        else:
            new.append(n)
    graph.nodes = new
    return count
