"""Pointwise (1x1, stride 1) convolutions rewritten to batched GEMMs (``passes.pointwise``):
the epilogue (bias, folded batch norm, ReLU6, residual add) fused into the GEMM kernel, the
reshapes free views, results equal to PyTorch's; only where ``gemm_pays``."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tdsl as td
from tdsl.graph import compile_graph
from tdsl.graph.builder import Builder
from tdsl.graph.passes import optimize, pointwise

from .helpers import bn_params, close, rand, t


@pytest.fixture
def always_gemm(monkeypatch):
    """Every pointwise convolution to the GEMM, whatever its size (the rule's thresholds
    would keep the tests' small shapes as convolutions)."""
    monkeypatch.setattr(pointwise, "GEMM_MIN_HW", 1)
    monkeypatch.setattr(pointwise, "GEMM_ANY_CIN_HW", 1)


def conv(b, x, w, bias=None, stride=1, pad=0):
    ins = [x, b.const(w)] + ([b.const(bias)] if bias is not None else [])
    return b.op("conv2d", *ins, stride=(stride, stride), padding=(pad,) * 4, dilation=(1, 1),
                groups=1)


def kernel_ops(cg):
    return [ops for _, ops in cg.report.fused]


SHAPES = [(16, 96, 13, 13), (24, 144, 7, 9), (3, 5, 1, 1)]


@pytest.mark.parametrize("ci,co,h,w", SHAPES)
def test_bn_relu6_residual_fuse_into_one_gemm_kernel(rng, always_gemm, ci, co, h, w):
    n = td.var("n")
    b = Builder()
    x = b.input((n, ci, h, w), name="x")
    r = b.input((n, co, h, w), name="r")
    wt, bias, p = rand(rng, co, ci, 1, 1), rand(rng, co), bn_params(rng, co)
    y = conv(b, x, wt, bias)
    y = b.op("batch_norm", y, *map(b.const, p), eps=1e-5, axis=1)
    y = b.op("clamp", y, min=0.0, max=6.0)
    b.output(b.op("add", y, r))
    cg = compile_graph(b.graph)
    # one kernel, the GEMM with its whole epilogue; the reshapes are aliases (no copies)
    assert kernel_ops(cg) == [["matmul", "batch_norm(folded)", "add", "clamp", "add"]]
    assert cg.report.passes.pointwise_gemms == 1 and not cg.report.notes
    gm, bt, mu, vr = map(t, p)
    for nb in (1, 3, 8):
        xa, ra = rand(rng, nb, ci, h, w), rand(rng, nb, co, h, w)
        ref = F.batch_norm(F.conv2d(t(xa), t(wt), t(bias)), mu, vr, gm, bt, eps=1e-5)
        close(cg(xa, ra)[0], F.relu6(ref) + t(ra))


@pytest.mark.parametrize("ci,co,h,w", SHAPES)
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("epilogue", ["none", "bias", "bias_relu6"])
def test_static_batch_matches_torch(rng, always_gemm, ci, co, h, w, batch, epilogue):
    b = Builder()
    x = b.input((batch, ci, h, w), name="x")
    wt, bias = rand(rng, co, ci, 1, 1), rand(rng, co)
    y = conv(b, x, wt, bias if epilogue != "none" else None)
    if epilogue == "bias_relu6":
        y = b.op("clamp", y, min=0.0, max=6.0)
    b.output(y)
    cg = compile_graph(b.graph)
    assert kernel_ops(cg)[0][0] == "matmul" and cg.report.kernels == 1
    def ref(xa):
        r = F.conv2d(t(xa), t(wt), t(bias) if epilogue != "none" else None)
        return F.relu6(r) if epilogue == "bias_relu6" else r

    x1, x2 = rand(rng, batch, ci, h, w), rand(rng, batch, ci, h, w)
    o1 = cg(x1)[0]
    close(cg(x2)[0], ref(x2))
    close(o1, ref(x1))      # the output (a view of the GEMM's) is fresh per call


def test_operand_that_does_not_follow_the_merge_stays_correct(rng, always_gemm):
    """An operand broadcast along H only (``(1, 1, h, 1)``) cannot be laid on ``h * w``:
    the reshape stays above the add, which then runs on NCHW."""
    b = Builder()
    x = b.input((2, 8, 5, 6), name="x")
    wt, row = rand(rng, 12, 8, 1, 1), rand(rng, 1, 1, 5, 1)
    b.output(b.op("add", conv(b, x, wt), b.const(row)))
    cg = compile_graph(b.graph)
    assert kernel_ops(cg)[0] == ["matmul"]
    xa = rand(rng, 2, 8, 5, 6)
    close(cg(xa)[0], F.conv2d(t(xa), t(wt)) + t(row))


@pytest.mark.parametrize("ci,co,h,stride,pad,expect", [
    (16, 96, 112, 1, 0, "matmul"),     # large plane: the GEMM
    (144, 24, 56, 1, 0, "matmul"),     # 56 x 56: the GEMM whatever ci
    (32, 192, 28, 1, 0, "matmul"),     # few input channels: the GEMM
    (144, 32, 28, 1, 0, "conv2d"),     # measured faster as a convolution
    (96, 48, 7, 1, 0, "conv2d"),       # 7 x 7: the convolution
    (64, 128, 56, 2, 0, "conv2d"),     # strided (ResNet's downsample): not pointwise here
    (16, 32, 56, 1, 1, "conv2d"),      # padded
])
def test_rule_picks_the_gemm_only_where_it_pays(ci, co, h, stride, pad, expect):
    rng = np.random.default_rng(1)
    b = Builder()
    x = b.input((1, ci, h, h), name="x")
    b.output(b.op("relu", conv(b, x, rand(rng, co, ci, 1, 1), rand(rng, co), stride, pad)))
    g, stats = optimize(b.graph)
    anchors = [n.op for n in g.nodes if n.op in ("matmul", "conv2d")]
    assert anchors == [expect]
    assert stats.pointwise_gemms == (expect == "matmul")


def test_grouped_and_non_constant_weights_stay_convolutions(rng, always_gemm):
    b = Builder()
    x = b.input((1, 8, 6, 6), name="x")
    wv = b.input((4, 8, 1, 1), name="w")
    y = b.op("conv2d", x, b.const(rand(rng, 8, 4, 1, 1)), stride=(1, 1),
             padding=(0,) * 4, dilation=(1, 1), groups=2)
    z = b.op("conv2d", x, wv, stride=(1, 1), padding=(0,) * 4, dilation=(1, 1), groups=1)
    b.output(y)
    b.output(z)
    cg = compile_graph(b.graph)
    assert cg.report.passes.pointwise_gemms == 0
    assert all("matmul" not in ops for ops in kernel_ops(cg))


def test_mobilenet_v2_through_tdsl_compile(always_gemm):
    """MobileNetV2 (tiny) with every pointwise convolution as a GEMM, a symbolic batch:
    equal to eager at batch 1, 3 and 8."""
    from tdsl.testing import models
    model, (x,) = models.make("mobilenet_v2", "tiny", batch=2)
    cm = td.compile(model, (x,), dynamic={0: "batch"}, options={"num_threads": 1})
    rep = cm.report.graph
    assert rep.passes.pointwise_gemms >= 3 and not rep.notes
    kernels = [ops for _, ops in rep.fused]
    # (a GEMM after an NHWC depthwise reads its transpose in place: fusion rule 5)
    gemms = [ops for ops in kernels if "matmul" in ops]
    assert len(gemms) == rep.passes.pointwise_gemms
    assert all("batch_norm(folded)" in ops for ops in gemms)
    assert not any(ops == ["reshape"] for ops in kernels)     # no reshape copies
    g = torch.Generator().manual_seed(3)
    for nb in (1, 3, 8):
        xb = torch.randn(nb, *x.shape[1:], generator=g)
        with torch.no_grad():
            close(cm(xb), model(xb))
