"""Fit the float64 ``erf`` polynomials of ``backends/llvm/vecmath.py`` (``ERF64_*``).

For 0.75 <= |x| < 6, erf is a polynomial in ``t = |x| - mid`` on each of two intervals:
a Chebyshev fit at 40 digits (``mpmath.chebyfit``) of the interval's erf, converted to
powers of t and rounded to float64; the degree is the least that keeps the fit's absolute
error below 2e-17 (a sixth of float64's ulp at 1).  Prints the tables as Python source.
(|x| < 0.75 uses the Maclaurin series, computed in vecmath.py itself.)

Run: ``python scripts/fit_vecmath64.py``  (a few seconds; needs mpmath)
"""
from __future__ import annotations

import mpmath as mp

#: (lo, hi) of each interval; erf rounds to 1 in float64 from 5.92 on
INTERVALS = ((0.75, 2.5), (2.5, 6.0))


def fit(lo: float, hi: float, tol: float = 2e-17) -> tuple[float, list[float], float]:
    mid, h = (lo + hi) / 2, (hi - lo) / 2
    for n in range(8, 30):
        c, err = mp.chebyfit(lambda t: mp.erf(t + mid), [-h, h], n, error=True)
        if err < tol:
            return mid, [float(v) for v in c], float(err)
    raise RuntimeError(f"no fit on [{lo}, {hi}]")


def main() -> None:
    mp.mp.dps = 40
    fits = [fit(lo, hi) for lo, hi in INTERVALS]
    deg = max(len(c) for _, c, _ in fits)
    print("ERF64_BREAKS = " + repr(tuple(lo for lo, _ in INTERVALS[1:])))
    print("ERF64_MIDS = " + repr(tuple(m for m, _, _ in fits)))
    print("ERF64_LARGE = (")
    for (m, c, err), (lo, hi) in zip(fits, INTERVALS):
        c = [0.0] * (deg - len(c)) + c                 # highest degree first, zero-padded
        print(f"    # [{lo}, {hi}): fit error {err:.1e}")
        print("    (" + ", ".join(repr(v) for v in c) + "),")
    print(")")


if __name__ == "__main__":
    main()
