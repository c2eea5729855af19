"""Tests of tdsl.arith: folding rules, bounds, int_set, the SymPy bridge, and
property tests checking that simplification never changes a value."""
from __future__ import annotations

import random

import pytest
import sympy
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import tdsl
import tdsl.visitor
from tdsl.arith import Analyzer, Interval, const_fold, from_sympy, simplify, to_sympy
from tdsl.dtype import DType
from tdsl.expr import (Add, And, Cast, Const, EQ, Expr, FloorDiv, FloorMod, GE, GT, LE, LT,
                       Max, Min, Mul, NE, Not, Or, Select, SizeVar, Sub, Var, const)
from tdsl.tensor import Range


# ---- a tiny reference evaluator (Python integer semantics, floor div/mod) ----------------
def ev(e: Expr, env: dict) -> object:
    cls = type(e)
    if cls is Const:
        return e.value
    if isinstance(e, Var):
        return env[e]
    if cls is Select:
        return ev(e.true_value, env) if ev(e.cond, env) else ev(e.false_value, env)
    if cls is Not:
        return not ev(e.a, env)
    if cls is Cast:
        v = ev(e.value, env)
        return bool(v) if e.dtype.is_bool else (int(v) if e.dtype.is_int else float(v))
    if cls is And:
        return ev(e.a, env) and ev(e.b, env)
    if cls is Or:
        return ev(e.a, env) or ev(e.b, env)
    a, b = ev(e.a, env), ev(e.b, env)
    return {Add: lambda: a + b, Sub: lambda: a - b, Mul: lambda: a * b,
            FloorDiv: lambda: a // b, FloorMod: lambda: a % b, Min: lambda: min(a, b),
            Max: lambda: max(a, b), LT: lambda: a < b, LE: lambda: a <= b, GT: lambda: a > b,
            GE: lambda: a >= b, EQ: lambda: a == b, NE: lambda: a != b}[cls]()


def s(e: Expr) -> str:
    """Deterministic text of an expression (independent of the printer)."""
    cls = type(e)
    if cls is Const:
        return str(e.value)
    if isinstance(e, Var):
        return e.name
    if cls is Select:
        return f"sel({s(e.cond)}, {s(e.true_value)}, {s(e.false_value)})"
    if cls is Min or cls is Max:
        return f"{cls.__name__.lower()}({s(e.a)}, {s(e.b)})"
    if cls is Not:
        return f"!({s(e.a)})"
    if cls is Cast:
        return f"{e.dtype}({s(e.value)})"
    return f"({s(e.a)} {e.symbol} {s(e.b)})"


i, j, io, ii, jo, ji = (Var(x) for x in ("i", "j", "io", "ii", "jo", "ji"))
n, m = SizeVar("n"), SizeVar("m")


def ana32() -> Analyzer:
    ana = Analyzer()
    ana.bind(ii, Range(0, 32))
    ana.bind(ji, Range(0, 32))
    return ana


def assert_same(ana: Analyzer, e: Expr, expected: Expr) -> None:
    got = ana.simplify(e)
    assert s(got) == s(expected), f"{s(e)} -> {s(got)}, expected {s(expected)}"


# ---- canonical form ---------------------------------------------------------------------
def test_linear_cancellation_and_identities():
    ana = Analyzer()
    assert ana.simplify((i * 32 + j) - i * 32) is j
    assert ana.simplify(i + 0) is i
    assert ana.simplify(i * 1) is i
    assert s(ana.simplify(0 * i)) == "0"
    assert s(ana.simplify(i + 3 + 4 - i)) == "7"
    assert s(ana.simplify((i + 1) * 2 - i)) == s(ana.simplify(i + 2))
    assert s(ana.simplify(i * j - j * i)) == "0"


def test_canonical_order_is_deterministic():
    ana = Analyzer()
    a = ana.simplify(j + i * 4 + 3 + io * 64)
    b = ana.simplify(3 + io * 64 + (i * 2) * 2 + j)
    assert s(a) == s(b)
    assert ana.can_prove_equal(a, b)


def test_distinct_vars_with_same_name_stay_distinct():
    i2 = Var("i")
    e = simplify(i - i2)
    assert s(simplify(e)) != "0"
    assert not Analyzer().can_prove_equal(i, i2)


def test_dtype_is_preserved():
    x = Var("x", "int32")
    for e in (x + 0, x * 4 // 2, tdsl.min(x, x + 1), (x * 8) % 4, x - x):
        assert simplify(e).dtype == DType.INT32
    assert simplify(i * 4 // 4).dtype == DType.INT64
    assert simplify(i < 3).dtype == DType.BOOL


# ---- floor division / modulo -------------------------------------------------------------
def test_divmod_with_bounds():
    ana = ana32()
    assert ana.simplify((io * 32 + ii) // 32) is io
    assert ana.simplify((io * 32 + ii) % 32) is ii
    assert s(ana.simplify(ii // 32)) == "0"
    assert ana.simplify(ii % 32) is ii
    assert s(ana.simplify((ii + 32) // 32)) == "1"
    assert s(ana.simplify((ii + 32) % 32)) == "ii"


def test_divmod_without_bounds():
    ana = Analyzer()
    assert_same(ana, (i * 8) % 4, const(0, "int64"))
    assert_same(ana, (i * 8) // 4, i * 2)
    assert_same(ana, (i * 4 + j * 4) // 4, i + j)
    assert_same(ana, (i // 4) // 8, i // 32)
    assert_same(ana, (i % 32) % 8, i % 8)
    assert_same(ana, (i // 4) * 4 + i % 4, i)
    # unbounded vars may be negative: these must NOT fold
    assert s(ana.simplify(i // 32)) == "(i // 32)"
    assert s(ana.simplify(i % 32)) == "(i % 32)"
    assert s(ana.simplify((i * 32 + j) // 32)) == "(i + (j // 32))"


def test_symbolic_divisor():
    ana = Analyzer()
    ana.bind(j, Range(0, n))
    assert ana.simplify((i * n + j) // n) is i
    assert ana.simplify((i * n + j) % n) is j
    assert s(ana.simplify(n // n)) == "1"
    assert s(ana.simplify((n * 4) % n)) == "0"


def test_fused_symbolic_axes_merge_back():
    f = Var("f")
    assert simplify((f // m) * m + f % m) is f
    assert simplify((f // (m * n)) * (n * m) + f % (n * m)) is f
    assert s(simplify((f // m) * m * 3 + (f % m) * 3 + 1)) == "((f * 3) + 1)"
    ana = Analyzer()
    ana.bind(f, Range(0, n * m))
    assert ana.simplify((f // m) * m + f % m) is f


def test_divmod_by_zero_is_zero():
    # docs/ir.md: integer x // 0 == x % 0 == 0
    for e in (simplify(i // (j - j)), simplify(i % (j - j))):
        assert isinstance(e, Const) and e.value == 0


# ---- min / max / comparisons / logic ----------------------------------------------------------
def test_min_max():
    ana = Analyzer()
    ana.bind(io, Range(0, 4))
    assert ana.simplify(tdsl.min(i, i + 1)) is i
    assert ana.simplify(tdsl.max(i, i)) is i
    assert ana.simplify(tdsl.max(i, i - 3)) is i
    e = ana.simplify(tdsl.min(32, n - io * 32))
    assert isinstance(e, Min)                      # not provable either way
    assert s(ana.simplify(tdsl.min(io * 32, 200))) == "(io * 32)"
    assert s(ana.simplify(tdsl.max(io, 0))) == "io"
    assert ana.can_prove_equal(tdsl.min(i, j), tdsl.min(j, i))
    assert ana.simplify(tdsl.min(tdsl.min(i, j), i)).__class__ is Min
    assert ana.simplify(tdsl.max(tdsl.min(i, j), i)) is i
    assert s(ana.simplify(tdsl.min(i + 5, j + 5))) == s(ana.simplify(tdsl.min(i, j) + 5))


def test_comparisons_fold_with_bounds():
    ana = ana32()
    assert s(ana.simplify(ii < 32)) == "True"
    assert s(ana.simplify(ii >= 32)) == "False"
    assert s(ana.simplify(ii * 2 + 1 == 6)) == "False"   # parity
    assert ana.can_prove(ii + ji <= 62)
    assert not ana.can_prove(ii + ji < 62)
    assert s(ana.simplify(i * 4 < n * 4 + 8)) == "(i < (n + 2))"
    assert s(ana.simplify(n >= 1)) == "True"            # SizeVar >= 1 without binding
    assert s(ana.simplify(n > 0)) == "True"


def test_logic_and_select():
    ana = ana32()
    assert s(ana.simplify((ii < 32) & (i < j))) == "(i < j)"
    assert s(ana.simplify((ii > 40) | (i < j))) == "(i < j)"
    assert s(ana.simplify(~(ii < 32))) == "False"
    assert s(ana.simplify(~(i < j))) == "(i >= j)"
    assert ana.simplify(tdsl.if_then_else(ii < 32, i, j)) is i
    assert ana.simplify(tdsl.if_then_else(i < j, i + 0, i)) is i
    f = Var("f", "float32")
    assert s(ana.simplify(tdsl.if_then_else(ii >= 32, f, f * 2.0))) == "(f * 2.0)"


def test_floats_only_const_fold():
    f, g = Var("f", "float32"), Var("g", "float32")
    e = (f + g) - g
    assert s(simplify(e)) == "((f + g) - g)"       # never reassociated
    assert s(simplify(f * 1.0)) == "(f * 1.0)"
    assert s(simplify(const(1.5, "float32") * 2.0 + f)) == "(3.0 + f)"
    assert simplify(const(0.1, "float32") + const(0.2, "float32")).value == pytest.approx(0.3)


def test_casts_fold():
    assert s(simplify(const(3.7, "float32").astype("int32"))) == "3"
    assert s(simplify(const(-3.7, "float32").astype("int64"))) == "-3"
    assert s(simplify(const(300, "int32").astype("uint8"))) == "44"
    assert s(simplify(const(2, "int64").astype("bool"))) == "True"
    x = Var("x", "int32")
    assert simplify((x + 0).astype("int64")).value is x


def test_uint8_arithmetic_is_not_rewritten_by_bounds():
    a = Var("a", "uint8")
    e = (a * 2) // 2                                   # wraps: not equal to a
    assert s(simplify(e)) == "((a * 2) // 2)"
    assert s(simplify(a + const(0, "uint8"))) == "a"


def test_const_fold():
    e = const_fold((const(3) + 4) * i + (const(2) * 5))
    assert s(e) == "((7 * i) + 10)"
    assert s(const_fold(tdsl.if_then_else(const(1) < 2, i, j))) == "i"
    assert s(const_fold(const(-7) // 2)) == "-4"
    assert s(const_fold(const(-7) % 2)) == "1"
    assert s(const_fold(const(2**31 - 1, "int32") + const(1, "int32"))) == str(-2**31)


# ---- knowledge: bind, constraint ------------------------------------------------------------
def test_bind_symbolic_range_and_constraint():
    ana = Analyzer()
    ana.bind(i, Range(0, n))
    assert ana.can_prove(i < n)
    assert ana.can_prove(n - i >= 1)
    assert not ana.can_prove(i < n - 1)
    assert ana.const_int_bound(n - i) == (1, None)
    with ana.constraint(io * 32 + ii < n):
        assert ana.can_prove(io * 32 + ii < n)
        assert ana.can_prove(io * 32 + ii <= n - 1)
        assert s(ana.simplify(tdsl.if_then_else(io * 32 + ii < n, i, j))) == "i"
    assert not ana.can_prove(io * 32 + ii < n)
    with ana.constraint(j < 8):
        with ana.constraint(j >= 0):
            assert s(ana.simplify(j // 8)) == "0"
        assert s(ana.simplify(j // 8)) != "0"
    assert ana.const_int_bound(j) == (None, None)


def test_bind_expression_substitutes():
    ana = Analyzer()
    ana.bind(ii, Range(0, 32))
    ana.bind(i, io * 32 + ii)
    assert ana.simplify(i // 32) is io
    assert ana.simplify(i % 32) is ii


def test_bind_interval():
    ana = Analyzer()
    ana.bind(i, Interval(-4, 3))
    assert ana.const_int_bound(i * 2 + 1) == (-7, 7)
    assert ana.const_int_bound(i % 4) == (0, 3)
    assert ana.const_int_bound(i // 4) == (-1, 0)


def test_const_int_bound():
    ana = ana32()
    assert ana.const_int_bound(ii * 4 + ji) == (0, 31 * 4 + 31)
    assert ana.const_int_bound(ii - ji) == (-31, 31)
    assert ana.const_int_bound(tdsl.min(ii, 10)) == (0, 10)
    assert ana.const_int_bound(i) == (None, None)
    assert ana.const_int_bound(n) == (1, None)
    assert ana.const_int_bound((io * 32 + ii) % 64) == (0, 63)
    assert ana.const_int_bound(ii * ji) == (0, 961)


# ---- int_set -------------------------------------------------------------------------------
def test_int_set_examples():
    ana = Analyzer()
    r = ana.int_set(io * 32 + ii, {ii: Interval(0, 31)})
    assert s(r.min) == "(io * 32)" and s(r.max) == "((io * 32) + 31)"
    assert s(r.extent()) == "32"
    r = ana.int_set(tdsl.min(io * 32 + ii, n - 1), {ii: Interval(0, 31)})
    assert ana.can_prove_equal(r.min, tdsl.min(io * 32, n - 1))
    assert ana.can_prove_equal(r.max, tdsl.min(io * 32 + 31, n - 1))
    r = ana.int_set(io * 32 + ii, {ii: Range(0, 32), io: Range(0, 4)})
    assert (s(r.min), s(r.max)) == ("0", "127")
    r = ana.int_set((io * 32 + ii) // 8, {ii: Interval(0, 31)})
    assert (s(r.min), s(r.max)) == ("(io * 4)", "((io * 4) + 3)")
    r = ana.int_set(ii * n, {ii: Interval(0, 31)})
    assert (s(r.min), s(r.max)) == ("0", "(n * 31)")
    r = ana.int_set(io - ii, {ii: Interval(0, 31)})
    assert (s(r.min), s(r.max)) == ("(io - 31)", "io")


def test_int_set_unbounded_and_points():
    ana = Analyzer()
    assert ana.int_set(io * 2).is_point
    assert ana.int_set(io + ii, {ii: Interval.everything()}).min is None
    r = ana.int_set(ii % 8, {ii: Interval(0, 100)})
    assert (s(r.min), s(r.max)) == ("0", "7")
    r = ana.int_set(ii % 8, {ii: Interval(io * 8, io * 8 + 3)})
    assert (s(r.min), s(r.max)) == ("0", "3")


def test_interval_api():
    iv = Interval.point(i)
    assert iv.is_point and s(iv.extent()) == "1"
    assert Interval.everything().is_everything
    assert Interval.everything().extent() is None
    assert s(Interval(3, 10).extent()) == "8"
    assert s(Interval.from_range(Range(io, 4)).max) == "(io + 3)"


# ---- the tiled-loop index expressions (their speed: benchmarks/bench_simplify.py) -----------
def test_tiled_index_expressions_simplify():
    ana = ana32()
    ana.bind(io, Range(0, (n + 31) // 32))
    ana.bind(jo, Range(0, 32))
    cases = [((io * 32 + ii) * 1024 + (jo * 32 + ji),
              "((((io * 32768) + (ii * 1024)) + (jo * 32)) + ji)"),
             (((io * 32 + ii) // 32) * 32 + (io * 32 + ii) % 32, "((io * 32) + ii)"),
             (tdsl.min(32, n - io * 32), "min(32, (n - (io * 32)))"),
             (io * 32 + ii < n, "(((io * 32) + ii) < n)")]
    for e, want in cases:
        got = ana.simplify(e)
        assert s(got) == want, s(e)
        assert s(ana.simplify(got)) == want          # a fixed point


# ---- sympy bridge -----------------------------------------------------------------------------
def test_sympy_round_trip():
    exprs = [(i * 32 + j) // 32, (i + 1) % n, tdsl.min(i, n - 1), tdsl.max(i * 2, j), n - i,
             (i * 4 - 3) // 8, tdsl.if_then_else(i < n, i, j * 3)]
    rnd = random.Random(0)
    for e in exprs:
        back = from_sympy(to_sympy(e))
        for _ in range(20):
            env = {i: rnd.randint(-50, 50), j: rnd.randint(-50, 50), n: rnd.randint(1, 40)}
            assert ev(back, env) == ev(e, env), s(e)
    assert from_sympy(to_sympy(i)) is i
    assert to_sympy(i) == to_sympy(i)
    assert to_sympy(i) != to_sympy(Var("i"))
    assert to_sympy(n).is_positive
    assert to_sympy(i // 4) == sympy.floor(to_sympy(i) / 4)


def test_sympy_symbolic_shapes():
    a = to_sympy((n + 31) // 32 * 32)
    assert sympy.simplify(a.subs(to_sympy(n), 64)) == 64
    e = from_sympy(sympy.ceiling(to_sympy(n) / 4))
    for v in (1, 4, 5, 9):
        assert ev(e, {n: v}) == -(-v // 4)


# ---- property tests ---------------------------------------------------------------------------
A, B, C, N = Var("a"), Var("b"), Var("c"), SizeVar("n")
BOUNDS = {A: (0, 7), B: (0, 31), C: (-9, 9), N: (1, 50)}
leaf = st.sampled_from([A, B, C, N]) | st.integers(-40, 40).map(lambda v: const(v, "int64"))


def _combine(children):
    small = st.integers(-9, 9).map(lambda v: const(v, "int64"))
    div = st.sampled_from([1, 2, 3, 4, 8, 32, -4]).map(lambda v: const(v, "int64")) | st.just(N)
    cmp = st.sampled_from([LT, LE, GT, GE, EQ, NE])
    return st.one_of(
        st.tuples(children, children).map(lambda t: t[0] + t[1]),
        st.tuples(children, children).map(lambda t: t[0] - t[1]),
        st.tuples(children, small).map(lambda t: t[0] * t[1]),
        st.tuples(children, children).map(lambda t: t[0] * t[1]),
        st.tuples(children, div).map(lambda t: FloorDiv(t[0], t[1])),
        st.tuples(children, div).map(lambda t: FloorMod(t[0], t[1])),
        st.tuples(children, children).map(lambda t: Min(t[0], t[1])),
        st.tuples(children, children).map(lambda t: Max(t[0], t[1])),
        st.tuples(cmp, children, children, children, children).map(
            lambda t: Select(t[0](t[1], t[2]), t[3], t[4])),
    )


int_exprs = st.recursive(leaf, _combine, max_leaves=10)


def _bounded_analyzer() -> Analyzer:
    ana = Analyzer()
    for v, (lo, hi) in BOUNDS.items():
        ana.bind(v, Range(lo, hi - lo + 1))
    return ana


def _envs(seed: int, k: int = 12):
    rnd = random.Random(seed)
    corners = [{v: (lo if bit else hi) for (v, (lo, hi)), bit in zip(BOUNDS.items(), bits)}
               for bits in ((0, 0, 0, 0), (1, 1, 1, 1), (0, 1, 0, 1), (1, 0, 1, 0))]
    return corners + [{v: rnd.randint(lo, hi) for v, (lo, hi) in BOUNDS.items()} for _ in range(k)]


def _ev_or_none(e, env):
    try:
        return ev(e, env)
    except ZeroDivisionError:
        return None


PROPS = settings(max_examples=250, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@PROPS
@given(int_exprs, st.integers(0, 10**6))
def test_simplify_preserves_value(e, seed):
    ana = _bounded_analyzer()
    simp = ana.simplify(e)
    assert simp.dtype == e.dtype
    for env in _envs(seed):
        want = _ev_or_none(e, env)
        if want is None:
            continue
        assert ev(simp, env) == want, f"{s(e)} -> {s(simp)} at {env}"


@PROPS
@given(int_exprs, st.integers(0, 10**6))
def test_simplify_unbounded_preserves_value(e, seed):
    simp = simplify(e)                     # no bounds: vars may be negative (n stays >= 1)
    rnd = random.Random(seed)
    for _ in range(12):
        env = {A: rnd.randint(-60, 60), B: rnd.randint(-60, 60), C: rnd.randint(-60, 60),
               N: rnd.randint(1, 60)}
        want = _ev_or_none(e, env)
        if want is not None:
            assert ev(simp, env) == want, f"{s(e)} -> {s(simp)} at {env}"


@PROPS
@given(int_exprs, st.integers(0, 10**6))
def test_simplify_is_idempotent(e, seed):
    ana = _bounded_analyzer()
    once = ana.simplify(e)
    assert s(ana.simplify(once)) == s(once)


@PROPS
@given(int_exprs, st.integers(0, 10**6))
def test_const_int_bound_is_sound(e, seed):
    lo, hi = _bounded_analyzer().const_int_bound(e)
    for env in _envs(seed):
        v = _ev_or_none(e, env)
        if v is None:
            continue
        assert lo is None or v >= lo, f"{s(e)} = {v} < {lo}"
        assert hi is None or v <= hi, f"{s(e)} = {v} > {hi}"


@PROPS
@given(int_exprs, st.sampled_from([LT, LE, GT, GE, EQ, NE]), int_exprs, st.integers(0, 10**6))
def test_comparison_folding_is_sound(x, cmp, y, seed):
    ana = _bounded_analyzer()
    c = cmp(x, y)
    simp = ana.simplify(c)
    proved = ana.can_prove(c)
    for env in _envs(seed):
        want = _ev_or_none(c, env)
        if want is None:
            continue
        assert bool(ev(simp, env)) == want, f"{s(c)} -> {s(simp)} at {env}"
        if proved:
            assert want


@PROPS
@given(int_exprs, st.integers(0, 10**6))
def test_int_set_is_sound(e, seed):
    ana = Analyzer()
    ana.bind(N, Range(1, 50))
    dom = {A: Interval(0, 7), B: Interval(C, C + 5)}
    r = ana.int_set(e, dom)
    for side in (r.min, r.max):
        assume(side is None or not ({A, B} & tdsl.visitor.free_vars(side)))
    rnd = random.Random(seed)
    for _ in range(4):
        fixed = {C: rnd.randint(-9, 9), N: rnd.randint(1, 50)}
        lo = None if r.min is None else _ev_or_none(r.min, fixed)
        hi = None if r.max is None else _ev_or_none(r.max, fixed)
        for _ in range(8):
            env = dict(fixed)
            env[A] = rnd.randint(0, 7)
            env[B] = rnd.randint(env[C], env[C] + 5)
            v = _ev_or_none(e, env)
            if v is None:
                continue
            assert lo is None or v >= lo, f"{s(e)} = {v} < {s(r.min)} = {lo} at {env}"
            assert hi is None or v <= hi, f"{s(e)} = {v} > {s(r.max)} = {hi} at {env}"


@settings(max_examples=150, deadline=None)
@given(int_exprs, st.integers(0, 10**6))
def test_sympy_round_trip_property(e, seed):
    try:
        back = from_sympy(to_sympy(e))
    except (ValueError, TypeError):
        return
    rnd = random.Random(seed)
    for _ in range(8):
        env = {A: rnd.randint(-30, 30), B: rnd.randint(-30, 30), C: rnd.randint(-30, 30),
               N: rnd.randint(1, 30)}
        want = _ev_or_none(e, env)
        if want is not None:
            assert ev(back, env) == want, f"{s(e)} -> {sympy.sstr(to_sympy(e))} -> {s(back)}"


def _tiled_analyzer() -> Analyzer:
    """a = tile index over ceil(n/8) tiles, b = offset in a tail-clamped tile."""
    ana = Analyzer()
    ana.bind(N, Range(1, 50))
    ana.bind(A, Range(0, (N + 7) // 8))
    ana.bind(B, Range(0, Min(const(8, "int64"), N - A * 8)))
    return ana


def _tiled_envs(seed: int, k: int = 16):
    rnd = random.Random(seed)
    for _ in range(k):
        nv = rnd.randint(1, 50)
        av = rnd.randint(0, (nv + 7) // 8 - 1)
        yield {N: nv, A: av, B: rnd.randint(0, min(8, nv - 8 * av) - 1), C: rnd.randint(-9, 9)}


@PROPS
@given(int_exprs, st.sampled_from([LT, LE, GT, GE, EQ, NE]), int_exprs, st.integers(0, 10**6))
def test_tiled_symbolic_bounds_are_sound(e, cmp, y, seed):
    ana = _tiled_analyzer()
    simp = ana.simplify(e)
    c = cmp(e, y)
    csimp = ana.simplify(c)
    proved = ana.can_prove(c)
    lo, hi = ana.const_int_bound(e)
    for env in _tiled_envs(seed):
        v = _ev_or_none(e, env)
        if v is None:
            continue
        assert ev(simp, env) == v, f"{s(e)} -> {s(simp)} at {env}"
        assert (lo is None or v >= lo) and (hi is None or v <= hi), (s(e), lo, hi, v)
        cv = _ev_or_none(c, env)
        if cv is not None:
            assert bool(ev(csimp, env)) == cv, f"{s(c)} -> {s(csimp)} at {env}"
            assert cv or not proved, f"proved false {s(c)} at {env}"


def test_tiled_guards():
    ana = _tiled_analyzer()
    assert ana.can_prove(A * 8 + B < N)
    assert ana.can_prove(A * 8 < N)
    assert ana.const_int_bound(B) == (0, 7)
    assert ana.simplify((A * 8 + B) // 8) is A
    ana2 = Analyzer()
    ana2.bind(A, Range(0, (N + 7) // 8))
    ana2.bind(B, Range(0, 8))
    assert not ana2.can_prove(A * 8 + B < N)       # the tail: needs a guard
    assert ana2.can_prove(A * 8 < N)


def test_sympy_round_trip_keeps_a_mod_of_a_scaled_mod():
    """SymPy 1.14 evaluates Mod(2*Mod(a, 3), 3) to 2*Mod(a, 3); the bridge must not let it."""
    e = (A % 3 * 2) % 3
    back = from_sympy(to_sympy(e))
    for av in range(-7, 8):
        assert ev(back, {A: av}) == ev(e, {A: av}), av


def test_bound_of_a_clamped_tile_extent():
    """``min(x + 63, L) - min(x, L) + 1`` (the rows of a 64-row tile of a clamped index, as
    attention's K / V tiles) lies in [1, 64], also under ``max(0, .)``: min is monotone
    and 1-Lipschitz, a correlation that bounding one term at a time loses."""
    import tdsl.intrin as I
    from tdsl.arith import Analyzer
    from tdsl.expr import Const
    a = tdsl.var("a")
    L = Const(129, a.dtype)
    e = I.minimum(a * 64 + 63, L) - I.minimum(a * 64, L) + 1
    ana = Analyzer()
    assert ana.const_int_bound(e) == (1, 64)
    assert ana.const_int_bound(I.maximum(Const(0, a.dtype), e))[1] == 64
    assert ana.const_int_bound(I.maximum(a * 64 + 63, L) - I.maximum(a * 64, L))[1] == 63
