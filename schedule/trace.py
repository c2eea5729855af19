"""A schedule as data: the list of primitive calls, serializable and replayable.

Steps identify what they touch by position, never by name: a stage by its
index in the schedule's stage list (deterministic: producers first, new cache
and rfactor stages inserted at fixed places), a tensor by its stage and output
index, a loop by its index in the stage's ``all_iter_vars`` (root axes first,
then every loop in creation order), a symbolic size by its position among the
computation's variables (``trace_expr``).  So a trace recorded on one schedule
replays on a fresh schedule of the same computation, whatever the names (two
stages may both be called "compute").  Names are kept only as labels, for
printing.

A step is built (``Trace.step``) from the schedule as it is *before* the
primitive runs; the schedule appends it only once the rewrite has succeeded,
and restores its state if the rewrite fails (``Schedule.run_step``).
"""
from __future__ import annotations

import json
import numbers
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from tdsl.errors import ScheduleError, TuningError
from tdsl.expr import Const, Expr
from tdsl.tensor import IterVar

from .trace_expr import ExprEncodeError, computation_vars, decode, encode, render

if TYPE_CHECKING:
    from .schedule import Schedule
    from .stage import Stage

STAGE_PRIMITIVES = {"split", "fuse", "reorder", "tile", "vectorize", "unroll", "parallel", "bind",
                    "pragma", "storage_align", "align_region", "double_buffer", "tensorize",
                    "compute_at", "compute_inline", "compute_root", "set_scope",
                    "set_store_predicate", "transform_layout"}
SCHEDULE_PRIMITIVES = {"cache_read", "cache_write", "rfactor"}
#: keyword arguments that hold a (possibly symbolic) size
SIZE_KWARGS = {"factor", "nparts", "x_factor", "y_factor"}


@dataclass(frozen=True)
class Step:
    """One primitive call: which, on which stage (index), with which loops (indices).

    ``kwargs`` values are JSON values; a symbolic size is ``{"expr": tree}``.
    ``readers`` are stage indices (cache_read).  ``labels`` are the names at
    recording time, for display only; replay ignores them.
    """

    primitive: str
    stage: int
    loops: tuple[int, ...] = ()
    kwargs: tuple[tuple[str, Any], ...] = ()
    readers: tuple[int, ...] = ()
    labels: tuple[tuple[str, Any], ...] = ()

    def to_dict(self) -> dict:
        d: dict[str, Any] = {"primitive": self.primitive, "stage": self.stage}
        if self.loops:
            d["loops"] = list(self.loops)
        if self.kwargs:
            d["kwargs"] = dict(self.kwargs)
        if self.readers:
            d["readers"] = list(self.readers)
        if self.labels:
            d["labels"] = {k: list(v) if isinstance(v, tuple) else v for k, v in self.labels}
        return d

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> "Step":
        try:
            prim = d["primitive"]
            if prim not in STAGE_PRIMITIVES | SCHEDULE_PRIMITIVES:
                raise TuningError(f"trace step names unknown primitive {prim!r}")
            stage = d["stage"]
            if not isinstance(stage, int) or isinstance(stage, bool):
                raise TuningError(f"trace step {dict(d)!r} names its stage by {stage!r}: this is the "
                                  f"old name-based trace format, which cannot be replayed reliably "
                                  f"(names are not unique); record the schedule again")
            loops = tuple(d.get("loops", ()))
            readers = tuple(d.get("readers", ()))
            if not all(isinstance(x, int) for x in loops + readers):
                raise TuningError(f"trace step {dict(d)!r}: loops and readers must be indices "
                                  f"(old name-based format?); record the schedule again")
            labels = tuple((k, tuple(v) if isinstance(v, list) else v)
                           for k, v in dict(d.get("labels", {})).items())
            return Step(prim, stage, loops, tuple(sorted(dict(d.get("kwargs", {})).items())),
                        readers, labels)
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            raise TuningError(f"malformed trace step {d!r}: {e}") from None

    def label(self, key: str, default: Any = None) -> Any:
        return dict(self.labels).get(key, default)

    def __str__(self) -> str:
        names = list(self.label("loops", ()))
        loops = [f"#{k} {names[n]!r}" if n < len(names) else f"#{k}" for n, k in enumerate(self.loops)]
        kw = dict(self.kwargs)
        args: list[str] = []
        if self.primitive == "compute_at":
            args.append(f"s[#{kw.pop('parent')} {self.label('parent', '')!r}]")
        args += loops
        for k, v in sorted(kw.items()):
            args.append(f"{k}={render(v['expr'])}" if isinstance(v, dict) and "expr" in v else f"{k}={v!r}")
        if self.readers:
            rn = list(self.label("readers", ()))
            args.append("readers=[" + ", ".join(f"#{r} {rn[n]!r}" if n < len(rn) else f"#{r}"
                                                for n, r in enumerate(self.readers)) + "]")
        return f"s[#{self.stage} {self.label('stage', '')!r}].{self.primitive}({', '.join(args)})"


def _stage_index(sch: "Schedule", stage: "Stage", primitive: str) -> int:
    for k, st in enumerate(sch.stages):
        if st is stage:
            return k
    raise ScheduleError(primitive, getattr(stage, "name", None), "the stage is not part of this schedule")


def _loop_index(stage: "Stage", iv: Any, primitive: str) -> int:
    if isinstance(iv, IterVar):
        for k, v in enumerate(stage.all_iter_vars):
            if v is iv:
                return k
    stage.find_leaf(primitive, iv)         # raises the precise reason (not a loop, other stage...)
    raise ScheduleError(primitive, stage.name, f"'{getattr(iv, 'name', iv)}' is not a loop of this stage")


def _size(sch: "Schedule", stage: "Stage", primitive: str, key: str, value: Any) -> Any:
    """A size argument as JSON: an int, or ``{"expr": tree}`` for a symbolic one."""
    if isinstance(value, bool):
        raise ScheduleError(primitive, stage.name, f"{key} must be an integer, got {value!r}")
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, Const) and value.dtype.is_int:
        return int(value.value)
    if isinstance(value, Expr) and not isinstance(value, IterVar) and value.dtype.is_int:
        try:
            return {"expr": encode(value, computation_vars(sch))}
        except ExprEncodeError as e:
            raise ScheduleError(primitive, stage.name, f"{key}={value!r}: {e}") from None
    raise ScheduleError(primitive, stage.name, f"{key} must be an integer or an integer expression "
                        f"of the computation's sizes, got {type(value).__name__} {value!r}")


def _plain(primitive: str, stage: "Stage", key: str, value: Any) -> Any:
    if value is None or isinstance(value, (bool, str, int, float)):
        return value
    if isinstance(value, Const):
        return value.value
    raise ScheduleError(primitive, stage.name, f"{key}={value!r}: only ints, floats, strings and "
                        f"bools can be recorded")


@dataclass
class Trace:
    """The primitive calls that made a schedule, in order."""

    steps: list[Step] = field(default_factory=list)

    @staticmethod
    def step(primitive: str, stage: "Stage", loops: Sequence[Any] = (), kwargs: "Mapping[str, Any] | None" = None,
             parent: "Stage | None" = None, readers: Sequence["Stage"] = ()) -> Step:
        """The record of calling ``primitive`` now (validates identities, changes nothing).

        ``loops`` belong to ``parent`` when given (compute_at), else to ``stage``.
        """
        sch = stage._sch
        owner = parent if parent is not None else stage
        kw: dict[str, Any] = {}
        for k, v in (kwargs or {}).items():
            if v is None:
                continue
            kw[k] = _size(sch, stage, primitive, k, v) if k in SIZE_KWARGS else _plain(primitive, stage, k, v)
        labels: dict[str, Any] = {"stage": stage.name}
        if loops:
            labels["loops"] = tuple(getattr(iv, "name", str(iv)) for iv in loops)
        if parent is not None:
            kw["parent"] = _stage_index(sch, parent, primitive)
            labels["parent"] = parent.name
        if readers:
            labels["readers"] = tuple(r.name for r in readers)
        return Step(primitive, _stage_index(sch, stage, primitive),
                    tuple(_loop_index(owner, iv, primitive) for iv in loops),
                    tuple(sorted(kw.items())), tuple(_stage_index(sch, r, primitive) for r in readers),
                    tuple(sorted(labels.items())))

    def to_json(self) -> str:
        return json.dumps([s.to_dict() for s in self.steps])

    @staticmethod
    def from_json(text: str) -> "Trace":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise TuningError(f"trace is not valid JSON: {e}") from None
        if not isinstance(data, list):
            raise TuningError("trace JSON must be a list of steps")
        return Trace([Step.from_dict(d) for d in data])

    def __str__(self) -> str:
        return "\n".join(str(s) for s in self.steps)

    def __len__(self) -> int:
        return len(self.steps)

    def apply(self, sch: "Schedule", intrinsics: "Mapping[str, Any] | None" = None) -> "Schedule":
        """Replay every step on ``sch`` (a fresh schedule of the same computation)."""
        for step in self.steps:
            apply_step(sch, step, intrinsics or {})
        return sch


def _stage(sch: "Schedule", k: Any, step: Step) -> "Stage":
    if not isinstance(k, int) or not 0 <= k < len(sch.stages):
        raise ScheduleError(step.primitive, step.label("stage"), f"replay: the schedule has no stage "
                            f"#{k} (it has {len(sch.stages)}); the trace is for another computation")
    return sch.stages[k]


def _loop(stage: "Stage", k: int, step: Step) -> IterVar:
    if not 0 <= k < len(stage.all_iter_vars):
        raise ScheduleError(step.primitive, stage.name, f"replay: the stage has no loop #{k} (loops: "
                            f"{[v.name for v in stage.all_iter_vars]}); the trace is for another "
                            f"computation", loop=f"#{k}")
    return stage.all_iter_vars[k]


def _size_arg(sch: "Schedule", stage: "Stage", step: Step, value: Any) -> Any:
    if isinstance(value, dict) and "expr" in value:
        try:
            return decode(value["expr"], computation_vars(sch))
        except (ExprEncodeError, KeyError, TypeError) as e:
            raise ScheduleError(step.primitive, stage.name, f"replay: {e}") from None
    return value


def apply_step(sch: "Schedule", step: Step, intrinsics: Mapping[str, Any]) -> None:
    """Run one recorded step on ``sch``."""
    from tdsl.tensor import thread_axis
    stage = _stage(sch, step.stage, step)
    kw = {k: (_size_arg(sch, stage, step, v) if k in SIZE_KWARGS else v) for k, v in step.kwargs}
    p = step.primitive
    # compute_at's loop belongs to the parent stage, not to the stage being attached
    owner = _stage(sch, kw.pop("parent"), step) if p == "compute_at" else stage
    loops = [_loop(owner, k, step) for k in step.loops]
    if p == "cache_read":
        readers = [_stage(sch, r, step).op.outputs[0] for r in step.readers]
        vi = kw.get("value_index", 0)
        if not isinstance(vi, int) or not 0 <= vi < stage.op.num_outputs:
            raise ScheduleError(p, stage.name, f"replay: the stage has no output #{vi}")
        sch.cache_read(stage.op.outputs[vi], kw["scope"], readers)
    elif p == "cache_write":
        outs = list(stage.op.outputs)
        sch.cache_write(outs if len(outs) > 1 else outs[0], kw["scope"])
    elif p == "rfactor":
        sch.rfactor(stage.op.outputs[0], loops[0], kw.get("factor_axis", 0),
                    kw.get("block_axis"), kw.get("block_lanes"), kw.get("block_at"))
    elif p == "bind":
        stage.bind(loops[0], thread_axis(kw["thread"]))
    elif p == "compute_at":
        stage.compute_at(owner, loops[0])
    elif p == "set_store_predicate":
        pred: Any = True
        for term in filter(None, str(kw.get("predicate", "")).split(",")):
            tag, _, value = term.partition("==")
            eq = thread_axis(tag).var.equal(int(value))
            pred = eq if pred is True else pred & eq
        stage.set_store_predicate(pred)
    elif p == "tensorize":
        name = kw["intrin"]
        if name not in intrinsics:
            raise ScheduleError("tensorize", stage.name, f"replay needs the tensor intrinsic '{name}': "
                                f"pass intrinsics={{'{name}': intrin}}")
        stage.tensorize(loops[0], intrinsics[name])
    else:
        getattr(stage, p)(*loops, **kw)
