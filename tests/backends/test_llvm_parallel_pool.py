"""Parallel loops claim chunks (backends/llvm/parallel.py) and run on tdsl's pool
(tdsl/runtime/pool.py): every iteration exactly once at any thread count, and a call never
waits for a thread that does not get to run (issue 12, "a call after idle")."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import tdsl as td
import tdsl.runtime.pool as pool_mod


def _accumulate_kernel(threads: int):
    """y[i] = x[i] + 1 over a symbolic n, the loop in parallel."""
    n = td.var("n")
    X = td.placeholder((n,), name="X")
    Y = td.compute((n,), lambda i: X[i] + 1.0, name="Y")
    s = td.create_schedule(Y.op)
    s[Y].parallel(s[Y].op.axis[0])
    f = td.build(s, [X, Y], target=f"llvm -num-threads={threads}")
    return f


def _in_place_kernel(threads: int):
    n = td.var("n")
    A = td.placeholder((n,), name="A")
    B = td.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = td.create_schedule(B.op)
    io, ii = s[B].split(s[B].op.axis[0], factor=3)
    s[B].parallel(io)
    return td.build(s, [A, B], target=f"llvm -num-threads={threads}")


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
@pytest.mark.parametrize("n", [1, 2, 7, 31, 100, 1001])
def test_every_iteration_runs(threads, n):
    f = _in_place_kernel(threads)
    a = np.random.default_rng(n).standard_normal(n).astype("float32")
    b = np.full(n, np.nan, "float32")        # a skipped iteration leaves a NaN
    f(a, b)
    np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)


class _NoWorkers(pool_mod.ThreadPool):
    """A pool whose helper threads never get to run (as on a saturated machine)."""

    calls = 0

    def _grow(self, n: int) -> None:
        self._workers = max(self._workers, n)

    def parallel(self, *args) -> None:
        type(self).calls += 1
        super().parallel(*args)


def test_call_completes_when_no_helper_runs(monkeypatch):
    monkeypatch.setattr(pool_mod, "_pool", _NoWorkers())
    f = _accumulate_kernel(4)
    x = np.random.default_rng(0).standard_normal(1000).astype("float32")
    y = np.full(1000, 7, "float32")
    done = threading.Event()

    def call():
        f(x, y)
        done.set()
    t = threading.Thread(target=call, daemon=True)
    t.start()
    assert done.wait(30), "the call waited for helper threads that never ran"
    assert _NoWorkers.calls == 1, "the kernel's parallel loop did not run on tdsl's pool"
    np.testing.assert_allclose(y, x + 1, rtol=1e-6)


def test_concurrent_callers():
    f = _accumulate_kernel(2)
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(5000).astype("float32") for _ in range(4)]
    ys = [np.full(5000, 7, "float32") for _ in xs]
    errors = []

    def call(i):
        try:
            for _ in range(20):
                f(xs[i], ys[i])
        except Exception as e:   # pragma: no cover - reported below
            errors.append(e)
    ts = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    for x, y in zip(xs, ys):
        np.testing.assert_allclose(y, x + 1, rtol=1e-6)


def test_gomp_runtime_still_selectable(monkeypatch):
    monkeypatch.setenv(pool_mod.ENV_VAR, "gomp")
    assert pool_mod.gomp_parallel_address() is None
    monkeypatch.delenv(pool_mod.ENV_VAR)
    assert pool_mod.gomp_parallel_address()
