"""The pre-trained cost model on held-out operators: ranking, and trials to a good program.

    python -m tdsl.autotune.pretrain --records benchmarks/.cache/pretrain.db \\
        --out benchmarks/.cache/pretrained.json --trials 32        # records (resumes)
    python benchmarks/eval_pretrained.py [--db benchmarks/.cache/pretrain.db] [--batch 8]
                                         [--seeds 10] [--rounds 100] [--stored VERSION]

For each workload of ``autotune.pretrain_workloads`` in the database (leave one out): a
model is pre-trained as ``pretrain`` does on the records of all the *other* workloads, and
compared on the held-out one with an untrained model (what every tuning job starts with
today), both fed the held-out workload's records the way a tuner is:

* ``cold``: the pre-trained model ranks all the held-out records before any is measured
  (an untrained model cannot: 0.5);
* ``online``: records in measurement order, batches of ``--batch``; before each batch the
  model (untrained: trained on the earlier batches only, once it has 8; pre-trained:
  fine-tuned on them, ``XGBoostCostModel.fit``) ranks the next batch;
* ``trials to 5%``: a search replayed on the stored records (no timing): each step
  measures ``--batch`` of the held-out records -- the model's top ones (an untrained model:
  at random until it has 8 records; a share at random, as ``XGBTuner`` explores) -- and
  refits; the trials until one within 5% of the best record is found, mean over
  ``--seeds`` seeds.  The untuned programs (default, ``ops.schedule``) are left out of the
  pool: what is measured is how fast the *search* finds a good program.

Per cell: pairwise accuracy (pairs of different throughput ordered right) and top-5 recall
(best throughput among the model's top 5 / best held out).  A check on small pools (32
records per workload by default), on a shared machine: the records' timings are noisy.

``--stored VERSION``: the features stored with the records (of an older version) instead of
this version's, recomputed from the records' programs (nothing is timed again): the old and
the new features compared on the same records.  On the ~600 valid records of the 20
workloads (up to 32 each; 30 seeds): FEATURE_VERSION 5, trials to 5% 10.3 untrained / 7.9 pre-trained (1.30x),
cold pairwise 0.724; FEATURE_VERSION 6 with the analytic prior, 9.6 / 6.0 (1.60x), 0.743.

2026-11-28, a 2-core AVX2 EPYC, ``pretrain --trials 96`` (1649 records, 10.5 min), 20
seeds: trials to 5% 21.9 untrained / 10.3 pre-trained -- ratio of the means 2.13x,
geometric mean of the per-workload ratios 3.01x, 13 of 20 workloads at least 2x, 4 slower
(matmul_128, dense_1x1024_relu, depthwise_s2_32_56 and, by 0.0, matmul_96x200x72) -- with
the pre-trained model's first batch all its own picks (``PRETRAINED_FIRST_EPSILON``); with
2 of 8 at random, as before, 12.4 (1.76x, 2.66x, 11 of 20, 4 slower).
"""
from __future__ import annotations

import argparse
import os
import random
import sys

import numpy as np

from tdsl.autotune import pretrain
from tdsl.autotune.auto_schedule import create_auto_task
from tdsl.autotune.cost_model import (DEFAULT_OBJECTIVE, XGBoostCostModel, pairwise_accuracy,
                                      top_k_recall)
from tdsl.autotune.database import open_database
from tdsl.autotune.pretrain_workloads import WORKLOADS
from tdsl.autotune.xgb_tuner import PRETRAINED_FIRST_EPSILON

HERE = os.path.dirname(os.path.abspath(__file__))


def load(db_path: str, stored: "int | None" = None) -> dict[str, dict]:
    """Per workload with records: features (recomputed from the records' programs when
    stored with another version; ``stored``: the stored ones of that version), throughputs,
    which are untuned programs."""
    db = open_database(db_path, create=False)
    out = {}
    for name, make in WORKLOADS.items():
        task = create_auto_task(make(), "llvm")
        recs = sorted(db.records(task.key), key=lambda r: r.id)
        rows, ys, default = [], [], []
        for r in recs:
            if not r.valid:
                continue
            if stored is not None:
                if r.feature_version != stored or r.features is None:
                    continue
                f, c = [np.asarray(r.features, np.float32)], [1.0 / r.cost]
            else:
                f, c, _ = pretrain.dataset([r], {task.key: task})
            if len(c):
                rows.append(f[0])
                ys.append(c[0])
                default.append("__default__" in (r.config or {}))
        if len(ys) < 8:
            continue
        X, y, default = np.stack(rows), np.asarray(ys), np.asarray(default)
        out[name] = {"X": X, "y": y, "default": default}
    return out


def base_for(data: dict, held: str, rounds: int) -> XGBoostCostModel:
    """A model pre-trained on every workload but ``held``."""
    others = [n for n in data if n != held]
    X = np.concatenate([data[n]["X"] for n in others])
    y = np.concatenate([data[n]["y"] for n in others])
    g = np.concatenate([np.full(len(data[n]["y"]), n, dtype=object) for n in others])
    return pretrain.train(X, y, g, rounds)


def _model(base: "XGBoostCostModel | None") -> XGBoostCostModel:
    return XGBoostCostModel(DEFAULT_OBJECTIVE, base=base._booster) if base is not None else \
        XGBoostCostModel(DEFAULT_OBJECTIVE)


def online(base, X, y, batch: int) -> tuple[float, float]:
    accs, recs = [], []
    b_of = np.arange(len(X)) // batch
    for b in range(1, b_of.max() + 1):
        tr, te = b_of < b, b_of == b
        if te.sum() < 2 or (base is None and tr.sum() < 8):
            continue
        m = _model(base)
        m.fit(X[tr], y[tr], np.zeros(tr.sum(), dtype=int))
        s = m.predict(X[te])
        accs.append(pairwise_accuracy(s, y[te]))
        recs.append(top_k_recall(s, y[te], 5))
    return (float(np.mean(accs)), float(np.mean(recs))) if accs else (float("nan"),) * 2


def trials_to(base, X, y, batch: int, seed: int, within: float = 0.05) -> int:
    """Trials a search replayed on these records needs to measure one within ``within`` of
    the best (see the module docstring)."""
    rng = random.Random(seed)
    target = (1 - within) * y.max()
    left = list(range(len(y)))
    measured: list[int] = []
    model = _model(base) if base is not None else None
    while left:
        trained = model is not None and (base is not None or len(measured) >= 8)
        eps = 0.1 if len(measured) >= batch else \
            (PRETRAINED_FIRST_EPSILON if base is not None else 0.5)   # as XGBTuner does
        n_random = batch if not trained else int(round(batch * eps))
        if trained:
            s = model.predict(X[left])
            order = [left[i] for i in np.argsort(-s, kind="stable")]
            pick = order[:batch - n_random]
        else:
            pick = []
        rest = [i for i in left if i not in pick]
        pick += rng.sample(rest, min(len(rest), batch - len(pick)))
        for i in pick:
            measured.append(i)
            left.remove(i)
            if y[i] >= target:
                return len(measured)
        if model is None:
            model = _model(None)
        model.fit(X[measured], y[measured], np.zeros(len(measured), dtype=int))
    return len(measured)


def main(argv: "list[str] | None" = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", default=os.path.join(HERE, ".cache", "pretrain.db"))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=pretrain.ROUNDS)
    ap.add_argument("--stored", type=int, default=None, metavar="VERSION",
                    help="the stored features of VERSION (default: this version's, "
                         "recomputed where stored with another)")
    a = ap.parse_args(argv)
    data = load(a.db, a.stored)
    if len(data) < 3:
        sys.exit(f"{a.db}: records of {len(data)} workloads; make them first (see --help)")
    head = (f"{'held-out workload':<22} {'n':>4} {'cold pw':>8} {'top5':>5} "
            f"{'online pw untr/pre':>19} {'top5 untr/pre':>14} {'trials to 5% untr/pre':>22}")
    print(head)
    rows = []
    for name, d in data.items():
        base = base_for(data, name, a.rounds)
        X, y = d["X"], d["y"]
        cold = base.predict(X)
        c = (pairwise_accuracy(cold, y), top_k_recall(cold, y, 5))
        ou, op = online(None, X, y, a.batch), online(base, X, y, a.batch)
        pool = ~d["default"] if d["default"].any() and (~d["default"]).sum() >= 8 else \
            np.ones(len(y), bool)
        tu = np.mean([trials_to(None, X[pool], y[pool], a.batch, s) for s in range(a.seeds)])
        tp = np.mean([trials_to(base, X[pool], y[pool], a.batch, s) for s in range(a.seeds)])
        rows.append((c[0], c[1], ou[0], op[0], ou[1], op[1], tu, tp))
        print(f"{name:<22} {len(y):>4} {c[0]:>8.3f} {c[1]:>5.2f} {ou[0]:>9.3f}/{op[0]:<9.3f} "
              f"{ou[1]:>6.2f}/{op[1]:<7.2f} {tu:>10.1f}/{tp:<11.1f}", flush=True)
    r = np.asarray(rows, dtype=float)
    m = np.nanmean(r, axis=0)
    print(f"{'mean':<22} {'':>4} {m[0]:>8.3f} {m[1]:>5.2f} {m[2]:>9.3f}/{m[3]:<9.3f} "
          f"{m[4]:>6.2f}/{m[5]:<7.2f} {m[6]:>10.1f}/{m[7]:<11.1f}")
    ratio = r[:, 6] / r[:, 7]
    print(f"trials to 5%, untrained / pre-trained: ratio of the means {m[6] / m[7]:.2f}x, "
          f"geometric mean of the per-workload ratios {np.exp(np.mean(np.log(ratio))):.2f}x, "
          f"{int((ratio >= 2).sum())} of {len(ratio)} workloads >= 2x, "
          f"{int((ratio < 1).sum())} slower")
    print(f"(pre-trained on the other {len(data) - 1} workloads' records; untrained online "
          f"ranks only once it has 8 records; trials to 5%: mean over {a.seeds} seeds, "
          f"batches of {a.batch}, untuned programs left out of the pool)")


if __name__ == "__main__":
    main()
