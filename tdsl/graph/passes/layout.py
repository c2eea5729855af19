"""Layout choice for convolutions: NHWC where its kernel is faster, with transposes at the
edges of each converted region only.

Three steps (the classic ConvertLayout + transpose elimination):

1. ``choose_regions``: convolutions that could run NHWC (``convertible``) and the
   elementwise ops between them form connected regions; a region is converted when the
   time its convolutions save (``nhwc_saving_ms``) exceeds the cost of the transposes at
   its edges (``transpose_ms``, one memory pass each) -- so a lone depthwise convolution
   among NCHW-favoured ones is left alone.
2. ``to_nhwc``: each chosen ``conv(x)`` becomes
   ``transpose(conv_nhwc(transpose(x, NCHW->NHWC), w_hwio), NHWC->NCHW)``, the weight
   re-laid HWIO at compile time.
3. ``sink_transposes``: a transpose moves below the elementwise op that reads it when each
   of that op's other operands is a scalar, a constant (permuted at compile time, its
   broadcast dimensions first made explicit: a ``(C, 1, 1)`` bias -> ``(1, 1, 1, C)``), the
   output of the same transpose, or a value already transposed the inverse way elsewhere
   (a residual's skip input, which the branch's first convolution reads transposed);
   ``cancel_transposes`` then composes ``transpose(transpose(x))`` and drops the identity.
   A transpose with several elementwise readers stays (sinking would copy it per reader).
   A conv-relu-conv-add chain that is all NHWC keeps one transpose at each end.  Sinking
   stops at ops without an NHWC form (pooling, reshape, GEMMs): the transpose stays, and
   fusion makes it its own copy kernel or, before a pool, the pool's prologue.

The rule (``nhwc_ratio``), from ``benchmarks/layout_probe.py`` (conv2d + relu alone,
``ops.schedule`` defaults, one thread, thread CPU time, ms NCHW / NHWC; NCHW with the HWIO
weight ``passes.prepack`` gives it):

* dense 3x3 convolutions (ResNet-18's, batch 1 and 8): the NCHW kernel computes with output
  channels innermost and only transposes its tile on write-out, so the two are within noise
  (NHWC/NCHW 0.91 .. 1.12, e.g. 64@56 2.31 / 2.23, 128@28 b8 17.5 / 18.6, 512@7 b8 19.8 /
  22.2): no gain (ratio 1).  The 3-channel stem: 7x7/2 2.56 / 2.52, b8 21.7 / 19.8, 3x3/2
  to 32: 0.49 / 0.36 (ratio 0.9).
* depthwise 3x3: NHWC loses at large planes with stride 1 (32@112 0.121 / 0.241, b8 2.28 /
  3.38; 144@56 0.127 / 0.233, b8 1.98 / 4.43: ratio 1.8), is even at a 56x56 stride-2 output
  (96@112/2 0.344 / 0.340), and wins on small planes (192@28 0.114 / 0.098, b8 1.01 / 0.89,
  144@56/2 0.124 / 0.106: ratio 0.87; 192@28/2 0.061 / 0.035, 384@14 0.075 / 0.038: 0.55).
* depthwise on 14x14 and 7x7 planes, more: 576@14 0.115 / 0.089, 576@14/2 0.052 / 0.032,
  960@7 0.082 / 0.038, b8 0.655 / 0.370, 384@14 b8 0.629 / 0.353.
* pointwise convolutions that stay convolutions (``passes.pointwise`` leaves small planes
  with many channels) gain from NHWC's plain write-out: 96->576@14 0.265 / 0.210, 576->96@14
  0.229 / 0.211, 160->960@7 0.210 / 0.159, 960->160@7 0.162 / 0.163, 320->1280@7 b8 4.94 /
  4.44 (ratio 0.87); stride 2 (ResNet's downsampling): 64->128@56/2 0.231 / 0.126,
  256->512@14/2 0.163 / 0.139 (ratio 0.7).

Transposes (``ops.transpose`` kernel alone, one thread): 0.42 .. 0.75 ns per element on
planes up to 64x56x56 (0.134 ms), 1.3 ns on larger ones (64x112x112: 1.05 ms; 8x64x56x56:
2.2 ms); the cost model takes 1 ns (``TRANSPOSE_MS_PER_ELEM``).  Two-thread wall times
(the probe's second column) are noisier on the shared 2-core machine but agree in sign
except for depthwise at 28x28, batch 8 (1.52): the rule follows the one-thread figures.

A convolution's NCHW time is estimated from its multiply-adds (``conv_ms``), a transpose's
from its elements (``transpose_ms``); figures in their docstrings.

Whole models (``benchmarks/layout_ab.py``: tdsl.testing.models at 224x224, ms, medians of 7
and 9 interleaved rounds in two runs, one thread CPU time / two threads wall, on a shared
2-core machine), layout NCHW / auto: ResNet-18 converts nothing (its 3x3 convolutions gain
nothing, the stem and the strided 1x1s less than their edges' transposes), so the graphs are
the same (run-to-run 0.98 .. 1.02 one thread, 0.82 .. 1.07 two threads: the noise);
MobileNetV2 runs its 14x14 and 7x7 stages (21 convolutions, an estimated 0.56 ms of 4.9 ms of
convolution per image) NHWC between two transposes: batch 1 10.40 / 9.88 and 10.23 / 10.32
(one thread), 6.22 / 6.24 (two threads, the quiet run); batch 8 82.3 / 81.2 and 80.2 / 76.6
(one thread), 180 / 172 and 101 / 99 (two threads); a third run: b1 10.45 / 10.14, 23.6 /
22.9, b8 91.8 / 91.6, 194 / 193.  Every convolution NHWC ("NHWC") loses:
ResNet-18 b1 50.8 vs 46.5, MobileNetV2 b1 13.4 vs 10.4, b8 146 vs 82.  Hence the default
"auto" (``DEFAULT_LAYOUT``): it never lost beyond the noise.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from tdsl.errors import TDSLError
from tdsl.ops._util import const_value

from .. import opset
from ..ir import Graph, Node, Value, constant
from ..opset import Kind
from .cleanup import eliminate_dead_code
from .rewrite import output_ids, replace_uses

TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)
MODES = ("auto", "NCHW", "NHWC")
#: ``optimize``'s and ``compile_graph``'s default (see the whole-model figures above).
DEFAULT_LAYOUT = "auto"

#: NHWC time / NCHW time of a pointwise convolution kept as a convolution, stride 1 and 2.
POINTWISE_RATIO = 0.87
POINTWISE_STRIDED_RATIO = 0.7
#: Multiply-adds per ms (one thread) of the dense and the depthwise NCHW kernels, and the
#: fixed cost of a small depthwise kernel (see ``conv_ms``).
DENSE_MACS_PER_MS = 5.0e7
DEPTHWISE_MACS_PER_MS = 5.0e7
DEPTHWISE_FIXED_MS = 0.05
#: Milliseconds per element of a 4-D transpose kernel (one thread; see ``transpose_ms``).
TRANSPOSE_MS_PER_ELEM = 1.0e-6


class LayoutError(TDSLError):
    """A bad layout option."""


@dataclass
class LayoutStats:
    """What ``convert_layout`` did: convolutions made NHWC, regions converted, regions
    left NCHW (they did not pay), transposes sunk and cancelled."""

    nhwc_convs: int = 0
    regions: int = 0
    regions_kept: int = 0
    sunk: int = 0
    cancelled: int = 0


# ---- the rule -----------------------------------------------------------------------------------
def _geometry(n: Node) -> tuple[int, int, int, int, int, int, int]:
    """(cin, cout, kh, kw, stride_h, groups, output pixels) of a convertible conv2d."""
    x, w, y = n.inputs[0], n.inputs[1], n.outputs[0]
    cin = int(const_value(x.shape[1]))
    cout, _, kh, kw = (int(d) for d in w.shape)
    s = n.attrs.get("stride", 1)
    sh = s if isinstance(s, int) else int(tuple(s)[0])
    hw = int(const_value(y.shape[2])) * int(const_value(y.shape[3]))
    return cin, cout, kh, kw, sh, int(n.attrs.get("groups", 1)), hw


def nhwc_ratio(n: Node) -> float:
    """Estimated NHWC time / NCHW time of the convertible conv2d ``n`` (module doc)."""
    cin, cout, kh, kw, stride, groups, hw = _geometry(n)
    if groups == cin and groups > 1:             # depthwise
        if hw >= 56 * 56:
            return 1.8 if stride == 1 else 1.0
        return 0.87 if hw >= 28 * 28 else 0.55
    if groups > 1:                               # other grouped convolutions: not measured
        return 1.0
    if kh == kw == 1:
        return POINTWISE_RATIO if stride == 1 else POINTWISE_STRIDED_RATIO
    return 0.9 if cin <= 4 else 1.0


def conv_ms(n: Node) -> float:
    """Estimated one-thread NCHW time of ``n`` per image: multiply-adds at
    ``DENSE_MACS_PER_MS`` (ResNet-18's 3x3 layers: 116 M in 2.3 ms), depthwise ones at
    ``DEPTHWISE_MACS_PER_MS`` plus ``DEPTHWISE_FIXED_MS`` (4.1 M: 0.127 ms, 0.68 M: 0.075,
    0.34 M: 0.061)."""
    cin, cout, kh, kw, _, groups, hw = _geometry(n)
    macs = hw * cout * (cin // groups) * kh * kw
    if groups > 1:
        return DEPTHWISE_FIXED_MS + macs / DEPTHWISE_MACS_PER_MS
    return macs / DENSE_MACS_PER_MS


def nhwc_saving_ms(n: Node) -> float:
    """Estimated ms per image saved by running ``n`` NHWC (negative: lost)."""
    return conv_ms(n) * (1.0 - nhwc_ratio(n))


def _per_image(v: Value) -> int:
    """Elements of ``v`` per batch item (its constant trailing dimensions)."""
    return int(np.prod([int(const_value(d)) for d in v.shape[1:]]))


def transpose_ms(v: Value) -> float:
    """Estimated ms per image of one transpose of the 4-D ``v``."""
    return _per_image(v) * TRANSPOSE_MS_PER_ELEM


# ---- regions ------------------------------------------------------------------------------------
def convertible(n: Node) -> bool:
    """A conv2d that could run NHWC: NCHW data with constant channel and spatial sizes
    (the batch may be symbolic), a constant OIHW float32 weight, no or a constant bias."""
    if n.op != "conv2d" or len(n.outputs) != 1:
        return False
    a = n.attrs
    if a.get("layout", "NCHW") != "NCHW" or a.get("kernel_layout", "OIHW") != "OIHW":
        return False
    x, w = n.inputs[0], n.inputs[1]
    if not w.is_const or w.ndim != 4 or x.ndim != 4 or w.dtype != "float32":
        return False
    if x.dtype != "float32" or any(const_value(d) is None for d in x.shape[1:]):
        return False
    if any(const_value(d) is None for d in n.outputs[0].shape[1:]):
        return False
    return len(n.inputs) == 2 or (n.inputs[2].is_const and n.inputs[2].ndim == 1)


def _flexible(n: Node) -> bool:
    """An elementwise op that runs in either layout: 4-D output, each operand a scalar,
    a constant, or a value of the output's shape."""
    if n.op == "torch" or opset.kind(n.op) is not Kind.ELEMWISE or len(n.outputs) != 1:
        return False
    if n.op in ("batch_norm", "causal_mask"):
        return False
    out = n.outputs[0]
    if out.ndim != 4 or any(const_value(d) is None for d in out.shape[1:]):
        return False
    return all(v.ndim == 0 or (v.is_const and v.ndim <= 4) or _same(v.shape, out.shape)
               for v in n.inputs)


def _same(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(str(x) == str(y) for x, y in zip(a, b))


def choose_regions(graph: Graph, mode: str) -> tuple[list[Node], int, int]:
    """The convolutions to convert, the regions converted and the regions kept NCHW."""
    members = [n for n in graph.nodes if convertible(n) or _flexible(n)]
    ids = {id(n) for n in members}
    parent = {id(n): id(n) for n in members}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i
    for n in members:
        for v in n.inputs:
            p = v.producer
            if p is not None and not v.is_const and id(p) in ids:
                parent[root(id(n))] = root(id(p))
    regions: dict[int, list[Node]] = {}
    for n in members:
        regions.setdefault(root(id(n)), []).append(n)
    users = graph.users()
    outs = output_ids(graph)
    chosen: list[Node] = []
    done = kept = 0
    for nodes in regions.values():
        convs = [n for n in nodes if n.op == "conv2d"]
        if not convs:
            continue
        inside = {id(n) for n in nodes}
        edges: dict[int, Value] = {}
        for n in nodes:
            for v in n.inputs:
                if v.ndim == 4 and not v.is_const and (
                        v.producer is None or id(v.producer) not in inside):
                    edges[id(v)] = v
            for v in n.outputs:
                if id(v) in outs or any(id(u) not in inside for u in users.get(id(v), ())):
                    edges[id(v)] = v
        saving = sum(nhwc_saving_ms(c) for c in convs)
        cost = sum(transpose_ms(v) for v in edges.values())
        if mode == "NHWC" or (mode == "auto" and saving > cost):
            chosen += convs
            done += 1
        else:
            kept += 1
    return chosen, done, kept


# ---- rewriting ----------------------------------------------------------------------------------
def _transpose(x: Value, perm: tuple, name: str) -> tuple[Node, Value]:
    out = Value(tuple(x.shape[p] for p in perm), x.dtype, name=name)
    return Node("transpose", [x], {"axes": tuple(perm)}, [out]), out


def to_nhwc(graph: Graph, convs: list[Node]) -> int:
    """Rewrite ``convs`` to NHWC between transposes (module doc, step 2)."""
    chosen = {id(n) for n in convs}
    new: list[Node] = []
    hwio: dict[int, Value] = {}
    for n in graph.nodes:
        if id(n) not in chosen:
            new.append(n)
            continue
        x, w, y = n.inputs[0], n.inputs[1], n.outputs[0]
        t_in, xt = _transpose(x, TO_NHWC, x.name + "_nhwc")
        if id(w) not in hwio:
            hwio[id(w)] = constant(np.ascontiguousarray(w.const.transpose(2, 3, 1, 0)),
                                   w.name + "_hwio")
        yt = Value(tuple(y.shape[p] for p in TO_NHWC), y.dtype, name=y.name + "_nhwc")
        attrs = {**n.attrs, "layout": "NHWC", "kernel_layout": "HWIO"}
        conv = Node("conv2d", [xt, hwio[id(w)], *n.inputs[2:]], attrs, [yt])
        back = Node("transpose", [yt], {"axes": TO_NCHW}, [y])
        new += [t_in, conv, back]
    graph.nodes = new
    return len(chosen)


def _perm_of(v: Value) -> Optional[tuple]:
    p = v.producer
    if p is None or v.is_const or p.op != "transpose":
        return None
    return tuple(p.attrs["axes"])


def _inverse(perm: tuple) -> tuple:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def _permuted_const(c: Value, ndim: int, inv: tuple, name: str) -> Value:
    """The constant ``c`` broadcast to ``ndim`` dimensions and laid out as
    ``transpose(_, inv)`` lays out a tensor of that rank."""
    a = c.const.reshape((1,) * (ndim - c.ndim) + tuple(c.const.shape))
    return constant(np.ascontiguousarray(a.transpose(inv)), name)


def _sink_plan(n: Node, order: dict, users: dict, outs: set) -> Optional[tuple]:
    """(perm, new operands) if ``n`` can run before the transpose ``perm`` of its
    operands (module doc, step 3), else None."""
    if not _flexible_any(n):
        return None
    perm = next((_perm_of(v) for v in n.inputs if _perm_of(v) is not None), None)
    if perm != TO_NCHW or n.outputs[0].ndim != len(perm):   # only this pass's transposes
        return None
    inv = _inverse(perm)
    out = n.outputs[0]
    ins: list[Value] = []
    for v in n.inputs:
        if v.ndim == 0:
            ins.append(v)
        elif _perm_of(v) == perm:
            readers = list(dict.fromkeys(users.get(id(v), ())))
            if v.ndim != out.ndim or id(v) in outs or not all(
                    _follows(u, perm, order, users) for u in readers):
                return None
            if sum(1 for u in readers if u.op != "transpose") > 1:
                return None     # each reader would get its own transpose: no sinking
            ins.append(v.producer.inputs[0])
        elif v.is_const:
            ins.append(_permuted_const(v, out.ndim, inv, v.name + "_perm"))
        elif _same(v.shape, out.shape):
            done = _existing(v, inv, order, order[id(n)], users)
            if done is None:
                return None
            ins.append(done)
        else:
            return None
    return perm, ins


def _flexible_any(n: Node) -> bool:
    if n.op == "torch" or opset.kind(n.op) is not Kind.ELEMWISE or len(n.outputs) != 1:
        return False
    return n.op not in ("batch_norm", "causal_mask")


def _follows(u: Node, perm: tuple, order: dict, users: dict) -> bool:
    """Whether reader ``u`` of a ``perm``-transposed value lets it sink: an inverse
    transpose (it cancels) or an elementwise op the transpose can sink below."""
    if u.op == "transpose":
        return tuple(u.attrs["axes"]) == _inverse(perm)
    if not _flexible_any(u):
        return False
    return all(v.ndim == 0 or v.is_const or _perm_of(v) == perm
               or _existing(v, _inverse(perm), order, order.get(id(u), 0), users) is not None
               for v in u.inputs)


def _existing(v: Value, perm: tuple, order: dict, before: int, users: dict
              ) -> Optional[Value]:
    """An existing ``transpose(v, perm)`` defined before node position ``before``."""
    for u in users.get(id(v), ()):
        if u.op == "transpose" and tuple(u.attrs["axes"]) == perm and \
                order.get(id(u), before) < before:
            return u.outputs[0]
    return None


def sink_transposes(graph: Graph) -> tuple[int, int]:
    """Move NHWC -> NCHW transposes below the elementwise ops that read them, cancelling
    inverse pairs as they meet; returns (ops sunk below, transposes cancelled)."""
    count = cancelled = 0
    changed = True
    while changed:
        changed = False
        users = graph.users()
        outs = output_ids(graph)
        order = {id(n): i for i, n in enumerate(graph.nodes)}
        for i, n in enumerate(graph.nodes):
            plan = _sink_plan(n, order, users, outs)
            if plan is None:
                continue
            perm, ins = plan
            out = n.outputs[0]
            mid = Value(tuple(out.shape[p] for p in _inverse(perm)), out.dtype,
                        name=out.name + "_t")
            graph.nodes[i:i + 1] = [Node(n.op, ins, dict(n.attrs), [mid]),
                                    Node("transpose", [mid], {"axes": perm}, [out])]
            count += 1
            changed = True
            cancelled += cancel_transposes(graph)
            eliminate_dead_code(graph)
            break
    return count, cancelled


def cancel_transposes(graph: Graph) -> int:
    """``transpose(transpose(x, p), q)`` -> ``transpose(x, p o q)``, or ``x`` when that
    is the identity (unless it is a graph output); returns how many."""
    count = 0
    outs = output_ids(graph)
    for n in list(graph.nodes):
        if n.op != "transpose":
            continue
        p = _perm_of(n.inputs[0])
        if p is None:
            continue
        q = tuple(n.attrs["axes"])
        src = n.inputs[0].producer.inputs[0]
        comp = tuple(p[i] for i in q)
        if comp == tuple(range(len(comp))) and id(n.outputs[0]) not in outs:
            replace_uses(graph, n.outputs[0], src)
            graph.nodes.remove(n)
        else:
            n.inputs = [src]
            n.attrs = {**n.attrs, "axes": comp}
        count += 1
    return count


def convert_layout(graph: Graph, mode: str = "auto") -> LayoutStats:
    """Choose each convolution region's layout and rewrite the graph (module doc)."""
    if mode not in MODES:
        raise LayoutError(f"layout option must be one of {MODES}, got {mode!r}")
    st = LayoutStats()
    if mode == "NCHW":
        return st
    convs, st.regions, st.regions_kept = choose_regions(graph, mode)
    if not convs:
        return st
    st.nhwc_convs = to_nhwc(graph, convs)
    st.cancelled = cancel_transposes(graph)
    st.sunk, cancelled = sink_transposes(graph)
    st.cancelled += cancelled + cancel_transposes(graph)
    eliminate_dead_code(graph)
    return st


def count_transposes(graph: Graph) -> int:
    """Transpose nodes in ``graph`` (for reports and tests)."""
    return sum(1 for n in graph.nodes if n.op == "transpose")


__all__ = ["convert_layout", "LayoutStats", "LayoutError", "nhwc_ratio", "conv_ms",
           "transpose_ms", "sink_transposes", "cancel_transposes", "count_transposes",
           "choose_regions", "to_nhwc", "convertible", "MODES"]
