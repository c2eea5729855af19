"""Split-K in the default CUDA schedules (cuda_conv.split_k, cuda_gemm.split_k): where the
plain tiling leaves the grid far below the SM count, kernel 1 computes partial sums over
slices of the reduction in separate blocks and kernel 2 sums them in a fixed order (no
atomics: deterministic).  Checked for its grid, its unguarded register FMAs, NVRTC (no
spills) and against NumPy under the emulator, with slices that do and don't divide K."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import tdsl as td
from tdsl import ops
from tdsl.backends.cuda import nvrtc
from tdsl.backends.cuda.cubin import kernel_resources
from tdsl.expr import Const
from tdsl.ops.schedules import cuda_conv, cuda_gemm

from .test_cuda_tail_padding import _conv_ref, assert_unguarded_fmas

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")
needs_nvrtc = pytest.mark.skipif(not nvrtc.is_available(), reason="NVRTC (cuda-python) is not installed")


def _build(args):
    return td.build(ops.schedule(args[-1], "cuda"), list(args), target="cuda -arch=sm_90")


def _blocks(k) -> int:
    out = 1
    for d in k.grid:
        out *= int(d.value) if isinstance(d, Const) else 1
    return out


def _conv(shape, co, bias=False):
    D = td.placeholder(shape, name="D")
    K = td.placeholder((co, shape[1], 3, 3), name="K")
    if bias:
        b = td.placeholder((co,), name="b")
        return [D, K, b, ops.conv2d(D, K, padding=1, bias=b, activation="relu")]
    return [D, K, ops.conv2d(D, K, padding=1)]


def _dense(M, N, K):
    X, W = td.placeholder((M, K), name="X"), td.placeholder((N, K), name="W")
    b = td.placeholder((N,), name="b")
    return [X, W, b, ops.dense(X, W, b, activation="relu")]


def test_split_k_threshold():
    # a late 7x7 layer: 16 blocks of 64 threads (32 channels x 8x8 pixels) -> 32 slices of
    # 16 channels (144 deep), 32768 threads
    assert cuda_conv.split_k(1, 512, 7, 7, 512, 9) == 32
    # batch 1 at 56x56: 112 blocks of 64 threads -> 4 slices (a fifth would be < 128 deep)
    assert cuda_conv.split_k(1, 64, 56, 56, 64, 9) == 4
    # enough threads already (batch 8: 448 blocks of 256), or too shallow a K
    assert cuda_conv.split_k(8, 64, 56, 56, 64, 9) == 1
    assert cuda_conv.split_k(1, 64, 7, 7, 8, 9) == 1


def test_late_conv_is_split_into_partials_and_a_reduction():
    """1 x 512 x 7 x 7 -> 512: 16 blocks unsplit; split, 512 blocks of partial sums and a
    second kernel (no atomics in either)."""
    f = _build(_conv((1, 512, 7, 7), 512))
    k0, k1 = f.kernels
    assert _blocks(k0) == 512 and k0.shared_bytes > 0
    src = f.get_source()
    assert "atomic" not in src
    assert_unguarded_fmas(src)
    assert "T_conv2d_nhwc_rf" in src


def test_large_conv_and_gemm_are_not_split():
    D, K = td.placeholder((8, 64, 56, 56), name="D"), td.placeholder((64, 64, 3, 3), name="K")
    assert len(_build([D, K, ops.conv2d(D, K, padding=1)]).kernels) == 1
    A, B = td.placeholder((1024, 1024), name="A"), td.placeholder((1024, 1024), name="B")
    assert len(_build([A, B, ops.matmul(A, B)]).kernels) == 1


def test_small_m_dense_is_split():
    f = _build(_dense(16, 1024, 4096))
    k0, _ = f.kernels
    assert _blocks(k0) >= cuda_gemm.SPLIT_BELOW
    assert_unguarded_fmas(f.get_source())


@needs_nvrtc
@pytest.mark.parametrize("make", [lambda: _conv((1, 512, 7, 7), 512),
                                  lambda: _conv((1, 100, 7, 7), 64, bias=True),
                                  lambda: _dense(16, 1024, 4096), lambda: _dense(8, 40, 777)])
def test_split_k_kernels_assemble_without_spills(make):
    f = _build(make())
    assert len(f.kernels) == 2
    for res in kernel_resources(f.cubin("sm_90")).values():
        assert res.frame_bytes == 0, res


@needs_gxx
@pytest.mark.parametrize("shape,co,bias", [((1, 512, 7, 7), 512, False),   # slices divide ci
                                           ((1, 100, 7, 7), 64, True),     # 4 x 25 channels
                                           ((1, 61, 5, 5), 16, False),     # 4 x 16: a tail
                                           ((2, 96, 5, 6), 40, False)])
def test_split_k_conv_matches_numpy(shape, co, bias):
    args = _conv(shape, co, bias)
    f = _build(args)
    assert len(f.kernels) == 2
    g = np.random.default_rng(shape[1])
    d = g.standard_normal(shape).astype("float32")
    k = g.standard_normal((co, shape[1], 3, 3)).astype("float32")
    ref = _conv_ref(d, k, 1, 1)
    arrays = [d, k]
    if bias:
        b = g.standard_normal(co).astype("float32")
        arrays.append(b)
        ref = np.maximum(ref + b[None, :, None, None], 0)
    out = np.full(ref.shape, np.nan, "float32")
    f.emulate(*arrays, out)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=2e-4)


@needs_gxx
@pytest.mark.parametrize("M,N,K", [(16, 128, 1024), (16, 128, 1000), (8, 40, 777)])
def test_split_k_gemm_matches_numpy(M, N, K):
    g = np.random.default_rng(K)
    x, w = g.standard_normal((M, K)).astype("float32"), g.standard_normal((N, K)).astype("float32")
    bias = g.standard_normal(N).astype("float32")
    f = _build(_dense(M, N, K))
    assert len(f.kernels) == 2
    y = np.full((M, N), np.nan, "float32")
    f.emulate(x, w, bias, y)
    np.testing.assert_allclose(y, np.maximum(x @ w.T + bias, 0), rtol=1e-4, atol=2e-4)
    A, B = td.placeholder((M, K), name="A"), td.placeholder((K, N), name="B")
    f = _build([A, B, ops.matmul(A, B)])
    assert len(f.kernels) == 2
    c = np.full((M, N), np.nan, "float32")
    f.emulate(x, w.T.copy(), c)
    np.testing.assert_allclose(c, x @ w.T, rtol=1e-4, atol=2e-4)


@needs_gxx
def test_split_k_batch_matmul_matches_numpy_and_is_deterministic():
    P, Q = td.placeholder((2, 20, 600), name="P"), td.placeholder((2, 600, 30), name="Q")
    f = _build([P, Q, ops.batch_matmul(P, Q)])
    assert len(f.kernels) == 2
    g = np.random.default_rng(5)
    p, q = g.standard_normal((2, 20, 600)).astype("float32"), g.standard_normal((2, 600, 30)).astype("float32")
    runs = []
    for _ in range(2):
        r = np.full((2, 20, 30), np.nan, "float32")
        f.emulate(p, q, r)
        runs.append(r)
    np.testing.assert_allclose(runs[0], p @ q, rtol=1e-4, atol=2e-4)
    assert np.array_equal(runs[0], runs[1])     # a fixed summation order


def test_split_k_through_the_interpreter():
    """The lowered IR itself (no C compiler): split-K dense with a k tail, and a conv
    whose two slices of 20 channels come out of the zero-filled fetches."""
    from tdsl import interpreter
    g = np.random.default_rng(11)
    M, N, K = 8, 40, 600
    args = _dense(M, N, K)
    s = ops.schedule(args[-1], "cuda")
    assert len(td.build(s, args, target="cuda").kernels) == 2
    x, w = g.standard_normal((M, K)).astype("float32"), g.standard_normal((N, K)).astype("float32")
    bias = g.standard_normal(N).astype("float32")
    y = np.full((M, N), np.nan, "float32")
    interpreter.run(td.lower(s, args), x, w, bias, y)
    np.testing.assert_allclose(y, np.maximum(x @ w.T + bias, 0), rtol=1e-4, atol=2e-4)
    args = _conv((1, 40, 5, 5), 8)
    s = ops.schedule(args[-1], "cuda")
    assert len(td.build(s, args, target="cuda").kernels) == 2
    d = g.standard_normal((1, 40, 5, 5)).astype("float32")
    k = g.standard_normal((8, 40, 3, 3)).astype("float32")
    o = np.full((1, 8, 5, 5), np.nan, "float32")
    interpreter.run(td.lower(s, args), d, k, o)
    np.testing.assert_allclose(o, _conv_ref(d, k, 1, 1), rtol=1e-4, atol=2e-4)
