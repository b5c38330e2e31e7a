"""List pages cost a constant number of SQL statements, whatever their length: the page
(with its count), and one statement per kind of related row for the whole page (nodes and GPUs;
histories only when asked with expand=stages). Instances, nodes, invoices, usage, tickets and
the audit trail. Counted on the engine itself, on SQLite and
PostgreSQL; a list that went back to a query per item fails here."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event

from gpulease.domain.errors import Conflict
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.services.fleet import inventory
from gpulease.services.instances import views as instances
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import TenantCtx


@contextmanager
def counted(p: Platform) -> Iterator[list[str]]:
    statements: list[str] = []

    def note(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    event.listen(p.db.engine, "before_cursor_execute", note)
    try:
        yield statements
    finally:
        event.remove(p.db.engine, "before_cursor_execute", note)


def statements_for(p: Platform, call: Callable[[], object]) -> int:
    with counted(p) as seen:
        call()
    return len(seen)


def order_many(p: Platform, t: TenantCtx, key: str, wanted: int) -> int:
    """Container instances of one GPU each, then bare-metal ones, until `wanted` exist."""
    made = 0
    for request in (dict(kind="container", offer="rtx4090-24g-container", gpus=1),
                    dict(sku="h100-80g-x8", region="ningxia-1"),
                    dict(sku="rtx4090-24g-x8", region="sichuan-2")):
        while made < wanted:
            try:
                orders.place_order(p, t.principal, OrderRequest(ssh_keys=[key], **request))
            except Conflict:  # this offer is out of stock: the next one
                break
            made += 1
    return made


def test_pages_of_instances_and_nodes_cost_the_same_few_statements(
    fleet: Platform, tenant: TenantCtx, key: str, operator: TenantCtx,
) -> None:
    made = order_many(fleet, tenant, key, 24)
    assert made >= 20
    for expand in (None, "stages"):
        small = statements_for(fleet, lambda: instances.list_instances(
            fleet, tenant.principal, limit=2, expand=expand))  # noqa: B023
        large = statements_for(fleet, lambda: instances.list_instances(
            fleet, tenant.principal, limit=made, expand=expand))  # noqa: B023
        assert small == large, (expand, small, large)
        assert large <= (3 if expand is None else 4)
    page = instances.list_instances(fleet, tenant.principal, limit=made)
    assert len(page.items) == made and all(i.stages == [] for i in page.items)
    assert all(i.nodes for i in page.items)  # the summary names the nodes
    full = instances.list_instances(fleet, tenant.principal, limit=made, expand="stages")
    one = instances.show_instance(fleet, tenant.principal, full.items[0].id)
    assert full.items[0].stages == one.stages and one.stages
    # the views are built without validation: each must read as a validated one does
    for item in (*page.items, *full.items, one):
        assert type(item).model_validate(item.model_dump()) == item
        assert type(item).model_validate_json(item.model_dump_json()).model_dump_json() \
            == item.model_dump_json()
    status = page.items[0].status
    by_status = instances.list_instances(fleet, tenant.principal, status=status, limit=made)
    assert by_status.total == sum(i.status == status for i in page.items) > 0
    assert all(i.status == status for i in by_status.items)
    assert {i.tenant_id for i in instances.list_instances(
        fleet, operator.principal, limit=made).items} == {tenant.tenant_id}
    past_end = instances.list_instances(fleet, tenant.principal, limit=2, offset=made)
    assert past_end.items == [] and past_end.total == made
    assert instances.list_instances(fleet, tenant.principal, limit=2, offset=1).total == made
    nodes_small = statements_for(fleet, lambda: inventory.list_nodes(
        fleet, operator.principal, limit=2))
    nodes_large = statements_for(fleet, lambda: inventory.list_nodes(
        fleet, operator.principal, limit=200))
    assert nodes_small == nodes_large


def test_an_unknown_expansion_is_a_clear_4xx(fleet: Platform, tenant: TenantCtx) -> None:
    from gpulease.domain.errors import InvalidInput

    with pytest.raises(InvalidInput, match="stages"):
        instances.list_instances(fleet, tenant.principal, expand="everything")


def test_pages_of_invoices_and_usage_cost_the_same_few_statements(
    platform: Platform, operator: TenantCtx,
) -> None:
    from datetime import UTC, datetime
    from decimal import Decimal

    from gpulease.db.money_tables import Invoice, UsageRecord
    from gpulease.services.money import metering
    from gpulease.services.money.invoices import views as invoices
    from gpulease.testing.callers import new_tenant

    now = datetime(2026, 11, 30, tzinfo=UTC)
    tenants = [new_tenant(platform) for _ in range(4)]
    with platform.db.write() as s:
        for n in range(24):
            t = tenants[n % 4]
            s.add(Invoice(id=f"inv-{n:04d}", tenant_id=t.tenant_id, kind="invoice",
                          period=f"2025-{n // 4 + 1:02d}", status="final", number=f"GL-{n:04d}",
                          currency="CNY", vat_rate=Decimal("0.06"), prices_include_vat=True,
                          net=Decimal("100.00"), vat=Decimal("6.00"), total=Decimal("106.00"),
                          created_at=now, updated_at=now))
            s.add(Invoice(id=f"crn-{n:04d}", tenant_id=t.tenant_id, kind="credit_note",
                          period=f"2025-{n // 4 + 1:02d}", status="final", number=f"GC-{n:04d}",
                          corrects_id=f"inv-{n:04d}", currency="CNY", vat_rate=Decimal("0.06"),
                          prices_include_vat=True, net=Decimal("-10.00"),
                          vat=Decimal("-0.60"), total=Decimal("-10.60"),
                          created_at=now, updated_at=now))
            s.add(UsageRecord(tenant_id=tenants[0].tenant_id, key=f"k-{n}", kind="egress_gb",
                              quantity=Decimal("1"), unit_price=Decimal("0.8"),
                              amount=Decimal("0.80"), started_at=now, ended_at=now,
                              recorded_at=now, source="test"))

    def page_of_invoices(limit: int) -> object:
        return invoices.list_invoices(platform, operator.principal, limit=limit)

    assert statements_for(platform, lambda: page_of_invoices(2)) == statements_for(
        platform, lambda: page_of_invoices(48))
    page = invoices.list_invoices(platform, operator.principal, limit=48)
    first = next(i for i in page.items if i.id == "inv-0000")
    assert first.credited == Decimal("10.60") and first.tenant_name  # as one invoice shows
    assert invoices.show_invoice(platform, operator.principal, "inv-0000").credited == (
        first.credited)
    usage_small = statements_for(platform, lambda: metering.list_usage(
        platform, tenants[0].principal, limit=2))
    usage_large = statements_for(platform, lambda: metering.list_usage(
        platform, tenants[0].principal, limit=24))
    assert usage_small == usage_large


def test_pages_of_tickets_and_the_audit_trail_cost_the_same_few_statements(
    fleet: Platform, tenant: TenantCtx, key: str, operator: TenantCtx,
) -> None:
    from datetime import UTC, datetime, timedelta

    from gpulease.schemas.tickets import TicketOpen
    from gpulease.services.platform import audit
    from gpulease.services.support import tickets

    made = order_many(fleet, tenant, key, 12)
    ids = [i.id for i in instances.list_instances(fleet, tenant.principal, limit=made).items]
    for n in range(24):
        tickets.open_by_tenant(fleet, tenant.principal, TicketOpen(
            instance_id=ids[n % len(ids)], summary=f"question {n}", severity="P3"))
    at = datetime(2026, 12, 1, tzinfo=UTC)
    audit.append(fleet, [audit.Happening(
        at=at + timedelta(seconds=n), action="POST /api/v1/instances", outcome=201,
        user_id=tenant.principal.user_id, tenant_id=tenant.tenant_id, target=f"i-{n}")
        for n in range(60)])
    begin = int(fleet.db.dialect == "sqlite")  # SQLite's BEGIN is a statement of ours
    for who in (tenant, operator):
        small = statements_for(fleet, lambda: tickets.list_tickets(
            fleet, who.principal, limit=2))  # noqa: B023
        large = statements_for(fleet, lambda: tickets.list_tickets(
            fleet, who.principal, limit=50))  # noqa: B023
        assert small == large <= 3 + begin  # the count, the page, its nodes' names
        assert len(tickets.list_tickets(fleet, who.principal, limit=50).items) == 24
        assert {t.instance_id for t in tickets.list_tickets(fleet, who.principal).items} == set(
            ids)
    trail_small = statements_for(fleet, lambda: audit.entries(
        fleet, operator.principal, limit=2))
    trail_large = statements_for(fleet, lambda: audit.entries(
        fleet, operator.principal, limit=50))
    assert trail_small == trail_large <= 2 + begin  # the count, the page
    assert len(audit.entries(fleet, operator.principal, limit=50).items) == 50
