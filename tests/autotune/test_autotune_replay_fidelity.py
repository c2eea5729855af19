"""A candidate's trace replays to the very program the search scored: ``Task.candidate``
lowers the schedule it built directly (not a replay of its trace), and the builder
compiles the replayed trace, so the two must agree for every point of every space."""
from __future__ import annotations

import random

import pytest

from tdsl import autotune, ops
from tdsl.autotune.replay import replay
from tdsl.lowering import lower
from tdsl.structural import structural_hash

try:
    from .test_autotune_sketch_rules import CLASSES
except ImportError:
    from test_autotune_sketch_rules import CLASSES

import tdsl as td


def _conv():
    X = td.placeholder((1, 8, 10, 10), name="X")
    W = td.placeholder((8, 8, 3, 3), name="W")
    return [X, W, ops.conv2d(X, W, stride=1, padding=1)]


def _tasks():
    out = {name: autotune.create_auto_task(make()[0]) for name, make in CLASSES.items()}
    out["conv2d"] = autotune.create_auto_task(_conv())
    return out


@pytest.mark.parametrize("name", sorted([*CLASSES, "conv2d"]))
def test_direct_lowering_equals_the_replayed_trace(name):
    task = _tasks()[name]
    rng = random.Random(7)
    checked = 0
    for _ in range(12):
        c = task.candidate(task.space.random(rng))
        if not c.valid:
            continue
        func = lower(replay(c.trace, task.outputs), task.args, name=c.func.name)
        assert structural_hash(func) == c.prog_hash, f"{name} {c.config}: trace does not replay"
        checked += 1
    assert checked >= 3, f"{name}: too few legal points sampled ({checked})"


def test_template_candidates_are_replayed_onto_the_task():
    """A template builds its own tensors: its candidates are lowered by replaying their
    trace onto the task's (lowering the template's schedule with the task's arguments
    would refuse every point)."""
    try:
        from .helpers import small_matmul
    except ImportError:
        from helpers import small_matmul
    task = autotune.create_task(small_matmul, (32, 32, 32))
    rng = random.Random(3)
    cands = [task.candidate(task.space.random(rng)) for _ in range(6)]
    assert all(c.valid for c in cands), [c.error for c in cands]
