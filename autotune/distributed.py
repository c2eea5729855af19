"""Measuring on a Dask cluster (``distributed`` is an optional dependency).

``DaskRunner("tcp://scheduler:8786")`` sends each candidate of a batch to the
cluster, where a worker builds and times it -- not in the worker's own process
but in two isolated child processes (``workers.WorkerPool``, as the local builder and
runner do: one builds, one times), kept by a worker plugin (``measure_worker``) and
replaced after a crash:

* a candidate that segfaults becomes ``RUN_CRASH`` (``BUILD_CRASH`` when its build
  dies), one that hangs is killed after ``timeout`` and becomes ``RUN_TIMEOUT``;
  the Dask worker lives on and takes the next candidate;
* tasks are submitted with ``retries=0``: Dask never re-runs a candidate that
  failed; one whose *worker* died (killed, out of memory) is re-run by the
  scheduler on another worker; a candidate that was being timed when its worker died
  is charged for it (in the scheduler's metadata), and one charged twice returns
  ``RUN_CRASH`` at once -- its neighbours building or waiting on that worker are not;
* results are handed to ``on_result`` (the tuner writes the record) as each
  arrives, so a batch that ends on a timeout keeps everything that finished.
  Only when no result at all arrives for ``stall_timeout`` seconds (no worker
  left) are the candidates still out recorded as ``RUN_TIMEOUT``, with a message
  saying so.

Builds spread over the workers; timings take turns on each machine.  A worker
builds its candidate without waiting for anyone (compiling is the expensive part on
a CPU), then times it holding its machine's timing lease (``HostLease``: an exclusive
``flock`` on a file in the machine's temp folder, so the workers of one machine --
a ``LocalCluster``'s, or several ``dask worker`` processes -- never time at once; they
have it first come first served).
While a candidate waits for the lease or is timed, it leaves the worker's thread pool
and its worker builds the next candidate in its build process: builds overlap timings
on each worker as well as across workers (one candidate built ahead per worker).  The
operating system drops the lock of a process that dies, and a hung candidate is killed
after ``timeout``, so a lease is never held for longer than one timing.  A candidate that
could not have the lease within ``lease_wait`` seconds is timed anyway, its result noted
``contended``.

Each worker computes a task's reference output once, in its timing process under
``reference_timeout`` (never inside a candidate's timeout), and caches it on its
disk.  ``DaskRunner.log`` keeps, per candidate, where and when it was built and timed.
"""
from __future__ import annotations

import time
import uuid
from typing import Any, Callable, Sequence

from tdsl.errors import TuningError

from .lease import HostLease, host_lease_path
from .measure import (LocalRunner, MeasureErrorNo, MeasureInput, MeasureResult, _build_result,
                      _run_result, bound_notes)
from .measure_worker import (MAX_ATTEMPTS, PLUGIN_NAME, IsolationPlugin, leased_call,
                             measure_isolated, plugin_name, worker_events)
from .workers import JobOutcome, JobResult

__all__ = ["DaskRunner", "dask_option", "HostLease", "host_lease_path", "IsolationPlugin",
           "measure_isolated", "plugin_name", "worker_events", "MAX_ATTEMPTS", "PLUGIN_NAME"]


def _client(address: Any) -> Any:
    """``address`` itself when it is a ``distributed.Client``, else a client connected to
    the scheduler at ``address`` (``"tcp://host:8786"``)."""
    try:
        from distributed import Client
    except ImportError:
        raise TuningError("measuring on a Dask cluster needs the 'distributed' package "
                          "(pip install tdsl[distributed])") from None
    if hasattr(address, "submit"):
        return address
    if not isinstance(address, str) or not address:
        raise TuningError(f"a Dask cluster is given as a distributed.Client or a scheduler "
                          f"address such as 'tcp://host:8786', got {type(address).__name__} "
                          f"{address!r}")
    try:
        return Client(address, timeout=30)
    except (OSError, TimeoutError, ValueError) as e:
        raise TuningError(f"cannot reach the Dask scheduler at {address!r}: "
                          f"{type(e).__name__}: {e}") from None


def _result(value: tuple, elapsed: float) -> MeasureResult:
    """A worker's answer as a ``MeasureResult``."""
    stage, outcome, payload, seconds = value[:4]
    notes = bound_notes(value[4]) if len(value) > 4 else ()
    if len(value) > 5 and value[5].get("contended"):
        notes = notes + ("contended: timed without the machine's timing lease",)
    job = JobResult(JobOutcome(outcome), payload, seconds)
    if stage == "build":
        b = _build_result(job)
        if b.error_no is MeasureErrorNo.NO_ERROR:      # built, but no library came back
            return MeasureResult((), MeasureErrorNo.COMPILE_HOST, "no library was exported",
                                 b.seconds)
        return MeasureResult((), b.error_no, b.error_msg, b.seconds)
    if stage == "lost":
        return MeasureResult((), MeasureErrorNo.RUN_CRASH, str(payload), elapsed)
    threads = value[5].get("threads", 0) if len(value) > 5 else 0
    return _run_result(job, 0.0, notes, threads)


class DaskRunner:
    """Builds and runs candidates on the workers of a Dask scheduler (or Client).

    ``address``: a ``distributed.Client`` or a scheduler address (``"tcp://host:8786"``);
    ``timeout``: seconds to time one candidate (as ``LocalRunner``'s);
    ``build_timeout``: seconds to build one; ``stall_timeout``: seconds without any
    result from the cluster after which the candidates still out are given up
    (default: enough for a build, a reference and a run); ``lease_wait``: seconds a
    worker waits for its machine's timing lease before timing anyway (contended);
    ``runner``: a ``LocalRunner`` whose options (repeat, threads, checking...) the
    workers use, else other keywords make one.  ``log`` lists, per candidate measured,
    the worker's record of it (host, pid, ``build`` and ``time`` intervals, ``waited``).
    """

    def __init__(self, address: Any, timeout: float = 30.0, build_timeout: float = 60.0,
                 stall_timeout: "float | None" = None, lease_wait: float = 300.0,
                 runner: "LocalRunner | None" = None, **runner_options: Any):
        if runner is not None and not isinstance(runner, LocalRunner):
            raise TuningError(f"DaskRunner: runner= takes a LocalRunner (whose options the "
                              f"workers use), got {type(runner).__name__}")
        if runner is not None and runner_options:
            raise TuningError(f"DaskRunner: give runner= or LocalRunner options "
                              f"({', '.join(sorted(runner_options))}), not both")
        if not (lease_wait >= 0):
            raise TuningError(f"DaskRunner: lease_wait must be seconds >= 0, got {lease_wait!r}")
        self.client = _client(address)
        self._own = not hasattr(address, "submit")
        self.local = runner if runner is not None else \
            LocalRunner(timeout=timeout, **runner_options)
        self.timeout = self.local.timeout
        self.build_timeout = build_timeout
        self.lease_wait = lease_wait
        self.stall_timeout = stall_timeout if stall_timeout is not None else \
            build_timeout + self.timeout + min(self.local.reference_timeout, 300.0) + \
            lease_wait + 60.0
        self._id = uuid.uuid4().hex[:12]
        self.log: list[dict] = []

    @property
    def n_threads(self) -> "int | None":
        """The threads each candidate is timed with (None: all the worker's CPUs)."""
        return self.local.n_threads

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on one worker, under its machine's timing lease (the task scheduler
        measures the workers' memory bandwidth and FLOP peak so, not the client's)."""
        return self.client.submit(leased_call, fn, args, self.lease_wait, pure=False,
                                  retries=0).result()

    def measure_batch(self, inputs: Sequence[MeasureInput], best_cost: float = float("inf"),
                      on_result: "Callable[[int, MeasureResult], None] | None" = None
                      ) -> list[MeasureResult]:
        """Measure ``inputs`` on the cluster; ``on_result(i, result)`` as each arrives."""
        from distributed import wait
        opts = self.local.options()
        batch = uuid.uuid4().hex[:8]
        futures = [self.client.submit(
            measure_isolated, inp.task.payload(), inp.task.args_key, inp.task.sizes,
            str(inp.task.target), inp.trace, inp.config, opts, best_cost, inp.task.name,
            self.build_timeout, self.local.reference_timeout,
            ["tdsl-attempts", self._id, batch, str(i)], self.lease_wait,
            self.local._env, pure=False, retries=0)
            for i, inp in enumerate(inputs)]
        index = {f.key: i for i, f in enumerate(futures)}
        results: list["MeasureResult | None"] = [None] * len(inputs)
        start = last = time.perf_counter()
        pending = set(futures)

        def deliver(i: int, r: MeasureResult) -> None:
            results[i] = r
            if on_result:
                on_result(i, r)
        try:
            while pending:
                left = self.stall_timeout - (time.perf_counter() - last)
                try:
                    done, _ = wait(list(pending), timeout=max(0.1, left),
                                   return_when="FIRST_COMPLETED")
                except TimeoutError:
                    done = set()
                done = {f for f in pending if f.done()} | set(done)
                now = time.perf_counter()
                for f in done:
                    pending.discard(f)
                    deliver(index[f.key], self._outcome(f, now - start))
                if done:
                    last = now
                elif now - last >= self.stall_timeout:
                    for f in pending:
                        f.cancel()
                        deliver(index[f.key], MeasureResult(
                            (), MeasureErrorNo.RUN_TIMEOUT,
                            f"no result from the Dask cluster: nothing came back for "
                            f"{self.stall_timeout:g} s (are any workers left?)", now - start))
                    pending.clear()
        finally:
            for f in pending:
                f.cancel()
            try:
                self.client.set_metadata(["tdsl-attempts", self._id, batch], {})
            except Exception:   # noqa: BLE001 - only bookkeeping
                pass
        return [r for r in results if r is not None]

    def _outcome(self, f: Any, elapsed: float) -> MeasureResult:
        if f.status == "finished":
            try:
                value = f.result()
                if len(value) > 5:
                    self.log.append(value[5])
                return _result(value, elapsed)
            except Exception as e:   # noqa: BLE001 - a result that cannot be read
                return MeasureResult((), MeasureErrorNo.UNKNOWN_ERROR,
                                     f"{type(e).__name__}: {e}", elapsed)
        if f.status == "error":
            exc = f.exception()
            no = MeasureErrorNo.RUN_CRASH if type(exc).__name__ == "KilledWorker" \
                else MeasureErrorNo.RUNTIME_DEVICE
            return MeasureResult((), no, f"{type(exc).__name__}: {exc}"[-2000:], elapsed)
        return MeasureResult((), MeasureErrorNo.RUN_TIMEOUT, f"cancelled ({f.status})", elapsed)

    def close(self) -> None:
        if self._own:
            self.client.close()


def dask_option(client: Any, measure_option: Any = None) -> Any:
    """A ``MeasureOption`` measuring on the Dask cluster ``client`` (a ``distributed.Client``
    or a scheduler address) with the settings of ``measure_option`` (default
    ``measure_option()``): its ``LocalRunner``'s options for timing and checking, its
    ``LocalBuilder``'s timeout for each build -- the same job, measured on the workers."""
    from .measure import LocalBuilder, MeasureOption
    builder = LocalBuilder() if measure_option is None else measure_option.builder
    runner = LocalRunner() if measure_option is None else measure_option.runner
    if hasattr(runner, "measure_batch"):
        raise TuningError(f"client= with a measure_option that already measures remotely "
                          f"({type(runner).__name__}): give one or the other")
    if not isinstance(runner, LocalRunner):
        raise TuningError(f"client=: the measure_option's runner must be a LocalRunner (its "
                          f"options go to the Dask workers), got {type(runner).__name__}")
    if not isinstance(builder, LocalBuilder) or builder.backend != "native":
        kind = type(builder).__name__ + (f"(backend={builder.backend!r})"
                                         if isinstance(builder, LocalBuilder) else "")
        raise TuningError(f"client=: Dask workers build with LLVM; the measure_option's "
                          f"builder must be a native LocalBuilder, got {kind}")
    return MeasureOption(LocalBuilder(n_parallel=1),
                         DaskRunner(client, build_timeout=builder.timeout, runner=runner))
