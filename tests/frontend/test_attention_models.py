"""The zoo's transformers (bert: attention, gpt2: causal attention) compiled by
``tdsl.compile`` against eager PyTorch: static sequences that are no multiple of the fused
kernel's key block (37, 130), and one compile with a symbolic batch and sequence."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import tdsl  # noqa: E402
from tdsl.ops.attention import BLOCK_K  # noqa: E402
from tdsl.testing import models  # noqa: E402

from ._models import rel_err  # noqa: E402

TOL = 1e-4


def _attention_kernels(c) -> int:
    return sum("attention" in ops for _, ops in c.report.graph.fused)


@pytest.mark.parametrize("name", ["bert", "gpt2"])
@pytest.mark.parametrize("seq", [37, 130])
def test_static_seq_matches_eager(name, seq):
    model, ex = models.make(name, "tiny", seq=seq, seed=3)
    c = tdsl.compile(model, ex)
    with torch.no_grad():
        ref = model(*ex)
    assert rel_err(c(*ex), ref) <= TOL
    # causal runs fused from two key blocks (130) on; short non-causal ones decompose
    fused = name == "gpt2" and seq > BLOCK_K
    assert _attention_kernels(c) == (2 if fused else 0)
    assert c.report.graph.passes.decomposed == (0 if fused else 2)


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_symbolic_batch_and_seq_one_compile(name):
    import tdsl.graph.runtime as rt
    calls = []
    orig = rt.compile_graph

    def counted(*a, **k):
        calls.append(1)
        return orig(*a, **k)
    model, ex = models.make(name, "tiny", seq=9, batch=2, seed=5)
    rt.compile_graph = counted
    try:
        c = tdsl.compile(model, ex, dynamic={0: "batch", 1: "seq"})
    finally:
        rt.compile_graph = orig
    assert len(calls) == 1
    assert _attention_kernels(c) == 2        # a symbolic key length runs fused
    g = torch.Generator().manual_seed(11)
    for batch, seq in ((1, 37), (3, 130), (2, 5)):
        x = torch.randn(batch, seq, 32, generator=g)
        with torch.no_grad():
            ref = model(x)
        out = c(x)
        assert out.shape == ref.shape
        assert rel_err(out, ref) <= TOL, (batch, seq, rel_err(out, ref))
