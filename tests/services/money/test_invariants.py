"""Hypothesis drives orders (bare metal and containers), top-ups, renewals (some switching
terms), auto-renew, releases, usage reports with repeated keys, invoice runs and clock
jumps of up to three weeks (and to the edges of the platform calendar's months) through
the lease sweep, the container meter, the monthly invoice sweep and the worker, and checks
after every step: each ledger sums to its balance; no lease's machine is released for
expiry before its grace ended; a renewed (active) lease's machine is never taken;
finalized invoices never change and none is negative; every invoice equals the entries it
claimed, and billed plus unbilled equals all billable money; each invoice holds only
entries of its month on the platform's calendar; no usage is counted twice and its
prorated parts sum to it; lease periods follow each other and an early end refunds at
most what was paid for periods not begun (refund ≤ paid − started periods); an order
holds exactly its quote. Both databases, and prices written with and without VAT."""

from __future__ import annotations

import contextlib
import tomllib
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from itertools import pairwise

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from sqlalchemy import select

from gpulease.db.money_tables import (
    Invoice,
    InvoiceLine,
    Lease,
    LeasePeriod,
    LedgerEntry,
    UsageRecord,
)
from gpulease.db.tables import Instance
from gpulease.demo import seed_demo_fleet
from gpulease.domain.billing.invoicing import BILLABLE_KINDS
from gpulease.domain.billing.money import to_fen
from gpulease.domain.billing.proration import period_bounds, previous_period
from gpulease.domain.catalog import DEFAULT_CATALOG, parse_catalog
from gpulease.domain.errors import Conflict, InvalidInput, OutOfStock, PaymentRequired
from gpulease.schemas import OrderRequest
from gpulease.schemas.money import QuoteRequest, UsageIn
from gpulease.services.accounts import identity as accounts
from gpulease.services.catalog import quotes
from gpulease.services.instances import actions
from gpulease.services.money import addons, leases, metering, payments, spending, wallet
from gpulease.services.money.invoices import run as invoice_run
from gpulease.services.money.wallet import ledger_sums_to_balance
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import TenantCtx, ssh_key
from gpulease.testing.clock import MovableClock
from gpulease.testing.platforms import drop_schema, machine_platform
from gpulease.worker.jobs.money import leases as lease_sweep
from gpulease.worker.jobs.money import meter as container_meter
from gpulease.worker.runner import Worker

KEY = ssh_key()
OFFERS = st.sampled_from([("rtx4090-24g-x8", "sichuan-2"), ("rtx4090-48g-x8", "sichuan-3")])


class LeaseMachine(RuleBasedStateMachine):
    db = "sqlite"
    prices_include_vat = True

    def __init__(self) -> None:
        super().__init__()
        self.p, self.schema = machine_platform(self.db)
        self.clock = MovableClock(datetime(2027, 1, 28, 12, tzinfo=UTC))
        self.p.clock = self.clock
        self.p.db.migrate()
        if not self.prices_include_vat:
            data = tomllib.loads(DEFAULT_CATALOG.read_text())
            data["pricing"]["prices_include_vat"] = False
            self.p.catalog = parse_catalog(data, "prices without VAT")
        seed_demo_fleet(self.p, 2)
        _, tok = accounts.create_operator(self.p, f"op{uuid.uuid4().hex[:6]}@e.io", "Op")
        self.op = accounts.authenticate(self.p, tok.token)
        created = accounts.create_tenant(self.p, "lessee", accounts.Person("l@e.io", "L"))
        self.t = TenantCtx(accounts.authenticate(self.p, created.token.token),
                           created.token.token, created.tenant.id)
        self.worker = Worker(self.p, owner="hypothesis")
        self.ids: list[str] = []
        self.usage: dict[str, UsageIn] = {}  # key → the record first sent under it
        self.sealed: dict[str, tuple[object, ...]] = {}  # final invoice → its content

    def teardown(self) -> None:
        drop_schema(self.p, self.schema)

    @rule(offer=OFFERS, term=st.sampled_from(["day", "month"]),
          add=st.sampled_from([{}, {}, {"public-bandwidth": Decimal(10)},
                               {"support-standard": Decimal(1),
                                "extra-storage": Decimal("33.3")}]))
    def order(self, offer: tuple[str, str], term: str, add: dict[str, Decimal]) -> None:
        try:
            view, _ = orders.place_order(self.p, self.t.principal, OrderRequest(
                sku=offer[0], region=offer[1], term=term, ssh_keys=[KEY], add=add))
            self.ids.append(view.id)
        except (OutOfStock, PaymentRequired):
            return
        # the hold is the quote's total, VAT included whichever way prices are written
        quoted = quotes.make_quote(self.p, QuoteRequest(sku=offer[0], region=offer[1],
                                                        term=term, add=add)).total
        with self.p.db.read() as s:
            assert wallet.first_hold(s, view.id) == quoted

    @rule(gpus=st.integers(1, 4))
    def order_container(self, gpus: int) -> None:
        with contextlib.suppress(OutOfStock, PaymentRequired):
            view, _ = orders.place_order(self.p, self.t.principal, OrderRequest(
                kind="container", offer="rtx4090-24g-container", gpus=gpus, ssh_keys=[KEY]))
            self.ids.append(view.id)

    @rule(data=st.data(), key=st.integers(0, 5), gb=st.integers(1, 5000))
    def report_usage(self, data: st.DataObject, key: int, gb: int) -> None:
        """Egress under a small set of keys: a repeated key is sent again as it was first."""
        if not self.ids:
            return
        name = f"egress-{key}"
        now = self.clock.now()
        record = self.usage.get(name) or UsageIn(
            key=name, instance_id=data.draw(st.sampled_from(self.ids)), kind="egress_gb",
            quantity=Decimal(gb), started_at=now - timedelta(minutes=90),
            ended_at=now - timedelta(minutes=30))
        with contextlib.suppress(InvalidInput):  # e.g. usage before the order: refused
            out = metering.report_usage(self.p, self.op, [record])
            assert out[0].duplicate == (name in self.usage)
            self.usage[name] = record

    @rule(finalize=st.booleans())
    def invoice_run(self, finalize: bool) -> None:
        period = previous_period(self.clock.now(), self.p.settings.zone)
        invoice_run.run_invoices(self.p, self.op, period, finalize)

    @rule(amount=st.integers(1_000, 60_000), ref=st.integers(0, 6))
    def top_up(self, amount: int, ref: int) -> None:
        with contextlib.suppress(Conflict):  # a reference used before adds nothing
            wallet.top_up(self.p, self.op, self.t.tenant_id, Decimal(amount), f"w{ref}")

    @rule(data=st.data(), periods=st.integers(1, 2),
          term=st.sampled_from([None, None, "day", "month"]))
    def renew(self, data: st.DataObject, periods: int, term: str | None) -> None:
        """By the lease's own term, or switching to another for this renewal."""
        if self.ids:
            iid = data.draw(st.sampled_from(self.ids))
            with self.p.db.read() as s:
                before = s.scalar(select(Lease.ends_at).where(Lease.instance_id == iid))
            try:
                after = leases.renew(self.p, self.t.principal, iid, periods, term).ends_at
                assert before is not None and after > before
            except (Conflict, PaymentRequired):  # no lease yet, ended, or short: unchanged
                with self.p.db.read() as s:
                    assert s.scalar(select(Lease.ends_at).where(
                        Lease.instance_id == iid)) == before

    @rule(data=st.data(), mbps=st.sampled_from([0, 5, 50]))
    def change_bandwidth(self, data: st.DataObject, mbps: int) -> None:
        """Raise (charged pro rata now), lower or remove (from the end of the paid
        periods) an add-on on a running lease."""
        if self.ids:
            with contextlib.suppress(Conflict, InvalidInput, PaymentRequired):
                addons.set_addon(self.p, self.t.principal, data.draw(st.sampled_from(self.ids)),
                                 "public-bandwidth", Decimal(mbps))

    @rule(data=st.data(), on=st.booleans())
    def auto_renew(self, data: st.DataObject, on: bool) -> None:
        if self.ids:
            with contextlib.suppress(Conflict):  # not delivered yet: no lease
                leases.set_auto_renew(self.p, self.t.principal,
                                      data.draw(st.sampled_from(self.ids)), on)

    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        if self.ids:
            actions.release_instance(self.p, self.t.principal,
                                       data.draw(st.sampled_from(self.ids)))

    @rule(hours=st.integers(1, 24 * 21))
    def time_passes(self, hours: int) -> None:
        self.clock.move(hours=hours)
        self._sweep()

    @rule(minutes=st.integers(-30, 30))
    def to_a_month_edge(self, minutes: int) -> None:
        """To just before or after midnight of the next 1st on the platform's calendar
        (16:00 UTC in Beijing): where UTC and the calendar disagree on the month."""
        zone = self.p.settings.zone
        local = self.clock.now().astimezone(zone)
        first = datetime(local.year + (local.month == 12), local.month % 12 + 1, 1,
                         tzinfo=zone) + timedelta(minutes=minutes)
        if first > self.clock.now():
            self.clock.at = first.astimezone(UTC)
            self._sweep()

    def _sweep(self) -> None:
        lease_sweep.sweep_leases(self.p)
        self.worker.run_until_idle(timeout_s=60)
        container_meter.meter_containers(self.p)
        spending.sweep_spending(self.p)
        invoice_run.sweep_invoices(self.p)
        self.worker.run_until_idle(timeout_s=60)

    @invariant()
    def ledger_sums_to_balance(self) -> None:
        with self.p.db.read() as s:
            assert ledger_sums_to_balance(s, self.t.tenant_id)

    @invariant()
    def no_machine_taken_before_grace_ends_or_after_renewal(self) -> None:
        with self.p.db.read() as s:
            for lease in s.scalars(select(Lease)):
                inst = s.get(Instance, lease.instance_id)
                assert inst is not None
                expired = (inst.status_reason or "").startswith("lease expired")
                if expired:
                    assert lease.status == "ended" and lease.grace_until is not None
                    assert inst.release_requested_at is not None
                    assert inst.release_requested_at >= lease.grace_until, inst.id
                if lease.status in ("active", "grace"):
                    assert inst.status == "ready", (inst.id, inst.status, lease.status)
                if lease.status == "active":
                    assert lease.grace_until is None


    @invariant()
    def periods_follow_each_other_and_refunds_cover_only_those_not_begun(self) -> None:
        """refund ≤ paid − started periods, for every lease, whatever its renewals."""
        with self.p.db.read() as s:
            for lease in s.scalars(select(Lease)):
                rows = list(s.scalars(select(LeasePeriod).where(
                    LeasePeriod.lease_id == lease.id).order_by(LeasePeriod.seq)))
                assert rows and rows[0].starts_at == lease.starts_at, lease.id
                assert all(b.starts_at == a.ends_at for a, b in pairwise(rows)), lease.id
                assert rows[-1].ends_at == lease.ends_at and len(rows) == lease.periods
                assert lease.term == rows[0].term  # the base term never changes
                for r in rows:
                    assert r.refunded_at is None or r.starts_at >= r.refunded_at, lease.id
                entries = list(s.scalars(select(LedgerEntry).where(
                    LedgerEntry.instance_id == lease.instance_id)))
                fees = [-e.amount for e in entries if e.kind == "charge"
                        and (e.item or "").startswith("Early termination fee")]
                money = {k: -sum((e.amount for e in entries if e.kind == k), Decimal(0))
                         for k in ("charge", "refund")}
                paid = money["charge"] - sum(fees, Decimal(0))
                kept = sum((r.price for r in rows if r.refunded_at is None), Decimal(0))
                assert paid == sum((r.price for r in rows), Decimal(0)), lease.id
                assert -money["refund"] <= paid - kept, lease.id
                # the fee kept is at most its percentage of what came back
                assert len(fees) <= 1 and all(f <= -money["refund"] for f in fees), lease.id

    @invariant()
    def each_invoice_holds_only_its_months_entries(self) -> None:
        """Months are the platform calendar's: nothing served after a month's end (there)
        is on that month's invoice."""
        with self.p.db.read() as s:
            for inv in s.scalars(select(Invoice).where(Invoice.kind == "invoice")):
                _, end = period_bounds(inv.period, self.p.settings.zone)
                for e in s.scalars(select(LedgerEntry).where(LedgerEntry.invoice_id == inv.id)):
                    assert (e.service_at or e.at) < end, (inv.period, e.id)

    @invariant()
    def finalized_invoices_never_change(self) -> None:
        with self.p.db.read() as s:
            for inv in s.scalars(select(Invoice).where(Invoice.status == "final")):
                lines = tuple((ln.seq, ln.description, ln.gross) for ln in s.scalars(
                    select(InvoiceLine).where(InvoiceLine.invoice_id == inv.id)))
                content = (inv.number, inv.digest, inv.total, inv.net, inv.vat, lines)
                assert self.sealed.setdefault(inv.id, content) == content, inv.id

    @invariant()
    def invoices_bill_each_entry_once(self) -> None:
        with self.p.db.read() as s:
            billable = [e for e in s.scalars(select(LedgerEntry).where(
                LedgerEntry.tenant_id == self.t.tenant_id)) if e.kind in BILLABLE_KINDS]
            invoiced = Decimal(0)
            for inv in s.scalars(select(Invoice)):  # invoices and the credit notes
                claimed = [e for e in billable if e.invoice_id == inv.id]  # that bill money
                lines = list(s.scalars(select(InvoiceLine.gross).where(  # back themselves
                    InvoiceLine.invoice_id == inv.id)))
                assert inv.total == sum(lines, Decimal(0)) == -sum(
                    (e.amount for e in claimed), Decimal(0)), inv.id
                # money back beyond an invoice: carried forward, or on a credit note
                assert inv.total >= 0 or inv.kind == "credit_note", inv.id
                invoiced += inv.total
            unbilled = -sum((e.amount for e in billable if e.invoice_id is None), Decimal(0))
            assert invoiced + unbilled == -sum((e.amount for e in billable), Decimal(0))

    @invariant()
    def final_invoices_say_whether_they_are_paid(self) -> None:
        with self.p.db.read() as s:
            finals = list(s.scalars(select(Invoice).where(Invoice.kind == "invoice",
                                                          Invoice.status == "final")))
            for inv in finals:
                assert inv.payment_status in ("paid", "unpaid"), inv.id
                assert Decimal(0) <= (inv.amount_due or 0) <= inv.total, inv.id
                assert (inv.payment_status == "unpaid") == ((inv.amount_due or 0) > 0)
            due = sum((inv.amount_due or Decimal(0) for inv in finals), Decimal(0))
            assert due <= payments.owed_on_invoices(s, self.t.tenant_id)

    @invariant()
    def no_usage_counted_twice_and_parts_sum_to_it(self) -> None:
        with self.p.db.read() as s:
            rows = list(s.scalars(select(UsageRecord)))
            assert len({(u.tenant_id, u.key) for u in rows}) == len(rows)
            for u in rows:
                parts = list(s.scalars(select(LedgerEntry.amount).where(
                    LedgerEntry.kind == "usage", LedgerEntry.reference == f"usage {u.key}",
                    LedgerEntry.instance_id == u.instance_id)))
                if u.status == "held":  # beyond what the instance could use: not charged
                    assert parts == []
                else:
                    assert 1 <= len(parts) <= 2 and -sum(parts, Decimal(0)) == to_fen(u.amount)


# Each CI run draws new examples (no fixed seed): fewer per run, the same space over runs.
RUN = settings(max_examples=12, stateful_step_count=30, deadline=None,
               suppress_health_check=list(HealthCheck))


class PostgresLeaseMachine(LeaseMachine):
    db = "postgresql"


class VatOnTopLeaseMachine(LeaseMachine):
    """The price book writes prices without VAT: every invariant holds the same."""

    prices_include_vat = False


TestLeasesSQLite = LeaseMachine.TestCase
TestLeasesSQLite.settings = RUN
TestLeasesPostgres = PostgresLeaseMachine.TestCase
TestLeasesPostgres.settings = settings(RUN, max_examples=6)  # each example costs more there
TestLeasesVatOnTop = VatOnTopLeaseMachine.TestCase
TestLeasesVatOnTop.settings = settings(RUN, max_examples=6)
