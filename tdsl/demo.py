"""``python -m tdsl.demo``: declare a matmul, tune it, and time it against NumPy.

The main job of the README's first command: it shows the whole path a user
takes — compute declaration, the default loop nest, template-free tuning with
the XGBoost cost model, build for the host CPU — and prints the speeds side by
side: the tuned kernel and NumPy timed in interleaved rounds (one sample of each
per round, medians; same process, same thread count), so a burst of load from
elsewhere hits both alike.  It also prints the tuner's own figure for the kernel
it chose next to that re-measurement.

The whole demo stays within about two minutes: tuning stops at ``--seconds``
(checked between batches of ``--batch`` candidates, then the final re-measure
of the top few), and the untuned default, which runs for a good part of a second
at 512^3, is timed once.
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
    p.add_argument("--seconds", type=float, default=50.0, help="tuning time budget")
    p.add_argument("--batch", type=int, default=16, help="candidates per tuning batch")
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
    t0 = time.perf_counter()
    naive(a, b, c)
    t_naive = time.perf_counter() - t0

    db = args.db or os.path.join(tempfile.mkdtemp(prefix="tdsl-demo-"), "tune.db")
    print(f"tuning for up to {args.trials} trials / {args.seconds:.0f} s (records in {db}) ...")
    t0 = time.perf_counter()
    sch, tensors = autotune.auto_schedule([C], target="llvm", trials=args.trials, db=db,
                                          timeout=args.seconds, batch_size=args.batch,
                                          callbacks=[autotune.progress_bar(args.trials)])
    tuning = time.perf_counter() - t0
    database = autotune.Database(db)
    records = database.records()
    best = min((r for r in records if r.valid), key=lambda r: r.cost, default=None)
    tuned = td.build(sch, tensors, target="llvm")
    tuned(a, b, c)
    err = float(np.abs(c - a @ b).max() / np.abs(a @ b).max())
    from tdsl.testing import benchmark
    bench = benchmark({"tdsl tuned": (tuned, [a, b, c]),
                       "NumPy": lambda: np.matmul(a, b, out=c)}, flops=flops, repeat=7)
    t_tuned, t_numpy = bench.median("tdsl tuned"), bench.median("NumPy")

    n_measured = sum(1 for r in records if r.error_no.name != "INSTANTIATION_ERROR")
    print(f"\ntuned in {tuning:.1f} s ({n_measured} programs measured); max relative error "
          f"against NumPy {err:.1e}")
    if best is not None:
        print(f"the tuner's figure for the chosen kernel: {best.cost * 1e3:.3f} ms; re-measured "
              f"here, interleaved with NumPy: {t_tuned * 1e3:.3f} ms "
              f"(ratio {best.cost / t_tuned:.2f})")
    print(f"\n{'kernel':<26}{'time (ms)':>12}{'GFLOP/s':>10}{'vs NumPy':>10}")
    for name, tt in (("tdsl default schedule", t_naive), ("tdsl tuned", t_tuned),
                     ("NumPy (OpenBLAS)", t_numpy)):
        print(f"{name:<26}{tt * 1e3:>12.3f}{flops / tt / 1e9:>10.1f}{t_numpy / tt:>9.2f}x")
    print(f"({bench.threads} thread(s) for both; tuned and NumPy: tdsl.testing.benchmark, "
          f"interleaved medians; the default: one run)")
    print("\nthe tuned loop nest:\n")
    print(td.lower(sch, tensors))
    return 0 if err < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
