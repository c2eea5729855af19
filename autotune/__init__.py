"""Autotuning (imported as ``tdsl.autotune``): find the schedule instead of writing it.

Two ways in:

* templates, AutoTVM's shape — ``@template("name")``, ``get_config()``,
  ``cfg.define_split/define_knob/define_reorder``, ``create_task``, ``XGBTuner``,
  ``measure_option``;
* no template, Ansor's shape — ``auto_schedule(outputs, target=, trials=)``
  generates sketches (multi-level tiling, inlining, caching, rfactor, parallel,
  vectorize, unroll) from the computation and fills in their knobs.

Records go to a SQLite ``Database`` as they are measured; ``apply_history_best``
makes ``td.build`` use the best one.  Modules: ``space`` (knobs), ``template``,
``task``, ``features``, ``cost_model``, ``search``, ``tuner``, ``measure`` (+
``measure_jobs``, ``workers``), ``database``, ``sketch`` and ``auto_schedule``,
``dispatch``, ``dynamic``, ``distributed``, ``progress``, ``plot``, ``task_scheduler``
(``extract_tasks``, ``tune_tasks``: jobs of many tasks under one budget), ``model_tuning``
(``tune_model``: every kernel of a PyTorch model), ``lease``
(the timing lease tuners sharing a database hold while measuring).
"""
from .cost_model import RandomModel, XGBoostCostModel, pairwise_accuracy
from .database import Database, Record, open_database
from .dispatch import ApplyHistoryBest, apply_history_best
from .measure import (LocalBuilder, LocalRunner, MeasureErrorNo, MeasureInput, MeasureOption,
                      MeasureResult, measure_option)
from .space import ConfigSpace, SplitEntity, OtherOptionEntity, ReorderEntity
from .task import Task, create_task
from .template import Config, Template, get_config, template
from .tuner import GridSearchTuner, RandomTuner, TuneResult, Tuner, XGBTuner
from .auto_schedule import auto_schedule, create_auto_task, verify_candidates
from .dynamic import DispatchModule, build_dynamic, tune_dynamic
from .extract import extract_tasks
from .task_scheduler import JobResult, TaskScheduler, tune_tasks
from .lease import TimingLease
from .model_tuning import model_tasks, tune_model
from .progress import progress_bar
from .plot import plot_tuning_curve

__all__ = [
    "template", "get_config", "Config", "Template", "create_task", "Task", "ConfigSpace",
    "SplitEntity", "OtherOptionEntity", "ReorderEntity",
    "XGBTuner", "RandomTuner", "GridSearchTuner", "Tuner", "TuneResult",
    "XGBoostCostModel", "RandomModel", "pairwise_accuracy",
    "measure_option", "MeasureOption", "LocalBuilder", "LocalRunner", "MeasureInput",
    "MeasureResult", "MeasureErrorNo",
    "Database", "Record", "open_database", "apply_history_best", "ApplyHistoryBest",
    "auto_schedule", "create_auto_task", "verify_candidates", "tune_dynamic", "build_dynamic", "DispatchModule",
    "progress_bar", "plot_tuning_curve", "DaskRunner",
    "extract_tasks", "tune_tasks", "tune_model", "model_tasks", "TaskScheduler", "JobResult", "TimingLease",
]


def __getattr__(name: str) -> object:
    """``DaskRunner`` on first use: its module imports ``distributed`` (about a second), which
    every worker process and CLI call would otherwise pay."""
    if name == "DaskRunner":
        from .distributed import DaskRunner
        return DaskRunner
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
