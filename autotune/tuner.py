"""Tuners: the measure loop (batches, records, early stopping, error counting).

``Tuner.tune`` repeats: ask ``next_batch`` for candidates, record illegal ones as
``INSTANTIATION_ERROR`` (never retried), measure the legal ones, write each result
to the database as it arrives, call ``update`` and the callbacks.  It resumes
from the database: programs already measured for the task count towards
``n_trial`` and are never measured again, and their records train the model.

The first batch always holds the untuned programs (``default_candidates``: the
default schedule, and ``ops.schedule``'s when the computation is made of
``tdsl.ops`` operators), so the result is never worse than untuned.  At the end
the ``remeasure_top`` fastest programs (and the untuned ones within
``REMEASURE_DEFAULT_WITHIN`` of the best) are timed again,
round-robin over ``remeasure_rounds`` rounds (``MeasureOption.remeasure``); those
figures go to the database (``Database.add_remeasure``) and pick the best.

``XGBTuner`` ranks candidates with an ``XGBoostCostModel`` retrained after every
batch (``transfer_from`` adds records of other tasks to its training data);
``RandomTuner`` and ``GridSearchTuner`` are the baselines.  Proposing and training
happen only between batches: ``measure`` returns when the whole batch is timed,
so the tuner's own work never competes with a timed kernel for the CPUs.
"""
from __future__ import annotations

import hashlib
import math
import random
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Sequence

import numpy as np

from tdsl.errors import TDSLError, TuningError
from tdsl.keywords import check_keywords

from .cost_model import XGBoostCostModel
from .database import Database, Record, best_records, claim_owner, open_database
from .features import FEATURE_LEN, FEATURE_VERSION, extract_features
from .measure import MeasureErrorNo, MeasureInput, MeasureOption, MeasureResult, measure_option

#: Config key marking an untuned program (its value says which: "default", "ops.schedule").
DEFAULT_KEY = "__default__"
#: The final re-measurement re-times an untuned program only when its search figure is
#: within this factor of the best one's.
REMEASURE_DEFAULT_WITHIN = 2.0
from .search import CandidatePool, EvolutionarySearch
from .task import Candidate, Task


@dataclass
class TuneResult:
    """What a ``tune`` call did: trials measured now and before, the best record, the curve."""

    task_key: str
    trials: int = 0
    resumed: int = 0
    concurrent: int = 0   # trials other tuners sharing the database measured meanwhile
    best: Optional[Record] = None
    seconds: float = 0.0
    errors: dict = field(default_factory=dict)
    curve: list = field(default_factory=list)  # (trial, best GFLOP/s, elapsed seconds)
    stopped_early: bool = False

    @property
    def best_gflops(self) -> float:
        return self.best.gflops if self.best else 0.0


class Tuner:
    """Base class: subclasses implement ``next_batch`` and ``update``."""

    def __init__(self, task: Task, seed: int = 0):
        self.task = task
        self.rng = random.Random(seed)
        self.pool = CandidatePool(task)
        self.measured: set[str] = set()
        self.best_cost = math.inf
        self.best_record: Optional[Record] = None
        self.resumed = 0

    # ---- to implement ----------------------------------------------------------------------
    def next_batch(self, n: int) -> list[Candidate]:
        raise NotImplementedError

    def update(self, cands: Sequence[Candidate], results: Sequence[MeasureResult]) -> None:
        """Learn from measured candidates (default: nothing)."""

    def load_history(self, records: Iterable[Record]) -> None:
        """Learn from earlier records of this task (default: nothing)."""

    def default_candidates(self) -> list[Candidate]:
        """The untuned programs: the default schedule (an empty trace) and, when the
        computation has ``tdsl.ops`` operators, ``ops.schedule``'s (legal ones only)."""
        out = []
        naive = self.task.lower_trace("[]", (), {DEFAULT_KEY: "default"})
        if naive.valid:
            out.append(naive)
        from tdsl.ops import kind_of, schedule as ops_schedule
        if any(kind_of(op) is not None for op in _all_ops(self.task.outputs)):
            try:
                trace = ops_schedule([op.output(0) for op in self.task.outputs],
                                     self.task.target).trace.to_json()
            except TDSLError:
                trace = None
            if trace is not None:
                c = self.task.lower_trace(trace, (), {DEFAULT_KEY: "ops.schedule"})
                if c.valid and all(c.prog_hash != d.prog_hash for d in out):
                    out.append(c)
        return out

    # ---- the loop --------------------------------------------------------------------------
    @check_keywords
    def tune(self, n_trial: int, measure_option: "MeasureOption | None" = None,
             callbacks: Sequence[Callable] = (), db: "Database | str | None" = None,
             early_stopping: "int | None" = None, batch_size: int = 24,
             timeout: "float | None" = None, error_limit: int = 64,
             measure_default: bool = True, remeasure_top: int = 5,
             remeasure_rounds: int = 3) -> TuneResult:
        """Measure up to ``n_trial`` candidates in total (records already in ``db`` count).

        ``callbacks`` are called as ``cb(tuner, inputs, results)`` after each batch;
        ``early_stopping``: stop after that many trials without a better one;
        ``timeout``: stop after that many seconds; ``error_limit``: raise
        ``TuningError`` if that many measurements in a row failed from the start
        (a broken setup rather than bad candidates); ``measure_default``: put the
        untuned programs (``default_candidates``) in the first batch;
        ``remeasure_top``/``remeasure_rounds``: re-time that many of the fastest
        programs (plus the untuned ones), interleaved, in that many rounds at the end
        (0: don't), and pick the best by those figures.
        """
        own_option = measure_option is None
        mopt = measure_option or _default_option()
        database = open_database(db)
        res = TuneResult(self.task.key)
        t0 = time.perf_counter()
        history = database.records(self.task.key)
        self._resume(history, res)
        owner = claim_owner()
        seen = max((r.id for r in history if r.id is not None), default=0)
        own_ids: set[int] = set()
        self.resumed = res.resumed
        last_improve = res.resumed
        any_ok = any(r.valid for r in history)
        consecutive_errors = 0
        empty_batches = 0
        defaults = [c for c in self.default_candidates() if c.prog_hash not in self.measured] \
            if measure_default else []
        self.measured.update(c.prog_hash for c in defaults)
        try:
            while res.resumed + res.concurrent + res.trials < n_trial:
                if timeout is not None and time.perf_counter() - t0 > timeout:
                    break
                seen = self._catch_up(database, seen, own_ids, res)
                # programs other tuners are measuring now will count too
                done = res.resumed + res.concurrent + res.trials + \
                    database.in_flight(self.task.key, owner)
                if done >= n_trial:
                    break
                want = min(batch_size, n_trial - done)
                batch, defaults = defaults[:want], defaults[want:]
                if len(batch) < want:
                    batch += self.next_batch(want - len(batch))
                # another tuner on this database may be measuring the same programs: take
                # only those claimed now (the others count as measured, never proposed again)
                mine = database.claim(self.task.key, [c.prog_hash if c.valid else
                                                      _illegal_hash(c) for c in batch], owner)
                legal = []
                for c in batch:
                    if (c.prog_hash if c.valid else _illegal_hash(c)) not in mine:
                        self.measured.add(c.prog_hash if c.valid else _illegal_hash(c))
                    elif c.valid:
                        legal.append(c)
                    else:
                        self._record_illegal(database, c, res)
                if not legal:
                    empty_batches += 1
                    if not batch or empty_batches >= 20:
                        break  # space exhausted (or nothing legal left to propose)
                    continue
                empty_batches = 0
                best_before = self.best_cost
                inputs = [MeasureInput(self.task, c.config, c.trace, c.prog_hash) for c in legal]
                for c in legal:
                    self.measured.add(c.prog_hash)

                def on_result(i: int, r: MeasureResult) -> None:
                    rec = self._record(legal[i], r)
                    own_ids.add(database.add(rec))
                    if rec.valid and rec.cost < self.best_cost:
                        self.best_cost = rec.cost
                        self.best_record = rec
                results = mopt.measure(inputs, self.best_cost, on_result)
                for r in results:
                    res.trials += 1
                    res.errors[r.error_no.name] = res.errors.get(r.error_no.name, 0) + 1
                    if r.valid:
                        any_ok = True
                        consecutive_errors = 0
                    else:
                        consecutive_errors += 1
                    n_done = res.resumed + res.trials
                    res.curve.append((n_done, self._best_gflops(), time.perf_counter() - t0))
                if self.best_cost < best_before:
                    last_improve = res.resumed + res.trials
                if not any_ok and consecutive_errors >= error_limit:
                    raise TuningError(f"task {self.task.name!r}: the first {consecutive_errors} "
                                      f"measurements all failed; last error: "
                                      f"{results[-1].error_no.name}: {results[-1].error_msg[-500:]}")
                self.update(legal, results)
                for cb in callbacks:
                    cb(self, inputs, results)
                if early_stopping is not None and \
                        res.resumed + res.trials - last_improve >= early_stopping:
                    res.stopped_early = True
                    break
            if remeasure_top > 0 and remeasure_rounds > 0:
                self._remeasure(database, mopt, remeasure_top, remeasure_rounds, res.trials > 0)
        finally:
            if own_option:
                mopt.close()
            try:
                database.release(self.task.key, owner)
            except TuningError:
                pass                # claims lapse by themselves
        res.best = self.best_record
        res.seconds = time.perf_counter() - t0
        if res.best is None and res.trials:
            warnings.warn(f"task {self.task.name!r}: no valid candidate in {res.trials} trials "
                          f"({res.errors})", stacklevel=2)
        return res

    def _remeasure(self, database: Database, mopt: MeasureOption, k: int, rounds: int,
                   measured_now: bool) -> None:
        """Re-time the ``k`` fastest programs (by their search figures) and the untuned
        ones, interleaved; store the figures and choose the best by them."""
        first: dict[str, Record] = {}
        for r in database.records(self.task.key):
            if r.valid:
                first.setdefault(r.prog_hash, r)
        ranked = sorted(first.values(), key=lambda r: r.search_cost)
        # an untuned program far slower than the best cannot win: re-timing it (a naive
        # 512^3 matmul runs for a second) would only eat the budget
        near = ranked[0].search_cost * REMEASURE_DEFAULT_WITHIN if ranked else 0.0
        chosen = ranked[:k] + [r for r in ranked[k:]
                               if DEFAULT_KEY in r.config and r.search_cost <= near]
        if not chosen:
            return
        latest = max(r.final_pass for r in first.values())
        if not measured_now and latest and all(r.final_pass == latest for r in chosen):
            return          # a resumed job with nothing new: its last pass still holds
        inputs = [MeasureInput(self.task, r.config, r.trace, r.prog_hash) for r in chosen]
        pass_id = max(time.time_ns() // 1_000_000, latest + 1)
        for r, m in zip(chosen, mopt.remeasure(inputs, rounds)):
            if m.valid:
                database.add_remeasure(r, pass_id, m.costs)
        best = best_records(database.records(self.task.key), 1)
        if best:
            self.best_record = best[0]
            self.best_cost = best[0].cost

    def _catch_up(self, database: Database, seen: int, own_ids: set, res: TuneResult) -> int:
        """Take in the records other tuners wrote to the database since row ``seen``:
        their programs are never measured here, their trials count towards the budget
        and they train the model.  Returns the last row seen."""
        new = [r for r in database.records_after(self.task.key, seen) if r.id not in own_ids]
        if not new:
            return max([seen] + list(own_ids))
        for r in new:
            self.measured.add(r.prog_hash)
        res.concurrent += sum(1 for r in new
                              if r.error_no is not MeasureErrorNo.INSTANTIATION_ERROR)
        best = best_records(new, 1)
        if best and best[0].cost < self.best_cost:
            self.best_cost, self.best_record = best[0].cost, best[0]
        self.load_history(new)
        return max([seen] + list(own_ids) + [r.id for r in new])

    def _best_gflops(self) -> float:
        return self.task.flop / self.best_cost / 1e9 if math.isfinite(self.best_cost) else 0.0

    def _resume(self, history: list[Record], res: TuneResult) -> None:
        measured = [r for r in history if r.error_no is not MeasureErrorNo.INSTANTIATION_ERROR]
        res.resumed = len(measured)
        for r in history:
            self.measured.add(r.prog_hash)
        best = best_records(history, 1)
        if best:
            self.best_cost = best[0].cost
            self.best_record = best[0]
        if history:
            self.load_history(history)

    def _features(self, c: Candidate) -> "np.ndarray | None":
        if DEFAULT_KEY not in c.config and c.point in self.pool.by_point:
            return self.pool.feature(c.point)
        return extract_features(c.func, self.task.sizes) if c.func is not None else None

    def _record(self, c: Candidate, r: MeasureResult) -> Record:
        feats = self._features(c)
        return Record(self.task.key, self.task.description, str(self.task.target), c.config,
                      c.trace, c.prog_hash, r.costs, r.error_no, r.error_msg, self.task.flop,
                      r.all_cost, r.timestamp, self.task.signature, self.task.workload,
                      self.task.sizes, feats,
                      FEATURE_VERSION if feats is not None else 0)

    def _record_illegal(self, database: Database, c: Candidate, res: TuneResult) -> None:
        h = _illegal_hash(c)
        if h in self.measured:
            return
        self.measured.add(h)
        res.errors["INSTANTIATION_ERROR"] = res.errors.get("INSTANTIATION_ERROR", 0) + 1
        database.add(Record(self.task.key, self.task.description, str(self.task.target), c.config,
                            c.trace, h, (), MeasureErrorNo.INSTANTIATION_ERROR, c.error[-2000:],
                            self.task.flop, 0.0, time.time(), self.task.signature,
                            self.task.workload, self.task.sizes))


def _illegal_hash(c: Candidate) -> str:
    """The program hash an illegal candidate is recorded under (by trace, else config)."""
    key = "illegal:" + c.trace if c.trace != "[]" else "illegal:" + repr(c.config)
    return "illegal-" + hashlib.blake2b(key.encode(), digest_size=12).hexdigest()


def _all_ops(outputs: Sequence[Any]) -> list:
    """Every operation ``outputs`` depend on (each once)."""
    seen: dict[int, Any] = {}
    stack = list(outputs)
    while stack:
        op = stack.pop()
        if id(op) in seen:
            continue
        seen[id(op)] = op
        stack.extend(t.op for t in getattr(op, "input_tensors", ()))
    return list(seen.values())


def _default_option() -> MeasureOption:
    return measure_option()


class RandomTuner(Tuner):
    """Random legal candidates, never the same program twice."""

    def next_batch(self, n: int) -> list[Candidate]:
        return self.pool.random_valid(n, self.rng, self.measured)


class GridSearchTuner(Tuner):
    """Every point in order (small spaces)."""

    def __init__(self, task: Task, seed: int = 0):
        super().__init__(task, seed)
        self._it = task.space.iter_points()

    def next_batch(self, n: int) -> list[Candidate]:
        out: list[Candidate] = []
        for p in self._it:
            c = self.pool.get(p)
            if not c.valid or c.prog_hash not in self.measured:
                out.append(c)
            if len(out) >= n:
                break
        return out


class XGBTuner(Tuner):
    """Model-based tuner: an XGBoost cost model ranks candidates found by evolutionary search.

    ``epsilon``: share of each batch drawn at random (exploration);
    ``objective``: one of ``cost_model.OBJECTIVES`` (default ``DEFAULT_OBJECTIVE``);
    ``transfer_from``: a database (or records) whose records of *other* tasks
    with the same target pre-train the model.

    Online adaptation: the model is retrained after every batch on all records so
    far, each weighted by its age — a record's weight halves every ``half_life``
    batches (records of earlier runs and of other tasks count as the oldest), so
    the model follows the region the search is in now.
    """

    def __init__(self, task: Task, objective: "str | None" = None, epsilon: float = 0.1,
                 seed: int = 0, search: "EvolutionarySearch | None" = None,
                 transfer_from: "Database | str | Iterable[Record] | None" = None,
                 num_rounds: "int | None" = None, nthread: int = 1,
                 half_life: float = 2.0):
        super().__init__(task, seed)
        kwargs: dict = {"nthread": nthread, "seed": seed}
        if num_rounds is not None:
            kwargs["num_rounds"] = num_rounds
        if objective:
            kwargs["objective"] = objective
        self.model = XGBoostCostModel(**kwargs)
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
        # a model trained only on other tasks (transfer) gets more exploration at first
        eps = self.epsilon if own >= n else max(self.epsilon, 0.5)
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
        if len(self.X) >= 8 or (force and len(self.X) >= 2):
            self.model.fit(np.stack(self.X), np.asarray(self.y), np.asarray(self.groups),
                           weights=self.weights())
