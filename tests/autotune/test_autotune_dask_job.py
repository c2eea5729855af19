"""A tuning job on a Dask cluster (a real LocalCluster of 2 worker processes):
``tune_tasks(client=)`` measures on the workers -- builds spread over them, timings under
one lease per machine -- records into one database, and makes the scheduler's choices."""
import os
import threading
import time

import numpy as np
import pytest

import tdsl as td
from tdsl import autotune
from tdsl.autotune import MeasureInput
from tdsl.errors import TuningError

distributed = pytest.importorskip("distributed", reason="the optional 'distributed' package "
                                  "(pip install tdsl[distributed]) is not installed")


def _tasks():
    """A matmul whose sizes divide no tile and an elementwise kernel: two auto tasks."""
    A = td.placeholder((37, 23), "float32", name="A")
    B = td.placeholder((23, 29), "float32", name="B")
    k = td.reduce_axis((0, 23), "k")
    C = td.compute((37, 29), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k), name="C")
    x = td.placeholder((1000,), "float32", name="x")
    y = td.compute((1000,), lambda i: x[i] * 2.0 + 1.0, name="y")
    return [autotune.create_auto_task([C], "llvm", name="mm"),
            autotune.create_auto_task([y], "llvm", name="axpb")]


def _option() -> autotune.MeasureOption:
    return autotune.measure_option(builder=autotune.LocalBuilder(n_parallel=1),
                                   runner=autotune.LocalRunner(timeout=15.0, repeat=2,
                                                               min_repeat_ms=1.0))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """2 single-threaded worker processes; their timing lease in a file of this test's."""
    lock = str(tmp_path_factory.mktemp("lease") / "timing.lock")
    old = os.environ.get("TDSL_TIMING_LOCK")
    os.environ["TDSL_TIMING_LOCK"] = lock            # inherited by the worker processes
    try:
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                      host="127.0.0.1", dashboard_address=None,
                                      silence_logs=50) as c, distributed.Client(c) as client:
            yield client, lock
    finally:
        if old is None:
            os.environ.pop("TDSL_TIMING_LOCK", None)
        else:
            os.environ["TDSL_TIMING_LOCK"] = old


def _measured(db_path, task) -> list[str]:
    """The programs of ``task`` measured into the database at ``db_path``."""
    with autotune.Database(str(db_path), create=False) as d:
        return sorted(r.prog_hash for r in d.records(task.key))


def test_tune_tasks_on_a_cluster_same_choices_one_database(cluster, tmp_path, capsys):
    client, _ = cluster
    tasks = _tasks()
    kw = dict(trials=12, weights=[2, 3], batch_size=4, tuner="random", seed=3,
              strategy="round-robin", remeasure_top=1, remeasure_rounds=1, pretrained="off")
    local = autotune.tune_tasks(tasks, db=str(tmp_path / "local.db"),
                                measure_option=_option(), progress=False, **kw)
    seen = []
    job = autotune.tune_tasks(tasks, db=str(tmp_path / "dask.db"), measure_option=_option(),
                              client=client, progress=True,
                              callbacks=[lambda s, i, ins, res: seen.append(s.mopt.runner)],
                              **kw)
    # the scheduler's choices do not depend on where candidates are measured: the same
    # rounds, the same programs (random search from the same seed), all in one database
    assert job.rounds == local.rounds
    assert job.trials == local.trials and sum(job.trials) == 12
    for t in tasks:
        assert _measured(tmp_path / "dask.db", t) == _measured(tmp_path / "local.db", t)
    assert all(b is not None and b.valid for b in job.best)
    # measured on the cluster: every candidate built and timed by a worker process, both
    # workers used, and no two timings of the machine at once (its one lease)
    runner = seen[0]
    assert type(runner).__name__ == "DaskRunner"
    workers = set(client.run(os.getpid).values())
    assert {e["pid"] for e in runner.log} == workers
    spans = sorted(tuple(e["time"]) for e in runner.log if "time" in e)
    assert len(spans) >= 12
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert start >= end, "two timings of one machine overlapped"
    assert not any(e.get("contended") for e in runner.log)
    # each record says the CPU threads its worker ran it with
    from tdsl.runtime.threads import default_num_threads
    with autotune.Database(str(tmp_path / "dask.db"), create=False) as d:
        counts = {r.threads for r in d.records() if r.valid}
    assert counts == set(client.run(default_num_threads).values())
    # the best programs compute the right thing
    rng = np.random.default_rng(0)
    for t, rec in zip(tasks, job.best):
        sch = autotune.dispatch.schedule_from_record(rec, t.outputs)
        mod = td.build(sch, t.args, target="llvm")
        ins = [rng.standard_normal([int(s) for s in a.shape]).astype("float32")
               for a in t.args[:-1]]
        out = np.zeros([int(s) for s in t.args[-1].shape], "float32")
        mod(*ins, out)
        expect = ins[0] @ ins[1] if t.name == "mm" else ins[0] * 2.0 + 1.0
        np.testing.assert_allclose(out, expect, rtol=1e-4, atol=1e-4)
    # the progress bar and the per-task summary
    assert "tuning job" in capsys.readouterr().err
    lines = job.summary().splitlines()
    assert "time %" in lines[0] and "floor ms" in lines[0]
    assert [ln.split()[0] for ln in lines[1:3]] == ["mm", "axpb"]
    shares = [float(ln.split()[-1]) for ln in lines[1:3]]
    assert all(0 < s <= 100 for s in shares) and sum(shares) <= 100.0
    assert len(job.task_seconds) == 2 and sum(job.task_seconds) <= job.seconds


def test_tune_model_on_a_cluster(cluster, tmp_path):
    """``tune_model(client=)``: the model's kernels measured on the workers, the records in
    one database, and the model compiled from them computes what PyTorch does."""
    torch = pytest.importorskip("torch", reason="tune_model imports models with PyTorch")
    from tests.autotune.model_factory import factory
    client, _ = cluster
    db = str(tmp_path / "model.db")
    model, (x,) = factory()
    runners = []
    job = autotune.tune_model(model, (x,), trials=6, db=db, tuner="random", batch_size=2,
                              measure_option=_option(), progress=False, client=client,
                              remeasure_top=0,
                              callbacks=[lambda s, i, ins, res: runners.append(s.mopt.runner)])
    assert sum(job.trials) == 6
    assert {type(r).__name__ for r in runners} == {"DaskRunner"}
    with autotune.Database(db) as d:
        assert sum(d.count(t.key) for t in job.tasks) == 6
    em = td.compile(model, (x,), options={"db": db})
    assert len(em.report.graph.tuned) == len(job.tasks)
    xr = torch.from_numpy(np.random.default_rng(3).uniform(-2, 2, (5, 12)).astype("float32"))
    np.testing.assert_allclose(em(xr).detach().numpy(), model(xr).detach().numpy(),
                               rtol=1e-4, atol=1e-5)


def _inputs(task, n: int) -> list:
    """Measure inputs of the first ``n`` valid candidates of ``task``'s space."""
    cands = []
    for p in task.space.iter_points():
        c = task.candidate(p)
        if c.valid:
            cands.append(c)
        if len(cands) == n:
            break
    return [MeasureInput(task, c.config, c.trace, c.prog_hash) for c in cands]


def test_timing_waits_for_the_machine_lease(cluster):
    """While someone else holds the machine's timing lease no candidate is timed (their
    builds go on); with ``lease_wait=0`` they are timed anyway, noted contended.  A second
    runner made on the client meanwhile does not disturb the first's candidates."""
    from tdsl.autotune.distributed import DaskRunner, HostLease
    client, lock = cluster
    task = _tasks()[0]
    inputs = _inputs(task, 3)
    held = HostLease(lock)
    runner = DaskRunner(client, timeout=15.0, repeat=2, min_repeat_ms=1.0)
    arrived: list[tuple[float, str]] = []
    out: list = []
    assert held.acquire(0)
    try:
        th = threading.Thread(target=lambda: out.append(runner.measure_batch(
            inputs, on_result=lambda i, r: arrived.append((time.time(), r.error_no.name)))))
        th.start()
        # more runners on the same client meanwhile, while the first one's candidates build,
        # leave them be (registering a worker plugin anew tore down its isolated process
        # under the candidate it was building: BUILD_CRASH)
        for _ in range(10):
            DaskRunner(client, timeout=15.0, repeat=2, min_repeat_ms=1.0)
            time.sleep(0.2)
        time.sleep(2.0)
        assert arrived == [], f"results came while the machine's lease was held: {arrived}"
    finally:
        released = time.time()
        held.release()
    th.join(60)
    assert not th.is_alive()
    assert [r.error_no.name for r in out[0]] == ["NO_ERROR"] * len(inputs)
    assert all(t >= released for t, _ in arrived)
    assert all(e["time"][0] >= released and e["waited"] > 0 for e in runner.log)
    # timing anyway after lease_wait: a valid result, noted contended
    assert held.acquire(0)
    try:
        contended = DaskRunner(client, lease_wait=0.0, timeout=15.0, repeat=2,
                               min_repeat_ms=1.0).measure_batch(inputs[:1])
    finally:
        held.release()
    assert contended[0].valid and any("contended" in n for n in contended[0].notes)


def test_a_worker_builds_its_next_candidate_while_one_waits_for_the_lease(cluster):
    """Builds overlap timings on a worker: while its candidate waits for the machine's
    timing lease (held here), the worker's thread and build process are free and its next
    candidate is built.  Asserted on the events and timestamps the workers record, never
    on a speed; once the lease is released, every candidate is timed, one at a time."""
    from tdsl.autotune.distributed import DaskRunner, HostLease, worker_events
    client, lock = cluster
    task = _tasks()[0]
    inputs = _inputs(task, 4)
    held = HostLease(lock)
    runner = DaskRunner(client, timeout=15.0, repeat=2, min_repeat_ms=1.0)
    out: list = []
    assert held.acquire(0)
    start = time.time()
    try:
        th = threading.Thread(target=lambda: out.append(runner.measure_batch(inputs)))
        th.start()
        # 4 candidates on 2 workers: one worker has two; with its first waiting for the
        # lease, its second is built all the same (before: its thread waited with it)
        deadline = time.monotonic() + 45.0
        while True:
            events = {w: [e for e in ev if e[0] >= start]
                      for w, ev in client.run(worker_events).items()}
            built = {w: sum(e[1] == "built" for e in ev) for w, ev in events.items()}
            if max(built.values()) >= 2:
                break
            assert time.monotonic() < deadline, \
                f"no worker built a second candidate while its first waited: {events}"
            time.sleep(0.1)
        assert not any(e[1] in ("leased", "timed") for ev in events.values() for e in ev), \
            f"a candidate was timed while the machine's lease was held: {events}"
    finally:
        released = time.time()
        held.release()
    th.join(60)
    assert not th.is_alive()
    assert [r.error_no.name for r in out[0]] == ["NO_ERROR"] * len(inputs)
    # the workers' own timestamps: on one worker, two builds ended before the lease was
    # released, so before that worker timed either of them
    by_worker: dict = {}
    for e in runner.log:
        by_worker.setdefault(e["pid"], []).append(e)
    assert max(sum(e["build"][1] < released <= e["time"][0] for e in es)
               for es in by_worker.values()) >= 2, runner.log
    # the lease discipline: timed after the release, one at a time, none contended
    spans = sorted(tuple(e["time"]) for e in runner.log)
    assert len(spans) == len(inputs) and spans[0][0] >= released
    for (_, end), (begin, _) in zip(spans, spans[1:]):
        assert begin >= end, "two timings of one machine overlapped"
    assert not any(e["contended"] for e in runner.log)


def test_client_bad_inputs_are_tuning_errors(tmp_path):
    tasks = _tasks()[:1]
    with pytest.raises(TuningError, match="distributed.Client or a scheduler address"):
        autotune.tune_tasks(tasks, trials=1, db=str(tmp_path / "a.db"), client=42,
                            progress=False)
    interp = autotune.measure_option(builder=autotune.LocalBuilder(backend="interpreter"))
    with pytest.raises(TuningError, match="native LocalBuilder"):
        autotune.tune_tasks(tasks, trials=1, db=str(tmp_path / "b.db"), client="tcp://x:1",
                            measure_option=interp, progress=False)
    from tdsl.autotune.distributed import DaskRunner
    with pytest.raises(TuningError, match="lease_wait"):
        DaskRunner("tcp://x:1", lease_wait=-1)
