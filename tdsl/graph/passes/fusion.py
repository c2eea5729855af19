"""Fusion: deciding the kernel boundaries of the whole graph.

Each graph node ends up in one of three kinds of step, in a topological order:

* a ``Group`` -- nodes built and compiled as one kernel with one output (the value of its
  last node, its *tail*);
* an ``Alias`` -- a ``reshape`` of a value that is already in memory (a graph input, a
  constant, another step's output): row-major buffers reshape for free, no kernel;
* a ``Fallback`` -- a ``torch`` node, run by PyTorch.

The rules (TVM's and Inductor's, on the graph ops' ``opset.Kind``):

1. an anchor (conv2d, dense, matmul) starts a group and takes its elementwise epilogue
   (bias, batch-norm scale/shift, activation, residual add) of the same shape: each
   epilogue node joins when the value it extends has no other reader;
2. a row op (softmax, layer_norm) or a reduction (sum/mean/amax, pooling) starts a group
   and takes its elementwise prologue (a group of elementwise/injective nodes read only by
   it), and then its elementwise epilogue as in 1;
3. elementwise and injective nodes join the group of the value they extend when it has no
   other reader; otherwise they start an elementwise group, which later becomes a prologue
   (rule 2) or stays a kernel of its own;
4. a value read by several steps, or a graph output, is materialized (ends its group);
5. a ``matmul`` or ``attention`` operand computed only by layout ops (transpose, reshape:
   attention's heads-first permutes) is read through them, not materialized: the GEMM
   packs its operand panels anyway, and the fused attention copies each query block
   (transposed) once per task and reads keys and values along their contiguous head
   dimension, which a (B, S, H, D) -> (B, H, S, D) permute keeps -- while the keys are
   few (``attention_reads_views``).  (Not for dense/conv2d, whose inner loops would pay
   the index arithmetic of a transposed view on every load.)  A unit-step slice counts as
   a layout op here (``layout_only``): the part of a merged Q/K/V projection
   (``horizontal``) that a head split reads is a strided view of the wide GEMM output.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from tdsl.ops._util import const_value

from ..ir import Graph, Node, Value
from ..opset import Kind, kind


#: Ops that only move data (rule 5).
LAYOUT_OPS = frozenset({"transpose", "reshape"})
#: A fused attention reads permuted operands in place up to this many keys (a constant).
#: Each query block streams all of a head's keys and values; through the view of a
#: (B, S, H, D) tensor their rows lie H * D apart.  Measured (12 heads, d 64, one thread,
#: ms, in place / heads-first copies): 128: 1.09 / 1.64 and 1.98 / 1.75 (min), 256:
#: 8.6 / 10.1 (min), causal 6.7 / 7.2, 512: 26.9 / 25.1, causal 11.6 / 13.8; but 2048:
#: 966 / 541 (inputs already heads-first), causal 667 / 543; 1024: 213 / 222, causal
#: 201 / 169 -- past a few hundred keys a head's strided keys leave the cache.
VIEW_MAX_SEQ_K = 512


def layout_only(n: Node) -> bool:
    """Whether ``n`` only moves data in a way a GEMM or attention reads in place (rule 5):
    a layout op, or a unit-step slice (a merged projection's part: ``horizontal``)."""
    return n.op in LAYOUT_OPS or (n.op == "slice" and int(n.attrs.get("step", 1)) == 1)


def attention_reads_views(n: Node) -> bool:
    """Whether the fused attention ``n`` reads its layout-only operands in place."""
    seq_k = const_value(n.inputs[1].shape[-2])
    return seq_k is not None and seq_k <= VIEW_MAX_SEQ_K


@dataclass(eq=False)
class Group:
    """Nodes fused into one kernel; ``nodes[-1]``'s output is the kernel's output."""

    kind: Kind
    nodes: list = field(default_factory=list)
    inputs: list = field(default_factory=list)    # filled by ``fuse``
    merged: bool = False                          # absorbed into another group

    @property
    def output(self) -> Value:
        return self.nodes[-1].outputs[0]

    @property
    def anchor(self) -> Node:
        for n in self.nodes:
            if kind(n.op) is not Kind.ELEMWISE and kind(n.op) is not Kind.INJECTIVE:
                return n
        return self.nodes[-1]


@dataclass(eq=False)
class Alias:
    """``node`` (a reshape) views its input's buffer with another shape."""

    node: Node


@dataclass(eq=False)
class Fallback:
    node: Node


Step = Union[Group, Alias, Fallback]


def _same_shape(a: Value, b: Value) -> bool:
    return len(a.shape) == len(b.shape) and all(
        x == y if isinstance(x, int) and isinstance(y, int) else str(x) == str(y)
        for x, y in zip(a.shape, b.shape))


def fuse(graph: Graph) -> list[Step]:
    """The graph's steps (see the module docstring), in an order that runs it."""
    users: dict[int, set] = {}
    for n in graph.nodes:
        for v in n.inputs:
            users.setdefault(id(v), set()).add(id(n))
    outs = {id(v) for v in graph.outputs}
    group_of: dict[int, Group] = {}       # node id -> its group
    alias_out: set[int] = set()           # values defined by aliases
    order: dict[int, int] = {}            # step -> position of its last node
    steps: list[Step] = []

    def only_reader(v: Value, n: Node) -> bool:
        return users.get(id(v), set()) == {id(n)} and id(v) not in outs

    def open_group(v: Value) -> "Group | None":
        """The group ``v`` is the tail of, if ``v`` may be extended (no other reader)."""
        p = v.producer
        if p is None or v.is_const or id(p) not in group_of:
            return None
        g = group_of[id(p)]
        if g.merged or g.nodes[-1] is not p:
            return None
        return g

    def join(g: Group, n: Node) -> None:
        g.nodes.append(n)
        group_of[id(n)] = g

    def absorb(into: Group, g: Group) -> None:
        """Put ``g``'s nodes before ``into``'s (``g`` is a prologue read only by it)."""
        into.nodes[:0] = g.nodes
        for m in g.nodes:
            group_of[id(m)] = into
        g.merged = True

    for i, n in enumerate(graph.nodes):
        if n.op == "torch":
            steps.append(Fallback(n))
            order[id(steps[-1])] = i
            continue
        k = kind(n.op)
        if n.op == "reshape":
            src = n.inputs[0]
            g = open_group(src)
            if g is None or g.kind is not Kind.ELEMWISE or not only_reader(src, n):
                steps.append(Alias(n))           # the input will be in memory: a view
                order[id(steps[-1])] = i
                alias_out.add(id(n.outputs[0]))
                continue
        if k in (Kind.ELEMWISE, Kind.INJECTIVE):
            cands = []
            for v in n.inputs:
                g = open_group(v)
                if g is not None and only_reader(v, n) and g not in cands:
                    cands.append(g)
            rank = {Kind.ANCHOR: 0, Kind.ROW: 1, Kind.REDUCE: 2, Kind.ELEMWISE: 3}
            cands.sort(key=lambda g: rank[g.kind])
            target = None
            for g in cands:
                if g.kind is Kind.ELEMWISE or (
                        k is Kind.ELEMWISE and _same_shape(n.outputs[0], g.output)):
                    target = g
                    break
            if target is None:
                target = Group(Kind.ELEMWISE)
                steps.append(target)
            for g in cands:   # other elementwise chains read only here: inline them too
                if g is not target and g.kind is Kind.ELEMWISE:
                    absorb(target, g)
            join(target, n)
            order[id(target)] = i
            continue
        g = Group(k)
        steps.append(g)
        if n.op == "matmul" or (n.op == "attention" and attention_reads_views(n)):
            # rule 5: layout-only operands are read in place
            for v in n.inputs:
                pg = open_group(v)
                if (pg is not None and pg.kind is Kind.ELEMWISE and only_reader(v, n)
                        and all(layout_only(m) for m in pg.nodes)):
                    absorb(g, pg)
        if k in (Kind.ROW, Kind.REDUCE):
            for v in n.inputs:
                pg = open_group(v)
                if pg is not None and pg.kind is Kind.ELEMWISE and only_reader(v, n):
                    absorb(g, pg)
        join(g, n)
        order[id(g)] = i
    live = [s for s in steps if not (isinstance(s, Group) and s.merged)]
    live.sort(key=lambda s: order[id(s)])
    for s in live:
        if isinstance(s, Group):
            inside = {id(v) for m in s.nodes for v in m.outputs}
            seen: set[int] = set()
            s.inputs = []
            for m in s.nodes:
                for v in m.inputs:
                    if id(v) not in inside and id(v) not in seen:
                        seen.add(id(v))
                        s.inputs.append(v)
    return live
