"""VAT one way everywhere, whichever way the price book writes prices: the quote, the
order's hold, the charge, metered usage, the invoice line and a credit note agree to the
fen. With prices excluding VAT an H100 month (¥84,480) is quoted, held, charged and
invoiced at ¥89,548.80, and a full credit note pays back exactly that, line by line (no
fen of VAT left by splitting the total once); a part and then the rest credit it to
nothing. SQLite and PostgreSQL."""

from __future__ import annotations

import tomllib
from datetime import datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpulease.domain.billing.invoicing import paid_split, payable, vat_split
from gpulease.domain.catalog import DEFAULT_CATALOG, parse_catalog
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.schemas.money import QuoteRequest, UsageIn
from gpulease.services.catalog import quotes
from gpulease.services.instances import views as instances
from gpulease.services.money import metering, wallet
from gpulease.services.money.invoices import run as invoice_run
from gpulease.services.money.invoices import views as invoices
from gpulease.services.money.wallet import ledger_sums_to_balance
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import TenantCtx
from gpulease.testing.clock import MovableClock
from gpulease.worker.runner import Worker

CAL = ZoneInfo("Asia/Shanghai")
RATES = st.sampled_from([Decimal("0.06"), Decimal("0.09"), Decimal("0.13"), Decimal("0")])


@given(fen=st.integers(-10**11, 10**11), rate=RATES)
def test_what_is_paid_splits_back_into_the_priced_net_and_its_vat(fen: int, rate: Decimal
                                                                  ) -> None:
    amount = Decimal(fen) / 100
    excl = vat_split(amount, rate, included=False)
    assert payable(amount, rate, False) == excl.gross
    assert paid_split(excl.gross, rate) == excl  # the net back to the fen, the same VAT
    incl = vat_split(amount, rate, included=True)
    assert payable(amount, rate, True) == amount and paid_split(amount, rate) == incl


def _book(p: Platform, included: bool) -> None:
    data = tomllib.loads(DEFAULT_CATALOG.read_text())
    data["pricing"]["prices_include_vat"] = included
    p.catalog = parse_catalog(data, "vat mode")


@pytest.mark.parametrize("included", [True, False], ids=["vat-included", "vat-on-top"])
def test_quote_hold_charge_invoice_and_credit_note_agree(
    fleet: Platform, tenant: TenantCtx, operator: TenantCtx, worker: Worker, key: str,
    included: bool,
) -> None:
    clock = MovableClock(datetime(2026, 11, 10, 8, tzinfo=CAL))
    fleet.clock = clock
    _book(fleet, included)
    quote = quotes.make_quote(fleet, QuoteRequest(sku="h100-80g-x8", region="ningxia-1",
                                                  term="month"))
    assert quote.total == (Decimal("84480.00") if included else Decimal("89548.80"))
    before = wallet.show_wallet(fleet, tenant.principal).balance
    iid = orders.place_order(fleet, tenant.principal, OrderRequest(
        sku="h100-80g-x8", region="ningxia-1", ssh_keys=[key]))[0].id
    assert wallet.show_wallet(fleet, tenant.principal).held == quote.total
    worker.run_until_idle()
    assert instances.show_instance(fleet, tenant.principal, iid).status == "ready"
    # egress: ¥0.50/GB in the book; 100 GB costs ¥50.00, or ¥53.00 with VAT on top
    end = clock.now()
    metering.report_usage(fleet, operator.principal, [UsageIn(
        key="egress-1", instance_id=iid, kind="egress_gb", quantity=Decimal(100),
        started_at=end - timedelta(hours=1), ended_at=end)])
    egress = Decimal("50.00") if included else Decimal("53.00")
    paid = before - wallet.show_wallet(fleet, tenant.principal).balance
    assert paid == quote.total + egress

    clock.at = datetime(2026, 12, 1, 1, tzinfo=CAL)
    invoice_run.run_invoices(fleet, operator.principal, "2026-11", finalize=True)
    inv = invoices.list_invoices(fleet, tenant.principal,
                                 invoices.InvoiceFilter(period="2026-11")).items[0]
    inv = invoices.show_invoice(fleet, tenant.principal, inv.id)
    assert inv.total == paid  # what the wallet paid is the invoice's total
    (month,) = [ln for ln in inv.lines if ln.description.startswith("h100-80g-x8")]
    assert (month.net, month.vat, month.gross) == (quote.net, quote.vat, quote.total)
    if not included:  # the book's price is the line's net, its VAT on top
        assert (month.net, month.vat) == (Decimal("84480.00"), Decimal("5068.80"))

    # a full credit note pays back what was paid, not VAT on top of it
    balance = wallet.show_wallet(fleet, tenant.principal).balance
    note = invoice_run.credit_note(fleet, operator.principal, inv.id, "whole month back")
    assert note.total == -inv.total and (note.net, note.vat) == (-inv.net, -inv.vat)
    assert wallet.show_wallet(fleet, tenant.principal).balance == balance + inv.total
    with fleet.db.read() as s:
        assert ledger_sums_to_balance(s, tenant.tenant_id)


def _invoiced_month(p: Platform, tenant: TenantCtx, operator: TenantCtx, worker: Worker,
                    key: str, egress_gb: int) -> invoices.InvoiceView:
    """An H100 month and `egress_gb` of egress in November, invoiced final (VAT included:
    each line's VAT rounded on its own)."""
    clock = MovableClock(datetime(2026, 11, 10, 8, tzinfo=CAL))
    p.clock = clock
    _book(p, True)
    iid = orders.place_order(p, tenant.principal, OrderRequest(
        sku="h100-80g-x8", region="ningxia-1", ssh_keys=[key]))[0].id
    worker.run_until_idle()
    end = clock.now()
    metering.report_usage(p, operator.principal, [UsageIn(
        key="egress-1", instance_id=iid, kind="egress_gb", quantity=Decimal(egress_gb),
        started_at=end - timedelta(hours=1), ended_at=end)])
    clock.at = datetime(2026, 12, 1, 1, tzinfo=CAL)
    invoice_run.run_invoices(p, operator.principal, "2026-11", finalize=True)
    inv = invoices.list_invoices(p, tenant.principal,
                                 invoices.InvoiceFilter(period="2026-11")).items[0]
    return invoices.show_invoice(p, tenant.principal, inv.id)


def test_a_full_credit_note_reverses_each_line_as_it_was_charged(
    fleet: Platform, tenant: TenantCtx, operator: TenantCtx, worker: Worker, key: str
) -> None:
    # ¥84,480.00 and ¥1.00 of egress: VAT 4,781.89 + 0.06 = 4,781.95 line by line, where
    # the total split once would say 4,781.94 and leave a fen of VAT on the invoice
    inv = _invoiced_month(fleet, tenant, operator, worker, key, egress_gb=2)
    assert inv.vat == Decimal("4781.95") and paid_split(inv.total, inv.vat_rate).vat == (
        Decimal("4781.94"))
    note = invoice_run.credit_note(fleet, operator.principal, inv.id, "whole month back")
    assert (note.total, note.net, note.vat) == (-inv.total, -inv.net, -inv.vat)
    assert [(ln.net, ln.vat, ln.gross) for ln in note.lines] == [
        (-ln.net, -ln.vat, -ln.gross) for ln in inv.lines]
    with fleet.db.read() as s:
        assert ledger_sums_to_balance(s, tenant.tenant_id)


def test_a_part_then_the_rest_credit_the_invoice_to_nothing_left(
    fleet: Platform, tenant: TenantCtx, operator: TenantCtx, worker: Worker, key: str
) -> None:
    inv = _invoiced_month(fleet, tenant, operator, worker, key, egress_gb=2)
    part = invoice_run.credit_note(fleet, operator.principal, inv.id, "a slow day",
                                   Decimal("2816.00"))
    rest = invoice_run.credit_note(fleet, operator.principal, inv.id, "the rest back")
    assert part.total + rest.total == -inv.total
    assert (part.net + rest.net, part.vat + rest.vat) == (-inv.net, -inv.vat)
