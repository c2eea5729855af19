"""``tvm.autotvm``: AutoTVM templates and tuners as TVM users wrote them, over
``tdsl.autotune`` (templates, task spaces, XGBoost/random/grid tuning, isolated
measurement).  Logs are TVM's JSON lines; ``apply_history_best`` also reads tdsl databases."""
from __future__ import annotations

from . import callback, env, measure, record, task, tuner
from .measure import (LocalBuilder, LocalRPCMeasureContext, LocalRunner, RPCRunner,
                      measure_option)
from .record import ApplyHistoryBest, apply_history_best, load_from_file
from .space import ConfigEntity
from .task import get_config, register, template
from .measure import MeasureErrorNo, MeasureInput, MeasureResult

FallbackContext = ApplyHistoryBest

__all__ = ["callback", "env", "measure", "record", "task", "tuner", "LocalBuilder",
           "LocalRunner", "LocalRPCMeasureContext", "RPCRunner", "measure_option",
           "apply_history_best",
           "ApplyHistoryBest", "load_from_file", "get_config", "template", "register",
           "ConfigEntity", "MeasureErrorNo", "MeasureInput", "MeasureResult"]
