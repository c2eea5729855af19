"""Cost models: predict which candidates are fast from their features.

``CostModel`` is the interface the search uses (``fit`` on measured records,
``predict`` a score per candidate, higher is faster).  ``XGBoostCostModel``
implements it with ``xgboost.train`` and one of three objectives:

* ``"pack-sum"`` — Ansor's pack-sum: the trees score each *store statement*
  (a row of ``features.unpack``) and a program's score is the sum over its stores.
  What is summed is time, which adds up over statements (throughput does not: a
  sum of per-statement throughputs ranks a program with more statements higher):
  the sum is fitted to the program's time relative to the best of its task
  (1 / normalized throughput, >= 1), by squared relative error; the score is its
  negation;
* ``"rank"`` — ``rank:pairwise`` on the packed vector (no sum over stores);
* ``"rank-ndcg"`` — ``rank:ndcg``, one query per task (relevance: normalized throughput);
* ``"reg"`` — ``reg:squarederror`` on the packed vector (the per-store rows
  of the heaviest stores in fixed slots, ``features.extract_features``) and throughput
  normalized by the best of its task;
* ``"reg-log"`` (default) — the same on ``log2`` of the normalized throughput (failed
  records at ``LOG_FLOOR``): a factor of two costs the same loss anywhere in the range,
  where ``reg``'s squared error on ratios in [0, 1] is spent on the few fast records and
  cannot tell the slow majority apart (pairwise accuracy counts all pairs alike).

Why ``reg-log``: on an operator held out of training (``benchmarks/eval_cost_model_heldout.py``
on 2174 stored tuning records of 70 tasks, 7 operators) it ranked 0.658 of pairs right vs
0.624 for ``reg`` (top-5 recall 0.90 vs 0.87), and 0.622 vs 0.567 online within a task
(batches of 8 in tuning order); ``rank-ndcg`` transfers as well (0.665) but ranks poorly
within one task from few records (0.44 online).

Why a packed-vector objective and not pack-sum: on the records of
``benchmarks/eval_cost_model.py`` (six operators, ~100 training records per task, as a
tuner has them) the trees that see all of a program's stores at once ranked held-out
records better (mean pairwise accuracy 0.80 vs 0.78 on held-out records, 0.79 vs 0.74
online; the old features and ``rank`` objective: 0.77 and 0.76) — a sum of per-store
scores cannot express interactions between stores (a producer computed inside its
consumer's loop, a cache stage), and learning around that needs more data than one
tuning run has.  Pack-sum transfers a little better to an unseen operator on some.
The script prints the comparison for every objective.

The analytic prior (``prior``, on by default for ``reg-log``): the trees are fitted to
the *residual* of the features' analytic estimate (``features.ESTIMATE_COLUMN``: the
program's estimated cycles per operation, ``analytic``), given to XGBoost as a base margin
(minus the log2 estimate; in training shifted per task to the mean of the task's labels).
The estimate transfers to an operator no record was measured of (it is a formula, not
learned); the trees learn what it misses.  Held out by operator
(``benchmarks/eval_cost_model_heldout.py --recompute``: 2391 records of 54 model tasks,
features recomputed): the estimate alone ranks 0.642 of pairs
right, ``reg-log`` on FEATURE_VERSION 6 0.661 without the prior and 0.673 with it
(FEATURE_VERSION 5's stored features, same records: 0.648).  Trials to within 5% of the
best (``benchmarks/eval_pretrained.py``) fall further with a pre-trained model than with
FEATURE_VERSION 5 (see that script's docstring).

``benchmarks/eval_cost_model.py`` compares them on held-out records of several
operators.  ``fit`` takes per-record ``weights`` (the tuner weights recent batches
up: online adaptation).  A model may start from a pre-trained booster (``base``, from
``autotune.pretrain``: trees fitted on records of many operators on this CPU): it ranks
before any record of the task is measured, and ``fit`` fine-tunes it -- adds
``finetune_rounds`` trees fitted to the job's own records on top of the base's
predictions (the base itself is never changed).  ``RandomModel`` is the baseline.
XGBoost runs with one thread by default: two threads contend with measurement on a small machine.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

import numpy as np

from tdsl.errors import TuningError

DEFAULT_OBJECTIVE = "reg-log"
OBJECTIVES = ("pack-sum", "rank", "rank-ndcg", "reg", "reg-log")
#: ``reg-log`` label floor: log2 of the normalized throughput, invalid records at this
LOG_FLOOR = -8.0


class CostModel(Protocol):
    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray,
            weights: "np.ndarray | None" = None) -> None:
        """Train on features ``X``, throughputs ``y`` (0: invalid), task ids ``groups``,
        optional per-record ``weights``."""

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


def _pack_sum_objective(prog: np.ndarray, label: np.ndarray, weight: np.ndarray):
    """Squared error of per-program sums of row scores (gradient per row = its program's)."""
    n = len(label)
    # a leaf holding all k rows of a program moves its sum k times the leaf value: the
    # hessian per row is scaled by k so the Newton step on the sum is not overshot k-fold
    k = np.bincount(prog, minlength=n).astype(np.float64)

    def obj(preds: np.ndarray, _dtrain) -> tuple[np.ndarray, np.ndarray]:
        s = np.bincount(prog, weights=preds, minlength=n)
        g = weight * (s - label)
        return g[prog], (weight * k)[prog]
    return obj


@dataclass
class XGBoostCostModel:
    """A gradient-boosted tree model over candidate features."""

    objective: str = DEFAULT_OBJECTIVE
    num_rounds: int = 60
    max_depth: int = 6
    eta: float = 0.2
    nthread: int = 1
    seed: int = 0
    #: a pre-trained ``xgboost.Booster`` to start from (same objective, ``pretrain``)
    base: Any = None
    #: trees added on top of ``base`` by each ``fit``
    finetune_rounds: int = 20
    #: fit the residual of the features' analytic estimate (``reg-log`` only)
    prior: bool = True

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise TuningError(f"cost model objective must be one of {OBJECTIVES}, got "
                              f"{self.objective!r}")
        if self.base is not None and self.packed:
            raise TuningError("a pre-trained base model scores the packed vector: it needs "
                              f"'reg', 'reg-log', 'rank' or 'rank-ndcg', not {self.objective!r}")
        self._booster = None

    @property
    def trained(self) -> bool:
        return self._booster is not None or self.base is not None

    @property
    def ranking(self) -> bool:
        return self.objective.startswith("rank")

    @property
    def packed(self) -> bool:
        return self.objective.startswith("pack-")

    @property
    def uses_prior(self) -> bool:
        return self.prior and self.objective == "reg-log"

    def _margin(self, X: np.ndarray, gid: "np.ndarray | None" = None,
                label: "np.ndarray | None" = None) -> "np.ndarray | None":
        """The prior's base margin: minus the log2 estimated cycles per operation; in
        training (``gid``, ``label``) less its mean per task plus the task's mean label, so
        each task's estimates start around its labels (XGBoost's own base score is unused
        when a margin is given).  A constant shift does not change a ranking: ``predict``
        needs none.  None for vectors of another length than this version's (stored
        features of an older version, in an evaluation): they carry no estimate."""
        from .features import ESTIMATE_COLUMN, FEATURE_LEN
        if not self.uses_prior or X.ndim != 2 or X.shape[1] != FEATURE_LEN:
            return None
        m = -X[:, ESTIMATE_COLUMN].astype(np.float64)
        if gid is not None and label is not None and len(m):
            k = int(gid.max()) + 1
            n = np.bincount(gid, minlength=k).astype(np.float64)
            shift = (np.bincount(gid, weights=label, minlength=k) -
                     np.bincount(gid, weights=m, minlength=k)) / np.maximum(n, 1.0)
            m = m + shift[gid]
        return m

    def params(self) -> dict:
        p = {"max_depth": self.max_depth, "eta": self.eta, "nthread": self.nthread,
             "seed": self.seed, "verbosity": 0, "subsample": 1.0, "min_child_weight": 1,
             "gamma": 1e-4 if not self.ranking else 0.0, "tree_method": "hist"}
        if self.objective == "rank":
            p.update({"objective": "rank:pairwise", "lambdarank_pair_method": "mean",
                      "lambdarank_num_pair_per_sample": 8})
        elif self.objective == "rank-ndcg":
            p.update({"objective": "rank:ndcg", "lambdarank_pair_method": "topk",
                      "lambdarank_num_pair_per_sample": 32, "ndcg_exp_gain": False})
        elif self.objective in ("reg", "reg-log"):
            p.update({"objective": "reg:squarederror"})
        else:
            p.update({"base_score": 0.0, "disable_default_eval_metric": 1,
                      "min_child_weight": 1e-3})
        return p

    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray,
            weights: "np.ndarray | None" = None) -> None:
        import xgboost as xgb
        X = np.asarray(X, dtype=np.float32)
        y = np.asarray(y, dtype=np.float64)
        groups = np.asarray(groups)
        w = np.ones(len(y)) if weights is None else np.asarray(weights, dtype=np.float64)
        if len(X) < 2 or np.all(y <= 0):
            return
        _, gid = np.unique(groups, return_inverse=True)
        order = np.argsort(gid, kind="stable")
        X, y, gid, w = X[order], y[order], gid[order], w[order]
        label = normalize(y, gid)
        if self.packed:
            from .features import unpack
            rows, prog = unpack(X)
            dm = xgb.DMatrix(rows)
            # time relative to the task's best (>= 1) is additive over statements;
            # squared *relative* error: weight 1 / t^2.  An invalid record counts as
            # twice as slow as the slowest valid one.
            ok = label > 0
            t = np.where(ok, 1.0 / np.where(ok, label, 1.0), 0.0)
            t[~ok] = 2.0 * (t[ok].max() if ok.any() else 1.0)
            obj = _pack_sum_objective(prog, t, w / t ** 2)
            self._booster = xgb.train(self.params(), dm, num_boost_round=self.num_rounds,
                                      obj=obj)
            return
        if self.objective == "reg-log":     # every factor of 2 weighs alike; failed: floor
            ok = label > 0
            label = np.where(ok, np.maximum(np.log2(np.where(ok, label, 1.0)), LOG_FLOOR),
                             LOG_FLOOR)
        if self.ranking:
            # relevance grades: rank:pairwise only compares labels within a query
            # (per-record weights don't apply: rank:pairwise weighs whole queries)
            dm = xgb.DMatrix(X, label=label, qid=gid)
        else:
            dm = xgb.DMatrix(X, label=label, weight=w)
        margin = self._margin(X, gid, label)
        if margin is not None:
            dm.set_base_margin(margin)
        if self.base is not None:       # fine-tune: more trees on top of the base's scores
            self._booster = xgb.train(self.params(), dm, num_boost_round=self.finetune_rounds,
                                      xgb_model=self.base)
            return
        self._booster = xgb.train(self.params(), dm, num_boost_round=self.num_rounds)

    def predict(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=np.float32)
        booster = self._booster if self._booster is not None else self.base
        if booster is None:
            return np.zeros(len(X))
        import xgboost as xgb
        if self.packed:
            from .features import unpack
            rows, prog = unpack(X)
            p = booster.predict(xgb.DMatrix(rows), output_margin=True)
            total = np.bincount(prog, weights=p, minlength=len(X))
            return -total if self.objective == "pack-sum" else total
        dm = xgb.DMatrix(X)
        margin = self._margin(X)
        if margin is not None:
            dm.set_base_margin(margin)
        return booster.predict(dm)


class RandomModel:
    """Scores at random: the baseline a learned model must beat."""

    def __init__(self, seed: int = 0):
        self._rng = np.random.default_rng(seed)

    trained = True

    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray,
            weights: "np.ndarray | None" = None) -> None:
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
