"""``benchmark``: time several contenders fairly and print them side by side.

Fair means: every contender runs at the same thread count (tdsl modules through
``set_num_threads`` and ``TDSL_NUM_THREADS``, NumPy's BLAS through threadpoolctl);
each is warmed up first; each measurement repeats the call enough times to last
``min_repeat_ms``; the contenders' measurements are interleaved (round-robin, in a
rotating order), so a change in machine load hits all of them alike; and the figure
reported is the median with its spread (the interquartile range), not a lucky minimum.
"""
from __future__ import annotations

import contextlib
import math
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

from tdsl.errors import ArgumentError
from tdsl.runtime.threads import ENV_VAR, default_num_threads, rest

Contender = "Callable[[], Any] | tuple[Any, Sequence[Any]]"


@dataclass(frozen=True)
class Timing:
    """One contender's measurements: seconds per call, one figure per repeat."""

    name: str
    results: tuple[float, ...]
    number: int

    @property
    def median(self) -> float:
        return statistics.median(self.results)

    @property
    def min(self) -> float:
        return min(self.results)

    @property
    def quartiles(self) -> tuple[float, float]:
        if len(self.results) < 2:
            return (self.results[0], self.results[0])
        q = statistics.quantiles(self.results, n=4, method="inclusive")
        return (q[0], q[2])

    @property
    def spread(self) -> float:
        """The interquartile range relative to the median (0.05: 5 %)."""
        lo, hi = self.quartiles
        return (hi - lo) / self.median if self.median > 0 else 0.0


@dataclass
class BenchmarkResult:
    """What ``benchmark`` returns; ``print`` it for a table (notebooks render HTML)."""

    timings: dict[str, Timing]
    threads: int
    baseline: str
    flops: "float | None" = None
    notes: list[str] = field(default_factory=list)

    def __getitem__(self, name: str) -> Timing:
        return self.timings[name]

    def median(self, name: str) -> float:
        """Median seconds per call of ``name``."""
        return self.timings[name].median

    def gflops(self, name: str) -> float:
        if not self.flops:
            raise ArgumentError("benchmark: pass flops= to get GFLOP/s")
        return self.flops / self.median(name) / 1e9

    def speedup(self, name: str, over: "str | None" = None) -> float:
        """How many times faster ``name`` runs than ``over`` (default: the baseline)."""
        return self.median(over or self.baseline) / self.median(name)

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for name, t in self.timings.items():
            row: dict[str, Any] = {"name": name, "median_ms": t.median * 1e3,
                                   "spread_pct": t.spread * 100, "min_ms": t.min * 1e3}
            if self.flops:
                row["gflops"] = self.gflops(name)
            row["speedup"] = self.speedup(name)
            out.append(row)
        return out

    def _columns(self) -> list[tuple[str, str, Callable[[dict[str, Any]], str]]]:
        cols = [("contender", "<", lambda r: r["name"]),
                ("median (ms)", ">", lambda r: f"{r['median_ms']:.3f}"),
                ("spread", ">", lambda r: f"±{r['spread_pct'] / 2:.1f}%"),
                ("best (ms)", ">", lambda r: f"{r['min_ms']:.3f}")]
        if self.flops:
            cols.append(("GFLOP/s", ">", lambda r: f"{r['gflops']:.1f}"))
        cols.append((f"vs {self.baseline}", ">", lambda r: f"{r['speedup']:.2f}x"))
        return cols

    def __str__(self) -> str:
        rows, cols = self.rows(), self._columns()
        cells = [[fmt(r) for _, _, fmt in cols] for r in rows]
        widths = [max(len(h), *(len(c[i]) for c in cells)) for i, (h, _, _) in enumerate(cols)]
        line = lambda vals: "  ".join(f"{v:{a}{w}}" for v, (_, a, _), w in  # noqa: E731
                                      zip(vals, cols, widths))
        out = [line([h for h, _, _ in cols]), "  ".join("-" * w for w in widths)]
        out += [line(c) for c in cells]
        out.append(self._footer())
        return "\n".join(out)

    def _footer(self) -> str:
        reps = {len(t.results) for t in self.timings.values()}
        text = (f"{self.threads} thread(s) for every contender; median of "
                f"{'/'.join(map(str, sorted(reps)))} interleaved repeats after warm-up; "
                f"spread: half the interquartile range")
        return "\n".join([text] + [f"note: {n}" for n in self.notes])

    __repr__ = __str__

    def _repr_html_(self) -> str:
        rows, cols = self.rows(), self._columns()
        head = "".join(f"<th>{h}</th>" for h, _, _ in cols)
        body = "".join("<tr>" + "".join(
            f"<td style='text-align:{'left' if a == '<' else 'right'}'>{fmt(r)}</td>"
            for _, a, fmt in cols) + "</tr>" for r in rows)
        foot = self._footer().replace("\n", "<br>")
        return (f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
                f"<p style='font-size:smaller'>{foot}</p>")


def _as_callable(name: str, c: Any, threads: int, restore: list[Callable[[], None]]
                 ) -> Callable[[], Any]:
    """A no-argument callable for contender ``c``; a ``(module, args)`` pair times the
    module's native call on checked arguments, at ``threads`` threads."""
    if callable(c) and not isinstance(c, tuple):
        module, args = (c, None) if _is_module(c) else (None, None)
        if module is None:
            return c
        raise ArgumentError(f"benchmark: contender '{name}' is a module; pass "
                            f"(module, [arrays]) so it knows what to run on")
    if isinstance(c, tuple) and len(c) == 2 and _is_module(c[0]):
        module, args = c
        if hasattr(module, "set_num_threads"):
            old = getattr(module, "_num_threads", 0)
            module.set_num_threads(threads)
            restore.append(lambda: module.set_num_threads(old))
        run = module._launcher(*module.bind(list(args)))
        sync = getattr(module, "sync", lambda: None)

        def call() -> None:
            run()
            sync()
        return call
    raise ArgumentError(f"benchmark: contender '{name}' must be a callable taking no "
                        f"arguments or a (tdsl module, arrays) pair, got {type(c).__name__}")


def _is_module(x: Any) -> bool:
    from tdsl.runtime import Module
    return isinstance(x, Module)


@contextlib.contextmanager
def _same_threads(threads: int, notes: list[str]) -> Iterator[None]:
    """Run tdsl (``TDSL_NUM_THREADS``) and the BLAS NumPy uses at ``threads`` threads."""
    old = os.environ.get(ENV_VAR)
    os.environ[ENV_VAR] = str(threads)
    limiter: Any = None
    try:
        import numpy  # noqa: F401  (threadpoolctl sees only the BLAS libraries loaded)
        from threadpoolctl import threadpool_info, threadpool_limits
        limiter = threadpool_limits(limits=threads, user_api="blas")
        blas = sorted({f"{d.get('internal_api')} ({d.get('num_threads')} thread(s))"
                       for d in threadpool_info() if d.get("user_api") == "blas"})
        if blas:
            notes.append("NumPy's BLAS: " + ", ".join(blas))
    except ImportError:
        notes.append("threadpoolctl is not installed, so NumPy's BLAS threads were not "
                     "limited (pip install threadpoolctl, or tdsl[benchmark])")
    try:
        yield
    finally:
        if limiter is not None:
            limiter.restore_original_limits()
        if old is None:
            os.environ.pop(ENV_VAR, None)
        else:
            os.environ[ENV_VAR] = old


def benchmark(contenders: "Mapping[str, Any]", *, threads: "int | None" = None,
              repeat: int = 9, min_repeat_ms: float = 20.0, warmup_ms: float = 30.0,
              flops: "float | None" = None, baseline: "str | None" = None,
              max_seconds: "float | None" = None, settle_ms: float = 150.0,
              clock: Callable[[], float] = time.perf_counter) -> BenchmarkResult:
    """Time ``contenders`` (name → a no-argument callable, or a ``(tdsl module, arrays)``
    pair) fairly, and return their medians and spreads.

    ``threads`` (default: tdsl's default, ``TDSL_NUM_THREADS`` or every CPU) is used by
    every contender.  Each is warmed up for ``warmup_ms`` (at least one call); then
    ``repeat`` rounds, each timing every contender once (in a rotating order) over enough
    calls to last ``min_repeat_ms``, after a rest of ``settle_ms`` and one untimed call: other
    libraries' thread pools keep spinning after they return (OpenBLAS about 0.1 s), and a
    multi-threaded contender timed right after them would find no CPU for its second
    thread (tdsl's tuned matmul then timed at half its speed next to NumPy).  tdsl's own
    idle workers sleep during the rest (``tdsl.runtime.rest``) for the same reason.
    ``flops`` (per call) adds GFLOP/s; ``baseline`` (default: the
    first contender) is what the speedups compare with.  ``max_seconds`` stops early
    (after at least three rounds) when the rounds would take longer.  ``clock`` (seconds)
    is a parameter so that tests can check the arithmetic with a clock of their own.

    Example::

        r = benchmark({"tdsl": (f, [a, b, c]), "numpy": lambda: np.matmul(a, b, out=c)},
                      flops=2 * n ** 3)
        print(r)            # a table: median, spread, best, GFLOP/s, speedup
    """
    if not contenders:
        raise ArgumentError("benchmark: no contenders")
    if repeat < 1 or min_repeat_ms < 0 or warmup_ms < 0 or settle_ms < 0:
        raise ArgumentError(f"benchmark: repeat must be >= 1 and the times >= 0, got "
                            f"repeat={repeat}, min_repeat_ms={min_repeat_ms}, "
                            f"warmup_ms={warmup_ms}, settle_ms={settle_ms}")
    names = list(contenders)
    baseline = baseline if baseline is not None else names[0]
    if baseline not in contenders:
        raise ArgumentError(f"benchmark: baseline '{baseline}' is not a contender ({names})")
    threads = int(threads) if threads is not None else default_num_threads()
    if threads < 1:
        raise ArgumentError(f"benchmark: threads must be >= 1, got {threads}")
    notes: list[str] = []
    restore: list[Callable[[], None]] = []
    try:
        with _same_threads(threads, notes):
            fns = {n: _as_callable(n, contenders[n], threads, restore) for n in names}
            numbers = {n: _warm_up(fns[n], warmup_ms, min_repeat_ms, clock) for n in names}
            results: dict[str, list[float]] = {n: [] for n in names}
            t_start = clock()
            for r in range(repeat):
                order = names[r % len(names):] + names[:r % len(names)]
                for n in order:
                    fn, number = fns[n], numbers[n]
                    if settle_ms:
                        rest(settle_ms / 1e3)
                        fn()
                    t0 = clock()
                    for _ in range(number):
                        fn()
                    results[n].append((clock() - t0) / number)
                spent = clock() - t_start
                if max_seconds is not None and r >= 2 and spent * (r + 2) / (r + 1) > max_seconds:
                    notes.append(f"stopped after {r + 1} rounds (max_seconds={max_seconds})")
                    break
    finally:
        for undo in restore:
            undo()
    timings = {n: Timing(n, tuple(results[n]), numbers[n]) for n in names}
    return BenchmarkResult(timings, threads, baseline, flops, notes)


def _warm_up(fn: Callable[[], Any], warmup_ms: float, min_repeat_ms: float,
             clock: Callable[[], float]) -> int:
    """Call ``fn`` for ``warmup_ms`` (at least once); return the calls per measurement."""
    calls, t0 = 0, clock()
    while True:
        fn()
        calls += 1
        elapsed = clock() - t0
        if elapsed * 1e3 >= warmup_ms:
            break
    per_call = elapsed / calls
    return max(1, math.ceil(min_repeat_ms / 1e3 / per_call)) if per_call > 0 else 1
