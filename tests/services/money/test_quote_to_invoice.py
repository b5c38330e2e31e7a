"""From quote to invoice, to the fen: for random terms (a day, a month, a year paid at
once), add-ons (fractional quantities included) and both ways of writing prices (VAT
included or on top), the quote a tenant reads, the charges made for the order once it is
delivered, and the month's final invoice agree on the gross, and the invoice's net and VAT
are the quote's. Hypothesis draws the orders; each is a new tenant in a new month on one
platform, so the month's invoice holds that order alone. Both databases."""

from __future__ import annotations

import tomllib
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from gpulease.db.money_tables import Invoice, LedgerEntry
from gpulease.demo import seed_demo_fleet
from gpulease.domain.billing.proration import previous_period
from gpulease.domain.catalog import DEFAULT_CATALOG, parse_catalog
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.schemas.money import QuoteRequest
from gpulease.services.catalog import quotes
from gpulease.services.money.invoices import run as invoice_run
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import TenantCtx, new_operator, new_tenant, ssh_key
from gpulease.testing.clock import MovableClock
from gpulease.worker.runner import Worker

EXAMPLES = 12
OFFER = ("h100-80g-x8", "ningxia-1")
QUANTITY = st.decimals(min_value=Decimal("0.001"), max_value=Decimal("500"), places=3)
ADD_ONS = st.dictionaries(
    st.sampled_from(["public-bandwidth", "extra-storage", "support-standard",
                     "support-premium"]), QUANTITY, max_size=3).map(
    # a support plan is one of each (quantity 1), and only one of them
    lambda add: {k: (Decimal(1) if k.startswith("support") else v) for k, v in add.items()
                 if not (k == "support-premium" and "support-standard" in add)})


def _catalog(prices_include_vat: bool) -> object:
    data = tomllib.loads(DEFAULT_CATALOG.read_text())
    data["pricing"]["prices_include_vat"] = prices_include_vat
    return parse_catalog(data, f"prices_include_vat={prices_include_vat}")


def _charged(p: Platform, instance_id: str) -> Decimal:
    with p.db.read() as s:
        total = s.scalar(select(func.sum(LedgerEntry.amount)).where(
            LedgerEntry.instance_id == instance_id, LedgerEntry.kind == "charge"))
    return -(total or Decimal(0))


def _invoice(p: Platform, tenant: TenantCtx, period: str) -> Invoice:
    with p.db.read() as s:
        found = s.scalars(select(Invoice).where(Invoice.tenant_id == tenant.tenant_id,
                                                Invoice.period == period)).all()
    assert len(found) == 1, found
    return found[0]


def test_a_quote_its_charges_and_its_invoice_agree_to_the_fen(platform: Platform) -> None:
    seed_demo_fleet(platform, EXAMPLES + 1)
    catalogs = {True: _catalog(True), False: _catalog(False)}
    clock = MovableClock(datetime(2027, 1, 3, 10, 0, tzinfo=UTC))
    platform.clock = clock
    operator = new_operator(platform)
    worker = Worker(platform, owner="quote-to-invoice")
    key = ssh_key()

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(term=st.sampled_from(["day", "month", "year"]), add=ADD_ONS,
           prices_include_vat=st.booleans())
    def one_order(term: str, add: dict[str, Decimal], prices_include_vat: bool) -> None:
        platform.catalog = catalogs[prices_include_vat]  # type: ignore[assignment]
        # a new month, its 3rd: the order's charge falls in it
        start = clock.now().replace(day=1) + timedelta(days=40)
        clock.at = start.replace(day=3, hour=10, minute=0, second=0, microsecond=0)
        tenant = new_tenant(platform)
        quoted = quotes.make_quote(platform, QuoteRequest(
            sku=OFFER[0], region=OFFER[1], term=term, add=add))
        view, _ = orders.place_order(platform, tenant.principal, OrderRequest(
            sku=OFFER[0], region=OFFER[1], term=term, add=add, ssh_keys=[key]))
        worker.run_until_idle()
        assert _charged(platform, view.id) == quoted.total, (quoted.lines, term)

        period = clock.now().strftime("%Y-%m")
        clock.at = clock.now().replace(day=1) + timedelta(days=35)  # the next month
        assert previous_period(clock.now(), platform.settings.zone) == period
        invoice_run.run_invoices(platform, operator.principal, period, finalize=True)
        invoice = _invoice(platform, tenant, period)
        assert (invoice.total, invoice.net, invoice.vat) == (
            quoted.total, quoted.net, quoted.vat), (quoted.lines, prices_include_vat)

    one_order()
