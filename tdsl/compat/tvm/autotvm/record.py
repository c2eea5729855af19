"""TVM's JSON-lines tuning logs: ``log_to_file`` writes them, ``load_from_file`` reads them,
``apply_history_best`` (a log, a list of records, or a tdsl database) picks configs.

One line per measurement::

    {"input": [target, task name, args, {}], "config": {"index": i, "code_hash": null,
     "entity": [[knob, "sp"|"ot"|"re"|"an", value], ...]},
     "result": [[seconds...], error_no, all_cost, timestamp], "version": 0.2,
     "tvm_version": "0.19.0"}
"""
from __future__ import annotations

import contextvars
import json
import os
import warnings
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Optional, Sequence

from tdsl.autotune.tuner import DEFAULT_KEY
from tdsl.errors import TuningError

from ..target import Target
from .space import ConfigEntity, point_from_entity
from .task import TEMPLATES, args_key

_ACTIVE: contextvars.ContextVar[tuple] = contextvars.ContextVar("tdsl_compat_autotvm_best",
                                                                default=())


@dataclass(frozen=True)
class LogRecord:
    """One log line: which workload, which config (the entity list), its costs."""

    target: str
    task_name: str
    args: list
    config: dict
    costs: tuple
    error_no: int
    all_cost: float
    timestamp: float

    @property
    def valid(self) -> bool:
        return self.error_no == 0 and bool(self.costs)

    @property
    def cost(self) -> float:
        return sum(self.costs) / len(self.costs) if self.valid else float("inf")

    def to_json(self) -> str:
        return json.dumps({"input": [self.target, self.task_name, self.args, {}],
                           "config": self.config,
                           "result": [list(self.costs), self.error_no, self.all_cost,
                                      self.timestamp],
                           "version": 0.2, "tvm_version": "0.19.0"})


def decode(line: str) -> Optional[LogRecord]:
    """A record from one log line (None for blank lines)."""
    line = line.strip()
    if not line:
        return None
    try:
        row = json.loads(line)
        tgt, name, args = row["input"][:3]
        costs, err, all_cost, ts = row["result"]
        return LogRecord(str(tgt), str(name), args, row["config"], tuple(float(c) for c in costs),
                         int(err), float(all_cost), float(ts))
    except (ValueError, KeyError, TypeError) as e:
        raise TuningError(f"not an AutoTVM log line ({e}): {line[:120]}") from None


def load_from_file(filename: str) -> Iterator[tuple[LogRecord, LogRecord]]:
    """The records of a log, as ``(input, result)`` pairs like TVM's (both the same record)."""
    with open(filename) as f:
        for line in f:
            rec = decode(line)
            if rec is not None:
                yield rec, rec


def encode(task: Any, entity: ConfigEntity, result: Any) -> LogRecord:
    err = int(result.error_no)
    return LogRecord(str(task.target), task.name, json.loads(args_key(task.args)),
                     entity.to_json_dict(), tuple(result.costs), err, float(result.all_cost),
                     float(result.timestamp))


class log_to_file:  # noqa: N801  (TVM's name)
    """Tuner callback appending each measurement to ``file_out`` as a JSON line."""

    def __init__(self, file_out: str, protocol: str = "json"):
        if protocol != "json":
            raise TuningError("log_to_file: only the 'json' protocol is supported")
        self.file_out = file_out

    def __call__(self, tuner: Any, inputs: Sequence[Any], results: Sequence[Any]) -> None:
        task = getattr(tuner, "compat_task", None)
        if task is None:
            raise TuningError("log_to_file: use it with a tuner from tvm.autotvm.tuner")
        space = task.tdsl.space
        with open(self.file_out, "a") as f:
            for inp, res in zip(inputs, results):
                if DEFAULT_KEY in inp.config:
                    point = space.default()
                else:
                    point = space.point_of(inp.config)
                f.write(encode(task, ConfigEntity(space, point), res).to_json() + "\n")


def _is_sqlite(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


class ApplyHistoryBest:
    """Inside it, calling a template uses the best logged config of its workload, and
    ``tvm.build`` uses the best record of a tdsl database."""

    def __init__(self, records: Any):
        self.best: dict[tuple[str, str], LogRecord] = {}
        self._tdsl_ctx: Any = None
        if records is None:   # TVM's way of saying "no records": templates use their defaults
            return
        if isinstance(records, (str, os.PathLike)):
            path = os.fspath(records)
            if _is_sqlite(path):
                from tdsl import autotune
                self._tdsl_ctx = autotune.apply_history_best(path)
                return
            records = [r for r, _ in load_from_file(path)]
        for r in _flatten(records):
            if not r.valid:
                continue
            key = (r.task_name, json.dumps(r.args))
            old = self.best.get(key)
            if old is None or r.cost < old.cost:
                self.best[key] = r

    def query(self, task_name: Any, args: Sequence[Any]) -> Any:
        """``query(task_name, args)``: the best ``LogRecord`` of a workload (None: none).

        ``query(target, workload)`` (TVM's form, ``workload = (task name, *args)`` as
        ``task.workload`` gives it): the best config as a ``ConfigEntity`` of the registered
        template's space, else the template's default config (``is_fallback`` True)."""
        if isinstance(task_name, str) and not (isinstance(args, tuple) and args
                                               and isinstance(args[0], str)
                                               and args[0] in TEMPLATES):
            return self.best.get((task_name, args_key(args)))
        if not (isinstance(args, (tuple, list)) and args and isinstance(args[0], str)):
            raise TuningError(f"ApplyHistoryBest.query: expected (task name, args) or (target, "
                              f"workload), got ({task_name!r}, {args!r})")
        name, wargs = args[0], tuple(args[1:])
        tmpl = TEMPLATES.get(name)
        if tmpl is None:
            raise TuningError(f"ApplyHistoryBest.query: no template named {name!r}")
        space = tmpl.space(wargs)
        rec = self.best.get((name, args_key(wargs)))
        tgt = Target(task_name) if isinstance(task_name, str) else task_name
        if rec is not None and rec.target.split()[0] == tgt.kind.name:
            return ConfigEntity(space, point_from_entity(space, rec.config["entity"]))
        return ConfigEntity(space, space.default(), is_fallback=True)

    def __enter__(self) -> "ApplyHistoryBest":
        if self._tdsl_ctx is not None:
            self._tdsl_ctx.__enter__()
        self._token = _ACTIVE.set(_ACTIVE.get() + (self,))
        return self

    def __exit__(self, *exc: Any) -> None:
        _ACTIVE.reset(self._token)
        if self._tdsl_ctx is not None:
            self._tdsl_ctx.__exit__(*exc)


def _flatten(records: Iterable[Any]) -> Iterator[LogRecord]:
    for r in records:
        if isinstance(r, tuple):
            r = r[0]
        if isinstance(r, str):
            r = decode(r)
        if isinstance(r, LogRecord):
            yield r


def apply_history_best(records: Any) -> ApplyHistoryBest:
    """``with autotvm.apply_history_best("matmul.log"):`` templates called inside use the best
    config logged for their workload (a tdsl database also makes ``tvm.build`` use its best)."""
    return ApplyHistoryBest(records)


def current_best(template: Any, args: Sequence[Any]) -> "dict | None":
    """The knob choices of the best logged config for ``template(*args)`` in the innermost
    ``apply_history_best`` context (None: the default config)."""
    stack = _ACTIVE.get()
    if not stack:
        return None
    rec = None
    for ctx in reversed(stack):
        rec = ctx.query(template.name, args)
        if rec is not None:
            break
    if rec is None:
        if any(ctx._tdsl_ctx is None for ctx in stack):
            warnings.warn(f"apply_history_best: no record for {template.name}{tuple(args)}; "
                          f"using the default config", stacklevel=3)
        return None
    tgt = Target.current()
    if tgt is not None and rec.target.split()[0] != tgt.kind.name:
        return None
    space = template.space(args)
    point = point_from_entity(space, rec.config["entity"])
    return dict(zip(space.names, point))


__all__ = ["log_to_file", "load_from_file", "apply_history_best", "ApplyHistoryBest",
           "LogRecord", "decode", "encode"]
