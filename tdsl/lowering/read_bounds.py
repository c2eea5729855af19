"""Reads inside the tensors they read: checked when lowering, or when the kernel is called.

Every load ``T[idx]`` of a compute stage, over the stage's domain (and its reduction's),
must stay inside ``T``'s shape, or the kernel reads memory past the array (the CPU code
returns whatever lies there).  For each dimension of each load:

* proven inside (the analyzer knows the axes' ranges, and the conditions of the
  ``if_then_else`` branches, ``where=`` clauses and ``and`` operands the load is under):
  nothing to do;
* under a condition not proven to exclude the out-of-range part, or with an index that
  depends on data (a gather) or on a scalar parameter: left alone -- such code guards its
  reads itself, and refusing it would refuse legal padding and tails;
* not under any condition, with an index affine in independent axes (its range is then
  exactly the interval the analyzer gives): proven to leave the shape, a ``LoweringError``
  naming the stage, the tensor, the dimension, the range and the shape, suggesting
  ``td.if_then_else``; else (symbolic sizes) a ``ReadCheck`` that the kernel's argument
  check evaluates with the sizes of each call (``tdsl.runtime.args``): a ``ShapeError``;
* an index not affine (``i // 2``, ``i % m``) that is not proven inside: left alone, as
  the analyzer's range is then only a bound (a check on it could refuse legal code).
"""
from __future__ import annotations

from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from ..arith import Analyzer, Interval
from ..errors import LoweringError
from ..expr import (Add, And, Const, Expr, Mul, Not, Or, Reduce, Select, SizeVar, Sub,
                    TensorLoad, Var)
from ..runtime.read_checks import ReadCheck
from ..tensor import ComputeOp, IterVar, Range
from ..visitor import children, free_vars, post_order_visit
from .bound import relax

if TYPE_CHECKING:
    from tdsl.schedule import Schedule

_Load = tuple[TensorLoad, tuple, tuple]   # (load, conditions it is under, reduce axes in scope)


def check_reads(sch: "Schedule") -> list[ReadCheck]:
    """Refuse the provable out-of-range reads of ``sch``'s compute stages; the checks left
    for call time (module doc)."""
    out: list[ReadCheck] = []
    for st in sch.stages:
        if isinstance(st.op, ComputeOp):
            out.extend(_op_checks(st.op))
    return out


def _op_checks(op: ComputeOp) -> list[ReadCheck]:
    """``_check_op``, once per operation (an op never changes; tuners lower it often)."""
    cached = op.__dict__.get("_read_checks")
    if cached is None:
        cached = op.__dict__["_read_checks"] = _check_op(op)
    return cached


def _loads(e: Any, conds: tuple, raxes: tuple, out: list[_Load]) -> None:
    if isinstance(e, TensorLoad):
        out.append((e, conds, raxes))
        for i in e.indices:
            _loads(i, conds, raxes, out)
    elif isinstance(e, Select):
        _loads(e.cond, conds, raxes, out)
        _loads(e.true_value, conds + (e.cond,), raxes, out)
        _loads(e.false_value, conds + (Not(e.cond),), raxes, out)
    elif isinstance(e, (And, Or)):
        _loads(e.a, conds, raxes, out)
        _loads(e.b, conds + (e.a if isinstance(e, And) else Not(e.a),), raxes, out)
    elif isinstance(e, Reduce):
        inner = raxes + tuple(e.axis)
        _loads(e.condition, conds, inner, out)
        always = isinstance(e.condition, Const) and bool(e.condition.value)
        for s in e.source:
            _loads(s, conds if always else conds + (e.condition,), inner, out)
        for s in e.init:
            _loads(s, conds, raxes, out)
    else:
        for c in children(e):
            _loads(c, conds, raxes, out)


def _check_op(op: ComputeOp) -> list[ReadCheck]:
    loads: list[_Load] = []
    for b in op.body:
        _loads(b, (), (), loads)
    out: list[ReadCheck] = []
    ana = Analyzer()    # one per stage: every fact below is scoped
    for load, conds, raxes in loads:
        axes: list[IterVar] = list(op.axis) + list(raxes)
        for d, idx in enumerate(load.indices):
            check = _check_dim(ana, op, load, d, idx, conds, axes)
            if check is not None:
                out.append(check)
    return out


def _depends_on_data(idx: Expr, axes: set[Var]) -> bool:
    found = []
    post_order_visit(idx, lambda n: found.append(n) if isinstance(n, TensorLoad) else None)
    return bool(found) or any(not isinstance(v, SizeVar) and v not in axes
                              for v in free_vars(idx))


def _affine(e: Expr, axes: set[Var], seen: set[Var]) -> bool:
    """``e`` is a sum of distinct axes times constants plus axis-free terms: its range over
    a box of independent axes is exactly the interval ``int_set`` gives."""
    if not free_vars(e) & axes:
        return True
    if isinstance(e, Var):
        if e in seen:
            return False
        seen.add(e)
        return True
    if isinstance(e, (Add, Sub)):
        return _affine(e.a, axes, seen) and _affine(e.b, axes, seen)
    if isinstance(e, Mul):
        return (isinstance(e.a, Const) and _affine(e.b, axes, seen)) or \
            (isinstance(e.b, Const) and _affine(e.a, axes, seen))
    return False


def _check_dim(ana: Analyzer, op: ComputeOp, load: TensorLoad, d: int, idx: Expr,
               conds: tuple, axes: list[IterVar]) -> "ReadCheck | None":
    t = load.tensor
    size = t.shape[d]
    axis_vars = {iv.var for iv in axes}
    if _depends_on_data(idx, axis_vars):
        return None
    with ExitStack() as stack:
        for iv in axes:
            stack.enter_context(ana.bind(iv.var, Range(iv.dom.min, iv.dom.extent)))
        with ExitStack() as guarded:
            for c in conds:
                guarded.enter_context(ana.constraint(c))
            if ana.can_prove(idx >= 0) and ana.can_prove(idx < size):
                return None
        if conds:
            return None    # guarded: the code's own condition decides (module doc)
        dom = {iv.var: Interval(iv.dom.min, ana.simplify(iv.dom.min + iv.dom.extent - 1))
               for iv in axes}
        s = relax(ana, ana.simplify(idx), dom)
        if s.min is None or s.max is None or (free_vars(s.min) | free_vars(s.max)) & axis_vars:
            return None
        lo, hi = ana.simplify(s.min), ana.simplify(s.max)
        exact = _affine(idx, axis_vars, set()) and not any(
            (free_vars(iv.dom.min) | free_vars(iv.dom.extent)) & axis_vars for iv in axes)
        index = ", ".join(str(i) for i in load.indices)
        over = ", ".join(f"{iv.var.name} in [{iv.dom.min}, "
                         f"{ana.simplify(iv.dom.min + iv.dom.extent)})" for iv in axes)
        where = f"stage '{op.name}' reads {t.name}[{index}] over {over}"
        if not exact:
            return None    # a bound, not the range read: refusing on it could be wrong
        if ana.can_prove(hi >= size) or ana.can_prove(lo < 0):
            shape = ", ".join(str(x) for x in t.shape) + ("," if len(t.shape) == 1 else "")
            raise LoweringError(
                f"{where}: dimension {d} of '{t.name}' is read at [{lo}, {hi}], outside its "
                f"shape [0, {size}) (shape ({shape})); guard the read "
                f"with td.if_then_else(cond, {t.name}[...], pad) or change the index or shape")
    extents = tuple(iv.dom.extent for iv in axes)
    return ReadCheck(where, t.name, d, lo, hi, size, extents, True)
