"""Shape helpers shared by the operators: axes, broadcasting, constant sizes."""
from __future__ import annotations

from typing import Any, Sequence

from tdsl.arith import Analyzer
from tdsl.dtype import INDEX, DType, as_dtype
from tdsl.errors import DTypeError, ShapeError
from tdsl.expr import Const, Expr, convert
from tdsl.tensor import Tensor


def check_tensor(op: str, x: Any, name: str = "x") -> Tensor:
    if not isinstance(x, Tensor):
        raise ShapeError(f"ops.{op}: {name} must be a tdsl tensor (td.placeholder / an ops result), "
                         f"got {type(x).__name__}")
    return x


def const_value(e: Any) -> "int | None":
    """The integer value of a size if it is a constant, else None."""
    if isinstance(e, int):
        return e
    if isinstance(e, Const) and e.dtype.is_int:
        return int(e.value)
    return None


def simplify(e: Any) -> Expr:
    return Analyzer().simplify(convert(e, INDEX))


def size_str(e: Any) -> str:
    return str(const_value(e)) if const_value(e) is not None else repr(e)


def shape_str(shape: Sequence[Any]) -> str:
    return "(" + ", ".join(size_str(s) for s in shape) + ")"


def same_size(a: Expr, b: Expr) -> bool:
    """True if two sizes are certainly equal (constants or provably equal expressions)."""
    ca, cb = const_value(a), const_value(b)
    if ca is not None and cb is not None:
        return ca == cb
    if a is b:
        return True
    return Analyzer().can_prove_equal(a, b)


def check_same_size(op: str, what: str, a: Expr, b: Expr) -> None:
    if not same_size(a, b):
        raise ShapeError(f"ops.{op}: {what}: sizes {size_str(a)} and {size_str(b)} differ "
                         f"(or cannot be proved equal)")


def norm_axis(op: str, axis: int, ndim: int) -> int:
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise ShapeError(f"ops.{op}: axis must be an int, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise ShapeError(f"ops.{op}: axis {axis} is out of range for a {ndim}-d tensor")
    return axis % ndim


def norm_axes(op: str, axis: Any, ndim: int) -> tuple[int, ...]:
    """Sorted, distinct non-negative axes from None (all), an int or a sequence."""
    if axis is None:
        return tuple(range(ndim))
    axes = [axis] if isinstance(axis, int) else list(axis)
    out = sorted({norm_axis(op, a, ndim) for a in axes})
    if len(out) != len(axes):
        raise ShapeError(f"ops.{op}: repeated axis in {axis!r}")
    return tuple(out)


def as_pair(op: str, what: str, v: Any) -> tuple[int, int]:
    if isinstance(v, int):
        v = (v, v)
    v = tuple(v)
    if len(v) != 2 or not all(isinstance(x, int) for x in v):
        raise ShapeError(f"ops.{op}: {what} must be an int or a pair of ints, got {v!r}")
    return v  # type: ignore[return-value]


def padding4(op: str, padding: Any) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) from an int, a pair (h, w) or a 4-tuple (TVM's order)."""
    if isinstance(padding, int):
        padding = (padding,) * 4
    padding = tuple(padding)
    if len(padding) == 2:
        padding = (padding[0], padding[1], padding[0], padding[1])
    if len(padding) != 4 or not all(isinstance(p, int) and p >= 0 for p in padding):
        raise ShapeError(f"ops.{op}: padding must be an int, (pad_h, pad_w) or (top, left, bottom, "
                         f"right) of non-negative ints, got {padding!r}")
    return padding  # type: ignore[return-value]


def broadcast_shape(op: str, *shapes: Sequence[Expr]) -> tuple[Expr, ...]:
    """NumPy broadcasting of shapes whose sizes may be symbolic."""
    ndim = max(len(s) for s in shapes)
    out: list[Expr] = []
    for d in range(ndim):
        cur: "Expr | None" = None
        for s in shapes:
            k = d - (ndim - len(s))
            if k < 0:
                continue
            e = s[k]
            if const_value(e) == 1:
                if cur is None:
                    cur = e
                continue
            if cur is None or const_value(cur) == 1:
                cur = e
            elif not same_size(cur, e):
                raise ShapeError(f"ops.{op}: cannot broadcast shapes "
                                 f"{', '.join(shape_str(x) for x in shapes)}: dimension {d} has sizes "
                                 f"{size_str(cur)} and {size_str(e)} (sizes must be equal or 1)")
        out.append(cur if cur is not None else Const(1, INDEX))
    return tuple(out)


def broadcast_index(x: Tensor, out_shape: Sequence[Expr], idx: Sequence[Expr]) -> list[Expr]:
    """The index into ``x`` for output index ``idx`` under broadcasting (a size-1 dimension
    of ``x`` reads index 0 unless the output's dimension is 1 too)."""
    off = len(out_shape) - x.ndim
    res = []
    for d, s in enumerate(x.shape):
        bcast = const_value(s) == 1 and const_value(out_shape[off + d]) != 1
        res.append(Const(0, INDEX) if bcast else idx[off + d])
    return res


def result_dtype(op: str, *dtypes: DType) -> DType:
    first = dtypes[0]
    for d in dtypes[1:]:
        if d != first:
            if d.is_int and first.is_int:
                first = first if (first.bits, first.is_signed) >= (d.bits, d.is_signed) else d
                continue
            raise DTypeError(f"ops.{op}: operands have dtypes {first} and {d}; cast one with "
                             f"ops.cast(x, dtype)")
    return first


def out_dtype_of(op: str, dtype: Any, default: DType) -> DType:
    return default if dtype is None else as_dtype(dtype)


def prod(sizes: Sequence[Expr]) -> Expr:
    out: Expr = Const(1, INDEX)
    for s in sizes:
        out = out * s
    return simplify(out)
