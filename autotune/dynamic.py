"""Dynamic shapes: tune representative sizes, dispatch by size bucket at run time.

``tune_dynamic(args, sizes={"n": [64, 128, 256]})`` tunes the symbolic
computation once per representative size (powers of two by default); every
candidate is a schedule of the *symbolic* computation, so each tuned kernel is
correct for any size.  ``build_dynamic`` builds the best kernel of each size and
returns a ``DispatchModule`` that picks, per call, the kernel tuned for the
nearest size: per symbolic dimension, the nearest tuned size on a log scale
(``select``: the tuned size tuple with the least sum of ``|log(actual / tuned)|``
over the dimensions, which on a full grid is the nearest size of each dimension
taken separately; ties go to the larger size, whose tiles fit more of the work).
"""
from __future__ import annotations

import inspect
import itertools
import math
from typing import Any, Mapping, Sequence

import numpy as np

from tdsl.errors import TuningError
from tdsl.runtime.args import SCALAR_VALUE, bound_value
from tdsl.runtime.threads import default_num_threads
from tdsl.keywords import check_keywords, unknown_keyword_error

from .database import Database, best_records, open_database
from .dispatch import for_threads, schedule_from_record
from .measure import MeasureOption, cpu_threads
from .task import size_vars


def powers_of_two(lo: int = 16, hi: int = 1024) -> list[int]:
    out, v = [], 1
    while v <= hi:
        if v >= lo:
            out.append(v)
        v *= 2
    return out


def _grid(args: Sequence[Any], sizes: "Mapping[str, Sequence[int]] | None") -> list[dict]:
    names = size_vars(args)
    if not names:
        raise TuningError("tune_dynamic: the computation has no symbolic dimension; use "
                          "auto_schedule")
    sizes = dict(sizes or {})
    lists = [list(sizes.get(n, powers_of_two())) for n in names]
    return [dict(zip(names, combo)) for combo in itertools.product(*lists)]


def tune_dynamic(args: Sequence[Any], target: Any = "llvm",
                 sizes: "Mapping[str, Sequence[int]] | None" = None, trials: int = 32,
                 db: "Database | str | None" = None, measure_option: "MeasureOption | None" = None,
                 **kwargs: Any) -> list[dict]:
    """Tune each representative size of a symbolic computation; returns the size bindings.

    Other keywords go to ``auto_schedule`` (an unknown one fails before any tuning)."""
    from .auto_schedule import auto_schedule
    valid = [p for p in inspect.signature(auto_schedule).parameters
             if p not in ("outputs", "target", "trials", "db", "measure_option", "sizes")]
    unknown = [k for k in kwargs if k not in valid]
    if unknown:
        raise unknown_keyword_error("tune_dynamic", unknown, ["target", "sizes", "trials", "db",
                                                              "measure_option", *valid])
    database = open_database(db)
    grid = _grid(args, sizes)
    for binding in grid:
        auto_schedule(args, target=target, trials=trials, db=database,
                      measure_option=measure_option, sizes=binding, **kwargs)
    return grid


def nearest(keys: Sequence[Sequence[int]], actual: Sequence[int]) -> int:
    """Index of the tuned size tuple in ``keys`` nearest to ``actual``: the least sum over
    dimensions of ``|log(actual) - log(tuned)|`` (sizes below 1 count as 1), ties to the
    larger tuned size.  On a full grid of tuned sizes this is, per dimension, the nearest
    tuned size on a log scale (the sum separates by dimension)."""
    logs = [math.log(max(1, a)) for a in actual]

    def distance(i: int) -> tuple:
        key = keys[i]
        return (sum(abs(la - math.log(max(1, k))) for la, k in zip(logs, key)),
                tuple(-k for k in key))
    return min(range(len(keys)), key=distance)


class DispatchModule:
    """Kernels of one symbolic computation, each tuned for a size bucket."""

    def __init__(self, kernels: Sequence[tuple[tuple[int, ...], Any]], names: Sequence[str]):
        if not kernels:
            raise TuningError("DispatchModule needs at least one kernel")
        self.kernels = sorted(kernels, key=lambda kv: kv[0])
        self.keys = [k for k, _ in self.kernels]
        self.names = list(names)
        func = self.kernels[0][1].func
        self._bindings = {v.name: func.bindings[v] for v in func.size_vars}

    def select(self, arrays: Sequence[Any]) -> Any:
        """The kernel tuned for the size nearest to that of ``arrays`` (log scale)."""
        actual = []
        for n in self.names:
            pi, d = self._bindings[n]
            a = arrays[pi]   # a tensor (any DLPack kind), or the number of a scalar parameter
            actual.append(int(a.shape[d]) if d != SCALAR_VALUE else bound_value(np.asarray(a), d))
        return self.kernels[nearest(self.keys, actual)][1]

    def __call__(self, *arrays: Any) -> None:
        self.select(arrays)(*arrays)

    @check_keywords
    def time_evaluator(self, func_name: "str | None" = None, dev: Any = None, number: int = 1,
                       repeat: int = 1, min_repeat_ms: float = 0) -> Any:
        """Times the kernel that ``arrays`` select (see ``Module.time_evaluator``)."""
        def evaluate(*arrays: Any) -> Any:
            return self.select(arrays).time_evaluator(
                number=number, repeat=repeat, min_repeat_ms=min_repeat_ms)(*arrays)
        return evaluate


def build_dynamic(args: Sequence[Any], db: "Database | str", target: Any = "llvm",
                  threads: "int | None" = None) -> DispatchModule:
    """Build the best record of every tuned size of ``args``'s computation into a
    dispatcher: records timed with ``threads`` CPU threads (default: the threads kernels run
    with), else of unknown count (``dispatch.for_threads``)."""
    import tdsl as td
    from tdsl.target import as_target
    from .auto_schedule import _full_args
    from .task import _ops, workload_key
    args = _full_args(args)
    outputs = _ops(args)
    database = open_database(db, create=False)
    recs = [r for r in database.by_workload(workload_key(outputs, as_target(target))) if r.valid]
    want = cpu_threads(target, threads or default_num_threads())
    recs = for_threads(recs, want)
    names = size_vars(args)
    by_size: dict[tuple, list] = {}
    for r in recs:
        by_size.setdefault(tuple(int(r.sizes.get(n, 0)) for n in names), []).append(r)
    best = {key: best_records(rs, 1)[0] for key, rs in by_size.items()}
    if not best:
        raise TuningError(f"build_dynamic: no valid record for this computation timed with "
                          f"{want or 'any'} thread(s) (or an unknown count); run tune_dynamic "
                          f"with that many")
    kernels = []
    for key, r in best.items():
        sch = schedule_from_record(r, outputs)
        kernels.append((key, td.build(sch, args, target=target)))
    return DispatchModule(kernels, names)
