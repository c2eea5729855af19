"""The compute/reduce DSL end to end: declare, lower with the default schedule (and a
split, so tails are exercised), run with the reference interpreter, compare with NumPy.

Covers every dtype, the reducers (sum/max/min, user comm_reducers including a two-value
argmax, where= and init=), if_then_else padding, broadcasting, multi-stage pipelines,
integer // and %, comparisons and logical ops, the math functions, casts, and symbolic
shapes built from expressions of vars (2*n, n + 2).
"""
import math

import numpy as np
import pytest

import tdsl as td
from tdsl.interpreter import run
from tests.workloads import random_array

ALL_DTYPES = ["float16", "float32", "float64", "int8", "uint8", "int32", "int64", "bool"]


def execute(outputs, inputs, arrays, split=None, sizes=None):
    """Lower ``outputs`` (default schedule; ``split`` splits the first output's first axis),
    run on ``arrays`` and return the outputs as NumPy arrays."""
    outputs = outputs if isinstance(outputs, list) else [outputs]
    s = td.create_schedule([o.op for o in outputs])
    if split:
        st = s[outputs[0]]
        st.split(st.op.axis[0], factor=split)
    f = td.lower(s, list(inputs) + outputs)
    binding = dict(sizes or {})
    for t, a in zip(inputs, arrays):
        for d, n in zip(t.shape, a.shape):
            if isinstance(d, td.Var):
                binding[d] = n
    outs = []
    for o in outputs:
        shape = tuple(_eval_dim(d, binding) for d in o.shape)
        dt = np.dtype(str(o.dtype))
        outs.append(np.full(shape, np.nan, dt) if dt.kind == "f" else np.full(shape, 99, dt)
                    if dt != np.bool_ else np.zeros(shape, dt))
    run(f, *arrays, *outs)
    return outs if len(outs) > 1 else outs[0]


def _eval_dim(d, binding):
    from tdsl.arith import Analyzer
    ana = Analyzer()
    for v, n in binding.items():
        ana.bind(v, n)
    e = ana.simplify(d)
    assert isinstance(e, td.expr.Const), f"cannot evaluate {d!r}"
    return e.value


# ---- dtypes -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("n", [6, 7])
def test_every_dtype_through_a_compute(dtype, n, rng):
    A = td.placeholder((n, 3), dtype, name="A")
    B = td.placeholder((n, 3), dtype, name="B")
    if dtype == "bool":
        C = td.compute((n, 3), lambda i, j: (A[i, j] & ~B[i, j]) | (A[i, j] == B[i, (j + 1) % 3]),
                       name="C")
    else:
        C = td.compute((n, 3), lambda i, j: A[i, j] * B[i, j] + A[i, (j + 1) % 3] - 3, name="C")
    a, b = random_array(rng, (n, 3), dtype), random_array(rng, (n, 3), dtype)
    c = execute(C, [A, B], [a, b], split=4)
    assert c.dtype == np.dtype(dtype)
    if dtype == "bool":
        np.testing.assert_array_equal(c, (a & ~b) | (a == np.roll(b, -1, axis=1)))
    else:
        with np.errstate(over="ignore"):   # ints wrap at their width, like NumPy
            want = a * b + np.roll(a, -1, axis=1) - np.array(3, dtype)
        np.testing.assert_array_equal(c, want.astype(dtype))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32"])
def test_integer_overflow_wraps(dtype):
    info = np.iinfo(dtype)
    A = td.placeholder((4,), dtype, name="A")
    B = td.compute((4,), lambda i: A[i] * 2 + 1, name="B")
    a = np.array([info.max, info.min, info.max // 2 + 1, 5], dtype)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(execute(B, [A], [a]), (a * np.array(2, dtype) + np.array(1, dtype)))


def test_float16_rounds_after_every_operation(rng):
    A = td.placeholder((32,), "float16", name="A")
    B = td.compute((32,), lambda i: (A[i] * A[i] + A[i]) / 3.0 - 0.1, name="B")
    a = random_array(rng, (32,), "float16", 0.25, 8.0)
    want = (a * a + a) / np.float16(3.0) - np.float16(0.1)
    np.testing.assert_array_equal(execute(B, [A], [a]), want)


# ---- integer // and % ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_integer_floordiv_and_mod(dtype, rng):
    A = td.placeholder((9, 4), dtype, name="A")
    D = td.placeholder((4,), dtype, name="D")
    Q = td.compute((9, 4), lambda i, j: A[i, j] // D[j], name="Q")
    R = td.compute((9, 4), lambda i, j: A[i, j] % D[j], name="R")
    Q3 = td.compute((9, 4), lambda i, j: A[i, j] // 3 + A[i, j] % -4, name="Q3")
    a = random_array(rng, (9, 4), dtype)
    d = np.array([3, -2, 5, -7], dtype)
    q, r, q3 = execute([Q, R, Q3], [A, D], [a, d])
    np.testing.assert_array_equal(q, a // d)          # floor division, like Python
    np.testing.assert_array_equal(r, a % d)           # sign of the divisor
    np.testing.assert_array_equal(q3, a // np.array(3, dtype) + a % np.array(-4, dtype))


def test_index_floordiv_mod_in_indices():
    """Reshape-like indexing: B[i] = A[i // 4, i % 4]."""
    n = td.var("n")
    A = td.placeholder((n, 4), name="A")
    B = td.compute((n * 4,), lambda i: A[i // 4, i % 4] * 2.0, name="B")
    for v in (1, 3, 5):
        a = random_array(np.random.default_rng(v), (v, 4))
        np.testing.assert_array_equal(execute(B, [A], [a], split=3), (a * 2).reshape(-1))


# ---- comparisons, logic, select ----------------------------------------------------------------------------
def test_comparisons_and_logical_ops(rng):
    A = td.placeholder((7, 5), "int32", name="A")
    B = td.placeholder((7, 5), "int32", name="B")
    ops = {
        "lt": lambda x, y: x < y, "le": lambda x, y: x <= y, "gt": lambda x, y: x > y,
        "ge": lambda x, y: x >= y, "eq": lambda x, y: x == y, "ne": lambda x, y: x != y,
    }
    def cmp(f):
        return lambda i, j: f(A[i, j], B[i, j])
    outs = [td.compute((7, 5), cmp(f), name=k) for k, f in ops.items()]
    L = td.compute((7, 5), lambda i, j: td.any(td.all(A[i, j] > 0, B[i, j] < 0), ~(A[i, j] != B[i, j])),
                   name="L")
    S = td.compute((7, 5), lambda i, j: td.if_then_else((A[i, j] > B[i, j]) | (A[i, j] < -3),
                                                        A[i, j], B[i, j] * 2), name="S")
    a = random_array(rng, (7, 5), "int32")
    b = random_array(rng, (7, 5), "int32")
    b[0, :] = a[0, :]                                # some equal elements
    res = execute(outs + [L, S], [A, B], [a, b])
    for r, f in zip(res, ops.values()):
        assert r.dtype == np.bool_
        np.testing.assert_array_equal(r, f(a, b))
    np.testing.assert_array_equal(res[-2], ((a > 0) & (b < 0)) | (a == b))
    np.testing.assert_array_equal(res[-1], np.where((a > b) | (a < -3), a, b * 2))


# ---- math functions ------------------------------------------------------------------------------------------
_ERF = np.vectorize(math.erf)
MATH = {
    "exp": (td.exp, np.exp, "any"),
    "log": (td.log, np.log, "pos"),
    "sqrt": (td.sqrt, np.sqrt, "pos"),
    "rsqrt": (td.rsqrt, lambda x: 1 / np.sqrt(x), "pos"),
    "tanh": (td.tanh, np.tanh, "any"),
    "sigmoid": (td.sigmoid, lambda x: 1 / (1 + np.exp(-x)), "any"),
    "erf": (td.erf, _ERF, "any"),
    "abs": (td.abs, np.abs, "any"),
    "floor": (td.floor, np.floor, "any"),
    "ceil": (td.ceil, np.ceil, "any"),
    "pow": (lambda x: td.pow(x, 1.5), lambda x: np.power(x, 1.5), "pos"),
    "pow_expr": (lambda x: td.power(x, x - 0.5), lambda x: np.power(x, x - 0.5), "pos"),
    "dunder_pow": (lambda x: x ** 2.0, lambda x: x ** 2.0, "any"),
    "maximum": (lambda x: td.maximum(x, 0.3), lambda x: np.maximum(x, 0.3), "any"),
    "minimum": (lambda x: td.minimum(x, -x), lambda x: np.minimum(x, -x), "any"),
    "neg_abs": (lambda x: -abs(x), lambda x: -np.abs(x), "any"),
}


@pytest.mark.parametrize("name", list(MATH))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_math_functions(name, dtype, rng):
    tfn, nfn, domain = MATH[name]
    A = td.placeholder((5, 6), dtype, name="A")
    B = td.compute((5, 6), lambda i, j: tfn(A[i, j] * 2.5), name="B")
    a = random_array(rng, (5, 6), dtype)
    if domain == "pos":
        a = np.abs(a)
    want = nfn(a.astype(np.float64) * 2.5)
    tol = 1e-6 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(execute(B, [A], [a], split=2), want, rtol=tol, atol=tol)


def test_abs_and_max_on_integers(rng):
    A = td.placeholder((8,), "int32", name="A")
    B = td.compute((8,), lambda i: td.abs(A[i]) + td.maximum(A[i], 2) - td.minimum(A[i], -1), name="B")
    a = random_array(rng, (8,), "int32")
    np.testing.assert_array_equal(execute(B, [A], [a]), np.abs(a) + np.maximum(a, 2) - np.minimum(a, -1))


# ---- casts ------------------------------------------------------------------------------------------------------
def test_casts(rng):
    F = td.placeholder((10,), "float32", name="F")
    I = td.placeholder((10,), "int32", name="I")
    to_int = td.compute((10,), lambda i: F[i].astype("int32"), name="to_int")         # truncates
    to_i8 = td.compute((10,), lambda i: (I[i] * 37).astype("int8"), name="to_i8")       # wraps
    to_f = td.compute((10,), lambda i: I[i].astype("float64") / 4.0, name="to_f")
    to_b = td.compute((10,), lambda i: I[i].astype("bool"), name="to_b")                # != 0
    from_b = td.compute((10,), lambda i: (F[i] > 0.0).astype("float32") * F[i], name="from_b")
    to_h = td.compute((10,), lambda i: td.cast(F[i], "float16"), name="to_h")
    to_u8 = td.compute((10,), lambda i: (F[i] * 100.0).astype("int32").astype("uint8"), name="to_u8")
    f = random_array(rng, (10,), "float32", 0.5, 9.0)
    i = random_array(rng, (10,), "int32")
    i[3] = 0
    outs = execute([to_int, to_i8, to_f, to_b, from_b, to_h, to_u8], [F, I], [f, i])
    np.testing.assert_array_equal(outs[0], np.trunc(f).astype("int32"))
    np.testing.assert_array_equal(outs[1], (i * 37).astype("int8"))
    np.testing.assert_array_equal(outs[2], i.astype("float64") / 4.0)
    np.testing.assert_array_equal(outs[3], i != 0)
    np.testing.assert_array_equal(outs[4], (f > 0).astype("float32") * f)
    np.testing.assert_array_equal(outs[5], f.astype("float16"))
    np.testing.assert_array_equal(outs[6], (f * np.float32(100)).astype("int32").astype("uint8"))


def test_int_literals_adapt_and_index_math_widens():
    """Python literals take the other operand's dtype; int8 + int32 widens to int32."""
    A = td.placeholder((4,), "int8", name="A")
    B = td.placeholder((4,), "int32", name="B")
    C = td.compute((4,), lambda i: A[i] + B[i] + 1, name="C")
    assert C.dtype == "int32"
    a = np.array([1, -2, 3, 127], "int8")
    b = np.array([1000, 2, -30, 1], "int32")
    np.testing.assert_array_equal(execute(C, [A, B], [a, b]), a.astype("int32") + b + 1)


# ---- reducers --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("reducer,ref", [(td.sum, np.sum), (td.max, np.max), (td.min, np.min)],
                         ids=["sum", "max", "min"])
@pytest.mark.parametrize("dtype", ["float32", "int32", "int64", "float16"])
def test_builtin_reducers(reducer, ref, dtype, rng):
    n = td.var("n")
    A = td.placeholder((n, 5), dtype, name="A")
    k = td.reduce_axis((0, 5), name="k")
    R = td.compute((n,), lambda i: reducer(A[i, k], axis=k), name="R")
    for v in (1, 6, 11):
        a = random_array(rng, (v, 5), dtype)
        got = execute(R, [A], [a], split=4)
        if dtype == "float16":     # accumulates in float16, rounding at every step
            acc = a[:, 0].copy()
            for c in range(1, 5):
                acc = {"sum": acc + a[:, c], "max": np.maximum(acc, a[:, c]),
                       "min": np.minimum(acc, a[:, c])}[reducer.name]
            np.testing.assert_array_equal(got, acc)
        elif dtype.startswith("float"):
            np.testing.assert_allclose(got, ref(a.astype(np.float64), axis=1), rtol=1e-6)
        else:
            np.testing.assert_array_equal(got, ref(a, axis=1))


def test_reduce_over_two_axes_with_where_and_init(rng):
    A = td.placeholder((4, 5, 6), name="A")
    r1 = td.reduce_axis((0, 5), name="r1")
    r2 = td.reduce_axis((1, 6), name="r2")           # a reduce axis not starting at 0
    S = td.compute((4,), lambda i: td.sum(A[i, r1, r2], axis=[r1, r2], where=A[i, r1, r2] > 0.0),
                   name="S")
    M = td.compute((4,), lambda i: td.max(A[i, r1, r2], axis=[r1, r2], init=0.5), name="M")
    a = random_array(rng, (4, 5, 6))
    s, m = execute([S, M], [A], [a])
    part = a[:, :, 1:].astype(np.float64)
    np.testing.assert_allclose(s, np.where(part > 0, part, 0).sum(axis=(1, 2)), rtol=1e-5)
    np.testing.assert_array_equal(m, np.maximum(part.max(axis=(1, 2)), 0.5).astype("float32"))


def test_user_comm_reducer_product_and_logsumexp_like(rng):
    prod = td.comm_reducer(lambda x, y: x * y, lambda t: td.const(1, t), name="prod")
    n = td.var("n")
    A = td.placeholder((n, 4), name="A")
    k = td.reduce_axis((0, 4), name="k")
    P = td.compute((n,), lambda i: prod(A[i, k], axis=k), name="P")
    absmax = td.comm_reducer(lambda x, y: td.maximum(td.abs(x), td.abs(y)),
                             lambda t: td.const(0, t), name="absmax")
    k2 = td.reduce_axis((0, 4), name="k2")
    M = td.compute((n,), lambda i: absmax(A[i, k2], axis=k2), name="M")
    a = random_array(rng, (7, 4))
    p, m = execute([P, M], [A], [a])
    np.testing.assert_allclose(p, a.astype(np.float64).prod(axis=1), rtol=1e-6)
    np.testing.assert_array_equal(m, np.abs(a).max(axis=1))
    assert str(prod(A[0, 0], A[0, 1])) == "A[0, 0] * A[0, 1]"   # reducer(a, b) combines


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_argmax_and_argmin_reducers(dtype, rng):
    argmax = td.comm_reducer(
        lambda x, y: (td.if_then_else(x[1] >= y[1], x[0], y[0]), td.maximum(x[1], y[1])),
        lambda t0, t1: (td.const(-1, t0), td.min_value(t1)), name="argmax")
    argmin = td.comm_reducer(
        lambda x, y: (td.if_then_else(x[1] <= y[1], x[0], y[0]), td.minimum(x[1], y[1])),
        lambda t0, t1: (td.const(-1, t0), td.max_value(t1)), name="argmin")
    m = td.var("m")
    A = td.placeholder((m, 9), dtype, name="A")
    k = td.reduce_axis((0, 9), name="k")
    I, V = td.compute((m,), lambda i: argmax((k.var, A[i, k]), axis=k), name="amax")
    k2 = td.reduce_axis((0, 9), name="k2")
    J, W = td.compute((m,), lambda i: argmin((k2.var.astype("int32"), A[i, k2]), axis=k2),
                      name="amin")
    assert I.dtype == "int64" and J.dtype == "int32" and V.dtype == dtype
    rows = []
    for r in range(6):                                # distinct values: a unique arg per row
        rows.append(rng.permutation(np.arange(1, 10)) * (1 if r % 2 else -1))
    a = np.array(rows).astype(dtype)
    i, v, j, w = execute([I, V, J, W], [A], [a])
    np.testing.assert_array_equal(i, a.argmax(1))
    np.testing.assert_array_equal(v, a.max(1))
    np.testing.assert_array_equal(j, a.argmin(1))
    np.testing.assert_array_equal(w, a.min(1))


# ---- padding, broadcasting, pipelines ------------------------------------------------------------------------
def test_if_then_else_padding_never_reads_out_of_bounds(rng):
    """Pad by 2 on each side with a symbolic size: the guarded loads stay in bounds."""
    n = td.var("n")
    A = td.placeholder((n, 3), name="A")
    P = td.compute((n + 4, 3), lambda i, j: td.if_then_else(td.all(i >= 2, i < n + 2),
                                                            A[i - 2, j], -1.0), name="P")
    for v in (1, 4, 9):
        a = random_array(rng, (v, 3))
        p = execute(P, [A], [a], split=3)
        np.testing.assert_array_equal(p, np.pad(a, ((2, 2), (0, 0)), constant_values=-1.0))


def test_broadcasting(rng):
    """Outer product, bias over rows, and a scalar (0-d) tensor."""
    n = td.var("n")
    X = td.placeholder((n,), name="X")
    Y = td.placeholder((5,), name="Y")
    Z = td.placeholder((), name="Z")
    O = td.compute((n, 5), lambda i, j: X[i] * Y[j] + Z(), name="O")
    Q = td.compute((n, 5), lambda i, j: O[i, j] - X[i], name="Q")
    for v in (2, 7):
        x, y, z = random_array(rng, (v,)), random_array(rng, (5,)), random_array(rng, ())
        o, q = execute([O, Q], [X, Y, Z], [x, y, z])
        np.testing.assert_allclose(o, np.outer(x, y) + z, rtol=1e-6)
        np.testing.assert_allclose(q, np.outer(x, y) + z - x[:, None], rtol=1e-6)


def test_multi_stage_pipeline_with_reduction_in_the_middle(rng):
    """layernorm-like: mean, variance (reductions reading a reduction), normalize."""
    n = td.var("n")
    W = 6
    A = td.placeholder((n, W), name="A")
    k = td.reduce_axis((0, W), name="k")
    Mean = td.compute((n,), lambda i: td.sum(A[i, k] / float(W), axis=k), name="Mean")
    D = td.compute((n, W), lambda i, j: A[i, j] - Mean[i], name="D")
    k2 = td.reduce_axis((0, W), name="k2")
    Var_ = td.compute((n,), lambda i: td.sum(D[i, k2] * D[i, k2], axis=k2), name="Var")
    O = td.compute((n, W), lambda i, j: D[i, j] * td.rsqrt(Var_[i] / float(W) + 1e-5), name="O")
    for v in (1, 5):
        a = random_array(rng, (v, W))
        a64 = a.astype(np.float64)
        want = (a64 - a64.mean(1, keepdims=True)) / np.sqrt(a64.var(1, keepdims=True) + 1e-5)
        np.testing.assert_allclose(execute(O, [A], [a]), want, rtol=1e-4, atol=1e-5)


# ---- symbolic shapes ------------------------------------------------------------------------------------------
def test_symbolic_shape_expressions(rng):
    """Outputs of shape 2*n and n + 2, a reduction over n - 1, all bound from A's n."""
    n = td.var("n")
    A = td.placeholder((n,), name="A")
    Twice = td.compute((2 * n,), lambda i: A[i // 2] * td.if_then_else(i % 2 == 0, 1.0, -1.0),
                       name="Twice")
    Pad = td.compute((n + 2,), lambda i: td.if_then_else(td.all(i >= 1, i <= n), A[i - 1], 0.0),
                     name="Pad")
    k = td.reduce_axis((0, n - 1), name="k")
    Diff = td.compute((1,), lambda _: td.sum(A[k + 1] - A[k], axis=k), name="Diff")
    for v in (1, 4, 7):
        a = random_array(rng, (v,))
        t, p, d = execute([Twice, Pad, Diff], [A], [a], split=3)
        np.testing.assert_array_equal(t, np.stack([a, -a], 1).reshape(-1))
        np.testing.assert_array_equal(p, np.pad(a, 1))
        np.testing.assert_allclose(d, [np.diff(a.astype(np.float64)).sum()], atol=1e-6)


def test_two_symbolic_vars_and_printed_shapes():
    n, m = td.var("n"), td.var("m")
    A = td.placeholder((n, m), name="A")
    B = td.compute((m, n), lambda i, j: A[j, i] + 1.0, name="B")
    s = td.create_schedule(B.op)
    f = td.lower(s, [A, B])
    text = str(f)
    assert 'A: Buffer[(n, m), "float32"], B: Buffer[(m, n), "float32"]' in text
    a = random_array(np.random.default_rng(0), (3, 5))
    b = np.full((5, 3), np.nan, "float32")
    run(f, a, b)
    np.testing.assert_array_equal(b, a.T + 1)


def test_placeholder_of_shape_expression_binds_through_other_argument(rng):
    """A input of shape (n + 1,) next to an output of shape (n,): n comes from the output."""
    n = td.var("n")
    A = td.placeholder((n + 1,), name="A")
    B = td.compute((n,), lambda i: A[i + 1] - A[i], name="B")
    for v in (1, 6):
        a = random_array(rng, (v + 1,))
        b = np.full(v, np.nan, "float32")
        run(td.lower(td.create_schedule(B.op), [A, B]), a, b)
        np.testing.assert_array_equal(b, np.diff(a))


# ---- constant sizes are Python integers; symbolic ones say why they are not ----------------------
def test_constant_shapes_are_integers(rng):
    A = td.placeholder((3, 5), "float32", name="A")
    B = td.compute((A.shape[0], A.shape[1] * 2), lambda i, j: A[i, j // 2] * 2.0, name="B")
    assert int(A.shape[0]) == 3 and [int(d) for d in B.shape] == [3, 10]
    assert list(range(A.shape[1])) == [0, 1, 2, 3, 4]
    assert int(A.shape[1] * 2 - 1) == 9          # constant expressions fold
    a = random_array(rng, A.shape, "float32")          # np shapes from a tdsl shape
    out = np.empty(B.shape, "float32")
    assert out.shape == (3, 10)
    run(td.lower(td.create_schedule(B.op), [A, B]), a, out)
    np.testing.assert_allclose(out, np.repeat(a, 2, axis=1) * 2.0)


def test_symbolic_and_float_sizes_do_not_convert():
    n = td.var("n")
    A = td.placeholder((n, 4), "float32", name="A")
    with pytest.raises(td.DTypeError, match="symbolic size 'n'.*called"):
        int(A.shape[0])
    with pytest.raises(td.DTypeError, match="symbolic size 'n'"):
        np.empty(A.shape)
    with pytest.raises(td.DTypeError, match="n \\* 2.*depends on the symbolic size.*'n'"):
        int(n * 2)
    with pytest.raises(td.DTypeError, match="float32 constant 1.5 is not an integer"):
        int(td.const(1.5, "float32"))
    with pytest.raises(TypeError):           # DTypeError is a TypeError, as int() users expect
        int(A.shape[0])


@pytest.mark.parametrize("order", ["left", "right"])
def test_zero_d_tensor_is_its_element_on_either_side(rng, order):
    """``s + A[i]`` and ``A[i] + s`` of a 0-d ``s`` both read its element (the tensor
    operators that build broadcast stages must not catch a 0-d tensor on the left)."""
    s = td.placeholder((), name="s")
    A = td.placeholder((8,), name="A")
    body = (lambda i: s * A[i] - s) if order == "left" else (lambda i: A[i] * s - s)
    B = td.compute((8,), body, name="B")
    f = td.build(td.create_schedule(B.op), [s, A, B])
    sv, a = random_array(rng, ()), random_array(rng, (8,))
    b = np.empty(8, np.float32)
    f(sv, a, b)
    np.testing.assert_allclose(b, sv * a - sv, rtol=1e-6)
    N = td.compute((8,), lambda i: -s + A[i], name="N")
    g = td.build(td.create_schedule(N.op), [s, A, N])
    g(sv, a, b)
    np.testing.assert_allclose(b, -sv + a, rtol=1e-6)


@pytest.mark.parametrize("use", [lambda x: x == 0, lambda x: x != 0, lambda x: x ** 2,
                                 lambda x: abs(x), lambda x: x & 1, lambda x: ~x,
                                 lambda x: bool(x)],
                         ids=["eq", "ne", "pow", "abs", "and", "invert", "bool"])
def test_partial_index_used_as_a_value_is_a_shape_error(use):
    """``A[i]`` of a 2-d tensor is only a step towards ``A[i][j]``: comparing it (which
    built ``if_then_else(False, ...)``) or any other operator names the missing index."""
    A = td.placeholder((4, 5), name="A")
    with pytest.raises(td.ShapeError, match="indexed with 1 index"):
        td.compute((4, 5), lambda i, j: td.if_then_else(use(A[i]), 1.0, A[i, j]))
