"""``tvm.topi.testing``: the NumPy references TVM's operator tests compare against
(convolutions in the NCHW, NHWC and HWCN layouts, softmax, log_softmax)."""
from __future__ import annotations

from typing import Any

import numpy as np

from tdsl.errors import TDSLError
from tdsl.testing.reference import conv2d_nchw

from ._args import pad4, pair


def _pair(v: Any, what: str) -> tuple[int, int]:
    return pair(v, what, "topi.testing")


def _padding(padding: Any, kh: int, kw: int) -> tuple[int, int, int, int]:
    return pad4(padding, kh, kw, "topi.testing")


def conv2d_nchw_python(a_np: np.ndarray, w_np: np.ndarray, stride: Any, padding: Any,
                       groups: int = 1) -> np.ndarray:
    """Convolution of ``a_np`` (N, C, H, W) with ``w_np`` (O, C // groups, KH, KW)."""
    c = a_np.shape[1]
    o, cg, kh, kw = w_np.shape
    sh, sw = _pair(stride, "stride")
    top, left, bottom, right = _padding(padding, kh, kw)
    if c != cg * groups or o % groups:
        raise TDSLError(f"conv2d_nchw_python: {c} input channels, weights {w_np.shape} and "
                        f"groups={groups} do not match")
    return conv2d_nchw(a_np, w_np, (sh, sw), (top, left, bottom, right), groups=groups)


def conv2d_nhwc_python(a_np: np.ndarray, w_np: np.ndarray, stride: Any, padding: Any,
                       groups: int = 1) -> np.ndarray:
    """``a_np`` (N, H, W, C), ``w_np`` (KH, KW, C // groups, O): the result is (N, OH, OW, O)."""
    out = conv2d_nchw_python(a_np.transpose(0, 3, 1, 2), w_np.transpose(3, 2, 0, 1), stride,
                             padding, groups)
    return out.transpose(0, 2, 3, 1)


def conv2d_hwcn_python(a_np: np.ndarray, w_np: np.ndarray, stride: Any,
                       padding: Any) -> np.ndarray:
    """``a_np`` (H, W, C, N), ``w_np`` (KH, KW, C, O): the result is (OH, OW, O, N)."""
    out = conv2d_nchw_python(a_np.transpose(3, 2, 0, 1), w_np.transpose(3, 2, 0, 1), stride,
                             padding)
    return out.transpose(2, 3, 1, 0)


def softmax_python(a_np: np.ndarray, axis: int = 1) -> np.ndarray:
    """Softmax over ``axis`` (TVM's reference takes 2-d input and axis 1)."""
    e = np.exp(a_np - np.max(a_np, axis=axis, keepdims=True))
    return (e / np.sum(e, axis=axis, keepdims=True)).astype(a_np.dtype)


def log_softmax_python(a_np: np.ndarray, axis: int = 1) -> np.ndarray:
    """Log of the softmax over ``axis``."""
    shifted = a_np - np.max(a_np, axis=axis, keepdims=True)
    return (shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))
            ).astype(a_np.dtype)


__all__ = ["conv2d_nchw_python", "conv2d_nhwc_python", "conv2d_hwcn_python", "softmax_python",
           "log_softmax_python"]
