"""A tenant with root on a rented server holds its agent's credential. Forging GPU faults
with it must not pay: telemetry raises alerts and claims, never credits; an operator's
confirmation posts them, and a lease period's credits stop at that period's price.
SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from sqlalchemy import func, select

from gpulease.db.money_tables import LedgerEntry
from gpulease.platform import Platform
from gpulease.services import agents, instances, sla, wallet
from gpulease.worker.runner import Worker
from tests.conftest import TenantCtx
from tests.services.test_acceptance_gate import window
from tests.services.test_leases import MovableClock, deliver

MONTH_PRICE = Decimal("84480.00")  # one H100 server, a month


def _credits(p: Platform, tenant_id: str) -> Decimal:
    with p.db.read() as s:
        return Decimal(s.scalar(select(func.coalesce(func.sum(LedgerEntry.amount), 0)).where(
            LedgerEntry.tenant_id == tenant_id, LedgerEntry.kind == "credit")) or 0)


@pytest.fixture
def forged(fleet: Platform, tenant: TenantCtx, operator: TenantCtx, worker: Worker,
           key: str) -> str:
    """Nine rounds of eight forged 'fell off the bus' faults, each 'lasting' five hours."""
    clock = MovableClock(datetime(2026, 11, 10, 8, 0, tzinfo=UTC))
    fleet.clock = clock
    iid = deliver(fleet, tenant, worker, key)
    node = instances.show_instance(fleet, tenant.principal, iid).nodes[0].name
    _, credential = agents.register(fleet, agents.operator_enrollment(
        fleet, operator.principal, node), "rented-host", None, None)
    all_gpus = [f"xid79:{g}" for g in range(8)]
    for _ in range(9):
        agents.ingest(fleet, credential, window(*all_gpus))
        clock.move(hours=5)
        agents.ingest(fleet, credential, window())
    return iid


def test_forged_faults_credit_nothing_without_the_operator(
        fleet: Platform, tenant: TenantCtx, operator: TenantCtx, forged: str) -> None:
    before = wallet.show_wallet(fleet, tenant.principal).balance
    assert _credits(fleet, tenant.tenant_id) == Decimal("0")
    claims = sla.list_claims(fleet, tenant.principal, "open", limit=500)
    assert claims.total == 72 and all(c.credited is None for c in claims.items)
    assert all("node agent telemetry" in c.evidence for c in claims.items)
    assert wallet.show_wallet(fleet, tenant.principal).balance == before


def test_confirmed_credits_stop_at_the_periods_price(
        fleet: Platform, tenant: TenantCtx, operator: TenantCtx, forged: str) -> None:
    claims = sla.list_claims(fleet, operator.principal, "open", limit=500).items
    credited = [sla.decide(fleet, operator.principal, c.id, True).credited for c in claims]
    assert sum(c for c in credited if c is not None) == MONTH_PRICE  # not 72 × ¥5,866.67
    assert credited.count(Decimal("0.00")) > 0
    assert _credits(fleet, tenant.tenant_id) == MONTH_PRICE
    assert sla.list_claims(fleet, operator.principal, "open").total == 0
