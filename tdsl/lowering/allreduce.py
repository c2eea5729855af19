"""The loop nest of a cross-thread reduction (a reduction loop bound to ``threadIdx``).

TVM's ``MakeCrossThreadReduction``: the reduction loops bound to threads are not
iterated; each thread reduces its own share over the other (serial) reduction loops
into a private accumulator, then one ``AllReduce`` combines the shares of the threads
along the bound axes, and one thread of each group stores the result::

    for i (blockIdx.x):                          # spatial loops, as usual
      for ki (threadIdx.x):                      # reduction loop bound to a thread
        part[0] = identity
        for ko: if guards: part[0] = part[0] + A[i, ko*32 + ki]
        red[0] = all_reduce(sum, [part[0]], where=spatial guards, over=[threadIdx.x])
        if spatial guards and ki == 0 and store predicate: B[i] = red[0]

Guards that only involve spatial loops do not wrap the all-reduce (every thread of the
block must reach it): a thread outside the domain contributes nothing instead.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import LoweringError
from ..expr import BufferLoad, Const, Expr, Reduce, Select, Var
from ..stmt import AllReduce, Allocate, Buffer, BufferStore, Stmt, StorageScope
from ..tensor import IterKind
from ..structural import structural_equal
from ..visitor import free_vars, post_order_visit

if TYPE_CHECKING:
    from tdsl.schedule import Stage

    from .bound import StageBounds
    from .nest import NestBuilder


def _conj(conds: "list[Expr]") -> Expr:
    if not conds:
        return Const(True, "bool")
    c = conds[0]
    for x in conds[1:]:
        c = c & x
    return c


def _var_sequence(e: Expr) -> list[int]:
    out: list[int] = []
    post_order_visit(e, lambda n: out.append(id(n)) if isinstance(n, Var) else None)
    return out


def _same(a: Expr, b: Expr) -> bool:
    """``a`` and ``b`` are the same expression of the same variables.  (``structural_equal``
    alone compares free variables up to renaming: it finds ``a == 0`` and ``b == 0`` equal,
    which dropped the head predicate of the second reduced thread axis.)"""
    return structural_equal(a, b) and _var_sequence(a) == _var_sequence(b)


def cross_thread_nest(nb: "NestBuilder", st: "Stage", b: "StageBounds", guard_domain: bool) -> Stmt:
    """The nest of reduction stage ``st`` whose reduction loops include thread-bound ones."""
    from .nest import guard, is_thread_reduce, seq

    if not nb.in_kernel(st):
        raise LoweringError(f"stage '{st.name}': a reduction loop bound to a thread axis outside "
                            f"a GPU kernel")
    leaves = st.leaf_iter_vars
    threads = [iv for iv in leaves if is_thread_reduce(st, iv)]
    serial = [iv for iv in leaves if iv.kind is IterKind.REDUCE and iv not in threads]
    common = [iv for iv in leaves if iv not in serial]
    thread_vars = {b.loop_var(iv) for iv in threads}
    serial_vars = {b.loop_var(iv) for iv in serial}
    red: Reduce = nb.bodies[st][0]
    stor = nb.storage[st]
    vmap = {iv.var: b.root_values[iv] for iv in st.root_iter_vars}
    ext, preds = nb.tail_predicates(st, b, len(leaves), guard_domain)

    # guards: on the serial reduction loops (inside them), on this thread's share (the
    # all-reduce's condition), and on the store (spatial ones)
    serial_conds, share_conds, store_conds = [], [], []
    for _, _, c in preds:
        fv = free_vars(c)
        if fv & serial_vars:
            serial_conds.append(c)
        elif fv & thread_vars:
            share_conds.append(c)
        else:
            store_conds.append(c)
    where = nb.lower_expr(red.condition, vmap)
    where_conds = [] if isinstance(where, Const) and where.value else [where]

    dtypes = [buf.dtype for buf in stor.buffers]
    results = [Buffer(f"{st.name}.red{i if len(dtypes) > 1 else ''}", (1,), dt, scope=StorageScope.LOCAL)
               for i, dt in enumerate(dtypes)]
    zero = [Const(0, "int64")]
    sources = [nb.lower_expr(s, vmap) for s in red.source]
    if serial:
        # this thread's share over the serial reduction loops, in a private accumulator
        parts = [Buffer(f"{st.name}.part{i if len(dtypes) > 1 else ''}", (1,), dt,
                        scope=StorageScope.LOCAL) for i, dt in enumerate(dtypes)]
        acc = [BufferLoad(p, zero) for p in parts]
        update = seq([BufferStore(p, v, zero) for p, v in zip(parts, red.combiner.combine(acc, sources))])
        # every guard: a thread outside the domain must not load past it either
        # (the where= condition inside: it may load, and only in bounds)
        update = guard(store_conds + share_conds + serial_conds, guard(where_conds, update))
        nb.building[id(st)] = ext
        try:
            for iv in reversed(serial):
                inner = nb.children_nests(st, iv)
                body = seq(inner + [update]) if inner else update
                update = nb.make_loop(st, iv, ext[iv], nb.wrap_allocs(st, iv, body))
        finally:
            del nb.building[id(st)]
        init = seq([BufferStore(p, v, zero) for p, v in
                    zip(parts, [nb.lower_expr(v, vmap) for v in red.combiner.identity])])
        values: list[Expr] = acc
        cond = _conj(share_conds + store_conds)
        prologue: list[Stmt] = [init, update]
    else:
        parts, values, prologue = [], sources, []
        cond = _conj(share_conds + store_conds)
        if where_conds:   # evaluated only in bounds (Select is lazy; & need not be)
            cond = where_conds[0] if isinstance(cond, Const) else \
                Select(cond, where_conds[0], Const(False, "bool"))

    reduce_stmt = AllReduce(red.combiner, values, cond, results,
                            [st.iter_attrs[iv].thread_tag for iv in threads])
    heads = [v == Const(0, v.dtype) for v in sorted(thread_vars, key=lambda v: v.seq)]
    idx = nb.out_indices(st, vmap, stor)
    store = seq([BufferStore(buf, BufferLoad(r, zero), idx) for buf, r in zip(stor.buffers, results)])
    conds: list[Expr] = []
    for c in store_conds + heads + nb.store_predicate(st, b):   # the user's tx == 0 again
        if not any(_same(c, d) for d in conds):
            conds.append(c)
    store = guard(conds, store)
    stmt: Stmt = seq(prologue + [reduce_stmt, store])
    for buf in reversed(results + parts):
        stmt = Allocate(buf, stmt)

    # the loops that are not serial reductions, with the stages attached at them
    nb.building[id(st)] = ext
    try:
        for iv in reversed(common):
            inner = nb.children_nests(st, iv)
            body = seq(inner + [stmt]) if inner else stmt
            if any(c.double_buffered for c in nb.children.get((id(st), iv), [])):
                raise LoweringError(f"stage '{st.name}': double buffering a stage attached in a "
                                    f"cross-thread reduction is not supported")
            stmt = nb.make_loop(st, iv, ext[iv], nb.wrap_allocs(st, iv, body))
    finally:
        del nb.building[id(st)]
    return stmt


__all__ = ["cross_thread_nest"]
