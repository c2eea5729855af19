#!/usr/bin/env python
"""Each kernel of a model, built from its tuning record vs its default schedule, timed side by
side in one process: does the tuned model's every kernel gain what the tuner measured?

    python benchmarks/tuned_kernels.py --db tune.db --models bert [--size bench] [--batch 1]
                                       [--threads 1] [--repeats 5]

For each model the compiled graph is built twice (``tdsl.compile`` without and with
``options={"db": ...}``); the kernels of the same structure are paired and each distinct one
is timed on random inputs of its sizes (interleaved rounds, medians).  Columns: the
weight (kernels of that structure per call), the record the compile used (``default``:
the best record is an untuned program, ``tuned``, or ``-``: none), the tuner's figure, the
default and tuned kernels' times here and their ratio.  The last line sums weight x time.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _arrays(k: Any, env: dict, rng: np.random.Generator) -> list:
    """Random arguments (inputs, then an output buffer) of kernel ``k`` at sizes ``env``."""
    from tdsl.runtime.shape_eval import eval_shape_expr
    out = []
    for t in k.tensors:
        shape = [int(eval_shape_expr(d, env)) if not isinstance(d, int) else d for d in t.shape]
        out.append(rng.uniform(-1, 1, shape).astype(str(t.dtype)))
    return out


def _time(fns: list[Callable[[], Any]], repeats: int, min_s: float = 0.02) -> list[float]:
    """Medians (seconds per call) of ``fns``, timed in interleaved rounds."""
    for f in fns:
        f()
    number = []
    for f in fns:
        n, t0 = 1, time.perf_counter()
        f()
        dt = max(time.perf_counter() - t0, 1e-7)
        number.append(max(1, int(min_s / dt)))
    samples: list[list[float]] = [[] for _ in fns]
    for r in range(repeats):
        for j in range(len(fns)):
            i = (r + j) % len(fns)
            t0 = time.perf_counter()
            for _ in range(number[i]):
                fns[i]()
            samples[i].append((time.perf_counter() - t0) / number[i])
    return [statistics.median(s) for s in samples]


def record_kind(k: Any, db: Any) -> tuple[str, Optional[float]]:
    """(``tuned``/``default``/``-``, the tuner's figure) of the record the compile used."""
    from tdsl.autotune.dispatch import best_record
    from tdsl.autotune.tuner import DEFAULT_KEY
    from tdsl.autotune.task import workload_key
    from tdsl.target import as_target
    rec = best_record(db.by_workload(workload_key([k.tensors[-1].op], as_target("llvm"))))
    if rec is None:
        return "-", None
    return ("default" if DEFAULT_KEY in rec.config else "tuned"), rec.cost


def check(name: str, args: argparse.Namespace) -> float:
    """Print the table of model ``name``; its weighted tuned / default time ratio."""
    import tdsl
    from tdsl import autotune
    from tdsl.autotune.model_tuning import _size_env
    from tdsl.testing import models
    model, inputs = models.make(name, args.size, batch=args.batch, seed=args.seed)
    opts = {"num_threads": args.threads}
    plain = tdsl.compile(model, inputs, options=opts)
    tuned = tdsl.compile(model, inputs, options={**opts, "db": args.db})
    env = _size_env(plain, inputs)
    by_key: dict = {}
    for k in plain.compiled.compiled.kernels.values():
        by_key.setdefault(k.key, [k, None, 0])[2] += 1
    for k in tuned.compiled.compiled.kernels.values():
        if k.key in by_key and by_key[k.key][1] is None:
            by_key[k.key][1] = k
    rng = np.random.default_rng(args.seed)
    total = [0.0, 0.0]
    print(f"== {name} ({args.size}, batch {args.batch}, {args.threads} thread(s))")
    print(f"{'kernel':<24} {'w':>3} {'record':>7} {'tuner ms':>9} {'default ms':>10} "
          f"{'tuned ms':>9} {'gain':>6}")
    with autotune.Database(args.db) as db:
        for key, (kp, kt, w) in by_key.items():
            if kt is None:
                continue
            arrs = _arrays(kp, env, rng)
            arrs_t = [a.copy() for a in arrs]
            td, tt = _time([lambda: kp.module(*arrs), lambda: kt.module(*arrs_t)],
                           args.repeats)
            np.testing.assert_allclose(arrs_t[-1], arrs[-1], rtol=1e-3, atol=1e-3)
            kind, cost = record_kind(kt, db)
            total[0] += w * td
            total[1] += w * tt
            tc = f"{cost * 1e3:.4f}" if cost else "-"
            flag = "  <-- slower" if tt > 1.1 * td else ""
            print(f"{kp.name[:24]:<24} {w:>3} {kind:>7} {tc:>9} {td * 1e3:10.4f} "
                  f"{tt * 1e3:9.4f} {td / tt:5.2f}x{flag}", flush=True)
    print(f"weighted: default {total[0] * 1e3:.3f} ms, tuned {total[1] * 1e3:.3f} ms "
          f"({total[0] / total[1]:.2f}x)")
    return total[1] / total[0]


def main(argv: Optional[list[str]] = None) -> int:
    from tdsl.testing import models
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--db", required=True)
    p.add_argument("--models", nargs="+", default=list(models.MODELS), choices=models.MODELS)
    p.add_argument("--size", choices=models.SIZES, default="bench")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    os.environ["TDSL_NUM_THREADS"] = str(args.threads)
    for name in args.models:
        check(name, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
