"""rfactor: turn one reduction loop into a data axis of a new partial-result stage.

``CF = s.rfactor(C, ki)`` with ``k`` split into ``ko, ki``::

    CF[ki, i] = sum(A[i, ko*4 + ki] for ko if ko*4 + ki < K)     # ki is now a data axis
    C[i]      = sum(CF[ki, i] for ki)

so ``ki`` can be vectorized, parallelized or bound to threads in ``CF``.
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
    if any(b.init for b in st.op.body):
        raise ScheduleError("rfactor", st.name, "a reduction with init= cannot be rfactored", axis.name)
    if st.attach_type.value != "root" or any(a.thread_tag for a in st.iter_attrs.values()):
        raise ScheduleError("rfactor", st.name, "call rfactor before attaching or binding the stage",
                            axis.name)
    return st, axis


def rfactor(sch: "Schedule", tensor: Tensor, axis: Any, factor_axis: int = 0) -> Any:
    from tdsl.arith import Analyzer
    st, axis = check_rfactor(sch, tensor, axis, factor_axis)
    op: ComputeOp = st.op
    ana = Analyzer()
    reduce_roots = list(op.reduce_axis)
    derived = set().union(*(leaf_ancestry(st.relations, r) for r in reduce_roots))
    rels = [r for r in st.relations if any(v in derived for v in relation_vars(r))]
    ext = pass_down(rels, {r: r.dom.extent for r in reduce_roots}, ana)
    leaf_reduce = [v for v in st.leaf_iter_vars if v.kind is IterKind.REDUCE]
    fac = IterVar(Range(0, ext[axis]), f"{axis.name}.v", IterKind.DATA_PAR)
    rest = [IterVar(Range(0, ext[v]), v.name, IterKind.REDUCE) for v in leaf_reduce if v is not axis]
    leaf_vals = {v: (fac.var if v is axis else None) for v in leaf_reduce}
    it = iter(rest)
    for v in leaf_reduce:
        if v is not axis:
            leaf_vals[v] = next(it).var
    vals = pass_up(rels, leaf_vals, ext)
    vmap = {r.var: ana.simplify(r.dom.min + vals[r]) for r in reduce_roots}
    new_axis = [IterVar(Range(iv.dom.min, iv.dom.extent), iv.name, IterKind.DATA_PAR) for iv in op.axis]
    vmap.update({iv.var: n.var for iv, n in zip(op.axis, new_axis)})
    cond = None
    for _, p in split_predicates(rels, vals, ext, ana):
        cond = p if cond is None else cond & p
    cf_axis = new_axis[:factor_axis] + [fac] + new_axis[factor_axis:]
    body = []
    # the partial results see their elements in iteration order only if the loops left
    # to them ran in order; the merge below combines partials in no particular order
    in_order = reduce_loops_in_order(st, exclude=axis)
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
    idx = [iv.var for iv in op.axis]
    idx = idx[:factor_axis] + [rv.var] + idx[factor_axis:]
    src = tuple(t(*idx) for t in cf.outputs)
    comb = op.body[0].combiner.unordered()
    new_body = [Reduce(comb, src, (rv,), Const(True, "bool"), i) for i in range(op.num_outputs)]
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
