"""``nn.MultiheadAttention`` (batch_first, eval, need_weights=False) compiled by
``tdsl.compile`` against eager PyTorch: its SDPA reaches the graph's ``attention`` op, which
runs as the fused kernel where the size rule (``decompose.use_fused_attention``) says so and
decomposes otherwise; a symbolic sequence runs fused, bound to several lengths."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import tdsl  # noqa: E402
from tdsl.graph.passes.decompose import DECOMPOSE_MAX_SEQ_K  # noqa: E402

from ._models import rel_err  # noqa: E402

TOL = 1e-4


class _SelfAttention(torch.nn.Module):
    def __init__(self, embed: int = 32, heads: int = 4):
        super().__init__()
        self.mha = torch.nn.MultiheadAttention(embed, heads, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x, need_weights=False)[0]


def _model():
    torch.manual_seed(13)
    return _SelfAttention().eval()


def _attention_kernels(c) -> int:
    return sum("attention" in ops for _, ops in c.report.graph.fused)


@pytest.mark.parametrize("seq", [37, DECOMPOSE_MAX_SEQ_K + 6])
def test_mha_matches_eager_and_uses_the_rule(seq):
    m = _model()
    x = torch.randn(2, seq, 32, generator=torch.Generator().manual_seed(seq))
    c = tdsl.compile(m, (x,))
    with torch.no_grad():
        ref = m(x)
    assert rel_err(c(x), ref) <= TOL
    fused = seq > DECOMPOSE_MAX_SEQ_K
    assert _attention_kernels(c) == (1 if fused else 0)
    assert c.report.graph.passes.decomposed == (0 if fused else 1)


def test_mha_symbolic_seq_runs_fused():
    m = _model()
    x = torch.randn(1, 9, 32)
    c = tdsl.compile(m, (x,), dynamic={1: "seq"})
    assert _attention_kernels(c) == 1
    g = torch.Generator().manual_seed(5)
    for seq in (5, 130, 300):
        x = torch.randn(1, seq, 32, generator=g)
        with torch.no_grad():
            ref = m(x)
        assert rel_err(c(x), ref) <= TOL, seq


def test_mha_tuning_tasks_cover_its_attention():
    """``tune_model``'s tasks include the attention kernel as one FUSED sketch plan whose
    space has several candidates; sampled ones build and are legal."""
    import random

    from tdsl.autotune.model_tuning import model_tasks
    from tdsl.autotune.sketch import Rule
    tasks, _ = model_tasks(_model(), (torch.randn(1, 40, 32),), dynamic={1: "seq"})
    att = [t for t in tasks if any(p.rule is Rule.FUSED for p in t.source.plans)]
    assert len(att) == 1, [t.name for t in tasks]
    t = att[0]
    assert "T_attn.rows" in t.space.names and len(t.space) > 1
    r = random.Random(2)
    for _ in range(2):
        c = t.candidate(t.space.random(r))
        assert c.valid, (c.config, c.error)
