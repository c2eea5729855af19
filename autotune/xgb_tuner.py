"""``XGBTuner``: the model-based tuner (split from ``tuner.py``, which holds the measure loop).

An XGBoost cost model (``cost_model.XGBoostCostModel``) ranks the candidates an evolutionary
search proposes; it is retrained after every batch on the task's records, optionally on
other tasks' records (``transfer_from``) and starting from a model pre-trained on this CPU
(``pretrained``, ``autotune.pretrain``).
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

import numpy as np

from .cost_model import XGBoostCostModel
from .database import Database, Record, open_database
from .features import FEATURE_LEN, FEATURE_VERSION, extract_features
from .measure import MeasureErrorNo, MeasureResult
from .search import EvolutionarySearch
from .task import Candidate, Task
from .tuner import DEFAULT_KEY, Tuner
from tdsl.errors import TuningError


#: Share drawn at random of the batches before a task has a batch of its own records, when
#: the model is pre-trained (``autotune.pretrain``).
PRETRAINED_FIRST_EPSILON = 0.0


class XGBTuner(Tuner):
    """Model-based tuner: an XGBoost cost model ranks candidates found by evolutionary search.

    ``epsilon``: share of each batch drawn at random (exploration);
    ``objective``: one of ``cost_model.OBJECTIVES`` (default ``DEFAULT_OBJECTIVE``);
    ``transfer_from``: a database (or records) whose records of *other* tasks
    with the same target pre-train the model;
    ``pretrained``: a cost model pre-trained on this CPU (``autotune.pretrain``) to start
    from and fine-tune on the task's records: ``"auto"`` (default: this CPU's model when
    ``python -m tdsl.autotune.pretrain`` has made one, else none), ``"off"``/None, a file,
    or a ``PretrainedModel``; one made on another CPU is ignored with a warning.

    Online adaptation: the model is retrained after every batch on all records so
    far, each weighted by its age — a record's weight halves every ``half_life``
    batches (records of earlier runs and of other tasks count as the oldest), so
    the model follows the region the search is in now.
    """

    def __init__(self, task: Task, objective: "str | None" = None, epsilon: float = 0.1,
                 seed: int = 0, search: "EvolutionarySearch | None" = None,
                 transfer_from: "Database | str | Iterable[Record] | None" = None,
                 num_rounds: "int | None" = None, nthread: int = 1,
                 half_life: float = 2.0, pretrained: Any = "auto"):
        super().__init__(task, seed)
        kwargs: dict = {"nthread": nthread, "seed": seed}
        if num_rounds is not None:
            kwargs["num_rounds"] = num_rounds
        if objective:
            kwargs["objective"] = objective
        self.model = XGBoostCostModel(**kwargs)
        from .pretrain import resolve
        self.pretrained = resolve(pretrained, self.model.objective)
        if self.pretrained is not None:
            # its trees are a residual of the analytic prior when it was trained with one
            self.model.base = self.pretrained.booster()
            self.model.prior = bool(self.pretrained.meta.get("prior", False))
        self.epsilon = epsilon
        self.half_life = half_life
        self.search = search or EvolutionarySearch()
        self.X: list[np.ndarray] = []
        self.y: list[float] = []
        self.groups: list[str] = []
        self.batch_of: list[int] = []    # the batch a record came in (0: history, transfer)
        self.batches = 0
        self.top_points: list[tuple[float, tuple]] = []
        if transfer_from is not None:
            self._transfer(transfer_from)

    def _transfer(self, src: Any) -> None:
        if isinstance(src, (Database, str)):
            db = open_database(src, create=False)
            recs = db.records(target=str(self.task.target))
        else:
            recs = list(src)
        n = 0
        for r in recs:
            if r.task_key == self.task.key or r.features is None or \
                    r.feature_version != FEATURE_VERSION or len(r.features) != FEATURE_LEN:
                continue
            self._add(r.features, r, r.task_key)
            n += 1
        if n:
            self._retrain(force=True)

    def _add(self, feats: np.ndarray, r: Any, group: str) -> None:
        self.X.append(np.asarray(feats, dtype=np.float32))
        cost = r.cost if isinstance(r, Record) else r.median
        self.y.append(1.0 / cost if r.valid and math.isfinite(cost) and cost > 0 else 0.0)
        self.groups.append(group)
        self.batch_of.append(self.batches)

    def weights(self) -> np.ndarray:
        """Per record: ``0.5 ** (age in batches / half_life)``."""
        age = self.batches - np.asarray(self.batch_of, dtype=np.float64)
        if not self.half_life or not math.isfinite(self.half_life):
            return np.ones(len(age))
        return 0.5 ** (age / self.half_life)

    def load_history(self, records: Iterable[Record]) -> None:
        for r in records:
            if r.error_no is MeasureErrorNo.INSTANTIATION_ERROR:
                continue
            feats = r.features
            point = None
            if feats is None or r.feature_version != FEATURE_VERSION or \
                    len(feats) != FEATURE_LEN:
                c = self.task.lower_trace(r.trace)
                if not c.valid:
                    continue
                feats = extract_features(c.func, self.task.sizes)
            try:
                point = self.task.space.point_of(r.config)
            except TuningError:  # a record made with another space (an older template)
                point = None
            self._add(feats, r, self.task.key)
            if point is not None and r.valid:
                self.top_points.append((r.cost, point))
        self._retrain()

    def next_batch(self, n: int) -> list[Candidate]:
        if not self.model.trained:
            return self.pool.random_valid(n, self.rng, self.measured)
        own = sum(1 for g in self.groups if g == self.task.key)
        # a model trained only on other tasks (transfer) gets more exploration at first; a
        # pre-trained one (many operators of this CPU) fills the first batch with its own
        # picks: replayed on stored records of held-out operators (eval_pretrained.py), 8 of
        # 8 model picks found a program within 5% of the best in 10.3 trials on average, 6
        # of 8 (and 2 random) in 12.4, an untrained model in 21.9
        eps = self.epsilon if own >= n else \
            (PRETRAINED_FIRST_EPSILON if self.pretrained is not None else max(self.epsilon, 0.5))
        n_random = max(0, int(round(n * eps)))
        seeds = [p for _, p in sorted(self.top_points)[:32]]
        out = self.search.propose(self.pool, self.model, n - n_random, self.measured, seeds,
                                  self.rng)
        taken = self.measured | {c.prog_hash for c in out}
        out += self.pool.random_valid(n - len(out), self.rng, taken)
        return out

    def update(self, cands: Sequence[Candidate], results: Sequence[MeasureResult]) -> None:
        self.batches += 1
        for c, r in zip(cands, results):
            f = self._features(c)
            if f is None:
                continue
            self._add(f, r, self.task.key)
            if r.valid and DEFAULT_KEY not in c.config:
                self.top_points.append((r.median, c.point))
        self._retrain()

    def _retrain(self, force: bool = False) -> None:
        # a pre-trained model is fine-tuned from the first records on
        if len(self.X) >= 8 or ((force or self.model.base is not None) and len(self.X) >= 2):
            with self.phases("train"):
                self.model.fit(np.stack(self.X), np.asarray(self.y), np.asarray(self.groups),
                               weights=self.weights())
