"""Which clock times a candidate (thread CPU time at one thread, else wall time), that the
records say so, and the rotation of argument copies (cold operands).  No test here reads a
live timing: fake clocks stand in for the real ones."""
import numpy as np
import pytest

import tdsl as td
from tdsl import autotune
from tdsl.autotune import measure_jobs
from tdsl.errors import ArgumentError
from tdsl.runtime import module as rt_module

from tests.autotune.helpers import fast_option, small_matmul


def test_one_thread_is_timed_by_the_thread_cpu_clock_more_threads_by_wall():
    assert autotune.LocalRunner(n_threads=1).clock_for("llvm") == "thread"
    assert autotune.LocalRunner(n_threads=1).clock_for(measure_jobs.INTERPRETER) == "thread"
    assert autotune.LocalRunner(n_threads=2).clock_for("llvm") == "wall"
    assert autotune.LocalRunner().clock_for("llvm") == "wall"       # all CPUs
    assert autotune.LocalRunner(n_threads=1, clock="wall").clock_for("llvm") == "wall"
    assert autotune.LocalRunner(n_threads=4, clock="thread").clock_for("llvm") == "thread"
    # a GPU kernel runs on the device while the host thread waits: always wall time
    assert autotune.LocalRunner(n_threads=1).clock_for("cuda") == "wall"
    assert rt_module.timing_clock("thread") is rt_module.CLOCKS["thread"]


def test_an_unknown_clock_is_an_argument_error_naming_it():
    with pytest.raises(ArgumentError, match="'sundial'"):
        autotune.LocalRunner(clock="sundial")
    A = td.placeholder((8,), "float32", name="A")
    B = td.compute((8,), lambda i: A[i] + 1, name="B")
    mod = td.build(td.create_schedule(B.op), [A, B], target="llvm")
    with pytest.raises(ArgumentError, match="'sundial'"):
        mod.time_evaluator(clock="sundial")


@pytest.mark.parametrize("threads,note", [(1, "timing: thread-cpu clock"),
                                          (2, "timing: wall clock")])
def test_records_say_which_clock_timed_them(tmp_path, threads, note):
    task = autotune.create_task(small_matmul, (16, 16, 16))
    db = autotune.Database(str(tmp_path / "c.db"))
    option = fast_option(n_threads=threads)
    res = autotune.RandomTuner(task).tune(3, option, db=db, batch_size=3, remeasure_top=0)
    option.close()
    recs = [r for r in db.records(task.key) if r.valid]
    assert res.trials == 3 and len(recs) == 3
    assert all(r.notes and r.notes[0] == note for r in recs), [r.notes for r in recs]


@pytest.mark.parametrize("name", ["thread", "wall"])
def test_run_job_costs_come_from_the_clock_named(monkeypatch, name):
    # each clock read advances a fake clock by its own step: a cost of exactly that step
    # (number=1, no minimum duration) proves which clock timed the runs
    steps = {"thread": 1e-3, "wall": 3e-3}
    fake = {}
    for k, step in steps.items():
        now = [0.0]

        def tick(now=now, step=step):
            now[0] += step
            return now[0]
        fake[k] = tick
    monkeypatch.setitem(rt_module.CLOCKS, "thread", fake["thread"])
    monkeypatch.setitem(rt_module.CLOCKS, "wall", fake["wall"])
    task = autotune.create_task(small_matmul, (8, 8, 8))
    runner = autotune.LocalRunner(repeat=3, min_repeat_ms=0)
    opts = runner.options()
    opts.update(check=False, clock=name)
    costs, err, msg = measure_jobs.run_job(task.payload(), task.key, task.sizes, "llvm", None,
                                           "[]", {}, opts, float("inf"), None, task.name)
    assert err is None, msg
    assert list(costs) == pytest.approx([steps[name]] * 3)


def test_rotated_copies_arithmetic():
    assert rt_module.rotated_copies(1000, 0) == 1
    assert rt_module.rotated_copies(1000, 999) == 1
    assert rt_module.rotated_copies(1000, 1001) == 2
    assert rt_module.rotated_copies(10, 10 ** 9) == rt_module.MAX_ROTATED_COPIES
    assert rt_module.rotated_copies(0, 100) == rt_module.MAX_ROTATED_COPIES


@pytest.mark.parametrize("n", [37, 1000])
def test_rotation_runs_the_kernel_on_every_copy_and_leaves_the_callers_result(n):
    A = td.placeholder((n,), "float32", name="A")
    B = td.compute((n,), lambda i: A[i] * 2 + 1, name="B")
    mod = td.build(td.create_schedule(B.op), [A, B], target="llvm")
    a = np.random.default_rng(0).uniform(-1, 1, n).astype("float32")
    b = np.zeros(n, "float32")
    run = mod._rotating([a, b], rotate_bytes=3 * 8 * n)     # 2 arrays of 4n bytes: 3 copies
    assert len(run.copies) == 3 and run.copies[0][0] is a
    for copy in run.copies[1:]:
        copy[0][:] = np.random.default_rng(len(copy)).uniform(-1, 1, n)
    for _ in range(3):
        run()
    for x, y in run.copies:
        np.testing.assert_allclose(y, x * 2 + 1, rtol=1e-6)
    # through the evaluator: the caller's output is computed as without rotation
    b[:] = 0
    res = mod.time_evaluator(number=2, repeat=2, rotate_bytes=1 << 20, clock="thread")(a, b)
    assert len(res.results) == 2
    np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)


def test_run_job_passes_the_clock_and_rotation_to_time_evaluator_only_when_asked(monkeypatch):
    seen = []

    class Recording(measure_jobs.InterpreterModule):
        def __call__(self, *arrays):
            pass

        def time_evaluator(self, number=1, repeat=1, min_repeat_ms=0, **extra):
            seen.append(extra)
            return lambda *arrays: rt_module.ProfileResult(1e-3, (1e-3,) * repeat)
    monkeypatch.setattr(measure_jobs, "load_candidate", lambda *a: Recording(None))
    task = autotune.create_task(small_matmul, (8, 8, 8))
    for clock, rotate in (("wall", 0), ("thread", 1 << 20)):
        opts = autotune.LocalRunner(repeat=2, min_repeat_ms=0, rotate_bytes=rotate).options()
        opts.update(check=False, clock=clock)
        costs, err, msg = measure_jobs.run_job(task.payload(), task.key, task.sizes, "llvm",
                                               None, "[]", {}, opts, float("inf"), None,
                                               task.name)
        assert err is None and list(costs) == [1e-3, 1e-3], msg
    # the defaults are not passed (a module type that predates them still times)
    assert seen == [{}, {"clock": "thread", "rotate_bytes": 1 << 20}]


def test_naive_timeout_scales_with_the_best_known():
    from tdsl.autotune import measure as M
    assert M.naive_timeout(float("inf"), 10.0) == 10.0
    assert M.naive_timeout(1e-3, 10.0) == M.NAIVE_MIN_TIMEOUT
    assert M.naive_timeout(0.05, 10.0) == pytest.approx(0.05 * M.NAIVE_TIMEOUT_FACTOR)
    assert M.naive_timeout(1.0, 10.0) == 10.0
    assert M.is_naive({"__default__": "default"})
    assert not M.is_naive({"__default__": "ops.schedule"}) and not M.is_naive({})


def test_the_unscheduled_program_is_timed_last_under_a_timeout_scaled_to_the_best(tmp_path):
    # a naive program that hangs (sleeps past the runner's timeout) is killed after
    # NAIVE_MIN_TIMEOUT once ops.schedule's program has a cost, not after the runner's 60 s
    from tdsl.autotune import MeasureErrorNo
    from tdsl.autotune import measure as M
    from tests.autotune.helpers import hang_if_naive
    A = td.placeholder((64, 64), "float32", name="A")
    B = td.placeholder((64, 64), "float32", name="B")
    r = td.reduce_axis((0, 64), name="r")
    C = td.compute((64, 64), lambda i, j: td.sum(A[i, r] * B[r, j], axis=r), name="C")
    task = autotune.create_auto_task([A, B, C])
    tuner = autotune.RandomTuner(task)
    defaults = tuner.default_candidates()
    assert [c.config["__default__"] for c in defaults] == ["default", "ops.schedule"]
    inputs = [autotune.MeasureInput(task, c.config, c.trace, c.prog_hash) for c in defaults]
    option = fast_option(timeout=60.0, pre_run=hang_if_naive)
    order = []
    got = option.measure(inputs, on_result=lambda i, res: order.append(i))
    option.close()
    assert order == [1, 0]                                  # ops.schedule first
    assert got[1].valid and got[0].error_no is MeasureErrorNo.RUN_TIMEOUT, got
    # its timeout came from ops.schedule's cost (a 64^3 matmul: the 2 s floor), not 60 s
    assert got[0].error_msg == f"killed after {M.NAIVE_MIN_TIMEOUT:g} s", got[0].error_msg
