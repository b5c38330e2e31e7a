"""One process's threads take turns at a SQLite file: a bounded number of reads and one write
at a time, nested transactions of a thread never wait on the thread itself, and a turn that
does not come within its wait is skipped rather than stalling the process."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import text

from gpulease.db.session import Database, transient
from gpulease.db.turns import SqliteTurns, WriteTurnTimeout
from gpulease.platform import Platform
from gpulease.testing.callers import TenantCtx


class Crowd:
    """Threads that each hold a turn for a while; the most inside at once."""

    def __init__(self) -> None:
        self.inside = self.most = 0
        self.lock = threading.Lock()

    def hold(self, seconds: float) -> None:
        with self.lock:
            self.inside += 1
            self.most = max(self.most, self.inside)
        time.sleep(seconds)
        with self.lock:
            self.inside -= 1


def run_threads(*targets: Callable[[], None]) -> None:
    """Each target in its own thread, all at once; every one must finish."""
    threads = [threading.Thread(target=target) for target in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads)


def most_reading_at_once(turns: SqliteTurns, readers: int, hold_s: float) -> int:
    """`readers` threads each reading for `hold_s`: the most inside a read at once."""
    crowd = Crowd()

    def reader() -> None:
        with turns.read():
            crowd.hold(hold_s)

    run_threads(*[reader] * readers)
    return crowd.most


@pytest.mark.parametrize("slots", [1, 2, 3])
def test_reads_at_once_are_bounded_by_the_slots(slots: int) -> None:
    assert most_reading_at_once(SqliteTurns(slots), 6, 0.05) == slots


def test_writes_go_one_at_a_time_and_reads_do_not_wait_for_them() -> None:
    turns, writers, readers = SqliteTurns(2), Crowd(), Crowd()

    def writer() -> None:
        with turns.write():
            writers.hold(0.05)

    def reader() -> None:
        with turns.read():
            readers.hold(0.05)

    run_threads(writer, writer, writer, reader, reader)
    assert writers.most == 1
    assert readers.most == 2


def test_slots_of_zero_let_every_read_in() -> None:
    assert most_reading_at_once(SqliteTurns(0), 5, 0.1) == 5


def test_a_thread_nesting_reads_and_writes_never_waits_on_itself() -> None:
    turns = SqliteTurns(1, wait_s=30, write_wait_s=30)
    started = time.monotonic()
    with turns.read(), turns.read(), turns.write(), turns.read(), turns.write():
        pass
    assert time.monotonic() - started < 1


def test_a_read_inside_a_write_takes_no_turn_so_writer_and_readers_cannot_deadlock() -> None:
    """A reader holds the only slot and wants to write; the writer, holding the write lock,
    reads. Both finish: the writer's read takes no slot."""
    turns = SqliteTurns(1, wait_s=30, write_wait_s=30)
    writer_in, done = threading.Event(), []

    def writer() -> None:
        with turns.write():
            writer_in.set()
            time.sleep(0.05)
            with turns.read():
                done.append("writer")

    def reader() -> None:
        writer_in.wait(5)
        with turns.read(), turns.write():
            done.append("reader")

    started = time.monotonic()
    run_threads(writer, reader)
    assert sorted(done) == ["reader", "writer"]
    assert time.monotonic() - started < 5


def test_a_read_that_waits_too_long_goes_in_without_a_turn_and_says_so(
        caplog: pytest.LogCaptureFixture) -> None:
    """A thread holding the only slot while it waits on another thread's read costs that
    read `wait_s`, not a deadlock."""
    turns = SqliteTurns(1, wait_s=0.2)
    other_read = threading.Event()

    def other() -> None:
        with turns.read():
            other_read.set()

    with caplog.at_level(logging.WARNING, logger="gpulease.db.turns"), turns.read():
        t = threading.Thread(target=other)
        t.start()
        assert other_read.wait(5)
        t.join(5)
    assert "waited 0.2 s for a turn" in caplog.text
    # the slot it skipped is not released twice: one slot still admits one reader at a time
    assert most_reading_at_once(turns, 4, 0.03) == 1


def test_a_write_kept_waiting_past_the_busy_timeout_fails_as_sqlite_would() -> None:
    """The same transient "database is locked" SQLite gives (the API answers 503); the
    writer holding the turn goes on and the next writer gets it."""
    turns = SqliteTurns(2, write_wait_s=0.2)
    holding, release, failed = threading.Event(), threading.Event(), []

    def holder() -> None:
        with turns.write():
            holding.set()
            release.wait(5)

    t = threading.Thread(target=holder)
    t.start()
    assert holding.wait(5)
    try:
        with turns.write():
            pass
    except WriteTurnTimeout as exc:
        failed.append(exc)
    release.set()
    t.join(5)
    assert len(failed) == 1 and transient(failed[0])
    assert "database is locked" in str(failed[0])
    with turns.write():
        pass


def test_a_failed_transaction_gives_its_turn_back(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'turns.db'}", sqlite_read_slots=1)
    assert db.turns is not None
    with pytest.raises(RuntimeError), db.read():
        raise RuntimeError("the request failed")
    with pytest.raises(RuntimeError), db.write():
        raise RuntimeError("the request failed")
    got = []

    def again() -> None:
        with db.read() as s:
            got.append(s.scalar(text("select 1")))
        with db.write() as s:
            got.append(s.scalar(text("select 2")))

    run_threads(again)
    assert got == [1, 2]
    db.dispose()


def test_only_sqlite_takes_turns(platform: Platform, tenant: TenantCtx) -> None:
    """PostgreSQL serves concurrent transactions itself; on both, a request's reads and
    writes nest as before."""
    assert (platform.db.turns is None) == (platform.db.dialect == "postgresql")
    from gpulease.services.accounts import identity as accounts
    with platform.db.read():
        assert accounts.authenticate(platform, tenant.token).tenant_id == tenant.tenant_id
        with platform.db.write() as s:
            assert s.scalar(text("select 1")) == 1
