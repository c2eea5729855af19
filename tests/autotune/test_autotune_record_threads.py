"""A CPU tuning record answers for the thread count it was timed with: the records say it,
a tuning session at another count neither resumes nor ranks them, and lookups (``td.build``
under ``apply_history_best``, ``build_dynamic``, a compiled model) take the records of the
threads they will run with, then those of unknown count, never those of another count."""
import json
import sqlite3
import warnings

import numpy as np
import pytest

import tdsl as td
from tdsl import autotune
from tdsl.autotune import Database, MeasureErrorNo, Record
from tdsl.autotune.database import read_jsonl
from tdsl.autotune.dispatch import best_record, for_threads
from tdsl.autotune.measure_worker import _threads
from tdsl.errors import TuningError

from tests.autotune.helpers import fast_option, small_matmul


def _vector_add(n=64):
    A = td.placeholder((n,), "float32", name="A")
    B = td.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    return [A, B]


def _record(task, prog_hash, threads, cost=1e-3, trace="[]"):
    return Record(task.key, task.description, "llvm", {}, trace, prog_hash, (cost,),
                  MeasureErrorNo.NO_ERROR, flop=task.flop, signature=task.signature,
                  workload=task.workload, sizes=dict(task.sizes), threads=threads)


def test_records_store_and_export_their_thread_count(tmp_path):
    task = autotune.create_auto_task(_vector_add(), "llvm")
    db = Database(str(tmp_path / "t.db"))
    for h, t in (("one", 1), ("two", 2), ("old", 0)):
        db.add(_record(task, h, t))
    assert {r.prog_hash: r.threads for r in db.records()} == {"one": 1, "two": 2, "old": 0}
    assert {r.prog_hash for r in db.records(threads=2)} == {"two", "old"}
    assert {r.prog_hash for r in db.records(task.key, threads=1)} == {"one", "old"}
    assert {r.prog_hash for r in db.records_after(task.key, 0, threads=2)} == {"two", "old"}
    path = str(tmp_path / "t.jsonl")
    db.export_jsonl(path)
    lines = [json.loads(x) for x in open(path)]
    assert [x.get("threads", 0) for x in lines] == [1, 2, 0]
    assert [r.threads for r in read_jsonl(path)] == [1, 2, 0]
    bad = dict(lines[0], threads=-1)
    with pytest.raises(TuningError, match="threads"):
        Record.from_json(bad, "test")


def test_a_file_older_than_the_column_reads_as_unknown_and_gains_it(tmp_path):
    path = str(tmp_path / "old.db")
    task = autotune.create_auto_task(_vector_add(), "llvm")
    Database(path).add(_record(task, "h", 0))
    con = sqlite3.connect(path)
    con.execute("ALTER TABLE records DROP COLUMN threads")
    con.commit()
    con.close()
    (rec,) = Database(path, create=False).records()
    assert rec.threads == 0
    con = sqlite3.connect(path)
    assert "threads" in {r[1] for r in con.execute("PRAGMA table_info(records)")}
    con.close()


def test_for_threads_prefers_the_exact_count_then_unknown():
    task = autotune.create_auto_task(_vector_add(), "llvm")
    one, two, old = (_record(task, h, t, c) for h, t, c in
                     (("one", 1, 3e-3), ("two", 2, 1e-3), ("old", 0, 2e-3)))
    assert best_record([one, two, old], threads=1) is one
    assert best_record([one, two, old], threads=2) is two
    assert best_record([one, old], threads=2) is old
    assert best_record([one], threads=2) is None
    assert best_record([one, two, old], threads=0) is two      # any count: the fastest
    assert for_threads([one, two], 4) == []


def test_tuning_at_two_threads_does_not_resume_one_thread_records(tmp_path):
    task = autotune.create_task(small_matmul, (32, 32, 32))
    db = str(tmp_path / "m.db")
    ref = str(tmp_path / "ref")
    opt1 = fast_option(n_threads=1, reference_dir=ref)
    autotune.RandomTuner(task).tune(4, opt1, db=db, batch_size=2, remeasure_top=0)
    opt1.close()
    recs = Database(db, create=False).records(task.key)
    assert recs and {r.threads for r in recs if r.valid} == {1}
    opt2 = fast_option(n_threads=2, reference_dir=ref)
    res = autotune.RandomTuner(task).tune(4, opt2, db=db, batch_size=2, remeasure_top=0)
    opt2.close()
    assert res.resumed == 0 and res.trials == 4
    two = Database(db, create=False).records(task.key, threads=2)
    assert {r.threads for r in two if r.valid} == {2}
    # the programs timed at one thread are timed again at two (one seed: the same
    # programs), the untuned defaults first: a record answers for its own count only
    assert {r.prog_hash for r in two} == {r.prog_hash for r in recs}
    assert any("__default__" in r.config for r in two)
    # and a third session at one thread resumes only its own
    opt3 = fast_option(n_threads=1, reference_dir=ref)
    res = autotune.RandomTuner(task).tune(4, opt3, db=db, batch_size=2, remeasure_top=0)
    opt3.close()
    assert res.resumed == len(recs)


def test_build_takes_the_record_of_its_thread_count(tmp_path):
    args = _vector_add(256)
    task = autotune.create_auto_task(args, "llvm")
    B = args[-1]
    sch = td.create_schedule(B.op)
    sch[B].split(B.op.axis[0], factor=8)
    split = sch.trace.to_json()
    db = str(tmp_path / "b.db")
    with Database(db) as d:
        d.add(_record(task, "split-at-1", 1, trace=split))
    a = np.random.default_rng(0).uniform(-1, 1, 256).astype("float32")
    with autotune.apply_history_best(db, threads=1) as ctx:
        f = td.build(td.create_schedule(B.op), args, target="llvm")
    assert ctx.hits == ["B"] and ctx.misses == []
    out = np.empty_like(a)
    f(a, out)
    np.testing.assert_allclose(out, a * 2 + 1, rtol=1e-6)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with autotune.apply_history_best(db, threads=2) as ctx:
            td.build(td.create_schedule(B.op), args, target="llvm")
    assert ctx.misses == ["B"] and ctx.other_threads == ["B"]
    text = " ".join(str(w.message) for w in caught)
    assert "timed with 1 thread(s)" in text and "runs with 2" in text


def test_build_dynamic_skips_records_of_other_thread_counts(tmp_path):
    n = td.var("n")
    A = td.placeholder((n,), "float32", name="A")
    B = td.compute((n,), lambda i: A[i] + 1.0, name="B")
    db = str(tmp_path / "d.db")
    with Database(db) as d:
        for size, threads in ((16, 1), (256, 2)):
            task = autotune.create_auto_task([A, B], "llvm", sizes={"n": size})
            d.add(_record(task, f"h{size}", threads))
    mod = autotune.build_dynamic([A, B], db, threads=2)
    assert [key for key, _ in mod.kernels] == [(256,)]
    a = np.random.default_rng(1).uniform(-1, 1, 40).astype("float32")
    out = np.empty_like(a)
    mod(a, out)
    np.testing.assert_allclose(out, a + 1, rtol=1e-6)
    with pytest.raises(TuningError, match="3 thread"):
        autotune.build_dynamic([A, B], db, threads=3)


def test_a_dask_worker_reports_the_threads_of_its_isolated_process(monkeypatch):
    monkeypatch.setenv("TDSL_NUM_THREADS", "5")
    assert _threads("llvm", None) == 5
    assert _threads("llvm", {"TDSL_NUM_THREADS": "1"}) == 1
    assert _threads("cuda", {"TDSL_NUM_THREADS": "1"}) == 0


def test_cli_best_lists_the_best_of_each_thread_count(tmp_path, capsys):
    from tdsl.cli import main
    task = autotune.create_auto_task(_vector_add(), "llvm")
    db = str(tmp_path / "c.db")
    with Database(db) as d:
        for h, t, c in (("a", 1, 2e-3), ("b", 1, 3e-3), ("c", 2, 1e-3)):
            d.add(_record(task, h, t, c))
    assert main(["records", "best", db]) == 0
    lines = capsys.readouterr().out.splitlines()[1:]
    assert [ln.split()[2] for ln in lines] == ["t1", "t2"]
    assert main(["records", "best", db, "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)
    assert {k: v["cost_s"] for k, v in entry["best_by_threads"].items()} == {"1": 2e-3, "2": 1e-3}
