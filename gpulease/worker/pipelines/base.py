"""The one way background work runs: pipelines over claimed rows (db/claims.py).

A pipeline is a kind of row the worker drives a step at a time: nodes through their deploy
and clean stages, instances (containers among them) through delivery and release, backup
and restore runs, image saves. Each declares which of its rows are due and what one step
does; the runner's threads claim a due row (a lock token with an expiry), run the step's
slow I/O outside any transaction, and apply the result through `guarded()`, so a worker
that lost its lock writes nothing. The heartbeat extends the locks this process holds, so
only a dead worker's rows are taken over. Periodic jobs are apart (worker/schedule.py).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, literal, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from gpulease.db.base import Claimable
from gpulease.db.claims import Claim, Hold, claim, extend
from gpulease.db.session import transient
from gpulease.db.tables import Instance
from gpulease.drivers.on_behalf import acting_for
from gpulease.platform import Platform
from gpulease.services.platform.sites import EVERYWHERE, Scope
from gpulease.services.platform.workers import live_after

log = logging.getLogger("gpulease.worker")


@dataclass(frozen=True)
class Pipeline:
    """A kind of row the worker drives: which are due now (besides being unlocked), which
    still have work ahead (due or not: for `run_until_idle`), and one step of one row."""

    name: str
    table: type[Claimable]
    due: Callable[[datetime], Sequence[ColumnElement[bool]]]
    pending: Callable[[datetime], ColumnElement[bool]]
    step: Callable[[Platform, Claim], None]
    region: Any = None  # the row's region (a column or a subquery): where its servers are


class LockRegistry:
    """Tokens this process holds, for the heartbeat."""

    def __init__(self) -> None:
        self._held: dict[str, type[Claimable]] = {}
        self._mutex = threading.Lock()

    def add(self, held: Claim) -> None:
        with self._mutex:
            self._held[held.token] = held.table

    def discard(self, held: Claim) -> None:
        with self._mutex:
            self._held.pop(held.token, None)

    def snapshot(self) -> dict[str, type[Claimable]]:
        with self._mutex:
            return dict(self._held)


def claim_due(
    p: Platform, table: type[Claimable], owner: str, limit: int = 1,
    extra: Sequence[ColumnElement[bool]] | None = None, due: bool = True,
) -> list[Claim]:
    """Claim up to `limit` rows of `table` for `owner` (for the platform's lock TTL):
    unlocked, meeting `extra`, and (`due`) with their next attempt come."""
    now = p.clock.now()
    conditions = list(extra or [])
    if due:
        conditions.append(table.next_attempt_at <= now)
    return claim(p.db, table, Hold(owner, now, timedelta(seconds=p.settings.lock_ttl_s),
                                   live_after(p, now)), conditions, limit)


def drive(p: Platform, pipeline: Pipeline, limit: int = 10, owner: str = "drive",
          locks: LockRegistry | None = None, scope: Scope = EVERYWHERE) -> int:
    """Claim up to `limit` due rows of `pipeline` in `scope`'s regions and step each (the
    runner's threads, one at a time; tests and benches, all that is due). A step that
    raises leaves its row to expire and be taken over. Returns how many rows were
    stepped."""
    here = scope.covers(pipeline.region) if pipeline.region is not None else None
    claims = claim_due(p, pipeline.table, owner, limit=limit,
                       extra=[*pipeline.due(p.clock.now()), *([] if here is None else [here])],
                       due=False)
    for held in claims:
        if locks is not None:
            locks.add(held)
        try:
            with acting_for(owner):  # its device calls say which worker made them
                pipeline.step(p, held)
        except Exception:  # never let one row stop the others; its lock expires
            log.exception("%s: a step of %s failed", pipeline.name, held.id)
        finally:
            if locks is not None:
                locks.discard(held)
    return len(claims)


def pending(p: Platform, pipeline: Pipeline, scope: Scope = EVERYWHERE) -> bool:
    """Whether `pipeline` has rows with work left in `scope`'s regions (due now or waiting
    on a poll)."""
    here = scope.covers(pipeline.region) if pipeline.region is not None else None
    with p.db.read() as s:
        found = s.scalar(select(literal(1)).select_from(pipeline.table)
                         .where(pipeline.pending(p.clock.now()),
                                *([] if here is None else [here])).limit(1))
    return found is not None


def heartbeat(p: Platform, locks: LockRegistry) -> None:
    extend(p.db, locks.snapshot(),
           p.clock.now() + timedelta(seconds=p.settings.lock_ttl_s))


def lock_instance_first(s: Session, instance_id: str | None) -> None:
    """Lock order everywhere is instance, then node: no deadlock between reconcilers."""
    if instance_id:
        s.execute(select(Instance.id).where(Instance.id == instance_id).with_for_update())


class StepFailed(Exception):
    def __init__(self, message: str, retryable: bool, node_fault: bool = True,
                 retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.node_fault = node_fault  # False: what the server was given is wrong, not it
        self.retry_after_s = retry_after_s  # the device said when to come back


def step_failed(exc: Exception) -> StepFailed:
    """A driver's error as a step result (drivers say `retryable`, and `node_fault` when
    the server is not to blame; unknown errors are retryable, and the server's)."""
    return StepFailed(f"{type(exc).__name__}: {exc}", bool(getattr(exc, "retryable", True)),
                      bool(getattr(exc, "node_fault", True)),
                      getattr(exc, "retry_after_s", None))


def backoff(p: Platform, attempts: int) -> float:
    """Exponential backoff with full jitter (half to all of the capped delay)."""
    delay = min(p.settings.backoff_max_s, p.settings.backoff_base_s * 2 ** max(attempts - 1, 0))
    return float(delay * random.uniform(0.5, 1.0))


def apply_with_retry(p: Platform, what: str, apply: Callable[[], None],
                     until: datetime | None = None) -> bool:
    """Apply a step's result, the I/O done and its result in hand: a dropped connection,
    a deadlock, a timeout or a long row lock (a DBA's open transaction, a migration) must
    not lose it. Retried with backoff for a lock's life, or until the step's own deadline
    (`until`) when that is later: each try re-reads the row by its lock token, so a try
    after the row was taken writes nothing, and a live worker's row is not taken from it
    (db/claims.py). False if the database stayed away that long: the row's next owner then
    treats the step as interrupted (an unsafe step fails safely, others run again)."""
    budget = p.settings.lock_ttl_s
    if until is not None:
        budget = max(budget, (until - p.clock.now()).total_seconds())
    deadline = time.monotonic() + budget
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
