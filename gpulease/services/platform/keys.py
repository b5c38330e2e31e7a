"""The secret key: every process of an installation must hold the same one, since BMC and
root passwords, webhook secrets, stored answers and agent payloads are sealed under it and
the audit trail's MACs are keyed by it. The database keeps the key's fingerprint; a process
with another key refuses to start, saying so, instead of failing to decrypt every 30 s.
`rotate` re-seals every secret and re-keys the audit chain (verified intact first) under a
new key in one transaction."""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from gpulease.db.money_tables import TenantWebhook
from gpulease.db.tables import (
    AgentCommand,
    AuditEntry,
    AuditHead,
    IdempotencyKey,
    Instance,
    Node,
    PlatformFact,
)
from gpulease.db.upsert import insert_unless_present
from gpulease.domain.accounts import Principal, Role
from gpulease.domain.errors import Conflict
from gpulease.ports.records import Keeping, Sealed
from gpulease.security import SecretBox
from gpulease.services.platform import audit, workers

FINGERPRINT = audit.FINGERPRINT
# Every column sealed under the key: (table, primary key, column)
SEALED = ((Node, Node.id, Node.bmc_password_enc),
          (Instance, Instance.id, Instance.root_password_enc),
          (TenantWebhook, TenantWebhook.tenant_id, TenantWebhook.secret_enc),
          (IdempotencyKey, IdempotencyKey.id, IdempotencyKey.response_json),
          (AgentCommand, AgentCommand.id, AgentCommand.payload_enc))
SYSTEM = Principal(user_id="system:key", tenant_id=None, role=Role.OPERATOR)


class KeyMismatch(RuntimeError):
    """This process's secret key is not the installation's."""


class KeyMissing(RuntimeError):
    """A shared database without GPULEASE_SECRET_KEY."""


def require_shared_key(url: str, key: str) -> None:
    """On PostgreSQL every process must be given the key: a key file made per host would
    differ between them."""
    if not url.startswith("sqlite") and not key:
        raise KeyMissing(
            "GPULEASE_SECRET_KEY is not set: on a shared database every process needs the "
            "same key (generate one with `python -c 'from cryptography.fernet import "
            "Fernet; print(Fernet.generate_key().decode())'`, back it up with the database)")


def check_key(p: Sealed) -> None:
    """Record the key's fingerprint on first use; refuse a different one after. A database
    from before fingerprints is checked by opening one sealed secret first."""
    mine = p.box.fingerprint()
    with p.db.write() as s:
        fact = s.get(PlatformFact, FINGERPRINT, with_for_update=True)
        if fact is None:
            sample = s.scalar(select(Node.bmc_password_enc).limit(1))
            if sample is not None:
                try:
                    p.box.open(sample)
                except ValueError:
                    raise KeyMismatch(
                        "this process's secret key does not open the secrets already in "
                        "this database: give it the key they were sealed under") from None
            # Two processes starting at once on a new database both get here: the first
            # insert wins, and this process's key is checked against the one recorded.
            insert_unless_present(s, PlatformFact, "name", name=FINGERPRINT, value=mine)
            fact = s.get(PlatformFact, FINGERPRINT, populate_existing=True)
        if fact is not None and fact.value != mine:
            raise KeyMismatch(
                f"this process's secret key (fingerprint {mine}) is not the one this "
                f"database's secrets are sealed under (fingerprint {fact.value}): give "
                "every process the same GPULEASE_SECRET_KEY (or the same key file)")


def key_is_installations(p: Sealed) -> bool:
    """Whether this process's key is the one the installation records (a process started
    before `rotate` is not, and must stop writing: /readyz takes it out)."""
    with p.db.read() as s:
        recorded = s.scalar(select(PlatformFact.value).where(PlatformFact.name == FINGERPRINT))
    return recorded is None or recorded == p.box.fingerprint()


def rotate(p: Keeping, new_key: str, batch: int = 1000) -> dict[str, int]:
    """Re-seal every secret and re-key the audit chain under `new_key`, in one transaction;
    how many of each were re-sealed. Every process must be stopped first and started with
    the new key after."""
    new = SecretBox(new_key)  # a bad key is refused before anything changes
    if new.fingerprint() == p.box.fingerprint():
        raise Conflict("The new key is the current key.")
    alive = workers.live_workers(p)
    if alive:
        raise Conflict("Workers still run with the current key: {alive}. Stop every worker "
                       "and API process first: one left running would write what the new "
                       "key cannot read (API processes also stop writing audit rows and "
                       "answer 503 on /readyz once the key changes).", alive=", ".join(alive))
    verdict = audit.verify(p, SYSTEM)
    if not verdict.intact:
        raise Conflict("The audit chain is broken ({problem}); rotating the key "
                       "would hide that. Investigate first.", problem=verdict.problem)
    counts: dict[str, int] = {}
    with p.db.write() as s:
        fact = s.get(PlatformFact, FINGERPRINT, with_for_update=True)
        if fact is not None and fact.value != p.box.fingerprint():
            raise KeyMismatch("this process's key is not the installation's; rotate with it")
        for table, key, column in SEALED:
            done, after = 0, None
            while True:
                q = select(key, column).where(column.is_not(None)).order_by(key).limit(batch)
                if after is not None:
                    q = q.where(key > after)
                rows = s.execute(q).all()
                for ident, sealed in rows:
                    if sealed is None:
                        continue
                    s.execute(update(table).where(key == ident)
                              .values({column.key: new.seal(p.box.open(sealed))}))
                done += len(rows)
                if len(rows) < batch:
                    break
                after = rows[-1][0]
            counts[table.__tablename__] = done
        counts["audit_entries"] = _rekey_audit(s, new.derive("audit"), batch)
        if fact is None:
            s.add(PlatformFact(name=FINGERPRINT, value=new.fingerprint()))
        else:
            fact.value = new.fingerprint()
    return counts


def _rekey_audit(s: Session, new: bytes, batch: int) -> int:
    """Each row's MAC again under the new key, the chain's links with it (the first row
    still links to the last pruned row's MAC)."""
    head = s.get(AuditHead, audit.HEAD, with_for_update=True)
    assert head is not None
    prev, after, done = head.pruned_mac, head.pruned_through, 0
    while True:
        rows = s.scalars(select(AuditEntry).where(AuditEntry.seq > after)
                         .order_by(AuditEntry.seq).limit(batch)).all()
        for row in rows:
            row.prev_mac = prev
            row.mac = audit.mac_of(new, row.seq, prev, row)
            prev = row.mac
        done += len(rows)
        if len(rows) < batch:
            break
        after = rows[-1].seq
        s.flush()
    head.last_mac = prev
    s.flush()
    audit.reseal(s, new)
    return done
