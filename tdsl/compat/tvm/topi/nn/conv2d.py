"""TVM's convolutions as TVM declares them: a padding stage and one compute with the
reduce axes, so that AutoTVM templates written for TVM schedule them unchanged.

``conv2d_nchw(...)`` is ``pad_temp`` (tag ``"injective,pad"``, present even without
padding) read by ``conv2d_nchw`` with axes ``nn, ff, yy, xx`` and reduce axes
``rc, ry, rx``; ``conv2d_nhwc``/``conv2d_hwcn`` are the same in their layouts
(``ry, rx, rc``); ``depthwise_conv2d_nchw`` is ``PaddedInput`` read by ``DepthwiseConv2d``
(reduce axes ``di, dj``).  tdsl's own ``tdsl.ops.conv2d`` (a packed, NHWC-computed form its
default schedules tile) is not used here.
"""
from __future__ import annotations

from typing import Any, Sequence

import tdsl
from tdsl.arith import Analyzer
from tdsl.errors import ShapeError
from tdsl.expr import Expr

from .._args import pad4, pair
from ..utils import get_const_tuple

_INJECTIVE_PAD = "injective,pad"


def _simplify(e: Any) -> Any:
    return Analyzer().simplify(e) if isinstance(e, Expr) else e


def _known(e: Any) -> "int | None":
    return e if isinstance(e, int) else None


def pad(data: Any, pad_before: Sequence[Any], pad_after: "Sequence[Any] | None" = None,
        pad_value: Any = 0.0, name: str = "PadInput") -> Any:
    """``topi.nn.pad``: one stage (tag ``"injective,pad"``) that reads ``data`` shifted by
    ``pad_before`` and ``pad_value`` outside it; dimensions without padding index straight."""
    n = len(data.shape)
    before = list(pad_before)
    after = list(before if pad_after is None else pad_after)
    if len(before) != n or len(after) != n:
        raise ShapeError(f"topi.nn.pad: {n}-d input needs {n} pad sizes before and after, got "
                         f"{before} / {after}")
    for p in before + after:
        if not isinstance(p, (int, Expr)) or isinstance(p, bool) or (isinstance(p, int) and p < 0):
            raise ShapeError(f"topi.nn.pad: pad sizes must be non-negative ints, got {p!r}")
    shape = [_simplify(s + b + a) for s, b, a in zip(data.shape, before, after)]
    value = tdsl.const(pad_value, str(data.dtype)) if not isinstance(pad_value, Expr) \
        else pad_value

    def body(*idx: Any) -> Any:
        src, inside = [], []
        for d, i in enumerate(idx):
            b, a = before[d], after[d]
            if isinstance(b, int) and b == 0 and isinstance(a, int) and a == 0:
                src.append(i)
                continue
            src.append(i - b)
            inside.append(i >= b)
            inside.append(i < data.shape[d] + b)
        if not inside:
            return data(*src)
        return tdsl.if_then_else(tdsl.all(*inside), data(*src), value)
    return tdsl.compute(shape, body, name=name, tag=_INJECTIVE_PAD)


def _out_dim(op: str, size: Any, k: Any, dil: int, before: int, after: int,
             stride: int) -> Any:
    out = _simplify((size - (k - 1) * dil - 1 + before + after) // stride + 1)
    if isinstance(out, int) and out < 1:
        raise ShapeError(f"topi.nn.{op}: the dilated kernel ({k} x dilation {dil}) is larger "
                         f"than the padded input ({size} + {before} + {after}); no output")
    return out


def _check_channels(op: str, got: Any, want: Any) -> None:
    g, w = _known(got), _known(want)
    if g is not None and w is not None and g != w:
        raise ShapeError(f"topi.nn.{op}: the filter has {g} input channels, the data {w}")


def _cast(e: Any, dtype: Any) -> Any:
    return e if dtype is None else e.astype(dtype)


def _conv_args(op: str, stride: Any, dilation: Any, padding: Any, kh: Any,
               kw: Any) -> tuple:
    sh, sw = pair(stride, "stride", f"topi.nn.{op}")
    dh, dw = pair(dilation, "dilation", f"topi.nn.{op}")
    if min(sh, sw, dh, dw) < 1:
        raise ShapeError(f"topi.nn.{op}: stride and dilation must be >= 1, got {stride!r}, "
                         f"{dilation!r}")
    if not isinstance(kh, int) or not isinstance(kw, int):
        raise ShapeError(f"topi.nn.{op}: the kernel size must be constant, got {kh} x {kw}")
    pt, pl, pb, pr = pad4(padding, (kh - 1) * dh + 1, (kw - 1) * dw + 1, f"topi.nn.{op}")
    return sh, sw, dh, dw, pt, pl, pb, pr


def _ndim4(op: str, data: Any, kernel: Any) -> None:
    if len(data.shape) != 4 or len(kernel.shape) != 4:
        raise ShapeError(f"topi.nn.{op}: data and kernel must be 4-d, got "
                         f"{len(data.shape)}-d and {len(kernel.shape)}-d")


def conv2d_nchw(Input: Any, Filter: Any, stride: Any, padding: Any, dilation: Any,  # noqa: N803
                out_dtype: Any = None) -> Any:
    """``Input`` (N, C, H, W) with ``Filter`` (O, C, KH, KW): ``conv2d_nchw`` (N, O, OH, OW)."""
    _ndim4("conv2d_nchw", Input, Filter)
    n, c, h, w = get_const_tuple(Input.shape)
    o, ci, kh, kw = get_const_tuple(Filter.shape)
    _check_channels("conv2d_nchw", ci, c)
    sh, sw, dh, dw, pt, pl, pb, pr = _conv_args("conv2d_nchw", stride, dilation, padding, kh, kw)
    oh = _out_dim("conv2d_nchw", h, kh, dh, pt, pb, sh)
    ow = _out_dim("conv2d_nchw", w, kw, dw, pl, pr, sw)
    temp = pad(Input, [0, 0, pt, pl], [0, 0, pb, pr], name="pad_temp")
    rc = tdsl.reduce_axis((0, ci), name="rc")
    ry = tdsl.reduce_axis((0, kh), name="ry")
    rx = tdsl.reduce_axis((0, kw), name="rx")
    return tdsl.compute(
        (n, o, oh, ow),
        lambda nn, ff, yy, xx: tdsl.sum(
            _cast(temp[nn, rc, yy * sh + ry * dh, xx * sw + rx * dw], out_dtype)
            * _cast(Filter[ff, rc, ry, rx], out_dtype), axis=[rc, ry, rx]),
        name="conv2d_nchw", tag="conv2d_nchw")


def conv2d_nhwc(Input: Any, Filter: Any, stride: Any, padding: Any, dilation: Any,  # noqa: N803
                out_dtype: Any = None) -> Any:
    """``Input`` (N, H, W, C) with ``Filter`` (KH, KW, C, O): ``conv2d_nhwc`` (N, OH, OW, O)."""
    _ndim4("conv2d_nhwc", Input, Filter)
    n, h, w, c = get_const_tuple(Input.shape)
    kh, kw, ci, o = get_const_tuple(Filter.shape)
    _check_channels("conv2d_nhwc", ci, c)
    sh, sw, dh, dw, pt, pl, pb, pr = _conv_args("conv2d_nhwc", stride, dilation, padding, kh, kw)
    oh = _out_dim("conv2d_nhwc", h, kh, dh, pt, pb, sh)
    ow = _out_dim("conv2d_nhwc", w, kw, dw, pl, pr, sw)
    temp = pad(Input, [0, pt, pl, 0], [0, pb, pr, 0], name="pad_temp")
    ry = tdsl.reduce_axis((0, kh), name="ry")
    rx = tdsl.reduce_axis((0, kw), name="rx")
    rc = tdsl.reduce_axis((0, ci), name="rc")
    return tdsl.compute(
        (n, oh, ow, o),
        lambda nn, yy, xx, ff: tdsl.sum(
            _cast(temp[nn, yy * sh + ry * dh, xx * sw + rx * dw, rc], out_dtype)
            * _cast(Filter[ry, rx, rc, ff], out_dtype), axis=[ry, rx, rc]),
        name="conv2d_nhwc", tag="conv2d_nhwc")


def conv2d_hwcn(Input: Any, Filter: Any, stride: Any, padding: Any, dilation: Any,  # noqa: N803
                out_dtype: Any = None) -> Any:
    """``Input`` (H, W, C, N) with ``Filter`` (KH, KW, C, O): ``conv2d_hwcn`` (OH, OW, O, N)."""
    _ndim4("conv2d_hwcn", Input, Filter)
    h, w, c, n = get_const_tuple(Input.shape)
    kh, kw, ci, o = get_const_tuple(Filter.shape)
    _check_channels("conv2d_hwcn", ci, c)
    sh, sw, dh, dw, pt, pl, pb, pr = _conv_args("conv2d_hwcn", stride, dilation, padding, kh, kw)
    oh = _out_dim("conv2d_hwcn", h, kh, dh, pt, pb, sh)
    ow = _out_dim("conv2d_hwcn", w, kw, dw, pl, pr, sw)
    temp = pad(Input, [pt, pl, 0, 0], [pb, pr, 0, 0], name="pad_temp")
    ry = tdsl.reduce_axis((0, kh), name="ry")
    rx = tdsl.reduce_axis((0, kw), name="rx")
    rc = tdsl.reduce_axis((0, ci), name="rc")
    return tdsl.compute(
        (oh, ow, o, n),
        lambda yy, xx, ff, nn: tdsl.sum(
            _cast(temp[yy * sh + ry * dh, xx * sw + rx * dw, rc, nn], out_dtype)
            * _cast(Filter[ry, rx, rc, ff], out_dtype), axis=[ry, rx, rc]),
        name="conv2d_hwcn", tag="conv2d_hwcn")


def depthwise_conv2d_nchw(Input: Any, Filter: Any, stride: Any, padding: Any,  # noqa: N803
                          dilation: Any, out_dtype: Any = None) -> Any:
    """``Input`` (N, C, H, W) with ``Filter`` (C, M, KH, KW): ``DepthwiseConv2d``
    (N, C * M, OH, OW); output channel ``c`` reads input channel ``c // M``."""
    _ndim4("depthwise_conv2d_nchw", Input, Filter)
    n, c, h, w = get_const_tuple(Input.shape)
    fc, mult, kh, kw = get_const_tuple(Filter.shape)
    _check_channels("depthwise_conv2d_nchw", fc, c)
    op = "depthwise_conv2d_nchw"
    sh, sw, dh, dw, pt, pl, pb, pr = _conv_args(op, stride, dilation, padding, kh, kw)
    oh = _out_dim(op, h, kh, dh, pt, pb, sh)
    ow = _out_dim(op, w, kw, dw, pl, pr, sw)
    padded = pad(Input, [0, 0, pt, pl], [0, 0, pb, pr], name="PaddedInput")
    di = tdsl.reduce_axis((0, kh), name="di")
    dj = tdsl.reduce_axis((0, kw), name="dj")
    dtype = out_dtype or str(Input.dtype)
    return tdsl.compute(
        (n, _simplify(c * mult), oh, ow),
        lambda b, ch, i, j: tdsl.sum(
            padded[b, ch // mult, i * sh + di * dh, j * sw + dj * dw].astype(dtype)
            * Filter[ch // mult, ch % mult, di, dj].astype(dtype), axis=[di, dj]),
        name="DepthwiseConv2d", tag="depthwise_conv2d_nchw")


__all__ = ["pad", "conv2d_nchw", "conv2d_nhwc", "conv2d_hwcn", "depthwise_conv2d_nchw"]
