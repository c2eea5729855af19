"""``topi.split`` and ``topi.take``: TVM's two layout operators that ``tdsl.ops`` lacks, as
one injective compute per output (TVM's ``T_split_sections``/``T_split``, ``T_take``)."""
from __future__ import annotations

import numbers
from typing import Any, Sequence

from tdsl.dtype import INDEX
from tdsl.errors import ShapeError
from tdsl.expr import Const, Expr, Max, Min
from tdsl.ops._util import check_tensor, const_value, norm_axis, prod, shape_str
from tdsl.ops.tags import OpKind
from tdsl.ops.transform import _unravel
from tdsl.tensor import Tensor, compute

_TAKE_MODES = ("clip", "wrap", "fast")


def split(ary: Tensor, indices_or_sections: Any, axis: int = 0) -> list[Tensor]:
    """Cut ``ary`` along ``axis``: into ``n`` equal parts (an int, which must divide the
    size), or at the increasing positions of a list (``[2, 5]`` gives ``[:2]``, ``[2:5]``,
    ``[5:]``), as ``np.split``."""
    check_tensor("topi.split", ary, "ary")
    ax = norm_axis("topi.split", axis, ary.ndim)
    size = const_value(ary.shape[ax])
    if size is None:
        raise ShapeError(f"topi.split: axis {ax} has the symbolic size {ary.shape[ax]}; "
                         f"split needs a constant size")
    if isinstance(indices_or_sections, numbers.Integral) and not isinstance(
            indices_or_sections, bool):
        n = int(indices_or_sections)
        if n <= 0 or size % n:
            raise ShapeError(f"topi.split: {n} sections do not divide axis {ax} of "
                             f"{shape_str(ary.shape)} (size {size})")
        begins = [k * (size // n) for k in range(n)]
        name = "T_split_sections"
    elif isinstance(indices_or_sections, (list, tuple)):
        pos = [const_value(p) for p in indices_or_sections]
        if any(p is None for p in pos) or pos != sorted(pos) or (pos and (
                pos[0] < 0 or pos[-1] > size)):
            raise ShapeError(f"topi.split: split points {list(indices_or_sections)} must be "
                             f"increasing constants in [0, {size}]")
        begins = [0] + [int(p) for p in pos]  # type: ignore[arg-type]
        name = "T_split"
    else:
        raise ShapeError(f"topi.split: indices_or_sections must be an int or a list of ints, "
                         f"got {indices_or_sections!r}")
    ends = begins[1:] + [size]
    if any(e == b for b, e in zip(begins, ends)):
        raise ShapeError(f"topi.split: split points {list(indices_or_sections)} leave an empty "
                         f"part of axis {ax} (size {size}); tdsl tensors have no size-0 axis")
    outs = []
    for b, e in zip(begins, ends):
        shape = list(ary.shape)
        shape[ax] = Const(e - b, INDEX)

        def body(*idx: Expr, b: int = b) -> Expr:
            src = list(idx)
            src[ax] = idx[ax] + b if b else idx[ax]
            return ary(*src)
        outs.append(compute(shape, body, name=name, tag=OpKind.INJECTIVE))
    return outs


def take(a: Tensor, indices: Any, axis: "int | None" = None, batch_dims: int = 0,
         mode: str = "clip") -> Tensor:
    """``a``'s elements at ``indices`` (a tensor of integers), along ``axis`` or, with no
    axis, in ``a`` flattened, as ``np.take``.  ``mode`` handles an index out of range:
    "clip" (the default) clamps it into range, "wrap" takes it modulo the size.  "fast" is
    TVM's unchecked mode (an index out of range reads outside ``a``); tdsl clamps there too,
    so a bad index never reads outside the tensor."""
    check_tensor("topi.take", a, "a")
    check_tensor("topi.take", indices, "indices")
    if not indices.dtype.is_int:
        raise ShapeError(f"topi.take: indices must be integers, got {indices.dtype}")
    if mode not in _TAKE_MODES:
        raise ShapeError(f"topi.take: mode must be one of {_TAKE_MODES}, got {mode!r}")
    if batch_dims:
        raise ShapeError("topi.take: batch_dims is not supported (give 0)")
    ax = None if axis is None else norm_axis("topi.take", axis, a.ndim)
    size = prod(a.shape) if ax is None else a.shape[ax]
    k = indices.ndim

    def fix(i: Expr) -> Expr:
        i = i.astype(INDEX) if i.dtype != INDEX else i
        if mode == "wrap":
            return i % size
        return Min(Max(i, Const(0, INDEX)), size - 1)

    if ax is None:
        def body(*idx: Expr) -> Expr:
            return a(*_unravel(fix(indices(*idx)), a.shape))
        shape: Sequence[Any] = indices.shape
    else:
        def body(*idx: Expr) -> Expr:
            src = list(idx[:ax]) + [fix(indices(*idx[ax:ax + k]))] + list(idx[ax + k:])
            return a(*src)
        shape = list(a.shape[:ax]) + list(indices.shape) + list(a.shape[ax + 1:])
    return compute(tuple(shape), body, name="T_take", tag=OpKind.INJECTIVE)


__all__ = ["split", "take"]
