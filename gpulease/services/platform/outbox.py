"""What a tenant (or the operators) is to be told goes into the outbox (lease_notices);
services/platform/notify.py sends it. A notice made of a phrase is mailed in each reader's language;
its English text is what the webhook and the operator's views carry."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from gpulease.db.money_tables import LeaseNotice
from gpulease.domain.phrases import Phrase, stored


def post_notice(s: Session, tenant_id: str, kind: str, text: str | Phrase, now: datetime,
                instance_id: str | None = None, lease_id: str | None = None) -> LeaseNotice:
    english, phrase = stored(text)
    row = LeaseNotice(lease_id=lease_id, tenant_id=tenant_id, instance_id=instance_id,
                      kind=kind, text=english[:4000], created_at=now, phrase=phrase)
    s.add(row)
    return row
