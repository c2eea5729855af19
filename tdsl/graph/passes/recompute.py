"""Recompute cheap elementwise values instead of materializing them.

An elementwise node whose result several kernels read would end its group and be written
to memory, then read back by each reader.  When the node is cheap, its inputs are already
in memory anyway (``_in_memory``: no chain of copies grows) and its readers
are at most ``MAX_COPIES`` elementwise, row or reduction ops (never anchors: a convolution
or GEMM reads its input many times), each reader gets its own copy, which fusion then
inlines into it: one pass over memory saved per reader.
"""
from __future__ import annotations

from .. import opset
from ..ir import Graph, Node, Value
from ..opset import Kind
from .rewrite import output_ids

MAX_COPIES = 4
_READERS = (Kind.ELEMWISE, Kind.ROW, Kind.REDUCE)


def _kind(n: Node) -> Kind:
    return Kind.OPAQUE if n.op == "torch" else opset.kind(n.op)


def _in_memory(v: Value, users: dict) -> bool:
    """``v`` is materialized whatever happens to its reader: a constant, a graph input, a
    fallback's result, or a non-elementwise result that others read too (a sole reader
    would rather be its epilogue)."""
    p = v.producer
    if v.is_const or p is None or p.op == "torch":
        return True
    return _kind(p) is not Kind.ELEMWISE and len(set(map(id, users.get(id(v), [])))) > 1


def recompute_cheap(graph: Graph) -> int:
    """Duplicate cheap multi-reader elementwise nodes per reader; returns the copies made."""
    users = graph.users()
    outs = output_ids(graph)
    copies = 0
    new: list[Node] = []
    for n in graph.nodes:
        new.append(n)
        if _kind(n) is not Kind.ELEMWISE or not opset.OPS[n.op].cheap or len(n.outputs) != 1:
            continue
        v = n.outputs[0]
        readers = list(dict.fromkeys(users.get(id(v), [])))   # distinct, in order
        if id(v) in outs or not 2 <= len(readers) <= MAX_COPIES:
            continue
        if any(_kind(r) not in _READERS or r.op == "reshape" for r in readers):
            continue
        if not all(_in_memory(i, users) for i in n.inputs):
            continue
        new.pop()
        for k, r in enumerate(readers):
            c = Value(v.shape, v.dtype, name=f"{v.name}_r{k}")
            new.append(Node(n.op, list(n.inputs), dict(n.attrs), [c]))
            r.inputs = [c if i is v else i for i in r.inputs]
            copies += 1
    graph.nodes = new
    return copies
