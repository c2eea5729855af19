"""scripts/tune_models.py: several batches of a model tuned as one job, timed as the model
runs (one thread: thread CPU clock; operands rotated through copies)."""
import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the model zoo needs PyTorch")

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("tune_models_script",
                                                  ROOT / "scripts" / "tune_models.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_batches_are_one_job_with_the_union_of_their_tasks():
    from tdsl import autotune
    from tdsl.testing import models
    tm = _script()
    args = tm.parse(["--models", "mlp", "--size", "tiny", "--batch", "1", "3"])
    assert args.batch == [1, 3] and tm.model_key("mlp", args) == "mlp/tiny/b1+3/t1"
    tasks, weights = tm.batch_tasks("mlp", args)
    want: dict = {}
    for b in (1, 3):
        model, inputs = models.make("mlp", "tiny", batch=b, seed=0)
        for t, w in zip(*autotune.model_tasks(model, inputs)):
            want[t.key] = want.get(t.key, 0) + w
    assert {t.key: w for t, w in zip(tasks, weights)} == want
    assert len(tasks) == len(want) > 1


def test_the_runner_times_like_the_model():
    tm = _script()
    args = tm.parse(["--models", "mlp"])
    assert args.batch == [1] and args.rotate_mb == 64.0
    opt = tm.measure_option(1, 1, 5, 25.0, args.rotate_mb)
    assert opt.runner.clock_for("llvm") == "thread"
    assert opt.runner.options()["rotate_bytes"] == 64 << 20
    opt.close()
