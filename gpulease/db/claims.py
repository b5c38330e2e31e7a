"""Claims: how a worker takes a row to drive it, the one way background work is held.

A row is claimable when its lock is free or expired (and due, by the pipeline's own test).
Claiming writes a fresh lock token, its owner and its expiry; every later write by the
worker goes through `guarded()`, which finds the row only while the worker still holds that
token, so a worker that lost its lock (expired, or the row was taken from it) writes
nothing. On PostgreSQL candidates are read FOR UPDATE SKIP LOCKED; on SQLite the write
transaction is BEGIN IMMEDIATE. The owner's heartbeat `extend()`s the locks of live work,
so only a dead worker's rows expire and are taken over; `taken_over` says its step was under
way (`step_in_progress`).

The lock columns (db/base.Claimable) are written here and nowhere else
(tests/test_structure.py).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, or_, select, update
from sqlalchemy.orm import Session

from gpulease.db.base import Claimable
from gpulease.db.session import Database
from gpulease.db.tables import WorkerProcess

R = TypeVar("R", bound=Claimable)


@dataclass(frozen=True)
class Claim:
    table: type[Claimable]
    id: str
    token: str
    taken_over: bool  # the previous owner died mid-step (step_in_progress was set)


def unlocked(table: Any, now: datetime) -> ColumnElement[bool]:
    return or_(table.lock_expires_at.is_(None), table.lock_expires_at < now)


@dataclass(frozen=True)
class Hold:
    """Who takes rows, when, and for how long their locks last without a heartbeat.
    `live_after`: a worker seen in the registry after this is alive, and a row it left
    mid-step is not taken from it (its lock may have expired while a long row lock held up
    its heartbeat and the write of its result: it is not a crash)."""

    owner: str
    now: datetime
    ttl: timedelta
    live_after: datetime | None = None


def not_a_live_workers_step(table: Any, live_after: datetime, owner: str
                            ) -> ColumnElement[bool]:
    """No step under way, or its owner is this worker (a step of its own that raised) or
    no longer alive (SIGKILL, SIGSTOP: its registry heartbeat stopped too)."""
    live = select(WorkerProcess.owner).where(WorkerProcess.stopped_at.is_(None),
                                              WorkerProcess.seen_at > live_after)
    return or_(table.step_in_progress.is_(None), table.lock_owner.is_(None),
               table.lock_owner == owner, table.lock_owner.not_in(live))


def claim(db: Database, table: Any, hold: Hold, conditions: Iterable[ColumnElement[bool]],
          limit: int = 1) -> list[Claim]:
    """Up to `limit` unlocked rows of `table` meeting `conditions`, oldest due first, each
    locked for `hold.owner` until `hold.now + hold.ttl`."""
    owner, now, ttl = hold.owner, hold.now, hold.ttl
    claims: list[Claim] = []
    conditions = list(conditions)
    if hold.live_after is not None:
        conditions.append(not_a_live_workers_step(table, hold.live_after, owner))
    if db.dialect != "postgresql":  # SQLite's one write lock: most looks find nothing, so
        with db.read() as s:  # look first and take no write turn for them
            if s.scalar(select(table.id).where(unlocked(table, now), *conditions)
                        .limit(1)) is None:
                return claims
    # (on PostgreSQL the claim's own SELECT … SKIP LOCKED is the look: one round trip less)
    with db.write() as s:
        q = (select(table.id, table.step_in_progress)
             .where(unlocked(table, now), *conditions)
             .order_by(table.next_attempt_at).limit(limit))
        if db.dialect == "postgresql":
            q = q.with_for_update(skip_locked=True)
        for row_id, in_progress in s.execute(q).all():
            token = secrets.token_hex(16)
            result = s.execute(
                update(table)
                .where(table.id == row_id, unlocked(table, now))
                .values(lock_token=token, lock_owner=owner, lock_expires_at=now + ttl)
                .execution_options(synchronize_session=False)
            )
            if result.rowcount == 1:  # type: ignore[attr-defined]
                claims.append(Claim(table, row_id, token, taken_over=in_progress is not None))
    return claims


def extend(db: Database, held: Mapping[str, type[Claimable]], expires: datetime) -> None:
    """The heartbeat: the locks of `held` (token -> table) live until `expires`. One row a
    transaction: a heartbeat that held a node's row while it waited for an instance's
    (which a step held, waiting for that node) deadlocked; one row at a time waits for
    nobody while holding anything."""
    for token, table in held.items():
        with db.write() as s:
            s.execute(
                update(table).where(table.lock_token == token)
                .values(lock_expires_at=expires).execution_options(synchronize_session=False)
            )


def guarded(s: Session, table: type[R], held: Claim) -> R | None:
    """The claimed row, locked, if this worker still holds its lock (else None)."""
    rows: Any = table  # every claimable table has an `id`
    row: R | None = s.scalar(select(rows).where(rows.id == held.id,
                                                rows.lock_token == held.token)
                             .with_for_update())
    return row


def still_held(db: Database, held: Claim, now: datetime, margin: timedelta) -> bool:
    """Whether this worker still holds `held`, with at least `margin` of its lock to run:
    asked right before a call that changes hardware or a tenant's data (the fence), so a
    worker that was frozen past its lock, and taken over, makes no call when it wakes."""
    rows: Any = held.table
    with db.read() as s:
        expires: datetime | None = s.scalar(select(rows.lock_expires_at).where(
            rows.id == held.id, rows.lock_token == held.token))
    return expires is not None and expires > now + margin


def begin_step(row: Claimable, step: str) -> None:
    """The step's I/O is about to run outside any transaction: a new owner finding this
    knows the old one died in it."""
    row.step_in_progress = step


def release(row: Claimable) -> None:
    """The step is over: the row is free to be claimed again (when due)."""
    row.lock_token = None
    row.lock_owner = None
    row.lock_expires_at = None
    row.step_in_progress = None


def due_now(s: Session, table: type[Claimable], row_id: str | None, now: datetime) -> None:
    """The row's pipeline looks at it at once (a hint: whoever holds it finishes first)."""
    if row_id:
        rows: Any = table
        s.execute(update(rows).where(rows.id == row_id).values(next_attempt_at=now)
                  .execution_options(synchronize_session=False))


def take(row: Claimable) -> None:
    """Take the row from whoever holds it (a release, an operator): its holder's guarded
    write then finds nothing, and the next claim does not read it as a crash."""
    row.lock_token = None
    row.lock_expires_at = None
