"""The backend-neutral base class of compiled kernels, and TVM-style timing."""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import ArgumentError, BuildError
from ..expr import Var
from ..keywords import check_keywords
from ..stmt import PrimFunc
from .args import ArgChecker, written_params


@dataclass(frozen=True)
class ProfileResult:
    """What a time evaluator returns: seconds per run, one figure per repeat
    (TVM's ``ProfileResult``)."""

    mean: float
    results: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.results)

    @property
    def min(self) -> float:
        return min(self.results)

    @property
    def max(self) -> float:
        return max(self.results)

    @property
    def std(self) -> float:
        return statistics.pstdev(self.results) if len(self.results) > 1 else 0.0

    def __str__(self) -> str:
        return (f"ProfileResult(mean={self.mean * 1e3:.4f} ms, median={self.median * 1e3:.4f} ms,"
                f" runs={len(self.results)})")


#: The clocks a time evaluator may read, by name.  "wall" (``time.perf_counter``) counts
#: whatever else the machine does meanwhile; "thread" (``time.thread_time``: the CPU time of
#: the calling thread) counts only this thread's work, so a kernel run on the calling thread
#: alone (one thread) is timed the same on a busy machine as on an idle one (preemptions
#: do not count).  A kernel whose work runs on other threads (a pool, a GPU) must use "wall".
CLOCKS: "dict[str, Callable[[], float]]" = {"wall": time.perf_counter,
                                             "thread": time.thread_time}

#: At most this many copies of the arguments are rotated by ``rotate_bytes``.
MAX_ROTATED_COPIES = 64


def timing_clock(name: str) -> Callable[[], float]:
    """The clock called ``name`` in ``CLOCKS``."""
    if name not in CLOCKS:
        raise ArgumentError(f"time_evaluator: unknown clock {name!r}; known: "
                            f"{', '.join(CLOCKS)}")
    return CLOCKS[name]


def rotated_copies(nbytes: int, rotate_bytes: int) -> int:
    """How many copies of arguments of ``nbytes`` in all make consecutive runs touch
    ``rotate_bytes`` distinct bytes (1: no rotation; at most ``MAX_ROTATED_COPIES``)."""
    if rotate_bytes <= 0:
        return 1
    return max(1, min(MAX_ROTATED_COPIES, -(-rotate_bytes // max(1, nbytes))))


def measure(run: Callable[[], None], number: int = 1, repeat: int = 1,
            min_repeat_ms: float = 0, sync: Callable[[], None] = lambda: None,
            clock: Callable[[], float] = time.perf_counter) -> ProfileResult:
    """Time ``run`` with TVM's semantics.

    One warm-up call, then ``repeat`` measurements; each calls ``run`` ``number``
    times back to back.  While one measurement takes less than ``min_repeat_ms``,
    ``number`` grows (to ``max(min_repeat_ms / per_run + 1, number * 1.618)``) and
    the measurement is redone.  Each result is the time of one run, in seconds.
    ``clock`` (seconds) is a parameter so that tests can check this logic with their own.
    """
    if number < 1 or repeat < 1:
        raise BuildError(f"time_evaluator: number and repeat must be >= 1, got "
                         f"number={number}, repeat={repeat}")
    run()
    sync()
    results = []
    for _ in range(repeat):
        duration_ms = 0.0
        while True:
            if duration_ms > 0.0:
                number = int(max(min_repeat_ms / (duration_ms / number) + 1, number * 1.618))
            t0 = clock()
            for _ in range(number):
                run()
            sync()
            duration_ms = (clock() - t0) * 1e3
            if duration_ms >= min_repeat_ms:
                break
            if duration_ms == 0.0:
                duration_ms = 1e-6
        results.append(duration_ms / 1e3 / number)
    return ProfileResult(math.fsum(results) / len(results), tuple(results))


class Module:
    """A compiled kernel: call it on arrays; inspect, time and export it.

    Subclasses implement ``_launcher`` (native call on checked arguments),
    ``get_source`` and ``export_library``.  ``func`` is the PrimFunc the module
    was built from (for a loaded library, a stub with the same parameters).
    """

    type_key = "module"

    def __init__(self, func: PrimFunc, entry_name: str):
        self.func = func
        self.entry_name = entry_name
        self._written = written_params(func)
        self._checker = ArgChecker(func, self._written)

    # ---- calling ---------------------------------------------------------------------
    def bind(self, arrays: Sequence[Any]
             ) -> tuple[list[np.ndarray], dict[Var, int], list[int]]:
        """Check and convert the arguments (see ``tdsl.runtime.args.bind_arguments``);
        also returns the data pointers."""
        return self._checker.check(arrays)

    def __call__(self, *arrays: Any) -> Any:
        """Run on every argument (inputs and outputs, in order); or, given the inputs only,
        allocate the outputs (NumPy arrays), run, and return them (a tuple if several)."""
        if self._written and len(arrays) == len(self.func.params) - len(self._written):
            from tdsl.integrations.numpy import call
            return call(self, *arrays)
        self._launcher(*self.bind(arrays))()
        return None

    def _launcher(self, arrays: list[np.ndarray], sizes: dict[Var, int],
                  pointers: list[int]) -> Callable[[], None]:
        """A no-argument function running the kernel once on already checked arguments
        (``pointers`` are the arrays' data addresses)."""
        raise NotImplementedError

    def sync(self) -> None:
        """Wait for the device to finish (nothing to wait for on the CPU)."""

    def get_function(self, name: str) -> "Module":
        if name != self.entry_name:
            raise BuildError(f"module has no function '{name}' (its entry is "
                             f"'{self.entry_name}')")
        return self

    __getitem__ = get_function

    # ---- inspection and export --------------------------------------------------------
    def get_source(self, fmt: str = "") -> str:
        raise NotImplementedError

    def export_library(self, path: str) -> None:
        raise NotImplementedError

    # ---- timing -------------------------------------------------------------------------
    @check_keywords
    def time_evaluator(self, func_name: "str | None" = None, dev: Any = None, number: int = 1,
                       repeat: int = 1, min_repeat_ms: float = 0, clock: str = "wall",
                       rotate_bytes: int = 0) -> Callable[..., ProfileResult]:
        """A function that times this kernel on given arrays (TVM's ``time_evaluator``).

        ``func_name`` (default: the entry) and ``dev`` are accepted for TVM
        compatibility.  The returned callable checks its arguments once, then measures
        only native calls; see ``measure`` for ``number``/``repeat``/``min_repeat_ms``.
        ``clock``: "wall" (TVM's semantics) or "thread" (see ``CLOCKS``: for a kernel
        run by the calling thread alone).  ``rotate_bytes`` > 0: consecutive runs take
        turns over copies of the arguments, enough that together they span that many
        bytes (``rotated_copies``), so that a run finds its operands in DRAM as a kernel
        inside a model does, not in the cache the previous run filled (TVM's
        ``enable_cpu_cache_flush`` serves the same end).
        """
        if func_name is not None:
            self.get_function(func_name)
        read = timing_clock(clock)

        def evaluator(*arrays: Any) -> ProfileResult:
            return measure(self._rotating(arrays, rotate_bytes), number, repeat,
                           min_repeat_ms, self.sync, clock=read)
        return evaluator

    def _rotating(self, arrays: Sequence[Any], rotate_bytes: int) -> Callable[[], None]:
        """A launcher of this kernel that runs on the next copy of ``arrays`` each call."""
        bound = self.bind(arrays)
        first = self._launcher(*bound)
        n = rotated_copies(sum(a.nbytes for a in bound[0]), rotate_bytes)
        if n == 1:
            return first
        copies = [bound[0]] + [[np.array(a, copy=True) for a in bound[0]] for _ in range(n - 1)]
        launchers = [first] + [self._launcher(*self.bind(c)) for c in copies[1:]]
        turn = [0]

        def run() -> None:
            i = turn[0]
            turn[0] = (i + 1) % n
            launchers[i]()
        run.copies = copies      # type: ignore[attr-defined]  # kept alive with the launchers
        return run

    def __repr__(self) -> str:
        return f"<{type(self).__name__} '{self.entry_name}'>"
