"""VAT, one way everywhere, and invoice arithmetic. A priced line (a quote's line, an
order's first period, a renewal, metered usage) costs the tenant `payable(amount)`: the
amount itself when prices include VAT (含税价), the amount plus its VAT rounded once when
they do not. The wallet always pays that gross; an invoice line and a credit note split
what was paid with `paid_split` (the net recovered exactly for a line of one priced item,
as a VAT invoice prints it). Totals are summed from the lines, never rounded again."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal

from gpulease.domain.billing.money import to_fen

# Ledger kinds an invoice bills (money out is a charge line, money back a negative line).
# Holds, their releases and top-ups are not sales; a credit note's own entry is billed by
# the credit note itself.
BILLABLE_KINDS = ("charge", "usage", "credit", "refund")


@dataclass(frozen=True)
class VatSplit:
    net: Decimal
    vat: Decimal
    gross: Decimal


def vat_split(amount: Decimal, rate: Decimal, included: bool) -> VatSplit:
    """Split one line. Prices that include VAT (含税价): net = amount ÷ (1 + rate), rounded
    once; VAT is the rest. Otherwise VAT = amount × rate, rounded once, added on top."""
    amount = to_fen(amount)
    if included:
        net = to_fen(amount / (1 + rate))
        return VatSplit(net=net, vat=amount - net, gross=amount)
    vat = to_fen(amount * rate)
    return VatSplit(net=amount, vat=vat, gross=amount + vat)


def payable(amount: Decimal, rate: Decimal, included: bool) -> Decimal:
    """What the tenant pays for a line priced `amount` in the price book."""
    return vat_split(amount, rate, included).gross


def paid_split(paid: Decimal, rate: Decimal) -> VatSplit:
    """Split money paid (VAT included, whichever way prices are written): net = paid ÷
    (1 + rate) rounded once. For a line priced without VAT, paid = net + VAT(net) and this
    gives that net back exactly (the rounding error is below half a fen)."""
    return vat_split(paid, rate, included=True)


@dataclass(frozen=True)
class Totals:
    net: Decimal
    vat: Decimal
    gross: Decimal


def totals(lines: Iterable[VatSplit]) -> Totals:
    net = vat = gross = Decimal("0.00")
    for line in lines:
        net, vat, gross = net + line.net, vat + line.vat, gross + line.gross
    return Totals(net=net, vat=vat, gross=gross)


@dataclass(frozen=True)
class UsageUnit:
    """A metered kind: its unit and how its price comes from the price book."""

    kind: str
    unit: str
    addon: str | None  # the add-on priced per this unit (None: the container's GPU-hour)
    divisor: Decimal  # the add-on's price ÷ this = the price per unit


USAGE_KINDS: dict[str, UsageUnit] = {
    "gpu_hours": UsageUnit("gpu_hours", "GPU-hour", None, Decimal(1)),
    "egress_gb": UsageUnit("egress_gb", "GB", "egress", Decimal(1)),
    # Extra storage is priced per GB-month; a GB-day is a thirtieth of it.
    "storage_gb_days": UsageUnit("storage_gb_days", "GB-day", "extra-storage", Decimal(30)),
    # The tenant's bucket, measured once a day (services/storage/meter.py).
    "object_gb_days": UsageUnit("object_gb_days", "GB-day", "object-storage", Decimal(30)),
}
