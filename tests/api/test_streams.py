"""Delivery progress pushed, and pollers that cost a 304: an order followed over
server-sent events from the platform's own HTTP server while the worker delivers it (every
stage arrives, then `end`), the CLI following the same way, and ETags on the catalog and
an instance. SQLite and PostgreSQL."""

from __future__ import annotations

import json
import threading

import httpx

from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import TenantCtx, auth
from gpulease.testing.servers import LiveServer
from gpulease.worker.runner import Worker


def events(lines: list[str]) -> list[tuple[str, str]]:
    out, kind = [], ""
    for line in lines:
        if line.startswith("event: "):
            kind = line.removeprefix("event: ")
        elif line.startswith("data: "):
            out.append((kind, line.removeprefix("data: ")))
    return out


def test_a_delivery_is_pushed_stage_by_stage_until_ready(
    fleet: Platform, server: LiveServer, tenant: TenantCtx, key: str,
) -> None:
    view, _ = orders.place_order(fleet, tenant.principal, OrderRequest(
        sku="h100-80g-x8", region="ningxia-1", ssh_keys=[key]))
    url = f"{server.url}/api/v1/instances/{view.id}/events"
    lines: list[str] = []
    with httpx.stream("GET", url, headers=auth(tenant.token), params={"timeout": 60},
                      timeout=70) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith(
            "text/event-stream")
        worker = threading.Thread(target=Worker(fleet).run_until_idle,
                                  kwargs={"timeout_s": 60}, daemon=True)
        worker.start()
        for line in r.iter_lines():
            lines.append(line)
            if line.startswith("data: ") and lines[-2:-1] == ["event: end"]:
                break
        worker.join(60)
    got = events(lines)
    pushed = [json.loads(data) for kind, data in got if kind == "instance"]
    assert got[-1][0] == "end" and pushed[-1]["status"] == "ready"
    assert pushed[0]["status"] in ("pending", "deploying")  # at once, before any work
    ids = [line.removeprefix("id: ") for line in lines if line.startswith("id: ")]
    assert ids == [str(n) for n in range(1, len(pushed) + 1)]
    whole = httpx.get(f"{server.url}/api/v1/instances/{view.id}",
                      headers=auth(tenant.token)).json()
    assert pushed[-1]["stages"] == whole["stages"] and len(whole["stages"]) >= 3


def test_catalog_and_instance_answer_304_to_a_poller_that_has_them(
    fleet: Platform, server: LiveServer, tenant: TenantCtx, key: str,
) -> None:
    headers = auth(tenant.token)
    first = httpx.get(f"{server.url}/api/v1/catalog", headers=headers)
    tag = first.headers["etag"]
    assert tag.startswith('W/"')
    again = httpx.get(f"{server.url}/api/v1/catalog", headers={**headers,
                                                                "If-None-Match": tag})
    assert again.status_code == 304 and again.content == b""
    view, _ = orders.place_order(fleet, tenant.principal, OrderRequest(
        sku="h100-80g-x8", region="ningxia-1", ssh_keys=[key]))
    moved = httpx.get(f"{server.url}/api/v1/catalog", headers={**headers,
                                                                "If-None-Match": tag})
    assert moved.status_code == 200 and moved.headers["etag"] != tag  # stock changed
    url = f"{server.url}/api/v1/instances/{view.id}"
    one = httpx.get(url, headers=headers)
    assert httpx.get(url, headers={**headers, "If-None-Match": one.headers["etag"]}
                     ).status_code == 304
    bad = httpx.get(f"{url}/events", headers=headers, params={"until": "done"})
    assert bad.status_code == 422 and "until" in bad.text


def test_a_stream_ends_when_its_token_is_revoked(
    fleet: Platform, server: LiveServer, tenant: TenantCtx, key: str,
) -> None:
    """An open stream outlived a revoke by up to its timeout (3,600 s); now it ends within
    a few seconds of it, saying why."""
    import time

    from gpulease.services.accounts import identity as accounts

    view, _ = orders.place_order(fleet, tenant.principal, OrderRequest(
        sku="h100-80g-x8", region="ningxia-1", ssh_keys=[key]))
    spare = accounts.issue_token(fleet, tenant.principal, "watcher", None, 1)
    url = f"{server.url}/api/v1/instances/{view.id}/events"
    lines: list[str] = []
    with httpx.stream("GET", url, headers=auth(spare.secret()), params={"timeout": 60},
                      timeout=30) as r:
        assert r.status_code == 200
        revoked_at = None
        for line in r.iter_lines():
            lines.append(line)
            if revoked_at is None and line.startswith("data: "):  # the first view came
                accounts.revoke_token(fleet, tenant.principal, spare.id)
                revoked_at = time.monotonic()
            if line.startswith("data: ") and lines[-2:-1] == ["event: end"]:
                break
        assert revoked_at is not None and time.monotonic() - revoked_at < 10
    assert events(lines)[-1] == ("end", '{"unauthorized": "the token was revoked"}')
