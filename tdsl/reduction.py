"""Commutative reducers: sum, max, min and user-defined ones (TVM's comm_reducer)."""
from __future__ import annotations

from typing import Any, Callable, Sequence

from .dtype import DType, as_dtype
from .errors import DTypeError, TDSLError
from .expr import Const, Expr, Max, Min, Reduce, Var, convert
from .tensor import IterKind, IterVar
from .visitor import substitute


class CommReducer:
    """A combiner ``result(lhs, rhs)`` with ``identity``, specialized to the value dtypes.

    ``update`` (optional): a cheaper combiner for folding the elements of a reduction into
    an accumulator *in iteration order* (each new element comes after every element the
    accumulator holds), starting from the identity -- an argmax needs no index compare
    there: a later element wins only if strictly better.  Lowering uses it where the
    reduction loops run in the order of the reduction axes (``combine_in_order``)."""

    __slots__ = ("name", "lhs", "rhs", "result", "identity", "update")

    def __init__(self, name: str, lhs: Sequence[Var], rhs: Sequence[Var],
                 result: Sequence[Expr], identity: Sequence[Expr],
                 update: "Sequence[Expr] | None" = None):
        self.name = name
        self.lhs = tuple(lhs)
        self.rhs = tuple(rhs)
        self.result = tuple(result)
        self.identity = tuple(identity)
        self.update = None if update is None else tuple(update)

    def combine(self, acc: Sequence[Expr], value: Sequence[Expr]) -> tuple[Expr, ...]:
        """The combined values for accumulators ``acc`` and new values ``value``."""
        return self._apply(self.result, acc, value)

    def combine_in_order(self, acc: Sequence[Expr], value: Sequence[Expr]) -> tuple[Expr, ...]:
        """``combine`` for a ``value`` that comes after everything ``acc`` holds in the
        reduction's iteration order (``update`` when there is one)."""
        return self._apply(self.update if self.update is not None else self.result, acc, value)

    def unordered(self) -> "CommReducer":
        """This reducer without ``update``: for combining partial results (rfactor's merge),
        which come in no particular order."""
        if self.update is None:
            return self
        return CommReducer(self.name, self.lhs, self.rhs, self.result, self.identity)

    def _apply(self, exprs: Sequence[Expr], acc: Sequence[Expr],
               value: Sequence[Expr]) -> tuple[Expr, ...]:
        vmap = dict(zip(self.lhs, acc))
        vmap.update(zip(self.rhs, value))
        return tuple(substitute(r, vmap) for r in exprs)

    def __repr__(self) -> str:
        return f"CommReducer({self.name})"


class Reducer:
    """The user-facing reduction function returned by ``comm_reducer``.

    ``reducer(expr, axis=k, where=cond, init=v)`` builds a reduction;
    ``reducer(a, b)`` with two expressions combines them directly.
    """

    def __init__(self, fcombine: Callable, fidentity: Callable, name: str,
                 fupdate: "Callable | None" = None):
        self.fcombine = fcombine
        self.fidentity = fidentity
        self.fupdate = fupdate
        self.name = name
        self._cache: dict[tuple[DType, ...], CommReducer] = {}

    def specialize(self, dtypes: Sequence[DType]) -> CommReducer:
        key = tuple(dtypes)
        red = self._cache.get(key)
        if red is None:
            lhs = [Var(f"x{i}", t) for i, t in enumerate(key)]
            rhs = [Var(f"y{i}", t) for i, t in enumerate(key)]
            multi = len(key) > 1
            res = self.fcombine(tuple(lhs), tuple(rhs)) if multi else self.fcombine(lhs[0], rhs[0])
            ident = self.fidentity(*key)
            res = _as_tuple(res)
            ident = _as_tuple(ident)
            if len(res) != len(key) or len(ident) != len(key):
                raise TDSLError(f"reducer '{self.name}': fcombine and fidentity must return "
                                f"{len(key)} value(s), one per reduced value")
            res = tuple(convert(r, t) for r, t in zip(res, key))
            ident = tuple(convert(v, t) for v, t in zip(ident, key))
            for r, i, t in zip(res, ident, key):
                if r.dtype != t or i.dtype != t:
                    raise DTypeError(f"reducer '{self.name}': combiner/identity dtype "
                                     f"{r.dtype}/{i.dtype} differs from the value dtype {t}")
            upd = None
            if self.fupdate is not None:
                upd = _as_tuple(self.fupdate(tuple(lhs), tuple(rhs)) if multi
                                else self.fupdate(lhs[0], rhs[0]))
                if len(upd) != len(key):
                    raise TDSLError(f"reducer '{self.name}': fupdate must return {len(key)} "
                                    f"value(s), one per reduced value")
                upd = tuple(convert(u, t) for u, t in zip(upd, key))
                for u, t in zip(upd, key):
                    if u.dtype != t:
                        raise DTypeError(f"reducer '{self.name}': fupdate dtype {u.dtype} "
                                         f"differs from the value dtype {t}")
            red = self._cache[key] = CommReducer(self.name, lhs, rhs, res, ident, upd)
        return red

    def __call__(self, expr: Any, axis: Any = None, where: Any = None, init: Any = None) -> Any:
        mistaken_axis = isinstance(axis, Var) and isinstance(expr, Expr) and axis.dtype != expr.dtype
        if axis is not None and not isinstance(axis, (list, tuple, IterVar)) and not mistaken_axis \
                and not isinstance(expr, (tuple, list)):
            # reducer(a, b) combines two values (a loop variable of another dtype than the
            # value is a mistaken axis instead, reported below)
            # reducer(a, b): combine two values.
            a, b = convert(expr), convert(axis, convert(expr).dtype)
            return self.specialize([a.dtype]).combine([a], [b])[0]
        if axis is None:
            raise TDSLError(f"{self.name}: give the reduction axis, e.g. {self.name}(x, axis=k)")
        axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
        for a in axes:
            if not isinstance(a, IterVar) or a.kind is not IterKind.REDUCE:
                what = getattr(a, "name", repr(a))
                raise TDSLError(f"{self.name}: axis '{what}' is not a reduce_axis; declare it with "
                                f"td.reduce_axis((lo, hi), name=...)")
        multi = isinstance(expr, (tuple, list))
        source = tuple(convert(e) for e in (expr if multi else (expr,)))
        cond = convert(True) if where is None else convert(where)
        if not cond.dtype.is_bool:
            raise DTypeError(f"{self.name}: where= must be a bool condition, got {cond.dtype}")
        red = self.specialize([s.dtype for s in source])
        inits: tuple[Expr, ...] = ()
        if init is not None:
            inits = tuple(convert(v, s.dtype) for v, s in
                          zip(init if isinstance(init, (tuple, list)) else (init,), source))
        outs = tuple(Reduce(red, source, axes, cond, i, inits) for i in range(len(source)))
        return outs if multi else outs[0]

    def __repr__(self) -> str:
        return f"<reducer {self.name}>"


def _as_tuple(x: Any) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _is_axis(x: Any) -> bool:
    if isinstance(x, (list, tuple)):
        return all(isinstance(a, IterVar) for a in x)
    return isinstance(x, IterVar) and x.kind is IterKind.REDUCE


def comm_reducer(fcombine: Callable, fidentity: Callable, name: str = "reduce",
                 fupdate: "Callable | None" = None) -> Reducer:
    """A commutative reducer from a combiner and an identity (TVM's te.comm_reducer).

    ``fupdate(acc, value)`` (optional, tdsl's own): the combiner specialized to a
    ``value`` that comes after every element ``acc`` holds in iteration order, ``acc``
    starting at the identity; folding any sequence with it in order must give what
    ``fcombine`` gives.  Loops that keep that order use it (an argmax's strict "better"
    test, without the index compare its ties need in any order)."""
    return Reducer(fcombine, fidentity, name, fupdate)


def max_value(dtype: "DType | str") -> Const:
    """The largest value of ``dtype`` (+inf for floats); ``dtype`` may be a name, as in TVM."""
    import numpy as np
    dtype = as_dtype(dtype)
    if dtype.is_float:
        return Const(float("inf"), dtype)
    if dtype.is_bool:
        return Const(True, dtype)
    return Const(int(np.iinfo(dtype.numpy).max), dtype)


def min_value(dtype: "DType | str") -> Const:
    """The smallest value of ``dtype`` (-inf for floats); ``dtype`` may be a name, as in TVM."""
    import numpy as np
    dtype = as_dtype(dtype)
    if dtype.is_float:
        return Const(float("-inf"), dtype)
    if dtype.is_bool:
        return Const(False, dtype)
    return Const(int(np.iinfo(dtype.numpy).min), dtype)


sum = comm_reducer(lambda x, y: x + y, lambda t: Const(0, t), name="sum")  # noqa: A001
max = comm_reducer(lambda x, y: Max(*_same(x, y)), min_value, name="max")  # noqa: A001
min = comm_reducer(lambda x, y: Min(*_same(x, y)), max_value, name="min")  # noqa: A001


def _same(a: Any, b: Any) -> tuple[Expr, Expr]:
    from .expr import _operands
    return _operands("max/min", a, b)
