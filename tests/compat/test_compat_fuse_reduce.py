"""A spatial loop fused with a reduction loop (TVM allows it: the fused loop is a
reduction loop, and the reduction's init loops over it too).  Results of the
interpreter and LLVM against NumPy; what cannot run such a loop is refused."""
import numpy as np
import pytest

import tdsl.interpreter
import tvm
from tdsl.errors import ScheduleError
from tvm import te


def _run(s, args, arrays, binds=None):
    """The interpreter and LLVM on copies of ``arrays``; both results."""
    ref = [a.copy() for a in arrays]
    tdsl.interpreter.run(tvm.lower(s, args), *ref)
    got = [a.copy() for a in arrays]
    tvm.build(s, args, "llvm")(*got)
    return ref, got


def _rowsum(n=None, m=5):
    N = te.size_var("n") if n is None else n
    A = te.placeholder((N, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    B = te.compute((N,), lambda i: te.sum(A[i, k] * 2.0, axis=k), name="B")
    return A, B, k


def test_tvm_fuse_of_every_axis_and_the_reduction(rng):
    """TVM's own test: ``fuse(*axis, *reduce_axis)`` of ``Y[i] = sum(X[k])``."""
    n = 10
    X = te.placeholder((n,), dtype="int32", name="X")
    k = te.reduce_axis((0, n))
    Y = te.compute((n,), lambda i: te.sum(X[k], k), name="Y")
    s = te.create_schedule([Y.op])
    f = s[Y.op].fuse(*(list(Y.op.axis) + list(Y.op.reduce_axis)))
    assert s[Y].leaf_iter_vars == [f]
    assert f.kind.value == "reduce"          # as in TVM: the fused loop is a reduction loop
    x = rng.integers(-50, 50, size=n).astype("int32")
    for out in _run(s, [Y, X], [np.zeros(n, "int32"), x]):
        np.testing.assert_array_equal(out[0], np.full(n, x.sum()))


@pytest.mark.parametrize("n", [7, 8, 13])
@pytest.mark.parametrize("factor", [3, 4])
def test_reduction_outside_then_fused_and_split(rng, n, factor):
    """k outside i, fused, split by a factor that may not divide n * 5: the tail guard
    keeps the init and the update in bounds (n symbolic, bound to several values)."""
    A, B, k = _rowsum()
    s = te.create_schedule(B.op)
    i = B.op.axis[0]
    s[B].reorder(k, i)
    fo, fi = s[B].split(s[B].fuse(k, i), factor=factor)
    s[B].unroll(fi)
    a = rng.standard_normal((n, 5)).astype("float32")
    for out in _run(s, [A, B], [a, np.full(n, np.nan, "float32")]):
        np.testing.assert_allclose(out[1], 2 * a.sum(axis=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [6, 9])
def test_inner_part_of_a_split_spatial_loop_fused_with_max(rng, n):
    N = te.size_var("n")
    A = te.placeholder((N, 6), name="A")
    k = te.reduce_axis((0, 6), name="k")
    B = te.compute((N,), lambda i: te.max(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], factor=4)
    f = s[B].fuse(ii, k)
    s[B].parallel(io)
    fo, fi = s[B].split(f, nparts=5)
    a = rng.standard_normal((n, 6)).astype("float32")
    for out in _run(s, [A, B], [a, np.full(n, np.nan, "float32")]):
        np.testing.assert_allclose(out[1], a.max(axis=1), rtol=1e-6)


def test_a_fused_spatial_and_reduction_loop_is_refused_where_it_would_race():
    A, B, k = _rowsum(8)
    s = te.create_schedule(B.op)
    f = s[B].fuse(B.op.axis[0], k)
    with pytest.raises(ScheduleError, match="parallel"):
        s[B].parallel(f)
    with pytest.raises(ScheduleError, match="vectorize"):
        s[B].vectorize(f)
    with pytest.raises(ScheduleError, match="fuses a spatial loop with a reduction loop"):
        s[B].bind(f, te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match="fused with spatial loop"):
        s.rfactor(B, f)


def test_rfactor_of_another_reduction_loop_beside_a_fused_one_is_refused():
    A = te.placeholder((8, 4, 4), name="A")
    k1 = te.reduce_axis((0, 4), name="k1")
    k2 = te.reduce_axis((0, 4), name="k2")
    B = te.compute((8,), lambda i: te.sum(A[i, k1, k2], axis=[k1, k2]), name="B")
    s = te.create_schedule(B.op)
    s[B].fuse(B.op.axis[0], k1)
    with pytest.raises(ScheduleError, match=r"fused with spatial loop\(s\) \['i'"):
        s.rfactor(B, k2)
