"""The emulator's compiled harnesses are bounded: each loaded one keeps ~5 memory mappings,
and a test session emulating thousands of kernels must not fill the address space."""
from __future__ import annotations

import gc
import sys

import numpy as np
import pytest

import tdsl as td
from tdsl.backends.cuda import emulator

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="counts /proc/self/maps (Linux only)")


def _maps() -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


def _kernel(i: int):
    n = 64
    A = td.placeholder((n,), name="A")
    B = td.compute((n,), lambda j: A[j] * 2.0 + float(i), name="B")
    s = td.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(bx, td.thread_axis("blockIdx.x"))
    s[B].bind(tx, td.thread_axis("threadIdx.x"))
    return td.build(s, [A, B], target="cuda")


def test_harness_cache_is_bounded_and_evicted_harnesses_are_closed(monkeypatch):
    monkeypatch.setenv("TDSL_EMU_CACHE_ENTRIES", "4")
    emulator._LIBS.clear()
    a = np.random.default_rng(0).standard_normal(64).astype("float32")
    _kernel(-1).emulate(a, np.empty_like(a))     # first use loads the harness runtime
    gc.collect()
    before = _maps()
    for i in range(24):
        f = _kernel(i)
        b = np.empty_like(a)
        f.emulate(a, b)
        np.testing.assert_allclose(b, a * 2 + i, rtol=1e-6)
        del f
    gc.collect()
    assert len(emulator._LIBS) <= 4
    # 24 harnesses at ~5 mappings each add ~120 when all stay loaded; here four do
    assert _maps() - before < 60, f"{_maps() - before} mappings added by 24 emulated kernels"
