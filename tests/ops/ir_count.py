"""Counting what a lowered program does: loop nests, stores, loads, allocations, calls."""
from __future__ import annotations

from typing import Any

from tdsl.expr import BufferLoad, Call
from tdsl.stmt import Allocate, BufferStore, For, IfThenElse, LetStmt, SeqStmt
from tdsl.visitor import post_order_visit


def variants(func: Any) -> list[Any]:
    """The alternative loop nests of a function whose schedule was specialized on its sizes
    (``Schedule.specialize``: ``if c1: A elif c2: B else: C`` at the top), each as a
    PrimFunc of its own; ``[func]`` when there is no such choice."""
    from tdsl.stmt import PrimFunc
    if not isinstance(func.body, IfThenElse) or func.body.else_case is None:
        return [func]
    bodies, node = [], func.body
    while isinstance(node, IfThenElse) and node.else_case is not None:
        bodies.append(node.then_case)
        node = node.else_case
    bodies.append(node)
    return [PrimFunc(func.name, func.params, b, func.size_vars, func.bindings, func.attrs)
            for b in bodies]


def root_nests(func: Any) -> list[For]:
    """The top-level loop nests of a lowered CPU function (each a separate pass)."""
    out: list[For] = []

    def walk(s: Any) -> None:
        if isinstance(s, For):
            out.append(s)
        elif isinstance(s, SeqStmt):
            for x in s.stmts:
                walk(x)
        elif isinstance(s, (Allocate, LetStmt)):
            walk(s.body)
        elif isinstance(s, IfThenElse):
            walk(s.then_case)
            if s.else_case is not None:
                walk(s.else_case)
    walk(func.body)
    return out


def nodes(node: Any, cls: type) -> list:
    from tdsl.stmt import PrimFunc
    if isinstance(node, PrimFunc):
        node = node.body
    found: list = []
    post_order_visit(node, lambda n: found.append(n) if isinstance(n, cls) else None)
    return found


def stores_to(node: Any, name: str) -> int:
    return sum(1 for s in nodes(node, BufferStore) if s.buffer.name == name)


def loads_of(node: Any, name: str) -> int:
    return sum(1 for s in nodes(node, BufferLoad) if s.buffer.name == name)


def allocations(node: Any) -> dict[str, Any]:
    """name -> Allocate node."""
    return {a.buffer.name: a for a in nodes(node, Allocate)}


def calls(node: Any, func: str) -> int:
    return sum(1 for c in nodes(node, Call) if str(c.func) == func)


def const_size(buf: Any) -> "int | None":
    from tdsl.expr import Const
    total = 1
    for d in buf.shape:
        if not isinstance(d, Const):
            return None
        total *= d.value
    return total
