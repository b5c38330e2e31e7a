"""The monthly invoice run: drafts drawn from the ledger, finalized, and corrected by
credit notes. A run claims each tenant's unbilled entries of the month (charges, usage,
SLA credits, refunds) for that tenant's draft and recomputes the draft's lines from
exactly the entries it claimed, so an entry is billed once, ever: a late entry is claimed
by the next refresh, or by next month's invoice once this one is final. Finalizing (the
invoice lifecycle's `finalize`, set-based) numbers the invoice (gapless per year) and seals
it with a digest; after that it never changes, and corrections are credit notes.
Set-based per chunk of tenants: the claim is one UPDATE per tenant, the lines one GROUP BY
per chunk. Reading invoices is services/money/invoices/views.py; their CSV and PDF
services/money/invoices/documents.py."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, tzinfo
from decimal import Decimal
from typing import Any, cast

from sqlalchemy import (
    Table,
    bindparam,
    case,
    delete,
    event,
    func,
    insert,
    inspect,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpulease.db.money_tables import (
    Invoice,
    InvoiceLine,
    InvoiceRun,
    LedgerEntry,
    Wallet,
)
from gpulease.db.tables import Event
from gpulease.db.upsert import insert_unless_present
from gpulease.domain.accounts import Principal
from gpulease.domain.billing.invoicing import BILLABLE_KINDS, VatSplit, paid_split, totals
from gpulease.domain.billing.leases import local_text
from gpulease.domain.billing.money import to_fen
from gpulease.domain.billing.proration import period_bounds, period_of, previous_period
from gpulease.domain.errors import Conflict, InvalidInput, NotFound
from gpulease.domain.phrases import phrase, stored
from gpulease.domain.states import INVOICE, InvoiceStatus
from gpulease.lifecycle.history import INVOICE_RUN, by
from gpulease.lifecycle.writer import Move, bulk, initial, transition
from gpulease.ports.records import Moves, Priced
from gpulease.schemas.money import InvoiceRunView, InvoiceView
from gpulease.services.money import billing_profiles
from gpulease.services.money.invoices import refund_notes
from gpulease.services.money.invoices.numbering import digest, next_numbers
from gpulease.services.money.invoices.views import credited, dec, invoice_view
from gpulease.services.money.payments import PAID, settle
from gpulease.services.money.wallet import Entry, post, wallet_for_update

CHUNK = 500
QUANTUM = Decimal("0.000001")
FINALIZE = bulk(Invoice, INVOICE, "finalize")
DRAFT, FINAL = InvoiceStatus.DRAFT.value, InvoiceStatus.FINAL.value
_service = func.coalesce(LedgerEntry.service_at, LedgerEntry.at)
_ledger = cast(Table, LedgerEntry.__table__)
_invoices = cast(Table, Invoice.__table__)
_lines = cast(Table, InvoiceLine.__table__)


# --- finalized invoices never change ------------------------------------------------------

# What may change on a final invoice: whether it is paid (services/money/payments.py) and the
# reminders sent while it is not (services/money/spending.py).
PAYMENT_FIELDS = frozenset({"payment_status", "amount_due", "paid_at", "dunning_sent"})


@event.listens_for(Session, "before_flush")
def _refuse_changes_to_final(s: Session, _ctx: Any, _instances: Any) -> None:
    """A guard under the services: no ORM flush may alter or delete a final invoice or
    its lines (the run's own set-based statements touch drafts only), but for whether it
    is paid and its reminders."""
    for obj in (*s.dirty, *s.deleted):
        if isinstance(obj, Invoice):
            state = inspect(obj)
            status = state.attrs.status.history
            before = (status.deleted or status.unchanged or [obj.status])[0]
            changed = {a.key for a in state.attrs if a.history.has_changes()}
            if before == FINAL and (changed - PAYMENT_FIELDS or obj in s.deleted):
                raise Conflict("Invoice {invoice} is final and cannot change; "
                               "correct it with a credit note.",
                               invoice=obj.number or obj.id)
        elif isinstance(obj, InvoiceLine):
            inv = s.get(Invoice, obj.invoice_id)
            if inv is not None and inv.status == FINAL:
                raise Conflict("Invoice {invoice} is final and cannot change; "
                               "correct it with a credit note.",
                               invoice=inv.number or inv.id)


# --- the run -------------------------------------------------------------------------------

def _check_period(period: str, now: datetime, tz: tzinfo) -> tuple[datetime, datetime]:
    """A month (of the platform's calendar) that has begun: drafting one ahead would bill
    this month's entries to it."""
    try:
        start, end = period_bounds(period, tz)
    except ValueError as exc:
        raise InvalidInput("period", str(exc)) from None
    if start > now:
        raise InvalidInput("period", "{period} has not begun; draft it from "
                                     "{start} (this month: "
                                     "{current}).",
                           period=period, start=local_text(start, tz),
                           current=period_of(now, tz))
    return start, end


def _tenants_to_bill(s: Session, period: str, end: datetime,
                     only: Sequence[str] | None) -> list[str]:
    unbilled = select(LedgerEntry.tenant_id).where(
        LedgerEntry.invoice_id.is_(None), LedgerEntry.kind.in_(BILLABLE_KINDS),
        _service < end).distinct()
    drafts = select(Invoice.tenant_id).where(Invoice.period == period,
                                             Invoice.kind == "invoice", Invoice.status == DRAFT)
    finals = set(s.scalars(select(Invoice.tenant_id).where(
        Invoice.period == period, Invoice.kind == "invoice", Invoice.status == FINAL)))
    ids = set(s.scalars(unbilled)) | set(s.scalars(drafts))
    if only is not None:
        ids &= set(only)
    # A tenant whose invoice of the period is final: late entries go on next month's.
    return sorted(ids - finals)


def _new_id() -> str:
    return "inv_" + uuid.uuid4().hex[:16]


def _ensure_drafts(s: Session, p: Priced, tenants: Sequence[str], period: str,
                   now: datetime) -> dict[str, str]:
    have: dict[str, str] = {str(t): str(i) for t, i in s.execute(select(
        Invoice.tenant_id, Invoice.id).where(
        Invoice.tenant_id.in_(tenants), Invoice.period == period, Invoice.kind == "invoice",
        Invoice.status == DRAFT))}
    missing = [t for t in tenants if t not in have]
    rules = p.catalog.pricing
    rows = [dict(id=_new_id(), tenant_id=t, kind="invoice", period=period,
                 **initial(Invoice, INVOICE), currency="CNY", vat_rate=rules.vat_rate,
                 prices_include_vat=rules.prices_include_vat, net=Decimal("0.00"),
                 vat=Decimal("0.00"), total=Decimal("0.00"), created_at=now, updated_at=now)
            for t in missing]
    if rows:
        s.execute(insert(Invoice), rows)
        have.update({str(r["tenant_id"]): str(r["id"]) for r in rows})
    return have


def _claim(s: Session, drafts: dict[str, str], end: datetime) -> None:
    """Each tenant's unbilled entries of the period (and earlier) onto its draft: one
    UPDATE … FROM the drafts for the whole chunk (PostgreSQL and SQLite ≥ 3.33)."""
    inv = _invoices
    stmt = (update(_ledger)
            .where(_ledger.c.tenant_id == inv.c.tenant_id, inv.c.id.in_(list(drafts.values())),
                   _ledger.c.invoice_id.is_(None), _ledger.c.kind.in_(BILLABLE_KINDS),
                   func.coalesce(_ledger.c.service_at, _ledger.c.at) < end)
            .values(invoice_id=inv.c.id))
    s.connection().execute(stmt)


Content = dict[str, tuple[tuple[Decimal, Decimal, Decimal], list[tuple[Any, ...]]]]


def _recompute(s: Session, drafts: dict[str, str], rate: Decimal, now: datetime) -> Content:
    """Replace the drafts' lines with one per (instance, kind, item, unit price) of their
    claimed entries; the VAT in what was paid split once per line. An invoice is never
    negative: money back beyond the month's charges is carried forward (`_carry_forward`).
    Returns each draft's totals and lines."""
    out = _lines_of(s, drafts, rate, now)
    negative = {t: i for t, i in drafts.items() if out[i][0][2] < 0}
    if negative and _carry_forward(s, negative):
        out.update(_lines_of(s, negative, rate, now))
    return out


def _drop_empty(s: Session, drafts: dict[str, str], content: Content) -> None:
    """A draft left without lines (all its money back carried forward) is no invoice."""
    empty = [i for i, (_, lines) in content.items() if not lines]
    if empty:
        s.connection().execute(delete(_invoices).where(_invoices.c.id.in_(empty),
                                                        _invoices.c.status == DRAFT))
        for tenant in [t for t, i in drafts.items() if i in empty]:
            del content[drafts.pop(tenant)]


def _carry_forward(s: Session, drafts: dict[str, str]) -> bool:
    """Drafts whose credits and refunds exceed their charges give back their latest
    money-back entries (whole entries, newest first) until their total is zero or more;
    those entries stay unbilled and go on the next month's invoice. Returns whether any
    entry was given back."""
    moved = False
    for inv_id in drafts.values():
        entries = list(s.execute(select(LedgerEntry.id, LedgerEntry.amount).where(
            LedgerEntry.invoice_id == inv_id).order_by(_service.desc(), LedgerEntry.id.desc())))
        total = -sum((to_fen(dec(a)) for _, a in entries), Decimal(0))  # billed positive
        back: list[int] = []
        for entry_id, amount in entries:
            if total >= 0:
                break
            if dec(amount) > 0:  # money back to the tenant
                back.append(entry_id)
                total += to_fen(dec(amount))
        if back:
            s.connection().execute(update(_ledger).where(_ledger.c.id.in_(back))
                                   .values(invoice_id=None))
            moved = True
    return moved


def _lines_of(s: Session, drafts: dict[str, str], rate: Decimal, now: datetime) -> Content:
    """The drafts' lines and totals from exactly the entries they claimed."""
    invoice_ids = list(drafts.values())
    s.connection().execute(delete(_lines).where(_lines.c.invoice_id.in_(invoice_ids)))
    label = func.coalesce(LedgerEntry.item, LedgerEntry.reference, LedgerEntry.kind)
    said = case((LedgerEntry.item.is_not(None), LedgerEntry.item_phrase),
                else_=LedgerEntry.phrase)  # the label as a phrase (one label, one phrase)
    rows = s.execute(
        select(LedgerEntry.invoice_id, LedgerEntry.kind, LedgerEntry.instance_id, label,
               LedgerEntry.unit, LedgerEntry.unit_price, func.sum(LedgerEntry.amount),
               func.sum(LedgerEntry.quantity),
               func.min(func.coalesce(LedgerEntry.service_from, _service)),
               func.max(func.coalesce(LedgerEntry.service_until, _service)),
               func.count(), func.min(said))
        .where(LedgerEntry.tenant_id.in_(list(drafts)),  # the (tenant, invoice) index
               LedgerEntry.invoice_id.in_(invoice_ids))
        .group_by(LedgerEntry.invoice_id, LedgerEntry.kind, LedgerEntry.instance_id, label,
                  LedgerEntry.unit, LedgerEntry.unit_price)
        .order_by(LedgerEntry.invoice_id, func.min(_service), label)).all()
    lines: list[dict[str, Any]] = []
    per_invoice: dict[str, list[VatSplit]] = {i: [] for i in invoice_ids}
    seq: dict[str, int] = {}
    for inv_id, kind, inst, text, unit, price, amount, qty, first, last, n, phrased in rows:
        inv = str(inv_id)
        split = paid_split(-to_fen(dec(amount)), rate)  # money out bills positive
        per_invoice[inv].append(split)
        seq[inv] = seq.get(inv, 0) + 1
        lines.append(dict(
            invoice_id=inv, seq=seq[inv], kind=kind, instance_id=inst,
            description=str(text)[:200], description_phrase=phrased,
            quantity=dec(qty).quantize(QUANTUM) if qty is not None else None, unit=unit,
            unit_price=dec(price).quantize(QUANTUM) if price is not None else None,
            service_from=_aware(first), service_to=_aware(last), entries=n,
            net=split.net, vat=split.vat, gross=split.gross))
    if lines:  # Core, not ORM: one batched INSERT, no primary keys fetched back
        s.connection().execute(insert(_lines), lines)
    by_invoice: dict[str, list[tuple[Any, ...]]] = {i: [] for i in invoice_ids}
    for ln in lines:
        by_invoice[ln["invoice_id"]].append(
            (ln["seq"], ln["description"], ln["net"], ln["vat"], ln["gross"]))
    out: Content = {}
    for inv, splits in per_invoice.items():
        t = totals(splits)
        out[inv] = ((t.net, t.vat, t.gross), by_invoice[inv])
    if out:
        s.connection().execute(
            update(_invoices).where(_invoices.c.id == bindparam("i"))
            .values(net=bindparam("n"), vat=bindparam("v"), total=bindparam("g"),
                    updated_at=now),
            [{"i": i, "n": n, "v": v, "g": g} for i, ((n, v, g), _) in out.items()])
    return out


def _aware(value: Any) -> datetime | None:
    """min()/max() of a datetime come back naive (SQLite) or as text; make them UTC."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    assert isinstance(value, datetime)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _finalize(s: Session, content: Content, tenants: dict[str, str], period: str,
              now: datetime, actor: str) -> int:
    """Number and seal drafts whose `content` was just computed in this transaction."""
    if not content:
        return 0
    ids = sorted(content)
    numbers = next_numbers(s, f"GL{period[:4]}", len(ids))
    tenant_of_invoice = {i: t for t, i in tenants.items()}
    buyers = billing_profiles.snapshots(s, list(tenants))
    # Paid from the prepaid wallet, but for tenants below zero: settled one by one below.
    in_debt = set(s.scalars(select(Wallet.tenant_id).where(
        Wallet.tenant_id.in_(list(tenants)), Wallet.balance < 0)))
    inv = _invoices
    s.connection().execute(
        update(inv).where(inv.c.id == bindparam("i"), FINALIZE.guard)
        .values(**FINALIZE.values, number=bindparam("num"), finalized_at=now, updated_at=now,
                digest=bindparam("dig"), buyer=bindparam("buyer"),
                payment_status=bindparam("ps"), amount_due=bindparam("due"),
                paid_at=bindparam("paid")),
        [{"i": i, "num": num, "buyer": buyers.get(tenant_of_invoice[i]),
          "dig": digest(num, tenant_of_invoice[i], period, content[i][0], content[i][1]),
          **({"ps": None, "due": None, "paid": None} if tenant_of_invoice[i] in in_debt
             else {"ps": PAID, "due": Decimal("0.00"), "paid": now})}
         for i, num in zip(ids, numbers, strict=True)])
    s.connection().execute(insert(Event), FINALIZE.events(ids, now, actor))
    if in_debt:
        settle(s, in_debt, now)
    return len(ids)


def run_period(p: Moves, period: str, finalize: bool = False,
               tenants: Sequence[str] | None = None, chunk: int = CHUNK,
               actor: str = INVOICE_RUN) -> InvoiceRunView:
    """Draft (or refresh) every tenant's invoice of `period`; with `finalize`, seal them.
    A period is finalized only after it ended."""
    now, tz = p.clock.now(), p.settings.zone
    _, end = _check_period(period, now, tz)
    if finalize and end > now:
        raise InvalidInput("period", "{period} has not ended; it can be drafted (a preview) "
                                     "but finalized only from {end}.",
                           period=period, end=local_text(end, tz))
    began = time.perf_counter()
    rules = p.catalog.pricing
    with p.db.read() as s:
        ids = _tenants_to_bill(s, period, end, tenants)
    drafted = finalized = 0
    try:
        for i in range(0, len(ids), chunk):
            part = ids[i:i + chunk]
            with p.db.write() as s:
                _lock_run(s, period)  # one run of a period at a time
                drafts = _ensure_drafts(s, p, part, period, now)
                _claim(s, drafts, end)
                content = _recompute(s, drafts, rules.vat_rate, now)
                _drop_empty(s, drafts, content)
                drafted += len(drafts)
                if finalize:
                    finalized += _finalize(s, content, drafts, period, now, actor)
                    refund_notes.issue(s, p, part, refund_notes.Finalized(period, end, now, actor))
    except IntegrityError:  # a run of the period that we waited for sealed some of ours
        raise Conflict("Another run of {period} finalized invoices while this one waited; "
                       "run it again to see what is left.", period=period) from None
    return InvoiceRunView(period=period, drafted=drafted, finalized=finalized,
                          tenants=len(ids), seconds=round(time.perf_counter() - began, 3))


def _lock_run(s: Session, period: str) -> InvoiceRun:
    """The period's run row, locked: a second run of the period waits here for the first
    (made if missing without a unique-key race: two first runs both get the one row)."""
    insert_unless_present(s, InvoiceRun, "period", period=period, invoices=0)
    row = s.get(InvoiceRun, period, with_for_update=True, populate_existing=True)
    assert row is not None
    return row


def run_invoices(p: Moves, actor: Principal, period: str, finalize: bool = False
                 ) -> InvoiceRunView:
    actor.require_operator()
    return run_period(p, period, finalize, actor=by(actor))


def finalize_invoice(p: Moves, actor: Principal, invoice_id: str) -> InvoiceView:
    """Refresh one draft from the ledger and seal it."""
    actor.require_operator()
    now = p.clock.now()
    rules = p.catalog.pricing
    with p.db.write() as s:
        inv = s.get(Invoice, invoice_id, with_for_update=True)
        if inv is None:
            raise NotFound("No invoice {invoice_id}.", invoice_id=invoice_id)
        if inv.status == FINAL:
            raise Conflict("Invoice {inv_number} is final already.", inv_number=inv.number)
        _, end = period_bounds(inv.period, p.settings.zone)
        if end > now:
            raise Conflict("{inv_period} has not ended; finalize from "
                           "{value}.",
                           inv_period=inv.period, value=local_text(end, p.settings.zone))
        _lock_run(s, inv.period)
        _claim(s, {inv.tenant_id: inv.id}, end)
        content = _recompute(s, {inv.tenant_id: inv.id}, rules.vat_rate, now)
        _finalize(s, content, {inv.tenant_id: inv.id}, inv.period, now, by(actor))
        refund_notes.issue(s, p, [inv.tenant_id],
                            refund_notes.Finalized(inv.period, end, now, by(actor)))
        s.expire(inv)
        return invoice_view(s, inv, lines=True, tz=p.settings.zone)


def sweep_invoices(p: Moves) -> InvoiceRunView | None:
    """The worker's monthly run: on the 1st, draft the month just ended; on the finalize
    day (default the 3rd), refresh and finalize it. Each step once, recorded."""
    now, tz = p.clock.now(), p.settings.zone
    period = previous_period(now, tz)
    with p.db.read() as s:
        run = s.get(InvoiceRun, period)
        drafted = run is not None and run.drafted_at is not None
        final = run is not None and run.finalized_at is not None
    if final:
        return None
    finalize = now.astimezone(tz).day >= p.settings.invoice_finalize_day
    if drafted and not finalize:
        return None
    result = run_period(p, period, finalize=finalize)
    with p.db.write() as s:
        row = _lock_run(s, period)
        row.drafted_at = row.drafted_at or now
        row.invoices = result.drafted
        if finalize:
            row.finalized_at = now
    return result


# --- credit notes --------------------------------------------------------------------------

def credit_note(p: Moves, actor: Principal, invoice_id: str, reason: str,
                amount: Decimal | None = None) -> InvoiceView:
    """Correct a final invoice: a numbered credit note for `amount` (incl. VAT; default:
    what remains of its total), paid back into the wallet at once."""
    actor.require_operator()
    reason = reason.strip()
    if not reason:
        raise InvalidInput("reason", "A credit note says why (it is printed on it).")
    now = p.clock.now()
    with p.db.write() as s:
        inv = s.get(Invoice, invoice_id, with_for_update=True)
        if inv is None or inv.kind != "invoice":
            raise NotFound("No invoice {invoice_id}.", invoice_id=invoice_id)
        if inv.status != FINAL:
            raise Conflict("Invoice {invoice_id} is a draft: it is recomputed from the "
                           "ledger until final; credit notes correct final invoices.",
                           invoice_id=invoice_id)
        remaining = inv.total - credited(s, inv.id)
        if remaining <= 0:
            raise Conflict("Invoice {inv_number} has nothing left to credit "
                           "(total ¥{inv_total:,.2f}, credited ¥{inv_total_remaining:,.2f}).",
                           inv_number=inv.number, inv_total=inv.total,
                           inv_total_remaining=inv.total - remaining)
        amount = remaining if amount is None else amount
        if amount <= 0 or amount != to_fen(amount) or amount > remaining:
            raise InvalidInput("amount", "A credit note is a positive amount with at most two "
                                         "decimals, at most the ¥{remaining:,.2f} left on "
                                         "{inv_number}; not {amount}.",
                               remaining=remaining, inv_number=inv.number, amount=amount)
        number = next_numbers(s, f"CN{now.astimezone(p.settings.zone).year}", 1)[0]  # the
        # year of the calendar invoices are issued in (1 January 03:00 Beijing is a new year)
        note = Invoice(id=_new_id(), tenant_id=inv.tenant_id, kind="credit_note",
                       period=period_of(now, p.settings.zone), **initial(Invoice, INVOICE),
                       number=number,
                       corrects_id=inv.id, reason=reason, currency=inv.currency,
                       vat_rate=inv.vat_rate, prices_include_vat=inv.prices_include_vat,
                       net=Decimal("0.00"), vat=Decimal("0.00"), total=Decimal("0.00"),
                       created_at=now, updated_at=now)
        s.add(note)
        s.flush()
        described, described_phrase = stored(phrase("Correction of {original}: {reason}",
                                                    original=inv.number, reason=reason))
        lines = _correction(s, inv, amount, remaining, (described[:200], described_phrase))
        for seq, line in enumerate(lines, 1):
            s.add(InvoiceLine(invoice_id=note.id, seq=seq, kind="credit_note", **line))
        split = VatSplit(*(sum((ln[k] for ln in lines), Decimal("0.00"))
                           for k in ("net", "vat", "gross")))
        note.net, note.vat, note.total = split.net, split.vat, split.gross
        # The money goes back to the wallet; the entry is billed by the note itself.
        post(s, wallet_for_update(s, inv.tenant_id, now), Entry(
            "credit_note", -split.gross,
            phrase("{number} corrects {original}: {reason}", number=number,
                   original=inv.number, reason=reason),
            user_id=actor.user_id, item=phrase("Credit note {number}", number=number),
            invoice_id=note.id), now)
        note.finalized_at = now
        note.digest = digest(number, inv.tenant_id, note.period,
                              (split.net, split.vat, split.gross),
                              [(seq, ln["description"], ln["net"], ln["vat"], ln["gross"])
                               for seq, ln in enumerate(lines, 1)])
        transition(s, p, note, INVOICE, "finalize", Move(now, actor=by(actor), reason=reason[:200]))
        s.flush()
        settle(s, [inv.tenant_id], now)  # money back pays what the invoices owed first
        return invoice_view(s, note, lines=True, tz=p.settings.zone)


def _correction(s: Session, inv: Invoice, amount: Decimal, remaining: Decimal,
                described: tuple[str, str | None]) -> list[dict[str, Any]]:
    """The credit note's lines. All of an invoice not credited before: its lines mirrored,
    each negated (the VAT of each line reversed as it was charged, so nothing is left over
    by rounding the total once). The rest of one credited in part: one line of exactly what
    is left of its net and VAT. A part: one line, its VAT split from the amount as paid.
    The note's one ledger entry (the money back) is billed by its first line."""
    if amount == remaining and remaining == inv.total:
        mirrored = s.scalars(select(InvoiceLine).where(InvoiceLine.invoice_id == inv.id)
                             .order_by(InvoiceLine.seq)).all()
        if mirrored:
            return [dict(instance_id=ln.instance_id, description=ln.description[:200],
                         description_phrase=ln.description_phrase, quantity=ln.quantity,
                         unit=ln.unit,
                         unit_price=None if ln.unit_price is None else -ln.unit_price,
                         service_from=ln.service_from, service_to=ln.service_to,
                         entries=1 if seq == 0 else 0, net=-ln.net, vat=-ln.vat,
                         gross=-ln.gross)
                    for seq, ln in enumerate(mirrored)]
    if amount == remaining:
        done_net, done_vat = s.execute(select(
            func.coalesce(func.sum(Invoice.net), 0), func.coalesce(func.sum(Invoice.vat), 0))
            .where(Invoice.corrects_id == inv.id, Invoice.kind == "credit_note")).one()
        vat = -(inv.vat + to_fen(dec(done_vat)))
        split = VatSplit(-(inv.net + to_fen(dec(done_net))), vat, -remaining)
    else:
        split = paid_split(-amount, inv.vat_rate)  # the amount includes VAT, as paid
    return [dict(instance_id=None, description=described[0], description_phrase=described[1],
                 quantity=None, unit=None, unit_price=None, service_from=None,
                 service_to=None, entries=1, net=split.net, vat=split.vat, gross=split.gross)]
