"""torch.compile(model, backend="tdsl"): the entry point, correctness vs eager, Dynamo's
recompiles with dynamic=True (no more backend calls than aot_autograd-based backends such as
Inductor need), grad mode runs eagerly, options reach compile_graph."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch._dynamo  # noqa: E402

from tdsl.frontend import Backend  # noqa: E402

from ._models import MLP, Block, SmallCNN, WithCumprod, randomize_bn, rel_err  # noqa: E402

TOL = 1e-4


@pytest.fixture(autouse=True)
def _reset():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_entry_point_registered():
    from importlib.metadata import entry_points
    eps = [e for e in entry_points(group="torch_dynamo_backends") if e.name == "tdsl"]
    assert eps and eps[0].value == "tdsl.frontend.dynamo:backend"
    assert "tdsl" in torch._dynamo.list_backends()


def test_backend_by_name_mlp():
    model = MLP().eval()
    f = torch.compile(model, backend="tdsl")
    x = torch.randn(4, 20)
    with torch.no_grad():
        assert rel_err(f(x), model(x)) <= TOL


def _count_calls(model, make, backend) -> int:
    """Backend invocations of torch.compile(dynamic=True) over batches 3, 8, 17, 1."""
    calls = []

    def counting(gm, example_inputs, **kw):
        calls.append(1)
        return backend(gm, example_inputs)
    torch._dynamo.reset()
    f = torch.compile(model, backend=counting, dynamic=True)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for b in (3, 8, 17, 1):
            x = make(b, g)
            out = f(x)
            assert rel_err(out, model(x)) <= TOL, b
    return len(calls)


@pytest.mark.parametrize("which", ["mlp", "cnn"])
def test_dynamic_batch_recompiles_like_aot_backends(which):
    """Dynamo's own guards (0/1 specialization, conv's meta guards) cost the same backend
    calls for every aot_autograd backend; tdsl adds none (its graphs are symbolic)."""
    if which == "mlp":
        model, make = MLP().eval(), lambda b, g: torch.randn(b, 20, generator=g)
    else:
        model = randomize_bn(SmallCNN())
        make = lambda b, g: torch.randn(b, 3, 16, 16, generator=g)     # noqa: E731
    from torch._dynamo.backends.debugging import aot_eager
    ref = _count_calls(model, make, aot_eager)
    be = Backend()
    got = _count_calls(model, make, be)
    assert got == ref, (got, ref)
    assert all(not r.eager for r in be.compiles), [str(r) for r in be.compiles]
    if which == "mlp":
        assert got <= 2


def test_grad_mode_runs_eagerly_with_report():
    model = MLP().eval()
    be = Backend()
    f = torch.compile(model, backend=be)
    x = torch.randn(3, 20)
    out = f(x)                                   # grad mode, parameters require grad
    assert rel_err(out, model(x)) <= TOL
    out.sum().backward()                         # still trainable: it ran eagerly
    assert model.layers[0].weight.grad is not None
    assert be.compiles and "grad" in be.compiles[0].eager[0]


def test_fallback_under_dynamo():
    model = WithCumprod().eval()
    be = Backend()
    f = torch.compile(model, backend=be)
    x = torch.randn(3, 6)
    with torch.no_grad():
        assert rel_err(f(x), model(x)) <= TOL
    assert be.compiles[-1].fallbacks == {"aten.cumprod.default": 1}


def test_options_reach_compile_graph(monkeypatch, tmp_path):
    import tdsl.graph.runtime as rt
    seen = {}
    orig = rt.compile_graph

    def spy(graph, target="llvm", db=None, num_threads=None, **kw):
        seen["db"], seen["num_threads"] = db, num_threads
        return orig(graph, target=target, db=None, num_threads=num_threads, **kw)
    monkeypatch.setattr(rt, "compile_graph", spy)
    model = MLP((6, 4)).eval()
    db = str(tmp_path / "model.db")
    f = torch.compile(model, backend="tdsl", options={"db": db, "num_threads": 1})
    x = torch.randn(2, 6)
    with torch.no_grad():
        assert rel_err(f(x), model(x)) <= TOL
    assert seen == {"db": db, "num_threads": 1}


def test_transformer_block_attention_kept_whole():
    """Under aot_autograd sdpa arrives as _scaled_dot_product_flash_attention_for_cpu: one
    graph 'attention' node, not a fallback."""
    model = Block().eval()
    be = Backend()
    f = torch.compile(model, backend=be)
    ids = torch.randint(0, 40, (2, 6))
    with torch.no_grad():
        assert rel_err(f(ids), model(ids)) <= TOL
    rep = be.compiles[-1]
    assert not rep.eager and rep.fallbacks == {}, str(rep)
    assert "aten._scaled_dot_product_flash_attention_for_cpu.default" in rep.imported.mapped
