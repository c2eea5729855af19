"""Operator schedules chosen by shape (issue 12): a dense with a small constant M is one
streaming pass over W (lanes over K, rfactor'ed; W read in place, not packed) -- checked
against NumPy through the interpreter and LLVM, at sizes that do and don't divide the tiles,
with epilogues and with symbolic sizes."""
from __future__ import annotations

import numpy as np
import pytest

import tdsl as td
import tdsl.interpreter
from tdsl import ops
from tdsl.ops.schedules.llvm import SKINNY_M, _skinny_tile
from tdsl.ops.tags import OpKind

from . import helpers as H
from .helpers import check, randn


def _schedule(out, target="llvm"):
    return ops.schedule([out], target)


def _pack_inlined(s) -> bool:
    packs = [st for st in s.stages if getattr(st.op, "tag", None) is OpKind.PACK
             or str(getattr(st.op, "tag", "")) == str(OpKind.PACK)]
    assert packs
    return all(st.attach_type.name == "INLINE" for st in packs)


def _rf_stages(s) -> list:
    return [st for st in s.stages if st.op.name.endswith(".rf")]


@pytest.mark.parametrize("m", [1, 2, 3, 8, 13, 16])
def test_small_m_dense_streams_w(m):
    X = td.placeholder((m, 64), name="X")
    W = td.placeholder((40, 64), name="W")
    s = _schedule(ops.dense(X, W))
    assert _pack_inlined(s), "W must be read in place, not packed, at small M"
    assert _rf_stages(s), "lanes over K (an rfactor stage) expected at small M"


def test_large_or_symbolic_m_keeps_the_tiled_path():
    for m in (SKINNY_M + 1, td.var("m")):
        X = td.placeholder((m, 64), name="X")
        W = td.placeholder((40, 64), name="W")
        s = _schedule(ops.dense(X, W))
        assert not _pack_inlined(s) and not _rf_stages(s)


def test_plain_matmul_keeps_the_tiled_path():
    A = td.placeholder((1, 64), name="A")
    B = td.placeholder((64, 40), name="B")
    assert not _rf_stages(_schedule(ops.matmul(A, B)))


@pytest.mark.parametrize("m,k,n", [(1, 64, 64), (1, 100, 37), (2, 48, 33), (3, 129, 100),
                                   (5, 40, 70), (8, 256, 129), (13, 70, 45), (16, 33, 19)])
def test_small_m_dense_llvm_and_interpreter(m, k, n):
    X = td.placeholder((m, k), name="X")
    W = td.placeholder((n, k), name="W")
    Y = ops.dense(X, W)
    s = _schedule(Y)
    x, w = randn(m, k), randn(n, k)
    ref = (x.astype(np.float64) @ w.T.astype(np.float64)).astype("float32")
    f = td.build(s, [X, W, Y], target="llvm")
    check(f, [x, w], ref, rtol=1e-4, atol=1e-4)
    y = np.full((m, n), 7, "float32")
    tdsl.interpreter.run(td.lower(s, [X, W, Y]), x, w, y)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
@pytest.mark.parametrize("m,n", [(1, 50), (4, 64), (7, 23)])
def test_small_m_dense_epilogue(m, n, activation):
    X = td.placeholder((m, 96), name="X")
    W = td.placeholder((n, 96), name="W")
    b = td.placeholder((n,), name="b")
    Y = ops.dense(X, W, b, activation=activation)
    s = _schedule(Y)
    assert _rf_stages(s)
    f = td.build(s, [X, W, b, Y], target="llvm")
    x, w, bb = randn(m, 96), randn(n, 96), randn(n)
    v = x.astype(np.float64) @ w.T.astype(np.float64) + bb
    ref = {None: v, "relu": np.maximum(v, 0), "gelu": v * 0.5 * (1 + H.erf(v / np.sqrt(2)))}
    check(f, [x, w, bb], ref[activation].astype("float32"), rtol=1e-4, atol=1e-4)


def test_small_m_dense_symbolic_k_and_n():
    k, n = td.var("k"), td.var("n")
    X = td.placeholder((4, k), name="X")
    W = td.placeholder((n, k), name="W")
    Y = ops.dense(X, W)
    s = _schedule(Y)
    assert _rf_stages(s)
    f = td.build(s, [X, W, Y], target="llvm")
    for kk, nn in ((64, 64), (17, 5), (100, 131), (1, 3)):
        x, w = randn(4, kk), randn(nn, kk)
        check(f, [x, w], (x.astype(np.float64) @ w.T.astype(np.float64)).astype("float32"),
              rtol=1e-4, atol=1e-4)


def test_symbolic_m_dense_runs_at_every_m():
    m = td.var("m")
    X = td.placeholder((m, 72), name="X")
    W = td.placeholder((30, 72), name="W")
    Y = ops.dense(X, W)
    f = td.build(_schedule(Y), [X, W, Y], target="llvm")
    for mm in (1, 5, 16, 40):
        x, w = randn(mm, 72), randn(30, 72)
        check(f, [x, w], (x.astype(np.float64) @ w.T.astype(np.float64)).astype("float32"),
              rtol=1e-4, atol=1e-4)


def test_small_m_dense_float64():
    X = td.placeholder((3, 50), name="X", dtype="float64")
    W = td.placeholder((21, 50), name="W", dtype="float64")
    Y = ops.dense(X, W)
    f = td.build(_schedule(Y), [X, W, Y], target="llvm")
    x, w = randn(3, 50, dtype="float64"), randn(21, 50, dtype="float64")
    check(f, [x, w], x @ w.T, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("m", range(1, SKINNY_M + 1))
@pytest.mark.parametrize("budget", [12, 24])
def test_skinny_tile_fits_the_register_budget(m, budget):
    mi, rows, vv = _skinny_tile(m, budget)
    assert 1 <= mi <= m and mi * rows * vv <= budget
