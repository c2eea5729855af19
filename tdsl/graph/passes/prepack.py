"""Weight pre-packing: constants laid out once, at compile time, as the kernels read them.

A ``dense`` weight is PyTorch's (out, in); the GEMM streams it along ``out``, so it is
transposed once to (in, out) (``weight_layout="KN"``).  Runs after batch-norm folding
(which scales the weight's rows in PyTorch's layout).
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, constant


def prepack_weights(graph: Graph) -> int:
    """Pre-transpose constant dense weights; returns how many."""
    count = 0
    done: dict[int, object] = {}
    for n in graph.nodes:
        if n.op != "dense" or n.attrs.get("weight_layout", "NK") != "NK":
            continue
        w = n.inputs[1]
        if not w.is_const or w.ndim != 2:
            continue
        if id(w) not in done:
            done[id(w)] = constant(np.ascontiguousarray(w.const.T), w.name + "_kn")
        n.inputs = [n.inputs[0], done[id(w)], *n.inputs[2:]]
        n.attrs = {**n.attrs, "weight_layout": "KN"}
        count += 1
    return count
