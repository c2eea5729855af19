"""Attention masks through ``tdsl.compile``: bool (True attends) and additive float masks,
with a query whose every key is masked.  PyTorch's attention gives such a row 0; the
decomposed form (matmul, softmax, matmul) gave NaN until its softmax learned
``masked_rows``, and the fused kernel gives 0.  Both paths are checked against eager."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import tdsl  # noqa: E402
from tdsl import ops  # noqa: E402


class SDPA(torch.nn.Module):
    def forward(self, q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m)


def _mask(kind: str, sq: int, sk: int, g: torch.Generator) -> torch.Tensor:
    keep = torch.rand(sq, sk, generator=g) > 0.3
    keep[3] = False                                   # query 3 sees no key
    if kind == "bool":
        return keep
    return torch.where(keep, torch.randn(sq, sk, generator=g), float("-inf"))


@pytest.mark.parametrize("kind", ["bool", "float"])
@pytest.mark.parametrize("sq,sk", [(37, 37), (20, 1100)])     # decomposed; fused (> 1024 keys)
def test_fully_masked_query_gives_zero_like_pytorch(kind, sq, sk):
    g = torch.Generator().manual_seed(sq + sk)
    q, k, v = (torch.randn(1, 2, n, 16, generator=g) for n in (sq, sk, sk))
    m = _mask(kind, sq, sk, g)
    model = SDPA()
    c = tdsl.compile(model, (q, k, v, m))
    assert not c.report.fallbacks, c.report
    with torch.no_grad():
        want = model(q, k, v, m)
    got = c(q, k, v, m)
    assert not torch.isnan(want).any()
    assert torch.equal(got[:, :, 3], torch.zeros_like(got[:, :, 3]))
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_softmax_masked_rows_against_numpy():
    import tdsl as td
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 33)).astype(np.float32)
    x[1] = -np.inf
    x[2, ::2] = -np.inf
    X = td.placeholder((5, 33), name="X")
    Y = ops.softmax(X, masked_rows=True)
    f = td.build(ops.schedule(Y), [X, Y])
    y = np.empty_like(x)
    f(x, y)
    with np.errstate(invalid="ignore"):
        e = np.exp(x - x.max(axis=1, keepdims=True))
        want = np.nan_to_num(e / e.sum(axis=1, keepdims=True), nan=0.0)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-7)
    assert (y[1] == 0).all() and (y[2, ::2] == 0).all()
