"""Per-kernel timing of a compiled graph (``CompiledGraph.profile``): which kernels and
PyTorch fallbacks a call spends its time in, as TVM's debug executor and
``torch.profiler`` tell their users.

Each step of the call is timed on its own, ``repeat`` calls after ``warmup`` untimed ones,
and the median per step is reported beside the median of whole, untimed-per-step calls (the
sum of the steps leaves out the per-call overhead: output arrays, pointer patches).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Optional


@dataclass(frozen=True)
class StepLabel:
    """What one step of a call is: a tdsl kernel or a PyTorch fallback."""

    name: str                 # the kernel's name (``k3_dense``) or ``torch.<op>``
    kind: str                 # "kernel" or "torch"
    ops: tuple                # the graph ops the kernel fused (a fallback: its op)
    shape: tuple              # the step's (first) output shape at this binding


@dataclass(frozen=True)
class StepTime:
    """One step's median and fastest seconds over the profiled calls."""

    label: StepLabel
    median_s: float
    min_s: float


@dataclass
class GraphProfile:
    """Steps in call order with their times; ``str()`` is a table, slowest first."""

    steps: list = field(default_factory=list)     # [StepTime], in call order
    call_s: float = 0.0                            # median of whole calls
    repeat: int = 0
    clock: str = "wall"

    @property
    def total_s(self) -> float:
        """The steps' medians summed."""
        return sum(s.median_s for s in self.steps)

    def by_kind(self) -> dict:
        """``{"kernel": seconds, "torch": seconds}``: medians summed per kind of step."""
        out: dict = {}
        for s in self.steps:
            out[s.label.kind] = out.get(s.label.kind, 0.0) + s.median_s
        return out

    def top(self, n: int = 10) -> list:
        """The ``n`` slowest steps (``StepTime``), slowest first."""
        return sorted(self.steps, key=lambda s: -s.median_s)[:n]

    def by_op(self) -> dict:
        """Seconds per anchor op, slowest first: kernels by the op their name ends in
        (``k3_dense``: ``dense``), fallbacks by their name (``torch.<op>``)."""
        out: dict = {}
        for s in self.steps:
            key = s.label.name.split("_", 1)[1] if s.label.kind == "kernel" and \
                "_" in s.label.name else s.label.name
            out[key] = out.get(key, 0.0) + s.median_s
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def table(self, n: Optional[int] = None) -> str:
        total = self.total_s or 1e-30
        rows = self.top(n if n is not None else len(self.steps))
        width = max([len(r.label.name) for r in rows] + [4])
        lines = [f"{'step':<{width}}  {'ms':>9}  {'share':>6}  {'output':<20}  fused ops",
                 "-" * (width + 60)]
        for r in rows:
            shape = "x".join(str(d) for d in r.label.shape) or "scalar"
            lines.append(f"{r.label.name:<{width}}  {r.median_s * 1e3:>9.3f}  "
                         f"{100 * r.median_s / total:>5.1f}%  {shape:<20}  "
                         f"{' + '.join(r.label.ops)}")
        if n is not None and n < len(self.steps):
            rest = self.total_s - sum(r.median_s for r in rows)
            lines.append(f"{'(' + str(len(self.steps) - n) + ' more)':<{width}}  "
                         f"{rest * 1e3:>9.3f}  {100 * rest / total:>5.1f}%")
        words = {"kernel": "kernels", "torch": "PyTorch fallbacks"}
        kinds = ", ".join(f"{words[k]} {v * 1e3:.3f} ms" for k, v in self.by_kind().items())
        lines.append(f"steps {self.total_s * 1e3:.3f} ms ({kinds}); whole call "
                     f"{self.call_s * 1e3:.3f} ms; medians of {self.repeat} calls, "
                     f"{self.clock} clock")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    __repr__ = __str__


def summarize(labels: list, samples: list, calls: list, clock: str) -> GraphProfile:
    """A ``GraphProfile`` from per-step samples (``samples[i]``: step i's seconds per call)
    and whole-call samples."""
    steps = [StepTime(lab, statistics.median(ts), min(ts)) for lab, ts in zip(labels, samples)]
    return GraphProfile(steps, statistics.median(calls) if calls else 0.0,
                        len(calls), clock)
