"""Invoices as tenants and operators read them (the run that drafts and finalizes them is
services/money/invoices/run.py; their CSV and PDF, services/money/invoices/documents.py)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from decimal import Decimal
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpulease.db.money_tables import Invoice, InvoiceLine, LedgerEntry
from gpulease.db.tables import Tenant
from gpulease.domain.accounts import Principal
from gpulease.domain.billing.invoicing import BILLABLE_KINDS
from gpulease.domain.billing.money import to_fen
from gpulease.domain.billing.proration import period_bounds, period_of, prorate_by_month
from gpulease.domain.errors import InvalidInput, NotFound
from gpulease.domain.states import InvoiceStatus
from gpulease.ports.records import Records
from gpulease.schemas import Page
from gpulease.schemas.money import (
    InvoiceLineView,
    InvoiceView,
    RevenueLineView,
    RevenueView,
)
from gpulease.services.money.billing_profiles import buyer_of
from gpulease.services.money.wallet import tenant_of

QUANTUM = Decimal("0.000001")


def dec(value: Any) -> Decimal:
    """SQLite sums Numeric as REAL; read through str so no binary float survives."""
    return Decimal(str(value or 0))


def credited(s: Session, invoice_id: str) -> Decimal:
    total = s.scalar(select(func.coalesce(func.sum(Invoice.total), 0)).where(
        Invoice.corrects_id == invoice_id, Invoice.kind == "credit_note"))
    return -to_fen(dec(total))


def credited_of(s: Session, invoice_ids: list[str]) -> dict[str, Decimal]:
    """credited for a page of invoices, in one statement."""
    out = dict.fromkeys(invoice_ids, Decimal("0.00"))
    if invoice_ids:
        for invoice_id, total in s.execute(
                select(Invoice.corrects_id, func.sum(Invoice.total))
                .where(Invoice.corrects_id.in_(invoice_ids), Invoice.kind == "credit_note")
                .group_by(Invoice.corrects_id)):
            out[str(invoice_id)] = -to_fen(dec(total))
    return out


# --- reading -------------------------------------------------------------------------------

def earned(net: Decimal, start: datetime | None, end: datetime | None, at: datetime,
           tz: tzinfo) -> list[tuple[str, Decimal]]:
    """A line's net earned month by month over its service period, pro rata by time (a
    year lease: a twelfth-ish each month); a line without a period is earned at `at`."""
    start = start or at
    end = end if end is not None and end > start else start
    return [(period_of(a, tz), part) for a, _, part in prorate_by_month(net, start, end, tz)]


def _line_view(ln: InvoiceLine, at: datetime, tz: tzinfo | None) -> InvoiceLineView:
    return InvoiceLineView(
        seq=ln.seq, kind=ln.kind, instance_id=ln.instance_id, description=ln.description,
        description_phrase=ln.description_phrase,
        quantity=dec(ln.quantity).quantize(QUANTUM).normalize()
        if ln.quantity is not None else None, unit=ln.unit,
        unit_price=dec(ln.unit_price).quantize(QUANTUM).normalize()
        if ln.unit_price is not None else None,
        service_from=ln.service_from, service_to=ln.service_to, entries=ln.entries,
        net=ln.net, vat=ln.vat, gross=ln.gross,
        revenue=[RevenueLineView(period=m, net=n) for m, n in earned(
            ln.net, ln.service_from, ln.service_to, at, tz)] if tz is not None else [])


def invoice_view(s: Session, inv: Invoice, lines: bool = False, tz: tzinfo | None = None,
                 credit: Decimal | None = None, tenant_name: str | None = None
                 ) -> InvoiceView:
    """The invoice; with `lines`, its lines (and with `tz`, each line's revenue by month).
    `credit` and `tenant_name`: when the caller read them for a whole page."""
    if tenant_name is None:
        tenant = s.get(Tenant, inv.tenant_id)
        tenant_name = tenant.name if tenant else ""
    line_rows: Iterable[InvoiceLine] = s.scalars(
        select(InvoiceLine).where(InvoiceLine.invoice_id == inv.id)
        .order_by(InvoiceLine.seq)) if lines else ()
    at = inv.finalized_at or inv.created_at
    return InvoiceView(
        id=inv.id, tenant_id=inv.tenant_id, tenant_name=tenant_name,
        kind=inv.kind, period=inv.period, status=inv.status, number=inv.number,
        corrects=inv.corrects_id, reason=inv.reason, currency=inv.currency,
        vat_rate=dec(inv.vat_rate).normalize(), prices_include_vat=inv.prices_include_vat,
        net=inv.net, vat=inv.vat, total=inv.total,
        credited=(Decimal("0.00") if inv.kind != "invoice" else credit
                  if credit is not None else credited(s, inv.id)),
        created_at=inv.created_at, finalized_at=inv.finalized_at, digest=inv.digest,
        buyer=buyer_of(inv.buyer), payment_status=inv.payment_status,
        amount_due=inv.amount_due, paid_at=inv.paid_at,
        lines=[_line_view(ln, at, tz) for ln in line_rows])


def _visible(s: Session, actor: Principal, invoice_id: str) -> Invoice:
    inv = s.get(Invoice, invoice_id)
    if inv is None:
        inv = s.scalar(select(Invoice).where(Invoice.number == invoice_id))
    if inv is None or (not actor.is_operator and inv.tenant_id != actor.require_tenant()):
        raise NotFound("No invoice {invoice_id}.", invoice_id=invoice_id)
    return inv


def show_invoice(p: Records, actor: Principal, invoice_id: str) -> InvoiceView:
    """By id or number; another tenant's answers 404."""
    with p.db.read() as s:
        return invoice_view(s, _visible(s, actor, invoice_id), lines=True,
                            tz=p.settings.zone)


@dataclass(frozen=True)
class InvoiceFilter:
    """Which invoices: one tenant's (an operator's choice), of a month (YYYY-MM), by status."""

    tenant_id: str | None = None
    period: str | None = None
    status: str | None = None


def list_invoices(p: Records, actor: Principal, which: InvoiceFilter = InvoiceFilter(),
                  limit: int = 50, offset: int = 0) -> Page[InvoiceView]:
    tenant_id, period, status = which.tenant_id, which.period, which.status
    where: list[Any] = []
    if not actor.is_operator or tenant_id:
        where.append(Invoice.tenant_id == tenant_of(actor, tenant_id))
    if period:
        try:
            period_bounds(period, p.settings.zone)
        except ValueError as exc:
            raise InvalidInput("period", str(exc)) from None
        where.append(Invoice.period == period)
    if status:
        if status not in {st.value for st in InvoiceStatus}:
            raise InvalidInput("status", "Status is draft or final, not {status!r}.",
                               [st.value for st in InvoiceStatus], status=status)
        where.append(Invoice.status == status)
    with p.db.read() as s:
        total = s.scalar(select(func.count()).select_from(Invoice).where(*where)) or 0
        rows = s.scalars(select(Invoice).where(*where)
                         .order_by(Invoice.period.desc(), Invoice.created_at.desc(),
                                   Invoice.id).limit(limit).offset(offset)).all()
        # the page's tenant names and credit notes in one statement each, not one per invoice
        names = {tenant_id: name for tenant_id, name in s.execute(
            select(Tenant.id, Tenant.name).where(Tenant.id.in_({r.tenant_id for r in rows})))}
        credits = credited_of(s, [r.id for r in rows])
        return Page(items=[invoice_view(s, r, credit=credits[r.id],
                                        tenant_name=names.get(r.tenant_id, ""))
                           for r in rows], total=total, limit=limit, offset=offset)


def unbilled(s: Session, tenant_id: str) -> Decimal:
    """Billable money not yet on any invoice (what the next invoice will carry)."""
    total = s.scalar(select(func.coalesce(func.sum(LedgerEntry.amount), 0)).where(
        LedgerEntry.tenant_id == tenant_id, LedgerEntry.invoice_id.is_(None),
        LedgerEntry.kind.in_(BILLABLE_KINDS)))
    return -to_fen(dec(total))


# --- for the finance team -------------------------------------------------------------------

def export_period(p: Records, actor: Principal, period: str) -> list[InvoiceView]:
    """Operator: every final invoice and credit note of `period` with its lines and buyer,
    for the provider's fapiao system (services/invoice_documents.render_export_csv)."""
    actor.require_operator()
    try:
        period_bounds(period, p.settings.zone)
    except ValueError as exc:
        raise InvalidInput("period", str(exc)) from None
    with p.db.read() as s:
        rows = s.scalars(select(Invoice).where(Invoice.period == period,
                                               Invoice.status == InvoiceStatus.FINAL.value)
                         .order_by(Invoice.number)).all()
        return [invoice_view(s, r, lines=True, tz=p.settings.zone) for r in rows]


def revenue(p: Records, actor: Principal, start: str, end: str) -> RevenueView:
    """Operator: the net of final invoices and credit notes earned in each month from
    `start` to `end` (YYYY-MM, inclusive), each line over its service period; what was
    invoiced for later months is deferred to them."""
    actor.require_operator()
    tz = p.settings.zone
    bounds = {}
    for field, value in (("start", start), ("end", end)):
        try:
            bounds[field] = period_bounds(value, tz)
        except ValueError as exc:
            raise InvalidInput(field, str(exc)) from None
    first, last = bounds["start"][0], bounds["end"][1]
    if last <= first or (last - first).days > 3700:
        raise InvalidInput("end", "Ask for up to ten years from {start} on, not {start} to "
                                  "{end}.", start=start, end=end)
    months: dict[str, Decimal] = {}
    cursor = first
    while cursor < last:
        months[period_of(cursor, tz)] = Decimal("0.00")
        cursor = period_bounds(period_of(cursor, tz), tz)[1]
    at = func.coalesce(Invoice.finalized_at, Invoice.created_at)
    with p.db.read() as s:
        rows = s.execute(select(InvoiceLine.net, InvoiceLine.service_from,
                                InvoiceLine.service_to, at)
                         .join(Invoice, Invoice.id == InvoiceLine.invoice_id)
                         .where(Invoice.status == InvoiceStatus.FINAL.value,
                                func.coalesce(InvoiceLine.service_to, at) >= first,
                                func.coalesce(InvoiceLine.service_from, at) < last)).all()
    for net, since, until, when in rows:
        for month, part in earned(to_fen(dec(net)), _utc(since), _utc(until), _utc(when) or first,
                                  tz):
            if month in months:
                months[month] += part
    return RevenueView(start=start, end=end,
                       months=[RevenueLineView(period=m, net=n) for m, n in months.items()],
                       total=sum(months.values(), Decimal("0.00")))


def _utc(value: Any) -> datetime | None:
    """A datetime read by a raw select: naive (SQLite) or text; aware UTC."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    assert isinstance(value, datetime)
    return value if value.tzinfo else value.replace(tzinfo=UTC)
