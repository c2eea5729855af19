"""The Dask runner survives faults: a real LocalCluster (2 worker processes) with a hanging,
a segfaulting and worker-killing candidates; no result is lost, workers live."""
import json
import os

import pytest

from tdsl import autotune
from tdsl.autotune import MeasureInput

from tests.autotune.helpers import small_matmul

distributed = pytest.importorskip("distributed", reason="the optional 'distributed' package "
                                  "(pip install tdsl[distributed]) is not installed")


def _candidates(task, n):
    out = []
    for p in task.space.iter_points():
        c = task.candidate(p)
        if c.valid:
            out.append(c)
        if len(out) == n:
            return out
    raise AssertionError("not enough valid candidates")


def test_dask_runner_survives_hang_segfault_and_dead_workers(tmp_path, monkeypatch):
    task = autotune.create_task(small_matmul, (32, 32, 32))
    cands = _candidates(task, 9)
    roles = {0: "hang", 1: "segv", 2: "segv-build", 6: "kill-worker-once", 7: "kill-worker"}
    monkeypatch.setenv("TDSL_TEST_SABOTAGE", json.dumps(
        [[cands[i].trace if w == "segv-build" else cands[i].config, w]
         for i, w in roles.items()]))
    monkeypatch.setenv("TDSL_TEST_SABOTAGE_DIR", str(tmp_path))
    monkeypatch.setenv("TDSL_REFERENCE_DIR", str(tmp_path / "ref"))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  host="127.0.0.1", dashboard_address=None, silence_logs=50,
                                  preload=["tests.autotune.dask_sabotage"]) as cluster, \
            distributed.Client(cluster) as client:
        from tdsl.autotune.distributed import DaskRunner
        # the hung candidate is killed after `timeout`; good ones must finish well within it
        # even on a loaded machine (at 6 s one failed under a load of 10 on 2 cores)
        # lease_wait=0: the hung candidate holds the machine's timing lease until it is
        # killed; the others are timed meanwhile (contended), which this test needs
        runner = DaskRunner(client, timeout=15.0, repeat=2, min_repeat_ms=2, lease_wait=0.0)
        pids = set(client.run(os.getpid).values())
        inputs = [MeasureInput(task, c.config, c.trace, c.prog_hash) for c in cands]
        # batch 1: a hang, a segfault and a segfaulting build among three good candidates
        arrived = []

        def hang_running() -> bool:
            """Whether the hung candidate's process is still running (or not started)."""
            try:
                pid = int((tmp_path / "hang.pid").read_text())
            except (FileNotFoundError, ValueError):
                return True
            try:
                os.kill(pid, 0)
                return True
            except ProcessLookupError:
                return False
        res = runner.measure_batch(inputs[:6], float("inf"),
                                   lambda i, r: arrived.append((i, hang_running())))
        names = [r.error_no.name for r in res]
        assert names == ["RUN_TIMEOUT", "RUN_CRASH", "BUILD_CRASH"] + ["NO_ERROR"] * 3, \
            [(r.error_no.name, r.error_msg[:200]) for r in res]
        assert "killed after 15 s" in res[0].error_msg
        assert "exit code -11" in res[1].error_msg and "exit code -11" in res[2].error_msg
        assert sorted(i for i, _ in arrived) == list(range(6))     # each written as it came
        # handed over as they came: the first while the hung candidate still ran
        assert arrived[0][1], arrived
        assert not hang_running()                     # killed (and reaped) by now
        assert set(client.run(os.getpid).values()) == pids          # no worker died
        # batch 2: a candidate whose worker dies once is retried elsewhere and measured; one
        # that kills every worker it runs on is given up after its retry (RUN_CRASH)
        res2 = runner.measure_batch(inputs[6:], float("inf"))
        assert [r.error_no.name for r in res2] == ["NO_ERROR", "RUN_CRASH", "NO_ERROR"], \
            [(r.error_no.name, r.error_msg[:200]) for r in res2]
        assert "died" in res2[1].error_msg


class _Metadata:
    """The scheduler's metadata, as ``get_client()`` on a worker reaches it."""

    def __init__(self):
        self.data = {}

    def get_metadata(self, keys, default=None):
        return self.data.get(tuple(keys), default)

    def set_metadata(self, keys, value):
        self.data[tuple(keys)] = value


def test_only_the_candidate_being_timed_is_charged_for_a_dead_worker(monkeypatch):
    """A worker's death counts against the candidate it was timing, not against those that
    were building or waiting beside it, nor one already timed whose result was still on it
    (Dask runs it again): a kill-worker-once candidate timed next to a worker-killer must
    not be given up as lost."""
    from tdsl.autotune import measure_worker as mw
    meta = _Metadata()
    monkeypatch.setattr(distributed, "get_client", lambda: meta)
    key = ["tdsl-attempts", "runner", "batch", "0"]
    assert mw._deaths(key) == 0                     # first run
    mw._mark(key, 0, "time")
    assert mw._deaths(key) == 1                     # its worker died timing it
    assert mw._deaths(key) == 1                     # died again while it waited: no charge
    mw._mark(key, 1, "time")
    mw._mark(key, 1, "timed")
    assert mw._deaths(key) == 1                     # died after its timing: no charge
    mw._mark(key, 1, "time")
    assert mw._deaths(key) == mw.MAX_ATTEMPTS       # twice while timing it: given up
    out = mw.measure_isolated(b"", "k", {}, "llvm", "", {}, {}, float("inf"), "t", 1.0, 1.0,
                              key)
    assert out[0] == "lost" and "died 2 times" in out[2]
    assert mw._deaths(None) == 0                    # no counter: not counted
