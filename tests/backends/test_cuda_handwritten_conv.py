"""A convolution written by hand with ``td.compute`` gets the CUDA default of ``ops.conv2d``
(``cuda_conv_form.py``: recognized by ``recognize.conv_form``; its weights copied by a
cache stage laid out ``(ci, kh, kw, co)`` in the PACK stage's role, its padding fetched by
the kernel): the same kernel source but for names -- the SIMT implicit GEMM with its float4
fetches, split-K for a small grid, the tensor-core microkernel for fp16 -- and NumPy's
results under the emulator at sizes that do and don't divide the tiles, a symbolic batch,
no epilogue, and the forms it leaves to the generic schedule."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import tdsl as td
from tdsl import ops
from tdsl.ops.schedules.cuda_conv_form import padding_columns
from tests.backends.test_cuda_handwritten_gemm import TARGET, _statements

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")


def _padded(X, p):
    if not p:
        return X
    n, c, h, w = X.shape
    return td.compute((n, c, h + 2 * p, w + 2 * p), lambda a, b, y, x: td.if_then_else(
        td.all(y >= p, y < h + p, x >= p, x < w + p), X[a, b, y - p, x - p],
        td.const(0, X.dtype)), name="Xp")


def _hand(N, C, CO, HW, K, stride=1, pad=1, dt="float32", kernel_layout="OIHW",
          epilogue=True, order=("rc", "ry", "rx")):
    """``relu(conv2d(X, W) + b)`` written with ``td.compute`` (fp16: accumulated in fp32
    through casts); ``order``: the reduction's axes as listed to ``td.sum``."""
    X = td.placeholder((N, C, HW, HW), dt, name="X")
    W = td.placeholder((CO, C, K, K) if kernel_layout == "OIHW" else (K, K, C, CO), dt,
                       name="W")
    src = _padded(X, pad)
    OH = (HW + 2 * pad - K) // stride + 1
    axes = {"rc": td.reduce_axis((0, C), "rc"), "ry": td.reduce_axis((0, K), "ry"),
            "rx": td.reduce_axis((0, K), "rx")}
    rc, ry, rx = axes["rc"], axes["ry"], axes["rx"]

    def f32(e):
        return e if dt == "float32" else e.astype("float32")

    def body(n, co, y, x):      # ops.conv2d's names: the kernels' loop variables
        w = W[co, rc, ry, rx] if kernel_layout == "OIHW" else W[ry, rx, rc, co]
        return td.sum(f32(src[n, rc, y * stride + ry, x * stride + rx]) * f32(w),
                      axis=[axes[a] for a in order])
    conv = td.compute((N, CO, OH, OH), body, name="C_conv")
    if not epilogue:
        return [X, W, conv]
    b = td.placeholder((CO,), name="b")
    Y = td.compute(conv.shape, lambda i0, i1, i2, i3:      # the names ops' epilogue has
                   td.maximum(conv[i0, i1, i2, i3] + b[i1], 0.0), name="Y")
    return [X, W, b, Y]


def _tagged(N, C, CO, HW, K, stride=1, pad=1, dt="float32", kernel_layout="OIHW"):
    X = td.placeholder((N, C, HW, HW), dt, name="X")
    W = td.placeholder((CO, C, K, K) if kernel_layout == "OIHW" else (K, K, C, CO), dt,
                       name="W")
    b = td.placeholder((CO,), name="b")
    Y = ops.conv2d(X, W, stride=stride, padding=pad, kernel_layout=kernel_layout, bias=b,
                   activation="relu", out_dtype="float32")
    return [X, W, b, Y]


def _source(args) -> str:
    return td.build(ops.schedule(args[-1], TARGET), args, target=TARGET).get_source()


@pytest.mark.parametrize("case", [
    dict(N=2, C=32, CO=64, HW=28, K=3),                       # float4 rows and weights
    dict(N=2, C=16, CO=32, HW=15, K=3, stride=2),             # scalar rows, stride 2
    dict(N=1, C=64, CO=64, HW=14, K=3),                       # split-K: a small grid
    dict(N=2, C=16, CO=32, HW=16, K=1, pad=0),                # no padding stage
    dict(N=2, C=32, CO=64, HW=16, K=3, dt="float16"),         # the tensor-core microkernel
])
def test_gets_the_kernel_ops_gets(case):
    hand, tagged = _source(_hand(**case)), _source(_tagged(**case))
    assert _statements(hand) == _statements(tagged)
    if case.get("dt") == "float16":
        assert "tdsl_tc_gemm<" in hand
    elif case["HW"] % 4 == 0:
        assert "float4" in hand


def _run(args, arrays, ref, rtol=1e-4, atol=1e-4):
    f = td.build(ops.schedule(args[-1], TARGET), args, target=TARGET)
    out = np.full(ref.shape, np.nan, "float32")
    f.emulate(*arrays, out)
    np.testing.assert_allclose(out, ref, rtol=rtol, atol=atol)


def _reference(x, w, b, stride, pad, kernel_layout="OIHW"):
    torch = pytest.importorskip("torch")
    if kernel_layout == "HWIO":
        w = w.transpose(3, 2, 0, 1)
    y = torch.nn.functional.conv2d(torch.from_numpy(x.astype("float32")),
                                   torch.from_numpy(np.ascontiguousarray(w, "float32")),
                                   None if b is None else torch.from_numpy(b), stride, pad)
    return (y if b is None else torch.relu(y)).numpy()


@needs_gxx
@pytest.mark.parametrize("N, C, CO, HW, K, stride, pad, layout", [
    (1, 8, 16, 12, 3, 1, 1, "OIHW"),
    (2, 5, 20, 13, 3, 1, 1, "OIHW"),       # sizes that divide no tile
    (1, 6, 12, 11, 3, 2, 1, "HWIO"),
    (1, 9, 40, 9, 5, 1, 2, "OIHW"),
    (2, 4, 8, 7, 1, 1, 0, "OIHW"),
])
def test_matches_pytorch(N, C, CO, HW, K, stride, pad, layout):
    g = np.random.default_rng(N * 100 + C)
    x = g.standard_normal((N, C, HW, HW)).astype("float32")
    w = g.standard_normal((CO, C, K, K) if layout == "OIHW" else (K, K, C, CO)).astype("f4")
    b = g.standard_normal(CO).astype("float32")
    _run(_hand(N, C, CO, HW, K, stride, pad, kernel_layout=layout), [x, w, b],
         _reference(x, w, b, stride, pad, layout))


@needs_gxx
def test_a_symbolic_batch_and_no_epilogue():
    n = td.var("n")
    args = _hand(n, 6, 16, 10, 3, epilogue=False)
    s = ops.schedule(args[-1], TARGET)
    assert "W.global" in [st.op.name for st in s.stages]     # the PACK stage's role
    f = td.build(s, args, target=TARGET)
    g = np.random.default_rng(7)
    for batch in (1, 2, 3):
        x = g.standard_normal((batch, 6, 10, 10)).astype("float32")
        w = g.standard_normal((16, 6, 3, 3)).astype("float32")
        out = np.full((batch, 16, 10, 10), np.nan, "float32")
        f.emulate(x, w, out)
        np.testing.assert_allclose(out, _reference(x, w, None, 1, 1), rtol=1e-4, atol=1e-4)


@needs_gxx
def test_fp16_on_the_tensor_core_microkernel():
    args = _hand(2, 16, 24, 9, 3, dt="float16")
    assert "tdsl_tc_gemm<" in _source(args)
    g = np.random.default_rng(11)
    x = g.standard_normal((2, 16, 9, 9)).astype("float16")
    w = g.standard_normal((24, 16, 3, 3)).astype("float16")
    b = g.standard_normal(24).astype("float32")
    _run(args, [x, w, b], _reference(x, w, b, 1, 1), rtol=2e-3, atol=2e-3)


@needs_gxx
def test_another_reduction_order_keeps_the_generic_schedule():
    """``td.sum(..., axis=[ry, rx, rc])``: not the order the implicit GEMM's fetches take;
    the generic schedule, still NumPy's results."""
    args = _hand(1, 4, 8, 8, 3, order=("ry", "rx", "rc"))
    s = ops.schedule(args[-1], TARGET)
    assert "W.global" not in [st.op.name for st in s.stages]
    g = np.random.default_rng(13)
    x, w, b = (g.standard_normal(sh).astype("float32")
               for sh in ((1, 4, 8, 8), (8, 4, 3, 3), (8,)))
    _run(args, [x, w, b], _reference(x, w, b, 1, 1))


def test_padding_columns_reads_the_shift_of_the_padding():
    X = td.placeholder((1, 2, 5, 6), name="X")
    s = td.create_schedule(_padded(X, 2).op)
    assert padding_columns(s.stages[-1]) == 2
    odd = td.compute((1, 2, 5, 8), lambda a, b, y, x: X[a, b, y, x % 6] + X[a, b, y, 0],
                     name="odd")
    assert padding_columns(td.create_schedule(odd.op).stages[-1]) is None
