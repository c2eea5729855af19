"""``Builder``: a Graph made op by op, output shapes inferred (``opset.infer``).

    b = Builder()
    x = b.input((td.var("n"), 64), "float32", "x")
    y = b.op("relu", b.op("dense", x, b.const(w)))
    b.output(y)
    cg = compile_graph(b.graph)
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np

from . import opset
from .ir import Graph, Value, constant, fallback


class Builder:
    """Builds a ``Graph``; each ``op`` call appends one node and returns its output."""

    def __init__(self) -> None:
        self.graph = Graph()

    def input(self, shape: Sequence[Any], dtype: str = "float32", name: str = "") -> Value:
        v = Value(tuple(shape), dtype, name=name)
        self.graph.inputs.append(v)
        return v

    def const(self, array: Any, name: str = "") -> Value:
        return constant(np.asarray(array), name)

    def scalar(self, value: float, dtype: str = "float32") -> Value:
        return constant(np.array(value, dtype=dtype))

    def op(self, op: str, *inputs: Value, name: str = "", **attrs: Any) -> Value:
        (shape, dt), = opset.infer(op, inputs, attrs)
        out = Value(shape, dt, name=name)
        self.graph.add(op, inputs, attrs, [out])
        return out

    def torch(self, target: Callable[..., Any], inputs: Sequence[Value], shape: Sequence[Any],
              dtype: str = "float32", args: Optional[Any] = None, kwargs: Optional[dict] = None,
              name: str = "") -> Value:
        """A fallback node ``target(*args, **kwargs)`` (default args: the inputs)."""
        out = Value(tuple(shape), dtype, name=name)
        self.graph.nodes.append(fallback(target, list(inputs) if args is None else args,
                                         kwargs or {}, inputs, [out], name))
        return out

    def output(self, *values: Value) -> Graph:
        self.graph.outputs.extend(values)
        return self.graph
