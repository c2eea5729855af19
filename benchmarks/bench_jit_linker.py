"""The JIT's linker: JITLink (what tdsl uses) against RuntimeDyld (what it used before).

The object code is the same either way (the same bytes from the same target machine), so
kernel speed should not change; this checks that, and measures the link and build time.
Every contender runs in this process, in interleaved rounds (``benchmarks/timing.py``):

* kernel time: a 256^3 matmul and a 1024x1024 softmax (``ops`` default schedules) and the
  elementwise ``E = D + (A + B) * C`` over 2^22 floats, each linked by both linkers;
* link time: ``jit.link`` of each kernel's object by each linker (the library released
  right after);
* build time: ``td.build`` of a tiled matmul with no cache (lowering, LLVM, link).

    python benchmarks/bench_jit_linker.py [--rounds 15] [--threads 1]
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time

os.environ["TDSL_CACHE_DIR"] = "off"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import llvmlite.binding as llvm  # noqa: E402
import numpy as np  # noqa: E402

import tdsl as td  # noqa: E402
from tdsl import ops  # noqa: E402
from tdsl.backends.llvm import cache, jit  # noqa: E402
from timing import interleaved  # noqa: E402

LINKERS = {"jitlink": lambda: llvm.create_lljit_compiler(use_jit_link=True),
           "rtdyld": lambda: llvm.create_lljit_compiler()}
#: Two libraries per linker (the same object linked twice): the spread between a linker's
#: two copies shows what code placement alone does to the timing.
COPIES = ("", "'", "\"")


def kernels(target: str) -> dict:
    """name -> (outputs, args, inputs, reference output)."""
    rng = np.random.default_rng(0)
    out = {}
    n = 256
    A, B = td.placeholder((n, n), name="A"), td.placeholder((n, n), name="B")
    a, b = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
    out["matmul 256^3"] = ([ops.matmul(A, B)], [A, B], [a, b], a @ b)
    X = td.placeholder((1024, 1024), name="X")
    x = rng.standard_normal((1024, 1024), np.float32)
    e = np.exp(x - x.max(1, keepdims=True))
    out["softmax 1024x1024"] = ([ops.softmax(X)], [X], [x], e / e.sum(1, keepdims=True))
    m = 1 << 22
    P = [td.placeholder((m,), name=c) for c in "ABCD"]
    E = td.compute((m,), lambda i: P[3][i] + (P[0][i] + P[1][i]) * P[2][i], name="E")
    arrs = [rng.standard_normal(m, np.float32) for _ in range(4)]
    out["elementwise 2^22"] = ([E], P, arrs, arrs[3] + (arrs[0] + arrs[1]) * arrs[2])
    return out


def build_with(engine, outs, args, target):
    jit._engine = engine
    cache.clear_memory()
    s = ops.schedule(outs, target)
    return td.build(s, args + outs, target=target)


def tiled_matmul(k: int):
    n = 128
    A, B = td.placeholder((n, n), name="A"), td.placeholder((n, n), name="B")
    r = td.reduce_axis((0, n), name="r")
    C = td.compute((n, n), lambda i, j: td.sum(A[i, r] * B[r, j] * (1.0 + k), axis=r), name="C")
    s = td.create_schedule(C.op)
    i, j = s[C].op.axis
    io, ii = s[C].split(i, factor=4)
    jo, ji = s[C].split(j, factor=16)
    s[C].reorder(io, jo, r, ii, ji)
    s[C].unroll(ii)
    s[C].vectorize(ji)
    return s, [A, B, C]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = p.parse_args()
    target = f"llvm -num-threads={args.threads}"
    jit.engine()
    engines = {k: make() for k, make in LINKERS.items()}
    print(f"llvmlite {llvm.llvm_version_info}, {args.threads} threads, {args.rounds} rounds; "
          "median ms (ratio rtdyld/jitlink)")

    for name, (outs, ins, arrays, want) in kernels(target).items():
        conts, objs = {}, {}
        res = np.empty(want.shape, np.float32)      # one output array: the same alignment
        for copy in COPIES:
            for lk, eng in (engines.items() if copy else list(engines.items())[::-1]):
                f = build_with(eng, outs, ins, target)
                res.fill(np.nan)
                f(*arrays, res)
                np.testing.assert_allclose(res, want, rtol=1e-3, atol=1e-3)
                conts[lk + copy] = (lambda f=f: f(*arrays, res))
                objs[lk] = f.compiled
        assert objs["jitlink"].obj == objs["rtdyld"].obj, "the linkers got different objects"
        r = interleaved(conts, args.rounds, 0.05)
        med = {k: v["median_s"] * 1e3 for k, v in r.items()}
        j = statistics.median([med["jitlink" + c] for c in COPIES])
        d = statistics.median([med["rtdyld" + c] for c in COPIES])
        each = "  ".join(f"{k} {v:.3f}" for k, v in med.items())
        print(f"  run  {name:20s} jitlink {j:8.3f}  rtdyld {d:8.3f}  ({d / j:.3f})  [{each}]")

        c = objs["jitlink"]

        def link(eng, c=c):
            jit._engine = eng
            jit.link(c.obj, c.exports(), c.uses_parallel,   # released at once
                     needs_workspace=c.uses_workspace)
        r = interleaved({lk: (lambda e=eng: link(e)) for lk, eng in engines.items()},
                        args.rounds, 0.05, settle_s=0.0)
        j, d = r["jitlink"]["median_s"], r["rtdyld"]["median_s"]
        print(f"  link {name:20s} jitlink {j * 1e3:8.3f}  rtdyld {d * 1e3:8.3f}  ({d / j:.3f})")

    times: dict[str, list[float]] = {k: [] for k in engines}
    for k in range(args.rounds):
        for lk in (list(engines) if k % 2 == 0 else list(engines)[::-1]):
            s, a = tiled_matmul(k * 2 + (lk == "rtdyld"))   # distinct kernels: no cache hit
            jit._engine = engines[lk]
            gc.collect()
            t0 = time.perf_counter()
            td.build(s, a, target=target)
            times[lk].append(time.perf_counter() - t0)
    j, d = statistics.median(times["jitlink"]), statistics.median(times["rtdyld"])
    print(f"  build tiled matmul 128^3     jitlink {j * 1e3:8.3f}  rtdyld {d * 1e3:8.3f}  "
          f"({d / j:.3f})")


if __name__ == "__main__":
    main()
