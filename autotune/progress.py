"""A progress bar for tuning: trials done, best GFLOP/s, elapsed time and ETA.

``progress_bar(total)`` returns a tuner callback.  It draws with ``tqdm`` when it
is installed (``pip install tdsl[tune]``) and prints one plain line per batch
otherwise; ``summary(result, task)`` is the final report.
"""
from __future__ import annotations

import sys
import time
from typing import Any, Sequence, TextIO


class _Progress:
    def __init__(self, total: int, desc: str, stream: "TextIO | None", use_tqdm: bool):
        self.total = total
        self.desc = desc
        self.stream = stream or sys.stderr
        self.t0 = time.perf_counter()
        self.done = 0
        self.bar: Any = None
        if use_tqdm:
            try:
                from tqdm import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                self.bar = tqdm(total=total, desc=desc, unit="trial", file=self.stream,
                                dynamic_ncols=True)

    def __call__(self, tuner: Any, inputs: Sequence[Any], results: Sequence[Any]) -> None:
        if self.done == 0 and getattr(tuner, "resumed", 0):
            # resumed: count what the database already had
            self.done = tuner.resumed
            if self.bar is not None:
                self.bar.update(self.done)
        self.done += len(results)
        flop = tuner.task.flop
        best = flop / tuner.best_cost / 1e9 if tuner.best_cost < float("inf") and flop else 0.0
        if self.bar is not None:
            self.bar.set_postfix_str(f"best {best:.1f} GFLOP/s")
            self.bar.update(len(results))
        else:
            el = time.perf_counter() - self.t0
            rate = self.done / el if el > 0 else 0.0
            eta = (self.total - self.done) / rate if rate > 0 else float("nan")
            print(f"[{self.desc}] {self.done}/{self.total} trials  best {best:.1f} GFLOP/s  "
                  f"elapsed {el:.0f}s  ETA {eta:.0f}s", file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def progress_bar(total: int, desc: str = "tuning", stream: "TextIO | None" = None,
                 use_tqdm: bool = True) -> _Progress:
    """A tuner callback showing trials done, best GFLOP/s, elapsed time and ETA."""
    return _Progress(total, desc, stream, use_tqdm)


def summary(result: Any, task: Any) -> str:
    """A few lines describing a finished ``tune`` call."""
    lines = [f"task      {task.description}  [{task.target}]",
             f"trials    {result.trials} measured now, {result.resumed} from the database",
             f"time      {result.seconds:.1f} s"
             + (f"  ({60 * result.trials / result.seconds:.0f} trials/min)" if result.seconds else "")]
    if result.best is not None:
        lines.append(f"best      {result.best.cost * 1e3:.4f} ms  {result.best.gflops:.1f} GFLOP/s  "
                     f"(record id {result.best.id})")
        lines.append(f"config    {result.best.config}")
    else:
        lines.append("best      no valid candidate")
    errs = {k: v for k, v in result.errors.items() if k != "NO_ERROR"}
    if errs:
        lines.append(f"errors    {errs}")
    return "\n".join(lines)
