"""``Stage.transform_layout``: store a stage's output with its dimensions permuted.

TVM's ``s[B].transform_layout(lambda i, j: [j, i])`` for the case schedules need: a
permutation of the axes (no splits or fused indices).  The stage then computes
``B'[j, i]`` -- its loops run in the new order, so the writes are contiguous along the new
last axis -- and every stage that read ``B[i, j]`` reads ``B'[j, i]``.  A hand-written GEMM
whose B is read transposed (``x[i, k] * w[j, k]``) copies B's panels through a cache stage
laid out ``[k, j]`` this way, as ``ops.dense`` declares its PACK stage: the micro-kernel then
loads whole vectors of one k row.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

from tdsl.errors import ScheduleError
from tdsl.expr import TensorLoad
from tdsl.tensor import ComputeOp
from tdsl.visitor import transform

from .cache import map_body

if TYPE_CHECKING:
    from .stage import Stage


def permutation_of(stage: "Stage", mapping: Callable[..., Any]) -> list[int]:
    """The axes order ``mapping`` (a function of the stage's axis variables returning the
    new index list) gives; a ScheduleError unless it is a permutation of the axes."""
    axes = list(stage.op.axis) if isinstance(stage.op, ComputeOp) else []
    if not axes:
        raise ScheduleError("transform_layout", stage.name, "only a compute stage's layout "
                            "can be transformed")
    try:
        out = mapping(*[a.var for a in axes])
    except TypeError as e:
        raise ScheduleError("transform_layout", stage.name, f"the mapping must take one "
                            f"argument per axis ({len(axes)}): {e}") from None
    out = list(out) if isinstance(out, (list, tuple)) else [out]
    perm = []
    for idx in out:
        hit = [d for d, a in enumerate(axes) if idx is a.var]
        if not hit:
            raise ScheduleError("transform_layout", stage.name, f"the new index {idx!r} is "
                                f"not one of the axes: only permutations of the axes are "
                                f"supported")
        perm.append(hit[0])
    return perm


def parse_axes(stage: "Stage", axes: Any) -> list[int]:
    """``axes`` (a sequence of axis numbers, or the trace's ``"1,0"``) as a list."""
    try:
        return [int(a) for a in (axes.split(",") if isinstance(axes, str) else axes)]
    except (TypeError, ValueError):
        raise ScheduleError("transform_layout", stage.name, f"axes must be axis numbers, got "
                            f"{axes!r}") from None


def check(stage: "Stage", axes: Sequence[int]) -> list[int]:
    """``axes`` as a permutation the stage can take, or a ScheduleError saying why not."""
    op = stage.op
    name = stage.name
    if not isinstance(op, ComputeOp):
        raise ScheduleError("transform_layout", name, "only a compute stage's layout can be "
                            "transformed")
    perm = list(axes)
    n = len(op.axis)
    if sorted(perm) != list(range(n)) or not all(isinstance(d, int) for d in perm):
        raise ScheduleError("transform_layout", name, f"axes {perm} is not a permutation of "
                            f"the stage's {n} axes")
    if op.num_outputs != 1:
        raise ScheduleError("transform_layout", name, "the operation has several outputs")
    if stage.is_output:
        raise ScheduleError("transform_layout", name, "an output's layout is the caller's: "
                            "transform a cache stage of it instead")
    if stage.is_scheduled() or stage.attach_type.value != "root":
        raise ScheduleError("transform_layout", name, "call transform_layout before the "
                            "stage's loops are transformed or attached")
    sch = stage._sch
    for r in sch.readers(stage):
        if not isinstance(r.op, ComputeOp):
            raise ScheduleError("transform_layout", name, f"its reader '{r.name}' is a "
                                f"{r.op.kind} stage, which reads the tensor whole")
    return perm


def transform_layout(stage: "Stage", perm: list[int]) -> None:
    """Rewrite ``stage`` to compute its output in the order ``perm`` and its readers to
    read it there (``check`` has passed)."""
    sch = stage._sch
    old = stage.op
    readers = sch.readers(stage)
    new = ComputeOp(old.name, old.tag, dict(old.attrs), [old.axis[d] for d in perm],
                    old.body)
    stage.op = new
    stage.leaf_iter_vars = list(stage.root_iter_vars)
    stage.all_iter_vars = list(stage.root_iter_vars)
    sch.register(stage, new)
    target = new.outputs[0]

    def pre(n: Any) -> Any:
        if isinstance(n, TensorLoad) and sch[n.tensor] is stage:
            idx = [transform(i, pre=pre) for i in n.indices]
            return TensorLoad(target, tuple(idx[d] for d in perm))
        return None

    for r in readers:
        r.op = r.op.with_body(map_body(r.op.body, pre))
        sch.register(r, r.op)
