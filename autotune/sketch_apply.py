"""Applying the sketch rules (planned by ``sketch.SketchSource``) with one config.

Order: composite kernels (FUSED: ``sketch_fused``), inline (INLINE stages, MATERIALIZE
ones whose knob says so), accumulators of TILE stages (``cache_write``), ``rfactor`` of REDUCE stages, tiling (a TILE stage whose
``rf`` knob is set: ``rfactor`` first, then its partial-result stage tiled), ROOT stages
(their row loops are where REDUCE/MATERIALIZE stages may go), then placement of
REDUCE and MATERIALIZE stages consumers first, so a stage goes to a row loop only
when everything that reads it is computed there too.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from tdsl.tensor import IterVar, thread_axis

from .replay import fresh_schedule
from .sketch import (GPU_REDUCE_BLOCK, GPU_TRANSPOSE_ROWS, Form, Place, Rule, SketchSource,
                     StagePlan, stage_labels)
from .sketch_analysis import transposed_inputs
from .sketch_fused import apply_attention
from .sketch_tc import apply_tc, chosen
from tdsl.schedule.rfactor import first_output as _first


class Apply:
    """One application of the sketch rules with knob values ``cfg``."""

    def __init__(self, src: SketchSource, cfg: Mapping[str, Any]):
        self.src = src
        self.cfg = cfg
        self.sch = fresh_schedule(src.outputs)
        labels = stage_labels(self.sch)
        self.by_label = {labels[id(st)]: st for st in self.sch.stages}
        self.row_loop: dict[str, IterVar] = {}   # ROOT stage -> its fused outer loop
        # elementwise consumers computed inside a TILE stage's tiles (not when that stage
        # is rfactored: its parts are summed at root, and the consumer goes to root too)
        self.fused = {p.consumer for p in src.plans if p.consumer and not self._rf(p)}

    def val(self, name: str, default: Any = None) -> Any:
        e = self.cfg.get(name)
        return default if e is None else e.value

    def _rf(self, p: StagePlan) -> int:
        """Parallel parts of a TILE stage's reduction (its ``rf`` knob; 0: no rfactor)."""
        return self.val(f"{p.name}.rf", 0) if p.rule is Rule.TILE and not self.src.gpu else 0

    def stage(self, label: str) -> Any:
        return self.by_label[label]

    def run(self) -> Any:
        plans = self.src.plans
        for p in plans:
            if p.rule is Rule.FUSED and p.attach_to is None:
                apply_attention(self, p.name)
        for p in plans:
            if p.rule is Rule.INLINE or (p.rule is Rule.MATERIALIZE and
                                         self.val(f"{p.name}.at") == Place.INLINE):
                self.stage(p.name).compute_inline()
        tc: set = set()       # labels scheduled as the tensor-core microkernel (sketch_tc)
        for p in plans:
            if p.rule is Rule.TILE and self.src.gpu and (shape := chosen(self, p.name)):
                tc |= apply_tc(self, p, shape)
        locals_: dict[str, Any] = {}
        for p in plans:
            if p.rule is Rule.TILE and p.consumer is None and not self._rf(p) and \
                    p.name not in tc:
                st = self.stage(p.name)
                out = self.sch.cache_write(st.op.outputs[0], "local")
                locals_[p.name] = self.sch[out]
        rfs: dict[str, Any] = {}
        for p in plans:
            if p.rule is Rule.REDUCE:
                rfs[p.name] = self._rfactor(p)
        for p in plans:
            if p.rule is Rule.TILE and p.name not in tc:
                if self.src.gpu:
                    self._tile_gpu(p, locals_.get(p.name))
                elif self._rf(p):
                    self._tile_rfactor(p)
                else:
                    self._tile_cpu(p, locals_.get(p.name))
        for p in plans:
            if p.rule is Rule.ROOT and p.name not in self.fused and p.name not in tc:
                self._root(p, self.stage(p.name))
        for p in reversed(plans):
            if p.rule is Rule.REDUCE:
                self._reduce(p, rfs[p.name])
            elif p.rule is Rule.MATERIALIZE and self.val(f"{p.name}.at") != Place.INLINE:
                self._materialize(p)
        return self.sch

    def _can_go_to_row(self, p: StagePlan, wanted: bool) -> bool:
        """``p`` may be computed at the row loop of its ROOT consumer: the knob asks for it,
        the row loop exists, and every stage that reads ``p`` is that consumer or is
        computed under it."""
        if not wanted or p.attach_to is None or p.attach_to not in self.row_loop:
            return False
        end = self.stage(p.attach_to)
        return all(c is end or self.sch.is_attached_under(c, end)
                   for c in self.sch.consumers(self.stage(p.name)))

    def _auto_unroll(self, p: StagePlan, st: Any, loop: "IterVar | None" = None) -> None:
        n = self.val(f"{p.name}.auto_unroll", 0)
        if n and st.leaf_iter_vars:
            st.pragma(loop if loop is not None else st.leaf_iter_vars[0], "auto_unroll_max_step", n)

    # ---- TILE on the CPU ------------------------------------------------------------------------
    def _tile_cpu(self, p: StagePlan, local: Any, outer: Any = None, lead: int = 0) -> None:
        """Multi-level tiling of ``p``: ``outer`` (the stage, its fused consumer, or the
        partial-result stage of ``_tile_rfactor``) in tiles, ``local`` (the accumulator)
        computed per tile.  ``lead`` leading axes of both (rfactor's parts) are not tiled:
        they join the parallel loop."""
        if outer is None:
            outer = self.stage(p.consumer) if p.consumer else self.stage(p.name)
            inner = self.stage(p.name) if p.consumer else local
        else:
            inner = local
        sizes = [self.val(f"{p.name}.S{d}") for d in range(len(p.spatial))]
        head = list(outer.op.axis[:lead])
        loops = []
        for iv, sz in zip(outer.op.axis[lead:], sizes):
            o0, rest = outer.split(iv, factor=sz[1] * sz[2] * sz[3])
            o1, o2 = outer.split(rest, factor=sz[2] * sz[3])
            loops.append((o0, o1, o2))
        outer.reorder(*head, *[l[0] for l in loops], *[l[1] for l in loops],
                      *[l[2] for l in loops])
        if self.val(f"{p.name}.par") == 2:
            fused = outer.fuse(*head, *[l[0] for l in loops], *[l[1] for l in loops])
            outer.parallel(fused)
            attach = fused
        else:
            fused = outer.fuse(*head, *[l[0] for l in loops])
            outer.parallel(fused)
            attach = loops[-1][1]
        if sizes[-1][3] > 1:
            # the write-back of the tile: vectors of the register tile's width (a loop of
            # the whole level-2 extent would make one vector of hundreds of lanes)
            _, wv = outer.split(loops[-1][2], factor=sizes[-1][3])
            outer.vectorize(wv)
        inner.compute_at(outer, attach)
        b2, b3, r0, r1 = [], [], [], []
        for iv, sz in zip(inner.op.axis[lead:], sizes):
            x2, x3 = inner.split(iv, factor=sz[3])
            b2.append(x2)
            b3.append(x3)
        for r, iv in enumerate(inner.op.reduce_axis):
            y0, y1 = inner.split(iv, factor=self.val(f"{p.name}.R{r}")[1])
            r0.append(y0)
            r1.append(y1)
        inner.reorder(*inner.op.axis[:lead], *r0, *b2, *r1, *b3)
        if sizes[-1][3] > 1:
            inner.vectorize(b3[-1])
        unroll = self.val(f"{p.name}.unroll")
        if unroll >= 1:
            for x, sz in zip(b3[:-1], sizes[:-1]):
                if sz[3] > 1:
                    inner.unroll(x)
        if unroll >= 2:
            for r, y in enumerate(r1):
                if self.val(f"{p.name}.R{r}")[1] > 1:
                    inner.unroll(y)
        for inp in p.inputs:
            if self.val(f"{p.name}.pack.{inp}"):
                src = self.stage(inp)
                cache = self.sch.cache_read(src.op.outputs[0], "local", [inner.op.outputs[0]])
                cst = self.sch[cache]
                if self.val(f"{p.name}.pack_at", 0) and r0:
                    cst.compute_at(inner, r0[-1])
                else:
                    cst.compute_at(outer, fused)
                if len(cst.op.axis) > 0:
                    _, cv = cst.split(cst.op.axis[-1], factor=self.src.lanes(p.dtype_bits))
                    cst.vectorize(cv)
        self._auto_unroll(p, outer, fused)

    def _tile_rfactor(self, p: StagePlan) -> None:
        """The ``rf`` form: the first reduction axis split into ``rf`` parts, ``rfactor``
        on the parts (a partial-result stage with the parts as its outermost axis), that
        stage tiled (``_tile_cpu``, parts in the parallel loop) with a local accumulator;
        the parts are summed by the original stage, its spatial axes fused and parallel,
        the innermost vectorized when whole vectors fit."""
        st = self.stage(p.name)
        ko, _ = st.split(st.op.reduce_axis[0], nparts=self._rf(p))
        rf = _first(self.sch.rfactor(st.op.outputs[0], ko, factor_axis=0))
        local = self.sch[self.sch.cache_write(rf, "local")]
        self._tile_cpu(p, local, outer=self.sch[rf], lead=1)
        axes = list(st.op.axis)
        lanes = self.src.lanes(p.dtype_bits)
        if p.spatial[-1] % lanes == 0:
            xo, xi = st.split(axes[-1], factor=lanes)
            st.reorder(*axes[:-1], xo, *st.op.reduce_axis, xi)
            top = st.fuse(*axes[:-1], xo) if len(axes) > 1 else xo
            st.vectorize(xi)
        else:
            top = st.fuse(*axes) if len(axes) > 1 else axes[0]
        st.parallel(top)

    # ---- TILE on the GPU -----------------------------------------------------------------------
    def _tile_gpu(self, p: StagePlan, local: Any) -> None:
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
        vec = self.val(f"{p.name}.fetch_vec", 1)
        for inp in p.reads:
            src = self.stage(inp)
            cache = self.sch.cache_read(src.op.outputs[0], "shared", [inner.op.outputs[0]])
            cst = self.sch[cache]
            cst.compute_at(inner, r0[-1] if r0 else b3[0])
            f = cst.fuse(*cst.op.axis)
            if vec > 1:          # each thread loads vec consecutive elements (float2/float4)
                f, fv = cst.split(f, factor=vec)
                cst.vectorize(fv)
            _, tt = cst.split(f, factor=max(1, n_threads))
            cst.bind(tt, thread_axis("threadIdx.x"))

    # ---- REDUCE ---------------------------------------------------------------------------------
    def _rfactor(self, p: StagePlan) -> Any:
        mode, factor = self.val(f"{p.name}.form")
        if mode not in (Form.RF_VECTOR, Form.RF_PARALLEL, Form.RF_CHAINS):
            return None
        st = self.stage(p.name)
        if mode == Form.RF_CHAINS:
            from tdsl.ops.schedules.llvm import rfactor_chains
            lanes = self.src.lanes(p.dtype_bits)
            rst, merge = rfactor_chains(self.sch, st, st.op.reduce_axis[-1], lanes, factor,
                                        len(st.op.axis))
            lane = merge.op.axis[-1]
            merge.reorder(*[iv for iv in merge.leaf_iter_vars if iv is not lane], lane)
            merge.vectorize(lane)
            chain, lane = rst.op.axis[-2:]
            rst.reorder(*[iv for iv in rst.leaf_iter_vars if iv not in (chain, lane)],
                        chain, lane)
            rst.unroll(chain)
            rst.vectorize(lane)
            return (mode, rst, merge)
        if mode == Form.RF_VECTOR:
            _, ki = st.split(st.op.reduce_axis[-1], factor=factor)
            rf = self.sch.rfactor(st.op.outputs[0], ki, factor_axis=len(st.op.axis))
            rst = self.sch[_first(rf)]
            rst.reorder(*rst.op.axis[:-1], *rst.op.reduce_axis, rst.op.axis[-1])
            rst.vectorize(rst.op.axis[-1])
        else:
            ko, _ = st.split(st.op.reduce_axis[0], nparts=factor)
            rf = self.sch.rfactor(st.op.outputs[0], ko, factor_axis=0)
            rst = self.sch[_first(rf)]
            rst.parallel(rst.op.axis[0])
        return (mode, rst)

    def _reduce(self, p: StagePlan, rf: Any) -> None:
        st = self.stage(p.name)
        mode, width = self.val(f"{p.name}.form")
        if self._can_go_to_row(p, bool(self.val(f"{p.name}.at", 0))):
            st.compute_at(self.stage(p.attach_to), self.row_loop[p.attach_to])
            top = None
        elif self.src.gpu and mode == Form.CROSS_THREAD:
            self._cross_thread_gpu(st, width)
            top = None
        elif self.src.gpu:
            spatial = list(st.op.axis)
            if spatial:
                f = st.fuse(*spatial) if len(spatial) > 1 else spatial[0]
                o, i = st.split(f, factor=64)
                st.bind(o, thread_axis("blockIdx.x"))
                st.bind(i, thread_axis("threadIdx.x"))
            top = None
        elif mode == Form.SPATIAL_VECTOR:
            axes = list(st.op.axis)
            xo, xi = st.split(axes[-1], factor=width)
            st.reorder(*axes[:-1], xo, *st.op.reduce_axis, xi)
            top = st.fuse(*axes[:-1], xo) if len(axes) > 1 else xo
            st.parallel(top)
            st.vectorize(xi)
        else:
            spatial = list(st.op.axis)
            top = None
            if spatial:
                top = st.fuse(*spatial) if len(spatial) > 1 else spatial[0]
                if mode != Form.RF_PARALLEL:
                    st.parallel(top)
        if rf is not None and rf[0] in (Form.RF_VECTOR, Form.RF_CHAINS):
            spatial_leaves = [v for v in st.leaf_iter_vars if v.kind.value == "spatial"]
            if spatial_leaves:
                for t in reversed(rf[1:]):      # the merge (RF_CHAINS), then the partials
                    t.compute_at(st, spatial_leaves[-1])
        if not self.src.gpu:
            self._auto_unroll(p, st, top)

    def _transpose_gpu(self, st: Any, axes: list, tile: int) -> None:
        """A tile x tile block per output tile: the inputs read transposed are copied into
        shared memory along their rows (coalesced; rows padded by one element, so the
        column reads of the write-out hit distinct banks), then the output is written
        along its rows -- both global accesses coalesced."""
        rows = GPU_TRANSPOSE_ROWS
        yo, yi = st.split(axes[-2], factor=tile)
        xo, xi = st.split(axes[-1], factor=tile)
        st.reorder(*axes[:-2], yo, xo, yi, xi)
        block = st.fuse(*axes[:-2], yo, xo)
        ty, _ = st.split(yi, nparts=tile // rows)
        st.bind(block, thread_axis("blockIdx.x"))
        st.bind(ty, thread_axis("threadIdx.y"))
        st.bind(xi, thread_axis("threadIdx.x"))
        for t in transposed_inputs(st.op):
            sh = self.sch[self.sch.cache_read(t, "shared", [st.op.outputs[0]])]
            sh.compute_at(st, block)
            sh.storage_align(sh.op.axis[-2], tile, 1)
            f = sh.fuse(*sh.op.axis)
            f, fx = sh.split(f, factor=tile)
            _, fy = sh.split(f, factor=tile // rows)
            sh.bind(fx, thread_axis("threadIdx.x"))
            sh.bind(fy, thread_axis("threadIdx.y"))

    def _cross_thread_gpu(self, st: Any, threads: int) -> None:
        """Outputs over blocks (``GPU_REDUCE_BLOCK // threads`` per block, threadIdx.y), each
        one's reduction split over ``threads`` lanes of threadIdx.x: a cross-thread
        reduction (warp shuffles, then shared memory across warps)."""
        red = list(st.op.reduce_axis)
        k = st.fuse(*red) if len(red) > 1 else red[0]
        _, ki = st.split(k, factor=threads)
        spatial = list(st.op.axis)
        if spatial:
            f = st.fuse(*spatial) if len(spatial) > 1 else spatial[0]
            rows = max(1, GPU_REDUCE_BLOCK // threads)
            if rows > 1:
                f, fy = st.split(f, factor=rows)
                st.bind(fy, thread_axis("threadIdx.y"))
            st.bind(f, thread_axis("blockIdx.x"))
        st.bind(ki, thread_axis("threadIdx.x"))

    # ---- MATERIALIZE and ROOT -------------------------------------------------------------------
    def _materialize(self, p: StagePlan) -> None:
        st = self.stage(p.name)
        if self._can_go_to_row(p, self.val(f"{p.name}.at") == Place.ROW):
            st.compute_at(self.stage(p.attach_to), self.row_loop[p.attach_to])
            v = self.cfg[f"{p.name}.inner"].size[-1] if st.op.axis else 1
            if v > 1:
                _, ji = st.split(st.op.axis[-1], factor=v)
                st.vectorize(ji)
        else:
            self._root(p, st)

    def _root(self, p: StagePlan, st: Any) -> None:
        axes = list(st.op.axis)
        if not axes:
            return
        gpu = self.src.gpu
        tile = self.val(f"{p.name}.tile2d", 0)
        if tile and gpu:
            self._transpose_gpu(st, axes, tile)
            return
        if tile and not gpu:
            yo, yi = st.split(axes[-2], factor=tile)
            xo, xi = st.split(axes[-1], factor=tile)
            st.reorder(*axes[:-2], yo, xo, yi, xi)
            st.parallel(st.fuse(*axes[:-2], yo, xo))
            st.vectorize(xi)
            return
        if f"{p.name}.inner" not in self.cfg:
            # the consumer of an rfactored TILE stage (no knobs of its own): rows parallel,
            # the innermost axis in whole vectors when they fit
            lanes = self.src.lanes(p.dtype_bits)
            if p.spatial[-1] % lanes == 0 and p.spatial[-1] > lanes:
                axes[-1:] = st.split(axes[-1], factor=lanes)
                st.vectorize(axes[-1])
            if len(axes) > 1:
                st.parallel(st.fuse(*axes[:-1]) if len(axes) > 2 else axes[0])
            return
        loops = self.cfg[f"{p.name}.inner"].apply(self.sch, st.op.outputs[0], axes[-1])
        ji = loops[-1]
        if len(axes) > 1:
            row = st.fuse(*axes[:-1]) if len(axes) > 2 else axes[0]
            if gpu:
                st.bind(row, thread_axis("blockIdx.x"))
                st.bind(loops[0], thread_axis("threadIdx.x"))
            else:
                st.parallel(row)
            self.row_loop[p.name] = row
        elif gpu:
            st.bind(loops[0], thread_axis("blockIdx.x"))
            st.bind(ji, thread_axis("threadIdx.x"))
            return
        else:
            st.parallel(loops[0])
        if p.spatial[-1] > 1 and self.cfg[f"{p.name}.inner"].size[-1] > 1 and not gpu:
            st.vectorize(ji)
