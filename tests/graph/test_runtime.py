"""The runtime: fallbacks, memory planning, fresh outputs, input checks."""
import numpy as np
import pytest
import torch

import tdsl as td
from tdsl.errors import TDSLError
from tdsl.graph import compile_graph
from tdsl.graph.builder import Builder
from tdsl.graph.plan import make_plan

from .helpers import close, rand, t


def _erfinv_graph(rest_pool=True):
    n = td.var("n")
    b = Builder()
    x = b.input((n, 33), name="x")
    w = rand(np.random.default_rng(1), 33, 33) * 0.2
    y = b.op("tanh", b.op("dense", x, b.const(w)))
    z = b.torch(torch.special.erfinv, [y], (n, 33), name="erfinv")   # no tdsl mapping
    z = b.op("mul", z, b.scalar(0.5))
    b.output(b.op("dense", z, b.const(w)))
    return compile_graph(b.graph, rest_pool=rest_pool), w


def test_fallback_in_the_middle(rng):
    cg, w = _erfinv_graph()
    assert cg.report.fallbacks == {"erfinv": 1}
    assert "fallback" in str(cg.graph)
    for batch in (1, 17):
        xa = rand(rng, batch, 33)
        ref = torch.special.erfinv(torch.tanh(t(xa) @ t(w).T)) * 0.5 @ t(w).T
        close(cg(xa)[0], ref)


def test_fallback_result_of_wrong_shape_is_an_error(rng):
    b = Builder()
    x = b.input((4, 5), name="x")
    y = b.torch(lambda a: a.sum(0), [x], (4, 5), name="bad")
    b.output(b.op("relu", y))
    cg = compile_graph(b.graph)
    with pytest.raises(TDSLError, match="bad"):
        cg(rand(rng, 4, 5))


def test_outputs_are_fresh_and_intermediates_reuse_buffers(rng):
    b = Builder()
    x = b.input((16, 40), name="x")
    y = x
    for i in range(6):   # row ops end kernels: 6 kernels, a chain of intermediates
        y = b.op("softmax", b.op("mul", y, b.scalar(1.5)), axis=-1)
    b.output(y)
    cg = compile_graph(b.graph)
    assert cg.report.kernels == 6
    plan = make_plan(cg.steps, cg.optimized.inputs, cg.optimized.outputs, {})
    assert len(plan.buffers) == 2      # ping-pong
    xa = rand(rng, 16, 40)
    a, = cg(xa)
    b2, = cg(xa + 1)
    assert a is not b2 and not np.shares_memory(a, b2)
    ref = t(xa)
    for _ in range(6):
        ref = torch.softmax(ref * 1.5, -1)
    close(a, ref)


def test_input_checks(rng):
    n = td.var("n")
    b = Builder()
    x = b.input((n, 8), name="x")
    r = b.input((n, 8), name="r")
    b.output(b.op("add", x, r))
    cg = compile_graph(b.graph)
    with pytest.raises(TDSLError, match="dtype"):
        cg(rand(rng, 2, 8).astype(np.float64), rand(rng, 2, 8))
    with pytest.raises(TDSLError, match="dimension"):
        cg(rand(rng, 2, 8), rand(rng, 3, 8))
    with pytest.raises(TDSLError, match="input"):
        cg(rand(rng, 2, 8))
    xa = rand(rng, 8, 2).T            # non-contiguous, and a torch tensor
    close(cg(xa, torch.ones(2, 8))[0], xa + 1)


def test_graph_output_that_is_an_input_or_constant(rng):
    b = Builder()
    x = b.input((3, 4), name="x")
    c = b.const(rand(rng, 12))
    b.output(x, b.op("reshape", x, shape=(12,)), c, b.op("add", x, b.scalar(1.0)))
    cg = compile_graph(b.graph)
    xa = rand(rng, 3, 4)
    o = cg(xa)
    close(o[0], xa)
    close(o[1], xa.reshape(12))
    close(o[2], c.const)
    close(o[3], xa + 1)
    assert not any(np.shares_memory(a, xa) for a in o)


def test_a_kernel_whose_default_schedule_fails_is_built_plainly(rng, monkeypatch):
    from tdsl import ops
    from tdsl.errors import ScheduleError

    def refuse(outputs, target="llvm"):
        raise ScheduleError("ops.schedule", None, "refused by the test")
    monkeypatch.setattr(ops, "schedule", refuse)
    b = Builder()
    x = b.input((3, 23), name="x")          # a shape no other test builds (no cache hit)
    b.output(b.op("softmax", b.op("mul", x, b.scalar(3.0)), axis=-1))
    cg = compile_graph(b.graph)
    assert cg.report.notes and "refused by the test" in cg.report.notes[0]
    xa = rand(rng, 3, 23)
    close(cg(xa)[0], torch.softmax(t(xa) * 3, -1))


def test_plans_are_kept_for_the_most_recent_bindings_only(rng, monkeypatch):
    monkeypatch.setenv("TDSL_GRAPH_PLANS", "2")
    n = td.var("n")
    b = Builder()
    x = b.input((n, 6), name="x")
    b.output(b.op("softmax", b.op("exp", x), axis=-1))
    cg = compile_graph(b.graph)
    for batch in (1, 2, 3, 1):
        xa = rand(rng, batch, 6)
        close(cg(xa)[0], torch.softmax(torch.exp(t(xa)), -1))
    assert [k for k in cg._plans] == [(3,), (1,)]


def test_thread_counts_share_kernels_and_agree(rng):
    b = Builder()
    x = b.input((37, 50), name="x")
    w = rand(rng, 45, 50)
    b.output(b.op("relu", b.op("dense", x, b.const(w))))
    one = compile_graph(b.graph, num_threads=1)
    two = compile_graph(b.graph, num_threads=2)
    assert two.report.built == 0                        # the same kernel, from the cache
    xa = rand(rng, 37, 50)
    for _ in range(2):                                  # alternate: each sets its count
        close(one(xa)[0], np.maximum(xa @ w.T, 0))
        close(two(xa)[0], np.maximum(xa @ w.T, 0))
