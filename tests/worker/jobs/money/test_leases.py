"""The lease sweep, a periodic job: reminders before a term ends (only the latest due when it
runs late), automatic renewals (by the lease's own term), grace, and after grace the
release and erase; SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from sqlalchemy import select

from gpulease.db.money_tables import LeaseNotice
from gpulease.domain.billing.leases import (
    add_months,
)
from gpulease.platform import Platform
from gpulease.services.agents import evidence
from gpulease.services.instances import views as instances
from gpulease.services.money import leases, wallet
from gpulease.services.money.wallet import ledger_sums_to_balance
from gpulease.testing.callers import TenantCtx, fund
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import deliver, node_by_name
from gpulease.testing.factories import instance_notices as notices
from gpulease.worker.jobs.money import leases as lease_sweep
from gpulease.worker.runner import Worker


def test_a_late_sweep_sends_only_the_latest_reminder_due(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, worker: Worker, key: str
) -> None:
    iid = deliver(fleet, tenant, worker, key)
    lease = leases.show_lease(fleet, tenant.principal, iid)
    clock.at = lease.ends_at - timedelta(hours=12)  # no sweep ran for 29 days
    for _ in range(3):
        lease_sweep.sweep_leases(fleet)
        clock.move(minutes=5)
    assert notices(fleet, iid) == ["1d"]  # not 1d, then 3d, then 7d, seconds apart
    assert set(leases.show_lease(fleet, tenant.principal, iid).reminders_sent) == {
        "7d", "3d", "1d"}
    clock.at = lease.ends_at + timedelta(minutes=1)
    lease_sweep.sweep_leases(fleet)
    lease_sweep.sweep_leases(fleet)
    assert notices(fleet, iid) == ["1d", "expiry"]
    assert leases.show_lease(fleet, tenant.principal, iid).status == "grace"


def test_lease_life_reminders_grace_renewal_and_erase(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, worker: Worker, key: str
) -> None:
    iid = deliver(fleet, tenant, worker, key)
    inst = instances.show_instance(fleet, tenant.principal, iid)
    lease = leases.show_lease(fleet, tenant.principal, iid)
    assert lease.starts_at == inst.ready_at and lease.status == "active"
    assert lease.ends_at == add_months(lease.starts_at, 1) and not lease.auto_renew
    assert lease.unit_price == Decimal("84480.00")

    clock.move(days=25)  # 6 days left
    lease_sweep.sweep_leases(fleet)
    lease_sweep.sweep_leases(fleet)  # once only
    assert notices(fleet, iid) == ["7d"]
    clock.at = lease.ends_at - timedelta(hours=12)
    lease_sweep.sweep_leases(fleet)
    assert notices(fleet, iid) == ["7d", "1d"]

    clock.at = lease.ends_at + timedelta(minutes=1)
    lease_sweep.sweep_leases(fleet)
    now = leases.show_lease(fleet, tenant.principal, iid)
    assert now.status == "grace" and now.grace_until == lease.ends_at + timedelta(days=3)
    assert notices(fleet, iid)[-1] == "expiry"
    assert instances.show_instance(fleet, tenant.principal, iid).status == "ready"  # kept

    # renewing during grace cancels the erase; the term continues from the old end
    balance = wallet.show_wallet(fleet, tenant.principal).balance
    renewed = leases.renew(fleet, tenant.principal, iid)
    assert renewed.status == "active" and renewed.grace_until is None
    assert renewed.ends_at == add_months(lease.ends_at, 1) and renewed.periods == 2
    assert wallet.show_wallet(fleet, tenant.principal).balance == balance - Decimal("84480")
    clock.at = lease.ends_at + timedelta(days=3, minutes=1)  # the old grace would be over
    lease_sweep.sweep_leases(fleet)
    assert instances.show_instance(fleet, tenant.principal, iid).status == "ready"

    # this time nobody renews: grace, then erase
    clock.at = renewed.ends_at + timedelta(minutes=1)
    lease_sweep.sweep_leases(fleet)
    assert leases.show_lease(fleet, tenant.principal, iid).status == "grace"
    clock.move(days=2)
    lease_sweep.sweep_leases(fleet)
    assert instances.show_instance(fleet, tenant.principal, iid).status == "ready"  # not yet
    clock.move(days=1, minutes=1)
    lease_sweep.sweep_leases(fleet)
    worker.run_until_idle()
    view = instances.show_instance(fleet, tenant.principal, iid)
    assert view.status == "released" and "lease expired" in (view.status_reason or "")
    assert leases.show_lease(fleet, tenant.principal, iid).status == "ended"
    certs = evidence.instance_certificates(fleet, tenant.principal, iid)[0]
    assert len(certs) == 2 and all(c["passed"] for c in certs)
    assert node_by_name(fleet, view.nodes[0].name).status == "available"
    assert notices(fleet, iid)[-1] == "erased"
    with fleet.db.read() as s:
        assert ledger_sums_to_balance(s, tenant.tenant_id)


def test_auto_renew_with_and_without_money(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, worker: Worker, key: str,
    operator: TenantCtx,
) -> None:
    from gpulease.services.accounts import identity as accounts

    iid = deliver(fleet, tenant, worker, key)
    leases.set_auto_renew(fleet, tenant.principal, iid, True)
    end = leases.show_lease(fleet, tenant.principal, iid).ends_at
    clock.at = end + timedelta(minutes=5)
    lease_sweep.sweep_leases(fleet)
    lease = leases.show_lease(fleet, tenant.principal, iid)
    assert lease.status == "active" and lease.ends_at == add_months(end, 1)

    created = accounts.create_tenant(fleet, "thin", accounts.Person("thin@example.com", "Thin"))
    thin = TenantCtx(accounts.authenticate(fleet, created.token.token), created.token.token,
                     created.tenant.id)
    fund(fleet, thin.tenant_id, "90000")  # one month, not two
    other = deliver(fleet, thin, worker, key)
    leases.set_auto_renew(fleet, thin.principal, other, True)
    clock.at = leases.show_lease(fleet, thin.principal, other).ends_at + timedelta(minutes=1)
    lease_sweep.sweep_leases(fleet)
    short = leases.show_lease(fleet, thin.principal, other)
    assert short.status == "grace"  # the renewal failed for money: remind, then grace
    with fleet.db.read() as s:
        text = s.scalars(select(LeaseNotice.text).where(LeaseNotice.instance_id == other)
                         .order_by(LeaseNotice.id.desc())).first()
    assert text and "automatic renewal failed" in text and "missing" in text

    # In grace, later sweeps do not retry until the wallet moves; a top-up that still
    # falls short leaves it in grace; one that covers the month renews it, erase cancelled.
    clock.move(hours=1)
    assert lease_sweep.sweep_leases(fleet) == 0
    fund(fleet, thin.tenant_id, "100", "wire 2")
    clock.move(hours=1)
    lease_sweep.sweep_leases(fleet)
    assert leases.show_lease(fleet, thin.principal, other).status == "grace"
    assert lease_sweep.sweep_leases(fleet) == 0  # short again: waits for the next top-up
    clock.move(hours=1)
    fund(fleet, thin.tenant_id, "90000", "wire 3")
    clock.move(minutes=1)
    assert lease_sweep.sweep_leases(fleet) == 1
    renewed = leases.show_lease(fleet, thin.principal, other)
    assert renewed.status == "active" and renewed.ends_at == add_months(short.ends_at, 1)


def test_a_one_off_renewal_by_the_day_does_not_make_auto_renew_go_by_the_day(
    fleet: Platform, clock: MovableClock, tenant: TenantCtx, worker: Worker, key: str,
) -> None:
    iid = deliver(fleet, tenant, worker, key)  # an H100 month: ¥84,480
    month = leases.show_lease(fleet, tenant.principal, iid)
    two_days = leases.renew(fleet, tenant.principal, iid, periods=2, term="day")
    assert two_days.term == "month" and two_days.ends_at == month.ends_at + timedelta(days=2)
    assert [p.term for p in two_days.schedule] == ["month", "day", "day"]
    leases.set_auto_renew(fleet, tenant.principal, iid, True)
    before = wallet.show_wallet(fleet, tenant.principal).balance
    clock.at = two_days.ends_at + timedelta(minutes=5)
    assert lease_sweep.sweep_leases(fleet) == 1
    renewed = leases.show_lease(fleet, tenant.principal, iid)
    # By the month it was ordered for, at the price its order held; not by the day.
    assert renewed.term == "month" and renewed.unit_price == month.unit_price
    assert renewed.ends_at == add_months(two_days.ends_at, 1)
    assert wallet.show_wallet(fleet, tenant.principal).balance == before - month.unit_price
