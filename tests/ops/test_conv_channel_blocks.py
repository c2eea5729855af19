"""The NHWC conv2d micro-kernel reads its input channels a cache line at a time per filter
row (``llvm_conv.conv_reduction``): the block rule, the loop order of the default schedule
(``ops.conv2d`` and a hand-written convolution whose reduction lists the taps first), the
cases it leaves alone, and results against PyTorch at channel counts that do and do not
divide the block, strides, dilation and a symbolic batch.  (Speed: ``benchmarks/
metaschedule_peer.py``'s NHWC shapes.)"""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

import tdsl as td
from tdsl import ops
from tdsl.ops.schedules.llvm_conv import channel_block

from .helpers import check, nhwc_conv, randn, torch_conv_nhwc

torch = pytest.importorskip("torch")

TARGET = "llvm -mcpu=znver3"      # AVX2: the 16-register tiles this rule was measured with


@pytest.mark.parametrize("cig, bits, block", [
    (256, 32, 16), (512, 32, 16), (128, 32, 16),     # a cache line of fp32 channels
    (64, 32, 0), (96, 32, 0),                         # a pixel under 512 bytes: left alone
    (200, 32, 8), (260, 32, 4), (131, 32, 0),         # the largest dividing power of two
    (256, 16, 32), (128, 16, 0),                      # fp16: 32 to a line, 512 bytes
    (None, 32, 0)])                                   # symbolic: no split
def test_channel_block(cig, bits, block):
    assert channel_block(cig, bits) == block


def _local_loops(s):
    """Names of the loops of the stage that accumulates, outermost first."""
    (st_,) = [x for x in s.stages if getattr(x.op, "reduce_axis", None)]
    return [iv.var.name for iv in st_.leaf_iter_vars]


def _reduction_order(names):
    return [n for n in names if n.startswith(("rc", "ry", "rx"))]


def test_nhwc_default_blocks_the_channels_between_filter_row_and_taps():
    _, _, Y = nhwc_conv(1, 256, 256, 14)
    names = _local_loops(ops.schedule(Y, TARGET))
    assert _reduction_order(names) == ["rc.outer", "ry", "rc.inner", "rx"]


@pytest.mark.parametrize("case", ["64 channels", "1x1", "nchw"])
def test_left_alone(case):
    if case == "64 channels":
        _, _, Y = nhwc_conv(1, 64, 64, 28)
    elif case == "1x1":
        _, _, Y = nhwc_conv(1, 256, 128, 14, k=1, pad=0)
    else:
        X = td.placeholder((1, 256, 14, 14), name="X")
        W = td.placeholder((3, 3, 256, 256), name="W")
        Y = ops.conv2d(X, W, padding=1, kernel_layout="HWIO")
    order = _reduction_order(_local_loops(ops.schedule(Y, TARGET)))
    # NCHW data: its panel's channel blocks (``panel_block``) outside the filter rows
    assert order == (["rc.outer", "rc.inner", "ry", "rx"] if case == "nchw" else
                     ["rc", "ry", "rx"])


@pytest.mark.parametrize("n, c, co, hw, k, stride, pad, dilation", [
    (1, 256, 40, 14, 3, 1, 1, 1),      # blocks of 16, channels out no multiple of the tile
    (2, 200, 24, 9, 3, 2, 1, 1),       # blocks of 8, stride 2, odd size
    (1, 260, 16, 7, 3, 1, 2, 2),       # blocks of 4, dilation 2
    (1, 128, 32, 11, 5, 1, 2, 1),      # 5 x 5 taps
])
def test_blocked_nhwc_matches_pytorch(n, c, co, hw, k, stride, pad, dilation):
    X, W, Y = nhwc_conv(n, c, co, hw, k, stride, pad, dilation)
    s = ops.schedule(Y, TARGET)
    assert "rc.inner" in _local_loops(s)
    f = td.build(s, [X, W, Y], target=TARGET)
    xa, wa = randn(n, hw, hw, c), randn(k, k, c, co)
    check(f, [xa, wa], torch_conv_nhwc(xa, wa, stride, pad, dilation), rtol=1e-4, atol=1e-3)


def test_symbolic_batch():
    n = td.var("n")
    X, W, Y = nhwc_conv(n, 128, 24, 10)
    f = td.build(ops.schedule(Y, TARGET), [X, W, Y], target=TARGET)
    wa = randn(3, 3, 128, 24)
    for batch in (1, 2, 3):
        xa = randn(batch, 10, 10, 128)
        check(f, [xa, wa], torch_conv_nhwc(xa, wa, 1, 1, 1), rtol=1e-4, atol=1e-3)


def test_hand_written_with_taps_listed_first():
    """The reduction declared (row, tap, channel): the channel axis is still the one blocked
    (``reduce_order``), the taps still last."""
    c, co, hw = 256, 24, 12
    x = td.placeholder((1, hw, hw, c), name="x")
    w = td.placeholder((3, 3, c, co), name="w")
    ry, rx = td.reduce_axis((0, 3), name="ry"), td.reduce_axis((0, 3), name="rx")
    rc = td.reduce_axis((0, c), name="rc")
    y = td.compute((1, hw - 2, hw - 2, co), lambda q, i, j, f: td.sum(
        x[q, i + ry, j + rx, rc] * w[ry, rx, rc, f], axis=[ry, rx, rc]), name="conv")
    s = ops.schedule(y, TARGET)
    assert _reduction_order(_local_loops(s)) == ["rc.outer", "ry", "rc.inner", "rx"]
    f = td.build(s, [x, w, y], target=TARGET)
    xa, wa = randn(1, hw, hw, c), randn(3, 3, c, co)
    check(f, [xa, wa], torch_conv_nhwc(xa, wa, 1, 0, 1), rtol=1e-4, atol=1e-3)


@settings(max_examples=6, deadline=None)
@given(c=st.sampled_from([128, 144, 160, 192]), co=st.integers(1, 40), hw=st.integers(3, 12),
       stride=st.integers(1, 2))
def test_blocked_nhwc_any_size(c, co, hw, stride):
    X, W, Y = nhwc_conv(1, c, co, hw, stride=stride)
    f = td.build(ops.schedule(Y, TARGET), [X, W, Y], target=TARGET)
    xa, wa = randn(1, hw, hw, c), randn(3, 3, c, co)
    check(f, [xa, wa], torch_conv_nhwc(xa, wa, stride, 1, 1), rtol=1e-4, atol=1e-3)
