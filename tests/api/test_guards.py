"""Plain input never makes a 5xx; what every answer carries (request id, security
headers, WWW-Authenticate, Allow); bodies over the limit are refused before they are read."""

from __future__ import annotations

import httpx
import pytest

from gpulease.platform import Platform
from gpulease.testing.callers import TenantCtx
from gpulease.testing.servers import LiveServer


def call(server: LiveServer, who: TenantCtx | None, method: str, path: str,
         headers: dict[str, str] | None = None, **kw: object) -> httpx.Response:
    sent = ({"Authorization": f"Bearer {who.token}"} if who else {}) | (headers or {})
    return httpx.request(method, f"{server.url}{path}", headers=sent, timeout=30,
                         **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("method", "path", "body", "field"), [
    ("GET", "/api/v1/instances?offset=9223372036854775808", None, "offset"),
    ("GET", "/api/v1/wallet/ledger?offset=99999999999999999999", None, "offset"),
    ("POST", "/api/v1/quotes", {"sku": "h100-80g-x8", "region": "ningxia-1",
                                "count": 10**30}, "count"),
    ("POST", "/api/v1/quotes", {"sku": "h100-80g-x8", "region": "ningxia-1",
                                "add": {"public-bandwidth": "1e400"}}, "add.public-bandwidth"),
    ("POST", "/api/v1/quotes", {"sku": "h100-80g-x8", "region": "ningxia-1",
                                "days_per_week": "NaN"}, "days_per_week"),
    ("POST", "/api/v1/instances", {"sku": "h100-80g-x8", "region": "ningxia-1",
                                   "kind": "cluster", "nodes": 10**30, "ssh_keys": ["x"]},
     "nodes"),
    ("POST", "/api/v1/advise", {"params": "70B", "workload": "lora", "seq_len": 10**40},
     "seq_len"),
])
def test_out_of_range_numbers_are_422_not_500(
    fleet: Platform, server: LiveServer, tenant: TenantCtx, method: str, path: str,
    body: object, field: str,
) -> None:
    resp = call(server, tenant, method, path, json=body)
    assert resp.status_code == 422, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    assert resp.json()["field"] == field


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/api/v1/tenants/{tenant}/top-ups", {"amount": "1e30", "reference": "x"}, "amount"),
    ("/api/v1/tenants/{tenant}/top-ups", {"amount": "0.001", "reference": "x"}, "amount"),
    ("/api/v1/tenants/{tenant}/credit-limit", {"credit_limit": "1e30"}, "credit_limit"),
])
def test_operator_money_is_bounded(
    fleet: Platform, server: LiveServer, tenant: TenantCtx, operator: TenantCtx, path: str,
    body: object, field: str,
) -> None:
    method = "PUT" if path.endswith("credit-limit") else "POST"
    resp = call(server, operator, method, path.format(tenant=tenant.tenant_id), json=body)
    assert resp.status_code == 422, resp.text
    assert resp.json()["field"] == field


def test_a_body_over_the_limit_is_refused_before_it_is_read(
    fleet: Platform, server: LiveServer
) -> None:
    limit = fleet.settings.max_body_bytes
    big = b'{"x": "' + b"a" * (limit + 10) + b'"}'
    declared = httpx.post(f"{server.url}/api/v1/quotes", content=big, timeout=30,
                          headers={"Content-Type": "application/json"})
    assert declared.status_code == 413, declared.text  # no token needed to be refused
    assert "GPULEASE_MAX_BODY_BYTES" in declared.json()["detail"]

    def chunks() -> object:  # no Content-Length: counted as it arrives
        for _ in range(limit // 65536 + 2):
            yield b"a" * 65536

    streamed = httpx.post(f"{server.url}/api/v1/quotes", content=chunks(), timeout=30,
                          headers={"Content-Type": "application/json"})
    assert streamed.status_code == 413


def test_every_answer_carries_its_request_id_and_the_security_headers(
    fleet: Platform, server: LiveServer, tenant: TenantCtx
) -> None:
    given = call(server, tenant, "GET", "/api/v1/catalog", headers={"X-Request-Id": "abc-123"})
    assert given.headers["x-request-id"] == "abc-123"
    assert given.headers["x-content-type-options"] == "nosniff"
    made = call(server, tenant, "GET", "/api/v1/catalog",
                headers={"X-Request-Id": "bad id\x7f" * 20})
    assert len(made.headers["x-request-id"]) == 16 and made.headers["x-request-id"] != "abc-123"
    page = httpx.get(f"{server.url}/console/login", timeout=30)
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert page.headers["x-frame-options"] == "DENY"
    assert "strict-transport-security" not in page.headers  # plain http here


def test_401_says_how_to_authenticate_and_405_what_is_allowed(
    fleet: Platform, server: LiveServer
) -> None:
    anonymous = httpx.get(f"{server.url}/api/v1/instances", timeout=30)
    assert anonymous.status_code == 401
    assert anonymous.headers["www-authenticate"] == 'Bearer realm="gpulease"'
    wrong = httpx.delete(f"{server.url}/api/v1/catalog", timeout=30)
    assert wrong.status_code == 405
    assert wrong.headers["allow"] == "GET"
    assert "it takes GET" in wrong.json()["detail"]


def test_the_openapi_document_declares_its_security_and_its_problems(
    platform: Platform, server: LiveServer
) -> None:
    doc = httpx.get(f"{server.url}/api/v1/openapi.json", timeout=30).json()
    assert set(doc["components"]["securitySchemes"]) == {"apiToken", "agentCredential"}
    assert doc["components"]["securitySchemes"]["apiToken"]["scheme"] == "bearer"
    order = doc["paths"]["/api/v1/instances"]["post"]
    assert order["security"] == [{"apiToken": []}]
    assert {"401", "402", "403", "404", "409", "413", "422", "429", "503"} <= set(
        order["responses"])
    problem = order["responses"]["422"]["content"]["application/problem+json"]["schema"]
    assert problem == {"$ref": "#/components/schemas/Problem"}
    assert {"title", "status", "detail", "field"} <= set(
        doc["components"]["schemas"]["Problem"]["properties"])
    pushed = doc["paths"]["/api/v1/agent/telemetry"]["post"]
    assert pushed["security"] == [{"agentCredential": []}]


def test_a_nul_character_is_a_422_on_both_databases(fleet: Platform, tenant: TenantCtx) -> None:
    """A NUL (U+0000) is no one's text: refused by the input rule on both databases, naming
    the field (PostgreSQL's text could not hold it; SQLite stored it), nothing written."""
    from fastapi.testclient import TestClient

    from gpulease.api.app import create_app

    api = TestClient(create_app(fleet))
    r = api.post("/api/v1/users", headers={"Authorization": f"Bearer {tenant.token}"},
                 json={"email": "a\u0000b@example.com", "name": "N\u0000", "role": "reader"})
    assert r.status_code == 422 and "U+0000" in r.json()["detail"]
    assert "email" in r.json()["detail"] and "name" in r.json()["detail"]
    users = api.get("/api/v1/users", headers={"Authorization": f"Bearer {tenant.token}"})
    assert users.status_code == 200
