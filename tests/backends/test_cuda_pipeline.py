"""cp.async double buffering on sm_80+ (backends/cuda/pipeline.py): the default GEMM's fills
become asynchronous copies (16-byte for float4 fetches) with one wait and one barrier per k
step; results match NumPy under the emulator, which lands a copy at its thread's wait and
reports a missing wait or a missing barrier after it."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import tdsl as td
from tdsl import ops
from tdsl.backends.cuda import EmulationError, SharedMemoryRaceError, nvrtc

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")
needs_nvrtc = pytest.mark.skipif(not nvrtc.is_available(), reason="NVRTC (cuda-python) is not installed")


def _gemm(M, N, K, arch):
    A = td.placeholder((M, K), name="A")
    B = td.placeholder((K, N), name="B")
    C = ops.matmul(A, B)
    f = td.build(ops.schedule(C, "cuda"), [A, B, C], target=f"cuda -arch={arch}")
    g = np.random.default_rng(M + N + K)
    a = g.standard_normal((M, K)).astype("float32")
    b = g.standard_normal((K, N)).astype("float32")
    return f, a, b, np.full((M, N), np.nan, "float32")


def _loop_body(src):
    """The text of the pipelined k loop."""
    at = src.index("for (int k_outer")
    return src[at:src.index("\n  }\n", at)]


def test_sm80_fills_are_cp_async_with_one_barrier_per_step():
    f, *_ = _gemm(64, 64, 32, "sm_80")
    src = f.get_source()
    body = _loop_body(src)
    assert "tdsl_cp_async<16>(B_pack.ptr(" in body          # float4 fetch of B: 16 bytes
    assert "tdsl_cp_async<16>(A_shared.ptr(" in body        # float4 fetch of A
    assert body.count("__syncthreads();") == 1
    assert body.index("tdsl_cp_async_wait_all();") < body.index("__syncthreads();") < \
        body.index("tdsl_cp_async<16>")
    assert "cp.async.ca.shared.global" in src


def test_older_arch_keeps_plain_stores():
    f, *_ = _gemm(64, 64, 32, "sm_75")
    assert "tdsl_cp_async" not in f.get_source()


@needs_gxx
@pytest.mark.parametrize("M,N,K,arch", [(64, 64, 32, "sm_80"), (37, 45, 19, "sm_90")])
def test_pipelined_gemm_matches_numpy(M, N, K, arch):
    f, a, b, c = _gemm(M, N, K, arch)
    assert "tdsl_cp_async" in f.get_source()
    f.emulate(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@needs_gxx
def test_missing_wait_is_reported():
    f, a, b, c = _gemm(64, 64, 32, "sm_80")
    src = f.get_source()
    assert src.count("tdsl_cp_async_wait_all();") == 1
    bad = src.replace("tdsl_cp_async_wait_all();", "")
    with pytest.raises(EmulationError, match="cp.async copy into it was in flight"):
        f.emulate(a, b, c, source=bad)


@needs_gxx
def test_missing_barrier_after_wait_is_a_race():
    f, a, b, c = _gemm(64, 64, 32, "sm_80")
    src = f.get_source()
    bad = src.replace("tdsl_cp_async_wait_all();\n    __syncthreads();", "tdsl_cp_async_wait_all();")
    assert bad != src
    with pytest.raises(SharedMemoryRaceError):
        f.emulate(a, b, c, source=bad)


@needs_nvrtc
def test_cp_async_assembles_for_sm80_and_sm90():
    from tdsl.backends.cuda.cubin import ptxas_report
    for arch in ("sm_80", "sm_90"):
        f, *_ = _gemm(256, 256, 64, arch)
        r = ptxas_report(f.get_source(), arch)[f.kernels[0].name]
        assert r.spill_stores == 0 and r.spill_loads == 0
        assert "cp.async" in f.get_source("ptx")
