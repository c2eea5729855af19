"""The CUDA backend on a matrix of GPU schedules, verified in three layers:
NVRTC compiles every kernel for sm_80 and sm_90 (PTX names each kernel), the CPU
emulation harness runs the same source against NumPy, and a real GPU runs it where
one is present (skipped otherwise, with the reason)."""
from __future__ import annotations

import functools
import shutil
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest

import tdsl as td
from tdsl.backends import cuda
from tdsl.backends.cuda import driver, nvrtc

needs_nvrtc = pytest.mark.skipif(not nvrtc.is_available(),
                                 reason="NVRTC is not installed (pip install tdsl[cuda])")
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None,
                               reason="g++ is not installed: the CUDA emulation harness needs it")
needs_gpu = pytest.mark.skipif(not driver.device_status()[0],
                               reason=f"GPU tests: {driver.device_status()[1]}")


@dataclass
class Workload:
    module: Any                                   # the CUDAModule
    inputs: Callable[[np.random.Generator], list]  # input arrays, then output arrays
    reference: Callable[[list], np.ndarray]       # expected value of the last array
    rtol: float = 1e-5
    atol: float = 1e-5


def thread(tag: str) -> Any:
    return td.thread_axis(tag)


# ---- the schedules ------------------------------------------------------------------------------------
def naive_matmul() -> Workload:
    """One thread per output element, 16x16 threads per block, symbolic sizes (tails)."""
    n, m, k = td.var("n"), td.var("m"), td.var("k")
    A = td.placeholder((n, k), name="A")
    B = td.placeholder((k, m), name="B")
    r = td.reduce_axis((0, k), name="r")
    C = td.compute((n, m), lambda i, j: td.sum(A[i, r] * B[r, j], axis=r), name="C")
    s = td.create_schedule(C.op)
    i, j = s[C].op.axis
    bi, ti = s[C].split(i, factor=16)
    bj, tj = s[C].split(j, factor=16)
    s[C].reorder(bi, bj, ti, tj)
    s[C].bind(bi, thread("blockIdx.y"))
    s[C].bind(bj, thread("blockIdx.x"))
    s[C].bind(ti, thread("threadIdx.y"))
    s[C].bind(tj, thread("threadIdx.x"))
    f = td.build(s, [A, B, C], target="cuda")
    return Workload(f, lambda g: [g.random((37, 29), "float32"), g.random((29, 21), "float32"),
                                  np.empty((37, 21), "float32")],
                    lambda a: a[0] @ a[1])


def tiled_matmul(V: int = 4, T: int = 8, KT: int = 8, double_buffer: bool = False) -> Workload:
    """Classic 2-level tiling: (V*T)^2 block tiles staged through shared memory by all
    threads, each thread accumulating a V x V register tile (cache_write 'local');
    optionally double-buffered (the next k-tile is fetched while this one is used)."""
    n = td.var("n")
    K = 64
    A = td.placeholder((n, K), name="A")
    B = td.placeholder((K, n), name="B")
    k = td.reduce_axis((0, K), name="k")
    C = td.compute((n, n), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = td.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    bi, ti = s[C].split(i, factor=V * T)
    bj, tj = s[C].split(j, factor=V * T)
    txo, vi = s[C].split(ti, factor=V)
    tyo, vj = s[C].split(tj, factor=V)
    s[C].reorder(bi, bj, txo, tyo, vi, vj)
    s[C].bind(bi, thread("blockIdx.y"))
    s[C].bind(bj, thread("blockIdx.x"))
    s[C].bind(txo, thread("threadIdx.y"))
    s[C].bind(tyo, thread("threadIdx.x"))
    s[CL].compute_at(s[C], tyo)
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=KT)
    ci, cj = s[CL].op.axis
    s[CL].reorder(ko, ki, ci, cj)
    s[CL].unroll(ci)
    s[CL].vectorize(cj)
    for S in (AS, BS):
        s[S].compute_at(s[CL], ko)
        fused = s[S].fuse(*s[S].op.axis)
        rest, tx = s[S].split(fused, factor=T)
        _, ty = s[S].split(rest, factor=T)
        s[S].bind(tx, thread("threadIdx.x"))
        s[S].bind(ty, thread("threadIdx.y"))
        if double_buffer:
            s[S].double_buffer()
    f = td.build(s, [A, B, C], target="cuda")
    return Workload(f, lambda g: [g.random((70, K), "float32"), g.random((K, 70), "float32"),
                                  np.empty((70, 70), "float32")],
                    lambda a: a[0] @ a[1])


def conv2d_shared() -> Workload:
    """3x3 conv, padding 1: zero-padded input tiles (with halo) and filter tiles in shared
    memory, 8x8 output pixels per block, 4 output channels per thread in registers."""
    N, CI, H, W, CO, R = 1, 4, 14, 14, 8, 3
    X = td.placeholder((N, CI, H, W), name="X")
    Wt = td.placeholder((CO, CI, R, R), name="W")
    P = td.compute((N, CI, H + 2, W + 2), lambda b, c, y, x: td.if_then_else(
        td.all(y >= 1, y <= H, x >= 1, x <= W), X[b, c, y - 1, x - 1], 0.0), name="P")
    rc = td.reduce_axis((0, CI), name="rc")
    ry = td.reduce_axis((0, R), name="ry")
    rx = td.reduce_axis((0, R), name="rx")
    Y = td.compute((N, CO, H, W), lambda b, o, y, x: td.sum(
        P[b, rc, y + ry, x + rx] * Wt[o, rc, ry, rx], axis=[rc, ry, rx]), name="Y")
    s = td.create_schedule(Y.op)
    PS = s.cache_read(P, "shared", [Y])
    s[P].compute_inline()
    WS = s.cache_read(Wt, "shared", [Y])
    YL = s.cache_write(Y, "local")
    _, o, y, x = s[Y].op.axis
    oo, oi = s[Y].split(o, factor=4)
    yo, yi = s[Y].split(y, factor=8)
    xo, xi = s[Y].split(x, factor=8)
    s[Y].reorder(oo, yo, xo, yi, xi, oi)
    s[Y].bind(oo, thread("blockIdx.z"))
    s[Y].bind(yo, thread("blockIdx.y"))
    s[Y].bind(xo, thread("blockIdx.x"))
    s[Y].bind(yi, thread("threadIdx.y"))
    s[Y].bind(xi, thread("threadIdx.x"))
    s[YL].compute_at(s[Y], xi)
    rc_, ry_, rx_ = s[YL].op.reduce_axis
    s[YL].reorder(rc_, ry_, rx_, *s[YL].op.axis)
    for S in (PS, WS):
        s[S].compute_at(s[YL], rc_)
        fused = s[S].fuse(*s[S].op.axis)
        rest, tx = s[S].split(fused, factor=8)
        _, ty = s[S].split(rest, factor=8)
        s[S].bind(tx, thread("threadIdx.x"))
        s[S].bind(ty, thread("threadIdx.y"))
    f = td.build(s, [X, Wt, Y], target="cuda")

    def ref(a: list) -> np.ndarray:
        xp = np.pad(a[0], ((0, 0), (0, 0), (1, 1), (1, 1)))
        out = np.zeros((N, CO, H, W), "float64")
        for dy in range(R):
            for dx in range(R):
                out += np.einsum("bchw,oc->bohw", xp[:, :, dy:dy + H, dx:dx + W], a[1][:, :, dy, dx])
        return out
    return Workload(f, lambda g: [g.standard_normal((N, CI, H, W)).astype("float32"),
                                  g.standard_normal((CO, CI, R, R)).astype("float32"),
                                  np.empty((N, CO, H, W), "float32")], ref, 1e-4, 1e-4)


def softmax_block() -> Workload:
    """Row softmax, one block per row: max and sum reduced across the block's threads
    with rfactor into shared memory (one partial per thread), then per-thread final
    reductions into registers."""
    m = td.var("m")
    N, T = 96, 32
    X = td.placeholder((m, N), name="X")
    k = td.reduce_axis((0, N), name="k")
    M = td.compute((m,), lambda i: td.max(X[i, k], axis=k), name="M")
    k2 = td.reduce_axis((0, N), name="k2")
    S = td.compute((m,), lambda i: td.sum(td.exp(X[i, k2] - M[i]), axis=k2), name="S")
    Y = td.compute((m, N), lambda i, j: td.exp(X[i, j] - M[i]) / S[i], name="Y")
    s = td.create_schedule(Y.op)
    _, ki = s[M].split(s[M].op.reduce_axis[0], factor=T)
    MR = s.rfactor(M, ki)
    _, ki2 = s[S].split(s[S].op.reduce_axis[0], factor=T)
    SR = s.rfactor(S, ki2)
    i, j = s[Y].op.axis
    _, ji = s[Y].split(j, factor=T)
    s[Y].bind(i, thread("blockIdx.x"))
    s[Y].bind(ji, thread("threadIdx.x"))
    for st in (M, S):
        s[st].compute_at(s[Y], i)
        s[st].set_scope("local")
    for st in (MR, SR):
        s[st].compute_at(s[Y], i)
        s[st].set_scope("shared")
        s[st].bind(s[st].op.axis[0], thread("threadIdx.x"))
    f = td.build(s, [X, Y], target="cuda")

    def ref(a: list) -> np.ndarray:
        e = np.exp(a[0] - a[0].max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)
    return Workload(f, lambda g: [g.standard_normal((7, N)).astype("float32"),
                                  np.empty((7, N), "float32")], ref)


def elementwise_symbolic() -> Workload:
    """A symbolic-size elementwise kernel: 128 threads per block, a tail guard, and the
    grid size computed on the host from n."""
    n = td.var("n")
    A = td.placeholder((n,), name="A")
    B = td.placeholder((n,), name="B")
    C = td.compute((n,), lambda i: td.sigmoid(A[i]) * B[i] + td.sqrt(td.abs(B[i])), name="C")
    s = td.create_schedule(C.op)
    bo, bi = s[C].split(C.op.axis[0], factor=128)
    s[C].bind(bo, thread("blockIdx.x"))
    s[C].bind(bi, thread("threadIdx.x"))
    f = td.build(s, [A, B, C], target="cuda")
    return Workload(f, lambda g: [g.standard_normal(1000).astype("float32"),
                                  g.standard_normal(1000).astype("float32"),
                                  np.empty(1000, "float32")],
                    lambda a: 1 / (1 + np.exp(-a[0])) * a[1] + np.sqrt(np.abs(a[1])))


def wmma_matmul() -> Workload:
    """fp16 x fp16 -> fp32 matmul on tensor cores: 32x32 block tiles, four warps (one
    16x16 tile each, told apart by threadIdx.y/z), A and B tiles fetched into shared
    memory by all 128 threads, the 16x16x16 inner loops tensorized to WMMA."""
    N = K = 64
    A = td.placeholder((N, K), "float16", name="A")
    B = td.placeholder((K, N), "float16", name="B")
    k = td.reduce_axis((0, K), name="k")
    C = td.compute((N, N), lambda i, j: td.sum(A[i, k].astype("float32") *
                                                 B[k, j].astype("float32"), axis=k), name="C")
    s = td.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    i, j = s[C].op.axis
    io, ii = s[C].split(i, factor=16)
    jo, ji = s[C].split(j, factor=16)
    bi, wi = s[C].split(io, factor=2)
    bj, wj = s[C].split(jo, factor=2)
    ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=16)
    s[C].reorder(bi, bj, wi, wj, ko, ii, ji, ki)
    s[C].bind(bi, thread("blockIdx.y"))
    s[C].bind(bj, thread("blockIdx.x"))
    s[C].bind(wi, thread("threadIdx.z"))
    s[C].bind(wj, thread("threadIdx.y"))
    for S in (AS, BS):
        s[S].compute_at(s[C], ko)
        fused = s[S].fuse(*s[S].op.axis)
        rest, tx = s[S].split(fused, factor=32)
        rest, ty = s[S].split(rest, factor=2)
        _, tz = s[S].split(rest, factor=2)
        s[S].bind(tx, thread("threadIdx.x"))
        s[S].bind(ty, thread("threadIdx.y"))
        s[S].bind(tz, thread("threadIdx.z"))
    s[C].tensorize(ii, cuda.wmma_intrin())
    f = td.build(s, [A, B, C], target="cuda")
    return Workload(f, lambda g: [(g.random((N, K)) - 0.5).astype("float16"),
                                  (g.random((K, N)) - 0.5).astype("float16"),
                                  np.empty((N, N), "float32")],
                    lambda a: a[0].astype("float32") @ a[1].astype("float32"), 1e-3, 1e-3)


WORKLOADS = {
    "naive_matmul": naive_matmul,
    "tiled_matmul": tiled_matmul,
    "tiled_matmul_double_buffered": functools.partial(tiled_matmul, double_buffer=True),
    "conv2d_shared": conv2d_shared,
    "softmax_block": softmax_block,
    "elementwise_symbolic": elementwise_symbolic,
    "wmma_matmul": wmma_matmul,
}


@functools.lru_cache(maxsize=None)
def workload(name: str) -> Workload:
    return WORKLOADS[name]()


def run_and_check(w: Workload, runner: Callable[..., None], seed: int = 0) -> None:
    arrays = w.inputs(np.random.default_rng(seed))
    runner(*arrays)
    np.testing.assert_allclose(arrays[-1], w.reference(arrays), rtol=w.rtol, atol=w.atol)


# ---- layer 1: NVRTC ------------------------------------------------------------------------------------
@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_compiles_to_ptx(name: str, arch: str) -> None:
    f = workload(name).module
    ptx = f.ptx(arch)
    assert ptx.strip()
    assert f".target {arch}" in ptx
    for k in f.kernel_names:
        assert f".entry {k}(" in ptx


@needs_nvrtc
def test_wmma_uses_tensor_core_instructions_and_assembles() -> None:
    f = workload("wmma_matmul").module
    ptx = f.get_source("ptx")
    assert "wmma.mma.sync.aligned.row.row.m16n16k16.f32.f32" in ptx
    assert "wmma.load.a.sync.aligned.row.m16n16k16.f16" in ptx
    for arch in ("sm_80", "sm_90"):  # ptxas (inside NVRTC) accepts the inline PTX
        assert len(f.cubin(arch)) > 0


# ---- layer 2: CPU emulation ---------------------------------------------------------------------------
@needs_gxx
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_emulation_matches_numpy(name: str) -> None:
    w = workload(name)
    run_and_check(w, w.module.emulate)


@needs_gxx
def test_symbolic_sizes_tails_and_grid() -> None:
    w = workload("elementwise_symbolic")
    for size in (1, 127, 128, 129, 300):
        a = np.random.default_rng(size).standard_normal((3, size)).astype("float32")
        c = np.full(size, np.nan, "float32")
        w.module.emulate(a[0], a[1], c)
        np.testing.assert_allclose(c, w.reference([a[0], a[1], c]), rtol=1e-5, atol=1e-6)
        (_, grid, block), = w.module.launch_config(a[0], a[1], c)
        assert grid == (-(-size // 128), 1, 1) and block == (128, 1, 1)


# ---- layer 3: a real GPU --------------------------------------------------------------------------------
@needs_gpu
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_gpu_matches_numpy(name: str) -> None:
    w = workload(name)
    run_and_check(w, w.module)


@needs_gpu
def test_gpu_time_evaluator() -> None:
    w = workload("tiled_matmul")
    arrays = w.inputs(np.random.default_rng(0))
    res = w.module.time_evaluator(number=3, repeat=2)(*arrays)
    assert len(res.results) == 2 and res.mean > 0
    np.testing.assert_allclose(arrays[-1], w.reference(arrays), rtol=1e-5, atol=1e-5)


@needs_gpu
def test_gpu_device_arrays() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA support here")
    w = workload("elementwise_symbolic")
    arrays = w.inputs(np.random.default_rng(0))
    dev = [torch.from_numpy(a).cuda() for a in arrays]
    w.module(*dev)
    torch.cuda.synchronize()
    np.testing.assert_allclose(dev[-1].cpu().numpy(), w.reference(arrays), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_reference_interpreter_agrees(name: str) -> None:
    """The lowered IR of every GPU schedule runs under the reference interpreter too
    (warp-collective intrinsics such as WMMA once per warp), matching NumPy."""
    from tdsl.interpreter import run
    w = workload(name)
    run_and_check(w, lambda *arrays: run(w.module.func, *arrays))
