"""Kernels' heap temporaries kept between calls (backends/llvm/workspace.py) against
allocated and freed on every call, side by side in one process.

    python benchmarks/workspace_temporaries.py [--rounds 15]
    MALLOC_TRIM_THRESHOLD_=65536 python benchmarks/workspace_temporaries.py   # as in Dask
    [TDSL_WORKSPACE=off] python benchmarks/workspace_temporaries.py --model resnet18 --batch 8

Default: a memory-bound kernel whose temporary is 4, 16 and 64 MiB (``B[i] = 2 A[n-1-i] + 1``
through a materialized ``T``), built once and linked twice -- with the workspace cache and
without it (its weak references null: ``aligned_alloc``/``free`` per call, what every
kernel did before) -- checked equal, then timed interleaved (thread CPU time, median of
``--rounds`` rounds of 5 calls).  glibc maps a freed block above its mmap threshold afresh
on the next call (above 32 MiB always; above 128 KiB where ``MALLOC_TRIM_THRESHOLD_`` is
set, as Dask's nanny does), so every call page-faults it.  ``--model``: a ``tdsl.compile``d
model of ``tdsl.testing.models`` at one thread, median forward time; compare a run with
``TDSL_WORKSPACE=off``.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time

import numpy as np

import tdsl as td


def _kernel(n: int):
    A = td.placeholder((n,), "float32", name="A")
    T = td.compute((n,), lambda i: A[i] * 2.0, name="T")
    B = td.compute((n,), lambda i: T[n - 1 - i] + 1.0, name="B")
    return td.build(td.create_schedule(B.op), [A, B], "llvm")


def kernels(rounds: int) -> None:
    from tdsl.backends.llvm import jit
    from tdsl.backends.llvm.module import LLVMModule
    env = os.environ.get("MALLOC_TRIM_THRESHOLD_", "unset")
    print(f"MALLOC_TRIM_THRESHOLD_={env}; per call, ms (thread CPU time, median of {rounds})")
    for n in (1 << 20, 1 << 22, 1 << 24):
        cached = _kernel(n)
        c = cached.compiled
        lib = jit.link(c.obj, c.exports(), c.uses_parallel, needs_workspace=False)
        fresh = LLVMModule(cached.func, cached.target,
                           dataclasses.replace(c, library=lib, cfunc=None, threads_written=None))
        a = np.random.default_rng(0).random(n, dtype=np.float32)
        b1, b2 = np.empty_like(a), np.empty_like(a)
        cached(a, b1)
        fresh(a, b2)
        assert np.array_equal(b1, b2) and np.array_equal(b1, a[::-1] * np.float32(2) + 1)
        times: dict[str, list] = {"cached": [], "fresh": []}
        for _ in range(rounds):
            for name, f in (("cached", cached), ("fresh", fresh)):
                t = time.thread_time()
                for _ in range(5):
                    f(a, b1)
                times[name].append((time.thread_time() - t) / 5 * 1e3)
        m = {k: statistics.median(v) for k, v in times.items()}
        print(f"temporary {4 * n >> 20:3d} MiB: kept {m['cached']:.2f}  allocated per call "
              f"{m['fresh']:.2f}  ({m['fresh'] / m['cached']:.2f}x)", flush=True)


def model(name: str, batch: int, rounds: int) -> None:
    import torch
    from tdsl.testing import models
    torch.set_num_threads(1)
    net, example = models.make(name, batch=batch)
    f = td.compile(net, example, options={"num_threads": 1})
    with torch.no_grad():
        err = float((f(*example) - net(*example)).abs().max())
        ts = []
        for _ in range(rounds):
            t = time.thread_time()
            f(*example)
            ts.append((time.thread_time() - t) * 1e3)
    print(f"{name} batch {batch}, TDSL_WORKSPACE={os.environ.get('TDSL_WORKSPACE', 'on')}, "
          f"MALLOC_TRIM_THRESHOLD_={os.environ.get('MALLOC_TRIM_THRESHOLD_', 'unset')}: "
          f"forward {statistics.median(ts):.1f} ms (median of {rounds}), max |error| {err:.1e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--model", default=None, help="a model of tdsl.testing.models")
    ap.add_argument("--batch", type=int, default=8)
    a = ap.parse_args()
    if a.model:
        model(a.model, a.batch, a.rounds)
    else:
        kernels(a.rounds)


if __name__ == "__main__":
    main()
