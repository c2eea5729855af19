"""TVM as an optional peer (``pip install apache-tvm``): matmul with a hand schedule.

The schedule is the classic "optimize GEMM on CPU" one in TVM's current ``s_tir`` API
(apache-tvm 0.27): B packed into ``(N/bn, K, bn)`` panels by its own stage, a ``bm x bn``
register tile accumulated in a local cache, the K loop split by 4, the tile's columns
vectorized and the row tiles in parallel.  Only ``run.py`` imports this file, and only when
``import tvm`` works.
"""
from __future__ import annotations

from typing import Any, Callable


def _host_target(threads: int) -> Any:
    import tvm
    try:
        import llvmlite.binding as llvm
        llvm.initialize_native_target()
        cpu = llvm.get_host_cpu_name()
    except Exception:
        cpu = "generic"
    return tvm.target.Target({"kind": "llvm", "mcpu": cpu, "num-cores": threads})


def tvm_matmul(n: int, a: Any, b: Any, threads: int, bm: int = 8, bn: int = 32) -> Callable[[], Any]:
    import numpy as np
    import tvm
    from tvm import te
    from tvm.s_tir import Schedule

    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    PB = te.compute((n // bn, n, bn), lambda x, y, z: B[y, x * bn + z], name="PB")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * PB[j // bn, k, j % bn], axis=k), name="C")
    sch = Schedule(te.create_prim_func([A, B, C]))
    c = sch.get_sblock("C")
    wb = sch.cache_write(c, 0, "local")          # c now accumulates in a local tile
    i, j, kk = sch.get_loops(c)
    io, ii = sch.split(i, [None, bm])
    jo, ji = sch.split(j, [None, bn])
    ko, ki = sch.split(kk, [None, 4])
    sch.reorder(io, jo, ko, ki, ii, ji)
    sch.unroll(ii)
    sch.vectorize(ji)
    sch.reverse_compute_at(wb, jo)
    sch.vectorize(sch.get_loops(wb)[-1])
    sch.parallel(sch.fuse(io, jo))
    sch.decompose_reduction(c, ko)
    pb = sch.get_sblock("PB")
    x, y, z = sch.get_loops(pb)
    sch.vectorize(z)
    sch.parallel(x)
    lib = tvm.compile(sch.mod, target=_host_target(threads))
    dev = tvm.cpu(0)
    ta, tb = tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev)
    tc = tvm.runtime.tensor(np.empty((n, n), np.float32), dev)
    fn = lib["main"]
    fn(ta, tb, tc)
    np.testing.assert_allclose(tc.numpy(), a @ b, rtol=1e-3, atol=1e-3 * n ** 0.5)
    return lambda: fn(ta, tb, tc)
