"""cache_read and cache_write: new stages that stage data through another scope.

``cache_read(A, "shared", [C])``: ``A.shared[i, j] = A[i, j]`` and ``C`` reads
``A.shared`` instead of ``A``.  ``cache_write(C, "local")``: ``C.local`` computes
what ``C`` computed, and ``C[i, j] = C.local[i, j]`` copies it out.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tdsl.errors import ScheduleError
from tdsl.expr import Reduce, TensorLoad
from tdsl.stmt import StorageScope
from tdsl.tensor import ComputeOp, IterKind, IterVar, Range, Tensor
from tdsl.visitor import substitute, transform

if TYPE_CHECKING:
    from .schedule import Schedule


def _scope(primitive: str, name: str, scope: Any) -> StorageScope:
    try:
        return StorageScope(scope)
    except ValueError:
        raise ScheduleError(primitive, name, f"unknown scope {scope!r}; use 'global', 'shared' or "
                            f"'local'") from None


def replace_reads(sch: "Schedule", body: tuple, src_stage: Any, new_tensors: list[Tensor]) -> tuple:
    """``body`` with every load of ``src_stage``'s outputs redirected to ``new_tensors``."""
    def pre(n: Any) -> Any:
        if isinstance(n, TensorLoad) and sch[n.tensor] is src_stage:
            idx = tuple(transform(i, pre=pre) for i in n.indices)
            return TensorLoad(new_tensors[n.tensor.value_index], idx)
        return None
    return map_body(body, pre)


def map_body(body: tuple, pre: Any) -> tuple:
    """A compute body (expressions and reductions) rewritten by ``transform(., pre=pre)``:
    the reductions' sources and conditions, their axes and combiners kept."""
    out = []
    for b in body:
        if isinstance(b, Reduce):
            out.append(Reduce(b.combiner, tuple(transform(s, pre=pre) for s in b.source), b.axis,
                              transform(b.condition, pre=pre), b.value_index, b.init))
        else:
            out.append(transform(b, pre=pre))
    return tuple(out)


def cache_read(sch: "Schedule", tensor: Tensor, scope: str, readers: list) -> Tensor:
    src = sch[tensor]
    sc = _scope("cache_read", src.name, scope)
    from .stage import Stage
    reader_stages = [r if isinstance(r, Stage) else sch[r] for r in readers]
    if not reader_stages:
        raise ScheduleError("cache_read", src.name, "give at least one reader")
    for r in reader_stages:
        if not isinstance(r, Stage):   # a view (s[update] of a scan)
            raise ScheduleError("cache_read", src.name, f"reader {r!r} is not a stage of its "
                                f"own; name the stage that reads '{src.name}'")
        if src not in [sch[t] for t in r.op.input_tensors]:
            raise ScheduleError("cache_read", src.name, f"stage '{r.name}' does not read '{src.name}'")
        if not isinstance(r.op, ComputeOp):
            raise ScheduleError("cache_read", src.name, f"the reader '{r.name}' is a "
                                f"{r.op.kind} stage, which reads whole tensors from memory; "
                                f"cache only for compute stages")
    name = sch.unique_op_name(f"{tensor.name}.{sc.value}")
    cur = sch.current_tensor(tensor)
    axis = [IterVar(Range(0, s), f"ax{d}", IterKind.DATA_PAR) for d, s in enumerate(cur.shape)]
    op = ComputeOp(name, "cache_read", {}, axis, [cur(*[a.var for a in axis])])
    pos_stage = min(reader_stages, key=sch.stages.index)
    st = sch.insert_stage(op, pos_stage)
    st.scope = sc
    cache_t = op.outputs[0]
    for r in reader_stages:
        mapping = [cache_t if i == tensor.value_index else t for i, t in enumerate(src.op.outputs)]
        new_op = r.op.with_body(replace_reads(sch, r.op.body, src, mapping))
        r.op = new_op
        sch.register(r, new_op)
    return cache_t


def cache_write(sch: "Schedule", tensor: Any, scope: str) -> Any:
    """``C.local`` computes what ``C`` computed; ``C`` becomes a copy of it.

    On a stage already split/reordered/annotated, the cache stage takes over the
    loop structure (the original axes, relations, leaf order, annotations, and the
    stages attached to those loops), so the loops the caller holds keep working on
    the computation they scheduled; ``C`` restarts as a plain copy nest.
    """
    multi = isinstance(tensor, (list, tuple))
    first = tensor[0] if multi else tensor
    st = sch[first]
    sc = _scope("cache_write", st.name, scope)
    if not isinstance(st.op, ComputeOp):
        what = "an input" if st.is_placeholder else f"a {st.op.kind} stage"
        raise ScheduleError("cache_write", st.name, f"{what} cannot be cache-written")
    if st.attach_type.value != "root":
        raise ScheduleError("cache_write", st.name, f"the stage is {st.attach_type.value}-attached; call "
                            f"cache_write before compute_at / compute_inline")
    if st.op.num_outputs > 1 and not multi:
        raise ScheduleError("cache_write", st.name, "the operation has several outputs; pass them all "
                            "as a list")
    op = st.op
    name = sch.unique_op_name(f"{op.name}.{sc.value}")
    names = [f"{t.name}.{sc.value}" for t in op.outputs] if op.num_outputs > 1 else [name]
    relayout = st.is_scheduled() or any(o.attach_stage is st for o in sch.stages)
    if relayout:
        cache_op, copy_axis = _relayout_cache(sch, st, name, names)
    else:
        cache_op, copy_axis = _fresh_cache(st, name, names), list(op.axis)
    cst = sch.insert_stage(cache_op, st)
    cst.scope = sc
    if relayout:
        move_loop_structure(sch, st, cst)
    copy_body = [t(*[iv.var for iv in copy_axis]) for t in cache_op.outputs]
    new_op = ComputeOp(op.name, op.tag, op.attrs, copy_axis, copy_body, [t.name for t in op.outputs])
    st.op = new_op
    sch.register(st, new_op)
    st.relations = []
    st.leaf_iter_vars = list(st.root_iter_vars)
    st.all_iter_vars = list(st.root_iter_vars)
    st.iter_attrs = {}
    outs = list(cache_op.outputs)
    return outs if multi else outs[0]


def _fresh_cache(st: Any, name: str, names: list) -> ComputeOp:
    """The cache op of an unscheduled stage: the body over new axes ``i.c``."""
    op = st.op
    new_axis = [IterVar(Range(iv.dom.min, iv.dom.extent), f"{iv.name}.c", IterKind.DATA_PAR)
                for iv in op.axis]
    vmap = {iv.var: n.var for iv, n in zip(op.axis, new_axis)}
    red_map = _rebase_reduce_axes(op, vmap)
    body = []
    for b in op.body:
        if isinstance(b, Reduce):
            axis = [red_map.get(id(iv), iv) for iv in b.axis]
            body.append(Reduce(_substitute_combiner(b.combiner, vmap),
                               tuple(substitute(s, vmap) for s in b.source), axis,
                               substitute(b.condition, vmap), b.value_index,
                               tuple(substitute(e, vmap) for e in b.init)))
        else:
            body.append(substitute(b, vmap))
    return ComputeOp(name, op.tag, op.attrs, new_axis, body, names)


def _rebase_reduce_axes(op: ComputeOp, vmap: dict) -> dict:
    """A reduce axis whose range reads a data axis (``reduce_axis((0, i))``) gets a copy
    over the cache's axes (its old range would name a loop the cache does not have): the
    map old axis id -> copy; each copy's variable joins ``vmap``."""
    red_map: dict = {}
    for b in op.body:
        if not isinstance(b, Reduce):
            continue
        for iv in b.axis:
            if id(iv) in red_map:
                continue
            lo, ext = substitute(iv.dom.min, vmap), substitute(iv.dom.extent, vmap)
            if lo is not iv.dom.min or ext is not iv.dom.extent:
                red_map[id(iv)] = IterVar(Range(lo, ext), iv.name, iv.kind)
    for b in op.body:
        if isinstance(b, Reduce):
            for iv in b.axis:
                if id(iv) in red_map:
                    vmap[iv.var] = red_map[id(iv)].var
    return red_map


def _substitute_combiner(comb: Any, vmap: dict) -> Any:
    """The combiner with ``vmap`` applied to its result, identity and update (a combiner
    may read a data axis: ``max(x + y, i)``); the same object when nothing changed."""
    parts = [tuple(substitute(e, vmap) for e in comb.result),
             tuple(substitute(e, vmap) for e in comb.identity),
             None if comb.update is None else tuple(substitute(e, vmap) for e in comb.update)]
    old = [comb.result, comb.identity, comb.update]
    if all(a is None and b is None or a is not None and all(x is y for x, y in zip(a, b))
           for a, b in zip(parts, old)):
        return comb
    return type(comb)(comb.name, comb.lhs, comb.rhs, parts[0], parts[1], parts[2])


def _relayout_cache(sch: "Schedule", st: Any, name: str, names: list) -> tuple[ComputeOp, list]:
    """The cache op of a scheduled stage: the same body over the same axes, with the
    stage's loop structure moved onto it; returns it and fresh axes for the copy."""
    op = st.op
    cache_op = ComputeOp(name, op.tag, op.attrs, op.axis, list(op.body), names)
    copy_axis = [IterVar(Range(iv.dom.min, iv.dom.extent), iv.name, IterKind.DATA_PAR) for iv in op.axis]
    return cache_op, copy_axis


def move_loop_structure(sch: "Schedule", src: Any, dst: Any) -> None:
    """Give ``dst`` (whose op has ``src``'s axes) ``src``'s loops, annotations and attached stages."""
    dst.relations = src.relations
    dst.leaf_iter_vars = src.leaf_iter_vars
    dst.all_iter_vars = src.all_iter_vars
    dst.iter_attrs = src.iter_attrs
    for other in sch.stages:
        if other.attach_stage is src:
            other.attach_stage = dst
