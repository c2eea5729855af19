"""How a stage's loops derive from its root axes: split, fuse and singleton
relations.

``pass_down`` turns root domains into leaf-loop extents; ``pass_up`` expresses
each root axis as a function of the leaf loop variables.  Both are shared by
bound inference, loop-nest construction, rfactor and tensorize.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from tdsl.expr import Const, Expr
from tdsl.tensor import IterVar

if TYPE_CHECKING:
    from tdsl.arith import Analyzer


@dataclass(frozen=True, eq=False)
class Split:
    """``parent = outer * factor + inner`` (``factor`` is derived from ``nparts`` when given)."""

    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: "Expr | None"
    nparts: "Expr | None"


@dataclass(frozen=True, eq=False)
class Fuse:
    """``fused = outer * extent(inner) + inner``."""

    outer: IterVar
    inner: IterVar
    fused: IterVar


@dataclass(frozen=True, eq=False)
class Singleton:
    """A new loop of extent 1 derived from no axis (``fuse()`` with no loops: TVM's way to
    give a stage with no loops, or no spatial loops, one to schedule at)."""

    iter_var: IterVar


Relation = "Split | Fuse | Singleton"


def ceil_div(a: Expr, b: Expr) -> Expr:
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(-(-a.value // b.value), a.dtype)
    return (a + b - 1) // b


def split_extents(parent_ext: Expr, rel: Split) -> tuple[Expr, Expr]:
    """(outer extent, inner extent) of a split of a loop of extent ``parent_ext``."""
    if rel.factor is not None:
        return ceil_div(parent_ext, rel.factor), rel.factor
    assert rel.nparts is not None
    return rel.nparts, ceil_div(parent_ext, rel.nparts)


def pass_down(relations: list, root_extents: Mapping[IterVar, Expr],
              ana: "Analyzer | None" = None) -> dict[IterVar, Expr]:
    """The extent of every iteration variable, from the extents of the root axes."""
    ext: dict[IterVar, Expr] = dict(root_extents)
    simp = ana.simplify if ana is not None else (lambda e: e)
    for rel in relations:
        if isinstance(rel, Split):
            outer, inner = split_extents(ext[rel.parent], rel)
            ext[rel.outer] = simp(outer)
            ext[rel.inner] = simp(inner)
        elif isinstance(rel, Singleton):
            ext[rel.iter_var] = Const(1, rel.iter_var.dtype)
        else:
            ext[rel.fused] = simp(ext[rel.outer] * ext[rel.inner])
    return ext


def pass_up(relations: list, leaf_values: Mapping[IterVar, Expr],
            extents: Mapping[IterVar, Expr]) -> dict[IterVar, Expr]:
    """The 0-based value of every iteration variable given the leaf values."""
    val: dict[IterVar, Expr] = dict(leaf_values)
    for rel in reversed(relations):
        if isinstance(rel, Split):
            _, inner_ext = split_extents(extents[rel.parent], rel)
            val[rel.parent] = val[rel.outer] * inner_ext + val[rel.inner]
        elif isinstance(rel, Fuse):
            inner_ext = extents[rel.inner]
            val[rel.outer] = val[rel.fused] // inner_ext
            val[rel.inner] = val[rel.fused] % inner_ext
    return val


def split_predicates(relations: list, values: Mapping[IterVar, Expr],
                     extents: Mapping[IterVar, Expr], ana: "Analyzer") -> list[tuple[IterVar, Expr]]:
    """``value(parent) < extent(parent)`` for every split that may not divide evenly.

    A value out of its own range is caught at the split that produced it, so
    these guards are exactly what keeps tails in bounds (and reductions from
    counting an element twice).
    """
    preds = []
    for rel in relations:
        if not isinstance(rel, Split):
            continue
        pext = extents[rel.parent]
        outer_ext, inner_ext = split_extents(pext, rel)
        if ana.can_prove_equal(outer_ext * inner_ext, pext):
            continue
        preds.append((rel.parent, values[rel.parent] < pext))
    return preds


def leaf_ancestry(relations: list, root: IterVar) -> set[IterVar]:
    """Every iteration variable derived from ``root`` (itself included)."""
    out = {root}
    for rel in relations:
        if isinstance(rel, Split) and rel.parent in out:
            out.update((rel.outer, rel.inner))
        elif isinstance(rel, Fuse) and (rel.outer in out or rel.inner in out):
            out.add(rel.fused)
    return out


def pure_reduce_loops(stage: Any) -> set[IterVar]:
    """The stage's reduction leaf loops that no spatial axis flows into.  A loop fused
    from a spatial and a reduction loop (TVM allows it; it is a reduction loop) also
    indexes the output: the reduction's init must loop over it too."""
    from tdsl.tensor import IterKind
    spatial: set = set()
    for r in stage.root_iter_vars:
        if r.kind is not IterKind.REDUCE:
            spatial |= leaf_ancestry(stage.relations, r)
    return {iv for iv in stage.leaf_iter_vars if iv.kind is IterKind.REDUCE and iv not in spatial}


def reduce_loops_in_order(stage: Any, exclude: "IterVar | None" = None) -> bool:
    """True if ``stage``'s reduction loops (but ``exclude``) visit the reduction's
    points in the order of its axes (row-major: the first axis outermost): each leaf
    derived by splits, the outer part of a split before its inner part, no reorder
    that breaks that, and each loop serial or unrolled.  A reducer's in-order ``update``
    (``CommReducer.combine_in_order``) is valid only then."""
    from tdsl.stmt import ForKind
    from tdsl.tensor import IterKind
    roots = list(stage.op.reduce_axis)
    keys: dict[IterVar, tuple] = {r: (i,) for i, r in enumerate(roots)}
    for rel in stage.relations:          # in creation order: a parent before its parts
        if isinstance(rel, Split) and rel.parent in keys:
            keys[rel.outer] = keys[rel.parent] + (0,)
            keys[rel.inner] = keys[rel.parent] + (1,)
        elif isinstance(rel, Fuse) and (rel.outer in keys or rel.inner in keys):
            return False
    last: "tuple | None" = None
    for iv in stage.leaf_iter_vars:
        if iv.kind is not IterKind.REDUCE or iv is exclude:
            continue
        key = keys.get(iv)
        attr = stage.iter_attrs.get(iv)
        if key is None or (last is not None and key <= last):
            return False
        if attr is not None and (attr.thread_tag is not None or attr.tensor_intrin is not None
                                 or attr.kind not in (ForKind.SERIAL, ForKind.UNROLLED)):
            return False
        last = key
    return True


def relation_vars(rel: "Split | Fuse | Singleton") -> tuple[IterVar, ...]:
    """Every iteration variable a relation mentions."""
    if isinstance(rel, Split):
        return (rel.parent, rel.outer, rel.inner)
    if isinstance(rel, Singleton):
        return (rel.iter_var,)
    return (rel.outer, rel.inner, rel.fused)


__all__ = ["Split", "Fuse", "Singleton", "pass_down", "pass_up", "split_predicates", "split_extents",
           "leaf_ancestry", "relation_vars", "ceil_div", "reduce_loops_in_order",
           "pure_reduce_loops"]
