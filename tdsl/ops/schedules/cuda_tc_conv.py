"""Default CUDA schedule of fp16/bf16 NCHW conv2d (fp32 accumulation) on sm_80+: an implicit
GEMM on the tensor-core microkernel (``backends/cuda/tc_kernel.py``).

Per image (``blockIdx.z``) the convolution is the GEMM ``out[o, p] = sum_k W[o, k] . X[k, p]``
with ``o`` the output channel (rows), ``p = oy * OW + ox`` the output pixel (columns) and
``k = (ci, ky, kx)`` the OIHW weights' contiguous taps: A is the weights (contiguous along
k: 16-byte ``cp.async`` as for a matmul), B the implicit im2col of the (padded) input.  The
schedule gives the matmul's loop nest (``cuda_tc.py``): the output's pixels fused and split
into tiles of ``bn`` columns (``threadIdx.x``), its channels into tiles of ``bm`` rows (the
serial loop marked ``pragma tdsl_tc_gemm``), the three reduction loops fused into one k loop,
the padding and the weights' packing inlined, and marks the row loop ``pragma
tdsl_tc_gather_b``: the backend (``tc_gemm.py``) then fills B's tile element by element from
the body's own expression of (k, column) (the padding guard included; a warp fills whole k
rows, its lanes reading consecutive pixels) into the same swizzled shared tile the mma
fragments are loaded from.  The epilogue (the NCHW store, bias, activation, cast) runs
on the accumulator registers.

The tile is 64 channels x 128 pixels (4 warps of 32 x 64): ResNet layers have 64 to 512
output channels, and the gather's loads add registers to the 128-row tile's 232+.  Where
that grid would leave most SMs idle (batch 1, sizes known), 64 x 64 (2 warps): ``choose``.
Anything else (groups, HWIO or computed weights, fp32, fp16 accumulation, a one-deep
reduction, sizes past 32-bit index arithmetic, sm < 80) keeps the SIMT implicit GEMM
(``cuda_conv.py``).
"""
from __future__ import annotations

from typing import Any

from tdsl.schedule import Schedule, Stage
from tdsl.tensor import thread_axis

from .cuda_conv import ConvOperands, _const, tagged_operands
from .cuda_tc import DTYPES, PRAGMA, sm_of
from .cuda_tc import _anchor_axes as anchor_axes
from .graph import is_inlined
from .tc_config import TcConfig

#: The block tile (64 output channels x 128 pixels, 4 warps of 32 x 64) ...
CONFIG = TcConfig(64, 128, 32, 64, 4)
#: ... or 64 x 64 (2 warps) where that leaves the grid under ``FILL_BLOCKS`` blocks
#: (batch-1 ResNet layers: 25 blocks at 64 x 56^2); a symbolic batch takes ``CONFIG``.
SMALL = TcConfig(64, 64, 32, 64, 4)
#: Blocks a launch should have to use the GPU's SMs (an H100 has 132).
FILL_BLOCKS = 128
GATHER_PRAGMA = "tdsl_tc_gather_b"


def _inputs(operands: ConvOperands) -> "tuple[Any, Stage]":
    """(the data tensor or its padding stage's tensor, the packed weights' stage)."""
    data = operands.data
    return (data.op.output(0) if isinstance(data, Stage) else data), operands.pack


def eligible(s: Schedule, anchor: Stage, target: Any,
             operands: "ConvOperands | None" = None) -> bool:
    """An OIHW-weight NCHW conv2d (one group, ``cuda_conv.conv_anchor``'s other checks made)
    of two fp16 or two bf16 operands accumulating in fp32, on an sm_80+ target."""
    operands = operands or tagged_operands(s, anchor)
    if sm_of(target) < 80 or operands is None or operands.kernel_layout != "OIHW" or \
            str(anchor.op.output(0).dtype) != "float32":
        return False
    data, pack = _inputs(operands)
    w = pack.op.input_tensors[0] if len(pack.op.input_tensors) == 1 else None
    dt = str(data.dtype)
    # the weights must be a buffer (A's tile is copied from memory): a placeholder or a
    # stage of its own kernel, not an expression inlined into the packing
    if not (dt in DTYPES and str(pack.op.output(0).dtype) == dt and w is not None and
            str(w.dtype) == dt and (s[w].is_placeholder or not is_inlined(s[w]))):
        return False
    # k's loop must exist (one of extent 1 is lowered away), and the gather's k arithmetic
    # is 32-bit: the image's (padded) input and the weights under 2^31 elements
    k = _prod([r.dom.extent for r in anchor.op.reduce_axis])
    image = _prod(list(data.shape[1:]))
    weights = _prod(list(w.shape))
    return None not in (k, image, weights) and k > 1 and max(image, weights) < 2 ** 31


def _prod(extents: list) -> "int | None":
    """The product of constant extents, None if one is not constant."""
    out = 1
    for e in extents:
        c = _const(e)
        if c is None:
            return None
        out *= c
    return out


def choose(n: "int | None", co: "int | None", oh: "int | None",
           ow: "int | None") -> TcConfig:
    """The block tile: ``CONFIG``, or ``SMALL`` where every size is known and ``CONFIG``'s
    grid has fewer than ``FILL_BLOCKS`` blocks (a batch-1 layer's blocks each run the
    whole k loop serially: twice the blocks, half the time, while SMs are idle)."""
    if None in (n, co, oh, ow):
        return CONFIG
    blocks = n * -(-co // CONFIG.bm) * -(-(oh * ow) // CONFIG.bn)
    return SMALL if blocks < FILL_BLOCKS else CONFIG


def schedule_tc_conv(s: Schedule, anchor: Stage, out: Stage, target: Any,
                     operands: "ConvOperands | None" = None) -> set:
    """The module docstring's loop nest for ``anchor`` computed in ``out``'s kernel; the
    stages done (none where ``eligible`` says no).  ``operands``: ``tagged_operands``'
    unless given (a hand-written convolution)."""
    operands = operands or tagged_operands(s, anchor)
    if not eligible(s, anchor, target, operands) or \
            anchor_axes(s, out, anchor) != [0, 2, 3, 1]:
        return set()      # the epilogue must read the NHWC product at NCHW's (n, y, x, co)
    pad = operands.data if operands.data_pads else None
    for st in (pad, operands.pack):    # the padding and the packing: part of the gather / A
        if st is not None and not is_inlined(st):
            st.compute_inline()
    pack = operands.pack
    n, co, y, x = out.op.axis
    cfg = choose(*(_const(ax.dom.extent) for ax in (n, co, y, x)))
    pix = out.fuse(y, x)
    bi, ii = out.split(co, factor=cfg.bm)
    bj, jj = out.split(pix, factor=cfg.bn)
    out.reorder(n, bi, bj, jj, ii)
    out.bind(n, thread_axis("blockIdx.z"))
    out.bind(bi, thread_axis("blockIdx.y"))
    out.bind(bj, thread_axis("blockIdx.x"))
    out.bind(jj, thread_axis("threadIdx.x"))
    anchor.set_scope("local")
    anchor.compute_at(out, ii)
    anchor.fuse(*anchor.op.reduce_axis)
    out.pragma(ii, PRAGMA, cfg.key())
    out.pragma(ii, GATHER_PRAGMA, 1)
    return {anchor, out, pack}
