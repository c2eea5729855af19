"""Bound inference: how much of each stage to compute, and where its loops run.

A stage at root computes its whole declared domain.  A stage attached inside
a loop of a consumer computes the region its consumers read during one
iteration of that loop: the loops inside the attach point range over their
extents, the loops outside are fixed symbols.  Loops bound to GPU threads are
relaxed too when the buffer is shared by those threads.
"""
from __future__ import annotations

from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from ..arith import Analyzer, Interval
from ..errors import LoweringError
from ..expr import Const, Expr, Reduce, TensorLoad, Var
from ..intrin import maximum, minimum
from ..stmt import StorageScope
from ..tensor import IterKind, IterVar, Range
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
    # the variable of each leaf loop: the IterVar's own, or a fresh one when another stage
    # has the same IterVar object among its loops (one reduce_axis used by two computes)
    loop_vars: dict[IterVar, Var] = field(default_factory=dict)
    #: an argument of the function: computed whole even when attached (``arg_region.py``)
    argument: bool = False

    def loop_var(self, iv: IterVar) -> Var:
        """The variable of leaf loop ``iv`` in the lowered nest."""
        return self.loop_vars.get(iv, iv.var)


def stage_loops(st: "Stage", bounds: StageBounds) -> dict[Var, Expr]:
    """The extent of each leaf loop variable of ``st``."""
    return {bounds.loop_var(iv): bounds.extents[iv] for iv in st.leaf_iter_vars}


@contextmanager
def loop_scope(ana: Analyzer, loops: Iterable[tuple[Var, Expr]]) -> Iterator[Analyzer]:
    """Bind each loop variable to ``[0, extent)`` for the duration of the block.

    Such a range also says that the loop runs (``extent >= 1``), which holds only inside
    it: every fact lowering uses is scoped to the code it describes, never global."""
    with ExitStack() as stack:
        for v, e in loops:
            stack.enter_context(ana.bind(v, Range(0, e)))
        yield ana


def enclosing_loops(st: "Stage", bounds: dict) -> list[tuple[Var, Expr]]:
    """The loops around ``st``'s attach point (outermost first), as (variable, extent)."""
    out: list[tuple[Var, Expr]] = []
    if st.attach_type is not AttachType.SCOPE:
        return out
    cur, at = st.attach_stage, st.attach_ivar
    while cur is not None and cur in bounds and at in cur.leaf_iter_vars:
        b = bounds[cur]
        pos = cur.leaf_iter_vars.index(at)
        out[:0] = [(b.loop_var(iv), b.extents[iv]) for iv in cur.leaf_iter_vars[:pos + 1]]
        if cur.attach_type is not AttachType.SCOPE:
            break
        cur, at = cur.attach_stage, cur.attach_ivar
    return out


def enclosing_scope(st: "Stage", bounds: dict, ana: Analyzer) -> Any:
    """``with enclosing_scope(st, bounds, ana):`` knows the loops around ``st``."""
    return loop_scope(ana, enclosing_loops(st, bounds))


def attached_descendants(sch: "Schedule", st: "Stage") -> list["Stage"]:
    """The stages attached (directly or not) inside ``st``'s loops, in schedule order."""
    out = []
    for x in sch.stages:
        cur = x
        while cur.attach_type is AttachType.SCOPE and cur.attach_stage is not None:
            cur = cur.attach_stage
            if cur is st:
                out.append(x)
                break
    return out


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
        pb = bounds[parent]
        if parent is host:
            hpos = host.leaf_iter_vars.index(ivar)
            if pos < hpos:
                return None
            for iv in host.leaf_iter_vars[hpos + 1:pos + 1]:
                relaxed[pb.loop_var(iv)] = pb.extents[iv]
            return relaxed
        for iv in parent.leaf_iter_vars[:pos + 1]:
            relaxed[pb.loop_var(iv)] = pb.extents[iv]
        cur = parent
    hpos = host.leaf_iter_vars.index(ivar)
    hb = bounds[host]
    for iv in host.leaf_iter_vars[hpos + 1:]:
        relaxed[hb.loop_var(iv)] = hb.extents[iv]
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
                    out[bounds[cur].loop_var(iv)] = bounds[cur].extents[iv]
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
    full = _finish(st, ranges, b.loop_vars, ana)
    full.argument = b.argument
    return full, conds


def in_kernel(st: "Stage") -> bool:
    """True if ``st`` or a stage it is attached inside binds a loop to a GPU thread axis."""
    cur = st
    while cur is not None:
        if any(a.thread_tag is not None for a in cur.iter_attrs.values()):
            return True
        cur = cur.attach_stage
    return False


def infer_bounds(sch: "Schedule", bodies: dict, ana: Analyzer,
                 materialize: "frozenset[Stage]" = frozenset(),
                 arguments: "frozenset[Stage]" = frozenset()) -> dict["Stage", StageBounds]:
    """Bounds of every non-inlined compute stage, consumers before producers.  Inlined
    stages in ``materialize`` (arguments of the function) are computed whole at root too;
    attached stages in ``arguments`` write their whole domain over all iterations.

    Each stage's bounds are inferred knowing only the loops around its attach point (and
    its own loops, for its index values), each fact scoped to that work."""
    bounds: dict["Stage", StageBounds] = {}
    owned: set[IterVar] = set()
    for st in reversed(sch.stages):
        if st.is_placeholder or (st.attach_type is AttachType.INLINE and st not in materialize):
            continue
        loop_vars = {}
        for iv in st.leaf_iter_vars:
            # the same IterVar object among the loops of two stages (a shared reduce_axis):
            # give this stage's loop its own variable, or nested loops would share one
            loop_vars[iv] = Var(iv.var.name, iv.var.dtype) if iv in owned else iv.var
            owned.add(iv)
        bounds[st] = stage_bounds(sch, st, bodies, bounds, ana, loop_vars, st in arguments)
    return bounds


def stage_bounds(sch: "Schedule", st: "Stage", bodies: dict, bounds: dict, ana: Analyzer,
                 loop_vars: dict[IterVar, Var], argument: bool = False) -> StageBounds:
    """The bounds of one stage, given the bounds of the stages that read it and of the
    stages it is attached inside."""
    loops = enclosing_loops(st, bounds)
    with loop_scope(ana, loops):
        if st.attach_type is AttachType.SCOPE:
            ranges = _attached_ranges(sch, st, bodies, bounds, ana)
            if argument:
                from .arg_region import argument_ranges
                ranges = argument_ranges(sch, st, bodies, bounds, ana, ranges, loops)
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
        b = _finish(st, ranges, loop_vars, ana)
        b.argument = argument
        return b


def _finish(st: "Stage", ranges: dict[IterVar, Range], loop_vars: dict[IterVar, Var],
            ana: Analyzer) -> StageBounds:
    """Leaf extents and index values of a stage whose root ranges are known (call it
    inside the scope of the loops around the stage)."""
    ext = pass_down(st.relations, {iv: ana.simplify(r.extent) for iv, r in ranges.items()}, ana)
    b = StageBounds(ranges, ext, loop_vars=dict(loop_vars))
    b.values = pass_up(st.relations, {iv: b.loop_var(iv) for iv in st.leaf_iter_vars}, ext)
    # the root values are used inside the stage's loops: simplify them knowing those
    with loop_scope(ana, [(b.loop_var(iv), ext[iv]) for iv in st.leaf_iter_vars]):
        b.root_values = {iv: ana.simplify(ranges[iv].min + b.values[iv]) for iv in st.root_iter_vars}
    return b


def rebound_descendants(sch: "Schedule", st: "Stage", nb: StageBounds, bodies: dict,
                        bounds: dict, ana: Analyzer) -> dict["Stage", StageBounds]:
    """``bounds`` with ``st``'s replaced by ``nb`` and bound inference re-run for every
    stage attached inside ``st``: their regions follow ``st``'s loops (a copy of a
    partitioned nest runs them over other extents than bound inference first chose)."""
    out = dict(bounds)
    out[st] = nb
    inside = attached_descendants(sch, st)
    for x in reversed(inside):
        if x in bounds:
            out[x] = stage_bounds(sch, x, bodies, out, ana, bounds[x].loop_vars,
                                  bounds[x].argument)
    return out


def _check_init_reads(sch: "Schedule", st: "Stage", bodies: dict) -> None:
    """A reduction's init runs just outside its first reduction loop: a stage it reads
    cannot be computed inside that loop (or any loop nested in it)."""
    host, ivar = st.attach_stage, st.attach_ivar
    body = bodies[host]
    if not (isinstance(body[0], Reduce) and body[0].init):
        return
    leaves = host.leaf_iter_vars
    first = next((p for p, iv in enumerate(leaves) if iv.kind is IterKind.REDUCE), len(leaves))
    if ivar not in leaves or leaves.index(ivar) < first:
        return
    reads: list = []
    for e in body[0].init:
        post_order_visit(e, lambda n: reads.append(n) if isinstance(n, TensorLoad)
                         and sch[n.tensor] is st else None)
    if reads:
        raise LoweringError(
            f"compute_at: stage '{st.name}' is attached to loop '{ivar.name}' of '{host.name}', "
            f"inside its reduction loop '{leaves[first].name}', but the reduction's init "
            f"(init=...) reads '{st.name}' before that loop runs; attach '{st.name}' at a loop "
            f"outside '{leaves[first].name}' or compute it at root")


def _aligned(ana: Analyzer, lo: Expr, hi: Expr, factor: int, offset: int,
             span: tuple[int, int]) -> tuple[Expr, Expr]:
    """``[lo, hi]`` widened to start at ``k*factor + offset`` and to span ``k*m + r``
    elements, ``(m, r) = span`` (``Stage.align_region``)."""
    m, r = span
    start = ana.simplify((lo - offset) // factor * factor + offset)
    extent = ana.simplify((hi - start + m - r) // m * m + r)
    return start, ana.simplify(start + extent - 1)


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
    _check_init_reads(sch, st, bodies)
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
        if d in st.region_alignment:
            lo[d], hi[d] = _aligned(ana, lo[d], hi[d], *st.region_alignment[d])
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
