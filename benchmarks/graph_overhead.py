"""The graph runtime's per-kernel launch overhead, and tdsl/PyTorch thread-pool interplay.

    python benchmarks/graph_overhead.py [--kernels 200] [--mixed 20] [--repeat 15]

1. Launch overhead: a chain of ``--kernels`` tiny kernels (softmax over 8 floats, one
   kernel each: row ops end kernels) run through ``CompiledGraph``, against the same
   native functions called back to back from a Python loop over prepared arguments, and
   against calling each kernel module directly (``mod(*arrays)``, the checked path).
   Overhead per kernel = (graph call - raw calls) / kernels.
2. Mixed graph: ``--mixed`` blocks of (tdsl dense + tanh) -> (PyTorch matmul fallback),
   with tdsl's idle workers put to sleep before each fallback (``rest_pool=True``, the
   default) and left spinning (``rest_pool=False``), interleaved medians.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from tdsl.graph import compile_graph
from tdsl.graph.builder import Builder


def _median_us(fn, repeat: int, number: int) -> float:
    fn()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        ts.append((time.perf_counter() - t0) / number)
    return statistics.median(ts) * 1e6


def launch_overhead(kernels: int, repeat: int) -> None:
    b = Builder()
    x = b.input((1, 8), name="x")
    y = x
    for _ in range(kernels):
        y = b.op("softmax", y, axis=-1)
    b.output(y)
    cg = compile_graph(b.graph)
    xa = np.random.default_rng(0).standard_normal((1, 8)).astype(np.float32)
    cg(xa)
    ex = next(iter(cg._plans.values()))
    k0 = next(iter(cg.kernels.values()))
    fn = k0.module._cfunc()
    args = [list(a) for a, *_ in ex.patches] or None
    # the same native calls, no graph runtime: one prepared argument list per kernel
    buf = [np.empty((1, 8), np.float32) for _ in range(2)]
    raw_args = [(buf[i % 2].ctypes.data, buf[(i + 1) % 2].ctypes.data) for i in range(kernels)]

    def raw() -> None:
        for a in raw_args:
            fn(*a)

    def checked() -> None:
        m = k0.module
        for i in range(kernels):
            m(buf[i % 2], buf[(i + 1) % 2])
    g = _median_us(lambda: cg(xa), repeat, 20)
    r = _median_us(raw, repeat, 20)
    c = _median_us(checked, repeat, 5)
    print(f"launch: {kernels} kernels ({cg.report.built} built, compile "
          f"{cg.report.compile_s:.1f} s)")
    print(f"  graph call           {g:9.1f} us  = {g / kernels:6.2f} us/kernel")
    print(f"  raw native calls     {r:9.1f} us  = {r / kernels:6.2f} us/kernel")
    print(f"  module(*arrays) each {c:9.1f} us  = {c / kernels:6.2f} us/kernel")
    print(f"  runtime overhead     {(g - r) / kernels:6.2f} us/kernel (graph - raw)")
    del args


def mixed(blocks: int, repeat: int) -> None:
    rng = np.random.default_rng(0)
    d = 256
    ws = [rng.standard_normal((d, d)).astype(np.float32) * 0.05 for _ in range(blocks)]
    wt = torch.from_numpy(rng.standard_normal((d, d)).astype(np.float32) * 0.05)

    def build(rest: bool):
        b = Builder()
        x = b.input((64, d), name="x")
        y = x
        for w in ws:
            y = b.op("tanh", b.op("dense", y, b.const(w)))
            y = b.torch(torch.matmul, [y], (64, d), args=[y, wt], name="matmul")
        b.output(y)
        return compile_graph(b.graph, rest_pool=rest)
    on, off = build(True), build(False)
    xa = rng.standard_normal((64, d)).astype(np.float32)
    np.testing.assert_allclose(on(xa)[0], off(xa)[0], rtol=1e-5, atol=1e-5)
    t_on, t_off, ratio = [], [], []
    for r in range(repeat):    # interleaved rounds, alternating which goes first
        pair = [(on, t_on), (off, t_off)]
        for cg, acc in (pair if r % 2 == 0 else pair[::-1]):
            acc.append(_median_us(lambda: cg(xa), 1, 3))
        ratio.append(t_on[-1] / t_off[-1])
    print(f"mixed: {blocks} x (tdsl dense+tanh -> torch.matmul), 64x{d}, torch threads "
          f"{torch.get_num_threads()}, {repeat} interleaved rounds")
    print(f"  rest_pool=True  (workers sleep before fallbacks) {statistics.median(t_on):9.1f} us")
    print(f"  rest_pool=False (workers keep spinning)          {statistics.median(t_off):9.1f} us")
    print(f"  median per-round ratio True/False: {statistics.median(ratio):.3f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kernels", type=int, default=200)
    p.add_argument("--mixed", type=int, default=20)
    p.add_argument("--repeat", type=int, default=15)
    a = p.parse_args()
    launch_overhead(a.kernels, a.repeat)
    mixed(a.mixed, a.repeat)


if __name__ == "__main__":
    main()
