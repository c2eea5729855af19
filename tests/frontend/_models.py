"""Tiny PyTorch models for the frontend tests (random weights, eval mode)."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def randomize_bn(model: nn.Module) -> nn.Module:
    """BatchNorm with non-trivial running statistics and affine parameters."""
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.copy_(torch.rand(m.num_features, generator=g) * 2 - 1)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) * 1.5 + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.bias.copy_(torch.rand(m.num_features, generator=g) - 0.5)
    return model.eval()


class SmallCNN(nn.Module):
    """conv+BN+relu (strided), max pool, depthwise dilated conv, relu6, pointwise conv,
    avg pool, adaptive pool, flatten, linear."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.dw = nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=8)
        self.pw = nn.Conv2d(8, 12, 1)
        self.fc = nn.Linear(12 * 2 * 2, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn(self.c1(x)), inplace=True)
        x = F.max_pool2d(x, 2)
        x = F.relu6(self.dw(x))
        x = F.avg_pool2d(self.pw(x), 2)
        x = F.adaptive_avg_pool2d(x, (2, 2))
        return self.fc(torch.flatten(x, 1))


class Block(nn.Module):
    """A pre-norm transformer block: layer_norm, qkv linear, causal sdpa, residual, gelu MLP."""

    def __init__(self, d: int = 16, heads: int = 2, vocab: int = 40) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.f1, self.f2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        return x + self.f2(F.gelu(self.f1(self.ln2(x))))


class MLP(nn.Module):
    def __init__(self, sizes: tuple = (20, 32, 24, 5)) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for k, layer in enumerate(self.layers):
            x = layer(x)
            if k + 1 < len(self.layers):
                x = F.silu(x) if k % 2 else F.gelu(x, approximate="tanh")
        return torch.softmax(x, -1)


class WithCumprod(nn.Module):
    """A model with an op tdsl does not map (cumprod): it must fall back to PyTorch."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.sigmoid(self.fc(x))
        return torch.cumprod(y, dim=-1) * 2.0 + y


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Max error relative to the output's scale."""
    return float((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
