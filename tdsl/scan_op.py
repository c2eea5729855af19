"""``scan``: a recurrence over the first axis (TVM's ``te.scan``).

``scan(init, update, state)`` is a tensor shaped like ``state`` whose first
``init.shape[0]`` rows are ``init`` and whose row ``t`` after them is ``update``'s row
``t``, where ``update`` reads ``state`` at earlier rows (``state[t - 1, i]``).  It lowers
to a sequential loop over ``t`` (the interpreter, LLVM and every other backend run plain
loops); the stage itself has no loops to schedule.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import ShapeError, TDSLError
from .expr import Const, Expr, Reduce, TensorLoad, Var
from .opaque import OpaqueOp
from .stmt import BufferStore, For, ForKind
from .tensor import ComputeOp, PlaceholderOp, Tensor
from .visitor import post_order_visit, substitute, transform

if TYPE_CHECKING:
    from .lowering.nest import NestBuilder
    from .stmt import Stmt
    from tdsl.schedule import Stage


def _as_list(x: Any) -> list:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _reads(e: Expr) -> list[Tensor]:
    out: list[Tensor] = []
    post_order_visit(e, lambda n: out.append(n.tensor) if isinstance(n, TensorLoad) else None)
    return out


class ScanOp(OpaqueOp):
    """The recurrence: ``init`` rows, then ``update`` rows computed one ``t`` at a time."""

    kind = "scan"

    def __init__(self, name: str, tag: str, attrs: "dict | None", init: list[Tensor],
                 update: list[Tensor], state: list[Tensor]):
        self.init_ops = [t.op for t in init]
        self.update_ops = [t.op for t in update]
        self._state = {id(s.op): k for k, s in enumerate(state)}
        shapes = [s.shape for s in state]
        names = [name] if len(state) == 1 else [f"{name}.v{k}" for k in range(len(state))]
        # the outputs exist before the bodies are rewritten to read them
        super().__init__(name, tag, attrs, shapes, [s.dtype for s in state], names, [])
        self.init_len = init[0].shape[0]
        self.init_body = [self._body_of(t, "init") for t in init]
        self.update_body = [self._body_of(t, "update") for t in update]
        seen: dict[int, Tensor] = {}
        for op, bodies in ((self.init_ops, self.init_body), (self.update_ops, self.update_body)):
            for e in bodies:
                for t in _reads(e):
                    if t.op is not self:
                        seen.setdefault(id(t), t)
        self.inputs = list(seen.values())

    def _body_of(self, t: Tensor, what: str) -> Expr:
        """``t``'s expression with reads of the state made reads of this scan's outputs, and
        the computes between ``t`` and the state substituted in (they run per step)."""
        op = t.op
        if not isinstance(op, ComputeOp):
            raise TDSLError(f"scan '{self.name}': the {what} must be a compute, got "
                            f"{type(op).__name__} '{t.name}'")
        body = op.body[t.value_index]
        if isinstance(body, Reduce):
            raise TDSLError(f"scan '{self.name}': a reduction as the {what} body is not "
                            f"supported; compute it in a stage the {what} reads")

        def pre(n: Any) -> Any:
            if not isinstance(n, TensorLoad):
                return None
            idx = [transform(i, pre=pre) for i in n.indices]
            k = self._state.get(id(n.tensor.op))
            if k is not None:
                return TensorLoad(self.outputs[k], idx)
            p = n.tensor.op
            if isinstance(p, ComputeOp) and self._reads_state(p):
                inner = p.body[n.tensor.value_index]
                if isinstance(inner, Reduce):
                    raise TDSLError(f"scan '{self.name}': stage '{p.name}' reads the state "
                                    f"and is a reduction, which a scan step cannot compute")
                inner = transform(inner, pre=pre)
                return substitute(inner, {iv.var: e for iv, e in zip(p.axis, idx)})
            return TensorLoad(n.tensor, idx)
        return transform(body, pre=pre)

    def _reads_state(self, op: Any, memo: "dict | None" = None) -> bool:
        memo = {} if memo is None else memo
        if id(op) in self._state:
            return True
        if id(op) not in memo:
            memo[id(op)] = False
            memo[id(op)] = any(self._reads_state(t.op, memo) for t in op.input_tensors)
        return memo[id(op)]

    def structural_parts(self, canon: Any) -> None:
        """The init and update bodies (over their own axes) for structural equality."""
        canon.visit(self.init_len)
        for ops, bodies in ((self.init_ops, self.init_body), (self.update_ops, self.update_body)):
            for op, body in zip(ops, bodies):
                canon.visit_all([iv.dom.extent for iv in op.axis])
                canon.scoped(op.axis, lambda body=body: canon.visit(body))

    def lower_stmt(self, nest: "NestBuilder", st: "Stage") -> "Stmt":
        from .lowering.nest import seq
        stor = nest.storage[st]
        parts = []
        for ops, bodies, first in ((self.init_ops, self.init_body, None),
                                   (self.update_ops, self.update_body, self.init_len)):
            for op, buf, body in zip(ops, stor.buffers, bodies):
                extents = [iv.dom.extent for iv in op.axis]
                loops = [Var(f"{self.name}.{iv.var.name}", iv.var.dtype) for iv in op.axis]
                index: list[Expr] = list(loops)
                ranges = list(extents)
                if first is not None:   # the update rows: t runs from init_len on
                    index[0] = loops[0] + first
                    ranges[0] = nest.ana.simplify(extents[0] - first)
                value = nest.lower_expr(body, {iv.var: ix for iv, ix in zip(op.axis, index)})
                stmt: "Stmt" = BufferStore(buf, value, index)
                for v, ext in reversed(list(zip(loops, ranges))):
                    stmt = For(v, Const(0, v.dtype), ext, ForKind.SERIAL, stmt,
                               annotations={"scan": self.name})
                parts.append(stmt)
        return seq(parts)


def scan(init: Any, update: Any, state_placeholder: Any, inputs: Any = None,
         name: str = "scan", tag: str = "", attrs: "dict | None" = None) -> Any:
    """A recurrence over the first axis (TVM's ``te.scan``); one tensor per state.

    ``init`` (shape ``(k, ...)``) gives the first ``k`` rows, ``update`` (the state's shape)
    the rest, reading ``state_placeholder`` at earlier rows.  ``inputs`` is accepted for
    TVM compatibility (the tensors read are found from the bodies).
    """
    init_l, update_l, state_l = _as_list(init), _as_list(update), _as_list(state_placeholder)
    if not (len(init_l) == len(update_l) == len(state_l)) or not state_l:
        raise TDSLError(f"scan '{name}': init, update and state_placeholder need one tensor "
                        f"per state (got {len(init_l)}, {len(update_l)}, {len(state_l)})")
    for i, u, s in zip(init_l, update_l, state_l):
        for t, what in ((i, "init"), (u, "update"), (s, "state_placeholder")):
            if not isinstance(t, Tensor):
                raise TDSLError(f"scan '{name}': {what} must be a tensor, got {t!r}")
        if not isinstance(s.op, PlaceholderOp):
            raise TDSLError(f"scan '{name}': state_placeholder '{s.name}' must be a placeholder")
        if not (i.ndim == u.ndim == s.ndim):
            raise ShapeError(f"scan '{name}': init '{i.name}', update '{u.name}' and state "
                             f"'{s.name}' need the same number of dimensions")
        if i.dtype != s.dtype or u.dtype != s.dtype:
            raise TDSLError(f"scan '{name}': init, update and state '{s.name}' need one dtype "
                            f"(got {i.dtype}, {u.dtype}, {s.dtype})")
    op = ScanOp(name, tag, attrs, init_l, update_l, state_l)
    multi = isinstance(state_placeholder, (list, tuple))
    return list(op.outputs) if multi else op.outputs[0]
