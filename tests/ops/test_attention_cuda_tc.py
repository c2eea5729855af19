"""fp16/bf16 ops.attention on CUDA: the default schedule's tensor-core FlashAttention-2
microkernel (backends/cuda/tc_attention.py, tc_attention_kernel.py), run under the CPU
emulator (ldmatrix / mma.sync / cp.async / shuffles emulated, races checked) against
PyTorch's SDPA in float32 on the same fp16/bf16 inputs, and assembled by NVRTC for sm_80
and sm_90 without spills."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import tdsl as td
from tdsl import ops
from tdsl.backends.cuda import nvrtc
from tdsl.errors import BuildError

torch = pytest.importorskip("torch", reason="PyTorch's SDPA is the reference")
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")
needs_nvrtc = pytest.mark.skipif(not nvrtc.is_available(),
                                 reason="NVRTC (cuda-python) is not installed")


def _np_dtype(dt: str):
    if dt == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 arrays need ml_dtypes")
        return ml_dtypes.bfloat16
    return np.float16


def _build(qs, ks, dt="float16", causal=False, scale=None, arch="sm_80", mask=None):
    q = td.placeholder(qs, dt, name="q")
    k = td.placeholder(ks, dt, name="k")
    v = td.placeholder(ks, dt, name="v")
    args = [q, k, v] if mask is None else [q, k, v, mask]
    o = ops.attention(q, k, v, causal=causal, scale=scale, mask=mask)
    tgt = f"cuda -arch={arch}"
    return td.build(ops.schedule(o, tgt), [*args, o], target=tgt)


def _check(f, qs, ks, dt="float16", causal=False, scale=None, seed=0):
    """Emulate ``f`` at shapes ``qs``/``ks`` against SDPA in float32 on the same inputs;
    the tolerance is that of probabilities rounded to 16 bits before P.V."""
    rng = np.random.default_rng(seed)
    npdt = _np_dtype(dt)
    a = [rng.standard_normal(s).astype(npdt) for s in (qs, ks, ks)]
    out = np.full((*qs[:3], ks[3]), 7.0, npdt)
    f.emulate(*a, out)
    t = [torch.from_numpy(x.astype(np.float32)) for x in a]
    ref = torch.nn.functional.scaled_dot_product_attention(*t, is_causal=causal,
                                                           scale=scale).numpy()
    tol = 2e-2 if dt == "float16" else 5e-2
    np.testing.assert_allclose(out.astype(np.float32), ref, rtol=tol, atol=tol)


def _uses_tc(f) -> bool:
    src = f.get_source()
    return src.count("__global__") == 1 and "tdsl_fa<" in src


@needs_gxx
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sq,sk", [(64, 64), (80, 80), (100, 100), (100, 70), (37, 150)])
def test_fp16_emulated_against_torch(sq, sk, causal):
    """Sequences that do and do not divide the 64-query block and the 64-key tile,
    seq_q != seq_k both ways, batch x heads 2 x 3."""
    qs, ks = (2, 3, sq, 64), (2, 3, sk, 64)
    f = _build(qs, ks, causal=causal)
    assert _uses_tc(f)
    _check(f, qs, ks, causal=causal)


@needs_gxx
@pytest.mark.parametrize("causal", [False, True])
def test_bf16_and_head_size_128(causal):
    qs, ks = (1, 2, 80, 128), (1, 2, 100, 128)
    f = _build(qs, ks, "bfloat16", causal=causal)
    assert _uses_tc(f)
    _check(f, qs, ks, "bfloat16", causal=causal)


@needs_gxx
def test_fp16_head_size_128_and_a_scale():
    qs, ks = (1, 2, 70, 128), (1, 2, 130, 128)
    f = _build(qs, ks, scale=0.3)
    assert _uses_tc(f) and "0.3f" in f.get_source()
    _check(f, qs, ks, scale=0.3)


@needs_gxx
@pytest.mark.parametrize("causal", [False, True])
def test_symbolic_sequences_bound_to_several_values(causal):
    n, m = td.var("n"), td.var("m")
    f = _build((2, 3, n, 64), (2, 3, m, 64), causal=causal)
    assert _uses_tc(f)
    for sq, sk in ((64, 64), (100, 80), (5, 130)):
        _check(f, (2, 3, sq, 64), (2, 3, sk, 64), causal=causal, seed=sq)


@needs_gxx
def test_causal_with_one_key():
    """One key: every query's only probability is 1 (the other 63 keys of the tile are
    past seq_k, masked), 70 queries over two query blocks."""
    qs, ks = (1, 1, 70, 64), (1, 1, 1, 64)
    f = _build(qs, ks, causal=True)
    _check(f, qs, ks, causal=True)


def test_fp32_a_mask_an_odd_head_size_sm_75_or_an_infinite_scale_keep_the_simt_schedule():
    f32 = _build((1, 2, 64, 64), (1, 2, 64, 64), "float32")
    assert "tdsl_fa<" not in f32.get_source()
    mask = td.placeholder((64, 64), "bool", name="mask")
    fm = _build((1, 2, 64, 64), (1, 2, 64, 64), mask=mask)
    assert "tdsl_fa<" not in fm.get_source()
    f32d = _build((1, 2, 64, 32), (1, 2, 64, 32))
    assert "tdsl_fa<" not in f32d.get_source()
    f75 = _build((1, 2, 64, 64), (1, 2, 64, 64), arch="sm_75")
    assert "tdsl_fa<" not in f75.get_source()
    finf = _build((1, 2, 64, 64), (1, 2, 64, 64), scale=float("inf"))   # no C literal for it
    assert "tdsl_fa<" not in finf.get_source()


def test_a_malformed_pragma_is_a_build_error():
    from tdsl.schedule import create_schedule
    from tdsl.ops.schedules.cuda_attention_tc import PRAGMA
    from tdsl.ops.schedules.llvm_attention import attention_stages
    from tdsl.ops.schedules import cuda_attention_tc as tc
    q = td.placeholder((1, 1, 64, 64), "float16", name="q")
    o = ops.attention(q, q, q)
    s = create_schedule([o.op])
    a = attention_stages(s, s[o])
    tc.schedule_tc_attention(s, a, s[o], 64, False, 0.125)
    leaf = s[o].leaf_iter_vars[-1]
    s[o].pragma(leaf, PRAGMA, "fa/d96/c0/s0.1")
    with pytest.raises(BuildError, match="tdsl_tc_attention"):
        td.build(s, [q, o], target="cuda -arch=sm_80")


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dt,d,causal", [("float16", 64, True), ("float16", 64, False),
                                         ("bfloat16", 64, True), ("float16", 128, True)])
def test_assembles_without_spills(arch, dt, d, causal):
    """ldmatrix (plain and .trans), mma.sync, cp.async in the PTX; ptxas: no spill, no
    stack frame (the fragments, scores and accumulators stay in registers)."""
    from tdsl.backends.cuda.static import analyze
    f = _build((4, 12, 1024, d), (4, 12, 1024, d), dt, causal=causal, arch=arch)
    assert _uses_tc(f)
    ptx = f.ptx(arch)
    kind = "bf16.bf16" if dt == "bfloat16" else "f16.f16"
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.f32" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx
    assert "cp.async.cg.shared.global" in ptx
    (ks,) = analyze(f, arch)
    assert ks.spill_bytes == ks.frame_bytes == 0 and ks.registers <= 255, ks
    assert ks.threads == 128 and ks.shared_bytes == (64 * d + 4 * 64 * d) * 2, ks
    print(arch, dt, d, causal, "registers", ks.registers, "smem", ks.shared_bytes)


@needs_gxx
def test_the_emulator_sees_a_missing_barrier_in_the_key_loop():
    """The barrier closing each key block keeps the next tile's copies out of the stage still
    being read (and shows the landed tile to the block): without it the race checker fires."""
    from tdsl.backends.cuda import SharedMemoryRaceError
    qs, ks = (1, 1, 64, 64), (1, 1, 200, 64)
    f = _build(qs, ks)
    src = f.get_source()
    mark = "__syncthreads();        // ... everyone's; and every read of tile kb's stage"
    assert src.count(mark) == 1
    a = [np.ones(s, np.float16) for s in (qs, ks, ks)]
    out = np.zeros(qs, np.float16)
    with pytest.raises(SharedMemoryRaceError):
        f.emulate(*a, out, source=src.replace(mark, "//"))
