"""A dense/matmul with a symbolic M (issue 12): ``ops.schedule`` specializes it, so one
function runs the small-M streaming nest when ``M <= SKINNY_M`` at call time and the
register-tiled nest otherwise (``Schedule.specialize``, an ``if`` around two nests)."""
from __future__ import annotations

import numpy as np
import pytest

import tdsl as td
import tdsl.interpreter
from tdsl import ops
from tdsl.errors import ScheduleError
from tdsl.ops.schedules.llvm import SKINNY_M
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
    assert len(s.variants) == 1
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
    assert len(s.variants) == 1
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
    """Keep one branch of the lowered ``if`` at a time: with only the streaming nest, M = 1
    is computed and M = 17 is left alone; with only the tiled nest, the reverse."""
    args = _dense()
    f = td.lower(ops.schedule(args[-1]), args)
    top = f.body
    assert isinstance(top, IfThenElse), "one if around the two nests expected"
    assert any(n.endswith(".rf") for n in _allocs(top.then_case)), "streaming nest: rfactor"
    assert not any(n.endswith(".rf") for n in _allocs(top.else_case))
    w, b = randn(30, 72), randn(30)
    for keep in ("then", "else"):
        body = IfThenElse(top.cond, top.then_case if keep == "then" else SeqStmt([]),
                          top.else_case if keep == "else" else SeqStmt([]))
        g = PrimFunc(f.name, f.params, body, f.size_vars, f.bindings, f.attrs)
        g = g if interp else td.build(g, target="llvm")
        for m in (1, SKINNY_M + 1):
            x = randn(m, 72)
            out = np.full((m, 30), -7.0, np.float32)
            _run(g, interp, [x, w, b, out])
            ran = not np.all(out == -7.0)
            assert ran == ((m <= SKINNY_M) == (keep == "then")), (keep, m)
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
