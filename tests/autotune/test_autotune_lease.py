"""The timing lease: tuners sharing a database never time at once; a dead holder's lease
lapses; timings taken without it are marked contended and re-timed alone."""
import os
import subprocess
import sys
import time

import pytest

from tdsl import autotune
from tdsl.autotune import Database, MeasureErrorNo, Record
from tdsl.autotune.database import RETIME_PASS, best_records
from tdsl.autotune.lease import TimingLease, machine_lease_name
from tdsl.errors import TuningError

from tests.autotune.helpers import fast_option, small_matmul

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_two_processes_never_time_at_once(tmp_path):
    db, log = str(tmp_path / "shared.db"), str(tmp_path / "timing.log")
    Database(db).close()
    procs = [subprocess.Popen([sys.executable, "-m", "tests.autotune.lease_job", db, "6", str(s),
                               log], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for s in (0, 1)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
    spans = sorted((float(a), float(b), pid) for pid, a, b in
                   (line.split() for line in open(log)))
    assert len({pid for *_, pid in spans}) == 2        # both timed
    for (a0, a1, p), (b0, b1, q) in zip(spans, spans[1:]):
        assert a1 <= b0, f"process {p} timed until {a1}, process {q} from {b0}"
    with Database(db, create=False) as d:
        recs = d.records()
        assert len({r.prog_hash for r in recs}) == len(recs)   # nothing measured twice
        assert not d.contended()
        assert d.lease_holder(machine_lease_name()) is None    # both released it


def test_a_dead_holders_lease_lapses(tmp_path):
    db = str(tmp_path / "l.db")
    Database(db).close()
    code = ("import sys, time; from tdsl.autotune import Database; "
            "from tdsl.autotune.lease import TimingLease; "
            "l = TimingLease(Database(sys.argv[1])); assert l.acquire(0); "
            "print('HELD', flush=True); time.sleep(600)")
    p = subprocess.Popen([sys.executable, "-c", code, db], cwd=ROOT, stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout.readline().strip() == "HELD"
    mine = TimingLease(Database(db), wait=0.3)
    assert not mine.acquire(0.3)                        # held by a live process
    p.kill()
    p.wait()
    assert mine.acquire(0)                              # dead on this host: free at once
    mine.release()
    # a holder on another machine is known only by its expiry
    expiry = time.time() + 1.0
    with Database(db) as d:
        d._conn.execute("INSERT OR REPLACE INTO leases VALUES (?, ?, ?)",
                        (mine.name, "elsewhere:123:abc", expiry))
    assert not mine.acquire(0.2) or time.time() >= expiry
    assert mine.acquire(120.0)                          # (a guard against a hang only)
    assert time.time() >= expiry, "acquired a remote holder's lease before it expired"
    mine.release()
    mine.close()


def test_a_held_lease_is_renewed_beyond_its_ttl(tmp_path):
    db = str(tmp_path / "r.db")
    a = TimingLease(Database(db), ttl=2.0)   # renewed every 0.67 s: a loaded machine may
    b = TimingLease(Database(db), wait=0.0)  # delay the renewing thread, not by 1.3 s
    b.owner = "elsewhere:1:x"          # as if on another host: only the expiry frees it
    with a.hold() as contended:
        assert not contended
        time.sleep(4.5)                # well past the ttl: the renewing thread kept it
        assert not b.acquire(0.0)
    assert b.acquire(0.0)


def test_contended_timings_are_marked_and_retimed_alone(tmp_path):
    db = str(tmp_path / "c.db")
    task = autotune.create_task(small_matmul, (32, 32, 32))
    other = TimingLease(Database(db))
    assert other.acquire(0)            # another tuner (alive) holds the machine
    busy = TimingLease(Database(db), wait=0.2)
    autotune.RandomTuner(task).tune(4, fast_option(), db=db, batch_size=4, remeasure_top=0,
                                    lease=busy)
    with Database(db, create=False) as d:
        marked = d.contended(task.key)
        assert marked and all(r.contended and r.valid for r in marked)
        assert {r.id for r in marked} == {r.id for r in d.records(task.key) if r.valid}
    other.release()
    # the next batch (the lease now free) first times the contended ones again, alone
    free = TimingLease(Database(db), wait=5.0)
    autotune.RandomTuner(task, seed=1).tune(6, fast_option(), db=db, batch_size=2,
                                            remeasure_top=0, lease=free)
    assert not any(c for *_, c in free.holds)
    with Database(db, create=False) as d:
        assert not d.contended(task.key)
        retimed = {r.id: r for r in d.records(task.key)}
        for r in marked:
            assert retimed[r.id].final_pass == RETIME_PASS and retimed[r.id].final_costs


def test_a_retime_is_no_ranking_pass():
    def rec(i, cost, final=(), fpass=0):
        return Record("k", "d", "llvm", {}, "[]", f"h{i}", (cost,), MeasureErrorNo.NO_ERROR,
                      final_costs=final, final_pass=fpass)
    recs = [rec(0, 1e-3, (2e-3,), 1000), rec(1, 1e-3, (0.5e-3,), RETIME_PASS), rec(2, 3e-3)]
    # the record of the real (latest) top-k pass ranks first; a re-timed one is ranked by
    # its cost among the rest, never as "the latest pass"
    assert [r.prog_hash for r in best_records(recs, 3)] == ["h0", "h1", "h2"]
    assert [r.prog_hash for r in best_records(recs[1:], 2)] == ["h1", "h2"]


def test_no_lease_for_memory_databases_or_remote_runners(tmp_path):
    from tdsl.autotune.tuner import _timing_lease

    class Remote:
        def measure_batch(self, *a):
            return []
    mem = Database(":memory:")
    assert _timing_lease(None, mem, fast_option()) is None
    with pytest.raises(TuningError, match="file"):
        TimingLease(mem)
    on_disk = Database(str(tmp_path / "f.db"))
    remote = autotune.MeasureOption(builder=None, runner=Remote())
    assert _timing_lease(None, on_disk, remote) is None          # timed on other machines
    assert isinstance(_timing_lease(True, on_disk, remote), TimingLease)
    assert isinstance(_timing_lease(None, on_disk, fast_option()), TimingLease)
    assert _timing_lease(False, on_disk, fast_option()) is None


def test_the_machine_lease_of_dask_workers_goes_first_come_first_served(tmp_path):
    """``HostLease``: a worker that releases the lease and asks again at once (its next
    candidate already built) queues behind the worker that was waiting, instead of taking it
    back before that one's next try (which starved the other workers' candidates)."""
    import threading
    from tdsl.autotune.lease import HostLease
    path = str(tmp_path / "timing.lock")
    holder = HostLease(path)
    assert holder.acquire(0)
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(HostLease(path).acquire(30.0)))
    waiter.start()
    queue = path + ".queue"
    deadline = time.monotonic() + 30.0
    while not os.listdir(queue):                  # the waiter is queued
        assert time.monotonic() < deadline
        time.sleep(0.01)
    holder.release()
    assert not holder.acquire(0), "the releasing holder took the lease back from a waiter"
    waiter.join(30.0)
    assert got == [True]
    assert os.listdir(queue) == []                # each waiter leaves the queue


def test_a_dead_waiter_does_not_block_the_machine_lease(tmp_path):
    """A waiter that died in the queue (its file no longer touched) is passed over."""
    from tdsl.autotune.lease import QUEUE_STALE_S, HostLease
    path = str(tmp_path / "timing.lock")
    os.makedirs(path + ".queue")
    dead = os.path.join(path + ".queue", f"{0:020d}-1-1")
    open(dead, "w").close()
    old = time.time() - 10 * QUEUE_STALE_S
    os.utime(dead, (old, old))
    lease = HostLease(path)
    assert lease.acquire(0)
    lease.release()
    assert not os.path.exists(dead)
