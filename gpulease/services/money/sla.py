"""SLA credits beyond late delivery: a hardware fault that keeps a tenant's GPU out of
service longer than the outage SLA, and a delivered machine that fails acceptance on the
tenant's request. Each becomes a claim with its evidence. Money never follows evidence the
tenant controls: telemetry and reports from the agent on the rented host (where the tenant
is root) wait for an operator's decision; a run of the platform's own stand-in agent is
decided at once. A confirmed claim is posted to the wallet once (keyed by its item), and
lands on the next invoice as a negative line.

The cap: a claim belongs to the lease period its evidence falls in, and that period's
credits (late delivery, outages, failed acceptance) never exceed GPULEASE_SLA_CREDIT_CAP
times its price, whenever they are confirmed: in the period, after a renewal, after the
lease ended. An outage is valued on what was out: one GPU at its share of the server's
price (the server's price ÷ its GPUs), the whole server (a BMC fault naming no GPU) at the
server's price; claims for one outage that overlap (per GPU and per server, from the BMC
and from the agent, from an alert and from its ticket) are merged: a later one is worth
only what the merged outage adds."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from sqlalchemy import ColumnElement, and_, func, or_, select
from sqlalchemy.orm import Session

from gpulease.db.money_tables import Lease, LedgerEntry, SlaClaim
from gpulease.db.ops_tables import Ticket, TicketEntry
from gpulease.db.tables import HardwareAlert, Instance
from gpulease.domain.accounts import Principal
from gpulease.domain.billing.credits import (
    AcceptanceRule,
    OutageRule,
    acceptance_credit,
    outage_credit,
)
from gpulease.domain.billing.leases import Period, current_period
from gpulease.domain.billing.money import to_fen
from gpulease.domain.errors import Conflict, NotFound
from gpulease.domain.fleet.telemetry import AlertKind
from gpulease.domain.phrases import Phrase, phrase, stored
from gpulease.domain.states import InstanceStatus
from gpulease.lifecycle.history import by
from gpulease.ports.records import Records
from gpulease.schemas import Page
from gpulease.schemas.money import SlaClaimView
from gpulease.services.money import lease_periods
from gpulease.services.money.wallet import SlaCredit, credit_sla, first_hold

# Faults that take a GPU out of service (throttling and a down NVLink only slow it).
OUTAGE_KINDS = frozenset({AlertKind.GPU_FELL_OFF_BUS.value, AlertKind.DOUBLE_BIT_ECC.value,
                          AlertKind.ECC_UNCONTAINED.value, AlertKind.ROW_REMAP_FAILURE.value})
PERIOD_S = {"hour": 3600.0}


def _lease_period(s: Session, inst: Instance, at: datetime) -> Period | None:
    """The lease period `at` falls in (the last one after the end, the first before)."""
    lease = s.scalar(select(Lease).where(Lease.instance_id == inst.id))
    if lease is None:
        return None
    periods = lease_periods.paid_periods(s, lease.id) or [
        Period(seq=1, term=lease.term, price=lease.unit_price, anchor=lease.starts_at, index=1,
               starts_at=lease.starts_at, ends_at=lease.ends_at)]
    found = current_period(periods, at)
    if found is not None:
        return found
    return periods[0] if at < periods[0].starts_at else periods[-1]


WHOLE_SERVER = -1  # an outage's GPU index when the whole server was out


def _price_basis(s: Session, inst: Instance, at: datetime, gpu: int = WHOLE_SERVER
                 ) -> tuple[Decimal, float] | None:
    """(price of what was out for one period, the period's seconds) the credit is prorated
    on: the lease period `at` falls in (containers: their hour); one GPU is its share of
    its server's price, the whole server its price."""
    if inst.kind == "container":
        held = first_hold(s, inst.id)
        return (held, PERIOD_S["hour"]) if held is not None else None
    period = _lease_period(s, inst, at)
    if period is None:
        return None
    server = period.price / max(inst.node_count, 1)
    gpus_per_server = max(inst.gpu_count // max(inst.node_count, 1), 1)
    return (server if gpu == WHOLE_SERVER else server / gpus_per_server,
            (period.ends_at - period.starts_at).total_seconds())


def _period_cap(s: Session, inst: Instance, claim: SlaClaim, cap: Decimal) -> Decimal:
    """What may still be credited for `claim` in the lease period its evidence falls in:
    all that period's SLA credits together (late delivery, outages, failed acceptance),
    confirmed before or after, stay within `cap` × its price."""
    anchor = claim.period_start or claim.created_at
    period = _lease_period(s, inst, anchor)
    if period is None:
        held = first_hold(s, inst.id)
        if held is None:
            return Decimal("0.00")
        return max(to_fen(held * cap) - _credited_in(s, inst, claim, None), Decimal("0.00"))
    return max(to_fen(period.price * cap) - _credited_in(s, inst, claim, period),
               Decimal("0.00"))


def _credited_in(s: Session, inst: Instance, claim: SlaClaim, period: Period | None
                 ) -> Decimal:
    """SLA credits already counted against the claim's period: confirmed claims of that
    period (older claims without one: by their confirmation's date), and the late-delivery
    credit in the first period."""
    of_period: ColumnElement[bool]
    if period is None:  # a container's hour: its claims of the same hour
        start, end = claim.created_at - timedelta(hours=1), claim.created_at + timedelta(hours=1)
        of_period = SlaClaim.created_at.between(start, end)
    else:
        start, end = period.starts_at, period.ends_at
        of_period = or_(SlaClaim.period_start == start, and_(
            SlaClaim.period_start.is_(None), SlaClaim.decided_at >= start,
            SlaClaim.decided_at < end))
    claimed = s.scalar(select(func.coalesce(func.sum(SlaClaim.credited), 0)).where(
        SlaClaim.instance_id == inst.id, SlaClaim.decision == "confirmed",
        SlaClaim.id != claim.id, of_period)) or Decimal(0)
    late = Decimal(0)
    if period is None or period.seq == 1:
        late = s.scalar(select(func.coalesce(func.sum(LedgerEntry.amount), 0)).where(
            LedgerEntry.instance_id == inst.id, LedgerEntry.kind == "credit",
            LedgerEntry.item.like("SLA credit: late delivery%"))) or Decimal(0)
    return Decimal(claimed) + Decimal(late)


@dataclass(frozen=True)
class Claimed:
    """What a claim says: its kind (outage, acceptance), the evidence it rests on, its
    ledger item (one claim per item, ever), its text and the amount it asks."""

    kind: str
    evidence: str
    item: Phrase
    text: Phrase
    amount: Decimal
    evidence_at: datetime | None = None  # when the evidence says it happened
    outage: Outage | None = None


@dataclass(frozen=True)
class Outage:
    """What was out and when: a server's GPU (WHOLE_SERVER: all of it) from `start` to
    `end`."""

    node_id: str
    gpu: int
    start: datetime
    end: datetime


def _claim(s: Session, inst: Instance, claimed: Claimed, now: datetime) -> SlaClaim | None:
    item, text, amount = claimed.item, claimed.text, claimed.amount
    if amount <= 0 or s.scalar(select(SlaClaim.id).where(SlaClaim.item == str(item)[:200])
                               ) is not None:
        return None
    period = _lease_period(s, inst, claimed.evidence_at or now)
    out = claimed.outage
    claim = SlaClaim(id="slc-" + uuid.uuid4().hex[:12], instance_id=inst.id,
                     tenant_id=inst.tenant_id, kind=claimed.kind,
                     evidence=claimed.evidence[:200], item=str(item)[:200],
                     item_phrase=stored(item)[1], text=str(text)[:500],
                     text_phrase=stored(text)[1], amount=amount, created_at=now,
                     period_start=period.starts_at if period is not None else None,
                     node_id=out.node_id if out else None, gpu_index=out.gpu if out else None,
                     outage_from=out.start if out else None, outage_to=out.end if out else None)
    s.add(claim)
    s.flush()
    return claim


def _confirm(s: Session, claim: SlaClaim, now: datetime, actor: str, cap: Decimal,
             note: str | None = None) -> Decimal:
    inst = s.get(Instance, claim.instance_id)
    assert inst is not None
    credit = min(claim.amount, _period_cap(s, inst, claim, cap))
    claimed: str | Phrase = (Phrase.from_json(json.loads(claim.text_phrase))
                             if claim.text_phrase else claim.text)
    text = claimed if credit == claim.amount else phrase(
        "{claimed}; capped at ¥{credit:,.2f}: the period's credits reach {cap:f}× its price",
        claimed=claimed, credit=credit, cap=cap.normalize())
    item: str | Phrase = (Phrase.from_json(json.loads(claim.item_phrase)) if claim.item_phrase
                          else claim.item)
    credit_sla(s, inst, SlaCredit(credit, item, phrase("{text} (evidence: {evidence})",
                                                       text=text, evidence=claim.evidence)),
               now, actor=actor)
    claim.decision, claim.decided_at, claim.decided_by = "confirmed", now, actor
    claim.note, claim.credited = note, credit
    return credit


def outage_worth(s: Session, inst: Instance, out: Outage, rule: OutageRule) -> Decimal:
    """What the outage adds to the claims already made for it:
    claims on the same server that overlap it (the same GPU, or the whole server on
    either side) are merged with it; the merged outage is valued on what was out (the
    whole server if any part was, else the GPU) and the earlier claims' amounts are
    subtracted."""
    where = [SlaClaim.instance_id == inst.id, SlaClaim.node_id == out.node_id,
             SlaClaim.kind == "outage", SlaClaim.outage_from < out.end,
             SlaClaim.outage_to > out.start,
             or_(SlaClaim.decision.is_(None), SlaClaim.decision != "rejected")]
    if out.gpu != WHOLE_SERVER:
        where.append(SlaClaim.gpu_index.in_((out.gpu, WHOLE_SERVER)))
    earlier = s.scalars(select(SlaClaim).where(*where)).all()
    start = min([out.start, *(c.outage_from for c in earlier if c.outage_from)])
    end = max([out.end, *(c.outage_to for c in earlier if c.outage_to)])
    whole = out.gpu == WHOLE_SERVER or any(c.gpu_index == WHOLE_SERVER for c in earlier)
    basis = _price_basis(s, inst, out.start, WHOLE_SERVER if whole else out.gpu)
    if basis is None:
        return Decimal("0.00")
    merged = outage_credit((end - start).total_seconds(), basis[0], basis[1], rule)
    already = sum((c.amount for c in earlier), Decimal(0))
    return max(merged - already, Decimal("0.00"))


def claim_outage(s: Session, alert: HardwareAlert, rule: OutageRule = OutageRule()
                 ) -> Decimal:
    """Called as an alert closes: an outage fault on a tenant's GPU beyond the SLA. The
    alert comes from the rented host's agent, so the claim waits for an operator."""
    if alert.kind not in OUTAGE_KINDS or alert.instance_id is None or alert.closed_at is None:
        return Decimal("0.00")
    inst = s.get(Instance, alert.instance_id)
    if inst is None:
        return Decimal("0.00")
    out = Outage(alert.node_id, alert.gpu_index, alert.opened_at, alert.closed_at)
    credit = outage_worth(s, inst, out, rule)
    outage_s = (alert.closed_at - alert.opened_at).total_seconds()
    item = phrase("SLA credit: GPU {gpu} outage ({kind}) of {instance}, alert {alert}",
                  gpu=alert.gpu_index, kind=alert.kind, instance=inst.id, alert=alert.id)
    claim = _claim(s, inst, Claimed(
        "outage", f"hardware alert {alert.id} (node agent telemetry)", item,
        phrase("GPU {gpu} of {instance} out of service {minutes:.0f} min ({kind}); "
               "rule: {rule}", gpu=alert.gpu_index, instance=inst.id,
               minutes=outage_s / 60, kind=alert.kind, rule=rule.describe()),
        credit, evidence_at=alert.opened_at, outage=out), alert.closed_at)
    return claim.amount if claim is not None else Decimal("0.00")


def claim_ticket_outage(s: Session, ticket: Ticket, now: datetime,
                        rule: OutageRule = OutageRule()
                        ) -> SlaClaim | None:
    """Called as a fault's ticket is mitigated: the GPU (or node) was out of service from
    the fault's first evidence to the mitigation. One claim per fault: keyed by the alert
    that opened the ticket, so the alert closing later (or earlier) claims nothing more."""
    if ticket.kind not in OUTAGE_KINDS or ticket.instance_id is None:
        return None
    first = s.scalar(select(TicketEntry.ref).where(
        TicketEntry.ticket_id == ticket.id, TicketEntry.ref.like("alert:%"))
        .order_by(TicketEntry.id).limit(1))
    alert = s.get(HardwareAlert, int(first.split(":", 1)[1])) if first else None
    inst = s.get(Instance, ticket.instance_id)
    if alert is None or inst is None:
        return None
    out = Outage(alert.node_id, alert.gpu_index, alert.opened_at, now)
    worth = outage_worth(s, inst, out, rule)
    outage_s = (now - alert.opened_at).total_seconds()
    item = phrase("SLA credit: GPU {gpu} outage ({kind}) of {instance}, alert {alert}",
                  gpu=alert.gpu_index, kind=alert.kind, instance=inst.id, alert=alert.id)
    return _claim(s, inst, Claimed(
        "outage", f"ticket {ticket.id}: hardware alert {alert.id} ({alert.source}) to "
        "mitigation", item,
        phrase("GPU {gpu} of {instance} out of service {minutes:.0f} min ({kind}, "
               "ticket {ticket}); rule: {rule}", gpu=alert.gpu_index, instance=inst.id,
               minutes=outage_s / 60, kind=alert.kind, ticket=ticket.id,
               rule=rule.describe()),
        worth, evidence_at=alert.opened_at, outage=out), now)


@dataclass(frozen=True)
class FailedRun:
    """An acceptance run that failed on its tenant's request: its report, whether the
    platform ran the check itself (its stand-in agent) or the rented host's agent did, and
    who asked."""

    report_id: str
    platform_evidence: bool
    actor: str


def credit_failed_acceptance(s: Session, instance_id: str, now: datetime, run: FailedRun,
                             cap: Decimal, rule: AcceptanceRule = AcceptanceRule()) -> Decimal:
    """A delivered, leased machine that fails acceptance when its tenant asks: once per
    lease period; credited at once only when the platform ran the check itself."""
    report_id, platform_evidence, actor = run.report_id, run.platform_evidence, run.actor
    inst = s.get(Instance, instance_id)
    if inst is None or inst.status != InstanceStatus.READY.value:
        return Decimal("0.00")
    lease = s.scalar(select(Lease).where(Lease.instance_id == inst.id))
    if lease is None:
        return Decimal("0.00")
    period = _lease_period(s, inst, now)
    item = phrase("SLA credit: failed acceptance of {instance}, period {period}",
                  instance=inst.id, period=period.seq if period else 1)
    source = "the platform's stand-in agent" if platform_evidence else "the node agent"
    claim = _claim(s, inst, Claimed(
        "acceptance", f"acceptance report {report_id} ({source})", item,
        phrase("{instance} failed acceptance on request; rule: {rule}", instance=inst.id,
               rule=rule.describe()),
        acceptance_credit(period.price if period else lease.unit_price, rule),
        evidence_at=now), now)
    if claim is None:
        return Decimal("0.00")
    return _confirm(s, claim, now, actor, cap) if platform_evidence else Decimal("0.00")


# --- the operator's decisions -----------------------------------------------------------------

def _view(c: SlaClaim) -> SlaClaimView:
    return SlaClaimView(id=c.id, instance_id=c.instance_id, tenant_id=c.tenant_id, kind=c.kind,
                        evidence=c.evidence, text=c.text, amount=c.amount,
                        created_at=c.created_at, decision=c.decision, decided_at=c.decided_at,
                        decided_by=c.decided_by, note=c.note, credited=c.credited)


def list_claims(p: Records, actor: Principal, status: str | None = None, limit: int = 50,
                offset: int = 0) -> Page[SlaClaimView]:
    """A tenant's own claims; an operator's all (`status`: open, confirmed, rejected)."""
    q = select(SlaClaim)
    if not actor.is_operator:
        q = q.where(SlaClaim.tenant_id == actor.require_tenant())
    if status == "open":
        q = q.where(SlaClaim.decision.is_(None))
    elif status is not None:
        q = q.where(SlaClaim.decision == status)
    with p.db.read() as s:
        total = s.scalar(select(func.count()).select_from(q.subquery())) or 0
        rows = s.scalars(q.order_by(SlaClaim.created_at.desc(), SlaClaim.id)
                         .limit(limit).offset(offset))
        return Page(items=[_view(c) for c in rows], total=total, limit=limit, offset=offset)


def decide(p: Records, actor: Principal, claim_id: str, confirm: bool,
           note: str | None = None) -> SlaClaimView:
    """An operator confirms a claim (its credit is posted, capped per period) or rejects it,
    after checking the evidence on the platform's side (the BMC, a run from the ramdisk)."""
    actor.require_operator()
    now = p.clock.now()
    with p.db.write() as s:
        claim = s.get(SlaClaim, claim_id, with_for_update=True)
        if claim is None:
            raise NotFound("No SLA claim {claim_id}; `GET /api/v1/sla-claims` lists them.",
                           claim_id=claim_id)
        if claim.decision is not None:
            raise Conflict("Claim {claim_id} was {decision} already.",
                           claim_id=claim.id, decision=claim.decision)
        if confirm:
            _confirm(s, claim, now, by(actor), p.settings.sla_credit_cap, note)
        else:
            claim.decision, claim.decided_at, claim.decided_by = "rejected", now, by(actor)
            claim.note = note
        return _view(claim)
