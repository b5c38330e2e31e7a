"""The REST API over real HTTP (uvicorn on 127.0.0.1), on SQLite and PostgreSQL."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from sqlalchemy import select

from gpulease.db.tables import GpuAllocation, Instance, Node, User
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.schemas.fleet import NodeFilter
from gpulease.services.accounts import identity as accounts
from gpulease.services.accounts import users
from gpulease.services.fleet import inventory
from gpulease.services.fleet.inventory import NodeSpec, add_node
from gpulease.testing.callers import TenantCtx, new_tenant
from gpulease.testing.factories import counts, double_allocated_gpus
from gpulease.testing.servers import LiveServer

H100 = {"sku": "h100-80g-x8", "region": "ningxia-1"}


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_health_openapi_and_unknown_paths(fleet: Platform, server: LiveServer) -> None:
    r = httpx.get(f"{server.url}/healthz")
    assert r.status_code == 200 and r.json()["status"] == "ok"
    spec = httpx.get(f"{server.url}/api/v1/openapi.json").json()
    assert "/api/v1/instances" in spec["paths"] and "/api/v1/catalog" in spec["paths"]
    assert spec["paths"]["/api/v1/catalog"]["get"]["security"] == [{"apiToken": []}]
    r = httpx.get(f"{server.url}/api/v2/whatever")
    assert r.status_code == 404 and r.headers["content-type"] == "application/problem+json"
    assert "/api/v1" in r.json()["detail"]


def test_authentication_errors_are_problems(
    fleet: Platform, server: LiveServer, tenant: TenantCtx
) -> None:
    for headers, says in (({}, "No API token"), (auth("nope"), "not a gpulease token"),
                          (auth("glp_" + "x" * 43), "Unknown API token")):
        r = httpx.get(f"{server.url}/api/v1/catalog", headers=headers)
        assert r.status_code == 401 and r.headers["content-type"] == "application/problem+json"
        assert says in r.json()["detail"]
    client = server.client(tenant.token)
    token = client.create_token("short", 1)
    assert httpx.get(f"{server.url}/api/v1/me", headers=auth(token.token)).status_code == 200
    client.revoke_token(token.id)
    r = httpx.get(f"{server.url}/api/v1/me", headers=auth(token.token))
    assert r.status_code == 401 and "revoked" in r.json()["detail"]


def test_token_is_stored_only_as_a_hash(fleet: Platform, tenant: TenantCtx) -> None:
    from gpulease.db.tables import ApiToken

    with fleet.db.read() as s:
        stored = [t.token_hash for t in s.scalars(select(ApiToken))]
    assert tenant.token not in stored and all(len(h) == 64 for h in stored)


def test_catalog_shows_offers_with_stock(
    fleet: Platform, server: LiveServer, tenant: TenantCtx
) -> None:
    c = server.client(tenant.token).catalog()
    h100 = next(o for o in c.offers if o.id == "h100-80g-x8@ningxia-1")
    assert (h100.monthly_price, h100.list_monthly_price, h100.stock) == (84480, 105600, 2)
    assert h100.discount_percent == 20 and h100.nvlink and h100.infiniband
    raw = httpx.get(f"{server.url}/api/v1/catalog", headers=auth(tenant.token)).json()
    assert raw["offers"][0]["monthly_price"] == "7920.00"  # money is a string, never a float
    assert raw["container_offers"][0]["price_per_gpu_hour"] == "1.96"
    assert len(server.client(tenant.token).images()) == 3


def test_order_errors_name_the_field(
    fleet: Platform, server: LiveServer, tenant: TenantCtx, key: str
) -> None:
    before = counts(fleet)
    url = f"{server.url}/api/v1/instances"
    cases = [
        ({"sku": "nope", "region": "ningxia-1", "ssh_keys": [key]}, 422, "sku"),
        ({**H100, "term": "week", "ssh_keys": [key]}, 422, "term"),
        ({**H100, "ssh_keys": ["ssh-rsa"]}, 422, "ssh_keys"),
        ({**H100, "kind": "cluster", "nodes": 0, "ssh_keys": [key]}, 422, "nodes"),
        ({**H100, "kind": "cluster", "nodes": "four", "ssh_keys": [key]}, 422, "nodes"),
        ({**H100, "colour": "red", "ssh_keys": [key]}, 422, "colour"),
        ({**H100, "kind": "vm", "ssh_keys": [key]}, 422, "kind"),
        ({**H100, "ssh_password": True, "ssh_keys": [key]}, 422, "ssh_password"),
    ]
    for body, status, field in cases:
        r = httpx.post(url, json=body, headers=auth(tenant.token))
        assert r.status_code == status, (body, r.text)
        assert r.headers["content-type"] == "application/problem+json"
        problem = r.json()
        assert problem["field"] == field, problem
        assert problem["status"] == status and problem["detail"]
    r = httpx.post(url, content=b"{not json", headers=auth(tenant.token) | {
        "content-type": "application/json"})
    assert r.status_code == 422
    assert counts(fleet) == before


def test_idempotency_over_http(
    fleet: Platform, server: LiveServer, tenant: TenantCtx, key: str
) -> None:
    url = f"{server.url}/api/v1/instances"
    headers = auth(tenant.token) | {"Idempotency-Key": "k-1"}
    body = {**H100, "ssh_keys": [key]}
    first = httpx.post(url, json=body, headers=headers)
    again = httpx.post(url, json=body, headers=headers)
    assert first.status_code == again.status_code == 201
    assert first.json()["id"] == again.json()["id"]
    assert again.headers.get("idempotent-replayed") == "true"
    other = httpx.post(url, json={**body, "term": "day"}, headers=headers)
    assert other.status_code == 422 and "different request" in other.json()["detail"]


def test_cross_tenant_is_404_reader_is_403_operator_only_nodes(
    fleet: Platform, server: LiveServer, tenant: TenantCtx, operator: TenantCtx, key: str
) -> None:
    iid = server.client(tenant.token).order(OrderRequest(ssh_keys=[key], **H100)).id
    stranger = new_tenant(fleet)
    r = httpx.get(f"{server.url}/api/v1/instances/{iid}", headers=auth(stranger.token))
    assert r.status_code == 404
    r = httpx.post(f"{server.url}/api/v1/instances/{iid}/release", headers=auth(stranger.token))
    assert r.status_code == 404
    r = httpx.post(f"{server.url}/api/v1/users", headers=auth(tenant.token),
                   json={"email": "reader@example.com", "name": "R", "role": "reader"})
    assert r.status_code == 201

    reader_token = accounts.issue_token(fleet, tenant.principal, "r", r.json()["id"], 1).token
    r = httpx.post(f"{server.url}/api/v1/instances", headers=auth(reader_token),
                   json={**H100, "ssh_keys": [key]})
    assert r.status_code == 403 and "read" in r.json()["detail"]
    assert httpx.get(f"{server.url}/api/v1/nodes", headers=auth(tenant.token)).status_code == 403
    nodes = server.client(operator.token).nodes()
    assert nodes.total == 16 and all(n.simulated for n in nodes.items)


def test_pagination(fleet: Platform, server: LiveServer, operator: TenantCtx) -> None:
    client = server.client(operator.token)
    first = client.nodes(limit=5, offset=0)
    second = client.nodes(limit=5, offset=5)
    assert first.total == second.total == 16 and len(first.items) == 5
    assert {n.id for n in first.items}.isdisjoint({n.id for n in second.items})
    r = httpx.get(f"{server.url}/api/v1/nodes?limit=0", headers=auth(operator.token))
    assert r.status_code == 422 and r.json()["field"] == "limit"


def _five_free_h100(p: Platform) -> None:
    with p.db.write() as s:
        for i in range(3):
            add_node(s, p, NodeSpec(name=f"h100-extra-{i}", fabric_id="ib-ningxia-1-1", **H100))


def test_race_64_orders_for_the_last_5_nodes(
    fleet: Platform, server: LiveServer, key: str
) -> None:
    _five_free_h100(fleet)
    tenants = [new_tenant(fleet) for _ in range(4)]
    body = {**H100, "ssh_keys": [key]}

    def attempt(i: int) -> int:
        token = tenants[i % len(tenants)].token
        return httpx.post(f"{server.url}/api/v1/instances", json=body, headers=auth(token),
                          timeout=120).status_code

    with ThreadPoolExecutor(64) as pool:
        codes = list(pool.map(attempt, range(64)))
    assert codes.count(201) == 5 and codes.count(409) == 59, codes
    assert double_allocated_gpus(fleet) == []
    with fleet.db.read() as s:
        held = list(s.scalars(select(Node.instance_id).where(
            Node.sku == "h100-80g-x8", Node.instance_id.is_not(None))))
        assert len(held) == len(set(held)) == 5
        assert s.scalar(select(Instance.id).where(Instance.sku == "h100-80g-x8").limit(10)) in (
            set(held))


def test_race_competing_4_node_clusters(
    fleet: Platform, server: LiveServer, key: str
) -> None:
    with fleet.db.write() as s:
        for i in range(8):  # 10 H100 on one fabric in all
            add_node(s, fleet, NodeSpec(name=f"h100-c-{i}", fabric_id="ib-ningxia-1-1", **H100))
    t = new_tenant(fleet)
    body = {**H100, "kind": "cluster", "nodes": 4, "ssh_keys": [key]}

    def attempt(_: int) -> httpx.Response:
        return httpx.post(f"{server.url}/api/v1/instances", json=body, headers=auth(t.token),
                          timeout=120)

    with ThreadPoolExecutor(16) as pool:
        responses = list(pool.map(attempt, range(16)))
    codes = [r.status_code for r in responses]
    assert codes.count(201) == 2 and codes.count(409) == 14, codes
    node_sets = [{n["id"] for n in r.json()["nodes"]} for r in responses if r.status_code == 201]
    assert all(len(ns) == 4 for ns in node_sets) and node_sets[0].isdisjoint(node_sets[1])
    refused = next(r for r in responses if r.status_code == 409).json()
    assert refused["title"] == "Out of stock" and "largest group 2" in refused["detail"]
    assert double_allocated_gpus(fleet) == []
    with fleet.db.read() as s:
        active = s.scalars(select(GpuAllocation).where(GpuAllocation.released_at.is_(None)))
        assert len(list(active)) == 64


@pytest.mark.parametrize("action", ["drain", "maintenance", "resume"])
def test_node_actions_over_http(
    fleet: Platform, server: LiveServer, operator: TenantCtx, action: str
) -> None:
    client = server.client(operator.token)
    node = client.nodes(NodeFilter(sku="h100-80g-x8")).items[0]
    result = client.node_action(node.id, action, "bench check")
    expected = {"drain": "maintenance", "maintenance": "maintenance", "resume": "available"}
    assert result.status == expected[action]
    assert inventory.get_node(fleet, operator.principal, node.id).status == expected[action]


def test_every_creating_post_honours_idempotency_keys(
    fleet: Platform, server: LiveServer, operator: TenantCtx, tenant: TenantCtx
) -> None:
    op, ten = auth(operator.token), auth(tenant.token)
    cases = [
        ("/api/v1/tenants", op, {"name": "acme", "admin_email": "a@acme.io", "admin_name": "A"},
         {"name": "acme2", "admin_email": "b@acme.io", "admin_name": "B"}),
        ("/api/v1/users", ten, {"email": "m@t.io", "name": "M", "role": "member"},
         {"email": "n@t.io", "name": "N", "role": "member"}),
        ("/api/v1/tokens", ten, {"name": "ci"}, {"name": "other"}),
        ("/api/v1/images", op, {"id": "img-1", "name": "I", "os": "Ubuntu", "gpu_vendor": "any",
                                "url": "https://e.io/i.iso", "checksum": "sha256:" + "1" * 64},
         {"id": "img-2", "name": "I", "os": "Ubuntu", "gpu_vendor": "any",
          "url": "https://e.io/i.iso", "checksum": "sha256:" + "1" * 64}),
    ]
    for path, headers, body, other in cases:
        h = headers | {"Idempotency-Key": f"key-{path}"}
        first = httpx.post(f"{server.url}{path}", json=body, headers=h)
        again = httpx.post(f"{server.url}{path}", json=body, headers=h)
        assert first.status_code == again.status_code == 201, (path, first.text, again.text)
        made, replayed = first.json(), again.json()
        if path == "/api/v1/tokens":  # a secret is shown once: the replay has the rest
            assert made["token"] and replayed.pop("token") is None
            made.pop("token"), made.pop("note"), replayed.pop("note")
        elif path == "/api/v1/tenants":
            assert made["token"]["token"] and replayed["token"]["token"] is None
            for answer in (made, replayed):
                answer["token"].pop("token"), answer["token"].pop("note")
        assert made == replayed, path  # the same resource, not a second one
        refused = httpx.post(f"{server.url}{path}", json=other, headers=h)
        assert refused.status_code == 422 and refused.json()["field"] == "Idempotency-Key"
    # nothing was created twice
    assert len([t for t in server.client(tenant.token).tokens() if t.name == "ci"]) == 1
    with fleet.db.read() as s:
        from gpulease.db.tables import IdempotencyKey, Tenant

        assert len(list(s.scalars(select(Tenant).where(Tenant.name == "acme")))) == 1
        stored = list(s.scalars(select(IdempotencyKey.response_json)))
        assert stored and all("glp_" not in r for r in stored)  # sealed at rest


def test_a_user_sets_a_console_password(fleet: Platform, server: LiveServer,
                                        tenant: TenantCtx) -> None:
    short = httpx.put(f"{server.url}/api/v1/me/password", json={"password": "short"},
                      headers=auth(tenant.token))
    assert short.status_code == 422 and short.json()["field"] == "password"
    assert "at least 12 characters" in short.json()["detail"]
    done = httpx.put(f"{server.url}/api/v1/me/password",
                     json={"password": "a long enough passphrase"}, headers=auth(tenant.token))
    assert done.status_code == 204
    with fleet.db.read() as s:
        admin = s.scalar(select(User).where(User.tenant_id == tenant.tenant_id))
        assert admin is not None and admin.password_hash.startswith("$argon2id$")
        email = admin.email
    session = accounts.console_login(fleet, email.upper(), "a long enough passphrase")
    assert accounts.authenticate(fleet, session.token).user_id == admin.id
    assert session.expires_at is not None


def test_wrong_console_passwords_in_a_row_block_sign_in_for_a_while(
    fleet: Platform, tenant: TenantCtx
) -> None:
    from datetime import UTC, datetime, timedelta

    from gpulease.domain.errors import TooManyRequests, Unauthorized
    from gpulease.testing.clock import MovableClock

    clock = MovableClock(datetime(2026, 12, 1, 9, 0, tzinfo=UTC))
    fleet.clock = clock
    users.change_password(fleet, tenant.principal, "a long enough passphrase", None)
    with fleet.db.read() as s:
        email = s.scalar(select(User.email).where(User.id == tenant.principal.user_id))
    assert email
    for _ in range(fleet.settings.sign_in_failures_per_account):
        with pytest.raises(Unauthorized, match="Wrong e-mail or password"):
            accounts.console_login(fleet, email, "not the passphrase")
    with pytest.raises(TooManyRequests, match="try again after 09:15 UTC"):
        accounts.console_login(fleet, email, "a long enough passphrase")  # even the right one
    # An unknown e-mail gets the same answer as a wrong password, and blocks nothing.
    with pytest.raises(Unauthorized, match="Wrong e-mail or password"):
        accounts.console_login(fleet, "nobody@example.com", "whatever it is")
    clock.move(minutes=15, seconds=1)  # the failures slid out
    assert accounts.console_login(fleet, email, "a long enough passphrase").expires_at == (
        clock.now() + timedelta(hours=12))



def test_answers_are_not_cached_and_numbers_are_plain(
    platform: Platform, server: LiveServer, tenant: TenantCtx, operator: TenantCtx
) -> None:
    me = {"Authorization": f"Bearer {tenant.token}"}
    made = httpx.post(f"{server.url}/api/v1/tokens", headers=me,
                      json={"name": "ci", "expires_in_days": 1})
    assert made.status_code == 201 and made.headers["cache-control"] == "no-store"
    catalog = httpx.get(f"{server.url}/api/v1/catalog", headers=me)
    assert catalog.headers["cache-control"] == "private, no-cache"  # its ETag's own
    boss = {"Authorization": f"Bearer {operator.token}"}
    for odd in ("1_000", " 5 ", "1e3", "NaN"):
        r = httpx.post(f"{server.url}/api/v1/tenants/{tenant.tenant_id}/top-ups",
                       headers=boss, json={"amount": odd, "reference": f"wire {odd}"})
        assert r.status_code == 422 and "plain number" in r.text, odd
    ok = httpx.post(f"{server.url}/api/v1/tenants/{tenant.tenant_id}/top-ups", headers=boss,
                    json={"amount": "1000.50", "reference": "wire ok"})
    assert ok.status_code == 201
    for odd in ("1_0", " 5", "+5", "5.0", "0x10"):  # a query's integers: digits only
        r = httpx.get(f"{server.url}/api/v1/instances", headers=me,
                      params={"limit": odd})
        assert r.status_code == 422 and "takes a whole number written in digits" in r.text, odd
    assert httpx.get(f"{server.url}/api/v1/instances", headers=me,
                     params={"limit": "10", "offset": "0"}).status_code == 200
