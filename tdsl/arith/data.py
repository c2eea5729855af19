"""Simplification of integer *data* expressions, which wrap at their width.

docs/ir.md ("Integer semantics") splits integer expressions in two:

- *index* expressions (int32/int64 built from variables and constants only) are
  mathematical integers: lowering assumes they never overflow, so the analyzer's
  division, min/max, comparison and bound rules apply to them;
- *data* expressions (any that reads a buffer or tensor, any int8/uint8 expression,
  and variables bound to such values) wrap modulo ``2**bits``.  Only identities of
  the ring of integers modulo ``2**bits`` hold for them: sums and products by
  constants are normalized (``x + a - a -> x``, ``x - x -> 0``, ``x * 1 -> x``), every
  other node (``//``, ``%``, min/max, comparisons, casts ...) is kept as an opaque
  atom whose operands are simplified and which folds only when all its operands
  are constants (with wrapped values).  No bounds are used: ``(x*2)//2`` and
  ``x + 1 > x`` stay as written.
"""
from __future__ import annotations

from typing import Any

from ..dtype import DType
from ..expr import (Add, BufferLoad, Const, EQ, Expr, GE, GT, LE, LT, Mul, NE, Reduce,
                    SizeVar, Sub, TensorLoad, Var)
from .constfold import fold_node
from .linear import RANK_DATA, Lin, gkey, lin_add, lin_const, lin_key, lin_scale

_LOADS = (BufferLoad, TensorLoad, Reduce)
_VARS = (Var, SizeVar)
_AB = ("a", "b")
#: integer dtypes of data (not of indices): their arithmetic may wrap
_DATA_INTS = frozenset(d for d in DType if d.is_int and d not in (DType.INT32, DType.INT64))
_DECIDE_ZERO = {EQ: lambda c: c == 0, NE: lambda c: c != 0,
                LE: lambda c: True if c == 0 else None, GE: lambda c: True if c == 0 else None,
                LT: lambda c: False if c == 0 else None, GT: lambda c: False if c == 0 else None}


def wrap_lin(lin: Lin, dtype: DType) -> Lin:
    """``lin`` with every coefficient and the constant reduced modulo ``2**bits`` (into
    the signed range, so ``x - 1`` stays ``x - 1`` for uint8 too); zero terms vanish."""
    half = _HALF[dtype]
    c = lin.const
    if lin.terms:
        terms = {}
        for k, (x, co) in lin.terms.items():
            if not -half <= co < half:
                co = (co + half) % (2 * half) - half
            if co:
                terms[k] = (x, co)
    elif -half <= c < half:
        return lin
    else:
        terms = lin.terms
    if not -half <= c < half:
        c = (c + half) % (2 * half) - half
    return Lin(terms, c)


def reads_data(e: Any, subst: dict) -> bool:
    """True if integer data occurs anywhere in ``e`` (see ``DataMixin._has_data``)."""
    todo = [e]
    seen: "set | None" = None
    n = 0
    while todo:
        x = todo.pop()
        cls = type(x)
        if cls is Const:
            continue
        if cls in _VARS or isinstance(x, Var):
            if x.dtype in _DATA_INTS:
                return True
            v = subst.get(x) if subst else None
            if v is not None:
                todo.append(v)
            continue
        if cls in _LOADS:
            return True
        n += 1
        if n > 32:                       # a large DAG: visit shared nodes once
            if seen is None:
                seen = set()
            if id(x) in seen:
                continue
            seen.add(id(x))
        fields = cls._fields
        if fields == _AB:
            todo.append(x.a)
            todo.append(x.b)
            continue
        if not fields:
            y = x.as_expr()
            if y is not x:
                todo.append(y)
            continue
        for f in fields:
            v = getattr(x, f)
            if isinstance(v, tuple):
                todo.extend(c for c in v if isinstance(c, Expr))
            elif isinstance(v, Expr):
                todo.append(v)
    return False


class DataMixin:
    """The data half of ``Analyzer`` (which provides ``_memo``, ``_lin``, ``_simp``,
    ``_other``, ``_subst`` and ``_atom``)."""

    # ---- which expressions are data -------------------------------------------------
    def _has_data(self, e: Any) -> bool:
        """True if the integer value of ``e`` wraps: ``e`` reads memory, is of a non-index
        integer dtype, or uses a variable bound to such a value (memoized per call).
        Always False while the analyzer works on inputs free of data (``_data_on``)."""
        if not self._data_on:
            return False
        cls = type(e)
        if cls is Const:
            return False
        if cls is Var or cls is SizeVar:
            if e.dtype not in _INDEX_INTS and e.dtype.is_int:
                return True
            s = self._subst.get(e)
            return s is not None and self._has_data(s)
        m = self._dmemo.get(id(e))
        if m is not None:
            return m[1]
        if isinstance(e, _LOADS):
            r = True
        elif isinstance(e, Var):
            s = self._subst.get(e)
            r = (e.dtype.is_int and e.dtype not in _INDEX_INTS) or (
                s is not None and self._has_data(s))
        else:
            r = False
            for f in type(e)._fields:
                v = getattr(e, f)
                for c in (v if isinstance(v, tuple) else (v,)):
                    if isinstance(c, Expr) and self._has_data(c):
                        r = True
                        break
                if r:
                    break
            if not type(e)._fields:
                x = e.as_expr()
                r = x is not e and self._has_data(x)
        self._dmemo[id(e)] = (e, r)
        return r

    def _scan(self, *exprs: Any) -> None:
        """Turn on data checks for the current call if an input holds data."""
        if not self._data_on and any(isinstance(x, Expr) and reads_data(x, self._subst)
                                     for x in exprs):
            self._data_on = True

    def _is_data_int(self, e: Expr) -> bool:
        dt = e.dtype
        return dt.is_int and (dt not in _INDEX_INTS or self._has_data(e))

    # ---- ring normal form modulo 2**bits ------------------------------------------------
    def _dlin(self, e: Expr) -> Lin:
        """The linear form of an integer expression, wrapped to its dtype's width."""
        m = self._memo.get(id(e))
        if m is not None:
            return m[1]
        dt = e.dtype
        cls = type(e)
        if dt in _INDEX_INTS and not self._has_data(e):
            lin = self._lin(e)                       # index: the full rules apply
        elif cls is Const:
            lin = lin_const(e.value)
        elif cls is Add or cls is Sub:
            lin = lin_add(self._dpart(e.a, dt), self._dpart(e.b, dt), 1 if cls is Add else -1)
        elif cls is Mul:
            a, b = self._dpart(e.a, dt), self._dpart(e.b, dt)
            a, b = wrap_lin(a, dt), wrap_lin(b, dt)
            if not b.terms:
                lin = lin_scale(a, b.const)
            elif not a.terms:
                lin = lin_scale(b, a.const)
            else:
                ka, kb = lin_key(a, dt), lin_key(b, dt)
                if kb < ka:
                    a, b, ka, kb = b, a, kb, ka
                node = Mul(self._to_expr(a, dt), self._to_expr(b, dt))
                lin = self._atom(node, (RANK_DATA, "Mul", dt, (ka, kb)))
        elif isinstance(e, Var) and e in self._subst:
            lin = self._dpart(self._subst[e], dt)
        else:
            node = self._other(e)
            if type(node) is Const:
                lin = lin_const(node.value)
            elif node is not e and type(node) in (Add, Sub, Mul) and node.dtype == dt:
                lin = self._dlin(node)
            else:
                lin = self._atom(node, _key(node))
        lin = wrap_lin(lin, dt)
        self._memo[id(e)] = (e, lin)
        return lin

    def _dpart(self, e: Expr, dt: DType) -> Lin:
        """The form of operand ``e`` inside a ``dt`` sum: an operand of another integer
        dtype (implicitly widened) is an atom holding its own wrapped value."""
        if e.dtype == dt:
            return self._dlin(e)
        x = self._simp(e)
        if type(x) is Const:
            return lin_const(x.value)
        return self._atom(x, _key(x))

    def _dsimp(self, e: Expr) -> Expr:
        return self._to_expr(self._dlin(e), e.dtype)

    def _dcmp(self, cls: type, e: Expr) -> Expr:
        """A comparison of data: decided only when the two sides are equal modulo
        ``2**bits`` or differ by a constant (for ``==``/``!=``), else kept."""
        a, b = e.a, e.b
        dt = a.dtype
        if b.dtype == dt:
            d = wrap_lin(lin_add(self._dlin(a), self._dlin(b), -1), dt)
            if not d.terms:
                r = _DECIDE_ZERO[cls](d.const)
                if r is not None:
                    return Const(r, DType.BOOL)
        x, y = self._simp(a), self._simp(b)
        return fold_node(e if x is a and y is b else cls(x, y))


def _key(node: Expr) -> tuple:
    """The key of an opaque data atom (shaped like the product keys above)."""
    return (RANK_DATA, "", node.dtype, (gkey(node),))


_INDEX_INTS = frozenset({DType.INT32, DType.INT64})
_HALF = {d: 2 ** (d.bits - 1) for d in DType if d.is_int}
