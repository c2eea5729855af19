"""How long ``Analyzer.simplify`` takes on the index expressions of a 32x32-tiled loop nest,
the ones lowering simplifies over and over.

    python benchmarks/bench_simplify.py

Best of 7 rounds of 50 calls per expression, in microseconds; ``CHECK`` marks one over
400 us (it took well under that on a quiet 2-core VM).  A live timing, so it is read here
and not asserted in the test suite (tests/tdsl/test_arith.py checks the results).
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import tdsl  # noqa: E402
from tdsl.arith import Analyzer  # noqa: E402
from tdsl.expr import SizeVar, Var  # noqa: E402
from tdsl.tensor import Range  # noqa: E402

LIMIT_US = 400.0


def main() -> int:
    io, ii, jo, ji = (Var(x) for x in ("io", "ii", "jo", "ji"))
    n = SizeVar("n")
    ana = Analyzer()
    for v, extent in ((ii, 32), (ji, 32), (jo, 32)):
        ana.bind(v, Range(0, extent))
    ana.bind(io, Range(0, (n + 31) // 32))
    exprs = [(io * 32 + ii) * 1024 + (jo * 32 + ji),
             ((io * 32 + ii) // 32) * 32 + (io * 32 + ii) % 32,
             tdsl.min(32, n - io * 32),
             io * 32 + ii < n]
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    ok = True
    for e in exprs:
        ana.simplify(e)
        reps, per = 50, float("inf")
        for _ in range(7):
            t0 = time.perf_counter()
            for _ in range(reps):
                ana.simplify(e)
            per = min(per, (time.perf_counter() - t0) / reps)
        flag = "" if per * 1e6 < LIMIT_US else f"  CHECK: over {LIMIT_US:g} us"
        ok &= not flag
        print(f"{per * 1e6:8.1f} us  {e}{flag}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
