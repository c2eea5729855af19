"""Search over a task's space for the candidates the cost model likes best.

``CandidatePool`` turns points into candidates once (trace, lowered function,
program hash, features) and remembers illegal points.  ``EvolutionarySearch``
starts from the best measured points plus random ones, and for a few
generations mutates (one knob to a nearby choice) and crosses over the
population, keeping the highest predicted scores; it returns the best candidates
whose program was not measured yet (dedup by the hash of the lowered program),
and the tuner mixes in a share of random ones (exploration).
"""
from __future__ import annotations

import random
from typing import Any, Iterable, Optional, Sequence

import numpy as np

from .features import extract_features
from .phases import PhaseTimes
from .task import Candidate, Task


class CandidatePool:
    """Candidates of one task by point, with their features (computed once).

    ``phases`` (the tuner's ``PhaseTimes``) gets the seconds of ``lower`` and
    ``features``."""

    def __init__(self, task: Task, phases: "PhaseTimes | None" = None):
        self.task = task
        self.phases = phases or PhaseTimes()
        self.by_point: dict[tuple, Candidate] = {}
        self.features: dict[tuple, np.ndarray] = {}
        self.by_hash: dict[str, tuple] = {}

    def get(self, point: Sequence[int]) -> Candidate:
        point = tuple(point)
        c = self.by_point.get(point)
        if c is None:
            with self.phases("lower"):
                c = self.by_point[point] = self.task.candidate(point)
            if c.valid:
                self.by_hash.setdefault(c.prog_hash, point)
        return c

    def feature(self, point: Sequence[int]) -> Optional[np.ndarray]:
        point = tuple(point)
        f = self.features.get(point)
        if f is None:
            c = self.get(point)
            if not c.valid:
                return None
            with self.phases("features"):
                f = self.features[point] = extract_features(c.func, self.task.sizes)
        return f

    def random_valid(self, n: int, rng: random.Random, exclude: "set[str]",
                     max_tries: int = 0) -> list[Candidate]:
        """Up to ``n`` random legal candidates whose programs are not in ``exclude``."""
        out: list[Candidate] = []
        seen = set(exclude)
        tries = 0
        limit = max_tries or max(50, 20 * n)
        space = self.task.space
        total = len(space)
        while len(out) < n and tries < limit and len(seen) < total:
            tries += 1
            c = self.get(space.random(rng))
            if c.valid and c.prog_hash not in seen:
                seen.add(c.prog_hash)
                out.append(c)
        return out


class EvolutionarySearch:
    """Evolutionary search guided by a cost model.

    ``population``: points kept per generation; ``generations``: rounds of
    mutation/crossover; ``mutation_prob``: chance a child is a mutation (else a
    crossover).
    """

    def __init__(self, population: int = 64, generations: int = 2, mutation_prob: float = 0.85):
        self.population = population
        self.generations = generations
        self.mutation_prob = mutation_prob

    def propose(self, pool: CandidatePool, model: Any, n: int, measured: "set[str]",
                seeds: Iterable[tuple], rng: random.Random) -> list[Candidate]:
        space = pool.task.space
        scores: dict[tuple, float] = {}

        def score(points: list[tuple]) -> None:
            new = [p for p in points if p not in scores]
            feats, keep = [], []
            for p in new:
                f = pool.feature(p)
                if f is None:
                    scores[p] = -np.inf
                else:
                    feats.append(f)
                    keep.append(p)
            if keep:
                with pool.phases("predict"):
                    pred = model.predict(np.stack(feats))
                for p, s in zip(keep, pred):
                    scores[p] = float(s)

        popl = list(dict.fromkeys(tuple(s) for s in seeds))[: self.population // 2]
        popl += [c.point for c in pool.random_valid(self.population - len(popl), rng, set())]
        score(popl)
        for _ in range(self.generations):
            ranked = sorted(popl, key=lambda p: -scores[p])
            parents = [p for p in ranked if scores[p] > -np.inf] or ranked
            children = []
            for _ in range(self.population):
                a = parents[min(int(rng.expovariate(3.0 / max(1, len(parents)))), len(parents) - 1)]
                if rng.random() < self.mutation_prob or len(parents) < 2:
                    children.append(space.mutate(a, rng, n=rng.choice([1, 1, 2])))
                else:
                    b = rng.choice(parents)
                    children.append(space.crossover(a, b, rng))
            score(children)
            # dict.fromkeys: unique in first-seen order, so equal scores rank alike in every run
            popl = sorted(dict.fromkeys(popl + children),
                          key=lambda p: -scores[p])[: self.population]
        ranked = sorted(scores, key=lambda p: -scores[p])
        out: list[Candidate] = []
        seen = set(measured)
        for p in ranked:
            if scores[p] == -np.inf:
                break
            c = pool.get(p)
            if c.prog_hash in seen:
                continue
            seen.add(c.prog_hash)
            out.append(c)
            if len(out) >= n:
                break
        return out
