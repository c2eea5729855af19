"""Default fusion: elementwise epilogues run inside the matmul / conv2d tiles (one pass over
the output, no full-size intermediate), conv2d + batch-norm folds into one convolution, and
row reductions run inside the row loop that consumes them.  Counted in the lowered IR."""
from __future__ import annotations

import numpy as np
import pytest

import tdsl as td
from tdsl import ops

from . import helpers as H
from .helpers import check, randn
from .ir_count import (allocations, calls, const_size, loads_of, root_nests, stores_to,
                       variants)


def lower(outs, args, target="llvm"):
    s = ops.schedule(outs, target)
    return s, td.lower(s, args)


def assert_no_full_size_intermediate(func, out_elems: int) -> None:
    """Only tiles and panels: no buffer as large as the output (the register tile of the
    anchor is a few hundred elements)."""
    sizes = {name: const_size(a.buffer) for name, a in allocations(func).items()}
    for name, size in sizes.items():
        assert size is not None and size < out_elems, f"intermediate '{name}' has {size} elements"
    assert any(size <= 512 for name, size in sizes.items() if name.endswith(".local") or "local" in
               str(allocations(func)[name].buffer.scope)), sizes


def test_dense_bias_relu_is_one_kernel_one_pass():
    X = td.placeholder((128, 96), name="X")
    W = td.placeholder((80, 96), name="W")
    b = td.placeholder((80,), name="b")
    y = ops.dense(X, W, b, activation="relu")
    s, func = lower(y, [X, W, b, y])
    assert len(root_nests(func)) == 1                      # one kernel
    assert stores_to(func, y.name) == 1                    # the output is written once...
    assert loads_of(func, y.name) == 0                     # ...and never read back
    assert_no_full_size_intermediate(func, 128 * 80)      # only tiles and the packed panel
    f = td.build(s, [X, W, b, y])
    x, w, bb = randn(128, 96), randn(80, 96), randn(80)
    check(f, [x, w, bb], np.maximum(x @ w.T + bb, 0), rtol=1e-4, atol=1e-4)


def test_matmul_elementwise_chain_fuses():
    n = td.var("n")
    A = td.placeholder((n, 40), name="A")
    B = td.placeholder((40, 50), name="B")
    C = td.placeholder((n, 50), name="C")
    mm = ops.matmul(A, B)
    y = ops.tanh(ops.multiply(ops.add(mm, C), 0.5))
    s, func = lower(y, [A, B, C, y])
    for nest in variants(func):        # symbolic M: the small-M nests and the tiled one
        assert len(root_nests(nest)) == 1
        assert stores_to(nest, y.name) == 1 and loads_of(nest, y.name) == 0
    f = td.build(s, [A, B, C, y])
    for rows in (1, 13):
        a, b, c = randn(rows, 40), randn(40, 50), randn(rows, 50)
        check(f, [a, b, c], np.tanh((a @ b + c) * 0.5), rtol=1e-4, atol=1e-5)


def test_matmul_with_two_consumers_is_not_fused_but_correct():
    A = td.placeholder((20, 30), name="A")
    B = td.placeholder((30, 40), name="B")
    mm = ops.matmul(A, B)
    y1, y2 = ops.relu(mm), ops.exp(ops.multiply(mm, 0.01))
    s, func = lower([y1, y2], [A, B, y1, y2])
    assert len(root_nests(func)) == 3     # the matmul, then each consumer
    f = td.build(s, [A, B, y1, y2])
    a, b = randn(20, 30), randn(30, 40)
    check(f, [a, b], [np.maximum(a @ b, 0), np.exp((a @ b) * 0.01)], rtol=1e-4, atol=1e-5)


def test_batch_matmul_epilogue_fuses():
    A = td.placeholder((3, 16, 24), name="A")
    B = td.placeholder((3, 24, 40), name="B")
    y = ops.sigmoid(ops.batch_matmul(A, B))
    s, func = lower(y, [A, B, y])
    assert len(root_nests(func)) == 1 and stores_to(func, y.name) == 1
    f = td.build(s, [A, B, y])
    a, b = randn(3, 16, 24), randn(3, 24, 40)
    check(f, [a, b], 1 / (1 + np.exp(-(a @ b))), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_conv2d_bias_bn_relu_is_one_conv_pass(layout):
    shape = (1, 8, 12, 12) if layout == "NCHW" else (1, 12, 12, 8)
    wshape = (16, 8, 3, 3) if layout == "NCHW" else (3, 3, 8, 16)
    D = td.placeholder(shape, name="D")
    W = td.placeholder(wshape, name="W")
    b = td.placeholder((16,), name="b")
    P = [td.placeholder((16,), name=nm) for nm in ("gamma", "beta", "mean", "var")]
    conv = ops.conv2d(D, W, padding=1, bias=b, layout=layout)
    y = ops.relu(ops.batch_norm(conv, *P, axis=1 if layout == "NCHW" else 3))
    s, func = lower(y, [D, W, b, *P, y])
    nests = root_nests(func)
    assert len(nests) == 2                   # the padded input, then the fused convolution
    assert stores_to(nests[1], y.name) == 1 and loads_of(func, y.name) == 0
    assert_no_full_size_intermediate(nests[1], 16 * 12 * 12)
    f = td.build(s, [D, W, b, *P, y])
    x, w, bb = randn(1, 8, 12, 12), randn(16, 8, 3, 3), randn(16)
    g, be, mu, var = randn(16), randn(16), randn(16), np.abs(randn(16)) + 0.5
    ref = H.conv2d_nchw(x, w, padding=(1, 1, 1, 1)) + bb[:, None, None]
    ref = np.maximum((ref - mu[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5) * g[:, None, None]
                     + be[:, None, None], 0).astype("float32")
    if layout == "NHWC":
        x, w, ref = x.transpose(0, 2, 3, 1).copy(), w.transpose(2, 3, 1, 0).copy(), \
            ref.transpose(0, 2, 3, 1).copy()
    check(f, [x, w, bb, g, be, mu, var], ref, rtol=1e-4, atol=1e-4)


def test_fold_batch_norm_removes_the_normalization():
    D = td.placeholder((2, 6, 9, 9), name="D")
    W = td.placeholder((10, 6, 3, 3), name="W")
    b = td.placeholder((10,), name="b")
    P = [td.placeholder((10,), name=nm) for nm in ("gamma", "beta", "mean", "var")]
    unfolded = ops.batch_norm(ops.conv2d(D, W, padding=1, bias=b), *P)
    folded = ops.conv2d(D, W, padding=1, bias=b)
    s_u, f_u = lower(unfolded, [D, W, b, *P, unfolded])
    s_f, f_f = lower(folded, [D, W, b, folded])
    assert calls(f_u, "rsqrt") == 1 and calls(f_f, "rsqrt") == 0
    assert len(root_nests(f_f)) == len(root_nests(f_u)) == 2
    x, w, bb = randn(2, 6, 9, 9), randn(10, 6, 3, 3), randn(10)
    g, be, mu, var = randn(10), randn(10), randn(10), np.abs(randn(10)) + 0.5
    w2, b2 = ops.fold_batch_norm(w, bb, g, be, mu, var)
    y_u = H.run(td.build(s_u, [D, W, b, *P, unfolded]), [x, w, bb, g, be, mu, var],
                [np.empty((2, 10, 9, 9), "float32")])[0]
    y_f = H.run(td.build(s_f, [D, W, b, folded]), [x, w2, b2], [np.empty((2, 10, 9, 9), "float32")])[0]
    np.testing.assert_allclose(y_f, y_u, rtol=1e-4, atol=1e-4)


def test_fold_batch_norm_hwio_and_no_bias():
    w = randn(3, 3, 4, 7)
    g, be, mu, var = randn(7), randn(7), randn(7), np.abs(randn(7)) + 0.1
    w2, b2 = ops.fold_batch_norm(w, None, g, be, mu, var, eps=1e-3, kernel_layout="HWIO")
    scale = g / np.sqrt(var + 1e-3)
    np.testing.assert_allclose(w2, w * scale, rtol=1e-6)
    np.testing.assert_allclose(b2, be - mu * scale, rtol=1e-5, atol=1e-6)


def test_softmax_runs_row_by_row_in_one_nest():
    X = td.placeholder((32, 100), name="X")
    y = ops.softmax(X)
    s, func = lower(y, [X, y])
    nests = root_nests(func)
    assert len(nests) == 1 and nests[0].kind.value == "parallel"
    for name, a in allocations(func).items():       # per-row temporaries only
        assert const_size(a.buffer) <= 100, name
    assert calls(func, "exp") == 1                   # exp computed once per element
    f = td.build(s, [X, y])
    x = randn(32, 100)
    check(f, [x], H.softmax(x, -1), rtol=1e-5, atol=1e-7)


def test_layernorm_is_one_nest():
    X = td.placeholder((16, 64), name="X")
    G = td.placeholder((64,), name="G")
    B = td.placeholder((64,), name="B")
    y = ops.layernorm(X, G, B)
    s, func = lower(y, [X, G, B, y])
    assert len(root_nests(func)) == 1


def test_cuda_dense_epilogue_is_one_kernel():
    X = td.placeholder((32, 64), name="X")
    W = td.placeholder((48, 64), name="W")
    b = td.placeholder((48,), name="b")
    y = ops.dense(X, W, b, activation="relu")
    s = ops.schedule(y, "cuda")
    try:
        src = td.build(s, [X, W, b, y], target="cuda").get_source()
    except Exception as e:   # the CUDA backend may be unavailable on this machine
        pytest.skip(f"CUDA backend unavailable: {e}")
    assert src.count("__global__") == 1


@pytest.mark.parametrize("target, c, size", [("llvm", 64, 56), ("cuda", 8, 10)])
def test_two_convolutions_of_one_padded_input(target, c, size):
    """Two ``ops.conv2d`` of one ``ops.pad`` output: each anchor's schedule took the pad for
    its own and moved it into its tasks (CPU: row chunks, from a 512 KiB image on) or its
    kernel's fetch (CUDA), and the second failed to schedule it ("loop 'i3' was already
    split"); a shared pad is now left to both."""
    from tdsl.testing.reference import conv2d_nchw
    x = td.placeholder((1, c, size, size), name="x")
    w1 = td.placeholder((2 * c, c, 3, 3), name="w1")
    w2 = td.placeholder((c + c // 2, c, 3, 3), name="w2")
    xp = ops.pad(x, [0, 0, 1, 1], [0, 0, 1, 1])
    c1, c2 = ops.conv2d(xp, w1, stride=2), ops.conv2d(xp, w2, stride=2)
    mod = td.build(ops.schedule([c1, c2], target), [x, w1, w2, c1, c2], target=target)
    xa, a1, a2 = randn(1, c, size, size), randn(2 * c, c, 3, 3), randn(c + c // 2, c, 3, 3)
    o1 = np.zeros((1, 2 * c, size // 2, size // 2), "f4")
    o2 = np.zeros((1, c + c // 2, size // 2, size // 2), "f4")
    (mod.emulate if target == "cuda" else mod)(xa, a1, a2, o1, o2)
    np.testing.assert_allclose(o1, conv2d_nchw(xa, a1, (2, 2), (1,) * 4), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(o2, conv2d_nchw(xa, a2, (2, 2), (1,) * 4), rtol=1e-4, atol=1e-3)
