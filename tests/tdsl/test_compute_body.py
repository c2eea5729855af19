"""What td.compute checks and normalizes in a body (tdsl/compute_body.py), deep
expressions (tdsl/deep.py), dtype names in min_value/max_value, and integer division by
zero (docs/ir.md): each checked against NumPy through the interpreter and LLVM."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tdsl as td
from tdsl.deep import MAX_EXPR_DEPTH, deep_recursion
from tdsl.errors import ScheduleError, TDSLError
from tdsl.interpreter import run
from tdsl.structural import structural_hash
from tests.guard_pages import guarded_copy
from tests.workloads import random_array


def both(s, args, arrays, out_index):
    """The output ``out_index`` through the interpreter and through LLVM."""
    res = []
    for mode in ("interp", "llvm"):
        arrs = [a.copy() for a in arrays]
        if mode == "interp":
            run(td.lower(s, args), *arrs)
        else:
            td.build(s, args, target="llvm")(*arrs)
        res.append(arrs[out_index])
    return res


# ---- scoping of axes ---------------------------------------------------------------------------
def test_reduce_axis_listed_twice_is_refused():
    A = td.placeholder((9,), name="A")
    k = td.reduce_axis((0, 9), name="k")
    with pytest.raises(TDSLError, match=r"compute 'C': reduce axis 'k' is listed twice"):
        td.compute((1,), lambda i: td.sum(A[k], axis=[k, k]), name="C")


def test_unlisted_reduce_axis_is_refused_at_compute():
    A = td.placeholder((9, 9), name="A")
    k, k2 = td.reduce_axis((0, 9), name="k"), td.reduce_axis((0, 9), name="k2")
    with pytest.raises(TDSLError, match=r"compute 'C': variable 'k2' is not bound"):
        td.compute((9,), lambda i: td.sum(A[i, k] + A[i, k2], axis=k), name="C")


def test_reduce_axis_outside_its_reduction_is_refused():
    A = td.placeholder((9, 9), name="A")
    k = td.reduce_axis((0, 9), name="k")
    with pytest.raises(TDSLError, match=r"compute 'C': variable 'k' is a reduce axis used "
                       r"outside the reduction"):
        td.compute((9,), lambda i: td.sum(A[i, k], axis=k) + A[i, k], name="C")
    with pytest.raises(TDSLError, match=r"compute 'D': variable 'k' is a reduce axis used "
                       r"outside"):   # init= is evaluated before the reduction loop
        td.compute((9,), lambda i: td.sum(A[i, k], axis=k, init=A[i, k]), name="D")


def test_data_axis_of_another_compute_is_refused():
    A = td.placeholder((9,), name="A")
    X = td.compute((9,), lambda j: A[j], name="X")
    j = X.op.axis[0]
    with pytest.raises(TDSLError, match=r"compute 'C': variable 'j' is not bound"):
        td.compute((9,), lambda i: A[j], name="C")


def test_symbolic_sizes_stay_legal_in_bodies(rng):
    n = td.var("n")
    A = td.placeholder((n,), name="A")
    C = td.compute((n,), lambda i: A[i] * n.astype("float32"), name="C")
    a = random_array(rng, (6,))
    for out in both(td.create_schedule(C.op), [A, C], [a, np.zeros(6, "float32")], 1):
        np.testing.assert_allclose(out, a * 6, rtol=1e-6)


# ---- each op owns its reduce axes --------------------------------------------------------------
@pytest.mark.parametrize("attach", [False, True])
def test_shared_reduce_axis_gets_a_copy_per_compute(attach, rng):
    M, K = 4, 5
    A = td.placeholder((M, K, K), name="A")
    k = td.reduce_axis((0, K), name="k")
    D = td.compute((M, K), lambda i, j: td.sum(A[i, j, k], axis=k), name="D")
    C = td.compute((M,), lambda i: td.sum(D[i, k] * (k + 1).astype("float32"), axis=k), name="C")
    assert D.op.reduce_axis[0] is k                      # the first compute keeps the axis
    kc = C.op.reduce_axis[0]
    assert kc is not k and kc.var is not k.var and kc.name == "k"
    assert kc.dom.min is k.dom.min and kc.dom.extent is k.dom.extent
    s = td.create_schedule(C.op)
    if attach:
        s[D].compute_at(s[C], C.op.reduce_axis[0])
    a = random_array(rng, (M, K, K))
    want = (a.sum(2) * (np.arange(K) + 1)).sum(1)
    for out in both(s, [A, C], [a, np.zeros(M, "float32")], 1):
        np.testing.assert_allclose(out, want, rtol=1e-5)


def test_shared_reduce_axis_original_is_not_a_loop_of_the_second_stage():
    A = td.placeholder((4, 5), name="A")
    k = td.reduce_axis((0, 5), name="k")
    D = td.compute((4,), lambda i: td.sum(A[i, k], axis=k), name="D")
    C = td.compute((4,), lambda i: td.sum(A[i, k] * D[i], axis=k), name="C")
    s = td.create_schedule(C.op)
    with pytest.raises(ScheduleError, match=r"split: stage 'C', loop 'k'"):
        s[C].split(k, factor=2)
    s[C].split(C.op.reduce_axis[0], factor=2)


# ---- reductions inside expressions become stages ---------------------------------------------
def test_mean_lifts_the_sum_into_a_stage(rng):
    n, m = 7, 5
    X = td.placeholder((n, m), name="X")
    k = td.reduce_axis((0, m), name="k")
    M = td.compute((n,), lambda i: td.sum(X[i, k], axis=k) / float(m), name="M")
    (red,) = M.op.input_tensors
    assert red.op.name == "M.red0" and red.op.reduce_axis[0] is k and not M.op.reduce_axis
    x = random_array(rng, (n, m))
    for out in both(td.create_schedule(M.op), [X, M], [x, np.zeros(n, "float32")], 1):
        np.testing.assert_allclose(out, x.mean(1), rtol=1e-5)


def test_two_reductions_sharing_an_axis_and_a_schedulable_lifted_stage(rng):
    n, m = 7, 5
    X = td.placeholder((n, m), name="X")
    k = td.reduce_axis((0, m), name="k")
    S = td.compute((n,), lambda i: td.sum(X[i, k], axis=k) + td.exp(td.max(X[i, k], axis=k)),
                   name="S")
    r0, r1 = sorted(S.op.input_tensors, key=lambda t: t.name)
    assert (r0.name, r1.name) == ("S.red0", "S.red1")
    assert r0.op.reduce_axis[0] is not r1.op.reduce_axis[0]
    s = td.create_schedule(S.op)
    io, _ = s[S].split(S.op.axis[0], factor=3)        # 7 does not divide by 3
    s[r1].compute_at(s[S], io)
    ko, _ = s[r0].split(r0.op.reduce_axis[0], factor=2)
    x = random_array(rng, (n, m))
    for out in both(s, [X, S], [x, np.zeros(n, "float32")], 1):
        np.testing.assert_allclose(out, x.sum(1) + np.exp(x.max(1)), rtol=1e-5)


def test_lifted_argmax_where_and_init(rng):
    n, m = 6, 9
    X = td.placeholder((n, m), name="X")
    k = td.reduce_axis((0, m), name="k")
    argmax = td.comm_reducer(
        lambda x, y: (td.if_then_else(x[1] >= y[1], x[0], y[0]),
                      td.if_then_else(x[1] >= y[1], x[1], y[1])),
        lambda t0, t1: (td.const(-1, t0), td.min_value(t1)), name="argmax")
    I = td.compute((n,), lambda i: argmax((k.var.astype("int32"), X[i, k]), axis=k)[0] * 2,
                   name="I")
    W = td.compute((n,), lambda i: 1.0 + td.sum(X[i, k], axis=k, where=k < 4, init=X[i, 0]),
                   name="W")
    x = random_array(rng, (n, m))
    for out in both(td.create_schedule(I.op), [X, I], [x, np.zeros(n, "int32")], 1):
        np.testing.assert_array_equal(out, x.argmax(1) * 2)
    for out in both(td.create_schedule(W.op), [X, W], [x, np.zeros(n, "float32")], 1):
        np.testing.assert_allclose(out, 1.0 + x[:, 0] + x[:, :4].sum(1), rtol=1e-5)


@pytest.mark.parametrize("n", [1, 4])
def test_lifted_reduction_under_a_guard_reads_only_where_the_branch_is_taken(rng, n):
    """The guard of if_then_else joins the lifted reduction's condition (lazily, before a
    where= that loads), so row n of A -- past its end -- is never read."""
    size = td.var("n")
    A = td.placeholder((size, 8), name="A")
    k = td.reduce_axis((0, 8), name="k")
    B = td.compute((size + 1,), lambda i: td.if_then_else(
        i < size, td.sum(A[i, k], axis=k, where=A[i, k] > 0), 0.0), name="B")
    a = random_array(rng, (n, 8))
    expect = np.append(np.where(a > 0, a, 0).sum(1), 0.0)
    s = td.create_schedule(B.op)
    run(td.lower(s, [A, B]), a, got := np.full(n + 1, np.nan, "float32"))   # bounds-checked
    np.testing.assert_allclose(got, expect, rtol=1e-5)
    got = guarded_copy(np.full(n + 1, np.nan, "float32"))
    td.build(s, [A, B], target="llvm")(guarded_copy(a), got)
    np.testing.assert_allclose(got, expect, rtol=1e-5)


def test_lifted_reduction_runs_over_the_axes_it_uses_and_ranges_that_depend_on_them(rng):
    A = td.placeholder((5, 7), name="A")
    k = td.reduce_axis((0, 7), name="k")
    B = td.compute((5, 7), lambda i, j: A[i, j] / td.sum(A[i, k], axis=k), name="B")
    (red,) = [t for t in B.op.input_tensors if t.name == "B.red0"]
    assert [iv.name for iv in red.op.axis] == ["i"]          # one sum per row, not per element
    a = np.abs(random_array(rng, (5, 7)))
    for out in both(td.create_schedule(B.op), [A, B], [a, np.zeros((5, 7), "float32")], 1):
        np.testing.assert_allclose(out, a / a.sum(1, keepdims=True), rtol=1e-5)

    def prefix(i):   # a triangular range: the reduce axis's extent uses the data axis
        r = td.reduce_axis((0, i + 1), name="r")
        return td.sum(A[i, r], axis=r) * 2.0
    P = td.compute((5,), prefix, name="P")
    for out in both(td.create_schedule(P.op), [A, P], [a, np.zeros(5, "float32")], 1):
        np.testing.assert_allclose(out, [a[i, :i + 1].sum() * 2 for i in range(5)], rtol=1e-5)


# ---- deep expressions ----------------------------------------------------------------------------
def test_5000_deep_chain_through_every_pass(rng):
    W = 5000
    A = td.placeholder((3, W), name="A")
    C = td.compute((3,), lambda i: sum(A[i, j] for j in range(W)), name="C")  # noqa: C417
    s = td.create_schedule(C.op)
    f = td.lower(s, [A, C])
    assert "A[i, 4999]" in str(f) and "A[i, 4999]" in repr(C.op.body[0])
    assert structural_hash(f) == structural_hash(td.lower(td.create_schedule(C.op), [A, C]))
    a = random_array(rng, (3, W))
    want = np.zeros(3, "float32")
    for j in range(W):                      # the same left-to-right float32 order
        want = want + a[:, j] if j else a[:, 0].copy()
    for out in both(s, [A, C], [a, np.zeros(3, "float32")], 1):
        np.testing.assert_allclose(out, want, rtol=1e-6)


def test_too_deep_is_a_tdsl_error():
    A = td.placeholder((MAX_EXPR_DEPTH + 5,), name="A")
    with pytest.raises(TDSLError, match=r"compute 'C': the expression is nested \d+ levels "
                       r"deep; tdsl supports up to"):
        td.compute((1,), lambda i: sum(A[j] for j in range(MAX_EXPR_DEPTH + 5)), name="C")


def test_runaway_recursion_in_a_wrapped_pass_is_a_tdsl_error_not_a_crash():
    def through_generators(n):
        return sum(through_generators(n + 1) for _ in range(1))
    import sys
    limit = sys.getrecursionlimit()
    with pytest.raises(TDSLError, match=r"nested too deeply"):
        deep_recursion(through_generators)(0)
    assert sys.getrecursionlimit() == limit


@settings(max_examples=8, deadline=None)
@given(depth=st.integers(1100, 2500), op=st.sampled_from(["+", "*", "max"]))
def test_deep_chains_interpreter_matches_numpy(depth, op):
    rng = np.random.default_rng(depth)
    A = td.placeholder((2, depth), name="A")

    def chain(i):
        e = A[i, 0]
        for j in range(1, depth):
            e = e + A[i, j] if op == "+" else e * A[i, j] if op == "*" else td.maximum(e, A[i, j])
        return e
    C = td.compute((2,), chain, name="C")
    a = random_array(rng, (2, depth), low=0.999, high=1.001) if op == "*" \
        else random_array(rng, (2, depth))
    want = a[:, 0].copy()
    for j in range(1, depth):
        want = want + a[:, j] if op == "+" else want * a[:, j] if op == "*" \
            else np.maximum(want, a[:, j])
    out = np.zeros(2, "float32")
    run(td.lower(td.create_schedule(C.op), [A, C]), a, out)
    np.testing.assert_allclose(out, want, rtol=1e-5)


# ---- min_value / max_value take dtype names -------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "int8", "uint8", "int64", "bool", td.DType.INT32,
                                   np.float16])
def test_min_max_value_accept_dtype_names(dtype):
    lo, hi = td.min_value(dtype), td.max_value(dtype)
    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    assert str(lo.dtype) == name and str(hi.dtype) == name
    if np.dtype(name).kind in "iu":
        assert (lo.value, hi.value) == (np.iinfo(name).min, np.iinfo(name).max)


# ---- integer division by zero -------------------------------------------------------------------
_DIV_KERNELS = {}


def _div_kernels(dtype):
    if dtype not in _DIV_KERNELS:
        A = td.placeholder((8,), dtype, name="A")
        B = td.placeholder((8,), dtype, name="B")
        Q = td.compute((8,), lambda i: A[i] // B[i], name="Q")
        R = td.compute((8,), lambda i: A[i] % B[i], name="R")
        s = td.create_schedule([Q.op, R.op])
        args = [A, B, Q, R]
        _DIV_KERNELS[dtype] = (td.lower(s, args), td.build(s, args, target="llvm"))
    return _DIV_KERNELS[dtype]


@settings(max_examples=25, deadline=None)
@given(dtype=st.sampled_from(["int8", "int32", "int64"]), data=st.data())
def test_integer_division_by_zero_is_zero_in_interpreter_and_llvm(dtype, data):
    info = np.iinfo(dtype)
    ints = st.integers(int(info.min), int(info.max))
    a = np.array(data.draw(st.lists(ints, min_size=8, max_size=8)), dtype)
    b = np.array(data.draw(st.lists(st.sampled_from([0, 0, -1, 1, 3, -7]) | ints,
                                    min_size=8, max_size=8)), dtype)
    func, mod = _div_kernels(dtype)
    with np.errstate(divide="ignore", over="ignore"):
        want_q, want_r = a // b, a % b           # NumPy: x // 0 == 0, x % 0 == 0
    for runner in (lambda *x: run(func, *x), mod):
        q, r = np.full(8, 7, dtype), np.full(8, 7, dtype)
        runner(a, b, q, r)
        np.testing.assert_array_equal(q, want_q)
        np.testing.assert_array_equal(r, want_r)
