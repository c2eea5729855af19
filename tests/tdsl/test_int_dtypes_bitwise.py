"""The integer dtypes int16/uint16/uint32/uint64 and the bit operations of ``tdsl.bitwise``:
wrapping arithmetic, division, comparisons, casts and bit operations against NumPy on
random data, through the interpreter, LLVM (scalar and vectorized) and the CUDA emulator."""
import numpy as np
import pytest

import tdsl as td
from tdsl import bitwise as bw
from tdsl.errors import DTypeError
from tdsl.interpreter import run

ALL_INTS = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
NEW_INTS = ["int16", "uint16", "uint32", "uint64"]


def _random(rng, dtype, n, lo=None, hi=None):
    info = np.iinfo(dtype)
    lo = info.min if lo is None else lo
    hi = info.max if hi is None else hi
    return rng.integers(lo, hi, size=n, dtype=dtype, endpoint=True)


def _all_backends(C, args, inputs, want, dtype, n):
    """Interpreter, LLVM (scalar, vectorized with a tail), CUDA emulator."""
    s = td.create_schedule(C.op)
    out = np.zeros(n, dtype)
    run(td.lower(s, args), *inputs, out)
    np.testing.assert_array_equal(out, want)
    out = np.zeros(n, dtype)
    td.build(s, args, target="llvm")(*inputs, out)
    np.testing.assert_array_equal(out, want)
    s = td.create_schedule(C.op)
    _, i = s[C].split(C.op.axis[0], factor=8)
    s[C].vectorize(i)
    out = np.zeros(n, dtype)
    td.build(s, args, target="llvm")(*inputs, out)
    np.testing.assert_array_equal(out, want)
    s = td.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=32)
    s[C].bind(bx, td.thread_axis("blockIdx.x"))
    s[C].bind(tx, td.thread_axis("threadIdx.x"))
    out = np.zeros(n, dtype)
    td.build(s, args, target="cuda").emulate(*inputs, out)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("dtype", NEW_INTS)
def test_new_int_dtypes_arithmetic_wraps_like_numpy(rng, dtype):
    n = 53
    A = td.placeholder((n,), dtype, name="A")
    B = td.placeholder((n,), dtype, name="B")
    C = td.compute((n,), lambda i: A[i] * B[i] + A[i] // B[i] - A[i] % B[i]
                   + td.max(A[i], B[i]), name="C")
    a = _random(rng, dtype, n)
    b = _random(rng, dtype, n, lo=1, hi=200)
    with np.errstate(over="ignore"):
        want = (a * b + a // b - a % b + np.maximum(a, b)).astype(dtype)
    _all_backends(C, [A, B, C], [a, b], want, dtype, n)


@pytest.mark.parametrize("dtype", NEW_INTS)
def test_new_int_dtypes_casts_and_compares(rng, dtype):
    n = 41
    X = td.placeholder((n,), "float32", name="X")
    A = td.placeholder((n,), dtype, name="A")
    C = td.compute((n,), lambda i: X[i].astype(dtype) + (A[i] < td.const(100, dtype)).astype(dtype)
                   + A[i].astype("int8").astype(dtype), name="C")
    info = np.iinfo(dtype)
    x = rng.uniform(0, min(info.max, 60000), size=n).astype("float32")
    a = _random(rng, dtype, n)
    with np.errstate(over="ignore"):
        want = (x.astype(dtype) + (a < 100).astype(dtype) + a.astype("int8").astype(dtype)
                ).astype(dtype)
    _all_backends(C, [X, A, C], [x, a], want, dtype, n)


@pytest.mark.parametrize("dtype", ALL_INTS)
def test_bit_operations_match_numpy(rng, dtype):
    n = 50
    bits = np.iinfo(dtype).bits
    A = td.placeholder((n,), dtype, name="A")
    B = td.placeholder((n,), dtype, name="B")
    S = td.placeholder((n,), dtype, name="S")
    C = td.compute((n,), lambda i: bw.bitwise_xor(bw.bitwise_and(A[i], B[i]),
                                                  bw.bitwise_or(A[i], bw.bitwise_not(B[i])))
                   + bw.shift_left(A[i], S[i]) + bw.shift_right(B[i], S[i]), name="C")
    a, b = _random(rng, dtype, n), _random(rng, dtype, n)
    sh = rng.integers(0, bits, size=n).astype(dtype)
    with np.errstate(over="ignore"):
        want = ((a & b) ^ (a | ~b)) + (a << sh) + (b >> sh)
    _all_backends(C, [A, B, S, C], [a, b, sh], want, dtype, n)


def test_bit_operations_with_constants_and_errors(rng):
    n = 20
    A = td.placeholder((n,), "uint32", name="A")
    C = td.compute((n,), lambda i: bw.shift_right(bw.bitwise_and(A[i], 0xFF00), 8), name="C")
    a = _random(rng, "uint32", n)
    _all_backends(C, [A, C], [a], (a & 0xFF00) >> 8, "uint32", n)
    F = td.placeholder((n,), "float32", name="F")
    with pytest.raises(DTypeError):
        bw.bitwise_and(F[0], F[1])
    with pytest.raises(DTypeError):
        bw.shift_left(A[0], F[0])


@pytest.mark.parametrize("dtype", ["int16", "uint16", "uint32"])
def test_float_to_unsigned_saturates_in_both_backends(rng, dtype):
    """A float below an integer dtype's range is its min (0 when unsigned) and one above it
    its max (docs/ir.md: float->int saturates); LLVM and the interpreter agree."""
    n = 30
    X = td.placeholder((n,), "float32", name="X")
    C = td.compute((n,), lambda i: X[i].astype(dtype), name="C")
    s = td.create_schedule(C.op)
    x = rng.uniform(-1000, 1000, size=n).astype("float32")
    x[:3] = [-0.5, 1e10, -1e10]
    info = np.iinfo(dtype)
    want = np.clip(np.trunc(x.astype("float64")), info.min, info.max).astype(dtype)
    out = np.zeros(n, dtype)
    td.build(s, [X, C], target="llvm")(x, out)
    np.testing.assert_array_equal(out, want)
    out = np.zeros(n, dtype)
    run(td.lower(s, [X, C]), x, out)
    np.testing.assert_array_equal(out, want)
