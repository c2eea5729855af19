"""``Stage.transform_layout`` (permutations): the stage stores its output with the axes
permuted, its readers follow, the trace replays it, and what it cannot do is refused."""
from __future__ import annotations

import numpy as np
import pytest

import tdsl as td
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


@pytest.mark.parametrize("call, why", [
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
