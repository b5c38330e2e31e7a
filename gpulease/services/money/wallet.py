"""The prepaid wallet: a balance per tenant, an optional credit limit, and an append-only
ledger whose amounts always sum to the balance. An order holds its first period; delivery
turns the hold into a charge; an order that never reaches the tenant gets it back."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.orm import Session

from gpulease.db.money_tables import LedgerEntry, Wallet
from gpulease.db.tables import Instance, Tenant
from gpulease.domain.accounts import Principal
from gpulease.domain.billing import invoicing
from gpulease.domain.billing.credits import SlaRule, late_delivery_credit
from gpulease.domain.billing.money import to_fen
from gpulease.domain.billing.pricing import unit_price
from gpulease.domain.errors import Conflict, InvalidInput, NotFound, PaymentRequired
from gpulease.domain.phrases import Phrase, phrase, stored
from gpulease.lifecycle.history import WORKER, note
from gpulease.ports.records import Priced, Records
from gpulease.schemas import Page
from gpulease.schemas.money import LedgerEntryView, WalletView
from gpulease.services.money import payments, spending

MAX_TOP_UP = Decimal("100000000")  # ¥100M in one top-up: beyond that it is a typo


def wallet_for_update(s: Session, tenant_id: str, now: datetime) -> Wallet:
    """The tenant's wallet, locked for this transaction (created on first use)."""
    wallet = s.get(Wallet, tenant_id, with_for_update=True)
    if wallet is None:
        if s.get(Tenant, tenant_id) is None:
            raise NotFound("No tenant {tenant_id}.", tenant_id=tenant_id)
        wallet = Wallet(tenant_id=tenant_id, balance=Decimal("0.00"),
                        credit_limit=Decimal("0.00"), updated_at=now)
        s.add(wallet)
        s.flush()
    return wallet


@dataclass(frozen=True)
class Entry:
    """One ledger entry as it is posted: its kind and signed amount; why (a reference, kept
    as English text and as a phrase to be said in the reader's language), about what
    instance and by whom; and what an invoice line shows for it: `item`, `quantity` ×
    `unit_price` of `unit`, `service_at` (the month whose invoice carries it: default the
    posting's) and `service`, the span it pays for (its revenue is earned over it); or the
    invoice it belongs to (a credit note's)."""

    kind: str
    amount: Decimal
    reference: str | Phrase | None = None
    instance_id: str | None = None
    user_id: str | None = None
    item: str | Phrase | None = None
    quantity: Decimal | None = None
    unit: str | None = None
    unit_price: Decimal | None = None
    service_at: datetime | None = None
    service: tuple[datetime, datetime] | None = None
    invoice_id: str | None = None


def post(s: Session, wallet: Wallet, entry: Entry, now: datetime) -> LedgerEntry:
    """Append one entry; the balance moves by exactly its amount in the same
    transaction."""
    reference, item, service = entry.reference, entry.item, entry.service
    english, phrased = stored(reference) if reference is not None else (None, None)
    item_text, item_phrased = stored(item) if item is not None else (None, None)
    amount = to_fen(entry.amount)
    wallet.balance = to_fen(wallet.balance + amount)
    wallet.updated_at = now
    row = LedgerEntry(tenant_id=wallet.tenant_id, at=now, kind=entry.kind, amount=amount,
                      balance_after=wallet.balance,
                      reference=english[:200] if english is not None else None,
                      phrase=phrased, instance_id=entry.instance_id, created_by=entry.user_id,
                      item=item_text[:200] if item_text is not None else None,
                      item_phrase=item_phrased, quantity=entry.quantity, unit=entry.unit,
                      unit_price=entry.unit_price, service_at=entry.service_at,
                      invoice_id=entry.invoice_id,
                      service_from=service[0] if service else None,
                      service_until=service[1] if service else None)
    s.add(row)
    return row


def _sum(s: Session, *where: Any) -> Decimal:
    """The sum of ledger amounts matching `where`, exact to the fen (SQLite sums REALs)."""
    total = s.scalar(select(func.coalesce(func.sum(LedgerEntry.amount), 0)).where(*where))
    return to_fen(Decimal(str(total or 0)))


def require_cover(wallet: Wallet, amount: Decimal, what: Phrase) -> None:
    """Refuse with 402 and the amount missing when balance plus credit limit fall short."""
    available = wallet.balance + wallet.credit_limit
    if amount > available:
        missing = to_fen(amount - available)
        raise PaymentRequired(
            "{what} ¥{amount:,.2f}; your balance ¥{wallet_balance:,.2f} with credit limit "
            "¥{wallet_credit_limit:,.2f} leaves ¥{missing:,.2f} missing. Top up your "
            "account, then try again.", missing,
            what=what, amount=amount, wallet_balance=wallet.balance,
            wallet_credit_limit=wallet.credit_limit, missing=missing)


def first_hold(s: Session, instance_id: str) -> Decimal | None:
    """What the order held for its first period (a positive amount), or None when it held
    nothing: the price a lease or a container keeps while it runs."""
    held = s.scalar(select(LedgerEntry.amount).where(
        LedgerEntry.instance_id == instance_id, LedgerEntry.kind == "hold").limit(1))
    return to_fen(-Decimal(str(held))) if held is not None else None


def payable(p: Priced, amount: Decimal) -> Decimal:
    """What the tenant pays for `amount` at the price book's prices: with VAT on top when
    prices exclude it (domain/billing/invoicing.py: one way for quotes, holds, charges, usage)."""
    rules = p.catalog.pricing
    return invoicing.payable(amount, rules.vat_rate, rules.prices_include_vat)


def container_hour(p: Priced, offer_id: str, gpus: int) -> Decimal:
    """One hour of `gpus` GPUs of a container offer at today's prices, VAT included: what a
    container order holds."""
    offer = p.price_book().container_offer_by_id[offer_id]
    return payable(p, to_fen(offer.price_per_gpu_hour * gpus))


def first_period_amount(p: Priced, inst: Instance, term: str | None = None) -> Decimal:
    """What one period of `term` (default: the instance's) costs the tenant for every
    server at today's prices (bare metal), or one hour of its GPUs (containers), VAT
    included: what an order holds, the same as its quote's total."""
    book = p.price_book()
    if inst.kind == "container":
        return container_hour(p, inst.container_offer or "", inst.gpu_count)
    bare = book.offer(inst.sku, inst.region)
    assert bare is not None
    return payable(p, to_fen(unit_price(book, bare, term or inst.term) * inst.node_count))


def first_period_phrase(inst: Instance) -> Phrase:
    """What the ledger calls an order's first period (its hold, then its charge)."""
    return phrase("first {term} of {instance}", term=phrase(inst.term), instance=inst.id)


def first_period_item(inst: Instance) -> Phrase:
    """The invoice label of an order's first period."""
    if inst.kind == "container":
        return phrase("{what} · {region} · {first}", what=inst.container_offer,
                      region=inst.region, first=phrase("first {term} of {instance}",
                                                       term=phrase("hour"), instance=inst.id))
    return phrase("{what} · {region} · {first}", what=inst.sku, region=inst.region,
                  first=first_period_phrase(inst))


# Debit only when covered and the tenant is not suspended, and say the new balance: the
# lock, the check and the write in one statement. ROUND keeps SQLite (which stores REALs)
# on whole fen, as post() does.
_TAKE_IF_COVERED = (
    update(Wallet)
    .where(Wallet.tenant_id == bindparam("tenant"), Wallet.suspended_at.is_(None),
           Wallet.balance + Wallet.credit_limit >= bindparam("amount", type_=Wallet.balance.type))
    .values(balance=func.round(Wallet.balance - bindparam("amount"), 2),
            updated_at=bindparam("at", type_=Wallet.updated_at.type))
    .returning(Wallet.balance)
)


def hold_first_period(s: Session, p: Priced, inst: Instance, now: datetime,
                      extra: Decimal = Decimal(0)) -> Decimal:
    """Hold the order's first period (and `extra`: its add-ons'), or refuse with 402 and
    the amount missing. Called in the order's own transaction: a refusal writes nothing."""
    amount = first_period_amount(p, inst) + extra
    reference = first_period_phrase(inst)
    conn = s.connection()
    balance = conn.execute(_TAKE_IF_COVERED, {"tenant": inst.tenant_id, "amount": amount,
                                              "at": now}).scalar()
    if balance is None:  # no wallet yet, short or suspended: the exact check says which
        wallet = wallet_for_update(s, inst.tenant_id, now)
        if wallet.suspended_at is not None:
            raise PaymentRequired(
                "New orders are refused: your account is suspended ({reason})."
                " Top up your account (or pay the invoice), then order again.",
                max(Decimal("0.00"), -to_fen(wallet.balance + wallet.credit_limit)),
                reason=wallet.suspended_reason)
        require_cover(wallet, amount, phrase("This order holds its first {term}:",
                                             term=phrase(inst.term)))
        post(s, wallet, Entry("hold", -amount, reference, instance_id=inst.id), now)
        return amount
    # The entry post() would write (the columns it leaves empty stay NULL).
    english, phrased = stored(reference)
    conn.execute(insert(LedgerEntry), {
        "tenant_id": inst.tenant_id, "at": now, "kind": "hold", "amount": -amount,
        "balance_after": to_fen(Decimal(balance)), "reference": english,
        "phrase": phrased, "instance_id": inst.id})
    return amount


@dataclass(frozen=True)
class Line:
    """One more thing a charge pays for, on its own invoice line (an add-on's periods)."""

    item: str | Phrase
    amount: Decimal
    quantity: Decimal | None = None
    unit: str | None = None
    unit_price: Decimal | None = None


@dataclass(frozen=True)
class Charge:
    """What a charge takes: `amount` (`quantity` × `unit_price` of `unit`, where given) for
    `reference` on an instance, for the `service` span, and the `extras` with it (a
    renewal's add-ons), each on its own invoice line."""

    amount: Decimal
    reference: str | Phrase
    instance_id: str | None = None
    service: tuple[datetime, datetime] | None = None
    extras: Sequence[Line] = ()
    quantity: Decimal | None = None
    unit: str | None = None
    unit_price: Decimal | None = None


def charge(s: Session, tenant_id: str, what: Charge, now: datetime) -> None:
    """Take the charge and its extras now, or refuse with 402 and the amount missing: all
    or nothing."""
    amount, reference, instance_id, extras, service = (
        what.amount, what.reference, what.instance_id, what.extras, what.service)
    wallet = wallet_for_update(s, tenant_id, now)
    require_cover(wallet, amount + sum((x.amount for x in extras), Decimal(0)),
                  phrase("This costs"))
    post(s, wallet, Entry("charge", -amount, reference, instance_id, item=reference,
                          quantity=what.quantity, unit=what.unit, unit_price=what.unit_price,
                          service=service), now)
    for x in extras:
        post(s, wallet, Entry("charge", -x.amount, phrase("{item} ({reference})", item=x.item,
                                                          reference=reference),
                              instance_id, item=x.item, quantity=x.quantity, unit=x.unit,
                              unit_price=x.unit_price, service=service), now)


def credit_late_delivery(s: Session, inst: Instance, now: datetime, sla_s: float,
                         rule: SlaRule = SlaRule(), actor: str = WORKER) -> Decimal:
    """A delivery later than the SLA earns a credit on the first period, by the documented
    rule, straight into the wallet (shown in the ledger and the instance's stages). Only the
    platform's own time counts: what the delivery waited on its tenant is left out."""
    first = -_sum(s, LedgerEntry.instance_id == inst.id, LedgerEntry.kind == "charge")
    took = (now - inst.ordered_at).total_seconds() - (inst.tenant_wait_s or 0.0)
    credit, percent = late_delivery_credit(took, sla_s, first, rule)
    credit_sla(s, inst, SlaCredit(
        credit, phrase("SLA credit: late delivery of {instance}", instance=inst.id),
        phrase("({percent:f}%) delivered in {took:.0f} min against {sla:.0f} min; "
               "rule: {rule}", percent=percent.normalize(), took=took / 60,
               sla=sla_s / 60, rule=rule.describe())), now, actor=actor)
    return credit


@dataclass(frozen=True)
class SlaCredit:
    """An SLA credit: how much, the invoice line it becomes (`item`), and why (`text`)."""

    amount: Decimal
    item: str | Phrase
    text: str | Phrase


def credit_sla(s: Session, inst: Instance, credit: SlaCredit, now: datetime, *,
               actor: str) -> None:
    """Post an SLA credit (outage, failed acceptance): into the wallet at once, onto the
    next invoice as a negative line, and into the instance's history."""
    if credit.amount <= 0:
        return
    said = phrase("SLA credit ¥{credit:,.2f}: {text}", credit=credit.amount, text=credit.text)
    post(s, wallet_for_update(s, inst.tenant_id, now),
         Entry("credit", credit.amount, said, inst.id, item=credit.item), now)
    note(s, now, inst.id, "sla_credit", said, actor=actor)


def has_credit(s: Session, instance_id: str, item: str) -> bool:
    return s.scalar(select(LedgerEntry.id).where(
        LedgerEntry.instance_id == instance_id, LedgerEntry.kind == "credit",
        LedgerEntry.item == item).limit(1)) is not None


def _held(s: Session, instance_id: str) -> Decimal:
    return -_sum(s, LedgerEntry.instance_id == instance_id,
                 LedgerEntry.kind.in_(("hold", "hold_release")))


def charge_hold(s: Session, inst: Instance, now: datetime, until: datetime,
                extras: Sequence[Line] = ()) -> None:
    """Delivery: the order's hold becomes the charge for its first period (which runs
    until `until`): the servers' line and one for each of the `extras` it held for."""
    held = _held(s, inst.id)
    if held > 0:
        wallet = wallet_for_update(s, inst.tenant_id, now)
        post(s, wallet, Entry("hold_release", held,
                              phrase("delivered {instance}", instance=inst.id), inst.id), now)
        for x in extras:
            post(s, wallet, Entry("charge", -x.amount, phrase(
                "{item} (first {term})", item=x.item, term=phrase(inst.term)), inst.id,
                item=x.item, quantity=x.quantity, unit=x.unit, unit_price=x.unit_price,
                service=(now, until)), now)
        held -= sum((x.amount for x in extras), Decimal(0))
        count = Decimal(inst.node_count if inst.kind != "container" else inst.gpu_count)
        post(s, wallet, Entry(
            "charge", -held, phrase("{first} ({sku})", first=first_period_phrase(inst),
                                    sku=inst.sku), inst.id,
            item=first_period_item(inst), quantity=count,
            unit="server" if inst.kind != "container" else "GPU-hour",
            unit_price=to_fen(held / count) if count else None, service=(now, until)), now)


def return_hold(s: Session, inst: Instance, now: datetime) -> None:
    """An order that ends without being delivered gets its hold back (once)."""
    held = _held(s, inst.id)
    if held > 0:
        post(s, wallet_for_update(s, inst.tenant_id, now), Entry(
            "hold_release", held, phrase("not delivered: {instance}", instance=inst.id),
            inst.id), now)


def top_up(p: Records, actor: Principal, tenant_id: str, amount: Decimal, reference: str
           ) -> WalletView:
    """An operator records money received (bank transfer, invoice payment) with its
    reference; the same reference twice is refused, so a retried request cannot double it.
    A top-up that covers an overdraft lifts its suspension at once, not at the next sweep."""
    actor.require_operator()
    if amount <= 0 or amount != to_fen(amount):
        raise InvalidInput("amount", "A top-up is a positive amount in yuan with at most two "
                                     "decimals, not {amount}.", amount=amount)
    if amount > MAX_TOP_UP:
        raise InvalidInput("amount", "A top-up above ¥{max_top_up:,.0f} is refused as a "
                                     "likely typo; split it into several.", max_top_up=MAX_TOP_UP)
    reference = reference.strip()
    if not reference:
        raise InvalidInput("reference", "A top-up needs the payment's reference (bank "
                                        "transfer id, receipt number).")
    now = p.clock.now()
    with p.db.write() as s:
        wallet = wallet_for_update(s, tenant_id, now)
        dup = s.scalar(select(LedgerEntry.id).where(
            LedgerEntry.tenant_id == tenant_id, LedgerEntry.kind == "topup",
            LedgerEntry.reference == reference))
        if dup is not None:
            raise Conflict("A top-up with reference {reference!r} is already recorded for "
                           "this tenant; nothing was added.", reference=reference)
        post(s, wallet, Entry("topup", amount, reference, user_id=actor.user_id), now)
        s.flush()
        payments.settle(s, [tenant_id], now)  # money in settles unpaid invoices
        spending.check_overdraft(s, p, wallet, now)  # and lifts an overdraft's suspension
        return _view(s, wallet)


def payout(p: Records, actor: Principal, tenant_id: str, amount: Decimal, reference: str
           ) -> WalletView:
    """An operator records wallet balance paid back to the tenant's original payment (a
    bank refund); at most the balance (never the credit limit), one reference once."""
    actor.require_operator()
    reference = reference.strip()
    if amount <= 0 or amount != to_fen(amount):
        raise InvalidInput("amount", "A payout is a positive amount in yuan with at most two "
                                     "decimals, not {amount}.", amount=amount)
    if not reference:
        raise InvalidInput("reference", "A payout needs the refund's reference (bank "
                                        "transfer id).")
    now = p.clock.now()
    with p.db.write() as s:
        wallet = wallet_for_update(s, tenant_id, now)
        if amount > wallet.balance:
            raise InvalidInput("amount", "The balance is ¥{wallet_balance:,.2f}; at most that "
                                         "can be paid out (a credit limit is not money held).",
                               wallet_balance=wallet.balance)
        dup = s.scalar(select(LedgerEntry.id).where(
            LedgerEntry.tenant_id == tenant_id, LedgerEntry.kind == "payout",
            LedgerEntry.reference == reference))
        if dup is not None:
            raise Conflict("A payout with reference {reference!r} is already recorded for "
                           "this tenant; nothing was paid out.", reference=reference)
        post(s, wallet, Entry("payout", -amount, reference, user_id=actor.user_id), now)
        s.flush()
        payments.settle(s, [tenant_id], now)
        return _view(s, wallet)


def set_credit_limit(p: Records, actor: Principal, tenant_id: str, limit: Decimal
                     ) -> WalletView:
    actor.require_operator()
    if limit < 0 or limit != to_fen(limit):
        raise InvalidInput("credit_limit", "A credit limit is zero or a positive amount with "
                                           "at most two decimals, not {limit}.", limit=limit)
    now = p.clock.now()
    with p.db.write() as s:
        wallet = wallet_for_update(s, tenant_id, now)
        wallet.credit_limit, wallet.updated_at = limit, now
        return _view(s, wallet)


def _view(s: Session, wallet: Wallet) -> WalletView:
    held = -_sum(s, LedgerEntry.tenant_id == wallet.tenant_id,
                 LedgerEntry.kind.in_(("hold", "hold_release")))
    return WalletView(tenant_id=wallet.tenant_id, balance=wallet.balance,
                      credit_limit=wallet.credit_limit, held=to_fen(held),
                      available=to_fen(wallet.balance + wallet.credit_limit),
                      updated_at=wallet.updated_at, overdrawn_since=wallet.overdrawn_since,
                      suspended_reason=wallet.suspended_reason if wallet.suspended_at
                      else None)


def tenant_of(actor: Principal, tenant_id: str | None) -> str:
    if actor.is_operator:
        if not tenant_id:
            raise InvalidInput("tenant", "An operator names the tenant (?tenant=ID).")
        return tenant_id
    own = actor.require_tenant()
    if tenant_id and tenant_id != own:
        raise NotFound("No tenant {tenant_id} in your account.", tenant_id=tenant_id)
    return own


def show_wallet(p: Records, actor: Principal, tenant_id: str | None = None) -> WalletView:
    tenant = tenant_of(actor, tenant_id)
    with p.db.write() as s:  # creates the empty wallet on first look
        return _view(s, wallet_for_update(s, tenant, p.clock.now()))


def ledger(p: Records, actor: Principal, tenant_id: str | None = None, limit: int = 50,
           offset: int = 0) -> Page[LedgerEntryView]:
    tenant = tenant_of(actor, tenant_id)
    with p.db.read() as s:
        total = s.scalar(select(func.count()).select_from(LedgerEntry).where(
            LedgerEntry.tenant_id == tenant)) or 0
        rows = s.scalars(select(LedgerEntry).where(LedgerEntry.tenant_id == tenant)
                         .order_by(LedgerEntry.id.desc()).limit(limit).offset(offset))
        items = [LedgerEntryView(id=r.id, at=r.at, kind=r.kind, amount=r.amount,
                                 balance_after=r.balance_after, reference=r.reference,
                                 instance_id=r.instance_id, phrase=r.phrase) for r in rows]
    return Page(items=items, total=total, limit=limit, offset=offset)


def ledger_sums_to_balance(s: Session, tenant_id: str) -> bool:
    """The invariant: the append-only ledger always sums to the balance."""
    wallet = s.get(Wallet, tenant_id)
    return (wallet.balance if wallet else Decimal(0)) == _sum(s, LedgerEntry.tenant_id == tenant_id)

