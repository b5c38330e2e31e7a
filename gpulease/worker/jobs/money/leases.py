"""The lease sweep, a periodic job: reminders before a term ends (only the latest one due
when the sweep runs late), automatic renewal, grace (with a backup of the data disk, and a
last one before the erase: services/storage/backup_policy.py), and the end of grace, whose effect
releases the instance and erases its disks (lifecycle/writer.py)."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpulease.db.money_tables import Lease, Wallet
from gpulease.db.tables import Instance
from gpulease.domain.billing.leases import Action, local_text, next_action
from gpulease.domain.errors import PaymentRequired
from gpulease.domain.phrases import Phrase, phrase
from gpulease.domain.states import LEASE, LeaseStatus
from gpulease.lifecycle.history import SWEEP_LEASES, note
from gpulease.lifecycle.writer import Move, transition
from gpulease.platform import Platform
from gpulease.services.money.leases import Renewal, extend
from gpulease.services.platform.outbox import Notice, post_notice
from gpulease.services.storage import backup_policy
from gpulease.worker.jobs.job import Job


def _mark_sent(lease: Lease, *kinds: str) -> None:
    lease.reminders_sent = ",".join(
        r for r in dict.fromkeys((*lease.reminders_sent.split(","), *kinds)) if r)


def _notice(s: Session, lease: Lease, kind: str, now: datetime, text: str | Phrase) -> None:
    """A reminder for the outbox (e-mail and webhook delivery read it)."""
    post_notice(s, Notice(lease.tenant_id, kind, text, lease.instance_id, lease.id), now)
    _mark_sent(lease, kind)


def sweep_leases(p: Platform, limit: int = 200) -> int:
    """Do what is due on active and grace leases; returns how many leases moved."""
    now = p.clock.now()
    with p.db.read() as s:
        due_soon = list(s.execute(select(Lease.id, Lease.instance_id).where(
            Lease.status.in_((LeaseStatus.ACTIVE.value, LeaseStatus.GRACE.value)),
            Lease.ends_at <= now + timedelta(days=7)).order_by(Lease.ends_at).limit(limit)))
    moved = 0
    for lease_id, instance_id in due_soon:
        with p.db.write() as s:
            # Lock order everywhere: the instance, then what hangs off it.
            inst = s.get(Instance, instance_id, with_for_update=True)
            lease = s.get(Lease, lease_id, with_for_update=True)
            if lease is None or inst is None:
                continue
            moved += _sweep_one(s, p, lease, inst, now)
    if moved:
        p.wake()
    return moved


def _retry_renewal(s: Session, p: Platform, lease: Lease, inst: Instance,
                   now: datetime) -> bool:
    """In grace with auto-renew on: once the wallet has moved since the lease last did (a
    top-up), try the renewal again; short again, wait for the next movement."""
    wallet = s.get(Wallet, inst.tenant_id)
    if wallet is None or wallet.updated_at is None or wallet.updated_at <= lease.updated_at:
        return False
    try:
        with s.begin_nested():
            extend(s, p, inst, lease, Renewal(1, inst.term, phrase(
                "automatic renewal after a top-up"), SWEEP_LEASES), now)
        return True
    except PaymentRequired:
        lease.updated_at = now
        return False


def _sweep_one(s: Session, p: Platform, lease: Lease, inst: Instance, now: datetime) -> int:
    grace_until = lease.grace_until if lease.status == LeaseStatus.GRACE.value else None
    if lease.auto_renew and grace_until is not None and now < grace_until and (
            _retry_renewal(s, p, lease, inst, now)):
        return 1
    if grace_until is not None and backup_policy.final_due(s, p, inst, lease, now):
        return 1
    sent = frozenset(r for r in lease.reminders_sent.split(",") if r)
    due = next_action(LeaseStatus(lease.status), lease.ends_at, lease.grace_until,
                      lease.auto_renew, now, sent)
    if due.action == Action.NOTHING:
        return 0
    ends = local_text(lease.ends_at, p.settings.zone)
    if due.action == Action.REMIND and due.reminder:
        _notice(s, lease, due.reminder, now, phrase(
            "Your lease of {instance} ({sku}) ends {ends}. Renew it, or back up your data: "
            "{days} days after the end the disks are erased.", instance=inst.id, sku=inst.sku,
            ends=ends, days=f"{p.settings.lease_grace_days:g}"))
        _mark_sent(lease, *due.superseded)  # a late sweep: the older ones are moot
    elif due.action == Action.RENEW:
        try:
            with s.begin_nested():
                # by the term it was ordered for: two extra days on a month lease do not
                # make it renew by the day
                extend(s, p, inst, lease, Renewal(1, inst.term, phrase("automatic renewal"),
                                                  SWEEP_LEASES), now)
        except PaymentRequired as exc:  # remind, then grace as without it
            _enter_grace(s, p, lease, inst, now, f"automatic renewal failed: {exc}")
    elif due.action == Action.ENTER_GRACE:
        _enter_grace(s, p, lease, inst, now, None)
    elif due.action == Action.END:
        if backup_policy.erase_waits(s, inst, lease, now):
            return 0  # a last backup under way: the erase waits for it (a while)
        _notice(s, lease, "erased", now, phrase(
            "The grace period of {instance} ended; its disks are being erased and "
            "certified.", instance=inst.id))
        transition(s, p, lease, LEASE, "end", Move(now, actor=SWEEP_LEASES,
                   reason=phrase("grace ended")))  # its effect releases the instance
    return 1


def _enter_grace(s: Session, p: Platform, lease: Lease, inst: Instance, now: datetime,
                 why: str | None) -> None:
    lease.grace_until = lease.ends_at + timedelta(days=p.settings.lease_grace_days)
    zone = p.settings.zone
    text = phrase("Your lease of {instance} expired {ended}. The machine stays until {until}; "
                  "renew before then, or its disks are erased.{why}", instance=inst.id,
                  ended=local_text(lease.ends_at, zone),
                  until=local_text(lease.grace_until, zone), why=f" ({why})" if why else "")
    transition(s, p, lease, LEASE, "expire", Move(now, actor=SWEEP_LEASES, reason=why))
    _notice(s, lease, "expiry", now, text)
    note(s, now, inst.id, "grace", str(text), actor=SWEEP_LEASES)
    backup_policy.at_grace(s, p, inst, lease, now)


JOB = Job("leases", lambda p, _owner: sweep_leases(p),
          "reminders, automatic renewals, grace, release and erase after grace")
