"""Cost-model evaluation: ranking quality on measured records of several operators.

    python benchmarks/eval_cost_model.py [--db PATH] [--trials 128] [--rounds 2]
                                         [--regenerate] [--ops matmul,gemv,...]

Step 1 (skipped when the database already has the records): tune each operator
below with ``RandomTuner`` for ``--trials`` trials into ``--db`` (default
``benchmarks/.cache/cost_model.db``), single-threaded timings, short repeats.
Step 2: every valid record is rebuilt and re-timed ``--rounds`` times, interleaved
(its label: the throughput of its fastest run, recorded or re-timed; rounds 1 and 2
against each other give the "noise ceiling": how well one timing ranks another on
this machine now).  Step 3: for each operator, compare the old features and model
(``_features_v3.py``, kept here for the comparison, with the old default
``rank:pairwise``) with the current per-store features under each objective:

* offline, held-out tasks: the model is trained on the records of the *other*
  operators and ranks this operator's records (transfer to an unseen operator);
* offline, held-out records: 4-fold cross-validation within the operator;
* online: records in measurement order, batches of ``--batch`` (24); before each
  batch is added the model, trained on the records so far (recent batches
  weighted up, as ``XGBTuner`` does), ranks the next batch.

Per cell: pairwise accuracy (all pairs of different throughput, as
``cost_model.pairwise_accuracy``) and top-k recall (best true throughput among the model's top ``k``=5 / best in the
held-out set).  The table is the last thing printed.  About 10 minutes on an idle 2-core machine
(7 to generate, 3 to re-time); the database and the features/labels
(``eval_v3_v<N>_r<rounds>.npz``) are cached next to ``--db``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Callable

import numpy as np

import tdsl as td
from tdsl import autotune
from tdsl.autotune.cost_model import XGBoostCostModel, pairwise_accuracy, top_k_recall

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


# ---- operators ---------------------------------------------------------------------------------
def _matmul():
    A = td.placeholder((256, 256), "float32", name="A")
    B = td.placeholder((256, 256), "float32", name="B")
    return [A, B, td.ops.matmul(A, B)]


def _batch_matmul():
    A = td.placeholder((8, 128, 64), "float32", name="A")
    B = td.placeholder((8, 64, 128), "float32", name="B")
    return [A, B, td.ops.batch_matmul(A, B)]


def _gemv():
    x = td.placeholder((1, 1024), "float32", name="x")
    W = td.placeholder((1024, 1024), "float32", name="W")
    return [x, W, td.ops.dense(x, W)]


def _conv2d():
    X = td.placeholder((1, 32, 28, 28), "float32", name="X")
    W = td.placeholder((32, 32, 3, 3), "float32", name="W")
    return [X, W, td.ops.conv2d(X, W, padding=1)]


def _softmax():
    X = td.placeholder((256, 512), "float32", name="X")
    return [X, td.ops.softmax(X)]


def _maxpool():
    X = td.placeholder((32, 56, 56), "float32", name="X")
    X4 = td.placeholder((1, 32, 56, 56), "float32", name="X4")
    del X
    return [X4, td.ops.max_pool2d(X4, 3, 2, padding=1)]


def _layernorm():
    X = td.placeholder((1024, 512), "float32", name="X")
    return [X, td.ops.layernorm(X)]


def _rowsum():
    X = td.placeholder((1024, 512), "float32", name="X")
    return [X, td.ops.sum(X, axis=1)]


OPERATORS: dict[str, Callable[[], list]] = {
    "matmul": _matmul, "batch_matmul": _batch_matmul, "gemv": _gemv, "conv2d": _conv2d,
    "softmax": _softmax, "layernorm": _layernorm, "maxpool": _maxpool, "rowsum": _rowsum,
}
#: Evaluated by default (max-pool and row-sum have spaces of a handful of points today).
DEFAULT_OPS = ("matmul", "batch_matmul", "gemv", "conv2d", "softmax", "layernorm")


def make_task(name: str) -> Any:
    return autotune.create_auto_task(OPERATORS[name](), name=name)


# ---- records -----------------------------------------------------------------------------------
def generate(db_path: str, names: list[str], trials: int, threads: int, seed: int) -> None:
    """Measure ``trials`` random candidates of each operator into ``db_path`` (resumes)."""
    db = autotune.Database(db_path)
    for name in names:
        task = make_task(name)
        have = len(db.records(task.key))
        if have >= trials:
            continue
        t0 = time.perf_counter()
        runner = autotune.LocalRunner(number=1, repeat=3, min_repeat_ms=5, n_threads=threads,
                                      timeout=20)
        opt = autotune.measure_option(autotune.LocalBuilder(n_parallel=2), runner)
        try:
            autotune.RandomTuner(task, seed=seed).tune(trials, opt, db=db, remeasure_top=0,
                                                       measure_default=True)
        finally:
            opt.close()
        print(f"  {name}: {len(db.records(task.key))} records "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)


def retime(task: Any, traces: list[str], rounds: int, threads: int) -> np.ndarray:
    """Seconds per run of each program, ``(rounds, n)``: built once, then timed round-robin
    (one short sample of each program per round) so load from elsewhere hits all alike."""
    from tdsl.autotune.measure_jobs import random_arrays
    from tdsl.autotune.replay import replay
    saved = os.environ.get("TDSL_NUM_THREADS")
    os.environ["TDSL_NUM_THREADS"] = str(threads)
    try:
        arrays = random_arrays(task.args, task.sizes, 0)
        mods = [td.build(replay(t, task.outputs), task.args, target=task.target) for t in traces]
        out = np.zeros((rounds, len(mods)))
        for r in range(rounds):
            for i, m in enumerate(mods):
                res = m.time_evaluator(number=1, repeat=3, min_repeat_ms=2)(*arrays)
                out[r, i] = float(min(res.results))
        return out
    finally:
        if saved is None:
            os.environ.pop("TDSL_NUM_THREADS", None)
        else:
            os.environ["TDSL_NUM_THREADS"] = saved


def load(db_path: str, names: list[str], rounds: int, threads: int) -> dict[str, dict]:
    """Per operator: valid records in measurement order with old and new features, the
    label (throughput of the fastest run: recorded or re-timed) and the noise ceiling
    (pairwise agreement of two re-timing rounds).  Cached next to the database."""
    import _features_v3 as v3
    from tdsl.autotune import features as v4
    cache_path = os.path.join(os.path.dirname(os.path.abspath(db_path)),
                              f"eval_v3_v{v4.FEATURE_VERSION}_r{rounds}.npz")
    cache: dict[str, np.ndarray] = {}
    if os.path.exists(cache_path):
        with np.load(cache_path) as z:
            cache = {k: z[k] for k in z.files}
    db = autotune.Database(db_path, create=False)
    out: dict[str, dict] = {}
    for name in names:
        task = make_task(name)
        recs = sorted((r for r in db.records(task.key) if r.valid), key=lambda r: r.id)
        missing = [r for r in recs if "o" + r.prog_hash not in cache]
        if missing:
            t0 = time.perf_counter()
            keep = []
            for r in missing:
                c = task.lower_trace(r.trace)
                if c.valid:
                    cache["o" + r.prog_hash] = v3.extract_features(c.func, task.sizes)
                    cache["n" + r.prog_hash] = v4.extract_features(c.func, task.sizes)
                    keep.append(r)
            if rounds:
                secs = retime(task, [r.trace for r in keep], rounds, threads)
                for i, r in enumerate(keep):
                    cache["t" + r.prog_hash] = secs[:, i]
            np.savez(cache_path, **cache)
            print(f"  {name}: features{' and re-timing' if rounds else ''} of {len(keep)} "
                  f"records ({time.perf_counter() - t0:.0f} s)", flush=True)
        recs = [r for r in recs if "o" + r.prog_hash in cache]
        runs = [np.concatenate([r.costs, cache.get("t" + r.prog_hash, [])]) for r in recs]
        y = np.asarray([task.flop / float(np.min(c)) for c in runs])
        ceiling = float("nan")
        if rounds >= 2:
            t = np.stack([cache["t" + r.prog_hash] for r in recs])
            ceiling = pairwise_accuracy(1 / t[:, 0], 1 / t[:, 1])
        out[name] = {"old": np.stack([cache["o" + r.prog_hash] for r in recs]),
                     "new": np.stack([cache["n" + r.prog_hash] for r in recs]),
                     "y": y, "ceiling": ceiling}
    return out


# ---- evaluation --------------------------------------------------------------------------------
MODELS: dict[str, tuple[str, Callable[[], Any]]] = {
    # name: (feature set, model factory)
    "old (v3 + rank)": ("old", lambda: XGBoostCostModel("rank", num_rounds=40, max_depth=4)),
    "v4 + rank": ("new", lambda: XGBoostCostModel("rank")),
    "v4 + pack-sum": ("new", lambda: XGBoostCostModel("pack-sum")),
    "v4 + reg": ("new", lambda: XGBoostCostModel("reg")),
    "new (v4 + reg-log)": ("new", lambda: XGBoostCostModel("reg-log")),
}


def recency_weights(n_batches_of: np.ndarray, half_life: float) -> np.ndarray:
    """Weight of each record by how many batches ago it came (as ``XGBTuner`` does)."""
    age = n_batches_of.max() - n_batches_of
    return 0.5 ** (age / half_life)


def offline_records(make: Callable, X: np.ndarray, y: np.ndarray, k: int, folds: int = 4
                    ) -> tuple[float, float]:
    idx = np.arange(len(X))
    accs, recs = [], []
    for f in range(folds):
        test = idx[f::folds]
        train = np.setdiff1d(idx, test)
        m = make()
        m.fit(X[train], y[train], np.zeros(len(train), dtype=int))
        s = m.predict(X[test])
        accs.append(pairwise_accuracy(s, y[test]))
        recs.append(top_k_recall(s, y[test], k))
    return float(np.mean(accs)), float(np.mean(recs))


def offline_task(make: Callable, data: dict, feat: str, name: str, k: int) -> tuple[float, float]:
    others = [n for n in data if n != name]
    X = np.concatenate([data[n][feat] for n in others])
    y = np.concatenate([data[n]["y"] for n in others])
    g = np.concatenate([np.full(len(data[n]["y"]), i) for i, n in enumerate(others)])
    m = make()
    m.fit(X, y, g)
    s = m.predict(data[name][feat])
    return pairwise_accuracy(s, data[name]["y"]), top_k_recall(s, data[name]["y"], k)


def online(make: Callable, X: np.ndarray, y: np.ndarray, k: int, batch: int,
           half_life: float) -> tuple[float, float]:
    accs, recs = [], []
    b_of = np.arange(len(X)) // batch
    for b in range(1, b_of.max() + 1):
        tr = b_of < b
        te = b_of == b
        if te.sum() < 2:
            continue
        m = make()
        m.fit(X[tr], y[tr], np.zeros(tr.sum(), dtype=int),
              weights=recency_weights(b_of[tr], half_life))
        s = m.predict(X[te])
        accs.append(pairwise_accuracy(s, y[te]))
        recs.append(top_k_recall(s, y[te], k))
    return float(np.mean(accs)), float(np.mean(recs))


def main(argv: "list[str] | None" = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", default=os.path.join(HERE, ".cache", "cost_model.db"))
    ap.add_argument("--trials", type=int, default=128)
    ap.add_argument("--ops", default=",".join(DEFAULT_OPS))
    ap.add_argument("--rounds", type=int, default=2,
                    help="re-time every record this many rounds, interleaved (labels: the "
                         "fastest of all runs; rounds 1 and 2 give the noise ceiling)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=24)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--half-life", type=float, default=2.0,
                    help="online: a record's weight halves every that many batches")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--regenerate", action="store_true", help="delete --db first")
    a = ap.parse_args(argv)
    names = [n for n in a.ops.split(",") if n]
    unknown = [n for n in names if n not in OPERATORS]
    if unknown:
        ap.error(f"unknown operator(s) {unknown}; known: {list(OPERATORS)}")
    os.makedirs(os.path.dirname(os.path.abspath(a.db)), exist_ok=True)
    if a.regenerate and os.path.exists(a.db):
        os.remove(a.db)
    t0 = time.perf_counter()
    print(f"records: {a.db} ({a.trials} RandomTuner trials per operator)", flush=True)
    generate(a.db, names, a.trials, a.threads, seed=0)
    data = load(a.db, names, a.rounds, a.threads)
    print(f"records ready in {time.perf_counter() - t0:.0f} s: " +
          ", ".join(f"{n} {len(d['y'])}" for n, d in data.items()), flush=True)
    models = {m: MODELS[m] for m in a.models.split(",")}
    summary: dict[str, list] = {m: [] for m in models}
    lines = []
    for name in names:
        d = data[name]
        spread = d["y"].max() / max(1e-30, np.median(d["y"]))
        lines.append(f"\n{name}: {len(d['y'])} valid records, best/median throughput "
                     f"{spread:.1f}x, noise ceiling (pairwise agreement of two re-timings) "
                     f"{d['ceiling']:.3f}")
        lines.append(f"  {'model':<20} {'records:pw':>10} {'top' + str(a.k):>6} "
                     f"{'task:pw':>8} {'top' + str(a.k):>6} {'online:pw':>10} "
                     f"{'top' + str(a.k):>6}")
        for m, (feat, make) in models.items():
            X = d[feat]
            r = offline_records(make, X, d["y"], a.k)
            t = offline_task(make, data, feat, name, a.k)
            o = online(make, X, d["y"], a.k, a.batch, a.half_life)
            summary[m].append(r + t + o)
            lines.append(f"  {m:<20} {r[0]:>10.3f} {r[1]:>6.2f} {t[0]:>8.3f} {t[1]:>6.2f} "
                         f"{o[0]:>10.3f} {o[1]:>6.2f}")
    lines.append(f"\nmean over {len(names)} operators")
    for m, rows in summary.items():
        v = np.mean(rows, axis=0)
        lines.append(f"  {m:<20} {v[0]:>10.3f} {v[1]:>6.2f} {v[2]:>8.3f} {v[3]:>6.2f} "
                     f"{v[4]:>10.3f} {v[5]:>6.2f}")
    lines.append(f"\n(records: {4}-fold held-out records of the operator; task: trained on the "
                 f"other operators only; online: each batch of {a.batch} ranked by a model "
                 f"trained on the earlier ones, weight halving every {a.half_life:g} batches; "
                 f"pw: pairwise accuracy; top{a.k}: best throughput in the model's top {a.k} / "
                 f"best held out.  {time.perf_counter() - t0:.0f} s in all)")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
