"""The tuning-record store: SQLite (one file, several writers), JSON-lines export/import.

Every measured candidate is one row, written (and committed) as soon as it is
measured, so a killed job loses nothing and resumes without re-measuring: the
tuner asks ``measured_hashes(task_key)`` and skips those programs.  WAL mode and
a busy timeout let several tuning processes write one file at once.

A record carries the task key and description, the target, the candidate's
config and trace (JSON), the hash of its lowered program, the costs (seconds per
run) or an error number, and optionally its feature vector (for training).

Re-measurements: at the end of a tuning job the top candidates are timed again,
interleaved (``Tuner.tune``); those samples go to a separate ``remeasures`` table
(one row per record and pass), so the ``records`` table keeps one row per measured
program (resume and counts are unchanged) and databases without the table (older
ones, which gain it on open) read as before.  A record read back carries its latest
re-measurement as ``final_costs``/``final_pass``; ``Record.cost`` is then their
median, and ``best``/``best_records`` rank the records of the latest pass first.
"""
from __future__ import annotations

import json
import math
import os
import sqlite3
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Optional, Sequence

import numpy as np

from tdsl.errors import TuningError

from .measure import MeasureErrorNo, median, spread

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
    features BLOB
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
"""

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

    @property
    def valid(self) -> bool:
        return self.error_no is MeasureErrorNo.NO_ERROR and bool(self.costs)

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
        return self.flop / self.cost / 1e9 if self.valid and self.flop else 0.0

    def to_json(self) -> dict:
        return {"task_key": self.task_key, "task_desc": self.task_desc, "target": self.target,
                "config": self.config, "trace": json.loads(self.trace), "prog_hash": self.prog_hash,
                "costs": list(self.costs), "error_no": int(self.error_no),
                "error_msg": self.error_msg, "flop": self.flop, "all_cost": self.all_cost,
                "timestamp": self.timestamp, "signature": self.signature,
                "workload": self.workload, "sizes": self.sizes,
                **({"final_costs": list(self.final_costs), "final_pass": self.final_pass}
                   if self.final_costs else {})}

    @staticmethod
    def from_json(d: Any, where: str) -> "Record":
        """Parse a JSON record; ``where`` names it in the ``TuningError`` of a malformed one."""
        try:
            if not isinstance(d, dict):
                raise TypeError(f"expected an object, got {type(d).__name__}")
            trace = d["trace"]
            costs = tuple(float(c) for c in d["costs"])
            err = MeasureErrorNo(int(d["error_no"]))
            if err is MeasureErrorNo.NO_ERROR and (not costs or any(c <= 0 for c in costs)):
                raise ValueError("a valid record needs positive costs")
            cfg = d.get("config", {})
            if not isinstance(cfg, dict):
                raise TypeError("config must be an object")
            return Record(str(d["task_key"]), str(d.get("task_desc", "")), str(d["target"]), cfg,
                          trace if isinstance(trace, str) else json.dumps(trace),
                          str(d["prog_hash"]), costs, err, str(d.get("error_msg", "")),
                          float(d.get("flop", 0.0)), float(d.get("all_cost", 0.0)),
                          float(d.get("timestamp", 0.0)), list(d.get("signature", [])),
                          str(d.get("workload", "")), dict(d.get("sizes", {})),
                          final_costs=tuple(float(c) for c in d.get("final_costs", ())),
                          final_pass=int(d.get("final_pass", 0)))
        except (KeyError, TypeError, ValueError) as e:
            raise TuningError(f"malformed tuning record ({where}): {type(e).__name__}: {e}") from None


class Database:
    """Tuning records in one SQLite file (``path``; ``":memory:"`` for a scratch store)."""

    def __init__(self, path: str, timeout: float = 60.0):
        self.path = os.fspath(path)
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._conn = sqlite3.connect(self.path, timeout=timeout, isolation_level=None,
                                             check_same_thread=False)
                self._initialize()
                break
            except sqlite3.OperationalError as e:
                # Switching a new file to WAL needs a moment of exclusive access, which the
                # busy timeout does not always wait for while another process sets it up.
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise TuningError(f"cannot open tuning database {self.path!r}: {e}") from None
                self._conn.close()
                time.sleep(0.05)
            except sqlite3.DatabaseError as e:
                raise TuningError(f"cannot open tuning database {self.path!r}: {e}") from None

    def _initialize(self) -> None:
        if self.path != ":memory:":
            self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.executescript(_SCHEMA)
        self._conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)",
                           (str(SCHEMA_VERSION),))

    # ---- writing ---------------------------------------------------------------------------
    def add(self, rec: Record) -> int:
        """Store one record (committed at once); returns its id."""
        feats = None
        if rec.features is not None:
            feats = np.asarray(rec.features, dtype=np.float32).tobytes()
        row = (rec.task_key, rec.task_desc, rec.target, json.dumps(rec.config), rec.trace,
               rec.prog_hash, json.dumps(list(rec.costs)), int(rec.error_no), rec.error_msg,
               rec.flop, rec.all_cost, rec.timestamp, json.dumps(rec.signature), rec.workload,
               json.dumps(rec.sizes), rec.feature_version, feats)
        cur = self._conn.execute(
            f"INSERT INTO records ({', '.join(_FIELDS)}, feature_version, features) "
            f"VALUES ({', '.join('?' * (len(_FIELDS) + 2))})", row)
        rec.id = cur.lastrowid
        if rec.final_costs:
            self._insert_remeasure(rec.id, rec.final_pass, rec.final_costs)
        return int(cur.lastrowid)

    def add_remeasure(self, rec: Record, pass_id: int, costs: Sequence[float]) -> None:
        """Store a re-measurement of the stored record ``rec`` (committed at once); ``rec``
        is updated to carry it."""
        if rec.id is None:
            raise TuningError("add_remeasure: the record is not stored in a database")
        if not costs or any(not c > 0 for c in costs):
            raise TuningError("add_remeasure: a re-measurement needs positive costs")
        self._insert_remeasure(rec.id, pass_id, costs)
        rec.final_costs = tuple(float(c) for c in costs)
        rec.final_pass = pass_id

    def _insert_remeasure(self, record_id: int, pass_id: int, costs: Sequence[float]) -> None:
        self._conn.execute("INSERT INTO remeasures (record_id, pass, costs, timestamp) "
                           "VALUES (?, ?, ?, ?)",
                           (record_id, int(pass_id), json.dumps([float(c) for c in costs]),
                            time.time()))

    def add_many(self, records: Iterable[Record]) -> int:
        n = 0
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            for r in records:
                self.add(r)
                n += 1
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        return n

    # ---- reading ---------------------------------------------------------------------------
    def _rows(self, where: str = "", params: Sequence[Any] = ()) -> Iterator[Record]:
        sql = (f"SELECT r.id, {', '.join('r.' + f for f in _FIELDS)}, r.feature_version, "
               f"r.features, m.pass, m.costs FROM records r LEFT JOIN remeasures m ON m.id = "
               f"(SELECT MAX(id) FROM remeasures WHERE record_id = r.id) {where} ORDER BY r.id")
        for row in self._conn.execute(sql, params):
            yield self._record(row)

    def _record(self, row: tuple) -> Record:
        rid = row[0]
        try:
            (key, desc, target, config, trace, ph, costs, err, msg, flop, all_cost, ts, sig,
             workload, sizes, fver, feats, fpass, fcosts) = row[1:]
            cfg = json.loads(config)
            cost_list = json.loads(costs)
            if not isinstance(cfg, dict) or not isinstance(cost_list, list):
                raise TypeError("config must be an object and costs a list")
            json.loads(trace)
            rec = Record(key, desc, target, cfg, trace, ph, tuple(float(c) for c in cost_list),
                         MeasureErrorNo(int(err)), msg, float(flop), float(all_cost), float(ts),
                         json.loads(sig), workload, json.loads(sizes), None, int(fver), rid)
            if feats is not None:
                rec.features = np.frombuffer(feats, dtype=np.float32)
            if fcosts is not None:
                rec.final_costs = tuple(float(c) for c in json.loads(fcosts))
                rec.final_pass = int(fpass)
            return rec
        except (TypeError, ValueError) as e:
            raise TuningError(f"malformed tuning record (id {rid} in {self.path}): "
                              f"{type(e).__name__}: {e}") from None

    def records(self, task_key: "str | None" = None, target: "str | None" = None) -> list[Record]:
        where, params = [], []
        if task_key is not None:
            where.append("r.task_key = ?")
            params.append(task_key)
        if target is not None:
            where.append("r.target = ?")
            params.append(target)
        clause = ("WHERE " + " AND ".join(where)) if where else ""
        return list(self._rows(clause, params))

    def by_workload(self, workload: str) -> list[Record]:
        """Records of every size of one computation and target (see ``Task.workload``)."""
        return list(self._rows("WHERE r.workload = ?", (workload,)))

    def measured_hashes(self, task_key: str) -> set[str]:
        return {r[0] for r in self._conn.execute(
            "SELECT prog_hash FROM records WHERE task_key = ?", (task_key,))}

    def count(self, task_key: "str | None" = None) -> int:
        if task_key is None:
            return int(self._conn.execute("SELECT COUNT(*) FROM records").fetchone()[0])
        return int(self._conn.execute("SELECT COUNT(*) FROM records WHERE task_key = ?",
                                      (task_key,)).fetchone()[0])

    def best(self, task_key: str, k: int = 1) -> list[Record]:
        """The ``k`` fastest valid records of a task (see ``best_records``)."""
        return best_records(self.records(task_key), k)

    def tasks(self) -> list[tuple[str, str, str, int]]:
        """(task key, description, target, number of records) for each task."""
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
        """Add every record of a JSON-lines file (all or none: a malformed line raises)."""
        recs = []
        with open(path) as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    d = json.loads(line)
                except json.JSONDecodeError as e:
                    raise TuningError(f"malformed tuning record ({path}, line {lineno}): {e}") from None
                recs.append(Record.from_json(d, f"{path}, line {lineno}"))
        return self.add_many(recs)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def best_records(records: Iterable[Record], k: int = 1) -> list[Record]:
    """The ``k`` fastest valid records: those of the latest re-measure pass first (by their
    re-measured cost, all timed under the same conditions), then the others by cost."""
    valid = [r for r in records if r.valid]
    latest = max((r.final_pass for r in valid), default=0)
    return sorted(valid, key=lambda r: (not (latest and r.final_pass == latest), r.cost))[:k]


def open_database(db: "Database | str | os.PathLike | None") -> Database:
    """``db`` as a Database (a path opens or creates the SQLite file; None: in memory)."""
    if isinstance(db, Database):
        return db
    return Database(":memory:" if db is None else os.fspath(db))
