"""``auto_schedule``: tune a computation with no template (sketches from ``sketch``).

::

    s, args = autotune.auto_schedule([C], target="llvm", trials=200, db="tune.db")
    f = td.build(s, args, target="llvm")
"""
from __future__ import annotations

import warnings
from typing import Any, Mapping, Sequence

from tdsl.errors import TuningError
from tdsl.keywords import check_keywords
from tdsl.target import TargetKind, as_target
from tdsl.tensor import PlaceholderOp, Tensor

from .database import Database, open_database
from .dispatch import best_record, schedule_from_record
from .measure import MeasureOption
from .replay import fresh_schedule
from .sketch import SketchSource
from .irutil import eval_int
from .task import Task, size_vars


def _full_args(outputs: Sequence[Any], args: "Sequence[Any] | None" = None) -> list[Tensor]:
    """The argument list of a tuned function: ``args`` as given (checked: every input the
    computation reads and every output listed), else ``outputs`` as given when they already
    list inputs, else the inputs in the order they were declared (creation order, not the
    order the computation first reads them) followed by ``outputs``."""
    tensors = [o if isinstance(o, Tensor) else o.outputs[0] for o in
               (outputs if isinstance(outputs, (list, tuple)) else [outputs])]
    if args is not None:
        return _checked_args(tensors, args)
    if any(isinstance(t.op, PlaceholderOp) for t in tensors):
        return tensors
    sch = fresh_schedule(tensors)
    ins = sorted((st.op.outputs[0] for st in sch.stages if st.is_placeholder),
                 key=lambda t: t.seq)
    return ins + tensors


def _checked_args(outputs: list[Tensor], args: Sequence[Any]) -> list[Tensor]:
    """``args`` in the caller's order, refused (``TuningError``) when it is not a list of
    tensors holding every output and every input the outputs read."""
    if not isinstance(args, (list, tuple)):
        raise TuningError(f"args must be a list of tensors (inputs, then outputs), got "
                          f"{type(args).__name__}")
    for a in args:
        if not isinstance(a, Tensor):
            raise TuningError(f"args must be tensors, got {type(a).__name__} ({a!r})")
    listed = {id(a) for a in args}
    if len(listed) != len(args):
        raise TuningError(f"args lists a tensor twice: {[a.name for a in args]}")
    for t in outputs:
        if id(t) not in listed and not isinstance(t.op, PlaceholderOp):
            raise TuningError(f"args leaves out the output {t.name!r}; list it after the inputs")
    computed = [t for t in outputs if not isinstance(t.op, PlaceholderOp)]
    if not computed:
        raise TuningError("auto_schedule: no computed tensor among the outputs")
    sch = fresh_schedule(computed)
    for st in sch.stages:
        if st.is_placeholder and id(st.op.outputs[0]) not in listed:
            raise TuningError(f"args leaves out the input {st.name!r}, which the computation "
                              f"reads; list every input, then the outputs")
    return list(args)


def create_auto_task(outputs: Sequence[Any], target: Any = "llvm",
                     sizes: "Mapping[str, int] | None" = None, name: "str | None" = None,
                     args: "Sequence[Tensor] | None" = None, **sketch_options: Any) -> Task:
    """A task over the generated sketch space of ``outputs``.

    Its argument list (``task.args``) is ``args`` when given; else ``outputs`` itself when it
    already lists inputs; else the inputs in the order they were declared, then ``outputs``.
    """
    args = _full_args(outputs, args)
    tgt = as_target(target)
    sizes = dict(sizes or {})
    missing = [v for v in size_vars(args) if v not in sizes]
    if missing:
        raise TuningError(f"auto_schedule: symbolic dimension(s) {missing} need representative "
                          f"sizes (sizes={{'{missing[0]}': 256}}), or use autotune.tune_dynamic")
    outs = [t for t in args if not isinstance(t.op, PlaceholderOp)]
    source = SketchSource([t.op for t in outs], tgt, sizes, **sketch_options)
    return Task(name or "_".join(t.name for t in outs), args, tgt, source, sizes)


def check_can_time(task: Task) -> None:
    """A CUDA task needs a GPU to time its candidates: without one, say so (``TuningError``)
    and point at ``verify_candidates``, which checks them without timing."""
    if task.target.kind is not TargetKind.CUDA:
        return
    from tdsl.backends.cuda import has_device
    if not has_device():
        raise TuningError(f"auto_schedule: no usable CUDA GPU here, so the candidates of "
                          f"{task.name!r} for '{task.target}' cannot be timed.  "
                          f"autotune.verify_candidates(task) compiles them (NVRTC when "
                          f"installed) and runs them under the CPU emulator against the "
                          f"default schedule, without timing; tune on a machine with a GPU")


def verify_candidates(task: Task, n: int = 8, seed: int = 0) -> dict:
    """Check up to ``n`` random legal candidates of ``task`` without timing them: each is
    built for the task's target and, for CUDA, run under the CPU emulator (``emulate``) on
    random inputs and compared with the default schedule built for the CPU.  Returns
    ``{"checked": k, "illegal": m, "mismatch": [configs]}``."""
    import random

    import numpy as np

    import tdsl as td
    from .replay import replay
    rng = random.Random(seed)
    data = np.random.default_rng(seed)
    ins = [data.uniform(-1, 1, [eval_int(s, task.sizes, 1) for s in t.shape]).astype(str(t.dtype))
           for t in task.args if isinstance(t.op, PlaceholderOp)]
    outs = [np.zeros([eval_int(s, task.sizes, 1) for s in t.shape], str(t.dtype))
            for t in task.args if not isinstance(t.op, PlaceholderOp)]
    expect = [o.copy() for o in outs]
    td.build(fresh_schedule(task.outputs), task.args, target="llvm")(*ins, *expect)
    report: dict = {"checked": 0, "illegal": 0, "mismatch": []}
    tries = 0
    while report["checked"] < n and tries < 20 * n:
        tries += 1
        c = task.candidate(task.space.random(rng))
        if not c.valid:
            report["illegal"] += 1
            continue
        f = td.build(replay(c.trace, task.outputs), task.args, target=task.target)
        got = [np.zeros_like(o) for o in outs]
        (f.emulate if task.target.kind is TargetKind.CUDA else f)(*ins, *got)
        report["checked"] += 1
        if not all(np.allclose(g, e, rtol=1e-3, atol=1e-3) for g, e in zip(got, expect)):
            report["mismatch"].append(c.config)
    return report


@check_keywords
def auto_schedule(outputs: Sequence[Any], target: Any = "llvm", trials: int = 64,
                  db: "Database | str | None" = None, measure_option: "MeasureOption | None" = None,
                  sizes: "Mapping[str, int] | None" = None, callbacks: Sequence[Any] = (),
                  early_stopping: "int | None" = None, batch_size: int = 24,
                  transfer: bool = True, seed: int = 0, tuner: str = "xgb",
                  timeout: "float | None" = None, progress: bool = False,
                  args: "Sequence[Tensor] | None" = None) -> tuple[Any, list[Tensor]]:
    """Tune ``outputs`` and return ``(schedule, args)`` ready for ``td.build``.

    The returned ``args`` is the argument order of the built function: ``args`` when given
    (inputs then outputs, in any order you like); else ``outputs`` as given when it already
    lists the inputs; else the inputs in the order they were declared (``td.placeholder``
    calls, not the order the computation reads them), then the outputs.

    ``db`` keeps the records (a path: a killed job resumes from it; None: in
    memory); ``transfer`` pre-trains the cost model with the records of other
    tasks in ``db``; ``progress=True`` shows a progress bar (tqdm when installed)
    over the ``trials``.  When no candidate is valid the default schedule is
    returned with a warning.
    """
    from tdsl.runtime.threads import default_num_threads
    from .measure import cpu_threads
    from .tuner import RandomTuner, XGBTuner
    task = create_auto_task(outputs, target, sizes, args=args)
    if trials > 0:
        check_can_time(task)
    database = open_database(db)
    if tuner == "xgb":
        t = XGBTuner(task, seed=seed, transfer_from=database if transfer else None)
    elif tuner == "random":
        t = RandomTuner(task, seed=seed)
    else:
        raise TuningError(f"auto_schedule: tuner must be 'xgb' or 'random', got {tuner!r}")
    if trials > 0:
        bar = None
        if progress:
            from .progress import progress_bar
            bar = progress_bar(trials, desc=task.name)
            callbacks = [*callbacks, bar]
        try:
            t.tune(trials, measure_option, callbacks=callbacks, db=database,
                   early_stopping=early_stopping, batch_size=batch_size, timeout=timeout)
        finally:
            if bar is not None:
                bar.close()
    # the records of the threads this job timed with (without trials: those kernels run with)
    threads = t.threads or cpu_threads(task.target, default_num_threads())
    rec = best_record(database.records(task.key), threads)
    if rec is None:
        warnings.warn(f"auto_schedule: no valid candidate for {task.description}; returning the "
                      f"default schedule", stacklevel=2)
        return fresh_schedule(task.outputs), task.args
    return schedule_from_record(rec, task.outputs), task.args
