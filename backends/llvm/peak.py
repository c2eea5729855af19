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


@functools.lru_cache(maxsize=None)
def _single_thread_peak(dtype: str) -> float:
    elem, size = _ELEMENT[dtype]
    lanes = cpu_facts("llvm").lanes(8 * size)
    spec = machine_spec(Target("llvm"))
    lib = jit.link(emit_object(parse(_probe_ir(elem, lanes)), spec), [_SYMBOL], False)
    probe = lib.function(_SYMBOL, ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_int64))
    flop_per_iter = 2 * CHAINS * lanes
    n = 1 << 14
    while True:                     # grow n until one call takes about 5 ms
        t = time.perf_counter()
        probe(n)
        dt = time.perf_counter() - t
        if dt > 5e-3 or n >= 1 << 30:
            break
        n *= 4
    n = max(1, int(n * 20e-3 / max(dt, 1e-6)))
    best = min(_timed(probe, n) for _ in range(3))
    return flop_per_iter * n / best


def _timed(probe, n: int) -> float:
    t = time.perf_counter()
    probe(n)
    return time.perf_counter() - t


def peak_flops(dtype: str = "float32", threads: int = 1) -> float:
    """FLOP/s (a fused multiply-add counts two) that ``threads`` threads of this CPU can reach
    in ``dtype`` (``float32`` or ``float64``; 0.0 for any other: no roof known)."""
    if dtype not in _ELEMENT:
        return 0.0
    return _single_thread_peak(dtype) * max(1, threads)
