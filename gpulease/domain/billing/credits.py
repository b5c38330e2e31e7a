"""Money back, by documented rules: SLA credits for late delivery, outages and failed
acceptance. Pure functions of times and prices (the refund of an early end is a lease's:
domain/billing/leases.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal

from gpulease.domain.billing.money import to_fen
from gpulease.domain.phrases import Phrase, phrase


@dataclass(frozen=True)
class SlaRule:
    """Per started `step_minutes` of delivery beyond the SLA, `percent_per_step` of the
    first period's price, up to `cap_percent`."""

    step_minutes: int = 15
    percent_per_step: Decimal = Decimal("5")
    cap_percent: Decimal = Decimal("50")

    def describe(self) -> Phrase:
        return phrase("{percent:f}% of the first period per started {minutes} minutes beyond "
                      "the delivery SLA, at most {cap:f}%", percent=self.percent_per_step
                      .normalize(), minutes=self.step_minutes, cap=self.cap_percent.normalize())


def late_delivery_credit(delivery_s: float, sla_s: float, first_period: Decimal,
                         rule: SlaRule = SlaRule()) -> tuple[Decimal, Decimal]:
    """(credit, percent) for a delivery that took `delivery_s` against an SLA of `sla_s`."""
    late = delivery_s - sla_s
    if late <= 0 or first_period <= 0:
        return Decimal("0.00"), Decimal(0)
    steps = math.ceil(late / (rule.step_minutes * 60))
    percent = min(rule.percent_per_step * steps, rule.cap_percent)
    return to_fen(first_period * percent / 100), percent


@dataclass(frozen=True)
class OutageRule:
    """A hardware fault that keeps a GPU out of service longer than `sla_minutes` earns
    `multiplier` × the price of the outage's duration (pro rata of the period it falls in),
    at most `cap_percent` of that period's price."""

    sla_minutes: int = 60
    multiplier: Decimal = Decimal("10")
    cap_percent: Decimal = Decimal("100")

    def describe(self) -> Phrase:
        return phrase("{multiplier:f}× the prorated price of an outage longer than {minutes} "
                      "minutes, at most {cap:f}% of the period",
                      multiplier=self.multiplier.normalize(), minutes=self.sla_minutes,
                      cap=self.cap_percent.normalize())


def outage_credit(outage_s: float, period_price: Decimal, period_s: float,
                  rule: OutageRule = OutageRule()) -> Decimal:
    """The credit for one outage of `outage_s` on a period of `period_s` costing
    `period_price`; nothing within the SLA."""
    if outage_s <= rule.sla_minutes * 60 or period_price <= 0 or period_s <= 0:
        return Decimal("0.00")
    prorated = period_price * Decimal(str(outage_s)) / Decimal(str(period_s))
    cap = period_price * rule.cap_percent / 100
    return to_fen(min(prorated * rule.multiplier, cap))


@dataclass(frozen=True)
class AcceptanceRule:
    """A delivered machine that fails the acceptance suite on the tenant's request earns
    `percent` of its current period's price, once per period."""

    percent: Decimal = Decimal("10")

    def describe(self) -> Phrase:
        return phrase("{percent:f}% of the current period when a delivered machine fails "
                      "acceptance, once per period", percent=self.percent.normalize())


def acceptance_credit(period_price: Decimal, rule: AcceptanceRule = AcceptanceRule()
                      ) -> Decimal:
    return to_fen(period_price * rule.percent / 100) if period_price > 0 else Decimal("0.00")
