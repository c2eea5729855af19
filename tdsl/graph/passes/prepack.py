"""Weight pre-packing: constants laid out once, at compile time, as the kernels read them.

A ``dense`` weight is PyTorch's (out, in); the GEMM streams it along ``out``, so it is
transposed once to (in, out) (``weight_layout="KN"``).  A ``conv2d`` weight (``groups`` 1)
is PyTorch's OIHW; the CPU schedule packs filter panels with output channels innermost, which
from OIHW is a gather per element on every call (ResNet-18's 3x3 512 -> 512 convolution
re-laid 9 MiB of filter each call: 5.1 ms, 3.9 from HWIO), so it is stored HWIO once
(``kernel_layout="HWIO"``).  Runs after batch-norm folding (which scales the weights in
PyTorch's layouts).
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, constant


#: Rows of the source transposed at a time by ``transpose_2d``.
TRANSPOSE_ROWS = 64


def transpose_2d(a: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``a.T`` (``a`` 2-D), written a band of ``TRANSPOSE_ROWS``
    source rows at a time: NumPy's one-pass strided copy of a large transpose misses the
    cache on every element (about 2x slower on a 4096 x 4096 float32 weight)."""
    out = np.empty((a.shape[1], a.shape[0]), dtype=a.dtype)
    for i in range(0, a.shape[0], TRANSPOSE_ROWS):
        out[:, i:i + TRANSPOSE_ROWS] = a[i:i + TRANSPOSE_ROWS].T
    return out


def prepack_weights(graph: Graph) -> int:
    """Pre-transpose constant dense and conv2d weights; returns how many."""
    count = 0
    done: dict[int, object] = {}
    for n in graph.nodes:
        if n.op == "conv2d":
            count += _prepack_conv(n, done)
            continue
        if n.op != "dense" or n.attrs.get("weight_layout", "NK") != "NK":
            continue
        w = n.inputs[1]
        if not w.is_const or w.ndim != 2:
            continue
        if id(w) not in done:
            done[id(w)] = constant(transpose_2d(w.const), w.name + "_kn")
        n.inputs = [n.inputs[0], done[id(w)], *n.inputs[2:]]
        n.attrs = {**n.attrs, "weight_layout": "KN"}
        count += 1
    return count


def _prepack_conv(n: Node, done: dict) -> int:
    """A conv2d's constant OIHW weight (``groups`` 1) stored HWIO; 1 if it was."""
    w = n.inputs[1]
    if n.attrs.get("groups", 1) != 1 or n.attrs.get("kernel_layout", "OIHW") != "OIHW" \
            or not w.is_const or w.ndim != 4:
        return 0
    key = (id(w), "hwio")
    if key not in done:
        done[key] = constant(np.ascontiguousarray(w.const.transpose(2, 3, 1, 0)),
                             w.name + "_hwio")
    n.inputs = [n.inputs[0], done[key], *n.inputs[2:]]
    n.attrs = {**n.attrs, "kernel_layout": "HWIO"}
    return 1
