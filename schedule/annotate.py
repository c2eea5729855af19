"""vectorize, unroll, parallel, bind, pragma, storage_align, double_buffer.

These change how a loop runs, not which iterations exist.  What depends on
extents known only after bound inference (constant extents for vectorize and
unroll) is checked again at lowering.
"""
from __future__ import annotations

from typing import Any

from tdsl.errors import ScheduleError
from tdsl.stmt import ForKind, StorageScope
from tdsl.tensor import IterKind, IterVar

from .stage import Stage


def _set_kind(primitive: str, stage: Stage, var: IterVar, kind: ForKind) -> IterVar:
    var = stage.find_leaf(primitive, var)
    a = stage.attr(var)
    if a.thread_tag is not None:
        raise ScheduleError(primitive, stage.name, f"the loop is bound to {a.thread_tag}", var.name)
    if a.kind is not ForKind.SERIAL and a.kind is not kind:
        raise ScheduleError(primitive, stage.name, f"the loop is already {a.kind}", var.name)
    a.kind = kind
    return var


def check_vectorize(stage: Stage, var: IterVar) -> IterVar:
    """Any spatial loop can be vectorized, innermost or not: iterations of a spatial loop
    write distinct elements, so lanes are independent.  A loop that encloses others is
    outer-loop vectorized (each lane runs the inner loops for its own element; the LLVM
    backend widens it where the inner bounds do not depend on the lane, else it keeps a
    scalar loop).  A reduction loop is refused: its iterations share one accumulator."""
    var = stage.find_leaf("vectorize", var)
    if var.kind is IterKind.REDUCE:
        raise ScheduleError("vectorize", stage.name, "cannot vectorize a reduction loop (lanes would "
                            "race on one accumulator); rfactor it or vectorize a spatial loop", var.name)
    return var


def vectorize(stage: Stage, var: IterVar) -> None:
    _set_kind("vectorize", stage, check_vectorize(stage, var), ForKind.VECTORIZED)


def unroll(stage: Stage, var: IterVar) -> None:
    _set_kind("unroll", stage, var, ForKind.UNROLLED)


def parallel(stage: Stage, var: IterVar) -> None:
    var = stage.find_leaf("parallel", var)
    if var.kind is IterKind.REDUCE:
        raise ScheduleError("parallel", stage.name, "cannot run a reduction loop in parallel (threads "
                            "would race on the accumulator); rfactor it first", var.name)
    _set_kind("parallel", stage, var, ForKind.PARALLEL)


def bind(stage: Stage, var: IterVar, thread_ivar: Any) -> None:
    var = stage.find_leaf("bind", var)
    if not isinstance(thread_ivar, IterVar) or thread_ivar.thread_tag is None:
        raise ScheduleError("bind", stage.name, "the second argument must be a "
                            "td.thread_axis('blockIdx.x' / 'threadIdx.x' / ...)", var.name)
    tag = thread_ivar.thread_tag
    if var.kind is IterKind.REDUCE:
        raise ScheduleError("bind", stage.name, f"binding reduction loop '{var.name}' to {tag} is a "
                            "reduction across threads, which needs a cross-thread reduction strategy; "
                            "rfactor the reduction first and bind the spatial loop", var.name)
    for other, a in stage.iter_attrs.items():
        if a.thread_tag == tag and other is not var and other in stage.leaf_iter_vars:
            raise ScheduleError("bind", stage.name, f"{tag} is already bound to loop '{other.name}' of "
                                f"this stage; a thread axis can be bound once per kernel nest", var.name)
    a = stage.attr(var)
    if a.kind is not ForKind.SERIAL:
        raise ScheduleError("bind", stage.name, f"the loop is already {a.kind}", var.name)
    a.kind = ForKind.THREAD_BINDING
    a.thread_tag = tag


def pragma(stage: Stage, var: IterVar, pragma_type: str, pragma_value: Any = None) -> None:
    var = stage.find_leaf("pragma", var)
    if not isinstance(pragma_type, str) or not pragma_type:
        raise ScheduleError("pragma", stage.name, "pragma_type must be a non-empty string", var.name)
    stage.attr(var).pragmas[pragma_type] = 1 if pragma_value is None else pragma_value


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def check_storage_align(stage: Stage, axis: object, factor: object, offset: object) -> int:
    """The data dimension ``axis`` stands for, or a ScheduleError saying what is wrong."""
    if stage.is_placeholder:
        raise ScheduleError("storage_align", stage.name, "inputs have the caller's layout")
    axes = list(stage.op.axis)
    if not isinstance(axis, IterVar):
        raise ScheduleError("storage_align", stage.name, f"expected one of the stage's data axes "
                            f"{[a.name for a in axes]} (s[T].op.axis), got {type(axis).__name__} {axis!r}")
    dims = [d for d, a in enumerate(axes) if a is axis]
    if not dims:
        raise ScheduleError("storage_align", stage.name, f"'{axis.name}' is not one "
                            f"of the stage's data axes {[a.name for a in axes]}")
    if not _is_int(factor) or factor < 1 or not _is_int(offset) or not 0 <= offset < factor:
        raise ScheduleError("storage_align", stage.name, f"need an int factor >= 1 and 0 <= offset < "
                            f"factor, got factor={factor!r}, offset={offset!r}", axis.name)
    return dims[0]


def storage_align(stage: Stage, axis: IterVar, factor: int, offset: int) -> None:
    dim = check_storage_align(stage, axis, factor, offset)
    axes = list(stage.op.axis)
    if dim == len(axes) - 1:
        raise ScheduleError("storage_align", stage.name, "the innermost axis has stride 1; align an "
                            "outer axis", axis.name)
    stage.storage_alignment[dim] = (factor, offset)


def double_buffer(stage: Stage) -> None:
    """Two copies of the stage's buffer in a GPU kernel, so that the fetch for the next
    iteration of the attach loop overlaps the compute of this one (one barrier per
    iteration).  Outside GPU kernels (a CPU schedule) the hint has no effect: the stage
    keeps a plain single buffer and no barrier is emitted."""
    if stage.scope in (None, StorageScope.GLOBAL) or stage.is_output:
        raise ScheduleError("double_buffer", stage.name, "only a shared/local cache stage attached "
                            "inside a loop can be double-buffered")
    stage.double_buffered = True
