"""Workloads the CLI test tunes (``tdsl tune tests/autotune/cli_workload.py:matmul``)."""
import tdsl as td


def matmul():
    A = td.placeholder((64, 64), "float32", name="A")
    B = td.placeholder((64, 64), "float32", name="B")
    k = td.reduce_axis((0, 64), name="k")
    C = td.compute((64, 64), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B, C]
