"""Linear canonical form of integer index expressions, and structural keys.

A ``Lin`` is ``sum(coeff * atom) + const`` where an atom is any expression that is
not itself a sum (a variable, ``x // c``, ``min(a, b)``, a product of atoms, a
load ...).  Atoms are identified by a *structural key*: a nested tuple that is
equal for structurally equal expressions (variables by identity) and totally
ordered, so terms sort deterministically.  Keys of atoms built by the analyzer
are made from the ``Lin`` keys of their operands (``lin_key``); ``gkey`` makes
keys of arbitrary expressions (bool conditions, casts' operands, load indices).
"""
from __future__ import annotations

from typing import Any

from ..dtype import DType
from ..expr import (Add, BufferLoad, Call, Const, Expr, Mul, Sub, TensorLoad, Var)
from .constfold import make_const

# Rank of each node class in keys: first tuple element, so keys of different
# kinds never compare their (differently shaped) payloads.
RANK_VAR, RANK_CONST, RANK_SUM, RANK_MUL = 0, 1, 2, 3
RANK_DIV, RANK_MOD, RANK_MIN, RANK_MAX, RANK_SELECT, RANK_CAST = 4, 5, 6, 7, 8, 9
RANK_CALL, RANK_LOAD, RANK_OPAQUE = 10, 11, 40
RANK_DATA = 30   # atoms of wrapping data expressions (data.py): no index rule looks inside
_RANKS = {"FloorDiv": RANK_DIV, "FloorMod": RANK_MOD, "Min": RANK_MIN, "Max": RANK_MAX,
          "Select": RANK_SELECT, "Cast": RANK_CAST, "Call": RANK_CALL,
          "BufferLoad": RANK_LOAD, "TensorLoad": RANK_LOAD + 1, "Add": 13, "Sub": 14,
          "Mul": RANK_MUL, "Div": 15, "EQ": 16, "NE": 17, "LT": 18, "LE": 19, "GT": 20,
          "GE": 21, "And": 22, "Or": 23, "Not": 24}


class Lin:
    """``sum(coeff * atom) + const``; ``terms`` maps atom key -> (atom, coeff). Immutable."""

    __slots__ = ("terms", "const")

    def __init__(self, terms: dict, const: int):
        self.terms = terms
        self.const = const

    def __repr__(self) -> str:
        return f"Lin({[(a, c) for a, c in self.terms.values()]}, {self.const})"


_EMPTY: dict = {}


def lin_const(c: int) -> Lin:
    return Lin(_EMPTY, c)


def lin_atom(atom: Expr, key: Any, coeff: int = 1) -> Lin:
    return Lin({key: (atom, coeff)}, 0)


def lin_add(a: Lin, b: Lin, sign: int = 1) -> Lin:
    """``a + sign * b``."""
    if not b.terms:
        return Lin(a.terms, a.const + sign * b.const)
    if not a.terms and sign == 1:
        return Lin(b.terms, a.const + b.const)
    t = dict(a.terms)
    for k, (x, c) in b.terms.items():
        old = t.get(k)
        if old is None:
            t[k] = (x, sign * c)
        else:
            nc = old[1] + sign * c
            if nc:
                t[k] = (old[0], nc)
            else:
                del t[k]
    return Lin(t, a.const + sign * b.const)


def lin_scale(a: Lin, k: int) -> Lin:
    if k == 1:
        return a
    if k == 0:
        return Lin(_EMPTY, 0)
    return Lin({key: (x, c * k) for key, (x, c) in a.terms.items()}, a.const * k)


def single_atom(a: Lin) -> "tuple[Any, Expr] | None":
    """(key, atom) if ``a`` is exactly one atom (coefficient 1, no constant)."""
    if a.const == 0 and len(a.terms) == 1:
        (k, (x, c)), = a.terms.items()
        if c == 1:
            return k, x
    return None


def lin_key(a: Lin, dtype: DType) -> Any:
    """Structural key of the expression ``a`` stands for (equal to its atom's key if single)."""
    if not a.terms:
        return (RANK_CONST, dtype, a.const)
    if a.const == 0 and len(a.terms) == 1:
        (k, (_, c)), = a.terms.items()
        if c == 1:
            return k
    return (RANK_SUM, "", dtype, tuple(sorted((k, c) for k, (_, c) in a.terms.items())),
            a.const)


def _term(x: Expr, c: int, dtype: DType) -> Expr:
    return x if c == 1 else Mul(x, make_const(c, dtype))


def _order(kv: tuple) -> tuple:
    return (-abs(kv[1][1]), kv[0])


def lin_to_expr(a: Lin, dtype: DType) -> Expr:
    """Build the canonical expression: larger coefficients first, then by key; the
    positive terms are added, the negative ones subtracted, the constant last."""
    terms = a.terms
    const = a.const
    if not terms:
        return make_const(const, dtype)
    if len(terms) == 1:
        (x, c), = terms.values()
        if c > 0:
            res = _term(x, c, dtype)
        elif const > 0:
            return Sub(make_const(const, dtype), _term(x, -c, dtype))
        else:
            res = _term(x, c, dtype)
    else:
        items = sorted(terms.items(), key=_order)
        res = None
        neg = []
        for _, (x, c) in items:
            if c > 0:
                t = _term(x, c, dtype)
                res = t if res is None else Add(res, t)
            else:
                neg.append((x, c))
        for x, c in neg:
            if res is None:
                if const > 0:
                    res = Sub(make_const(const, dtype), _term(x, -c, dtype))
                    const = 0
                else:
                    res = _term(x, c, dtype)
            else:
                res = Sub(res, _term(x, -c, dtype))
    if const > 0:
        return Add(res, make_const(const, dtype))
    if const < 0:
        return Sub(res, make_const(-const, dtype))
    return res


def opaque_key(e: Expr) -> tuple:
    """Key of an expression no rule looks inside: its printed text orders it, ``id`` only
    tells apart distinct nodes that print the same (never the address first: terms would
    sort differently from run to run)."""
    return (RANK_OPAQUE, type(e).__name__, str(e), id(e))


def gkey(e: Expr) -> Any:
    """Structural key of any expression (variables, buffers and tensors by identity:
    name and creation number, never memory address)."""
    cls = type(e)
    if cls is Const:
        return (RANK_CONST, e.dtype, e.value)
    if isinstance(e, Var):
        return (RANK_VAR, e.name, e.seq, e.dtype)
    name = cls.__name__
    rank = _RANKS.get(name)
    if rank is None:
        as_e = e.as_expr()
        if as_e is not e:
            return gkey(as_e)
        return opaque_key(e)
    if cls is Call:
        return (rank, e.func, e.dtype, tuple(gkey(x) for x in e.args))
    if cls is BufferLoad:
        return (rank, "", e.dtype, (e.buffer.name, e.buffer.seq)
                + tuple(gkey(x) for x in e.indices))
    if cls is TensorLoad:
        return (rank, "", e.dtype, (e.tensor.name, e.tensor.seq)
                + tuple(gkey(x) for x in e.indices))
    return (rank, name, e.dtype, tuple(gkey(getattr(e, f)) for f in cls._fields))
