"""The reduction of an NCHW-data conv2d in blocks of input channels (``llvm_conv.panel_block``):
where the micro-kernel's filter panel outgrows L1, each block of channels sweeps every
register tile of a chunk's rows, the accumulators kept in a local buffer between blocks.
The rule, the loop nest of the default schedule, the cases it leaves alone, and results
over partial chunks, columns and channel tiles, strides, dilation, a fused
epilogue and a symbolic batch, against ``tdsl.testing.reference``'s convolution.  (Speed:
the figures in ``panel_block``'s docstring.)"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tdsl as td
from tdsl import ops
from tdsl.ops.schedules.llvm_conv import PANEL_BLOCK_BYTES, panel_block

from .helpers import check, conv2d_nchw, nhwc_conv, randn

TARGET = "llvm -mcpu=znver3"      # AVX2: the 16-register tiles the rule was measured with


def _pack(cig: int, kh: int, kw: int, co: int):
    """A stage shaped like a packed filter ``[ci, kh, kw, co]``."""
    return ops.schedule(ops.identity(td.placeholder((cig, kh, kw, co), name="wp"))).stages[-1]


@pytest.mark.parametrize("cig, k, bco, layout, block", [
    (64, 3, 16, "NCHW", 16),       # 36 KiB panel -> 16 channels (9 KiB)
    (256, 3, 8, "NCHW", 32),       # one-vector tile: 32 channels (9 KiB)
    (32, 3, 16, "NCHW", 16),       # at most half of the channels
    (16, 3, 16, "NCHW", 0),        # 9 KiB panel: fits
    (256, 1, 16, "NCHW", 0),       # 1x1: 16 KiB, fits
    (96, 3, 16, "NCHW", 16),       # 96 = 16 x 6
    (30, 3, 16, "NCHW", 0),        # no power of two of at least 4 divides 30
    (64, 3, 16, "NHWC", 0),        # NHWC data keeps its own channel blocks
    (3, 7, 16, "NCHW", 0),         # the stem: 3 channels
])
def test_rule(cig, k, bco, layout, block):
    got = panel_block({"layout": layout}, _pack(cig, k, k, 64), bco, 8, 56, 32)
    assert got == block
    if block:
        assert cig % block == 0 and block * k * k * bco * 4 <= PANEL_BLOCK_BYTES


def test_rule_needs_known_sizes_and_a_small_accumulator():
    pack = _pack(64, 3, 3, 64)
    assert panel_block({}, pack, 16, 8, None, 32) == 0           # symbolic width
    assert panel_block({}, None, 16, 8, 56, 32) == 0             # no packed filter
    assert panel_block({}, pack, 16, 8, 56, 32) == 16            # NCHW by default
    assert panel_block({}, pack, 16, 8, 224, 32) == 0            # 112 KiB of accumulators


def _nchw(n, c, co, hw, k=3, stride=1, pad=1, dilation=1, bias=False):
    X = td.placeholder((n, c, hw, hw), name="X")
    W = td.placeholder((co, c, k, k), name="W")
    args = [X, W]
    if bias:
        args.append(td.placeholder((co,), name="b"))
    Y = ops.conv2d(X, W, stride=stride, padding=pad, dilation=dilation,
                   bias=args[2] if bias else None, activation="relu" if bias else None)
    return args + [Y]


def _reference(xa, wa, stride, pad, dilation=1, ba=None):
    y = conv2d_nchw(xa, wa, (stride, stride), (pad,) * 4, (dilation, dilation))
    return y if ba is None else np.maximum(y + ba[:, None, None], 0)


def test_default_blocks_the_first_stage():
    """ResNet-18's 64 -> 64 at 56 x 56: blocks of 16 channels outside the tiles of a chunk,
    the accumulators of the whole chunk (8 rows x 56 columns x 16 channels) local."""
    ts = _nchw(1, 64, 64, 56)
    text = str(td.lower(ops.schedule(ts[-1], TARGET), ts))
    assert 'T_conv2d_nhwc = allocate((1, 8, 56, 16), "float32", scope="local")' in text
    nest = text.split("for rc.outer in range(4):")[1]
    assert "for x.outer in range(14):" in nest.split("for rc.inner in range(16):")[0]


def test_nhwc_and_1x1_keep_the_tile_local():
    """NHWC data and a 1x1 filter: the accumulators stay one register tile, the whole
    reduction inside it."""
    for ts in (nhwc_conv(1, 64, 64, 56), _nchw(1, 256, 64, 14, k=1, pad=0)):
        text = str(td.lower(ops.schedule(ts[-1], TARGET), ts))
        assert "rc.outer" not in text and "rc in range" in text


@pytest.mark.parametrize("n, c, co, hw, k, stride, pad, dilation, bias", [
    (1, 64, 64, 30, 3, 1, 1, 1, False),     # 30 rows: a partial chunk of rows
    (2, 64, 30, 17, 3, 1, 1, 1, True),      # 30 channels out: a partial channel tile; bias
    (1, 64, 48, 29, 3, 2, 1, 1, False),     # stride 2
    (1, 32, 16, 23, 3, 1, 2, 2, False),     # dilation 2
    (1, 64, 24, 15, 5, 1, 2, 1, True),      # 5x5
])
def test_blocked_matches_the_reference(n, c, co, hw, k, stride, pad, dilation, bias):
    ts = _nchw(n, c, co, hw, k, stride, pad, dilation, bias)
    s = ops.schedule(ts[-1], TARGET)
    assert "rc.outer" in str(td.lower(s, ts))
    f = td.build(s, ts, target=TARGET)
    xa, wa = randn(n, c, hw, hw), randn(co, c, k, k)
    ba = randn(co) if bias else None
    check(f, [xa, wa] + ([ba] if bias else []),
          _reference(xa, wa, stride, pad, dilation, ba), rtol=1e-4, atol=1e-3)


def test_symbolic_batch():
    n = td.var("n")
    ts = _nchw(n, 32, 16, 20)
    s = ops.schedule(ts[-1], TARGET)
    assert "rc.outer" in str(td.lower(s, ts))
    f = td.build(s, ts, target=TARGET)
    wa = randn(16, 32, 3, 3)
    for batch in (1, 2, 3):
        xa = randn(batch, 32, 20, 20)
        check(f, [xa, wa], _reference(xa, wa, 1, 1), rtol=1e-4, atol=1e-3)


@settings(max_examples=8, deadline=None)
@given(c=st.sampled_from([32, 48, 64]), hw=st.integers(5, 24), co=st.integers(1, 40),
       stride=st.integers(1, 2))
def test_any_size_matches_the_reference(c, hw, co, stride):
    """Blocked or not (48 channels: blocks of 16 or 8, whichever the rule picks), any
    height, width and channel count: the same answer as the reference."""
    ts = _nchw(1, c, co, hw, stride=stride)
    f = td.build(ops.schedule(ts[-1], TARGET), ts, target=TARGET)
    xa, wa = randn(1, c, hw, hw), randn(co, c, 3, 3)
    check(f, [xa, wa], _reference(xa, wa, stride, 1), rtol=1e-4, atol=1e-3)
