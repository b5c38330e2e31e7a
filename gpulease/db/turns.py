"""Turns at one SQLite file for the threads of one process.

SQLite gives each connection its own reader, but a process's threads share one interpreter:
several read transactions at once take turns at Python's lock between every row they step,
and a page of 50 instances read by 8 threads at once cost about twice the CPU of the same
reads one after another (`bench/list_threads.py`). Writers are worse off: `BEGIN IMMEDIATE`
on a busy file sleeps in SQLite's busy handler (1 ms, 2 ms, 5 ms … up to 100 ms between
tries), so a writer can wait long after the file is free.

So on SQLite a process lets a few read transactions in at once (`sqlite_read_slots`; the
others queue on a semaphore) and one write transaction at a time (the others queue on a
lock and go in as soon as it is free; other processes still meet SQLite's own lock). A
read inside a write or inside another read of the same thread takes no second turn, so a
thread never waits on itself; a write inside a read waits only for the write lock, and
nothing waits for a read turn while holding the write lock, so the two never wait on each
other. A read that has waited 2 s for a turn goes in without one and says so in the log, so
a read that waits on another thread cannot stall the process for longer than that. A write
that has waited 60 s (SQLite's own busy timeout) fails as SQLite would fail it: a transient
"database is locked" (the API's 503), while the thread holding the turn goes on.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.exc import OperationalError

log = logging.getLogger(__name__)


class WriteTurnTimeout(OperationalError):
    """Another thread of this process held the write turn for as long as SQLite's busy
    timeout: the same transient failure SQLite gives a writer it kept waiting (API 503)."""

    def __init__(self, waited_s: float) -> None:
        reason = (f"database is locked: another thread of this process has been writing "
                  f"for {waited_s:.0f} s")
        super().__init__("BEGIN IMMEDIATE", None, sqlite3.OperationalError(reason))


class SqliteTurns:
    """Read slots and the write lock of one process's `Database` on one SQLite file."""

    def __init__(self, read_slots: int, wait_s: float = 2.0, write_wait_s: float = 60.0) -> None:
        self.wait_s, self.write_wait_s = wait_s, write_wait_s
        self._reads = threading.BoundedSemaphore(read_slots) if read_slots > 0 else None
        self._write = threading.Lock()
        self._mine = threading.local()  # reads and writes this thread is inside

    def _depth(self, kind: str) -> int:
        return int(getattr(self._mine, kind, 0))

    @contextmanager
    def _inside(self, kind: str) -> Iterator[None]:
        setattr(self._mine, kind, self._depth(kind) + 1)
        try:
            yield
        finally:
            setattr(self._mine, kind, self._depth(kind) - 1)

    @contextmanager
    def read(self) -> Iterator[None]:
        """A turn to read, unless this thread already reads or writes."""
        if self._reads is None or self._depth("reads") or self._depth("writes"):
            with self._inside("reads"):
                yield
            return
        got = self._reads.acquire(timeout=self.wait_s)
        if not got:
            log.warning("a read waited %.1f s for a turn at the SQLite file; it goes in "
                        "without one", self.wait_s)
        try:
            with self._inside("reads"):
                yield
        finally:
            if got:
                self._reads.release()

    @contextmanager
    def write(self) -> Iterator[None]:
        """The process's one turn to write (a nested write takes no second turn)."""
        if self._depth("writes"):
            with self._inside("writes"):
                yield
            return
        if not self._write.acquire(timeout=self.write_wait_s):
            raise WriteTurnTimeout(self.write_wait_s)
        try:
            with self._inside("writes"):
                yield
        finally:
            self._write.release()
