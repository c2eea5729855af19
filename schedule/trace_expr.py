"""Symbolic schedule arguments (``split(i, nparts=n)``) as JSON, by position, not name.

A size expression is stored as a small tree whose variables are positions in
the computation's list of free variables (``computation_vars``), so a trace
replays on a fresh copy of the same computation (other objects, maybe other
names) and the variable resolves to that copy's own size variable.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tdsl.expr import Add, Const, Expr, FloorDiv, FloorMod, Max, Min, Mul, Sub, Var
from tdsl.visitor import post_order_visit

if TYPE_CHECKING:
    from .schedule import Schedule

_OPS = {cls.__name__: cls for cls in (Add, Sub, Mul, FloorDiv, FloorMod, Min, Max)}


class ExprEncodeError(ValueError):
    """An expression the trace cannot store (caller turns it into a ScheduleError)."""


def computation_vars(sch: "Schedule") -> list[Var]:
    """Free variables of the computation (sizes, scalar params), in first-use order.

    The order depends only on the structure of the original operations, so two
    copies of one computation list corresponding variables at the same positions.
    """
    from .schedule import _topo_ops
    ops = _topo_ops(sch.outputs)
    loop_vars: set[Var] = set()
    for op in ops:
        for iv in getattr(op, "axis", ()) + tuple(getattr(op, "reduce_axis", ())):
            loop_vars.add(iv.var)
    order: list[Var] = []
    seen: set[Var] = set()

    def visit(n: Any) -> None:
        if isinstance(n, Var) and n not in seen and n not in loop_vars:
            seen.add(n)
            order.append(n)
        if hasattr(n, "dom") and getattr(n, "dom", None) is not None:    # reduce axes in bodies
            for e in (n.dom.min, n.dom.extent):
                post_order_visit(e, visit)

    for op in ops:
        for s in op.outputs[0].shape:
            post_order_visit(s, visit)
        for iv in getattr(op, "axis", ()) + tuple(getattr(op, "reduce_axis", ())):
            post_order_visit(iv.dom.min, visit)
            post_order_visit(iv.dom.extent, visit)
        for b in getattr(op, "body", ()):
            post_order_visit(b, visit)
    return order


def encode(e: Expr, variables: list[Var]) -> Any:
    """JSON form of an integer expression over ``variables``."""
    if isinstance(e, Const):
        return {"const": e.value, "dtype": str(e.dtype)}
    if isinstance(e, Var):
        for k, v in enumerate(variables):
            if v is e:
                return {"var": k, "name": e.name}
        raise ExprEncodeError(f"variable '{e.name}' is not a size of this computation")
    if type(e).__name__ in _OPS and type(e) is _OPS[type(e).__name__]:
        return {"op": type(e).__name__, "a": encode(e.a, variables), "b": encode(e.b, variables)}
    raise ExprEncodeError(f"{type(e).__name__} is not supported in a recorded size expression "
                          f"(use + - * // % min max)")


def decode(d: Any, variables: list[Var]) -> Expr:
    """The expression of ``encode``'s output, over this computation's ``variables``."""
    if not isinstance(d, dict):
        raise ExprEncodeError(f"malformed size expression {d!r}")
    if "const" in d:
        return Const(d["const"], d.get("dtype", "int32"))
    if "var" in d:
        k = d["var"]
        if not isinstance(k, int) or not 0 <= k < len(variables):
            raise ExprEncodeError(f"size variable #{k} does not exist in this computation "
                                  f"(it has {len(variables)})")
        return variables[k]
    cls = _OPS.get(d.get("op"))
    if cls is None:
        raise ExprEncodeError(f"malformed size expression {d!r}")
    return cls(decode(d["a"], variables), decode(d["b"], variables))


def render(d: Any) -> str:
    """Readable form of an encoded expression (variables by their recorded names)."""
    if not isinstance(d, dict):
        return repr(d)
    if "const" in d:
        return repr(d["const"])
    if "var" in d:
        return str(d.get("name", f"${d['var']}"))
    sym = {"Add": "+", "Sub": "-", "Mul": "*", "FloorDiv": "//", "FloorMod": "%"}.get(d["op"])
    if sym is None:
        return f"{d['op'].lower()}({render(d['a'])}, {render(d['b'])})"
    return f"({render(d['a'])} {sym} {render(d['b'])})"
