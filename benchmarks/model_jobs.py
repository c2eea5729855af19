"""Model jobs: the kernels of ResNet-18, a BERT-base encoder layer and MobileNetV2.

Each model is a list of layers (``Conv``, ``Dense``, ``Bmm``, ``Softmax``, ``LayerNorm``)
taken from its architecture at batch 1 (224x224 images, sequence 128); layers with the same
computation and sizes are one task whose weight is how many times the model runs it.  Each
is built two ways:

* ``ops``: ``tdsl.ops`` calls (conv/dense with bias and activation, ``ops.add`` for a
  residual, ``ops.clip`` for ReLU6), so ``ops.schedule``'s program is among every task's
  untuned programs;
* ``handwritten``: plain ``td.compute`` as a user writes a model tdsl has no operator for
  (a padding stage, the reduction, one epilogue stage): only the default schedule and
  ``ops.schedule``'s generic rules start the search -- the jobs where it has most to find.

Batch norm is folded into the convolution's weights and bias (inference), so a ResNet
conv's epilogue is bias (+ residual) + ReLU.  ``quick``: the same models at a quarter of
the image size (a shorter sequence and a narrower BERT) and at most six tasks.

When the model backend (``tdsl.graph`` / ``tdsl.frontend``) lands, these tasks can be
extracted from the models themselves; the layer lists here are what it should produce.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Union

import tdsl as td
from tdsl import ops

Spec = list[tuple[str, list, int]]


@dataclass(frozen=True)
class Conv:
    """NCHW conv2d, OIHW weight, folded-BN bias; ``act`` None/"relu"/"relu6";
    ``residual``: a same-shaped tensor added before the activation."""
    cin: int
    cout: int
    h: int
    w: int
    k: int
    stride: int = 1
    groups: int = 1
    act: Optional[str] = "relu"
    residual: bool = False

    @property
    def pad(self) -> int:
        return self.k // 2

    @property
    def out_hw(self) -> tuple[int, int]:
        return ((self.h + 2 * self.pad - self.k) // self.stride + 1,
                (self.w + 2 * self.pad - self.k) // self.stride + 1)

    @property
    def name(self) -> str:
        kind = "dw" if self.groups == self.cin and self.groups > 1 else "conv"
        tail = ("_add" if self.residual else "") + (f"_{self.act}" if self.act else "")
        return f"{kind}{self.k}x{self.k}s{self.stride}_{self.cin}to{self.cout}_{self.h}{tail}"


@dataclass(frozen=True)
class Dense:
    """``x (m, k) @ w (n, k).T + b``, then ``act`` None/"relu"/"gelu"; ``residual``: an
    (m, n) tensor added (after the activation, as BERT's out/FFN2 projections add theirs)."""
    m: int
    k: int
    n: int
    act: Optional[str] = None
    residual: bool = False

    @property
    def name(self) -> str:
        tail = ("_add" if self.residual else "") + (f"_{self.act}" if self.act else "")
        return f"dense_{self.m}x{self.k}to{self.n}{tail}"


@dataclass(frozen=True)
class Bmm:
    """``a (b, m, k) @ c (b, n, k).T`` (``trans_b``) or ``@ c (b, k, n)``, times ``scale``."""
    b: int
    m: int
    n: int
    k: int
    trans_b: bool
    scale: float = 1.0

    @property
    def name(self) -> str:
        return f"bmm_{self.b}x{self.m}x{self.n}x{self.k}" + ("_nt" if self.trans_b else "_nn")


@dataclass(frozen=True)
class Softmax:
    rows: int
    cols: int

    @property
    def name(self) -> str:
        return f"softmax_{self.rows}x{self.cols}"


@dataclass(frozen=True)
class LayerNorm:
    rows: int
    cols: int

    @property
    def name(self) -> str:
        return f"layernorm_{self.rows}x{self.cols}"


Layer = Union[Conv, Dense, Bmm, Softmax, LayerNorm]


# ---- the models' layers ---------------------------------------------------------------------
def resnet18_layers(image: int = 224) -> list[Layer]:
    """Every conv/dense of ResNet-18 in order (stem, four stages of two basic blocks, fc)."""
    out: list[Layer] = [Conv(3, 64, image, image, 7, 2)]
    h = image // 4                                  # after the stem's stride and max pool
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for block in range(2):
            s = stride if block == 0 else 1
            out.append(Conv(cin, cout, h, h, 3, s))
            h2 = (h + 2 - 3) // s + 1
            if s != 1 or cin != cout:               # the shortcut's 1x1 projection
                out.append(Conv(cin, cout, h, h, 1, s, act=None))
            out.append(Conv(cout, cout, h2, h2, 3, 1, residual=True))
            cin, h = cout, h2
    out.append(Dense(1, 512, 1000))
    return out


def bert_layers(seq: int = 128, hidden: int = 768, heads: int = 12,
                ffn: int = 3072) -> list[Layer]:
    """One BERT-base encoder layer: fused QKV projection, attention (scores, softmax,
    context), output projection + residual, layernorm, FFN (GELU) + residual, layernorm."""
    d = hidden // heads
    return [Dense(seq, hidden, 3 * hidden),
            Bmm(heads, seq, seq, d, True, 1.0 / d ** 0.5),
            Softmax(heads * seq, seq),
            Bmm(heads, seq, d, seq, False),
            Dense(seq, hidden, hidden, residual=True),
            LayerNorm(seq, hidden),
            Dense(seq, hidden, ffn, act="gelu"),
            Dense(seq, ffn, hidden, residual=True),
            LayerNorm(seq, hidden)]


#: MobileNetV2's inverted residual stages: (expansion, out channels, blocks, first stride)
_MBV2 = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
         (6, 160, 3, 2), (6, 320, 1, 1))


def mobilenet_v2_layers(image: int = 224) -> list[Layer]:
    """MobileNetV2's convs: stem, per block 1x1 expand (ReLU6), 3x3 depthwise (ReLU6), 1x1
    project (+ residual when the shape is kept), the last 1x1 conv and the classifier."""
    h = image // 2
    out: list[Layer] = [Conv(3, 32, image, image, 3, 2, act="relu6")]
    cin = 32
    for t, c, n, s in _MBV2:
        for i in range(n):
            stride = s if i == 0 else 1
            hid = cin * t
            if t != 1:
                out.append(Conv(cin, hid, h, h, 1, act="relu6"))
            out.append(Conv(hid, hid, h, h, 3, stride, groups=hid, act="relu6"))
            h = (h + 2 - 3) // stride + 1
            out.append(Conv(hid, c, h, h, 1, act=None, residual=stride == 1 and cin == c))
            cin = c
    out.append(Conv(cin, 1280, h, h, 1, act="relu6"))
    out.append(Dense(1, 1280, 1000))
    return out


# ---- building a layer -----------------------------------------------------------------------
def _p(shape, name: str) -> td.Tensor:
    return td.placeholder(tuple(shape), "float32", name=name)


def _ops_act(x: td.Tensor, act: Optional[str]) -> td.Tensor:
    if act == "relu6":
        return ops.clip(x, 0.0, 6.0)
    return ops.relu(x) if act == "relu" else ops.gelu(x) if act == "gelu" else x


def build_ops(layer: Layer) -> td.Tensor:
    """``layer`` as ``tdsl.ops`` calls."""
    if isinstance(layer, Conv):
        oh, ow = layer.out_hw
        x = _p((1, layer.cin, layer.h, layer.w), "x")
        w = _p((layer.cout, layer.cin // layer.groups, layer.k, layer.k), "w")
        b = _p((layer.cout,), "b")
        fused = layer.act if layer.act in ("relu", None) and not layer.residual else None
        y = ops.conv2d(x, w, stride=layer.stride, padding=layer.pad, groups=layer.groups,
                       bias=b, activation=fused)
        if layer.residual:
            y = ops.add(y, _p((1, layer.cout, oh, ow), "res"))
        return y if fused or layer.act is None else _ops_act(y, layer.act)
    if isinstance(layer, Dense):
        x, w, b = _p((layer.m, layer.k), "x"), _p((layer.n, layer.k), "w"), _p((layer.n,), "b")
        y = ops.dense(x, w, b, activation=layer.act)
        return ops.add(y, _p((layer.m, layer.n), "res")) if layer.residual else y
    if isinstance(layer, Bmm):
        a = _p((layer.b, layer.m, layer.k), "a")
        c = _p((layer.b, layer.n, layer.k) if layer.trans_b else (layer.b, layer.k, layer.n), "c")
        y = ops.batch_matmul(a, c, transpose_b=layer.trans_b)
        return ops.multiply(y, layer.scale) if layer.scale != 1.0 else y
    if isinstance(layer, Softmax):
        return ops.softmax(_p((layer.rows, layer.cols), "x"))
    return ops.layernorm(_p((layer.rows, layer.cols), "x"), _p((layer.cols,), "g"),
                         _p((layer.cols,), "beta"))


def _act(v, act: Optional[str]):
    if act == "relu":
        return td.maximum(v, 0.0)
    if act == "relu6":
        return td.minimum(td.maximum(v, 0.0), 6.0)
    if act == "gelu":
        return 0.5 * v * (1.0 + td.erf(v * 0.7071067811865476))
    return v


def _pad(x: td.Tensor, pad: int) -> td.Tensor:
    n, c, h, w = (int(s) for s in x.shape)
    if pad == 0:
        return x
    return td.compute((n, c, h + 2 * pad, w + 2 * pad), lambda q, k, i, j: td.if_then_else(
        td.all(i >= pad, i < h + pad, j >= pad, j < w + pad), x[q, k, i - pad, j - pad], 0.0),
        name="pad")


def _hand_conv(layer: Conv) -> td.Tensor:
    oh, ow = layer.out_hw
    s, k, g = layer.stride, layer.k, layer.groups
    cin_g, cout_g = layer.cin // g, layer.cout // g
    x = _p((1, layer.cin, layer.h, layer.w), "x")
    w = _p((layer.cout, cin_g, k, k), "w")
    b = _p((layer.cout,), "b")
    xp = _pad(x, layer.pad)
    rh, rw = td.reduce_axis((0, k), "rh"), td.reduce_axis((0, k), "rw")
    if cin_g == 1:              # depthwise: no channel reduction
        conv = td.compute((1, layer.cout, oh, ow), lambda q, f, i, j: td.sum(
            xp[q, f // cout_g, i * s + rh, j * s + rw] * w[f, 0, rh, rw], axis=[rh, rw]),
            name="dw")
    else:
        rc = td.reduce_axis((0, cin_g), "rc")
        conv = td.compute((1, layer.cout, oh, ow), lambda q, f, i, j: td.sum(
            xp[q, (f // cout_g) * cin_g + rc, i * s + rh, j * s + rw] * w[f, rc, rh, rw],
            axis=[rc, rh, rw]), name="conv")
    if layer.residual:
        r = _p((1, layer.cout, oh, ow), "res")
        return td.compute(conv.shape, lambda q, f, i, j: _act(
            conv[q, f, i, j] + b[f] + r[q, f, i, j], layer.act), name="out")
    return td.compute(conv.shape, lambda q, f, i, j: _act(conv[q, f, i, j] + b[f], layer.act),
                      name="out")


def build_handwritten(layer: Layer) -> td.Tensor:
    """``layer`` written with ``td.compute`` only."""
    if isinstance(layer, Conv):
        return _hand_conv(layer)
    if isinstance(layer, Dense):
        x, w, b = _p((layer.m, layer.k), "x"), _p((layer.n, layer.k), "w"), _p((layer.n,), "b")
        r = td.reduce_axis((0, layer.k), "k")
        y = td.compute((layer.m, layer.n), lambda i, j: td.sum(x[i, r] * w[j, r], axis=r),
                       name="y")
        if layer.residual:
            res = _p((layer.m, layer.n), "res")
            return td.compute(y.shape, lambda i, j: _act(y[i, j] + b[j], layer.act) + res[i, j],
                              name="out")
        return td.compute(y.shape, lambda i, j: _act(y[i, j] + b[j], layer.act), name="out")
    if isinstance(layer, Bmm):
        a = _p((layer.b, layer.m, layer.k), "a")
        r = td.reduce_axis((0, layer.k), "k")
        if layer.trans_b:
            c = _p((layer.b, layer.n, layer.k), "c")
            return td.compute((layer.b, layer.m, layer.n), lambda q, i, j: td.sum(
                a[q, i, r] * c[q, j, r], axis=r) * layer.scale, name="s")
        c = _p((layer.b, layer.k, layer.n), "c")
        return td.compute((layer.b, layer.m, layer.n), lambda q, i, j: td.sum(
            a[q, i, r] * c[q, r, j], axis=r) * layer.scale, name="s")
    n, m = layer.rows, layer.cols
    X = _p((n, m), "x")
    k1, k2 = td.reduce_axis((0, m), "k1"), td.reduce_axis((0, m), "k2")
    if isinstance(layer, Softmax):
        mx = td.compute((n,), lambda i: td.max(X[i, k1], axis=k1), name="mx")
        e = td.compute((n, m), lambda i, j: td.exp(X[i, j] - mx[i]), name="e")
        s = td.compute((n,), lambda i: td.sum(e[i, k2], axis=k2), name="s")
        return td.compute((n, m), lambda i, j: e[i, j] / s[i], name="sm")
    g, beta = _p((m,), "g"), _p((m,), "beta")
    mean = td.compute((n,), lambda i: td.sum(X[i, k1], axis=k1) / float(m), name="mean")
    var = td.compute((n,), lambda i: td.sum(
        (X[i, k2] - mean[i]) * (X[i, k2] - mean[i]), axis=k2) / float(m), name="var")
    return td.compute((n, m), lambda i, j: (X[i, j] - mean[i]) / td.sqrt(var[i] + 1e-5) *
                      g[j] + beta[j], name="ln")


# ---- suites ---------------------------------------------------------------------------------
def distinct(layers: list[Layer]) -> list[tuple[Layer, int]]:
    """Each distinct layer once, in order of first appearance, with its count."""
    count: dict[Layer, int] = {}
    for layer in layers:
        count[layer] = count.get(layer, 0) + 1
    return list(count.items())


def _spec(layers: list[Layer], build: Callable[[Layer], td.Tensor], quick: bool) -> Spec:
    items = distinct(layers)
    if quick and len(items) > 6:
        items = _spread(items, 6)
    return [(layer.name, [build(layer)], n) for layer, n in items]


def _kind(layer: Layer) -> str:
    """The layer's name without its sizes: "conv3x3s1_relu", "dw3x3s2_relu6", ..."""
    parts = layer.name.split("_")
    return "_".join([parts[0]] + [p for p in parts[2:] if not p[0].isdigit()])


def _spread(items: list, n: int) -> list:
    """``n`` of ``items``: the first of each kind of layer, then others spread evenly."""
    picked: list[int] = []
    kinds: set[str] = set()
    for i, (layer, _) in enumerate(items):
        if _kind(layer) not in kinds and len(picked) < n:
            kinds.add(_kind(layer))
            picked.append(i)
    step = len(items) / n
    for j in range(n):
        if len(picked) >= n:
            break
        if int(j * step) not in picked:
            picked.append(int(j * step))
    return [items[i] for i in sorted(picked)]


def _layers(model: str, quick: bool) -> list[Layer]:
    if model == "resnet18":
        return resnet18_layers(56 if quick else 224)
    if model == "bert":
        return bert_layers(32, 256, 4, 1024) if quick else bert_layers()
    return mobilenet_v2_layers(56 if quick else 224)


MODELS = ("resnet18", "bert", "mobilenet_v2")


def model_suite(model: str, variant: str, quick: bool = False) -> Spec:
    """The job of ``model`` (one of ``MODELS``), ``variant`` "ops" or "handwritten"."""
    build = build_ops if variant == "ops" else build_handwritten
    return _spec(_layers(model, quick), build, quick)


def suites() -> dict[str, Callable[..., Spec]]:
    """``"resnet18-ops"``, ``"resnet18-handwritten"``, ... -> ``f(quick=False) -> Spec``."""
    out: dict[str, Callable[..., Spec]] = {}
    for m in MODELS:
        for v in ("ops", "handwritten"):
            out[f"{m}-{v}"] = (lambda m=m, v=v: lambda quick=False: model_suite(m, v, quick))()
    return out
