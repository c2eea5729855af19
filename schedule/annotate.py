"""vectorize, unroll, parallel, bind, pragma, storage_align, align_region, double_buffer.

These change how a loop runs, not which iterations exist.  What depends on
extents known only after bound inference (constant extents for vectorize and
unroll) is checked again at lowering.
"""
from __future__ import annotations

from typing import Any

from tdsl.errors import ScheduleError
from tdsl.stmt import ForKind, StorageScope, ThreadTag
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
        check_cross_thread(stage, var, tag)
    # a virtual thread is a serial loop: a stage may have several (TVM's conv schedules bind
    # one per tiled axis); a hardware index exists once per kernel
    for other, a in stage.iter_attrs.items():
        if (a.thread_tag == tag and tag is not ThreadTag.VTHREAD and other is not var
                and other in stage.leaf_iter_vars):
            raise ScheduleError("bind", stage.name, f"{tag} is already bound to loop '{other.name}' of "
                                f"this stage; a thread axis can be bound once per kernel nest", var.name)
    a = stage.attr(var)
    if a.kind is not ForKind.SERIAL:
        raise ScheduleError("bind", stage.name, f"the loop is already {a.kind}", var.name)
    a.kind = ForKind.THREAD_BINDING
    a.thread_tag = tag
    a.thread_extent = None if thread_ivar.dom is None else thread_ivar.dom.extent


def check_cross_thread(stage: Stage, var: IterVar, tag: ThreadTag) -> None:
    """A reduction loop bound to ``threadIdx.*`` becomes a cross-thread reduction (the
    threads' partial results are combined by warp shuffles and shared memory, TVM's
    allreduce).  Blocks cannot combine results within one launch, and a virtual thread
    is a serial loop, so those bindings are refused."""
    from .relations import pure_reduce_loops
    if var not in pure_reduce_loops(stage):
        raise ScheduleError("bind", stage.name, f"loop '{var.name}' fuses a spatial loop with a "
                            f"reduction loop: its threads would write different outputs and "
                            f"reduce each other's elements; bind a loop that is only one or the "
                            f"other", var.name)
    if not tag.is_thread:
        what = ("blocks cannot combine partial results within one kernel launch; rfactor the "
                "reduction, bind the rfactor'ed stage's new data axis to blockIdx and reduce "
                "its result in a second stage") if tag.is_block else \
               "a virtual thread runs serially in one thread; leave the reduction loop unbound"
        raise ScheduleError("bind", stage.name, f"cannot bind reduction loop '{var.name}' to "
                            f"{tag}: {what}", var.name)
    if any(r.init for r in getattr(stage.op, "body", ()) if hasattr(r, "init")):
        raise ScheduleError("bind", stage.name, f"reduction loop '{var.name}': a reduction with "
                            f"init= cannot be reduced across threads", var.name)


def set_store_predicate(stage: Stage, predicate: Any) -> tuple:
    """The predicate as ``((tag, value), ...)``: a conjunction of ``thread_axis.var == c``
    (TVM's ``s[B].set_store_predicate(tx.var.equal(0))``, the form its tutorials use)."""
    from tdsl.expr import EQ, And, Const
    out: list = []

    def walk(e: Any) -> None:
        if isinstance(e, And):
            walk(e.a)
            walk(e.b)
            return
        if isinstance(e, EQ):
            for v, c in ((e.a, e.b), (e.b, e.a)):
                tag = _thread_tag_of(v)
                if tag is not None and isinstance(c, Const) and c.dtype.is_int:
                    out.append((tag, int(c.value)))
                    return
        raise ScheduleError("set_store_predicate", stage.name, f"unsupported predicate {e!r}: "
                            "use a conjunction of thread_axis.var == constant, e.g. "
                            "tx.var.equal(0)")
    if predicate is True or (isinstance(predicate, Const) and predicate.dtype.is_bool
                             and predicate.value):
        return ()
    walk(predicate)
    return tuple(out)


def _thread_tag_of(v: Any) -> "ThreadTag | None":
    """The thread tag of a ``td.thread_axis(...)``'s variable, else None."""
    tag = getattr(v, "thread_tag", None)
    if tag is not None:
        return ThreadTag(tag)
    return None


def pragma(stage: Stage, var: IterVar, pragma_type: str, pragma_value: Any = None) -> None:
    """A backend hint on a loop; the pragmas ``"unroll"`` and ``"vectorize"`` are the
    annotations of those names (as in TVM), not hints a backend may ignore."""
    var = stage.find_leaf("pragma", var)
    if not isinstance(pragma_type, str) or not pragma_type:
        raise ScheduleError("pragma", stage.name, "pragma_type must be a non-empty string", var.name)
    if pragma_type == "unroll":
        unroll(stage, var)
        return
    if pragma_type == "vectorize":
        vectorize(stage, var)
        return
    stage.attr(var).pragmas[pragma_type] = 1 if pragma_value is None else pragma_value


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def check_storage_align(stage: Stage, axis: object, factor: object, offset: object,
                        primitive: str = "storage_align") -> int:
    """The data dimension ``axis`` stands for, or a ScheduleError saying what is wrong."""
    if stage.is_placeholder:
        raise ScheduleError(primitive, stage.name, "inputs have the caller's layout")
    axes = list(stage.op.axis)
    if not isinstance(axis, IterVar):
        raise ScheduleError(primitive, stage.name, f"expected one of the stage's data axes "
                            f"{[a.name for a in axes]} (s[T].op.axis), got {type(axis).__name__} {axis!r}")
    dims = [d for d, a in enumerate(axes) if a is axis]
    if not dims:
        raise ScheduleError(primitive, stage.name, f"'{axis.name}' is not one "
                            f"of the stage's data axes {[a.name for a in axes]}")
    if not _is_int(factor) or factor < 1 or not _is_int(offset) or not 0 <= offset < factor:
        raise ScheduleError(primitive, stage.name, f"need an int factor >= 1 and 0 <= offset < "
                            f"factor, got factor={factor!r}, offset={offset!r}", axis.name)
    return dims[0]


def storage_align(stage: Stage, axis: IterVar, factor: int, offset: int) -> None:
    dim = check_storage_align(stage, axis, factor, offset)
    axes = list(stage.op.axis)
    if dim == len(axes) - 1:
        raise ScheduleError("storage_align", stage.name, "the innermost axis has stride 1; align an "
                            "outer axis", axis.name)
    stage.storage_alignment[dim] = (factor, offset)


def align_region(stage: Stage, axis: IterVar, factor: int, offset: int,
                 span: tuple[int, int]) -> None:
    dim = check_storage_align(stage, axis, factor, offset, "align_region")
    stage.region_alignment[dim] = (factor, offset, span)


def double_buffer(stage: Stage) -> None:
    """Two copies of the stage's buffer in a GPU kernel, so that the fetch for the next
    iteration of the attach loop overlaps the compute of this one (one barrier per
    iteration).  Outside GPU kernels (a CPU schedule) the hint has no effect: the stage
    keeps a plain single buffer and no barrier is emitted."""
    if stage.scope in (None, StorageScope.GLOBAL) or stage.is_output:
        raise ScheduleError("double_buffer", stage.name, "only a shared/local cache stage attached "
                            "inside a loop can be double-buffered")
    stage.double_buffered = True
