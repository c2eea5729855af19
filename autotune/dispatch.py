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


def best_record(records: Sequence[Record]) -> Optional[Record]:
    """The fastest valid record, of the largest size bucket when there are several
    (re-measured figures of the latest pass first: ``database.best_records``)."""
    valid = [r for r in records if r.valid]
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

    def __init__(self, db: "Database | str", warn_missing: bool = True):
        self.db = open_database(db, create=False)
        self.warn_missing = warn_missing
        self.hits: list[str] = []
        self.misses: list[str] = []

    def query(self, outputs: Sequence[Any], target: Any) -> Optional[Record]:
        from tdsl.target import as_target
        return best_record(self.db.by_workload(workload_key(outputs, as_target(target))))

    def substitute(self, sch: Any, args: Sequence[Any], target: Any) -> Any:
        outputs = list(sch.outputs)
        rec = self.query(outputs, target)
        names = ", ".join(op.name for op in outputs)
        if rec is None:
            self.misses.append(names)
            if self.warn_missing:
                warnings.warn(f"apply_history_best: no tuning record for '{names}' on {target}; "
                              f"using the schedule given to build", stacklevel=3)
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


def apply_history_best(db: "Database | str", warn_missing: bool = True) -> ApplyHistoryBest:
    """Context manager: ``td.build`` uses the best record in ``db`` (a path or Database)."""
    return ApplyHistoryBest(db, warn_missing)


def current_schedule_hook() -> "Callable[[Any, Sequence[Any], Any], Any] | None":
    """The innermost active ``apply_history_best`` substitution (None outside one)."""
    stack = _ACTIVE.get()
    return stack[-1].substitute if stack else None
