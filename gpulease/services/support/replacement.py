"""Whole-machine replacement: a rented server with a fault is swapped for a spare of the
same offer (on the same fabric for a cluster member). The spare goes through the normal
deploy pipeline and its acceptance gate while the instance stays delivered (its stage
`replacing`); the faulty node leaves for repair through an erase of the tenant's disks
(then repair); the tenant gets a new root password, shown once. When no spare is
free, the ticket says so and nothing changes.

With `copy_data`, the faulty server keeps serving while the spare deploys and its data disk
is copied onto the spare once accepted, straight from agent to agent or through the
tenant's bucket (services/support/swap_copy.py); only then is the faulty server erased
(worker/pipelines/instance_steps.py). A disk that cannot be read is said on the instance's history,
and the swap goes on without the copy."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpulease.agent.backup import on_data_disk
from gpulease.db.ops_tables import Ticket
from gpulease.db.tables import Instance, Node
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import Conflict, InvalidInput, OutOfStock
from gpulease.domain.phrases import Phrase, phrase
from gpulease.domain.states import (
    INSTANCE_STAGE,
    NODE,
    NODE_STAGE,
    InstanceStage,
    InstanceStatus,
    NodeStatus,
    TicketStatus,
)
from gpulease.domain.tickets import SWAPPED_OUT
from gpulease.lifecycle.binding import fence
from gpulease.lifecycle.history import by, note
from gpulease.lifecycle.writer import Move, transition
from gpulease.platform import Platform
from gpulease.ports.records import Driven
from gpulease.schemas.tickets import TicketDetail
from gpulease.security import new_root_password
from gpulease.services.orders.placement import claim_replacement
from gpulease.services.storage import buckets as storage
from gpulease.services.support.repairs import begin
from gpulease.services.support.swap_copy import DiskCopy, queue_copy
from gpulease.services.support.tickets import Said, entry, notice, operator_responds, show_ticket

COPY_VIA = ("agents", "bucket")


@dataclass(frozen=True)
class Swap:
    """How a swap goes: a note for the ticket and the tenant, and whether the faulty
    server's data disk (`path` on it) is copied to the spare first, `via` its agents or
    the tenant's bucket."""

    note: str | None = None
    copy_data: bool = False
    path: str = "/data"
    via: str = "agents"


@dataclass(frozen=True)
class Sides:
    """The two servers of a swap, with the ticket and the instance it is for."""

    ticket: Ticket
    inst: Instance
    old: Node
    spare: Node


def swap(p: Platform, actor: Principal, ticket_id: str, how: Swap = Swap()) -> TicketDetail:
    actor.require_operator()
    copy_data, path, via = how.copy_data, how.path, how.via
    if copy_data:
        try:
            on_data_disk(Path("/"), path)
        except ValueError:
            raise InvalidInput("path", "{path!r} is not on the data disk: name /data or a "
                               "directory under it.", path=path) from None
        if via not in COPY_VIA:
            raise InvalidInput("via", "Copy through {via!r}?", list(COPY_VIA), via=via)
        if via == "bucket":
            storage.configured(p)
    now = p.clock.now()
    who = by(actor)
    no_spare: Phrase | None = None
    with p.db.write() as s:
        ticket = s.get(Ticket, ticket_id, with_for_update=True)
        if ticket is None:
            raise Conflict("No ticket {ticket_id}.", ticket_id=ticket_id)
        if ticket.status == TicketStatus.RESOLVED.value or not ticket.instance_id or (
                not ticket.node_id):
            raise Conflict("Ticket {ticket_id} names no rented node to replace (or is "
                           "resolved).", ticket_id=ticket_id)
        inst = s.scalar(select(Instance).where(Instance.id == ticket.instance_id)
                        .with_for_update())  # the instance before its nodes, as always
        old = s.scalar(select(Node).where(Node.id == ticket.node_id).with_for_update())
        if inst is None or old is None or old.instance_id != inst.id or (
                old.status != NodeStatus.ACTIVE.value):
            raise Conflict("Node {value} no longer serves "
                           "instance {served}; nothing to replace.",
                           value=old.name if old else ticket.node_id,
                           served=ticket.instance_id)
        if inst.status != InstanceStatus.READY.value or inst.stage != InstanceStage.READY:
            raise Conflict("Instance {instance} is {status} ({stage}); a node is "
                           "swapped only on a delivered instance, one at a time.",
                           instance=inst.id, status=inst.status, stage=inst.stage)
        if copy_data and inst.node_count != 1:
            raise Conflict("The data disk is copied on a single-server instance; a cluster "
                           "member is swapped without it (its data belongs on shared "
                           "storage or in the bucket).")
        spare = claim_replacement(s, now, inst, old, actor=who)
        if spare is None:
            no_spare = phrase(
                "No spare {sku} server is free in {region}{where}: the node stays as it is. "
                "The tenant may release the instance with the unused time refunded in full "
                "(the rest of this period and every later one, no fee), or keep it until "
                "the card is repaired.", sku=inst.sku, region=inst.region,
                where=phrase(" on this cluster's fabric") if inst.node_count > 1 else "")
        else:
            _swap(s, p, actor, Sides(ticket, inst, old, spare), how)
    if no_spare:
        with p.db.write() as s:  # said on the ticket, nothing else changed
            ticket = s.get(Ticket, ticket_id, with_for_update=True)
            assert ticket is not None
            now = p.clock.now()
            ticket.refund_unused_at = ticket.refund_unused_at or now
            entry(s, ticket, now, Said("note", who, str(no_spare)))
            if ticket.tenant_id:
                notice(s, ticket.tenant_id, "ticket_updated", ticket, no_spare, now)
        raise OutOfStock(no_spare)
    p.wake()
    return show_ticket(p, actor, ticket_id)


def _swap(s: Session, p: Driven, actor: Principal, sides: Sides, how: Swap) -> None:
    now, who = p.clock.now(), by(actor)
    ticket, inst, old, spare = sides.ticket, sides.inst, sides.old, sides.spare
    copy_path, note_text = (how.path if how.copy_data else None), how.note
    # the spare: deployed and accepted as at delivery
    transition(s, p, spare, NODE, "deploy", Move(now, actor=who))
    transition(s, p, spare, NODE_STAGE, "deploy", Move(now, actor=who,
                                                       timeout_s=p.settings.stage_timeout_s))
    spare.next_attempt_at = now
    # the faulty node: its disks erased (the tenant's data), then out for repair
    old.drain_requested_at = now
    fence(old)
    reason = f"{SWAPPED_OUT} (ticket {ticket.id}): erase, then repair"
    begin(s, old, ticket.id, f"{ticket.summary} (ticket {ticket.id})", now, who)
    if copy_path is None:
        transition(s, p, old, NODE, "clean", Move(now, actor=who, reason=reason))
        transition(s, p, old, NODE_STAGE, "clean", Move(now, actor=who,
                                                        timeout_s=p.settings.stage_timeout_s))
        old.next_attempt_at = now
    else:  # it serves on while its disk is copied; erased once the copy is on the spare
        queue_copy(s, p, inst, old, DiskCopy(copy_path, how.via), who)
    transition(s, p, inst, INSTANCE_STAGE, "replace", Move(now, actor=who,
                                                           timeout_s=p.settings.stage_timeout_s))
    inst.next_attempt_at = now
    inst.root_password_enc = p.box.seal(new_root_password())  # shown once, again
    inst.credentials_revealed_at = None
    text = (f"node {old.name} is being replaced by {spare.name} (ticket {ticket.id})"
            + (f"; its data disk ({copy_path}) is copied to the new server first"
               if copy_path else "; its disks are not copied: the new server starts "
               "empty, and the faulty one is erased")
            + (f": {note_text}" if note_text else ""))
    note(s, now, inst.id, "replacing", text, actor=who)
    entry(s, ticket, now, Said("note", who, text + "; new root password once delivered"))
    operator_responds(s, p, ticket, actor, now)
