"""matmul, batch_matmul, dense, conv2d, pooling, softmax, norms on "llvm" against NumPy
(and PyTorch's CPU operators where installed), over a grid of shapes: tails of every tile,
symbolic sizes bound to several values, strides, dilations, groups, layouts."""
from __future__ import annotations

import numpy as np
import pytest

import tdsl as td
from tdsl import ops
from tdsl.errors import DTypeError, ShapeError

from . import helpers as H
from .helpers import build, check, randint, randn, torch


# ---- matmul family ---------------------------------------------------------------------------
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (8, 16, 32), (13, 7, 50), (64, 64, 64), (33, 100, 17),
                                   (3, 129, 100)])
def test_matmul_constant_shapes(m, k, n):
    A = td.placeholder((m, k), name="A")
    B = td.placeholder((k, n), name="B")
    f = build(ops.matmul(A, B), [A, B])
    a, b = randn(m, k), randn(k, n)
    check(f, [a, b], a @ b, rtol=1e-4, atol=1e-4)


def test_matmul_symbolic_all_dims():
    M, K, N = td.var("M"), td.var("K"), td.var("N")
    A = td.placeholder((M, K), name="A")
    B = td.placeholder((K, N), name="B")
    f = build(ops.matmul(A, B), [A, B])
    for m, k, n in ((1, 1, 1), (5, 3, 40), (17, 33, 31), (64, 20, 96)):
        a, b = randn(m, k), randn(k, n)
        check(f, [a, b], a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("ta,tb", [(False, True), (True, False), (True, True)])
def test_matmul_transposes(ta, tb):
    M = td.var("M")
    A = td.placeholder((24, M) if ta else (M, 24), name="A")
    B = td.placeholder((37, 24) if tb else (24, 37), name="B")
    f = build(ops.matmul(A, B, transpose_a=ta, transpose_b=tb), [A, B])
    for m in (3, 20):
        a = randn(24, m) if ta else randn(m, 24)
        b = randn(37, 24) if tb else randn(24, 37)
        check(f, [a, b], (a.T if ta else a) @ (b.T if tb else b), rtol=1e-4, atol=1e-4)


def test_matmul_int8_accumulates_int32_and_float64():
    A = td.placeholder((9, 40), "int8", name="A")
    B = td.placeholder((40, 21), "int8", name="B")
    f = build(ops.matmul(A, B, out_dtype="int32"), [A, B])
    a, b = randint(-128, 128, 9, 40, dtype="int8"), randint(-128, 128, 40, 21, dtype="int8")
    check(f, [a, b], a.astype("int32") @ b.astype("int32"))
    A = td.placeholder((10, 12), "float64", name="A")
    B = td.placeholder((12, 19), "float64", name="B")
    f = build(ops.matmul(A, B), [A, B])
    a, b = randn(10, 12, dtype="float64"), randn(12, 19, dtype="float64")
    check(f, [a, b], a @ b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("ba,bb,ta,tb", [(3, 3, False, False), (1, 4, False, True),
                                         (4, 1, True, False), (2, 2, True, True)])
def test_batch_matmul(ba, bb, ta, tb):
    M = td.var("M")
    A = td.placeholder((ba, 11, M) if ta else (ba, M, 11), name="A")
    B = td.placeholder((bb, 35, 11) if tb else (bb, 11, 35), name="B")
    f = build(ops.batch_matmul(A, B, transpose_a=ta, transpose_b=tb), [A, B])
    for m in (1, 9):
        a = randn(ba, 11, m) if ta else randn(ba, m, 11)
        b = randn(bb, 35, 11) if tb else randn(bb, 11, 35)
        ref = np.matmul(a.transpose(0, 2, 1) if ta else a, b.transpose(0, 2, 1) if tb else b)
        check(f, [a, b], ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh"])
def test_dense_bias_activation(activation):
    n = td.var("n")
    X = td.placeholder((n, 30), name="X")
    W = td.placeholder((45, 30), name="W")
    b = td.placeholder((45,), name="b")
    f = build(ops.dense(X, W, b, activation=activation), [X, W, b])
    acts = {None: lambda v: v, "relu": lambda v: np.maximum(v, 0),
            "gelu": lambda v: v * 0.5 * (1 + H.erf(v / np.sqrt(2))),
            "gelu_tanh": lambda v: 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3))),
            "silu": lambda v: v / (1 + np.exp(-v)), "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
            "tanh": np.tanh}
    for rows in (1, 19):
        x, w, bb = randn(rows, 30), randn(45, 30), randn(45)
        ref = acts[activation]((x.astype(np.float64) @ w.T.astype(np.float64)) + bb)
        check(f, [x, w, bb], ref.astype("float32"), rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
def test_dense_matches_torch_linear():
    X = td.placeholder((7, 64), name="X")
    W = td.placeholder((50, 64), name="W")
    b = td.placeholder((50,), name="b")
    f = build(ops.dense(X, W, b, activation="gelu"), [X, W, b])
    x, w, bb = randn(7, 64), randn(50, 64), randn(50)
    ref = torch.nn.functional.gelu(torch.nn.functional.linear(*map(torch.from_numpy, (x, w, bb))))
    check(f, [x, w, bb], ref.numpy(), rtol=1e-4, atol=1e-4)


# ---- conv2d ------------------------------------------------------------------------------------
CONV_CASES = [
    # (n, c, h, w, co, kh, kw, stride, padding, dilation, groups)
    (1, 8, 10, 9, 16, 3, 3, 1, 1, 1, 1),
    (2, 3, 11, 13, 20, 3, 3, 2, (1, 0), 1, 1),
    (1, 16, 9, 9, 33, 1, 1, 1, 0, 1, 1),
    (1, 4, 12, 12, 8, 3, 3, 1, 2, 2, 1),
    (1, 6, 8, 7, 6, 3, 3, 1, (0, 1, 2, 1), 1, 1),
    (1, 8, 10, 9, 8, 3, 3, 1, 1, 1, 8),      # depthwise
    (1, 8, 10, 9, 16, 3, 3, 2, 1, 1, 8),     # depthwise, channel multiplier 2, stride 2
    (2, 8, 7, 9, 12, 3, 1, 1, (1, 0), 1, 4),  # grouped
    (1, 5, 5, 5, 7, 5, 5, 1, 0, 1, 1),       # kernel = input
]


def _conv_ref(x, w, stride, padding, dilation, groups):
    from tdsl.ops._util import as_pair, padding4
    return H.conv2d_nchw(x, w, as_pair("t", "s", stride), padding4("t", padding),
                         as_pair("t", "d", dilation), groups)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", CONV_CASES, ids=[f"conv{i}" for i in range(len(CONV_CASES))])
def test_conv2d(case, layout):
    n, c, h, w, co, kh, kw, stride, padding, dilation, groups = case
    x = randn(n, c, h, w)
    wt = randn(co, c // groups, kh, kw)
    ref = _conv_ref(x, wt, stride, padding, dilation, groups)
    if layout == "NCHW":
        D = td.placeholder((n, c, h, w), name="D")
        W = td.placeholder(wt.shape, name="W")
        xa, wa, refa = x, wt, ref
    else:
        D = td.placeholder((n, h, w, c), name="D")
        W = td.placeholder((kh, kw, c // groups, co), name="W")
        xa, wa, refa = x.transpose(0, 2, 3, 1).copy(), wt.transpose(2, 3, 1, 0).copy(), \
            ref.transpose(0, 2, 3, 1).copy()
    out = ops.conv2d(D, W, stride=stride, padding=padding, dilation=dilation, groups=groups,
                     layout=layout)
    f = build(out, [D, W])
    check(f, [xa, wa], refa, rtol=1e-4, atol=1e-4)


def test_conv2d_symbolic_batch_and_size_with_bias_relu():
    n, h, w = td.var("n"), td.var("h"), td.var("w")
    D = td.placeholder((n, 6, h, w), name="D")
    W = td.placeholder((10, 6, 3, 3), name="W")
    b = td.placeholder((10,), name="b")
    f = build(ops.conv2d(D, W, padding=1, bias=b, activation="relu"), [D, W, b])
    for shape in ((1, 6, 3, 3), (2, 6, 9, 17)):
        x, wt, bb = randn(*shape), randn(10, 6, 3, 3), randn(10)
        ref = np.maximum(H.conv2d_nchw(x, wt, padding=(1, 1, 1, 1)) + bb[:, None, None], 0)
        check(f, [x, wt, bb], ref, rtol=1e-4, atol=1e-4)


def test_conv2d_nchw_with_hwio_kernel():
    D = td.placeholder((1, 4, 6, 6), name="D")
    W = td.placeholder((3, 3, 4, 5), name="W")
    f = build(ops.conv2d(D, W, padding=1, kernel_layout="HWIO"), [D, W])
    x, wt = randn(1, 4, 6, 6), randn(5, 4, 3, 3)
    check(f, [x, wt.transpose(2, 3, 1, 0).copy()], H.conv2d_nchw(x, wt, padding=(1, 1, 1, 1)),
          rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
@pytest.mark.parametrize("groups", [1, 2, 12])
def test_conv2d_matches_torch(groups):
    D = td.placeholder((2, 12, 15, 14), name="D")
    W = td.placeholder((24, 12 // groups, 3, 3), name="W")
    f = build(ops.conv2d(D, W, stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=groups),
              [D, W])
    x, wt = randn(2, 12, 15, 14), randn(24, 12 // groups, 3, 3)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(wt), stride=(2, 1),
                                     padding=(1, 2), dilation=(1, 2), groups=groups)
    check(f, [x, wt], ref.numpy(), rtol=1e-4, atol=1e-4)


# ---- pooling -------------------------------------------------------------------------------------
POOL_CASES = [
    # kernel, stride, padding, ceil_mode, count_include_pad, dilation
    ((2, 2), (2, 2), (0, 0, 0, 0), False, True, (1, 1)),
    ((3, 3), (2, 2), (1, 1, 1, 1), False, True, (1, 1)),
    ((3, 3), (2, 2), (1, 1, 1, 1), True, False, (1, 1)),
    ((3, 2), (1, 2), (1, 0, 1, 0), True, True, (1, 1)),
    ((3, 3), (1, 1), (2, 2, 2, 2), False, True, (2, 2)),
]


@pytest.mark.parametrize("pool_type", ["max", "avg"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", POOL_CASES, ids=[f"pool{i}" for i in range(len(POOL_CASES))])
def test_pool2d(case, layout, pool_type):
    kernel, stride, padding, ceil_mode, cip, dil = case
    if pool_type == "avg" and dil != (1, 1):
        pytest.skip("average pooling has no dilation")
    x = randn(2, 3, 11, 10)
    ref = H.pool2d_nchw(x, kernel, stride, padding, pool_type, ceil_mode, cip, dil)
    shape = x.shape if layout == "NCHW" else (2, 11, 10, 3)
    D = td.placeholder(shape, name="D")
    out = ops.pool2d(D, kernel, stride, padding, dil, pool_type, layout, ceil_mode, cip)
    f = build(out, [D])
    if layout == "NCHW":
        check(f, [x], ref, rtol=1e-5, atol=1e-6)
    else:
        check(f, [x.transpose(0, 2, 3, 1).copy()], ref.transpose(0, 2, 3, 1).copy(), rtol=1e-5, atol=1e-6)


def test_pool_symbolic_spatial():
    h, w = td.var("h"), td.var("w")
    D = td.placeholder((1, 4, h, w), name="D")
    f = build([ops.max_pool2d(D, 2), ops.avg_pool2d(D, 3, 1, 1)], [D])
    for hh, ww in ((4, 4), (9, 21)):
        x = randn(1, 4, hh, ww)
        check(f, [x], [H.pool2d_nchw(x, (2, 2), (2, 2), (0,) * 4, "max"),
                       H.pool2d_nchw(x, (3, 3), (1, 1), (1,) * 4, "avg")], rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
def test_pool_matches_torch():
    D = td.placeholder((2, 5, 13, 12), name="D")
    f = build([ops.max_pool2d(D, 3, 2, 1, ceil_mode=True),
               ops.avg_pool2d(D, 3, 2, 1, ceil_mode=True, count_include_pad=False)], [D])
    x = randn(2, 5, 13, 12)
    t = torch.from_numpy(x)
    F = torch.nn.functional
    check(f, [x], [F.max_pool2d(t, 3, 2, 1, ceil_mode=True).numpy(),
                   F.avg_pool2d(t, 3, 2, 1, ceil_mode=True, count_include_pad=False).numpy()],
          rtol=1e-5, atol=1e-6)


# ---- softmax and norms ---------------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_log_softmax_symbolic(axis):
    n, m = td.var("n"), td.var("m")
    X = td.placeholder((n, 3, m), name="X")
    f = build([ops.softmax(X, axis), ops.log_softmax(X, axis)], [X])
    for shape in ((1, 3, 1), (4, 3, 17), (2, 3, 64)):
        x = randn(*shape) * 5
        check(f, [x], [H.softmax(x, axis), H.log_softmax(x, axis)], rtol=1e-5, atol=1e-6)


def test_softmax_large_values_are_stable():
    X = td.placeholder((2, 40), name="X")
    f = build(ops.softmax(X), [X])
    x = (randn(2, 40) * 30 + 1000).astype("float32")
    check(f, [x], H.softmax(x.astype(np.float64), -1).astype("float32"), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("axis", [-1, (1, 2)])
@pytest.mark.parametrize("affine", [True, False])
def test_layernorm(axis, affine):
    n = td.var("n")
    X = td.placeholder((n, 4, 33), name="X")
    pshape = (33,) if axis == -1 else (4, 33)
    G = td.placeholder(pshape, name="G") if affine else None
    B = td.placeholder(pshape, name="B") if affine else None
    out = ops.layernorm(X, G, B, axis=axis, eps=1e-5)
    f = build(out, [X] + ([G, B] if affine else []))
    axes = (2,) if axis == -1 else axis
    for rows in (1, 6):
        x = randn(rows, 4, 33) * 3 + 2
        g, b = randn(*pshape), randn(*pshape)
        ref = H.layernorm(x, g if affine else None, b if affine else None, axes)
        check(f, [x] + ([g, b] if affine else []), ref, rtol=1e-4, atol=1e-5)


def test_rmsnorm():
    n, m = td.var("n"), td.var("m")
    X = td.placeholder((n, m), name="X")
    G = td.placeholder((m,), name="G")
    f = build([ops.rmsnorm(X, G, eps=1e-6), ops.rms_norm(X)], [X, G])
    for shape in ((1, 1), (5, 47), (3, 128)):
        x, g = randn(*shape), randn(shape[1])
        check(f, [x, g], [H.rmsnorm(x, g, (1,), 1e-6), H.rmsnorm(x, None, (1,))], rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
def test_norms_match_torch():
    X = td.placeholder((6, 50), name="X")
    G = td.placeholder((50,), name="G")
    B = td.placeholder((50,), name="B")
    f = build([ops.layernorm(X, G, B), ops.rmsnorm(X, G), ops.softmax(X), ops.log_softmax(X, 0)],
              [X, G, B])
    x, g, b = randn(6, 50), randn(50), randn(50)
    tx, tg, tb = map(torch.from_numpy, (x, g, b))
    F = torch.nn.functional
    check(f, [x, g, b], [F.layer_norm(tx, (50,), tg, tb).numpy(),
                         F.rms_norm(tx, (50,), tg, eps=1e-5).numpy(),
                         torch.softmax(tx, -1).numpy(), torch.log_softmax(tx, 0).numpy()],
          rtol=1e-4, atol=1e-5)


def test_batch_norm_inference():
    n = td.var("n")
    X = td.placeholder((n, 5, 4, 3), name="X")
    P = [td.placeholder((5,), name=nm) for nm in ("g", "b", "mu", "var")]
    f = build(ops.batch_norm(X, *P), [X, *P])
    x = randn(2, 5, 4, 3)
    g, b, mu, var = randn(5), randn(5), randn(5), np.abs(randn(5)) + 0.5
    ref = (x - mu[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5) * g[:, None, None] + b[:, None, None]
    check(f, [x, g, b, mu, var], ref.astype("float32"), rtol=1e-5, atol=1e-5)


def test_nn_errors():
    A = td.placeholder((4, 5), name="A")
    with pytest.raises(ShapeError, match="reduction dimension"):
        ops.matmul(A, td.placeholder((6, 3), name="B"))
    with pytest.raises(ShapeError):
        ops.conv2d(td.placeholder((1, 6, 5, 5), name="D"), td.placeholder((4, 4, 3, 3), name="W"),
                   groups=4)
    with pytest.raises(ShapeError, match="larger than the padded"):
        ops.conv2d(td.placeholder((1, 2, 2, 2), name="D"), td.placeholder((4, 2, 3, 3), name="W"))
    with pytest.raises(DTypeError):
        ops.softmax(td.placeholder((4, 5), "int32", name="I"))
    with pytest.raises(ShapeError):
        ops.layernorm(A, td.placeholder((4,), name="G"))
    with pytest.raises(ShapeError):
        ops.pool2d(td.placeholder((1, 2, 4, 4), name="D"), 2, pool_type="median")


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_conv2d_every_dimension_symbolic(layout):
    n, c, h, w, co = (td.var(v) for v in ("n", "c", "h", "w", "co"))
    D = td.placeholder((n, c, h, w) if layout == "NCHW" else (n, h, w, c), name="D")
    W = td.placeholder((co, c, 3, 3) if layout == "NCHW" else (3, 3, c, co), name="W")
    out = ops.conv2d(D, W, stride=2, padding=1, layout=layout, kernel_layout="OIHW" if layout == "NCHW" else "HWIO")
    f = build(out, [D, W])
    for shape, cout in (((1, 3, 5, 4), 2), ((2, 5, 9, 12), 37)):
        x, wt = randn(*shape), randn(cout, shape[1], 3, 3)
        ref = H.conv2d_nchw(x, wt, (2, 2), (1, 1, 1, 1))
        if layout == "NCHW":
            check(f, [x, wt], ref, rtol=1e-4, atol=1e-4)
        else:
            check(f, [x.transpose(0, 2, 3, 1).copy(), wt.transpose(2, 3, 1, 0).copy()],
                  ref.transpose(0, 2, 3, 1).copy(), rtol=1e-4, atol=1e-4)
