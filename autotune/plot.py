"""Tuning curves from a database: best throughput so far against trials (matplotlib)."""
from __future__ import annotations

import textwrap
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
            ax.step(xs, ys, where="post", label=legend_label(label))
    if baseline is not None:
        ax.axhline(baseline, linestyle="--", color="gray", label=baseline_label)
    ax.set_xlabel("trials")
    ax.set_ylabel("best GFLOP/s")
    ax.set_title("tuning curve")
    ax.grid(True, alpha=0.3)
    if curves:   # below the axes: long task descriptions never cover the curves
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(0.0, -0.15),
                  frameon=False)
        ax.figure.tight_layout()
    return ax


def legend_label(text: str, width: int = 60) -> str:
    """``text`` wrapped at spaces and punctuation into lines of about ``width`` characters
    (never cut mid-word, never shortened)."""
    return "\n".join(textwrap.wrap(text, width, break_long_words=False,
                                    break_on_hyphens=False)) or text
