"""Schedule templates (AutoTVM's shape): a function with knobs.

::

    @autotune.template("matmul")
    def matmul(N, M, K):
        A = td.placeholder((N, K), name="A"); ...
        s = td.create_schedule(C.op)
        cfg = autotune.get_config()
        i, j = s[C].op.axis
        cfg.define_split("tile_i", i, num_outputs=3)
        cfg.define_knob("unroll", [0, 1])
        io, im, ii = cfg["tile_i"].apply(s, C, i)
        ...
        return s, [A, B, C]

The decorator returns a ``Template`` object (no global registry).  Calling it
runs the function with the config in effect: the default one (every split
trivial, the first choice of each knob) unless a tuner is instantiating a
candidate.  ``get_config()`` returns the config of the innermost active call.
"""
from __future__ import annotations

import contextvars
import functools
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Mapping, Sequence

from tdsl.errors import TuningError
from tdsl.expr import Const
from tdsl.tensor import IterVar

from .irutil import eval_int
from .space import (ConfigSpace, KnobSpace, OtherOptionSpace, ReorderSpace, SplitSpace)

_CURRENT: contextvars.ContextVar["Config | None"] = contextvars.ContextVar("tdsl_autotune_config",
                                                                          default=None)


class Config:
    """The knobs of one template call and the choice made for each.

    ``define_*`` add a knob to ``space`` (the first call of a template collects
    the space); ``cfg[name]`` is the chosen entity (index ``point[name]``, 0 when
    not chosen: the default).  ``sizes`` binds symbolic extents for ``define_split``.
    """

    def __init__(self, point: "Mapping[str, int] | None" = None,
                 sizes: "Mapping[str, int] | None" = None):
        self.space = ConfigSpace()
        self.point = dict(point or {})
        self.sizes = dict(sizes or {})
        self.flop = 0.0

    @property
    def is_fallback(self) -> bool:
        return not self.point

    # ---- knob definitions ------------------------------------------------------------------
    def _extent(self, axis: Any) -> int:
        if isinstance(axis, int):
            return axis
        if isinstance(axis, IterVar):
            if axis.dom is None:
                raise TuningError(f"define_split: loop '{axis.name}' has no domain (a thread axis?)")
            ext = axis.dom.extent
            if isinstance(ext, Const):
                return int(ext.value)
            value = eval_int(ext, self.sizes, default=-1)
            if value < 1:
                raise TuningError(f"define_split: loop '{axis.name}' has symbolic extent {ext}; give "
                                  f"representative sizes (sizes={{'n': 256}}) or an int extent")
            return value
        raise TuningError(f"define_split: expected a loop (IterVar) or an int extent, got {axis!r}")

    def define_split(self, name: str, axis: Any, num_outputs: int = 2, policy: str = "factors",
                     max_factor: "int | None" = None, filter: "Callable | None" = None) -> None:
        """A knob choosing how to split ``axis`` (or an int extent) into ``num_outputs`` loops."""
        self._define(name, SplitSpace(self._extent(axis), num_outputs, policy, max_factor, filter))

    def define_knob(self, name: str, candidates: Sequence[Any]) -> None:
        """A knob choosing one of ``candidates`` (JSON-able values)."""
        self._define(name, OtherOptionSpace(list(candidates)))

    def define_reorder(self, name: str, axes: Sequence[Any], policy: str = "all",
                       candidate: Sequence[Sequence[int]] = ()) -> None:
        """A knob choosing an order of ``axes`` (apply with ``cfg[name].apply(s, C, axes)``)."""
        self._define(name, ReorderSpace(len(axes), policy, candidate))

    def _define(self, name: str, knob: KnobSpace) -> None:
        if not isinstance(name, str) or not name:
            raise TuningError("knob names must be non-empty strings")
        self.space.add(name, knob)
        idx = self.point.get(name, 0)
        if not 0 <= idx < len(knob):
            raise TuningError(f"knob {name!r}: choice {idx} out of range (it has {len(knob)})")

    def add_flop(self, flop: float) -> None:
        """Declare the floating-point work of the template (for GFLOP/s reports)."""
        self.flop += float(flop)

    def __getitem__(self, name: str) -> Any:
        knob = self.space.knobs.get(name)
        if knob is None:
            raise TuningError(f"knob {name!r} is used before it is defined (define_split/"
                              f"define_knob/define_reorder first)")
        return knob.entities[self.point.get(name, 0)]

    def __repr__(self) -> str:
        vals = {n: k.entities[self.point.get(n, 0)].value for n, k in self.space.knobs.items()}
        return f"Config({vals})"


def get_config() -> Config:
    """The config of the template call in progress (a default one outside any call)."""
    cfg = _CURRENT.get()
    if cfg is None:
        raise TuningError("get_config() is called outside a template; decorate the function with "
                          "@autotune.template(name) and call it through the template")
    return cfg


@contextmanager
def _using(cfg: Config) -> Iterator[Config]:
    token = _CURRENT.set(cfg)
    try:
        yield cfg
    finally:
        _CURRENT.reset(token)


class Template:
    """A schedule template: ``func(*args) -> (schedule, tensors)`` with knobs."""

    #: the config object the template function sees (a subclass may extend it)
    config_type: type = Config

    def __init__(self, name: str, func: Callable[..., Any]):
        self.name = name
        self.func = func
        functools.update_wrapper(self, func)

    def __call__(self, *args: Any) -> Any:
        """Run the template with the config in effect (the default one)."""
        return self.instantiate(args, None)[0]

    def instantiate(self, args: Sequence[Any], point: "Mapping[str, int] | None",
                    sizes: "Mapping[str, int] | None" = None) -> tuple[Any, Config]:
        """Run with the given knob choices; returns (the function's result, its config)."""
        cfg = self.config_type(point, sizes)
        with _using(cfg):
            out = self.func(*args)
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TuningError(f"template {self.name!r} must return (schedule, [tensors]), got "
                              f"{type(out).__name__}")
        return out, cfg

    def space(self, args: Sequence[Any], sizes: "Mapping[str, int] | None" = None) -> ConfigSpace:
        """The knob space (collected by one call with the default config)."""
        return self.instantiate(args, None, sizes)[1].space

    def __repr__(self) -> str:
        return f"Template({self.name!r})"


def template(name: str) -> Callable[[Callable[..., Any]], Template]:
    """Decorator: make ``func`` a tunable schedule template named ``name``."""
    if callable(name) and not isinstance(name, str):
        return Template(name.__name__, name)  # type: ignore[return-value]

    def wrap(func: Callable[..., Any]) -> Template:
        return Template(name, func)
    return wrap
