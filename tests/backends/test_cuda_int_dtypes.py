"""int16, uint16, uint32 and uint64 on CUDA: wrapping arithmetic, floor division of
negatives, bit operations, casts (to and from bfloat16 too), per-thread and cross-thread
reductions and shared-memory staging, emulated against NumPy on random data; NVRTC
compiles every source for sm_80 and sm_90."""
from __future__ import annotations

import shutil

import ml_dtypes
import numpy as np
import pytest

import tdsl as td
from tdsl import bitwise as bw
from tdsl import interpreter
from tdsl.backends.cuda import nvrtc

NEW_INTS = ["int16", "uint16", "uint32", "uint64"]

pytestmark = pytest.mark.skipif(shutil.which("g++") is None,
                                reason="g++ is not installed: the CUDA emulation harness needs it")


def rand(rng: np.random.Generator, dtype: str, shape, lo=None, hi=None) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min if lo is None else lo, info.max if hi is None else hi,
                        size=shape, dtype=dtype, endpoint=True)


def bind1d(s, st, factor: int = 32) -> None:
    o, i = s[st].split(st.op.axis[0], factor=factor)
    s[st].bind(o, td.thread_axis("blockIdx.x"))
    s[st].bind(i, td.thread_axis("threadIdx.x"))


def check(s, args, arrays, wants) -> str:
    """The interpreter and the emulation give ``wants`` (for the trailing outputs);
    NVRTC compiles the source.  Returns the source."""
    mod = td.build(s, args, target="cuda")
    for run in (lambda a: interpreter.run(td.lower(s, args), *a), lambda a: mod.emulate(*a)):
        got = [a.copy() for a in arrays]
        run(got)
        for out, want in zip(got[len(got) - len(wants):], wants):
            np.testing.assert_array_equal(out, want)
    src = mod.get_source()
    if nvrtc.is_available():
        for arch in ("sm_80", "sm_90"):
            nvrtc.compile_cuda(src, arch=arch)
    return src


@pytest.mark.parametrize("dtype", NEW_INTS)
def test_arithmetic_bits_and_casts(dtype: str) -> None:
    n = 77
    rng = np.random.default_rng(len(dtype))
    A = td.placeholder((n,), dtype, name="A")
    B = td.placeholder((n,), dtype, name="B")
    S = td.placeholder((n,), dtype, name="S")
    X = td.placeholder((n,), "bfloat16", name="X")
    C = td.compute((n,), lambda i: A[i] * B[i] - A[i] // B[i] + A[i] % B[i]
                   + td.min(A[i], B[i]), name="C")
    D = td.compute((n,), lambda i: bw.bitwise_xor(A[i], bw.shift_left(B[i], S[i]))
                   + bw.shift_right(A[i], S[i]) + bw.bitwise_not(B[i]), name="D")
    E = td.compute((n,), lambda i: X[i].astype(dtype) + (A[i] > B[i]).astype(dtype), name="E")
    F = td.compute((n,), lambda i: (A[i] % td.const(200, dtype)).astype("bfloat16"), name="F")
    s = td.create_schedule([C.op, D.op, E.op, F.op])
    for st in (C, D, E, F):
        bind1d(s, st)
    a = rand(rng, dtype, n)
    signed = np.iinfo(dtype).min < 0
    b = rand(rng, dtype, n, lo=-50 if signed else 1, hi=50)
    b[b == 0] = 3
    sh = rng.integers(0, np.iinfo(dtype).bits, n).astype(dtype)
    x = rng.uniform(0, 120, n).astype(ml_dtypes.bfloat16)
    with np.errstate(over="ignore"):
        want_c = a * b - a // b + a % b + np.minimum(a, b)
        want_d = (a ^ (b << sh)) + (a >> sh) + ~b
        want_e = x.astype(np.float32).astype(dtype) + (a > b).astype(dtype)
    want_f = (a % np.array(200, dtype)).astype(np.float32).astype(ml_dtypes.bfloat16)
    outs = [np.zeros(n, dtype), np.zeros(n, dtype), np.zeros(n, dtype),
            np.zeros(n, ml_dtypes.bfloat16)]
    src = check(s, [A, B, S, X, C, D, E, F], [a, b, sh, x, *outs],
                [want_c, want_d, want_e, want_f.view(np.uint16).view(ml_dtypes.bfloat16)])
    ctype = {"int16": "short", "uint16": "unsigned short", "uint32": "unsigned int",
             "uint64": "unsigned long long"}[dtype]
    assert f"const {ctype}* __restrict__ A" in src


@pytest.mark.parametrize("dtype", NEW_INTS)
def test_reductions_wrap_like_numpy(dtype: str) -> None:
    """A per-thread row sum, a cross-thread (threadIdx-bound) sum and max (integer sums
    wrap, so any order gives the same bits), and a row staged in shared memory."""
    n, k = 6, 100
    rng = np.random.default_rng(7)
    A = td.placeholder((n, k), dtype, name="A")
    r1, r2, r3 = (td.reduce_axis((0, k), name=f"r{j}") for j in range(3))
    S = td.compute((n,), lambda i: td.sum(A[i, r1], axis=r1), name="S")
    T = td.compute((n,), lambda i: td.sum(A[i, r2], axis=r2), name="T")
    M = td.compute((n,), lambda i: td.max(A[i, r3], axis=r3), name="M")
    s = td.create_schedule([S.op, T.op, M.op])
    bind1d(s, S, 4)
    ko, ki = s[T].split(T.op.reduce_axis[0], factor=32)
    s[T].bind(T.op.axis[0], td.thread_axis("blockIdx.x"))
    s[T].bind(ki, td.thread_axis("threadIdx.x"))
    AS = s.cache_read(A, "shared", [M])
    s[M].bind(M.op.axis[0], td.thread_axis("blockIdx.x"))
    s[AS].compute_at(s[M], M.op.axis[0])
    _, fi = s[AS].split(s[AS].op.axis[1], factor=32)
    s[AS].bind(fi, td.thread_axis("threadIdx.x"))
    a = rand(rng, dtype, (n, k))
    with np.errstate(over="ignore"):
        want = a.sum(1, dtype=dtype)
    src = check(s, [A, S, T, M], [a, *(np.zeros(n, dtype) for _ in range(3))],
                [want, want, a.max(1)])
    assert "__shared__ tdsl_shared<" in src
