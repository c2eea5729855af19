"""A Dask worker's side of measuring: ``distributed.DaskRunner`` sends each candidate here.

Each Dask worker keeps, in a worker plugin (``IsolationPlugin``), two isolated processes
(``workers.WorkerPool``s of one process each, started on first use and replaced after a
crash): one builds candidates, the other computes references and times.  A candidate
(``measure_isolated``) goes through two stages on its worker:

1. build: holding the worker's build process (``build_lock``) -- and the Dask thread that
   runs it -- it is replayed, compiled and exported to a library in a folder of its own;
2. time: it secedes from the worker's thread pool (``distributed.secede``), takes the
   worker's timing process (``time_lock``) and only then hands the build process on; it
   waits there for the machine's timing lease (``lease.HostLease``) and is timed.

So while a candidate waits for the lease, or is timed, the worker's Dask thread and build
process are free and its next candidate builds; the one after that waits for the build
process holding the Dask thread, so a worker has at most one candidate built ahead of the
one it times, and the scheduler sends it no more meanwhile (a worker with a free thread
takes the next).  The lease discipline is unchanged: one timing per machine (first
come first served, so a worker with a candidate built ahead does not keep it), a process
that dies drops its lock, and a hung candidate is killed after its timeout.  As before,
builds are not excluded from a timing: a worker's own build may now run beside it, as
another worker's could (a one-worker cluster's timings share the CPUs with one build).

A worker that dies (killed, out of memory) takes its candidates with it; the scheduler
re-runs them elsewhere.  Only the candidate that was being *timed* is charged for the
death (``"stage": "time"`` in the scheduler's metadata under the candidate's counter):
one charged ``MAX_ATTEMPTS`` times comes back ``"lost"`` at once, while the candidates that
were building or waiting in line beside it are re-run without a charge (Dask's own
``allowed_failures`` still ends one on which every worker dies).
"""
from __future__ import annotations

import collections
import os
import socket
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from . import measure_jobs
from .lease import HostLease, host_lease_path
from .measure import cpu_threads
from .workers import JobOutcome, JobResult, WorkerPool

#: Name of the worker plugin holding each Dask worker's isolated processes.
PLUGIN_NAME = "tdsl-isolation"
#: Runs of one candidate allowed on workers that died while timing it (the first and one
#: retry).
MAX_ATTEMPTS = 2
#: Stage events a worker keeps (``worker_events``): a bounded, recent history.
MAX_EVENTS = 256


try:      # a WorkerPlugin: the worker tears it down (its processes closed) when it closes
    from distributed.diagnostics.plugin import WorkerPlugin as _PluginBase
except ImportError:            # no 'distributed': DaskRunner says so when it is made
    _PluginBase = object       # type: ignore[misc,assignment]


class IsolationPlugin(_PluginBase):  # type: ignore[misc,valid-type]
    """A Dask worker plugin: the worker's build and timing processes (each a ``WorkerPool``
    of one process, started on first use), a lock for each, the references made resident
    in the timing process and ``events``, the recent ``(epoch, event, candidate)`` of its
    candidates (``"built"``, ``"leased"``, ``"timed"``)."""

    name = PLUGIN_NAME

    def __init__(self, env: "dict[str, str] | None" = None):
        self.env = env

    def setup(self, worker: Any = None) -> None:
        self.builder: "WorkerPool | None" = None
        self.timer: "WorkerPool | None" = None
        self.build_lock = threading.Lock()     # one candidate builds at a time per worker
        self.time_lock = threading.Lock()      # one candidate uses the timing process
        self.references: dict[tuple, "str | None"] = {}
        self.events: "collections.deque[tuple[float, str, str]]" = \
            collections.deque(maxlen=MAX_EVENTS)

    def teardown(self, worker: Any = None) -> None:
        for role in ("builder", "timer"):
            pool = getattr(self, role, None)
            if pool is not None:
                pool.close()
                setattr(self, role, None)

    def build_pool(self) -> WorkerPool:
        """The build process (call holding ``build_lock``)."""
        if self.builder is None:
            self.builder = WorkerPool(1, self.env)
        return self.builder

    def time_pool(self) -> WorkerPool:
        """The timing process (call holding ``time_lock``)."""
        if self.timer is None:
            self.timer = WorkerPool(1, self.env)
        return self.timer

    def warm_timer(self) -> None:
        """Start the timing process if it is not running and no candidate holds it, without
        waiting: its start-up (importing tdsl) overlaps a build instead of following it."""
        if self.time_lock.acquire(blocking=False):
            try:
                self.time_pool().start()
            finally:
                self.time_lock.release()

    def note(self, event: str, tag: str) -> None:
        self.events.append((time.time(), event, tag))


def plugin_name(env: "dict[str, str] | None") -> str:
    """The name of the plugin keeping the isolated processes made with ``env``."""
    if not env:
        return PLUGIN_NAME
    return PLUGIN_NAME + ":" + ",".join(f"{k}={v}" for k, v in sorted(env.items()))


#: guards making a worker's plugin (a worker runs tasks in several threads)
_MAKING = threading.Lock()


def _plugin(env: "dict[str, str] | None" = None) -> IsolationPlugin:
    """This worker's plugin for ``env``, made on first use.  Not registered from the
    client: ``Client.register_plugin`` replaces a plugin of the same name, tearing down its
    processes under the candidate they measure (a second runner on one client did so)."""
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


def worker_events(dask_worker: Any = None) -> list[tuple[float, str, str]]:
    """On a worker (``client.run(worker_events)``, which passes ``dask_worker``): the recent
    stage events of its candidates, all plugins together, oldest first."""
    if dask_worker is None:
        from distributed import get_worker
        dask_worker = get_worker()
    plugins = [p for name, p in list(dask_worker.plugins.items())
               if name.startswith(PLUGIN_NAME) and isinstance(p, IsolationPlugin)]
    return sorted(e for p in plugins for e in list(p.events))


def _deaths(counter: "list[str] | None") -> int:
    """How many workers died while timing this candidate (counted in the scheduler's
    metadata under ``counter``, see the module docstring); 0 when it cannot be counted."""
    if not counter:
        return 0
    try:
        from distributed import get_client
        client = get_client()
        mark = client.get_metadata(counter, None)
        if not isinstance(mark, dict):
            return 0
        died = int(mark.get("died", 0)) + (mark.get("stage") == "time")
        if mark.get("stage") != "wait":
            client.set_metadata(counter, {"died": died, "stage": "wait"})
        return died
    except Exception:   # noqa: BLE001 - counting is best effort; the run goes on
        return 0


def _mark(counter: "list[str] | None", died: int, stage: str) -> None:
    """Say in the scheduler's metadata which stage this candidate is at: a worker that
    dies during ``"time"`` is charged to it (``_deaths``); one that dies after (``"timed"``:
    its result not yet fetched, so Dask runs it again) is not."""
    if not counter:
        return
    try:
        from distributed import get_client
        get_client().set_metadata(counter, {"died": died, "stage": stage})
    except Exception:   # noqa: BLE001 - counting is best effort; the run goes on
        pass


def _secede() -> None:
    """Leave the Dask worker's thread pool, so the worker runs its next task meanwhile."""
    from distributed import secede
    try:
        secede()
    except (ValueError, AttributeError):    # not in a worker's task thread: nothing to free
        pass


def measure_isolated(payload: bytes, key: str, sizes: Any, target: str, trace: str,
                     config: dict, opts: dict, best_cost: float, name: str,
                     build_timeout: float, reference_timeout: float,
                     counter: "list[str] | None" = None, lease_wait: float = 300.0,
                     env: "dict[str, str] | None" = None) -> tuple:
    """On a Dask worker: build one candidate in the worker's build process, then time it in
    its timing process holding the machine's ``HostLease`` (waiting up to ``lease_wait``
    seconds), the next candidate building meanwhile (module docstring); ``env``: the
    isolated processes' environment (``LocalRunner``'s threads).

    Returns ``(stage, outcome, value, seconds, remarks, log)``: ``stage`` is ``"build"``
    (the build failed: ``value`` as ``measure_jobs.build_job`` or the failure), ``"run"``
    (as ``run_job``) or ``"lost"`` (workers died timing it ``MAX_ATTEMPTS`` times);
    ``remarks`` the build's LLVM remarks; ``log`` where and when it was built and timed
    (``_log``)."""
    log = _log()
    died = _deaths(counter)
    if died >= MAX_ATTEMPTS:
        return ("lost", JobOutcome.CRASHED.value,
                f"the Dask workers timing this candidate died {died} times", 0.0, [], log)
    plugin = _plugin(env)
    cand = _Candidate(payload, key, sizes, target, trace, config, name,
                      "/".join(counter[-2:]) if counter else f"{os.getpid()}:{time.time()}")
    with tempfile.TemporaryDirectory(prefix="tdsl-remote-") as d:
        with plugin.build_lock:
            plugin.warm_timer()
            log["build"] = [time.time(), 0.0]
            b = plugin.build_pool().map(
                measure_jobs.build_job,
                [(payload, key, trace, target, os.path.join(d, "k.so"), name)],
                build_timeout)[0]
            log["build"][1] = time.time()
            plugin.note("built", cand.tag)
            if b.outcome in (JobOutcome.CRASHED, JobOutcome.TIMEOUT):
                plugin.build_pool().start()     # its replacement starts up meanwhile
            if b.outcome is not JobOutcome.OK or b.value[1] is not None:
                return ("build", b.outcome.value, b.value, b.seconds, [], log)
            _secede()
            plugin.time_lock.acquire()      # before the build process is handed on
        try:
            log["queued"] = time.time() - log["build"][1]
            opts = dict(opts)
            if opts.get("check"):
                opts["ref_path"] = _reference(plugin, cand, opts.get("seed", 0),
                                              reference_timeout)
                opts["check"] = opts["ref_path"] is not None
            r = _time(plugin, cand, log, b.value[0], opts, best_cost, lease_wait,
                      counter, died)
        finally:
            plugin.time_lock.release()
        return ("run", r.outcome.value, r.value, r.seconds + b.seconds, b.value[3], log)


@dataclass(frozen=True)
class _Candidate:
    """What a worker knows of the candidate it measures; ``tag`` names it in events."""

    payload: bytes
    key: str
    sizes: Any
    target: str
    trace: str
    config: dict
    name: str
    tag: str


def _time(plugin: IsolationPlugin, cand: _Candidate, log: dict, artifact: "str | None",
          opts: dict, best_cost: float, lease_wait: float, counter: "list[str] | None",
          died: int) -> JobResult:
    """Time the built candidate ``cand`` (its library ``artifact``) in the worker's timing
    process (held by the caller) under the machine's lease; its stages go to ``log``."""
    lease = HostLease()
    asked = time.time()
    got = lease.acquire(lease_wait)
    log["time"] = [time.time(), 0.0]
    log["waited"] = log["time"][0] - asked
    log["threads"] = _threads(cand.target, plugin.env)
    log["contended"] = not got
    try:
        plugin.note("leased", cand.tag)
        _mark(counter, died, "time")
        r = plugin.time_pool().map(
            measure_jobs.run_job,
            [(cand.payload, cand.key, cand.sizes, cand.target, artifact, cand.trace,
              cand.config, opts, best_cost, None, cand.name)], opts.get("timeout", 10.0))[0]
    finally:
        log["time"][1] = time.time()
        lease.release()
    if r.outcome in (JobOutcome.CRASHED, JobOutcome.TIMEOUT):
        plugin.time_pool().start()              # its replacement starts up meanwhile
    plugin.note("timed", cand.tag)
    _mark(counter, died, "timed")
    return r


def leased_call(fn: Callable[..., Any], args: tuple, lease_wait: float) -> Any:
    """On a worker: ``fn(*args)`` holding the machine's timing lease (``DaskRunner.call``)."""
    lease = HostLease()
    lease.acquire(lease_wait)
    try:
        return fn(*args)
    finally:
        lease.release()


def _threads(target: str, env: "dict[str, str] | None") -> int:
    """The CPU threads a candidate of ``target`` runs with in this worker's timing
    process (its environment is this process's plus ``env``)."""
    from tdsl.runtime.threads import default_num_threads
    named = (env or {}).get("TDSL_NUM_THREADS", "")
    return cpu_threads(target, int(named) if named.strip().isdigit() else default_num_threads())


def _log() -> dict:
    """A candidate's log on a worker: its host and worker process; ``build`` and ``time``
    (epoch seconds ``[start, end]``), ``queued`` (seconds from built to holding the
    worker's timing process), ``waited`` (seconds for the lease), ``threads`` (the CPU
    threads it ran with) and ``contended`` (timed without the lease) are added as they
    happen."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "lease": host_lease_path()}


def _reference(plugin: IsolationPlugin, cand: _Candidate, seed: int, timeout: float
               ) -> "str | None":
    """The task's reference outputs, computed (or loaded) once per worker in its timing
    process (held by the caller) and cached on disk; their path, or None when that failed
    (then unchecked)."""
    key, target = cand.key, cand.target
    if (key, target, seed) in plugin.references:
        return plugin.references[(key, target, seed)]
    folder = os.environ.get("TDSL_REFERENCE_DIR") or \
        os.path.join(tempfile.gettempdir(), f"tdsl-reference-{os.getuid()}")
    path = os.path.join(folder, measure_jobs.reference_key(key, target, seed) + ".npz")
    r = plugin.time_pool().map(
        measure_jobs.reference_job,
        [(cand.payload, key, cand.sizes, target, cand.name, seed, path, None)], timeout)[0]
    plugin.references[(key, target, seed)] = path if r.outcome is JobOutcome.OK else None
    return plugin.references[(key, target, seed)]
