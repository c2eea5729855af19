"""Casts between the float dtypes (float16, bfloat16, float32, float64, both directions) and
between integers and the 16-bit floats: the interpreter, LLVM (scalar and vectorized) and the
CUDA emulation give NumPy's/ml_dtypes' values (a bfloat16 from an integer or a float16 goes
through float32, docs/ir.md), and NVRTC compiles the CUDA source.  LLVM has no cast between
``half`` and ``bfloat`` (same width): the backend widens to float first."""
from __future__ import annotations

import shutil

import ml_dtypes
import numpy as np
import pytest

import tdsl as td
from tdsl import interpreter
from tdsl.backends.cuda import nvrtc

FLOATS = ["float16", "bfloat16", "float32", "float64"]
INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
N = 37          # not a multiple of the vector width or the block size

PAIRS = ([(s, d) for s in FLOATS for d in FLOATS if s != d]
         + [(i, f) for i in INTS for f in ("float16", "bfloat16")]
         + [(f, i) for i in INTS for f in ("float16", "bfloat16")])


def npd(d: str):
    return ml_dtypes.bfloat16 if d == "bfloat16" else np.dtype(d)


def source_values(rng: np.random.Generator, src: str, dst: str) -> np.ndarray:
    """Random values of ``src`` (in ``dst``'s range when it is an integer), with zeros,
    signs, values that round differently in the 16-bit formats, and inf/nan for floats."""
    if src in FLOATS:
        v = np.concatenate([rng.normal(size=N - 17) * 100, rng.uniform(-6e4, 6e4, 9),
                            [0.0, -0.0, 1 / 3, 65504.0, 1e-6, 3.1e-5, -2.5, 1e5]])
        if dst not in INTS:
            v[:3] = [np.inf, -np.inf, np.nan]
        with np.errstate(all="ignore"):
            v = v.astype(np.float32).astype(npd(src))
        if dst in INTS:          # in range after rounding to src (test_float_to_int: beyond)
            info = np.iinfo(dst)
            w = v.astype(np.float64)
            v[(w < info.min) | (w > info.max)] = 0
        return v
    info = np.iinfo(src)
    v = rng.integers(max(info.min, -2**40), min(info.max, 2**40), size=N, dtype=src,
                     endpoint=True)
    v[:4] = [0, 1, min(info.max, 65504), min(info.max, 65519)]
    return v


def reference(a: np.ndarray, src: str, dst: str) -> np.ndarray:
    with np.errstate(all="ignore"):
        if dst == "bfloat16" and src != "float64":
            return a.astype(np.float32).astype(ml_dtypes.bfloat16)
        return a.astype(npd(dst))


def _same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    g, w = got.astype(np.float64), want.astype(np.float64)
    bad = ~((g == w) | (np.isnan(g) & np.isnan(w)))
    assert not bad.any(), f"{what}: {got[bad][:4]} instead of {want[bad][:4]}"


def _stage(src: str, dst: str):
    A = td.placeholder((N,), src, name="A")
    C = td.compute((N,), lambda i: A[i].astype(dst), name="C")
    return A, C


@pytest.mark.parametrize("src,dst", PAIRS)
def test_cast_interpreter_and_llvm(rng, src, dst):
    A, C = _stage(src, dst)
    a = source_values(rng, src, dst)
    want = reference(a, src, dst)
    s = td.create_schedule(C.op)
    got = np.zeros(N, npd(dst))
    interpreter.run(td.lower(s, [A, C]), a, got)
    _same(got, want, "interpreter")
    got = np.zeros(N, npd(dst))
    td.build(s, [A, C], target="llvm")(a, got)
    _same(got, want, "llvm")
    sv = td.create_schedule(C.op)
    _, inner = sv[C].split(C.op.axis[0], factor=8)
    sv[C].vectorize(inner)
    got = np.zeros(N, npd(dst))
    td.build(sv, [A, C], target="llvm")(a, got)
    _same(got, want, "llvm vectorized")


@pytest.mark.skipif(shutil.which("g++") is None,
                    reason="g++ is not installed: the CUDA emulation harness needs it")
@pytest.mark.parametrize("src,dst", PAIRS)
def test_cast_cuda(rng, src, dst):
    A, C = _stage(src, dst)
    a = source_values(rng, src, dst)
    s = td.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=32)
    s[C].bind(bx, td.thread_axis("blockIdx.x"))
    s[C].bind(tx, td.thread_axis("threadIdx.x"))
    mod = td.build(s, [A, C], target="cuda")
    got = np.zeros(N, npd(dst))
    mod.emulate(a, got)
    _same(got, reference(a, src, dst), "cuda emulation")
    if nvrtc.is_available():
        nvrtc.compile_cuda(mod.get_source(), arch="sm_80")
