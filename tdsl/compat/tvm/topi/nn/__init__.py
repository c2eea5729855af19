"""``topi.nn``: neural-network operators with TVM's signatures.  The ones AutoTVM templates
schedule (convolutions, dense/matmul, pooling, pad) are declared with TVM's stages, names
and axes (``nn.conv2d``, ``nn.pooling``); the others are built by ``tdsl.ops``."""
from __future__ import annotations

from typing import Any

import tdsl
from tdsl import ops as _ops
from tdsl.errors import ArgumentError, ShapeError

from ..utils import get_const_tuple
from .conv2d import conv2d_hwcn, conv2d_nchw, conv2d_nhwc, depthwise_conv2d_nchw, pad
from .pooling import pool2d


def relu(x: Any) -> Any:
    return _ops.relu(x)


def leaky_relu(x: Any, alpha: float) -> Any:
    return _ops.leaky_relu(x, alpha)


def matmul(a: Any, b: Any, bias: Any = None, out_dtype: Any = None, transpose_a: bool = False,
           transpose_b: bool = False) -> Any:
    """2-d ``a @ b`` as TVM declares it: one compute ``T_matmul_{N,T}{N,T}`` (tag
    ``"matmul"``, ``"dense"`` for NT) with reduce axis ``k``, then ``T_add`` for ``bias``."""
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise ShapeError(f"topi.nn.matmul: tdsl.compat takes 2-d operands, got "
                         f"{len(a.shape)}-d and {len(b.shape)}-d")
    m, ka = (a.shape[1], a.shape[0]) if transpose_a else (a.shape[0], a.shape[1])
    n, kb = (b.shape[0], b.shape[1]) if transpose_b else (b.shape[1], b.shape[0])
    ca, cb = get_const_tuple((ka, kb))
    if isinstance(ca, int) and isinstance(cb, int) and ca != cb:
        raise ShapeError(f"topi.nn.matmul: reduction dimensions differ ({ca} vs {cb})")
    dtype = out_dtype or str(a.dtype)
    k = tdsl.reduce_axis((0, ka), name="k")

    def body(i: Any, j: Any) -> Any:
        av = a[k, i] if transpose_a else a[i, k]
        bv = b[j, k] if transpose_b else b[k, j]
        return tdsl.sum(av.astype(dtype) * bv.astype(dtype), axis=k)
    name = "T_matmul_" + ("T" if transpose_a else "N") + ("T" if transpose_b else "N")
    tag = "dense" if (transpose_a, transpose_b) == (False, True) else "matmul"
    mat = tdsl.compute((m, n), body, name=name, tag=tag)
    if bias is None:
        return mat
    if len(bias.shape) != 1:
        raise ShapeError(f"topi.nn.{tag}: bias must be 1-d, got {len(bias.shape)}-d")
    return tdsl.compute((m, n), lambda ax0, ax1: mat[ax0, ax1] + bias[ax1].astype(dtype),
                        name="T_add", tag="broadcast")


def dense(data: Any, weight: Any, bias: Any = None, out_dtype: Any = None) -> Any:
    """``data`` (M, K) times ``weight`` (N, K) transposed, plus ``bias`` (N,): TVM's
    ``T_matmul_NT`` (tag ``"dense"``, reduce axis ``k``) and ``T_add``."""
    return matmul(data, weight, bias, out_dtype, False, True)


def batch_matmul(x: Any, y: Any, oshape: Any = None, out_dtype: Any = None,
                 transpose_a: bool = False, transpose_b: bool = True) -> Any:
    """TVM's default: ``y`` is transposed (batch, N, K)."""
    return _ops.batch_matmul(x, y, transpose_a=transpose_a, transpose_b=transpose_b,
                             out_dtype=out_dtype)


def conv2d(input: Any, filter: Any, strides: Any, padding: Any, dilation: Any,  # noqa: A002
           layout: str = "NCHW", out_dtype: Any = None) -> Any:
    if layout == "NCHW":
        return conv2d_nchw(input, filter, strides, padding, dilation, out_dtype)
    if layout == "NHWC":
        return conv2d_nhwc(input, filter, strides, padding, dilation, out_dtype)
    if layout == "HWCN":
        return conv2d_hwcn(input, filter, strides, padding, dilation, out_dtype)
    raise ArgumentError(f"topi.nn.conv2d: layout {layout!r} is not supported (NCHW, NHWC or "
                        f"HWCN)")


def softmax(x: Any, axis: int = -1) -> Any:
    return _ops.softmax(x, axis)


def log_softmax(x: Any, axis: int = -1) -> Any:
    return _ops.log_softmax(x, axis)


def global_pool(data: Any, pool_type: str, layout: str = "NCHW") -> Any:
    if layout != "NCHW":
        raise ArgumentError("topi.nn.global_pool: only NCHW is supported")
    red = _ops.max if pool_type == "max" else _ops.mean
    return red(data, axis=(2, 3), keepdims=True)


def flatten(data: Any) -> Any:
    return _ops.flatten(data)


def layer_norm(data: Any, gamma: Any, beta: Any, axis: Any, epsilon: float = 1e-5) -> Any:
    return _ops.layer_norm(data, gamma, beta, axis=axis, eps=epsilon)


__all__ = ["relu", "leaky_relu", "dense", "matmul", "batch_matmul", "conv2d", "conv2d_nchw",
           "conv2d_nhwc", "conv2d_hwcn", "depthwise_conv2d_nchw", "softmax", "log_softmax",
           "pool2d", "global_pool", "pad", "flatten", "layer_norm"]
