"""Tickets: opened from a fault's evidence (a hardware alert of the agent or the BMC), one
per node, GPU and kind at a time, or by a tenant about their instance; each with its
severity, SLA clocks from the offer's support terms, and a timeline (its moves, comments,
evidence). Tenants see their own tickets (not operators' internal comments) and are told
on open, update and resolve (e-mail and webhook, the notice outbox); operators are told of
every new P1 (services/support/ticket_sla.py warns them before a breach)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpulease.db.ops_tables import Ticket, TicketEntry
from gpulease.db.repositories import get_instance
from gpulease.db.tables import Event, HardwareAlert, Instance, Node
from gpulease.domain.accounts import Principal, Role
from gpulease.domain.errors import Conflict, Forbidden, InvalidInput, NotFound
from gpulease.domain.phrases import Phrase, listed, phrase, stored
from gpulease.domain.states import TICKET, NodeStatus, TicketStatus
from gpulease.domain.tickets import (
    Clock,
    Severity,
    deadlines,
    next_warning,
    severity_of,
    title_phrase,
)
from gpulease.lifecycle.history import Happened, by, record_event
from gpulease.lifecycle.writer import Move, initial, transition
from gpulease.ports.records import Moves, Priced
from gpulease.schemas import Page
from gpulease.schemas.tickets import (
    RepairWindow,
    TicketAction,
    TicketComment,
    TicketDetail,
    TicketOpen,
    TicketView,
    TimelineEntry,
)
from gpulease.security import new_id
from gpulease.services.money.sla import claim_ticket_outage
from gpulease.services.platform.notify import OPERATORS
from gpulease.services.platform.outbox import Notice, post_notice

TENANT_REPORT = "tenant_report"
UNRESOLVED = Ticket.status != TicketStatus.RESOLVED.value


def notice(s: Session, to: str, kind: str, ticket: Ticket, text: str | Phrase, now: datetime
           ) -> None:
    post_notice(s, Notice(to, kind, phrase("Ticket {ticket} ({severity}): {text}",
                                           ticket=ticket.id, severity=ticket.severity,
                                           text=text), ticket.instance_id), now)


def clocks(t: Ticket) -> list[Clock]:
    return [Clock("response", t.response_due, t.acknowledged_at or t.mitigated_at
                  or t.resolved_at),
            Clock("mitigation", t.mitigation_due, t.mitigated_at or t.resolved_at),
            Clock("resolution", t.resolution_due, t.resolved_at)]


def plan_warning(p: Priced, t: Ticket) -> None:
    """When operators are next warned about the ticket's clocks (after it opens, moves, or
    a warning went out)."""
    warned = {w for w in t.warned.split(",") if w}
    t.next_warning_at = next_warning(clocks(t), t.opened_at, warned,
                                     p.catalog.support.warn_at)


@dataclass(frozen=True)
class Opening:
    """What a new ticket is about: whose, which instance, node and GPU, the kind of fault
    and its severity, a summary (a phrase when the platform wrote it, a person's text
    otherwise), and the fault's key (one open ticket per node, GPU and kind)."""

    tenant_id: str | None
    instance_id: str | None
    node: Node | None
    gpu: int | None
    kind: str
    severity: Severity
    summary: str | Phrase
    fault_key: str | None = None


def _open(s: Session, p: Priced, what: Opening, actor: str, now: datetime) -> Ticket:
    """A new ticket, told to its tenant (and every P1 to the operators)."""
    tenant_id, instance_id, node, summary, severity = (
        what.tenant_id, what.instance_id, what.node, what.summary, what.severity)
    sku = region = None
    if instance_id is not None:
        inst = s.get(Instance, instance_id)
        sku, region = (inst.sku, inst.region) if inst is not None else (None, None)
    elif node is not None:
        sku, region = node.sku, node.region
    due = deadlines(p.catalog.support_for(sku, region), severity, now)
    ticket = Ticket(id=new_id("tk"), tenant_id=tenant_id, instance_id=instance_id,
                    node_id=node.id if node else None, gpu_index=what.gpu, kind=what.kind,
                    severity=severity.value, summary=str(summary)[:300], opened_by=actor,
                    opened_at=now, response_due=due.response, mitigation_due=due.mitigation,
                    resolution_due=due.resolution, fault_key=what.fault_key, updated_at=now,
                    warned="",
                    **initial(Ticket, TICKET))
    plan_warning(p, ticket)
    s.add(ticket)
    s.flush()
    if node is not None and what.kind != TENANT_REPORT:
        mark_fault(node, ticket)
    record_event(s, now, Happened(
        "ticket", ticket.id, "opened", instance_id, to_value=severity.value,
        message=summary if isinstance(summary, Phrase) else summary[:300]), actor=actor)
    if tenant_id is not None:
        notice(s, tenant_id, "ticket_opened", ticket, phrase("opened: {summary}",
                                                             summary=summary), now)
    if severity is Severity.P1:
        notice(s, OPERATORS, "ops_p1", ticket, phrase(
            "new P1 on node {node}: {summary}", node=node.name, summary=summary) if node else
            phrase("new P1: {summary}", summary=summary), now)
    return ticket


def mark_fault(node: Node, ticket: Ticket) -> None:
    """The node has a fault this ticket reports: it stays out of the pool until repaired or
    the ticket is resolved (the node lifecycle's entry check, domain/fleet/erasure.py)."""
    node.fault_ticket_id = node.fault_ticket_id or ticket.id


def fault_resolved(s: Session, t: Ticket) -> None:
    """A resolved ticket no longer keeps its node out of the pool; another open fault ticket
    of that node still does."""
    node = s.get(Node, t.node_id, with_for_update=True) if t.node_id else None
    if node is None or node.fault_ticket_id != t.id:
        return
    node.fault_ticket_id = s.scalar(
        select(Ticket.id).where(Ticket.node_id == node.id, Ticket.id != t.id,
                                Ticket.kind != TENANT_REPORT,
                                Ticket.status != TicketStatus.RESOLVED.value)
        .order_by(Ticket.opened_at.desc(), Ticket.id.desc()).limit(1))


@dataclass(frozen=True)
class Said:
    """A line of a ticket's timeline: its kind ("comment", "note", "evidence"), who wrote it,
    what (a phrase the platform wrote is said in each reader's language), what it refers to
    (an alert, a report), and whether only operators see it."""

    kind: str
    actor: str
    body: str | Phrase
    ref: str | None = None
    internal: bool = False


def entry(s: Session, ticket: Ticket, now: datetime, said: Said) -> None:
    """Append a line to the ticket's timeline."""
    kind, actor, body, ref, internal = said.kind, said.actor, said.body, said.ref, said.internal
    english, phrase = stored(body)
    s.add(TicketEntry(ticket_id=ticket.id, at=now, kind=kind, actor=actor, body=english,
                      phrase=phrase, ref=ref, internal=internal))
    ticket.updated_at = now


def _move(e: Event) -> TimelineEntry:
    """A line of the timeline from one of the ticket's moves (its statuses said in the
    reader's language by the console)."""
    if e.kind == "opened":
        return TimelineEntry(at=e.at, kind="opened", actor=e.actor or "",
                             text=e.message or "")
    moved = Phrase("{was} → {now}", {"was": phrase(e.from_value or ""),
                                      "now": phrase(e.to_value or "")})
    english, said = stored(listed([moved, Phrase(": {note}", {"note": e.message})], "")
                           if e.message else moved)
    return TimelineEntry(at=e.at, kind="status", actor=e.actor or "", text=english,
                         phrase=said)


def open_from_alert(s: Session, p: Priced, alert: HardwareAlert, now: datetime,
                    actor: str) -> Ticket:
    """The alert's ticket: the open one for its node, GPU and kind (the alert added to its
    evidence), or a new one."""
    key = f"{alert.node_id}:{alert.gpu_index}:{alert.kind}"
    ticket = s.scalar(select(Ticket).where(Ticket.fault_key == key))
    if ticket is None:
        node = s.get(Node, alert.node_id)
        inst = s.get(Instance, alert.instance_id) if alert.instance_id else None
        gpu = alert.gpu_index if alert.gpu_index >= 0 else None
        ticket = _open(s, p, Opening(
            inst.tenant_id if inst else None, inst.id if inst else None, node, gpu,
            alert.kind, severity_of(alert.kind), title_phrase(alert.kind, gpu), key),
            actor, now)
    elif ticket.status != TicketStatus.RESOLVED.value and ticket.node_id is not None:
        node = s.get(Node, ticket.node_id)  # the fault is seen again: not repaired
        if node is not None and node.status != NodeStatus.REPAIR.value:
            mark_fault(node, ticket)
    message: str | Phrase = (Phrase.from_json(json.loads(alert.phrase)) if alert.phrase
                             else alert.message)
    source = {"agent": phrase("node agent"), "bmc": phrase("BMC")}.get(alert.source,
                                                                      alert.source)
    entry(s, ticket, now, Said("evidence", actor, phrase("{source} alert: {message}",
                               source=source, message=message),
ref=f"alert:{alert.id}"))
    return ticket


@dataclass(frozen=True)
class FailedAcceptance:
    """A rented machine's acceptance run that failed on request: the instance, the report
    and what failed in it, and who asked."""

    instance_id: str
    report_id: str
    summary: str
    actor: str


def open_for_failed_acceptance(s: Session, p: Priced, node: Node, failed: FailedAcceptance,
                               now: datetime) -> Ticket:
    """A rented machine failed its acceptance suite on request: a P1 ticket (one open per
    node at a time) with the report as evidence."""
    instance_id, report_id, summary, actor = (failed.instance_id, failed.report_id,
                                              failed.summary, failed.actor)
    key = f"{node.id}:-1:acceptance_failed"
    ticket = s.scalar(select(Ticket).where(Ticket.fault_key == key))
    if ticket is None:
        inst = s.get(Instance, instance_id)
        ticket = _open(s, p, Opening(
            inst.tenant_id if inst else None, instance_id, node, None, "acceptance_failed",
            severity_of("acceptance_failed"),
            phrase("{title} on {node}", title=title_phrase("acceptance_failed", None),
                   node=node.name), key), actor, now)
    entry(s, ticket, now, Said("evidence", actor, summary, ref=f"report:{report_id}"))
    return ticket


def alert_cleared(s: Session, alert: HardwareAlert, now: datetime, actor: str) -> None:
    """The evidence says the fault is gone: a line in its open ticket (an operator
    resolves it)."""
    key = f"{alert.node_id}:{alert.gpu_index}:{alert.kind}"
    ticket = s.scalar(select(Ticket).where(Ticket.fault_key == key))
    if ticket is not None:
        entry(s, ticket, now, Said("evidence", actor, phrase("{alert_source} alert cleared",
                                   alert_source=alert.source),
                                          ref=f"alert:{alert.id}"))


def open_by_tenant(p: Priced, actor: Principal, body: TicketOpen) -> TicketDetail:
    tenant = actor.require_order_rights()
    now = p.clock.now()
    with p.db.write() as s:
        instance_id, node = None, None
        if body.instance_id is not None:
            inst = get_instance(s, actor, body.instance_id)
            instance_id = inst.id
            if inst.node_count:
                node = s.scalar(select(Node).where(Node.instance_id == inst.id)
                                .order_by(Node.name).limit(1))
            if body.gpu is not None and body.gpu >= max(inst.gpu_count, 1):
                raise InvalidInput("gpu", "Instance {instance} has GPUs 0 to "
                                   "{highest}.",
                                   instance=inst.id, highest=inst.gpu_count - 1)
        elif body.gpu is not None:
            raise InvalidInput("gpu", "A GPU belongs to an instance: name the instance "
                               "too, or leave the GPU out.")
        ticket = _open(s, p, Opening(tenant, instance_id, node, body.gpu, TENANT_REPORT,
                                     Severity(body.severity), body.summary), by(actor), now)
        if body.details:
            entry(s, ticket, now, Said("comment", by(actor), body.details))
        ticket_id = ticket.id
    return show_ticket(p, actor, ticket_id)


def _load(s: Session, actor: Principal, ticket_id: str, lock: bool = False) -> Ticket:
    q = select(Ticket).where(Ticket.id == ticket_id)
    if not actor.is_operator:
        q = q.where(Ticket.tenant_id == actor.require_tenant())
    ticket = s.scalar(q.with_for_update() if lock else q)
    if ticket is None:
        raise NotFound("No ticket {ticket_id}; `gpulease tickets` lists yours.",
                       ticket_id=ticket_id)
    return ticket


def _view(t: Ticket, node_name: str | None, now: datetime,
          warn_at: Decimal = Decimal("0.8")) -> TicketView:
    return TicketView(
        id=t.id, tenant_id=t.tenant_id, instance_id=t.instance_id, node=node_name,
        gpu=t.gpu_index, kind=t.kind, severity=t.severity, summary=t.summary,
        status=t.status, opened_by=t.opened_by, opened_at=t.opened_at,
        acknowledged_at=t.acknowledged_at, mitigated_at=t.mitigated_at,
        resolved_at=t.resolved_at, response_due=t.response_due,
        mitigation_due=t.mitigation_due, resolution_due=t.resolution_due,
        breached=[c.name for c in clocks(t) if c.breached(now)],
        at_risk=[c.name for c in clocks(t) if c.at_risk(t.opened_at, now, warn_at)])


@dataclass(frozen=True)
class TicketFilter:
    """Which tickets: by status, open ones only, of one instance or one node."""

    status: str | None = None
    open_only: bool = False
    instance_id: str | None = None
    node_id: str | None = None


OPEN = TicketFilter(open_only=True)


def list_tickets(p: Priced, actor: Principal, where: TicketFilter = TicketFilter(),
                 limit: int = 100, offset: int = 0) -> Page[TicketView]:
    """A page of tickets, newest first (the tenant's own; an operator's: all), in three
    statements: the count, the page, its nodes' names."""
    status, open_only, instance_id, node_id = (where.status, where.open_only,
                                               where.instance_id, where.node_id)
    if status is not None and status not in {st.value for st in TicketStatus}:
        raise InvalidInput("status", "Unknown ticket status {status!r}.",
                           [st.value for st in TicketStatus], status=status)
    now = p.clock.now()
    with p.db.read() as s:
        q = select(Ticket)
        if not actor.is_operator:
            q = q.where(Ticket.tenant_id == actor.require_tenant())
        if status:
            q = q.where(Ticket.status == status)
        if open_only:
            q = q.where(UNRESOLVED)
        if instance_id:
            q = q.where(Ticket.instance_id == instance_id)
        if node_id:
            q = q.where(Ticket.node_id == node_id)
        total = s.scalar(select(func.count()).select_from(q.subquery())) or 0
        rows = list(s.scalars(q.order_by(Ticket.opened_at.desc(), Ticket.id.desc())
                              .limit(limit).offset(offset)))
        names = {i: n for i, n in s.execute(select(Node.id, Node.name).where(
            Node.id.in_({t.node_id for t in rows if t.node_id})))}
        items = [_view(t, names.get(t.node_id or ""), now,
                       p.catalog.support.warn_at) for t in rows]
    return Page(items=items, total=total, limit=limit, offset=offset)


def show_ticket(p: Priced, actor: Principal, ticket_id: str) -> TicketDetail:
    now = p.clock.now()
    with p.db.read() as s:
        t = _load(s, actor, ticket_id)
        node = s.get(Node, t.node_id) if t.node_id else None
        timeline = [_move(e) for e in s.scalars(select(Event).where(
            Event.resource == "ticket", Event.resource_id == t.id))]
        entries = select(TicketEntry).where(TicketEntry.ticket_id == t.id)
        if not actor.is_operator:
            entries = entries.where(TicketEntry.internal.is_(False))
        timeline += [TimelineEntry(at=e.at, kind=e.kind, actor=e.actor, text=e.body,
                                   ref=e.ref, internal=e.internal, phrase=e.phrase)
                     for e in s.scalars(entries)]
        timeline.sort(key=lambda e: e.at)
        view = _view(t, node.name if node else None, now, p.catalog.support.warn_at)
        window = RepairWindow(start=t.repair_window_start, end=t.repair_window_end,
                              accepted_at=t.repair_window_accepted_at,
                              begun_at=t.repair_window_begun_at) if (
            t.repair_window_start and t.repair_window_end) else None
    return TicketDetail(**view.model_dump(), timeline=timeline, repair_window=window)


def operator_responds(s: Session, p: Moves, t: Ticket, actor: Principal,
                       now: datetime) -> None:
    """An operator's first response stops the response clock."""
    if t.status == TicketStatus.OPEN.value:
        t.acknowledged_at = now
        transition(s, p, t, TICKET, "acknowledge", Move(now, actor=by(actor)))
        plan_warning(p, t)


def comment(p: Moves, actor: Principal, ticket_id: str, body: TicketComment
            ) -> TicketDetail:
    if body.internal and not actor.is_operator:
        raise Forbidden("Only operators write internal notes.")
    if actor.role is Role.READER:
        raise Forbidden("Role 'reader' may only read; ask a tenant admin for a member token.")
    now = p.clock.now()
    with p.db.write() as s:
        t = _load(s, actor, ticket_id, lock=True)
        if t.status == TicketStatus.RESOLVED.value:
            raise Conflict("Ticket {ticket} is resolved; open a new one.", ticket=t.id)
        entry(s, t, now, Said("comment", by(actor), body.body, internal=body.internal))
        if actor.is_operator and not body.internal:
            operator_responds(s, p, t, actor, now)
            if t.tenant_id:
                notice(s, t.tenant_id, "ticket_updated", t,
                       phrase("reply: {text}", text=body.body[:500]), now)
    return show_ticket(p, actor, ticket_id)


def acknowledge(p: Moves, actor: Principal, ticket_id: str, body: TicketAction
                ) -> TicketDetail:
    actor.require_operator()
    now = p.clock.now()
    with p.db.write() as s:
        t = _load(s, actor, ticket_id, lock=True)
        if t.status != TicketStatus.OPEN.value:
            raise Conflict("Ticket {ticket} is {status}, not waiting for a response.",
                           ticket=t.id, status=t.status)
        if body.note:
            entry(s, t, now, Said("comment", by(actor), body.note))
        operator_responds(s, p, t, actor, now)
        if t.tenant_id:
            notice(s, t.tenant_id, "ticket_updated", t, phrase(
                "an operator is on it: {note}", note=body.note) if body.note else
                phrase("an operator is on it"), now)
    return show_ticket(p, actor, ticket_id)


def mitigate(p: Moves, actor: Principal, ticket_id: str, body: TicketAction
             ) -> TicketDetail:
    """The tenant is served again (the mitigation clock stops)."""
    actor.require_operator()
    now = p.clock.now()
    with p.db.write() as s:
        t = _load(s, actor, ticket_id, lock=True)
        if t.status not in (TicketStatus.OPEN.value, TicketStatus.ACKNOWLEDGED.value):
            raise Conflict("Ticket {ticket} is {status}.", ticket=t.id, status=t.status)
        t.acknowledged_at = t.acknowledged_at or now
        t.mitigated_at = now
        transition(s, p, t, TICKET, "mitigate", Move(now, actor=by(actor), reason=body.note))
        plan_warning(p, t)
        _claim_outage(s, t, now)
        if t.tenant_id:
            notice(s, t.tenant_id, "ticket_updated", t, phrase(
                "mitigated: {note}", note=body.note) if body.note else phrase("mitigated"),
                now)
    return show_ticket(p, actor, ticket_id)


def resolve(p: Moves, actor: Principal, ticket_id: str, body: TicketAction) -> TicketDetail:
    """An operator resolves any ticket; a tenant withdraws one of their own reports."""
    if actor.role is Role.READER:
        raise Forbidden("Role 'reader' may only read; ask a tenant admin for a member token.")
    now = p.clock.now()
    with p.db.write() as s:
        t = _load(s, actor, ticket_id, lock=True)
        if not actor.is_operator and t.kind != TENANT_REPORT:
            raise Forbidden("A fault's ticket is resolved by the provider's operators; you "
                            "may comment on it.")
        if t.status == TicketStatus.RESOLVED.value:
            raise Conflict("Ticket {ticket} is resolved already.", ticket=t.id)
        t.resolved_at = now
        t.fault_key = None  # the next fault of this kind opens a new ticket
        fault_resolved(s, t)
        transition(s, p, t, TICKET, "resolve", Move(now, actor=by(actor), reason=body.note))
        t.next_warning_at = None
        if t.tenant_id:
            notice(s, t.tenant_id, "ticket_resolved", t, phrase(
                "resolved: {note}", note=body.note) if body.note else phrase("resolved"),
                now)
    return show_ticket(p, actor, ticket_id)


def _claim_outage(s: Session, t: Ticket, now: datetime) -> None:
    """The outage this ticket's fault caused, as an SLA claim with its evidence (an
    operator confirms it: the agent's telemetry is the tenant's host's)."""
    claim = claim_ticket_outage(s, t, now)
    if claim is not None:
        entry(s, t, now, Said("note", "sla", phrase(
            "SLA claim {claim_id}: ¥{claim_amount:,.2f} for the outage, waiting for an "
            "operator's decision (`gpulease sla-decide`)", claim_id=claim.id,
            claim_amount=claim.amount), ref=f"claim:{claim.id}"))


def mitigate_replaced(s: Session, p: Moves, inst: Instance, spares: list[str],
                      now: datetime, actor: str) -> None:
    """The instance's spare is delivered: its tickets about a node it no longer has are
    mitigated (the tenant is served again)."""
    serving = {n for n in s.scalars(select(Node.id).where(Node.instance_id == inst.id,
                                                          Node.status == NodeStatus.ACTIVE.value))}
    for t in s.scalars(select(Ticket).where(
            Ticket.instance_id == inst.id, Ticket.node_id.is_not(None),
            Ticket.status.in_((TicketStatus.OPEN.value, TicketStatus.ACKNOWLEDGED.value)))
            .with_for_update()):
        if t.node_id in serving:
            continue
        served_again(s, p, t, Served(
            phrase("replaced: the instance runs on {nodes}", nodes=", ".join(spares)),
            phrase("; reveal the new root password once with `gpulease credentials`")),
            now, actor)


@dataclass(frozen=True)
class Served:
    """What brought a ticket's tenant back into service, and what the tenant is told to do
    next (appended to the notice only)."""

    text: Phrase
    for_tenant: Phrase | None = None


def served_again(s: Session, p: Moves, t: Ticket, served: Served, now: datetime,
                 actor: str) -> None:
    """The work on a ticket's fault serves its tenant again: mitigated (the clock stops),
    the outage claimed, the tenant told. `t` is locked by the caller."""
    text, for_tenant = served.text, served.for_tenant
    if t.status not in (TicketStatus.OPEN.value, TicketStatus.ACKNOWLEDGED.value):
        entry(s, t, now, Said("note", actor, str(text)))
        return
    t.acknowledged_at = t.acknowledged_at or now
    t.mitigated_at = now
    transition(s, p, t, TICKET, "mitigate", Move(now, actor=actor, reason=str(text)))
    plan_warning(p, t)
    _claim_outage(s, t, now)
    if t.tenant_id:
        notice(s, t.tenant_id, "ticket_updated", t,
               listed([text, for_tenant], "") if for_tenant else text, now)
