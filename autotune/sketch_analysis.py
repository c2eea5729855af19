"""Facts about one stage of a computation that decide which sketch rule schedules it.

All are read off the compute definition (no per-operator code):

* ``input_reuse`` — per input, how many times each of its elements is used
  (points x reduction extent / elements) and whether some read ignores a spatial
  axis (the same element serves several outputs);
* ``reuse_worth_tiling`` — multi-level tiling pays only when inputs are reused
  often enough per element read (matmul, conv2d); a reduction that reads most of its data once
  (GEMV, dense with one row, row/column reductions, pooling) is memory-bound and
  gets the reduction rule instead;
* ``expensive`` — the body calls a costly math function (exp, tanh, erf...);
* ``read_count`` — how many loads of a producer its consumers make per point
  (inlining a producer read twice computes it twice);
* ``is_transpose`` — an elementwise stage whose innermost axis walks a
  non-innermost dimension of some input (its loads stride: tile it in 2-D).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from tdsl.expr import Call, Intrinsic, Reduce, TensorLoad
from tdsl.tensor import ComputeOp
from tdsl.visitor import free_vars, post_order_visit

from .irutil import eval_int

#: Math functions worth more than a few instructions: never duplicated by inlining.
EXPENSIVE = frozenset({Intrinsic.EXP, Intrinsic.EXP2, Intrinsic.LOG, Intrinsic.LOG2,
                       Intrinsic.LOG10, Intrinsic.TANH, Intrinsic.SIGMOID, Intrinsic.ERF,
                       Intrinsic.POW, Intrinsic.SIN, Intrinsic.COS})
#: Uses per input element below which a copy (pack) of the input costs more than it saves.
PACK_MIN_REUSE = 4.0
#: Multiply-adds per input element read (all inputs together) from which tiling pays.
TILE_MIN_INTENSITY = 4.0


@dataclass(frozen=True)
class InputReuse:
    """How ``op`` uses one input tensor."""

    tensor: Any
    elements: int          # elements of the input
    uses: float            # reads per element over the whole computation
    missing_axis: bool     # some read ignores a spatial axis of the op


def _loads(op: ComputeOp) -> list[TensorLoad]:
    found: list[TensorLoad] = []

    def visit(n: Any) -> None:
        if isinstance(n, TensorLoad):
            found.append(n)
    for b in op.body:
        for s in (b.source if isinstance(b, Reduce) else (b,)):
            post_order_visit(s, visit)
    return found


def _ext(iv: Any, sizes: Mapping[str, int]) -> int:
    return max(1, eval_int(iv.dom.extent, sizes, 1))


def input_reuse(op: ComputeOp, sizes: Mapping[str, int]) -> list[InputReuse]:
    """One entry per distinct input tensor of ``op`` (in order of first read)."""
    spatial = {iv.var for iv in op.axis}
    points = math.prod(_ext(iv, sizes) for iv in op.axis)
    work = points * math.prod(_ext(iv, sizes) for iv in op.reduce_axis)
    by_tensor: dict[int, list] = {}
    order: list[Any] = []
    for ld in _loads(op):
        key = id(ld.tensor)
        if key not in by_tensor:
            by_tensor[key] = [ld.tensor, 0, False]
            order.append(key)
        used: set = set()
        for i in ld.indices:
            used |= free_vars(i)
        entry = by_tensor[key]
        entry[1] += 1
        entry[2] = entry[2] or bool(spatial - used)
    out = []
    for key in order:
        t, reads, missing = by_tensor[key]
        elems = max(1, math.prod(max(1, eval_int(s, sizes, 1)) for s in t.shape))
        out.append(InputReuse(t, elems, work * reads / elems, missing))
    return out


def reuse_worth_tiling(op: ComputeOp, sizes: Mapping[str, int]) -> bool:
    """A reduction some input of which is read without a spatial axis, doing at least
    ``TILE_MIN_INTENSITY`` reduction steps per input element: data reuse that tiling can
    keep in cache.  GEMV reuses its vector, but its matrix (nearly all the data) is read
    once: memory-bound, not worth tiling."""
    reuse = input_reuse(op, sizes)
    if not any(r.missing_axis for r in reuse):
        return False
    work = math.prod(_ext(iv, sizes) for iv in list(op.axis) + list(op.reduce_axis))
    return work >= TILE_MIN_INTENSITY * sum(r.elements for r in reuse)


def packable_inputs(op: ComputeOp, sizes: Mapping[str, int]) -> list[Any]:
    """Inputs a local copy pays for: reused (read without some spatial axis) and used at
    least ``PACK_MIN_REUSE`` times per element.  A large operand read once (GEMV's matrix)
    is never copied."""
    return [r.tensor for r in input_reuse(op, sizes) if r.missing_axis and r.uses >= PACK_MIN_REUSE]


def expensive(op: ComputeOp) -> bool:
    """The body calls a costly math function."""
    found = False

    def visit(n: Any) -> None:
        nonlocal found
        if isinstance(n, Call) and n.func in EXPENSIVE:
            found = True
    for b in op.body:
        post_order_visit(b, visit)
    return found


def read_count(producer: Any, consumers: Sequence[ComputeOp]) -> int:
    """Loads of ``producer`` in the bodies of ``consumers`` (each load is one evaluation per
    consumer point once the producer is inlined)."""
    return sum(1 for c in consumers for ld in _loads(c) if ld.tensor.op is producer)


def transposed_inputs(op: ComputeOp) -> list:
    """The inputs (rank >= 2) read with their innermost index not following the op's
    innermost axis while another index does: consecutive outputs read strided elements."""
    if len(op.axis) < 2 or op.reduce_axis:
        return []
    last = op.axis[-1].var
    out: list = []
    for ld in _loads(op):
        if len(ld.indices) < 2 or any(ld.tensor is t for t in out):
            continue
        if last not in free_vars(ld.indices[-1]) and \
                any(last in free_vars(i) for i in ld.indices[:-1]):
            out.append(ld.tensor)
    return out


def is_transpose(op: ComputeOp) -> bool:
    """Some input is read transposed (``transposed_inputs``)."""
    return bool(transposed_inputs(op))
