"""The sketch plans ``ops.attention`` as one FUSED rule (``autotune.sketch_fused``): its knobs
are the default schedule's tiles (queries per task, register tiles, a decode step's parallel
parts), the space has several candidates, and every candidate builds, keeps the one-pass form
(no seq_q x seq_k buffer) and matches PyTorch's SDPA -- causal and not, lengths that don't
divide the query vectors or the key block, the decode shape."""
import itertools

import numpy as np
import pytest

import tdsl as td
from tdsl import autotune, ops
from tdsl.autotune.replay import replay
from tdsl.autotune.sketch import Rule
from tdsl.stmt import Allocate
from tdsl.visitor import post_order_visit

torch = pytest.importorskip("torch", reason="PyTorch's SDPA is the reference")
RNG = np.random.default_rng(7)


def _task(sq, sk, causal, d=16, block_k=32):
    q = td.placeholder((1, 2, sq, d), name="q")
    k = td.placeholder((1, 2, sk, d), name="k")
    v = td.placeholder((1, 2, sk, d), name="v")
    o = ops.attention(q, k, v, causal=causal, block_k=block_k)
    return autotune.create_auto_task([q, k, v, o])


def _largest_buffer(func):
    sizes = []

    def visit(n):
        if isinstance(n, Allocate):
            sizes.append(int(np.prod([int(e.value) for e in n.buffer.shape])))
    post_order_visit(func.body, visit)
    return max(sizes)


def _check_points(task, sq, sk, causal, points):
    a = [RNG.standard_normal((1, 2, n, 16)).astype("float32") for n in (sq, sk, sk)]
    ref = torch.nn.functional.scaled_dot_product_attention(
        *[torch.from_numpy(x) for x in a], is_causal=causal).numpy()
    for p in points:
        c = task.candidate(p)
        assert c.valid, (c.config, c.error)
        assert _largest_buffer(c.func) < sq * sk, c.config      # one pass: tiles only
        f = td.build(replay(c.trace, task.outputs), task.args, target="llvm")
        out = np.full((1, 2, sq, 16), 7.0, "float32")
        f(*a, out)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5, err_msg=str(c.config))


def test_attention_is_one_fused_plan_with_tile_knobs():
    task = _task(70, 70, True)
    rules = {p.name: p.rule for p in task.source.plans}
    assert all(r is Rule.FUSED for n, r in rules.items() if n.startswith("T_attn")), rules
    assert set(task.space.names) == {"T_attn.rows", "T_attn.score_keys", "T_attn.acc_rows"}
    assert len(task.space) > 1
    assert len(task.space.knobs["T_attn.rows"].entities) > 1


@pytest.mark.parametrize("sq,sk,causal", [(70, 70, True), (37, 100, False)])
def test_every_rows_and_tile_choice_matches_torch(sq, sk, causal):
    """Each choice of every knob appears in some checked point (lengths not multiples of
    the 16 query lanes nor of the 32-key block)."""
    task = _task(sq, sk, causal)
    n = [len(task.space.knobs[k].entities) for k in task.space.names]
    points = [[i % e for e in n] for i in range(max(n))]
    _check_points(task, sq, sk, causal, points)


def test_decode_task_offers_parallel_parts_and_each_matches_torch():
    task = _task(1, 300, False)
    assert [e.value for e in task.space.knobs["T_attn.rows"].entities] == [1]
    parts = [e.value for e in task.space.knobs["T_attn.parts"].entities]
    assert parts == [1, 2, 4, 8], parts
    idx = {k: i for i, k in enumerate(task.space.names)}
    points = []
    for p in range(len(parts)):
        pt = [0] * len(idx)
        pt[idx["T_attn.parts"]] = p
        points.append(pt)
    _check_points(task, 1, 300, False, points)


def test_tuning_job_runs_on_attention(tmp_path):
    """A short tuning run over the space picks a point and its schedule builds right."""
    q = td.placeholder((1, 2, 40, 16), name="q")
    k = td.placeholder((1, 2, 40, 16), name="k")
    v = td.placeholder((1, 2, 40, 16), name="v")
    o = ops.attention(q, k, v, causal=False, block_k=32)
    sch, args = autotune.auto_schedule([q, k, v, o], trials=4, tuner="random")
    f = td.build(sch, args, target="llvm")
    a = [RNG.standard_normal((1, 2, 40, 16)).astype("float32") for _ in range(3)]
    out = np.zeros((1, 2, 40, 16), "float32")
    f(*a, out)
    ref = torch.nn.functional.scaled_dot_product_attention(
        *[torch.from_numpy(x) for x in a]).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
