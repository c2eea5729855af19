"""Where a tuning run's time goes: seconds per phase, each counted once (exclusive).

A ``PhaseTimes`` belongs to one tuner (no global state).  ``with phases("lower"): ...``
adds the seconds spent inside to ``"lower"``; a phase entered inside another one is
taken out of the outer one's figure, so the figures add up to the time measured.
``TuneResult.phases`` carries them and ``TuneResult.breakdown()`` prints them::

    search      2.1 s   (evolutionary search itself: mutation, crossover, ranking)
    lower       9.8 s   (sketch rules applied, candidates lowered and hashed)
    features    3.4 s   ...

Phases the tuner records (``PHASES``): the main process's own work between batches
(``lower``, ``features``, ``predict``, ``search``, ``train``, ``db``) and the
batch's measurement, split into ``build`` (candidates compiled in the builder's
processes, wall time) and ``run`` (checked and timed one at a time, reference
included), ``remeasure`` (the final interleaved top-k) and ``retime`` (contended
timings timed again).
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable, Iterator

#: The phases, in the order ``breakdown`` prints them, with what each one covers.
PHASES = {
    "search": "evolutionary search itself: mutation, crossover, ranking",
    "lower": "sketch rules applied, candidates lowered and hashed",
    "features": "feature extraction from lowered candidates",
    "predict": "cost-model predictions",
    "train": "cost-model training",
    "build": "candidates compiled (builder processes, wall)",
    "run": "candidates checked and timed (runner process, wall)",
    "remeasure": "final interleaved re-measurement of the top programs",
    "retime": "contended timings timed again",
    "db": "database reads and writes, claims",
}
#: Phases that time or build candidates (the rest is the tuner's own work).
MEASURE_PHASES = ("build", "run", "remeasure", "retime")


class PhaseTimes:
    """Exclusive seconds per phase (see the module docstring).  ``clock`` (seconds, default
    ``time.perf_counter``) is a parameter so that tests can drive it by hand."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.seconds: dict[str, float] = {}
        self._clock = clock
        self._stack: list[list] = []      # [name, start of its current stretch]

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        now = self._clock()
        if self._stack:                   # pause the enclosing phase
            outer = self._stack[-1]
            self._add(outer[0], now - outer[1])
        self._stack.append([name, now])
        try:
            yield
        finally:
            end = self._clock()
            top = self._stack.pop()
            self._add(top[0], end - top[1])
            if self._stack:               # the enclosing phase resumes
                self._stack[-1][1] = end

    def _add(self, name: str, s: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + s

    def add(self, name: str, s: float) -> None:
        """Count ``s`` seconds measured elsewhere to ``name``."""
        self._add(name, s)


def format_breakdown(phases: "dict[str, float]", total: float) -> str:
    """A table of ``phases`` (seconds) with their share of ``total``, and the rest as
    ``other``; the tuner's own work and the measurement are summed separately."""
    names = [p for p in PHASES if p in phases] + sorted(p for p in phases if p not in PHASES)
    lines = []
    for p in names:
        s = phases[p]
        share = 100 * s / total if total > 0 else 0.0
        lines.append(f"{p:<10}{s:>8.2f} s {share:>5.1f}%  {PHASES.get(p, '')}")
    other = total - sum(phases.values())
    lines.append(f"{'other':<10}{other:>8.2f} s {100 * other / total if total > 0 else 0:>5.1f}%"
                 f"  callbacks, bookkeeping")
    measure = sum(phases.get(p, 0.0) for p in MEASURE_PHASES)
    lines.append(f"total {total:.2f} s: measuring {measure:.2f} s, the tuner's own work "
                 f"{total - measure:.2f} s")
    return "\n".join(lines)
