"""Hand-written convolutions on CUDA: ``ops.conv2d``'s kernels for a plain ``td.compute``.

A convolution written as ``sum(data[n, rc, y*s + ry*d, x*s + rx*d] * w[f, rc, ry, rx])``
(``recognize.conv_form``: NCHW data, OIHW or HWIO weights, the reduction's axes in the
order channel, filter row, filter column) gets the schedule ``ops.conv2d`` gets
(``cuda_conv.py``; fp16/bf16 with fp32 accumulation on sm_80+: ``cuda_tc_conv.py``) once
it has that operator's shape: the weights copied by a cache stage laid out ``(ci, kh, kw,
co)`` (``ops.conv2d``'s PACK stage; ``Stage.transform_layout``), the product accumulated
with channels innermost (``transform_layout`` of the stage that computes it: the
convolution itself, or with no epilogue a cache stage writing it out), and the padding --
the data's producer, when the convolution alone reads it -- fetched by the kernel with its
zeros computed there, as ``ops.conv2d``'s PAD stage is.  The row fetch is 16 bytes a lane
where ``ops.conv2d``'s would be, given the columns the padding shifts the input by
(``padding_columns``: read from the padding's loads; unknown, the rows are fetched a word
at a time).  Every size but the batch must be constant, as for ``ops.conv2d``.
"""
from __future__ import annotations

from typing import Any

from tdsl.expr import TensorLoad
from tdsl.schedule import Schedule, Stage
from tdsl.visitor import post_order_visit

from ..tags import Pattern
from . import cuda_conv, cuda_tc_conv
from .cuda_conv import ConvOperands, _const
from .cuda_tc import _anchor_axes as anchor_axes
from .graph import fusable_anchor, stage_pattern
from .recognize import _linear, as_conv2d_stages, conv_form, is_conv_stage, padding_producer


def conv_form_anchor(s: Schedule, st: Stage, bodies: dict) -> "tuple[Stage, Stage | None] | None":
    """(a hand-written convolution, its elementwise epilogue or None) when ``st`` is one of
    them."""
    if stage_pattern(st) is Pattern.INJECTIVE:
        a = fusable_anchor(s, st, bodies, is_anchor=is_conv_stage)
        return (a, st) if a is not None else None
    return (st, None) if is_conv_stage(st) else None


def padding_columns(pad: Stage) -> "int | None":
    """``p`` where every load in ``pad``'s body reads its one input at column ``x - p`` (``x``
    its last axis: the stage shifts its input ``p`` columns right, zeros left of it); None
    otherwise."""
    if len(pad.op.input_tensors) != 1:
        return None
    x = pad.op.axis[-1].var
    found: "list[Any]" = []
    post_order_visit(pad.op.body[0], lambda n: found.append(n)
                     if isinstance(n, TensorLoad) else None)
    offsets = set()
    for load in found:
        lin = _linear(load.indices[-1])
        if lin is None or {k for k, v in lin.items() if v} - {x, None} or lin.get(x) != 1:
            return None
        offsets.add(-lin.get(None, 0))
    return offsets.pop() if len(offsets) == 1 and min(offsets) >= 0 else None


def schedule_conv_form(s: Schedule, st: Stage, out: "Stage | None", target: Any) -> set:
    """``ops.conv2d``'s CUDA kernel for the hand-written convolution ``st`` and its epilogue
    ``out`` (the module docstring); the stages done, none (and nothing changed) where the
    convolution is not one it takes: not NCHW, depthwise, a 1 x 1 one without tap axes,
    its reduction's axes in another order, a size other than the batch symbolic, or an
    epilogue that reads it other than at its own indices."""
    form = conv_form(st.op)
    if form is None or form.layout != "NCHW" or form.depthwise \
            or form.reduce_order != (0, 1, 2):
        return set()
    if any(_const(ax.dom.extent) is None for ax in (*st.op.axis[1:], *st.op.reduce_axis)):
        return set()
    if out is not None and (len(out.op.axis) != 4 or anchor_axes(s, out, st) != [0, 1, 2, 3]):
        return set()
    pad = padding_producer(s, form, st)
    anchor, out, pack = as_conv2d_stages(s, st, out, form)
    operands = ConvOperands(form.data if pad is None else pad, pack, form.stride,
                            form.dilation, 0 if pad is None else padding_columns(pad),
                            form.kernel_layout, pad is not None)
    done = cuda_tc_conv.schedule_tc_conv(s, anchor, out, target, operands) or \
        cuda_conv.schedule_conv(s, anchor, out, operands)
    return done | {st}
