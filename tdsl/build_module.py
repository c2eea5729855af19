"""``build``: lower a schedule and hand it to the backend of the target."""
from __future__ import annotations

from typing import Any, Sequence

from .errors import BuildError
from .keywords import check_keywords
from .stmt import PrimFunc
from .target import TargetKind, as_target


@check_keywords
def build(inputs: Any, args: "Sequence[Any] | None" = None, target: Any = "llvm",
          name: str = "default_function") -> Any:
    """Compile a schedule (with its argument tensors) or a lowered PrimFunc for ``target``.

    Returns a callable module: ``f(a, b, c)`` on NumPy/DLPack arrays.
    """
    from tdsl.schedule import Schedule
    from .lowering import lower
    tgt = as_target(target)
    if isinstance(inputs, Schedule):
        if args is None:
            raise BuildError("build(schedule, args, target): give the argument tensors, inputs then "
                             "outputs, e.g. td.build(s, [A, B, C])")
        hook = _history_hook()
        if hook is not None:
            chosen = hook(inputs, args, tgt)
            if not isinstance(chosen, Schedule):
                return chosen  # a module the tuning records built (e.g. a size dispatcher)
            inputs = chosen
        func = lower(inputs, args, name=name)
    elif isinstance(inputs, PrimFunc):
        func = inputs
    else:
        raise BuildError(f"build: expected a Schedule or a lowered PrimFunc, got {type(inputs).__name__}")
    if tgt.kind is TargetKind.LLVM:
        from tdsl.backends import llvm
        return llvm.build(func, tgt)
    if tgt.kind is TargetKind.CUDA:
        from tdsl.backends import cuda
        return cuda.build(func, tgt)
    raise BuildError(f"no backend for target {tgt}")


def _history_hook() -> Any:
    """The active ``apply_history_best`` context's schedule substitution, if any."""
    try:
        from tdsl.autotune.dispatch import current_schedule_hook
    except ImportError:
        return None
    return current_schedule_hook()


def load_module(path: str) -> Any:
    """Load a module written by ``export_library``."""
    from tdsl.backends.llvm import load_module as _load
    return _load(path)
