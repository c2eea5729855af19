"""tdsl's own thread pool for the parallel loops of JIT-compiled CPU kernels.

A kernel runs a parallel loop by calling ``GOMP_parallel(launch, closure, nthreads, 0)``;
in this process that symbol is bound to ``ThreadPool.parallel`` (see ``gomp_parallel_address``).
``launch(closure)`` claims chunks of iterations from an atomic counter in the closure until
none is left (backends/llvm/parallel.py), so any number of threads may run it, at any time.

Why not libgomp's fork-join: ``GOMP_parallel`` returns only when every thread of the team
has run, so one worker that is asleep (after an idle gap: its spin budget is spent) or
waiting for a CPU (on a loaded machine) delays the whole call by its wake-up -- measured at
milliseconds to tens of milliseconds for a 2-thread kernel on a busy 2-CPU machine, whatever
the work.  Here the caller starts on the chunks at once; workers that wake in time take
chunks too; the call returns as soon as the chunks are done and no worker holds the job.  A
worker that wakes late finds the job withdrawn and goes back to sleep, so the call never
waits for a thread to be scheduled.

The pool is per process (threads are a process resource) and is rebuilt in a child after
``fork``.  A second caller that finds the pool busy runs its loop on its own thread.
Exported libraries (``export_library``) link libgomp instead; the same code runs there.
"""
from __future__ import annotations

import ctypes
import functools
import os
import threading
from typing import Any

#: The C signature of GOMP_parallel: (void (*fn)(void *), void *data, unsigned n, unsigned flags).
_PARALLEL_T = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint)
_LAUNCH_T = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

#: ``TDSL_PARALLEL_RUNTIME=gomp`` links kernels against libgomp's fork-join instead.
ENV_VAR = "TDSL_PARALLEL_RUNTIME"


@functools.lru_cache(maxsize=4096)
def _launcher(address: int) -> Any:
    return _LAUNCH_T(address)


class _Job:
    __slots__ = ("fn", "data", "want", "taken")

    def __init__(self, fn: Any, data: int, want: int):
        self.fn, self.data, self.want, self.taken = fn, data, want, 0


class ThreadPool:
    """Workers sleep on a condition; ``parallel`` posts one job at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._done = threading.Condition(self._lock)
        self._job: "_Job | None" = None
        self._holders = 0           # workers running the current job
        self._workers = 0

    def _grow(self, n: int) -> None:
        while self._workers < n:
            t = threading.Thread(target=self._worker, name=f"tdsl-pool-{self._workers}",
                                 daemon=True)
            self._workers += 1
            t.start()

    def _worker(self) -> None:
        last: "_Job | None" = None
        while True:
            with self._lock:
                while (self._job is None or self._job is last
                       or self._job.taken >= self._job.want):
                    self._work.wait()
                job = last = self._job
                job.taken += 1
                self._holders += 1
            try:
                job.fn(job.data)
            finally:
                with self._lock:
                    self._holders -= 1
                    if self._holders == 0:
                        self._done.notify_all()

    def parallel(self, launch: int, data: int, nthreads: int, flags: int = 0) -> None:
        """Run ``launch(data)`` on up to ``nthreads`` threads (0: the default count), the
        caller included; return when the work is done."""
        fn = _launcher(launch)
        if not nthreads:
            from .threads import default_num_threads
            nthreads = default_num_threads()
        helpers = nthreads - 1
        if helpers > 0:
            with self._lock:
                if self._job is not None:        # busy with another caller: run alone
                    helpers = 0
                else:
                    self._grow(helpers)
                    self._job = _Job(fn, data, helpers)
                    self._work.notify(helpers)
        fn(data)
        if helpers > 0:
            with self._lock:
                self._job = None                 # late workers find nothing to take
                while self._holders:
                    self._done.wait()


_pool = ThreadPool()


def _callback(fn: int, data: int, nthreads: int, flags: int) -> None:
    _pool.parallel(fn, data, nthreads, flags)


_c_callback = _PARALLEL_T(_callback)


def gomp_parallel_address() -> "int | None":
    """The address kernels' ``GOMP_parallel`` binds to in this process: the tdsl pool, or
    None to use libgomp's (``TDSL_PARALLEL_RUNTIME=gomp``)."""
    if os.environ.get(ENV_VAR, "").strip().lower() == "gomp":
        return None
    return ctypes.cast(_c_callback, ctypes.c_void_p).value


def _reset_in_child() -> None:
    global _pool
    _pool = ThreadPool()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_in_child)
