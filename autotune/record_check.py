"""What a well-formed tuning record is: checked on every path a record comes in.

A record is read back from SQLite (which stores any value in any column) and
imported from JSON lines (written by anyone), so neither path can trust a field's
type.  ``check_record`` raises ``ValueError`` naming the first bad field; the
database skips such a row with a warning (a reader never crashes on it and never
chooses it as best) and ``import`` refuses the file.

A valid measurement's costs are seconds per run: finite and > 0 (a cost of 0
would divide GFLOP/s by zero, a negative one would always be "best").
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from tdsl.errors import TuningError
from tdsl.schedule import Trace

from .measure import MeasureErrorNo

if TYPE_CHECKING:
    from .database import Record


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def check_costs(costs: Sequence[Any], what: str = "costs") -> tuple[float, ...]:
    """``costs`` as floats when it is a non-empty list of finite seconds > 0."""
    if not isinstance(costs, (list, tuple)) or not costs:
        raise ValueError(f"{what} must be a non-empty list of seconds, got {costs!r:.80}")
    for c in costs:
        if not _number(c) or not math.isfinite(c) or c <= 0:
            raise ValueError(f"{what} must be finite and > 0, got {c!r}")
    return tuple(float(c) for c in costs)


def error_no(v: Any) -> MeasureErrorNo:
    """``v`` as a ``MeasureErrorNo`` (an integer that names one)."""
    if isinstance(v, int) and not isinstance(v, bool) and v in set(MeasureErrorNo):
        return MeasureErrorNo(v)
    raise ValueError(f"error_no {v!r:.40} is not one of {[int(e) for e in MeasureErrorNo]}")


def _str(name: str, v: Any, nonempty: bool = False) -> None:
    if not isinstance(v, str) or (nonempty and not v):
        raise ValueError(f"{name} must be a{' non-empty' if nonempty else ''} string, got {v!r:.80}")


def check_record(rec: "Record") -> None:
    """Raise ``ValueError`` (naming the field) unless every field of ``rec`` is well formed."""
    for name in ("task_key", "target", "prog_hash"):
        _str(name, getattr(rec, name), nonempty=True)
    for name in ("task_desc", "error_msg", "workload"):
        _str(name, getattr(rec, name))
    if not isinstance(rec.error_no, MeasureErrorNo):
        raise ValueError(f"error_no {rec.error_no!r} is not a MeasureErrorNo")
    if not isinstance(rec.config, dict) or not all(isinstance(k, str) for k in rec.config):
        raise ValueError(f"config must be an object, got {rec.config!r:.80}")
    _str("trace", rec.trace)
    try:
        Trace.from_json(rec.trace)
    except TuningError as e:
        raise ValueError(f"trace does not parse: {e}") from None
    if rec.error_no is MeasureErrorNo.NO_ERROR:
        check_costs(rec.costs)
    elif not isinstance(rec.costs, tuple) or not all(_number(c) for c in rec.costs):
        raise ValueError(f"costs must be a list of numbers, got {rec.costs!r}")
    if rec.final_costs:
        check_costs(rec.final_costs, "re-measured costs")
    for name in ("flop", "all_cost"):
        v = getattr(rec, name)
        if not _number(v) or not math.isfinite(v) or v < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
    if not _number(rec.timestamp) or not math.isfinite(rec.timestamp):
        raise ValueError(f"timestamp must be a finite number, got {rec.timestamp!r}")
    if not isinstance(rec.sizes, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v > 0
            for k, v in rec.sizes.items()):
        raise ValueError(f"sizes must be an object of positive integers, got {rec.sizes!r:.80}")
    if not isinstance(rec.threads, int) or isinstance(rec.threads, bool) or rec.threads < 0:
        raise ValueError(f"threads must be an integer >= 0, got {rec.threads!r}")
    if not isinstance(rec.signature, list) or not all(
            isinstance(s, list) and s and all(isinstance(n, str) for n in s)
            for s in rec.signature):
        raise ValueError(f"signature must be a list of [stage, axis...] name lists, got "
                         f"{rec.signature!r:.80}")
    if rec.features is not None and not (isinstance(rec.features, np.ndarray)
                                         and rec.features.ndim == 1):
        raise ValueError("features must be a vector")
    if not isinstance(rec.feature_version, int) or isinstance(rec.feature_version, bool):
        raise ValueError(f"feature_version must be an integer, got {rec.feature_version!r}")
