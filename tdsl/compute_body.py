"""A compute's body, checked and normalized before it becomes a ``ComputeOp``.

``td.compute`` hands the expressions its lambda returned to ``make_compute``, which

- refuses bodies nested deeper than ``tdsl.deep.MAX_EXPR_DEPTH``;
- checks scoping: every variable is an axis of this compute, a reduce axis listed
  by an enclosing reduction (each listed once), or a symbolic size -- so a reduce
  axis missing from ``axis=``, or a loop variable of another compute, is refused
  here, naming the compute and the variable, not deep in a backend;
- lifts reductions used inside larger expressions (``td.sum(...) / n``,
  ``td.exp(td.max(...))``) into stages of their own, ``<name>.red0``, ... over the
  data axes each uses, which the compute then reads (as Halide does); inside a
  branch of ``if_then_else`` the branch's guard -- the condition with its own
  reductions already lifted -- joins the reduction's condition;
- gives every ``ComputeOp`` reduce axes of its own: a reduce axis already owned by
  another compute is replaced by a fresh copy (same name and range), so two stages
  never share a loop variable.  Schedule the copy through ``C.op.reduce_axis``.
"""
from __future__ import annotations

import weakref
from typing import Any, Sequence

from .deep import check_depth
from .errors import TDSLError
from .expr import Const, Expr, Not, Reduce, Select, SizeVar, TensorLoad, Var
from .tensor import ComputeOp, IterKind, IterVar, Range
from .visitor import children, free_vars, substitute, transform


def make_compute(name: str, tag: str, attrs: dict, axis: Sequence[IterVar],
                 body: Sequence[Expr]) -> ComputeOp:
    """The ``ComputeOp`` for ``body`` over ``axis``, checked and normalized (module doc)."""
    check_depth(f"compute '{name}'", body)
    body = _unwrap_itervars(body)
    _check_scopes(name, axis, body)
    if not _is_top_reduction(body):
        body = _lift_reductions(name, axis, body)
    else:
        body = _own_reduce_axes(body)
    op = ComputeOp(name, tag, attrs, axis, body)
    for iv in op.reduce_axis:
        iv.owner = weakref.ref(op)
    return op


def _unwrap_itervars(body: Sequence[Expr]) -> list[Expr]:
    """``body`` with every IterVar used as an operand replaced by its variable.

    The public builders convert an IterVar to its variable, but a node built directly
    (``Cast(k, ...)``) may hold the IterVar itself, which the scope check, renaming by
    substitution and every pass after would not see as a use of the variable."""
    found: list[bool] = []
    for b in body:
        _walk(b, lambda n: found.append(True) if isinstance(n, IterVar) else None)
    if not found:
        return list(body)
    memo: dict[int, Expr] = {}      # by id: the values of one reduction keep sharing them

    def fix(e: Expr) -> Expr:
        if id(e) not in memo:
            memo[id(e)] = transform(e, pre=pre)
        return memo[id(e)]

    def pre(n: Any) -> Any:
        if isinstance(n, IterVar):
            return n.var
        if isinstance(n, Reduce):
            return Reduce(n.combiner, tuple(fix(x) for x in n.source), n.axis,
                          fix(n.condition), n.value_index, tuple(fix(x) for x in n.init))
        return None
    return [fix(b) for b in body]


# ---- scoping -----------------------------------------------------------------------------
def _check_scopes(name: str, axis: Sequence[IterVar], body: Sequence[Expr]) -> None:
    sizes: set[Var] = set()
    for iv in axis:
        sizes |= free_vars(iv.dom.extent) | free_vars(iv.dom.min)
    reduce_vars: dict[Var, IterVar] = {}   # every reduce axis listed anywhere in the body
    loads: list[TensorLoad] = []

    def collect(n: Any) -> None:
        if isinstance(n, Reduce):
            for iv in n.axis:
                reduce_vars[iv.var] = iv
        elif isinstance(n, TensorLoad):
            loads.append(n)
    for b in body:
        _walk(b, collect)
    for ld in loads:
        for s in ld.tensor.shape:
            sizes |= free_vars(s)
    data = {iv.var for iv in axis}
    checker = _ScopeChecker(name, axis, sizes, reduce_vars)
    seen: set[int] = set()
    for b in body:
        if isinstance(b, Reduce) and id(b.source) in seen:
            continue   # the other values of one multi-value reduction: checked once
        if isinstance(b, Reduce):
            seen.add(id(b.source))
        checker.visit(b, frozenset(data), None)


class _ScopeChecker:
    def __init__(self, name: str, axis: Sequence[IterVar], sizes: set[Var],
                 reduce_vars: dict[Var, IterVar]):
        self.name = name
        self.axis_names = [iv.name for iv in axis]
        self.sizes = sizes
        self.reduce_vars = reduce_vars

    def visit(self, e: Any, scope: frozenset, inside: "Reduce | None") -> None:
        """Check ``e`` with the variables of ``scope`` bound (iteratively: bodies may be deep)."""
        stack: list[tuple[Any, frozenset, "Reduce | None"]] = [(e, scope, inside)]
        while stack:
            n, sc, red = stack.pop()
            if isinstance(n, Var):
                # float/bool variables are scalar parameters (td.var(name, "float32")): free
                if n not in sc and not isinstance(n, SizeVar) and n not in self.sizes \
                        and n.dtype.is_int:
                    raise TDSLError(self._unbound(n))
            elif isinstance(n, Reduce):
                stack.extend(self._reduce(n, sc, red))
            else:
                stack.extend((c, sc, red) for c in children(n))

    def _reduce(self, r: Reduce, scope: frozenset, inside: "Reduce | None") -> list:
        """Check the axes of ``r``; return its operands to check, with their scopes."""
        red = r.combiner.name
        if inside is not None:
            raise TDSLError(f"compute '{self.name}': a {red} reduction is nested inside a "
                            f"{inside.combiner.name} reduction's value; compute the inner "
                            f"reduction in a separate stage and read it")
        ids: set[int] = set()
        inner = set(scope)
        for iv in r.axis:
            if id(iv) in ids:
                raise TDSLError(f"compute '{self.name}': reduce axis '{iv.name}' is listed twice "
                                f"in {red}(..., axis=[{', '.join(a.name for a in r.axis)}]); "
                                f"list each axis once")
            if iv.var in scope:
                raise TDSLError(f"compute '{self.name}': axis '{iv.name}' of a {red} reduction is "
                                f"already bound here (a data axis or an enclosing reduction's)")
            ids.add(id(iv))
            for x in (iv.dom.min, iv.dom.extent):
                self.visit(x, frozenset(inner), None)
            inner.add(iv.var)
        inner_scope = frozenset(inner)
        return ([(s, inner_scope, r) for s in r.source] + [(r.condition, inner_scope, r)]
                + [(i, scope, r) for i in r.init])

    def _unbound(self, v: Var) -> str:
        head = f"compute '{self.name}': variable '{v.name}'"
        iv = self.reduce_vars.get(v)
        if iv is not None:
            return (f"{head} is a reduce axis used outside the reduction that lists it; "
                    f"a reduce axis may only appear inside td.sum/max/min(..., axis=[..., "
                    f"{v.name}, ...])")
        return (f"{head} is not bound: it is neither an axis of '{self.name}' "
                f"({', '.join(self.axis_names)}) nor a reduce axis listed in an enclosing "
                f"reduction's axis=; list reduce axes in axis=[...], and read another "
                f"compute's values by indexing its tensor, not through its loop variables")


def _walk(e: Any, fn: Any) -> None:
    """Pre-order visit of ``e`` (each shared subtree once)."""
    stack = [e]
    seen: set[int] = set()
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        fn(n)
        stack.extend(children(n))


# ---- reductions inside expressions -----------------------------------------------------------
def _is_top_reduction(body: Sequence[Expr]) -> bool:
    """True if every output is a value of one reduction (one call of one reducer)."""
    r0 = body[0]
    if not isinstance(r0, Reduce):
        return False
    return all(isinstance(r, Reduce) and r.combiner is r0.combiner and _same_call(r, r0)
               for r in body)


def _same_call(a: Reduce, b: Reduce) -> bool:
    return (len(a.axis) == len(b.axis) and all(x is y for x, y in zip(a.axis, b.axis))
            and len(a.source) == len(b.source) and all(x is y for x, y in zip(a.source, b.source))
            and a.condition is b.condition)


def _lift_reductions(name: str, axis: Sequence[IterVar], body: Sequence[Expr]) -> list[Expr]:
    """``body`` with each reduction replaced by a load of a new stage computing it.

    The stage runs over the data axes the reduction uses (not all of the compute's), and
    a reduction in a branch of ``if_then_else`` reduces only where that branch is taken
    (the guards join its ``where=`` condition), so the guard still protects its loads.
    """
    made: list[tuple[Reduce, tuple, ComputeOp, list[Var]]] = []
    conds: dict[tuple, Expr] = {}    # lifted conditions, so equal guards stay one object

    def lift(e: Expr, guards: tuple) -> Expr:
        def pre(n: Any) -> Any:
            if isinstance(n, Select):
                # the guards are the *lifted* condition: a reduction in it is a stage of its
                # own, read by the branches' stages, never nested in their reductions
                key = (id(n.cond), *map(id, guards))
                c = conds.get(key)
                if c is None:
                    c = conds[key] = lift(n.cond, guards)
                return Select(c, lift(n.true_value, guards + (c,)),
                              lift(n.false_value, guards + (Not(c),)))
            if isinstance(n, Reduce):
                return lifted(n, guards)
            return None
        return transform(e, pre=pre)

    def lifted(n: Reduce, guards: tuple) -> Expr:
        for r, g, op, used in made:
            if _same_call(r, n) and r.combiner is n.combiner and len(g) == len(guards) \
                    and all(x is y for x, y in zip(g, guards)):
                return op.output(n.value_index)(*used)
        parts = [*n.source, n.condition, *n.init, *guards]
        parts += [x for iv in n.axis for x in (iv.dom.min, iv.dom.extent)]
        fv: set = set()
        for x in parts:
            fv |= free_vars(x)
        used_axes = [iv for iv in axis if iv.var in fv] or list(axis[:1])
        new_axis = [IterVar(Range(iv.dom.min, iv.dom.extent), iv.name, IterKind.DATA_PAR)
                    for iv in used_axes]
        vmap: dict[Var, Expr] = {iv.var: nv.var for iv, nv in zip(used_axes, new_axis)}
        raxes = []
        for iv in n.axis:    # a reduce axis whose range depends on a data axis: a fresh copy
            if (free_vars(iv.dom.min) | free_vars(iv.dom.extent)) & set(vmap):
                fresh = IterVar(Range(substitute(iv.dom.min, vmap), substitute(iv.dom.extent, vmap)),
                                Var(iv.var.name, iv.var.dtype), IterKind.REDUCE)
                vmap[iv.var] = fresh.var
                raxes.append(fresh)
            else:
                raxes.append(iv)
        source = tuple(substitute(x, vmap) for x in n.source)
        cond = substitute(n.condition, vmap)
        for g in reversed(guards):     # lazily: the where= condition may load too
            g = substitute(g, vmap)
            always = isinstance(cond, Const) and bool(cond.value)
            cond = g if always else Select(g, cond, Const(False, "bool"))
        init = tuple(substitute(x, vmap) for x in n.init)
        red_body = [Reduce(n.combiner, source, tuple(raxes), cond, i, init)
                    for i in range(len(source))]
        op = make_compute(f"{name}.red{len(made)}", "", {}, new_axis, red_body)
        op.lifted = True
        used = [iv.var for iv in used_axes]
        made.append((n, guards, op, used))
        return op.output(n.value_index)(*used)

    return [lift(b, ()) for b in body]


# ---- reduce axes owned by one op ---------------------------------------------------------------
def _owned_elsewhere(iv: IterVar) -> bool:
    ref = iv.owner
    return ref is not None and ref() is not None


def _own_reduce_axes(body: Sequence[Expr]) -> list[Expr]:
    """``body`` (one reduction) with fresh copies of the reduce axes other ops own."""
    r0 = body[0]
    assert isinstance(r0, Reduce)
    if not any(_owned_elsewhere(iv) for iv in r0.axis):
        return list(body)
    vmap: dict[Var, Expr] = {}
    axes = []
    for iv in r0.axis:
        if _owned_elsewhere(iv):
            dom = Range(substitute(iv.dom.min, vmap), substitute(iv.dom.extent, vmap))
            fresh = IterVar(dom, Var(iv.var.name, iv.var.dtype), IterKind.REDUCE)
            vmap[iv.var] = fresh.var
            axes.append(fresh)
        else:
            axes.append(iv)
    source = tuple(substitute(s, vmap) for s in r0.source)
    cond = substitute(r0.condition, vmap)
    return [Reduce(r.combiner, source, tuple(axes), cond, r.value_index, r.init) for r in body]
