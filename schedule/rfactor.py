"""rfactor: turn one reduction loop into a data axis of a new partial-result stage.

``CF = s.rfactor(C, ki)`` with ``k`` split into ``ko, ki``::

    CF[ki, i] = sum(A[i, ko*4 + ki] for ko if ko*4 + ki < K)     # ki is now a data axis
    C[i]      = sum(CF[ki, i] for ki)                  # from init= when the sum has one

so ``ki`` can be vectorized, parallelized or bound to threads in ``CF``.  As in TVM, a
reduce axis that no split or fuse relates to ``ki`` stays the user's IterVar in ``CF``
and the loops rebuilt there keep their variables (``CF.op.reduce_axis[1].var is
ko.var``); ``tdsl.compat.tvm`` schedules also take TVM's order of those axes.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tdsl.errors import ScheduleError
from tdsl.expr import Const, Reduce
from tdsl.tensor import ComputeOp, IterKind, IterVar, Range, Tensor
from tdsl.visitor import substitute

from .relations import (leaf_ancestry, pass_down, pass_up, reduce_loops_in_order,
                        relation_vars, split_predicates)

if TYPE_CHECKING:
    from .schedule import Schedule


def check_rfactor(sch: "Schedule", tensor: Tensor, axis: Any, factor_axis: int):
    st = sch[tensor]
    if not isinstance(st.op, ComputeOp) or not st.op.reduce_axis:
        raise ScheduleError("rfactor", st.name, "the stage is not a reduction")
    axis = st.find_leaf("rfactor", axis)
    if axis.kind is not IterKind.REDUCE:
        raise ScheduleError("rfactor", st.name, "the loop is not a reduction loop", axis.name)
    if not 0 <= factor_axis <= len(st.op.axis):
        raise ScheduleError("rfactor", st.name, f"factor_axis must be in [0, {len(st.op.axis)}]",
                            axis.name)
    if st.attach_type.value != "root" or any(a.thread_tag for a in st.iter_attrs.values()):
        raise ScheduleError("rfactor", st.name, "call rfactor before attaching or binding the stage",
                            axis.name)
    return st, axis


def check_block(st: Any, axis: Any, lanes: Any, at: Any) -> "tuple[int, int, int] | None":
    """``rfactor``'s blocked layout ``(axis, lanes, at)`` (None: the stage's own layout),
    checked: all three ints or none, ``axis`` a data axis whose constant extent ``lanes``
    divides, ``at`` a position among the other data axes."""
    given = [v for v in (axis, lanes, at) if v is not None]
    if not given:
        return None
    if len(given) < 3 or any(not isinstance(v, int) or isinstance(v, bool) for v in given):
        raise ScheduleError("rfactor", st.name, f"block_axis, block_lanes and block_at must be "
                            f"given together as ints, got {axis!r}, {lanes!r}, {at!r}")
    n = len(st.op.axis)
    if not 0 <= axis < n or not 0 <= at < n or lanes < 1:
        raise ScheduleError("rfactor", st.name, f"block_axis and block_at must be in [0, {n}) "
                            f"and block_lanes >= 1, got {axis}, {at}, {lanes}")
    ext = st.op.axis[axis].dom.extent
    ext = ext.value if isinstance(ext, Const) else None
    if not isinstance(ext, int) or ext % lanes:
        raise ScheduleError("rfactor", st.name, f"a blocked layout needs a constant extent of axis "
                            f"'{st.op.axis[axis].name}' that {lanes} lanes divide, got "
                            f"{st.op.axis[axis].dom.extent}")
    return axis, lanes, at


def _blocked_axes(op: ComputeOp, block: "tuple[int, int, int] | None", vmap: dict) -> list:
    """The partial results' data axes: copies of ``op``'s, or with ``block`` the blocked
    axis split (outer at its place, inner last; ``vmap`` maps it to ``outer*lanes+inner``)."""
    new_axis = [IterVar(Range(iv.dom.min, iv.dom.extent), iv.name, IterKind.DATA_PAR)
                for iv in op.axis]
    vmap.update({iv.var: n.var for iv, n in zip(op.axis, new_axis)})
    if block is None:
        return new_axis
    i, lanes, at = block
    src = op.axis[i]
    outer = IterVar(Range(0, src.dom.extent.value // lanes), f"{src.name}.o", IterKind.DATA_PAR)
    inner = IterVar(Range(0, lanes), f"{src.name}.i", IterKind.DATA_PAR)
    vmap[src.var] = outer.var * lanes + inner.var
    rest = new_axis[:i] + new_axis[i + 1:]
    return rest[:at] + [outer] + rest[at:] + [inner]


def _blocked_index(idx: list, block: "tuple[int, int, int] | None") -> list:
    """The merge's index of the partial results for the stage's index ``idx``."""
    if block is None:
        return idx
    i, lanes, at = block
    rest = idx[:i] + idx[i + 1:]
    return rest[:at] + [idx[i] // lanes] + rest[at:] + [idx[i] % lanes]


def touched_by(rels: list, axis: IterVar) -> set:
    """Every loop a split or fuse relates to ``axis`` (its ancestors, their other parts,
    the loops derived from them): the reduction loops whose values ``axis`` takes part in."""
    out = {axis}
    grown = True
    while grown:
        grown = False
        for rel in rels:
            ivs = relation_vars(rel)
            if any(v in out for v in ivs) and not all(v in out for v in ivs):
                out.update(ivs)
                grown = True
    return out


def factored_reduce_axes(st: Any, touched: set, axis: IterVar, ext: dict,
                         untouched_first: bool) -> tuple[list, list, dict, bool]:
    """The reduce axes of the partial-result stage, as in TVM: a root reduce axis no split
    or fuse relates to ``axis`` stays the same IterVar (unsplit), each other loop left
    becomes an axis sharing its variable.  Returns ``(axes, kept roots, leaf -> its copy,
    in_order)``: ``untouched_first`` puts the kept roots first (TVM's order), else every
    axis goes where its loops were; ``in_order``: the axes run in the stage's order."""
    roots = list(st.op.reduce_axis)
    leaves = [v for v in st.leaf_iter_vars if v.kind is IterKind.REDUCE]
    kept = [r for r in roots if r not in touched]
    copy_of = {v: IterVar(Range(0, ext[v]), v.var, IterKind.REDUCE) for v in leaves
               if v in touched and v is not axis}
    # where each axis's loops were: a kept root at its first leaf
    pos: dict = {}
    for i, v in enumerate(leaves):
        if v in copy_of:
            pos[copy_of[v]] = i
        for r in kept:
            if r not in pos and v in leaf_ancestry(st.relations, r):
                pos[r] = i
    for r in kept:
        pos.setdefault(r, len(leaves))
    by_place = sorted(kept + list(copy_of.values()), key=lambda a: pos[a])
    axes = kept + list(copy_of.values()) if untouched_first else by_place
    in_order = reduce_loops_in_order(st, exclude=axis) and axes == by_place
    return axes, kept, copy_of, in_order


def rfactor(sch: "Schedule", tensor: Tensor, axis: Any, factor_axis: int = 0,
            block: "tuple[int, int, int] | None" = None) -> Any:
    from tdsl.arith import Analyzer
    st, axis = check_rfactor(sch, tensor, axis, factor_axis)
    op: ComputeOp = st.op
    ana = Analyzer()
    reduce_roots = list(op.reduce_axis)
    derived = set().union(*(leaf_ancestry(st.relations, r) for r in reduce_roots))
    rels = [r for r in st.relations if any(v in derived for v in relation_vars(r))]
    touched = touched_by(rels, axis)
    spatial = set().union(*(leaf_ancestry(st.relations, a) for a in op.axis))
    mixed = sorted({v.name for r in rels for v in relation_vars(r) if v in spatial})
    if mixed:
        raise ScheduleError("rfactor", st.name, f"a reduction loop is fused with spatial loop(s) "
                            f"{mixed}; rfactor before fusing them", axis.name)
    ext = pass_down(rels, {r: r.dom.extent for r in reduce_roots}, ana)
    fac = IterVar(Range(0, ext[axis]), f"{axis.name}.v", IterKind.DATA_PAR)
    rest, kept, copy_of, in_order = factored_reduce_axes(st, touched, axis, ext,
                                                         sch.rfactor_untouched_first)
    # only the relations of the touched loops are undone; a kept root keeps its variable
    trels = [r for r in rels if relation_vars(r)[0] in touched]
    leaf_vals = {v: c.var for v, c in copy_of.items()}
    leaf_vals[axis] = fac.var
    vals = pass_up(trels, leaf_vals, ext)
    vmap = {r.var: ana.simplify(r.dom.min + vals[r]) for r in reduce_roots if r not in kept}
    new_axis = _blocked_axes(op, block, vmap)
    cond = None
    for _, p in split_predicates(trels, vals, ext, ana):
        cond = p if cond is None else cond & p
    cf_axis = new_axis[:factor_axis] + [fac] + new_axis[factor_axis:]
    body = []
    # the partial results see their elements in iteration order only if the loops left
    # to them ran in order (and keep it); the merge combines partials in no particular order
    for b in op.body:
        c = substitute(b.condition, vmap)
        if cond is not None:
            c = cond if isinstance(c, Const) and c.value else (c & cond)
        comb = b.combiner if in_order else b.combiner.unordered()
        body.append(Reduce(comb, tuple(substitute(s, vmap) for s in b.source), tuple(rest),
                           c, b.value_index))
    name = sch.unique_op_name(f"{op.name}.rf")
    names = [name] if op.num_outputs == 1 else [f"{t.name}.rf" for t in op.outputs]
    cf = ComputeOp(name, op.tag, op.attrs, cf_axis, body, names)
    sch.insert_stage(cf, st)
    rv = IterVar(Range(0, ext[axis]), f"{axis.name}.v", IterKind.REDUCE)
    idx = _blocked_index([iv.var for iv in op.axis], block)
    idx = idx[:factor_axis] + [rv.var] + idx[factor_axis:]
    src = tuple(t(*idx) for t in cf.outputs)
    comb = op.body[0].combiner.unordered()
    # as in TVM: the partial results start from the identity, the merge from ``init=``
    # (over the stage's own axes, which it keeps)
    new_body = [Reduce(comb, src, (rv,), Const(True, "bool"), i, b.init)
                for i, b in enumerate(op.body)]
    new_op = ComputeOp(op.name, op.tag, op.attrs, op.axis, new_body, [t.name for t in op.outputs])
    st.op = new_op
    sch.register(st, new_op)
    st.relations = [r for r in st.relations if r not in rels]
    st.leaf_iter_vars = [v for v in st.leaf_iter_vars if v.kind is not IterKind.REDUCE] + [rv]
    st.all_iter_vars = [v for v in st.all_iter_vars if v not in derived] + [rv]
    for v in list(st.iter_attrs):
        if v in derived:
            del st.iter_attrs[v]
    outs = list(cf.outputs)
    return outs if op.num_outputs > 1 else outs[0]


def first_output(result: Any) -> Tensor:
    """The first tensor of ``rfactor``'s result: a list for a tuple reduction (argmax), as
    TVM returns it, else the tensor itself."""
    return result[0] if isinstance(result, (list, tuple)) else result
