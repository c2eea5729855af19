"""Anchors on flattened operands, and reshapes sunk below their elementwise epilogues.

``dense`` and ``matmul`` on operands with leading dimensions (a transformer's
``(batch, seq, features)``) are rewritten to the 2-D (or 3-D batched) op that
``ops.schedule`` tiles well, between two ``reshape``\\ s -- free views of row-major
buffers (``fusion.Alias``).  The reshape after the anchor is then moved below the
elementwise ops and last-axis row ops (softmax, layer_norm) that follow, so that they
become the anchor's epilogue or a row group on the flat shape:

    reshape(dense(x2)) + r  ->  reshape(dense(x2) + reshape(r))

A reshape that merges trailing dimensions (a pointwise convolution's GEMM output
``(n, c, h * w)`` -> ``(n, c, h, w)``, ``passes.pointwise``) sinks below elementwise ops
alike, their per-channel operands reshaped with it (``(1, c, 1, 1)`` -> ``(1, c, 1)``).

Finally ``reshape(reshape(x))`` becomes one reshape, and a reshape to the same shape
disappears.
"""
from __future__ import annotations

from typing import Any

from tdsl.ops._util import prod, simplify

from .. import opset
from ..ir import Graph, Node, Value
from ..opset import Kind
from .rewrite import output_ids, replace_uses


def _key(d: Any) -> str:
    return str(opset.dim(simplify(d)) if not isinstance(d, int) else d)


def same_shape(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(_key(x) == _key(y) for x, y in zip(a, b))


def _flat(dims: tuple) -> Any:
    return opset.dim(simplify(prod(list(dims)))) if dims else 1


def _reshape(x: Value, shape: tuple, name: str) -> tuple[Node, Value]:
    out = Value(tuple(shape), x.dtype, name=name)
    return Node("reshape", [x], {"shape": tuple(shape)}, [out]), out


def flatten_anchors(graph: Graph) -> int:
    """Rewrite dense/matmul with leading dimensions to 2-D/3-D ops between reshapes."""
    count = 0
    new: list[Node] = []
    for n in graph.nodes:
        out = n.outputs[0] if n.outputs else None
        if n.op == "dense" and n.inputs[0].ndim > 2:
            x = n.inputs[0]
            r1, x2 = _reshape(x, (_flat(x.shape[:-1]), x.shape[-1]), x.name + "_2d")
            y2 = Value((x2.shape[0], out.shape[-1]), out.dtype, name=out.name + "_2d")
            new += [r1, Node("dense", [x2, *n.inputs[1:]], dict(n.attrs), [y2])]
            new.append(Node("reshape", [y2], {"shape": out.shape}, [out]))
            count += 1
            continue
        if n.op == "matmul":
            a, b = n.inputs
            ta, tb = n.attrs.get("transpose_a"), n.attrs.get("transpose_b")
            if a.ndim > 2 and b.ndim == 2 and not ta:
                r1, a2 = _reshape(a, (_flat(a.shape[:-1]), a.shape[-1]), a.name + "_2d")
                y2 = Value((a2.shape[0], out.shape[-1]), out.dtype, name=out.name + "_2d")
                new += [r1, Node("matmul", [a2, b], dict(n.attrs), [y2])]
                new.append(Node("reshape", [y2], {"shape": out.shape}, [out]))
                count += 1
                continue
            if a.ndim > 3 and a.ndim == b.ndim and same_shape(a.shape[:-2], b.shape[:-2]):
                bt = _flat(a.shape[:-2])
                r1, a3 = _reshape(a, (bt, *a.shape[-2:]), a.name + "_3d")
                r2, b3 = _reshape(b, (bt, *b.shape[-2:]), b.name + "_3d")
                y3 = Value((bt, *out.shape[-2:]), out.dtype, name=out.name + "_3d")
                new += [r1, r2, Node("matmul", [a3, b3], dict(n.attrs), [y3])]
                new.append(Node("reshape", [y3], {"shape": out.shape}, [out]))
                count += 1
                continue
            del ta, tb
        new.append(n)
    graph.nodes = new
    return count


def _sinkable(n: Node) -> bool:
    k = opset.kind(n.op) if n.op != "torch" else Kind.OPAQUE
    if k is Kind.ELEMWISE:
        return n.op not in ("batch_norm", "causal_mask")
    if n.op in ("softmax", "log_softmax"):
        return n.attrs.get("axis", -1) in (-1, n.inputs[0].ndim - 1)
    if n.op == "layer_norm":
        return tuple(n.attrs.get("axes", (-1,))) in ((-1,), (n.inputs[0].ndim - 1,))
    return False


def _sink_one(graph: Graph, n: Node, users: dict, outs: set) -> "list[Node] | None":
    """``n`` reading ``reshape(y)`` rewritten on ``y``'s shape, or None."""
    if not _sinkable(n) or len(n.outputs) != 1:
        return None
    out = n.outputs[0]
    for r_in in n.inputs:
        p = r_in.producer
        if p is None or p.op != "reshape" or r_in.is_const:
            continue
        y = p.inputs[0]
        if len(users.get(id(r_in), ())) != 1 or id(r_in) in outs:
            continue
        # only towards fewer dimensions (the flattened anchor's): it terminates
        if not 1 <= y.ndim < r_in.ndim or not same_shape(out.shape, r_in.shape):
            continue
        merged = _trailing_merge(y.shape, r_in.shape)
        if _key(y.shape[-1]) != _key(r_in.shape[-1]) and (
                not merged or opset.kind(n.op) is not Kind.ELEMWISE):
            continue
        pre: list[Node] = []
        ins: list[Value] = []
        ok = True
        for o in n.inputs:
            if o is r_in:
                ins.append(y)
            elif o.ndim == 0:
                ins.append(o)
            elif same_shape(o.shape, out.shape):
                node, o2 = _reshape(o, y.shape, o.name + "_flat")
                pre.append(node)
                ins.append(o2)
            elif merged:
                shape = _merged_operand(o.shape, out.shape, y.shape)
                if shape is None:
                    ok = False
                    break
                node, o2 = _reshape(o, shape, o.name + "_flat")
                pre.append(node)
                ins.append(o2)
            elif all(_key(d) == "1" for d in o.shape[:-1]) and (
                    _key(o.shape[-1]) in ("1", _key(y.shape[-1]))):
                if o.ndim == 1:
                    ins.append(o)
                else:
                    node, o2 = _reshape(o, (o.shape[-1],), o.name + "_row")
                    pre.append(node)
                    ins.append(o2)
            else:
                ok = False
                break
        if not ok:
            continue
        attrs = dict(n.attrs)
        if n.op in ("softmax", "log_softmax"):
            attrs["axis"] = -1
        if n.op == "layer_norm":
            attrs["axes"] = (-1,)
        mid = Value(y.shape, out.dtype, name=out.name + "_flat")
        return pre + [Node(n.op, ins, attrs, [mid]),
                      Node("reshape", [mid], {"shape": out.shape}, [out])]
    return None


def _trailing_merge(flat: tuple, full: tuple) -> bool:
    """Whether ``flat`` is ``full`` with its trailing two or more dimensions merged into
    one (a pointwise convolution's ``(n, c, h * w)`` of ``(n, c, h, w)``)."""
    lead = len(flat) - 1
    if lead < 0 or len(full) - lead < 2 or not same_shape(flat[:lead], full[:lead]):
        return False
    return _key(flat[-1]) == _key(_flat(full[lead:]))


def _merged_operand(shape: tuple, out: tuple, flat: tuple) -> "tuple | None":
    """The shape a broadcasting operand of an elementwise op on ``out`` takes on ``flat``
    (``out``'s trailing dimensions merged, ``_trailing_merge``): its trailing dimensions
    must be all 1 (a per-channel bias: ``(1, c, 1, 1)`` -> ``(1, c, 1)``) or all ``out``'s;
    None when they are neither."""
    lead = len(flat) - 1
    full = (1,) * (len(out) - len(shape)) + tuple(shape)
    tail = full[lead:]
    if all(_key(d) == "1" for d in tail):
        last: Any = 1
    elif same_shape(tail, out[lead:]):
        last = flat[-1]
    else:
        return None
    return (*full[:lead], last)


def sink_reshapes(graph: Graph) -> int:
    """Move reshapes below the elementwise/row ops that read them (see the module doc)."""
    count = 0
    start = 0
    while True:
        users = graph.users()
        outs = output_ids(graph)
        for i in range(start, len(graph.nodes)):
            rep = _sink_one(graph, graph.nodes[i], users, outs)
            if rep is not None:
                graph.nodes[i:i + 1] = rep
                count += 1
                start = i          # earlier nodes cannot change: rescan from here
                break
        else:
            return count


def merge_reshapes(graph: Graph) -> int:
    """``reshape(reshape(x))`` -> ``reshape(x)``; a reshape to its input's shape -> its
    input."""
    count = 0
    for n in list(graph.nodes):
        if n.op != "reshape":
            continue
        src = n.inputs[0]
        p = src.producer
        if p is not None and p.op == "reshape" and not src.is_const and p in graph.nodes:
            n.inputs = [p.inputs[0]]
            src = p.inputs[0]
            count += 1
        if same_shape(src.shape, n.outputs[0].shape) and n.outputs[0] not in graph.outputs:
            replace_uses(graph, n.outputs[0], src)
            graph.nodes.remove(n)
            count += 1
    return count
