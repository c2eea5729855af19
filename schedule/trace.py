"""A schedule as data: the list of primitive calls, serializable and replayable.

Loops and stages are named, not referenced, so a trace recorded on one
schedule replays on a fresh schedule of the same computation (the autotuner
mutates and replays traces).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from tdsl.errors import ScheduleError, TuningError
from tdsl.expr import Const, Expr

if TYPE_CHECKING:
    from .schedule import Schedule
    from .stage import Stage

STAGE_PRIMITIVES = {"split", "fuse", "reorder", "tile", "vectorize", "unroll", "parallel", "bind",
                    "pragma", "storage_align", "double_buffer", "tensorize", "compute_at",
                    "compute_inline", "compute_root", "set_scope"}
SCHEDULE_PRIMITIVES = {"cache_read", "cache_write", "rfactor"}


def _plain(value: Any) -> Any:
    if isinstance(value, Const):
        return value.value
    if isinstance(value, Expr):
        raise ScheduleError("trace", None, f"symbolic argument {value!r} cannot be recorded; "
                            f"use an int")
    return value


@dataclass(frozen=True)
class Step:
    """One primitive call: which, on which stage, with which loops and arguments."""

    primitive: str
    stage: str
    loops: tuple[str, ...] = ()
    kwargs: tuple[tuple[str, Any], ...] = ()
    readers: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        d: dict[str, Any] = {"primitive": self.primitive, "stage": self.stage}
        if self.loops:
            d["loops"] = list(self.loops)
        if self.kwargs:
            d["kwargs"] = dict(self.kwargs)
        if self.readers:
            d["readers"] = list(self.readers)
        if self.outputs:
            d["outputs"] = list(self.outputs)
        return d

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> "Step":
        try:
            prim = d["primitive"]
            if prim not in STAGE_PRIMITIVES | SCHEDULE_PRIMITIVES:
                raise TuningError(f"trace step names unknown primitive {prim!r}")
            return Step(prim, str(d["stage"]), tuple(d.get("loops", ())),
                        tuple(sorted(dict(d.get("kwargs", {})).items())),
                        tuple(d.get("readers", ())), tuple(d.get("outputs", ())))
        except (KeyError, TypeError, AttributeError) as e:
            raise TuningError(f"malformed trace step {d!r}: {e}") from None

    def __str__(self) -> str:
        args = [repr(x) for x in self.loops] + [f"{k}={v!r}" for k, v in self.kwargs]
        if self.readers:
            args.append(f"readers={list(self.readers)!r}")
        return f"s[{self.stage!r}].{self.primitive}({', '.join(args)})"


@dataclass
class Trace:
    """The primitive calls that made a schedule, in order."""

    steps: list[Step] = field(default_factory=list)

    def record(self, primitive: str, stage: "Stage", loops: list, kwargs: dict, outputs: list) -> None:
        kw = tuple(sorted((k, _plain(v)) for k, v in kwargs.items() if v is not None))
        self.steps.append(Step(primitive, stage.name, tuple(iv.name for iv in loops), kw, (),
                               tuple(getattr(o, "name", str(o)) for o in outputs)))

    def record_schedule(self, primitive: str, stages: list[str], kwargs: dict, readers: list[str],
                        outputs: list[str]) -> None:
        kw = tuple(sorted((k, _plain(v)) for k, v in kwargs.items()))
        self.steps.append(Step(primitive, stages[0], (), kw, tuple(readers), tuple(outputs)))

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


def _loop(stage: "Stage", name: str, step: Step):
    for iv in stage.all_iter_vars:
        if iv.name == name:
            return iv
    raise ScheduleError(step.primitive, stage.name, f"replay: no loop named '{name}' "
                        f"(loops: {[v.name for v in stage.leaf_iter_vars]})", loop=name)


def apply_step(sch: "Schedule", step: Step, intrinsics: Mapping[str, Any]) -> None:
    """Run one recorded step on ``sch``."""
    from tdsl.tensor import thread_axis
    stage = sch.stage_by_name(step.stage)
    kw = dict(step.kwargs)
    p = step.primitive
    # compute_at's loop belongs to the parent stage, not to the stage being attached
    owner = sch.stage_by_name(kw["parent"]) if p == "compute_at" else stage
    loops = [_loop(owner, n, step) for n in step.loops]
    if p == "cache_read":
        readers = [sch.stage_by_name(r).op.outputs[0] for r in step.readers]
        sch.cache_read(stage.op.outputs[0], kw["scope"], readers)
    elif p == "cache_write":
        outs = list(stage.op.outputs)
        sch.cache_write(outs if len(outs) > 1 else outs[0], kw["scope"])
    elif p == "rfactor":
        sch.rfactor(stage.op.outputs[0], _loop(stage, kw["axis"], step), kw.get("factor_axis", 0))
    elif p == "bind":
        stage.bind(loops[0], thread_axis(kw["thread"]))
    elif p == "compute_at":
        stage.compute_at(owner, loops[0])
    elif p == "tensorize":
        name = kw["intrin"]
        if name not in intrinsics:
            raise ScheduleError("tensorize", stage.name, f"replay needs the tensor intrinsic '{name}': "
                                f"pass intrinsics={{'{name}': intrin}}")
        stage.tensorize(loops[0], intrinsics[name])
    else:
        getattr(stage, p)(*loops, **kw)
