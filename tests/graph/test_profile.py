"""``CompiledGraph.profile`` / ``tdsl.compile(...).profile``: each kernel and fallback timed
on its own, attributed to the right step, at each binding of the symbolic sizes."""
import numpy as np
import pytest
import torch

import tdsl
import tdsl as td
from tdsl.errors import TDSLError
from tdsl.graph import compile_graph
from tdsl.graph.builder import Builder

from .helpers import close, rand, t


def _graph(cost_ms=None):
    """dense+tanh -> torch fallback -> mul -> dense -> torch fallback; ``cost_ms[i]``, when
    given, is added to a fake clock by fallback i each time it runs."""
    n = td.var("n")
    rng = np.random.default_rng(1)
    w = rand(rng, 33, 33) * 0.2
    b = Builder()
    x = b.input((n, 33), name="x")
    y = b.op("tanh", b.op("dense", x, b.const(w)))

    def slow(fn, i):
        def run(a):
            if cost_ms is not None:
                cost_ms["now"] += cost_ms[i] * 1e-3
            return fn(a)
        return run
    z = b.torch(slow(torch.special.erfinv, 0), [y], (n, 33), name="erfinv")
    z = b.op("dense", b.op("mul", z, b.scalar(0.5)), b.const(w))
    z = b.torch(slow(torch.special.expm1, 1), [z], (n, 33), name="expm1")
    b.output(z)
    return compile_graph(b.graph, num_threads=1), w


def _reference(xa, w):
    y = torch.special.erfinv(torch.tanh(t(xa) @ t(w).T)) * 0.5 @ t(w).T
    return torch.special.expm1(y)


def test_profile_names_every_step_and_keeps_the_answer(rng):
    cg, w = _graph()
    for batch in (1, 5, 16):
        xa = rand(rng, batch, 33)
        prof = cg.profile(xa, repeat=3, warmup=1)
        kernels = [k.name for k in cg.kernels.values()]
        names = [s.label.name for s in prof.steps]
        # call order: dense+tanh, erfinv, the kernels of mul and dense, expm1
        assert names[:2] == [kernels[0], "torch.erfinv"] and names[-1] == "torch.expm1"
        assert names[2:-1] == kernels[1:] and len(kernels) >= 2
        assert [s.label.kind for s in prof.steps] == (
            ["kernel", "torch"] + ["kernel"] * (len(kernels) - 1) + ["torch"])
        assert prof.steps[0].label.ops == ("dense", "tanh")
        assert all(s.label.shape == (batch, 33) for s in prof.steps)    # this binding's
        assert all(s.median_s >= s.min_s >= 0 for s in prof.steps)
        assert prof.repeat == 3 and prof.call_s > 0
        table = str(prof)
        assert "torch.erfinv" in table and "dense + tanh" in table and f"{batch}x33" in table
        close(cg(xa)[0], _reference(xa, w))      # profiling leaves the plan usable


def test_profile_attributes_time_to_the_step_that_spent_it(rng, monkeypatch):
    """A fake clock that only the fallbacks advance (2 ms and 5 ms per run): the profile
    must give each fallback exactly its cost and the kernels none."""
    import time as _time
    cost = {0: 2.0, 1: 5.0, "now": 0.0}
    cg, w = _graph(cost)
    monkeypatch.setattr(_time, "thread_time", lambda: cost["now"])
    prof = cg.profile(rand(rng, 4, 33), repeat=4, warmup=0, clock="cpu")
    got = {s.label.name: s.median_s * 1e3 for s in prof.steps}
    assert got["torch.erfinv"] == pytest.approx(2.0)
    assert got["torch.expm1"] == pytest.approx(5.0)
    assert sum(v for k, v in got.items() if not k.startswith("torch.")) == 0.0
    assert prof.by_kind() == pytest.approx({"kernel": 0.0, "torch": 7e-3})
    assert prof.call_s == pytest.approx(7e-3)
    assert [s.label.name for s in prof.top(1)] == ["torch.expm1"]
    assert list(prof.by_op())[:2] == ["torch.expm1", "torch.erfinv"]
    assert f"({len(prof.steps) - 2} more)" in prof.table(2)
    assert "PyTorch fallbacks 7.000 ms" in prof.table()


def test_profile_rejects_bad_arguments(rng):
    cg, _ = _graph()
    xa = rand(rng, 2, 33)
    with pytest.raises(TDSLError, match="clock"):
        cg.profile(xa, clock="gpu")
    with pytest.raises(TDSLError, match="repeat"):
        cg.profile(xa, repeat=0)
    with pytest.raises(TDSLError, match="input"):
        cg.profile(rand(rng, 2, 34))


def test_compiled_model_profile():
    model = torch.nn.Sequential(torch.nn.Linear(24, 40), torch.nn.GELU(),
                                torch.nn.Linear(40, 8), torch.nn.LogSoftmax(-1)).eval()
    c = tdsl.compile(model, torch.randn(3, 24), dynamic={0: "batch"},
                     options={"num_threads": 1})
    for batch in (3, 7):
        x = torch.randn(batch, 24)
        prof = c.profile(x, repeat=2)
        assert len(prof.steps) == c.report.graph.kernels
        assert all(s.label.kind == "kernel" for s in prof.steps)
        assert prof.steps[-1].label.shape == (batch, 8)
        assert any("dense" in s.label.ops for s in prof.steps)
        with torch.no_grad():
            torch.testing.assert_close(c(x), model(x), rtol=1e-4, atol=1e-5)
