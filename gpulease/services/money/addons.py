"""Add-ons on a leased instance (public bandwidth, extra storage, support): chosen at order
or later, charged per lease period with the server, each on its own invoice line with its
quantity, unit price and service period. The order's hold covers the first period's
add-ons (so the hold is the quote's total); each renewal charges the add-ons on at the
start of its periods; an add-on taken or raised mid-lease is charged pro rata for the rest
of the current period and in full for periods paid ahead; a lowered or removed one takes
effect when the paid periods end (no refund for time already paid). A price change never
alters an add-on already on: it keeps the book price of when it was chosen. Per-GB
add-ons (egress) are metered usage instead (services/money/metering.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpulease.db.money_tables import InstanceAddon, Lease, LeasePeriod
from gpulease.db.repositories import get_instance
from gpulease.db.tables import Instance
from gpulease.domain.accounts import Principal
from gpulease.domain.billing.money import to_fen
from gpulease.domain.billing.pricing import PricingError, addon_period, check_addon, plain
from gpulease.domain.catalog import AddOn
from gpulease.domain.errors import Conflict, InvalidInput
from gpulease.domain.phrases import Phrase, phrase
from gpulease.domain.states import InstanceStatus, LeaseStatus
from gpulease.lifecycle.history import by, note
from gpulease.ports.records import Priced, Records
from gpulease.schemas.money import AddonView
from gpulease.services.money.wallet import Charge, Line, charge, payable

LEASED = ("bare_metal", "cluster")


@dataclass(frozen=True)
class PeriodCharge:
    """One add-on's share of one lease period: what its invoice line says."""

    row: InstanceAddon
    billed: Decimal  # quantity billed (Mbps-months, GB-months, months)
    amount: Decimal  # what the tenant pays, VAT included (payable)

    @property
    def item(self) -> Phrase:
        """The add-on's name is the catalog's (said in the reader's language where the
        messages have it: the default catalog's names do, an operator's own are as written)."""
        return phrase("{addon}: {quantity} · {instance}", addon=Phrase(self.row.name),
                      quantity=plain(self.row.quantity, "0.001"), instance=self.row.instance_id)

    def line(self, periods: int = 1) -> Line:
        return Line(item=self.item, amount=self.amount * periods,
                    quantity=self.billed * periods, unit=self.row.unit,
                    unit_price=self.row.unit_price)


def period_lines(s: Session, p: Priced, inst: Instance, at: datetime, term: str
                 ) -> list[PeriodCharge]:
    """The add-ons on at `at`, priced for one period of `term` (none for a container)."""
    if inst.kind not in LEASED:
        return []
    return for_period(p, inst, on_at(s, inst.id, at), term)


def on_at(s: Session, instance_id: str, at: datetime) -> list[InstanceAddon]:
    """The add-ons on at `at`."""
    return list(s.scalars(select(InstanceAddon).where(
        InstanceAddon.instance_id == instance_id, InstanceAddon.since <= at,
        (InstanceAddon.until.is_(None)) | (InstanceAddon.until > at))
        .order_by(InstanceAddon.addon_id)))


def for_period(p: Priced, inst: Instance, rows: list[InstanceAddon], term: str
               ) -> list[PeriodCharge]:
    out = []
    for row in rows:
        billed, amount = addon_period(row.unit_price, row.unit, row.quantity, term,
                                      inst.node_count)
        out.append(PeriodCharge(row, billed, payable(p, amount)))
    return out


def attach_at_order(s: Session, p: Priced, inst: Instance, add: Mapping[str, Decimal],
                    now: datetime, actor: str) -> Decimal:
    """The order's add-ons, on from now; returns what their first period adds to the hold."""
    if not add:
        return Decimal("0.00")
    if inst.kind not in LEASED:
        raise InvalidInput("add", "Add-ons go with bare-metal and cluster leases; a container's "
                                  "egress is metered.")
    rows = []
    for addon_id, qty in sorted(add.items()):
        try:
            addon = check_addon(p.price_book(), addon_id, qty)
        except PricingError as exc:
            raise InvalidInput(exc.field, exc.phrase, exc.accepted) from None
        rows.append(InstanceAddon(instance_id=inst.id, addon_id=addon.id, name=addon.name,
                                  unit=addon.unit, quantity=qty, unit_price=addon.price,
                                  since=now, until=None, created_by=actor))
    s.add_all(rows)
    return sum((c.amount for c in for_period(p, inst, rows, inst.term)), Decimal("0.00"))


def _view(row: InstanceAddon) -> AddonView:
    return AddonView(addon=row.addon_id, name=row.name, unit=row.unit,
                     quantity=plain(row.quantity, "0.001"),
                     unit_price=plain(row.unit_price), since=row.since, until=row.until)


def list_addons(p: Records, actor: Principal, instance_id: str) -> list[AddonView]:
    with p.db.read() as s:
        inst = get_instance(s, actor, instance_id)
        return [_view(r) for r in s.scalars(select(InstanceAddon).where(
            InstanceAddon.instance_id == inst.id).order_by(InstanceAddon.since,
                                                           InstanceAddon.id))]


def set_addon(p: Priced, actor: Principal, instance_id: str, addon_id: str,
              quantity: Decimal) -> list[AddonView]:
    """Take, raise, lower or (quantity 0) remove an add-on on a running lease."""
    actor.require_order_rights()
    now = p.clock.now()
    with p.db.write() as s:
        change = _change(s, p, actor, instance_id, Wanted(addon_id, quantity))
        inst = change.inst
        _drop_pending(s, inst.id, change.addon.id, now)  # the latest change wins
        if quantity > change.have:
            _raise(s, p, change)
        else:
            _lower(s, change)
        s.flush()
        return [_view(r) for r in s.scalars(select(InstanceAddon).where(
            InstanceAddon.instance_id == inst.id).order_by(InstanceAddon.since,
                                                           InstanceAddon.id))]


def addon_charge(p: Priced, actor: Principal, instance_id: str, addon_id: str,
                 quantity: Decimal) -> Decimal:
    """What setting the add-on to `quantity` would charge now (0 for a lower quantity,
    which takes effect when the paid periods end); nothing is written."""
    actor.require_order_rights()
    with p.db.read() as s:
        change = _change(s, p, actor, instance_id, Wanted(addon_id, quantity), lock=False)
        if quantity <= change.have:
            return Decimal("0.00")
        return sum((part for _period, part in _raise_parts(s, p, change)), Decimal("0.00"))


@dataclass(frozen=True)
class Wanted:
    """An add-on and the quantity asked for it."""

    addon_id: str
    quantity: Decimal


def _change(s: Session, p: Priced, actor: Principal, instance_id: str, want: Wanted,
            lock: bool = True) -> Change:
    """The change asked for, checked: a running lease, a known add-on, a new quantity."""
    addon_id, quantity = want.addon_id, want.quantity
    now = p.clock.now()
    inst = get_instance(s, actor, instance_id, lock=lock)
    if inst.kind not in LEASED:
        raise InvalidInput("addon", "Add-ons go with bare-metal and cluster leases.")
    leases = select(Lease).where(Lease.instance_id == inst.id)
    lease = s.scalar(leases.with_for_update() if lock else leases)
    if (lease is None or lease.status != LeaseStatus.ACTIVE.value
            or inst.status != InstanceStatus.READY.value):
        raise Conflict("{instance} has no active lease: add-ons change on a delivered, "
                       "running lease (order them with the instance before that).",
                       instance=inst.id)
    try:
        addon = check_addon(p.price_book(), addon_id, quantity if quantity > 0
                            else Decimal(1))
    except PricingError as exc:
        raise InvalidInput("addon" if exc.field == "add" else exc.field, str(exc),
                           exc.accepted) from None
    current = next((r for r in on_at(s, inst.id, now) if r.addon_id == addon.id), None)
    have = current.quantity if current is not None else Decimal(0)
    if quantity == have:
        raise Conflict("{addon_id} is already {have_normalize:f} on {instance}.",
                       addon_id=addon.id, have_normalize=have.normalize(), instance=inst.id)
    return Change(inst, lease, addon, have, quantity, current, now, by(actor))


@dataclass(frozen=True)
class Change:
    """An add-on's quantity changing on a running lease: which add-on (the price book's),
    from `have` (its `current` row) to `want`, when and by whom."""

    inst: Instance
    lease: Lease
    addon: AddOn
    have: Decimal
    want: Decimal
    current: InstanceAddon | None
    now: datetime
    who: str


UNIT_PRICE_PLACES = Decimal("0.000001")  # a unit price kept finer than the fen (its column's)


def _raise(s: Session, p: Priced, c: Change) -> None:
    """Charge the difference: pro rata for the rest of the current period, in full for
    periods paid ahead; then the new quantity is on from now (at today's book price for
    the whole of it, as a new choice)."""
    inst, lease, now, have, want = c.inst, c.lease, c.now, c.have, c.want
    addon_id, name, unit, price = c.addon.id, c.addon.name, c.addon.unit, c.addon.price
    total = Decimal("0.00")
    for period, part in _raise_parts(s, p, c):
        period.price = to_fen(period.price + part)
        total += part
    if c.current is not None:
        c.current.until = now
    s.add(InstanceAddon(instance_id=inst.id, addon_id=addon_id, name=name, unit=unit,
                        quantity=want, unit_price=price, since=now, until=None,
                        created_by=c.who))
    text = phrase("{name}: {have:f} → {want:f} on {instance}, ¥{total:,.2f} for the paid time "
                  "left", name=name, have=have.normalize(), want=want.normalize(),
                  instance=inst.id, total=total)
    if total > 0:  # its line: the units added × their price for the paid time left
        added = want - have
        charge(s, inst.tenant_id, Charge(
            total, text, inst.id, (now, lease.ends_at), quantity=added, unit=unit,
            unit_price=(total / added).quantize(UNIT_PRICE_PLACES)), now)
    note(s, now, inst.id, "addon", text, actor=c.who)


def _raise_parts(s: Session, p: Priced, c: Change) -> list[tuple[LeasePeriod, Decimal]]:
    """What a raise costs in each paid period not over: pro rata for the rest of the
    current one, in full for those ahead."""
    periods = list(s.scalars(select(LeasePeriod).where(
        LeasePeriod.lease_id == c.lease.id, LeasePeriod.refunded_at.is_(None),
        LeasePeriod.ends_at > c.now).order_by(LeasePeriod.seq)))
    delta = InstanceAddon(instance_id=c.inst.id, addon_id=c.addon.id, name=c.addon.name,
                          unit=c.addon.unit, quantity=c.want - c.have,
                          unit_price=c.addon.price, since=c.now, until=None)
    parts = []
    for period in periods:
        (one,) = for_period(p, c.inst, [delta], period.term)
        if period.starts_at < c.now:  # the current period: the part still to come
            left = (period.ends_at - c.now) / (period.ends_at - period.starts_at)
            parts.append((period, to_fen(one.amount * Decimal(str(left)))))
        else:
            parts.append((period, one.amount))
    return parts


def _drop_pending(s: Session, instance_id: str, addon_id: str, now: datetime) -> None:
    """A change waiting for the end of the paid periods gives way to a newer one."""
    for row in s.scalars(select(InstanceAddon).where(
            InstanceAddon.instance_id == instance_id, InstanceAddon.addon_id == addon_id,
            InstanceAddon.since > now)):
        s.delete(row)
    s.flush()


def _lower(s: Session, c: Change) -> None:
    """Lower or remove from the end of the periods paid: nothing is refunded."""
    inst, current, want, now, who = c.inst, c.current, c.want, c.now, c.who
    assert current is not None
    at = c.lease.ends_at
    current.until = at
    if want > 0:
        s.add(InstanceAddon(instance_id=inst.id, addon_id=current.addon_id, name=current.name,
                            unit=current.unit, quantity=want, unit_price=current.unit_price,
                            since=at, until=None, created_by=who))
    note(s, now, inst.id, "addon",
         phrase("{addon}: {have:f} → {want:f} on "
         "{instance} from the end of the paid periods ({at:%Y-%m-%d %H:%M} UTC)",
         addon=current.name, have=current.quantity.normalize(),
         want=want.normalize(), instance=inst.id, at=at), actor=who)
