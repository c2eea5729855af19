"""How many CPU threads a parallel kernel uses by default, and how long tdsl's idle pool
workers spin (the one place that reads ``TDSL_NUM_THREADS`` and ``TDSL_POOL_SPIN_MS``)."""
from __future__ import annotations

import os
import time

from ..errors import BuildError

ENV_VAR = "TDSL_NUM_THREADS"


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask; ``os.cpu_count()`` elsewhere)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def default_num_threads() -> int:
    """``TDSL_NUM_THREADS`` when set (a positive integer), else every available CPU.

    Read at each call, so changing the variable in a running process takes effect.
    """
    value = os.environ.get(ENV_VAR, "").strip()
    if value:
        try:
            n = int(value)
        except ValueError:
            n = 0
        if n < 1:
            raise BuildError(f"{ENV_VAR}={value!r}: must be a positive integer")
        return n
    return available_cpus()


# ---- the idle policy of tdsl's thread pool ------------------------------------------------------
POOL_SPIN_ENV_VAR = "TDSL_POOL_SPIN_MS"
#: Long enough for callers that pause up to a few hundred ms between calls (a model's
#: layers, a request server) to find the workers awake.
DEFAULT_POOL_SPIN_MS = 300.0


def pool_spin_ms_from_env() -> float:
    """``TDSL_POOL_SPIN_MS`` (milliseconds, >= 0; 0: workers sleep as soon as a short
    ``pause`` spin ends), else ``DEFAULT_POOL_SPIN_MS``."""
    value = os.environ.get(POOL_SPIN_ENV_VAR, "").strip()
    if not value:
        return DEFAULT_POOL_SPIN_MS
    try:
        ms = float(value)
    except ValueError:
        ms = -1.0
    if not ms >= 0.0 or ms == float("inf"):
        raise BuildError(f"{POOL_SPIN_ENV_VAR}={value!r}: must be a number of milliseconds >= 0")
    return ms


def _started_pool():
    """tdsl's native pool if this process has started it, else None (never starts it)."""
    from tdsl.backends.llvm import threadpool
    if not threadpool.native_pool.cache_info().currsize:
        return None
    return threadpool.native_pool()


def pool_spin_ms() -> float:
    """Milliseconds an idle worker of tdsl's thread pool keeps spinning (yielding its CPU
    to any thread that wants it) before it sleeps: ``TDSL_POOL_SPIN_MS``, default 300.

    A call within that time of the previous one finds its workers awake; a later one
    wakes them, and a worker woken from sleep is often placed on its caller's CPU for the
    start of the call (see ``tdsl.backends.llvm.threadpool``)."""
    pool = _started_pool()
    return pool_spin_ms_from_env() if pool is None else pool.spin_ms


def set_pool_spin_ms(ms: float) -> None:
    """Set ``pool_spin_ms()`` for this process (0: workers sleep right after a job, as
    ``OMP_WAIT_POLICY=passive``); workers already spinning see it at once."""
    ms = float(ms)
    if not ms >= 0.0 or ms == float("inf"):
        raise BuildError(f"set_pool_spin_ms({ms!r}): must be a number of milliseconds >= 0")
    from tdsl.backends.llvm import threadpool
    pool = _started_pool() or threadpool.parallel_runtime()
    if pool is not None:
        pool.spin_ms = ms


def rest(seconds: float) -> None:
    """Sleep ``seconds`` with tdsl's idle workers asleep too, not spinning.

    For benchmarks: before another library is timed, tdsl's spinning workers would take
    CPU time from its threads (as OpenBLAS's spinning threads do from tdsl's)."""
    pool = _started_pool()
    if pool is None:
        time.sleep(seconds)
        return
    saved = pool.spin_ms
    pool.spin_ms = 0.0
    try:
        time.sleep(seconds)
    finally:
        pool.spin_ms = saved


# ---- fork safety ------------------------------------------------------------------------------
# GNU libgomp keeps its worker pool across fork() without re-creating it: a child of a
# process that already ran a parallel region hangs in its next one.  The runtime notes
# when native thread pools were used; in such a child, parallel kernels run on one
# thread (correct, but serial) and say so once.
_pool_used = False
_forked_after_pool = False
_warned = False


def note_thread_pool_use() -> None:
    """Record that a native thread pool (OpenMP) ran in this process."""
    global _pool_used
    _pool_used = True


def thread_pool_usable() -> bool:
    """False in a child forked after the parent ran parallel kernels."""
    global _warned
    if _forked_after_pool and not _warned:
        _warned = True
        import warnings
        warnings.warn("tdsl: this process was forked after it ran parallel kernels; the "
                      "OpenMP runtime cannot start threads in the child, so parallel loops "
                      "run on one thread here. Start workers with the 'spawn' or "
                      "'forkserver' method to measure parallel kernels.", RuntimeWarning,
                      stacklevel=3)
    return not _forked_after_pool


def _after_fork_in_child() -> None:
    global _forked_after_pool
    _forked_after_pool = _forked_after_pool or _pool_used


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
