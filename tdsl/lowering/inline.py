"""Substitute inlined stages into the bodies of the stages that read them."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..expr import Reduce, TensorLoad
from ..visitor import substitute, transform

if TYPE_CHECKING:
    from tdsl.schedule import Schedule, Stage


def map_body(body: tuple, fn: Any) -> tuple:
    """Apply an expression rewrite to every body expression (reduction parts included)."""
    out = []
    for b in body:
        if isinstance(b, Reduce):
            out.append(Reduce(b.combiner, tuple(fn(s) for s in b.source), b.axis, fn(b.condition),
                              b.value_index, tuple(fn(i) for i in b.init)))
        else:
            out.append(fn(b))
    return tuple(out)


def inlined_bodies(sch: "Schedule") -> dict["Stage", tuple]:
    """Each compute stage's body with every inlined producer substituted in."""
    from tdsl.schedule.stage import AttachType
    bodies: dict = {}

    def rewrite(expr: Any) -> Any:
        def pre(n: Any) -> Any:
            if isinstance(n, TensorLoad):
                st = sch[n.tensor]
                if st.attach_type is AttachType.INLINE:
                    idx = [transform(i, pre=pre) for i in n.indices]
                    inner = bodies[st][n.tensor.value_index]
                    return substitute(inner, {iv.var: e for iv, e in zip(st.op.axis, idx)})
            return None
        return transform(expr, pre=pre)

    for st in sch.stages:
        if not st.is_placeholder:
            bodies[st] = map_body(st.op.body, rewrite)
    return bodies
