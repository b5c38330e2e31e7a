"""The card path of a repair: a rented server with a faulty part (a GPU, a DIMM, a PSU) is
repaired without moving its tenant. An operator proposes a window on the fault's ticket;
the tenant accepts it (or declines: then a swap, or another window); when it begins the
node goes out for repair still bound to its instance, disks kept, and powered off; once the
parts are recorded (`gpulease node repaired`) it boots the tenant's own system again and
passes the acceptance suite, burn-in included, before the tenant has it back
(worker/pipelines/nodes.py drives that return; a failure sends it back to repair)."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpulease.db.ops_tables import Ticket
from gpulease.db.tables import Instance, Node
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import Conflict, Forbidden, InvalidInput, NotFound
from gpulease.domain.phrases import phrase
from gpulease.domain.states import (
    INSTANCE_STAGE,
    NODE,
    InstanceStage,
    InstanceStatus,
    NodeStatus,
    TicketStatus,
)
from gpulease.lifecycle.binding import fence
from gpulease.lifecycle.history import by, note
from gpulease.lifecycle.writer import Move, transition
from gpulease.ports.records import Moves, Priced
from gpulease.schemas.tickets import RepairWindowAnswer, RepairWindowProposal, TicketDetail
from gpulease.services.platform.notify import OPERATORS
from gpulease.services.support.repairs import begin
from gpulease.services.support.tickets import Said, entry, notice, operator_responds, show_ticket

WINDOWS = "sweep:repair-windows"
LATE_START = timedelta(minutes=5)  # a window may start this far in the past (clock skew)


def _when(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M %Z").strip()


def _served_node(s: Session, ticket: Ticket) -> tuple[Instance, Node]:
    """The ticket's instance and node, locked in that order, while the node still serves
    it as delivered; else a 409 that says why."""
    inst = s.scalar(select(Instance).where(Instance.id == ticket.instance_id)
                    .with_for_update())
    node = s.scalar(select(Node).where(Node.id == ticket.node_id).with_for_update())
    if inst is None or node is None or node.instance_id != inst.id or (
            node.status != NodeStatus.ACTIVE.value):
        raise Conflict("Node {value} no longer serves "
                       "instance {served}; nothing to repair in place.",
                       value=node.name if node else ticket.node_id,
                       served=ticket.instance_id)
    if inst.status != InstanceStatus.READY.value or inst.stage != InstanceStage.READY:
        raise Conflict("Instance {instance} is {status} ({stage}); a card repair "
                       "is planned on a delivered instance, one at a time.",
                       instance=inst.id, status=inst.status, stage=inst.stage)
    return inst, node


def propose_window(p: Moves, actor: Principal, ticket_id: str,
                   body: RepairWindowProposal) -> TicketDetail:
    """An operator proposes when the node goes out; its tenant is asked to accept."""
    actor.require_operator()
    if body.start.tzinfo is None:
        raise InvalidInput("start", "Give the window's start with its zone, e.g. "
                           "2026-12-02T02:00+08:00.")
    now = p.clock.now()
    if body.start < now - LATE_START:
        raise InvalidInput("start", "The window starts in the past ({start}); "
                           "propose a start from now on.", start=_when(body.start))
    end = body.start + timedelta(hours=body.hours)
    with p.db.write() as s:
        t = s.get(Ticket, ticket_id, with_for_update=True)
        if t is None:
            raise NotFound("No ticket {ticket_id}; `gpulease tickets` lists them.",
                           ticket_id=ticket_id)
        if t.status == TicketStatus.RESOLVED.value or not t.instance_id or not t.node_id:
            raise Conflict("Ticket {ticket_id} names no rented node to repair (or is "
                           "resolved).", ticket_id=ticket_id)
        if t.repair_window_begun_at is not None:
            raise Conflict("The node of ticket {ticket_id} is out for repair already.",
                           ticket_id=ticket_id)
        _, node = _served_node(s, t)
        t.repair_window_start, t.repair_window_end = body.start, end
        t.repair_window_accepted_at = None
        proposal = phrase(
            "card repair of {node} proposed for {start} to {end}: the server is powered off "
            "and repaired in place, your disks are kept, and it comes back burned in and "
            "accepted{note}; accept or decline it: `gpulease ticket window {ticket} "
            "--accept` (or --decline)", node=node.name, start=_when(body.start),
            end=_when(end), note=f". {body.note}" if body.note else "", ticket=t.id)
        entry(s, t, now, Said("note", by(actor), str(proposal).partition("; accept or decline")[0]))
        operator_responds(s, p, t, actor, now)
        if t.tenant_id:
            notice(s, t.tenant_id, "ticket_updated", t, proposal, now)
    return show_ticket(p, actor, ticket_id)


def answer_window(p: Priced, actor: Principal, ticket_id: str, body: RepairWindowAnswer
                  ) -> TicketDetail:
    """The tenant accepts the proposed window (the node goes out at its start) or
    declines it (the operators propose another, or swap the server)."""
    if actor.is_operator:
        raise Forbidden("The tenant accepts or declines a repair window; an operator "
                        "proposes one (`gpulease ticket repair`).")
    tenant = actor.require_order_rights()
    now = p.clock.now()
    with p.db.write() as s:
        t = s.scalar(select(Ticket).where(Ticket.id == ticket_id, Ticket.tenant_id == tenant)
                     .with_for_update())
        if t is None:
            raise NotFound("No ticket {ticket_id}; `gpulease tickets` lists yours.",
                           ticket_id=ticket_id)
        if t.repair_window_start is None or t.repair_window_end is None:
            raise Conflict("Ticket {ticket_id} has no repair window to answer.",
                           ticket_id=ticket_id)
        if t.repair_window_begun_at is not None:
            raise Conflict("The repair of ticket {ticket_id} has begun already.",
                           ticket_id=ticket_id)
        if now >= t.repair_window_end:
            raise Conflict("The proposed window ended at {ended}; "
                           "ask the operators for another on the ticket.",
                           ended=_when(t.repair_window_end))
        window = f"{_when(t.repair_window_start)} to {_when(t.repair_window_end)}"
        if body.accept:
            t.repair_window_accepted_at = now
            text = f"repair window {window} accepted"
        else:
            t.repair_window_start = t.repair_window_end = None
            t.repair_window_accepted_at = None
            text = f"repair window {window} declined"
        text += f": {body.note}" if body.note else ""
        entry(s, t, now, Said("comment", by(actor), text))
        notice(s, OPERATORS, "ops_window", t, text, now)
    return show_ticket(p, actor, ticket_id)


def begin_due_windows(p: Moves, limit: int = 20) -> int:
    """Accepted windows whose start has come: the node goes out for repair (still its
    tenant's, disks kept), its instance shows `in_repair`, the server is powered off
    (worker/jobs/fleet/safe_off.py). A window whose node no longer serves its instance lapses, said
    on the ticket. Returns how many began."""
    now = p.clock.now()
    with p.db.read() as s:
        due = list(s.scalars(select(Ticket.id).where(
            Ticket.repair_window_accepted_at.is_not(None),
            Ticket.repair_window_begun_at.is_(None),
            Ticket.repair_window_start <= now,
            Ticket.status != TicketStatus.RESOLVED.value).limit(limit)))
    begun = 0
    for ticket_id in due:
        with p.db.write() as s:
            t = s.get(Ticket, ticket_id, with_for_update=True)
            if t is None or t.repair_window_begun_at is not None or (
                    t.repair_window_accepted_at is None):
                continue
            try:
                inst, node = _served_node(s, t)
            except Conflict as exc:
                t.repair_window_start = t.repair_window_end = None
                t.repair_window_accepted_at = None
                entry(s, t, now, Said("note", WINDOWS,
                                      phrase("repair window lapsed: {exc}", exc=exc)))
                continue
            repair = begin(s, node, t.id, f"card repair: {t.summary} (ticket {t.id})", now,
                           WINDOWS)
            repair.instance_id = inst.id
            fence(node)
            node.safe_off_due = True  # powered off for the work (media out, no override)
            transition(s, p, node, NODE, "card_out", Move(now, actor=WINDOWS,
                       reason=phrase("card repair in the window its tenant accepted "
                                     "(ticket {ticket})", ticket=t.id)))
            transition(s, p, inst, INSTANCE_STAGE, "card_repair", Move(now, actor=WINDOWS,
                       reason=phrase("node {node} out for repair (ticket {ticket})",
                                     node=node.name, ticket=t.id)))
            t.repair_window_begun_at = now
            text = phrase("node {node} is out for repair now (window until {end}); it "
                          "returns burned in and accepted", node=node.name,
                          end=_when(t.repair_window_end or now))
            note(s, now, inst.id, "in_repair", str(text), actor=WINDOWS)
            entry(s, t, now, Said("note", WINDOWS, str(text)))
            if t.tenant_id:
                notice(s, t.tenant_id, "ticket_updated", t, text, now)
            begun += 1
    if begun:
        p.wake()
    return begun
