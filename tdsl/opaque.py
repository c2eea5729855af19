"""Opaque operations: stages that lowering emits as one statement over whole tensors.

``te.scan`` (a sequential recurrence) and ``te.extern`` (a call to a C or packed function)
have no elementwise body to split or inline.  Their stage computes its whole output at
root (an extern stage has no loops; a scan's loops are its spatial axes, see scan_op.py),
reads whole input tensors, and its consumers see an ordinary tensor (bound inference: the
whole output region).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from .dtype import DType
from .expr import Expr
from .tensor import IterKind, IterVar, Operation, Range, Tensor

if TYPE_CHECKING:
    from .lowering.nest import NestBuilder
    from .stmt import Stmt
    from tdsl.schedule import Stage


class OpaqueOp(Operation):
    """An operation with whole-tensor semantics; subclasses implement ``lower_stmt``.

    ``axis`` spans the first output's shape (the region bound inference and storage use);
    ``body`` is empty: nothing is inlined into it and it is never inlined.
    """

    kind = "opaque"
    reduce_axis: tuple = ()
    body: tuple = ()

    def __init__(self, name: str, tag: str, attrs: "dict | None",
                 shapes: Sequence[Sequence[Expr]], dtypes: Sequence[DType],
                 output_names: Sequence[str], inputs: Sequence[Tensor]):
        self.name = name
        self.tag = tag
        self.attrs = dict(attrs or {})
        self.inputs = list(inputs)
        self.axis = tuple(IterVar(Range(0, s), f"{name}.ax{d}", IterKind.DATA_PAR)
                          for d, s in enumerate(shapes[0]))
        self.outputs = tuple(Tensor(self, i, tuple(sh), dt, nm)
                             for i, (sh, dt, nm) in enumerate(zip(shapes, dtypes, output_names)))

    @property
    def num_outputs(self) -> int:
        return len(self.outputs)

    @property
    def shape(self) -> tuple:
        return self.outputs[0].shape

    @property
    def input_tensors(self) -> list[Tensor]:
        return list(self.inputs)

    def lower_stmt(self, nest: "NestBuilder", st: "Stage") -> "Stmt":
        """The statement computing every output (``nest.storage`` has the buffers)."""
        raise NotImplementedError


def is_opaque(op: Any) -> bool:
    return isinstance(op, OpaqueOp)
