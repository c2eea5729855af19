"""``tvm.te.schedule.AutoInlineElemWise`` / ``AutoInlineBroadcast`` / ``AutoInlineInjective``:
inline every stage of a kind that nothing has scheduled yet, as TVM's helpers do.

A candidate is a compute stage that is not an output, has no reduction, and is still as
``create_schedule`` made it (no loop transformed or annotated, not attached nor inlined).
Its kind decides the rest:

* elementwise: every tensor it reads is indexed by exactly its own axes, in order
  (``A[i, j]`` in a stage over ``(i, j)``);
* broadcast and injective: any compute without a reduction (TVM tests nothing more for
  broadcast either).

A stage read by an extern or scan stage is left alone: those read whole tensors from
memory, so there is nothing to inline it into (tdsl's ``compute_inline`` refuses it).
"""
from __future__ import annotations

from typing import Any, Callable

from tdsl.errors import ScheduleError
from tdsl.expr import Reduce, TensorLoad
from tdsl.opaque import is_opaque
from tdsl.schedule.schedule import Schedule
from tdsl.schedule.stage import AttachType, Stage
from tdsl.tensor import ComputeOp
from tdsl.visitor import post_order_visit


def _injective(op: Any) -> bool:
    """A compute with no reduction (its body holds no ``Reduce``)."""
    if not isinstance(op, ComputeOp) or op.reduce_axis:
        return False
    found: list[bool] = []
    for b in op.body:
        post_order_visit(b, lambda n: found.append(True) if isinstance(n, Reduce) else None)
    return not found


def _elementwise(op: Any) -> bool:
    """Injective, and every load indexes its tensor with exactly ``op``'s axes, in order."""
    if not _injective(op):
        return False
    axes = [iv.var for iv in op.axis]
    ok = [True]

    def visit(n: Any) -> None:
        if isinstance(n, TensorLoad) and (len(n.indices) != len(axes) or any(
                idx is not v for idx, v in zip(n.indices, axes))):
            ok[0] = False
    for b in op.body:
        post_order_visit(b, visit)
    return ok[0]


def _untouched(sch: Schedule, st: Stage) -> bool:
    """Still as ``create_schedule`` made it, and every reader can take it inlined."""
    return (not st.is_output and not st.is_scheduled() and st.attach_type is AttachType.ROOT
            and not any(is_opaque(r.op) for r in sch.readers(st)))


def _auto_inline(name: str, sch: Any, kind: Callable[[Any], bool]) -> None:
    if not isinstance(sch, Schedule):
        raise ScheduleError(name, None, f"expected a te.Schedule, got {type(sch).__name__}")
    for st in list(sch.stages):
        if kind(st.op) and _untouched(sch, st):
            st.compute_inline()


def AutoInlineElemWise(sch: Schedule) -> None:  # noqa: N802 (TVM's name)
    """Inline every untouched elementwise stage of ``sch`` (module doc)."""
    _auto_inline("AutoInlineElemWise", sch, _elementwise)


def AutoInlineBroadcast(sch: Schedule) -> None:  # noqa: N802
    """Inline every untouched compute stage without a reduction (TVM's test for broadcast)."""
    _auto_inline("AutoInlineBroadcast", sch, _injective)


def AutoInlineInjective(sch: Schedule) -> None:  # noqa: N802
    """Inline every untouched compute stage without a reduction (module doc)."""
    _auto_inline("AutoInlineInjective", sch, _injective)


__all__ = ["AutoInlineElemWise", "AutoInlineBroadcast", "AutoInlineInjective"]
