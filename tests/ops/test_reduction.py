"""Reductions on "llvm" against NumPy: every axis (contiguous or not), keepdims, symbolic
sizes that are not multiples of the vector lanes, integer and float dtypes."""
from __future__ import annotations

import numpy as np
import pytest

import tdsl as td
from tdsl import ops
from tdsl.errors import DTypeError, ShapeError

from .helpers import build, check, randint, randn

REDUCTIONS = [("sum", ops.sum, np.sum), ("max", ops.max, np.max), ("min", ops.min, np.min),
              ("mean", ops.mean, np.mean), ("prod", ops.prod, np.prod)]


@pytest.mark.parametrize("name,op,ref", REDUCTIONS, ids=[r[0] for r in REDUCTIONS])
@pytest.mark.parametrize("axis,keepdims", [(1, False), (0, False), (2, True), ((0, 2), False),
                                           (None, False)])
def test_reduce_axes_symbolic(name, op, ref, axis, keepdims):
    n = td.var("n")
    A = td.placeholder((n, 3, 37), name="A")
    f = build(op(A, axis=axis, keepdims=keepdims), [A])
    for size in (1, 5):
        a = randn(size, 3, 37)
        if name == "prod":
            a = (1 + 0.05 * a).astype("float32")
        exp = np.asarray(ref(a.astype(np.float64), axis=axis, keepdims=keepdims), dtype="float32")
        if axis is None:
            exp = exp.reshape(1)
        check(f, [a], exp, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("m", [1, 16, 33, 100])
def test_row_sum_and_max_sizes(m):
    A = td.placeholder((6, m), name="A")
    f = build([ops.sum(A, axis=1), ops.max(A, axis=-1)], [A])
    a = randn(6, m)
    check(f, [a], [a.sum(1), a.max(1)], rtol=1e-5, atol=1e-5)


def test_integer_sum():
    n = td.var("n")
    A = td.placeholder((n, 40), "int32", name="A")
    f = build([ops.sum(A, axis=1), ops.max(A, axis=0)], [A])
    a = randint(-1000, 1000, 7, 40)
    check(f, [a], [a.sum(1).astype("int32"), a.max(0)])


@pytest.mark.parametrize("op,ref", [(ops.argmax, np.argmax), (ops.argmin, np.argmin)])
@pytest.mark.parametrize("axis", [0, 1, None])
def test_argmax_argmin(op, ref, axis):
    n = td.var("n")
    A = td.placeholder((n, 23), name="A")
    f = build(op(A, axis=axis), [A])
    for rows in (1, 6):
        a = np.round(randn(rows, 23) * 2).astype("float32")  # many ties: first index wins
        exp = np.asarray(ref(a, axis=axis)).astype("int64")
        check(f, [a], exp.reshape(1) if axis is None else exp)


@pytest.mark.parametrize("op,ref", [(ops.argmax, np.argmax), (ops.argmin, np.argmin)])
@pytest.mark.parametrize("cols", [8, 23, 64])
def test_argmax_argmin_special_values_follow_numpy(op, ref, cols):
    """Rows of -inf/+inf, NaN anywhere (the first NaN wins), all-NaN rows: the index NumPy
    gives.  (A row of -inf gave -1, the reducer's identity, and NaN was skipped.)"""
    rows = 9
    A = td.placeholder((rows, cols), name="A")
    a = randn(rows, cols)
    a[0, :] = -np.inf
    a[1, :] = np.inf
    a[2, cols // 2] = np.nan
    a[3, [1, cols - 1]] = np.nan
    a[4, :] = np.nan
    a[5, :] = 0.0
    a[6, ::3] = -np.inf
    a[7, ::2] = np.inf
    exp = ref(a, axis=1).astype("int64")
    check(build(op(A, axis=1), [A]), [a], exp)
    # through the interpreter too (the reference semantics)
    import tdsl.interpreter
    s = ops.schedule([op(A, axis=1)], "llvm")
    out = np.full(rows, 7, "int64")
    args = [A, s.outputs[0].output(0)]
    tdsl.interpreter.run(td.lower(s, args), a, out)
    np.testing.assert_array_equal(out, exp)


def test_argmax_keepdims():
    A = td.placeholder((4, 9), name="A")
    f = build(ops.argmax(A, axis=1, keepdims=True), [A])
    a = randn(4, 9)
    check(f, [a], np.argmax(a, axis=1, keepdims=True).astype("int64"))


def test_reduction_then_elementwise_is_one_pass_per_row():
    """sum(x, axis=1) * 2 + 1: the reduction is computed inside the output's row loop."""
    A = td.placeholder((64, 128), name="A")
    out = ops.add(ops.multiply(ops.sum(A, axis=1), 2.0), 1.0)
    s = ops.schedule(out)
    text = td.lower(s, [A, out]).script()
    assert text.count("parallel(") == 1
    f = td.build(s, [A, out])
    a = randn(64, 128)
    check(f, [a], a.sum(1) * 2 + 1, rtol=1e-5, atol=1e-4)


def test_errors():
    A = td.placeholder((4, 6), name="A")
    with pytest.raises(ShapeError):
        ops.sum(A, axis=2)
    with pytest.raises(ShapeError):
        ops.sum(A, axis=(0, 0))
    with pytest.raises(DTypeError):
        ops.mean(td.placeholder((4,), "int32", name="I"))
