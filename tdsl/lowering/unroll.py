"""The ``auto_unroll_max_step`` pragma: unroll the small constant loops under a loop.

``s[C].pragma(x, "auto_unroll_max_step", N)`` asks that, inside loop ``x``, every
serial loop of constant extent be unrolled when the statements that unrolling it
(and the loops it holds) leaves, its *steps*, are at most ``N``.  Loops are decided
innermost first: a loop is a candidate only when every loop inside it was unrolled
(or is vectorized); its steps are its extent times the steps of its body (the sum
over its statements; a vectorized loop counts its body once per ``VECTOR_STEP``
lanes, so wide vectors weigh more).  ``N = 0`` unrolls nothing.  Parallel,
thread-bound and non-constant loops are never unrolled, and stop the pragma
there (the loops inside them are still decided with the same ``N``).

Before, with ``max_step = 16``::

    for i in 0..64 (pragma auto_unroll_max_step=16):
      for j in 0..4:
        for k in 0..4:  C[i, j] += ...

after: ``k`` is unrolled (4 steps); ``j`` is not (4 x (1 + 4) = 20 steps: the
initialization and the four updates), nor ``i``; with ``max_step = 32`` ``j`` is too.
"""
from __future__ import annotations

from typing import Any

from ..expr import Const
from ..stmt import For, ForKind, Stmt
from ..visitor import children, map_children

PRAGMA = "pragma_auto_unroll_max_step"
#: Lanes of a vectorized loop that count as one copy (a 32-lane loop counts as 4).
VECTOR_STEP = 8


def auto_unroll(stmt: Stmt) -> Stmt:
    """Apply every ``auto_unroll_max_step`` pragma in ``stmt``."""
    return _walk(stmt, None)[0]


def _walk(node: Any, limit: "int | None") -> tuple[Any, int]:
    """(``node`` rewritten, the statements unrolling it leaves (its *steps*); -1: a loop
    under it stays a loop, so nothing above it may be unrolled)."""
    if isinstance(node, For):
        own = node.annotations.get(PRAGMA)
        inner_limit = int(own) if own is not None else limit
        body, steps = _walk(node.body, inner_limit)
        new = node if body is node.body else For(node.var, node.min, node.extent, node.kind, body,
                                                 node.thread_tag, node.annotations)
        const = isinstance(node.extent, Const)
        if node.kind is ForKind.VECTORIZED:
            lanes = node.extent.value if const else VECTOR_STEP
            return new, (steps * -(-lanes // VECTOR_STEP) if steps >= 0 else -1)
        if node.kind is ForKind.UNROLLED and const:
            return new, (node.extent.value * steps if steps >= 0 else -1)
        if limit is None or own is not None or node.kind is not ForKind.SERIAL or \
                not const or steps < 0:
            return new, -1
        total = node.extent.value * steps
        if total > limit:
            return new, -1
        return For(node.var, node.min, node.extent, ForKind.UNROLLED, body, node.thread_tag,
                   node.annotations), total
    if not isinstance(node, Stmt):
        return node, 0
    kids = [c for c in children(node) if isinstance(c, Stmt)]
    if not kids:
        return node, 1
    total = [0]

    def visit(child: Any) -> Any:
        if not isinstance(child, Stmt):
            return child
        new, c = _walk(child, limit)
        total[0] = -1 if c < 0 or total[0] < 0 else total[0] + c
        return new
    return map_children(node, visit), total[0]
