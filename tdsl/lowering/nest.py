"""Loop-nest construction: one nest per stage, attached stages spliced in.

For a stage with leaf loops ``l0 .. lm`` this builds::

    for l0: [stages attached at l0] [guards whose loops are all defined]
      for l1: ...
        [reduction init nest, just outside the first reduction loop]
        ...
            buffer[root values - region offset] = body      (or the reduction update)

Tail guards come from ``split_predicates``; a guard on a serial loop that is
the inner part of its own split becomes a tighter loop extent instead.
Inside GPU kernels every guard stays innermost so that no barrier ends up under
a thread-dependent condition; a stage staged in local or shared memory there zero-fills
its out-of-domain points or runs unguarded instead (``padding.py``).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator

from ..arith import Analyzer
from ..errors import LoweringError
from ..expr import BufferLoad, Const, Expr, Reduce, Select, TensorLoad, Var
from ..intrin import minimum
from ..stmt import (Allocate, Barrier, Buffer, BufferStore, For, ForKind, IfThenElse,
                    LetStmt, SeqStmt, Stmt, StorageScope, ThreadTag)
from ..tensor import IterKind, IterVar
from ..visitor import free_vars, substitute, transform
from tdsl.schedule.relations import (Split, pure_reduce_loops, reduce_loops_in_order,
                                     split_extents, split_predicates)
from tdsl.schedule.stage import AttachType

from .bound import (StageBounds, attached_descendants, in_kernel, loop_scope, rebound_descendants,
                    storage_scope, with_full_regions)
from . import padding
from .storage import Storage, allocated_storage

if TYPE_CHECKING:
    from tdsl.schedule import Schedule, Stage


def seq(parts: list) -> Stmt:
    flat: list[Stmt] = []
    for p in parts:
        if p is None:
            continue
        if isinstance(p, SeqStmt):
            flat.extend(p.stmts)
        else:
            flat.append(p)
    if len(flat) == 1:
        return flat[0]
    return SeqStmt(flat)


def _conj(conds: list[Expr]) -> Expr:
    c = conds[0]
    for x in conds[1:]:
        c = c & x
    return c


def is_thread_reduce(st: "Stage", iv: IterVar) -> bool:
    """True if ``iv`` is a reduction loop of ``st`` bound to a threadIdx axis."""
    a = st.iter_attrs.get(iv)
    return (iv.kind is IterKind.REDUCE and a is not None and a.thread_tag is not None
            and a.thread_tag.is_thread)


def guard(conds: list[Expr], body: Stmt) -> Stmt:
    if not conds:
        return body
    c = conds[0]
    for x in conds[1:]:
        c = c & x
    return IfThenElse(c, body)


class NestBuilder:
    """Builds the statement tree of a schedule from its bounds and storage."""

    def __init__(self, sch: "Schedule", bodies: dict, bounds: dict["Stage", StageBounds],
                 storage: dict["Stage", Storage], ana: Analyzer):
        self.sch = sch
        self.bodies = bodies
        self.bounds = bounds
        self.storage = storage
        self.ana = ana
        self.children: dict[tuple[int, IterVar], list["Stage"]] = {}
        for st in sch.stages:
            if st.attach_type is AttachType.SCOPE:
                self.children.setdefault((id(st.attach_stage), st.attach_ivar), []).append(st)
        # the loop extents of each stage whose nest is being built (by id), so that the
        # stages attached inside it are built knowing exactly the loops around them
        self.building: dict[int, dict[IterVar, Expr]] = {}

    def with_bounds(self, st: "Stage", b: StageBounds) -> "NestBuilder":
        """A builder for one copy of ``st``'s nest whose loops run as ``b`` says: bound
        inference re-run (and buffers re-sized) for the stages attached inside it."""
        bounds = rebound_descendants(self.sch, st, b, self.bodies, self.bounds, self.ana)
        storage = dict(self.storage)
        for x in attached_descendants(self.sch, st):
            if x in bounds and self.storage[x].allocated:
                storage[x] = allocated_storage(x, bounds, self.ana)
        out = NestBuilder.__new__(NestBuilder)
        out.__dict__.update(self.__dict__)
        out.bounds, out.storage, out.building = bounds, storage, {}
        return out

    @contextmanager
    def inside(self, st: "Stage", iv: IterVar) -> Iterator[Analyzer]:
        """Know ``st``'s loops down to ``iv`` (the loops around what is attached at ``iv``)."""
        ext = self.building[id(st)]
        b = self.bounds[st]
        leaves = st.leaf_iter_vars
        with loop_scope(self.ana, [(b.loop_var(x), ext[x])
                                   for x in leaves[:leaves.index(iv) + 1]]) as ana:
            yield ana

    # ---- expressions -------------------------------------------------------------------
    def lower_expr(self, e: Expr, vmap: dict[Var, Expr]) -> Expr:
        def pre(n: Any) -> Any:
            if isinstance(n, TensorLoad):
                st = self.sch[n.tensor]
                stor = self.storage.get(st)
                if stor is None:
                    raise LoweringError(f"stage '{st.name}' is read but never computed")
                idx = [transform(i, pre=pre) for i in n.indices]
                idx = [i - o if not (isinstance(o, Const) and o.value == 0) else i
                       for i, o in zip(idx, stor.offsets)]
                return BufferLoad(stor.buffers[n.tensor.value_index], idx)
            if isinstance(n, Var):
                return vmap.get(n)
            return None
        return transform(e, pre=pre)

    # ---- a stage's nest ----------------------------------------------------------------------
    def in_kernel(self, st: "Stage") -> bool:
        return in_kernel(st)

    def domain_guards(self, st: "Stage", b: StageBounds, guard: bool) -> list[Expr]:
        """Where attached regions are not clamped (in kernels, in the partial-tile copy of a
        partitioned nest), guard the declared domain."""
        if not guard or st.attach_type is not AttachType.SCOPE:
            return []
        # A fresh analyzer: the builder's knows this stage's loop variables over their
        # clamped ranges, which the unclamped copy does not run over (the final simplify
        # pass drops what the actual loop extents prove).
        ana = Analyzer()
        out = []
        for iv in st.op.axis:
            v = b.root_values[iv]
            lo, hi = iv.dom.min, iv.dom.min + iv.dom.extent
            for c in (v >= lo, v < hi):
                if not ana.can_prove(c):
                    out.append(c)
        return out

    def build_root(self) -> Stmt:
        # (an inlined stage has bounds only when it is an argument: written at root too)
        parts = [self.build_stage(st) for st in self.sch.stages
                 if st in self.bounds and st.attach_type in (AttachType.ROOT, AttachType.INLINE)]
        return seq(parts)

    def build_stage(self, st: "Stage") -> Stmt:
        """The stage's nest; on the CPU, an attached stage whose vectorized or unrolled loops
        run over a clamped region gets two copies: constant extents for full tiles, guards
        for the partial tile at the end of the domain."""
        from ..opaque import is_opaque
        if is_opaque(st.op):
            if hasattr(st.op, "lower_point") and st.is_scheduled():   # a scan's spatial loops
                reason = st.op.spatial_reason()
                if reason is not None:   # (the primitives check it; a predicate does not)
                    raise LoweringError(f"scan '{st.name}' is scheduled, which runs its scan "
                                        f"loop inside its spatial loops, but {reason}")
                return self.stage_nest(st, self.bounds[st], self.in_kernel(st))
            return st.op.lower_stmt(self, st)
        b = self.bounds[st]
        kernel = self.in_kernel(st)
        if not kernel and st.attach_type is AttachType.SCOPE and any(
                self.kind_of(st, iv) in (ForKind.VECTORIZED, ForKind.UNROLLED) for iv in st.leaf_iter_vars):
            split = with_full_regions(st, b, self.ana)
            if split is not None:
                full, conds = split
                # both copies run their loops over the full extents; the stages attached
                # inside them get bounds (and buffers) inferred for those loops
                sub = self.with_bounds(st, full)
                return IfThenElse(self.ana.simplify(_conj(conds)), sub.stage_nest(st, full, False),
                                  sub.stage_nest(st, full, True))
        return self.stage_nest(st, b, kernel)

    def stage_nest(self, st: "Stage", b: StageBounds, guard_domain: bool) -> Stmt:
        leaves = st.leaf_iter_vars
        m = len(leaves)
        vmap = {iv.var: b.root_values[iv] for iv in st.root_iter_vars}
        stor = self.storage[st]
        body = self.bodies.get(st, ())   # none for a scan: its op lowers each point
        is_reduce = bool(body) and isinstance(body[0], Reduce)
        tpos = next((i for i, iv in enumerate(leaves)
                     if st.iter_attrs.get(iv) and st.iter_attrs[iv].tensor_intrin is not None), m)
        qpos = next((i for i, iv in enumerate(leaves) if iv.kind is IterKind.REDUCE), m) if is_reduce else m
        init_pos = min(qpos, tpos)
        kernel = self.in_kernel(st)

        if is_reduce and any(is_thread_reduce(st, iv) for iv in leaves):
            if tpos < m:
                raise LoweringError(f"stage '{st.name}': a reduction loop bound to a thread axis "
                                    f"cannot be combined with tensorize")
            from .allreduce import cross_thread_nest
            return cross_thread_nest(self, st, b, guard_domain)
        staged = kernel and tpos == m and bool(body)
        ext, preds = self.tail_predicates(st, b, tpos, guard_domain, staged=staged)
        # a staged stage's domain guards: zero fill (a fetch), none (computed from staged
        # buffers) or kept (padding.py)
        policy = padding.domain_policy(self, st) if staged else padding.GUARD
        dom = self.domain_guards(st, b, guard_domain)
        if policy == padding.GUARD:
            preds += self.domain_preds(st, b, dom)

        # the innermost statement
        if tpos < m:
            from .tensorize import intrin_call
            preds = self.region_guards(st, b, leaves, tpos, ext, preds)
            core = intrin_call(self, st, leaves, tpos, vmap)
            last = tpos - 1
        else:
            if not body:
                core = st.op.lower_point(self, st, vmap)
            elif is_reduce:
                core = self.update_stmt(st, body, vmap, stor, staged)
            else:
                core = self.store_stmt(st, body, vmap, stor,
                                       _conj(dom) if policy == padding.FILL and dom else None)
            core = guard(self.store_predicate(st, b), core)
            last = m - 1
        preds = [(min(lv, last), r, c) for lv, r, c in preds]
        init = None
        if is_reduce:
            init = self.init_nest(st, body, vmap, stor, leaves[init_pos:], ext, preds, init_pos, kernel)

        stmt = guard([c for lv, _, c in preds if lv == last], core) if last >= 0 else core
        self.building[id(st)] = ext
        for p in range(last, -1, -1):
            iv = leaves[p]
            parts = self.children_nests(st, iv)
            if init is not None and p == init_pos - 1:
                parts.append(init)
            inner_stmt = seq(parts + [stmt]) if parts else stmt
            db = [c for c in self.children.get((id(st), iv), []) if self.is_double_buffered(c)]
            if db:
                stmt = self.double_buffered(st, iv, ext[iv], db, inner_stmt)
            else:
                stmt = self.make_loop(st, iv, ext[iv], self.wrap_allocs(st, iv, inner_stmt))
            if p > 0:
                stmt = guard([c for lv, _, c in preds if lv == p - 1], stmt)
        del self.building[id(st)]
        top_guards = [c for lv, _, c in preds if lv < 0]
        parts = [init] if init is not None and init_pos == 0 else []
        return guard(top_guards, seq(parts + [stmt]))

    def tail_predicates(self, st: "Stage", b: StageBounds, tpos: int, guard_domain: bool,
                        staged: bool = False) -> tuple[dict, list]:
        """Loop extents and guards of ``st``'s nest: tail guards tighten serial inner loops,
        else sit at the deepest loop they use (innermost in kernels), as ``(level, involves
        a reduction loop, condition)``; then the domain guards of an unclamped region.

        ``staged`` (a kernel stage's own nest): the domain guards are left to the caller
        (``padding.domain_policy``), and a reduction tail that provably adds zero
        (``padding.zero_beyond``) gets no guard."""
        leaves = st.leaf_iter_vars
        m = len(leaves)
        pos = {b.loop_var(iv): i for i, iv in enumerate(leaves)}
        kernel = self.in_kernel(st)
        # tail guards: tighten serial inner loops, else place at the deepest loop they use
        ext = {iv: b.extents[iv] for iv in leaves}
        preds: list[tuple[int, bool, Expr]] = []   # (level, involves reduce, cond)
        red = pure_reduce_loops(st)
        for rel_parent, cond in split_predicates(st.relations, b.values, b.extents, self.ana):
            used = [pos[v] for v in free_vars(cond) if v in pos]
            level = max(used) if used else -1
            rel = next(r for r in st.relations if isinstance(r, Split) and r.parent is rel_parent)
            inner = rel.inner
            kind = self.kind_of(st, inner)
            if (inner in leaves and leaves.index(inner) == level and level < tpos
                    and kind in (ForKind.SERIAL, ForKind.PARALLEL)):
                pext = b.extents[rel_parent]
                _, inner_ext = split_extents(pext, rel)
                iv0 = b.loop_var(inner)
                start = substitute(b.values[rel_parent], {iv0: Const(0, iv0.dtype)})
                ext[inner] = self.ana.simplify(minimum(inner_ext, pext - start))
                continue
            if staged and padding.zero_beyond(self, st, rel_parent):
                continue    # the fetches zero-filled the operands past the reduction's end
            involves_reduce = any(leaves[p] in red for p in used)
            if level >= tpos:
                raise LoweringError(f"tensorize: stage '{st.name}': the loops under "
                                    f"'{leaves[tpos].name}' have a tail (split factors that may not "
                                    f"divide the extent); choose factors that divide it")
            preds.append((m - 1 if kernel else level, involves_reduce, cond))

        if not staged:
            preds += self.domain_preds(st, b, self.domain_guards(st, b, guard_domain))
        return ext, preds

    def domain_preds(self, st: "Stage", b: StageBounds, conds: list[Expr]) -> list:
        """Domain guards as innermost ``(level, involves reduce, cond)`` predicates."""
        leaves = st.leaf_iter_vars
        red = pure_reduce_loops(st)
        pos = {b.loop_var(iv): i for i, iv in enumerate(leaves)}
        out = []
        for cond in conds:
            used = [pos[v] for v in free_vars(cond) if v in pos]
            out.append((len(leaves) - 1, any(leaves[p] in red for p in used), cond))
        return out

    def store_predicate(self, st: "Stage", b: StageBounds) -> list[Expr]:
        """``set_store_predicate``'s terms as conditions on the loops bound to their thread
        axes (this stage's own, else those of the stages it is attached in)."""
        out = []
        for tag, value in st.store_predicate:
            var = self.thread_loop_var(st, b, tag)
            if var is None:
                raise LoweringError(f"stage '{st.name}': the store predicate uses {tag}, but no "
                                    f"loop of the stage or around it is bound to {tag}")
            out.append(var == Const(value, var.dtype))
        return out

    def thread_loop_var(self, st: "Stage", b: StageBounds, tag: ThreadTag) -> "Var | None":
        """The variable of the loop bound to ``tag`` in ``st`` or a stage enclosing it."""
        cur, bounds, limit = st, b, None
        while cur is not None:
            leaves = cur.leaf_iter_vars if limit is None else \
                cur.leaf_iter_vars[:cur.leaf_iter_vars.index(limit) + 1]
            for iv in leaves:
                a = cur.iter_attrs.get(iv)
                if a is not None and a.thread_tag is tag:
                    return bounds.loop_var(iv)
            cur, limit = cur.attach_stage, cur.attach_ivar
            bounds = self.bounds.get(cur) if cur is not None else None
        return None

    def region_guards(self, st: "Stage", b: StageBounds, leaves: list, tpos: int, ext: dict,
                      preds: list) -> list:
        """The guards of a tensorized nest that may stay around its IntrinCall.

        One call replaces the loops ``leaves[tpos:]``, so their variables do not exist where
        the call is emitted: a guard using them (a domain guard of an unclamped attached
        region) must hold over the whole region.  Proven with every loop's range known, it
        is dropped; otherwise the region may straddle the domain's edge, which one call
        cannot do."""
        inner = {b.loop_var(iv) for iv in leaves[tpos:]}
        kept = []
        with loop_scope(self.ana, [(b.loop_var(iv), ext[iv]) for iv in leaves]) as ana:
            for lv, r, c in preds:
                if not (free_vars(c) & inner):
                    kept.append((lv, r, c))
                elif not ana.can_prove(c):
                    raise LoweringError(
                        f"tensorize: stage '{st.name}', loop '{leaves[tpos].name}': the tensorized "
                        f"region may cross the edge of the stage's domain (the guard {c!r} uses "
                        f"the region's loops and cannot be proven over the whole region); one "
                        f"intrinsic call cannot cover a partial region, so choose tiles that "
                        f"divide the domain")
        return kept

    def kind_of(self, st: "Stage", iv: IterVar) -> ForKind:
        a = st.iter_attrs.get(iv)
        return a.kind if a is not None else ForKind.SERIAL

    def make_loop(self, st: "Stage", iv: IterVar, extent: Expr, body: Stmt) -> For:
        a = st.iter_attrs.get(iv)
        kind = a.kind if a is not None else ForKind.SERIAL
        tag = a.thread_tag if a is not None else None
        ann = {f"pragma_{k}": v for k, v in a.pragmas.items()} if a is not None else {}
        extent = self.ana.simplify(extent)
        declared = a.thread_extent if a is not None else None
        if (declared is not None and isinstance(declared, Const)
                and not self.ana.can_prove(extent <= declared)):
            runs = (f"{extent.value} iterations" if isinstance(extent, Const) else
                    f"{extent!r} iterations, which cannot be proven at most {declared.value}")
            raise LoweringError(f"bind: stage '{st.name}', loop '{iv.name}' has {runs} "
                                f"but is bound to {tag.value}, declared with "
                                f"extent {declared.value} (thread_axis((0, {declared.value}), "
                                f"...)); split the loop to at most {declared.value}")
        if tag is ThreadTag.VTHREAD:
            kind, tag = ForKind.SERIAL, None
        v = self.bounds[st].loop_var(iv)
        return For(v, Const(0, v.dtype), extent, kind, body, tag, ann)

    def in_serial_loop(self, st: "Stage") -> bool:
        """True if a loop that is not bound to a GPU index encloses ``st``'s attach point."""
        cur, at = st.attach_stage, st.attach_ivar
        while cur is not None:
            for iv in cur.leaf_iter_vars[:cur.leaf_iter_vars.index(at) + 1]:
                a = cur.iter_attrs.get(iv)
                if a is None or a.thread_tag is None:
                    return True
            cur, at = cur.attach_stage, cur.attach_ivar
        return False

    def is_double_buffered(self, child: "Stage") -> bool:
        """Double buffering overlaps a block's cooperative fetch with compute through barriers:
        only inside a GPU kernel.  On the CPU there is nothing to overlap with (and no barrier
        to run), so the stage keeps a plain single buffer."""
        return (child.double_buffered and child in self.bounds and self.storage[child].allocated
                and self.in_kernel(child))

    def double_buffered(self, st: "Stage", iv: IterVar, extent: Expr, db: list, body: Stmt) -> Stmt:
        """Two copies of each double-buffered child: iteration ``v`` reads copy ``v % 2`` while
        it fills copy ``(v + 1) % 2`` for the next iteration; one barrier per iteration.

        Before/after (``A.shared`` attached at ``ko``)::

            for ko:                          A.shared = allocate((2, ...))
              sync; A.shared[...] = A[ko]    A.shared[0, ...] = A[0]; sync
              sync; C += A.shared[...]       for ko:
                                               if ko + 1 < K: A.shared[(ko+1) % 2, ...] = A[ko + 1]
                                               C += A.shared[ko % 2, ...]
                                               sync
        """
        v = self.bounds[st].loop_var(iv)
        slot = v % 2
        fills, allocs = [], []
        for child in db:
            stor = self.storage[child]
            with self.inside(st, iv):
                nest = self.build_stage(child)
            for buf in stor.buffers:
                two = Buffer(buf.name, (Const(2, "int64"),) + buf.shape, buf.dtype,
                             None if buf.strides is None else
                             (self.ana.simplify(buf.shape[0] * buf.strides[0]),) + buf.strides,
                             buf.scope)
                nest = _with_slot(nest, buf, two, slot)
                body = _with_slot(body, buf, two, slot)
                allocs.append(two)
            fills.append(nest)
        fill = seq(fills)
        prologue = substitute(fill, {v: Const(0, v.dtype)})
        nxt = IfThenElse(v + 1 < extent, substitute(fill, {v: v + 1}))
        loop = self.make_loop(st, iv, extent, self.wrap_allocs(st, iv, seq([nxt, body, Barrier()])))
        out: Stmt = seq([prologue, Barrier(), loop])
        for buf in reversed(allocs):
            out = Allocate(buf, out)
        return out

    def children_nests(self, st: "Stage", iv: IterVar) -> list[Stmt]:
        out = []
        for child in self.children.get((id(st), iv), []):
            if child not in self.bounds or self.is_double_buffered(child):
                continue
            with self.inside(st, iv):
                nest = self.build_stage(child)
            if storage_scope(child) is not StorageScope.LOCAL and self.in_kernel(child):
                # written by the block's threads together, read by others: synchronize
                # the barrier before guards the previous iteration's readers; it is
                # needed only when a real (not thread-bound) loop encloses the fetch
                if self.in_serial_loop(child):
                    out.append(Barrier())
                out.extend([nest, Barrier()])
            else:
                out.append(nest)
        return out

    def wrap_allocs(self, st: "Stage", iv: IterVar, body: Stmt) -> Stmt:
        for child in reversed(self.children.get((id(st), iv), [])):
            if self.is_double_buffered(child):
                continue
            stor = self.storage.get(child)
            if stor is not None and stor.allocated:
                for buf in reversed(stor.buffers):
                    body = Allocate(buf, body)
        return body

    # ---- statements ---------------------------------------------------------------------------
    def out_indices(self, st: "Stage", vmap: dict, stor: Storage) -> list[Expr]:
        idx = []
        for iv, off in zip(st.op.axis, stor.offsets):
            v = vmap[iv.var]
            idx.append(v if isinstance(off, Const) and off.value == 0 else v - off)
        return idx

    def store_stmt(self, st: "Stage", body: tuple, vmap: dict, stor: Storage,
                   fill: "Expr | None" = None) -> Stmt:
        """``buf[idx] = value``; with ``fill``, ``if_then_else(fill, value, 0)`` (a zero
        fill outside the domain; a value that pads with zero already joins its condition)."""
        idx = self.out_indices(st, vmap, stor)
        stores = []
        for buf, e in zip(stor.buffers, body):
            v = self.lower_expr(e, vmap)
            if fill is not None:
                zero = Const(0, v.dtype)
                if isinstance(v, Select) and isinstance(v.false_value, Const) and \
                        v.false_value.value == 0:
                    v = Select(fill & v.cond, v.true_value, zero)
                else:
                    v = Select(fill, v, zero)
            stores.append(BufferStore(buf, v, idx))
        return seq(stores)

    def update_stmt(self, st: "Stage", body: tuple, vmap: dict, stor: Storage,
                    staged: bool = False) -> Stmt:
        red: Reduce = body[0]
        idx = self.out_indices(st, vmap, stor)
        acc = [BufferLoad(buf, idx) for buf in stor.buffers]
        src = [self.lower_expr(s, vmap) for s in red.source]
        if not red.init and reduce_loops_in_order(st):
            # elements in iteration order after the identity: the in-order update
            new = red.combiner.combine_in_order(acc, src)
        else:
            new = red.combiner.combine(acc, src)
        if len(new) == 1:
            stmt: Stmt = BufferStore(stor.buffers[0], new[0], idx)
        else:
            tmps = [Var(f"{st.name}_v{i}", e.dtype) for i, e in enumerate(new)]
            stmt = seq([BufferStore(buf, t, idx) for buf, t in zip(stor.buffers, tmps)])
            for t, e in reversed(list(zip(tmps, new))):
                stmt = LetStmt(t, e, stmt)
        cond = self.lower_expr(padding.needed_condition(self, st, red) if staged
                               else red.condition, vmap)
        if not (isinstance(cond, Const) and cond.value):
            stmt = IfThenElse(cond, stmt)
        return stmt

    def init_nest(self, st: "Stage", body: tuple, vmap: dict, stor: Storage, inner_leaves: list,
                  ext: dict, preds: list, init_pos: int, kernel: bool) -> Stmt:
        red: Reduce = body[0]
        idx = self.out_indices(st, vmap, stor)
        values = red.init if red.init else red.combiner.identity
        values = [self.lower_expr(v, vmap) for v in values]
        stmt = seq([BufferStore(buf, v, idx) for buf, v in zip(stor.buffers, values)])
        # the spatial loops inside the first reduction loop, and the reduction loops a
        # spatial loop was fused into (they index the output too)
        red = pure_reduce_loops(st)
        spatial = [iv for iv in inner_leaves if iv not in red]
        conds = [c for lv, r, c in preds if not r and (kernel or lv >= init_pos - 1)]
        stmt = guard(conds, stmt)
        for iv in reversed(spatial):
            stmt = self.make_loop(st, iv, ext[iv], stmt)
        return stmt


def _with_slot(node: Any, buf: Buffer, two: Buffer, slot: Expr) -> Any:
    """``node`` with every access to ``buf`` redirected to ``two[slot, ...]``."""
    def pre(n: Any) -> Any:
        if isinstance(n, BufferLoad) and n.buffer is buf:
            return BufferLoad(two, (slot,) + tuple(transform(i, pre=pre) for i in n.indices))
        if isinstance(n, BufferStore) and n.buffer is buf:
            return BufferStore(two, transform(n.value, pre=pre),
                               (slot,) + tuple(transform(i, pre=pre) for i in n.indices))
        return None
    return transform(node, pre=pre)
