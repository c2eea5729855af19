"""Small operator definitions (and NumPy references) shared by the autotune tests."""
from __future__ import annotations

import numpy as np

import tdsl as td


def matmul(n=32, m=48, k=24):
    A = td.placeholder((n, k), "float32", name="A")
    B = td.placeholder((k, m), "float32", name="B")
    r = td.reduce_axis((0, k), name="k")
    C = td.compute((n, m), lambda i, j: td.sum(A[i, r] * B[r, j], axis=r), name="C")
    return [A, B, C], lambda a, b: a @ b


def batch_matmul(b=2, n=16, m=32, k=8):
    A = td.placeholder((b, n, k), "float32", name="A")
    B = td.placeholder((b, k, m), "float32", name="B")
    r = td.reduce_axis((0, k), name="k")
    C = td.compute((b, n, m), lambda x, i, j: td.sum(A[x, i, r] * B[x, r, j], axis=r), name="C")
    return [A, B, C], lambda a, b_: a @ b_


def _pad(X, p):
    n, c, h, w = X.shape
    return td.compute((n, c, h + 2 * p, w + 2 * p), lambda a, b, y, x: td.if_then_else(
        td.all(y >= p, y < h + p, x >= p, x < w + p), X[a, b, y - p, x - p], td.const(0.0, "float32")),
        name="pad")


def conv2d(n=1, c=4, h=8, w=8, f=8, kh=3):
    X = td.placeholder((n, c, h, w), "float32", name="X")
    W = td.placeholder((f, c, kh, kh), "float32", name="W")
    P = _pad(X, 1)
    rc = td.reduce_axis((0, c), name="rc")
    ry = td.reduce_axis((0, kh), name="ry")
    rx = td.reduce_axis((0, kh), name="rx")
    Y = td.compute((n, f, h, w), lambda a, o, y, x: td.sum(
        P[a, rc, y + ry, x + rx] * W[o, rc, ry, rx], axis=[rc, ry, rx]), name="Y")

    def ref(x, wt):
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        out = np.zeros((n, f, h, w), np.float32)
        for dy in range(kh):
            for dx in range(kh):
                out += np.einsum("nchw,fc->nfhw", xp[:, :, dy:dy + h, dx:dx + w], wt[:, :, dy, dx])
        return out
    return [X, W, Y], ref


def depthwise_conv2d(n=1, c=8, h=8, w=8, kh=3):
    X = td.placeholder((n, c, h, w), "float32", name="X")
    W = td.placeholder((c, kh, kh), "float32", name="W")
    P = _pad(X, 1)
    ry = td.reduce_axis((0, kh), name="ry")
    rx = td.reduce_axis((0, kh), name="rx")
    Y = td.compute((n, c, h, w), lambda a, b, y, x: td.sum(
        P[a, b, y + ry, x + rx] * W[b, ry, rx], axis=[ry, rx]), name="Y")

    def ref(x, wt):
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        out = np.zeros((n, c, h, w), np.float32)
        for dy in range(kh):
            for dx in range(kh):
                out += xp[:, :, dy:dy + h, dx:dx + w] * wt[None, :, dy, dx, None, None]
        return out
    return [X, W, Y], ref


def softmax(n=8, m=64):
    X = td.placeholder((n, m), "float32", name="X")
    k1 = td.reduce_axis((0, m), name="k1")
    mx = td.compute((n,), lambda i: td.max(X[i, k1], axis=k1), name="mx")
    e = td.compute((n, m), lambda i, j: td.exp(X[i, j] - mx[i]), name="e")
    k2 = td.reduce_axis((0, m), name="k2")
    s = td.compute((n,), lambda i: td.sum(e[i, k2], axis=k2), name="s")
    Y = td.compute((n, m), lambda i, j: e[i, j] / s[i], name="Y")

    def ref(x):
        z = np.exp(x - x.max(axis=1, keepdims=True))
        return z / z.sum(axis=1, keepdims=True)
    return [X, Y], ref


def layernorm(n=8, m=64, eps=1e-5):
    X = td.placeholder((n, m), "float32", name="X")
    G = td.placeholder((m,), "float32", name="G")
    Bt = td.placeholder((m,), "float32", name="Bt")
    k1 = td.reduce_axis((0, m), name="k1")
    mean = td.compute((n,), lambda i: td.sum(X[i, k1] / m, axis=k1), name="mean")
    k2 = td.reduce_axis((0, m), name="k2")
    var = td.compute((n,), lambda i: td.sum((X[i, k2] - mean[i]) * (X[i, k2] - mean[i]) / m,
                                            axis=k2), name="var")
    Y = td.compute((n, m), lambda i, j: (X[i, j] - mean[i]) * td.rsqrt(var[i] + eps) * G[j] + Bt[j],
                   name="Y")

    def ref(x, g, b):
        mu = x.mean(axis=1, keepdims=True)
        v = ((x - mu) ** 2).mean(axis=1, keepdims=True)
        return (x - mu) / np.sqrt(v + eps) * g + b
    return [X, G, Bt, Y], ref


OPERATORS = {"matmul": matmul, "batch_matmul": batch_matmul, "conv2d": conv2d,
             "depthwise_conv2d": depthwise_conv2d, "softmax": softmax, "layernorm": layernorm}
