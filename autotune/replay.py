"""Replaying a candidate's trace on a fresh schedule of a task's computation.

Every candidate the tuner measures is a trace (``tdsl.schedule.Trace``): the
record stores its JSON, workers replay it on their own copy of the computation,
and ``apply_history_best`` replays the best one at ``td.build``.

Names: a trace identifies stages, loops and sizes by position, so it replays on a
computation built again elsewhere with other names.  ``name_signature`` lists the
stage and root-axis names in schedule order; ``rename_trace`` checks that two
signatures have the same structure and rewrites the trace's display labels
(derived names such as ``i.outer.j.outer.fused`` token by token).
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping, Sequence

from tdsl.errors import TuningError
from tdsl.schedule import Schedule, Trace, create_schedule


def fresh_schedule(outputs: Sequence[Any]) -> Schedule:
    """A default schedule of ``outputs`` (operations or tensors)."""
    return create_schedule([o.op if hasattr(o, "op") else o for o in outputs])


def replay(trace: "Trace | str", outputs: Sequence[Any],
           intrinsics: "Mapping[str, Any] | None" = None) -> Schedule:
    """A fresh schedule of ``outputs`` with every step of ``trace`` applied.

    Raises ``ScheduleError`` (or ``LoweringError`` later, at lower) for a trace
    that is illegal on this computation; ``TuningError`` for malformed JSON.
    """
    if isinstance(trace, str):
        trace = Trace.from_json(trace)
    return trace.apply(fresh_schedule(outputs), intrinsics)


# ---- names --------------------------------------------------------------------------------
def name_signature(outputs: Sequence[Any]) -> list[list[str]]:
    """``[[stage, root axis names...], ...]`` in schedule order, for renaming traces."""
    sch = fresh_schedule(outputs)
    return [[st.name] + [iv.name for iv in st.root_iter_vars] for st in sch.stages]


_TOKEN = re.compile(r"[^.]+")


def rename_trace(trace_json: str, old: Sequence[Sequence[str]], new: Sequence[Sequence[str]]) -> str:
    """Rewrite the names of a trace recorded under signature ``old`` for ``new``."""
    if len(old) != len(new) or any(len(a) != len(b) for a, b in zip(old, new)):
        raise TuningError("rename_trace: the two computations have different structure")
    stage_map = {a[0]: b[0] for a, b in zip(old, new)}
    axis_map: dict[str, str] = {}
    for a, b in zip(old, new):
        axis_map.update({x: y for x, y in zip(a[1:], b[1:])})
    if all(k == v for k, v in stage_map.items()) and all(k == v for k, v in axis_map.items()):
        return trace_json
    table = {**axis_map, **stage_map}

    def ren(name: str) -> str:
        if name in table:
            return table[name]
        return _TOKEN.sub(lambda m: table.get(m.group(0), m.group(0)), name)

    def ren_label(v: Any) -> Any:
        if isinstance(v, tuple):
            return tuple(ren(x) for x in v)
        return ren(v) if isinstance(v, str) else v

    steps = [dataclasses.replace(st, labels=tuple((k, ren_label(v)) for k, v in st.labels))
             for st in Trace.from_json(trace_json).steps]
    return Trace(steps).to_json()
