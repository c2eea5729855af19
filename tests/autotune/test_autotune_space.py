"""Knob spaces, templates, and trace replay."""
import random

import numpy as np
import pytest

import tdsl as td
from tdsl import autotune
from tdsl.autotune.replay import name_signature, rename_trace, replay
from tdsl.autotune.space import OtherOptionSpace, ReorderSpace, SplitSpace
from tdsl.errors import TuningError


def test_split_space_factors_multiply_to_extent():
    sp = SplitSpace(24, 3)
    sizes = [e.size for e in sp.entities]
    assert all(np.prod(s) == 24 for s in sizes)
    assert len(set(sizes)) == len(sizes) == 30       # 10 ways for 2**3 times 3 for 3
    assert sizes[0] == (24, 1, 1)                   # the default choice does not split


def test_split_space_max_factor_filter_and_tails():
    sp = SplitSpace(64, 2, max_factor=8)
    assert max(e.size[-1] for e in sp.entities) == 8
    sp = SplitSpace(64, 2, filter=lambda s: s[-1] % 16 == 0)
    assert {e.size[-1] for e in sp.entities} == {16, 32, 64}
    tails = SplitSpace(100, 2, policy="power2")
    assert (4, 32) in [e.size for e in tails.entities]   # 32 does not divide 100: a guarded tail
    with pytest.raises(TuningError):
        SplitSpace(0, 2)
    with pytest.raises(TuningError):
        SplitSpace(8, 2, policy="bogus")


def test_knob_and_reorder_spaces():
    k = OtherOptionSpace([0, 16, 64])
    assert [e.val for e in k.entities] == [0, 16, 64]
    assert k.index_of(16) == 1
    r = ReorderSpace(3)
    assert len(r) == 6 and r.entities[0].perm == (0, 1, 2)
    c = ReorderSpace(3, "candidate", [[2, 1, 0]])
    assert [e.perm for e in c.entities] == [(2, 1, 0)]
    with pytest.raises(TuningError):
        ReorderSpace(3, "candidate", [[0, 0, 1]])


@autotune.template("test_matmul")
def matmul_template(n, m, k):
    A = td.placeholder((n, k), "float32", name="A")
    B = td.placeholder((k, m), "float32", name="B")
    r = td.reduce_axis((0, k), name="r")
    C = td.compute((n, m), lambda i, j: td.sum(A[i, r] * B[r, j], axis=r), name="C")
    s = td.create_schedule(C.op)
    cfg = autotune.get_config()
    i, j = s[C].op.axis
    cfg.define_split("tile_i", i, num_outputs=3)
    cfg.define_split("tile_j", j, num_outputs=2, filter=lambda sz: sz[-1] >= 4)
    cfg.define_split("tile_k", k, num_outputs=2)            # an int extent works too
    cfg.define_knob("vec", [0, 1])
    io, im, ii = cfg["tile_i"].apply(s, C, i)
    jo, ji = cfg["tile_j"].apply(s, C, j)
    ko, ki = cfg["tile_k"].apply(s, C, r)
    cfg.define_reorder("order", [io, jo, im, ko, ii, ki], policy="candidate",
                       candidate=[[0, 1, 2, 3, 4, 5], [0, 1, 3, 2, 4, 5]])
    cfg["order"].apply(s, C, [io, jo, im, ko, ii, ki])
    if cfg["vec"].val:
        s[C].vectorize(ji)
    cfg.add_flop(2 * n * m * k)
    return s, [A, B, C]


def test_template_default_call_and_space():
    s, args = matmul_template(16, 16, 8)
    assert [t.name for t in args] == ["A", "B", "C"]
    task = autotune.create_task(matmul_template, (16, 16, 8), target="llvm")
    assert task.space.names == ["tile_i", "tile_j", "tile_k", "vec", "order"]
    assert task.flop == 2 * 16 * 16 * 8
    assert len(task.key) == 24
    # the key is the computation's: the same template with other args is another task
    assert autotune.create_task(matmul_template, (16, 16, 16)).key != task.key


def test_template_application_matches_numpy(rng):
    task = autotune.create_task(matmul_template, (16, 16, 8))
    a = rng.random((16, 8), dtype=np.float32)
    b = rng.random((8, 16), dtype=np.float32)
    r = random.Random(0)
    seen = 0
    for _ in range(12):
        c = task.candidate(task.space.random(r))
        if not c.valid:
            assert "ScheduleError" in c.error or "LoweringError" in c.error
            continue
        seen += 1
        from tdsl.interpreter import run
        out = np.zeros((16, 16), np.float32)
        run(c.func, a, b, out)
        np.testing.assert_allclose(out, a @ b, rtol=1e-5)
    assert seen >= 6


def test_get_config_outside_template_raises():
    with pytest.raises(TuningError, match="outside a template"):
        autotune.get_config()


def test_create_task_rejects_plain_function():
    with pytest.raises(TuningError, match="template"):
        autotune.create_task(lambda: None, ())


def _cached_matmul():
    A = td.placeholder((64, 64), "float32", name="A")
    B = td.placeholder((64, 64), "float32", name="B")
    k = td.reduce_axis((0, 64), name="k")
    C = td.compute((64, 64), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def _schedule(C):
    s = td.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, 16, 16)
    f = s[C].fuse(io, jo)
    s[C].parallel(f)
    s[CC].compute_at(s[C], f)
    ko, ki = s[CC].split(s[CC].op.reduce_axis[0], factor=4)
    s[CC].reorder(ko, *s[CC].op.axis, ki)
    s[C].vectorize(ji)
    return s


def test_trace_replay_roundtrip_with_compute_at():
    A, B, C = _cached_matmul()
    s = _schedule(C)
    expect = td.lower(s, [A, B, C]).script()
    s2 = replay(s.trace.to_json(), [C])
    assert td.lower(s2, [A, B, C]).script() == expect


def test_trace_rename_to_other_names():
    A, B, C = _cached_matmul()
    trace = _schedule(C).trace.to_json()
    X = td.placeholder((64, 64), "float32", name="X")
    Y = td.placeholder((64, 64), "float32", name="Y")
    r = td.reduce_axis((0, 64), name="r")
    Z = td.compute((64, 64), lambda p, q: td.sum(X[p, r] * Y[r, q], axis=r), name="Z")
    renamed = rename_trace(trace, name_signature([C]), name_signature([Z]))
    s2 = replay(renamed, [Z])
    f1 = td.lower(_schedule(C), [A, B, C])
    f2 = td.lower(s2, [X, Y, Z])
    from tdsl.structural import structural_equal
    assert structural_equal(f1, f2)


def test_malformed_trace_is_a_tuning_error():
    A, B, C = _cached_matmul()
    with pytest.raises(TuningError):
        replay("{not json", [C])
    with pytest.raises(TuningError, match="unknown primitive"):
        replay('[{"primitive": "explode", "stage": "C"}]', [C])
