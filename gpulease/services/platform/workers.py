"""The worker registry: a worker registers when it starts, its heartbeat keeps `seen_at`
and its claim count fresh, and it marks itself stopped; a worker not seen for three
heartbeats is dead (SIGKILL, a lost host). `/readyz`, `/metrics` and `gpulease workers`
read it. A worker also compares its host's clock with the database's (PostgreSQL, shared by
every host): one off by more than GPULEASE_MAX_CLOCK_SKEW_S says so and stops claiming
until they agree again, since lock expiry and stage deadlines are compared across hosts."""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select

from gpulease import __version__
from gpulease.db.tables import WorkerProcess
from gpulease.domain.accounts import Principal
from gpulease.ports.clock import SteadyClock
from gpulease.ports.records import Records
from gpulease.schemas import WorkerView


def heartbeat_s(p: Records) -> float:
    return p.settings.lock_ttl_s / 3


def live_after(p: Records, now: datetime) -> datetime:
    """A worker seen after this is alive."""
    return now - timedelta(seconds=3 * heartbeat_s(p))


def register(p: Records, owner: str, threads: int, site: str | None = None) -> float:
    """Record this worker as started; the seconds no worker was alive before it (0 when
    another is alive, or none ever ran): the outage the stage timeouts must not count."""
    now = p.clock.now()
    with p.db.write() as s:
        alive = live_after(p, now)
        others = s.execute(select(func.max(WorkerProcess.seen_at), func.count()).where(
            WorkerProcess.owner != owner)).one()
        last_seen, count = others
        live_others = s.scalar(select(func.count()).select_from(WorkerProcess).where(
            WorkerProcess.owner != owner, WorkerProcess.stopped_at.is_(None),
            WorkerProcess.seen_at > alive)) or 0
        outage = 0.0
        if count and not live_others and last_seen is not None:
            outage = max((now - last_seen).total_seconds(), 0.0)
        row = s.get(WorkerProcess, owner)
        if row is None:
            s.add(WorkerProcess(owner=owner, host=socket.gethostname()[:200], pid=os.getpid(),
                                version=__version__, threads=threads, started_at=now,
                                seen_at=now, claims=0, site=site))
        else:
            row.started_at, row.seen_at, row.stopped_at, row.threads = now, now, None, threads
            row.site = site
    return outage


def seen(p: Records, owner: str, new_claims: int) -> None:
    with p.db.write() as s:
        row = s.get(WorkerProcess, owner)
        if row is not None:
            row.seen_at = p.clock.now()
            row.claims += new_claims


def stopped(p: Records, owner: str) -> None:
    with p.db.write() as s:
        row = s.get(WorkerProcess, owner)
        if row is not None:
            row.stopped_at = row.seen_at = p.clock.now()


def live_count(p: Records) -> int:
    return len(live_workers(p))


def live_workers(p: Records) -> list[str]:
    """The live workers, as `owner (host, pid)`."""
    now = p.clock.now()
    with p.db.read() as s:
        return [f"{owner} ({host}, pid {pid})" for owner, host, pid in s.execute(
            select(WorkerProcess.owner, WorkerProcess.host, WorkerProcess.pid).where(
                WorkerProcess.stopped_at.is_(None),
                WorkerProcess.seen_at > live_after(p, now)).order_by(WorkerProcess.owner))]


def list_workers(p: Records, actor: Principal, include_stopped: bool = False
                 ) -> list[WorkerView]:
    actor.require_operator()
    now = p.clock.now()
    alive_after = live_after(p, now)
    with p.db.read() as s:
        q = select(WorkerProcess).order_by(WorkerProcess.started_at.desc())
        if not include_stopped:
            q = q.where(WorkerProcess.stopped_at.is_(None))
        rows = s.scalars(q.limit(500)).all()
        return [WorkerView(
            owner=r.owner, host=r.host, pid=r.pid, version=r.version, threads=r.threads,
            started_at=r.started_at, seen_at=r.seen_at, claims=r.claims,
            stopped_at=r.stopped_at, site=r.site,
            state="stopped" if r.stopped_at else "alive" if r.seen_at > alive_after
            else "dead") for r in rows]


def wall_clock() -> datetime:
    """This host's clock (the process's own: what a jump or a drift moves)."""
    return datetime.now(UTC)


def clock_skew_s(p: Records) -> float | None:
    """How far this host's clock is ahead of the database's (seconds; negative: behind),
    or None where there is no other clock (SQLite: one host, one clock). The platform's
    steady clock is anchored to the database's on the way (ports/clock.py)."""
    if p.db.dialect != "postgresql":
        return None
    before = wall_clock()
    with p.db.read() as s:
        database: datetime | None = s.scalar(select(func.now()))
    after = wall_clock()
    if database is None:
        return None
    mine = before + (after - before) / 2  # the round trip's middle
    if isinstance(p.clock, SteadyClock):  # the platform's time is the database's
        p.clock.anchor_to(database + (after - mine))
    return (mine - database).total_seconds()
