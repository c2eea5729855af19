"""Bound inference: how much of each stage to compute, and where its loops run.

A stage at root computes its whole declared domain.  A stage attached inside
a loop of a consumer computes the region its consumers read during one
iteration of that loop: the loops inside the attach point range over their
extents, the loops outside are fixed symbols.  Loops bound to GPU threads are
relaxed too when the buffer is shared by those threads.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..arith import Analyzer, Interval
from ..errors import LoweringError
from ..expr import Const, Expr, TensorLoad, Var
from ..intrin import maximum, minimum
from ..stmt import StorageScope
from ..tensor import IterVar, Range
from ..visitor import post_order_visit, substitute
from tdsl.schedule.relations import Fuse, pass_down, pass_up
from tdsl.schedule.stage import AttachType

if TYPE_CHECKING:
    from tdsl.schedule import Schedule, Stage


@dataclass
class StageBounds:
    """What bound inference found for one stage."""

    root_ranges: dict[IterVar, Range]
    extents: dict[IterVar, Expr]          # every iteration variable's extent
    values: dict[IterVar, Expr] = field(default_factory=dict)   # 0-based, in leaf loop vars
    root_values: dict[IterVar, Expr] = field(default_factory=dict)  # min + value, simplified


def stage_loops(st: "Stage", bounds: StageBounds) -> dict[Var, Expr]:
    """The extent of each leaf loop variable of ``st``."""
    return {iv.var: bounds.extents[iv] for iv in st.leaf_iter_vars}


def _loads_of(body: tuple, target: "Stage", sch: "Schedule") -> list[TensorLoad]:
    out: list[TensorLoad] = []

    def fn(n: Any) -> None:
        if isinstance(n, TensorLoad) and sch[n.tensor] is target:
            out.append(n)
    from .inline import map_body

    def visit(e: Any) -> Any:
        post_order_visit(e, fn)
        return e
    map_body(body, visit)
    return out


def _enclosing_chain(sch: "Schedule", x: "Stage", host: "Stage", ivar: IterVar,
                     bounds: dict) -> "dict[Var, Expr] | None":
    """Loop vars of ``x`` and of the stages between ``x`` and ``host`` that lie inside
    ``host``'s loop ``ivar`` (with their extents), or None if ``x`` is not under it."""
    relaxed: dict[Var, Expr] = {}
    cur = x
    if cur is not host:
        relaxed.update(stage_loops(cur, bounds[cur]))
    while cur is not host:
        parent, at = cur.attach_stage, cur.attach_ivar
        if parent is None:
            return None
        pos = parent.leaf_iter_vars.index(at)
        if parent is host:
            hpos = host.leaf_iter_vars.index(ivar)
            if pos < hpos:
                return None
            for iv in host.leaf_iter_vars[hpos + 1:pos + 1]:
                relaxed[iv.var] = bounds[host].extents[iv]
            return relaxed
        for iv in parent.leaf_iter_vars[:pos + 1]:
            relaxed[iv.var] = bounds[parent].extents[iv]
        cur = parent
    hpos = host.leaf_iter_vars.index(ivar)
    for iv in host.leaf_iter_vars[hpos + 1:]:
        relaxed[iv.var] = bounds[host].extents[iv]
    return relaxed


def enclosing_tags(st: "Stage") -> list:
    """Thread tags of the loops enclosing ``st``'s attach point."""
    tags = []
    cur, at = st.attach_stage, st.attach_ivar
    while cur is not None:
        pos = cur.leaf_iter_vars.index(at) if at in cur.leaf_iter_vars else len(cur.leaf_iter_vars) - 1
        for iv in cur.leaf_iter_vars[:pos + 1]:
            a = cur.iter_attrs.get(iv)
            if a is not None and a.thread_tag is not None:
                tags.append(a.thread_tag)
        cur, at = cur.attach_stage, cur.attach_ivar
    return tags


def storage_scope(st: "Stage") -> StorageScope:
    """The scope of a stage's buffer.  Unset, it is global -- except for a stage attached
    inside a GPU kernel, which is per thread (local), or per block (shared) when its own
    loops are bound to threads (cooperative computation), as TVM infers."""
    if st.scope is not None:
        return st.scope
    if st.attach_type is AttachType.SCOPE and enclosing_tags(st):
        own = any(a.thread_tag is not None and a.thread_tag.is_thread for a in st.iter_attrs.values())
        return StorageScope.SHARED if own else StorageScope.LOCAL
    return StorageScope.GLOBAL


def _thread_relaxed(sch: "Schedule", st: "Stage", bounds: dict) -> dict[Var, Expr]:
    """Thread-bound loops enclosing ``st``'s attach point whose values must be relaxed."""
    scope = storage_scope(st)
    if scope is StorageScope.LOCAL:
        return {}
    out: dict[Var, Expr] = {}
    cur, at = st.attach_stage, st.attach_ivar
    while cur is not None:
        pos = cur.leaf_iter_vars.index(at)
        for iv in cur.leaf_iter_vars[:pos + 1]:
            a = cur.iter_attrs.get(iv)
            if a is not None and a.thread_tag is not None:
                if a.thread_tag.is_thread or scope is StorageScope.GLOBAL:
                    out[iv.var] = bounds[cur].extents[iv]
        cur, at = cur.attach_stage, cur.attach_ivar
    return out


def relax(ana: Analyzer, e: Expr, dom: dict[Var, Interval]) -> Interval:
    """The interval of ``e`` when the variables in ``dom`` range over their intervals."""
    s = ana.int_set(e, dom)
    lo, hi = s.min, s.max
    for _ in range(4):
        if lo is None or hi is None:
            break
        from ..visitor import uses_var
        keys = frozenset(dom)
        if not uses_var(lo, keys) and not uses_var(hi, keys):
            break
        lo = ana.int_set(lo, dom).min
        hi = ana.int_set(hi, dom).max
    return Interval(lo, hi)


def with_full_regions(st: "Stage", b: StageBounds, ana: Analyzer
                      ) -> "tuple[StageBounds, list[Expr]] | None":
    """The bounds of an attached stage with every clamped region extent replaced by its
    full constant size, and the conditions under which the region is not clamped at all
    (None when no extent is clamped).  Lowering uses them to emit a full-tile copy of
    the nest with constant extents next to the guarded one (loop partitioning)."""
    ranges = dict(b.root_ranges)
    conds: list[Expr] = []
    for iv in st.op.axis:
        r = ranges[iv]
        if r.full_extent is None or ana.can_prove_equal(r.extent, r.full_extent):
            continue
        full = Range(r.min, r.full_extent)
        full.alloc_bound, full.full_extent = r.alloc_bound, r.full_extent
        ranges[iv] = full
        conds.append(ana.simplify(r.extent >= r.full_extent))
    if not conds:
        return None
    ext = pass_down(st.relations, {iv: ana.simplify(r.extent) for iv, r in ranges.items()}, ana)
    nb = StageBounds(ranges, ext)
    nb.values = pass_up(st.relations, {iv: iv.var for iv in st.leaf_iter_vars}, ext)
    nb.root_values = {iv: ana.simplify(ranges[iv].min + nb.values[iv]) for iv in st.root_iter_vars}
    return nb, conds


def in_kernel(st: "Stage") -> bool:
    """True if ``st`` or a stage it is attached inside binds a loop to a GPU thread axis."""
    cur = st
    while cur is not None:
        if any(a.thread_tag is not None for a in cur.iter_attrs.values()):
            return True
        cur = cur.attach_stage
    return False


def infer_bounds(sch: "Schedule", bodies: dict, ana: Analyzer) -> dict["Stage", StageBounds]:
    """Bounds of every non-inlined compute stage, consumers before producers."""
    bounds: dict["Stage", StageBounds] = {}
    for st in reversed(sch.stages):
        if st.is_placeholder or st.attach_type is AttachType.INLINE:
            continue
        if st.attach_type is AttachType.SCOPE:
            ranges = _attached_ranges(sch, st, bodies, bounds, ana)
            if any(isinstance(r, Fuse) for r in st.relations):
                # In a consumer's tail iteration an attached region can be empty with a
                # *negative* extent; fusing two such loops would multiply two negative
                # extents into a positive one (a loop running out of bounds): clamp at 0.
                for iv, r in list(ranges.items()):
                    if not ana.can_prove(r.extent >= 0):
                        clamped = Range(r.min, ana.simplify(maximum(r.extent, 0)))
                        clamped.alloc_bound = r.alloc_bound
                        ranges[iv] = clamped
        else:
            ranges = {iv: iv.dom for iv in st.op.axis}
        for iv in st.op.reduce_axis:
            ranges[iv] = iv.dom
        ext = pass_down(st.relations, {iv: ana.simplify(r.extent) for iv, r in ranges.items()}, ana)
        b = StageBounds(ranges, ext)
        b.values = pass_up(st.relations, {iv: iv.var for iv in st.leaf_iter_vars}, ext)
        for iv in st.leaf_iter_vars:
            e = ext[iv]
            if ana.can_prove(e >= 1):
                ana.bind(iv.var, Range(0, e))
            else:
                # An extent that may be <= 0 (e.g. an attached region in a consumer's tail
                # iteration).  A range [0, e) would assert e >= 1 -- true only inside the
                # loop -- and this analyzer's facts are global: guards of the consumer that
                # depend on it would be "proved" and dropped.  Keep constant bounds only.
                hi = ana.const_int_bound(e)[1]
                ana.bind(iv.var, Interval(Const(0, iv.var.dtype),
                                          None if hi is None else max(hi - 1, 0)))
        b.root_values = {iv: ana.simplify(ranges[iv].min + b.values[iv]) for iv in st.root_iter_vars}
        bounds[st] = b
    return bounds


def _attached_ranges(sch: "Schedule", st: "Stage", bodies: dict, bounds: dict,
                     ana: Analyzer) -> dict[IterVar, Range]:
    host, ivar = st.attach_stage, st.attach_ivar
    if host.attach_type is AttachType.INLINE:
        raise LoweringError(f"compute_at: stage '{st.name}' is attached to a loop of '{host.name}', "
                            f"which was inlined and has no loops; attach it elsewhere")
    tpos = next((p for p, iv in enumerate(host.leaf_iter_vars)
                 if host.iter_attrs.get(iv) and host.iter_attrs[iv].tensor_intrin is not None), None)
    if tpos is not None and ivar in host.leaf_iter_vars and host.leaf_iter_vars.index(ivar) >= tpos:
        raise LoweringError(f"compute_at: stage '{st.name}' is attached to loop '{ivar.name}' of "
                            f"'{host.name}', which is inside a tensorized region")
    if ivar not in host.leaf_iter_vars:
        raise LoweringError(f"compute_at: stage '{st.name}' is attached to loop '{ivar.name}' of "
                            f"'{host.name}', which is no longer a loop of it (it was split or fused "
                            f"after compute_at); attach to one of {[v.name for v in host.leaf_iter_vars]}")
    extra = _thread_relaxed(sch, st, bounds)
    ndim = len(st.op.axis)
    lo: list[Expr | None] = [None] * ndim
    hi: list[Expr | None] = [None] * ndim
    consumers = sch.consumers(st)
    for x in consumers:
        if x not in bounds:
            raise LoweringError(f"compute_at: stage '{st.name}' is read by '{x.name}', which is inlined "
                                f"or not computed")
        relaxed = _enclosing_chain(sch, x, host, ivar, bounds)
        if relaxed is None:
            raise LoweringError(
                f"compute_at: stage '{st.name}' is attached to loop '{ivar.name}' of '{host.name}', but "
                f"stage '{x.name}' also reads it outside that loop; attach it where every reader is "
                f"inside, or compute it at root")
        relaxed.update(extra)
        dom = {v: Interval(Const(0, v.dtype), ana.simplify(e - 1)) for v, e in relaxed.items()}
        vmap = {iv.var: bounds[x].root_values[iv] for iv in x.root_iter_vars}
        for load in _loads_of(bodies[x], st, sch):
            for d, idx in enumerate(load.indices):
                s = relax(ana, ana.simplify(substitute(idx, vmap)), dom)
                if s.min is None or s.max is None:
                    lo[d] = Const(0, "int64")
                    hi[d] = st.op.axis[d].dom.extent - 1
                    continue
                lo[d] = s.min if lo[d] is None else ana.simplify(minimum(lo[d], s.min))
                hi[d] = s.max if hi[d] is None else ana.simplify(maximum(hi[d], s.max))
    ranges: dict[IterVar, Range] = {}
    for d, iv in enumerate(st.op.axis):
        if lo[d] is None:
            ranges[iv] = iv.dom
            continue
        dmin = iv.dom.min
        dmax = ana.simplify(iv.dom.min + iv.dom.extent - 1)
        a = ana.simplify(maximum(lo[d], dmin))
        # min(hi, dmax) - a + 1, distributed so that each side folds on its own
        if in_kernel(st):
            # Keep thread-independent extents inside GPU kernels (barriers may sit in these
            # loops); the nest guards the declared domain instead of clamping the region.
            ranges[iv] = Range(lo[d], ana.simplify(hi[d] - lo[d] + 1))
            continue
        need = ana.simplify(hi[d] - a + 1)
        ext = minimum(need, ana.simplify(dmax - a + 1))
        ranges[iv] = Range(a, ana.simplify(ext))
        ranges[iv].alloc_bound = ana.const_int_bound(need)[1]
        if isinstance(need, Const):
            ranges[iv].full_extent = need
    return ranges
