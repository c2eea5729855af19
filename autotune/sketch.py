"""Sketches: a schedule space generated from the computation, with no per-operator code.

``SketchSource(outputs, target, sizes)`` classifies each stage of the default
schedule and plans one rule per stage:

* ``INLINE`` — an elementwise stage that is not an output: ``compute_inline``;
* ``TILE`` — a reduction with data reuse (some input is read without some
  spatial axis: matmul, batch matmul, conv2d, depthwise conv): multi-level
  tiling, ``SSRSRS`` on the CPU (spatial axes in 4 levels, reduction axes in 2;
  outer levels fused and parallel, innermost vectorized, register tile unroll
  knob), ``SSSRRSRS`` on the GPU (block / virtual thread / thread levels bound,
  inputs staged through shared memory with cooperative fetching).  The
  accumulator is a ``cache_write(..., "local")`` stage computed at the outer tile
  (or the stage itself, computed at the tile of its elementwise consumer);
  ``pack`` knobs stage reused inputs through a local copy (``cache_read``) made
  per parallel tile;
* ``REDUCE`` — a reduction without reuse (softmax, layernorm statistics): at
  root or computed at the row loop of its consumer, optionally ``rfactor``-ed
  (vectorized partial sums, or partial sums in parallel when the spatial extent
  gives too little parallelism);
* ``ROOT`` — an elementwise output: outer axes fused and parallel, innermost
  split and vectorized.

Knobs (named ``<stage>.<knob>``) hold tile sizes and annotations;
``schedule(point)`` applies the rules to a fresh schedule, recording the trace.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from tdsl.expr import Reduce, TensorLoad
from tdsl.target import Target, TargetKind
from tdsl.opaque import is_opaque
from tdsl.tensor import ComputeOp, IterVar
from tdsl.visitor import free_vars, post_order_visit

from .irutil import eval_int
from .replay import fresh_schedule
from .space import ConfigSpace, OtherOptionSpace, SplitSpace

#: float32 lanes of a 512-bit vector; the innermost vectorized tile is bounded by 4x this.
VECTOR_LANES = 16
CPU_CORES_HINT = 2


class Rule(enum.Enum):
    INLINE = "inline"
    TILE = "tile"
    REDUCE = "reduce"
    ROOT = "root"


@dataclass
class StagePlan:
    name: str
    rule: Rule
    spatial: list[int] = field(default_factory=list)   # extents of the spatial axes
    reduce: list[int] = field(default_factory=list)    # extents of the reduction axes
    consumer: Optional[str] = None                     # TILE: fused elementwise consumer
    inputs: list[str] = field(default_factory=list)    # TILE: names of inputs that can be packed
    attach_to: Optional[str] = None                    # REDUCE: the ROOT consumer it may go in


def _has_reuse(op: ComputeOp) -> bool:
    """Some input is read with an index that ignores some spatial axis."""
    spatial = {iv.var for iv in op.axis}
    found = False

    def visit(n: Any) -> None:
        nonlocal found
        if isinstance(n, TensorLoad):
            used: set = set()
            for i in n.indices:
                used |= free_vars(i)
            if spatial - used:
                found = True
    for b in op.body:
        for s in (b.source if isinstance(b, Reduce) else (b,)):
            post_order_visit(s, visit)
    return found


def stage_labels(sch: Any) -> dict[int, str]:
    """A unique, deterministic label for each stage (by ``id``): its name, or
    ``name#position`` where several stages share a name (knobs are keyed by label)."""
    names = [st.name for st in sch.stages]
    return {id(st): st.name if names.count(st.name) == 1 else f"{st.name}#{i}"
            for i, st in enumerate(sch.stages)}


def _reads_at_own_axes(consumer: ComputeOp, producer: Any) -> bool:
    """``consumer`` reads the producer only as ``P[i0, i1, ...]`` with its own axes in order."""
    ok = True
    seen = False
    axes = [iv.var for iv in consumer.axis]

    def visit(n: Any) -> None:
        nonlocal ok, seen
        if isinstance(n, TensorLoad) and n.tensor.op is producer:
            seen = True
            if len(n.indices) != len(axes) or any(i is not a and not (hasattr(i, "same_as") and
                                                                       i.same_as(a))
                                                  for i, a in zip(n.indices, axes)):
                ok = False
    for b in consumer.body:
        post_order_visit(b, visit)
    return ok and seen


class SketchSource:
    """The generated space of a computation (a ``CandidateSource`` for ``Task``)."""

    def __init__(self, outputs: Sequence[Any], target: Target, sizes: Mapping[str, int],
                 max_vector: int = 4 * VECTOR_LANES, max_inner: int = 16, max_reg: int = 8,
                 cores: int = CPU_CORES_HINT):
        self.outputs = list(outputs)
        self.target = target
        self.gpu = target.kind is TargetKind.CUDA
        self.sizes = dict(sizes)
        self.max_vector = max_vector
        self.max_inner = max_inner
        self.max_reg = max_reg
        self.cores = cores
        self.space = ConfigSpace()
        self.plans: list[StagePlan] = []
        self._analyze()

    # ---- analysis ---------------------------------------------------------------------------
    def _ext(self, iv: IterVar) -> int:
        return max(1, eval_int(iv.dom.extent, self.sizes, 1))

    def _analyze(self) -> None:
        sch = fresh_schedule(self.outputs)
        lab = stage_labels(sch)
        plans: dict[str, StagePlan] = {}
        for st in sch.stages:
            if st.is_placeholder or is_opaque(st.op):   # extern/scan: nothing to schedule
                continue
            op = st.op
            sp = [self._ext(iv) for iv in op.axis]
            rd = [self._ext(iv) for iv in op.reduce_axis]
            if not op.reduce_axis:
                # an extern/scan stage reads its inputs whole from memory: not inlined
                keep = st.is_output or any(is_opaque(r.op) for r in sch.readers(st))
                rule = Rule.ROOT if keep else Rule.INLINE
            else:
                rule = Rule.TILE if _has_reuse(op) else Rule.REDUCE
            plans[lab[id(st)]] = StagePlan(lab[id(st)], rule, sp, rd)
        for st in sch.stages:
            if lab[id(st)] in plans and plans[lab[id(st)]].rule is Rule.INLINE:
                st.compute_inline()
        for st in sch.stages:
            plan = plans.get(lab[id(st)])
            if plan is None or plan.rule in (Rule.INLINE, Rule.ROOT):
                continue
            cons = sch.consumers(st)
            root_cons = [c for c in cons
                         if plans.get(lab[id(c)]) and plans[lab[id(c)]].rule is Rule.ROOT]
            if plan.rule is Rule.TILE:
                plan.inputs = [lab[id(sch[t.op])] for t in st.op.input_tensors]
                if not st.is_output and len(cons) == 1 and root_cons and \
                        plans[lab[id(cons[0])]].spatial == plan.spatial and \
                        _reads_at_own_axes(cons[0].op, st.op):
                    plan.consumer = lab[id(cons[0])]
            elif plan.rule is Rule.REDUCE and not st.is_output and len(root_cons) == 1 and \
                    plans[lab[id(root_cons[0])]].spatial[:len(plan.spatial)] == plan.spatial:
                plan.attach_to = lab[id(root_cons[0])]
        self.plans = [plans[n] for n in plans]
        fused_consumers = {p.consumer for p in self.plans if p.consumer}
        for p in self.plans:
            if p.rule is Rule.TILE:
                self._tile_knobs(p)
            elif p.rule is Rule.REDUCE:
                self._reduce_knobs(p)
            elif p.rule is Rule.ROOT and p.name not in fused_consumers:
                self._root_knobs(p)

    # ---- knobs ------------------------------------------------------------------------------
    def _tile_knobs(self, p: StagePlan) -> None:
        n = len(p.spatial)
        levels = 5 if self.gpu else 4
        lanes = VECTOR_LANES
        for d, e in enumerate(p.spatial):
            last = d == n - 1
            cap = self.max_vector if last else self.max_reg
            flt = None
            if last and e % lanes == 0 and not self.gpu:
                flt = lambda sz, lanes=lanes: sz[-1] % lanes == 0      # whole vectors
            self.space.add(f"{p.name}.S{d}", SplitSpace(e, levels, max_factor=cap, filter=flt))
        for r, e in enumerate(p.reduce):
            self.space.add(f"{p.name}.R{r}", SplitSpace(e, 3 if self.gpu else 2,
                                                       max_factor=self.max_inner))
        if not self.gpu:
            self.space.add(f"{p.name}.unroll", OtherOptionSpace([0, 1, 2]))
            self.space.add(f"{p.name}.par", OtherOptionSpace([1, 2]))
            for inp in p.inputs:
                self.space.add(f"{p.name}.pack.{inp}", OtherOptionSpace([0, 1]))

    def _reduce_knobs(self, p: StagePlan) -> None:
        opts: list = [[0, 0]]
        if len(p.reduce) == 1:
            e = p.reduce[0]
            opts += [[1, f] for f in (8, 16, 32, 64) if f < e and e % f == 0]
            if math.prod(p.spatial) < 2 * self.cores and not self.gpu:
                opts += [[2, f] for f in (2, 4, 8, 16) if f < e and e % f == 0]
        self.space.add(f"{p.name}.rfactor", OtherOptionSpace(opts))
        if p.attach_to is not None:
            self.space.add(f"{p.attach_to}.reduce_at", OtherOptionSpace([1, 0]))

    def _root_knobs(self, p: StagePlan) -> None:
        self.space.add(f"{p.name}.inner", SplitSpace(p.spatial[-1], 2, max_factor=self.max_vector))

    # ---- applying ---------------------------------------------------------------------------
    def schedule(self, point: Sequence[int]) -> Any:
        cfg = {name: knob.entities[i] for (name, knob), i in zip(self.space.knobs.items(), point)}
        return _Apply(self, cfg).run()


class _Apply:
    """One application of the sketch rules with knob values ``cfg``."""

    def __init__(self, src: SketchSource, cfg: Mapping[str, Any]):
        self.src = src
        self.cfg = cfg
        self.sch = fresh_schedule(src.outputs)
        self.by_label = {lab: st for st in self.sch.stages
                         for lab in (stage_labels(self.sch)[id(st)],)}
        self.row_loop: dict[str, IterVar] = {}   # ROOT stage -> its fused outer loop
        self.par_loop: dict[str, IterVar] = {}

    def val(self, name: str) -> Any:
        return self.cfg[name].value

    def stage(self, label: str) -> Any:
        return self.by_label[label]

    def run(self) -> Any:
        plans = self.src.plans
        for p in plans:
            if p.rule is Rule.INLINE:
                self.stage(p.name).compute_inline()
        locals_: dict[str, Any] = {}
        for p in plans:
            if p.rule is Rule.TILE and p.consumer is None:
                st = self.stage(p.name)
                out = self.sch.cache_write(st.op.outputs[0], "local")
                locals_[p.name] = self.sch[out]
        rfs: dict[str, Any] = {}
        for p in plans:
            if p.rule is Rule.REDUCE:
                rfs[p.name] = self._rfactor(p)
        for p in plans:
            if p.rule is Rule.TILE:
                if self.src.gpu:
                    self._tile_gpu(p, locals_.get(p.name))
                else:
                    self._tile_cpu(p, locals_.get(p.name))
        for p in plans:
            if p.rule is Rule.ROOT and p.name not in {q.consumer for q in plans if q.consumer}:
                self._root(p)
        for p in plans:
            if p.rule is Rule.REDUCE:
                self._reduce(p, rfs[p.name])
        return self.sch

    # ---- TILE on the CPU ------------------------------------------------------------------------
    def _tile_cpu(self, p: StagePlan, local: Any) -> None:
        outer = self.stage(p.consumer) if p.consumer else self.stage(p.name)
        inner = self.stage(p.name) if p.consumer else local
        sizes = [self.val(f"{p.name}.S{d}") for d in range(len(p.spatial))]
        loops = []
        for iv, sz in zip(outer.op.axis, sizes):
            o0, rest = outer.split(iv, factor=sz[1] * sz[2] * sz[3])
            o1, o2 = outer.split(rest, factor=sz[2] * sz[3])
            loops.append((o0, o1, o2))
        outer.reorder(*[l[0] for l in loops], *[l[1] for l in loops], *[l[2] for l in loops])
        par = self.val(f"{p.name}.par")
        if par == 2:
            fused = outer.fuse(*[l[0] for l in loops], *[l[1] for l in loops])
            outer.parallel(fused)
            attach = fused
        else:
            fused = outer.fuse(*[l[0] for l in loops])
            outer.parallel(fused)
            attach = loops[-1][1] if len(loops) > 0 else fused
            if all(sz[1] == 1 for sz in sizes):
                attach = loops[-1][1]
        last = loops[-1][2]
        if sizes[-1][2] * sizes[-1][3] > 1:
            outer.vectorize(last)
        inner.compute_at(outer, attach)
        b2, b3, r0, r1 = [], [], [], []
        for iv, sz in zip(inner.op.axis, sizes):
            x2, x3 = inner.split(iv, factor=sz[3])
            b2.append(x2)
            b3.append(x3)
        for r, iv in enumerate(inner.op.reduce_axis):
            f = self.val(f"{p.name}.R{r}")
            y0, y1 = inner.split(iv, factor=f[1])
            r0.append(y0)
            r1.append(y1)
        inner.reorder(*r0, *b2, *r1, *b3)
        if sizes[-1][3] > 1:
            inner.vectorize(b3[-1])
        unroll = self.val(f"{p.name}.unroll")
        if unroll >= 1:
            for x, sz in zip(b3[:-1], sizes[:-1]):
                if sz[3] > 1:
                    inner.unroll(x)
        if unroll >= 2:
            for y, r in zip(r1, range(len(r1))):
                if self.val(f"{p.name}.R{r}")[1] > 1:
                    inner.unroll(y)
        for inp in p.inputs:
            if self.val(f"{p.name}.pack.{inp}"):
                src = self.stage(inp)
                cache = self.sch.cache_read(src.op.outputs[0], "local", [inner.op.outputs[0]])
                cst = self.sch[cache]
                cst.compute_at(outer, fused)
                ax = cst.op.axis
                if len(ax) > 0:
                    cst.vectorize(ax[-1])

    # ---- TILE on the GPU -----------------------------------------------------------------------
    def _tile_gpu(self, p: StagePlan, local: Any) -> None:
        from tdsl.tensor import thread_axis
        outer = self.stage(p.consumer) if p.consumer else self.stage(p.name)
        inner = self.stage(p.name) if p.consumer else local
        sizes = [self.val(f"{p.name}.S{d}") for d in range(len(p.spatial))]
        lv: list[list] = [[], [], [], []]
        for iv, sz in zip(outer.op.axis, sizes):
            rest = iv
            parts = []
            for k in (1, 2, 3):
                o, rest = outer.split(rest, factor=math.prod(sz[k:]))
                parts.append(o)
            parts.append(rest)
            for k in range(4):
                lv[k].append(parts[k])
        outer.reorder(*lv[0], *lv[1], *lv[2], *lv[3])
        bx = outer.fuse(*lv[0])
        vt = outer.fuse(*lv[1])
        tx = outer.fuse(*lv[2])
        outer.bind(bx, thread_axis("blockIdx.x"))
        outer.bind(vt, thread_axis("vthread"))
        outer.bind(tx, thread_axis("threadIdx.x"))
        inner.compute_at(outer, tx)
        b3, b4, r0, r1, r2 = [], [], [], [], []
        for iv, sz in zip(inner.op.axis, sizes):
            x3, x4 = inner.split(iv, factor=sz[4])
            b3.append(x3)
            b4.append(x4)
        for r, iv in enumerate(inner.op.reduce_axis):
            f = self.val(f"{p.name}.R{r}")
            y0, rest = inner.split(iv, factor=f[1] * f[2])
            y1, y2 = inner.split(rest, factor=f[2])
            r0.append(y0)
            r1.append(y1)
            r2.append(y2)
        inner.reorder(*r0, *r1, *b3, *r2, *b4)
        n_threads = math.prod(sz[2] for sz in sizes)
        for inp in p.inputs:
            src = self.sch.stage_by_name(inp)
            cache = self.sch.cache_read(src.op.outputs[0], "shared", [inner.op.outputs[0]])
            cst = self.sch[cache]
            cst.compute_at(inner, r0[-1] if r0 else b3[0])
            f = cst.fuse(*cst.op.axis)
            _, t = cst.split(f, factor=max(1, n_threads))
            cst.bind(t, thread_axis("threadIdx.x"))

    # ---- REDUCE and ROOT -------------------------------------------------------------------------
    def _rfactor(self, p: StagePlan) -> Any:
        mode, factor = self.val(f"{p.name}.rfactor")
        if not mode:
            return None
        st = self.stage(p.name)
        k = st.op.reduce_axis[0]
        if mode == 1:
            ko, ki = st.split(k, factor=factor)
            rf = self.sch.rfactor(st.op.outputs[0], ki, factor_axis=len(st.op.axis))
            rst = self.sch[rf]
            rk = rst.op.reduce_axis[0]
            rst.reorder(*rst.op.axis[:-1], rk, rst.op.axis[-1])
            rst.vectorize(rst.op.axis[-1])
        else:
            ko, ki = st.split(k, nparts=factor)
            rf = self.sch.rfactor(st.op.outputs[0], ko, factor_axis=0)
            rst = self.sch[rf]
            rst.parallel(rst.op.axis[0])
        return (mode, rst)

    def _root(self, p: StagePlan) -> None:
        st = self.stage(p.name)
        axes = list(st.op.axis)
        jo, ji = self.cfg[f"{p.name}.inner"].apply(self.sch, st.op.outputs[0], axes[-1])
        if len(axes) > 1:
            row = st.fuse(*axes[:-1]) if len(axes) > 2 else axes[0]
            if self.src.gpu:
                from tdsl.tensor import thread_axis
                st.bind(row, thread_axis("blockIdx.x"))
                st.bind(jo, thread_axis("threadIdx.x"))
            else:
                st.parallel(row)
            self.row_loop[p.name] = row
        elif self.src.gpu:
            from tdsl.tensor import thread_axis
            st.bind(jo, thread_axis("blockIdx.x"))
            st.bind(ji, thread_axis("threadIdx.x"))
            return
        else:
            st.parallel(jo)
        if p.spatial[-1] > 1 and self.cfg[f"{p.name}.inner"].size[1] > 1 and not self.src.gpu:
            st.vectorize(ji)

    def _reduce(self, p: StagePlan, rf: Any) -> None:
        st = self.stage(p.name)
        at = p.attach_to is not None and self.val(f"{p.attach_to}.reduce_at") and \
            p.attach_to in self.row_loop
        if at:
            st.compute_at(self.stage(p.attach_to), self.row_loop[p.attach_to])
        else:
            spatial = list(st.op.axis)
            if spatial:
                f = st.fuse(*spatial) if len(spatial) > 1 else spatial[0]
                if self.src.gpu:
                    from tdsl.tensor import thread_axis
                    o, i = st.split(f, factor=64)
                    st.bind(o, thread_axis("blockIdx.x"))
                    st.bind(i, thread_axis("threadIdx.x"))
                elif rf is None or rf[0] != 2:
                    st.parallel(f)
        if rf is not None and rf[0] == 1:
            rst = rf[1]
            spatial_leaves = [v for v in st.leaf_iter_vars if v.kind.value == "spatial"]
            if spatial_leaves:
                rst.compute_at(st, spatial_leaves[-1])
