"""Timing leases: one timing at a time on a machine.

Two kinds.  ``TimingLease``: tuners sharing a database (and so a machine) never time at
once.  ``HostLease``: the Dask workers of one machine never time at once (a file lock).

A ``TimingLease`` is a row of the database's ``leases`` table (name, owner, expiry).  Tuners
on one machine share its name (``timing:<host>``): a tuner holds it around each
measurement (``TimingLease.hold``), a thread renews it every ``ttl / 3`` seconds
while held, and it is released after.  A holder that dies stops renewing, so its
lease lapses at its expiry (at once when the dead process was on this host).

When the lease is not had within ``wait`` seconds the measurement goes ahead
anyway and ``hold`` yields ``True``: its timings are contended, the tuner marks
their records (``Database.mark_contended``) and times them again alone the next
time it holds the lease (``Tuner._retime_contended``).
"""
from __future__ import annotations

import fcntl
import os
import socket
import tempfile
import threading
import time
from contextlib import contextmanager
from typing import Iterator

from tdsl.errors import TuningError

from .database import Database, claim_owner


def machine_lease_name() -> str:
    """The name of this machine's timing lease."""
    return f"timing:{socket.gethostname()}"


class TimingLease:
    """The machine's timing lease in ``database`` (a file), held by one owner at a time.

    ``ttl``: seconds a holder's lease lasts without renewal (a dead holder's lease
    lapses after at most that long); ``wait``: seconds to wait for it before timing
    anyway, contended; ``poll``: seconds between tries.
    """

    def __init__(self, database: Database, name: "str | None" = None, ttl: float = 30.0,
                 wait: float = 900.0, poll: float = 0.05):
        if database.path == ":memory:":
            raise TuningError("a timing lease needs a database file shared by the tuners")
        self.path = database.path
        self.name = name or machine_lease_name()
        self.ttl = ttl
        self.wait = wait
        self.poll = poll
        self.owner = claim_owner()
        self._db = Database(self.path, create=False)   # its own connection (renewed by a thread)
        #: (start, end, contended) of each hold: what the tests check.
        self.holds: list[tuple[float, float, bool]] = []

    def acquire(self, wait: "float | None" = None) -> bool:
        """Take the lease, waiting up to ``wait`` seconds (default ``self.wait``)."""
        deadline = time.monotonic() + (self.wait if wait is None else wait)
        delay = self.poll
        while True:
            if self._db.acquire_lease(self.name, self.owner, self.ttl):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 1.5, 0.5)

    def release(self) -> None:
        self._db.release_lease(self.name, self.owner)

    @contextmanager
    def hold(self) -> Iterator[bool]:
        """Hold the lease for the ``with`` body, renewed meanwhile; yields whether the body
        runs contended (the lease was not had within ``wait`` seconds)."""
        got = self.acquire()
        start = time.time()
        stop = threading.Event()
        renewer = None
        if got:
            renewer = threading.Thread(target=self._renew, args=(stop,), daemon=True,
                                       name="tdsl-timing-lease")
            renewer.start()
        try:
            yield not got
        finally:
            stop.set()
            if renewer is not None:
                renewer.join()
                self.release()
            self.holds.append((start, time.time(), not got))

    def _renew(self, stop: threading.Event) -> None:
        db = Database(self.path, create=False)      # a connection of this thread's own
        try:
            while not stop.wait(self.ttl / 3):
                try:
                    db.renew_lease(self.name, self.owner, self.ttl)
                except TuningError:
                    pass          # a busy database: the next renewal comes before expiry
        finally:
            db.close()

    def close(self) -> None:
        self._db.close()


def host_lease_path() -> str:
    """The file whose lock is this machine's timing lease for Dask workers
    (``$TDSL_TIMING_LOCK``, else ``tdsl-timing-<uid>.lock`` in the temp folder)."""
    return os.environ.get("TDSL_TIMING_LOCK") or \
        os.path.join(tempfile.gettempdir(), f"tdsl-timing-{os.getuid()}.lock")


#: Seconds after which a waiter for a ``HostLease`` that stopped renewing its place in the
#: queue (touching its file at every try) is passed over: a process that died waiting.
QUEUE_STALE_S = 5.0


class HostLease:
    """One machine's timing lease for Dask workers: an exclusive ``flock`` on ``path``.
    The operating system drops the lock of a process that dies, so a dead worker never
    keeps it; each acquisition opens the file anew, so two threads of one process exclude
    each other as two processes do.

    ``acquire(wait)`` tries every ``poll`` seconds for ``wait`` seconds and says whether it
    got it, first come first served: a waiter puts a file named by its arrival time in the
    folder ``path + ".queue"`` and tries the lock only when no earlier waiter is queued
    (one whose file was touched within ``QUEUE_STALE_S`` seconds).  Without the queue a
    worker with its next candidate built and waiting took the lease again the moment it
    released it, and the other workers' candidates waited (for as long as ``lease_wait``,
    then were timed contended)."""

    def __init__(self, path: "str | None" = None, poll: float = 0.02):
        self.path = path or host_lease_path()
        self.poll = poll
        self._fd: "int | None" = None

    def acquire(self, wait: float) -> bool:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        queue = self.path + ".queue"
        os.makedirs(queue, exist_ok=True)
        me = f"{time.time_ns():020d}-{os.getpid()}-{threading.get_ident()}"
        mine = os.path.join(queue, me)
        open(mine, "w").close()
        deadline = time.monotonic() + wait
        delay = self.poll
        try:
            while True:
                if not _earlier_waiters(queue, me):
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        self._fd = fd
                        return True
                    except BlockingIOError:
                        pass
                if time.monotonic() >= deadline:
                    os.close(fd)
                    return False
                time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
                delay = min(delay * 1.5, 0.05)
                os.utime(mine)                       # still waiting: keep this place
        finally:
            _remove(mine)

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def _earlier_waiters(queue: str, me: str) -> bool:
    """Whether a waiter that came before ``me`` is still waiting in ``queue`` (files of
    waiters that stopped touching theirs for ``QUEUE_STALE_S`` seconds are removed)."""
    now = time.time()
    for name in sorted(os.listdir(queue)):
        if name >= me:
            return False
        path = os.path.join(queue, name)
        try:
            if now - os.stat(path).st_mtime <= QUEUE_STALE_S:
                return True
        except FileNotFoundError:
            continue                                  # it got the lease or gave up
        _remove(path)
    return False


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
