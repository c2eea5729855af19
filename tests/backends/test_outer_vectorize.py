"""Outer-loop vectorization: ``vectorize`` of a loop that encloses serial or reduction
loops (each lane runs the inner loops for its own element), vectorized loops whose
extent varies but has a constant bound (an attached producer read shifted left), and
``double_buffer`` on a CPU schedule.  Every kernel is checked against NumPy through the
interpreter and the LLVM backend."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tdsl as td
from tdsl import interpreter
from tdsl.errors import LoweringError, ScheduleError
from tdsl.expr import Const, Var
from tdsl.stmt import Barrier, Buffer, For, ForKind
from tdsl.visitor import post_order_visit

from tdsl.backends.llvm import build as build_func

try:
    from .llvm_irbuild import V, load, loop, prim, store
except ImportError:
    from llvm_irbuild import V, load, loop, prim, store


pytestmark = pytest.mark.usefixtures("no_disk_cache")


def rand(shape, seed=0):
    return np.random.default_rng(seed).uniform(-3, 3, size=shape).astype("float32")


def run_both(s, args, arrays, expected, widened=True):
    """Run through the interpreter and LLVM; compare output ``-1`` with ``expected``."""
    f = td.lower(s, args)
    out = [a.copy() for a in arrays]
    interpreter.run(f, *out)
    np.testing.assert_allclose(out[-1], expected, rtol=1e-5, atol=1e-5)
    mod = td.build(s, args, target="llvm")
    out = [a.copy() for a in arrays]
    mod(*out)
    np.testing.assert_allclose(out[-1], expected, rtol=1e-5, atol=1e-5)
    if widened:
        assert not mod.notes, mod.notes
    return f, mod


def loops_of(f, kind):
    found = []
    post_order_visit(f.body, lambda n: found.append(n) if isinstance(n, For) and n.kind is kind else None)
    return found


# ---- outer-loop vectorization ------------------------------------------------------------------
def test_vectorize_loop_around_a_reduction():
    """The repro: C[i] = sum_k A[k, i] with i vectorized around k (was refused)."""
    M, K = 8, 9
    A = td.placeholder((K, M), name="A")
    k = td.reduce_axis((0, K), name="k")
    C = td.compute((M,), lambda i: td.sum(A[k, i], axis=k), name="C")
    s = td.create_schedule(C.op)
    s[C].vectorize(C.op.axis[0])
    a = rand((K, M))
    f, mod = run_both(s, [A, C], [a, np.zeros(M, "float32")], a.sum(0))
    (v,) = loops_of(f, ForKind.VECTORIZED)
    assert loops_of(v, ForKind.SERIAL), "the reduction loop runs inside the vectorized one"
    assert "<8 x float>" in mod.get_source("ll")


@pytest.mark.parametrize("m", [16, 13])
def test_vectorize_tile_around_spatial_and_reduction_loops(m):
    """C[i, j] = sum_k A[i, k] * B[k, j]; lanes over i, serial j and k inside (tail masked)."""
    N, K = 5, 7
    A = td.placeholder((m, K), name="A")
    B = td.placeholder((K, N), name="B")
    k = td.reduce_axis((0, K), name="k")
    C = td.compute((m, N), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = td.create_schedule(C.op)
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=4)
    s[C].reorder(io, ii, j, k)
    s[C].vectorize(ii)
    a, b = rand((m, K), 1), rand((K, N), 2)
    run_both(s, [A, B, C], [a, b, np.zeros((m, N), "float32")], a @ b)


def test_vectorized_loop_with_an_attached_stage_falls_back_to_a_scalar_loop():
    """A producer attached inside the vectorized loop allocates per iteration: LLVM keeps a
    (correct) scalar loop and says why; the interpreter runs it too."""
    A = td.placeholder((12, 6), name="A")
    B = td.compute((12, 6), lambda i, j: A[i, j] * 2.0, name="B")
    C = td.compute((12, 6), lambda i, j: B[i, j] + 1.0, name="C")
    s = td.create_schedule(C.op)
    s[C].vectorize(C.op.axis[0])
    s[B].compute_at(s[C], C.op.axis[0])
    a = rand((12, 6))
    _, mod = run_both(s, [A, C], [a, np.zeros((12, 6), "float32")], a * 2 + 1, widened=False)
    assert any("not widened" in n for n in mod.notes)


def test_inner_loop_store_that_moves_across_lanes_is_not_widened():
    """X[i + k] = ... with i vectorized around k: lane 1 at k=0 and lane 0 at k=1 write one
    element, so widening would change which write lands last; LLVM must keep a scalar loop."""
    X = Buffer("X", [12], "int64")
    body = loop("i", 8, lambda i: loop("k", 4, lambda k: store(X, load(X, i + k) * 3 + i * 10 + k, i + k)), V)
    f = prim("moving", [X], body)
    x = np.arange(12, dtype="int64")
    want = x.copy()
    for i in range(8):
        for k in range(4):
            want[i + k] = want[i + k] * 3 + i * 10 + k
    got = x.copy()
    interpreter.run(f, got)
    np.testing.assert_array_equal(got, want)
    mod = build_func(f)
    got = x.copy()
    mod(got)
    np.testing.assert_array_equal(got, want)
    assert mod.notes


def test_reduction_loop_still_cannot_be_vectorized():
    A = td.placeholder((8, 8), name="A")
    k = td.reduce_axis((0, 8), name="k")
    C = td.compute((8,), lambda i: td.sum(A[i, k], axis=k), name="C")
    s = td.create_schedule(C.op)
    with pytest.raises(ScheduleError, match="cannot vectorize a reduction loop"):
        s[C].vectorize(k)


REDUCERS = {"sum": (td.sum, np.sum), "max": (td.max, np.max), "min": (td.min, np.min)}


@settings(max_examples=12, deadline=None)
@given(m=st.integers(1, 11), n=st.integers(1, 4), kk=st.integers(1, 5),
       factor=st.sampled_from([None, 2, 4, 8]), red=st.sampled_from(sorted(REDUCERS)),
       k_outside_j=st.booleans(), symbolic=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_outer_vectorize_random(m, n, kk, factor, red, k_outside_j, symbolic, seed):
    """Random outer-loop vectorized reductions (lanes over rows, serial columns and a
    reduction inside, in either order) at sizes that do and don't divide the vector width,
    constant or symbolic (one build run at several sizes), against NumPy."""
    if factor is None and symbolic:
        factor = 4     # a whole symbolic axis has no constant extent to vectorize
    rows = td.var("m") if symbolic else m
    A = td.placeholder((rows, kk), name="A")
    B = td.placeholder((kk, n), name="B")
    k = td.reduce_axis((0, kk), name="k")
    tred, nred = REDUCERS[red]
    C = td.compute((rows, n), lambda i, j: tred(A[i, k] * B[k, j] + A[i, k], axis=k), name="C")
    s = td.create_schedule(C.op)
    i, j = C.op.axis
    outer = [i] if factor is None else list(s[C].split(i, factor=factor))
    s[C].reorder(*outer, *((k, j) if k_outside_j else (j, k)))
    s[C].vectorize(outer[-1])
    f = td.lower(s, [A, B, C])
    mod = td.build(s, [A, B, C], target="llvm")
    assert not mod.notes, mod.notes
    for rows_now in ([m, m + 3, 1] if symbolic else [m]):
        a, b = rand((rows_now, kk), seed), rand((kk, n), seed + 1)
        want = nred(a[:, :, None] * b[None, :, :] + a[:, :, None], axis=1)
        for runner in (lambda *x: interpreter.run(f, *x), mod):
            c = np.full((rows_now, n), 7.0, "float32")
            runner(a, b, c)
            np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)


# ---- vectorized loops of varying extent with a constant bound ---------------------------------
N = 24


def _attached_shift(idx, pad_left):
    A = td.placeholder((N,), name="A")
    B = td.compute((N,), lambda i: A[i] * 2.0, name="B")
    C = td.compute((N,), lambda i: td.if_then_else(i >= pad_left, B[idx(i)], 0.0), name="C")
    s = td.create_schedule(C.op)
    io, _ = s[C].split(C.op.axis[0], factor=8)
    s[B].compute_at(s[C], io)
    s[B].vectorize(s[B].op.axis[0])
    a = rand((N,))
    want = np.array([a[idx(i)] * 2 if i >= pad_left else 0.0 for i in range(N)], "float32")
    return s, [A, C], [a, np.zeros(N, "float32")], want


@pytest.mark.parametrize("label,idx,pad_left", [
    ("left", lambda i: i - 1, 1), ("left3", lambda i: i - 3, 3),
    ("same", lambda i: i, 0), ("reverse", lambda i: N - 1 - i, 0)])
def test_vectorized_attached_producer_read_shifted(label, idx, pad_left):
    """B attached in C's tile and vectorized, read at B[i-1] (fused padding): its region is
    clamped at the left edge, so its extent varies (8 - max(0, 8*io - 1) + 8*io - 1) but is
    at most a constant; the loop runs over that constant with the extra lanes masked."""
    s, args, arrays, want = _attached_shift(idx, pad_left)
    f, _ = run_both(s, args, arrays, want)
    for v in loops_of(f, ForKind.VECTORIZED):
        assert isinstance(v.extent, Const) and v.extent.value <= 8 + 3


def test_unrolled_loop_of_varying_extent_is_padded_too():
    A = td.placeholder((N,), name="A")
    B = td.compute((N,), lambda i: A[i] * 2.0, name="B")
    C = td.compute((N,), lambda i: td.if_then_else(i >= 1, B[i - 1], 0.0), name="C")
    s = td.create_schedule(C.op)
    io, _ = s[C].split(C.op.axis[0], factor=8)
    s[B].compute_at(s[C], io)
    s[B].unroll(s[B].op.axis[0])
    a = rand((N,))
    want = np.concatenate([[0.0], a[:-1] * 2]).astype("float32")
    f, _ = run_both(s, [A, C], [a, np.zeros(N, "float32")], want)
    (u,) = loops_of(f, ForKind.UNROLLED)
    assert u.extent == Const(8, u.extent.dtype) or getattr(u.extent, "value", None) == 8


def test_vectorized_loop_without_constant_bound_is_still_refused():
    n = td.var("n")
    A = td.placeholder((n,), name="A")
    B = td.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = td.create_schedule(B.op)
    s[B].vectorize(B.op.axis[0])
    with pytest.raises(LoweringError, match="non-constant extent n with no constant upper bound"):
        td.lower(s, [A, B])


def test_bound_of_an_extent_clamped_at_the_left_edge():
    """The analyzer distributes ``- max(0, 8x - 1)``: ``8x + 7 - max(0, 8x - 1) <= 8``."""
    from tdsl.arith import Analyzer
    from tdsl.intrin import maximum, minimum
    from tdsl.tensor import Range
    x = Var("x", "int32")
    ana = Analyzer()
    ana.bind(x, Range(0, 3))
    assert ana.const_int_bound(x * 8 - maximum(0, x * 8 - 1) + 7) == (7, 8)
    assert ana.const_int_bound(minimum(x * 8 + 9, 20) - x * 8) == (4, 9)
    assert ana.const_int_bound(x * 2 + minimum(5, x) * -1) == (0, 2)


# ---- double_buffer on the CPU -------------------------------------------------------------------
def test_double_buffer_on_cpu_is_a_plain_buffer_without_barriers():
    M, Nn, K = 8, 8, 16
    A = td.placeholder((M, K), name="A")
    B = td.placeholder((K, Nn), name="B")
    k = td.reduce_axis((0, K), name="k")
    C = td.compute((M, Nn), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = td.create_schedule(C.op)
    AA = s.cache_read(A, "local", [C])
    i, j = C.op.axis
    ko, ki = s[C].split(k, factor=4)
    s[C].reorder(i, ko, j, ki)
    s[AA].compute_at(s[C], ko)
    s[AA].double_buffer()
    a, b = rand((M, K), 3), rand((K, Nn), 4)
    f, _ = run_both(s, [A, B, C], [a, b, np.zeros((M, Nn), "float32")], a @ b, widened=False)
    barriers = []
    post_order_visit(f.body, lambda n: barriers.append(n) if isinstance(n, Barrier) else None)
    assert not barriers
