"""Default CPU schedule of conv2d: output channels vectorized in a local register tile,
the filter panel packed, the padded input materialized once."""
from __future__ import annotations

from dataclasses import dataclass

from tdsl.schedule import Schedule, Stage
from tdsl.tensor import IterVar

from ..tags import OpKind
from .cpu import (CPU, PARTIAL_TILE_COST, _ext, _fuse, _out_dtype, _vector_split,
                  accumulate_locally, vector_tile)
from .graph import effective_loads, permuted_access
from .llvm_matmul import _producer_of_kind


@dataclass(frozen=True)
class ConvTiles:
    """Register tile: ``width`` output columns (unrolled) x ``vectors * lanes`` output channels
    (vectorized); output rows in chunks of ``rows`` per parallel task.  ``unroll_taps``: the
    filter's innermost tap loop (its width, ``kw``) is unrolled around the tile when ``kw`` is
    at most this (0: never): the micro-kernel's loop then runs once per input channel and
    filter row instead of once per tap (3 or 7 trips), and the broadcasts of the taps'
    overlapping input columns are shared.  With it, ResNet-18's 3x3 convolutions at batch 8
    ran 2-4% faster (every stage), its 7x7 stride-2 stem 3-10% (batch 1 and 8); a 5x5 one
    (32 -> 64 at 28 x 28) the same (AVX-512, one thread; ``benchmarks/resnet_convs.py``)."""

    width: int = 8
    vectors: int = 2
    rows: int = 8
    unroll_taps: int = 7
    #: Columns of a one-vector tile (0: none), taken instead of the ``vectors``-wide one
    #: where it holds more accumulators (``conv_register_tile``).
    narrow_width: int = 0
    #: Output rows of the register tile; 0: ``conv_tile`` decides.
    row_tile: int = 0


CONV_TILES = ConvTiles()
#: With 16 vector registers: up to 6 columns x 2 vectors (12 accumulators, 2 weight vectors
#: and a broadcast: 15 registers; 8 x 2 spills), or up to 7 x 1 where the output's rows
#: leave the two-vector tile fewer accumulators (7 and 14 columns: 3 x 2).  The taps
#: unrolled.  ResNet-18's 3x3 stages at batch 8 (AVX2, one thread, the filter packed in
#: panels): 14 x 14 256 -> 256 54.5 ms with 4 x 2 and the taps a loop, 28.7 with 7 x 1
#: unrolled (PyTorch 27.8); 28 x 28 128 -> 128 31.7 -> 26.1 (4 x 2 unrolled; PyTorch 28.9).
CONV_TILES_16REGS = ConvTiles(width=6, vectors=2, rows=8, unroll_taps=3, narrow_width=7)


def default_conv_tiles(cpu: CPU) -> ConvTiles:
    return CONV_TILES if cpu.vector_bits >= 512 else CONV_TILES_16REGS


def conv_register_tile(tiles: ConvTiles, ow: "int | None") -> tuple[int, int]:
    """``(width, vectors)`` of the register tile for output rows of ``ow`` columns: the
    ``tiles.vectors``-wide tile of ``conv_width`` columns, or the one-vector tile of up to
    ``tiles.narrow_width`` columns where that holds more accumulators.  An FMA's latency
    times the two FMA ports is 8 accumulators in flight; with 16 registers a 14-column row
    fits a 2-vector tile only 3 wide (6 accumulators), a 1-vector one 7 wide."""
    wide = (conv_width(ow, tiles.width), tiles.vectors)
    if tiles.narrow_width and tiles.vectors > 1:
        narrow = (conv_width(ow, tiles.narrow_width), 1)
        if narrow[0] > wide[0] * wide[1]:
            return narrow
    return wide


#: Output rows of the register tile where ``conv_tile`` stacks two (``ROW_PAIR``) rows.
ROW_PAIR = 2


def conv_tile(tiles: ConvTiles, ow: "int | None", oh: "int | None", rows: int,
              channels_last_input: bool) -> tuple[int, int, int]:
    """``(width, vectors, rows)`` of the register tile: ``conv_register_tile``'s one-row
    tile, or, where that falls back to the one-vector tile (a 14-column row with 16
    registers: 7 x 1, seven accumulators, a weight vector per seven FMAs), ``ROW_PAIR``
    rows of the ``vectors``-wide tile half as wide (14 columns: 2 rows x 2 columns x 2
    vectors, eight accumulators, the weight vectors shared by both rows).  Only with the
    input channels-last (NCHW data read a plane apart per channel ran no faster) and whole
    pairs of rows in every chunk of ``rows`` (a guarded partial pair ran slower: 7 x 7).
    3x3 at 14 x 14, batch 1, one thread (AVX2), 7 x 1 -> 2 x 2 x 2: 256 -> 256 3.95 ->
    3.59 ms, 512 -> 512 16.7 -> 15.0, 128 -> 128 0.94 -> 0.90; 1x1 256 -> 1024 2.40 ->
    1.73; 3x3 stride 2 from 28 x 28, 128 -> 256, 2.49 -> 2.01."""
    width, vectors = conv_register_tile(tiles, ow)
    if tiles.row_tile:
        return width, vectors, tiles.row_tile
    if (tiles.narrow_width and vectors == 1 and tiles.vectors > 1 and channels_last_input
            and oh is not None and oh % ROW_PAIR == 0 and rows % ROW_PAIR == 0):
        half = conv_width(ow, max(1, tiles.width // 2))
        if ROW_PAIR * half * tiles.vectors > width * vectors:
            return half, tiles.vectors, ROW_PAIR
    return width, vectors, 1


_ROLES = {"NCHW": (0, 1, 2, 3), "NHWC": (0, 3, 1, 2)}   # positions of (n, c, h, w)


def _anchor_perm(s: Schedule, anchor: Stage, out: Stage) -> list[int]:
    """perm[d]: the position of ``out``'s axis that anchor axis d is read at."""
    for p, idx in effective_loads(s, out):
        if p is anchor:
            pos = permuted_access(out, idx)
            if pos is not None:
                return pos
    return list(range(len(anchor.op.axis)))


#: Bytes of filter repacked by the tasks beyond the first (``panel_repacks``) from which
#: the filter is packed once at root instead (a nest of its own, a full-size buffer, each
#: panel one contiguous run).  Repacking costs a scalar transposing copy per task for what
#: a root pack does once, vectorized: at 1 MiB, ResNet-18's first 3x3 stage (64 -> 64 at
#: 56 x 56, 147 KiB filter, 7 row chunks) repacked per task, 3.74-4.11 ms, 3.50-3.67 packed
#: at root (PyTorch 3.41-3.63), and the 7 x 7 stride-2 stem 4.18-5.28 -> 3.78-4.04
#: (PyTorch 3.37-3.40); NHWC 64 -> 64 at 56 x 56 3.29-3.39 -> 3.11-3.19 (batch 1, one
#: thread, AVX2).  Below this, a filter of a few KiB, a nest of its own is not worth it.
PACK_ROOT_BYTES = 64 << 10


#: Floats of one filter's row (``weight[o, c, :, :]``, channels by taps) an OIHW panel copies
#: per pass over its output channels (``_pack_along_filter_rows``).
PACK_ROW_FLOATS = 128


#: Taps of a filter (``kh * kw``) up to which an OIHW panel's copy unrolls them.
PACK_UNROLL_TAPS = 49


def _pack_along_filter_rows(pack: Stage, po: IterVar, pi: IterVar) -> None:
    """An OIHW filter's panel ``pack[c, y, x, o]`` copied a block of input channels at a
    time, each output channel's row of the filter read along (c, y, x), at least
    ``PACK_ROW_FLOATS`` in a row, rather than output channels innermost: that gathered from
    rows a whole filter row apart, which at 512 x 3 x 3 floats (4.5 x 4 KiB) fall in 2 sets
    of L1 and missed on every load (batch 1, one thread, AVX-512: 512 x 7^2 3x3 4.47 -> 3.24
    ms; 1024 x 14^2 -> 2048 1x1 stride 2 5.39 -> 2.84; 256 x 14^2 -> 512 stride 2 1.78 ->
    1.62).  The channel, row and tap loops stay nested, the taps unrolled: fused into one
    loop, each element's indices took a division and a remainder by 9 and by 3, and the copy
    cost more than the convolution (batch 1, one thread, AVX2: 512 -> 512 at 7 x 7 13.0 ->
    4.7 ms, 256 -> 512 at 14 x 14 stride 2 6.9 -> 3.0; PyTorch 6.1 and 3.1)."""
    c, y, x = pack.op.axis[:3]
    taps = (_ext(y) or 1) * (_ext(x) or 1)
    block = 1
    while block * taps < PACK_ROW_FLOATS:
        block *= 2
    co, ci = pack.split(c, factor=block)
    pack.reorder(co, po, pi, ci, y, x)
    if 1 < taps <= PACK_UNROLL_TAPS and _ext(y) is not None and _ext(x) is not None:
        pack.unroll(y)
        pack.unroll(x)


def pack_at_root(pack: Stage, repacks: "int | None") -> bool:
    """Whether to pack the whole filter once at root: its panels would be packed again
    by ``repacks - 1`` tasks (None: a symbolic batch), at least ``PACK_ROOT_BYTES`` in all."""
    elems = 1
    for iv in pack.op.axis:
        e = _ext(iv)
        elems = None if e is None or elems is None else elems * e
    if repacks is None or elems is None:
        return True
    return (repacks - 1) * elems * pack.op.outputs[0].dtype.bits // 8 >= PACK_ROOT_BYTES


def panel_repacks(n: "int | None", oh: "int | None", rows: int) -> "int | None":
    """How many parallel tasks of the ``groups == 1`` schedule read each packed filter panel
    (a panel packed per task is packed that many times): one per image and per chunk of
    ``rows`` output rows; None when symbolic (a batch: many).  8x1024x14x14 -> 2048
    (1x1, stride 2) packed its 8 MiB filter once per image: 137 ms, 98 ms packed once at
    root (best of 7, AVX-512, one thread, a busy machine; PyTorch 54 ms)."""
    if n is None or oh is None:
        return None
    return n * -(-oh // rows)


def conv_width(ow: "int | None", width: int) -> int:
    """Output columns of the register tile: of ``width`` down to half of it, the one whose
    tiles waste the fewest columns at the end of a row of ``ow`` (a partial tile also
    costs a guarded copy of the micro-kernel: ``PARTIAL_TILE_COST``); the widest on a tie.
    7 x 7, 14 x 14 and 28 x 28 outputs take 7 (8 left a partial tile, a second, guarded
    micro-kernel, on every row of 14 and 28); 56 and 112 keep 8."""
    if ow is None:
        return width
    best: "tuple[float, int] | None" = None
    for w in range(width, max(1, width // 2) - 1, -1):
        full, part = divmod(ow, w)
        cost = (full + (PARTIAL_TILE_COST if part else 0.0)) * w / ow
        if best is None or cost < best[0] - 1e-9:
            best = (cost, w)
    assert best is not None
    return best[1]


#: Bytes of input channels an NHWC convolution's micro-kernel reads per filter tap before
#: moving to the next tap (``conv_reduction``): one cache line.
CHANNEL_BLOCK_BYTES = 64
#: The channels are blocked only where one pixel's channels span at least this many bytes:
#: below it the tile's input columns lie close enough not to evict each other.  64 channels
#: (256 bytes) ran slower blocked (3x3 stride 2 at 56 x 56: 2.03 -> 2.42 ms), 128 channels
#: the same or faster (28 x 28 stride 2: 2.39 -> 2.25), 256 and 512 faster (see
#: ``conv_reduction``).
BLOCKED_PIXEL_BYTES = 512


def channel_block(cig: "int | None", bits: int) -> int:
    """Input channels per block of ``conv_reduction``: the largest power of two of at most
    ``CHANNEL_BLOCK_BYTES`` that divides ``cig`` (a reduction split that does not divide
    costs a guard in the micro-kernel), at least 4; 0 (no blocks) when ``cig`` is symbolic or
    its pixel's channels span fewer than ``BLOCKED_PIXEL_BYTES``."""
    if cig is None or cig * bits < BLOCKED_PIXEL_BYTES * 8:
        return 0
    b = CHANNEL_BLOCK_BYTES * 8 // bits
    while b >= 4 and cig % b:
        b //= 2
    return b if b >= 4 and cig >= 2 * b else 0


def conv_reduction(comp: Stage, red: list, attrs: dict, bits: int) -> list:
    """The reduction loops of the ``groups == 1`` micro-kernel, outermost first, the taps
    (the filter's columns) last.  ``attrs["reduce_order"]``: where the channel, filter-row
    and tap axes are in ``red`` (a hand-written convolution's; ``ops.conv2d`` declares them
    in that order).  NCHW data: channels, filter rows, taps.

    NHWC data with a filter larger than 1 x 1: the channels in blocks of a cache line
    (``channel_block``), a block's channels before each filter row's taps.  Channel by
    channel over the whole reduction, each of the tile's ``width + kw - 1`` input columns
    (``C`` floats apart: 1 KiB at 256 channels, so a row's columns share a few L1 sets)
    was a cache line touched once per channel and filter row, and evicted before the next
    channel.  Batch 1, one thread, AVX2 (``benchmarks/metaschedule_peer.py``'s shapes):
    3x3 256 -> 256 at 14 x 14 4.33 -> 3.90 ms, 512 -> 512 at 7 x 7 10.9 -> 5.9 (PyTorch
    3.81, 5.87); fewer channels: ``BLOCKED_PIXEL_BYTES``."""
    if len(red) != 3:
        return list(red)
    rc, ry, rx = (red[i] for i in (attrs.get("reduce_order") or (0, 1, 2)))
    taps = (_ext(ry) or 2) * (_ext(rx) or 2)
    block = channel_block(_ext(rc), bits) if attrs.get("layout") == "NHWC" and taps > 1 else 0
    if not block:
        return [rc, ry, rx]
    rc_o, rc_i = comp.split(rc, factor=block)
    return [rc_o, ry, rc_i, rx]


def unrolls_taps(rx: IterVar, tiles: ConvTiles) -> bool:
    """Whether the tap loop ``rx`` (the filter's width) is unrolled: a constant extent of
    2 up to ``tiles.unroll_taps``."""
    kw = _ext(rx)
    return kw is not None and 1 < kw <= tiles.unroll_taps


def panels_outer(attrs: dict, pack: "Stage | None", oh: "int | None", ow: "int | None",
                 bco: int, threads: int) -> bool:
    """Whether the parallel tasks go over filter panels (output channel tiles of ``bco``),
    each packing its panel once and sweeping every image and row, rather than over
    (image, panel, rows) with the filter packed at root: when one image's input is smaller
    than one panel of filter (``ih * iw < kh * kw * bco``), so that re-reading the batch's
    input once per panel costs less than re-reading the whole filter once per image (7 x 7
    and 14 x 14 3x3 stages of ResNet-18), and there are at least two panels per thread.
    ResNet-18's 3x3 512 -> 512 at 7 x 7, batch 8, with ``conv_width``: 19.8-34.5 ms over
    four runs before (the 9 MiB filter re-read from the shared L3 for every image), 17.4-18.4
    after (PyTorch 15.2-15.8; one thread, AVX-512, CPU time on a busy machine)."""
    if pack is None or oh is None or ow is None:
        return False
    cig, kh, kw, co = (_ext(iv) for iv in pack.op.axis)
    if None in (cig, kh, kw, co):
        return False
    (sh, sw), (dh, dw) = attrs.get("stride", (1, 1)), attrs.get("dilation", (1, 1))
    ih, iw = (oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1
    return ih * iw < kh * kw * bco and -(-co // bco) >= 2 * threads


#: Bytes of one image's (padded) input above which the ``groups == 1`` schedule may sweep
#: every filter panel within a chunk of output rows (``rows_outer``) rather than every row
#: chunk within a panel: an image that stays in the core's L2 costs little to re-read.
ROWS_OUTER_IMAGE_BYTES = 1 << 19


def _conv_sizes(attrs: dict, pack: Stage, oh: int, ow: int) -> "tuple[int, ...] | None":
    """(input channels, padded input rows and columns read, filter elements, output
    channels) of a constant-size ``groups == 1`` convolution; None when any is symbolic."""
    cig, kh, kw, co = (_ext(iv) for iv in pack.op.axis)
    if None in (cig, kh, kw, co):
        return None
    (sh, sw), (dh, dw) = attrs.get("stride", (1, 1)), attrs.get("dilation", (1, 1))
    ih, iw = (oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1
    return cig, ih, iw, cig * kh * kw * co, co


def rows_outer(attrs: dict, pack: "Stage | None", n: "int | None", oh: "int | None",
               ow: "int | None", bco: int, rows: int, threads: int, elem_bytes: int) -> bool:
    """Whether each parallel task takes one chunk of ``rows`` output rows of one image and
    sweeps every filter panel over it (its input rows padded by the task, in cache: the
    schedule asks only when there is padding), rather than one (panel, row chunk): when
    re-reading the image's input once per panel (from
    memory: it is larger than ``ROWS_OUTER_IMAGE_BYTES``) costs more than re-reading the
    packed filter once per row chunk, and the chunks (of every image, or of one when the
    batch is symbolic) give each thread at least two tasks.  ResNet-18's 3x3 stride-2
    64 -> 128 at 56 x 56, batch 8: 12.1 -> 9.8 ms (PyTorch 10.0; AVX-512, one thread); its
    other stages keep the panel-major order (the same or up to 8% slower with this one)."""
    if pack is None or oh is None or ow is None:
        return False
    sizes = _conv_sizes(attrs, pack, oh, ow)
    if sizes is None:
        return False
    cig, ih, iw, filt, co = sizes
    image = cig * ih * iw * elem_bytes
    panels, chunks = -(-co // bco), -(-oh // rows)
    return (image > ROWS_OUTER_IMAGE_BYTES
            and image * (panels - 1) > filt * elem_bytes * (chunks - 1)
            and (n or 1) * chunks >= 2 * threads)


#: Bytes of a row chunk's padded input and the packed filter together that the chunk size of
#: ``rows_outer``'s order keeps them under (``rows_in_cache``): both are re-read for every
#: panel, from a core's L2 (512 KiB on Zen 3; 1-2 MiB on Intel's server cores).
ROWS_CHUNK_BYTES = 448 * 1024


def rows_in_cache(attrs: dict, pack: Stage, oh: int, ow: int, rows: int, step: int,
                  elem_bytes: int) -> int:
    """Output rows per chunk of ``rows_outer``'s order: ``rows``, or fewer (multiples of
    ``step``, at least ``step``) until the chunk's padded input and the packed filter fit
    ``ROWS_CHUNK_BYTES``.  Every filter panel sweeps the chunk, so what does not fit is
    re-read from L3 once per panel.  3x3 stride 2, 64 -> 128 at 56 x 56, batch 1, one
    thread (AVX2, 512 KiB L2): chunks of 8 rows (17 input rows, 248 KiB, and a 288 KiB
    filter) 2.08 ms, of 5 1.65-1.71 (PyTorch 1.76); NCHW data 2.90 -> 1.77-1.81 (PyTorch
    1.62-1.89)."""
    sizes = _conv_sizes(attrs, pack, oh, ow)
    if sizes is None:
        return rows
    cig, _, iw, filt, _ = sizes
    kh = _ext(pack.op.axis[1]) or 1
    sh, dh = attrs.get("stride", (1, 1))[0], attrs.get("dilation", (1, 1))[0]

    def chunk_bytes(r: int) -> int:
        return (cig * ((r - 1) * sh + (kh - 1) * dh + 1) * iw + filt) * elem_bytes
    r = rows
    while r - step >= step and chunk_bytes(r) > ROWS_CHUNK_BYTES:
        r -= step
    return r


#: Bytes of one filter panel's block of input channels (``panel_block``) the micro-kernel
#: streams per pass over a chunk's tiles: half of a 32 KiB L1, the rest for the input rows.
PANEL_BLOCK_BYTES = 16 * 1024
#: Bytes of the local accumulator a blocked reduction keeps for one panel over a chunk of
#: rows (``panel_block``); a larger tile is not blocked.
PANEL_BLOCK_ACC_BYTES = 64 * 1024


def panel_block(attrs: dict, pack: "Stage | None", bco: int, rows: int, ow: "int | None",
                bits: int) -> int:
    """Input channels per block of an NCHW-data convolution's reduction (0: not blocked).

    The micro-kernel reads its filter panel, ``cig x kh x kw x bco`` values, once per
    register tile; past L1 (64 channels of a 3x3 filter: 36 KiB) each tile streams it from
    L2, and the FMAs wait on those loads.  Blocked, each block of channels sweeps all the
    tiles of the chunk's rows (the accumulators kept in a local buffer, loaded into
    registers and stored once per block and tile), its ``PANEL_BLOCK_BYTES`` slice of the
    panel staying in L1.  The largest power of two of at least 4 dividing ``cig`` (at most
    half of it) whose slice fits.  3x3, batch 1, one thread, AVX2, unblocked -> blocked
    (PyTorch): 64 -> 64 at 56 x 56 3.40-3.53 -> 3.27-3.36 ms (3.20-3.47), 128 -> 128 at
    28 x 28 3.49-3.53 -> 3.20-3.36 (3.68-3.70), 64 -> 128 stride 2 at 56 x 56 1.87-1.94 ->
    1.79-1.80 (2.08-2.10); 256 at 14 x 14 and 512 at 7 x 7 the same within 2% (their
    one-vector tile's panel is half as wide).  NHWC data keeps its own channel blocks
    (``conv_reduction``): blocked this way too, 64 -> 64 at 56 x 56 ran slower, 3.0 -> 3.2;
    so did 1x1 filters, whose panel fits L1 anyway."""
    if pack is None or ow is None or attrs.get("layout", "NCHW") != "NCHW":
        return 0
    cig, kh, kw, _ = (_ext(iv) for iv in pack.op.axis)
    if None in (cig, kh, kw) or rows * ow * bco * bits // 8 > PANEL_BLOCK_ACC_BYTES:
        return 0
    per_channel = kh * kw * bco * bits // 8
    if cig * per_channel <= PANEL_BLOCK_BYTES:
        return 0
    block, b = 0, 4
    while b <= cig // 2 and b * per_channel <= PANEL_BLOCK_BYTES and cig % b == 0:
        block, b = b, 2 * b
    return block


def schedule_conv2d(s: Schedule, anchor: Stage, out: "Stage | None", cpu: CPU,
                    tiles: "ConvTiles | None" = None, attrs: "dict | None" = None,
                    pad: "Stage | None" = None, pack: "Stage | None" = None) -> set:
    """groups == 1: output channels vectorized in a local ``width x channels`` tile (the
    anchor computes with channels innermost), the filter panel packed per parallel task
    (the whole filter at root when several tasks would pack the same panel),
    the padded input materialized once.  Grouped / depthwise: the contiguous output axis
    vectorized, filters broadcast.

    ``attrs``, ``pad``, ``pack``: a hand-written convolution (``recognize.conv_form``) has
    no ``ops.conv2d`` attributes and no tagged PAD / PACK producers; its schedule gives
    them (``llvm.schedule_conv_form``)."""
    tiles = tiles or default_conv_tiles(cpu)
    attrs = anchor.op.attrs if attrs is None else attrs
    groups = attrs.get("groups", 1)
    comp_layout = attrs.get("compute_layout", attrs.get("layout", "NCHW"))
    dt = _out_dtype(anchor)
    lanes = cpu.lanes(dt)
    pad = pad or _producer_of_kind(s, anchor, OpKind.PAD)
    pack = pack or _producer_of_kind(s, anchor, OpKind.PACK)
    pad_stage = pad
    perm = _anchor_perm(s, anchor, out) if out is not None else [0, 1, 2, 3]
    comp, write = accumulate_locally(s, anchor, out)
    roles = _ROLES[comp_layout]
    c_axes = list(comp.op.axis)
    cn, cco, coh, cow = (c_axes[r] for r in roles)
    w_axes = list(write.op.axis)
    n, co, oh, ow = (w_axes[perm[r]] for r in roles)
    red = list(comp.op.reduce_axis)
    OH, CO = _ext(oh), _ext(co)
    channels_last = w_axes[-1] is co
    if groups == 1 and comp_layout == "NHWC":
        rows = tiles.rows if OH is None or OH > tiles.rows else OH
        bw, vectors, rt = conv_tile(tiles, _ext(ow), OH, rows,
                                    attrs.get("layout", "NCHW") == "NHWC")
        bco = vector_tile(CO, lanes, vectors)    # no partial channel tile if it can
        outer = panels_outer(attrs, pack, OH, _ext(ow), bco, cpu.threads)
        # (with an input to pad: unpadded, a 1x1 stride-2 64 -> 128 at 56 x 56 ran the same)
        by_rows = not outer and pad is not None and rows_outer(
            attrs, pack, _ext(n), OH, _ext(ow), bco, rows, cpu.threads, dt.bits // 8)
        if by_rows:
            rows = rows_in_cache(attrs, pack, OH, _ext(ow), rows, rt, dt.bits // 8)
        co_o, co_i = write.split(co, factor=bco)
        ow_o, ow_i = write.split(ow, factor=bw)
        oh_o, oh_i = write.split(oh, factor=rows)
        tile_rows = []
        if rt > 1:
            oh_i, oh_t = write.split(oh_i, factor=rt)
            tile_rows = [oh_t]
        inner = tile_rows + ([ow_i, co_i] if channels_last else [co_i, ow_i])
        # par: the parallel loop; chunk: the loop around one panel over one chunk of rows
        if outer:
            # one task per filter panel, packed once and reused by every image and row
            write.reorder(co_o, n, oh_o, oh_i, ow_o, *inner)
            par, chunk = co_o, oh_o
        elif by_rows:
            # one task per chunk of rows, its input padded in cache, every panel swept
            write.reorder(n, oh_o, co_o, oh_i, ow_o, *inner)
            par = write.fuse(n, oh_o)
            chunk = co_o
        else:
            write.reorder(n, co_o, oh_o, oh_i, ow_o, *inner)
            par = chunk = write.fuse(n, co_o, oh_o)
        write.vectorize(inner[-1])
        write.parallel(par)
        kc = 0 if rt > 1 else panel_block(attrs, pack, bco, rows, _ext(ow), dt.bits)
        # blocked: one panel's tiles of a chunk of rows accumulated block by block in memory
        comp.compute_at(write, chunk if kc else ow_o)
        cco_o, cco_i = comp.split(cco, factor=bco)
        cow_o, cow_i = comp.split(cow, factor=bw)
        loops = conv_reduction(comp, red, attrs, dt.bits)
        if kc:
            rco, rci = comp.split(loops[0], factor=kc)
            comp.reorder(cn, cco_o, rco, coh, cow_o, rci, *loops[1:], cow_i, cco_i)
            loops = [rci, *loops[1:]]
        elif rt > 1:
            comp.reorder(cn, cow_o, cco_o, *loops, coh, cow_i, cco_i)
            comp.unroll(coh)
        else:
            comp.reorder(cn, coh, cow_o, cco_o, *loops, cow_i, cco_i)
        if unrolls_taps(loops[-1], tiles):
            comp.unroll(loops[-1])
        comp.unroll(cow_i)
        comp.vectorize(cco_i)
        if pack is not None:
            pack.compute_root()
            if not outer and pack_at_root(pack, panel_repacks(_ext(n), OH, rows)):
                # each panel is read by several tasks (images, row chunks): the filter
                # packed once, in parallel, rather than once per task
                # panel by panel: an OIHW filter's panel is read as ``bco`` runs (rows of
                # the filter) advancing together; channel by channel, every row's page at
                # once (8 x 1024 x 14 x 14 -> 2048, 1x1, stride 2: 38 ms, 29 by panels)
                # each panel one contiguous run: ``[co // bco, ci, kh, kw, co % bco]``
                pack.transform_layout(lambda c, y, x, o: [o // bco, c, y, x, o % bco])
                po, pi = pack.op.axis[0], pack.op.axis[-1]
                pack.parallel(po)
                pack.vectorize(pi)
            else:
                pack.compute_at(write, par)
                po, pi = pack.split(pack.op.axis[-1], factor=bco)
                if attrs.get("kernel_layout") == "OIHW":
                    _pack_along_filter_rows(pack, po, pi)
                else:
                    pack.vectorize(pi)
        if pad is not None and by_rows:
            pad.compute_at(write, par)
            po, pi = _vector_split(pad, pad.op.axis[-1], lanes)
            pad.vectorize(pi)
            pad = None
    elif comp_layout == "NCHW":
        pad_done = schedule_grouped_nchw(comp, write, (n, co, oh, ow), pad, cpu)
        pack = None     # stays inlined: filters are read directly
        if pad_done:
            pad = None
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
    return {st for st in (anchor, out, pack, pad_stage) if st is not None}


#: Accumulator vectors of a grouped (depthwise) convolution's register tile, at most.
GROUPED_ACCUMULATORS = 8
#: Largest padded input plane (bytes) a grouped convolution pads per parallel task, in cache,
#: just before it reads it, rather than padding the whole input at root (a pass over memory
#: more).  With the register tiles: 96 x 112 x 112 depthwise, stride 2, 0.89 -> 0.38 ms;
#: 144 x 56 x 56, stride 1, 0.91 -> 0.15 ms (AVX-512, one thread).
GROUPED_PAD_PLANE_BYTES = 1 << 18


def grouped_tile(OH: "int | None", OW: "int | None", lanes: int) -> tuple[int, int, int]:
    """``(rows, width, vector)`` of a grouped convolution's register tile: ``rows`` output
    rows x ``width`` output columns, vectors of ``vector`` lanes along the columns.  The
    width is ``vector_tile``'s (up to two vectors, half a register when that leaves a smaller
    partial tile); the rows the most, up to ``GROUPED_ACCUMULATORS`` vectors in all, that
    divide OH (no partial tile of rows)."""
    width = vector_tile(OW, lanes, 2)
    vec = min(width, lanes)
    per_row = width // vec
    rows = 1
    for r in range(GROUPED_ACCUMULATORS // per_row, 0, -1):
        if OH is None or OH % r == 0:
            rows = r
            break
    return rows, width, vec


def schedule_grouped_nchw(comp: Stage, write: Stage, axes: tuple, pad: "Stage | None",
                          cpu: CPU) -> bool:
    """A grouped (depthwise) NCHW convolution: each (image, channel) plane is a parallel
    task; the task pads its input channels' planes into a buffer that stays in cache (when
    small: ``GROUPED_PAD_PLANE_BYTES``), then computes register tiles of ``rows x width``
    outputs (``grouped_tile``) with the filter taps unrolled and their weights broadcast.  A
    stride along the columns makes strided vector loads (contiguous loads and a shuffle in the
    LLVM backend).  Returns whether ``pad`` was scheduled here."""
    lanes = cpu.lanes(_out_dtype(write))
    n, co, oh, ow = axes
    OH, OW = _ext(oh), _ext(ow)
    rows, width, vec = grouped_tile(OH, OW, lanes)
    oh_o, oh_i = write.split(oh, factor=rows)
    ow_o, ow_i = write.split(ow, factor=width)
    wv_o, wv_i = write.split(ow_i, factor=vec)
    write.reorder(n, co, oh_o, ow_o, oh_i, wv_o, wv_i)
    write.vectorize(wv_i)
    tasks = None if _ext(n) is None or _ext(co) is None else _ext(n) * _ext(co)
    if tasks is not None and tasks < 4 * cpu.threads:
        par = write.fuse(n, co, oh_o)
    else:
        par = write.fuse(n, co)
    write.parallel(par)
    comp.compute_at(write, ow_o)
    cn, cco, coh, cow = comp.op.axis
    red = list(comp.op.reduce_axis)
    cw_o, cw_i = comp.split(cow, factor=vec)
    comp.reorder(cn, cco, *red, coh, cw_o, cw_i)
    for iv in red[-2:] + [coh, cw_o]:      # the taps (a hand-written depthwise has no rc)
        comp.unroll(iv)
    comp.vectorize(cw_i)
    if OW is None or OW % vec:
        # rows of the accumulator tile a whole number of vectors apart: a partial vector's
        # masked stores then never overlap the next row's loads
        comp.storage_align(coh, vec, 0)
    if pad is None:
        return False
    p_axes = list(pad.op.axis)
    plane = 1
    for iv in p_axes[2:]:
        e = _ext(iv)
        plane = None if e is None or plane is None else plane * e
    if plane is None or plane * _out_dtype(pad).bits // 8 > GROUPED_PAD_PLANE_BYTES:
        return False
    pad.compute_at(write, par)
    po, pi = _vector_split(pad, p_axes[-1], lanes)
    pad.vectorize(pi)
    return True
