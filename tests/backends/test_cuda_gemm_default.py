"""The default CUDA schedule of matmul / dense / batch_matmul (tdsl/ops/schedules/cuda_gemm.py):
2-level tiles checked against NumPy under the emulator at sizes that do and don't divide the
tiles, and, where NVRTC is installed, assembled for sm_80 and sm_90 without spills."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import tdsl as td
from tdsl import ops
from tdsl.backends.cuda import nvrtc
from tdsl.backends.cuda.cubin import kernel_resources
from tdsl.stmt import For, ForKind, StorageScope
from tdsl.visitor import post_order_visit

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")
needs_nvrtc = pytest.mark.skipif(not nvrtc.is_available(), reason="NVRTC (cuda-python) is not installed")


def _matmul(M, N, K):
    A = td.placeholder((M, K), name="A")
    B = td.placeholder((K, N), name="B")
    C = ops.matmul(A, B)
    return [A, B, C], lambda a: a[0] @ a[1]


def _build(ins_out, arch="sm_90", schedule_arch=None):
    """``schedule_arch``: the arch the default schedule is made for (sm_75: the WMMA tiles,
    which sm_80+ replaces by the tensor-core microkernel of test_cuda_tc_gemm.py)."""
    s = ops.schedule(ins_out[-1], f"cuda -arch={schedule_arch or arch}")
    return td.build(s, list(ins_out), target=f"cuda -arch={arch}")


def _outputs_per_thread(f) -> int:
    """The size of the kernel's local accumulator array (outputs held per thread)."""
    sizes = []

    def fn(n):
        from tdsl.stmt import Allocate
        if isinstance(n, Allocate) and n.buffer.scope is StorageScope.LOCAL and \
                n.buffer.name.endswith(".local") and "shared" not in n.buffer.name and \
                "pack" not in n.buffer.name:
            total = 1
            for d in n.buffer.shape:
                total *= int(d.value)
            sizes.append(total)
    post_order_visit(f.kernels[0].root, fn)
    return max(sizes)


@needs_gxx
@pytest.mark.parametrize("M,N,K", [(64, 64, 32), (37, 45, 19), (257, 260, 20)])
def test_matmul_default_matches_numpy(M, N, K):
    args, ref = _matmul(M, N, K)
    f = _build(args)
    g = np.random.default_rng(M)
    a = g.standard_normal((M, K)).astype("float32")
    b = g.standard_normal((K, N)).astype("float32")
    c = np.full((M, N), np.nan, "float32")
    f.emulate(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@needs_gxx
def test_dense_bias_relu_symbolic_rows_and_batch_matmul():
    n = td.var("n")
    X = td.placeholder((n, 20), name="X")
    W = td.placeholder((36, 20), name="W")
    bias = td.placeholder((36,), name="bias")
    Y = ops.dense(X, W, bias, activation="relu")
    f = _build([X, W, bias, Y])
    g = np.random.default_rng(1)
    x, w, bb = (g.standard_normal(s).astype("float32") for s in ((33, 20), (36, 20), (36,)))
    y = np.full((33, 36), np.nan, "float32")
    f.emulate(x, w, bb, y)
    np.testing.assert_allclose(y, np.maximum(x @ w.T + bb, 0), rtol=1e-4, atol=1e-4)

    P = td.placeholder((3, 18, 12), name="P")
    Q = td.placeholder((3, 12, 40), name="Q")
    R = ops.batch_matmul(P, Q)
    f = _build([P, Q, R])
    p, q = g.standard_normal((3, 18, 12)).astype("float32"), g.standard_normal((3, 12, 40)).astype("float32")
    r = np.full((3, 18, 40), np.nan, "float32")
    f.emulate(p, q, r)
    np.testing.assert_allclose(r, p @ q, rtol=1e-4, atol=1e-4)


def test_large_matmul_is_two_level_tiled():
    """At 1024: 128x128 block tiles, 32x8 threads, 16x4 = 64 outputs per thread in
    registers, A and B tiles in shared memory (double buffered), float4 fetches."""
    args, _ = _matmul(1024, 1024, 1024)
    f = td.build(ops.schedule(args[-1], "cuda"), args, target="cuda")
    (k,) = f.kernels
    assert k.threads_per_block == 256
    assert _outputs_per_thread(f) == 64
    names = sorted(b.name for b in k.shared)
    assert len(names) == 2 and k.shared_bytes <= 48 * 1024
    src = f.get_source()
    # float4 fetches: cp.async copies of 16 bytes on sm_80+ (pipeline.py)
    assert "tdsl_cp_async<16>(B_pack" in src and "tdsl_cp_async<16>(A_shared" in src
    assert [int(d.value) for d in k.block] == [32, 8, 1]
    body = src[src.index("for (int k_outer"):]
    assert body.count("__syncthreads();") == 2      # one barrier per k slice, one after
    inner = body[body.index("for (int k_inner"):]
    assert "if (" not in inner[:inner.index("__syncthreads();")]   # no guard on the FMAs


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_large_matmul_assembles_without_spills(arch):
    args, _ = _matmul(1024, 1024, 1024)
    f = _build(args, arch)
    (res,) = kernel_resources(f.cubin(arch)).values()
    assert res.frame_bytes == 0, res          # no local memory: no spills, no local arrays
    assert "__launch_bounds__(256, 2)" in f.get_source()
    assert res.registers <= 128               # two blocks of 256 threads per SM


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_dense_and_batch_matmul_assemble_without_spills(arch):
    """With cp.async fills (the float4 path) and plain stores on the misaligned fallback:
    4-byte cp.async there kept more addresses live and batch_matmul spilled 8 bytes."""
    X, W = td.placeholder((1024, 1024), name="X"), td.placeholder((1024, 1024), name="W")
    b = td.placeholder((1024,), name="b")
    P, Q = td.placeholder((8, 512, 512), name="P"), td.placeholder((8, 512, 512), name="Q")
    for args in ([X, W, b, ops.dense(X, W, b, activation="relu")], [P, Q, ops.batch_matmul(P, Q)]):
        f = _build(args, arch)
        assert "tdsl_cp_async<" in f.get_source()
        (res,) = kernel_resources(f.cubin(arch)).values()
        assert res.frame_bytes == 0, res


@needs_gxx
def test_elementwise_default_is_vectorized_and_handles_tails_and_gathers():
    X2 = td.placeholder((64, 40), name="X2")
    Y2 = ops.relu(X2)
    f = td.build(ops.schedule(Y2, "cuda"), [X2, Y2], target="cuda")
    assert "tdsl_vload<float4>(X2" in f.get_source()
    n = td.var("n")
    X = td.placeholder((n, 37), name="X")
    V = td.placeholder((37,), name="V")
    Y = ops.add(ops.relu(X), V)                    # a broadcast read: the scalar path
    g = td.build(ops.schedule(Y, "cuda"), [X, V, Y], target="cuda")
    rng = np.random.default_rng(0)
    for f_, arrays, ref in (
            (f, [rng.standard_normal((64, 40)).astype("float32")], lambda a: np.maximum(a[0], 0)),
            (g, [rng.standard_normal((29, 37)).astype("float32"),
                 rng.standard_normal(37).astype("float32")],
             lambda a: np.maximum(a[0], 0) + a[1])):
        out = np.full(arrays[0].shape, np.nan, "float32")
        f_.emulate(*arrays, out)
        np.testing.assert_allclose(out, ref(arrays), rtol=1e-6)


needs_gpu = pytest.mark.skipif(not __import__("tdsl.backends.cuda", fromlist=["x"]).has_device(),
                               reason="GPU tests: no CUDA device here (scripts/gpu_check.sh)")


@needs_gpu
@pytest.mark.parametrize("M,N,K", [(256, 256, 64), (300, 260, 70), (1024, 1024, 1024)])
def test_gpu_matmul_default_matches_numpy(M, N, K):
    args, _ = _matmul(M, N, K)
    f = td.build(ops.schedule(args[-1], "cuda"), args, target="cuda")
    g = np.random.default_rng(0)
    a = g.standard_normal((M, K)).astype("float32")
    b = g.standard_normal((K, N)).astype("float32")
    c = np.full((M, N), np.nan, "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3)


def _fp16_matmul(M, N, K):
    A = td.placeholder((M, K), "float16", name="A")
    B = td.placeholder((K, N), "float16", name="B")
    return [A, B, ops.matmul(A, B, out_dtype="float32")]


@needs_gxx
@pytest.mark.parametrize("M,N,K", [(64, 64, 32), (96, 48, 80)])
def test_fp16_matmul_default_uses_wmma_with_register_accumulators(M, N, K):
    args = _fp16_matmul(M, N, K)
    f = _build(args, "sm_75")
    body = f.get_source()[f.get_source().index('extern "C"'):]
    assert "tdsl_wmma_mma_row_row(wmma_acc" in body and "tdsl_wmma_load_acc" not in body
    g = np.random.default_rng(K)
    a = (g.random((M, K)) - .5).astype("float16")
    b = (g.random((K, N)) - .5).astype("float16")
    c = np.full((M, N), np.nan, "float32")
    f.emulate(a, b, c)
    np.testing.assert_allclose(c, a.astype("float32") @ b.astype("float32"), rtol=1e-3, atol=1e-3)


@needs_gxx
def test_fp16_matmul_not_multiple_of_16_uses_simt_tiles():
    args = _fp16_matmul(40, 24, 20)
    f = _build(args, "sm_75")
    assert "wmma" not in f.get_source()
    g = np.random.default_rng(0)
    a = (g.random((40, 20)) - .5).astype("float16")
    b = (g.random((20, 24)) - .5).astype("float16")
    c = np.full((40, 24), np.nan, "float32")
    f.emulate(a, b, c)
    np.testing.assert_allclose(c, a.astype("float32") @ b.astype("float32"), rtol=1e-3, atol=1e-3)


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_fp16_matmul_assembles_to_tensor_core_instructions(arch):
    f = _build(_fp16_matmul(1024, 1024, 1024), arch, schedule_arch="sm_75")
    ptx = f.ptx(arch)
    assert "wmma.mma.sync" in ptx and ptx.count("wmma.store") == 1
    (res,) = kernel_resources(f.cubin(arch)).values()
    assert res.frame_bytes == 0


def test_index_arithmetic_is_32_bit_where_it_provably_fits():
    args, _ = _matmul(1024, 1024, 1024)
    src = td.build(ops.schedule(args[-1], "cuda"), args, target="cuda").get_source()
    body = src[src.index('extern "C"'):]
    assert "long long" not in body.replace("(unsigned long long)", "")
    assert "const int i_outer = (int)blockIdx.y;" in body and "for (int k_outer = 0;" in body
    # symbolic sizes, or a buffer of 2^30 elements or more: 64-bit indices
    n = td.var("n")
    X = td.placeholder((n, 20), name="X")
    W = td.placeholder((36, 20), name="W")
    Y = ops.dense(X, W)
    src = td.build(ops.schedule(Y, "cuda"), [X, W, Y], target="cuda").get_source()
    assert "for (long long " in src and "(int)threadIdx" not in src
    big = td.placeholder((1 << 15, 1 << 15), name="big")
    out = ops.relu(big)
    src = td.build(ops.schedule(out, "cuda"), [big, out], target="cuda").get_source()
    assert "(long long)blockIdx.x" in src


@needs_gxx
def test_transposed_b_is_fetched_down_the_tile_columns():
    """``b`` given as (N, K) (transpose_b, dense's W): the B tile is fetched along K (a
    column of the tile) into rows padded to 132 words; checked at sizes the tiles don't
    divide, 2-D and batched."""
    g = np.random.default_rng(7)
    A, B = td.placeholder((70, 37), name="A"), td.placeholder((300, 37), name="B")
    C = ops.matmul(A, B, transpose_b=True)
    f = _build([A, B, C])
    # two copies of 8 rows of 132 words (the last row's padding is not allocated)
    assert "tdsl_shared<float, 2108> B_pack;" in f.get_source()
    a = g.standard_normal((70, 37)).astype("float32")
    b = g.standard_normal((300, 37)).astype("float32")
    c = np.full((70, 300), np.nan, "float32")
    f.emulate(a, b, c)
    np.testing.assert_allclose(c, a @ b.T, rtol=1e-4, atol=1e-4)
    P, Q = td.placeholder((2, 33, 20), name="P"), td.placeholder((2, 45, 20), name="Q")
    R = ops.batch_matmul(P, Q, transpose_b=True)
    f = _build([P, Q, R])
    p = g.standard_normal((2, 33, 20)).astype("float32")
    q = g.standard_normal((2, 45, 20)).astype("float32")
    r = np.full((2, 33, 45), np.nan, "float32")
    f.emulate(p, q, r)
    np.testing.assert_allclose(r, p @ q.transpose(0, 2, 1), rtol=1e-4, atol=1e-4)
