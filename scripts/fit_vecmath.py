"""Fit the float32 polynomial coefficients used by ``backends/llvm/vecmath.py``.

Near-minimax fits by Lawson's algorithm (iteratively reweighted least squares on a
dense grid, float64), with the weight chosen so that the *final* function's relative
error is what is equalized.  Prints each table as float32-rounded coefficients
(highest degree first, the order Horner's rule consumes them) and the fit's max
relative error.  References are NumPy/``math``/SciPy float64 functions.

Run: ``python scripts/fit_vecmath.py``  (a few seconds)
"""
from __future__ import annotations

import math

import numpy as np

try:  # erfc with full relative accuracy for large x
    from scipy.special import erfc as _erfc
except ImportError:  # pragma: no cover
    _erfc = np.vectorize(math.erfc)


def lawson(u: np.ndarray, target: np.ndarray, weight: np.ndarray, degree: int,
           iters: int = 300) -> np.ndarray:
    """Coefficients c (low degree first) minimizing max |weight * (sum c_k u^k - target)|."""
    v = np.vander(u, degree + 1, increasing=True)
    w = np.ones_like(u) / len(u)
    c = np.zeros(degree + 1)
    for _ in range(iters):
        sw = np.sqrt(w) * weight
        c, *_ = np.linalg.lstsq(v * sw[:, None], target * sw, rcond=None)
        err = np.abs(weight * (v @ c - target))
        w = w * err
        w /= w.sum()
    return c


def horner32(c: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Evaluate float32 coefficients (low first) by Horner with FMA, in float32."""
    u = u.astype(np.float32)
    p = np.full_like(u, c[-1], dtype=np.float32)
    for ck in c[-2::-1]:
        p = (p.astype(np.float64) * u + np.float64(ck)).astype(np.float32)
    return p


def show(name: str, c: np.ndarray, max_rel: float) -> None:
    c32 = [float(np.float32(v)) for v in c[::-1]]
    print(f"{name} = ({', '.join(f'{v:.9e}' for v in c32)})  # max rel fit error {max_rel:.2e}")


def fit_log() -> None:
    # log1p(f) = f - f^2/2 + f^3 * P(f),  f in [sqrt(1/2) - 1, sqrt(2) - 1]
    f = np.linspace(math.sqrt(0.5) - 1, math.sqrt(2) - 1, 40001)
    f = f[np.abs(f) > 1e-4]
    target = (np.log1p(f) - f + f * f / 2) / f ** 3
    weight = np.abs(f ** 3 / np.log1p(f))
    c = lawson(f, target, weight, 7)
    show("LOG_P", c, float(np.max(weight * np.abs(np.polyval(c[::-1], f) - target))))


def fit_tanh() -> None:
    # tanh(x) = x + x^3 * P(x^2), |x| <= 0.625
    x = np.linspace(1e-3, 0.625, 20001)
    u = x * x
    target = (np.tanh(x) - x) / x ** 3
    weight = x ** 3 / np.tanh(x)
    c = lawson(u, target, weight, 5)
    show("TANH_P", c, float(np.max(weight * np.abs(np.polyval(c[::-1], u) - target))))


def fit_erf() -> None:
    # erf(x) = x * P(x^2), |x| <= 1
    x = np.linspace(1e-4, 1.0, 20001)
    u = x * x
    ref = np.vectorize(math.erf)(x)
    target = ref / x
    weight = x / ref
    c = lawson(u, target, weight, 6)
    show("ERF_SMALL", c, float(np.max(weight * np.abs(np.polyval(c[::-1], u) - target))))
    # erf(x) = 1 - exp(Q(x - 2.5)),  1 <= x <= 3.95: Q ~ log(erfc(x)); the weight makes
    # the error relative to erf(x) (an error d in Q is a relative error d in erfc)
    x = np.linspace(1.0, 3.95, 20001)
    erfc = _erfc(x)
    target = np.log(erfc)
    weight = erfc / (1 - erfc)
    c = lawson(x - 2.5, target, weight, 6)   # fit error ~0.02 ulp; float32 rounding dominates
    show("ERF_LARGE", c, float(np.max(weight * np.abs(np.polyval(c[::-1], x - 2.5) - target))))


def fit_sincos() -> None:
    # sin r = r + r^3 * S(r^2), cos r = 1 - r^2/2 + r^4 * C(r^2), |r| <= pi/4
    r = np.linspace(1e-3, math.pi / 4 + 1e-3, 20001)
    u = r * r
    ts = (np.sin(r) - r) / r ** 3
    ws = r ** 3 / np.sin(r)
    c = lawson(u, ts, ws, 3)
    show("SIN_P", c, float(np.max(ws * np.abs(np.polyval(c[::-1], u) - ts))))
    tc = (np.cos(r) - 1 + u / 2) / r ** 4
    wc = r ** 4 / np.cos(r)
    c = lawson(u, tc, wc, 3)
    show("COS_P", c, float(np.max(wc * np.abs(np.polyval(c[::-1], u) - tc))))


if __name__ == "__main__":
    fit_log()
    fit_tanh()
    fit_erf()
    fit_sincos()
