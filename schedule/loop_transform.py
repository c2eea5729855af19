"""split, fuse, reorder, tile: rewrites of a stage's loop structure.

Before/after, for ``s[C].split(i, factor=32)`` on ``for i in range(n): C[i] = ...``::

    for i.outer in range((n + 31) // 32):
        for i.inner in range(32):
            if i.outer * 32 + i.inner < n:      # only when 32 may not divide n
                C[i.outer * 32 + i.inner] = ...
"""
from __future__ import annotations

from typing import Any

from tdsl.errors import ScheduleError, TDSLError
from tdsl.expr import Const, Expr, convert
from tdsl.tensor import IterKind, IterVar

from .relations import Fuse, Singleton, Split
from .stage import Stage, position
from .tensorize import check_outside_region, check_reorder_keeps_region


def _positive_size(primitive: str, stage: Stage, loop: IterVar, what: str, value: Any) -> Expr:
    if isinstance(value, (IterVar, bool)) or isinstance(value, Expr) and not isinstance(value, Const) \
            and not value.dtype.is_int:
        raise ScheduleError(primitive, stage.name, f"{what} must be an integer or an integer size "
                            f"expression, got {type(value).__name__} {value!r}", loop.name)
    try:
        e = convert(value, loop.dtype) if not isinstance(value, Expr) else value.as_expr()
    except TDSLError:       # a float or non-number: say which primitive and loop
        raise ScheduleError(primitive, stage.name, f"{what} must be an integer, got {value!r}",
                            loop.name) from None
    if not e.dtype.is_int:
        raise ScheduleError(primitive, stage.name, f"{what} must be an integer, got {e.dtype}", loop.name)
    if isinstance(e, Const) and e.value < 1:
        raise ScheduleError(primitive, stage.name, f"{what} must be >= 1, got {e.value}", loop.name)
    if not isinstance(e, Const):
        from tdsl.arith import Analyzer
        if not Analyzer().can_prove(e >= 1):
            raise ScheduleError(primitive, stage.name, f"{what}={e!r} may be < 1 for some sizes; use "
                                f"an expression known to be >= 1 (e.g. td.max({e!r}, 1))", loop.name)
    return e


def _check_unannotated(primitive: str, stage: Stage, iv: IterVar) -> None:
    a = stage.iter_attrs.get(iv)
    if a is not None and (a.thread_tag is not None or a.tensor_intrin is not None):
        raise ScheduleError(primitive, stage.name, "the loop is already bound or tensorized; "
                            "transform loops before binding them", iv.name)
    check_outside_region(primitive, stage, [iv])


def check_split(stage: Stage, parent: Any, factor: Any, nparts: Any, primitive: str = "split"
                ) -> tuple[IterVar, Expr | None, Expr | None]:
    parent = stage.find_leaf(primitive, parent)
    _check_unannotated(primitive, stage, parent)
    if (factor is None) == (nparts is None):
        raise ScheduleError(primitive, stage.name, "give exactly one of factor= or nparts=", parent.name)
    f = _positive_size(primitive, stage, parent, "factor", factor) if factor is not None else None
    p = _positive_size(primitive, stage, parent, "nparts", nparts) if nparts is not None else None
    return parent, f, p


def split(stage: Stage, parent: Any, factor: Any = None, nparts: Any = None) -> tuple[IterVar, IterVar]:
    parent, f, p = check_split(stage, parent, factor, nparts)
    outer = stage.new_iter_var(f"{parent.name}.outer", parent.kind)
    inner = stage.new_iter_var(f"{parent.name}.inner", parent.kind)
    stage.relations.append(Split(parent, outer, inner, f, p))
    pos = position(stage.leaf_iter_vars, parent)
    stage.leaf_iter_vars[pos:pos + 1] = [outer, inner]
    old = stage.iter_attrs.pop(parent, None)
    if old is not None and old.pragmas:
        stage.attr(outer).pragmas.update(old.pragmas)
    _move_attachments(stage, [parent], inner)
    return outer, inner


def _move_attachments(stage: Stage, old: list[IterVar], new: IterVar) -> None:
    """Stages attached at a replaced loop move to the loop whose body now holds that body
    (bound inference recomputes the region they need there)."""
    for other in stage._sch.stages:
        if other.attach_stage is stage and any(other.attach_ivar is v for v in old):
            other.attach_ivar = new


def check_fuse(stage: Stage, ivs: tuple) -> list[IterVar]:
    leaves = [stage.find_leaf("fuse", iv) for iv in ivs]
    pos = [position(stage.leaf_iter_vars, iv) for iv in leaves]
    for a, b, pa, pb in zip(leaves, leaves[1:], pos, pos[1:]):
        if pb != pa + 1:
            raise ScheduleError("fuse", stage.name, f"loops '{a.name}' and '{b.name}' are not adjacent "
                                f"(outer first); current order: {[v.name for v in stage.leaf_iter_vars]}",
                                b.name)
    for iv in leaves:
        if iv.kind not in (IterKind.DATA_PAR, IterKind.REDUCE):
            raise ScheduleError("fuse", stage.name, f"cannot fuse a {iv.kind.value} loop", iv.name)
    for iv in leaves:
        _check_unannotated("fuse", stage, iv)
    return leaves


def fuse(stage: Stage, *ivs: IterVar) -> IterVar:
    """Fuse adjacent loops; with none, add a new outermost loop of extent 1 (TVM's
    singleton: a loop to split, bind or attach at in a stage that has none)."""
    leaves = check_fuse(stage, ivs)
    if not leaves:
        single = stage.new_iter_var("singleton", IterKind.DATA_PAR)
        stage.relations.append(Singleton(single))
        stage.leaf_iter_vars.insert(0, single)
        return single
    fused = leaves[0]
    for inner in leaves[1:]:
        # as in TVM: a spatial loop fused with a reduction loop is a reduction loop (the
        # reduction's init then loops over it too: lowering.nest.init_nest)
        kind = IterKind.REDUCE if IterKind.REDUCE in (fused.kind, inner.kind) else fused.kind
        new = stage.new_iter_var(f"{fused.name}.{inner.name}.fused", kind)
        stage.relations.append(Fuse(fused, inner, new))
        pos = position(stage.leaf_iter_vars, fused)
        stage.leaf_iter_vars[pos:pos + 2] = [new]
        _move_attachments(stage, [fused, inner], new)
        fused = new
    return fused


def check_reorder(stage: Stage, ivs: tuple) -> list[IterVar]:
    leaves = [stage.find_leaf("reorder", iv) for iv in ivs]
    seen = set()
    for iv in leaves:
        if iv in seen:
            raise ScheduleError("reorder", stage.name, f"loop '{iv.name}' is given twice", iv.name)
        seen.add(iv)
    positions = sorted(position(stage.leaf_iter_vars, iv) for iv in leaves)
    new_order = list(stage.leaf_iter_vars)
    for pos, iv in zip(positions, leaves):
        new_order[pos] = iv
    check_reorder_keeps_region(stage, new_order)
    return leaves


def reorder(stage: Stage, *ivs: IterVar) -> None:
    leaves = check_reorder(stage, ivs)
    positions = sorted(position(stage.leaf_iter_vars, iv) for iv in leaves)
    for pos, iv in zip(positions, leaves):
        stage.leaf_iter_vars[pos] = iv


def check_tile(stage: Stage, x: Any, y: Any, x_factor: Any, y_factor: Any) -> None:
    x, _, _ = check_split(stage, x, x_factor, None, "tile")
    y, _, _ = check_split(stage, y, y_factor, None, "tile")
    if x is y:
        raise ScheduleError("tile", stage.name, "x_parent and y_parent are the same loop", x.name)


def tile(stage: Stage, x: IterVar, y: IterVar, x_factor: Any, y_factor: Any
         ) -> tuple[IterVar, IterVar, IterVar, IterVar]:
    check_tile(stage, x, y, x_factor, y_factor)
    xo, xi = split(stage, x, x_factor)
    yo, yi = split(stage, y, y_factor)
    reorder(stage, xo, yo, xi, yi)
    return xo, yo, xi, yi
