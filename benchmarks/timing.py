"""Interleaved side-by-side timing shared by the benchmark scripts.

Each round takes one sample of every contender (the order rotated per round); a sample
is ``number`` back-to-back calls after one untimed call, and the medians over rounds are
compared.  Before each sample the script sleeps ``settle_s``: the peers' thread pools
(OpenBLAS's spins about 2^28 cycles, ~0.1 s, after each call; libgomp's a few ms) keep a
CPU busy after they return, and on a small machine the next contender's second thread
would otherwise get no CPU -- the sample would measure whoever ran just before it.
tdsl's idle workers spin longer (``tdsl.runtime.pool_spin_ms()``, 300 ms); the rest puts
them to sleep (``tdsl.runtime.rest``) so they do not take CPU time from the next contender.
"""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable

from tdsl.runtime import rest

#: Seconds of rest before each sample (longer than OpenBLAS's default spin).
SETTLE_S = 0.15


def calls_per_sample(fn: Callable[[], Any], min_sample_s: float) -> int:
    """Calls per sample so that one sample lasts at least ``min_sample_s`` (1 to 1000)."""
    fn()
    t0 = time.perf_counter()
    fn()
    dt = max(time.perf_counter() - t0, 1e-7)
    return max(1, min(1000, int(min_sample_s / dt + 0.999)))


def interleaved(contenders: "dict[str, Callable[[], Any]]", rounds: int, min_sample_s: float,
                settle_s: float = SETTLE_S, numbers: "dict[str, int] | None" = None,
                max_rounds: "dict[str, int] | None" = None,
                clock: Callable[[], float] = time.perf_counter) -> dict[str, dict]:
    """Seconds per call of each contender, per round: ``{name: {"median_s", "min_s",
    "samples_s", "calls_per_sample"}}``.  ``numbers`` fixes calls per sample for some
    contenders; ``max_rounds`` caps the samples of slow ones.  ``clock``: what a sample
    reads (``time.thread_time``: the calling thread's CPU time, for one-thread contenders
    on a shared machine, where wall time counts the other processes' turns)."""
    numbers = dict(numbers or {})
    for name, fn in contenders.items():
        if name not in numbers:
            numbers[name] = calls_per_sample(fn, min_sample_s)
    samples: dict[str, list[float]] = {k: [] for k in contenders}
    names = list(contenders)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            if max_rounds and r >= max_rounds.get(name, rounds):
                continue
            fn, k = contenders[name], numbers[name]
            rest(settle_s)
            fn()
            t0 = clock()
            for _ in range(k):
                fn()
            samples[name].append((clock() - t0) / k)
    return {k: {"median_s": statistics.median(v), "min_s": min(v), "samples_s": v,
                "calls_per_sample": numbers[k]} for k, v in samples.items()}
