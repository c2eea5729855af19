"""The schedule of a computation: its stages, in dependency order, and its trace."""
from __future__ import annotations

from typing import Any, Iterable, Sequence

from tdsl.errors import ScheduleError
from tdsl.tensor import IterVar, Operation, Tensor

from .stage import AttachType, Stage, unique_name
from .trace import Trace


def _topo_ops(outputs: Sequence[Operation]) -> list[Operation]:
    order: list[Operation] = []
    seen: set[int] = set()

    def visit(op: Operation) -> None:
        if id(op) in seen:
            return
        seen.add(id(op))
        for t in op.input_tensors:
            visit(t.op)
        order.append(op)
    for op in outputs:
        visit(op)
    return order


class Schedule:
    """Stages of every operation the outputs depend on, producers first (``s[C]`` gets one)."""

    def __init__(self, outputs: Sequence[Operation]):
        self.outputs = list(outputs)
        self.stages: list[Stage] = []
        self.stage_map: dict[int, Stage] = {}
        self.trace = Trace()
        for op in _topo_ops(self.outputs):
            st = Stage(op, self)
            self.stages.append(st)
            self.stage_map[id(op)] = st
        for op in self.outputs:
            self.stage_map[id(op)].is_output = True
        self._keepalive: list[Operation] = list(_topo_ops(self.outputs))

    # ---- lookup -------------------------------------------------------------------------
    def __getitem__(self, key: Any) -> Stage:
        op = key.op if isinstance(key, Tensor) else key
        st = self.stage_map.get(id(op)) if isinstance(op, Operation) else None
        if st is None:
            name = getattr(op, "name", repr(key))
            raise ScheduleError("schedule[]", None, f"'{name}' is not part of this schedule (not an "
                                f"output nor something an output depends on)")
        return st

    def stage_of(self, tensor: Tensor) -> Stage:
        return self[tensor]

    def current_tensor(self, tensor: Tensor) -> Tensor:
        """The tensor that now holds ``tensor``'s values (after ops were rewritten)."""
        return self[tensor].op.outputs[tensor.value_index]

    def register(self, stage: Stage, op: Operation) -> None:
        """Make ``op`` (a rewritten operation) resolve to ``stage``."""
        self.stage_map[id(op)] = stage
        self._keepalive.append(op)

    def insert_stage(self, op: Operation, before: Stage) -> Stage:
        st = Stage(op, self)
        self.stages.insert(self.stages.index(before), st)
        self.register(st, op)
        return st

    def unique_op_name(self, base: str) -> str:
        return unique_name(base, {s.name for s in self.stages})

    def owner_of(self, iv: IterVar) -> "Stage | None":
        for st in self.stages:
            if iv in st.all_iter_vars:
                return st
        return None

    def stage_by_name(self, name: str) -> Stage:
        for st in self.stages:
            if st.name == name:
                return st
        raise ScheduleError("schedule[]", None, f"no stage named '{name}'")

    # ---- dataflow ----------------------------------------------------------------------------
    def readers(self, stage: Stage) -> list[Stage]:
        """Stages whose current body reads ``stage``'s outputs directly."""
        out = []
        for st in self.stages:
            if any(self[t] is stage for t in st.op.input_tensors):
                out.append(st)
        return out

    def consumers(self, stage: Stage) -> list[Stage]:
        """Stages that read ``stage`` once inlined stages are substituted."""
        out: list[Stage] = []
        for r in self.readers(stage):
            if r.attach_type is AttachType.INLINE:
                out.extend(c for c in self.consumers(r) if c not in out)
            elif r not in out:
                out.append(r)
        return out

    def is_attached_under(self, stage: Stage, ancestor: Stage) -> bool:
        p = stage.attach_stage
        while p is not None:
            if p is ancestor:
                return True
            p = p.attach_stage
        return False

    # ---- schedule-level primitives ---------------------------------------------------------------
    def cache_read(self, tensor: Tensor, scope: str, readers: Iterable[Any]) -> Tensor:
        """A copy of ``tensor`` in ``scope`` that ``readers`` read instead (TVM's cache_read)."""
        from . import cache
        readers = list(readers) if isinstance(readers, (list, tuple)) else [readers]
        out = cache.cache_read(self, tensor, scope, readers)
        self.trace.record_schedule("cache_read", [self[tensor].name], {"scope": scope},
                                   [self[r].name for r in readers], [self[out].name])
        return out

    def cache_write(self, tensor: Any, scope: str) -> Any:
        """Compute ``tensor`` into a ``scope`` buffer, then copy it out (TVM's cache_write)."""
        from . import cache
        out = cache.cache_write(self, tensor, scope)
        first = out[0] if isinstance(out, list) else out
        src = tensor[0] if isinstance(tensor, (list, tuple)) else tensor
        self.trace.record_schedule("cache_write", [self[src].name], {"scope": scope}, [],
                                   [self[first].name])
        return out

    def rfactor(self, tensor: Tensor, axis: IterVar, factor_axis: int = 0) -> Any:
        """Split a reduction: partial results over ``axis`` first, then their reduction."""
        from . import rfactor as rf
        st = self[tensor]
        out = rf.rfactor(self, tensor, axis, factor_axis)
        first = out[0] if isinstance(out, list) else out
        self.trace.record_schedule("rfactor", [st.name], {"axis": axis.name, "factor_axis": factor_axis},
                                   [], [self[first].name])
        return out

    # ---- display --------------------------------------------------------------------------------
    def default_args(self) -> list[Tensor]:
        """Inputs in order of first use, then the outputs: what ``print(s)`` lowers with."""
        ins = [st.op.outputs[0] for st in self.stages if st.is_placeholder]
        outs = [t for op in self.outputs for t in self[op].op.outputs]
        return ins + outs

    def __str__(self) -> str:
        from tdsl.lowering import lower
        return lower(self, self.default_args(), name="main").script()

    def _repr_html_(self) -> str:
        from tdsl.lowering import lower
        return lower(self, self.default_args(), name="main")._repr_html_()

    def __repr__(self) -> str:
        return f"Schedule(stages={[s.name for s in self.stages]})"


def create_schedule(ops: Any) -> Schedule:
    """A default schedule (every stage a plain loop nest at root) for the output ops."""
    if not isinstance(ops, (list, tuple)):
        ops = [ops]
    ops = [o.op if isinstance(o, Tensor) else o for o in ops]
    for o in ops:
        if not isinstance(o, Operation):
            raise ScheduleError("create_schedule", None, f"expected an operation or tensor, got {o!r}")
    return Schedule(ops)
