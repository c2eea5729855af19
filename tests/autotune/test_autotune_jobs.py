"""Jobs of many tasks: extract_tasks, the task scheduler's choices, tune_tasks, `tdsl tune --all`."""
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tdsl as td
from tdsl import autotune, ops
from tdsl.autotune import Database
from tdsl.autotune.task_scheduler import TaskScheduler
from tdsl.errors import TuningError

from tests.autotune.helpers import fast_option

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _mlp(n=24, d=16, out=10):
    x = td.placeholder((n, d), name="x")
    w1, b1 = td.placeholder((d, d), name="w1"), td.placeholder((d,), name="b1")
    w2, b2 = td.placeholder((d, d), name="w2"), td.placeholder((d,), name="b2")
    w3 = td.placeholder((out, d), name="w3")
    h1 = ops.dense(x, w1, b1, activation="relu")
    h2 = ops.dense(h1, w2, b2, activation="relu")     # the same kernel as h1
    y = ops.softmax(ops.dense(h2, w3))                 # dense + softmax: one kernel
    return (x, w1, b1, w2, b2, w3), (h1, h2, y)


def _softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_extract_tasks_cuts_at_listed_tensors_and_dedups():
    _, (h1, h2, y) = _mlp()
    tasks, weights = autotune.extract_tasks([h1, h2, y])
    assert weights == [2, 1]
    assert [t.name for t in tasks] == [h1.name, y.name]
    # the softmax kernel reads the previous layer's output as an input, not its computation
    names = [a.name for a in tasks[1].args]
    # in the order the tensors were created: w3 was declared before h2 was computed
    assert names[:-1] == ["w3", h2.name] and "x" not in names and "w1" not in names
    rng = np.random.default_rng(0)
    for task, ref in ((tasks[0], lambda a: np.maximum(a["x"] @ a["w1"].T + a["b1"], 0)),
                      (tasks[1], lambda a: _softmax(a[h2.name] @ a["w3"].T))):
        arrays = [rng.uniform(-1, 1, [int(s) for s in t.shape]).astype("float32")
                  for t in task.args]
        expect = ref({t.name: a for t, a in zip(task.args, arrays)})
        s = td.create_schedule([t.op for t in task.args[-1:]])
        interp = [a.copy() for a in arrays]
        td.interpreter.run(td.lower(s, task.args), *interp)
        np.testing.assert_allclose(interp[-1], expect, rtol=1e-4, atol=1e-5)
        td.build(s, task.args, target="llvm")(*arrays)
        np.testing.assert_allclose(arrays[-1], expect, rtol=1e-4, atol=1e-5)


def test_extract_tasks_rejects_non_kernels():
    (x, *_), (h1, _, _) = _mlp()
    with pytest.raises(TuningError, match="placeholder"):
        autotune.extract_tasks([x, h1])
    with pytest.raises(TuningError, match="expected tensors"):
        autotune.extract_tasks([h1, "y"])


class _Session:
    def __init__(self, best):
        self.best_cost = best


def _scheduler(weights, flops=None):
    tasks = []
    for i, _ in enumerate(weights):
        n = 8 + 4 * i
        A = td.placeholder((n, n), name="A")
        tasks.append(autotune.create_auto_task([ops.exp(A)]))
    return TaskScheduler(tasks, weights, eps_greedy=0.0)


def test_gradient_goes_to_the_task_whose_gain_lowers_the_weighted_latency_most():
    sched = _scheduler([1, 10, 1])
    # equal latencies: the heavily weighted task gains the job most
    assert sched._choose([_Session(1e-3)] * 3, [[1e-3]] * 3, [1, 1, 1], [True] * 3) == 1
    # a task that has had many rounds is expected to gain little more (1/rounds)
    assert sched._choose([_Session(1e-3)] * 3, [[1e-3]] * 3, [1, 50, 1], [True] * 3) != 1
    # a task without a valid program comes first; a finished one never
    assert sched._choose([_Session(1e-3), _Session(1e-3), _Session(math.inf)],
                         [[1e-3], [1e-3], [math.inf]], [1, 1, 1], [True] * 3) == 2
    assert sched._choose([_Session(1e-3)] * 3, [[1e-3]] * 3, [1, 1, 1],
                         [True, False, True]) in (0, 2)


def test_gradient_follows_recent_improvement():
    sched = _scheduler([1, 1])
    flat = [1e-3] * 6
    falling = [8e-3, 6e-3, 4e-3, 2e-3, 1.5e-3, 1e-3]
    assert sched._choose([_Session(1e-3), _Session(1e-3)], [flat, falling], [5, 5],
                         [True, True]) == 1


def test_scheduler_checks_its_inputs():
    sched = _scheduler([1, 1])
    with pytest.raises(TuningError, match="weights"):
        TaskScheduler(sched.tasks, [1, -1])
    with pytest.raises(TuningError, match="one finite positive number per task"):
        TaskScheduler(sched.tasks, [1])
    with pytest.raises(TuningError, match="autotune.Task"):
        TaskScheduler([object()])
    with pytest.raises(TuningError, match="trials=, time_budget="):
        TaskScheduler(sched.tasks).tune()


def test_tune_tasks_shares_one_budget_and_one_database(tmp_path):
    _, (h1, h2, y) = _mlp()
    tasks, weights = autotune.extract_tasks([h1, h2, y])
    db = str(tmp_path / "job.db")
    seen = []
    job = autotune.tune_tasks(tasks, trials=10, db=db, weights=weights, tuner="random",
                              measure_option=fast_option(), batch_size=3, remeasure_top=1,
                              remeasure_rounds=1, progress=False,
                              callbacks=[lambda s, i, inp, res: seen.append((i, len(res)))])
    assert sum(job.trials) == 10
    assert {i for i, _ in seen} == {0, 1}            # warm-up: every task measured
    assert all(b is not None and b.valid for b in job.best)
    assert math.isfinite(job.weighted_latency)
    assert job.weighted_latency == pytest.approx(2 * job.best[0].cost + job.best[1].cost)
    with Database(db, create=False) as d:
        assert {k for k, *_ in d.tasks()} == {t.key for t in tasks}
        assert d.count() == 10
    # a resumed job: the records count, nothing is measured twice
    again = autotune.tune_tasks(tasks, trials=10, db=db, weights=weights, tuner="random",
                                measure_option=fast_option(), remeasure_top=0, progress=False)
    assert sum(again.trials) == 0
    assert all(b is not None for b in again.best)


def test_tune_tasks_stops_at_the_time_budget(tmp_path):
    _, (h1, h2, y) = _mlp()
    tasks, _ = autotune.extract_tasks([h1, y])
    job = autotune.tune_tasks(tasks, time_budget=0.0, db=str(tmp_path / "t.db"),
                              measure_option=fast_option(), progress=False, remeasure_top=0)
    assert sum(job.trials) == 0 and job.weighted_latency == math.inf


def test_cli_tune_all_tunes_every_declared_operator(tmp_path):
    src = tmp_path / "my_ops.py"
    src.write_text(textwrap.dedent('''
        import tdsl as td
        from tdsl import ops
        from tdsl.ops import relu          # imported: not declared here

        def scale():
            x = td.placeholder((32, 32), name="x")
            return [x, ops.multiply(x, 2.0)]

        def scale_again():                 # the same computation: one task, weight 2
            y = td.placeholder((32, 32), name="y")
            return [y, ops.multiply(y, 2.0)]

        def row_sum(n=16):
            x = td.placeholder((n, 64), name="x")
            return [x, ops.sum(x, axis=1)]

        def helper(a):                     # needs an argument: not an operator
            return a
        '''))
    db = str(tmp_path / "all.db")
    r = subprocess.run([sys.executable, "-m", "tdsl", "tune", str(src), "--all", "--trials", "6",
                        "--db", db, "--tuner", "random", "--no-progress-bar", "--run-timeout",
                        "10", "--repeat", "2", "--min-repeat-ms", "2", "--build-workers", "1",
                        "--batch-size", "2", "--weights", "row_sum=3"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "tuning 2 tasks" in r.stderr
    assert "weighted latency" in r.stdout
    with Database(db, create=False) as d:
        assert len(d.tasks()) == 2
        assert d.count() == 6
    bad = subprocess.run([sys.executable, "-m", "tdsl", "tune", str(src), "--all", "--weights",
                          "nope=2", "--db", db], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode != 0 and "nope" in bad.stderr


def test_similar_tasks_share_kind_and_arithmetic_intensity():
    from tdsl.autotune.roofline import _similar
    mm = lambda m, n, k: autotune.create_auto_task(
        [ops.matmul(td.placeholder((m, k), name="a"), td.placeholder((k, n), name="b"))])
    tasks = [mm(256, 256, 256), mm(1, 1024, 1024), mm(300, 200, 256),
             autotune.create_auto_task([ops.exp(td.placeholder((64, 64), name="x"))])]
    sim = _similar(tasks)
    # a GEMV is not held to a large matmul's FLOP/s; two large matmuls are alike
    assert 1 not in sim[0] and 2 in sim[0] and sim[1] == [1] and sim[3] == [3]
    # kernels that merely end alike (an elementwise epilogue) are not: a softmax held to a
    # GEMV's FLOP/s expected a gain every round and took 160 of a job's 192 trials
    x = td.placeholder((64, 256), name="x")
    v, w = td.placeholder((1, 128), name="v"), td.placeholder((128, 128), name="w")
    b = td.placeholder((128,), name="b")
    pair = [autotune.create_auto_task([ops.softmax(x)]),
            autotune.create_auto_task([ops.dense(v, w, b, activation="tanh")])]
    assert _similar(pair) == [[0], [1]]


def test_a_task_at_the_jobs_best_bandwidth_is_expected_to_gain_nothing():
    """The forward gradient's memory floor: a heavily weighted elementwise task moving its
    bytes at the best rate of the job gets no more rounds while a compute-bound task can
    still improve (it took 80 of 192 trials of a 12-task job and gained nothing)."""
    n = 1 << 16
    a, b = td.placeholder((n,), name="a"), td.placeholder((n,), name="b")
    elem = autotune.create_auto_task([ops.add(a, b)])
    A, B = td.placeholder((64, 64), name="A"), td.placeholder((64, 64), name="B")
    mm = autotune.create_auto_task([ops.matmul(A, B)])
    sched = TaskScheduler([elem, mm], [100, 1], eps_greedy=0.0)
    elem_s = 3 * n * 4 / 10e9          # 10 GB/s: the best bytes/s of the job
    mm_s = 1e-4                        # 64^3 matmul at 5 GFLOP/s: far from any floor
    hist = [[elem_s] * 6, [mm_s] * 6]
    assert sched._choose([_Session(elem_s), _Session(mm_s)], hist, [5, 5], [True, True]) == 1
    # the same elementwise task twice as slow as the job's best rate may still gain
    slow = 2 * elem_s
    other = autotune.create_auto_task([ops.multiply(a, b)])
    sched = TaskScheduler([elem, other, mm], [100, 1, 1], eps_greedy=0.0)
    assert sched._choose([_Session(slow), _Session(elem_s / 1.0), _Session(mm_s)],
                         [[slow] * 6, [elem_s] * 6, [mm_s] * 6], [5, 5, 5], [True] * 3) == 0


def test_data_larger_than_the_cache_is_held_to_the_memorys_bandwidth():
    """A task whose data exceeds the last-level cache is compared with the memory's
    bandwidth (measured when tuning starts), not with a cache-resident task's far higher
    rate: at that bandwidth it is expected to gain nothing; well below it, it may."""
    n = 1 << 16
    a, b = td.placeholder((n,), name="a"), td.placeholder((n,), name="b")
    big = autotune.create_auto_task([ops.add(a, b)])
    small = autotune.create_auto_task([ops.add(td.placeholder((64,), name="c"),
                                               td.placeholder((64,), name="d"))])
    A, B = td.placeholder((64, 64), name="A"), td.placeholder((64, 64), name="B")
    mm = autotune.create_auto_task([ops.matmul(A, B)])
    sched = TaskScheduler([big, small, mm], [100, 1, 1], eps_greedy=0.0,
                          memory_bandwidth=10e9)
    sched.cache_bytes = 4096            # the big task's 768 KiB "exceed the cache"
    at_memory = 3 * n * 4 / 10e9
    in_cache = 3 * 64 * 4 / 100e9       # 10x the memory's rate
    mm_s = 1e-4
    hist = [[at_memory] * 6, [in_cache] * 6, [mm_s] * 6]
    sessions = [_Session(at_memory), _Session(in_cache), _Session(mm_s)]
    assert sched._choose(sessions, hist, [5, 5, 5], [True] * 3) == 2
    slow = 3 * at_memory
    assert sched._choose([_Session(slow)] + sessions[1:], [[slow] * 6] + hist[1:],
                         [5, 5, 5], [True] * 3) == 0


def test_stream_bandwidth_is_a_rate_and_the_cache_size_is_plausible():
    """Only that the probe runs and gives a positive finite rate: its value depends on the
    machine's load (its arithmetic is checked with a fake clock below; the rates themselves
    are printed by ``benchmarks/roofs.py``)."""
    from tdsl.autotune.roofline import last_level_cache_bytes, stream_bandwidth
    assert (1 << 16) <= last_level_cache_bytes() <= (1 << 34)
    for threads in (1, 2):
        rate = stream_bandwidth(1 << 20, threads=threads)
        assert rate > 0 and math.isfinite(rate), (threads, rate)


def test_stream_bandwidth_counts_bytes_as_a_tasks_traffic_is_counted():
    """The probe's rate and a task's rate must count the same bytes: an ``a + b`` task of
    the probe's size, timed like the probe, has exactly the probe's rate.  (The probe once
    counted a copy's output written once while tasks count it twice: the memory's roof read
    1.5x low, and the job's fastest task in memory was expected to gain nothing.)"""
    from tdsl.autotune import roofline as ts
    clock = iter(range(1000))
    n = 1 << 20
    rate = ts.stream_bandwidth(12 * n, clock=lambda: float(next(clock)))     # 1 s a pass
    a, b = td.placeholder((n,), name="a"), td.placeholder((n,), name="b")
    task = autotune.create_auto_task([ops.add(a, b)])
    passes = (96 << 20) // (12 * n)             # the probe's additions per timed pass
    assert rate == passes * ts._bytes(task, written_twice=True)


def test_a_kernel_near_the_fma_peak_is_expected_to_gain_nothing():
    """The compute floor: a matmul at PEAK_FRACTION of the CPU's peak gets no more rounds
    even with the larger weight (one at 87% of the peak took 66 of a 12-task job's 192
    trials and gained nothing); at a quarter of the peak it may still gain."""
    from tdsl.autotune.roofline import PEAK_FRACTION
    A, B = td.placeholder((64, 64), name="A"), td.placeholder((64, 64), name="B")
    mm = autotune.create_auto_task([ops.matmul(A, B)])
    ew = autotune.create_auto_task([ops.exp(td.placeholder((256, 256), name="x"))])
    peak = 100e9
    sched = TaskScheduler([mm, ew], [100, 1], eps_greedy=0.0, peak_flops=peak,
                          memory_bandwidth=10e9, cache_bandwidth=50e9)
    at_roof = mm.flop / (PEAK_FRACTION * peak)
    ew_s = 1e-3                                   # far above either of its floors
    hist = [[at_roof] * 6, [ew_s] * 6]
    assert sched._choose([_Session(at_roof), _Session(ew_s)], hist, [5, 5], [True] * 2) == 1
    assert sched.gradients[0] == 0.0 and sched.gradients[1] < 0
    slow = mm.flop / (0.25 * peak)
    assert sched._choose([_Session(slow), _Session(ew_s)], [[slow] * 6, hist[1]], [5, 5],
                         [True] * 2) == 0
    # float64 runs at half the float32 peak; an integer kernel has no compute floor
    mm64 = autotune.create_auto_task([ops.matmul(td.placeholder((64, 64), "float64", "A"),
                                                 td.placeholder((64, 64), "float64", "B"))])
    mmi = autotune.create_auto_task([ops.matmul(td.placeholder((64, 64), "int32", "A"),
                                                td.placeholder((64, 64), "int32", "B"))])
    sched = TaskScheduler([mm64, mmi], eps_greedy=0.0, peak_flops=peak)
    assert sched._floor(0, 0.0, 0.0) == pytest.approx(2 * at_roof)
    assert sched._floor(1, 0.0, 0.0) == 0.0


def test_a_job_measures_its_roofs_when_it_starts(tmp_path):
    _, (h1, h2, y) = _mlp()
    tasks, weights = autotune.extract_tasks([h1, y])
    sched = TaskScheduler(tasks, weights, tuner="random", measure_option=fast_option(n_threads=1))
    job = sched.tune(trials=len(tasks) * 2, remeasure_top=0, progress=False)
    roofs = (sched.memory_bandwidth, sched.cache_bandwidth, sched.peak_flops)
    assert all(r > 0 and math.isfinite(r) for r in roofs), roofs   # measured: values vary
    # each task's floor is reported: above zero, never above its best
    assert len(job.floors) == len(tasks)
    assert all(0 < f <= b.cost for f, b in zip(job.floors, job.best))
    assert "floor ms" in job.summary()
    # given roofs are kept; 0 means no floor of that kind
    sched = TaskScheduler(tasks, weights, tuner="random", measure_option=fast_option(),
                          memory_bandwidth=0, cache_bandwidth=0, peak_flops=0)
    sched.tune(trials=len(tasks) * 2, remeasure_top=0, progress=False)
    assert (sched.memory_bandwidth, sched.cache_bandwidth, sched.peak_flops) == (0, 0, 0)
    assert all(sched._floor(i, 0.0, 0.0) == 0.0 for i in range(len(tasks)))


def test_a_task_near_its_floor_expects_less_with_each_round():
    """The guess falls as 1/rounds towards the floor, so a task just above its floor does not
    win every round once the others have settled (a matmul 3% above its compute floor,
    whose guess was the whole gap each round, took 74 of 192 trials and gained nothing)."""
    A, B = td.placeholder((64, 64), name="A"), td.placeholder((64, 64), name="B")
    mm = autotune.create_auto_task([ops.matmul(A, B)])
    ew = autotune.create_auto_task([ops.exp(td.placeholder((256, 256), name="x"))])
    sched = TaskScheduler([mm, ew], [1, 1], eps_greedy=0.0, peak_flops=100e9,
                          memory_bandwidth=10e9, cache_bandwidth=50e9)
    floor = sched._floor(0, 10e9, 50e9)
    c = 1.03 * floor
    hist = [[c] * 6, [1e-3] * 6]
    grads = []
    for rounds in (1, 2, 4):
        sched._choose([_Session(c), _Session(1e-3)], hist, [rounds, 50], [True] * 2)
        grads.append(sched.gradients[0])
    assert grads[0] == pytest.approx(-0.8 * (c - floor))
    assert grads[1] == pytest.approx(grads[0] / 2) and grads[2] == pytest.approx(grads[0] / 4)


def test_the_pull_of_a_faster_similar_task_fades_while_a_task_does_not_improve():
    """A matmul at a tenth of a similar matmul's FLOP/s is expected to close the gap to
    1/beta of that rate -- while it improves.  Once it has not for many rounds the pull
    fades like the floor's guess, and a task with a real gain left gets the round (the
    unfading pull gave a MobileNetV2 convolution 266 of a 32-task job's 368 trials)."""
    mk = lambda m: autotune.create_auto_task(
        [ops.matmul(td.placeholder((m, 64), name="A"), td.placeholder((64, 64), name="B"))])
    fast, slow = mk(64), mk(60)
    ew = autotune.create_auto_task([ops.exp(td.placeholder((256, 256), name="x"))])
    sched = TaskScheduler([fast, slow, ew], [1, 1, 1], eps_greedy=0.0, peak_flops=0,
                          memory_bandwidth=0, cache_bandwidth=0)        # no floors
    assert 0 in sched.similar[1]
    fast_s, slow_s, ew_s = fast.flop / 50e9, slow.flop / 5e9, 1e-3
    sessions = [_Session(fast_s), _Session(slow_s), _Session(ew_s)]
    stalled = [[fast_s] * 31, [slow_s] * 31, [ew_s] * 31]
    assert sched._choose(sessions, stalled, [30, 30, 30], [True] * 3) == 2
    best = [fast_s, slow_s, ew_s]
    floor = min(slow_s, sched._floor(1, *sched._bandwidths(best), sched._flops_reached(best)))
    # the floor's guess (its memory floor at the job's best rate in cache) is all it has
    assert sched.gradients[1] == pytest.approx(-0.8 * (slow_s - floor) / 30)
    # improving in its last round: the whole gap to the similar task's rate pulls again
    improving = [stalled[0], [slow_s * 1.001] * 30 + [slow_s], stalled[2]]
    assert sched._choose(sessions, improving, [30, 30, 30], [True] * 3) == 1
    target = sched.beta * slow.flop / (fast.flop / fast_s)
    assert sched.gradients[1] < -0.8 * (slow_s - target)


def test_a_rate_a_task_reached_raises_a_low_measured_peak():
    """The compute floor uses the larger of the measured peak's share and the best FLOP/s a
    task of the job reached: a peak measured on a busy machine (here 10 GFLOP/s) must not
    make a task running at 20 GFLOP/s look finished when another reached 50."""
    mk = lambda m, k: autotune.create_auto_task(
        [ops.matmul(td.placeholder((m, k), name="A"), td.placeholder((k, 64), name="B"))])
    a, b = mk(64, 64), mk(8, 256)
    sched = TaskScheduler([a, b], [1, 1], eps_greedy=0.0, peak_flops=10e9,
                          memory_bandwidth=0, cache_bandwidth=0)
    a_s, b_s = a.flop / 50e9, b.flop / 20e9
    hist = [[a_s] * 6, [b_s] * 6]
    sched._choose([_Session(a_s), _Session(b_s)], hist, [5, 5], [True] * 2)
    assert sched.gradients[1] < 0
    assert sched._floor(1, 0.0, 0.0, 50e9) == pytest.approx(b.flop / 50e9)
    # the measured peak still counts where it is the higher roof
    assert sched._floor(1, 0.0, 0.0, 1e9) == pytest.approx(b.flop / (0.9 * 10e9))
    # no measured peak (0): no compute floor, whatever the tasks reached
    sched = TaskScheduler([a, b], [1, 1], peak_flops=0, memory_bandwidth=0, cache_bandwidth=0)
    assert sched._floor(1, 0.0, 0.0, 50e9) == 0.0


class _Done:
    def __init__(self, done):
        self.done, self.best_cost = done, 1e-3


def test_sequential_tunes_each_task_to_its_share_in_turn():
    sched = TaskScheduler(_scheduler([1, 1, 1]).tasks, strategy="sequential", eps_greedy=0.0)
    sched.share_trials = 10
    sessions = [_Done(12), _Done(4), _Done(0)]
    assert sched._choose(sessions, [[1e-3]] * 3, [3, 1, 1], [True] * 3) == 1
    sched.spent = [0.0, 5.0, 0.0]
    sched.share_time = 5.0                             # task 1 has had its share of the time
    assert sched._choose(sessions, [[1e-3]] * 3, [3, 1, 1], [True] * 3) == 2
    # every share used up: round-robin over what is left
    assert sched._choose([_Done(12)] * 3, [[1e-3]] * 3, [3, 2, 2], [True] * 3) == 1
    with pytest.raises(TuningError, match="strategy must be one of"):
        TaskScheduler(sched.tasks, strategy="seq")


def test_a_sequential_job_records_each_rounds_best(tmp_path):
    _, (h1, h2, y) = _mlp()
    tasks, weights = autotune.extract_tasks([h1, y])
    job = autotune.tune_tasks(tasks, trials=12, db=str(tmp_path / "s.db"), weights=weights,
                              tuner="random", measure_option=fast_option(), batch_size=2,
                              strategy="sequential", remeasure_top=0, progress=False)
    after_warmup = job.rounds[len(tasks):]
    assert after_warmup == sorted(after_warmup)        # one task after the other
    assert sum(job.trials) == 12 and job.trials[0] >= 6
    assert len(job.best_at) == len(job.rounds) == len(job.curve)
    elapsed, trials, i, rec = job.best_at[-1]
    assert trials == 12 and rec is not None and rec.task_key == tasks[i].key
