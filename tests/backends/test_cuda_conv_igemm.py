"""The fp32 conv2d CUDA default as an implicit GEMM with register tiles
(tdsl/ops/schedules/cuda_conv.py): 8 output channels x 4 pixels per thread, fed per
(input channel, tap) step from register copies of shared memory (the weights as float4
reads of a 16-byte aligned, conflict-free tile).  Checked against PyTorch under the emulator
(batch 1-2, 8-64 channels, 7-15 pixels, sizes that don't divide the tiles, stride 2,
padding 2, 1x1, split-K, a symbolic batch bound to two values), and with NVRTC: no spill and
no shared-memory bank conflict on sm_80 and sm_90 at ResNet-50's batch-1 shapes.  The float4
fetches (input rows where the width is a multiple of 4, weight runs where a chunk is whole
8-tap runs) against PyTorch: widths that are and are not multiples of 4, padding 0/1/2,
stride 1/2, tile tails, a symbolic batch, misaligned arrays (the scalar copies)."""
from __future__ import annotations

import re
import shutil
import warnings

import numpy as np
import pytest

import tdsl as td
from tdsl import ops
from tdsl.backends.cuda import nvrtc
from tdsl.stmt import Allocate, StorageScope
from tdsl.visitor import post_order_visit

torch = pytest.importorskip("torch", reason="the reference convolution is PyTorch's")
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")
needs_nvrtc = pytest.mark.skipif(not nvrtc.is_available(),
                                 reason="NVRTC (cuda-python) is not installed")


def _ref(d, k, stride, pad, bias=None):
    out = torch.nn.functional.conv2d(torch.from_numpy(d).double(), torch.from_numpy(k).double(),
                                     stride=stride, padding=pad)
    if bias is not None:
        out = torch.relu(out + torch.from_numpy(bias).double()[None, :, None, None])
    return out.numpy()


def _args(shape, co, ksize, stride, pad, bias):
    D = td.placeholder(shape, name="D")
    K = td.placeholder((co, shape[1], ksize, ksize), name="K")
    if bias:
        b = td.placeholder((co,), name="b")
        return [D, K, b, ops.conv2d(D, K, stride=stride, padding=pad, bias=b,
                                    activation="relu")]
    return [D, K, ops.conv2d(D, K, stride=stride, padding=pad)]


def _accumulators(f) -> list:
    found = []

    def fn(n):
        if isinstance(n, Allocate) and n.buffer.scope is StorageScope.LOCAL and \
                n.buffer.name.startswith("T_conv2d_nhwc"):
            size = 1
            for d in n.buffer.shape:
                size *= int(d.value)
            found.append(size)
    post_order_visit(f.kernels[0].root, fn)
    return found


def _check_batches(f, chw, co, stride, seed):
    """A build with a symbolic batch run at batch 1 and 3 (3x3 kernel, padding 1) against
    PyTorch on random data."""
    for nb in (1, 3):
        d, k, _ = _data((nb, *chw), co, 3, False, seed + nb)
        ref = _ref(d, k, stride, 1)
        out = np.full(ref.shape, np.nan, "float32")
        f.emulate(d, k, out)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=2e-4)


def _data(shape, co, ksize, bias, seed):
    g = np.random.default_rng(seed)
    d = g.standard_normal(shape).astype("float32")
    k = g.standard_normal((co, shape[1], ksize, ksize)).astype("float32")
    b = g.standard_normal(co).astype("float32") if bias else None
    return d, k, b


@needs_gxx
@pytest.mark.parametrize("shape,co,ksize,stride,pad,bias,kernels", [
    ((1, 8, 7, 7), 16, 3, 1, 1, False, 1),      # 7 px: one 8x8 tile with a tail, 16 of 32 ch
    ((2, 16, 15, 15), 24, 3, 1, 1, True, 1),    # 15 px, 24 channels: tails both ways, epilogue
    ((2, 32, 13, 11), 32, 3, 2, 1, False, 2),   # stride 2, non-square; 2 slices
    ((1, 12, 10, 14), 20, 1, 1, 0, True, 1),    # 1x1
    ((2, 9, 12, 12), 8, 3, 1, 2, False, 1),     # padding 2, 9 input channels: chunks of 1
    ((1, 64, 9, 9), 40, 3, 1, 1, True, 2),      # split-K: 4 slices of 16 channels
    ((1, 30, 11, 18), 33, 3, 2, 1, False, 2),   # stride 2, 18 wide, 33 channels; 2 slices
    ((2, 24, 8, 8), 16, 3, 2, 1, True, 1),      # stride 2, K = 216: too shallow to split
    # split-K partials (slices, N, CO/4, OH, OW, 4): 36 channels (a thread's second float4
    # past the end), 4 x 16 tiles with a 4-column tail, 8 slices
    ((1, 128, 14, 20), 36, 3, 1, 1, True, 2),
    ((1, 32, 30, 30), 64, 3, 2, 1, False, 2),   # stride 2, 8 x 8: a row group a warp
])
def test_implicit_gemm_matches_torch(shape, co, ksize, stride, pad, bias, kernels):
    args = _args(shape, co, ksize, stride, pad, bias)
    f = td.build(ops.schedule(args[-1], "cuda"), args, target="cuda -arch=sm_90")
    assert len(f.kernels) == kernels
    assert 32 in _accumulators(f)                   # 8 channels x 4 pixels per thread
    assert "tdsl_vload<float4>(K_pack.ptr(" in f.get_source()
    d, k, b = _data(shape, co, ksize, bias, sum(shape) + co)
    ref = _ref(d, k, stride, pad, b)
    out = np.full(ref.shape, np.nan, "float32")
    f.emulate(*([d, k] + ([b] if bias else [])), out)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=2e-4)


@needs_gxx
def test_symbolic_batch_uses_the_implicit_gemm():
    """A symbolic batch only counts blocks (``blockIdx.z``): the register tiles are kept,
    and one build runs at batch 1 and 3."""
    n = td.var("n")
    D = td.placeholder((n, 10, 9, 11), name="D")
    K = td.placeholder((24, 10, 3, 3), name="K")
    C = ops.conv2d(D, K, padding=1)
    f = td.build(ops.schedule(C, "cuda"), [D, K, C], target="cuda -arch=sm_90")
    assert 32 in _accumulators(f) and "K_pack" in f.get_source()
    _check_batches(f, (10, 9, 11), 24, 1, seed=0)


#: ResNet-50's batch-1 3x3 stages, a stride-2 3x3 and a 1x1 (benchmarks/cuda_conv_static.py).
FULL = [((1, 64, 56, 56), 64, 3, 1, 1), ((1, 128, 28, 28), 128, 3, 1, 1),
        ((1, 256, 14, 14), 256, 3, 1, 1), ((1, 512, 7, 7), 512, 3, 1, 1),
        ((1, 64, 56, 56), 128, 3, 2, 1), ((1, 256, 14, 14), 1024, 1, 1, 0)]


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_full_size_kernels_no_spill_no_bank_conflict(arch):
    from tdsl.backends.cuda.static import analyze
    for shape, co, ksize, stride, pad in FULL:
        args = _args(shape, co, ksize, stride, pad, False)
        f = td.build(ops.schedule(args[-1], "cuda"), args, target=f"cuda -arch={arch}")
        main = f.kernels[0].name
        for r in analyze(f, arch):
            assert r.spill_bytes == 0 and r.frame_bytes == 0, (shape, r)
            if r.kernel == main and ksize == 3:
                assert r.bank_ways == 1, (shape, [str(x) for x in r.findings])


@needs_nvrtc
@pytest.mark.parametrize("shape,co", [((1, 5, 18, 21), 12), ((2, 3, 15, 15), 20)])
def test_odd_channel_counts_do_not_spill(shape, co):
    """Chunks of one input channel: the tap loops stay loops (``unroll_limit`` 1); unrolled
    by nvcc, ptxas hoisted later taps' register copies and spilled 12 B on sm_90."""
    from tdsl.backends.cuda.cubin import ptxas_report
    args = _args(shape, co, 3, 1, 1, True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # a CUDASpillWarning at build fails here too
        f = td.build(ops.schedule(args[-1], "cuda"), args, target="cuda -arch=sm_90")
    for arch in ("sm_80", "sm_90"):
        r = ptxas_report(f.get_source(), arch)[f.kernels[0].name]
        assert r.spill_stores == 0 and r.spill_loads == 0, (arch, r)


# ---- float4 fetches (issue 26) -------------------------------------------------------------
@needs_gxx
@pytest.mark.parametrize("shape,co,ksize,stride,pad,rows,weights", [
    ((2, 16, 12, 16), 24, 3, 1, 1, True, True),    # 4 x 16 tiles, 24 of 32 channels
    ((1, 8, 9, 20), 16, 3, 2, 1, True, True),      # stride 2, 10 wide: 8 x 8 tiles (pitch + 4)
    ((2, 8, 11, 12), 16, 3, 1, 0, True, True),     # no padding: the input's own shared copy
    ((1, 12, 10, 36), 20, 3, 1, 1, True, False),   # 36 wide: a 4-column tail tile; 108 taps
    ((1, 4, 10, 16), 8, 5, 1, 2, True, False),     # padding 2 (6 lead columns); 100-tap chunks
    ((1, 6, 10, 16), 16, 3, 2, 0, True, False),    # 54 taps a channel: scalar weight runs
    ((2, 8, 9, 24), 16, 1, 1, 0, True, True),      # 1x1
    ((1, 8, 13, 18), 16, 3, 1, 1, False, True),    # 18 wide: rows not 16-byte aligned
    ((1, 8, 7, 7), 16, 3, 1, 1, False, True),      # 7 wide
])
def test_float4_fetches_match_torch(shape, co, ksize, stride, pad, rows, weights):
    """The input rows are fetched as 16-byte cp.async copies where the width is a multiple
    of 4 (from the padded start rounded down to 8 columns; zero filled at the image's edges
    and tails), the weights as float4 runs transposed into the tile where a chunk is whole
    8-tap runs; elsewhere the scalar fetches.  Checked against PyTorch on sm_80."""
    args = _args(shape, co, ksize, stride, pad, False)
    f = td.build(ops.schedule(args[-1], "cuda"), args, target="cuda -arch=sm_80")
    src = f.get_source()
    assert bool(re.search(r"(tdsl_cp_async<16>\(|tdsl_vload<float4>\()[^;]*\bD \+", src)) == rows
    assert ("tdsl_vload<float4>(K + " in src) == weights
    d, k, _ = _data(shape, co, ksize, False, sum(shape) * co)
    ref = _ref(d, k, stride, pad)
    out = np.full(ref.shape, np.nan, "float32")
    f.emulate(d, k, out)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=2e-4)


@needs_gxx
def test_float4_fetches_with_a_symbolic_batch():
    """A symbolic batch keeps the float4 fetches (the batch only counts blocks); one build
    runs at batch 1 and 3."""
    n = td.var("n")
    D = td.placeholder((n, 16, 10, 16), name="D")        # two chunks: double buffered
    K = td.placeholder((16, 16, 3, 3), name="K")
    C = ops.conv2d(D, K, padding=1)
    f = td.build(ops.schedule(C, "cuda"), [D, K, C], target="cuda -arch=sm_80")
    src = f.get_source()
    assert re.search(r"tdsl_cp_async<16>\(D_pad\.ptr\([^;]*\bD \+", src)
    assert "tdsl_vload<float4>(K + " in src
    _check_batches(f, (16, 10, 16), 16, 1, seed=7)


@needs_gxx
def test_stride_2_square_tiles_with_a_symbolic_batch():
    """Stride 2 with outputs under 16 wide: each warp holds one row group of the 8 x 8 tile
    and four channel groups (conflict-free reads), the rows fetched as float4 (20 wide);
    one build runs at batch 1 and 3 (2 x 2 tiles, a 2-pixel tail each way)."""
    n = td.var("n")
    D = td.placeholder((n, 8, 20, 20), name="D")
    K = td.placeholder((16, 8, 3, 3), name="K")
    C = ops.conv2d(D, K, stride=2, padding=1)
    f = td.build(ops.schedule(C, "cuda"), [D, K, C], target="cuda -arch=sm_80")
    assert re.search(r"tdsl_vload<float4>\(D \+", f.get_source())
    _check_batches(f, (8, 20, 20), 16, 2, seed=5)


def _misaligned(a: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``a`` whose data starts 4 bytes past a 16-byte boundary."""
    buf = np.zeros(a.size + 8, a.dtype)
    off = (-(-buf.ctypes.data // 16) * 16 + 4 - buf.ctypes.data) // 4
    out = buf[off:off + a.size].reshape(a.shape)
    out[...] = a
    assert out.ctypes.data % 16 == 4
    return out


@needs_gxx
def test_float4_fetches_take_the_scalar_copies_for_misaligned_arrays():
    """A user's array that does not start 16-byte aligned (a view) is tested once per
    launch: the fetches then copy scalars, with the same results."""
    args = _args((2, 16, 12, 16), 24, 3, 1, 1, False)
    f = td.build(ops.schedule(args[-1], "cuda"), args, target="cuda -arch=sm_80")
    src = f.get_source()
    assert "D_aligned16" in src and "K_aligned16" in src
    d, k, _ = _data((2, 16, 12, 16), 24, 3, False, 11)
    ref = _ref(d, k, 1, 1)
    out = np.full(ref.shape, np.nan, "float32")
    f.emulate(_misaligned(d), _misaligned(k), out)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=2e-4)
