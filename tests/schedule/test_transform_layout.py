"""``Stage.transform_layout`` (permutations and blockings ``[i // f, ..., i % f]``): the
stage stores its output with the axes permuted or blocked, its readers follow, the trace
replays it, and what it cannot do is refused."""
from __future__ import annotations

import numpy as np
import pytest

import tdsl as td
from hypothesis import given, settings, strategies as st

from tdsl.autotune.replay import replay
from tdsl.errors import ScheduleError


def _chain(shape=(5, 7, 3)):
    A = td.placeholder(shape, name="A")
    T = td.compute(shape, lambda i, j, k: A[i, j, k] * 2.0 + 1.0, name="T")
    B = td.compute(shape, lambda i, j, k: T[i, j, k] + T[i, j, (k + 1) % shape[2]], name="B")
    C = td.compute(shape[:2], lambda i, j: T[i, j, 0] - 1.0, name="C")
    return A, T, B, C


def _run(s, args, shape):
    f = td.build(s, args, target="llvm")
    a = np.random.default_rng(1).standard_normal(shape).astype("float32")
    outs = [np.zeros([int(d.value) for d in t.shape], "float32") for t in args[1:]]
    f(a, *outs)
    return a, outs


@pytest.mark.parametrize("mapping, perm", [
    (lambda i, j, k: [k, i, j], [2, 0, 1]),
    (lambda i, j, k: (j, k, i), [1, 2, 0]),
    (lambda i, j, k: [i, j, k], [0, 1, 2]),
])
def test_permuted_stage_and_both_readers_match_numpy(mapping, perm):
    shape = (5, 7, 3)
    A, T, B, C = _chain(shape)
    s = td.create_schedule([B.op, C.op])
    s[T].transform_layout(mapping)
    t_now = s[T].op.outputs[0]
    assert [int(d.value) for d in t_now.shape] == [shape[d] for d in perm]
    text = str(td.lower(s, [A, B, C]))
    assert f"T = allocate(({', '.join(str(shape[d]) for d in perm)})" in text, text
    a, (b, c) = _run(s, [A, B, C], shape)
    t = a * 2.0 + 1.0
    np.testing.assert_allclose(b, t + np.roll(t, -1, axis=2), rtol=1e-6)
    np.testing.assert_allclose(c, t[:, :, 0] - 1.0, rtol=1e-6)


def test_the_trace_records_the_order_and_replays_it():
    shape = (4, 6, 5)
    A, T, B, C = _chain(shape)
    s = td.create_schedule([B.op, C.op])
    s[T].transform_layout(axes=[2, 1, 0])
    s[T].vectorize(s[T].op.axis[2])          # the new last axis: T's original first
    js = s.trace.to_json()
    assert '"transform_layout"' in js and '"axes": "2,1,0"' in js
    s2 = replay(js, [B, C])
    assert [int(d.value) for d in s2[T].op.outputs[0].shape] == [5, 6, 4]
    _, (b1, c1) = _run(s, [A, B, C], shape)
    _, (b2, c2) = _run(s2, [A, B, C], shape)
    np.testing.assert_array_equal(b1, b2)
    np.testing.assert_array_equal(c1, c2)


def test_a_cache_read_laid_out_transposed_matches_numpy():
    M, N, K = 37, 45, 29
    x = td.placeholder((M, K), name="x")
    w = td.placeholder((N, K), name="w")
    k = td.reduce_axis((0, K), name="k")
    y = td.compute((M, N), lambda i, j: td.sum(x[i, k] * w[j, k], axis=k), name="y")
    s = td.create_schedule(y.op)
    ww = s.cache_read(w, "global", [y])
    s[ww].transform_layout(lambda j, kk: [kk, j])
    assert "w.global[k, j]" in str(td.lower(s, [x, w, y]))
    f = td.build(s, [x, w, y], target="llvm")
    g = np.random.default_rng(2)
    a, b = g.standard_normal((M, K)).astype("f4"), g.standard_normal((N, K)).astype("f4")
    out = np.zeros((M, N), "f4")
    f(a, b, out)
    np.testing.assert_allclose(out, a @ b.T, rtol=1e-4, atol=1e-4)


def _check_chain(a, b, c):
    t = a * 2.0 + 1.0
    np.testing.assert_allclose(b, t + np.roll(t, -1, axis=2), rtol=1e-6)
    np.testing.assert_allclose(c, t[:, :, 0] - 1.0, rtol=1e-6)


@pytest.mark.parametrize("mapping, shape_of, guarded", [
    (lambda i, j, k: [j // 4, i, k, j % 4], lambda s: [2, s[0], s[2], 4], True),
    (lambda i, j, k: [i // 5, j, k, i % 5], lambda s: [1, s[1], s[2], 5], False),
    (lambda i, j, k: [k, i // 2, j // 3, i % 2, j % 3], lambda s: [s[2], 3, 3, 2, 3], True),
])
def test_blocked_stage_and_both_readers_match_numpy(mapping, shape_of, guarded):
    """``T[i, j, k]`` stored as ``T'[j // 4, i, k, j % 4]`` (7 columns: the second block's
    last lane past the end), as one block of 5 rows, or with two axes blocked."""
    shape = (5, 7, 3)
    A, T, B, C = _chain(shape)
    s = td.create_schedule([B.op, C.op])
    s[T].transform_layout(mapping)
    assert [int(d.value) for d in s[T].op.outputs[0].shape] == shape_of(shape)
    text = str(td.lower(s, [A, B, C]))
    assert ("if_then_else" in text) == guarded, text
    a, (b, c) = _run(s, [A, B, C], shape)
    _check_chain(a, b, c)


def test_a_blocking_is_traced_and_replayed():
    shape = (4, 10, 3)
    A, T, B, C = _chain(shape)
    s = td.create_schedule([B.op, C.op])
    s[T].transform_layout(lambda i, j, k: [j // 4, i, k, j % 4])
    s[T].vectorize(s[T].op.axis[3])
    js = s.trace.to_json()
    assert '"axes": "1/4,0,2,1%4"' in js
    s2 = replay(js, [B, C])
    assert [int(d.value) for d in s2[T].op.outputs[0].shape] == [3, 4, 3, 4]
    _, (b1, c1) = _run(s, [A, B, C], shape)
    a, (b2, c2) = _run(s2, [A, B, C], shape)
    np.testing.assert_array_equal(b1, b2)
    np.testing.assert_array_equal(c1, c2)
    _check_chain(a, b2, c2)


@settings(max_examples=20, deadline=None)
@given(rows=st.integers(1, 11), cols=st.integers(1, 13), factor=st.integers(1, 8),
       axis=st.sampled_from([0, 1]), inner_first=st.booleans(), vector=st.booleans())
def test_blockings_match_numpy(rows, cols, factor, axis, inner_first, vector):
    """Any axis blocked by any factor (dividing or not), the block position before or after
    the other axis, the block's loop vectorized or not."""
    A = td.placeholder((rows, cols), name="A")
    T = td.compute((rows, cols), lambda i, j: A[i, j] * 3.0 - 1.0, name="T")
    B = td.compute((cols, rows), lambda j, i: T[i, j] + T[rows - 1 - i, j], name="B")
    s = td.create_schedule(B.op)

    def mapping(i, j):
        v, other = (i, j) if axis == 0 else (j, i)
        return [v // factor, v % factor, other] if inner_first else \
            [v // factor, other, v % factor]
    s[T].transform_layout(mapping)
    if vector:
        s[T].vectorize(s[T].op.axis[-1])
    f = td.build(s, [A, B], target="llvm")
    a = np.random.default_rng(rows * 31 + cols).standard_normal((rows, cols)).astype("f4")
    out = np.zeros((cols, rows), "f4")
    f(a, out)
    t = a * 3.0 - 1.0
    np.testing.assert_allclose(out, (t + t[::-1]).T, rtol=1e-5, atol=1e-5)   # FMA contraction


def test_a_blocked_symbolic_axis_matches_numpy():
    """A symbolic extent: ``ceil(n / 4)`` blocks, the tail guarded; bound to 1, 4, 9, 16."""
    n = td.var("n")
    A = td.placeholder((n, 3), name="A")
    T = td.compute((n, 3), lambda i, j: A[i, j] + 2.0, name="T")
    B = td.compute((n, 3), lambda i, j: T[i, j] * T[i, 2 - j], name="B")
    s = td.create_schedule(B.op)
    s[T].transform_layout(lambda i, j: [i // 4, j, i % 4])
    f = td.build(s, [A, B], target="llvm")
    for size in (1, 4, 9, 16):
        a = np.random.default_rng(size).standard_normal((size, 3)).astype("f4")
        out = np.zeros((size, 3), "f4")
        f(a, out)
        t = a + 2.0
        np.testing.assert_allclose(out, t * t[:, ::-1], rtol=1e-6)


def _reduction():
    A = td.placeholder((6, 10), name="A")
    k = td.reduce_axis((0, 10), name="k")
    R = td.compute((6,), lambda i: td.sum(A[i, k], axis=k), name="R")
    B = td.compute((6,), lambda i: R[i] * 2.0, name="B")
    return td.create_schedule(B.op), R


def test_a_reduction_is_blocked_only_by_a_dividing_factor():
    s, R = _reduction()
    with pytest.raises(ScheduleError, match="divides it"):
        s[R].transform_layout(lambda i: [i // 4, i % 4])
    s[R].transform_layout(lambda i: [i // 3, i % 3])
    assert [int(d.value) for d in s[R].op.outputs[0].shape] == [2, 3]


@pytest.mark.parametrize("call, why", [
    (lambda s, T, B: s[T].transform_layout(axes=["1/4", 0, 2]), "once as 'a/f'"),
    (lambda s, T, B: s[T].transform_layout(axes=["1/4", 0, 2, "1%2"]), "once as 'a/f'"),
    (lambda s, T, B: s[T].transform_layout(axes=["1/4", 0, 2, "1%4", 1]), "once as 'a/f'"),
    (lambda s, T, B: s[T].transform_layout(axes=[0, 1, 5]), "do not have"),
    (lambda s, T, B: s[T].transform_layout(lambda i, j, k: [i // j, j, k]),
     "only permutations and blockings"),
    (lambda s, T, B: s[T].transform_layout(axes="1/x,0,2,1%x"), "axis numbers"),
    (lambda s, T, B: s[T].transform_layout(lambda i, j, k: [i + j, j, k]),
     "only permutations"),
    (lambda s, T, B: s[T].transform_layout(lambda i, j: [j, i]), "one argument per axis"),
    (lambda s, T, B: s[T].transform_layout(axes=[0, 0, 1]), "not a permutation"),
    (lambda s, T, B: s[T].transform_layout(axes="x,y"), "axis numbers"),
    (lambda s, T, B: s[T].transform_layout(), "one of them"),
    (lambda s, T, B: s[B].transform_layout(axes=[1, 0, 2]), "an output's layout"),
    (lambda s, T, B: (s[T].split(s[T].op.axis[0], 2), s[T].transform_layout(axes=[1, 0, 2])),
     "before the stage's loops"),
    (lambda s, T, B: (s[T].compute_at(s[B], s[B].op.axis[0]),
                      s[T].transform_layout(axes=[1, 0, 2])), "before the stage's loops"),
    (lambda s, T, B: s[s.stages[0].op.outputs[0]].transform_layout(axes=[1, 0, 2]),
     "compute stage"),
])
def test_what_it_refuses(call, why):
    A, T, B, C = _chain()
    s = td.create_schedule([B.op, C.op])
    with pytest.raises(ScheduleError, match=why) as e:
        call(s, T, B)
    assert "transform_layout" in str(e.value)


def test_inlining_or_attaching_the_permuted_stage_afterwards():
    """Its axes and its readers' loads stay consistent for the primitives that follow."""
    shape = (6, 4, 5)
    for then in ("inline", "root"):
        A, T, B, C = _chain(shape)
        s = td.create_schedule([B.op, C.op])
        s[T].transform_layout(axes=[2, 0, 1])
        if then == "inline":
            s[T].compute_inline()
        else:
            s[B].compute_root()
            s[T].compute_root()
        a, (b, c) = _run(s, [A, B, C], shape)
        t = a * 2.0 + 1.0
        np.testing.assert_allclose(b, t + np.roll(t, -1, axis=2), rtol=1e-6)
        np.testing.assert_allclose(c, t[:, :, 0] - 1.0, rtol=1e-6)
