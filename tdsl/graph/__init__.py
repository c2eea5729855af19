"""tdsl.graph: the model layer's graph IR, its passes, fusion into kernels, and the runtime.

Nothing below it (ops, lowering, backends, autotune) imports it; the PyTorch import lives in
``tdsl.frontend``.

* ``ir``: Value, Node, Graph, constant, fallback (the contract with the frontend);
  ``builder.Builder`` makes graphs op by op (shapes from ``opset.infer``);
* ``opset``: the op vocabulary (``OPS``), ``infer``, ``supports`` (the frontend asks it
  before emitting an op; anything else becomes a ``torch`` fallback node);
* ``passes``: ``optimize`` (DCE, attention decomposition, constant folding, CSE,
  batch-norm folding, weight pre-packing, flattened anchors, reshape sinking, cheap
  recomputation) and ``fuse`` (kernel boundaries);
* ``kernels``: a fused group -> placeholders -> ops -> ``ops.schedule`` -> ``td.build``
  (identical groups build once per process);
* ``plan``: memory planning by liveness, per binding of the symbolic sizes;
* ``runtime``: ``compile_graph(graph, target, db, num_threads)`` -> ``CompiledGraph``:
  ``cg(*inputs) -> [np.ndarray]``, ``print(cg.graph)`` (kernels and what each fused),
  ``cg.report``, ``cg.tasks()``.
"""
from .ir import Graph, GraphError, Node, Value, constant, fallback


def __getattr__(name: str):   # the runtime imports tdsl.ops: loaded on first use
    if name in ("compile_graph", "CompiledGraph", "CompileReport"):
        from . import runtime
        return getattr(runtime, name)
    raise AttributeError(f"module 'tdsl.graph' has no attribute '{name}'")


__all__ = ["Graph", "GraphError", "Node", "Value", "constant", "fallback", "compile_graph",
           "CompiledGraph", "CompileReport"]
