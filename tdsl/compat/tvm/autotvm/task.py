"""``autotvm.template``, ``autotvm.task.create`` and the task object TVM scripts use.

TVM finds templates by name, so this layer keeps a name -> template table
(``TEMPLATES``): the one piece of process-wide state compat needs to accept
``task.create("name", args, target)``.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from tdsl import autotune
from tdsl.autotune.template import Template as _Template
from tdsl.errors import TuningError

from ..target import Target, as_tdsl
from .space import Config, ConfigEntity, ConfigSpaceView

#: templates registered with ``@autotvm.template(name)``, by name
TEMPLATES: dict[str, "Template"] = {}


class Template(_Template):
    """A tdsl template whose config also has AutoTVM's ``define_annotate``/``axis``; called
    inside ``apply_history_best`` it uses the best logged config of its workload."""

    config_type = Config

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            raise TuningError(f"template {self.name!r}: keyword arguments are not supported; pass "
                              f"them positionally")
        from .record import current_best
        point = current_best(self, args)
        return self.instantiate(args, point)[0]


def template(task_name: str, func: "Callable | None" = None) -> Any:
    """``@autotvm.template("name")``: register a schedule template under ``name``."""
    def wrap(f: Callable) -> Template:
        t = Template(task_name, f)
        TEMPLATES[task_name] = t
        return t
    return wrap(func) if func is not None else wrap


def register(name: str, func: "Callable | None" = None, override: bool = False) -> Any:
    return template(name, func)


def get_config() -> Config:
    """The config of the template call in progress."""
    return autotune.get_config()


def args_key(args: Sequence[Any]) -> str:
    """A workload's arguments as TVM writes them in logs (JSON)."""
    import json
    return json.dumps(serialize_args(args))


def serialize_args(args: Sequence[Any]) -> list:
    out = []
    for a in args:
        if hasattr(a, "shape") and hasattr(a, "dtype") and hasattr(a, "op"):
            out.append(["TENSOR", [int(s) for s in a.shape], str(a.dtype)])
        elif isinstance(a, (list, tuple)):
            out.append(serialize_args(a))
        elif isinstance(a, (int, float, str, bool)) or a is None:
            out.append(a)
        else:
            out.append(str(a))
    return out


class Task:
    """``autotvm.task.create(name, args, target)``: a tdsl task with TVM's attributes
    (``config_space``, ``name``, ``args``, ``target``, ``flop``, ``instantiate``)."""

    def __init__(self, name: str, args: Sequence[Any], target: Any, template: Template):
        self.name = name
        self.args = tuple(args)
        self.template = template
        self.target = target if isinstance(target, Target) else Target(target)
        self.tdsl = autotune.create_task(template, self.args, target=as_tdsl(self.target),
                                         name=name)
        self.config_space = ConfigSpaceView(self.tdsl.space)

    @property
    def flop(self) -> float:
        return self.tdsl.flop

    @property
    def workload(self) -> tuple:
        return (self.name, *self.args)

    def instantiate(self, config: ConfigEntity) -> Any:
        point = dict(zip(self.tdsl.space.names, config.point))
        return self.template.instantiate(self.args, point)[0]

    def __repr__(self) -> str:
        return (f"Task(func_name={self.name}, args={self.args}, kwargs={{}}, "
                f"workload={self.workload})")


def create(task_name: str, args: Sequence[Any], target: Any, target_host: Any = None) -> Task:
    """The tuning task of the template registered as ``task_name`` with ``args``."""
    tmpl = TEMPLATES.get(task_name)
    if tmpl is None:
        known = ", ".join(sorted(TEMPLATES)) or "none"
        raise TuningError(f"autotvm.task.create: no template named {task_name!r} (registered: "
                          f"{known}); decorate it with @autotvm.template({task_name!r})")
    return Task(task_name, args, target, tmpl)


__all__ = ["template", "register", "create", "get_config", "Task", "Template", "TEMPLATES"]
