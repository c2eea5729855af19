"""The schedule of a computation: its stages, in dependency order, and its trace."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Sequence, TypeVar

from tdsl.errors import InternalError, ScheduleError
from tdsl.tensor import IterVar, Operation, Tensor

from .stage import AttachType, Stage, unique_name
from .trace import Step, Trace

T = TypeVar("T")


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
        for st in self.stages:
            if getattr(st.op, "intrin_region", None) is not None:
                from .tensorize import tensorize_region
                tensorize_region(st, *st.op.intrin_region)
        self._keepalive: list[Operation] = list(_topo_ops(self.outputs))
        #: ``(cond, schedule)`` pairs from ``specialize``, tried in order at run time
        self.variants: list[tuple[Any, "Schedule"]] = []
        #: TVM's order of errors: a compute_at that attaches a stage to itself, makes a
        #: cycle or attaches an output is refused by ``lower``, not by the call
        #: (``tdsl.compat.tvm``'s ``create_schedule`` sets it; tdsl's own refuses at once)
        self.defer_attach_errors = False
        #: TVM's order of an rfactor stage's reduce axes: the ones it leaves alone first,
        #: then the loops it rebuilds (tdsl.compat.tvm sets it; tdsl keeps the loop order)
        self.rfactor_untouched_first = False

    # ---- pickling -----------------------------------------------------------------------
    def __getstate__(self) -> dict:
        """The state with ``stage_map`` as (operation, stage) pairs: its keys are ``id``s,
        which mean nothing in another process (a copy keyed by them found no stage)."""
        ops = {id(op): op for op in self._keepalive}
        missing = [k for k in self.stage_map if k not in ops]
        if missing:
            raise InternalError(f"schedule: {len(missing)} stage key(s) name no kept operation")
        state = dict(self.__dict__)
        state["stage_map"] = [(ops[k], st) for k, st in self.stage_map.items()]
        return state

    def __setstate__(self, state: dict) -> None:
        state = dict(state)
        pairs = state.pop("stage_map")
        self.__dict__.update(state)
        self.stage_map = {id(op): st for op, st in pairs}

    # ---- lookup -------------------------------------------------------------------------
    def __getitem__(self, key: Any) -> Stage:
        op = key.op if isinstance(key, Tensor) else key
        st = self.stage_map.get(id(op)) if isinstance(op, Operation) else None
        if st is None and isinstance(op, Operation):
            from .scan_view import scan_part
            view = scan_part(self, op)   # the init/update of a scan: a view of its stage
            if view is not None:
                return view  # type: ignore[return-value]
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

    # ---- running a primitive --------------------------------------------------------------
    def run_step(self, step: Step, rewrite: Callable[[], T]) -> T:
        """Run ``rewrite`` (a primitive, already validated and recorded as ``step``); append
        ``step`` to the trace when it succeeds, and restore the schedule when it raises, so a
        refused call leaves the schedule exactly as it was."""
        saved = self._snapshot()
        try:
            out = rewrite()
        except BaseException:
            self._restore(saved)
            raise
        self.trace.steps.append(step)
        return out

    def _snapshot(self) -> tuple:
        def copy_state(st: Stage) -> dict:
            d = {}
            for k, v in vars(st).items():
                if k == "iter_attrs":
                    v = {iv: dataclasses.replace(a, pragmas=dict(a.pragmas)) for iv, a in v.items()}
                elif isinstance(v, (list, dict, set)):
                    v = type(v)(v)
                d[k] = v
            return d
        return (list(self.stages), dict(self.stage_map), [(st, copy_state(st)) for st in self.stages],
                len(self.trace.steps))

    def _restore(self, saved: tuple) -> None:
        stages, stage_map, states, n_steps = saved
        del self.trace.steps[n_steps:]
        self.stages[:] = stages
        self.stage_map.clear()
        self.stage_map.update(stage_map)
        for st, state in states:
            st.__dict__.clear()
            st.__dict__.update(state)

    def _tensor_stage(self, primitive: str, tensor: Any) -> Stage:
        """The stage of ``tensor`` (a Tensor of this schedule), or a ScheduleError naming ``primitive``."""
        if not isinstance(tensor, Tensor):
            raise ScheduleError(primitive, None, f"expected a tensor of this schedule, got "
                                f"{type(tensor).__name__} {tensor!r}")
        st = self.stage_map.get(id(tensor.op))
        if st is None:
            raise ScheduleError(primitive, tensor.name, "the tensor is not part of this schedule (not an "
                                "output nor something an output depends on)")
        return st

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
        src = self._tensor_stage("cache_read", tensor)
        readers = list(readers) if isinstance(readers, (list, tuple)) else [readers]
        reader_stages = []
        for r in readers:
            if isinstance(r, Stage) and r._sch is self:
                reader_stages.append(r)
            elif isinstance(r, (Tensor, Operation)) and id(getattr(r, "op", r)) in self.stage_map:
                reader_stages.append(self[r])
            else:
                raise ScheduleError("cache_read", src.name, f"readers must be tensors, operations or "
                                    f"stages of this schedule, got {type(r).__name__} {r!r}")
        step = self.trace.step("cache_read", src, (), {"scope": scope, "value_index": tensor.value_index},
                               readers=reader_stages)
        return self.run_step(step, lambda: cache.cache_read(self, tensor, scope, reader_stages))

    def cache_write(self, tensor: Any, scope: str) -> Any:
        """Compute ``tensor`` into a ``scope`` buffer, then copy it out (TVM's cache_write)."""
        from . import cache
        first = tensor[0] if isinstance(tensor, (list, tuple)) and tensor else tensor
        st = self._tensor_stage("cache_write", first)
        if isinstance(tensor, (list, tuple)):
            for t in tensor:
                if self._tensor_stage("cache_write", t) is not st:
                    raise ScheduleError("cache_write", st.name, "all the tensors given must be outputs "
                                        "of one operation")
        step = self.trace.step("cache_write", st, (), {"scope": scope})
        return self.run_step(step, lambda: cache.cache_write(self, tensor, scope))

    def rfactor(self, tensor: Tensor, axis: IterVar, factor_axis: int = 0,
                block_axis: "int | None" = None, block_lanes: "int | None" = None,
                block_at: "int | None" = None) -> Any:
        """Split a reduction: partial results over ``axis`` first, then their reduction.

        ``block_axis``, ``block_lanes``, ``block_at``: the partial results in a blocked
        layout (like NCHW4c): the stage's data axis ``block_axis`` split by ``block_lanes``,
        the inner part the innermost axis, the outer part at position ``block_at`` of the
        other data axes (before ``factor_axis`` is placed)."""
        from . import rfactor as rf
        st = self._tensor_stage("rfactor", tensor)
        if not isinstance(factor_axis, int) or isinstance(factor_axis, bool):
            raise ScheduleError("rfactor", st.name, f"factor_axis must be an int, got {factor_axis!r}")
        block = rf.check_block(st, block_axis, block_lanes, block_at)
        kw = {"factor_axis": factor_axis, "block_axis": block_axis, "block_lanes": block_lanes,
              "block_at": block_at}
        step = self.trace.step("rfactor", st, [axis], kw)
        return self.run_step(step, lambda: rf.rfactor(self, tensor, axis, factor_axis, block))

    def specialize(self, cond: Any, other: "Schedule") -> None:
        """Run ``other``'s loop nest instead of this one when ``cond`` holds at call time.

        ``cond`` is a boolean expression over the symbolic sizes (e.g. ``m <= 16``);
        ``other`` is a schedule of the same outputs.  ``lower`` emits
        ``if cond: <other's nest> else: <this nest>`` in one function, so a shape-dependent
        choice of schedule (a batch-1 streaming pass vs a register-tiled one) needs no
        second kernel or a dispatcher in Python.
        """
        from tdsl.expr import Expr
        from tdsl.visitor import free_vars
        if not isinstance(other, Schedule) or other is self:
            raise ScheduleError("specialize", None, f"expected another Schedule, got {other!r}")
        if [id(o) for o in other.outputs] != [id(o) for o in self.outputs]:
            raise ScheduleError("specialize", None, "the specialized schedule must have the same "
                                "output operations")
        if not isinstance(cond, Expr) or not cond.dtype.is_bool:
            raise ScheduleError("specialize", None, f"cond must be a boolean expression over "
                                f"symbolic sizes, got {cond!r}")
        if not free_vars(cond):
            raise ScheduleError("specialize", None, f"cond {cond} uses no symbolic size; "
                                f"choose the schedule at schedule time instead")
        if other.variants:
            raise ScheduleError("specialize", None, "the specialized schedule has variants of its "
                                "own; add them to this schedule instead")
        self.variants.append((cond, other))

    def normalize(self) -> "Schedule":
        """TVM's ``s = s.normalize()``: this schedule itself, unchanged.

        TVM's version returns a copy in which inlined stages are substituted and every loop
        whose range starts above 0 is rebased to start at 0, steps its own lowering needs.
        tdsl's ``lower`` does both itself (each loop runs from 0 and offsets its index), so
        there is nothing to rebuild.  Unlike TVM, the result is not a copy: scheduling it
        also schedules ``self`` (they are the same object).
        """
        return self

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
