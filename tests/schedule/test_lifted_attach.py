"""A reduction lifted out of a compute body (``<name>.red0``) moves with its reader (r31)."""
import numpy as np
import pytest

import tdsl as td
from tdsl.interpreter import run


def _layernorm(n, D):
    X = td.placeholder((n, D), "float32", name="X")
    k1 = td.reduce_axis((0, D), name="k1")
    mean = td.compute((n,), lambda i: td.sum(X[i, k1], axis=k1) / D, name="mean")
    k2 = td.reduce_axis((0, D), name="k2")
    var = td.compute((n,), lambda i: td.sum((X[i, k2] - mean[i]) * (X[i, k2] - mean[i]),
                                            axis=k2) / D, name="var")
    Y = td.compute((n, D), lambda i, j: (X[i, j] - mean[i]) / td.sqrt(var[i] + 1e-5), name="Y")
    return X, mean, var, Y


def _ref(x):
    return (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)


@pytest.mark.parametrize("order", ["mean_first", "var_first"])
def test_layernorm_with_lifted_variance_attached_at_row(rng, order):
    n, D = td.var("n"), 96
    X, mean, var, Y = _layernorm(n, D)
    s = td.create_schedule(Y.op)
    i = s[Y].op.axis[0]
    for t in ([mean, var] if order == "mean_first" else [var, mean]):
        s[t].compute_at(s[Y], i)
    s[Y].parallel(i)
    (red,) = [st for st in s.stages if st.name == "var.red0"]
    assert red.attach_stage is s[Y] and red.attach_ivar is i
    f = td.lower(s, [X, Y])
    lib = td.build(s, [X, Y], target="llvm")
    for rows in (1, 17, 64):
        x = rng.standard_normal((rows, D)).astype("float32")
        for runner in (lambda *a: run(f, *a), lib):
            y = np.full_like(x, np.nan)
            runner(x, y)
            np.testing.assert_allclose(y, _ref(x), rtol=1e-4, atol=1e-4)


def test_compute_root_takes_the_lifted_stage_back(rng):
    X, mean, var, Y = _layernorm(8, 16)
    s = td.create_schedule(Y.op)
    s[var].compute_at(s[Y], s[Y].op.axis[0])
    s[var].compute_root()
    (red,) = [st for st in s.stages if st.name == "var.red0"]
    assert red.attach_type.value == "root"
    x = rng.standard_normal((8, 16)).astype("float32")
    y = np.empty_like(x)
    td.build(s, [X, Y], target="llvm")(x, y)
    np.testing.assert_allclose(y, _ref(x), rtol=1e-4, atol=1e-4)


def test_a_lifted_stage_placed_by_the_user_stays_there(rng):
    X, mean, var, Y = _layernorm(8, 16)
    s = td.create_schedule(Y.op)
    (red,) = [st for st in s.stages if st.name == "var.red0"]
    red.compute_root()
    s[var].compute_at(s[Y], s[Y].op.axis[0])
    assert red.attach_type.value == "root"
    x = rng.standard_normal((8, 16)).astype("float32")
    y = np.empty_like(x)
    run(td.lower(s, [X, Y]), x, y)
    np.testing.assert_allclose(y, _ref(x), rtol=1e-4, atol=1e-4)


def test_inlined_reader_leaves_the_lifted_stage_attached(rng):
    """var = var.red0 / D inlined into Y after compute_at: Y reads var.red0 where it was."""
    X, mean, var, Y = _layernorm(8, 16)
    s = td.create_schedule(Y.op)
    i = s[Y].op.axis[0]
    s[mean].compute_at(s[Y], i)
    s[var].compute_at(s[Y], i)
    s[var].compute_inline()
    x = rng.standard_normal((8, 16)).astype("float32")
    y = np.empty_like(x)
    td.build(s, [X, Y], target="llvm")(x, y)
    np.testing.assert_allclose(y, _ref(x), rtol=1e-4, atol=1e-4)
