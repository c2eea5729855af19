"""``tvm.ir``: the few names scripts touch (``IRModule`` stands for a lowered function)."""
from tdsl.stmt import PrimFunc as IRModule
from tdsl.tensor import Range

__all__ = ["IRModule", "Range"]
