"""``python -m tdsl.demo``: declare a matmul, tune it, and time it against NumPy.

The main job of the README's first command: it shows the whole path a user
takes — compute declaration, the default loop nest, template-free tuning with
the XGBoost cost model, build for the host CPU — and prints the speeds side by
side (medians of repeated runs, in one process, same thread count).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np


def main(argv: "list[str] | None" = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=512, help="matmul size n (n x n x n)")
    p.add_argument("--trials", type=int, default=96, help="tuning trials")
    p.add_argument("--seconds", type=float, default=60.0, help="tuning time budget")
    p.add_argument("--db", default=None, help="tuning database (default: a temporary file)")
    args = p.parse_args(argv)

    import tdsl as td
    from tdsl import autotune

    n = args.size
    A = td.placeholder((n, n), "float32", name="A")
    B = td.placeholder((n, n), "float32", name="B")
    k = td.reduce_axis((0, n), name="k")
    C = td.compute((n, n), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k), name="C")
    flops = 2.0 * n ** 3
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), np.float32)

    print(f"tdsl demo: C = A @ B, {n}x{n}x{n} float32, {os.cpu_count()} CPU thread(s)\n")
    naive = td.build(td.create_schedule(C.op), [A, B, C], target="llvm")
    t_naive = naive.time_evaluator(number=1, repeat=3)(a, b, c).median

    db = args.db or os.path.join(tempfile.mkdtemp(prefix="tdsl-demo-"), "tune.db")
    print(f"tuning for up to {args.trials} trials / {args.seconds:.0f} s (records in {db}) ...")
    t0 = time.perf_counter()
    sch, tensors = autotune.auto_schedule([C], target="llvm", trials=args.trials, db=db,
                                          timeout=args.seconds,
                                          callbacks=[autotune.progress_bar(args.trials)])
    tuning = time.perf_counter() - t0
    tuned = td.build(sch, tensors, target="llvm")
    tuned(a, b, c)
    err = float(np.abs(c - a @ b).max() / np.abs(a @ b).max())
    from tdsl.testing import benchmark
    bench = benchmark({"tdsl tuned": (tuned, [a, b, c]),
                       "NumPy": lambda: np.matmul(a, b, out=c)}, flops=flops, repeat=7)
    t_tuned, t_numpy = bench.median("tdsl tuned"), bench.median("NumPy")

    print(f"\ntuned in {tuning:.1f} s; max relative error against NumPy {err:.1e}\n")
    print(f"{'kernel':<26}{'time (ms)':>12}{'GFLOP/s':>10}{'vs NumPy':>10}")
    for name, t in (("tdsl default schedule", t_naive), ("tdsl tuned", t_tuned),
                    ("NumPy (OpenBLAS)", t_numpy)):
        print(f"{name:<26}{t * 1e3:>12.3f}{flops / t / 1e9:>10.1f}{t_numpy / t:>9.2f}x")
    print(f"({bench.threads} thread(s) for both; NumPy and tuned: tdsl.testing.benchmark, "
          f"interleaved medians)")
    print("\nthe tuned loop nest:\n")
    print(td.lower(sch, tensors))
    return 0 if err < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
