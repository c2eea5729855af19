"""TVM's schedule record (``PassContext(config={"te.keep_schedule_record": True})``): a
schedule created in such a context lists, after the untouched ("vanilla") schedule, each
primitive called on it (``primitive_record``) and the schedule as it was after each
(``schedule_record``).  As in TVM, ``tile`` counts as its parts: split, split, reorder.

tdsl already keeps every primitive call as a replayable trace (``schedule/trace.py``), so
the record is read from it: the k-th schedule is a fresh schedule of the same outputs with
the trace replayed up to that point (made when indexed, not kept: a record costs nothing
until it is read).
"""
from __future__ import annotations

from typing import Any, Sequence

from tdsl.schedule.schedule import Schedule
from tdsl.schedule.trace import Trace, _loop, _size_arg, _stage


class TVMSchedule(Schedule):
    """tdsl's schedule with TVM's ``schedule_record`` and ``primitive_record``."""

    #: set by ``create_schedule`` inside a PassContext with ``te.keep_schedule_record``
    keep_schedule_record = False

    def _plan(self) -> list[tuple[str, int, int]]:
        """Per record: (primitive name, trace steps replayed, parts of the next tile)."""
        if not self.keep_schedule_record:
            return []
        plan = [("vanilla", 0, 0)]
        for n, step in enumerate(self.trace.steps):
            if step.primitive == "tile":
                plan += [("split", n, 1), ("split", n, 2), ("reorder", n + 1, 0)]
            else:
                plan.append((step.primitive, n + 1, 0))
        return plan

    @property
    def primitive_record(self) -> list[str]:
        """The primitive names, oldest first (``"vanilla"`` for the created schedule)."""
        return [name for name, _, _ in self._plan()]

    @property
    def schedule_record(self) -> "ScheduleRecord":
        """The schedule after each recorded primitive (a sequence of fresh schedules)."""
        return ScheduleRecord(self, self._plan())


class ScheduleRecord(Sequence):
    """``schedule_record``: indexing it replays the trace into a fresh schedule."""

    def __init__(self, sch: TVMSchedule, plan: list[tuple[str, int, int]]):
        self._sch = sch
        self._plan = plan

    def __len__(self) -> int:
        return len(self._plan)

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        _, n_steps, parts = self._plan[k]
        return replay(self._sch, n_steps, parts)


def replay(sch: TVMSchedule, n_steps: int, tile_parts: int) -> TVMSchedule:
    """A fresh schedule of ``sch``'s outputs with its first ``n_steps`` steps replayed,
    then the first ``tile_parts`` splits of the tile step that follows."""
    fresh = TVMSchedule(sch.outputs)
    fresh.defer_attach_errors = sch.defer_attach_errors
    fresh.rfactor_untouched_first = sch.rfactor_untouched_first
    intrinsics = {a.tensor_intrin.name: a.tensor_intrin for st in sch.stages
                  for a in st.iter_attrs.values() if a.tensor_intrin is not None}
    Trace(list(sch.trace.steps[:n_steps])).apply(fresh, intrinsics)
    if tile_parts:
        step = sch.trace.steps[n_steps]
        stage = _stage(fresh, step.stage, step)
        kw = dict(step.kwargs)
        loops = [_loop(stage, k, step) for k in step.loops]
        for part, key in list(enumerate(("x_factor", "y_factor")))[:tile_parts]:
            stage.split(loops[part], factor=_size_arg(fresh, stage, step, kw[key]))
    return fresh


__all__ = ["TVMSchedule", "ScheduleRecord"]
