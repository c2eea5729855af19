"""Tail guards of stages staged in a GPU kernel: zero fill at the fetch, none in the compute.

Inside a kernel an attached stage's region is not clamped to its domain (the loops around
barriers keep thread-independent extents), so at sizes the tiles do not divide its nest
runs over points outside the domain.  The plain answer -- guard every point -- puts the
guard inside the innermost k loop of a tiled GEMM, on every register FMA.  An expert
kernel instead guards the fetch (zero filling what lies outside) and the final store:

* **fill**: a staged stage (local or shared, attached in a kernel, not a reduction) that
  reads global memory stores ``0`` at its out-of-domain points instead of skipping them,
  so every element of its buffer is defined and is zero outside the domain;
* **drop**: a staged stage that reads only staged buffers written at every point of
  their regions (filled or dropped themselves) needs no domain guard at all: its reads
  stay inside the producers' buffers (bound inference sized them for this stage's
  unclamped region) and find defined values there, and its writes stay inside its own.  The values it computes at
  out-of-domain points flow only into out-of-domain points of its consumers (a
  well-formed program reads a tensor inside its domain), which the final global store's
  guard discards;
* a reduction tail (``k >= K`` of a split ``k``; a term ``e < K`` of the reduction's
  condition, which ``rfactor`` of such a split adds) adds nothing to a **sum** whose every
  factor is a load, indexed by ``k`` (``e``) along an axis ``[0, K)``, of a *zero-padded*
  stage: a filled one, or a dropped-guard identity copy (``cache_read``) of a
  zero-padded one.  Its guard is dropped too.

A stage that reads global memory and is a reduction, or writes global memory, keeps its
guards.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..expr import (Add, And, Const, Div, Expr, FloorDiv, FloorMod, LT, Mul, Reduce, TensorLoad,
                    Var)
from .. import intrin
from ..stmt import StorageScope
from ..structural import structural_equal
from ..tensor import IterVar
from ..visitor import post_order_visit
from tdsl.schedule.stage import AttachType

from .bound import in_kernel, storage_scope

if TYPE_CHECKING:
    from tdsl.schedule import Stage

    from .nest import NestBuilder

#: What a staged stage does with its domain guards.
GUARD, FILL, DROP = "guard", "fill", "drop"


def _staged(nb: "NestBuilder", st: "Stage") -> bool:
    """A non-global buffer of a stage attached inside a kernel (sized for its region)."""
    stor = nb.storage.get(st)
    return (not st.is_placeholder and st.attach_type is AttachType.SCOPE and in_kernel(st)
            and stor is not None and stor.allocated and stor.covers_region
            and storage_scope(st) in (StorageScope.LOCAL, StorageScope.SHARED))


def _loads(e: Any) -> list[TensorLoad]:
    out: list[TensorLoad] = []

    def fn(n: Any) -> None:
        if isinstance(n, TensorLoad):
            out.append(n)
    post_order_visit(e, fn)
    return out


def _divides_by_data(e: Any) -> bool:
    """An integer division by a non-constant (garbage there could trap the emulator)."""
    found = False

    def fn(n: Any) -> None:
        nonlocal found
        if isinstance(n, (Div, FloorDiv, FloorMod)) and not isinstance(n.b, Const) and \
                not n.dtype.is_float:
            found = True
    post_order_visit(e, fn)
    return found


def _body(nb: "NestBuilder", st: "Stage") -> tuple:
    return tuple(nb.bodies.get(st, ()))


def domain_policy(nb: "NestBuilder", st: "Stage") -> str:
    """GUARD, FILL or DROP for ``st``'s domain guards (see the module doc)."""
    body = _body(nb, st)
    if not body or not _staged(nb, st) or any(_divides_by_data(e) for e in body):
        return GUARD
    from .nest import is_thread_reduce
    if any(is_thread_reduce(st, iv) for iv in st.leaf_iter_vars):
        return GUARD    # a cross-thread reduction's nest keeps its domain guards (allreduce.py)
    reads = [nb.sch[ld.tensor] for e in body for ld in _loads(e)]
    # every producer staged and written at every point of its region (no read of an
    # element no thread wrote)
    if all(_staged(nb, p) and domain_policy(nb, p) != GUARD for p in reads):
        return DROP
    return GUARD if isinstance(body[0], Reduce) else FILL


def zero_padded(nb: "NestBuilder", st: "Stage", seen: "frozenset[int]" = frozenset()) -> bool:
    """Every element of ``st``'s buffer outside its domain holds zero after its nest."""
    if id(st) in seen:
        return False
    policy = domain_policy(nb, st)
    if policy == FILL:
        return True
    if policy != DROP:
        return False
    body = _body(nb, st)
    if len(body) != 1 or not isinstance(body[0], TensorLoad):
        return False
    ld = body[0]
    src = nb.sch[ld.tensor]
    axes = list(st.op.axis)
    same_index = len(ld.indices) == len(axes) and all(
        isinstance(i, Var) and i is ax.var for i, ax in zip(ld.indices, axes))
    same_domain = len(ld.tensor.shape) == len(axes) and all(
        structural_equal(s, ax.dom.extent) and _is_zero(ax.dom.min)
        for s, ax in zip(ld.tensor.shape, axes))
    return same_index and same_domain and zero_padded(nb, src, seen | {id(st)})


def _is_zero(e: Expr) -> bool:
    return isinstance(e, Const) and e.value == 0


def _is_sum(red: Reduce) -> bool:
    c = red.combiner
    if len(c.result) != 1 or not _is_zero(c.identity[0]):
        return False
    r = c.result[0]
    return isinstance(r, Add) and {id(r.a), id(r.b)} == {id(c.lhs[0]), id(c.rhs[0])}


def _factors(e: Expr) -> list[Expr]:
    if isinstance(e, Mul):
        return _factors(e.a) + _factors(e.b)
    return [e]


def _zero_past(nb: "NestBuilder", st: "Stage", index: Expr, extent: Expr) -> bool:
    """``st`` is a staged sum whose every term is zero where ``index >= extent``: each
    factor a load of a zero-padded stage at ``index`` along an axis ``[0, extent)``."""
    body = _body(nb, st)
    if len(body) != 1 or not isinstance(body[0], Reduce) or not _is_sum(body[0]) \
            or domain_policy(nb, st) != DROP:
        return False
    for f in _factors(body[0].source[0]):
        if not isinstance(f, TensorLoad) or not zero_padded(nb, nb.sch[f.tensor]):
            return False
        src_axes = nb.sch[f.tensor].op.axis
        if not any(structural_equal(i, index) and _is_zero(ax.dom.min)
                   and structural_equal(ax.dom.extent, extent)
                   for i, ax in zip(f.indices, src_axes)):
            return False
    return True


def zero_beyond(nb: "NestBuilder", st: "Stage", axis: IterVar) -> bool:
    """Iterations of reduction ``axis`` past its extent add zero to ``st``'s sum."""
    return axis in st.op.reduce_axis and _is_zero(axis.dom.min) and \
        _zero_past(nb, st, axis.var, axis.dom.extent)


def _conjuncts(e: Expr) -> list[Expr]:
    if isinstance(e, And):
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [e]


def needed_condition(nb: "NestBuilder", st: "Stage", red: Reduce) -> Expr:
    """``red.condition`` less its ``index < extent`` terms that zero-padded operands make
    redundant (an ``rfactor`` of a split with a tail: ``ko * L + ki < K``)."""
    keep = [c for c in _conjuncts(red.condition)
            if not (isinstance(c, LT) and _zero_past(nb, st, c.a, c.b))]
    return intrin.all(*keep) if keep else Const(True, "bool")
