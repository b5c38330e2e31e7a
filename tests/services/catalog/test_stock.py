"""The catalog's stock kept between reads: read again as soon as this process commits a
change to nodes, GPUs or allocations, and after catalog_stock_max_age_s for the changes of
other processes. SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Select, event, select, update

from gpulease.compose import make_platform
from gpulease.db.tables import Node
from gpulease.domain.states import NodeStatus
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.services.catalog import offers as catalog
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import TenantCtx

H100 = ("h100-80g-x8", "ningxia-1")


def stock_of(p: Platform) -> int:
    return catalog.catalog_stock(p)[0].get(H100, 0)


def keeping(p: Platform, seconds: float) -> None:
    p.settings = p.settings.model_copy(update={"catalog_stock_max_age_s": seconds})


@pytest.fixture
def other_process(fleet: Platform) -> Iterator[Platform]:
    """A second platform on the same database, with its own engine: another API process
    or a separate worker, whose commits this process does not see happen."""
    other = make_platform(fleet.settings)
    yield other
    other.db.dispose()


def take_out_one_h100(p: Platform) -> None:
    with p.db.write() as s:
        node_id = s.scalars(select_available_h100()).first()
        s.execute(update(Node).where(Node.id == node_id)
                  .values(status=NodeStatus.MAINTENANCE.value))


def select_available_h100() -> Select[str]:
    return select(Node.id).where(Node.sku == H100[0], Node.region == H100[1],
                                 Node.status == NodeStatus.AVAILABLE.value).order_by(Node.id)


def test_another_processes_change_shows_once_the_stock_is_older_than_its_max_age(
        fleet: Platform, other_process: Platform) -> None:
    keeping(fleet, 3600)
    before = stock_of(fleet)
    take_out_one_h100(other_process)
    assert stock_of(fleet) == before  # kept: this process saw no change of its own
    keeping(fleet, 0)
    assert stock_of(fleet) == before - 1


def test_this_processes_own_order_shows_at_once(fleet: Platform, tenant: TenantCtx,
                                                key: str) -> None:
    keeping(fleet, 3600)
    before = stock_of(fleet)
    orders.place_order(fleet, tenant.principal, OrderRequest(
        sku=H100[0], region=H100[1], ssh_keys=[key]))
    assert stock_of(fleet) == before - 1
    take_out_one_h100(fleet)  # a plain UPDATE through the same engine counts too
    assert stock_of(fleet) == before - 2


def test_a_kept_stock_costs_no_statement(fleet: Platform) -> None:
    keeping(fleet, 3600)
    statements: list[str] = []

    def ran(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        statements.append(statement)

    stock_of(fleet)
    event.listen(fleet.db.engine, "before_cursor_execute", ran)
    try:
        stock_of(fleet)
        assert statements == []
        keeping(fleet, 0)  # 0: every request reads
        stock_of(fleet)
        assert any("FROM nodes" in s for s in statements)
    finally:
        event.remove(fleet.db.engine, "before_cursor_execute", ran)


def test_changes_count_once_committed_and_never_when_rolled_back(fleet: Platform) -> None:
    changes = fleet.db.changes
    start = changes.seen(["nodes", "gpus"])
    with fleet.db.write() as s:
        node_id = s.scalars(select_available_h100()).first()
        s.execute(update(Node).where(Node.id == node_id).values(region=H100[1]))
        s.flush()
        assert changes.seen(["nodes", "gpus"]) == start  # not committed yet
    assert changes.seen(["nodes", "gpus"]) == (start[0] + 1, start[1])

    with pytest.raises(RuntimeError), fleet.db.write() as s:
        s.execute(update(Node).where(Node.id == node_id).values(region=H100[1]))
        raise RuntimeError("the transaction rolls back")
    with fleet.db.read() as s:
        s.scalars(select_available_h100()).all()
    assert changes.seen(["nodes", "gpus"]) == (start[0] + 1, start[1])
