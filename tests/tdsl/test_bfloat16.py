"""bfloat16: 16 bits in memory, each operation computed in float32 and rounded to nearest
even (``ml_dtypes.bfloat16``'s arithmetic), the same bits from the interpreter and LLVM."""
import ml_dtypes
import numpy as np
import pytest

import tdsl as td
from tdsl.dtype import DType, as_dtype

BF = ml_dtypes.bfloat16


def bits(x):
    return np.asarray(x).view(np.uint16)


def same_bits(got, want):
    """Equal bit patterns, any NaN matching any NaN."""
    g, w = np.asarray(got, np.float32), np.asarray(want, np.float32)
    nan = np.isnan(w)
    assert np.array_equal(np.isnan(g), nan)
    np.testing.assert_array_equal(bits(np.asarray(got)[~nan]), bits(np.asarray(want)[~nan]))


def run_both(s, args, arrays):
    """Run through the interpreter and LLVM; return the two sets of outputs."""
    a1 = [a.copy() for a in arrays]
    td.interpreter.run(td.lower(s, args), *a1)
    a2 = [a.copy() for a in arrays]
    td.build(s, args, target="llvm")(*a2)
    return a1, a2


def test_dtype_properties():
    d = as_dtype("bfloat16")
    assert d is DType.BFLOAT16 and d.is_float and d.bits == 16 and d.itemsize == 2
    assert d.numpy == np.dtype(BF)
    assert as_dtype(BF) is DType.BFLOAT16


@pytest.mark.parametrize("n", [37, 64])
def test_elementwise_rounds_each_operation(n):
    m = td.var("m")
    A = td.placeholder((m,), "bfloat16", name="A")
    B = td.placeholder((m,), "bfloat16", name="B")
    C = td.compute((m,), lambda i: A[i] * B[i] + A[i] / B[i] - td.const(0.3, "bfloat16"),
                   name="C")
    s = td.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=16)
    s[C].vectorize(xi)
    rng = np.random.default_rng(n)
    a = rng.standard_normal(n).astype(BF)
    b = (rng.standard_normal(n) + 3).astype(BF)
    want = a * b + a / b - BF(0.3)
    c = np.empty(n, BF)
    for out in run_both(s, [A, B, C], [a, b, c]):
        same_bits(out[2], want)


def test_casts_round_to_nearest_even():
    n = 200
    X = td.placeholder((n,), "float32", name="X")
    D = td.placeholder((n,), "float64", name="D")
    Y = td.compute((n,), lambda i: X[i].astype("bfloat16"), name="Y")
    Z = td.compute((n,), lambda i: D[i].astype("bfloat16"), name="Z")
    W = td.compute((n,), lambda i: Y[i].astype("float32") + Z[i].astype("float64").astype(
        "float32"), name="W")
    I = td.compute((n,), lambda i: (Z[i] * td.const(100, "bfloat16")).astype("int32"), name="I")
    s = td.create_schedule([W.op, I.op])
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(n) * 10).astype(np.float32)
    # ties (halfway between two bfloat16 values), infinities, NaN, tiny and huge values
    x[:8] = np.array([0x3F808000, 0x3F818000, 0x7F800000, 0xFF800000, 0x7FC00001,
                      0x00000001, 0x7F7FFFFF, 0x80000000], np.uint32).view(np.float32)
    d = rng.standard_normal(n) * 1e3
    y, z = np.empty(n, BF), np.empty(n, BF)
    w, ii = np.empty(n, np.float32), np.empty(n, np.int32)
    for out in run_both(s, [X, D, Y, Z, W, I], [x, d, y, z, w, ii]):
        same_bits(out[2], x.astype(BF))
        same_bits(out[3], d.astype(np.float32).astype(BF))
        np.testing.assert_array_equal(out[4], x.astype(BF).astype(np.float32)
                                      + d.astype(np.float32).astype(BF).astype(np.float32))
        zb = d.astype(np.float32).astype(BF)
        np.testing.assert_array_equal(out[5], (zb * BF(100)).astype(np.float32).astype(np.int32))


def test_math_intrinsics():
    n = 50
    A = td.placeholder((n,), "bfloat16", name="A")
    B = td.compute((n,), lambda i: td.exp(A[i]) + td.sqrt(td.abs(A[i])) - td.floor(A[i]),
                   name="B")
    s = td.create_schedule(B.op)
    a = np.random.default_rng(2).standard_normal(n).astype(BF)
    f32 = np.float32
    want = (np.exp(a.astype(f32)).astype(BF) + np.sqrt(np.abs(a).astype(f32)).astype(BF)) \
        - np.floor(a)
    b = np.empty(n, BF)
    for out in run_both(s, [A, B], [a, b]):
        same_bits(out[1], want)


def test_reduction_float32_accumulator_and_bf16_accumulator():
    n, k = 13, 70
    A = td.placeholder((n, k), "bfloat16", name="A")
    r = td.reduce_axis((0, k), name="r")
    S32 = td.compute((n,), lambda i: td.sum(A[i, r].astype("float32"), axis=r), name="S32")
    r2 = td.reduce_axis((0, k), name="r2")
    S16 = td.compute((n,), lambda i: td.sum(A[i, r2], axis=r2), name="S16")
    s = td.create_schedule([S32.op, S16.op])
    a = np.random.default_rng(3).standard_normal((n, k)).astype(BF)
    want16 = np.zeros(n, BF)
    for j in range(k):   # sequential bfloat16 accumulation
        want16 = want16 + a[:, j]
    s32, s16 = np.empty(n, np.float32), np.empty(n, BF)
    for out in run_both(s, [A, S32, S16], [a, s32, s16]):
        np.testing.assert_allclose(out[1], a.astype(np.float32).sum(1), rtol=1e-5, atol=1e-5)
        same_bits(out[2], want16)


def test_export_header_names_bfloat16_as_uint16(tmp_path):
    A = td.placeholder((4,), "bfloat16", name="A")
    B = td.compute((4,), lambda i: A[i] + A[i], name="B")
    f = td.build(td.create_schedule(B.op), [A, B], target="llvm")
    a = np.arange(4).astype(BF)
    b = np.empty(4, BF)
    f(a, b)
    same_bits(b, a + a)


def test_cuda_builds_bfloat16():
    """CUDA stores bfloat16 as ``tdsl_bf16`` (tests/backends/test_cuda_bfloat16.py checks
    its arithmetic under emulation)."""
    A = td.placeholder((64,), "bfloat16", name="A")
    B = td.compute((64,), lambda i: A[i] + A[i], name="B")
    s = td.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(bx, td.thread_axis("blockIdx.x"))
    s[B].bind(tx, td.thread_axis("threadIdx.x"))
    assert "tdsl_bf16* __restrict__ B" in td.build(s, [A, B], target="cuda").get_source()


@pytest.mark.parametrize("dtype", ["int64", "uint64", "uint32", "int16"])
def test_integer_to_bfloat16_rounds_through_float32(dtype):
    """An integer converts to float32 (round to nearest even), then to bfloat16, as
    ml_dtypes does: 2**24 + 2**16 + 1 gives 2**24, not 2**24 + 2**17; uint64 values above
    2**63 convert too (the interpreter once passed them to ml_dtypes as Python ints)."""
    n = 40
    A = td.placeholder((n,), dtype, name="A")
    B = td.compute((n,), lambda i: A[i].astype("bfloat16"), name="B")
    s = td.create_schedule(B.op)
    info = np.iinfo(dtype)
    a = np.random.default_rng(7).integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    if info.bits == 64:
        a[:3] = np.array([(1 << 24) + (1 << 16) + 1, info.max, info.max - (1 << 40)], dtype)
    want = a.astype(np.float32).astype(BF)
    for out in run_both(s, [A, B], [a, np.empty(n, BF)]):
        same_bits(out[1], want)
    bx, tx = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(bx, td.thread_axis("blockIdx.x"))
    s[B].bind(tx, td.thread_axis("threadIdx.x"))
    got = np.empty(n, BF)
    td.build(s, [A, B], target="cuda").emulate(a, got)
    same_bits(got, want)
