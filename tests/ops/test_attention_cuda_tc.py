"""fp16/bf16 ops.attention on CUDA: the default schedule's tensor-core FlashAttention-2
microkernel (backends/cuda/tc_attention.py, tc_attention_kernel.py), run under the CPU
emulator (ldmatrix / mma.sync / cp.async / shuffles emulated, races checked) against
PyTorch's SDPA in float32 on the same fp16/bf16 inputs (user masks, additive and boolean,
broadcast as PyTorch broadcasts ``attn_mask``, causal or not), and assembled by NVRTC for
sm_80 and sm_90 without spills."""
from __future__ import annotations

import shutil
import warnings

import numpy as np
import pytest

import tdsl as td
from tdsl import ops
from tdsl.backends.cuda import nvrtc
from tdsl.errors import BuildError
from tests.workloads import half_dtype

torch = pytest.importorskip("torch", reason="PyTorch's SDPA is the reference")
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")
needs_nvrtc = pytest.mark.skipif(not nvrtc.is_available(),
                                 reason="NVRTC (cuda-python) is not installed")


def _build(qs, ks, dt="float16", causal=False, scale=None, arch="sm_80", mask=None):
    q = td.placeholder(qs, dt, name="q")
    k = td.placeholder(ks, dt, name="k")
    v = td.placeholder(ks, dt, name="v")
    args = [q, k, v] if mask is None else [q, k, v, mask]
    o = ops.attention(q, k, v, causal=causal, scale=scale, mask=mask)
    tgt = f"cuda -arch={arch}"
    return td.build(ops.schedule(o, tgt), [*args, o], target=tgt)


def _mask_array(shape, kind, dt, rng):
    """A random mask of ``shape`` (its last two dimensions: queries, keys): boolean (True:
    the key takes part) or additive (normal x 2, a fifth -inf), with fully masked rows (all
    False / all -inf), and a row whose first key tile alone is masked (where the mask has a
    query dimension and enough keys)."""
    if kind == "bool":
        m = rng.random(shape) < 0.7
        off = False
    else:
        m = (rng.standard_normal(shape) * 2).astype(np.float32)
        m[rng.random(shape) < 0.2] = -np.inf
        m = m.astype(half_dtype(dt))
        off = -np.inf
    if len(shape) >= 2 and shape[-2] > 1:
        m[..., [0, shape[-2] // 2, shape[-2] - 1], :] = off     # fully masked rows
        if shape[-1] > 64:
            m[..., 1, :64] = off
    return m


def _check(f, qs, ks, dt="float16", causal=False, scale=None, seed=0, mask=None):
    """Emulate ``f`` at shapes ``qs``/``ks`` against SDPA in float32 on the same inputs
    (and ``mask``, a NumPy array, where given); the tolerance is that of probabilities
    rounded to 16 bits before P.V.  No NaN or inf in the output (SDPA has none: a fully
    masked row gives 0s)."""
    rng = np.random.default_rng(seed)
    npdt = half_dtype(dt)
    a = [rng.standard_normal(s).astype(npdt) for s in (qs, ks, ks)]
    out = np.full((*qs[:3], ks[3]), 7.0, npdt)
    f.emulate(*a, *([] if mask is None else [mask]), out)
    t = [torch.from_numpy(x.astype(np.float32)) for x in a]
    kw = {}
    if mask is not None:
        full = np.broadcast_to(mask, (*qs[:3], ks[2])).copy()   # (SDPA refuses a 1-D mask)
        kw["attn_mask"] = torch.from_numpy(full if mask.dtype == bool else
                                           full.astype(np.float32))
    ref = torch.nn.functional.scaled_dot_product_attention(*t, is_causal=causal,
                                                           scale=scale, **kw).numpy()
    assert np.isfinite(ref).all()
    got = out.astype(np.float32)
    assert np.isfinite(got).all()
    tol = 2e-2 if dt == "float16" else 5e-2
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)


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


def _mask_shape(style, B, H, sq, sk):
    return {"qk": (sq, sk), "b1": (B, 1, sq, sk), "bh": (B, H, sq, sk),
            "k": (sk,), "b11": (B, 1, 1, sk)}[style]


@needs_gxx
@pytest.mark.parametrize("kind", ["bool", "add"])
@pytest.mark.parametrize("style,sq,sk", [("qk", 100, 70), ("b1", 64, 130), ("bh", 37, 64),
                                         ("k", 80, 100), ("b11", 64, 64)])
def test_masked_fp16_emulated_against_torch(kind, style, sq, sk):
    """Boolean and additive masks broadcast as PyTorch broadcasts ``attn_mask`` ((Sq, Sk),
    (B, 1, Sq, Sk), (B, H, Sq, Sk), a key mask (Sk,) and (B, 1, 1, Sk): row stride 0),
    with fully masked rows, over sequences that do and do not divide 64, seq_q != seq_k;
    the tensor-core kernel runs them."""
    B, H = 2, 3
    qs, ks = (B, H, sq, 64), (B, H, sk, 64)
    rng = np.random.default_rng(sq * sk)
    m = _mask_array(_mask_shape(style, B, H, sq, sk), kind, "float16", rng)
    mp = td.placeholder(m.shape, "bool" if kind == "bool" else "float16", name="mask")
    f = _build(qs, ks, mask=mp)
    assert _uses_tc(f)
    _check(f, qs, ks, mask=m, seed=sq)


@needs_gxx
@pytest.mark.parametrize("kind,sq,sk", [("bool", 100, 100), ("add", 70, 130),
                                        ("add", 130, 37)])
def test_causal_and_a_mask(kind, sq, sk):
    """Causality and a mask together (a key takes part where both allow it, as PyTorch):
    with seq_q > seq_k causality masks whole rows too."""
    qs, ks = (1, 2, sq, 64), (1, 2, sk, 64)
    m = _mask_array((1, 2, sq, sk), kind, "float16", np.random.default_rng(sk))
    mp = td.placeholder(m.shape, "bool" if kind == "bool" else "float16", name="mask")
    f = _build(qs, ks, causal=True, mask=mp)
    assert _uses_tc(f)
    _check(f, qs, ks, causal=True, mask=m, seed=sk)


@needs_gxx
@pytest.mark.parametrize("kind", ["bool", "add"])
def test_masked_bf16_head_size_128(kind):
    qs, ks = (1, 2, 80, 128), (1, 2, 100, 128)
    m = _mask_array((1, 1, 80, 100), kind, "bfloat16", np.random.default_rng(5))
    mp = td.placeholder(m.shape, "bool" if kind == "bool" else "bfloat16", name="mask")
    f = _build(qs, ks, "bfloat16", mask=mp, scale=0.2)
    assert _uses_tc(f)
    _check(f, qs, ks, "bfloat16", mask=m, scale=0.2)


@needs_gxx
def test_masked_symbolic_sequences_bound_to_several_values():
    """A (n, m) additive mask over symbolic sequence lengths: its row stride is a kernel
    parameter."""
    n, m = td.var("n"), td.var("m")
    mp = td.placeholder((n, m), "float16", name="mask")
    f = _build((2, 3, n, 64), (2, 3, m, 64), mask=mp)
    assert _uses_tc(f)
    for sq, sk in ((100, 80), (5, 130)):
        mk = _mask_array((sq, sk), "add", "float16", np.random.default_rng(sq))
        _check(f, (2, 3, sq, 64), (2, 3, sk, 64), mask=mk, seed=sq)


def test_a_masked_attention_takes_the_tensor_core_kernel():
    """Boolean and additive masks of every broadcast shape, causal or not, take the
    microkernel (mma.sync through tdsl_fa, the mask's kind in the call); a mask computed in
    the kernel (not an input) keeps the SIMT schedule."""
    for kind, dt in (("bool", "bool"), ("add", "float16")):
        for style in ("qk", "b1", "bh", "k", "b11"):
            for causal in (False, True):
                mp = td.placeholder(_mask_shape(style, 2, 3, 64, 64), dt, name="mask")
                f = _build((2, 3, 64, 64), (2, 3, 64, 64), mask=mp, causal=causal)
                assert _uses_tc(f), (kind, style, causal)
                src = f.get_source()
                assert "tdsl_tc_mma" in src and "fa_m_off" in src
                assert f"tdsl_fa<false, 64, {str(causal).lower()}, tdsl_half, " \
                       f"{1 if kind == 'add' else 2}, " in src
    q = td.placeholder((2, 3, 64, 64), "float16", name="q")
    m0 = td.placeholder((64, 64), "float16", name="m0")
    mc = td.compute((64, 64), lambda i, j: m0[i, j] > 0, name="mc")
    o = ops.attention(q, q, q, mask=mc)
    tgt = "cuda -arch=sm_80"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")       # (the SIMT kernel's spill warning)
        f = td.build(ops.schedule(o, tgt), [q, m0, o], target=tgt)
    assert "tdsl_fa<" not in f.get_source()


def test_the_key_names_the_mask_kind_and_is_unchanged_without_one():
    from tdsl.backends.cuda.tc_attention import (MASK_ADD, MASK_BOOL, MASK_NONE, attn_key,
                                                 parse_key)
    assert attn_key(64, True, 0.125) == "fa/d64/c1/s0.125"
    assert parse_key("fa/d64/c1/s0.125") == (64, True, 0.125, MASK_NONE)
    for kind in (MASK_NONE, MASK_ADD, MASK_BOOL):
        assert parse_key(attn_key(128, False, 0.3, kind)) == (128, False, 0.3, kind)
    for bad in ("fa/d64/c1/s0.125/mint", "fa/d64/c1/s0.125/madd/x", "fa/d64/c1"):
        assert parse_key(bad) is None


def test_a_key_that_disagrees_with_the_mask_is_a_build_error():
    """A masked attention scheduled with an unmasked key (and the reverse): the microkernel
    would drop the mask (or read none), so the build refuses."""
    from tdsl.schedule import create_schedule
    from tdsl.ops.schedules.llvm_attention import attention_stages
    from tdsl.ops.schedules import cuda_attention_tc as tc
    q = td.placeholder((1, 1, 64, 64), "float16", name="q")
    mp = td.placeholder((64, 64), "bool", name="mask")
    for mask, kind, args, why in ((mp, 0, [q, mp], "reads a mask"),
                                  (None, 2, [q], "names a mask")):
        o = ops.attention(q, q, q, mask=mask)
        s = create_schedule([o.op])
        a = attention_stages(s, s[o])
        tc.schedule_tc_attention(s, a, s[o], 64, False, 0.125, kind)
        with pytest.raises(BuildError, match=why):
            td.build(s, [*args, o], target="cuda -arch=sm_80")


def test_fp32_an_odd_head_size_sm_75_or_an_infinite_scale_keep_the_simt_schedule():
    f32 = _build((1, 2, 64, 64), (1, 2, 64, 64), "float32")
    assert "tdsl_fa<" not in f32.get_source()
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


def test_a_mask_with_a_huge_key_stride_is_a_build_error():
    """The kernel's offsets within a key block are ints: a mask buffer whose stride along
    keys is not a constant under 2^24 is refused, naming the mask."""
    from tdsl.lowering import lower
    q = td.placeholder((1, 1, 64, 64), "float16", name="q")
    mp = td.placeholder((64, 64), "bool", name="mask")
    o = ops.attention(q, q, q, mask=mp)
    tgt = "cuda -arch=sm_80"
    func = lower(ops.schedule(o, tgt), [q, mp, o])
    td.build(func, target=tgt)                       # compact: fine
    func.params[1].strides = (td.const(1 << 26, "int64"), td.const(1 << 25, "int64"))
    with pytest.raises(BuildError, match="stride of mask 'mask' along keys"):
        td.build(func, target=tgt)


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dt,d,causal,kind", [("float16", 64, True, "bool"),
                                              ("float16", 64, False, "add"),
                                              ("bfloat16", 128, False, "add")])
def test_masked_assembles_without_spills(arch, dt, d, causal, kind):
    """The masked kernel (a (B, 1, Sq, Sk) mask) in registers too: no spill, no frame."""
    from tdsl.backends.cuda.static import analyze
    mp = td.placeholder((4, 1, 1024, 1024), "bool" if kind == "bool" else dt, name="mask")
    f = _build((4, 12, 1024, d), (4, 12, 1024, d), dt, causal=causal, arch=arch, mask=mp)
    assert _uses_tc(f)
    kind_s = "bf16.bf16" if dt == "bfloat16" else "f16.f16"
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{kind_s}.f32" in f.ptx(arch)
    (ks,) = analyze(f, arch)
    assert ks.spill_bytes == ks.frame_bytes == 0 and ks.registers <= 255, ks
    assert ks.threads == 128 and ks.shared_bytes == (64 * d + 4 * 64 * d) * 2, ks
    print(arch, dt, d, causal, kind, "registers", ks.registers)


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
