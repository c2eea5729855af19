"""LLVM's remarks on each tuning candidate's build travel to its record (``Record.notes``,
the ``notes`` column, ``tdsl records show --json``), bounded, and never reach the terminal;
a database file older than the column still opens and reads."""
from __future__ import annotations

import json
import os
import sqlite3
import textwrap

from tdsl import autotune
from tdsl.autotune import Database, MeasureErrorNo, Record
from tdsl.autotune.measure import MAX_NOTE_BYTES, MAX_NOTE_LINES, bound_notes

from tests.autotune.helpers import fast_option, small_matmul

# Loaded by the tuning workers (their PYTHONPATH): after the real O3 pipeline, each build
# also optimizes a loop LLVM is told to vectorize but cannot (an opaque call), into the
# same remarks sink -- so every candidate's build gets a real "loop not vectorized" remark
# from LLVM itself, printed by LLVM to the worker's stderr unless captured.  (tdsl never
# emits such a loop on its own: loops it cannot widen are ones LLVM vectorizes.)
_SITECUSTOMIZE = textwrap.dedent('''
    import importlib
    _build = importlib.import_module("tdsl.backends.llvm.build")
    from tdsl.backends.llvm.machine import parse as _parse

    _IR = """
    declare float @opaque(float)
    define float @red(float* %a, i64 %n) {
    entry:
      br label %loop
    loop:
      %i = phi i64 [0, %entry], [%i1, %loop]
      %s = phi float [0.0, %entry], [%s1, %loop]
      %p = getelementptr float, float* %a, i64 %i
      %v = load float, float* %p
      %w = call float @opaque(float %v)
      %s1 = fadd float %s, %w
      %i1 = add i64 %i, 1
      %c = icmp slt i64 %i1, %n
      br i1 %c, label %loop, label %exit, !llvm.loop !0
    exit:
      ret float %s1
    }
    !0 = distinct !{!0, !1}
    !1 = !{!"llvm.loop.vectorize.enable", i1 true}
    """
    _real = _build.optimize

    def _optimize(mod, spec, remarks=None):
        _real(mod, spec, remarks)
        _real(_parse(_IR), spec, remarks)
    _build.optimize = _optimize
''')


def test_candidates_remarks_end_in_their_records_not_on_stderr(tmp_path, monkeypatch, capfd):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(hook)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    monkeypatch.setenv("TDSL_CACHE_DIR", "off")      # every candidate is compiled afresh
    db_path = str(tmp_path / "t.db")
    task = autotune.create_task(small_matmul, (16, 16, 16))
    tuner = autotune.RandomTuner(task, seed=0)
    tuner.tune(3, fast_option(), db=db_path, batch_size=3)
    err = capfd.readouterr().err
    assert "loop not vectorized" not in err and "remark" not in err and "Error" not in err
    with Database(db_path, create=False) as db:
        recs = [r for r in db.records(task.key) if r.valid]
    assert recs
    for r in recs:
        assert any(n.startswith("llvm: ") and "loop not vectorized" in n for n in r.notes), r.notes
        assert len(r.notes) <= MAX_NOTE_LINES
    from tdsl import cli
    assert cli.main(["records", "show", db_path, "--json"]) == 0
    shown = [r for t in json.loads(capfd.readouterr().out) for r in t["records"]]
    assert any("loop not vectorized" in n for s in shown for n in s["notes"])


def test_notes_are_bounded():
    many = [f"llvm: remark: <unknown>:0:0: loop not vectorized: reason {i}" for i in range(500)]
    got = bound_notes(many)
    assert len(got) <= MAX_NOTE_LINES and got[-1].startswith("...") and "more" in got[-1]
    assert sum(len(n.encode()) + 1 for n in got) <= MAX_NOTE_BYTES
    assert got[:10] == tuple(many[:10])
    long = ["x" * 3000] * 10
    got = bound_notes(long)
    assert sum(len(n.encode()) + 1 for n in got) <= MAX_NOTE_BYTES
    assert bound_notes(many[:3]) == tuple(many[:3])
    assert bound_notes([]) == ()


def _record(i, notes=()):
    return Record("k", "desc", "llvm", {"i": i}, "[]", f"h{i}", (1e-3,), MeasureErrorNo.NO_ERROR,
                  flop=1e6, notes=tuple(notes))


def test_notes_are_stored_bounded_and_exported(tmp_path):
    with Database(str(tmp_path / "n.db")) as db:
        db.add(_record(0, ["llvm: remark: a"]))
        db.add(_record(1, [f"line {i}" for i in range(400)]))
        recs = db.records()
        assert recs[0].notes == ("llvm: remark: a",)
        assert len(recs[1].notes) <= MAX_NOTE_LINES
        db.export_jsonl(str(tmp_path / "n.jsonl"))
    with Database(str(tmp_path / "m.db")) as db2:
        db2.add_new(autotune.database.read_jsonl(str(tmp_path / "n.jsonl")))
        assert db2.records()[0].notes == ("llvm: remark: a",)


def _old_database(path):
    """A database file as written before the ``notes`` column existed."""
    with Database(str(path)) as db:
        db.add(_record(0))
        db.add(_record(1))
    con = sqlite3.connect(str(path))
    con.execute("ALTER TABLE records DROP COLUMN notes")
    con.commit()
    con.close()
    con = sqlite3.connect(str(path))
    assert "notes" not in {r[1] for r in con.execute("PRAGMA table_info(records)")}
    con.close()


def test_an_old_database_gains_the_column_and_reads(tmp_path):
    path = tmp_path / "old.db"
    _old_database(path)
    with Database(str(path)) as db:
        assert [r.notes for r in db.records()] == [(), ()]
        db.add(_record(2, ["llvm: remark: b"]))
        assert db.records()[-1].notes == ("llvm: remark: b",)


def test_an_old_read_only_database_reads(tmp_path, monkeypatch):
    """Opened read-only (SQLite's ``mode=ro``, as for a file this user may not write: the
    permission bits do not stop root), an old file cannot gain the column and is read as
    it is."""
    path = tmp_path / "old.db"
    _old_database(path)
    real = sqlite3.connect

    def read_only(target, *a, **kw):
        return real(str(target).replace("?mode=rw", "?mode=ro"), *a, **kw)
    monkeypatch.setattr(autotune.database.sqlite3, "connect", read_only)
    with Database(str(path), create=False) as db:
        recs = db.records()
    assert [r.notes for r in recs] == [(), ()] and all(r.valid for r in recs)
    con = real(str(path))
    assert "notes" not in {r[1] for r in con.execute("PRAGMA table_info(records)")}
    con.close()
