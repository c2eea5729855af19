"""The CPU emulation harness: fibers, barriers, and the shared-memory race detector.

Most tests build a small stencil kernel (``B[i] = A[i] + A[i + 1]`` with a shared
tile fetched by all threads, so each thread reads what a neighbour wrote), then
emulate deliberately broken edits of its CUDA source."""
from __future__ import annotations

import functools
import re
import shutil

import numpy as np
import pytest

import tdsl as td
from tdsl.backends.cuda import EmulationError, SharedMemoryRaceError
from tdsl.errors import DTypeError, ShapeError, TDSLError

pytestmark = pytest.mark.skipif(shutil.which("g++") is None,
                                reason="g++ is not installed: the CUDA emulation harness needs it")

BARRIER = "__syncthreads();"


@functools.lru_cache(maxsize=None)
def stencil():
    n = td.var("n")
    A = td.placeholder((n + 1,), name="A")
    B = td.compute((n,), lambda i: A[i] + A[i + 1], name="B")
    s = td.create_schedule(B.op)
    AS = s.cache_read(A, "shared", [B])
    bo, bi = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(bo, td.thread_axis("blockIdx.x"))
    s[B].bind(bi, td.thread_axis("threadIdx.x"))
    s[AS].compute_at(s[B], bo)
    _, ai = s[AS].split(AS.op.axis[0], factor=32)
    s[AS].bind(ai, td.thread_axis("threadIdx.x"))
    return td.build(s, [A, B], target="cuda")


def data(n: int = 100):
    a = np.random.default_rng(n).random(n + 1).astype("float32")
    return a, np.empty(n, "float32")


def without_barrier(source: str, index: int) -> str:
    """``source`` with its ``index``-th ``__syncthreads();`` deleted."""
    starts = [m.start() for m in re.finditer(re.escape(BARRIER), source)]
    at = starts[index]
    return source[:at] + source[at + len(BARRIER):]


def test_stencil_is_correct_and_race_free() -> None:
    f = stencil()
    a, b = data()
    f.emulate(a, b)
    np.testing.assert_allclose(b, a[:-1] + a[1:], rtol=1e-6)


def test_removed_barrier_is_reported_as_a_race() -> None:
    f = stencil()
    src = f.get_source()
    # no loop encloses the fetch, so only the barrier between fetch and use is needed
    assert src.count(BARRIER) == 1
    a, b = data()
    with pytest.raises(SharedMemoryRaceError) as info:
        f.emulate(a, b, source=without_barrier(src, 0))
    e = info.value
    assert isinstance(e, TDSLError) and isinstance(e, EmulationError)
    assert e.kernel == f.kernel_names[0]
    assert "A_shared" in e.buffer and "A.shared" in e.buffer
    assert e.kind in ("read-after-write", "write-after-read")
    assert e.first != e.second and e.block == (0, 0, 0)
    assert "A_shared" in str(e) and "thread (" in str(e) and "__syncthreads()" in str(e)


def test_fibers_in_fixed_order_can_hide_the_bug_but_not_from_the_detector() -> None:
    """Threads run in order 0, 1, ..., so thread t reads A_shared[t + 1] before thread t + 1
    writes it: without the barrier the numbers are wrong *and* the race is reported.  With
    the check off the harness still runs (wrong numbers, no exception)."""
    f = stencil()
    a, b = data()
    broken = without_barrier(f.get_source(), 0)
    f.emulate(a, b, source=broken, check_races=False)
    assert not np.allclose(b, a[:-1] + a[1:])
    with pytest.raises(SharedMemoryRaceError, match="write-after-read|read-after-write"):
        f.emulate(a, b, source=broken)


def test_removed_barrier_in_tiled_matmul_is_caught() -> None:
    """The brief's check on a real schedule: the barrier before the compute loop of the
    shared-memory tiled matmul."""
    from tests.backends.test_cuda_schedules import workload
    w = workload("tiled_matmul")
    src = w.module.get_source()
    arrays = w.inputs(np.random.default_rng(0))
    last = src.count(BARRIER) - 1
    with pytest.raises(SharedMemoryRaceError) as info:
        w.module.emulate(*arrays, source=without_barrier(src, last))
    assert "B_shared" in info.value.buffer or "A_shared" in info.value.buffer
    # the barrier that guards the *next* iteration's fetch (write-after-read across
    # iterations) is caught too
    with pytest.raises(SharedMemoryRaceError):
        w.module.emulate(*arrays, source=without_barrier(src, 0))


def test_divergent_barrier() -> None:
    f = stencil()
    src = f.get_source()
    at = src.rindex(BARRIER)
    bad = src[:at] + "if (threadIdx.x == 5) return;\n  " + src[at:]
    a, b = data()
    with pytest.raises(EmulationError, match="not reached by all threads"):
        f.emulate(a, b, source=bad)
    bad = src[:at] + "if (threadIdx.x == 5) { __syncthreads(); }\n  " + src[at:]
    with pytest.raises(EmulationError, match="different __syncthreads"):
        f.emulate(a, b, source=bad)


def test_out_of_bounds_shared_index() -> None:
    f = stencil()
    bad = f.get_source().replace("A_shared[i_inner + 1]", "A_shared[i_inner + 2]")
    a, b = data()
    with pytest.raises(EmulationError, match=r"outside its 33 elements"):
        f.emulate(a, b, source=bad)


def test_uninitialized_shared_read() -> None:
    f = stencil()
    src = f.get_source()
    bad = src.replace("ax0_outer * 32 + ax0_inner < 33", "ax0_outer * 32 + ax0_inner < 32")
    assert bad != src
    a, b = data()
    with pytest.raises(EmulationError, match="uninitialized shared memory"):
        f.emulate(a, b, source=bad)


def test_trap_reports() -> None:
    f = stencil()
    src = f.get_source()
    at = src.rindex(BARRIER)
    bad = src[:at] + "if (blockIdx.x == 1) __trap();\n  " + src[at:]
    a, b = data()
    with pytest.raises(EmulationError, match="__trap"):
        f.emulate(a, b, source=bad)


def test_emulate_checks_arguments_like_a_call() -> None:
    f = stencil()
    a, b = data()
    with pytest.raises(ShapeError, match=r"expected n \+ 1"):
        f.emulate(a, np.empty(50, "float32"))
    with pytest.raises(DTypeError, match="float64"):
        f.emulate(a.astype("float64"), b)
    with pytest.raises(ShapeError, match="too few arguments"):
        f.emulate(a)
    with pytest.raises(ShapeError, match="read-only"):
        ro = np.empty(100, "float32")
        ro.flags.writeable = False
        f.emulate(a, ro)


def test_emulate_refuses_device_arrays() -> None:
    class FakeCuda:
        __cuda_array_interface__ = {"shape": (101,), "typestr": "<f4", "data": (1 << 40, False),
                                    "version": 3}
    f = stencil()
    _, b = data()
    with pytest.raises(DTypeError, match="CUDA device array"):
        f.emulate(FakeCuda(), b)


def test_compiled_harness_is_cached(monkeypatch) -> None:
    """After the first call, emulating again neither compiles nor loads a library (counted,
    not timed: a compile is slow but so is anything on a loaded machine)."""
    from tdsl.backends.cuda import emulator
    counts = {"compile": 0, "open": 0}

    def counted(name, real):
        def wrapper(*a, **k):
            counts[name] += 1
            return real(*a, **k)
        return wrapper
    monkeypatch.setattr(emulator, "_compile", counted("compile", emulator._compile))
    monkeypatch.setattr(emulator, "open_library", counted("open", emulator.open_library))
    f = stencil()
    a, b = data()
    f.emulate(a, b)
    first = dict(counts)
    for n in (100, 37, 100, 64, 100):        # other sizes run the same compiled harness
        a, b = data(n)
        f.emulate(a, b)
        np.testing.assert_allclose(b, a[:-1] + a[1:], rtol=1e-6)
    assert counts == first, counts


def test_warp_collective_ops_run_in_lockstep() -> None:
    """A warp-synchronous op (here __syncwarp) stops every lane until the whole warp
    arrives: lane 0 sees what lane 31 stored before the sync, with no __syncthreads."""
    f = stencil()
    src = f.get_source()
    # rewrite the consumer: each thread stores to B its neighbour's value read from global
    # memory after a warp sync (global memory is not shadow-tracked; this checks ordering)
    at = src.rindex(BARRIER)
    bad = src[:at] + "__syncwarp();\n  " + src[at:]
    a, b = data()
    f.emulate(a, b, source=bad)  # an extra warp sync changes nothing
    np.testing.assert_allclose(b, a[:-1] + a[1:], rtol=1e-6)


def test_double_buffered_pipeline_needs_its_one_barrier() -> None:
    """Double buffering keeps one barrier per k-iteration; without it the next iteration's
    fetch overwrites the tile other threads still read.  Before sm_80 the fills are stores
    and the barrier follows the compute; on sm_80+ (the default) they are cp.async copies and
    the barrier follows the wait at the top of the iteration (pipeline.py)."""
    from tdsl.backends.cuda import build
    from tests.backends.test_cuda_schedules import workload
    w = workload("tiled_matmul_double_buffered")
    arrays = w.inputs(np.random.default_rng(0))
    sync = build(w.module.func, "cuda -arch=sm_75")
    src = sync.source
    assert "tdsl_cp_async" not in src
    assert src.count(BARRIER) == 2   # after the prologue fetch, and once per iteration
    sync.emulate(*arrays)
    with pytest.raises(SharedMemoryRaceError, match="write-after-read|read-after-write"):
        sync.emulate(*arrays, source=without_barrier(src, 1))
    src = w.module.get_source()
    assert "tdsl_cp_async_wait_all();" in src
    assert src.count(BARRIER) == 2   # once per iteration (after the wait), once after the loop
    w.module.emulate(*arrays)
    with pytest.raises(SharedMemoryRaceError, match="write-after-read|read-after-write"):
        w.module.emulate(*arrays, source=without_barrier(src, 0))
