"""A measuring worker keeps the data of a bounded number of tasks (``TDSL_TUNE_TASK_CACHE``):
a worker serving a long multi-task run must not hold every task's inputs and references."""
import pickle

import numpy as np
import pytest

import tdsl as td
from tdsl.autotune import measure_jobs
from tdsl.errors import TDSLError


def scale(n: int) -> bytes:
    A = td.placeholder((n,), name="A")
    B = td.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    return pickle.dumps([A, B])


def test_a_worker_keeps_a_bounded_number_of_tasks(monkeypatch):
    monkeypatch.setenv(measure_jobs.ENV_TASK_ENTRIES, "2")
    measure_jobs._computations.clear()
    measure_jobs._data.clear()
    payloads = {f"t{n}": scale(n) for n in (3, 4, 5, 6)}
    for key, payload in payloads.items():
        measure_jobs.reference_job(payload, key, {}, "interpreter", key, 0, None)
    assert len(measure_jobs._computations) == 2 and len(measure_jobs._data) == 2
    assert ("t3", "interpreter", 0) not in measure_jobs._data
    # an evicted task is made again on demand: the same inputs, the right reference
    arrays, ref = measure_jobs._task_data(payloads["t3"], "t3", {}, "interpreter", True, "t3")
    assert arrays[0].shape == (3,) and np.any(arrays[0] != 0)
    np.testing.assert_allclose(ref[1], arrays[0] * 2 + 1, rtol=1e-6)
    np.testing.assert_array_equal(arrays[0], measure_jobs.random_arrays(
        pickle.loads(payloads["t3"]), {}, 0)[0])
    measure_jobs._computations.clear()
    measure_jobs._data.clear()


def test_a_bad_task_cache_size_is_an_error(monkeypatch):
    monkeypatch.setenv(measure_jobs.ENV_TASK_ENTRIES, "lots")
    with pytest.raises(TDSLError, match=measure_jobs.ENV_TASK_ENTRIES):
        measure_jobs.task_entries()
