"""Dead code elimination and common subexpression elimination."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import Graph, Node, Value
from .rewrite import replace_uses


def eliminate_dead_code(graph: Graph) -> int:
    """Remove nodes none of whose outputs reaches a graph output; returns how many."""
    live = {id(v) for v in graph.outputs}
    keep: list[Node] = []
    for n in reversed(graph.nodes):
        if any(id(v) in live for v in n.outputs):
            keep.append(n)
            live.update(id(v) for v in n.inputs)
    removed = len(graph.nodes) - len(keep)
    graph.nodes = keep[::-1]
    return removed


def _freeze(a: Any) -> Any:
    if isinstance(a, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in a.items()))
    if isinstance(a, (list, tuple)):
        return tuple(_freeze(x) for x in a)
    if isinstance(a, (int, float, str, bool, type(None))):
        return a
    return repr(a)


def _const_key(v: Value) -> tuple:
    c = v.const
    return (str(c.dtype), c.shape, hash(c.tobytes()))


def eliminate_common_subexpressions(graph: Graph) -> int:
    """Merge equal constants (same dtype, shape and data) and nodes with the same op,
    inputs and attrs (never fallbacks: a PyTorch op may not be pure); returns how many
    nodes and constants were merged."""
    merged = 0
    consts: dict[tuple, Value] = {}
    seen: dict[tuple, Node] = {}
    keep: list[Node] = []
    for n in graph.nodes:
        for v in list(n.inputs):
            if v.is_const:
                k = _const_key(v)
                first = consts.setdefault(k, v)
                if first is not v and np.array_equal(first.const, v.const):
                    replace_uses(graph, v, first)
                    merged += 1
        if n.op == "torch":
            keep.append(n)
            continue
        key = (n.op, tuple(id(v) for v in n.inputs), _freeze(n.attrs))
        prev = seen.get(key)
        if prev is not None and len(prev.outputs) == len(n.outputs):
            for a, b in zip(n.outputs, prev.outputs):
                replace_uses(graph, a, b)
            merged += 1
            continue
        seen[key] = n
        keep.append(n)
    graph.nodes = keep
    return merged
