"""Measured datasets for evaluating cost models (used by tests and benchmarks).

``measure_random(task, n)`` measures ``n`` random legal candidates of a task in
this process (build + ``time_evaluator``) and returns features and throughputs;
``split_eval`` trains a model on part of them and scores the rest.
"""
from __future__ import annotations

import random
from typing import Any

import numpy as np

import tdsl as td

from .cost_model import pairwise_accuracy, top_k_recall
from .features import extract_features
from .replay import replay
from .search import CandidatePool


def measure_random(task: Any, n: int, seed: int = 0, min_repeat_ms: float = 5.0,
                   n_threads: "int | None" = 1) -> tuple[np.ndarray, np.ndarray]:
    """Features and throughputs (flop/s) of ``n`` random legal candidates of ``task``.

    ``n_threads`` (default 1) sets ``TDSL_NUM_THREADS`` while timing: single-thread
    timings stay meaningful on a machine shared with other work.
    """
    import os
    from .measure_jobs import random_arrays
    saved = os.environ.get("TDSL_NUM_THREADS")
    if n_threads:
        os.environ["TDSL_NUM_THREADS"] = str(n_threads)
    try:
        return _measure(task, n, seed, min_repeat_ms, random_arrays)
    finally:
        if saved is None:
            os.environ.pop("TDSL_NUM_THREADS", None)
        else:
            os.environ["TDSL_NUM_THREADS"] = saved


def _measure(task: Any, n: int, seed: int, min_repeat_ms: float, random_arrays: Any
             ) -> tuple[np.ndarray, np.ndarray]:
    pool = CandidatePool(task)
    cands = pool.random_valid(n, random.Random(seed), set())
    arrays = random_arrays(task.args, task.sizes, seed)
    X, y = [], []
    for c in cands:
        mod = td.build(replay(c.trace, task.outputs), task.args, target=task.target)
        res = mod.time_evaluator(number=1, repeat=3, min_repeat_ms=min_repeat_ms)(*arrays)
        X.append(extract_features(c.func, task.sizes))
        y.append(task.flop / float(min(res.results)))   # the least disturbed run
    return np.stack(X), np.asarray(y)


def cross_eval(make_model: Any, X: np.ndarray, y: np.ndarray, folds: int = 3) -> dict:
    """Mean ranking quality over ``folds`` train/test splits (each fold held out once)."""
    idx = np.arange(len(X))
    accs, recalls = [], []
    for f in range(folds):
        test = idx[f::folds]
        train = np.setdiff1d(idx, test)
        model = make_model()
        model.fit(X[train], y[train], np.zeros(len(train), dtype=int))
        scores = model.predict(X[test])
        accs.append(pairwise_accuracy(scores, y[test]))
        recalls.append(top_k_recall(scores, y[test], 5))
    return {"pairwise_accuracy": float(np.mean(accs)), "top5_recall": float(np.mean(recalls))}


def split_eval(model: Any, X: np.ndarray, y: np.ndarray, n_train: int) -> dict:
    """Train on the first ``n_train`` rows, report ranking quality on the rest."""
    groups = np.zeros(len(X), dtype=int)
    model.fit(X[:n_train], y[:n_train], groups[:n_train])
    scores = model.predict(X[n_train:])
    return {"pairwise_accuracy": pairwise_accuracy(scores, y[n_train:]),
            "top5_recall": top_k_recall(scores, y[n_train:], 5)}
