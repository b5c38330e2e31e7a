"""What a tenant (or the operators) is to be told goes into the outbox (lease_notices);
services/platform/notify.py sends it. A notice made of a phrase is mailed in each reader's language;
its English text is what the webhook and the operator's views carry."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from gpulease.db.money_tables import LeaseNotice
from gpulease.domain.phrases import Phrase, stored


@dataclass(frozen=True)
class Notice:
    """What a tenant (or OPERATORS) is told: its kind, its text (a phrase is said in each
    reader's language), and the instance and lease it is about."""

    to: str
    kind: str
    text: str | Phrase
    instance_id: str | None = None
    lease_id: str | None = None


def post_notice(s: Session, notice: Notice, now: datetime) -> LeaseNotice:
    """Into the outbox, for the notices job to deliver."""
    english, phrase = stored(notice.text)
    row = LeaseNotice(lease_id=notice.lease_id, tenant_id=notice.to,
                      instance_id=notice.instance_id, kind=notice.kind, text=english[:4000],
                      created_at=now, phrase=phrase)
    s.add(row)
    return row
