"""Quotes reproduce the seeds' figures; the wallet holds, charges and returns money with a
ledger that always sums to the balance. SQLite and PostgreSQL."""

from __future__ import annotations

from decimal import Decimal

import pytest
from pydantic import ValidationError
from sqlalchemy import func, select

from gpulease.db.money_tables import LedgerEntry
from gpulease.db.tables import GpuAllocation, Instance
from gpulease.domain.billing.pricing import PricingError, Quantity, day_vs_month, quote
from gpulease.domain.errors import Conflict, Forbidden, InvalidInput, PaymentRequired
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.schemas.money import QuoteRequest
from gpulease.services.catalog import quotes
from gpulease.services.instances import views as instances
from gpulease.services.money import wallet
from gpulease.services.money.wallet import ledger_sums_to_balance
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import TenantCtx, fund, new_tenant
from gpulease.testing.factories import node_name_of, sim
from gpulease.worker.runner import Worker

SEEDS = [("rtx4090-24g-x8", "sichuan-2", "23760.00"), ("rtx4090-48g-x8", "sichuan-3", "28800.00"),
         ("h100-80g-x8", "ningxia-1", "253440.00"),
         ("ascend910b-64g-x8", "huawei-zone", "46800.00")]


@pytest.mark.parametrize(("sku", "region", "total"), SEEDS)
def test_three_months_reproduce_the_seeds(platform: Platform, sku: str, region: str,
                                          total: str) -> None:
    q = quote(platform.catalog, sku, region, "month", Quantity(3))
    assert q.total == Decimal(total) and q.prices_include_vat
    assert q.net + q.vat == q.total and q.vat == (q.total - q.total / Decimal("1.06")
                                                  ).quantize(Decimal("0.01"))


def test_h100_is_10_7_times_the_4090(platform: Platform) -> None:
    h100 = quote(platform.catalog, "h100-80g-x8", "ningxia-1", "month").total
    rtx = quote(platform.catalog, "rtx4090-24g-x8", "sichuan-2", "month").total
    assert round(h100 / rtx, 1) == Decimal("10.7")


def test_full_fee_list_regions_break_even_and_terms(platform: Platform) -> None:
    view = quotes.make_quote(platform, QuoteRequest(
        sku="ascend910b-64g-x8", region="sichuan-1", term="month", count=2, servers=2,
        add={"public-bandwidth": Decimal(100), "egress": Decimal(500),
             "support-standard": Decimal(1)}, days_per_week=Decimal(1)))
    lines = {line.item: line for line in view.lines}
    assert lines["ascend910b-64g-x8@sichuan-1"].amount == Decimal("68160.00")  # 17,040 × 2 × 2
    assert lines["public-bandwidth"].quantity == 400  # 100 Mbps × 2 months × 2 servers
    assert lines["public-bandwidth"].amount == Decimal("10000.00")
    assert lines["egress"].amount == Decimal("250.00")
    assert lines["support-standard"].amount == Decimal("4000.00")  # per month, per account
    assert view.total == Decimal("82410.00")
    assert sum(line.amount for line in view.lines) == view.total
    # 910B is ~10 % cheaper in the Huawei zone than in Sichuan-1
    assert [r["region"] for r in view.regions] == ["huawei-zone", "sichuan-1"]
    assert view.break_even is not None and view.break_even.cheaper == "day"
    assert "20%" in view.early_termination


def test_day_vs_month_for_one_day_a_week(platform: Platform) -> None:
    even = day_vs_month(platform.catalog, "h100-80g-x8", "ningxia-1", Decimal(1))
    # day = 84,480 ÷ 30 × 1.3 = 3,660.80; × 52/12 weeks = 15,863.47 a month
    assert even.by_day_per_month == Decimal("15863.47") and even.cheaper == "day"
    assert even.break_even_days_per_month == Decimal("23.1")
    assert day_vs_month(platform.catalog, "h100-80g-x8", "ningxia-1",
                        Decimal(6)).cheaper == "month"


@pytest.mark.parametrize(("change", "field"), [
    ({"term": "week"}, "term"), ({"add": {"gold-plating": Decimal(1)}}, "add"),
    ({"add": {"egress": Decimal(-5)}}, "add"), ({"count": 0}, "count"),
    ({"region": "mars-1"}, "region"), ({"sku": "tpu-v9"}, "sku"),
])
def test_bad_quote_input_names_the_field(platform: Platform, change: dict[str, object],
                                         field: str) -> None:
    req = {"sku": "h100-80g-x8", "region": "ningxia-1", "term": "month", **change}
    try:
        body = QuoteRequest(**req)  # type: ignore[arg-type]
    except ValidationError as refused:  # out of the request's bounds (a 422 at the API)
        assert refused.errors()[0]["loc"][0] == field
    else:
        with pytest.raises(InvalidInput) as exc:
            quotes.make_quote(platform, body)
        assert exc.value.field == field
    with pytest.raises(PricingError):
        quote(platform.catalog, str(req["sku"]), str(req["region"]), str(req["term"]),
              Quantity(int(req.get("count", 1)), 1, req.get("add")))  # type: ignore[arg-type]


def ledger_ok(p: Platform, tenant_id: str) -> bool:
    with p.db.read() as s:
        return ledger_sums_to_balance(s, tenant_id)


def test_order_holds_delivery_charges_failure_returns(
    fleet: Platform, operator: TenantCtx, worker: Worker, key: str
) -> None:
    t = new_tenant(fleet, "payer")
    start = wallet.show_wallet(fleet, t.principal).balance
    req = OrderRequest(sku="h100-80g-x8", region="ningxia-1", ssh_keys=[key])
    iid = orders.place_order(fleet, t.principal, req)[0].id
    w = wallet.show_wallet(fleet, t.principal)
    assert w.held == Decimal("84480.00") and w.balance == start - Decimal("84480.00")
    worker.run_until_idle()
    w = wallet.show_wallet(fleet, t.principal)
    assert w.held == 0 and w.balance == start - Decimal("84480.00")
    kinds = [e.kind for e in wallet.ledger(fleet, t.principal).items]
    assert kinds == ["charge", "hold_release", "hold", "topup"]
    # an order that fails before delivery gets its hold back
    failing = orders.place_order(fleet, t.principal, req)[0].id
    sim(fleet).inject_fault(node_name_of(fleet, t, failing), "insert_media", "permanent")
    worker.run_until_idle()
    assert instances.show_instance(fleet, t.principal, failing).status == "failed"
    assert wallet.show_wallet(fleet, t.principal).balance == start - Decimal("84480.00")
    assert ledger_ok(fleet, t.tenant_id)
    assert iid


def test_short_balance_is_402_with_the_amount_missing_and_nothing_written(
    fleet: Platform, operator: TenantCtx, key: str
) -> None:
    from gpulease.services.accounts import identity as accounts

    created = accounts.create_tenant(fleet, "poor", accounts.Person("poor@example.com", "Poor"))
    poor = accounts.authenticate(fleet, created.token.token)
    fund(fleet, created.tenant.id, "50000")
    with fleet.db.read() as s:
        before = (s.scalar(select(func.count()).select_from(Instance)),
                  s.scalar(select(func.count()).select_from(GpuAllocation)))
    with pytest.raises(PaymentRequired) as exc:
        orders.place_order(fleet, poor, OrderRequest(sku="h100-80g-x8", region="ningxia-1",
                                                     ssh_keys=[key]))
    assert exc.value.missing == Decimal("34480.00")
    assert "34,480.00 missing" in exc.value.detail
    with fleet.db.read() as s:
        assert (s.scalar(select(func.count()).select_from(Instance)),
                s.scalar(select(func.count()).select_from(GpuAllocation))) == before
    # a credit limit covers the gap
    wallet.set_credit_limit(fleet, operator.principal, created.tenant.id, Decimal("40000"))
    orders.place_order(fleet, poor, OrderRequest(sku="h100-80g-x8", region="ningxia-1",
                                                 ssh_keys=[key]))
    assert wallet.show_wallet(fleet, poor).balance == Decimal("-34480.00")
    assert ledger_ok(fleet, created.tenant.id)


def test_top_ups_need_an_operator_a_reference_and_a_sane_amount(
    platform: Platform, operator: TenantCtx, tenant: TenantCtx
) -> None:
    tid = tenant.tenant_id
    with pytest.raises(Forbidden):
        wallet.top_up(platform, tenant.principal, tid, Decimal(10), "r1")
    for amount, ref, field in [(Decimal(-5), "r", "amount"), (Decimal("1.005"), "r", "amount"),
                               (Decimal("1e9"), "r", "amount"), (Decimal(5), " ", "reference")]:
        with pytest.raises(InvalidInput) as exc:
            wallet.top_up(platform, operator.principal, tid, amount, ref)
        assert exc.value.field == field
    before = wallet.show_wallet(platform, tenant.principal).balance
    wallet.top_up(platform, operator.principal, tid, Decimal("1000.50"), "bank-77")
    with pytest.raises(Conflict, match="already recorded"):
        wallet.top_up(platform, operator.principal, tid, Decimal("1000.50"), "bank-77")
    assert wallet.show_wallet(platform, tenant.principal).balance == before + Decimal("1000.50")
    with platform.db.read() as s:
        refs = s.scalars(select(LedgerEntry.reference).where(LedgerEntry.tenant_id == tid))
        assert list(refs).count("bank-77") == 1
    assert ledger_ok(platform, tid)
