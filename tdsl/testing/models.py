"""A small model zoo in plain ``torch.nn`` for the model compiler's tests and benchmark.

Five architectures, each sized by its constructor's arguments so that tests can build tiny
versions and the benchmark full-sized ones: ``ResNet18`` (torchvision's layout: BasicBlocks, a
1x1 conv + BatchNorm downsample on strided blocks, adaptive average pooling, a linear head),
``MobileNetV2`` (inverted residuals: 1x1 expansion, depthwise 3x3, ReLU6, linear 1x1
projection), ``BertEncoder`` (post-LN encoder layers, erf GELU), ``GPT2Decoder`` (pre-LN
decoder layers, causal attention, tanh GELU) and ``MLP``.  Attention goes through
``F.scaled_dot_product_attention`` so the frontend sees one op.

Nothing here needs torchvision or a download.  ``make(name, size, batch)`` returns a model in
eval mode with random weights drawn from a seed (its own generator: the global RNG is neither
read nor changed) and example inputs.  BatchNorm and LayerNorm get non-trivial affine
parameters and BatchNorm non-trivial running statistics, so that folding them is tested for
real.  The transformers take float hidden states ``(batch, seq, hidden)`` by default, so a
benchmark measures the layers; give ``vocab=`` to add token and position embeddings (then
the input is int64 token ids).
"""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from tdsl.errors import ArgumentError

__all__ = ["ResNet18", "MobileNetV2", "BertEncoder", "GPT2Decoder", "MLP", "MODELS", "SIZES",
           "config", "make", "randomize", "example_inputs"]


# ---- ResNet-18 -----------------------------------------------------------------------------------
class BasicBlock(nn.Module):
    """Two 3x3 conv + BN (+ ReLU) and a residual; a 1x1 conv + BN on the shortcut when the
    block changes the stride or the width."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample: Optional[nn.Module] = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = x if self.downsample is None else self.downsample(x)
        return F.relu(out + identity)


class ResNet18(nn.Module):
    """torchvision's ResNet-18 layout; ``width`` is the first stage's channels (64), ``blocks``
    the BasicBlocks per stage ((2, 2, 2, 2))."""

    def __init__(self, num_classes: int = 1000, width: int = 64,
                 blocks: Sequence[int] = (2, 2, 2, 2), in_channels: int = 3) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages, cin = [], width
        for i, n in enumerate(blocks):
            cout = width * 2 ** i
            layers = [BasicBlock(cin if j == 0 else cout, cout, 2 if (i > 0 and j == 0) else 1)
                      for j in range(n)]
            stages.append(nn.Sequential(*layers))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# ---- MobileNetV2 ---------------------------------------------------------------------------------
#: torchvision's (expansion t, channels c, repeats n, first stride s) per stage.
MOBILENET_V2_STAGES = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


def _divisible(v: float, divisor: int = 8) -> int:
    """Channels rounded to a multiple of ``divisor``, never below 90 % of ``v``."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1,
             relu6: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups,
                                         bias=False), nn.BatchNorm2d(cout)]
    if relu6:
        layers.append(nn.ReLU6())
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    """1x1 expansion (skipped when t = 1), depthwise 3x3, linear 1x1 projection; a residual
    when the block keeps the stride and width."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(_conv_bn(cin, hidden, 1))
        layers += [_conv_bn(hidden, hidden, 3, stride, groups=hidden),
                   _conv_bn(hidden, cout, 1, relu6=False)]
        self.conv = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return x + y if self.residual else y


class MobileNetV2(nn.Module):
    """torchvision's MobileNetV2 layout; ``stages`` overrides the (t, c, n, s) table."""

    def __init__(self, num_classes: int = 1000, width_mult: float = 1.0,
                 stages: Sequence[tuple[int, int, int, int]] = MOBILENET_V2_STAGES,
                 last_channels: int = 1280, in_channels: int = 3) -> None:
        super().__init__()
        cin = _divisible(32 * width_mult)
        last = _divisible(last_channels * max(1.0, width_mult))
        layers: list[nn.Module] = [_conv_bn(in_channels, cin, 3, 2)]
        for t, c, n, s in stages:
            cout = _divisible(c * width_mult)
            for i in range(n):
                layers.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        layers.append(_conv_bn(cin, last, 1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(last, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


# ---- transformers --------------------------------------------------------------------------------
def _split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    b, s, h = x.shape
    return x.reshape(b, s, heads, h // heads).transpose(1, 2)


def _merge_heads(x: torch.Tensor) -> torch.Tensor:
    b, n, s, d = x.shape
    return x.transpose(1, 2).reshape(b, s, n * d)


class BertLayer(nn.Module):
    """Post-LN: x = LN(x + attn(x)); x = LN(x + FFN(x)); separate Q, K, V projections."""

    def __init__(self, hidden: int, heads: int, ffn: int, eps: float = 1e-12) -> None:
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.attn_out = nn.Linear(hidden, hidden)
        self.ln1 = nn.LayerNorm(hidden, eps=eps)
        self.ffn_in = nn.Linear(hidden, ffn)
        self.ffn_out = nn.Linear(ffn, hidden)
        self.ln2 = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (_split_heads(p(x), self.heads) for p in (self.query, self.key, self.value))
        a = _merge_heads(F.scaled_dot_product_attention(q, k, v))
        x = self.ln1(x + self.attn_out(a))
        return self.ln2(x + self.ffn_out(F.gelu(self.ffn_in(x))))


class BertEncoder(nn.Module):
    """A BERT-shaped encoder (base: hidden 768, 12 heads, FFN 3072).  Input: float hidden
    states (batch, seq, hidden), or int64 token ids when ``vocab`` is given (token + position
    embeddings, then LayerNorm).  Output: the last hidden states."""

    def __init__(self, layers: int = 6, hidden: int = 768, heads: int = 12, ffn: int = 3072,
                 vocab: Optional[int] = None, max_seq: int = 512) -> None:
        super().__init__()
        if hidden % heads:
            raise ArgumentError(f"BertEncoder: hidden {hidden} is not a multiple of heads {heads}")
        self.embed: Optional[nn.Embedding] = nn.Embedding(vocab, hidden) if vocab else None
        self.pos: Optional[nn.Embedding] = nn.Embedding(max_seq, hidden) if vocab else None
        self.ln_embed: Optional[nn.LayerNorm] = nn.LayerNorm(hidden, eps=1e-12) if vocab else None
        self.layers = nn.ModuleList(BertLayer(hidden, heads, ffn) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:
            positions = torch.arange(x.shape[1], device=x.device)
            x = self.ln_embed(self.embed(x) + self.pos(positions))
        for layer in self.layers:
            x = layer(x)
        return x


class GPT2Block(nn.Module):
    """Pre-LN: x = x + attn(LN(x)); x = x + MLP(LN(x)); one fused QKV projection, causal
    attention, tanh GELU."""

    def __init__(self, hidden: int, heads: int, ffn: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(hidden, eps=eps)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden, eps=eps)
        self.fc = nn.Linear(hidden, ffn)
        self.fc_out = nn.Linear(ffn, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(self.ln1(x)).split(x.shape[-1], dim=-1)
        q, k, v = (_split_heads(t, self.heads) for t in (q, k, v))
        x = x + self.proj(_merge_heads(F.scaled_dot_product_attention(q, k, v, is_causal=True)))
        return x + self.fc_out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2Decoder(nn.Module):
    """A GPT-2-shaped decoder (small: hidden 768, 12 heads, FFN 3072, 12 layers) ending in a
    final LayerNorm.  Input: float hidden states, or int64 token ids when ``vocab`` is given
    (token + position embeddings).  Output: the last hidden states, or logits when ``head`` is
    set: ``"tied"`` (the token embedding's transpose; needs ``vocab``) or an int (an untied
    linear head with that many outputs, no bias)."""

    def __init__(self, layers: int = 12, hidden: int = 768, heads: int = 12, ffn: int = 3072,
                 vocab: Optional[int] = None, max_seq: int = 1024,
                 head: "str | int | None" = None) -> None:
        super().__init__()
        if hidden % heads:
            raise ArgumentError(f"GPT2Decoder: hidden {hidden} is not a multiple of heads {heads}")
        if head == "tied" and not vocab:
            raise ArgumentError("GPT2Decoder: head='tied' needs a vocab (the token embedding)")
        if head is not None and head != "tied" and not (isinstance(head, int) and head > 0):
            raise ArgumentError(f"GPT2Decoder: head {head!r} is not None, 'tied' or an int > 0")
        self.embed: Optional[nn.Embedding] = nn.Embedding(vocab, hidden) if vocab else None
        self.pos: Optional[nn.Embedding] = nn.Embedding(max_seq, hidden) if vocab else None
        self.blocks = nn.ModuleList(GPT2Block(hidden, heads, ffn) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)
        self.tied = head == "tied"
        self.head: Optional[nn.Linear] = (nn.Linear(hidden, head, bias=False)
                                          if isinstance(head, int) else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:
            x = self.embed(x) + self.pos(torch.arange(x.shape[1], device=x.device))
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        if self.tied:
            return F.linear(x, self.embed.weight)
        return x if self.head is None else self.head(x)


class MLP(nn.Module):
    """Linear layers with an activation ("relu", "gelu", "silu" or "tanh") between them."""

    def __init__(self, sizes: Sequence[int] = (1024, 4096, 4096, 1024),
                 activation: str = "relu") -> None:
        super().__init__()
        acts = {"relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU, "tanh": nn.Tanh}
        if activation not in acts:
            raise ArgumentError(f"MLP: activation {activation!r} is not one of {sorted(acts)}")
        if len(sizes) < 2:
            raise ArgumentError(f"MLP: sizes {tuple(sizes)} need an input and an output size")
        layers: list[nn.Module] = []
        for i in range(len(sizes) - 1):
            layers.append(nn.Linear(sizes[i], sizes[i + 1]))
            if i < len(sizes) - 2:
                layers.append(acts[activation]())
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


# ---- random weights ------------------------------------------------------------------------------
_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.LayerNorm)


def randomize(model: nn.Module, seed: int = 0) -> nn.Module:
    """Draw every parameter and BatchNorm statistic of ``model`` from a generator seeded with
    ``seed`` (the global RNG is untouched) and put it in eval mode; returns ``model``.
    Every parameter and buffer is written, so ``model`` may come from ``to_empty``.

    Weights are normal with a He-like scale (std sqrt(2 / fan_in)) so activations neither
    vanish nor explode through deep stacks; biases are small; norm layers get weights in
    [0.5, 1.5], biases ~ N(0, 0.1), and BatchNorm running means ~ N(0, 0.2) and variances in
    [0.5, 2] (not PyTorch's 0 and 1, which would make BN folding look right when it is not).
    """
    g = torch.Generator().manual_seed(seed)

    def normal(t: torch.Tensor, std: float, mean: float = 0.0) -> torch.Tensor:
        return torch.randn(t.shape, generator=g, dtype=t.dtype) * std + mean

    def uniform(t: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
        return torch.rand(t.shape, generator=g, dtype=t.dtype) * (hi - lo) + lo

    done: set[int] = set()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, _NORMS):
                if getattr(module, "weight", None) is not None:
                    module.weight.copy_(uniform(module.weight, 0.5, 1.5))
                    module.bias.copy_(normal(module.bias, 0.1))
                if isinstance(module, (nn.BatchNorm1d, nn.BatchNorm2d)):
                    module.running_mean.copy_(normal(module.running_mean, 0.2))
                    module.running_var.copy_(uniform(module.running_var, 0.5, 2.0))
            elif isinstance(module, nn.Embedding):
                module.weight.copy_(normal(module.weight, 1.0))
            elif isinstance(module, (nn.Linear, nn.Conv2d)):
                w = module.weight
                fan_in = w[0].numel()
                module.weight.copy_(normal(w, math.sqrt(2.0 / fan_in)))
                if module.bias is not None:
                    module.bias.copy_(normal(module.bias, 0.05))
            else:
                continue
            done.update(id(p) for p in module.parameters(recurse=False))
            if isinstance(module, (nn.BatchNorm1d, nn.BatchNorm2d)):
                module.num_batches_tracked.zero_()
        for p in model.parameters():  # parameters of other module kinds
            if id(p) not in done:
                p.copy_(normal(p, 0.02))
    return model.eval()


# ---- the zoo -------------------------------------------------------------------------------------
MODELS = ("resnet18", "mobilenet_v2", "bert", "gpt2", "mlp")
SIZES = ("bench", "tiny")

_CLASSES = {"resnet18": ResNet18, "mobilenet_v2": MobileNetV2, "bert": BertEncoder,
            "gpt2": GPT2Decoder, "mlp": MLP}

#: Constructor arguments per (model, size), plus the input's non-batch shape under "input"
#: (an image (C, H, W), a sequence length "seq" for the transformers, features for the MLP).
_CONFIGS: dict[str, dict[str, dict[str, Any]]] = {
    "resnet18": {"bench": {"image": 224},
                 "tiny": {"num_classes": 10, "width": 8, "blocks": (1, 1, 1, 1), "image": 32}},
    "mobilenet_v2": {"bench": {"image": 224},
                     "tiny": {"num_classes": 10, "width_mult": 0.25, "last_channels": 64,
                              "stages": ((1, 8, 1, 1), (6, 12, 2, 2), (6, 16, 1, 2),
                                         (6, 24, 1, 1)),
                              "image": 32}},
    # The benchmark's encoder has 6 layers (BERT-base has 12): same shapes per layer, half
    # the time on a 2-core machine.
    "bert": {"bench": {"layers": 6, "hidden": 768, "heads": 12, "ffn": 3072, "seq": 128},
             "tiny": {"layers": 2, "hidden": 32, "heads": 4, "ffn": 64, "seq": 8}},
    # GPT-2 small has 12 layers; the benchmark runs 6 of them at seq 256.
    "gpt2": {"bench": {"layers": 6, "hidden": 768, "heads": 12, "ffn": 3072, "seq": 256},
             "tiny": {"layers": 2, "hidden": 32, "heads": 4, "ffn": 64, "seq": 8}},
    "mlp": {"bench": {"sizes": (1024, 4096, 4096, 1024)},
            "tiny": {"sizes": (16, 48, 40, 10), "activation": "gelu"}},
}

#: Keys of a config that describe the inputs, not the module.
_INPUT_KEYS = ("image", "seq")


def config(name: str, size: str = "bench", **overrides: Any) -> dict[str, Any]:
    """The constructor arguments and input sizes of ``make(name, size, **overrides)``."""
    if name not in _CONFIGS:
        raise ArgumentError(f"models: unknown model {name!r}; known: {', '.join(MODELS)}")
    if size not in SIZES:
        raise ArgumentError(f"models: unknown size {size!r}; known: {', '.join(SIZES)}")
    cfg = dict(_CONFIGS[name][size])
    cfg.update(overrides)
    return cfg


def example_inputs(name: str, cfg: dict[str, Any], batch: int = 1, seed: int = 0
                   ) -> tuple[torch.Tensor, ...]:
    """Random inputs for model ``name`` built from ``cfg`` (from ``config``): N(0, 1) floats,
    or token ids below ``vocab`` for a transformer with embeddings."""
    if not (isinstance(batch, int) and batch >= 1):
        raise ArgumentError(f"models: batch {batch!r} must be an int >= 1")
    g = torch.Generator().manual_seed(seed + 1)
    if name in ("resnet18", "mobilenet_v2"):
        c = cfg.get("in_channels", 3)
        return (torch.randn(batch, c, cfg["image"], cfg["image"], generator=g),)
    if name in ("bert", "gpt2"):
        if cfg.get("vocab"):
            return (torch.randint(0, cfg["vocab"], (batch, cfg["seq"]), generator=g),)
        return (torch.randn(batch, cfg["seq"], cfg["hidden"], generator=g),)
    return (torch.randn(batch, cfg["sizes"][0], generator=g),)


def make(name: str, size: str = "bench", batch: int = 1, seed: int = 0, **overrides: Any
         ) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """``(model, example_inputs)``: model ``name`` (one of ``MODELS``) at ``size`` ("bench":
    the benchmark's shapes; "tiny": a few channels and layers, for tests), random weights
    from ``seed``, eval mode, and inputs of batch ``batch``.  ``overrides`` replace config
    entries (constructor arguments, or ``image``/``seq`` for the inputs), e.g.
    ``make("gpt2", "tiny", seq=5, vocab=50, head="tied")``."""
    cfg = config(name, size, **overrides)
    kwargs = {k: v for k, v in cfg.items() if k not in _INPUT_KEYS}
    if name in ("bert", "gpt2") and cfg.get("vocab") and "max_seq" not in kwargs:
        kwargs["max_seq"] = max(cfg["seq"], 1024)
    with torch.device("meta"):  # no default initialization: randomize sets every tensor
        model = _CLASSES[name](**kwargs)
    model = randomize(model.to_empty(device="cpu"), seed)
    return model, example_inputs(name, cfg, batch, seed)
