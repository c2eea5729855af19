"""The model jobs of ``benchmarks/model_jobs.py``: the two variants compute the same thing,
and the weights count the layers of the real architectures."""
from __future__ import annotations

import math
import os
import sys

import numpy as np
import pytest

import tdsl as td
from tdsl import autotune

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import model_jobs as mj  # noqa: E402


def _run(outs, seed_arrays):
    """Build the default schedule of ``outs`` and run it on the named inputs."""
    task = autotune.create_auto_task(outs, "llvm")
    arrays = [seed_arrays[t.name] if t.name in seed_arrays else
              np.zeros(tuple(int(s) for s in t.shape), "float32") for t in task.args]
    s = td.create_schedule([o.op for o in outs])
    td.build(s, task.args, target="llvm")(*arrays)
    return arrays[-1]


@pytest.mark.parametrize("model", mj.MODELS)
def test_variants_agree(model):
    ops_spec = mj.model_suite(model, "ops", quick=True)
    hand_spec = mj.model_suite(model, "handwritten", quick=True)
    assert [(n, w) for n, _, w in ops_spec] == [(n, w) for n, _, w in hand_spec]
    rng = np.random.default_rng(1)
    for (name, outs_a, _), (_, outs_b, _) in zip(ops_spec, hand_spec):
        task = autotune.create_auto_task(outs_a, "llvm")
        ins = {t.name: rng.uniform(-1, 1, tuple(int(s) for s in t.shape)).astype("float32")
               for t in task.args[:-1]}
        if "g" in ins:
            ins["g"] = ins["g"] + 2.0                     # a layernorm's scale away from 0
        a, b = _run(outs_a, ins), _run(outs_b, ins)
        assert np.abs(a).max() > 0, name
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-4, err_msg=name)


def test_relu6_conv_against_numpy():
    layer = mj.Conv(8, 8, 9, 9, 3, 2, groups=8, act="relu6")      # depthwise, odd size
    rng = np.random.default_rng(2)
    x = rng.uniform(-4, 4, (1, 8, 9, 9)).astype("float32")
    w = rng.uniform(-1, 1, (8, 1, 3, 3)).astype("float32")
    b = rng.uniform(-1, 1, (8,)).astype("float32")
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    oh, ow = layer.out_hw
    ref = np.zeros((1, 8, oh, ow), "float32")
    for i in range(oh):
        for j in range(ow):
            ref[0, :, i, j] = (xp[0, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3] * w[:, 0]).sum((1, 2))
    ref = np.clip(ref + b[None, :, None, None], 0, 6)
    for build in (mj.build_ops, mj.build_handwritten):
        out = _run([build(layer)], {"x": x, "w": w, "b": b})
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_weights_count_the_architectures_layers():
    # ResNet-18: 17 convs on the main path, 3 shortcut projections, the fc layer
    assert sum(n for _, n in mj.distinct(mj.resnet18_layers())) == 21
    assert len(mj.distinct(mj.resnet18_layers())) == 16
    # MobileNetV2: stem, 17 blocks (16 with an expansion), last conv, classifier
    layers = mj.mobilenet_v2_layers()
    assert len(layers) == 1 + 17 * 2 + 16 + 1 + 1
    assert sum(1 for x in layers if isinstance(x, mj.Conv) and x.groups > 1) == 17
    spec = mj.model_suite("bert", "ops")
    assert dict((n, w) for n, _, w in spec)["layernorm_128x768"] == 2
    assert math.isclose(sum(w for *_, w in spec), 9)
