"""The kernels CNNs and transformers spend their time in (issue 23 point 7): pointwise (1x1)
convolutions in NCHW, batched matmuls with a transposed operand, matmuls whose sizes do not
divide the register tile, global average pooling and column reductions.  Each is checked
against NumPy on random data at sizes that do and do not divide the tiles, with a symbolic
batch bound to several values, and for the schedule it was meant to get.  (Speed lives in
``benchmarks/model_kernels.py``.)"""
from __future__ import annotations

import numpy as np
import pytest

import tdsl as td
from tdsl import ops
from tdsl.ops.schedules.cpu import vector_tile
from tdsl.ops.schedules.llvm import cpu_of, default_conv_tiles, default_matmul_tiles
from tdsl.ops.schedules.llvm_conv import conv_register_tile
from tdsl.ops.schedules.llvm_conv import PACK_ROOT_BYTES, pack_at_root, panel_repacks
from tdsl.ops.schedules.llvm_matmul import register_tile
from tdsl.ops.schedules.llvm_reduce import (COLUMN_BLOCK_VECTORS, COLUMN_CHAINS, column_vectors)
from tdsl.target import as_target

from .helpers import check, conv2d_nchw, randn
from .ir_count import allocations, const_size

CPU = cpu_of(as_target("llvm"))
LANES = CPU.lanes(td.placeholder((1,), name="f32").dtype)


def _lower(outs, args):
    s = ops.schedule(outs, "llvm")
    return s, td.lower(s, args)


def _alloc_shape(func, name):
    a = allocations(func)[name]
    return [int(d.value) for d in a.buffer.shape]


# ---- the tile choice ----------------------------------------------------------------------
@pytest.mark.parametrize("lanes, most", [(16, 4), (8, 2), (4, 2)])
def test_vector_tile_leaves_no_partial_tile_where_a_narrower_width_divides(lanes, most):
    for n in range(1, 200):      # (past a few hundred, one partial tile weighs little)
        w = vector_tile(n, lanes, most)
        v = w // lanes
        assert w == lanes // 2 or (w % lanes == 0 and v & (v - 1) == 0 and v <= most), (n, w)
        widths = [x * lanes for x in (1, 2, 4, 8) if x <= most]
        if n % lanes == 0 and any(n % x == 0 for x in widths):
            assert n % w == 0, (n, w)          # a whole number of tiles
    assert vector_tile(None, lanes, most) == most * lanes       # symbolic: the widest
    assert vector_tile(64 * lanes, lanes, most) == most * lanes


def test_register_tile_gets_more_rows_when_it_narrows():
    tiles = default_matmul_tiles(CPU)
    bn, mb = register_tile(tiles.vectors * LANES * 8, LANES, tiles)
    assert (bn, mb) == (tiles.vectors * LANES, tiles.rows)
    bn, mb = register_tile(LANES * 13, LANES, tiles)            # 13 vectors: prime
    assert bn == LANES and mb > tiles.rows


# ---- matmuls whose sizes do not divide the register tile ----------------------------------
@pytest.mark.parametrize("M, K, N", [(100, 300, 200), (96, 64, 13 * 16), (197, 96, 72),
                                     (24, 40, 48), (7, 33, 5)])
def test_matmul_at_sizes_off_the_tile(M, K, N):
    A = td.placeholder((M, K), name="A")
    B = td.placeholder((K, N), name="B")
    C = ops.matmul(A, B)
    s, func = _lower(C, [A, B, C])
    f = td.build(s, [A, B, C])
    a, b = randn(M, K), randn(K, N)
    check(f, [a, b], a @ b, rtol=1e-4, atol=1e-4 * K)
    if M > 16:                     # the register-tiled schedule: its tile as register_tile says
        bn, mb = register_tile(N, LANES, default_matmul_tiles(CPU))
        assert _alloc_shape(func, "T_matmul.local") == [mb, bn]


@pytest.mark.parametrize("M, K, N", [(1, 768, 3072 // 8), (128, 96, 2304 // 8), (197, 64, 200)])
def test_dense_with_bias_at_model_sizes(M, K, N):
    X = td.placeholder((M, K), name="X")
    W = td.placeholder((N, K), name="W")
    b = td.placeholder((N,), name="b")
    Y = ops.dense(X, W, b)
    f = td.build(ops.schedule(Y), [X, W, b, Y])
    x, w, bb = randn(M, K), randn(N, K), randn(N)
    check(f, [x, w, bb], x @ w.T + bb, rtol=1e-4, atol=1e-4 * K)


def test_dense_with_a_symbolic_batch_off_the_tile():
    m = td.var("m")
    X = td.placeholder((m, 72), name="X")
    W = td.placeholder((13 * 16, 72), name="W")
    Y = ops.dense(X, W, activation="relu")
    f = td.build(ops.schedule(Y), [X, W, Y])
    w = randn(13 * 16, 72)
    for M in (1, 5, 17, 100):
        x = randn(M, 72)
        check(f, [x, w], np.maximum(x @ w.T, 0), rtol=1e-4, atol=1e-3)


# ---- batched matmuls with a transposed operand (attention) ---------------------------------
@pytest.mark.parametrize("ta, tb", [(False, True), (True, False), (True, True)])
@pytest.mark.parametrize("B, M, N, K", [(12, 128, 128, 64), (3, 50, 37, 20)])
def test_batch_matmul_with_a_transposed_operand(ta, tb, B, M, N, K):
    a_shape = (B, K, M) if ta else (B, M, K)
    b_shape = (B, N, K) if tb else (B, K, N)
    A = td.placeholder(a_shape, name="A")
    Bt = td.placeholder(b_shape, name="B")
    C = ops.batch_matmul(A, Bt, transpose_a=ta, transpose_b=tb)
    s, func = _lower(C, [A, Bt, C])
    f = td.build(s, [A, Bt, C])
    a, b = randn(*a_shape), randn(*b_shape)
    ref = np.matmul(a.transpose(0, 2, 1) if ta else a, b.transpose(0, 2, 1) if tb else b)
    check(f, [a, b], ref, rtol=1e-4, atol=1e-4 * K)
    # the register-tiled schedule, B's panel packed with columns innermost (a transposed B
    # is transposed by the packing, not read across its rows in the micro-kernel)
    allocs = allocations(func)
    assert "T_batch_matmul.local" in allocs and "B_pack" in allocs
    bn = _alloc_shape(func, "B_pack")[-1]
    assert bn == _alloc_shape(func, "T_batch_matmul.local")[-1]


def test_attention_scores_with_a_symbolic_sequence_length():
    s_len = td.var("s")
    Q = td.placeholder((4, s_len, 32), name="Q")
    Kt = td.placeholder((4, s_len, 32), name="K")
    S = ops.batch_matmul(Q, Kt, transpose_b=True)
    f = td.build(ops.schedule(S), [Q, Kt, S])
    for n in (1, 7, 64, 130):
        q, k = randn(4, n, 32), randn(4, n, 32)
        check(f, [q, k], q @ k.transpose(0, 2, 1), rtol=1e-4, atol=1e-3)


# ---- pointwise (1x1) convolutions in NCHW ---------------------------------------------------
@pytest.mark.parametrize("N, C, HW, CO, stride", [(1, 64, 14, 96, 1), (2, 24, 9, 24, 2),
                                                  (1, 144, 12, 24, 1), (3, 40, 7, 200, 1)])
def test_pointwise_conv_with_bias_relu(N, C, HW, CO, stride):
    X = td.placeholder((N, C, HW, HW), name="X")
    W = td.placeholder((CO, C, 1, 1), name="W")
    b = td.placeholder((CO,), name="b")
    Y = ops.conv2d(X, W, stride=stride, bias=b, activation="relu")
    s, func = _lower(Y, [X, W, b, Y])
    f = td.build(s, [X, W, b, Y])
    x, w, bb = randn(N, C, HW, HW), randn(CO, C, 1, 1), randn(CO)
    ref = np.maximum(conv2d_nchw(x, w, stride=(stride, stride)) + bb[:, None, None], 0)
    check(f, [x, w, bb], ref.astype("float32"), rtol=1e-4, atol=1e-4 * C)
    # the channel tile has no partial tile where a narrower one divides Cout
    tile = _alloc_shape(func, "T_conv2d_nhwc")[-1]
    ow = (HW - 1) // stride + 1
    assert tile == vector_tile(CO, LANES, conv_register_tile(default_conv_tiles(CPU), ow)[1])


def test_pointwise_conv_with_a_symbolic_batch():
    n = td.var("n")
    X = td.placeholder((n, 32, 7, 7), name="X")
    W = td.placeholder((48, 32, 1, 1), name="W")
    b = td.placeholder((48,), name="b")
    Y = ops.conv2d(X, W, bias=b, activation="relu")
    s, func = _lower(Y, [X, W, b, Y])
    f = td.build(s, [X, W, b, Y])
    w, bb = randn(48, 32, 1, 1), randn(48)
    for N in (1, 3, 8):
        x = randn(N, 32, 7, 7)
        ref = np.maximum(conv2d_nchw(x, w) + bb[:, None, None], 0).astype("float32")
        check(f, [x, w, bb], ref, rtol=1e-4, atol=1e-3)
    # a symbolic batch: every image would repack the filter, so it is packed once at root
    assert const_size(allocations(func)["W_pack"].buffer) == 32 * 48


def test_filter_is_packed_at_root_when_repacking_costs():
    """8 images x 1x1 1024 -> 2048 (ResNet's downsampling): each panel would be packed by
    every image; a small filter read by two row chunks stays packed per task."""
    big = td.placeholder((1024, 1, 1, 2048), name="wp")
    small = td.placeholder((8, 3, 3, 16), name="wp")
    big_pack = ops.schedule(ops.identity(big)).stages[-1]   # any stage with that shape
    assert panel_repacks(8, 7, 8) == 8 and panel_repacks(1, 12, 8) == 2
    assert panel_repacks(None, 7, 8) is None
    assert pack_at_root(big_pack, 8)
    assert not pack_at_root(big_pack, 1)
    small_pack = ops.schedule(ops.identity(small)).stages[-1]
    assert not pack_at_root(small_pack, 2)
    assert pack_at_root(small_pack, None)
    assert 8 * 3 * 3 * 16 * 4 < PACK_ROOT_BYTES
    # ResNet-18's first stage: 147 KiB repacked by 6 more row chunks
    stage1 = td.placeholder((64, 3, 3, 64), name="wp")
    assert pack_at_root(ops.schedule(ops.identity(stage1)).stages[-1], 7)


def test_first_stage_filter_is_packed_once_at_root():
    """64 -> 64 3x3 at 56 x 56 (batch 1): seven row chunks read the 147 KiB filter; it is
    packed once, panel by panel (``[co // bco, ci, kh, kw, co % bco]``), not per task."""
    X = td.placeholder((1, 64, 56, 56), name="X")
    W = td.placeholder((64, 64, 3, 3), name="W")
    Y = ops.conv2d(X, W, padding=1)
    s, func = _lower(Y, [X, W, Y])
    assert len(_alloc_shape(func, "W_pack")) == 5
    f = td.build(s, [X, W, Y])
    x, w = randn(1, 64, 56, 56), randn(64, 64, 3, 3)
    check(f, [x, w], conv2d_nchw(x, w, padding=(1, 1, 1, 1)).astype("float32"),
          rtol=1e-4, atol=1e-4 * 64 * 9)


# ---- global average pooling and column reductions -----------------------------------------
@pytest.mark.parametrize("shape", [(8, 64, 7, 7), (1, 1280 // 8, 7, 7), (2, 24, 5, 3)])
def test_global_average_pool(shape):
    X = td.placeholder(shape, name="X")
    Y = ops.mean(X, axis=(2, 3))
    f = td.build(ops.schedule(Y), [X, Y])
    x = randn(*shape)
    check(f, [x], x.mean(axis=(2, 3)), rtol=1e-5, atol=1e-5)


def test_global_average_pool_with_a_symbolic_batch():
    n = td.var("n")
    X = td.placeholder((n, 40, 7, 7), name="X")
    Y = ops.mean(X, axis=(2, 3), keepdims=True)
    f = td.build(ops.schedule(Y), [X, Y])
    for N in (1, 3, 8):
        x = randn(N, 40, 7, 7)
        check(f, [x], x.mean(axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(4096 // 8, 1024), (300, 100), (33, 7), (64, 2048)])
def test_column_sum_in_wide_chunks(shape):
    X = td.placeholder(shape, name="X")
    Y = ops.sum(X, axis=0)
    s, func = _lower(Y, [X, Y])
    f = td.build(s, [X, Y])
    x = randn(*shape)
    check(f, [x], x.sum(axis=0), rtol=1e-4, atol=1e-4 * shape[0] ** 0.5)
    if shape[1] >= 2 * LANES:
        # accumulated in a local stage a chunk wide, not in the output itself
        chunk = _alloc_shape(func, "T_sum.local")[-1]
        assert chunk == vector_tile(shape[1], LANES, column_vectors(shape[1], LANES,
                                                                      CPU.threads))


@pytest.mark.parametrize("S, D", [(512, 768 // 4), (100, 40), (9, 130)])
def test_mean_over_the_sequence_axis_with_a_symbolic_batch(S, D):
    b = td.var("b")
    X = td.placeholder((b, S, D), name="X")
    Y = ops.mean(X, axis=1)
    f = td.build(ops.schedule(Y), [X, Y])
    for B in (1, 2, 5):
        x = randn(B, S, D)
        check(f, [x], x.mean(axis=1), rtol=1e-4, atol=1e-5)


def test_column_max_in_wide_chunks():
    X = td.placeholder((257, 520), name="X")
    Y = ops.max(X, axis=0)
    f = td.build(ops.schedule(Y), [X, Y])
    x = randn(257, 520)
    check(f, [x], x.max(axis=0), rtol=0, atol=0)


def test_column_vectors_leaves_two_chunks_per_thread():
    for threads in (1, 2, 8):
        for jext in (64, 1000, 1024, 8192):
            v = column_vectors(jext, 16, threads)
            assert COLUMN_CHAINS <= v <= COLUMN_BLOCK_VECTORS
            assert v == COLUMN_CHAINS or jext >= 2 * threads * v * 16
