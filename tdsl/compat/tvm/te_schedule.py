"""``tvm.te.schedule``: the schedule classes (``Schedule``, ``Stage``, the loop relations
``Split``/``Fuse``/``Singleton``), ``create_schedule``, ``Buffer`` (what ``te.extern``'s
function receives for each tensor) and the ``AutoInline*`` helpers (``auto_inline.py``).
TVM's internal passes ``InferBound`` and ``ScheduleOps`` (bounds inference and statement
building, which tdsl's ``lower`` does in one step) are refused with a ``TDSLError`` that
says so."""
from __future__ import annotations

from typing import Any

from tdsl import IterVar, Schedule, Stage
from tdsl import create_schedule as _create_schedule
from tdsl.errors import TDSLError
from tdsl.extern_op import ExternBuffer as Buffer

from tdsl.schedule.relations import Fuse, Singleton, Split

from .auto_inline import AutoInlineBroadcast, AutoInlineElemWise, AutoInlineInjective

_INTERNAL = ("InferBound", "ScheduleOps", "Rebase", "PostProcessFeatures",
             "VerifyCompactBuffer", "SchedulePostProcRewriteForTensorCore")


def create_schedule(ops: Any) -> Schedule:
    """tdsl's ``create_schedule``, reporting an invalid ``compute_at`` (a stage attached to
    itself, a cycle, an output attached) when the schedule is lowered, as TVM does, and
    ordering an rfactor stage's reduce axes as TVM does (the untouched ones first).  Inside
    ``PassContext(config={"te.keep_schedule_record": True})`` it keeps TVM's schedule
    record (``schedule_record.py``)."""
    from tdsl.tensor import Operation, Tensor
    from .schedule_record import TVMSchedule
    from .transform import PassContext
    listed = list(ops) if isinstance(ops, (list, tuple)) else [ops]
    listed = [o.op if isinstance(o, Tensor) else o for o in listed]
    if not all(isinstance(o, Operation) for o in listed):
        return _create_schedule(listed)     # its error names the bad entry
    sch = TVMSchedule(listed)
    sch.keep_schedule_record = bool(
        PassContext.current().config.get("te.keep_schedule_record", False))
    sch.defer_attach_errors = True
    sch.rfactor_untouched_first = True
    return sch


def __getattr__(name: str) -> Any:
    if name in _INTERNAL:
        raise TDSLError(f"tvm.te.schedule.{name} is a TVM internal (tdsl lowers a schedule in "
                        f"one step: use tvm.lower); not in tdsl.compat")
    raise AttributeError(f"module 'tvm.te.schedule' (tdsl.compat) has no attribute {name!r}")


__all__ = ["IterVar", "Schedule", "Stage", "create_schedule", "Split", "Fuse", "Singleton",
           "Buffer", "AutoInlineElemWise", "AutoInlineBroadcast", "AutoInlineInjective"]
