"""``scan``: a recurrence over the first axis (TVM's ``te.scan``).

``scan(init, update, state)`` is a tensor shaped like ``state`` whose first
``init.shape[0]`` rows are ``init`` and whose row ``t`` after them is ``update``'s row
``t``, where ``update`` reads ``state`` at earlier rows (``state[t - 1, i]``).

Unscheduled, it lowers to a sequential loop over ``t`` around loops over the other
(spatial) axes.  Its stage's loops are the spatial axes (``op.spatial_axis``; the scan axis
``op.scan_axis`` is not a loop of the stage): scheduling them (split, reorder, parallel,
bind to ``blockIdx``/``threadIdx``) puts the scan loop *inside* them, each spatial point
running its own recurrence.  That order is legal only when each point's update reads the
state at that same point (``state[t - 1, i]``, not ``state[t - 1, i - 1]``), which the
primitives check (``spatial_reason``).  ``s[update]``/``s[init]`` are views of the scan's
stage (``ScanPartStage``), as TVM users schedule them.
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
        #: computes between an update and the state, substituted into the update body
        self.step_ops: list = []
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
                if all(q is not p for q in self.step_ops):
                    self.step_ops.append(p)
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

    @property
    def scan_axis(self) -> Any:
        """The axis the recurrence runs along (TVM's ``op.scan_axis``): not a loop of the
        stage, always sequential."""
        return self.axis[0]

    @property
    def spatial_axis(self) -> tuple:
        """The other axes of the (first) state: the scan stage's loops."""
        return self.axis[1:]

    spatial_axis_ = spatial_axis   # TVM's spelling

    def spatial_reason(self) -> "str | None":
        """Why the scan loop cannot run inside the spatial loops (None when it can): every
        state must have the spatial shape of the stage's loops, and each update may read the
        states only at its own spatial point."""
        from .arith import Analyzer
        ana = Analyzer()
        spatial = [iv.dom.extent for iv in self.spatial_axis]
        for out in self.outputs[1:]:
            if len(out.shape) != len(self.axis) or not all(
                    ana.can_prove(a == b) for a, b in zip(out.shape[1:], spatial)):
                return (f"its states have different spatial shapes ({self.outputs[0].name}: "
                        f"{list(self.outputs[0].shape[1:])}, {out.name}: {list(out.shape[1:])})")
        for op, body in zip(self.update_ops, self.update_body):
            own = [iv.var for iv in op.axis[1:]]
            bad: list = []

            def fn(n: Any, own: list = own, bad: list = bad) -> None:
                if isinstance(n, TensorLoad) and n.tensor.op is self and \
                        any(ix is not v for ix, v in zip(n.indices[1:], own)):
                    bad.append(n)
            post_order_visit(body, fn)
            if bad:
                return (f"its update reads {bad[0]!r}, another spatial point than the one it "
                        f"computes ({', '.join(v.name for v in own)}), so every step must finish "
                        f"for all points before the next starts (leave the stage unscheduled: it "
                        f"runs the scan loop outermost, on the CPU)")
        return None

    def _rows(self, nest: "NestBuilder", st: "Stage", update: bool,
              spatial: "list[Expr] | None") -> "Stmt":
        """The init rows (or, with ``update``, the update rows) of every state: one loop over
        the scan axis whose step stores row ``t`` of each state in turn (an update reads
        only earlier rows, of any state), over all spatial points or at the ``spatial`` one."""
        from .lowering.nest import seq
        stor = nest.storage[st]
        ops = self.update_ops if update else self.init_ops
        bodies = self.update_body if update else self.init_body
        t = Var(f"{self.name}.{ops[0].axis[0].var.name}", ops[0].axis[0].var.dtype)
        first = self.init_len if update else Const(0, t.dtype)
        steps = nest.ana.simplify(ops[0].axis[0].dom.extent - first) if update else self.init_len
        row = nest.ana.simplify(t + first) if update else t
        parts = []
        for op, buf, body in zip(ops, stor.buffers, bodies):
            loops = [Var(f"{self.name}.{iv.var.name}", iv.var.dtype) for iv in op.axis[1:]]
            point: list[Expr] = list(spatial) if spatial is not None else list(loops)
            index = [row] + point
            value = nest.lower_expr(body, {iv.var: ix for iv, ix in zip(op.axis, index)})
            stmt: "Stmt" = BufferStore(buf, value, index)
            if spatial is None:
                for v, iv in reversed(list(zip(loops, op.axis[1:]))):
                    stmt = For(v, Const(0, v.dtype), iv.dom.extent, ForKind.SERIAL, stmt,
                               annotations={"scan": self.name})
            parts.append(stmt)
        return For(t, Const(0, t.dtype), steps, ForKind.SERIAL, seq(parts),
                   annotations={"scan": self.name})

    def lower_stmt(self, nest: "NestBuilder", st: "Stage") -> "Stmt":
        """Unscheduled: the scan loop outermost, every spatial point inside each step."""
        from .lowering.nest import seq
        return seq([self._rows(nest, st, False, None), self._rows(nest, st, True, None)])

    def lower_point(self, nest: "NestBuilder", st: "Stage", vmap: dict) -> "Stmt":
        """One spatial point of a scheduled scan (``vmap``: each spatial axis variable's value
        in the stage's loops): its init rows, then its update rows, in order."""
        from .lowering.nest import seq
        spatial = [vmap[iv.var] for iv in self.spatial_axis]
        return seq([self._rows(nest, st, False, spatial), self._rows(nest, st, True, spatial)])


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
