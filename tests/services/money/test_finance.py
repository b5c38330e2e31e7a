"""What a finance team needs: the tenant's billing profile (抬头, 纳税人识别号, address,
bank, 普票/专票) printed on invoices as they were when issued and exported for the fapiao
system; invoices paid or unpaid (spending on credit) and settled by top-ups oldest first;
wallet balance paid back to the tenant; a year lease's revenue earned month by month.
SQLite and PostgreSQL."""

from __future__ import annotations

import csv
import io
from datetime import datetime
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from pypdf import PdfReader

from gpulease.domain.accounts import Principal, Role
from gpulease.domain.billing.profile import credit_code_check, tax_id_problem
from gpulease.domain.errors import Conflict, Forbidden, InvalidInput, NotFound
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.schemas.money import BillingProfileIn
from gpulease.services.money import billing_profiles, wallet
from gpulease.services.money.invoices import run as invoice_run
from gpulease.services.money.invoices import views as invoices
from gpulease.services.money.invoices.documents import (
    render_csv,
    render_export_csv,
    render_pdf,
)
from gpulease.services.money.wallet import ledger_sums_to_balance
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import TenantCtx, new_tenant
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import deliver
from gpulease.worker.runner import Worker

CAL = ZoneInfo("Asia/Shanghai")
CODE = "91350100M000100Y43"  # a unified social credit code with its check character
SPECIAL = BillingProfileIn(title="算力科技有限公司", tax_id=CODE, address="成都市高新区 1 号",
                           phone="028-12345678", bank="招商银行成都分行",
                           bank_account="1289 0000 1234 5678", invoice_type="special",
                           email="ap@example.cn")


def test_taxpayer_ids_are_checked() -> None:
    assert credit_code_check(CODE[:17]) == CODE[17]
    assert tax_id_problem(CODE) is None
    assert "mistyped" in (tax_id_problem(CODE[:17] + "4") or "")
    assert "capital letters" in (tax_id_problem(CODE[:17].replace("M", "I") + "3") or "")
    assert tax_id_problem("110108123456789") is None  # a 15-character number from before
    assert "18-character" in (tax_id_problem("12345") or "")


def _month_with_profile(fleet: Platform, tenant: TenantCtx, operator: TenantCtx,
                        worker: Worker, key: str) -> str:
    clock = MovableClock(datetime(2026, 11, 10, 8, tzinfo=CAL))
    fleet.clock = clock
    billing_profiles.set_profile(fleet, tenant.principal, SPECIAL)
    deliver(fleet, tenant, worker, key)
    clock.at = datetime(2026, 12, 3, 8, tzinfo=CAL)
    invoice_run.run_invoices(fleet, operator.principal, "2026-11", finalize=True)
    return invoices.list_invoices(fleet, tenant.principal,
                                  invoices.InvoiceFilter(period="2026-11")).items[0].id


def test_the_billing_profile_is_printed_as_it_was_when_issued_and_exported(
    fleet: Platform, tenant: TenantCtx, operator: TenantCtx, worker: Worker, key: str,
) -> None:
    member = Principal(user_id="m", tenant_id=tenant.tenant_id, role=Role.MEMBER)
    with pytest.raises(Forbidden):
        billing_profiles.set_profile(fleet, member, SPECIAL)
    with pytest.raises(NotFound, match="billing-profile"):
        billing_profiles.show_profile(fleet, tenant.principal)
    with pytest.raises(InvalidInput) as bad:  # a special invoice needs the bank
        billing_profiles.set_profile(fleet, tenant.principal,
                                     SPECIAL.model_copy(update={"bank": ""}))
    assert bad.value.field == "bank" and "专票" in str(bad.value)
    with pytest.raises(InvalidInput) as typo:
        billing_profiles.set_profile(fleet, tenant.principal,
                                     SPECIAL.model_copy(update={"tax_id": CODE[:17] + "4"}))
    assert typo.value.field == "tax_id"

    inv_id = _month_with_profile(fleet, tenant, operator, worker, key)
    inv = invoices.show_invoice(fleet, tenant.principal, inv_id)
    assert inv.buyer is not None and inv.buyer.title == SPECIAL.title
    assert inv.buyer.tax_id == CODE and inv.payment_status == "paid"
    # a later change of the profile never alters what an issued invoice printed
    billing_profiles.set_profile(fleet, tenant.principal,
                                 BillingProfileIn(title="新名字有限公司"))
    assert invoices.show_invoice(fleet, tenant.principal, inv_id).buyer == inv.buyer
    text = "".join(page.extract_text() for page in PdfReader(io.BytesIO(
        render_pdf(inv, "Provider"))).pages)
    assert CODE in text and "1289 0000 1234 5678" in text
    # each line the platform described: the English, and the Chinese under it
    first = next(ln for ln in inv.lines if "first month of" in ln.description)
    flat = text.replace("\n", " ")  # the narrow column wraps
    assert f"first month of {first.instance_id}" in flat
    assert f"{first.instance_id} 的首月" in flat
    # what people typed is printed as text, markup characters and all
    odd = inv.model_copy(update={"buyer": inv.buyer.model_copy(update={"title": "A&B <Ltd>"})})
    assert "A&B <Ltd>" in "".join(page.extract_text() for page in PdfReader(io.BytesIO(
        render_pdf(odd, "P&Q"))).pages)

    exported = invoices.export_period(fleet, operator.principal, "2026-11")
    assert [i.number for i in exported] == [inv.number]
    body = render_export_csv(exported)
    assert body.startswith("\ufeff")
    rows = list(csv.DictReader(io.StringIO(body.lstrip("\ufeff"))))
    assert len(rows) == len(inv.lines) and rows[0]["buyer"] == SPECIAL.title
    assert rows[0]["tax_id"] == CODE and rows[0]["invoice_type"] == "special"
    assert sum(Decimal(r["gross"]) for r in rows) == inv.total
    # what a tenant typed is never a formula in a spreadsheet; amounts stay numbers
    hostile = {"title": '=HYPERLINK("http://x.example/","pay")', "address": "+cmd|' /C calc'!A0",
               "phone": "@SUM(1+1)", "bank": "-2+3", "bank_account": "\t=1"}
    sly = exported[0].model_copy(update={"buyer": inv.buyer.model_copy(update=hostile)})
    for body in (render_export_csv([sly]), render_csv(sly)):
        cells = [c for row in csv.reader(io.StringIO(body.lstrip("\ufeff"))) for c in row]
        for value in hostile.values():
            assert "'" + value in cells and value not in cells
        assert all(not c.startswith(("=", "+", "@", "\t")) for c in cells)
    with pytest.raises(Forbidden):
        invoices.export_period(fleet, tenant.principal, "2026-11")


def test_spending_on_credit_leaves_an_invoice_unpaid_until_top_ups_settle_it(
    fleet: Platform, operator: TenantCtx, worker: Worker, key: str,
) -> None:
    clock = MovableClock(datetime(2026, 11, 10, 8, tzinfo=CAL))
    fleet.clock = clock
    t = new_tenant(fleet, funds="10000")
    wallet.set_credit_limit(fleet, operator.principal, t.tenant_id, Decimal("100000"))
    deliver(fleet, t, worker, key)  # ¥84,480 on ¥10,000: ¥74,480 on credit
    clock.at = datetime(2026, 12, 3, 8, tzinfo=CAL)
    invoice_run.run_invoices(fleet, operator.principal, "2026-11", finalize=True)
    inv_id = invoices.list_invoices(fleet, t.principal,
                                    invoices.InvoiceFilter(period="2026-11")).items[0].id
    inv = invoices.show_invoice(fleet, t.principal, inv_id)
    assert (inv.payment_status, inv.amount_due) == ("unpaid", Decimal("74480.00"))
    wallet.top_up(fleet, operator.principal, t.tenant_id, Decimal("50000"), "part")
    inv = invoices.show_invoice(fleet, t.principal, inv_id)
    assert (inv.payment_status, inv.amount_due) == ("unpaid", Decimal("24480.00"))
    wallet.top_up(fleet, operator.principal, t.tenant_id, Decimal("30000"), "rest")
    inv = invoices.show_invoice(fleet, t.principal, inv_id)
    assert inv.payment_status == "paid" and inv.amount_due == 0 and inv.paid_at is not None
    with fleet.db.read() as s:
        assert ledger_sums_to_balance(s, t.tenant_id)


def test_wallet_balance_is_paid_back_at_most_once_per_reference(
    fleet: Platform, operator: TenantCtx,
) -> None:
    t = new_tenant(fleet, funds="1000")
    wallet.set_credit_limit(fleet, operator.principal, t.tenant_id, Decimal("5000"))
    with pytest.raises(InvalidInput, match="credit limit is not money"):
        wallet.payout(fleet, operator.principal, t.tenant_id, Decimal("1000.01"), "r1")
    with pytest.raises(Forbidden):
        wallet.payout(fleet, t.principal, t.tenant_id, Decimal("1"), "mine")
    view = wallet.payout(fleet, operator.principal, t.tenant_id, Decimal("600"), "r1")
    assert view.balance == Decimal("400.00")
    with pytest.raises(Conflict, match="already recorded"):
        wallet.payout(fleet, operator.principal, t.tenant_id, Decimal("100"), "r1")
    (entry,) = [e for e in wallet.ledger(fleet, t.principal).items if e.kind == "payout"]
    assert entry.amount == Decimal("-600.00") and entry.reference == "r1"
    with fleet.db.read() as s:
        assert ledger_sums_to_balance(s, t.tenant_id)


def test_a_year_lease_is_earned_month_by_month(
    fleet: Platform, tenant: TenantCtx, operator: TenantCtx, worker: Worker, key: str,
) -> None:
    clock = MovableClock(datetime(2026, 11, 1, 0, tzinfo=CAL))
    fleet.clock = clock
    iid = orders.place_order(fleet, tenant.principal, OrderRequest(
        sku="h100-80g-x8", region="ningxia-1", term="year", ssh_keys=[key]))[0].id
    worker.run_until_idle()
    clock.at = datetime(2026, 12, 3, 8, tzinfo=CAL)
    invoice_run.run_invoices(fleet, operator.principal, "2026-11", finalize=True)
    listed = invoices.list_invoices(fleet, tenant.principal,
                                    invoices.InvoiceFilter(period="2026-11"))
    inv = invoices.show_invoice(fleet, tenant.principal, listed.items[0].id)
    (year,) = [ln for ln in inv.lines if iid in ln.description and ln.kind == "charge"]
    assert year.service_to is not None and year.service_from is not None
    assert (year.service_to - year.service_from).days == 365
    assert sum((r.net for r in year.revenue), Decimal(0)) == year.net
    assert [r.period for r in year.revenue][:2] == ["2026-11", "2026-12"]
    report = invoices.revenue(fleet, operator.principal, "2026-11", "2027-12")
    by = {m.period: m.net for m in report.months}
    assert report.total == year.net and by["2027-11"] == 0  # all earned by Nov 1, 2027
    # each month earns its share of the days: 30 of 365 in November
    assert abs(by["2026-11"] - year.net * 30 / 365) < 1
    with pytest.raises(InvalidInput) as bad:
        invoices.revenue(fleet, operator.principal, "2026-11", "2026-13")
    assert bad.value.field == "end"
