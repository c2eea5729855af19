"""``tvm.driver.build_module``: ``lower``, ``build`` and ``schedule_to_module`` (tdsl's
lowered ``PrimFunc`` stands for TVM's ``IRModule``, as in ``tvm.lower``)."""
from __future__ import annotations

from typing import Any, Sequence



def lower(*args: Any, **kwargs: Any) -> Any:
    from .. import lower as _lower
    return _lower(*args, **kwargs)


def build(*args: Any, **kwargs: Any) -> Any:
    from .. import build as _build
    return _build(*args, **kwargs)


def schedule_to_module(sch: Any, args: "Sequence[Any] | None" = None, name: str = "main",
                       binds: Any = None) -> Any:
    """The lowered function of ``sch`` (TVM returns the IRModule before its passes; tdsl's
    lowering is one step, so this is ``tvm.lower``'s result)."""
    from .. import lower as _lower
    return _lower(sch, list(args or []), name=name, binds=binds)


__all__ = ["lower", "build", "schedule_to_module"]
