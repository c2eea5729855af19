"""tdsl.graph: the model layer's graph IR, its passes, fusion into kernels, and the runtime.

Nothing below it (ops, lowering, backends, autotune) imports it; the PyTorch import lives in
``tdsl.frontend``.
"""
from .ir import Graph, GraphError, Node, Value, constant, fallback

__all__ = ["Graph", "GraphError", "Node", "Value", "constant", "fallback"]
