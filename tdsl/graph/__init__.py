"""tdsl.graph: the model layer's graph IR, its passes, fusion into kernels, and the runtime.

Nothing below it (ops, lowering, backends, autotune) imports it; the PyTorch import lives in
``tdsl.frontend``.  ``compile_graph(graph)`` -> ``CompiledGraph``: ``cg(*inputs)`` runs it.
"""
from .ir import Graph, GraphError, Node, Value, constant, fallback


def __getattr__(name: str):   # the runtime imports tdsl.ops: loaded on first use
    if name in ("compile_graph", "CompiledGraph", "CompileReport"):
        from . import runtime
        return getattr(runtime, name)
    raise AttributeError(f"module 'tdsl.graph' has no attribute '{name}'")


__all__ = ["Graph", "GraphError", "Node", "Value", "constant", "fallback", "compile_graph",
           "CompiledGraph", "CompileReport"]
