"""AutoTVM's config space surface over ``tdsl.autotune``: ``define_annotate``, ``cfg.axis``,
TVM's split policies, flat config indices, and the ``ConfigSpace (len=...)`` printout."""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Sequence

from tdsl.autotune.space import (ConfigSpace, KnobSpace, OtherOptionSpace, ReorderSpace,
                                 SplitSpace)
from tdsl.autotune.template import Config as _Config
from tdsl.errors import TuningError

#: TVM's short entity tags in log files
TAGS = {SplitSpace: "sp", OtherOptionSpace: "ot", ReorderSpace: "re"}


@dataclass(frozen=True)
class AnnotateEntity:
    """One annotation per axis: ``"none"``, ``"unroll"`` or ``"vec"``."""

    anns: tuple[str, ...]

    def apply(self, sch: Any, op: Any, axes: Sequence[Any], axis_lens: Any = None,
              max_unroll: "int | None" = None, vec_size: Any = None, cfg: Any = None,
              source: Any = None) -> list:
        stage = sch[op]
        for i, (ax, ann) in enumerate(zip(axes, self.anns)):
            length = axis_lens[i] if axis_lens is not None else None
            if ann == "unroll" and (max_unroll is None or length is None or length <= max_unroll):
                stage.unroll(ax)
            elif ann == "vec":
                stage.vectorize(ax)
        return list(axes)

    @property
    def value(self) -> list[str]:
        return list(self.anns)


class AnnotateSpace(KnobSpace):
    """``define_annotate``: ``try_unroll`` (none/unroll per axis), ``try_vec`` (the last axis
    none/vec), ``try_unroll_vec`` (both)."""

    kind = "annotate"

    def __init__(self, num_axes: int, policy: str):
        if policy == "try_unroll":
            choices = [("none", "unroll")] * num_axes
        elif policy == "try_vec":
            choices = [("none",)] * (num_axes - 1) + [("none", "vec")]
        elif policy == "try_unroll_vec":
            choices = [("none", "unroll")] * (num_axes - 1) + [("none", "unroll", "vec")]
        else:
            raise TuningError(f"define_annotate: policy {policy!r} is not supported (tdsl.compat "
                              f"has try_unroll, try_vec and try_unroll_vec)")
        self.policy = policy
        self.entities = [AnnotateEntity(t) for t in itertools.product(*choices)] if num_axes \
            else [AnnotateEntity(())]


class Config(_Config):
    """tdsl's template config plus AutoTVM's extra definitions."""

    def axis(self, var: Any) -> Any:
        """``cfg.axis(loop)``: the loop itself (tdsl splits take loops or extents)."""
        return var

    reduce_axis = axis

    def define_split(self, name: str, axis: Any, num_outputs: int = 2, policy: str = "factors",
                     max_factor: "int | None" = None, filter: Any = None, **kwargs: Any) -> None:
        """TVM's policies: ``factors``, ``power2``; ``verbose`` (factors and powers of two) is
        tdsl's ``power2``, which also keeps divisors."""
        if policy == "verbose":
            policy = "power2"
        if "max_factor" in kwargs:
            max_factor = kwargs.pop("max_factor")
        super().define_split(name, axis, num_outputs, policy, max_factor, filter)

    def define_annotate(self, name: str, axes: Sequence[Any], policy: str, **kwargs: Any) -> None:
        self._define(name, AnnotateSpace(len(axes), policy))

    def valid(self) -> bool:
        return True

    def fallback_split(self, name: str, constraints: Sequence[int]) -> None:
        """Pick the split of ``name`` closest to ``constraints`` (-1: anything) for an untuned
        config."""
        knob = self.space.knobs[name]
        for i, e in enumerate(knob.entities):
            if all(c == -1 or c == s for c, s in zip(constraints, e.size)):
                self.point[name] = i
                return
        raise TuningError(f"fallback_split: no split of {name!r} matches {list(constraints)}")

    def fallback_with_reference_log(self, ref_log: Any) -> None:
        """Accepted; tdsl keeps the default config."""


def flat_index(space: ConfigSpace, point: Sequence[int]) -> int:
    """TVM's config index: mixed radix with the first knob varying fastest."""
    index, stride = 0, 1
    for p, d in zip(point, space.dims):
        index += p * stride
        stride *= d
    return index


def point_at(space: ConfigSpace, index: int) -> tuple[int, ...]:
    if not 0 <= index < len(space):
        raise TuningError(f"config index {index} is out of range (the space has {len(space)})")
    out = []
    for d in space.dims:
        out.append(index % d)
        index //= d
    return tuple(out)


def _describe(knob: KnobSpace) -> str:
    if isinstance(knob, SplitSpace):
        return (f"Split(policy={getattr(knob, 'policy', 'factors')}, product={knob.extent}, "
                f"num_outputs={knob.num_outputs})")
    if isinstance(knob, OtherOptionSpace):
        return f"OtherOption({[e.val for e in knob.entities]})"
    if isinstance(knob, AnnotateSpace):
        return f"Annotate(policy={knob.policy})"
    if isinstance(knob, ReorderSpace):
        return "Reorder"
    return type(knob).__name__


class ConfigEntity:
    """One config of a space (TVM's ``ConfigEntity``): ``index``, ``cfg[name]``, ``to_json_dict``."""

    def __init__(self, space: ConfigSpace, point: Sequence[int], is_fallback: bool = False):
        self.space = space
        self.point = tuple(point)
        #: True for a template's default config given where no record matched (TVM's
        #: ``FallbackConfigEntity``)
        self.is_fallback = is_fallback
        self.index = flat_index(space, self.point)

    def __getitem__(self, name: str) -> Any:
        return self.space.entity(self.point, name)

    def get_other_option(self) -> dict:
        return {n: self[n].val for n, k in self.space.knobs.items() if isinstance(k, OtherOptionSpace)}

    def to_json_dict(self) -> dict:
        entity = []
        for name, knob in self.space.knobs.items():
            e = self[name]
            tag = "an" if isinstance(knob, AnnotateSpace) else TAGS.get(type(knob), "ot")
            if tag == "sp":
                val: Any = [-1] + list(e.size[1:])
            else:
                val = e.value
            entity.append([name, tag, val])
        return {"index": self.index, "code_hash": None, "entity": entity}

    def __repr__(self) -> str:
        return ",".join(f"{n}={self[n].value}" for n in self.space.names) + f",{self.index}"


def point_from_entity(space: ConfigSpace, entity: Sequence[Sequence[Any]]) -> tuple[int, ...]:
    """The point of a TVM log's ``entity`` list in ``space`` (splits matched by their inner
    factors, since TVM writes the outermost as -1)."""
    given = {str(n): v for n, _tag, v in entity}
    point = []
    for name, knob in space.knobs.items():
        if name not in given:
            raise TuningError(f"record lacks knob {name!r}")
        v = given[name]
        if isinstance(knob, SplitSpace):
            inner = list(v[1:])
            idx = next((i for i, e in enumerate(knob.entities) if list(e.size[1:]) == inner), None)
            if idx is None:
                raise TuningError(f"record's split {name}={v} is not in this space")
            point.append(idx)
        else:
            point.append(knob.index_of(v))
    return tuple(point)


class ConfigSpaceView:
    """``task.config_space``: ``len()``, ``get(index)``, ``space_map`` and TVM's printout."""

    def __init__(self, space: ConfigSpace):
        self.space = space

    def __len__(self) -> int:
        return len(self.space)

    @property
    def range_length(self) -> int:
        return len(self.space)

    @property
    def space_map(self) -> dict:
        return dict(self.space.knobs)

    def get(self, index: int) -> ConfigEntity:
        return ConfigEntity(self.space, point_at(self.space, index))

    def __getitem__(self, name: str) -> Any:
        return self.space.knobs[name]

    def __str__(self) -> str:
        lines = [f"ConfigSpace (len={len(self)}, range_length={len(self)}, space_map="]
        for i, (name, knob) in enumerate(self.space.knobs.items()):
            lines.append(f"  {i:2d} {name}: {_describe(knob)} len={len(knob)}")
        lines.append(")")
        return "\n".join(lines)

    __repr__ = __str__
