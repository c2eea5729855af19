"""Default CPU schedules (target "llvm").

Every non-inlined stage gets one of five schedules, chosen from its pattern and kind:

* an injective output: fused outer loops in parallel, the innermost loop vectorized;
* an anchor (matmul, dense, batch_matmul, conv2d), with the elementwise stage that
  consumes it (its epilogue) when there is one: register tiles in a local stage, packed
  operand panels, the epilogue applied while the tile is written out; a matmul or a
  convolution written by hand with ``td.compute`` (``recognize.py``) gets the same schedule;
* a row group (softmax, log_softmax, layernorm, rmsnorm, mean, argmax, ...): the output's
  rows in parallel, each row's reductions (and temporaries) computed just before it;
* a reduction (sum, max, pooling): vectorized along the contiguous axis -- lanes of
  partial results (rfactor) when the reduced axis is the contiguous one.

Tile sizes adapt to the vector width and register count of the target (16 float32 lanes and
32 registers with AVX-512; 8 lanes and 16 registers with AVX2).

This module holds the injective schedule and the driver (``apply``); the others live in
``llvm_reduce.py`` (reductions, row groups), ``llvm_matmul.py`` (matmul family),
``llvm_conv.py`` (conv2d) and ``cpu.py`` (the target's facts, shared helpers), and are
re-exported here.
"""
from __future__ import annotations

import functools
from types import MappingProxyType
from typing import Callable

from tdsl.expr import Expr
from tdsl.lowering.inline import inlined_bodies
from tdsl.opaque import is_opaque
from tdsl.schedule import Schedule, Stage
from tdsl.schedule.stage import AttachType
from tdsl.target import Target
from tdsl.tensor import IterVar
from tdsl.visitor import free_vars

from ..tags import OpKind, Pattern
from .cpu import CPU, _ext, _fuse, _out_dtype, _total, _vector_split, cpu_of
from .graph import (effective_loads, fusable_anchor, is_inlined, row_group, stage_kind,
                    stage_pattern, unit_stride)
from .llvm_conv import CONV_TILES, CONV_TILES_16REGS, ConvTiles, default_conv_tiles, \
    schedule_conv2d
from .llvm_matmul import (MATMUL_TILES, MATMUL_TILES_16REGS, SKINNY_M, SKINNY_M_SYMBOLIC,
                          MatmulTiles, _skinny_dense, _skinny_matmul, _skinny_tile,
                          default_matmul_tiles, schedule_matmul, schedule_skinny_dense,
                          schedule_skinny_matmul)
from .llvm_reduce import (PARTS_MIN, SELECT_CHAINS, chunk_width, rfactor_chains,
                          schedule_reduction, schedule_row_group, select_chains)
from .recognize import (as_conv2d_stages, conv_form, gemm_form, is_conv_stage, is_gemm_stage,
                        padding_producer)
from .llvm_attention import schedule_attention

__all__ = ["CPU", "cpu_of", "apply", "small_m_condition", "schedule_injective",
           "schedule_reduction", "schedule_row_group", "schedule_matmul", "schedule_conv2d",
           "schedule_skinny_dense", "schedule_skinny_matmul", "select_chains", "rfactor_chains",
           "chunk_width", "MatmulTiles", "ConvTiles", "MATMUL_TILES", "MATMUL_TILES_16REGS",
           "CONV_TILES", "CONV_TILES_16REGS", "default_matmul_tiles", "default_conv_tiles",
           "SKINNY_M", "SKINNY_M_SYMBOLIC", "SELECT_CHAINS", "PARTS_MIN", "ANCHOR_SCHEDULES"]


#: Below this many elements an injective stage runs on one thread (launch cost).
_PARALLEL_MIN = 1 << 15
#: Side of the square blocks a transposing injective stage is tiled by (then lanes x lanes
#: tiles inside): 4096x1024 ran 1.2-1.4x faster with 64 or 128 than with lanes-square
#: blocks alone (AVX2, 1 and 2 threads).
TRANSPOSE_BLOCK = 64


# ---- injective -------------------------------------------------------------------------------
def _transposed_axis(s: Schedule, st: Stage, bodies: dict) -> "IterVar | None":
    """An outer axis that some multi-dimensional input is contiguous along (a transpose),
    when that input's last index does not move with the output's last axis."""
    axes = list(st.op.axis)
    last = axes[-1]
    for p, idx in effective_loads(s, st, bodies):
        if len(idx) < 2 or last.var in free_vars(idx[-1]):
            continue
        for a in axes[:-1]:
            if unit_stride(idx[-1], a.var) and (_ext(a) or 2) > 1:
                return a
    return None


def schedule_injective(s: Schedule, st: Stage, cpu: CPU, bodies: dict) -> None:
    """Parallel fused outer loops, the innermost axis split and its inner loop vectorized;
    a transposing read is tiled (lanes x lanes blocks) so that each cache line read is used
    whole.

    (Fusing the innermost axis with the others would make the flat index ``f // W, f % W``,
    which the vectorizer cannot widen unless W is a multiple of the lanes.)"""
    axes = list(st.op.axis)
    lanes = cpu.lanes(_out_dtype(st))
    total = _total(st)
    big = total is None or total >= _PARALLEL_MIN
    outer, last = axes[:-1], axes[-1]
    tr = _transposed_axis(s, st, bodies) if outer else None
    if tr is not None:
        others = [a for a in outer if a is not tr]
        te, le = _ext(tr), _ext(last)
        if (te is None or te >= TRANSPOSE_BLOCK) and (le is None or le >= TRANSPOSE_BLOCK):
            # TRANSPOSE_BLOCK-square blocks (a few KiB of each side, in L1) of lanes x lanes
            # tiles: every cache line read and written whole while the block is in cache
            bo, bi = st.split(tr, factor=TRANSPOSE_BLOCK)
            co, ci = st.split(last, factor=TRANSPOSE_BLOCK)
            ao, ai = st.split(bi, factor=lanes)
            lo, li = st.split(ci, factor=lanes)
            st.reorder(*others, bo, co, ao, lo, ai, li)
            par = others + [bo]
        else:
            ao, ai = _vector_split(st, tr, lanes)
            lo, li = _vector_split(st, last, lanes)
            st.reorder(*others, ao, lo, ai, li)
            par = others + [ao]
        st.vectorize(li)
        if big:
            st.parallel(_fuse(st, par))
        return
    lo, li = _vector_split(st, last, lanes)
    st.vectorize(li)
    if big:
        st.parallel(_fuse(st, outer) if outer else lo)

#: The constant kind -> anchor schedule mapping.
ANCHOR_SCHEDULES: "MappingProxyType[OpKind, Callable[..., None]]" = MappingProxyType({
    OpKind.MATMUL: schedule_matmul,
    OpKind.BATCH_MATMUL: schedule_matmul,
    OpKind.CONV2D: schedule_conv2d,
    OpKind.ATTENTION_OUT: schedule_attention,
})


# ---- hand-written GEMMs -----------------------------------------------------------------------
def schedule_gemm_form(s: Schedule, st: Stage, out: "Stage | None", cpu: CPU) -> set:
    """A hand-written matmul (``recognize.gemm_form``), its epilogue ``out`` fused: the
    schedule ``ops.matmul`` / ``ops.dense`` would get -- B's panels copied by a cache stage
    (laid out ``[k, j]`` when B is read transposed), or the streaming pass over W for a
    ``x @ W.T`` with a small M."""
    gemm = gemm_form(st.op)
    assert gemm is not None
    if not gemm.transpose_b:
        return schedule_matmul(s, st, out, cpu, panel_of=gemm.b)
    if _skinny_dense(st, cpu, transpose_b=True):
        return schedule_skinny_dense(s, st, out, cpu)
    return schedule_matmul(s, st, out, cpu, panel_of=gemm.b, transposed_panel=True)


# ---- hand-written convolutions ----------------------------------------------------------------
def schedule_conv_form(s: Schedule, st: Stage, out: "Stage | None", cpu: CPU) -> set:
    """A hand-written convolution (``recognize.conv_form``), its epilogue ``out`` fused:
    the schedule ``ops.conv2d`` gets.  The filter is copied by a cache stage laid out
    ``[c, ky, kx, o]`` (``ops.conv2d``'s PACK stage), an NCHW convolution accumulates with
    channels innermost (``Stage.transform_layout`` of the stage that computes it, the
    epilogue or a cache stage writing NCHW out), and an injective producer of the data (the
    padding) is materialized, as ``ops.conv2d``'s PAD stage is.  Depthwise: the grouped NCHW
    schedule, filters read in place."""
    form = conv_form(st.op)
    assert form is not None
    attrs = form.attrs()
    pad = padding_producer(s, form, st)
    if form.depthwise:
        return schedule_conv2d(s, st, out, cpu, attrs=attrs, pad=pad)
    anchor, out, pack = as_conv2d_stages(s, st, out, form)
    if form.layout == "NCHW":
        attrs["compute_layout"] = "NHWC"
    return schedule_conv2d(s, anchor, out, cpu, attrs=attrs, pad=pad, pack=pack) | {st}


# ---- the driver ------------------------------------------------------------------------------
def small_m_condition(s: Schedule, target: Target, bound: int = SKINNY_M) -> "Expr | None":
    """``M <= bound`` for each dense/matmul anchor of ``s`` whose M is symbolic and that
    the streaming schedule fits (``_skinny_dense`` / ``_skinny_matmul``), joined with
    ``and``; None when there is none.  Where it holds at run time, a schedule made by
    ``apply(..., small_m=rows)`` runs instead (``Schedule.specialize``)."""
    from tdsl.intrin import all as all_of
    cpu = cpu_of(target)
    conds, seen = [], set()
    for st in s.stages:
        if st.is_placeholder or stage_pattern(st) is not Pattern.ANCHOR \
                or stage_kind(st) is not OpKind.MATMUL:
            continue
        if not (_skinny_dense(st, cpu, symbolic=True) or _skinny_matmul(st, symbolic=True)):
            continue
        m = st.op.axis[0].dom.extent
        if str(m) not in seen:
            seen.add(str(m))
            conds.append(m <= bound)
    return all_of(*conds) if conds else None


def apply(s: Schedule, target: Target, small_m: int = 0) -> None:
    """The default schedule of every stage of ``s``; ``small_m`` > 0: dense/matmul anchors
    with a symbolic M get the small-M streaming schedule, ``small_m`` rows of x per pass
    (for a ``M <= bound`` branch: ``SKINNY_M_SYMBOLIC``)."""
    cpu = cpu_of(target)
    anchor_schedules = dict(ANCHOR_SCHEDULES)
    if small_m:
        anchor_schedules[OpKind.MATMUL] = functools.partial(schedule_matmul, small_m=small_m)
    bodies = inlined_bodies(s)
    done: set = set()
    for st in list(reversed(s.stages)):
        if st.is_placeholder or is_inlined(st) or st in done or st.attach_type is AttachType.SCOPE \
                or is_opaque(st.op):   # extern/scan stages have no loops to schedule
            continue
        pat = stage_pattern(st)
        if pat is Pattern.INJECTIVE:
            a = fusable_anchor(s, st, bodies)
            if a is not None and a not in done:
                done |= anchor_schedules[stage_kind(a)](s, a, st, cpu)
                continue
            # a hand-written GEMM's epilogue (bias, activation, residual) on its write-out,
            # as for ops.dense -- not a row group of the reduction
            g = fusable_anchor(s, st, bodies, is_anchor=is_gemm_stage)
            if g is not None and g not in done:
                done |= schedule_gemm_form(s, g, st, cpu)
                continue
            g = fusable_anchor(s, st, bodies, is_anchor=is_conv_stage)
            if g is not None and g not in done:
                done |= schedule_conv_form(s, g, st, cpu)
                continue
            g = row_group(s, st, bodies)
            if g is not None:
                schedule_row_group(s, g, cpu, bodies)
                done |= {st, *g.reductions, *g.temps}
                continue
            schedule_injective(s, st, cpu, bodies)
        elif pat is Pattern.ANCHOR and stage_kind(st) in anchor_schedules:
            done |= anchor_schedules[stage_kind(st)](s, st, None, cpu)
        elif is_gemm_stage(st):
            done |= schedule_gemm_form(s, st, None, cpu)
        elif is_conv_stage(st):
            done |= schedule_conv_form(s, st, None, cpu)
        else:
            schedule_reduction(s, st, cpu, bodies)
        done.add(st)
