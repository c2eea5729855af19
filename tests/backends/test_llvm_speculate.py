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


def _speculatable_and_run(s, A, B, n):
    """(whether ``s`` has a speculatable load, the LLVM kernel's output on random A)."""
    func = td.lower(s, [A, B])
    a = RNG.standard_normal(n).astype("float32")
    b = np.empty(n, "float32")
    td.build(s, [A, B], target="llvm")(a, b)
    return bool(speculatable_loads(func)), a, b


def test_argmax_combiner_loads_are_speculatable_and_compile_without_guards():
    # 128 columns: whole chains of vectors on any CPU (96 leaves a guarded tail of the row
    # with 16-lane AVX-512 vectors in 4 chains, whose masked load is not the one checked here)
    s, args = _argmax_schedule(64, 128)
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
    speculated, a, b = _speculatable_and_run(s, A, B, n)
    assert not speculated
    np.testing.assert_array_equal(b, np.concatenate([[0.0], a[:-1]]).astype("float32"))


def test_load_in_a_tail_loop_is_proven_by_its_extent():
    """A split tail lowers to an inner loop of extent ``min(8, 30 - 8 * outer)``: its range
    keeps ``A[outer * 8 + inner]`` in bounds, so the lazy reads of it need no guard."""
    n = 30
    A = td.placeholder((n,), name="A")
    B = td.compute((n,), lambda i: td.if_then_else(A[i] > 0, A[i], -A[i]), name="B")
    s = td.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=8)          # 30 = 3*8 + 6: a guarded tail
    speculated, a, b = _speculatable_and_run(s, A, B, n)
    assert speculated
    np.testing.assert_array_equal(b, np.abs(a))


@pytest.mark.parametrize("n", [16, 19])
def test_symbolic_size_load_is_proven_by_loop_range(n):
    m = td.var("m")
    A = td.placeholder((m,), name="A")
    B = td.compute((m,), lambda i: td.if_then_else(A[i] > 0.5, A[i] * 2, A[i]), name="B")
    s = td.create_schedule(B.op)
    speculated, a, b = _speculatable_and_run(s, A, B, n)
    assert speculated
    np.testing.assert_allclose(b, np.where(a > 0.5, a * 2, a), rtol=1e-6)


def test_load_under_an_if_is_proven_by_the_condition():
    """``if i < n`` around a store (a hand-built guarded vector tail, as lowering makes for
    vectorized tails): ``X0[i]`` is in bounds only because of the condition; the lazy
    reads of it under the ``if`` are speculatable, and the kernel is right at the edge."""
    try:
        from .llvm_irbuild import vector_elementwise
    except ImportError:
        from llvm_irbuild import vector_elementwise
    func = vector_elementwise("absv", "float32",
                              lambda x: td.if_then_else(x > 0, x, td.const(0.0) - x), nin=1)
    assert speculatable_loads(func)
    from tdsl.backends.llvm import build
    for n in (16, 37):
        a = RNG.standard_normal(n).astype("float32")
        b = np.empty(n, "float32")
        build(func)(a, b)
        np.testing.assert_array_equal(b, np.abs(a))
