"""``tvm.ir``: the few names scripts touch.  ``IRModule`` is the lowered function itself
(a ``tdsl.PrimFunc``, so tdsl's interpreter and ``tvm.build`` take it) that also answers
TVM's ``mod["main"]`` (and ``mod[<its name>]``) with itself; ``save_json``/``load_json``
are ``node_json.py``'s."""
from __future__ import annotations

from tdsl.errors import ArgumentError
from tdsl.stmt import PrimFunc
from tdsl.tensor import Range

from .node_json import load_json, save_json


class IRModule(PrimFunc):
    """A lowered function that reads as TVM's one-function ``IRModule``."""

    __slots__ = ()

    @classmethod
    def of(cls, func: PrimFunc) -> "IRModule":
        """``func`` as an ``IRModule`` (itself when it is one already)."""
        if isinstance(func, IRModule):
            return func
        return cls(func.name, func.params, func.body, func.size_vars, func.bindings, func.attrs)

    def __getitem__(self, name: str) -> "IRModule":
        if name in ("main", self.name):
            return self
        raise ArgumentError(f"IRModule: no function {name!r} (this module holds "
                            f"{self.name!r}, also found as 'main')")

    def __contains__(self, name: object) -> bool:
        return name in ("main", self.name)


__all__ = ["IRModule", "Range", "save_json", "load_json"]
