"""``topi.split`` and ``topi.take`` (TVM's layout operators tdsl.ops lacks) against NumPy on
random data, their gradients through ``te.gradient``, and their refusals."""
import numpy as np
import pytest

import tvm
from tvm import te, topi

from tdsl.errors import ShapeError


def _run(outs, ins, arrays):
    s = te.create_schedule([o.op for o in outs])
    f = tvm.build(s, list(ins) + list(outs), "llvm")
    res = [np.zeros([int(d.value) if hasattr(d, "value") else int(d) for d in o.shape],
                    str(o.dtype)) for o in outs]
    f(*arrays, *res)
    return res


@pytest.mark.parametrize("shape,parts,axis", [((2, 6, 5), np.int64(3), 1), ((7, 4), [2, 5], 0),
                                              ((3, 9), [2, 4], -1), ((4, 5), 1, 0)])
def test_split_matches_numpy(rng, shape, parts, axis):
    X = te.placeholder(shape, name="X")
    outs = topi.split(X, parts, axis)
    x = rng.standard_normal(shape).astype("float32")
    want = np.split(x, parts, axis)
    assert [tuple(int(d.value) for d in o.shape) for o in outs] == [w.shape for w in want]
    for got, w in zip(_run(outs, [X], [x]), want):
        np.testing.assert_array_equal(got, w)


@pytest.mark.parametrize("mode", ["clip", "wrap", "fast"])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_take_matches_numpy(rng, mode, axis):
    a = rng.standard_normal((4, 5)).astype("float32")
    size = a.size if axis is None else a.shape[axis]
    idx = rng.integers(-2 * size, 2 * size, (3, 7)).astype("int32")
    A = te.placeholder((4, 5), name="A")
    I = te.placeholder((3, 7), "int32", name="I")
    R = topi.take(A, I, axis=axis, mode=mode)
    # "fast" (TVM: unchecked) clamps in tdsl, so an index out of range never reads outside A
    want = np.take(a, idx, axis=axis, mode="clip" if mode == "fast" else mode)
    np.testing.assert_array_equal(_run([R], [A, I], [a, idx])[0], want)


def test_take_with_computed_indices_has_numpy_gradient(rng):
    """TVM's autodiff test: R = take(X, abs(I)); dX counts how often each element is taken."""
    X = te.placeholder((4, 5), name="X")
    I = te.placeholder((30,), "int32", name="I")
    R = topi.take(X, topi.abs(I))
    (dX,) = te.gradient(R, [X], topi.full_like(R, 1.0))
    idx = rng.integers(-25, 25, 30).astype("int32")
    x = rng.standard_normal((4, 5)).astype("float32")
    want = np.zeros(20, "float32")
    np.add.at(want, np.clip(np.abs(idx), 0, 19), 1.0)
    got = _run([dX], [X, I], [x, idx])[0]
    np.testing.assert_allclose(got, want.reshape(4, 5))


def test_split_and_take_refuse_bad_input():
    X = te.placeholder((4, 6), name="X")
    with pytest.raises(ShapeError, match="4 sections do not divide axis 1"):
        topi.split(X, 4, 1)
    with pytest.raises(ShapeError, match="must be increasing constants in \\[0, 6\\]"):
        topi.split(X, [3, 2], 1)
    with pytest.raises(ShapeError, match="must be increasing constants"):
        topi.split(X, [7], 1)
    with pytest.raises(ShapeError, match="leave an empty part of axis 1"):
        topi.split(X, [0, 4], 1)
    with pytest.raises(ShapeError, match="symbolic size"):
        topi.split(te.placeholder((te.var("n"),), name="Y"), 2)
    with pytest.raises(ShapeError, match="indices must be integers"):
        topi.take(X, X)
    with pytest.raises(ShapeError, match="mode must be one of"):
        topi.take(X, te.placeholder((2,), "int32"), mode="raise")
