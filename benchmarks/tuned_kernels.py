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
default and tuned kernels' times here (alone, in a loop) and their ratio, then (one
thread) the same kernels' times inside the model's own calls.  The last line sums weight x
time of the kernels timed alone.
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


def in_model(compiled: Any, inputs: Any, calls: int = 5) -> dict:
    """Each kernel structure's time per model call inside the model (CPU time of this
    thread, medians over ``calls`` calls, summed over the kernels of that structure): the
    caches as the model leaves them (a dense layer's weights streamed from memory), not as
    a kernel timed alone in a loop finds them.  Reaches into ``tdsl.graph.runtime``."""
    import torch
    from tdsl.graph.runtime import Fallback, Group
    cg = compiled.compiled.compiled
    exe = cg.plan(cg._bind(cg._inputs(list(inputs))))
    steps = [s for s in cg.steps if isinstance(s, (Group, Fallback))]
    keys = [cg.kernels[id(s)].key if isinstance(s, Group) else None for s in steps]
    spent: list[list[float]] = [[] for _ in steps]
    plain = list(exe.runs)

    def timed(i: int, run: Callable[[], None]) -> Callable[[], None]:
        def go() -> None:
            t = time.thread_time()
            run()
            spent[i].append(time.thread_time() - t)
        return go
    exe.runs[:] = [timed(i, r) for i, r in enumerate(plain)]
    try:
        with torch.no_grad():
            for _ in range(calls):
                compiled(*inputs)
    finally:
        exe.runs[:] = plain
    out: dict = {}
    for key, x in zip(keys, spent):
        if key is not None:
            out[key] = out.get(key, 0.0) + statistics.median(x)
    return out


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
    # in the model, one thread: CPU time is what the kernels cost, whatever else runs
    inside = (in_model(plain, inputs), in_model(tuned, inputs)) if args.threads == 1 else None
    print(f"== {name} ({args.size}, batch {args.batch}, {args.threads} thread(s))")
    print(f"{'kernel':<24} {'w':>3} {'record':>7} {'tuner ms':>9} {'default ms':>10} "
          f"{'tuned ms':>9} {'gain':>6} {'in model: default':>17} {'tuned':>7} {'gain':>6}")
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
            tail = ""
            if inside is not None:
                md, mt = inside[0].get(key, 0.0) / w, inside[1].get(key, 0.0) / w
                if md > 0 and mt > 0:
                    tail = f" {md * 1e3:17.4f} {mt * 1e3:7.4f} {md / mt:5.2f}x"
                    tt_model_slower = mt > 1.1 * md
                else:
                    tt_model_slower = False
            else:
                tt_model_slower = False
            flag = "  <-- slower" if tt > 1.1 * td or tt_model_slower else ""
            print(f"{kp.name[:24]:<24} {w:>3} {kind:>7} {tc:>9} {td * 1e3:10.4f} "
                  f"{tt * 1e3:9.4f} {td / tt:5.2f}x{tail}{flag}", flush=True)
    print(f"weighted: default {total[0] * 1e3:.3f} ms, tuned {total[1] * 1e3:.3f} ms "
          f"({total[0] / total[1]:.2f}x)")
    return total[1] / total[0]


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--db", required=True)
    p.add_argument("--models", nargs="+", default=["resnet18", "mobilenet_v2", "bert", "gpt2",
                                                   "mlp"])
    p.add_argument("--size", choices=("bench", "tiny"), default="bench")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    # before tdsl is imported: its thread pool reads the count once
    os.environ["TDSL_NUM_THREADS"] = str(args.threads)
    for name in args.models:
        check(name, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
