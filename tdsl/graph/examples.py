"""Hand-built graphs of model shapes (for compile-time checks, tests and benchmarks of the
graph layer without the PyTorch import): a ResNet-18 and a transformer encoder block."""
from __future__ import annotations

from typing import Any

import numpy as np

from .builder import Builder
from .ir import Graph, Value


def _conv_bn(b: Builder, rng: np.random.Generator, x: Value, cin: int, cout: int, k: int,
             stride: int, relu: bool) -> Value:
    w = (rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))).astype("f4")
    y = b.op("conv2d", x, b.const(w), stride=(stride, stride), padding=(k // 2,) * 4,
             dilation=(1, 1), groups=1)
    stats = [rng.uniform(0.5, 1.5, cout), rng.standard_normal(cout) * 0.1,
             rng.standard_normal(cout) * 0.1, rng.uniform(0.5, 2.0, cout)]
    y = b.op("batch_norm", y, *[b.const(s.astype("f4")) for s in stats], eps=1e-5, axis=1)
    return b.op("relu", y) if relu else y


def resnet18(batch: Any = 1, size: int = 224, classes: int = 1000, seed: int = 0) -> Graph:
    """ResNet-18 (torchvision's layout) with random weights and non-trivial BN statistics;
    ``batch`` may be a ``td.var``."""
    rng = np.random.default_rng(seed)
    b = Builder()
    x = b.input((batch, 3, size, size), name="x")
    y = _conv_bn(b, rng, x, 3, 64, 7, 2, True)
    y = b.op("max_pool2d", y, kernel=(3, 3), stride=(2, 2), padding=(1, 1, 1, 1),
             dilation=(1, 1), ceil_mode=False)
    cin = 64
    for stage, cout in enumerate((64, 128, 256, 512)):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            h = _conv_bn(b, rng, y, cin, cout, 3, stride, True)
            h = _conv_bn(b, rng, h, cout, cout, 3, 1, False)
            sc = y if stride == 1 and cin == cout else _conv_bn(b, rng, y, cin, cout, 1,
                                                                 stride, False)
            y = b.op("relu", b.op("add", h, sc))
            cin = cout
    y = b.op("adaptive_avg_pool2d", y, output_size=(1, 1))
    y = b.op("reshape", y, shape=(batch, 512))
    w = (rng.standard_normal((classes, 512)) * 0.05).astype("f4")
    y = b.op("dense", y, b.const(w), b.const((rng.standard_normal(classes) * 0.1).astype("f4")))
    return b.output(y)


def encoder_layer(batch: Any = 1, seq: Any = 128, d: int = 768, heads: int = 12,
                  ff: int = 3072, causal: bool = False, seed: int = 0) -> Graph:
    """One post-norm transformer encoder layer (BERT's): attention as dense layers, a
    (batch, heads, seq, d/heads) permute and the ``attention`` op, GELU feed-forward."""
    rng = np.random.default_rng(seed)
    b = Builder()
    x = b.input((batch, seq, d), name="x")
    hd = d // heads

    def lin(v: Value, n_in: int, n_out: int) -> Value:
        w = (rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)).astype("f4")
        return b.op("dense", v, b.const(w), b.const((rng.standard_normal(n_out) * 0.1)
                                                    .astype("f4")))

    def heads_first(v: Value) -> Value:
        v = b.op("reshape", v, shape=(batch, seq, heads, hd))
        return b.op("transpose", v, axes=(0, 2, 1, 3))

    q, k, v = (heads_first(lin(x, d, d)) for _ in range(3))
    a = b.op("attention", q, k, v, causal=causal, scale=None)
    a = b.op("reshape", b.op("transpose", a, axes=(0, 2, 1, 3)), shape=(batch, seq, d))
    ones, zeros = np.ones(d, "f4"), np.zeros(d, "f4")
    h = b.op("layer_norm", b.op("add", lin(a, d, d), x), b.const(ones * 1.1),
             b.const(zeros + 0.1), axes=(-1,), eps=1e-12)
    f = lin(b.op("gelu", lin(h, d, ff)), ff, d)
    y = b.op("layer_norm", b.op("add", f, h), b.const(ones * 0.9), b.const(zeros - 0.1),
             axes=(-1,), eps=1e-12)
    return b.output(y)
