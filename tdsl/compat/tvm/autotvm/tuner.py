"""AutoTVM's tuners (``XGBTuner``, ``GATuner``, ``RandomTuner``, ``GridSearchTuner``) over
tdsl's tuning loop: they take a ``tvm.autotvm.task.create`` task, and ``tune(n_trial,
measure_option, early_stopping, callbacks)`` calls each callback as
``callback(tuner, inputs, results)`` after every batch, as TVM does."""
from __future__ import annotations

import warnings
from typing import Any, Sequence

from tdsl import autotune
from tdsl.autotune.task import Candidate
from tdsl.errors import TuningError

from .task import Task


class _CompatTuner:
    """Mixin: remembers the compat task (for ``log_to_file``) and takes TVM's ``tune`` keywords."""

    compat_task: Task

    def tune(self, n_trial: int, measure_option: Any = None, early_stopping: "int | None" = None,
             callbacks: Sequence[Any] = (), si_prefix: str = "G") -> Any:
        n_trial = min(int(n_trial), len(self.compat_task.config_space))
        if _skip_without_gpu(self.compat_task, n_trial, callbacks):
            return None
        return super().tune(n_trial, measure_option=measure_option,  # type: ignore[misc]
                            callbacks=list(callbacks), early_stopping=early_stopping,
                            remeasure_top=0)

    def has_next(self) -> bool:
        return True


def _skip_without_gpu(task: Task, n_trial: int, callbacks: Sequence[Any]) -> bool:
    """A CUDA task where ``tvm.cuda(0).exist`` is False cannot be timed: warn once per call
    (``NoGPUTuningWarning``), create the callbacks' log files empty (so
    ``apply_history_best(log)`` reads them and templates use their default configs) and
    tell ``tune`` to return."""
    from ..runtime import cuda
    if task.target.kind.name != "cuda" or cuda(0).exist:
        return False
    warnings.warn(f"autotvm: no CUDA device, so task {task.name!r} was not tuned ({n_trial} "
                  f"trials skipped; emulated timings would say nothing about a GPU); "
                  f"apply_history_best falls back to the template's default config",
                  NoGPUTuningWarning, stacklevel=3)
    for cb in callbacks:
        path = getattr(cb, "file_out", None)
        if isinstance(path, str):
            open(path, "a").close()
    return True


class NoGPUTuningWarning(UserWarning):
    """A CUDA tuning task was skipped because no GPU is present."""


def _task(task: Any) -> Any:
    if not isinstance(task, Task):
        raise TuningError(f"expected a task from autotvm.task.create, got {type(task).__name__}")
    return task.tdsl


class RandomTuner(_CompatTuner, autotune.RandomTuner):
    def __init__(self, task: Task, range_idx: Any = None):
        self.compat_task = task
        autotune.RandomTuner.__init__(self, _task(task))


class GridSearchTuner(_CompatTuner, autotune.GridSearchTuner):
    def __init__(self, task: Task, range_idx: Any = None):
        self.compat_task = task
        autotune.GridSearchTuner.__init__(self, _task(task))


class XGBTuner(_CompatTuner, autotune.XGBTuner):
    """``loss_type`` ``"reg"``/``"rank"`` picks the model's objective; ``feature_type``,
    ``optimizer`` and ``plan_size`` are TVM knobs tdsl's search does not have."""

    def __init__(self, task: Task, plan_size: int = 64, feature_type: str = "itervar",
                 loss_type: str = "reg", num_threads: "int | None" = None,
                 optimizer: str = "sa", diversity_filter_ratio: Any = None,
                 log_interval: int = 50):
        self.compat_task = task
        objective = "rank" if "rank" in loss_type else "reg"
        autotune.XGBTuner.__init__(self, _task(task), objective=objective,
                                   nthread=num_threads or 1)


class GATuner(_CompatTuner, autotune.Tuner):
    """A genetic algorithm: the ``elite_num`` fastest measured configs breed the next batch
    (uniform crossover, then each knob mutated with ``mutation_prob``)."""

    def __init__(self, task: Task, pop_size: int = 100, elite_num: int = 3,
                 mutation_prob: float = 0.1):
        self.compat_task = task
        autotune.Tuner.__init__(self, _task(task))
        self.pop_size = pop_size
        self.elite_num = max(1, elite_num)
        self.mutation_prob = mutation_prob
        self.scores: list[tuple[float, tuple]] = []

    def next_batch(self, n: int) -> list[Candidate]:
        space = self.task.space
        if len(self.scores) < self.elite_num:
            return self.pool.random_valid(n, self.rng, self.measured)
        elites = [p for _, p in sorted(self.scores)[:max(self.elite_num, 2)]]
        out: list[Candidate] = []
        taken = set(self.measured)
        for _ in range(20 * n):
            if len(out) >= n:
                break
            a, b = self.rng.choice(elites), self.rng.choice(elites)
            child = list(space.crossover(a, b, self.rng))
            for i, knob in enumerate(space.knobs.values()):
                if self.rng.random() < self.mutation_prob:
                    child[i] = knob.neighbours(child[i], self.rng)
            c = self.pool.get(child)
            if c.valid and c.prog_hash not in taken:
                taken.add(c.prog_hash)
                out.append(c)
        if len(out) < n:
            out += self.pool.random_valid(n - len(out), self.rng, taken)
        return out

    def update(self, cands: Sequence[Candidate], results: Sequence[Any]) -> None:
        for c, r in zip(cands, results):
            if r.valid and c.point:
                self.scores.append((r.median, c.point))


__all__ = ["NoGPUTuningWarning", "RandomTuner", "GridSearchTuner", "XGBTuner", "GATuner"]
