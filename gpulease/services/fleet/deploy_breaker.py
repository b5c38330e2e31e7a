"""The fleet-wide deploy circuit breaker. When the latest GPULEASE_BREAKER_FAILURES deploys
(within GPULEASE_BREAKER_WINDOW_S) failed for good the same way, it opens: the worker then
holds a failing deploy instead of sending its node to maintenance and moving the order to
a spare (which would fail the same way, one node after another), retries it every
GPULEASE_BREAKER_RETRY_S, and operators are alerted (`gpulease_deploy_breaker_open`, the
GpuleaseDeployBreakerOpen alert, an error log line). The first deploy that succeeds closes
it and the held ones retry at once; an operator may close it (`gpulease breaker reset`).
Hardware verdicts (a failed acceptance run, an unverified erase) never count: those are
the node's own."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from gpulease.db.tables import CircuitBreaker, Event, Node
from gpulease.db.upsert import insert_unless_present
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import Conflict
from gpulease.domain.fleet.breaker import DeployOutcome, should_trip
from gpulease.domain.phrases import phrase
from gpulease.domain.states import BREAKER, BreakerStatus, NodeStatus
from gpulease.lifecycle.history import WORKER, Happened, by, record_event
from gpulease.lifecycle.writer import Move, initial, transition
from gpulease.ports.records import Moves, Records
from gpulease.schemas.fleet import BreakerView

log = logging.getLogger("gpulease.breaker")
DEPLOY = "deploy"
HELD = "held by the deploy circuit breaker: "


def _breaker(s: Session) -> CircuitBreaker:
    """The deploy breaker's row, locked (made closed on first use; safe when two workers
    make it at once)."""
    row = s.get(CircuitBreaker, DEPLOY, with_for_update=True)
    if row is None:
        insert_unless_present(s, CircuitBreaker, "id", id=DEPLOY,
                              **initial(CircuitBreaker, BREAKER))
        row = s.get(CircuitBreaker, DEPLOY, with_for_update=True, populate_existing=True)
        assert row is not None
    return row


def _latest_outcomes(s: Session, p: Records, breaker: CircuitBreaker,
                     now: datetime) -> list[DeployOutcome]:
    """The latest deploys' ends since the breaker last closed, newest first: active (ok)
    or to maintenance (failed)."""
    since = now - timedelta(seconds=p.settings.breaker_window_s)
    if breaker.updated_at is not None:
        since = max(since, breaker.updated_at)
    rows = s.execute(
        select(Event.to_value, Event.message).where(
            Event.resource == "node", Event.kind == "status",
            Event.from_value == NodeStatus.DEPLOYING.value,
            Event.to_value.in_((NodeStatus.ACTIVE.value, NodeStatus.MAINTENANCE.value)),
            Event.at >= since)
        .order_by(Event.at.desc(), Event.id.desc()).limit(p.settings.breaker_failures)).all()
    return [DeployOutcome(to == NodeStatus.ACTIVE.value, message) for to, message in rows]


def hold_failed_deploy(s: Session, p: Moves, node: Node, reason: str,
                       now: datetime) -> bool:
    """Called before a deploy that failed for good sends its node to maintenance: True
    when the breaker is (or now becomes) open and the deploy was held instead."""
    breaker = _breaker(s)
    if breaker.status == BreakerStatus.CLOSED.value:
        latest = [DeployOutcome(False, reason)] + _latest_outcomes(s, p, breaker, now)
        shared = should_trip(latest, p.settings.breaker_failures)
        if shared is None:
            return False
        why = (f"the latest {p.settings.breaker_failures} deploys failed the same way: "
               f"{reason}")
        transition(s, p, breaker, BREAKER, "trip", Move(now, actor=WORKER, reason=why))
        breaker.opened_at = now
        log.error("deploy circuit breaker open: %s. Failing deploys are held and retried "
                  "every %.0f s instead of sending nodes to maintenance; fix the cause or "
                  "`gpulease breaker reset`", why, p.settings.breaker_retry_s)
    retry_at = now + timedelta(seconds=p.settings.breaker_retry_s)
    node.attempts = 0
    node.last_error = (HELD + reason)[:2000]
    node.next_attempt_at = retry_at
    node.stage_deadline = retry_at + timedelta(seconds=p.settings.stage_timeout_s)
    record_event(s, now, Happened(
        "node", node.id, "error", node.instance_id, to_value=node.stage,
        message=phrase("held by the deploy circuit breaker: {reason}", reason=reason)),
        actor=WORKER)
    return True


def _release_held(s: Session, now: datetime) -> int:
    result = s.execute(update(Node).where(
        Node.status == NodeStatus.DEPLOYING.value, Node.last_error.startswith(HELD))
        .values(next_attempt_at=now))
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def deploy_succeeded(s: Session, p: Moves, node: Node, now: datetime) -> None:
    """A node's deploy finished: an open breaker closes and the held deploys retry now."""
    breaker = s.get(CircuitBreaker, DEPLOY)
    if breaker is None or breaker.status != BreakerStatus.OPEN.value:
        return
    s.refresh(breaker, with_for_update=True)
    if breaker.status != BreakerStatus.OPEN.value:
        return
    transition(s, p, breaker, BREAKER, "close", Move(now, actor=WORKER,
               reason=phrase("node {node} deployed", node=node.name)))
    held = _release_held(s, now)
    log.warning("deploy circuit breaker closed: node %s deployed; %d held deploys retry now",
                node.name, held)
    p.wake()


def view(p: Records, actor: Principal) -> BreakerView:
    actor.require_operator()
    with p.db.read() as s:
        breaker = s.get(CircuitBreaker, DEPLOY)
        held = s.scalar(select(func.count()).select_from(Node).where(
            Node.status == NodeStatus.DEPLOYING.value, Node.last_error.startswith(HELD))) or 0
        if breaker is None:
            return BreakerView(status=BreakerStatus.CLOSED.value, reason=None, opened_at=None,
                               held_deploys=held)
        return BreakerView(status=breaker.status, reason=breaker.status_reason,
                           opened_at=breaker.opened_at, held_deploys=held)


def reset(p: Moves, actor: Principal) -> BreakerView:
    """An operator closes the breaker (the cause is fixed); held deploys retry at once."""
    actor.require_operator()
    with p.db.write() as s:
        breaker = _breaker(s)
        if breaker.status != BreakerStatus.OPEN.value:
            raise Conflict("The deploy circuit breaker is closed already.")
        now = p.clock.now()
        transition(s, p, breaker, BREAKER, "reset", Move(now, actor=by(actor),
                                                         reason=phrase("closed by operator")))
        _release_held(s, now)
    p.wake()
    return view(p, actor)
