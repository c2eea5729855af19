"""``apply_history_best``: make ``td.build`` use the best tuning record of each task.

::

    with autotune.apply_history_best("tune.db"):
        f = td.build(s, [A, B, C], target="llvm")   # s replaced by the best record's schedule

``td.build`` calls ``current_schedule_hook()``; inside the context it returns a
function that looks the computation up (its structural hash and the target) in
the database, replays the best record's trace on a fresh schedule of the same
computation (renaming stages and loops when the computation was built with other
names) and returns that schedule.  With no record, or a record that no longer
replays, the schedule passed to ``build`` is kept and a warning says why.
For a computation with symbolic dimensions, the record of the largest tuned size
is used (``autotune.build_dynamic`` dispatches by size instead).

A CPU record answers for the thread count it was timed with (``Record.threads``): the
build looks for records timed with the threads it will run with (``threads=``, default
``tdsl.runtime.threads.default_num_threads()``), then for records whose count is not known
(files older than the field); records of other counts only are a miss, said in the
warning, since a program tuned on one thread can lose to the default on two.
"""
from __future__ import annotations

import contextvars
import warnings
from typing import Any, Callable, Optional, Sequence

from tdsl.errors import LoweringError, ScheduleError, TuningError

from .database import Database, Record, best_records, open_database
from .replay import name_signature, rename_trace, replay
from .task import workload_key

_ACTIVE: contextvars.ContextVar[tuple] = contextvars.ContextVar("tdsl_apply_history_best", default=())


def for_threads(records: Sequence[Record], threads: int) -> list[Record]:
    """The records that answer for ``threads`` CPU threads: those timed with exactly that
    many when there are any, else those of unknown count (``Record.threads`` 0); all of them
    when ``threads`` is 0 (any count: a GPU target, or the caller does not say)."""
    if not threads:
        return list(records)
    exact = [r for r in records if r.threads == threads]
    return exact or [r for r in records if not r.threads]


def best_record(records: Sequence[Record], threads: int = 0) -> Optional[Record]:
    """The fastest valid record for ``threads`` CPU threads (``for_threads``; 0: any), of
    the largest size bucket when there are several (re-measured figures of the latest pass
    first: ``database.best_records``)."""
    valid = for_threads([r for r in records if r.valid], threads)
    if not valid:
        return None
    biggest = max((tuple(sorted(r.sizes.values())) for r in valid), default=())
    same = [r for r in valid if tuple(sorted(r.sizes.values())) == biggest]
    return best_records(same, 1)[0]


def schedule_from_record(rec: Record, outputs: Sequence[Any]) -> Any:
    """Replay ``rec`` on a fresh schedule of ``outputs`` (renaming if names differ)."""
    sig = name_signature(outputs)
    trace = rec.trace
    if rec.signature and rec.signature != sig:
        trace = rename_trace(trace, rec.signature, sig)
    return replay(trace, outputs)


class ApplyHistoryBest:
    """A context in which ``td.build`` picks the best record of each task in ``db``."""

    def __init__(self, db: "Database | str", warn_missing: bool = True,
                 threads: "int | None" = None):
        self.db = open_database(db, create=False)
        self.warn_missing = warn_missing
        self.threads = threads
        self.hits: list[str] = []
        self.misses: list[str] = []
        #: the misses whose records were all timed with other thread counts
        self.other_threads: list[str] = []

    def threads_for(self, target: Any) -> int:
        """The thread count a build for ``target`` is looked up with (0: any, a GPU)."""
        from tdsl.runtime.threads import default_num_threads
        from .measure import cpu_threads
        return cpu_threads(target, self.threads or default_num_threads())

    def query(self, outputs: Sequence[Any], target: Any) -> Optional[Record]:
        from tdsl.target import as_target
        return best_record(self.db.by_workload(workload_key(outputs, as_target(target))),
                           self.threads_for(target))

    def _other_counts(self, outputs: Sequence[Any], target: Any) -> list[int]:
        """The thread counts of the valid records of ``outputs`` (all other than the
        build's when ``query`` found none)."""
        from tdsl.target import as_target
        recs = [r for r in self.db.by_workload(workload_key(outputs, as_target(target)))
                if r.valid]
        return sorted({r.threads for r in recs})

    def _why_missing(self, counts: list[int], target: Any) -> str:
        """Why no record was found: none at all, or only for other thread counts."""
        if not counts:
            return f"no tuning record on {target}"
        want = self.threads_for(target)
        return (f"its records were timed with {', '.join(map(str, counts))} thread(s), this "
                f"build runs with {want} (tune with LocalRunner(n_threads={want}))")

    def substitute(self, sch: Any, args: Sequence[Any], target: Any) -> Any:
        outputs = list(sch.outputs)
        rec = self.query(outputs, target)
        names = ", ".join(op.name for op in outputs)
        if rec is None:
            self.misses.append(names)
            counts = self._other_counts(outputs, target)
            if counts:
                self.other_threads.append(names)
            why = self._why_missing(counts, target)
            if self.warn_missing:
                warnings.warn(f"apply_history_best: '{names}': {why}; using the schedule given "
                              f"to build", stacklevel=3)
            return sch
        try:
            best = schedule_from_record(rec, outputs)
        except (ScheduleError, LoweringError, TuningError) as e:
            self.misses.append(names)
            warnings.warn(f"apply_history_best: the best record of '{names}' (id {rec.id}) does "
                          f"not replay on this computation ({e}); using the schedule given to "
                          f"build", stacklevel=3)
            return sch
        self.hits.append(names)
        return best

    def __enter__(self) -> "ApplyHistoryBest":
        self._token = _ACTIVE.set(_ACTIVE.get() + (self,))
        return self

    def __exit__(self, *exc: Any) -> None:
        _ACTIVE.reset(self._token)


def apply_history_best(db: "Database | str", warn_missing: bool = True,
                       threads: "int | None" = None) -> ApplyHistoryBest:
    """Context manager: ``td.build`` uses the best record in ``db`` (a path or Database)
    timed with ``threads`` CPU threads (default: the threads kernels run with,
    ``default_num_threads()``)."""
    return ApplyHistoryBest(db, warn_missing, threads)


def current_schedule_hook() -> "Callable[[Any, Sequence[Any], Any], Any] | None":
    """The innermost active ``apply_history_best`` substitution (None outside one)."""
    stack = _ACTIVE.get()
    return stack[-1].substitute if stack else None
