"""Inline float32 math of the LLVM backend (backends/llvm/vecmath.py).

Each function is measured against a float64 NumPy reference over a dense sweep of the
float32 bit patterns (every 1025th one: ~4.2 million finite values of both signs,
subnormals included) plus special values, as a widened vector loop and as a scalar loop,
and the maximum error must stay within the bound documented in backends/llvm/README.md
(``vecmath.MAX_ULP``).  Special values (NaN, ±inf, ±0) must match exactly, signs included.
"""
from __future__ import annotations

import math
import pathlib
import re

import numpy as np
import pytest

import tdsl as td
from tdsl.backends.llvm import build
from tdsl.backends.llvm.vecmath import MAX_ULP, SINCOS_LIMIT
from tdsl.expr import call

try:
    from .llvm_irbuild import elementwise, vector_elementwise
except ImportError:  # run as a plain script directory
    from llvm_irbuild import elementwise, vector_elementwise


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TDSL_CACHE_DIR", str(tmp_path / "cache"))


def _erf64(x: np.ndarray) -> np.ndarray:
    try:
        from scipy.special import erf
        return erf(x)
    except ImportError:
        return np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64)


def _sigmoid64(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


REF64 = {"exp": np.exp, "log": np.log, "tanh": np.tanh, "erf": _erf64,
         "sigmoid": _sigmoid64, "sin": np.sin, "cos": np.cos}

SPECIALS = np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.1754942e-38,
                       -1.1754942e-38, 1.1754944e-38, 3.4028235e38, -3.4028235e38, 1.0, -1.0,
                       88.72283, 88.72284, 89.0, -87.3, -103.9, -104.0, -200.0, 0.625,
                       -0.625, 3.92, 3.95, 9.5, -9.5, 65536.0, 65537.0, 1e10, -1e10])


def sweep(step: int = 1025) -> np.ndarray:
    """Every ``step``-th float32 bit pattern (finite ones), plus the special values."""
    x = np.arange(0, 2 ** 32, step, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return np.concatenate([x[np.isfinite(x)], SPECIALS])


def ulp_error(y: np.ndarray, ref64: np.ndarray) -> np.ndarray:
    """|y - ref| in units of the last place of the float32-rounded reference; results
    that equal the rounded reference (same sign) count 0, NaN must match NaN, and a
    wrong sign of a zero or an infinity is an infinite error."""
    with np.errstate(all="ignore"):
        ref = ref64.astype(np.float32)
        same = (y == ref) & (np.signbit(y) == np.signbit(ref))
        e = np.abs(y.astype(np.float64) - ref64) / np.spacing(np.abs(ref)).astype(np.float64)
    e[np.isnan(e)] = np.inf
    e[same | (np.isnan(y) & np.isnan(ref))] = 0.0
    e[(y == ref) & (np.signbit(y) != np.signbit(ref))] = np.inf
    return e


def kernel(name: str, kind: str, nin: int = 1):
    fn = (lambda *v: call(name, *v))
    if kind == "vector":
        f = vector_elementwise(f"vm_{name}", "float32", fn, nin, lanes=8)
    else:
        f = elementwise(f"vm_{name}", "float32", fn, nin)
    return build(f)


def _worst(e: np.ndarray, x: np.ndarray, y: np.ndarray, ref: np.ndarray) -> str:
    i = int(np.argmax(e))
    return f"{e[i]:.3f} ulp at x={x[i]!r}: got {y[i]!r}, reference {ref[i]!r}"


@pytest.mark.parametrize("kind", ["vector", "serial"])
@pytest.mark.parametrize("name", list(REF64))
def test_unary_max_ulp_over_float32_sweep(name, kind):
    x = sweep()
    y = np.full_like(x, 7.0)
    kernel(name, kind)(x, y)
    with np.errstate(all="ignore"):
        ref = REF64[name](x.astype(np.float64))
    e = ulp_error(y, ref)
    assert e.max() <= MAX_ULP[name], _worst(e, x, y, ref)


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_sincos_near_multiples_of_half_pi(name):
    """Cody-Waite reduction where it cancels most: the floats nearest k·π/2."""
    k = np.arange(1, int(SINCOS_LIMIT * 2 / np.pi) + 2, 7, dtype=np.float64)
    bits = (k * np.pi / 2).astype(np.float32).view(np.int32)[:, None] + np.arange(-4, 5)
    x = bits.astype(np.int32).ravel().view(np.float32)
    x = np.concatenate([x, -x])
    y = np.empty_like(x)
    kernel(name, "vector")(x, y)
    ref = getattr(np, name)(x.astype(np.float64))
    e = ulp_error(y, ref)
    assert e.max() <= MAX_ULP[name], _worst(e, x, y, ref)


@pytest.mark.parametrize("name", list(REF64))
def test_special_values_match_numpy_float32(name):
    """inf, nan, signed zeros, overflow and underflow as NumPy's float32 loops give."""
    x = SPECIALS
    y = np.empty_like(x)
    kernel(name, "vector")(x, y)
    with np.errstate(all="ignore"):
        ref = REF64[name](x.astype(np.float64)).astype(np.float32)
    exact = ~np.isfinite(ref) | (ref == 0) | ~np.isfinite(x) | (x == 0)
    np.testing.assert_array_equal(y[exact], ref[exact])
    # a NaN's sign is unspecified (NumPy's own differs between its SIMD paths and CPUs)
    signed = exact & ~np.isnan(ref)
    assert (np.signbit(y[signed]) == np.signbit(ref[signed])).all()


POW_SPECIALS = np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.0, -2.0, 0.5,
                           -0.5, 3.0, -3.0, 1e-45, -1e-45, 2.0 ** 24, -(2.0 ** 24),
                           2.0 ** 24 + 2, 1e30, -1e30, 127.0, 128.0, -149.0, -150.0, 0.3,
                           -7.5])


@pytest.mark.parametrize("kind", ["vector", "serial"])
def test_pow_special_cases_are_numpys(kind):
    xs, ys = (a.ravel() for a in np.meshgrid(POW_SPECIALS, POW_SPECIALS))
    out = np.empty_like(xs)
    kernel("pow", kind, nin=2)(xs, ys, out)
    with np.errstate(all="ignore"):
        # rounded from float64: NumPy's own float32 pow differs by an ulp between CPUs (its
        # AVX-512 loops give 9.999999e-31 for 1e30 ** -1)
        ref = np.power(xs.astype(np.float64), ys.astype(np.float64)).astype(np.float32)
    same = ((out == ref) & (np.signbit(out) == np.signbit(ref))) | (np.isnan(out) & np.isnan(ref))
    bad = [(xs[i], ys[i], out[i], ref[i]) for i in np.nonzero(~same)[0][:8]]
    assert not bad, bad


@pytest.mark.parametrize("kind", ["vector", "serial"])
def test_pow_max_ulp(kind):
    rng = np.random.default_rng(5)
    n = 1 << 20
    x = np.abs(rng.standard_normal(n)).astype(np.float32) * \
        np.exp2(rng.uniform(-140, 120, n)).astype(np.float32)
    y = (rng.standard_normal(n) * np.exp2(rng.uniform(-12, 7, n))).astype(np.float32)
    neg = rng.random(n) < 0.3                     # negative bases with integer exponents
    x[neg], y[neg] = -x[neg], np.round(y[neg])
    out = np.empty_like(x)
    kernel("pow", kind, nin=2)(x, y, out)
    with np.errstate(all="ignore"):
        ref = np.power(x.astype(np.float64), y.astype(np.float64))
    e = ulp_error(out, ref)
    assert e.max() <= MAX_ULP["pow"], _worst(e, x, out, ref)


def test_float16_goes_through_float32_and_rounds():
    x = sweep(1 << 16).astype(np.float16)
    x = x[np.isfinite(x) | np.isnan(x)]
    for name in ("exp", "tanh", "erf", "sin", "log"):
        f = build(vector_elementwise(f"h_{name}", "float16", lambda v: call(name, v), 1,
                                     lanes=8))
        y = np.empty_like(x)
        f(x, y)
        with np.errstate(all="ignore"):
            ref = REF64[name](x.astype(np.float64))
        r16 = ref.astype(np.float16)
        ok = (y == r16) | (np.isnan(y) & np.isnan(r16)) | \
            (np.abs(y.astype(np.float64) - ref) <= np.spacing(np.abs(r16)).astype(np.float64))
        assert ok.all(), (name, x[~ok][:4], y[~ok][:4], r16[~ok][:4])


# ---- opt-out and notes ---------------------------------------------------------------------------
def _te_kernel(name: str, dtype: str, n: int = 67, inline: "bool | None" = None):
    A = td.placeholder((n,), dtype, name="A")
    B = td.compute((n,), lambda i: getattr(td, name)(A[i]), name="B")
    s = td.create_schedule(B.op)
    _, inner = s[B].split(B.op.axis[0], factor=8)
    s[B].vectorize(inner)
    f = td.lower(s, [A, B], name=f"te_{name}_{dtype}")
    if inline is not None:
        f.attrs["fast_math_intrinsics"] = inline
    return f, A, B


@pytest.mark.parametrize("name", ["tanh", "erf", "log", "sin", "exp", "sigmoid"])
def test_opt_out_calls_libm_and_default_does_not(name):
    f, _, _ = _te_kernel(name, "float32")
    default = build(f)
    assert not re.search(r"call float @(tanhf|erff|logf|sinf|expf)\(", default.compiled.ir_text)
    assert not any("libm call per lane" in n for n in default.notes)
    f_out, _, _ = _te_kernel(name, "float32", inline=False)
    libm = build(f_out)
    assert any("one libm call per lane" in n for n in libm.notes), libm.notes
    x = (np.random.default_rng(2).standard_normal(67) * 3).astype("float32")
    if name == "log":
        x = np.abs(x) + np.float32(0.01)
    y1, y2 = np.empty_like(x), np.empty_like(x)
    default(x, y1)
    libm(x, y2)
    with np.errstate(all="ignore"):
        ref = REF64[name](x.astype(np.float64))
    assert ulp_error(y1, ref).max() <= MAX_ULP[name]
    assert ulp_error(y2, ref).max() <= 3.0          # glibc (tanhf: 2 ulp), sigmoid's formula


def test_notes_name_scalarized_libm_calls_in_vectorized_loops():
    f, _, _ = _te_kernel("erf", "float64", inline=False)
    notes = build(f).notes
    assert any(n.startswith("erf (float64) in vectorized loop 'i.inner' of stage 'B'")
               and "one libm call per lane" in n for n in notes), notes


@pytest.mark.parametrize("n", [64, 67, 3])
def test_gelu_epilogue_matches_interpreter(n):
    """A GELU (erf) and tanh-GELU through td.build, vs the interpreter and NumPy."""
    from tdsl.interpreter import run
    A = td.placeholder((n,), "float32", name="A")
    G = td.compute((n,), lambda i: A[i] * 0.5 * (1.0 + td.erf(A[i] * 0.70710678)), name="G")
    T = td.compute((n,), lambda i: G[i] * 0.5 * (1.0 + td.tanh(G[i] * 0.79788456)), name="T")
    s = td.create_schedule(T.op)
    s[G].compute_inline()
    _, inner = s[T].split(T.op.axis[0], factor=16)
    s[T].vectorize(inner)
    x = (np.random.default_rng(n).standard_normal(n) * 3).astype("float32")
    y_llvm, y_ref = np.empty_like(x), np.empty_like(x)
    td.build(s, [A, T], target="llvm")(x, y_llvm)
    run(td.lower(s, [A, T]), x, y_ref)
    np.testing.assert_allclose(y_llvm, y_ref, rtol=2e-6, atol=1e-7)


def test_readme_documents_the_asserted_bounds():
    readme = pathlib.Path(__file__).parents[2] / "backends" / "llvm" / "README.md"
    text = readme.read_text()
    for name, bound in MAX_ULP.items():
        assert re.search(rf"\|\s*`{name}`\s*\|\s*{bound}\s*\|", text), name
