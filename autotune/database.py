"""The tuning-record store: SQLite (one file, several writers), JSON-lines export/import.

Every measured candidate is one row, written (and committed) as soon as it is
measured, so a killed job loses nothing and resumes without re-measuring: the
tuner asks ``measured_hashes(task_key)`` and skips those programs.  WAL mode and
a busy timeout let several tuning processes write one file at once.

A record carries the task key and description, the target, the candidate's
config and trace (JSON), the hash of its lowered program, the costs (seconds per
run) or an error number, optionally its feature vector (for training), and LLVM's
remarks on its build (``notes``, at most 50 lines / 8 KB: kept for whoever wants them,
never printed; a file older than that column gains it on open, and one opened
read-only is read without it), and the CPU threads the candidate ran with (``threads``; 0:
not known — a GPU task, or a record older than the column).

Threads: a program tuned on one thread is often not the best on two (a model's kernels
tuned at one thread ran up to 1.45x slower at two than their untuned defaults), so a
record answers only for its own thread count.  Readers pass ``threads=`` to ``records``,
``records_after`` and ``contended`` to see the records timed with that many threads and
those of unknown count (``fits_threads``); lookups prefer an exact match
(``dispatch.best_record``).

Re-measurements: at the end of a tuning job the top candidates are timed again,
interleaved (``Tuner.tune``); those samples go to a separate ``remeasures`` table
(one row per record and pass), so the ``records`` table keeps one row per measured
program (resume and counts are unchanged) and databases without the table (older
ones, which gain it on open) read as before.  A record read back carries its latest
re-measurement as ``final_costs``/``final_pass``; ``Record.cost`` is then their
median, and ``best``/``best_records`` rank the records of the latest pass first.

The read path trusts nothing: readers open with ``create=False`` (a mistyped path is
a ``TuningError``, not a new empty file), every SQLite error is a ``TuningError``
naming the file and what to do, and every record read or imported is checked
(``record_check``: costs finite and > 0, a trace that parses, sizes an object...);
a malformed row is skipped with a warning naming it.  Import adds only records not
stored yet (``Record.content_key``), so importing a file twice adds nothing.

Tuners sharing one file: each re-reads the rows others wrote (``records_after``)
before a batch and ``claim``s the programs it is about to measure (the ``claims``
table), so no program is measured twice.

Tuners sharing one machine: the ``leases`` table holds named leases with an expiry
(``acquire_lease``/``renew_lease``/``release_lease``; ``lease.TimingLease`` holds the
machine's timing lease around each measurement, renewing it); a lease whose holder
died lapses at its expiry (at once for a dead process on this host).  A record timed
without the lease (it was not had in time) is marked in the ``contended`` table
(``Record.contended``) until it is timed again alone.
"""
from __future__ import annotations

import json
import math
import os
import socket
import sqlite3
import time
import uuid
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Sequence

import numpy as np

from tdsl.errors import ArgumentError, TuningError

from .measure import MeasureErrorNo, bound_notes, median, spread
from .record_check import check_costs, check_record, error_no

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    task_key TEXT NOT NULL,
    task_desc TEXT NOT NULL,
    target TEXT NOT NULL,
    config TEXT NOT NULL,
    trace TEXT NOT NULL,
    prog_hash TEXT NOT NULL,
    costs TEXT NOT NULL,
    error_no INTEGER NOT NULL,
    error_msg TEXT NOT NULL DEFAULT '',
    flop REAL NOT NULL DEFAULT 0,
    all_cost REAL NOT NULL DEFAULT 0,
    timestamp REAL NOT NULL,
    signature TEXT NOT NULL DEFAULT '[]',
    workload TEXT NOT NULL DEFAULT '',
    sizes TEXT NOT NULL DEFAULT '{}',
    feature_version INTEGER NOT NULL DEFAULT 0,
    features BLOB,
    notes TEXT NOT NULL DEFAULT '[]',
    threads INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS records_task ON records (task_key);
CREATE INDEX IF NOT EXISTS records_workload ON records (workload);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS remeasures (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    record_id INTEGER NOT NULL,
    pass INTEGER NOT NULL,
    costs TEXT NOT NULL,
    timestamp REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS remeasures_record ON remeasures (record_id);
CREATE TABLE IF NOT EXISTS claims (
    task_key TEXT NOT NULL,
    prog_hash TEXT NOT NULL,
    owner TEXT NOT NULL,
    expires REAL NOT NULL,
    PRIMARY KEY (task_key, prog_hash)
);
CREATE TABLE IF NOT EXISTS leases (
    name TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    expires REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS contended (
    record_id INTEGER PRIMARY KEY,
    timestamp REAL NOT NULL
);
"""

#: The re-measure pass of a contended timing re-taken alone (``Tuner._retime_contended``):
#: it replaces the record's cost but is no ranking pass (``best_records`` ignores it when
#: looking for the latest pass, so it never puts its record ahead of a real top-k pass).
RETIME_PASS = 1

_FIELDS = ("task_key", "task_desc", "target", "config", "trace", "prog_hash", "costs", "error_no",
           "error_msg", "flop", "all_cost", "timestamp", "signature", "workload", "sizes")


@dataclass
class Record:
    """One measured candidate."""

    task_key: str
    task_desc: str
    target: str
    config: dict
    trace: str
    prog_hash: str
    costs: tuple[float, ...]
    error_no: MeasureErrorNo
    error_msg: str = ""
    flop: float = 0.0
    all_cost: float = 0.0
    timestamp: float = field(default_factory=time.time)
    signature: list = field(default_factory=list)
    workload: str = ""
    sizes: dict = field(default_factory=dict)
    features: Optional[np.ndarray] = None
    feature_version: int = 0
    id: Optional[int] = None
    final_costs: tuple[float, ...] = ()   # the latest interleaved re-measurement, if any
    final_pass: int = 0                   # which re-measure pass (0: never re-measured)
    contended: bool = False               # timed while another process held the timing lease
    notes: tuple[str, ...] = ()           # LLVM's remarks on the build (``measure.bound_notes``)
    threads: int = 0                      # CPU threads it ran with (0: unknown, or a GPU task)

    @property
    def valid(self) -> bool:
        """A measurement with a cost: no error and seconds per run finite and > 0."""
        return self.error_no is MeasureErrorNo.NO_ERROR and bool(self.costs) and \
            all(math.isfinite(c) and c > 0 for c in self.costs)

    @property
    def cost(self) -> float:
        """Median seconds per run: of the re-measurement when there is one (``inf`` when
        invalid)."""
        if not self.valid:
            return math.inf
        return median(self.final_costs or self.costs)

    @property
    def search_cost(self) -> float:
        """Median seconds per run as measured during the search."""
        return median(self.costs) if self.valid else math.inf

    @property
    def spread(self) -> float:
        """(slowest - fastest sample) / median of the samples ``cost`` comes from."""
        return spread(self.final_costs or self.costs)

    @property
    def gflops(self) -> float:
        cost = self.cost
        return self.flop / cost / 1e9 if self.flop and 0 < cost < math.inf else 0.0

    def to_json(self) -> dict:
        return {"task_key": self.task_key, "task_desc": self.task_desc, "target": self.target,
                "config": self.config, "trace": json.loads(self.trace), "prog_hash": self.prog_hash,
                "costs": list(self.costs), "error_no": int(self.error_no),
                "error_msg": self.error_msg, "flop": self.flop, "all_cost": self.all_cost,
                "timestamp": self.timestamp, "signature": self.signature,
                "workload": self.workload, "sizes": self.sizes,
                **({"notes": list(self.notes)} if self.notes else {}),
                **({"threads": self.threads} if self.threads else {}),
                **({"final_costs": list(self.final_costs), "final_pass": self.final_pass}
                   if self.final_costs else {})}

    @staticmethod
    def from_json(d: Any, where: str) -> "Record":
        """Parse and check a JSON record (``record_check``); ``where`` names it in the
        ``TuningError`` of a malformed one."""
        try:
            if not isinstance(d, dict):
                raise TypeError(f"expected an object, got {type(d).__name__}")
            trace = d["trace"]
            if not isinstance(trace, str):
                trace = json.dumps(trace)
            costs = d["costs"]
            final = d.get("final_costs", [])
            notes = d.get("notes", [])
            if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
                raise TypeError("notes must be a list of strings")
            if not isinstance(costs, list) or not isinstance(final, list):
                raise TypeError("costs and final_costs must be lists")
            rec = Record(d["task_key"], d.get("task_desc", ""), d["target"], d.get("config", {}),
                         trace, d["prog_hash"], tuple(costs), error_no(d["error_no"]),
                         d.get("error_msg", ""), d.get("flop", 0.0), d.get("all_cost", 0.0),
                         d.get("timestamp", 0.0), d.get("signature", []), d.get("workload", ""),
                         d.get("sizes", {}), final_costs=tuple(final),
                         final_pass=d.get("final_pass", 0), notes=bound_notes(notes),
                         threads=d.get("threads", 0))
            if not isinstance(rec.final_pass, int) or isinstance(rec.final_pass, bool):
                raise TypeError("final_pass must be an integer")
            check_record(rec)
            return rec
        except (KeyError, TypeError, ValueError) as e:
            raise TuningError(f"malformed tuning record ({where}): {type(e).__name__}: {e}") from None

    @property
    def content_key(self) -> tuple:
        """What makes two records the same measurement (import skips a record whose key is
        already stored, so importing a file twice adds nothing)."""
        return (self.task_key, self.target, self.prog_hash, int(self.error_no),
                tuple(self.costs), float(self.timestamp))


_WHAT_TO_DO = ("restore it from a backup or a JSON-lines export (`tdsl records import --db NEW.db "
               "FILE.jsonl`), salvage it with `sqlite3 {path} .recover | sqlite3 NEW.db`, or "
               "tune into a new file")


def _notes(raw: Any) -> tuple[str, ...]:
    """A row's notes (JSON list of strings); damaged notes read as none (they are
    commentary, never a reason to skip the record)."""
    try:
        got = json.loads(raw) if isinstance(raw, str) else []
    except ValueError:
        return ()
    return bound_notes([n for n in got if isinstance(n, str)]) if isinstance(got, list) else ()


def _text(raw: bytes) -> "str | bytes":
    """SQLite TEXT as str; bytes that are not UTF-8 (a damaged row) stay bytes, so the
    row is skipped as malformed instead of failing the whole query."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


class Database:
    """Tuning records in one SQLite file (``path``; ``":memory:"`` for a scratch store).

    ``create=False`` opens an existing file only (readers: a mistyped path is a
    ``TuningError``, never a new empty database).  Every SQLite error on open, read
    or write is a ``TuningError`` naming the file and what to do; a malformed row is
    skipped with a warning naming it (``record_check``).
    """

    def __init__(self, path: "str | os.PathLike", timeout: float = 60.0, create: bool = True):
        self.path = os.fspath(path)
        self.timeout = timeout
        self._warned: set = set()
        memory = self.path == ":memory:"
        if not create and not memory and not os.path.isfile(self.path):
            raise TuningError(f"no tuning database at {self.path!r}: check the path (reading "
                              f"never creates one; a tuning job such as `tdsl tune ... --db "
                              f"{self.path}` does)")
        target, uri = self.path, False
        if not create and not memory:   # mode=rw: fail rather than create if it vanished
            target, uri = Path(os.path.abspath(self.path)).as_uri() + "?mode=rw", True
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._conn = sqlite3.connect(target, timeout=timeout, isolation_level=None,
                                             check_same_thread=False, uri=uri)
                self._conn.text_factory = _text
                self._initialize()
                break
            except sqlite3.OperationalError as e:
                # Switching a new file to WAL needs a moment of exclusive access, which the
                # busy timeout does not always wait for while another process sets it up.
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise TuningError(self._explain(e, "cannot open")) from None
                self._conn.close()
                time.sleep(0.05)
            except sqlite3.Error as e:
                raise TuningError(self._explain(e, "cannot open")) from None

    def _explain(self, e: sqlite3.Error, doing: str) -> str:
        msg = str(e)
        head = f"tuning database {self.path!r}: {doing}: {msg}"
        if "locked" in msg or "busy" in msg:
            return f"{head} (another process held it for more than {self.timeout:g} s; retry)"
        if "readonly" in msg or "read-only" in msg:
            return f"{head} (the file or its folder is read-only; tune into a writable copy)"
        if "unable to open" in msg:
            return f"{head} (does the folder exist, and may this user write it?)"
        if "full" in msg or "I/O" in msg:
            return f"{head} (free disk space or check the disk, then retry)"
        return f"{head}; the file is damaged or not a tuning database: " + \
            _WHAT_TO_DO.format(path=self.path)

    @contextmanager
    def _guard(self, doing: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as e:
            raise TuningError(self._explain(e, doing)) from None

    def _initialize(self) -> None:
        self._check_schema()
        if self.path != ":memory:":
            self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        try:
            self._conn.executescript(_SCHEMA)
            self._conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)",
                               (str(SCHEMA_VERSION),))
            for column, decl in (("notes", "TEXT NOT NULL DEFAULT '[]'"),
                                 ("threads", "INTEGER NOT NULL DEFAULT 0")):
                if column not in self._columns("records"):    # a file older than the column
                    self._conn.execute(f"ALTER TABLE records ADD COLUMN {column} {decl}")
        except sqlite3.OperationalError as e:
            # a read-only file is read as it is; another process may have added the column
            if "readonly" not in str(e) and "duplicate column" not in str(e):
                raise
        # ... an older file opened read-only may lack the columns of notes and threads
        columns = self._columns("records")
        self._notes_sql = "r.notes" if "notes" in columns else "'[]'"
        self._threads_sql = "r.threads" if "threads" in columns else "0"
        # an older file opened read-only may lack the table of contended marks
        self._contended_sql = "EXISTS (SELECT 1 FROM contended c WHERE c.record_id = r.id)" \
            if self._conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND "
                                  "name = 'contended'").fetchone() else "0"

    def _columns(self, table: str) -> set:
        return {r[1] for r in self._conn.execute(f"PRAGMA table_info({table})")}

    def _check_schema(self) -> None:
        """Refuse an SQLite file whose tables are not ours (before adding any)."""
        for table, needed in (("records", _FIELDS + ("feature_version", "features")),
                              ("remeasures", ("record_id", "pass", "costs"))):
            cols = self._columns(table)
            missing = [c for c in needed if c not in cols]
            if cols and missing:
                raise TuningError(f"{self.path!r} is an SQLite file but not a tdsl tuning "
                                  f"database (its table {table!r} lacks {missing}): pass the "
                                  f"right file, or a new path to start one")

    # ---- writing ---------------------------------------------------------------------------
    def add(self, rec: Record) -> int:
        """Store one record (committed at once); returns its id."""
        feats = None
        if rec.features is not None:
            feats = np.asarray(rec.features, dtype=np.float32).tobytes()
        row = (rec.task_key, rec.task_desc, rec.target, json.dumps(rec.config), rec.trace,
               rec.prog_hash, json.dumps(list(rec.costs)), int(rec.error_no), rec.error_msg,
               rec.flop, rec.all_cost, rec.timestamp, json.dumps(rec.signature), rec.workload,
               json.dumps(rec.sizes), rec.feature_version, feats,
               json.dumps(list(bound_notes(rec.notes))), int(rec.threads))
        with self._guard("cannot write a record"):
            cur = self._conn.execute(
                f"INSERT INTO records ({', '.join(_FIELDS)}, feature_version, features, notes, "
                f"threads) VALUES ({', '.join('?' * (len(_FIELDS) + 4))})", row)
            rec.id = cur.lastrowid
            if rec.final_costs:
                self._insert_remeasure(rec.id, rec.final_pass, rec.final_costs)
        return int(cur.lastrowid)

    def add_remeasure(self, rec: Record, pass_id: int, costs: Sequence[float]) -> None:
        """Store a re-measurement of the stored record ``rec`` (committed at once); ``rec``
        is updated to carry it."""
        if rec.id is None:
            raise TuningError("add_remeasure: the record is not stored in a database")
        try:
            costs = check_costs(list(costs), "a re-measurement's costs")
        except ValueError as e:
            raise TuningError(f"add_remeasure: {e}") from None
        self._insert_remeasure(rec.id, pass_id, costs)
        rec.final_costs = costs
        rec.final_pass = pass_id

    def _insert_remeasure(self, record_id: int, pass_id: int, costs: Sequence[float]) -> None:
        with self._guard("cannot write a re-measurement"):
            self._conn.execute("INSERT INTO remeasures (record_id, pass, costs, timestamp) "
                               "VALUES (?, ?, ?, ?)",
                               (record_id, int(pass_id), json.dumps([float(c) for c in costs]),
                                time.time()))

    def add_many(self, records: Iterable[Record]) -> int:
        """Store every record in one transaction (all or none); returns how many."""
        n = 0
        with self._transaction("cannot write records"):
            for r in records:
                self.add(r)
                n += 1
        return n

    def add_new(self, records: Iterable[Record]) -> int:
        """Store the records not stored yet (by ``Record.content_key``), in one
        transaction; returns how many were added.  Importing a file twice adds nothing."""
        n = 0
        with self._transaction("cannot import records"):
            stored = self._content_keys()
            for r in records:
                rid = stored.get(r.content_key)
                if rid is None:
                    stored[r.content_key] = self.add(r)
                    n += 1
                elif r.final_costs and not self._conn.execute(
                        "SELECT 1 FROM remeasures WHERE record_id = ? AND pass = ?",
                        (rid, r.final_pass)).fetchone():
                    self._insert_remeasure(rid, r.final_pass, r.final_costs)
        return n

    @contextmanager
    def _transaction(self, doing: str) -> Iterator[None]:
        with self._guard(doing):
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def _content_keys(self) -> dict:
        """``Record.content_key`` -> id of every stored row (malformed rows left out)."""
        out = {}
        for rid, key, target, ph, err, costs, ts in self._conn.execute(
                "SELECT id, task_key, target, prog_hash, error_no, costs, timestamp FROM records"):
            try:
                out[(key, target, ph, int(err), tuple(float(c) for c in json.loads(costs)),
                     float(ts))] = rid
            except (TypeError, ValueError):
                continue
        return out

    def claim(self, task_key: str, prog_hashes: Iterable[str], owner: str,
              ttl: float = 3600.0, threads: int = 0) -> set[str]:
        """Claim programs of a task for measuring by ``owner`` (``claim_owner()``), so that
        tuners sharing the database never measure one program twice; returns the hashes
        claimed now.  A program is refused when it has a record fitting ``threads``
        (``fits_threads``: a program timed with one thread count is measured again for
        another), or another owner's claim
        that has not expired (``ttl`` seconds) and whose process is alive (a claim of a
        dead process on this host lapses at once, so a killed job resumes at once)."""
        got: set[str] = set()
        now = time.time()
        with self._transaction("cannot claim programs"):
            for h in dict.fromkeys(prog_hashes):
                if self._conn.execute(
                        f"SELECT 1 FROM records r WHERE task_key = ? AND prog_hash = ? AND "
                        f"(? = 0 OR {self._threads_sql} IN (0, ?)) LIMIT 1",
                        (task_key, h, int(threads), int(threads))).fetchone():
                    continue
                row = self._conn.execute("SELECT owner, expires FROM claims WHERE task_key = ? "
                                         "AND prog_hash = ?", (task_key, h)).fetchone()
                if row and row[0] != owner and row[1] > now and _alive(row[0]):
                    continue
                self._conn.execute("INSERT OR REPLACE INTO claims VALUES (?, ?, ?, ?)",
                                   (task_key, h, owner, now + ttl))
                got.add(h)
        return got

    def in_flight(self, task_key: str, owner: str) -> int:
        """How many programs of a task other live owners have claimed and not yet recorded
        (being measured now: they count towards a shared budget)."""
        with self._guard("cannot read claims"):
            rows = self._conn.execute(
                "SELECT owner, COUNT(*) FROM claims c WHERE task_key = ? AND owner != ? AND "
                "expires > ? AND NOT EXISTS (SELECT 1 FROM records r WHERE r.task_key = "
                "c.task_key AND r.prog_hash = c.prog_hash) GROUP BY owner",
                (task_key, owner, time.time())).fetchall()
        return sum(n for o, n in rows if _alive(o))

    def release(self, task_key: str, owner: str) -> None:
        """Drop ``owner``'s claims on a task (at the end of its job)."""
        with self._guard("cannot release claims"):
            self._conn.execute("DELETE FROM claims WHERE task_key = ? AND owner = ?",
                               (task_key, owner))

    # ---- leases and contended timings ---------------------------------------------------------
    def acquire_lease(self, name: str, owner: str, ttl: float) -> bool:
        """Take the lease ``name`` for ``owner`` until ``ttl`` seconds from now, if it is free
        (no row, expired, held by a dead process of this host, or already ``owner``'s)."""
        now = time.time()
        with self._transaction("cannot take a lease"):
            row = self._conn.execute("SELECT owner, expires FROM leases WHERE name = ?",
                                     (name,)).fetchone()
            if row and row[0] != owner and row[1] > now and _alive(row[0]):
                return False
            self._conn.execute("INSERT OR REPLACE INTO leases VALUES (?, ?, ?)",
                               (name, owner, now + ttl))
        return True

    def renew_lease(self, name: str, owner: str, ttl: float) -> bool:
        """Extend ``owner``'s lease to ``ttl`` seconds from now; False when it is not theirs."""
        with self._guard("cannot renew a lease"):
            cur = self._conn.execute("UPDATE leases SET expires = ? WHERE name = ? AND owner = ?",
                                     (time.time() + ttl, name, owner))
        return cur.rowcount == 1

    def release_lease(self, name: str, owner: str) -> None:
        with self._guard("cannot release a lease"):
            self._conn.execute("DELETE FROM leases WHERE name = ? AND owner = ?", (name, owner))

    def lease_holder(self, name: str) -> "tuple[str, float] | None":
        """(owner, expiry time) of a lease that is held now, else None."""
        with self._guard("cannot read leases"):
            row = self._conn.execute("SELECT owner, expires FROM leases WHERE name = ?",
                                     (name,)).fetchone()
        if row and row[1] > time.time() and _alive(row[0]):
            return row[0], row[1]
        return None

    def mark_contended(self, record_id: int) -> None:
        """Mark a record's timing as contended (taken without the timing lease)."""
        with self._guard("cannot mark a record"):
            self._conn.execute("INSERT OR REPLACE INTO contended VALUES (?, ?)",
                               (int(record_id), time.time()))

    def clear_contended(self, record_id: int) -> None:
        with self._guard("cannot mark a record"):
            self._conn.execute("DELETE FROM contended WHERE record_id = ?", (int(record_id),))

    def contended(self, task_key: "str | None" = None, threads: int = 0) -> list[Record]:
        """The records (of a task, fitting ``threads``) whose timing is marked contended."""
        self._key("task_key", task_key)
        where = "WHERE EXISTS (SELECT 1 FROM contended c WHERE c.record_id = r.id)"
        if task_key is None:
            return _fitting(self._rows(where), threads)
        return _fitting(self._rows(where + " AND r.task_key = ?", (task_key,)), threads)

    # ---- reading ---------------------------------------------------------------------------
    def _key(self, what: str, value: Any, optional: bool = True) -> Any:
        """``value`` when it is a str (or None where ``optional``), else an ``ArgumentError``
        naming it (SQLite's own message was "the file is damaged")."""
        if isinstance(value, str) or (optional and value is None):
            return value
        raise ArgumentError(f"tuning database {self.path!r}: {what} must be a string "
                            f"(e.g. task.key), got {type(value).__name__} {value!r:.60}")

    def records_after(self, task_key: str, after_id: int, threads: int = 0) -> list[Record]:
        """The records of a task stored after row ``after_id`` (by any process), those
        fitting ``threads`` (``fits_threads``)."""
        self._key("task_key", task_key, optional=False)
        return _fitting(self._rows("WHERE r.task_key = ? AND r.id > ?",
                                   (task_key, int(after_id))), threads)

    def _rows(self, where: str = "", params: Sequence[Any] = ()) -> list[Record]:
        sql = (f"SELECT r.id, {', '.join('r.' + f for f in _FIELDS)}, r.feature_version, "
               f"r.features, m.pass, m.costs, {self._contended_sql}, {self._notes_sql}, "
               f"{self._threads_sql} "
               f"FROM records r "
               f"LEFT JOIN remeasures m ON m.id = "
               f"(SELECT MAX(id) FROM remeasures WHERE record_id = r.id) {where} ORDER BY r.id")
        with self._guard("cannot read records"):
            rows = self._conn.execute(sql, params).fetchall()
        return [rec for rec in map(self._record, rows) if rec is not None]

    def _record(self, row: tuple) -> Optional[Record]:
        """The record of one row, or None (with a warning naming the row) when malformed."""
        rid = row[0]
        try:
            (key, desc, target, config, trace, ph, costs, err, msg, flop, all_cost, ts, sig,
             workload, sizes, fver, feats, fpass, fcosts, contended, notes, threads) = row[1:]
            cost_list = json.loads(costs)
            if not isinstance(cost_list, list):
                raise TypeError(f"costs must be a list, got {costs!r:.80}")
            rec = Record(key, desc, target, json.loads(config), trace, ph, tuple(cost_list),
                         error_no(err), msg, flop, all_cost, ts, json.loads(sig),
                         workload, json.loads(sizes), None, fver, rid,
                         contended=bool(contended), notes=_notes(notes), threads=threads)
            if feats is not None:
                if not isinstance(feats, bytes):
                    raise TypeError(f"features must be a blob, got {type(feats).__name__}")
                rec.features = np.frombuffer(feats, dtype=np.float32)
            check_record(rec)
        except (TypeError, ValueError) as e:
            self._warn(("record", rid), f"skipping malformed record id {rid}: "
                                        f"{type(e).__name__}: {e}")
            return None
        if fcosts is not None:
            try:
                final = json.loads(fcosts)
                rec.final_costs = check_costs(final if isinstance(final, list) else None,
                                              "re-measured costs")
                if not isinstance(fpass, int):
                    raise TypeError(f"re-measure pass must be an integer, got {fpass!r}")
                rec.final_pass = fpass
            except (TypeError, ValueError) as e:
                rec.final_costs, rec.final_pass = (), 0
                self._warn(("remeasure", rid), f"ignoring the malformed re-measurement of "
                                               f"record id {rid}: {type(e).__name__}: {e}")
        return rec

    def _warn(self, key: tuple, text: str) -> None:
        if key not in self._warned:     # once per row and database object, not per read
            self._warned.add(key)
            warnings.warn(f"tuning database {self.path!r}: {text}", stacklevel=4)

    def records(self, task_key: "str | None" = None, target: "str | None" = None,
                threads: int = 0) -> list[Record]:
        """The well-formed records (of one task and/or target, fitting ``threads``:
        ``fits_threads``), oldest first."""
        self._key("task_key", task_key)
        self._key("target", target)
        where, params = [], []
        if task_key is not None:
            where.append("r.task_key = ?")
            params.append(task_key)
        if target is not None:
            where.append("r.target = ?")
            params.append(target)
        clause = ("WHERE " + " AND ".join(where)) if where else ""
        return _fitting(self._rows(clause, params), threads)

    def by_workload(self, workload: str) -> list[Record]:
        """Records of every size of one computation and target (see ``Task.workload``)."""
        self._key("workload", workload, optional=False)
        return self._rows("WHERE r.workload = ?", (workload,))

    def measured_hashes(self, task_key: str) -> set[str]:
        self._key("task_key", task_key, optional=False)
        with self._guard("cannot read records"):
            return {r[0] for r in self._conn.execute(
                "SELECT prog_hash FROM records WHERE task_key = ?", (task_key,))}

    def count(self, task_key: "str | None" = None) -> int:
        self._key("task_key", task_key)
        with self._guard("cannot read records"):
            if task_key is None:
                return int(self._conn.execute("SELECT COUNT(*) FROM records").fetchone()[0])
            return int(self._conn.execute("SELECT COUNT(*) FROM records WHERE task_key = ?",
                                          (task_key,)).fetchone()[0])

    def best(self, task_key: str, k: int = 1) -> list[Record]:
        """The ``k`` fastest valid records of a task (see ``best_records``)."""
        return best_records(self.records(task_key), k)

    def tasks(self) -> list[tuple[str, str, str, int]]:
        """(task key, description, target, number of records) for each task."""
        with self._guard("cannot read records"):
            return [tuple(r) for r in self._conn.execute(
                "SELECT task_key, MIN(task_desc), MIN(target), COUNT(*) FROM records "
                "GROUP BY task_key ORDER BY MIN(id)")]

    # ---- JSON lines --------------------------------------------------------------------------
    def export_jsonl(self, path: str, task_key: "str | None" = None) -> int:
        n = 0
        with open(path, "w") as f:
            for r in self.records(task_key):
                f.write(json.dumps(r.to_json()) + "\n")
                n += 1
        return n

    def import_jsonl(self, path: str) -> int:
        """Add the records of a JSON-lines file that are not stored yet (``add_new``);
        returns how many.  All or none: a malformed line raises ``TuningError``."""
        return self.add_new(read_jsonl(path))

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def claim_owner() -> str:
    """A name for one tuning job: host, process id and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def _alive(owner: str) -> bool:
    """Whether the process of a claim may still be running (only this host's are known)."""
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def read_jsonl(path: str) -> list[Record]:
    """Every record of a JSON-lines file, each checked (``TuningError`` names a bad line)."""
    recs = []
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        raise TuningError(f"cannot read tuning records from {path!r}: {e}") from None
    with f:
        try:
            lines = list(f)
        except UnicodeDecodeError as e:
            raise TuningError(f"{path!r} is not a JSON-lines file of tuning records: {e}") from None
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError as e:
            raise TuningError(f"malformed tuning record ({path}, line {lineno}): {e}") from None
        recs.append(Record.from_json(d, f"{path}, line {lineno}"))
    return recs


def fits_threads(rec: Record, threads: int) -> bool:
    """Whether ``rec`` answers for a kernel run with ``threads`` CPU threads: it was timed
    with that many, or its count is not known (0), or any count will do (``threads`` 0)."""
    return not threads or not rec.threads or rec.threads == threads


def _fitting(records: list[Record], threads: int) -> list[Record]:
    return [r for r in records if fits_threads(r, threads)] if threads else records


def best_records(records: Iterable[Record], k: int = 1) -> list[Record]:
    """The ``k`` fastest valid records: those of the latest re-measure pass first (by their
    re-measured cost, all timed under the same conditions), then the others by cost.
    A record whose cost is not finite and > 0 is never chosen."""
    valid = [r for r in records if r.valid and 0 < r.cost < math.inf]
    latest = max((r.final_pass for r in valid if r.final_pass > RETIME_PASS), default=0)
    return sorted(valid, key=lambda r: (not (latest and r.final_pass == latest), r.cost))[:k]


def open_database(db: "Database | str | os.PathLike | None", create: bool = True) -> Database:
    """``db`` as a Database (a path opens the SQLite file, creating it unless ``create`` is
    False, for readers; None: in memory)."""
    if isinstance(db, Database):
        return db
    return Database(":memory:" if db is None else os.fspath(db), create=create)
