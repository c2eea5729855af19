"""The ``schedule_*`` functions of ``topi.generic``/``x86``/``cuda``: ``tdsl.ops.schedule``
of the outputs for a target."""
from __future__ import annotations

from typing import Any, Callable

from tdsl import ops as _ops

NAMES = ("schedule_injective", "schedule_elemwise", "schedule_broadcast", "schedule_reduce",
         "schedule_dense", "schedule_dense_nopack", "schedule_dense_pack",
         "schedule_conv2d_nchw", "schedule_conv2d_nhwc", "schedule_softmax", "schedule_pool",
         "schedule_adaptive_pool", "schedule_batch_matmul", "schedule_matmul",
         "schedule_extern")


def make(default_target: "str | None") -> Callable[..., Any]:
    """A ``schedule_*(outs, [layout])`` using ``default_target`` (None: the target in scope)."""
    def schedule(outs: Any, *args: Any, **kwargs: Any) -> Any:
        from ..target import Target
        target = default_target or (Target.current() or Target("llvm")).kind.name
        return _ops.schedule(list(outs) if isinstance(outs, (list, tuple)) else [outs], target)
    return schedule


def export(namespace: dict, default_target: "str | None") -> None:
    for name in NAMES:
        fn = make(default_target)
        fn.__name__ = fn.__qualname__ = name
        namespace[name] = fn
