"""Quotes, wallet, top-ups and 402 over real HTTP, on SQLite and PostgreSQL."""

from __future__ import annotations

import httpx

from gpulease.platform import Platform
from gpulease.services.accounts import identity as accounts
from gpulease.testing.callers import TenantCtx, auth, new_tenant, ssh_key
from gpulease.testing.servers import LiveServer


def test_quote_over_http(fleet: Platform, server: LiveServer, tenant: TenantCtx) -> None:
    api = f"{server.url}/api/v1"
    q = httpx.post(f"{api}/quotes", headers=auth(tenant.token), json={
        "sku": "rtx4090-24g-x8", "region": "sichuan-2", "term": "month", "count": 3,
        "add": {"public-bandwidth": "50"}})
    assert q.status_code == 200
    body = q.json()
    assert body["lines"][0]["amount"] == "23760.00"
    assert body["lines"][1]["amount"] == "3750.00"  # 50 Mbps × 3 months × ¥25
    assert body["total"] == "27510.00" and body["vat_rate"] == "0.06"
    bad = httpx.post(f"{api}/quotes", headers=auth(tenant.token), json={
        "sku": "rtx4090-24g-x8", "region": "sichuan-2", "add": {"caviar": "1"}})
    assert bad.status_code == 422 and bad.json()["field"] == "add"
    assert "public-bandwidth" in bad.json()["accepted"]


def test_402_top_up_and_ledger_over_http(
    fleet: Platform, server: LiveServer, operator: TenantCtx
) -> None:
    api = f"{server.url}/api/v1"
    created = accounts.create_tenant(fleet, "broke", accounts.Person("broke@example.com", "Broke"))
    token, tid = created.token.token, created.tenant.id
    order = {"kind": "bare_metal", "sku": "rtx4090-24g-x8", "region": "sichuan-2",
             "ssh_keys": [ssh_key()]}
    refused = httpx.post(f"{api}/instances", headers=auth(token), json=order)
    assert refused.status_code == 402
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert refused.json()["missing"] == "7920.00" and "Top up" in refused.json()["detail"]
    assert httpx.get(f"{api}/instances", headers=auth(token)).json()["total"] == 0
    assert httpx.post(f"{api}/tenants/{tid}/top-ups", headers=auth(token), json={
        "amount": "10000", "reference": "x"}).status_code == 403
    nothing = httpx.post(f"{api}/tenants/{tid}/top-ups", headers=auth(operator.token),
                         json={"amount": "10000"})
    assert nothing.status_code == 422 and nothing.json()["field"] == "reference"
    paid = httpx.post(f"{api}/tenants/{tid}/top-ups", headers=auth(operator.token),
                      json={"amount": "10000", "reference": "wire-2026-11-30-01"})
    assert paid.status_code == 201 and paid.json()["balance"] == "10000.00"
    again = httpx.post(f"{api}/tenants/{tid}/top-ups", headers=auth(operator.token),
                       json={"amount": "10000", "reference": "wire-2026-11-30-01"})
    assert again.status_code == 409
    assert httpx.post(f"{api}/instances", headers=auth(token), json=order).status_code == 201
    wallet = httpx.get(f"{api}/wallet", headers=auth(token)).json()
    assert wallet["balance"] == "2080.00" and wallet["held"] == "7920.00"
    entries = httpx.get(f"{api}/wallet/ledger", headers=auth(token)).json()["items"]
    assert [(e["kind"], e["amount"]) for e in entries] == [("hold", "-7920.00"),
                                                           ("topup", "10000.00")]
    other = new_tenant(fleet, "nosy")
    assert httpx.get(f"{api}/wallet?tenant={tid}",
                     headers=auth(other.token)).status_code == 404
    assert httpx.get(f"{api}/wallet?tenant={tid}",
                     headers=auth(operator.token)).json()["balance"] == "2080.00"


def test_lease_renew_and_auto_renew_over_http(
    fleet: Platform, server: LiveServer, tenant: TenantCtx
) -> None:
    from gpulease.worker.runner import Worker

    api, h = f"{server.url}/api/v1", auth(tenant.token)
    iid = httpx.post(f"{api}/instances", headers=h, json={
        "kind": "bare_metal", "sku": "rtx4090-24g-x8", "region": "sichuan-2",
        "ssh_keys": [ssh_key()]}).json()["id"]
    assert httpx.get(f"{api}/instances/{iid}/lease", headers=h).status_code == 409  # not yet
    Worker(fleet).run_until_idle()
    lease = httpx.get(f"{api}/instances/{iid}/lease", headers=h).json()
    assert lease["status"] == "active" and lease["unit_price"] == "7920.00"
    renewed = httpx.post(f"{api}/instances/{iid}/renew", headers=h, json={"periods": 2})
    assert renewed.status_code == 200 and renewed.json()["periods"] == 3
    bad = httpx.post(f"{api}/instances/{iid}/renew", headers=h, json={"term": "week"})
    assert bad.status_code == 422 and bad.json()["field"] == "term"
    on = httpx.put(f"{api}/instances/{iid}/auto-renew", headers=h, json={"auto_renew": True})
    assert on.json()["auto_renew"] is True
