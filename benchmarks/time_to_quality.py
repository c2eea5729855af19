"""Time to quality: a tuning job's weighted latency against its tuning time and trials.

A job (``autotune.tune_tasks``) lists after each round the task it tuned and that task's
best record then (``JobResult.best_at``).  The figures those records carry were timed at
different moments of a noisy machine, so ``bench_jobs.py`` re-times every record that was
ever a task's best, all runs' interleaved, and ``curve`` redraws each job with those
figures: ``(seconds, trials, weighted latency)`` after each round, ``inf`` until every task
has a program.  ``reach`` says when a curve first gets to a level; ``plot`` draws them.
"""
from __future__ import annotations

import math
from typing import Mapping, Optional, Sequence

Point = tuple[float, int, float]          # (seconds, trials, weighted latency)


def curve(best_at: Sequence[tuple], weights: Sequence[float],
          seconds_of: Sequence[Mapping[str, float]],
          final: Optional[tuple[float, int, Sequence]] = None) -> list[Point]:
    """The job's weighted latency after each round, with re-timed seconds.

    ``best_at``: ``(seconds, trials, task, record)`` per round; ``seconds_of[task]``:
    program hash -> re-timed seconds; ``final``: ``(seconds, trials, best records)`` once the
    job ended (after its own re-measurement, which may pick another best)."""
    cur: list = [None] * len(weights)
    out: list[Point] = []

    def total() -> float:
        if any(r is None for r in cur):
            return math.inf
        return sum(w * seconds_of[i].get(r.prog_hash, math.inf)
                   for i, (w, r) in enumerate(zip(weights, cur)))
    for secs, trials, i, rec in best_at:
        if rec is not None:
            cur[i] = rec
        out.append((float(secs), int(trials), total()))
    if final is not None:
        secs, trials, recs = final
        for i, r in enumerate(recs):
            if r is not None:
                cur[i] = r
        out.append((float(secs), int(trials), total()))
    return out


def reach(points: Sequence[Point], level: float) -> Optional[tuple[float, int]]:
    """``(seconds, trials)`` of the first point at or below ``level``; None if never."""
    for secs, trials, wl in points:
        if wl <= level * (1 + 1e-12):
            return secs, trials
    return None


def final(points: Sequence[Point]) -> float:
    return points[-1][2] if points else math.inf


def best(curves: Mapping[str, Sequence[Point]]) -> float:
    """The lowest weighted latency any run reached."""
    return min((wl for pts in curves.values() for _, _, wl in pts), default=math.inf)


def report(curves: Mapping[str, Sequence[Point]], reference: str = "sequential",
           within: float = 0.05) -> list[str]:
    """Lines: per run, its final weighted latency and the trials and seconds it needed to
    reach ``reference``'s final one and to get within ``within`` of the best of any run."""
    ref = final(curves[reference]) if reference in curves else math.inf
    top = best(curves)
    lines = [f"{'run':<14} {'final ms':>10} {'to ' + reference + ' final':>24} "
             f"{'to best+' + format(within, '.0%'):>24}"]

    def fmt(r: Optional[tuple[float, int]]) -> str:
        return "not reached" if r is None else f"{r[1]} trials, {r[0]:.0f} s"
    for name, pts in curves.items():
        lines.append(f"{name:<14} {final(pts) * 1e3:>10.4f} {fmt(reach(pts, ref)):>24} "
                     f"{fmt(reach(pts, top * (1 + within))):>24}")
    lines.append(f"{reference} final: {ref * 1e3:.4f} ms; best of any run: {top * 1e3:.4f} ms")
    return lines


def plot(curves: Mapping[str, Sequence[Point]], path: str, title: str,
         reference: str = "sequential", within: float = 0.05) -> None:
    """Weighted latency against seconds and against trials, one line per run, with the
    reference run's final level and the best-plus-``within`` level; saved as ``path``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    top = best(curves)
    for ax, col, label in ((axes[0], 0, "tuning time (s)"), (axes[1], 1, "trials")):
        for name, pts in curves.items():
            xs = [p[col] for p in pts if math.isfinite(p[2])]
            ys = [p[2] * 1e3 for p in pts if math.isfinite(p[2])]
            ax.step(xs, ys, where="post", label=name)
        if reference in curves and math.isfinite(final(curves[reference])):
            ax.axhline(final(curves[reference]) * 1e3, ls="--", lw=0.8, color="gray",
                       label=f"{reference} final")
        if math.isfinite(top):
            ax.axhline(top * (1 + within) * 1e3, ls=":", lw=0.8, color="black",
                       label=f"best + {within:.0%}")
        ax.set_xlabel(label)
        ax.set_ylabel("weighted latency (ms)")
        ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
