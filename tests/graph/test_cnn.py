"""Convolutional graphs against PyTorch: conv + BN + ReLU, grouped/depthwise/strided
convolutions, residual blocks, pooling."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tdsl as td
from tdsl.graph import compile_graph
from tdsl.graph.builder import Builder

from .helpers import bn_params, close, rand, t


def conv(b, x, w, stride=1, pad=0, groups=1, bias=None):
    ins = [x, b.const(w)] + ([b.const(bias)] if bias is not None else [])
    return b.op("conv2d", *ins, stride=(stride, stride), padding=(pad,) * 4, dilation=(1, 1),
                groups=groups)


def test_conv_bn_relu_folds_and_matches(rng):
    b = Builder()
    x = b.input((2, 3, 11, 13), name="x")
    w, bias = rand(rng, 8, 3, 3, 3), rand(rng, 8)
    g, beta, mean, var = bn_params(rng, 8)
    y = conv(b, x, w, pad=1, bias=bias)
    y = b.op("batch_norm", y, *map(b.const, (g, beta, mean, var)), eps=1e-5, axis=1)
    b.output(b.op("relu", y))
    cg = compile_graph(b.graph)
    assert not any(n.op == "batch_norm" for n in cg.optimized.nodes)
    assert cg.report.kernels == 1
    assert cg.report.fused[0][1] == ["conv2d", "batch_norm(folded)", "relu"]
    xa = rand(rng, 2, 3, 11, 13)
    ref = F.relu(F.batch_norm(F.conv2d(t(xa), t(w), t(bias), padding=1), t(mean), t(var),
                              t(g), t(beta), eps=1e-5))
    close(cg(xa)[0], ref)


@pytest.mark.parametrize("cin,cout,groups,stride,pad,hw", [
    (8, 8, 8, 1, 1, (9, 10)),      # depthwise
    (8, 16, 8, 2, 1, (13, 11)),    # depthwise, multiplier 2, strided
    (6, 9, 3, 2, 0, (12, 9)),      # grouped, strided
    (5, 7, 1, 2, 2, (15, 14)),     # strided, padded, sizes off every tile
])
def test_grouped_depthwise_strided_conv(rng, cin, cout, groups, stride, pad, hw):
    b = Builder()
    x = b.input((2, cin, *hw), name="x")
    w = rand(rng, cout, cin // groups, 3, 3)
    g, beta, mean, var = bn_params(rng, cout)
    y = conv(b, x, w, stride, pad, groups)
    y = b.op("batch_norm", y, *map(b.const, (g, beta, mean, var)), eps=1e-3, axis=1)
    b.output(b.op("clamp", y, min=0.0, max=6.0))
    cg = compile_graph(b.graph)
    xa = rand(rng, 2, cin, *hw)
    ref = F.conv2d(t(xa), t(w), stride=stride, padding=pad, groups=groups)
    ref = F.relu6(F.batch_norm(ref, t(mean), t(var), t(g), t(beta), eps=1e-3))
    close(cg(xa)[0], ref)


def test_residual_block_with_symbolic_batch(rng):
    n = td.var("n")
    b = Builder()
    x = b.input((n, 8, 9, 9), name="x")
    w1, w2 = rand(rng, 8, 8, 3, 3) * 0.3, rand(rng, 8, 8, 3, 3) * 0.3
    p1, p2 = bn_params(rng, 8), bn_params(rng, 8)
    y = conv(b, x, w1, pad=1)
    y = b.op("relu", b.op("batch_norm", y, *map(b.const, p1), eps=1e-5, axis=1))
    y = conv(b, y, w2, pad=1)
    y = b.op("batch_norm", y, *map(b.const, p2), eps=1e-5, axis=1)
    b.output(b.op("relu", b.op("add", y, x)))
    cg = compile_graph(b.graph)
    assert cg.report.kernels == 2
    assert cg.report.fused[1][1] == ["conv2d", "batch_norm(folded)", "add", "relu"]

    def ref(xa):
        def cbn(z, w, p):
            gm, bt, mu, vr = map(t, p)
            return F.batch_norm(F.conv2d(z, t(w), padding=1), mu, vr, gm, bt, eps=1e-5)
        xt = t(xa)
        return F.relu(cbn(F.relu(cbn(xt, w1, p1)), w2, p2) + xt)
    for batch in (1, 3, 8, 17):
        xa = rand(rng, batch, 8, 9, 9)
        close(cg(xa)[0], ref(xa))
    assert len(cg._plans) == 4


@pytest.mark.parametrize("kind,kw", [
    ("max_pool2d", dict(kernel=(3, 3), stride=(2, 2), padding=(1, 1, 1, 1), dilation=(1, 1),
                        ceil_mode=False)),
    ("max_pool2d", dict(kernel=(3, 3), stride=(2, 2), padding=(0, 0, 0, 0), dilation=(1, 1),
                        ceil_mode=True)),
    ("avg_pool2d", dict(kernel=(3, 3), stride=(2, 2), padding=(1, 1, 1, 1), ceil_mode=True,
                        count_include_pad=False)),
    ("adaptive_avg_pool2d", dict(output_size=(1, 1))),
    ("adaptive_avg_pool2d", dict(output_size=(3, 4))),
])
def test_pooling(rng, kind, kw):
    b = Builder()
    x = b.input((2, 5, 11, 10), name="x")
    y = b.op(kind, b.op("relu", x), **kw)
    b.output(b.op("mul", y, b.scalar(2.0)))
    cg = compile_graph(b.graph)
    assert cg.report.kernels == 1
    xa = rand(rng, 2, 5, 11, 10)
    xt = F.relu(t(xa))
    if kind == "max_pool2d":
        ref = F.max_pool2d(xt, 3, 2, kw["padding"][0], ceil_mode=kw["ceil_mode"])
    elif kind == "avg_pool2d":
        ref = F.avg_pool2d(xt, 3, 2, 1, ceil_mode=True, count_include_pad=False)
    else:
        ref = F.adaptive_avg_pool2d(xt, kw["output_size"])
    close(cg(xa)[0], ref * 2)


def test_repeated_blocks_build_once(rng):
    b = Builder()
    x = b.input((1, 8, 7, 7), name="x")
    y = x
    for _ in range(3):
        y = b.op("relu", conv(b, y, rand(rng, 8, 8, 3, 3) * 0.3, pad=1, bias=rand(rng, 8)))
    b.output(y)
    cg = compile_graph(b.graph)
    assert cg.report.kernels == 3
    assert cg.report.built <= 1      # same structure: one build (maybe cached earlier)
    assert len(cg.tasks()) == 1 and cg.tasks()[0][2] == 3
