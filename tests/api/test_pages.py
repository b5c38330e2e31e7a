"""Every list the API answers is a page object (`items`, `total`, `limit`, `offset`) that
takes `limit` and `offset`, as docs/api.md's Pagination says: read from the OpenAPI document
for every GET, then asked over HTTP for lists that once answered bare arrays. SQLite and
PostgreSQL."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from gpulease.api.app import create_app
from gpulease.platform import Platform
from gpulease.testing.callers import TenantCtx, auth
from gpulease.testing.factories import place
from gpulease.worker.runner import Worker

# Not lists in docs/api.md's sense: the node agent's command queue.
NOT_LISTS = {"/api/v1/agent/commands"}


def _json_schema(operation: dict[str, Any]) -> dict[str, Any] | None:
    content = operation.get("responses", {}).get("200", {}).get("content", {})
    found: dict[str, Any] | None = content.get("application/json", {}).get("schema")
    return found


def test_every_list_in_the_openapi_document_is_a_page_with_limit_and_offset(
        platform: Platform) -> None:
    doc = create_app(platform).openapi()
    arrays, unpaged, pages = [], [], 0
    for path, operations in doc["paths"].items():
        get = operations.get("get")
        schema = _json_schema(get) if get else None
        if schema is None:
            continue
        if schema.get("type") == "array" and path not in NOT_LISTS:
            arrays.append(path)
        if schema.get("$ref", "").startswith("#/components/schemas/Page_"):
            pages += 1
            params = {p["name"] for p in get.get("parameters", [])}
            if not {"limit", "offset"} <= params:
                unpaged.append(path)
    assert arrays == [], f"lists answered as bare arrays: {arrays}"
    assert unpaged == [], f"pages without limit and offset: {unpaged}"
    assert pages >= 30  # every list, counted: a page model that stopped being one shows here


def test_lists_that_were_arrays_answer_pages_a_slice_at_a_time(
        fleet: Platform, operator: TenantCtx, tenant: TenantCtx, key: str) -> None:
    iid = place(fleet, tenant, key)
    Worker(fleet).run_until_idle()
    with TestClient(create_app(fleet)) as client:
        for path, who in (("/api/v1/sites", operator), ("/api/v1/fabrics", operator),
                          ("/api/v1/racks", operator), ("/api/v1/nodes/counts", operator),
                          ("/api/v1/images", tenant), ("/api/v1/tokens", operator),
                          (f"/api/v1/instances/{iid}/acceptance", tenant),
                          (f"/api/v1/instances/{iid}/addons", tenant),
                          (f"/api/v1/instances/{iid}/backups", tenant),
                          (f"/api/v1/instances/{iid}/power", tenant),
                          ("/api/v1/idle", tenant), ("/api/v1/saved-images", tenant),
                          ("/api/v1/gpu-quotas", tenant), ("/api/v1/dunning", operator),
                          ("/api/v1/repairs", operator)):
            whole = client.get(path, params={"limit": 500}, headers=auth(who.token))
            assert whole.status_code == 200, (path, whole.text)
            body = whole.json()
            assert set(body) == {"items", "total", "limit", "offset"}, path
            assert body["total"] == len(body["items"]) and body["limit"] == 500, path
            second = client.get(path, params={"limit": 1, "offset": 1},
                                headers=auth(who.token)).json()
            assert second == {"items": body["items"][1:2], "total": body["total"],
                              "limit": 1, "offset": 1}, path
            too_big = client.get(path, params={"limit": 501}, headers=auth(who.token))
            assert too_big.status_code == 422 and too_big.json()["field"], path
