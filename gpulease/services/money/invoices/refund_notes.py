"""Money back beyond a month's charges ends in a credit note. An invoice is never negative,
so a refund or a credit larger than what its month billed is left out of that month's
invoice (invoices/run.py). When the month is finalized, each such entry goes on a credit
note against the earlier final invoice that billed its instance (the newest one with room
for it), one line per entry with its VAT reversed at that invoice's rate and its service
period (so revenue falls back in the months it was to be earned). The money was already
paid into the wallet when the entry was posted: the note documents it and posts nothing.
An entry no earlier invoice has room for waits, unbilled, for the next month's charges."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpulease.db.money_tables import Invoice, InvoiceLine, LedgerEntry
from gpulease.domain.billing.invoicing import BILLABLE_KINDS, VatSplit, paid_split, totals
from gpulease.domain.billing.money import to_fen
from gpulease.domain.phrases import phrase
from gpulease.domain.states import INVOICE, InvoiceStatus
from gpulease.lifecycle.writer import Move, initial, transition
from gpulease.ports.records import Moves
from gpulease.services.money.invoices.numbering import digest, next_numbers
from gpulease.services.money.invoices.views import credited
from gpulease.services.money.payments import settle

FINAL = InvoiceStatus.FINAL.value
_service = func.coalesce(LedgerEntry.service_at, LedgerEntry.at)


@dataclass
class _Note:
    """The credit note being made against one invoice: the entries it documents."""

    invoice: Invoice
    room: Decimal
    entries: list[LedgerEntry] = field(default_factory=list)


@dataclass(frozen=True)
class Finalized:
    """The month just finalized (`period`, ending at `end`), when and by whom."""

    period: str
    end: datetime
    now: datetime
    actor: str


def issue(s: Session, p: Moves, tenants: Sequence[str], month: Finalized) -> int:
    """Credit notes for the money back of the month (and before) that its tenants'
    invoices left out; returns how many were issued."""
    if not tenants:
        return 0
    period, end, now, actor = month.period, month.end, month.now, month.actor
    left_out = list(s.scalars(
        select(LedgerEntry).where(
            LedgerEntry.tenant_id.in_(list(tenants)), LedgerEntry.invoice_id.is_(None),
            LedgerEntry.kind.in_(BILLABLE_KINDS), LedgerEntry.amount > 0, _service < end)
        .order_by(_service, LedgerEntry.id).with_for_update()))
    notes: dict[str, _Note] = {}
    for entry in left_out:
        note = _room_for(s, entry, period, notes)
        if note is not None:
            note.entries.append(entry)
            note.room -= to_fen(entry.amount)
    made = [n for n in notes.values() if n.entries]
    for note in made:
        _make(s, p, note, period, now, actor)
    if made:
        settle(s, {n.invoice.tenant_id for n in made}, now)
    return len(made)


def _room_for(s: Session, entry: LedgerEntry, period: str, notes: dict[str, _Note]
              ) -> _Note | None:
    """The newest final invoice before `period` that billed the entry's instance (any of
    the tenant's, for an entry without one) with room for the whole entry."""
    q = (select(Invoice).where(Invoice.tenant_id == entry.tenant_id,
                               Invoice.kind == "invoice", Invoice.status == FINAL,
                               Invoice.period < period)
         .order_by(Invoice.finalized_at.desc(), Invoice.number.desc()))
    if entry.instance_id is not None:
        q = q.where(Invoice.id.in_(select(InvoiceLine.invoice_id).where(
            InvoiceLine.instance_id == entry.instance_id, InvoiceLine.gross > 0)))
    amount = to_fen(entry.amount)
    for inv in s.scalars(q.with_for_update()):
        note = notes.get(inv.id)
        if note is None:
            note = notes[inv.id] = _Note(inv, inv.total - credited(s, inv.id))
        if note.room >= amount:
            return note
    return None


def _make(s: Session, p: Moves, note: _Note, period: str, now: datetime, actor: str
          ) -> None:
    inv = note.invoice
    number = next_numbers(s, f"CN{now.astimezone(p.settings.zone).year}", 1)[0]
    reason = f"money back beyond the charges of {period}"
    doc = Invoice(id="inv_" + uuid.uuid4().hex[:16], tenant_id=inv.tenant_id,
                  kind="credit_note", period=period, **initial(Invoice, INVOICE),
                  number=number, corrects_id=inv.id, reason=reason, currency=inv.currency,
                  vat_rate=inv.vat_rate, prices_include_vat=inv.prices_include_vat,
                  net=Decimal("0.00"), vat=Decimal("0.00"), total=Decimal("0.00"),
                  created_at=now, updated_at=now)
    s.add(doc)
    s.flush()
    splits: list[VatSplit] = []
    sealed: list[tuple[int, str, Decimal, Decimal, Decimal]] = []
    for seq, entry in enumerate(note.entries, start=1):
        split = paid_split(-to_fen(entry.amount), inv.vat_rate)  # line by line
        splits.append(split)
        label = entry.item or entry.reference or entry.kind
        said = entry.item_phrase if entry.item else entry.phrase
        s.add(InvoiceLine(
            invoice_id=doc.id, seq=seq, kind=entry.kind, instance_id=entry.instance_id,
            description=label[:200], description_phrase=said, quantity=entry.quantity,
            unit=entry.unit, unit_price=entry.unit_price,
            service_from=entry.service_from or entry.service_at or entry.at,
            service_to=entry.service_until or entry.service_at or entry.at, entries=1,
            net=split.net, vat=split.vat, gross=split.gross))
        sealed.append((seq, label[:200], split.net, split.vat, split.gross))
        entry.invoice_id = doc.id  # billed by the note
    t = totals(splits)
    doc.net, doc.vat, doc.total = t.net, t.vat, t.gross
    doc.finalized_at = now
    doc.digest = digest(number, inv.tenant_id, period, (t.net, t.vat, t.gross), sealed)
    transition(s, p, doc, INVOICE, "finalize", Move(now, actor=actor, reason=str(phrase(
        "{number} documents money back beyond the charges of {period}, against {original}",
        number=number, period=period, original=inv.number))))
