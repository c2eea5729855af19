"""``SupportsMemo``: the graph's ``supports(op, inputs, attrs)`` answered once per distinct
question within one import.

``opset.supports`` builds the op's compute on placeholders to see whether tdsl runs it; a
transformer's layers ask the same questions again (a 6-layer GPT-2 asks each six times),
and the builds were most of the FX import's time.  The answer depends only on the op, the
inputs' shapes and dtypes (and the value of a 0-d constant, which becomes an immediate) and
the attrs, so those make the key.  Symbolic dimensions are keyed by their text and the
identity of their variables; a question whose attrs hold something else than plain data
(numbers, strings, tuples, lists, dicts, expressions) is not memoized.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np

from tdsl.expr import Expr
from tdsl.visitor import free_vars

_PLAIN = (bool, int, float, str, type(None), np.integer, np.floating, np.bool_)


class _Unkeyable(Exception):
    pass


def _expr_key(e: Expr) -> tuple:
    return ("expr", str(e), tuple(sorted(id(v) for v in free_vars(e))))


def _key_of(a: Any) -> Any:
    if isinstance(a, _PLAIN):
        return (type(a).__name__, a)   # the type too: 1, 1.0 and True are equal keys
    if isinstance(a, Expr):
        return _expr_key(a)
    if isinstance(a, (list, tuple)):
        return (type(a).__name__, tuple(_key_of(x) for x in a))
    if isinstance(a, dict):
        return ("dict", tuple(sorted((str(k), _key_of(v)) for k, v in a.items())))
    raise _Unkeyable()


def _input_key(v: Any) -> tuple:
    dims = tuple(_key_of(d) for d in v.shape)
    if v.is_const and v.ndim == 0:
        return ("scalar", v.dtype, _key_of(v.const.reshape(()).item()))
    return ("tensor", v.dtype, dims)


def supports_key(op: str, inputs: Sequence[Any], attrs: dict) -> Optional[tuple]:
    """The memo key of a ``supports`` question, or None when it has none."""
    try:
        return (op, tuple(_input_key(v) for v in inputs), _key_of(attrs))
    except _Unkeyable:
        return None


class SupportsMemo:
    """Wraps a ``supports`` function; one per import (the keys hold variable identities)."""

    def __init__(self, supports: Callable[[str, Sequence[Any], dict], bool]) -> None:
        self.supports = supports
        self._answers: dict[tuple, bool] = {}
        self.asked = 0      # questions that reached ``supports`` (for tests)

    def __call__(self, op: str, inputs: Sequence[Any], attrs: dict) -> bool:
        key = supports_key(op, inputs, attrs)
        if key is not None:
            hit = self._answers.get(key)
            if hit is not None:
                return hit
        self.asked += 1
        ok = bool(self.supports(op, inputs, attrs))
        if key is not None:
            self._answers[key] = ok
        return ok
