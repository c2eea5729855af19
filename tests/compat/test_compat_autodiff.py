"""``te.gradient`` (reverse-mode differentiation of tensor expressions) against NumPy's
analytic gradients and finite differences (``tvm.testing.check_numerical_grads``), for
elementwise math, a matmul, sum/max reductions, a chain with a tensor read twice, and
topi's convolution and pooling; the refusals name what is not supported."""
import numpy as np
import pytest

import tvm
import tvm.testing
from tvm import te, topi


def _grads(out, inputs, arrays, head=None, extra=()):
    head_t = topi.full_like(out, 1.0) if head is None else head
    grads = te.gradient(out, inputs, head=head_t)
    s = te.create_schedule([g.op for g in grads])
    args = list(grads) + list(inputs) + ([head_t] if head is not None else []) + list(extra)
    f = tvm.build(s, args)
    outs = [tvm.nd.empty([int(d) for d in g.shape], g.dtype) for g in grads]
    f(*outs, *[tvm.nd.array(a) for a in arrays])
    return [o.numpy() for o in outs]


def _forward_sum(out, inputs):
    f = tvm.build(te.create_schedule(out.op), [out] + list(inputs))

    def run(*arrays):
        o = tvm.nd.empty([int(d) for d in out.shape], out.dtype)
        f(o, *[tvm.nd.array(a) for a in arrays])
        return o.numpy().astype("float64").sum()
    return run


def test_elementwise_math_against_numpy(rng):
    a = rng.uniform(0.5, 2.0, (6, 5)).astype("float32")
    b = rng.standard_normal((6, 5)).astype("float32")
    A, B = te.placeholder(a.shape, name="A"), te.placeholder(b.shape, name="B")
    C = te.compute(a.shape, lambda i, j: te.exp(B[i, j]) * te.log(A[i, j]) + A[i, j] / B[i, j]
                   + te.sqrt(A[i, j]) * te.tanh(B[i, j]), name="C")
    ga, gb = _grads(C, [A, B], [a, b])
    np.testing.assert_allclose(ga, np.exp(b) / a + 1 / b + 0.5 / np.sqrt(a) * np.tanh(b),
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gb, np.exp(b) * np.log(a) - a / b ** 2
                               + np.sqrt(a) * (1 - np.tanh(b) ** 2), rtol=1e-4, atol=1e-3)


def test_matmul_with_a_head_and_a_transposed_read(rng):
    """C = A @ B (a sum reduction); head H: dA = H @ B.T, dB = A.T @ H; A read as A[k, i]
    too (A is square) to check two loads of one tensor with different indices."""
    n, m = 7, 5
    a = rng.standard_normal((n, n)).astype("float32")
    b = rng.standard_normal((n, m)).astype("float32")
    h = rng.standard_normal((n, m)).astype("float32")
    A, B, H = (te.placeholder(x.shape, name=nm) for x, nm in ((a, "A"), (b, "B"), (h, "H")))
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    ga, gb = _grads(C, [A, B], [a, b, h], head=H)
    np.testing.assert_allclose(ga, h @ b.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gb, a.T @ h, rtol=1e-4, atol=1e-4)
    k2 = te.reduce_axis((0, n), name="k2")
    D = te.compute((n,), lambda i: te.sum(A[i, k2] * A[k2, i], axis=k2), name="D")
    (gd,) = _grads(D, [A], [a])
    # d/dA[p, q] of sum_i sum_k A[i,k] A[k,i] = 2 A[q, p]
    np.testing.assert_allclose(gd, 2 * a.T, rtol=1e-4, atol=1e-4)


def test_max_reduction_and_a_chain_with_two_consumers(rng):
    """A max reduction passes the adjoint to the winning element only; an intermediate read
    by two stages sums both contributions."""
    x = rng.standard_normal((4, 9)).astype("float32")
    X = te.placeholder(x.shape, name="X")
    k = te.reduce_axis((0, 9), name="k")
    M = te.compute((4,), lambda i: te.max(X[i, k], axis=k), name="M")
    (gm,) = _grads(M, [X], [x])
    want = np.zeros_like(x)
    want[np.arange(4), x.argmax(1)] = 1
    np.testing.assert_allclose(gm, want)
    S = te.compute(x.shape, lambda i, j: te.sigmoid(X[i, j]), name="S")
    Y = te.compute((4, 8), lambda i, j: S[i, j] * S[i, j + 1] + X[i, j], name="Y")
    (gy,) = _grads(Y, [X], [x])
    tvm.testing.check_numerical_grads(_forward_sum(Y, [X]), [x], [gy])


@pytest.mark.parametrize("stride,padding", [(1, 1), (2, 0)])
def test_conv2d_and_pool_gradients_against_finite_differences(rng, stride, padding):
    x = rng.standard_normal((1, 2, 5, 6)).astype("float32")
    w = rng.standard_normal((3, 2, 3, 3)).astype("float32")
    X, W = te.placeholder(x.shape, name="X"), te.placeholder(w.shape, name="W")
    R = topi.nn.conv2d_nchw(topi.nn.relu(X), W, stride, padding, 1)
    gx, gw = _grads(R, [X, W], [x, w])
    tvm.testing.check_numerical_grads(_forward_sum(R, [X, W]), [x, w], [gx, gw])
    P = topi.nn.pool2d(X, (2, 2), (stride, stride), (1, 1), (padding,) * 4, "avg")
    (gp,) = _grads(P, [X], [x])
    tvm.testing.check_numerical_grads(_forward_sum(P, [X]), [x], [gp])


def test_gradient_refusals():
    A = te.placeholder((4, 4), name="A")
    B = te.compute((4, 4), lambda i, j: A[i, j] * 2.0, name="B")
    with pytest.raises(tvm.TVMError, match="head=None"):
        te.gradient(B, [A])
    with pytest.raises(tvm.TVMError, match="head has shape"):
        te.gradient(B, [A], head=te.placeholder((4,), name="H"))
    k = te.reduce_axis((0, 4), name="k")
    lse = te.comm_reducer(lambda x, y: te.log(te.exp(x) + te.exp(y)),
                          lambda t: tvm.tir.const(-1e30, t), name="lse")
    P = te.compute((4,), lambda i: lse(A[i, k], axis=k), name="P")
    with pytest.raises(tvm.TVMError, match="reducer 'lse'"):
        te.gradient(P, [A], head=topi.full_like(P, 1.0))
    I = te.placeholder((4,), name="I", dtype="int32")
    with pytest.raises(tvm.TVMError, match="only float"):
        te.gradient(B, [I], head=topi.full_like(B, 1.0))


def test_check_numerical_grads_catches_a_wrong_gradient(rng):
    x = rng.standard_normal(5)
    tvm.testing.check_numerical_grads(lambda v: float((v ** 2).sum()), [x], [2 * x])
    with pytest.raises(AssertionError, match="distance"):
        tvm.testing.check_numerical_grads(lambda v: float((v ** 2).sum()), [x], [3 * x])


@pytest.mark.parametrize("n", [4, 7])
def test_product_reduction_against_numpy(rng, n):
    prod = te.comm_reducer(lambda x, y: x * y, lambda t: tvm.tir.const(1, t), name="prod")
    a = rng.uniform(-1.5, 1.5, (n, 5)).astype("float32")
    a[0, 2] = -0.5                      # a zero factor (a + 0.5 == 0): still a gradient
    A = te.placeholder(a.shape, name="A")
    k = te.reduce_axis((1, 5), name="k")      # starts at 1: column 0 gets no gradient
    B = te.compute((n,), lambda i: prod(A[i, k] + 0.5, axis=k), name="B")
    (ga,) = _grads(B, [A], [a])
    f = a.astype("float64") + 0.5
    want = np.zeros_like(f)
    for i in range(n):
        for c in range(1, 5):
            want[i, c] = np.prod([f[i, j] for j in range(1, 5) if j != c])
    np.testing.assert_allclose(ga, want, rtol=1e-4, atol=1e-5)
    assert want[0, 1] == 0 and want[0, 2] != 0


def test_product_reduction_reading_the_input_twice():
    prod = te.comm_reducer(lambda x, y: x * y, lambda t: tvm.tir.const(1, t), name="prod")
    A = te.placeholder((6, 6), name="A")
    k = te.reduce_axis((0, 6), name="k")
    B = te.compute((6, 6), lambda i, j: prod(A[i, k] + A[k, i], axis=k), name="B")
    a = np.random.default_rng(7).uniform(0.3, 1.2, (6, 6)).astype("float32")
    (ga,) = _grads(B, [A], [a])
    tvm.testing.check_numerical_grads(_forward_sum(B, [A]), [a], [ga])
