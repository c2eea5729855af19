"""What kind of operation a stage is: the typed attribute ``ops.schedule`` dispatches on.

Every compute stage an operator of ``tdsl.ops`` declares carries an ``OpKind`` as its
``tag`` (``OpKind`` is a ``str`` enum, so the tag stays a plain string to the rest of
tdsl).  The kind says *what* the stage computes; its ``Pattern`` says how it may fuse:

* ``INJECTIVE`` stages (elementwise, broadcast, transpose, reshape, pad, concatenate)
  are inlined into their consumers by default;
* ``ANCHOR`` stages (matmul, dense, batch_matmul, conv2d) own a tiled schedule and take
  an elementwise epilogue into their tiles;
* ``REDUCTION`` stages (reductions, pooling, the reductions inside softmax and the norms)
  are scheduled on their own or attached to the row loop of the stage that reads them.

Stages that are not from ``tdsl.ops`` (a user's ``td.compute``) get a pattern from their
structure: no reduction axis means injective.
"""
from __future__ import annotations

import enum
from types import MappingProxyType
from typing import Any

from tdsl.tensor import ComputeOp, Operation, Tensor


class Pattern(enum.Enum):
    """How a stage may fuse with its neighbours (TVM's OpPattern, simplified)."""

    INJECTIVE = "injective"
    REDUCTION = "reduction"
    ANCHOR = "anchor"
    OPAQUE = "opaque"


class OpKind(str, enum.Enum):
    """The kind of a stage declared by ``tdsl.ops`` (stored as the op's ``tag``)."""

    ELEMWISE = "ops.elemwise"          # same-shape pointwise
    BROADCAST = "ops.broadcast"        # pointwise with broadcasting
    INJECTIVE = "ops.injective"        # transpose, reshape, concatenate, ...
    PAD = "ops.pad"                    # constant padding
    PACK = "ops.pack"                  # a re-layout of a matmul operand (a panel when attached)
    REDUCE = "ops.reduce"              # sum / mean / max / min / argmax over axes
    ROW_REDUCE = "ops.row_reduce"      # a reduction inside softmax / layernorm / rmsnorm
    ROW_TEMP = "ops.row_temp"          # a per-row intermediate kept in cache (softmax's exp)
    MATMUL = "ops.matmul"              # matmul, dense (2-D)
    BATCH_MATMUL = "ops.batch_matmul"  # batched matmul (3-D)
    CONV2D = "ops.conv2d"
    POOL2D = "ops.pool2d"
    ATTENTION = "ops.attention"          # a per-key-block stage of ops.attention
    ATTENTION_OUT = "ops.attention_out"  # ops.attention's result (the stages' anchor)

    def __str__(self) -> str:
        return self.value


#: The constant kind -> pattern mapping.
PATTERNS = MappingProxyType({
    OpKind.ELEMWISE: Pattern.INJECTIVE,
    OpKind.BROADCAST: Pattern.INJECTIVE,
    OpKind.INJECTIVE: Pattern.INJECTIVE,
    OpKind.PAD: Pattern.INJECTIVE,
    OpKind.PACK: Pattern.INJECTIVE,
    OpKind.REDUCE: Pattern.REDUCTION,
    OpKind.ROW_REDUCE: Pattern.REDUCTION,
    OpKind.ROW_TEMP: Pattern.INJECTIVE,
    OpKind.MATMUL: Pattern.ANCHOR,
    OpKind.BATCH_MATMUL: Pattern.ANCHOR,
    OpKind.CONV2D: Pattern.ANCHOR,
    OpKind.POOL2D: Pattern.REDUCTION,
    OpKind.ATTENTION: Pattern.ANCHOR,
    OpKind.ATTENTION_OUT: Pattern.ANCHOR,
})

_BY_VALUE = MappingProxyType({k.value: k for k in OpKind})


def kind_of(op: Any) -> "OpKind | None":
    """The ``OpKind`` of an operation or tensor (None for placeholders and foreign computes)."""
    if isinstance(op, Tensor):
        op = op.op
    if not isinstance(op, ComputeOp):
        return None
    tag = op.tag
    if isinstance(tag, OpKind):
        return tag
    return _BY_VALUE.get(tag) if isinstance(tag, str) else None


def pattern_of(op: Any) -> Pattern:
    """The fusion pattern of an operation (from its kind, else from its structure)."""
    if isinstance(op, Tensor):
        op = op.op
    k = kind_of(op)
    if k is not None:
        return PATTERNS[k]
    if isinstance(op, ComputeOp):
        return Pattern.REDUCTION if op.reduce_axis else Pattern.INJECTIVE
    if isinstance(op, Operation):
        return Pattern.OPAQUE
    raise TypeError(f"not an operation: {op!r}")
