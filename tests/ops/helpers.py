"""Shared helpers for the operator tests: build with the default schedule, run, compare,
and NumPy references for the operators NumPy lacks (conv2d, pooling)."""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

import tdsl as td
from tdsl import ops
from tdsl.testing.reference import conv2d_nchw  # noqa: F401  (the tests import it from here)

RNG = np.random.default_rng(20240607)

try:
    import torch
    torch.set_num_threads(1)
except ImportError:  # PyTorch is an optional second reference
    torch = None


def build(outs: Any, ins: Sequence[Any], target: str = "llvm") -> Any:
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    s = ops.schedule(outs, target)
    return td.build(s, list(ins) + outs, target=target)


def run(f: Any, arrays: Sequence[np.ndarray], expected: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Call ``f`` on ``arrays`` plus output arrays shaped like ``expected`` (filled with junk,
    so a kernel that skips elements fails)."""
    outs = [np.full(e.shape, 7, dtype=e.dtype) for e in expected]
    f(*arrays, *outs)
    return outs


def check(f: Any, arrays: Sequence[np.ndarray], expected: Any, rtol: float = 1e-5,
          atol: float = 1e-5) -> None:
    expected = list(expected) if isinstance(expected, (list, tuple)) else [expected]
    expected = [np.asarray(e) for e in expected]
    got = run(f, arrays, expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape
        if e.dtype.kind in "iub":
            np.testing.assert_array_equal(g, e)
        else:
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)


def nhwc_conv(n: Any, c: int, co: int, hw: int, k: int = 3, stride: int = 1, pad: int = 1,
              dilation: int = 1, bias: bool = False, act: "str | None" = None) -> list:
    """``[X, W, (B,) Y]``: an ``ops.conv2d`` with NHWC data and an HWIO filter."""
    X = td.placeholder((n, hw, hw, c), name="X")
    W = td.placeholder((k, k, c, co), name="W")
    B = td.placeholder((co,), name="B") if bias else None
    Y = ops.conv2d(X, W, stride=stride, padding=pad, dilation=dilation, layout="NHWC",
                   kernel_layout="HWIO", bias=B, activation=act)
    return [t for t in (X, W, B, Y) if t is not None]


def torch_conv_nhwc(xa: np.ndarray, wa: np.ndarray, stride: int, pad: int, dilation: int = 1,
                    ba: "np.ndarray | None" = None, act: "str | None" = None) -> np.ndarray:
    """PyTorch's conv2d (+ ReLU) of NHWC data and an HWIO filter, as NHWC."""
    y = torch.nn.functional.conv2d(torch.from_numpy(xa).permute(0, 3, 1, 2),
                                   torch.from_numpy(wa).permute(3, 2, 0, 1),
                                   None if ba is None else torch.from_numpy(ba),
                                   stride=stride, padding=pad, dilation=dilation)
    if act == "relu":
        y = torch.relu(y)
    return y.permute(0, 2, 3, 1).contiguous().numpy()


def randn(*shape: int, dtype: str = "float32") -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def randint(lo: int, hi: int, *shape: int, dtype: str = "int32") -> np.ndarray:
    return RNG.integers(lo, hi, shape).astype(dtype)


# ---- NumPy references ----------------------------------------------------------------------
def erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x.astype(np.float64))


def pool2d_nchw(x: np.ndarray, kernel, stride, padding, pool_type: str, ceil_mode: bool = False,
                count_include_pad: bool = True, dilation=(1, 1)) -> np.ndarray:
    """Reference pooling with PyTorch's rules (output size, padding, divisor)."""
    kh, kw = kernel
    sh, sw = stride
    pt, pl, pb, pr = padding
    dh, dw = dilation
    n, c, h, w = x.shape

    def osize(size, k, s, b, a, d):
        span = size + b + a - d * (k - 1) - 1
        o = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (o - 1) * s >= size + b:
            o -= 1
        return o
    oh, ow = osize(h, kh, sh, pt, pb, dh), osize(w, kw, sw, pl, pr, dw)
    out = np.zeros((n, c, oh, ow), dtype=np.float64)
    for i in range(oh):
        for j in range(ow):
            ys = [i * sh - pt + a * dh for a in range(kh)]
            xs = [j * sw - pl + b * dw for b in range(kw)]
            vy = [y for y in ys if 0 <= y < h]
            vx = [x_ for x_ in xs if 0 <= x_ < w]
            win = x[:, :, vy][:, :, :, vx].astype(np.float64)
            if pool_type == "max":
                out[:, :, i, j] = win.max(axis=(2, 3))
            else:
                hs, ws = i * sh - pt, j * sw - pl
                he, we = min(hs + kh, h + pb), min(ws + kw, w + pr)
                if count_include_pad:
                    cnt = (he - hs) * (we - ws)
                else:
                    cnt = (min(he, h) - max(hs, 0)) * (min(we, w) - max(ws, 0))
                out[:, :, i, j] = win.sum(axis=(2, 3)) / cnt
    return out.astype(x.dtype)


def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


def layernorm(x: np.ndarray, g, b, axes, eps=1e-5) -> np.ndarray:
    x64 = x.astype(np.float64)
    mu = x64.mean(axis=axes, keepdims=True)
    var = ((x64 - mu) ** 2).mean(axis=axes, keepdims=True)
    y = (x64 - mu) / np.sqrt(var + eps)
    if g is not None:
        y = y * g
    if b is not None:
        y = y + b
    return y.astype(x.dtype)


def rmsnorm(x: np.ndarray, g, axes, eps=1e-5) -> np.ndarray:
    x64 = x.astype(np.float64)
    y = x64 / np.sqrt((x64 * x64).mean(axis=axes, keepdims=True) + eps)
    if g is not None:
        y = y * g
    return y.astype(x.dtype)
