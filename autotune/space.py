"""The knob space of a tuning task: named knobs, each a finite list of choices.

A *config* picks one choice per knob; it is a tuple of indices (one per knob,
in definition order) and prints/serializes as ``{knob: value}``.  Three knob
kinds, as in AutoTVM:

* ``SplitSpace`` — ways to split a loop of extent ``E`` into ``num_outputs``
  nested loops (tuples of factors whose product is ``E``; the outermost may be
  ``-1``, meaning "whatever is left");
* ``OtherOptionSpace`` — any list of JSON-able values (``define_knob``);
* ``ReorderSpace`` — permutations of a list of loops (``define_reorder``).

A ``Constraint`` bounds choices of several knobs together (a knob's ``filter`` sees only
its own): the space's samplers (``random``, ``mutate``, ``crossover``, ``iter_points``)
return only points that obey every constraint.

Entities (``SplitEntity``, ``OtherOptionEntity``, ``ReorderEntity``) are what
``cfg["name"]`` returns inside a template: the chosen value, with ``apply``.
"""
from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

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


class Constraint:
    """A rule over several knobs' values together (subclasses implement ``holds``).

    ``knobs`` names the knobs it reads.  It must be monotone with each knob's first choice
    (index 0) the least demanding: a point obeys it when its knobs are at index 0, and a
    point that obeys it still does when one of its knobs goes to index 0.  The samplers
    rely on that to always find a point that obeys it.  A subclass is a module-level class
    (tasks travel to worker processes pickled)."""

    knobs: tuple[str, ...]

    def holds(self, values: Mapping[str, Any]) -> bool:
        """Whether the chosen ``values`` (``{knob: value}`` of ``knobs``) obey the rule."""
        raise NotImplementedError

    def describe(self) -> str:
        return type(self).__name__


#: Draws ``ConfigSpace.random`` makes before building a point knob by knob (``_fit``).
RANDOM_TRIES = 32
#: Tries of ``mutate``/``crossover`` at a child that obeys the constraints.
CHILD_TRIES = 8


@dataclass
class ConfigSpace:
    """Named knobs in definition order; a config is one index per knob; ``constraints``
    (``Constraint``) bound several knobs' choices together."""

    knobs: dict[str, KnobSpace] = field(default_factory=dict)
    constraints: list[Constraint] = field(default_factory=list)

    def add(self, name: str, knob: KnobSpace) -> None:
        old = self.knobs.get(name)
        if old is not None and [e.value for e in old.entities] != [e.value for e in knob.entities]:
            raise TuningError(f"knob {name!r} is defined twice with different choices")
        self.knobs[name] = knob

    def constrain(self, rule: Constraint) -> None:
        """Add ``rule``: the samplers return only points that obey it."""
        missing = [n for n in rule.knobs if n not in self.knobs]
        if missing:
            raise TuningError(f"constraint {rule.describe()} names unknown knob(s) {missing}")
        self.constraints.append(rule)

    def _holds(self, rule: Constraint, point: Sequence[int]) -> bool:
        names = self.names
        return rule.holds({n: self.knobs[n].entities[point[names.index(n)]].value
                           for n in rule.knobs})

    def violated(self, point: Sequence[int]) -> "Constraint | None":
        """The first constraint ``point`` breaks, or None."""
        return next((c for c in self.constraints if not self._holds(c, point)), None)

    def obeys(self, point: Sequence[int]) -> bool:
        return self.violated(point) is None

    def _fit(self, point: Sequence[int], rng: random.Random) -> tuple[int, ...]:
        """``point`` with the knobs of each broken constraint drawn again one at a time (in
        random order), each among the choices that obey it with the knobs not drawn yet at
        their least demanding choice (index 0): always a point that obeys it."""
        p = list(point)
        names = self.names
        for rule in self.constraints:
            if self._holds(rule, p):
                continue
            idx = [names.index(n) for n in rule.knobs]
            for i in idx:
                p[i] = 0
            rng.shuffle(idx)
            for i in idx:
                ok = []
                for j in range(len(self.knobs[names[i]])):
                    p[i] = j
                    if self._holds(rule, p):
                        ok.append(j)
                p[i] = rng.choice(ok) if ok else 0
        return tuple(p)

    @property
    def names(self) -> list[str]:
        return list(self.knobs)

    def __len__(self) -> int:
        """Points in the space (constraints not counted: an upper bound when there are some)."""
        return math.prod(len(k) for k in self.knobs.values()) if self.knobs else 1

    @property
    def dims(self) -> list[int]:
        return [len(k) for k in self.knobs.values()]

    def random(self, rng: random.Random) -> tuple[int, ...]:
        """A uniformly random point that obeys the constraints (rejection sampling; after
        ``RANDOM_TRIES`` misses the last draw is fitted to them, ``_fit``)."""
        point = tuple(rng.randrange(len(k)) for k in self.knobs.values())
        for _ in range(RANDOM_TRIES - 1):
            if not self.constraints or self.obeys(point):
                return point
            point = tuple(rng.randrange(len(k)) for k in self.knobs.values())
        return point if self.obeys(point) else self._fit(point, rng)

    def default(self) -> tuple[int, ...]:
        return tuple(0 for _ in self.knobs)

    def mutate(self, point: tuple[int, ...], rng: random.Random, n: int = 1) -> tuple[int, ...]:
        """``point`` with ``n`` knobs moved to other (mostly nearby) choices; a child that
        breaks a constraint is drawn again (``CHILD_TRIES``), else ``point`` comes back."""
        movable = [i for i, k in enumerate(self.knobs.values()) if len(k) > 1]
        if not movable:
            return point
        knobs = list(self.knobs.values())
        for _ in range(CHILD_TRIES):
            p = list(point)
            for i in rng.sample(movable, min(n, len(movable))):
                p[i] = knobs[i].neighbours(p[i], rng)
            if not self.constraints or self.obeys(p):
                return tuple(p)
        return point

    def crossover(self, a: tuple[int, ...], b: tuple[int, ...], rng: random.Random) -> tuple[int, ...]:
        """Each knob from ``a`` or ``b``; a child that breaks a constraint is drawn again
        (``CHILD_TRIES``), else ``a`` comes back."""
        for _ in range(CHILD_TRIES):
            child = tuple(x if rng.random() < 0.5 else y for x, y in zip(a, b))
            if not self.constraints or self.obeys(child):
                return child
        return a

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
        """Every point that obeys the constraints, in order."""
        points = itertools.product(*[range(d) for d in self.dims])
        return (p for p in points if self.obeys(p)) if self.constraints else points

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}: {k.kind}[{len(k)}]" for n, k in self.knobs.items())
        return f"ConfigSpace(len={len(self)}, {inner})"
