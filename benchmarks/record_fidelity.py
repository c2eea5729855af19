"""Does a tuned kernel's recorded cost agree with a fresh timing of it on this machine?

    python benchmarks/record_fidelity.py [--size 192] [--tries 5]

Tunes a ~1 ms matmul (``small_matmul`` of the tests, ``--size``^3) with ``RandomTuner`` on one
thread (6 trials, top 3 re-measured in 3 interleaved rounds), then builds the best record
again and times it the way the runner does (one thread, median of 7 samples of at least
25 ms), up to ``--tries`` times: it should agree within 15% at least once.  A burst of load
during the runner's own re-measurement skews the record itself, so a disagreeing job is tuned
once more.  Exit status 1 when neither job agrees.  A live comparison, so it lives here and
not in the test suite (tests/autotune/test_autotune_measure_trust.py checks that the cost is
the re-measured median of the program the record replays to); run it on a quiet machine.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import tdsl as td  # noqa: E402
from tdsl import autotune  # noqa: E402
from tdsl.autotune.dispatch import schedule_from_record  # noqa: E402
from tdsl.autotune.measure_jobs import random_arrays  # noqa: E402

from tests.autotune.helpers import small_matmul  # noqa: E402


def fresh_median(rec, task, rounds: int = 7, threads: int = 1) -> float:
    f = td.build(schedule_from_record(rec, task.outputs), task.args, target="llvm")
    f.set_num_threads(threads)       # as the runner measured it (n_threads=1)
    arrays = random_arrays(task.args, task.sizes, seed=1)
    ev = f.time_evaluator(number=1, repeat=rounds, min_repeat_ms=25)
    return statistics.median(ev(*arrays).results)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=192)
    ap.add_argument("--tries", type=int, default=5)
    a = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    task = autotune.create_task(small_matmul, (a.size,) * 3)
    with tempfile.TemporaryDirectory() as tmp:
        for attempt in range(2):
            opt = autotune.measure_option(
                builder=autotune.LocalBuilder(n_parallel=1),
                runner=autotune.LocalRunner(timeout=20.0, reference_dir=os.path.join(tmp, "ref"),
                                            n_threads=1))
            res = autotune.RandomTuner(task, seed=attempt).tune(
                6, opt, db=os.path.join(tmp, f"a{attempt}.db"), batch_size=6, remeasure_top=3,
                remeasure_rounds=3)
            opt.close()
            best = res.best
            tries = []
            for _ in range(a.tries):
                tries.append(fresh_median(best, task))
                if abs(tries[-1] - best.cost) <= 0.15 * best.cost:
                    break
            ok = abs(tries[-1] - best.cost) <= 0.15 * best.cost
            print(f"job {attempt}: recorded {best.cost * 1e3:.3f} ms (spread {best.spread:.2f}), "
                  f"fresh {[round(t * 1e3, 3) for t in tries]} ms: "
                  f"{'agrees' if ok else 'CHECK: disagrees'}")
            if ok:
                return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
