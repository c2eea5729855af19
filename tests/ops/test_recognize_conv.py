"""A convolution written by hand with ``td.compute`` gets ``ops.conv2d``'s default schedule
(the filter packed ``[c, ky, kx, o]`` by a cache stage, the accumulator tile with output
channels innermost, the padding materialized) and stays correct; computations that only
look similar do not (``recognize.conv_form``, ``llvm.schedule_conv_form``)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tdsl as td
from tdsl import ops
from tdsl.ops.schedules.recognize import conv_form
from tdsl.testing.reference import conv2d_nchw

from .helpers import check, randn


def _pad(x, pad):
    if pad == 0:
        return x
    n, c, h, w = x.shape
    return td.compute((n, c, h + 2 * pad, w + 2 * pad), lambda q, k, i, j: td.if_then_else(
        td.all(i >= pad, i < h + pad, j >= pad, j < w + pad), x[q, k, i - pad, j - pad], 0.0),
        name="pad")


def _conv(n, c, h, w, o, k, stride=1, pad=0, dilation=1, depthwise=False, epilogue=True,
          order="c,y,x"):
    """A hand-written NCHW / OIHW convolution (``depthwise``: o = c * multiplier), with a
    bias + ReLU epilogue or as the output itself; ``order``: the reduction axes' order."""
    x = td.placeholder((n, c, h, w), name="x")
    wt = td.placeholder((o, 1 if depthwise else c, k, k), name="w")
    b = td.placeholder((o,), name="b")
    xp = _pad(x, pad)
    oh, ow = ((e + 2 * pad - dilation * (k - 1) - 1) // stride + 1 for e in (h, w))
    ry, rx = td.reduce_axis((0, k), "ry"), td.reduce_axis((0, k), "rx")
    if depthwise:
        m = o // c
        conv = td.compute((n, o, oh, ow), lambda q, f, i, j: td.sum(
            xp[q, f // m, i * stride + ry * dilation, j * stride + rx * dilation] *
            wt[f, 0, ry, rx], axis=[ry, rx]), name="conv")
    else:
        rc = td.reduce_axis((0, c), "rc")
        axes = {"c": rc, "y": ry, "x": rx}
        conv = td.compute((n, o, oh, ow), lambda q, f, i, j: td.sum(
            xp[q, rc, i * stride + ry * dilation, j * stride + rx * dilation] *
            wt[f, rc, ry, rx], axis=[axes[a] for a in order.split(",")]), name="conv")
    if not epilogue:
        return x, wt, None, conv, conv
    out = td.compute(conv.shape, lambda q, f, i, j: td.maximum(conv[q, f, i, j] + b[f], 0.0),
                     name="out")
    return x, wt, b, conv, out


def _taps(c, k=3):
    """The reduction axes (rc, ry, rx) of a k x k convolution over c channels."""
    return (td.reduce_axis((0, c), "rc"), td.reduce_axis((0, k), "ry"),
            td.reduce_axis((0, k), "rx"))


def _nhwc(n, h, w, c, o, k=3):
    """A hand-written NHWC convolution with an HWIO filter (no padding)."""
    x = td.placeholder((n, h, w, c), name="x")
    wt = td.placeholder((k, k, c, o), name="w")
    rc, ry, rx = _taps(c, k)
    conv = td.compute((n, h - k + 1, w - k + 1, o), lambda q, i, j, f: td.sum(
        x[q, i + ry, j + rx, rc] * wt[ry, rx, rc, f], axis=[rc, ry, rx]), name="conv")
    return x, wt, conv


def _reference(xa, wa, ba, stride, pad, dilation, groups, epilogue):
    ref = conv2d_nchw(xa, wa, (stride, stride), (pad,) * 4, (dilation, dilation), groups)
    if epilogue:
        ref = np.maximum(ref + ba[None, :, None, None], 0.0)
    return ref


def _run(n, c, h, w, o, k, stride=1, pad=0, dilation=1, depthwise=False, epilogue=True):
    x, wt, b, conv, out = _conv(n, c, h, w, o, k, stride, pad, dilation, depthwise, epilogue)
    assert conv_form(conv.op) is not None
    args = [x, wt] + ([b] if epilogue else []) + [out]
    f = td.build(ops.schedule(out, "llvm"), args, target="llvm")
    xa, wa, ba = randn(n, c, h, w), randn(o, 1 if depthwise else c, k, k), randn(o)
    ref = _reference(xa, wa, ba, stride, pad, dilation, c if depthwise else 1, epilogue)
    check(f, [xa, wa] + ([ba] if epilogue else []), ref, rtol=1e-4, atol=1e-4 * c * k * k)


# ---- recognition -------------------------------------------------------------------------
def test_recognizes_nchw_convolutions_with_their_stride_dilation_and_padding():
    x, wt, _, conv, _ = _conv(1, 8, 20, 20, 16, 3, stride=2, pad=1, dilation=2)
    form = conv_form(conv.op)
    assert form is not None and form.weight is wt and form.data is not x   # the padded input
    assert (form.layout, form.kernel_layout, form.stride, form.dilation, form.depthwise) == \
        ("NCHW", "OIHW", (2, 2), (2, 2), False)
    x, wt, _, conv, _ = _conv(1, 8, 9, 9, 16, 1)
    assert conv_form(conv.op).data is x
    x, wt, _, conv, _ = _conv(1, 8, 9, 9, 16, 3, order="y,x,c")
    assert conv_form(conv.op) is not None


def test_recognizes_nhwc_with_an_hwio_filter_and_a_depthwise_one():
    _, _, conv = _nhwc(2, 10, 10, 8, 24)
    form = conv_form(conv.op)
    assert (form.layout, form.kernel_layout) == ("NHWC", "HWIO")
    _, _, _, dw, _ = _conv(1, 8, 12, 12, 16, 3, depthwise=True)
    assert conv_form(dw.op).depthwise


def test_a_grouped_channel_index_written_for_one_group_is_recognized():
    """``(f // O) * C + rc`` (a grouped conv's channel, groups = 1) is ``rc``: the
    benchmark's hand-written models write it so."""
    x = td.placeholder((1, 8, 10, 10), name="x")
    w = td.placeholder((16, 8, 3, 3), name="w")
    rc, ry, rx = _taps(8)
    conv = td.compute((1, 16, 8, 8), lambda q, f, i, j: td.sum(
        x[q, f // 16 * 8 + rc, i + ry, j + rx] * w[f, rc, ry, rx], axis=[rc, ry, rx]))
    assert conv_form(conv.op) is not None


@pytest.mark.parametrize("what", ["max", "tagged", "offset", "flipped", "swapped_taps",
                                  "channel_from_f", "integer", "where", "same_tensor",
                                  "two_taps_on_one_axis"])
def test_look_alikes_are_not_recognized(what):
    x = td.placeholder((1, 8, 12, 12), name="x")
    w = td.placeholder((8, 8, 3, 3), name="w")
    rc, ry, rx = _taps(8)
    shape, axes = (1, 8, 10, 10), [rc, ry, rx]

    def conv(body, **kw):
        return td.compute(shape, lambda q, f, i, j: td.sum(body(q, f, i, j), axis=axes, **kw))
    if what == "max":
        c = td.compute(shape, lambda q, f, i, j: td.max(
            x[q, rc, i + ry, j + rx] * w[f, rc, ry, rx], axis=axes))
    elif what == "tagged":
        c = ops.conv2d(x, w)
    elif what == "offset":       # a shifted window (the padding done in the index)
        c = conv(lambda q, f, i, j: x[q, rc, i + ry + 1, j + rx] * w[f, rc, ry, rx])
    elif what == "flipped":      # a true (flipped) convolution
        c = conv(lambda q, f, i, j: x[q, rc, i - ry + 2, j + rx] * w[f, rc, ry, rx])
    elif what == "swapped_taps":
        c = conv(lambda q, f, i, j: x[q, rc, i + ry, j + rx] * w[f, rc, rx, ry])
    elif what == "channel_from_f":
        c = conv(lambda q, f, i, j: x[q, f, i + ry, j + rx] * w[f, rc, ry, rx])
    elif what == "integer":
        xi = td.placeholder((1, 8, 12, 12), "int32", name="xi")
        wi = td.placeholder((8, 8, 3, 3), "int32", name="wi")
        c = conv(lambda q, f, i, j: xi[q, rc, i + ry, j + rx] * wi[f, rc, ry, rx])
    elif what == "where":
        c = conv(lambda q, f, i, j: x[q, rc, i + ry, j + rx] * w[f, rc, ry, rx], where=rc > ry)
    elif what == "same_tensor":
        c = conv(lambda q, f, i, j: w[q, rc, i + ry, j + rx] * w[f, rc, ry, rx])
    else:
        c = conv(lambda q, f, i, j: x[q, rc, i + ry + rx, j] * w[f, rc, ry, rx])
    assert conv_form(c.op) is None


# ---- the schedule ------------------------------------------------------------------------
def test_gets_the_packed_channels_innermost_schedule():
    x, wt, b, conv, out = _conv(1, 16, 30, 30, 64, 3, pad=1)
    s = ops.schedule(out, "llvm")
    pack = s.stage_by_name("w.global")
    # four row chunks read the filter: packed once, panel by panel (output channels
    # innermost within a panel), ``llvm_conv.pack_at_root``
    shape = [int(d.value) for d in pack.op.outputs[0].shape]
    assert shape[1:4] == [16, 3, 3] and shape[0] * shape[4] == 64 and shape[4] % 8 == 0
    conv_st = s.stage_by_name("conv")
    assert [int(iv.dom.extent.value) for iv in conv_st.op.axis] == [1, 30, 30, 64]  # NHWC
    assert conv_st.scope.value == "local"
    assert s.stage_by_name("pad").attach_type.value != "inline"
    text = str(td.lower(s, [x, wt, b, out]))
    assert "w.global[" in text and "parallel(" in text and "vectorized(" in text


def test_the_output_convolution_accumulates_in_a_cache_stage():
    x, wt, _, conv, out = _conv(1, 16, 14, 14, 32, 3, pad=1, epilogue=False)
    s = ops.schedule(out, "llvm")
    local = s.stage_by_name("conv.local")
    assert [int(iv.dom.extent.value) for iv in local.op.axis] == [1, 14, 14, 32]
    assert "w.global" in [st.op.name for st in s.stages]


def test_the_default_replays_as_a_trace():
    """The tuner measures ``ops.schedule``'s program by replaying its trace (cache_read,
    transform_layout, cache_write included)."""
    from tdsl.autotune.replay import replay
    x, wt, b, conv, out = _conv(1, 8, 11, 11, 24, 3, pad=1)
    s = ops.schedule(out, "llvm")
    s2 = replay(s.trace.to_json(), [out])
    f = td.build(s2, [x, wt, b, out], target="llvm")
    xa, wa, ba = randn(1, 8, 11, 11), randn(24, 8, 3, 3), randn(24)
    check(f, [xa, wa, ba], _reference(xa, wa, ba, 1, 1, 1, 1, True), rtol=1e-4, atol=1e-3)


# ---- numerics ----------------------------------------------------------------------------
@pytest.mark.parametrize("n, c, h, o, k, stride, pad, dilation", [
    (1, 64, 56, 64, 3, 1, 1, 1),     # ResNet-18's 56 x 56 stage
    (1, 3, 37, 20, 7, 2, 3, 1),      # a stem: 3 channels, 7 x 7 stride 2, odd sizes
    (2, 24, 15, 40, 1, 2, 0, 1),     # 1 x 1 stride 2, batch 2, channels not dividing 32
    (1, 20, 17, 33, 3, 1, 2, 2),     # dilation 2, 33 channels (a partial vector)
    (1, 256, 14, 512, 3, 2, 1, 1),   # a deep stage (the filter packed at root or per panel)
])
def test_matches_numpy(n, c, h, o, k, stride, pad, dilation):
    _run(n, c, h, h, o, k, stride, pad, dilation)


def test_the_output_convolution_matches_numpy():
    _run(1, 16, 14, 14, 40, 3, pad=1, epilogue=False)
    _run(2, 9, 10, 13, 12, 3, stride=2, epilogue=False)


@pytest.mark.parametrize("c, mult, h, stride", [(32, 1, 28, 1), (24, 2, 17, 2), (7, 1, 9, 1)])
def test_depthwise_matches_numpy(c, mult, h, stride):
    _run(1, c, h, h, c * mult, 3, stride, pad=1, depthwise=True)


@settings(max_examples=10, deadline=None)
@given(c=st.integers(1, 40), o=st.integers(1, 70), h=st.integers(3, 20), w=st.integers(3, 20),
       k=st.sampled_from([1, 3]), stride=st.integers(1, 2), pad=st.integers(0, 1))
def test_matches_numpy_at_any_size(c, o, h, w, k, stride, pad):
    _run(1, c, h, w, o, k, stride, pad)


def test_nhwc_hwio_matches_numpy():
    x, w, conv = _nhwc(2, 13, 11, 12, 40)
    assert conv_form(conv.op).layout == "NHWC"
    s = ops.schedule(conv, "llvm")
    assert "w.global" in [st_.op.name for st_ in s.stages]
    f = td.build(s, [x, w, conv], target="llvm")
    xa, wa = randn(2, 13, 11, 12), randn(3, 3, 12, 40)
    ref = conv2d_nchw(xa.transpose(0, 3, 1, 2), wa.transpose(3, 2, 0, 1)).transpose(0, 2, 3, 1)
    check(f, [xa, wa], ref, rtol=1e-4, atol=1e-3)


def test_symbolic_batch_and_image_size():
    """Batch, height and width symbolic, bound to several values (tails of the row chunks
    and of the column tile)."""
    n, h, w = td.var("n"), td.var("h"), td.var("w")
    x, wt, b, conv, out = _conv(n, 12, h, w, 40, 3, pad=1)
    assert conv_form(conv.op) is not None
    f = td.build(ops.schedule(out, "llvm"), [x, wt, b, out], target="llvm")
    for N, H, W in [(1, 1, 1), (2, 9, 14), (1, 30, 7), (3, 5, 17)]:
        xa, wa, ba = randn(N, 12, H, W), randn(40, 12, 3, 3), randn(40)
        check(f, [xa, wa, ba], _reference(xa, wa, ba, 1, 1, 1, 1, True), rtol=1e-4,
              atol=1e-3)


def test_a_padding_two_convolutions_read_stays_theirs():
    """Two convolutions of one padded input (large enough that a convolution alone would
    pad it row chunk by row chunk in its own tasks): both read it whole."""
    x = td.placeholder((1, 64, 56, 56), name="x")
    w1 = td.placeholder((128, 64, 3, 3), name="w1")
    w2 = td.placeholder((96, 64, 3, 3), name="w2")
    xp = _pad(x, 1)

    def conv(w, o, name):
        rc, ry, rx = _taps(64)
        return td.compute((1, o, 28, 28), lambda q, f, i, j: td.sum(
            xp[q, rc, i * 2 + ry, j * 2 + rx] * w[f, rc, ry, rx], axis=[rc, ry, rx]), name=name)
    c1, c2 = conv(w1, 128, "c1"), conv(w2, 96, "c2")
    f = td.build(ops.schedule([c1, c2], "llvm"), [x, w1, w2, c1, c2], target="llvm")
    xa, wa1, wa2 = randn(1, 64, 56, 56), randn(128, 64, 3, 3), randn(96, 64, 3, 3)
    check(f, [xa, wa1, wa2], [conv2d_nchw(xa, wa1, (2, 2), (1,) * 4),
                              conv2d_nchw(xa, wa2, (2, 2), (1,) * 4)], rtol=1e-4, atol=1e-3)


def test_float64():
    x = td.placeholder((1, 5, 9, 9), "float64", name="x")
    w = td.placeholder((20, 5, 3, 3), "float64", name="w")
    rc, ry, rx = _taps(5)
    conv = td.compute((1, 20, 7, 7), lambda q, f, i, j: td.sum(
        x[q, rc, i + ry, j + rx] * w[f, rc, ry, rx], axis=[rc, ry, rx]), name="conv")
    assert conv_form(conv.op) is not None
    f = td.build(ops.schedule(conv, "llvm"), [x, w, conv], target="llvm")
    xa, wa = randn(1, 5, 9, 9, dtype="float64"), randn(20, 5, 3, 3, dtype="float64")
    check(f, [xa, wa], conv2d_nchw(xa, wa), rtol=1e-10, atol=1e-10)


# ---- 1 x 1 convolutions written without tap axes -----------------------------------------
def _pointwise(n, c, h, w, o, stride=1, layout="NCHW", epilogue=True):
    """``sum(x[n, rc, i*s, j*s] * w[f, rc, 0, 0])`` (NCHW / OIHW) or its NHWC / HWIO twin,
    with a bias + ReLU epilogue (or as the output)."""
    oh, ow = (h - 1) // stride + 1, (w - 1) // stride + 1
    rc = td.reduce_axis((0, c), "rc")
    if layout == "NCHW":
        x = td.placeholder((n, c, h, w), name="x")
        wt = td.placeholder((o, c, 1, 1), name="w")
        conv = td.compute((n, o, oh, ow), lambda q, f, i, j: td.sum(
            x[q, rc, i * stride, j * stride] * wt[f, rc, 0, 0], axis=rc), name="conv")
        bias = lambda b, q, f, i, j: b[f]   # noqa: E731
    else:
        x = td.placeholder((n, h, w, c), name="x")
        wt = td.placeholder((1, 1, c, o), name="w")
        conv = td.compute((n, oh, ow, o), lambda q, i, j, f: td.sum(
            x[q, i * stride, j * stride, rc] * wt[0, 0, rc, f], axis=rc), name="conv")
        bias = lambda b, q, i, j, f: b[f]   # noqa: E731
    if not epilogue:
        return x, wt, None, conv, conv
    b = td.placeholder((o,), name="b")
    out = td.compute(conv.shape, lambda *ix: td.maximum(conv[ix] + bias(b, *ix), 0.0),
                     name="out")
    return x, wt, b, conv, out


def test_recognizes_a_pointwise_convolution_without_tap_axes():
    x, wt, _, conv, _ = _pointwise(1, 16, 14, 14, 32, stride=2)
    form = conv_form(conv.op)
    assert form is not None and (form.data, form.weight) == (x, wt)
    assert (form.layout, form.kernel_layout, form.stride, form.dilation) == \
        ("NCHW", "OIHW", (2, 2), (1, 1))
    _, _, _, conv, _ = _pointwise(1, 16, 14, 14, 32, layout="NHWC")
    assert (conv_form(conv.op).layout, conv_form(conv.op).kernel_layout) == ("NHWC", "HWIO")


@pytest.mark.parametrize("what", ["wide_filter", "symbolic_filter", "channel_from_f",
                                  "offset"])
def test_pointwise_look_alikes_are_not_recognized(what):
    """A filter read at one tap that may not be its only one, the channel taken from the
    output channel, a shifted window: not 1 x 1 convolutions."""
    x = td.placeholder((1, 8, 12, 12), name="x")
    taps = {"wide_filter": (3, 1), "symbolic_filter": (td.var("kh"), 1)}.get(what, (1, 1))
    w = td.placeholder((8, 8, *taps), name="w")
    rc = td.reduce_axis((0, 8), "rc")
    body = {
        "channel_from_f": lambda q, f, i, j: x[q, f, i, j] * w[f, rc, 0, 0],
        "offset": lambda q, f, i, j: x[q, rc, i + 1, j] * w[f, rc, 0, 0],
    }.get(what, lambda q, f, i, j: x[q, rc, i, j] * w[f, rc, 0, 0])
    c = td.compute((1, 8, 10, 10), lambda q, f, i, j: td.sum(body(q, f, i, j), axis=rc))
    assert conv_form(c.op) is None
    ok = td.compute((1, 8, 10, 10), lambda q, f, i, j: td.sum(
        x[q, rc, i, j] * td.placeholder((8, 8, 1, 1), name="w1")[f, rc, 0, 0], axis=rc))
    assert conv_form(ok.op) is not None       # the same written right


@pytest.mark.parametrize("n, c, h, o, stride, layout, epilogue", [
    (1, 64, 56, 64, 1, "NCHW", True), (2, 64, 28, 128, 2, "NCHW", False),
    (1, 33, 13, 70, 1, "NCHW", True), (2, 24, 15, 40, 2, "NHWC", True),
    (1, 17, 9, 9, 1, "NHWC", False)])
def test_pointwise_matches_numpy(n, c, h, o, stride, layout, epilogue):
    x, wt, b, conv, out = _pointwise(n, c, h, h, o, stride, layout, epilogue)
    s = ops.schedule(out, "llvm")
    assert "w.global" in [st_.op.name for st_ in s.stages]      # ops.conv2d's packed filter
    f = td.build(s, [x, wt] + ([b] if epilogue else []) + [out], target="llvm")
    if layout == "NCHW":
        xa, wa, ba = randn(n, c, h, h), randn(o, c, 1, 1), randn(o)
        ref = _reference(xa, wa, ba, stride, 0, 1, 1, epilogue)
    else:
        xa, wa, ba = randn(n, h, h, c), randn(1, 1, c, o), randn(o)
        ref = conv2d_nchw(xa.transpose(0, 3, 1, 2), wa.transpose(3, 2, 0, 1),
                          (stride, stride)).transpose(0, 2, 3, 1)
        if epilogue:
            ref = np.maximum(ref + ba, 0.0)
    check(f, [xa, wa] + ([ba] if epilogue else []), ref, rtol=1e-4, atol=1e-4 * c)


def test_pointwise_with_symbolic_batch_and_image_size():
    n, h, w = td.var("n"), td.var("h"), td.var("w")
    x, wt, b, conv, out = _pointwise(n, 20, h, w, 48)
    assert conv_form(conv.op) is not None
    f = td.build(ops.schedule(out, "llvm"), [x, wt, b, out], target="llvm")
    for N, H, W in [(1, 1, 1), (2, 9, 14), (3, 5, 17)]:
        xa, wa, ba = randn(N, 20, H, W), randn(48, 20, 1, 1), randn(48)
        check(f, [xa, wa, ba], _reference(xa, wa, ba, 1, 0, 1, 1, True), rtol=1e-4,
              atol=1e-3)
