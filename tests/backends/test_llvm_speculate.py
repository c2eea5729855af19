"""Lazy operands (``and``/``or``/``if_then_else``) whose loads are proven in bounds run
eagerly (no branch, no masked load); loads that may be out of bounds stay guarded."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tdsl as td
from tdsl import ops
from tdsl.backends.llvm.speculate import speculatable_loads
from tdsl.expr import BufferLoad
from tdsl.visitor import post_order_visit

RNG = np.random.default_rng(5)


def _loads(func) -> list:
    out = []
    post_order_visit(func.body, lambda n: out.append(n) if isinstance(n, BufferLoad) else None)
    return out


def _argmax_schedule(rows: int, cols: int):
    X = td.placeholder((rows, cols), name="X")
    T = ops.argmax(X, axis=1)
    return ops.schedule([T], "llvm"), [X, T]


def test_argmax_combiner_loads_are_speculatable_and_compile_without_guards():
    s, args = _argmax_schedule(64, 96)
    func = td.lower(s, args)
    safe = speculatable_loads(func)
    lazy_accumulator_loads = [ld for ld in _loads(func) if id(ld) in safe]
    assert lazy_accumulator_loads, "the arg-max combiner's lazy loads should be proven in bounds"
    f = td.build(s, args, target="llvm")
    ll = f.get_source("ll")
    assert "llvm.masked.load" not in ll and "sel.then" not in ll, \
        "an in-bounds lazy load was still guarded"


@settings(max_examples=8, deadline=None)
@given(rows=st.integers(1, 37), cols=st.integers(1, 70), ties=st.booleans())
def test_argmax_matches_numpy_including_ties(rows, cols, ties):
    s, args = _argmax_schedule(rows, cols)
    f = td.build(s, args, target="llvm")
    x = RNG.integers(0, 3, (rows, cols)).astype("float32") if ties else \
        RNG.standard_normal((rows, cols)).astype("float32")
    out = np.empty(rows, "int64")
    f(x, out)
    np.testing.assert_array_equal(out, x.argmax(axis=1))


def test_padding_guard_stays_lazy():
    """``if_then_else(i >= 1, A[i - 1], 0)``: A[-1] is out of bounds at i = 0, so the load
    is not speculatable (and the kernel is right at the edge)."""
    n = 37
    A = td.placeholder((n,), name="A")
    B = td.compute((n,), lambda i: td.if_then_else(i >= 1, A[i - 1], td.const(0.0)), name="B")
    s = td.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=8)
    s[B].vectorize(xi)
    func = td.lower(s, [A, B])
    assert not speculatable_loads(func)
    f = td.build(s, [A, B], target="llvm")
    a = RNG.standard_normal(n).astype("float32")
    b = np.empty(n, "float32")
    f(a, b)
    np.testing.assert_array_equal(b, np.concatenate([[0.0], a[:-1]]).astype("float32"))


def test_guarded_load_inside_an_if_is_proven_by_the_condition():
    """A loop over a split tail: ``if i < n`` around the store makes ``A[i]`` in bounds,
    and a lazy read of it under that ``if`` needs no guard."""
    n = 30
    A = td.placeholder((n,), name="A")
    B = td.compute((n,), lambda i: td.if_then_else(A[i] > 0, A[i], -A[i]), name="B")
    s = td.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=8)          # 30 = 3*8 + 6: a guarded tail
    func = td.lower(s, [A, B])
    assert speculatable_loads(func)
    f = td.build(s, [A, B], target="llvm")
    a = RNG.standard_normal(n).astype("float32")
    b = np.empty(n, "float32")
    f(a, b)
    np.testing.assert_array_equal(b, np.abs(a))


@pytest.mark.parametrize("n", [16, 19])
def test_symbolic_size_load_is_proven_by_loop_range(n):
    m = td.var("m")
    A = td.placeholder((m,), name="A")
    B = td.compute((m,), lambda i: td.if_then_else(A[i] > 0.5, A[i] * 2, A[i]), name="B")
    s = td.create_schedule(B.op)
    func = td.lower(s, [A, B])
    assert speculatable_loads(func)
    f = td.build(s, [A, B], target="llvm")
    a = RNG.standard_normal(n).astype("float32")
    b = np.empty(n, "float32")
    f(a, b)
    np.testing.assert_allclose(b, np.where(a > 0.5, a * 2, a), rtol=1e-6)
