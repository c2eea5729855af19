"""Throughput of float32 and float64 math in vectorized LLVM kernels: inline (vecmath) vs
libm vs NumPy.

    python benchmarks/bench_vecmath.py [--n 4194304] [--repeats 15] [--threads 1]

float32 rows for erf, tanh, log, sin, exp; float64 rows (``f64``, split by 4) for erf, tanh,
log, sin, exp.

For each function, ``B[i] = f(A[i])`` over ``n`` float32 elements, split by 8 with the
inner loop vectorized (outer loop parallel when ``--threads`` > 1), built twice: with the
default inline math and with ``attrs["fast_math_intrinsics"] = False`` (libm, one call
per lane).  The three variants run interleaved; the medians (ns per element) are printed
with the inline kernel's speedup over libm.  NumPy is single-threaded; with
``--threads 1`` all three use one thread.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

import tdsl as td

try:
    from scipy.special import erf as _np_erf
except ImportError:  # pragma: no cover
    _np_erf = None

FUNCS = {"erf": (td.erf, _np_erf), "tanh": (td.tanh, np.tanh), "log": (td.log, np.log),
         "sin": (td.sin, np.sin), "exp": (td.exp, np.exp)}
FUNCS64 = ("erf", "tanh", "log", "sin", "exp")


def kernel(name: str, n: int, inline: bool, threads: int, dtype: str = "float32"):
    A = td.placeholder((n,), dtype, name="A")
    B = td.compute((n,), lambda i: FUNCS[name][0](A[i]), name="B")
    s = td.create_schedule(B.op)
    outer, inner = s[B].split(B.op.axis[0], factor=8 if dtype == "float32" else 4)
    s[B].vectorize(inner)
    if threads > 1:
        s[B].parallel(outer)
    f = td.lower(s, [A, B], name=f"bench_{name}_{dtype}_{'inline' if inline else 'libm'}")
    f.attrs["fast_math_intrinsics"] = inline
    return td.build(f, target="llvm")


def data(name: str, n: int, dtype: str = "float32") -> np.ndarray:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n).astype(dtype) * 3
    return np.abs(x) + 1e-3 if name == "log" else x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1 << 22)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    os.environ.setdefault("TDSL_NUM_THREADS", str(args.threads))
    print(f"n={args.n} elements, threads={args.threads}, median of {args.repeats} (ns/element)")
    print(f"{'func':10} {'inline':>8} {'libm':>8} {'numpy':>8} {'inline/libm speedup':>20}")
    rows = [(name, "float32") for name in FUNCS] + [(name, "float64") for name in FUNCS64]
    for name, dtype in rows:
        ref = FUNCS[name][1]
        x = data(name, args.n, dtype)
        y = np.empty_like(x)
        runners = {"inline": kernel(name, args.n, True, args.threads, dtype),
                   "libm": kernel(name, args.n, False, args.threads, dtype)}
        for f in runners.values():
            f(x, y)                                  # warm up
        if ref is not None:
            runners["numpy"] = lambda a, b, ref=ref: ref(a, out=b)
        times: dict[str, list[float]] = {k: [] for k in runners}
        for _ in range(args.repeats):
            for k, f in runners.items():          # interleaved
                t = time.perf_counter()
                f(x, y)
                times[k].append(time.perf_counter() - t)
        med = {k: float(np.median(v)) * 1e9 / args.n for k, v in times.items()}
        label = name if dtype == "float32" else name + " f64"
        print(f"{label:10} {med['inline']:8.2f} {med['libm']:8.2f} "
              f"{med.get('numpy', float('nan')):8.2f} {med['libm'] / med['inline']:19.1f}x")


if __name__ == "__main__":
    main()
