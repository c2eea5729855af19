"""Small graph-rewriting helpers the passes share: cloning, use replacement, users."""
from __future__ import annotations

from typing import Any, Callable

from ..ir import Graph, Node, Value


def map_pytree(obj: Any, fn: Callable[[Value], Any]) -> Any:
    """``obj`` (lists, tuples, dicts of anything) with each Value replaced by ``fn(value)``."""
    if isinstance(obj, Value):
        return fn(obj)
    if isinstance(obj, list):
        return [map_pytree(o, fn) for o in obj]
    if isinstance(obj, tuple):
        vals = [map_pytree(o, fn) for o in obj]
        return type(obj)(*vals) if hasattr(obj, "_fields") else tuple(vals)
    if isinstance(obj, dict):
        return {k: map_pytree(v, fn) for k, v in obj.items()}
    return obj


def _sub_attrs(node: Node, fn: Callable[[Value], Value]) -> None:
    if node.op == "torch":
        node.attrs["args"] = map_pytree(node.attrs.get("args", ()), fn)
        node.attrs["kwargs"] = map_pytree(node.attrs.get("kwargs", {}), fn)


def clone(graph: Graph) -> Graph:
    """A copy of ``graph`` with fresh Nodes and non-constant Values (constants are shared:
    passes never change a constant's data in place)."""
    vmap: dict[int, Value] = {}

    def get(v: Value) -> Value:
        if v.is_const:
            return v
        if id(v) not in vmap:
            vmap[id(v)] = Value(v.shape, v.dtype, name=v.name)
        return vmap[id(v)]
    g = Graph(inputs=[get(v) for v in graph.inputs])
    for n in graph.nodes:
        node = Node(n.op, [get(v) for v in n.inputs], dict(n.attrs), [get(v) for v in n.outputs])
        _sub_attrs(node, get)
        g.nodes.append(node)
    g.outputs = [get(v) for v in graph.outputs]
    return g


def replace_uses(graph: Graph, old: Value, new: Value) -> None:
    """Every read of ``old`` (node inputs, fallback pytrees, graph outputs) reads ``new``."""
    def fn(v: Value) -> Value:
        return new if v is old else v
    for n in graph.nodes:
        if any(v is old for v in n.inputs):
            n.inputs = [fn(v) for v in n.inputs]
            _sub_attrs(n, fn)
    graph.outputs = [fn(v) for v in graph.outputs]


def output_ids(graph: Graph) -> set:
    return {id(v) for v in graph.outputs}
