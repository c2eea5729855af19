"""Reductions over axes: sum, mean, max, min, prod, argmax, argmin (NumPy/PyTorch semantics)."""
from __future__ import annotations

from typing import Any, Callable

import tdsl.intrin as _i
from tdsl.dtype import INDEX, DType
from tdsl.errors import DTypeError, ShapeError
from tdsl.expr import Const, Expr, convert
from tdsl.reduction import comm_reducer, max_value, min_value
from tdsl.reduction import max as _rmax
from tdsl.reduction import min as _rmin
from tdsl.reduction import sum as _rsum
from tdsl.tensor import Tensor, compute, reduce_axis

from ._util import check_tensor, norm_axes, prod
from .tags import OpKind

__all__ = ["sum", "mean", "max", "min", "prod_", "argmax", "argmin", "reduce"]

_rprod = comm_reducer(lambda x, y: x * y, lambda t: Const(1, t), name="prod")


def _argreducer(better: Callable[[Expr, Expr], Expr], better_eq: Callable[[Expr, Expr], Expr],
                not_better: Callable[[Expr, Expr], Expr], identity: Callable[[DType], Const],
                name: str) -> Any:
    """An (index, value) reducer with NumPy's semantics: NaN beats every number (the first
    NaN wins), ties go to the smaller index, and the identity's index (the index dtype's
    largest value) loses every tie -- so a row of -inf gives 0, as NumPy does, never the
    identity.  Commutative and associative, so rfactor can merge partial results; its
    in-order ``fupdate`` (loops that visit the points in index order) skips the index
    compare."""
    def fcombine(x: tuple, y: tuple) -> tuple:
        xv, yv = x[1], y[1]
        first = y[0] < x[0]
        if xv.dtype.is_float:
            # y wins: when it comes first, if it ties or beats x or is NaN; else if it
            # beats x strictly or is a NaN against a number -- ``not (y <= x)`` is "y > x
            # or either is NaN", masked by "x is not NaN".  Two compares and a mask per
            # side instead of five compares (the arg-reduction's inner loop is bound by
            # this count once its chains are independent).
            if_first = better_eq(yv, xv) | _i.isnan(yv)
            if_later = ~not_better(yv, xv) & ~_i.isnan(xv)
        else:
            if_first = better_eq(yv, xv)
            if_later = better(yv, xv)
        take = (first & if_first) | (~first & if_later)
        return _i.if_then_else(take, y[0], x[0]), _i.if_then_else(take, y[1], x[1])

    def fupdate(x: tuple, y: tuple) -> tuple:
        # y comes after everything x holds (loops in iteration order): it wins if strictly
        # better (or a NaN against a number), or if x is still the identity -- no index
        # compare, three fewer vector instructions per element than fcombine
        xv, yv = x[1], y[1]
        if xv.dtype.is_float:
            later = ~not_better(yv, xv) & ~_i.isnan(xv)
        else:
            later = better(yv, xv)
        take = later | (x[0] == max_value(x[0].dtype))
        return _i.if_then_else(take, y[0], x[0]), _i.if_then_else(take, y[1], x[1])

    def fidentity(t0: DType, t1: DType) -> tuple:
        return max_value(t0), identity(t1)
    return comm_reducer(fcombine, fidentity, name=name, fupdate=fupdate)


_argmax = _argreducer(lambda a, b: a > b, lambda a, b: a >= b, lambda a, b: a <= b,
                      min_value, "argmax")
_argmin = _argreducer(lambda a, b: a < b, lambda a, b: a <= b, lambda a, b: a >= b,
                      max_value, "argmin")


def _layout(op: str, x: Tensor, axis: Any, keepdims: bool):
    axes = norm_axes(op, axis, x.ndim)
    if not axes:
        raise ShapeError(f"ops.{op}: no axis to reduce")
    kept = [d for d in range(x.ndim) if d not in axes]
    if keepdims:
        shape = [Const(1, INDEX) if d in axes else x.shape[d] for d in range(x.ndim)]
    else:
        shape = [x.shape[d] for d in kept]
    if not shape:
        shape = [Const(1, INDEX)]
    return axes, kept, shape


def reduce(x: Tensor, reducer: Any, axis: Any = None, keepdims: bool = False,
           name: str = "T_reduce", kind: OpKind = OpKind.REDUCE,
           map_value: "Callable[[Expr], Expr] | None" = None) -> Tensor:
    """``reducer`` (td.sum, td.max, ... or a ``td.comm_reducer``) of ``map_value(x)`` over
    ``axis`` (None: all axes).  The result has the kept dimensions (size-1 ones for
    ``keepdims``; shape ``(1,)`` when every axis is reduced)."""
    check_tensor(name, x)
    axes, kept, shape = _layout(name, x, axis, keepdims)
    ks = {d: reduce_axis((0, x.shape[d]), name=f"k{d}") for d in axes}

    def body(*idx: Expr) -> Expr:
        src: list[Any] = [None] * x.ndim
        if keepdims:
            for d in kept:
                src[d] = idx[d]
        else:
            for o, d in enumerate(kept):
                src[d] = idx[o]
        for d, k in ks.items():
            src[d] = k
        v = x(*src)
        if map_value is not None:
            v = map_value(v)
        return reducer(v, axis=[ks[d] for d in axes])
    return compute(shape, body, name=name, tag=kind)


def sum(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Sum over ``axis`` (int, tuple or None for all)."""
    return reduce(x, _rsum, axis, keepdims, "T_sum")


def max(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Largest value along ``axis``.  NaN is not propagated as NumPy's ``max`` does: a
    NaN may be skipped (as ``np.fmax.reduce``); ``argmax`` follows NumPy exactly."""
    return reduce(x, _rmax, axis, keepdims, "T_max")


def min(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Smallest value along ``axis`` (NaN as in ``max``)."""
    return reduce(x, _rmin, axis, keepdims, "T_min")


def prod_(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    return reduce(x, _rprod, axis, keepdims, "T_prod")


def mean(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Arithmetic mean over ``axis`` (float tensors): a sum, then a scale."""
    check_tensor("mean", x)
    if not x.dtype.is_float:
        raise DTypeError(f"ops.mean: needs a float tensor, got {x.dtype}; cast it first")
    axes = norm_axes("mean", axis, x.ndim)
    s = reduce(x, _rsum, axis, keepdims, "T_mean_sum")
    count = prod([x.shape[d] for d in axes])
    inv = convert(1.0, x.dtype) / count.astype(x.dtype)
    return compute(s.shape, lambda *idx: s(*idx) * inv, name="T_mean", tag=OpKind.ELEMWISE)


def _arg(op: str, red: Any, x: Tensor, axis: "int | None", keepdims: bool) -> Tensor:
    """The (index, value) reduction over ``axis`` (None: every axis, the index flat in
    row-major order, as NumPy's), then the index as int64.  Every axis is reduced in
    place (no reshape): the last one stays a contiguous inner loop the schedules
    vectorize, where a flattened 1-D view would index ``x[k // n, k % n]``."""
    check_tensor(op, x)
    if x.dtype.is_bool:
        raise DTypeError(f"ops.{op}: bool tensors are not supported; cast to int8 first")
    if axis is not None and not isinstance(axis, int):
        raise ShapeError(f"ops.{op}: axis must be an int or None, got {axis!r}")
    axes, kept, shape = _layout(op, x, axis, keepdims)
    ks = [reduce_axis((0, x.shape[d]), name=f"k{d}") for d in axes]
    size = prod([x.shape[d] for d in axes])
    # 32-bit indices inside the reduction where the reduced size is known to fit: twice
    # the vector lanes, and single-cycle compares (x86 has no fast 64-bit vector compare)
    index_dtype = "int32" if isinstance(size, Const) and size.value < 2 ** 31 - 1 else INDEX

    def body(*idx: Expr) -> tuple:
        src: list[Any] = [None] * x.ndim
        if keepdims:
            for e in kept:
                src[e] = idx[e]
        else:
            for o, e in enumerate(kept):
                src[e] = idx[o]
        flat: "Expr | None" = None
        for d, k in zip(axes, ks):
            src[d] = k
            kv = k.var.astype(index_dtype)
            flat = kv if flat is None else flat * x.shape[d].astype(index_dtype) + kv
        return red((flat, x(*src)), axis=ks)
    index, _value = compute(shape, body, name=f"T_{op}_red", tag=OpKind.REDUCE)
    # The (index, value) reduction is an intermediate; the result copies the index out.
    return compute(shape, lambda *idx: index(*idx).astype(INDEX), name=f"T_{op}",
                   tag=OpKind.ELEMWISE)


def argmax(x: Tensor, axis: "int | None" = None, keepdims: bool = False) -> Tensor:
    """Index (int64) of the largest value along ``axis`` (first one on ties; flat when None)."""
    return _arg("argmax", _argmax, x, axis, keepdims)


def argmin(x: Tensor, axis: "int | None" = None, keepdims: bool = False) -> Tensor:
    """Index (int64) of the smallest value along ``axis`` (first one on ties)."""
    return _arg("argmin", _argmin, x, axis, keepdims)
