"""The CPU default's packed panels, copied along the source's rows (now) or gathered with the
output columns innermost (before), timed side by side.

    python benchmarks/packed_panels.py [--rounds 9] [--threads 1]

``ops.dense`` reads its weight ``w[j, k]`` through a panel laid out ``[k, j]``; an OIHW
convolution's filter ``w[o, c, y, x]`` through one laid out ``[c, y, x, o]``.  Before, both
copies walked the panel's rows with the columns vectorized: every vector gathered from
source rows a whole row apart, which at row sizes that are multiples of 4 KiB share one or
two L1 sets (``llvm_matmul._schedule_panel``, ``llvm_conv._pack_along_filter_rows``).  Each
program is checked against NumPy / PyTorch, then both are timed interleaved (medians of
``--rounds``; at one thread by the thread's CPU time).  Prints ms and new/old.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
import time

import numpy as np

DENSE = [(128, 3072, 768), (128, 768, 2304), (128, 768, 3072), (128, 768, 768),
         (384, 1024, 1024), (200, 300, 500)]
#: (batch, channels in, size, channels out, stride, kernel)
CONV = [(1, 512, 7, 512, 1, 3), (1, 1024, 14, 2048, 2, 1), (1, 256, 14, 512, 2, 3),
        (1, 256, 14, 1024, 1, 3), (1, 64, 56, 64, 1, 3)]


@contextlib.contextmanager
def gathered_panels():
    """The copies before: the columns (output channels) innermost and vectorized."""
    from tdsl.ops.schedules import llvm_conv, llvm_matmul
    panel, rows = llvm_matmul._schedule_panel, llvm_conv._pack_along_filter_rows
    llvm_matmul._schedule_panel = lambda pack, bn, transposed: panel(pack, bn, False)
    llvm_conv._pack_along_filter_rows = lambda pack, po, pi: pack.vectorize(pi)
    try:
        yield
    finally:
        llvm_matmul._schedule_panel, llvm_conv._pack_along_filter_rows = panel, rows


def _dense(M: int, K: int, N: int):
    import tdsl as td
    from tdsl import ops
    x, w = td.placeholder((M, K), name="x"), td.placeholder((N, K), name="w")
    rng = np.random.default_rng(0)
    xa, wa = rng.standard_normal((M, K)).astype("f4"), rng.standard_normal((N, K)).astype("f4")
    return [x, w], ops.dense(x, w), [xa, wa], xa.astype("f8") @ wa.T.astype("f8"), K


def _conv(n: int, c: int, h: int, co: int, stride: int, k: int):
    import tdsl as td
    from tdsl import ops
    from tdsl.testing.reference import conv2d_nchw
    d, w = td.placeholder((n, c, h, h), name="d"), td.placeholder((co, c, k, k), name="w")
    p = k // 2
    rng = np.random.default_rng(0)
    da = rng.standard_normal((n, c, h, h)).astype("f4")
    wa = rng.standard_normal((co, c, k, k)).astype("f4")
    ref = conv2d_nchw(da.astype("f8"), wa.astype("f8"), stride=(stride, stride),
                      padding=(p, p, p, p))
    return [d, w], ops.conv2d(d, w, stride=stride, padding=p), [da, wa], ref, c * k * k


def main(argv: "list[str] | None" = None) -> int:
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("--rounds", type=int, default=9)
    a.add_argument("--threads", type=int, default=1)
    ns = a.parse_args(argv)
    os.environ["TDSL_NUM_THREADS"] = str(ns.threads)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import tdsl as td
    from tdsl import ops
    from timing import interleaved
    clock = "thread" if ns.threads == 1 else "wall"
    print(f"{'workload':<36}{'before ms':>10}{'now ms':>10}{'now/before':>11}"
          f"  ({ns.threads} thread(s), {clock} clock)")
    cases = [(f"dense {M}x{K}x{N}", _dense, (M, K, N)) for M, K, N in DENSE] + \
        [(f"conv {n}x{c}x{h}^2->{co} s{s} {k}x{k}", _conv, (n, c, h, co, s, k))
         for n, c, h, co, s, k in CONV]
    for name, make, shape in cases:
        ins, out, arrays, ref, red = make(*shape)
        calls = {}
        for label in ("before", "now"):
            with gathered_panels() if label == "before" else contextlib.nullcontext():
                f = td.build(ops.schedule(out, "llvm"), ins + [out])
            res = np.zeros(ref.shape, "f4")
            f(*arrays, res)
            np.testing.assert_allclose(res, ref, rtol=1e-3, atol=1e-3 * red ** 0.5)
            calls[label] = functools.partial(f, *arrays, res)
        timed = interleaved(calls, ns.rounds, 0.05, clock=time.thread_time if ns.threads == 1
                            else time.perf_counter)
        ms = {k: r["median_s"] * 1e3 for k, r in timed.items()}
        print(f"{name:<36}{ms['before']:10.3f}{ms['now']:10.3f}{ms['now'] / ms['before']:11.2f}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
