"""The argument list auto_schedule returns: inputs in declaration order, or ``args=`` as given.

A 1x1 convolution reads its weight ``W`` before its data ``X`` (``W[co, ci] * X[ci, p]``);
the argument list once followed that first read, so code written as ``f(x, w, out)`` after
``X, W = placeholder(...), placeholder(...)`` passed the arrays swapped.
"""
import warnings

import numpy as np
import pytest

import tdsl as td
from tdsl import autotune
from tdsl.errors import TuningError


def conv1x1(p):
    """X declared before W; the body reads W first."""
    X = td.placeholder((6, p), "float32", name="X")
    W = td.placeholder((5, 6), "float32", name="W")
    ci = td.reduce_axis((0, 6), name="ci")
    out = td.compute((5, p), lambda co, q: td.sum(W[co, ci] * X[ci, q], axis=ci), name="out")
    return X, W, out


def _default(outputs, **kw):
    with warnings.catch_warnings():   # no trials: the default schedule, with a warning
        warnings.simplefilter("ignore")
        return autotune.auto_schedule(outputs, trials=0, **kw)


@pytest.mark.parametrize("p", [7, 8])
def test_inputs_come_back_in_declaration_order(p):
    X, W, out = conv1x1(p)
    s, args = _default([out])
    assert [a.name for a in args] == ["X", "W", "out"]
    rng = np.random.default_rng(3)
    x = rng.normal(size=(6, p)).astype("float32")
    w = rng.normal(size=(5, 6)).astype("float32")
    o = np.zeros((5, p), "float32")
    td.build(s, args)(x, w, o)
    np.testing.assert_allclose(o, w @ x, rtol=1e-5, atol=1e-5)


def test_args_keyword_keeps_the_callers_order():
    X, W, out = conv1x1(7)
    s, args = _default([out], args=[W, X, out])
    assert args == [W, X, out]
    task = autotune.create_auto_task([out], args=[out, X, W])
    assert [a.name for a in task.args] == ["out", "X", "W"]


def test_args_keyword_refuses_incomplete_lists():
    X, W, out = conv1x1(7)
    with pytest.raises(TuningError, match="input 'X'"):
        autotune.create_auto_task([out], args=[W, out])
    with pytest.raises(TuningError, match="output 'out'"):
        autotune.create_auto_task([out], args=[X, W])
    with pytest.raises(TuningError, match="twice"):
        autotune.create_auto_task([out], args=[X, W, X, out])


def test_extract_tasks_lists_inputs_in_declaration_order():
    X, W, out = conv1x1(7)
    V = td.placeholder((5, 5), "float32", name="V")
    k = td.reduce_axis((0, 5), name="k")
    y = td.compute((5, 7), lambda i, j: td.sum(V[i, k] * out[k, j], axis=k), name="y")
    tasks, _ = autotune.extract_tasks([out, y])
    assert [[a.name for a in t.args] for t in tasks] == [["X", "W", "out"], ["out", "V", "y"]]
