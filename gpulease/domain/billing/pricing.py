"""The price book and quotes: every fee itemized, Decimal amounts rounded half-up to the
fen once per line, VAT shown. Pure: the catalog in, a quote out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from gpulease.domain.billing.invoicing import totals, vat_split
from gpulease.domain.billing.money import to_fen
from gpulease.domain.catalog import AddOn, Catalog, Offer, Term
from gpulease.domain.phrases import Phrase, phrase

DAYS_PER_MONTH = Decimal(30)
WEEKS_PER_MONTH = Decimal(52) / Decimal(12)


class PricingError(ValueError):
    """Bad quote input; `field` names what to fix, `accepted` lists valid values."""

    def __init__(self, field_name: str, message: str, accepted: list[str] | None = None,
                 /, **params: Any) -> None:
        self.phrase = Phrase(message, params)
        super().__init__(self.phrase.said())
        self.field, self.accepted = field_name, accepted


def unit_price(catalog: Catalog, offer: Offer, term: str) -> Decimal:
    """The price of one server for one period of `term` (the rule in [pricing])."""
    if term == Term.MONTH.value:
        return offer.monthly_price
    if term == Term.DAY.value:
        return to_fen(offer.monthly_price / DAYS_PER_MONTH * catalog.pricing.day_factor)
    if term == Term.YEAR.value:
        return to_fen(offer.monthly_price * 12 * catalog.pricing.year_factor)
    raise PricingError("term", "Bare metal is not leased by the {term!r}.",
                       [Term.DAY.value, Term.MONTH.value, Term.YEAR.value], term=term)


def months_in(term: str, count: int) -> Decimal:
    return {Term.DAY.value: Decimal(count) / DAYS_PER_MONTH, Term.MONTH.value: Decimal(count),
            Term.YEAR.value: Decimal(count) * 12}[term]


@dataclass(frozen=True)
class QuoteLine:
    item: str
    description: str
    unit: str
    quantity: Decimal
    unit_price: Decimal
    amount: Decimal
    example_price: bool = False  # a price the operator has not set (catalog example data)
    phrase: Phrase | None = None  # the description, to say in the reader's language


@dataclass(frozen=True)
class Quote:
    sku: str
    region: str
    term: str
    count: int  # periods
    servers: int
    lines: tuple[QuoteLine, ...]
    total: Decimal  # what the tenant pays
    vat_rate: Decimal
    vat: Decimal  # of which VAT (prices include it) / on top (they do not)
    net: Decimal
    prices_include_vat: bool
    early_termination: str
    notes: tuple[str, ...] = field(default_factory=tuple)


def plain(value: Decimal, places: str = "0.0001") -> Decimal:
    """A quantity without exponent notation or trailing zeros (500, 3.3333, 0.5)."""
    q = value.quantize(Decimal(places))
    return q.to_integral() if q == q.to_integral() else q.normalize()


# Add-ons charged per lease period with the server (bandwidth, storage, support); a per-GB
# add-on (egress) is metered usage instead.
PERIODIC_UNITS = ("mbps-month", "gb-month", "month")


def addon_quantity(unit: str, qty: Decimal, months: Decimal, servers: int) -> Decimal:
    """Quantity billed: per-month units scale with the lease length (and, for bandwidth and
    storage, per server); a per-GB fee is the GB given."""
    if unit == "gb":
        return qty
    per_server = servers if unit in ("mbps-month", "gb-month") else 1
    return qty * months * per_server


def addon_period(price: Decimal, unit: str, qty: Decimal, term: str, servers: int
                 ) -> tuple[Decimal, Decimal]:
    """(quantity billed, amount at book price) of a periodic add-on for one lease period of
    `term`: the quote's add-on line for one period."""
    billed = addon_quantity(unit, qty, months_in(term, 1), servers)
    return plain(billed), to_fen(price * billed)


def check_addon(catalog: Catalog, addon_id: str, qty: Decimal) -> AddOn:
    """The periodic add-on `addon_id` for an order or a lease, or PricingError on `add`."""
    addon = catalog.addon_by_id.get(addon_id)
    if addon is None:
        raise PricingError("add", "Unknown add-on {addon_id!r}.", sorted(catalog.addon_by_id),
                           addon_id=addon_id)
    if addon.unit not in PERIODIC_UNITS:
        raise PricingError("add", "{addon_id} is metered ({unit}): it is reported as "
                                  "usage and billed by what was used, not ordered.",
                           sorted(a.id for a in catalog.addons if a.unit in PERIODIC_UNITS),
                           addon_id=addon_id, unit=addon.unit)
    if qty <= 0 or qty > 1_000_000:
        raise PricingError("add", "Add-on {addon_id} needs a quantity above 0 and at most "
                                  "1,000,000, not {qty}.", addon_id=addon_id, qty=qty)
    if addon.unit == "month" and qty != qty.to_integral():
        raise PricingError("add", "{addon_id} is taken whole (1, 2, …), not {qty}.",
                           addon_id=addon_id, qty=qty)
    return addon


@dataclass(frozen=True)
class Quantity:
    """How much of an offer: periods of its term, servers (a cluster's nodes), and add-ons
    with their quantities."""

    count: int = 1
    servers: int = 1
    addons: Mapping[str, Decimal] | None = None


def quote(catalog: Catalog, sku: str, region: str, term: str, much: Quantity = Quantity()
          ) -> Quote:
    """The price of `much` of the offer of `sku` in `region` for `term`, line by line."""
    count, servers, addons = much.count, much.servers, much.addons
    offer = catalog.offer(sku, region)
    if offer is None:
        known = sorted(o.id for o in catalog.offers if o.sku == sku)
        if known:
            raise PricingError("region", "{sku} is not offered in {region!r}.",
                               [k.split("@")[1] for k in known], sku=sku, region=region)
        raise PricingError("sku", "Unknown SKU {sku!r}.", sorted(catalog.sku_by_id), sku=sku)
    if count < 1:
        raise PricingError("count", "count must be a positive whole number of {term}s, "
                                    "not {count}.", term=term, count=count)
    if servers < 1:
        raise PricingError("servers", "servers must be at least 1, not {servers}.",
                           servers=servers)
    price = unit_price(catalog, offer, term)
    months = months_in(term, count)
    server = phrase("{gpus}× {gpu} bare-metal server, per {term}",
                    gpus=catalog.sku_by_id[sku].gpu_count, gpu=catalog.gpu_of(offer).name,
                    term=phrase(term))
    lines = [QuoteLine(
        item=f"{sku}@{region}", description=str(server), unit=term,
        quantity=Decimal(count * servers), unit_price=price,
        amount=to_fen(price * count * servers), phrase=server)]
    for addon_id, qty in sorted((addons or {}).items()):
        addon = catalog.addon_by_id.get(addon_id)
        if addon is None:
            raise PricingError("add", "Unknown add-on {addon_id!r}.",
                               sorted(catalog.addon_by_id), addon_id=addon_id)
        if qty <= 0:
            raise PricingError("add", "Add-on {addon_id} needs a positive quantity, "
                                      "not {qty}.", addon_id=addon_id, qty=qty)
        billed = addon_quantity(addon.unit, qty, months, servers)
        lines.append(QuoteLine(item=addon.id, description=addon.name, unit=addon.unit,
                               quantity=plain(billed), unit_price=addon.price,
                               amount=to_fen(addon.price * billed),
                               example_price=addon.example, phrase=Phrase(addon.name)))
    # VAT per line, then summed: as the invoice lines and a Chinese VAT invoice do it, so a
    # quote's VAT is the invoice's to the fen (domain/invoicing.vat_split).
    rate = catalog.pricing.vat_rate
    summed = totals(vat_split(line.amount, rate, catalog.pricing.prices_include_vat)
                    for line in lines)
    net, vat, total = summed.net, summed.vat, summed.gross
    fee = catalog.pricing.early_termination_fee_percent
    notes = [catalog.pricing.note] if term != Term.MONTH.value else []
    if any(line.example_price for line in lines):
        notes.append("add-on prices marked example are the catalog's example data")
    return Quote(
        sku=sku, region=region, term=term, count=count, servers=servers, lines=tuple(lines),
        total=total, vat_rate=rate, vat=vat, net=net,
        prices_include_vat=catalog.pricing.prices_include_vat,
        early_termination=(f"ending early refunds the unused whole {term}s less "
                           f"{plain(fee)}% of their price; a started {term} is not "
                           "refunded"),
        notes=tuple(notes))


@dataclass(frozen=True)
class BreakEven:
    days_per_week: Decimal
    by_day_per_month: Decimal
    by_month: Decimal
    cheaper: str  # day | month
    break_even_days_per_month: Decimal  # above this many days a month, the month term wins


def day_vs_month(catalog: Catalog, sku: str, region: str, days_per_week: Decimal
                 ) -> BreakEven:
    """A usage pattern (days of use per week) priced by the day and by the month."""
    offer = catalog.offer(sku, region)
    if offer is None:
        raise PricingError("region", "No offer {sku}@{region}.",
                           sorted(catalog.offer_by_id), sku=sku, region=region)
    if not 0 < days_per_week <= 7:
        raise PricingError("days_per_week", "days per week must be more than 0 and at most 7")
    day = unit_price(catalog, offer, Term.DAY.value)
    per_month = to_fen(day * days_per_week * WEEKS_PER_MONTH)
    return BreakEven(days_per_week=days_per_week, by_day_per_month=per_month,
                     by_month=offer.monthly_price,
                     cheaper="day" if per_month < offer.monthly_price else "month",
                     break_even_days_per_month=(offer.monthly_price / day).quantize(
                         Decimal("0.1")))


def cheapest_regions(catalog: Catalog, sku: str) -> list[tuple[str, Decimal]]:
    """Every region offering the SKU, cheapest monthly price first."""
    found = sorted(((o.region, o.monthly_price) for o in catalog.offers if o.sku == sku),
                   key=lambda r: (r[1], r[0]))
    if not found:
        raise PricingError("sku", "Unknown SKU {sku!r}.", sorted(catalog.sku_by_id), sku=sku)
    return found
