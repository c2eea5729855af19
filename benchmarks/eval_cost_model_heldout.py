"""Cost-model variants on held-out *operators*, from stored tuning records (no timing).

    python benchmarks/eval_cost_model_heldout.py --db /work/tune_cpu.db /work/tune_models.db
                                                 [--min-records 10] [--variants a,b]
                                                 [--recompute [--lowered PATH]]

Reads the records that carry this version's features (``features.FEATURE_VERSION``) from
the databases (read-only), one group per task with at least ``--min-records`` valid ones.
A task's *operator* is its description's operator name (``k3_conv2d(...)`` -> ``conv2d``):
for each operator, every variant is trained on the records of the tasks of all *other*
operators and ranks the records of each task of the held-out one (so no shape of the same
operator leaks into training).  Per variant: mean over held-out tasks of the pairwise
accuracy (pairs of different throughput ordered right) and top-5 recall (best throughput
among the model's top 5 / best of the task), and the mean per operator.

The noise ceiling: for records with at least two timing samples (search samples, or the
search median and the re-measurement), how well one sample ranks the other.

``--recompute``: the features of every valid record are recomputed with this version's
extractor from the record's program (no timing): the tasks are rebuilt from the models of
``tdsl.testing.models`` (batch 1 and 8; a record of any other task is left out) and each
record's trace lowered again.  The lowered functions are pickled to ``--lowered`` (reused
when it exists: a feature change then costs only the extraction).  ``--stored VERSION``
reads the stored features of that (older) version, of the records a recompute uses: the
old and the new features compared on one set of records.  On 2391 records of 54 model
tasks (``reg-log (default)``): FEATURE_VERSION 5 (``--stored 5``) 0.648, FEATURE_VERSION 6
(``--recompute``) 0.673 with the analytic prior, 0.661 without (``reg-log no prior``).
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import sqlite3
import statistics
import sys
import time
from typing import Any, Callable, Optional

import numpy as np

from tdsl.autotune.cost_model import XGBoostCostModel, pairwise_accuracy, top_k_recall
from tdsl.autotune.features import FEATURE_LEN, FEATURE_VERSION, extract_features


def lowered_records(paths: list[str], cache: Optional[str]) -> dict[tuple[str, int], tuple]:
    """(database, record id) -> (lowered function, task sizes) of every valid record of a
    task of ``tdsl.testing.models`` (batch 1 and 8), pickled to / read from ``cache``."""
    if cache and os.path.exists(cache):
        with open(cache, "rb") as f:
            return pickle.load(f)
    import warnings
    from tdsl.autotune.model_tuning import model_tasks
    from tdsl.testing import models
    tasks: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in models.MODELS:
            for batch in (1, 8):
                m, inputs = models.make(name, "bench", batch=batch)
                for t in model_tasks(m, inputs)[0]:
                    tasks.setdefault(t.key, t)
    out: dict[tuple[str, int], tuple] = {}
    t0 = time.time()
    for p in paths:
        con = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
        for rid, key, trace in con.execute(
                "SELECT id, task_key, trace FROM records WHERE error_no = 0 ORDER BY id"):
            if key in tasks:
                c = tasks[key].lower_trace(trace)
                if c.valid:
                    out[(p, rid)] = (c.func, dict(tasks[key].sizes))
        con.close()
    print(f"lowered {len(out)} records of {len(tasks)} model tasks in {time.time() - t0:.0f} s",
          file=sys.stderr)
    if cache:
        sys.setrecursionlimit(max(sys.getrecursionlimit(), 100_000))
        with open(cache, "wb") as f:
            pickle.dump(out, f, protocol=pickle.HIGHEST_PROTOCOL)
    return out


def load(paths: list[str], min_records: int, lowered: "dict | None" = None,
         stored: "int | None" = None) -> dict[str, dict]:
    """Per task key: op name, features, throughput labels, relative timing spread, two
    independent timing samples (nan where absent).  ``lowered`` (``lowered_records``):
    features recomputed for its records (the others left out); ``stored``: the stored
    features of that version instead, of ``lowered``'s records only."""
    tasks: dict[str, dict] = {}
    spent, n_ext = 0.0, 0
    for p in paths:
        con = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
        rem: dict[int, list[float]] = {}
        for rid, costs in con.execute("SELECT record_id, costs FROM remeasures"):
            rem.setdefault(rid, []).extend(json.loads(costs))
        q = ("SELECT id, task_key, task_desc, costs, error_no, features, feature_version "
             "FROM records ORDER BY id")
        for rid, key, desc, costs, err, feats, fv in con.execute(q):
            c = [x for x in json.loads(costs) if x and x > 0]
            if err != 0 or not c:
                continue
            if lowered is not None and (p, rid) not in lowered:
                continue
            if lowered is None or stored is not None:
                if fv != (FEATURE_VERSION if stored is None else stored) or feats is None:
                    continue
                f = np.frombuffer(feats, dtype=np.float32)
            else:
                t0 = time.perf_counter()
                f = extract_features(*lowered[(p, rid)])
                spent += time.perf_counter() - t0
                n_ext += 1
            if stored is None and len(f) != FEATURE_LEN:
                continue
            t = tasks.setdefault(p + key, {"op": _op(desc), "X": [], "y": [], "spread": [],
                                           "a": [], "b": []})
            final = rem.get(rid)
            t["X"].append(f)
            t["y"].append(1.0 / statistics.median(final or c))
            t["spread"].append((max(c) - min(c)) / min(c))
            if final:
                t["a"].append(1 / statistics.median(c))
                t["b"].append(1 / statistics.median(final))
            elif len(c) >= 2:
                t["a"].append(1 / c[0])
                t["b"].append(1 / c[1])
            else:
                t["a"].append(np.nan)
                t["b"].append(np.nan)
        con.close()
    if n_ext:
        print(f"features recomputed: {n_ext} records, {1e3 * spent / n_ext:.2f} ms each",
              file=sys.stderr)
    out = {}
    for k, t in tasks.items():
        if len(t["y"]) >= min_records and max(t["y"]) > min(t["y"]):
            out[k] = {n: (np.stack(v) if n == "X" else np.asarray(v) if n != "op" else v)
                      for n, v in t.items()}
    return out


def _op(desc: str) -> str:
    return re.sub(r"^k\d+_", "", desc.split("(")[0])


# ---- variants -------------------------------------------------------------------------------
class _Variant:
    """A model factory plus a label transform and a training-record filter."""

    def __init__(self, make: Callable[[], Any], label: Callable[[np.ndarray], np.ndarray]
                 = lambda y: y, max_spread: float = np.inf):
        self.make, self.label, self.max_spread = make, label, max_spread


def _log_label(y: np.ndarray) -> np.ndarray:
    return np.log2(y)          # per-task normalized in fit; log is monotone per task


class _Centred:
    """Features relative to the mean of the task's candidates (what is constant within a
    task -- the operator and shape -- drops out), appended to the raw ones or alone."""

    def __init__(self, inner: Any, keep_raw: bool):
        self.inner, self.keep_raw = inner, keep_raw

    def _t(self, X: np.ndarray, g: np.ndarray) -> np.ndarray:
        C = X.astype(np.float64).copy()
        for k in np.unique(g):
            m = g == k
            C[m] -= C[m].mean(axis=0)
        return np.hstack([X, C]) if self.keep_raw else C

    def fit(self, X: np.ndarray, y: np.ndarray, g: np.ndarray) -> None:
        self.inner.fit(self._t(X, g), y, g)

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.inner.predict(self._t(X, np.zeros(len(X))))


VARIANTS: dict[str, _Variant] = {
    "reg centred": _Variant(lambda: _Centred(XGBoostCostModel("reg"), False)),
    "reg raw+centred": _Variant(lambda: _Centred(XGBoostCostModel("reg"), True)),
    "rank raw+centred": _Variant(lambda: _Centred(XGBoostCostModel("rank"), True)),
    "reg-log raw+centred": _Variant(lambda: _Centred(XGBoostCostModel("reg-log"), True)),
    "reg-log centred": _Variant(lambda: _Centred(XGBoostCostModel("reg-log"), False)),
    "ndcg raw+centred": _Variant(lambda: _Centred(XGBoostCostModel("rank-ndcg"), True)),
    "ndcg centred": _Variant(lambda: _Centred(XGBoostCostModel("rank-ndcg"), False)),
    "reg (old default)": _Variant(lambda: XGBoostCostModel("reg")),
    "rank:pairwise qid": _Variant(lambda: XGBoostCostModel("rank")),
    "rank:ndcg qid": _Variant(lambda: XGBoostCostModel("rank-ndcg")),
    "reg-log (default)": _Variant(lambda: XGBoostCostModel("reg-log")),
    "reg-log no prior": _Variant(lambda: XGBoostCostModel("reg-log", prior=False)),
    "reg drop-noisy": _Variant(lambda: XGBoostCostModel("reg"), max_spread=0.2),
    "rank drop-noisy": _Variant(lambda: XGBoostCostModel("rank"), max_spread=0.2),
    "reg depth4 120r": _Variant(lambda: XGBoostCostModel("reg", max_depth=4,
                                                         num_rounds=120, eta=0.1)),
    "rank depth4 120r": _Variant(lambda: XGBoostCostModel("rank", max_depth=4,
                                                          num_rounds=120, eta=0.1)),
}


def heldout(v: _Variant, data: dict, op: str) -> list[tuple[float, float]]:
    train = [k for k, d in data.items() if d["op"] != op]
    keep = [d["spread"] <= v.max_spread for d in (data[k] for k in train)]
    X = np.concatenate([data[k]["X"][m] for k, m in zip(train, keep)])
    y = np.concatenate([data[k]["y"][m] for k, m in zip(train, keep)])
    g = np.concatenate([np.full(int(m.sum()), i) for i, m in enumerate(keep)])
    model = v.make()
    model.fit(X, y, g)
    out = []
    for k, d in data.items():
        if d["op"] == op:
            s = model.predict(d["X"])
            out.append((pairwise_accuracy(s, d["y"]), top_k_recall(s, d["y"], 5)))
    return out


def main(argv: "list[str] | None" = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", nargs="+", required=True)
    ap.add_argument("--min-records", type=int, default=10)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--recompute", action="store_true",
                    help="recompute this version's features from the records' programs")
    ap.add_argument("--stored", type=int, default=None, metavar="VERSION",
                    help="stored features of VERSION, of the records --recompute would use")
    ap.add_argument("--lowered", default=None, help="pickle of the lowered records (cache)")
    a = ap.parse_args(argv)
    lowered = lowered_records(a.db, a.lowered) if a.recompute or a.stored is not None \
        else None
    data = load(a.db, a.min_records, lowered, a.stored)
    ops = sorted({d["op"] for d in data.values()})
    print(f"{len(data)} tasks, {sum(len(d['y']) for d in data.values())} records, "
          f"operators: " + ", ".join(f"{o} ({sum(d['op'] == o for d in data.values())})"
                                     for o in ops))
    ceil = [pairwise_accuracy(d["a"][m], d["b"][m]) for d in data.values()
            for m in [~np.isnan(d["a"])] if m.sum() >= 4]
    print(f"noise ceiling (one timing sample ranks another, mean over {len(ceil)} tasks): "
          f"{np.mean(ceil):.3f}")
    print(f"{'variant':<20} {'held-out pw':>11} {'top5':>6}   per operator pw")
    for name in a.variants.split(","):
        v = VARIANTS[name]
        rows, per_op = [], []
        for op in ops:
            r = heldout(v, data, op)
            rows += r
            per_op.append(f"{op} {np.mean([x[0] for x in r]):.2f}")
        m = np.mean(rows, axis=0)
        print(f"{name:<20} {m[0]:>11.3f} {m[1]:>6.2f}   " + ", ".join(per_op), flush=True)


if __name__ == "__main__":
    main()
