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

Builds spread over the workers; timings take turns on each machine.  A worker
builds its candidate without waiting for anyone (compiling is the expensive part on
a CPU), then times it holding its machine's timing lease (``HostLease``: an exclusive
``flock`` on a file in the machine's temp folder, so the workers of one machine --
a ``LocalCluster``'s, or several ``dask worker`` processes -- never time at once,
while one worker's timing may overlap another's build).  The operating system drops
the lock of a process that dies, and a hung candidate is killed after ``timeout``,
so a lease is never held for longer than one timing.  A candidate that could not
have the lease within ``lease_wait`` seconds is timed anyway, its result noted
``contended``.

Each worker computes a task's reference output once, in its child process under
``reference_timeout`` (never inside a candidate's timeout), and caches it on its
disk.  ``DaskRunner.log`` keeps, per candidate, where and when it was built and timed.
"""
from __future__ import annotations

import fcntl
import os
import socket
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


try:      # a WorkerPlugin: the worker tears it down (its process closed) when it closes
    from distributed.diagnostics.plugin import WorkerPlugin as _PluginBase
except ImportError:            # no 'distributed': DaskRunner says so when it is made
    _PluginBase = object       # type: ignore[misc,assignment]


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


def host_lease_path() -> str:
    """The file whose lock is this machine's timing lease for Dask workers
    (``$TDSL_TIMING_LOCK``, else ``tdsl-timing-<uid>.lock`` in the temp folder)."""
    return os.environ.get("TDSL_TIMING_LOCK") or \
        os.path.join(tempfile.gettempdir(), f"tdsl-timing-{os.getuid()}.lock")


class HostLease:
    """One machine's timing lease: an exclusive ``flock`` on ``path`` (see the module
    docstring).  ``acquire(wait)`` tries every ``poll`` seconds for ``wait`` seconds and
    says whether it got it; each acquisition opens the file anew, so two threads of one
    process exclude each other as two processes do."""

    def __init__(self, path: "str | None" = None, poll: float = 0.02):
        self.path = path or host_lease_path()
        self.poll = poll
        self._fd: "int | None" = None

    def acquire(self, wait: float) -> bool:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + wait
        delay = self.poll
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._fd = fd
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    return False
                time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
                delay = min(delay * 1.5, 0.25)

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


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


def plugin_name(env: "dict[str, str] | None") -> str:
    """The name of the plugin keeping the isolated process made with ``env``."""
    if not env:
        return PLUGIN_NAME
    return PLUGIN_NAME + ":" + ",".join(f"{k}={v}" for k, v in sorted(env.items()))


#: guards making a worker's plugin (a worker may run tasks in several threads)
_MAKING = threading.Lock()


def _plugin(env: "dict[str, str] | None" = None) -> IsolationPlugin:
    """This worker's plugin for ``env``, made on first use.  Not registered from the
    client: ``Client.register_plugin`` replaces a plugin of the same name, tearing down its
    process under the candidate it is measuring (a second runner on one client did so)."""
    from distributed import get_worker
    worker = get_worker()
    name = plugin_name(env)
    with _MAKING:
        plugin = worker.plugins.get(name)
        if plugin is None:
            plugin = IsolationPlugin(env)
            plugin.setup(worker)
            worker.plugins[name] = plugin
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
                     counter: "list[str] | None" = None, lease_wait: float = 300.0,
                     env: "dict[str, str] | None" = None) -> tuple:
    """On a Dask worker: build one candidate in the worker's isolated process, then time it
    there holding the machine's ``HostLease`` (waiting up to ``lease_wait`` seconds);
    ``env``: the isolated process's environment (``LocalRunner``'s threads).

    Returns ``(stage, outcome, value, seconds, remarks, log)``: ``stage`` is ``"build"``
    (the build failed: ``value`` as ``measure_jobs.build_job`` or the failure), ``"run"``
    (as ``run_job``) or ``"lost"`` (its workers died ``MAX_ATTEMPTS`` times); ``remarks``
    the build's LLVM remarks; ``log`` where and when it was built and timed (``_log``)."""
    from . import measure_jobs
    log = _log()
    attempt = _attempt(counter)
    if attempt > MAX_ATTEMPTS:
        return ("lost", JobOutcome.CRASHED.value,
                f"the Dask workers running this candidate died {attempt - 1} times", 0.0, [],
                log)
    plugin = _plugin(env)
    with plugin.lock:
        pool = plugin.get_pool()
        with tempfile.TemporaryDirectory(prefix="tdsl-remote-") as d:
            log["build"] = [time.time(), 0.0]
            b = pool.map(measure_jobs.build_job,
                         [(payload, key, trace, target, os.path.join(d, "k.so"), name)],
                         build_timeout)[0]
            log["build"][1] = time.time()
            if b.outcome is not JobOutcome.OK or b.value[1] is not None:
                return ("build", b.outcome.value, b.value, b.seconds, [], log)
            artifact = b.value[0]
            opts = dict(opts)
            if opts.get("check"):
                opts["ref_path"] = _reference(plugin, pool, payload, key, sizes, target, name,
                                              opts.get("seed", 0), reference_timeout)
                opts["check"] = opts["ref_path"] is not None
            lease = HostLease()
            asked = time.time()
            got = lease.acquire(lease_wait)
            log["time"] = [time.time(), 0.0]
            log["waited"] = log["time"][0] - asked
            log["threads"] = _threads(target, env)
            log["contended"] = not got
            try:
                r = pool.map(measure_jobs.run_job,
                             [(payload, key, sizes, target, artifact, trace, config, opts,
                               best_cost, None, name)], opts.get("timeout", 10.0))[0]
            finally:
                log["time"][1] = time.time()
                lease.release()
            return ("run", r.outcome.value, r.value, r.seconds + b.seconds, b.value[3], log)


def _leased_call(fn: Callable[..., Any], args: tuple, lease_wait: float) -> Any:
    """On a worker: ``fn(*args)`` holding the machine's timing lease (``DaskRunner.call``)."""
    lease = HostLease()
    lease.acquire(lease_wait)
    try:
        return fn(*args)
    finally:
        lease.release()


def _threads(target: str, env: "dict[str, str] | None") -> int:
    """The CPU threads a candidate of ``target`` runs with in this worker's isolated
    process (its environment is this process's plus ``env``)."""
    from tdsl.runtime.threads import default_num_threads
    from .measure import cpu_threads
    named = (env or {}).get("TDSL_NUM_THREADS", "")
    return cpu_threads(target, int(named) if named.strip().isdigit() else default_num_threads())


def _log() -> dict:
    """A candidate's log on a worker: its host and worker process; ``build`` and ``time``
    (epoch seconds ``[start, end]``), ``waited`` (seconds for the lease), ``threads`` (the
    CPU threads it ran with) and ``contended`` (timed without the lease) are added as they
    happen."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "lease": host_lease_path()}


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
        return self.client.submit(_leased_call, fn, args, self.lease_wait, pure=False,
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
