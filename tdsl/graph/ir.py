"""The model graph IR: operator calls over tensors with (possibly symbolic) shapes.

A ``Graph`` is what the PyTorch import (``tdsl.frontend``) produces and what the graph passes
(``tdsl.graph.passes``) rewrite before the nodes are grouped into kernels.  It is small on
purpose:

* a ``Value`` is one tensor: its shape (ints, or tdsl ``Expr`` over symbolic size ``Var``\\ s
  for dynamic batch or sequence dimensions), its dtype, the node that produces it, and for a
  weight or other constant its data (``const``, a NumPy array);
* a ``Node`` is one operator call: ``op`` names an entry of ``tdsl.graph.opset.OPS`` (the graph
  op vocabulary, documented there), ``inputs`` are Values, ``attrs`` hold its static arguments
  (ints, floats, tuples, strings; never tensors), ``outputs`` are the Values it defines.
  The op ``"torch"`` is a fallback: ``attrs["target"]`` is a PyTorch callable run by the
  runtime on ``attrs["args"]``/``attrs["kwargs"]``, pytrees in which each ``Value`` stands for
  the tensor it names (see ``fallback``);
* a ``Graph`` has its run-time ``inputs`` (in call order), ``outputs`` and ``nodes`` in a
  topological order.

Identity, not names, relates Values and Nodes (names are for printing only).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np

from ..errors import TDSLError
from ..expr import Expr

Dim = "int | Expr"

_ids = itertools.count()


class GraphError(TDSLError):
    """A malformed graph: a Value used before it is defined, a node of unknown op, ..."""


@dataclass(eq=False)
class Value:
    """One tensor of the graph (compared by identity)."""

    shape: tuple
    dtype: str
    name: str = ""
    producer: Optional["Node"] = field(default=None, repr=False)
    const: Optional[np.ndarray] = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.id = next(_ids)
        if not self.name:
            self.name = f"v{self.id}"
        self.shape = tuple(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_const(self) -> bool:
        return self.const is not None

    @property
    def is_static(self) -> bool:
        """True when every dimension is a plain int."""
        return all(isinstance(d, (int, np.integer)) for d in self.shape)

    def __repr__(self) -> str:
        dims = ", ".join(str(d) for d in self.shape)
        kind = "const " if self.is_const else ""
        return f"%{self.name}: {kind}{self.dtype}[{dims}]"


@dataclass(eq=False)
class Node:
    """One operator call (compared by identity)."""

    op: str
    inputs: list
    attrs: dict
    outputs: list

    def __post_init__(self) -> None:
        self.id = next(_ids)
        for v in self.outputs:
            v.producer = self

    def __repr__(self) -> str:
        outs = ", ".join(f"%{v.name}" for v in self.outputs)
        ins = ", ".join(f"%{v.name}" for v in self.inputs)
        shown = {k: (getattr(v, "__name__", None) or str(v)) if k == "target" else v
                 for k, v in self.attrs.items() if k not in ("args", "kwargs")}
        attrs = ", ".join(f"{k}={v}" for k, v in shown.items())
        return f"{outs} = {self.op}({ins}{', ' if ins and attrs else ''}{attrs})"


def constant(array: Any, name: str = "") -> Value:
    """A constant Value (a weight): its data is kept and may be folded or pre-packed.
    A 0-d array or NumPy scalar stays 0-d: a scalar, an immediate in the kernels."""
    a = np.asarray(array)
    a = np.ascontiguousarray(a) if a.ndim else a.copy()
    return Value(a.shape, str(a.dtype), name=name, const=a)


def fallback(target: Callable[..., Any], args: Any, kwargs: Any, inputs: Sequence[Value],
             outputs: Sequence[Value], name: str = "") -> Node:
    """A node run by PyTorch: ``target(*args, **kwargs)`` with each Value in the pytrees
    replaced by its tensor.  ``inputs`` lists those Values (for liveness and order);
    ``outputs`` the Values its result defines (a tensor, or a tuple/list of tensors in order).
    """
    return Node("torch", list(inputs), {"target": target, "args": args, "kwargs": kwargs,
                                         "name": name or getattr(target, "__name__", "op")},
                list(outputs))


@dataclass(eq=False)
class Graph:
    """Operator calls over tensors; ``nodes`` in a topological order."""

    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    nodes: list = field(default_factory=list)

    def add(self, op: str, inputs: Sequence[Value], attrs: Optional[dict] = None,
            outputs: Optional[Sequence[Value]] = None) -> Node:
        """Append a node (its outputs must be given: shapes come from the frontend's shape
        information or from ``tdsl.graph.opset.infer``)."""
        node = Node(op, list(inputs), dict(attrs or {}), list(outputs or []))
        self.nodes.append(node)
        return node

    def values(self) -> Iterator[Value]:
        """Every Value: inputs, then each node's inputs and outputs, once each."""
        seen: set[int] = set()
        for v in itertools.chain(self.inputs, *((n.inputs + n.outputs) for n in self.nodes)):
            if id(v) not in seen:
                seen.add(id(v))
                yield v

    def users(self) -> dict:
        """Value id -> the nodes that read it, in order."""
        out: dict[int, list[Node]] = {}
        for n in self.nodes:
            for v in n.inputs:
                out.setdefault(id(v), []).append(n)
        return out

    def verify(self) -> None:
        """Raise GraphError unless every input of a node is defined before it (a graph
        input, a constant or an earlier node's output) and every output is defined."""
        defined = {id(v) for v in self.inputs}
        for n in self.nodes:
            for v in n.inputs:
                if id(v) not in defined and not v.is_const:
                    raise GraphError(f"graph: node {n!r} reads %{v.name} before it is defined")
            for v in n.outputs:
                if id(v) in defined:
                    raise GraphError(f"graph: %{v.name} is defined twice (by {n!r})")
                defined.add(id(v))
        for v in self.outputs:
            if id(v) not in defined and not v.is_const:
                raise GraphError(f"graph: output %{v.name} is never defined")

    def __str__(self) -> str:
        lines = [f"graph({', '.join(repr(v) for v in self.inputs)}):"]
        lines += [f"  {n!r}" for n in self.nodes]
        lines.append(f"  return {', '.join('%' + v.name for v in self.outputs)}")
        return "\n".join(lines)
