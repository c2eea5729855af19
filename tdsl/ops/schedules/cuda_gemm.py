"""Default CUDA schedule of the matmul family (matmul, dense, batch_matmul): 2-level tiles.

Per block a ``BM x BN`` output tile (128 x 128 where the problem is that large, smaller
tiles for small problems so the grid still fills the GPU); 32 x 8 threads (a warp is one
row of threads), each computing ``BM/8`` consecutive rows by ``BN/32`` consecutive
columns of outputs (16 x 4 at full size) in registers.  Per ``BK`` = 8 slice of k, the
block fetches an A tile (``BM x BK``) and a B tile (``BK x BN``) cooperatively into shared
memory, double buffered (the next slice is fetched before the current one is used: one
barrier per slice), with consecutive lanes on consecutive elements of the axis the global
array is contiguous along: float4 rows of A and of B (vector accesses where the analyzer
proves the alignment, the scalar loop for tails and misaligned arrays), down the columns
of ``dense``'s B tile (W is (N, K): a W row is a column of the tile, whose rows are then
padded so those stores hit distinct banks).  Each k step copies the thread's A column (one
word per warp: a broadcast) and B row (consecutive 16-byte chunks across the warp: no bank
conflict) into registers and does ``(BM/8)*(BN/32)`` FMAs from them; the elementwise
epilogue (bias, activation) runs on the accumulators before the one (float4) store per 4
outputs, a warp storing whole rows of the block tile (coalesced).

At sizes the tiles don't divide, the fetches zero-fill and only the final store is
guarded (tdsl/lowering/padding.py).  A grid of fewer than ``SPLIT_BELOW`` blocks (small
M x N, e.g. batch-16 inference) is split along k (``split_k``): partial products in one
kernel, their in-order sum and the epilogue in a second.

The B operand is read through the declaration's PACK stage (``b_pack[k, j]``, columns
innermost): that stage becomes the shared B tile, so ``dense``'s transposed weight is
re-laid out by the fetch.  A hand-written matmul (``recognize.gemm_form``) gets a cache
stage of B in that role, laid out the same.
"""
from __future__ import annotations

from typing import Optional

from tdsl.schedule import Schedule, Stage
from tdsl.tensor import thread_axis

from ..tags import OpKind
from ..tags import Pattern
from .graph import fusable_anchor, stage_kind, stage_pattern
from .recognize import gemm_form, is_gemm_stage

#: Threads per block along the output's columns (a warp: one row of threads) and rows.
THREADS_X, THREADS_Y = 32, 8
#: Outputs per thread along the columns and the rows at the full 128 x 128 block tile.
THREAD_COLS, THREAD_ROWS = 4, 16
#: Depth of a shared-memory k slice.
BK = 8
#: k steps per unrolled group of a slice (see ``_tile``).
UNROLL_K = 2
#: Resident blocks per SM the register budget is planned for (``__launch_bounds__``).
MIN_BLOCKS = 2
#: Blocks a launch should have to fill the GPU (an H100 has 132 SMs), and the grid below
#: which split-K runs: under half of them, most SMs would idle through the whole k loop.
FILL_BLOCKS = 128
SPLIT_BELOW = FILL_BLOCKS // 2
#: The least depth of one k slice: its partial costs one more global store and load per
#: output, small next to 256+ FMAs (and 32 double-buffered BK slices to pipeline).
MIN_SLICE_K = 256


def _const(e: object) -> Optional[int]:
    v = getattr(e, "value", None)
    return int(v) if isinstance(v, (int,)) or (v is not None and float(v).is_integer()) else None


def _block_tile(extent: Optional[int]) -> int:
    """The block tile along an output dimension of ``extent``: 128, or 64 or 32 for small
    sizes (the grid still fills the GPU); symbolic sizes get the full tile."""
    if extent is None:
        return THREAD_ROWS * THREADS_Y
    for t in (128, 64):
        if extent >= 2 * t:
            return t
    return 32


def _pack_of(s: Schedule, st: Stage) -> "Stage | None":
    """The PACK stage ``st`` reads (inlined by the default fusion, or not)."""
    inputs = list(st.op.input_tensors)
    for p in s.stages:
        if not p.is_placeholder and stage_kind(p) is OpKind.PACK and not p.is_output and \
                any(t.op is p.op for t in inputs):
            return p
    return None


def _source_index(st: Stage) -> "object | None":
    """The index expression ``st``'s body reads its source's innermost dimension at."""
    from tdsl.expr import TensorLoad
    found: list = []

    def walk(e: object) -> None:
        if isinstance(e, TensorLoad):
            found.append(e.indices[-1])
            return
        for f in getattr(e, "_fields", ()):
            v = getattr(e, f, None)
            for x in (v if isinstance(v, tuple) else (v,)):
                if hasattr(x, "_fields"):
                    walk(x)
    for b in st.op.body:
        walk(b)
    return found[0] if len(found) == 1 else None


def _rows_contiguous(st: Stage) -> bool:
    """True when the global source of the 2-D tile ``st`` is contiguous along the tile's
    rows (its second-to-last axis: ``dense``'s ``W[j, k]`` read as ``w_pack[k, j]``)."""
    idx = _source_index(st)
    return idx is not None and idx is st.op.axis[-2].var


def _fetch(s: Schedule, st: Stage, at: Stage, ko: object, vec: int, rows: int) -> None:
    """``st`` (a 2-D tile of ``rows`` rows) computed at ``ko`` of ``at``, its elements
    fetched by all the block's threads with consecutive lanes on consecutive elements of
    the axis its global source is contiguous along (coalesced reads): ``vec`` at a time
    (the vector loop) along a row, or, for a source contiguous down the tile's columns
    (``dense``'s W), one at a time down a column; the rows are then padded to an odd
    multiple of ``32 / rows`` words so those lanes' stores fall on distinct banks."""
    st.compute_at(at, ko)
    r, c = st.op.axis[-2:]
    if _rows_contiguous(st):
        st.reorder(c, r)
        fused = st.fuse(c, r)
        vec = 1
        if 32 % rows == 0:
            st.storage_align(r, 64 // rows, 32 // rows)
    else:
        fused = st.fuse(r, c)
    rest, vi = st.split(fused, factor=vec)
    rest, tx = st.split(rest, factor=THREADS_X)
    _, ty = st.split(rest, factor=THREADS_Y)
    st.bind(tx, thread_axis("threadIdx.x"))
    st.bind(ty, thread_axis("threadIdx.y"))
    if vec > 1:
        st.vectorize(vi)
    st.double_buffer()


GEMM_KINDS = (OpKind.MATMUL, OpKind.BATCH_MATMUL)


def gemm_anchor(s: Schedule, st: Stage, bodies: dict) -> "tuple[Stage, Stage | None] | None":
    """(anchor, epilogue) when ``st`` is a matmul-family stage -- tagged, or a hand-written
    one (``recognize.gemm_form``) -- or its elementwise epilogue."""
    if stage_pattern(st) is Pattern.INJECTIVE:
        a = fusable_anchor(s, st, bodies)
        if a is not None and stage_kind(a) in GEMM_KINDS:
            return a, st
        a = fusable_anchor(s, st, bodies, is_anchor=is_gemm_stage)
        return (a, st) if a is not None else None
    return (st, None) if stage_kind(st) in GEMM_KINDS or is_gemm_stage(st) else None


def _panel_copy(s: Schedule, anchor: Stage) -> "Stage | None":
    """A hand-written matmul's B copied by a cache stage laid out ``[..., k, j]``, as the
    PACK stage ``ops.matmul`` / ``ops.dense`` declare (B read as ``B[j, k]``: transposed
    by the copy, ``Stage.transform_layout``); None for any other stage."""
    form = gemm_form(anchor.op)
    if form is None:
        return None
    pack = s[s.cache_read(form.b, "global", [anchor.op.output(0)])]
    if form.transpose_b:
        nd = len(pack.op.axis)
        pack.transform_layout(axes=[*range(nd - 2), nd - 1, nd - 2])
    return pack


def _wmma_block(extent: int) -> int:
    for b in (64, 32, 16):
        if extent % b == 0:
            return b
    return 0


def schedule_wmma(s: Schedule, anchor: Stage, pack: Stage, a_t: object) -> set:
    """fp16 x fp16 -> fp32 on tensor cores: per block a (<=64) x (<=64) tile, one warp per
    16 x 16 output tile (threadIdx.z rows, threadIdx.y columns), the A and B k-slices (16
    deep) fetched into shared memory by all threads, the inner 16x16x16 tensorized to WMMA
    with the accumulator fragment in registers across k (codegen: wmma_acc.py).  Needs
    constant M, N, K that are multiples of 16 (else the SIMT tiles are used)."""
    from tdsl.backends.cuda import wmma_intrin
    axes = list(anchor.op.axis)
    dims = [_const(ax.dom.extent) for ax in axes[-2:]] + [_const(anchor.op.reduce_axis[0].dom.extent)]
    if any(d is None or d % 16 for d in dims):
        return set()
    bm, bn = _wmma_block(dims[0]), _wmma_block(dims[1])
    wz, wy = bm // 16, bn // 16
    i, j = axes[-2], axes[-1]
    io, ii = anchor.split(i, factor=16)     # the intrinsic's loops: inner parts of one split
    jo, jj = anchor.split(j, factor=16)
    bi, wi = anchor.split(io, factor=wz)
    bj, wj = anchor.split(jo, factor=wy)
    ko, ki = anchor.split(anchor.op.reduce_axis[0], factor=16)
    lead = axes[:-2]
    anchor.reorder(*lead, bi, bj, wi, wj, ko, ii, jj, ki)
    if lead:
        anchor.bind(lead[0], thread_axis("blockIdx.z"))
    anchor.bind(bi, thread_axis("blockIdx.y"))
    anchor.bind(bj, thread_axis("blockIdx.x"))
    anchor.bind(wi, thread_axis("threadIdx.z"))
    anchor.bind(wj, thread_axis("threadIdx.y"))
    a_sh = s[s.cache_read(a_t, "shared", [anchor])]
    pack.set_scope("shared")
    for st in (a_sh, pack):
        st.compute_at(anchor, ko)
        fused = st.fuse(*st.op.axis[-2:])
        rest, tx = st.split(fused, factor=32)
        rest, ty = st.split(rest, factor=wy)
        _, tz = st.split(rest, factor=wz)
        st.bind(tx, thread_axis("threadIdx.x"))
        st.bind(ty, thread_axis("threadIdx.y"))
        st.bind(tz, thread_axis("threadIdx.z"))
    anchor.tensorize(ii, wmma_intrin())
    return {anchor, pack}


def _is_fp16_to_fp32(anchor: Stage, a_t: object, pack: Stage) -> bool:
    return str(anchor.op.output(0).dtype) == "float32" and \
        str(getattr(a_t, "dtype", "")) == "float16" and \
        str(pack.op.output(0).dtype) == "float16"


def schedule_gemm(s: Schedule, anchor: Stage, out: "Stage | None", target: object = None) -> set:
    """Tile ``anchor`` (its epilogue ``out`` when there is one); returns the stages done.
    fp16/bf16 products with fp32 accumulation on sm_80+ get the tensor-core microkernel
    (``cuda_tc.py``); fp16 on older archs WMMA tiles."""
    pack = _pack_of(s, anchor) or _panel_copy(s, anchor)
    reads = [t for t in anchor.op.input_tensors if pack is None or t.op is not pack.op]
    if pack is None or not reads:
        return set()
    a_t = reads[0]
    if anchor.op.attrs.get("transpose_a"):
        return set()          # the A tile's rows would be strided: the simple schedule
    from . import cuda_tc
    if target is not None and cuda_tc.eligible(anchor, a_t, pack, target):
        done = cuda_tc.schedule_tc(s, anchor, out, pack)
        if done:
            return done
    if out is None and _is_fp16_to_fp32(anchor, a_t, pack):
        done = schedule_wmma(s, anchor, pack, a_t)
        if done:
            return done
    slices = split_k(anchor)
    if slices > 1:
        return _schedule_split_k(s, anchor, out, pack, a_t, slices)
    o = out if out is not None else anchor
    if out is not None:
        anchor.set_scope("local")
        acc = anchor
    else:
        acc = s.cache_write(anchor.op.output(0), "local")
        acc = s[acc]
    _tile(s, o, acc, pack, a_t)
    return {st for st in (anchor, out, pack) if st is not None}


def _blocks(extents: "list[int]") -> int:
    """Blocks of the plain tiling of an output of constant ``extents`` (batch..., M, N)."""
    out = 1
    for e in extents[:-2]:
        out *= e
    for e in extents[-2:]:
        out *= -(-e // _block_tile(e))
    return out


def split_k(anchor: Stage) -> int:
    """K slices of the split-K variant: 1 unless every size is constant and the plain
    tiling has fewer than ``SPLIT_BELOW`` blocks; then the smallest power of two that
    brings the grid to ``FILL_BLOCKS`` and leaves each slice ``MIN_SLICE_K`` deep."""
    extents = [_const(ax.dom.extent) for ax in anchor.op.axis]
    k = _const(anchor.op.reduce_axis[0].dom.extent)
    if k is None or any(e is None for e in extents):
        return 1
    blocks = _blocks(extents)
    if blocks >= SPLIT_BELOW:
        return 1
    best = 1
    for slices in (2, 4, 8, 16, 32):
        if -(-k // slices) < MIN_SLICE_K:
            break
        best = slices
        if blocks * slices >= FILL_BLOCKS:
            break
    return best


def _schedule_split_k(s: Schedule, anchor: Stage, out: "Stage | None", pack: Stage,
                      a_t: object, slices: int) -> set:
    """Split-K: kernel 1 tiles the partial products over ``slices`` slices of k into a
    global ``(slices, ..., M, N)`` array (``rfactor``; the slice is part of
    ``blockIdx.z``); kernel 2 sums the slices in a fixed order per output (deterministic:
    no atomics), then the epilogue."""
    k = anchor.op.reduce_axis[0]
    depth = -(-_const(k.dom.extent) // (slices * BK)) * BK   # whole BK slices: only the
    ko, _ = anchor.split(k, factor=depth)                     # last one has a tail
    part = s.rfactor(anchor.op.output(0), ko, factor_axis=0)
    rf = s[part]
    acc = s[s.cache_write(part, "local")]
    _tile(s, rf, acc, pack, a_t)
    o = out if out is not None else anchor
    f = o.fuse(*o.op.axis) if len(o.op.axis) > 1 else o.op.axis[0]
    bx, tx = o.split(f, factor=THREADS_X * THREADS_Y)
    o.bind(bx, thread_axis("blockIdx.x"))
    o.bind(tx, thread_axis("threadIdx.x"))
    if out is not None:
        anchor.set_scope("local")
        anchor.compute_at(out, tx)
    return {st for st in (anchor, out, pack, rf, acc) if st is not None}


def _tile(s: Schedule, o: Stage, acc: Stage, pack: Stage, a_t: object) -> None:
    """The 2-level tiles of ``o`` (its last two axes; the others: ``blockIdx.z``) with
    ``acc`` (the accumulators) per thread and the shared A and B tiles.

    A warp is one row of ``THREADS_X`` threads, each holding ``tj`` consecutive columns
    (float4 at full size) of ``ti`` consecutive rows: its B-row reads are consecutive
    16-byte chunks (no bank conflict), its A-column reads one word (a broadcast) and
    its stores cover whole rows of the output tile (coalesced)."""
    axes = list(o.op.axis)
    i, j = axes[-2], axes[-1]
    bm = _block_tile(_const(i.dom.extent))
    bn = _block_tile(_const(j.dom.extent))
    ti, tj = bm // THREADS_Y, bn // THREADS_X
    bi_, ii = o.split(i, factor=bm)
    bj_, jj = o.split(j, factor=bn)
    ty, ii = o.split(ii, factor=ti)
    tx, jj = o.split(jj, factor=tj)
    lead = axes[:-2]
    o.reorder(*lead, bi_, bj_, ty, tx, ii, jj)
    if lead:
        o.bind(o.fuse(*lead) if len(lead) > 1 else lead[0], thread_axis("blockIdx.z"))
    o.bind(bi_, thread_axis("blockIdx.y"))
    o.bind(bj_, thread_axis("blockIdx.x"))
    # two blocks per SM: ptxas keeps a thread at <= 128 registers (one block of 256
    # threads at 160+ registers leaves the SM 8 warps to hide latency with)
    o.pragma(bj_, "min_blocks_per_sm", MIN_BLOCKS)
    o.bind(ty, thread_axis("threadIdx.y"))
    o.bind(tx, thread_axis("threadIdx.x"))
    o.unroll(ii)
    if tj > 1:
        o.vectorize(jj)                 # float4 (float2) stores of the outputs
    acc.compute_at(o, tx)
    (k,) = acc.op.reduce_axis
    ko, kr = acc.split(k, factor=BK)
    # the k steps of a slice unrolled by UNROLL_K (a loop of BK / UNROLL_K): fully
    # unrolled, ptxas hoists later steps' 20 operands each and spills at 128 registers
    # (148 B at 1024, 324 B at 1000 on sm_90); by 4 the tails still spill; by 2: 113
    kl, ki = acc.split(kr, factor=UNROLL_K)
    acc.reorder(ko, kl, ki, *acc.op.axis)
    for ax in (ki, *acc.op.axis[-2:]):             # registers: every index a constant
        acc.unroll(ax)
    # shared tiles: A through a cache stage, B through the PACK stage
    a_sh = s[s.cache_read(a_t, "shared", [acc])]
    pack.set_scope("shared")
    # registers: per k step the thread's A column and B row (a vector read of B)
    a_reg = s[s.cache_read(a_sh.op.output(0), "local", [acc])]
    b_reg = s[s.cache_read(pack.op.output(0), "local", [acc])]
    a_reg.compute_at(acc, ki)
    b_reg.compute_at(acc, ki)
    a_reg.unroll(a_reg.op.axis[-2])
    if tj > 1:
        b_reg.vectorize(b_reg.op.axis[-1])
    # float4 fills: a warp stores 4 whole rows of the unpadded A tile (BK = 8 words) or
    # one row of the B tile, all 32 banks once per 8-lane phase
    _fetch(s, a_sh, acc, ko, 4, bm)
    _fetch(s, pack, acc, ko, 4, BK)
