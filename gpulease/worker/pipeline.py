"""Database-backed work queue over pipeline rows (nodes, instances).

A row is due when next_attempt_at <= now and it is not locked (or its lock expired).
Claiming writes a fresh lock_token; every later write by the worker is guarded by
`id + lock_token`, so a worker that lost its lock (expired, or the row was taken over)
writes nothing. On PostgreSQL candidates are read FOR UPDATE SKIP LOCKED; on SQLite the
write transaction is BEGIN IMMEDIATE. A heartbeat extends the locks of live work, so only
a dead worker's rows expire and are taken over.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, or_, select, update

from gpulease.db.tables import Instance, Node
from gpulease.platform import Platform

PipelineTable = type[Node] | type[Instance]


@dataclass(frozen=True)
class Claim:
    table: Any  # type[Node] | type[Instance]
    id: str
    token: str
    taken_over: bool  # the previous owner died mid-step (step_in_progress was set)


def unlocked(table: Any, now: datetime) -> ColumnElement[bool]:
    return or_(table.lock_expires_at.is_(None), table.lock_expires_at < now)


class LockRegistry:
    """Tokens this process holds, for the heartbeat."""

    def __init__(self) -> None:
        self._held: dict[str, Any] = {}
        self._mutex = threading.Lock()

    def add(self, claim: Claim) -> None:
        with self._mutex:
            self._held[claim.token] = claim.table

    def discard(self, claim: Claim) -> None:
        with self._mutex:
            self._held.pop(claim.token, None)

    def snapshot(self) -> dict[str, Any]:
        with self._mutex:
            return dict(self._held)


def claim_due(
    p: Platform, table: Any, owner: str, limit: int = 1,
    extra: list[ColumnElement[bool]] | None = None, due: bool = True,
) -> list[Claim]:
    now = p.clock.now()
    ttl = timedelta(seconds=p.settings.lock_ttl_s)
    conds = [unlocked(table, now), *(extra or [])]
    if due:
        conds.append(table.next_attempt_at <= now)
    claims: list[Claim] = []
    with p.db.write() as s:
        q = select(table.id, table.step_in_progress).where(*conds)
        q = q.order_by(table.next_attempt_at).limit(limit)
        if p.db.dialect == "postgresql":
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


def heartbeat(p: Platform, locks: LockRegistry) -> None:
    held = locks.snapshot()
    if not held:
        return
    expires = p.clock.now() + timedelta(seconds=p.settings.lock_ttl_s)
    with p.db.write() as s:
        for table in {t for t in held.values()}:
            tokens = [tok for tok, t in held.items() if t is table]
            s.execute(
                update(table).where(table.lock_token.in_(tokens))
                .values(lock_expires_at=expires).execution_options(synchronize_session=False)
            )


def release_lock(row: Node | Instance) -> None:
    row.lock_token = None
    row.lock_owner = None
    row.lock_expires_at = None
    row.step_in_progress = None
