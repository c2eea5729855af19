"""The measured FMA peak (backends/llvm/peak.py): the compute roof the task scheduler holds
a kernel to.

No test here reads a rate: the probe's arithmetic is checked against NumPy, the rate's
arithmetic against a clock the test drives, and the measurement only for being a positive
finite number.  How the measured peak compares across dtypes (float64 at about half the
float32 rate) is printed by ``benchmarks/roofs.py``."""
from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from tdsl.backends.llvm.machine import parse
from tdsl.backends.llvm.peak import CHAINS, _compile_probe, _probe_ir, _rate, peak_flops


def _probe_reference(dtype: str, n: int) -> float:
    """What the probe returns after ``n`` iterations, in NumPy: chain ``c`` starts at
    ``c + 1`` and becomes ``a * mul + add`` each iteration; lane 0 of the chains' sum."""
    t = np.dtype(dtype).type
    mul, add = (t(struct.unpack(">d", bytes.fromhex(h))[0])
                for h in ("3FEFFFFFE0000000", "3F50624DE0000000"))
    a = np.arange(1, CHAINS + 1, dtype=dtype)
    for _ in range(n):
        a = a * mul + add
    total = a[0]
    for v in a[1:]:
        total = t(total + v)
    return float(total)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_probe_computes_its_chains(dtype):
    probe, lanes = _compile_probe(dtype)
    assert lanes >= 1
    for n in (1, 2, 7, 300):
        got = probe(n)
        assert got == pytest.approx(_probe_reference(dtype, n), rel=1e-5), (dtype, n)
    # the chains really iterate: 300 iterations differ from 7
    assert probe(300) != pytest.approx(probe(7), rel=1e-4)


def test_the_rate_is_flop_over_the_best_of_three_timed_calls():
    """A probe that advances the test's clock by 1 ns per iteration runs at exactly
    ``flop_per_iter`` GFLOP/s: ``n`` grows by 4x until a call takes over 5 ms, then three
    calls of about 20 ms are timed and the first of them, made 3x slow, is ignored."""
    now = [0.0]
    calls = []

    def probe(n):
        timed = n & (n - 1) != 0                 # growth calls are powers of two, timed not
        first_timed = timed and not any(c & (c - 1) for c in calls)
        calls.append(n)
        now[0] += n * 1e-9 * (3.0 if first_timed else 1.0)
        return 0.0
    rate = _rate(probe, 48, lambda: now[0])
    grow = [c for c in calls if c & (c - 1) == 0]
    assert grow == [(1 << 14) * 4 ** i for i in range(len(grow))]
    assert grow[-1] * 1e-9 > 5e-3 and grow[-2] * 1e-9 <= 5e-3
    timed = calls[len(grow):]
    assert len(timed) == 3 and all(abs(n - 20e6) <= 1 for n in timed), timed
    assert rate == pytest.approx(48e9, rel=1e-9)


def test_the_measured_peak_is_a_positive_finite_rate_scaled_by_threads():
    for dtype in ("float32", "float64"):
        f = peak_flops(dtype)
        assert f > 0 and math.isfinite(f), (dtype, f)
        assert peak_flops(dtype, threads=4) == 4 * f
        assert peak_flops(dtype) == f                    # measured once per process


def test_no_peak_for_dtypes_without_an_fma_probe():
    assert peak_flops("int32") == 0.0
    assert peak_flops("float16") == 0.0


def test_probe_keeps_every_chain_alive():
    """Each accumulator chain reaches the result, so LLVM cannot delete any of the FMAs."""
    text = _probe_ir("float", 8)
    parse(text)                                    # it verifies
    assert text.count("call <8 x float> @llvm.fma.v8f32") == CHAINS
    assert text.count("fadd <8 x float>") == CHAINS - 1
