"""The operators and shapes ``pretrain`` measures: the kinds of kernel a model's tasks are
made of (GEMM-like, convolutions, depthwise, row reductions, normalizations, elementwise,
layout), each at a few shapes, as ``tdsl.ops`` calls and written by hand -- small enough that
48 random candidates of each are measured in seconds on one core.

``WORKLOADS``: name -> a function returning the task's tensors (inputs and output last).
"""
from __future__ import annotations

from typing import Callable

import tdsl as td
from tdsl import ops


def _p(shape: tuple, name: str) -> td.Tensor:
    return td.placeholder(shape, "float32", name=name)


def _matmul(m: int, n: int, k: int) -> Callable[[], list]:
    def make() -> list:
        a, b = _p((m, k), "A"), _p((k, n), "B")
        return [a, b, ops.matmul(a, b)]
    return make


def _dense(m: int, k: int, n: int, act: "str | None") -> Callable[[], list]:
    def make() -> list:
        x, w, b = _p((m, k), "x"), _p((n, k), "w"), _p((n,), "b")
        return [x, w, b, ops.dense(x, w, b, activation=act)]
    return make


def _hand_gemm(m: int, n: int, k: int) -> Callable[[], list]:
    def make() -> list:
        a, b = _p((m, k), "A"), _p((n, k), "B")
        r = td.reduce_axis((0, k), "k")
        c = td.compute((m, n), lambda i, j: td.sum(a[i, r] * b[j, r], axis=r), name="C")
        return [a, b, td.compute((m, n), lambda i, j: td.maximum(c[i, j], 0.0), name="relu")]
    return make


def _bmm(b: int, m: int, n: int, k: int) -> Callable[[], list]:
    def make() -> list:
        x, y = _p((b, m, k), "a"), _p((b, k, n), "c")
        return [x, y, ops.batch_matmul(x, y)]
    return make


def _conv(c: int, f: int, h: int, k: int, s: int, groups: int = 1,
          act: "str | None" = "relu") -> Callable[[], list]:
    def make() -> list:
        x, w = _p((1, c, h, h), "x"), _p((f, c // groups, k, k), "w")
        b = _p((f,), "b")
        return [x, w, b, ops.conv2d(x, w, stride=s, padding=k // 2, groups=groups, bias=b,
                                    activation=act)]
    return make


def _hand_conv(c: int, f: int, h: int) -> Callable[[], list]:
    def make() -> list:
        x, w = _p((1, c, h, h), "x"), _p((f, c, 3, 3), "w")
        xp = td.compute((1, c, h + 2, h + 2), lambda q, ch, i, j: td.if_then_else(
            td.all(i >= 1, i <= h, j >= 1, j <= h), x[q, ch, i - 1, j - 1], 0.0), name="pad")
        rc, rh, rw = (td.reduce_axis((0, n), nm) for n, nm in ((c, "rc"), (3, "rh"), (3, "rw")))
        return [x, w, td.compute((1, f, h, h), lambda q, o, i, j: td.sum(
            xp[q, rc, i + rh, j + rw] * w[o, rc, rh, rw], axis=[rc, rh, rw]), name="conv")]
    return make


def _row(kind: str, n: int, m: int) -> Callable[[], list]:
    def make() -> list:
        x = _p((n, m), "x")
        if kind == "softmax":
            return [x, ops.softmax(x)]
        if kind == "sum":
            return [x, ops.sum(x, axis=1)]
        g, b = _p((m,), "g"), _p((m,), "b")
        return [x, g, b, ops.layernorm(x, g, b)]
    return make


def _elemwise(n: int) -> Callable[[], list]:
    def make() -> list:
        a, b, c = _p((n,), "a"), _p((n,), "b"), _p((n,), "c")
        return [a, b, c, ops.add(ops.multiply(a, b), ops.tanh(c))]
    return make


def _transpose(n: int, m: int) -> Callable[[], list]:
    def make() -> list:
        x = _p((n, m), "x")
        return [x, ops.transpose(x)]
    return make


def _pool(c: int, h: int) -> Callable[[], list]:
    def make() -> list:
        x = _p((1, c, h, h), "x")
        return [x, ops.max_pool2d(x, 3, 2, padding=1)]
    return make


WORKLOADS: dict[str, Callable[[], list]] = {
    "matmul_128": _matmul(128, 128, 128),
    "matmul_256x64x512": _matmul(256, 64, 512),
    "matmul_96x200x72": _matmul(96, 200, 72),
    "dense_1x1024_relu": _dense(1, 1024, 512, "relu"),
    "dense_64x256_gelu": _dense(64, 256, 512, "gelu"),
    "hand_gemm_relu": _hand_gemm(128, 96, 256),
    "bmm_8x64": _bmm(8, 64, 64, 32),
    "conv3x3_32_28": _conv(32, 32, 28, 3, 1),
    "conv3x3s2_16_56": _conv(16, 32, 56, 3, 2),
    "conv1x1_64_14": _conv(64, 128, 14, 1, 1, act=None),
    "conv7x7s2_3_64": _conv(3, 16, 64, 7, 2),
    "depthwise_64_28": _conv(64, 64, 28, 3, 1, groups=64),
    "depthwise_s2_32_56": _conv(32, 32, 56, 3, 2, groups=32),
    "hand_conv_16_28": _hand_conv(16, 32, 28),
    "softmax_512x256": _row("softmax", 512, 256),
    "layernorm_256x512": _row("layernorm", 256, 512),
    "rowsum_1024x256": _row("sum", 1024, 256),
    "elemwise_1m": _elemwise(1 << 20),
    "transpose_512x768": _transpose(512, 768),
    "maxpool_32_56": _pool(32, 56),
}
