"""LLVM backend: code generation of every IR node against NumPy.

Rounding and overflow rules checked here (docs/ir.md): integers wrap at their
width; ``//`` and ``%`` are floor division/modulo (division by zero gives 0 and
``INT_MIN // -1`` wraps, as NumPy does); float16 rounds after every operation;
float → int truncates toward zero and saturates; number → bool is ``!= 0``.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from tdsl.errors import BuildError, TDSLError
from tdsl.expr import (Cast, Const, FloorDiv, FloorMod, Max, Min, Select, SizeVar,
                       Var, call)
from tdsl.stmt import (Allocate, Barrier, Buffer, Evaluate, For, ForKind, IfThenElse, LetStmt,
                       SeqStmt, ThreadTag)

try:
    from .llvm_irbuild import (P, S, U, V, elementwise, load, loop, prim, store,
                               vector_elementwise)
except ImportError:
    from llvm_irbuild import (P, S, U, V, elementwise, load, loop, prim, store,
                              vector_elementwise)

from tdsl.backends.llvm import build

RNG = np.random.default_rng(1234)
INT_DTYPES = ["int8", "uint8", "int32", "int64"]
FLOAT_DTYPES = ["float16", "float32", "float64"]
ALL_DTYPES = INT_DTYPES + FLOAT_DTYPES + ["bool"]


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TDSL_CACHE_DIR", str(tmp_path / "cache"))


def rand(dtype: str, n: int, nonzero: bool = False, small: bool = False) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return RNG.random(n) < 0.5
    if dt.kind in "iu":
        info = np.iinfo(dt)
        lo, hi = (info.min, info.max) if not small else (max(info.min, -50), min(info.max, 50))
        x = RNG.integers(lo, hi, size=n, endpoint=True, dtype=dt)
        if nonzero:
            x[x == 0] = 3
        return x
    x = (RNG.standard_normal(n) * 4).astype(dt)
    if nonzero:
        x[np.abs(x) < 0.25] = 1.5
    return x


def run(func, *arrays):
    build(func)(*arrays)


def make(kind: str, name: str, dtype: str, fn, nin: int = 2, out_dtype=None):
    if kind == "serial":
        return elementwise(name, dtype, fn, nin, out_dtype=out_dtype)
    f = vector_elementwise(name, dtype, fn, nin, out_dtype=out_dtype)
    assert not [n for n in build(f).notes if "not widened" in n], \
        "the vectorized loop was not widened"
    return f


# ---- elementwise basics ----------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["serial", "vector"])
@pytest.mark.parametrize("n", [1, 15, 16, 17, 100])
def test_elementwise_add(kind, n):
    f = make(kind, "add", "float32", lambda a, b: a + b)
    a, b = rand("float32", n), rand("float32", n)
    c = rand("float32", n)
    run(f, a, b, c)
    np.testing.assert_array_equal(c, a + b)


BINOPS = {
    "add": (lambda a, b: a + b, np.add),
    "sub": (lambda a, b: a - b, np.subtract),
    "mul": (lambda a, b: a * b, np.multiply),
    "min": (lambda a, b: Min(a, b), np.minimum),
    "max": (lambda a, b: Max(a, b), np.maximum),
}


@pytest.mark.parametrize("kind", ["serial", "vector"])
@pytest.mark.parametrize("dtype", INT_DTYPES + FLOAT_DTYPES)
@pytest.mark.parametrize("op", list(BINOPS))
def test_binary_ops_every_dtype(kind, dtype, op):
    fn, ref = BINOPS[op]
    n = 77
    a, b = rand(dtype, n), rand(dtype, n)
    c = rand(dtype, n)
    run(make(kind, f"{op}_{dtype}", dtype, fn), a, b, c)
    with np.errstate(all="ignore"):
        want = ref(a, b)
    np.testing.assert_array_equal(c, want)  # wraparound ints, per-op rounded floats


@pytest.mark.parametrize("kind", ["serial", "vector"])
@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_int_floordiv_mod_python_semantics(kind, dtype):
    n = 200
    a, b = rand(dtype, n), rand(dtype, n, small=True)
    b[:5] = 0  # NumPy: x // 0 == 0 and x % 0 == 0; must not trap
    if np.dtype(dtype).kind == "i":
        a[5] = np.iinfo(dtype).min
        b[5] = -1  # INT_MIN // -1 wraps
    q, r = rand(dtype, n), rand(dtype, n)
    run(make(kind, f"fd_{dtype}", dtype, lambda x, y: FloorDiv(x, y)), a, b, q)
    run(make(kind, f"fm_{dtype}", dtype, lambda x, y: FloorMod(x, y)), a, b, r)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        np.testing.assert_array_equal(q, np.floor_divide(a, b))
        np.testing.assert_array_equal(r, np.remainder(a, b))


@pytest.mark.parametrize("kind", ["serial", "vector"])
@pytest.mark.parametrize("divisor", [7, -7, 16])
def test_int_floordiv_by_constant(kind, divisor):
    n = 300
    a = RNG.integers(-1000, 1000, size=n).astype("int64")
    q, r = np.zeros(n, "int64") + 5, np.zeros(n, "int64") + 5
    run(make(kind, "fdc", "int64", lambda x: FloorDiv(x, Const(divisor, "int64")), 1), a, q)
    run(make(kind, "fmc", "int64", lambda x: FloorMod(x, Const(divisor, "int64")), 1), a, r)
    np.testing.assert_array_equal(q, a // divisor)
    np.testing.assert_array_equal(r, a % divisor)


@pytest.mark.parametrize("kind", ["serial", "vector"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_float_div_floordiv_mod(kind, dtype):
    n = 99
    a, b = rand(dtype, n), rand(dtype, n, nonzero=True)
    d, q, r = rand(dtype, n), rand(dtype, n), rand(dtype, n)
    run(make(kind, "fdiv", dtype, lambda x, y: x / y), a, b, d)
    run(make(kind, "ffd", dtype, lambda x, y: FloorDiv(x, y)), a, b, q)
    run(make(kind, "ffm", dtype, lambda x, y: FloorMod(x, y)), a, b, r)
    np.testing.assert_array_equal(d, a / b)
    fq = np.floor(a / b)  # the IR's definition: floor(a / b), each step in the dtype
    np.testing.assert_array_equal(q, fq)
    np.testing.assert_array_equal(r, a - fq * b)


def test_float16_rounds_after_every_operation():
    n = 64
    a, b, c = rand("float16", n), rand("float16", n), rand("float16", n)
    out = rand("float16", n)
    for kind in ("serial", "vector"):
        f = make(kind, "h3", "float16", lambda x, y, z: x * y + z - x / z, nin=3)
        run(f, a, b, c, out)
        with np.errstate(all="ignore"):
            want = a * b + c - a / c  # NumPy rounds each step to float16
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("kind", ["serial", "vector"])
@pytest.mark.parametrize("src", ALL_DTYPES)
@pytest.mark.parametrize("dst", ALL_DTYPES)
def test_casts(kind, src, dst):
    n = 70
    if np.dtype(src).kind == "f":
        x = (RNG.standard_normal(n) * 40).astype(src)  # within every int range... mostly
        if np.dtype(dst).kind in "iu":
            info = np.iinfo(dst)
            x = np.clip(x, max(info.min, -100), min(info.max, 100)).astype(src)
    else:
        x = rand(src, n)
    y = rand(dst, n)
    run(make(kind, f"cast_{src}_{dst}", src, lambda v: Cast(v, dst), nin=1, out_dtype=dst), x, y)
    with np.errstate(all="ignore"):
        want = x.astype(dst) if dst != "bool" else (x != 0)
    np.testing.assert_array_equal(y, want)


def test_float_to_int_saturates():
    # docs/ir.md: truncate toward zero, then saturate at the dtype's range
    x = np.array([3.7, -3.7, 300.0, -1.5, 255.9, 0.2], "float32")
    for dst, want in (("int8", [3, -3, 127, -1, 127, 0]), ("uint8", [3, 0, 255, 0, 255, 0])):
        y = rand(dst, 6)
        run(elementwise(f"f2{dst}", "float32", lambda v: Cast(v, dst), 1, out_dtype=dst), x, y)
        np.testing.assert_array_equal(y, np.array(want, dst))


@pytest.mark.parametrize("kind", ["serial", "vector"])
@pytest.mark.parametrize("dtype", INT_DTYPES + FLOAT_DTYPES)
def test_comparisons_produce_bool(kind, dtype):
    n = 50
    a, b = rand(dtype, n), rand(dtype, n)
    b[::3] = a[::3]
    for name, fn, ref in (("lt", lambda x, y: x < y, np.less), ("le", lambda x, y: x <= y, np.less_equal),
                          ("eq", lambda x, y: x == y, np.equal), ("ne", lambda x, y: x != y, np.not_equal),
                          ("gt", lambda x, y: x > y, np.greater), ("ge", lambda x, y: x >= y, np.greater_equal)):
        out = rand("bool", n)
        run(make(kind, f"c{name}", dtype, fn, out_dtype="bool"), a, b, out)
        np.testing.assert_array_equal(out, ref(a, b), err_msg=name)


def test_nan_comparisons():
    a = np.array([np.nan, 1.0, np.nan, 2.0], "float32")
    b = np.array([1.0, np.nan, np.nan, 2.0], "float32")
    for fn, ref in ((lambda x, y: x != y, np.not_equal), (lambda x, y: x == y, np.equal),
                    (lambda x, y: x < y, np.less)):
        out = rand("bool", 4)
        run(elementwise("nan", "float32", fn, out_dtype="bool"), a, b, out)
        np.testing.assert_array_equal(out, ref(a, b))


@pytest.mark.parametrize("kind", ["serial", "vector"])
def test_bool_logic(kind):
    n = 40
    a, b = rand("bool", n), rand("bool", n)
    for name, fn, ref in (("and", lambda x, y: x & y, np.logical_and),
                          ("or", lambda x, y: x | y, np.logical_or),
                          ("not", lambda x, y: ~x, lambda x, y: ~x),
                          ("sel", lambda x, y: Select(x, y, ~y), lambda x, y: np.where(x, y, ~y))):
        out = rand("bool", n)
        run(make(kind, f"b{name}", "bool", fn), a, b, out)
        np.testing.assert_array_equal(out, ref(a, b), err_msg=name)


# ---- lazy select --------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", [S, V])
def test_select_does_not_evaluate_guarded_load(kind):
    """out[i] = A[i + shift] if i + shift < n else -1: the untaken load is out of bounds
    (by a huge offset: evaluating it would crash)."""
    n = SizeVar("n")
    A = Buffer("A", [n], "float32")
    Out = Buffer("Out", [n], "float32")
    shift = Const(1 << 40, "int64")

    def body(i):
        j = i + shift
        return store(Out, Select((j < n) & (load(A, i) > -100.0), load(A, j), Const(-1.0, "float32")), i)
    f = prim("lazysel", [A, Out], loop("i", 16, body, kind), [n])
    a = rand("float32", 16)
    out = rand("float32", 16)
    run(f, a, out)
    np.testing.assert_array_equal(out, np.full(16, -1.0, "float32"))


@pytest.mark.parametrize("kind", [S, V])
def test_select_with_lane_guard_pads(kind):
    """A padded read: out[i] = A[i - 2] if 2 <= i < n + 2 else 0 over n + 4 elements."""
    n = SizeVar("n")
    A = Buffer("A", [n], "float32")
    Out = Buffer("Out", [n + 4], "float32")

    def body(i):
        return store(Out, Select((i >= 2) & (i < n + 2), load(A, i - 2), Const(0.0, "float32")), i)
    f = prim("pad", [A, Out], loop("i", n + 4, body), [n])
    if kind is V:
        def tiled(io):
            def lane(ii):
                i = io * 8 + ii
                return IfThenElse(i < n + 4, body(i))
            return loop("ii", 8, lane, V)
        f = prim("padv", [A, Out], loop("io", (n + 4 + 7) // 8, tiled), [n])
    for size in (1, 5, 13):
        a = rand("float32", size)
        out = rand("float32", size + 4)
        run(f, a, out)
        np.testing.assert_array_equal(out, np.pad(a, 2))


# ---- intrinsics ------------------------------------------------------------------------------------
UNARY = {
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "log10": np.log10,
    "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "abs": np.abs, "floor": np.floor,
    "ceil": np.ceil, "round": np.rint, "trunc": np.trunc, "sin": np.sin, "cos": np.cos,
}


def _erf(x):
    import math
    return np.vectorize(math.erf)(x.astype("float64")).astype(x.dtype)


@pytest.mark.parametrize("kind", ["serial", "vector"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("name", list(UNARY) + ["erf"])
def test_unary_intrinsics(kind, dtype, name):
    n = 67
    x = rand(dtype, n)
    if name in ("log", "log2", "log10", "sqrt", "rsqrt"):
        x = (np.abs(x) + np.asarray(0.1, dtype)).astype(dtype)
    if name == "round":
        x[:6] = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 3.5], dtype)  # ties to even
    y = rand(dtype, n)
    run(make(kind, f"u_{name}", dtype, lambda v: call(name, v), nin=1), x, y)
    with np.errstate(all="ignore"):
        ref = _erf(x) if name == "erf" else UNARY[name](x)
        ref = np.asarray(ref).astype(dtype)
    tol = {"float16": 2e-3, "float32": 2e-6, "float64": 1e-13}[dtype]
    np.testing.assert_allclose(y.astype("float64"), ref.astype("float64"), rtol=tol, atol=tol)


@pytest.mark.parametrize("kind", ["serial", "vector"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_pow_and_isnan(kind, dtype):
    n = 33
    x = (np.abs(rand(dtype, n)) + np.asarray(0.5, dtype)).astype(dtype)
    y = (rand(dtype, n) / 4).astype(dtype)
    out = rand(dtype, n)
    run(make(kind, "pow", dtype, lambda a, b: call("pow", a, b)), x, y, out)
    tol = {"float16": 2e-3, "float32": 2e-6, "float64": 1e-13}[dtype]
    np.testing.assert_allclose(out.astype("f8"), np.power(x, y).astype("f8"), rtol=tol)
    z = x.copy()
    z[::4] = np.nan
    flags = rand("bool", n)
    run(make(kind, "isnan", dtype, lambda a: call("isnan", a), nin=1, out_dtype="bool"), z, flags)
    np.testing.assert_array_equal(flags, np.isnan(z))


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8"])
def test_int_abs_wraps(dtype):
    x = rand(dtype, 50)
    if np.dtype(dtype).kind == "i":
        x[0] = np.iinfo(dtype).min
    y = rand(dtype, 50)
    run(elementwise("iabs", dtype, lambda v: call("abs", v), 1), x, y)
    np.testing.assert_array_equal(y, np.abs(x))


# ---- statements ------------------------------------------------------------------------------------
def test_let_and_if_else_scalar_and_vector():
    n = SizeVar("n")
    A = Buffer("A", [n], "int32")
    Out = Buffer("Out", [n], "int32")
    for kind in (S, V):
        def body(i):
            t = Var("t", "int32")
            return LetStmt(t, load(A, i) * 3, IfThenElse(
                FloorMod(t, Const(2, "int32")) == Const(0, "int32"),
                store(Out, t, i), store(Out, -t, i)))
        if kind is V:
            f = prim("letv", [A, Out], loop("io", n // 8, lambda io: loop(
                "ii", 8, lambda ii: body(io * 8 + ii), V)), [n])
        else:
            f = prim("lets", [A, Out], loop("i", n, body), [n])
        a = rand("int32", 64, small=True)
        out = rand("int32", 64)
        run(f, a, out)
        t = a * 3
        np.testing.assert_array_equal(out, np.where(t % 2 == 0, t, -t))


def test_strided_vector_access_gather_scatter():
    """Out[2*i] = A[3*i] + 1 inside a vectorized loop (a strided load: one contiguous load
    and a shuffle, ``test_llvm_strided_loads.py``; a scatter)."""
    A = Buffer("A", [48], "float32")
    Out = Buffer("Out", [32], "float32")
    f = prim("strided", [A, Out], loop("i", 16, lambda i: store(
        Out, load(A, i * 3) + Const(1.0, "float32"), i * 2), V))
    a = rand("float32", 48)
    out = rand("float32", 32)
    keep = out.copy()
    run(f, a, out)
    keep[::2] = a[::3] + 1
    np.testing.assert_array_equal(out, keep)
    mod = build(f)
    ll = mod.get_source("ll")
    assert "masked.scatter" in ll and "shufflevector" in ll and not mod.notes


def test_vectorized_reduction_falls_back_but_is_correct():
    """s[0] += A[i] over a vectorized i: lanes would race; must stay serial (correct)."""
    A = Buffer("A", [32], "float64")
    Sum = Buffer("Sum", [1], "float64")
    f = prim("vred", [A, Sum], loop("i", 32, lambda i: store(
        Sum, load(Sum, 0) + load(A, i), 0), V))
    a = rand("float64", 32)
    s = np.array([1.25])
    mod = build(f)
    mod(a, s)
    np.testing.assert_allclose(s[0], 1.25 + a.sum(), rtol=1e-12)
    assert mod.notes and "not widened" in mod.notes[0]


def test_vectorized_shifted_inplace_falls_back():
    """A[i + 1] = A[i] * 2 in a vectorized loop: lane i reads what lane i-1 wrote."""
    A = Buffer("A", [17], "int64")
    f = prim("shift", [A], loop("i", 16, lambda i: store(A, load(A, i) * 2, i + 1), V))
    a = np.arange(1, 18, dtype="int64")
    want = a.copy()
    for i in range(16):
        want[i + 1] = want[i] * 2
    mod = build(f)
    mod(a)
    np.testing.assert_array_equal(a, want)
    assert mod.notes


def test_vectorized_loop_with_inner_serial_loop():
    """Out[i, j] = sum_k A[i, k] * B[k, j] with j vectorized around a serial k loop."""
    A = Buffer("A", [4, 8], "float32")
    B = Buffer("B", [8, 16], "float32")
    Out = Buffer("Out", [4, 16], "float32")
    f = prim("inner", [A, B, Out], loop("i", 4, lambda i: loop("j", 16, lambda j: SeqStmt([
        store(Out, Const(0.0, "float32"), i, j),
        loop("k", 8, lambda k: store(Out, load(Out, i, j) + load(A, i, k) * load(B, k, j), i, j)),
    ]), V)))
    a, b = rand("float32", 32).reshape(4, 8), rand("float32", 128).reshape(8, 16)
    out = rand("float32", 64).reshape(4, 16)
    mod = build(f)
    mod(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    assert not mod.notes


@pytest.mark.parametrize("explicit", [1, 0])
def test_unrolled_loop(explicit):
    n = SizeVar("n")
    A = Buffer("A", [n, 4], "int32")
    Out = Buffer("Out", [n, 4], "int32")

    def body(i):
        v = Var("j")
        return For(v, 0, 4, U, store(Out, load(A, i, v) + v.astype("int32"), i, v),
                   annotations={"pragma_unroll_explicit": explicit})
    f = prim(f"unr{explicit}", [A, Out], loop("i", n, body), [n])
    a = rand("int32", 20, small=True).reshape(5, 4)
    out = rand("int32", 20).reshape(5, 4)
    run(f, a, out)
    np.testing.assert_array_equal(out, a + np.arange(4, dtype="int32"))


@pytest.mark.parametrize("size", [64, 1 << 16])  # stack and heap
@pytest.mark.parametrize("scope", ["local", "global", "shared"])
def test_allocate(size, scope):
    """T = A * 2 into a temporary, then Out = T + 1 (constant-size allocation)."""
    A = Buffer("A", [size], "float32")
    Out = Buffer("Out", [size], "float32")
    T = Buffer("T", [size], "float32", scope=scope)
    f = prim(f"alloc_{scope}_{size}", [A, Out], Allocate(T, SeqStmt([
        loop("i", size, lambda i: store(T, load(A, i) * Const(2.0, "float32"), i)),
        loop("i", size, lambda i: store(Out, load(T, i) + Const(1.0, "float32"), i)),
    ])))
    a = rand("float32", size)
    out = rand("float32", size)
    run(f, a, out)
    np.testing.assert_array_equal(out, a * 2 + 1)


def test_allocate_symbolic_size_and_parallel_local():
    n = SizeVar("n")
    A = Buffer("A", [n, 8], "float32")
    Out = Buffer("Out", [n, 8], "float32")
    T = Buffer("T", [n * 8], "float32")
    L = Buffer("L", [8], "float32", scope="local")

    def row(i):
        return Allocate(L, SeqStmt([
            loop("j", 8, lambda j: store(L, load(T, i * 8 + j) + Const(1.0, "float32"), j)),
            loop("j", 8, lambda j: store(Out, load(L, 7 - j), i, j)),
        ]))
    f = prim("symalloc", [A, Out], Allocate(T, SeqStmt([
        loop("i", n * 8, lambda i: store(T, load(A, i // 8, i % 8), i)),
        loop("i", n, row, P),
    ])), [n])
    a = rand("float32", 200).reshape(25, 8)
    out = rand("float32", 200).reshape(25, 8)
    run(f, a, out)
    np.testing.assert_array_equal(out, (a + 1)[:, ::-1])


def test_evaluate_statement_is_harmless():
    A = Buffer("A", [4], "float32")
    f = prim("ev", [A], SeqStmt([Evaluate(Const(0, "int32")),
                                 loop("i", 4, lambda i: Evaluate(load(A, i) + Const(1.0, "float32")))]))
    a = rand("float32", 4)
    b = a.copy()
    run(f, a)
    np.testing.assert_array_equal(a, b)


def test_gpu_only_constructs_are_refused():
    A = Buffer("A", [32], "float32")
    tx = Var("tx")
    bound = prim("bound", [A], For(tx, 0, 32, ForKind.THREAD_BINDING, store(A, Const(1.0, "float32"), tx),
                                   thread_tag=ThreadTag.THREAD_X))
    with pytest.raises(BuildError, match="GPU"):
        build(bound)
    barrier = prim("barrier", [A], SeqStmt([Barrier(), store(A, Const(1.0, "float32"), 0)]))
    with pytest.raises(BuildError, match="GPU"):
        build(barrier)
    assert issubclass(BuildError, TDSLError)


def test_bool_buffers_roundtrip_through_memory():
    n = SizeVar("n")
    A = Buffer("A", [n], "bool")
    X = Buffer("X", [n], "float32")
    Out = Buffer("Out", [n], "float32")
    f = prim("bsel", [A, X, Out], loop("i", n, lambda i: store(
        Out, Select(load(A, i), load(X, i), -load(X, i)), i)), [n])
    a, x = rand("bool", 21), rand("float32", 21)
    out = rand("float32", 21)
    run(f, a, x, out)
    np.testing.assert_array_equal(out, np.where(a, x, -x))


def test_fast_math_attribute_changes_flags():
    f = elementwise("fm", "float32", lambda a, b: a * b + a)
    f.attrs["fast_math"] = True
    mod = build(f)
    assert "fast" in mod.get_source("ll")
    assert "contract" in build(elementwise("nofm", "float32", lambda a, b: a * b + a)).get_source("ll")


def test_vector_lane_index_as_value():
    """Out[i] = float(i) * 0.5 + A[i] with i vectorized (the ramp itself is a value)."""
    A = Buffer("A", [32], "float32")
    Out = Buffer("Out", [32], "float32")
    f = prim("rampval", [A, Out], loop("i", 32, lambda i: store(
        Out, Cast(i, "float32") * Const(0.5, "float32") + load(A, i), i), V))
    a = rand("float32", 32)
    out = rand("float32", 32)
    mod = build(f)
    mod(a, out)
    np.testing.assert_array_equal(out, np.arange(32, dtype="float32") * 0.5 + a)
    assert not mod.notes


def test_nested_lane_guards():
    """Two lane-dependent ifs nested, with else branches, inside a vectorized loop."""
    n = SizeVar("n")
    A = Buffer("A", [n], "int32")
    Out = Buffer("Out", [n], "int32")

    def body(i):
        x = load(A, i)
        return IfThenElse(i < n, IfThenElse(
            x > Const(0, "int32"),
            IfThenElse(FloorMod(x, Const(3, "int32")) == Const(0, "int32"),
                       store(Out, x, i), store(Out, x * Const(2, "int32"), i)),
            store(Out, -x, i)))
    f = prim("nestguard", [A, Out], loop("io", (n + 7) // 8, lambda io: loop(
        "ii", 8, lambda ii: body(io * 8 + ii), V)), [n])
    for size in (3, 8, 29):
        a = rand("int32", size, small=True)
        out = rand("int32", size)
        run(f, a, out)
        np.testing.assert_array_equal(out, np.where(a > 0, np.where(a % 3 == 0, a, 2 * a), -a))


class CopyScaleIntrin:
    """A stand-in tensor intrinsic with only a fallback: out = 2 * in over a region."""

    def lower_fallback(self, call):
        (src,), (dst,) = call.inputs, call.outputs
        ext = dst.extents[0]

        def body(i):
            return store(dst.buffer, load(src.buffer, src.mins[0] + i) * Const(2.0, "float32"),
                         dst.mins[0] + i)
        return loop("t", ext, body)


def test_intrin_call_uses_fallback():
    from tdsl.stmt import BufferRegion, IntrinCall
    A = Buffer("A", [32], "float32")
    Out = Buffer("Out", [32], "float32")
    f = prim("intrin", [A, Out], loop("o", 4, lambda o: IntrinCall(
        CopyScaleIntrin(), [BufferRegion(A, [o * 8], [8])], [BufferRegion(Out, [o * 8], [8])],
        reset=False, update=False)))
    a = rand("float32", 32)
    out = rand("float32", 32)
    run(f, a, out)
    np.testing.assert_array_equal(out, a * 2)
