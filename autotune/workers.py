"""Isolated worker processes with per-job timeouts.

A ``WorkerPool`` keeps ``n`` long-lived processes, each a fresh ``python -c``
talking over two pipes: no OpenMP or LLVM state inherited from the tuner, and
no re-import of the user's ``__main__`` (a script needs no ``__main__`` guard).  Jobs are module-level functions
with picklable arguments.  A job whose process dies (a segfault, ``os.abort``)
or runs past its timeout has its process killed and replaced; the job's outcome
says which (``JobOutcome.CRASHED`` / ``TIMEOUT``), and the pool goes on.
"""
from __future__ import annotations

import enum
import importlib
import os
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait

from tdsl.errors import TuningError
from tdsl.runtime.threads import POOL_SPIN_ENV_VAR
from typing import Any, Callable, Sequence


#: Seconds a new worker process may take to start (import tdsl) before it is an error.
STARTUP_TIMEOUT = 120.0


class JobOutcome(enum.Enum):
    OK = "ok"
    ERROR = "error"        # the function raised; ``value`` is the message
    CRASHED = "crashed"    # the process died
    TIMEOUT = "timeout"    # killed after the timeout


@dataclass
class JobResult:
    outcome: JobOutcome
    value: Any = None
    seconds: float = 0.0


def _serve(conn_in: Any, conn_out: Any) -> None:
    """Worker main loop: run (fn, args) jobs until told to stop."""
    while True:
        try:
            msg = conn_in.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        fn, args = msg
        try:
            try:
                value = fn(*args)
                conn_out.send((True, value))
            except BaseException as e:  # noqa: BLE001 - reported to the parent, which decides
                conn_out.send((False, f"{type(e).__name__}: {e}\n"
                                      f"{traceback.format_exc(limit=6)}"))
        except (BrokenPipeError, EOFError):
            return                        # the parent is gone


def _die_with_parent(parent: int) -> None:
    """End this process when its parent (the tuner, or a Dask worker) dies, so a candidate
    that hangs never outlives it: a thread checks every second (a kernel runs with the
    GIL released, so the check runs while it hangs)."""
    import threading

    def watch() -> None:
        while True:
            if os.getppid() != parent:
                os._exit(1)
            time.sleep(1.0)
    threading.Thread(target=watch, daemon=True, name="tdsl-parent-watch").start()


def child_main(fd_in: int, fd_out: int, parent: int = 0) -> None:
    """Entry point of a worker process (``python -c``): sys.path first, then jobs."""
    if parent:
        _die_with_parent(parent)
    conn_in = Connection(fd_in, writable=False)
    conn_out = Connection(fd_out, readable=False)
    try:
        paths = conn_in.recv()
        sys.path[:0] = [p for p in paths if p not in sys.path]
        importlib.import_module("tdsl.autotune.measure_jobs")   # warm up before the first job
        conn_out.send("ready")
    except (EOFError, OSError):
        return                            # the parent went away while this one started
    _serve(conn_in, conn_out)


def _without_dask_malloc_settings(env: dict) -> dict:
    """``env`` less the glibc malloc settings Dask put there (``distributed.nanny.pre-spawn-
    environ``: ``MALLOC_TRIM_THRESHOLD_=65536``), so candidates are built and timed as a plain
    process runs them.  Dask writes them into the environment of every worker it starts and
    of the process that creates a ``LocalCluster``; with one set, glibc stops raising its mmap
    threshold, so a kernel's large per-call temporary (a packed filter, a padded input) is
    mapped and page-faulted afresh on every call: ResNet-18's 3x3 512 -> 512 conv at 7 x 7
    timed 6.72 ms instead of 3.13, and a tuning job on a cluster (or beside one) chose among
    such inflated figures.  A value the user set otherwise is kept."""
    if "distributed" not in sys.modules:
        return env
    try:
        import dask.config
        pre = dask.config.get("distributed.nanny.pre-spawn-environ", default={}) or {}
    except Exception:          # an old Dask without the setting, or no distributed config
        return env
    for k, v in pre.items():
        if k.startswith("MALLOC_") and env.get(k) == str(v):
            del env[k]
    return env


class _Worker:
    """One worker process, started with ``python -c`` (no re-import of ``__main__``)."""

    def __init__(self, env: "dict[str, str] | None"):
        self.env = env
        self.proc: "subprocess.Popen | None" = None
        self.send_conn: Any = None
        self.conn: Any = None            # receives results; EOF when the process dies
        self.started = 0.0
        self.deadline = 0.0
        self.ready = False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ensure(self) -> None:
        self.spawn()
        self.wait_ready()

    def spawn(self) -> None:
        """Start the process (if not running) without waiting for it to be ready."""
        if self.alive():
            return
        self.close(kill=True)
        r1, w1 = os.pipe()
        r2, w2 = os.pipe()
        env = _without_dask_malloc_settings(dict(os.environ))
        # A job times its calls back to back; between jobs the pool's idle workers need not
        # stay awake (300 ms by default), taking CPU time from the builders of the next batch.
        env.setdefault(POOL_SPIN_ENV_VAR, "5")
        env.update(self.env or {})
        code = f"from tdsl.autotune.workers import child_main; " \
               f"child_main({r1}, {w2}, {os.getpid()})"
        self.proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=(r1, w2), env=env,
                                     stdin=subprocess.DEVNULL)
        os.close(r1)
        os.close(w2)
        self.send_conn = Connection(w1, readable=False)
        self.conn = Connection(r2, writable=False)
        self.send_conn.send(list(sys.path))
        self.ready = False

    def wait_ready(self) -> None:
        if self.ready:
            return
        # wait until the worker has imported tdsl: start-up does not count against a job
        if not self.conn.poll(STARTUP_TIMEOUT) or self._recv_ready() != "ready":
            self.close(kill=True)
            raise TuningError(f"a tuning worker process did not start within {STARTUP_TIMEOUT} s")
        self.ready = True

    def _recv_ready(self) -> Any:
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            return None

    def send(self, msg: Any) -> None:
        self.send_conn.send(msg)

    def close(self, kill: bool = False) -> None:
        if self.proc is not None:
            if not kill and self.alive():
                try:
                    self.send_conn.send(None)
                    self.proc.wait(timeout=2)
                except (OSError, subprocess.TimeoutExpired):
                    pass
            if self.alive():
                self.proc.kill()
            self.proc.wait()
        for c in (self.send_conn, self.conn):
            if c is not None:
                c.close()
        self.proc = None
        self.send_conn = None
        self.conn = None


class WorkerPool:
    """``n`` isolated processes running jobs, each job with a timeout."""

    def __init__(self, n: int = 1, env: "dict[str, str] | None" = None):
        self.workers = [_Worker(env) for _ in range(max(1, n))]

    def start(self) -> None:
        """Start the processes not running, without waiting for them (``map`` waits for
        each before its first job): one started during other work is ready sooner."""
        for w in self.workers:
            w.spawn()

    def map(self, fn: Callable, jobs: Sequence[tuple], timeout: float,
            on_result: "Callable[[int, JobResult], None] | None" = None) -> list[JobResult]:
        """Run ``fn(*job)`` for each job; results in job order (``on_result`` as they finish)."""
        results: list[Any] = [None] * len(jobs)
        pending = list(range(len(jobs)))[::-1]
        busy: dict[int, int] = {}  # worker index -> job index
        for w in self.workers[:len(jobs)]:
            w.spawn()                # start them all at once, then wait for each
        while pending or busy:
            for wi, w in enumerate(self.workers):
                if wi in busy or not pending:
                    continue
                ji = pending.pop()
                w.ensure()
                w.started = time.perf_counter()
                w.deadline = w.started + timeout
                try:
                    w.send((fn, jobs[ji]))
                except (OSError, BrokenPipeError):
                    w.close(kill=True)
                    w.ensure()
                    w.send((fn, jobs[ji]))
                busy[wi] = ji
            now = time.perf_counter()
            wait_for = max(0.0, min(self.workers[wi].deadline for wi in busy) - now) if busy else 0
            handles = [self.workers[wi].conn for wi in busy]
            ready = set(wait(handles, timeout=wait_for + 0.01)) if handles else set()
            now = time.perf_counter()
            for wi in list(busy):
                w = self.workers[wi]
                res: "JobResult | None" = None
                if w.conn in ready:
                    try:
                        ok, value = w.conn.recv()
                        res = JobResult(JobOutcome.OK if ok else JobOutcome.ERROR, value,
                                        now - w.started)
                    except (EOFError, OSError):
                        res = None
                if res is None and (w.conn in ready or not w.alive()):
                    w.proc.wait()
                    code = w.proc.returncode
                    w.close(kill=True)
                    res = JobResult(JobOutcome.CRASHED, f"worker process died (exit code {code})",
                                    now - w.started)
                if res is None and now >= w.deadline:
                    w.close(kill=True)
                    res = JobResult(JobOutcome.TIMEOUT, f"killed after {timeout:g} s", now - w.started)
                if res is not None:
                    ji = busy.pop(wi)
                    results[ji] = res
                    if on_result is not None:
                        on_result(ji, res)
        return results

    def close(self) -> None:
        for w in self.workers:
            w.close()

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except (OSError, ValueError, AttributeError):  # interpreter shutdown
            pass
