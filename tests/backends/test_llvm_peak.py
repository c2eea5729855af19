"""The measured FMA peak (backends/llvm/peak.py): the compute roof the task scheduler holds
a kernel to."""
from __future__ import annotations

from tdsl.backends.llvm.peak import CHAINS, _probe_ir, peak_flops
from tdsl.backends.llvm.machine import parse


def test_peak_is_plausible_and_float64_runs_at_about_half_the_float32_rate():
    f32, f64 = peak_flops("float32"), peak_flops("float64")
    assert 1e9 < f32 < 1e13, f32
    # twice the lanes of float32 in a vector register, the same FMA throughput
    assert 0.35 < f64 / f32 < 0.65, (f32, f64)
    assert peak_flops("float32", threads=4) == 4 * f32


def test_no_peak_for_dtypes_without_an_fma_probe():
    assert peak_flops("int32") == 0.0
    assert peak_flops("float16") == 0.0


def test_probe_keeps_every_chain_alive():
    """Each accumulator chain reaches the result, so LLVM cannot delete any of the FMAs."""
    text = _probe_ir("float", 8)
    parse(text)                                    # it verifies
    assert text.count("call <8 x float> @llvm.fma.v8f32") == CHAINS
    assert text.count("fadd <8 x float>") == CHAINS - 1
