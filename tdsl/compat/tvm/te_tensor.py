"""``tvm.te.tensor``: TVM's module of tensor and operation classes, as tdsl's (so
``isinstance(x, te.tensor.Tensor)`` and ``isinstance(op, te.tensor.ScanOp)`` hold for
tdsl's objects)."""
from __future__ import annotations

from tdsl.extern_op import ExternOp
from tdsl.scan_op import ScanOp
from tdsl.tensor import ComputeOp, Operation, PlaceholderOp, Tensor

__all__ = ["Tensor", "Operation", "PlaceholderOp", "ComputeOp", "ScanOp", "ExternOp"]
