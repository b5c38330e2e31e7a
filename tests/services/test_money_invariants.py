"""Hypothesis drives orders, top-ups, renewals, auto-renew, releases and clock jumps of up
to three weeks through the lease sweep and the worker, and checks after every step: each
ledger sums to its balance; no lease's machine is released for expiry before its grace
ended; a renewed (active) lease's machine is never taken; only undelivered orders hold
money. Both databases."""

from __future__ import annotations

import contextlib
import uuid
from datetime import UTC, datetime
from decimal import Decimal

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from sqlalchemy import select

from gpulease.db.tables import Instance, Lease
from gpulease.demo import seed_demo_fleet
from gpulease.domain.errors import Conflict, OutOfStock, PaymentRequired
from gpulease.schemas import OrderRequest
from gpulease.services import accounts, instances, leases, orders, wallet
from gpulease.services.wallet import ledger_sums_to_balance
from gpulease.worker.runner import Worker
from tests.conftest import TenantCtx, ssh_key
from tests.services.helpers import drop_schema, machine_platform
from tests.services.test_leases import MovableClock

KEY = ssh_key()
OFFERS = st.sampled_from([("rtx4090-24g-x8", "sichuan-2"), ("rtx4090-48g-x8", "sichuan-3")])


class LeaseMachine(RuleBasedStateMachine):
    db = "sqlite"

    def __init__(self) -> None:
        super().__init__()
        self.p, self.schema = machine_platform(self.db)
        self.clock = MovableClock(datetime(2027, 1, 28, 12, tzinfo=UTC))
        self.p.clock = self.clock
        self.p.db.migrate()
        seed_demo_fleet(self.p, 2)
        _, tok = accounts.create_operator(self.p, f"op{uuid.uuid4().hex[:6]}@e.io", "Op")
        self.op = accounts.authenticate(self.p, tok.token)
        created = accounts.create_tenant(self.p, "lessee", "l@e.io", "L")
        self.t = TenantCtx(accounts.authenticate(self.p, created.token.token),
                           created.token.token, created.tenant.id)
        self.worker = Worker(self.p, owner="hypothesis")
        self.ids: list[str] = []

    def teardown(self) -> None:
        drop_schema(self.p, self.schema)

    @rule(offer=OFFERS, term=st.sampled_from(["day", "month"]))
    def order(self, offer: tuple[str, str], term: str) -> None:
        try:
            view, _ = orders.place_order(self.p, self.t.principal, OrderRequest(
                sku=offer[0], region=offer[1], term=term, ssh_keys=[KEY]))
            self.ids.append(view.id)
        except (OutOfStock, PaymentRequired):
            pass

    @rule(amount=st.integers(1_000, 60_000), ref=st.integers(0, 6))
    def top_up(self, amount: int, ref: int) -> None:
        with contextlib.suppress(Conflict):  # a reference used before adds nothing
            wallet.top_up(self.p, self.op, self.t.tenant_id, Decimal(amount), f"w{ref}")

    @rule(data=st.data(), periods=st.integers(1, 2))
    def renew(self, data: st.DataObject, periods: int) -> None:
        if self.ids:
            iid = data.draw(st.sampled_from(self.ids))
            with self.p.db.read() as s:
                before = s.scalar(select(Lease.ends_at).where(Lease.instance_id == iid))
            try:
                after = leases.renew(self.p, self.t.principal, iid, periods).ends_at
                assert before is not None and after > before
            except (Conflict, PaymentRequired):  # no lease yet, ended, or short: unchanged
                with self.p.db.read() as s:
                    assert s.scalar(select(Lease.ends_at).where(
                        Lease.instance_id == iid)) == before

    @rule(data=st.data(), on=st.booleans())
    def auto_renew(self, data: st.DataObject, on: bool) -> None:
        if self.ids:
            with contextlib.suppress(Conflict):  # not delivered yet: no lease
                leases.set_auto_renew(self.p, self.t.principal,
                                      data.draw(st.sampled_from(self.ids)), on)

    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        if self.ids:
            instances.release_instance(self.p, self.t.principal,
                                       data.draw(st.sampled_from(self.ids)))

    @rule(hours=st.integers(1, 24 * 21))
    def time_passes(self, hours: int) -> None:
        self.clock.move(hours=hours)
        leases.sweep_leases(self.p)
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


RUN = settings(max_examples=8, stateful_step_count=20, deadline=None,
               suppress_health_check=list(HealthCheck))


class PostgresLeaseMachine(LeaseMachine):
    db = "postgresql"


TestLeasesSQLite = LeaseMachine.TestCase
TestLeasesSQLite.settings = RUN
TestLeasesPostgres = PostgresLeaseMachine.TestCase
TestLeasesPostgres.settings = RUN
