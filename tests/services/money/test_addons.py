"""Add-ons as billable items: chosen at order (the hold is the quote's total), charged per
lease period with the servers on their own invoice lines (quantity, unit price, service
period), raised mid-lease pro rata, lowered from the end of the paid periods, refunded with
the periods not begun; metered ones cannot be ordered. SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import select

from gpulease.db.money_tables import LedgerEntry
from gpulease.domain.errors import InvalidInput
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.schemas.money import QuoteRequest
from gpulease.services.catalog import quotes
from gpulease.services.instances import actions
from gpulease.services.money import addons, leases
from gpulease.services.money import wallet as wallet_svc
from gpulease.services.money.invoices import run as invoice_run
from gpulease.services.money.invoices import views as invoices
from gpulease.services.money.wallet import ledger_sums_to_balance
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import TenantCtx
from gpulease.testing.clock import MovableClock
from gpulease.worker.runner import Worker

CAL = ZoneInfo("Asia/Shanghai")
ADD = {"public-bandwidth": Decimal(100), "support-standard": Decimal(1)}


def _order(p: Platform, t: TenantCtx, key: str, **kw: object) -> str:
    req = OrderRequest.model_validate({"sku": "h100-80g-x8", "region": "ningxia-1",
                                       "ssh_keys": [key], "add": ADD, **kw})
    return orders.place_order(p, t.principal, req)[0].id


def _charges(p: Platform, t: TenantCtx) -> list[tuple[str, Decimal]]:
    return sorted((e.reference or "", -e.amount) for e in wallet_svc.ledger(
        p, t.principal, limit=200).items if e.kind == "charge")


def test_order_add_ons_are_held_as_quoted_and_charged_per_period(
    fleet: Platform, tenant: TenantCtx, operator: TenantCtx, worker: Worker, key: str,
) -> None:
    clock = MovableClock(datetime(2026, 11, 2, 8, tzinfo=CAL))
    fleet.clock = clock
    quote = quotes.make_quote(fleet, QuoteRequest(sku="h100-80g-x8", region="ningxia-1",
                                                  add=ADD))
    assert quote.total == Decimal("88980.00")  # 84,480 + 100 Mbps × ¥25 + ¥2,000 support
    iid = _order(fleet, tenant, key)
    assert wallet_svc.show_wallet(fleet, tenant.principal).held == quote.total
    worker.run_until_idle()
    lease = leases.show_lease(fleet, tenant.principal, iid)
    assert lease.unit_price == Decimal("84480.00")  # the servers' price: what renews
    assert lease.schedule[0].price == quote.total  # what the first period cost
    amounts = sorted(a for _, a in _charges(fleet, tenant))
    assert amounts == [Decimal("2000.00"), Decimal("2500.00"), Decimal("84480.00")]

    renewed = leases.renew(fleet, tenant.principal, iid, periods=2)
    assert [p.price for p in renewed.schedule] == [quote.total] * 3
    assert sum(a for _, a in _charges(fleet, tenant)) == quote.total * 3

    clock.at = datetime(2026, 12, 3, 8, tzinfo=CAL)
    invoice_run.run_invoices(fleet, operator.principal, "2026-11", finalize=True)
    listed = invoices.list_invoices(fleet, tenant.principal,
                                    invoices.InvoiceFilter(period="2026-11"))
    inv = invoices.show_invoice(fleet, tenant.principal, listed.items[0].id)
    (bandwidth,) = [ln for ln in inv.lines if ln.description.startswith("Public bandwidth")]
    # three months of 100 Mbps: 300 Mbps-months at ¥25, November to February
    assert (bandwidth.gross, bandwidth.quantity, bandwidth.unit, bandwidth.unit_price) == (
        Decimal("7500.00"), Decimal(300), "mbps-month", Decimal(25))
    assert bandwidth.service_from is not None and bandwidth.service_to is not None
    assert bandwidth.service_to.astimezone(CAL).date().isoformat() == "2027-02-02"
    assert inv.total == quote.total * 3
    with fleet.db.read() as s:
        assert ledger_sums_to_balance(s, tenant.tenant_id)


def test_add_ons_change_mid_lease_and_come_back_with_periods_not_begun(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str,
) -> None:
    clock = MovableClock(datetime(2026, 11, 1, 0, tzinfo=CAL))
    fleet.clock = clock
    iid = _order(fleet, tenant, key)
    worker.run_until_idle()
    leases.renew(fleet, tenant.principal, iid)  # November and December paid
    clock.at = datetime(2026, 11, 16, 0, tzinfo=CAL)  # half of November left
    before = wallet_svc.show_wallet(fleet, tenant.principal).balance
    rows = addons.set_addon(fleet, tenant.principal, iid, "public-bandwidth", Decimal(300))
    paid = before - wallet_svc.show_wallet(fleet, tenant.principal).balance
    # 200 Mbps more: ¥5,000 a month; half of November, all of December
    assert paid == Decimal("2500.00") + Decimal("5000.00")
    assert [(r.quantity, r.until is None) for r in rows if r.addon == "public-bandwidth"] == [
        (Decimal(100), False), (Decimal(300), True)]
    with fleet.db.read() as s:  # its invoice line says what was added, at what unit price
        raised = s.scalars(select(LedgerEntry).where(LedgerEntry.kind == "charge")
                           .order_by(LedgerEntry.id.desc()).limit(1)).one()
        assert (raised.quantity, raised.unit_price) == (Decimal(200), Decimal("37.5"))
        assert raised.quantity * raised.unit_price == -raised.amount

    lease = leases.show_lease(fleet, tenant.principal, iid)
    rows = addons.set_addon(fleet, tenant.principal, iid, "support-standard", Decimal(0))
    support = [r for r in rows if r.addon == "support-standard"]
    assert support[0].until == lease.ends_at  # removed when the paid periods end, no refund
    assert wallet_svc.show_wallet(fleet, tenant.principal).balance == before - paid
    january = leases.renew(fleet, tenant.principal, iid)
    assert january.schedule[-1].price == Decimal("84480.00") + Decimal("7500.00")

    clock.move(days=1)
    balance = wallet_svc.show_wallet(fleet, tenant.principal).balance
    actions.release_instance(fleet, tenant.principal, iid)
    refund = wallet_svc.show_wallet(fleet, tenant.principal).balance - balance
    # December (servers, 300 Mbps, support) and January (servers, 300 Mbps), less 20 %
    december = Decimal("84480.00") + Decimal("2500.00") + Decimal("5000.00") + Decimal("2000")
    assert refund == ((december + Decimal("91980.00")) * Decimal("0.8")).quantize(
        Decimal("0.01"))
    with fleet.db.read() as s:
        assert ledger_sums_to_balance(s, tenant.tenant_id)


def test_add_ons_that_cannot_be_ordered_are_refused(
    fleet: Platform, tenant: TenantCtx, key: str,
) -> None:
    with pytest.raises(InvalidInput, match="metered") as metered:
        orders.place_order(fleet, tenant.principal, OrderRequest(
            sku="h100-80g-x8", region="ningxia-1", ssh_keys=[key], add={"egress": Decimal(5)}))
    assert metered.value.field == "add" and "public-bandwidth" in (metered.value.accepted or [])
    with pytest.raises(InvalidInput, match="Unknown add-on"):
        orders.place_order(fleet, tenant.principal, OrderRequest(
            sku="h100-80g-x8", region="ningxia-1", ssh_keys=[key], add={"gold": Decimal(1)}))
    with pytest.raises(InvalidInput, match="container's egress is metered"):
        orders.place_order(fleet, tenant.principal, OrderRequest(
            kind="container", offer="rtx4090-24g-container", gpus=1, ssh_keys=[key],
            add={"public-bandwidth": Decimal(10)}))
    with pytest.raises(InvalidInput, match="taken whole"):
        orders.place_order(fleet, tenant.principal, OrderRequest(
            sku="h100-80g-x8", region="ningxia-1", ssh_keys=[key],
            add={"support-standard": Decimal("0.5")}))
    assert wallet_svc.show_wallet(fleet, tenant.principal).held == 0  # nothing was held


def test_a_cluster_s_bandwidth_is_per_server(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str,
) -> None:
    fleet.clock = MovableClock(datetime(2026, 11, 2, 8, tzinfo=CAL))
    quote = quotes.make_quote(fleet, QuoteRequest(
        sku="h100-80g-x8", region="ningxia-1", servers=2,
        add={"public-bandwidth": Decimal(10)}))
    iid = orders.place_order(fleet, tenant.principal, OrderRequest(
        kind="cluster", nodes=2, sku="h100-80g-x8", region="ningxia-1", ssh_keys=[key],
        add={"public-bandwidth": Decimal(10)}))[0].id
    assert wallet_svc.show_wallet(fleet, tenant.principal).held == quote.total
    worker.run_until_idle()
    assert leases.show_lease(fleet, tenant.principal, iid).schedule[0].price == quote.total
    assert timedelta(0) < leases.show_lease(fleet, tenant.principal, iid).ends_at - (
        fleet.clock.now())


def test_the_latest_change_of_an_add_on_is_the_one_that_renews(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str,
) -> None:
    """Lowered twice, or lowered then raised: only the last wish is charged at renewal."""
    fleet.clock = MovableClock(datetime(2026, 11, 1, 0, tzinfo=CAL))
    iid = _order(fleet, tenant, key)  # 100 Mbps and support
    worker.run_until_idle()
    addons.set_addon(fleet, tenant.principal, iid, "public-bandwidth", Decimal(50))
    rows = addons.set_addon(fleet, tenant.principal, iid, "public-bandwidth", Decimal(20))
    pending = [r for r in rows if r.addon == "public-bandwidth" and r.until is None]
    assert [r.quantity for r in pending] == [Decimal(20)]
    lease = leases.renew(fleet, tenant.principal, iid)
    # servers ¥84,480 + support ¥2,000 + 20 Mbps × ¥25
    assert lease.schedule[-1].price == Decimal("86980.00")
    addons.set_addon(fleet, tenant.principal, iid, "support-standard", Decimal(0))
    rows = addons.set_addon(fleet, tenant.principal, iid, "support-standard", Decimal(2))
    support = [r for r in rows if r.addon == "support-standard" and r.until is None]
    assert [r.quantity for r in support] == [Decimal(2)]  # the pending removal is gone
