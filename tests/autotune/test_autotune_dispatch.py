"""Dynamic-shape dispatch: the kernel tuned for the nearest size, per dimension, on a log scale."""
import itertools

import numpy as np
import pytest

import tdsl as td
from tdsl import autotune
from tdsl.autotune import Database, MeasureErrorNo, Record
from tdsl.autotune.dynamic import nearest


def _records(db, args, grid):
    """One valid record (the default schedule) per tuned size, as tune_dynamic leaves them."""
    with Database(db) as d:
        for i, binding in enumerate(grid):
            task = autotune.create_auto_task(args, "llvm", sizes=binding)
            d.add(Record(task.key, task.description, "llvm", {}, "[]", f"h{i}", (1e-3,),
                         MeasureErrorNo.NO_ERROR, flop=task.flop, signature=task.signature,
                         workload=task.workload, sizes=binding))


def _matmul2():
    n, m = td.var("n"), td.var("m")
    A = td.placeholder((n, 24), "float32", name="A")
    B = td.placeholder((24, m), "float32", name="B")
    k = td.reduce_axis((0, 24), name="k")
    C = td.compute((n, m), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B, C]


def _chosen(mod, arrays):
    kern = mod.select(arrays)
    return next(key for key, kk in mod.kernels if kk is kern)


def test_two_symbolic_dims_pick_the_nearest_size_of_each(tmp_path):
    args = _matmul2()
    db = str(tmp_path / "d2.db")
    _records(db, args, [{"n": a, "m": b} for a, b in itertools.product([16, 256], [16, 256])])
    mod = autotune.build_dynamic(args, db)
    rng = np.random.default_rng(0)
    for (nn, mm), want in {(10, 200): (16, 256), (17, 300): (16, 256), (200, 10): (256, 16),
                           (300, 17): (256, 16), (10, 10): (16, 16), (1000, 1000): (256, 256),
                           (63, 65): (16, 256), (65, 63): (256, 16)}.items():
        a = rng.uniform(-1, 1, (nn, 24)).astype("float32")
        b = rng.uniform(-1, 1, (24, mm)).astype("float32")
        c = np.zeros((nn, mm), "float32")
        assert _chosen(mod, [a, b, c]) == want, (nn, mm)
        mod(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_three_symbolic_dims(tmp_path):
    b_, n, m = td.var("b"), td.var("n"), td.var("m")
    A = td.placeholder((b_, n, 8), "float32", name="A")
    B = td.placeholder((b_, 8, m), "float32", name="B")
    k = td.reduce_axis((0, 8), name="k")
    C = td.compute((b_, n, m), lambda z, i, j: td.sum(A[z, i, k] * B[z, k, j], axis=k), name="C")
    args = [A, B, C]
    db = str(tmp_path / "d3.db")
    sizes = [1, 8, 64]
    _records(db, args, [dict(zip("bnm", t)) for t in itertools.product(sizes, sizes, sizes)])
    mod = autotune.build_dynamic(args, db)
    assert len(mod.kernels) == 27
    rng = np.random.default_rng(1)
    for shape, want in {(2, 5, 40): (1, 8, 64), (3, 60, 2): (8, 64, 1), (30, 1, 9): (64, 1, 8),
                        (1, 100, 100): (1, 64, 64)}.items():
        zb, zn, zm = shape
        a = rng.uniform(-1, 1, (zb, zn, 8)).astype("float32")
        b = rng.uniform(-1, 1, (zb, 8, zm)).astype("float32")
        c = np.zeros((zb, zn, zm), "float32")
        assert _chosen(mod, [a, b, c]) == want, shape
        mod(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_nearest_on_a_sparse_grid_and_ties():
    keys = [(16, 16), (256, 256)]
    # log distance: (10, 200) is |log 10/16| + |log 200/16| = 3.0 from (16, 16) and
    # |log 10/256| + |log 200/256| = 3.5 from (256, 256)
    assert keys[nearest(keys, (10, 200))] == (16, 16)
    # exactly between 16 and 64 on a log scale (32): the larger wins
    assert [(16,), (64,)][nearest([(16,), (64,)], (32,))] == (64,)
    assert [(16,), (64,)][nearest([(16,), (64,)], (0,))] == (16,)


@pytest.mark.parametrize("nn", [1, 7, 33])
def test_dispatch_interpreter_agrees(tmp_path, nn):
    """The kernels chosen are schedules of the symbolic computation: right at any size
    (checked through the interpreter too)."""
    args = _matmul2()
    db = str(tmp_path / "d.db")
    _records(db, args, [{"n": 16, "m": 16}, {"n": 256, "m": 16}])
    mod = autotune.build_dynamic(args, db)
    rng = np.random.default_rng(nn)
    a = rng.uniform(-1, 1, (nn, 24)).astype("float32")
    b = rng.uniform(-1, 1, (24, 5)).astype("float32")
    c = np.zeros((nn, 5), "float32")
    mod(a, b, c)
    c2 = np.zeros_like(c)
    s = td.create_schedule(args[-1].op)
    td.interpreter.run(td.lower(s, args), a, b, c2)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(c2, a @ b, rtol=1e-4, atol=1e-4)
