"""Default CUDA schedule of ``conv2d`` (NCHW data, one group): an implicit GEMM.

Seen as a GEMM, the convolution multiplies the weights (``CO x (CI*KH*KW)``) by the input
patches (``(CI*KH*KW) x (N*OH*OW)``).  Per block a tile of up to 128 output channels by
4 x 16 output pixels (8 x 8 where the output is under 16 wide); 16 x (4..16) threads, each
holding a register tile of ``CO_THREAD`` = 8 channels x ``PIX_THREAD`` = 4 consecutive
pixels of a column (32 outputs; ``threadIdx.y``: channels, ``threadIdx.x``: the tile's
columns, innermost, by its groups of 4 rows).  Where that leaves the grid too small to fill
the GPU, the block takes 64 or 32 channels (8 or 4 thread rows).

The reduction over (ic, kh, kw) runs in chunks: per ``RC`` input channels, the block
fetches the weight tile (``RC x KH x KW x co``, from the packed ``(CI, KH, KW, CO)``
weights: lanes along runs of 8 taps, which the OIHW weights hold contiguously, the tile's
rows padded to 4 words past a multiple of 32: conflict-free stores, 16-byte aligned rows)
and the input patch the pixel tile reads (``RC x rows x cols``, the padding computed by the
fetch: zeros outside the image; each input word is fetched once for all 9 taps, where an
explicit im2col tile would fetch it 9 times) cooperatively into shared memory, double
buffered.  Per (input channel, tap) step each thread copies its column of 4 input pixels
(a warp reads consecutive words: no bank conflict) and its 8 weights (two float4 reads,
broadcast across the lanes of a thread row) into registers and does 32 FMAs from them:
6 shared loads per 32 FMAs (the first schedule: 8 per 16).  The tap loops stay loops
(``unroll_limit`` 1); the channel steps of a chunk are unrolled.  Where the window's tiles
would not fit ``SHARED_BUDGET`` (large kernels), a chunk is one kernel row (``RC x KW``
taps).  Bias and activation run on the accumulators before the stores.

The fetches read global memory 16 bytes a lane where that is legal (issue 26):

* the input rows, where the input's width is a multiple of 4 (every row then starts
  16-byte aligned; decided from the static shape, the batch may be symbolic): the tile's
  region starts at the padded window's first input column rounded down to a multiple of 8
  (``Stage.align_region``) and spans whole 8-column runs, so a lane copies a float4 (a
  16-byte ``cp.async`` on sm_80+) and a warp whole 32-byte sectors; where the 8-column
  halo would cost the chunk depth (the shared budget) the rounding is to 4 columns
  (16 bytes).  Vectors that straddle the image's edge or the padding are zero filled by
  scalar copies (the vector path runs where all 4 words are inside).  Other widths keep
  the scalar fetch of exactly the window.
* the weights: float4 reads along the OIHW weights' contiguous (ci, kh, kw) taps,
  transposed in shared memory (each lane's 4 taps stored down a column of the
  ``taps x co`` tile), not a pre-packed ``(CI, KH, KW, CO)`` weight array: that would cost
  a transposition kernel (or a layout the caller must provide) per call, while the
  transposing stores can be kept conflict-free: two lanes per 8-tap run (a 32-byte
  sector), 16 channels per warp, rows padded to 4 words past a multiple of 32, so each of
  a lane's 4 stores puts the warp on 32 distinct banks (the rows the two halves of a run
  land on are 4 apart: 16 banks).  Used where a chunk is whole 8-tap runs of every
  channel (``ci*kh*kw`` and the chunk's taps multiples of 8); else the 4-byte runs.

At sizes that don't divide the tiles the fetches zero-fill what lies outside the input
and only the final store is guarded (tdsl/lowering/padding.py): the FMAs run unguarded.
Every size but the batch must be constant (a symbolic batch only counts blocks).

Where the grid has fewer than ``SPLIT_BELOW`` threads (batch-1 ResNet layers: 1 to 7
thousand), the input channels are split into K slices (``split_k``): partial sums in one
kernel, their in-order sum and the epilogue in a second (deterministic, no atomics).  The
partials are ``(slices, N, CO/4, OH, OW, 4)`` where 4 divides the channels (``rfactor``'s
blocked layout): a warp's float4 stores, lanes along a row of pixels, are whole 32-byte
sectors (in NHWC a thread's 8 channels of a pixel are one sector, stored by two requests
that each touch half of it), and the sum kernel reads them along the same rows.

A warp holds 16 lanes of the block's threads along the pixels and two channel groups: for
the 8 x 8 tile both row groups (rows 0-3 and 4-7), reading input rows ``4 * stride`` apart
that the row pitch (4 past a multiple of 8 words) puts on distinct banks at stride 1; at
stride 2 (8 rows apart) no 16-byte aligned pitch does, so there a warp holds one row group
and four channel groups (``_bind_threads``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from tdsl.arith import Analyzer
from tdsl.expr import Const, Expr
from tdsl.schedule import Schedule, Stage
from tdsl.tensor import thread_axis

from ..tags import OpKind, Pattern
from .graph import fusable_anchor, stage_kind, stage_pattern

#: Output channels per thread (the block: 4, 8 or 16 threads of them, ``_co_threads``).
CO_THREAD = 8
#: Output pixels per block (rows x columns: 4 x 16 where the output is 16 or more wide,
#: else 8 x 8), and consecutive pixels of a column per thread.
PIX_WIDE, PIX_SQUARE, PIX_THREAD = (4, 16), (8, 8), 4
#: Threads per block along the pixels (one per column of the tile and group of rows).
THREADS = 16
#: Blocks a launch should have to fill the GPU (an H100 has 132 SMs): the block's channel
#: tile shrinks (128 -> 64 -> 32 channels, 256 -> 64 threads) until the grid has that many.
FILL_BLOCKS = 128
#: Threads a launch should have: 8 warps per SM of an H100 (2 per scheduler, one issuing
#: while the other waits on a shared load).  With 32 outputs per thread a batch-1 ResNet
#: layer has 1 to 7 thousand threads, so it is split along K (``split_k``) to this many.
FILL_THREADS = 128 * 256
#: Split-K below this many threads (under 4 warps per SM).
SPLIT_BELOW = FILL_THREADS // 2
#: Bytes of one copy of the two shared tiles (double buffering keeps two, under the 48 KB
#: of static shared memory): 8 input channels of a 3x3 window for 64 channels x 64 pixels
#: (22.5 KB), so a chunk is 72 taps, whole 32-byte runs of the OIHW weights (4 channels,
#: 36 taps, would split every other run across two sectors).
SHARED_BUDGET = 24 * 1024
#: The least reduction depth of one K slice (input channels x taps): each partial sum
#: costs one more global store and load per output, small next to 128+ FMAs.
MIN_SLICE_K = 128
#: Consecutive taps of one channel per group of lanes fetching the weights (a 32-byte sector).
WEIGHT_RUN = 8
#: Channels per vector (float4) access: the register copy of the weights, the split-K
#: partials.
VEC = 4
#: Input columns the shared input tile's rows start and end at multiples of (from the
#: padded start rounded down): whole 32-byte sectors of the input rows, fetched as float4.
HALO_ALIGN = 8
#: Threads per block of the kernel that sums the slices.
REDUCE_THREADS = 256


def _const(e: object) -> Optional[int]:
    """The integer ``e`` is, folding a constant expression (a hand-written padding's
    ``16 + 2 * 1`` rows); None when symbolic."""
    if isinstance(e, int):
        return e
    if isinstance(e, Expr) and not isinstance(e, Const):
        e = Analyzer().simplify(e)
    v = getattr(e, "value", None)
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class ConvOperands:
    """What the schedule reads of a convolution besides its anchor: ``data``, the stage
    that pads the input (fetched by the kernel, its zeros computed there) or the input
    tensor; ``pack``, the weights' stage laid out ``(ci, kh, kw, co)``; the window's
    ``stride`` and ``dilation``; ``pad_w``, the input columns left of the padded input's
    first (the row fetch's alignment), None when not known (the rows are then fetched a
    word at a time); ``kernel_layout``, the weights' as the caller passed them;
    ``data_pads``: ``data`` is a stage the tensor-core gather computes inline (the PAD
    stage; a hand-written convolution's elementwise producer that it alone reads).
    ``ops.conv2d``'s come from its tagged PAD / PACK stages and attributes
    (``tagged_operands``), a hand-written convolution's from ``recognize.conv_form``
    (``cuda_conv_form.py``)."""

    data: Any
    pack: Stage
    stride: tuple
    dilation: tuple
    pad_w: "int | None"
    kernel_layout: str
    data_pads: bool


def tagged_operands(s: Schedule, anchor: Stage) -> "ConvOperands | None":
    """``ops.conv2d``'s operands (``_input_stages`` and the anchor's attributes)."""
    found = _input_stages(s, anchor)
    if found is None:
        return None
    attrs, data = anchor.op.attrs, found[0]
    return ConvOperands(data, found[1], tuple(attrs["stride"]), tuple(attrs["dilation"]),
                        attrs["padding"][1], attrs.get("kernel_layout", "OIHW"),
                        isinstance(data, Stage) and stage_kind(data) is OpKind.PAD)


def conv_anchor(s: Schedule, st: Stage, bodies: dict) -> "tuple[Stage, Stage] | None":
    """(conv2d anchor, its elementwise epilogue) for an NCHW single-group convolution of
    constant sizes whose only consumer is ``st``."""
    if stage_pattern(st) is not Pattern.INJECTIVE:
        return None
    a = fusable_anchor(s, st, bodies)
    if a is None or stage_kind(a) is not OpKind.CONV2D:
        return None
    attrs = a.op.attrs
    if attrs.get("layout") != "NCHW" or attrs.get("groups") != 1 or \
            attrs.get("compute_layout") != "NHWC" or len(st.op.axis) != 4:
        return None
    # the batch (the first axis) may be symbolic: it only counts blocks
    if any(_const(ax.dom.extent) is None for ax in (*a.op.axis[1:], *a.op.reduce_axis)):
        return None
    return a, st


def _input_stages(s: Schedule, anchor: Stage) -> "tuple[Stage | object, Stage] | None":
    """(the input: its pad stage or the data tensor, the packed weights stage).  A pad
    stage another stage reads too is the data tensor here (the fetch reads it through a
    cache stage; as the fetch stage itself it would move into this kernel)."""
    data = pack = None
    for t in anchor.op.input_tensors:
        st = s[t]
        if stage_kind(st) is OpKind.PACK:
            pack = st
        elif data is None:
            data = st if not st.is_placeholder and s.consumers(st) == [anchor] else t
    if pack is None or data is None or pack.is_output:
        return None
    return data, pack


def _pixel_tile(ow: int) -> tuple[int, int]:
    """(rows, columns) of the block's pixel tile: 16 columns (a half-warp of threads along
    a row: conflict-free reads of the input tile at stride 1 or 2, coalesced stores) where
    the output is that wide; else 8 x 8 (less of the tile lies past a narrow output)."""
    return PIX_WIDE if ow >= PIX_WIDE[1] else PIX_SQUARE


def _chunk(ci: int, taps: int, rows: int, cols: int, co_tile: int) -> "int | None":
    """Input channels per reduction chunk (``taps`` kernel positions each): the largest
    of 8, 4, 2, 1 dividing ``ci`` whose two tiles (the weights' rows padded by 4 words)
    fit ``SHARED_BUDGET``, or None."""
    for rc in (8, 4, 2, 1):
        if ci % rc == 0 and 4 * rc * (taps * (co_tile + 4) + rows * cols) <= SHARED_BUDGET:
            return rc
    return None


def _plan_chunk(ci: int, kh: int, kw: int, rows: int, dh: int, cols: int,
                co_tile: int) -> tuple[bool, int]:
    """(whole window, input channels per chunk): RC channels x the whole kernel window
    (the input patch fetched once), or where that does not fit, x one kernel row; ``rows``
    the input rows the pixel tile spans less one, ``cols`` the words per input row."""
    rc = _chunk(ci, kh * kw, rows + (kh - 1) * dh + 1, cols, co_tile)
    if rc is not None:
        return True, rc
    return False, _chunk(ci, kw, rows + 1, cols, co_tile) or 1


def _co_threads(n: Optional[int], co: int, oh: int, ow: int) -> int:
    """Threads along the output channels (16, 8 or 4; each holds ``CO_THREAD`` channels):
    the largest whose channel tile is no wider than ``co`` and whose grid has
    ``FILL_BLOCKS`` blocks (a symbolic batch ``n`` is planned as a large one)."""
    def cdiv(a: int, b: int) -> int:
        return -(-a // b)
    ph, pw = _pixel_tile(ow)
    for ty in (16, 8):
        if ty * CO_THREAD <= co and (n is None or n * cdiv(co, ty * CO_THREAD) *
                                     cdiv(oh, ph) * cdiv(ow, pw) >= FILL_BLOCKS):
            return ty
    return 4


def _fetch(st: Stage, at: Stage, where: object, ty_threads: int) -> None:
    """``st`` computed at ``where`` of ``at`` into shared memory, its elements spread over
    the block's threads (consecutive threads, consecutive elements), double buffered."""
    st.set_scope("shared")
    st.compute_at(at, where)
    fused = st.fuse(*st.op.axis)
    rest, tx = st.split(fused, factor=THREADS)
    _, ty = st.split(rest, factor=ty_threads)
    st.bind(tx, thread_axis("threadIdx.x"))
    st.bind(ty, thread_axis("threadIdx.y"))
    st.double_buffer()


def _vector_rows(s: Schedule, data: "Stage | object", pad_w: "int | None") -> bool:
    """True where the input's rows can be fetched as float4: a width (row pitch) that is a
    multiple of ``VEC``, so every row starts 16-byte aligned (given an aligned array: the
    vector path tests a user's array once per launch and copies scalars where it is not),
    and the padding's offset along the rows known."""
    if pad_w is None:
        return False
    t = data.op.input_tensors[0] if isinstance(data, Stage) else data
    width = _const(t.shape[-1])
    return width is not None and width % VEC == 0


def _row_pitch(cols: int, pad: int, ph: int, align: int, square: "tuple | None") -> int:
    """Words per row of the shared input tile: ``cols`` (the columns the pixel tile reads),
    or where the rows are fetched as float4 (``_fetch_rows``) those widened to whole runs
    of ``align`` columns of the input row (the tile starts ``-pad % align`` columns early;
    ``_row_span``)."""
    if not align:
        return cols
    m, r = _row_span(ph, align, square)
    return (cols + -pad % align - r + m - 1) // m * m + r


def _row_span(ph: int, align: int, square: "tuple | None") -> tuple[int, int]:
    """(m, r): the float4-fetched rows are ``k*m + r`` words: a multiple of ``align``, or
    for the 8 x 8 pixel tile ``square``'s (``_square_rows``), so its two row groups read
    distinct banks while the rows stay contiguous (conflict-free float4 stores: a padded
    pitch would put a quarter warp's vectors on the same banks)."""
    return square[1:] if ph == PIX_SQUARE[0] and square else (align, 0)


def _bank_free(group_step: int, pitch: int, sw: int) -> bool:
    """True where a warp's read of the 8 x 8 tile's input (two groups of 8 lanes on 8
    columns ``sw`` words apart, the groups ``group_step`` rows of ``pitch`` words apart; the
    two thread rows of a warp read the same words) hits 16 distinct banks."""
    banks = {(g * group_step * pitch + c * sw) % 32 for g in (0, 1) for c in range(8)}
    return len(banks) == 16


def _square_rows(sh: int, sw: int) -> "tuple[int, int, int] | None":
    """``(input rows between the 8 x 8 tile's two row groups, m, r)``: rows 0-3 and 4-7 of
    the tile share a warp (16 lanes: 2 groups x 8 columns), conflict-free where the row
    pitch is ``k*m + r`` words (stride 1: 4 past a multiple of 8, the groups 16 banks
    apart).  None where no 16-byte aligned pitch does that (stride 2: the groups, 8 input
    rows apart, read the same even banks): the groups then go to different warps
    (``_bind_threads``), as they do where the scalar fetch's own pitch (the window's
    columns) would put them on the same banks (a 1x1 kernel's 8 words)."""
    m, r = 2 * VEC, VEC
    if all(_bank_free(4 * sh, k * m + r, sw) for k in range(32)):
        return 4 * sh, m, r
    return None


def _bind_threads(out: Stage, ty: object, yg: object, xt: object, ph: int,
                  square: "tuple | None") -> object:
    """Bind the tile's thread loops (``ty``: channel groups, ``yg``: row groups, ``xt``:
    columns) and return the ``threadIdx.x`` loop: ``(yg, xt)`` x ``ty``, a warp two channel
    groups of both row groups; or for the 8 x 8 tile where its row groups would conflict
    (``_square_rows`` None) ``(ty % 2, xt)`` x ``(yg, ty / 2)``: a warp four channel groups
    (4 weight float4s, 32 bytes apart) of one row group (8 input words, broadcast)."""
    if ph == PIX_SQUARE[0] and square is None:
        ty_hi, ty_lo = out.split(ty, factor=2)
        out.reorder(yg, ty_hi, ty_lo, xt)
        out.bind(out.fuse(yg, ty_hi), thread_axis("threadIdx.y"))
        tx = out.fuse(ty_lo, xt)
    else:
        out.bind(ty, thread_axis("threadIdx.y"))
        tx = out.fuse(yg, xt)
    out.bind(tx, thread_axis("threadIdx.x"))
    return tx


def _fetch_rows(st: Stage, at: Stage, where: object, ty_threads: int, pad: int,
                ph: int, align: int, square: tuple) -> None:
    """The input tile fetched as float4 (16-byte) copies along its rows: the region starts
    at the input column rounded down to a multiple of ``align`` (``align_region``; column
    ``x`` of the padded input is column ``x - pad`` of the input) and spans whole runs, so
    each lane copies 4 consecutive words of one row from a 16-byte aligned address, a warp
    whole 32-byte sectors; the lanes' padding, image edges and tails are zero filled (the
    vector path runs where all 4 words lie inside the image, scalar copies elsewhere).
    Consecutive lanes, consecutive vectors; the rows are contiguous (``_row_span``).
    ``align`` 8 (whole sectors) or 4."""
    st.set_scope("shared")
    st.compute_at(at, where)
    x = st.op.axis[-1]
    st.align_region(x, align, pad % align, *_row_span(ph, align, square))
    rest, vi = st.split(st.fuse(*st.op.axis), factor=VEC)
    rest, tx = st.split(rest, factor=THREADS)
    _, ty = st.split(rest, factor=ty_threads)
    st.bind(tx, thread_axis("threadIdx.x"))
    st.bind(ty, thread_axis("threadIdx.y"))
    st.vectorize(vi)
    st.double_buffer()


def _fetch_weights(pack: Stage, at: Stage, where: object, ty_threads: int, taps: int,
                   vector: bool) -> None:
    """The packed weights' tile (``(ic, kh, kw) x co``: ``taps`` rows of ``co`` channels,
    from OIHW weights, which are contiguous along the taps) fetched per chunk with
    consecutive lanes on ``run`` (8) consecutive taps of one channel: a warp reads 4
    channels' whole 32-byte sectors (the last run of a channel may be partial).  The rows
    are padded to 4 words past a multiple of 32 (36 words for 32 channels): the lanes'
    stores (8 rows x 4 columns of the tile) hit 32 distinct banks, and a row stays
    16-byte aligned for the float4 register reads of ``_stage_registers``."""
    pack.set_scope("shared")
    pack.compute_at(at, where)
    c, y, x, o = pack.op.axis
    if vector:
        # a float4 of 4 taps per lane, two lanes per 8-tap run (a 32-byte sector), 16
        # channels per warp; the lane's 4 words stored down a column of the tile: rows 4
        # apart hold the run's halves, so with the rows padded to 4 words past a multiple
        # of 32 each of the 4 stores puts the 32 lanes on 32 distinct banks
        run, half = pack.split(pack.fuse(c, y, x), factor=WEIGHT_RUN)
        h, v = pack.split(half, factor=VEC)
        pack.reorder(run, o, h, v)
        rest, tx = pack.split(pack.fuse(run, o, h), factor=THREADS)
        _, ty = pack.split(rest, factor=ty_threads)
        pack.bind(tx, thread_axis("threadIdx.x"))
        pack.bind(ty, thread_axis("threadIdx.y"))
        pack.vectorize(v)
        pack.storage_align(x, 32, VEC)
        pack.double_buffer()
        return
    run = min(WEIGHT_RUN, 1 << (taps.bit_length() - 1))
    t_out, t_in = pack.split(pack.fuse(c, y, x), factor=run)
    pack.reorder(t_out, o, t_in)
    fused = pack.fuse(t_out, o, t_in)
    rest, tx = pack.split(fused, factor=THREADS)
    _, ty = pack.split(rest, factor=ty_threads)
    pack.bind(tx, thread_axis("threadIdx.x"))
    pack.bind(ty, thread_axis("threadIdx.y"))
    if run > 1:
        pack.storage_align(x, 32, 32 // run)
    pack.double_buffer()


def split_k(n: Optional[int], co: int, oh: int, ow: int, ci: int, taps: int) -> int:
    """K slices of the split-K variant: 1 (no split) unless the grid of output tiles has
    fewer than ``SPLIT_BELOW`` threads (never for a symbolic batch ``n``); then the
    smallest power of two that brings it to ``FILL_THREADS``, leaving each slice
    ``MIN_SLICE_K`` deep or more.  The slices need not divide ``ci``: the last one's tail
    reads the zero fill of the fetches."""
    def cdiv(a: int, b: int) -> int:
        return -(-a // b)
    if n is None:
        return 1
    ph, pw = _pixel_tile(ow)
    tys = _co_threads(n, co, oh, ow)
    threads = n * cdiv(co, tys * CO_THREAD) * cdiv(oh, ph) * cdiv(ow, pw) * tys * THREADS
    if threads >= SPLIT_BELOW:
        return 1
    best = 1
    for slices in (2, 4, 8, 16, 32):
        if -(-ci // slices) * taps < MIN_SLICE_K:
            break
        best = slices
        if threads * slices >= FILL_THREADS:
            break
    return best


def schedule_conv(s: Schedule, anchor: Stage, out: Stage,
                  operands: "ConvOperands | None" = None) -> set:
    """Implicit-GEMM tiles for ``anchor`` computed in ``out``'s kernel (or, where the grid
    is far too small for the GPU, split-K: two kernels); the stages done.  ``operands``:
    ``tagged_operands``' unless given (a hand-written convolution)."""
    operands = operands or tagged_operands(s, anchor)
    if operands is None:
        return set()
    rc_ax, ry_ax, rx_ax = anchor.op.reduce_axis
    ci, kh, kw = (_const(r.dom.extent) for r in (rc_ax, ry_ax, rx_ax))
    slices = split_k(*(_const(ax.dom.extent) for ax in out.op.axis), ci, kh * kw)
    if slices > 1:
        return _schedule_split_k(s, anchor, out, slices, operands)
    n, co, y, x = out.op.axis
    tys, ph, (cob, ty, coi), (yb, yg, yi), (xb, xt) = _split_tiles(out, n, co, y, x)
    out.reorder(n, cob, yb, xb, ty, yg, xt, coi, yi)
    out.bind(out.fuse(n, cob), thread_axis("blockIdx.z"))
    out.bind(yb, thread_axis("blockIdx.y"))
    out.bind(xb, thread_axis("blockIdx.x"))
    out.unroll(yi)                    # a warp stores rows of consecutive pixels: coalesced
    return _tile(s, anchor, out, ty, yg, xt, coi, rc_ax, tys, ph, operands)


def _split_tiles(st: Stage, n: object, co: object, y: object, x: object,
                 per_thread: int = CO_THREAD) -> tuple:
    """The output tiling shared by the plain and split-K schedules: threads along the output
    channels (``tys``), ``CO_THREAD`` channels and ``PIX_THREAD`` consecutive pixels of a
    column per thread, a ``ph x pw`` pixel tile per block (``_pixel_tile``; a thread per
    column and group of rows, the columns innermost).  ``co`` is the channels' axis, or
    their blocks' (``per_thread`` of them a thread).  Returns ``tys, ph, (cob, ty, coi),
    (yb, yg, yi), (xb, xt)``."""
    extents = [_const(ax.dom.extent) for ax in (n, co, y, x)]
    tys = _co_threads(extents[0], extents[1] * (CO_THREAD // per_thread), *extents[2:])
    ph, pw = _pixel_tile(extents[3])
    cob, cor = st.split(co, factor=tys * per_thread)
    ty, coi = st.split(cor, factor=per_thread)
    yb, yr = st.split(y, factor=ph)
    yg, yi = st.split(yr, factor=PIX_THREAD)
    xb, xt = st.split(x, factor=pw)
    return tys, ph, (cob, ty, coi), (yb, yg, yi), (xb, xt)


def _schedule_split_k(s: Schedule, anchor: Stage, out: Stage, slices: int,
                      operands: ConvOperands) -> set:
    """Split-K: kernel 1 computes ``slices`` partial sums, each over ``ci / slices`` input
    channels, into a global array (``rfactor``; the slice is a ``blockIdx.z`` dimension,
    the tiles are those of the plain schedule); kernel 2 sums the slices in a fixed order
    per output (deterministic: no atomics) and runs the epilogue.

    The partials are ``(slices, N, CO/4, OH, OW, 4)`` (``rfactor``'s blocked layout) where
    4 divides the channels: a thread's float4 of 4 channels of a pixel lies next to the
    float4 of its neighbour lane's pixel, so a warp request (16 lanes along a row, two
    thread rows) is whole 32-byte sectors; in NHWC (``(slices, N, OH, OW, CO)``, the other
    channel counts) a thread's 8 channels of a pixel are one sector, stored as two float4
    requests that each touch half of 32 sectors."""
    rc_ax = anchor.op.reduce_axis[0]
    ko, _ = anchor.split(rc_ax, nparts=slices)
    blocked = _const(anchor.op.axis[3].dom.extent) % VEC == 0
    block = {"block_axis": 3, "block_lanes": VEC, "block_at": 1} if blocked else {}
    part = s.rfactor(anchor.op.output(0), ko, factor_axis=0, **block)
    rf = s[part]
    acc = s[s.cache_write(part, "local")]
    if blocked:
        ks, n, c4, y, x, cvi = rf.op.axis
        tys, ph, (cob, ty, cvo), (yb, yg, yi), (xb, xt) = \
            _split_tiles(rf, n, c4, y, x, CO_THREAD // VEC)
    else:
        ks, n, y, x, co = rf.op.axis
        tys, ph, (cob, ty, coi), (yb, yg, yi), (xb, xt) = _split_tiles(rf, n, co, y, x)
        cvo, cvi = rf.split(coi, factor=VEC)
    rf.reorder(ks, n, cob, yb, xb, ty, yg, xt, yi, cvo, cvi)
    rf.bind(rf.fuse(ks, n, cob), thread_axis("blockIdx.z"))
    rf.bind(yb, thread_axis("blockIdx.y"))
    rf.bind(xb, thread_axis("blockIdx.x"))
    rf.unroll(cvo)
    rf.vectorize(cvi)                 # 4 consecutive channels of the partials: a float4 store
    done = _tile(s, acc, rf, ty, yg, xt, yi, acc.op.reduce_axis[0], tys, ph, operands)
    # kernel 2: per output, the slices summed in order, then the epilogue; a thread per
    # pixel and 4 consecutive channels (a float4 of the partials), the pixels across the
    # lanes: blocked partials are read along their rows (NHWC ones two threads per
    # 8 channels: whole sectors), the NCHW output stored along its rows
    n, co, y, x = out.op.axis
    if blocked:
        c4, coi = out.split(co, factor=VEC)
        out.reorder(n, c4, y, x, coi)
        lanes = out.fuse(n, c4, y, x)
    else:
        coo, cr = out.split(co, factor=2 * VEC)
        half, coi = out.split(cr, factor=VEC)
        out.reorder(coo, n, y, x, half, coi)
        lanes = out.fuse(coo, n, y, x, half)
    bx, tx = out.split(lanes, factor=REDUCE_THREADS)
    out.bind(bx, thread_axis("blockIdx.x"))
    out.bind(tx, thread_axis("threadIdx.x"))
    out.unroll(coi)
    anchor.set_scope("local")
    anchor.compute_at(out, tx)
    (ks_ax,) = anchor.op.reduce_axis
    anchor.reorder(ks_ax, *anchor.op.axis)
    anchor.vectorize(anchor.op.axis[-1])
    return done | {anchor, out, rf, acc}


def _tile(s: Schedule, anchor: Stage, out: Stage, ty: object, yg: object, xt: object,
          unrolled: object, rc_ax: object, tys: int, ph: int, operands: ConvOperands) -> set:
    """Bind ``out``'s thread loops (``unrolled``: the per-thread loop that is not the vector
    one), compute ``anchor`` (the accumulators) per thread, and fetch its operands into
    shared memory per reduction chunk; the stages done."""
    data, pack = operands.data, operands.pack
    (sh, sw), (dh, dw) = operands.stride, operands.dilation
    _, ry_ax, rx_ax = anchor.op.reduce_axis
    ci, kh, kw = (_const(r.dom.extent) for r in (rc_ax, ry_ax, rx_ax))
    pw = 16 * PIX_THREAD // ph
    pad = operands.pad_w or 0
    span = (pw - 1) * sw + (kw - 1) * dw + 1
    co_tile = tys * CO_THREAD
    # the input rows' alignment (0: scalar fetch): a whole sector where the wider rows
    # leave the chunk as deep, else 16 bytes
    aligns = (HALO_ALIGN, VEC) if _vector_rows(s, data, operands.pad_w) else (0,)
    square = _square_rows(sh, sw)
    plans = [(*_plan_chunk(ci, kh, kw, (ph - 1) * sh, dh,
                           _row_pitch(span, pad, ph, a, square), co_tile), a)
             for a in aligns]
    whole, rc, align = max(plans, key=lambda p: (p[0], p[1]))
    if not align and square and not _bank_free(square[0], span, sw):
        square = None                       # the scalar rows' pitch: a row group a warp
    tx = _bind_threads(out, ty, yg, xt, ph, square)
    out.unroll(unrolled)

    anchor.set_scope("local")
    anchor.compute_at(out, tx)
    rco, rci = anchor.split(rc_ax, factor=rc)
    if whole:
        anchor.reorder(rco, ry_ax, rx_ax, rci, *anchor.op.axis)
        chunk = rco
    else:
        anchor.reorder(ry_ax, rco, rx_ax, rci, *anchor.op.axis)
        chunk = anchor.fuse(ry_ax, rco)     # one loop over the chunks: double buffered
    for ax in (rci, *anchor.op.axis):   # registers: every accumulator index a constant
        anchor.unroll(ax)
    # the tap loops stay loops: unrolled by nvcc, ptxas hoists the later taps' register
    # copies and spills (12 B at 96 registers for a 5-channel 3x3 conv on sm_90)
    anchor.pragma(rx_ax, "unroll_limit", 1)
    if whole:
        anchor.pragma(ry_ax, "unroll_limit", 1)
    if isinstance(data, Stage):
        d_sh = data                         # the padding stage: zeros computed by the fetch
    else:
        d_sh = s[s.cache_read(data, "shared", [anchor])]
    if align:
        _fetch_rows(d_sh, anchor, chunk, tys, pad, ph, align, square)
    else:
        _fetch(d_sh, anchor, chunk, tys)
    taps = rc * (kh * kw if whole else kw)
    # float4 weight runs: a chunk is whole 8-tap runs of each channel's contiguous
    # (ci, kh, kw) taps, which start 32-byte aligned
    vector = whole and taps % WEIGHT_RUN == 0 and (ci * kh * kw) % WEIGHT_RUN == 0
    _fetch_weights(pack, anchor, chunk, tys, taps, vector)
    _stage_registers(s, anchor, d_sh, pack, rci)
    return {anchor, out, pack} | ({d_sh} if d_sh is not data else set())


def _stage_registers(s: Schedule, anchor: Stage, d_sh: Stage, pack: Stage, step: object) -> None:
    """Per reduction step (one input channel and tap), the thread's column of input pixels
    and its row of weights copied from shared memory into registers (the weights as float4
    reads: ``CO_THREAD`` consecutive words of a 16-byte aligned row), so each shared word
    feeds ``CO_THREAD`` or ``PIX_THREAD`` FMAs from a register."""
    d_reg = s[s.cache_read(d_sh.op.output(0), "local", [anchor])]
    w_reg = s[s.cache_read(pack.op.output(0), "local", [anchor])]
    for st in (d_reg, w_reg):
        st.compute_at(anchor, step)
        for ax in st.op.axis:
            st.unroll(ax)
    vo, vi = w_reg.split(w_reg.op.axis[-1], factor=VEC)
    w_reg.unroll(vo)
    w_reg.vectorize(vi)
