"""The conv2d CPU schedule's blocking keyed by the real sizes (issue 23, ResNet-18 at batch 8):
the register tile's width fitted to the output rows (``conv_width``), and one parallel task
per filter panel, packed once and swept over every image and row, where an image's input is
smaller than a panel of filter (``panels_outer``).  Checked against PyTorch's conv2d on random
data at batch 1, 3 and 8, a symbolic batch, sizes that do and do not divide the tiles, and
stride 2 on odd sizes.  (Speed lives in ``benchmarks/resnet_convs.py``.)"""
from __future__ import annotations

import numpy as np
import pytest

import tdsl as td
from tdsl import ops
from tdsl.ops.schedules.cpu import vector_tile
from tdsl.ops.schedules.llvm import cpu_of, default_conv_tiles
from tdsl.ops.schedules import llvm_conv
from tdsl.ops.schedules.llvm_conv import (ConvTiles, conv_register_tile, conv_width,
                                          panels_outer, rows_in_cache, rows_outer,
                                          unrolls_taps)
from tdsl.stmt import For, ForKind
from tdsl.target import as_target

from .helpers import check, randn
from .ir_count import allocations, nodes

torch = pytest.importorskip("torch")

CPU = cpu_of(as_target("llvm"))
LANES = CPU.lanes(td.placeholder((1,), name="f32").dtype)
TILES = default_conv_tiles(CPU)


def _ref(x, w, b, stride, pad):
    t = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w),
                                   torch.from_numpy(b), stride, pad)
    return torch.relu(t).numpy()


def _conv(N, C, CO, K, stride, pad, HW, kernel_layout, target="llvm"):
    X = td.placeholder((N, C, HW, HW), name="X")
    shape = (CO, C, K, K) if kernel_layout == "OIHW" else (K, K, C, CO)
    W = td.placeholder(shape, name="W")
    b = td.placeholder((CO,), name="b")
    Y = ops.conv2d(X, W, stride=stride, padding=pad, kernel_layout=kernel_layout, bias=b,
                   activation="relu")
    s = ops.schedule(Y, target)
    return s, [X, W, b, Y]


def _unscheduled(N, C, CO, K, stride, pad, HW):
    """The schedule the CPU schedule's choices see: its stages as ``ops.conv2d`` made them
    (the filter's PACK stage ``[ci, kh, kw, co]``, before any packing at root blocks it)."""
    _, args = _conv(N, C, CO, K, stride, pad, HW, "HWIO")
    return td.create_schedule(args[-1].op)


def _weights(C, CO, K, kernel_layout):
    w = randn(CO, C, K, K)
    return w, (w if kernel_layout == "OIHW" else np.ascontiguousarray(w.transpose(2, 3, 1, 0)))


# ---- the choices --------------------------------------------------------------------------
def test_conv_width_fits_the_output_row():
    w = TILES.width
    for ow in range(1, 130):
        got = conv_width(ow, w)
        assert max(1, w // 2) <= got <= w
        if any(ow % x == 0 for x in range(max(1, w // 2), w + 1)):
            assert ow % got == 0, (ow, got)     # no partial tile where a width divides
    assert conv_width(None, w) == w             # symbolic: the widest
    assert conv_width(8 * 7, 8) == 8 and conv_width(14, 8) == 7 and conv_width(7, 8) == 7


def test_panels_outer_where_the_filter_outweighs_an_image():
    def pack_of(C, CO, K, HW):
        return _pack_stage(_unscheduled(8, C, CO, K, 1, K // 2, HW))
    attrs = {"stride": (1, 1), "dilation": (1, 1)}
    # ResNet-18's last stage (3x3 512 -> 512 at 7x7): 16 panels of 32 channels
    assert panels_outer(attrs, pack_of(512, 512, 3, 7), 7, 7, 32, 2)
    # its first stage (3x3 64 -> 64 at 56x56): the image is the larger
    assert not panels_outer(attrs, pack_of(64, 64, 3, 56), 56, 56, 32, 2)
    # too few panels for the threads
    assert not panels_outer(attrs, pack_of(512, 64, 3, 7), 7, 7, 32, 2)
    assert not panels_outer(attrs, None, 7, 7, 32, 2)


# ---- results against PyTorch --------------------------------------------------------------
CASES = [
    # N, C, CO, K, stride, pad, HW
    (8, 64, 128, 3, 1, 1, 7),        # panels outer, width 7
    (3, 48, 80, 3, 1, 1, 14),        # panels outer; 80 channels: tiles of 16
    (8, 32, 64, 3, 2, 1, 13),        # stride 2, odd size: 7 x 7 out
    (1, 24, 64, 3, 2, 1, 15),        # stride 2, odd size: 8 x 8 out
    (8, 16, 96, 1, 2, 0, 15),        # 1x1 stride 2 (a downsample), 8 x 8 out
    (3, 20, 40, 3, 1, 1, 11),        # 11 columns: a partial register tile
    (8, 8, 64, 3, 1, 1, 28),         # images outer (the image outweighs the filter)
]


@pytest.mark.parametrize("kernel_layout", ["OIHW", "HWIO"])
@pytest.mark.parametrize("N, C, CO, K, stride, pad, HW", CASES)
def test_conv_matches_torch(N, C, CO, K, stride, pad, HW, kernel_layout):
    s, args = _conv(N, C, CO, K, stride, pad, HW, kernel_layout)
    f = td.build(s, args)
    x, b = randn(N, C, HW, HW), randn(CO)
    w, wk = _weights(C, CO, K, kernel_layout)
    check(f, [x, wk, b], _ref(x, w, b, stride, pad), rtol=1e-4, atol=1e-4 * C * K)


@pytest.mark.parametrize("C, CO, HW, stride", [(64, 128, 7, 1), (40, 72, 15, 2)])
def test_conv_with_a_symbolic_batch(C, CO, HW, stride):
    n = td.var("n")
    X = td.placeholder((n, C, HW, HW), name="X")
    W = td.placeholder((3, 3, C, CO), name="W")
    b = td.placeholder((CO,), name="b")
    Y = ops.conv2d(X, W, stride=stride, padding=1, kernel_layout="HWIO", bias=b,
                   activation="relu")
    f = td.build(ops.schedule(Y, "llvm"), [X, W, b, Y])
    w, wk = _weights(C, CO, 3, "HWIO")
    bb = randn(CO)
    for N in (1, 3, 8, 17):
        x = randn(N, C, HW, HW)
        check(f, [x, wk, bb], _ref(x, w, bb, stride, 1), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("K, stride, pad, dilation, HW", [
    (2, 1, (0, 1, 1, 0), 1, 9),      # 2 taps (unrolled), asymmetric padding
    (3, 1, 2, 2, 12),                # dilated 3x3: the unrolled taps 2 columns apart
    (3, 2, (1, 0, 2, 1), 1, 16),     # stride 2, asymmetric padding
    (5, 1, 2, 1, 10),                # 5 taps
    (9, 1, 4, 1, 12),                # 9 taps: stay a loop
    (3, (1, 2), 1, (2, 1), 11),      # a stride and a dilation per axis
])
def test_conv_taps_match_torch(K, stride, pad, dilation, HW):
    """Filters of 2, 3, 5 and 9 taps, dilated and strided, each padding side its own: the tap
    loop unrolled (up to ``unroll_taps``) or not, against PyTorch."""
    N, C, CO = 3, 24, 40
    X = td.placeholder((N, C, HW, HW), name="X")
    W = td.placeholder((K, K, C, CO), name="W")
    b = td.placeholder((CO,), name="b")
    Y = ops.conv2d(X, W, stride=stride, padding=pad, dilation=dilation, kernel_layout="HWIO",
                   bias=b, activation="relu")
    f = td.build(ops.schedule(Y, "llvm"), [X, W, b, Y])
    x, bb = randn(N, C, HW, HW), randn(CO)
    w, wk = _weights(C, CO, K, "HWIO")
    tx = torch.from_numpy(x)
    if isinstance(pad, tuple):      # (top, left, bottom, right) -> F.pad's (l, r, t, b)
        tx = torch.nn.functional.pad(tx, (pad[1], pad[3], pad[0], pad[2]))
        tpad = 0
    else:
        tpad = pad
    ref = torch.nn.functional.conv2d(tx, torch.from_numpy(w), torch.from_numpy(bb), stride,
                                     tpad, dilation)
    check(f, [x, wk, bb], torch.relu(ref).numpy(), rtol=1e-4, atol=1e-4 * C * K)


# ---- the schedule it was meant to get ------------------------------------------------------
def _pack_shape(func, name="W_pack"):
    a = allocations(func)[name]
    return [int(d.value) for d in a.buffer.shape]


@pytest.mark.parametrize("target", ["llvm -mcpu=skylake-avx512", "llvm -mcpu=znver3"])
def test_each_task_packs_one_panel_once_at_batch_8(target):
    """8 images of 3x3 512 -> 512 at 7x7 (scaled down: 128 -> 256), lowered for AVX-512:
    each filter panel (2 vectors of channels) is packed by the task that owns it (one
    panel's buffer), not the whole filter at root; the register tile is 7 wide.  With 16
    registers the tile is 7 x 1 vector, a panel smaller than an image's input: the filter
    is packed once at root, in panels."""
    s, args = _conv(8, 128, 256, 3, 1, 1, 7, "HWIO", target)
    func = td.lower(s, args)
    cpu = cpu_of(as_target(target))
    tiles, lanes = default_conv_tiles(cpu), cpu.lanes(td.placeholder((1,), name="f").dtype)
    width, vectors = conv_register_tile(tiles, 7)
    bco = vector_tile(256, lanes, vectors)
    if cpu.vector_bits >= 512:
        assert _pack_shape(func) == [128, 3, 3, bco] and vectors == 2
    else:
        assert _pack_shape(func) == [256 // bco, 128, 3, 3, bco] and vectors == 1
    acc = _pack_shape(func, "T_conv2d_nhwc")
    assert acc[-2:] == [width, bco] and width == 7


def test_the_register_tile_takes_the_most_accumulators():
    """With 16 registers a 7- or 14-column row gets 7 x 1 vectors (2 vectors would be
    3 columns wide: 6 accumulators), 28 and 56 columns 4 x 2, a symbolic width 6 x 2; the
    AVX-512 tiles have no one-vector alternative."""
    regs16 = llvm_conv.CONV_TILES_16REGS
    got = {ow: conv_register_tile(regs16, ow) for ow in (7, 14, 28, 56, 112, None)}
    assert got == {7: (7, 1), 14: (7, 1), 28: (4, 2), 56: (4, 2), 112: (4, 2), None: (6, 2)}
    for ow in (7, 14, 28, 56, None):
        assert conv_register_tile(llvm_conv.CONV_TILES, ow) == \
            (conv_width(ow, llvm_conv.CONV_TILES.width), llvm_conv.CONV_TILES.vectors)
    for ow in range(1, 80):
        width, vectors = conv_register_tile(regs16, ow)
        assert width * vectors + vectors + 1 <= 16      # accumulators, weights, a broadcast
        assert width * vectors >= conv_width(ow, regs16.width) * regs16.vectors


@pytest.mark.parametrize("HW, CO", [(14, 37), (28, 37), (13, 45)])
def test_a_filter_packed_at_root_is_laid_out_in_panels(HW, CO):
    """The filter packed once at root (8 images would repack it) is ``[co // bco, ci, kh,
    kw, co % bco]``: each panel one contiguous run.  Laid out ``[ci, kh, kw, co]``, a panel's
    taps lay a full channel count apart and the micro-kernel used part of each cache line
    it loaded (ResNet-18's 3x3 256 -> 256 at 14 x 14, batch 8, AVX2: 62 -> 35 ms).  The
    channels are no multiple of the panel: the last one's tail is zeros.  Built for AVX2
    (with AVX-512's wider panels the 14 x 14 and 13 x 13 cases pack a panel per task)."""
    N, C, target = 8, 64, "llvm -mcpu=znver3"
    s, args = _conv(N, C, CO, 3, 1, 1, HW, "HWIO", target)
    func = td.lower(s, args)
    cpu = cpu_of(as_target(target))
    lanes = cpu.lanes(td.placeholder((1,), name="f").dtype)
    bco = vector_tile(CO, lanes, conv_register_tile(default_conv_tiles(cpu), HW)[1])
    assert CO % bco
    assert _pack_shape(func) == [-(-CO // bco), C, 3, 3, bco]
    f = td.build(s, args, target=target)
    x, b = randn(N, C, HW, HW), randn(CO)
    w, wk = _weights(C, CO, 3, "HWIO")
    check(f, [x, wk, b], _ref(x, w, b, 1, 1), rtol=1e-4, atol=1e-3)


def _tap_loops(K):
    s, args = _conv(2, 16, 32, K, 1, K // 2, 9, "HWIO")
    return [f for f in nodes(td.lower(s, args), For) if f.var.name.startswith("rx")]


def test_the_tap_loop_is_unrolled_up_to_the_tiles_bound():
    """3 and 7 taps (ResNet's 3x3 and its 7x7 stem) unrolled around the register tile where
    the default tiles say so (32 vector registers); 9 taps stay a loop; the choice itself
    by extent."""
    assert TILES.unroll_taps >= 7 or CPU.vector_bits < 512
    for k in (3, 7):
        want = ForKind.UNROLLED if TILES.unroll_taps >= k else ForKind.SERIAL
        loops = _tap_loops(k)       # 9 columns: a full and a partial (guarded) tile
        assert loops and all(f.kind is want for f in loops), k
    loops = _tap_loops(9)
    assert loops and all(f.kind is ForKind.SERIAL for f in loops)
    tiles = ConvTiles(unroll_taps=3)
    rx3 = td.reduce_axis((0, 3), name="rx")
    assert unrolls_taps(rx3, tiles) and not unrolls_taps(rx3, ConvTiles(unroll_taps=0))
    assert not unrolls_taps(td.reduce_axis((0, 1), name="rx"), tiles)
    assert not unrolls_taps(td.reduce_axis((0, 5), name="rx"), tiles)
    assert not unrolls_taps(td.reduce_axis((0, td.var("k")), name="rx"), tiles)


# ---- row chunks outer: every panel swept over a chunk of rows padded in cache ---------------
def _pack_stage(s):
    return next(st for st in s.stages if st.op.name.endswith("_pack"))


def test_rows_outer_where_the_image_outweighs_the_filter():
    """ResNet-18's 3x3 stride-2 64 -> 128 at 56 x 56 (a 0.8 MiB image read by 4 panels of 32
    channels, a 0.3 MiB filter): row chunks outer; its 64 -> 64 and 128 -> 128 stages and a
    small image keep the panel-major order."""
    s2 = {"stride": (2, 2), "dilation": (1, 1)}
    s1 = {"stride": (1, 1), "dilation": (1, 1)}
    s = _unscheduled(8, 64, 128, 3, 2, 1, 56)
    assert rows_outer(s2, _pack_stage(s), 8, 28, 28, 32, 8, 2, 4)
    assert rows_outer(s2, _pack_stage(s), None, 28, 28, 32, 8, 2, 4)    # symbolic batch
    assert not rows_outer(s2, _pack_stage(s), 1, 28, 28, 32, 8, 16, 4)  # too few tasks
    s = _unscheduled(8, 64, 64, 3, 1, 1, 56)
    assert not rows_outer(s1, _pack_stage(s), 8, 56, 56, 32, 8, 2, 4)
    s = _unscheduled(8, 128, 128, 3, 1, 1, 28)
    assert not rows_outer(s1, _pack_stage(s), 8, 28, 28, 32, 8, 2, 4)
    s = _unscheduled(8, 16, 128, 3, 2, 1, 56)                          # 0.2 MiB image
    assert not rows_outer(s2, _pack_stage(s), 8, 28, 28, 32, 8, 2, 4)
    assert not rows_outer(s2, None, 8, 28, 28, 32, 8, 2, 4)


def test_rows_outer_pads_each_chunk_in_its_task():
    """At the ResNet-18 size (batch 1): the padded input is allocated per task, the rows of
    one chunk (5 output rows at stride 2, ``rows_in_cache``: 11 input rows), not the whole
    padded image."""
    s, args = _conv(1, 64, 128, 3, 2, 1, 56, "HWIO")
    shape = _pack_shape(td.lower(s, args), "X_pad")
    assert shape[:2] == [1, 64] and shape[2] == 11
    x, (w, w_hwio) = randn(1, 64, 56, 56), _weights(64, 128, 3, "HWIO")
    b = randn(128)
    f = td.build(s, args, target="llvm")          # 28 rows in chunks of 5: a partial last
    check(f, [x, w_hwio, b], _ref(x, w, b, 2, 1), rtol=1e-4, atol=1e-3)


def test_rows_in_cache():
    """Chunks of rows shrink until the chunk's padded input and the packed filter fit
    ``ROWS_CHUNK_BYTES``: 64 -> 128 3x3 stride 2 at 56 x 56 (a 288 KiB filter): 8 output
    rows (17 x 57 x 64 floats, 248 KiB) do not, 5 (11 input rows, 157 KiB) do; in steps of
    a register tile's rows; a small filter keeps 8; never below one step."""
    s2 = {"stride": (2, 2), "dilation": (1, 1)}
    pack = _pack_stage(_unscheduled(1, 64, 128, 3, 2, 1, 56))
    assert rows_in_cache(s2, pack, 28, 28, 8, 1, 4) == 5
    assert rows_in_cache(s2, pack, 28, 28, 8, 2, 4) == 4
    assert rows_in_cache(s2, _pack_stage(_unscheduled(1, 16, 32, 3, 2, 1, 56)),
                         28, 28, 8, 1, 4) == 8
    big = _pack_stage(_unscheduled(1, 512, 512, 3, 2, 1, 56))        # a 9 MiB filter
    assert rows_in_cache(s2, big, 28, 28, 8, 2, 4) == 2


@pytest.fixture
def always_rows_outer(monkeypatch):
    """Every groups == 1 convolution takes row chunks outer (whatever its size and the
    machine's thread count); the list of the sizes it was asked about."""
    asked = []

    def rows_outer_always(*args, **kwargs):
        asked.append(args[2:5])
        return True
    monkeypatch.setattr(llvm_conv, "rows_outer", rows_outer_always)
    return asked


ROWS_OUTER_CASES = [
    # N, C, CO, K, stride, pad, dilation, HW
    (3, 16, 96, 3, 2, 1, 1, 29),     # stride 2, odd size, a partial chunk of rows
    (2, 8, 80, 3, 1, (0, 1, 2, 1), 1, 19),   # asymmetric padding, 80 channels
    (2, 12, 64, 3, 1, 2, 2, 13),     # dilated
    (3, 8, 64, 1, 2, 1, 1, 31),      # 1x1 stride 2, padded
    (1, 8, 64, 5, 2, 2, 1, 21),      # 5 taps at stride 2
]


@pytest.mark.parametrize("N, C, CO, K, stride, pad, dilation, HW", ROWS_OUTER_CASES)
def test_rows_outer_matches_torch(always_rows_outer, N, C, CO, K, stride, pad, dilation, HW):
    X = td.placeholder((N, C, HW, HW), name="X")
    W = td.placeholder((K, K, C, CO), name="W")
    b = td.placeholder((CO,), name="b")
    Y = ops.conv2d(X, W, stride=stride, padding=pad, dilation=dilation, kernel_layout="HWIO",
                   bias=b, activation="relu")
    f = td.build(ops.schedule(Y, "llvm"), [X, W, b, Y])
    assert always_rows_outer, "the schedule did not ask rows_outer"
    x, bb = randn(N, C, HW, HW), randn(CO)
    w, wk = _weights(C, CO, K, "HWIO")
    tx = torch.from_numpy(x)
    if isinstance(pad, tuple):
        tx = torch.nn.functional.pad(tx, (pad[1], pad[3], pad[0], pad[2]))
        pad = 0
    ref = torch.nn.functional.conv2d(tx, torch.from_numpy(w), torch.from_numpy(bb), stride,
                                     pad, dilation)
    check(f, [x, wk, bb], torch.relu(ref).numpy(), rtol=1e-4, atol=1e-4 * C * K)


def test_rows_outer_with_a_symbolic_batch(always_rows_outer):
    n = td.var("n")
    C, CO, HW = 16, 96, 23
    X = td.placeholder((n, C, HW, HW), name="X")
    W = td.placeholder((3, 3, C, CO), name="W")
    b = td.placeholder((CO,), name="b")
    Y = ops.conv2d(X, W, stride=2, padding=1, kernel_layout="HWIO", bias=b,
                   activation="relu")
    f = td.build(ops.schedule(Y, "llvm"), [X, W, b, Y])
    assert always_rows_outer and always_rows_outer[0][0] is None     # the batch: symbolic
    w, wk = _weights(C, CO, 3, "HWIO")
    bb = randn(CO)
    for N in (1, 3, 8, 17):
        x = randn(N, C, HW, HW)
        check(f, [x, wk, bb], _ref(x, w, bb, 2, 1), rtol=1e-4, atol=1e-3)
