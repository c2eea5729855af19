"""Tuners: the measure loop (batches, records, early stopping, error counting).

``Tuner.tune`` repeats: ask ``next_batch`` for candidates, record illegal ones as
``INSTANTIATION_ERROR`` (never retried), measure the legal ones, write each result
to the database as it arrives, call ``update`` and the callbacks.  It resumes
from the database: programs already measured for the task count towards
``n_trial`` and are never measured again, and their records train the model.

The first batch always holds the untuned programs (``default_candidates``: the
default schedule, and ``ops.schedule``'s when the computation is made of
``tdsl.ops`` operators), so the result is never worse than untuned.  At the end
the ``remeasure_top`` fastest programs (and ``ops.schedule``'s, and the default schedule
when within ``REMEASURE_DEFAULT_WITHIN`` of the best) are timed again,
round-robin over ``remeasure_rounds`` rounds (``MeasureOption.remeasure``); those
figures go to the database (``Database.add_remeasure``) and pick the best.

The loop is a ``TuneSession`` (``Tuner.session``) stepped one batch at a time: ``tune``
steps it to the end, the task scheduler (``task_scheduler``) interleaves the sessions
of many tasks.  Tuners sharing a database file re-read each other's records before a
batch and claim the programs they measure (never one program twice), and measure
while holding the machine's timing lease (``lease.TimingLease``), so two of them
never time at once; a timing taken without it is marked contended and timed again
alone (``_retime_contended``) before the next batch.

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
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, Optional, Sequence

import numpy as np

from tdsl.deep import deep_recursion
from tdsl.errors import TDSLError, TuningError
from tdsl.keywords import check_keywords

from .codesize import emitted_nodes
from .database import RETIME_PASS, Database, Record, best_records, claim_owner, open_database
from .lease import TimingLease
from .features import FEATURE_VERSION, extract_features
from .measure import (MeasureErrorNo, MeasureInput, MeasureOption, MeasureResult, measure_option,
                      timing_threads)
from .phases import PhaseTimes, format_breakdown

#: Config key marking an untuned program (its value says which: "default", "ops.schedule").
DEFAULT_KEY = "__default__"
#: The final re-measurement re-times the default schedule (an empty trace) only when its
#: search figure is within this factor of the best one's (``ops.schedule``'s: always).
REMEASURE_DEFAULT_WITHIN = 2.0
from .search import CandidatePool
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
    #: exclusive seconds per phase of this run (``phases.PHASES``): where ``seconds`` went
    phases: dict = field(default_factory=dict)

    @property
    def best_gflops(self) -> float:
        return self.best.gflops if self.best else 0.0

    def breakdown(self) -> str:
        """A table of ``phases``: seconds and share of the run's time per phase."""
        return format_breakdown(self.phases, self.seconds)


class Tuner:
    """Base class: subclasses implement ``next_batch`` and ``update``."""

    def __init__(self, task: Task, seed: int = 0):
        self.task = task
        self.rng = random.Random(seed)
        #: where this tuner's time went, accumulated over its runs (``phases.PhaseTimes``)
        self.phases = PhaseTimes()
        self.pool = CandidatePool(task, self.phases)
        self.measured: set[str] = set()
        self.best_cost = math.inf
        self.best_record: Optional[Record] = None
        self.resumed = 0
        #: the CPU threads candidates are timed with (set by each session from its runner;
        #: 0: not known): the records of other thread counts are another tuning's
        self.threads = 0

    # ---- to implement ----------------------------------------------------------------------
    def next_batch(self, n: int) -> list[Candidate]:
        raise NotImplementedError

    def update(self, cands: Sequence[Candidate], results: Sequence[MeasureResult]) -> None:
        """Learn from measured candidates (default: nothing)."""

    def load_history(self, records: Iterable[Record]) -> None:
        """Learn from earlier records of this task (default: nothing)."""

    def default_candidates(self) -> list[Candidate]:
        """The untuned programs: the default schedule (an empty trace) and
        ``ops.schedule``'s (legal ones only).  ``ops.schedule`` schedules any computation
        (its generic rules cover stages that are not ``tdsl.ops`` operators: a hand-written
        GEMV gets its rfactor-vector schedule), so it is always a baseline to beat."""
        out = []
        naive = self.task.lower_trace("[]", (), {DEFAULT_KEY: "default"})
        if naive.valid:
            out.append(naive)
        from tdsl.ops import schedule as ops_schedule
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
             remeasure_rounds: int = 3, lease: "TimingLease | bool | None" = None) -> TuneResult:
        """Measure up to ``n_trial`` candidates in total (records already in ``db`` count).

        ``callbacks`` are called as ``cb(tuner, inputs, results)`` after each batch;
        ``early_stopping``: stop after that many trials without a better one;
        ``timeout``: stop after that many seconds; ``error_limit``: raise
        ``TuningError`` if that many measurements in a row failed from the start
        (a broken setup rather than bad candidates); ``measure_default``: put the
        untuned programs (``default_candidates``) in the first batch;
        ``remeasure_top``/``remeasure_rounds``: re-time that many of the fastest
        programs (plus the untuned ones), interleaved, in that many rounds at the end
        (0: don't), and pick the best by those figures.  ``lease``: the machine's
        timing lease (``lease.TimingLease``) held while measuring, so tuners sharing
        the database never time at once (default: on for a local runner and a
        database file; ``False``: off).
        """
        session = self.session(n_trial, measure_option, callbacks, db, early_stopping,
                               batch_size, timeout, error_limit, measure_default, lease)
        try:
            while session.step():
                pass
            if remeasure_top > 0 and remeasure_rounds > 0:
                session.remeasure(remeasure_top, remeasure_rounds)
        finally:
            session.close()
        return session.result(stacklevel=3)

    def session(self, n_trial: int, measure_option: "MeasureOption | None" = None,
                callbacks: Sequence[Callable] = (), db: "Database | str | None" = None,
                early_stopping: "int | None" = None, batch_size: int = 24,
                timeout: "float | None" = None, error_limit: int = 64,
                measure_default: bool = True,
                lease: "TimingLease | bool | None" = None) -> "TuneSession":
        """A tuning run driven one batch at a time (``TuneSession.step``): what ``tune``
        loops over, and what the task scheduler (``task_scheduler``) interleaves."""
        return TuneSession(self, n_trial, measure_option, callbacks, db, early_stopping,
                           batch_size, timeout, error_limit, measure_default, lease)

    def _remeasure(self, database: Database, mopt: MeasureOption, k: int, rounds: int,
                   measured_now: bool) -> None:
        """Re-time the ``k`` fastest programs (by their search figures) and the untuned
        ones, interleaved; store the figures and choose the best by them."""
        first: dict[str, Record] = {}
        for r in database.records(self.task.key, threads=self.threads):
            if r.valid:
                first.setdefault(r.prog_hash, r)
        ranked = sorted(first.values(), key=lambda r: r.search_cost)
        # an untuned program far slower than the best cannot win: re-timing it (a naive
        # 512^3 matmul runs for a second) would only eat the budget
        near = ranked[0].search_cost * REMEASURE_DEFAULT_WITHIN if ranked else 0.0
        # ``ops.schedule``'s program is what a build without records uses (a compiled
        # model's kernels): always re-timed beside the best, so a record replaces it only
        # by figures of the same pass.  Its search figure, taken in the first batch, read
        # 2x its true time on a busy machine (BERT's FFN denses: 14.4 ms, 7.7 ms in the
        # model) and the tuned program chosen over it ran 1.35x slower in the model.
        chosen = ranked[:k] + [r for r in ranked[k:] if DEFAULT_KEY in r.config and (
            r.search_cost <= near or r.config[DEFAULT_KEY] == "ops.schedule")]
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
        best = best_records(database.records(self.task.key, threads=self.threads), 1)
        if best:
            self.best_record = best[0]
            self.best_cost = best[0].cost

    def _retime_contended(self, database: Database, mopt: MeasureOption) -> None:
        """Time again, alone (the caller holds the timing lease), the records of this task
        whose timings were contended; their new figures replace the old
        (``Database.add_remeasure`` with ``RETIME_PASS``) and the marks are dropped."""
        recs = database.contended(self.task.key, threads=self.threads)
        if not recs:
            return
        inputs = [MeasureInput(self.task, r.config, r.trace, r.prog_hash) for r in recs]
        for r, m in zip(recs, mopt.remeasure(inputs, 1)):
            if m.valid:
                database.add_remeasure(r, RETIME_PASS, m.costs)
            database.clear_contended(r.id)
        best = best_records(database.records(self.task.key, threads=self.threads), 1)
        if best:
            self.best_record, self.best_cost = best[0], best[0].cost

    def _catch_up(self, database: Database, seen: int, own_ids: set, res: TuneResult) -> int:
        """Take in the records other tuners wrote to the database since row ``seen``:
        their programs are never measured here, their trials count towards the budget
        and they train the model.  Returns the last row seen."""
        new = [r for r in database.records_after(self.task.key, seen, threads=self.threads)
               if r.id not in own_ids]
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
        if c.func is None:
            return None
        with self.phases("features"):
            return extract_features(c.func, self.task.sizes)

    def _record(self, c: Candidate, r: MeasureResult) -> Record:
        feats = self._features(c)
        return Record(self.task.key, self.task.description, str(self.task.target), c.config,
                      c.trace, c.prog_hash, r.costs, r.error_no, r.error_msg, self.task.flop,
                      r.all_cost, r.timestamp, self.task.signature, self.task.workload,
                      self.task.sizes, feats,
                      FEATURE_VERSION if feats is not None else 0, notes=tuple(r.notes),
                      threads=r.threads)

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


class TuneSession:
    """One tuning run of a tuner, a batch per ``step`` (see ``Tuner.tune`` for the options).

    ``step`` proposes, claims, measures and records one batch and returns whether the run
    may go on (budget, ``timeout``, early stopping or an exhausted space end it);
    ``remeasure`` re-times the fastest programs; ``close`` releases the claims (and the
    measure option when the session made it); ``result`` is the ``TuneResult``.
    """

    def __init__(self, tuner: Tuner, n_trial: int, measure_option: "MeasureOption | None",
                 callbacks: Sequence[Callable], db: "Database | str | None",
                 early_stopping: "int | None", batch_size: int, timeout: "float | None",
                 error_limit: int, measure_default: bool,
                 lease: "TimingLease | bool | None" = None):
        self.tuner = tuner
        self.n_trial = n_trial
        self.own_option = measure_option is None
        self.mopt = measure_option or _default_option()
        self.callbacks = list(callbacks)
        self.database = open_database(db)
        self.early_stopping = early_stopping
        self.batch_size = batch_size
        self.timeout = timeout
        self.error_limit = error_limit
        self.lease = _timing_lease(lease, self.database, self.mopt)
        task = tuner.task
        self.res = TuneResult(task.key)
        self.t0 = time.perf_counter()
        self.phases_before = dict(tuner.phases.seconds)
        tuner.threads = timing_threads(self.mopt.runner, task.target)
        with tuner.phases("db"):
            history = self.database.records(task.key, threads=tuner.threads)
        tuner._resume(history, self.res)
        self.owner = claim_owner()
        self.seen = max((r.id for r in history if r.id is not None), default=0)
        self.own_ids: set[int] = set()
        tuner.resumed = self.res.resumed
        self.last_improve = self.res.resumed
        self.any_ok = any(r.valid for r in history)
        self.consecutive_errors = 0
        self.empty_batches = 0
        self.finished = False
        with tuner.phases("lower"):
            defaults = tuner.default_candidates() if measure_default else []
        self.defaults = [c for c in defaults if c.prog_hash not in tuner.measured]
        tuner.measured.update(c.prog_hash for c in self.defaults)

    @property
    def done(self) -> int:
        """Trials counted towards the budget: resumed, by other tuners, and measured here."""
        return self.res.resumed + self.res.concurrent + self.res.trials

    @property
    def best_cost(self) -> float:
        return self.tuner.best_cost

    def step(self, batch_size: "int | None" = None) -> bool:
        """Measure one batch (up to ``batch_size``, default the session's); False when the
        run is over (then nothing was measured)."""
        tuner, database, res = self.tuner, self.database, self.res
        key = tuner.task.key
        while not self.finished:
            if self.done >= self.n_trial or (self.timeout is not None and
                                             time.perf_counter() - self.t0 > self.timeout):
                break
            with tuner.phases("db"):
                self.seen = tuner._catch_up(database, self.seen, self.own_ids, res)
                # programs other tuners are measuring now will count too
                done = self.done + database.in_flight(key, self.owner)
            if done >= self.n_trial:
                break
            want = min(batch_size or self.batch_size, self.n_trial - done)
            batch, self.defaults = self.defaults[:want], self.defaults[want:]
            if len(batch) < want:
                with tuner.phases("search"):
                    # one deep-recursion thread for the whole search: each lowering would
                    # otherwise start its own (tdsl.deep), hundreds per batch
                    batch += deep_recursion(tuner.next_batch)(want - len(batch))
            # another tuner on this database may be measuring the same programs: take
            # only those claimed now (the others count as measured, never proposed again)
            with tuner.phases("db"):
                mine = database.claim(key, [c.prog_hash if c.valid else _illegal_hash(c)
                                            for c in batch], self.owner,
                                      threads=tuner.threads)
            legal = []
            for c in batch:
                if (c.prog_hash if c.valid else _illegal_hash(c)) not in mine:
                    tuner.measured.add(c.prog_hash if c.valid else _illegal_hash(c))
                elif c.valid:
                    legal.append(c)
                else:
                    tuner._record_illegal(database, c, res)
            if not legal:
                self.empty_batches += 1
                if not batch or self.empty_batches >= 20:
                    break  # space exhausted (or nothing legal left to propose)
                continue
            self.empty_batches = 0
            self._measure(legal)
            if self.early_stopping is not None and \
                    res.resumed + res.trials - self.last_improve >= self.early_stopping:
                res.stopped_early = True
                break
            return True
        self.finished = True
        return False

    def _measure(self, legal: list[Candidate]) -> None:
        tuner, database, res = self.tuner, self.database, self.res
        best_before = tuner.best_cost
        inputs = [MeasureInput(tuner.task, c.config, c.trace, c.prog_hash, emitted_nodes(c.func))
                  for c in legal]
        for c in legal:
            tuner.measured.add(c.prog_hash)
        contended = False

        def on_result(i: int, r: MeasureResult) -> None:
            rec = tuner._record(legal[i], r)
            with tuner.phases("db"):
                rid = database.add(rec)
            self.own_ids.add(rid)
            if contended and rec.valid:
                database.mark_contended(rid)
            if rec.valid and rec.cost < tuner.best_cost:
                tuner.best_cost = rec.cost
                tuner.best_record = rec
        with self._timing() as contended:
            results = self.mopt.measure(inputs, tuner.best_cost, on_result, tuner.phases)
        for r in results:
            res.trials += 1
            res.errors[r.error_no.name] = res.errors.get(r.error_no.name, 0) + 1
            if r.valid:
                self.any_ok = True
                self.consecutive_errors = 0
            else:
                self.consecutive_errors += 1
            res.curve.append((res.resumed + res.trials, tuner._best_gflops(),
                              time.perf_counter() - self.t0))
        if tuner.best_cost < best_before:
            self.last_improve = res.resumed + res.trials
        if not self.any_ok and self.consecutive_errors >= self.error_limit:
            raise TuningError(f"task {tuner.task.name!r}: the first {self.consecutive_errors} "
                              f"measurements all failed; last error: "
                              f"{results[-1].error_no.name}: {results[-1].error_msg[-500:]}")
        tuner.update(legal, results)
        for cb in self.callbacks:
            cb(tuner, inputs, results)

    @contextmanager
    def _timing(self) -> Iterator[bool]:
        """Hold the timing lease (if any) around a measurement; yields whether the timings
        are contended (the lease was not had in time).  Contended timings of this task
        left by earlier batches (or other tuners) are re-timed first, while it is held."""
        if self.lease is None:
            yield False
            return
        with self.lease.hold() as contended:
            if not contended:
                with self.tuner.phases("retime"):
                    self.tuner._retime_contended(self.database, self.mopt)
            yield contended

    def remeasure(self, k: int = 5, rounds: int = 3) -> None:
        """Re-time the ``k`` fastest programs and the untuned ones (``Tuner._remeasure``)."""
        with self._timing(), self.tuner.phases("remeasure"):
            self.tuner._remeasure(self.database, self.mopt, k, rounds, self.res.trials > 0)

    def close(self) -> None:
        if self.own_option:
            self.mopt.close()
        try:
            self.database.release(self.tuner.task.key, self.owner)
        except TuningError:
            pass                # claims lapse by themselves

    def result(self, stacklevel: int = 2) -> TuneResult:
        res = self.res
        res.best = self.tuner.best_record
        res.seconds = time.perf_counter() - self.t0
        before = self.phases_before
        res.phases = {k: v - before.get(k, 0.0) for k, v in self.tuner.phases.seconds.items()
                      if v - before.get(k, 0.0) > 0}
        if res.best is None and res.trials:
            warnings.warn(f"task {self.tuner.task.name!r}: no valid candidate in {res.trials} "
                          f"trials ({res.errors})", stacklevel=stacklevel)
        return res


def _timing_lease(lease: "TimingLease | bool | None", database: Database,
                  mopt: MeasureOption) -> "TimingLease | None":
    """The lease a session holds while timing: ``lease`` itself, or by default one on the
    database's file when candidates are timed on this machine (not for a remote runner
    or an in-memory database, which no other process shares)."""
    if isinstance(lease, TimingLease):
        return lease
    if lease is False or database.path == ":memory:":
        return None
    if lease is None and hasattr(mopt.runner, "measure_batch"):
        return None
    return TimingLease(database)


def _illegal_hash(c: Candidate) -> str:
    """The program hash an illegal candidate is recorded under (by trace, else config)."""
    key = "illegal:" + c.trace if c.trace != "[]" else "illegal:" + repr(c.config)
    return "illegal-" + hashlib.blake2b(key.encode(), digest_size=12).hexdigest()


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


from .xgb_tuner import XGBTuner  # noqa: E402  (the model-based tuner, its own module)
