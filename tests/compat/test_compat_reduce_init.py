"""``init=`` of ``te.sum`` / a ``comm_reducer`` through ``rfactor``, as TVM does it: the
partial results start from the reducer's identity and the merge starts from ``init``.
Interpreter and LLVM against NumPy, with split factors that do and do not divide."""
import numpy as np
import pytest

import tvm
from tdsl.errors import ScheduleError
from tvm import te

from .helpers import run_both


@pytest.mark.parametrize("n,m", [(5, 16), (7, 13), (3, 4)])
@pytest.mark.parametrize("factor_axis", [0, 1])
def test_rfactor_of_a_sum_with_an_init_tensor(rng, n, m, factor_axis):
    N, M = te.size_var("n"), te.size_var("m")
    A = te.placeholder((N, M), name="A")
    C0 = te.placeholder((N,), name="C0")
    k = te.reduce_axis((0, M), name="k")
    B = te.compute((N,), lambda i: te.sum(A[i, k], axis=k, init=C0[i] * 2.0), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=4)
    BF = s.rfactor(B, ki, factor_axis=factor_axis)
    s[BF].parallel(BF.op.axis[factor_axis])
    a = rng.standard_normal((n, m)).astype("float32")
    c = rng.standard_normal(n).astype("float32")
    for out in run_both(s, [A, C0, B], [a, c, np.full(n, np.nan, "float32")]):
        np.testing.assert_allclose(out[2], a.sum(axis=1) + 2 * c, rtol=1e-5, atol=1e-5)


def test_rfactor_of_a_max_with_a_constant_init_above_some_rows(rng):
    A = te.placeholder((6, 10), name="A")
    k = te.reduce_axis((0, 10), name="k")
    B = te.compute((6,), lambda i: te.max(A[i, k], axis=k, init=0.5), name="B")
    s = te.create_schedule(B.op)
    BF = s.rfactor(B, s[B].split(k, nparts=3)[0])
    a = rng.uniform(-1, 1, (6, 10)).astype("float32")
    a[2] -= 2.0                               # this row's max is below the init
    for out in run_both(s, [A, B], [a, np.full(6, np.nan, "float32")]):
        np.testing.assert_allclose(out[1], np.maximum(a.max(axis=1), 0.5), rtol=1e-6)
    assert BF.op.body[0].init == () and B.op.body[0].init


def test_rfactor_of_a_tuple_reducer_with_init(rng):
    """An argmax ``comm_reducer`` whose init is a (-1, 0.0) pair: a row with no positive
    value keeps index -1."""
    def fcombine(x, y):
        take = x[1] >= y[1]
        return tvm.tir.Select(take, x[0], y[0]), tvm.tir.Select(take, x[1], y[1])

    def fidentity(t0, t1):
        return tvm.tir.const(-1, t0), tvm.te.min_value(t1)

    argmax = te.comm_reducer(fcombine, fidentity, name="argmax")
    n, m = 5, 11
    idx = te.placeholder((n, m), dtype="int32", name="idx")
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    T0, T1 = te.compute((n,), lambda i: argmax((idx[i, k], A[i, k]), axis=k,
                                               init=(tvm.tir.const(-1, "int32"),
                                                     tvm.tir.const(0.0, "float32"))), name="T")
    s = te.create_schedule(T0.op)
    ko, ki = s[T0].split(k, factor=4)
    s.rfactor(T0, ki)
    a = rng.standard_normal((n, m)).astype("float32")
    a[3] = -np.abs(a[3]) - 0.1
    ii = np.tile(np.arange(m, dtype="int32"), (n, 1))
    want_v = np.maximum(a.max(axis=1), 0.0)
    want_i = np.where(a.max(axis=1) > 0, a.argmax(axis=1), -1)
    for out in run_both(s, [idx, A, T0, T1], [ii, a, np.zeros(n, "int32"), np.zeros(n, "float32")]):
        np.testing.assert_array_equal(out[2], want_i)
        np.testing.assert_allclose(out[3], want_v, rtol=1e-6)


def test_a_reduction_with_init_is_still_not_reduced_across_threads():
    A = te.placeholder((4, 32), name="A")
    k = te.reduce_axis((0, 32), name="k")
    B = te.compute((4,), lambda i: te.sum(A[i, k], axis=k, init=1.0), name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(ScheduleError, match="init= cannot be reduced across threads"):
        s[B].bind(k, te.thread_axis("threadIdx.x"))
