"""Where tuning time goes, per phase (``TuneResult.breakdown``), and what the tuner's
build-time mechanisms save: one operator of the suite tuned with them and without,
interleaved, then the two tuned kernels timed side by side.

    python benchmarks/tuning_phases.py conv2d [--trials 64] [--rounds 1] [--compare]

Without ``--compare``: one run, its breakdown.  With it: ``rounds`` pairs of runs,
"before" (no code-size limit, builds in batch order) and "after" (the defaults:
``Task.max_emitted_nodes``, ``LocalBuilder(longest_first=True)``), alternating, each
with a fresh build cache and reference cache (no run reuses another's compiled
candidates); the median seconds per phase of each, and the tuned kernels' medians
timed interleaved (``timing.interleaved``).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import timing                     # noqa: E402
import tuning_suite               # noqa: E402
import tdsl as td                 # noqa: E402
from tdsl import autotune         # noqa: E402
from tdsl.autotune.dispatch import schedule_from_record   # noqa: E402
from tdsl.autotune.phases import PHASES, format_breakdown  # noqa: E402
from tdsl.tensor import PlaceholderOp                       # noqa: E402


def tune(name: str, trials: int, before: bool, seed: int = 0):
    """One tuning run in fresh caches; (TuneResult, args, task)."""
    tmp = tempfile.mkdtemp(prefix="tdsl-phases-")
    os.environ["TDSL_CACHE_DIR"] = os.path.join(tmp, "cache")
    args, _ = tuning_suite.SUITE[name]()
    task = autotune.create_auto_task(args, "llvm")
    if before:
        task.max_emitted_nodes = None
    opt = autotune.measure_option(
        builder=autotune.LocalBuilder(longest_first=not before),
        runner=autotune.LocalRunner(reference_dir=os.path.join(tmp, "ref")))
    try:
        res = autotune.XGBTuner(task, seed=seed).tune(
            trials, opt, db=os.path.join(tmp, "t.db"))
    finally:
        opt.close()
    return res, args, task


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("op", choices=list(tuning_suite.SUITE))
    p.add_argument("--trials", type=int, default=64)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--compare", action="store_true")
    a = p.parse_args()
    os.environ.setdefault("TDSL_NUM_THREADS", str(len(os.sched_getaffinity(0))))
    if not a.compare:
        res, _, _ = tune(a.op, a.trials, before=False)
        print(f"{a.op}: {res.seconds:.1f} s, {res.trials} trials, best "
              f"{res.best.cost * 1e3:.3f} ms, {res.errors}")
        print(res.breakdown())
        return
    runs: dict[str, list] = {"before": [], "after": []}
    for r in range(a.rounds):
        for label in (("before", "after") if r % 2 == 0 else ("after", "before")):
            res, args, task = tune(a.op, a.trials, before=label == "before")
            runs[label].append((res, args, task))
            print(f"{label}: {res.seconds:.1f} s, best {res.best.cost * 1e3:.3f} ms, "
                  f"{res.errors}", flush=True)
            print(res.breakdown(), flush=True)
    print(f"\n{a.op}, {a.trials} trials, median of {a.rounds} run(s) each (seconds):")
    names = [k for k in PHASES if any(k in x[0].phases for v in runs.values() for x in v)]
    print(f"{'phase':<11}{'before':>9}{'after':>9}")
    for k in names + ["total"]:
        row = [statistics.median([x[0].seconds if k == "total" else x[0].phases.get(k, 0.0)
                                  for x in runs[lab]]) for lab in ("before", "after")]
        print(f"{k:<11}{row[0]:>9.2f}{row[1]:>9.2f}")
    contenders = {}
    for lab in ("before", "after"):
        res, args, task = runs[lab][0]
        f = td.build(schedule_from_record(res.best, task.outputs), args, target="llvm")
        ins, outs = tuning_suite._arrays(args, __import__("numpy").random.default_rng(0))
        contenders[lab] = (lambda f=f, ins=ins, outs=outs: f(*ins, *outs))
    times = tuning_suite.interleaved(contenders, rounds=9)
    print(f"tuned kernel (first run of each, interleaved medians): before "
          f"{times['before'] * 1e3:.3f} ms, after {times['after'] * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
