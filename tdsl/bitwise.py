"""Integer bit operations of the DSL (TVM's ``tir.bitwise_*`` and shifts).

Each is a ``Call`` of an integer-only intrinsic, so analysis treats it as opaque and
every backend implements it: two's complement ``&``, ``|``, ``^``, ``~``; ``<<``;
``>>`` arithmetic for signed dtypes and logical for unsigned ones.  Shifting by a
negative amount or by the bit width or more is undefined, as in C and LLVM.
"""
from __future__ import annotations

from typing import Any

from .expr import Call, Expr, _operands, call


def _bin(name: str, a: Any, b: Any) -> Call:
    x, y = _operands(name, a, b)
    return call(name, x, y)


def bitwise_and(a: Any, b: Any) -> Expr:
    return _bin("bitwise_and", a, b)


def bitwise_or(a: Any, b: Any) -> Expr:
    return _bin("bitwise_or", a, b)


def bitwise_xor(a: Any, b: Any) -> Expr:
    return _bin("bitwise_xor", a, b)


def bitwise_not(a: Any) -> Expr:
    return call("bitwise_not", a)


def shift_left(a: Any, b: Any) -> Expr:
    return _bin("shift_left", a, b)


def shift_right(a: Any, b: Any) -> Expr:
    return _bin("shift_right", a, b)


__all__ = ["bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "shift_left",
           "shift_right"]
