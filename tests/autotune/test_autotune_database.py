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
    db.add(_record(8))
    conn = sqlite3.connect(str(tmp_path / "c.db"))
    conn.execute("UPDATE records SET config = 'oops' WHERE prog_hash = 'h7'")
    conn.commit()
    rid = conn.execute("SELECT id FROM records WHERE prog_hash = 'h7'").fetchone()[0]
    conn.close()
    with pytest.warns(UserWarning, match=rf"c.db.*malformed record id {rid}\b"):
        assert [r.prog_hash for r in db.records()] == ["h8"]      # skipped, never fatal


def test_not_a_database(tmp_path):
    p = tmp_path / "junk.db"
    p.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(TuningError, match="junk.db"):
        Database(str(p))


# ---- the read path: missing, damaged and malformed databases ------------------------------
def _db_with(tmp_path, n=6, name="r.db"):
    path = str(tmp_path / name)
    with Database(path) as db:
        for i in range(n):
            r = _record(i)
            r.costs = ((i + 1) * 1e-3,)
            r.sizes = {"n": 64}
            r.signature = [["C", "i", "j"]]
            db.add(r)
    return path


def _sql(path, sql):
    con = sqlite3.connect(path)
    con.execute(sql)
    con.commit()
    con.close()


def test_reading_a_missing_database_is_an_error_and_creates_nothing(tmp_path):
    p = tmp_path / "tunning.db"              # a typo of tuning.db
    with pytest.raises(TuningError, match="no tuning database at .*tunning.db"):
        Database(str(p), create=False)
    with pytest.raises(TuningError, match="tunning.db"):
        autotune.open_database(p, create=False)
    with pytest.raises(TuningError, match="tunning.db"):
        autotune.apply_history_best(str(p))
    from tdsl.autotune.plot import tuning_curve
    with pytest.raises(TuningError, match="tunning.db"):
        tuning_curve(str(p))
    assert not p.exists()
    Database(str(p)).close()                  # a writer (tuning, import) creates it
    assert Database(str(p), create=False).count() == 0


def test_damaged_pages_are_a_tuning_error_naming_the_file(tmp_path):
    import random
    path = str(tmp_path / "smash.db")
    with Database(path) as db:
        for i in range(300):
            r = _record(i)
            r.error_msg = "x" * 500                 # many pages
            db.add(r)
    _sql(path, "PRAGMA wal_checkpoint(TRUNCATE)")
    rng = random.Random(0)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:                  # every page but the first (the header)
        for off in range(4096, size, 4096):
            f.seek(off + 100)
            f.write(bytes(rng.randrange(256) for _ in range(200)))
    with pytest.raises(TuningError, match=r"smash.db.*(damaged|malformed).*\.recover"):
        with Database(path, create=False) as db:
            db.records()
            db.count()
            db.tasks()


def test_text_that_is_not_utf8_skips_the_row_only(tmp_path):
    path = _db_with(tmp_path)
    _sql(path, "UPDATE records SET trace = CAST(x'5bfffe5d' AS TEXT) WHERE prog_hash = 'h0'")
    with Database(path, create=False) as db, pytest.warns(UserWarning, match="record id 1"):
        assert [r.prog_hash for r in db.records()] == [f"h{i}" for i in range(1, 6)]


@pytest.mark.parametrize("sql", [
    "config = 'oops'", "trace = 'not json'", "trace = '{\"primitive\": \"split\"}'",
    "trace = '[{\"primitive\": \"split\", \"stage\": \"C\", \"loops\": [\"i\"]}]'",
    "costs = 'fast'", "costs = '[]'", "costs = '[0]'", "costs = '[-1e-3]'", "costs = '[NaN]'",
    "costs = '[Infinity]'", "costs = '{}'", "error_no = 99", "sizes = '[]'",
    "sizes = '{\"n\": \"64\"}'", "signature = '{}'", "features = x'010203'", "flop = 'lots'",
    "target = x'6c6c766d'", "prog_hash = x'00'", "timestamp = 'now'",
])
def test_a_malformed_row_is_skipped_with_a_warning_and_never_best(tmp_path, sql):
    path = _db_with(tmp_path)
    _sql(path, f"UPDATE records SET {sql} WHERE prog_hash = 'h0'")   # h0 is the fastest
    with Database(path, create=False) as db:
        with pytest.warns(UserWarning, match="skipping malformed record id 1"):
            recs = db.records()
        assert [r.prog_hash for r in recs] == [f"h{i}" for i in range(1, 6)]
        assert db.best("k")[0].prog_hash == "h1"
    A, B, C = _matmul_ops()
    # a reader of the workload (apply_history_best) does not crash on the row either
    with autotune.apply_history_best(path, warn_missing=False) as ctx:
        ctx.query([C.op], "llvm")


def _matmul_ops():
    import tdsl as td
    A = td.placeholder((8, 8), "float32", name="A")
    B = td.placeholder((8, 8), "float32", name="B")
    r = td.reduce_axis((0, 8), name="r")
    return A, B, td.compute((8, 8), lambda i, j: td.sum(A[i, r] * B[r, j], axis=r), name="C")


def test_non_positive_costs_are_never_chosen_and_never_divide_by_zero(tmp_path):
    path = _db_with(tmp_path)
    _sql(path, "UPDATE records SET costs = '[-1]' WHERE prog_hash = 'h5'")   # the slowest
    with Database(path, create=False) as db, pytest.warns(UserWarning, match="id 6"):
        assert db.best("k")[0].prog_hash == "h0"
    zero = _record(1)
    zero.costs = (0.0,)
    assert not zero.valid and zero.gflops == 0.0 and zero.cost == float("inf")
    assert autotune.database.best_records([zero, _record(2)])[0].prog_hash == "h2"
    # and the CLI's `records best` prints a table instead of ZeroDivisionError
    _sql(path, "UPDATE records SET costs = '[0]' WHERE prog_hash = 'h0'")
    r = subprocess.run([sys.executable, "-m", "tdsl.cli", "records", "best", "--db", path],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "GFLOP/s" in r.stdout, r.stderr[-2000:]


def test_another_sqlite_file_is_refused_and_left_alone(tmp_path):
    path = str(tmp_path / "other.db")
    _sql(path, "CREATE TABLE records (id INTEGER PRIMARY KEY, foo TEXT)")
    with pytest.raises(TuningError, match="other.db.*not a tdsl tuning database"):
        Database(path)
    con = sqlite3.connect(path)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    con.close()
    assert tables == {"records"}


@pytest.mark.parametrize("field,value", [
    ("trace", "not a trace"), ("trace", {"primitive": "split"}), ("trace", [1, 2]),
    ("sizes", [64]), ("sizes", {"n": 0}), ("signature", {"C": 1}), ("costs", [0.0]),
    ("costs", [-1e-3]), ("costs", 1e-3), ("costs", ["1e-3"]), ("config", [1]),
    ("error_no", 99), ("error_no", "0"), ("task_key", ""), ("timestamp", "now"),
    ("final_costs", [0.0]),
])
def test_import_checks_every_field(tmp_path, field, value):
    d = _record(1).to_json()
    d[field] = value
    src = tmp_path / "bad.jsonl"
    src.write_text(json.dumps(_record(0).to_json()) + "\n" + json.dumps(d) + "\n")
    db = Database(str(tmp_path / "imp.db"))
    with pytest.raises(TuningError, match=rf"line 2.*{field if field != 'final_costs' else 're-measured'}"):
        db.import_jsonl(str(src))
    assert db.count() == 0


def test_import_is_idempotent(tmp_path):
    path = _db_with(tmp_path)
    with Database(path) as db:
        db.add(Record("k", "desc", "llvm", {}, "[]", "bad", (), MeasureErrorNo.RUN_CRASH, "boom"))
        rec = db.records()[0]
        db.add_remeasure(rec, 5, [2e-3, 3e-3])
        out = str(tmp_path / "r.jsonl")
        assert db.export_jsonl(out) == 7
        assert db.import_jsonl(out) == 0          # into itself: all there already
        assert db.count() == 7
    other = Database(str(tmp_path / "o.db"))
    assert other.import_jsonl(out) == 7
    assert other.import_jsonl(out) == 0
    assert other.count() == 7
    assert [r.to_json() for r in other.records()] == [json.loads(l) for l in open(out)]
    # a record that is a new measurement of the same program is not a duplicate
    d = json.loads(open(out).readline())
    d["timestamp"] += 1
    (tmp_path / "one.jsonl").write_text(json.dumps(d) + "\n")
    assert other.import_jsonl(str(tmp_path / "one.jsonl")) == 1
    # the CLI says how many were there already
    r = subprocess.run([sys.executable, "-m", "tdsl.cli", "records", "import", "--db",
                        str(tmp_path / "o.db"), out], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "imported 0 records" in r.stdout and "7 already there" in r.stdout


def test_import_adds_a_remeasure_to_a_stored_record(tmp_path):
    path = _db_with(tmp_path, n=2)
    out = str(tmp_path / "r.jsonl")
    with Database(path) as db:
        db.export_jsonl(out)
        other = Database(str(tmp_path / "o.db"))
        other.import_jsonl(out)
        db.add_remeasure(db.records()[1], 9, [5e-4])
        db.export_jsonl(out)
    assert other.import_jsonl(out) == 0
    assert other.best("k")[0].final_costs == (5e-4,) and other.best("k")[0].final_pass == 9


def test_cli_readers_refuse_a_missing_database(tmp_path):
    p = tmp_path / "nope.db"
    for action in (["show"], ["best"], ["export", str(tmp_path / "x.jsonl")]):
        r = subprocess.run([sys.executable, "-m", "tdsl.cli", "records", *action, "--db", str(p)],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and "no tuning database" in r.stderr, r.stderr
    assert not p.exists()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task_key": 1}\n')
    r = subprocess.run([sys.executable, "-m", "tdsl.cli", "records", "import", "--db", str(p),
                        str(bad)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "line 1" in r.stderr and not p.exists()


# ---- tuners sharing one database ------------------------------------------------------------
def test_claims_keep_two_owners_off_one_program(tmp_path):
    from tdsl.autotune.database import claim_owner
    db = Database(str(tmp_path / "claims.db"))
    a, b = claim_owner(), claim_owner()
    db.add(_record(0))
    assert db.claim("k", ["h0", "h1", "h2"], a) == {"h1", "h2"}     # h0 has a record
    assert db.claim("k", ["h1", "h3"], b) == {"h3"}                 # h1 is a's
    assert db.claim("k", ["h1"], a) == {"h1"}                       # one's own claim again
    assert db.claim("other", ["h1"], b) == {"h1"}                   # claims are per task
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    host = a.split(":")[0]
    db.claim("k", ["h4"], f"{host}:{dead}:x")
    assert db.claim("k", ["h4"], b) == {"h4"}      # the claim of a dead process lapses
    db.claim("k", ["h5"], a, ttl=-1)
    assert db.claim("k", ["h5"], b) == {"h5"}      # so does an expired one
    assert db.in_flight("k", b) == 2                 # a's h1, h2 (h5 is b's now)
    db.add(_record(1))
    assert db.in_flight("k", b) == 1                 # h1 is recorded
    db.release("k", b)
    assert db.claim("k", ["h3"], a) == {"h3"}
    assert db.in_flight("k", b) == 2


def test_two_tuners_with_one_seed_never_measure_a_program_twice(tmp_path):
    db_path = tmp_path / "same.db"
    Database(str(db_path)).close()
    jobs = [_job(db_path, 12, 3, 0) for _ in range(2)]
    outs = [j.communicate(timeout=300) for j in jobs]
    measured = 0
    for j, (out, err) in zip(jobs, outs):
        assert j.returncode == 0, err
        measured += int(out.split("MEASURED")[1].split()[0])
    with Database(str(db_path)) as db:
        hashes = [r.prog_hash for r in db.records()
                  if r.error_no is not MeasureErrorNo.INSTANTIATION_ERROR]
    assert len(hashes) == len(set(hashes)) == measured     # nothing measured twice
    assert measured <= 12 + 3              # one budget (in-flight claims count), not two


def test_a_key_of_the_wrong_type_is_an_argument_error_not_a_damaged_file(tmp_path):
    from tdsl.errors import ArgumentError
    with Database(str(tmp_path / "keys.db")) as db:
        for call in (lambda: db.records(("a", "b")), lambda: db.records(target=3),
                     lambda: db.by_workload(None), lambda: db.count(b"key"),
                     lambda: db.measured_hashes(1), lambda: db.records_after(("k",), 0),
                     lambda: db.contended(["k"])):
            with pytest.raises(ArgumentError, match="must be a string") as info:
                call()
            assert "damaged" not in str(info.value)
        assert db.records("no such task") == [] and db.count() == 0
