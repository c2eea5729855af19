"""The ``auto_unroll_max_step`` pragma: unroll the small constant loops under a loop.

``s[C].pragma(x, "auto_unroll_max_step", N)`` asks that, inside loop ``x``, every
serial loop of constant extent be unrolled when the copies of the body that
unrolling it (and the loops it holds) makes are at most ``N``.  Loops are decided
innermost first: a loop is a candidate only when every loop inside it was
unrolled (or is vectorized), and its copies are its extent times the largest
number of copies among the loops it holds.  ``N = 0`` unrolls nothing.  Parallel,
thread-bound and non-constant loops are never unrolled, and stop the pragma
there (the loops inside them are still decided with the same ``N``).

Before, with ``max_step = 16``::

    for i in 0..64 (pragma auto_unroll_max_step=16):
      for j in 0..4:
        for k in 0..4:  C[i, j] += ...

after: ``j`` (4 x 4 = 16 copies) and ``k`` are unrolled, ``i`` is not.
"""
from __future__ import annotations

from typing import Any

from ..expr import Const
from ..stmt import For, ForKind, Stmt
from ..visitor import children, map_children

PRAGMA = "pragma_auto_unroll_max_step"


def auto_unroll(stmt: Stmt) -> Stmt:
    """Apply every ``auto_unroll_max_step`` pragma in ``stmt``."""
    return _walk(stmt, None)[0]


def _walk(node: Any, limit: "int | None") -> tuple[Any, int]:
    """(``node`` rewritten, copies of its body unrolling made; -1: a loop under it stays a
    loop, so nothing above it may be unrolled)."""
    if isinstance(node, For):
        own = node.annotations.get(PRAGMA)
        inner_limit = int(own) if own is not None else limit
        body, copies = _walk(node.body, inner_limit)
        new = node if body is node.body else For(node.var, node.min, node.extent, node.kind, body,
                                                 node.thread_tag, node.annotations)
        if node.kind is ForKind.VECTORIZED:
            return new, max(copies, 1)
        if node.kind is ForKind.UNROLLED and isinstance(node.extent, Const):
            return new, (node.extent.value * copies if copies >= 0 else -1)
        if limit is None or own is not None or node.kind is not ForKind.SERIAL or \
                not isinstance(node.extent, Const) or copies < 0:
            return new, -1
        total = node.extent.value * max(copies, 1)
        if total > limit:
            return new, -1
        return For(node.var, node.min, node.extent, ForKind.UNROLLED, body, node.thread_tag,
                   node.annotations), total
    if not isinstance(node, Stmt):
        return node, 1
    worst = [1]

    def visit(child: Any) -> Any:
        if not isinstance(child, Stmt):
            return child
        new, c = _walk(child, limit)
        worst[0] = -1 if c < 0 or worst[0] < 0 else max(worst[0], c)
        return new
    if not any(isinstance(c, Stmt) for c in children(node)):
        return node, 1
    return map_children(node, visit), worst[0]
