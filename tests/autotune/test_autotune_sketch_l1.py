"""CPU TILE stages: the accumulator tile is bounded by a share of the L1 data cache
(``sketch.AccumulatorFits``, a ``space.Constraint``): every point the space's samplers
return keeps it in bounds, in the lowered program too, and the tuned programs still match
NumPy, at sizes that do and don't divide the tiles and at a symbolic size."""
import random

import numpy as np
import pytest

import tdsl as td
from tdsl import autotune
from tdsl.autotune.replay import replay
from tdsl.autotune.sketch import ACC_L1_SHARE, AccumulatorFits, Rule, accumulator_bytes
from tdsl.autotune.space import ConfigSpace, Constraint, SplitSpace
from tdsl.errors import TuningError
from tdsl.stmt import Allocate
from tdsl.target import CPUFacts, _parse_cache_size, cpu_facts, host_l1d_bytes
from tdsl.tensor import PlaceholderOp
from tdsl.visitor import post_order_visit

from tests.autotune.autotune_ops import batch_matmul, conv2d, matmul
from tests.autotune.helpers import fast_option

#: A small "L1" so that the bound bites at test sizes (limit: 512 B, 128 floats).
L1 = 1024
LIMIT = int(ACC_L1_SHARE * L1)


def _sym_matmul():
    n = td.var("n")
    return matmul(n=n, m=40, k=24)


SHAPES = {
    "matmul": lambda: matmul(64, 96, 40),
    "matmul_odd": lambda: matmul(37, 50, 29),     # extents with few divisors: tails
    "batch_matmul": lambda: batch_matmul(2, 24, 32, 8),
    "conv2d": lambda: conv2d(1, 8, 10, 10, 16),
    "matmul_symbolic": _sym_matmul,
}


def _task(name, l1d=L1):
    args, ref = SHAPES[name]()
    sizes = {"n": 48} if name.endswith("symbolic") else None
    return autotune.create_auto_task(args, sizes=sizes, l1d_bytes=l1d), args, ref


def _tile_plans(task):
    return [p for p in task.source.plans if p.rule is Rule.TILE]


def _acc(task, point):
    vals = task.space.values(point)
    return {p.name: accumulator_bytes([vals[f"{p.name}.S{d}"] for d in range(len(p.spatial))],
                                      p.dtype_bits // 8) for p in _tile_plans(task)}


def _local_bytes(func, stages):
    """Bytes of each accumulator the lowered program allocates (``<stage>.local``)."""
    out = {}

    def visit(n):
        if isinstance(n, Allocate) and n.buffer.name.removesuffix(".local") in stages:
            out[n.buffer.name] = int(np.prod([int(getattr(s, "value", s))
                                              for s in n.buffer.shape])) * 4
    post_order_visit(func.body, visit)
    return out


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_sampled_accumulator_tiles_fit_the_l1_share(name):
    """random, mutate and crossover only return points whose accumulator fits; the
    lowered program's local accumulator is that size; the unconstrained space has larger
    ones (the bound bites at this L1 size)."""
    task, _, _ = _task(name)
    space = task.space
    plans = _tile_plans(task)
    assert plans and [c.describe() for c in space.constraints]
    rng = random.Random(1)
    raw = [tuple(rng.randrange(d) for d in space.dims) for _ in range(300)]
    assert any(max(_acc(task, p).values()) > LIMIT for p in raw), "bound never bites"
    points = [space.random(rng) for _ in range(60)]
    points += [space.mutate(points[i], rng, n=2) for i in range(60)]
    points += [space.crossover(points[i], points[-i - 1], rng) for i in range(60)]
    stages = {p.name for p in plans}
    lowered = 0
    for i, point in enumerate(points):
        acc = _acc(task, point)
        assert max(acc.values()) <= LIMIT, (space.values(point), acc)
        if i % 10 == 0:
            c = task.candidate(point)
            assert c.valid, c.error
            for buf, nbytes in _local_bytes(c.func, stages).items():
                assert nbytes <= LIMIT, (buf, nbytes, c.config)
                lowered += 1
    assert lowered > 0


def test_bound_follows_the_cpu_l1_share():
    task, _, _ = _task("matmul", l1d=None)
    (rule,) = task.space.constraints
    assert isinstance(rule, AccumulatorFits)
    assert rule.limit_bytes == int(ACC_L1_SHARE * cpu_facts("llvm").l1d_bytes)
    assert rule.knobs == ("C.S0", "C.S1") and rule.element_bytes == 4


def test_gpu_space_has_no_l1_bound():
    args, _ = matmul(64, 64, 32)
    task = autotune.create_auto_task(args, target="cuda")
    assert not any(isinstance(c, AccumulatorFits) for c in task.space.constraints)


def test_point_outside_the_bound_is_an_illegal_candidate():
    task, _, _ = _task("matmul")
    values = task.space.values(task.space.default())
    values["C.S0"], values["C.S1"] = [1, 1, 8, 8], [1, 1, 6, 16]   # 64 x 96 floats: 24 KiB
    point = task.space.point_of(values)
    assert task.space.violated(point) is not None
    c = task.candidate(point)
    assert not c.valid and c.error.startswith("ScheduleError") and "AccumulatorFits" in c.error


@pytest.mark.parametrize("name", ["matmul_odd", "conv2d"])
def test_tuned_program_matches_numpy(name):
    task, args, ref = _task(name)
    res = autotune.RandomTuner(task, seed=2).tune(6, measure_option=fast_option(),
                                                 measure_default=False)
    assert res.best is not None, res.errors
    rng = np.random.default_rng(0)
    ins = [rng.uniform(-1, 1, [int(s.value) for s in t.shape]).astype("float32")
           for t in args if isinstance(t.op, PlaceholderOp)]
    f = td.build(replay(res.best.trace, task.outputs), task.args, target="llvm")
    expect = ref(*ins)
    out = np.zeros(expect.shape, np.float32)
    f(*ins, out)
    np.testing.assert_allclose(out, expect, rtol=2e-4, atol=2e-4)


def test_symbolic_candidates_match_numpy_at_other_sizes():
    """Points of a space made for n=48 (bounded accumulator) run right at n=48 and at
    sizes that don't divide the tiles."""
    task, args, ref = _task("matmul_symbolic")
    rng = random.Random(4)
    data = np.random.default_rng(4)
    checked = 0
    for _ in range(4):
        c = task.candidate(task.space.random(rng))
        assert c.valid, c.error
        f = td.build(replay(c.trace, task.outputs), task.args, target="llvm")
        for n in (48, 37, 5):
            a = data.uniform(-1, 1, (n, 24)).astype("float32")
            b = data.uniform(-1, 1, (24, 40)).astype("float32")
            out = np.zeros((n, 40), np.float32)
            f(a, b, out)
            np.testing.assert_allclose(out, ref(a, b), rtol=2e-4, atol=2e-4,
                                       err_msg=f"{c.config} n={n}")
        checked += 1
    assert checked == 4


# ---- the space's constraints ---------------------------------------------------------------
class _SumAtMost(Constraint):
    """Sum of the chosen split's innermost factors at most ``cap`` (monotone)."""

    def __init__(self, knobs, cap):
        self.knobs, self.cap = tuple(knobs), cap

    def holds(self, values):
        return sum(v[-1] for v in values.values()) <= self.cap


def _space(cap):
    sp = ConfigSpace()
    for i in range(3):
        sp.add(f"s{i}", SplitSpace(64, 2))
    sp.constrain(_SumAtMost(["s0", "s1", "s2"], cap))
    return sp


def test_random_fits_a_rare_constraint():
    """When rejection sampling misses (a constraint almost no point obeys), ``random``
    draws the constrained knobs one at a time: still a point that obeys it, not always
    the least demanding one."""
    sp = _space(4)              # innermost factors summing to <= 4 of 7^3 choices
    rng = random.Random(0)
    points = [sp.random(rng) for _ in range(50)]
    assert all(sp.obeys(p) for p in points)
    assert len(set(points)) > 1
    assert all(sp.obeys(sp.mutate(p, rng, n=2)) for p in points)
    assert all(sp.obeys(sp.crossover(p, q, rng)) for p, q in zip(points, points[1:]))
    every = list(sp.iter_points())
    assert every and all(sp.obeys(p) for p in every) and len(every) < len(sp)


def test_constraint_on_unknown_knob_is_refused():
    sp = ConfigSpace()
    sp.add("s0", SplitSpace(8, 2))
    with pytest.raises(TuningError, match="unknown knob"):
        sp.constrain(_SumAtMost(["s0", "nope"], 4))


# ---- the L1 size ---------------------------------------------------------------------------
def _fake_sysfs(tmp_path, entries):
    for i, (level, kind, size) in enumerate(entries):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    return str(tmp_path)


def test_l1d_read_from_sysfs(tmp_path):
    path = _fake_sysfs(tmp_path, [(1, "Instruction", "32K"), (1, "Data", "48K"),
                                  (2, "Unified", "2048K")])
    assert host_l1d_bytes(path) == 48 * 1024


def test_l1d_default_without_sysfs(tmp_path):
    assert host_l1d_bytes(str(tmp_path / "missing")) == 32 * 1024
    path = _fake_sysfs(tmp_path, [(1, "Data", "garbage")])
    assert host_l1d_bytes(path) == 32 * 1024


def test_cache_size_parsing():
    assert _parse_cache_size("32K") == 32768
    assert _parse_cache_size("2M\n") == 2 * 1024 ** 2
    assert _parse_cache_size("49152") == 49152
    assert _parse_cache_size("") == 0 and _parse_cache_size("xK") == 0
    assert CPUFacts(256, 2).l1d_bytes == 32 * 1024
