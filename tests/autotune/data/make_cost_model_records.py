"""Writes ``matmul128_records.json.gz``: measured candidates of a 128^3 matmul for the cost
model tests (``test_autotune_cost_model.py``), so that they rank recorded timings instead of
timings taken while the suite runs (which a loaded machine blurs).

    python tests/autotune/data/make_cost_model_records.py      # ~2 min, on a quiet machine

Each record: a candidate's trace (JSON, replayed on the task by the tests, which extract the
features themselves, so the file outlives feature changes) and its throughput in FLOP/s: the
best of ``ROUNDS`` interleaved rounds of ``time_evaluator`` on one thread.
"""
from __future__ import annotations

import gzip
import json
import os
import random
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))))
sys.path.insert(0, ROOT)

import tdsl as td  # noqa: E402
from tdsl import autotune  # noqa: E402
from tdsl.autotune.measure_jobs import random_arrays  # noqa: E402
from tdsl.autotune.replay import replay  # noqa: E402
from tdsl.autotune.search import CandidatePool  # noqa: E402

from tests.autotune.autotune_ops import matmul  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "matmul128_records.json.gz")
N, SEED, ROUNDS = 160, 3, 3


def main() -> None:
    os.environ["TDSL_NUM_THREADS"] = "1"
    args, _ = matmul(128, 128, 128)
    task = autotune.create_auto_task(args)
    cands = CandidatePool(task).random_valid(N, random.Random(SEED), set())
    arrays = random_arrays(task.args, task.sizes, SEED)
    mods = [td.build(replay(c.trace, task.outputs), task.args, target=task.target)
            for c in cands]
    best = [float("inf")] * len(mods)
    for _ in range(ROUNDS):               # interleaved: a burst of load hits every candidate
        for i, m in enumerate(mods):
            res = m.time_evaluator(number=1, repeat=3, min_repeat_ms=2)(*arrays)
            best[i] = min(best[i], min(res.results))
    doc = {"task": "tests.autotune.autotune_ops.matmul(128, 128, 128), create_auto_task",
           "generated": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "load_average": os.getloadavg()[0],
           "records": [{"trace": c.trace, "flops": task.flop / s} for c, s in zip(cands, best)]}
    with gzip.open(OUT, "wt") as f:
        json.dump(doc, f)
    print(f"{len(cands)} records -> {OUT} ({os.path.getsize(OUT)} bytes)")


if __name__ == "__main__":
    main()
