"""tdsl.testing.benchmark: warm-up, one thread count for all, interleaved repeats, medians."""
from __future__ import annotations

import os

import numpy as np
import pytest

import tdsl as td
from tdsl.runtime.threads import ENV_VAR
from tdsl.testing import BenchmarkResult, benchmark


@pytest.fixture(scope="module")
def parallel_add():
    n = td.var("n")
    A = td.placeholder((n,), "float32", name="A")
    B = td.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = td.create_schedule(B.op)
    s[B].parallel(s[B].op.axis[0])
    return td.build(s, [A, B], target="llvm", name="bench_add")


def test_interleaves_rotates_and_warms_up():
    calls: list[str] = []
    r = benchmark({"a": lambda: calls.append("a"), "b": lambda: calls.append("b"),
                   "c": lambda: calls.append("c")},
                  repeat=3, min_repeat_ms=0, warmup_ms=0, settle_ms=0)
    # warm-up: each at least once, before any measurement
    assert calls[:3] == ["a", "b", "c"]
    measured = calls[3:]
    assert measured == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]  # rotating order
    assert isinstance(r, BenchmarkResult) and len(r["a"].results) == 3
    assert r.baseline == "a"
    # by default each sample follows a rest and one untimed call (others' threads idle)
    calls.clear()
    benchmark({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
              repeat=2, min_repeat_ms=0, warmup_ms=0, settle_ms=1)
    assert calls[2:] == ["a", "a", "b", "b", "b", "b", "a", "a"]


def test_same_threads_for_every_contender(parallel_add, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    seen = []
    f = parallel_add
    a = np.random.default_rng(0).random(1000, dtype=np.float32)
    b = np.empty_like(a)
    f.set_num_threads(5)
    r = benchmark({"tdsl": (f, [a, b]), "env": lambda: seen.append(os.environ.get(ENV_VAR))},
                  threads=1, repeat=2, min_repeat_ms=0, warmup_ms=0)
    np.testing.assert_allclose(b, a + 1)
    assert set(seen) == {"1"} and r.threads == 1
    assert f.num_threads == 5  # restored afterwards
    assert ENV_VAR not in os.environ
    text = str(r)
    assert "1 thread(s) for every contender" in text and "vs tdsl" in text


def test_statistics_and_table():
    """With a clock the contenders advance themselves (x: 1 ms a call; y: 4 ms, one call in
    five 8 ms), the medians, quartiles, speedups and GFLOP/s are exact."""
    now = [0.0]
    ycalls = []

    def tick(ms):
        now[0] += ms / 1024                        # binary fractions: exact sums

    def y():
        ycalls.append(1)
        tick(8 if len(ycalls) % 5 == 3 else 4)
    r = benchmark({"x": lambda: tick(1), "y": y}, repeat=5, min_repeat_ms=0, warmup_ms=0,
                  settle_ms=0, flops=1e6, baseline="y", clock=lambda: now[0])
    t = r["x"]
    assert len(t.results) == 5 and t.number == 1
    assert t.results == (1 / 1024,) * 5
    assert sorted(r["y"].results) == [4 / 1024] * 4 + [8 / 1024]
    lo, hi = t.quartiles
    assert t.min <= lo <= t.median <= hi
    assert r.speedup("y") == 1.0
    assert r.speedup("x") == 4.0                   # the median ignores y's slow call
    assert r.gflops("x") == pytest.approx(1e6 / (1 / 1024) / 1e9)
    lines = str(r).splitlines()
    assert lines[0].split()[:3] == ["contender", "median", "(ms)"] and "GFLOP/s" in lines[0]
    assert "<table>" in r._repr_html_()
    rows = r.rows()
    assert [row["name"] for row in rows] == ["x", "y"]


def test_refuses_bad_input(parallel_add):
    with pytest.raises(td.ArgumentError, match="no contenders"):
        benchmark({})
    with pytest.raises(td.ArgumentError, match="baseline 'z'"):
        benchmark({"x": lambda: None}, baseline="z")
    with pytest.raises(td.ArgumentError, match="must be a callable"):
        benchmark({"x": 3})
    with pytest.raises(td.ArgumentError, match=r"\(module, \[arrays\]\)"):
        benchmark({"x": parallel_add})
    with pytest.raises(td.ArgumentError, match="threads"):
        benchmark({"x": lambda: None}, threads=0)
    with pytest.raises(td.ArgumentError, match="repeat"):
        benchmark({"x": lambda: None}, repeat=0)


def test_max_seconds_stops_early():
    import time
    r = benchmark({"slow": lambda: time.sleep(0.01)}, repeat=50, min_repeat_ms=0,
                  warmup_ms=0, max_seconds=0.05)
    assert 3 <= len(r["slow"].results) < 50 and any("stopped" in n for n in r.notes)
