"""Shared-memory bank conflicts of the tensor-core templates, counted by the emulator
(issue 26: "no bank conflicts on the fragment loads").

The static report's bank analysis walks the kernel IR; the tensor-core GEMM and attention
kernels are C++ templates it cannot see into.  ``CUDAModule.emulate_bank_use`` counts, from
the addresses the kernels compute, how many wavefronts each phase of their ldmatrix (8 rows
of 16 bytes a matrix), 16-byte cp.async tile fills (8 lanes a phase) and element-wise tile
stores (a gathered conv tile: 32 lanes a phase) takes.  The defaults
must take one each; an unswizzled tile (planted) must be found.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import tdsl as td
from tdsl import ops
from tests.workloads import half_dtype

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")

#: The A tile's XOR swizzle in tc_kernel.py: where a thread's cp.async lands (sa_w) and where
#: its ldmatrix rows start (a_ld); replacing both keeps the kernel correct, only conflicted.
A_SWIZZLE = {"((c0 ^ ((r0 >> 1) & 3)) << 3)": "(c0 << 3)",
             "((c ^ ((r >> 1) & 3)) << 3)": "(c << 3)"}


def _gemm(kind: str, m: int, n: int, k: int, dt: str):
    A = td.placeholder((m, k), dt, name="A")
    if kind == "matmul":        # B row-major (k, n): ldmatrix.trans
        B = td.placeholder((k, n), dt, name="B")
        out = ops.matmul(A, B, out_dtype="float32")
    else:                       # dense: W (n, k), the column layout
        B = td.placeholder((n, k), dt, name="W")
        out = ops.dense(A, B, out_dtype="float32")
    f = td.build(ops.schedule(out, "cuda -arch=sm_90"), [A, B, out], target="cuda -arch=sm_90")
    assert "tdsl_tc_gemm<" in f.get_source()
    g = np.random.default_rng(m + n + k)
    a = (g.random((m, k)) - .5).astype(half_dtype(dt))
    b = (g.random(tuple(int(x) for x in B.shape)) - .5).astype(half_dtype(dt))
    ref = a.astype("float32") @ (b.astype("float32") if kind == "matmul"
                                 else b.astype("float32").T)
    return f, a, b, ref


@needs_gxx
@pytest.mark.parametrize("kind,m,n,k,dt", [
    ("matmul", 256, 256, 128, "float16"),
    ("matmul", 200, 136, 72, "bfloat16"),   # tails: the element-wise fills beside cp.async
    ("dense", 256, 128, 96, "float16"),
])
def test_gemm_fragment_loads_and_fills_are_conflict_free(kind, m, n, k, dt):
    f, a, b, ref = _gemm(kind, m, n, k, dt)
    c = np.full(ref.shape, np.nan, "float32")
    use = f.emulate_bank_use(a, b, c)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5)
    expected = {"ldmatrix", "cp.async.16"} | ({"ldmatrix.trans"} if kind == "matmul" else set())
    assert set(use) == expected
    for kind_, u in use.items():
        assert u.phases > 0 and u.worst == 1 and u.wavefronts == u.phases, (kind_, u)


@needs_gxx
def test_an_unswizzled_tile_is_found_conflicted():
    """The planted defect: the A tile without its XOR swizzle (rows of 64 bytes, so the 8
    rows of an ldmatrix matrix fall on 2 bank groups: 4 ways).  The kernel stays correct;
    only the bank count sees it."""
    f, a, b, ref = _gemm("matmul", 256, 256, 128, "float16")
    src = f.get_source()
    for old, new in A_SWIZZLE.items():
        assert src.count(old) == 1, old
        src = src.replace(old, new)
    c = np.full(ref.shape, np.nan, "float32")
    use = f.emulate_bank_use(a, b, c, source=src)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5)
    assert use["ldmatrix"].worst == 4 and use["ldmatrix"].ways == 4.0
    assert use["ldmatrix.trans"].worst == 1          # B keeps its swizzle


@needs_gxx
def test_attention_fragment_loads_are_conflict_free():
    Q, K, V = (td.placeholder((1, 2, 160, 64), "float16", name=n) for n in "QKV")
    M = td.placeholder((1, 1, 160, 160), "bool", name="M")
    out = ops.attention(Q, K, V, causal=True, mask=M)
    f = td.build(ops.schedule(out, "cuda -arch=sm_90"), [Q, K, V, M, out],
                 target="cuda -arch=sm_90")
    g = np.random.default_rng(3)
    q, k, v = ((g.random((1, 2, 160, 64)) - .5).astype(np.float16) for _ in range(3))
    mask = g.random((1, 1, 160, 160)) < 0.8
    o = np.full((1, 2, 160, 64), np.nan, str(out.dtype))
    use = f.emulate_bank_use(q, k, v, mask, o)
    assert np.isfinite(o.astype("float32")).all()
    assert {"ldmatrix", "ldmatrix.trans", "cp.async.16"} <= set(use)
    for kind, u in use.items():
        assert u.worst == 1, (kind, u)


@needs_gxx
@pytest.mark.parametrize("stride,pad", [(1, 1), (2, 0)])
def test_conv_gathered_tile_stores_are_conflict_free(stride, pad):
    """The fp16 implicit-GEMM conv fills B's tile element by element from its gather (a
    warp a k row, a lane a column): those 2-byte stores, the weights' cp.async and the
    fragment loads each take one wavefront a phase."""
    import torch
    X = td.placeholder((2, 16, 20, 20), "float16", name="X")
    W = td.placeholder((24, 16, 3, 3), "float16", name="W")
    out = ops.conv2d(X, W, stride=stride, padding=pad, out_dtype="float32")
    f = td.build(ops.schedule(out, "cuda -arch=sm_90"), [X, W, out], target="cuda -arch=sm_90")
    assert "tc_b_val" in f.get_source()
    g = np.random.default_rng(stride)
    x, w = ((g.random(s) - .5).astype(np.float16) for s in ((2, 16, 20, 20), (24, 16, 3, 3)))
    o = np.full([int(s) for s in out.shape], np.nan, "float32")
    use = f.emulate_bank_use(x, w, o)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x.astype("float32")),
                                     torch.from_numpy(w.astype("float32")), stride=stride,
                                     padding=pad).numpy()
    np.testing.assert_allclose(o, ref, rtol=1e-4, atol=1e-4)
    assert {"ldmatrix", "ldmatrix.trans", "cp.async.16", "st.shared"} <= set(use)
    for kind, u in use.items():
        assert u.worst == 1, (kind, u)


@needs_gxx
def test_static_report_counts_the_templates_banks():
    """benchmarks/cuda_static.py fills the tensor-core rows' bank column from the emulator
    (it was 0: no site the IR walk could see)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from cuda_static import emulated_bank_use
    for name in ("matmul_fp16", "conv2d_fp16", "attention_fp16_mask"):
        use = emulated_bank_use(name, "sm_90")
        assert use and max(u.worst for u in use.values()) == 1, (name, use)
    assert emulated_bank_use("matmul", "sm_90") is None      # not a template kernel
