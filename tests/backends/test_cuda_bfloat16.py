"""bfloat16 on CUDA: ``tdsl_bf16`` storage (2 bytes), every operation computed in float and
rounded to nearest even, bit for bit what ``ml_dtypes.bfloat16`` and the interpreter give.

Checked without a GPU: the CPU emulation of the generated source against NumPy
(``ml_dtypes``) on random data with the awkward values (ties, infinities, NaN, subnormals),
and NVRTC compiling the same source for sm_70 (rounding in plain integer code), sm_80 and
sm_90 (``cvt.rn.bf16.f32``)."""
from __future__ import annotations

import shutil

import ml_dtypes
import numpy as np
import pytest

import tdsl as td
from tdsl import interpreter
from tdsl.backends.cuda import nvrtc

BF = ml_dtypes.bfloat16

pytestmark = pytest.mark.skipif(shutil.which("g++") is None,
                                reason="g++ is not installed: the CUDA emulation harness needs it")


def same_bits(got: np.ndarray, want: np.ndarray) -> None:
    """Equal bit patterns, any NaN matching any NaN."""
    g, w = np.asarray(got).astype(np.float32), np.asarray(want).astype(np.float32)
    nan = np.isnan(w)
    np.testing.assert_array_equal(np.isnan(g), nan)
    np.testing.assert_array_equal(np.asarray(got)[~nan].view(np.uint16),
                                  np.asarray(want)[~nan].view(np.uint16))


def bind1d(s, st, factor: int = 64) -> None:
    o, i = s[st].split(st.op.axis[0], factor=factor)
    s[st].bind(o, td.thread_axis("blockIdx.x"))
    s[st].bind(i, td.thread_axis("threadIdx.x"))


def emulate(s, args, arrays) -> tuple[list, list, str]:
    """(interpreter outputs, emulated outputs, CUDA source); NVRTC compiles the source."""
    mod = td.build(s, args, target="cuda")
    a1 = [a.copy() for a in arrays]
    interpreter.run(td.lower(s, args), *a1)
    a2 = [a.copy() for a in arrays]
    mod.emulate(*a2)
    src = mod.get_source()
    if nvrtc.is_available():
        for arch in ("sm_70", "sm_80", "sm_90"):
            nvrtc.compile_cuda(src, arch=arch)
    return a1, a2, src


def awkward_floats(n: int, seed: int) -> np.ndarray:
    """float32 values: random, and ties between two bfloat16 values, infinities, NaN,
    subnormals, the largest float, negative zero."""
    x = (np.random.default_rng(seed).standard_normal(n) * 10).astype(np.float32)
    x[:10] = np.array([0x3F808000, 0x3F818000, 0x7F800000, 0xFF800000, 0x7FC00001, 0x00000001,
                       0x00018000, 0x7F7FFFFF, 0x80000000, 0xBF7FC000], np.uint32).view(np.float32)
    return x


@pytest.mark.parametrize("n", [64, 1000])
def test_elementwise_bits_match_ml_dtypes(n: int) -> None:
    m = td.var("m")
    A = td.placeholder((m,), "bfloat16", name="A")
    B = td.placeholder((m,), "bfloat16", name="B")
    C = td.compute((m,), lambda i: td.max(A[i] * B[i] + A[i] / B[i] - td.const(0.3, "bfloat16"),
                                          td.min(A[i], B[i])), name="C")
    D = td.compute((m,), lambda i: td.if_then_else(A[i] < B[i], A[i] - B[i], A[i]), name="D")
    s = td.create_schedule([C.op, D.op])
    bind1d(s, C)
    bind1d(s, D, 32)
    rng = np.random.default_rng(n)
    a = awkward_floats(n, n).astype(BF)
    b = (rng.standard_normal(n) + 3).astype(BF)
    c, d = np.full(n, np.nan, BF), np.full(n, np.nan, BF)
    want_c = np.maximum(a * b + a / b - BF(0.3), np.minimum(a, b))
    with np.errstate(invalid="ignore"):
        want_d = np.where(a < b, a - b, a)
    ref, got, src = emulate(s, [A, B, C, D], [a, b, c, d])
    assert "tdsl_bf16* __restrict__ C" in src and "#include" not in src
    for out in (ref, got):
        same_bits(out[3], want_d)
    ok = ~np.isnan(a.astype(np.float32))   # min/max of a NaN is unspecified (docs/ir.md)
    for out in (ref, got):
        same_bits(out[2][ok], want_c[ok])


def test_casts_round_to_nearest_even() -> None:
    n = 300
    X = td.placeholder((n,), "float32", name="X")
    D = td.placeholder((n,), "float64", name="D")
    H = td.placeholder((n,), "float16", name="H")
    I = td.placeholder((n,), "int32", name="I")
    U = td.placeholder((n,), "uint16", name="U")
    Y = td.compute((n,), lambda i: X[i].astype("bfloat16"), name="Y")
    Z = td.compute((n,), lambda i: D[i].astype("bfloat16"), name="Z")
    W = td.compute((n,), lambda i: H[i].astype("bfloat16") + I[i].astype("bfloat16")
                   + U[i].astype("bfloat16"), name="W")
    # back out of bfloat16: float32 (exact), float16 and int32 (one rounding), bool
    F = td.compute((n,), lambda i: Y[i].astype("float32") + Z[i].astype("float64").astype(
        "float32"), name="F")
    G = td.compute((n,), lambda i: Y[i].astype("float16"), name="G")
    K = td.compute((n,), lambda i: (Z[i] * td.const(100, "bfloat16")).astype("int32")
                   + Y[i].astype("bool").astype("int32"), name="K")
    stages = [Y, Z, W, F, G, K]
    s = td.create_schedule([t.op for t in stages])
    for t in stages:
        bind1d(s, t)
    rng = np.random.default_rng(1)
    x = awkward_floats(n, 1)
    d = rng.standard_normal(n) * 1e3
    h = (rng.standard_normal(n) * 4).astype(np.float16)
    ii = rng.integers(-3000, 3000, n).astype(np.int32)
    u = rng.integers(0, 65535, n, endpoint=True).astype(np.uint16)
    outs = [np.empty(n, BF), np.empty(n, BF), np.empty(n, BF), np.empty(n, np.float32),
            np.empty(n, np.float16), np.empty(n, np.int32)]
    ref, got, _ = emulate(s, [X, D, H, I, U, *stages], [x, d, h, ii, u, *outs])
    y, z = x.astype(BF), d.astype(np.float32).astype(BF)
    f32 = np.float32
    for out in (ref, got):
        same_bits(out[5], y)
        same_bits(out[6], z)
        same_bits(out[7], (h.astype(f32).astype(BF) + ii.astype(f32).astype(BF))
                  + u.astype(f32).astype(BF))
        np.testing.assert_array_equal(out[8], y.astype(f32) + z.astype(f32))
        np.testing.assert_array_equal(out[9], y.astype(f32).astype(np.float16))
        zz = (z * BF(100)).astype(f32)
        np.testing.assert_array_equal(out[10], zz.astype(np.int32) + (y != 0).astype(np.int32))


def test_math_intrinsics() -> None:
    n = 200
    A = td.placeholder((n,), "bfloat16", name="A")
    B = td.compute((n,), lambda i: td.sqrt(td.abs(A[i])) - td.floor(A[i]), name="B")
    E = td.compute((n,), lambda i: td.exp(A[i]), name="E")
    s = td.create_schedule([B.op, E.op])
    bind1d(s, B)
    bind1d(s, E)
    a = np.random.default_rng(2).standard_normal(n).astype(BF)
    f32 = np.float32
    want_b = np.sqrt(np.abs(a).astype(f32)).astype(BF) - np.floor(a)
    ref, got, _ = emulate(s, [A, B, E], [a, np.empty(n, BF), np.empty(n, BF)])
    for out in (ref, got):
        same_bits(out[1], want_b)
        # exp: float32 libm results may differ by an ulp before rounding to bfloat16
        np.testing.assert_allclose(out[2].astype(f32), np.exp(a.astype(f32)), rtol=2 ** -7)


@pytest.mark.parametrize("n, k", [(64, 70), (37, 33)])
def test_reductions_bf16_and_float32_accumulators(n: int, k: int) -> None:
    """A row sum per thread (the loop over k sequential, bits match NumPy's sequential
    bfloat16 sum), the same in a float32 accumulator, and a max through shared memory."""
    A = td.placeholder((n, k), "bfloat16", name="A")
    r = td.reduce_axis((0, k), name="r")
    S16 = td.compute((n,), lambda i: td.sum(A[i, r], axis=r), name="S16")
    r2 = td.reduce_axis((0, k), name="r2")
    S32 = td.compute((n,), lambda i: td.sum(A[i, r2].astype("float32"), axis=r2), name="S32")
    r3 = td.reduce_axis((0, k), name="r3")
    M = td.compute((n,), lambda i: td.max(A[i, r3], axis=r3), name="M")
    s = td.create_schedule([S16.op, S32.op, M.op])
    bind1d(s, S16, 32)
    bind1d(s, S32, 16)
    # M: one block per row, the row staged in shared memory, thread 0 reduces it
    AS = s.cache_read(A, "shared", [M])
    s[M].bind(M.op.axis[0], td.thread_axis("blockIdx.x"))
    s[AS].compute_at(s[M], M.op.axis[0])
    fo, fi = s[AS].split(s[AS].op.axis[1], factor=32)
    s[AS].bind(fi, td.thread_axis("threadIdx.x"))
    a = np.random.default_rng(3).standard_normal((n, k)).astype(BF)
    want16 = np.zeros(n, BF)
    for j in range(k):   # sequential bfloat16 accumulation
        want16 = want16 + a[:, j]
    outs = [np.empty(n, BF), np.empty(n, np.float32), np.empty(n, BF)]
    ref, got, src = emulate(s, [A, S16, S32, M], [a, *outs])
    assert "__shared__ tdsl_shared<tdsl_bf16," in src
    for out in (ref, got):
        same_bits(out[1], want16)
        np.testing.assert_allclose(out[2], a.astype(np.float32).sum(1), rtol=1e-5, atol=1e-5)
        same_bits(out[3], a.max(1))


def test_cross_thread_reduction() -> None:
    """A reduction axis bound to threadIdx.x: bfloat16 partial sums combined in a
    shared-memory tree (the order differs from a sequential sum, so compared within
    bfloat16's precision), and a float32 accumulation of bfloat16 data."""
    n, k = 5, 100
    A = td.placeholder((n, k), "bfloat16", name="A")
    r = td.reduce_axis((0, k), name="r")
    S = td.compute((n,), lambda i: td.sum(A[i, r], axis=r), name="S")
    r2 = td.reduce_axis((0, k), name="r2")
    T = td.compute((n,), lambda i: td.sum(A[i, r2].astype("float32"), axis=r2), name="T")
    s = td.create_schedule([S.op, T.op])
    for st in (S, T):
        ko, ki = s[st].split(st.op.reduce_axis[0], factor=64)
        s[st].bind(st.op.axis[0], td.thread_axis("blockIdx.x"))
        s[st].bind(ki, td.thread_axis("threadIdx.x"))
    a = np.random.default_rng(4).uniform(0.5, 1.5, (n, k)).astype(BF)
    ref, got, _ = emulate(s, [A, S, T], [a, np.empty(n, BF), np.empty(n, np.float32)])
    exact = a.astype(np.float64).sum(1)
    np.testing.assert_allclose(got[1].astype(np.float32), exact, rtol=2 ** -6)
    np.testing.assert_allclose(got[2], exact, rtol=1e-5)


@pytest.mark.skipif(not nvrtc.is_available(), reason="NVRTC is not installed")
def test_ptx_uses_the_conversion_instruction_from_sm80() -> None:
    A = td.placeholder((256,), "float32", name="A")
    B = td.compute((256,), lambda i: A[i].astype("bfloat16"), name="B")
    s = td.create_schedule(B.op)
    bind1d(s, B)
    mod = td.build(s, [A, B], target="cuda")
    assert "cvt.rn.bf16.f32" in mod.ptx("sm_80") and "cvt.rn.bf16.f32" in mod.ptx("sm_90")
    assert "cvt.rn.bf16.f32" not in mod.ptx("sm_70")   # plain integer rounding there


@pytest.mark.parametrize("n", [256, 250])
def test_vectorized_loads_and_stores(n: int) -> None:
    """A vectorized loop of 4 (or 2) bfloat16 lanes: tdsl_bf164/tdsl_bf162 accesses where
    aligned, the scalar loop at the tail; bits as NumPy's."""
    A = td.placeholder((n,), "bfloat16", name="A")
    B = td.placeholder((n,), "bfloat16", name="B")
    C = td.compute((n,), lambda i: A[i] * B[i] - A[i], name="C")
    D = td.compute((n,), lambda i: A[i] + td.const(1, "bfloat16"), name="D")
    s = td.create_schedule([C.op, D.op])
    for st, lanes in ((C, 4), (D, 2)):
        o, v = s[st].split(st.op.axis[0], factor=lanes)
        bx, tx = s[st].split(o, factor=32)
        s[st].bind(bx, td.thread_axis("blockIdx.x"))
        s[st].bind(tx, td.thread_axis("threadIdx.x"))
        s[st].vectorize(v)
    rng = np.random.default_rng(n)
    a = rng.standard_normal(n).astype(BF)
    b = rng.standard_normal(n).astype(BF)
    ref, got, src = emulate(s, [A, B, C, D], [a, b, np.empty(n, BF), np.empty(n, BF)])
    assert "tdsl_vload<tdsl_bf164>" in src and "tdsl_vstore(" in src and "tdsl_bf162" in src
    for out in (ref, got):
        same_bits(out[2], a * b - a)
        same_bits(out[3], a + BF(1))
