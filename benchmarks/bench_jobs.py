"""Tuning jobs: the task scheduler vs tuning the tasks one after another, same budget.

    python benchmarks/bench_jobs.py [--budget 1200] [--trials 384] [--quick] [--batch 8]
                                    [--threads N] [--suite ops|handwritten] [--half]

A 12-task job (the operator suite of the search benchmark, each with a weight = how
many times a model of them runs the kernel; ``--suite handwritten``: the same operators
written by hand with ``td.compute``, see ``job_suites.py``) is tuned twice, each time into
a fresh database, under the same time budget and the same total trials:

* ``scheduler``: ``autotune.tune_tasks`` (gradient-based allocation, one budget);
* ``sequential``: each task in turn, with an equal share of the trials and of the time;
* with ``--half``, a third run: the scheduler with half the trials and half the time.

Both end as a tuning job does, re-timing each task's 3 fastest programs (2 interleaved
rounds) before choosing its best.

Then the best kernel of every task from each run is built and timed again in this
process, the runs' kernels interleaved (medians over ``--rounds`` rounds), and
the weighted latency ``sum(weight * seconds)`` of each run is printed side by side
with its ratio (target: the scheduler's at least 20% lower).  ``--quick``: six tasks
at smaller sizes and a short budget (a check that it works, not a figure to report).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

for _k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
    os.environ.pop(_k, None)

import tdsl as td  # noqa: E402
from tdsl import autotune  # noqa: E402
from tdsl.autotune.dispatch import best_record, schedule_from_record  # noqa: E402
from tdsl.autotune.measure_jobs import random_arrays  # noqa: E402

from job_suites import SUITES  # noqa: E402


def option(timeout: float) -> autotune.MeasureOption:
    threads = os.environ.get("TDSL_NUM_THREADS")
    return autotune.measure_option(runner=autotune.LocalRunner(
        timeout=timeout, repeat=3, min_repeat_ms=10.0,
        n_threads=int(threads) if threads else None))


def run_scheduler(tasks, weights, trials, budget, batch, db, timeout):
    t0 = time.perf_counter()
    job = autotune.tune_tasks(tasks, trials=trials, time_budget=budget, db=db, weights=weights,
                              measure_option=option(timeout), batch_size=batch,
                              remeasure_top=3, remeasure_rounds=2, progress=True)
    return time.perf_counter() - t0, job.trials


def run_sequential(tasks, trials, budget, batch, db, timeout):
    t0 = time.perf_counter()
    share_trials = max(1, trials // len(tasks))
    share_time = budget / len(tasks)
    mopt = option(timeout)
    done = []
    try:
        for task in tasks:
            res = autotune.XGBTuner(task).tune(share_trials, mopt, db=db, batch_size=batch,
                                              timeout=share_time, remeasure_top=3,
                                              remeasure_rounds=2)
            done.append(res.trials)
    finally:
        mopt.close()
    return time.perf_counter() - t0, done


def _is_baseline(rec) -> bool:
    """A program of the first batch's baselines: the default or ``ops.schedule``."""
    return "__default__" in (rec.config or {})


def retime(tasks, dbs, rounds: int) -> list[list[float]]:
    """Median seconds of each db's best kernel of each task, the dbs interleaved; a last
    column: the best baseline program (default or ``ops.schedule``) of either db, i.e.
    what the job gets without any search."""
    mods = []
    for task in tasks:
        row = []
        arrays = random_arrays(task.args, task.sizes, 0)
        records = [autotune.Database(db, create=False).records(task.key) for db in dbs]
        picks = [best_record(r) for r in records]
        picks.append(best_record([r for rs in records for r in rs if _is_baseline(r)]))
        for rec in picks:
            if rec is None:
                row.append(None)
                continue
            sch = schedule_from_record(rec, task.outputs)
            row.append(td.build(sch, task.args, target="llvm"))
        mods.append((row, arrays))
    samples = [[[] for _ in range(len(dbs) + 1)] for _ in tasks]
    for _ in range(rounds):
        for ti, (row, arrays) in enumerate(mods):
            for di, m in enumerate(row):
                if m is not None:
                    r = m.time_evaluator(number=1, repeat=1, min_repeat_ms=10)(*arrays)
                    samples[ti][di].append(r.results[0])
    return [[float(np.median(s)) if s else float("inf") for s in row] for row in samples]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--budget", type=float, default=None,
                   help="seconds of tuning per run (default 1200; 180 with --quick)")
    p.add_argument("--trials", type=int, default=None,
                   help="trials per run in total (default 16 per task: a budget that does not "
                        "tune every task to its end, where sharing it well matters)")
    p.add_argument("--batch", type=int, default=8, help="candidates per round")
    p.add_argument("--rounds", type=int, default=15, help="interleaved re-timing rounds")
    p.add_argument("--run-timeout", type=float, default=10.0, help="seconds per candidate")
    p.add_argument("--quick", action="store_true", help="six smaller tasks, short budget")
    p.add_argument("--suite", choices=list(SUITES), default="ops",
                   help="the operators as tdsl.ops calls (default) or written by hand with "
                        "td.compute (job_suites.py)")
    p.add_argument("--half", action="store_true",
                   help="also run the scheduler with half the trials and time: how much of "
                        "the budget it needs to match sequential tuning")
    p.add_argument("--threads", type=int, default=None,
                   help="threads of every kernel, tuned and re-timed (default: all CPUs; 1 "
                        "gives steadier figures on a loaded machine)")
    ns = p.parse_args()
    if ns.threads:
        os.environ["TDSL_NUM_THREADS"] = str(ns.threads)
    if ns.quick and ns.suite != "ops":
        p.error("--quick has the ops suite only")
    spec = SUITES[ns.suite](ns.quick) if ns.suite == "ops" else SUITES[ns.suite]()
    budget = ns.budget or (180.0 if ns.quick else 1200.0)
    trials = ns.trials or 16 * len(spec)
    tasks = [autotune.create_auto_task(outs, "llvm", name=name) for name, outs, _ in spec]
    weights = [w for _, _, w in spec]
    tmp = tempfile.mkdtemp(prefix="bench-jobs-")
    print(f"{len(tasks)} tasks, {trials} trials and {budget:.0f} s per run, batch {ns.batch}; "
          f"databases in {tmp}", flush=True)
    # (column, db, seconds, trials per task) of each run
    runs = []
    plan = [("sched", trials, budget), ("seq", trials, budget)]
    if ns.half:
        plan.append(("sched/2", trials // 2, budget / 2))
    for name, n, secs in plan:
        db = os.path.join(tmp, name.replace("/", "_half") + ".db")
        if name == "seq":
            took, per = run_sequential(tasks, n, secs, ns.batch, db, ns.run_timeout)
        else:
            took, per = run_scheduler(tasks, weights, n, secs, ns.batch, db, ns.run_timeout)
        print(f"{name}: {took:.0f} s, {n} trials, per task {per}", flush=True)
        runs.append((name, db, took, per))
    times = retime(tasks, [db for _, db, _, _ in runs], ns.rounds)
    names = [name for name, *_ in runs]
    print(f"\n{'task':<14} {'weight':>6} " + " ".join(f"{nm + ' tr':>10}" for nm in names) +
          " " + " ".join(f"{nm + ' ms':>10}" for nm in names) + f" {'baseline ms':>11}")
    for k, (t, w) in enumerate(zip(tasks, weights)):
        print(f"{t.name:<14} {w:>6} " + " ".join(f"{r[3][k]:>10}" for r in runs) + " " +
              " ".join(f"{x * 1e3:>10.4f}" for x in times[k]))
    wl = {nm: sum(w * row[i] for w, row in zip(weights, times)) for i, nm in
          enumerate(names + ["baseline"])}
    best = sum(w * min(row) for w, row in zip(weights, times))
    print(f"\nweighted latency: scheduler {wl['sched'] * 1e3:.3f} ms, sequential "
          f"{wl['seq'] * 1e3:.3f} ms; scheduler is {100 * (1 - wl['sched'] / wl['seq']):.1f}% "
          f"lower (target >= 20%)")
    if ns.half:
        print(f"scheduler with half the trials and time: {wl['sched/2'] * 1e3:.3f} ms, "
              f"{100 * (1 - wl['sched/2'] / wl['seq']):.1f}% lower than sequential with all of "
              f"them")
    # What any allocation of trials could gain: the baselines are measured in every task's
    # first batch, so no job ends above them, and none ends below the best program any run
    # found (per task, the fastest column).
    print(f"baselines only (default / ops.schedule, no search): {wl['baseline'] * 1e3:.3f} ms; "
          f"best program of any run per task: {best * 1e3:.3f} ms -- searching can lower the "
          f"baselines' weighted latency by {100 * (1 - best / wl['baseline']):.1f}% in this "
          f"job, and sequential tuning's by {100 * (1 - best / wl['seq']):.1f}%")

if __name__ == "__main__":
    sys.exit(main())
