"""An order reviewed before anything is held: every refusal the order would give (the
catalog's, checked by `plan_order`), and what it would hold from the wallet (bare metal and
clusters by the quote, the same total the order holds; a container by its first hour).
The console's review page and the CLI's question before it spends read it."""

from __future__ import annotations

from decimal import Decimal

from gpulease.domain.accounts import Principal
from gpulease.ports.records import Priced
from gpulease.schemas import OrderRequest
from gpulease.schemas.money import OrderReviewView, QuoteRequest, QuoteView
from gpulease.services.catalog import quotes
from gpulease.services.money import wallet
from gpulease.services.orders.ordering import plan_order


def order_hold(p: Priced, req: OrderRequest) -> tuple[Decimal, QuoteView | None]:
    """What the order would hold, and the quote it comes from (None for a container)."""
    plan_order(p, req)  # every refusal the order would give, before the review
    if req.kind == "container":
        return wallet.container_hour(p, req.offer or "", req.gpus or 1), None
    quote = quotes.make_quote(p, QuoteRequest(
        sku=req.sku or "", region=req.region or "", term=req.term or "month",
        servers=req.nodes, add=req.add))
    return quote.total, quote


def review_order(p: Priced, actor: Principal, req: OrderRequest) -> OrderReviewView:
    actor.require_order_rights()
    hold, _quote = order_hold(p, req)
    money = wallet.show_wallet(p, actor)
    return OrderReviewView(hold=hold, available=money.available,
                           covered=hold <= money.available)
