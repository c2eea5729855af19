"""A dense/matmul with a symbolic M (issue 12): ``ops.schedule`` specializes it, so one
function runs the small-M streaming nest when ``M <= SKINNY_M`` at call time and the
register-tiled nest otherwise (``Schedule.specialize``, an ``if`` around two nests)."""
from __future__ import annotations

import numpy as np
import pytest

import tdsl as td
import tdsl.interpreter
from tdsl import ops
from tdsl.errors import ScheduleError, ShapeError
from tdsl.ops.schedules.llvm import SKINNY_M, SKINNY_M_SYMBOLIC
from tdsl.stmt import IfThenElse, PrimFunc, SeqStmt
from tdsl.visitor import post_order_visit

from .helpers import randn

SIZES = (1, 3, SKINNY_M, SKINNY_M + 1, 100)


def _dense(k: int = 72, n: int = 30, bias: bool = True, activation=None):
    m = td.var("m")
    X = td.placeholder((m, k), name="X")
    W = td.placeholder((n, k), name="W")
    B = td.placeholder((n,), name="B")
    Y = ops.dense(X, W, B if bias else None, activation=activation)
    return [X, W, B, Y] if bias else [X, W, Y]


def _run(f, interp: bool, arrays):
    if interp:
        td.interpreter.run(f, *arrays)
    else:
        f(*arrays)


def _allocs(stmt) -> set:
    names: set = set()
    post_order_visit(stmt, lambda n: names.add(n.buffer.name) if type(n).__name__ == "Allocate"
                     else None)
    return names


@pytest.mark.parametrize("interp", [False, True], ids=["llvm", "interpreter"])
def test_symbolic_m_dense_every_size_one_function(interp):
    args = _dense(activation="relu")
    s = ops.schedule(args[-1])
    assert len(s.variants) == len(SKINNY_M_SYMBOLIC)
    f = td.lower(s, args) if interp else td.build(s, args, target="llvm")
    w, b = randn(30, 72), randn(30)
    for m in SIZES:
        x = randn(m, 72)
        out = np.full((m, 30), np.nan, np.float32)
        _run(f, interp, [x, w, b, out])
        ref = np.maximum(x.astype(np.float64) @ w.T.astype(np.float64) + b, 0)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4, err_msg=f"m={m}")


@pytest.mark.parametrize("transpose_b", [False, True])
def test_symbolic_m_matmul_every_size(transpose_b):
    m = td.var("m")
    A = td.placeholder((m, 40), name="A")
    B = td.placeholder((33, 40) if transpose_b else (40, 33), name="B")
    C = ops.matmul(A, B, transpose_b=transpose_b)
    s = ops.schedule(C)
    assert len(s.variants) == len(SKINNY_M_SYMBOLIC)
    f = td.build(s, [A, B, C], target="llvm")
    bb = randn(33, 40) if transpose_b else randn(40, 33)
    for mm in SIZES:
        a = randn(mm, 40)
        out = np.full((mm, 33), np.nan, np.float32)
        f(a, bb, out)
        ref = a.astype(np.float64) @ (bb.T if transpose_b else bb).astype(np.float64)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4, err_msg=f"m={mm}")


@pytest.mark.parametrize("interp", [False, True], ids=["llvm", "interpreter"])
def test_small_m_branch_is_the_one_that_runs(interp):
    """The lowered function is ``if m <= 3: A elif m <= 16: B else: C`` (A, B streaming,
    with rfactor'ed lanes over K; C register-tiled).  Keep one nest at a time (the others
    emptied): only the nest meant for each M writes the output, and writes it right."""
    args = _dense()
    f = td.lower(ops.schedule(args[-1]), args)
    conds, nests, node = [], [], f.body
    while isinstance(node, IfThenElse):
        conds.append(node.cond)
        nests.append(node.then_case)
        node = node.else_case
    nests.append(node)
    assert len(conds) == len(SKINNY_M_SYMBOLIC)
    assert [any(n.endswith(".rf") for n in _allocs(nest)) for nest in nests] == \
        [True] * len(conds) + [False]

    def keep_only(k: int):
        body = SeqStmt([])
        for i in reversed(range(len(conds))):
            body = IfThenElse(conds[i], nests[i] if i == k else SeqStmt([]), body)
            if i == len(conds) - 1 and k == len(conds):
                body = IfThenElse(conds[i], SeqStmt([]), nests[-1])
        return PrimFunc(f.name, f.params, body, f.size_vars, f.bindings, f.attrs)

    bounds = [b for b, _ in SKINNY_M_SYMBOLIC]
    expect = {1: 0, bounds[0] + 1: 1, SKINNY_M: 1, SKINNY_M + 1: len(conds)}
    w, b = randn(30, 72), randn(30)
    for k in range(len(nests)):
        g = keep_only(k)
        g = g if interp else td.build(g, target="llvm")
        for m, which in expect.items():
            x = randn(m, 72)
            out = np.full((m, 30), -7.0, np.float32)
            _run(g, interp, [x, w, b, out])
            ran = not np.all(out == -7.0)
            assert ran == (which == k), (k, m)
            if ran:
                np.testing.assert_allclose(out, x @ w.T + b, rtol=1e-4, atol=1e-4)


def test_constant_m_has_no_variant():
    for m in (1, 64):
        X = td.placeholder((m, 64), name="X")
        W = td.placeholder((40, 64), name="W")
        assert not ops.schedule(ops.dense(X, W)).variants


def test_specialize_checks_its_arguments():
    args = _dense(bias=False)
    s = td.create_schedule(args[-1].op)
    other = td.create_schedule(args[-1].op)
    m = args[0].shape[0]
    with pytest.raises(ScheduleError, match="specialize"):
        s.specialize(m + 1, other)                        # not a condition
    with pytest.raises(ScheduleError, match="specialize"):
        s.specialize(m <= 4, s)                           # itself
    with pytest.raises(ScheduleError, match="specialize"):
        s.specialize(m <= 4, td.create_schedule(ops.relu(args[0]).op))   # other outputs
    s.specialize(m <= 4, other)
    assert len(s.variants) == 1
    unbound = td.create_schedule(args[-1].op)
    unbound.specialize(td.var("q") <= 4, td.create_schedule(args[-1].op))
    with pytest.raises(ShapeError, match="'q'"):          # no argument binds q
        td.lower(unbound, args)


def test_every_size_symbolic_dense_gelu():
    """M, N and K all symbolic, a GELU epilogue: each nest right, through both backends."""
    from .helpers import erf
    m, n, k = td.var("m"), td.var("n"), td.var("k")
    X = td.placeholder((m, k), name="X")
    W = td.placeholder((n, k), name="W")
    B = td.placeholder((n,), name="B")
    Y = ops.dense(X, W, B, activation="gelu")
    s = ops.schedule(Y)
    f, g = td.build(s, [X, W, B, Y], target="llvm"), td.lower(s, [X, W, B, Y])
    for mm, nn, kk in ((1, 37, 70), (3, 5, 9), (SKINNY_M, 64, 33), (SKINNY_M + 1, 20, 20)):
        x, w, b = randn(mm, kk), randn(nn, kk), randn(nn)
        r = x.astype(np.float64) @ w.T.astype(np.float64) + b
        r = 0.5 * r * (1 + erf(r / np.sqrt(2)))
        for interp, fn in ((False, f), (True, g)):
            out = np.full((mm, nn), np.nan, np.float32)
            _run(fn, interp, [x, w, b, out])
            np.testing.assert_allclose(out, r, rtol=1e-4, atol=1e-4, err_msg=f"{mm, nn, kk}")
