"""Runtime services of built modules: timing, the build cache, thread settings."""
from __future__ import annotations

import numpy as np
import pytest

from tdsl.errors import BuildError
from tdsl.runtime import ProfileResult, default_num_threads, measure
from tdsl.runtime.meta import signature_from_json, signature_to_json

try:
    from .llvm_irbuild import P, elementwise, tiled_matmul
except ImportError:
    from llvm_irbuild import P, elementwise, tiled_matmul

from tdsl.backends.llvm import build, cache

RNG = np.random.default_rng(5)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TDSL_CACHE_DIR", str(tmp_path / "cache"))


def test_time_evaluator_semantics():
    mod = build(tiled_matmul("mm_time", K=32))
    a = RNG.standard_normal((32, 32)).astype("float32")
    b = RNG.standard_normal((32, 64)).astype("float32")
    c = np.zeros((32, 64), "float32")
    res = mod.time_evaluator(mod.entry_name, None, number=3, repeat=4)(a, b, c)
    assert isinstance(res, ProfileResult)
    assert len(res.results) == 4 and all(t > 0 for t in res.results)
    assert res.mean == pytest.approx(sum(res.results) / 4)
    assert res.min <= res.median <= res.max
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)  # it really ran
    with pytest.raises(BuildError):
        mod.time_evaluator("no_such_function")


def test_min_repeat_ms_grows_number():
    """With a clock that advances 1 ms per run: ``number`` grows 1 -> 21 (20 ms / 1 ms + 1)
    in the first measurement and stays 21 for the second; each result is per run."""
    now = [0.0]
    calls = []

    def run():
        calls.append(1)
        now[0] += 1e-3
    res = measure(run, number=1, repeat=2, min_repeat_ms=20, clock=lambda: now[0])
    assert len(calls) == 1 + 1 + 21 + 21     # warm-up, 1 (too short), then 21 twice
    assert res.results == pytest.approx((1e-3, 1e-3), rel=1e-9)
    assert res.mean == pytest.approx(1e-3, rel=1e-9)
    calls.clear()                            # long enough from the start: number stays 1
    res = measure(run, number=1, repeat=3, min_repeat_ms=0.5, clock=lambda: now[0])
    assert len(calls) == 1 + 3 and res.results == pytest.approx((1e-3,) * 3, rel=1e-9)


def test_memory_cache_hit_skips_compilation():
    f1 = tiled_matmul("mm_cache", K=16)
    f2 = tiled_matmul("mm_cache", K=16)  # a structurally identical, separate program
    m1 = build(f1)
    before = dict(cache.stats)
    m2 = build(f2)
    assert cache.stats["memory_hits"] == before["memory_hits"] + 1
    assert m1.compiled is m2.compiled
    assert build(tiled_matmul("mm_cache", K=24)).compiled is not m1.compiled


def test_disk_cache_hit_after_memory_is_cleared(tmp_path):
    m1 = build(elementwise("disk_add", "float32", lambda a, b: a + b))
    files = list((tmp_path / "cache" / "llvm").glob("*.o"))
    assert files
    cache.clear_memory()
    before = dict(cache.stats)
    m2 = build(elementwise("disk_add", "float32", lambda a, b: a + b))
    assert cache.stats["disk_hits"] == before["disk_hits"] + 1
    assert cache.stats["misses"] == before["misses"]
    x, y = RNG.standard_normal(10).astype("float32"), RNG.standard_normal(10).astype("float32")
    z = np.zeros(10, "float32")
    m2(x, y, z)
    np.testing.assert_array_equal(z, x + y)
    assert m2.get_source("ll") == m1.get_source("ll")


def test_disk_cache_can_be_disabled(tmp_path, monkeypatch):
    monkeypatch.setenv("TDSL_CACHE_DIR", "off")
    assert cache.cache_dir() is None
    build(elementwise("nodisk", "float32", lambda a, b: a - b))


def test_key_function_is_swappable():
    seen = []

    def key(func, target, spec, ir_text):
        seen.append(func.name)
        return "custom-" + cache.ir_text_key(func, target, spec, ir_text)
    old = cache.set_key_function(key)
    try:
        build(elementwise("keyed", "float32", lambda a, b: a * b))
    finally:
        cache.set_key_function(old)
    assert seen == ["keyed"]


def test_thread_settings(monkeypatch):
    monkeypatch.delenv("TDSL_NUM_THREADS", raising=False)
    assert default_num_threads() >= 1
    monkeypatch.setenv("TDSL_NUM_THREADS", "5")
    assert default_num_threads() == 5
    mod = build(tiled_matmul("mm_thr", K=16, outer=P), "llvm -num-threads=3")
    assert mod.num_threads == 3
    mod.set_num_threads(1)
    assert mod.num_threads == 1
    monkeypatch.setenv("TDSL_NUM_THREADS", "zero")
    with pytest.raises(BuildError):
        default_num_threads()


def test_signature_metadata_roundtrip():
    f = tiled_matmul("mm_meta", symbolic_k=True)
    j = signature_to_json(f, "mm_meta")
    g = signature_from_json(j)
    assert [p.name for p in g.params] == ["A", "B", "C"]
    assert [v.name for v in g.size_vars] == ["m", "n", "k"]
    assert signature_to_json(g, "mm_meta") == j


def test_call_with_inputs_only_allocates_and_returns_the_outputs():
    import tdsl as td
    n = td.var("n")
    A = td.placeholder((n, 3), name="A")
    B = td.compute((n, 3), lambda i, j: A[i, j] * 2.0, name="B")
    C = td.compute((n,), lambda i: A[i, 0] + A[i, 2], name="C")
    f = td.build(td.create_schedule([B.op, C.op]), [A, B, C], target="llvm")
    a = np.random.default_rng(5).random((4, 3), dtype=np.float32) + 0.5
    b, c = f(a)
    np.testing.assert_allclose(b, a * 2)
    np.testing.assert_allclose(c, a[:, 0] + a[:, 2])
    assert f(a, np.empty((4, 3), "float32"), np.empty(4, "float32")) is None
