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


def test_small_m_plain_matmul_reads_b_in_place():
    A = td.placeholder((1, 64), name="A")
    B = td.placeholder((64, 40), name="B")
    assert _pack_inlined(_schedule(ops.matmul(A, B)))
    A = td.placeholder((17, 64), name="A")
    assert not _pack_inlined(_schedule(ops.matmul(A, B)))


@pytest.mark.parametrize("m,k,n", [(1, 64, 64), (1, 9, 37), (2, 48, 33), (3, 130, 100),
                                   (8, 256, 1030), (11, 70, 45), (16, 33, 19)])
def test_small_m_matmul_llvm_and_interpreter(m, k, n):
    A = td.placeholder((m, k), name="A")
    B = td.placeholder((k, n), name="B")
    C = ops.matmul(A, B)
    s = _schedule(C)
    a, b = randn(m, k), randn(k, n)
    ref = (a.astype(np.float64) @ b.astype(np.float64)).astype("float32")
    check(td.build(s, [A, B, C], target="llvm"), [a, b], ref, rtol=1e-4, atol=1e-4)
    c = np.full((m, n), 7, "float32")
    tdsl.interpreter.run(td.lower(s, [A, B, C]), a, b, c)
    np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-4)


def test_small_m_matmul_epilogue_and_symbolic_k_n():
    k, n = td.var("k"), td.var("n")
    A = td.placeholder((5, k), name="A")
    B = td.placeholder((k, n), name="B")
    C = ops.relu(ops.matmul(A, B))
    s = _schedule(C)
    assert _pack_inlined(s)
    f = td.build(s, [A, B, C], target="llvm")
    for kk, nn in ((64, 64), (17, 5), (100, 131), (1, 3), (7, 2000)):
        a, b = randn(5, kk), randn(kk, nn)
        check(f, [a, b], np.maximum(a.astype(np.float64) @ b, 0).astype("float32"),
              rtol=1e-4, atol=1e-4)


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


# ---- register tiles by register count -------------------------------------------------------
from tdsl.ops.schedules import llvm as L  # noqa: E402


@pytest.mark.parametrize("bits,regs", [(256, 16), (512, 32)])
def test_default_tiles_fit_the_register_file(bits, regs):
    cpu = L.CPU(bits, 2)
    mt, ct = L.default_matmul_tiles(cpu), L.default_conv_tiles(cpu)
    # accumulators plus one broadcast and the panel vectors of one k step
    assert mt.rows * mt.vectors + mt.vectors + 1 <= regs
    assert ct.width * ct.vectors + ct.vectors + 1 <= regs


@pytest.mark.parametrize("bits", [256, 512])
def test_tiles_of_either_register_file_compute_right(bits, monkeypatch):
    """Both tile choices run correctly on this machine, at sizes that don't divide them."""
    monkeypatch.setattr(L, "cpu_of", lambda target: L.CPU(bits, 2))
    A = td.placeholder((3, 37, 29), name="A")
    B = td.placeholder((3, 29, 45), name="B")
    C = ops.batch_matmul(A, B)
    f = td.build(_schedule(C), [A, B, C], target="llvm")
    a, b = randn(3, 37, 29), randn(3, 29, 45)
    check(f, [a, b], np.matmul(a.astype(np.float64), b).astype("float32"), rtol=1e-4, atol=1e-4)
    D = td.placeholder((1, 5, 13, 11), name="D")
    W = td.placeholder((19, 5, 3, 3), name="W")
    O = ops.conv2d(D, W, stride=2, padding=1)
    f = td.build(_schedule(O), [D, W, O], target="llvm")
    d, w = randn(1, 5, 13, 11), randn(19, 5, 3, 3)
    check(f, [d, w], _conv_ref(d, w, 2, 1), rtol=1e-4, atol=1e-4)


def _conv_ref(d, w, stride, pad):
    n, c, h, wd = d.shape
    co, _, kh, kw = w.shape
    p = np.pad(d.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, co, oh, ow))
    for y in range(kh):
        for x in range(kw):
            win = p[:, :, y:y + stride * oh:stride, x:x + stride * ow:stride]
            out += np.einsum("nchw,oc->nohw", win, w[:, :, y, x])
    return out.astype("float32")


# ---- transpose: cache blocks of lanes x lanes tiles -------------------------------------------
@pytest.mark.parametrize("shape,axes", [((130, 77), None), ((64, 64), None), ((200, 65), None),
                                        ((5, 70, 66), (0, 2, 1)), ((66, 3, 129), (2, 1, 0))])
def test_transpose_blocks_llvm_and_interpreter(shape, axes):
    X = td.placeholder(shape, name="X")
    Y = ops.transpose(X, axes)
    s = _schedule(Y)
    x = randn(*shape)
    ref = np.ascontiguousarray(np.transpose(x, axes))
    f = td.build(s, [X, Y], target="llvm")
    check(f, [x], ref, rtol=0, atol=0)
    y = np.full(ref.shape, 7, "float32")
    tdsl.interpreter.run(td.lower(s, [X, Y]), x, y)
    np.testing.assert_array_equal(y, ref)


def test_transpose_symbolic_sizes():
    n, m = td.var("n"), td.var("m")
    X = td.placeholder((n, m), name="X")
    Y = ops.transpose(X)
    s = _schedule(Y)
    f = td.build(s, [X, Y], target="llvm")
    for nn, mm in ((200, 65), (3, 100), (64, 64), (1, 1), (129, 130)):
        x = randn(nn, mm)
        check(f, [x], np.ascontiguousarray(x.T), rtol=0, atol=0)


def test_large_transpose_is_cache_blocked():
    """Two block loops, two tile loops, two lane loops (before: tile and lane loops only)."""
    X = td.placeholder((1024, 512), name="X")
    Y = ops.transpose(X)
    s = _schedule(Y)
    assert len(s[Y].leaf_iter_vars) == 6
