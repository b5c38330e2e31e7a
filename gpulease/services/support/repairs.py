"""The repair loop: a node goes out for repair (from a ticket's swap, once its tenant's
disks are erased; by an operator; or for a card repair in a window its tenant accepted,
services/support/card_repairs.py), the parts replaced are recorded with their serials, and it
returns through an erase and a burn-in (the acceptance suite from the ramdisk) to the pool,
or, after a card repair, through a burn-in on its tenant's own system to that tenant. A
failed burn-in sends it back to repair with the report. Time to repair per node and
per offer."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpulease.db.ops_tables import Repair, Ticket
from gpulease.db.tables import Node
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import Conflict, InvalidInput
from gpulease.domain.phrases import phrase
from gpulease.domain.states import NODE, NODE_STAGE, NodeStatus
from gpulease.lifecycle.binding import fence
from gpulease.lifecycle.history import WORKER, by
from gpulease.lifecycle.writer import Move, transition
from gpulease.ports.records import Driven, Moves, Records
from gpulease.schemas import Page
from gpulease.schemas.fleet import RepairView
from gpulease.services.fleet.inventory import load_node
from gpulease.services.fleet.node_changes import replace_simulated_parts
from gpulease.services.support.tickets import Said, Served, entry, served_again


def open_repair(s: Session, node_id: str) -> Repair | None:
    return s.scalar(select(Repair).where(Repair.node_id == node_id,
                                         Repair.finished_at.is_(None)))


def repair_for_fault(s: Session, node: Node, now: datetime) -> Repair | None:
    """A node cleaned after its instance with a fault a ticket still reports (no spare took
    its place, or its tenant released it first): its repair begins, on that ticket, which
    follows the node from now on; None when no fault is reported."""
    if node.fault_ticket_id is None:
        return None
    ticket = s.get(Ticket, node.fault_ticket_id, with_for_update=True)
    summary = ticket.summary if ticket is not None else "fault"
    repair = begin(s, node, node.fault_ticket_id,
                   f"ticket {node.fault_ticket_id}: {summary}", now, WORKER)
    if ticket is not None:
        entry(s, ticket, now, Said("note", WORKER, phrase(
            "node {node_name} was erased after its instance ended and is out for repair; "
            "this ticket follows it", node_name=node.name), internal=True))
    return repair


def burn_in_due(s: Session, node_id: str) -> Repair | None:
    """The node's latest repair when it is finished and its burn-in has not passed yet
    (None: no burn-in due; an earlier repair whose burn-in failed led to this one)."""
    latest = s.scalar(select(Repair).where(Repair.node_id == node_id)
                      .order_by(Repair.started_at.desc(), Repair.id.desc()).limit(1))
    if latest is None or latest.finished_at is None or latest.burned_in_at is not None:
        return None
    return latest


def burned_in(s: Session, p: Moves, node: Node, report_id: str | None, now: datetime
              ) -> None:
    """The burn-in after a repair passed: recorded; after a card repair the ticket is
    mitigated (its tenant has the node back)."""
    repair = burn_in_due(s, node.id)
    if repair is None:
        return
    repair.burned_in_at, repair.burn_in_report_id = now, report_id
    if repair.ticket_id is None:
        return
    ticket = s.get(Ticket, repair.ticket_id, with_for_update=True)
    if ticket is None:
        return
    evidence = f" (report {report_id})" if report_id else " (the offer sets no marks)"
    if repair.instance_id is not None:
        served_again(s, p, ticket, Served(phrase(
            "node {node} is back from repair, burned in and accepted (report {report})",
            node=node.name, report=report_id) if report_id else phrase(
            "node {node} is back from repair, burned in and accepted (the offer sets no "
            "marks)", node=node.name)), now, WORKER)
    else:
        entry(s, ticket, now, Said("note", WORKER, phrase("node {node_name} burned in and accepted "
              "after its repair{evidence}: back in the pool", node_name=node.name,
              evidence=evidence), internal=True))


def stays_for_erase(s: Session, node_id: str, now: datetime) -> None:
    """The instance of a node out for a card repair is released: the node no longer returns
    to it; once repaired it is erased (its certificates for that tenant) and burned in on its
    way to the pool."""
    repair = open_repair(s, node_id)
    if repair is not None and repair.instance_id is not None:
        repair.instance_id = None
        repair.reason = (repair.reason + "; its instance was released during the repair: "
                         "erased after it")[:2000]


def burn_in_failed(s: Session, node: Node, reason: str, now: datetime) -> Repair:
    """The burn-in after a repair failed: a new repair record (same ticket, same instance
    for a card repair); the node's move back to `repair` is the caller's."""
    last = burn_in_due(s, node.id)
    again = begin(s, node, last.ticket_id if last else None,
                  f"burn-in failed after repair: {reason}", now, WORKER)
    again.instance_id = last.instance_id if last else None
    if last is not None and last.ticket_id:
        ticket = s.get(Ticket, last.ticket_id, with_for_update=True)
        if ticket is not None:
            entry(s, ticket, now, Said("note", WORKER,
                  phrase("node {node_name} failed its burn-in after repair; back to repair: "
                  "{reason}", node_name=node.name, reason=reason),
                  internal=last.instance_id is None))
    return again


def begin(s: Session, node: Node, ticket_id: str | None, reason: str, now: datetime,
          actor: str) -> Repair:
    """A repair's record (the node's move to `repair` is the caller's)."""
    repair = Repair(node_id=node.id, offer=f"{node.sku}@{node.region}", ticket_id=ticket_id,
                    reason=reason[:2000], started_at=now, started_by=actor)
    s.add(repair)
    return repair


def send_to_repair(p: Moves, actor: Principal, node_id: str, reason: str | None,
                   ticket_id: str | None) -> RepairView:
    actor.require_operator()
    if not (reason or ticket_id):
        raise InvalidInput("reason", "Say why the node goes for repair, or name its ticket.")
    now = p.clock.now()
    with p.db.write() as s:
        node = load_node(s, node_id)
        if node.status not in (NodeStatus.AVAILABLE.value, NodeStatus.MAINTENANCE.value,
                               NodeStatus.FAILED.value) or node.instance_id is not None:
            raise Conflict("Node {node_name} is {node_status}; a node goes for repair free "
                           "(drain it, or swap it out of its instance from its ticket).",
                           node_name=node.name, node_status=node.status)
        if ticket_id and s.get(Ticket, ticket_id) is None:
            raise InvalidInput("ticket", "No ticket {ticket_id}.", ticket_id=ticket_id)
        why = reason or f"ticket {ticket_id}"
        repair = begin(s, node, ticket_id, why, now, by(actor))
        node.drain_requested_at = None
        fence(node)  # a claim that read it before now fails
        transition(s, p, node, NODE, "send_to_repair", Move(now, actor=by(actor),
                   reason=phrase("in repair: {why}", why=why)))
        s.flush()
        return _view(repair, node.name)


def finish(p: Driven, actor: Principal, node_id: str, parts: str) -> RepairView:
    """The parts are replaced: recorded, then the node is erased and returns to the pool."""
    actor.require_operator()
    if not parts.strip():
        raise InvalidInput("parts", "Say what was replaced, with serials (e.g. \"GPU 3: "
                           "1652200012 → 1652200087\"); kept with the node's record.")
    now = p.clock.now()
    with p.db.write() as s:
        node = load_node(s, node_id)
        repair = open_repair(s, node.id)
        if node.status != NodeStatus.REPAIR.value or repair is None:
            raise Conflict("Node {node_name} is {node_status}, not in repair.",
                           node_name=node.name, node_status=node.status)
        repair.parts, repair.finished_at, repair.finished_by = parts[:4000], now, by(actor)
        node.fault_ticket_id = None  # repaired: what its tickets reported is fixed
        node.safe_off_due = False  # the pipeline drives its power from now on
        card = repair.instance_id is not None and node.instance_id == repair.instance_id
        if card:  # back to the tenant who holds it: their own system, burned in first
            transition(s, p, node, NODE, "return_to_tenant", Move(now, actor=by(actor),
                       reason=phrase("repaired ({parts}): burn-in, then back to its tenant",
                                     parts=parts[:200])))
            transition(s, p, node, NODE_STAGE, "return", Move(now, actor=by(actor),
                                                              timeout_s=p.settings.stage_timeout_s))
        else:
            transition(s, p, node, NODE, "repaired", Move(now, actor=by(actor),
                       reason=phrase("repaired ({parts}): erase and burn-in, then the pool",
                                     parts=parts[:200])))
            transition(s, p, node, NODE_STAGE, "clean", Move(now, actor=by(actor),
                                                             timeout_s=p.settings.stage_timeout_s))
        node.next_attempt_at = now
        node.last_error = None
        if repair.ticket_id:
            ticket = s.get(Ticket, repair.ticket_id, with_for_update=True)
            if ticket is not None:
                entry(s, ticket, now, Said("note", by(actor),
                      phrase("node {node_name} repaired: {parts}", node_name=node.name,
                      parts=parts), internal=True))
        s.flush()
        view = _view(repair, node.name)
        name, driver, agent_kind = node.name, node.bmc_driver, node.agent_kind
    replace_simulated_parts(p, name, driver, agent_kind)
    p.wake()
    return view


def _view(r: Repair, node_name: str) -> RepairView:
    hours = ((r.finished_at - r.started_at).total_seconds() / 3600
             if r.finished_at else None)
    return RepairView(id=r.id, node=node_name, offer=r.offer, ticket_id=r.ticket_id,
                      reason=r.reason, parts=r.parts, started_at=r.started_at,
                      finished_at=r.finished_at,
                      hours=round(hours, 2) if hours is not None else None,
                      instance_id=r.instance_id, burned_in_at=r.burned_in_at)


def list_repairs(p: Records, actor: Principal, open_only: bool = False, limit: int = 100,
                 offset: int = 0) -> Page[RepairView]:
    """Repairs, newest first (open ones only with `open_only`), a page at a time."""
    actor.require_operator()
    with p.db.read() as s:
        q = select(Repair, Node.name).join(Node, Node.id == Repair.node_id)
        if open_only:
            q = q.where(Repair.finished_at.is_(None))
        total = s.scalar(select(func.count()).select_from(q.subquery())) or 0
        rows = s.execute(q.order_by(Repair.started_at.desc(), Repair.id.desc())
                         .limit(limit).offset(offset)).all()
        return Page(items=[_view(r, name) for r, name in rows], total=total, limit=limit,
                    offset=offset)
