"""Database-backed work queue over pipeline rows (nodes, instances).

A row is due when next_attempt_at <= now and it is not locked (or its lock expired).
Claiming writes a fresh lock_token; every later write by the worker is guarded by
`id + lock_token`, so a worker that lost its lock (expired, or the row was taken over)
writes nothing. On PostgreSQL candidates are read FOR UPDATE SKIP LOCKED; on SQLite the
write transaction is BEGIN IMMEDIATE. A heartbeat extends the locks of live work, so only
a dead worker's rows expire and are taken over.
"""

from __future__ import annotations

import logging
import random
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, or_, select, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from gpulease.db.session import transient
from gpulease.db.tables import Instance, Node
from gpulease.platform import Platform

log = logging.getLogger("gpulease.worker")

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


def guarded(s: Session, table: Any, claim: Claim) -> Any:
    """The claimed row, locked, if this worker still holds its lock (else None)."""
    return s.scalar(select(table).where(table.id == claim.id, table.lock_token == claim.token)
                    .with_for_update())


def lock_instance_first(s: Session, instance_id: str | None) -> None:
    """Lock order everywhere is instance, then node: no deadlock between reconcilers."""
    if instance_id:
        s.execute(select(Instance.id).where(Instance.id == instance_id).with_for_update())


class StepFailed(Exception):
    def __init__(self, message: str, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


def step_failed(exc: Exception) -> StepFailed:
    """A driver's error as a step result (drivers say `retryable`; unknown errors are)."""
    return StepFailed(f"{type(exc).__name__}: {exc}", bool(getattr(exc, "retryable", True)))


def backoff(p: Platform, attempts: int) -> float:
    """Exponential backoff with full jitter (half to all of the capped delay)."""
    delay = min(p.settings.backoff_max_s, p.settings.backoff_base_s * 2 ** max(attempts - 1, 0))
    return float(delay * random.uniform(0.5, 1.0))


def apply_with_retry(p: Platform, what: str, apply: Callable[[], None]) -> bool:
    """Apply a step's result, the I/O done and its result in hand: a dropped connection,
    a deadlock or a timeout must not lose it. Retried with backoff while this worker still
    holds the row's lock (the heartbeat extends it); each try re-reads the row by its lock
    token, so a try after the lock was lost writes nothing. False if the database stayed
    away longer than a lock lives: the row's next owner then treats the step as
    interrupted (an unsafe step fails safely, others run again)."""
    deadline = time.monotonic() + p.settings.lock_ttl_s
    delay = 0.05
    while True:
        try:
            apply()
            return True
        except DBAPIError as exc:
            if not transient(exc):
                raise
            if time.monotonic() + delay > deadline:
                log.error("%s: result not applied, the database stayed away: %s", what, exc)
                return False
            log.warning("%s: applying the result failed (%s); retrying in %.2f s", what,
                        str(exc).splitlines()[0], delay)
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
