"""``tvm.auto_scheduler`` (Ansor) over tdsl's template-free tuner (``tdsl.autotune`` sketches).

``register_workload`` names a function returning tensors; ``SearchTask(func=, args=,
target=)`` tunes it; ``TuningOptions(num_measure_trials=, measure_callbacks=
[RecordToFile(path)])`` says how long and where the records go.  The record file
is a tdsl tuning database (SQLite), not Ansor's JSON lines: ``task.apply_best(path)``
and ``task.print_best(path)`` read it, as does ``tdsl records show path``.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from tdsl import autotune
from tdsl.autotune.database import open_database
from tdsl.autotune.dispatch import best_record, schedule_from_record
from tdsl.errors import TuningError

from .autotvm.measure import LocalBuilder, LocalRunner
from .target import Target, as_tdsl

#: functions registered with ``register_workload``, by name (TVM finds workloads by name)
WORKLOADS: dict[str, Callable[..., Any]] = {}


def register_workload(func_name: Any, f: "Callable | None" = None, override: bool = False) -> Any:
    """``@auto_scheduler.register_workload``: make a tensor-returning function a workload."""
    if callable(func_name):
        WORKLOADS[func_name.__name__] = func_name
        return func_name

    def wrap(fn: Callable) -> Callable:
        WORKLOADS[str(func_name)] = fn
        return fn
    return wrap(f) if f is not None else wrap


class RecordToFile:
    """``measure_callbacks=[RecordToFile(path)]``: keep the records in the database ``path``."""

    def __init__(self, filename: str):
        self.filename = filename


class HardwareParams:
    """Accepted for compatibility; tdsl reads the machine's limits from the target."""

    def __init__(self, num_cores: int = -1, vector_unit_bytes: int = -1,
                 cache_line_bytes: int = -1, max_shared_memory_per_block: int = -1,
                 max_local_memory_per_block: int = -1, max_threads_per_block: int = -1,
                 max_vthread_extent: int = -1, warp_size: int = -1, target: Any = None,
                 target_host: Any = None):
        self.num_cores = num_cores


class TuningOptions:
    """How to tune: ``num_measure_trials``, ``early_stopping``, ``num_measures_per_round``,
    ``builder``/``runner`` (``"local"`` or AutoTVM-style ones), ``measure_callbacks``."""

    def __init__(self, num_measure_trials: int = 0, early_stopping: "int | None" = None,
                 num_measures_per_round: int = 64, verbose: int = 1, builder: Any = "local",
                 runner: Any = "local", measure_callbacks: "Sequence[Any] | None" = None):
        self.num_measure_trials = int(num_measure_trials)
        self.early_stopping = early_stopping
        self.num_measures_per_round = int(num_measures_per_round)
        self.verbose = verbose
        self.builder = LocalBuilder() if builder == "local" else builder
        self.runner = LocalRunner() if runner == "local" else runner
        self.measure_callbacks = list(measure_callbacks or [])

    @property
    def log_file(self) -> "str | None":
        files = [c.filename for c in self.measure_callbacks if isinstance(c, RecordToFile)]
        return files[-1] if files else None


class ComputeDAG:
    """The computation of a task; prints as its default loop nest."""

    def __init__(self, tensors: Sequence[Any]):
        self.tensors = list(tensors)

    def __str__(self) -> str:
        import tdsl
        from tdsl.autotune.replay import fresh_schedule
        outs = [t for t in self.tensors if not t.op.__class__.__name__ == "PlaceholderOp"]
        return str(tdsl.lower(fresh_schedule(outs), self.tensors))


class SearchTask:
    """``SearchTask(func=f, args=(...), target="llvm")``: tune ``f(*args)`` without a template."""

    def __init__(self, func: Any = None, args: Sequence[Any] = (), compute_dag: Any = None,
                 workload_key: Any = None, target: Any = None, hardware_params: Any = None,
                 layout_rewrite_option: Any = None, task_inputs: Any = None,
                 task_inputs_overwrite: bool = False, task_inputs_save_to_file: bool = False,
                 desc: str = ""):
        if isinstance(func, str):
            if func not in WORKLOADS:
                raise TuningError(f"SearchTask: no workload named {func!r}; decorate it with "
                                  f"@auto_scheduler.register_workload")
            func = WORKLOADS[func]
        if func is None:
            raise TuningError("SearchTask: give func= (a registered workload or a function)")
        self.func = func
        self.args = tuple(args)
        self.workload_key = f'["{func.__name__}", {list(self.args)}]'
        self.target = target if isinstance(target, Target) else Target(target or "llvm")
        self.hardware_params = hardware_params
        self.desc = desc
        tensors = list(func(*self.args))
        self.compute_dag = ComputeDAG(tensors)
        self.tdsl = autotune.create_auto_task(tensors, as_tdsl(self.target), name=func.__name__)

    def tune(self, tuning_options: TuningOptions, search_policy: Any = None,
             adaptive_training: bool = False) -> Any:
        """Measure ``num_measure_trials`` candidates; records go to the ``RecordToFile`` path."""
        opt = tuning_options
        mopt = autotune.measure_option(builder=opt.builder, runner=opt.runner)
        db = open_database(opt.log_file)     # None: in memory
        tuner = autotune.XGBTuner(self.tdsl, transfer_from=db)
        callbacks = [c for c in opt.measure_callbacks if not isinstance(c, RecordToFile)]
        if opt.verbose:
            callbacks.append(autotune.progress_bar(opt.num_measure_trials, desc=self.tdsl.name))
        try:
            return tuner.tune(opt.num_measure_trials, mopt, callbacks=callbacks, db=db,
                              early_stopping=opt.early_stopping,
                              batch_size=min(opt.num_measures_per_round, 64))
        finally:
            mopt.close()

    def _best(self, log_file: str) -> Any:
        rec = best_record(open_database(log_file, create=False).records(self.tdsl.key))
        if rec is None:
            raise TuningError(f"no valid record of {self.tdsl.description} in {log_file}")
        return rec

    def apply_best(self, log_file: str, include_compatible: bool = False,
                   layout_rewrite_option: Any = None) -> tuple[Any, list]:
        """``(schedule, args)`` of the best record in ``log_file``, ready for ``tvm.build``."""
        rec = self._best(log_file)
        return schedule_from_record(rec, self.tdsl.outputs), list(self.tdsl.args)

    def print_best(self, log_file: str, print_mode: str = "schedule") -> str:
        """The best record's schedule as code (``"schedule"``) or its kernel source
        (``"cuda"``/``"llvm"``); printed and returned."""
        rec = self._best(log_file)
        if print_mode == "schedule":
            from tdsl.schedule.trace import Trace
            text = str(Trace.from_json(rec.trace))
        else:
            import tdsl
            sch, args = self.apply_best(log_file)
            text = tdsl.build(sch, args, target=as_tdsl(self.target)).get_source()
        print(text)
        return text

    def __repr__(self) -> str:
        return f"SearchTask({self.tdsl.description}, target={self.target})"


def load_best_record(filename: str, workload_key: Any = None, target: Any = None) -> Any:
    recs = [r for r in open_database(filename, create=False).records() if r.valid]
    return min(recs, key=lambda r: r.cost) if recs else None


class ApplyHistoryBest:
    """``with auto_scheduler.ApplyHistoryBest(path):`` builds use the best records."""

    def __init__(self, records: str, n_lines: Any = None, include_compatible: bool = False):
        self._ctx = autotune.apply_history_best(records)

    def __enter__(self) -> "ApplyHistoryBest":
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._ctx.__exit__(*exc)


def SketchPolicy(task: SearchTask, program_cost_model: Any = None, params: Any = None,  # noqa: N802
                 seed: Any = None, verbose: int = 1, init_search_callbacks: Any = None) -> None:
    """Accepted: tdsl's sketch search is the only policy."""
    return None


def XGBModel(*args: Any, **kwargs: Any) -> None:  # noqa: N802
    return None


__all__ = ["register_workload", "SearchTask", "TuningOptions", "RecordToFile", "ComputeDAG",
           "HardwareParams", "LocalBuilder", "LocalRunner", "ApplyHistoryBest",
           "load_best_record", "SketchPolicy", "XGBModel", "WORKLOADS"]
