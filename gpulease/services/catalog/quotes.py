"""Quotes over the price book (domain/billing/pricing.py), with its errors as API errors."""

from __future__ import annotations

from dataclasses import asdict

from gpulease.domain.billing.pricing import (
    PricingError,
    Quantity,
    cheapest_regions,
    day_vs_month,
    quote,
)
from gpulease.domain.errors import InvalidInput
from gpulease.domain.phrases import stored
from gpulease.ports.records import Priced
from gpulease.schemas.money import BreakEvenView, QuoteLineView, QuoteRequest, QuoteView


def make_quote(p: Priced, req: QuoteRequest) -> QuoteView:
    book = p.price_book()  # today's prices
    try:
        q = quote(book, req.sku, req.region, req.term, Quantity(req.count, req.servers, req.add))
        regions = cheapest_regions(book, req.sku)
        even = (day_vs_month(book, req.sku, req.region, req.days_per_week)
                if req.days_per_week is not None else None)
    except PricingError as exc:
        raise InvalidInput(exc.field, exc.phrase, exc.accepted) from None
    return QuoteView(
        sku=q.sku, region=q.region, term=q.term, count=q.count, servers=q.servers,
        lines=[QuoteLineView(**{**asdict(line), "phrase": stored(line.phrase)[1]
                                if line.phrase else None}) for line in q.lines],
        total=q.total, net=q.net,
        vat=q.vat, vat_rate=q.vat_rate, prices_include_vat=q.prices_include_vat,
        early_termination=q.early_termination,
        regions=[{"region": r, "monthly_price": f"{price:.2f}"} for r, price in regions],
        break_even=BreakEvenView(**asdict(even)) if even else None, notes=list(q.notes))
