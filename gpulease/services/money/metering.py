"""Metering: usage records under idempotency keys, rated at the price book and charged to
the wallet in the same transaction. Containers are metered by the worker: each started
GPU-hour after the first (which the order held) is charged as it starts, under a key made
from the instance and the hour, so a worker that dies mid-write loses nothing and a rerun
bills nothing twice. Other usage (egress, extra storage) is reported through the API."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, tzinfo
from decimal import Decimal

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpulease.db.money_tables import UsageRecord, Wallet
from gpulease.db.repositories import get_instance
from gpulease.db.tables import Instance
from gpulease.domain.accounts import Principal
from gpulease.domain.billing.invoicing import USAGE_KINDS
from gpulease.domain.billing.money import to_fen
from gpulease.domain.billing.proration import period_bounds, period_of, prorate_by_month
from gpulease.domain.errors import Conflict, InvalidInput, NotFound
from gpulease.domain.phrases import Phrase, phrase
from gpulease.domain.states import USAGE, UsageStatus
from gpulease.lifecycle.history import by
from gpulease.lifecycle.writer import Move, initial, transition
from gpulease.ports.records import Moves, Priced, Records
from gpulease.schemas import Page
from gpulease.schemas.money import UsageIn, UsageView
from gpulease.services.money import spending
from gpulease.services.money.usage_bounds import Usage, beyond_bounds
from gpulease.services.money.wallet import (
    Entry,
    first_hold,
    payable,
    post,
    require_cover,
    tenant_of,
    wallet_for_update,
)

HOUR = timedelta(hours=1)
MAX_SPAN = timedelta(days=62)  # one report covers at most two months
MAX_HOURS_PER_SWEEP = 168  # a worker back from a long stop catches up a week per sweep
QUANTUM = Decimal("0.000001")


def _gpu_hour_price(s: Session, inst: Instance) -> Decimal:
    """A container's GPU-hour at the price its order held (a price change never alters a
    running instance)."""
    held = first_hold(s, inst.id)
    if held is not None and inst.gpu_count:
        return held / inst.gpu_count
    raise InvalidInput("instance_id", "{instance} holds no GPU-hour price.", instance=inst.id)


def unit_price(s: Session, p: Priced, inst: Instance | None, kind: str) -> Decimal:
    """The price of one unit of `kind`: a container's GPU-hour as its order held it (VAT
    included, as paid), an add-on's unit from the price book (as written there)."""
    unit = USAGE_KINDS[kind]
    if unit.addon is None:
        assert inst is not None, "GPU-hours are an instance's"
        if inst.kind != "container":
            raise InvalidInput("kind", "{instance} is {kind_words}: its "
                                       "GPUs are leased by the term, not metered by the hour.",
                               ["egress_gb", "storage_gb_days"],
                               instance=inst.id, kind_words=inst.kind.replace('_', ' '))
        return _gpu_hour_price(s, inst)
    addon = p.catalog.addon_by_id.get(unit.addon)
    if addon is None:
        raise InvalidInput("kind", "The price book has no add-on {unit_addon!r} to price "
                                   "{kind}; the operator adds it to the catalog.",
                           unit_addon=unit.addon, kind=kind)
    return addon.price / unit.divisor


def _item(inst: Instance | None, kind: str) -> Phrase:
    if inst is None:
        return {"object_gb_days": phrase("Object storage")}[kind]
    what = {"gpu_hours": phrase("GPU-hours of {offer}", offer=inst.container_offer),
            "egress_gb": phrase("Data egress"), "storage_gb_days": phrase("Extra storage")}[kind]
    return phrase("{what} · {instance}", what=what, instance=inst.id)


def _same(row: UsageRecord, inst_id: str | None, kind: str, quantity: Decimal, start: datetime,
          end: datetime) -> bool:
    return (row.instance_id == inst_id and row.kind == kind
            and Decimal(str(row.quantity)).quantize(QUANTUM) == quantity.quantize(QUANTUM)
            and row.started_at == start and row.ended_at == end)


def _view(row: UsageRecord, duplicate: bool = False) -> UsageView:
    return UsageView(id=row.id, key=row.key, status=row.status,
                     held_reason=row.held_reason, instance_id=row.instance_id, kind=row.kind,
                     quantity=Decimal(str(row.quantity)).quantize(QUANTUM).normalize(),
                     unit=USAGE_KINDS[row.kind].unit,
                     unit_price=Decimal(str(row.unit_price)).quantize(QUANTUM).normalize(),
                     amount=row.amount, started_at=row.started_at, ended_at=row.ended_at,
                     recorded_at=row.recorded_at, source=row.source, duplicate=duplicate)


def record(s: Session, p: Priced, inst: Instance, usage: Usage, now: datetime
           ) -> tuple[UsageRecord, bool]:
    """Rate and charge one usage record of an instance; (row, duplicate). The same key
    with the same content is a duplicate and changes nothing; with other content it is a
    conflict."""
    return record_for(s, p, inst.tenant_id, inst, usage, now)


def record_for(s: Session, p: Priced, tenant_id: str, inst: Instance | None, usage: Usage,
               now: datetime) -> tuple[UsageRecord, bool]:
    """record(), also for the tenant's own usage that belongs to no instance (object
    storage)."""
    key, kind, quantity = usage.key, usage.kind, usage.quantity
    start, end, held = usage.start, usage.end, usage.held
    wallet = wallet_for_update(s, tenant_id, now)  # serializes one tenant's postings
    inst_id = inst.id if inst is not None else None
    old = s.scalar(select(UsageRecord).where(UsageRecord.tenant_id == tenant_id,
                                             UsageRecord.key == key))
    if old is not None:
        if not _same(old, inst_id, kind, quantity, start, end):
            raise Conflict("Usage key {key!r} was recorded before with other content "
                           "({old_kind} {old_quantity} of {old_instance}, "
                           "{old_started_at:%Y-%m-%d %H:%M}–{old_ended_at:%H:%M}); nothing "
                           "was recorded. Use a new key for new usage.",
                           key=key, old_kind=old.kind, old_quantity=old.quantity,
                           old_instance=old.instance_id, old_started_at=old.started_at,
                           old_ended_at=old.ended_at)
        return old, True
    price = unit_price(s, p, inst, kind)
    vat_on_top = USAGE_KINDS[kind].addon is not None  # a book price: VAT on top if it excludes it
    amount = _carried(s, p, Carry(tenant_id, inst_id, kind, price, start), quantity,
                      vat_on_top)
    if usage.cover and held is None:
        require_cover(wallet, amount, phrase("The next {unit} costs",
                                             unit=phrase(USAGE_KINDS[kind].unit)))
    row = UsageRecord(tenant_id=tenant_id, key=key, instance_id=inst_id, kind=kind,
                      quantity=quantity, unit_price=price.quantize(QUANTUM), amount=amount,
                      started_at=start, ended_at=end, recorded_at=now, source=usage.source,
                      **initial(UsageRecord, USAGE, UsageStatus.HELD if held else
                                UsageStatus.CHARGED, held[:500] if held else None))
    s.add(row)
    s.flush()  # its id, for the answer
    if held is None:
        _charge(s, wallet, inst, row, now, p.settings.zone)
        spending.check_overdraft(s, p, wallet, now)  # past the limit: told at once
    return row, False


@dataclass(frozen=True)
class Carry:
    """Whose usage of what, at which price, in the month `start` falls in."""

    tenant_id: str
    instance_id: str | None
    kind: str
    price: Decimal
    start: datetime


def _carried(s: Session, p: Priced, c: Carry, quantity: Decimal, vat_on_top: bool
             ) -> Decimal:
    """What one record is charged so that a month's records of one instance, kind and
    price sum to the fen-rounded price of their summed quantity (the rounding carried from
    record to record, never lost per record: 1,000 records of 0.0167 GPU-h at ¥1.96 make
    ¥32.73, not 1,000 × ¥0.03); VAT on top is added to the running total the same way."""
    zone = p.settings.zone
    month = period_of(c.start, zone)
    first, end = period_bounds(month, zone)
    same = s.execute(select(func.coalesce(func.sum(UsageRecord.quantity), 0),
                            func.coalesce(func.sum(UsageRecord.amount), 0)).where(
        UsageRecord.tenant_id == c.tenant_id,
        UsageRecord.instance_id.is_(None) if c.instance_id is None
        else UsageRecord.instance_id == c.instance_id,
        UsageRecord.kind == c.kind, UsageRecord.unit_price == c.price.quantize(QUANTUM),
        UsageRecord.status == UsageStatus.CHARGED.value,
        UsageRecord.started_at >= first, UsageRecord.started_at < end)).one()
    before_q, before_amount = Decimal(str(same[0])), Decimal(str(same[1]))
    total = to_fen((before_q + quantity) * c.price)
    if vat_on_top:
        total = payable(p, total)
    return max(total - before_amount, Decimal("0.00"))


def _charge(s: Session, wallet: Wallet, inst: Instance | None, row: UsageRecord, now: datetime,
            tz: tzinfo) -> None:
    """Post the record's amount; usage that crosses a month's end (the platform's
    calendar) is billed in both months, pro rata by time."""
    quantity, price = Decimal(str(row.quantity)), Decimal(str(row.unit_price))
    span = (row.ended_at - row.started_at).total_seconds()
    for a, b, part in prorate_by_month(row.amount, row.started_at, row.ended_at, tz):
        share = Decimal(str((b - a).total_seconds() / span)) if span > 0 else Decimal(1)
        post(s, wallet, Entry(
            "usage", -part, phrase("usage {key}", key=row.key), row.instance_id,
            item=_item(inst, row.kind), quantity=(quantity * share).quantize(QUANTUM),
            unit=USAGE_KINDS[row.kind].unit, unit_price=price.quantize(QUANTUM),
            service_at=a, service=(a, b)), now)


def report_usage(p: Priced, actor: Principal, records: Sequence[UsageIn]
                 ) -> list[UsageView]:
    """The API's batch: all records or none (a bad one names itself; nothing is written).
    A record beyond what its instance could physically use is kept, held for an operator's
    review, and not charged."""
    actor.require_meter()
    now = p.clock.now()
    keys = [r.key for r in records]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise InvalidInput("records", "Key {dup!r} appears twice in one batch.", dup=dup)
    out: list[UsageView] = []
    with p.db.write() as s:
        for i, r in enumerate(records):
            where = f"records[{i}] (key {r.key!r})"
            if r.started_at.tzinfo is None or r.ended_at.tzinfo is None:
                raise InvalidInput("started_at", "{where}: times need a zone "
                                                 "(e.g. 2026-11-30T10:00:00Z).", where=where)
            if not r.started_at < r.ended_at <= now + timedelta(minutes=5):
                raise InvalidInput("ended_at", "{where}: usage ends after it starts and not "
                                               "in the future.", where=where)
            if r.ended_at - r.started_at > MAX_SPAN:
                raise InvalidInput("started_at", "{where}: one record covers at most 62 "
                                                 "days; split it.", where=where)
            inst = s.get(Instance, r.instance_id)  # meters and operators: any tenant's
            if inst is None:
                raise NotFound("{where}: no instance {instance}.",
                               where=where, instance=r.instance_id)
            if r.started_at < inst.ordered_at - HOUR:
                raise InvalidInput("started_at", "{where}: {instance} was ordered "
                                                 "{inst_ordered_at:%Y-%m-%d %H:%M} UTC; "
                                                 "usage cannot start before.",
                                   where=where, instance=inst.id, inst_ordered_at=inst.ordered_at)
            unit_price(s, p, inst, r.kind)  # a kind the instance is not metered by: 422
            usage = Usage(r.key, r.kind, r.quantity, r.started_at, r.ended_at,
                          f"api:{actor.user_id}"[:32])
            held = beyond_bounds(s, p, inst, usage)
            row, duplicate = record(s, p, inst, replace(usage, held=held), now)
            out.append(_view(row, duplicate))
    return out


def held_usage(p: Records, actor: Principal, limit: int = 100, offset: int = 0
               ) -> Page[UsageView]:
    """Operator: every tenant's records waiting for review, oldest first."""
    actor.require_operator()
    with p.db.read() as s:
        where = UsageRecord.status == UsageStatus.HELD.value
        total = s.scalar(select(func.count()).select_from(UsageRecord).where(where)) or 0
        rows = s.scalars(select(UsageRecord).where(where).order_by(UsageRecord.id)
                         .limit(limit).offset(offset))
        return Page(items=[_view(r) for r in rows], total=total, limit=limit, offset=offset)


def decide_usage(p: Moves, actor: Principal, record_id: int, charge: bool) -> UsageView:
    """Operator: charge a held record (the evidence was checked) or reject it (never
    charged). A record decided before is a conflict."""
    actor.require_operator()
    now = p.clock.now()
    with p.db.write() as s:
        row = s.get(UsageRecord, record_id)
        if row is None:
            raise NotFound("No usage record {record_id}; GET /api/v1/usage/held lists those "
                           "waiting.", record_id=record_id)
        wallet = wallet_for_update(s, row.tenant_id, now)
        s.refresh(row, with_for_update=True)
        if row.status != UsageStatus.HELD:
            raise Conflict("Usage record {record_id} is {status} already.",
                           record_id=record_id, status=row.status)
        inst = s.get(Instance, row.instance_id) if row.instance_id else None
        if charge:
            if inst is None:
                raise Conflict("Usage record {record_id} names no instance to charge.",
                               record_id=record_id)
            _charge(s, wallet, inst, row, now, p.settings.zone)
        transition(s, p, row, USAGE, "charge" if charge else "reject", Move(now,
                                                                            actor=by(actor)))
        row.decided_at, row.decided_by = now, actor.user_id
        return _view(row)


def list_usage(p: Records, actor: Principal, instance_id: str | None = None,
               tenant_id: str | None = None, limit: int = 100, offset: int = 0
               ) -> Page[UsageView]:
    tenant = tenant_of(actor, tenant_id)
    with p.db.read() as s:
        where = [UsageRecord.tenant_id == tenant]
        if instance_id:
            where.append(UsageRecord.instance_id == get_instance(s, actor, instance_id).id)
        total = s.scalar(select(func.count()).select_from(UsageRecord).where(*where)) or 0
        rows = s.scalars(select(UsageRecord).where(*where)
                         .order_by(UsageRecord.id.desc()).limit(limit).offset(offset))
        return Page(items=[_view(r) for r in rows], total=total, limit=limit, offset=offset)


# --- the worker's container meter ------------------------------------------------------------
