"""The region of an attached stage that is also an argument of the function.

A stage attached with ``compute_at`` computes, in each iteration of the loop it is
attached at, only the region its consumers read there.  For an intermediate that is
enough; for an argument the caller asked for all of its values, so the regions of all
iterations together must cover the stage's whole domain.

Coverage is proven from the loads of the stage by one consumer that runs over its whole
domain (at root, or an argument itself): a dimension the loads index by ``v + c``, with
``v`` an axis of that consumer, is covered when ``v + c`` ranges over at least the stage's
extent (``B[i, j] + B[i + 1, j]`` over ``i < n`` covers ``n + 1`` rows); dimensions
covered through distinct axes multiply (``_consumer_covers``).

A dimension not covered that way is widened to the whole extent when its region is the
same in every iteration (``C[i] = B[i, 0]`` computes all of row ``i``: no point twice).
One whose region moves with the loops (``B[i + 1, j]`` never writes row 0, ``B[2 * i]``
skips the odd rows) would need the whole extent recomputed in every iteration: that is
refused, naming the stage, the loop and the dimension.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..arith import Analyzer
from ..errors import LoweringError
from ..expr import Expr, Var
from ..tensor import IterVar, Range
from ..visitor import free_vars
from tdsl.schedule.stage import AttachType

if TYPE_CHECKING:
    from tdsl.schedule import Schedule, Stage


def covered_dims(sch: "Schedule", st: "Stage", bodies: dict, bounds: dict,
                 ana: Analyzer) -> set[int]:
    """The dimensions of ``st`` that the loads of one whole-domain consumer provably cover
    together (the largest such set over the consumers)."""
    best: set[int] = set()
    for x in sch.consumers(st):
        b = bounds.get(x)
        if b is None or (x.attach_type is AttachType.SCOPE and not b.argument):
            continue     # computes only a region of itself: its loads prove nothing
        got = _consumer_covers(sch, st, x, bodies, ana)
        if len(got) > len(best):
            best = got
    return best


def _consumer_covers(sch: "Schedule", st: "Stage", x: "Stage", bodies: dict,
                     ana: Analyzer) -> set[int]:
    """Each iteration's region holds, in dimension ``d``, the hull of the indices all loads
    read at each point of ``x``.  Where the loads index ``d`` by ``v + c`` (``v`` an axis of
    ``x``), those hulls over ``v``'s range form one interval; dimensions whose axes are
    distinct vary independently (``x``'s domain is a box), so covered dimensions multiply."""
    from .bound import _loads_of
    axes = {iv.var: iv for iv in x.root_iter_vars
            if not ((free_vars(iv.dom.min) | free_vars(iv.dom.extent))
                    & {a.var for a in x.root_iter_vars})}
    offsets: list[dict[Var, list[Expr]]] = [{} for _ in st.op.axis]
    for load in _loads_of(bodies[x], st, sch):
        for d, idx in enumerate(load.indices):
            vs = free_vars(idx) & set(axes)
            if len(vs) != 1:
                continue
            (v,) = vs
            c = ana.simplify(idx - v)
            if not free_vars(c) & set(axes):    # v + c (not 2 * v, which skips points)
                offsets[d].setdefault(v, []).append(c)
    options: list[list[Var]] = []
    for d, by_var in enumerate(offsets):
        dom = st.op.axis[d].dom
        ok = []
        for v, cs in by_var.items():
            r = axes[v].dom
            if any(ana.can_prove(r.min + c <= dom.min) for c in cs) and any(
                    ana.can_prove(r.min + r.extent + c >= dom.min + dom.extent) for c in cs):
                ok.append(v)
        options.append(ok)
    return _distinct(options, 0, frozenset())


def _distinct(options: list[list[Var]], d: int, taken: frozenset) -> set[int]:
    """The largest set of dimensions from ``d`` on that get distinct axes from ``options``."""
    if d == len(options):
        return set()
    best = _distinct(options, d + 1, taken)
    for v in options[d]:
        if v not in taken:
            got = {d} | _distinct(options, d + 1, taken | {v})
            if len(got) > len(best):
                best = got
    return best


def argument_ranges(sch: "Schedule", st: "Stage", bodies: dict, bounds: dict, ana: Analyzer,
                    ranges: dict[IterVar, Range], loops: list[tuple[Var, Expr]]
                    ) -> dict[IterVar, Range]:
    """``ranges`` (the attached region of argument ``st``) widened so that all iterations
    together write the whole domain; a LoweringError where that cannot be done without
    recomputing it in every iteration (module doc).  ``loops``: the loops around it."""
    covered = covered_dims(sch, st, bodies, bounds, ana)
    around = {v for v, _ in loops}
    out = dict(ranges)
    for d, iv in enumerate(st.op.axis):
        if d in covered:
            continue
        r = ranges[iv]
        if ana.can_prove(r.min <= iv.dom.min) and \
                ana.can_prove(r.min + r.extent >= iv.dom.min + iv.dom.extent):
            continue     # already the whole extent in every iteration
        moving = (free_vars(r.min) | free_vars(r.extent)) & around
        if moving:
            host = st.attach_stage
            raise LoweringError(
                f"compute_at: stage '{st.name}' is an argument, so all of it must be computed, "
                f"but attached at loop '{st.attach_ivar.name}' of '{host.name}' it computes only "
                f"what its readers use in each iteration: in dimension {d} ('{iv.name}') the "
                f"range [{r.min}, {ana.simplify(r.min + r.extent)}) moves with loop(s) "
                f"{sorted(v.name for v in moving)} and may leave part of [{iv.dom.min}, "
                f"{ana.simplify(iv.dom.min + iv.dom.extent)}) unwritten; compute '{st.name}' at "
                f"root (s[{st.name}].compute_root()) or leave it out of the arguments")
        whole = Range(iv.dom.min, iv.dom.extent)
        whole.alloc_bound = ana.const_int_bound(whole.extent)[1]
        out[iv] = whole
    return out
