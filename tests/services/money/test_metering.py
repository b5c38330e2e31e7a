"""Metering and invoices: container GPU-hours charged once each (also across a worker's
crash and a month's end), reported usage under idempotency keys, monthly invoices drawn from
the ledger (draft, final and sealed, credit notes), SLA credits on the next invoice, CSV and
PDF. SQLite and PostgreSQL."""

from __future__ import annotations

import io
import os
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pypdf import PdfReader
from sqlalchemy import select

from gpulease.db.money_tables import Invoice, InvoiceLine
from gpulease.db.tables import HardwareAlert
from gpulease.domain.billing.invoicing import vat_split
from gpulease.domain.billing.proration import (
    allocate,
    period_bounds,
    period_of,
    previous_period,
    prorate_by_month,
)
from gpulease.domain.errors import Conflict, Forbidden, InvalidInput, NotFound
from gpulease.platform import Platform
from gpulease.schemas.money import UsageIn
from gpulease.services.agents import credentials as agent_credentials
from gpulease.services.agents import node_agent as node_agents
from gpulease.services.instances import actions
from gpulease.services.instances import views as instances
from gpulease.services.money import metering, sla, wallet
from gpulease.services.money.invoices import run as invoice_run
from gpulease.services.money.invoices import views as invoices
from gpulease.services.money.invoices.documents import (
    EMBEDDED_FONT,
    pdf_font,
    render_csv,
    render_pdf,
)
from gpulease.services.money.wallet import ledger_sums_to_balance
from gpulease.services.telemetry import pushes
from gpulease.testing.callers import TenantCtx, new_tenant
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import container, deliver, sim, window
from gpulease.worker.jobs.money import meter as container_meter
from gpulease.worker.runner import Worker

NOV = "2026-11"


# The platform's calendar (the default time zone): months and days are counted on it.
CAL = ZoneInfo("Asia/Shanghai")


@pytest.fixture
def clock(fleet: Platform) -> MovableClock:
    c = MovableClock(datetime(2026, 11, 30, 22, 40, tzinfo=CAL))
    fleet.clock = c
    return c


# --- pure arithmetic -----------------------------------------------------------------------

@given(st.decimals(min_value=Decimal("-100000"), max_value=Decimal("100000"), places=2),
       st.lists(st.integers(min_value=0, max_value=10**6), min_size=1, max_size=8)
       .filter(lambda w: sum(w) > 0))
def test_allocated_parts_sum_to_the_whole(amount: Decimal, weights: list[int]) -> None:
    parts = allocate(amount, weights)
    assert sum(parts) == amount and all(p == p.quantize(Decimal("0.01")) for p in parts)
    exact = [amount * w / sum(weights) for w in weights]
    assert all(abs(p - e) < Decimal("0.01") for p, e in zip(parts, exact, strict=True))


def test_an_hour_across_the_month_end_is_split_by_time() -> None:
    start = datetime(2026, 11, 30, 23, 40, tzinfo=UTC)
    parts = prorate_by_month(Decimal("3.92"), start, start + timedelta(hours=1), UTC)
    assert [(a.month, part) for a, _, part in parts] == [(11, Decimal("1.31")),
                                                          (12, Decimal("2.61"))]
    assert period_bounds("2026-12", UTC) == (datetime(2026, 12, 1, tzinfo=UTC),
                                             datetime(2027, 1, 1, tzinfo=UTC))
    with pytest.raises(ValueError, match="YYYY-MM"):
        period_bounds("2026-13", UTC)


def test_invoice_months_are_the_platform_calendar_s() -> None:
    beijing = ZoneInfo("Asia/Shanghai")
    # March in Beijing starts at 16:00 UTC on Feb 28: the first 8 hours are March's
    assert period_bounds("2027-03", beijing) == (datetime(2027, 2, 28, 16, tzinfo=UTC),
                                                 datetime(2027, 3, 31, 16, tzinfo=UTC))
    assert period_of(datetime(2027, 2, 28, 17, tzinfo=UTC), beijing) == "2027-03"
    assert previous_period(datetime(2027, 1, 1, 2, tzinfo=beijing), beijing) == "2026-12"
    # an hour of usage across midnight of Mar 1 in Beijing: split there, not at UTC's
    start = datetime(2027, 2, 28, 15, 30, tzinfo=UTC)
    parts = prorate_by_month(Decimal("4.00"), start, start + timedelta(hours=1), beijing)
    assert [(a, part) for a, _, part in parts] == [
        (start, Decimal("2.00")), (datetime(2027, 2, 28, 16, tzinfo=UTC), Decimal("2.00"))]


def test_vat_is_split_once_per_line() -> None:
    inside = vat_split(Decimal("84480.00"), Decimal("0.06"), included=True)
    assert inside.net == Decimal("79698.11") and inside.vat == Decimal("4781.89")
    on_top = vat_split(Decimal("100.00"), Decimal("0.06"), included=False)
    assert (on_top.net, on_top.vat, on_top.gross) == (Decimal("100.00"), Decimal("6.00"),
                                                      Decimal("106.00"))
    assert vat_split(Decimal("-1.31"), Decimal("0.06"), True).gross == Decimal("-1.31")


# --- metering --------------------------------------------------------------------------------


def _usage(iid: str, key: str = "egress-2026-11-30", kind: str = "egress_gb",
           qty: str = "120.5", hours: int = 1) -> UsageIn:
    end = datetime(2026, 11, 30, 23, 0, tzinfo=CAL)
    return UsageIn(key=key, instance_id=iid, kind=kind,  # type: ignore[arg-type]
                   quantity=Decimal(qty), started_at=end - timedelta(hours=hours),
                   ended_at=end)


def test_reported_usage_is_rated_and_a_duplicate_key_is_ignored(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, operator: TenantCtx,
    worker: Worker, key: str,
) -> None:
    clock.at = datetime(2026, 11, 29, 10, 0, tzinfo=CAL)
    iid = deliver(fleet, tenant, worker, key)
    clock.at = datetime(2026, 12, 1, 1, 0, tzinfo=CAL)
    before = wallet.show_wallet(fleet, tenant.principal).balance
    first = metering.report_usage(fleet, operator.principal, [
        _usage(iid), _usage(iid, "storage-1", "storage_gb_days", "3000", hours=24)])
    assert [u.amount for u in first] == [Decimal("60.25"), Decimal("35.00")]  # 0.50/GB; 0.35/30
    assert not any(u.duplicate for u in first)
    again = metering.report_usage(fleet, operator.principal, [_usage(iid)])
    assert again[0].duplicate and again[0].amount == Decimal("60.25")
    assert wallet.show_wallet(fleet, tenant.principal).balance == before - Decimal("95.25")

    # the same key with other content, bad input: refused whole, nothing written
    bad = [
        ([_usage(iid, key="new-1"), _usage(iid, qty="99")], Conflict),
        ([_usage(iid, key="x", kind="gpu_hours")], InvalidInput),  # bare metal is leased
        ([_usage("i-nope", key="y")], NotFound),
        ([_usage(iid, key="z"), _usage(iid, key="z")], InvalidInput),
    ]
    for records, error in bad:
        with pytest.raises(error):
            metering.report_usage(fleet, operator.principal, records)
    future = _usage(iid, key="f").model_copy(update={"ended_at": clock.at + timedelta(days=1)})
    with pytest.raises(InvalidInput, match="not in the future"):
        metering.report_usage(fleet, operator.principal, [future])
    with pytest.raises(Forbidden):
        metering.report_usage(fleet, tenant.principal, [_usage(iid, key="mine")])
    assert wallet.show_wallet(fleet, tenant.principal).balance == before - Decimal("95.25")
    assert metering.list_usage(fleet, tenant.principal).total == 2


def test_many_small_records_are_charged_what_their_sum_costs_to_the_fen(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, operator: TenantCtx,
    worker: Worker, key: str,
) -> None:
    """Each record was rounded to the fen before summing: 200 records of 0.0167 GB at
    ¥0.50 billed 200 × ¥0.01 = ¥2.00 for ¥1.67 of egress. The rounding is carried from
    record to record: the month's records sum to the rounded price of their sum."""
    clock.at = datetime(2026, 11, 29, 10, 0, tzinfo=CAL)
    iid = deliver(fleet, tenant, worker, key)
    clock.at = datetime(2026, 12, 1, 1, 0, tzinfo=CAL)
    before = wallet.show_wallet(fleet, tenant.principal).balance
    charged = []
    for batch in range(2):
        charged += metering.report_usage(fleet, operator.principal, [
            _usage(iid, key=f"tiny-{batch}-{n}", qty="0.0167") for n in range(100)])
    assert sum(u.amount for u in charged) == Decimal("1.67")  # 200 × 0.0167 × ¥0.50
    assert wallet.show_wallet(fleet, tenant.principal).balance == before - Decimal("1.67")


# --- invoices --------------------------------------------------------------------------------

def _month_of_activity(fleet: Platform, clock: MovableClock, tenant: TenantCtx,
                       operator: TenantCtx, worker: Worker, key: str) -> tuple[str, str]:
    clock.at = datetime(2026, 11, 10, 8, 0, tzinfo=CAL)
    bm = deliver(fleet, tenant, worker, key)
    clock.at = datetime(2026, 11, 30, 21, 40, tzinfo=CAL)
    ct = container(fleet, tenant, worker, key)
    clock.move(hours=2, minutes=30)  # 00:10 Dec 1: hour 1 wholly in Nov, hour 2 split
    container_meter.meter_containers(fleet)
    metering.report_usage(fleet, operator.principal, [_usage(bm)])
    return bm, ct


def test_two_runs_of_a_month_at_once_both_answer_and_a_future_month_is_refused(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, operator: TenantCtx,
    worker: Worker, key: str,
) -> None:
    import threading

    _month_of_activity(fleet, clock, tenant, operator, worker, key)
    clock.at = datetime(2026, 12, 3, 1, 0, tzinfo=CAL)
    start = threading.Barrier(2)
    answers: list[object] = []

    def run() -> None:
        start.wait()
        try:
            answers.append(invoice_run.run_invoices(fleet, operator.principal, NOV,
                                                    finalize=True))
        except Exception as exc:
            answers.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    # One run finalizes; the other waited for it and answers (409 at most, never a 500).
    assert len(answers) == 2 and all(isinstance(a, Conflict) or not isinstance(a, Exception)
                                     for a in answers), answers
    assert any(not isinstance(a, Exception) for a in answers)
    finals = invoices.list_invoices(fleet, tenant.principal,
                                    invoices.InvoiceFilter(period=NOV)).items
    assert [i.number for i in finals] == ["GL2026-000001"]  # one invoice, numbered once
    # A month that has not begun cannot be drafted (it would take this month's entries).
    with pytest.raises(InvalidInput, match="2027-01 has not begun"):
        invoice_run.run_invoices(fleet, operator.principal, "2027-01")
    assert invoice_run.run_invoices(fleet, operator.principal, "2026-12").drafted == 1


def test_monthly_invoice_from_draft_to_final_and_credit_notes(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, operator: TenantCtx,
    worker: Worker, key: str,
) -> None:
    bm, ct = _month_of_activity(fleet, clock, tenant, operator, worker, key)
    with pytest.raises(InvalidInput, match="has not ended"):
        invoice_run.run_invoices(fleet, operator.principal, "2026-12", finalize=True)
    run = invoice_run.run_invoices(fleet, operator.principal, NOV)
    assert run.drafted == 1 and run.finalized == 0
    draft = invoices.list_invoices(fleet, tenant.principal,
                                   invoices.InvoiceFilter(period=NOV)).items[0]
    inv = invoices.show_invoice(fleet, tenant.principal, draft.id)
    assert inv.status == "draft" and inv.number is None
    by = {ln.description: ln for ln in inv.lines}
    assert by[f"h100-80g-x8 · ningxia-1 · first month of {bm}"].gross == Decimal("84480.00")
    assert by[f"Data egress · {bm}"].gross == Decimal("60.25")
    gpu = by[f"GPU-hours of rtx4090-24g-container · {ct}"]
    # hour 1 (22:40-23:40) and 20 minutes of hour 2 (23:40-00:40)
    assert gpu.gross == Decimal("5.23") and gpu.quantity == Decimal("2.666667")
    assert gpu.entries == 2
    assert sum(ln.gross for ln in inv.lines) == inv.total
    assert all(ln.net + ln.vat == ln.gross for ln in inv.lines)
    assert inv.net + inv.vat == inv.total

    # usage reported late (Dec 2) for November joins the draft when it is refreshed
    clock.at = datetime(2026, 12, 2, 9, 0, tzinfo=CAL)
    late = _usage(bm, key="egress-late", qty="10")
    metering.report_usage(fleet, operator.principal, [late])
    done = invoice_run.run_invoices(fleet, operator.principal, NOV, finalize=True)
    assert done.finalized == 1
    final = invoices.show_invoice(fleet, tenant.principal, draft.id)
    assert final.status == "final" and final.number == "GL2026-000001" and final.digest
    assert final.total == inv.total + Decimal("5.00")
    assert invoices.show_invoice(fleet, tenant.principal, "GL2026-000001").id == final.id

    # final means final: the ORM refuses, a rerun changes nothing, late usage waits
    with pytest.raises(Conflict, match="credit note"), fleet.db.write() as s:
        s.get(Invoice, final.id).total = Decimal(1)  # type: ignore[union-attr]
        s.flush()
    with pytest.raises(Conflict), fleet.db.write() as s:
        s.scalars(select(InvoiceLine).where(InvoiceLine.invoice_id == final.id)).first(
        ).gross = Decimal(0)  # type: ignore[union-attr]
        s.flush()
    metering.report_usage(fleet, operator.principal, [_usage(bm, key="later", qty="2")])
    assert invoice_run.run_invoices(fleet, operator.principal, NOV).drafted == 0
    assert invoices.show_invoice(fleet, tenant.principal, final.id) == final
    clock.at = datetime(2027, 1, 1, 1, 0, tzinfo=CAL)
    dec = invoice_run.run_invoices(fleet, operator.principal, "2026-12", finalize=True)
    dec_inv = invoices.list_invoices(fleet, tenant.principal,
                                     invoices.InvoiceFilter(period="2026-12")).items[0]
    dec_lines = invoices.show_invoice(fleet, tenant.principal, dec_inv.id).lines
    assert dec.finalized == 1 and dec_inv.number == "GL2026-000002"
    assert any(ln.description == f"Data egress · {bm}" and ln.gross == Decimal("1.00")
               for ln in dec_lines)  # the late November usage, billed once, in December

    # corrections are credit notes: the money goes back to the wallet
    balance = wallet.show_wallet(fleet, tenant.principal).balance
    with pytest.raises(Forbidden):
        invoice_run.credit_note(fleet, tenant.principal, final.id, "please")
    clock.at = datetime(2026, 12, 31, 19, 0, tzinfo=UTC)  # 03:00 on 1 January in Beijing
    note = invoice_run.credit_note(fleet, operator.principal, final.id, "GPU 3 slow",
                                Decimal("1000.00"))
    assert note.kind == "credit_note" and note.number == "CN2027-000001"  # Beijing's year
    assert note.total == Decimal("-1000.00") and note.corrects == final.id
    with pytest.raises(InvalidInput, match="at most"):
        invoice_run.credit_note(fleet, operator.principal, final.id, "too much",
                             final.total)
    rest = invoice_run.credit_note(fleet, operator.principal, final.id, "whole month refunded")
    assert rest.total == -(final.total - Decimal("1000.00"))
    with pytest.raises(Conflict, match="nothing left"):
        invoice_run.credit_note(fleet, operator.principal, final.id, "again")
    assert invoices.show_invoice(fleet, tenant.principal, final.id).credited == final.total
    assert wallet.show_wallet(fleet, tenant.principal).balance == balance + final.total
    # the notes' wallet entries are billed by the notes, never by a later invoice
    clock.at = datetime(2027, 2, 1, 1, 0, tzinfo=CAL)
    assert invoice_run.run_invoices(fleet, operator.principal, "2027-01").drafted == 0
    with fleet.db.read() as s:
        assert ledger_sums_to_balance(s, tenant.tenant_id)
        assert invoices.unbilled(s, tenant.tenant_id) == Decimal("0.00")


def test_invoices_are_the_tenants_own(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, operator: TenantCtx,
    worker: Worker, key: str,
) -> None:
    other = new_tenant(fleet, "other")
    _month_of_activity(fleet, clock, other, operator, worker, key)
    _month_of_activity(fleet, clock, tenant, operator, worker, key)
    assert invoice_run.run_invoices(fleet, operator.principal, NOV).drafted == 2  # one run
    inv = invoices.list_invoices(fleet, operator.principal,
                                 invoices.InvoiceFilter(tenant_id=tenant.tenant_id)).items[0]
    mine = invoices.list_invoices(fleet, other.principal).items[0]
    assert mine.tenant_id == other.tenant_id and mine.total == inv.total  # the same month
    with pytest.raises(NotFound):
        invoices.show_invoice(fleet, other.principal, inv.id)
    assert invoices.list_invoices(fleet, other.principal).total == 1
    with pytest.raises(Forbidden):
        invoice_run.run_invoices(fleet, tenant.principal, NOV)
    with pytest.raises(InvalidInput, match="YYYY-MM"):
        invoice_run.run_invoices(fleet, operator.principal, "November")
    with pytest.raises(Conflict, match="draft"):
        invoice_run.credit_note(fleet, operator.principal, inv.id, "not yet")


def test_the_worker_drafts_on_the_first_and_finalizes_on_the_third(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, operator: TenantCtx,
    worker: Worker, key: str,
) -> None:
    _month_of_activity(fleet, clock, tenant, operator, worker, key)
    clock.at = datetime(2026, 12, 1, 0, 30, tzinfo=CAL)
    assert invoice_run.sweep_invoices(fleet).drafted == 1  # type: ignore[union-attr]
    assert invoice_run.sweep_invoices(fleet) is None
    assert invoices.list_invoices(fleet, tenant.principal).items[0].status == "draft"
    clock.at = datetime(2026, 12, 3, 0, 5, tzinfo=CAL)
    assert invoice_run.sweep_invoices(fleet).finalized == 1  # type: ignore[union-attr]
    assert invoice_run.sweep_invoices(fleet) is None
    assert invoices.list_invoices(fleet, tenant.principal).items[0].status == "final"


def test_sla_credits_land_on_the_next_invoice(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, operator: TenantCtx,
    worker: Worker, key: str,
) -> None:
    """Through the real paths: the node agent's telemetry opens and closes the alerts, and
    the tenant's on-request verification fails."""
    clock.at = datetime(2026, 11, 10, 8, 0, tzinfo=CAL)
    bm = deliver(fleet, tenant, worker, key)
    name = instances.show_instance(fleet, tenant.principal, bm).nodes[0].name
    token = agent_credentials.operator_enrollment(fleet, operator.principal, name)
    _, agent = agent_credentials.register(fleet, token, "gpu-host", None, None)
    clock.at = datetime(2026, 11, 20, 1, 0, tzinfo=CAL)
    pushes.ingest(fleet, agent, window("xid79:2"))  # GPU 2 falls off the bus
    clock.move(hours=5)
    pushes.ingest(fleet, agent, window())  # back: the alert closes after 5 h
    pushes.ingest(fleet, agent, window("ecc-dbe:1"))
    clock.move(minutes=30)
    pushes.ingest(fleet, agent, window())  # 30 min: within the 60-minute outage SLA
    with fleet.db.read() as s:
        assert sorted((a.kind, a.closed_at is not None) for a in s.scalars(
            select(HardwareAlert))) == [("double_bit_ecc", True), ("gpu_fell_off_bus", True)]
    sim(fleet).set_gpu_faults(name, ["slow-gpu:3"])
    (run,) = node_agents.verify_now(fleet, tenant.principal, bm)
    assert run.passed is False
    clock.move(minutes=5)  # runs are at least GPULEASE_VERIFY_MIN_INTERVAL_S apart
    node_agents.verify_now(fleet, tenant.principal, bm)  # failing again: once per period

    # The outage rests on the rented host's own telemetry: a claim until an operator
    # confirms it; the failed acceptance was the platform's stand-in run: credited at once.
    (outage,) = sla.list_claims(fleet, operator.principal, "open").items
    assert outage.kind == "outage" and outage.amount == Decimal("733.33")  # one GPU of 8
    assert "hardware alert" in outage.evidence and outage.credited is None
    (accepted,) = sla.list_claims(fleet, tenant.principal, "confirmed").items
    assert accepted.kind == "acceptance" and accepted.credited == Decimal("8448.00")
    with pytest.raises(Forbidden):
        sla.decide(fleet, tenant.principal, outage.id, True)
    done = sla.decide(fleet, operator.principal, outage.id, True, "BMC SEL shows the GPU lost")
    assert done.decision == "confirmed" and done.credited == Decimal("733.33")
    with pytest.raises(Conflict):
        sla.decide(fleet, operator.principal, outage.id, True)

    clock.at = datetime(2026, 12, 1, 2, 0, tzinfo=CAL)
    invoice_run.run_invoices(fleet, operator.principal, NOV, finalize=True)
    inv = invoices.list_invoices(fleet, tenant.principal,
                                 invoices.InvoiceFilter(period=NOV)).items[0]
    lines = invoices.show_invoice(fleet, tenant.principal, inv.id).lines
    # outage of one GPU of eight: 5 h of a ¥84,480 month × 10 ÷ 8 = ¥733.33; failed
    # acceptance: 10 % = ¥8,448
    credits = sorted(ln.gross for ln in lines if ln.kind == "credit")
    assert credits == [Decimal("-8448.00"), Decimal("-733.33")]
    assert inv.total == Decimal("84480.00") - Decimal("8448.00") - Decimal("733.33")
    stages = [st.message or "" for st in instances.show_instance(
        fleet, tenant.principal, bm).stages if st.stage == "sla_credit"]
    assert len(stages) == 2 and any("out of service 300 min" in m for m in stages)


def test_csv_and_pdf_carry_the_lines_and_totals(
    fleet: Platform, clock: MovableClock, operator: TenantCtx, worker: Worker, key: str,
) -> None:
    zh = new_tenant(fleet, "深度求索实验室")
    _month_of_activity(fleet, clock, zh, operator, worker, key)
    clock.at = datetime(2026, 12, 3, tzinfo=CAL)
    invoice_run.run_invoices(fleet, operator.principal, NOV, finalize=True)
    inv = invoices.show_invoice(
        fleet, zh.principal, invoices.list_invoices(fleet, zh.principal).items[0].id)
    text = render_csv(inv)
    rows = [r.split(",") for r in text.strip().splitlines()]
    assert rows[0][:2] == ["invoice", inv.number] and "深度求索实验室" in rows[0]
    assert len(rows) == 2 + len(inv.lines) + 1
    assert rows[-1][-3:] == [f"{inv.net:.2f}", f"{inv.vat:.2f}", f"{inv.total:.2f}"]
    header = rows[1] if rows[1][0] == "seq" else rows[2]
    price_at, qty_at = header.index("unit_price"), header.index("quantity")
    lines = [r for r in rows if r[0].isdigit()]
    assert lines and all(r[price_at] for r in lines if r[qty_at])  # every unit price shown
    raw = render_pdf(inv, "Ningxia GPU Co.", "91640000X")
    pdf = PdfReader(io.BytesIO(raw))
    page = "".join(pg.extract_text() for pg in pdf.pages)
    assert inv.number and inv.number in page and f"¥{inv.total:,.2f}" in page
    assert "91640000X" in page and "Data egress" in page
    assert "深度求索实验室" in page and "单价" in page and "Unit price" in page
    assert pdf.metadata is not None and pdf.metadata.title == f"Invoice {inv.number}"
    if pdf_font() == EMBEDDED_FONT:  # a CJK TrueType font on the host (.ci/run has one)
        assert b"/FontFile2" in raw and b"STSong" not in raw  # the glyphs travel inside
        assert "·" in page  # the middle dot is the font's, not a box
    else:
        assert not os.environ.get("GPULEASE_REQUIRE_BROWSER"), "no CJK font for the PDF"


def test_money_back_beyond_a_months_charges_is_carried_forward_never_a_negative_invoice(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, operator: TenantCtx,
    worker: Worker, key: str,
) -> None:
    from gpulease.db.tables import Instance
    from gpulease.services.money import leases

    clock.at = datetime(2026, 11, 10, 8, 0, tzinfo=CAL)
    bm = deliver(fleet, tenant, worker, key)  # ¥84,480 charged in November
    for day, amount in ((20, "50000"), (25, "40000")):  # two confirmed credits: ¥90,000
        clock.at = datetime(2026, 11, day, 8, 0, tzinfo=CAL)
        with fleet.db.write() as s:
            inst = s.get(Instance, bm)
            assert inst is not None
            wallet.credit_sla(s, inst, wallet.SlaCredit(
                Decimal(amount), f"SLA credit: outage {day} of {bm}", "confirmed"),
                clock.now(), actor="test")
    clock.at = datetime(2026, 12, 5, 8, 0, tzinfo=CAL)
    leases.renew(fleet, tenant.principal, bm)  # December: another ¥84,480
    clock.at = datetime(2026, 12, 6, 8, 0, tzinfo=CAL)
    invoice_run.run_invoices(fleet, operator.principal, NOV, finalize=True)
    listed = invoices.list_invoices(fleet, tenant.principal,
                                    invoices.InvoiceFilter(period=NOV))
    nov = invoices.show_invoice(fleet, tenant.principal, listed.items[0].id)
    # the newer credit does not fit: November bills ¥84,480 − ¥50,000, the rest waits
    assert nov.total == Decimal("34480.00") and nov.total >= 0
    assert not any("outage 25" in ln.description for ln in nov.lines)
    clock.at = datetime(2027, 1, 1, 8, 0, tzinfo=CAL)
    invoice_run.run_invoices(fleet, operator.principal, "2026-12", finalize=True)
    listed = invoices.list_invoices(fleet, tenant.principal,
                                    invoices.InvoiceFilter(period="2026-12"))
    dec = invoices.show_invoice(fleet, tenant.principal, listed.items[0].id)
    assert any("outage 25" in ln.description and ln.gross == Decimal("-40000.00")
               for ln in dec.lines)
    assert dec.total == Decimal("44480.00")
    with fleet.db.read() as s:
        assert invoices.unbilled(s, tenant.tenant_id) == Decimal("0.00")
        assert ledger_sums_to_balance(s, tenant.tenant_id)


def test_money_back_beyond_every_charge_of_its_month_ends_in_a_credit_note(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, operator: TenantCtx,
    worker: Worker, key: str,
) -> None:
    """Three months paid in October, released in November: the ¥168,960 of the months
    not begun is refunded in full and the 20 % fee kept is charged at the end. The refund is
    more than November billed (the fee), so it goes on a credit note against October's, VAT
    reversed line by line, with the refunded months' service period, and November's invoice
    bills the fee; the months not begun earn nothing, the fee is earned in November when the
    contract ended; nothing waits unbilled and the invoices owe nothing the wallet does
    not."""
    from gpulease.services.money import leases, payments

    clock.at = datetime(2026, 10, 20, 8, 0, tzinfo=CAL)
    bm = deliver(fleet, tenant, worker, key)
    leases.renew(fleet, tenant.principal, bm, periods=2)  # three months, all paid in October
    clock.at = datetime(2026, 11, 4, 8, 0, tzinfo=CAL)
    actions.release_instance(fleet, tenant.principal, bm)  # two months not begun: refunded
    worker.run_until_idle()
    clock.at = datetime(2026, 12, 4, 8, 0, tzinfo=CAL)
    oct_run = invoice_run.run_invoices(fleet, operator.principal, "2026-10", finalize=True)
    nov_run = invoice_run.run_invoices(fleet, operator.principal, NOV, finalize=True)
    assert oct_run.finalized == 1 and nov_run.drafted == 1 and nov_run.finalized == 1
    listed = invoices.list_invoices(fleet, tenant.principal).items
    assert sorted((i.period, (i.number or "")[:2]) for i in listed) == [
        ("2026-10", "GL"), (NOV, "CN"), (NOV, "GL")]  # the note and the fee's invoice
    october = next(i for i in listed if i.period == "2026-10")
    with fleet.db.read() as s:
        assert invoices.unbilled(s, tenant.tenant_id) == Decimal("0.00")
        assert payments.owed_on_invoices(s, tenant.tenant_id) == Decimal("0.00")
        (note,) = s.scalars(select(Invoice).where(Invoice.kind == "credit_note"))
        lines = list(s.scalars(select(InvoiceLine).where(InvoiceLine.invoice_id == note.id)))
        assert ledger_sums_to_balance(s, tenant.tenant_id)
    assert (note.corrects_id, note.status, note.period) == (october.id, "final", NOV)
    assert note.number is not None and note.number.startswith("CN2026-")
    assert note.total == -Decimal("168960.00") and note.digest
    assert note.vat == sum((ln.vat for ln in lines), Decimal(0))  # line by line
    for ln in lines:
        assert ln.instance_id == bm and ln.vat == vat_split(ln.gross, note.vat_rate, True).vat
        assert ln.service_from is not None and ln.service_from.astimezone(CAL) >= datetime(
            2026, 11, 20, tzinfo=CAL)  # the months not begun
    shown = invoices.show_invoice(fleet, tenant.principal, october.id)
    assert shown.total == october.total  # the invoice stays as sealed; the note corrects it
    november = next(i for i in listed if i.period == NOV and i.kind == "invoice")
    (fee,) = invoices.show_invoice(fleet, tenant.principal, november.id).lines
    assert fee.gross == Decimal("33792.00") and fee.service_from == fee.service_to
    assert [(r.period, r.net) for r in fee.revenue] == [(NOV, fee.net)]  # at the end
    earned = invoices.revenue(fleet, operator.principal, "2026-10", "2027-01")
    by_month = {m.period: m.net for m in earned.months}
    # the months not begun earn nothing: their revenue is taken back where it was to be
    # earned (to the fen, each line's VAT reversed on its own)
    assert abs(by_month["2026-12"]) <= Decimal("0.05")
    assert abs(by_month["2027-01"]) <= Decimal("0.05")
    assert by_month["2026-11"] > fee.net and earned.total == sum(by_month.values())
