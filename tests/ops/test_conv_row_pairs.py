"""Two output rows in one register tile (``llvm_conv.conv_tile``): where a row is too narrow
for the two-vector tile (14 columns with 16 registers), the NHWC conv2d micro-kernel takes
2 rows x 2 columns x 2 vectors instead of 7 columns x 1 vector, each weight vector shared by
both rows.  The rule, the loop nest of the default schedule, the cases it leaves alone,
and results against PyTorch (3x3, 1x1, stride 2, a fused epilogue, a symbolic batch, and
a forced pair of rows over odd heights, whose last pair is partial).  (Speed: the figures
in ``conv_tile``'s docstring; ``benchmarks/metaschedule_peer.py``'s nhwc14.)"""
from __future__ import annotations

import contextlib
import dataclasses

import pytest
from hypothesis import given, settings, strategies as st

import tdsl as td
from tdsl import ops
from tdsl.ops.schedules import llvm_conv
from tdsl.ops.schedules.llvm_conv import CONV_TILES, CONV_TILES_16REGS, conv_tile

from .helpers import check, nhwc_conv, randn, torch_conv_nhwc

torch = pytest.importorskip("torch")

TARGET = "llvm -mcpu=znver3"      # AVX2: the 16-register tiles the rule was measured with


@pytest.mark.parametrize("ow, oh, rows, nhwc, tile", [
    (14, 14, 8, True, (2, 2, 2)),       # 7 x 1 -> two rows of 2 x 2 vectors
    (14, 14, 8, False, (7, 1, 1)),      # NCHW data: left alone
    (7, 7, 7, True, (7, 1, 1)),         # an odd height: a partial pair on every chunk
    (14, 14, 7, True, (7, 1, 1)),       # chunks of an odd number of rows
    (28, 28, 8, True, (4, 2, 1)),       # wide enough for the two-vector tile
    (56, 56, 8, True, (4, 2, 1)),
    (14, None, 8, True, (7, 1, 1)),     # symbolic height: no pairing
])
def test_rule_16_registers(ow, oh, rows, nhwc, tile):
    assert conv_tile(CONV_TILES_16REGS, ow, oh, rows, nhwc) == tile


@pytest.mark.parametrize("ow", [7, 14, 28, 56])
def test_rule_leaves_32_registers_alone(ow):
    width, vectors, rows = conv_tile(CONV_TILES, ow, 14, 8, True)
    assert rows == 1 and (width, vectors) == llvm_conv.conv_register_tile(CONV_TILES, ow)


def test_rule_explicit_rows():
    forced = dataclasses.replace(CONV_TILES_16REGS, row_tile=3)
    assert conv_tile(forced, 28, 28, 8, False)[2] == 3


def _micro_kernel(s):
    """Names of the accumulating stage's loops inside its reduction loops."""
    (st_,) = [x for x in s.stages if getattr(x.op, "reduce_axis", None)]
    names = [iv.var.name for iv in st_.leaf_iter_vars]
    last_red = max(i for i, n in enumerate(names) if n.startswith(("rc", "ry", "rx")))
    return names[last_red + 1:]


def test_default_pairs_rows_at_14_columns():
    ts = nhwc_conv(1, 256, 256, 14)
    s = ops.schedule(ts[-1], TARGET)
    inner = _micro_kernel(s)
    assert len(inner) == 3 and inner[0].startswith("y")       # rows, columns, channels
    kernel = str(td.lower(s, ts)).split("rx in unrolled(3):")[-1].splitlines()
    # inside the taps: 2 rows, 2 columns unrolled, 16 channels vectorized
    assert [ln.strip().split(" in ")[1] for ln in kernel[1:4]] == \
        ["unrolled(2):", "unrolled(2):", "vectorized(16):"]


@pytest.mark.parametrize("shape", [(1, 128, 40, 28), (1, 64, 64, 14)])
def test_no_pair_where_the_wide_tile_fits_or_the_data_is_nchw(shape):
    n, c, co, hw = shape
    if hw == 28:
        *_, Y = nhwc_conv(n, c, co, hw)
    else:
        X = td.placeholder((n, c, hw, hw), name="X")
        W = td.placeholder((co, c, 3, 3), name="W")
        Y = ops.conv2d(X, W, padding=1)
    inner = _micro_kernel(ops.schedule(Y, TARGET))
    assert len(inner) == 2 and not inner[0].startswith("y")


@pytest.mark.parametrize("n, c, co, hw, k, stride, pad, bias", [
    (1, 256, 48, 14, 3, 1, 1, False),      # pairs of 2 x 2 x 2
    (2, 128, 24, 14, 1, 1, 0, True),       # 1 x 1, batch 2, bias + relu on write-out
    (1, 64, 40, 28, 3, 2, 1, False),       # stride 2 down to 14 x 14
    (1, 32, 20, 14, 3, 1, 1, True),        # channels out no multiple of 16
])
def test_paired_rows_match_pytorch(n, c, co, hw, k, stride, pad, bias):
    ts = nhwc_conv(n, c, co, hw, k, stride, pad, bias=bias, act="relu" if bias else None)
    s = ops.schedule(ts[-1], TARGET)
    assert _micro_kernel(s)[0].startswith("y")
    f = td.build(s, ts, target=TARGET)
    xa, wa = randn(n, hw, hw, c), randn(k, k, c, co)
    ba = randn(co) if bias else None
    ins = [xa, wa] + ([ba] if bias else [])
    check(f, ins, torch_conv_nhwc(xa, wa, stride, pad, ba=ba, act="relu" if bias else None),
          rtol=1e-4, atol=1e-3)


def test_symbolic_batch():
    n = td.var("n")
    X, W, Y = nhwc_conv(n, 64, 32, 14)
    s = ops.schedule(Y, TARGET)
    assert _micro_kernel(s)[0].startswith("y")
    f = td.build(s, [X, W, Y], target=TARGET)
    wa = randn(3, 3, 64, 32)
    for batch in (1, 2, 3):
        xa = randn(batch, 14, 14, 64)
        check(f, [xa, wa], torch_conv_nhwc(xa, wa, 1, 1), rtol=1e-4, atol=1e-3)


@contextlib.contextmanager
def _conv_tiles(tiles):
    """The CPU schedules take these conv tiles instead of the machine's."""
    orig = llvm_conv.default_conv_tiles
    llvm_conv.default_conv_tiles = lambda cpu: tiles
    try:
        yield
    finally:
        llvm_conv.default_conv_tiles = orig


@settings(max_examples=8, deadline=None)
@given(rows=st.integers(2, 3), hw=st.integers(3, 13), co=st.integers(1, 24),
       stride=st.integers(1, 2), nhwc=st.booleans())
def test_forced_rows_any_height(rows, hw, co, stride, nhwc):
    """Any pair (or triple) of rows over any height, partial tiles included, NHWC or NCHW
    data: the same answer as PyTorch."""
    tiles = dataclasses.replace(CONV_TILES_16REGS, row_tile=rows)
    with _conv_tiles(tiles):
        if nhwc:
            X, W, Y = nhwc_conv(1, 24, co, hw, stride=stride)
        else:
            X = td.placeholder((1, 24, hw, hw), name="X")
            W = td.placeholder((co, 24, 3, 3), name="W")
            Y = ops.conv2d(X, W, stride=stride, padding=1)
        s = ops.schedule(Y, TARGET)
        f = td.build(s, [X, W, Y], target=TARGET)
    if nhwc:
        xa, wa = randn(1, hw, hw, 24), randn(3, 3, 24, co)
        want = torch_conv_nhwc(xa, wa, stride, 1)
    else:
        xa, wa = randn(1, 24, hw, hw), randn(co, 24, 3, 3)
        want = torch.nn.functional.conv2d(torch.from_numpy(xa), torch.from_numpy(wa),
                                          stride=stride, padding=1).numpy()
    check(f, [xa, wa], want, rtol=1e-4, atol=1e-3)
