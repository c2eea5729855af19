"""``te``/``tir`` through the compat layer, modeled on TVM's tutorials and tests/python/te:
schedule primitives, tuple outputs, comm_reducer with tir.Select, and the division helpers
(checked against NumPy on random data with negative values, LLVM and the interpreter)."""
import numpy as np
import pytest

import tdsl
import tdsl.interpreter
import tvm
import tvm.testing
from tvm import te, tir


def _run_both(s, args, arrays):
    """Run the schedule through the interpreter and through LLVM; return both outputs."""
    ref = [a.copy() for a in arrays]
    tdsl.interpreter.run(tvm.lower(s, args), *ref)
    got = [a.copy() for a in arrays]
    tvm.build(s, args, "llvm")(*got)
    return ref, got


@pytest.mark.parametrize("m", [64, 67])
def test_schedule_primitives_tutorial_style(rng, m):
    n = te.var("n")
    A = te.placeholder((m, n), name="A")
    B = te.placeholder((m, n), name="B")
    C = te.compute((m, n), lambda i, j: A[i, j] * B[i, j], name="C")
    D = te.compute((m, n), lambda i, j: C[i, j] + 1.0, name="D")
    s = te.create_schedule(D.op)
    xo, yo, xi, yi = s[D].tile(D.op.axis[0], D.op.axis[1], x_factor=10, y_factor=5)
    fused = s[D].fuse(xi, yi)
    s[D].reorder(yo, xo, fused)
    s[C].compute_at(s[D], xo)
    a, b = rng.random((m, 13)).astype("float32"), rng.random((m, 13)).astype("float32")
    ref, got = _run_both(s, [A, B, D], [a, b, np.zeros((m, 13), "float32")])
    np.testing.assert_allclose(ref[2], a * b + 1, rtol=1e-6)
    np.testing.assert_allclose(got[2], a * b + 1, rtol=1e-6)


def test_compute_at_of_an_argument_stage(rng):
    """schedule_primitives.py: B is both an argument and computed at C's loop."""
    m = te.var("m")
    A = te.placeholder((m,), name="A")
    B = te.compute((m,), lambda i: A[i] + 1, name="B")
    C = te.compute((m,), lambda i: B[i] * 2, name="C")
    s = te.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    a = rng.random(29).astype("float32")
    ref, got = _run_both(s, [A, B, C], [a, np.zeros(29, "float32"), np.zeros(29, "float32")])
    for out in (ref, got):
        np.testing.assert_allclose(out[1], a + 1, rtol=1e-6)
        np.testing.assert_allclose(out[2], (a + 1) * 2, rtol=1e-6)


def test_split_nparts_and_inline(rng):
    m = 50
    A = te.placeholder((m,), name="A")
    B = te.compute((m,), lambda i: A[i] * 2, name="B")
    C = te.compute((m,), lambda i: B[i] + 3, name="C")
    s = te.create_schedule(C.op)
    s[B].compute_inline()
    xo, xi = s[C].split(C.op.axis[0], nparts=7)
    s[C].unroll(xi)
    a = rng.random(m).astype("float32")
    _, got = _run_both(s, [A, C], [a, np.zeros(m, "float32")])
    np.testing.assert_allclose(got[1], a * 2 + 3, rtol=1e-6)


def test_tuple_outputs_and_argmax_reducer(rng):
    """tuple_inputs.py: a multi-output compute and an argmax comm_reducer with tir.Select."""
    def fcombine(x, y):
        lhs = tir.Select((x[1] >= y[1]), x[0], y[0])
        rhs = tir.Select((x[1] >= y[1]), x[1], y[1])
        return lhs, rhs

    def fidentity(t0, t1):
        return tir.const(-1, t0), te.min_value(t1)

    argmax = te.comm_reducer(fcombine, fidentity, name="argmax")
    m, n = te.var("m"), te.var("n")
    idx = te.placeholder((m, n), name="idx", dtype="int32")
    val = te.placeholder((m, n), name="val", dtype="int32")
    k = te.reduce_axis((0, n), "k")
    T0, T1 = te.compute((m,), lambda i: argmax((idx[i, k], val[i, k]), axis=k), name="T")
    s = te.create_schedule(T0.op)
    vals = rng.integers(-100, 100, size=(9, 11)).astype("int32")
    ids = np.tile(np.arange(11, dtype="int32"), (9, 1))
    _, got = _run_both(s, [idx, val, T0, T1], [ids, vals, np.zeros(9, "int32"),
                                                np.zeros(9, "int32")])
    np.testing.assert_array_equal(got[3], vals.max(axis=1))
    np.testing.assert_array_equal(vals[np.arange(9), got[2]], vals.max(axis=1))

    A0 = te.placeholder((m, n), name="A0")
    A1 = te.placeholder((m, n), name="A1")
    B0, B1 = te.compute((m, n), lambda i, j: (A0[i, j] + 2, A1[i, j] * 3), name="B")
    s = te.create_schedule(B0.op)
    a0, a1 = rng.random((5, 6)).astype("float32"), rng.random((5, 6)).astype("float32")
    _, got = _run_both(s, [A0, A1, B0, B1], [a0, a1, np.zeros((5, 6), "float32"),
                                            np.zeros((5, 6), "float32")])
    np.testing.assert_allclose(got[2], a0 + 2, rtol=1e-6)
    np.testing.assert_allclose(got[3], a1 * 3, rtol=1e-6)


def _np_trunc_div(a, b):
    return (np.abs(a) // np.abs(b)) * np.sign(a) * np.sign(b)


_DIV = {
    "floordiv": (tir.floordiv, lambda a, b: a // b),
    "floormod": (tir.floormod, lambda a, b: a % b),
    "indexdiv": (tir.indexdiv, lambda a, b: a // b),
    "indexmod": (tir.indexmod, lambda a, b: a % b),
    "truncdiv": (tir.truncdiv, _np_trunc_div),
    "truncmod": (tir.truncmod, lambda a, b: a - _np_trunc_div(a, b) * b),
    "ceildiv": (tir.ceildiv, lambda a, b: -((-a) // b)),
    "div": (tir.div, _np_trunc_div),
}


@pytest.mark.parametrize("name", sorted(_DIV))
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_division_helpers_match_numpy(rng, name, dtype):
    fn, ref = _DIV[name]
    n = 97
    A = te.placeholder((n,), name="A", dtype=dtype)
    B = te.placeholder((n,), name="B", dtype=dtype)
    C = te.compute((n,), lambda i: fn(A[i], B[i]), name="C")
    s = te.create_schedule(C.op)
    a = rng.integers(-50, 50, size=n).astype(dtype)
    b = rng.integers(1, 9, size=n).astype(dtype) * rng.choice([-1, 1], size=n).astype(dtype)
    if name == "ceildiv":
        b = np.abs(b)
    r, got = _run_both(s, [A, B, C], [a, b, np.zeros(n, dtype)])
    np.testing.assert_array_equal(r[2], ref(a, b))
    np.testing.assert_array_equal(got[2], ref(a, b))


def test_ceildiv_by_constant_and_float_truncdiv(rng):
    n = 40
    A = te.placeholder((n,), name="A", dtype="int32")
    C = te.compute((n,), lambda i: tir.ceildiv(A[i], 4), name="C")
    s = te.create_schedule(C.op)
    a = rng.integers(-30, 30, size=n).astype("int32")
    _, got = _run_both(s, [A, C], [a, np.zeros(n, "int32")])
    np.testing.assert_array_equal(got[1], -((-a) // 4))
    X = te.placeholder((n,), name="X")
    Y = te.compute((n,), lambda i: tir.truncdiv(X[i], tir.const(0.5, "float32")), name="Y")
    s = te.create_schedule(Y.op)
    x = (rng.random(n).astype("float32") - 0.5) * 10
    _, got = _run_both(s, [X, Y], [x, np.zeros(n, "float32")])
    np.testing.assert_allclose(got[1], np.trunc(x / 0.5), rtol=1e-6)


def test_tir_math_and_select(rng):
    n = 31
    A = te.placeholder((n,), name="A")
    C = te.compute((n,), lambda i: tir.Select(A[i] > 0.5, tir.exp(A[i]), tir.sqrt(A[i]))
                   + tir.max(A[i], tir.const(0.25, "float32")), name="C")
    s = te.create_schedule(C.op)
    a = rng.random(n).astype("float32")
    _, got = _run_both(s, [A, C], [a, np.zeros(n, "float32")])
    want = np.where(a > 0.5, np.exp(a), np.sqrt(a)) + np.maximum(a, 0.25)
    np.testing.assert_allclose(got[1], want, rtol=1e-5)


def test_shape_with_whole_floats(rng):
    """opt_gemm.py writes (N / bn, K, bn): Python 3 makes N / bn a float."""
    N, K, bn = 64, 8, 16
    B = te.placeholder((K, N), name="B")
    P = te.compute((N / bn, K, bn), lambda x, y, z: B[y, x * bn + z], name="P")
    assert [int(d) for d in P.shape] == [4, 8, 16]
    s = te.create_schedule(P.op)
    b = rng.random((K, N)).astype("float32")
    _, got = _run_both(s, [B, P], [b, np.zeros((4, 8, 16), "float32")])
    np.testing.assert_array_equal(got[1], b.reshape(K, 4, 16).transpose(1, 0, 2))


def test_te_names_exist():
    for name in te.__all__:
        assert getattr(te, name) is not None
    for name in tir.__all__:
        assert getattr(tir, name) is not None


@pytest.mark.parametrize("name", ["extern_primfunc", "scan_placeholder", "hybrid"])
def test_unsupported_te_names_raise_a_tdsl_error(name):
    with pytest.raises(tvm.TVMError, match="Coming from TVM"):
        getattr(te, name)


def test_unsupported_tir_names_raise_a_tdsl_error():
    with pytest.raises(tvm.TVMError, match="Coming from TVM"):
        tir.call_intrin
    for name in ("transform", "stmt_functor", "stmt", "Evaluate", "SeqStmt"):   # TIR passes
        with pytest.raises(tvm.TVMError, match=r"its own IR \(tdsl.stmt\), not TVM's TIR"):
            getattr(tir, name)
    with pytest.raises(AttributeError):
        tir.no_such_name


def test_expr_equal_method(rng):
    """``x.equal(y)`` (TVM's PrimExpr.equal), as in ``tx.var.equal(0)`` predicates."""
    n = 23
    A = te.placeholder((n,), name="A", dtype="int32")
    C = te.compute((n,), lambda i: tir.Select(tir.indexmod(A[i], 3).equal(0), A[i], -A[i]),
                   name="C")
    s = te.create_schedule(C.op)
    a = rng.integers(-20, 20, size=n).astype("int32")
    r, got = _run_both(s, [A, C], [a, np.zeros(n, "int32")])
    np.testing.assert_array_equal(got[1], np.where(a % 3 == 0, a, -a))
    np.testing.assert_array_equal(r[1], np.where(a % 3 == 0, a, -a))
    assert str(te.thread_axis("threadIdx.x").var.equal(0)) == "threadIdx.x == 0"


@pytest.mark.parametrize("shape", [(7, 4), (30, 9)])
def test_te_scan_cumsum_like_the_scan_tutorial(rng, shape):
    m, n = te.var("m"), te.var("n")
    X = te.placeholder((m, n), name="X")
    s_state = te.placeholder((m, n))
    s_init = te.compute((1, n), lambda _, i: X[0, i])
    s_update = te.compute((m, n), lambda t, i: s_state[t - 1, i] + X[t, i])
    s_scan = te.scan(s_init, s_update, s_state, inputs=[X])
    s = te.create_schedule(s_scan.op)
    x = rng.standard_normal(shape).astype("float32")
    ref, got = _run_both(s, [X, s_scan], [x, np.empty_like(x)])
    for out in (ref, got):
        tvm.testing.assert_allclose(out[1], np.cumsum(x, axis=0), rtol=1e-5, atol=1e-5)
    f = tvm.build(s, [X, s_scan], "llvm")
    dev = tvm.cpu(0)
    a, b = tvm.nd.array(x, dev), tvm.nd.array(np.zeros(shape, "float32"), dev)
    f(a, b)
    tvm.testing.assert_allclose(b.numpy(), np.cumsum(x, axis=0), rtol=1e-5, atol=1e-5)


def test_te_scan_multi_stage_update_and_two_states(rng):
    """The scan tutorial's later parts: an update built from two computes (the first
    computed at the second's loop, as TVM writes it) and two states of different widths,
    the second reading the first at point 0."""
    m, n = te.var("m"), te.var("n")
    X = te.placeholder((m, n), name="X")
    s_state = te.placeholder((m, n))
    s_init = te.compute((1, n), lambda _, i: X[0, i])
    s1 = te.compute((m, n), lambda t, i: s_state[t - 1, i] * 2, name="s1")
    s2 = te.compute((m, n), lambda t, i: s1[t, i] + X[t, i], name="s2")
    s_scan = te.scan(s_init, s2, s_state, inputs=[X])
    s = te.create_schedule(s_scan.op)
    xo, xi = s[s2].split(s2.op.axis[1], factor=32)
    s[s1].compute_at(s[s2], xo)
    x = rng.standard_normal((7, 45)).astype("float32")
    want = np.empty_like(x)
    want[0] = x[0]
    for t in range(1, 7):
        want[t] = want[t - 1] * 2 + x[t]
    for out in _run_both(s, [X, s_scan], [x, np.empty_like(x)]):
        tvm.testing.assert_allclose(out[1], want, rtol=1e-5, atol=1e-5)

    m, n, l = te.var("m"), te.var("n"), te.var("l")
    X = te.placeholder((m, n), name="X")
    st1, st2 = te.placeholder((m, n)), te.placeholder((m, l))
    i1 = te.compute((1, n), lambda _, i: X[0, i])
    i2 = te.compute((1, l), lambda _, i: 0.0)
    u1 = te.compute((m, n), lambda t, i: st1[t - 1, i] + X[t, i])
    u2 = te.compute((m, l), lambda t, i: st2[t - 1, i] + st1[t - 1, 0])
    r1, r2 = te.scan([i1, i2], [u1, u2], [st1, st2], inputs=[X])
    s = te.create_schedule(r1.op)
    x = rng.standard_normal((6, 5)).astype("float32")
    w1 = np.cumsum(x, axis=0)
    w2 = np.zeros((6, 3), "float32")
    for t in range(1, 6):
        w2[t] = w2[t - 1] + w1[t - 1, 0]
    for out in _run_both(s, [X, r1, r2], [x, np.empty_like(x), np.empty((6, 3), "float32")]):
        tvm.testing.assert_allclose(out[1], w1, rtol=1e-5, atol=1e-5)
        tvm.testing.assert_allclose(out[2], w2, rtol=1e-5, atol=1e-5)


def test_errors_are_runtime_errors_as_tvm_errors_are():
    """TVM's TVMError is a RuntimeError: TVM code catching RuntimeError sees tdsl's errors,
    which stay TDSLErrors (and their own built-in kinds)."""
    A = te.placeholder((4, 4), name="A")
    B = te.compute((4, 4), lambda i, j: A[i, j] + 1.0, name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(RuntimeError) as info:
        s[B].split(s[B].op.axis[0], factor=0)
    assert isinstance(info.value, (tdsl.TDSLError, tvm.TVMError, ValueError))
    assert issubclass(tvm.TVMError, RuntimeError)
    for cls in (tdsl.ShapeError, tdsl.DTypeError, tdsl.ScheduleError, tdsl.BuildError):
        assert issubclass(cls, tdsl.TDSLError) and issubclass(cls, RuntimeError)


def test_cache_write_of_a_reduction_whose_range_and_combiner_read_the_data_axis(rng):
    """``reduce_axis((0, n))`` with ``n`` the compute's own axis, a combiner and an init that
    read it too (TVM's test_loop_dep_reduce_cache_write): the cache stage gets copies over
    its own axes (the old ones named a loop the cache does not have)."""
    X = te.placeholder((10,), name="x")

    def f(n):
        rv = te.reduce_axis((0, n), name="rv")
        init = lambda dtype: tvm.tir.Select(n > 1, tvm.tir.const(0, dtype), n.astype(dtype))
        red = te.comm_reducer(lambda a, b: te.max(a + b, n.astype("float32")), init, name="s")
        return red(X[rv], axis=rv)
    Y = te.compute((10,), f, name="y")
    s = te.create_schedule([Y.op])
    s.cache_write(Y, "local")
    fn = tvm.build(s, [X, Y])
    x = rng.standard_normal(10).astype("float32")
    y = tvm.nd.empty((10,))
    fn(tvm.nd.array(x), y)
    want = []
    for n in range(10):
        acc = 0.0 if n > 1 else float(n)
        for r in range(n):
            acc = max(acc + x[r], float(n))
        want.append(acc)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5)


def test_tvm_error_te_schedule_and_driver_names():
    """``tvm.error.TVMError``, ``tvm.te.schedule.Fuse/Split`` (the stage's relations),
    ``tvm.driver.build_module.schedule_to_module`` and ``mod["main"]``; TVM's internal
    passes are refused by name."""
    from tvm.driver.build_module import schedule_to_module
    m = te.size_var("m")
    A = te.placeholder((m, 12), name="A")
    T = te.compute((m, 12), lambda i, j: A[i, j] * 2.0, name="T")
    s = te.create_schedule(T.op)
    xo, yo, xi, yi = s[T].tile(T.op.axis[0], T.op.axis[1], x_factor=4, y_factor=3)
    fused = s[T].fuse(xo, yo)
    assert any(isinstance(r, te.schedule.Fuse) for r in s[T].relations)
    assert any(isinstance(r, te.schedule.Split) for r in s[T].relations)
    assert tuple(s[T].leaf_iter_vars) == (fused, xi, yi)
    with pytest.raises(tvm.error.TVMError):
        s[T].reorder(xi, yi, xi)
    mod = schedule_to_module(s, [A, T])
    assert isinstance(mod["main"], tvm.tir.PrimFunc) and "main" in mod
    with pytest.raises(tvm.TVMError, match="no function"):
        mod["other"]
    with pytest.raises(tvm.TVMError, match="TVM internal"):
        te.schedule.InferBound(s)
    a = np.random.default_rng(1).standard_normal((10, 12)).astype("float32")
    out = tvm.nd.empty((10, 12))
    tvm.build(mod)(tvm.nd.array(a), out)
    np.testing.assert_allclose(out.numpy(), a * 2.0)


def test_reduce_axis_from_zero_has_the_bound_itself_as_extent():
    n = te.size_var("n")
    k = te.reduce_axis((0, n), name="k")
    assert k.dom.extent is n or str(k.dom.extent) == "n"
    A = te.placeholder((n, n), name="A")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    BF = s.rfactor(B, k)
    assert str(BF.shape[0]) == "n"


def test_extern_function_receives_te_schedule_buffers():
    m = te.size_var("m")
    A = te.placeholder((m,), name="A")
    seen = []

    def fn(ins, outs):
        seen.append(all(isinstance(b, te.schedule.Buffer) for b in list(ins) + list(outs)))
        return tir.call_packed("tdsl.compat.test.noop", ins[0].data, outs[0].data, m)
    B = te.extern((m,), [A], fn, name="B")
    assert tuple(B.shape) == (m,) and seen == [True]
