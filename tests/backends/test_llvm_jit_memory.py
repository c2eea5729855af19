"""JIT-linked kernels give their memory back once nothing uses them, and never sooner.

Each linked kernel holds about three memory mappings; Linux allows a process 65530
(``vm.max_map_count``), and a process that built every kernel of the test suite aborted in
LLVM's linker.  The in-memory build cache keeps ``$TDSL_JIT_CACHE_ENTRIES`` kernels; the rest
are released as soon as no module, launcher or function pointer holds them.
"""
import gc
import os
import shutil
import sys
import weakref

import numpy as np
import pytest

import tdsl as td
from tdsl.backends.llvm import cache, threadpool
from tdsl.errors import TDSLError


@pytest.fixture
def small_cache(monkeypatch):
    """A build cache of 4 kernels, no disk cache, emptied before and after."""
    monkeypatch.setenv(cache.ENV_MEMORY_ENTRIES, "4")
    monkeypatch.setenv("TDSL_CACHE_DIR", "off")
    cache.clear_memory()
    gc.collect()
    yield
    cache.clear_memory()
    gc.collect()


def axpb(k: int, parallel: bool = False):
    """A distinct kernel per ``k``: ``B = A * (k + 1.5) + k`` (split by 8 when parallel)."""
    n = td.var("n")
    A = td.placeholder((n,), name="A")
    B = td.compute((n,), lambda i: A[i] * (k + 1.5) + float(k), name="B")
    s = td.create_schedule(B.op)
    if parallel:
        xo, _ = s[B].split(B.op.axis[0], factor=8)
        s[B].parallel(xo)
    return td.build(s, [A, B], target="llvm")


def check(mod, k: int, rng, n: int = 37) -> None:
    a = rng.standard_normal(n).astype("float32")
    b = np.full(n, np.nan, "float32")
    mod(a, b)
    want = a * np.float32(k + 1.5) + np.float32(k)
    np.testing.assert_allclose(b, want, rtol=1e-5, atol=1e-6 * (k + 2))   # FMA or not


def maps() -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


@pytest.mark.skipif(not sys.platform.startswith("linux") or not os.path.exists("/proc/self/maps"),
                    reason="counts memory mappings in /proc/self/maps (Linux only)")
def test_released_kernels_give_their_mappings_back(small_cache, rng):
    check(axpb(0), 0, rng)          # warm up: the engine, the first link
    gc.collect()
    before = maps()
    for k in range(1, 301):
        check(axpb(k), k, rng)
    gc.collect()
    grown = maps() - before
    # 300 kernels held would be ~850 mappings; the 4 cached ones ~12 (+ allocator noise)
    assert grown < 120, f"{grown} memory mappings more after 300 kernels were dropped"


def test_a_dropped_module_releases_its_library(small_cache, rng, monkeypatch):
    monkeypatch.setenv(cache.ENV_MEMORY_ENTRIES, "0")
    mod = axpb(1001)
    check(mod, 1001, rng)
    lib = weakref.ref(mod.compiled.library)
    del mod
    gc.collect()
    assert lib() is None


def test_a_launcher_keeps_its_kernel_after_the_module_goes(small_cache, rng):
    for parallel in (False, True):
        mod = axpb(2001, parallel)
        a = rng.standard_normal(53).astype("float32")
        b = np.full(53, np.nan, "float32")
        run = mod._launcher(*mod.bind([a, b]))
        lib = weakref.ref(mod.compiled.library)
        del mod
        cache.clear_memory()
        for k in range(10):        # other kernels linked and released meanwhile
            check(axpb(2100 + k, parallel), 2100 + k, rng)
        gc.collect()
        assert lib() is not None
        run()
        np.testing.assert_allclose(b, a * np.float32(2002.5) + np.float32(2001), rtol=1e-5,
                                   atol=1e-2)
        del run
        gc.collect()
        assert lib() is None


def test_a_kept_module_outlives_its_cache_entry(small_cache, rng):
    for parallel in (False, True):
        mod = axpb(3001, parallel)
        check(mod, 3001, rng)
        for k in range(12):        # evicts mod's entry (4 kept) and releases those kernels
            check(axpb(3100 + k, parallel), 3100 + k, rng)
        gc.collect()
        check(mod, 3001, rng, n=1000)
        # building the same program again shares the kernel the module holds
        assert axpb(3001, parallel).compiled is mod.compiled


def test_the_thread_pool_is_never_released(small_cache, rng):
    pool = threadpool.native_pool()
    if pool is None:
        pytest.skip("no native thread pool on this platform")
    mod = axpb(4001, parallel=True)
    mod.set_num_threads(3)
    check(mod, 4001, rng, n=500)
    assert pool.library in mod.compiled.library.keep
    assert pool.library.permanent
    del mod
    cache.clear_memory()
    gc.collect()
    check(axpb(4002, parallel=True), 4002, rng, n=500)


@pytest.mark.parametrize("value", ["many", "-1", "2.5"])
def test_a_bad_cache_size_is_an_error(monkeypatch, value):
    monkeypatch.setenv(cache.ENV_MEMORY_ENTRIES, value)
    with pytest.raises(TDSLError, match=cache.ENV_MEMORY_ENTRIES):
        cache.memory_entries()


def test_the_cache_keeps_the_configured_count(small_cache, monkeypatch, rng):
    monkeypatch.setenv(cache.ENV_MEMORY_ENTRIES, "3")
    for k in range(6000, 6008):
        axpb(k)
    assert len(cache._memory) == 3
    assert cache.memory_entries() == 3


@pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("gcc") is None,
                    reason="counts /proc/self/maps (Linux) and exports with gcc")
@pytest.mark.parametrize("parallel", [False, True])
def test_loaded_libraries_are_closed_when_dropped(small_cache, tmp_path, rng, parallel):
    # a tuning worker loads one exported library per candidate
    axpb(7000, parallel).export_library(str(tmp_path / "k.so"))
    keep = td.load_module(str(tmp_path / "k.so"))
    check(keep, 7000, rng)
    gc.collect()
    before = maps()
    for i in range(60):
        path = tmp_path / f"k{i}.so"   # distinct files: dlopen shares one path's handle
        shutil.copyfile(tmp_path / "k.so", path)
        check(td.load_module(str(path)), 7000, rng)
    a = rng.standard_normal(41).astype("float32")
    b = np.full(41, np.nan, "float32")
    lib = td.load_module(str(tmp_path / "k59.so"))
    run = lib._launcher(*lib.bind([a, b]))
    del lib
    gc.collect()
    run()                              # a launcher keeps its library open
    np.testing.assert_allclose(b, a * np.float32(7001.5) + np.float32(7000), rtol=1e-5,
                               atol=1e-2)
    del run
    gc.collect()
    grown = maps() - before
    assert grown < 60, f"{grown} memory mappings more after 60 libraries were dropped"
    check(keep, 7000, rng)            # the library loaded first is still open
