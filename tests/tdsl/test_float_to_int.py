"""Float -> integer casts (docs/ir.md): truncate toward zero and saturate at the integer
dtype's range; NaN gives 0, +-inf the range's ends (0 is the minimum of unsigned dtypes).

A differential test over special values (NaN, infinities, the range's ends and their
neighbours, the float dtype's extremes) and random floats, for every float dtype and every
integer dtype: the interpreter, constant folding, LLVM (scalar and vectorized) and the CUDA
emulation against a reference written here with Python integers."""
from __future__ import annotations

import math
import shutil

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tdsl as td
from tdsl import interpreter
from tdsl.arith import const_fold
from tdsl.expr import Cast, Const

FLOATS = ["float16", "bfloat16", "float32", "float64"]
INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
N = 64          # values per kernel call: a multiple of no vector width used below plus a tail
N_SPECIAL = 40


def npd(d: str):
    return ml_dtypes.bfloat16 if d == "bfloat16" else np.dtype(d)


def saturate(x: float, dst: str) -> int:
    """The documented cast of one float, computed with Python integers."""
    info = np.iinfo(dst)
    if math.isnan(x):
        return 0
    if x == math.inf:
        return int(info.max)
    if x == -math.inf:
        return int(info.min)
    return min(max(int(x), int(info.min)), int(info.max))    # int() truncates toward zero


def specials(src: str, dst: str) -> np.ndarray:
    """Values at the edges of both dtypes, rounded to ``src``."""
    lo, hi = int(np.iinfo(dst).min), int(np.iinfo(dst).max)
    fmax = float(ml_dtypes.finfo(npd(src)).max)
    tiny = float(ml_dtypes.finfo(npd(src)).smallest_subnormal)
    vals = [math.nan, -math.nan, math.inf, -math.inf, 0.0, -0.0, 0.5, -0.5, 0.999, -0.999,
            1.0, -1.0, 1.5, -1.5, tiny, -tiny, fmax, -fmax, 1e20, -1e20,
            lo, hi, lo - 1, hi + 1, lo + 0.5, hi + 0.5, lo - 0.75, hi - 0.75, lo / 2, hi / 2,
            2.0 ** 31, -2.0 ** 31, 2.0 ** 63, -2.0 ** 63, 2.0 ** 64, 2.0 ** 32, 127.9, 128.0,
            -128.5, 255.5]
    assert len(vals) == N_SPECIAL
    with np.errstate(all="ignore"):
        return np.array(vals, np.float64).astype(npd(src))


def reference(a: np.ndarray, dst: str) -> np.ndarray:
    return np.array([saturate(float(x), dst) for x in a.astype(np.float64)], npd(dst))


class Kernels:
    """The cast compiled once per dtype pair: interpreter, LLVM, vectorized LLVM, CUDA."""

    def __init__(self, src: str, dst: str):
        A = td.placeholder((N,), src, name="A")
        C = td.compute((N,), lambda i: A[i].astype(dst), name="C")
        s = td.create_schedule(C.op)
        self.runs = {"interpreter": (lambda f: lambda *a: interpreter.run(f, *a))(
            td.lower(s, [A, C])), "llvm": td.build(s, [A, C], target="llvm")}
        sv = td.create_schedule(C.op)
        _, inner = sv[C].split(C.op.axis[0], factor=16)
        sv[C].vectorize(inner)
        self.runs["llvm vectorized"] = td.build(sv, [A, C], target="llvm")
        if shutil.which("g++") is not None:
            sc = td.create_schedule(C.op)
            bx, tx = sc[C].split(C.op.axis[0], factor=32)
            sc[C].bind(bx, td.thread_axis("blockIdx.x"))
            sc[C].bind(tx, td.thread_axis("threadIdx.x"))
            self.runs["cuda emulation"] = td.build(sc, [A, C], target="cuda").emulate
        self.dst = dst

    def check(self, a: np.ndarray) -> None:
        want = reference(a, self.dst)
        for what, run in self.runs.items():
            got = np.zeros(N, npd(self.dst))
            run(a, got)
            bad = got != want
            assert not bad.any(), f"{what}: {a[bad][:4]} -> {got[bad][:4]}, want {want[bad][:4]}"


def _floats(src: str):
    width = 64 if src == "float64" else 32
    edge = st.sampled_from([0.0, 1.0, 127.0, 255.0, 32767.0, 65535.0, 2.0 ** 31, 2.0 ** 32,
                            2.0 ** 63, 2.0 ** 64]).flatmap(
        lambda c: st.floats(c - 3, c + 3).flatmap(lambda v: st.sampled_from([v, -v])))
    return st.one_of(st.floats(width=width, allow_nan=True, allow_infinity=True),
                     st.floats(-1e6, 1e6, width=width), edge)


@pytest.mark.parametrize("dst", INTS)
@pytest.mark.parametrize("src", FLOATS)
def test_float_to_int_backends_agree_with_the_reference(src, dst):
    k = Kernels(src, dst)
    sp = specials(src, dst)
    k.check(np.concatenate([sp, sp[: N - N_SPECIAL]]))

    @settings(max_examples=8, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(_floats(src), min_size=N, max_size=N))
    def random_values(vals):
        with np.errstate(all="ignore"):
            k.check(np.array(vals, np.float64).astype(npd(src)))
    random_values()


@pytest.mark.parametrize("dst", INTS)
@pytest.mark.parametrize("src", FLOATS)
def test_constant_folding_saturates(src, dst):
    for x in specials(src, dst):
        folded = const_fold(Cast(Const(float(x), src), dst))
        assert isinstance(folded, Const), f"{x} -> {dst} did not fold"
        assert folded.value == saturate(float(x), dst), f"{x} -> {dst}: {folded.value}"


def test_constant_cast_in_a_kernel_matches_a_runtime_cast():
    """A folded cast (constant operand) and a run-time one give the same values."""
    A = td.placeholder((4,), "float32", name="A")
    vals = [math.nan, math.inf, -1e20, 300.7]
    C = td.compute((4,), lambda i: td.if_then_else(
        i == 0, td.const(vals[0], "float32"), td.if_then_else(
            i == 1, td.const(vals[1], "float32"), td.if_then_else(
                i == 2, td.const(vals[2], "float32"), td.const(vals[3], "float32"))))
        .astype("int8") * 1 + A[i].astype("int8") * 0, name="C")
    s = td.create_schedule(C.op)
    a = np.array([1.5, -2.5, 3.5, 4.5], np.float32)
    want = np.array([saturate(v, "int8") for v in vals], np.int8)
    got = np.zeros(4, np.int8)
    interpreter.run(td.lower(s, [A, C]), a, got)
    np.testing.assert_array_equal(got, want)
    got = np.zeros(4, np.int8)
    td.build(s, [A, C], target="llvm")(a, got)
    np.testing.assert_array_equal(got, want)
