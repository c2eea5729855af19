"""Tuning curves from a database: best throughput so far against trials (matplotlib)."""
from __future__ import annotations

from typing import Any

from tdsl.errors import TuningError

from .database import Database, open_database


def tuning_curve(db: "Database | str", task_key: "str | None" = None) -> dict[str, list]:
    """``{task description: [(trial, best GFLOP/s so far), ...]}`` in measurement order."""
    database = open_database(db, create=False)
    curves: dict[str, list] = {}
    for key, desc, target, _ in database.tasks():
        if task_key is not None and key != task_key:
            continue
        best = 0.0
        pts = []
        for i, r in enumerate(database.records(key), 1):
            best = max(best, r.gflops)
            pts.append((i, best))
        curves[f"{desc} [{target}]"] = pts
    return curves


def plot_tuning_curve(db: "Database | str", task_key: "str | None" = None, ax: Any = None,
                      baseline: "float | None" = None, baseline_label: str = "baseline") -> Any:
    """Plot best GFLOP/s vs trials for each task of ``db``; returns the matplotlib Axes.

    Works in notebooks (the figure displays itself); ``baseline`` draws a
    horizontal reference line (e.g. NumPy's GFLOP/s).
    """
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise TuningError("plot_tuning_curve needs matplotlib (pip install matplotlib)") from None
    curves = tuning_curve(db, task_key)
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    for label, pts in curves.items():
        if pts:
            xs, ys = zip(*pts)
            ax.step(xs, ys, where="post", label=label[:60])
    if baseline is not None:
        ax.axhline(baseline, linestyle="--", color="gray", label=baseline_label)
    ax.set_xlabel("trials")
    ax.set_ylabel("best GFLOP/s")
    ax.set_title("tuning curve")
    ax.grid(True, alpha=0.3)
    if curves:
        ax.legend(fontsize="small")
    return ax
