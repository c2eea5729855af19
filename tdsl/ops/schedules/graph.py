"""Dataflow facts the default schedules decide on: inlining, groups, access patterns.

Everything here reads the schedule (its stages, and each stage's body with inlined
producers substituted, as lowering will see it); nothing here changes it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from tdsl.expr import Call, Const, Expr, Intrinsic, Reduce, TensorLoad, Var
from tdsl.lowering.inline import inlined_bodies, map_body
from tdsl.schedule import Schedule, Stage
from tdsl.schedule.stage import AttachType
from tdsl.tensor import ComputeOp
from tdsl.visitor import post_order_visit

from ..tags import OpKind, Pattern, kind_of, pattern_of


def compute_stages(s: Schedule) -> list[Stage]:
    return [st for st in s.stages if isinstance(st.op, ComputeOp)]


def stage_kind(st: Stage) -> "OpKind | None":
    return kind_of(st.op)


def stage_pattern(st: Stage) -> Pattern:
    return pattern_of(st.op)


def is_inlined(st: Stage) -> bool:
    return st.attach_type is AttachType.INLINE


def effective_loads(s: Schedule, st: Stage, bodies: "dict | None" = None) -> list[tuple[Stage, tuple]]:
    """(producer stage, index expressions) of every load in ``st``'s body once inlined
    producers are substituted (the loads lowering will generate)."""
    bodies = inlined_bodies(s) if bodies is None else bodies
    out: list[tuple[Stage, tuple]] = []

    def fn(n: Any) -> None:
        if isinstance(n, TensorLoad):
            out.append((s[n.tensor], n.indices))

    def visit(e: Any) -> Any:
        post_order_visit(e, fn)
        return e
    map_body(bodies[st], visit)
    return out


def producers(s: Schedule, st: Stage, bodies: "dict | None" = None) -> list[Stage]:
    seen: list[Stage] = []
    for p, _ in effective_loads(s, st, bodies):
        if p not in seen:
            seen.append(p)
    return seen


def axis_positions(st: Stage, indices: tuple) -> "list[int | None] | None":
    """For each index: the position of the consumer axis it is (None for a constant 0),
    or None overall if some index is anything else."""
    axes = [iv.var for iv in st.op.axis]
    out: list[Optional[int]] = []
    for e in indices:
        if isinstance(e, Var) and e in axes:
            out.append(axes.index(e))
        elif isinstance(e, Const) and e.value == 0:
            out.append(None)
        else:
            return None
    return out


def is_identity_access(st: Stage, indices: tuple) -> bool:
    pos = axis_positions(st, indices)
    return pos is not None and pos == list(range(len(st.op.axis)))


@dataclass
class RowGroup:
    """An injective stage ``out`` with reductions (and per-row temporaries) that only it
    (or each other) consume, all indexed by ``out``'s ``row_axes``: one row of ``out`` needs
    one row of each."""

    out: Stage
    row_axes: list[int]                 # positions of out's axes that index the reductions
    reductions: list[Stage] = field(default_factory=list)
    temps: list[Stage] = field(default_factory=list)


def _consumers_within(s: Schedule, st: Stage, members: set) -> bool:
    cons = s.consumers(st)
    return bool(cons) and all(c in members for c in cons)


def row_group(s: Schedule, out: Stage, bodies: dict) -> "RowGroup | None":
    """The reductions feeding ``out`` row-wise (see RowGroup), or None."""
    loads = effective_loads(s, out, bodies)
    red_loads = [(p, idx) for p, idx in loads
                 if stage_pattern(p) is Pattern.REDUCTION and not p.is_output and not is_inlined(p)]
    if not red_loads:
        return None
    row_axes: "set[int] | None" = None
    for p, idx in red_loads:
        pos = axis_positions(out, idx)
        if pos is None:
            return None
        used = [q for q in pos if q is not None]
        if len(set(used)) != len(used) or used != sorted(used):
            return None
        row_axes = set(used) if row_axes is None else row_axes | set(used)
    assert row_axes is not None
    # grow the group: reductions consumed only inside it, indexed row-wise by their consumers
    members: list[Stage] = []
    frontier = [p for p, _ in red_loads]
    while frontier:
        p = frontier.pop()
        if p in members:
            continue
        members.append(p)
        for q, idx in effective_loads(s, p, bodies):
            if (stage_pattern(q) is Pattern.REDUCTION and not q.is_output and not is_inlined(q)
                    and q not in members):
                pos = axis_positions(p, idx)
                if pos is not None and [x for x in pos if x is not None] == list(range(len(p.op.axis))):
                    frontier.append(q)
    group = set(members) | {out}
    for p in members:
        if not _consumers_within(s, p, group):
            return None
    # temporaries that only the group reads (softmax's exp): kept per row on CPUs
    temps = []
    for st in compute_stages(s):
        if is_inlined(st) and not st.is_output and \
                (stage_kind(st) is OpKind.ROW_TEMP or _shared_costly_temp(s, st, group)):
            readers = s.readers(st)
            if readers and all(r in group or r.attach_type is AttachType.INLINE and
                               all(c in group for c in s.consumers(r)) for r in readers):
                if len(st.op.axis) == len(out.op.axis):
                    temps.append(st)
    order = [st for st in s.stages if st in group and st is not out]
    return RowGroup(out, sorted(row_axes), order, temps)


#: Math functions whose cost (tens of instructions in vector code) outweighs a store and
#: a load of the value kept per row.
COSTLY_INTRINSICS = frozenset({Intrinsic.EXP, Intrinsic.EXP2, Intrinsic.LOG, Intrinsic.LOG2,
                               Intrinsic.LOG10, Intrinsic.TANH, Intrinsic.SIGMOID,
                               Intrinsic.ERF, Intrinsic.POW, Intrinsic.SIN, Intrinsic.COS})


def _shared_costly_temp(s: Schedule, st: Stage, group: set) -> bool:
    """An elementwise stage that more than one stage of the row group reads and
    whose body calls a costly math function (a hand-written softmax's ``exp(x - max)``,
    read by the sum and by the normalization): inlined, each reader would compute it again
    (1536 x 128 rows, one thread: 0.163 ms inlined, 0.100 kept per row)."""
    if stage_pattern(st) is not Pattern.INJECTIVE or sum(r in group for r in s.readers(st)) < 2:
        return False
    found = []
    for e in st.op.body:
        post_order_visit(e, lambda n: found.append(1) if isinstance(n, Call)
                         and n.func in COSTLY_INTRINSICS else None)
    return bool(found)


def permuted_access(st: Stage, indices: tuple) -> "list[int] | None":
    """If ``indices`` are distinct axis variables of ``st`` (one per index), their positions."""
    pos = axis_positions(st, indices)
    if pos is None or any(p is None for p in pos) or len(set(pos)) != len(pos):
        return None
    return pos  # type: ignore[return-value]


def fusable_anchor(s: Schedule, out: Stage, bodies: dict,
                   is_anchor: "Callable[[Stage], bool] | None" = None) -> "Stage | None":
    """The anchor (matmul/conv; ``is_anchor`` says otherwise) whose result ``out``
    transforms elementwise (up to a permutation of the axes), if ``out`` is its only
    consumer."""
    from .._util import same_size
    loads = effective_loads(s, out, bodies)
    if is_anchor is None:
        anchors = [p for p, _ in loads if stage_pattern(p) is Pattern.ANCHOR]
    else:
        anchors = [p for p, _ in loads if is_anchor(p)]
    if not anchors or any(a is not anchors[0] for a in anchors):
        return None
    a = anchors[0]
    if a.is_output or is_inlined(a) or a.op.num_outputs != 1:
        return None
    if s.consumers(a) != [out]:
        return None
    if len(a.op.axis) != len(out.op.axis):
        return None
    perm = None
    for p, idx in loads:
        if p is a:
            pos = permuted_access(out, idx)
            if pos is None or (perm is not None and pos != perm):
                return None
            perm = pos
    assert perm is not None
    for d, iv in enumerate(a.op.axis):
        if not same_size(iv.dom.extent, out.op.axis[perm[d]].dom.extent):
            return None
    return a


def reduce_source_loads(s: Schedule, st: Stage, bodies: dict) -> list[tuple[Stage, tuple]]:
    """Loads inside the reduction's source expressions (what the reduction streams over)."""
    body = bodies[st]
    out: list[tuple[Stage, tuple]] = []

    def fn(n: Any) -> None:
        if isinstance(n, TensorLoad):
            out.append((s[n.tensor], n.indices))
    for b in body:
        if isinstance(b, Reduce):
            for src in b.source:
                post_order_visit(src, fn)
    return out


def innermost_use(loads: list[tuple[Stage, tuple]], var: Var) -> bool:
    """True if every load's last index is ``var`` plus terms free of other loop variables
    (unit stride along ``var``), and at least one load uses it."""
    from tdsl.visitor import free_vars
    used = False
    for _, idx in loads:
        if not idx:
            continue
        last = idx[-1]
        if var in free_vars(last):
            if not unit_stride(last, var):
                return False
            used = True
    return used


def unit_stride(e: Expr, var: Var) -> bool:
    from tdsl.expr import Add, Sub
    if e is var:
        return True
    if isinstance(e, Add):
        from tdsl.visitor import free_vars
        a_has, b_has = var in free_vars(e.a), var in free_vars(e.b)
        if a_has and not b_has:
            return unit_stride(e.a, var)
        if b_has and not a_has:
            return unit_stride(e.b, var)
        return False
    if isinstance(e, Sub):
        from tdsl.visitor import free_vars
        if var in free_vars(e.b):
            return False
        return unit_stride(e.a, var)
    return False


def uses_in_last_index(loads: list[tuple[Stage, tuple]], var: Var) -> bool:
    from tdsl.visitor import free_vars
    return any(idx and var in free_vars(idx[-1]) for _, idx in loads)
