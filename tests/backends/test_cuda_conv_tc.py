"""fp16/bf16 NCHW conv2d with fp32 accumulation on sm_80+: an implicit GEMM on the
tensor-core microkernel (ops/schedules/cuda_tc_conv.py; the gathered B operand of
backends/cuda/tc_gemm.py and tc_kernel.py), run under the CPU emulator against PyTorch's
fp32 convolution of the same fp16/bf16-rounded inputs, and assembled by NVRTC."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import tdsl as td
from tdsl import ops
from tdsl.backends.cuda import nvrtc
from tests.workloads import half_dtype

torch = pytest.importorskip("torch")

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")
needs_nvrtc = pytest.mark.skipif(not nvrtc.is_available(),
                                 reason="NVRTC (cuda-python) is not installed")


def _rand(g, shape, dt):
    return (g.random(shape) - .5).astype(half_dtype(dt))


def _reference(d, w, stride, pad, bias=None, dilation=1):
    t = torch.nn.functional.conv2d(torch.tensor(d.astype("float32")),
                                   torch.tensor(w.astype("float32")),
                                   None if bias is None else torch.tensor(bias),
                                   stride=stride, padding=pad, dilation=dilation)
    return t.numpy()


def _conv(n, c, h, w, o, k, stride, pad, dt, target="cuda", **kw):
    D = td.placeholder((n, c, h, w), dt, name="D")
    W = td.placeholder((o, c, k, k), dt, name="W")
    extra = [td.placeholder((o,), "float32", name="bias")] if kw.get("bias") else []
    x = ops.relu(D) if kw.get("relu_input") else D
    C = ops.conv2d(x, W, stride=stride, padding=pad, bias=extra[0] if extra else None,
                   activation=kw.get("activation"), dilation=kw.get("dilation", 1),
                   out_dtype="float32")
    if kw.get("cast"):
        C = ops.cast(C, dt)
    args = [D, W, *extra, C]
    return td.build(ops.schedule(C, target), args, target=target), C


def _check_tc(src: str) -> None:
    """The tensor-core path ran: the microkernel with a gathered B."""
    assert "tdsl_tc_gemm<" in src and "tc_b_val" in src
    for ins in ("mma.sync.aligned.m16n8k16", "ldmatrix.sync.aligned", "cp.async.cg"):
        assert ins in src


@needs_gxx
@pytest.mark.parametrize("c,h,w,o,k,stride,pad,dt", [
    # C*9 = 45 (not a multiple of 32, nor 8: element-wise A fills), 99 pixels, 20 channels
    (5, 9, 11, 20, 3, 1, 1, "float16"),
    # stride 2, no padding, bf16; C*9 = 72 (aligned A rows: cp.async + a k tail)
    (8, 13, 12, 24, 3, 2, 0, "bfloat16"),
    # 1x1, stride 2, 130 pixels (two column tiles), 70 channels (two row tiles)
    (16, 20, 13, 70, 1, 2, 0, "float16"),
    # 3x3 pad 1: 144 pixels, K = 96 (three whole k tiles)
    (32, 12, 12, 16, 3, 1, 1, "float16"),
    # K = 135 and 216: past the pipeline's 3 prologue tiles, the main loop fetches the
    # gathered tiles a k tile ahead through registers (the last one partial at 135)
    (15, 10, 13, 20, 3, 1, 1, "float16"),
    (24, 9, 9, 40, 3, 1, 1, "bfloat16"),
])
def test_conv_matches_torch_with_symbolic_batch(c, h, w, o, k, stride, pad, dt):
    N = td.var("N")
    f, _ = _conv(N, c, h, w, o, k, stride, pad, dt)
    _check_tc(f.get_source())
    assert ", 64, 128, 32, 64, 4," in f.get_source()     # a symbolic batch: the 4-warp tile
    g = np.random.default_rng(c * 100 + o)
    wt = _rand(g, (o, c, k, k), dt)
    for n in (1, 3):
        d = _rand(g, (n, c, h, w), dt)
        ref = _reference(d, wt, stride, pad)
        out = np.full(ref.shape, np.nan, "float32")
        f.emulate(d, wt, out)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


@needs_gxx
def test_dilation_and_relu_input_in_the_gather():
    """Dilation 2 (the taps 2 apart) and a ReLU of the input inlined into the gather."""
    f, _ = _conv(2, 4, 11, 10, 8, 3, 1, 2, "float16", dilation=2, relu_input=True)
    _check_tc(f.get_source())
    assert ", 64, 64, 32, 64, 4," in f.get_source()      # 2 blocks: the 2-warp tile
    g = np.random.default_rng(13)
    d, wt = _rand(g, (2, 4, 11, 10), "float16"), _rand(g, (8, 4, 3, 3), "float16")
    ref = _reference(np.maximum(d, 0), wt, 1, 2, dilation=2)
    out = np.full(ref.shape, np.nan, "float32")
    f.emulate(d, wt, out)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


@needs_gxx
def test_bias_relu_and_cast_epilogue():
    """Bias and ReLU on the accumulator registers, then the cast to the input's dtype."""
    f, _ = _conv(2, 6, 10, 10, 12, 3, 1, 1, "float16", bias=True, activation="relu",
                 cast=True)
    src = f.get_source()
    _check_tc(src)
    assert "tdsl_f2h(" in src
    g = np.random.default_rng(11)
    d, wt = _rand(g, (2, 6, 10, 10), "float16"), _rand(g, (12, 6, 3, 3), "float16")
    b = g.standard_normal(12).astype("float32")
    out = np.zeros((2, 12, 10, 10), "float16")
    f.emulate(d, wt, b, out)
    ref = np.maximum(_reference(d, wt, 1, 1, b), 0).astype("float16")
    np.testing.assert_allclose(out.astype("float32"), ref.astype("float32"), rtol=2e-3,
                               atol=2e-3)


def test_tile_choice_fills_the_gpu():
    from tdsl.ops.schedules.cuda_tc_conv import CONFIG, SMALL, choose
    assert choose(1, 64, 56, 56) == SMALL          # 25 blocks of 64 x 128 -> 49 of 64 x 64
    assert choose(8, 64, 56, 56) == CONFIG         # 200 blocks
    assert choose(None, 64, 56, 56) == CONFIG      # a symbolic batch: planned as a large one
    assert SMALL.error() is None and CONFIG.error() is None


def test_other_convs_keep_the_simt_schedule():
    """fp32, fp16 accumulation, groups, HWIO weights, weights computed by an expression
    (inlined: A would not be a buffer), a one-deep reduction (1 channel, 1x1: no k loop)
    and sm < 80 keep today's default."""
    def src(dt="float16", target="cuda", groups=1, out_dtype="float32", kl=None,
            scaled=False, c=8, k=3):
        D = td.placeholder((1, c, 10, 10), dt, name="D")
        shape = (k, k, c // groups, 8) if kl == "HWIO" else (8, c // groups, k, k)
        W = td.placeholder(shape, dt, name="W")
        w = ops.multiply(W, W) if scaled else W
        C = ops.conv2d(D, w, padding=k // 2, groups=groups, out_dtype=out_dtype, kernel_layout=kl)
        return td.build(ops.schedule(C, target), [D, W, C], target=target).get_source()
    assert "tc_b_val" in src()
    for s in (src("float32", out_dtype=None), src(out_dtype=None), src(groups=2),
              src(kl="HWIO"), src(scaled=True), src(c=1, k=1), src(target="cuda -arch=sm_75")):
        assert "tdsl_tc_gemm" not in s


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_resnet_layer_assembles_without_spills(arch, dt):
    from tdsl.backends.cuda.cubin import ptxas_report
    for n, stride in ((1, 1), (td.var("N"), 2)):
        f, _ = _conv(n, 64, 56, 56, 64, 3, stride, 1, dt, f"cuda -arch={arch}")
        ptx = f.ptx(arch)
        kind = "bf16.bf16" if dt == "bfloat16" else "f16.f16"
        assert f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.f32" in ptx
        assert "ldmatrix.sync.aligned" in ptx and "cp.async.cg.shared.global" in ptx
        (rep,) = ptxas_report(f.get_source(), arch).values()
        assert rep.spill_stores == 0 and rep.spill_loads == 0, rep
