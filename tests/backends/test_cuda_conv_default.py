"""The default CUDA schedule of an NCHW conv2d (tdsl/ops/schedules/cuda_conv.py): an implicit
GEMM with shared-memory tiles and 32 outputs per thread in registers, checked against NumPy
under the emulator (padding, stride 2, dilation, sizes that don't divide the tiles, a bias
and activation epilogue), 32-bit index arithmetic, and no spills where NVRTC is installed."""
from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

import tdsl as td
from tdsl import ops
from tdsl.backends.cuda import nvrtc
from tdsl.stmt import Allocate, StorageScope
from tdsl.visitor import post_order_visit

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")
needs_nvrtc = pytest.mark.skipif(not nvrtc.is_available(), reason="NVRTC (cuda-python) is not installed")


def _ref(d, k, stride, pad, dil, bias=None, relu=False):
    n, c, h, w = d.shape
    co, _, kh, kw = k.shape
    dp = np.pad(d, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - dil * (kh - 1) - 1) // stride + 1
    ow = (w + 2 * pad - dil * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, co, oh, ow), "float64")
    for y in range(kh):
        for x in range(kw):
            win = dp[:, :, y * dil:y * dil + stride * (oh - 1) + 1:stride,
                     x * dil:x * dil + stride * (ow - 1) + 1:stride]
            out += np.einsum("nchw,oc->nohw", win, k[:, :, y, x])
    if bias is not None:
        out += bias[None, :, None, None]
    return np.maximum(out, 0) if relu else out


def _conv(shape, co, ksize, stride=1, pad=0, dil=1, epilogue=False):
    D = td.placeholder(shape, name="D")
    K = td.placeholder((co, shape[1], ksize, ksize), name="K")
    if epilogue:
        b = td.placeholder((co,), name="b")
        out = ops.conv2d(D, K, stride=stride, padding=pad, dilation=dil, bias=b, activation="relu")
        return [D, K, b, out]
    return [D, K, ops.conv2d(D, K, stride=stride, padding=pad, dilation=dil)]


def _locals_and_shared(f):
    local, shared = [], []

    def fn(n):
        if isinstance(n, Allocate):
            size = 1
            for d in n.buffer.shape:
                size *= int(d.value)
            (local if n.buffer.scope is StorageScope.LOCAL else
             shared if n.buffer.scope is StorageScope.SHARED else []).append((n.buffer.name, size))
    post_order_visit(f.kernels[0].root, fn)
    return local, shared


@needs_gxx
@pytest.mark.parametrize("shape,co,ksize,stride,pad,dil,epi", [
    ((1, 8, 10, 10), 16, 3, 1, 1, 1, False),      # padding, tiles don't divide 10
    ((2, 6, 9, 11), 80, 3, 2, 1, 1, True),        # stride 2, N=2, 80 channels, bias+relu
    ((1, 4, 12, 13), 8, 3, 1, 2, 2, False),       # dilation 2
    ((1, 3, 15, 15), 20, 7, 2, 3, 1, False),      # a 7x7 stem, stride 2
    ((1, 5, 18, 21), 12, 3, 1, 1, 1, True),       # 21 wide: 4 x 16 pixel tiles with tails
    ((1, 3, 35, 37), 8, 3, 2, 1, 1, False),       # stride 2, 19 wide: 4 x 16 tiles
])
def test_conv_default_matches_numpy(shape, co, ksize, stride, pad, dil, epi):
    args = _conv(shape, co, ksize, stride, pad, dil, epi)
    s = ops.schedule(args[-1], "cuda")
    f = td.build(s, args, target="cuda -arch=sm_90")
    local, shared = _locals_and_shared(f)
    assert ("T_conv2d_nhwc", 32) in local           # 8 channels x 4 pixels per thread
    assert {n for n, _ in shared} >= {"K_pack"} and len(shared) == 2
    g = np.random.default_rng(sum(shape) + co)
    d = g.standard_normal(shape).astype("float32")
    k = g.standard_normal((co, shape[1], ksize, ksize)).astype("float32")
    arrays = [d, k]
    bias = None
    if epi:
        bias = g.standard_normal(co).astype("float32")
        arrays.append(bias)
    o = np.full([int(x.value) for x in args[-1].shape], np.nan, "float32")
    f.emulate(*arrays, o)
    np.testing.assert_allclose(o, _ref(d, k, stride, pad, dil, bias, epi), rtol=1e-4, atol=1e-4)


def test_conv_default_index_math_is_32_bit():
    args = _conv((1, 64, 56, 56), 64, 3, 1, 1)
    f = td.build(ops.schedule(args[-1], "cuda"), args, target="cuda -arch=sm_90")
    body = f.get_source().split("__global__", 1)[1]
    # (the once-per-launch alignment tests of the float4 fetches cast pointers, not indices)
    body = re.sub(r"\(\(unsigned long long\)\w+ & \d+\)", "", body)
    assert "long long" not in body
    assert re.search(r"__shared__ tdsl_shared<float, \d+> D_pad", f.get_source())


@needs_nvrtc
def test_conv_default_no_spills():
    from tdsl.backends.cuda.cubin import ptxas_report
    args = _conv((1, 64, 56, 56), 64, 3, 1, 1)
    f = td.build(ops.schedule(args[-1], "cuda"), args, target="cuda -arch=sm_90")
    r = ptxas_report(f.get_source(), "sm_90")[f.kernels[0].name]
    assert r.spill_stores == 0 and r.spill_loads == 0


@needs_gxx
def test_conv_padded_fetch_is_a_zero_filling_cp_async_on_sm80():
    """Several chunks of input channels: the shared tiles are double buffered, and on sm_80
    the padded input patch is fetched by cp.async copies that zero-fill outside the image
    (pipeline.py; 9 wide: rows that do not start 16-byte aligned, 4-byte copies), the
    weights (32 output channels: one whole channel tile; 8-tap runs) by float4 loads
    transposed into the tile (four plain stores each)."""
    args = _conv((1, 16, 9, 9), 32, 3, 1, 1)
    f = td.build(ops.schedule(args[-1], "cuda"), args, target="cuda -arch=sm_80")
    src = f.get_source()
    assert "tdsl_cp_async_zfill<4>(D_pad.ptr(" in src
    assert "tdsl_vload<float4>(K + " in src and "tdsl_cp_async<4>(K_pack.ptr(" not in src
    g = np.random.default_rng(5)
    d = g.standard_normal((1, 16, 9, 9)).astype("float32")
    k = g.standard_normal((32, 16, 3, 3)).astype("float32")
    o = np.full((1, 32, 9, 9), np.nan, "float32")
    f.emulate(d, k, o)
    np.testing.assert_allclose(o, _ref(d, k, 1, 1, 1), rtol=1e-4, atol=1e-4)
