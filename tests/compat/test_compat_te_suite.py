"""Behaviours TVM's own ``tests/python/te`` files rely on, through the public API:
``fuse()`` with no loops (a new extent-1 loop), ``iter_var_attrs`` and the ``IterVar``
iteration-type codes, ``pragma(iv, "vectorize")``.  Results are checked against NumPy."""
import pickle

import numpy as np
import pytest

import tdsl.interpreter
import tvm
from tvm import te


def _run_both(s, args, arrays):
    """The interpreter and LLVM on copies of ``arrays``; both results."""
    ref = [a.copy() for a in arrays]
    tdsl.interpreter.run(tvm.lower(s, args), *ref)
    got = [a.copy() for a in arrays]
    tvm.build(s, args, "llvm")(*got)
    return ref, got


def test_fuse_of_no_loops_adds_a_singleton_loop(rng):
    A = te.placeholder((), name="A")
    T = te.compute((), lambda: A() * 2.0 + 1.0, name="T")
    s = te.create_schedule(T.op)
    one = s[T].fuse()
    assert [type(r) for r in s[T].relations] == [tvm.te.schedule.Singleton]
    assert tuple(s[T].leaf_iter_vars) == (one,)
    assert isinstance(pickle.loads(pickle.dumps(s)), tvm.te.schedule.Schedule)
    a = np.array(rng.standard_normal(), dtype="float32")
    for out in _run_both(s, [A, T], [a, np.zeros((), "float32")]):
        np.testing.assert_allclose(out[1], a * 2 + 1, rtol=1e-6)


@pytest.mark.parametrize("nparts", [1, 3, 20])
def test_singleton_of_a_full_reduction_can_be_split(rng, nparts):
    X = te.placeholder((13,), dtype="int32", name="X")
    k = te.reduce_axis((0, 13), name="k")
    Y = te.compute((), lambda: te.sum(X[k], k), name="Y")
    s = te.create_schedule(Y.op)
    one = s[Y].fuse(*Y.op.axis)
    assert s[Y].leaf_iter_vars[0] is one and s[Y].leaf_iter_vars[1] is k
    s[Y].split(one, nparts=nparts)
    x = rng.integers(-50, 50, 13).astype("int32")
    for out in _run_both(s, [Y, X], [np.zeros((), "int32"), x]):
        assert out[0] == x.sum()


def test_iter_var_attrs_report_tvm_iteration_types(rng):
    n = te.size_var("n")
    A = te.placeholder((n, 12), name="A")
    T = te.compute((n, 12), lambda i, j: A[i, j] + 1.0, name="T")
    s = te.create_schedule(T.op)
    xo, yo, xi, yi = s[T].tile(T.op.axis[0], T.op.axis[1], x_factor=4, y_factor=4)
    s[T].vectorize(yi)
    s[T].unroll(xi)
    s[T].parallel(xo)
    s[T].pragma(yo, "my_hint", 3)
    IV = tvm.te.schedule.IterVar
    attrs = s[T].iter_var_attrs
    assert attrs[xi].iter_type == IV.Unrolled == 5
    assert attrs[yi].iter_type == IV.Vectorized == 6
    assert attrs[xo].iter_type == IV.Parallelized == 7
    assert attrs[yo].iter_type == IV.DataPar
    assert attrs[yo].pragma_keys[0].value == "my_hint" and attrs[yo].pragma_values == (3,)
    for m in (5, 8):
        a = rng.standard_normal((m, 12)).astype("float32")
        for out in _run_both(s, [A, T], [a, np.zeros((m, 12), "float32")]):
            np.testing.assert_allclose(out[1], a + 1, rtol=1e-6)


def test_pragma_vectorize_and_unroll_are_those_annotations(rng):
    A = te.placeholder((30,), name="A")
    T = te.compute((30,), lambda i: A[i] * 3.0, name="T")
    s = te.create_schedule(T.op)
    xo, xi = s[T].split(T.op.axis[0], factor=10)
    s[T].pragma(xi, "vectorize")
    s[T].pragma(xo, "unroll")
    IV = tvm.te.schedule.IterVar
    assert s[T].iter_var_attrs[xi].iter_type == IV.Vectorized
    assert s[T].iter_var_attrs[xo].iter_type == IV.Unrolled
    assert "vectorized(10)" in str(tvm.lower(s, [A, T]))
    a = rng.standard_normal(30).astype("float32")
    for out in _run_both(s, [A, T], [a, np.zeros(30, "float32")]):
        np.testing.assert_allclose(out[1], a * 3, rtol=1e-6)


def _add():
    A = te.compute((16, 16), lambda i, j: i.astype("float32") * 1.5 + j.astype("float32"), name="A")
    B = te.compute((16, 16), lambda i, j: i.astype("float32") - j.astype("float32") * 0.5, name="B")
    C = te.compute((16, 16), lambda i, j: A[i, j] + B[i, j], name="C")
    return A, B, C


def test_invalid_compute_at_is_refused_by_lower_as_in_tvm(rng):
    A, B, C = _add()
    s = te.create_schedule(C.op)
    s[C].compute_at(s[C], C.op.axis[0])          # TVM accepts the call; lower refuses
    with pytest.raises(RuntimeError, match=r"compute_at: stage 'C': an output"):
        tvm.lower(s, [A, B, C])
    A, B, C = _add()
    s = te.create_schedule(C.op)
    s[A].compute_at(s[C], C.op.axis[0])
    s[C].compute_at(s[A], A.op.axis[0])
    with pytest.raises(RuntimeError, match=r"compute_at.*'C'.*output must be computed whole"):
        tvm.lower(s, [C])
    # placing the stage again makes the schedule valid
    s[C].compute_root()
    i, j = np.meshgrid(np.arange(16), np.arange(16), indexing="ij")
    want = (i * 1.5 + j) + (i - j * 0.5)
    for out in _run_both(s, [C], [np.zeros((16, 16), "float32")]):
        np.testing.assert_allclose(out[0], want, rtol=1e-6)


def test_compute_at_cycle_is_refused_by_lower(rng):
    X = te.placeholder((8,), name="X")
    P = te.compute((8,), lambda i: X[i] * 2.0, name="P")
    Q = te.compute((8,), lambda i: P[i] + 1.0, name="Q")
    R = te.compute((8,), lambda i: Q[i] * Q[i], name="R")
    s = te.create_schedule(R.op)
    s[P].compute_at(s[Q], Q.op.axis[0])
    s[Q].compute_at(s[P], P.op.axis[0])
    with pytest.raises(RuntimeError, match=r"compute_at.*'Q'.*cycle"):
        tvm.lower(s, [X, R])
    s[Q].compute_at(s[R], R.op.axis[0])
    x = rng.standard_normal(8).astype("float32")
    for out in _run_both(s, [X, R], [x, np.zeros(8, "float32")]):
        np.testing.assert_allclose(out[1], (x * 2 + 1) ** 2, rtol=1e-5)


@pytest.mark.parametrize("n", [8, 11])
def test_rfactor_keeps_the_reduce_axes_it_leaves_alone(rng, n):
    """As in TVM: the rfactor stage's reduce axes are the untouched ones first (the same
    IterVar objects, not rebased: k2 starts at 2), then the loops it rebuilds, sharing the
    variables of the loops the user split (``ko``)."""
    N = te.size_var("n")
    k1 = te.reduce_axis((0, N), name="k1")
    k2 = te.reduce_axis((2, N), name="k2")          # starts at 2: kept as is, not rebased
    A = te.placeholder((N, N, N), name="A")
    B = te.compute((N,), lambda i: te.sum(A[i, k1, k2], axis=[k1, k2]), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k1, factor=4)
    BF = s.rfactor(B, ki)
    red = BF.op.body[0].axis
    assert len(red) == 2 and red[0] is k2
    assert red[1].var is ko.var and red[1] is not ko
    assert list(BF.op.reduce_axis) == list(red)
    a = rng.standard_normal((n, n, n)).astype("float32")
    want = a[:, :, 2:].sum(axis=(1, 2))
    for out in _run_both(s, [A, B], [a, np.zeros(n, "float32")]):
        np.testing.assert_allclose(out[1], want, rtol=1e-4, atol=1e-4)
    s = te.create_schedule(B.op)
    BF = s.rfactor(B, k1)
    assert list(BF.op.body[0].axis) == [k2] and BF.op.body[0].axis[0] is k2
    for out in _run_both(s, [A, B], [a, np.zeros(n, "float32")]):
        np.testing.assert_allclose(out[1], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [7, 16])
def test_int_operands_of_float_operations_are_cast_as_in_tvm(rng, n):
    import tdsl as td
    from tdsl.errors import DTypeError
    N = te.size_var("n")
    v = te.var("v", "int32")
    x = te.placeholder((N,), name="x")
    z = te.compute((N,), lambda i: x[i] * v + i * 1.5 - 2 * i, name="z")
    assert z.dtype == "float32"
    s = te.create_schedule(z.op)
    f = tvm.build(s, [x, z, v], "llvm")
    a = rng.standard_normal(n).astype("float32")
    out = np.zeros(n, "float32")
    f(a, out, 3)
    i = np.arange(n, dtype="float32")
    np.testing.assert_allclose(out, a * 3 + i * 1.5 - 2 * i, rtol=1e-5, atol=1e-5)
    # tdsl's own compute keeps refusing the implicit cast, and the rule ends with the call
    with pytest.raises(DTypeError, match=r"mixes dtypes float32 and int"):
        td.compute((N,), lambda i: x[i] * v, name="y")
    with pytest.raises(DTypeError, match=r"mixes dtypes"):
        x[0] * v


def test_lambda_over_fewer_axes_without_an_intrinsic_is_refused_by_name(rng):
    """A lambda over the leading axes must apply a tensor intrinsic to slices (TVM's
    TensorComputeOp, tests/compat/test_compat_tensor_compute.py); anything else is named in
    the refusal; a lambda over every axis (or ``*i``) still builds."""
    A = te.placeholder((4, 16), name="A")
    with pytest.raises(tvm.TVMError, match=r"takes 1; .*apply a tensor intrinsic to slices"):
        te.compute((4, 16), lambda i: A[i, 0:16])
    with pytest.raises(tvm.TVMError, match=r"sliced .* only an argument of a tensor intrinsic"):
        te.compute((4, 16), lambda i, j: A[i, 0:16] * 2.0)
    with pytest.raises(tvm.TVMError, match=r"lambda takes 2 argument"):
        te.compute((4,), lambda i, j: A[i, j])
    B = te.compute((4, 16), lambda *i: A(*i) * 3.0, name="B")
    C = te.compute((4, 16), lambda i, j: B[i, j] - A[i, j], name="C")
    a = rng.standard_normal((4, 16)).astype("float32")
    for out in _run_both(te.create_schedule(C.op), [A, C], [a, np.zeros((4, 16), "float32")]):
        np.testing.assert_allclose(out[1], a * 2, rtol=1e-6)
