"""The machine's roofs as the task scheduler measures them, and whether they look sane.

    python benchmarks/roofs.py

Prints the FMA peak (``backends/llvm/peak.py``) in float32 and float64 with their ratio, and
the streaming bandwidth (``autotune/roofline.stream_bandwidth``) in and out of the
last-level cache on one and two threads.  A line marked ``CHECK`` is outside what this
hardware should give (float64 at 0.35-0.65 of the float32 rate, rates between 0.1 GB/s or
1 GFLOP/s and 10 TB/s or TFLOP/s).  These are live rates, so they are read here, on a quiet
machine, and not in the test suite (the tests check the arithmetic with a fake clock).
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from tdsl.autotune.roofline import last_level_cache_bytes, stream_bandwidth  # noqa: E402
from tdsl.backends.llvm.peak import peak_flops  # noqa: E402


def _line(name: str, value: float, unit: str, lo: float, hi: float) -> bool:
    ok = lo < value < hi
    print(f"{name:<40}{value:>12.3g} {unit:<8}{'' if ok else 'CHECK: outside'} "
          f"{'' if ok else f'({lo:g}, {hi:g})'}")
    return ok


def main() -> int:
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    f32, f64 = peak_flops("float32"), peak_flops("float64")
    ok = _line("FMA peak float32, one thread", f32, "FLOP/s", 1e9, 1e13)
    ok &= _line("FMA peak float64, one thread", f64, "FLOP/s", 5e8, 1e13)
    ok &= _line("float64 / float32 peak", f64 / f32, "", 0.35, 0.65)
    llc = last_level_cache_bytes()
    print(f"last-level cache {llc / 2**20:.1f} MiB")
    for threads in (1, 2):
        ok &= _line(f"stream a+b 16 MiB, {threads} thread(s)", stream_bandwidth(1 << 24, threads),
                    "B/s", 1e8, 1e13)
        ok &= _line(f"stream a+b llc/4, {threads} thread(s)",
                    stream_bandwidth(max(1 << 16, llc // 4), threads), "B/s", 1e8, 1e13)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
