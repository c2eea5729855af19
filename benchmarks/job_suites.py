"""The 12-task jobs of ``bench_jobs.py``: the search benchmark's operators, sizes and weights.

* ``ops_suite``: each operator a ``tdsl.ops`` call, so ``ops.schedule``'s hand-made schedule is
  among every task's untuned programs (baselines within a few percent of the best program the
  search finds: allocating trials can gain little);
* ``handwritten_suite``: the same operators written by hand with ``td.compute``, as a user
  writes an operator tdsl does not have: their untuned programs come from ``ops.schedule``'s
  generic rules (and its matmul recognition), far from the best for some of them -- the job
  where sharing the trials well matters.

Each entry is ``(name, outputs, weight)``, the weight being how many times a model of these
kernels runs each one.
"""
from __future__ import annotations

import tdsl as td
from tdsl import ops

Spec = list[tuple[str, list, int]]

#: how many times the model runs each kernel
WEIGHTS = {"matmul": 2, "dense": 4, "batch_matmul": 8, "softmax": 8, "gemv_tanh": 2,
           "elemwise": 8, "conv2d": 6, "depthwise": 6, "max_pool": 1, "layernorm": 8,
           "argmax": 1, "transpose": 4}


def _p(shape, name):
    return td.placeholder(shape, "float32", name=name)


def ops_suite(quick: bool = False) -> Spec:
    """The operators as ``tdsl.ops`` calls; ``quick``: the first six, smaller."""
    q = 4 if quick else 1          # sizes divided by this in quick mode
    out: Spec = []

    def add(name, t):
        out.append((name, [t], WEIGHTS[name]))
    n = 1024 // q
    add("matmul", ops.matmul(_p((n, n), "A"), _p((n, n), "B")))
    add("dense", ops.dense(_p((1, 4096 // q), "x"), _p((4096 // q, 4096 // q), "w")))
    add("batch_matmul", ops.batch_matmul(_p((16, 256 // q, 64), "a"), _p((16, 64, 256 // q), "b")))
    add("softmax", ops.softmax(_p((4096 // q, 1024 // q), "x")))
    add("gemv_tanh", ops.dense(_p((1, 2048 // q), "x"), _p((2048 // q, 2048 // q), "w"),
                               _p((2048 // q,), "b"), activation="tanh"))
    a, b, c, d = (_p((1 << (24 if not quick else 20),), nm) for nm in "ABCD")
    add("elemwise", ops.add(d, ops.multiply(ops.add(a, b), c)))
    if quick:
        return out
    add("conv2d", ops.conv2d(_p((1, 64, 56, 56), "x"), _p((64, 64, 3, 3), "w"), padding=1))
    add("depthwise", ops.conv2d(_p((1, 128, 56, 56), "x"), _p((128, 1, 3, 3), "w"), padding=1,
                                groups=128))
    add("max_pool", ops.max_pool2d(_p((1, 64, 112, 112), "x"), 3, 2))
    add("layernorm", ops.layernorm(_p((4096, 1024), "x"), _p((1024,), "g"), _p((1024,), "b")))
    add("argmax", ops.argmax(_p((4096, 1024), "x"), axis=1))
    add("transpose", ops.transpose(_p((4096, 1024), "x")))
    return out


def _padded(x, pad: int, name: str):
    """``x`` (NCHW) with ``pad`` zeros around its two spatial axes."""
    n, c, h, w = (int(s) for s in x.shape)
    return td.compute((n, c, h + 2 * pad, w + 2 * pad), lambda b, k, i, j: td.if_then_else(
        td.all(i >= pad, i < h + pad, j >= pad, j < w + pad), x[b, k, i - pad, j - pad], 0.0),
        name=name)


def handwritten_suite() -> Spec:
    """The same operators, sizes and weights written with ``td.compute`` (argmax excepted:
    it stays ``ops.argmax``, whose reducer is what a user would write too)."""
    out: Spec = []

    def add(name, t):
        out.append((name, [t], WEIGHTS[name]))

    def gemm(M, N, K, a, b, name):
        k = td.reduce_axis((0, K), "k")
        return td.compute((M, N), lambda i, j: td.sum(a(i, k) * b(k, j), axis=k), name=name)
    A, B = _p((1024, 1024), "A"), _p((1024, 1024), "B")
    add("matmul", gemm(1024, 1024, 1024, lambda i, k: A[i, k], lambda k, j: B[k, j], "C"))
    x, w = _p((1, 4096), "x"), _p((4096, 4096), "w")
    add("dense", gemm(1, 4096, 4096, lambda i, k: x[i, k], lambda k, j: w[j, k], "y"))
    a, b = _p((16, 256, 64), "a"), _p((16, 64, 256), "b")
    k = td.reduce_axis((0, 64), "k")
    add("batch_matmul", td.compute((16, 256, 256), lambda q, i, j: td.sum(
        a[q, i, k] * b[q, k, j], axis=k), name="c"))

    X = _p((4096, 1024), "x")
    k1, k2 = td.reduce_axis((0, 1024), "k1"), td.reduce_axis((0, 1024), "k2")
    mx = td.compute((4096,), lambda i: td.max(X[i, k1], axis=k1), name="mx")
    e = td.compute((4096, 1024), lambda i, j: td.exp(X[i, j] - mx[i]), name="e")
    s = td.compute((4096,), lambda i: td.sum(e[i, k2], axis=k2), name="s")
    add("softmax", td.compute((4096, 1024), lambda i, j: e[i, j] / s[i], name="sm"))

    v, W, bias = _p((2048,), "x"), _p((2048, 2048), "w"), _p((2048,), "b")
    k = td.reduce_axis((0, 2048), "k")
    y = td.compute((2048,), lambda i: td.sum(W[i, k] * v[k], axis=k), name="y")
    add("gemv_tanh", td.compute((2048,), lambda i: td.tanh(y[i] + bias[i]), name="out"))

    a, b, c, d = (_p((1 << 24,), nm) for nm in "abcd")
    add("elemwise", td.compute((1 << 24,), lambda i: d[i] + (a[i] + b[i]) * c[i], name="e"))

    x, w = _p((1, 64, 56, 56), "x"), _p((64, 64, 3, 3), "w")
    xp = _padded(x, 1, "pad")
    rc, rh, rw = (td.reduce_axis((0, n), nm) for n, nm in ((64, "rc"), (3, "rh"), (3, "rw")))
    add("conv2d", td.compute((1, 64, 56, 56), lambda q, f, i, j: td.sum(
        xp[q, rc, i + rh, j + rw] * w[f, rc, rh, rw], axis=[rc, rh, rw]), name="conv"))

    x, w = _p((1, 128, 56, 56), "x"), _p((128, 1, 3, 3), "w")
    xp = _padded(x, 1, "pad")
    rh, rw = td.reduce_axis((0, 3), "rh"), td.reduce_axis((0, 3), "rw")
    add("depthwise", td.compute((1, 128, 56, 56), lambda q, c, i, j: td.sum(
        xp[q, c, i + rh, j + rw] * w[c, 0, rh, rw], axis=[rh, rw]), name="dw"))

    x = _p((1, 64, 112, 112), "x")
    rh, rw = td.reduce_axis((0, 3), "rh"), td.reduce_axis((0, 3), "rw")
    add("max_pool", td.compute((1, 64, 55, 55), lambda q, c, i, j: td.max(
        x[q, c, 2 * i + rh, 2 * j + rw], axis=[rh, rw]), name="pool"))

    X, g, beta = _p((4096, 1024), "x"), _p((1024,), "g"), _p((1024,), "b")
    k1, k2 = td.reduce_axis((0, 1024), "k1"), td.reduce_axis((0, 1024), "k2")
    mean = td.compute((4096,), lambda i: td.sum(X[i, k1], axis=k1) / 1024.0, name="mean")
    var = td.compute((4096,), lambda i: td.sum(
        (X[i, k2] - mean[i]) * (X[i, k2] - mean[i]), axis=k2) / 1024.0, name="var")
    add("layernorm", td.compute((4096, 1024), lambda i, j: (X[i, j] - mean[i]) / td.sqrt(
        var[i] + 1e-5) * g[j] + beta[j], name="ln"))

    add("argmax", ops.argmax(_p((4096, 1024), "x"), axis=1))
    X = _p((4096, 1024), "x")
    add("transpose", td.compute((1024, 4096), lambda i, j: X[j, i], name="t"))
    return out


SUITES = {"ops": ops_suite, "handwritten": handwritten_suite}

from model_jobs import suites as _model_suites  # noqa: E402

#: the model jobs (``model_jobs.py``): "resnet18-ops", "bert-handwritten", ...
SUITES.update(_model_suites())
