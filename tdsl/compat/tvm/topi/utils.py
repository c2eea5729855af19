"""``tvm.topi.utils``: constant shapes as Python ints (``get_const_tuple``, ``get_const_int``)."""
from __future__ import annotations

from typing import Any

from tdsl.arith import Analyzer
from tdsl.errors import TDSLError
from tdsl.expr import Const, Expr


def _value(x: Any) -> Any:
    """An int for a constant (or an expression that simplifies to one), else ``x`` itself."""
    if isinstance(x, bool):
        return int(x)
    if isinstance(x, int):
        return x
    if isinstance(x, Expr):
        e = Analyzer().simplify(x.as_expr())
        if isinstance(e, Const) and e.dtype.is_int:
            return int(e.value)
        return x
    if hasattr(x, "value") and isinstance(x.value, int):
        return int(x.value)
    raise TDSLError(f"topi.utils: expected an integer or an index expression, got "
                    f"{type(x).__name__} {x!r}")


def get_const_int(expr: Any) -> int:
    """The integer value of a constant expression."""
    v = _value(expr)
    if not isinstance(v, int):
        raise TDSLError(f"get_const_int: {expr!r} is not a constant")
    return v


def get_const_tuple(in_tuple: Any) -> tuple:
    """A shape as a tuple: ints for constant dimensions, symbolic ones left as they are."""
    return tuple(_value(x) for x in in_tuple)


def equal_const_int(expr: Any, value: int) -> bool:
    """Whether ``expr`` is the constant ``value``."""
    v = _value(expr)
    return isinstance(v, int) and v == value


__all__ = ["get_const_int", "get_const_tuple", "equal_const_int"]
