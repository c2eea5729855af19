"""``autotune.tune_model`` and ``tdsl tune-model``: every kernel of a PyTorch model tuned as
one job, and the compiled model built from those records."""
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="tune_model imports models with PyTorch")

import tdsl  # noqa: E402
from tdsl import autotune  # noqa: E402
from tdsl.errors import TuningError  # noqa: E402

from tests.autotune.helpers import fast_option  # noqa: E402
from tests.autotune.model_factory import factory  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _tune(db, **kw):
    model, inputs = factory()
    job = autotune.tune_model(model, inputs, trials=8, db=db, tuner="random", batch_size=2,
                              measure_option=fast_option(), progress=False, **kw)
    return model, inputs, job


def test_records_weights_and_compile_uses_them(tmp_path):
    db = str(tmp_path / "model.db")
    model, (x,), job = _tune(db)
    # the compiled graph's distinct kernels, with their occurrence counts
    cg = tdsl.compile(model, (x,)).compiled.compiled
    assert [w for _, _, w in cg.tasks()] == job.weights == [1, 2, 1]
    assert sum(job.trials) == 8
    with autotune.Database(db) as d:
        for task in job.tasks:
            assert d.count(task.key) >= 1, task.name
    # built from the records, though the same kernels were built untuned before in this
    # process (the kernel cache must not hand those back)
    with warnings.catch_warnings():
        # no "no tuning record" warning either
        warnings.filterwarnings("error", message="apply_history_best")
        em = tdsl.compile(model, (x,), options={"db": db})
    assert len(em.report.graph.tuned) == len(job.tasks)
    rng = np.random.default_rng(3)
    for _ in range(2):
        xr = torch.from_numpy(rng.uniform(-2, 2, (5, 12)).astype("float32"))
        np.testing.assert_allclose(em(xr).detach().numpy(), model(xr).detach().numpy(),
                                   rtol=1e-4, atol=1e-5)
    # an untuned compile afterwards still builds (and caches) the default schedules
    assert tdsl.compile(model, (x,)).report.graph.tuned == []
    # the records answer for the threads they were timed with: another count builds the
    # default schedules, and the report says why
    with autotune.Database(db) as d:
        (timed,) = {r.threads for r in d.records() if r.valid}
    other = tdsl.compile(model, (x,), options={"db": db, "num_threads": timed + 1})
    assert other.report.graph.tuned == []
    assert len(other.report.graph.other_threads) == len(job.tasks)
    assert "timed with other thread counts only" in str(other.report.graph)
    np.testing.assert_allclose(other(x).detach().numpy(), model(x).detach().numpy(),
                               rtol=1e-4, atol=1e-5)


def test_kernels_without_records_are_counted_in_the_report_not_warned(tmp_path):
    db = str(tmp_path / "other.db")
    model, (x,), job = _tune(db)
    other = torch.from_numpy(np.random.default_rng(5).uniform(-2, 2, (9, 12)).astype("float32"))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="apply_history_best")
        em = tdsl.compile(model, (other,), options={"db": db})   # other shapes: no record
    report = em.report.graph
    assert report.tuned == [] and len(report.untuned) == len(job.tasks)
    assert f"built from tuning records: 0 of {len(job.tasks)} kernels" in str(report)
    np.testing.assert_allclose(em(other).detach().numpy(), model(other).detach().numpy(),
                               rtol=1e-4, atol=1e-5)


def test_dynamic_batch_tuned_at_example_size(tmp_path):
    db = str(tmp_path / "dyn.db")
    model, (x,), job = _tune(db, dynamic={0: "batch"})
    assert all(t.sizes == {"batch": 5} for t in job.tasks)
    em = tdsl.compile(model, (x,), dynamic={0: "batch"}, options={"db": db})
    assert len(em.report.graph.tuned) == len(job.tasks)
    rng = np.random.default_rng(4)
    for n in (1, 5, 13):
        xr = torch.from_numpy(rng.uniform(-2, 2, (n, 12)).astype("float32"))
        np.testing.assert_allclose(em(xr).detach().numpy(), model(xr).detach().numpy(),
                                   rtol=1e-4, atol=1e-5)


def test_torch_compile_backend_uses_records(tmp_path):
    db = str(tmp_path / "dynamo.db")
    model, (x,), job = _tune(db)
    from tdsl.frontend.dynamo import Backend
    be = Backend({"db": db})
    torch._dynamo.reset()
    fn = torch.compile(model, backend=be)
    xr = torch.from_numpy(np.random.default_rng(5).uniform(-2, 2, (5, 12)).astype("float32"))
    with torch.no_grad():
        got = fn(xr)
    np.testing.assert_allclose(got.numpy(), model(xr).detach().numpy(), rtol=1e-4, atol=1e-5)
    torch._dynamo.reset()
    assert be.compiles and not be.compiles[0].eager, be.compiles
    # Dynamo's graph (aot_autograd's decompositions) gives kernels of the same structure
    assert len(be.compiles[0].graph.tuned) == len(job.tasks)


def test_needs_a_budget():
    model, inputs = factory()
    with pytest.raises(TuningError, match="trials"):
        autotune.tune_model(model, inputs, db=":memory:")


def test_untunable_kernel_left_out_with_a_warning(monkeypatch):
    import importlib
    auto_schedule = importlib.import_module("tdsl.autotune.auto_schedule")
    real = auto_schedule.create_auto_task

    def fake(args, target="llvm", sizes=None, name=None, **kw):
        if name.startswith("k0_"):
            raise TuningError("no sketch for this kernel")
        return real(args, target, sizes=sizes, name=name, **kw)

    monkeypatch.setattr(auto_schedule, "create_auto_task", fake)
    model, inputs = factory()
    with pytest.warns(UserWarning, match="k0_dense.*not tuned.*no sketch"):
        tasks, weights = autotune.model_tasks(model, inputs)
    assert [t.name for t in tasks] == ["k1_dense", "k3_dense"] and weights == [2, 1]
    monkeypatch.setattr(auto_schedule, "create_auto_task",
                        lambda *a, **k: (_ for _ in ()).throw(TuningError("none")))
    with pytest.warns(UserWarning), pytest.raises(TuningError, match="no kernel to tune"):
        autotune.tune_model(model, inputs, trials=2, db=":memory:")


def test_cli_tune_model(tmp_path):
    db = str(tmp_path / "cli.db")
    r = subprocess.run([sys.executable, "-m", "tdsl.cli", "tune-model",
                        "tests/autotune/model_factory.py:factory", "--trials", "4",
                        "--batch-size", "2", "--tuner", "random", "--db", db, "--repeat", "2",
                        "--min-repeat-ms", "2", "--no-progress-bar"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode in (0, 1), r.stderr[-3000:]     # 1: a task got no valid record
    with autotune.Database(db) as d:
        assert d.count() >= 4
    bad = subprocess.run([sys.executable, "-m", "tdsl.cli", "tune-model",
                          "tests/autotune/model_factory.py:MLP", "--trials", "2", "--db", db],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "must return (model, example_inputs)" in bad.stderr
