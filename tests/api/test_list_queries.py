"""List pages cost a constant number of SQL statements, whatever their length: the count,
the page, and one statement per kind of related row for the whole page (nodes and GPUs;
histories only when asked with expand=stages). Counted on the engine itself, on SQLite and
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
from gpulease.services import instances, inventory, orders
from tests.conftest import TenantCtx


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
        assert large <= (4 if expand is None else 5)
    page = instances.list_instances(fleet, tenant.principal, limit=made)
    assert len(page.items) == made and all(i.stages == [] for i in page.items)
    assert all(i.nodes for i in page.items)  # the summary names the nodes
    full = instances.list_instances(fleet, tenant.principal, limit=made, expand="stages")
    one = instances.show_instance(fleet, tenant.principal, full.items[0].id)
    assert full.items[0].stages == one.stages and one.stages
    nodes_small = statements_for(fleet, lambda: inventory.list_nodes(
        fleet, operator.principal, limit=2))
    nodes_large = statements_for(fleet, lambda: inventory.list_nodes(
        fleet, operator.principal, limit=200))
    assert nodes_small == nodes_large


def test_an_unknown_expansion_is_a_clear_4xx(fleet: Platform, tenant: TenantCtx) -> None:
    from gpulease.domain.errors import InvalidInput

    with pytest.raises(InvalidInput, match="stages"):
        instances.list_instances(fleet, tenant.principal, expand="everything")
