"""The tuning database: resume after a kill, concurrent writers, JSON lines, bad records."""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from tdsl import autotune
from tdsl.autotune import Database, MeasureErrorNo, Record
from tdsl.errors import TuningError

from tests.autotune.helpers import fast_option, small_matmul

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _job(db, n, batch, seed, m=32):
    return subprocess.Popen([sys.executable, "-m", "tests.autotune.tune_job", str(db), str(n),
                             str(batch), str(seed), str(m)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _record(i, key="k"):
    return Record(key, "desc", "llvm", {"i": i}, "[]", f"h{i}", (1e-3,), MeasureErrorNo.NO_ERROR,
                  flop=1e6)


def test_kill_and_resume_without_remeasuring(tmp_path):
    db_path = tmp_path / "resume.db"
    proc = _job(db_path, 14, 1, 0)
    deadline = time.time() + 120
    n_before = 0
    while time.time() < deadline and proc.poll() is None:
        if db_path.exists():
            with Database(str(db_path)) as db:
                n_before = db.count()
            if n_before >= 4:
                break
        time.sleep(0.1)
    assert proc.poll() is None, f"the job ended before it could be killed: {proc.communicate()}"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with Database(str(db_path)) as db:
        n_killed = db.count()
        assert n_killed >= 4
        task = autotune.create_task(small_matmul, (32, 32, 32))
        res = autotune.RandomTuner(task, seed=1).tune(14, fast_option(), db=db, batch_size=4)
        assert res.resumed == n_killed
        assert res.trials == 14 - n_killed
        hashes = [r.prog_hash for r in db.records(task.key)]
        assert len(hashes) == 14 == len(set(hashes))     # nothing measured twice


def test_two_processes_writing_one_database_lose_nothing(tmp_path):
    db_path = tmp_path / "shared.db"
    jobs = [_job(db_path, 6, 3, seed, m) for seed, m in ((0, 32), (1, 16))]
    outs = [j.communicate(timeout=300) for j in jobs]
    measured = 0
    for j, (out, err) in zip(jobs, outs):
        assert j.returncode == 0, err
        measured += int(out.split("MEASURED")[1].split()[0])
    with Database(str(db_path)) as db:
        assert db.count() == measured == 12
        assert len(db.tasks()) == 2


def _writer(path, start, n):
    with Database(path) as db:
        for i in range(start, start + n):
            db.add(_record(i))


def test_concurrent_inserts_from_processes(tmp_path):
    import multiprocessing as mp
    path = str(tmp_path / "stress.db")
    Database(path).close()
    ctx = mp.get_context("spawn")
    ps = [ctx.Process(target=_writer, args=(path, k * 1000, 200)) for k in range(2)]
    for p in ps:
        p.start()
    for p in ps:
        p.join(120)
        assert p.exitcode == 0
    with Database(path) as db:
        assert db.count() == 400
        assert len({r.prog_hash for r in db.records()}) == 400


def test_jsonl_roundtrip_and_best(tmp_path):
    db = Database(str(tmp_path / "a.db"))
    for i in range(5):
        r = _record(i)
        r.costs = (float(i + 1) * 1e-3,)
        db.add(r)
    db.add(Record("k", "desc", "llvm", {}, "[]", "bad", (), MeasureErrorNo.RUN_CRASH, "boom"))
    assert db.best("k")[0].config == {"i": 0}
    out = tmp_path / "r.jsonl"
    assert db.export_jsonl(str(out)) == 6
    db2 = Database(str(tmp_path / "b.db"))
    assert db2.import_jsonl(str(out)) == 6
    a = [r.to_json() for r in db.records()]
    b = [r.to_json() for r in db2.records()]
    assert a == b


def test_malformed_records_name_the_record(tmp_path):
    out = tmp_path / "bad.jsonl"
    good = json.dumps(_record(1).to_json())
    out.write_text(good + "\n" + '{"task_key": "k", "costs": "fast"}\n')
    db = Database(str(tmp_path / "c.db"))
    with pytest.raises(TuningError, match=r"line 2"):
        db.import_jsonl(str(out))
    assert db.count() == 0                 # all or nothing
    out.write_text("{not json\n")
    with pytest.raises(TuningError, match=r"line 1"):
        db.import_jsonl(str(out))
    db.add(_record(7))
    conn = sqlite3.connect(str(tmp_path / "c.db"))
    conn.execute("UPDATE records SET config = 'oops' WHERE prog_hash = 'h7'")
    conn.commit()
    rid = conn.execute("SELECT id FROM records WHERE prog_hash = 'h7'").fetchone()[0]
    conn.close()
    with pytest.raises(TuningError, match=rf"id {rid}"):
        db.records()


def test_not_a_database(tmp_path):
    p = tmp_path / "junk.db"
    p.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(TuningError, match="junk.db"):
        Database(str(p))
