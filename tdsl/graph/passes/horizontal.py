"""Horizontal fusion: GEMMs that read the same input against constant weights become one.

A transformer layer projects its hidden states three times, ``q = x Wq^T``, ``k = x Wk^T``,
``v = x Wv^T``: three GEMMs that each stream ``x``.  ``merge_parallel_gemms`` rewrites N >= 2
such products into one GEMM against the weights concatenated along the output axis (and
the biases likewise, folded once, at compile time), followed by one ``slice`` per product
along the last axis:

    dense(x, Wq, bq), dense(x, Wk, bk), dense(x, Wv, bv)
      ->  y = dense(x, [Wq; Wk; Wv], [bq; bk; bv]);  q, k, v = y[..., :nq], ...

The slices cost no copy where their readers fuse them: a ``matmul`` or in-place
``attention`` reads a unit-step slice through the layout chain that splits heads
(``fusion`` rule 5), a row or reduction op takes it as its prologue, and an injective chain
that is a kernel anyway (the heads-first permute) reads it in that kernel.

When the merge applies (``_key`` and ``_pays``): the products are ``dense`` nodes, or
``matmul`` nodes with the shared value as their first operand, no ``transpose_a`` and a
2-D constant second operand; all of one op with the same attrs (same ``transpose_b``, same
weight layout), the same weight dtype and reduction size, all with a constant bias or all
without; the shared input is not a constant.  A weight that is not a constant (a graph
input, a computed value) is left alone: its concatenation would cost a copy per call.  A
product whose readers would need the slice in memory -- a graph output, a ``torch``
fallback, a ``dense``/``conv2d`` (which read their input too often to pay the view's index
arithmetic), an elementwise reader (the GEMM's epilogue today), several readers of the
product or of a free reshape of it, an attention that does not read views -- stays its own
GEMM; the merge needs at least two products that pay.

Symbolic sizes: the frontend flattens a linear's input to ``(batch * seq, K)``.  Where each
product's readers are reshapes that split those rows again (the head split), the slice is
taken of a ``(batch, seq, N)`` view of the merged output (``_split_lead``), so that the
kernel reading it binds plain size variables.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .. import opset
from ..ir import Graph, Node, Value, constant
from ..opset import Kind
from .flatten import _flat, same_shape
from .fusion import attention_reads_views
from .rewrite import output_ids

#: Attrs that do not keep two products apart (they describe how a node came to be).
_NOTES = ("folded",)


def _weight_axis(n: Node) -> Optional[int]:
    """The axis of ``n``'s 2-D constant weight that indexes its output features, or None
    where ``n`` is no mergeable product."""
    if n.op == "dense":
        layout = n.attrs.get("weight_layout", "NK")
        if layout not in ("NK", "KN") or len(n.inputs) not in (2, 3):
            return None
        return 0 if layout == "NK" else 1
    if n.op == "matmul" and len(n.inputs) == 2 and not n.attrs.get("transpose_a"):
        if n.inputs[0].ndim < 2:
            return None
        return 0 if n.attrs.get("transpose_b") else 1
    return None


def _key(n: Node) -> Optional[tuple]:
    """What must agree for ``n`` to merge with another product of the same input."""
    ax = _weight_axis(n)
    if ax is None or len(n.outputs) != 1:
        return None
    x, w = n.inputs[0], n.inputs[1]
    bias = n.inputs[2] if len(n.inputs) > 2 else None
    if x.is_const or not w.is_const or w.ndim != 2:
        return None
    if bias is not None and (not bias.is_const or bias.ndim != 1
                             or bias.shape[0] != w.shape[ax] or bias.dtype != w.dtype):
        return None
    attrs = tuple(sorted((k, repr(v)) for k, v in n.attrs.items() if k not in _NOTES))
    return (id(x), n.op, attrs, w.dtype, w.shape[1 - ax], bias is not None,
            n.outputs[0].dtype)


def _pays(v: Value, users: dict, outs: set, viewed: bool = True) -> bool:
    """Whether every reader of ``v`` (a product, or a layout op's result on it) fuses a
    slice of the merged output without a copy kernel of its own (module docstring).
    ``viewed``: ``v`` aliases the product's buffer (only free reshapes so far)."""
    if id(v) in outs:
        return False
    readers = list(dict.fromkeys(users.get(id(v), [])))
    if viewed and len(readers) > 1:
        return False        # the slice would be materialized for its readers: a copy
    for r in readers:
        if r.op == "torch":
            return False
        if r.op in ("reshape", "transpose"):
            if not _pays(r.outputs[0], users, outs, viewed and r.op == "reshape"):
                return False
            continue
        if r.op == "matmul":
            continue
        if r.op == "attention":
            if viewed and not attention_reads_views(r):
                return False
            continue
        k = opset.kind(r.op)
        if k in (Kind.ROW, Kind.REDUCE, Kind.INJECTIVE):
            continue
        if k is Kind.ELEMWISE and not viewed:
            continue        # after a transpose: that copy kernel takes the slice in
        return False        # an epilogue today, an anchor reading it, ...
    return True


def _split_lead(out: Value, users: dict) -> Optional[tuple]:
    """The leading dimensions that every reader of ``out`` (a 2-D product ``(M, n)``)
    reshapes ``M`` into, keeping ``n`` in the trailing ones -- ``(batch, seq)`` for a head
    split of a flattened ``(batch * seq, n)`` -- or None.  The slice is then taken of a
    ``(*lead, N)`` view of the merged output, so that the kernel reading it sees the plain
    size variables and not a derived ``batch * seq`` that it could not split again."""
    if out.ndim != 2:
        return None
    readers = list(dict.fromkeys(users.get(id(out), [])))
    lead: Optional[tuple] = None
    for r in readers:
        if r.op != "reshape":
            return None
        shape = tuple(r.outputs[0].shape)
        k, tail = len(shape), 1
        while k > 1 and isinstance(shape[k - 1], int) and tail < out.shape[1]:
            k -= 1
            tail *= shape[k]
        if tail != out.shape[1] or not same_shape((_flat(shape[:k]),), (out.shape[0],)):
            return None
        if lead is not None and not same_shape(lead, shape[:k]):
            return None
        lead = shape[:k]
    return lead if lead is not None and len(lead) > 1 else None


def _merge(group: list[Node], users: dict) -> list[Node]:
    """One GEMM for ``group`` (products of one key) and a slice per product, whose
    outputs are the products' own Values (their readers are left as they are)."""
    first = group[0]
    ax = _weight_axis(first)
    ws = [n.inputs[1] for n in group]
    w = constant(np.concatenate([v.const for v in ws], axis=ax),
                 f"{ws[0].name}_cat{len(ws)}")
    ins = [first.inputs[0], w]
    if len(first.inputs) > 2:
        bs = [n.inputs[2] for n in group]
        ins.append(constant(np.concatenate([b.const for b in bs]),
                            f"{bs[0].name}_cat{len(bs)}"))
    attrs = {k: v for k, v in first.attrs.items() if k not in _NOTES}
    folded = tuple(f for n in group for f in n.attrs.get("folded", ()))
    if folded:
        attrs["folded"] = folded
    outs = [n.outputs[0] for n in group]
    total = int(w.shape[ax])
    wide = Value((*outs[0].shape[:-1], total), outs[0].dtype,
                 name=f"{outs[0].name}_cat{len(outs)}")
    nodes = [Node(first.op, ins, attrs, [wide])]
    views: dict[str, Value] = {}       # (*lead, total) views of ``wide``, by lead shape
    start = 0
    for n, o in zip(group, outs):
        width = int(n.inputs[1].shape[ax])
        src = wide
        lead = _split_lead(o, users)
        if lead is not None:
            key = str(lead)
            if key not in views:
                views[key] = Value((*lead, total), wide.dtype, name=f"{wide.name}_v{len(views)}")
                nodes.append(Node("reshape", [wide], {"shape": (*lead, total)}, [views[key]]))
            src = views[key]
            mid = Value((*lead, width), o.dtype, name=o.name + "_part")
            nodes.append(_slice(src, start, width, mid))
            nodes.append(Node("reshape", [mid], {"shape": tuple(o.shape)}, [o]))
        else:
            nodes.append(_slice(src, start, width, o))
        start += width
    return nodes


def _slice(src: Value, start: int, width: int, out: Value) -> Node:
    return Node("slice", [src], {"axis": src.ndim - 1, "start": start, "end": start + width,
                                 "step": 1, "from": "horizontal"}, [out])


def merge_parallel_gemms(graph: Graph) -> int:
    """Merge the products that share an input (module docstring); returns how many
    GEMMs were removed."""
    users = graph.users()
    outs = output_ids(graph)
    groups: dict[tuple, list[Node]] = {}
    for n in graph.nodes:
        key = _key(n)
        if key is not None and _pays(n.outputs[0], users, outs):
            groups.setdefault(key, []).append(n)
    first_of: dict[int, list[Node]] = {}
    gone: set[int] = set()
    for group in groups.values():
        if len(group) < 2:
            continue
        first_of[id(group[0])] = group
        gone.update(id(n) for n in group)
    if not first_of:
        return 0
    new: list[Any] = []
    removed = 0
    for n in graph.nodes:
        if id(n) in first_of:
            group = first_of[id(n)]
            new.extend(_merge(group, users))
            removed += len(group) - 1
        elif id(n) not in gone:
            new.append(n)
    graph.nodes = new
    return removed
