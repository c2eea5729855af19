"""``topi`` operators and ``topi.{generic,x86,cuda}.schedule_*`` over tdsl.ops, against NumPy."""
import numpy as np
import pytest

import tvm
import tvm.testing
from tvm import te, topi


def _build_run(outs, args, arrays, sched):
    s = sched(outs)
    f = tvm.build(s, args, "llvm")
    nd = [tvm.nd.array(a) for a in arrays]
    f(*nd)
    return [x.numpy() for x in nd]


@pytest.mark.parametrize("sched", [topi.generic.schedule_dense, topi.x86.schedule_dense])
def test_dense(rng, sched):
    A = te.placeholder((33, 20), name="A")
    W = te.placeholder((17, 20), name="W")
    b = te.placeholder((17,), name="b")
    D = topi.nn.dense(A, W, b)
    a, w, bb = (rng.random((33, 20)).astype("float32"), rng.random((17, 20)).astype("float32"),
                rng.random(17).astype("float32"))
    out = _build_run([D], [A, W, b, D], [a, w, bb, np.zeros((33, 17), "float32")], sched)
    tvm.testing.assert_allclose(out[3], a @ w.T + bb, rtol=1e-5)


def test_conv2d_nchw(rng):
    X = te.placeholder((1, 3, 10, 10), name="X")
    K = te.placeholder((4, 3, 3, 3), name="K")
    Y = topi.nn.conv2d_nchw(X, K, 1, 1, 1)
    x, k = rng.random((1, 3, 10, 10)).astype("float32"), rng.random((4, 3, 3, 3)).astype("float32")
    out = _build_run([Y], [X, K, Y], [x, k, np.zeros((1, 4, 10, 10), "float32")],
                     topi.x86.schedule_conv2d_nchw)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((1, 4, 10, 10), "float32")
    for i in range(10):
        for j in range(10):
            want[0, :, i, j] = np.tensordot(k, xp[0, :, i:i + 3, j:j + 3], axes=3)
    tvm.testing.assert_allclose(out[2], want, rtol=1e-4)


def test_softmax_and_pool(rng):
    X = te.placeholder((5, 9), name="X")
    S = topi.nn.softmax(X)
    x = rng.random((5, 9)).astype("float32")
    out = _build_run([S], [X, S], [x, np.zeros((5, 9), "float32")], topi.generic.schedule_softmax)
    e = np.exp(x - x.max(1, keepdims=True))
    tvm.testing.assert_allclose(out[1], e / e.sum(1, keepdims=True), rtol=1e-5)
    I = te.placeholder((1, 2, 8, 8), name="I")
    P = topi.nn.pool2d(I, (2, 2), (2, 2), (1, 1), (0, 0, 0, 0), "max")
    x = rng.random((1, 2, 8, 8)).astype("float32")
    out = _build_run([P], [I, P], [x, np.zeros((1, 2, 4, 4), "float32")],
                     topi.generic.schedule_pool)
    tvm.testing.assert_allclose(out[1], x.reshape(1, 2, 4, 2, 4, 2).max(axis=(3, 5)))


def test_broadcast_elementwise_reduce(rng):
    A = te.placeholder((4, 6), name="A")
    B = te.placeholder((6,), name="B")
    C = topi.add(topi.exp(A), B)
    R = topi.sum(C, axis=1)
    M = topi.max(A, axis=0, keepdims=True)
    a, b = rng.random((4, 6)).astype("float32"), rng.random(6).astype("float32")
    out = _build_run([C], [A, B, C], [a, b, np.zeros((4, 6), "float32")],
                     topi.generic.schedule_injective)
    tvm.testing.assert_allclose(out[2], np.exp(a) + b, rtol=1e-5)
    out = _build_run([R], [A, B, R], [a, b, np.zeros(4, "float32")], topi.x86.schedule_reduce)
    tvm.testing.assert_allclose(out[2], (np.exp(a) + b).sum(1), rtol=1e-5)
    out = _build_run([M], [A, M], [a, np.zeros((1, 6), "float32")],
                     topi.generic.schedule_reduce)
    tvm.testing.assert_allclose(out[1], a.max(0, keepdims=True))
    T = topi.transpose(A, (1, 0))
    out = _build_run([T], [A, T], [a, np.zeros((6, 4), "float32")],
                     topi.generic.schedule_injective)
    tvm.testing.assert_allclose(out[1], a.T)


def test_schedule_uses_target_in_scope():
    A = te.placeholder((8, 8), name="A")
    B = topi.nn.relu(A)
    with tvm.target.Target("llvm"):
        s = topi.generic.schedule_injective([B])
    assert s is not None
    assert topi.cuda.schedule_injective.__name__ == "schedule_injective"


def test_topi_names_exist():
    for mod in (topi, topi.nn, topi.generic, topi.x86, topi.cuda):
        for name in mod.__all__:
            assert callable(getattr(mod, name)) or name in ("nn", "generic", "x86", "cuda", "utils")


@pytest.mark.parametrize("n", [3, 6])
def test_einsum_and_tensordot_against_numpy(rng, n):
    from tdsl.errors import ShapeError
    X = te.placeholder((n, n), name="X")
    A = te.placeholder((n, 4, 5), name="A")
    B = te.placeholder((4, 5, 2), name="B")
    x = rng.standard_normal((n, n)).astype("float32")
    a = rng.standard_normal((n, 4, 5)).astype("float32")
    b = rng.standard_normal((4, 5, 2)).astype("float32")
    cases = [(topi.einsum("ii->i", X), [X], [x], np.einsum("ii->i", x)),
             (topi.einsum("ij,jk", X, X), [X], [x], x @ x),
             (topi.einsum("ijk,jkl->il", A, B), [A, B], [a, b], np.einsum("ijk,jkl->il", a, b)),
             (topi.tensordot(A, B, 2), [A, B], [a, b], np.tensordot(a, b, 2)),
             (topi.tensordot(A, B, ([1], [0])), [A, B], [a, b], np.tensordot(a, b, ([1], [0]))),
             (topi.tensordot(X, X, 0), [X], [x], np.tensordot(x, x, 0))]
    for out, ins, arrays, want in cases:
        f = tvm.build(te.create_schedule(out.op), ins + [out])
        got = tvm.nd.empty(want.shape, "float32")
        f(*[tvm.nd.array(v) for v in arrays], got)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)
    with pytest.raises(ShapeError, match=r"axis 'j' has extent"):
        topi.einsum("ij,jk->ik", X, te.placeholder((7, 2), name="Y"))
    with pytest.raises(ShapeError, match=r"'\.\.\.'"):
        topi.einsum("...i->i", X)
    with pytest.raises(ShapeError, match=r"pair 1 axis/axes of a with 2"):
        topi.tensordot(A, B, ([1], [0, 1]))
