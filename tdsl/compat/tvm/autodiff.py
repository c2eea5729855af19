"""``te.gradient``: reverse-mode differentiation of tensor expressions.

For an output ``Y`` and its adjoint ``head`` (the gradient of some scalar loss with respect
to ``Y``, same shape), ``gradient(Y, [X...], head)`` returns one compute per input: the
gradient of that loss with respect to it.  The compute graph is walked from ``Y`` back to
the inputs; each stage ``C`` passes to every tensor ``T`` it reads::

    adj_T[j] = sum over C's axes a and reduce axes r of
               adj_C[a] * sum over the loads T[idx(a, r)] in C's body of
                          (d body / d that load) * (idx(a, r) == j)

(a reduction by ``max``/``min`` only passes through the element equal to the result; one
by a product multiplies by the product of the other factors).
The sum runs over C's whole domain for every ``j`` -- no index inversion, so any index
expression is right, at a cost of |T| x |C domain| per stage: fine for the small tensors
such tests use, not for training.  Reductions by ``sum``, ``max``, ``min`` and products are
differentiated; other combiners, scans and extern stages are refused with a TDSLError.
"""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import tdsl
from tdsl.errors import TDSLError
from tdsl.expr import (Add, Call, Cast, Const, Div, Expr, Max, Min, Mul, Reduce, Select, Sub,
                       TensorLoad, Var)
from tdsl.tensor import ComputeOp, PlaceholderOp, Tensor
from tdsl.visitor import substitute

_Zero = Optional[Expr]          # None stands for an exact zero (kept out of the expressions)


def _c(v: float, like: Expr) -> Expr:
    return tdsl.const(v, str(like.dtype))


def _add(a: _Zero, b: _Zero) -> _Zero:
    return b if a is None else a if b is None else a + b


def _mul(a: _Zero, b: Expr) -> _Zero:
    return None if a is None else a * b


def _call_grad(e: Call, da: _Zero, db: _Zero) -> _Zero:
    """The derivative of a math call given its arguments' derivatives."""
    f, a = e.func.value, e.args[0]
    if f in ("floor", "ceil", "round", "trunc", "isnan"):
        return None
    if f == "pow":
        b = e.args[1]
        left = _mul(da, b * tdsl.power(a, b - _c(1, b)))
        right = _mul(db, e * tdsl.log(a)) if db is not None else None
        return _add(left, right)
    table = {
        "exp": lambda: e, "exp2": lambda: e * _c(math.log(2), a),
        "log": lambda: _c(1, a) / a, "log2": lambda: _c(1 / math.log(2), a) / a,
        "log10": lambda: _c(1 / math.log(10), a) / a,
        "sqrt": lambda: _c(0.5, a) / e, "rsqrt": lambda: _c(-0.5, a) * e / a,
        "tanh": lambda: _c(1, a) - e * e, "sigmoid": lambda: e * (_c(1, a) - e),
        "sin": lambda: tdsl.cos(a), "cos": lambda: _c(-1, a) * tdsl.sin(a),
        "erf": lambda: _c(2 / math.sqrt(math.pi), a) * tdsl.exp(_c(-1, a) * a * a),
        "abs": lambda: tdsl.if_then_else(a >= _c(0, a), _c(1, a), _c(-1, a)),
    }
    if f not in table:
        raise TDSLError(f"te.gradient: no derivative for the intrinsic {f!r}")
    return _mul(da, table[f]())


def diff(e: Expr, target: TensorLoad) -> _Zero:
    """d e / d ``target`` (one load occurrence, by identity; other loads are constants)."""
    if e is target:
        return _c(1, e)
    if isinstance(e, (Const, Var, TensorLoad)):
        return None
    if isinstance(e, (Add, Sub)):
        da, db = diff(e.a, target), diff(e.b, target)
        if isinstance(e, Add):
            return _add(da, db)
        return da if db is None else (_c(-1, e) * db if da is None else da - db)
    if isinstance(e, Mul):
        return _add(_mul(diff(e.a, target), e.b), _mul(diff(e.b, target), e.a))
    if isinstance(e, Div):
        da, db = diff(e.a, target), diff(e.b, target)
        left = None if da is None else da / e.b
        right = None if db is None else _c(-1, e) * e.a * db / (e.b * e.b)
        return _add(left, right)
    if isinstance(e, (Min, Max)):
        da, db = diff(e.a, target), diff(e.b, target)
        if da is None and db is None:
            return None
        zero = _c(0, e)
        pick_a = e.a <= e.b if isinstance(e, Min) else e.a >= e.b
        return tdsl.if_then_else(pick_a, zero if da is None else da, zero if db is None else db)
    if isinstance(e, Select):
        dt, df = diff(e.true_value, target), diff(e.false_value, target)
        if dt is None and df is None:
            return None
        zero = _c(0, e)
        return tdsl.if_then_else(e.cond, zero if dt is None else dt, zero if df is None else df)
    if isinstance(e, Cast):
        d = diff(e.value, target)
        return None if d is None or not e.dtype.is_float else Cast(d, e.dtype)
    if isinstance(e, Call):
        da = diff(e.args[0], target)
        db = diff(e.args[1], target) if len(e.args) > 1 else None
        if da is None and db is None:
            return None
        return _call_grad(e, da, db)
    if not e.dtype.is_float:
        return None        # comparisons, index arithmetic: piecewise constant
    raise TDSLError(f"te.gradient: cannot differentiate {type(e).__name__} ({e})")


def _loads(e: Any, tensor: Tensor) -> list[TensorLoad]:
    """The loads of ``tensor`` in ``e``, each occurrence once."""
    out: list[TensorLoad] = []

    def walk(n: Any) -> None:
        if isinstance(n, TensorLoad):
            if n.tensor is tensor or (n.tensor.op is tensor.op
                                      and n.tensor.value_index == tensor.value_index):
                out.append(n)
            for i in n.indices:
                walk(i)
            return
        for f in getattr(n, "_fields", ()):
            v = getattr(n, f)
            for x in (v if isinstance(v, tuple) else (v,)):
                if isinstance(x, Expr):
                    walk(x)
    walk(e)
    return out


def _reducer_kind(red: Reduce) -> str:
    comb = red.combiner
    if len(comb.result) != 1:
        raise TDSLError("te.gradient: reductions with several values (argmax...) are not "
                        "differentiated")
    res = comb.result[0]
    ident = comb.identity[0]
    for cls, kind in ((Add, "sum"), (Max, "max"), (Min, "min"), (Mul, "prod")):
        if isinstance(res, cls) and {id(res.a), id(res.b)} == {id(comb.lhs[0]), id(comb.rhs[0])}:
            if kind == "prod" and not (isinstance(ident, Const) and ident.value == 1):
                break
            return kind
    raise TDSLError(f"te.gradient: the reducer {comb.name!r} is not differentiated (sum, max, "
                    f"min and a product with identity 1 are)")


def _others(op: ComputeOp, red: Reduce, expr: Expr) -> Tensor:
    """For a product reduction ``C[a] = prod_r e(a, r)``: ``O[a, r] = prod_{r' != r} e(a, r')``
    (the derivative of ``C[a]`` by the factor ``e(a, r)``), over the 0-based domain of
    ``C``'s axes then its reduce axes.  A product, not ``C[a] / e(a, r)``: a zero factor
    has a gradient too."""
    n_sp = len(op.axis)
    shape = [iv.dom.extent for iv in list(op.axis) + list(red.axis)]

    def body(*idx: Expr) -> Expr:
        rr = [tdsl.reduce_axis((r.dom.min, r.dom.min + r.dom.extent), name=f"{r.name}.o")
              for r in red.axis]
        vmap = {iv.var: idx[k] + iv.dom.min for k, iv in enumerate(op.axis)}
        vmap.update({r.var: o.var for r, o in zip(red.axis, rr)})
        same = tdsl.all(*[o.var == idx[n_sp + k] + r.dom.min
                          for k, (r, o) in enumerate(zip(red.axis, rr))])
        one = _c(1, expr)
        value = tdsl.if_then_else(same, one, substitute(expr, vmap))
        return Reduce(red.combiner.unordered(), (value,), tuple(rr),
                      substitute(red.condition, vmap), 0)
    return tdsl.compute(shape, body, name=f"{op.name}.others")


def _contribution(c: Tensor, t: Tensor, adj_c: Tensor) -> Optional[Tensor]:
    """The part of ``t``'s adjoint that flows back through the stage computing ``c``."""
    op: ComputeOp = c.op
    body = op.body[c.value_index]
    red = body if isinstance(body, Reduce) else None
    expr = red.source[red.value_index] if red is not None else body
    loads = _loads(expr, t)
    terms = [(ld, diff(expr, ld)) for ld in loads]
    terms = [(ld, d) for ld, d in terms if d is not None]
    if not terms:
        return None
    axes = list(op.axis) + (list(red.axis) if red is not None else [])
    kind = _reducer_kind(red) if red is not None else None
    others = _others(op, red, expr) if kind == "prod" else None

    def fcompute(*j: Expr) -> Expr:
        rvs = [tdsl.reduce_axis((iv.dom.min, iv.dom.min + iv.dom.extent), name=f"{iv.name}.d")
               for iv in axes]
        vmap = {iv.var: rv.var for iv, rv in zip(axes, rvs)}
        zero = _c(0, expr)
        total: _Zero = None
        for ld, d in terms:
            hit = tdsl.all(*[i == jj for i, jj in zip(ld.indices, j)]) if j else None
            term = d if hit is None else tdsl.if_then_else(hit, d, zero)
            total = _add(total, term)
        assert total is not None
        if red is not None:
            conds = [red.condition]
            if kind in ("max", "min"):
                conds.append(expr == c(*[iv.var for iv in op.axis]))
            if others is not None:
                total = total * others(*[iv.var - iv.dom.min for iv in axes])
            total = tdsl.if_then_else(tdsl.all(*conds), total, zero)
        full = adj_c(*[iv.var for iv in op.axis]).astype(str(expr.dtype)) * total
        return tdsl.sum(substitute(full, vmap), axis=rvs)
    return tdsl.compute(t.shape, fcompute, name=f"{t.op.name}.grad.{op.name}")


def _graph(output: Tensor) -> list[Tensor]:
    """The compute tensors ``output`` depends on, consumers before producers."""
    order: list[Tensor] = []
    seen: set[int] = set()

    def visit(t: Tensor) -> None:
        if id(t.op) in seen:
            return
        seen.add(id(t.op))
        if isinstance(t.op, PlaceholderOp):
            return
        if not isinstance(t.op, ComputeOp):
            raise TDSLError(f"te.gradient: stage {t.op.name!r} is a {type(t.op).__name__}; "
                            f"only compute stages are differentiated")
        if len(t.op.body) != 1:
            raise TDSLError(f"te.gradient: stage {t.op.name!r} has several outputs")
        for x in t.op.input_tensors:
            visit(x)
        order.append(t)
    visit(output)
    return order[::-1]


def gradient(output: Tensor, inputs: "Tensor | Sequence[Tensor]",
             head: "Tensor | None" = None) -> list[Tensor]:
    """The adjoints of ``inputs`` given ``head``, the adjoint of ``output`` (TVM's
    ``te.gradient``).  ``head=None`` (TVM's full Jacobian) is not supported: pass
    ``topi.full_like(output, 1.0)`` for the gradient of ``output``'s sum."""
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    if head is None:
        raise TDSLError("te.gradient: head=None (the full Jacobian) is not supported by "
                        "tdsl.compat; pass head (e.g. topi.full_like(output, 1.0))")
    if [str(s) for s in head.shape] != [str(s) for s in output.shape]:
        raise TDSLError(f"te.gradient: head has shape {list(head.shape)}, the output "
                        f"{list(output.shape)}")
    for x in inputs:
        if not x.dtype.is_float:
            raise TDSLError(f"te.gradient: input {x.op.name!r} has dtype {x.dtype}; only float "
                            f"tensors have gradients")
    adjoint: dict[int, Tensor] = {id(output.op): head}
    parts: dict[int, list[Tensor]] = {}
    for c in _graph(output):
        if id(c.op) in parts:
            adjoint[id(c.op)] = _sum(parts.pop(id(c.op)), c)
        adj_c = adjoint.get(id(c.op))
        if adj_c is None:
            continue
        for t in c.op.input_tensors:
            if not t.dtype.is_float:
                continue
            g = _contribution(c, t, adj_c)
            if g is not None:
                parts.setdefault(id(t.op), []).append(g)
    out = []
    for x in inputs:
        got = parts.get(id(x.op)) or ([adjoint[id(x.op)]] if id(x.op) in adjoint else [])
        if got:
            out.append(_sum(got, x))
        else:
            out.append(tdsl.compute(x.shape, lambda *i: tdsl.const(0.0, str(x.dtype)),
                                    name=f"{x.op.name}.grad"))
    return out


def _sum(parts: list[Tensor], like: Tensor) -> Tensor:
    if len(parts) == 1:
        return parts[0]
    return tdsl.compute(like.shape, lambda *i: _sum_loads(parts, i),
                        name=f"{like.op.name}.grad")


def _sum_loads(parts: list[Tensor], idx: tuple) -> Expr:
    total = parts[0](*idx)
    for p in parts[1:]:
        total = total + p(*idx)
    return total


__all__ = ["gradient", "diff"]
