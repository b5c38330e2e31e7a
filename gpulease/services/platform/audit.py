"""The audit trail: one row per state-changing request and per console sign-in, with time,
actor (user, token, role), tenant, source address, action, target, outcome and request id.
Append-only: each row's MAC (HMAC-SHA256 under a key derived from the platform's secret)
covers the row and the previous row's MAC, so a changed or removed row breaks the chain;
`verify()` walks it. Rows past the retention setting are pruned from the start, and the
head remembers where the chain now begins.

The head (last row, where pruning cut) is sealed under the same key, so moving it back over
rows removed at the end, or forward over rows removed at the start, shows. Pruning writes a
row of its own into the chain saying what it removed. A writer that finds the head's seal
broken under the installation's key writes a row saying so before its own (the cut stays
reported); a writer whose key is not the installation's (a process left running across
`gpulease key rotate`) writes nothing.

Every field is cleaned before it is chained: control characters and bidirectional overrides
escaped (domain/text.py), cut to its column's width, the outcome an integer."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Protocol

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.orm import Session

from gpulease.db.tables import AuditEntry, AuditHead, PlatformFact
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import InvalidInput
from gpulease.domain.text import clipped
from gpulease.kept import Key
from gpulease.ports.records import Keeping, Sealed
from gpulease.schemas import AuditEntryView, AuditVerdict, Page

HEAD = 1
SEALED = "audit_head_sealed"  # platform fact: the head has been sealed once
FINGERPRINT = "secret_key_fingerprint"  # platform fact kept by services/platform/keys.py
CUT = "AUDIT head altered"  # the action of a row the writer adds on finding a broken seal
PRUNED = "AUDIT pruned"  # the action of the row pruning adds
log = logging.getLogger("gpulease.audit")


class KeyNotInstallations(RuntimeError):
    """This process's key is not the one the installation records: it must not write."""


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


WIDTHS = {"action": 200, "target": 300, "source": 64, "request_id": 64, "user_id": 32,
          "token_id": 32, "role": 16, "tenant_id": 32}  # db/tables.py's AuditEntry


def bounded(h: Happening) -> Happening:
    """`h` as the table can hold it: every text escaped and cut to its column, the outcome
    an integer (0 when it is not one)."""
    try:
        outcome = int(h.outcome)
    except (TypeError, ValueError):
        outcome = 0
    cut: dict[str, str | None] = {name: clipped(getattr(h, name), size)
                                  for name, size in WIDTHS.items()}
    return Happening(at=h.at, outcome=outcome, action=cut["action"] or "?",
                     request_id=cut["request_id"], user_id=cut["user_id"],
                     token_id=cut["token_id"], role=cut["role"], tenant_id=cut["tenant_id"],
                     source=cut["source"], target=cut["target"])


def reduced(h: Happening, why: str) -> Happening:
    """The row to write when the database refused `h` itself: when, the action and how it
    ended, and that it was reduced (never retried for ever)."""
    return Happening(at=h.at, action=(clipped(h.action, 200) or "?"), outcome=0,
                     target=clipped(f"row reduced: the database refused it ({why})", 300))


@dataclass
class _Head:
    last_seq: int
    last_mac: str
    pruned_through: int
    pruned_mac: str
    seal: str


def _seal(key: bytes, head: _Head | AuditHead) -> str:
    doc = f"head|{head.last_seq}|{head.last_mac}|{head.pruned_through}|{head.pruned_mac}"
    return hmac.new(key, doc.encode(), hashlib.sha256).hexdigest()


def _fact(s: Session, name: str) -> str | None:
    return s.scalar(select(PlatformFact.value).where(PlatformFact.name == name))


def _check_head(s: Session, p: Sealed, key: bytes, head: _Head) -> list[Happening]:
    """The rows to chain before this writer's own: none when the head's seal holds (or it
    was never sealed: an older release's head, sealed now); one saying the head was altered
    when the seal is wrong under the installation's key. KeyNotInstallations when this
    process's key is not the installation's."""
    if head.seal and hmac.compare_digest(head.seal, _seal(key, head)):
        return []
    if not head.seal and _fact(s, SEALED) is None:
        s.execute(insert(PlatformFact).values(name=SEALED, value=p.clock.now().isoformat()))
        return []
    installed = _fact(s, FINGERPRINT)
    if installed is not None and installed != p.box.fingerprint():
        raise KeyNotInstallations(
            "this process's secret key is not the installation's (rotated by `gpulease key "
            "rotate`?): it writes no audit rows; restart it with the current key")
    said = (f"the head said rows {head.pruned_through + 1}-{head.last_seq}"
            + ("" if head.seal else " and its seal was removed"))
    return [Happening(at=p.clock.now(), action=CUT, outcome=0, target=said[:300])]


def _locked_head(s: Session) -> _Head:
    row = s.execute(select(AuditHead.last_seq, AuditHead.last_mac, AuditHead.pruned_through,
                           AuditHead.pruned_mac, AuditHead.seal)
                    .where(AuditHead.id == HEAD).with_for_update()).one_or_none()
    assert row is not None, "the audit head row is made by migration 0014"
    return _Head(*row)


def _extend(s: Session, key: bytes, head: _Head, happenings: list[Happening]) -> None:
    """Chain `happenings` after the head and seal the head where they end (Core statements,
    without the ORM's unit of work: every request pays this)."""
    seq, mac = head.last_seq, head.last_mac
    rows = []
    for happening in happenings:
        h = bounded(happening)
        prev, seq = mac, seq + 1
        mac = _mac(key, seq, prev, h)
        rows.append({"seq": seq, "prev_mac": prev, "mac": mac, **asdict(h)})
    if rows:
        s.execute(insert(AuditEntry), rows)
    head.last_seq, head.last_mac = seq, mac
    head.seal = _seal(key, head)
    s.execute(update(AuditHead).where(AuditHead.id == HEAD).values(
        last_seq=head.last_seq, last_mac=head.last_mac, pruned_through=head.pruned_through,
        pruned_mac=head.pruned_mac, seal=head.seal))


def append(p: Sealed, happenings: list[Happening]) -> None:
    """Append rows at the chain's end in one transaction (the head is locked: one writer
    at a time, across processes too)."""
    key = p.box.derive("audit")
    with p.db.write() as s:
        head = _locked_head(s)
        _extend(s, key, head, _check_head(s, p, key, head) + happenings)


def seal(p: Sealed) -> None:
    """Seal the head at a process's start (an older release's head has no seal yet); a
    broken seal is reported in the chain, as a writer would."""
    key = p.box.derive("audit")
    with p.db.write() as s:
        head = _locked_head(s)
        _extend(s, key, head, _check_head(s, p, key, head))


def reseal(s: Session, key: bytes) -> None:
    """Seal the head under `key` (key rotation, inside its transaction, after re-keying)."""
    head = _locked_head(s)
    s.execute(update(AuditHead).where(AuditHead.id == HEAD).values(seal=_seal(key, head)))


def drain(p: Keeping) -> None:
    """Readers of the trail see every row this process handed its writer before they asked
    (services/platform/audit_writer.py)."""
    queue = p.kept.get(QUEUE)
    if queue is not None and not queue.flush():
        log.warning("audit rows still queued after 30 s; this read may lack them")


def record(p: Sealed, happening: Happening) -> None:
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


def verify(p: Keeping, actor: Principal, batch: int = 5000) -> AuditVerdict:
    """Walk the chain from its start to the head: the head's seal, every row's MAC, every
    link, no gap, and no row where a writer found the head altered."""
    actor.require_operator()
    drain(p)
    key = p.box.derive("audit")
    with p.db.read() as s:
        head = s.get(AuditHead, HEAD)
        assert head is not None
        span = {"first_seq": head.pruned_through + 1, "last_seq": head.last_seq}
        if head.seal and not hmac.compare_digest(head.seal, _seal(key, head)):
            return AuditVerdict(intact=False, checked=0, **span, problem=(
                "the chain's head was altered (its seal does not match): rows were removed "
                "at the end or at the start, or the head was moved"))
        if not head.seal and (head.last_seq or _fact(s, SEALED) is not None):
            return AuditVerdict(intact=False, checked=0, **span, problem=(
                "the chain's head is not sealed: its seal was removed, or no process of "
                "this release has started on this database yet (start one, then verify)"))
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
                elif row.action == CUT:
                    problem = (f"row {row.seq}: a writer found the chain's head altered "
                               f"before it ({row.target})")
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


def prune(p: Keeping) -> int:
    """Remove rows older than the retention setting from the chain's start; a row at the
    end says which were removed (the head's seal covers where the chain now begins)."""
    drain(p)
    cutoff = p.clock.now() - timedelta(days=p.settings.audit_retention_days)
    key = p.box.derive("audit")
    with p.db.write() as s:
        head = _locked_head(s)
        cut = _check_head(s, p, key, head)
        last_old = s.scalar(select(func.max(AuditEntry.seq)).where(AuditEntry.at < cutoff))
        if not last_old:
            if cut:
                _extend(s, key, head, cut)
            return 0
        mac = s.scalar(select(AuditEntry.mac).where(AuditEntry.seq == last_old))
        gone = int(s.execute(delete(AuditEntry).where(AuditEntry.seq <= last_old)).rowcount  # type: ignore[attr-defined]
                   or 0)
        record = Happening(at=p.clock.now(), action=PRUNED, outcome=0, target=(
            f"rows {head.pruned_through + 1}-{last_old} removed ({gone}), older than "
            f"{p.settings.audit_retention_days} days; the last removed row's MAC {mac}"))
        head.pruned_through, head.pruned_mac = last_old, mac or ""
        _extend(s, key, head, [*cut, record])
        return gone


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


def entries(p: Keeping, actor: Principal, which: AuditFilter = AuditFilter(), *,
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
