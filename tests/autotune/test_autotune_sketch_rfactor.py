"""rfactor as an option of multi-level tiling: a data-reuse reduction (matmul-like) with a
small spatial extent and a long reduction gets an ``rf`` knob; each of its values is legal,
replays to the program the search scored, and matches NumPy through LLVM and the
interpreter, at sizes that do and don't divide the parts and the tiles."""
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import tdsl as td
from tdsl import autotune
from tdsl.autotune.replay import replay
from tdsl.autotune.sketch import RFACTOR_MIN_STEPS, RFACTOR_PARTS, Rule
from tdsl.lowering import lower
from tdsl.structural import structural_hash

from tests.autotune.helpers import check_schedule

#: 4 lanes and 4 cores: the knob's threshold (256 outputs) does not depend on the host
TARGET = "llvm -mcpu=x86-64 -num-threads=4"


def matmul(m, n, k):
    A = td.placeholder((m, k), "float32", name="A")
    B = td.placeholder((k, n), "float32", name="B")
    r = td.reduce_axis((0, k), name="r")
    C = td.compute((m, n), lambda i, j: td.sum(A[i, r] * B[r, j], axis=r), name="C")
    return [A, B, C], lambda a, b: a.astype("float64") @ b


def batch_matmul_bias_relu(b, m, n, k):
    """A tiny batched matmul with an elementwise consumer (fused into the tiles without
    rfactor; with it, the consumer is scheduled at root)."""
    A = td.placeholder((b, m, k), "float32", name="A")
    B = td.placeholder((b, k, n), "float32", name="B")
    bias = td.placeholder((n,), "float32", name="bias")
    r = td.reduce_axis((0, k), name="r")
    C = td.compute((b, m, n), lambda x, i, j: td.sum(A[x, i, r] * B[x, r, j], axis=r), name="C")
    D = td.compute((b, m, n), lambda x, i, j: td.max(C[x, i, j] + bias[j], td.const(0.0)),
                   name="D")
    return [A, B, bias, D], \
        lambda a, bb, bias: np.maximum(np.matmul(a.astype("float64"), bb) + bias, 0)


def _task(make, *shape):
    args, ref = make(*shape)
    return autotune.create_auto_task(args, TARGET), args, ref


def _tile(task):
    (p,) = [p for p in task.source.plans if p.rule is Rule.TILE]
    return p


def _check(task, args, ref, point, interpreter, seed=0):
    """Legal, replays to the scored program, and right (LLVM; the interpreter if asked)."""
    c = task.candidate(point)
    assert c.valid, c.error
    sch = replay(c.trace, task.outputs)
    assert structural_hash(lower(sch, task.args, name=c.func.name)) == c.prog_hash, c.config
    rng = np.random.default_rng(seed)
    ins = [rng.uniform(-1, 1, [int(s.value) for s in t.shape]).astype("float32")
           for t in args[:-1]]
    check_schedule(sch, task, ins, np.asarray(ref(*ins)), interpreter, str(c.config), TARGET)
    return c


# ---- when the knob is offered -----------------------------------------------------------------
def test_small_spatial_long_reduction_gets_the_rfactor_knob():
    task, _, _ = _task(matmul, 16, 16, 65536)
    p = _tile(task)
    parts = [e.value for e in task.space.knobs[f"{p.name}.rf"].entities]
    assert parts == [0, *RFACTOR_PARTS], "0 (no rfactor) and every part count"
    # a reduction too short for many parts offers only the counts that keep enough steps
    task, _, _ = _task(matmul, 8, 16, 200)
    parts = [e.value for e in task.space.knobs[f"{_tile(task).name}.rf"].entities]
    assert parts == [0] + [f for f in RFACTOR_PARTS if f * RFACTOR_MIN_STEPS <= 200] == [0, 2, 4, 8]


@pytest.mark.parametrize("shape", [(1024, 1024, 1024), (256, 256, 64), (64, 64, 64)])
def test_enough_spatial_parallelism_gets_no_rfactor_knob(shape):
    task, _, _ = _task(matmul, *shape)
    p = _tile(task)
    assert f"{p.name}.rf" not in task.space.names, task.space.names


# ---- every value: legal, replays, right -------------------------------------------------------
@pytest.mark.parametrize("shape,interpreter", [
    ((8, 16, 1024), False),      # every part count divides the reduction, whole vectors
    ((12, 20, 1031), False),     # a prime reduction: no part count divides it; nor do tiles
    ((6, 14, 263), True),        # small enough for the interpreter, nothing divides
])
def test_every_rfactor_part_count_matches_numpy(shape, interpreter):
    task, args, ref = _task(matmul, *shape)
    p = _tile(task)
    names = task.space.names
    i = names.index(f"{p.name}.rf")
    rng = random.Random(0)
    for j in range(1, task.space.dims[i]):
        for base in (task.space.default(), task.space.random(rng)):
            point = list(base)
            point[i] = j
            c = _check(task, args, ref, tuple(point), interpreter and j % 2 == 1)
            assert f"{args[-1].name}.rf" in str(c.func), "no partial-result stage"


def test_rfactored_tile_with_a_fused_consumer_matches_numpy():
    """The consumer fused into the tiles without rfactor goes to root with it."""
    task, args, ref = _task(batch_matmul_bias_relu, 2, 8, 12, 517)
    p = _tile(task)
    assert p.consumer == "D"
    i = task.space.names.index(f"{p.name}.rf")
    for j in range(task.space.dims[i]):
        point = list(task.space.default())
        point[i] = j
        _check(task, args, ref, tuple(point), interpreter=(j == 1))


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_sampled_rfactor_points_match_numpy(data):
    shape = data.draw(st.sampled_from([(16, 16, 2048), (6, 14, 777)]), label="shape")
    task, args, ref = _task(matmul, *shape)
    p = _tile(task)
    point = [data.draw(st.integers(0, d - 1), label=k)
             for k, d in zip(task.space.names, task.space.dims)]
    i = task.space.names.index(f"{p.name}.rf")
    point[i] = data.draw(st.integers(1, task.space.dims[i] - 1), label="rf")
    c = task.candidate(tuple(point))
    if not c.valid:                                   # the tiling itself may be illegal
        assert c.error.split(":")[0] in ("ScheduleError", "LoweringError", "CodeSizeError")
        return
    _check(task, args, ref, tuple(point), interpreter=False)
