#!/usr/bin/env python
"""Tune the benchmark models' kernels into one database, for ``benchmarks/models.py --db``.

    python scripts/tune_models.py --models mobilenet_v2 bert resnet18 --batch 1 8 \\
        --minutes 10 --db /work/tune_models.db [--size bench] [--threads 1]

Each model of ``tdsl.testing.models`` is built at ``--size`` and at each batch of ``--batch``
and its kernels are tuned as one job (``autotune.tune_model`` over the distinct kernels of
all those compiled models, each weighted by how often it runs per call) for ``--minutes``
of wall-clock time, timed with ``--threads`` threads (``LocalRunner(n_threads=...)``, the
count the benchmark's tuned column runs with; at one thread by the worker thread's CPU
time, which other processes on a shared machine do not inflate) and built by
``--build-workers`` processes.  ``--rotate-mb`` (default 64, twice a 32 MB last-level
cache) makes consecutive timed runs take turns over copies of a kernel's operands spanning
that many MB, so that weights come from memory as they do inside a model.  One line per tuning round
names the task, its trials and its best time next to its first (untuned) one; a
``JobResult`` summary ends each model.

Resumable: records are written as they are measured, and the seconds spent per
(model, size, batch, threads) are kept next to the database (``<db>.budget.json``), so a
killed or repeated run spends only what is left of each model's budget, starting from the
records already there.  ``--minutes`` is the total per model, over all runs.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


class Ledger:
    """Seconds of tuning spent per model key, kept in a JSON file beside the database."""

    def __init__(self, path: str):
        self.path = path
        self.spent: dict[str, float] = {}
        if os.path.exists(path):
            with open(path) as f:
                self.spent = {k: float(v) for k, v in json.load(f).items()}

    def add(self, key: str, seconds: float) -> None:
        self.spent[key] = self.spent.get(key, 0.0) + seconds
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.spent, f, indent=1, sort_keys=True)
        os.replace(tmp, self.path)     # a kill mid-write leaves the old file whole


class RoundPrinter:
    """A ``tune_tasks`` callback: one line per round (task, trials, best vs first time)."""

    def __init__(self, model: str, t0: float):
        self.model = model
        self.t0 = t0
        self.first: dict[int, float] = {}
        self.best: dict[int, float] = {}
        self.trials: dict[int, int] = {}

    def __call__(self, sched: Any, i: int, inputs: Any, results: Any) -> None:
        costs = [r.median for r in results if r.valid]
        self.trials[i] = self.trials.get(i, 0) + len(results)
        if costs:
            c = min(costs)
            self.first.setdefault(i, c)
            self.best[i] = min(self.best.get(i, math.inf), c)
        task = sched.tasks[i]
        best = self.best.get(i)
        first = self.first.get(i)
        gain = f"{first / best:5.2f}x" if best and first else "  -  "
        best_s = f"{best * 1e3:9.4f} ms" if best else f"{'-':>12}"
        print(f"[{self.model} {time.perf_counter() - self.t0:6.0f}s] {task.name[:30]:<30} "
              f"w={sched.weights[i]:<3g} +{len(results):<2d} trials={self.trials[i]:<4d} "
              f"best {best_s} ({gain} first round; {len(results) - len(costs)} invalid)",
              flush=True)


def measure_option(threads: int, build_workers: int, repeat: int, min_repeat_ms: float,
                   rotate_mb: float = 0.0) -> Any:
    from tdsl import autotune
    return autotune.measure_option(
        builder=autotune.LocalBuilder(n_parallel=build_workers),
        runner=autotune.LocalRunner(n_threads=threads, repeat=repeat,
                                    min_repeat_ms=min_repeat_ms,
                                    rotate_bytes=int(rotate_mb * 2 ** 20)))


def model_key(name: str, args: argparse.Namespace) -> str:
    """The ledger's key of a model's job: model, size, batches, threads."""
    return f"{name}/{args.size}/b{'+'.join(str(b) for b in args.batch)}/t{args.threads}"


def batch_tasks(name: str, args: argparse.Namespace) -> tuple[list, list]:
    """The tasks of model ``name`` at every batch of ``args.batch`` (one list; a kernel
    that two batches share counts once, with the sum of its weights)."""
    from tdsl import autotune
    from tdsl.testing import models
    tasks: dict[str, Any] = {}
    weights: dict[str, float] = {}
    for b in args.batch:
        model, inputs = models.make(name, args.size, batch=b, seed=args.seed)
        for t, w in zip(*autotune.model_tasks(model, inputs)):
            tasks.setdefault(t.key, t)
            weights[t.key] = weights.get(t.key, 0) + w
    return list(tasks.values()), [weights[k] for k in tasks]


def tune_one(name: str, args: argparse.Namespace, ledger: Ledger) -> Optional[Any]:
    """Tune model ``name`` for what is left of its budget; its ``JobResult`` (None: spent)."""
    from tdsl import autotune
    key = model_key(name, args)
    left = args.minutes * 60 - ledger.spent.get(key, 0.0)
    if left < args.min_seconds:
        print(f"== {key}: budget spent ({ledger.spent.get(key, 0.0):.0f} s); skipped", flush=True)
        return None
    print(f"== {key}: tuning for {left:.0f} s into {args.db}", flush=True)
    t0 = time.perf_counter()
    try:
        tasks, weights = batch_tasks(name, args)
        job = autotune.tune_tasks(
            tasks, time_budget=max(1.0, left - (time.perf_counter() - t0)), db=args.db,
            weights=weights, tuner=args.tuner, seed=args.seed, batch_size=args.batch_size,
            measure_option=measure_option(args.threads, args.build_workers, args.repeat,
                                          args.min_repeat_ms, args.rotate_mb),
            progress=False, callbacks=[RoundPrinter(name, t0)])
    finally:
        # what the tuning took counts even when it was interrupted (its records are kept)
        ledger.add(key, time.perf_counter() - t0)
    print(f"== {key}: {len(job.tasks)} tasks, {time.perf_counter() - t0:.0f} s "
          f"(of which the job {job.seconds:.0f} s)", flush=True)
    print(job.summary(), flush=True)
    return job


def parse(argv: Optional[list[str]] = None) -> argparse.Namespace:
    from tdsl.testing import models
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=list(models.MODELS), choices=models.MODELS)
    p.add_argument("--size", choices=models.SIZES, default="bench")
    p.add_argument("--batch", type=int, nargs="+", default=[1],
                   help="batch sizes, tuned together as one job per model")
    p.add_argument("--minutes", type=float, default=10.0,
                   help="tuning budget per model (total over resumed runs)")
    p.add_argument("--db", default="tune_models.db")
    p.add_argument("--threads", type=int, default=1, help="threads the kernels are timed with")
    p.add_argument("--build-workers", type=int, default=1,
                   help="processes compiling candidates (1: leave a core to the timing)")
    p.add_argument("--tuner", choices=("xgb", "random"), default="xgb")
    p.add_argument("--batch-size", type=int, default=8, help="candidates per round")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--min-repeat-ms", type=float, default=25.0)
    p.add_argument("--rotate-mb", type=float, default=64.0,
                   help="timed runs take turns over operand copies spanning this many MB "
                        "(cold operands, as in a model; 0: the same arrays every run)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--min-seconds", type=float, default=20.0,
                   help="skip a model with less than this left of its budget")
    return p.parse_args(argv)


def main(argv: Optional[list[str]] = None) -> int:
    args = parse(argv)
    # the parent's own kernels (the compile that extracts the tasks) at the timed count too
    os.environ.setdefault("TDSL_NUM_THREADS", str(args.threads))
    ledger = Ledger(args.db + ".budget.json")
    failed = []
    for name in args.models:
        job = tune_one(name, args, ledger)
        if job is not None and any(b is None for b in job.best):
            failed.append(name)
    for key in sorted(ledger.spent):
        print(f"spent {key}: {ledger.spent[key]:.0f} s")
    if failed:
        print(f"tasks without a valid record in: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
