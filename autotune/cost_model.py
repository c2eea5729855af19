"""Cost models: predict which candidates are fast from their features.

``CostModel`` is the interface the search uses (``fit`` on measured records,
``predict`` a score per candidate, higher is faster).  ``XGBoostCostModel``
implements it with ``xgboost.train`` and one of two objectives:

* ``"rank"`` — ``rank:pairwise`` within each task (a record's label is its
  throughput; only the order inside a task matters);
* ``"reg"`` — ``reg:squarederror`` on throughput normalized by the task's best.

Both are compared on held-out records by ``benchmarks/bench_tuning.py`` and by
``tests/autotune/test_cost_model.py``; ``DEFAULT_OBJECTIVE`` is the better one.
``RandomModel`` is the baseline.  XGBoost runs with one thread by default: two
threads contend with measurement on a small machine.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from tdsl.errors import TuningError

DEFAULT_OBJECTIVE = "rank"


class CostModel(Protocol):
    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray) -> None:
        """Train on features ``X``, throughputs ``y`` (0: invalid), task ids ``groups``."""

    def predict(self, X: np.ndarray) -> np.ndarray:
        """A score per row; higher means faster."""

    @property
    def trained(self) -> bool: ...


def normalize(y: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Throughput divided by the best throughput of its task (in [0, 1])."""
    out = np.zeros_like(y, dtype=np.float64)
    for g in np.unique(groups):
        m = groups == g
        best = y[m].max()
        if best > 0:
            out[m] = y[m] / best
    return out


@dataclass
class XGBoostCostModel:
    """A gradient-boosted tree model over candidate features."""

    objective: str = DEFAULT_OBJECTIVE
    num_rounds: int = 40
    max_depth: int = 4
    eta: float = 0.2
    nthread: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        if self.objective not in ("rank", "reg"):
            raise TuningError(f"cost model objective must be 'rank' or 'reg', got {self.objective!r}")
        self._booster = None

    @property
    def trained(self) -> bool:
        return self._booster is not None

    def params(self) -> dict:
        p = {"max_depth": self.max_depth, "eta": self.eta, "nthread": self.nthread,
             "seed": self.seed, "verbosity": 0, "subsample": 1.0, "min_child_weight": 1,
             "gamma": 1e-4 if self.objective == "reg" else 0.0, "tree_method": "hist"}
        if self.objective == "rank":
            p.update({"objective": "rank:pairwise", "lambdarank_pair_method": "mean",
                      "lambdarank_num_pair_per_sample": 8})
        else:
            p.update({"objective": "reg:squarederror"})
        return p

    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray) -> None:
        import xgboost as xgb
        X = np.asarray(X, dtype=np.float32)
        y = np.asarray(y, dtype=np.float64)
        groups = np.asarray(groups)
        if len(X) < 2 or np.all(y <= 0):
            return
        _, gid = np.unique(groups, return_inverse=True)
        order = np.argsort(gid, kind="stable")
        X, y, gid = X[order], y[order], gid[order]
        label = normalize(y, gid)
        if self.objective == "rank":
            # relevance grades: rank:pairwise only compares labels within a query
            dm = xgb.DMatrix(X, label=label, qid=gid)
        else:
            dm = xgb.DMatrix(X, label=label)
        self._booster = xgb.train(self.params(), dm, num_boost_round=self.num_rounds)

    def predict(self, X: np.ndarray) -> np.ndarray:
        if self._booster is None:
            return np.zeros(len(X))
        import xgboost as xgb
        return self._booster.predict(xgb.DMatrix(np.asarray(X, dtype=np.float32)))


class RandomModel:
    """Scores at random: the baseline a learned model must beat."""

    def __init__(self, seed: int = 0):
        self._rng = np.random.default_rng(seed)

    trained = True

    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray) -> None:
        pass

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self._rng.random(len(X))


def pairwise_accuracy(scores: Sequence[float], y: Sequence[float], groups: "Sequence | None" = None,
                      max_pairs: int = 200_000, seed: int = 0) -> float:
    """Fraction of pairs (same group, different throughput) that ``scores`` order correctly."""
    s = np.asarray(scores, dtype=np.float64)
    t = np.asarray(y, dtype=np.float64)
    g = np.zeros(len(s)) if groups is None else np.asarray(groups)
    rng = random.Random(seed)
    right = total = 0
    for grp in np.unique(g):
        idx = np.nonzero(g == grp)[0]
        pairs = [(a, b) for ai, a in enumerate(idx) for b in idx[ai + 1:]]
        if len(pairs) > max_pairs:
            pairs = rng.sample(pairs, max_pairs)
        for a, b in pairs:
            if t[a] == t[b]:
                continue
            total += 1
            if (s[a] - s[b]) * (t[a] - t[b]) > 0:
                right += 1
    return right / total if total else 0.5


def top_k_recall(scores: Sequence[float], y: Sequence[float], k: int) -> float:
    """Best true throughput among the model's top ``k`` picks / the best overall."""
    s = np.asarray(scores)
    t = np.asarray(y)
    if not len(t) or t.max() <= 0:
        return 0.0
    top = np.argsort(-s)[:k]
    return float(t[top].max() / t.max())
