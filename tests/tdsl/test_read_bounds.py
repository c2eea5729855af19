"""Reads outside a tensor's shape are refused or checked per call, never silent (r32)."""
import numpy as np
import pytest

import tdsl as td
from tdsl.errors import LoweringError, ShapeError
from tdsl.interpreter import run
from tests.workloads import random_array


@pytest.mark.parametrize("n", [16, "sym"])
def test_read_past_the_end_is_refused_at_lowering(n):
    n = td.var("n") if n == "sym" else n
    X = td.placeholder((n,), "float32", name="X")
    Y = td.compute((n,), lambda i: X[i + 1], name="Y")
    s = td.create_schedule(Y.op)
    with pytest.raises(LoweringError, match=r"stage 'Y' reads X\[i \+ 1\].*dimension 0 of 'X' "
                                            r"is read at \[1, n?1?6?\].*if_then_else"):
        td.build(s, [X, Y], target="llvm")


def test_read_before_the_start_is_refused():
    X = td.placeholder((4, 8), name="X")
    k = td.reduce_axis((0, 8), name="k")
    Y = td.compute((4,), lambda i: td.sum(X[i, k - 1], axis=k), name="Y")
    s = td.create_schedule(Y.op)
    with pytest.raises(LoweringError, match=r"dimension 1 of 'X' is read at \[-1, 6\]"):
        td.lower(s, [X, Y])


def test_symbolic_sizes_are_checked_per_call(rng):
    """Y (n) reads X (m) at i: legal only when n <= m, which each call checks."""
    n, m = td.var("n"), td.var("m")
    X = td.placeholder((m,), name="X")
    Y = td.compute((n,), lambda i: X[i] * 2.0, name="Y")
    s = td.create_schedule(Y.op)
    f = td.lower(s, [X, Y])
    lib = td.build(s, [X, Y], target="llvm")
    x = random_array(rng, (8,))
    for runner in (lambda *a: run(f, *a), lib):
        for rows in (8, 5):
            y = np.full(rows, np.nan, "float32")
            runner(x, y)
            np.testing.assert_allclose(y, x[:rows] * 2, rtol=1e-6)
        with pytest.raises(ShapeError, match=r"stage 'Y' reads X\[i\].*n = 9.*dimension 0 of "
                                             r"'X' at \[0, 8\].*extent 8"):
            runner(x, np.zeros(9, "float32"))


@pytest.mark.parametrize("n", [7, 12])
def test_guarded_reads_are_legal(rng, n):
    """Padding and shifts under if_then_else, a where= clause and an 'and': not refused."""
    X = td.placeholder((n,), name="X")
    P = td.compute((n + 2,), lambda i: td.if_then_else(td.all(i >= 1, i < n + 1), X[i - 1], 0.0),
                   name="P")
    S = td.compute((n,), lambda i: td.if_then_else(i + 1 < n, X[i + 1], X[i]), name="S")
    k = td.reduce_axis((0, 3), name="k")
    W = td.compute((n,), lambda i: td.sum(X[i + k], axis=k, where=i + k < n), name="W")
    x = random_array(rng, (n,))
    pad = np.concatenate([[0], x, [0]]).astype("float32")
    for T, want in ((P, pad), (S, np.append(x[1:], x[-1])),
                    (W, np.array([x[i:i + 3].sum() for i in range(n)], "float32"))):
        s = td.create_schedule(T.op)
        for runner in (lambda *a: run(td.lower(s, [X, T]), *a), td.build(s, [X, T], "llvm")):
            out = np.full(want.shape, np.nan, "float32")
            runner(x, out)
            np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def test_gather_and_nonaffine_reads_are_not_refused(rng):
    n = td.var("n")
    X = td.placeholder((n,), name="X")
    Idx = td.placeholder((n,), "int32", name="Idx")
    G = td.compute((n,), lambda i: X[Idx[i]] + X[i // 2], name="G")
    s = td.create_schedule(G.op)
    lib = td.build(s, [X, Idx, G], target="llvm")
    x = random_array(rng, (10,))
    idx = rng.integers(0, 10, 10).astype("int32")
    g = np.zeros(10, "float32")
    lib(x, idx, g)
    np.testing.assert_allclose(g, x[idx] + x[np.arange(10) // 2], rtol=1e-6)


def test_exported_kernel_keeps_its_read_checks(rng, tmp_path):
    n, m = td.var("n"), td.var("m")
    X = td.placeholder((m,), name="X")
    Y = td.compute((n,), lambda i: X[i] + 1.0, name="Y")
    s = td.create_schedule(Y.op)
    path = str(tmp_path / "k.so")
    td.build(s, [X, Y], target="llvm").export_library(path)
    lib = td.load_module(path)
    x = random_array(rng, (6,))
    y = np.zeros(4, "float32")
    lib(x, y)
    np.testing.assert_allclose(y, x[:4] + 1, rtol=1e-6)
    with pytest.raises(ShapeError, match=r"reads X\[i\].*n = 7"):
        lib(x, np.zeros(7, "float32"))
