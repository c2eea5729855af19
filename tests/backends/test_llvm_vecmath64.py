"""Inline float64 math of the LLVM backend (backends/llvm/vecmath.py, ``*64`` functions).

Each function is measured against mpmath (60 significant digits) on random float64 bit
patterns of both signs over the whole range (subnormals included), plus points where
range reduction is hardest, as a widened vector loop and as a scalar loop; the maximum
error must stay within ``vecmath.MAX_ULP64`` (documented in backends/llvm/README.md).
Special values (NaN, ±inf, ±0, overflow, underflow) must be NumPy's, signs included.
"""
from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

import tdsl as td
from tdsl.backends.llvm import build
from tdsl.backends.llvm.vecmath import MAX_ULP64, SINCOS_LIMIT64
from tdsl.expr import call

try:
    from .llvm_irbuild import elementwise, vector_elementwise
except ImportError:  # run as a plain script directory
    from llvm_irbuild import elementwise, vector_elementwise

mpmath = pytest.importorskip("mpmath")

UNARY64 = [n for n in MAX_ULP64 if n != "pow"]


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TDSL_CACHE_DIR", str(tmp_path / "cache"))


def _mp(name):
    f = {"exp": mpmath.exp, "log": mpmath.log, "tanh": mpmath.tanh, "sin": mpmath.sin,
         "cos": mpmath.cos, "sigmoid": lambda v: 1 / (1 + mpmath.exp(-v)),
         "erf": mpmath.erf}[name]
    return f


def reference(name: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(exact value rounded to float64, its error from the exact value in float64 ulps
    of itself — a correction term), via mpmath at 60 digits; finite x only."""
    f = _mp(name)
    out = np.empty(len(x))
    corr = np.empty(len(x))
    with mpmath.workdps(60):
        for i, v in enumerate(x.tolist()):
            e = f(mpmath.mpf(v))
            r = float(e)
            out[i] = r
            corr[i] = float(e - mpmath.mpf(r)) if np.isfinite(r) else 0.0
    return out, corr


def ulp_error(y: np.ndarray, ref: np.ndarray, corr: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        e = np.abs((y - ref) - corr) / np.spacing(np.abs(ref))
    same = (y == ref) & (np.signbit(y) == np.signbit(ref))
    e[np.isnan(e)] = np.inf
    e[same] = np.minimum(e[same], 0.5)
    return e


SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324,
                     2.2250738585072009e-308, -2.2250738585072009e-308, 2.2250738585072014e-308,
                     1.7976931348623157e308, -1.7976931348623157e308, 1.0, -1.0,
                     709.782712893383, 709.782712893385, 710.0, -708.4, -745.13, -745.14,
                     -745.2, -746.0, -1000.0, 2.0 ** -28, -(2.0 ** -29), 19.0, -20.5, 40.0,
                     1048576.0, 1048577.0, 1e300, -1e300])


def sample(name: str, n: int = 6000, seed: int = 0) -> np.ndarray:
    """Random bit patterns (uniform over exponents, both signs, subnormals included),
    values in the function's interesting range, and for sin/cos the floats nearest k·π/2."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2 ** 63, n, dtype=np.int64).view(np.uint64)
    bits |= (rng.random(n) < 0.5).astype(np.uint64) << np.uint64(63)
    x = bits.view(np.float64)
    x = x[np.isfinite(x)]
    near = rng.uniform(-1, 1, n) * {"exp": 750, "log": 4, "tanh": 25, "sigmoid": 750,
                                     "sin": 40, "cos": 40, "erf": 7}[name]
    if name == "log":
        near = np.abs(near)
    parts = [x, near, rng.uniform(-1, 1, n) * 1e-3]
    if name == "erf":     # each side of every interval's break
        from tdsl.backends.llvm.vecmath import ERF64_BREAKS, ERF64_ONE, ERF64_SMALL_LIMIT
        edges = np.array((ERF64_SMALL_LIMIT,) + ERF64_BREAKS + (ERF64_ONE,))
        around = (edges.view(np.int64)[:, None] + np.arange(-3, 4)).ravel().view(np.float64)
        parts += [around, -around]
    if name in ("sin", "cos"):
        k = np.arange(1, int(SINCOS_LIMIT64 * 2 / np.pi), 997, dtype=np.float64)
        kx = (k * np.pi / 2).view(np.int64)[:, None] + np.arange(-2, 3)
        parts.append(kx.ravel().view(np.float64))
    x = np.concatenate(parts)
    if name in ("sin", "cos"):
        x = x[np.abs(x) <= SINCOS_LIMIT64]     # beyond: libm's lanes, not ours
    if name == "log":
        x = x[x > 0]                           # log(x < 0) = NaN: the special values' test
    return x


def kernel(name: str, kind: str):
    fn = (lambda v: call(name, v))
    if kind == "vector":
        f = vector_elementwise(f"vm64_{name}", "float64", fn, 1, lanes=4)
    else:
        f = elementwise(f"vm64_{name}", "float64", fn, 1)
    return build(f)


@pytest.mark.parametrize("kind", ["vector", "serial"])
@pytest.mark.parametrize("name", UNARY64)
def test_float64_max_ulp(name, kind):
    x = sample(name)
    y = np.full_like(x, 7.0)
    kernel(name, kind)(x, y)
    ref, corr = reference(name, x)
    e = ulp_error(y, ref, corr)
    i = int(np.argmax(e))
    assert e.max() <= MAX_ULP64[name], f"{e[i]:.3f} ulp at x={x[i]!r}: got {y[i]!r}, " \
                                       f"reference {ref[i]!r}"


def _np64(name: str, x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        if name == "sigmoid":          # the stable form (1/(1+e^-x) underflows early)
            e = np.exp(-np.abs(x))
            return np.where(x < 0, e, 1.0) / (1.0 + e)
        if name == "erf":
            try:
                from scipy.special import erf
            except ImportError:  # pragma: no cover
                import math
                erf = np.vectorize(math.erf)
            return erf(x)
        return getattr(np, name)(x)


@pytest.mark.parametrize("kind", ["vector", "serial"])
@pytest.mark.parametrize("name", UNARY64)
def test_float64_special_values_are_numpys(name, kind):
    x = SPECIALS
    y = np.empty_like(x)
    kernel(name, kind)(x, y)
    ref = _np64(name, x)
    exact = ~np.isfinite(ref) | (ref == 0) | ~np.isfinite(x) | (x == 0)
    np.testing.assert_array_equal(y[exact], ref[exact])
    signed = exact & ~np.isnan(ref)        # a NaN's sign is unspecified (NumPy's varies by CPU)
    assert (np.signbit(y[signed]) == np.signbit(ref[signed])).all()
    close = ~exact
    np.testing.assert_allclose(y[close], ref[close], rtol=1e-15)


def _te(name: str, inline: "bool | None" = None, n: int = 67):
    A = td.placeholder((n,), "float64", name="A")
    B = td.compute((n,), lambda i: getattr(td, name)(A[i]), name="B")
    s = td.create_schedule(B.op)
    _, inner = s[B].split(B.op.axis[0], factor=4)
    s[B].vectorize(inner)
    f = td.lower(s, [A, B], name=f"te64_{name}")
    if inline is not None:
        f.attrs["fast_math_intrinsics"] = inline
    return f, s, A, B


@pytest.mark.parametrize("name", ["exp", "log", "tanh", "sin", "cos", "sigmoid", "erf"])
def test_float64_inline_by_default_libm_on_opt_out(name):
    f, s, A, B = _te(name)
    default = build(f)
    assert not re.search(r"call double @(exp|log|tanh|sin|cos|erf)\(", default.compiled.ir_text) \
        or name in ("sin", "cos")       # sin/cos: libm only on the rare-lane branch
    assert not any("libm call per lane" in n for n in default.notes), default.notes
    f_out, _, _, _ = _te(name, inline=False)
    libm = build(f_out)
    if name != "sigmoid":              # sigmoid's libm form is exp + a division
        assert any("one libm call per lane" in n for n in libm.notes), libm.notes
    x = np.random.default_rng(3).standard_normal(67) * 5
    if name == "log":
        x = np.abs(x) + 1e-3
    y1, y2, y3 = np.empty_like(x), np.empty_like(x), np.empty_like(x)
    default(x, y1)
    libm(x, y2)
    from tdsl.interpreter import run
    run(td.lower(s, [A, B]), x, y3)
    np.testing.assert_allclose(y1, y2, rtol=1e-15, atol=1e-300)
    np.testing.assert_allclose(y1, y3, rtol=1e-15, atol=1e-300)


def _pow_kernel(kind: str):
    fn = (lambda a, c: call("pow", a, c))
    if kind == "vector":
        return build(vector_elementwise("vm64_pow", "float64", fn, 2, lanes=4))
    return build(elementwise("vm64_pow", "float64", fn, 2))


@pytest.mark.parametrize("kind", ["vector", "serial"])
def test_float64_pow_max_ulp(kind):
    """Random bases over the whole range (subnormals too) with moderate exponents, bases
    near 1 with large exponents (|y·log2 x| up to ~1100: the double-double product), and
    results down in the subnormals."""
    rng = np.random.default_rng(1)
    n = 2500
    x = np.concatenate([np.abs(rng.standard_normal(n)) * 10 ** rng.uniform(-5, 5, n),
                        rng.uniform(0.5, 2, n), np.exp(rng.uniform(-700, 700, n)),
                        -rng.uniform(0.1, 3, n), [5e-324, 2.2e-308, 1e-310, 2.0, 3.0]])
    y = np.concatenate([rng.standard_normal(n) * 10, rng.uniform(-2000, 2000, n),
                        rng.uniform(-1.0, 1.0, n), rng.integers(-50, 50, n).astype(float),
                        [0.5, 0.9, -0.3, -1074.5, -677.0]])
    out = np.full_like(x, 7.0)
    _pow_kernel(kind)(x, y, out)
    ref, corr = np.empty(len(x)), np.zeros(len(x))
    with mpmath.workdps(60):
        for i, (a, c) in enumerate(zip(x.tolist(), y.tolist())):
            e = mpmath.power(mpmath.mpf(a), mpmath.mpf(c))
            ref[i] = float(e)
            if np.isfinite(ref[i]) and ref[i] != 0:
                corr[i] = float(e - mpmath.mpf(ref[i]))
    e = ulp_error(out, ref, corr)
    i = int(np.argmax(e))
    assert e.max() <= MAX_ULP64["pow"], f"{e[i]:.3f} ulp at x={x[i]!r}, y={y[i]!r}: got " \
                                        f"{out[i]!r}, reference {ref[i]!r}"


@pytest.mark.parametrize("kind", ["vector", "serial"])
def test_float64_pow_special_values_are_numpys(kind):
    import itertools
    v = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, np.inf, -np.inf,
                  np.nan, 5e-324, -5e-324, 1e308, -1e308, 2.5, -2.5, 1e-300,
                  0.9999999999999999, 1.0000000000000002, 2.0 ** 53, 2.0 ** 53 + 2, 1075.0,
                  -1075.0, 1024.0, -1074.0, 0.3])
    x, y = (np.array(a) for a in zip(*itertools.product(v, v)))
    out = np.empty_like(x)
    _pow_kernel(kind)(x, y, out)
    with np.errstate(all="ignore"):
        ref = np.power(x, y)
    exact = ~np.isfinite(ref) | (ref == 0) | (ref == 1) | ~np.isfinite(x) | ~np.isfinite(y) \
        | (x == 0)
    np.testing.assert_array_equal(out[exact], ref[exact])
    signed = exact & ~np.isnan(ref)                # a NaN's sign is not specified
    assert (np.signbit(out[signed]) == np.signbit(ref[signed])).all()
    np.testing.assert_allclose(out[~exact], ref[~exact], rtol=4e-16)


def test_float64_pow_inline_by_default_libm_on_opt_out():
    def lowered(inline):
        A = td.placeholder((67,), "float64", name="A")
        B = td.compute((67,), lambda i: td.power(A[i], A[i] * 0.5), name="B")
        s = td.create_schedule(B.op)
        s[B].vectorize(s[B].split(B.op.axis[0], factor=4)[1])
        f = td.lower(s, [A, B], name=f"pow64_{inline}")
        if inline is not None:
            f.attrs["fast_math_intrinsics"] = inline
        return build(f)
    default, libm = lowered(None), lowered(False)
    assert not any(n.startswith("pow (float64)") for n in default.notes), default.notes
    assert not re.search(r"call double @(llvm\.)?pow", default.compiled.ir_text)
    assert any(n.startswith("pow (float64)") for n in libm.notes), libm.notes
    x = np.abs(np.random.default_rng(3).standard_normal(67)) * 5
    y1, y2 = np.empty_like(x), np.empty_like(x)
    default(x, y1)
    libm(x, y2)
    np.testing.assert_allclose(y1, y2, rtol=4e-16)


def test_readme_documents_the_float64_bounds():
    readme = pathlib.Path(__file__).parents[2] / "backends" / "llvm" / "README.md"
    text = readme.read_text()
    for name, bound in MAX_ULP64.items():
        assert re.search(rf"\|\s*`{name}` \(float64\)\s*\|\s*{bound}\s*\|", text), name
