"""Tuning jobs: time to quality of the task scheduler's allocations, same budget.

    python benchmarks/bench_jobs.py [--suite ops|handwritten|resnet18-ops|...] [--quick]
        [--budget 1200] [--trials N] [--batch 8] [--threads 1] [--half]
        [--strategies gradient,round-robin,sequential] [--plot out.png]
    python benchmarks/bench_jobs.py --suite resnet18-ops --dask-workers 2 [--repeats 2] ...
    python benchmarks/bench_jobs.py --suite resnet18-ops --scheduler tcp://host:8786 ...

A job (``job_suites.py``: the 12-operator suite as ``tdsl.ops`` calls or written by hand;
``model_jobs.py``: the tasks of ResNet-18, a BERT-base layer, MobileNetV2, each as ops or
hand-written ``td.compute``; weights = how many times the model runs each kernel) is tuned
once per allocation strategy (``autotune.tune_tasks(strategy=...)``), each time into a fresh
database, under the same time budget and the same total trials:

* ``gradient``: Ansor's gradient allocation;
* ``round-robin``: one batch per task in turn;
* ``sequential``: after the baselines, each task in turn up to its equal share of the
  trials and of the time (tuning the tasks one after another);
* with ``--half``: the gradient scheduler with half the trials and half the time.

Each ends as a tuning job does, re-timing each task's 3 fastest programs (2 interleaved
rounds) before choosing its best.  Then every program that was ever a task's best in any
run (after any round) is built and timed again in this process, all runs' programs
interleaved (medians over ``--rounds`` rounds), and each run's weighted latency
``sum(weight * seconds)`` is redrawn with those figures against its tuning time and trials
(``time_to_quality.py``): printed per task, plotted (``--plot``, default
``benchmarks/results/jobs_<suite>.png``), and reported as the trials and seconds each run
needed to reach sequential tuning's final weighted latency and to get within 5% of the best
any run reached.  ``--quick``: at most six smaller tasks, 8 trials each, a short budget
(a check that it works, not a figure to report).

``--dask-workers N`` (a ``LocalCluster`` of N single-threaded worker processes) or
``--scheduler ADDRESS`` instead compares one process with the cluster: the job (the first
of ``--strategies``, ``--tuner``) at the same trials, measured locally and on the cluster
(``tune_tasks(client=)``), the pair ``--repeats`` times back to back (every other pair in
the other order); then every run's best programs are re-timed here, interleaved, and each
run's weighted latency and wall time printed.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time

import numpy as np

for _k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
    os.environ.pop(_k, None)
# The build cache off: every run builds its own candidates (the runs measure the same seeded
# random candidates, so with the cache on the runs after the first found their builds done
# and looked faster per trial -- in the first quick run the first run's curve started ~70 s
# after the others').  --build-cache keeps it.
if "--build-cache" not in sys.argv:
    os.environ["TDSL_CACHE_DIR"] = "off"

import tdsl as td  # noqa: E402
from tdsl import autotune  # noqa: E402
from tdsl.autotune.dispatch import best_record, schedule_from_record  # noqa: E402
from tdsl.autotune.measure_jobs import random_arrays  # noqa: E402

import time_to_quality as ttq  # noqa: E402
from job_suites import SUITES  # noqa: E402
from tdsl.autotune.task_scheduler import STRATEGIES  # noqa: E402


def option(timeout: float) -> autotune.MeasureOption:
    threads = os.environ.get("TDSL_NUM_THREADS")
    return autotune.measure_option(runner=autotune.LocalRunner(
        timeout=timeout, repeat=3, min_repeat_ms=10.0,
        n_threads=int(threads) if threads else None))


def run_job(tasks, weights, strategy, trials, budget, batch, db, timeout, pretrained="off"):
    """``tune_tasks`` with ``strategy``; returns the JobResult and the wall seconds."""
    t0 = time.perf_counter()
    job = autotune.tune_tasks(tasks, trials=trials, time_budget=budget, db=db, weights=weights,
                              measure_option=option(timeout), batch_size=batch,
                              strategy=strategy, remeasure_top=3, remeasure_rounds=2,
                              progress=True, pretrained=pretrained)
    return job, time.perf_counter() - t0


def compare_cluster(ns, tasks, weights, trials: int, budget: float, tmp: str,
                    strategy: str) -> None:
    """One process against a Dask cluster (``--dask-workers`` / ``--scheduler``): the job
    (``strategy``, ``--tuner``) at the same trials, alternated ``--repeats`` times; wall
    seconds and the weighted latency of each run's best programs re-timed here, interleaved.
    With ``--strategies round-robin --tuner random`` both sides measure the same programs,
    so the wall times compare the measuring alone."""
    import distributed
    if ns.scheduler:
        cluster = None
        client = distributed.Client(ns.scheduler, timeout=30)
    else:
        cluster = distributed.LocalCluster(n_workers=ns.dask_workers, threads_per_worker=1,
                                           processes=True, dashboard_address=None,
                                           silence_logs=40)
        client = distributed.Client(cluster)
    where = ns.scheduler or f"LocalCluster({ns.dask_workers} workers)"
    runs = []                                   # (name, db, JobResult, wall s, load before)
    try:
        for rep in range(ns.repeats):
            pair = [("one process", None), (where, client)]
            # ABBA...: the second pair in the other order, so a drift of the machine's load
            # favours neither
            for name, cl in (pair if rep % 2 == 0 else pair[::-1]):
                db = os.path.join(tmp, f"{'local' if cl is None else 'dask'}{rep}.db")
                load = os.getloadavg()[0]
                t0 = time.perf_counter()
                job = autotune.tune_tasks(tasks, trials=trials, time_budget=budget, db=db,
                                          weights=weights, measure_option=option(
                                              ns.run_timeout), batch_size=ns.batch,
                                          remeasure_top=3, remeasure_rounds=2, progress=False,
                                          pretrained=ns.pretrained, client=cl,
                                          strategy=strategy, tuner=ns.tuner)
                took = time.perf_counter() - t0
                print(f"{name} #{rep + 1}: {took:.0f} s wall, {sum(job.trials)} trials, "
                      f"load {load:.1f}; its own weighted latency "
                      f"{job.weighted_latency * 1e3:.3f} ms", flush=True)
                print(job.summary(), flush=True)
                runs.append((f"{name} #{rep + 1}", db, job, took, load))
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    progs, _ = programs(tasks, [r[2] for r in runs], [r[1] for r in runs])
    print(f"re-timing {sum(len(x) for x in progs)} programs, {ns.rounds} interleaved rounds, "
          f"{retime_clock()} clock", flush=True)
    secs = retime(tasks, progs, ns.rounds)
    print(f"\n{'run':<32} {'wall s':>7} {'trials':>6} {'load':>5} {'weighted ms (re-timed)':>23}")
    for name, _, job, took, load in runs:
        wl = sum(w * secs[i][b.prog_hash] for i, (w, b) in enumerate(zip(weights, job.best))
                 if b is not None) if all(b is not None for b in job.best) else math.inf
        print(f"{name:<32} {took:>7.0f} {sum(job.trials):>6} {load:>5.1f} {wl * 1e3:>23.3f}")


def _is_baseline(rec) -> bool:
    """A program of the first batch's baselines: the default or ``ops.schedule``."""
    return "__default__" in (rec.config or {})


def programs(tasks, jobs, dbs) -> tuple[list[dict], list]:
    """Per task, every record that was ever a run's best (``best_at``, the final bests),
    by program hash; and per task the best baseline record of any run's database."""
    progs: list[dict] = [{} for _ in tasks]
    for job in jobs:
        for _, _, i, rec in job.best_at:
            if rec is not None:
                progs[i].setdefault(rec.prog_hash, rec)
        for i, rec in enumerate(job.best):
            if rec is not None:
                progs[i].setdefault(rec.prog_hash, rec)
    baselines = []
    for i, task in enumerate(tasks):
        recs = [r for db in dbs for r in autotune.Database(db, create=False).records(task.key)]
        base = best_record([r for r in recs if _is_baseline(r)])
        baselines.append(base)
        if base is not None:
            progs[i].setdefault(base.prog_hash, base)
    return progs, baselines


def retime_clock() -> str:
    """The clock the re-timing reads: a one-thread kernel runs on the calling thread, so its
    CPU time ("thread", as the tuners' ``LocalRunner(n_threads=1)`` timed it) leaves out
    what else a shared machine runs meanwhile; with more threads, wall time."""
    return "thread" if os.environ.get("TDSL_NUM_THREADS") == "1" else "wall"


def retime(tasks, progs: list[dict], rounds: int) -> list[dict]:
    """Median seconds of each program of ``progs`` (per task: hash -> record), all built in
    this process and timed round-robin over ``rounds`` rounds (every run's programs
    interleaved: comparable figures on a machine whose speed drifts), by ``retime_clock``."""
    clock = retime_clock()
    mods = []
    for task, recs in zip(tasks, progs):
        arrays = random_arrays(task.args, task.sizes, 0)
        built = {h: td.build(schedule_from_record(r, task.outputs), task.args, target="llvm")
                 for h, r in recs.items()}
        mods.append((built, arrays))
    samples: list[dict] = [{h: [] for h in recs} for recs in progs]
    for _ in range(rounds):
        for ti, (built, arrays) in enumerate(mods):
            for h, m in built.items():
                r = m.time_evaluator(number=1, repeat=1, min_repeat_ms=10,
                                     clock=clock)(*arrays)
                samples[ti][h].append(r.results[0])
    return [{h: float(np.median(v)) for h, v in row.items()} for row in samples]


def load_spec(suite: str, quick: bool):
    if suite == "handwritten":
        if quick:
            raise SystemExit("--quick: not with the 12-task handwritten suite (use a model "
                             "suite, e.g. --suite resnet18-handwritten)")
        return SUITES[suite]()
    return SUITES[suite](quick)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--budget", type=float, default=None,
                   help="seconds of tuning per run (default 1200; 150 with --quick)")
    p.add_argument("--trials", type=int, default=None,
                   help="trials per run in total (default 16 per task, 8 with --quick: a "
                        "budget that does not tune every task to its end)")
    p.add_argument("--batch", type=int, default=8, help="candidates per round")
    p.add_argument("--rounds", type=int, default=15, help="interleaved re-timing rounds")
    p.add_argument("--run-timeout", type=float, default=10.0, help="seconds per candidate")
    p.add_argument("--quick", action="store_true",
                   help="smaller tasks (at most six), short budget: a check that it works")
    p.add_argument("--suite", choices=sorted(SUITES), default="ops",
                   help="the job (job_suites.py, model_jobs.py): the 12-operator suite as "
                        "tdsl.ops calls (default) or by hand, or a model's tasks")
    p.add_argument("--strategies", default="gradient,round-robin,sequential",
                   help="comma-separated allocations to compare (task_scheduler.STRATEGIES)")
    p.add_argument("--pretrained", default="off",
                   help="the tuners' pre-trained cost model: off (default), auto (this CPU's, "
                        "python -m tdsl.autotune.pretrain) or a file; --compare-pretrained "
                        "adds a gradient run with it")
    p.add_argument("--compare-pretrained", default=None, metavar="MODEL",
                   help="also run the gradient scheduler starting from this pre-trained model "
                        "(a file or auto)")
    p.add_argument("--half", action="store_true",
                   help="also run the gradient scheduler with half the trials and time")
    p.add_argument("--threads", type=int, default=None,
                   help="threads of every kernel, tuned and re-timed (default: all CPUs; 1 "
                        "gives steadier figures on a loaded machine)")
    p.add_argument("--build-cache", action="store_true",
                   help="keep the LLVM build cache on (default off: runs after the first "
                        "would find the same seeded candidates built)")
    p.add_argument("--dask-workers", type=int, default=None,
                   help="compare one process with a LocalCluster of this many workers")
    p.add_argument("--scheduler", default=None,
                   help="compare one process with the Dask cluster at this address")
    p.add_argument("--tuner", choices=("xgb", "random"), default="xgb",
                   help="with --dask-workers/--scheduler: the tasks' tuner")
    p.add_argument("--repeats", type=int, default=2,
                   help="with --dask-workers/--scheduler: times to run the pair")
    p.add_argument("--plot", default=None,
                   help="PNG of the curves (default benchmarks/results/jobs_<suite>.png)")
    ns = p.parse_args()
    if ns.threads:
        os.environ["TDSL_NUM_THREADS"] = str(ns.threads)
    strategies = [x.strip() for x in ns.strategies.split(",") if x.strip()]
    bad = [x for x in strategies if x not in STRATEGIES]
    if bad:
        p.error(f"unknown strategies {bad}; choose from {STRATEGIES}")
    spec = load_spec(ns.suite, ns.quick)
    budget = ns.budget or (150.0 if ns.quick else 1200.0)
    trials = ns.trials or (8 if ns.quick else 16) * len(spec)
    tasks = [autotune.create_auto_task(outs, "llvm", name=name) for name, outs, _ in spec]
    weights = [w for _, _, w in spec]
    tmp = tempfile.mkdtemp(prefix="bench-jobs-")
    print(f"{ns.suite}: {len(tasks)} tasks, {trials} trials and {budget:.0f} s per run, batch "
          f"{ns.batch}, threads {ns.threads or 'all'}; databases in {tmp}", flush=True)
    plan = [(st, st, trials, budget, ns.pretrained) for st in strategies]
    if ns.half:
        plan.append(("gradient/2", "gradient", trials // 2, budget / 2, ns.pretrained))
    if ns.compare_pretrained:
        plan.append(("gradient+pre", "gradient", trials, budget, ns.compare_pretrained))
    # One-off costs out of the first run's clock: each task's reference output (computed
    # once, cached on disk) and the process's first builds -- in the first quick run the
    # first run (gradient) took 225 s for 44 trials, the same trials sequentially 64 s.
    t0 = time.perf_counter()
    autotune.tune_tasks(tasks, trials=2 * len(tasks), db=os.path.join(tmp, "warmup.db"),
                        measure_option=option(ns.run_timeout), strategy="round-robin",
                        remeasure_top=0, progress=False, pretrained="off")
    print(f"warm-up (references, first builds): {time.perf_counter() - t0:.0f} s", flush=True)
    if ns.dask_workers or ns.scheduler:
        compare_cluster(ns, tasks, weights, trials, budget, tmp, strategies[0])
        return
    runs = []                      # (column, db, JobResult)
    for name, strategy, n, secs, pre in plan:
        db = os.path.join(tmp, name.replace("/", "_half").replace("+", "_") + ".db")
        job, took = run_job(tasks, weights, strategy, n, secs, ns.batch, db, ns.run_timeout, pre)
        print(f"{name}: {took:.0f} s, {sum(job.trials)} trials, per task {job.trials}",
              flush=True)
        runs.append((name, db, job))
    progs, baselines = programs(tasks, [j for *_, j in runs], [db for _, db, _ in runs])
    print(f"re-timing {sum(len(x) for x in progs)} programs, {ns.rounds} interleaved rounds, "
          f"{retime_clock()} clock", flush=True)
    secs = retime(tasks, progs, ns.rounds)
    curves = {name: ttq.curve(job.best_at, weights, secs,
                              final=(job.seconds, sum(job.trials), job.best))
              for name, _, job in runs}
    names = [name for name, *_ in runs]

    def ms(i, rec):
        return secs[i][rec.prog_hash] * 1e3 if rec is not None else math.inf
    print(f"\n{'task':<34} {'weight':>6} " + " ".join(f"{nm[:10] + ' tr':>13}" for nm in names) +
          " " + " ".join(f"{nm[:10] + ' ms':>13}" for nm in names) + f" {'baseline ms':>11}")
    for k, (t, w) in enumerate(zip(tasks, weights)):
        print(f"{t.name[:34]:<34} {w:>6} " +
              " ".join(f"{job.trials[k]:>13}" for *_, job in runs) + " " +
              " ".join(f"{ms(k, job.best[k]):>13.4f}" for *_, job in runs) +
              f" {ms(k, baselines[k]):>11.4f}")
    base = sum(w * ms(k, b) / 1e3 for k, (w, b) in enumerate(zip(weights, baselines)))
    per_task_best = sum(w * min(row.values()) for w, row in zip(weights, secs))
    print("\n" + "\n".join(ttq.report(curves, reference="sequential")))
    print(f"baselines only (default / ops.schedule, no search): {base * 1e3:.4f} ms; the best "
          f"program of any run per task: {per_task_best * 1e3:.4f} ms")
    out = ns.plot or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                  f"jobs_{ns.suite}{'_quick' if ns.quick else ''}.png")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    try:
        ttq.plot(curves, out, f"{ns.suite}: {len(tasks)} tasks, {trials} trials, "
                              f"{budget:.0f} s per run")
        print(f"curves: {out}")
    except ImportError:
        print("matplotlib is not installed: no plot (pip install matplotlib)")


if __name__ == "__main__":
    sys.exit(main())
