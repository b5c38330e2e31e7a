"""The append-only history every resource keeps: transitions (written by
lifecycle/writer.py), a step's errors and results, and notes on an instance's history.
Each row says who caused it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Happened:
    """What a history row says: which resource, what kind of line (a transition's column,
    "error", "result", "note", …), the instance it belongs to, from and to what, and a
    message (a phrase is kept to be said in each reader's language)."""

    resource: str
    resource_id: str
    kind: str
    instance_id: str | None = None
    from_value: str | None = None
    to_value: str | None = None
    message: str | Phrase | None = None


def record_event(s: Session, now: datetime, what: Happened, *, actor: str) -> None:
    """Append a history row, saying who caused it."""
    english, phrase = stored(what.message) if what.message is not None else (None, None)
    s.add(Event(at=now, resource=what.resource, resource_id=what.resource_id,
                instance_id=what.instance_id, kind=what.kind, from_value=what.from_value,
                to_value=what.to_value, message=english, phrase=phrase, actor=actor))


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
    record_event(s, now, Happened("instance", instance_id, "note", instance_id,
                                  to_value=what, message=message), actor=actor)
