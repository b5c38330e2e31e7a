"""The audit trail: one row per state-changing request and per console sign-in, with time,
actor (user, token, role), tenant, source address, action, target, outcome and request id.
Append-only: each row's MAC (HMAC-SHA256 under a key derived from the platform's secret)
covers the row and the previous row's MAC, so a changed or removed row breaks the chain;
`verify()` walks it. Rows past the retention setting are pruned from the start, and the
head remembers where the chain now begins."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from typing import Protocol

from sqlalchemy import delete, func, insert, select, update

from gpulease.db.tables import AuditEntry, AuditHead
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import InvalidInput
from gpulease.platform import Key, Platform
from gpulease.schemas import AuditEntryView, AuditVerdict, Page

HEAD = 1
log = logging.getLogger("gpulease.audit")


@dataclass(frozen=True)
class Happening:
    """What the API saw: everything a row says but its place in the chain."""

    at: datetime
    action: str
    outcome: int
    request_id: str | None = None
    user_id: str | None = None
    token_id: str | None = None
    role: str | None = None
    tenant_id: str | None = None
    source: str | None = None
    target: str | None = None


class Queue(Protocol):
    """Where a process hands its rows to be written (services/platform/audit_writer.py)."""

    def submit(self, happening: Happening) -> None: ...

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until every row handed over so far is written; False on timeout."""
        ...

    def close(self, timeout_s: float = 30.0) -> None: ...


QUEUE: Key[Queue] = Key("the audit trail's writer")


def _mac(key: bytes, seq: int, prev: str, h: Happening) -> str:
    fields = asdict(h) | {"at": h.at.isoformat(timespec="microseconds"), "seq": seq,
                          "prev": prev}
    doc = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(key, doc, hashlib.sha256).hexdigest()


def _bounded(h: Happening) -> Happening:
    def clip(value: str | None, size: int) -> str | None:
        return value[:size] if value is not None else None

    return replace(h, action=h.action[:200], target=clip(h.target, 300),
                   source=clip(h.source, 64), request_id=clip(h.request_id, 64))


def append(p: Platform, happenings: list[Happening]) -> None:
    """Append rows at the chain's end in one transaction (the head is locked: one writer
    at a time, across processes too)."""
    key = p.box.derive("audit")
    with p.db.write() as s:  # three statements, without the ORM's unit of work: every
        head = s.execute(select(AuditHead.last_seq, AuditHead.last_mac)  # request pays it
                         .where(AuditHead.id == HEAD).with_for_update()).one_or_none()
        assert head is not None, "the audit head row is made by migration 0014"
        seq, mac = head.last_seq, head.last_mac
        rows = []
        for happening in happenings:
            h = _bounded(happening)
            prev, seq = mac, seq + 1
            mac = _mac(key, seq, prev, h)
            rows.append({"seq": seq, "prev_mac": prev, "mac": mac, **asdict(h)})
        s.execute(insert(AuditEntry), rows)
        s.execute(update(AuditHead).where(AuditHead.id == HEAD)
                  .values(last_seq=seq, last_mac=mac))


def drain(p: Platform) -> None:
    """Readers of the trail see every row this process handed its writer before they asked
    (services/platform/audit_writer.py)."""
    queue = p.kept.get(QUEUE)
    if queue is not None and not queue.flush():
        log.warning("audit rows still queued after 30 s; this read may lack them")


def record(p: Platform, happening: Happening) -> None:
    """Append one row; the request's answer leaves once it is committed."""
    append(p, [happening])


def mac_of(key: bytes, seq: int, prev: str, row: AuditEntry) -> str:
    """A stored row's MAC under `key` (key rotation re-keys the chain with it)."""
    return _mac(key, seq, prev, _happening(row))


def _happening(row: AuditEntry) -> Happening:
    return Happening(at=row.at, action=row.action, outcome=row.outcome,
                     request_id=row.request_id, user_id=row.user_id, token_id=row.token_id,
                     role=row.role, tenant_id=row.tenant_id, source=row.source,
                     target=row.target)


def verify(p: Platform, actor: Principal, batch: int = 5000) -> AuditVerdict:
    """Walk the chain from its start to the head: every row's MAC, every link, no gap."""
    actor.require_operator()
    drain(p)
    key = p.box.derive("audit")
    with p.db.read() as s:
        head = s.get(AuditHead, HEAD)
        assert head is not None
        expect_seq, prev = head.pruned_through + 1, head.pruned_mac
        checked, after = 0, head.pruned_through
        while True:
            rows = s.scalars(select(AuditEntry).where(AuditEntry.seq > after)
                             .order_by(AuditEntry.seq).limit(batch)).all()
            for row in rows:
                problem = None
                if row.seq != expect_seq:
                    problem = (f"row {expect_seq} is missing (the next is {row.seq})"
                               if row.seq > expect_seq else f"row {row.seq} is out of place")
                elif row.prev_mac != prev:
                    problem = f"row {row.seq} does not follow row {row.seq - 1} (removed or " \
                              "changed before it)"
                elif not hmac.compare_digest(row.mac, _mac(key, row.seq, prev,
                                                           _happening(row))):
                    problem = f"row {row.seq} was changed after it was written"
                if problem:
                    return AuditVerdict(intact=False, checked=checked, problem=problem,
                                        first_seq=head.pruned_through + 1, last_seq=head.last_seq)
                prev, expect_seq, checked = row.mac, row.seq + 1, checked + 1
            if len(rows) < batch:
                break
            after = rows[-1].seq
        if expect_seq - 1 != head.last_seq or prev != head.last_mac:
            return AuditVerdict(intact=False, checked=checked, first_seq=head.pruned_through + 1,
                                last_seq=head.last_seq,
                                problem=f"the chain ends at row {expect_seq - 1} but the head "
                                        f"says {head.last_seq} (rows removed at the end)")
        return AuditVerdict(intact=True, checked=checked, first_seq=head.pruned_through + 1,
                            last_seq=head.last_seq)


def prune(p: Platform) -> int:
    """Remove rows older than the retention setting from the chain's start."""
    drain(p)
    cutoff = p.clock.now() - timedelta(days=p.settings.audit_retention_days)
    with p.db.write() as s:
        head = s.get(AuditHead, HEAD, with_for_update=True)
        assert head is not None
        last_old = s.scalar(select(func.max(AuditEntry.seq)).where(AuditEntry.at < cutoff))
        if not last_old:
            return 0
        mac = s.scalar(select(AuditEntry.mac).where(AuditEntry.seq == last_old))
        gone = s.execute(delete(AuditEntry).where(AuditEntry.seq <= last_old)).rowcount  # type: ignore[attr-defined]
        head.pruned_through, head.pruned_mac = last_old, mac or ""
        return int(gone or 0)


def _view(row: AuditEntry) -> AuditEntryView:
    return AuditEntryView(seq=row.seq, at=row.at, request_id=row.request_id,
                          user_id=row.user_id, token_id=row.token_id, role=row.role,
                          tenant_id=row.tenant_id, source=row.source, action=row.action,
                          target=row.target, outcome=row.outcome)


@dataclass(frozen=True)
class AuditFilter:
    """Which rows of the trail: one tenant's, one user's, since when."""

    tenant_id: str | None = None
    user_id: str | None = None
    since: datetime | None = None


def entries(p: Platform, actor: Principal, which: AuditFilter = AuditFilter(), *,
            limit: int = 50, offset: int = 0) -> Page[AuditEntryView]:
    """Operator: every row (or one tenant's); tenant admin: the tenant's own. Newest first."""
    tenant_id, user_id, since = which.tenant_id, which.user_id, which.since
    where = []
    if actor.is_operator:
        if tenant_id:
            where.append(AuditEntry.tenant_id == tenant_id)
    else:
        own = actor.require_tenant_admin()
        if tenant_id and tenant_id != own:
            raise InvalidInput("tenant", "A tenant admin reads its own tenant's trail only.")
        where.append(AuditEntry.tenant_id == own)
    if user_id:
        where.append(AuditEntry.user_id == user_id)
    if since is not None:
        where.append(AuditEntry.at >= since)
    drain(p)
    with p.db.read() as s:
        total = s.scalar(select(func.count()).select_from(AuditEntry).where(*where)) or 0
        rows = s.scalars(select(AuditEntry).where(*where).order_by(AuditEntry.seq.desc())
                         .limit(limit).offset(offset)).all()
        return Page(items=[_view(r) for r in rows], total=total, limit=limit, offset=offset)
