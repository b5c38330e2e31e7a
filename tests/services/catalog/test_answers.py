"""The catalog the API sends: the view's own JSON, kept while nothing in it moved, and
built again when the stock, the catalog or the day's prices do."""

from __future__ import annotations

import json
import tomllib
from datetime import UTC, datetime

import httpx
from sqlalchemy import event

from gpulease.db.rates import MemoryStore
from gpulease.domain.catalog import DEFAULT_CATALOG, parse_catalog
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.services.catalog import offers as catalog
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import TenantCtx
from gpulease.testing.clock import MovableClock
from gpulease.testing.servers import LiveServer


def offer(answer: str, offer_id: str) -> dict[str, object]:
    found: dict[str, object] = next(o for o in json.loads(answer)["offers"]
                                    if o["id"] == offer_id)
    return found


def free_gpus(answer: str, offer_id: str) -> int:
    return int(next(o for o in json.loads(answer)["container_offers"]
                    if o["id"] == offer_id)["free_gpus"])


def test_the_answer_is_the_views_json_and_follows_the_stock(
        fleet: Platform, tenant: TenantCtx, key: str) -> None:
    first = catalog.catalog_json(fleet)
    assert first == catalog.catalog_view(fleet).model_dump_json()
    assert catalog.catalog_json(fleet) is first  # nothing moved: the same answer, kept
    h100 = "h100-80g-x8@ningxia-1"
    container = fleet.catalog.container_offers[0].id

    orders.place_order(fleet, tenant.principal, OrderRequest(
        sku="h100-80g-x8", region="ningxia-1", ssh_keys=[key]))
    after_server = catalog.catalog_json(fleet)
    assert offer(after_server, h100)["stock"] == int(offer(first, h100)["stock"]) - 1  # type: ignore[call-overload]
    assert after_server == catalog.catalog_view(fleet).model_dump_json()

    orders.place_order(fleet, tenant.principal, OrderRequest(
        kind="container", offer=container, gpus=2, ssh_keys=[key]))
    after_gpus = catalog.catalog_json(fleet)
    assert free_gpus(after_gpus, container) == free_gpus(after_server, container) - 2


def test_a_new_catalog_and_a_new_days_prices_are_sent_at_once(
        fleet: Platform, tenant: TenantCtx) -> None:
    clock = MovableClock(datetime(2026, 12, 14, 23, 0, tzinfo=UTC))
    fleet.clock = clock
    data = tomllib.loads(DEFAULT_CATALOG.read_text())
    h100 = next(o for o in data["offers"] if o["sku"] == "h100-80g-x8"
                and o["region"] == "ningxia-1")
    h100["price_changes"] = [{"effective_from": "2026-12-15", "monthly_price": "79000"}]
    before = catalog.catalog_json(fleet)
    fleet.catalog = parse_catalog(data, "announced prices")
    announced = catalog.catalog_json(fleet)
    offer_id = "h100-80g-x8@ningxia-1"
    assert offer(before, offer_id)["price_changes"] == []
    assert offer(announced, offer_id)["price_changes"] == [
        {"effective_from": "2026-12-15", "monthly_price": "79000.00"}]

    clock.at = datetime(2026, 12, 15, 0, 30, tzinfo=UTC)
    today = catalog.catalog_json(fleet)
    assert offer(today, offer_id)["monthly_price"] == "79000.00"
    assert offer(today, offer_id)["price_changes"] == []
    assert today == catalog.catalog_view(fleet).model_dump_json()


def test_the_token_check_and_the_stock_share_one_connection(
        fleet: Platform, server: LiveServer, tenant: TenantCtx) -> None:
    """The most read endpoint checks out one connection (on PostgreSQL each checkout pings
    the server first) and runs two statements: the token's owner and the stock; once the
    stock is kept (test_catalog_stock.py), only the first."""
    checkouts: list[object] = []
    statements: list[str] = []

    def checked_out(*_: object) -> None:
        checkouts.append(1)

    def ran(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        statements.append(statement)

    def selects_of_one_request() -> int:
        checkouts.clear()
        statements.clear()
        answer = httpx.get(f"{server.url}/api/v1/catalog", headers=headers)
        assert answer.status_code == 200 and answer.json()["offers"]
        assert len(checkouts) == 1
        return len([s for s in statements if s.lstrip().upper().startswith("SELECT")])

    headers = {"Authorization": f"Bearer {tenant.token}"}
    assert httpx.get(f"{server.url}/api/v1/catalog", headers=headers).status_code == 200
    # The rate limits' shared counters are exchanged every few seconds on a request's way
    # in (db/rates.py): a checkout of their own, not the endpoint's; counted in memory here.
    fleet.rates = MemoryStore()
    event.listen(fleet.db.engine, "checkout", checked_out)
    event.listen(fleet.db.engine, "before_cursor_execute", ran)
    try:
        fleet.settings = fleet.settings.model_copy(update={"catalog_stock_max_age_s": 0})
        assert selects_of_one_request() == 2
        fleet.settings = fleet.settings.model_copy(update={"catalog_stock_max_age_s": 60})
        selects_of_one_request()  # reads the stock and keeps it
        assert selects_of_one_request() == 1
    finally:
        event.remove(fleet.db.engine, "checkout", checked_out)
        event.remove(fleet.db.engine, "before_cursor_execute", ran)
    assert httpx.get(f"{server.url}/api/v1/catalog",
                     headers={"Authorization": "Bearer glp_unknown"}).status_code == 401


def test_each_offer_shows_its_support_clocks_before_buying(fleet: Platform) -> None:
    """The clocks a ticket about the server runs on are in the catalog (the defaults, or
    an offer's own), and no add-on promises another response time than they give."""
    data = tomllib.loads(DEFAULT_CATALOG.read_text(encoding="utf-8"))
    h100 = next(o for o in data["offers"] if o["sku"] == "h100-80g-x8"
                and o["region"] == "ningxia-1")
    h100["support"] = {"response_minutes": {"P1": 10, "P2": 30}}
    fleet.catalog = parse_catalog(data, "an offer with its own support")
    answer = catalog.catalog_json(fleet)
    own = offer(answer, "h100-80g-x8@ningxia-1")["support"]
    assert own == {"response_minutes": {"P1": "10", "P2": "30"},
                   "mitigation_hours": {"P1": "4", "P2": "24"},
                   "resolution_hours": {"P1": "72", "P2": "168", "P3": "336"}}
    defaults = next(o for o in json.loads(answer)["offers"]
                    if o["id"] != "h100-80g-x8@ningxia-1")["support"]
    assert defaults["response_minutes"] == {"P1": "15", "P2": "60", "P3": "480"}
    for addon in fleet.catalog.addons:
        assert "response" not in addon.name, addon.name  # the clocks are the offer's
