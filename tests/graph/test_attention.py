"""The graph's ``attention`` op: the fused kernel (``ops.attention``) where it applies, the
matmul/softmax/matmul decomposition elsewhere, both against PyTorch's SDPA."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tdsl as td
from tdsl.graph import GraphError, compile_graph
from tdsl.graph.builder import Builder
from tdsl.graph.passes import Group, fuse, optimize
from tdsl.graph.passes.decompose import DECOMPOSE_MAX_SEQ_K, use_fused_attention
from tdsl.graph.passes.fusion import VIEW_MAX_SEQ_K
from tdsl.ops.attention import BLOCK_K

from .helpers import close, rand, t


def _kernel_ops(cg) -> list:
    return [ops for _, ops in cg.report.fused]


def _sdpa(q, k, v, **kw):
    return F.scaled_dot_product_attention(t(q), t(k), t(v), **kw)


def _layer_graph(seq, causal, impl="auto", heads=3, d=16):
    """A layer's attention as imported: (2, seq, heads*d) projections viewed and permuted
    heads-first, the result permuted back."""
    b = Builder()
    qkv = []
    for nm in "qkv":
        x = b.op("reshape", b.input((2, seq, heads * d), name=nm), shape=(2, seq, heads, d))
        qkv.append(b.op("transpose", x, axes=(0, 2, 1, 3)))
    y = b.op("attention", *qkv, causal=causal, scale=None, impl=impl)
    b.output(b.op("reshape", b.op("transpose", y, axes=(0, 2, 1, 3)), shape=(2, seq, heads * d)))
    return b.graph, y.producer


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_fused_symbolic_batch_and_seq(rng, causal, scale):
    """One compile, bound to several (batch, seq): the tail key block (37, 130 are no
    multiple of 128), two blocks, one query."""
    n, s = td.var("n"), td.var("s")
    b = Builder()
    q, k, v = (b.input((n, 3, s, 16), name=nm) for nm in "qkv")
    b.output(b.op("attention", q, k, v, causal=causal, scale=scale))
    cg = compile_graph(b.graph)
    assert cg.report.passes.decomposed == 0
    assert _kernel_ops(cg) == [["attention"]]
    assert "attention" in str(cg.graph)
    for batch, seq in ((1, 37), (2, 130), (3, 1)):
        qa, ka, va = (rand(rng, batch, 3, seq, 16) for _ in range(3))
        close(cg(qa, ka, va)[0], _sdpa(qa, ka, va, is_causal=causal, scale=scale))


@pytest.mark.parametrize("mask", ["float", "bool"])
def test_fused_with_mask(rng, mask):
    """A mask broadcasting from (seq, seq), additive or boolean, stays fused."""
    s = td.var("s")
    b = Builder()
    q, k, v = (b.input((2, 3, s, 16), name=nm) for nm in "qkv")
    m = b.input((s, s), "bool" if mask == "bool" else "float32", name="mask")
    b.output(b.op("attention", q, k, v, m, causal=False, scale=None))
    cg = compile_graph(b.graph)
    assert _kernel_ops(cg) == [["attention"]]
    for seq in (5, 130):
        qa, ka, va = (rand(rng, 2, 3, seq, 16) for _ in range(3))
        if mask == "float":
            ma = rand(rng, seq, seq)
        else:
            ma = rng.random((seq, seq)) < 0.7
            np.fill_diagonal(ma, True)
        close(cg(qa, ka, va, ma)[0], _sdpa(qa, ka, va, attn_mask=t(ma)))


def test_prologue_permutes_read_in_place(rng):
    """(B, S, H*D) projections viewed (B, S, H, D) and permuted heads-first: the fused
    kernel reads them through the permutes (no copy kernel before it)."""
    g, _node = _layer_graph(130, True)
    cg = compile_graph(g)
    assert ["transpose"] * 3 + ["attention"] in _kernel_ops(cg)
    assert not any(ops == ["transpose"] for ops in _kernel_ops(cg))
    xs = [rand(rng, 2, 130, 48) for _ in range(3)]
    h = [t(x).reshape(2, 130, 3, 16).transpose(1, 2) for x in xs]
    ref = F.scaled_dot_product_attention(*h, is_causal=True).transpose(1, 2).reshape(2, 130, 48)
    close(cg(*xs)[0], ref)


def test_decomposed_where_fused_does_not_apply(rng):
    """k and v shared by every batch entry and head (broadcast from 1): ops.attention wants
    equal batches and heads, so the predicate sends it to the decomposition."""
    b = Builder()
    q = b.input((2, 3, 19, 16), name="q")
    k, v = (b.input((1, 1, 23, 16), name=nm) for nm in "kv")
    node_out = b.op("attention", q, k, v, causal=False, scale=None)
    b.output(node_out)
    assert not use_fused_attention(node_out.producer)
    cg = compile_graph(b.graph)
    assert cg.report.passes.decomposed == 1
    assert not any("attention" in ops for ops in _kernel_ops(cg))
    qa, ka, va = rand(rng, 2, 3, 19, 16), rand(rng, 1, 1, 23, 16), rand(rng, 1, 1, 23, 16)
    rep = (lambda x: np.broadcast_to(x, (2, 3, 23, 16)).copy())
    close(cg(qa, ka, va)[0], _sdpa(qa, rep(ka), rep(va)))


@pytest.mark.parametrize("impl", ["fused", "decomposed"])
def test_causal_with_mask_applies_both(rng, impl):
    """causal and a mask together, as PyTorch applies them: fused (``ops.attention`` takes
    both) or decomposed on request."""
    b = Builder()
    q, k, v = (b.input((1, 2, 9, 8), name=nm) for nm in "qkv")
    m = b.input((9, 9), name="mask")
    b.output(b.op("attention", q, k, v, m, causal=True, scale=None, impl=impl))
    cg = compile_graph(b.graph)
    assert cg.report.passes.decomposed == (impl == "decomposed")
    qa, ka, va = (rand(rng, 1, 2, 9, 8) for _ in range(3))
    ma = rand(rng, 9, 9)
    causal = torch.ones(9, 9, dtype=torch.bool).tril()
    ref = _sdpa(qa, ka, va, attn_mask=t(ma).masked_fill(~causal, float("-inf")))
    close(cg(qa, ka, va, ma)[0], ref)


@pytest.mark.parametrize("impl", ["fused", "decomposed"])
def test_causal_shorter_queries_top_left(rng, impl):
    """PyTorch's is_causal aligns the mask top-left (query i sees keys j <= i) when there
    are fewer queries than keys; the decomposition used to align it bottom-right."""
    b = Builder()
    q = b.input((1, 2, 5, 8), name="q")
    k, v = (b.input((1, 2, 11, 8), name=nm) for nm in "kv")
    b.output(b.op("attention", q, k, v, causal=True, scale=None, impl=impl))
    cg = compile_graph(b.graph)
    assert cg.report.passes.decomposed == (impl == "decomposed")
    qa, ka, va = rand(rng, 1, 2, 5, 8), rand(rng, 1, 2, 11, 8), rand(rng, 1, 2, 11, 8)
    close(cg(qa, ka, va)[0], _sdpa(qa, ka, va, is_causal=True))


def test_impl_decomposed_and_bad_impl(rng):
    b = Builder()
    q, k, v = (b.input((1, 2, 7, 8), name=nm) for nm in "qkv")
    b.output(b.op("attention", q, k, v, causal=False, scale=None, impl="decomposed"))
    cg = compile_graph(b.graph)
    assert cg.report.passes.decomposed == 1
    qa, ka, va = (rand(rng, 1, 2, 7, 8) for _ in range(3))
    close(cg(qa, ka, va)[0], _sdpa(qa, ka, va))
    for impl, match in (("flash", "impl must be one of"), ("fused", "does not apply")):
        b = Builder()
        q = b.input((2, 2, 7, 8), name="q")
        k, v = (b.input((1, 1, 7, 8), name=nm) for nm in "kv")
        b.output(b.op("attention", q, k, v, causal=False, scale=None, impl=impl))
        with pytest.raises(GraphError, match=match):
            compile_graph(b.graph)


@pytest.mark.parametrize("seq,causal,fused", [
    (37, False, False), (DECOMPOSE_MAX_SEQ_K, False, False),
    (DECOMPOSE_MAX_SEQ_K + 1, False, True), (BLOCK_K, True, False), (BLOCK_K + 1, True, True),
    (td.var("s"), False, True), (td.var("s"), True, True)])
def test_auto_choice_by_size(seq, causal, fused):
    """"auto": attention over a constant key length up to DECOMPOSE_MAX_SEQ_K (causal: one
    key block) decomposes (as fast there, see its comment); longer or symbolic runs fused."""
    _g, node = _layer_graph(seq, causal)
    assert use_fused_attention(node) is fused


def test_static_short_non_causal_decomposed_matches(rng):
    g, _node = _layer_graph(37, False)
    cg = compile_graph(g)
    assert cg.report.passes.decomposed == 1
    assert not any("attention" in ops for ops in _kernel_ops(cg))
    xs = [rand(rng, 2, 37, 48) for _ in range(3)]
    h = [t(x).reshape(2, 37, 3, 16).transpose(1, 2) for x in xs]
    ref = F.scaled_dot_product_attention(*h).transpose(1, 2).reshape(2, 37, 48)
    close(cg(*xs)[0], ref)


@pytest.mark.parametrize("seq,in_place", [(VIEW_MAX_SEQ_K, True), (VIEW_MAX_SEQ_K + 1, False),
                                           (td.var("s"), False)])
def test_views_read_in_place_only_for_few_keys(seq, in_place):
    """Past VIEW_MAX_SEQ_K keys (or a symbolic count) the permuted q, k, v are copied
    heads-first by their own kernels (fusion only: nothing built)."""
    g, _node = _layer_graph(seq, True)
    opt, _stats = optimize(g)
    groups = [[n.op for n in s.nodes] for s in fuse(opt) if isinstance(s, Group)]
    att = next(ops for ops in groups if "attention" in ops)
    assert (att == ["transpose"] * 3 + ["attention"]) is in_place
    assert sum(ops == ["transpose"] for ops in groups) == (0 if in_place else 3)
