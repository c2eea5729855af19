"""The default CPU schedules of MobileNetV2's and the batch-1 MLP's hot kernels: grouped
(depthwise) NCHW convolutions, stride 1 and 2 (per-channel tasks, the input padded per plane
in cache, rows x vectors register tiles); global average pooling (the reduced plane one
contiguous run); and the small-M matmul of a pre-transposed weight (GEMV: K split into
parts that read whole rows).  Each is checked against NumPy on random data at sizes that do
and do not divide the tiles, and for the schedule it was meant to get.  (Speed lives in
``benchmarks/model_kernels.py``.)"""
from __future__ import annotations

import numpy as np
import pytest

import tdsl as td
from tdsl import ops
from tdsl.ops.schedules.cpu import vector_tile
from tdsl.ops.schedules.llvm import cpu_of, default_conv_tiles
from tdsl.ops.schedules.llvm_conv import GROUPED_ACCUMULATORS, conv_register_tile, grouped_tile
from tdsl.ops.schedules.llvm_matmul import (SKINNY_ACC_BYTES, SKINNY_K_ROWS, skinny_block,
                                            skinny_k_parts)
from tdsl.target import as_target

from .helpers import check, conv2d_nchw, randn
from .ir_count import allocations, root_nests, stores_to

CPU = cpu_of(as_target("llvm"))
LANES = CPU.lanes(td.placeholder((1,), name="f32").dtype)


def _build(out, args):
    s = ops.schedule(out, "llvm")
    return td.build(s, args, target="llvm"), td.lower(s, args)


# ---- grouped (depthwise) convolutions ------------------------------------------------------
@pytest.mark.parametrize("C, HW, stride, mult", [
    (16, 112 // 4, 2, 1),      # MobileNetV2's strided depthwise, smaller
    (24, 14, 1, 1), (40, 7, 1, 1), (12, 14, 2, 1),     # 7-wide outputs: partial vectors
    (8, 13, 1, 1), (8, 13, 2, 2),                       # odd sizes; a channel multiplier
    (6, 33, 2, 1), (4, 20, 3, 1),
])
def test_depthwise_conv_with_bias_relu(C, HW, stride, mult):
    X = td.placeholder((1, C, HW, HW), name="X")
    W = td.placeholder((C * mult, 1, 3, 3), name="W")
    b = td.placeholder((C * mult,), name="b")
    Y = ops.conv2d(X, W, stride=stride, padding=1, groups=C, bias=b, activation="relu")
    f, func = _build(Y, [X, W, b, Y])
    x, w, bb = randn(1, C, HW, HW), randn(C * mult, 1, 3, 3), randn(C * mult)
    ref = conv2d_nchw(x, w, stride=(stride, stride), padding=(1, 1, 1, 1), groups=C)
    ref = np.maximum(ref + bb[:, None, None], 0).astype("float32")
    check(f, [x, w, bb], ref, rtol=1e-4, atol=1e-4)
    # the input is padded one channel at a time, inside the parallel loop (in cache); with
    # few channels, tasks are row chunks of a plane
    shape = [int(d.value) for d in allocations(func)["X_pad"].buffer.shape]
    assert shape[:2] == [1, 1] and HW < shape[3] <= HW + 2
    if C * mult >= 4 * CPU.threads:
        assert HW < shape[2] <= HW + 2


def test_grouped_conv_with_a_symbolic_batch_and_two_channels_per_group():
    n = td.var("n")
    X = td.placeholder((n, 8, 9, 9), name="X")
    W = td.placeholder((8, 2, 3, 3), name="W")
    Y = ops.conv2d(X, W, stride=2, padding=1, groups=4)
    f, _ = _build(Y, [X, W, Y])
    w = randn(8, 2, 3, 3)
    for N in (1, 3):
        x = randn(N, 8, 9, 9)
        ref = conv2d_nchw(x, w, stride=(2, 2), padding=(1, 1, 1, 1), groups=4)
        check(f, [x, w], ref, rtol=1e-4, atol=1e-4)


def test_depthwise_conv_with_a_symbolic_size():
    h = td.var("h")
    X = td.placeholder((1, 16, h, h), name="X")
    W = td.placeholder((16, 1, 3, 3), name="W")
    Y = ops.conv2d(X, W, stride=2, padding=1, groups=16)
    f, _ = _build(Y, [X, W, Y])
    w = randn(16, 1, 3, 3)
    for H in (7, 16, 21):
        x = randn(1, 16, H, H)
        ref = conv2d_nchw(x, w, stride=(2, 2), padding=(1, 1, 1, 1), groups=16)
        check(f, [x, w], ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("K, pad, dil, stride",
                         [(5, 2, 1, 2), (3, 0, 2, 1), (3, (0, 1, 2, 1), 1, 2)])
def test_depthwise_conv_other_windows(K, pad, dil, stride):
    """5x5 windows, no padding with dilation, asymmetric padding."""
    X = td.placeholder((2, 20, 15, 17), name="X")
    W = td.placeholder((20, 1, K, K), name="W")
    Y = ops.conv2d(X, W, stride=stride, padding=pad, dilation=dil, groups=20)
    f, _ = _build(Y, [X, W, Y])
    x, w = randn(2, 20, 15, 17), randn(20, 1, K, K)
    p4 = (pad,) * 4 if isinstance(pad, int) else pad
    ref = conv2d_nchw(x, w, stride=(stride, stride), padding=p4, dilation=(dil, dil), groups=20)
    check(f, [x, w], ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("OH", [1, 7, 14, 28, 56, 112, 13, None])
def test_grouped_tile_rows_divide_the_output_height(OH):
    for OW in (OH, 7, 56, None):
        rows, width, vec = grouped_tile(OH, OW, LANES)
        assert vec <= LANES and width % vec == 0
        assert rows * (width // vec) <= GROUPED_ACCUMULATORS
        if OH is not None:
            assert OH % rows == 0


def test_filter_packed_at_root_goes_panel_by_panel():
    """The filter packed once at root (a batch of 8 would repack it per image): the parallel
    loop is over the output-channel panels, each packed from its OIHW rows together (not
    channel by channel, which reads a page of every filter row at once)."""
    from tdsl.stmt import ForKind
    X = td.placeholder((8, 64, 7, 7), name="X")
    W = td.placeholder((1024, 64, 1, 1), name="W")
    Y = ops.conv2d(X, W, stride=2)
    f, func = _build(Y, [X, W, Y])
    nest = [n for n in root_nests(func) if stores_to(n, "W_pack")]
    assert len(nest) == 1 and nest[0].kind is ForKind.PARALLEL
    bco = vector_tile(1024, LANES, conv_register_tile(default_conv_tiles(CPU), 4)[1])
    assert int(nest[0].extent.value) == 1024 // bco
    # laid out in panels: [co // bco, ci, kh, kw, co % bco]
    pack = allocations(func)["W_pack"]
    assert [int(d.value) for d in pack.buffer.shape] == [1024 // bco, 64, 1, 1, bco]
    x, w = randn(8, 64, 7, 7), randn(1024, 64, 1, 1)
    check(f, [x, w], conv2d_nchw(x, w, stride=(2, 2)), rtol=1e-4, atol=1e-3)


# ---- global average pooling -----------------------------------------------------------------
@pytest.mark.parametrize("shape", [(1, 40, 7, 7), (2, 24, 3, 5), (3, 8, 2, 2), (1, 16, 4, 4)])
def test_global_average_pool_reduces_one_contiguous_run(shape):
    X = td.placeholder(shape, name="X")
    Y = ops.mean(X, axis=(2, 3), keepdims=True)
    f, func = _build(Y, [X, Y])
    x = randn(*shape)
    check(f, [x], x.mean(axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-5)
    if shape[2] * shape[3] >= LANES:
        # the plane's points are one run, vectorized: partial sums in lanes (rfactor)
        assert any(k.endswith(".rf") for k in allocations(func))
        assert "masked.gather" not in f.get_source("ll")


def test_partial_lanes_balance_the_chain_and_the_combine():
    from tdsl.ops.schedules.llvm_reduce import partial_lanes
    assert partial_lanes(49, 16) == 8          # 7 vectors + 8 lanes, not 4 + 16
    assert partial_lanes(16, 16) == 4
    assert partial_lanes(1024, 16) == 16 and partial_lanes(None, 16) == 16
    for k in range(1, 300):
        w = partial_lanes(k, 16)
        assert all(-(-k // w) + w <= -(-k // v) + v for v in (2, 4, 8, 16)), k


def test_sum_over_trailing_axes_of_a_symbolic_batch():
    n = td.var("n")
    X = td.placeholder((n, 6, 5, 5), name="X")
    Y = ops.sum(X, axis=(2, 3))
    f, _ = _build(Y, [X, Y])
    for N in (1, 4):
        x = randn(N, 6, 5, 5)
        check(f, [x], x.sum(axis=(2, 3)), rtol=1e-5, atol=1e-5)


def test_sum_over_non_trailing_short_axes_is_not_fused():
    """Axes 1 and 3 of (2, 3, 4, 5) are no contiguous run: summed as written."""
    X = td.placeholder((2, 3, 4, 5), name="X")
    Y = ops.sum(X, axis=(1, 3))
    f, _ = _build(Y, [X, Y])
    x = randn(2, 3, 4, 5)
    check(f, [x], x.sum(axis=(1, 3)), rtol=1e-5, atol=1e-5)


# ---- the small-M matmul of a pre-transposed weight (the graph's dense) ----------------------
@pytest.mark.parametrize("M, K, N", [(1, 1280, 1000), (1, 1024, 4096), (2, 512, 24),
                                     (3, 640, 200), (1, 300, 7), (1, 4096, 32)])
def test_small_m_matmul_with_bias_relu(M, K, N):
    X = td.placeholder((M, K), name="X")
    W = td.placeholder((K, N), name="W")
    b = td.placeholder((N,), name="b")
    Y = ops.relu(ops.add(ops.matmul(X, W), b))
    f, func = _build(Y, [X, W, b, Y])
    x, w, bb = randn(M, K), randn(K, N), randn(N)
    ref = np.maximum(x.astype(np.float64) @ w + bb, 0).astype("float32")
    check(f, [x, w, bb], ref, rtol=1e-4, atol=1e-3)
    parts = skinny_k_parts(M, N, K, LANES, 32, CPU.threads)
    if parts > 1:   # partial sums of whole rows, one set per part
        rf = [a for k, a in allocations(func).items() if k.endswith(".rf")]
        assert [int(d.value) for d in rf[0].buffer.shape] == [parts, M, N]


def test_small_m_matmul_without_epilogue():
    X = td.placeholder((1, 2048), name="X")
    W = td.placeholder((2048, 520), name="W")
    Y = ops.matmul(X, W)
    f, _ = _build(Y, [X, W, Y])
    x, w = randn(1, 2048), randn(2048, 520)
    check(f, [x, w], (x.astype(np.float64) @ w).astype("float32"), rtol=1e-4, atol=1e-3)


def test_skinny_k_parts_split_k_when_rows_fit_and_n_is_short():
    row = SKINNY_ACC_BYTES // 4                           # floats of accumulators that fit
    K = 2 * SKINNY_K_ROWS * 16
    assert skinny_k_parts(1, row, K, 16, 32, 2) == 2      # whole rows, one part per thread
    assert skinny_k_parts(1, row, K, 16, 32, 1) == 1      # one thread: no split
    assert skinny_k_parts(2, row, K, 16, 32, 2) == 1      # M x N accumulators do not fit
    assert skinny_k_parts(1, 4 * row, K, 16, 32, 2) == 1  # long runs from an N split
    assert skinny_k_parts(1, row, K // 2, 16, 32, 2) == 1     # too few rows per part
    assert skinny_k_parts(None, row, K, 16, 32, 2) == 1       # symbolic M


def test_skinny_block_is_the_widest_that_fits_cut_per_thread():
    assert skinny_block(1, 4096, 16, 32, 1) == 4096
    assert skinny_block(1, 4096, 16, 32, 2) == 2048
    assert skinny_block(1, 1000, 16, 32, 1) == 1008        # a multiple of the lanes
    assert skinny_block(4, 4096, 16, 32, 1) == 1024        # 4 rows of accumulators
    assert skinny_block(None, None, 16, 32, 2) == 256      # symbolic M counts SKINNY_M rows
