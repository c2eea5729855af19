"""Inclusive symbolic integer intervals ``[min, max]`` (``None`` = unbounded side).

Used by ``Analyzer.int_set`` and ``Analyzer.bind`` to describe the values an index
expression takes while some variables range over their domains.
"""
from __future__ import annotations

from typing import Any

from ..dtype import INDEX
from ..expr import Expr, convert


def _as_index(v: Any) -> "Expr | None":
    if v is None:
        return None
    return convert(v, INDEX)


class Interval:
    """The integers ``min <= x <= max``; either side may be ``None`` (unbounded)."""

    __slots__ = ("min", "max")

    def __init__(self, min: Any, max: Any):
        self.min = _as_index(min)
        self.max = _as_index(max)

    @staticmethod
    def point(e: Any) -> "Interval":
        e = _as_index(e)
        return Interval(e, e)

    @staticmethod
    def everything() -> "Interval":
        return Interval(None, None)

    @staticmethod
    def from_range(rng: Any) -> "Interval":
        """``[rng.min, rng.min + rng.extent - 1]`` of a ``tdsl.tensor.Range``."""
        from .analyzer import simplify
        return Interval(rng.min, simplify(rng.min + rng.extent - 1))

    @property
    def is_everything(self) -> bool:
        return self.min is None and self.max is None

    @property
    def is_point(self) -> bool:
        if self.min is None or self.max is None:
            return False
        if self.min is self.max:
            return True
        from .analyzer import Analyzer
        return Analyzer().can_prove_equal(self.min, self.max)

    def extent(self) -> "Expr | None":
        """``max - min + 1`` simplified; ``None`` when a side is unbounded."""
        if self.min is None or self.max is None:
            return None
        from .analyzer import simplify
        return simplify(self.max - self.min + 1)

    def __repr__(self) -> str:
        lo = "-inf" if self.min is None else repr(self.min)
        hi = "+inf" if self.max is None else repr(self.max)
        return f"[{lo}, {hi}]"
