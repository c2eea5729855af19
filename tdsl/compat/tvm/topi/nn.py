"""``topi.nn``: neural-network operators with TVM's signatures, built by ``tdsl.ops``."""
from __future__ import annotations

from typing import Any

from tdsl import ops as _ops
from tdsl.errors import ArgumentError


def relu(x: Any) -> Any:
    return _ops.relu(x)


def leaky_relu(x: Any, alpha: float) -> Any:
    return _ops.leaky_relu(x, alpha)


def dense(data: Any, weight: Any, bias: Any = None, out_dtype: Any = None) -> Any:
    """``data`` (M, K) times ``weight`` (N, K) transposed, plus ``bias`` (N,)."""
    return _ops.dense(data, weight, bias, out_dtype=out_dtype)


def matmul(a: Any, b: Any, bias: Any = None, out_dtype: Any = None, transpose_a: bool = False,
           transpose_b: bool = False) -> Any:
    out = _ops.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b, out_dtype=out_dtype)
    return out if bias is None else _ops.add(out, bias)


def batch_matmul(x: Any, y: Any, oshape: Any = None, out_dtype: Any = None,
                 transpose_a: bool = False, transpose_b: bool = True) -> Any:
    """TVM's default: ``y`` is transposed (batch, N, K)."""
    return _ops.batch_matmul(x, y, transpose_a=transpose_a, transpose_b=transpose_b,
                             out_dtype=out_dtype)


def conv2d_nchw(Input: Any, Filter: Any, stride: Any, padding: Any, dilation: Any,  # noqa: N803
                out_dtype: Any = None) -> Any:
    return _ops.conv2d(Input, Filter, stride, padding, dilation, layout="NCHW",
                       out_dtype=out_dtype)


def conv2d_nhwc(Input: Any, Filter: Any, stride: Any, padding: Any, dilation: Any,  # noqa: N803
                out_dtype: Any = None) -> Any:
    return _ops.conv2d(Input, Filter, stride, padding, dilation, layout="NHWC",
                       kernel_layout="HWIO", out_dtype=out_dtype)


def conv2d(input: Any, filter: Any, strides: Any, padding: Any, dilation: Any,  # noqa: A002
           layout: str = "NCHW", out_dtype: Any = None) -> Any:
    if layout == "NCHW":
        return conv2d_nchw(input, filter, strides, padding, dilation, out_dtype)
    if layout == "NHWC":
        return conv2d_nhwc(input, filter, strides, padding, dilation, out_dtype)
    raise ArgumentError(f"topi.nn.conv2d: layout {layout!r} is not supported (NCHW or NHWC)")


def softmax(x: Any, axis: int = -1) -> Any:
    return _ops.softmax(x, axis)


def log_softmax(x: Any, axis: int = -1) -> Any:
    return _ops.log_softmax(x, axis)


def pool2d(data: Any, kernel: Any, stride: Any, dilation: Any, padding: Any, pool_type: str,
           ceil_mode: bool = False, layout: str = "NCHW", count_include_pad: bool = True) -> Any:
    """TVM's argument order; ``padding`` is (top, left, bottom, right)."""
    return _ops.pool2d(data, kernel, stride, padding, dilation, pool_type, layout, ceil_mode,
                       count_include_pad)


def global_pool(data: Any, pool_type: str, layout: str = "NCHW") -> Any:
    if layout != "NCHW":
        raise ArgumentError("topi.nn.global_pool: only NCHW is supported")
    red = _ops.max if pool_type == "max" else _ops.mean
    return red(data, axis=(2, 3), keepdims=True)


def pad(data: Any, pad_before: Any, pad_after: Any = None, pad_value: float = 0.0,
        name: str = "PadInput") -> Any:
    return _ops.pad(data, pad_before, pad_after, pad_value)


def flatten(data: Any) -> Any:
    return _ops.flatten(data)


def layer_norm(data: Any, gamma: Any, beta: Any, axis: Any, epsilon: float = 1e-5) -> Any:
    return _ops.layer_norm(data, gamma, beta, axis=axis, eps=epsilon)


__all__ = ["relu", "leaky_relu", "dense", "matmul", "batch_matmul", "conv2d", "conv2d_nchw",
           "conv2d_nhwc", "softmax", "log_softmax", "pool2d", "global_pool", "pad", "flatten",
           "layer_norm"]
