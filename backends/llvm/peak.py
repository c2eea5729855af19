"""The host CPU's peak arithmetic rate, measured: a JIT-compiled loop of independent vector
fused multiply-adds that touches no memory.

It is the compute roof of a roofline: a kernel of F floating-point operations cannot run in
less than F / peak seconds, so the task scheduler (``autotune/task_scheduler.py``) stops
expecting gains from a kernel already near it.  One thread is measured (about 80 ms with
the compilation, once per process and dtype); ``threads`` scales it, which can only
overestimate the roof.
"""
from __future__ import annotations

import ctypes
import functools
import time
from typing import Callable

from tdsl.target import Target, cpu_facts

from . import jit
from .machine import emit_object, machine_spec, parse

#: independent accumulator chains: enough to cover FMA latency x FMA ports on current CPUs
CHAINS = 12
_SYMBOL = "tdsl_peak_probe"
_ELEMENT = {"float32": ("float", 4), "float64": ("double", 8)}


def _probe_ir(elem: str, lanes: int) -> str:
    """``double probe(i64 n)``: ``n`` iterations of ``CHAINS`` independent vector FMAs."""
    vt = f"<{lanes} x {elem}>"
    intr = f"llvm.fma.v{lanes}{'f32' if elem == 'float' else 'f64'}"

    def splat(v: str) -> str:
        return "<" + ", ".join(f"{elem} {v}" for _ in range(lanes)) + ">"
    mul, add = splat("0x3FEFFFFFE0000000"), splat("0x3F50624DE0000000")  # ~1.0, ~1e-3
    lines = [f"declare {vt} @{intr}({vt}, {vt}, {vt})",
             f"define double @{_SYMBOL}(i64 %n) {{",
             "entry:", "  br label %loop", "loop:",
             "  %i = phi i64 [0, %entry], [%i.next, %loop]"]
    for c in range(CHAINS):
        init = splat(f"{float(c + 1):e}")
        lines.append(f"  %a{c} = phi {vt} [{init}, %entry], [%b{c}, %loop]")
    for c in range(CHAINS):
        lines.append(f"  %b{c} = call {vt} @{intr}({vt} %a{c}, {vt} {mul}, {vt} {add})")
    lines += ["  %i.next = add i64 %i, 1", "  %more = icmp ult i64 %i.next, %n",
              "  br i1 %more, label %loop, label %exit", "exit:"]
    prev = "%b0"
    for c in range(1, CHAINS):
        lines.append(f"  %s{c} = fadd {vt} {prev}, %b{c}")
        prev = f"%s{c}"
    lines.append(f"  %e = extractelement {vt} {prev}, i32 0")
    lines.append("  %r = fpext float %e to double" if elem == "float"
                 else "  %r = fadd double %e, 0.0")
    lines += ["  ret double %r", "}"]
    return "\n".join(lines)


def _compile_probe(dtype: str) -> tuple[Callable[[int], float], int]:
    """The probe of ``dtype`` compiled for this CPU, and its vector lanes."""
    elem, size = _ELEMENT[dtype]
    lanes = cpu_facts("llvm").lanes(8 * size)
    spec = machine_spec(Target("llvm"))
    lib = jit.link(emit_object(parse(_probe_ir(elem, lanes)), spec), [_SYMBOL], False)
    return lib.function(_SYMBOL, ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_int64)), lanes


def _rate(probe: Callable[[int], float], flop_per_iter: int,
          clock: Callable[[], float] = time.perf_counter) -> float:
    """FLOP/s of ``probe`` (``flop_per_iter`` per iteration): ``n`` grows until one call takes
    about 5 ms, then the best of three calls of about 20 ms.  ``clock`` is a parameter so
    that tests can check the arithmetic against a clock of their own."""
    def timed(n: int) -> float:
        t = clock()
        probe(n)
        return clock() - t
    n = 1 << 14
    while True:
        dt = timed(n)
        if dt > 5e-3 or n >= 1 << 30:
            break
        n *= 4
    n = max(1, int(n * 20e-3 / max(dt, 1e-6)))
    best = min(timed(n) for _ in range(3))
    return flop_per_iter * n / best


@functools.lru_cache(maxsize=None)
def _single_thread_peak(dtype: str) -> float:
    probe, lanes = _compile_probe(dtype)
    return _rate(probe, 2 * CHAINS * lanes)


def peak_flops(dtype: str = "float32", threads: int = 1) -> float:
    """FLOP/s (a fused multiply-add counts two) that ``threads`` threads of this CPU can reach
    in ``dtype`` (``float32`` or ``float64``; 0.0 for any other: no roof known)."""
    if dtype not in _ELEMENT:
        return 0.0
    return _single_thread_peak(dtype) * max(1, threads)
