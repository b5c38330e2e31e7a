"""A swap's data copy: the faulty server's data disk onto the spare while the faulty one
still serves the tenant.

Straight from agent to agent (the default): at the swap, the faulty server's agent is told
to send (it lists and checksums the directory, then serves it, encrypted, on
`GPULEASE_COPY_PORT`); once the spare is delivered and accepted, its agent is told to
receive from the faulty server's address with the same one-time key (agent/copy.py). The
two are runs of the instance (services/storage/backups.py drives them, with progress), so
`gpulease backups INSTANCE` shows them. Through the bucket (`via="bucket"`): a backup of
the faulty server at the swap, a restore onto the spare once accepted; the snapshot stays
in the tenant's bucket.

Either way a copy that fails is said on the instance's history and the swap goes on with
the spare's empty data disk; the faulty server is erased only after."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from gpulease.agent.copy import new_key
from gpulease.db.ops_tables import Backup
from gpulease.db.tables import Instance, Node
from gpulease.domain.phrases import phrase
from gpulease.domain.states import BackupStatus
from gpulease.lifecycle.history import WORKER, note
from gpulease.ports.agent import ReceivePayload, SendPayload
from gpulease.ports.records import Driven, Sealed
from gpulease.security import new_id
from gpulease.services.storage.backups import (
    SWAP_COPY,
    Run,
    finish_failed,
    queue_run,
    runs_for,
)

UNDER_WAY = (BackupStatus.QUEUED.value, BackupStatus.RUNNING.value)
FIRST_HALVES = ("send", "backup")  # on the faulty server; a receive or restore on the spare


@dataclass(frozen=True)
class DiskCopy:
    """Which folder of the faulty server's data disk goes to the spare, and how: straight
    between their agents, or through the tenant's bucket."""

    path: str
    via: str = "agents"


def queue_copy(s: Session, p: Sealed, inst: Instance, old: Node, copy: DiskCopy,
               actor: str) -> None:
    """At the swap: the faulty server starts its side (a send, or a backup)."""
    path = copy.path
    if copy.via == "bucket":
        queue_run(s, p, inst.id, inst.tenant_id, old, Run("backup", path, SWAP_COPY, actor))
        return
    run_id = new_id("bk")
    queue_run(s, p, inst.id, inst.tenant_id, old, Run(
        "send", path, SWAP_COPY, actor, run_id=run_id, payload=SendPayload(
            copy_id=run_id, path=path, port=p.settings.copy_port, key=new_key(),
            wait_s=p.settings.copy_wait_s)))


def this_swaps_runs(runs: Sequence[Backup], outgoing: Mapping[str, datetime], spare_id: str
                    ) -> dict[str, Backup]:
    """The two halves of this swap's copy, by kind, among every copy run of the instance
    (oldest first): the first half queued on the server going out since its swap began
    (`outgoing`: its id and that moment), the second on this spare after the first. An
    earlier swap's runs are never paired with this one's."""
    first = [r for r in runs if r.kind in FIRST_HALVES and r.node_id in outgoing
             and r.requested_at >= outgoing[r.node_id]]
    if not first:
        return {}
    head = first[-1]
    second = [r for r in runs if r.kind not in FIRST_HALVES and r.node_id == spare_id
              and r.requested_at >= head.requested_at]
    return {head.kind: head} | ({second[-1].kind: second[-1]} if second else {})


def swap_copy_step(s: Session, p: Driven, inst: Instance, spare: Node,
                   outgoing: Mapping[str, datetime], now: datetime) -> bool:
    """Once the spare is accepted: True while the copy runs (its second half queued here);
    False when it is done or was not asked for. `outgoing`: the servers this swap takes
    out, each with the moment its swap began."""
    instance_id, tenant = inst.id, inst.tenant_id
    kinds = this_swaps_runs(runs_for(s, instance_id, SWAP_COPY), outgoing, spare.id)
    if not kinds:
        return False
    if "send" in kinds:
        return _direct(s, p, inst, spare, kinds, now)
    if any(r.status in UNDER_WAY for r in kinds.values()):
        return True
    backup, restore = kinds.get("backup"), kinds.get("restore")
    if restore is None and backup is not None:
        if backup.status == BackupStatus.SUCCEEDED.value and backup.snapshot_id:
            queue_run(s, p, instance_id, tenant, spare, Run(
                "restore", backup.path, SWAP_COPY, WORKER, snapshot_id=backup.snapshot_id))
            return True
        _not_copied(s, now, instance_id, backup.status_reason or "")
    elif restore is not None and restore.status != BackupStatus.SUCCEEDED.value:
        note(s, now, instance_id, "copy_failed", phrase(
            "the copy (snapshot {snapshot}, kept in your bucket) could not be restored onto "
            "{spare}: {reason}", snapshot=restore.snapshot_id, spare=spare.name,
            reason=restore.status_reason), actor=WORKER)
    return False


def _not_copied(s: Session, now: datetime, instance_id: str, reason: str) -> None:
    note(s, now, instance_id, "copy_failed", phrase(
        "the data disk could not be copied from the faulty server ({reason}); the new server "
        "starts with an empty data disk", reason=reason), actor=WORKER)


def _direct(s: Session, p: Driven, inst: Instance, spare: Node, kinds: dict[str, Backup],
            now: datetime) -> bool:
    """A copy between the agents: the spare's receive queued once the faulty server's send
    serves; True while either is under way."""
    instance_id, tenant = inst.id, inst.tenant_id
    send, receive = kinds["send"], kinds.get("receive")
    if receive is None:
        source = s.get(Node, send.node_id)
        if send.status in UNDER_WAY and source is not None and source.ip_address:
            assert send.payload_enc is not None
            sent = SendPayload.model_validate_json(p.box.open(send.payload_enc))
            queue_run(s, p, instance_id, tenant, spare, Run(
                "receive", send.path, SWAP_COPY, WORKER,
                payload=ReceivePayload(**sent.model_dump(), source=source.ip_address)))
            return True
        if send.status in UNDER_WAY:  # no address to fetch from: the swap goes on
            finish_failed(s, p, send, "the faulty server has no address the spare can "
                          "reach", now, tell=False)
        _not_copied(s, now, instance_id, send.status_reason or "no address")
        return False
    if receive.status in UNDER_WAY:
        return True
    if receive.status != BackupStatus.SUCCEEDED.value and send.status in UNDER_WAY:
        finish_failed(s, p, send, f"the spare could not fetch the copy: "
                      f"{receive.status_reason}", now, tell=False)  # told once, by receive
        return False
    return send.status in UNDER_WAY  # it stops serving once the spare said it is done
