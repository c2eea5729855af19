"""CPU kernels' heap temporaries come from the workspace cache (backends/llvm/workspace.py):
kept between calls, shared by kernels, safe across threads, bounded, and a kernel built
without the cache (an exported object linked alone) falls back to aligned_alloc/free."""
from __future__ import annotations

import ctypes
import dataclasses
import shutil
import subprocess
import threading

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tdsl as td
from tdsl.backends.llvm import jit, workspace
from tdsl.backends.llvm.codegen import STACK_LIMIT
from tdsl.backends.llvm.module import LLVMModule


def reversed_double(n):
    """B[i] = 2 * A[n - 1 - i] + 1 through a materialized temporary T of n floats."""
    A = td.placeholder((n,), "float32", name="A")
    T = td.compute((n,), lambda i: A[i] * 2.0, name="T")
    B = td.compute((n,), lambda i: T[n - 1 - i] + 1.0, name="B")
    return td.build(td.create_schedule(B.op), [A, B], "llvm")


def rowwise_reversed(rows, cols):
    """A heap temporary inside a parallel body: T is one row (cols floats), per task."""
    A = td.placeholder((rows, cols), "float32", name="A")
    T = td.compute((rows, cols), lambda i, j: A[i, j] * 2.0, name="T")
    B = td.compute((rows, cols), lambda i, j: T[i, cols - 1 - j] + 1.0, name="B")
    s = td.create_schedule(B.op)
    s[T].compute_at(s[B], B.op.axis[0])
    s[B].parallel(B.op.axis[0])
    return td.build(s, [A, B], "llvm")


def expected(a):
    return np.flip(a, axis=-1) * np.float32(2) + np.float32(1)


@pytest.fixture
def runtime():
    rt = workspace.workspace_runtime()
    rt.release()
    return rt


def test_a_repeated_call_reuses_its_temporary(rng, runtime):
    n = 1 << 20                                   # 4 MiB: a heap temporary
    f = reversed_double(n)
    assert f.compiled.uses_workspace
    a = rng.random(n, dtype=np.float32)
    b = np.empty_like(a)
    before = runtime.stats()
    for _ in range(5):
        a = rng.random(n, dtype=np.float32)
        f(a, b)
        np.testing.assert_array_equal(b, expected(a))
    after = runtime.stats()
    assert after["misses"] - before["misses"] == 1          # allocated once
    assert after["hits"] - before["hits"] == 4              # then reused
    assert runtime.parked_bytes() == 4 * n
    td.runtime.release_workspace()
    assert runtime.parked_bytes() == 0


def test_a_small_temporary_stays_on_the_stack(runtime):
    n = STACK_LIMIT // 4
    f = reversed_double(n)
    assert not f.compiled.uses_workspace
    assert "tdsl_kernel_alloc" not in f.get_source("ll")


def test_kernels_share_parked_blocks(rng, runtime):
    big, smaller = reversed_double(1 << 20), reversed_double(3 << 18)
    a = rng.random(1 << 20, dtype=np.float32)
    b = np.empty_like(a)
    big(a, b)
    before = runtime.stats()
    a2, b2 = a[: 3 << 18].copy(), np.empty(3 << 18, np.float32)
    smaller(a2, b2)
    np.testing.assert_array_equal(b2, expected(a2))
    assert runtime.stats()["hits"] == before["hits"] + 1     # the bigger kernel's block


@pytest.mark.parametrize("threads", [1, 2])
def test_temporaries_inside_parallel_bodies(rng, runtime, threads):
    rows, cols = 37, STACK_LIMIT // 4 + 5                   # each task's row is a heap block
    f = rowwise_reversed(rows, cols)
    assert f.compiled.uses_workspace and f.compiled.uses_parallel
    f.set_num_threads(threads)
    b = np.empty((rows, cols), np.float32)
    for _ in range(4):
        a = rng.random((rows, cols), dtype=np.float32)
        f(a, b)
        np.testing.assert_array_equal(b, expected(a))
    assert runtime.parked_bytes() <= workspace.SLOTS * 4 * (cols + 16)


def test_concurrent_calls_from_python_threads(runtime):
    f = reversed_double(1 << 18)
    errors: list[str] = []

    def work(seed: int) -> None:
        r = np.random.default_rng(seed)
        b = np.empty(1 << 18, np.float32)
        for _ in range(30):
            a = r.random(1 << 18, dtype=np.float32)
            f(a, b)
            if not np.array_equal(b, expected(a)):
                errors.append(f"thread {seed}: wrong result")

    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    assert runtime.parked_bytes() <= workspace.SLOTS * 4 * (1 << 18)


def test_a_symbolic_size_grows_and_shrinks_its_block(rng, runtime):
    n = td.var("n")
    f = reversed_double(n)
    assert f.compiled.uses_workspace
    for size in (40_000, 300_000, 1_000_000, 50_000, 299_999):
        a = rng.random(size, dtype=np.float32)
        b = np.empty_like(a)
        f(a, b)
        np.testing.assert_array_equal(b, expected(a))


class _Raw:
    """The runtime's entry points as ctypes functions."""

    def __init__(self, rt):
        self.alloc = rt.library.function(workspace.ALLOC,
                                         ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_int64))
        self.free = rt.library.function(workspace.FREE, ctypes.CFUNCTYPE(None, ctypes.c_void_p))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 1 << 21)), min_size=1, max_size=40))
def test_allocations_are_aligned_distinct_and_bounded(ops):
    rt = workspace.workspace_runtime()
    rt.release()
    raw = _Raw(rt)
    live: dict[int, int] = {}
    for i, (give_back, size) in enumerate(ops):
        if give_back and live:
            p = next(iter(live))
            n = live.pop(p)
            assert ctypes.string_at(p, 1) == bytes([n % 251])   # nobody else wrote it
            raw.free(p)
            continue
        p = raw.alloc(size)
        assert p and p % 64 == 0
        assert all(p + size <= q or q + m <= p for q, m in live.items())   # disjoint
        ctypes.memset(p, size % 251, size)
        live[p] = size
        assert rt.parked_bytes() <= workspace.SLOTS * workspace.FIT * (1 << 21)
        parked = [ctypes.c_void_p.from_address(rt.library["tdsl_workspace_slots"] + 8 * k).value
                  for k in range(workspace.SLOTS)]
        assert not {q - workspace.HEADER for q in live} & {q for q in parked if q}
    for p in live:
        raw.free(p)
    rt.release()
    assert rt.parked_bytes() == 0


def test_a_parked_block_serves_only_requests_it_fits(runtime):
    raw = _Raw(runtime)
    p = raw.alloc(1 << 20)
    raw.free(p)
    assert raw.alloc(1 << 21) != p                          # too small
    q = raw.alloc((1 << 20) // (2 * workspace.FIT))         # would waste > FIT x
    assert q != p
    r = raw.alloc((1 << 20) - 100)
    assert r == p                                          # fits
    for x in (q, r):
        raw.free(x)


def test_at_most_slots_blocks_stay_parked(runtime):
    raw = _Raw(runtime)
    blocks = [raw.alloc(1 << 16) for _ in range(workspace.SLOTS + 5)]
    for p in blocks:
        raw.free(p)
    assert runtime.parked_bytes() == workspace.SLOTS * (1 << 16)


def test_threads_taking_and_parking_blocks_at_once(runtime):
    """Four threads (ctypes calls release the GIL) take, fill, check and give back blocks
    of a few sizes: no block is ever held by two of them."""
    raw = _Raw(runtime)
    errors: list[int] = []

    def work(tag: int) -> None:
        r = np.random.default_rng(tag)
        for _ in range(2000):
            n = int(r.choice([1 << 12, 1 << 14, 3 << 13, 1 << 16]))
            p = raw.alloc(n)
            ctypes.memset(p, tag, n)
            if ctypes.string_at(p, n) != bytes([tag]) * n:
                errors.append(tag)
            raw.free(p)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(1, 5)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    assert runtime.parked_bytes() <= workspace.SLOTS * (1 << 16)


def test_without_the_runtime_a_kernel_falls_back_to_aligned_alloc(rng, runtime):
    """The weak references resolve to nothing (a kernel object linked alone): the kernel
    allocates and frees each call, and its results are the same."""
    f = reversed_double(1 << 20)
    c = f.compiled
    lib = jit.link(c.obj, c.exports(), c.uses_parallel, needs_workspace=False)
    g = LLVMModule(f.func, f.target, dataclasses.replace(c, library=lib, cfunc=None,
                                                       threads_written=None))
    before = runtime.stats()
    a = rng.random(1 << 20, dtype=np.float32)
    b = np.empty_like(a)
    for _ in range(3):
        g(a, b)
        np.testing.assert_array_equal(b, expected(a))
    assert runtime.stats() == before


@pytest.mark.skipif(shutil.which("gcc") is None, reason="exporting a .so needs gcc to link")
def test_an_exported_library_carries_its_own_cache(rng, tmp_path):
    f = reversed_double(1 << 20)
    path = tmp_path / "rev.so"
    f.export_library(str(path))
    symbols = subprocess.run(["nm", "-D", str(path)], capture_output=True, text=True).stdout
    assert workspace.ALLOC not in symbols               # hidden: the library's own
    loaded = td.load_module(str(path))
    a = rng.random(1 << 20, dtype=np.float32)
    b = np.empty_like(a)
    for _ in range(3):
        loaded(a, b)
        np.testing.assert_array_equal(b, expected(a))


@pytest.mark.skipif(shutil.which("gcc") is None, reason="linking the object needs gcc")
def test_an_exported_object_links_alone(rng, tmp_path):
    """A bare .o needs nothing of tdsl: its weak references stay null and it allocates."""
    f = reversed_double(1 << 20)
    f.export_library(str(tmp_path / "rev.o"))
    so = tmp_path / "alone.so"
    subprocess.run(["gcc", "-shared", "-o", str(so), str(tmp_path / "rev.o"), "-lm"],
                   check=True)
    loaded = td.load_module(str(so))
    a = rng.random(1 << 20, dtype=np.float32)
    b = np.empty_like(a)
    loaded(a, b)
    np.testing.assert_array_equal(b, expected(a))


def test_the_environment_turns_the_cache_off(rng, runtime, monkeypatch):
    monkeypatch.setenv(workspace.ENV, "off")
    f = reversed_double(1 << 20)
    c = f.compiled
    lib = jit.link(c.obj, c.exports(), c.uses_parallel, needs_workspace=c.uses_workspace)
    g = LLVMModule(f.func, f.target, dataclasses.replace(c, library=lib, cfunc=None,
                                                       threads_written=None))
    before = runtime.stats()
    a = rng.random(1 << 20, dtype=np.float32)
    b = np.empty_like(a)
    g(a, b)
    np.testing.assert_array_equal(b, expected(a))
    assert runtime.stats() == before
