"""A rented server's backup policy, set by its tenant: the directory kept (default
/data/checkpoints), a schedule, and the backups the platform takes when the lease lapses —
one as it enters grace and a last one before the erase, each tried again until the grace
period ends (on unless the tenant opts out). The erase waits a while for a last backup
still under way; a run that could not be taken is said to the tenant."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpulease.agent.backup import DATA_MOUNT, on_data_disk
from gpulease.db.money_tables import Lease
from gpulease.db.ops_tables import Backup, BackupPolicy
from gpulease.db.repositories import get_instance
from gpulease.db.tables import Instance
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import InvalidInput
from gpulease.domain.phrases import Phrase, phrase
from gpulease.domain.states import BackupStatus, InstanceStatus
from gpulease.lifecycle.history import SWEEP_LEASES, by, note
from gpulease.ports.records import Records, Stored
from gpulease.schemas.fleet import BackupPolicyUpdate, BackupPolicyView
from gpulease.services.storage import backups
from gpulease.services.storage.meter import over_quota

DEFAULT_PATH = f"{DATA_MOUNT}/checkpoints"
# The last backup starts this long before the grace period ends (half the grace period
# when that is shorter), so that its retries fit in before the erase …
FINAL_LEAD = timedelta(hours=6)
# … which waits this long past the end of grace for a last backup still queued or running.
ERASE_WAITS = timedelta(hours=1)
SCHEDULER = "sweep:backups"


def _defaults(inst: Instance) -> BackupPolicy:
    return BackupPolicy(instance_id=inst.id, tenant_id=inst.tenant_id, path=DEFAULT_PATH,
                        every_hours=None, at_lease_end=True, max_mbps=None)


def policy_of(s: Session, inst: Instance) -> BackupPolicy:
    """The instance's policy (the defaults when its tenant set none; not stored)."""
    return s.get(BackupPolicy, inst.id) or _defaults(inst)


def _view(s: Session, pol: BackupPolicy) -> BackupPolicyView:
    last_ok = s.execute(select(Backup.finished_at, Backup.snapshot_id).where(
        Backup.instance_id == pol.instance_id, Backup.kind == "backup",
        Backup.status == BackupStatus.SUCCEEDED.value)
        .order_by(Backup.finished_at.desc()).limit(1)).first()
    latest = s.execute(select(Backup.status, Backup.status_reason).where(
        Backup.instance_id == pol.instance_id, Backup.kind == "backup")
        .order_by(Backup.requested_at.desc(), Backup.id.desc()).limit(1)).first()
    return BackupPolicyView(
        instance_id=pol.instance_id, path=pol.path, every_hours=pol.every_hours,
        at_lease_end=pol.at_lease_end, max_mbps=pol.max_mbps,
        next_scheduled_at=_next_scheduled(s, pol),
        last_success_at=last_ok[0] if last_ok else None,
        last_snapshot_id=last_ok[1] if last_ok else None,
        last_failure=latest[1] if latest and latest[0] == BackupStatus.FAILED.value else None)


def _next_scheduled(s: Session, pol: BackupPolicy) -> datetime | None:
    if not pol.every_hours:
        return None
    last = s.scalar(select(func.max(Backup.requested_at)).where(
        Backup.instance_id == pol.instance_id, Backup.trigger == backups.SCHEDULED))
    return pol.updated_at if last is None else last + timedelta(hours=pol.every_hours)


def show(p: Records, actor: Principal, instance_id: str) -> BackupPolicyView:
    with p.db.read() as s:
        inst = get_instance(s, actor, instance_id)
        return _view(s, policy_of(s, inst))


def update(p: Records, actor: Principal, instance_id: str, body: BackupPolicyUpdate
           ) -> BackupPolicyView:
    """Change what was given; a schedule takes its first backup at the next sweep."""
    actor.require_order_rights()
    if body.path is not None:
        try:
            on_data_disk(Path("/"), body.path)
        except ValueError:
            raise InvalidInput("path", "{body_path!r} is not on the server's data disk: "
                               "name a directory under {data_mount}/, e.g. "
                               "{default_path}.",
                               body_path=body.path, data_mount=DATA_MOUNT,
                               default_path=DEFAULT_PATH) from None
    if body.every_hours is not None and 0 < body.every_hours < 1:
        raise InvalidInput("every_hours", "Back up at most once an hour: give 1 or more "
                           "hours, or 0 to turn the schedule off.")
    now = p.clock.now()
    with p.db.write() as s:
        inst = get_instance(s, actor, instance_id, lock=True)
        pol = s.get(BackupPolicy, inst.id)
        if pol is None:
            pol = _defaults(inst)
            s.add(pol)
        if body.path is not None:
            pol.path = body.path
        if body.every_hours is not None:
            pol.every_hours = body.every_hours or None
        if body.at_lease_end is not None:
            pol.at_lease_end = body.at_lease_end
        if body.max_mbps is not None:
            pol.max_mbps = body.max_mbps or None
        pol.updated_at, pol.updated_by = now, by(actor)
        s.flush()
        every = f"every {pol.every_hours:g} h" if pol.every_hours else "no schedule"
        end = "on" if pol.at_lease_end else "off (opted out)"
        note(s, now, inst.id, "backup_policy", phrase("backups of {path}: {every}; when the "
             "lease lapses: {end}", path=pol.path, every=every, end=end), actor=by(actor))
        return _view(s, pol)


# --- a lapsed lease (called by the lease sweep, which holds the instance and the lease) ----

def _queue_for_lease(s: Session, p: Stored, inst: Instance, lease: Lease, trigger: str,
                     now: datetime) -> bool:
    pol = policy_of(s, inst)
    if not pol.at_lease_end or p.object_store() is None or inst.kind == "container":
        return False
    node = backups.server_for_run(s, inst)
    if isinstance(node, Phrase):
        note(s, now, inst.id, "backup_skipped", phrase("no backup as the lease lapses: {node}",
        node=node),
             actor=SWEEP_LEASES)
        return False
    assert lease.grace_until is not None
    backups.queue_run(s, p, inst.id, inst.tenant_id, node, backups.Run(
        "backup", pol.path, trigger, SWEEP_LEASES, max_mbps=pol.max_mbps,
        retry_until=lease.grace_until))
    return True


def at_grace(s: Session, p: Stored, inst: Instance, lease: Lease, now: datetime) -> None:
    """The backup taken as the lease enters grace (the tenant may still renew)."""
    _queue_for_lease(s, p, inst, lease, backups.AT_GRACE, now)


def final_due(s: Session, p: Stored, inst: Instance, lease: Lease, now: datetime) -> bool:
    """The last backup before the erase queued, once, when the end of grace draws near;
    True when it was queued now."""
    if lease.grace_until is None:
        return False
    grace = lease.grace_until - lease.ends_at
    if now < lease.grace_until - min(FINAL_LEAD, grace / 2):
        return False
    if backups.runs_for(s, inst.id, backups.BEFORE_ERASE):
        return False
    if s.scalar(select(Backup.id).where(
            Backup.instance_id == inst.id, Backup.trigger == backups.AT_GRACE,
            Backup.status.in_((BackupStatus.QUEUED.value, BackupStatus.RUNNING.value)))):
        return False  # the first is still being tried: it is the last one
    return _queue_for_lease(s, p, inst, lease, backups.BEFORE_ERASE, now)


def erase_waits(s: Session, inst: Instance, lease: Lease, now: datetime) -> bool:
    """True while the erase should wait for a lease-end backup still queued or running
    (at most ERASE_WAITS past the end of grace)."""
    if lease.grace_until is None or now >= lease.grace_until + ERASE_WAITS:
        return False
    return s.scalar(select(Backup.id).where(
        Backup.instance_id == inst.id, Backup.trigger.in_(backups.LEASE_END),
        Backup.status.in_((BackupStatus.QUEUED.value, BackupStatus.RUNNING.value)))
        .limit(1)) is not None


# --- the schedule (a periodic of the worker) ----------------------------------------------

def run_schedules(p: Stored, limit: int = 100) -> int:
    """Scheduled backups that are due queued (one per instance, none while another run of
    it is under way); returns how many were queued."""
    if p.object_store() is None:
        return 0
    now = p.clock.now()
    scheduled = select(BackupPolicy.instance_id).where(BackupPolicy.every_hours.is_not(None))
    last = (select(Backup.instance_id, func.max(Backup.requested_at).label("at"))
            .where(Backup.trigger == backups.SCHEDULED,  # of scheduled instances only
                   Backup.instance_id.in_(scheduled))
            .group_by(Backup.instance_id).subquery())
    with p.db.read() as s:
        rows = s.execute(select(BackupPolicy, last.c.at)
                         .join(Instance, Instance.id == BackupPolicy.instance_id)
                         .outerjoin(last, last.c.instance_id == BackupPolicy.instance_id)
                         .where(BackupPolicy.every_hours.is_not(None),
                                Instance.status == InstanceStatus.READY.value)).all()
        due = [pol.instance_id for pol, at in rows if pol.every_hours and (
            at is None or at + timedelta(hours=pol.every_hours) <= now)][:limit]
    queued = 0
    for instance_id in due:
        with p.db.write() as s:
            inst = s.get(Instance, instance_id, with_for_update=True)
            pol = s.get(BackupPolicy, instance_id)
            if inst is None or pol is None or not pol.every_hours:
                continue
            at = s.scalar(select(func.max(Backup.requested_at)).where(
                Backup.instance_id == instance_id, Backup.trigger == backups.SCHEDULED))
            if at is not None and at + timedelta(hours=pol.every_hours) > now:
                continue  # another worker queued it meanwhile
            node = backups.server_for_run(s, inst)
            if isinstance(node, Phrase) or over_quota(s, p, inst.tenant_id):
                continue  # busy, away, or the bucket full (its admins were told)
            backups.queue_run(s, p, inst.id, inst.tenant_id, node, backups.Run(
                "backup", pol.path, backups.SCHEDULED, SCHEDULER, max_mbps=pol.max_mbps))
            queued += 1
    if queued:
        p.wake()
    return queued
