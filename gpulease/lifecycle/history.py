"""The append-only history every resource keeps: transitions (written by
lifecycle/writer.py), a step's errors and results, and notes on an instance's history.
Each row says who caused it."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Protocol

from sqlalchemy.orm import Session

from gpulease.db.tables import Event
from gpulease.domain.accounts import Principal
from gpulease.domain.phrases import Phrase, stored

# Who causes what the platform records, besides people (user:<id>).
WORKER = "worker"
SWEEP_TIMEOUTS = "sweep:timeouts"
SWEEP_LEASES = "sweep:leases"
METER = "meter:containers"
INVOICE_RUN = "run:invoices"
SWEEP_SPENDING = "sweep:spending"


def by(principal: Principal) -> str:
    """The actor a person's request is recorded as."""
    return f"user:{principal.user_id}"


def agent(node_id: str) -> str:
    return f"agent:{node_id}"


def record_event(
    s: Session,
    now: datetime,
    resource: str,
    resource_id: str,
    kind: str,
    *,
    actor: str,
    instance_id: str | None = None,
    from_value: str | None = None,
    to_value: str | None = None,
    message: str | Phrase | None = None,
) -> None:
    english, phrase = stored(message) if message is not None else (None, None)
    s.add(Event(at=now, resource=resource, resource_id=resource_id, instance_id=instance_id,
                kind=kind, from_value=from_value, to_value=to_value, message=english,
                phrase=phrase, actor=actor))


class _Said(Protocol):
    kind: str
    to_value: str | None
    message: str | None
    phrase: str | None


def reason_phrase(newest_first: Iterable[_Said], status: str, reason: str | None
                  ) -> str | None:
    """A status reason's phrase (JSON): that of the latest move to `status` that gave this
    reason, so a page can say it in its reader's language; None for a reason as written."""
    if not reason:
        return None
    return next((e.phrase for e in newest_first if e.kind == "status"
                 and e.to_value == status and e.message == reason), None)


def note(s: Session, now: datetime, instance_id: str, what: str, message: str | Phrase, *,
         actor: str) -> None:
    """A line in an instance's history that is not a transition (moved to a spare,
    renewed, a credit or refund, stopped unpaid)."""
    record_event(s, now, "instance", instance_id, "note", actor=actor, instance_id=instance_id,
                 to_value=what, message=message)
