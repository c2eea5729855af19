"""Parallel loops claim chunks (backends/llvm/parallel.py) and run on tdsl's native pool
(backends/llvm/threadpool.py): every iteration exactly once at any thread count, and a call never
waits for a thread that does not get to run (issue 12, "a call after idle")."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import tdsl as td
import tdsl.backends.llvm.threadpool as pool_mod
from tdsl.runtime import threads


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


def _state(name: str) -> int:
    import ctypes
    pool = pool_mod.native_pool()
    return ctypes.c_int32.from_address(pool.library[f"tdsl_pool_{name}"]).value


def test_kernels_run_on_the_native_pool():
    f = _accumulate_kernel(2)
    x = np.random.default_rng(0).standard_normal(4096).astype("float32")
    y = np.full(4096, 7, "float32")
    f(x, y)                                   # starts the worker
    before = _state("gen")
    f(x, y)
    assert _state("gen") == before + 1, "the parallel loop did not run on tdsl's pool"
    assert _state("busy") == 0 and _state("holders") == 0 and _state("active") == 0
    np.testing.assert_allclose(y, x + 1, rtol=1e-6)


_NO_HELPER = """
import ctypes, numpy as np, tdsl as td
import tdsl.backends.llvm.threadpool as P
lib = P.native_pool().library
# the pool believes 16 workers exist, but none does: as if no helper ever got a CPU
ctypes.c_int32.from_address(lib["tdsl_pool_workers"]).value = 16
n = td.var("n")
X = td.placeholder((n,), name="X")
Y = td.compute((n,), lambda i: X[i] + 1.0, name="Y")
s = td.create_schedule(Y.op)
s[Y].parallel(s[Y].op.axis[0])
f = td.build(s, [X, Y], target="llvm -num-threads=4")
x = np.arange(1000, dtype="float32")
y = np.zeros(1000, "float32")
f(x, y)
assert (y == x + 1).all()
assert ctypes.c_int32.from_address(lib["tdsl_pool_gen"]).value == 1
print("ok")
"""


def test_call_completes_when_no_helper_runs():
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", _NO_HELPER], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


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
    assert pool_mod.parallel_runtime_address() is None
    monkeypatch.delenv(pool_mod.ENV_VAR)
    assert pool_mod.parallel_runtime_address()


def test_forked_child_runs_parallel_kernels():
    import multiprocessing as mp
    f = _accumulate_kernel(2)
    x = np.random.default_rng(2).standard_normal(5000).astype("float32")
    y = np.zeros(5000, "float32")
    f(x, y)
    ctx = mp.get_context("fork")
    with ctx.Pool(1) as p:
        out = p.apply(_child_call, (x,))
    np.testing.assert_allclose(out, x + 1, rtol=1e-6)


def _child_call(x):
    import warnings
    f = _accumulate_kernel(2)
    y = np.zeros_like(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f(x, y)
    return y


@pytest.fixture
def idle_pool():
    """A 2-thread kernel, its arrays and the pool; the pool's spin is restored afterwards."""
    f = _accumulate_kernel(2)
    x = np.random.default_rng(1).standard_normal(1 << 16).astype("float32")
    pool = pool_mod.native_pool()
    saved = pool.spin_ms
    yield f, x, np.empty_like(x), pool
    pool.spin_ms = saved


def test_idle_workers_spin_for_spin_ms_then_sleep(idle_pool):
    """Issue 12, "a call after idle": a worker that sleeps is often woken onto its caller's
    CPU, where the call runs at one thread's speed; within ``spin_ms`` of its last job it
    must still be awake (yielding), and ``spin_ms = 0`` must put it to sleep."""
    import time
    f, x, y, pool = idle_pool
    pool.spin_ms = 600_000.0              # 10 minutes: no load makes the gaps below reach it
    f(x, y)
    before = pool.sleeps
    time.sleep(0.1)                       # a gap well inside the spin
    f(x, y)
    time.sleep(0.1)
    assert pool.sleeps == before, "a worker slept within spin_ms of its last job"
    pool.spin_ms = 0.0                    # workers read it at their next look at the clock
    deadline = time.monotonic() + 60.0    # a guard against a hang, well before the spin ends
    while pool.sleeps == before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pool.sleeps > before, "spin_ms = 0 did not put the spinning worker to sleep"
    f(x, y)                               # a sleeping worker is woken: the call still runs
    np.testing.assert_allclose(y, x + 1.0, rtol=1e-6)


@pytest.mark.parametrize("value, expected", [("", threads.DEFAULT_POOL_SPIN_MS), ("0", 0.0),
                                             ("12.5", 12.5)])
def test_spin_time_from_the_environment(monkeypatch, value, expected):
    monkeypatch.setenv(threads.POOL_SPIN_ENV_VAR, value)
    assert threads.pool_spin_ms_from_env() == expected


@pytest.mark.parametrize("value", ["-1", "soon", "nan", "inf"])
def test_bad_spin_time_is_a_clear_error(monkeypatch, value):
    monkeypatch.setenv(threads.POOL_SPIN_ENV_VAR, value)
    with pytest.raises(td.TDSLError, match=threads.POOL_SPIN_ENV_VAR):
        threads.pool_spin_ms_from_env()
    with pytest.raises(td.TDSLError, match="set_pool_spin_ms"):
        threads.set_pool_spin_ms(float(value) if value != "soon" else -2.0)


def test_rest_puts_spinning_workers_to_sleep_and_restores_the_spin(idle_pool):
    f, x, y, pool = idle_pool
    threads.set_pool_spin_ms(5000.0)
    assert threads.pool_spin_ms() == 5000.0
    f(x, y)
    before = pool.sleeps
    threads.rest(0.2)
    assert pool.sleeps > before, "rest() left a worker spinning"
    assert threads.pool_spin_ms() == 5000.0
