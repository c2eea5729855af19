"""Measuring on a Dask cluster (``distributed`` is an optional dependency).

``DaskRunner("tcp://scheduler:8786")`` sends each candidate of a batch to the
cluster, where a worker builds and times it -- not in the worker's own process
but in an isolated child process (``workers.WorkerPool``, as the local runner
does), kept by a worker plugin (``IsolationPlugin``) and replaced after a crash:

* a candidate that segfaults becomes ``RUN_CRASH`` (``BUILD_CRASH`` when its build
  dies), one that hangs is killed after ``timeout`` and becomes ``RUN_TIMEOUT``;
  the Dask worker lives on and takes the next candidate;
* tasks are submitted with ``retries=0``: Dask never re-runs a candidate that
  failed; one whose *worker* died (killed, out of memory) is re-run by the
  scheduler on another worker, once -- a per-candidate attempt count kept in the
  scheduler's metadata makes a third attempt return ``RUN_CRASH`` at once;
* results are handed to ``on_result`` (the tuner writes the record) as each
  arrives, so a batch that ends on a timeout keeps everything that finished.
  Only when no result at all arrives for ``stall_timeout`` seconds (no worker
  left) are the candidates still out recorded as ``RUN_TIMEOUT``, with a message
  saying so.

Each worker computes a task's reference output once, in its child process under
``reference_timeout`` (never inside a candidate's timeout), and caches it on its
disk.  Run one single-threaded worker process per machine for clean timings (a
worker's candidates are timed one at a time in any case).
"""
from __future__ import annotations

import os
import tempfile
import threading
import time
import uuid
from typing import Any, Callable, Sequence

from tdsl.errors import TuningError

from .measure import (LocalRunner, MeasureErrorNo, MeasureInput, MeasureResult, _build_result,
                      _run_result, bound_notes)
from .workers import JobOutcome, JobResult, WorkerPool

#: Name of the worker plugin holding each Dask worker's isolated process.
PLUGIN_NAME = "tdsl-isolation"
#: Runs of one candidate allowed on workers that died under it (the first and one retry).
MAX_ATTEMPTS = 2


try:      # the plugin must be a WorkerPlugin for Client.register_plugin to send it to workers
    from distributed.diagnostics.plugin import WorkerPlugin as _PluginBase
except ImportError:            # no 'distributed': DaskRunner says so when it is made
    _PluginBase = object       # type: ignore[misc,assignment]


def _client(address: Any) -> Any:
    try:
        from distributed import Client
    except ImportError:
        raise TuningError("measuring on a Dask cluster needs the 'distributed' package "
                          "(pip install tdsl[distributed])") from None
    if hasattr(address, "submit"):
        return address
    return Client(address, timeout=30)


class IsolationPlugin(_PluginBase):  # type: ignore[misc,valid-type]
    """A Dask worker plugin: the worker's isolated process (one ``WorkerPool`` of one
    process, started on first use) and the references made resident there."""

    name = PLUGIN_NAME

    def __init__(self, env: "dict[str, str] | None" = None):
        self.env = env

    def setup(self, worker: Any = None) -> None:
        self.pool: "WorkerPool | None" = None
        self.lock = threading.Lock()        # one candidate at a time per worker
        self.references: dict[tuple, "str | None"] = {}

    def teardown(self, worker: Any = None) -> None:
        if getattr(self, "pool", None) is not None:
            self.pool.close()
            self.pool = None

    def get_pool(self) -> WorkerPool:
        if self.pool is None:
            self.pool = WorkerPool(1, self.env)
        return self.pool


def _plugin() -> IsolationPlugin:
    from distributed import get_worker
    worker = get_worker()
    plugin = worker.plugins.get(PLUGIN_NAME)
    if plugin is None:                        # not registered (called by hand): make one
        plugin = IsolationPlugin()
        plugin.setup(worker)
        worker.plugins[PLUGIN_NAME] = plugin
    return plugin


def _attempt(counter: "list[str] | None") -> int:
    """Which run of this candidate this is (1 first), counted in the scheduler's metadata
    under ``counter``; 1 when it cannot be counted."""
    if not counter:
        return 1
    try:
        from distributed import get_client
        client = get_client()
        n = int(client.get_metadata(counter, 0)) + 1
        client.set_metadata(counter, n)
        return n
    except Exception:   # noqa: BLE001 - counting is best effort; the run goes on
        return 1


def measure_isolated(payload: bytes, key: str, sizes: Any, target: str, trace: str,
                     config: dict, opts: dict, best_cost: float, name: str,
                     build_timeout: float, reference_timeout: float,
                     counter: "list[str] | None" = None) -> tuple:
    """On a Dask worker: build and time one candidate in the worker's isolated process.

    Returns ``(stage, outcome, value, seconds)``: ``stage`` is ``"build"`` (the build
    failed: ``value`` as ``measure_jobs.build_job`` or the failure), ``"run"`` (as
    ``run_job``; then a fifth item, the build's LLVM remarks) or ``"lost"`` (its workers
    died ``MAX_ATTEMPTS`` times)."""
    from . import measure_jobs
    attempt = _attempt(counter)
    if attempt > MAX_ATTEMPTS:
        return ("lost", JobOutcome.CRASHED.value,
                f"the Dask workers running this candidate died {attempt - 1} times", 0.0)
    plugin = _plugin()
    with plugin.lock:
        pool = plugin.get_pool()
        with tempfile.TemporaryDirectory(prefix="tdsl-remote-") as d:
            b = pool.map(measure_jobs.build_job,
                         [(payload, key, trace, target, os.path.join(d, "k.so"), name)],
                         build_timeout)[0]
            if b.outcome is not JobOutcome.OK or b.value[1] is not None:
                return ("build", b.outcome.value, b.value, b.seconds)
            artifact = b.value[0]
            opts = dict(opts)
            if opts.get("check"):
                opts["ref_path"] = _reference(plugin, pool, payload, key, sizes, target, name,
                                              opts.get("seed", 0), reference_timeout)
                opts["check"] = opts["ref_path"] is not None
            r = pool.map(measure_jobs.run_job,
                         [(payload, key, sizes, target, artifact, trace, config, opts, best_cost,
                           None, name)], opts.get("timeout", 10.0))[0]
            return ("run", r.outcome.value, r.value, r.seconds + b.seconds, b.value[3])


def _reference(plugin: IsolationPlugin, pool: WorkerPool, payload: bytes, key: str, sizes: Any,
               target: str, name: str, seed: int, timeout: float) -> "str | None":
    """The task's reference outputs, computed (or loaded) once per worker in its isolated
    process and cached on disk; their path, or None when that failed (then unchecked)."""
    from . import measure_jobs
    if (key, target, seed) in plugin.references:
        return plugin.references[(key, target, seed)]
    folder = os.environ.get("TDSL_REFERENCE_DIR") or \
        os.path.join(tempfile.gettempdir(), f"tdsl-reference-{os.getuid()}")
    path = os.path.join(folder, measure_jobs.reference_key(key, target, seed) + ".npz")
    r = pool.map(measure_jobs.reference_job,
                 [(payload, key, sizes, target, name, seed, path, None)], timeout)[0]
    plugin.references[(key, target, seed)] = path if r.outcome is JobOutcome.OK else None
    return plugin.references[(key, target, seed)]


def _result(value: tuple, elapsed: float) -> MeasureResult:
    """A worker's answer as a ``MeasureResult``."""
    stage, outcome, payload, seconds = value[:4]
    notes = bound_notes(value[4]) if len(value) > 4 else ()
    job = JobResult(JobOutcome(outcome), payload, seconds)
    if stage == "build":
        b = _build_result(job)
        if b.error_no is MeasureErrorNo.NO_ERROR:      # built, but no library came back
            return MeasureResult((), MeasureErrorNo.COMPILE_HOST, "no library was exported",
                                 b.seconds)
        return MeasureResult((), b.error_no, b.error_msg, b.seconds)
    if stage == "lost":
        return MeasureResult((), MeasureErrorNo.RUN_CRASH, str(payload), elapsed)
    return _run_result(job, 0.0, notes)


class DaskRunner:
    """Builds and runs candidates on the workers of a Dask scheduler (or Client).

    ``timeout``: seconds to time one candidate (as ``LocalRunner``'s);
    ``build_timeout``: seconds to build one; ``stall_timeout``: seconds without any
    result from the cluster after which the candidates still out are given up
    (default: enough for a build, a reference and a run); other keywords go to the
    ``LocalRunner`` whose options the workers use.
    """

    def __init__(self, address: Any, timeout: float = 30.0, build_timeout: float = 60.0,
                 stall_timeout: "float | None" = None, **runner_options: Any):
        self.client = _client(address)
        self._own = not hasattr(address, "submit")
        self.timeout = timeout
        self.build_timeout = build_timeout
        self.local = LocalRunner(timeout=timeout, **runner_options)
        self.stall_timeout = stall_timeout if stall_timeout is not None else \
            build_timeout + timeout + min(self.local.reference_timeout, 300.0) + 60.0
        self._id = uuid.uuid4().hex[:12]
        self.client.register_plugin(IsolationPlugin(self.local._env), name=PLUGIN_NAME)

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
            ["tdsl-attempts", self._id, batch, str(i)], pure=False, retries=0)
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

    @staticmethod
    def _outcome(f: Any, elapsed: float) -> MeasureResult:
        if f.status == "finished":
            try:
                return _result(f.result(), elapsed)
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
