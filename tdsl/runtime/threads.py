"""How many CPU threads a parallel kernel uses by default (the one place that reads
``TDSL_NUM_THREADS``)."""
from __future__ import annotations

import os

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
