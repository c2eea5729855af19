"""Layout operators: transpose, reshape, flatten, expand_dims, squeeze, pad, concatenate."""
from __future__ import annotations

from typing import Any, Sequence

import tdsl.intrin as _i
from tdsl.dtype import INDEX
from tdsl.errors import ShapeError
from tdsl.expr import Const, Expr, Select, convert
from tdsl.tensor import Tensor, compute

from ._util import (check_same_size, check_tensor, const_value, norm_axis, prod, same_size,
                    shape_str, simplify)
from .tags import OpKind

__all__ = ["transpose", "reshape", "flatten", "expand_dims", "squeeze", "pad", "concatenate"]


def transpose(x: Tensor, axes: "Sequence[int] | None" = None) -> Tensor:
    """Permute dimensions (reverse them when ``axes`` is None), as ``np.transpose``."""
    check_tensor("transpose", x)
    nd = x.ndim
    if axes is None:
        axes = tuple(range(nd - 1, -1, -1))
    axes = tuple(norm_axis("transpose", a, nd) for a in axes)
    if sorted(axes) != list(range(nd)):
        raise ShapeError(f"ops.transpose: axes {axes} is not a permutation of {tuple(range(nd))}")
    shape = [x.shape[a] for a in axes]

    def body(*idx: Expr) -> Expr:
        src: list[Any] = [None] * nd
        for o, a in enumerate(axes):
            src[a] = idx[o]
        return x(*src)
    return compute(shape, body, name="T_transpose", tag=OpKind.INJECTIVE)


def _unravel(flat: Expr, shape: Sequence[Expr]) -> list[Expr]:
    out: list[Expr] = []
    rem = flat
    for d in range(len(shape) - 1, -1, -1):
        s = shape[d]
        if const_value(s) == 1:
            out.append(Const(0, INDEX))
            continue
        out.append(rem % s if d > 0 else rem)
        rem = rem // s
    return out[::-1]


def reshape(x: Tensor, newshape: Any) -> Tensor:
    """Row-major reshape (one size may be -1 and is inferred), as ``np.reshape``."""
    check_tensor("reshape", x)
    newshape = list(newshape) if isinstance(newshape, (list, tuple)) else [newshape]
    total = prod(x.shape)
    minus = [d for d, s in enumerate(newshape) if isinstance(s, int) and s == -1]
    if len(minus) > 1:
        raise ShapeError("ops.reshape: at most one size may be -1")
    if minus:
        known = prod([s for s in newshape if not (isinstance(s, int) and s == -1)])
        t, k = const_value(total), const_value(known)
        if t is not None and k is not None:
            if k == 0 or t % k:
                raise ShapeError(f"ops.reshape: cannot reshape {shape_str(x.shape)} into "
                                 f"{newshape}")
            newshape[minus[0]] = t // k
        else:
            newshape[minus[0]] = simplify(total // known)
    shape = [convert(s, INDEX) if not isinstance(s, Expr) else s for s in newshape]
    if not same_size(prod(shape), total):
        raise ShapeError(f"ops.reshape: cannot reshape {shape_str(x.shape)} "
                         f"({total} elements) into {shape_str(shape)}")
    if len(shape) == x.ndim and all(same_size(a, b) for a, b in zip(shape, x.shape)):
        return compute(shape, lambda *idx: x(*idx), name="T_reshape", tag=OpKind.INJECTIVE)

    def body(*idx: Expr) -> Expr:
        flat: Expr = Const(0, INDEX)
        for d, i in enumerate(idx):
            flat = flat * shape[d] + i if d else i
        return x(*_unravel(flat, x.shape))
    return compute(shape, body, name="T_reshape", tag=OpKind.INJECTIVE)


def flatten(x: Tensor, start_dim: int = 1, end_dim: int = -1) -> Tensor:
    """Merge dimensions ``start_dim..end_dim`` into one (``torch.flatten``)."""
    check_tensor("flatten", x)
    a = norm_axis("flatten", start_dim, x.ndim)
    b = norm_axis("flatten", end_dim, x.ndim)
    if b < a:
        raise ShapeError(f"ops.flatten: end_dim {end_dim} comes before start_dim {start_dim}")
    shape = list(x.shape[:a]) + [prod(x.shape[a:b + 1])] + list(x.shape[b + 1:])
    return reshape(x, shape)


def expand_dims(x: Tensor, axis: int) -> Tensor:
    """Insert a dimension of size 1 at ``axis``."""
    check_tensor("expand_dims", x)
    ax = norm_axis("expand_dims", axis, x.ndim + 1)
    shape = list(x.shape[:ax]) + [Const(1, INDEX)] + list(x.shape[ax:])
    return compute(shape, lambda *idx: x(*(idx[:ax] + idx[ax + 1:])), name="T_expand_dims",
                   tag=OpKind.INJECTIVE)


def squeeze(x: Tensor, axis: "int | Sequence[int] | None" = None) -> Tensor:
    """Remove dimensions of size 1 (all of them, or the given ones)."""
    check_tensor("squeeze", x)
    if axis is None:
        axes = [d for d, s in enumerate(x.shape) if const_value(s) == 1]
    else:
        axes = sorted({norm_axis("squeeze", a, x.ndim) for a in ([axis] if isinstance(axis, int) else axis)})
        for a in axes:
            if const_value(x.shape[a]) != 1:
                raise ShapeError(f"ops.squeeze: dimension {a} has size {x.shape[a]}, not 1")
    keep = [d for d in range(x.ndim) if d not in axes]
    if not keep:
        raise ShapeError("ops.squeeze: the result would be 0-d (not supported)")

    def body(*idx: Expr) -> Expr:
        src: list[Expr] = [Const(0, INDEX)] * x.ndim
        for o, d in enumerate(keep):
            src[d] = idx[o]
        return x(*src)
    return compute([x.shape[d] for d in keep], body, name="T_squeeze", tag=OpKind.INJECTIVE)


def pad(x: Tensor, pad_before: Sequence[int], pad_after: "Sequence[int] | None" = None,
        pad_value: Any = 0, name: str = "T_pad") -> Tensor:
    """Constant padding (TVM's ``topi.nn.pad``): ``pad_before[d]`` / ``pad_after[d]`` elements
    of ``pad_value`` before / after dimension d."""
    check_tensor("pad", x)
    pad_before = list(pad_before)
    pad_after = list(pad_before if pad_after is None else pad_after)
    if len(pad_before) != x.ndim or len(pad_after) != x.ndim:
        raise ShapeError(f"ops.pad: give one pad size per dimension ({x.ndim}), got "
                         f"{pad_before} / {pad_after}")
    for p in pad_before + pad_after:
        if not isinstance(p, (int, Expr)) or (isinstance(p, int) and p < 0):
            raise ShapeError(f"ops.pad: pad sizes must be non-negative ints, got {p!r}")
    shape = [simplify(s + b + a) for s, b, a in zip(x.shape, pad_before, pad_after)]
    value = convert(pad_value, x.dtype)
    if value.dtype != x.dtype:
        value = value.astype(x.dtype)

    def body(*idx: Expr) -> Expr:
        conds = []
        src = []
        for d, i in enumerate(idx):
            b, a = pad_before[d], pad_after[d]
            if isinstance(b, int) and b == 0 and isinstance(a, int) and a == 0:
                src.append(i)
                continue
            src.append(i - b if not (isinstance(b, int) and b == 0) else i)
            if not (isinstance(b, int) and b == 0):
                conds.append(i >= b)
            if not (isinstance(a, int) and a == 0):
                conds.append(i < x.shape[d] + b)
        if not conds:
            return x(*src)
        return Select(_i.all(*conds), x(*src), value)
    return compute(shape, body, name=name, tag=OpKind.PAD)


def concatenate(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Join tensors along ``axis`` (other sizes must match), as ``np.concatenate``."""
    tensors = list(tensors)
    if not tensors:
        raise ShapeError("ops.concatenate: give at least one tensor")
    for t in tensors:
        check_tensor("concatenate", t)
    first = tensors[0]
    nd = first.ndim
    ax = norm_axis("concatenate", axis, nd)
    for t in tensors[1:]:
        if t.ndim != nd:
            raise ShapeError(f"ops.concatenate: tensors have {nd} and {t.ndim} dimensions")
        if t.dtype != first.dtype:
            raise ShapeError(f"ops.concatenate: dtypes {first.dtype} and {t.dtype} differ; cast first")
        for d in range(nd):
            if d != ax:
                check_same_size("concatenate", f"dimension {d}", first.shape[d], t.shape[d])
    offsets: list[Expr] = []
    acc: Expr = Const(0, INDEX)
    for t in tensors:
        offsets.append(acc)
        acc = simplify(acc + t.shape[ax])
    shape = list(first.shape)
    shape[ax] = acc

    def body(*idx: Expr) -> Expr:
        i = idx[ax]

        def load(k: int) -> Expr:
            src = list(idx)
            src[ax] = i - offsets[k] if k else i
            return tensors[k](*src)
        out = load(len(tensors) - 1)
        for k in range(len(tensors) - 2, -1, -1):
            out = Select(i < offsets[k + 1], load(k), out)
        return out
    return compute(shape, body, name="T_concatenate", tag=OpKind.INJECTIVE)
