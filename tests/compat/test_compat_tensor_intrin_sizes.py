"""A tensor intrinsic declared over sizes (``te.var("n")``), as TVM allows: each
tensorized region fixes the sizes from the loops it replaces (one intrinsic, several
region shapes).  The interpreter and LLVM run the declared computation; checked
against NumPy, with symbolic stage sizes bound to several values."""
import numpy as np
import pytest

import tdsl as td
import tdsl.interpreter
from tdsl.errors import ScheduleError, ShapeError
from tvm import te

from .helpers import run_both


def _vmuladd():
    n = te.var("n")
    x = te.placeholder((n,), name="x")
    y = te.placeholder((n,), name="y")
    z = te.compute((n,), lambda i: x[i] * y[i] + x[i], name="z")
    return te.decl_tensor_intrin(z.op, name="vmuladd"), n


def _gemv():
    m, l = te.var("m"), te.var("l")
    a = te.placeholder((l,), name="a")
    b = te.placeholder((m, l), name="b")
    k = te.reduce_axis((0, l), name="k")
    c = te.compute((m,), lambda i: te.sum(a[k] * b[i, k], axis=k), name="c")
    return te.decl_tensor_intrin(c.op, name="gemv")


@pytest.mark.parametrize("rows", [1, 3, 5])
@pytest.mark.parametrize("factor", [8, 16])
def test_elementwise_intrinsic_over_a_size(rng, rows, factor):
    """Rows of 48 (a symbolic count of them), each in pieces of ``factor``: the intrinsic's
    n is 8 in one schedule and 16 in the other."""
    intrin, n = _vmuladd()
    assert intrin.extents == [n]
    R = te.size_var("R")
    X = te.placeholder((R, 48), name="X")
    Y = te.placeholder((R, 48), name="Y")
    Z = te.compute((R, 48), lambda r, i: X[r, i] * Y[r, i] + X[r, i], name="Z")
    s = te.create_schedule(Z.op)
    xo, xi = s[Z].split(Z.op.axis[1], factor=factor)
    s[Z].tensorize(xi, intrin)
    x = rng.standard_normal((rows, 48)).astype("float32")
    y = rng.standard_normal((rows, 48)).astype("float32")
    for out in run_both(s, [X, Y, Z], [x, y, np.full((rows, 48), np.nan, "float32")]):
        np.testing.assert_allclose(out[2], x * y + x, rtol=1e-6)


@pytest.mark.parametrize("rows,depth", [(4, 12), (2, 6), (8, 3)])
def test_reduction_intrinsic_over_two_sizes(rng, rows, depth):
    """C[i, j] = sum_k A[i, k] * B[j, k]: the (j.inner, k.inner) nest is one gemv whose
    sizes m, l the split factors fix (several shapes from one declaration)."""
    intrin = _gemv()
    N, J, K = 5, 16, 24
    A = te.placeholder((N, K), name="A")
    B = te.placeholder((J, K), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((N, J), lambda i, j: te.sum(A[i, k] * B[j, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    jo, ji = s[C].split(j, factor=rows)
    ko, ki = s[C].split(k, factor=depth)
    s[C].reorder(i, jo, ko, ji, ki)
    s[C].tensorize(ji, intrin)
    a = rng.standard_normal((N, K)).astype("float32")
    b = rng.standard_normal((J, K)).astype("float32")
    for out in run_both(s, [A, B, C], [a, b, np.full((N, J), np.nan, "float32")]):
        np.testing.assert_allclose(out[2], a @ b.T, rtol=1e-4, atol=1e-4)


def test_a_size_fixed_twice_differently_is_refused():
    n = te.var("n")
    x = te.placeholder((n, n), name="x")
    z = te.compute((n, n), lambda i, j: x[i, j] * 2.0, name="z")
    intrin = te.decl_tensor_intrin(z.op, name="square")
    X = te.placeholder((8, 8), name="X")
    Z = te.compute((8, 8), lambda i, j: X[i, j] * 2.0, name="Z")
    s = te.create_schedule(Z.op)
    jo, ji = s[Z].split(Z.op.axis[1], factor=4)
    s[Z].reorder(jo, Z.op.axis[0], ji)
    with pytest.raises(ScheduleError, match=r"size 'n' would be both 8 and 4"):
        s[Z].tensorize(Z.op.axis[0], intrin)


def test_an_extent_no_loop_fixes_is_refused():
    n = te.var("n")
    x = te.placeholder((2 * n,), name="x")
    z = te.compute((2 * n,), lambda i: x[i] + 1.0, name="z")
    intrin = te.decl_tensor_intrin(z.op, name="twice")
    X = te.placeholder((16,), name="X")
    Z = te.compute((16,), lambda i: X[i] + 1.0, name="Z")
    s = te.create_schedule(Z.op)
    xo, xi = s[Z].split(Z.op.axis[0], factor=8)
    with pytest.raises(ScheduleError, match=r"is not fixed by the loops it replaces"):
        s[Z].tensorize(xi, intrin)


def test_tdsl_intrinsic_over_a_size_matches_loops_of_that_extent(rng):
    n = td.var("n")
    a = td.placeholder((n,), name="a")
    c = td.compute((n,), lambda i: a[i] * 2.0, name="c")
    intrin = td.decl_tensor_intrin(c.op, name="twice")
    A = td.placeholder((12,), name="A")
    C = td.compute((12,), lambda i: A[i] * 2.0, name="C")
    s = td.create_schedule(C.op)
    co, ci = s[C].split(C.op.axis[0], factor=6)
    s[C].tensorize(ci, intrin)
    x = rng.standard_normal(12).astype("float32")
    for out in run_both(s, [A, C], [x, np.full(12, np.nan, "float32")]):
        np.testing.assert_allclose(out[1], 2 * x, rtol=1e-6)


def test_scalar_params_and_calling_an_intrinsic_are_refused_clearly():
    n, v = te.var("n"), te.var("v")
    x = te.placeholder((n,), name="x")
    z = te.compute((n,), lambda i: x[i] * v, name="z")
    with pytest.raises(ScheduleError, match="scalar_params"):
        te.decl_tensor_intrin(z.op, scalar_params=[v])
    intrin = te.decl_tensor_intrin(z.op, name="scale")
    A = te.placeholder((10,), name="A")
    with pytest.raises(ShapeError, match=r"'scale': arguments are slices of tensors"):
        te.compute((10,), lambda i: intrin(A[i], i), name="C")
