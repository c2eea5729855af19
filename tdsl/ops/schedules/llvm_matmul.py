"""Default CPU schedules of matmul, dense and batch_matmul: a register-tiled micro-kernel
over packed panels of B, or a streaming pass over B when M is small."""
from __future__ import annotations

from dataclasses import dataclass

from tdsl.schedule import Schedule, Stage
from tdsl.schedule.rfactor import first_output as _first
from tdsl.tensor import Tensor

from ..tags import OpKind
from .cpu import (CPU, _ext, _fuse, _out_dtype, _pow2_floor, _vector_split, accumulate_locally,
                  vector_tile)
from .graph import stage_kind


def _producer_of_kind(s: Schedule, st: Stage, kind: OpKind) -> "Stage | None":
    """The producer of ``kind`` (PAD, PACK) that ``st`` alone reads: the anchor's schedule
    moves it into its own tasks, which another reader would not find it in (two
    ``ops.conv2d`` of one ``ops.pad``'s output failed to schedule); a shared one stays as
    the default fusion left it."""
    for t in st.op.input_tensors:
        p = s[t]
        if stage_kind(p) is kind and not p.is_output and s.consumers(p) == [st]:
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


#: Bytes of accumulators (M x bj outputs) a task of the small-M matmul keeps in L1, at most.
SKINNY_ACC_BYTES = 16 * 1024
#: Rows of ``b`` a small-M matmul adds per pass over its accumulators: as many streams read
#: at once, and one load and store of each accumulator per that many FMAs.  1 x 4096 by
#: 4096 x 4096 (one thread, AVX-512): 4.2 ms with 4 rows and blocks of 1024 columns (4 KiB
#: runs, each a page of its own), 2.7 with 8 rows and whole rows (NumPy's sum of b: 2.7).
SKINNY_K_ROWS = 8


def skinny_block(M: "int | None", N: "int | None", lanes: int, bits: int, threads: int) -> int:
    """Columns per task of the small-M matmul: the widest block whose accumulators fit in
    ``SKINNY_ACC_BYTES`` (a symbolic M counts as ``SKINNY_M`` rows), cut to about ``N /
    threads`` (one task per thread: each reads the longest runs of ``b``'s rows that it can;
    a page-sized run costs the prefetcher a restart per page), a multiple of ``lanes``."""
    rows = SKINNY_M if M is None else max(1, M)
    most = max(lanes, _pow2_floor(SKINNY_ACC_BYTES * 8 // (rows * max(8, bits))))
    if N is None:
        return most
    share = -(-N // max(1, threads))
    return max(lanes, min(most, -(-share // lanes) * lanes))


def schedule_skinny_matmul(s: Schedule, anchor: Stage, out: "Stage | None", cpu: CPU) -> set:
    """``a (M, K) @ b (K, N)`` for small M: ``b`` read in place (no packing), each row of it
    once, in long runs: a task owns a block of ``bj`` columns (``skinny_block``: M x bj
    accumulators, at most 16 KiB, in L1), and for each ``SKINNY_K_ROWS`` rows of ``b`` adds
    ``a[:, k] x b[k, block]`` to them, vector lanes along N; tasks in parallel."""
    lanes = cpu.lanes(_out_dtype(anchor))
    pack = _producer_of_kind(s, anchor, OpKind.PACK)
    if pack is not None:
        pack.compute_inline()
    M = _ext(anchor.op.axis[0])
    parts = skinny_k_parts(M, _ext(anchor.op.axis[1]), _ext(anchor.op.reduce_axis[0]), lanes,
                           _out_dtype(anchor).bits, cpu.threads)
    if parts > 1:
        return _skinny_matmul_k_split(s, anchor, out, cpu, parts) | {st for st in (pack,) if st}
    comp, write = accumulate_locally(s, anchor, out)
    wi, wj = write.op.axis[-2], write.op.axis[-1]
    N = _ext(wj)
    bj = skinny_block(M, N, lanes, _out_dtype(anchor).bits, cpu.threads)
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
    kf = SKINNY_K_ROWS
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


def skinny_k_parts(M: "int | None", N: "int | None", K: "int | None", lanes: int, bits: int,
                   threads: int) -> int:
    """Parts the small-M matmul splits K into (1: none): ``threads`` when a split of N
    would leave each task runs of ``b``'s rows shorter than ``SKINNY_ACC_BYTES`` while all of
    a row's M x N accumulators fit in that many bytes (so a part reads whole rows), and K
    has at least ``SKINNY_K_ROWS x lanes`` rows per part."""
    if threads < 2 or M is None or N is None or K is None:
        return 1
    row = N * max(8, bits) // 8
    if M * row > SKINNY_ACC_BYTES or row // threads >= SKINNY_ACC_BYTES:
        return 1
    return threads if K >= threads * SKINNY_K_ROWS * lanes else 1


def _skinny_matmul_k_split(s: Schedule, anchor: Stage, out: "Stage | None", cpu: CPU,
                           parts: int) -> set:
    """The small-M matmul with K in ``parts`` (``skinny_k_parts``): each part, in parallel,
    reads whole rows of its share of ``b`` (one contiguous run) into all M x N partial sums
    (``rf``, in L1), ``SKINNY_K_ROWS`` rows per pass; then the parts are added, vectorized
    along N, with the epilogue."""
    lanes = cpu.lanes(_out_dtype(anchor))
    M = _ext(anchor.op.axis[0])
    (k,) = anchor.op.reduce_axis
    ko, _ = anchor.split(k, nparts=parts)
    rf = s[_first(s.rfactor(anchor.op.outputs[0], ko, factor_axis=0))]
    rp, ri, rj = rf.op.axis
    (rk,) = rf.op.reduce_axis
    rf.parallel(rp)
    rjo, rji = rf.split(rj, factor=lanes)
    kf = SKINNY_K_ROWS
    rko, rki = rf.split(rk, factor=kf)
    rf.reorder(rp, rko, rjo, rki, ri, rji)
    rf.unroll(rki)
    if M is not None and M <= 8:
        rf.unroll(ri)
    rf.vectorize(rji)
    write = out if out is not None else anchor
    wi, wj = write.op.axis[-2], write.op.axis[-1]
    jo, ji = write.split(wj, factor=lanes)
    if out is not None:
        write.reorder(wi, jo, ji)
        write.vectorize(ji)
        anchor.set_scope("local")
        anchor.compute_at(write, jo)
        ai, aj = anchor.op.axis
        (ap,) = anchor.op.reduce_axis
        anchor.reorder(ai, ap, aj)
        anchor.vectorize(aj)
    else:
        (ap,) = anchor.op.reduce_axis
        write.reorder(wi, jo, ap, ji)
        write.vectorize(ji)
    return {st for st in (anchor, out, rf) if st is not None}


def register_tile(N: "int | None", lanes: int, tiles: MatmulTiles) -> tuple[int, int]:
    """``(bn, mb)``: columns (``vector_tile``) and rows of the register tile for ``N``
    columns: a narrower tile gets more rows (at most 12), so that about as many accumulators
    hide the FMA latency.  96x300x208 ran at 58 GFLOP/s with 4 x 16-lane tiles (the last one
    a quarter full, guarded), at 94 with 1 x 16 lanes and 12 rows (AVX-512, one thread)."""
    bn = vector_tile(N, lanes, tiles.vectors)
    v = max(1, bn // lanes)
    rows = tiles.rows if v >= tiles.vectors else min(12, tiles.rows * tiles.vectors // v)
    return bn, rows


def schedule_matmul(s: Schedule, anchor: Stage, out: "Stage | None", cpu: CPU,
                    tiles: "MatmulTiles | None" = None, small_m: int = 0,
                    panel_of: "Tensor | None" = None, transposed_panel: bool = False) -> set:
    """Register tile ``mb x bn`` (rows unrolled, columns vectorized) accumulated in a local
    stage over the whole K; the B panel (K x bn) packed once per column tile (or row chunk);
    column tiles (and row chunks) in parallel; the epilogue applied on write-out.

    A ``dense`` / ``matmul`` with a small constant M goes to ``schedule_skinny_dense`` /
    ``schedule_skinny_matmul`` instead, and so does one with a symbolic M when ``small_m``
    (the rows of x per pass: the schedule of a ``M <= bound`` branch, ``SKINNY_M_SYMBOLIC``).

    ``panel_of``: a hand-written matmul has no PACK stage; B's panels are then copied by a
    cache stage of this tensor (B, read as ``B[k, j]``: the copy keeps the packed layout;
    ``transposed_panel``: read as ``B[j, k]``, the copy is laid out ``[k, j]`` as
    ``ops.dense`` declares its PACK stage, ``Stage.transform_layout``)."""
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
        if transposed_panel:
            nd = len(pack.op.axis)
            pack.transform_layout(axes=[*range(nd - 2), nd - 1, nd - 2])
    comp, write = accumulate_locally(s, anchor, out)
    axes = list(write.op.axis)
    batch = axes[:-2]
    i, j = axes[-2], axes[-1]
    M, N = _ext(i), _ext(j)
    bn, mb = register_tile(N, lanes, tiles)
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
        transposed = transposed_panel or (
            panel_of is None and bool(anchor.op.attrs.get("transpose_b"))
            and not anchor.op.attrs.get("transpose_a"))
        _schedule_panel(pack, bn, transposed)
    return {st for st in (anchor, out, pack) if st is not None}


#: Rows of the panel (k) a transposed panel copies per pass over its columns: each column is
#: a row of ``b`` (``b[j, k]``), read 64 floats (4 cache lines) at a time.
TRANSPOSED_PANEL_K_BLOCK = 64


def _schedule_panel(pack: Stage, bn: int, transposed: bool) -> None:
    """The loops of the packed panel ``pack[..., k, j]`` (``bn`` columns, attached at the
    column task).  Read in place (``b[k, j]``), a row of the panel is a run of ``b``'s row:
    vectorized along j.  Transposed (``b[j, k]``, ``dense``), walking k outermost made every
    vector a gather from ``bn`` rows of ``b``, a whole row apart: where a row is a multiple of
    4 KiB (K = 1024, 3072) those rows all fall in one L1 set and every load missed.  So
    ``TRANSPOSED_PANEL_K_BLOCK`` rows of k at a time, each row of ``b`` read along k
    (128 x 3072 x 768, one thread: 12.2 -> 6.6 ms; 128 x 768 x 2304: 5.6 -> 4.8)."""
    p_k, p_j = pack.op.axis[-2], pack.op.axis[-1]
    po, pi = pack.split(p_j, factor=bn)
    kext = _ext(p_k)
    if not transposed or (kext is not None and kext < 4 * TRANSPOSED_PANEL_K_BLOCK):
        pack.vectorize(pi)
        return
    pko, pki = pack.split(p_k, factor=TRANSPOSED_PANEL_K_BLOCK)
    pack.reorder(*(list(pack.op.axis[:-2]) + [pko, po, pi, pki]))
