"""What a tenant (or the operators) is to be told goes into the outbox (lease_notices);
services/notify.py sends it. A notice made of a phrase is mailed in each reader's language;
its English text is what the webhook and the operator's views carry."""

from __future__ import annotations

import json
from datetime import datetime

from sqlalchemy.orm import Session

from gpulease.db.money_tables import LeaseNotice
from gpulease.domain.phrases import Gettext, Phrase


def post_notice(s: Session, tenant_id: str, kind: str, text: str | Phrase, now: datetime,
                instance_id: str | None = None, lease_id: str | None = None) -> LeaseNotice:
    english = str(text)[:4000]
    row = LeaseNotice(lease_id=lease_id, tenant_id=tenant_id, instance_id=instance_id,
                      kind=kind, text=english, created_at=now,
                      phrase=json.dumps(text.to_json(), ensure_ascii=False)
                      if isinstance(text, Phrase) else None)
    s.add(row)
    return row


def said(text: str, phrase: str | None, gettext: Gettext) -> str:
    """A stored notice in gettext's language (its English text when it has no phrase)."""
    if not phrase:
        return text
    try:
        return Phrase.from_json(json.loads(phrase)).said(gettext)
    except (ValueError, KeyError, TypeError):
        return text
