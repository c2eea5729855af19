"""``ops.schedule(outputs, target)``: the default schedule of any mix of operators."""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Callable

from tdsl.errors import ScheduleError
from tdsl.schedule import Schedule, create_schedule
from tdsl.target import TargetKind, as_target
from tdsl.tensor import Tensor

from ..tags import Pattern
from .graph import compute_stages, stage_pattern


def _apply_llvm(s: Schedule, target: Any) -> None:
    from . import llvm
    llvm.apply(s, target)


def _apply_cuda(s: Schedule, target: Any) -> None:
    from . import cuda
    cuda.apply(s, target)


#: The constant target kind -> schedule builder mapping.
TARGET_SCHEDULES: "MappingProxyType[TargetKind, Callable[[Schedule, Any], None]]" = \
    MappingProxyType({TargetKind.LLVM: _apply_llvm, TargetKind.CUDA: _apply_cuda})


def inline_injective(s: Schedule) -> None:
    """Inline every injective stage that is not an output (the default fusion)."""
    for st in compute_stages(s):
        if not st.is_output and stage_pattern(st) is Pattern.INJECTIVE:
            st.compute_inline()


def schedule(outputs: Any, target: Any = "llvm") -> Schedule:
    """The default schedule for ``outputs`` (a tensor or a list) on ``target``.

    Injective stages are inlined into their consumers; an elementwise chain after a
    matmul/conv2d becomes the anchor's epilogue; each remaining stage gets the schedule of
    its kind for the target.  Build it with ``td.build(s, [inputs..., outputs...], target)``.
    """
    outs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    if not outs:
        raise ScheduleError("ops.schedule", None, "give at least one output tensor")
    for t in outs:
        if not isinstance(t, Tensor):
            raise ScheduleError("ops.schedule", None, f"outputs must be tensors, got {t!r}")
    tgt = as_target(target)
    s = create_schedule([t.op for t in outs])
    inline_injective(s)
    TARGET_SCHEDULES[tgt.kind](s, tgt)
    if tgt.kind is TargetKind.LLVM:
        _specialize_small_m(s, outs, tgt)
    return s


def _specialize_small_m(s: Schedule, outs: list, target: Any) -> None:
    """A dense/matmul whose M is symbolic: a streaming schedule where ``M`` is small at run
    time (``llvm.SKINNY_M_SYMBOLIC``: one for M <= 3, one for M <= 16), the register-tiled
    one otherwise (one function, ``if``s around the nests: ``Schedule.specialize``)."""
    from . import llvm
    for bound, rows in llvm.SKINNY_M_SYMBOLIC:
        alt = create_schedule([t.op for t in outs])
        inline_injective(alt)
        cond = llvm.small_m_condition(alt, target, bound)   # before scheduling changes stages
        if cond is None:
            return
        llvm.apply(alt, target, small_m=rows)
        s.specialize(cond, alt)
