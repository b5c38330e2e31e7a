"""Backups and restores the platform runs on a rented server: a directory of its data disk
to the tenant's bucket as a snapshot, or a snapshot back onto it. The node's agent moves
the bytes (agent/backup.py) with a key minted for the run, scoped to the tenant's bucket
and deleted when the run ends; the platform keeps the run's record and figures. The
worker's `backups` periodic drives them (domain/states.BACKUP): queued → running →
succeeded, or failed after its retries (the tenant told)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpulease.agent.backup import DATA_MOUNT, on_data_disk
from gpulease.db.claims import due_now
from gpulease.db.ops_tables import Backup
from gpulease.db.repositories import bound_nodes, get_instance
from gpulease.db.tables import Instance, Node
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import Conflict, InvalidInput, NotFound
from gpulease.domain.phrases import Phrase, phrase
from gpulease.domain.states import (
    BACKUP,
    BackupStatus,
    InstanceStage,
    InstanceStatus,
    NodeStatus,
)
from gpulease.lifecycle.history import WORKER, by, note
from gpulease.lifecycle.writer import Move, initial, transition
from gpulease.ports.agent import (
    BackupPayload,
    ReceivePayload,
    RestorePayload,
    SendPayload,
    TransferPayload,
)
from gpulease.ports.records import Moves, Records, Sealed, Stored
from gpulease.schemas import Page
from gpulease.schemas.fleet import BackupRequest, BackupView, RestoreRequest
from gpulease.security import new_id
from gpulease.services.platform import egress
from gpulease.services.platform.outbox import Notice, post_notice
from gpulease.services.storage import buckets as storage
from gpulease.services.storage.meter import over_quota

log = logging.getLogger("gpulease.backups")
ON_DEMAND = "on_demand"
MAX_ATTEMPTS = 3
RETRY_AFTER_S = 60.0
PREFIX = "backups"  # in the tenant's bucket: backups/<instance>/
# The trigger of a swap's copy: straight from the faulty server's agent (send) to the
# spare's (receive), services/support/swap_copy.py; or through the bucket, a backup then a restore.
SWAP_COPY = "swap_copy"
COPY_KINDS = ("send", "receive")  # their payload (with its shared key) is sealed when queued
PAYLOADS: dict[str, type[TransferPayload]] = {
    "backup": BackupPayload, "restore": RestorePayload, "send": SendPayload,
    "receive": ReceivePayload}
SCHEDULED = "schedule"  # the tenant's schedule (services/storage/backup_policy.py)
AT_GRACE = "lease_grace"  # a lapsed lease entered grace
BEFORE_ERASE = "lease_final"  # the last one before a lapsed lease's erase
LEASE_END = (AT_GRACE, BEFORE_ERASE)
AT_ORDER = "order"  # a snapshot the order named, restored at delivery
LONGEST_PAUSE_S = 1800.0  # between the tries of a run with a deadline


def prefix_of(instance_id: str) -> str:
    return f"{PREFIX}/{instance_id}"


def _view(b: Backup, node_name: str) -> BackupView:
    return BackupView(id=b.id, instance_id=b.instance_id, node=node_name, kind=b.kind,
                      trigger=b.trigger, path=b.path, status=b.status,
                      status_reason=b.status_reason, snapshot_id=b.snapshot_id,
                      files=b.files, bytes_total=b.bytes_total, bytes_moved=b.bytes_moved,
                      seconds=b.seconds, attempts=b.attempts, requested_at=b.requested_at,
                      finished_at=b.finished_at, target=b.target)


def request(p: Stored, actor: Principal, instance_id: str,
            body: BackupRequest | RestoreRequest, trigger: str = ON_DEMAND) -> BackupView:
    """A backup (or, given a snapshot, a restore) of a delivered bare-metal instance's data
    disk, queued for the worker; one run per instance at a time."""
    tenant = actor.require_order_rights()
    try:
        on_data_disk(Path("/"), body.path)
    except ValueError:
        raise InvalidInput("path", "{body_path!r} is not on the server's data disk: name a "
                           "directory under {data_mount}/, e.g. {data_mount}/checkpoints.",
                           body_path=body.path, data_mount=DATA_MOUNT) from None
    with p.db.write() as s:
        inst = get_instance(s, actor, instance_id, lock=True)
        own = body.target
        if own is not None:  # the tenant's own S3: a public address only
            egress.check(p.settings, own.endpoint, "target.endpoint")
        else:
            storage.configured(p)
        node = server_for_run(s, inst)
        if isinstance(node, Phrase):
            raise Conflict(node)
        full = None if isinstance(body, RestoreRequest) or own else over_quota(s, p, tenant)
        if full:
            raise Conflict(full)
        if isinstance(body, RestoreRequest) and own is not None:  # theirs: the agent checks
            row = queue_run(s, p, inst.id, tenant, node, Run(
                "restore", body.path, trigger, by(actor), snapshot_id=body.snapshot_id,
                max_mbps=body.max_mbps))
        elif isinstance(body, RestoreRequest):
            source = find_snapshot(s, tenant, body.snapshot_id, "snapshot_id")
            row = queue_run(s, p, inst.id, tenant, node, Run(
                "restore", body.path, trigger, by(actor), snapshot_id=source.snapshot_id,
                source_instance_id=source.instance_id, max_mbps=body.max_mbps))
        else:
            row = queue_run(s, p, inst.id, tenant, node, Run(
                "backup", body.path, trigger, by(actor), max_mbps=body.max_mbps))
        if own is not None:
            row.target = f"{own.endpoint.rstrip('/')}/{own.bucket}"[:600]
            row.target_enc = p.box.seal(own.model_dump_json())
        view = _view(row, node.name)
    p.wake()
    return view


def find_snapshot(s: Session, tenant: str, ref: str, field: str) -> Backup:
    """The tenant's backup that made a snapshot: `SNAPSHOT`, or `INSTANCE/SNAPSHOT` when
    the same name was made of several instances."""
    source, _, snapshot = ref.rpartition("/")
    q = select(Backup).where(Backup.tenant_id == tenant, Backup.kind == "backup",
                             Backup.status == BackupStatus.SUCCEEDED.value,
                             Backup.snapshot_id == snapshot)
    if source:
        q = q.where(Backup.instance_id == source)
    found = list(s.scalars(q.order_by(Backup.finished_at.desc()).limit(10)))
    if not found:
        raise NotFound("No snapshot {ref} in your account; `gpulease backups INSTANCE` "
                       "lists the snapshots taken of an instance.", ref=ref)
    if len({b.instance_id for b in found}) > 1:
        taken = ", ".join(sorted({f"{b.instance_id}/{snapshot}" for b in found}))
        raise InvalidInput(field, "Snapshot {snapshot} was taken of several instances; "
                           "name one: {taken}.", snapshot=snapshot, taken=taken)
    return found[0]


def restore_at_delivery(s: Session, p: Sealed, inst: Instance) -> None:
    """The snapshot the order named, queued for the delivered server (the caller holds the
    instance); the tenant follows it with `gpulease backups`."""
    if not inst.restore_from:
        return
    source, _, snapshot = inst.restore_from.partition("/")
    taken = s.scalar(select(Backup).where(Backup.instance_id == source,
                                          Backup.snapshot_id == snapshot,
                                          Backup.kind == "backup"))
    node = server_for_run(s, inst)
    if isinstance(node, Phrase) or taken is None:
        why = node if isinstance(node, Phrase) else "its record is gone"
        note(s, p.clock.now(), inst.id, "restore_failed", phrase("snapshot {snapshot} "
             "could not be restored at delivery: {why}", snapshot=inst.restore_from,
             why=why), actor=WORKER)
        return
    queue_run(s, p, inst.id, inst.tenant_id, node, Run(
        "restore", taken.path, AT_ORDER, WORKER, snapshot_id=snapshot,
        source_instance_id=source))


def server_for_run(s: Session, inst: Instance) -> Node | Phrase:
    """The server a backup or restore of the instance runs on, or why none can now (the
    caller holds the instance)."""
    if inst.kind == "container":
        return phrase("Container instances keep no data disk of their own; save the "
                      "environment as an image instead.")
    if inst.status != InstanceStatus.READY.value:
        return phrase("Instance {instance} is {status}; backups and restores run on a "
                      "delivered server.", instance=inst.id, status=phrase(inst.status))
    if inst.stage != InstanceStage.READY:
        return phrase("Instance {instance} is {stage} (a server being replaced or "
                      "repaired); try again once it is back.", instance=inst.id,
                      stage=inst.stage)
    nodes = [n for n in bound_nodes(s, inst.id) if n.status == NodeStatus.ACTIVE.value]
    if not nodes:
        return phrase("Instance {instance} has no server up to run it on (in repair or "
                      "being replaced); try again once it is back.", instance=inst.id)
    busy = s.scalar(select(Backup.id).where(
        Backup.instance_id == inst.id,
        Backup.status.in_((BackupStatus.QUEUED.value, BackupStatus.RUNNING.value))))
    if busy:
        return phrase("Run {run} on instance {instance} is not finished yet; `gpulease "
                      "backups` shows it.", run=busy, instance=inst.id)
    return nodes[0]


@dataclass(frozen=True)
class Run:
    """A run to queue: its kind (backup, restore, send, receive) of which directory, why
    (`trigger`) and by whom; a restore's snapshot (of `source_instance_id` when another
    instance's), a bandwidth cap, a deadline its retries keep to, a chosen id, and a copy's
    payload (sealed on the row from the start)."""

    kind: str
    path: str
    trigger: str
    actor: str
    snapshot_id: str | None = None
    max_mbps: float | None = None
    retry_until: datetime | None = None
    source_instance_id: str | None = None
    run_id: str | None = None
    payload: SendPayload | None = None


def queue_run(s: Session, p: Sealed, instance_id: str, tenant: str, node: Node, run: Run
              ) -> Backup:
    """A run queued for the worker (the caller holds the instance)."""
    now = p.clock.now()
    row = Backup(id=run.run_id or new_id("bk"), tenant_id=tenant, instance_id=instance_id,
                 node_id=node.id, kind=run.kind, trigger=run.trigger, path=run.path,
                 snapshot_id=run.snapshot_id, max_mbps=run.max_mbps, attempts=0,
                 next_attempt_at=now, requested_by=run.actor, requested_at=now,
                 retry_until=run.retry_until, source_instance_id=run.source_instance_id,
                 payload_enc=None if run.payload is None else p.box.seal(
                     run.payload.model_dump_json()), **initial(Backup, BACKUP))
    s.add(row)
    s.flush()
    note(s, now, instance_id, f"{run.kind}_requested",
         phrase("{kind} of {path} on {node_name} requested", kind=run.kind, path=run.path,
         node_name=node.name), actor=run.actor)
    return row


def runs_for(s: Session, instance_id: str, trigger: str) -> list[Backup]:
    """The instance's runs of one trigger, oldest first."""
    return list(s.scalars(select(Backup).where(Backup.instance_id == instance_id,
                                               Backup.trigger == trigger)
                          .order_by(Backup.requested_at, Backup.id)))


def list_runs(p: Records, actor: Principal, instance_id: str, limit: int = 50,
              offset: int = 0, run_id: str | None = None) -> Page[BackupView]:
    """The instance's runs, newest first, a page at a time (or the one named)."""
    with p.db.read() as s:
        get_instance(s, actor, instance_id)
        q = (select(Backup, Node.name).join(Node, Node.id == Backup.node_id)
             .where(Backup.instance_id == instance_id))
        if run_id is not None:
            q = q.where(Backup.id == run_id)
        total = s.scalar(select(func.count()).select_from(q.subquery())) or 0
        rows = s.execute(q.order_by(Backup.requested_at.desc(), Backup.id.desc())
                         .limit(limit).offset(offset)).all()
        return Page(items=[_view(b, name) for b, name in rows], total=total, limit=limit,
                    offset=offset)


def show_run(p: Records, actor: Principal, instance_id: str, run_id: str) -> BackupView:
    found = list_runs(p, actor, instance_id, limit=1, run_id=run_id).items
    if not found:
        raise NotFound("No run {run_id} on instance {instance_id}; `gpulease backups "
                       "{instance_id}` lists them.", run_id=run_id, instance_id=instance_id)
    return found[0]


def finish_failed(s: Session, p: Moves, run: Backup, reason: str, now: datetime,
                  tell: bool = True) -> None:
    """The run failed for good: said on the instance's history and (`tell`) to the
    tenant's admins."""
    run.finished_at, run.next_attempt_at, run.payload_enc = now, None, None
    transition(s, p, run, BACKUP, "fail", Move(now, actor=WORKER, reason=reason[:1000]))
    facts = {"run": run.id, "path": run.path, "reason": reason[:1400]}
    text = (phrase("Backup {run} of {path} failed: {reason}", **facts) if run.kind == "backup"
            else phrase("The copy {run} of {path} to the new server failed: {reason}",
                        **facts) if run.kind in COPY_KINDS
            else phrase("Restore {run} of {path} failed: {reason}", **facts))
    kind = "copy_failed" if run.kind in COPY_KINDS else f"{run.kind}_failed"
    note(s, now, run.instance_id, kind, str(text), actor=WORKER)
    if tell:
        post_notice(s, Notice(run.tenant_id, kind, text, run.instance_id), now)
    due_now(s, Instance, run.instance_id, now)  # the instance looks again (a swap waits)

