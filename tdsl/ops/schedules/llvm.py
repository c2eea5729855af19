"""Default CPU schedules (target "llvm").

Every non-inlined stage gets one of five schedules, chosen from its pattern and kind:

* an injective output: fused outer loops in parallel, the innermost loop vectorized;
* an anchor (matmul, dense, batch_matmul, conv2d), with the elementwise stage that
  consumes it (its epilogue) when there is one: register tiles in a local stage, packed
  operand panels, the epilogue applied while the tile is written out; a matmul written by
  hand with ``td.compute`` (``recognize.py``) gets the same schedule;
* a row group (softmax, log_softmax, layernorm, rmsnorm, mean, argmax, ...): the output's
  rows in parallel, each row's reductions (and temporaries) computed just before it;
* a reduction (sum, max, pooling): vectorized along the contiguous axis -- lanes of
  partial results (rfactor) when the reduced axis is the contiguous one.

Tile sizes adapt to the vector width and register count of the target (16 float32 lanes and
32 registers with AVX-512; 8 lanes and 16 registers with AVX2).
"""
from __future__ import annotations

from tdsl.opaque import is_opaque
from tdsl.errors import TDSLError

import functools
from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable

from tdsl.dtype import DType
from tdsl.expr import Expr
from tdsl.lowering.inline import inlined_bodies
from tdsl.schedule import Schedule, Stage
from tdsl.schedule.rfactor import first_output as _first
from tdsl.schedule.stage import AttachType
from tdsl.target import Target, cpu_facts
from tdsl.tensor import ComputeOp, IterKind, IterVar, Tensor
from tdsl.visitor import free_vars

from .._util import const_value
from ..tags import OpKind, Pattern
from .recognize import gemm_form
from .llvm_attention import schedule_attention
from .graph import (RowGroup, effective_loads, fusable_anchor, innermost_use, is_inlined,
                    reduce_source_loads, row_group, stage_kind, stage_pattern, unit_stride,
                    uses_in_last_index)


@dataclass(frozen=True)
class CPU:
    """What the schedules need to know of the target CPU."""

    vector_bits: int
    threads: int

    def lanes(self, dtype: DType) -> int:
        return max(1, self.vector_bits // max(8, dtype.bits))


@functools.lru_cache(maxsize=None)
def cpu_of(target: Target) -> CPU:
    """Vector width and thread count of ``target`` (``tdsl.target.cpu_facts``: the host's or
    ``-mcpu``/``-mattr``'s features; 256-bit vectors when LLVM is not installed)."""
    try:
        facts = cpu_facts(target)
    except (ImportError, RuntimeError, TDSLError):   # no LLVM: schedule for 256-bit vectors
        from tdsl.runtime.threads import default_num_threads
        return CPU(256, max(1, target.num_threads or default_num_threads()))
    return CPU(facts.vector_bits, facts.cores)


# ---- helpers ---------------------------------------------------------------------------------
def _ext(iv: IterVar) -> "int | None":
    """The constant extent of a root axis (None if symbolic or a derived loop)."""
    return None if iv.dom is None else const_value(iv.dom.extent)


def _fuse(st: Stage, ivs: list) -> IterVar:
    return ivs[0] if len(ivs) == 1 else st.fuse(*ivs)


def _out_dtype(st: Stage) -> DType:
    return st.op.outputs[0].dtype


def _vector_split(st: Stage, iv: IterVar, lanes: int, extent: "int | None" = None
                  ) -> tuple[IterVar, IterVar]:
    """Split ``iv`` so that its inner loop has at most ``lanes`` iterations (a constant)."""
    e = _ext(iv) if extent is None else extent
    factor = lanes if e is None or e >= lanes else _pow2_floor(e) if e > 1 else 1
    return st.split(iv, factor=factor)


def _pow2_floor(x: int) -> int:
    p = 1
    while p * 2 <= x:
        p *= 2
    return p


def _total(st: Stage) -> "int | None":
    tot = 1
    for iv in st.op.axis:
        e = _ext(iv)
        if e is None:
            return None
        tot *= e
    return tot


#: Below this many elements an injective stage runs on one thread (launch cost).
_PARALLEL_MIN = 1 << 15
#: Side of the square blocks a transposing injective stage is tiled by (then lanes x lanes
#: tiles inside): 4096x1024 ran 1.2-1.4x faster with 64 or 128 than with lanes-square
#: blocks alone (AVX2, 1 and 2 threads).
TRANSPOSE_BLOCK = 64


# ---- injective -----------------------------------------------------------------------------------
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


# ---- reductions ------------------------------------------------------------------------------------
def schedule_reduction(s: Schedule, st: Stage, cpu: CPU, bodies: dict,
                       attach: "tuple[Stage, IterVar] | None" = None, chunk: bool = False) -> None:
    """A reduction at root (``attach`` None) or computed inside ``attach`` = (stage, loop),
    where it computes one output (``chunk`` False) or a vector of outputs along its last
    axis (``chunk`` True).

    * reducing along the contiguous axis of its input: ``lanes`` partial results (rfactor),
      vectorized, then combined;
    * else, when the output's last axis is the contiguous one: reduction loops outside, a
      vector of outputs inside (4 vectors wide at root: whole cache lines per row);
    * else plain loops, outer ones in parallel.
    """
    split = _split_across_threads(s, st, cpu) if _total(st) == 1 else None
    if split is not None:
        bodies = split
    op = st.op
    lanes = cpu.lanes(_out_dtype(st))
    # the streamed operands: loads that move with a reduction variable
    rvars = {iv.var for iv in op.reduce_axis}
    loads = [(p, idx) for p, idx in reduce_source_loads(s, st, bodies)
             if any(v in rvars for e in idx for v in free_vars(e))]
    spatial = list(op.axis)
    k_last = op.reduce_axis[-1]
    j_last = spatial[-1] if spatial and (_ext(spatial[-1]) or 2) > 1 else None
    kext = _ext(k_last)
    inner_reduce = (innermost_use(loads, k_last.var)
                    and (j_last is None or not uses_in_last_index(loads, j_last.var))
                    and (kext is None or kext >= lanes))
    if inner_reduce:
        chains = select_chains(op, kext, lanes)
        if chains > 1:
            rf, merge = rfactor_chains(s, st, k_last, lanes, chains, len(spatial))
        else:
            ko, ki = st.split(k_last, factor=lanes)
            rf_out = s.rfactor(op.outputs[0], ki, factor_axis=len(spatial))
            rf, merge = s[_first(rf_out)], None
        if attach is not None:
            st.compute_at(*attach)
            for t in (merge, rf):
                if t is not None:
                    t.compute_at(*attach)
        else:
            root = _fuse(st, list(st.op.axis))
            if _total(st) is None or _total(st) > 1:
                st.parallel(root)
            for t in (merge, rf):
                if t is not None:
                    t.compute_at(st, root)
        if merge is not None:
            lane = merge.op.axis[-1]
            merge.reorder(*([iv for iv in merge.leaf_iter_vars if iv is not lane] + [lane]))
            merge.vectorize(lane)
            chain, lane = rf.op.axis[-2:]
            rf.reorder(*([iv for iv in rf.leaf_iter_vars if iv not in (chain, lane)]
                         + [chain, lane]))
            rf.unroll(chain)
        else:
            lane = rf.op.axis[-1]
            rf.reorder(*([iv for iv in rf.leaf_iter_vars if iv is not lane] + [lane]))
        rf.vectorize(lane)
        return
    if j_last is not None and uses_in_last_index(loads, j_last.var) and (attach is None or chunk):
        jext = _ext(j_last)
        width = lanes if attach is not None or (jext is not None and jext < 8 * lanes) else 4 * lanes
        jo, ji = _vector_split(st, j_last, width)
        outer = [iv for iv in spatial if iv is not j_last]
        if attach is not None and select_chains(op, None, lanes) > 1:
            # a chunk of several vectors of outputs (``chunk_width``): the reduction loops
            # outside them, so that they are independent chains reading whole lines
            st.reorder(*(outer + list(op.reduce_axis) + [jo, ji]))
            st.unroll(jo)
        else:
            st.reorder(*(outer + [jo] + list(op.reduce_axis) + [ji]))
        st.vectorize(ji)
        if attach is not None:
            st.compute_at(*attach)
        else:
            st.parallel(_fuse(st, outer + [jo]))
        return
    if attach is not None:
        st.compute_at(*attach)
    elif spatial:
        st.parallel(_fuse(st, spatial))


#: Independent vectors of partial results a select-based reduction (argmax: compare,
#: then select the value and the index) keeps per row: each update waits for the last
#: one's compare and select (~6 cycles), so one vector of lanes runs at the latency of the
#: chain; four run at the throughput of the loop (row argmax 4096x1024 float32, AVX2, one
#: thread: 1.6 ms with one chain, 0.74 ms with four, both with the full combiner).
SELECT_CHAINS = 4


def select_chains(op: ComputeOp, kext: "int | None", lanes: int) -> int:
    """How many vectors of ``lanes`` partial results (chains) to keep for reduction ``op``
    along a reduced axis of ``kext`` (None: symbolic): ``SELECT_CHAINS`` for a tuple
    reduction (its combiner selects; a sum or max stays one chain: its one instruction
    per update and the load keep pace with memory), fewer when the axis is short."""
    if len(getattr(op, "body", ())) < 2:
        return 1
    chains = SELECT_CHAINS
    while chains > 1 and kext is not None and kext < chains * lanes:
        chains //= 2
    return chains


def rfactor_chains(s: Schedule, st: Stage, k: IterVar, lanes: int, chains: int,
                    at: int) -> tuple[Stage, Stage]:
    """``k`` split into ``(ko, chain, lane)``; partial results ``rf[..., chain, lane]``
    over ``ko`` (independent chains), merged to ``merge[..., lane]`` over ``chain`` (vector
    combines), then ``st`` combines the lanes.  Returns ``(rf, merge)``.

    The chains see their elements in increasing index order, and the merges keep the
    combiner's own tie rules, so the result is the sequential one for any combiner that
    is commutative and associative (``comm_reducer``'s contract)."""
    ko, ki = st.split(k, factor=chains * lanes)
    kc, kl = st.split(ki, factor=lanes)
    merge = s[_first(s.rfactor(st.op.outputs[0], kl, factor_axis=at))]
    # merge reduces (ko, chain) -- rfactor keeps the order of the remaining loops
    kc_m = [iv for iv in merge.leaf_iter_vars if iv.kind is IterKind.REDUCE][-1]
    rf = s[_first(s.rfactor(merge.op.outputs[0], kc_m, factor_axis=at))]
    return rf, merge


#: A tuple reduction to one output over at least this many points is split into parts
#: reduced in parallel (``_split_across_threads``).
PARTS_MIN = 1 << 16


def _split_across_threads(s: Schedule, st: Stage, cpu: CPU) -> "dict | None":
    """A tuple reduction with one output (``argmax(axis=None)``) and many points: its
    outermost reduction axis in ``4 x threads`` parts, each reduced (chains of lanes) in
    parallel, then the parts combined -- else one thread does it all.  Returns the
    schedule's inlined bodies after the split (the parts are scheduled here), or None
    when it did not split ``st``."""
    op = st.op
    if cpu.threads < 2 or select_chains(op, None, cpu.lanes(_out_dtype(st))) < 2:
        return None
    k0 = op.reduce_axis[0]
    points = 1
    for iv in op.reduce_axis:
        e = _ext(iv)
        points = None if e is None or points is None else points * e
    e0 = _ext(k0)
    parts = 4 * cpu.threads
    if (points is not None and points < PARTS_MIN) or (e0 is not None and e0 < 2 * parts):
        return None
    po, _ = st.split(k0, nparts=parts)
    part = s[_first(s.rfactor(op.outputs[0], po, factor_axis=0))]
    bodies = inlined_bodies(s)
    schedule_reduction(s, part, cpu, bodies)
    return bodies


def chunk_width(s: Schedule, g: RowGroup, cpu: CPU, bodies: dict) -> int:
    """Outputs per iteration of a row group whose reductions are indexed by every output
    axis (a vector of outputs is a "row"): ``select_chains`` vectors for a tuple reduction
    that streams along the outputs' contiguous axis (a column argmax: 4 columns per
    chunk read 16 bytes of each 64-byte line and ran one dependent chain: 4.5x slower);
    1 otherwise."""
    width = 1
    for st in g.reductions:
        spatial = list(st.op.axis)
        if not spatial:
            continue
        rvars = {iv.var for iv in st.op.reduce_axis}
        loads = [(p, idx) for p, idx in reduce_source_loads(s, st, bodies)
                 if any(v in rvars for e in idx for v in free_vars(e))]
        if uses_in_last_index(loads, spatial[-1].var):
            lanes = cpu.lanes(_out_dtype(st))
            width = max(width, select_chains(st.op, None, lanes) * lanes)
    return width


# ---- row groups ----------------------------------------------------------------------------------------
def schedule_row_group(s: Schedule, g: RowGroup, cpu: CPU, bodies: dict) -> None:
    """Rows of the output in parallel; each row's reductions (and temporaries) computed in
    the row's iteration, just before the row is written.  When the reductions are indexed by
    every output axis (mean, argmax, pooling + scale), a vector of outputs is a "row"."""
    y = g.out
    axes = list(y.op.axis)
    lanes = cpu.lanes(_out_dtype(y))
    rows = [axes[p] for p in g.row_axes]
    inner = [iv for iv in axes if iv not in rows]
    if not inner:
        outer, last = axes[:-1], axes[-1]
        lo, li = _vector_split(y, last, max(lanes, chunk_width(s, g, cpu, bodies)))
        y.vectorize(li)
        if outer:
            y.parallel(_fuse(y, outer))
        else:
            y.parallel(lo)
        at = lo
    else:
        y.reorder(*(rows + inner))
        at = _fuse(y, rows)
        y.parallel(at)
        if inner[-1] is axes[-1]:
            lo, li = _vector_split(y, inner[-1], lanes)
            y.vectorize(li)
    members = g.reductions + g.temps
    order = [st for st in reversed(s.stages) if st in members]
    for st in g.temps:
        st.compute_root()
    bodies = inlined_bodies(s)       # the temporaries are loads now, no longer inlined
    for st in order:
        if st in g.temps:
            st.compute_at(y, at)
            t_axes = list(st.op.axis)
            if len(t_axes) == len(axes) and inner and inner[-1] is axes[-1]:
                lo, li = _vector_split(st, t_axes[-1], cpu.lanes(_out_dtype(st)))
                st.vectorize(li)
        else:
            schedule_reduction(s, st, cpu, bodies, attach=(y, at), chunk=not inner)


# ---- matmul -----------------------------------------------------------------------------------------------
def _producer_of_kind(s: Schedule, st: Stage, kind: OpKind) -> "Stage | None":
    for t in st.op.input_tensors:
        p = s[t]
        if stage_kind(p) is kind and not p.is_output:
            return p
    return None


@dataclass(frozen=True)
class MatmulTiles:
    """Register tile ``rows x (vectors * lanes)``; the reduction loop split by ``k_split``
    (its inner loop unrolled when ``unroll_k``).  6 x 64 float32 with AVX-512: 24 zmm
    accumulators, 4 panel loads and 6 broadcasts per k (measured against 8x32, 4x64, 12x32,
    14x32 on the benchmark sizes; 12 and 14 rows spill)."""

    rows: int = 6
    vectors: int = 4
    k_split: int = 4
    unroll_k: bool = False


MATMUL_TILES = MatmulTiles()
#: With 16 vector registers (AVX2, SSE): 6 x 2 vectors, 12 accumulators.  The 24 of the
#: AVX-512 tile spill there: 512^3 and the batch_matmul benchmark ran 2.2-2.4x slower with
#: it than with this one (AMD EPYC, AVX2, one thread).
MATMUL_TILES_16REGS = MatmulTiles(rows=6, vectors=2)


def default_matmul_tiles(cpu: CPU) -> MatmulTiles:
    return MATMUL_TILES if cpu.vector_bits >= 512 else MATMUL_TILES_16REGS


#: Up to this many rows (a constant M), ``x @ W.T`` is a streaming pass over W (see
#: ``schedule_skinny_dense``) rather than the register-tiled, B-packing micro-kernel.
SKINNY_M = 16
#: A symbolic M gets two streaming nests, chosen at run time (``ops.schedule`` specializes
#: the schedule): ``(bound, rows)``: where ``M <= bound``, ``rows`` rows of x per pass over a
#: block of W (a last, partial block of rows guarded).  One row per pass keeps M = 1..3 free
#: of guards (the guards cost M = 1 3.6x: the accumulators no longer stay in registers).
SKINNY_M_SYMBOLIC = ((3, 1), (SKINNY_M, 4))


def _skinny_dense(anchor: Stage, cpu: CPU, symbolic: bool = False,
                  transpose_b: "bool | None" = None) -> bool:
    """A 2-D ``a @ b.T`` (``dense``) with a small constant M and K long enough for vectors:
    every element of ``b`` is used M times only, so the job is one pass over ``b``.
    ``symbolic``: M is symbolic and known (by a run-time test) to be at most ``SKINNY_M``;
    ``transpose_b``: the form when known otherwise (a hand-written dense has no attrs)."""
    op = anchor.op
    if transpose_b is None:
        transpose_b = bool(op.attrs.get("transpose_b")) and not op.attrs.get("transpose_a")
    if len(op.axis) != 2 or len(op.reduce_axis) != 1 or not transpose_b:
        return False
    M = _ext(op.axis[0])
    kext = _ext(op.reduce_axis[0])
    lanes = cpu.lanes(_out_dtype(anchor))
    small = M is None if symbolic else (M is not None and M <= SKINNY_M)
    return small and (kext is None or kext >= 2 * lanes)


def _skinny_tile(M: int, budget: int) -> tuple[int, int, int]:
    """(rows of x, rows of W, vectors along K) of the register tile: at most ``budget``
    accumulators, the most FMAs per load, little padding of M (rows of x per pass:
    ``ceil(M / passes)``; a tail pass costs guards in the unrolled body)."""
    best: "tuple[float, int, int, int] | None" = None
    for passes in range(1, M + 1):
        mi = -(-M // passes)
        for rows in (1, 2, 4):
            for vv in (1, 2):
                if mi * rows * vv > budget:
                    continue
                score = mi * rows / (mi + rows) * (M / (mi * passes)) ** 4 + 0.01 * (vv + mi)
                if best is None or score > best[0]:
                    best = (score, mi, rows, vv)
    assert best is not None
    return best[1], best[2], best[3]


def schedule_skinny_dense(s: Schedule, anchor: Stage, out: "Stage | None", cpu: CPU,
                          symbolic_rows: int = 1) -> set:
    """``x (M, K) @ W (N, K).T`` for small M: W's rows streamed once, straight from W (the
    PACK stage stays inlined).  Vector lanes over K (rfactor): each task of ``bj`` output
    columns keeps ``M x rows x vv`` vector accumulators in registers while it reads ``rows``
    rows of W at once, then sums the lanes; tasks (column blocks) in parallel; the epilogue
    (bias, activation) applied on write-out, vectorized along N.  A symbolic M (known to
    be small by a run-time test): ``symbolic_rows`` rows of x per pass, the last block guarded."""
    dt = _out_dtype(anchor)
    lanes = cpu.lanes(dt)
    pack = _producer_of_kind(s, anchor, OpKind.PACK)
    if pack is not None:
        pack.compute_inline()
    M = _ext(anchor.op.axis[0])
    N = _ext(anchor.op.axis[1])
    # a symbolic M (at most SKINNY_M, tested at run time): one row of x per pass over a
    # block of W's rows (the block stays in L1/L2 for the next row)
    mi, rows, vv = _skinny_tile(M or symbolic_rows, 24 if cpu.vector_bits >= 512 else 12)
    bj = 16 if N is None or N >= 16 * 4 * cpu.threads else max(rows, 4)
    if M is None:   # rows of x one block at a time: a task's W rows stay in cache for the next
        bj = max(rows, 8)
    (k,) = anchor.op.reduce_axis
    ko, ki = anchor.split(k, factor=vv * lanes)
    rf_t = s.rfactor(anchor.op.outputs[0], ki, factor_axis=2)
    rf = s[_first(rf_t)]
    rf.set_scope("local")
    write = out if out is not None else anchor
    wi, wj = write.op.axis[-2], write.op.axis[-1]
    jo, ji = write.split(wj, factor=bj)
    if M is None:
        # a symbolic M: the accumulators of ``mi`` rows at a time, a constant-size local
        # buffer (registers), not an M-sized one in memory; a last, partial block is guarded
        wio, wii = write.split(wi, factor=mi)
        write.reorder(jo, wio, wii, ji)
        at = wio
    else:
        write.reorder(jo, wi, ji)
        at = jo
    write.parallel(jo)
    if out is not None:
        jvo, jvi = _vector_split(write, ji, lanes, extent=bj)
        write.vectorize(jvi)
        anchor.set_scope("local")
        anchor.compute_at(write, at)
    rf.compute_at(write, at)
    ri, rj, rl = rf.op.axis
    (rko,) = rf.op.reduce_axis
    rjo, rji = rf.split(rj, factor=rows)
    rio, rii = rf.split(ri, factor=mi)
    rf.reorder(rjo, rio, rko, rii, rji, rl)
    rf.unroll(rii)
    rf.unroll(rji)
    rf.vectorize(rl)
    return {st for st in (anchor, out, pack, rf) if st is not None}


def _skinny_matmul(anchor: Stage, symbolic: bool = False) -> bool:
    """A 2-D ``a @ b`` (b not transposed) with a small constant M: one pass over ``b``'s rows.
    ``symbolic``: M is symbolic and known (by a run-time test) to be at most ``SKINNY_M``."""
    op = anchor.op
    if len(op.axis) != 2 or len(op.reduce_axis) != 1 or op.attrs.get("transpose_b") \
            or op.attrs.get("transpose_a"):
        return False
    M = _ext(op.axis[0])
    return M is None if symbolic else (M is not None and M <= SKINNY_M)


def schedule_skinny_matmul(s: Schedule, anchor: Stage, out: "Stage | None", cpu: CPU) -> set:
    """``a (M, K) @ b (K, N)`` for small M: ``b`` read in place (no packing), each row of it
    once, in whole pages: a task owns a block of ``bj`` columns (M x bj accumulators, at
    most 16 KiB, in L1), and for each k adds ``a[:, k] x b[k, block]``, vector lanes along N;
    tasks in parallel."""
    lanes = cpu.lanes(_out_dtype(anchor))
    pack = _producer_of_kind(s, anchor, OpKind.PACK)
    if pack is not None:
        pack.compute_inline()
    M = _ext(anchor.op.axis[0])
    if out is None:
        cc = s.cache_write(anchor.op.outputs[0], "local")
        comp, write = s[cc], anchor
    else:
        comp, write = anchor, out
        comp.set_scope("local")
    wi, wj = write.op.axis[-2], write.op.axis[-1]
    N = _ext(wj)
    rows_bound = SKINNY_M if M is None else M     # symbolic M: at most SKINNY_M (run-time test)
    bj = max(lanes, _pow2_floor(4096 // (rows_bound * max(1, _out_dtype(anchor).bits // 32))))
    bj = min(bj, 1024)
    while bj > lanes and N is not None and N < bj * 2 * cpu.threads:
        bj //= 2
    jo, ji = write.split(wj, factor=bj)
    write.reorder(jo, wi, ji)
    write.parallel(jo)
    jvo, jvi = write.split(ji, factor=lanes)
    write.vectorize(jvi)
    comp.compute_at(write, jo)
    ci, cj = comp.op.axis
    (k,) = comp.op.reduce_axis
    cjo, cji = comp.split(cj, factor=lanes)
    kext = _ext(k)
    kf = 4
    while kf > 1 and kext is not None and kext % kf:
        kf //= 2
    if kf > 1:        # kf rows of b per pass over the accumulators
        ko, ki = comp.split(k, factor=kf)
        comp.reorder(ko, cjo, ci, ki, cji)
        comp.unroll(ki)
    else:
        comp.reorder(k, cjo, ci, cji)
    if M is not None and M <= 8:
        comp.unroll(ci)
    comp.vectorize(cji)
    return {st for st in (anchor, out, pack, comp) if st is not None}


def schedule_matmul(s: Schedule, anchor: Stage, out: "Stage | None", cpu: CPU,
                    tiles: "MatmulTiles | None" = None, small_m: int = 0,
                    panel_of: "Tensor | None" = None) -> set:
    """Register tile ``mb x bn`` (rows unrolled, columns vectorized) accumulated in a local
    stage over the whole K; the B panel (K x bn) packed once per column tile (or row chunk);
    column tiles (and row chunks) in parallel; the epilogue applied on write-out.

    A ``dense`` / ``matmul`` with a small constant M goes to ``schedule_skinny_dense`` /
    ``schedule_skinny_matmul`` instead, and so does one with a symbolic M when ``small_m``
    (the rows of x per pass: the schedule of a ``M <= bound`` branch, ``SKINNY_M_SYMBOLIC``).

    ``panel_of``: a hand-written matmul has no PACK stage; B's panels are then copied by a
    cache stage of this tensor (B, read as ``B[k, j]``: the copy keeps the packed layout)."""
    if tiles is None and _skinny_dense(anchor, cpu, bool(small_m)):
        return schedule_skinny_dense(s, anchor, out, cpu, max(1, small_m))
    if tiles is None and _skinny_matmul(anchor, bool(small_m)):
        return schedule_skinny_matmul(s, anchor, out, cpu)
    tiles = tiles or default_matmul_tiles(cpu)
    dt = _out_dtype(anchor)
    lanes = cpu.lanes(dt)
    pack = _producer_of_kind(s, anchor, OpKind.PACK)
    if pack is None and panel_of is not None:
        pack = s[s.cache_read(panel_of, "global", [anchor.op.outputs[0]])]
    if out is None:
        cc = s.cache_write(anchor.op.outputs[0], "local")
        comp, write = s[cc], anchor
    else:
        comp, write = anchor, out
        comp.set_scope("local")
    axes = list(write.op.axis)
    batch = axes[:-2]
    i, j = axes[-2], axes[-1]
    M, N = _ext(i), _ext(j)
    bn = tiles.vectors * lanes
    while bn > lanes and N is not None and N < bn:
        bn //= 2
    mb = tiles.rows
    jo, ji = write.split(j, factor=bn)
    io, ii = write.split(i, factor=mb)
    nb = 1
    for b in batch:
        e = _ext(b)
        nb = nb * e if (nb is not None and e is not None) else None
    col_tasks = None if (N is None or nb is None) else nb * -(-N // bn)
    row_tiles = None if M is None else -(-M // mb)
    want = 4 * cpu.threads
    chunk = None
    if col_tasks is None or col_tasks < want:
        if row_tiles is None:
            chunk = 16                                       # 128 rows per task
        elif row_tiles > 1:
            per = max(4, -(-row_tiles * (col_tasks or 1) // want))
            chunk = per if per < row_tiles else None
    if chunk is not None:
        ic, io = write.split(io, factor=chunk)
        write.reorder(*(batch + [jo, ic, io, ii, ji]))
        par = _fuse(write, batch + [jo, ic])
    else:
        write.reorder(*(batch + [jo, io, ii, ji]))
        par = _fuse(write, batch + [jo])
    write.parallel(par)
    write.vectorize(ji)
    comp.compute_at(write, io)
    c_axes = list(comp.op.axis)
    xc, yc = c_axes[-2], c_axes[-1]
    (k,) = comp.op.reduce_axis
    xo, xi = comp.split(xc, factor=mb)
    yo, yi = comp.split(yc, factor=bn)
    kext = _ext(k)
    kf = tiles.k_split
    while kf > 1 and kext is not None and kext % kf:
        kf //= 2
    if kf > 1:
        ko, ki = comp.split(k, factor=kf)
        comp.reorder(*(c_axes[:-2] + [xo, yo, ko, ki, xi, yi]))
        if tiles.unroll_k:
            comp.unroll(ki)
    else:
        comp.reorder(*(c_axes[:-2] + [xo, yo, k, xi, yi]))
    comp.unroll(xi)
    comp.vectorize(yi)
    if pack is not None:
        pack.compute_root()
        pack.compute_at(write, par)
        p_last = pack.op.axis[-1]
        po, pi = pack.split(p_last, factor=bn)
        pack.vectorize(pi)
    return {st for st in (anchor, out, pack) if st is not None}


# ---- conv2d -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ConvTiles:
    """Register tile: ``width`` output columns (unrolled) x ``vectors * lanes`` output channels
    (vectorized); output rows in chunks of ``rows`` per parallel task."""

    width: int = 8
    vectors: int = 2
    rows: int = 8


CONV_TILES = ConvTiles()
#: With 16 vector registers: 4 columns x 2 vectors (8 accumulators); 8 x 2 spills there
#: (conv2d 3x3 64->64 at 56x56 ran 2.4x slower with it on AVX2).
CONV_TILES_16REGS = ConvTiles(width=4, vectors=2, rows=8)


def default_conv_tiles(cpu: CPU) -> ConvTiles:
    return CONV_TILES if cpu.vector_bits >= 512 else CONV_TILES_16REGS

_ROLES = {"NCHW": (0, 1, 2, 3), "NHWC": (0, 3, 1, 2)}   # positions of (n, c, h, w)


def _anchor_perm(s: Schedule, anchor: Stage, out: Stage) -> list[int]:
    """perm[d]: the position of ``out``'s axis that anchor axis d is read at."""
    from .graph import permuted_access
    for p, idx in effective_loads(s, out):
        if p is anchor:
            pos = permuted_access(out, idx)
            if pos is not None:
                return pos
    return list(range(len(anchor.op.axis)))


def schedule_conv2d(s: Schedule, anchor: Stage, out: "Stage | None", cpu: CPU,
                    tiles: "ConvTiles | None" = None) -> set:
    """groups == 1: output channels vectorized in a local ``width x channels`` tile (the
    anchor computes with channels innermost), the filter panel packed per parallel task,
    the padded input materialized once.  Grouped / depthwise: the contiguous output axis
    vectorized, filters broadcast."""
    tiles = tiles or default_conv_tiles(cpu)
    attrs = anchor.op.attrs
    groups = attrs.get("groups", 1)
    comp_layout = attrs.get("compute_layout", attrs.get("layout", "NCHW"))
    dt = _out_dtype(anchor)
    lanes = cpu.lanes(dt)
    pad = _producer_of_kind(s, anchor, OpKind.PAD)
    pack = _producer_of_kind(s, anchor, OpKind.PACK)
    perm = _anchor_perm(s, anchor, out) if out is not None else [0, 1, 2, 3]
    if out is None:
        cc = s.cache_write(anchor.op.outputs[0], "local")
        comp, write = s[cc], anchor
    else:
        comp, write = anchor, out
        comp.set_scope("local")
    roles = _ROLES[comp_layout]
    c_axes = list(comp.op.axis)
    cn, cco, coh, cow = (c_axes[r] for r in roles)
    w_axes = list(write.op.axis)
    n, co, oh, ow = (w_axes[perm[r]] for r in roles)
    red = list(comp.op.reduce_axis)
    OH, CO = _ext(oh), _ext(co)
    channels_last = w_axes[-1] is co
    if groups == 1 and comp_layout == "NHWC":
        bco = tiles.vectors * lanes
        while bco > lanes and CO is not None and CO < bco:
            bco //= 2
        bw = tiles.width
        co_o, co_i = write.split(co, factor=bco)
        ow_o, ow_i = write.split(ow, factor=bw)
        rows = tiles.rows if OH is None or OH > tiles.rows else OH
        oh_o, oh_i = write.split(oh, factor=rows)
        inner = [ow_i, co_i] if channels_last else [co_i, ow_i]
        write.reorder(n, co_o, oh_o, oh_i, ow_o, *inner)
        write.vectorize(inner[-1])
        par = write.fuse(n, co_o, oh_o)
        write.parallel(par)
        comp.compute_at(write, ow_o)
        cco_o, cco_i = comp.split(cco, factor=bco)
        cow_o, cow_i = comp.split(cow, factor=bw)
        comp.reorder(cn, coh, cow_o, cco_o, *red, cow_i, cco_i)
        comp.unroll(cow_i)
        comp.vectorize(cco_i)
        if pack is not None:
            pack.compute_root()
            pack.compute_at(write, par)
            po, pi = pack.split(pack.op.axis[-1], factor=bco)
            pack.vectorize(pi)
    else:
        # one lane per output column (NCHW) or channel (NHWC); filters broadcast
        vec_w, vec_c = (cow, cco) if comp_layout == "NCHW" else (cco, cow)
        outer_w = [iv for iv in w_axes if iv is not w_axes[-1]]
        lo, li = _vector_split(write, w_axes[-1], lanes)
        write.reorder(*outer_w, lo, li)
        write.vectorize(li)
        write.parallel(_fuse(write, outer_w[:3]) if len(outer_w) >= 3 else _fuse(write, outer_w))
        comp.compute_at(write, lo)
        last = c_axes[-1]
        clo, cli = _vector_split(comp, last, lanes)
        comp.reorder(*[iv for iv in c_axes if iv is not last], clo, *red, cli)
        comp.vectorize(cli)
        if pack is not None:
            pack = None   # stays inlined: filters are read directly
    if pad is not None:
        pad.compute_root()
        p_axes = list(pad.op.axis)
        po, pi = _vector_split(pad, p_axes[-1], lanes)
        pad.vectorize(pi)
        pad.parallel(_fuse(pad, p_axes[:-1]))
    return {st for st in (anchor, out, pack, pad) if st is not None}


#: The constant kind -> anchor schedule mapping.
ANCHOR_SCHEDULES: "MappingProxyType[OpKind, Callable[..., None]]" = MappingProxyType({
    OpKind.MATMUL: schedule_matmul,
    OpKind.BATCH_MATMUL: schedule_matmul,
    OpKind.CONV2D: schedule_conv2d,
    OpKind.ATTENTION_OUT: schedule_attention,
})


# ---- the driver ----------------------------------------------------------------------------------------------
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
            g = row_group(s, st, bodies)
            if g is not None:
                schedule_row_group(s, g, cpu, bodies)
                done |= {st, *g.reductions, *g.temps}
                continue
            schedule_injective(s, st, cpu, bodies)
        elif pat is Pattern.ANCHOR and stage_kind(st) in anchor_schedules:
            done |= anchor_schedules[stage_kind(st)](s, st, None, cpu)
        elif (gemm := gemm_form(st.op)) is not None and not gemm.transpose_b:
            done |= schedule_matmul(s, st, None, cpu, panel_of=gemm.b)
        elif gemm is not None and _skinny_dense(st, cpu, transpose_b=True):
            done |= schedule_skinny_dense(s, st, None, cpu)
        else:
            schedule_reduction(s, st, cpu, bodies)
        done.add(st)
