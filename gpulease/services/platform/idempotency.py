"""Idempotency-Key for creating POSTs: the same key and body give the first answer again;
the same key with another body (or on another endpoint) is refused with 422.

The first answer is stored in the transaction that created the resource, so a retry after
a lost response can never create a second one. An answer that carries a secret shown once
(a new API token) is stored without it (its model's `without_secrets()`): a replay answers
the rest, and the store holds nothing that opens anything.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpulease.db.tables import IdempotencyKey
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import InvalidInput
from gpulease.ports.records import Sealed

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Idem:
    key: str
    request_hash: str


def idem_for(key: str | None, scope: str, body: BaseModel) -> Idem | None:
    if not key:
        return None
    canonical = json.dumps([scope, body.model_dump(mode="json")], sort_keys=True)
    return Idem(key, hashlib.sha256(canonical.encode()).hexdigest())


def replay(p: Sealed, actor: Principal, idem: Idem, model: type[M]) -> M | None:
    with p.db.read() as s:
        row = s.scalar(select(IdempotencyKey).where(
            IdempotencyKey.user_id == actor.user_id, IdempotencyKey.key == idem.key))
        if row is None:
            return None
        if row.request_hash != idem.request_hash:
            raise InvalidInput(
                "Idempotency-Key",
                "Idempotency-Key {idem_key!r} was used with a different request; use a new "
                "key for a new request.",
             idem_key=idem.key,)
        return model.model_validate_json(p.box.open(row.response_json))


def remember(s: Session, p: Sealed, actor: Principal, idem: Idem, response: BaseModel) -> None:
    strip: Callable[[], BaseModel] | None = getattr(response, "without_secrets", None)
    kept = strip() if strip is not None else response
    s.add(IdempotencyKey(
        user_id=actor.user_id, key=idem.key, request_hash=idem.request_hash, status_code=201,
        response_json=p.box.seal(kept.model_dump_json()), created_at=p.clock.now()))
    s.flush()  # a concurrent twin's insert fails here, and its whole transaction rolls back


def run_once(
    p: Sealed, actor: Principal | None, idem: Idem | None, model: type[M],
    create: Callable[[Session], M],
) -> tuple[M, bool]:
    """Create in one transaction, or replay the stored answer. Returns (answer, created)."""
    if idem is not None and actor is None:
        raise ValueError("an Idempotency-Key needs the caller's identity")
    if idem is not None and actor is not None:
        stored = replay(p, actor, idem, model)
        if stored is not None:
            return stored, False
    try:
        with p.db.write() as s:
            result = create(s)
            if idem is not None and actor is not None:
                remember(s, p, actor, idem, result)
        return result, True
    except IntegrityError:
        if idem is not None and actor is not None:
            stored = replay(p, actor, idem, model)
            if stored is not None:
                return stored, False
        raise
