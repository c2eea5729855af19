"""ops.schedule on mixes of operators and user computes; the kind tags it dispatches on."""
from __future__ import annotations

import numpy as np
import pytest

import tdsl as td
from tdsl import ops
from tdsl.errors import BuildError, ScheduleError
from tdsl.ops import OpKind, Pattern

from .helpers import build, check, randn


def test_every_stage_is_tagged_with_its_kind():
    X = td.placeholder((8, 16), name="X")
    W = td.placeholder((4, 16), name="W")
    y = ops.dense(X, W)
    assert ops.kind_of(y) is OpKind.MATMUL and ops.pattern_of(y) is Pattern.ANCHOR
    assert isinstance(y.op.tag, str) and y.op.tag == "ops.matmul"   # still a plain string tag
    assert ops.kind_of(ops.softmax(X)) is OpKind.ELEMWISE
    assert ops.kind_of(ops.sum(X, axis=0)) is OpKind.REDUCE
    assert ops.kind_of(ops.add(X, X)) is OpKind.ELEMWISE
    assert ops.kind_of(ops.add(X, td.placeholder((16,), name="v"))) is OpKind.BROADCAST
    assert ops.kind_of(ops.max_pool2d(td.placeholder((1, 1, 4, 4), name="D"), 2)) is OpKind.POOL2D
    user = td.compute((8,), lambda i: X[i, 0] * 2, name="user")
    assert ops.kind_of(user) is None and ops.pattern_of(user) is Pattern.INJECTIVE
    k = td.reduce_axis((0, 16), name="k")
    user_red = td.compute((8,), lambda i: td.sum(X[i, k], axis=k), name="user_red")
    assert ops.pattern_of(user_red) is Pattern.REDUCTION
    assert ops.pattern_of(X) is Pattern.OPAQUE


def test_mixed_graph_with_user_computes_and_several_outputs():
    n = td.var("n")
    X = td.placeholder((n, 32), name="X")
    W = td.placeholder((32, 32), name="W")
    h = ops.relu(ops.matmul(X, W))
    k = td.reduce_axis((0, 32), name="k")
    user = td.compute((n,), lambda i: td.sum(h[i, k] * h[i, k], axis=k), name="sumsq")
    z = ops.layernorm(h)
    q = ops.softmax(ops.multiply(z, 2.0))
    f = build([user, q], [X, W])
    for rows in (1, 9):
        x, w = randn(rows, 32), randn(32, 32)
        hh = np.maximum(x @ w, 0)
        mu = hh.mean(1, keepdims=True)
        zz = (hh - mu) / np.sqrt(((hh - mu) ** 2).mean(1, keepdims=True) + 1e-5)
        e = np.exp(2 * zz - (2 * zz).max(1, keepdims=True))
        check(f, [x, w], [(hh * hh).sum(1), e / e.sum(1, keepdims=True)], rtol=1e-4, atol=1e-4)


def test_schedule_accepts_targets_and_tensors_only():
    X = td.placeholder((4, 4), name="X")
    y = ops.exp(X)
    s = ops.schedule(y, "llvm -num-threads=1")
    assert "exp" in str(s)
    with pytest.raises(ScheduleError):
        ops.schedule([], "llvm")
    with pytest.raises(ScheduleError):
        ops.schedule([y.op], "llvm")
    with pytest.raises(BuildError):
        ops.schedule(y, "metal")


def test_default_schedule_can_be_refined_by_hand():
    """The returned schedule is an ordinary Schedule: more primitives may follow."""
    X = td.placeholder((64, 64), name="X")
    y = ops.sigmoid(X)
    s = ops.schedule(y)
    s[y].pragma(s[y].leaf_iter_vars[0], "unroll_explicit", 0)
    f = td.build(s, [X, y])
    x = randn(64, 64)
    check(f, [x], 1 / (1 + np.exp(-x)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("which", ["dense", "softmax", "conv2d"])
def test_default_schedule_is_a_replayable_trace(which):
    """The default schedule is recorded like a hand-written one: its trace (what the
    autotuner mutates) replays on a fresh schedule to the same program."""
    X = td.placeholder((64, 48), name="X")
    if which == "dense":
        W, b = td.placeholder((40, 48), name="W"), td.placeholder((40,), name="b")
        y = ops.dense(X, W, b, activation="relu")
        args = [X, W, b, y]
    elif which == "softmax":
        y = ops.softmax(X)
        args = [X, y]
    else:
        D, K = td.placeholder((1, 8, 12, 12), name="D"), td.placeholder((16, 8, 3, 3), name="K")
        y = ops.conv2d(D, K, padding=1, activation="relu")
        args = [D, K, y]
    s = ops.schedule(y)
    text = s.trace.to_json()
    assert "vectorize" in text and "parallel" in text
    from tdsl.schedule.trace import Trace
    s2 = Trace.from_json(text).apply(td.create_schedule(y.op))
    assert td.lower(s2, args).script() == td.lower(s, args).script()
