"""auto_schedule's generated space: every candidate legal and correct against NumPy."""
import random

import numpy as np
import pytest

import tdsl as td
from tdsl import autotune
from tdsl.autotune.replay import replay
from tdsl.autotune.sketch import Rule
from tdsl.tensor import PlaceholderOp

from tests.autotune.autotune_ops import OPERATORS
from tests.autotune.helpers import fast_option


def _inputs(args, rng):
    return [rng.uniform(-1, 1, [int(s.value) for s in t.shape]).astype("float32")
            for t in args if isinstance(t.op, PlaceholderOp)]


def _check_candidates(name, n, seed=0):
    args, ref = OPERATORS[name]()
    return _check_task_candidates(autotune.create_auto_task(args), args, ref, n, seed, name)


def _check_task_candidates(task, args, ref, n, seed=0, name=""):
    """``n`` random candidates of ``task``: the legal ones built with LLVM match ``ref``."""
    rng = np.random.default_rng(seed)
    ins = _inputs(args, rng)
    expect = ref(*ins)
    r = random.Random(seed)
    legal = 0
    for _ in range(n):
        c = task.candidate(task.space.random(r))
        if not c.valid:
            # illegal points are refused with the schedule/lowering error, never built
            assert c.error.split(":")[0] in ("ScheduleError", "LoweringError"), c.error
            continue
        legal += 1
        f = td.build(replay(c.trace, task.outputs), task.args, target="llvm")
        out = np.zeros(expect.shape, np.float32)
        f(*ins, out)
        np.testing.assert_allclose(out, expect, rtol=2e-4, atol=2e-4,
                                   err_msg=f"{name}: candidate {c.config}")
    assert legal >= n // 2, f"{name}: only {legal}/{n} legal candidates"
    return task


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_auto_schedule_candidates_are_correct(name):
    _check_candidates(name, 8)


def test_rules_chosen_without_per_operator_code():
    rules = {}
    for name, make in OPERATORS.items():
        args, _ = make()
        task = autotune.create_auto_task(args)
        rules[name] = {p.name: p.rule for p in task.source.plans}
    assert rules["matmul"]["C"] is Rule.TILE
    assert rules["conv2d"]["pad"] is Rule.INLINE and rules["conv2d"]["Y"] is Rule.TILE
    assert rules["depthwise_conv2d"]["Y"] is Rule.TILE
    assert rules["softmax"]["e"] is Rule.MATERIALIZE    # exp read by the sum and the divide
    assert rules["softmax"]["mx"] is Rule.REDUCE and rules["softmax"]["Y"] is Rule.ROOT
    assert rules["layernorm"]["mean"] is Rule.REDUCE


def test_rfactor_offered_for_little_spatial_parallelism():
    X = td.placeholder((1, 4096), "float32", name="X")
    k = td.reduce_axis((0, 4096), name="k")
    S = td.compute((1,), lambda i: td.sum(X[i, k], axis=k), name="S")
    task = autotune.create_auto_task([X, S])
    modes = {tuple(e.val)[0] for e in task.space.knobs["S.form"].entities}
    assert modes == {0, 1, 2}      # none, vectorized partial sums, parallel partial sums
    x = np.random.default_rng(0).uniform(-1, 1, (1, 4096)).astype("float32")
    names = task.space.names
    for e in task.space.knobs["S.form"].entities:
        point = tuple(task.space.knobs[n].entities.index(e) if n == "S.form" else 0
                      for n in names)
        c = task.candidate(point)
        assert c.valid, c.error
        f = td.build(replay(c.trace, task.outputs), task.args)
        out = np.zeros((1,), np.float32)
        f(x, out)
        np.testing.assert_allclose(out, x.sum(axis=1), rtol=1e-4)


def test_auto_schedule_tunes_and_returns_a_buildable_schedule(tmp_path):
    args, ref = OPERATORS["matmul"](64, 64, 64)
    s, targs = autotune.auto_schedule(args, target="llvm", trials=8, batch_size=8,
                                      db=str(tmp_path / "t.db"), measure_option=fast_option())
    f = td.build(s, targs, target="llvm")
    rng = np.random.default_rng(0)
    a, b = _inputs(args, rng)
    c = np.zeros((64, 64), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["matmul", "conv2d", "softmax"])
def test_gpu_sketch_candidates_compile_and_emulate_correctly(name):
    """SSSRRSRS tiling bound to blocks/vthreads/threads, shared-memory staging; run under the
    CUDA emulation harness (no GPU needed)."""
    args, ref = OPERATORS[name]()
    task = autotune.create_auto_task(args, target="cuda")
    if any(p.rule is Rule.TILE for p in task.source.plans):
        assert any(".S0" in n for n in task.space.names)
    rng = np.random.default_rng(1)
    ins = _inputs(args, rng)
    expect = ref(*ins)
    r = random.Random(1)
    legal = 0
    for _ in range(4):
        c = task.candidate(task.space.random(r))
        if not c.valid:
            continue
        legal += 1
        f = td.build(replay(c.trace, task.outputs), task.args, target="cuda")
        out = np.zeros(expect.shape, np.float32)
        f.emulate(*ins, out)
        np.testing.assert_allclose(out, expect, rtol=2e-4, atol=2e-4,
                                   err_msg=f"{name}: candidate {c.config}")
    assert legal >= 2


def test_sketch_schedules_stages_that_share_a_name():
    """Two reductions and an elementwise stage all called 'compute' (the default name): the
    rules and knobs are keyed by stage position, so each gets its own schedule and every
    candidate computes the right answer."""
    A = td.placeholder((32, 48), "float32", name="A")
    W = td.placeholder((48, 24), "float32", name="W")
    k = td.reduce_axis((0, 48), name="k")
    B = td.compute((32, 24), lambda i, j: td.sum(A[i, k] * W[k, j], axis=k))
    C = td.compute((32, 24), lambda i, j: B[i, j] * 2.0 + 1.0)
    r = td.reduce_axis((0, 24), name="r")
    D = td.compute((32,), lambda i: td.max(C[i, r], axis=r))
    task = autotune.create_auto_task([A, W, D])
    labels = {key.split(".")[0] for key in task.space.knobs}
    assert {"compute#2", "compute#4"} <= labels, labels
    _check_task_candidates(task, [A, W, D],
                           lambda a, w: ((a.astype("float64") @ w) * 2 + 1).max(axis=1), 8)
