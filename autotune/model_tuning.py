"""``tune_model``: tune every kernel of a PyTorch model as one job.

The model goes through the PyTorch frontend (``tdsl.compile``: ``torch.export``, the FX
import, ``tdsl.graph.compile_graph``); each distinct kernel of the compiled graph
(``CompiledGraph.tasks``: by structure, with how many times it runs per call) becomes one
``create_auto_task`` of its own placeholders and output, and ``tune_tasks`` tunes them under
one budget with those counts as weights.  The tasks are made of the very tensors the
compiler builds, so ``tdsl.compile(model, inputs, options={"db": path})`` (or
``torch.compile(model, backend="tdsl", options={"db": path})``) finds the records by the
same workload key.  Records are written as they are measured: a killed job resumes.
"""
from __future__ import annotations

import warnings
from typing import Any, Sequence

from tdsl.errors import TDSLError, TuningError

from .database import Database
from .task import Task
from .task_scheduler import JobResult, tune_tasks


def model_tasks(model: Any, example_inputs: Any, target: Any = "llvm",
                dynamic: Any = None) -> tuple[list[Task], list[int]]:
    """The tuning tasks of ``model`` for ``example_inputs`` and their weights (how many
    kernels of the compiled model each stands for).  Symbolic dimensions (``dynamic``)
    are tuned at the sizes of ``example_inputs``.  A kernel that cannot be made a task is
    left out with a warning (it keeps its default schedule)."""
    import torch

    from tdsl.frontend.api import compile as compile_model
    from tdsl.runtime.shape_eval import eval_shape_expr

    from .auto_schedule import create_auto_task
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    exported = compile_model(model, example_inputs, dynamic, options={"target": target})
    cg = exported.compiled.compiled
    env = _size_env(exported, example_inputs)
    first: dict = {}
    weights: dict = {}
    for k in cg.kernels.values():
        first.setdefault(k.key, k)
        weights[k.key] = weights.get(k.key, 0) + 1
    tasks: list[Task] = []
    kept: list = []
    for key, k in first.items():
        sizes: dict[str, int] = {}
        for ph, v in zip(k.tensors[:-1], k.inputs):
            for d, vd in zip(ph.shape, v.shape):
                if hasattr(d, "name") and d.name not in sizes:
                    sizes[d.name] = int(eval_shape_expr(vd, env))
        try:
            tasks.append(create_auto_task(k.tensors, target, sizes=sizes, name=k.name))
        except TDSLError as e:
            # one kernel the sketch rules cannot handle keeps its default schedule; the
            # rest of the model is still worth tuning
            warnings.warn(f"tune_model: kernel {k.name} ({', '.join(k.ops)}) is not tuned "
                          f"({type(e).__name__}: {e}); it keeps its default schedule",
                          stacklevel=2)
            continue
        kept.append(key)
    return tasks, [weights[key] for key in kept]


def _size_env(exported: Any, example_inputs: Sequence[Any]) -> dict:
    """The compiled graph's size variables bound to the example inputs' sizes."""
    cg = exported.compiled.compiled
    fx_args: list = [None] * exported._n
    for pos, t in zip(exported._user_pos, example_inputs):
        fx_args[pos] = t
    take = sorted(exported.compiled._take, key=lambda t: t[1])     # by graph input
    graph_inputs = [fx_args[pos] for pos, _ in take]
    return cg._bind(cg._inputs([t.detach() for t in graph_inputs]))


def tune_model(model: Any, example_inputs: Any, trials: "int | None" = None,
               time_budget: "float | None" = None, db: "Database | str" = "tune.db",
               dynamic: Any = None, target: Any = "llvm", **tune_kwargs: Any) -> JobResult:
    """Tune the kernels of ``model`` (an ``nn.Module`` or function of tensors) at the sizes
    of ``example_inputs``, ``trials`` in total and/or ``time_budget`` seconds, all records
    into ``db``; then compile with ``options={"db": db}`` to use them.  ``dynamic`` as in
    ``tdsl.compile``; ``tune_kwargs`` go to ``tune_tasks`` (``tuner``, ``seed``,
    ``batch_size``, ``measure_option``, ``progress``, ``client``: a Dask
    ``distributed.Client`` or scheduler address to measure on its workers...)."""
    if trials is None and time_budget is None:
        raise TuningError("tune_model: give trials= and/or time_budget= (seconds)")
    tasks, weights = model_tasks(model, example_inputs, target, dynamic)
    if not tasks:
        raise TuningError("tune_model: the model has no kernel to tune (every op falls back "
                          "to PyTorch, it only reshapes its inputs, or no kernel could be "
                          "made a task)")
    return tune_tasks(tasks, trials=trials, time_budget=time_budget, db=db, weights=weights,
                      **tune_kwargs)
