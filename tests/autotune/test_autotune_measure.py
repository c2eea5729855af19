"""Safe measurement: crashes and hangs are recorded as failures; the job finishes."""
import numpy as np

import pytest

from tdsl import autotune
from tdsl.autotune import MeasureErrorNo
from tdsl.autotune.workers import JobOutcome, WorkerPool

from tests.autotune.helpers import crash_or_hang, fast_option, small_matmul


def test_worker_pool_survives_crash_and_timeout():
    import os
    import time
    with WorkerPool(1) as pool:
        res = pool.map(time.sleep, [(0.0,), (30,), (0.0,)], timeout=1.0)
        assert [r.outcome for r in res] == [JobOutcome.OK, JobOutcome.TIMEOUT, JobOutcome.OK]
        res = pool.map(os.abort, [()], timeout=5.0)
        assert res[0].outcome is JobOutcome.CRASHED
        assert pool.map(os.getpid, [()], timeout=5.0)[0].outcome is JobOutcome.OK


def test_worker_processes_drop_the_malloc_setting_dask_writes(monkeypatch):
    """Creating a ``LocalCluster`` (and every Dask worker's nanny) sets
    ``MALLOC_TRIM_THRESHOLD_=65536`` in the environment; a timing process that inherited it
    ran kernels with large per-call temporaries up to 2.2x slower (glibc mapped them afresh
    on every call).  The pool's processes start without it; a value of the user's is kept."""
    import os
    pytest.importorskip("distributed")
    import dask.config
    dask_value = dask.config.get("distributed.nanny.pre-spawn-environ")["MALLOC_TRIM_THRESHOLD_"]
    for value, seen in ((str(dask_value), None), ("1048576", "1048576")):
        monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", value)
        with WorkerPool(1) as pool:
            res = pool.map(os.getenv, [("MALLOC_TRIM_THRESHOLD_",)], timeout=60.0)[0]
        assert res.outcome is JobOutcome.OK and res.value == seen


def test_segfault_and_hang_are_recorded_and_tuning_goes_on(tmp_path):
    task = autotune.create_task(small_matmul, (16, 16, 16), target="llvm")
    db = autotune.Database(str(tmp_path / "t.db"))
    option = fast_option(timeout=3.0, pre_run=crash_or_hang)
    tuner = autotune.GridSearchTuner(task)
    n = len(task.space)
    res = tuner.tune(n + 1, option, db=db, batch_size=8)      # + the untuned program
    every = db.records(task.key)
    assert len(every) == res.trials == len({r.prog_hash for r in every})
    # every grid point measured, once: one may share its program with the untuned one
    grid = {tuner.pool.get(p).prog_hash for p in task.space.iter_points()}
    assert grid <= {r.prog_hash for r in every}
    recs = [r for r in every if "__default__" not in r.config]
    by_tile = {(tuple(r.config["tile_i"]), tuple(r.config["tile_j"])): r for r in recs}
    assert by_tile[(16, 1), (8, 2)].error_no is MeasureErrorNo.RUN_CRASH
    assert by_tile[(16, 1), (4, 4)].error_no is MeasureErrorNo.RUN_TIMEOUT
    assert "killed after" in by_tile[(16, 1), (4, 4)].error_msg
    ok = [r for r in recs if r.valid]
    assert len(ok) == len(recs) - 2
    assert res.best is not None and res.best.valid


def test_wrong_answers_are_detected():
    from tdsl.autotune.measure_jobs import mismatch
    ref = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert mismatch(ref + 1e-6, ref, 1e-3) == ""
    bad = ref.copy()
    bad[1, 2] += 1
    assert "first at (1, 2)" in mismatch(bad, ref, 1e-3)
    assert mismatch(np.array([1, 2]), np.array([1, 3]), 1e-3)


def test_measured_costs_and_records_carry_the_error_enum(tmp_path):
    task = autotune.create_task(small_matmul, (32, 32, 32))
    res = autotune.RandomTuner(task).tune(4, fast_option(), db=str(tmp_path / "r.db"),
                                          batch_size=4)
    assert res.trials == 4
    assert res.errors == {"NO_ERROR": 4}
    assert res.best.cost > 0 and res.best.gflops > 0
