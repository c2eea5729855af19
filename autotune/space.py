"""The knob space of a tuning task: named knobs, each a finite list of choices.

A *config* picks one choice per knob; it is a tuple of indices (one per knob,
in definition order) and prints/serializes as ``{knob: value}``.  Three knob
kinds, as in AutoTVM:

* ``SplitSpace`` — ways to split a loop of extent ``E`` into ``num_outputs``
  nested loops (tuples of factors whose product is ``E``; the outermost may be
  ``-1``, meaning "whatever is left");
* ``OtherOptionSpace`` — any list of JSON-able values (``define_knob``);
* ``ReorderSpace`` — permutations of a list of loops (``define_reorder``).

Entities (``SplitEntity``, ``OtherOptionEntity``, ``ReorderEntity``) are what
``cfg["name"]`` returns inside a template: the chosen value, with ``apply``.
"""
from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

from tdsl.errors import TuningError


def divisors(n: int) -> list[int]:
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return small + large[::-1]


@dataclass(frozen=True)
class SplitEntity:
    """A chosen split: ``size`` lists the loop extents from outermost to innermost."""

    size: tuple[int, ...]

    def apply(self, sch: Any, op: Any, axis: Any) -> list:
        """Split ``axis`` of ``s[op]`` into ``len(size)`` loops (outermost first)."""
        stage = sch[op]
        loops = []
        for i in range(1, len(self.size)):
            outer, axis = stage.split(axis, factor=int(math.prod(self.size[i:])))
            loops.append(outer)
        return loops + [axis]

    @property
    def value(self) -> list[int]:
        return list(self.size)


@dataclass(frozen=True)
class OtherOptionEntity:
    val: Any

    @property
    def value(self) -> Any:
        return self.val


@dataclass(frozen=True)
class ReorderEntity:
    perm: tuple[int, ...]

    def apply(self, sch: Any, op: Any, axes: Sequence[Any]) -> list:
        ordered = [axes[i] for i in self.perm]
        sch[op].reorder(*ordered)
        return ordered

    @property
    def value(self) -> list[int]:
        return list(self.perm)


class KnobSpace:
    """Base class: a finite list of choices, each turned into an entity."""

    kind = "knob"

    def __len__(self) -> int:
        return len(self.entities)

    entities: list

    def index_of(self, value: Any) -> int:
        for i, e in enumerate(self.entities):
            if e.value == value or (isinstance(value, (list, tuple)) and e.value == list(value)):
                return i
        raise TuningError(f"{self.kind} knob: value {value!r} is not one of its choices")

    def neighbours(self, index: int, rng: random.Random) -> int:
        """A random other choice, preferring nearby ones (for local search)."""
        n = len(self.entities)
        if n <= 1:
            return index
        if rng.random() < 0.5:
            step = rng.choice([-2, -1, 1, 2])
            j = min(max(index + step, 0), n - 1)
            if j != index:
                return j
        j = rng.randrange(n - 1)
        return j if j < index else j + 1


class SplitSpace(KnobSpace):
    """Splits of a loop of extent ``extent`` into ``num_outputs`` parts.

    ``policy="factors"`` uses divisors (no tails); ``"power2"`` also allows powers
    of two that do not divide (tails are guarded).  ``max_factor`` bounds the
    innermost part; ``filter`` drops tuples (``size -> bool``).
    """

    kind = "split"

    def __init__(self, extent: int, num_outputs: int, policy: str = "factors",
                 max_factor: int | None = None, filter: Any = None):
        if not isinstance(extent, int) or extent < 1:
            raise TuningError(f"define_split needs a positive constant extent, got {extent!r}")
        if num_outputs < 1:
            raise TuningError(f"define_split: num_outputs must be >= 1, got {num_outputs}")
        if policy not in ("factors", "power2"):
            raise TuningError(f"define_split: policy must be 'factors' or 'power2', got {policy!r}")
        self.extent = extent
        self.num_outputs = num_outputs
        cands = divisors(extent)
        tails = policy == "power2" or len(cands) <= 2 < extent
        if tails:
            p2 = [1 << k for k in range(extent.bit_length()) if (1 << k) <= extent]
            cands = sorted(set(cands) | set(p2))
        sizes = self._enumerate(extent, num_outputs, cands, max_factor, tails)
        if filter is not None:
            sizes = [s for s in sizes if filter(s)] or sizes[:1]
        self.entities = [SplitEntity(s) for s in sizes]

    @staticmethod
    def _enumerate(extent: int, parts: int, cands: list[int], max_factor: int | None,
                   tails: bool) -> list[tuple[int, ...]]:
        out: list[tuple[int, ...]] = []

        def rec(rest: int, inner: tuple[int, ...]) -> None:
            if len(inner) == parts - 1:
                out.append((-(-rest // 1),) + inner)
                return
            innermost = not inner
            for f in cands:
                if f > rest:
                    break
                if innermost and max_factor is not None and f > max_factor:
                    break
                if rest % f and not tails:
                    continue
                rec(-(-rest // f), (f,) + inner)
        rec(extent, ())
        return sorted(set(out), key=lambda s: s[::-1])


class OtherOptionSpace(KnobSpace):
    kind = "knob"

    def __init__(self, candidates: Sequence[Any]):
        if not candidates:
            raise TuningError("define_knob needs at least one candidate")
        self.entities = [OtherOptionEntity(c) for c in candidates]


class ReorderSpace(KnobSpace):
    kind = "reorder"

    def __init__(self, num_axes: int, policy: str = "all", candidates: Sequence[Sequence[int]] = ()):
        if policy == "all":
            perms = list(itertools.permutations(range(num_axes)))
        elif policy == "identity":
            perms = [tuple(range(num_axes))]
        elif policy == "candidate":
            perms = [tuple(c) for c in candidates]
            for p in perms:
                if sorted(p) != list(range(num_axes)):
                    raise TuningError(f"define_reorder: candidate {list(p)} is not a permutation of "
                                      f"0..{num_axes - 1}")
        else:
            raise TuningError(f"define_reorder: policy must be 'all', 'identity' or 'candidate', "
                              f"got {policy!r}")
        if not perms:
            raise TuningError("define_reorder: no candidate orders")
        self.entities = [ReorderEntity(p) for p in perms]


@dataclass
class ConfigSpace:
    """Named knobs in definition order; a config is one index per knob."""

    knobs: dict[str, KnobSpace] = field(default_factory=dict)

    def add(self, name: str, knob: KnobSpace) -> None:
        old = self.knobs.get(name)
        if old is not None and [e.value for e in old.entities] != [e.value for e in knob.entities]:
            raise TuningError(f"knob {name!r} is defined twice with different choices")
        self.knobs[name] = knob

    @property
    def names(self) -> list[str]:
        return list(self.knobs)

    def __len__(self) -> int:
        return math.prod(len(k) for k in self.knobs.values()) if self.knobs else 1

    @property
    def dims(self) -> list[int]:
        return [len(k) for k in self.knobs.values()]

    def random(self, rng: random.Random) -> tuple[int, ...]:
        return tuple(rng.randrange(len(k)) for k in self.knobs.values())

    def default(self) -> tuple[int, ...]:
        return tuple(0 for _ in self.knobs)

    def mutate(self, point: tuple[int, ...], rng: random.Random, n: int = 1) -> tuple[int, ...]:
        p = list(point)
        movable = [i for i, k in enumerate(self.knobs.values()) if len(k) > 1]
        if not movable:
            return point
        for i in rng.sample(movable, min(n, len(movable))):
            p[i] = list(self.knobs.values())[i].neighbours(p[i], rng)
        return tuple(p)

    def crossover(self, a: tuple[int, ...], b: tuple[int, ...], rng: random.Random) -> tuple[int, ...]:
        return tuple(x if rng.random() < 0.5 else y for x, y in zip(a, b))

    def values(self, point: Sequence[int]) -> dict[str, Any]:
        """The config as ``{knob: value}`` (JSON-able)."""
        return {name: k.entities[i].value for (name, k), i in zip(self.knobs.items(), point)}

    def point_of(self, values: dict[str, Any]) -> tuple[int, ...]:
        """The indices of a ``{knob: value}`` config (from a record)."""
        missing = [n for n in self.knobs if n not in values]
        if missing:
            raise TuningError(f"config {values!r} lacks knob(s) {missing}")
        return tuple(k.index_of(values[n]) for n, k in self.knobs.items())

    def entity(self, point: Sequence[int], name: str) -> Any:
        names = self.names
        return self.knobs[name].entities[point[names.index(name)]]

    def iter_points(self) -> Iterator[tuple[int, ...]]:
        return itertools.product(*[range(d) for d in self.dims])

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}: {k.kind}[{len(k)}]" for n, k in self.knobs.items())
        return f"ConfigSpace(len={len(self)}, {inner})"
