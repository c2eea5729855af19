"""A row group's shared costly temporary (``graph._shared_costly_temp``): a hand-written
softmax's ``exp(x - max)``, read by the sum and by the normalization, is computed once per
row and kept, not inlined into both readers (which computed every exponential twice);
cheap or single-reader stages stay inlined.  Results against NumPy."""
from __future__ import annotations

import numpy as np
import pytest

import tdsl as td
from tdsl import ops
from tdsl.schedule.stage import AttachType

from .helpers import check, randn


def _softmax(n, m, body=lambda x, mx: td.exp(x - mx)):
    X = td.placeholder((n, m), name="X")
    k1 = td.reduce_axis((0, m), name="k1")
    k2 = td.reduce_axis((0, m), name="k2")
    mx = td.compute((n,), lambda i: td.max(X[i, k1], axis=k1), name="mx")
    e = td.compute((n, m), lambda i, j: body(X[i, j], mx[i]), name="e")
    s = td.compute((n,), lambda i: td.sum(e[i, k2], axis=k2), name="s")
    out = td.compute((n, m), lambda i, j: e[i, j] / s[i], name="sm")
    return X, e, out


def _ref(x, body=np.exp):
    e = body(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def _kept(sch, stage_name):
    return sch.stage_by_name(stage_name).attach_type is not AttachType.INLINE


def test_the_exponential_is_kept_per_row():
    X, e, out = _softmax(1536, 128)
    sch = ops.schedule(out, "llvm")
    assert _kept(sch, "e")
    text = str(td.lower(sch, [X, out]))
    assert text.count("exp(") == 1, text


@pytest.mark.parametrize("n,m", [(1536, 128), (7, 37), (3, 1000), (1, 1)])
def test_hand_written_softmax_matches_numpy(n, m):
    X, _, out = _softmax(n, m)
    f = td.build(ops.schedule(out, "llvm"), [X, out])
    x = randn(n, m) * 3
    check(f, [x], _ref(x), rtol=1e-5, atol=1e-6)


def test_symbolic_rows_and_columns():
    n, m = td.var("n"), td.var("m")
    X, _, out = _softmax(n, m)
    sch = ops.schedule(out, "llvm")
    assert _kept(sch, "e")
    f = td.build(sch, [X, out])
    for shape in [(1, 1), (5, 16), (33, 129), (200, 7)]:
        x = randn(*shape) * 3
        check(f, [x], _ref(x), rtol=1e-5, atol=1e-6)


def test_a_cheap_shared_stage_stays_inlined():
    X, _, out = _softmax(64, 128, body=lambda x, mx: x - mx)
    sch = ops.schedule(out, "llvm")
    assert not _kept(sch, "e")
    f = td.build(sch, [X, out])
    x = randn(64, 128) + 5.0
    check(f, [x], _ref(x, body=lambda v: v), rtol=1e-4, atol=1e-5)


def test_a_costly_stage_with_one_reader_stays_inlined():
    X = td.placeholder((64, 128), name="X")
    k = td.reduce_axis((0, 128), name="k")
    e = td.compute((64, 128), lambda i, j: td.exp(X[i, j]), name="e")
    s = td.compute((64,), lambda i: td.sum(e[i, k], axis=k), name="s")
    out = td.compute((64, 128), lambda i, j: X[i, j] / s[i], name="y")
    sch = ops.schedule(out, "llvm")
    assert not _kept(sch, "e")
    x = randn(64, 128)
    check(td.build(sch, [X, out]), [x], x / np.exp(x).sum(1, keepdims=True),
          rtol=1e-5, atol=1e-6)
