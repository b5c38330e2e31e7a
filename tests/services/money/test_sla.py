"""A tenant with root on a rented server holds its agent's credential. Forging GPU faults
with it must not pay: telemetry raises alerts and claims, never credits; an operator's
confirmation posts them, and a lease period's credits stop at that period's price. Reports
for another node, replays and oversized reports write nothing beyond the sender's own
node, and the credential dies with the lease. SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from gpulease.api.app import create_app
from gpulease.db.money_tables import LedgerEntry
from gpulease.db.tables import (
    AcceptanceReport,
    AgentCommand,
    HardwareAlert,
    Node,
    TelemetrySummary,
)
from gpulease.domain.errors import InvalidInput, NotFound, Unauthorized
from gpulease.domain.phrases import said_stored
from gpulease.platform import Platform
from gpulease.ports.agent import CommandOutcome, VerifyPayload
from gpulease.services.agents import commands as agent_commands
from gpulease.services.agents import credentials as agent_credentials
from gpulease.services.instances import actions
from gpulease.services.instances import views as instances
from gpulease.services.money import sla, wallet
from gpulease.services.telemetry import pushes
from gpulease.testing.callers import TenantCtx, new_tenant
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import deliver, window
from gpulease.translations import translations
from gpulease.worker.runner import Worker

MONTH_PRICE = Decimal("84480.00")  # one H100 server, a month


def _credits(p: Platform, tenant_id: str) -> Decimal:
    with p.db.read() as s:
        return Decimal(s.scalar(select(func.coalesce(func.sum(LedgerEntry.amount), 0)).where(
            LedgerEntry.tenant_id == tenant_id, LedgerEntry.kind == "credit")) or 0)


@pytest.fixture
def forged(fleet: Platform, tenant: TenantCtx, operator: TenantCtx, worker: Worker,
           key: str) -> str:
    """Fifteen rounds of eight forged 'fell off the bus' faults, each 'lasting' five hours:
    each GPU's claim is worth its eighth of the server's outage value (¥733.33), 120 of them
    more than the month's price."""
    clock = MovableClock(datetime(2026, 11, 10, 8, 0, tzinfo=UTC))
    fleet.clock = clock
    iid = deliver(fleet, tenant, worker, key)
    node = instances.show_instance(fleet, tenant.principal, iid).nodes[0].name
    _, credential = agent_credentials.register(fleet, agent_credentials.operator_enrollment(
        fleet, operator.principal, node), "rented-host", None, None)
    all_gpus = [f"xid79:{g}" for g in range(8)]
    for _ in range(15):
        pushes.ingest(fleet, credential, window(*all_gpus))
        clock.move(hours=5)
        pushes.ingest(fleet, credential, window())
    return iid


def test_forged_faults_credit_nothing_without_the_operator(
        fleet: Platform, tenant: TenantCtx, operator: TenantCtx, forged: str) -> None:
    before = wallet.show_wallet(fleet, tenant.principal).balance
    assert _credits(fleet, tenant.tenant_id) == Decimal("0")
    claims = sla.list_claims(fleet, tenant.principal, "open", limit=500)
    assert claims.total == 120 and all(c.credited is None for c in claims.items)
    assert {c.amount for c in claims.items} == {Decimal("733.33")}  # a GPU's share
    assert all("node agent telemetry" in c.evidence for c in claims.items)
    assert wallet.show_wallet(fleet, tenant.principal).balance == before


def test_confirmed_credits_stop_at_the_periods_price(
        fleet: Platform, tenant: TenantCtx, operator: TenantCtx, forged: str) -> None:
    claims = sla.list_claims(fleet, operator.principal, "open", limit=500).items
    credited = [sla.decide(fleet, operator.principal, c.id, True).credited for c in claims]
    assert sum(c for c in credited if c is not None) == MONTH_PRICE  # not 120 × ¥733.33
    assert credited.count(Decimal("0.00")) > 0
    assert _credits(fleet, tenant.tenant_id) == MONTH_PRICE
    assert sla.list_claims(fleet, operator.principal, "open").total == 0
    # a confirmed claim's credit keeps the claim's item as a phrase (its invoice line and
    # the ledger say it in the reader's language); the item itself stays the claim's key
    with fleet.db.read() as s:
        entry = s.scalars(select(LedgerEntry).where(
            LedgerEntry.tenant_id == tenant.tenant_id, LedgerEntry.kind == "credit")
            .order_by(LedgerEntry.id).limit(1)).one()
    assert entry.item is not None and entry.item.startswith("SLA credit: GPU ")
    assert said_stored(entry.item, entry.item_phrase,
                       translations("zh_CN").gettext).startswith("SLA 赔付：")


def test_claims_confirmed_after_the_lease_ended_stay_within_its_periods_cap(
        fleet: Platform, tenant: TenantCtx, operator: TenantCtx, forged: str) -> None:
    """The cap was counted in the period the confirmation fell in: a day's delay in review
    (here: after the month ended) paid every claim in full."""
    assert isinstance(fleet.clock, MovableClock)
    fleet.clock.move(days=40)
    claims = sla.list_claims(fleet, operator.principal, "open", limit=500).items
    credited = [sla.decide(fleet, operator.principal, c.id, True).credited for c in claims]
    assert sum(c for c in credited if c is not None) == MONTH_PRICE
    assert _credits(fleet, tenant.tenant_id) == MONTH_PRICE


def test_a_whole_server_outage_is_worth_the_servers_price_once(
        fleet: Platform, tenant: TenantCtx, operator: TenantCtx, worker: Worker,
        key: str) -> None:
    """One 5-hour outage of all 8 GPUs claimed 8 × ¥5,866.67; the rule gives ¥5,866.67
    (10 × the server's price for 5 h of its 30-day month); the BMC's own alert for the same
    outage adds only what the merged outage is worth beyond the GPUs' claims."""
    start = datetime(2026, 11, 10, 8, 0, tzinfo=UTC)
    fleet.clock = MovableClock(start)
    iid = deliver(fleet, tenant, worker, key)
    with fleet.db.write() as s:
        node = s.scalars(select(Node).where(Node.instance_id == iid)).one()
        opened = datetime(2026, 11, 12, 8, 0, tzinfo=UTC)
        closed = datetime(2026, 11, 12, 13, 0, tzinfo=UTC)
        alerts = [HardwareAlert(node_id=node.id, instance_id=iid, gpu_index=g,
                                gpu_uuid=f"GPU-{g}", kind="gpu_fell_off_bus", severity="critical",
                                message="fell off the bus", opened_at=opened,
                                last_seen_at=closed, closed_at=closed, source=source)
                  for g, source in [*((g, "agent") for g in range(8)), (-1, "bmc")]]
        s.add_all(alerts)
        s.flush()
        worth = [sla.claim_outage(s, a) for a in alerts]
    assert worth[:8] == [Decimal("733.33")] * 8
    assert sum(worth) == Decimal("5866.67")  # the server's price for the outage, once
    for c in sla.list_claims(fleet, operator.principal, "open", limit=50).items:
        sla.decide(fleet, operator.principal, c.id, True)
    assert _credits(fleet, tenant.tenant_id) == Decimal("5866.67")


def _rows(p: Platform, node_id: str) -> tuple[int, int, int]:
    """What reports wrote for a node: telemetry rows, alerts, acceptance reports."""
    with p.db.read() as s:
        return tuple(s.scalar(select(func.count()).select_from(t).where(t.node_id == node_id))
                     or 0 for t in (TelemetrySummary, HardwareAlert, AcceptanceReport))


def test_reports_for_another_node_replays_and_oversize_write_nothing(
        fleet: Platform, tenant: TenantCtx, operator: TenantCtx, worker: Worker,
        key: str) -> None:
    mine = deliver(fleet, tenant, worker, key)
    theirs = deliver(fleet, new_tenant(fleet, "neighbour"), worker, key)
    with fleet.db.read() as s:
        node, other = (s.scalar(select(Node).where(Node.instance_id == i))
                       for i in (mine, theirs))
    assert node is not None and other is not None
    _, credential = agent_credentials.register(fleet, agent_credentials.operator_enrollment(
        fleet, operator.principal, node.id), "rented-host", None, None)
    with fleet.db.write() as s:  # the neighbour's node has work pending for its agent
        marks = fleet.catalog.marks(other.sku, other.region)
        assert marks is not None
        command = agent_commands.submit(s, fleet, agent_commands.Recipient(
            other.id, theirs, "on_demand"), VerifyPayload(thresholds=marks[0], spec=marks[1]),
            fleet.clock.now())
    before, own = _rows(fleet, other.id), _rows(fleet, node.id)  # delivery's reports

    # A result for the neighbour's command, a push naming the neighbour's node: refused or
    # written to the sender's own node only.
    with pytest.raises(NotFound):
        agent_commands.post_result(fleet, credential, command, CommandOutcome(
            ok=True, result={"checks": [], "passed": False}))
    with pytest.raises(InvalidInput):
        pushes.ingest(fleet, credential, [{**g, "node_id": other.id}
                                          for g in window("xid79:0")])
    # Oversized: more GPUs than the node has, a GPU twice, an index beyond it, a huge body.
    one = window("xid79:0")[0]
    for gpus in (window() + window(), [one, one], [{**one, "index": 8}]):
        with pytest.raises(InvalidInput, match="has 8 GPUs"):
            pushes.ingest(fleet, credential, gpus)
    with TestClient(create_app(fleet)) as client:
        huge = client.post("/api/v1/agent/telemetry", headers={
            "Authorization": f"Bearer {credential}"}, json={"gpus": [one] * 5000})
        assert huge.status_code == 413
        many = client.post("/api/v1/agent/telemetry", headers={
            "Authorization": f"Bearer {credential}"}, json={"gpus": [one] * 17})
        assert many.status_code == 422
    assert _rows(fleet, node.id) == own

    # Replays: the same fault window over and over is one alert, and no money.
    for _ in range(5):
        pushes.ingest(fleet, credential, window("xid79:0"))
    assert _rows(fleet, node.id)[1] == own[1] + 1
    assert _rows(fleet, other.id) == before
    assert _credits(fleet, tenant.tenant_id) == Decimal("0")
    with fleet.db.read() as s:
        assert s.get(AgentCommand, command).status == "pending"  # type: ignore[union-attr]

    # Handed back: the tenant's copy of the credential writes nothing any more, from the
    # moment the release answers (before the worker has done anything)
    actions.release_instance(fleet, tenant.principal, mine)
    with pytest.raises(Unauthorized):
        pushes.ingest(fleet, credential, window("xid79:1"))
    worker.run_until_idle()
    with pytest.raises(Unauthorized):
        pushes.ingest(fleet, credential, window("xid79:1"))
    assert _rows(fleet, node.id)[1] == own[1] + 1
