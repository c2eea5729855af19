"""``topi.einsum`` and ``topi.tensordot``: tensor contractions as one compute each.

``einsum("ij,jk->ik", A, B)`` is ``C[i, k] = sum over j of A[i, j] * B[j, k]``: every
letter is a loop, the letters of the output are its axes, the others reduce axes; a
letter repeated in one operand reads its diagonal (``"ii->i"``).  Without ``->`` the
output letters are those used once, in alphabetical order (NumPy's rule).
``tensordot`` names its axes as NumPy's does and is an ``einsum``.
"""
from __future__ import annotations

import string
from typing import Any, Sequence

import tdsl
from tdsl.arith import Analyzer
from tdsl.errors import ShapeError
from tdsl.tensor import Tensor


def _parse(subscripts: str, n_ops: int) -> tuple[list[str], str]:
    spec = subscripts.replace(" ", "")
    if "." in spec:
        raise ShapeError(f"topi.einsum: '...' (broadcast dimensions) is not supported by "
                         f"tdsl.compat; name every axis, got {subscripts!r}")
    lhs, arrow, out = spec.partition("->")
    ins = lhs.split(",")
    if len(ins) != n_ops:
        raise ShapeError(f"topi.einsum: {subscripts!r} names {len(ins)} operand(s), "
                         f"got {n_ops}")
    for part in ins + [out]:
        bad = [c for c in part if c not in string.ascii_letters]
        if bad:
            raise ShapeError(f"topi.einsum: {subscripts!r}: {bad[0]!r} is not an axis letter")
    if not arrow:
        used = "".join(ins)
        out = "".join(sorted(c for c in set(used) if used.count(c) == 1))
    for c in out:
        if out.count(c) > 1 or c not in "".join(ins):
            raise ShapeError(f"topi.einsum: {subscripts!r}: output letter {c!r} appears twice "
                             f"or in no operand")
    return ins, out


def _extents(ins: list[str], ops: Sequence[Tensor], subscripts: str) -> dict[str, Any]:
    ext: dict[str, Any] = {}
    ana = Analyzer()
    for k, (letters, t) in enumerate(zip(ins, ops)):
        if len(letters) != len(t.shape):
            raise ShapeError(f"topi.einsum: {subscripts!r}: operand {k} ({t.name}) has "
                             f"{len(t.shape)} dimension(s), the subscripts name {len(letters)}")
        for c, d in zip(letters, t.shape):
            if c in ext and not ana.can_prove_equal(ext[c], d):
                raise ShapeError(f"topi.einsum: {subscripts!r}: axis {c!r} has extent "
                                 f"{ext[c]} in one place and {d} in another")
            ext.setdefault(c, d)
    return ext


def einsum(subscripts: str, *operand: Tensor) -> Tensor:
    """The contraction ``subscripts`` of the operands (TVM's ``topi.einsum``)."""
    ops = list(operand[0]) if len(operand) == 1 and isinstance(operand[0], (list, tuple)) \
        else list(operand)
    if not ops or not all(isinstance(t, Tensor) for t in ops):
        raise ShapeError("topi.einsum: the operands must be tensors")
    ins, out = _parse(subscripts, len(ops))
    ext = _extents(ins, ops, subscripts)
    red_letters = [c for c in dict.fromkeys("".join(ins)) if c not in out]

    def body(*idx: Any) -> Any:
        rvs = [tdsl.reduce_axis((0, ext[c]), name=c) for c in red_letters]
        at = dict(zip(out, idx))
        at.update({c: rv for c, rv in zip(red_letters, rvs)})
        value = None
        for letters, t in zip(ins, ops):
            load = t(*[at[c] for c in letters])
            value = load if value is None else value * load
        return tdsl.sum(value, axis=rvs) if rvs else value
    return tdsl.compute(tuple(ext[c] for c in out), body, name="T_einsum", tag="einsum")


def tensordot(a: Tensor, b: Tensor, axes: Any = 2) -> Tensor:
    """The sum of products over ``axes`` (an int N: the last N axes of ``a`` with the first
    N of ``b``; or two lists of axes), NumPy's ``tensordot``."""
    if isinstance(axes, int):
        if not 0 <= axes <= min(len(a.shape), len(b.shape)):
            raise ShapeError(f"topi.tensordot: axes={axes} for operands of {len(a.shape)} "
                             f"and {len(b.shape)} dimension(s)")
        ax_a = list(range(len(a.shape) - axes, len(a.shape)))
        ax_b = list(range(axes))
    else:
        try:
            ax_a, ax_b = ([int(x) for x in (v if isinstance(v, (list, tuple)) else [v])]
                          for v in axes)
        except (TypeError, ValueError):
            raise ShapeError(f"topi.tensordot: axes must be an int or two lists of axes, "
                             f"got {axes!r}") from None
        if len(ax_a) != len(ax_b):
            raise ShapeError(f"topi.tensordot: axes {axes!r} pair {len(ax_a)} axis/axes of a "
                             f"with {len(ax_b)} of b")
    letters = iter(string.ascii_letters)
    la = [next(letters) for _ in a.shape]
    lb = [next(letters) for _ in b.shape]
    for x, y in zip(ax_a, ax_b):
        if not (-len(la) <= x < len(la) and -len(lb) <= y < len(lb)):
            raise ShapeError(f"topi.tensordot: axis pair ({x}, {y}) out of range")
        lb[y] = la[x]
    out = [c for i, c in enumerate(la) if i not in {x % len(la) for x in ax_a}]
    out += [c for i, c in enumerate(lb) if i not in {y % len(lb) for y in ax_b}]
    return einsum(f"{''.join(la)},{''.join(lb)}->{''.join(out)}", a, b)


__all__ = ["einsum", "tensordot"]
