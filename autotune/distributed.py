"""Measuring on a Dask cluster (``distributed`` is an optional dependency).

``DaskRunner("tcp://scheduler:8786")`` sends each candidate of a batch to the
cluster: a worker replays, compiles and times it on its own hardware
(``measure_jobs.remote_measure``).  A candidate that kills its worker process
(segfault) comes back as ``RUN_CRASH`` once Dask gives up on it; one that runs
past ``timeout`` is cancelled and recorded as ``RUN_TIMEOUT``.  Workers run
candidates in their own process (Dask restarts a dead worker), so run one
single-threaded worker process per machine for clean timings.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Sequence

from tdsl.errors import TuningError

from .measure import LocalRunner, MeasureInput, MeasureResult, _run_result
from .workers import JobOutcome, JobResult


def _client(address: Any) -> Any:
    try:
        from distributed import Client
    except ImportError:
        raise TuningError("measuring on a Dask cluster needs the 'distributed' package "
                          "(pip install tdsl[distributed])") from None
    if hasattr(address, "submit"):
        return address
    return Client(address, timeout=30)


class DaskRunner:
    """Builds and runs candidates on the workers of a Dask scheduler (or Client)."""

    def __init__(self, address: Any, timeout: float = 30.0, **runner_options: Any):
        self.client = _client(address)
        self._own = not hasattr(address, "submit")
        self.timeout = timeout
        self.local = LocalRunner(timeout=timeout, **runner_options)

    def measure_batch(self, inputs: Sequence[MeasureInput], best_cost: float = float("inf"),
                      on_result: "Callable[[int, MeasureResult], None] | None" = None
                      ) -> list[MeasureResult]:
        from distributed import wait
        from . import measure_jobs
        opts = self.local.options()
        futures = [self.client.submit(measure_jobs.remote_measure, inp.task.payload(), inp.task.args_key,
                                      inp.task.sizes, str(inp.task.target), inp.trace, inp.config,
                                      opts, best_cost, inp.task.name, pure=False)
                   for inp in inputs]
        start = time.perf_counter()
        wait(futures, timeout=self.timeout * max(1, len(inputs)), return_when="ALL_COMPLETED")
        out: list[MeasureResult] = []
        for i, f in enumerate(futures):
            el = time.perf_counter() - start
            if f.status == "finished":
                r = _run_result(JobResult(JobOutcome.OK, f.result(), el), 0.0)
            elif f.status == "error":
                exc = f.exception()
                kind = JobOutcome.CRASHED if type(exc).__name__ == "KilledWorker" else JobOutcome.ERROR
                r = _run_result(JobResult(kind, f"{type(exc).__name__}: {exc}", el), 0.0)
            else:
                f.cancel()
                r = _run_result(JobResult(JobOutcome.TIMEOUT, f"no result after {el:.0f} s", el),
                                0.0)
            out.append(r)
            if on_result:
                on_result(i, r)
        return out

    def close(self) -> None:
        if self._own:
            self.client.close()
