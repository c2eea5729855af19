"""Reductions in the condition of ``if_then_else`` and in its branches (tdsl/compute_body.py):
each is lifted into a stage of its own, and a branch's stage is guarded by the *lifted*
condition (a read of the condition's stage), so no reduction ends up nested in another's
``where=``.  Checked against NumPy through the interpreter and LLVM."""
import numpy as np
import pytest

import tdsl as td
from tdsl.interpreter import run
from tests.guard_pages import guarded_copy
from tests.workloads import random_array
from tests.tdsl.test_compute_body import both


@pytest.mark.parametrize("shape", [(3, 4), (5, 7)])
def test_reduction_in_condition_and_in_a_branch(rng, shape):
    n, m = shape
    A = td.placeholder((n, m), name="A")
    k = td.reduce_axis((0, m), name="k")
    C = td.compute((n, m), lambda i, j: td.if_then_else(
        td.min(A[i, k], axis=k) > -0.5, td.sum(A[i, k], axis=k), A[i, j]), name="C")
    a = random_array(rng, (n, m))
    want = np.where(a.min(1, keepdims=True) > -0.5, a.sum(1, keepdims=True), a)
    for out in both(td.create_schedule(C.op), [A, C], [a, np.zeros((n, m), "float32")], 1):
        np.testing.assert_allclose(out, want, rtol=1e-5)


def test_reductions_in_condition_and_both_branches_nested(rng):
    n, m = 6, 5
    A = td.placeholder((n, m), name="A")
    B = td.placeholder((n, m), name="B")
    k = td.reduce_axis((0, m), name="k")

    def body(i):
        inner = td.if_then_else(td.sum(B[i, k], axis=k) > 0.0,
                                td.max(A[i, k] * B[i, k], axis=k), td.min(B[i, k], axis=k))
        return td.if_then_else(td.max(A[i, k], axis=k) < 0.5, inner, td.sum(A[i, k], axis=k))
    C = td.compute((n,), body, name="C")
    a, b = random_array(rng, (n, m)), random_array(rng, (n, m))
    inner = np.where(b.sum(1) > 0, (a * b).max(1), b.min(1))
    want = np.where(a.max(1) < 0.5, inner, a.sum(1))
    s = td.create_schedule(C.op)
    for out in both(s, [A, B, C], [a, b, np.zeros(n, "float32")], 2):
        np.testing.assert_allclose(out, want, rtol=1e-5)


@pytest.mark.parametrize("n", [1, 4])
def test_outer_guard_protects_the_conditions_reduction(rng, n):
    """``i < size`` guards a condition that reduces over row i: row ``size`` (past A's end)
    is never read, by the condition's stage nor by the branch's."""
    size = td.var("n")
    A = td.placeholder((size, 8), name="A")
    k = td.reduce_axis((0, 8), name="k")
    B = td.compute((size + 1,), lambda i: td.if_then_else(
        i < size,
        td.if_then_else(td.max(A[i, k], axis=k) > 1.0, td.sum(A[i, k], axis=k), -1.0),
        0.0), name="B")
    a = random_array(rng, (n, 8))
    expect = np.append(np.where(a.max(1) > 1.0, a.sum(1), -1.0), 0.0)
    s = td.create_schedule(B.op)
    run(td.lower(s, [A, B]), a, got := np.full(n + 1, np.nan, "float32"))   # bounds-checked
    np.testing.assert_allclose(got, expect, rtol=1e-5)
    got = guarded_copy(np.full(n + 1, np.nan, "float32"))
    td.build(s, [A, B], target="llvm")(guarded_copy(a), got)
    np.testing.assert_allclose(got, expect, rtol=1e-5)


def test_condition_stage_is_shared_by_both_branches():
    A = td.placeholder((4, 6), name="A")
    k = td.reduce_axis((0, 6), name="k")
    C = td.compute((4,), lambda i: td.if_then_else(
        td.min(A[i, k], axis=k) > 0.0, td.sum(A[i, k], axis=k), td.max(A[i, k], axis=k)),
        name="C")
    names = sorted(t.name for t in C.op.input_tensors)
    assert names == ["C.red0", "C.red1", "C.red2"]
