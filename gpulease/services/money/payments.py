"""Whether final invoices are paid. The wallet is prepaid, so an invoice is paid when it is
finalized, unless the tenant spent on credit (its balance below zero); then what the
invoices owe is due on the newest ones, and money coming in settles the oldest first.
What is owed on invoices is the balance without the money not yet invoiced (this month's
spending, open holds): spending after an invoice never makes that invoice unpaid."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from gpulease.db.money_tables import Invoice, LedgerEntry, Wallet
from gpulease.domain.billing.invoicing import BILLABLE_KINDS
from gpulease.domain.billing.money import to_fen
from gpulease.domain.states import InvoiceStatus

PAID, UNPAID = "paid", "unpaid"


def _amount(s: Session, *where: Any) -> Decimal:
    total = s.scalar(select(func.coalesce(func.sum(LedgerEntry.amount), 0)).where(*where))
    return to_fen(Decimal(str(total or 0)))


def owed_on_invoices(s: Session, tenant_id: str) -> Decimal:
    """What the tenant's final invoices still owe: the balance less the money not yet on a
    final invoice, when below zero."""
    wallet = s.get(Wallet, tenant_id)
    if wallet is None:
        return Decimal("0.00")
    final = select(Invoice.id).where(Invoice.status == InvoiceStatus.FINAL.value)
    not_invoiced = _amount(
        s, LedgerEntry.tenant_id == tenant_id,
        or_(LedgerEntry.kind.in_(("hold", "hold_release")),
            LedgerEntry.kind.in_(BILLABLE_KINDS) & (LedgerEntry.invoice_id.is_(None)
                                                    | LedgerEntry.invoice_id.not_in(final))))
    return max(Decimal("0.00"), -(wallet.balance - not_invoiced))


def settle(s: Session, tenant_ids: Iterable[str], now: datetime) -> None:
    """Mark each tenant's final invoices paid or unpaid (with what is due), the debt on the
    newest. An invoice once paid stays paid."""
    for tenant in set(tenant_ids):
        owed = owed_on_invoices(s, tenant)
        open_ones = s.scalars(select(Invoice).where(
            Invoice.tenant_id == tenant, Invoice.kind == "invoice",
            Invoice.status == InvoiceStatus.FINAL.value,
            or_(Invoice.payment_status.is_(None), Invoice.payment_status == UNPAID))
            .order_by(Invoice.finalized_at.desc(), Invoice.number.desc()))
        for inv in open_ones:
            due = min(inv.total, owed)
            owed -= due
            if due > 0:
                inv.payment_status, inv.amount_due, inv.paid_at = UNPAID, due, None
            else:
                inv.payment_status, inv.amount_due = PAID, Decimal("0.00")
                inv.paid_at = inv.paid_at or now
