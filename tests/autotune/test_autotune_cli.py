"""End to end: the ``tdsl`` CLI, a Dask cluster, apply_history_best, dynamic shapes, plots."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tdsl as td
from tdsl import autotune

from tests.autotune.cli_workload import matmul
from tests.autotune.helpers import fast_option, small_matmul

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "tdsl.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def test_cli_tune_and_records(tmp_path):
    db = str(tmp_path / "cli.db")
    r = _cli("tune", "tests/autotune/cli_workload.py:matmul", "--target", "llvm", "--trials", "12",
             "--batch-size", "6", "--db", db, "--run-timeout", "10", "--repeat", "2",
             "--min-repeat-ms", "2")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "best" in r.stdout and "GFLOP/s" in r.stdout
    assert "12/12" in r.stderr or "12 measured" in r.stdout        # progress bar, summary
    with autotune.Database(db) as d:
        assert d.count() >= 12
    show = _cli("records", "show", "--db", db, "--limit", "3")
    assert show.returncode == 0 and "task" in show.stdout
    best = _cli("records", "best", "--db", db)
    assert best.returncode == 0 and "GFLOP/s" in best.stdout
    out = tmp_path / "r.jsonl"
    exp = _cli("records", "export", "--db", db, str(out))
    assert exp.returncode == 0 and out.exists()
    assert len(out.read_text().splitlines()) >= 12
    json.loads(out.read_text().splitlines()[0])
    # the records make td.build pick the tuned schedule of the same computation
    A, B, C = matmul()
    with autotune.apply_history_best(db) as ctx:
        f = td.build(td.create_schedule(C.op), [A, B, C], target="llvm")
    assert ctx.hits == ["C"]
    a, b = np.random.rand(64, 64).astype("float32"), np.random.rand(64, 64).astype("float32")
    c = np.zeros((64, 64), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_cli_reports_bad_spec():
    r = _cli("tune", "no_such_file.py:f", "--trials", "1", timeout=60)
    assert r.returncode != 0 and "no such file" in r.stderr


def test_apply_history_best_missing_record_warns(tmp_path):
    A, B, C = matmul()
    s = td.create_schedule(C.op)
    autotune.Database(str(tmp_path / "empty.db")).close()
    with autotune.apply_history_best(str(tmp_path / "empty.db")) as ctx:
        with pytest.warns(UserWarning, match="no tuning record"):
            td.build(s, [A, B, C], target="llvm")
    assert ctx.misses == ["C"]


def test_tuning_through_a_local_dask_cluster(tmp_path):
    distributed = pytest.importorskip("distributed", reason="the optional 'distributed' package "
                                      "(pip install tdsl[distributed]) is not installed")
    from tdsl.autotune.distributed import DaskRunner
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  host="127.0.0.1", dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        task = autotune.create_task(small_matmul, (32, 32, 32))
        option = autotune.measure_option(runner=DaskRunner(client, timeout=60, repeat=2,
                                                           min_repeat_ms=2))
        res = autotune.XGBTuner(task).tune(6, option, db=str(tmp_path / "d.db"), batch_size=3)
    assert res.trials == 6
    assert res.errors.get("NO_ERROR", 0) == 6
    assert res.best is not None


def test_dynamic_shapes_dispatch_by_bucket(tmp_path):
    n = td.var("n")
    A = td.placeholder((n, 32), "float32", name="A")
    B = td.placeholder((32, 32), "float32", name="B")
    k = td.reduce_axis((0, 32), name="k")
    C = td.compute((n, 32), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k), name="C")
    db = str(tmp_path / "dyn.db")
    # random proposals: the cost model's search (tested on its own) would score ~200
    # programs per bucket to pick these 4
    grid = autotune.tune_dynamic([A, B, C], sizes={"n": [16, 64]}, trials=4, db=db,
                                 measure_option=fast_option(), batch_size=4, tuner="random")
    assert grid == [{"n": 16}, {"n": 64}]
    mod = autotune.build_dynamic([A, B, C], db)
    assert [key for key, _ in mod.kernels] == [(16,), (64,)]
    b = np.random.rand(32, 32).astype("float32")
    for size, bucket in ((5, 0), (16, 0), (40, 1), (200, 1)):
        a = np.random.rand(size, 32).astype("float32")
        c = np.zeros((size, 32), np.float32)
        assert mod.select([a, b, c]) is mod.kernels[bucket][1]
        mod(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_tuning_curve_plot(tmp_path):
    matplotlib = pytest.importorskip("matplotlib", reason="the optional 'matplotlib' package "
                                     "(pip install tdsl[tune]) is not installed")
    matplotlib.use("Agg")
    task = autotune.create_task(small_matmul, (32, 32, 32))
    db = str(tmp_path / "p.db")
    autotune.RandomTuner(task).tune(4, fast_option(), db=db, batch_size=4)
    ax = autotune.plot_tuning_curve(db, baseline=1.0)
    assert len(ax.get_lines()) == 2
    xs = ax.get_lines()[0].get_xdata()
    assert list(xs) == [1, 2, 3, 4]
    ax.figure.savefig(str(tmp_path / "curve.png"))


def test_tuning_curve_legend_labels_are_whole_and_below_the_axes(tmp_path):
    matplotlib = pytest.importorskip("matplotlib", reason="the optional 'matplotlib' package "
                                     "(pip install tdsl[tune]) is not installed")
    matplotlib.use("Agg")
    from tdsl.autotune.plot import legend_label
    text = "C(256, 256) float32 = sum(A[i, k] * B[k, j]) matmul with a long description here"
    assert legend_label(text).replace("\n", " ") == text            # nothing cut
    assert all(len(line) <= 60 for line in legend_label(text).splitlines())
    task = autotune.create_task(small_matmul, (32, 32, 32))
    db = str(tmp_path / "p.db")
    autotune.RandomTuner(task).tune(2, fast_option(), db=db, batch_size=2)
    ax = autotune.plot_tuning_curve(db)
    legend = ax.get_legend()
    assert legend is not None
    label = legend.get_texts()[0].get_text().replace("\n", " ")
    desc = next(iter(autotune.plot.tuning_curve(db)))
    assert label == desc
    ax.figure.canvas.draw()
    box = legend.get_window_extent()
    assert box.y1 <= ax.get_window_extent().y0     # under the plot, not over the curve
