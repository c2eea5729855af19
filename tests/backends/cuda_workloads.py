"""CUDA schedules shared by several test files."""
from __future__ import annotations

from typing import Any

import tdsl as td


def register_hungry(v: int = 8) -> "tuple[Any, list]":
    """e4 of the repros: threadIdx.x bound to a symbolic extent (so no __launch_bounds__
    from the schedule), ``v x v`` accumulators a thread (v = 8 spills on sm_90, 2 does not)."""
    m = td.var("m")
    A = td.placeholder((64, 32), name="A")
    B = td.placeholder((32, m), name="B")
    k = td.reduce_axis((0, 32), name="k")
    C = td.compute((64, m), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = td.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    bi, vi = s[C].split(i, factor=v)
    tj, vj = s[C].split(j, factor=v)
    s[C].reorder(bi, tj, vi, vj)
    s[C].bind(bi, td.thread_axis("blockIdx.x"))
    s[C].bind(tj, td.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], tj)
    ci, cj = s[CL].op.axis
    (kk,) = s[CL].op.reduce_axis
    s[CL].reorder(kk, ci, cj)
    s[CL].unroll(ci)
    s[CL].unroll(cj)
    s[C].unroll(vi)
    s[C].unroll(vj)
    return s, [A, B, C]
