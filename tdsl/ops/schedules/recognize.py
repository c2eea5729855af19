"""Recognize operators written by hand with ``td.compute`` that the default schedules know.

``tdsl.ops`` tags its operators (``OpKind``), and the default schedules key on the tag. A
user who writes the textbook matmul themselves (TVM's tutorials do) gets an untagged
compute with the same structure; ``gemm_form`` finds it, so it gets the same register-tiled,
panel-packed schedule instead of the generic reduction one (measured 512^3 on two
threads: 6.2 ms generic vs 1.5 ms).  A hand-written ``dense`` (B read as ``B[j, k]``) with
a small M gets ``ops.dense``'s streaming schedule (1 x 4096 by 4096 x 4096, one thread,
interleaved medians: 3.6 ms generic vs 2.8 ms, as fast as ``ops.dense``).  A hand-written
convolution (``conv_form``: NCHW / OIHW, NHWC / HWIO, depthwise NCHW, padding by the data's
producer) gets ``ops.conv2d``'s; ResNet-18's convolutions written so ran 7.9-39x slower with
the generic reduction schedule (3x3 512 -> 512 at 7 x 7: 131 ms vs 3.4), and 0.87-1.10x of
``ops.conv2d``'s time with it (``benchmarks/handwritten_anchors.py --model resnet18``).  A
1 x 1 convolution written without tap axes (``weight[f, rc, 0, 0]``) is one too.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from tdsl.arith.analyzer import Analyzer
from tdsl.expr import Add, Cast, Const, FloorDiv, Mul, Reduce, Sub, TensorLoad, Var
from tdsl.opaque import is_opaque
from tdsl.tensor import ComputeOp, PlaceholderOp, Tensor

from .._util import const_value
from ..tags import Pattern
from .graph import stage_pattern


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


def _sum_of_product(op: Any, ndim: "tuple[int, ...]", nred: "tuple[int, ...]") \
        -> "Optional[tuple[Reduce, Mul]]":
    """(the reduction, its product) when ``op`` is an untagged compute of ``ndim`` axes whose
    one body is a plain float sum over ``nred`` axes, no init or condition, of one product
    (under at most one cast); else None."""
    if not isinstance(op, ComputeOp) or op.tag or len(op.body) != 1 or len(op.axis) not in ndim:
        return None
    red = op.body[0]
    if not isinstance(red, Reduce) or len(red.axis) not in nred or len(red.source) != 1 \
            or not _is_plain_sum(red) or not red.dtype.is_float:
        return None
    if red.init or getattr(red.condition, "value", None) is not True:
        return None
    src = red.source[0]
    if isinstance(src, Cast):
        src = src.value
    return (red, src) if isinstance(src, Mul) else None


def gemm_form(op: Any) -> "Optional[GemmForm]":
    """The operands of ``op`` when it is an untagged (hand-written) matmul or batched
    matmul, B transposed or not, else None.  (A transposed B's panels are copied laid out
    ``[k, j]``, as ``dense``'s PACK stage is: ``llvm_matmul.schedule_matmul``.)"""
    found = _sum_of_product(op, (2, 3), (1,))
    if found is None:
        return None
    red, src = found
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


@dataclass(frozen=True)
class ConvForm:
    """A hand-written 2-D convolution ``out = sum data * weight`` over (channels,) taps:
    ``data`` is the tensor read as the (padded) input, ``weight`` the filter placeholder;
    ``layout`` "NCHW" (``data[n, c, i*sh + ry*dh, j*sw + rx*dw]``, output ``[n, f, i, j]``)
    or "NHWC"; ``kernel_layout`` "OIHW" (``weight[f, c, ry, rx]``) or "HWIO"
    (``weight[ry, rx, c, f]``); ``depthwise``: no channel reduction, channel ``f // m``
    (``weight[f, 0, ry, rx]``, NCHW / OIHW only); ``reduce_order``: where the channel,
    filter-row and filter-column axes are in the reduction's axes (empty for a depthwise
    one and a 1 x 1 one without taps)."""

    data: Tensor
    weight: Tensor
    layout: str
    kernel_layout: str
    stride: tuple
    dilation: tuple
    depthwise: bool = False
    reduce_order: tuple = ()

    def attrs(self) -> dict:
        """The attributes ``ops.conv2d`` gives its anchor (depthwise: ``groups`` is the
        channels, None when symbolic), and ``reduce_order`` (``ops.conv2d``'s is (0, 1, 2))."""
        groups = const_value(self.data.shape[1]) if self.depthwise else 1
        return {"layout": self.layout, "kernel_layout": self.kernel_layout,
                "stride": self.stride, "dilation": self.dilation, "groups": groups,
                "reduce_order": self.reduce_order}


def _linear(e: Any) -> "Optional[dict]":
    """``e`` as ``{var: coefficient}`` plus an integer constant under the key None, when it
    is a sum of constant multiples of variables; else None."""
    if isinstance(e, Var):
        return {e: 1}
    if isinstance(e, Const) and isinstance(e.value, int):
        return {None: e.value}
    if isinstance(e, (Add, Sub)):
        a, b = _linear(e.a), _linear(e.b)
        if a is None or b is None:
            return None
        sign = 1 if isinstance(e, Add) else -1
        out = dict(a)
        for k, v in b.items():
            out[k] = out.get(k, 0) + sign * v
        return out
    if isinstance(e, Mul):
        a, b = _linear(e.a), _linear(e.b)
        if a is None or b is None:
            return None
        for x, c in ((a, b), (b, a)):
            if set(c) == {None}:
                return {k: v * c[None] for k, v in x.items()}
    return None


def _window(e: Any, out_axis: Any, tap: Any) -> "Optional[tuple[int, int]]":
    """(stride, dilation) when ``e`` is ``out_axis * stride + tap * dilation`` (``tap``
    None: ``out_axis * stride``, dilation 1)."""
    lin = _linear(e)
    if lin is None:
        return None
    lin = {k: v for k, v in lin.items() if v}
    o = lin.pop(out_axis.var, 0)
    t = 1 if tap is None else lin.pop(tap.var, 0)
    if lin or o < 1 or t < 1:
        return None
    return o, t


def _depthwise_channel(e: Any, f: Any) -> bool:
    """``e`` is ``f`` or ``f // m`` (a channel multiplier m)."""
    if _is(e, f):
        return True
    return isinstance(e, FloorDiv) and _is(e.a, f) and isinstance(e.b, Const) \
        and isinstance(e.b.value, int) and e.b.value >= 1


def conv_form(op: Any) -> "Optional[ConvForm]":
    """The operands of ``op`` when it is an untagged (hand-written) 2-D convolution, NCHW
    with an OIHW filter or NHWC with an HWIO one, any stride and dilation, padding done by
    the data's producer (a 1 x 1 one may have no tap axes); or an NCHW depthwise one.
    Else None."""
    found = _sum_of_product(op, (4,), (1, 2, 3))
    if found is None:
        return None
    red, src = found
    for x, y in ((src.a, src.b), (src.b, src.a)):
        data = x.value if isinstance(x, Cast) else x
        wl = _load(y)
        if not isinstance(data, TensorLoad) or wl is None or data.tensor is wl.tensor \
                or len(data.indices) != 4 or len(wl.indices) != 4:
            continue
        form = _match_conv(op, red, _simplified(data, op, red), _simplified(wl, op, red))
        if form is not None:
            return form
    return None


def _simplified(load: TensorLoad, op: ComputeOp, red: Reduce) -> TensorLoad:
    """``load`` with its indices simplified over the axes' ranges: ``(f // 64) * 64 + c``
    (a grouped convolution's channel written for groups = 1, f < 64) is ``c``."""
    ana = Analyzer()
    for iv in (*op.axis, *red.axis):
        ana.bind(iv.var, iv.dom)
    return TensorLoad(load.tensor, tuple(ana.simplify(i) for i in load.indices))


def _reduce_at(idx: Any, red: Reduce) -> Any:
    """The reduction axis ``idx`` is, or None."""
    return next((r for r in red.axis if _is(idx, r)), None)


def _zero_tap(index: Any, extent: Any) -> bool:
    """A 1 x 1 filter's tap: index 0 of a filter axis of extent 1."""
    return getattr(index, "value", None) == 0 and const_value(extent) == 1


def _match_pointwise(op: Any, red: Reduce, data: TensorLoad, wl: TensorLoad
                     ) -> "Optional[ConvForm]":
    """A 1 x 1 convolution written without tap axes: ``data[n, rc, i*sh, j*sw] *
    weight[f, rc, 0, 0]`` (NCHW / OIHW) or ``data[n, i*sh, j*sw, rc] * weight[0, 0, rc, f]``
    (NHWC / HWIO), the filter's taps of extent 1."""
    di, wi, ws = data.indices, wl.indices, wl.tensor.shape
    (rc,) = red.axis
    if _is(wi[2], rc) and _zero_tap(wi[0], ws[0]) and _zero_tap(wi[1], ws[1]):
        n, i, j, f = op.axis
        ok = _is(wi[3], f) and _is(di[3], rc)
        layout, kl, hw = "NHWC", "HWIO", (di[1], di[2])
    else:
        n, f, i, j = op.axis
        ok = _is(wi[0], f) and _is(wi[1], rc) and _zero_tap(wi[2], ws[2]) \
            and _zero_tap(wi[3], ws[3]) and _is(di[1], rc)
        layout, kl, hw = "NCHW", "OIHW", (di[2], di[3])
    if not ok or not _is(di[0], n):
        return None
    sh, sw = _window(hw[0], i, None), _window(hw[1], j, None)
    if sh is None or sw is None:
        return None
    return ConvForm(data.tensor, wl.tensor, layout, kl, (sh[0], sw[0]), (1, 1))


def _match_conv(op: Any, red: Reduce, data: TensorLoad, wl: TensorLoad) -> "Optional[ConvForm]":
    if len(red.axis) == 1:
        return _match_pointwise(op, red, data, wl)
    di, wi = data.indices, wl.indices
    depthwise = len(red.axis) == 2
    if depthwise:
        n, f, i, j = op.axis
        ry, rx = _reduce_at(wi[2], red), _reduce_at(wi[3], red)
        ok = _is(wi[0], f) and getattr(wi[1], "value", None) == 0 \
            and _depthwise_channel(di[1], f)
        layout, kl, hw = "NCHW", "OIHW", (di[2], di[3])
    elif _reduce_at(wi[0], red) is not None:
        n, i, j, f = op.axis
        ry, rx, rc = (_reduce_at(wi[d], red) for d in range(3))
        ok = _is(wi[3], f) and rc is not None and _is(di[3], rc)
        layout, kl, hw = "NHWC", "HWIO", (di[1], di[2])
    else:
        n, f, i, j = op.axis
        rc, ry, rx = (_reduce_at(wi[d], red) for d in range(1, 4))
        ok = _is(wi[0], f) and rc is not None and _is(di[1], rc)
        layout, kl, hw = "NCHW", "OIHW", (di[2], di[3])
    if not ok or ry is None or rx is None or ry is rx or not _is(di[0], n) \
            or (not depthwise and rc in (ry, rx)):
        return None
    wh, ww = _window(hw[0], i, ry), _window(hw[1], j, rx)
    if wh is None or ww is None:
        return None
    order = () if depthwise else \
        tuple(next(k for k, a in enumerate(red.axis) if a is ax) for ax in (rc, ry, rx))
    return ConvForm(data.tensor, wl.tensor, layout, kl, (wh[0], ww[0]), (wh[1], ww[1]),
                    depthwise=depthwise, reduce_order=order)


def padding_producer(s: Any, form: ConvForm, conv: Any) -> Any:
    """The stage computing ``form``'s data when it is one ``conv`` alone reads, computed
    elementwise (the padding: the convolution's schedule computes it, as ``ops.conv2d``'s
    PAD stage; another reader would find it moved inside); else None."""
    src = s[form.data]
    ok = not src.is_placeholder and not src.is_output and not is_opaque(src.op) \
        and stage_pattern(src) is Pattern.INJECTIVE and s.consumers(src) == [conv]
    return src if ok else None


def as_conv2d_stages(s: Any, st: Any, out: Any, form: ConvForm) -> tuple:
    """``(anchor, out, pack)`` giving the hand-written convolution ``st`` (not depthwise)
    ``ops.conv2d``'s stages: the filter copied by a cache stage laid out ``[c, ky, kx, o]``
    (its PACK stage), and for NCHW the product accumulated with channels innermost
    (``transform_layout`` of the stage computing it: ``st``, or with no epilogue ``out`` a
    cache stage writing ``st`` out, which becomes ``out``)."""
    pack = s[s.cache_read(form.weight, "global", [st.op.outputs[0]])]
    pack.transform_layout(axes=[1, 2, 3, 0] if form.kernel_layout == "OIHW" else [2, 0, 1, 3])
    anchor = st
    if out is None:
        anchor, out = s[s.cache_write(st.op.outputs[0], "local")], st
    if form.layout == "NCHW":
        anchor.transform_layout(axes=[0, 2, 3, 1])
    return anchor, out, pack


def is_gemm_stage(st: Any) -> bool:
    """``st`` is a hand-written matmul (a reduction stage ``gemm_form`` recognizes)."""
    return stage_pattern(st) is Pattern.REDUCTION and gemm_form(st.op) is not None


def is_conv_stage(st: Any) -> bool:
    """``st`` is a hand-written convolution (a reduction stage ``conv_form`` recognizes)."""
    return stage_pattern(st) is Pattern.REDUCTION and conv_form(st.op) is not None
