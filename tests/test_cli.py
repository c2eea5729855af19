"""The ``tdsl`` command line as the README shows it: positional database, ``--json`` listings,
``--version``, ``python -m tdsl``, help with defaults, and ``tdsl cache info|clear``."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import tdsl
from tdsl import cli
from tdsl.autotune import Database, MeasureErrorNo, Record

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LONG_KEY = "k" * 40       # longer than the 10 characters the text listing shows


def _record(i: int, key: str = LONG_KEY) -> Record:
    config = {"tile": [i, 2 * i], "name": "a config longer than ninety characters " * 3}
    return Record(key, "matmul(64, 64, 64)", "llvm", config, "[]", f"h{i}", (1e-3 * (i + 1),),
                  MeasureErrorNo.NO_ERROR, flop=1e6)


@pytest.fixture
def db_path(tmp_path) -> str:
    path = str(tmp_path / "tune.db")
    with Database(path) as db:
        for i in range(3):
            db.add(_record(i))
    return path


def _main(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


# ---- records: the database by position (README) or by --db ------------------------------------
@pytest.mark.parametrize("action", ["show", "best"])
def test_records_take_the_database_by_position(capsys, db_path, action):
    rc, by_position, _ = _main(capsys, "records", action, db_path)
    assert rc == 0 and "matmul(64, 64, 64)" in by_position
    rc, by_option, _ = _main(capsys, "records", action, "--db", db_path)
    assert rc == 0 and by_option == by_position


def test_records_export_by_position(capsys, db_path, tmp_path):
    out = tmp_path / "r.jsonl"
    rc, text, _ = _main(capsys, "records", "export", db_path, str(out))
    assert rc == 0 and len(out.read_text().splitlines()) == 3
    # the older form still works: --db then the file
    out2 = tmp_path / "r2.jsonl"
    assert _main(capsys, "records", "export", "--db", db_path, str(out2))[0] == 0
    assert out2.read_text() == out.read_text()
    # README: `tdsl records export tune.db` -- JSON lines on stdout
    rc, text, err = _main(capsys, "records", "export", db_path)
    assert rc == 0 and [json.loads(x)["task_key"] for x in text.splitlines()] == [LONG_KEY] * 3
    assert "exported 3 records" in err


def test_records_import_by_position(capsys, db_path, tmp_path):
    out = tmp_path / "r.jsonl"
    _main(capsys, "records", "export", db_path, str(out))
    new = str(tmp_path / "new.db")
    rc, text, _ = _main(capsys, "records", "import", new, str(out))
    assert rc == 0 and "imported 3 records" in text
    with Database(new) as db:
        assert db.count() == 3


def test_two_different_databases_are_refused(capsys, db_path, tmp_path):
    with pytest.raises(SystemExit, match="two databases"):
        cli.main(["records", "show", db_path, "--db", str(tmp_path / "other.db")])


def test_records_json_listings_cut_nothing(capsys, db_path):
    rc, text, _ = _main(capsys, "records", "show", db_path, "--json")
    assert rc == 0
    tasks = json.loads(text)
    assert [t["task_key"] for t in tasks] == [LONG_KEY]
    recs = tasks[0]["records"]
    assert len(recs) == 3 and recs[0]["config"] == _record(0).config
    assert recs[0]["cost_s"] == pytest.approx(1e-3) and recs[0]["valid"]
    rc, text, _ = _main(capsys, "records", "best", db_path, "--json")
    best = json.loads(text)
    assert best[0]["task_key"] == LONG_KEY and best[0]["best"]["config"] == _record(0).config


# ---- --version, python -m tdsl, help ----------------------------------------------------------
def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"tdsl {tdsl.__version__}"


def test_python_dash_m_tdsl():
    r = subprocess.run([sys.executable, "-m", "tdsl", "--version"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"tdsl {tdsl.__version__}"


def test_tune_help_shows_defaults(capsys):
    with pytest.raises(SystemExit):
        cli.main(["tune", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for option, default in (("--target", "llvm"), ("--trials", "200"), ("--db", "tune.db"),
                            ("--seed", "0")):
        assert option in text
        assert f"(default: {default})" in text, option


# ---- the caches ----------------------------------------------------------------------------------
@pytest.fixture
def cache_env(tmp_path, monkeypatch):
    monkeypatch.delenv("TDSL_CACHE_DIR", raising=False)
    monkeypatch.delenv("TDSL_CACHE_MAX_SIZE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    root = tmp_path / "xdg" / "tdsl"
    for name, files in (("llvm", ["a.o", "a.json", "b.o", "b.json"]), ("cuda-emu", ["c.so"])):
        (root / name).mkdir(parents=True)
        for f in files:
            (root / name / f).write_bytes(b"x" * 100)
    return root


def test_cache_info_honours_xdg_cache_home(capsys, cache_env):
    rc, text, _ = _main(capsys, "cache", "info", "--json")
    assert rc == 0
    caches = {c["name"]: c for c in json.loads(text)}
    assert caches["llvm"]["path"] == str(cache_env / "llvm")
    assert caches["llvm"]["files"] == 4 and caches["llvm"]["bytes"] == 400
    assert caches["cuda-emu"]["path"] == str(cache_env / "cuda-emu")
    assert caches["cuda-emu"]["files"] == 1
    rc, text, _ = _main(capsys, "cache", "info")
    assert rc == 0 and str(cache_env / "llvm") in text


def test_cache_clear(capsys, cache_env):
    rc, text, _ = _main(capsys, "cache", "clear")
    assert rc == 0 and "cleared llvm: 4 files" in text
    assert not (cache_env / "llvm").exists() and not (cache_env / "cuda-emu").exists()
    rc, text, _ = _main(capsys, "cache", "info", "--json")
    assert all(c["files"] == 0 for c in json.loads(text))
