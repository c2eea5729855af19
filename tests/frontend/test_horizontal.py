"""Horizontal fusion of Q/K/V projections (``passes.horizontal``) through ``tdsl.compile``:
the zoo's BERT layer and a hand-written GQA-like attention (projections 64/16/16, with and
without bias) match eager at batch 1 and 3 and with a symbolic batch and sequence, with one
GEMM per layer for the three projections and no copy kernel for their slices."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tdsl  # noqa: E402
from tdsl.testing import models  # noqa: E402

from ._models import rel_err  # noqa: E402

TOL = 1e-4


def _fused(c) -> list:
    return [ops for _, ops in c.report.graph.fused]


def _dense_kernels(c) -> int:
    return sum("dense" in ops for ops in _fused(c))


def _compile_both(monkeypatch, model, args, **kw):
    """``model`` compiled with the merge and without it (the pass stubbed out)."""
    import tdsl.graph.passes as passes
    c = tdsl.compile(model, args, **kw)
    with monkeypatch.context() as m:
        m.setattr(passes, "merge_parallel_gemms", lambda g: 0)
        base = tdsl.compile(model, args, **kw)
    return c, base


def _check_fewer(c, base, merged: int) -> None:
    """``merged`` GEMMs fewer, and no kernel more: every slice is read in place or inside
    a kernel that was there anyway (no copy kernel of its own)."""
    assert c.report.graph.passes.merged_gemms == merged
    assert _dense_kernels(c) == _dense_kernels(base) - merged
    assert len(_fused(c)) == len(_fused(base)) - merged


class GQA(nn.Module):
    """Four query heads of 16 sharing one key/value head: projections of 64, 16 and 16
    features from one input, causal attention, an output projection."""

    def __init__(self, hidden: int = 32, bias: bool = True) -> None:
        super().__init__()
        self.q = nn.Linear(hidden, 64, bias=bias)
        self.k = nn.Linear(hidden, 16, bias=bias)
        self.v = nn.Linear(hidden, 16, bias=bias)
        self.o = nn.Linear(64, hidden, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q(x).reshape(b, s, 4, 16).transpose(1, 2)
        k = self.k(x).reshape(b, s, 1, 16).transpose(1, 2).expand(b, 4, s, 16)
        v = self.v(x).reshape(b, s, 1, 16).transpose(1, 2).expand(b, 4, s, 16)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(a.transpose(1, 2).reshape(b, s, 64))


def _gqa(bias: bool) -> nn.Module:
    torch.manual_seed(4)
    m = GQA(bias=bias).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0.0, 0.3)
    return m


def _check(model, c, shapes, hidden):
    g = torch.Generator().manual_seed(11)
    for batch, seq in shapes:
        x = torch.randn(batch, seq, hidden, generator=g)
        with torch.no_grad():
            ref = model(x)
        out = c(x)
        assert out.shape == ref.shape
        assert rel_err(out, ref) <= TOL, (batch, seq, rel_err(out, ref))


@pytest.mark.parametrize("batch", [1, 3])
def test_bert_layer_one_gemm_for_qkv(monkeypatch, batch):
    model, ex = models.make("bert", "tiny", seq=37, batch=batch, seed=3)
    layers = models.config("bert", "tiny")["layers"]
    c, base = _compile_both(monkeypatch, model, ex)
    _check(model, c, [(batch, 37)], 32)
    # per layer: QKV, attention output, FFN in, FFN out (six before the merge)
    assert _dense_kernels(c) == 4 * layers
    _check_fewer(c, base, 2 * layers)


def test_bert_layer_symbolic_batch_and_seq(monkeypatch):
    model, ex = models.make("bert", "tiny", seq=9, batch=2, seed=5)
    layers = models.config("bert", "tiny")["layers"]
    c, base = _compile_both(monkeypatch, model, ex, dynamic={0: "batch", 1: "seq"})
    assert _dense_kernels(c) == 4 * layers
    _check_fewer(c, base, 2 * layers)
    _check(model, c, [(1, 37), (3, 130), (2, 5)], 32)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("seq", [37, 130])
def test_gqa_projections_merge(monkeypatch, bias, batch, seq):
    model = _gqa(bias)
    x = torch.randn(batch, seq, 32, generator=torch.Generator().manual_seed(2))
    c, base = _compile_both(monkeypatch, model, (x,))
    _check(model, c, [(batch, seq)], 32)
    assert _dense_kernels(c) == 2          # q|k|v and the output projection (four before)
    _check_fewer(c, base, 2)


def test_gqa_symbolic_batch_and_seq(monkeypatch):
    model = _gqa(True)
    c, base = _compile_both(monkeypatch, model, (torch.randn(2, 9, 32),),
                            dynamic={0: "batch", 1: "seq"})
    _check_fewer(c, base, 2)
    _check(model, c, [(1, 37), (3, 130), (2, 5)], 32)


class TwoInputs(nn.Module):
    """Three projections, but of two different inputs, and one of a live weight."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 24)
        self.b = nn.Linear(16, 24)

    def forward(self, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        # softmax reads a slice as its prologue: it would merge, were the inputs one
        return (F.softmax(self.a(x), -1) * F.softmax(self.b(y), -1)
                + F.softmax(F.linear(x, w), -1))


def test_no_merge_across_inputs_or_with_a_runtime_weight():
    torch.manual_seed(1)
    m = TwoInputs().eval()
    args = (torch.randn(3, 16), torch.randn(3, 16), torch.randn(24, 16))
    c = tdsl.compile(m, args)
    with torch.no_grad():
        ref = m(*args)
    assert rel_err(c(*args), ref) <= TOL
    assert c.report.graph.passes.merged_gemms == 0
    assert _dense_kernels(c) == 3


def test_gpt2_split_of_one_qkv_projection_is_read_in_place():
    """GPT-2 projects Q, K and V with one Linear and splits it: the fused causal attention
    (130 keys: two key blocks) reads the three unit-step slices in place, no copies."""
    model, ex = models.make("gpt2", "tiny", seq=130, seed=3)
    c = tdsl.compile(model, ex)
    _check(model, c, [(1, 130)], models.config("gpt2", "tiny")["hidden"])
    copies = [ops for ops in _fused(c)
              if "slice" in ops and set(ops) <= {"slice", "reshape", "transpose"}]
    assert copies == []
    assert sum("slice" in ops and "attention" in ops for ops in _fused(c)) == \
        models.config("gpt2", "tiny")["layers"]
