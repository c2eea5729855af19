"""Pointwise convolutions as GEMMs.

A 1x1, stride-1, unpadded ``conv2d`` (``groups`` 1) in NCHW is one GEMM per image:
``out[n] (co x h*w) = W (co x ci) @ x[n] (ci x h*w)``.  The conv2d schedule computes with
output channels innermost and transposes its register tile to NCHW on write-out; the GEMM
writes rows of ``h * w`` contiguous outputs directly.  So such a convolution (constant
weight) is rewritten to

    reshape(matmul(W (1, co, ci), reshape(x, (n, ci, h * w))) [+ bias (co, 1)], x's shape)

-- the reshapes are free views (``fusion.Alias``), and ``flatten.sink_reshapes`` then moves
the last one below the elementwise epilogue (folded batch norm, ReLU6, residual add), which
fuses into the GEMM kernel as it did into the convolution's.

Only where the GEMM is faster (``gemm_pays``).  Measured (one thread, AVX-512, CPU time,
interleaved, ms GEMM / conv2d kernel / torch; ``benchmarks/resnet_convs.py --gemm``),
batch 1: 16->96 at 112x112 0.60 / 1.18 / 1.05, 24->144 at 56 0.21 / 0.39 / 0.30, 144->24 at 56
0.24 / 0.41 / 0.31, 32->192 at 28 0.11 / 0.17 / 0.13, 64->384 at 14 0.11 / 0.13 / 0.13; but
144->32 at 28 0.105 / 0.081, 384->64 at 14 0.13 / 0.10, and every 7x7 shape (960->320: 0.59 /
0.33) are faster as convolutions (a K x 64 panel past L1; 49 columns in 64-wide tiles).
"""
from __future__ import annotations

import numpy as np

from tdsl.ops._util import const_value

from ..ir import Graph, Node, Value, constant

#: Output planes of at least this many pixels (56 x 56) go to the GEMM whatever ``ci``.
GEMM_ANY_CIN_HW = 56 * 56
#: Smaller planes (down to ``GEMM_MIN_HW``) only with at most this many input channels.
GEMM_MAX_CIN = 64
#: Below this many pixels (14 x 14) the convolution kernel stays.
GEMM_MIN_HW = 14 * 14


def gemm_pays(cin: int, hw: int) -> bool:
    """Whether a pointwise convolution of ``cin`` input channels over ``hw`` output pixels
    runs faster as the GEMM than as the conv2d kernel (see the module doc)."""
    return hw >= GEMM_ANY_CIN_HW or (hw >= GEMM_MIN_HW and cin <= GEMM_MAX_CIN)


def is_pointwise(n: Node) -> bool:
    """A 1x1, stride-1, unpadded, ungrouped NCHW conv2d with a constant OIHW weight and
    constant channel and spatial sizes (the batch may be symbolic)."""
    if n.op != "conv2d" or len(n.outputs) != 1:
        return False
    a = n.attrs
    if a.get("groups", 1) != 1 or a.get("kernel_layout", "OIHW") != "OIHW":
        return False
    if tuple(_pair(a.get("stride", 1))) != (1, 1) or any(_four(a.get("padding", 0))):
        return False
    x, w = n.inputs[0], n.inputs[1]
    if not w.is_const or w.ndim != 4 or tuple(w.shape[2:]) != (1, 1) or x.ndim != 4:
        return False
    if len(n.inputs) > 2 and not (n.inputs[2].is_const and n.inputs[2].ndim == 1):
        return False
    if x.dtype != "float32" or w.dtype != "float32":
        return False
    return all(const_value(d) is not None for d in x.shape[1:])


def _pair(v: object) -> tuple:
    return (v, v) if isinstance(v, int) else tuple(v)


def _four(v: object) -> tuple:
    if isinstance(v, int):
        return (v,) * 4
    v = tuple(v)
    return v * 2 if len(v) == 2 else v


def pointwise_as_gemm(graph: Graph) -> int:
    """Rewrite the pointwise convolutions that ``gemm_pays`` picks; returns how many."""
    count = 0
    new: list[Node] = []
    for n in graph.nodes:
        if not is_pointwise(n):
            new.append(n)
            continue
        x, w = n.inputs[0], n.inputs[1]
        out = n.outputs[0]
        nb, cin, h, wd = x.shape
        cout = int(w.shape[0])
        hw = int(const_value(h)) * int(const_value(wd))
        if not gemm_pays(int(const_value(cin)), hw):
            new.append(n)
            continue
        x3 = Value((nb, cin, hw), x.dtype, name=x.name + "_pix")
        new.append(Node("reshape", [x], {"shape": x3.shape}, [x3]))
        w3 = constant(np.ascontiguousarray(w.const.reshape(1, cout, -1)), w.name + "_gemm")
        y3 = Value((nb, cout, hw), out.dtype, name=out.name + "_pix")
        attrs = {k: v for k, v in n.attrs.items() if k == "folded"}
        new.append(Node("matmul", [w3, x3], attrs, [y3]))
        if len(n.inputs) > 2:
            b = constant(np.ascontiguousarray(n.inputs[2].const.reshape(cout, 1)),
                         n.inputs[2].name + "_col")
            yb = Value(y3.shape, out.dtype, name=out.name + "_pixb")
            new.append(Node("add", [y3, b], {}, [yb]))
            y3 = yb
        new.append(Node("reshape", [y3], {"shape": out.shape}, [out]))
        count += 1
    graph.nodes = new
    return count
