"""Integer semantics (docs/ir.md, "Integer semantics"): data wraps at its width, index
arithmetic is mathematical.  The simplifier keeps only ring identities for data, constant
folding wraps, and the interpreter and LLVM agree with NumPy's wrapping arithmetic."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tdsl as td
from tdsl import interpreter
from tdsl.arith import Analyzer, simplify
from tdsl.expr import Const, FloorDiv, TensorLoad, Var, const
from tdsl.stmt import BufferStore
from tdsl.tensor import Range
from tdsl.visitor import post_order_visit

INT_DTYPES = ["int8", "uint8", "int32", "int64"]


def _store_value(f) -> str:
    found = []
    post_order_visit(f.body, lambda n: found.append(n) if isinstance(n, BufferStore) else None)
    return str(found[-1].value)


def _run_both(s, args, arrays):
    """The output (last array) from the interpreter and from LLVM."""
    outs = []
    for mode in ("interp", "llvm"):
        arrs = [a.copy() for a in arrays]
        if mode == "interp":
            interpreter.run(td.lower(s, args), *arrs)
        else:
            td.build(s, args, target="llvm")(*arrs)
        outs.append(arrs[-1])
    return outs


# ---- regression: r04 ------------------------------------------------------------------------
A32 = np.array([2**31 - 1, 2**30 + 5, -2**31, 7], "int32")


def test_data_division_of_product_is_not_cancelled():
    A = td.placeholder((4,), "int32", name="A")
    C = td.compute((4,), lambda i: (A[i] * 2) // 2, name="C")
    s = td.create_schedule(C.op)
    assert "//" in _store_value(td.lower(s, [A, C]))
    with np.errstate(all="ignore"):
        want = (A32 * np.int32(2)) // np.int32(2)
    for got in _run_both(s, [A, C], [A32, np.zeros(4, "int32")]):
        np.testing.assert_array_equal(got, want)


def test_data_comparison_with_increment_is_not_decided():
    A = td.placeholder((4,), "int32", name="A")
    C = td.compute((4,), lambda i: (A[i] + 1 > A[i]).astype("int32"), name="C")
    s = td.create_schedule(C.op)
    with np.errstate(all="ignore"):
        want = (A32 + np.int32(1) > A32).astype("int32")
    assert want[0] == 0
    for got in _run_both(s, [A, C], [A32, np.zeros(4, "int32")]):
        np.testing.assert_array_equal(got, want)


# ---- the simplifier's two modes -----------------------------------------------------------
def _load(dtype: str = "int32"):
    A = td.placeholder((8,), dtype, name="A")
    i = Var("i")
    return A, i, A[i]


def test_data_keeps_ring_identities():
    _, _, x = _load()
    assert simplify(x + 5 - 5) is x
    assert simplify(x * 1 + 0) is x
    assert simplify(x - x).value == 0
    assert str(simplify(x * 3 - x * 2)) == str(x)
    assert simplify(x + 1 == x + 1).value is True
    assert simplify(x + 1 != x).value is True      # differ by 1 modulo 2**32: never equal
    assert simplify(x <= x).value is True
    assert Analyzer().can_prove_equal(x + 7 - 3, x + 4)


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_data_gets_no_unbounded_rewrites(dtype):
    _, _, x = _load(dtype)
    two = const(2, dtype)
    for e in [(x * two) // two, (x * two) % two, x + const(1, dtype) > x,
              td.min(x + const(1, dtype), x), (x * const(4, dtype)) // const(8, dtype)]:
        r = simplify(e)
        assert not isinstance(r, Const) and str(r) != str(x), str(e)
    assert not Analyzer().can_prove(x + const(1, dtype) > x)
    lo, hi = Analyzer().const_int_bound(x * two)
    assert (lo, hi) == tuple(int(v) for v in (np.iinfo(dtype).min, np.iinfo(dtype).max))


def test_index_arithmetic_keeps_full_rules():
    A, i, _ = _load()
    assert str(simplify((i * 2) // 2)) == "i"
    assert simplify(i + 1 > i).value is True
    # an index inside a load is still index arithmetic, the load around it is data
    e = simplify((A[(i * 2) // 2] * 2) // 2)
    assert isinstance(e, FloorDiv) and isinstance(e.a.a, TensorLoad)
    assert str(e.a.a.indices[0]) == "i"


def test_variable_bound_to_data_is_data():
    _, _, x = _load()
    v = Var("v", "int32")
    ana = Analyzer()
    ana.bind(v, x)
    assert str(ana.simplify((v * 2) // 2)) != str(x)
    w = Var("w", "int32")
    ana.bind(w, Range(0, 10))
    assert str(ana.simplify((w * 2) // 2)) == "w"


def test_data_comparisons_add_no_bound_facts():
    _, i, x = _load()
    ana = Analyzer()
    with ana.constraint(x > 0):
        assert not ana.can_prove(x + 1 > 1)      # false at x = 2**31 - 1 (wraps)
        assert ana.can_prove(x > 0)              # the condition itself is known


def test_constant_folding_wraps():
    big = const(2**31 - 1, "int32")
    assert simplify(big + const(1, "int32")).value == -2**31
    assert simplify(const(-2**31, "int32") // const(-1, "int32")).value == -2**31
    assert simplify(const(2**31, "int32") // const(2, "int32")).value == -2**30
    assert simplify(const(2**31, "int32") < const(0, "int32")).value is True
    assert simplify(const(200, "uint8") + const(100, "uint8")).value == 44
    assert simplify(const(2**31, "int32").astype("int64")).value == -2**31
    _, _, x = _load()
    assert simplify(x + big + const(1, "int32") - x).value == -2**31


def test_folded_overflow_matches_numpy_when_lowered():
    A = td.placeholder((4,), "int32", name="A")
    C = td.compute((4,), lambda i: A[i] * 0 + const(2**31 - 1, "int32") + const(1, "int32"),
                   name="C")
    s = td.create_schedule(C.op)
    for got in _run_both(s, [A, C], [A32, np.zeros(4, "int32")]):
        np.testing.assert_array_equal(got, np.full(4, -2**31, "int32"))


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_division_by_zero_and_min_over_minus_one(dtype):
    info = np.iinfo(dtype)
    a = np.array([info.max, info.min, 7, 250 if dtype == "uint8" else -7, 0, 1], dtype)
    b = np.array([255 if dtype == "uint8" else -1, 0, 0, 3, 0, info.max], dtype)
    A = td.placeholder((6,), dtype, name="A")
    B = td.placeholder((6,), dtype, name="B")
    for op in (lambda x, y: x // y, lambda x, y: x % y):
        C = td.compute((6,), lambda i: op(A[i], B[i]), name="C")
        s = td.create_schedule(C.op)
        with np.errstate(all="ignore"):
            want = op(a, b)
        for got in _run_both(s, [A, B, C], [a, b, np.zeros(6, dtype)]):
            np.testing.assert_array_equal(got, want)


# ---- differential: random integer data expressions against NumPy --------------------------
def _consts(dtype: str) -> list:
    info = np.iinfo(dtype)
    return sorted({int(info.min), int(info.min) + 1, int(info.max), int(info.max) - 1, 0, 1, 2,
                   3, 7, int(info.max) // 2} | ({-1, -2} if info.min < 0 else set()))


_BIN = ["+", "-", "*", "//", "%", "min", "max"]
_CMP = ["<", "<=", ">", ">=", "==", "!="]


def _trees(dtype: str):
    leaf = st.sampled_from(["A", "B"]) | st.sampled_from(_consts(dtype)).map(lambda c: ("c", c))

    def extend(ch):
        return st.one_of(
            st.tuples(st.sampled_from(_BIN), ch, ch),
            st.tuples(st.just("via"), st.sampled_from(INT_DTYPES), ch),
            st.tuples(st.just("cmp"), st.sampled_from(_CMP), ch, ch),
        )
    return st.recursive(leaf, extend, max_leaves=8)


def _tdsl(t, a, b, dtype):
    if t == "A":
        return a
    if t == "B":
        return b
    if t[0] == "c":
        return const(t[1], dtype)
    if t[0] == "via":
        return _tdsl(t[2], a, b, dtype).astype(t[1]).astype(dtype)
    if t[0] == "cmp":
        x, y = _tdsl(t[2], a, b, dtype), _tdsl(t[3], a, b, dtype)
        return {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y,
                "==": x == y, "!=": x != y}[t[1]].astype(dtype)
    x, y = _tdsl(t[1], a, b, dtype), _tdsl(t[2], a, b, dtype)
    return {"+": lambda: x + y, "-": lambda: x - y, "*": lambda: x * y, "//": lambda: x // y,
            "%": lambda: x % y, "min": lambda: td.min(x, y), "max": lambda: td.max(x, y)}[t[0]]()


def _numpy(t, a, b, dtype):
    if t == "A":
        return a
    if t == "B":
        return b
    if t[0] == "c":
        return np.full(a.shape, t[1], dtype)
    if t[0] == "via":
        return _numpy(t[2], a, b, dtype).astype(t[1]).astype(dtype)
    if t[0] == "cmp":
        x, y = _numpy(t[2], a, b, dtype), _numpy(t[3], a, b, dtype)
        return {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y,
                "==": x == y, "!=": x != y}[t[1]].astype(dtype)
    x, y = _numpy(t[1], a, b, dtype), _numpy(t[2], a, b, dtype)
    return {"+": np.add, "-": np.subtract, "*": np.multiply, "//": np.floor_divide,
            "%": np.remainder, "min": np.minimum, "max": np.maximum}[t[0]](x, y)


def _uses(t, name: str) -> bool:
    return t == name or (isinstance(t, tuple) and any(_uses(c, name) for c in t))


N = 13   # does not divide the vector width 4


@st.composite
def _cases(draw):
    dtype = draw(st.sampled_from(INT_DTYPES))
    tree = draw(_trees(dtype))
    pool = _consts(dtype)
    info = np.iinfo(dtype)
    vals = st.sampled_from(pool) | st.integers(int(info.min), int(info.max))
    a = np.array(draw(st.lists(vals, min_size=N, max_size=N)), dtype)
    b = np.array(draw(st.lists(vals, min_size=N, max_size=N)), dtype)
    return dtype, tree, a, b


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_cases(), st.booleans())
def test_random_integer_data_matches_numpy(case, vectorize):
    dtype, tree, a, b = case
    A = td.placeholder((N,), dtype, name="A")
    B = td.placeholder((N,), dtype, name="B")
    C = td.compute((N,), lambda i: _tdsl(tree, A[i], B[i], dtype), name="C")
    s = td.create_schedule(C.op)
    if vectorize:
        _, inner = s[C].split(C.op.axis[0], factor=4)
        s[C].vectorize(inner)
    with np.errstate(all="ignore"):
        want = _numpy(tree, a, b, dtype)
    used = [(t, x) for t, x in ((A, a), (B, b)) if _uses(tree, t.name)]
    args = [t for t, _ in used] + [C]
    arrays = [x for _, x in used] + [np.zeros(N, dtype)]
    for got, mode in zip(_run_both(s, args, arrays), ("interpreter", "llvm")):
        np.testing.assert_array_equal(got, want, err_msg=f"{mode}: {tree} on {dtype}")
